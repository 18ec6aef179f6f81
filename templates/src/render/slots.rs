//! Value slots: how the values a template quotes with `tojson` reach the rendered objects
//! without being written out as JSON text and parsed back.
//!
//! Why: the provider templates quote every value they write with `tojson`, and every template's
//! output is read back into objects. Writing those values as JSON and parsing them again was a
//! third of a render (callgrind on `render_fleet`: the `tojson` filter 17 %, serde_json reading
//! its output back 15 %), spent on turning values into text and the text into the same values.
//!
//! So while a template is rendered to be read back ([`render`]), `tojson` keeps its value in a
//! slot and writes a placeholder instead: [`SLOT`], the slot's number, [`END`]. The block-YAML
//! reader replaces a placeholder that is a whole scalar or a whole key by the slot's value,
//! converted as minijinja's JSON writer would write it. Whatever does not fit makes [`Slotted::read`]
//! give `None`, and the caller renders the template again as text, where `tojson` is
//! minijinja's own: a placeholder inside a longer scalar, in a comment or a block scalar, a slot
//! that is not used exactly once (a `tojson` result the template inspected instead of writing
//! it out), a value JSON cannot hold the same way. So the objects are always what the text
//! would have parsed to; a property test renders every shape of cluster both ways and compares.
//!
//! Text captured by `{% set %}` and quoted again with `tojson` (the vSphere CPI configuration) has
//! its placeholders expanded to their JSON text first, which is exactly what text mode would
//! have captured.

use std::cell::RefCell;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, Template, Value as Jinja};
use serde_json::{Map, Number, Value};

pub(crate) use crate::block_yaml::SLOT;

/// The last character of a placeholder (another private-use character).
pub(super) const END: char = '\u{E001}';

/// The first byte of [`SLOT`] and [`END`] in UTF-8.
pub(super) const SLOT_LEAD: u8 = 0xEE;

