//! The policy's rules generated from the reference table (`capstan_layout::tenancy::table`),
//! the same rows validation checks, and from the reserved names
//! (`capstan_layout::tenancy::reserved`).
//!
//! One rule per kind (and one for the rows of every kind): it applies to the workload identity's
//! create and update of that kind alone, and is skipped at its first term for the management
//! identity and at its third for any other kind, so a write costs a handful of comparisons per
//! kind of the table and the full check of its own kind's rows only. Its message names the first
//! row that fails. A row's path becomes `has()` tests of each of its steps (an absent field passes
//! every rule that does not require it, never an error), `[]` an `all()` over the list's items.

use serde_json::{Value, json};

use capstan_layout::tenancy::CLUSTER_NAME_LABEL;
use capstan_layout::tenancy::reserved;
use capstan_layout::tenancy::table::{self, Class, EVERY_KIND, KINDS, Kind, Must, Row, Step};
use capstan_plan::status::Reason;

/// A CEL string literal.
fn lit(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// CEL: whether a name is the cluster's (`<cluster>` or `<cluster>-…`).
pub(super) fn named(expr: &str) -> String {
    format!("({expr} == variables.cluster || {expr}.startsWith(variables.cluster + '-'))")
}

/// CEL for a row's path below `base`: `leaf(present, value)` with `present` the condition that
/// the field is there (each step tested in turn: `has()` tests the last field of a path only)
/// and `value` the field; a list step becomes an `all()` over the items (`depth` names the item
/// variable).
fn walk(
    base: &str,
    steps: &[Step<'_>],
    depth: usize,
    leaf: &dyn Fn(&str, &str) -> String,
) -> String {
    let mut present: Vec<String> = Vec::new();
    let mut expr = base.to_string();
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Field(k) => {
                present.push(format!("has({expr}.{k})"));
                expr = format!("{expr}.{k}");
            }
            Step::Key(k) => {
                present.push(format!("{expr} != null && {} in {expr}", lit(k)));
                expr = format!("{expr}[{}]", lit(k));
            }
            Step::Each => {
                // A list sent as null is no list (`has()` holds for a null field).
                present.push(format!("{expr} != null"));
                let item = format!("x{depth}");
                let inner = walk(&item, &steps[i + 1..], depth + 1, leaf);
                let all = format!("{expr}.all({item}, {inner})");
                return if present.is_empty() {
                    all
                } else {
                    format!("(!({}) || {all})", present.join(" && "))
                };
            }
        }
    }
    if !present.is_empty() {
        // A field sent as null is no field (`has()` holds for a null field).
        present.push(format!("{expr} != null"));
    }
    let present = if present.is_empty() {
        "true".to_string()
    } else {
        format!("({})", present.join(" && "))
    };
    leaf(&present, &expr)
}

