//! One reconcile pass over a fleet revision: plan → apply → prune → status, per cluster.
//!
//! ```text
//! Fleet (validated, rendered) ──┐
//! ManagedCluster inventories ───┼─▶ Live (lists, or the daemon's watches) ─▶ per cluster:
//!                               │      suspended?  → status Suspended, nothing else
//!                               │      tombstone?  → delete the Cluster; once it is gone, the rest
//!                               │      invalid?    → status Failed, last applied revision stays live
//!                               │      else plan → apply (CRDs and Namespaces first, CRDs
//!                               │           Established, then stage by stage, each object
//!                               │           after what it names) → prune → status
//! recorded but not in the repo ─┴─▶ Orphaned, nothing deleted
//! ```
//!
//! A revision is prepared once ([`Agent::prepare`]: records, scope, live state, namespaces) and
//! each cluster reconciled on its own ([`Agent::reconcile_cluster`]), never waiting on Cluster API
//! (a deletion or a rollout is left Deleting or Progressing for the watches to bring back). The
//! daemon queues clusters independently ([`crate::schedule`]); one-shot passes
//! ([`Agent::reconcile`]) run management clusters first (their objects include the EKS-A releases
//! workloads refer to), then the workload clusters, `concurrency` at a time.
//!
//! Costs: an object whose live copy carries the hash capstan applied and whose generation is the
//! one the server answered the apply with is unchanged without a request; anything else is
//! dry-run applied and compared. So a pass over an unchanged fleet makes one list per kind (none
//! at all with the daemon's watch-backed cache) and no writes. Conflict policy: capstan applies with `force`, taking ownership of the fields it
//! renders (the repository is the source of truth); fields it does not render (replicas under the
//! autoscaler, status, controller-set fields) are never sent and so never contested.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan_layout::{ClusterEntry, Fleet, Rendered, Role};
use futures::StreamExt;
use kube::Client;
use kube::api::Api;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::k8s::apply::apply_one;
use crate::k8s::{DiscoveryError, Resolver};
use crate::live::watch::{LiveCache, OnChange};
use crate::live::{self, Live, LiveError};
use crate::plan::fights::Fights;
use crate::plan::{self, ObjectRef, Plan};
use crate::status::{self, Phase, Recorded, StatusError};

pub mod addons;
mod decision;
mod pacing;
mod pass;
mod perform;
pub mod profile;
pub mod self_upgrade;
mod sops;
mod staging;

use decision::Decided;
use pass::Pass;
use pass::Purpose;

pub use crate::plan::planner::Drift;

/// Options of a pass.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Drift policy.
    pub drift: Drift,
    /// Only this cluster.
    pub only: Option<String>,
    /// The revision being reconciled (a commit, or "local").
    pub revision: String,
    /// The management cluster this agent runs on (default: the repository's only one). Only its
    /// own cluster and its workloads are reconciled; other management clusters have their agents.
    pub management: Option<String>,
    /// Workload clusters reconciled at the same time (0 and 1: one after the other).
    pub concurrency: usize,
    /// How upgrades proceed through their stages ([`crate::plan::stages`]).
    pub stages: crate::plan::stages::Settings,
    /// Refuse a control-plane jump of several minors instead of applying it as a chain of
    /// one-minor steps ([`crate::plan::chain`]).
    pub no_chain: bool,
    /// A stage not rolled out after this long fails the cluster (None: never).
    pub stage_timeout: Option<Duration>,
    /// Where a management cluster's backup goes before it upgrades itself (None: the
    /// default, [`crate::backup::default_backup_dir`]).
    pub backup_dir: Option<std::path::PathBuf>,
    /// How that backup is encrypted (default: to the recipients of the Secret
    /// `capstan-system/capstan-backup-recipients`; none there holds the self-upgrade).
    pub backup_encryption: crate::backup::Encryption,
    /// With `--verify-commits`: whether the revision verified, or the newest was refused
    /// (every status written says so, [`capstan_plan::decide::signed`]).
    pub signature: Option<capstan_plan::decide::Signature>,
    /// With `--cluster-profiles NAMESPACE`: every workload cluster's ClusterProfile is kept
    /// there ([`profile`]).
    pub cluster_profiles: Option<String>,
    /// The pass runs on a temporary cluster the management cluster was moved to for its
    /// deletion (`capstan back-out`): the management cluster's tombstone is carried out there,
    /// where it is never carried out on the management cluster itself.
    pub backing_out: bool,
    /// The Secret of the age identities SOPS-encrypted add-ons are decrypted with
    /// (`NAMESPACE`, `NAME`); None: [`addons::SOPS_AGE_SECRET`] in `capstan-system`.
    pub sops_age_secret: Option<(String, String)>,
}

