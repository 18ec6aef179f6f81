//! Path-scoped tenancy: what a cluster directory may put on the management cluster.
//!
//! Developers create workload clusters through pull requests without holding admin credentials,
//! so a workload directory is confined to its own cluster. The invariant: files under
//! `clusters/<mgmt>/workload-clusters/<name>/` create, change or delete on the management cluster
//! only objects that belong to cluster `<name>`, and make no controller act on any other cluster.
//! Here is what validation enforces of it (the agent applies nothing of a cluster with an error,
//! and a server-side boundary holds the same rules should a check here have a gap: see the
//! agent's `install::tenancy`):
//!
//! - **Kinds**: besides its EKS Anywhere objects, a workload directory may add ConfigMaps,
//!   Secrets without data, HelmChartProxies and ClusterResourceSets ([`WORKLOAD_ALLOWED`]), at
//!   the versions of the reference table ([`table`]): no RBAC, nothing cluster-scoped, no
//!   Cluster API object that names a cluster.
//! - **Namespaces**: its cluster's namespace, for every object; and that namespace is not
//!   reserved ([`reserved_namespace`]): not Kubernetes' own, not capstan's, not a controller's
//!   `*-system` (but EKS Anywhere's shared `eksa-system`, where EKS-A puts every cluster by
//!   default). Clusters share namespaces (the management cluster's too), so namespaces alone
//!   confine nothing: names and labels do.
//! - **Names**: every object of the directory is named `<name>` or `<name>-…`, and not for a
//!   longer cluster name of the fleet (`dev` may not write `dev-prod-…` while `dev-prod` exists):
//!   a name says which cluster an object is, in a namespace clusters share
//!   ([`owner_of`]). Rendered objects are named from the cluster's name, so they follow.
//! - **Selectors and references**: every field of every kind a workload writes that names
//!   another object (a selector, a Secret, a template, an owner, a cluster) is checked against
//!   the cluster, by the one table the API server's policy is generated from too
//!   ([`table`], read by [`references`]): what it names is `<name>`'s, in its namespace; a
//!   selector requires `cluster.x-k8s.io/cluster-name: <name>`; no owner references. Rendered
//!   objects are read too (once per render).
//! - **Values templates** (a HelmChartProxy's `valuesTemplate`, run by the add-on controller on
//!   the management cluster) are read as Go's `text/template` reads them ([`crate::gotemplate`])
//!   and may call only Go's builtins and Sprig's pure functions: not those that read the
//!   controller's environment or network (`env`, `expandenv`, `getHostByName`), nor the clock,
//!   randomness or generated keys. A template Go would refuse is refused, in management
//!   directories too.
//! - **Secrets** in the repository carry no data (credentials stay on the management cluster,
//!   placed there by an admin), in management directories too: Git is not a secret store; and a
//!   workload's Secret is of a type and carries annotations no controller fills it in by (a
//!   `kubernetes.io/service-account-token` Secret would receive a management account's token).
//! - **Names controllers generate** for a cluster (its CA, kubeconfig, init lock: [`reserved`])
//!   are that cluster's alone, also before it exists: `evil` may not write `evil-prod-ca`.
//!
//! Management directories belong to admins (protect them with branch protection and CODEOWNERS)
//! and may hold any namespaced or cluster-scoped object; a tombstone there is refused while the
//! management cluster still manages workload clusters (see `fleet`).

pub mod references;
pub mod reserved;
pub mod table;

use std::collections::BTreeSet;
use std::path::PathBuf;

use capstan_templates::diag::{Code, Diagnostic};
use capstan_templates::spec::{Cluster, ExtraObject};
use capstan_templates::yaml::Pos;
use serde_json::Value;

use crate::gotemplate::{self, Class, Finding};

/// `(apiVersion group, kind)` a workload directory may add beside its EKS Anywhere objects.
pub const WORKLOAD_ALLOWED: &[(&str, &str)] = &[
    ("", "ConfigMap"),
    ("", "Secret"),
    ("addons.cluster.x-k8s.io", "HelmChartProxy"),
    ("addons.cluster.x-k8s.io", "ClusterResourceSet"),
];

/// EKS Anywhere's shared namespace: where it puts every cluster's objects by default.
pub const SHARED_NAMESPACE: &str = "eksa-system";

