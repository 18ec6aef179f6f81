//! Ordered upgrades: which changes of a cluster's plan are applied now and which wait for an
//! earlier stage to finish rolling out.
//!
//! ```text
//!  prepare        etcd             control plane         CNI              workers
//!  templates,  ─▶ EtcdadmCluster ─▶ KubeadmControlPlane ─▶ HelmChartProxy ─▶ MachineDeployments
//!  Cluster, …     every member       observed, every        Ready at its      one group at a time
//!  (never held)   up to date,        machine up to date     generation        (sequential) or
//!                 endpoints known    and available                            all (parallel)
//! ```
//!
//! Applying a version bump to every object at once is what the kindless-upgrades design warns
//! against: etcd and the control plane change together (harder to roll back, and a second
//! control-plane rollout once etcd's endpoints move), workers start while the control plane still
//! rolls (a kubelet newer than its API server), and the next step trusts a stale "ready".
//! So a change is applied stage by stage: a stage's changes go out only once every earlier
//! stage is rolled out, read from Cluster API's own status at the object's current generation.
//! Nothing waits in a pass: held changes are reported ([`Staged::held`]) and the watch that sees
//! the stage finish brings the cluster back.
//!
//! What never waits: objects that roll no machine (the prepare stage: templates are named by
//! content, so a new one is a new object that nothing uses yet), scale-only changes (replicas),
//! drift corrections (what was applied before, put back), and new objects (a new cluster or worker group replaces no machine; Cluster API orders a
//! creation itself): they are applied at once and do not hold later stages. The one creation
//! that must wait — a control plane on external etcd, until etcd reports its endpoints — is
//! held by its caller before the stages are looked at.
//!
//! [`stage`] says which stage an object belongs to, [`progress`] whether a stage is rolled out,
//! and [`schedule`] walks the stages of a plan. All pure: facts in, decisions out.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use super::{Action, Entry, ObjectRef};
use crate::health::{self, Observed};

/// A stage of a cluster's change, in apply order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase", tag = "stage", content = "group")]
pub enum Stage {
    /// Objects that roll no machine: EKS-A objects, machine and bootstrap templates, the
    /// infrastructure cluster, the Cluster, health checks, the directory's own objects.
    Prepare,
    /// External etcd: the EtcdadmCluster.
    Etcd,
    /// The KubeadmControlPlane.
    ControlPlane,
    /// The CNI and other add-ons: HelmChartProxies.
    Cni,
    /// Worker groups: one MachineDeployment (sequential rollouts), or all of them (`None`).
    Workers(Option<String>),
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stage::Prepare => f.write_str("prepare"),
            Stage::Etcd => f.write_str("etcd"),
            Stage::ControlPlane => f.write_str("control plane"),
            Stage::Cni => f.write_str("CNI"),
            Stage::Workers(None) => f.write_str("workers"),
            Stage::Workers(Some(g)) => write!(f, "workers {g}"),
        }
    }
}

impl Stage {
    /// The name written in the status (`stage`).
    pub fn name(&self) -> &'static str {
        match self {
            Stage::Prepare => "Prepare",
            Stage::Etcd => "Etcd",
            Stage::ControlPlane => "ControlPlane",
            Stage::Cni => "CNI",
            Stage::Workers(_) => "Workers",
        }
    }
}

// When the control plane counts as done, and how worker groups roll: written in the fleet
// config (`spec.rollout`), so defined with it.
pub use capstan_layout::config::{RolloutWait, WorkerRollout};

/// How a cluster's stages proceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settings {
    /// When the control plane counts as done.
    pub rollout_wait: RolloutWait,
    /// How worker groups roll.
    pub workers: WorkerRollout,
}

