//! `capstan run`: the agent as a service.
//!
//! ```text
//! poll timer ──┐
//! webhook  ────┼─▶ coalescing trigger ─▶ sync source ─▶ load fleet ─▶ reconcile ─▶ metrics
//! local edits ─┘      (a burst = one pass)   (last good revision kept when the remote is down)
//! ```
//!
//! One pass at a time, always of the newest revision: triggers that arrive during a pass are
//! merged into the next one, so a burst of pushes is one reconcile, never a storm. A pass that
//! fails (remote down, API server unreachable) is logged and counted; the agent keeps serving
//! probes and retries on the next trigger.
//!
//! Live state comes from watches opened once ([`crate::live::watch`]), so a pass reads memory, not
//! the API server; when a watched object changes under the agent (drift, health), the watches fire
//! a [`Trigger::ClusterChange`], and the revision already loaded is reconciled again without
//! going to the Git remote.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_layout::{Fleet, RenderCache, Tree, load_cached};
use kube::Client;
use tracing::{error, info, warn};

use crate::reconcile::{Agent, Drift, Options};
use crate::serve::{
    Metrics, ReadyFlag, ReconcileResult, ServerConfig, ServerState, Stage, Trigger, channel,
};
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
    let server_cfg = {
        let c = ServerConfig::new(&cfg.branch);
        match &cfg.webhook_secret {
            Some(s) => c.with_webhook_secret(s.clone()),
            None => c,
        }
    };
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
        Agent::connect(client)
            .await?
            .with_watches(Arc::new(move |_kind: &str| tx.fire(Trigger::ClusterChange)))
    };
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
    drop(tx);

    let mut source = match &cfg.repo {
        Repo::Git(sc) => {
            let sc = sc.clone();
            Some(tokio::task::spawn_blocking(move || GitSource::open(sc)).await??)
        }
        Repo::WorkingCopy(_) => None,
    };
    let mut stop = stop_rx.clone();
    let mut renders = RenderCache::default();
    let mut loaded: Option<(Fleet, String)> = None;
    loop {
        let batch = tokio::select! {
            b = rx.next() => b,
            _ = stop.wait_for(|s| *s) => None,
        };
        let Some(batch) = batch else { break };
        let started = Instant::now();
        let kinds: std::collections::BTreeSet<&str> = batch.iter().map(Trigger::kind).collect();
        // Only the cluster changed: the loaded revision again, no Git round trip.
        let cluster_only = batch.iter().all(|t| matches!(t, Trigger::ClusterChange));
        let (fleet, revision) = match loaded.take() {
            Some(l) if cluster_only => l,
            previous => {
                // The old revision's fleet goes before the new one is loaded: never two at once.
                drop(previous);
                let t = Instant::now();
                let loaded_now = match (&cfg.repo, source.take()) {
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
                        let out = src_back
                            .last_good()
                            .map(|r| (load_cached(&r.tree, &mut renders), r.commit.clone()));
                        metrics.observe_stage(Stage::Render, t.elapsed());
                        source = Some(src_back);
                        out
                    }
                    (Repo::WorkingCopy(path), _) => match Tree::from_dir(path) {
                        Ok(tree) => {
                            metrics.observe_stage(Stage::Source, t.elapsed());
                            let t = Instant::now();
                            let fleet = load_cached(&tree, &mut renders);
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
                let Some((mut fleet, revision)) = loaded_now else {
                    metrics.inc_reconcile(ReconcileResult::Failure);
                    continue;
                };
                // The validated specs are not needed once rendered (the objects are): about 20 KiB a
                // cluster the agent would otherwise hold between passes.
                for c in &mut fleet.clusters {
                    c.cluster = None;
                }
                (fleet, revision)
            }
        };
        let opts = Options {
            revision: revision.clone(),
            management: cfg.management.clone(),
            drift: cfg.drift,
            concurrency: cfg.concurrency,
            ..Default::default()
        };
        let t = Instant::now();
        let result = agent.reconcile(&fleet, &opts).await;
        loaded = Some((fleet, revision.clone()));
        match result {
            Ok(out) => {
                metrics.observe_stage(Stage::Apply, t.elapsed());
                for c in &out.clusters {
                    for (a, n) in c.plan.counts() {
                        metrics.add_objects(object_action(a), n as u64);
                    }
                }
                let mut phases = std::collections::BTreeMap::<&str, i64>::new();
                for c in &out.clusters {
                    *phases.entry(c.phase.as_str()).or_default() += 1;
                }
                metrics.set_cluster_phases(phases.iter().map(|(k, v)| (*k, *v)));
                let failed = out
                    .clusters
                    .iter()
                    .filter(|c| c.phase == Phase::Failed)
                    .count();
                metrics.inc_reconcile(if failed == 0 {
                    ReconcileResult::Success
                } else {
                    ReconcileResult::Failure
                });
                ready.set_ready(true);
                let (rss, peak) = (memory_kib("VmRSS:"), memory_kib("VmHWM:"));
                metrics.set_resident_memory(rss * 1024);
                info!(revision = %revision, triggers = ?kinds, clusters = out.clusters.len(), failed, writes = out.writes, reads = out.reads, elapsed_ms = started.elapsed().as_millis() as u64, rss_mib = rss / 1024, peak_rss_mib = peak / 1024, "reconciled");
            }
            Err(e) => {
                metrics.inc_reconcile(ReconcileResult::Failure);
                error!(revision = %revision, error = %e, "reconcile failed");
            }
        }
    }
    let _ = stop_tx.send(true);
    for s in servers {
        let _ = s.await;
    }
    Ok(())
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
    }
}
