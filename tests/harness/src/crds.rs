//! Upstream CRDs, read straight from the Go module cache, and installing them.
//!
//! The CRD YAMLs are not copied into this repository: `tests/control-plane/crds/go.mod`
//! pins the source modules (with checksums in go.sum) and [`crd_files`] runs
//! `go mod download -json` in a copy of that module to learn where each one is extracted
//! in `$(go env GOMODCACHE)`. The `bases` directories are installable as they are (no
//! conversion webhook stanza; the API server uses `strategy: None`).
//!
//! Some CRDs ship twice (EKS Anywhere has `bundles` and `eksareleases` in both
//! `config/crd/bases` and `release/config/crd/bases`); the first file seen for a
//! `metadata.name` wins, in the order of [`CRD_SOURCES`], and [`shadowed_crds`] lists the
//! others (a test pins that list, so a second module shipping a CRD already installed is
//! noticed rather than silently dropped).
//!
//! A source may also name a single file holding several CRDs (EKS Anywhere's copy of CAPT's: the
//! module proxy serves no version of CAPT's own module): [`crd_files`] writes each document of
//! it, byte for byte, to a file of its own under the cache directory, so that every [`CrdFile`]
//! holds exactly one CRD (other tests read a `CrdFile`'s path as one CRD).
//!
//! The bases lack the labels kustomize adds in a real install: the contract labels
//! (`cluster.x-k8s.io/v1beta2: v1beta2`, ...) through which Cluster API's controllers learn which
//! version of a provider's kind implements which contract (a v1beta2 reference names only the
//! group and kind). [`crd_files`] reads them from the `kustomization.yaml` next to each `bases`
//! directory (`commonLabels`, or `labels[].pairs`) and [`install_crds`] applies them.
//!
//! [`install_crds`] applies them with server-side apply and waits until every CRD is
//! `Established` *and* its resources show up in discovery, so a test can use them at once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::discovery::Discovery;
use kube::runtime::{WatchStreamExt, watcher};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::task::JoinSet;

use crate::binaries::{self, BinariesError};
use crate::versions::{self, VersionsError};

/// Field manager used for everything the harness applies.
pub const FIELD_MANAGER: &str = "capstan-harness";

/// Which directories of which module hold CRDs, in precedence order. An entry ending in `.yaml`
/// names one file, which may hold several CRDs (see the module documentation).
pub const CRD_SOURCES: &[(&str, &[&str])] = &[
    (
        "sigs.k8s.io/cluster-api",
        &[
            "core/config/crd/bases",
            "bootstrap/kubeadm/config/crd/bases",
            "controlplane/kubeadm/config/crd/bases",
        ],
    ),
    (
        "sigs.k8s.io/cluster-api/test",
        &["infrastructure/docker/config/crd/bases"],
    ),
    (
        "sigs.k8s.io/cluster-api-provider-vsphere",
        &["config/default/crd/bases"],
    ),
    (
        "github.com/nutanix-cloud-native/cluster-api-provider-nutanix",
        &["config/crd/bases"],
    ),
    (
        "sigs.k8s.io/cluster-api-addon-provider-helm",
        &["config/crd/bases"],
    ),
    // Bare metal: Tinkerbell's own CRDs (tinkerbell.org: Hardware, Template, Workflow,
    // WorkflowRuleSet) and Rufio's (bmc.tinkerbell.org: Machine, Task, Job), both in Tinkerbell's
    // mono-repo, which EKS Anywhere v0.26 deploys.
    ("github.com/tinkerbell/tinkerbell", &["crd/bases"]),
    (
        "github.com/aws/eks-anywhere",
        &[
            "config/crd/bases",
            "release/config/crd/bases",
            // CAPT's TinkerbellCluster, TinkerbellMachine and TinkerbellMachineTemplate: the
            // proxy serves no version of CAPT's own module (tests/control-plane/versions.env).
            "internal/test/envtest/config/capt-crds.yaml",
        ],
    ),
    ("github.com/aws/etcdadm-controller", &["config/crd/bases"]),
    (
        "github.com/aws/etcdadm-bootstrap-provider",
        &["config/crd/bases"],
    ),
    ("sigs.k8s.io/cluster-inventory-api", &["config/crd/bases"]),
    // Downloaded, none of its CRDs installed: the components install test builds cert-manager's
    // part of a release from them.
    ("github.com/cert-manager/cert-manager", &[]),
];

