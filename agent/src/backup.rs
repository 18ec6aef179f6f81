//! Backups of a management cluster's Cluster API and EKS Anywhere objects, and their restore.
//!
//! Before a management cluster upgrades its own etcd or control plane (there is no bootstrap
//! cluster to fall back on), capstan writes down everything needed to rebuild the fleet's
//! management state on a fresh API server: every object of every Cluster API group
//! (`cluster.x-k8s.io` and its `*.cluster.x-k8s.io` providers) and of EKS Anywhere, the Secrets
//! Cluster API keeps per cluster (CA, kubeconfig, etcd and service-account keys, bootstrap
//! data: labelled `cluster.x-k8s.io/cluster-name`), and capstan's own ManagedCluster statuses
//! (their inventories are what prune works from). Objects are written whole, status included,
//! into a directory of its own:
//!
//! ```text
//! <backup-dir>/<cluster>-<UTC time>/
//!   objects.json       every object, kind by kind (a JSON list; restore orders it)
//!   manifest.json      when, what for, how many objects of which kinds: written last, so a
//!                      directory without it is a backup that did not finish
//! ```
//!
//! The backup is streamed: every kind is listed in pages of [`PAGE`] objects, each page written
//! out before the next is asked for, so the agent's memory holds one page, not the fleet (at
//! 3,000 clusters the Secrets alone are tens of megabytes). Only the newest [`KEPT`] finished
//! backups of a cluster are kept. Files are written owner-only (they hold keys).
//!
//! Where: `--backup-dir`. `capstan install` mounts a PersistentVolumeClaim there
//! (`install::manifests`), so a backup outlives the agent's pod — a restart, an eviction, the
//! other replica taking over — and is read by whichever agent or operator restores it.
//!
//! `capstan restore` re-creates them, as `clusterctl move` does: owners before what they own
//! (owner references rewritten to the new UIDs), every Cluster paused until everything is back
//! (so no controller acts on half a fleet), statuses written back through the status
//! subresource, then the Clusters that were not paused before are unpaused. An object that
//! already exists is left as it is and reported. A kind the server has a CRD for but does not
//! list yet (installed moments before the restore, as an operator does) is waited for; a kind
//! with no CRD at all is reported as unknown.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::{ApiResource, Discovery, Scope};
use serde_json::{Value, json};

use crate::k8s::refusal::{self, Refused};

/// Where backups go by default: `$XDG_STATE_HOME/capstan/backups` (`~/.local/state/...`), outside
/// any cluster the backup is for.
pub fn default_backup_dir() -> PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("/var/lib"));
    state.join("capstan/backups")
}

/// The field manager of restore's writes.
pub const RESTORE_MANAGER: &str = "capstan-restore";

