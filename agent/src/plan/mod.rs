//! The plan: what applying a cluster's desired objects would do, as data.
//!
//! For each object one [`Action`]: create, update, unchanged, prune or skip, with a unified diff
//! of what the server would persist (its dry-run answer) against what is live, both normalised
//! (server-owned metadata and status stripped, Secret data masked). The decisions are pure
//! functions in [`planner`] (desired objects × live facts × previous inventory → plan and next
//! inventory), tested without an API server; `reconcile` gathers their inputs, asks the server
//! where only a comparison can tell, acts on the result, and `capstan plan` prints it.

pub mod chain;
pub mod compare;
pub mod fights;
pub mod impact;
pub mod order;
pub mod planner;
pub mod report;
pub mod stages;
pub mod waves;

use std::fmt;

use capstan_layout::Rendered;
pub use capstan_templates::identity::{HASH_ANNOTATION, content_hash, key};
use capstan_templates::identity::{group, subject};
use serde::Serialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// What happens to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Not live yet.
    Create,
    /// Live and different.
    Update,
    /// Live and equal.
    Unchanged,
    /// Applied before, no longer desired: deleted.
    Prune,
    /// Left alone, with a reason.
    Skip,
    /// Pruned before and still there: waiting for its finalizers (Cluster API tearing down a
    /// removed worker group's machines). Not a change; the cluster is not converged until it is
    /// gone.
    Deleting,
    /// Drifted again and again: another field manager keeps changing fields capstan owns, so
    /// capstan stops re-applying it for a while ([`fights`]) and names the other manager.
    Conflict,
    /// A change that waits for an earlier upgrade stage to roll out ([`stages`]): applied by a
    /// later pass.
    Held,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Unchanged => "unchanged",
            Action::Prune => "prune",
            Action::Skip => "skip",
            Action::Deleting => "deleting",
            Action::Conflict => "conflict",
            Action::Held => "held",
        })
    }
}

/// Identity of an object: group, kind, namespace and name (the version is not identity).
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// apiVersion it was applied with.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace ("" for cluster-scoped objects).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Content hash recorded at apply time.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hash: String,
    /// metadata.generation the server answered the apply with: a live generation that differs
    /// means someone changed the object since (drift), without comparing anything else.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: i64,
    /// The hash of the fields capstan owned after applying it
    /// ([`capstan_templates::identity::owned_fields`]): a live hash that differs means someone
    /// changed, took over or removed one of them — labels, annotations, the data of objects
    /// without a generation — which the generation does not show.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(
        description = "Hash of the fields capstan owns by server-side apply, as applied (drift the generation does not show)."
    )]
    pub fields: String,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl ObjectRef {
    /// The reference of an object.
    pub fn of(obj: &Value) -> ObjectRef {
        let s = |p: &str| {
            obj.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        ObjectRef {
            api_version: s("/apiVersion"),
            kind: s("/kind"),
            namespace: s("/metadata/namespace"),
            name: s("/metadata/name"),
            hash: String::new(),
            generation: 0,
            fields: String::new(),
        }
    }

    /// The API group.
    pub fn group(&self) -> &str {
        group(&self.api_version)
    }

    /// `group/Kind/namespace/name`: identity across versions.
    pub fn key(&self) -> String {
        key(self.group(), &self.kind, &self.namespace, &self.name)
    }

    /// `Kind/namespace/name`, for messages.
    pub fn subject(&self) -> String {
        subject(&self.kind, &self.namespace, &self.name)
    }

    /// Whether this is a cluster object only deleted on explicit intent (CAPI or EKS-A Cluster).
    pub fn is_cluster(&self) -> bool {
        self.kind == "Cluster"
            && matches!(
                self.group(),
                "cluster.x-k8s.io" | "anywhere.eks.amazonaws.com"
            )
    }
}

/// One object's plan.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// The object.
    pub object: ObjectRef,
    /// What happens.
    pub action: Action,
    /// Unified diff, live → desired (updates and creates).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// Why (skips, prunes, held changes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// An update that changes only `spec.replicas`: a scale, which rolls no machine and never
    /// waits for an upgrade stage.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub scale_only: bool,
}

impl Entry {
    /// Whether it puts back what capstan applied before, changed on the cluster by someone
    /// else (its desired content is what was applied; [`planner::compared`]).
    pub fn is_drift_correction(&self) -> bool {
        self.action == Action::Update
            && self
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with("drift"))
    }

    /// An entry without a diff.
    pub fn new(object: ObjectRef, action: Action, reason: Option<String>) -> Entry {
        Entry {
            object,
            action,
            diff: None,
            reason,
            scale_only: false,
        }
    }
}

/// A cluster's plan.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Plan {
    /// The cluster.
    pub cluster: String,
    /// One entry per object, in apply order, prunes last (in reverse apply order).
    pub entries: Vec<Entry>,
}

impl Plan {
    /// Whether applying it would write anything (now, or once its held changes go out).
    pub fn has_changes(&self) -> bool {
        self.entries.iter().any(|e| {
            matches!(
                e.action,
                Action::Create | Action::Update | Action::Prune | Action::Held
            )
        })
    }

