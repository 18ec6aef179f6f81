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
//! `metadata.name` wins, in the order of [`CRD_SOURCES`].
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

/// Which directories of which module hold CRDs, in precedence order.
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
    (
        "github.com/aws/eks-anywhere",
        &["config/crd/bases", "release/config/crd/bases"],
    ),
    ("github.com/aws/etcdadm-controller", &["config/crd/bases"]),
    (
        "github.com/aws/etcdadm-bootstrap-provider",
        &["config/crd/bases"],
    ),
    ("sigs.k8s.io/cluster-inventory-api", &["config/crd/bases"]),
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

static MEMO: Mutex<Option<Vec<CrdFile>>> = Mutex::new(None);

/// The CRD files to install, deduplicated by `metadata.name` (blocking: runs
/// `go mod download`, which downloads the modules on first use).
pub fn crd_files() -> Result<Vec<CrdFile>, CrdError> {
    let mut memo = MEMO.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(files) = memo.as_ref() {
        return Ok(files.clone());
    }
    let dirs = module_dirs()?;
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (module, subdirs) in CRD_SOURCES {
        let (version, root) = dirs.get(*module).ok_or_else(|| CrdError::Module {
            module: (*module).to_owned(),
            detail: "not downloaded".into(),
        })?;
        for sub in *subdirs {
            let dir = root.join(sub);
            let labels = kustomize_labels(&dir)?;
            let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
                .map_err(|source| CrdError::Read {
                    path: dir.clone(),
                    source,
                })?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .collect();
            paths.sort();
            for path in paths {
                let Some(name) = crd_name(&path)? else {
                    continue;
                };
                if seen.insert(name.clone()) {
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
    }
    *memo = Some(out.clone());
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
    fn every_source_module_is_pinned_in_the_crds_module() {
        for (module, _) in CRD_SOURCES {
            versions::module_version(&versions::CRDS_MODULE, module).unwrap();
        }
    }
}
