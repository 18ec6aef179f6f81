//! Cluster health as Cluster API reports it, read so that Ready means "converged at this
//! revision", not "was Available once".
//!
//! The race Cluster API users know from kstatus: right after an upgrade is applied, the Cluster
//! still says `Available=True` (the controllers have not looked yet), and a tool that trusts it
//! calls the cluster Ready while its machines have not even started rolling. So a cluster is
//! Ready only when, in this order:
//!
//! 1. the Cluster, its control plane and every MachineDeployment have *observed* their current
//!    generation (`status.observedGeneration == metadata.generation`): what capstan just applied
//!    has been seen;
//! 2. the control plane and every MachineDeployment are rolled out: `RollingOut`, `ScalingUp`
//!    and `ScalingDown` not True, and every desired replica exists, is up to date and available
//!    (v1beta2 `replicas`, `upToDateReplicas`, `availableReplicas` against `spec.replicas`), so
//!    no old machine is left. For a MachineDeployment that is not enough: its counts add up its
//!    MachineSets' counts, which their controller updates later, so in the reconcile where the
//!    MachineDeployment observes a new template it still reports every machine up to date (found
//!    running the real controllers: capstan called a cluster Ready before its workers rolled).
//!    Its MachineSets are read too ([`MachineSet`]): no machine may remain in a MachineSet of an
//!    older template, and the current template's MachineSets must have every desired machine
//!    available;
//! 3. the Cluster's `Available` condition is True at its current generation, and its
//!    `RemoteConnectionProbe` (the workload API server answers) is not False.
//!
//! [`RolloutStatus`] is what the live cache keeps of those objects' status (a few dozen bytes),
//! and [`assess`] is a pure function of it: the first unmet rule, in the order above, is the
//! message.

use serde_json::Value;

use crate::status::Reason;

/// The conditions health reads (Cluster API v1beta2 condition types).
pub const CONDITIONS: &[&str] = &[
    "Available",
    "RollingOut",
    "ScalingUp",
    "ScalingDown",
    "RemoteConnectionProbe",
];

/// The conditions the upgrade stages read of the kinds outside core Cluster API (v1beta1-style
/// conditions): etcdadm's EtcdadmCluster and CAAPH's HelmChartProxy.
pub const STAGE_CONDITIONS: &[&str] = &[
    "EtcdMachinesSpecUpToDate",
    "EtcdClusterResizeCompleted",
    "Ready",
    "HelmReleaseProxiesReady",
    "HelmReleaseProxySpecsUpToDate",
];

/// One condition, as far as health needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// `type`.
    pub type_: Box<str>,
    /// `True`, `False` or `Unknown`.
    pub status: Box<str>,
    /// `reason`.
    pub reason: Box<str>,
    /// `message` (kept for `Available` only: the others change while machines roll, and every
    /// change would wake the agent).
    pub message: Box<str>,
    /// The generation it was computed for (0: not given).
    pub observed_generation: i64,
}

/// Replica counts of a control plane or MachineDeployment (Cluster API v1beta2 status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replicas {
    /// `spec.replicas` (None: not set yet, e.g. left to the autoscaler and not defaulted).
    pub desired: Option<i64>,
    /// `status.replicas`: machines that exist.
    pub current: i64,
    /// `status.upToDateReplicas`.
    pub up_to_date: i64,
    /// `status.availableReplicas`.
    pub available: i64,
}

