//! Add-ons: plain manifests capstan applies *inside* a workload cluster, once Cluster API has
//! written its kubeconfig and the cluster answers.
//!
//! ```text
//! clusters/<mgmt>/workload-clusters/<name>/addons/**.yaml   the cluster's own add-ons
//! clusters/<mgmt>/addons/<set>/**.yaml                      a shared set (admin-owned): every
//!                                                           workload cluster of <mgmt>, or those
//!                                                           fleet.yaml's `addons[]` selects
//! ```
//!
//! Why here and not in the cluster directory beside the spec: the spec's files are applied to
//! the management cluster, under the tenancy rules (the cluster's namespace, no cluster-scoped
//! kinds). An add-on goes into the tenant's own cluster, so it may be any kind there (a CRD, a
//! ClusterRole, a Namespace); keeping it in its own directory makes the destination a matter of
//! the path, never of what a document says. Nothing here is ever applied to the management
//! cluster: the agent reaches add-ons' destination only through the cluster's kubeconfig.
//!
//! Validation is that of every other file (size, symlinks, YAML bombs, binary and non-UTF-8
//! files: [`crate::fleet`]'s file rules), plus: each document an object with `apiVersion`, `kind`
//! and `metadata.name`; no `List` kinds; no Secret carrying data (credentials stay out of Git);
//! no object twice in one cluster's set; at most [`MAX_OBJECTS`] per cluster. An error in a
//! cluster's own add-ons is that cluster's (nothing of it is applied, the others are); an error
//! in a shared set is the management cluster's, and the workload clusters that take the set are
//! held with it.
//!
//! Besides what is written there, a cluster's add-ons include what capstan renders to run inside
//! it: the AWS IAM authenticator of an AWSIamConfig (`rendered`).
//!
//! Apply order ([`rank`]): CustomResourceDefinitions and Namespaces first (they must exist before
//! what lives in them), then cluster policy (quotas, priority and storage classes), identities
//! and RBAC, configuration, Services, the workloads, and admission webhooks and APIServices last
//! (a webhook registered before its Service answers would refuse everything after it). Within a
//! rank, the order of the files (own add-ons before shared sets, each by path) and of the
//! documents in them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use capstan_templates::diag::{Code, Diagnostic};
use capstan_templates::identity;
use capstan_templates::yaml::Document;
use serde_json::Value;

use crate::config::FleetConfig;
use crate::fleet::{CLUSTERS_DIR, ClusterEntry, Role, WORKLOADS_DIR};
use crate::tree::Tree;

/// The directory name of add-ons, in a workload cluster's directory and in a management
/// cluster's (shared sets, one subdirectory each).
pub const DIR: &str = "addons";

/// The most add-on objects one workload cluster may take (its own and shared sets together).
pub const MAX_OBJECTS: usize = 1000;

/// One add-on object, as written.
#[derive(Debug, Clone, PartialEq)]
pub struct Addon {
    /// The object.
    pub value: Value,
    /// Where it was written.
    pub file: PathBuf,
    /// The line of its `metadata.name`.
    pub line: usize,
    /// The shared set it comes from; None: the cluster's own `addons/`.
    pub set: Option<String>,
    /// The encrypted file it is a document of, when it comes from a SOPS file: `value` then
    /// holds its data as ciphertext, and the agent decrypts the file in memory to apply it.
    pub sealed: Option<Sealed>,
}

/// A document of a SOPS file: the whole file (its MAC covers every document), and which one.
#[derive(Clone, PartialEq)]
pub struct Sealed {
    /// The file's text, as written (ciphertext and metadata).
    pub text: Arc<str>,
    /// The document's index in the file.
    pub doc: usize,
}

impl std::fmt::Debug for Sealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Sealed(document {} of {} bytes)",
            self.doc,
            self.text.len()
        )
    }
}

impl Sealed {
    /// The document decrypted with `identities`: in memory only, never written anywhere.
    pub fn open(
        &self,
        identities: &[age::x25519::Identity],
    ) -> Result<Value, crate::sops::SopsError> {
        let mut docs = crate::sops::decrypt(&self.text, identities)?;
        if self.doc >= docs.len() {
            return Err(crate::sops::SopsError::NotSops);
        }
        Ok(docs.swap_remove(self.doc))
    }
}

