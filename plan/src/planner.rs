//! The planner's decisions, as pure functions: desired objects × live facts × the previous
//! inventory → a plan, and after applying it, the next inventory.
//!
//! ```text
//! desired ObjectRef ─┐   decide()    Unchanged   (live hash = desired, generation and owned
//!                    │                            fields as recorded)
//! recorded ObjectRef ┼─────────────▶ Create      (not live)
//! LiveObject facts ──┘               Compare     (the server's dry run decides: compared())
//!
//! previous inventory ─┐  prunes()    Prune     the object is in the inventory, no longer
//! desired keys ───────┼────────────▶           desired, and carries capstan's labels for this
//! LiveObject facts ───┘                        cluster
//!                                    Deleting  pruned before, its finalizers still pending: it
//!                                              stays in the inventory, and the cluster is not
//!                                              converged, until it is gone
//!                                    Skip      a Cluster (deleted only on intent), or an object
//!                                              another fleet cluster's labels claim
//!
//! prunes + where the     hold_prunes()  Held   every prune while a change is held; a machine or
//! rollout stands ───────────────────▶          bootstrap template until the cluster has rolled
//!                                              out at this revision (pruned by the pass after)
//!
//! plan + what applying did ──next_inventory()──▶ the inventory recorded in the status
//! ```
//!
//! Prune works from capstan's own records and labels, as Flux does, never from owner
//! references: Cluster API makes the Cluster the owner of machine templates, bootstrap templates
//! and MachineDeployments, so "has an owner" says nothing about whose object it is. What Cluster
//! API creates itself (Machines, MachineSets, generated bootstrap configs) is never in the
//! inventory and carries no capstan label, so it is never pruned.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::stages::Progress;
use super::{Action, Entry, ObjectRef, Plan, diff, same};
use crate::live::LiveObject;
use crate::status::Reason;

/// What to do about drift (a managed field changed by hand on the cluster).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Drift {
    /// Re-apply the repository's version.
    #[default]
    Correct,
    /// Only report it in the plan and status.
    Report,
}

/// What the facts alone say about a desired object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Live, but not this cluster's: labelled for another fleet cluster (`by`), or not by capstan
    /// at all (seen by the agent only when labelled `managed-by`), and not marked for adoption by
    /// this cluster. Never overwritten: a conflict ([`claimed`]).
    Claimed {
        /// The fleet cluster its label names.
        by: Option<String>,
    },
    /// Live with the desired content hash, at the generation recorded when capstan applied it.
    Unchanged,
    /// Not live.
    Create,
    /// Live but different, or changed since capstan applied it (`drift`: same content hash, but
    /// a new generation or a field capstan owned changed, taken over or removed by someone
    /// else): only a comparison with the server's dry run can tell.
    Compare {
        /// The generation moved under an unchanged desired content.
        drift: bool,
    },
}

/// Decides from facts, without a request, for the desired object of `cluster`. `fleet_wide`
/// says whether the desired object carries no cluster label (an EKS Anywhere release object,
/// the same for every management cluster that uses it); asked only when the live one carries
/// none either.
pub fn decide(
    cluster: &str,
    desired: &ObjectRef,
    recorded: Option<&ObjectRef>,
    live: Option<&LiveObject>,
    fleet_wide: impl FnOnce() -> bool,
) -> Decision {
    let Some(live) = live else {
        return Decision::Create;
    };
    // Another's (labelled for another cluster, or capstan's without a cluster label while this
    // one is not fleet-wide), unless this cluster's record holds it: then someone changed the
    // label of an object capstan applied for this cluster, and it is drift, put back.
    let claimed = recorded.is_none()
        && match live.cluster.as_deref() {
            Some(c) => c != cluster,
            None => !fleet_wide(),
        };
    if claimed && live.adopt.as_deref() != Some(cluster) {
        return Decision::Claimed {
            by: live.cluster.as_deref().map(str::to_string),
        };
    }
    let recorded_generation = recorded.map_or(0, |r| r.generation);
    let recorded_fields = recorded.map_or("", |r| r.fields.as_str());
    let same_hash = live.hash.as_deref() == Some(desired.hash.as_str());
    // Nothing recorded (an inventory from before the record existed) is no evidence of drift.
    let untouched = (recorded_generation == 0 || recorded_generation == live.generation)
        && (recorded_fields.is_empty() || live.fields.as_deref() == Some(recorded_fields));
    if same_hash && untouched {
        Decision::Unchanged
    } else {
        Decision::Compare {
            drift: same_hash && !untouched,
        }
    }
}

/// The conflict entry of an object of `cluster` that exists and is not its own (`why`: whose it
/// is), with how an admin hands it over on purpose. Its reason starts with
/// [`Reason::AlreadyExists`], as the tenancy policy's denial of it does.
pub fn claimed(object: &ObjectRef, cluster: &str, why: &str) -> Entry {
    let how = format!(
        "kubectl annotate {} {}{} {}={cluster}",
        object.kind.to_lowercase(),
        object.name,
        if object.namespace.is_empty() {
            String::new()
        } else {
            format!(" -n {}", object.namespace)
        },
        capstan_templates::identity::ADOPT_ANNOTATION,
    );
    Entry::new(
        object.clone(),
        Action::Conflict,
        Some(format!(
            "{}: {} exists and is not cluster {cluster}'s ({why}); capstan takes over no object by accident: an admin who means {cluster} to adopt it runs `{how}`",
            Reason::AlreadyExists,
            object.subject()
        )),
    )
}

