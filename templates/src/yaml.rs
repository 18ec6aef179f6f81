//! YAML in and out, with positions.
//!
//! Users write cluster specs by hand, so every error has to point at a file, a line and a column.
//! Serde alone cannot do that once a document has been turned into a value, so this module parses
//! the YAML event stream itself (saphyr-parser, pure Rust, YAML 1.2) into a `serde_json::Value`
//! and, on the side, a map from each value's path (`spec.workerNodeGroupConfigurations[0].count`)
//! to where it was written. Typed deserialisation then happens on the value (see `spec`), and any
//! problem found there is located through [`Document::pos`].
//!
//! Scalars resolve with the YAML 1.2 core schema (so `yes` is a string, `1.30` is a number), which
//! is also what the Kubernetes API server uses for JSON. Duplicate keys are an error.
//!
//! The emitter writes values back as block YAML with sorted keys and quoting only where a plain
//! scalar would change meaning; the same value always gives the same bytes.

use crate::scalar::{resolve_non_string, resolve_plain};
use std::collections::HashMap;
use std::fmt::Write as _;

use saphyr_parser::{Event, Parser, ScalarStyle, Span, Tag};
use serde_json::{Map, Value};

/// A line and column, both counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub column: usize,
}

impl Pos {
    fn from_span(span: &Span) -> Pos {
        Pos {
            line: span.start.line(),
            column: span.start.col() + 1,
        }
    }
}

/// One YAML document of a file, as a JSON value plus where each of its parts was written.
#[derive(Debug, Clone)]
pub struct Document {
    /// The document's content.
    pub value: Value,
    /// Where the document starts.
    pub start: Pos,
    spans: HashMap<String, Pos>,
}

impl Document {
    /// Where the value at `path` was written; for a path that does not exist (a missing field),
    /// the position of its nearest existing parent.
    pub fn pos(&self, path: &str) -> Pos {
        nearest(&self.spans, self.start, path)
    }

    /// Whether a value was written at exactly this path.
    pub fn has(&self, path: &str) -> bool {
        self.spans.contains_key(path)
    }

    /// Where the text of the literal block scalar (`key: |`) at `path` starts (its first
    /// line): what locates a line of a text embedded in YAML, a Go template say. None for any
    /// other value.
    pub fn literal_start(&self, path: &str) -> Option<Pos> {
        self.spans.get(&format!("{path}{LITERAL_MARK}")).copied()
    }

    /// Its positions alone, for locating problems found after the value is no longer needed.
    pub fn positions(&self) -> Positions {
        Positions {
            start: self.start,
            spans: self.spans.clone(),
        }
    }
}

/// Where each part of a document was written, without the document itself: a validated cluster
/// keeps these to locate fleet-level problems, at a fraction of the document's memory.
#[derive(Debug, Clone, Default)]
pub struct Positions {
    start: Pos,
    spans: HashMap<String, Pos>,
}

impl Positions {
    /// As [`Document::pos`].
    pub fn pos(&self, path: &str) -> Pos {
        nearest(&self.spans, self.start, path)
    }
}

/// Appended to a path to record where a literal block scalar's text starts (no key holds it:
/// a file with a NUL byte is not read as YAML).
const LITERAL_MARK: &str = "\u{0}";

/// The position of `path`, or of its nearest parent written in `spans`, or `start`.
fn nearest(spans: &HashMap<String, Pos>, start: Pos, path: &str) -> Pos {
    let mut p = path;
    loop {
        if let Some(pos) = spans.get(p) {
            return *pos;
        }
        match p.rfind(['.', '[']) {
            Some(i) => p = &p[..i],
            None => return start,
        }
    }
}

/// A YAML syntax error.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct YamlError {
    /// What is wrong.
    pub message: String,
    /// Where.
    pub pos: Pos,
}

enum Frame {
    Map {
        map: Map<String, Value>,
        path: String,
        key: Option<(String, Pos)>,
        anchor: usize,
    },
    Seq {
        items: Vec<Value>,
        path: String,
        anchor: usize,
    },
}

/// Parses every document of a YAML stream. Empty documents (e.g. a trailing `---`) are skipped.
pub fn parse(text: &str) -> Result<Vec<Document>, YamlError> {
    parse_impl(text, true)
}