impl Addon {
    fn text(&self, pointer: &str) -> &str {
        self.value
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// `apiVersion`.
    pub fn api_version(&self) -> &str {
        self.text("/apiVersion")
    }

    /// `kind`.
    pub fn kind(&self) -> &str {
        self.text("/kind")
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.text("/metadata/name")
    }

    /// `metadata.namespace` as written ("" when not written: the API server's discovery decides
    /// whether the kind is namespaced, and a namespaced one then goes to `default`, as kubectl
    /// does).
    pub fn namespace(&self) -> &str {
        self.text("/metadata/namespace")
    }

    /// `group/Kind/namespace/name`, as written ([`identity::key`]).
    pub fn key(&self) -> String {
        identity::key(
            identity::group(self.api_version()),
            self.kind(),
            self.namespace(),
            self.name(),
        )
    }

    /// `Kind/namespace/name`, for messages.
    pub fn subject(&self) -> String {
        identity::subject(self.kind(), self.namespace(), self.name())
    }

    /// Where it was written, `file:line`.
    pub fn place(&self) -> String {
        format!("{}:{}", self.file.display(), self.line)
    }

    /// Its rank in apply order ([`rank`]).
    pub fn rank(&self) -> u8 {
        rank(identity::group(self.api_version()), self.kind())
    }
}

/// A cluster's add-ons, in apply order. Shared between the fleets loaded from one render cache.
pub type Addons = Arc<Vec<Addon>>;

/// Where a kind goes in apply order (lower first). See the module's overview.
pub fn rank(group: &str, kind: &str) -> u8 {
    match (group, kind) {
        ("apiextensions.k8s.io", "CustomResourceDefinition") => 0,
        ("", "Namespace") => 1,
        ("", "ResourceQuota" | "LimitRange")
        | ("scheduling.k8s.io", "PriorityClass")
        | ("storage.k8s.io", "StorageClass") => 2,
        ("", "ServiceAccount") | ("rbac.authorization.k8s.io", "ClusterRole" | "Role") => 3,
        ("rbac.authorization.k8s.io", "ClusterRoleBinding" | "RoleBinding") => 4,
        ("", "ConfigMap" | "Secret") => 5,
        ("", "Service") => 6,
        (
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration"
            | "MutatingWebhookConfiguration"
            | "ValidatingAdmissionPolicy"
            | "ValidatingAdmissionPolicyBinding",
        )
        | ("apiregistration.k8s.io", "APIService") => 9,
        _ => 7,
    }
}

/// Whether the apply of a rank must wait for the ranks before it to be established (the CRDs
/// before their custom resources, the Namespaces before what lives in them).
pub fn is_foundation(group: &str, kind: &str) -> bool {
    rank(group, kind) <= 1
}

/// The add-on files under `dir` (a cluster's `addons/`, or one shared set's directory), with the
/// entries that are not YAML (Markdown and `.gitkeep` aside), each a problem at its path.
pub fn files_under(tree: &Tree, dir: &Path) -> (Vec<PathBuf>, Vec<Diagnostic>) {
    let mut files = Vec::new();
    let mut diags = Vec::new();
    for path in tree.entries.range(dir.to_path_buf()..).map(|(p, _)| p) {
        if !path.starts_with(dir) {
            break;
        }
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with(".yaml") || name.ends_with(".yml") {
            files.push(path.clone());
        } else if !(name.ends_with(".md") || name == ".gitkeep") {
            diags.push(
                Diagnostic::error(
                    Code::UnexpectedEntry,
                    "only .yaml/.yml files (and .md) belong in an addons/ directory",
                )
                .in_file(path),
            );
        }
    }
    (files, diags)
}

/// Reads add-on files into objects, in file order then document order; every problem at its
/// file:line. A SOPS file ([`crate::sops`]) is checked without a key — well-formed, encrypted for
/// every recipient of `recipients` (the fleet's), Secrets only, their identity in plain text,
/// each bound to where it may be decrypted ([`ENCRYPTED_FOR`] is `scope`) — and its documents
/// keep their ciphertext ([`Addon::sealed`]).
pub fn read(
    tree: &Tree,
    files: &[PathBuf],
    set: Option<&str>,
    recipients: &[String],
    scope: &str,
) -> (Vec<Addon>, Vec<Diagnostic>) {
    let mut out = Vec::new();
    let mut diags = Vec::new();
    for file in files {
        match crate::fleet::file_documents(tree, file) {
            Err(d) => diags.push(d),
            Ok(mut docs) => {
                let sealed_text = crate::fleet::file_text(tree, file)
                    .filter(|t| crate::sops::is_sops(t))
                    .map(Arc::<str>::from);
                if let Some(text) = &sealed_text
                    && let Err(d) = check_sealed(text, &mut docs, file, recipients, scope)
                {
                    diags.push(d);
                    continue;
                }
                for (i, doc) in docs.into_iter().enumerate() {
                    let sealed = sealed_text.as_ref().map(|t| Sealed {
                        text: t.clone(),
                        doc: i,
                    });
                    match check(&doc, file, sealed.is_some()) {
                        Ok(()) => out.push(Addon {
                            line: doc.pos("metadata.name").line,
                            value: doc.value,
                            file: file.clone(),
                            set: set.map(str::to_string),
                            sealed,
                        }),
                        Err(d) => diags.push(d),
                    }
                }
            }
        }
    }
    (out, diags)
}

pub use crate::sops::ENCRYPTED_FOR;

/// What [`ENCRYPTED_FOR`] must say for the add-ons of `cluster`, or of `mgmt`'s shared `set`.
pub fn scope(cluster_or_mgmt: &str, set: Option<&str>) -> String {
    match set {
        Some(set) => format!("{cluster_or_mgmt}/{set}"),
        None => cluster_or_mgmt.to_string(),
    }
}

/// Where a file that may hold encrypted Secrets sits in a fleet repository, from its path: the
/// repository's root, the management cluster, and the scope its encrypted Secrets must name —
/// an add-on's ([`scope`]: a cluster's `addons/`, a shared set's directory), or a cluster
/// directory's own ([`crate::sops::management_scope`]: a workload directory's or the management
/// directory's files, applied on the management cluster). None elsewhere.
pub fn place_of(path: &Path) -> Option<(PathBuf, String, String)> {
    let parts: Vec<&str> = path.iter().filter_map(|p| p.to_str()).collect();
    let at = parts.iter().rposition(|p| *p == CLUSTERS_DIR)?;
    let root: PathBuf = parts[..at].iter().collect();
    let rest = &parts[at + 1..];
    match rest {
        [mgmt, w, cluster, a, _, ..] if *w == WORKLOADS_DIR && *a == DIR => {
            Some((root, mgmt.to_string(), scope(cluster, None)))
        }
        [mgmt, a, set, _, ..] if *a == DIR => {
            Some((root, mgmt.to_string(), scope(mgmt, Some(set))))
        }
        [mgmt, w, cluster, _] if *w == WORKLOADS_DIR => Some((
            root,
            mgmt.to_string(),
            crate::sops::management_scope(mgmt, cluster),
        )),
        [mgmt, file] if *file != crate::config::FILE => Some((
            root,
            mgmt.to_string(),
            crate::sops::management_scope(mgmt, mgmt),
        )),
        _ => None,
    }
}

/// A SOPS file's rules (see [`read`]); its documents lose the `sops` metadata.
pub(crate) fn check_sealed(
    text: &str,
    docs: &mut [Document],
    file: &Path,
    recipients: &[String],
    scope: &str,
) -> Result<(), Diagnostic> {
    let err = |msg: String, pos: Option<capstan_templates::yaml::Pos>| {
        let d = Diagnostic::error(Code::SopsInvalid, msg).in_file(file);
        Err(match pos {
            Some(p) => d.at(p),
            None => d,
        })
    };
    let envelope = match crate::sops::check(text) {
        Ok(e) => e,
        Err(e) => {
            let pos = match &e {
                crate::sops::SopsError::Value { path, .. } => {
                    docs.iter().find(|d| d.has(path)).map(|d| d.pos(path))
                }
                _ => None,
            };
            return err(format!("SOPS: {e}"), pos);
        }
    };
    let missing: Vec<&String> = recipients
        .iter()
        .filter(|r| !envelope.age.iter().any(|a| &a.recipient == *r))
        .collect();
    if !missing.is_empty() {
        return err(
            format!(
                "SOPS: not encrypted for the fleet's recipient(s) {} (fleet.yaml spec.sops.ageRecipients); it is encrypted for {}: a file encrypted for another fleet, or written before a recipient was added (run `sops updatekeys`)",
                missing
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                envelope.recipients()
            ),
            None,
        );
    }
    for d in docs.iter_mut() {
        if let Some(m) = d.value.as_object_mut() {
            m.remove("sops");
        }
        let v = &d.value;
        let plain = |p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.starts_with("ENC["))
        };
        if !(plain("/apiVersion") && plain("/kind") && plain("/metadata/name")) {
            return err(
                "SOPS: the object's apiVersion, kind and metadata are encrypted; encrypt only a Secret's data (`sops encrypt --encrypted-regex '^(data|stringData)$'`, or a .sops.yaml creation rule) so the object can be checked without a key".into(),
                Some(d.pos("kind")),
            );
        }
        if let Some(m) = v.get("metadata")
            && serde_json::to_string(m).is_ok_and(|t| t.contains("ENC[AES256_GCM"))
        {
            return err(
                "SOPS: the object's metadata is encrypted; encrypt only a Secret's data (`--encrypted-regex '^(data|stringData)$'`)".into(),
                Some(d.pos("metadata")),
            );
        }
        let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
        let api = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        if kind != "Secret" || !identity::group(api).is_empty() {
            return err(
                format!(
                    "SOPS: only Secrets are kept encrypted; this is a {kind} (decrypted, it would be readable by whoever reads {kind}s)"
                ),
                Some(d.pos("kind")),
            );
        }
        // A file whose rules encrypt nothing would carry a plain Secret past the refusal of
        // plain Secrets: every value of `data` and `stringData` must be encrypted.
        for key in ["data", "stringData"] {
            for (k, value) in v.get(key).and_then(Value::as_object).into_iter().flatten() {
                if !value
                    .as_str()
                    .is_some_and(|s| s.is_empty() || s.starts_with("ENC[AES256_GCM,"))
                {
                    return err(
                        format!(
                            "SOPS: `{key}.{k}` is in plain text: the file's rules must encrypt every value of a Secret's data and stringData (encrypted_regex: ^(data|stringData)$)"
                        ),
                        Some(d.pos(&format!("{key}.{k}"))),
                    );
                }
            }
        }
        let bound = v
            .pointer(&format!(
                "/metadata/annotations/{}",
                ENCRYPTED_FOR.replace('/', "~1")
            ))
            .and_then(Value::as_str);
        if bound != Some(scope) {
            let said = match bound {
                Some(b) => {
                    format!("it says `{b}`: a Secret encrypted for another place, copied here")
                }
                None => "it has none".into(),
            };
            return err(
                format!(
                    "SOPS: an encrypted Secret names where it may be decrypted, before encryption (so the MAC binds it): annotation {ENCRYPTED_FOR}: {scope} here; {said}"
                ),
                Some(d.pos("metadata")),
            );
        }
    }
    Ok(())
}

