//! A fast reader for the block YAML the provider templates emit, so that parsing rendered output
//! back (done for every template of every cluster) does not dominate rendering.
//!
//! Why: the templates write block mappings and sequences whose scalars are either plain words or
//! `tojson` output (JSON strings, arrays, objects). A general YAML parser spends most of its time
//! on the generality (a token queue, simple-key bookkeeping, every scalar style); this reader
//! handles only that subset, line by line, and gives up (`None`) on anything else: other
//! scalar styles, comments after content, anchors, tags, flow collections that are not JSON,
//! multi-line scalars, duplicate keys, tabs. The caller then uses the full parser
//! ([`crate::yaml::parse_values`]), so what is accepted here always means the same as there, and
//! errors are always reported by the full parser. Debug builds check both agree on every
//! rendered template.
//!
//! A scalar or key that starts with [`SLOT`] is a value slot of the renderer (see
//! `render::slots`): the caller's `slot` function turns it into its value, or refuses it
//! (`None`), which makes the whole read `None`.

use serde_json::{Map, Value};

use crate::scalar::resolve_plain;

/// The first character of a value slot's placeholder (a private-use character).
pub(crate) const SLOT: char = '\u{E000}';

/// What the reader asks of the caller for each placeholder: its value, or `None`.
pub(crate) type Slots<'s> = dyn FnMut(&str) -> Option<Value> + 's;

#[derive(Clone, Copy)]
struct Line<'a> {
    indent: usize,
    text: &'a str,
}

/// The documents of `text`, or `None` when it uses anything outside the subset.
pub(crate) fn parse(text: &str) -> Option<Vec<Value>> {
    parse_with(text, &mut |_| None)
}

/// [`parse`], with each value slot's placeholder replaced by what `slot` gives for it.
pub(crate) fn parse_with(text: &str, slot: &mut Slots<'_>) -> Option<Vec<Value>> {
    // Tabs and carriage returns anywhere: one scan of the whole text instead of one per line.
    if memchr::memchr2(b'\t', b'\r', text.as_bytes()).is_some() {
        return None;
    }
    let mut docs = Vec::new();
    let mut lines: Vec<Line> = Vec::new();
    let mut start = 0;
    // Line ends found by memchr (`str::lines` searched for each one anew: 4 % of a render).
    let ends = memchr::memchr_iter(b'\n', text.as_bytes()).chain([text.len()]);
    for end in ends {
        let raw = &text[start..end];
        start = end + 1;
        let t = raw.trim_end_matches(' ');
        if t == "---" {
            document(&mut lines, &mut docs, slot)?;
            continue;
        }
        let body = t.trim_start_matches(' ');
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        if t.starts_with("---") || t.starts_with("...") || t.starts_with('%') {
            return None;
        }
        lines.push(Line {
            indent: t.len() - body.len(),
            text: body,
        });
    }
    document(&mut lines, &mut docs, slot)?;
    Some(docs)
}

fn document(lines: &mut Vec<Line>, docs: &mut Vec<Value>, slot: &mut Slots<'_>) -> Option<()> {
    if lines.is_empty() {
        return Some(());
    }
    let mut i = 0;
    let indent = lines[0].indent;
    let v = node(lines, &mut i, indent, slot)?;
    if i != lines.len() {
        return None;
    }
    lines.clear();
    if !v.is_null() {
        docs.push(v);
    }
    Some(())
}