/// Like [`parse`] but without recording positions: for YAML capstan wrote itself (rendered
/// templates), where positions are never reported and recording them is most of the cost.
/// The block YAML templates emit is read by a line-based reader of that subset (several times faster); anything
/// else, errors included, by the full parser. Debug builds check that both agree.
pub fn parse_values(text: &str) -> Result<Vec<Value>, YamlError> {
    parse_values_read(text).map(|(docs, _)| docs)
}

/// [`parse_values`], also saying whether the fast reader read the text (`true`) or the full
/// parser had to.
pub(crate) fn parse_values_read(text: &str) -> Result<(Vec<Value>, bool), YamlError> {
    if let Some(docs) = crate::block_yaml::parse(text) {
        debug_assert_eq!(
            Some(&docs),
            parse_impl(text, false)
                .ok()
                .map(|d| d.into_iter().map(|d| d.value).collect::<Vec<_>>())
                .as_ref(),
            "block_yaml disagrees with the full parser on:\n{text}"
        );
        return Ok((docs, true));
    }
    let docs = parse_impl(text, false)?;
    Ok((docs.into_iter().map(|d| d.value).collect(), false))
}

/// Every document of a YAML stream, with the position of each value when `track` is set.
fn parse_impl(text: &str, track: bool) -> Result<Vec<Document>, YamlError> {
    let mut parser = Parser::new_from_str(text);
    let mut b = Builder::new(track);
    while let Some(next) = parser.next_event() {
        let (event, span) = next.map_err(|e| YamlError {
            message: e.info().to_string(),
            pos: Pos {
                line: e.marker().line(),
                column: e.marker().col() + 1,
            },
        })?;
        let pos = Pos::from_span(&span);
        // A scalar in key position of a mapping is a key, not a value.
        if b.take_key(&event, pos)? {
            continue;
        }
        b.note_root(&event, pos);
        if let Some(value) = b.value(event, pos)? {
            b.attach(value);
        }
    }
    Ok(b.docs)
}

/// A YAML stream being read into documents: those read, the collections open in the current
/// one, and its positions, anchors and root.
struct Builder {
    /// Whether positions are recorded.
    track: bool,
    docs: Vec<Document>,
    stack: Vec<Frame>,
    spans: HashMap<String, Pos>,
    anchors: HashMap<usize, (Value, usize)>,
    /// Nodes created by alias expansion so far in this document (a billion-laughs guard).
    expanded: usize,
    root_pos: Option<Pos>,
    doc_start: Pos,
    root: Option<Value>,
}

impl Builder {
    /// Nothing read yet.
    fn new(track: bool) -> Self {
        Builder {
            track,
            docs: Vec::new(),
            stack: Vec::new(),
            spans: HashMap::new(),
            anchors: HashMap::new(),
            expanded: 0,
            root_pos: None,
            doc_start: Pos::default(),
            root: None,
        }
    }

    /// Whether the event is the next key of the open mapping (then taken as it); a duplicate
    /// key or a collection or alias as a key is an error.
    fn take_key(&mut self, event: &Event, pos: Pos) -> Result<bool, YamlError> {
        let Some(Frame::Map {
            key: key @ None,
            map,
            path,
            ..
        }) = self.stack.last_mut()
        else {
            return Ok(false);
        };
        match event {
            Event::Scalar(s, ..) => {
                if map.contains_key(s.as_ref()) {
                    return Err(YamlError {
                        message: format!("duplicate key `{s}`"),
                        pos,
                    });
                }
                // A value's position is where its key was written.
                if self.track {
                    self.spans.insert(join_key(path, s), pos);
                }
                *key = Some((s.to_string(), pos));
                Ok(true)
            }
            Event::SequenceStart(..) | Event::MappingStart(..) | Event::Alias(_) => {
                Err(YamlError {
                    message: "complex mapping keys are not supported".into(),
                    pos,
                })
            }
            _ => Ok(false),
        }
    }

    /// The path of the value about to be read (empty when positions are not recorded).
    fn child_path(&self) -> String {
        if !self.track {
            return String::new();
        }
        match self.stack.last() {
            Some(Frame::Map {
                path,
                key: Some((k, _)),
                ..
            }) => join_key(path, k),
            Some(Frame::Seq { path, items, .. }) => format!("{path}[{}]", items.len()),
            _ => String::new(),
        }
    }

    /// Records where the document's content starts: at its first node.
    fn note_root(&mut self, event: &Event, pos: Pos) {
        if self.stack.is_empty()
            && self.root_pos.is_none()
            && matches!(
                event,
                Event::MappingStart(..)
                    | Event::SequenceStart(..)
                    | Event::Scalar(..)
                    | Event::Alias(_)
            )
        {
            self.root_pos = Some(pos);
        }
    }