/// One CRD YAML file in the Go module cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrdFile {
    /// `metadata.name`, e.g. `clusters.cluster.x-k8s.io`.
    pub name: String,
    /// Absolute path in the module cache (read-only).
    pub path: PathBuf,
    /// Go module it comes from.
    pub module: String,
    /// Module version.
    pub version: String,
    /// Labels a real install adds (from the kustomization next to the bases directory).
    pub labels: BTreeMap<String, String>,
}

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// Preparing the crds module (cache dir, writing files) failed.
    #[error(transparent)]
    Binaries(#[from] BinariesError),
    /// Embedded pins unusable.
    #[error(transparent)]
    Versions(#[from] VersionsError),
    /// `go mod download` could not run or failed.
    #[error("go mod download in {dir} failed: {detail}")]
    Download { dir: PathBuf, detail: String },
    /// A module reported an error or has no directory.
    #[error("module {module}: {detail}")]
    Module { module: String, detail: String },
    /// Reading a file or directory failed.
    #[error("read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Writing a CRD of a several-CRD file to the cache failed.
    #[error("write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A CRD file is not valid YAML / not a CRD.
    #[error("parse {path}: {detail}")]
    Parse { path: PathBuf, detail: String },
    /// An API call failed.
    #[error("{action} CRD {name}: {source}")]
    Api {
        action: &'static str,
        name: String,
        source: kube::Error,
    },
    /// Timed out waiting for CRDs.
    #[error("timed out after {0:?} waiting for CRDs: {1}")]
    Timeout(Duration, String),
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ModuleJson {
    path: String,
    version: Option<String>,
    dir: Option<String>,
    error: Option<String>,
}

#[derive(Deserialize)]
struct Head {
    kind: Option<String>,
    metadata: Option<HeadMeta>,
}

#[derive(Deserialize)]
struct HeadMeta {
    name: Option<String>,
}

/// A CRD file of [`CRD_SOURCES`] left out because an earlier one has the same `metadata.name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shadowed {
    /// `metadata.name`.
    pub name: String,
    /// The file installed (module and path).
    pub kept: (String, PathBuf),
    /// The file left out (module and path).
    pub dropped: (String, PathBuf),
}

#[derive(Clone)]
struct Scan {
    files: Vec<CrdFile>,
    shadowed: Vec<Shadowed>,
}

static MEMO: Mutex<Option<Scan>> = Mutex::new(None);

/// The CRD files to install, deduplicated by `metadata.name` (blocking: runs
/// `go mod download`, which downloads the modules on first use).
pub fn crd_files() -> Result<Vec<CrdFile>, CrdError> {
    Ok(scan()?.files)
}

/// The CRD files [`crd_files`] leaves out because a file earlier in [`CRD_SOURCES`] has the
/// same `metadata.name` (blocking, like [`crd_files`]).
pub fn shadowed_crds() -> Result<Vec<Shadowed>, CrdError> {
    Ok(scan()?.shadowed)
}

fn scan() -> Result<Scan, CrdError> {
    let mut memo = MEMO.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(scan) = memo.as_ref() {
        return Ok(scan.clone());
    }
    let dirs = module_dirs()?;
    let mut seen: BTreeMap<String, (String, PathBuf)> = BTreeMap::new();
    let mut out = Vec::new();
    let mut shadowed = Vec::new();
    for (module, subdirs) in CRD_SOURCES {
        let (version, root) = dirs.get(*module).ok_or_else(|| CrdError::Module {
            module: (*module).to_owned(),
            detail: "not downloaded".into(),
        })?;
        for sub in *subdirs {
            let source = root.join(sub);
            let (found, labels) = if is_yaml(&source) {
                let split = documents_dir(module, version, &source)?;
                (split_crds(&source, &split)?, BTreeMap::new())
            } else {
                (crds_in_dir(&source)?, kustomize_labels(&source)?)
            };
            for (name, path) in found {
                if let Some(kept) = seen.get(&name) {
                    shadowed.push(Shadowed {
                        name,
                        kept: kept.clone(),
                        dropped: ((*module).to_owned(), path),
                    });
                    continue;
                }
                seen.insert(name.clone(), ((*module).to_owned(), path.clone()));
                out.push(CrdFile {
                    name,
                    path,
                    module: (*module).to_owned(),
                    version: version.clone(),
                    labels: labels.clone(),
                });
            }
        }
    }
    let scan = Scan {
        files: out,
        shadowed,
    };
    *memo = Some(scan.clone());
    Ok(scan)
}

fn is_yaml(path: &Path) -> bool {
    path.extension().is_some_and(|x| x == "yaml" || x == "yml")
}

/// `(metadata.name, path)` of each CRD file in `dir`, sorted by path.
fn crds_in_dir(dir: &Path) -> Result<Vec<(String, PathBuf)>, CrdError> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| CrdError::Read {
            path: dir.to_owned(),
            source,
        })?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| is_yaml(p))
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        if let Some(name) = crd_name(&path)? {
            out.push((name, path));
        }
    }
    Ok(out)
}