/// One document's own rules; `sealed`: a document of a SOPS file (its data is ciphertext).
fn check(doc: &Document, file: &Path, sealed: bool) -> Result<(), Diagnostic> {
    let err = |code, msg: String, path: &str| {
        Err(Diagnostic::error(code, msg).in_file(file).at(doc.pos(path)))
    };
    let v = &doc.value;
    if !v.is_object() {
        return err(
            Code::MissingTypeInfo,
            "an add-on document is a Kubernetes object (a mapping with apiVersion, kind and metadata.name)".into(),
            "",
        );
    }
    let text = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let (Some(api_version), Some(kind), Some(name)) =
        (text("/apiVersion"), text("/kind"), text("/metadata/name"))
    else {
        return err(
            Code::MissingTypeInfo,
            "an add-on needs apiVersion, kind and metadata.name".into(),
            "",
        );
    };
    if kind.ends_with("List") {
        return err(
            Code::UnsupportedKind,
            format!("{kind}: write each object as a document of its own (separated by `---`)"),
            "kind",
        );
    }
    if name.len() > 253 || name.contains('/') || name == "." || name == ".." {
        return err(
            Code::InvalidName,
            format!("`{name}` is not a Kubernetes object name"),
            "metadata.name",
        );
    }
    if let Some(ns) = v.pointer("/metadata/namespace")
        && !ns.as_str().is_some_and(is_dns_label)
    {
        return err(
            Code::InvalidName,
            format!("metadata.namespace {ns} is not a namespace name"),
            "metadata.namespace",
        );
    }
    if kind == "Secret" && identity::group(api_version).is_empty() && !sealed {
        let has = |k: &str| {
            v.get(k)
                .and_then(Value::as_object)
                .is_some_and(|m| !m.is_empty())
        };
        if let Some(key) = ["data", "stringData"].into_iter().find(|k| has(k)) {
            return err(
                Code::SecretWithData,
                format!(
                    "Secret/{name} carries {key} in plain text; credentials are never kept in Git unencrypted: encrypt it for the fleet's recipients (`sops encrypt --age <fleet.yaml's spec.sops.ageRecipients> --encrypted-regex '^(data|stringData)$' --in-place FILE`), or create the Secret in the cluster from a secret store"
                ),
                key,
            );
        }
    }
    Ok(())
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Sorts into apply order (stable: file and document order within a rank), and reports an
/// object written twice (as written: same group, kind, namespace and name) at its second place.
pub fn order(mut addons: Vec<Addon>) -> (Vec<Addon>, Vec<Diagnostic>) {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut diags = Vec::new();
    addons.retain(|a| match seen.get(&a.key()) {
        Some(first) => {
            diags.push(
                Diagnostic::error(
                    Code::DuplicateName,
                    format!(
                        "{} is already an add-on of this cluster, at {first}",
                        a.subject()
                    ),
                )
                .in_file(&a.file)
                .at(capstan_templates::yaml::Pos {
                    line: a.line,
                    column: 1,
                }),
            );
            false
        }
        None => {
            seen.insert(a.key(), a.place());
            true
        }
    });
    addons.sort_by_key(Addon::rank);
    (addons, diags)
}

/// Whether a shared set selects a workload cluster with these labels: a set fleet.yaml does not
/// name goes to every workload cluster; one it names, to those whose EKS-A Cluster carries every
/// label of its `matchLabels`.
pub fn selects(config: Option<&FleetConfig>, set: &str, labels: &BTreeMap<String, String>) -> bool {
    match config.and_then(|c| c.addons.iter().find(|s| s.name == set)) {
        None => true,
        Some(s) => s.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v)),
    }
}