/// Why a backup or restore failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// Discovery failed.
    #[error("API discovery failed: {0}")]
    Discovery(#[source] kube::Error),
    /// A list failed: a backup with a kind missing is no backup.
    #[error("listing {resource}: {source}")]
    List {
        /// The resource.
        resource: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// Writing or reading the files failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A backup file is not what capstan writes.
    #[error("{path}: not a capstan backup: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A CRD the backup needs did not become served.
    #[error(transparent)]
    NotServed(#[from] crate::k8s::DiscoveryError),
    /// The API server refused an object.
    #[error("restoring {subject}: {source}")]
    Restore {
        /// Kind/namespace/name.
        subject: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
}

/// A backup written.
#[derive(Debug, Clone)]
pub struct Backup {
    /// Its directory.
    pub dir: PathBuf,
    /// Objects in it.
    pub objects: usize,
    /// Kinds (`resource.group`) this client may not list, left out and named in the manifest:
    /// kinds of the backed-up groups the agent's RBAC does not cover (`install::rbac`).
    pub skipped: Vec<String>,
}

/// Whether objects of an API group belong in a backup.
pub fn backed_up_group(group: &str) -> bool {
    group == "cluster.x-k8s.io"
        || group.ends_with(".cluster.x-k8s.io")
        || group == "anywhere.eks.amazonaws.com"
        || group == "capstan.dev"
}

/// The label Cluster API puts on every Secret of a cluster.
const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// Objects asked for per list request.
pub const PAGE: u32 = 250;

/// Finished backups kept per cluster (label); older ones are removed after a new one is written.
pub const KEPT: usize = 5;

/// The backup's objects file, written as its pages come.
struct Stream {
    file: std::io::BufWriter<std::fs::File>,
    path: PathBuf,
    written: usize,
}

impl Stream {
    fn create(path: PathBuf) -> Result<Stream, BackupError> {
        let file = open_private(&path)?;
        let mut s = Stream {
            file: std::io::BufWriter::new(file),
            path,
            written: 0,
        };
        s.put(b"[")?;
        Ok(s)
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), BackupError> {
        use std::io::Write;
        self.file
            .write_all(bytes)
            .map_err(|source| BackupError::Io {
                path: self.path.clone(),
                source,
            })
    }

    fn object(&mut self, o: &Value) -> Result<(), BackupError> {
        let text = serde_json::to_vec(o).expect("values serialise");
        self.put(if self.written == 0 { b"\n" } else { b",\n" })?;
        self.put(&text)?;
        self.written += 1;
        Ok(())
    }

    fn finish(mut self) -> Result<usize, BackupError> {
        self.put(b"\n]\n")?;
        let io = |source| BackupError::Io {
            path: self.path.clone(),
            source,
        };
        let file = self.file.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        Ok(self.written)
    }
}

/// Writes a backup of every Cluster API, EKS Anywhere and capstan object, and the Secrets of
/// every cluster, into a new directory under `root`.
pub async fn write(client: &Client, root: &Path, label: &str) -> Result<Backup, BackupError> {
    let discovery = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .map_err(BackupError::Discovery)?;
    let stamp = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    let dir = root.join(format!("{label}-{stamp}"));
    create_private_dir(&dir)?;
    let mut out = Stream::create(dir.join("objects.json"))?;
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut skipped: Vec<String> = Vec::new();
    for group in discovery.groups() {
        if !backed_up_group(group.name()) {
            continue;
        }
        // Every kind at its most stable version. Not the group's preferred version alone: a
        // group is shared by providers, and its preferred version need not serve every kind
        // (CAPD's v1beta2 leads infrastructure.cluster.x-k8s.io, CAPV's kinds are v1beta1;
        // EtcdadmConfig is v1beta1 beside kubeadm's v1beta2), which would leave them out.
        for (ar, caps) in group.resources_by_stability() {
            if !caps.supports_operation(kube::discovery::verbs::LIST) || ar.plural.contains('/') {
                continue;
            }
            // A kind refused is skipped (and named in the manifest) only when the API server
            // confirms it: one just restarted refuses what it allows a moment later.
            let refusal = Refused::new(&ar.group, &ar.plural, refusal::LIST);
            let listed = match list(client, &ar, &ListParams::default(), &mut out).await {
                Err(BackupError::List { resource, source })
                    if refusal.confirmed(client, &source).await.is_some() =>
                {
                    skipped.push(resource);
                    continue;
                }
                other => other?,
            };
            *kinds
                .entry(format!("{}.{}", ar.kind, ar.group))
                .or_default() += listed;
        }
    }
    let secrets = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
    let listed = list(
        client,
        &secrets,
        &ListParams::default().labels(CLUSTER_NAME_LABEL),
        &mut out,
    )
    .await?;
    kinds.insert("Secret".into(), listed);
    let objects = out.finish()?;
    // Last: a backup with a manifest is a whole one.
    let manifest = json!({
        "apiVersion": "capstan.dev/v1alpha1",
        "kind": "Backup",
        "created": k8s_openapi::jiff::Timestamp::now().to_string(),
        "for": label,
        "objects": objects,
        "kinds": kinds,
        "skipped": skipped,
    });
    write_private(&dir.join("manifest.json"), &manifest)?;
    prune_backups(root, label, KEPT);
    Ok(Backup {
        dir,
        objects,
        skipped,
    })
}

/// Lists a kind page by page into `out`; returns how many objects it wrote.
async fn list(
    client: &Client,
    ar: &ApiResource,
    lp: &ListParams,
    out: &mut Stream,
) -> Result<usize, BackupError> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    let mut lp = lp.clone().limit(PAGE);
    let mut written = 0;
    loop {
        let page = api.list(&lp).await.map_err(|source| BackupError::List {
            resource: format!("{}.{}", ar.plural, ar.group),
            source,
        })?;
        for o in page.items {
            let mut v = serde_json::to_value(&o).expect("objects serialise");
            v["apiVersion"] = json!(ar.api_version);
            v["kind"] = json!(ar.kind);
            if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("managedFields");
            }
            out.object(&v)?;
            written += 1;
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => lp = lp.continue_token(&token),
            None => return Ok(written),
        }
    }
}

/// Removes all but the newest `kept` finished backups of `label` under `root` (finished: with
/// a manifest). Best effort: a backup that cannot be removed is logged and left.
fn prune_backups(root: &Path, label: &str, kept: usize) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let prefix = format!("{label}-");
    let mut done: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix(&prefix))
                // `<label>-<UTC time>`: a time, not another label that starts the same.
                .is_some_and(|t| t.len() == 16 && t.ends_with('Z') && !t.contains('-'))
                && p.join("manifest.json").is_file()
        })
        .collect();
    // The names sort by their time.
    done.sort();
    let old = done.len().saturating_sub(kept);
    for p in &done[..old] {
        if let Err(e) = std::fs::remove_dir_all(p) {
            tracing::warn!(backup = %p.display(), error = %e, "could not remove an old backup");
        }
    }
}

