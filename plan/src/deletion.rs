//! A cluster's deletion on intent (a tombstone in its directory), decided: in which order its
//! recorded objects go, what a step waits for, and what its status says meanwhile.
//!
//! The order is Cluster API's: the Cluster objects first — the CAPI Cluster, then the EKS-A
//! Cluster — whose finalizers make the controllers tear the machines down; only once they are
//! gone everything else, in reverse apply order, and the record last. A step never waits for a
//! finalizer: a Cluster still being deleted ends the step, and its deletion event brings the
//! cluster back. Only what is still the cluster's is deleted: what the record holds and is
//! still labelled for it (an object someone relabelled is skipped, saying so).
//!
//! The agent gathers the facts (the live objects, whose they are) and carries out the deletes;
//! every rule here is a case of a table test.

use crate::status::{
    ConditionStatus, ConditionType, ManagedClusterStatus, Phase, Reason, Recorded, condition,
};
use crate::{Action, Entry, ObjectRef, Plan};

/// What a tombstone's deletion is, planned.
#[derive(Debug, Clone)]
pub struct Deletion {
    /// The recorded objects (what the status keeps until the record goes).
    pub inventory: Vec<ObjectRef>,
    /// The Cluster objects, CAPI's first.
    pub clusters: Vec<ObjectRef>,
    /// Everything else, in apply order (deleted in reverse).
    pub rest: Vec<ObjectRef>,
    /// The plan shown: every recorded object pruned in order, or skipped with why it is not the
    /// cluster's any more.
    pub plan: Plan,
}

/// The deletion of cluster `name` whose record holds `inventory`; `ours` says whether an object
/// is still the cluster's (`Err`: why not).
pub fn planned(
    name: &str,
    inventory: Vec<ObjectRef>,
    ours: impl Fn(&ObjectRef) -> Result<bool, String>,
) -> Deletion {
    let (mut clusters, rest): (Vec<_>, Vec<_>) =
        inventory.iter().cloned().partition(ObjectRef::is_cluster);
    // CAPI Cluster before the EKS-A Cluster.
    clusters.sort_by_key(|r| u8::from(r.group() != "cluster.x-k8s.io"));
    let entries = clusters
        .iter()
        .chain(rest.iter().rev())
        .map(|r| match ours(r) {
            Err(why) => Entry::new(r.clone(), Action::Skip, Some(why)),
            Ok(_) => Entry::new(
                r.clone(),
                Action::Prune,
                Some("tombstone: deletion requested in the repository".into()),
            ),
        })
        .collect();
    Deletion {
        inventory,
        clusters,
        rest,
        plan: Plan {
            cluster: name.to_string(),
            entries,
        },
    }
}

/// What a Cluster object asks of this step, as it is live now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterStep {
    /// Gone, or not the cluster's: the next one.
    Next,
    /// Being deleted already (its finalizers): the step ends, waiting for it.
    Await,
    /// Live and the cluster's: delete it, then the step ends waiting for it.
    Delete,
}

/// The step of a Cluster object: `live` is `None` when it is gone, else whether it is being
/// deleted; `ours` whether it is still the cluster's.
pub fn cluster_step(live: Option<bool>, ours: bool) -> ClusterStep {
    match live {
        None => ClusterStep::Next,
        Some(_) if !ours => ClusterStep::Next,
        Some(true) => ClusterStep::Await,
        Some(false) => ClusterStep::Delete,
    }
}

/// This step's plan while it waits for Cluster object `held` (`action`: deleted now, or
/// already deleting): the rest waits for it. Returns the plan and the status message.
pub fn waiting(plan: Plan, held: &ObjectRef, action: Action) -> (Plan, String) {
    let entries = plan
        .entries
        .into_iter()
        .map(|mut e| {
            if e.object.key() == held.key() {
                e.action = action;
            } else {
                e.action = Action::Skip;
                e.reason = Some(format!("deleted once {} is gone", held.subject()));
            }
            e
        })
        .collect();
    let message = format!(
        "waiting for {} to be deleted (Cluster API is removing its machines)",
        held.subject()
    );
    (
        Plan {
            cluster: plan.cluster,
            entries,
        },
        message,
    )
}

/// What goes once the Cluster objects are gone, in the order it goes: the rest in reverse
/// apply order, what is still the cluster's, and never a Namespace (others may live there).
pub fn rest(
    rest: &[ObjectRef],
    ours: impl Fn(&ObjectRef) -> Result<bool, String>,
) -> Vec<&ObjectRef> {
    rest.iter()
        .rev()
        .filter(|r| r.kind != "Namespace" && matches!(ours(r), Ok(true)))
        .collect()
}

