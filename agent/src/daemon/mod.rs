//! `capstan run`: the agent as a service.
//!
//! ```text
//! poll timer ──┐
//! webhook  ────┼─▶ coalescing trigger ─▶ sync source ─▶ load fleet ─▶ prepare ─▶ queue every cluster
//! local edits ─┘      (a burst = one load)  (last good revision kept when the remote is down)
//! watch event on cluster X ─────────────────────────────────────────▶ prepare ─▶ queue X
//!                                                                          queue ─▶ reconcile_cluster,
//!                                                                                   `--concurrency` at a time
//! ```
//!
//! Each cluster is reconciled on its own ([`crate::schedule::Queue`]): a cluster whose control
//! plane rolls or whose Cluster API objects are being deleted is not waited for (its watch events
//! bring it back), a failing one backs off exponentially with jitter without slowing the others,
//! and triggers for a cluster already queued or running are merged. Workload clusters of a new
//! revision start after their management cluster's run (its objects include the EKS-A releases
//! they refer to). The clusters a revision changed, and their management cluster, run ahead
//! of the rest, and nothing else starts while they run (for a few seconds at most): a push's
//! change does not share the machine with ten thousand confirmations.
//!
//! Triggers that arrive while the daemon is busy are merged, so a burst of pushes loads one
//! revision, never a storm. A revision that cannot be loaded (remote down, API server
//! unreachable) is logged and counted; the agent keeps serving probes and retries on the next
//! trigger. With `--verify-commits`, a revision whose signature does not verify is refused the
//! same way ([`verify`]): the last verified revision is what is reconciled, and every cluster's
//! status, an Event and `capstan_commits_refused_total` say why.
//!
//! Live state comes from watches opened once ([`crate::live::watch`]), so a run reads memory, not
//! the API server; when a watched object changes under the agent (drift, health), the watches fire
//! a [`Trigger::ClusterChange`] naming the cluster, and only that cluster of the revision already
//! loaded is reconciled again, without going to the Git remote.

mod driver;
mod load;
mod phases;
pub mod position;
pub mod verify;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use tracing::{info, warn};

use crate::k8s::Fence;
use crate::leader::{Election, LeaderConfig};
use crate::reconcile::{Agent, Drift};
use crate::serve::{Cause, Metrics, ReadyFlag, ServerConfig, ServerState, Trigger, channel};
use crate::source::{GitRef, SourceConfig};
use crate::trigger::{TriggerReceiver, TriggerSender};

/// Where the fleet comes from.
#[derive(Debug, Clone)]
pub enum Repo {
    /// A Git remote (URL or path of a repository), followed at a ref.
    Git(SourceConfig),
    /// A local working copy, read as it is (with `--watch`, re-read on every change).
    WorkingCopy(PathBuf),
}

/// Configuration of the daemon.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The repository.
    pub repo: Repo,
    /// Poll interval.
    pub interval: Duration,
    /// Webhook listener.
    pub webhook_addr: Option<SocketAddr>,
    /// Metrics and probes listener.
    pub metrics_addr: Option<SocketAddr>,
    /// Where the read-only fleet dashboard listens (token-checked), if anywhere.
    pub dashboard_addr: Option<SocketAddr>,
    /// Users reach the dashboard over HTTPS (TLS ends in front of the agent): its session
    /// cookie is `Secure`, named with the `__Host-` prefix.
    pub dashboard_behind_tls: bool,
    /// Webhook secret (GitHub's X-Hub-Signature-256).
    pub webhook_secret: Option<Vec<u8>>,
    /// Branch the webhook listens for.
    pub branch: String,
    /// Watch a working copy for edits.
    pub watch: bool,
    /// Which management cluster this is.
    pub management: Option<String>,
    /// Drift policy.
    pub drift: Drift,
    /// Workload clusters reconciled at the same time.
    pub concurrency: usize,
    /// How upgrades are applied.
    pub upgrade: crate::cli::UpgradeArgs,
    /// Leader election (`None`: this process reconciles alone).
    pub leader: Option<LeaderConfig>,
    /// Extra CAs trusted for https release documents (fleet configs' release manifests).
    pub ca_file: Option<PathBuf>,
    /// GitHub: commit statuses for applied revisions and plans on pull requests.
    pub github: Option<GitHubRun>,
    /// Commit signature verification (`--verify-commits`; Git sources only).
    pub verify: Option<verify::VerifyConfig>,
    /// How phase-change notifications are sent (where to: the fleet config's `notifications`).
    pub notify: crate::notify::SenderConfig,
    /// Where every workload cluster's ClusterProfile is kept (`--cluster-profiles`).
    pub cluster_profiles: Option<String>,
}