/// The reason of an object the API server refuses as it is (its dry run answered 422 or 400:
/// schema, strict field validation, an admission webhook's denial): nothing of the cluster is
/// applied until the repository changes it, since applying the rest would leave the cluster
/// half at the new revision while reporting it converged.
pub const REFUSED_BY_THE_SERVER: &str = "refused by the API server";

/// The entry of an object the API server refuses ([`REFUSED_BY_THE_SERVER`]), with its words.
pub fn refused_by_the_server(object: &ObjectRef, message: &str) -> Entry {
    Entry::new(
        object.clone(),
        Action::Skip,
        Some(format!("{REFUSED_BY_THE_SERVER}: {message}")),
    )
}

/// Whether an entry is an object the API server refuses ([`refused_by_the_server`]).
pub fn is_refused_by_the_server(e: &Entry) -> bool {
    e.action == Action::Skip
        && e.reason
            .as_deref()
            .is_some_and(|r| r.starts_with(REFUSED_BY_THE_SERVER))
}

/// Whether an entry is an object that exists and is not the cluster's ([`claimed`], or the
/// tenancy policy's denial of it).
pub fn is_claimed(e: &Entry) -> bool {
    e.action == Action::Conflict
        && e.reason
            .as_deref()
            .is_some_and(|r| r.starts_with(Reason::AlreadyExists.as_str()))
}

/// The entry of an object whose live copy (`live`, whole; None when absent) was compared with
/// what the server would persist (`dry`).
pub fn compared(
    object: &ObjectRef,
    drift: bool,
    policy: Drift,
    live: Option<&Value>,
    dry: &Value,
) -> Entry {
    let entry = |action, diff, reason: Option<&str>| Entry {
        object: object.clone(),
        action,
        diff,
        reason: reason.map(str::to_string),
        scale_only: false,
    };
    match live {
        None => entry(
            Action::Create,
            Some(diff(None, dry, &object.subject())),
            None,
        ),
        Some(l) if same(l, dry) => entry(Action::Unchanged, None, None),
        Some(l) => {
            let d = Some(diff(Some(l), dry, &object.subject()));
            let only_scales = scale_only(l, dry);
            let entry = |action, diff, reason| Entry {
                scale_only: only_scales,
                ..entry(action, diff, reason)
            };
            match (drift, policy) {
                (true, Drift::Report) => entry(
                    Action::Skip,
                    d,
                    Some(
                        "drift: changed on the cluster since capstan applied it (reported, not corrected)",
                    ),
                ),
                (true, Drift::Correct) => entry(
                    Action::Update,
                    d,
                    Some("drift: changed on the cluster since capstan applied it"),
                ),
                (false, _) => entry(Action::Update, d, None),
            }
        }
    }
}

/// Whether the only difference between a live object and what the server would persist is
/// `spec.replicas`: a scale, which rolls no machine.
pub fn scale_only(live: &Value, dry: &Value) -> bool {
    let without = |v: &Value| {
        let mut n = super::normalize(v);
        if let Some(spec) = n.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("replicas");
        }
        // The content hash moves with the replicas.
        if let Some(a) = n
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            a.remove(super::HASH_ANNOTATION);
        }
        n
    };
    live.pointer("/spec/replicas") != dry.pointer("/spec/replicas") && without(live) == without(dry)
}

/// Why a Cluster is never pruned.
pub const CLUSTER_NOT_PRUNED: &str =
    "a Cluster is deleted only on explicit intent (capstan delete cluster)";

/// The prune entries of `cluster`: objects of its previous inventory that are no longer desired,
/// in reverse order. An object already gone just leaves the inventory (no entry).
pub fn prunes(
    cluster: &str,
    previous: &[ObjectRef],
    desired: &BTreeSet<String>,
    live: impl Fn(&ObjectRef) -> Option<LiveObject>,
) -> Vec<Entry> {
    let mut out = Vec::new();
    for r in previous.iter().rev() {
        if desired.contains(&r.key()) {
            continue;
        }
        let Some(obj) = live(r) else { continue };
        let (action, reason) = if r.is_cluster() {
            (Action::Skip, CLUSTER_NOT_PRUNED.to_string())
        } else if obj.deleting {
            (
                Action::Deleting,
                "being deleted: waiting for its finalizers".to_string(),
            )
        } else if obj.cluster.as_deref() != Some(cluster) {
            let other = obj
                .cluster
                .as_deref()
                .map_or("no fleet cluster".to_string(), |c| {
                    format!("fleet cluster {c}")
                });
            (
                Action::Skip,
                format!(
                    "its capstan.dev/cluster label names {other}: not this cluster's to delete"
                ),
            )
        } else {
            (
                Action::Prune,
                "no longer rendered from the repository".to_string(),
            )
        };
        out.push(Entry::new(r.clone(), action, Some(reason)));
    }
    out
}

