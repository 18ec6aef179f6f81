//! A SOPS file read in the order it was written. The MAC is a hash over every value in document
//! order, so the JSON values the rest of capstan uses (whose maps are sorted) cannot be walked for
//! it; this reads the YAML event stream (JSON is read the same way: it is YAML's flow style) into
//! ordered maps, sequences and scalars, nothing else: anchors, aliases, tags and complex keys are
//! refused, as nothing `sops` writes has them.

use saphyr_parser::{Event, Parser, ScalarStyle};
use serde_json::Value;

use super::SopsError;

/// A node of a document, in the order written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Map(Vec<(String, Node)>),
    Seq(Vec<Node>),
    /// A scalar with the value the YAML 1.2 core schema gives it (quoted scalars are strings).
    Scalar(Value),
}

impl Node {
    /// The value at `key` of a map.
    pub(crate) fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(items) => items.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// A scalar's text: strings as written, numbers and booleans as YAML spells them.
    pub(crate) fn text(&self) -> Option<String> {
        match self {
            Node::Scalar(Value::String(s)) => Some(s.clone()),
            Node::Scalar(Value::Bool(b)) => Some(b.to_string()),
            Node::Scalar(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        }
    }

    /// The JSON value of the node (maps sorted, as everywhere else in capstan).
    pub(crate) fn to_value(&self) -> Value {
        match self {
            Node::Map(items) => Value::Object(
                items
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_value()))
                    .collect(),
            ),
            Node::Seq(items) => Value::Array(items.iter().map(Node::to_value).collect()),
            Node::Scalar(v) => v.clone(),
        }
    }
}

enum Frame {
    Map(Vec<(String, Node)>, Option<String>),
    Seq(Vec<Node>),
}

/// Every document of the stream, in order.
pub(crate) fn read(text: &str) -> Result<Vec<Node>, SopsError> {
    let mut docs = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut parser = Parser::new_from_str(text);
    let refuse = |line: usize, what: &str| SopsError::Yaml {
        line,
        message: format!("{what} are not supported in an encrypted file"),
    };
    while let Some(next) = parser.next_event() {
        let (event, span) = next.map_err(|e| SopsError::Yaml {
            line: e.marker().line(),
            message: e.info().to_string(),
        })?;
        let line = span.start.line();
        let node = match event {
            Event::StreamStart | Event::StreamEnd | Event::DocumentStart(_) | Event::Nothing => {
                continue;
            }
            Event::DocumentEnd => continue,
            Event::Alias(_) => return Err(refuse(line, "aliases")),
            Event::MappingStart(anchor, tag) | Event::SequenceStart(anchor, tag)
                if anchor != 0 || tag.is_some() =>
            {
                return Err(refuse(line, "anchors and tags"));
            }
            Event::MappingStart(..) => {
                if let Some(Frame::Map(_, None)) = stack.last() {
                    return Err(refuse(line, "complex mapping keys"));
                }
                stack.push(Frame::Map(Vec::new(), None));
                continue;
            }
            Event::SequenceStart(..) => {
                if let Some(Frame::Map(_, None)) = stack.last() {
                    return Err(refuse(line, "complex mapping keys"));
                }
                stack.push(Frame::Seq(Vec::new()));
                continue;
            }
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map(items, None)) => Node::Map(items),
                _ => unreachable!("the parser closes what it opened"),
            },
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq(items)) => Node::Seq(items),
                _ => unreachable!("the parser closes what it opened"),
            },
            Event::Scalar(s, style, anchor, tag) => {
                if anchor != 0 || tag.is_some() {
                    return Err(refuse(line, "anchors and tags"));
                }
                if let Some(Frame::Map(items, key @ None)) = stack.last_mut() {
                    if items.iter().any(|(k, _)| *k == *s) {
                        return Err(SopsError::Yaml {
                            line,
                            message: format!("duplicate key `{s}`"),
                        });
                    }
                    *key = Some(s.to_string());
                    continue;
                }
                Node::Scalar(match style {
                    ScalarStyle::Plain => capstan_templates::scalar::resolve_plain(&s),
                    _ => Value::String(s.to_string()),
                })
            }
        };
        match stack.last_mut() {
            None => docs.push(node),
            Some(Frame::Seq(items)) => items.push(node),
            Some(Frame::Map(items, key)) => {
                let k = key.take().expect("a value follows its key");
                items.push((k, node));
            }
        }
    }
    Ok(docs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn order_types_and_refusals() {
        let docs = read("b: 1\na: [x, 'y', true, 1.5, ~]\n---\n{\"k\": \"v\"}\n").unwrap();
        assert_eq!(docs.len(), 2);
        let Node::Map(items) = &docs[0] else { panic!() };
        assert_eq!(items[0].0, "b");
        assert_eq!(
            docs[0].to_value(),
            json!({"b": 1, "a": ["x", "y", true, 1.5, null]})
        );
        assert_eq!(docs[1].to_value(), json!({"k": "v"}));
        for bad in [
            "a: &x 1\nb: *x\n",
            "a: !!str 1\n",
            "? [a]\n: 1\n",
            "a: 1\na: 2\n",
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }
}
