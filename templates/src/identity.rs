//! What makes an object capstan's, and how it is named: defined here once for the renderer,
//! the layout and the agent.
//!
//! - Ownership: every rendered object carries [`MANAGED_BY_LABEL`]` = `[`MANAGED_BY`] and
//!   [`CLUSTER_LABEL`]` = <fleet cluster>`. The agent lists and watches by the first
//!   ([`SELECTOR`]) and prunes only objects that carry both and are in its inventory: objects
//!   Cluster API creates (Machines, MachineSets, generated configs) carry neither, whatever their
//!   owner references say.
//! - Content: [`content_hash`] of an object's canonical JSON (serde_json sorts maps), recorded in
//!   [`HASH_ANNOTATION`] when applied; equal hashes mean equal desired content.
//! - Identity across API versions: [`key`] (`group/Kind/namespace/name`); in messages,
//!   [`subject`] (`Kind/namespace/name`).

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Label on every rendered object: who manages it.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The value of [`MANAGED_BY_LABEL`] on capstan's objects.
pub const MANAGED_BY: &str = "capstan";
/// Label selector of everything capstan applied.
pub const SELECTOR: &str = "app.kubernetes.io/managed-by=capstan";
/// Label on the namespaces the agent creates for a fleet's objects (never pruned, so not
/// [`MANAGED_BY_LABEL`]).
pub const CREATED_BY_LABEL: &str = "app.kubernetes.io/created-by";
/// Label on every rendered object: which fleet cluster it belongs to.
pub const CLUSTER_LABEL: &str = "capstan.dev/cluster";
/// Annotation an admin sets on a live object to let a fleet cluster take it over (its value: the
/// cluster's name): capstan never adopts an object it did not create by accident.
pub const ADOPT_ANNOTATION: &str = "capstan.dev/adopt";
/// Annotation on a workload cluster's Cluster API Cluster that capstan paused for its
/// management cluster's self-upgrade (its value: the management cluster). What capstan paused
/// is recorded on the paused object itself, so any pass — after a crash, on another replica,
/// with a status that lost its `backup` — unpauses exactly that and never an operator's own
/// pause.
pub const PAUSED_FOR_ANNOTATION: &str = "capstan.dev/paused-for";
/// Annotation on a Cluster API Cluster that `capstan move` paused (its value: the move's id).
/// Like [`PAUSED_FOR_ANNOTATION`], the pause is recorded on the paused object itself, in the
/// same write: a move resumed after a crash unpauses exactly what it paused, and a cluster an
/// operator had paused stays paused.
pub const PAUSED_FOR_MOVE_ANNOTATION: &str = "capstan.dev/paused-for-move";
/// Annotation on every object `capstan move` created in the target: the UID of the object it
/// is a copy of. A resumed move knows its own copies by it (and refuses any other object of the
/// same name), and the source's owner references are rewritten through it.
pub const MOVED_FROM_ANNOTATION: &str = "capstan.dev/moved-from";
/// Annotation recording the content hash of what capstan applied.
pub const HASH_ANNOTATION: &str = "capstan.dev/content-hash";

/// `group/Kind/namespace/name`: the identity of an object across API versions.
pub fn key(group: &str, kind: &str, namespace: &str, name: &str) -> String {
    format!("{group}/{kind}/{namespace}/{name}")
}

/// `Kind/namespace/name` (`Kind/name` when cluster-scoped), for messages.
pub fn subject(kind: &str, namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("{kind}/{name}")
    } else {
        format!("{kind}/{namespace}/{name}")
    }
}

/// [`subject`] of an object.
pub fn subject_of(obj: &Value) -> String {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("");
    subject(s("/kind"), s("/metadata/namespace"), s("/metadata/name"))
}

/// The API group of an `apiVersion` ("" for the core group).
pub fn group(api_version: &str) -> &str {
    api_version.split_once('/').map(|(g, _)| g).unwrap_or("")
}

/// The content hash of an object's canonical JSON text: the first 16 hex digits of its sha256.
pub fn hash_json(json: &str) -> String {
    hex::encode(Sha256::digest(json.as_bytes()))[..16].to_string()
}

/// The field manager of everything capstan applies (server-side apply).
pub const FIELD_MANAGER: &str = "capstan";

/// A short hash of the fields [`FIELD_MANAGER`] owns by server-side apply: its `Apply` entry of
/// the main resource in `metadata.managedFields` (`None`: it owns nothing there). Anyone who
/// changes, takes over or removes one of those fields (a label edit, a removed annotation, a
/// ConfigMap key edited by hand) changes this hash, whether or not the object has a generation.
pub fn owned_fields(managed_fields: &Value) -> Option<String> {
    managed_fields.as_array()?.iter().find_map(|e| {
        let s = |k: &str| e.get(k).and_then(Value::as_str);
        (s("manager") == Some(FIELD_MANAGER)
            && s("operation") == Some("Apply")
            && s("subresource").is_none_or(str::is_empty))
        .then(|| {
            hash_json(
                &serde_json::to_string(e.get("fieldsV1").unwrap_or(&Value::Null))
                    .expect("values serialise"),
            )
        })
    })
}