/// Where the CRDs of the several-CRD file `file` of `module@version` are written: the cache's
/// `control-plane/crd-documents/<module>@<version>/<file name>/`.
fn documents_dir(module: &str, version: &str, file: &Path) -> Result<PathBuf, CrdError> {
    let name = file.file_name().unwrap_or_default();
    Ok(binaries::cache_root()?
        .join("control-plane")
        .join("crd-documents")
        .join(format!("{module}@{version}"))
        .join(name))
}

/// The YAML documents of `text`, as they are written (`---` lines separate them; documents
/// holding only comments or whitespace are left out).
fn document_texts(text: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end();
        if bare == "---" || bare.starts_with("--- ") || bare.starts_with("---\t") {
            docs.push(String::new());
        } else if let Some(doc) = docs.last_mut() {
            doc.push_str(line);
        }
    }
    docs.retain(|d| {
        d.lines()
            .map(str::trim)
            .any(|l| !l.is_empty() && !l.starts_with('#'))
    });
    docs
}

/// Writes each CRD of the several-CRD file `file` to `<dir>/<metadata.name>.yaml` (unless the
/// file there already holds it) and returns `(metadata.name, path)` of each, in file order.
fn split_crds(file: &Path, dir: &Path) -> Result<Vec<(String, PathBuf)>, CrdError> {
    let text = std::fs::read_to_string(file).map_err(|source| CrdError::Read {
        path: file.to_owned(),
        source,
    })?;
    let parse_err = |detail: String| CrdError::Parse {
        path: file.to_owned(),
        detail,
    };
    std::fs::create_dir_all(dir).map_err(|source| CrdError::Write {
        path: dir.to_owned(),
        source,
    })?;
    let mut out = Vec::new();
    for doc in document_texts(&text) {
        let head: Head = serde_saphyr::from_str(&doc).map_err(|e| parse_err(e.to_string()))?;
        if head.kind.as_deref() != Some("CustomResourceDefinition") {
            continue;
        }
        let name = head
            .metadata
            .and_then(|m| m.name)
            .ok_or_else(|| parse_err("a CRD without metadata.name".into()))?;
        if name.contains('/') || out.iter().any(|(n, _)| *n == name) {
            return Err(parse_err(format!("CRD name {name:?} unusable or repeated")));
        }
        let path = dir.join(format!("{name}.yaml"));
        if std::fs::read_to_string(&path).ok().as_deref() != Some(doc.as_str()) {
            // Another test process may be writing the same file: write aside, then rename.
            let tmp = dir.join(format!(".{name}.yaml.{}", std::process::id()));
            let write_err = |source| CrdError::Write {
                path: path.clone(),
                source,
            };
            std::fs::write(&tmp, &doc).map_err(write_err)?;
            std::fs::rename(&tmp, &path).map_err(write_err)?;
        }
        out.push((name, path));
    }
    // The documents split here must be the documents a YAML parser sees.
    let parsed: Vec<serde_json::Value> =
        serde_saphyr::from_str_multiple(&text).map_err(|e| parse_err(e.to_string()))?;
    let crds = parsed
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .count();
    if crds != out.len() {
        return Err(parse_err(format!(
            "{crds} CRDs parsed but {} split at `---` lines",
            out.len()
        )));
    }
    Ok(out)
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Kustomization {
    #[serde(default)]
    common_labels: BTreeMap<String, String>,
    #[serde(default)]
    labels: Vec<KustomizeLabels>,
}

#[derive(Deserialize)]
struct KustomizeLabels {
    #[serde(default)]
    pairs: BTreeMap<String, String>,
}

/// The labels the `kustomization.yaml` in the parent of a `bases` directory adds to its CRDs
/// (none when there is no such file).
fn kustomize_labels(bases: &Path) -> Result<BTreeMap<String, String>, CrdError> {
    let Some(path) = bases.parent().map(|p| p.join("kustomization.yaml")) else {
        return Ok(BTreeMap::new());
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(source) => return Err(CrdError::Read { path, source }),
    };
    let k: Kustomization = serde_saphyr::from_str(&text).map_err(|e| CrdError::Parse {
        path: path.clone(),
        detail: e.to_string(),
    })?;
    let mut labels = k.common_labels;
    labels.extend(k.labels.into_iter().flat_map(|l| l.pairs));
    Ok(labels)
}

/// `metadata.name` of the CRD in `path`, or `None` if the file holds no CRD
/// (e.g. a kustomization.yaml).
pub(crate) fn crd_name(path: &Path) -> Result<Option<String>, CrdError> {
    let text = std::fs::read_to_string(path).map_err(|source| CrdError::Read {
        path: path.to_owned(),
        source,
    })?;
    let docs: Vec<Head> = serde_saphyr::from_str_multiple(&text).map_err(|e| CrdError::Parse {
        path: path.to_owned(),
        detail: e.to_string(),
    })?;
    let mut names = docs
        .into_iter()
        .filter(|d| d.kind.as_deref() == Some("CustomResourceDefinition"))
        .filter_map(|d| d.metadata.and_then(|m| m.name));
    let first = names.next();
    if names.next().is_some() {
        return Err(CrdError::Parse {
            path: path.to_owned(),
            detail: "more than one CRD in a file".into(),
        });
    }
    Ok(first)
}

static DIRS: Mutex<Option<BTreeMap<String, (String, PathBuf)>>> = Mutex::new(None);

/// Module path -> (version, extracted directory), from `go mod download -json` (blocking;
/// memoised). Besides CRDs, the modules hold the webhook configurations the controllers serve.
pub fn module_dirs() -> Result<BTreeMap<String, (String, PathBuf)>, CrdError> {
    let mut memo = DIRS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(d) = memo.as_ref() {
        return Ok(d.clone());
    }
    let dirs = download_modules()?;
    *memo = Some(dirs.clone());
    Ok(dirs)
}

fn download_modules() -> Result<BTreeMap<String, (String, PathBuf)>, CrdError> {
    let module = &versions::CRDS_MODULE;
    let mut h = Sha256::new();
    for f in module.files {
        h.update(f.contents.as_bytes());
    }
    let key = hex::encode(&h.finalize()[..8]);
    let root = binaries::cache_root()?
        .join("control-plane")
        .join(format!("crds-{key}"));
    let dir = binaries::write_module(&root, module)?;
    let mut cmd = binaries::go_command(&dir, "-mod=mod");
    cmd.args(["mod", "download", "-json"]);
    for (m, _) in CRD_SOURCES {
        cmd.arg(m);
    }
    let out = cmd.output().map_err(|e| CrdError::Download {
        dir: dir.clone(),
        detail: e.to_string(),
    })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut dirs = BTreeMap::new();
    for m in serde_json::Deserializer::from_str(&stdout).into_iter::<ModuleJson>() {
        let m = m.map_err(|e| CrdError::Download {
            dir: dir.clone(),
            detail: format!("bad JSON: {e}"),
        })?;
        if let Some(err) = m.error {
            return Err(CrdError::Module {
                module: m.path,
                detail: err,
            });
        }
        let d = m.dir.ok_or_else(|| CrdError::Module {
            module: m.path.clone(),
            detail: "no Dir".into(),
        })?;
        dirs.insert(m.path, (m.version.unwrap_or_default(), PathBuf::from(d)));
    }
    if !out.status.success() {
        return Err(CrdError::Download {
            dir,
            detail: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr)),
        });
    }
    Ok(dirs)
}

