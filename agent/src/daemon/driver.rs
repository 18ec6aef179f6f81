//! The leader's loop: what wakes it (a batch of triggers, a finished run, a recheck falling due),
//! what each wake changes (the revision loaded and prepared, the queue, the phases and their
//! metrics), and the runs it starts up to the concurrency cap.
//!
//! One struct holds the loop's state so each kind of wake is a method of its own; the loop
//! itself only selects. Nothing here is a decision a test needs a server for: the queue
//! ([`crate::schedule::Queue`]) and the pass ([`crate::reconcile`]) decide, the driver
//! performs and reports.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_layout::{Fleet, RenderCache};
use tokio::task::JoinSet;
use tracing::{error, info};

use super::load::load;
use super::phases::Phases;
use super::{RunConfig, cause, is_commit, memory_kib, object_action, received};
use crate::leader::Election;
use crate::reconcile::{Agent, Kind, Options, ReconcileError, Run, Scope, unix_now};
use crate::schedule::{Finished, Queue};
use crate::serve::{Cause, Metrics, PipelineStep, ReadyFlag, ReconcileResult, Trigger};
use crate::source::GitSource;
use crate::source::release::ReleaseFetcher;
use crate::status::Phase;
use crate::trigger::TriggerReceiver;

/// The revision being reconciled.
struct Current {
    fleet: Arc<Fleet>,
    revision: String,
    opts: Arc<Options>,
    /// `None` until prepared (or after preparing failed).
    scope: Option<Arc<Scope>>,
    /// With `--verify-commits`: the revision's signature, or the newest revision's refusal.
    signature: Option<capstan_plan::decide::Signature>,
}

/// A cluster's run as its task returns it: the cluster, how long the run took, its outcome.
type RunResult = (String, Duration, Result<Run, ReconcileError>);

/// What woke the daemon.
enum Wake {
    Triggers(Vec<Trigger>),
    Finished(Box<Result<(tokio::task::Id, RunResult), tokio::task::JoinError>>),
    Due,
}

/// How the loop ended.
pub(super) enum Ended {
    /// Shutdown, or every trigger sender gone.
    Stopped,
    /// This replica lost the leader Lease.
    LostLease,
}

/// The leader's loop and its state.
pub(super) struct Driver {
    cfg: RunConfig,
    agent: Arc<Agent>,
    metrics: Arc<Metrics>,
    ready: ReadyFlag,
    statuses: Option<crate::github::notify::Statuses>,
    source: Option<GitSource>,
    fetcher: Option<ReleaseFetcher>,
    renders: RenderCache,
    current: Option<Current>,
    /// Where the revision followed is published (the dashboard reads it).
    published: crate::dashboard::Published,
    queue: Queue,
    runs: JoinSet<RunResult>,
    running: HashMap<tokio::task::Id, String>,
    phases: Phases,
    /// Clusters whose upgrade the fleet's waves hold: when another cluster's phase moves (the
    /// canary Ready, a slot of maxUnavailable free), they look again at once.
    paced: BTreeSet<String>,
    /// The last head commit verification refused, counted once however often it is seen.
    refused_head: Option<String>,
    /// Phase changes to the fleet config's notification providers.
    notifier: crate::notify::Notifier,
    /// With `--verify-commits` on a Git source: where the last verified commit is kept, and the
    /// commit this process last kept there.
    position: Option<(super::position::Position, Option<String>)>,
}

/// What a batch of triggers loaded.
struct Loaded {
    /// The batch loaded a revision (or had none loaded yet), rather than naming clusters of the
    /// revision already loaded.
    reload: bool,
    /// A new revision, or an edit or push someone made on purpose: a failing cluster's backoff
    /// is cut short (a poll that finds the same commit does not).
    urgent: bool,
    /// The clusters this revision changed: reconciled ahead of those it only asks to confirm
    /// (none on the first load, when there is nothing to compare with).
    changed: BTreeSet<String>,
    /// How long loading took (0: not done for this batch).
    load_ms: u64,
    /// What the revision was loaded for, when one was: counted once its clusters are queued
    /// ([`Driver::triggered`]), so that a revision counted and nothing queued or running means
    /// its runs are over, not yet to come.
    cause: Option<Cause>,
}

