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
//! trigger.
//!
//! Live state comes from watches opened once ([`crate::live::watch`]), so a run reads memory, not
//! the API server; when a watched object changes under the agent (drift, health), the watches fire
//! a [`Trigger::ClusterChange`] naming the cluster, and only that cluster of the revision already
//! loaded is reconciled again, without going to the Git remote.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_layout::{Fleet, RenderCache, Tree, load_fetched};
use kube::Client;
use tokio::task::JoinSet;
use tracing::{error, info, warn};

use crate::leader::{Election, LeaderConfig};
use crate::reconcile::{Agent, Drift, Kind, Options, ReconcileError, Run, Scope, unix_now};
use crate::schedule::{Finished, Queue};
use crate::serve::{
    Cause, Metrics, ReadyFlag, ReconcileResult, ServerConfig, ServerState, Stage, Trigger, channel,
};
use crate::source::release::ReleaseFetcher;
use crate::source::{GitRef, GitSource, SourceConfig};
use crate::status::Phase;

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

/// Runs until `shutdown` resolves.
pub async fn run(
    client: Client,
    cfg: RunConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    run_with(client, cfg, Arc::new(Metrics::new()), shutdown).await
}

/// [`run`], reporting into `metrics` (which the client's request counter may already feed).
pub async fn run_with(
    client: Client,
    cfg: RunConfig,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let ready = ReadyFlag::new();
    let (tx, rx) = channel();
    let mut rx = rx.with_debounce(Duration::from_millis(100));
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
    if let (Some(g), Repo::Git(sc)) = (&cfg.github, &cfg.repo) {
        let queue = crate::github::pr::PrQueue::default();
        server_cfg = server_cfg.with_pull_requests(queue.clone(), g.pr_forks);
        let planner = crate::github::pr::Planner {
            source: sc.clone(),
            management: cfg.management.clone(),
            github: g.github.clone(),
            client: client.clone(),
            metrics: metrics.clone(),
        };
        tokio::spawn(planner.run(queue));
        info!(repo = %g.github.repo(), "planning pull requests and posting commit statuses on GitHub");
    }
    let state = ServerState::new(server_cfg, tx.clone(), metrics.clone(), ready.clone());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
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
            let mut stop = stop_rx.clone();
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
        let mut stop = stop_rx.clone();
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
    let agent = {
        let tx = tx.clone();
        Agent::connect(client.clone()).await?.with_watches(Arc::new(
            move |_kind: &str, cluster: Option<&str>| {
                tx.fire(Trigger::ClusterChange(cluster.map(str::to_string)))
            },
        ))
    };
    let agent = Arc::new(agent);
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

    // Followers serve probes, metrics and webhooks (forwarded to the leader) until they lead.
    let mut election = match &cfg.leader {
        None => None,
        Some(lc) => {
            let mut e = Election::join(client.clone(), lc).await?;
            ready.set_ready(true);
            info!(identity = %lc.identity, lease = %lc.lease, "joined the leader election");
            let mut stop = stop_rx.clone();
            let leading = loop {
                tokio::select! {
                    _ = e.acquired() => break true,
                    batch = rx.next() => match batch {
                        Some(batch) => {
                            for t in batch.iter().filter(|t| matches!(t, Trigger::Webhook { .. })) {
                                match crate::leader::forward(&client, lc, t).await {
                                    Ok(()) => info!(trigger = ?t, "push forwarded to the leader"),
                                    Err(e) => warn!(error = %e, "forwarding a push to the leader failed"),
                                }
                            }
                            received(&metrics, &batch);
                        }
                        None => break false,
                    },
                    _ = stop.wait_for(|s| *s) => break false,
                }
            };
            if !leading {
                e.release().await;
                let _ = stop_tx.send(true);
                for s in servers {
                    let _ = s.await;
                }
                return Ok(());
            }
            info!(identity = %lc.identity, "became the leader");
            crate::leader::watch_forwarded(client.clone(), lc, leader_tx.clone());
            // The poll timer's first tick went to the follower: load the revision now.
            leader_tx.fire(Trigger::Manual);
            Some(e)
        }
    };
    metrics.set_leader(true);
    drop(leader_tx);
    tokio::spawn({
        let agent = agent.clone();
        async move { agent.warm_up().await }
    });

    let mut source = match &cfg.repo {
        Repo::Git(sc) => {
            let sc = sc.clone();
            Some(tokio::task::spawn_blocking(move || GitSource::open(sc)).await??)
        }
        Repo::WorkingCopy(_) => None,
    };
    let ca_file = cfg.ca_file.clone();
    let mut fetcher = Some(
        tokio::task::spawn_blocking(move || {
            ReleaseFetcher::new(&ReleaseFetcher::default_cache_dir(), ca_file.as_deref())
        })
        .await??,
    );
    let mut stop = stop_rx.clone();
    let mut renders = RenderCache::default();
    let mut current: Option<Current> = None;
    let mut queue = Queue::new(cfg.concurrency);
    let mut runs: JoinSet<RunResult> = JoinSet::new();
    let mut running: HashMap<tokio::task::Id, String> = HashMap::new();
    let mut phases = Phases::default();
    // Clusters whose upgrade the fleet's waves hold: when another cluster's phase moves (the
    // canary Ready, a slot of maxUnavailable free), they look again at once.
    let mut paced: BTreeSet<String> = BTreeSet::new();
    let mut lost = false;
    loop {
        metrics.set_queue(queue.queued(), queue.running(), queue.rechecks());
        let due = queue.next_due();
        let wake = tokio::select! {
            b = rx.next() => match b {
                Some(b) => Wake::Triggers(b),
                None => break,
            },
            Some(done) = runs.join_next_with_id(), if !runs.is_empty() => Wake::Finished(Box::new(done)),
            _ = sleep_until(due), if due.is_some() => Wake::Due,
            _ = stop.wait_for(|s| *s) => break,
            _ = lost_lease(&mut election) => {
                error!("lost the leader Lease: stopping, another replica may be reconciling already");
                metrics.set_leader(false);
                lost = true;
                break;
            }
        };
        match wake {
            Wake::Due => {}
            Wake::Finished(done) => {
                let (name, took, result) = match *done {
                    Ok((_, r)) => r,
                    Err(e) => {
                        // A panicking run: counted as a failure of its cluster.
                        let name = running.remove(&e.id()).unwrap_or_default();
                        error!(cluster = %name, error = %e, "reconcile panicked");
                        let after = queue.finish(&name, false, Instant::now(), fastrand::f64());
                        metrics.inc_reconcile(ReconcileResult::Failure);
                        if let Finished::Retry(_) = after {
                            metrics.inc_retry();
                        }
                        continue;
                    }
                };
                running.retain(|_, n| *n != name);
                let ok = matches!(&result, Ok(run) if run.outcome.phase != Phase::Failed);
                let after = queue.finish(&name, ok, Instant::now(), fastrand::f64());
                metrics.inc_reconcile(if ok {
                    ReconcileResult::Success
                } else {
                    ReconcileResult::Failure
                });
                let retry = match after {
                    Finished::Retry(d) => {
                        metrics.inc_retry();
                        Some(d)
                    }
                    _ => None,
                };
                let revision = current.as_ref().map_or("", |c| c.revision.as_str());
                match result {
                    Ok(run) => {
                        for (a, n) in run.outcome.plan.counts() {
                            metrics.add_objects(object_action(a), n as u64);
                        }
                        // A cluster waiting for a stage or its wave, or with held prunes, is
                        // looked at again after a while, one held for a maintenance window when
                        // the window opens.
                        if retry.is_none()
                            && let Some(d) = run.outcome.recheck_in(unix_now())
                        {
                            queue.recheck(&name, Instant::now() + d);
                        }
                        match &run.outcome.paced {
                            Some(hold) => {
                                metrics.inc_upgrade_held(hold.reason.into());
                                paced.insert(name.clone());
                            }
                            None => {
                                paced.remove(&name);
                            }
                        }
                        if let Some(cur) = current.as_ref()
                            && let Some(scope) = cur.scope.as_ref()
                        {
                            let census = agent.wave_census(&cur.fleet, scope);
                            metrics.set_waves(census.iter().map(|(w, s, n)| (w.as_str(), *s, *n)));
                        }
                        let was = phases.insert(&name, run.outcome.phase);
                        if was != Some(run.outcome.phase) {
                            // Queued as a watch event queues them, after their management
                            // cluster; not after the cluster that moved: two held clusters
                            // waking each other would each wait for the other.
                            let now = Instant::now();
                            let mgmt = current
                                .as_ref()
                                .and_then(|c| c.scope.as_ref())
                                .map(|s| s.management().to_string());
                            for w in paced.iter().filter(|w| **w != name) {
                                queue.enqueue(w, mgmt.as_deref(), false, now);
                            }
                        }
                        // Workload clusters hold while their management cluster upgrades
                        // itself: when its phase moves, they look again.
                        if let Some(scope) = current.as_ref().and_then(|c| c.scope.as_ref())
                            && scope.management() == name
                            && was != Some(run.outcome.phase)
                        {
                            let now = Instant::now();
                            for w in scope.workloads() {
                                queue.enqueue(w, Some(&name), false, now);
                            }
                        }
                        if let Some(st) = &statuses
                            && is_commit(revision)
                        {
                            st.report(revision, &name, run.outcome.phase, &run.outcome.message);
                        }
                        let (rss, peak) = (memory_kib("VmRSS:"), memory_kib("VmHWM:"));
                        metrics.set_resident_memory(rss * 1024);
                        info!(cluster = %name, revision = %revision, phase = %run.outcome.phase.as_str(), message = %run.outcome.message, writes = run.writes, reads = run.reads, elapsed_ms = took.as_millis() as u64, retry_in_ms = retry.map(|d| d.as_millis() as u64), queued = queue.queued(), running = queue.running(), rss_mib = rss / 1024, peak_rss_mib = peak / 1024, "reconciled");
                    }
                    Err(e) => {
                        phases.insert(&name, Phase::Failed);
                        if let Some(st) = &statuses
                            && is_commit(revision)
                        {
                            st.report(revision, &name, Phase::Failed, &e.to_string());
                        }
                        error!(cluster = %name, revision = %revision, error = %e, elapsed_ms = took.as_millis() as u64, retry_in_ms = retry.map(|d| d.as_millis() as u64), "reconcile failed");
                    }
                }
                phases.publish(&metrics);
            }
            Wake::Triggers(batch) => {
                let started = Instant::now();
                let kinds: BTreeSet<&str> = batch.iter().map(Trigger::kind).collect();
                // Only clusters changed: the loaded revision again, no Git round trip.
                let cluster_only = batch.iter().all(|t| matches!(t, Trigger::ClusterChange(_)));
                let reload = !cluster_only || current.is_none();
                // A new revision, or an edit or push someone made on purpose, cuts a failing
                // cluster's backoff short; a poll that finds the same commit does not.
                let mut urgent = false;
                // The clusters this revision changed: reconciled ahead of those it only asks to
                // confirm (none on the first load, when there is nothing to compare with).
                let mut changed: BTreeSet<String> = BTreeSet::new();
                // How long this trigger's load and preparation took (0: not done for it).
                let (mut load_ms, mut prepare_ms) = (0u64, 0u64);
                if reload {
                    let Some((fleet, revision)) =
                        load(&cfg.repo, &mut source, &mut fetcher, &mut renders, &metrics).await?
                    else {
                        metrics.inc_reconcile(ReconcileResult::Failure);
                        received(&metrics, &batch);
                        continue;
                    };
                    load_ms = started.elapsed().as_millis() as u64;
                    let why = cause(&batch);
                    metrics.inc_revision(why);
                    urgent = why != Cause::Poll
                        || current.as_ref().is_none_or(|c| c.revision != revision);
                    if let Some(before) = current.as_ref() {
                        changed = fleet
                            .changed_since(&before.fleet)
                            .into_iter()
                            .map(str::to_string)
                            .collect();
                    }
                    current = Some(Current {
                        fleet: Arc::new(fleet),
                        revision,
                        opts: Arc::new(Options::default()),
                        scope: None,
                    });
                }
                let Some(cur) = current.as_mut() else {
                    received(&metrics, &batch);
                    continue;
                };
                let named: BTreeSet<&str> = batch
                    .iter()
                    .filter_map(|t| match t {
                        Trigger::ClusterChange(Some(c)) => Some(c.as_str()),
                        _ => None,
                    })
                    .collect();
                let everything = reload
                    || cur.scope.is_none()
                    || batch
                        .iter()
                        .any(|t| matches!(t, Trigger::ClusterChange(None)));
                // Watch events naming clusters of the revision already prepared: its scope
                // stands (the same fleet, its kinds watched, its namespaces ensured, the live
                // state shared with the watches), so only those clusters are queued. Preparing
                // again would walk the whole fleet once per event.
                let scope = match (&cur.scope, everything) {
                    (Some(scope), false) => {
                        agent.refresh();
                        scope.clone()
                    }
                    _ => {
                        let mut opts = Options {
                            revision: cur.revision.clone(),
                            management: cfg.management.clone(),
                            drift: cfg.drift,
                            concurrency: cfg.concurrency,
                            ..Default::default()
                        };
                        cfg.upgrade.apply(&mut opts);
                        cur.opts = Arc::new(opts);
                        // Cheap with the watches: memory reads, and writes only for a missing
                        // namespace.
                        let t = Instant::now();
                        match agent.prepare(&cur.fleet, &cur.opts).await {
                            Ok(s) => {
                                metrics.observe_stage(Stage::Plan, t.elapsed());
                                prepare_ms = t.elapsed().as_millis() as u64;
                                Arc::new(s)
                            }
                            Err(e) => {
                                metrics.inc_reconcile(ReconcileResult::Failure);
                                error!(revision = %cur.revision, error = %e, "preparing the revision failed; retrying on the next trigger");
                                cur.scope = None;
                                received(&metrics, &batch);
                                continue;
                            }
                        }
                    }
                };
                ready.set_ready(true);
                let now = Instant::now();
                let mgmt = scope.management().to_string();
                let names: BTreeSet<&str> = scope.clusters().map(|(n, _)| n).collect();
                for (name, kind) in scope.clusters() {
                    if !everything && !named.contains(name) {
                        continue;
                    }
                    let after = (kind == Kind::Workload).then_some(mgmt.as_str());
                    // The changed clusters go first, and with them the management cluster the
                    // changed workloads wait for (its run, a no-op when it did not change, is
                    // not left behind the fleet's confirmations).
                    let first =
                        changed.contains(name) || (kind == Kind::Management && !changed.is_empty());
                    if first {
                        queue.enqueue_first(name, after, now);
                    } else {
                        queue.enqueue(name, after, urgent, now);
                    }
                }
                phases.retain(|n| {
                    let keep = names.contains(n);
                    if !keep {
                        queue.forget(n);
                    }
                    keep
                });
                phases.publish(&metrics);
                // Queued first, counted received after: who sees every trigger received and
                // nothing queued or running knows the daemon is idle.
                metrics.set_queue(queue.queued(), queue.running(), queue.rechecks());
                received(&metrics, &batch);
                info!(revision = %cur.revision, triggers = ?kinds, clusters = names.len(), changed = changed.len(), queued = queue.queued(), running = queue.running(), load_ms, prepare_ms, elapsed_ms = started.elapsed().as_millis() as u64, "queued");
                cur.scope = Some(scope);
            }
        }
        // Start what is due, up to the concurrency cap.
        let Some(cur) = current.as_ref() else {
            continue;
        };
        let Some(scope) = cur.scope.as_ref() else {
            continue;
        };
        let ready = queue.take_ready(Instant::now());
        for name in ready {
            let (agent, fleet, opts, scope) = (
                agent.clone(),
                cur.fleet.clone(),
                cur.opts.clone(),
                scope.clone(),
            );
            let task_name = name.clone();
            let handle = runs.spawn(async move {
                let t = Instant::now();
                let r = agent
                    .reconcile_cluster(&fleet, &opts, &scope, &task_name)
                    .await;
                (task_name, t.elapsed(), r)
            });
            running.insert(handle.id(), name);
        }
    }
    let _ = stop_tx.send(true);
    runs.shutdown().await;
    if let Some(e) = election {
        e.release().await;
    }
    for s in servers {
        let _ = s.await;
    }
    if lost {
        anyhow::bail!("lost the leader Lease");
    }
    Ok(())
}