/// Why a pass failed as a whole (per-cluster failures are in the outcome instead).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Discovery failed.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// Live state unreadable: nothing is applied or pruned on a guess.
    #[error("reading live state: {0}")]
    Live(#[from] LiveError),
    /// Status unreadable or unwritable.
    #[error(transparent)]
    Status(#[from] StatusError),
    /// Which management cluster to reconcile is ambiguous or unknown.
    #[error("{0}")]
    Management(String),
    /// Namespaces could not be ensured.
    #[error("ensuring namespace {0}: {1}")]
    Namespace(String, #[source] kube::Error),
    /// The tenancy policy does not hold: nothing is written until it does.
    #[error("{0}")]
    Tenancy(String),
    /// The revision is not a fleet (no `clusters/`, or nothing in it: a wiped branch) or could
    /// not be read whole ([`Fleet::unreadable`]): nothing is applied, pruned or recorded.
    #[error("{0} (the revision is refused: nothing applied, pruned or recorded)")]
    NotAFleet(capstan_templates::diag::Diagnostic),
}

/// The result for one cluster.
#[derive(Debug, Clone)]
pub struct ClusterOutcome {
    /// The cluster.
    pub name: String,
    /// The plan (empty for suspended, failed-validation and orphaned clusters).
    pub plan: Plan,
    /// Phase after the pass.
    pub phase: Phase,
    /// Message after the pass.
    pub message: String,
    /// The upgrade stages of its plan (empty when the cluster was not planned).
    pub staged: crate::plan::stages::Staged,
    /// Its upgrade held back by the fleet's waves, `maxUnavailable` or maintenance windows
    /// ([`crate::plan::waves`]).
    pub paced: Option<crate::plan::waves::Hold>,
    /// What its add-on step did, when it ran: the `AddonsReady` reason, add-ons applied and
    /// pruned inside the workload cluster.
    pub addons: Option<crate::plan::addons::Tally>,
}

/// The result of a pass.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Per cluster, in repository order.
    pub clusters: Vec<ClusterOutcome>,
    /// Write requests made (applies, deletes, status writes, events).
    pub writes: usize,
    /// Read requests made (lists, gets and dry runs).
    pub reads: usize,
}

impl Outcome {
    /// Whether any plan has changes.
    pub fn has_changes(&self) -> bool {
        self.clusters.iter().any(|c| c.plan.has_changes())
    }

    /// Whether any cluster failed.
    pub fn has_failures(&self) -> bool {
        self.clusters.iter().any(|c| c.phase == Phase::Failed)
    }
}

/// The part a cluster plays in a revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A management cluster: reconciled before its workloads.
    Management,
    /// A workload cluster.
    Workload,
    /// Recorded by an earlier revision, gone from this one without a tombstone.
    Orphan,
}

/// A revision prepared for its clusters ([`Agent::prepare`]).
#[derive(Clone)]
pub struct Scope {
    management: String,
    clusters: Vec<(String, Kind)>,
    /// Where each cluster of the prepared fleet is in `Fleet::clusters`: a run finds its entry
    /// without a walk over the fleet (one per run was a walk per cluster per pass).
    entries: HashMap<String, usize>,
    recorded: BTreeMap<String, Arc<Recorded>>,
    live: Arc<Live>,
    /// Requests preparing made.
    pub writes: usize,
    /// Reads preparing made.
    pub reads: usize,
}

impl Scope {
    /// The management cluster this agent runs on.
    pub fn management(&self) -> &str {
        &self.management
    }

    /// Every cluster to reconcile, with its part, in repository order (orphans last).
    pub fn clusters(&self) -> impl Iterator<Item = (&str, Kind)> {
        self.clusters.iter().map(|(n, k)| (n.as_str(), *k))
    }

    fn of(&self, kind: Kind) -> impl Iterator<Item = &str> {
        self.clusters()
            .filter(move |(_, k)| *k == kind)
            .map(|(n, _)| n)
    }

    /// The management clusters to reconcile.
    pub fn managements(&self) -> impl Iterator<Item = &str> {
        self.of(Kind::Management)
    }

    /// The workload clusters to reconcile.
    pub fn workloads(&self) -> impl Iterator<Item = &str> {
        self.of(Kind::Workload)
    }

    /// Recorded clusters the repository no longer has.
    pub fn orphans(&self) -> impl Iterator<Item = &str> {
        self.of(Kind::Orphan)
    }
}

/// One cluster's run ([`Agent::reconcile_cluster`]).
#[derive(Debug, Clone)]
pub struct Run {
    /// What became of the cluster.
    pub outcome: ClusterOutcome,
    /// Write requests made.
    pub writes: usize,
    /// Read requests made.
    pub reads: usize,
}

/// Desired objects of a cluster with their references (the hash is the rendered one).
fn desired(entry: &ClusterEntry) -> Vec<(&Rendered, ObjectRef)> {
    entry
        .objects
        .iter()
        .flatten()
        .map(|o| (o, plan::reference(o)))
        .collect()
}

/// The `desiredHash` a cluster's status records once it has applied this entry: the identity
/// and content hash of every object it renders. A cluster whose revision does not change its
/// objects keeps the revision they came from, so this, not the revision, says "up to date".
pub fn desired_hash(entry: &ClusterEntry) -> String {
    fingerprint(&desired(entry))
}

fn fingerprint(objects: &[(&Rendered, ObjectRef)]) -> String {
    let mut h = Sha256::new();
    for (_, r) in objects {
        h.update(r.key().as_bytes());
        h.update(r.hash.as_bytes());
    }
    hex::encode(h.finalize())[..16].to_string()
}