/// The status of a deletion that is not over: phase Deleting, Ready False saying why.
pub fn still_deleting(
    prev: Option<&Recorded>,
    revision: &str,
    status_message: String,
    message: &str,
    inventory: Vec<ObjectRef>,
) -> ManagedClusterStatus {
    ManagedClusterStatus {
        phase: Some(Phase::Deleting),
        message: status_message,
        last_applied_revision: prev
            .map(|p| p.status.last_applied_revision.clone())
            .unwrap_or_default(),
        last_attempted_revision: revision.to_string(),
        desired_hash: String::new(),
        conditions: vec![condition(
            ConditionType::Ready,
            ConditionStatus::False,
            Reason::Deleting,
            message,
        )],
        inventory,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(api_version: &str, kind: &str, name: &str) -> ObjectRef {
        ObjectRef::of(&serde_json::json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": {"namespace": "ns", "name": name},
        }))
    }

    fn inventory() -> Vec<ObjectRef> {
        vec![
            r("v1", "Namespace", "ns"),
            r("anywhere.eks.amazonaws.com/v1alpha1", "Cluster", "w"),
            r("cluster.x-k8s.io/v1beta2", "Cluster", "w"),
            r(
                "controlplane.cluster.x-k8s.io/v1beta2",
                "KubeadmControlPlane",
                "w",
            ),
            r("v1", "ConfigMap", "w-moved"),
            r("cluster.x-k8s.io/v1beta2", "MachineDeployment", "w-md-0"),
        ]
    }

    fn ours(o: &ObjectRef) -> Result<bool, String> {
        if o.name == "w-moved" {
            Err("its capstan.dev/cluster label names fleet cluster x".into())
        } else {
            Ok(true)
        }
    }

    #[test]
    fn clusters_go_first_capi_before_eksa_then_the_rest_in_reverse_and_others_are_skipped() {
        let d = planned("w", inventory(), ours);
        let shown: Vec<(String, Action)> = d
            .plan
            .entries
            .iter()
            .map(|e| (format!("{}/{}", e.object.kind, e.object.name), e.action))
            .collect();
        assert_eq!(
            shown,
            [
                ("Cluster/w".into(), Action::Prune),
                ("Cluster/w".into(), Action::Prune),
                ("MachineDeployment/w-md-0".into(), Action::Prune),
                ("ConfigMap/w-moved".into(), Action::Skip),
                ("KubeadmControlPlane/w".into(), Action::Prune),
                ("Namespace/ns".into(), Action::Prune),
            ]
        );
        assert_eq!(d.clusters[0].group(), "cluster.x-k8s.io");
        assert_eq!(d.clusters[1].group(), "anywhere.eks.amazonaws.com");
        assert_eq!(d.inventory.len(), 6);
        assert!(
            d.plan.entries[3]
                .reason
                .as_deref()
                .unwrap()
                .contains("fleet cluster x")
        );
        // What goes after the Clusters: the rest reversed, never a Namespace, never another's.
        let names: Vec<&str> = rest(&d.rest, ours)
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(names, ["w-md-0", "w"]);
    }

    #[test]
    fn a_cluster_object_is_deleted_awaited_or_passed() {
        // (live: None gone / Some(deleting), ours) → step
        let cases = [
            (None, true, ClusterStep::Next),
            (None, false, ClusterStep::Next),
            (Some(false), false, ClusterStep::Next),
            (Some(true), false, ClusterStep::Next),
            (Some(true), true, ClusterStep::Await),
            (Some(false), true, ClusterStep::Delete),
        ];
        for (live, ours, want) in cases {
            assert_eq!(cluster_step(live, ours), want, "{live:?} {ours}");
        }
    }

    #[test]
    fn while_a_cluster_object_goes_the_rest_waits_for_it() {
        let d = planned("w", inventory(), ours);
        let held = d.clusters[0].clone();
        let (plan, message) = waiting(d.plan, &held, Action::Deleting);
        assert_eq!(plan.entries[0].action, Action::Deleting);
        assert!(plan.entries[1..].iter().all(|e| e.action == Action::Skip
            && e.reason.as_deref() == Some("deleted once Cluster/ns/w is gone")));
        assert_eq!(
            message,
            "waiting for Cluster/ns/w to be deleted (Cluster API is removing its machines)"
        );
    }

    #[test]
    fn a_deletion_not_over_says_so_and_keeps_what_was_applied() {
        let prev = Recorded::new(
            String::new(),
            String::new(),
            1,
            ManagedClusterStatus {
                last_applied_revision: "aaaa".into(),
                ..Default::default()
            },
        );
        let st = still_deleting(
            Some(&prev),
            "bbbb",
            "deleting: refused".into(),
            "refused",
            inventory(),
        );
        assert_eq!(st.phase, Some(Phase::Deleting));
        assert_eq!(
            (
                st.last_applied_revision.as_str(),
                st.last_attempted_revision.as_str()
            ),
            ("aaaa", "bbbb")
        );
        let c = &st.conditions[0];
        assert_eq!(
            (
                c.type_.as_str(),
                c.status.as_str(),
                c.reason.as_str(),
                c.message.as_str()
            ),
            ("Ready", "False", "Deleting", "refused")
        );
        assert_eq!(st.inventory.len(), 6);
        assert_eq!(
            still_deleting(None, "b", String::new(), "", vec![]).last_applied_revision,
            ""
        );
    }
}