/// A management cluster's shared sets, by name: each set's objects and problems.
type Sets = BTreeMap<String, (Vec<Addon>, Vec<Diagnostic>)>;

/// The shared sets of a management cluster's directory.
fn shared_sets(tree: &Tree, mgmt: &str, recipients: &[String]) -> Sets {
    let root = PathBuf::from(CLUSTERS_DIR).join(mgmt).join(DIR);
    let names: BTreeSet<String> = tree
        .entries
        .range(root.clone()..)
        .map(|(p, _)| p)
        .take_while(|p| p.starts_with(&root))
        .filter_map(|p| {
            let rest = p.strip_prefix(&root).ok()?;
            let mut parts = rest.iter();
            let first = parts.next()?.to_str()?;
            parts.next().map(|_| first.to_string())
        })
        .collect();
    names
        .into_iter()
        .map(|set| {
            let (files, mut diags) = files_under(tree, &root.join(&set));
            let (objects, more) = read(
                tree,
                &files,
                Some(&set),
                recipients,
                &scope(mgmt, Some(&set)),
            );
            diags.extend(more);
            (set, (objects, diags))
        })
        .collect()
}

/// Gives each valid workload cluster its add-ons (its own, then the shared sets that select
/// it), in apply order. Problems of a cluster's own add-ons are its own; problems of a shared
/// set are its management cluster's, and hold every workload cluster that takes the set.
/// `labels` are each cluster's EKS-A labels.
pub fn attach(
    tree: &Tree,
    clusters: &mut [ClusterEntry],
    configs: &BTreeMap<String, FleetConfig>,
    labels: impl Fn(&ClusterEntry) -> BTreeMap<String, String>,
) {
    let mgmts: BTreeSet<String> = clusters
        .iter()
        .filter(|c| c.role == Role::Management)
        .map(|c| c.name.clone())
        .collect();
    let mut sets: BTreeMap<String, Sets> = BTreeMap::new();
    for m in &mgmts {
        let recipients = configs
            .get(m)
            .map(|c| c.sops_recipients.as_slice())
            .unwrap_or_default();
        let found = shared_sets(tree, m, recipients);
        let entry = clusters.iter_mut().find(|c| &c.name == m);
        if let Some(entry) = entry {
            for (_, diags) in found.values() {
                entry
                    .diagnostics
                    .extend(diags.iter().map(|d| d.clone().for_cluster(m)));
            }
            // A set fleet.yaml names that the directory does not hold: most likely a typo that
            // would leave clusters without what the admin meant them to get.
            if let Some(cfg) = configs.get(m) {
                for s in cfg.addons.iter().filter(|s| !found.contains_key(&s.name)) {
                    entry.diagnostics.push(
                        Diagnostic::error(
                            Code::DanglingRef,
                            format!(
                                "addons names the set `{}`, but clusters/{m}/{DIR}/{}/ holds no add-on",
                                s.name, s.name
                            ),
                        )
                        .in_file(&cfg.file)
                        .for_cluster(m),
                    );
                }
            }
        }
        sets.insert(m.clone(), found);
    }
    for entry in clusters.iter_mut() {
        let Role::Workload { management } = &entry.role else {
            continue;
        };
        let (files, mut diags) = files_under(tree, &entry.dir.join(DIR));
        let recipients = configs
            .get(management)
            .map(|c| c.sops_recipients.as_slice())
            .unwrap_or_default();
        let (mut objects, more) = read(tree, &files, None, recipients, &scope(&entry.name, None));
        diags.extend(more);
        objects.extend(rendered(entry, &mut diags));
        let labels = labels(entry);
        for (set, (set_objects, set_diags)) in sets.get(management).into_iter().flatten() {
            if !selects(configs.get(management), set, &labels) {
                continue;
            }
            if set_diags.iter().any(Diagnostic::is_error) {
                diags.push(
                    Diagnostic::error(
                        Code::DanglingRef,
                        format!(
                            "takes the shared add-on set `{set}`, which has errors (see clusters/{management}/{DIR}/{set}/); nothing of this cluster is applied until they are fixed"
                        ),
                    )
                    .in_file(entry.dir.join(DIR)),
                );
            }
            objects.extend(set_objects.iter().cloned());
        }
        let (objects, dups) = order(objects);
        diags.extend(dups);
        if objects.len() > MAX_OBJECTS {
            diags.push(
                Diagnostic::error(
                    Code::TooManyEntries,
                    format!(
                        "{} add-on objects; a workload cluster takes at most {MAX_OBJECTS}",
                        objects.len()
                    ),
                )
                .in_file(entry.dir.join(DIR)),
            );
        }
        let name = entry.name.clone();
        entry
            .diagnostics
            .extend(diags.into_iter().map(|d| d.for_cluster(&name)));
        entry.addons = (!objects.is_empty()).then(|| Arc::new(objects));
    }
}