/// The slots of the template being rendered on this thread, when one is.
struct State {
    slots: Vec<Option<Jinja>>,
    /// Set when something happened that slots cannot express (the read then gives `None`).
    spoiled: bool,
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
    static TEXT_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A template rendered with value slots: its text and the values its placeholders stand for.
pub(super) struct Slotted {
    pub(super) text: String,
    pub(super) slots: Vec<Option<Jinja>>,
}

/// Renders `tmpl` with value slots; `None` when slots are off on this thread
/// ([`text_only`]) or the render failed (the caller renders as text and reports that error).
pub(super) fn render(tmpl: &Template<'_, '_>, ctx: &Jinja) -> Option<Slotted> {
    if TEXT_ONLY.get() {
        return None;
    }
    let previous = STATE.replace(Some(State {
        slots: Vec::new(),
        spoiled: false,
    }));
    let text = tmpl.render(ctx);
    let state = STATE.replace(previous).expect("set above");
    match text {
        Ok(text) if !state.spoiled => Some(Slotted {
            text,
            slots: state.slots,
        }),
        _ => None,
    }
}

/// Runs `f` with value slots off on this thread, so that every template is rendered as text
/// (tests compare both ways).
pub fn text_only<T>(f: impl FnOnce() -> T) -> T {
    let previous = TEXT_ONLY.replace(true);
    let out = f();
    TEXT_ONLY.set(previous);
    out
}

/// Whether [`text_only`] is in effect on this thread.
pub(super) fn is_text_only() -> bool {
    TEXT_ONLY.get()
}

/// The slot number of a whole placeholder.
pub(super) fn index(token: &str) -> Option<usize> {
    token.strip_prefix(SLOT)?.strip_suffix(END)?.parse().ok()
}

/// The `tojson` filter: minijinja's own, except while a template is rendered with slots.
pub(super) fn tojson(value: &Jinja, indent: Option<Jinja>, args: Kwargs) -> Result<Jinja, Error> {
    if indent.is_some() || args.args().next().is_some() {
        return minijinja::filters::tojson(value, indent, args);
    }
    let slotted = STATE.with_borrow_mut(|state| {
        let state = state.as_mut()?;
        let value = match value.as_str() {
            // A placeholder's first byte, found by memchr (`contains` on the character was
            // 1.3 % of a render).
            Some(s) if memchr::memchr(SLOT_LEAD, s.as_bytes()).is_some() && s.contains(SLOT) => {
                match expand(s, &mut state.slots) {
                    Some(s) => Jinja::from(s),
                    None => {
                        state.spoiled = true;
                        return None;
                    }
                }
            }
            _ => value.clone(),
        };
        let placeholder = placeholder(state.slots.len());
        state.slots.push(Some(value));
        Some(placeholder)
    });
    match slotted {
        Some(placeholder) => Ok(placeholder),
        None => minijinja::filters::tojson(value, None, no_args()),
    }
}

/// The placeholder of slot `n`: made once per thread and number (a shared string; making each
/// anew was two allocations per quoted value).
fn placeholder(n: usize) -> Jinja {
    thread_local!(static MADE: RefCell<Vec<Jinja>> = const { RefCell::new(Vec::new()) });
    MADE.with_borrow_mut(|made| {
        while made.len() <= n {
            let mut p = String::with_capacity(12);
            p.push(SLOT);
            p.push_str(itoa::Buffer::new().format(made.len()));
            p.push(END);
            made.push(Jinja::from_safe_string(p));
        }
        made[n].clone()
    })
}

fn no_args() -> Kwargs {
    Kwargs::from_iter(std::iter::empty::<(&str, Jinja)>())
}

/// `s` with each placeholder replaced by its slot's JSON text (the slot is then used up), or
/// `None` when one does not name an unused slot.
fn expand(s: &str, slots: &mut [Option<Jinja>]) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find(SLOT) {
        out.push_str(&rest[..at]);
        let after = &rest[at + SLOT.len_utf8()..];
        let end = after.find(END)?;
        let i: usize = after[..end].parse().ok()?;
        let v = slots.get_mut(i)?.take()?;
        let text = minijinja::filters::tojson(&v, None, no_args()).ok()?;
        out.push_str(text.as_str()?);
        rest = &after[end + END.len_utf8()..];
    }
    out.push_str(rest);
    Some(out)
}