fn create_private_dir(dir: &Path) -> Result<(), BackupError> {
    let io = |source| BackupError::Io {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    }
    Ok(())
}

fn write_private(path: &Path, value: &Value) -> Result<(), BackupError> {
    let io = |source| BackupError::Io {
        path: path.to_path_buf(),
        source,
    };
    let text = serde_json::to_string_pretty(value).expect("values serialise");
    use std::io::Write;
    let mut f = open_private(path)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    Ok(())
}

/// A new file only its owner may read.
fn open_private(path: &Path) -> Result<std::fs::File, BackupError> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    o.open(path).map_err(|source| BackupError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn uid(o: &Value) -> &str {
    o.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Orders objects so that every owner comes before what it owns (and otherwise as given):
/// what `restore` needs to rewrite owner references to the new UIDs. Owners missing from the
/// set do not hold anything back; a cycle is broken in input order.
pub fn restore_order(objects: Vec<Value>) -> Vec<Value> {
    let uids: BTreeSet<String> = objects.iter().map(|o| uid(o).to_string()).collect();
    let owners = |o: &Value| -> Vec<String> {
        o.pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| r.get("uid").and_then(Value::as_str))
            .filter(|u| uids.contains(*u))
            .map(str::to_string)
            .collect()
    };
    let mut placed: BTreeSet<String> = BTreeSet::new();
    let mut pending: Vec<Value> = objects;
    let mut out = Vec::with_capacity(pending.len());
    while !pending.is_empty() {
        let before = pending.len();
        let mut rest = Vec::new();
        for o in pending {
            if owners(&o).iter().all(|u| placed.contains(u)) {
                placed.insert(uid(&o).to_string());
                out.push(o);
            } else {
                rest.push(o);
            }
        }
        if rest.len() == before {
            // A cycle: take the first as it is.
            let first = rest.remove(0);
            placed.insert(uid(&first).to_string());
            out.push(first);
        }
        pending = rest;
    }
    out
}

/// The object as it is created again: without what the server assigns (its status kept), its
/// owner references pointing at the new UIDs of restored owners (and dropped where the owner
/// was not restored), and — for a Cluster API Cluster — paused.
pub fn prepared(o: &Value, new_uids: &BTreeMap<String, String>) -> Value {
    // The status stays: a kind without a status subresource keeps it from the create; where
    // there is one (capstan's ManagedCluster among them), the server ignores it and `restore`
    // writes it after.
    let mut v = o.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            meta.remove(k);
        }
        if let Some(refs) = meta
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            refs.retain_mut(|r| {
                let old = r.get("uid").and_then(Value::as_str).unwrap_or("");
                match new_uids.get(old) {
                    Some(new) => {
                        r["uid"] = json!(new);
                        true
                    }
                    None => false,
                }
            });
            if refs.is_empty() {
                meta.remove("ownerReferences");
            }
        }
    }
    if is_capi_cluster(o) {
        v["spec"]["paused"] = json!(true);
    }
    v
}

