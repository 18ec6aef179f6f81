//! Rendered objects, held compactly and shared.
//!
//! A rendered object as a parsed `serde_json::Value` costs about ten times its JSON text in heap:
//! 1,000 clusters render about 12,000 objects, 8 MiB of JSON but 85 MiB of values. The agent keeps
//! a fleet and its render cache in memory for as long as it runs, so objects are kept as their
//! canonical JSON text ([`JsonText`], compressed against the example fleet's objects: about a
//! tenth of the text) with their identity and content hash beside it, and parsed back only when
//! one is applied or printed. A cluster's objects are one
//! shared slice: the render cache and every fleet loaded from it point at the same memory.

use std::fmt;
use std::sync::Arc;

use capstan_templates::{JsonText, identity};
use serde_json::Value;

/// One rendered object.
#[derive(Clone, PartialEq, Eq)]
pub struct Rendered {
    json: JsonText,
    api_version: Box<str>,
    kind: Box<str>,
    namespace: Box<str>,
    name: Box<str>,
    hash: Box<str>,
}

impl Rendered {
    /// Captures an object.
    pub fn new(obj: &Value) -> Rendered {
        let (json, text) = JsonText::capture(obj);
        let s = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("").into();
        let hash = identity::hash_json(&text).into();
        Rendered {
            api_version: s("/apiVersion"),
            kind: s("/kind"),
            namespace: s("/metadata/namespace"),
            name: s("/metadata/name"),
            hash,
            json,
        }
    }

    /// Captures an object whose content hash is given: a Secret decrypted from SOPS, whose hash
    /// is keyed ([`crate::sops::Opened::hash`]) so that it says nothing of the values.
    pub fn with_hash(obj: &Value, hash: String) -> Rendered {
        let mut r = Rendered::new(obj);
        r.hash = hash.into();
        r
    }

    /// The object, parsed.
    pub fn value(&self) -> Value {
        self.json.value()
    }

    /// Its canonical JSON text.
    pub fn json(&self) -> String {
        self.json.text()
    }

    /// The heap its text takes, compressed.
    pub fn text_heap_size(&self) -> usize {
        self.json.heap_size()
    }

    /// `apiVersion`.
    pub fn api_version(&self) -> &str {
        &self.api_version
    }

    /// `kind`.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// `metadata.namespace` ("" when cluster-scoped).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The first 16 hex digits of the sha256 of its JSON text: equal iff the objects are equal.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// `Kind/namespace/name`, for messages.
    pub fn subject(&self) -> String {
        identity::subject(&self.kind, &self.namespace, &self.name)
    }
}

impl fmt::Debug for Rendered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} {}", self.api_version, self.subject(), self.hash)
    }
}

/// A cluster's rendered objects in apply order; cloning shares them.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Objects(Arc<[Rendered]>);

impl Objects {
    /// Captures objects.
    pub fn from_values(values: &[Value]) -> Objects {
        Objects(values.iter().map(Rendered::new).collect())
    }

    /// The objects, parsed.
    pub fn values(&self) -> Vec<Value> {
        self.0.iter().map(Rendered::value).collect()
    }
}

impl std::ops::Deref for Objects {
    type Target = [Rendered];
    fn deref(&self) -> &[Rendered] {
        &self.0
    }
}

impl<'a> IntoIterator for &'a Objects {
    type Item = &'a Rendered;
    type IntoIter = std::slice::Iter<'a, Rendered>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl FromIterator<Rendered> for Objects {
    fn from_iter<I: IntoIterator<Item = Rendered>>(iter: I) -> Objects {
        Objects(iter.into_iter().collect())
    }
}

impl fmt::Debug for Objects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_and_hashes_by_content() {
        let a = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "ns"}, "data": {"b": "2", "a": "1"}});
        let r = Rendered::new(&a);
        assert_eq!(r.value(), a);
        assert_eq!(
            (r.api_version(), r.kind(), r.namespace(), r.name()),
            ("v1", "ConfigMap", "ns", "x")
        );
        assert_eq!(r.subject(), "ConfigMap/ns/x");
        // Key order of the input does not matter; content does.
        let same = json!({"data": {"a": "1", "b": "2"}, "metadata": {"namespace": "ns", "name": "x"}, "kind": "ConfigMap", "apiVersion": "v1"});
        assert_eq!(Rendered::new(&same).hash(), r.hash());
        let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "ns"}, "data": {"a": "1", "b": "3"}});
        assert_ne!(Rendered::new(&other).hash(), r.hash());
        let objs = Objects::from_values(&[a.clone(), other]);
        assert!(
            std::ptr::eq(objs.as_ptr(), objs.clone().as_ptr()),
            "clones share the objects"
        );
        assert_eq!(objs.values()[0], a);
    }
}