/// What the daemon does with GitHub.
#[derive(Debug, Clone)]
pub struct GitHubRun {
    /// The client.
    pub github: crate::github::GitHub,
    /// Plan pull requests from forks too.
    pub pr_forks: bool,
}

/// Builds the Git source configuration from CLI values.
#[allow(clippy::too_many_arguments)]
pub fn git_config(
    url: String,
    branch: Option<String>,
    tag: Option<String>,
    commit: Option<String>,
    cache_dir: PathBuf,
    ssh_key: Option<PathBuf>,
    known_hosts: Option<PathBuf>,
    ca_file: Option<PathBuf>,
) -> SourceConfig {
    let reference = match (commit, tag) {
        (Some(c), _) => GitRef::Commit(c),
        (None, Some(t)) => GitRef::Tag(t),
        (None, None) => GitRef::Branch(branch.unwrap_or_else(|| "main".into())),
    };
    SourceConfig {
        url,
        reference,
        cache_dir,
        ssh_key,
        known_hosts,
        shallow: true,
        ca_file,
    }
}

/// Says at start, not at the first upgrade of the management cluster itself, when its backup
/// would be refused (no recipients) or is written unencrypted (chosen).
async fn warn_about_backups(client: &Client, cfg: &RunConfig) {
    match cfg.upgrade.backup_encryption.encryption() {
        crate::backup::Encryption::Plaintext => tracing::warn!(
            "backups are written UNENCRYPTED (--backup-plaintext): whoever reads the backup volume or its snapshots holds every cluster's keys"
        ),
        e => {
            if let Err(err) = e.recipients(client).await {
                tracing::warn!(error = %err, "a management cluster's upgrade of itself will wait until its backup can be encrypted");
            }
        }
    }
}

/// Runs until `shutdown` resolves.
pub async fn run(
    client: Client,
    cfg: RunConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    run_with(client, cfg, Arc::new(Metrics::new()), shutdown).await
}

/// [`run`], reporting into `metrics` (which the client's request counter may already feed).
///
/// Starts the servers and the poll timer, connects the agent with its watches, waits to lead
/// (with leader election), then hands over to the leader's loop ([`driver::Driver`]).
pub async fn run_with(
    client: Client,
    cfg: RunConfig,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let ready = ReadyFlag::new();
    // With leader election every write goes through the fence the election opens while this
    // replica leads and renews in time; the election itself talks through the unfenced client.
    let (lease_client, fence) = (client.clone(), Fence::shut());
    let client = match &cfg.leader {
        Some(_) => fence.guard(&client),
        None => client,
    };
    let (tx, rx) = channel();
    let mut rx = rx.with_debounce(Duration::from_millis(100));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut services = Services::start(&cfg, &metrics, &tx, &ready, &stop_rx).await?;
    let agent = {
        let tx = tx.clone();
        let agent = Agent::connect(client.clone()).await?.with_watches(Arc::new(
            move |_kind: &str, cluster: Option<&str>| {
                tx.fire(Trigger::ClusterChange(cluster.map(str::to_string)))
            },
        ));
        match &cfg.leader {
            Some(_) => agent.with_fence(fence.clone()),
            None => agent,
        }
    };
    let agent = Arc::new(agent);
    warn_about_backups(&lease_client, &cfg).await;
    services.serve_dashboard(&cfg, &agent, &stop_rx).await?;
    let _watcher = match (&cfg.repo, cfg.watch) {
        (Repo::WorkingCopy(path), true) => Some(crate::serve::watch_local(path, tx.clone())?),
        _ => None,
    };
    // The first trigger fires at once (the poll timer's first tick); shutdown closes the loop.
    {
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        });
    }
    let leader_tx = tx.clone();
    drop(tx);

    let mut election = match &cfg.leader {
        None => None,
        Some(lc) => {
            let follower = Follower {
                client: &lease_client,
                fence: fence.clone(),
                leader: lc,
                metrics: &metrics,
                ready: &ready,
                pulls: services.pulls.as_ref().map(|(_, q, _)| q),
            };
            match follower.wait(&mut rx, stop_rx.clone(), &leader_tx).await? {
                Some(e) => Some(e),
                None => {
                    services.stop(&stop_tx).await;
                    return Ok(());
                }
            }
        }
    };
    metrics.set_leader(true);
    drop(leader_tx);
    services.plan_pull_requests(&agent);
    tokio::spawn({
        let agent = agent.clone();
        async move { agent.warm_up().await }
    });

    let driver = driver::Driver::open(cfg, agent, metrics, ready, services.statuses.clone())
        .await?
        .publishing(services.followed.clone());
    let ended = driver.run(&mut rx, stop_rx, &mut election).await?;
    let _ = stop_tx.send(true);
    if let Some(e) = election {
        e.release().await;
    }
    services.stop(&stop_tx).await;
    match ended {
        driver::Ended::LostLease => anyhow::bail!("lost the leader Lease"),
        driver::Ended::Stopped => Ok(()),
    }
}

