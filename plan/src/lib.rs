//! `capstan-plan`: capstan's decisions, as data and pure functions (no I/O, no async, no
//! Kubernetes client): the plan — what applying a cluster's desired objects would do — and
//! everything it is decided from and into: the live facts ([`live`]), Cluster API's health
//! ([`health`]), the upgrade stages, chains and waves, the status record ([`status`]) and the
//! pass's gate and settled status ([`decide`]). The agent gathers the inputs and performs the
//! results; Cargo keeps this crate from reaching up to it.
//!
//! ```text
//! capstan-templates ◀── capstan-layout ◀── capstan-plan ◀── capstan (agent: I/O, CLI, daemon)
//! ```
//!
//! For each object one [`Action`]: create, update, unchanged, prune or skip, with a unified diff
//! of what the server would persist (its dry-run answer) against what is live, both normalised
//! (server-owned metadata and status stripped, Secret values masked: [`diff_between`] says which
//! changed, nothing else about them). The decisions are pure
//! functions in [`planner`] (desired objects × live facts × previous inventory → plan and next
//! inventory), tested without an API server; `reconcile` gathers their inputs, asks the server
//! where only a comparison can tell, acts on the result, and `capstan plan` prints it.

pub mod addons;
pub mod back_out;
pub mod chain;
pub mod compare;
pub mod decide;
pub mod deletion;
pub mod fights;
pub mod health;
pub mod holds;
pub mod impact;
pub mod live;
pub mod moving;
pub mod order;
pub mod pivot;
pub mod planner;
pub mod report;
pub mod spare;
pub mod stages;
pub mod status;
pub mod waves;

use std::fmt;

use capstan_layout::Rendered;
pub use capstan_templates::identity::{HASH_ANNOTATION, content_hash, key};
use capstan_templates::identity::{group, subject};
use serde::Serialize;
use serde_json::{Value, json};

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

/// What a Secret value shows in a diff, plan or PR comment: the key stays, the value goes, and
/// with it its length and any hash of it (either would let a reader confirm a guessed
/// low-entropy value offline).
pub const MASKED: &str = "<masked>";

/// What the new side of a diff shows for a Secret value that differs from the old side's. That
/// it changed is all a diff says about a Secret value.
pub const MASKED_CHANGED: &str = "<masked: changed>";

/// The fields of a Secret that hold its values.
const SECRET_FIELDS: [&str; 2] = ["data", "stringData"];

/// Strips what the server owns (status, bookkeeping metadata) and masks Secret values as
/// [`MASKED`].
pub fn normalize(obj: &Value) -> Value {
    let mut v = strip(obj);
    mask_secret(&mut v, None);
    v
}

/// Strips what the server owns: status and bookkeeping metadata. Secret values stay, to be
/// compared.
fn strip(obj: &Value) -> Value {
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
    }
    v
}