/// Whether Cluster API makes machines from an object: a machine template
/// (`infrastructure.cluster.x-k8s.io` `*MachineTemplate`) or a bootstrap template
/// (`bootstrap.cluster.x-k8s.io` `*ConfigTemplate`). A MachineSet, KubeadmControlPlane or
/// EtcdadmCluster names its templates and reads them again whenever it makes a machine (a
/// remediation, a scale), until its last machine of them is gone.
pub fn machines_made_from(r: &ObjectRef) -> bool {
    match r.group() {
        "infrastructure.cluster.x-k8s.io" => r.kind.ends_with("MachineTemplate"),
        "bootstrap.cluster.x-k8s.io" => r.kind.ends_with("ConfigTemplate"),
        _ => false,
    }
}

/// Whether an object makes machines from templates (and deletes them when deleted): a
/// MachineDeployment, MachineSet, MachinePool, KubeadmControlPlane or EtcdadmCluster.
pub fn makes_machines(r: &ObjectRef) -> bool {
    matches!(
        (r.group(), r.kind.as_str()),
        (
            "cluster.x-k8s.io",
            "MachineDeployment" | "MachineSet" | "MachinePool"
        ) | ("controlplane.cluster.x-k8s.io", "KubeadmControlPlane")
            | ("etcdcluster.cluster.x-k8s.io", "EtcdadmCluster")
    )
}

/// Why every prune waits while a change is held.
pub const PRUNED_AFTER_STAGES: &str = "pruned once every stage has rolled out";

/// Holds the prunes of `entries` that must not happen yet, with why (once per pass, after the
/// stages have held what waits):
///
/// - every prune, while any change is held (a held stage still runs on what a prune would
///   delete);
/// - a template Cluster API makes machines from ([`machines_made_from`]) while machines may
///   still be made from it: this pass applies a change that rolls machines, something that
///   makes machines ([`makes_machines`]) is being pruned or deleted, or the cluster has not
///   rolled out at this revision (`rollout`: [`Progress::Done`] when no stage waits and Cluster
///   API reports the cluster rolled out at this revision, from the live facts once this pass's
///   changes are out). The old MachineSet of a rollout, the control plane's old machines, a
///   removed worker group's MachineSets all name their templates until their last machine is
///   gone, and a remediation or a scale in the meantime reads them again. So old templates stay
///   (and stay in the inventory) until the rollout is over, and the pass that finds it over
///   deletes them.
pub fn hold_prunes(entries: &mut [Entry], rollout: &Progress) {
    let held = entries.iter().any(|e| e.action == Action::Held);
    let rolling = entries
        .iter()
        .find(|e| super::stages::rolls_machines(e) && makes_machines(&e.object))
        .map(|e| format!("this pass applies {}", e.object.subject()));
    let going = entries
        .iter()
        .find(|e| matches!(e.action, Action::Prune | Action::Deleting) && makes_machines(&e.object))
        .map(|e| format!("{} is being deleted", e.object.subject()));
    let pending = match rollout {
        Progress::Done => None,
        Progress::Waiting(why) => Some(format!("the cluster has not rolled out yet ({why})")),
    };
    let template_wait = rolling.or(going).or(pending);
    for e in entries.iter_mut().filter(|e| e.action == Action::Prune) {
        let why = if held {
            PRUNED_AFTER_STAGES.to_string()
        } else if let (true, Some(w)) = (machines_made_from(&e.object), &template_wait) {
            format!(
                "machines may still be made from it: pruned once the cluster has rolled out at this revision; {w}"
            )
        } else {
            continue;
        };
        e.action = Action::Held;
        e.reason = Some(why);
    }
}

/// What the inventory records of an object as capstan left it: its generation and the hash of
/// the fields capstan owns, from the apply's answer (or the live object, when unchanged).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stamp {
    /// `metadata.generation`.
    pub generation: i64,
    /// [`capstan_templates::identity::owned_fields`] ("" when unknown).
    pub fields: String,
}

impl Stamp {
    /// The stamp of live facts.
    pub fn of(live: &LiveObject) -> Stamp {
        Stamp {
            generation: live.generation,
            fields: live.fields.as_deref().unwrap_or("").to_string(),
        }
    }

    /// A stamp with a generation only.
    pub fn generation(generation: i64) -> Stamp {
        Stamp {
            generation,
            fields: String::new(),
        }
    }

    fn on(&self, r: &ObjectRef) -> ObjectRef {
        ObjectRef {
            generation: self.generation,
            fields: self.fields.clone(),
            ..r.clone()
        }
    }
}

/// What applying a plan did.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// Keys applied, with what the server answered.
    pub stamps: BTreeMap<String, Stamp>,
    /// Keys deleted (or found gone).
    pub pruned: BTreeSet<String>,
    /// Keys whose deletion was accepted but waits for finalizers.
    pub terminating: BTreeSet<String>,
    /// Every write of the plan was made (no failure stopped it).
    pub complete: bool,
}