/// What serves beside the leader's loop, on followers too: the webhook and ops listeners, the
/// poll timer, and GitHub's commit statuses; and the pull-request planner, on the leader only.
struct Services {
    servers: Vec<tokio::task::JoinHandle<Result<(), crate::serve::ServerError>>>,
    statuses: Option<crate::github::notify::Statuses>,
    /// The planner, until the leader starts it, the queue the webhook fills, and the listing
    /// of what is open that the leader starts with.
    pulls: Option<(
        crate::github::pr::Planner,
        crate::github::pr::PrQueue,
        crate::github::resync::Resync,
    )>,
    /// The revision the leader follows, for the dashboard.
    followed: crate::dashboard::Published,
    /// The pull requests' plans as the dashboard shows them (the planner fills it).
    board: Option<crate::dashboard::board::Board>,
}

impl Services {
    /// Starts them; each stops when `stop` turns true.
    async fn start(
        cfg: &RunConfig,
        metrics: &Arc<Metrics>,
        tx: &TriggerSender,
        ready: &ReadyFlag,
        stop: &tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<Self> {
        let mut server_cfg = {
            let c = ServerConfig::new(&cfg.branch);
            match &cfg.webhook_secret {
                Some(s) => c.with_webhook_secret(s.clone()),
                None => c,
            }
        };
        // GitHub: statuses of applied revisions, and plans of pull requests on their own task (a
        // Git remote is needed to fetch their heads).
        let statuses = cfg
            .github
            .as_ref()
            .map(|g| crate::github::notify::Statuses::start(g.github.clone(), metrics.clone()));
        // Once at start: a warning (and a metric) when the credentials could push to the
        // repository whose branch is applied.
        if let Some(g) = &cfg.github {
            crate::github::access::check_at_start(g.github.clone(), metrics.clone());
        }
        let mut pulls = None;
        let followed = crate::dashboard::Published::default();
        // The pull requests' plans as the dashboard shows them (the planner fills it).
        let board = cfg
            .github
            .as_ref()
            .map(|_| crate::dashboard::board::Board::default());
        if let (Some(g), Repo::Git(sc)) = (&cfg.github, &cfg.repo) {
            let queue = crate::github::pr::PrQueue::default();
            server_cfg = server_cfg.with_pull_requests(queue.clone(), g.pr_forks);
            let planner = crate::github::pr::Planner {
                source: sc.clone(),
                management: cfg.management.clone(),
                github: g.github.clone(),
                metrics: metrics.clone(),
                board: board.clone().unwrap_or_default(),
            };
            let resync = crate::github::resync::Resync {
                github: g.github.clone(),
                board: planner.board.clone(),
                branch: cfg.branch.clone(),
                forks: g.pr_forks,
            };
            pulls = Some((planner, queue, resync));
            info!(repo = %g.github.repo(), "planning pull requests and posting commit statuses on GitHub");
        }
        let state = ServerState::new(server_cfg, tx.clone(), metrics.clone(), ready.clone());
        let mut servers = Vec::new();
        for (addr, router) in [
            (
                cfg.webhook_addr,
                crate::serve::webhook_router(state.clone()),
            ),
            (cfg.metrics_addr, crate::serve::ops_router(state.clone())),
        ] {
            if let Some(addr) = addr {
                let listener = crate::serve::bind(&addr.to_string()).await?;
                info!(addr = %listener.local_addr()?, "listening");
                let mut stop = stop.clone();
                servers.push(tokio::spawn(crate::serve::serve(
                    listener,
                    router,
                    async move {
                        let _ = stop.wait_for(|s| *s).await;
                    },
                )));
            }
        }
        // Poll timer.
        {
            let tx = tx.clone();
            let interval = cfg.interval;
            let mut stop = stop.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(interval);
                loop {
                    tokio::select! {
                        _ = tick.tick() => tx.fire(Trigger::Poll),
                        _ = stop.wait_for(|s| *s) => break,
                    }
                }
            });
        }
        Ok(Self {
            servers,
            statuses,
            pulls,
            followed,
            board,
        })
    }

    /// Starts planning pull requests (the leader's): with `agent`, the daemon's own, so a plan
    /// reads its watch cache; those already open are listed and planned again, as this
    /// leader's board starts empty.
    fn plan_pull_requests(&mut self, agent: &Arc<Agent>) {
        if let Some((planner, queue, resync)) = self.pulls.take() {
            resync.start(queue.clone());
            tokio::spawn(planner.run(queue, agent.clone()));
        }
    }

    /// Serves the dashboard, when asked for, from `agent`'s watch cache.
    async fn serve_dashboard(
        &mut self,
        cfg: &RunConfig,
        agent: &Arc<Agent>,
        stop: &tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        if let Some(addr) = cfg.dashboard_addr {
            let server = dashboard(
                cfg,
                agent,
                addr,
                self.board.clone(),
                self.followed.clone(),
                stop,
            )
            .await?;
            self.servers.push(server);
        }
        Ok(())
    }

    /// Stops them and waits for the listeners to close.
    async fn stop(self, stop: &tokio::sync::watch::Sender<bool>) {
        let _ = stop.send(true);
        for s in self.servers {
            let _ = s.await;
        }
    }
}