/// Resolves when this replica loses the Lease; never without leader election.
async fn lost_lease(election: &mut Option<Election>) {
    match election {
        Some(e) => e.lost().await,
        None => std::future::pending().await,
    }
}

/// The revision being reconciled.
struct Current {
    fleet: Arc<Fleet>,
    revision: String,
    opts: Arc<Options>,
    /// `None` until prepared (or after preparing failed).
    scope: Option<Arc<Scope>>,
}

/// A cluster's run as its task returns it: the cluster, how long the run took, its outcome.
type RunResult = (String, Duration, Result<Run, ReconcileError>);

/// What woke the daemon.
enum Wake {
    Triggers(Vec<Trigger>),
    Finished(Box<Result<(tokio::task::Id, RunResult), tokio::task::JoinError>>),
    Due,
}

async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
        None => std::future::pending().await,
    }
}

/// Counts a batch's triggers as received (after what they caused is queued).
fn received(metrics: &Metrics, batch: &[Trigger]) {
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
fn cause(batch: &[Trigger]) -> Cause {
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

/// Each cluster's last phase, and how many clusters are in each: kept as runs finish, not
/// recounted over the fleet after every run (ten thousand runs over ten thousand clusters).
#[derive(Default)]
struct Phases {
    of: BTreeMap<String, Phase>,
    counts: BTreeMap<&'static str, i64>,
}

impl Phases {
    /// Records `name`'s phase; returns the one before.
    fn insert(&mut self, name: &str, phase: Phase) -> Option<Phase> {
        let was = match self.of.get_mut(name) {
            Some(p) => Some(std::mem::replace(p, phase)),
            None => {
                self.of.insert(name.to_string(), phase);
                None
            }
        };
        if let Some(w) = was {
            self.uncount(w);
        }
        *self.counts.entry(phase.as_str()).or_default() += 1;
        was
    }

    fn uncount(&mut self, phase: Phase) {
        if let Some(n) = self.counts.get_mut(phase.as_str()) {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(phase.as_str());
            }
        }
    }

    /// Forgets the clusters `keep` refuses.
    fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        let mut gone = Vec::new();
        self.of.retain(|n, p| {
            let k = keep(n);
            if !k {
                gone.push(*p);
            }
            k
        });
        for p in gone {
            self.uncount(p);
        }
    }

    /// Sets the clusters-by-phase gauge.
    fn publish(&self, metrics: &Metrics) {
        metrics.set_cluster_phases(self.counts.iter().map(|(k, v)| (*k, *v)));
    }
}

