//! The reference table (`capstan_layout::tenancy::table`) against the upstream CRDs: every kind
//! the workload identity may write has its rows, every row's path is a field of the CRD at the
//! table's versions, and no field that looks like a reference to another object is left
//! without a row at, above or below it. The CRDs are read from the Go module cache at the
//! pinned versions (`tests/control-plane/versions.env`), as the harness installs them; no API
//! server is needed.

use std::collections::BTreeSet;

use capstan::install::rbac::{Holder, rules};
use capstan_layout::tenancy::table::{EVERY_KIND, KINDS, Kind, Row, Step, steps};
use serde_json::Value;

/// Whether a field name looks like a reference: what names another object or selects some.
fn named_like_a_reference(key: &str) -> bool {
    [
        "Ref",
        "Refs",
        "Secret",
        "SecretName",
        "secretName",
        "From",
        "Selector",
        "Pools",
    ]
    .iter()
    .any(|s| key.ends_with(s))
        || [
            "secret",
            "selector",
            "namespace",
            "clusterName",
            "failureDomain",
            "targetObjectName",
            "managementCluster",
            "infrastructureTemplate",
        ]
        .contains(&key)
}

/// Whether a schema is an object reference: a `name` beside a `kind`, `namespace`, `apiGroup`,
/// `apiVersion` or `uid`.
fn shaped_like_a_reference(schema: &Value) -> bool {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return false;
    };
    props.contains_key("name")
        && ["kind", "namespace", "apiGroup", "apiVersion", "uid"]
            .iter()
            .any(|k| props.contains_key(*k))
}

/// A field that looks like a reference, to be covered by a row: a name (`exact`: by a row at it
/// or above it), or an object or list whose rows may also be below it (a selector, `contentFrom`).
type Suspect = (String, bool);

/// Every path of a schema (dotted, `[]` for list items, `{}` for map values), and the suspects:
/// each field that looks like a reference (its `name` when it has one) or is left open
/// (`x-kubernetes-preserve-unknown-fields`).
fn schema_paths(
    schema: &Value,
    path: &str,
    all: &mut BTreeSet<String>,
    suspects: &mut BTreeSet<Suspect>,
) {
    if schema["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true) && !path.is_empty() {
        suspects.insert((path.to_string(), true));
    }
    if schema["type"] == "array" {
        schema_paths(&schema["items"], &format!("{path}[]"), all, suspects);
        return;
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (key, child) in props {
            let p = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            all.insert(p.clone());
            if named_like_a_reference(key) || shaped_like_a_reference(child) {
                let has_name = child.pointer("/properties/name").is_some();
                suspects.insert(match (has_name, child["type"] == "string") {
                    (true, _) => (format!("{p}.name"), true),
                    (false, true) => (p.clone(), true),
                    (false, false) => (p.clone(), false),
                });
            }
            schema_paths(child, &p, all, suspects);
        }
    }
    if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        schema_paths(values, &format!("{path}{{}}"), all, suspects);
    }
}

/// A row's path as the walk spells paths.
fn spelled(row: &Row) -> String {
    let mut out = String::new();
    for s in steps(row.path) {
        match s {
            Step::Field(k) | Step::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Step::Each => out.push_str("[]"),
        }
    }
    out
}

/// Whether `a` is `b` or below it.
fn within(a: &str, b: &str) -> bool {
    a == b
        || a.strip_prefix(b)
            .is_some_and(|r| r.starts_with('.') || r.starts_with('['))
}

/// The schema of a kind at a version, from the CRDs of the Go module cache.
fn schema(crds: &[(String, Value)], k: &Kind, version: &str) -> Value {
    let name = format!("{}.{}", k.plural, k.group);
    let (_, crd) = crds
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no CRD {name} in the pinned modules"));
    crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == version)
        .unwrap_or_else(|| panic!("CRD {name} serves no version {version}"))["schema"]["openAPIV3Schema"]
        .clone()
}

fn crds() -> Vec<(String, Value)> {
    capstan_harness::crd_files()
        .unwrap()
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f.path).unwrap();
            let doc = capstan_templates::yaml::parse(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", f.path.display()))
                .into_iter()
                .next()
                .unwrap_or_else(|| panic!("{}: empty", f.path.display()));
            (f.name, doc.value)
        })
        .collect()
}

#[test]
fn every_kind_the_workload_identity_writes_is_in_the_table() {
    let table: BTreeSet<(&str, &str)> = KINDS.iter().map(|k| (k.group, k.plural)).collect();
    let mut missing = Vec::new();
    for r in rules().into_iter().filter(|r| r.holder == Holder::Workload) {
        for res in &r.resources {
            if !table.contains(&(r.group.as_str(), res.as_str())) {
                missing.push(format!("{res}.{}", r.group));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the workload identity may write kinds the reference table does not check: {missing:?}"
    );
}

#[test]
fn every_field_that_looks_like_a_reference_has_a_row() {
    let crds = crds();
    let mut problems = Vec::new();
    let mut walked = 0;
    for k in KINDS.iter().filter(|k| !k.group.is_empty()) {
        for version in k.versions {
            let (mut all, mut suspects) = (BTreeSet::new(), BTreeSet::new());
            schema_paths(&schema(&crds, k, version), "", &mut all, &mut suspects);
            walked += suspects.len();
            let rows: Vec<String> = k.rows.iter().map(spelled).collect();
            // Every row names a field of the schema (a misspelt row checks nothing).
            for (row, path) in k.rows.iter().zip(&rows) {
                if !path.starts_with("metadata.") && !all.contains(path) {
                    problems.push(format!(
                        "{} {version}: row {} is no field of the CRD",
                        k.kind, row.path
                    ));
                }
            }
            // Every suspect has a row at or above it (below it too, for an object without a
            // name: a row on what in it names something).
            for (s, exact) in suspects.iter().filter(|(s, _)| !s.starts_with("status")) {
                let covered = rows
                    .iter()
                    .any(|r| within(s, r) || (!exact && within(r, s)))
                    || EVERY_KIND.iter().any(|r| within(s, &spelled(r)));
                if !covered {
                    problems.push(format!("{} {version}: {s} has no row", k.kind));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the reference table and the CRDs disagree:\n{}",
        problems.join("\n")
    );
    assert!(walked > 50, "only {walked} reference-like fields found");
    println!("{walked} reference-like fields of the CRDs, each with a row");
}

#[test]
fn the_walk_finds_what_it_must() {
    // The heuristics on a schema of their own: a missing row would be found.
    let schema = serde_json::json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "files": {"type": "array", "items": {"type": "object", "properties": {
            "contentFrom": {"type": "object", "properties": {"secret": {"type": "object", "properties": {
                "name": {"type": "string"}, "key": {"type": "string"}}}}}}}},
        "identityRef": {"type": "object", "properties": {"kind": {"type": "string"}, "name": {"type": "string"}}},
        "template": {"type": "object", "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}}},
        "values": {"x-kubernetes-preserve-unknown-fields": true},
        "replicas": {"type": "integer"}}}}});
    let (mut all, mut suspects) = (BTreeSet::new(), BTreeSet::new());
    schema_paths(&schema, "", &mut all, &mut suspects);
    let found: Vec<(&str, bool)> = suspects.iter().map(|(s, e)| (s.as_str(), *e)).collect();
    assert_eq!(
        found,
        [
            ("spec.files[].contentFrom", false),
            ("spec.files[].contentFrom.secret.name", true),
            ("spec.identityRef.name", true),
            ("spec.template.name", true),
            ("spec.template.namespace", true),
            ("spec.values", true),
        ]
    );
}
