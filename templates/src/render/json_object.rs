//! The template context as template values that read the context's JSON where it is, instead
//! of a copy of it converted to template values.
//!
//! Why: the context (see `context`) is computed as JSON values, and converting all of it to
//! template values before each render, then the values a template quotes with `tojson` back to
//! JSON when its output is read (see `slots`), was a sixth of a render (callgrind on
//! `render_fleet`: the conversion 11 %, the way back 7 %). A template reads a small part of its
//! context, and most of what it quotes is a whole list or mapping (a machine's files, its
//! kubelet arguments) that goes into an object unchanged. So the context's JSON is moved into a
//! [`Context`]: its mappings and lists numbered in one vector, each mapping's entries in key
//! order. A mapping or list is a [`JsonNode`] (the shared context and a number), a scalar
//! becomes a template value when it is read, and a node that `tojson` quotes becomes JSON
//! again ([`JsonNode::json`]) without becoming template values at all.
//!
//! A node behaves as the converted value did: a mapping with its keys in the same (sorted)
//! order, a sequence, true when not empty; a missing key is undefined (strict undefined makes it
//! an error) and a JSON null is none. The property tests render every template with and without
//! value slots (minijinja's own `tojson` writes a node through these same lookups), and the
//! golden and EKS Anywhere oracle tests compare the objects.

use std::collections::BTreeMap;
use std::sync::Arc;

use minijinja::value::{Enumerator, Object, ObjectRepr, Value as Jinja};
use serde_json::{Map, Value};

/// A context: its mappings and lists, the whole context first.
#[derive(Debug, Clone)]
pub(super) struct Context {
    nodes: Vec<Container>,
}

#[derive(Debug, Clone)]
enum Container {
    /// Entries in key order.
    Map(Vec<(String, Item)>),
    Seq(Vec<Item>),
}

#[derive(Debug, Clone)]
enum Item {
    Scalar(Value),
    /// Another mapping or list of the context.
    Node(usize),
}

/// A mapping or list inside a context.
#[derive(Debug)]
pub(super) struct JsonNode {
    ctx: Arc<Context>,
    at: usize,
}

impl Context {
    /// The context of `map` (moved in).
    pub(super) fn new(map: Map<String, Value>) -> Context {
        let mut nodes = Vec::new();
        add(Value::Object(map), &mut nodes);
        Context { nodes }
    }

    /// Inserts `v` into the list at `path` (keys from the top) at `index` (at most its end).
    /// `false` when there is no list there.
    pub(super) fn insert(&mut self, path: &[&str], index: usize, v: Value) -> bool {
        let mut at = 0;
        for key in path {
            match self.get(at, key) {
                Some(Item::Node(n)) => at = *n,
                _ => return false,
            }
        }
        let item = add(v, &mut self.nodes);
        match &mut self.nodes[at] {
            Container::Seq(items) => {
                items.insert(index.min(items.len()), item);
                true
            }
            Container::Map(_) => false,
        }
    }

    fn get(&self, at: usize, key: &str) -> Option<&Item> {
        match &self.nodes[at] {
            Container::Map(entries) => {
                let i = entries
                    .binary_search_by(|(k, _)| k.as_str().cmp(key))
                    .ok()?;
                Some(&entries[i].1)
            }
            Container::Seq(_) => None,
        }
    }

    fn json(&self, item: &Item) -> Value {
        match item {
            Item::Scalar(v) => v.clone(),
            Item::Node(n) => match &self.nodes[*n] {
                Container::Map(entries) => Value::Object(
                    entries
                        .iter()
                        .map(|(k, v)| (k.clone(), self.json(v)))
                        .collect(),
                ),
                Container::Seq(items) => Value::Array(items.iter().map(|v| self.json(v)).collect()),
            },
        }
    }
}

/// `v` as an item, its mappings and lists added to `nodes`.
fn add(v: Value, nodes: &mut Vec<Container>) -> Item {
    match v {
        Value::Object(m) => {
            let at = nodes.len();
            nodes.push(Container::Seq(Vec::new()));
            // A JSON map iterates in key order, which lookups rely on.
            let entries = m.into_iter().map(|(k, v)| (k, add(v, nodes))).collect();
            nodes[at] = Container::Map(entries);
            Item::Node(at)
        }
        Value::Array(items) => {
            let at = nodes.len();
            nodes.push(Container::Seq(Vec::new()));
            let items = items.into_iter().map(|v| add(v, nodes)).collect();
            nodes[at] = Container::Seq(items);
            Item::Node(at)
        }
        v => Item::Scalar(v),
    }
}

/// The entries of a context, each a template value reading it in place.
pub(super) fn entries(ctx: &Arc<Context>) -> BTreeMap<String, Jinja> {
    match &ctx.nodes[0] {
        Container::Map(entries) => entries
            .iter()
            .map(|(k, v)| (k.clone(), value(ctx, v)))
            .collect(),
        Container::Seq(_) => BTreeMap::new(),
    }
}

/// An item of `ctx` as a template value.
fn value(ctx: &Arc<Context>, item: &Item) -> Jinja {
    match item {
        Item::Scalar(Value::Null) => Jinja::from(()),
        Item::Scalar(Value::Bool(b)) => Jinja::from(*b),
        Item::Scalar(Value::Number(n)) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Jinja::from(i),
            (None, Some(u)) => Jinja::from(u),
            _ => Jinja::from(n.as_f64().unwrap_or_default()),
        },
        Item::Scalar(Value::String(s)) => Jinja::from(s.as_str()),
        // `add` keeps no container as a scalar.
        Item::Scalar(_) => Jinja::from(()),
        Item::Node(at) => Jinja::from_object(JsonNode {
            ctx: ctx.clone(),
            at: *at,
        }),
    }
}

impl JsonNode {
    /// The JSON value this node stands for (what `tojson` writes for it).
    pub(super) fn json(&self) -> Value {
        self.ctx.json(&Item::Node(self.at))
    }

    fn container(&self) -> &Container {
        &self.ctx.nodes[self.at]
    }
}

impl Object for JsonNode {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        match self.container() {
            Container::Seq(_) => ObjectRepr::Seq,
            Container::Map(_) => ObjectRepr::Map,
        }
    }

    fn get_value(self: &Arc<Self>, key: &Jinja) -> Option<Jinja> {
        match self.container() {
            Container::Map(_) => self.get_value_by_str(key.as_str()?),
            Container::Seq(items) => Some(value(&self.ctx, items.get(key.as_usize()?)?)),
        }
    }

    fn get_value_by_str(self: &Arc<Self>, key: &str) -> Option<Jinja> {
        Some(value(&self.ctx, self.ctx.get(self.at, key)?))
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        match self.container() {
            Container::Seq(items) => Enumerator::Seq(items.len()),
            Container::Map(entries) => Enumerator::Values(
                entries
                    .iter()
                    .map(|(k, _)| Jinja::from(k.as_str()))
                    .collect(),
            ),
        }
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        Some(match self.container() {
            Container::Seq(items) => items.len(),
            Container::Map(entries) => entries.len(),
        })
    }
}