impl Settings {
    /// A cluster's settings: `base` (the agent's), with what the fleet config's `rollout`
    /// section writes; a management cluster always waits for its whole control plane (its own
    /// API server is what the next stage talks to).
    pub fn for_cluster(
        base: Settings,
        rollout: Option<&capstan_layout::config::Rollout>,
        management: bool,
    ) -> Settings {
        let mut s = base;
        if let Some(r) = rollout {
            s.rollout_wait = r.rollout_wait.unwrap_or(s.rollout_wait);
            s.workers = r.worker_rollout.unwrap_or(s.workers);
        }
        if management {
            s.rollout_wait = RolloutWait::Complete;
        }
        s
    }

    /// `sequential` or `parallel`, for humans.
    pub fn workers_word(&self) -> &'static str {
        match self.workers {
            WorkerRollout::Sequential => "sequential",
            WorkerRollout::Parallel => "parallel",
        }
    }
}

/// Whether an entry of a plan may roll machines when applied: a change (not a scale or a drift
/// correction) to an object of a rollout stage. What the upgrade gates look at, for the objects
/// that are live (a creation replaces nothing).
pub fn rolls_machines(e: &Entry) -> bool {
    matches!(e.action, Action::Create | Action::Update)
        && !e.scale_only
        && !e.is_drift_correction()
        && stage(&e.object, WorkerRollout::Parallel) != Stage::Prepare
}

/// The stages a plan's changes go through, in order, for a reviewer (`capstan plan`,
/// `capstan diff`, PR comments): `etcd → control plane → workers md-0, md-1 (sequential)`;
/// `scale only: no waits` when nothing rolls; None when no rollout object changes. Creations
/// and drift corrections wait for nothing and are left out.
pub fn outline(entries: &[Entry], settings: Settings) -> Option<String> {
    let rolling: Vec<&Entry> = entries
        .iter()
        .filter(|e| {
            (e.action == Action::Update && rolls_machines(e))
                || (e.action == Action::Held
                    && stage(&e.object, settings.workers) != Stage::Prepare)
        })
        .collect();
    if rolling.is_empty() {
        let scales = entries
            .iter()
            .any(|e| e.scale_only && e.action == Action::Update);
        return scales.then(|| "scale only: no waits".to_string());
    }
    let mut steps: Vec<String> = Vec::new();
    let mut groups: Vec<&str> = Vec::new();
    let mut seen: Vec<Stage> = Vec::new();
    let mut by_stage: Vec<(Stage, &Entry)> = rolling
        .iter()
        .map(|e| (stage(&e.object, WorkerRollout::Parallel), *e))
        .collect();
    by_stage.sort_by(|a, b| a.0.cmp(&b.0));
    for (s, e) in by_stage {
        if s == Stage::Workers(None) {
            groups.push(&e.object.name);
        } else if !seen.contains(&s) {
            seen.push(s.clone());
            steps.push(s.to_string());
        }
    }
    if !groups.is_empty() {
        // Sequential groups go in the scheduler's order: by name.
        groups.sort_unstable();
        groups.dedup();
        steps.push(format!(
            "workers {} ({})",
            groups.join(", "),
            settings.workers_word()
        ));
    }
    Some(format!("stages: {}", steps.join(" → ")))
}

/// The stage of an object.
pub fn stage(r: &ObjectRef, workers: WorkerRollout) -> Stage {
    match (r.group(), r.kind.as_str()) {
        ("etcdcluster.cluster.x-k8s.io", "EtcdadmCluster") => Stage::Etcd,
        ("controlplane.cluster.x-k8s.io", "KubeadmControlPlane") => Stage::ControlPlane,
        ("addons.cluster.x-k8s.io", "HelmChartProxy") => Stage::Cni,
        ("cluster.x-k8s.io", "MachineDeployment") => Stage::Workers(match workers {
            WorkerRollout::Parallel => None,
            WorkerRollout::Sequential => Some(r.name.clone()),
        }),
        _ => Stage::Prepare,
    }
}

/// Whether a stage's objects are rolled out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Rolled out at their current generation.
    Done,
    /// Not yet: why, for humans (`KubeadmControlPlane/dev: 2/3 machines up to date`).
    Waiting(String),
}