/// Reads the newest revision: the Git source synced (the last good revision kept while the
/// remote is unreachable), or the working copy read; then validated and rendered. `None` when
/// there is nothing to reconcile (logged).
/// Loads a tree's fleet, fetching the release documents its fleet configs name (off the
/// runtime threads: the fetcher blocks).
async fn load_release(
    tree: &Tree,
    fetcher: &mut Option<ReleaseFetcher>,
    renders: &mut RenderCache,
) -> anyhow::Result<Fleet> {
    let f = fetcher
        .as_mut()
        .expect("the fetcher is put back after every round");
    // A failure of an earlier pass is retried.
    f.fetched.failures.clear();
    let mut fleet = load_fetched(tree, &f.fetched, renders);
    for _ in 0..crate::source::release::MAX_ROUNDS {
        let mut f = fetcher
            .take()
            .expect("the fetcher is put back after every round");
        let wanted = f.wanted(&fleet);
        if wanted.is_empty() {
            *fetcher = Some(f);
            break;
        }
        let f = tokio::task::spawn_blocking(move || {
            f.fetch(wanted);
            f
        })
        .await?;
        fleet = load_fetched(tree, &f.fetched, renders);
        *fetcher = Some(f);
    }
    Ok(fleet)
}

async fn load(
    repo: &Repo,
    source: &mut Option<GitSource>,
    fetcher: &mut Option<ReleaseFetcher>,
    renders: &mut RenderCache,
    metrics: &Metrics,
) -> anyhow::Result<Option<(Fleet, String)>> {
    let t = Instant::now();
    let loaded = match (repo, source.take()) {
        (Repo::Git(_), Some(mut src)) => {
            let (src_back, result) = tokio::task::spawn_blocking(move || {
                let r = src.sync().map(|_| ());
                (src, r)
            })
            .await?;
            if let Err(e) = result {
                // Keep serving the last good revision while the remote is unreachable.
                warn!(error = %e, "source unavailable; reconciling the last good revision");
            }
            metrics.observe_stage(Stage::Source, t.elapsed());
            // Loaded from the source's own copy of the tree: no second copy.
            let t = Instant::now();
            let out = match src_back.last_good() {
                Some(r) => Some((
                    load_release(&r.tree, fetcher, renders).await?,
                    r.commit.clone(),
                )),
                None => None,
            };
            metrics.observe_stage(Stage::Render, t.elapsed());
            *source = Some(src_back);
            out
        }
        (Repo::WorkingCopy(path), _) => match Tree::from_dir(path) {
            Ok(tree) => {
                metrics.observe_stage(Stage::Source, t.elapsed());
                let t = Instant::now();
                let fleet = load_release(&tree, fetcher, renders).await?;
                metrics.observe_stage(Stage::Render, t.elapsed());
                Some((fleet, "local".to_string()))
            }
            Err(e) => {
                error!(error = %e, "reading the working copy");
                None
            }
        },
        (Repo::Git(_), None) => unreachable!("the source is put back after every sync"),
    };
    // The validated specs stay: a chained upgrade renders its steps from them
    // (`capstan_layout::step`).
    Ok(loaded)
}

/// Whether a revision label is a commit id (a working copy's "local" gets no status).
fn is_commit(revision: &str) -> bool {
    revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A memory figure of this process from /proc (KiB; 0 where there is no /proc).
fn memory_kib(field: &str) -> u64 {
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

fn object_action(a: crate::plan::Action) -> crate::serve::ObjectAction {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phase_counts_follow_every_change() {
        // Random phases recorded and clusters forgotten; after each step the kept counts agree
        // with a count over every cluster.
        let mut rng = fastrand::Rng::with_seed(11);
        let all = [Phase::Ready, Phase::Failed, Phase::Orphaned, Phase::Unknown];
        let mut phases = Phases::default();
        for step in 0..2_000 {
            let name = format!("w{}", rng.usize(..8));
            if rng.u8(..5) == 0 {
                phases.retain(|n| n != name);
            } else {
                phases.insert(&name, all[rng.usize(..all.len())]);
            }
            let mut counted = BTreeMap::<&str, i64>::new();
            for p in phases.of.values() {
                *counted.entry(p.as_str()).or_default() += 1;
            }
            assert_eq!(phases.counts, counted, "step {step}");
        }
    }
}
