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
//!   objects.json.age   every object, kind by kind (a JSON list; restore orders it), encrypted
//!                      with age to the admin's recipients ([`encryption`]); `objects.json`,
//!                      unencrypted, only where the admin chose plaintext
//!   manifest.json      when, what for, how many objects of which kinds, whether the objects
//!                      are encrypted and to which public keys (no secrets): written last, so
//!                      a directory without it is a backup that did not finish
//! ```
//!
//! The backup is streamed: every kind is listed in pages of [`PAGE`] objects, each page written
//! out (through age's streaming encryption) before the next is asked for, so the agent's
//! memory holds one page, not the fleet (at 3,000 clusters the Secrets alone are tens of
//! megabytes). Only the newest [`KEPT`] finished backups of a cluster are kept. Files are
//! written owner-only. No recipients to encrypt to is an error, not a plaintext backup: the
//! backup is not written, and a self-upgrade waiting for it is held with that reason.
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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::{ApiResource, Discovery};
use serde_json::{Value, json};

use crate::k8s::refusal::{self, Refused};

pub mod encryption;
mod restore;

pub use encryption::{Encryption, Identities};
pub use restore::{RESTORE_MANAGER, Restored, prepared, restore, restore_order};

/// The objects file of an encrypted backup (an age file).
pub const OBJECTS_ENCRYPTED: &str = "objects.json.age";
/// The objects file of a plaintext backup.
pub const OBJECTS_PLAIN: &str = "objects.json";
/// The manifest, written last.
pub const MANIFEST: &str = "manifest.json";

/// Where backups go by default: `$XDG_STATE_HOME/capstan/backups` (`~/.local/state/...`), outside
/// any cluster the backup is for.
pub fn default_backup_dir() -> PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("/var/lib"));
    state.join("capstan/backups")
}

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
    /// Nothing to encrypt a backup to: it is not written (no silent plaintext).
    #[error(
        "no backup recipients: {why}. A backup holds every cluster's CA and service-account keys and \
         is written encrypted only: put one age public key per line (`age-keygen -y IDENTITY_FILE`) \
         under key `recipients` of the Secret {secret}, or choose unencrypted backups with \
         --backup-plaintext"
    )]
    NoRecipients {
        /// The Secret (`namespace/name`) the recipients are read from.
        secret: String,
        /// Why there are none.
        why: String,
    },
    /// A line of a recipients list is not an age public key.
    #[error("{origin} line {line}: {message}")]
    Recipient {
        /// Where the list is (`Secret ns/name key recipients`, a flag).
        origin: String,
        /// The line, from 1.
        line: usize,
        /// What is wrong (never the line's text).
        message: String,
    },
    /// An identity file cannot be used.
    #[error("identity file {path}: {message}")]
    Identity {
        /// The file.
        path: PathBuf,
        /// What is wrong (never its text).
        message: String,
    },
    /// An encrypted backup, and no identity to decrypt it with.
    #[error(
        "{path} is encrypted with age (to {recipients}): restoring it needs --identity FILE, an age \
         identity file holding the secret key of one of them"
    )]
    NeedsIdentity {
        /// The encrypted file.
        path: PathBuf,
        /// Its recipients (public keys).
        recipients: String,
    },
    /// An encrypted backup that does not decrypt: a wrong identity, a damaged file.
    #[error("{path}: cannot decrypt: {message}")]
    Decrypt {
        /// The encrypted file.
        path: PathBuf,
        /// Why.
        message: String,
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
    /// The age recipients (public keys) its objects are encrypted to; empty: plaintext.
    pub encrypted_to: Vec<String>,
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

/// The backup's objects file, written as its pages come (encrypted to `recipients`, if any).
struct Stream {
    file: encryption::Sink,
    path: PathBuf,
    written: usize,
}

impl Stream {
    fn create(
        path: PathBuf,
        recipients: Option<&[age::x25519::Recipient]>,
    ) -> Result<Stream, BackupError> {
        let file = open_private(&path)?;
        let file = encryption::Sink::new(file, recipients).map_err(|source| BackupError::Io {
            path: path.clone(),
            source,
        })?;
        let mut s = Stream {
            file,
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
        let file = self.file.finish().map_err(io)?;
        file.sync_all().map_err(io)?;
        Ok(self.written)
    }
}

/// Writes a backup of every Cluster API, EKS Anywhere and capstan object, and the Secrets of
/// every cluster, into a new directory under `root`, encrypted as `encryption` says. With no
/// recipients to encrypt to (and no choice of plaintext) nothing is written.
pub async fn write(
    client: &Client,
    root: &Path,
    label: &str,
    encryption: &Encryption,
) -> Result<Backup, BackupError> {
    // First: without recipients there is no backup, and no directory of one.
    let recipients = encryption.recipients(client).await?;
    let encrypted_to: Vec<String> = recipients
        .iter()
        .flatten()
        .map(ToString::to_string)
        .collect();
    let discovery = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .map_err(BackupError::Discovery)?;
    let stamp = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    let dir = root.join(format!("{label}-{stamp}"));
    create_private_dir(&dir)?;
    let file = match recipients {
        Some(_) => OBJECTS_ENCRYPTED,
        None => OBJECTS_PLAIN,
    };
    let mut out = Stream::create(dir.join(file), recipients.as_deref())?;
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
        "encryption": if encrypted_to.is_empty() {
            json!({"format": "none", "file": OBJECTS_PLAIN})
        } else {
            json!({"format": "age", "file": OBJECTS_ENCRYPTED, "recipients": encrypted_to})
        },
    });
    write_private(&dir.join(MANIFEST), &manifest)?;
    prune_backups(root, label, KEPT);
    Ok(Backup {
        dir,
        objects,
        skipped,
        encrypted_to,
    })
}