/// CEL: whether one row holds.
fn check(row: &Row) -> Option<String> {
    let steps = table::steps(row.path);
    let kept = row.class == Class::Fillable;
    // The same field on the object as it was (rows with a list step have no `kept` rule).
    let was = |then: &dyn Fn(&str) -> String| {
        walk("oldObject", &steps, 0, &|p, v| {
            format!("(oldObject != null && {p} && {})", then(v))
        })
    };
    let leaf = |p: &str, v: &str| -> String {
        match row.must {
            Must::Free => "true".into(),
            Must::Own => format!("(!{p} || {})", named(v)),
            Must::OwnUnless(path, exempt) => {
                // Each step of the exempting field tested in turn, as `walk` does.
                let mut expr = "object".to_string();
                let mut present = Vec::new();
                for k in path.split('.') {
                    present.push(format!("has({expr}.{k})"));
                    expr = format!("{expr}.{k}");
                }
                format!(
                    "(!{p} || {} || ({} && {expr} == {}))",
                    named(v),
                    present.join(" && "),
                    lit(exempt)
                )
            }
            Must::Cluster => format!("(!{p} || {v} == variables.cluster)"),
            Must::OwnNamespace => format!("(!{p} || {v} in ['', request.namespace])"),
            Must::OneOf(allowed) => {
                let list: Vec<String> = allowed.iter().map(|a| lit(a)).collect();
                let unchanged = if kept {
                    format!(" || {}", was(&|old| format!("{old} == {v}")))
                } else {
                    String::new()
                };
                format!("(!{p} || {v} in [{}]{unchanged})", list.join(", "))
            }
            Must::Equals(want) => format!("({p} && {v} == {})", lit(want)),
            Must::Selects => {
                let label = lit(CLUSTER_NAME_LABEL);
                format!(
                    "({p} && has({v}.matchLabels) && {label} in {v}.matchLabels && {v}.matchLabels[{label}] == variables.cluster)"
                )
            }
            Must::NonEmpty => format!("({p} && size({v}) > 0)"),
            Must::Absent => format!("!{p}"),
            Must::Owners => format!(
                "(!{p} || {v}.all(r, {} || (r.kind == 'Cluster' && r.apiVersion.startsWith('cluster.x-k8s.io/') && r.name == variables.cluster && !(has(r.controller) && r.controller == true) && !(has(r.blockOwnerDeletion) && r.blockOwnerDeletion == true))))",
                was(&|old| format!("{old}.exists(o, o.uid == r.uid)"))
            ),
            Must::Unprefixed(prefixes) => {
                let allowed: Vec<String> = prefixes
                    .iter()
                    .map(|x| format!("k.startsWith({})", lit(x)))
                    .collect();
                let unchanged = if kept {
                    format!(
                        " || {}",
                        was(&|old| format!("k in {old} && {old}[k] == {v}[k]"))
                    )
                } else {
                    String::new()
                };
                format!(
                    "(!{p} || {v}.all(k, !k.contains('/') || {}{unchanged}))",
                    allowed.join(" || ")
                )
            }
        }
    };
    (row.must != Must::Free).then(|| walk("object", &steps, 0, &leaf))
}

fn reason(class: Class) -> Reason {
    match class {
        Class::Reference => Reason::ForeignReference,
        Class::Selector => Reason::ForeignSelector,
        Class::Fillable => Reason::FillableSecret,
    }
}

/// CEL: the message of a failing row.
fn message(row: &Row) -> String {
    let describe = row.must.describe();
    let mut parts = describe.split("<c>");
    let mut text = lit(parts.next().unwrap_or(""));
    for p in parts {
        text = format!("{text} + variables.cluster + {}", lit(p));
    }
    format!(
        "{} + variables.subject + {} + {text} + {}",
        lit(&format!("{}: ", reason(row.class))),
        lit(&format!(" {} must be ", row.path)),
        lit(&format!(": {}", row.why)),
    )
}

/// CEL: a tenant's request for this resource.
fn of(group: &str, plural: &str) -> String {
    format!(
        "request.resource.group == {} && request.resource.resource == {}",
        lit(group),
        lit(plural)
    )
}

/// One validation over `rows`, for requests `applies` selects.
fn validation(applies: &str, rows: &[&Row]) -> Option<Value> {
    let checks: Vec<(String, &Row)> = rows
        .iter()
        .filter_map(|r| check(r).map(|c| (c, *r)))
        .collect();
    let (_, last) = checks.last()?;
    let expression = format!(
        "!variables.tenant || request.operation == 'DELETE' || !({applies}) || ({})",
        checks
            .iter()
            .map(|(c, _)| c.as_str())
            .collect::<Vec<_>>()
            .join(" && ")
    );
    // The first failing row's message: c1 ? (c2 ? (… m_n) : m2) : m1.
    let mut message_expression = message(last);
    for (c, r) in checks.iter().rev().skip(1) {
        message_expression = format!("({c} ? {message_expression} : {})", message(r));
    }
    Some(json!({
        "expression": expression,
        "messageExpression": message_expression,
        "reason": "Forbidden",
    }))
}

/// The rules of the reference table: every kind's rows, then each kind's.
pub(super) fn references() -> Vec<Value> {
    let every: Vec<&Row> = EVERY_KIND.iter().collect();
    let mut out: Vec<Value> = validation("true", &every).into_iter().collect();
    for k in KINDS {
        let rows: Vec<&Row> = k.rows.iter().collect();
        out.extend(validation(&of(k.group, k.plural), &rows));
    }
    out
}

/// CEL: whether the request is for a kind of the table at one of its versions.
fn checked_kind(k: &Kind) -> String {
    let versions: Vec<String> = k.versions.iter().map(|v| lit(v)).collect();
    format!(
        "({} && request.resource.version in [{}])",
        of(k.group, k.plural),
        versions.join(", ")
    )
}