impl Driver {
    /// Opens the Git source and the release fetcher (off the runtime threads: both block).
    pub(super) async fn open(
        cfg: RunConfig,
        agent: Arc<Agent>,
        metrics: Arc<Metrics>,
        ready: ReadyFlag,
        statuses: Option<crate::github::notify::Statuses>,
    ) -> anyhow::Result<Self> {
        let source = match &cfg.repo {
            super::Repo::Git(sc) => {
                let sc = sc.clone();
                Some(tokio::task::spawn_blocking(move || GitSource::open(sc)).await??)
            }
            super::Repo::WorkingCopy(_) => None,
        };
        let ca_file = cfg.ca_file.clone();
        let fetcher = Some(
            tokio::task::spawn_blocking(move || {
                ReleaseFetcher::new(&ReleaseFetcher::default_cache_dir(), ca_file.as_deref())
            })
            .await??,
        );
        let queue = Queue::new(cfg.concurrency);
        let position = match (&cfg.repo, &cfg.verify) {
            (super::Repo::Git(sc), Some(_)) => Some((
                super::position::Position::new(
                    agent.client().clone(),
                    crate::status::NAMESPACE,
                    cfg.management.as_deref().unwrap_or_default(),
                    sc,
                ),
                None,
            )),
            _ => None,
        };
        let notifier = crate::notify::Notifier::start(
            crate::notify::Secrets::Api(agent.client().clone()),
            metrics.clone(),
            cfg.notify.clone(),
        );
        Ok(Self {
            notifier,
            cfg,
            agent,
            metrics,
            ready,
            statuses,
            source,
            fetcher,
            renders: RenderCache::default(),
            current: None,
            published: Default::default(),
            queue,
            runs: JoinSet::new(),
            running: HashMap::new(),
            phases: Phases::default(),
            paced: BTreeSet::new(),
            refused_head: None,
            position,
        })
    }

    /// Publishes each revision it follows there.
    pub(super) fn publishing(self, published: crate::dashboard::Published) -> Self {
        Driver { published, ..self }
    }

    /// Runs until shutdown, the last trigger sender gone, or the Lease lost; then stops the runs.
    pub(super) async fn run(
        mut self,
        rx: &mut TriggerReceiver,
        mut stop: tokio::sync::watch::Receiver<bool>,
        election: &mut Option<Election>,
    ) -> anyhow::Result<Ended> {
        let ended = loop {
            let q = &self.queue;
            self.metrics
                .set_queue(q.queued(), q.running(), q.rechecks());
            let due = self.queue.next_due();
            let wake = tokio::select! {
                b = rx.next() => match b {
                    Some(b) => Wake::Triggers(b),
                    None => break Ended::Stopped,
                },
                Some(done) = self.runs.join_next_with_id(), if !self.runs.is_empty() => Wake::Finished(Box::new(done)),
                _ = super::sleep_until(due), if due.is_some() => Wake::Due,
                _ = stop.wait_for(|s| *s) => break Ended::Stopped,
                _ = super::lost_lease(election) => {
                    error!("lost the leader Lease: stopping, another replica may be reconciling already");
                    self.metrics.set_leader(false);
                    break Ended::LostLease;
                }
            };
            match wake {
                Wake::Due => {}
                Wake::Finished(done) => self.finished(*done),
                Wake::Triggers(batch) => self.triggered(batch).await?,
            }
            self.start_due();
        };
        self.runs.shutdown().await;
        Ok(ended)
    }