/// The rollout status of a Cluster, control plane or MachineDeployment: what Cluster API reports
/// of its machines rolling (the fleet's `rollout` section is `capstan_layout::config::Rollout`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RolloutStatus {
    /// `status.observedGeneration` (0: never observed).
    pub observed_generation: i64,
    /// MachineDeployments: the machine template it asks for ([`machine_template`]).
    pub template: Option<Box<str>>,
    /// The conditions of [`CONDITIONS`] it reports.
    pub conditions: Vec<Condition>,
    /// Replica counts (control planes and MachineDeployments), once it reports some.
    pub replicas: Option<Replicas>,
    /// `spec.replicas`, reported or not (what the dashboard shows as desired).
    pub desired: Option<i64>,
    /// Being deleted.
    pub deleting: bool,
    /// The Kubernetes version it asks for: a control plane's `spec.version`, a
    /// MachineDeployment's `spec.template.spec.version`.
    pub version: Option<Box<str>>,
    /// The lowest Kubernetes version among its machines (Cluster API v1.14's `status.versions`,
    /// or the deprecated `status.version`): what it has rolled out.
    pub rolled_out_version: Option<Box<str>>,
    /// `metadata.uid` (what an owner reference to it names).
    pub uid: Option<Box<str>>,
    /// An EtcdadmCluster's status.
    pub etcd: Option<Etcd>,
    /// A Cluster API Cluster's `spec.paused`.
    pub paused: bool,
    /// The management cluster capstan paused it for
    /// ([`capstan_templates::identity::PAUSED_FOR_ANNOTATION`]).
    pub paused_for: Option<Box<str>>,
}

/// What etcdadm's controller reports of an EtcdadmCluster (`etcdcluster.cluster.x-k8s.io`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Etcd {
    /// `spec.replicas`.
    pub desired: i64,
    /// `status.replicas`: healthy members.
    pub ready_replicas: i64,
    /// `status.ready`: every member passed its health check.
    pub ready: bool,
    /// `status.endpoints`: the client URLs, comma-separated (empty until etcd is up).
    pub endpoints: Box<str>,
}

impl RolloutStatus {
    /// From a whole object.
    pub fn from_object(obj: &Value) -> RolloutStatus {
        let int = |p: &str| obj.pointer(p).and_then(Value::as_i64);
        let s = |c: &Value, k: &str| -> Box<str> {
            c.get(k).and_then(Value::as_str).unwrap_or("").into()
        };
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let kept: &[&str] = if matches!(kind, "EtcdadmCluster" | "HelmChartProxy") {
            STAGE_CONDITIONS
        } else {
            CONDITIONS
        };
        let conditions = obj
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|c| {
                c.get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| kept.contains(&t))
            })
            .map(|c| {
                let type_ = s(c, "type");
                Condition {
                    message: if &*type_ == "Available" {
                        s(c, "message")
                    } else {
                        "".into()
                    },
                    type_,
                    status: s(c, "status"),
                    reason: s(c, "reason"),
                    observed_generation: c
                        .get("observedGeneration")
                        .and_then(Value::as_i64)
                        .unwrap_or(0),
                }
            })
            .collect();
        let text = |p: &str| obj.pointer(p).and_then(Value::as_str).map(Into::into);
        let etcd = (kind == "EtcdadmCluster").then(|| Etcd {
            desired: int("/spec/replicas").unwrap_or(0),
            ready_replicas: int("/status/replicas").unwrap_or(0),
            ready: obj
                .pointer("/status/ready")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            endpoints: text("/status/endpoints").unwrap_or_default(),
        });
        let replicas = int("/status/replicas")
            .filter(|_| etcd.is_none())
            .map(|current| Replicas {
                desired: int("/spec/replicas"),
                current,
                up_to_date: int("/status/upToDateReplicas").unwrap_or(0),
                available: int("/status/availableReplicas").unwrap_or(0),
            });
        RolloutStatus {
            observed_generation: int("/status/observedGeneration").unwrap_or(0),
            template: obj
                .pointer("/spec/template/spec")
                .map(|_| machine_template(obj)),
            conditions,
            replicas,
            desired: int("/spec/replicas"),
            deleting: obj.pointer("/metadata/deletionTimestamp").is_some(),
            version: text("/spec/version").or_else(|| text("/spec/template/spec/version")),
            rolled_out_version: lowest_version(obj),
            uid: text("/metadata/uid"),
            etcd,
            paused: obj
                .pointer("/spec/paused")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            paused_for: obj
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(capstan_templates::identity::PAUSED_FOR_ANNOTATION))
                .and_then(Value::as_str)
                .map(Into::into),
        }
    }

    /// A condition by type.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| &*c.type_ == type_)
    }

    /// Whether a condition is True.
    pub fn is_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| &*c.status == "True")
    }
}