/// The dashboard on its own listener, on followers too (it writes nothing): every request's
/// token (its own, or its sign-in session's) reviewed by the API server
/// ([`crate::dashboard::access`]). It reads the agent's own watch
/// cache ([`crate::dashboard::Watched::start_shared`]), which on a follower it opens itself.
async fn dashboard(
    cfg: &RunConfig,
    agent: &Arc<Agent>,
    addr: SocketAddr,
    pulls: Option<crate::dashboard::board::Board>,
    followed: crate::dashboard::Published,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<tokio::task::JoinHandle<Result<(), crate::serve::ServerError>>> {
    let repo = match &cfg.repo {
        Repo::Git(sc) => Some(sc.url.clone()),
        _ => None,
    };
    let client = agent.client();
    let watched = match agent.live() {
        Some(live) => {
            let agent = agent.clone();
            crate::dashboard::Watched::start_shared(client, repo, live, move || {
                let agent = agent.clone();
                async move {
                    agent
                        .watch_for_dashboard(crate::dashboard::SHARED_KINDS)
                        .await
                }
            })
            .await
        }
        None => crate::dashboard::Watched::start(client, repo).await,
    };
    let access = crate::dashboard::access::Access::Reviewed {
        reviewer: Box::new(crate::dashboard::auth::Reviewer::new(client.clone())),
        https: cfg.dashboard_behind_tls,
    };
    let router = crate::dashboard::routes::router(crate::dashboard::server::Dashboard::new(
        watched,
        access,
        pulls,
        Some(followed),
    ));
    let listener = crate::serve::bind(&addr.to_string()).await?;
    info!(addr = %listener.local_addr()?, "serving the dashboard");
    let mut stop = stop.clone();
    Ok(tokio::spawn(crate::serve::serve(
        listener,
        router,
        async move {
            let _ = stop.wait_for(|s| *s).await;
        },
    )))
}

/// A replica that has not led yet: it serves probes, metrics and webhooks (pushes and pull
/// requests handed to the leader) until it acquires the Lease.
struct Follower<'a> {
    /// The unfenced client: the Lease's.
    client: &'a Client,
    /// The fence in front of everything else the replica writes.
    fence: Fence,
    leader: &'a LeaderConfig,
    metrics: &'a Metrics,
    ready: &'a ReadyFlag,
    /// The pull requests its webhook queues (with GitHub).
    pulls: Option<&'a crate::github::pr::PrQueue>,
}