    /// A run's task ended: its result counted, the queue told, what it wakes queued.
    fn finished(&mut self, done: Result<(tokio::task::Id, RunResult), tokio::task::JoinError>) {
        let (name, took, result) = match done {
            Ok((_, r)) => r,
            Err(e) => {
                // A panicking run: counted as a failure of its cluster.
                let name = self.running.remove(&e.id()).unwrap_or_default();
                error!(cluster = %name, error = %e, "reconcile panicked");
                let after = self
                    .queue
                    .finish(&name, false, Instant::now(), fastrand::f64());
                self.metrics.inc_reconcile(ReconcileResult::Failure);
                if let Finished::Retry(_) = after {
                    self.metrics.inc_retry();
                }
                return;
            }
        };
        self.running.retain(|_, n| *n != name);
        let ok = matches!(&result, Ok(run) if run.outcome.phase != Phase::Failed);
        let after = self
            .queue
            .finish(&name, ok, Instant::now(), fastrand::f64());
        self.metrics.inc_reconcile(if ok {
            ReconcileResult::Success
        } else {
            ReconcileResult::Failure
        });
        let retry = match after {
            Finished::Retry(d) => {
                self.metrics.inc_retry();
                Some(d)
            }
            _ => None,
        };
        let revision = self
            .current
            .as_ref()
            .map_or(String::new(), |c| c.revision.clone());
        match result {
            Ok(run) => self.ran(&name, &revision, run, took, retry),
            Err(e) => {
                self.phases.insert(&name, Phase::Failed);
                let seen = crate::notify::rules::Seen {
                    phase: Phase::Failed,
                    held: None,
                    conflict: false,
                };
                self.notify(&name, &revision, &e.to_string(), seen);
                if let Some(st) = &self.statuses
                    && is_commit(&revision)
                {
                    st.report(&revision, &name, Phase::Failed, &e.to_string());
                }
                error!(cluster = %name, revision = %revision, error = %e, elapsed_ms = took.as_millis() as u64, retry_in_ms = retry.map(|d| d.as_millis() as u64), "reconcile failed");
            }
        }
        self.phases.publish(&self.metrics);
    }

    /// A run that returned: its objects counted, its recheck and wave hold kept, the clusters its
    /// phase change wakes queued, its commit status reported.
    fn ran(
        &mut self,
        name: &str,
        revision: &str,
        run: Run,
        took: Duration,
        retry: Option<Duration>,
    ) {
        for (a, n) in run.outcome.plan.counts() {
            self.metrics.add_objects(object_action(a), n as u64);
        }
        if let Some(t) = &run.outcome.addons {
            self.metrics.add_addon_step(t);
        }
        // A cluster waiting for a stage or its wave, or with held prunes, is looked at again after
        // a while, one held for a maintenance window when the window opens.
        if retry.is_none()
            && let Some(d) = run.outcome.recheck_in(unix_now())
        {
            self.queue.recheck(name, Instant::now() + d);
        }
        match &run.outcome.paced {
            Some(hold) => {
                // A hold's reason is always one of the pacing's.
                if let Ok(reason) = hold.reason.try_into() {
                    self.metrics.inc_upgrade_held(reason);
                }
                self.paced.insert(name.to_string());
            }
            None => {
                self.paced.remove(name);
            }
        }
        if let Some(cur) = self.current.as_ref()
            && let Some(scope) = cur.scope.as_ref()
        {
            let census = self.agent.wave_census(&cur.fleet, scope);
            self.metrics
                .set_waves(census.iter().map(|(w, s, n)| (w.as_str(), *s, *n)));
        }
        let seen = crate::notify::rules::Seen {
            phase: run.outcome.phase,
            held: run.outcome.paced.as_ref().map(|h| h.reason.as_str()),
            conflict: run
                .outcome
                .plan
                .counts()
                .iter()
                .any(|(a, n)| *a == crate::plan::Action::Conflict && *n > 0),
        };
        self.notify(name, revision, &run.outcome.message, seen);
        let was = self.phases.insert(name, run.outcome.phase);
        if was != Some(run.outcome.phase) {
            self.phase_moved(name);
        }
        if let Some(st) = &self.statuses
            && is_commit(revision)
        {
            st.report(revision, name, run.outcome.phase, &run.outcome.message);
        }
        let (rss, peak) = (memory_kib("VmRSS:"), memory_kib("VmHWM:"));
        self.metrics.set_resident_memory(rss * 1024);
        let q = &self.queue;
        info!(cluster = %name, revision = %revision, phase = %run.outcome.phase.as_str(), message = %run.outcome.message, writes = run.writes, reads = run.reads, elapsed_ms = took.as_millis() as u64, retry_in_ms = retry.map(|d| d.as_millis() as u64), queued = q.queued(), running = q.running(), rss_mib = rss / 1024, peak_rss_mib = peak / 1024, "reconciled");
    }

