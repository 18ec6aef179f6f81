//! JSON values kept as compressed text.
//!
//! A parsed `serde_json::Value` costs about ten times its JSON text in heap (a map node, a
//! `String` key and a boxed value per field). What the agent keeps for as long as it runs — each
//! validated cluster's EKS Anywhere objects, every rendered object — is therefore kept as text
//! and parsed back only when it is used. The text is canonical (serde_json's maps are sorted), so
//! equal values have equal text.
//!
//! Even as text, the rendered objects were the largest part of the agent's heap (13.9 of 38.4 MB
//! at 1,000 clusters). The objects of one cluster are nearly those of the next: the same kinds,
//! keys and most values, rendered by the same templates. So each text is compressed with zstd
//! against a fixed dictionary, `json_text.dict`: the canonical text of every object the example
//! fleet renders, one per line, kept in step with the templates by the golden test
//! (`CAPSTAN_UPDATE_GOLDEN=1` rewrites it with the golden files). An object is then stored as
//! little more than what sets it apart from its counterpart in the dictionary. The dictionary is
//! part of the binary, and compression is deterministic, so equal texts still have equal bytes
//! and `Eq` compares the compressed form.

use std::cell::RefCell;
use std::fmt;
use std::sync::LazyLock;

use serde_json::Value;
use zstd::bulk::{Compressor, Decompressor};
use zstd::dict::{DecoderDictionary, EncoderDictionary};
use zstd::zstd_safe::CParameter;

/// The example fleet's rendered objects, the shared history every text is compressed against.
pub const DICTIONARY: &[u8] = include_bytes!("json_text.dict");

/// zstd's default level. On the golden objects (two clusters' as the dictionary, the other two
/// compressed, measured once with Python's zstandard) level 9 held them in 11 % fewer bytes for
/// 1.6× the time; the dictionary matters far more than the level.
const LEVEL: i32 = 3;

static ENCODER: LazyLock<EncoderDictionary<'static>> =
    LazyLock::new(|| EncoderDictionary::copy(DICTIONARY, LEVEL));
static DECODER: LazyLock<DecoderDictionary<'static>> =
    LazyLock::new(|| DecoderDictionary::copy(DICTIONARY));

thread_local! {
    static COMPRESSOR: RefCell<Compressor<'static>> = RefCell::new({
        let mut c = Compressor::with_prepared_dictionary(&ENCODER).expect("zstd context");
        // The length is kept beside the bytes, the dictionary is implied and the text was just
        // serialised: the frame needs none of these.
        for p in [
            CParameter::ContentSizeFlag(false),
            CParameter::ChecksumFlag(false),
            CParameter::DictIdFlag(false),
        ] {
            c.set_parameter(p).expect("zstd parameter");
        }
        c
    });
    static DECOMPRESSOR: RefCell<Decompressor<'static>> =
        RefCell::new(Decompressor::with_prepared_dictionary(&DECODER).expect("zstd context"));
}

/// A JSON value held as its canonical text, compressed.
#[derive(Clone, PartialEq, Eq)]
pub struct JsonText {
    /// The text's length in bytes.
    len: u32,
    /// The text, compressed against [`DICTIONARY`].
    packed: Box<[u8]>,
}

impl JsonText {
    /// Captures a value.
    pub fn new(value: &Value) -> JsonText {
        JsonText::capture(value).0
    }

    /// Captures a value and returns its canonical text too, for callers that hash it.
    pub fn capture(value: &Value) -> (JsonText, String) {
        let text = serde_json::to_string(value).expect("values serialise");
        let len = u32::try_from(text.len()).expect("an object's text is under 4 GiB");
        let packed = COMPRESSOR
            .with_borrow_mut(|c| c.compress(text.as_bytes()))
            .expect("zstd compresses any input")
            .into_boxed_slice();
        (JsonText { len, packed }, text)
    }

    /// The value, parsed back.
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.bytes()).expect("the text was serialised from a value")
    }

    /// The canonical text.
    pub fn text(&self) -> String {
        String::from_utf8(self.bytes()).expect("the text was serialised from a value")
    }

    /// The bytes this value holds in heap.
    pub fn heap_size(&self) -> usize {
        self.packed.len()
    }

    fn bytes(&self) -> Vec<u8> {
        DECOMPRESSOR
            .with_borrow_mut(|d| d.decompress(&self.packed, self.len as usize))
            .expect("the bytes were compressed here, against the same dictionary")
    }
}

impl fmt::Debug for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_value_comes_back_as_it_went_in_and_equal_values_have_equal_text() {
        let v = json!({"kind": "Cluster", "metadata": {"name": "a", "labels": {"z": "1", "a": "2"}}, "spec": [1, 2.5, null, true]});
        let (t, text) = JsonText::capture(&v);
        assert_eq!(t.value(), v);
        assert_eq!(t.text(), text);
        assert_eq!(text, serde_json::to_string(&v).unwrap());
        let reordered = json!({"spec": [1, 2.5, null, true], "metadata": {"labels": {"a": "2", "z": "1"}, "name": "a"}, "kind": "Cluster"});
        assert_eq!(JsonText::new(&reordered), t);
        assert_ne!(JsonText::new(&json!({"kind": "Cluster"})), t);
        assert_eq!(format!("{t:?}"), text);
    }

    #[test]
    fn empty_strange_and_large_values_come_back() {
        let big: String = (0..200_000)
            .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
            .collect();
        for v in [
            json!(null),
            json!(""),
            json!({}),
            json!("ünïcødé \"quoted\" \\ \n\t 🦀"),
            json!({"data": big}),
        ] {
            assert_eq!(JsonText::new(&v).value(), v);
        }
    }

    #[test]
    fn values_are_captured_the_same_on_every_thread() {
        let v = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "w0001", "namespace": "eksa-system"}});
        let here = JsonText::new(&v);
        let there = std::thread::spawn({
            let v = v.clone();
            move || JsonText::new(&v)
        })
        .join()
        .unwrap();
        assert_eq!(here, there);
        assert_eq!(std::thread::spawn(move || there.value()).join().unwrap(), v);
    }

    #[test]
    fn an_object_like_the_example_fleets_is_held_in_a_fraction_of_its_text() {
        // Every line of the dictionary is one rendered object; the same object with another
        // cluster's name is what a fleet of similar clusters holds.
        let dictionary = std::str::from_utf8(DICTIONARY).unwrap();
        let lines: Vec<&str> = dictionary.lines().collect();
        assert!(
            lines.len() > 20,
            "the dictionary holds the example fleet's objects"
        );
        let (mut text, mut held) = (0, 0);
        for line in lines {
            let v: Value = serde_json::from_str(line).unwrap();
            assert_eq!(serde_json::to_string(&v).unwrap(), line, "canonical text");
            let renamed: Value =
                serde_json::from_str(&line.replace("\"dev", "\"w0042").replace("dev-", "w0042-"))
                    .unwrap();
            let t = JsonText::new(&renamed);
            assert_eq!(t.value(), renamed);
            text += t.len as usize;
            held += t.heap_size();
        }
        assert!(
            held * 8 < text,
            "{held} bytes held for {text} bytes of text"
        );
    }
}