/// Reconciles a fleet revision once, reading the live state with lists (one-shot commands).
pub async fn reconcile(
    client: &Client,
    fleet: &Fleet,
    opts: &Options,
) -> Result<Outcome, ReconcileError> {
    Agent::connect(client.clone())
        .await?
        .reconcile(fleet, opts)
        .await
}

/// Plans a fleet revision against live state without writing anything ([`Agent::plan`]):
/// `capstan plan`.
pub async fn plan(
    client: &Client,
    fleet: &Fleet,
    opts: &Options,
) -> Result<Outcome, ReconcileError> {
    Agent::connect(client.clone())
        .await?
        .plan(fleet, opts)
        .await
}

/// A cluster's management cluster and the labels of its EKS-A Cluster (as waves and
/// notification alerts select them); None: not in the fleet.
pub fn cluster_labels(fleet: &Fleet, name: &str) -> Option<(String, BTreeMap<String, String>)> {
    let c = fleet.clusters.iter().find(|c| c.name == name)?;
    Some((c.management().to_string(), c.labels()))
}

/// Unix seconds now (the wall clock maintenance windows are written in).
pub fn unix_now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

impl ClusterOutcome {
    /// The outcome of cluster `name`: its plan, phase and message; no stages, holds or add-on
    /// step (those who have them set them). The one constructor: every outcome starts here.
    pub fn new(name: &str, plan: Plan, phase: Phase, message: String) -> ClusterOutcome {
        ClusterOutcome {
            name: name.to_string(),
            plan,
            phase,
            message,
            staged: Default::default(),
            paced: None,
            addons: None,
        }
    }

    /// An outcome with an empty plan.
    pub fn empty(name: &str, phase: Phase, message: String) -> ClusterOutcome {
        let plan = Plan {
            cluster: name.to_string(),
            entries: vec![],
        };
        ClusterOutcome::new(name, plan, phase, message)
    }

    /// Whether the cluster has reached a phase that waiting will not change: Ready, Failed,
    /// Orphaned, Suspended, or deleted.
    pub fn settled(&self) -> bool {
        match self.phase {
            Phase::Ready | Phase::Failed | Phase::Orphaned | Phase::Suspended => true,
            Phase::Deleting => self.message == DELETED,
            Phase::Pending
            | Phase::Applying
            | Phase::Progressing
            | Phase::Upgrading
            | Phase::Unknown => false,
        }
    }

    /// How long until the cluster should be looked at again when no watch event brings it back
    /// (`now`: unix seconds). An upgrade held for a maintenance window is looked at when the
    /// window opens; one waiting for a stage, or for another cluster's wave or slot, after
    /// [`crate::plan::stages::RECHECK`] (the other cluster's phase change usually wakes it
    /// sooner), as one with held changes or prunes (old templates wait for the pass that finds
    /// the rollout over). `None`: nothing to wait for.
    pub fn recheck_in(&self, now: i64) -> Option<std::time::Duration> {
        let opening = self.paced.as_ref().and_then(|h| h.until);
        match opening {
            // One second after the opening: the window is open by then, whatever the rounding.
            Some(at) => Some(std::time::Duration::from_secs(
                u64::try_from(at.saturating_sub(now)).unwrap_or(0) + 1,
            )),
            None => {
                let held = self
                    .plan
                    .entries
                    .iter()
                    .any(|e| e.action == plan::Action::Held);
                (self.staged.waiting.is_some() || self.paced.is_some() || held)
                    .then_some(crate::plan::stages::RECHECK)
            }
        }
    }
}

impl Outcome {
    /// Whether every cluster has settled ([`ClusterOutcome::settled`]).
    pub fn settled(&self) -> bool {
        self.clusters.iter().all(ClusterOutcome::settled)
    }
}

/// The message of a cluster whose deletion completed.
pub const DELETED: &str = "deleted";

/// The message of a cluster neither in the repository nor recorded (any more).
pub const GONE: &str = "neither in the repository nor recorded";

/// Every pass [`converge`] made, in order.
#[derive(Debug, Clone)]
pub struct Convergence {
    /// The passes (at least one).
    pub passes: Vec<Outcome>,
}

impl Convergence {
    /// The first pass: the one that applied the revision.
    pub fn first(&self) -> &Outcome {
        &self.passes[0]
    }

    /// The last pass: where every cluster got to.
    pub fn last(&self) -> &Outcome {
        self.passes.last().expect("at least one pass")
    }

    /// Whether the last pass found every cluster settled.
    pub fn settled(&self) -> bool {
        self.last().settled()
    }
}

/// Reconciles a fleet revision until it settles ([`Outcome::settled`]: every cluster Ready,
/// Failed, ...), or until `timeout`: a pass, then another each time the cluster changes under
/// the agent (watch events: a rollout progressing, a Cluster becoming Available), never on a
/// timer.
///
/// This is `capstan reconcile --once --wait`, what `kubectl apply` followed by `kubectl wait`
/// is for a manifest: the command returns when Cluster API has done what the revision asks.
pub async fn converge(
    client: &Client,
    fleet: &Fleet,
    opts: &Options,
    timeout: Duration,
) -> Result<Convergence, ReconcileError> {
    converge_with(client, fleet, opts, timeout, |_| {}).await
}