/// The label Cluster API selects clusters by (ClusterResourceSets, HelmChartProxies) and marks
/// a cluster's objects with.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// Namespaces no workload cluster may use, besides every `kube-*` ([`RESERVED_PREFIX`]) and
/// every `*-system` but [`SHARED_NAMESPACE`] ([`RESERVED_SUFFIX`]).
pub const RESERVED_NAMESPACES: &[&str] = &["default", "capstan-system"];
/// Kubernetes' own namespaces.
pub const RESERVED_PREFIX: &str = "kube-";
/// Controllers' namespaces (`capi-system`, `capv-system`, ...), where their credentials live.
pub const RESERVED_SUFFIX: &str = "-system";

/// Why `namespace` is reserved for workload clusters, if it is.
pub fn reserved_namespace(namespace: &str) -> Option<&'static str> {
    if namespace == "default" || namespace.starts_with(RESERVED_PREFIX) {
        Some("it is one of Kubernetes' own namespaces")
    } else if RESERVED_NAMESPACES.contains(&namespace) {
        Some("it is capstan's own namespace (the agent, its credentials and its records)")
    } else if namespace.ends_with(RESERVED_SUFFIX) && namespace != SHARED_NAMESPACE {
        Some(
            "`*-system` namespaces hold controllers and their credentials (EKS Anywhere's shared `eksa-system` excepted)",
        )
    } else {
        None
    }
}

/// The cluster an object name belongs to: the longest cluster name `k` of `names` with
/// `name == k` or `name` starting with `k-`.
pub fn owner_of<'a>(name: &str, names: &'a BTreeSet<String>) -> Option<&'a str> {
    let mut best: Option<&'a str> = names.get(name).map(String::as_str);
    if best.is_none() {
        for (i, _) in name
            .match_indices('-')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            if let Some(k) = names.get(&name[..i]) {
                best = Some(k.as_str());
                break;
            }
        }
    }
    best
}

/// Whether `name` is `cluster` or `cluster-…` and no longer cluster name of `names` claims it.
pub fn named_for(name: &str, cluster: &str, names: &BTreeSet<String>) -> bool {
    let prefixed = name == cluster
        || name
            .strip_prefix(cluster)
            .is_some_and(|r| r.starts_with('-'));
    prefixed && owner_of(name, names).is_none_or(|o| o == cluster)
}

/// What the checks of a workload directory need to know of the rest of the fleet.
#[derive(Debug, Clone, Copy)]
pub struct Fleet<'a> {
    /// The directory's name: the cluster it is (tenancy is by path; a Cluster named otherwise
    /// is its own error, `dir-name-mismatch`).
    pub directory: &'a str,
    /// Every cluster name of the repository.
    pub names: &'a BTreeSet<String>,
    /// The directory's SOPS files (checked by `fleet::sealed`): their Secrets carry
    /// ciphertext, decrypted by the agent.
    pub sealed: &'a BTreeSet<PathBuf>,
}

fn group(api_version: &str) -> &str {
    api_version.split_once('/').map(|(g, _)| g).unwrap_or("")
}

fn diag(cluster: &str, o: &ExtraObject, path: &str, code: Code, msg: String) -> Diagnostic {
    Diagnostic::error(code, msg)
        .in_file(&o.file)
        .at(o.pos(path))
        .for_cluster(cluster)
}

fn subject(v: &Value) -> String {
    capstan_templates::identity::subject_of(v)
}

