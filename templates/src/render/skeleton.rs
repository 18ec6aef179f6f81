//! Skeletons: what a slotted text reads to, kept per text, so that the next cluster whose
//! template renders the same text gets its objects by filling its values into the skeleton
//! instead of reading the text again.
//!
//! Why: reading rendered text back was the largest part of a render after template evaluation
//! (callgrind on `render_fleet`: the block-YAML reader 27 % of the instructions). Yet a fleet
//! renders each template to a handful of texts: with value slots (see `slots`) every value
//! quoted with `tojson` is a numbered placeholder, so clusters of the same shape (provider, etcd
//! topology, worker groups, replica counts written as plain numbers) render the same text and
//! differ only in their slots' values. The text is the key, compared in full, so a skeleton is
//! only ever used for exactly the text it was read from; what the fill gives is what the reader
//! would have given for that text and those slots (a test compares both for every template of
//! several fleets' shapes).
//!
//! The cache is per thread and bounded ([`LIMIT`] texts, then emptied): a fleet with more
//! shapes than that reads texts as before.

use std::cell::RefCell;
use std::collections::HashMap;

use minijinja::Value as Jinja;
use serde_json::{Map, Value};

use super::slots::{END, SLOT_LEAD, Slotted, index, to_json};
use crate::block_yaml::{self, SLOT};

/// Texts kept per thread before the cache is emptied (a few per template and cluster shape).
pub(super) const LIMIT: usize = 512;

/// A document with its slots left open.
enum Node {
    /// A part without slots, copied as it is.
    Fixed(Value),
    /// The value of slot `n`.
    Slot(usize),
    /// A sequence with a slot somewhere inside.
    Seq(Vec<Node>),
    /// A mapping with a slot somewhere inside: its entries in key order.
    Map(Vec<(String, Node)>),
    /// A mapping with a slot for a key.
    SlotKeys(Vec<(Key, Node)>),
}

/// A mapping key: a text, or slot `n`.
enum Key {
    Fixed(String),
    Slot(usize),
}

/// The documents of one slotted text.
pub(super) struct Skeleton {
    docs: Vec<Node>,
}

thread_local! {
    static SKELETONS: RefCell<HashMap<Box<str>, Skeleton, foldhash::fast::FixedState>> =
        RefCell::new(HashMap::default());
}

/// The documents of `text` with its placeholders filled from `slots` (each taken out of its
/// slot), and how many were filled; `None` when the text cannot be read with slots. A text seen
/// before on this thread is not read again.
pub(super) fn fill(text: String, slots: &mut [Option<Jinja>]) -> Option<(Vec<Value>, usize)> {
    SKELETONS.with_borrow_mut(|cache| {
        if let Some(s) = cache.get(text.as_str()) {
            return s.fill(slots);
        }
        let s = Skeleton::read(&text)?;
        let out = s.fill(slots);
        if cache.len() >= LIMIT {
            cache.clear();
        }
        cache.insert(text.into_boxed_str(), s);
        out
    })
}

/// Reading a rendered text with slots goes through the skeletons: a text read before is filled,
/// not read again.
impl Slotted {
    /// The documents of the rendered text with every placeholder replaced by its value, or
    /// `None` when the text must be rendered and read as text instead (see the module doc).
    pub(super) fn read(mut self) -> Option<Vec<Value>> {
        let open = self.slots.iter().filter(|s| s.is_some()).count();
        // Every placeholder in the text must be one the reader replaces: none may be left in a
        // string. Counted by the first byte of the UTF-8 form of SLOT and END (two per
        // placeholder), which also starts other characters (U+E000..U+EFFF): text holding one of
        // those is read as text. (memchr's count is one vectorised pass: searching for the
        // character cost 2 % of a render, counting bytes one by one 3 %.)
        debug_assert_eq!(SLOT.encode_utf8(&mut [0; 4]).as_bytes()[0], SLOT_LEAD);
        debug_assert_eq!(END.encode_utf8(&mut [0; 4]).as_bytes()[0], SLOT_LEAD);
        if memchr::memchr_iter(SLOT_LEAD, self.text.as_bytes()).count() != 2 * open {
            return None;
        }
        let (docs, used) = fill(self.text, &mut self.slots)?;
        (used == open).then_some(docs)
    }
}

