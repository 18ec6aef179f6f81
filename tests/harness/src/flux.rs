//! Flux's kustomize-controller, the peer of capstan's comparison benchmark
//! (`agent/benches/versus_flux.rs`), built from Go modules like the rest of the test bed.
//!
//! Why only kustomize-controller: source-controller builds from no version the module proxy
//! serves (`github.com/fluxcd/pkg/artifact` is refused at every version) and newer
//! kustomize-controllers (v1.9, v1.10) need refused `fluxcd/pkg` versions or Go 1.27. The
//! benchmark therefore plays source-controller's part itself (a GitRepository whose status
//! carries an artifact served on loopback) and is named as such where it does.
//!
//! [`ensure_flux`] builds `kustomize-controller` once into
//! `${CAPSTAN_CACHE_DIR:-~/.cache/capstan}/flux/<key>/bin/` (same cache, lock and stamp rules
//! as [`crate::binaries`]) and locates the Flux CRDs in the Go module cache: the Kustomization
//! CRD from the kustomize-controller module, every `source.toolkit.fluxcd.io` CRD from the
//! source-controller module of `FLUX_SOURCE_CONTROLLER_VERSION` (downloaded, never built:
//! kustomize-controller exits when one of its source kinds is missing).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::Deserialize;

use crate::binaries::{self, Target};
use crate::crds::{CrdError, CrdFile};
use crate::versions::{self, FLUX_MODULE};

const KUSTOMIZE_CONTROLLER: &str = "github.com/fluxcd/kustomize-controller";
const SOURCE_CONTROLLER: &str = "github.com/fluxcd/source-controller";

/// The built controller and the CRDs it needs.
#[derive(Debug, Clone)]
pub struct FluxBinaries {
    /// `.../flux/<key>/bin/kustomize-controller`.
    pub kustomize_controller: PathBuf,
    /// Its version (`FLUX_KUSTOMIZE_CONTROLLER_VERSION`).
    pub kustomize_controller_version: String,
    /// The source-controller version whose CRDs are installed.
    pub source_controller_version: String,
    /// Kustomization and every source.toolkit.fluxcd.io CRD.
    pub crds: Vec<CrdFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Download {
    dir: Option<String>,
    error: Option<String>,
}

/// `go mod download -json module@version` (outside any module) and the directory it landed in.
fn download(cwd: &Path, module: &str, version: &str) -> Result<PathBuf, CrdError> {
    let out = binaries::go_command(cwd, "-mod=mod")
        .args(["mod", "download", "-json", &format!("{module}@{version}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| CrdError::Module {
            module: module.into(),
            detail: e.to_string(),
        })?;
    let d: Download = serde_json::from_slice(&out.stdout).map_err(|e| CrdError::Module {
        module: module.into(),
        detail: format!("{e}: {}", String::from_utf8_lossy(&out.stderr)),
    })?;
    match (d.dir, d.error) {
        (Some(dir), None) => Ok(PathBuf::from(dir)),
        (_, e) => Err(CrdError::Module {
            module: module.into(),
            detail: e.unwrap_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned()),
        }),
    }
}

fn crds_in(dir: &Path, module: &str, version: &str) -> Result<Vec<CrdFile>, CrdError> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| CrdError::Read {
            path: dir.to_owned(),
            source,
        })?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        if let Some(name) = crate::crds::crd_name(&path)? {
            out.push(CrdFile {
                name,
                path,
                module: module.into(),
                version: version.into(),
                labels: BTreeMap::new(),
            });
        }
    }
    Ok(out)
}

/// Builds kustomize-controller if the cache lacks it (minutes, cold; needs the module proxy)
/// and finds the Flux CRDs.
pub fn ensure_flux() -> Result<FluxBinaries, CrdError> {
    let kc_version = versions::module_version(&FLUX_MODULE, KUSTOMIZE_CONTROLLER)?;
    let sc_version =
        versions::module_version(&FLUX_MODULE, "github.com/fluxcd/source-controller/api")?;
    let targets = [Target {
        name: "kustomize-controller",
        module: &FLUX_MODULE,
        package: KUSTOMIZE_CONTROLLER,
        ldflags: "-s -w".into(),
        version: None,
    }];
    let (dir, _) = binaries::ensure_set("flux", &targets)?;
    let root = binaries::cache_root()?.join("flux");
    let mut crds = crds_in(
        &download(&root, KUSTOMIZE_CONTROLLER, &kc_version)?.join("config/crd/bases"),
        KUSTOMIZE_CONTROLLER,
        &kc_version,
    )?;
    crds.extend(crds_in(
        &download(&root, SOURCE_CONTROLLER, &sc_version)?.join("config/crd/bases"),
        SOURCE_CONTROLLER,
        &sc_version,
    )?);
    Ok(FluxBinaries {
        kustomize_controller: dir.join("bin").join("kustomize-controller"),
        kustomize_controller_version: kc_version,
        source_controller_version: sc_version,
        crds,
    })
}
