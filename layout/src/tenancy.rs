//! Path-scoped tenancy: what a cluster directory may put on the management cluster.
//!
//! Developers create workload clusters through pull requests without holding admin credentials,
//! so a workload directory is confined: every object it produces lives in its cluster's
//! namespace and is of a kind from a short allow-list (no RBAC, nothing cluster-scoped), and
//! Secrets in the repository carry no data (credentials stay on the management cluster, placed
//! there by an admin). Management directories belong to admins and may hold any namespaced or
//! cluster-scoped object, but still no Secret data: Git is not a secret store.

use capstan_templates::diag::{Code, Diagnostic};
use capstan_templates::spec::{Cluster, ExtraObject};
use serde_json::Value;

/// `(apiVersion group, kind)` a workload directory may add beside its EKS Anywhere objects.
pub const WORKLOAD_ALLOWED: &[(&str, &str)] = &[
    ("", "ConfigMap"),
    ("", "Secret"),
    ("addons.cluster.x-k8s.io", "HelmChartProxy"),
    ("addons.cluster.x-k8s.io", "ClusterResourceSet"),
];

fn group(api_version: &str) -> &str {
    api_version.split_once('/').map(|(g, _)| g).unwrap_or("")
}

fn diag(cluster: &Cluster, o: &ExtraObject, path: &str, code: Code, msg: String) -> Diagnostic {
    Diagnostic::error(code, msg)
        .in_file(&o.file)
        .at(o.pos(path))
        .for_cluster(&cluster.name)
}

fn subject(v: &Value) -> String {
    capstan_templates::identity::subject_of(v)
}

/// Checks the extra objects of a workload cluster directory.
pub fn check_workload(cluster: &Cluster) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for o in &cluster.extra_objects {
        let v = o.value();
        let api = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
        if !WORKLOAD_ALLOWED.contains(&(group(api), kind)) {
            let allowed = WORKLOAD_ALLOWED
                .iter()
                .map(|(_, k)| *k)
                .collect::<Vec<_>>()
                .join(", ");
            out.push(diag(cluster, o, "", Code::ForbiddenKind, format!("{kind} ({api}) is not allowed in a workload cluster directory; allowed: {allowed}")));
            continue;
        }
        check_namespace(cluster, o, &mut out);
        check_secret(cluster, o, &mut out);
    }
    out
}

/// Checks the extra objects of a management cluster directory.
pub fn check_management(cluster: &Cluster) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for o in &cluster.extra_objects {
        check_secret(cluster, o, &mut out);
    }
    out
}

fn check_namespace(cluster: &Cluster, o: &ExtraObject, out: &mut Vec<Diagnostic>) {
    if let Some(ns) = o
        .value()
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        && ns != cluster.namespace
    {
        out.push(diag(cluster, o, "metadata.namespace", Code::ForeignNamespace, format!("{} is in namespace `{ns}`; a workload directory may only create objects in its cluster's namespace `{}`", subject(o.value()), cluster.namespace)));
    }
}

fn check_secret(cluster: &Cluster, o: &ExtraObject, out: &mut Vec<Diagnostic>) {
    let v = o.value();
    if v.get("kind").and_then(Value::as_str) != Some("Secret")
        || !group(v.get("apiVersion").and_then(Value::as_str).unwrap_or("")).is_empty()
    {
        return;
    }
    let has = |k: &str| {
        v.get(k)
            .is_some_and(|d| d.as_object().is_some_and(|m| !m.is_empty()))
    };
    if let Some(key) = ["data", "stringData"].into_iter().find(|k| has(k)) {
        out.push(diag(
            cluster,
            o,
            key,
            Code::SecretWithData,
            format!(
                "{} carries data; keep credentials on the management cluster, never in Git",
                subject(v)
            ),
        ));
    }
}