/// The lowest version in `status.versions` (else `status.version`), compared by minor and patch.
fn lowest_version(obj: &Value) -> Option<Box<str>> {
    let key = |v: &str| -> Vec<u64> {
        v.trim_start_matches('v')
            .split(['.', '-', '+'])
            .take(3)
            .map(|p| p.parse().unwrap_or(0))
            .collect()
    };
    obj.pointer("/status/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("version").and_then(Value::as_str))
        .min_by_key(|v| key(v))
        .or_else(|| obj.pointer("/status/version").and_then(Value::as_str))
        .map(Into::into)
}

/// What rolls machines out in a MachineSet's or MachineDeployment's template: the Kubernetes
/// version and the bootstrap and infrastructure template names (capstan names templates by
/// content, so a name is a content). Cluster API's own rollout decision compares the same.
pub fn machine_template(obj: &Value) -> Box<str> {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("");
    format!(
        "{} {} {}",
        s("/spec/template/spec/version"),
        s("/spec/template/spec/bootstrap/configRef/name"),
        s("/spec/template/spec/infrastructureRef/name")
    )
    .into()
}

/// What health needs of a MachineSet (Cluster API creates them for a MachineDeployment, one per
/// template it rolled out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineSet {
    /// Its [`machine_template`].
    pub template: Box<str>,
    /// Machines it has or is about to have: the larger of `spec.replicas` and
    /// `status.replicas`.
    pub replicas: i64,
    /// `status.availableReplicas`.
    pub available: i64,
}

impl MachineSet {
    /// From a whole MachineSet.
    pub fn from_object(obj: &Value) -> MachineSet {
        let int = |p: &str| obj.pointer(p).and_then(Value::as_i64).unwrap_or(0);
        MachineSet {
            template: machine_template(obj),
            replicas: int("/spec/replicas").max(int("/status/replicas")),
            available: int("/status/availableReplicas"),
        }
    }
}

/// One object health looks at: its kind and name, its generation and its rollout status.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    /// `Kind/name`, for messages.
    pub what: &'a str,
    /// `metadata.generation`.
    pub generation: i64,
    /// Its status (None: not seen yet).
    pub rollout: Option<&'a RolloutStatus>,
    /// MachineDeployments: their MachineSets.
    pub machine_sets: &'a [MachineSet],
}

/// The verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assessment {
    /// Converged at this revision.
    pub ready: bool,
    /// The Ready condition's reason.
    pub reason: Reason,
    /// One line for humans.
    pub message: String,
}

impl Assessment {
    fn waiting(reason: Reason, message: String) -> Assessment {
        Assessment {
            ready: false,
            reason,
            message,
        }
    }
}

