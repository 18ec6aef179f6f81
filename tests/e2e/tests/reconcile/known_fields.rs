//! The fields validation knows (`capstan_layout::fields`) against the API server's own schemas:
//! the OpenAPI v3 document a real kube-apiserver serves for core/v1 and, with the upstream CRDs
//! installed, for the add-on kinds. At every level the table describes, its fields and the
//! schema's are the same set; where the table stops (`Open`), the schema has no fields of its
//! own to check (a scalar, a map, a list of scalars, a field left open). A field added upstream
//! or a typo in the table fails here, naming the path.

use std::collections::BTreeSet;

use capstan_layout::fields::{KINDS, Shape};
use serde_json::Value;

/// The OpenAPI v3 document of one group version (`api/v1`, `apis/<group>/<version>`).
async fn document(client: &kube::Client, gv: &str) -> Value {
    let index: Value = client
        .request(http::Request::get("/openapi/v3").body(Vec::new()).unwrap())
        .await
        .unwrap();
    let url = index["paths"][gv]["serverRelativeURL"]
        .as_str()
        .unwrap_or_else(|| panic!("{gv} is not in the API server's OpenAPI index"));
    client
        .request(http::Request::get(url).body(Vec::new()).unwrap())
        .await
        .unwrap()
}

/// A schema with its `$ref`s (also under a single-item `allOf`) followed.
fn resolve_refs<'d>(doc: &'d Value, mut s: &'d Value) -> &'d Value {
    loop {
        let r = s["$ref"].as_str().or_else(|| match s["allOf"].as_array() {
            Some(all) if all.len() == 1 => all[0]["$ref"].as_str(),
            _ => None,
        });
        match r {
            Some(r) => {
                let name = r.trim_start_matches("#/components/schemas/");
                s = &doc["components"]["schemas"][name];
            }
            None => return s,
        }
    }
}

fn compare(doc: &Value, shape: &Shape, schema: &Value, path: &str, diffs: &mut Vec<String>) {
    let schema = resolve_refs(doc, schema);
    let props = schema["properties"].as_object();
    let items = (schema["type"] == "array").then(|| resolve_refs(doc, &schema["items"]));
    let items_have_fields = items.is_some_and(|i| i["properties"].is_object());
    match shape {
        Shape::Fields(fields) => {
            let Some(props) = props else {
                diffs.push(format!(
                    "{path}: the table lists fields, the schema has none"
                ));
                return;
            };
            let ours: BTreeSet<&str> = fields.iter().map(|(k, _)| *k).collect();
            let theirs: BTreeSet<&str> = props.keys().map(String::as_str).collect();
            for k in theirs.difference(&ours) {
                diffs.push(format!(
                    "{path}.{k}: the API server knows it, the table does not"
                ));
            }
            for k in ours.difference(&theirs) {
                diffs.push(format!(
                    "{path}.{k}: in the table, unknown to the API server"
                ));
            }
            for (k, s) in fields.iter() {
                if let Some(p) = props.get(*k) {
                    compare(doc, s, p, &format!("{path}.{k}"), diffs);
                }
            }
        }
        Shape::List(item) => match items {
            Some(i) => compare(doc, item, i, &format!("{path}[]"), diffs),
            None => diffs.push(format!("{path}: a list in the table, not in the schema")),
        },
        // A status is the controller's: with the status subresource, the API server drops it
        // from an apply of the object, so it is never refused for its fields.
        Shape::Open if path.matches('.').count() == 1 && path.ends_with(".status") => {}
        Shape::Open => {
            if props.is_some_and(|p| !p.is_empty()) || items_have_fields {
                diffs.push(format!(
                    "{path}: open in the table, the schema describes its fields"
                ));
            }
        }
    }
}

#[tokio::test]
async fn the_fields_validation_knows_are_the_api_servers() {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let mut diffs = Vec::new();
    let mut fields = 0;
    for (api_version, kind, shape) in KINDS {
        let gv = match api_version.split_once('/') {
            Some(_) => format!("apis/{api_version}"),
            None => format!("api/{api_version}"),
        };
        let doc = document(&client, &gv).await;
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let schema = doc["components"]["schemas"]
            .as_object()
            .unwrap()
            .values()
            .find(|s| {
                s["x-kubernetes-group-version-kind"]
                    .as_array()
                    .is_some_and(|g| {
                        g.iter().any(|g| {
                            g["group"] == group && g["version"] == version && g["kind"] == *kind
                        })
                    })
            })
            .unwrap_or_else(|| panic!("{kind} {api_version} is not in the API server's schemas"));
        compare(&doc, shape, schema, kind, &mut diffs);
        fields += count(shape);
    }
    assert!(diffs.is_empty(), "{diffs:#?}");
    println!(
        "{} kinds, {fields} fields the same as the API server's",
        KINDS.len()
    );
}

fn count(shape: &Shape) -> usize {
    match shape {
        Shape::Open => 0,
        Shape::Fields(f) => f.iter().map(|(_, s)| 1 + count(s)).sum(),
        Shape::List(i) => count(i),
    }
}
