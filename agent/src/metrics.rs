//! The agent's Prometheus metrics, in one registry owned by [`Metrics`].
//!
//! No global registry: the agent builds one `Metrics`, shares it (`Arc<Metrics>`) with the
//! pipeline's steps and the HTTP server, and tests build their own. Label values are closed enums,
//! never free text from Git or the API server, so a hostile repository cannot blow up cardinality;
//! the only open label is the cluster phase, which is replaced wholesale on each status pass.
//!
//! Every labelled series of a closed enum is created at start-up with value zero, so `rate()` and
//! absence alerts work from the first scrape instead of from the first event. `capstan_clusters`
//! has an open label (the phase), so it is exposed from the first [`Metrics::set_clusters`] on.
//!
//! Names (prometheus-client appends `_total` to counters itself):
//! `capstan_reconcile_duration_seconds{stage}` (by [`PipelineStep`], under its old label name),
//! `capstan_api_requests_total{verb}`, `capstan_objects_total{action}`,
//! `capstan_reconciles_total{result}` (one per cluster run), `capstan_revisions_total{trigger}`,
//! `capstan_triggers_total{trigger}`, `capstan_queue_clusters{state}`, `capstan_retries_total`,
//! `capstan_webhook_requests_total{outcome}`, `capstan_clusters{phase}`, `capstan_leader`,
//! `capstan_pr_plans_total{result}`, `capstan_commit_statuses_total{result}`,
//! `capstan_github_push_access{access}` (1 for the verdict on whether capstan's GitHub
//! credentials could push to the fleet repository, 0 for the others; all 0 until checked;
//! [`crate::github::access`]),
//! `capstan_upgrades_held_total{reason}` (a cluster's upgrade held by the fleet's waves,
//! `maxUnavailable` or maintenance windows, once per pass that held it),
//! `capstan_wave_clusters{wave,state}` (workload clusters per wave and standing; the wave names
//! come from the fleet config, validated and few, and the family is replaced wholesale),
//! `capstan_commits_refused_total{reason}` (head commits `--verify-commits` refused, each once,
//! by [`crate::source::verify::Why`]),
//! `capstan_notifications_total{provider,result}` (phase-change notifications, by provider type
//! and [`NotifyResult`]: sent, failed, retried, dropped on a full queue, deduplicated or rate
//! limited; [`crate::notify`]),
//! `capstan_addon_steps_total{result}` (add-on steps inside workload clusters, by
//! [`AddonResult`]) and `capstan_addon_objects_total{action}` (add-ons applied or pruned inside
//! them; [`crate::reconcile::addons`]).

use std::fmt::Write as _;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why the metrics could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// A metric failed to write itself out.
    #[error("encoding the metrics failed: {0}")]
    Encode(#[from] std::fmt::Error),
}

/// Declares a closed label-value enum with its wire names.
macro_rules! label_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every value, for pre-creating series.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
                encoder.write_str(self.as_str())
            }
        }
    };
}

label_enum! {
    /// A step of the reconcile pipeline (source → layout → render → plan → apply → prune →
    /// status), timed; not an upgrade stage.
    PipelineStep {
        /// Fetching the Git source.
        Source => "source",
        /// Reading and validating the repository layout.
        Layout => "layout",
        /// Rendering objects.
        Render => "render",
        /// Diffing against the cluster.
        Plan => "plan",
        /// Server-side apply.
        Apply => "apply",
        /// Deleting what left Git.
        Prune => "prune",
        /// Reading status back.
        Status => "status",
    }
}

pub use capstan_client::k8s::Verb;

/// A [`Verb`] as a label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct VerbLabel(Verb);

impl EncodeLabelValue for VerbLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.0.as_str())
    }
}

label_enum! {
    /// What a reconcile did with one object.
    ObjectAction {
        /// Created.
        Create => "create",
        /// Changed.
        Update => "update",
        /// Already as desired.
        Unchanged => "unchanged",
        /// Deleted because it left Git.
        Prune => "prune",
        /// Deliberately left alone (paused, protected, owned by someone else).
        Skip => "skip",
        /// Pruned, waiting for its finalizers.
        Deleting => "deleting",
        /// Fought over with another field manager: not re-applied for a while.
        Conflict => "conflict",
        /// Waits for an earlier upgrade stage to roll out.
        Held => "held",
    }
}