fn str_at<'v>(v: &'v Value, pointer: &str) -> Option<&'v str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// Checks a workload cluster directory: its namespace, the names of all its objects, and its
/// extra objects' kinds, namespaces, selectors and references.
pub fn check_workload(cluster: &Cluster, fleet: Fleet<'_>) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let c = fleet.directory;
    if let Some(why) = reserved_namespace(&cluster.namespace) {
        out.push(
            Diagnostic::error(
                Code::ReservedNamespace,
                format!(
                    "workload cluster `{c}` may not use namespace `{}`: {why}",
                    cluster.namespace
                ),
            )
            .in_file(&cluster.source.file)
            .at(cluster.source.pos("metadata.namespace"))
            .for_cluster(c),
        );
    }
    let mut forbidden = BTreeSet::new();
    for o in &cluster.extra_objects {
        let v = o.value();
        let api = str_at(v, "/apiVersion").unwrap_or("");
        let kind = str_at(v, "/kind").unwrap_or("");
        if !WORKLOAD_ALLOWED.contains(&(group(api), kind)) {
            let allowed = WORKLOAD_ALLOWED
                .iter()
                .map(|(_, k)| *k)
                .collect::<Vec<_>>()
                .join(", ");
            out.push(diag(c, o, "", Code::ForbiddenKind, format!("{kind} ({api}) is not allowed in a workload cluster directory; allowed: {allowed}")));
            forbidden.insert((kind, str_at(v, "/metadata/name").unwrap_or("")));
            continue;
        }
        check_namespace(c, &cluster.namespace, o, &mut out);
        check_secret(c, o, fleet.sealed, &mut out);
        check_table(c, &cluster.namespace, o, fleet, &mut out);
        if kind == "HelmChartProxy" {
            check_values_template(c, o, true, &mut out);
        }
    }
    if let Some((base, long, short)) = reserved::reserved_cluster_name(c) {
        out.push(
            Diagnostic::error(
                Code::ReservedName,
                format!(
                    "cluster `{c}`'s `{c}{short}` would be cluster `{base}`'s `{base}{long}`: controllers generate both, so a cluster may not be named `…{}`",
                    &c[base.len()..]
                ),
            )
            .in_file(&cluster.source.file)
            .at(cluster.source.pos("metadata.name"))
            .for_cluster(c),
        );
    }
    // Names, once the Cluster's own name is the directory's (else that is the error).
    if cluster.name == c {
        for s in &cluster.sources {
            if named_for(&s.name, c, fleet.names)
                || forbidden.contains(&(s.kind.as_str(), s.name.as_str()))
            {
                continue;
            }
            let why = match owner_of(&s.name, fleet.names) {
                Some(other) if other != c => format!("the name belongs to cluster `{other}`"),
                _ => format!("a workload directory names its objects `{c}` or `{c}-…`"),
            };
            out.push(
                Diagnostic::error(
                    Code::NameOutsideCluster,
                    format!(
                        "{} `{}` is not named for cluster `{c}`: {why}",
                        s.kind, s.name
                    ),
                )
                .in_file(&s.file)
                .at(s.pos)
                .for_cluster(c),
            );
        }
    }
    out
}

/// Checks the extra objects of a management cluster directory (`sealed`: its SOPS files).
pub fn check_management(cluster: &Cluster, sealed: &BTreeSet<PathBuf>) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for o in &cluster.extra_objects {
        check_secret(&cluster.name, o, sealed, &mut out);
        check_values_template(&cluster.name, o, false, &mut out);
    }
    out
}

fn check_namespace(cluster: &str, namespace: &str, o: &ExtraObject, out: &mut Vec<Diagnostic>) {
    if let Some(ns) = str_at(o.value(), "/metadata/namespace")
        && ns != namespace
    {
        out.push(diag(cluster, o, "metadata.namespace", Code::ForeignNamespace, format!("{} is in namespace `{ns}`; a workload directory may only create objects in its cluster's namespace `{namespace}`", subject(o.value()))));
    }
}

fn check_secret(
    cluster: &str,
    o: &ExtraObject,
    sealed: &BTreeSet<PathBuf>,
    out: &mut Vec<Diagnostic>,
) {
    let v = o.value();
    if str_at(v, "/kind") != Some("Secret")
        || !group(str_at(v, "/apiVersion").unwrap_or("")).is_empty()
        || sealed.contains(&o.file)
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
                "{} carries {key} in plain text; credentials are never kept in Git unencrypted: encrypt it for the fleet's recipients (`capstan secret encrypt FILE`, or `sops encrypt --age <fleet.yaml's spec.sops.ageRecipients> --encrypted-regex '^(data|stringData)$' --in-place FILE`, with annotation {}: {}), or create it on the management cluster by hand",
                subject(v),
                crate::sops::ENCRYPTED_FOR,
                crate::sops::management_scope("<management>", cluster),
            ),
        ));
    }
}

/// An extra object's version, its reference-table rows ([`table`]) and its name if controllers
/// generate it for clusters ([`reserved`]), reported at each field.
fn check_table(
    c: &str,
    namespace: &str,
    o: &ExtraObject,
    fleet: Fleet<'_>,
    out: &mut Vec<Diagnostic>,
) {
    let v = o.value();
    let api = str_at(v, "/apiVersion").unwrap_or("");
    let kind = str_at(v, "/kind").unwrap_or("");
    if let Some(k) = table::kind(api, kind)
        && !k.covers(api)
    {
        out.push(diag(c, o, "apiVersion", Code::ForbiddenKind, format!("{kind} is written at {api}; a workload directory writes {kind} at {} (the versions whose fields the tenancy checks know)", versions(k))));
        return;
    }
    let owns = |n: &str| named_for(n, c, fleet.names);
    let owner = references::Owner {
        cluster: c,
        namespace,
        owns: &owns,
    };
    for x in references::check(v, &owner) {
        let message = format!("{}'s {}", subject(v), violation(&x, c));
        out.push(diag(c, o, &x.at, code(&x), message));
    }
    if let Some(d) = squat(c, v, &owns) {
        out.push(diag(c, o, "metadata.name", Code::ReservedName, d));
    }
}