/// The add-ons capstan renders for a cluster from its spec: the AWS IAM authenticator of an
/// AWSIamConfig ([`capstan_templates::render::authenticator`]), each placed where that config is
/// written (its file, the line of its name).
fn rendered(entry: &ClusterEntry, diags: &mut Vec<Diagnostic>) -> Vec<Addon> {
    let (Some(cluster), Some(release)) = (&entry.cluster, entry.release.as_deref()) else {
        return Vec::new();
    };
    if cluster.aws_iam.is_none() {
        return Vec::new();
    }
    let (file, pos) = cluster
        .sources
        .iter()
        .find(|s| s.kind == "AWSIamConfig")
        .map(|s| (s.file.clone(), s.pos))
        .unwrap_or_else(|| (cluster.source.file.clone(), cluster.source.pos("kind")));
    let line = pos.line;
    match capstan_templates::render::authenticator::addons(cluster, release) {
        Ok(values) => values
            .into_iter()
            .map(|value| Addon {
                value,
                file: file.clone(),
                line,
                set: None,
                sealed: None,
            })
            .collect(),
        Err(e) => {
            diags.push(
                Diagnostic::error(Code::RenderFailed, e.to_string())
                    .in_file(&file)
                    .at(pos),
            );
            Vec::new()
        }
    }
}