    /// Tells the notifier what a run left `name` in (it decides, off this path, what to send).
    fn notify(
        &mut self,
        name: &str,
        revision: &str,
        message: &str,
        seen: crate::notify::rules::Seen,
    ) {
        let fleet = self.current.as_ref().map(|c| c.fleet.clone());
        let (management, labels) = fleet
            .as_deref()
            .and_then(|f| crate::reconcile::cluster_labels(f, name))
            .unwrap_or_default();
        let config = fleet
            .as_deref()
            .and_then(|f| f.configs.get(&management))
            .and_then(|c| c.notifications.as_ref());
        self.notifier.observe(
            config,
            crate::notify::Observation {
                cluster: name,
                management: &management,
                labels: &labels,
                revision,
                message,
                seen,
            },
        );
    }

    /// `name`'s phase moved: the clusters the waves hold look again, and, when `name` is the
    /// management cluster, its workload clusters (which hold while it upgrades itself).
    fn phase_moved(&mut self, name: &str) {
        let scope = self.current.as_ref().and_then(|c| c.scope.clone());
        let mgmt = scope.as_ref().map(|s| s.management());
        let now = Instant::now();
        // Queued as a watch event queues them, after their management cluster; not after the
        // cluster that moved: two held clusters waking each other would each wait for the other.
        for w in self.paced.iter().filter(|w| *w != name) {
            self.queue.enqueue(w, mgmt, false, now);
        }
        if let Some(scope) = &scope
            && scope.management() == name
        {
            for w in scope.workloads() {
                self.queue.enqueue(w, Some(name), false, now);
            }
        }
    }

    /// A batch of triggers: the revision loaded when it asks for one, prepared when it is new
    /// or a watch names no cluster, and its clusters queued.
    async fn triggered(&mut self, batch: Vec<Trigger>) -> anyhow::Result<()> {
        let started = Instant::now();
        let Some(loaded) = self.load(&batch).await? else {
            self.metrics.inc_reconcile(ReconcileResult::Failure);
            received(&self.metrics, &batch);
            return Ok(());
        };
        let Some(cur) = self.current.as_ref() else {
            self.count_revision(&loaded);
            received(&self.metrics, &batch);
            return Ok(());
        };
        let everything = loaded.reload
            || cur.scope.is_none()
            || batch
                .iter()
                .any(|t| matches!(t, Trigger::ClusterChange(None)));
        let t = Instant::now();
        let Some(scope) = self.scope(everything).await else {
            self.count_revision(&loaded);
            received(&self.metrics, &batch);
            return Ok(());
        };
        let prepare_ms = if everything {
            t.elapsed().as_millis() as u64
        } else {
            0
        };
        self.ready.set_ready(true);
        let named: BTreeSet<&str> = batch
            .iter()
            .filter_map(|t| match t {
                Trigger::ClusterChange(Some(c)) => Some(c.as_str()),
                _ => None,
            })
            .collect();
        let only = (!everything).then_some(&named);
        let clusters = self.enqueue(&scope, only, &loaded);
        // Queued first, counted loaded and received after: who sees the revision counted, every
        // trigger received and nothing queued or running knows the daemon is idle.
        let q = &self.queue;
        self.metrics
            .set_queue(q.queued(), q.running(), q.rechecks());
        self.count_revision(&loaded);
        received(&self.metrics, &batch);
        let kinds: BTreeSet<&str> = batch.iter().map(Trigger::kind).collect();
        let cur = self.current.as_mut().expect("loaded above");
        info!(revision = %cur.revision, triggers = ?kinds, clusters, changed = loaded.changed.len(), queued = q.queued(), running = q.running(), load_ms = loaded.load_ms, prepare_ms, elapsed_ms = started.elapsed().as_millis() as u64, "queued");
        cur.scope = Some(scope);
        Ok(())
    }