fn is_item(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

fn node(lines: &mut [Line], i: &mut usize, indent: usize, slot: &mut Slots<'_>) -> Option<Value> {
    let l = lines.get(*i)?;
    if l.indent != indent {
        return None;
    }
    if is_item(l.text) {
        seq(lines, i, indent, slot)
    } else {
        map(lines, i, indent, slot)
    }
}

fn seq(lines: &mut [Line], i: &mut usize, indent: usize, slot: &mut Slots<'_>) -> Option<Value> {
    let mut items = Vec::new();
    while let Some(l) = lines.get(*i).copied() {
        if l.indent != indent || !is_item(l.text) {
            break;
        }
        let rest = l.text[1..].trim_start_matches(' ');
        if rest.is_empty() {
            *i += 1;
            match lines.get(*i) {
                Some(n) if n.indent > indent => {
                    let ind = n.indent;
                    items.push(node(lines, i, ind, slot)?);
                }
                _ => items.push(Value::Null),
            }
        } else if is_item(rest) {
            return None;
        } else if key(rest).is_some() {
            // `- key: value` starts a mapping at the column of `key`.
            let col = indent + (l.text.len() - rest.len());
            lines[*i] = Line {
                indent: col,
                text: rest,
            };
            items.push(map(lines, i, col, slot)?);
        } else {
            items.push(scalar(rest, slot)?);
            *i += 1;
        }
    }
    if lines.get(*i).is_some_and(|n| n.indent > indent) {
        return None;
    }
    Some(Value::Array(items))
}

fn map(lines: &mut [Line], i: &mut usize, indent: usize, slot: &mut Slots<'_>) -> Option<Value> {
    let mut out = Map::new();
    while let Some(l) = lines.get(*i).copied() {
        if l.indent != indent || is_item(l.text) {
            break;
        }
        let (k, rest) = key(l.text)?;
        let k = match k {
            Key::Text(k) => k,
            Key::Slot(token) => match slot(token)? {
                Value::String(k) => k,
                _ => return None,
            },
        };
        if out.contains_key(&k) {
            return None;
        }
        *i += 1;
        let v = if rest.is_empty() {
            match lines.get(*i) {
                Some(n) if n.indent > indent => {
                    let ind = n.indent;
                    node(lines, i, ind, slot)?
                }
                Some(n) if n.indent == indent && is_item(n.text) => seq(lines, i, indent, slot)?,
                _ => Value::Null,
            }
        } else {
            scalar(rest, slot)?
        };
        out.insert(k, v);
    }
    if lines.get(*i).is_some_and(|n| n.indent > indent) {
        return None;
    }
    Some(Value::Object(out))
}

/// A mapping key as read: its text, or a value slot's placeholder that the caller resolves
/// (only once: `seq` reads a key to tell a mapping item from a scalar).
enum Key<'a> {
    Text(String),
    Slot(&'a str),
}

/// `key: rest` (rest may be empty) with a plain key of name characters, a JSON-quoted key or a
/// value slot.
fn key(text: &str) -> Option<(Key<'_>, &str)> {
    let (k, after) = if text.starts_with('"') {
        let mut de = serde_json::Deserializer::from_str(text).into_iter::<String>();
        let k = de.next()?.ok()?;
        (Key::Text(k), &text[de.byte_offset()..])
    } else if text.starts_with(SLOT) {
        let end = text.find(':')?;
        (Key::Slot(&text[..end]), &text[end..])
    } else {
        // One pass: name characters up to the colon.
        let plain = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'/' | b'_' | b'-');
        let end = text.bytes().position(|c| !plain(c))?;
        if end == 0 || text.as_bytes()[end] != b':' || text.starts_with('-') {
            return None;
        }
        (Key::Text(text[..end].to_string()), &text[end..])
    };
    let rest = after.strip_prefix(':')?;
    if rest.is_empty() {
        return Some((k, rest));
    }
    rest.starts_with(' ')
        .then(|| (k, rest.trim_start_matches(' ')))
}

fn scalar(text: &str, slot: &mut Slots<'_>) -> Option<Value> {
    if text.starts_with(SLOT) {
        return slot(text);
    }
    match text.as_bytes()[0] {
        b'"' => Some(Value::String(quoted(text)?)),
        b'[' | b'{' => serde_json::from_str::<Value>(text).ok(),
        b'\'' | b'|' | b'>' | b'&' | b'*' | b'!' | b'%' | b'@' | b'`' | b'#' | b'?' | b':'
        | b',' | b']' | b'}' => None,
        b'-' if is_item(text) => None,
        _ if ends_a_plain_scalar(text) => None,
        _ => Some(resolve_plain(text)),
    }
}

/// A JSON string (the whole of `text`): without escapes its content is the text between the
/// quotes, read without a JSON parser.
fn quoted(text: &str) -> Option<String> {
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    if inner.bytes().all(|c| c >= 0x20 && c != b'"' && c != b'\\') {
        return Some(inner.to_string());
    }
    serde_json::from_str::<String>(text).ok()
}

/// Whether a plain scalar holds `: `, ` #` or a trailing `:`, which would make it something
/// else (or not YAML at all).
fn ends_a_plain_scalar(text: &str) -> bool {
    let b = text.as_bytes();
    b.last() == Some(&b':')
        || b.windows(2)
            .any(|w| (w[0] == b':' && w[1] == b' ') || (w[0] == b' ' && w[1] == b'#'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::parse_values;

    fn same(text: &str) {
        let fast = parse(text).unwrap_or_else(|| panic!("not read by the fast path:\n{text}"));
        assert_eq!(fast, parse_values(text).unwrap(), "{text}");
    }

    #[test]
    fn reads_what_templates_write_like_the_full_parser() {
        same(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: \"a\"\n  labels:\n    x.io/y: \"1\"\ndata:\n  k: v\n",
        );
        same(
            "a:\n- 1\n- name: x\n  count: 2\n  list:\n  - \"s\"\n-\n  b: true\nc: [1, \"two\", {\"k\": null}]\nd: {\"a\": [1]}\ne:\nf: 1.5\ng: null\nh: \"\\u003cx\\u003e\"\n---\n---\n# only a comment\nx: y\n",
        );
        same("\"quoted key\": 1\nlist:\n  - a\n");
        // Strings with and without escapes, and plain scalars that only look special.
        same(
            "a: \"x\\\"y\"\nb: \"t\\tu\\\\\"\nc: \"caf\u{e9} \u{2713}\"\nd: \"\"\ne: a:b\nf: a#b\ng: -1\n",
        );
    }

    #[test]
    fn leaves_everything_else_to_the_full_parser() {
        for text in [
            "a: |\n  text\n",
            "a: 'single'\n",
            "a: b # comment\n",
            "a: &x 1\nb: *x\n",
            "a: !!str 1\n",
            "a: 1\na: 2\n",
            "a: plain\n  continued\n",
            "a: {b: c}\n",
            "a:\tb\n",
            "a: b\r\nc: d\r\n",
            "- - a\n  - b\n",
            "a b: c\n",
            "a: \"x\" \"y\"\n",
            "a: \"x\\\"\n",
            "a: b: c\n",
            "a: b:\n",
        ] {
            assert_eq!(parse(text), None, "{text}");
        }
    }
}