label_enum! {
    /// How a reconcile ended.
    ReconcileResult {
        /// Everything applied.
        Success => "success",
        /// Something failed.
        Failure => "failure",
    }
}

label_enum! {
    /// A kind of trigger (what caused a revision to be loaded, or a cluster to be queued).
    Cause {
        /// The poll timer.
        Poll => "poll",
        /// A verified push webhook.
        Webhook => "webhook",
        /// An edit of the watched working copy.
        LocalChange => "local_change",
        /// A manual request.
        Manual => "manual",
        /// A watched object changed under the agent.
        ClusterChange => "cluster_change",
    }
}

label_enum! {
    /// Where a cluster is in the daemon's queue.
    QueueState {
        /// Waiting to run (due, or backing off after a failure).
        Queued => "queued",
        /// Being reconciled.
        Running => "running",
        /// Waiting for an upgrade stage, to be looked at again later.
        Waiting => "waiting",
    }
}

label_enum! {
    /// What the webhook endpoint made of a request.
    WebhookOutcome {
        /// A verified push to the followed branch: a trigger was fired.
        Accepted => "accepted",
        /// Missing, malformed or wrong signature.
        Unauthorized => "unauthorized",
        /// Verified but not a reason to reconcile (ping, other events, other branches, bad payload).
        Ignored => "ignored",
        /// The body was over the size limit.
        TooLarge => "too_large",
        /// A delivery id seen recently (a redelivery or a replay).
        Duplicate => "duplicate",
        /// Cut off (or refused) while the bounds on bodies not verified yet were reached: 503.
        Busy => "busy",
        /// The body did not arrive within the body timeout: 408.
        Timeout => "timeout",
    }
}

label_enum! {
    /// How a GitHub report (a PR plan, a commit status) ended.
    GitHubResult {
        /// Posted to GitHub.
        Posted => "posted",
        /// GitHub refused or kept failing (logged).
        Failed => "failed",
        /// Deliberately not planned (a fork without --pr-plans-from-forks, another base branch).
        Ignored => "ignored",
    }
}

label_enum! {
    /// What became of a phase-change notification ([`crate::notify`]).
    NotifyResult {
        /// The endpoint accepted it.
        Sent => "sent",
        /// Given up on: refused (a 4xx other than 429), out of retries, or no URL in the Secret.
        Failed => "failed",
        /// An attempt failed and is retried after a backoff.
        Retried => "retried",
        /// Not queued: the sender's queue was full (the reconcile never waits for it).
        Dropped => "dropped",
        /// Already sent for this cluster, event, reason and revision.
        Deduplicated => "deduplicated",
        /// Over the alert's perMinute.
        RateLimited => "rate_limited",
    }
}

label_enum! {
    /// A notification provider's type, as a label.
    NotifyProvider {
        /// Slack incoming webhook.
        Slack => "slack",
        /// Microsoft Teams workflow webhook.
        Teams => "teams",
        /// Generic signed webhook.
        Webhook => "webhook",
    }
}

impl From<capstan_layout::config::notifications::ProviderKind> for NotifyProvider {
    fn from(k: capstan_layout::config::notifications::ProviderKind) -> Self {
        use capstan_layout::config::notifications::ProviderKind as K;
        match k {
            K::Slack => NotifyProvider::Slack,
            K::Teams => NotifyProvider::Teams,
            K::Webhook => NotifyProvider::Webhook,
        }
    }
}

label_enum! {
    /// How a workload cluster's add-on step ended (its `AddonsReady` condition).
    AddonResult {
        /// Applied and current.
        Ready => "ready",
        /// Applied; some not rolled out yet.
        Progressing => "progressing",
        /// Waiting for the cluster: no kubeconfig, its API server not answering, no Ready node.
        Waiting => "waiting",
        /// An add-on refused or failed, or the kubeconfig refused.
        Failed => "failed",
    }
}

impl From<crate::status::Reason> for AddonResult {
    fn from(r: crate::status::Reason) -> Self {
        use crate::status::Reason as R;
        match r {
            R::Available => AddonResult::Ready,
            R::AddonsProgressing => AddonResult::Progressing,
            R::WaitingForCluster => AddonResult::Waiting,
            _ => AddonResult::Failed,
        }
    }
}