/// Rules 1 and 2 for a control plane or MachineDeployment: None when rolled out, else the first
/// reason why not.
pub fn rolled_out(o: &Observed<'_>) -> Option<Assessment> {
    let Some(r) = o.rollout else {
        return Some(Assessment::waiting(
            Reason::Progressing,
            format!("{}: no status yet", o.what),
        ));
    };
    if r.deleting {
        return Some(Assessment::waiting(
            Reason::Deleting,
            format!("{} is being deleted", o.what),
        ));
    }
    if r.observed_generation < o.generation {
        return Some(Assessment::waiting(
            Reason::Progressing,
            format!(
                "{}: generation {} not observed yet (observed {})",
                o.what, o.generation, r.observed_generation
            ),
        ));
    }
    if let Some(n) = r.replicas {
        let desired = n.desired.unwrap_or(n.current);
        // Fewer machines than desired is a scale-up (a new cluster, a larger group); a rollout
        // surges above the desired count.
        if n.current < desired {
            return Some(Assessment::waiting(
                Reason::ScalingUp,
                format!("{}: {}/{desired} machines", o.what, n.current),
            ));
        }
        // Every count is in the message: a rollout's report changes with each machine created,
        // become available or removed, and a changed report is progress that restarts the
        // stage's clock (`crate::decide::settle`), so the stage timeout bounds one machine's
        // step, as EKS Anywhere's machine timeout does, not the whole group.
        if n.up_to_date < desired {
            return Some(Assessment::waiting(
                Reason::RollingOut,
                format!(
                    "{}: {}/{desired} machines up to date, {} available, {} in all",
                    o.what, n.up_to_date, n.available, n.current
                ),
            ));
        }
        if n.current > desired {
            return Some(Assessment::waiting(
                Reason::ScalingDown,
                format!(
                    "{}: {} machines for {desired} desired, {} available",
                    o.what, n.current, n.available
                ),
            ));
        }
        if n.available < desired {
            return Some(Assessment::waiting(
                Reason::Progressing,
                format!("{}: {}/{desired} machines available", o.what, n.available),
            ));
        }
    }
    for (c, reason) in [
        ("RollingOut", Reason::RollingOut),
        ("ScalingUp", Reason::ScalingUp),
        ("ScalingDown", Reason::ScalingDown),
    ] {
        if r.is_true(c) {
            return Some(Assessment::waiting(reason, format!("{}: {c}", o.what)));
        }
    }
    if let (Some(template), Some(n)) = (&r.template, r.replicas) {
        let desired = n.desired.unwrap_or(n.current);
        let of = |current: bool| {
            o.machine_sets
                .iter()
                .filter(move |s| (s.template == *template) == current)
        };
        let old: i64 = of(false).map(|s| s.replicas).sum();
        if old > 0 {
            return Some(Assessment::waiting(
                Reason::RollingOut,
                format!("{}: {old} machines of an older template remain", o.what),
            ));
        }
        let available: i64 = of(true).map(|s| s.available).sum();
        if available < desired {
            return Some(Assessment::waiting(
                Reason::RollingOut,
                format!(
                    "{}: {available}/{desired} machines of the current template available",
                    o.what
                ),
            ));
        }
    }
    None
}