/// Lists a kind page by page into `out`; returns how many objects it wrote.
/// An object of a list as JSON, whole: its `apiVersion` and `kind` set (a list's items may
/// lack them), without `managedFields`.
pub fn as_listed(o: &DynamicObject, ar: &ApiResource) -> Value {
    let mut v = serde_json::to_value(o).expect("objects serialise");
    v["apiVersion"] = json!(ar.api_version);
    v["kind"] = json!(ar.kind);
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    v
}

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
            out.object(&as_listed(&o, ar))?;
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
                && p.join(MANIFEST).is_file()
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

/// How a finished backup's objects are stored, from its manifest: `Some(recipients)` (their
/// public keys) when encrypted with age, `None` when plaintext (also a manifest from before
/// backups were encrypted, which says nothing about it).
pub fn encrypted_to(dir: &Path) -> Result<Option<Vec<String>>, BackupError> {
    let path = dir.join(MANIFEST);
    if !path.is_file() {
        return Err(BackupError::Format {
            path: dir.to_path_buf(),
            message: "no manifest.json: the backup did not finish (the manifest is written last)"
                .into(),
        });
    }
    let text = std::fs::read(&path).map_err(|source| BackupError::Io {
        path: path.clone(),
        source,
    })?;
    let manifest: Value = serde_json::from_slice(&text).map_err(|e| BackupError::Format {
        path: path.clone(),
        message: e.to_string(),
    })?;
    match manifest
        .pointer("/encryption/format")
        .and_then(Value::as_str)
    {
        None | Some("none") => Ok(None),
        Some("age") => Ok(Some(
            manifest
                .pointer("/encryption/recipients")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        )),
        Some(other) => Err(BackupError::Format {
            path,
            message: format!("encryption `{other}` is not one capstan writes (age, none)"),
        }),
    }
}