    /// Records a value's position under `path`, unless one was recorded there (its key's).
    fn span(&mut self, path: String, pos: Pos) {
        if self.track {
            self.spans.entry(path).or_insert(pos);
        }
    }

    /// The value an event completes (a scalar, an alias, a closed collection); None for an
    /// event that opens a collection, or starts or ends a stream or document.
    fn value(&mut self, event: Event, pos: Pos) -> Result<Option<Value>, YamlError> {
        let value = match event {
            Event::StreamStart | Event::StreamEnd | Event::Nothing => return Ok(None),
            Event::DocumentStart(_) => {
                self.doc_start = pos;
                self.spans = HashMap::new();
                self.anchors.clear();
                self.expanded = 0;
                self.root = None;
                self.root_pos = None;
                return Ok(None);
            }
            Event::DocumentEnd => {
                self.end_document();
                return Ok(None);
            }
            Event::MappingStart(anchor, tag) => {
                check_collection_tag(tag.as_deref(), "map", pos)?;
                let path = self.child_path();
                self.span(path.clone(), pos);
                self.stack.push(Frame::Map {
                    map: Map::new(),
                    path,
                    key: None,
                    anchor,
                });
                return Ok(None);
            }
            Event::SequenceStart(anchor, tag) => {
                check_collection_tag(tag.as_deref(), "seq", pos)?;
                let path = self.child_path();
                self.span(path.clone(), pos);
                self.stack.push(Frame::Seq {
                    items: Vec::new(),
                    path,
                    anchor,
                });
                return Ok(None);
            }
            Event::MappingEnd => match self.stack.pop() {
                Some(Frame::Map { map, anchor, .. }) => {
                    remember(&mut self.anchors, anchor, Value::Object(map))
                }
                _ => unreachable!("parser emits balanced events"),
            },
            Event::SequenceEnd => match self.stack.pop() {
                Some(Frame::Seq { items, anchor, .. }) => {
                    remember(&mut self.anchors, anchor, Value::Array(items))
                }
                _ => unreachable!("parser emits balanced events"),
            },
            Event::Alias(id) => self.alias(id, pos)?,
            Event::Scalar(text, style, anchor, tag) => {
                let path = self.child_path();
                if self.track && style == ScalarStyle::Literal {
                    self.spans.insert(format!("{path}{LITERAL_MARK}"), pos);
                }
                self.span(path, pos);
                let v = resolve_scalar(&text, style, tag.as_deref())
                    .map_err(|message| YamlError { message, pos })?;
                remember(&mut self.anchors, anchor, v)
            }
        };
        Ok(Some(value))
    }

    /// The value of an anchor, unless it is unknown or expanding it would pass
    /// [`MAX_ALIAS_NODES`] in this document.
    fn alias(&mut self, id: usize, pos: Pos) -> Result<Value, YamlError> {
        match self.anchors.get(&id) {
            Some((_, size)) if self.expanded + size > MAX_ALIAS_NODES => Err(YamlError {
                message: format!("aliases expand to more than {MAX_ALIAS_NODES} nodes"),
                pos,
            }),
            Some((v, size)) => {
                self.expanded += size;
                let v = v.clone();
                let path = self.child_path();
                self.span(path, pos);
                Ok(v)
            }
            None => Err(YamlError {
                message: "alias to an unknown anchor".into(),
                pos,
            }),
        }
    }

    /// Ends a document: kept unless it is empty (a null root).
    fn end_document(&mut self) {
        match self.root.take() {
            None | Some(Value::Null) => {}
            Some(value) => {
                // A document starts where its content starts, not at its `---` line.
                let start = self.root_pos.unwrap_or(self.doc_start);
                self.docs.push(Document {
                    value,
                    start,
                    spans: std::mem::take(&mut self.spans),
                })
            }
        }
    }

    /// Attaches a finished value to its parent, or makes it the document root.
    fn attach(&mut self, value: Value) {
        match self.stack.last_mut() {
            Some(Frame::Map { map, key, .. }) => {
                let (k, _) = key
                    .take()
                    .expect("value in a mapping always follows its key");
                map.insert(k, value);
            }
            Some(Frame::Seq { items, .. }) => items.push(value),
            None => self.root = Some(value),
        }
    }
}

/// How many nodes alias expansion may create in one document. Specs never need more; without a
/// limit a few hundred bytes of nested aliases expand to billions of nodes.
pub const MAX_ALIAS_NODES: usize = 100_000;

