//! kube-controller-manager's service-account token controller against a running control plane,
//! for as long as a test holds it: the controller that fills a `kubernetes.io/service-account-token`
//! Secret with a token of the ServiceAccount it names, signed with the control plane's
//! service-account key (the key kube-apiserver verifies tokens with, so a filled token
//! authenticates).
//!
//! The shared control plane runs no controllers; a test that needs this one starts it beside
//! the API server ([`TokenController::start`]) and it stops when the value is dropped (or, should
//! the test process die, when its own watchdog notices). It serves nothing (`--secure-port=0`).

use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use crate::control_plane::{ControlPlane, Error, blocking, io_err};
use crate::process::{self, Watchdog};

/// A running token controller; stopped on drop.
#[derive(Debug)]
pub struct TokenController {
    child: Option<Child>,
    watchdog: Option<Watchdog>,
    log: PathBuf,
}

impl TokenController {
    /// Starts kube-controller-manager with only its service-account token controller against
    /// `cp` (building kube-controller-manager first when it is not cached: minutes, cold).
    pub async fn start(cp: &ControlPlane) -> Result<TokenController, Error> {
        let bins = blocking(crate::binaries::ensure_controllers)
            .await?
            .map_err(Error::Binaries)?;
        let dir = log_dir(cp)?;
        let log = dir.join("kube-controller-manager.log");
        let kubeconfig = cp.kubeconfig_path().display().to_string();
        let key = cp.dir().join("pki").join("sa.key");
        let args = vec![
            format!("--kubeconfig={kubeconfig}"),
            format!("--authentication-kubeconfig={kubeconfig}"),
            format!("--authorization-kubeconfig={kubeconfig}"),
            "--controllers=serviceaccount-token".to_owned(),
            format!("--service-account-private-key-file={}", key.display()),
            "--authentication-skip-lookup".to_owned(),
            "--leader-elect=false".to_owned(),
            "--secure-port=0".to_owned(),
            "-v=1".to_owned(),
        ];
        let mut watchdog = Watchdog::spawn(&dir)?;
        let child = process::spawn_logged(&bins.kube_controller_manager, &args, &log, false)?;
        watchdog.watch(child.id())?;
        Ok(TokenController {
            child: Some(child),
            watchdog: Some(watchdog),
            log,
        })
    }

    /// Its log file.
    pub fn log(&self) -> &std::path::Path {
        &self.log
    }

    /// The last lines of its log (for a failing test's message).
    pub fn log_tail(&self) -> String {
        process::log_tail(&self.log, 30)
    }
}

/// A fresh directory for the controller's log beside the control plane's files.
fn log_dir(cp: &ControlPlane) -> Result<PathBuf, Error> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = cp.dir().join(format!(
        "token-controller-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(io_err("create", &dir))?;
    Ok(dir)
}

impl Drop for TokenController {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            process::terminate_child(&mut child, Duration::from_secs(10));
        }
        if let Some(w) = self.watchdog.take() {
            w.disarm();
        }
    }
}