/// The content hash of an object, ignoring the [`HASH_ANNOTATION`] that records it (and an
/// annotations map that only held it), so an applied object hashes like the rendered one.
pub fn content_hash(obj: &Value) -> String {
    let recorded = obj
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(HASH_ANNOTATION));
    if !recorded {
        return hash_json(&serde_json::to_string(obj).expect("values serialise"));
    }
    let mut v = obj.clone();
    let meta = v["metadata"].as_object_mut().expect("checked above");
    let ann = meta["annotations"].as_object_mut().expect("checked above");
    ann.remove(HASH_ANNOTATION);
    if ann.is_empty() {
        meta.remove("annotations");
    }
    hash_json(&serde_json::to_string(&v).expect("values serialise"))
}

/// Whether an object's labels say it is capstan's, for fleet cluster `cluster`.
pub fn owned_by(labels: Option<&serde_json::Map<String, Value>>, cluster: &str) -> bool {
    labels.is_some_and(|l| {
        l.get(MANAGED_BY_LABEL).and_then(Value::as_str) == Some(MANAGED_BY)
            && l.get(CLUSTER_LABEL).and_then(Value::as_str) == Some(cluster)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn owned_fields_are_capstans_apply_entry_of_the_main_resource() {
        let entry = |manager: &str, operation: &str, sub: Option<&str>, f: Value| {
            let mut e = json!({"manager": manager, "operation": operation, "fieldsV1": f, "time": "2026-11-24T00:00:00Z"});
            if let Some(s) = sub {
                e["subresource"] = json!(s);
            }
            e
        };
        let mine = json!({"f:metadata": {"f:labels": {"f:a": {}}}});
        let fields = json!([
            entry(
                "capi",
                "Update",
                None,
                json!({"f:metadata": {"f:finalizers": {}}})
            ),
            entry(
                FIELD_MANAGER,
                "Apply",
                Some("status"),
                json!({"f:status": {}})
            ),
            entry(FIELD_MANAGER, "Apply", None, mine.clone()),
        ]);
        let h = owned_fields(&fields).unwrap();
        assert_eq!(h, hash_json(&mine.to_string()));
        // Another manager's writes and timestamps do not matter; losing a field does.
        let mut later = fields.clone();
        later[0]["time"] = json!("2026-11-25T00:00:00Z");
        later[0]["fieldsV1"] = json!({"f:metadata": {"f:labels": {"f:b": {}}}});
        assert_eq!(owned_fields(&later).as_deref(), Some(h.as_str()));
        later[2]["fieldsV1"] = json!({"f:metadata": {"f:labels": {}}});
        assert_ne!(owned_fields(&later).as_deref(), Some(h.as_str()));
        assert_eq!(owned_fields(&json!([])), None);
        assert_eq!(owned_fields(&Value::Null), None);
    }

    #[test]
    fn the_hash_ignores_its_own_annotation() {
        let plain = json!({"kind": "K", "metadata": {"name": "a"}, "spec": {"x": 1}});
        let annotated = json!({"kind": "K", "metadata": {"name": "a", "annotations": {HASH_ANNOTATION: "h"}}, "spec": {"x": 1}});
        assert_eq!(content_hash(&plain), content_hash(&annotated));
        assert_eq!(content_hash(&plain), hash_json(&plain.to_string()));
        let other = json!({"kind": "K", "metadata": {"name": "a", "annotations": {HASH_ANNOTATION: "h", "b": "c"}}, "spec": {"x": 1}});
        assert_ne!(content_hash(&plain), content_hash(&other));
    }

    #[test]
    fn subjects_keys_and_ownership() {
        assert_eq!(subject("Namespace", "", "n"), "Namespace/n");
        assert_eq!(
            subject_of(&json!({"kind": "K", "metadata": {"name": "a", "namespace": "ns"}})),
            "K/ns/a"
        );
        assert_eq!(group("cluster.x-k8s.io/v1beta2"), "cluster.x-k8s.io");
        assert_eq!(group("v1"), "");
        assert_eq!(key("", "Secret", "ns", "s"), "/Secret/ns/s");
        let labels = json!({MANAGED_BY_LABEL: MANAGED_BY, CLUSTER_LABEL: "dev"});
        assert!(owned_by(labels.as_object(), "dev"));
        assert!(!owned_by(labels.as_object(), "prod"));
        assert!(!owned_by(None, "dev"));
        assert_eq!(SELECTOR, format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    }
}