/// Whether `path` is inside a cluster directory's `addons/` (a workload's own, or a management
/// cluster's shared sets), by its components under `clusters/`.
pub fn is_addon_path(parts: &[&str]) -> bool {
    match parts {
        [_, _, w, _, a, _, ..] if *w == WORKLOADS_DIR => *a == DIR,
        [_, _, a, _, _, ..] => *a == DIR,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AddonSet;

    fn tree(files: &[(&str, &str)]) -> Tree {
        let mut t = Tree::new();
        for (p, b) in files {
            t.insert(*p, b.as_bytes());
        }
        t
    }

    #[test]
    fn crds_and_namespaces_go_first_and_webhooks_last_keeping_file_order_within_a_rank() {
        let t = tree(&[(
            "a.yaml",
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: hook}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: app}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: app}\n---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\n---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent, namespace: app}\n",
        )]);
        let (objects, diags) = read(&t, &[PathBuf::from("a.yaml")], None, &[], "w");
        assert!(diags.is_empty(), "{diags:?}");
        let (objects, dups) = order(objects);
        assert!(dups.is_empty());
        let kinds: Vec<&str> = objects.iter().map(Addon::kind).collect();
        assert_eq!(
            kinds,
            [
                "CustomResourceDefinition",
                "Namespace",
                "Deployment",
                "DaemonSet",
                "ValidatingWebhookConfiguration"
            ]
        );
        assert_eq!(objects[2].line, 7);
    }

    #[test]
    fn bad_documents_are_errors_at_their_line() {
        let t = tree(&[(
            "a.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n---\nkind: ConfigMap\nmetadata: {name: no-version}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: creds}\ndata:\n  token: c2VjcmV0\n---\napiVersion: v1\nkind: List\nmetadata: {name: l}\nitems: []\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: Not_A_Namespace}\n",
        )]);
        let (objects, diags) = read(&t, &[PathBuf::from("a.yaml")], None, &[], "w");
        assert_eq!(objects.len(), 1);
        let found: Vec<(Code, usize)> = diags.iter().map(|d| (d.code, d.line)).collect();
        assert_eq!(
            found,
            [
                (Code::MissingTypeInfo, 5),
                (Code::SecretWithData, 11),
                (Code::UnsupportedKind, 15),
                (Code::InvalidName, 21),
            ]
        );
        assert!(
            diags
                .iter()
                .all(|d| d.file.as_deref() == Some(Path::new("a.yaml")))
        );
    }

    #[test]
    fn an_object_written_twice_is_an_error_at_the_second() {
        let doc = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: same, namespace: x}\n";
        let t = tree(&[("a.yaml", doc), ("b.yaml", doc)]);
        let (objects, _) = read(
            &t,
            &[PathBuf::from("a.yaml"), PathBuf::from("b.yaml")],
            None,
            &[],
            "w",
        );
        let (objects, dups) = order(objects);
        assert_eq!(objects.len(), 1);
        assert_eq!(dups.len(), 1);
        assert_eq!(dups[0].file.as_deref(), Some(Path::new("b.yaml")));
        assert!(dups[0].message.contains("a.yaml:3"), "{}", dups[0].message);
    }

    #[test]
    fn a_yaml_bomb_is_refused_not_expanded() {
        let bomb = "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\n";
        let t = tree(&[("a.yaml", bomb)]);
        let (objects, diags) = read(&t, &[PathBuf::from("a.yaml")], None, &[], "w");
        assert!(objects.is_empty());
        assert_eq!(diags[0].code, Code::YamlSyntax, "{diags:?}");
    }

    #[test]
    fn a_file_that_may_hold_encrypted_secrets_knows_its_place() {
        let place = |p: &str| place_of(Path::new(p));
        assert_eq!(
            place("repo/clusters/m/workload-clusters/dev/addons/a/b.yaml"),
            Some(("repo".into(), "m".into(), "dev".into()))
        );
        assert_eq!(
            place("clusters/m/addons/base/b.yaml"),
            Some(("".into(), "m".into(), "m/base".into()))
        );
        // A cluster directory's own files: applied on the management cluster.
        assert_eq!(
            place("clusters/m/cluster.yaml"),
            Some(("".into(), "m".into(), "m:m".into()))
        );
        assert_eq!(
            place("r/clusters/m/workload-clusters/dev/creds.yaml"),
            Some(("r".into(), "m".into(), "m:dev".into()))
        );
        assert_eq!(place("clusters/m/fleet.yaml"), None);
        assert_eq!(place("clusters/suspend.yaml"), None);
        assert_eq!(place("docs/creds.yaml"), None);
    }

    #[test]
    fn a_shared_set_goes_where_its_selector_says() {
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let cfg = FleetConfig {
            addons: vec![AddonSet {
                name: "prod-only".into(),
                match_labels: labels(&[("env", "prod")]),
            }],
            ..Default::default()
        };
        assert!(selects(Some(&cfg), "base", &labels(&[])));
        assert!(selects(
            Some(&cfg),
            "prod-only",
            &labels(&[("env", "prod"), ("x", "y")])
        ));
        assert!(!selects(
            Some(&cfg),
            "prod-only",
            &labels(&[("env", "dev")])
        ));
        assert!(!selects(Some(&cfg), "prod-only", &labels(&[])));
        assert!(selects(None, "prod-only", &labels(&[])));
    }
}