fn remember(anchors: &mut HashMap<usize, (Value, usize)>, anchor: usize, v: Value) -> Value {
    if anchor > 0 {
        anchors.insert(anchor, (v.clone(), node_count(&v)));
    }
    v
}

fn node_count(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(node_count).sum::<usize>(),
        Value::Object(m) => 1 + m.values().map(node_count).sum::<usize>(),
        _ => 1,
    }
}

fn join_key(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn check_collection_tag(tag: Option<&Tag>, expected: &str, pos: Pos) -> Result<(), YamlError> {
    match tag {
        None => Ok(()),
        Some(t) if t.is_yaml_core_schema() && t.suffix == expected => Ok(()),
        Some(t) => Err(YamlError {
            message: format!("unsupported tag `{t}`"),
            pos,
        }),
    }
}

fn resolve_scalar(text: &str, style: ScalarStyle, tag: Option<&Tag>) -> Result<Value, String> {
    if let Some(tag) = tag {
        if !tag.is_yaml_core_schema() {
            return Err(format!("unsupported tag `{tag}`"));
        }
        return match tag.suffix.as_str() {
            "str" => Ok(Value::String(text.to_string())),
            "int" | "float" | "bool" | "null" => match resolve_plain(text) {
                v @ (Value::Number(_) | Value::Bool(_) | Value::Null) => Ok(v),
                _ => Err(format!("`{text}` is not a valid !!{}", tag.suffix)),
            },
            other => Err(format!("unsupported tag `!!{other}`")),
        };
    }
    Ok(match style {
        ScalarStyle::Plain => resolve_plain(text),
        _ => Value::String(text.to_string()),
    })
}

/// Writes values as a multi-document YAML stream, each document preceded by `---`.
pub fn to_string_multi<'a>(docs: impl IntoIterator<Item = &'a Value>) -> String {
    let mut out = String::new();
    for doc in docs {
        out.push_str("---\n");
        emit_root(&mut out, doc);
    }
    out
}

/// Writes one value as a YAML document (without a `---` line).
pub fn to_string(value: &Value) -> String {
    let mut out = String::new();
    emit_root(&mut out, value);
    out
}

fn emit_root(out: &mut String, v: &Value) {
    match v {
        Value::Object(m) if !m.is_empty() => emit_map(out, m, 0),
        Value::Array(a) if !a.is_empty() => emit_seq(out, a, 0),
        other => {
            emit_scalar(out, other, 0);
            out.push('\n');
        }
    }
}

fn indent(out: &mut String, n: usize) {
    out.extend(std::iter::repeat_n(' ', n));
}

fn emit_map(out: &mut String, m: &Map<String, Value>, ind: usize) {
    let mut first = true;
    for (k, v) in m {
        if !first {
            indent(out, ind);
        }
        first = false;
        emit_str(out, k, ind, true);
        out.push(':');
        emit_child(out, v, ind, true);
    }
}

fn emit_seq(out: &mut String, a: &[Value], ind: usize) {
    let mut first = true;
    for v in a {
        if !first {
            indent(out, ind);
        }
        first = false;
        out.push('-');
        emit_child(out, v, ind, false);
    }
}

/// Writes the value after `key:` or `-`, on the same line when it is a scalar or empty.
fn emit_child(out: &mut String, v: &Value, ind: usize, in_map: bool) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            if in_map {
                out.push('\n');
                indent(out, ind + 2);
            } else {
                out.push(' ');
            }
            emit_map(out, m, ind + 2);
        }
        Value::Array(a) if !a.is_empty() => {
            // Sequences inside a mapping stay at the key's indentation, kubectl style.
            if in_map {
                out.push('\n');
                indent(out, ind);
                emit_seq(out, a, ind);
            } else {
                out.push(' ');
                emit_seq(out, a, ind + 2);
            }
        }
        other => {
            out.push(' ');
            emit_scalar(out, other, ind + 2);
            out.push('\n');
        }
    }
}

fn emit_scalar(out: &mut String, v: &Value, ind: usize) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Value::String(s) => emit_str(out, s, ind, false),
        Value::Object(_) => out.push_str("{}"),
        Value::Array(_) => out.push_str("[]"),
    }
}

