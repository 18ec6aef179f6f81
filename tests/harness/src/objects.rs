//! Kubernetes objects as tests read them: the API resource of a kind, an object without what
//! the server assigns, a field as text.

use kube::discovery::ApiResource;
use serde_json::Value;

/// The API resource of a kind (`group` "" for the core group), for a dynamic `Api`.
pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// A backed-up object as restored: what the server keeps of it, without what it assigns (uid,
/// resourceVersion, creationTimestamp, generation, managedFields, the owners' uids).
pub fn comparable(o: &Value) -> Value {
    let mut v = o.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
        ] {
            meta.remove(k);
        }
        for r in meta
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            r.as_object_mut().unwrap().remove("uid");
        }
    }
    v
}

/// The text at JSON pointer `p` of `v`: a string as it is, another value as JSON, `-` if absent.
pub fn text_at(v: &Value, p: &str) -> String {
    match v.pointer(p) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "-".into(),
    }
}

/// The user name the API server gives ServiceAccount `name` of namespace `ns`.
pub fn service_account_user(ns: &str, name: &str) -> String {
    format!("system:serviceaccount:{ns}:{name}")
}