/// Server-side applies every CRD file and waits until all are established and discoverable.
pub async fn install_crds(
    client: &Client,
    files: &[CrdFile],
    timeout: Duration,
) -> Result<(), CrdError> {
    let deadline = Instant::now() + timeout;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();

    let mut bodies = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f.path).map_err(|source| CrdError::Read {
            path: f.path.clone(),
            source,
        })?;
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_str_multiple(&text).map_err(|e| CrdError::Parse {
                path: f.path.clone(),
                detail: e.to_string(),
            })?;
        let mut body = docs
            .into_iter()
            .find(|d| d["kind"] == "CustomResourceDefinition")
            .ok_or_else(|| CrdError::Parse {
                path: f.path.clone(),
                detail: "no CRD".into(),
            })?;
        if !f.labels.is_empty() {
            let meta = &mut body["metadata"];
            if !meta["labels"].is_object() {
                meta["labels"] = serde_json::json!({});
            }
            for (k, v) in &f.labels {
                meta["labels"][k] = serde_json::Value::String(v.clone());
            }
        }
        bodies.push((f.name.clone(), body));
    }

    let mut applies = JoinSet::new();
    for (name, body) in bodies {
        let (api, params) = (api.clone(), params.clone());
        applies.spawn(async move {
            api.patch(&name, &params, &Patch::Apply(&body))
                .await
                .map(|crd| (name.clone(), crd))
                .map_err(|source| CrdError::Api {
                    action: "apply",
                    name,
                    source,
                })
        });
    }
    let mut wanted = Vec::new();
    while let Some(res) = applies.join_next().await {
        let (name, crd) = res.expect("apply task panicked")?;
        let spec = crd.spec;
        for v in spec.versions.iter().filter(|v| v.served) {
            wanted.push((
                name.clone(),
                spec.group.clone(),
                v.name.clone(),
                spec.names.plural.clone(),
            ));
        }
    }

    // Established: one watch over all CRDs (polling lists would ship megabytes of schema
    // every round trip and slow the API server down on small machines).
    let mut pending: BTreeSet<String> = files.iter().map(|f| f.name.clone()).collect();
    let established = async {
        let stream = watcher(api.clone(), watcher::Config::default()).applied_objects();
        let mut stream = std::pin::pin!(stream);
        while let Some(crd) = stream.next().await {
            let Ok(crd) = crd else { continue }; // the watcher retries on its own
            let ok = crd
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if let (true, Some(name)) = (ok, &crd.metadata.name) {
                pending.remove(name);
            }
            if pending.is_empty() {
                break;
            }
        }
    };
    let remaining = deadline.saturating_duration_since(Instant::now());
    if tokio::time::timeout(remaining, established).await.is_err() {
        return Err(CrdError::Timeout(
            timeout,
            format!("not established: {pending:?}"),
        ));
    }

    // Discoverable (the discovery cache lags Established a little).
    loop {
        let discovery = Discovery::new(client.clone())
            .run_aggregated()
            .await
            .map_err(|source| CrdError::Api {
                action: "discover",
                name: "*".into(),
                source,
            })?;
        let mut missing = Vec::new();
        for (name, group, version, plural) in &wanted {
            let found = discovery.get(group).is_some_and(|g| {
                g.versioned_resources(version)
                    .iter()
                    .any(|(ar, _)| ar.plural == *plural)
            });
            if !found {
                missing.push(format!("{name} {version}"));
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(CrdError::Timeout(
                timeout,
                format!("not discoverable: {missing:?}"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kustomize_labels_in_both_spellings() {
        let dir = tempfile::tempdir().unwrap();
        let bases = dir.path().join("bases");
        std::fs::create_dir(&bases).unwrap();
        assert!(kustomize_labels(&bases).unwrap().is_empty());
        let k = dir.path().join("kustomization.yaml");
        std::fs::write(
            &k,
            "labels:\n- pairs:\n    cluster.x-k8s.io/v1beta2: v1beta2\nresources: [bases/a.yaml]\n",
        )
        .unwrap();
        let l = kustomize_labels(&bases).unwrap();
        assert_eq!(
            l.get("cluster.x-k8s.io/v1beta2").map(String::as_str),
            Some("v1beta2")
        );
        std::fs::write(
            &k,
            "commonLabels:\n  cluster.x-k8s.io/v1beta1: v1alpha3_v1beta1\n",
        )
        .unwrap();
        let l = kustomize_labels(&bases).unwrap();
        assert_eq!(
            l.get("cluster.x-k8s.io/v1beta1").map(String::as_str),
            Some("v1alpha3_v1beta1")
        );
    }

    #[test]
    fn a_several_crd_file_is_split_into_one_file_per_crd_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("two.yaml");
        let a = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: as.example.com\n# kept\nspec: {group: example.com}\n";
        let b = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: bs.example.com\nspec:\n  group: example.com\n";
        let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n";
        std::fs::write(
            &file,
            format!("---\n{a}---\n{cm}--- # b\n{b}---\n# nothing\n"),
        )
        .unwrap();
        let out = dir.path().join("split");
        let crds = split_crds(&file, &out).unwrap();
        let names: Vec<_> = crds.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["as.example.com", "bs.example.com"]);
        assert_eq!(std::fs::read_to_string(&crds[0].1).unwrap(), a);
        assert_eq!(std::fs::read_to_string(&crds[1].1).unwrap(), b);
        for (name, path) in &crds {
            assert_eq!(crd_name(path).unwrap().as_deref(), Some(name.as_str()));
        }
        // Again: the files are there already and stay as they are.
        assert_eq!(split_crds(&file, &out).unwrap(), crds);
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 2);
    }

    #[test]
    fn every_source_module_is_pinned_in_the_crds_module() {
        for (module, _) in CRD_SOURCES {
            versions::module_version(&versions::CRDS_MODULE, module).unwrap();
        }
    }
}