impl Follower<'_> {
    /// Waits to lead. `Some`: leading, the leader's forwarded pushes watched and a first load
    /// triggered; `None`: stopped first (the Lease released).
    async fn wait(
        self,
        rx: &mut TriggerReceiver,
        mut stop: tokio::sync::watch::Receiver<bool>,
        leader_tx: &TriggerSender,
    ) -> anyhow::Result<Option<Election>> {
        let lc = self.leader;
        let mut e = Election::join(self.client.clone(), lc, self.fence.clone()).await?;
        self.ready.set_ready(true);
        info!(identity = %lc.identity, lease = %lc.lease, "joined the leader election");
        let leading = loop {
            tokio::select! {
                _ = e.acquired() => break true,
                batch = rx.next() => match batch {
                    Some(batch) => {
                        for t in batch.iter().filter(|t| matches!(t, Trigger::Webhook { .. })) {
                            match crate::leader::forward(self.client, lc, t).await {
                                Ok(()) => info!(trigger = ?t, "push forwarded to the leader"),
                                Err(e) => warn!(error = %e, "forwarding a push to the leader failed"),
                            }
                        }
                        received(self.metrics, &batch);
                    }
                    None => break false,
                },
                pr = crate::github::handover::next(self.pulls) => {
                    match crate::github::handover::hand_over(self.client, lc, &pr).await {
                        Ok(()) => info!(pr = pr.number, head = %pr.head_sha, "pull request handed over to the leader"),
                        Err(e) => warn!(error = %e, "handing a pull request to the leader failed"),
                    }
                }
                _ = stop.wait_for(|s| *s) => break false,
            }
        };
        if !leading {
            e.release().await;
            return Ok(None);
        }
        info!(identity = %lc.identity, "became the leader");
        crate::leader::watch_forwarded(self.client.clone(), lc, leader_tx.clone());
        if let Some(queue) = self.pulls {
            crate::github::handover::take_over(self.client.clone(), lc, queue.clone());
        }
        // The poll timer's first tick went to the follower: load the revision now.
        leader_tx.fire(Trigger::Manual);
        Ok(Some(e))
    }
}

/// Resolves when this replica loses the Lease; never without leader election.
pub(super) async fn lost_lease(election: &mut Option<Election>) {
    match election {
        Some(e) => e.lost().await,
        None => std::future::pending().await,
    }
}

pub(super) async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
        None => std::future::pending().await,
    }
}

/// Counts a batch's triggers as received (after what they caused is queued).
pub(super) fn received(metrics: &Metrics, batch: &[Trigger]) {
    for t in batch {
        metrics.inc_trigger(trigger_kind(t));
    }
}

fn trigger_kind(t: &Trigger) -> Cause {
    match t {
        Trigger::Poll => Cause::Poll,
        Trigger::Webhook { .. } => Cause::Webhook,
        Trigger::LocalChange => Cause::LocalChange,
        Trigger::Manual => Cause::Manual,
        Trigger::ClusterChange(_) => Cause::ClusterChange,
    }
}

/// What made a batch load a revision (the most specific trigger in it).
pub(super) fn cause(batch: &[Trigger]) -> Cause {
    let has = |k: &str| batch.iter().any(|t| t.kind() == k);
    if has("webhook") {
        Cause::Webhook
    } else if has("local_change") {
        Cause::LocalChange
    } else if has("manual") {
        Cause::Manual
    } else {
        Cause::Poll
    }
}

/// Whether a revision label is a commit id (a working copy's "local" gets no status).
pub(super) fn is_commit(revision: &str) -> bool {
    revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A memory figure of this process from /proc (KiB; 0 where there is no /proc).
pub(super) fn memory_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

pub(super) fn object_action(a: crate::plan::Action) -> crate::serve::ObjectAction {
    use crate::plan::Action;
    use crate::serve::ObjectAction as O;
    match a {
        Action::Create => O::Create,
        Action::Update => O::Update,
        Action::Unchanged => O::Unchanged,
        Action::Prune => O::Prune,
        Action::Skip => O::Skip,
        Action::Deleting => O::Deleting,
        Action::Conflict => O::Conflict,
        Action::Held => O::Held,
    }
}