/// The inventory after applying `plan`: what capstan is responsible for on the cluster, in apply
/// order (`desired` order; Clusters kept from before at the end).
///
/// - applied objects, with the generation and owned fields the server answered;
/// - after a complete apply: unchanged objects with their live ones; previous entries
///   that are still desired (e.g. a reported drift, a rejected update) keep their record;
///   Clusters no longer rendered stay until deleted on intent, and pruned objects until their
///   finalizers let them go (terminating now, or [`Action::Deleting`]); everything else not
///   desired leaves (pruned and gone, gone, or another cluster's);
/// - after a failed apply: the previous inventory plus what was applied, minus what was pruned:
///   nothing capstan might still have to delete is forgotten.
pub fn next_inventory(
    previous: &[ObjectRef],
    desired: &[ObjectRef],
    plan: &Plan,
    applied: &Applied,
    live: impl Fn(&ObjectRef) -> Stamp,
) -> Vec<ObjectRef> {
    let mut inventory: BTreeMap<String, ObjectRef> =
        previous.iter().map(|r| (r.key(), r.clone())).collect();
    for r in desired {
        if let Some(stamp) = applied.stamps.get(&r.key()) {
            inventory.insert(r.key(), stamp.on(r));
        }
    }
    for k in &applied.pruned {
        if !applied.terminating.contains(k) {
            inventory.remove(k);
        }
    }
    if applied.complete {
        let desired_keys: BTreeSet<String> = desired.iter().map(ObjectRef::key).collect();
        for e in plan
            .entries
            .iter()
            .filter(|e| e.action == Action::Unchanged)
        {
            if let Some(r) = desired.iter().find(|r| r.key() == e.object.key()) {
                inventory.insert(r.key(), live(r).on(r));
            }
        }
        // Still ours: objects pruned before and waiting for their finalizers, and prunes held
        // until an upgrade's stages have rolled out.
        let deleting: BTreeSet<String> = plan
            .entries
            .iter()
            .filter(|e| matches!(e.action, Action::Deleting | Action::Held))
            .map(|e| e.object.key())
            .chain(applied.terminating.iter().cloned())
            .collect();
        inventory.retain(|k, r| desired_keys.contains(k) || r.is_cluster() || deleting.contains(k));
    }
    let order: BTreeMap<String, usize> = desired
        .iter()
        .enumerate()
        .map(|(i, r)| (r.key(), i))
        .collect();
    let mut out: Vec<ObjectRef> = inventory.into_values().collect();
    out.sort_by_key(|r| order.get(&r.key()).copied().unwrap_or(usize::MAX));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// [`decide`] for an object that carries its cluster's label.
    fn own(
        cluster: &str,
        desired: &ObjectRef,
        recorded: Option<&ObjectRef>,
        live: Option<&LiveObject>,
    ) -> Decision {
        decide(cluster, desired, recorded, live, || false)
    }

    fn r(kind: &str, name: &str, hash: &str, generation: i64) -> ObjectRef {
        let group = match kind {
            "KubeadmControlPlane" => "controlplane.cluster.x-k8s.io",
            "DevMachineTemplate" => "infrastructure.cluster.x-k8s.io",
            _ => "cluster.x-k8s.io",
        };
        ObjectRef {
            api_version: format!("{group}/v1beta2"),
            kind: kind.into(),
            namespace: "ns".into(),
            name: name.into(),
            hash: hash.into(),
            generation,
            fields: String::new(),
        }
    }

    fn live(hash: &str, generation: i64, cluster: &str) -> LiveObject {
        LiveObject {
            generation,
            hash: Some(hash.into()),
            cluster: Some(cluster.into()),
            rollout: None,
            deleting: false,
            fields: None,
            resource_version: 0,
            uid: None,
            adopt: None,
        }
    }

    #[test]
    fn decisions_from_facts() {
        let d = r("MachineDeployment", "md", "h1", 0);
        let rec = r("MachineDeployment", "md", "h1", 4);
        assert_eq!(own("c", &d, Some(&rec), None), Decision::Create);
        assert_eq!(
            own("c", &d, Some(&rec), Some(&live("h1", 4, "c"))),
            Decision::Unchanged
        );
        // Never recorded a generation (an old inventory): the hash decides.
        assert_eq!(
            own("c", &d, None, Some(&live("h1", 9, "c"))),
            Decision::Unchanged
        );
        // Someone changed it: same desired content, a new generation.
        assert_eq!(
            own("c", &d, Some(&rec), Some(&live("h1", 5, "c"))),
            Decision::Compare { drift: true }
        );
        // The repository changed it.
        assert_eq!(
            own("c", &d, Some(&rec), Some(&live("h0", 4, "c"))),
            Decision::Compare { drift: false }
        );
    }

    #[test]
    fn an_object_that_is_not_the_clusters_is_never_taken_over() {
        let d = r("ConfigMap", "dev-cm", "h1", 0);
        // Labelled for another cluster and not in this cluster's record.
        assert_eq!(
            own("dev", &d, None, Some(&live("h1", 0, "prod"))),
            Decision::Claimed {
                by: Some("prod".into())
            }
        );
        // In the record: capstan applied it for this cluster, someone relabelled it: drift.
        let rec = ObjectRef {
            fields: "f1".into(),
            ..d.clone()
        };
        let relabelled = LiveObject {
            fields: Some("f2".into()),
            ..live("h1", 0, "someone-else")
        };
        assert_eq!(
            own("dev", &d, Some(&rec), Some(&relabelled)),
            Decision::Compare { drift: true }
        );
        // Capstan's label without a cluster (someone removed it), not in the record; but a
        // fleet-wide object (no cluster label wanted either: a release object) is not claimed.
        let unlabelled = LiveObject {
            cluster: None,
            ..live("h1", 0, "x")
        };
        assert_eq!(
            own("dev", &d, None, Some(&unlabelled)),
            Decision::Claimed { by: None }
        );
        assert_eq!(
            decide("dev", &d, None, Some(&unlabelled), || true),
            Decision::Unchanged
        );
        // An admin marked it for adoption by this cluster (and only this one).
        let marked = |by: &str| LiveObject {
            adopt: Some(by.into()),
            ..live("h0", 0, "prod")
        };
        assert_eq!(
            own("dev", &d, None, Some(&marked("dev"))),
            Decision::Compare { drift: false }
        );
        assert_eq!(
            own("dev", &d, None, Some(&marked("qa"))),
            Decision::Claimed {
                by: Some("prod".into())
            }
        );
        let e = claimed(&d, "dev", "labelled for cluster prod");
        assert!(is_claimed(&e));
        let why = e.reason.unwrap();
        assert!(
            why.starts_with("AlreadyExists: ConfigMap/ns/dev-cm exists and is not cluster dev's (labelled for cluster prod)")
                && why.ends_with("`kubectl annotate configmap dev-cm -n ns capstan.dev/adopt=dev`"),
            "{why}"
        );
    }

    #[test]
    fn drift_beyond_generation_is_seen_in_the_owned_fields() {
        // A ConfigMap: no generation; a label edited, an annotation removed, a key edited by
        // hand all change which fields capstan owns, and only that.
        let d = r("ConfigMap", "cm", "h1", 0);
        let rec = ObjectRef {
            fields: "f1".into(),
            ..r("ConfigMap", "cm", "h1", 0)
        };
        let with = |fields: Option<&str>| LiveObject {
            fields: fields.map(Into::into),
            ..live("h1", 0, "c")
        };
        assert_eq!(
            own("c", &d, Some(&rec), Some(&with(Some("f1")))),
            Decision::Unchanged
        );
        assert_eq!(
            own("c", &d, Some(&rec), Some(&with(Some("f2")))),
            Decision::Compare { drift: true }
        );
        assert_eq!(
            own("c", &d, Some(&rec), Some(&with(None))),
            Decision::Compare { drift: true },
            "someone took over every field"
        );
        // An inventory from before owned fields were recorded: no evidence of drift.
        assert_eq!(
            own(
                "c",
                &d,
                Some(&r("ConfigMap", "cm", "h1", 0)),
                Some(&with(Some("f2")))
            ),
            Decision::Unchanged
        );
    }

    #[test]
    fn a_change_of_replicas_alone_is_a_scale() {
        let md = |replicas: i64, hash: &str, version: &str| {
            json!({"kind": "MachineDeployment", "metadata": {"name": "md", "annotations": {super::super::HASH_ANNOTATION: hash}},
                "spec": {"replicas": replicas, "template": {"spec": {"version": version}}}})
        };
        assert!(scale_only(&md(1, "a", "v1"), &md(2, "b", "v1")));
        assert!(!scale_only(&md(1, "a", "v1"), &md(2, "b", "v2")));
        assert!(!scale_only(&md(1, "a", "v1"), &md(1, "b", "v2")));
        assert!(!scale_only(&md(1, "a", "v1"), &md(1, "a", "v1")));
    }

    #[test]
    fn comparisons() {
        let o = r("MachineDeployment", "md", "h", 0);
        let a = json!({"kind": "MachineDeployment", "metadata": {"name": "md", "resourceVersion": "1"}, "spec": {"replicas": 2}});
        let b = json!({"kind": "MachineDeployment", "metadata": {"name": "md", "resourceVersion": "2"}, "spec": {"replicas": 3}});
        assert_eq!(
            compared(&o, false, Drift::Correct, None, &a).action,
            Action::Create
        );
        assert_eq!(
            compared(&o, true, Drift::Correct, Some(&a), &a).action,
            Action::Unchanged
        );
        let u = compared(&o, false, Drift::Report, Some(&a), &b);
        assert_eq!((u.action, u.reason), (Action::Update, None));
        let d = u.diff.unwrap();
        assert!(
            d.contains("-  replicas: 2") && d.contains("+  replicas: 3"),
            "{d}"
        );
        assert_eq!(
            compared(&o, true, Drift::Report, Some(&a), &b).action,
            Action::Skip
        );
        assert_eq!(
            compared(&o, true, Drift::Correct, Some(&a), &b).action,
            Action::Update
        );
    }

    #[test]
    fn prune_by_inventory_and_labels_never_by_owner_references() {
        let cluster = r("Cluster", "dev", "", 1);
        let old_template = r("DevMachineTemplate", "dev-md-0-0a1b2c3d4e", "", 1);
        let removed_group = r("MachineDeployment", "dev-md-1", "", 1);
        let claimed = r("MachineDeployment", "dev-md-2", "", 1);
        let gone = r("MachineHealthCheck", "dev-md-3", "", 1);
        let kept = r("KubeadmControlPlane", "dev", "", 1);
        let previous = [
            cluster.clone(),
            old_template.clone(),
            removed_group.clone(),
            claimed.clone(),
            gone,
            kept.clone(),
        ];
        let desired: BTreeSet<String> = [kept.key()].into();
        // Cluster API made the Cluster the owner of all of them: that does not matter.
        let facts = |o: &ObjectRef| match o.name.as_str() {
            "dev-md-3" => None,
            "dev-md-2" => Some(live("x", 1, "prod")),
            _ => Some(live("x", 1, "dev")),
        };
        let got: Vec<(String, Action)> = prunes("dev", &previous, &desired, facts)
            .into_iter()
            .map(|e| (e.object.name, e.action))
            .collect();
        assert_eq!(
            got,
            vec![
                ("dev-md-2".into(), Action::Skip),
                ("dev-md-1".into(), Action::Prune),
                ("dev-md-0-0a1b2c3d4e".into(), Action::Prune),
                ("dev".into(), Action::Skip),
            ]
        );
    }

    #[test]
    fn pruned_objects_stay_until_their_finalizers_let_them_go() {
        let md = r("MachineDeployment", "dev-md-1", "m", 1);
        let cp = r("KubeadmControlPlane", "dev", "k", 1);
        let desired = vec![cp.clone()];
        let terminating = LiveObject {
            deleting: true,
            ..live("m", 1, "dev")
        };
        let entries = prunes("dev", &[cp.clone(), md.clone()], &[cp.key()].into(), |_| {
            Some(terminating.clone())
        });
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].action, Action::Deleting);
        let plan = Plan {
            cluster: "dev".into(),
            entries,
        };
        assert!(
            !plan.has_changes(),
            "waiting for finalizers is not a change"
        );
        let complete = Applied {
            complete: true,
            ..Default::default()
        };
        let inv = next_inventory(
            &[cp.clone(), md.clone()],
            &desired,
            &plan,
            &complete,
            |_| Stamp::generation(1),
        );
        assert_eq!(inv.len(), 2, "still deleting: still ours");
        // Deleted this pass, still terminating: kept; deleted and gone: dropped.
        let empty = Plan {
            cluster: "dev".into(),
            entries: vec![],
        };
        let pruned = Applied {
            pruned: [md.key()].into(),
            terminating: [md.key()].into(),
            complete: true,
            ..Default::default()
        };
        assert_eq!(
            next_inventory(&[cp.clone(), md.clone()], &desired, &empty, &pruned, |_| {
                Stamp::generation(1)
            })
            .len(),
            2
        );
        let gone = Applied {
            pruned: [md.key()].into(),
            complete: true,
            ..Default::default()
        };
        assert_eq!(
            next_inventory(&[cp.clone(), md], &desired, &empty, &gone, |_| {
                Stamp::generation(1)
            }),
            vec![ObjectRef {
                generation: 1,
                ..cp
            }]
        );
    }

    #[test]
    fn the_next_inventory() {
        let cluster = r("Cluster", "dev", "c1", 1);
        let cp = r("KubeadmControlPlane", "dev", "k1", 2);
        let old = r("DevMachineTemplate", "dev-cp-old", "t0", 1);
        let new = r("DevMachineTemplate", "dev-cp-new", "t1", 0);
        let md = r("MachineDeployment", "dev-md-0", "m1", 3);
        let previous = vec![old.clone(), cp.clone(), cluster.clone(), md.clone()];
        // The repository no longer renders the Cluster (a directory mid-rename, say) nor the
        // MachineDeployment; the control plane moves to a new template.
        let desired = vec![
            new.clone(),
            ObjectRef {
                hash: "k2".into(),
                generation: 0,
                ..cp.clone()
            },
        ];
        let plan = Plan {
            cluster: "dev".into(),
            entries: vec![
                Entry {
                    object: new.clone(),
                    action: Action::Create,
                    diff: None,
                    reason: None,
                    scale_only: false,
                },
                Entry {
                    object: desired[1].clone(),
                    action: Action::Update,
                    diff: None,
                    reason: None,
                    scale_only: false,
                },
                Entry {
                    object: md.clone(),
                    action: Action::Prune,
                    diff: None,
                    reason: None,
                    scale_only: false,
                },
                Entry {
                    object: old.clone(),
                    action: Action::Prune,
                    diff: None,
                    reason: None,
                    scale_only: false,
                },
                Entry {
                    object: cluster.clone(),
                    action: Action::Skip,
                    diff: None,
                    reason: Some(CLUSTER_NOT_PRUNED.into()),
                    scale_only: false,
                },
            ],
        };
        let applied = Applied {
            stamps: [
                (new.key(), Stamp::generation(1)),
                (cp.key(), Stamp::generation(3)),
            ]
            .into(),
            pruned: [md.key(), old.key()].into(),
            complete: true,
            ..Default::default()
        };
        let inv = next_inventory(&previous, &desired, &plan, &applied, |_| Stamp::default());
        let got: Vec<(&str, &str, i64)> = inv
            .iter()
            .map(|r| (r.name.as_str(), r.hash.as_str(), r.generation))
            .collect();
        assert_eq!(
            got,
            vec![("dev-cp-new", "t1", 1), ("dev", "k2", 3), ("dev", "c1", 1)]
        );
        assert_eq!(inv[2].kind, "Cluster");

        // A failure after the first write: nothing recorded before is forgotten.
        let failed = Applied {
            stamps: [(new.key(), Stamp::generation(1))].into(),
            ..Default::default()
        };
        let inv = next_inventory(&previous, &desired, &plan, &failed, |_| Stamp::default());
        assert_eq!(inv.len(), 5);
        assert_eq!(
            inv.iter()
                .find(|r| r.kind == "KubeadmControlPlane")
                .unwrap()
                .hash,
            "k1"
        );
    }

    #[test]
    fn a_held_prune_stays_in_the_inventory() {
        let old = r("DevMachineTemplate", "dev-md-0-old", "t0", 1);
        let md = r("MachineDeployment", "dev-md-0", "m1", 1);
        let plan = Plan {
            cluster: "dev".into(),
            entries: vec![
                Entry::new(md.clone(), Action::Held, Some("waits".into())),
                Entry::new(old.clone(), Action::Held, Some("pruned later".into())),
            ],
        };
        let applied = Applied {
            complete: true,
            ..Default::default()
        };
        let inv = next_inventory(
            &[old.clone(), md.clone()],
            std::slice::from_ref(&md),
            &plan,
            &applied,
            |_| Stamp::default(),
        );
        assert_eq!(
            inv.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            vec!["dev-md-0", "dev-md-0-old"],
            "the old template is still used by the held group: not forgotten"
        );
    }

    fn of(api_version: &str, kind: &str, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: api_version.into(),
            ..r(kind, name, "", 1)
        }
    }

    fn infra(kind: &str, name: &str) -> ObjectRef {
        of("infrastructure.cluster.x-k8s.io/v1beta2", kind, name)
    }

    fn bootstrap(name: &str) -> ObjectRef {
        of(
            "bootstrap.cluster.x-k8s.io/v1beta2",
            "KubeadmConfigTemplate",
            name,
        )
    }

    /// `(action, name)` of every entry after [`hold_prunes`].
    fn held(mut entries: Vec<Entry>, rollout: &Progress) -> Vec<(Action, String)> {
        hold_prunes(&mut entries, rollout);
        entries
            .into_iter()
            .map(|e| (e.action, e.object.name))
            .collect()
    }

    #[test]
    fn machines_are_made_from_machine_and_bootstrap_templates_only() {
        for t in [
            infra("DevMachineTemplate", "t"),
            infra("DockerMachineTemplate", "t"),
            of(
                "infrastructure.cluster.x-k8s.io/v1beta1",
                "VSphereMachineTemplate",
                "t",
            ),
            bootstrap("t"),
        ] {
            assert!(machines_made_from(&t), "{t:?}");
            assert!(!makes_machines(&t), "{t:?}");
        }
        for o in [
            infra("DevCluster", "c"),
            of("bootstrap.cluster.x-k8s.io/v1beta2", "KubeadmConfig", "c"),
            r("MachineHealthCheck", "mhc", "", 1),
            of("v1", "ConfigMap", "cm"),
            of("infrastructure.example.com/v1", "FooMachineTemplate", "t"),
        ] {
            assert!(!machines_made_from(&o), "{o:?}");
        }
        for o in [
            r("MachineDeployment", "md", "", 1),
            r("KubeadmControlPlane", "cp", "", 1),
            of(
                "etcdcluster.cluster.x-k8s.io/v1beta1",
                "EtcdadmCluster",
                "e",
            ),
        ] {
            assert!(makes_machines(&o), "{o:?}");
        }
    }

    #[test]
    fn old_templates_are_pruned_only_after_the_rollout() {
        let md = r("MachineDeployment", "dev-md-0", "", 1);
        let new_infra = infra("DevMachineTemplate", "dev-md-0-new");
        let old_infra = infra("DevMachineTemplate", "dev-md-0-old");
        let old_boot = bootstrap("dev-md-0-old");
        let removed = of("v1", "ConfigMap", "dev-extra");
        let prune = |o: &ObjectRef| Entry::new(o.clone(), Action::Prune, None);
        let pass = |md_action: Action| {
            vec![
                Entry::new(new_infra.clone(), Action::Unchanged, None),
                Entry::new(md.clone(), md_action, None),
                prune(&removed),
                prune(&old_boot),
                prune(&old_infra),
            ]
        };
        // The pass that applies the new template: the old MachineSet still makes machines
        // from the old ones, whatever the facts say.
        assert_eq!(
            held(pass(Action::Update), &Progress::Done),
            vec![
                (Action::Unchanged, "dev-md-0-new".into()),
                (Action::Update, "dev-md-0".into()),
                (Action::Prune, "dev-extra".into()),
                (Action::Held, "dev-md-0-old".into()),
                (Action::Held, "dev-md-0-old".into()),
            ]
        );
        // The passes while Cluster API rolls the group: still held, and why.
        let mut rolling = pass(Action::Unchanged);
        let waiting = Progress::Waiting(
            "MachineDeployment/ns/dev-md-0: 1 machines of an older template remain".into(),
        );
        hold_prunes(&mut rolling, &waiting);
        let reason = rolling[4].reason.clone().unwrap();
        assert_eq!(rolling[4].action, Action::Held);
        assert!(
            reason.contains("rolled out at this revision") && reason.contains("older template"),
            "{reason}"
        );
        // The pass that finds it rolled out deletes them.
        assert_eq!(
            held(pass(Action::Unchanged), &Progress::Done)
                .into_iter()
                .filter(|(a, _)| *a == Action::Prune)
                .count(),
            3
        );
        // A scale rolls no machine: no reason to keep them.
        let mut scale = pass(Action::Update);
        scale[1].scale_only = true;
        hold_prunes(&mut scale, &Progress::Done);
        assert_eq!(scale[4].action, Action::Prune);
        // The control plane's and etcd's templates alike.
        for owner in [
            r("KubeadmControlPlane", "dev", "", 1),
            of(
                "etcdcluster.cluster.x-k8s.io/v1beta1",
                "EtcdadmCluster",
                "dev-etcd",
            ),
        ] {
            let got = held(
                vec![
                    Entry::new(owner, Action::Update, None),
                    prune(&infra("DevMachineTemplate", "dev-control-plane-old")),
                ],
                &Progress::Done,
            );
            assert_eq!(got[1].0, Action::Held);
        }
        // An add-on's change makes no machine.
        let hcp = of("addons.cluster.x-k8s.io/v1alpha1", "HelmChartProxy", "cni");
        let got = held(
            vec![Entry::new(hcp, Action::Update, None), prune(&old_infra)],
            &Progress::Done,
        );
        assert_eq!(got[1].0, Action::Prune);
    }

    #[test]
    fn a_removed_groups_templates_outlive_its_machine_deployment() {
        let md = r("MachineDeployment", "dev-md-1", "", 1);
        let mhc = r("MachineHealthCheck", "dev-md-1", "", 1);
        let (t, b) = (
            infra("DevMachineTemplate", "dev-md-1-a"),
            bootstrap("dev-md-1-b"),
        );
        let prunes = |md_action: Option<Action>| {
            let mut v: Vec<Entry> = md_action
                .map(|a| Entry::new(md.clone(), a, None))
                .into_iter()
                .collect();
            v.extend(
                [&mhc, &b, &t]
                    .into_iter()
                    .map(|o| Entry::new(o.clone(), Action::Prune, None)),
            );
            v
        };
        let actions = |v: Vec<(Action, String)>| v.into_iter().map(|(a, _)| a).collect::<Vec<_>>();
        // Deleted now, then its finalizer waits for its MachineSets and their Machines.
        assert_eq!(
            actions(held(prunes(Some(Action::Prune)), &Progress::Done)),
            vec![Action::Prune, Action::Prune, Action::Held, Action::Held]
        );
        let mut deleting = prunes(Some(Action::Deleting));
        hold_prunes(&mut deleting, &Progress::Done);
        assert!(
            deleting[3]
                .reason
                .as_deref()
                .unwrap()
                .contains("MachineDeployment/ns/dev-md-1 is being deleted"),
            "{deleting:#?}"
        );
        // Gone: the templates go.
        assert_eq!(
            actions(held(prunes(None), &Progress::Done)),
            vec![Action::Prune, Action::Prune, Action::Prune]
        );
    }

    #[test]
    fn every_prune_waits_while_a_change_is_held() {
        let md = r("MachineDeployment", "dev-md-0", "", 1);
        let got = held(
            vec![
                Entry::new(md, Action::Held, Some("waits for the control plane".into())),
                Entry::new(of("v1", "ConfigMap", "dev-extra"), Action::Prune, None),
                Entry::new(
                    infra("DevMachineTemplate", "dev-md-0-old"),
                    Action::Prune,
                    None,
                ),
            ],
            &Progress::Done,
        );
        assert_eq!(
            got.iter().map(|(a, _)| *a).collect::<Vec<_>>(),
            vec![Action::Held; 3]
        );
    }

    #[test]
    fn unchanged_objects_record_their_live_generation() {
        let cp = r("KubeadmControlPlane", "dev", "k1", 2);
        let plan = Plan {
            cluster: "dev".into(),
            entries: vec![Entry {
                object: cp.clone(),
                action: Action::Unchanged,
                diff: None,
                reason: None,
                scale_only: false,
            }],
        };
        let applied = Applied {
            complete: true,
            ..Default::default()
        };
        let inv = next_inventory(
            std::slice::from_ref(&cp),
            &[ObjectRef {
                generation: 0,
                ..cp.clone()
            }],
            &plan,
            &applied,
            |_| Stamp {
                generation: 7,
                fields: "f7".into(),
            },
        );
        assert_eq!((inv[0].generation, inv[0].fields.as_str()), (7, "f7"));
    }
}