/// The JSON value minijinja's JSON writer would write for `v` (`None` where serde_json would
/// read that text back differently, or not at all: such a template is rendered as text).
pub(super) fn to_json(v: &Jinja) -> Option<Value> {
    // A part of the context, quoted whole: its JSON as it is (what the writer would write of it).
    if let Some(node) = v.downcast_object_ref::<super::json_object::JsonNode>() {
        return Some(node.json());
    }
    Some(match v.kind() {
        ValueKind::Undefined | ValueKind::None => Value::Null,
        ValueKind::Bool => Value::Bool(v.is_true()),
        ValueKind::Number if v.is_integer() => match (v.as_i64(), u64::try_from(v.clone())) {
            (Some(i), _) => Value::from(i),
            (None, Ok(u)) => Value::from(u),
            // 128-bit integers: serde_json's own reading of their digits decides.
            _ => return None,
        },
        ValueKind::Number => {
            let f = f64::try_from(v.clone()).ok()?;
            Number::from_f64(f).map_or(Value::Null, Value::Number)
        }
        ValueKind::String => Value::String(v.as_str()?.to_string()),
        ValueKind::Plain => Value::String(v.to_string()),
        ValueKind::Bytes => Value::from(v.as_bytes()?.to_vec()),
        ValueKind::Seq | ValueKind::Iterable => Value::Array(
            v.try_iter()
                .ok()?
                .map(|i| to_json(&i))
                .collect::<Option<_>>()?,
        ),
        ValueKind::Map => {
            let mut out = Map::new();
            // Key and value together (a map's keys and then a lookup of each cost twice as much).
            for (k, item) in v.as_object()?.try_iter_pairs()? {
                // Only string keys: the writer quotes others, and a repeated key would keep
                // its last value when parsed.
                let name = k.as_str()?.to_string();
                let item = to_json(&item)?;
                if out.insert(name, item).is_some() {
                    return None;
                }
            }
            Value::Object(out)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(src: &'static str) -> minijinja::Environment<'static> {
        let mut env = minijinja::Environment::new();
        env.add_filter("tojson", tojson);
        env.add_template("t", src).unwrap();
        env
    }

    /// What the template gives with slots, and what its text gives.
    fn both(src: &'static str, ctx: Jinja) -> (Option<Vec<Value>>, Vec<Value>) {
        let env = env(src);
        let tmpl = env.get_template("t").unwrap();
        let slotted = render(&tmpl, &ctx).and_then(Slotted::read);
        let text = tmpl.render(&ctx).unwrap();
        assert!(!text.contains(SLOT), "text mode outside a slotted render");
        (slotted, crate::yaml::parse_values(&text).unwrap())
    }

    #[test]
    fn slots_give_what_the_text_parses_to() {
        let ctx = minijinja::context! {
            s => "a \"quoted\" <b> & 'c'\nline",
            n => 7, f => 1.5, big => u64::MAX, neg => -3, t => true, none => (),
            list => vec![Jinja::from(1), Jinja::from("x"), Jinja::from(())],
            map => minijinja::context! { b => 2, a => vec!["z"] },
            key => "weird key: #1",
        };
        let (slotted, text) = both(
            "a: {{ s | tojson }}\nb: {{ n | tojson }}\nc: {{ f | tojson }}\nd: {{ big | tojson }}\n\
             e: {{ neg | tojson }}\nf: {{ t | tojson }}\ng: {{ none | tojson }}\nh: {{ list | tojson }}\n\
             i:\n  - {{ map | tojson }}\n  - {{ s | tojson }}\n{{ key | tojson }}: {{ missing | default(1) | tojson }}\n\
             j: {{ s | tojson(indent=2) | replace('\\n', '') }}\n",
            ctx,
        );
        assert_eq!(slotted.as_ref(), Some(&text));
        assert_eq!(text[0]["i"][0], serde_json::json!({"a": ["z"], "b": 2}));
    }

    #[test]
    fn captured_text_quoted_again_holds_the_json_text() {
        let ctx = minijinja::context! { server => "vc.local", port => 443 };
        let (slotted, text) = both(
            "{% set conf %}server: {{ server | tojson }}\nport: {{ port | tojson }}\n{% endset %}\
             conf: {{ conf | tojson }}\nother: {{ server | tojson }}\n",
            ctx,
        );
        assert_eq!(slotted.as_ref(), Some(&text));
        assert_eq!(text[0]["conf"], "server: \"vc.local\"\nport: 443\n");
    }

    #[test]
    fn anything_slots_cannot_express_is_read_as_text() {
        let ctx = minijinja::context! { s => "x", forged => format!("{SLOT}0{END}") };
        for src in [
            // Inside a longer scalar, a comment, a block scalar.
            "a: pre{{ s | tojson }}\n",
            "a: 1\n# {{ s | tojson }}\n",
            "a: |\n  {{ s | tojson }}\n",
            // Inspected instead of written out.
            "a: {{ (s | tojson) | length }}\n",
            // Written out twice, or a placeholder forged by the data.
            "{% set j = s | tojson %}a: {{ j }}\nb: {{ j }}\n",
            "a: {{ s | tojson }}\nb: {{ forged }}\n",
            "a: {{ forged | tojson }}\nb: {{ s | tojson }}\n",
        ] {
            let env = env(src);
            let tmpl = env.get_template("t").unwrap();
            let slotted = render(&tmpl, &ctx).and_then(Slotted::read);
            assert_eq!(slotted, None, "{src}");
        }
    }

    #[test]
    fn text_only_turns_slots_off() {
        let env = env("a: {{ 1 | tojson }}\n");
        let tmpl = env.get_template("t").unwrap();
        assert!(text_only(|| render(&tmpl, &Jinja::from(()))).is_none());
        assert!(render(&tmpl, &Jinja::from(())).is_some());
    }
}