fn is_capi_cluster(o: &Value) -> bool {
    o.get("kind").and_then(Value::as_str) == Some("Cluster")
        && o.get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|a| a.starts_with("cluster.x-k8s.io/"))
}

/// What a restore did.
#[derive(Debug, Clone, Default)]
pub struct Restored {
    /// Objects created.
    pub created: usize,
    /// Objects that already existed, left as they were (`Kind/ns/name`).
    pub existing: Vec<String>,
    /// Objects whose kind the server does not serve (`Kind/ns/name`): their CRDs are missing.
    pub unknown: Vec<String>,
}

/// Reads a backup directory.
pub fn read(dir: &Path) -> Result<Vec<Value>, BackupError> {
    if !dir.join("manifest.json").is_file() {
        return Err(BackupError::Format {
            path: dir.to_path_buf(),
            message: "no manifest.json: the backup did not finish (the manifest is written last)"
                .into(),
        });
    }
    let path = dir.join("objects.json");
    let text = std::fs::read_to_string(&path).map_err(|source| BackupError::Io {
        path: path.clone(),
        source,
    })?;
    match serde_json::from_str(&text) {
        Ok(Value::Array(a)) => Ok(a),
        Ok(_) => Err(BackupError::Format {
            path,
            message: "objects.json is not a list".into(),
        }),
        Err(e) => Err(BackupError::Format {
            path,
            message: e.to_string(),
        }),
    }
}

fn gvk_of(o: &Value) -> kube::core::GroupVersionKind {
    let s = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or("");
    crate::k8s::gvk_of(s("/apiVersion"), s("/kind"))
}