/// Whether one object of a stage is rolled out, from Cluster API's status at its generation.
pub fn progress(stage: &Stage, o: &Observed<'_>, wait: RolloutWait) -> Progress {
    let waiting = |m: String| Progress::Waiting(m);
    let Some(r) = o.rollout else {
        return waiting(format!("{}: not reported on yet", o.what));
    };
    if r.deleting {
        return waiting(format!("{} is being deleted", o.what));
    }
    match stage {
        Stage::Prepare => Progress::Done,
        Stage::Etcd => {
            if r.observed_generation < o.generation {
                return waiting(format!(
                    "{}: generation {} not observed yet",
                    o.what, o.generation
                ));
            }
            let e = r.etcd.clone().unwrap_or_default();
            if r.condition("EtcdMachinesSpecUpToDate")
                .is_some_and(|c| &*c.status == "False")
            {
                return waiting(format!("{}: members not all up to date", o.what));
            }
            if !e.ready || e.ready_replicas != e.desired {
                return waiting(format!(
                    "{}: {}/{} members ready",
                    o.what, e.ready_replicas, e.desired
                ));
            }
            if e.endpoints.is_empty() {
                return waiting(format!("{}: endpoints not reported yet", o.what));
            }
            Progress::Done
        }
        Stage::Cni => {
            // CAAPH installs the chart into the workload cluster. A HelmChartProxy no controller
            // ever reported on (no CAAPH on this management cluster) is not waited for: there
            // is nothing that could make it ready.
            if r.observed_generation == 0 && r.conditions.is_empty() {
                return Progress::Done;
            }
            if r.observed_generation < o.generation {
                return waiting(format!(
                    "{}: generation {} not observed yet",
                    o.what, o.generation
                ));
            }
            match r.condition("Ready") {
                Some(c) if &*c.status == "True" => Progress::Done,
                Some(c) => waiting(format!("{}: Ready={} {}", o.what, c.status, c.reason)),
                None => waiting(format!("{}: Ready not reported yet", o.what)),
            }
        }
        Stage::ControlPlane if wait == RolloutWait::FirstNode => {
            if r.observed_generation < o.generation {
                return waiting(format!(
                    "{}: generation {} not observed yet",
                    o.what, o.generation
                ));
            }
            match r.replicas {
                Some(n) => {
                    let desired = n.desired.unwrap_or(n.current);
                    if n.up_to_date >= 1 && n.available >= desired {
                        Progress::Done
                    } else {
                        waiting(format!(
                            "{}: {}/{desired} machines up to date, {} available (waiting for the first new machine)",
                            o.what, n.up_to_date, n.available
                        ))
                    }
                }
                None => waiting(format!("{}: no machines reported yet", o.what)),
            }
        }
        Stage::ControlPlane | Stage::Workers(_) => match health::rolled_out(o) {
            None => Progress::Done,
            Some(a) => waiting(a.message),
        },
    }
}

/// What a stage of this plan does now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum State {
    /// Nothing to change, rolled out.
    Done,
    /// Its changes are applied in this pass.
    Apply,
    /// Its changes wait for an earlier stage.
    Held,
    /// Nothing (more) to apply; Cluster API is rolling it out.
    RollingOut,
}

/// One stage of a cluster's plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageReport {
    /// The stage.
    #[serde(flatten)]
    pub stage: Stage,
    /// Objects of the stage that change (`Kind/name`).
    pub changes: Vec<String>,
    /// What happens to it now.
    pub state: State,
    /// Its progress when it is not done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
}

/// How soon a cluster waiting for a stage is looked at again when no watch event brings it back
/// (a controller that reports nothing, an event lost in a reconnect).
pub const RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// The stages of a plan, and what waits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Staged {
    /// Every stage with rollout objects, in order.
    pub stages: Vec<StageReport>,
    /// Changes held back, by [`ObjectRef::key`], with the reason.
    #[serde(skip)]
    pub held: BTreeMap<String, String>,
    /// The first stage that is not rolled out, and why: what the cluster waits for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<(Stage, String)>,
    /// The stages the plan's changes go through, for humans ([`outline`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outline: Option<String>,
}