/// Reads a finished backup directory, decrypting its objects with `identities` when they are
/// encrypted (an encrypted backup and no identity, or none that matches, is an error). The
/// file is read and checked whole before anything is returned.
pub fn read(dir: &Path, identities: &Identities) -> Result<Vec<Value>, BackupError> {
    let (path, text) = match encrypted_to(dir)? {
        Some(recipients) => {
            let path = dir.join(OBJECTS_ENCRYPTED);
            let text = identities.decrypt(&path, &recipients)?;
            (path, text)
        }
        None => {
            let path = dir.join(OBJECTS_PLAIN);
            let text = std::fs::read(&path).map_err(|source| BackupError::Io {
                path: path.clone(),
                source,
            })?;
            (path, text)
        }
    };
    // serde_json's messages name a line and column, never the text.
    match serde_json::from_slice(&text) {
        Ok(Value::Array(a)) => Ok(a),
        Ok(_) => Err(BackupError::Format {
            path,
            message: "the objects are not a list".into(),
        }),
        Err(e) => Err(BackupError::Format {
            path,
            message: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(name: &str) -> Value {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}")},
            "spec": {"x": 1}, "status": {"ready": true}})
    }

    /// Writes `objects` as `write` does (the manifest last, as it would say).
    fn backup_of(dir: &Path, objects: &[Value], to: Option<&[age::x25519::Recipient]>) {
        let file = if to.is_some() {
            OBJECTS_ENCRYPTED
        } else {
            OBJECTS_PLAIN
        };
        let mut out = Stream::create(dir.join(file), to).unwrap();
        for o in objects {
            out.object(o).unwrap();
        }
        assert_eq!(out.finish().unwrap(), objects.len());
        let encryption = match to {
            Some(r) => json!({"format": "age", "file": file,
                "recipients": r.iter().map(ToString::to_string).collect::<Vec<_>>()}),
            None => json!({"format": "none", "file": file}),
        };
        write_private(
            &dir.join(MANIFEST),
            &json!({"objects": objects.len(), "encryption": encryption}),
        )
        .unwrap();
    }

    #[test]
    fn a_streamed_backup_reads_back_and_only_a_finished_one_does() {
        let dir = tempfile::tempdir().unwrap();
        let objects: Vec<Value> = (0..5).map(|i| cluster(&format!("c{i}"))).collect();
        let mut out = Stream::create(dir.path().join(OBJECTS_PLAIN), None).unwrap();
        for o in &objects {
            out.object(o).unwrap();
        }
        assert_eq!(out.finish().unwrap(), 5);
        // No manifest yet: the backup did not finish, and is not read as if it had.
        let e = read(dir.path(), &Identities::none())
            .unwrap_err()
            .to_string();
        assert!(e.contains("did not finish"), "{e}");
        // A manifest from before backups were encrypted says nothing of it: plaintext.
        write_private(&dir.path().join(MANIFEST), &json!({"objects": 5})).unwrap();
        assert_eq!(read(dir.path(), &Identities::none()).unwrap(), objects);
        assert_eq!(encrypted_to(dir.path()).unwrap(), None);
        // An empty kind list is a list too, encrypted or not.
        let key = age::x25519::Identity::generate();
        for to in [None, Some(vec![key.to_public()])] {
            let empty = tempfile::tempdir().unwrap();
            backup_of(empty.path(), &[], to.as_deref());
            assert_eq!(
                read(empty.path(), &Identities::from(key.clone())).unwrap(),
                Vec::<Value>::new()
            );
        }
    }

    /// A Secret of Cluster API's with a CA key of `len` bytes (a marker, then filler).
    fn ca_secret(name: &str, marker: &str, len: usize) -> Value {
        let mut key = marker.as_bytes().to_vec();
        key.extend((0..len).map(|i| b'A' + (i % 26) as u8));
        let b64 = k8s_openapi::ByteString(key);
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{name}-ca"), "namespace": "ns",
                "labels": {"cluster.x-k8s.io/cluster-name": name}},
            "type": "cluster.x-k8s.io/secret", "data": {"tls.key": b64}})
    }

    /// Whether `needle` occurs in `haystack`.
    fn holds(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn an_encrypted_backup_holds_no_key_in_the_clear_and_reads_back_only_with_its_identity() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            age::x25519::Identity::generate(),
            age::x25519::Identity::generate(),
        );
        let marker = "-----BEGIN RSA PRIVATE KEY-----capstan-test-marker";
        // More than one of age's 64 KiB chunks: 40 Secrets of about 9 KiB.
        let objects: Vec<Value> = (0..40)
            .map(|i| ca_secret(&format!("w{i}"), marker, 9_000))
            .chain([cluster("w0")])
            .collect();
        backup_of(dir.path(), &objects, Some(&[a.to_public(), b.to_public()]));
        assert!(!dir.path().join(OBJECTS_PLAIN).exists());
        let bytes = std::fs::read(dir.path().join(OBJECTS_ENCRYPTED)).unwrap();
        assert!(bytes.len() > 2 * 65_536, "{}", bytes.len());
        assert!(bytes.starts_with(b"age-encryption.org/v1\n"));
        assert!(serde_json::from_slice::<Value>(&bytes).is_err());
        // Not the key, nor its base64 as the Secret holds it, nor any object's name.
        let b64 = objects[0]["data"]["tls.key"].as_str().unwrap();
        for needle in [
            marker.as_bytes(),
            &b64.as_bytes()[..64],
            b"w0-ca",
            b"cluster.x-k8s.io",
        ] {
            assert!(
                !holds(&bytes, needle),
                "{}",
                String::from_utf8_lossy(needle)
            );
        }
        // The manifest says to whom, public keys only.
        let manifest = std::fs::read_to_string(dir.path().join(MANIFEST)).unwrap();
        assert_eq!(
            encrypted_to(dir.path()).unwrap(),
            Some(vec![a.to_public().to_string(), b.to_public().to_string()])
        );
        assert!(!manifest.contains("AGE-SECRET-KEY") && !manifest.contains(&b64[..64]));
        // Either recipient's identity reads every object back.
        for key in [&a, &b] {
            assert_eq!(
                read(dir.path(), &Identities::from(key.clone())).unwrap(),
                objects
            );
        }
        // No identity, or another one: refused, saying what is needed.
        let e = read(dir.path(), &Identities::none())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("encrypted with age")
                && e.contains("--identity FILE")
                && e.contains(&a.to_public().to_string()),
            "{e}"
        );
        let other = age::x25519::Identity::generate();
        let e = read(dir.path(), &Identities::from(other))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot decrypt") && e.contains("no identity of those given is one"),
            "{e}"
        );
        // A file cut short or altered does not read as a shorter backup.
        let cut = tempfile::tempdir().unwrap();
        backup_of(cut.path(), &objects, Some(&[a.to_public()]));
        let file = cut.path().join(OBJECTS_ENCRYPTED);
        let whole = std::fs::read(&file).unwrap();
        std::fs::write(&file, &whole[..whole.len() - 100_000]).unwrap();
        let e = read(cut.path(), &Identities::from(a.clone()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("damaged or truncated"), "{e}");
        let mut flipped = whole.clone();
        let at = flipped.len() - 10;
        flipped[at] ^= 1;
        std::fs::write(&file, &flipped).unwrap();
        let e = read(cut.path(), &Identities::from(a.clone()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("damaged or truncated"), "{e}");
    }

    #[test]
    fn backup_files_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("m-20261102T000000Z");
        create_private_dir(&dir).unwrap();
        let key = age::x25519::Identity::generate();
        backup_of(&dir, &[cluster("c")], Some(&[key.to_public()]));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join(OBJECTS_ENCRYPTED)), 0o600);
        assert_eq!(mode(&dir.join(MANIFEST)), 0o600);
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