    /// Counts a revision loaded (`capstan_revisions_total`), once what it queues is queued.
    fn count_revision(&self, loaded: &Loaded) {
        if let Some(why) = loaded.cause {
            self.metrics.inc_revision(why);
        }
    }

    /// Loads the newest revision unless the batch only names clusters of the one loaded (no Git
    /// round trip then). `None`: nothing could be loaded (logged, retried on the next trigger).
    async fn load(&mut self, batch: &[Trigger]) -> anyhow::Result<Option<Loaded>> {
        let cluster_only = batch.iter().all(|t| matches!(t, Trigger::ClusterChange(_)));
        let reload = !cluster_only || self.current.is_none();
        let mut loaded = Loaded {
            reload,
            urgent: false,
            changed: BTreeSet::new(),
            load_ms: 0,
            cause: None,
        };
        if !reload {
            return Ok(Some(loaded));
        }
        let t = Instant::now();
        let verification = match &self.cfg.verify {
            Some(v) => {
                let mut v = v.verification(self.agent.client()).await;
                if let Some((p, _)) = &self.position {
                    v.floor = p.read().await;
                }
                Some(v)
            }
            None => None,
        };
        let read = load(
            &self.cfg.repo,
            &mut self.source,
            &mut self.fetcher,
            &mut self.renders,
            &self.metrics,
            verification,
        )
        .await?;
        let signature = self.signature(&read);
        self.keep_position(&read).await;
        let Some((fleet, revision)) = read.fleet else {
            return Ok(None);
        };
        loaded.load_ms = t.elapsed().as_millis() as u64;
        let why = cause(batch);
        loaded.cause = Some(why);
        loaded.urgent =
            why != Cause::Poll || self.current.as_ref().is_none_or(|c| c.revision != revision);
        if let Some(before) = self.current.as_ref() {
            loaded.changed = fleet
                .changed_since(&before.fleet)
                .into_iter()
                .map(str::to_string)
                .collect();
        }
        let fleet = Arc::new(fleet);
        self.published.set(fleet.clone());
        self.current = Some(Current {
            fleet,
            revision,
            opts: Arc::new(Options::default()),
            scope: None,
            signature,
        });
        Ok(Some(loaded))
    }

    /// Keeps the verified revision as the position the next head must descend from, when it
    /// moved. A failed write is logged and tried again on the next load; meanwhile this
    /// process's own last good revision is its floor.
    async fn keep_position(&mut self, read: &super::load::Read) {
        let (Some((position, kept)), Some(v)) = (&mut self.position, &read.verified) else {
            return;
        };
        if kept.as_deref() == Some(v.commit.as_str()) {
            return;
        }
        match position.write(&v.commit, &v.signer).await {
            Ok(()) => {
                info!(commit = %v.commit, kept_in = %position.describe(), "verified position kept");
                *kept = Some(v.commit.clone());
            }
            Err(e) => {
                error!(commit = %v.commit, kept_in = %position.describe(), error = %e, "cannot keep the verified position: a replaced pod checks the next head against an older commit")
            }
        }
    }

    /// What verification said of a load, for the statuses; a refused head is counted
    /// (`capstan_commits_refused_total`) the first time it is seen.
    fn signature(&mut self, read: &super::load::Read) -> Option<capstan_plan::decide::Signature> {
        use capstan_plan::decide::Signature;
        self.cfg.verify.as_ref()?;
        if read.unsynced {
            // The remote is down: what was last said of the newest revision still holds.
            return self.current.as_ref().and_then(|c| c.signature.clone());
        }
        if let Some(u) = &read.refused {
            if self.refused_head.as_deref() != Some(u.head.as_str()) {
                self.metrics.inc_commit_refused(u.refused.why);
                self.refused_head = Some(u.head.clone());
                error!(commit = %u.head, reason = u.refused.why.as_str(), error = %u, "revision refused: not applied, the last verified revision stays live");
            }
            let rollback = u.refused.why == crate::source::verify::Why::Rollback;
            let mut why = u.to_string();
            if rollback && let Some((p, _)) = &self.position {
                why.push_str(&format!(" (the position is kept in {})", p.describe()));
            }
            return Some(Signature::Refused {
                head: u.head.clone(),
                why,
                rollback,
            });
        }
        read.verified
            .as_ref()
            .map(|v| Signature::Verified(v.to_string()))
    }

