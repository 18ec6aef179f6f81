//! A control plane that outlives the process that started it (for `capstan dev up` /
//! `capstan dev down`).
//!
//! [`ControlPlane::start_persistent`] starts etcd and kube-apiserver in their own process
//! group (so the terminal's Ctrl-C does not reach them), with no watchdog, in a directory
//! the caller chooses, installs the CRDs and writes `state.json` (pids with their start
//! times, ports, kubeconfig path, versions). [`ControlPlane::stop_persistent`] reads that
//! file, stops both processes (SIGTERM, SIGKILL after 10 s; a pid whose start time no
//! longer matches is a different process and is left alone) and removes the directory.
//!
//! With [`StartOptions::controllers`] the controllers are started the same way (detached, their
//! pids recorded) and stopped first.
//!
//! Layout of the directory: `state.json`, `kubeconfig`, `pki/`, `etcd-data/`, `etcd.log`,
//! `kube-apiserver.log`, `audit.log`, `audit-policy.yaml`, and with controllers `logs/`,
//! `webhook-certs/`, `kcm-certs/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::binaries;
use crate::control_plane::controllers;
use crate::control_plane::{self, ControlPlane, Endpoints, Error, Pids, StartOptions};
use crate::crds;
use crate::process::{self, ProcessId};
use crate::versions::Versions;

/// Name of the state file inside the directory.
pub const STATE_FILE: &str = "state.json";

const GRACE: Duration = Duration::from_secs(10);