fn is_secret(v: &Value) -> bool {
    v.get("kind").and_then(Value::as_str) == Some("Secret")
        && v.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

/// Replaces every value of a Secret's `data` and `stringData` with [`MASKED`], or with
/// [`MASKED_CHANGED`] where `before` (the old side of a diff, unmasked) holds another value under
/// the same field and key. Values are only compared, never printed or summarised.
fn mask_secret(obj: &mut Value, before: Option<&Value>) {
    if !is_secret(obj) {
        return;
    }
    let before = before.filter(|b| is_secret(b));
    for field in SECRET_FIELDS {
        let old = before.and_then(|b| b.get(field)).and_then(Value::as_object);
        if let Some(Value::Object(values)) = obj.get_mut(field) {
            for (key, value) in values.iter_mut() {
                let changed = old.and_then(|o| o.get(key)).is_some_and(|was| was != value);
                *value = json!(if changed { MASKED_CHANGED } else { MASKED });
            }
        }
    }
}

/// A unified diff of two objects, normalised, as YAML.
pub fn diff(live: Option<&Value>, desired: &Value, subject: &str) -> String {
    diff_between(live, Some(desired), subject, ("live", "desired"))
}

/// A unified diff of two objects (either may be absent), normalised, as YAML, with `sides`
/// naming the two (`("base", "head")`). Secret values are masked: [`MASKED`] on the old side
/// and where unchanged, [`MASKED_CHANGED`] on the new side where the value differs, so a
/// changed value is a changed line and an unchanged one is not.
pub fn diff_between(
    old: Option<&Value>,
    new: Option<&Value>,
    subject: &str,
    sides: (&str, &str),
) -> String {
    let old = old.map(strip);
    let text = |v: Option<Value>, before: Option<&Value>| {
        v.map(|mut v| {
            mask_secret(&mut v, before);
            capstan_templates::yaml::to_string(&v)
        })
        .unwrap_or_default()
    };
    let new = text(new.map(strip), old.as_ref());
    let old = text(old, None);
    similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(3)
        .header(
            &format!("{}/{subject}", sides.0),
            &format!("{}/{subject}", sides.1),
        )
        .to_string()
}

/// Whether two objects are the same once what the server owns is stripped (Secret values
/// compared as they are).
pub fn same(live: &Value, desired: &Value) -> bool {
    strip(live) == strip(desired)
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
        assert_eq!(n["data"]["k"], MASKED);
        let created = diff(None, &live, "Secret/s");
        assert!(!created.contains("c2VjcmV0"), "{created}");
        assert!(created.contains("+  k: <masked>"), "{created}");
    }

    fn secret(data: &[(&str, &str)], string_data: &[(&str, &str)]) -> Value {
        let map = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| ((*k).to_string(), json!(v)))
                .collect::<serde_json::Map<_, _>>()
        };
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns"},
               "data": map(data), "stringData": map(string_data)})
    }

    #[test]
    fn masked_secret_values_reveal_that_they_changed_and_nothing_else() {
        let live = secret(
            &[("password", "aHVudGVyMg=="), ("user", "YWRtaW4=")],
            &[("token", "abc123")],
        );
        // The same change to values of the same length and of other lengths: the same diff.
        let same_length = secret(
            &[("password", "aHVudGVyMw=="), ("user", "YWRtaW4=")],
            &[("token", "abc124")],
        );
        let other_length = secret(
            &[
                ("password", "Y29ycmVjdCBob3JzZSBiYXR0ZXJ5"),
                ("user", "YWRtaW4="),
            ],
            &[("token", "x")],
        );
        let d1 = diff(Some(&live), &same_length, "Secret/ns/s");
        let d2 = diff(Some(&live), &other_length, "Secret/ns/s");
        assert_eq!(d1, d2, "the values' lengths show through");
        assert!(!same(&live, &same_length) && !same(&live, &other_length));
        for changed in ["password", "token"] {
            assert!(d1.contains(&format!("-  {changed}: <masked>")), "{d1}");
            assert!(
                d1.contains(&format!("+  {changed}: \"<masked: changed>\"")),
                "{d1}"
            );
        }
        assert!(
            d1.lines().any(|l| l == "   user: <masked>"),
            "an unchanged value is a context line, masked the same on both sides: {d1}"
        );
        let masked: Vec<&str> = d1
            .lines()
            .filter(|l| l.starts_with(['-', '+']) && !l.starts_with("---") && !l.starts_with("+++"))
            .map(|l| l[1..].trim())
            .collect();
        assert_eq!(
            masked,
            [
                "password: <masked>",
                "password: \"<masked: changed>\"",
                "token: <masked>",
                "token: \"<masked: changed>\"",
            ],
            "nothing but keys and masks: {d1}"
        );

        // Unchanged values: no diff at all; a key added or removed shows only the key.
        assert!(same(&live, &live.clone()));
        let added = secret(
            &[
                ("password", "aHVudGVyMg=="),
                ("user", "YWRtaW4="),
                ("new", "eA=="),
            ],
            &[("token", "abc123")],
        );
        let d = diff(Some(&live), &added, "Secret/ns/s");
        assert!(d.contains("+  new: <masked>") && !d.contains("eA=="), "{d}");
        assert_eq!(d.lines().filter(|l| l.starts_with("+ ")).count(), 1, "{d}");
    }
}