fn versions(k: &table::Kind) -> String {
    let group = if k.group.is_empty() {
        String::new()
    } else {
        format!("{}/", k.group)
    };
    k.versions
        .iter()
        .map(|v| format!("{group}{v}"))
        .collect::<Vec<_>>()
        .join(" or ")
}

fn code(v: &references::Violation) -> Code {
    match v.row.class {
        table::Class::Reference => Code::ForeignReference,
        table::Class::Selector => Code::ForeignSelector,
        table::Class::Fillable => Code::FillableSecret,
    }
}

/// What is wrong with a field, to follow the object's subject (`Kind/ns/name's …`).
fn violation(v: &references::Violation, c: &str) -> String {
    let (at, found, why) = (&v.at, &v.found, v.row.why);
    match v.row.must {
        table::Must::Own | table::Must::OwnUnless(..) => format!(
            "{at} names {found}, which is not cluster `{c}`'s (its objects are named `{c}` or `{c}-…`): {why}"
        ),
        must => format!(
            "{at} is {found}; it must be {}: {why}",
            must.describe().replace("<c>", c)
        ),
    }
}

/// Why a Secret or ConfigMap named for cluster `c` (`owns`; another name is refused as such) is
/// another cluster's, if it is ([`reserved`]).
fn squat(c: &str, v: &Value, owns: &dyn Fn(&str) -> bool) -> Option<String> {
    let kind = str_at(v, "/kind")?;
    if !reserved::RESERVED_KINDS.contains(&kind) || !group(str_at(v, "/apiVersion")?).is_empty() {
        return None;
    }
    let name = str_at(v, "/metadata/name").filter(|n| owns(n))?;
    let (other, suffix) = reserved::squatted(name, c)?;
    let who = reserved::RESERVED_SUFFIXES
        .iter()
        .find(|(s, _)| *s == suffix)
        .map_or("", |(_, w)| *w);
    Some(format!(
        "{kind} `{name}` is named as controllers name cluster `{other}`'s `{suffix}` ({who}): it is cluster `{other}`'s alone, also before that cluster exists"
    ))
}

/// Checks a workload cluster's rendered objects (all but its extra objects, checked where they
/// are written) against the reference table and the reserved names: a spec must not render a
/// reference to another cluster's object. Reported at the object's document in the directory
/// (EKS Anywhere's objects) or at the Cluster's name. Run once per render: the result depends
/// on the cluster alone.
pub fn check_rendered(cluster: &Cluster, objects: &[Value]) -> Vec<Diagnostic> {
    let c = cluster.name.as_str();
    let extra: BTreeSet<(&str, &str)> = cluster
        .extra_objects
        .iter()
        .map(|o| {
            (
                str_at(o.value(), "/kind").unwrap_or(""),
                str_at(o.value(), "/metadata/name").unwrap_or(""),
            )
        })
        .collect();
    let owns = |n: &str| n == c || n.strip_prefix(c).is_some_and(|r| r.starts_with('-'));
    let mut out = Vec::new();
    for v in objects {
        let (kind, name) = (
            str_at(v, "/kind").unwrap_or(""),
            str_at(v, "/metadata/name").unwrap_or(""),
        );
        if extra.contains(&(kind, name)) {
            continue;
        }
        let namespace = str_at(v, "/metadata/namespace").unwrap_or(&cluster.namespace);
        let owner = references::Owner {
            cluster: c,
            namespace,
            owns: &owns,
        };
        let found: Vec<(Code, String)> = references::check(v, &owner)
            .iter()
            .map(|x| {
                let message = format!("renders {}, whose {}", subject(v), violation(x, c));
                (code(x), message)
            })
            .chain(squat(c, v, &owns).map(|d| (Code::ReservedName, format!("renders {d}"))))
            .collect();
        let at = cluster
            .sources
            .iter()
            .find(|s| s.kind == kind && s.name == name);
        for (code, message) in found {
            let d = Diagnostic::error(code, message).for_cluster(c);
            out.push(match at {
                Some(s) => d.in_file(&s.file).at(s.pos),
                None => d
                    .in_file(&cluster.source.file)
                    .at(cluster.source.pos("metadata.name")),
            });
        }
    }
    out
}

