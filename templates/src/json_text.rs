//! JSON values kept as their text.
//!
//! A parsed `serde_json::Value` costs about ten times its JSON text in heap (a map node, a
//! `String` key and a boxed value per field). What the agent keeps for as long as it runs — each
//! validated cluster's EKS Anywhere objects, every rendered object — is therefore kept as text
//! and parsed back only when it is used. The text is canonical (serde_json's maps are sorted), so
//! equal values have equal text.

use std::fmt;

use serde_json::Value;

/// A JSON value held as its canonical text.
#[derive(Clone, PartialEq, Eq)]
pub struct JsonText(Box<str>);

impl JsonText {
    /// Captures a value.
    pub fn new(value: &Value) -> JsonText {
        JsonText(
            serde_json::to_string(value)
                .expect("values serialise")
                .into(),
        )
    }

    /// The value, parsed back.
    pub fn value(&self) -> Value {
        serde_json::from_str(&self.0).expect("the text was serialised from a value")
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_value_comes_back_as_it_went_in_and_equal_values_have_equal_text() {
        let v = json!({"kind": "Cluster", "metadata": {"name": "a", "labels": {"z": "1", "a": "2"}}, "spec": [1, 2.5, null, true]});
        let t = JsonText::new(&v);
        assert_eq!(t.value(), v);
        let reordered = json!({"spec": [1, 2.5, null, true], "metadata": {"labels": {"a": "2", "z": "1"}, "name": "a"}, "kind": "Cluster"});
        assert_eq!(JsonText::new(&reordered), t);
        assert_ne!(JsonText::new(&json!({"kind": "Cluster"})), t);
    }
}