/// How many texts this thread keeps skeletons of (tests).
#[cfg(test)]
pub(super) fn cached() -> usize {
    SKELETONS.with_borrow(HashMap::len)
}

impl Skeleton {
    /// Reads `text` with its placeholders kept; `None` when the reader does not take it, or
    /// when a string in it looks like a placeholder without being one (an escaped private-use
    /// character in a quoted scalar), which the fill could not tell from a slot.
    fn read(text: &str) -> Option<Skeleton> {
        let mut placeholders = 0;
        let docs = block_yaml::parse_with(text, &mut |token| {
            index(token)?;
            placeholders += 1;
            Some(Value::String(token.to_string()))
        })?;
        // Every placeholder read is a string of the documents; any other string that looks
        // like one makes the count differ.
        let mut seen = 0;
        let docs = docs
            .into_iter()
            .map(|d| node(d, &mut seen))
            .collect::<Option<Vec<_>>>()?;
        (seen == placeholders).then_some(Skeleton { docs })
    }

    fn fill(&self, slots: &mut [Option<Jinja>]) -> Option<(Vec<Value>, usize)> {
        let mut used = 0;
        let docs = self
            .docs
            .iter()
            .map(|n| fill_node(n, slots, &mut used))
            .collect::<Option<Vec<_>>>()?;
        Some((docs, used))
    }
}

/// The slot a string names, when it starts like a placeholder (`Some(None)` when it does but is
/// not a whole one).
fn slot_of(s: &str) -> Option<Option<usize>> {
    s.starts_with(SLOT).then(|| index(s))
}

/// `v` as a node, counting the placeholders in it; `None` for a string that starts like a
/// placeholder but is not one.
fn node(v: Value, seen: &mut usize) -> Option<Node> {
    let before = *seen;
    let n = match v {
        Value::String(s) => match slot_of(&s) {
            Some(n) => {
                *seen += 1;
                Node::Slot(n?)
            }
            None => Node::Fixed(Value::String(s)),
        },
        Value::Array(items) => Node::Seq(
            items
                .into_iter()
                .map(|i| node(i, seen))
                .collect::<Option<_>>()?,
        ),
        Value::Object(m) => {
            let mut entries = Vec::with_capacity(m.len());
            for (k, v) in m {
                let k = match slot_of(&k) {
                    Some(n) => {
                        *seen += 1;
                        Key::Slot(n?)
                    }
                    None => Key::Fixed(k),
                };
                entries.push((k, node(v, seen)?));
            }
            if entries.iter().all(|(k, _)| matches!(k, Key::Fixed(_))) {
                Node::Map(
                    entries
                        .into_iter()
                        .map(|(k, v)| match k {
                            Key::Fixed(k) => (k, v),
                            Key::Slot(_) => unreachable!("checked above"),
                        })
                        .collect(),
                )
            } else {
                Node::SlotKeys(entries)
            }
        }
        v => Node::Fixed(v),
    };
    // A part without slots is kept as the value it was (copied in one piece by a fill).
    Some(if *seen == before {
        Node::Fixed(unnode(n))
    } else {
        n
    })
}

/// A node without slots back as its value.
fn unnode(n: Node) -> Value {
    match n {
        Node::Fixed(v) => v,
        Node::Seq(items) => Value::Array(items.into_iter().map(unnode).collect()),
        Node::Map(entries) => {
            Value::Object(entries.into_iter().map(|(k, v)| (k, unnode(v))).collect())
        }
        Node::SlotKeys(_) => unreachable!("a node without slots"),
        Node::Slot(_) => unreachable!("a node without slots"),
    }
}

/// Slot `n`'s value as JSON, taken out of the slot (`None` when it is not open).
fn take(slots: &mut [Option<Jinja>], n: usize, used: &mut usize) -> Option<Value> {
    let v = slots.get_mut(n)?.take()?;
    *used += 1;
    to_json(&v)
}