impl Staged {
    /// `Upgrading: control plane: KubeadmControlPlane/dev: 2/3 machines up to date`, when the
    /// cluster waits for a stage.
    pub fn summary(&self) -> Option<String> {
        self.waiting.as_ref().map(|(s, p)| {
            let held = self.held.len();
            let tail = if held == 0 {
                String::new()
            } else {
                format!(" ({held} change(s) of later stages held)")
            };
            format!("{s}: {p}{tail}")
        })
    }
}

/// Walks the stages of a plan in order: a stage's rollout changes are applied when every
/// earlier stage is rolled out, and held otherwise; scale-only changes (`scale_only`) never wait
/// and never hold anything. Entries already [`Action::Held`] (by the caller: an object that
/// cannot be applied yet) hold every later stage. `observe` gives the live facts of an object
/// (None: not live).
pub fn schedule<'a>(
    entries: &[Entry],
    observe: impl Fn(&ObjectRef) -> Option<Observed<'a>>,
    settings: Settings,
) -> Staged {
    let mut by_stage: BTreeMap<Stage, Vec<&Entry>> = BTreeMap::new();
    for e in entries {
        let s = stage(&e.object, settings.workers);
        if s != Stage::Prepare && e.action != Action::Prune && e.action != Action::Deleting {
            by_stage.entry(s).or_default().push(e);
        }
    }
    let mut out = Staged::default();
    for (s, members) in by_stage {
        let changes: Vec<&Entry> = members
            .iter()
            .copied()
            .filter(|e| matches!(e.action, Action::Create | Action::Update))
            .collect();
        let mut applied_rollout = false;
        let mut held = false;
        // Held by the caller before any stage was looked at (an object that cannot be applied
        // yet): later stages wait for it.
        for e in members.iter().filter(|e| e.action == Action::Held) {
            held = true;
            if out.waiting.is_none() {
                out.waiting = Some((s.clone(), e.reason.clone().unwrap_or_default()));
            }
        }
        for e in &changes {
            // A scale rolls nothing; a new object (a new cluster, a new worker group) replaces
            // nothing; a drift correction puts back what was applied before: none waits, nor
            // holds anything. Cluster API orders a creation itself (workers join once the
            // control plane is up; a worker group newer than its control plane gets no
            // machines).
            if e.scale_only || e.action == Action::Create || e.is_drift_correction() {
                continue;
            }
            match &out.waiting {
                Some((b, p)) => {
                    held = true;
                    out.held
                        .insert(e.object.key(), format!("waits for the {b} stage: {p}"));
                }
                None => applied_rollout = true,
            }
        }
        // An add-on nobody reports on (no CAAPH on this management cluster) is applied and not
        // waited for: nothing would ever say it is done.
        let reported = members.iter().any(|e| {
            observe(&e.object)
                .and_then(|o| o.rollout)
                .is_some_and(|r| r.observed_generation > 0 || !r.conditions.is_empty())
        });
        let awaited = applied_rollout && (s != Stage::Cni || reported);
        let rolling = if held {
            None
        } else if awaited {
            Some("applied; waiting for Cluster API to roll it out".to_string())
        } else if applied_rollout {
            None
        } else {
            members.iter().find_map(|e| {
                let o = observe(&e.object)?;
                match progress(&s, &o, settings.rollout_wait) {
                    Progress::Done => None,
                    Progress::Waiting(p) => Some(p),
                }
            })
        };
        let state = if held {
            State::Held
        } else if applied_rollout || changes.iter().any(|e| e.scale_only) {
            State::Apply
        } else if rolling.is_some() {
            State::RollingOut
        } else {
            State::Done
        };
        if let (None, Some(p)) = (&out.waiting, &rolling) {
            out.waiting = Some((s.clone(), p.clone()));
        }
        out.stages.push(StageReport {
            stage: s,
            changes: changes
                .iter()
                .map(|e| format!("{}/{}", e.object.kind, e.object.name))
                .collect(),
            state,
            progress: rolling,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::RolloutStatus;
    use serde_json::json;

    fn r(kind: &str, name: &str) -> ObjectRef {
        let group = match kind {
            "KubeadmControlPlane" => "controlplane.cluster.x-k8s.io/v1beta2",
            "EtcdadmCluster" => "etcdcluster.cluster.x-k8s.io/v1beta1",
            "HelmChartProxy" => "addons.cluster.x-k8s.io/v1alpha1",
            "DevMachineTemplate" => "infrastructure.cluster.x-k8s.io/v1beta2",
            _ => "cluster.x-k8s.io/v1beta2",
        };
        ObjectRef {
            api_version: group.into(),
            kind: kind.into(),
            namespace: "ns".into(),
            name: name.into(),
            hash: String::new(),
            generation: 0,
            fields: String::new(),
        }
    }

    fn e(kind: &str, name: &str, action: Action) -> Entry {
        Entry {
            object: r(kind, name),
            action,
            diff: None,
            reason: None,
            scale_only: false,
        }
    }

    /// (generation, status) of a rolled-out or rolling object.
    fn facts(kind: &str, generation: i64, observed: i64, up_to_date: i64) -> (i64, RolloutStatus) {
        let obj = json!({"kind": kind, "metadata": {"generation": generation}, "spec": {"replicas": 3},
            "status": {"observedGeneration": observed, "replicas": 3, "upToDateReplicas": up_to_date,
                "availableReplicas": 3, "ready": true, "endpoints": "https://10.0.0.1:2379",
                "conditions": [{"type": "Ready", "status": "True"}]}});
        (generation, RolloutStatus::from_object(&obj))
    }

    fn observer<'a>(
        all: &'a BTreeMap<String, (i64, RolloutStatus)>,
    ) -> impl Fn(&ObjectRef) -> Option<Observed<'a>> {
        move |r: &ObjectRef| {
            all.get(&r.name).map(|(g, ro)| Observed {
                what: "obj",
                generation: *g,
                rollout: Some(ro),
                machine_sets: &[],
            })
        }
    }

    #[test]
    fn objects_belong_to_stages() {
        let w = WorkerRollout::Sequential;
        assert_eq!(stage(&r("EtcdadmCluster", "e"), w), Stage::Etcd);
        assert_eq!(
            stage(&r("KubeadmControlPlane", "c"), w),
            Stage::ControlPlane
        );
        assert_eq!(stage(&r("HelmChartProxy", "h"), w), Stage::Cni);
        assert_eq!(
            stage(&r("MachineDeployment", "md-0"), w),
            Stage::Workers(Some("md-0".into()))
        );
        assert_eq!(
            stage(&r("MachineDeployment", "md-0"), WorkerRollout::Parallel),
            Stage::Workers(None)
        );
        assert_eq!(stage(&r("DevMachineTemplate", "t"), w), Stage::Prepare);
        assert_eq!(stage(&r("Cluster", "c"), w), Stage::Prepare);
    }

    #[test]
    fn a_version_bump_goes_out_one_stage_at_a_time() {
        let plan = vec![
            e("DevMachineTemplate", "cp-new", Action::Create),
            e("KubeadmControlPlane", "cp", Action::Update),
            e("HelmChartProxy", "cni", Action::Unchanged),
            e("MachineDeployment", "md-0", Action::Update),
            e("MachineDeployment", "md-1", Action::Update),
        ];
        let mut live = BTreeMap::new();
        live.insert("cp".to_string(), facts("KubeadmControlPlane", 2, 2, 3));
        live.insert("cni".to_string(), facts("HelmChartProxy", 1, 1, 0));
        live.insert("md-0".to_string(), facts("MachineDeployment", 1, 1, 3));
        live.insert("md-1".to_string(), facts("MachineDeployment", 1, 1, 3));
        let s = schedule(&plan, observer(&live), Settings::default());
        // The control plane goes now; both worker groups wait for it.
        assert_eq!(s.held.len(), 2, "{s:?}");
        assert!(s.held.contains_key(&r("MachineDeployment", "md-0").key()));
        assert_eq!(s.waiting.as_ref().map(|w| &w.0), Some(&Stage::ControlPlane));
        let states: Vec<(String, State)> = s
            .stages
            .iter()
            .map(|x| (x.stage.to_string(), x.state.clone()))
            .collect();
        assert_eq!(
            states,
            vec![
                ("control plane".into(), State::Apply),
                ("CNI".into(), State::Done),
                ("workers".into(), State::Held),
            ]
        );

        // Next pass: the control plane is applied (generation 3), observed, rolling.
        let plan = vec![
            e("KubeadmControlPlane", "cp", Action::Unchanged),
            e("HelmChartProxy", "cni", Action::Unchanged),
            e("MachineDeployment", "md-0", Action::Update),
            e("MachineDeployment", "md-1", Action::Update),
        ];
        live.insert("cp".to_string(), facts("KubeadmControlPlane", 3, 3, 1));
        let s = schedule(&plan, observer(&live), Settings::default());
        assert_eq!(s.held.len(), 2);
        assert!(
            s.summary().unwrap().starts_with("control plane: "),
            "{:?}",
            s.summary()
        );
        // Rolled out: the workers go, all at once.
        live.insert("cp".to_string(), facts("KubeadmControlPlane", 3, 3, 3));
        let s = schedule(&plan, observer(&live), Settings::default());
        assert!(s.held.is_empty());
        assert_eq!(
            s.waiting.as_ref().map(|w| &w.0),
            Some(&Stage::Workers(None))
        );

        // Sequentially: md-0 first, md-1 after it.
        let seq = Settings {
            workers: WorkerRollout::Sequential,
            ..Settings::default()
        };
        let s = schedule(&plan, observer(&live), seq);
        assert_eq!(
            s.held.keys().collect::<Vec<_>>(),
            vec![&r("MachineDeployment", "md-1").key()]
        );
        // md-0 rolled out, md-1 goes.
        let plan = vec![
            e("KubeadmControlPlane", "cp", Action::Unchanged),
            e("MachineDeployment", "md-0", Action::Unchanged),
            e("MachineDeployment", "md-1", Action::Update),
        ];
        live.insert("md-0".to_string(), facts("MachineDeployment", 2, 2, 3));
        assert!(schedule(&plan, observer(&live), seq).held.is_empty());
        // Still rolling: md-1 waits.
        live.insert("md-0".to_string(), facts("MachineDeployment", 2, 2, 1));
        assert_eq!(schedule(&plan, observer(&live), seq).held.len(), 1);
    }

    #[test]
    fn scale_only_changes_neither_wait_nor_hold() {
        let mut live = BTreeMap::new();
        live.insert("cp".to_string(), facts("KubeadmControlPlane", 3, 3, 1));
        live.insert("md-0".to_string(), facts("MachineDeployment", 1, 1, 3));
        live.insert("md-1".to_string(), facts("MachineDeployment", 1, 1, 3));
        let mut scale = e("MachineDeployment", "md-0", Action::Update);
        scale.scale_only = true;
        let plan = vec![
            e("KubeadmControlPlane", "cp", Action::Unchanged),
            scale,
            e("MachineDeployment", "md-1", Action::Update),
        ];
        let s = schedule(&plan, observer(&live), Settings::default());
        assert_eq!(
            s.held.keys().collect::<Vec<_>>(),
            vec![&r("MachineDeployment", "md-1").key()],
            "the scale goes while the control plane rolls; the template change waits"
        );
        // A scale of the control plane does not hold the workers' scale either.
        let mut cp = e("KubeadmControlPlane", "cp", Action::Update);
        cp.scale_only = true;
        let mut md = e("MachineDeployment", "md-0", Action::Update);
        md.scale_only = true;
        let s = schedule(&[cp, md], observer(&live), Settings::default());
        assert!(s.held.is_empty());
    }

    #[test]
    fn a_new_cluster_is_not_staged_but_a_held_control_plane_holds_the_rest() {
        let plan = vec![
            e("EtcdadmCluster", "etcd", Action::Create),
            e("KubeadmControlPlane", "cp", Action::Create),
            e("MachineDeployment", "md-0", Action::Create),
        ];
        let live = BTreeMap::new();
        let s = schedule(&plan, observer(&live), Settings::default());
        assert!(s.held.is_empty(), "creations wait for nothing: {s:?}");
        // The caller holds the control plane (etcd's endpoints unknown): an update of a later
        // stage waits for it; a creation does not.
        let mut held_cp = e("KubeadmControlPlane", "cp", Action::Held);
        held_cp.reason = Some("waits for etcd's endpoints".into());
        let mut live = BTreeMap::new();
        live.insert("md-1".to_string(), facts("MachineDeployment", 1, 1, 3));
        let plan = vec![
            e("EtcdadmCluster", "etcd", Action::Unchanged),
            held_cp,
            e("MachineDeployment", "md-0", Action::Create),
            e("MachineDeployment", "md-1", Action::Update),
        ];
        let s = schedule(&plan, observer(&live), Settings::default());
        assert_eq!(
            s.held.keys().collect::<Vec<_>>(),
            vec![&r("MachineDeployment", "md-1").key()]
        );
        assert!(s.summary().unwrap().contains("endpoints"), "{s:?}");
        // etcd up but no endpoints yet: an update of the control plane waits.
        let obj = json!({"kind": "EtcdadmCluster", "metadata": {"generation": 1}, "spec": {"replicas": 3},
            "status": {"observedGeneration": 1, "replicas": 3, "ready": true}});
        let mut live = BTreeMap::new();
        live.insert("etcd".to_string(), (1, RolloutStatus::from_object(&obj)));
        let plan = vec![
            e("EtcdadmCluster", "etcd", Action::Unchanged),
            e("KubeadmControlPlane", "cp", Action::Update),
        ];
        let s = schedule(&plan, observer(&live), Settings::default());
        assert_eq!(s.held.len(), 1);
        assert!(s.summary().unwrap().contains("endpoints"), "{s:?}");
        live.insert("etcd".to_string(), facts("EtcdadmCluster", 1, 1, 0));
        assert!(
            schedule(&plan, observer(&live), Settings::default())
                .held
                .is_empty()
        );
    }

    #[test]
    fn the_first_node_is_enough_when_asked() {
        let obj = |up: i64, avail: i64, current: i64| {
            let o = json!({"kind": "KubeadmControlPlane", "metadata": {"generation": 2}, "spec": {"replicas": 3},
                "status": {"observedGeneration": 2, "replicas": current, "upToDateReplicas": up, "availableReplicas": avail}});
            (2, RolloutStatus::from_object(&o))
        };
        let o = |f: &(i64, RolloutStatus)| {
            progress(
                &Stage::ControlPlane,
                &Observed {
                    what: "KubeadmControlPlane/c",
                    generation: f.0,
                    rollout: Some(&f.1),
                    machine_sets: &[],
                },
                RolloutWait::FirstNode,
            )
        };
        assert!(matches!(o(&obj(0, 3, 4)), Progress::Waiting(_)));
        assert_eq!(o(&obj(1, 3, 3)), Progress::Done);
        assert_eq!(o(&obj(1, 4, 4)), Progress::Done);
    }

    #[test]
    fn an_addon_nobody_reports_on_is_not_waited_for() {
        let o = json!({"kind": "HelmChartProxy", "metadata": {"generation": 3}, "spec": {}});
        let f = (3, RolloutStatus::from_object(&o));
        let obs = Observed {
            what: "HelmChartProxy/c",
            generation: f.0,
            rollout: Some(&f.1),
            machine_sets: &[],
        };
        assert_eq!(
            progress(&Stage::Cni, &obs, RolloutWait::Complete),
            Progress::Done
        );
        // Applying it holds nothing either: the workers go in the same pass.
        let mut live = BTreeMap::new();
        live.insert("cni".to_string(), f.clone());
        live.insert("md-0".to_string(), facts("MachineDeployment", 1, 1, 3));
        let plan = vec![
            e("HelmChartProxy", "cni", Action::Update),
            e("MachineDeployment", "md-0", Action::Update),
        ];
        let s = schedule(&plan, observer(&live), Settings::default());
        assert!(s.held.is_empty(), "{s:?}");
        let o = json!({"kind": "HelmChartProxy", "metadata": {"generation": 3}, "spec": {},
            "status": {"observedGeneration": 3, "conditions": [{"type": "Ready", "status": "False", "reason": "HelmReleaseProxiesNotReady"}]}});
        let f = (3, RolloutStatus::from_object(&o));
        let obs = Observed {
            rollout: Some(&f.1),
            ..obs
        };
        assert!(matches!(
            progress(&Stage::Cni, &obs, RolloutWait::Complete),
            Progress::Waiting(_)
        ));
    }

    #[test]
    fn the_outline_says_which_stages_a_change_goes_through() {
        let sequential = Settings {
            workers: WorkerRollout::Sequential,
            ..Settings::default()
        };
        let plan = vec![
            e("MachineDeployment", "md-1", Action::Update),
            e("KubeadmControlPlane", "cp", Action::Update),
            e("EtcdadmCluster", "etcd", Action::Update),
            e("DockerMachineTemplate", "t", Action::Create),
            e("MachineDeployment", "md-0", Action::Update),
        ];
        assert_eq!(
            outline(&plan, sequential).unwrap(),
            "stages: etcd → control plane → workers md-0, md-1 (sequential)"
        );
        assert_eq!(
            outline(&plan[..2], Settings::default()).unwrap(),
            "stages: control plane → workers md-1 (parallel)"
        );
        let mut scale = e("MachineDeployment", "md-0", Action::Update);
        scale.scale_only = true;
        assert_eq!(
            outline(&[scale], Settings::default()).unwrap(),
            "scale only: no waits"
        );
        // A new worker group waits for nothing; templates roll nothing by themselves.
        assert_eq!(
            outline(
                &[
                    e("MachineDeployment", "md-2", Action::Create),
                    e("DockerMachineTemplate", "t", Action::Update)
                ],
                Settings::default()
            ),
            None
        );
    }

    #[test]
    fn the_fleet_config_sets_the_stage_settings_but_a_management_cluster_waits_for_its_whole_control_plane()
     {
        let rollout = capstan_layout::config::Rollout {
            rollout_wait: Some(RolloutWait::FirstNode),
            worker_rollout: Some(WorkerRollout::Sequential),
            ..Default::default()
        };
        let base = Settings::default();
        let w = Settings::for_cluster(base, Some(&rollout), false);
        assert_eq!(
            (w.rollout_wait, w.workers),
            (RolloutWait::FirstNode, WorkerRollout::Sequential)
        );
        let m = Settings::for_cluster(base, Some(&rollout), true);
        assert_eq!(
            (m.rollout_wait, m.workers),
            (RolloutWait::Complete, WorkerRollout::Sequential)
        );
        // Not written: the agent's own settings.
        let agent = Settings {
            workers: WorkerRollout::Sequential,
            ..base
        };
        assert_eq!(
            Settings::for_cluster(agent, Some(&Default::default()), false),
            agent
        );
        assert_eq!(Settings::for_cluster(base, None, false), base);
    }
}