label_enum! {
    /// What an add-on step did to one add-on.
    AddonAction {
        /// Applied (created, changed, or confirmed as it is).
        Applied => "applied",
        /// Deleted from the cluster: it left the repository.
        Pruned => "pruned",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AddonResultLabels {
    result: AddonResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AddonActionLabels {
    action: AddonAction,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct NotifyLabels {
    provider: NotifyProvider,
    result: NotifyResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct GitHubLabels {
    result: GitHubResult,
}

/// The label is still called `stage`: dashboards and alerts query it by that name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StepLabels {
    stage: PipelineStep,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct VerbLabels {
    verb: VerbLabel,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ActionLabels {
    action: ObjectAction,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabels {
    result: ReconcileResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct QueueLabels {
    state: QueueState,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CauseLabels {
    trigger: Cause,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: WebhookOutcome,
}

label_enum! {
    /// Why an upgrade was held fleet-wide (the [`crate::plan::waves::Hold`]'s reason).
    HoldReason {
        /// A cluster of its wave or an earlier one failed.
        WaveStopped => "wave_stopped",
        /// The waves before it are not Ready at the revision.
        WaitingForWave => "waiting_for_wave",
        /// Outside every maintenance window.
        OutsideMaintenanceWindow => "outside_maintenance_window",
        /// `maxUnavailable` clusters upgrading.
        MaxUnavailable => "max_unavailable",
    }
}

impl TryFrom<crate::status::Reason> for HoldReason {
    type Error = crate::status::Reason;

    /// The reasons the fleet's pacing holds an upgrade for; any other is not one.
    fn try_from(r: crate::status::Reason) -> Result<Self, Self::Error> {
        use crate::status::Reason;
        match r {
            Reason::WaveStopped => Ok(HoldReason::WaveStopped),
            Reason::WaitingForWave => Ok(HoldReason::WaitingForWave),
            Reason::OutsideMaintenanceWindow => Ok(HoldReason::OutsideMaintenanceWindow),
            Reason::MaxUnavailable => Ok(HoldReason::MaxUnavailable),
            other => Err(other),
        }
    }
}

/// Why a commit was refused, as a label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct RefusalLabel(crate::source::verify::Why);

impl EncodeLabelValue for RefusalLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.0.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RefusalLabels {
    reason: RefusalLabel,
}

/// Whether the GitHub credentials could push, as a label value (`github::access`'s verdicts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct PushLabel(&'static str);

impl EncodeLabelValue for PushLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PushLabels {
    access: PushLabel,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct HoldLabels {
    reason: HoldReason,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct WaveLabels {
    wave: String,
    state: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PhaseLabels {
    phase: String,
}

type HistogramFamily = Family<StepLabels, Histogram, fn() -> Histogram>;

/// Registers `family` as `name` and creates its series for `labels` at zero (a closed label
/// set: every series is there from the start, so a rate over it never misses its first
/// increase).
fn series<L, M, C>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    family: Family<L, M, C>,
    labels: impl IntoIterator<Item = L>,
) -> Family<L, M, C>
where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
    M: prometheus_client::encoding::EncodeMetric
        + prometheus_client::metrics::TypedMetric
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    C: prometheus_client::metrics::family::MetricConstructor<M>
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    registry.register(name, help, family.clone());
    for l in labels {
        let _ = family.get_or_create(&l);
    }
    family
}

fn step_histogram() -> Histogram {
    // 5 ms to about 82 minutes: rendering takes milliseconds, waiting for a rollout takes minutes.
    Histogram::new(exponential_buckets(0.005, 2.0, 20))
}

/// The agent's metrics and the registry that exposes them.
pub struct Metrics {
    registry: Registry,
    step_duration: HistogramFamily,
    api_requests: Family<VerbLabels, Counter>,
    objects: Family<ActionLabels, Counter>,
    reconciles: Family<ResultLabels, Counter>,
    revisions: Family<CauseLabels, Counter>,
    triggers: Family<CauseLabels, Counter>,
    retries: Counter,
    queue: Family<QueueLabels, Gauge>,
    webhook_requests: Family<OutcomeLabels, Counter>,
    clusters: Family<PhaseLabels, Gauge>,
    resident_memory: Gauge,
    leader: Gauge,
    pr_plans: Family<GitHubLabels, Counter>,
    commit_statuses: Family<GitHubLabels, Counter>,
    github_push_access: Family<PushLabels, Gauge>,
    upgrades_held: Family<HoldLabels, Counter>,
    wave_clusters: Family<WaveLabels, Gauge>,
    commits_refused: Family<RefusalLabels, Counter>,
    notifications: Family<NotifyLabels, Counter>,
    addon_steps: Family<AddonResultLabels, Counter>,
    addon_objects: Family<AddonActionLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Registers every metric, with all closed-label series at zero.
    pub fn new() -> Metrics {
        let mut r = Registry::default();
        let step_duration = series(
            &mut r,
            "capstan_reconcile_duration_seconds",
            "Time spent in each reconcile stage, in seconds",
            HistogramFamily::new_with_constructor(step_histogram as fn() -> Histogram),
            PipelineStep::ALL.iter().map(|&stage| StepLabels { stage }),
        );
        let revisions = series(
            &mut r,
            "capstan_revisions",
            "Revisions loaded from the source (read, validated, rendered), by what caused it",
            Family::default(),
            Cause::ALL.iter().map(|&trigger| CauseLabels { trigger }),
        );
        let triggers = series(
            &mut r,
            "capstan_triggers",
            "Triggers the daemon received (merged ones included), by kind",
            Family::default(),
            Cause::ALL.iter().map(|&trigger| CauseLabels { trigger }),
        );
        let pr_plans = series(
            &mut r,
            "capstan_pr_plans",
            "Pull-request plans, by result",
            Family::default(),
            GitHubResult::ALL
                .iter()
                .map(|&result| GitHubLabels { result }),
        );
        let commit_statuses = series(
            &mut r,
            "capstan_commit_statuses",
            "Commit statuses sent to GitHub, by result",
            Family::default(),
            GitHubResult::ALL
                .iter()
                .map(|&result| GitHubLabels { result }),
        );
        let resident_memory = Gauge::default();
        r.register(
            "process_resident_memory_bytes",
            "Resident memory of the agent, in bytes, after the last pass",
            resident_memory.clone(),
        );
        let leader = Gauge::default();
        r.register(
            "capstan_leader",
            "1 while this replica holds the leader-election Lease (or runs without election), else 0",
            leader.clone(),
        );
        let retries = Counter::default();
        r.register(
            "capstan_retries",
            "Clusters queued again after a failure, with backoff",
            retries.clone(),
        );
        Metrics {
            step_duration,
            api_requests: series(
                &mut r,
                "capstan_api_requests",
                "Kubernetes API requests, by verb",
                Family::default(),
                Verb::ALL.iter().map(|&verb| VerbLabels {
                    verb: VerbLabel(verb),
                }),
            ),
            objects: series(
                &mut r,
                "capstan_objects",
                "Objects handled by reconciles, by action",
                Family::default(),
                ObjectAction::ALL
                    .iter()
                    .map(|&action| ActionLabels { action }),
            ),
            reconciles: series(
                &mut r,
                "capstan_reconciles",
                "Finished reconciles of one cluster, by result",
                Family::default(),
                ReconcileResult::ALL
                    .iter()
                    .map(|&result| ResultLabels { result }),
            ),
            revisions,
            triggers,
            retries,
            queue: series(
                &mut r,
                "capstan_queue_clusters",
                "Clusters in the daemon's queue, by state",
                Family::default(),
                QueueState::ALL.iter().map(|&state| QueueLabels { state }),
            ),
            webhook_requests: series(
                &mut r,
                "capstan_webhook_requests",
                "Requests to the webhook endpoint, by outcome",
                Family::default(),
                WebhookOutcome::ALL
                    .iter()
                    .map(|&outcome| OutcomeLabels { outcome }),
            ),
            clusters: series(
                &mut r,
                "capstan_clusters",
                "Clusters in the fleet, by phase",
                Family::default(),
                [],
            ),
            resident_memory,
            leader,
            pr_plans,
            commit_statuses,
            github_push_access: series(
                &mut r,
                "capstan_github_push_access",
                "Whether capstan's GitHub credentials could push to the fleet repository: 1 for the verdict (granted, possible, none, unknown), 0 for the others",
                Family::default(),
                [],
            ),
            upgrades_held: series(
                &mut r,
                "capstan_upgrades_held",
                "Cluster passes whose upgrade the fleet's waves, maxUnavailable or maintenance windows held, by reason",
                Family::default(),
                HoldReason::ALL.iter().map(|&reason| HoldLabels { reason }),
            ),
            wave_clusters: series(
                &mut r,
                "capstan_wave_clusters",
                "Workload clusters by upgrade wave and standing (done, upgrading, failed, pending)",
                Family::default(),
                [],
            ),
            commits_refused: series(
                &mut r,
                "capstan_commits_refused",
                "Head commits refused by --verify-commits (unsigned, bad signature, untrusted, expired or revoked key, ...), each once, by reason",
                Family::default(),
                crate::source::verify::Why::ALL
                    .iter()
                    .map(|&why| RefusalLabels {
                        reason: RefusalLabel(why),
                    }),
            ),
            notifications: series(
                &mut r,
                "capstan_notifications",
                "Phase-change notifications, by provider type and result (sent, failed, retried, dropped, deduplicated, rate_limited)",
                Family::default(),
                NotifyProvider::ALL.iter().flat_map(|&provider| {
                    NotifyResult::ALL
                        .iter()
                        .map(move |&result| NotifyLabels { provider, result })
                }),
            ),
            addon_steps: series(
                &mut r,
                "capstan_addon_steps",
                "Add-on steps inside workload clusters, by result (ready, progressing, waiting, failed)",
                Family::default(),
                AddonResult::ALL
                    .iter()
                    .map(|&result| AddonResultLabels { result }),
            ),
            addon_objects: series(
                &mut r,
                "capstan_addon_objects",
                "Add-ons applied or pruned inside workload clusters",
                Family::default(),
                AddonAction::ALL
                    .iter()
                    .map(|&action| AddonActionLabels { action }),
            ),
            registry: r,
        }
    }

    /// Counts one add-on step: its result and the add-ons it applied and pruned.
    pub fn add_addon_step(&self, t: &crate::plan::addons::Tally) {
        self.addon_steps
            .get_or_create(&AddonResultLabels {
                result: t.reason.into(),
            })
            .inc();
        for (action, n) in [
            (AddonAction::Applied, t.applied),
            (AddonAction::Pruned, t.pruned),
        ] {
            self.addon_objects
                .get_or_create(&AddonActionLabels { action })
                .inc_by(n as u64);
        }
    }

    /// The add-on steps so far with this result.
    pub fn addon_steps(&self, result: AddonResult) -> u64 {
        self.addon_steps
            .get_or_create(&AddonResultLabels { result })
            .get()
    }

    /// Counts a notification's fate.
    pub fn inc_notification(&self, provider: NotifyProvider, result: NotifyResult) {
        self.notifications
            .get_or_create(&NotifyLabels { provider, result })
            .inc();
    }

    /// The notifications so far with this fate.
    pub fn notifications(&self, provider: NotifyProvider, result: NotifyResult) -> u64 {
        self.notifications
            .get_or_create(&NotifyLabels { provider, result })
            .get()
    }

    /// Counts a head commit refused by commit verification.
    pub fn inc_commit_refused(&self, why: crate::source::verify::Why) {
        self.commits_refused
            .get_or_create(&RefusalLabels {
                reason: RefusalLabel(why),
            })
            .inc();
    }

    /// The head commits refused so far for this reason.
    pub fn commits_refused(&self, why: crate::source::verify::Why) -> u64 {
        self.commits_refused
            .get_or_create(&RefusalLabels {
                reason: RefusalLabel(why),
            })
            .get()
    }

    /// Counts a cluster pass whose upgrade was held fleet-wide.
    pub fn inc_upgrade_held(&self, reason: HoldReason) {
        self.upgrades_held
            .get_or_create(&HoldLabels { reason })
            .inc();
    }

    /// The upgrades held so far for this reason.
    pub fn upgrades_held(&self, reason: HoldReason) -> u64 {
        self.upgrades_held
            .get_or_create(&HoldLabels { reason })
            .get()
    }

    /// Replaces the wave census: (wave, standing, clusters).
    pub fn set_waves<'a>(&self, counts: impl IntoIterator<Item = (&'a str, &'a str, i64)>) {
        self.wave_clusters.clear();
        for (wave, state, n) in counts {
            self.wave_clusters
                .get_or_create(&WaveLabels {
                    wave: wave.to_owned(),
                    state: state.to_owned(),
                })
                .set(n);
        }
    }

    /// Whether this replica reconciles (holds the Lease, or runs without leader election).
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Counts a pull-request plan.
    pub fn inc_pr_plan(&self, result: GitHubResult) {
        self.pr_plans.get_or_create(&GitHubLabels { result }).inc();
    }

    /// Records whether the GitHub credentials could push to the fleet repository: 1 for
    /// `verdict`, 0 for the other values of `all` (the series appear once the check ran).
    pub fn set_github_push_access(&self, verdict: &'static str, all: &[&'static str]) {
        for &access in all {
            self.github_push_access
                .get_or_create(&PushLabels {
                    access: PushLabel(access),
                })
                .set(i64::from(access == verdict));
        }
    }

    /// Counts a commit status.
    pub fn inc_commit_status(&self, result: GitHubResult) {
        self.commit_statuses
            .get_or_create(&GitHubLabels { result })
            .inc();
    }

    /// Records how long a step of the pipeline took.
    pub fn observe_step(&self, stage: PipelineStep, elapsed: Duration) {
        self.step_duration
            .get_or_create(&StepLabels { stage })
            .observe(elapsed.as_secs_f64());
    }

    /// Counts one Kubernetes API request.
    pub fn inc_api_request(&self, verb: Verb) {
        self.api_requests
            .get_or_create(&VerbLabels {
                verb: VerbLabel(verb),
            })
            .inc();
    }

    /// Counts one object handled.
    pub fn inc_object(&self, action: ObjectAction) {
        self.add_objects(action, 1);
    }

    /// Counts `n` objects handled the same way.
    pub fn add_objects(&self, action: ObjectAction, n: u64) {
        self.objects
            .get_or_create(&ActionLabels { action })
            .inc_by(n);
    }

    /// Counts one finished reconcile.
    pub fn inc_reconcile(&self, result: ReconcileResult) {
        self.reconciles
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Counts one revision loaded.
    pub fn inc_revision(&self, trigger: Cause) {
        self.revisions.get_or_create(&CauseLabels { trigger }).inc();
    }

    /// Counts one trigger received.
    pub fn inc_trigger(&self, trigger: Cause) {
        self.triggers.get_or_create(&CauseLabels { trigger }).inc();
    }

    /// Sets how many clusters are queued and running.
    pub fn set_queue(&self, queued: usize, running: usize, waiting: usize) {
        for (state, n) in [
            (QueueState::Queued, queued),
            (QueueState::Running, running),
            (QueueState::Waiting, waiting),
        ] {
            self.queue
                .get_or_create(&QueueLabels { state })
                .set(n as i64);
        }
    }

    /// Counts one cluster queued again after a failure.
    pub fn inc_retry(&self) {
        self.retries.inc();
    }

    /// Counts one webhook request.
    pub fn inc_webhook(&self, outcome: WebhookOutcome) {
        self.webhook_requests
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// The webhook requests counted so far with this outcome.
    pub fn webhook_requests(&self, outcome: WebhookOutcome) -> u64 {
        self.webhook_requests
            .get_or_create(&OutcomeLabels { outcome })
            .get()
    }

    /// The reconciles counted so far with this result.
    pub fn reconciles(&self, result: ReconcileResult) -> u64 {
        self.reconciles
            .get_or_create(&ResultLabels { result })
            .get()
    }

    /// Sets the number of clusters in one phase.
    pub fn set_clusters(&self, phase: &str, count: i64) {
        self.clusters
            .get_or_create(&PhaseLabels {
                phase: phase.to_owned(),
            })
            .set(count);
    }

    /// Replaces the whole cluster census: phases not listed disappear instead of keeping a stale
    /// count from an earlier pass.
    /// Records the process's resident memory.
    pub fn set_resident_memory(&self, bytes: u64) {
        self.resident_memory.set(bytes as i64);
    }

    pub fn set_cluster_phases<'a>(&self, counts: impl IntoIterator<Item = (&'a str, i64)>) {
        self.clusters.clear();
        for (phase, count) in counts {
            self.set_clusters(phase, count);
        }
    }

    /// The OpenMetrics text exposition of every metric ([`CONTENT_TYPE`]).
    pub fn try_encode(&self) -> Result<String, MetricsError> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    /// [`Metrics::try_encode`], logging a failure and returning what was written before it.
    /// Writing into a `String` only fails if a metric's own encoder does, which ours never do.
    pub fn encode(&self) -> String {
        self.try_encode().unwrap_or_else(|e| {
            tracing::error!(error = %e, "encoding metrics");
            String::new()
        })
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_exposed_from_the_start() {
        let m = Metrics::new();
        let text = m.encode();
        for line in [
            "# TYPE capstan_reconcile_duration_seconds histogram",
            "capstan_reconcile_duration_seconds_count{stage=\"prune\"} 0",
            "capstan_api_requests_total{verb=\"watch\"} 0",
            "capstan_objects_total{action=\"unchanged\"} 0",
            "capstan_reconciles_total{result=\"failure\"} 0",
            "capstan_webhook_requests_total{outcome=\"too_large\"} 0",
            "capstan_upgrades_held_total{reason=\"max_unavailable\"} 0",
            "capstan_addon_steps_total{result=\"waiting\"} 0",
            "capstan_addon_objects_total{action=\"pruned\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(text.ends_with("# EOF\n"));
        // The phase label is open, so the gauge has no series (and is not listed) until a status pass.
        assert!(!text.contains("capstan_clusters"));
        m.set_clusters("Provisioned", 0);
        assert!(
            m.encode()
                .lines()
                .any(|l| l == "# TYPE capstan_clusters gauge")
        );
    }

    #[test]
    fn observations_show_up() {
        let m = Metrics::new();
        m.observe_step(PipelineStep::Render, Duration::from_millis(20));
        m.inc_api_request(Verb::Patch);
        m.add_objects(ObjectAction::Create, 3);
        m.inc_reconcile(ReconcileResult::Success);
        m.inc_webhook(WebhookOutcome::Accepted);
        m.inc_webhook(WebhookOutcome::Accepted);
        m.set_cluster_phases([("Provisioned", 3), ("Provisioning", 1)]);
        m.set_cluster_phases([("Provisioned", 4)]);
        m.inc_upgrade_held(crate::status::Reason::WaitingForWave.try_into().unwrap());
        m.set_waves([("canary", "upgrading", 1), ("rest", "pending", 2)]);
        m.set_waves([("canary", "done", 1), ("rest", "pending", 2)]);
        assert_eq!(m.upgrades_held(HoldReason::WaitingForWave), 1);
        let text = m.encode();
        for line in [
            "capstan_upgrades_held_total{reason=\"waiting_for_wave\"} 1",
            "capstan_wave_clusters{wave=\"canary\",state=\"done\"} 1",
            "capstan_wave_clusters{wave=\"rest\",state=\"pending\"} 2",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(!text.contains("state=\"upgrading\""), "{text}");
        for line in [
            "capstan_reconcile_duration_seconds_count{stage=\"render\"} 1",
            "capstan_api_requests_total{verb=\"patch\"} 1",
            "capstan_objects_total{action=\"create\"} 3",
            "capstan_reconciles_total{result=\"success\"} 1",
            "capstan_webhook_requests_total{outcome=\"accepted\"} 2",
            "capstan_clusters{phase=\"Provisioned\"} 4",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(!text.contains("Provisioning"), "stale phase kept:\n{text}");
        assert_eq!(m.webhook_requests(WebhookOutcome::Accepted), 2);
        assert_eq!(m.reconciles(ReconcileResult::Success), 1);
    }

    #[test]
    fn add_on_steps_are_counted_by_result_and_objects_by_action() {
        use crate::plan::addons::Tally;
        use crate::status::Reason;
        let m = Metrics::new();
        for (reason, applied, pruned) in [
            (Reason::WaitingForCluster, 0, 0),
            (Reason::AddonsProgressing, 5, 1),
            (Reason::Available, 5, 0),
            (Reason::AddonsFailed, 2, 0),
        ] {
            m.add_addon_step(&Tally {
                reason,
                applied,
                pruned,
            });
        }
        assert_eq!(m.addon_steps(AddonResult::Waiting), 1);
        assert_eq!(m.addon_steps(AddonResult::Failed), 1);
        let text = m.encode();
        for line in [
            "capstan_addon_steps_total{result=\"ready\"} 1",
            "capstan_addon_steps_total{result=\"progressing\"} 1",
            "capstan_addon_objects_total{action=\"applied\"} 12",
            "capstan_addon_objects_total{action=\"pruned\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn phase_label_values_are_escaped() {
        let m = Metrics::new();
        m.set_clusters("a\"b\nc", 1);
        let text = m.encode();
        assert!(
            text.contains("capstan_clusters{phase=\"a\\\"b\\nc\"} 1"),
            "{text}"
        );
    }
}
