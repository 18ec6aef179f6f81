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
/// Label on every rendered object: which fleet cluster it belongs to.
pub const CLUSTER_LABEL: &str = "capstan.dev/cluster";
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