/// A HelmChartProxy's values template parses as Go parses it (CAAPH would refuse it otherwise);
/// of a workload directory (`tenant`), it calls only pure functions.
fn check_values_template(c: &str, o: &ExtraObject, tenant: bool, out: &mut Vec<Diagnostic>) {
    let v = o.value();
    let path = "spec.valuesTemplate";
    let (Some("HelmChartProxy"), Some(t)) = (str_at(v, "/kind"), str_at(v, "/spec/valuesTemplate"))
    else {
        return;
    };
    // CAAPH names the template `<chartName>-<cluster>`.
    let name = format!("{}-{c}", str_at(v, "/spec/chartName").unwrap_or_default());
    // Where a template line is in the file: exact in a literal block (`valuesTemplate: |`),
    // else the key's line (the message gives the template's own line). The end of the template
    // (an unexpected EOF) is the end of its last line.
    let at = |pos: usize| match o.doc.literal_start(path) {
        Some(start) => {
            let pos = pos.min(t.trim_end().len());
            Pos {
                line: start.line + t[..pos].matches('\n').count(),
                column: start.column + gotemplate::column(t, pos) - 1,
            }
        }
        None => o.pos(path),
    };
    let findings = gotemplate::check(&name, t);
    for f in findings {
        let (pos, code, msg) = match f {
            Finding::Syntax(e) => (
                e.pos,
                Code::TemplateSyntax,
                format!(
                    "{}'s valuesTemplate is not a template Go's text/template parses (line {} of the template: {}); the add-on controller would refuse it",
                    subject(v),
                    e.line,
                    e.message
                ),
            ),
            Finding::Refused { .. } if !tenant => continue,
            Finding::Refused { call, class } => {
                let (code, why) = match class {
                    Class::Environment => (
                        Code::ForeignReference,
                        "which reads the add-on controller's environment or network, not the cluster's",
                    ),
                    _ => (
                        Code::TemplateFunction,
                        "whose result is not a function of the cluster (the clock, randomness, generated keys): the add-on controller would render other values at each reconcile and upgrade the release every time",
                    ),
                };
                (
                    call.pos,
                    code,
                    format!(
                        "{}'s valuesTemplate calls `{}` (line {} of the template), {why}; a workload directory's values templates may call Go's builtins and Sprig's pure functions",
                        subject(v),
                        call.name,
                        call.line
                    ),
                )
            }
        };
        out.push(
            Diagnostic::error(code, msg)
                .in_file(&o.file)
                .at(at(pos))
                .for_cluster(c),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> BTreeSet<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_name_belongs_to_the_longest_cluster_name_it_starts_with() {
        let fleet = names(&["mgmt", "dev", "dev-prod", "a"]);
        assert_eq!(owner_of("dev", &fleet), Some("dev"));
        assert_eq!(owner_of("dev-md-0", &fleet), Some("dev"));
        assert_eq!(owner_of("dev-prod", &fleet), Some("dev-prod"));
        assert_eq!(owner_of("dev-prod-md-0", &fleet), Some("dev-prod"));
        assert_eq!(owner_of("development", &fleet), None);
        assert_eq!(owner_of("coredns", &fleet), None);
        assert!(named_for("dev-md-0", "dev", &fleet));
        assert!(!named_for("dev-prod-cm", "dev", &fleet));
        assert!(named_for("dev-prod-cm", "dev-prod", &fleet));
        assert!(!named_for("mgmt-vsphere-credentials", "dev", &fleet));
        assert!(!named_for("devx", "dev", &fleet));
        assert!(!named_for("a", "dev", &fleet));
        // A cluster not (yet) in the fleet claims nothing.
        assert!(named_for("dev-stage-cm", "dev", &fleet));
    }

    #[test]
    fn reserved_namespaces() {
        for ns in [
            "default",
            "kube-system",
            "kube-public",
            "kube-node-lease",
            "capstan-system",
            "capi-system",
            "caaph-system",
        ] {
            assert!(reserved_namespace(ns).is_some(), "{ns}");
        }
        for ns in ["eksa-system", "team-dev", "systems", "platform"] {
            assert!(reserved_namespace(ns).is_none(), "{ns}");
        }
    }
}