/// [`converge`], calling `progress` after every pass.
pub async fn converge_with(
    client: &Client,
    fleet: &Fleet,
    opts: &Options,
    timeout: Duration,
    progress: impl Fn(&Outcome),
) -> Result<Convergence, ReconcileError> {
    let changed = Arc::new(tokio::sync::Notify::new());
    let notify = changed.clone();
    let agent = Agent::connect(client.clone()).await?.with_watches(Arc::new(
        move |_kind: &str, _cluster: Option<&str>| notify.notify_one(),
    ));
    let deadline = tokio::time::Instant::now() + timeout;
    let mut passes = Vec::new();
    let mut failures = 0u32;
    loop {
        let out = match agent.reconcile(fleet, opts).await {
            Ok(out) => out,
            // A pass that could not read or write (the API server restarting under a
            // management cluster that upgrades itself, a dropped connection) is tried again
            // until the deadline, with the daemon's backoff; the last error is the answer.
            Err(e) if tokio::time::Instant::now() < deadline => {
                failures += 1;
                tracing::warn!(error = %e, "the pass failed; trying again");
                let delay = crate::schedule::backoff(failures, fastrand::f64());
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = tokio::time::sleep_until(deadline) => {}
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        failures = 0;
        progress(&out);
        let done = out.settled() || tokio::time::Instant::now() >= deadline;
        // A cluster waiting for an upgrade stage, or held until a maintenance window opens, is
        // looked at again then even when no watch event brings it back.
        let recheck = out
            .clusters
            .iter()
            .filter_map(|c| c.recheck_in(unix_now()))
            .min()
            .map(|d| tokio::time::Instant::now() + d);
        passes.push(out);
        if done {
            return Ok(Convergence { passes });
        }
        let wake = recheck.map_or(deadline, |r| r.min(deadline));
        tokio::select! {
            _ = changed.notified() => {}
            _ = tokio::time::sleep_until(wake) => {}
        }
    }
}

/// Namespaces created at once: a fleet's first revision can name dozens, and every cluster
/// waits for them.
const NAMESPACES_AT_ONCE: usize = 32;

/// What lives across passes: the client, discovery, and (in the daemon) the watch-backed cache.
pub struct Agent {
    client: Client,
    /// The clusters' identities every fleet write is made as ([`crate::k8s::identity`]).
    identities: crate::k8s::identity::Identities,
    resolver: Resolver,
    cache: Option<LiveCache>,
    /// The status CRD and the tenancy policy checked (once).
    crd_checked: AtomicBool,
    namespaces: Mutex<BTreeSet<String>>,
    fights: Mutex<Fights>,
    admitted: pacing::Admitted,
    /// Connections to workload clusters, for their add-ons.
    connections: addons::Connections,
    /// What the watches call when something changed under the agent ([`Agent::with_watches`]).
    on_change: Option<OnChange>,
    /// The leader's write fence, also in front of every workload cluster's client
    /// ([`Agent::with_fence`]).
    fence: Option<crate::k8s::fence::Fence>,
}

impl Agent {
    /// The client the agent reads and writes with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Runs discovery against the management cluster.
    pub async fn connect(client: Client) -> Result<Agent, ReconcileError> {
        let resolver = Resolver::new(client.clone()).await?;
        Ok(Agent {
            identities: crate::k8s::identity::Identities::new(client.clone()),
            client,
            resolver,
            cache: None,
            crd_checked: AtomicBool::new(false),
            namespaces: Mutex::new(BTreeSet::new()),
            fights: Mutex::new(Fights::default()),
            admitted: Default::default(),
            connections: Default::default(),
            on_change: None,
            fence: None,
        })
    }

    /// Puts the leader's write fence in front of the clients of workload clusters (their
    /// add-ons), as it is in front of the management cluster's: a replica that may no longer
    /// lead writes into no cluster.
    pub fn with_fence(mut self, fence: crate::k8s::fence::Fence) -> Agent {
        self.fence = Some(fence);
        self
    }

    /// Reads live state from watches kept open across passes instead of listing on every pass;
    /// `on_change` is called when the cluster changes under the agent (drift, health).
    pub fn with_watches(mut self, on_change: OnChange) -> Agent {
        self.on_change = Some(on_change.clone());
        self.cache = Some(LiveCache::start(self.client.clone(), on_change));
        self
    }

    /// One pass over a fleet revision: [`Agent::prepare`], then every selected cluster with
    /// [`Agent::reconcile_cluster`] — management clusters first (their objects include the EKS-A
    /// releases the workloads refer to), then the workloads `concurrency` at a time, then the
    /// recorded clusters the repository no longer has.
    pub async fn reconcile(
        &self,
        fleet: &Fleet,
        opts: &Options,
    ) -> Result<Outcome, ReconcileError> {
        self.over(fleet, opts, Purpose::Perform).await
    }

    /// The same pass decided and shown, nothing written: what [`Agent::reconcile`] would do
    /// now ([`Agent::prepare_plan`], then [`Agent::plan_cluster`] for every cluster in the same
    /// order).
    pub async fn plan(&self, fleet: &Fleet, opts: &Options) -> Result<Outcome, ReconcileError> {
        self.over(fleet, opts, Purpose::Show).await
    }

    /// Every selected cluster of a revision, decided and, for a reconcile, carried out.
    async fn over(
        &self,
        fleet: &Fleet,
        opts: &Options,
        purpose: Purpose,
    ) -> Result<Outcome, ReconcileError> {
        let scope = self.scope(fleet, opts, purpose).await?;
        let mut out = Outcome {
            clusters: Vec::new(),
            writes: scope.writes,
            reads: scope.reads,
        };
        let add =
            |out: &mut Outcome, r: Result<Run, ReconcileError>| -> Result<(), ReconcileError> {
                let run = r?;
                out.writes += run.writes;
                out.reads += run.reads;
                out.clusters.push(run.outcome);
                Ok(())
            };
        for name in scope.managements() {
            let r = self.cluster(fleet, opts, &scope, name, purpose).await;
            add(&mut out, r)?;
        }
        // Owned names: a closure over `&str` would make this future not `Send` for every
        // lifetime (rust-lang/rust#102211), and callers spawn it.
        let workloads: Vec<String> = scope.workloads().map(str::to_string).collect();
        let scope_ref = &scope;
        let results: Vec<Result<Run, ReconcileError>> = futures::stream::iter(workloads)
            .map(|name: String| async move {
                self.cluster(fleet, opts, scope_ref, &name, purpose).await
            })
            .buffered(opts.concurrency.max(1))
            .collect()
            .await;
        for r in results {
            add(&mut out, r)?;
        }
        for name in scope.orphans() {
            let r = self.cluster(fleet, opts, &scope, name, purpose).await;
            add(&mut out, r)?;
        }
        Ok(out)
    }

    /// A prepared revision looked at again for some of its clusters (watch events naming them)
    /// keeps its [`Scope`]: the same fleet, its kinds watched, its namespaces ensured, the live
    /// state shared with the watches. Only what the watches have learnt since about kinds the
    /// agent is refused or allowed again is carried over, as [`Agent::prepare`] would.
    pub fn refresh(&self) {
        if let Some(cache) = &self.cache {
            cache.refresh_denied();
        }
    }

    /// What the first revision needs whatever it holds, begun while it is fetched: the status
    /// CRD checked and the statuses' watch listed. A failure is left for [`Agent::prepare`] to
    /// find again and report.
    pub async fn warm_up(&self) {
        let crd = async {
            if status::check_crd(&self.client).await.is_ok()
                && crate::k8s::tenancy::enforced(&self.client).await.is_ok()
            {
                self.crd_checked.store(true, Ordering::Relaxed);
            }
        };
        let records = async {
            if let Some(cache) = &self.cache {
                let _ = cache.ensure(&self.resolver, &[]).await;
            }
        };
        futures::join!(crd, records);
    }

    /// The state the daemon's watches keep (`None` without them): what the dashboard served by
    /// the agent reads, so that it costs the agent no second copy of the fleet.
    pub fn live(&self) -> Option<Arc<crate::live::Live>> {
        self.cache.as_ref().map(|c| c.live().clone())
    }

    /// Opens the watches of what the dashboard reads from [`Agent::live`] — the statuses and
    /// `kinds` (`(apiVersion, kind)`: its control planes, etcd clusters and MachineDeployments) —
    /// and waits until they have listed:
    /// on the leader they are open already (its passes need them); a follower, whose passes
    /// have not run, opens them for the dashboard (and leads with them warm).
    pub async fn watch_for_dashboard(&self, kinds: &[(&str, &str)]) -> Result<(), String> {
        let Some(cache) = &self.cache else {
            return Err("the agent keeps no watches".into());
        };
        let kinds: Vec<(String, String)> = kinds
            .iter()
            .map(|(v, k)| (v.to_string(), k.to_string()))
            .collect();
        cache
            .ensure(&self.resolver, &kinds)
            .await
            .map_err(|e| e.to_string())
    }

    /// What every cluster of a revision shares, worked out once: the status CRD checked, the
    /// recorded statuses read, which management cluster this is and which clusters it
    /// reconciles, the live state of every kind they need, their namespaces ensured.
    pub async fn prepare(&self, fleet: &Fleet, opts: &Options) -> Result<Scope, ReconcileError> {
        self.scope(fleet, opts, Purpose::Perform).await
    }

    /// [`Agent::prepare`] for a plan: nothing is written (no namespace created), and a
    /// management cluster capstan was never installed on has no records rather than an error.
    /// With the daemon's watch cache, the plan reads it (a kind not watched yet gets its watch)
    /// and leaves the clusters the watches wake the daemon for as they are.
    pub async fn prepare_plan(
        &self,
        fleet: &Fleet,
        opts: &Options,
    ) -> Result<Scope, ReconcileError> {
        self.scope(fleet, opts, Purpose::Show).await
    }

    async fn scope(
        &self,
        fleet: &Fleet,
        opts: &Options,
        purpose: Purpose,
    ) -> Result<Scope, ReconcileError> {
        let writing = purpose == Purpose::Perform;
        if let Some(d) = fleet.unreadable() {
            return Err(ReconcileError::NotAFleet(d.clone()));
        }
        let reads = AtomicUsize::new(0);
        if writing && !self.crd_checked.load(Ordering::Relaxed) {
            let (crd, tenancy) = futures::join!(
                status::check_crd(&self.client),
                crate::k8s::tenancy::enforced(&self.client)
            );
            crd?;
            tenancy.map_err(|why| {
                ReconcileError::Tenancy(format!("{why}; {}", status::RUN_INSTALL))
            })?;
            self.crd_checked.store(true, Ordering::Relaxed);
        }
        // Recorded statuses first: their inventories name kinds the repository may no longer render.
        let records = match &self.cache {
            Some(cache) => {
                cache.ensure(&self.resolver, &[]).await?;
                cache.live().records()
            }
            None => {
                reads.fetch_add(1, Ordering::Relaxed);
                match status::read_all(&self.client).await {
                    Ok(r) => r.into_iter().map(|(k, v)| (k, Arc::new(v))).collect(),
                    // Plans may run before the agent ever did: no CRD yet means nothing recorded.
                    Err(StatusError::Api {
                        source: kube::Error::Api(s),
                        ..
                    }) if !writing && s.code == 404 => BTreeMap::new(),
                    Err(e) => return Err(e.into()),
                }
            }
        };
        let managements: Vec<&str> = fleet
            .clusters
            .iter()
            .filter(|c| c.role == Role::Management)
            .map(|c| c.name.as_str())
            .collect();
        let management = match (&opts.management, managements.as_slice()) {
            (Some(m), _) if managements.contains(&m.as_str()) => m.clone(),
            (Some(m), _) => {
                return Err(ReconcileError::Management(format!(
                    "management cluster `{m}` is not in the repository (found: {})",
                    managements.join(", ")
                )));
            }
            (None, [one]) => one.to_string(),
            (None, []) => {
                return Err(ReconcileError::Management(
                    "the repository has no management cluster".into(),
                ));
            }
            (None, many) => {
                return Err(ReconcileError::Management(format!(
                    "the repository has several management clusters ({}); say which one this is with --management",
                    many.join(", ")
                )));
            }
        };
        let recorded: BTreeMap<String, Arc<Recorded>> = records
            .into_iter()
            .filter(|(_, r)| r.management == management)
            .collect();
        let in_scope: BTreeSet<&str> = fleet
            .clusters
            .iter()
            .filter(|c| c.management() == management)
            .map(|c| c.name.as_str())
            .collect();
        let selected = |name: &str| {
            opts.only.as_deref().is_none_or(|o| o == name)
                && (in_scope.contains(name) || recorded.contains_key(name))
        };
        // Every kind rendered or recorded: one reference of each rendered apiVersion and kind
        // (not 12 of every cluster), and one recorded inventory of each set of kinds (not every
        // inventory decompressed and parsed).
        let mut rendered_kinds = HashSet::new();
        let mut recorded_kinds = HashSet::new();
        let wanted = fleet
            .clusters
            .iter()
            .filter(|e| selected(&e.name))
            .flat_map(|e| e.objects.iter().flatten())
            .filter(|o| rendered_kinds.insert((o.api_version(), o.kind())))
            .map(plan::reference)
            .chain(
                recorded
                    .iter()
                    .filter(|(n, r)| selected(n) && recorded_kinds.insert(r.kinds_key()))
                    .flat_map(|(_, r)| r.inventory()),
            );
        let kinds = live::kinds(wanted);
        // Which clusters' changes wake the daemon is the reconciled revision's to say, not a
        // plan's (a pull request's head may add or drop clusters).
        if let Some(cache) = self.cache.as_ref().filter(|_| writing) {
            cache.set_scope(
                fleet
                    .clusters
                    .iter()
                    .map(|c| c.name.clone())
                    .filter(|n| selected(n))
                    .chain(recorded.keys().filter(|n| selected(n)).cloned()),
            );
        }
        let writes = AtomicUsize::new(0);
        let live = async {
            match &self.cache {
                Some(cache) => {
                    cache.ensure(&self.resolver, &kinds).await?;
                    Ok::<_, ReconcileError>(cache.live().clone())
                }
                None => {
                    let (live, n) = live::list(&self.client, &self.resolver, &kinds).await?;
                    reads.fetch_add(n, Ordering::Relaxed);
                    // Clusters read each other's records (a workload its management cluster's).
                    live.replace_records(recorded.clone());
                    Ok(Arc::new(live))
                }
            }
        };
        // The namespaces beside the watches' first lists: neither needs the other.
        let namespaces = async {
            if !writing {
                return Ok(());
            }
            self.ensure_namespaces(
                fleet
                    .clusters
                    .iter()
                    .filter(|e| in_scope.contains(e.name.as_str())),
                &reads,
                &writes,
            )
            .await
        };
        let (live, namespaces) = futures::join!(live, namespaces);
        let live: Arc<Live> = live?;
        namespaces?;
        let names: BTreeSet<&str> = fleet.clusters.iter().map(|c| c.name.as_str()).collect();
        let mut clusters: Vec<(String, Kind)> = fleet
            .clusters
            .iter()
            .filter(|e| selected(&e.name))
            .map(|e| {
                let kind = if e.role == Role::Management {
                    Kind::Management
                } else {
                    Kind::Workload
                };
                (e.name.clone(), kind)
            })
            .collect();
        clusters.extend(
            recorded
                .keys()
                .filter(|n| !names.contains(n.as_str()) && selected(n))
                .map(|n| (n.clone(), Kind::Orphan)),
        );
        let entries = fleet
            .clusters
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.clone(), i))
            .collect();
        Ok(Scope {
            management,
            clusters,
            entries,
            recorded,
            live,
            writes: writes.into_inner(),
            reads: reads.into_inner(),
        })
    }

    /// One cluster of a prepared revision: plan, apply, prune and status (or the deletion step a
    /// tombstone asks for, or the Orphaned status of a recorded cluster the repository lost).
    /// It never waits for Cluster API: a cluster that is rolling out or being deleted is left
    /// Progressing or Deleting, and the watches say when to look again.
    pub async fn reconcile_cluster(
        &self,
        fleet: &Fleet,
        opts: &Options,
        scope: &Scope,
        name: &str,
    ) -> Result<Run, ReconcileError> {
        self.cluster(fleet, opts, scope, name, Purpose::Perform)
            .await
    }

    /// One cluster of a revision prepared with [`Agent::prepare_plan`], decided as
    /// [`Agent::reconcile_cluster`] would and shown, nothing written.
    pub async fn plan_cluster(
        &self,
        fleet: &Fleet,
        opts: &Options,
        scope: &Scope,
        name: &str,
    ) -> Result<Run, ReconcileError> {
        self.cluster(fleet, opts, scope, name, Purpose::Show).await
    }

    /// One cluster decided, then carried out or shown.
    async fn cluster(
        &self,
        fleet: &Fleet,
        opts: &Options,
        scope: &Scope,
        name: &str,
        purpose: Purpose,
    ) -> Result<Run, ReconcileError> {
        // The freshest record: in the daemon a cluster runs long after its revision was prepared.
        let prev: Option<Arc<Recorded>> = match &self.cache {
            Some(cache) => cache
                .live()
                .record(name)
                .filter(|r| r.management == scope.management),
            None => scope.recorded.get(name).cloned(),
        };
        let pass = Pass {
            agent: self,
            live: scope.live.clone(),
            opts,
            writes: AtomicUsize::new(0),
            reads: AtomicUsize::new(0),
        };
        // The scope's index, checked against the fleet given (a scope is for the fleet it was
        // prepared from); a miss (an orphan, another fleet) is looked up the long way.
        let entry = scope
            .entries
            .get(name)
            .and_then(|&i| fleet.clusters.get(i))
            .filter(|c| c.name == name)
            .or_else(|| fleet.clusters.iter().find(|c| c.name == name));
        let decided = match (entry, prev.as_deref()) {
            (Some(entry), prev) => Some(pass.decide(fleet, entry, prev, purpose).await),
            (None, Some(rec)) => Some(Decided::orphan(name, rec)),
            (None, None) => None,
        };
        let outcome = match decided {
            Some(d) if purpose == Purpose::Show => pass.show(d),
            Some(d) => pass.perform(fleet, d).await?,
            None => ClusterOutcome::empty(name, Phase::Orphaned, GONE.to_string()),
        };
        Ok(Run {
            outcome,
            writes: pass.writes.into_inner(),
            reads: pass.reads.into_inner(),
        })
    }

    /// Where the workload clusters of a prepared revision stand in their waves, by wave and
    /// standing (`done`, `upgrading`, `failed`, `pending`), when the fleet config paces upgrades:
    /// the `capstan_wave_clusters` gauge.
    pub fn wave_census(&self, fleet: &Fleet, scope: &Scope) -> Vec<(String, &'static str, i64)> {
        let Some(rollout) =
            crate::plan::waves::rollout_of(fleet, &scope.management).filter(|r| r.paces())
        else {
            return Vec::new();
        };
        let records = match &self.cache {
            Some(cache) => cache.live().records(),
            None => scope.live.records(),
        };
        let all = pacing::members(fleet, &scope.management, &records, &BTreeMap::new(), None);
        let mut counts: BTreeMap<(String, &'static str), i64> = BTreeMap::new();
        for m in &all {
            let (_, wave) = crate::plan::waves::wave_of(rollout, &m.name, &m.labels);
            *counts
                .entry((wave.to_string(), m.standing().as_str()))
                .or_default() += 1;
        }
        counts.into_iter().map(|((w, s), n)| (w, s, n)).collect()
    }

    /// The drift history of recently drifted objects.
    fn fights(&self) -> std::sync::MutexGuard<'_, Fights> {
        self.fights.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Namespaces the fleet's objects live in are created when missing (and never pruned).
    /// `reads` and `writes` count the requests made.
    async fn ensure_namespaces<'e>(
        &self,
        clusters: impl Iterator<Item = &'e ClusterEntry>,
        reads: &AtomicUsize,
        writes: &AtomicUsize,
    ) -> Result<(), ReconcileError> {
        // Borrowed: every object of the fleet passes through here on each revision. A
        // namespace the fleet itself renders as a Namespace object is applied as one (first,
        // before the objects in it), so it is the repository's, not created here.
        let mut wanted: BTreeSet<&str> = BTreeSet::new();
        let mut rendered: BTreeSet<&str> = BTreeSet::new();
        for o in clusters.flat_map(|e| e.objects.iter().flatten()) {
            if o.kind() == "Namespace" && o.api_version() == "v1" {
                rendered.insert(o.name());
            } else if !o.namespace().is_empty() {
                wanted.insert(o.namespace());
            }
        }
        wanted.retain(|ns| !rendered.contains(ns));
        {
            let known = self.known_namespaces();
            if wanted.iter().all(|ns| known.contains(*ns)) {
                return Ok(());
            }
        }
        let wanted: BTreeSet<String> = wanted.into_iter().map(str::to_string).collect();
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        let existing: BTreeSet<String> = api
            .list_metadata(&Default::default())
            .await
            .map_err(|e| ReconcileError::Namespace("*".into(), e))?
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        reads.fetch_add(1, Ordering::Relaxed);
        // Created at once: a fleet's first revision can name dozens, and every cluster waits.
        let created: Vec<Result<(), ReconcileError>> =
            futures::stream::iter(wanted.difference(&existing).cloned())
                .map(|ns: String| async move {
                    let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {capstan_templates::identity::CREATED_BY_LABEL: capstan_templates::identity::MANAGED_BY}}});
                    apply_one(&self.client, &self.resolver, &obj, false)
                        .await
                        .map_err(|e| {
                            ReconcileError::Namespace(
                                ns,
                                kube::Error::Service(e.to_string().into()),
                            )
                        })?;
                    writes.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                })
                .buffer_unordered(NAMESPACES_AT_ONCE)
                .collect()
                .await;
        created.into_iter().collect::<Result<Vec<()>, _>>()?;
        *self.known_namespaces() = existing.union(&wanted).cloned().collect();
        Ok(())
    }

    /// Namespaces known to exist; forgotten when an apply says one is missing.
    fn known_namespaces(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.namespaces.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::stages::{RECHECK, Stage};
    use crate::plan::waves::Hold;
    use crate::status::Reason;
    use std::time::Duration;

    fn outcome(waiting: bool, paced: Option<Hold>) -> ClusterOutcome {
        ClusterOutcome {
            staged: crate::plan::stages::Staged {
                waiting: waiting.then(|| (Stage::ControlPlane, "1/3 up to date".into())),
                ..Default::default()
            },
            paced,
            ..ClusterOutcome::new("dev", Plan::default(), Phase::Progressing, String::new())
        }
    }

    fn held(reason: Reason, until: Option<i64>) -> Option<Hold> {
        Some(Hold {
            reason,
            message: reason.as_str().into(),
            until,
        })
    }

    #[test]
    fn a_cluster_held_for_a_maintenance_window_is_looked_at_when_the_window_opens() {
        let now = 1_800_000_000;
        // Held until a window three hours away: one look, just after it opens, not one every
        // RECHECK for three hours.
        let window = held(Reason::OutsideMaintenanceWindow, Some(now + 3 * 3600));
        assert_eq!(
            outcome(true, window.clone()).recheck_in(now),
            Some(Duration::from_secs(3 * 3600 + 1))
        );
        assert_eq!(
            outcome(false, window).recheck_in(now),
            Some(Duration::from_secs(3 * 3600 + 1))
        );
        // An opening already passed (a slow pass): at once, plus the second's margin.
        let passed = held(Reason::OutsideMaintenanceWindow, Some(now - 5));
        assert_eq!(
            outcome(false, passed).recheck_in(now),
            Some(Duration::from_secs(1))
        );
        // Waiting for another cluster (its phase change wakes this one) or for a stage: the
        // periodic look in case no event comes.
        for reason in [
            Reason::WaitingForWave,
            Reason::MaxUnavailable,
            Reason::WaveStopped,
        ] {
            assert_eq!(
                outcome(false, held(reason, None)).recheck_in(now),
                Some(RECHECK)
            );
        }
        assert_eq!(outcome(true, None).recheck_in(now), Some(RECHECK));
        assert_eq!(outcome(false, None).recheck_in(now), None);
        // Rolled out, an old template's prune held for the next pass: looked at again too.
        let mut pruning = outcome(false, None);
        pruning.plan.entries.push(crate::plan::Entry::new(
            crate::plan::ObjectRef::of(&serde_json::json!({
                "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
                "kind": "KubeadmConfigTemplate",
                "metadata": {"namespace": "ns", "name": "dev-md-0-old"}
            })),
            crate::plan::Action::Held,
            None,
        ));
        assert_eq!(pruning.recheck_in(now), Some(RECHECK));
    }
}