    /// Whether applying it writes anything now (held changes wait, so they do not count).
    pub fn writes_now(&self) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(e.action, Action::Create | Action::Update | Action::Prune))
    }

    /// Counts per action.
    pub fn counts(&self) -> [(Action, usize); 8] {
        [
            Action::Create,
            Action::Update,
            Action::Unchanged,
            Action::Prune,
            Action::Skip,
            Action::Deleting,
            Action::Conflict,
            Action::Held,
        ]
        .map(|a| (a, self.entries.iter().filter(|e| e.action == a).count()))
    }
}

/// The reference of a rendered object, with its content hash.
pub fn reference(obj: &Rendered) -> ObjectRef {
    ObjectRef {
        api_version: obj.api_version().to_string(),
        kind: obj.kind().to_string(),
        namespace: obj.namespace().to_string(),
        name: obj.name().to_string(),
        hash: obj.hash().to_string(),
        generation: 0,
        fields: String::new(),
    }
}

/// A rendered object as applied: with its content hash annotation. (The rendered hash and
/// [`content_hash`] agree: both are `capstan_templates::identity`'s hash of the canonical JSON without it.)
pub fn annotated(obj: &Rendered) -> Value {
    let mut v = obj.value();
    let meta = v
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .expect("rendered objects have metadata");
    let ann = meta.entry("annotations").or_insert_with(|| json!({}));
    ann.as_object_mut()
        .expect("annotations is a mapping")
        .insert(HASH_ANNOTATION.into(), json!(obj.hash()));
    v
}

const SERVER_METADATA: &[&str] = &[
    "managedFields",
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "selfLink",
];

/// Strips what the server owns (status, bookkeeping metadata) and masks Secret data.
pub fn normalize(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("status");
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in SERVER_METADATA {
                meta.remove(*k);
            }
            if let Some(ann) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
                ann.remove("kubectl.kubernetes.io/last-applied-configuration");
                if ann.is_empty() {
                    meta.remove("annotations");
                }
            }
        }
        if m.get("kind").and_then(Value::as_str) == Some("Secret")
            && m.get("apiVersion").and_then(Value::as_str) == Some("v1")
        {
            for field in ["data", "stringData"] {
                if let Some(Value::Object(d)) = m.get_mut(field) {
                    let masked: Map<String, Value> = d
                        .iter()
                        .map(|(k, v)| {
                            (
                                k.clone(),
                                json!(format!(
                                    "*** ({} bytes, sha256 {})",
                                    v.as_str().map_or(0, str::len),
                                    &hex::encode(Sha256::digest(v.to_string()))[..8]
                                )),
                            )
                        })
                        .collect();
                    *d = masked;
                }
            }
        }
    }
    v
}

/// A unified diff of two objects, normalised, as YAML.
pub fn diff(live: Option<&Value>, desired: &Value, subject: &str) -> String {
    diff_between(live, Some(desired), subject, ("live", "desired"))
}

/// A unified diff of two objects (either may be absent), normalised (Secret data masked), as
/// YAML, with `sides` naming the two (`("base", "head")`).
pub fn diff_between(
    old: Option<&Value>,
    new: Option<&Value>,
    subject: &str,
    sides: (&str, &str),
) -> String {
    let text = |v: Option<&Value>| {
        v.map(|v| capstan_templates::yaml::to_string(&normalize(v)))
            .unwrap_or_default()
    };
    let (old, new) = (text(old), text(new));
    similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(3)
        .header(
            &format!("{}/{subject}", sides.0),
            &format!("{}/{subject}", sides.1),
        )
        .to_string()
}

/// Whether two objects are the same once normalised.
pub fn same(live: &Value, desired: &Value) -> bool {
    normalize(live) == normalize(desired)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::LiveObject;

    fn obj(kind: &str, name: &str) -> Value {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind, "metadata": {"name": name, "namespace": "ns"}, "spec": {"a": 1}})
    }

    #[test]
    fn the_rendered_hash_is_the_content_hash() {
        let o = obj("MachineDeployment", "a");
        let rendered = Rendered::new(&o);
        let applied = annotated(&rendered);
        assert_eq!(content_hash(&applied), rendered.hash());
        assert_eq!(
            LiveObject::from_value(&applied).hash.as_deref(),
            Some(rendered.hash())
        );
        assert_eq!(reference(&rendered).key(), ObjectRef::of(&o).key());
    }

    #[test]
    fn hash_ignores_its_own_annotation() {
        let rendered = Rendered::new(&obj("MachineDeployment", "a"));
        let (with, h) = (annotated(&rendered), rendered.hash().to_string());
        assert_eq!(content_hash(&with), h);
        assert_eq!(
            LiveObject::from_value(&with).hash.as_deref(),
            Some(h.as_str())
        );
    }

    #[test]
    fn normalize_strips_server_fields_and_masks_secrets() {
        let live = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "resourceVersion": "5", "managedFields": []}, "data": {"k": "c2VjcmV0"}, "status": {}});
        let n = normalize(&live);
        assert!(n["metadata"].get("resourceVersion").is_none());
        assert!(n.get("status").is_none());
        assert!(n["data"]["k"].as_str().unwrap().starts_with("***"));
        assert!(!diff(None, &live, "Secret/s").contains("c2VjcmV0"));
    }
}