fn fill_node(n: &Node, slots: &mut [Option<Jinja>], used: &mut usize) -> Option<Value> {
    Some(match n {
        Node::Fixed(v) => v.clone(),
        Node::Slot(n) => take(slots, *n, used)?,
        Node::Seq(items) => Value::Array(
            items
                .iter()
                .map(|i| fill_node(i, slots, used))
                .collect::<Option<_>>()?,
        ),
        // Built from its entries in key order (a bulk build, instead of a search per insert).
        Node::Map(entries) => Value::Object(
            entries
                .iter()
                .map(|(k, v)| Some((k.clone(), fill_node(v, slots, used)?)))
                .collect::<Option<Map<_, _>>>()?,
        ),
        Node::SlotKeys(entries) => {
            let mut m = Map::new();
            for (k, v) in entries {
                let k = match k {
                    Key::Fixed(k) => k.clone(),
                    Key::Slot(n) => match take(slots, *n, used)? {
                        Value::String(k) => k,
                        _ => return None,
                    },
                };
                // A slot key equal to another key: the reader refuses a repeated key.
                if m.insert(k, fill_node(v, slots, used)?).is_some() {
                    return None;
                }
            }
            Value::Object(m)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::slots::{self, Slotted};
    use super::*;

    /// What `src` gives for `ctx` with slots (through the skeleton cache) and as text.
    fn both(src: &'static str, ctx: Jinja) -> (Option<Vec<Value>>, Vec<Value>) {
        let (slotted, text) = both_or_err(src, ctx);
        (slotted, text.unwrap())
    }

    fn both_or_err(
        src: &'static str,
        ctx: Jinja,
    ) -> (
        Option<Vec<Value>>,
        Result<Vec<Value>, crate::yaml::YamlError>,
    ) {
        let mut env = minijinja::Environment::new();
        env.add_filter("tojson", slots::tojson);
        env.add_template("t", src).unwrap();
        let tmpl = env.get_template("t").unwrap();
        let slotted = slots::render(&tmpl, &ctx).and_then(Slotted::read);
        let text = tmpl.render(&ctx).unwrap();
        (slotted, crate::yaml::parse_values(&text))
    }

    #[test]
    fn a_text_seen_before_is_filled_with_the_new_values() {
        let src = "a: {{ s | tojson }}\nb:\n  {{ k | tojson }}: {{ n }}\n  fixed: [1, 2]\n  list:\n  - {{ m | tojson }}\n  - x\n";
        let before = cached();
        let first = both(
            src,
            minijinja::context! { s => "one", k => "key1", n => 3, m => minijinja::context! { z => 1 } },
        );
        assert_eq!(first.0.as_ref(), Some(&first.1));
        assert_eq!(cached(), before + 1);
        // The same shape with other values: the skeleton read for the first text is filled.
        let second = both(
            src,
            minijinja::context! { s => vec![1, 2], k => "key2", n => 3, m => "flat" },
        );
        assert_eq!(second.0.as_ref(), Some(&second.1));
        assert_eq!(cached(), before + 1);
        assert_eq!(second.1[0]["b"]["key2"], 3);
        assert_ne!(first.1, second.1);
        // Another plain value is another text.
        let third = both(
            src,
            minijinja::context! { s => "one", k => "key1", n => 4, m => () },
        );
        assert_eq!(third.0.as_ref(), Some(&third.1));
        assert_eq!(cached(), before + 2);
    }

    #[test]
    fn what_a_fill_cannot_tell_from_the_text_is_read_as_text() {
        // A quoted scalar whose escapes spell a placeholder: a string, not a slot.
        let forged = "\\ue0000\\ue001";
        for _ in 0..2 {
            let (slotted, text) = both(
                "a: {{ s | tojson }}\nb: \"{{ forged }}\"\n",
                minijinja::context! { s => "x", forged => forged },
            );
            assert_eq!(slotted, None);
            assert_eq!(text[0]["b"], "\u{E000}0\u{E001}");
        }
        // A slot key equal to a written key, the second time from the skeleton.
        for k in ["other", "fixed", "other"] {
            let (slotted, text) = both_or_err(
                "{{ k | tojson }}: 1\nfixed: 2\n",
                minijinja::context! { k => k },
            );
            // The text's parser refuses the repeated key too.
            assert_eq!(slotted.is_some(), text.is_ok(), "{k}");
            assert_eq!(slotted.is_some(), k != "fixed", "{k}");
            if let Some(docs) = slotted {
                assert_eq!(docs, text.unwrap());
            }
        }
        // A key slot whose value is not a string.
        let (slotted, _) = both("{{ k | tojson }}: 1\n", minijinja::context! { k => 5 });
        assert_eq!(slotted, None);
    }
}