/// The rule that a workload writes only the table's kinds, at its versions.
pub(super) fn kinds() -> Value {
    let kinds: Vec<String> = KINDS.iter().map(checked_kind).collect();
    json!({
        "expression": format!(
            "!variables.tenant || request.operation == 'DELETE' || {}",
            kinds.join(" || ")
        ),
        "messageExpression": format!(
            "{} + variables.subject + {}",
            lit(&format!("{}: ", Reason::UncheckedKind)),
            lit(" is of a kind or version whose references the tenancy policy does not check (a workload writes the kinds and versions of capstan's reference table)")
        ),
        "reason": "Forbidden",
    })
}

/// The rules of reserved names: a Secret or ConfigMap named as controllers name another
/// cluster's, and a cluster named so that its generated names are another's.
pub(super) fn reserved_names() -> Vec<Value> {
    let suffixes: Vec<String> = reserved::RESERVED_SUFFIXES
        .iter()
        .map(|(s, _)| lit(s))
        .collect();
    let kinds: Vec<String> = reserved::RESERVED_KINDS
        .iter()
        .map(|k| lit(&format!("{}s", k.to_lowercase())))
        .collect();
    let ends: Vec<String> = reserved::reserved_cluster_suffixes()
        .iter()
        .map(|t| lit(t))
        .collect();
    let prefix = lit(&format!("{}: ", Reason::ReservedName));
    vec![
        json!({
            "expression": format!(
                "!variables.tenant || request.operation == 'DELETE' || !(request.resource.group == '' && request.resource.resource in [{}]) || [{}].all(s, !request.name.endsWith(s) || request.name == variables.cluster + s)",
                kinds.join(", "),
                suffixes.join(", ")
            ),
            "messageExpression": format!(
                "{prefix} + variables.subject + {}",
                lit(" is named as controllers name another cluster's Secrets and ConfigMaps (its CA, kubeconfig, init lock): that cluster's alone, also before it exists")
            ),
            "reason": "Forbidden",
        }),
        json!({
            "expression": format!(
                "!variables.tenant || request.operation == 'DELETE' || ![{}].exists(t, variables.cluster.endsWith(t) && variables.cluster.size() > t.size())",
                ends.join(", ")
            ),
            "messageExpression": format!(
                "{prefix} + variables.subject + {} + variables.cluster + {}",
                lit(" is written for cluster "),
                lit(", whose name makes names controllers generate for it another cluster's")
            ),
            "reason": "Forbidden",
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_become_has_chains() {
        let kcp = table::kind(
            "controlplane.cluster.x-k8s.io/v1beta2",
            "KubeadmControlPlane",
        )
        .unwrap();
        let files = kcp.rows.iter().find(|r| r.path.contains("files")).unwrap();
        assert_eq!(
            check(files).unwrap(),
            "(!(has(object.spec) && has(object.spec.kubeadmConfigSpec) && has(object.spec.kubeadmConfigSpec.files) && object.spec.kubeadmConfigSpec.files != null) || object.spec.kubeadmConfigSpec.files.all(x0, (!(has(x0.contentFrom) && has(x0.contentFrom.secret) && has(x0.contentFrom.secret.name) && x0.contentFrom.secret.name != null) || (x0.contentFrom.secret.name == variables.cluster || x0.contentFrom.secret.name.startsWith(variables.cluster + '-')))))"
        );
        assert_eq!(
            check(&EVERY_KIND[0]).unwrap(),
            "(!(has(object.metadata) && has(object.metadata.labels) && object.metadata.labels != null && \"cluster.x-k8s.io/cluster-name\" in object.metadata.labels && object.metadata.labels[\"cluster.x-k8s.io/cluster-name\"] != null) || object.metadata.labels[\"cluster.x-k8s.io/cluster-name\"] == variables.cluster)"
        );
        let hcp = table::kind("addons.cluster.x-k8s.io/v1alpha1", "HelmChartProxy").unwrap();
        let ns = hcp
            .rows
            .iter()
            .find(|r| r.path.ends_with("secret.namespace"))
            .unwrap();
        assert!(message(ns).starts_with("\"ForeignReference: \" + variables.subject"));
        let secret = table::kind("v1", "Secret").unwrap();
        assert!(check(&secret.rows[0]).unwrap().contains("oldObject != null && (has(oldObject.type) && oldObject.type != null) && oldObject.type == object.type"));
    }
}