/// Discovery for a restore. Kinds of the backup the server does not list but has a CRD for are
/// waited for (a CRD is Established before discovery lists it), then discovery runs again.
async fn discovery_for(client: &Client, objects: &[Value]) -> Result<Discovery, BackupError> {
    let run = || async {
        Discovery::new(client.clone())
            .run_aggregated()
            .await
            .map_err(BackupError::Discovery)
    };
    let discovery = run().await?;
    let missing: BTreeSet<(String, String)> = objects
        .iter()
        .map(gvk_of)
        .filter(|g| discovery.resolve_gvk(g).is_none())
        .map(|g| (g.group, g.kind))
        .collect();
    if missing.is_empty() {
        return Ok(discovery);
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pending: Vec<String> = crds
        .list(&ListParams::default())
        .await
        .map_err(|source| BackupError::List {
            resource: "customresourcedefinitions".into(),
            source,
        })?
        .items
        .into_iter()
        .filter(|c| missing.contains(&(c.spec.group.clone(), c.spec.names.kind.clone())))
        .filter_map(|c| c.metadata.name)
        .collect();
    if pending.is_empty() {
        return Ok(discovery);
    }
    crate::k8s::wait_served(client, &pending, crate::k8s::SERVED_WAIT).await?;
    run().await
}

/// Restores a backup onto the cluster `client` talks to (see the module docs).
pub async fn restore(client: &Client, dir: &Path) -> Result<Restored, BackupError> {
    let objects = restore_order(read(dir)?);
    let discovery = discovery_for(client, &objects).await?;
    let mut out = Restored::default();
    let mut new_uids: BTreeMap<String, String> = BTreeMap::new();
    let mut to_unpause: Vec<(ApiResource, String, String)> = Vec::new();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let mut made_namespaces = BTreeSet::new();
    for o in &objects {
        let s = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or("");
        let subject = capstan_templates::identity::subject(
            s("/kind"),
            s("/metadata/namespace"),
            s("/metadata/name"),
        );
        let Some((ar, caps)) = discovery.resolve_gvk(&gvk_of(o)) else {
            out.unknown.push(subject);
            continue;
        };
        let ns = s("/metadata/namespace");
        if !ns.is_empty() && made_namespaces.insert(ns.to_string()) {
            let obj: k8s_openapi::api::core::v1::Namespace =
                serde_json::from_value(json!({"metadata": {"name": ns}})).expect("a namespace");
            match namespaces.create(&PostParams::default(), &obj).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(source) => {
                    return Err(BackupError::Restore {
                        subject: format!("Namespace/{ns}"),
                        source,
                    });
                }
            }
        }
        let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
            Api::namespaced_with(client.clone(), ns, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        };
        let body: DynamicObject =
            serde_json::from_value(prepared(o, &new_uids)).map_err(|e| BackupError::Format {
                path: dir.join("objects.json"),
                message: format!("{subject}: {e}"),
            })?;
        let name = s("/metadata/name").to_string();
        let created = match api.create(&PostParams::default(), &body).await {
            Ok(c) => c,
            Err(kube::Error::Api(e)) if e.code == 409 => {
                out.existing.push(subject);
                continue;
            }
            Err(source) => return Err(BackupError::Restore { subject, source }),
        };
        out.created += 1;
        if let Some(u) = created.metadata.uid.clone() {
            new_uids.insert(uid(o).to_string(), u);
        }
        if let Some(status) = o.get("status").filter(|st| !st.is_null())
            && caps.subresources.iter().any(|(r, _)| r.plural == "status")
        {
            let pp = PatchParams::apply(RESTORE_MANAGER).force();
            let patch = json!({
                "apiVersion": s("/apiVersion"),
                "kind": s("/kind"),
                "metadata": {"name": name, "namespace": ns},
                "status": status,
            });
            api.patch_status(&name, &pp, &Patch::Apply(&patch))
                .await
                .map_err(|source| BackupError::Restore {
                    subject: format!("{subject} (status)"),
                    source,
                })?;
        }
        if is_capi_cluster(o) && o.pointer("/spec/paused") != Some(&json!(true)) {
            to_unpause.push((ar.clone(), ns.to_string(), name));
        }
    }
    // Everything is back: the Clusters that were running run again.
    for (ar, ns, name) in to_unpause {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": null}})),
        )
        .await
        .map_err(|source| BackupError::Restore {
            subject: format!("Cluster/{ns}/{name} (unpause)"),
            source,
        })?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_backup_reads_back_and_only_a_finished_one_does() {
        let dir = tempfile::tempdir().unwrap();
        let objects: Vec<Value> = (0..5)
            .map(|i| obj("Cluster", &format!("c{i}"), &format!("u{i}"), &[]))
            .collect();
        let mut out = Stream::create(dir.path().join("objects.json")).unwrap();
        for o in &objects {
            out.object(o).unwrap();
        }
        assert_eq!(out.finish().unwrap(), 5);
        // No manifest yet: the backup did not finish, and is not read as if it had.
        let e = read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("did not finish"), "{e}");
        write_private(&dir.path().join("manifest.json"), &json!({"objects": 5})).unwrap();
        assert_eq!(read(dir.path()).unwrap(), objects);
        // An empty kind list is a list too.
        let empty = tempfile::tempdir().unwrap();
        Stream::create(empty.path().join("objects.json"))
            .unwrap()
            .finish()
            .unwrap();
        write_private(&empty.path().join("manifest.json"), &json!({})).unwrap();
        assert_eq!(read(empty.path()).unwrap(), Vec::<Value>::new());
    }

    #[test]
    fn the_newest_finished_backups_are_kept() {
        let root = tempfile::tempdir().unwrap();
        let make = |name: &str, finished: bool| {
            let d = root.path().join(name);
            std::fs::create_dir(&d).unwrap();
            if finished {
                std::fs::write(d.join("manifest.json"), "{}").unwrap();
            }
        };
        for day in 1..=7 {
            make(&format!("m-202611{day:02}T000000Z"), true);
        }
        // Not finished, another cluster's, another label that starts the same: left alone.
        make("m-20261108T000000Z", false);
        make("w-20261101T000000Z", true);
        make("m-2-20261101T000000Z", true);
        prune_backups(root.path(), "m", 5);
        let mut left: Vec<String> = std::fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "m-2-20261101T000000Z",
                "m-20261103T000000Z",
                "m-20261104T000000Z",
                "m-20261105T000000Z",
                "m-20261106T000000Z",
                "m-20261107T000000Z",
                "m-20261108T000000Z",
                "w-20261101T000000Z",
            ]
        );
    }

    fn obj(kind: &str, name: &str, uid: &str, owners: &[&str]) -> Value {
        let refs: Vec<Value> = owners
            .iter()
            .map(|u| json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Owner", "name": "o", "uid": u}))
            .collect();
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind,
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "7",
                "creationTimestamp": "2026-01-01T00:00:00Z", "ownerReferences": refs},
            "spec": {"x": 1}, "status": {"ready": true}})
    }

    #[test]
    fn owners_come_before_what_they_own() {
        let machine = obj("Machine", "m", "u3", &["u2"]);
        let set = obj("MachineSet", "s", "u2", &["u1"]);
        let md = obj("MachineDeployment", "d", "u1", &["u0"]);
        let cluster = obj("Cluster", "c", "u0", &[]);
        let orphan = obj("Secret", "x", "u9", &["gone"]);
        let order: Vec<String> = restore_order(vec![machine, set, orphan, md, cluster])
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(order, vec!["x", "c", "d", "s", "m"]);
        // A cycle does not hang.
        let a = obj("A", "a", "ua", &["ub"]);
        let b = obj("B", "b", "ub", &["ua"]);
        assert_eq!(restore_order(vec![a, b]).len(), 2);
    }

    #[test]
    fn restored_objects_lose_server_fields_and_point_at_new_owners() {
        let set = obj("MachineSet", "s", "u2", &["u1", "gone"]);
        let new: BTreeMap<String, String> = [("u1".to_string(), "n1".to_string())].into();
        let p = prepared(&set, &new);
        assert!(p["metadata"].get("uid").is_none());
        assert!(p["metadata"].get("resourceVersion").is_none());
        assert_eq!(p["status"]["ready"], true);
        let refs = p["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0]["uid"], "n1");
        // Clusters come back paused.
        let c = obj("Cluster", "c", "u0", &[]);
        assert_eq!(prepared(&c, &new)["spec"]["paused"], true);
        assert!(
            prepared(&c, &new)["metadata"]
                .get("ownerReferences")
                .is_none()
        );
    }

    #[test]
    fn groups_of_a_backup() {
        for g in [
            "cluster.x-k8s.io",
            "controlplane.cluster.x-k8s.io",
            "infrastructure.cluster.x-k8s.io",
            "etcdcluster.cluster.x-k8s.io",
            "anywhere.eks.amazonaws.com",
            "capstan.dev",
        ] {
            assert!(backed_up_group(g), "{g}");
        }
        assert!(!backed_up_group("apps"));
        assert!(!backed_up_group("evilcluster.x-k8s.io.example.com"));
    }
}