fn emit_str(out: &mut String, s: &str, ind: usize, is_key: bool) {
    if !is_key && s.contains('\n') && block_safe(s) {
        out.push_str(if s.ends_with('\n') { "|" } else { "|-" });
        for line in s.strip_suffix('\n').unwrap_or(s).split('\n') {
            out.push('\n');
            if !line.is_empty() {
                indent(out, ind);
                out.push_str(line);
            }
        }
        return;
    }
    if plain_safe(s) {
        out.push_str(s);
    } else {
        out.push_str(&serde_json::to_string(s).expect("strings always serialise"));
    }
}

/// A multi-line string can be a literal block when no line would be misread.
fn block_safe(s: &str) -> bool {
    let body = s.strip_suffix('\n').unwrap_or(s);
    !body.ends_with('\n')
        && !body.starts_with([' ', '\t'])
        && body
            .split('\n')
            .all(|l| !l.ends_with([' ', '\t']) && !l.contains('\t') && !l.contains('\r'))
}

/// Whether `s` written plain reads back as the same string.
fn plain_safe(s: &str) -> bool {
    if s.is_empty() || resolve_non_string(s).is_some() {
        return false;
    }
    let first = s.as_bytes()[0];
    if b"-?:,[]{}#&*!|>'\"%@` \t".contains(&first) {
        // `-`, `?` and `:` are fine when followed by a non-space, but keep it simple and quote.
        return false;
    }
    if s.ends_with([' ', '\t', ':']) {
        return false;
    }
    if s.contains(": ")
        || s.contains(" #")
        || s.contains('\n')
        || s.contains('\t')
        || s.contains('\r')
    {
        return false;
    }
    // Quote strings the YAML 1.1 readers (kubectl's, most tooling) would turn into booleans.
    !matches!(
        s,
        "y" | "Y"
            | "n"
            | "N"
            | "yes"
            | "Yes"
            | "YES"
            | "no"
            | "No"
            | "NO"
            | "on"
            | "On"
            | "ON"
            | "off"
            | "Off"
            | "OFF"
    ) && s.chars().all(|c| !c.is_control())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn positions_point_at_keys_and_items() {
        let docs = parse("a: 1\nb:\n  - x: true\n  - y\n---\nc: \"1.30\"\n").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].value, json!({"a": 1, "b": [{"x": true}, "y"]}));
        assert_eq!(docs[0].pos("b[0].x"), Pos { line: 3, column: 5 });
        assert_eq!(docs[0].pos("b[1]"), Pos { line: 4, column: 5 });
        assert_eq!(docs[0].pos("b[0].missing"), Pos { line: 3, column: 5 });
        assert_eq!(docs[1].value, json!({"c": "1.30"}));
        assert_eq!(docs[1].pos("c"), Pos { line: 6, column: 1 });
    }

    #[test]
    fn a_literal_blocks_text_is_located() {
        let docs = parse("spec:\n  t: |\n    a\n    b\n  u: \"x\"\n  v: >\n    c\n").unwrap();
        assert_eq!(docs[0].pos("spec.t"), Pos { line: 2, column: 3 });
        assert_eq!(
            docs[0].literal_start("spec.t"),
            Some(Pos { line: 3, column: 5 })
        );
        assert_eq!(docs[0].literal_start("spec.u"), None);
        assert_eq!(docs[0].literal_start("spec.v"), None);
    }

    #[test]
    fn core_schema_scalars() {
        assert_eq!(resolve_plain("1.30"), json!(1.3));
        assert_eq!(resolve_plain("yes"), json!("yes"));
        assert_eq!(resolve_plain("0x10"), json!(16));
        assert_eq!(resolve_plain("~"), Value::Null);
        assert_eq!(resolve_plain("10.0.0.0/8"), json!("10.0.0.0/8"));
    }

    #[test]
    fn duplicate_keys_are_errors() {
        let err = parse("a: 1\na: 2\n").unwrap_err();
        assert_eq!(err.pos.line, 2);
        assert!(err.message.contains("duplicate key"));
    }

    #[test]
    fn emitter_round_trips() {
        let v = json!({"a": "yes", "b": ["1", 2, {"c": "x: y", "d": "line1\nline2\n"}], "e": {}, "f": [], "g": "", "h": "-x"});
        let text = to_string(&v);
        let back = parse(&text).unwrap();
        assert_eq!(back[0].value, v, "{text}");
    }

    #[test]
    fn anchors_and_aliases_expand() {
        let docs = parse("a: &x {k: v}\nb: *x\n").unwrap();
        assert_eq!(docs[0].value, json!({"a": {"k": "v"}, "b": {"k": "v"}}));
    }
}