/// Errors of the persistent mode.
#[derive(Debug, thiserror::Error)]
pub enum PersistentError {
    /// Starting failed.
    #[error(transparent)]
    Start(#[from] Error),
    /// A control plane recorded in the directory is still running.
    #[error(
        "a control plane is already running from {dir} (kube-apiserver pid {pid}); stop it first"
    )]
    AlreadyRunning { dir: PathBuf, pid: i32 },
    /// The directory exists, is not empty and has no state file: refusing to touch it.
    #[error("{0} is not empty and holds no {STATE_FILE}: refusing to use or remove it")]
    NotAControlPlaneDir(PathBuf),
    /// The state file is unreadable.
    #[error("state file {path}: {detail}")]
    State { path: PathBuf, detail: String },
    /// Filesystem error.
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Contents of `state.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PersistentState {
    /// Format version of this file.
    pub format: u32,
    /// The directory.
    pub dir: PathBuf,
    /// Process ids.
    pub pids: Pids,
    /// Ports and paths (kubeconfig, audit log).
    pub endpoints: Endpoints,
    /// Versions of the binaries.
    pub kubernetes_version: String,
    /// etcd version.
    pub etcd_version: String,
    /// Number of CRDs installed.
    pub crd_count: usize,
    /// Seconds since the epoch when it was started.
    pub started_unix: u64,
    /// The controllers' processes by name (none when started without them).
    #[serde(default)]
    pub controllers: BTreeMap<String, ProcessId>,
    /// The Cluster API version the controllers run (empty without them).
    #[serde(default)]
    pub cluster_api_version: String,
}

impl PersistentState {
    /// Whether every recorded process (etcd, kube-apiserver, the controllers) is still the one
    /// recorded and alive.
    pub fn is_running(&self) -> bool {
        self.pids.etcd.is_alive()
            && self.pids.kube_apiserver.is_alive()
            && self.controllers.values().all(ProcessId::is_alive)
    }

    /// The versions, as [`Versions`].
    pub fn versions(&self) -> Versions {
        Versions {
            kubernetes: self.kubernetes_version.clone(),
            etcd: self.etcd_version.clone(),
        }
    }
}

/// Makes an I/O error into a [`PersistentError::Io`] naming `action` and `path`.
fn persistent_io_err<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> PersistentError + 'a {
    move |source| PersistentError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

impl ControlPlane {
    /// Starts a detached control plane in `dir` (created if missing; must be empty or hold a
    /// stale state file) and returns its state. The processes keep running after the
    /// caller exits; use [`ControlPlane::stop_persistent`] to stop them.
    pub async fn start_persistent(dir: &Path) -> Result<PersistentState, PersistentError> {
        Self::start_persistent_with(dir, StartOptions::default()).await
    }

    /// [`ControlPlane::start_persistent`] with options.
    pub async fn start_persistent_with(
        dir: &Path,
        opts: StartOptions,
    ) -> Result<PersistentState, PersistentError> {
        match Self::persistent_state(dir)? {
            Some(state)
                if state.pids.etcd.is_alive()
                    || state.pids.kube_apiserver.is_alive()
                    || state.controllers.values().any(ProcessId::is_alive) =>
            {
                return Err(PersistentError::AlreadyRunning {
                    dir: dir.to_owned(),
                    pid: state.pids.kube_apiserver.pid,
                });
            }
            Some(_) => {
                std::fs::remove_dir_all(dir).map_err(persistent_io_err("remove stale", dir))?
            }
            None if dir.exists() => {
                let mut entries = std::fs::read_dir(dir).map_err(persistent_io_err("read", dir))?;
                if entries.next().is_some() {
                    return Err(PersistentError::NotAControlPlaneDir(dir.to_owned()));
                }
            }
            None => {}
        }
        std::fs::create_dir_all(dir).map_err(persistent_io_err("create", dir))?;
        let dir = std::fs::canonicalize(dir).map_err(persistent_io_err("resolve", dir))?;

        let bins = control_plane::blocking(binaries::ensure_binaries)
            .await?
            .map_err(Error::from)?;
        let files = if opts.install_crds || opts.controllers {
            control_plane::blocking(crds::crd_files)
                .await?
                .map_err(Error::from)?
        } else {
            Vec::new()
        };
        let launched = control_plane::launch_with_retries(&dir, &bins, true, None, &opts).await?;
        let mut etcd = launched.etcd;
        let mut apiserver = launched.apiserver;
        let mut state = PersistentState {
            format: 2,
            dir: dir.clone(),
            pids: Pids {
                etcd: ProcessId::of(etcd.id()),
                kube_apiserver: ProcessId::of(apiserver.id()),
            },
            endpoints: launched.endpoints,
            kubernetes_version: bins.versions.kubernetes.clone(),
            etcd_version: bins.versions.etcd.clone(),
            crd_count: files.len(),
            started_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            controllers: BTreeMap::new(),
            cluster_api_version: String::new(),
        };
        let mut running = None;
        let result = async {
            crate::install_crypto_provider();
            let client =
                kube::Client::try_from(launched.config.clone()).map_err(|source| Error::Kube {
                    action: "create client",
                    source,
                })?;
            if opts.install_crds || opts.controllers {
                crds::install_crds(&client, &files, opts.timeout)
                    .await
                    .map_err(Error::from)?;
            }
            if opts.controllers {
                let c = controllers::start(
                    &dir,
                    &state.endpoints.kubeconfig,
                    &client,
                    true,
                    None,
                    opts.timeout,
                )
                .await?;
                state.controllers = c.pids();
                state.cluster_api_version = c.cluster_api_version().to_owned();
                running = Some(c);
            }
            let path = dir.join(STATE_FILE);
            let json = serde_json::to_string_pretty(&state).expect("state serialises");
            control_plane::write_private(&path, &json)?;
            Ok::<_, Error>(())
        }
        .await;
        if let Err(e) = result {
            if let Some(c) = running.as_mut() {
                c.stop();
            }
            process::terminate_child(&mut apiserver, GRACE);
            process::terminate_child(&mut etcd, GRACE);
            return Err(e.into());
        }
        // Dropping a std Child neither kills nor waits: the processes run on.
        drop((etcd, apiserver, running));
        Ok(state)
    }

    /// The state recorded in `dir`, if any (whether or not the processes still run).
    pub fn persistent_state(dir: &Path) -> Result<Option<PersistentState>, PersistentError> {
        let path = dir.join(STATE_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(PersistentError::Io {
                    action: "read",
                    path,
                    source,
                });
            }
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| PersistentError::State {
                path,
                detail: e.to_string(),
            })
    }

    /// Stops the control plane recorded in `dir` and removes `dir`. Returns whether any
    /// of its processes was still running. A missing `dir` is not an error (`Ok(false)`).
    /// Blocks for up to ~15 s.
    pub fn stop_persistent(dir: &Path) -> Result<bool, PersistentError> {
        if !dir.exists() {
            return Ok(false);
        }
        let Some(state) = Self::persistent_state(dir)? else {
            let mut entries = std::fs::read_dir(dir).map_err(persistent_io_err("read", dir))?;
            if entries.next().is_some() {
                return Err(PersistentError::NotAControlPlaneDir(dir.to_owned()));
            }
            std::fs::remove_dir(dir).map_err(persistent_io_err("remove", dir))?;
            return Ok(false);
        };
        let mut any = false;
        for pid in state.controllers.values() {
            any |= process::terminate_pid(*pid, GRACE);
        }
        let a = process::terminate_pid(state.pids.kube_apiserver, GRACE);
        let e = process::terminate_pid(state.pids.etcd, GRACE);
        std::fs::remove_dir_all(dir).map_err(persistent_io_err("remove", dir))?;
        Ok(any || a || e)
    }
}