    /// The scope to queue from. Watch events naming clusters of the revision already prepared:
    /// its scope stands (the same fleet, its kinds watched, its namespaces ensured, the live
    /// state shared with the watches); preparing again would walk the whole fleet once per
    /// event. Otherwise the revision is prepared (cheap with the watches: memory reads, and
    /// writes only for a missing namespace). `None`: preparing failed (logged).
    async fn scope(&mut self, everything: bool) -> Option<Arc<Scope>> {
        let cur = self.current.as_mut()?;
        if let (Some(scope), false) = (&cur.scope, everything) {
            self.agent.refresh();
            return Some(scope.clone());
        }
        let mut opts = Options {
            revision: cur.revision.clone(),
            management: self.cfg.management.clone(),
            drift: self.cfg.drift,
            concurrency: self.cfg.concurrency,
            signature: cur.signature.clone(),
            cluster_profiles: self.cfg.cluster_profiles.clone(),
            ..Default::default()
        };
        self.cfg.upgrade.apply(&mut opts);
        cur.opts = Arc::new(opts);
        let t = Instant::now();
        match self.agent.prepare(&cur.fleet, &cur.opts).await {
            Ok(s) => {
                self.metrics.observe_step(PipelineStep::Plan, t.elapsed());
                Some(Arc::new(s))
            }
            Err(e) => {
                self.metrics.inc_reconcile(ReconcileResult::Failure);
                error!(revision = %cur.revision, error = %e, "preparing the revision failed; retrying on the next trigger");
                cur.scope = None;
                None
            }
        }
    }

    /// Queues the scope's clusters (only those `named`, when given), the changed ones and their
    /// management cluster first; forgets clusters the scope no longer has. Returns how many
    /// clusters the scope holds.
    fn enqueue(&mut self, scope: &Scope, named: Option<&BTreeSet<&str>>, loaded: &Loaded) -> usize {
        let now = Instant::now();
        let mgmt = scope.management();
        let names: BTreeSet<&str> = scope.clusters().map(|(n, _)| n).collect();
        for (name, kind) in scope.clusters() {
            if named.is_some_and(|n| !n.contains(name)) {
                continue;
            }
            let after = (kind == Kind::Workload).then_some(mgmt);
            // The changed clusters go first, and with them the management cluster the changed
            // workloads wait for (its run, a no-op when it did not change, is not left behind the
            // fleet's confirmations).
            let first = loaded.changed.contains(name)
                || (kind == Kind::Management && !loaded.changed.is_empty());
            if first {
                self.queue.enqueue_first(name, after, now);
            } else {
                self.queue.enqueue(name, after, loaded.urgent, now);
            }
        }
        let queue = &mut self.queue;
        self.notifier.retain(|n| names.contains(n));
        self.phases.retain(|n| {
            let keep = names.contains(n);
            if !keep {
                queue.forget(n);
            }
            keep
        });
        self.phases.publish(&self.metrics);
        names.len()
    }

    /// Starts what is due, up to the concurrency cap.
    fn start_due(&mut self) {
        let Some(cur) = self.current.as_ref() else {
            return;
        };
        let Some(scope) = cur.scope.as_ref() else {
            return;
        };
        for name in self.queue.take_ready(Instant::now()) {
            let (agent, fleet, opts, scope) = (
                self.agent.clone(),
                cur.fleet.clone(),
                cur.opts.clone(),
                scope.clone(),
            );
            let task_name = name.clone();
            let handle = self.runs.spawn(async move {
                let t = Instant::now();
                let r = agent
                    .reconcile_cluster(&fleet, &opts, &scope, &task_name)
                    .await;
                (task_name, t.elapsed(), r)
            });
            self.running.insert(handle.id(), name);
        }
    }
}