/// Whether a cluster is converged at this revision, and if not, the first reason why.
pub fn assess(
    cluster: Observed<'_>,
    control_plane: Option<Observed<'_>>,
    workers: &[Observed<'_>],
) -> Assessment {
    let Some(c) = cluster.rollout else {
        return Assessment::waiting(
            Reason::Progressing,
            "Cluster API has not reported on the Cluster yet".into(),
        );
    };
    if c.deleting {
        return Assessment::waiting(
            Reason::Deleting,
            format!("{} is being deleted", cluster.what),
        );
    }
    // Paused by someone else (an operator): its controllers act on nothing and report nothing,
    // so nothing below would ever change. (capstan's own pause, for its management cluster's
    // upgrade, is transient and reads as the rollout it holds.)
    if c.paused && c.paused_for.is_none() {
        return Assessment::waiting(
            Reason::Paused,
            format!(
                "{}: Cluster API is paused on it (spec.paused, set outside capstan); what is applied goes out once it is unpaused",
                cluster.what
            ),
        );
    }
    if c.observed_generation < cluster.generation {
        return Assessment::waiting(
            Reason::Progressing,
            format!(
                "{}: generation {} not observed yet (observed {})",
                cluster.what, cluster.generation, c.observed_generation
            ),
        );
    }
    if let Some(waiting) = control_plane.iter().chain(workers).find_map(rolled_out) {
        return waiting;
    }
    if let Some(probe) = c.condition("RemoteConnectionProbe")
        && &*probe.status == "False"
    {
        return Assessment::waiting(
            Reason::Unreachable,
            format!(
                "{}: the workload API server does not answer ({})",
                cluster.what, probe.reason
            ),
        );
    }
    match c.condition("Available") {
        Some(a)
            if &*a.status == "True"
                && (a.observed_generation == 0 || a.observed_generation >= cluster.generation) =>
        {
            Assessment {
                ready: true,
                reason: Reason::Available,
                message: "Cluster API reports the cluster Available, rolled out at this revision"
                    .into(),
            }
        }
        Some(a) => {
            let detail = if a.message.is_empty() {
                a.reason.to_string()
            } else {
                // Cluster API's messages are bullet lists over several lines: one line here.
                let flat = a.message.split_whitespace().collect::<Vec<_>>().join(" ");
                format!("{}: {flat}", a.reason)
            };
            Assessment::waiting(
                Reason::Progressing,
                format!("{}: Available={} {detail}", cluster.what, a.status)
                    .trim()
                    .to_string(),
            )
        }
        None => Assessment::waiting(
            Reason::Progressing,
            format!("{}: Available not reported yet", cluster.what),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(
        generation: i64,
        observed: i64,
        available: &str,
        available_gen: i64,
    ) -> (i64, RolloutStatus) {
        let obj = json!({"metadata": {"generation": generation}, "status": {"observedGeneration": observed, "conditions": [
            {"type": "Available", "status": available, "reason": "R", "message": "m", "observedGeneration": available_gen},
            {"type": "RemoteConnectionProbe", "status": "True", "reason": "ProbeSucceeded"},
            {"type": "Ready", "status": "True", "reason": "ignored"}]}});
        (generation, RolloutStatus::from_object(&obj))
    }

    fn scalable(
        generation: i64,
        observed: i64,
        desired: i64,
        current: i64,
        up: i64,
        avail: i64,
        rolling: &str,
    ) -> (i64, RolloutStatus) {
        let obj = json!({"metadata": {"generation": generation}, "spec": {"replicas": desired},
            "status": {"observedGeneration": observed, "replicas": current, "upToDateReplicas": up, "availableReplicas": avail,
                "conditions": [{"type": "RollingOut", "status": rolling, "reason": "x"}]}});
        (generation, RolloutStatus::from_object(&obj))
    }

    fn obs<'a>(what: &'a str, g: &'a (i64, RolloutStatus)) -> Observed<'a> {
        Observed {
            what,
            generation: g.0,
            rollout: Some(&g.1),
            machine_sets: &[],
        }
    }

    #[test]
    fn ready_only_when_everything_converged() {
        let c = cluster(2, 2, "True", 2);
        let cp = scalable(3, 3, 3, 3, 3, 3, "False");
        let md = scalable(1, 1, 2, 2, 2, 2, "False");
        let a = assess(
            obs("Cluster/c", &c),
            Some(obs("KubeadmControlPlane/c", &cp)),
            &[obs("MachineDeployment/c-md-0", &md)],
        );
        assert!(a.ready, "{a:?}");
        assert_eq!(
            c.1.conditions.len(),
            2,
            "only the conditions health reads are kept"
        );
    }

    #[test]
    fn the_old_available_does_not_count_after_an_upgrade_is_applied() {
        // Right after a version bump: the control plane's generation moved, nobody looked yet,
        // and the Cluster still says Available.
        let c = cluster(2, 2, "True", 2);
        let cp = scalable(4, 3, 3, 3, 3, 3, "False");
        let a = assess(
            obs("Cluster/c", &c),
            Some(obs("KubeadmControlPlane/c", &cp)),
            &[],
        );
        assert!(!a.ready);
        assert!(a.message.contains("generation 4 not observed"), "{a:?}");
        // Observed, rolling: one of three up to date, an extra machine.
        let cp = scalable(4, 4, 3, 4, 1, 3, "True");
        let a = assess(
            obs("Cluster/c", &c),
            Some(obs("KubeadmControlPlane/c", &cp)),
            &[],
        );
        assert_eq!(
            (a.reason.as_str(), a.message.as_str()),
            (
                "RollingOut",
                "KubeadmControlPlane/c: 1/3 machines up to date, 3 available, 4 in all"
            )
        );
        // All new, the old machine still there.
        let cp = scalable(4, 4, 3, 4, 3, 3, "True");
        assert_eq!(
            assess(
                obs("Cluster/c", &c),
                Some(obs("KubeadmControlPlane/c", &cp)),
                &[]
            )
            .reason
            .as_str(),
            "ScalingDown"
        );
        // Workers next.
        let cp = scalable(4, 4, 3, 3, 3, 3, "False");
        let md = scalable(2, 2, 2, 3, 1, 2, "True");
        let a = assess(
            obs("Cluster/c", &c),
            Some(obs("KubeadmControlPlane/c", &cp)),
            &[obs("MachineDeployment/w", &md)],
        );
        assert!(a.message.starts_with("MachineDeployment/w"), "{a:?}");
    }

    #[test]
    fn a_cluster_paused_outside_capstan_is_said_paused_not_waited_for() {
        let paused = |by: Option<&str>| {
            let mut annotations = serde_json::Map::new();
            if let Some(m) = by {
                annotations.insert(
                    capstan_templates::identity::PAUSED_FOR_ANNOTATION.into(),
                    json!(m),
                );
            }
            // The pause moved the generation; paused controllers never observe it.
            let obj = json!({"metadata": {"generation": 3, "annotations": annotations},
                "spec": {"paused": true},
                "status": {"observedGeneration": 2, "conditions": [
                    {"type": "Available", "status": "True", "reason": "R", "observedGeneration": 2}]}});
            (3, RolloutStatus::from_object(&obj))
        };
        let by_operator = paused(None);
        let a = assess(obs("Cluster/c", &by_operator), None, &[]);
        assert_eq!(a.reason, Reason::Paused, "{a:?}");
        assert!(a.message.contains("paused on it"), "{a:?}");
        let (phase, _, conditions) = crate::decide::health(&a);
        assert_eq!(
            (phase, conditions[1].status.as_str()),
            (crate::status::Phase::Suspended, "Unknown")
        );
        // capstan's own pause for its management cluster's upgrade: the rollout it holds.
        let by_capstan = paused(Some("m"));
        let a = assess(obs("Cluster/c", &by_capstan), None, &[]);
        assert_eq!(a.reason, Reason::Progressing, "{a:?}");
    }

    #[test]
    fn unobserved_unavailable_or_unreachable_clusters_wait() {
        let a = assess(
            Observed {
                what: "Cluster/c",
                generation: 1,
                rollout: None,
                machine_sets: &[],
            },
            None,
            &[],
        );
        assert!(!a.ready);
        let c = cluster(3, 2, "True", 2);
        assert!(
            assess(obs("Cluster/c", &c), None, &[])
                .message
                .contains("not observed")
        );
        let c = cluster(2, 2, "False", 2);
        let a = assess(obs("Cluster/c", &c), None, &[]);
        assert_eq!(a.message, "Cluster/c: Available=False R: m");
        // Available computed for an older generation.
        let c = cluster(2, 2, "True", 1);
        assert!(!assess(obs("Cluster/c", &c), None, &[]).ready);
        let obj = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "conditions": [
            {"type": "Available", "status": "True"}, {"type": "RemoteConnectionProbe", "status": "False", "reason": "ProbeFailed"}]}});
        let r = (1, RolloutStatus::from_object(&obj));
        assert_eq!(
            assess(obs("Cluster/c", &r), None, &[]).reason.as_str(),
            "Unreachable"
        );
    }

    #[test]
    fn a_machine_deployment_is_rolled_out_when_its_machine_sets_say_so() {
        // The reconcile in which the MachineDeployment observes a new template: its counts
        // still add up the old MachineSet's (stale) status.
        let md = json!({"metadata": {"generation": 2}, "spec": {"replicas": 1, "template": {"spec": {
                "version": "v1.33.5", "bootstrap": {"configRef": {"name": "b-new"}}, "infrastructureRef": {"name": "i"}}}},
            "status": {"observedGeneration": 2, "replicas": 1, "upToDateReplicas": 1, "availableReplicas": 1}});
        let md = (2, RolloutStatus::from_object(&md));
        let set = |bootstrap: &str, spec: i64, status: i64, available: i64| {
            MachineSet::from_object(&json!({"spec": {"replicas": spec, "template": {"spec": {
                "version": "v1.33.5", "bootstrap": {"configRef": {"name": bootstrap}}, "infrastructureRef": {"name": "i"}}}},
                "status": {"replicas": status, "availableReplicas": available}}))
        };
        let c = cluster(1, 1, "True", 1);
        let check = |sets: &[MachineSet]| {
            let o = Observed {
                machine_sets: sets,
                ..obs("MachineDeployment/w", &md)
            };
            assess(obs("Cluster/c", &c), None, &[o])
        };
        let rolling = check(&[set("b-old", 1, 1, 1), set("b-new", 1, 0, 0)]);
        assert_eq!(
            (rolling.ready, rolling.message.as_str()),
            (
                false,
                "MachineDeployment/w: 1 machines of an older template remain"
            )
        );
        let starting = check(&[set("b-old", 0, 0, 0), set("b-new", 1, 1, 0)]);
        assert_eq!(
            starting.message,
            "MachineDeployment/w: 0/1 machines of the current template available"
        );
        assert!(check(&[set("b-old", 0, 0, 0), set("b-new", 1, 1, 1)]).ready);
        // An old MachineSet scaled to zero in spec but still holding a machine counts.
        assert!(!check(&[set("b-old", 0, 1, 1), set("b-new", 1, 1, 1)]).ready);
    }

    #[test]
    fn autoscaled_groups_compare_with_what_exists() {
        // No spec.replicas (left to the autoscaler): desired is what exists.
        let obj = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "replicas": 2, "upToDateReplicas": 2, "availableReplicas": 2}});
        let md = (1, RolloutStatus::from_object(&obj));
        let c = cluster(1, 1, "True", 1);
        assert!(
            assess(
                obs("Cluster/c", &c),
                None,
                &[obs("MachineDeployment/w", &md)]
            )
            .ready
        );
    }

    /// A group of three rolled one machine at a time (`maxSurge: 1`, `maxUnavailable: 0`): the
    /// report changes at every step a machine takes (created, available, the old one removed),
    /// so the stage's clock restarts per machine, not per group.
    #[test]
    fn a_rollout_reports_every_machine_step() {
        // (current, up to date, available) after each step.
        let steps = [
            (3, 0, 3), // the new template is observed
            (4, 1, 3), // a new machine is created
            (4, 1, 4), // it is available
            (3, 1, 3), // an old one is removed
            (4, 2, 3),
            (4, 2, 4),
            (3, 2, 3),
            (4, 3, 3),
            (4, 3, 4), // the last new machine is available: only the removal is left
        ];
        let reports: Vec<String> = steps
            .iter()
            .map(|&(current, up, avail)| {
                let md = scalable(2, 2, 3, current, up, avail, "True");
                rolled_out(&obs("MachineDeployment/md", &md))
                    .expect("not rolled out yet")
                    .message
            })
            .collect();
        for pair in reports.windows(2) {
            assert_ne!(pair[0], pair[1], "{reports:#?}");
        }
        assert_eq!(
            reports.last().unwrap(),
            "MachineDeployment/md: 4 machines for 3 desired, 4 available"
        );
        let done = scalable(2, 2, 3, 3, 3, 3, "False");
        assert!(rolled_out(&obs("MachineDeployment/md", &done)).is_none());
    }
}
