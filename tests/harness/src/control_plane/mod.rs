//! Starting etcd + kube-apiserver the way controller-runtime's envtest does, owned by a
//! [`ControlPlane`] value that cleans everything up on drop.
//!
//! Each control plane gets a fresh directory (`$TMPDIR/capstan-cp-*`) holding the etcd data,
//! the certificates, the kubeconfig, both process logs and the audit log. Ports are picked
//! by binding `127.0.0.1:0`; should another process grab one before etcd/kube-apiserver
//! binds it, start-up is retried with new ports.
//!
//! The processes are plain `std::process` children and the [`kube::Config`] is kept, not a
//! [`kube::Client`]: a client is bound to the tokio runtime it was created on, and every
//! `#[tokio::test]` has its own runtime, so [`ControlPlane::client`] builds a new client for
//! the caller's runtime.
//!
//! Clean-up: `Drop` (also during a panic's unwinding) sends SIGTERM to kube-apiserver then
//! etcd, SIGKILL after 10 s, and removes the directory. When destructors do not run (the
//! static shared instance, `SIGKILL`, abort) the [`Watchdog`] does the same; see
//! [`crate::process`]. Set `CAPSTAN_KEEP_CONTROL_PLANE=1` to keep the directory (logs)
//! for debugging; its path is printed.

pub mod controllers;

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::audit::{AUDIT_POLICY, AuditError, AuditLog};
use crate::binaries::{self, Binaries, BinariesError};
use crate::certs::{CertError, Pki};
use crate::crds::{self, CrdError, CrdFile};
use crate::process::{self, ProcessError, ProcessId, Watchdog};
use crate::versions::Versions;
use controllers::{Controllers, LogsOnFailure};

/// Name of the cluster, user and context in the kubeconfig.
pub const CONTEXT_NAME: &str = "capstan-dev";

/// How long processes get between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(10);

/// Options for [`ControlPlane::start_with`].
#[derive(Debug, Clone)]
pub struct StartOptions {
    /// Install the upstream CRDs (default true).
    pub install_crds: bool,
    /// Limit for each readiness wait (etcd, kube-apiserver, CRDs). Default 120 s.
    pub timeout: Duration,
    /// Extra kube-apiserver flags (`--flag=value`), appended last.
    pub extra_apiserver_args: Vec<String>,
    /// Also run the controllers (kube-controller-manager's garbage collector and namespace
    /// controllers, the Cluster API managers with CAPD's in-memory backend) and wait until they
    /// reconcile; see [`controllers`]. Implies installing the CRDs. Default false.
    pub controllers: bool,
}

impl Default for StartOptions {
    fn default() -> Self {
        StartOptions {
            install_crds: true,
            timeout: Duration::from_secs(120),
            extra_apiserver_args: Vec::new(),
            controllers: false,
        }
    }
}

/// Errors of starting / talking to a control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Building or locating the binaries failed.
    #[error(transparent)]
    Binaries(#[from] BinariesError),
    /// Finding or installing CRDs failed.
    #[error(transparent)]
    Crds(#[from] CrdError),
    /// Certificate generation failed.
    #[error(transparent)]
    Certs(#[from] CertError),
    /// Spawning a process failed.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// Reading the audit log failed.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// Filesystem error.
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A process exited during start-up.
    #[error("{what} exited during start-up ({status}); log {log}:\n{tail}")]
    EarlyExit {
        what: &'static str,
        status: std::process::ExitStatus,
        log: PathBuf,
        tail: String,
    },
    /// A readiness check did not pass in time.
    #[error("timed out after {after:?} waiting for {what}: {detail}")]
    Timeout {
        what: &'static str,
        after: Duration,
        detail: String,
    },
    /// The generated kubeconfig was rejected by kube.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// An API request failed.
    #[error("{action}: {source}")]
    Kube {
        action: &'static str,
        source: kube::Error,
    },
    /// A controller exited while starting or being checked.
    #[error("{name} exited ({status}); log {log}:\n{tail}")]
    ControllerExit {
        name: String,
        status: std::process::ExitStatus,
        log: PathBuf,
        tail: String,
    },
    /// A blocking task panicked or was cancelled.
    #[error("background task failed: {0}")]
    Task(String),
}

pub(crate) fn io_err<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// Durations of the phases of [`ControlPlane::start`].
#[derive(Debug, Clone, Default)]
pub struct StartTimings {
    /// [`binaries::ensure_binaries`] (zero-ish when cached).
    pub binaries: Duration,
    /// [`crds::crd_files`] (`go mod download`).
    pub crd_files: Duration,
    /// Certificates, spawning, etcd healthy, kube-apiserver healthy, default namespace.
    pub processes: Duration,
    /// Applying the CRDs until established and discoverable.
    pub crds: Duration,
    /// The whole call.
    pub total: Duration,
    /// Number of CRDs installed.
    pub crd_count: usize,
    /// Starting the controllers until they reconcile (zero without them).
    pub controllers: Duration,
}

/// Pids of a control plane's processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pids {
    /// etcd.
    pub etcd: ProcessId,
    /// kube-apiserver.
    pub kube_apiserver: ProcessId,
}

/// Where a control plane listens and keeps its files.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Endpoints {
    /// `https://127.0.0.1:<port>`.
    pub server_url: String,
    /// `http://127.0.0.1:<port>`.
    pub etcd_url: String,
    /// kube-apiserver secure port.
    pub apiserver_port: u16,
    /// etcd client port.
    pub etcd_client_port: u16,
    /// etcd peer port.
    pub etcd_peer_port: u16,
    /// The kubeconfig file (admin, context [`CONTEXT_NAME`]).
    pub kubeconfig: PathBuf,
    /// The audit log (JSON lines).
    pub audit_log: PathBuf,
}

/// A running etcd + kube-apiserver. Dropping it stops both and removes its directory.
pub struct ControlPlane {
    dir: PathBuf,
    etcd: Option<Child>,
    apiserver: Option<Child>,
    watchdog: Option<Watchdog>,
    endpoints: Endpoints,
    config: Config,
    kubeconfig_yaml: String,
    audit: AuditLog,
    versions: Versions,
    crds: Vec<CrdFile>,
    timings: StartTimings,
    controllers: Option<Controllers>,
    spawns: Option<[Spawn; 2]>,
    timeout: Duration,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("dir", &self.dir)
            .field("endpoints", &self.endpoints)
            .field("versions", &self.versions)
            .finish_non_exhaustive()
    }
}

/// What [`launch`] hands back.
pub(crate) struct Launched {
    pub etcd: Child,
    pub apiserver: Child,
    /// How etcd and kube-apiserver were started, to start them again the same way.
    pub spawns: [Spawn; 2],
    pub endpoints: Endpoints,
    pub config: Config,
    pub kubeconfig_yaml: String,
}

/// A process as it was started: program, arguments, log file.
#[derive(Debug, Clone)]
pub(crate) struct Spawn {
    program: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    detach: bool,
}

impl Spawn {
    fn start(&self) -> Result<Child, Error> {
        Ok(process::spawn_logged(
            &self.program,
            &self.args,
            &self.log,
            self.detach,
        )?)
    }
}

/// Kills whatever it still holds when dropped (start-up failed half-way).
struct Guard {
    etcd: Option<Child>,
    apiserver: Option<Child>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = self.apiserver.as_mut() {
            process::terminate_child(c, GRACE);
        }
        if let Some(c) = self.etcd.as_mut() {
            process::terminate_child(c, GRACE);
        }
    }
}

impl ControlPlane {
    /// Builds the binaries if needed, starts etcd and kube-apiserver in a fresh temp dir and
    /// installs the CRDs. Must be called inside a tokio runtime.
    pub async fn start() -> Result<ControlPlane, Error> {
        Self::start_with(StartOptions::default()).await
    }

    /// [`ControlPlane::start`] with options.
    pub async fn start_with(opts: StartOptions) -> Result<ControlPlane, Error> {
        let t0 = Instant::now();
        let bins = blocking(binaries::ensure_binaries).await??;
        let t_bins = t0.elapsed();
        let t1 = Instant::now();
        let crd_files = if opts.install_crds || opts.controllers {
            blocking(crds::crd_files).await??
        } else {
            Vec::new()
        };
        let t_crd_files = t1.elapsed();

        let t2 = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("capstan-cp-")
            .tempdir()
            .map_err(io_err("create temp dir in", &std::env::temp_dir()))?
            .keep();
        // From here on `cp`'s Drop (or the watchdog) owns the clean-up of `dir`.
        let mut watchdog = match Watchdog::spawn(&dir) {
            Ok(w) => w,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e.into());
            }
        };
        let launched =
            match launch_with_retries(&dir, &bins, false, Some(&mut watchdog), &opts).await {
                Ok(l) => l,
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    watchdog.disarm();
                    return Err(e);
                }
            };
        let mut cp = ControlPlane {
            audit: AuditLog::new(launched.endpoints.audit_log.clone()),
            dir,
            etcd: Some(launched.etcd),
            apiserver: Some(launched.apiserver),
            watchdog: Some(watchdog),
            endpoints: launched.endpoints,
            config: launched.config,
            kubeconfig_yaml: launched.kubeconfig_yaml,
            versions: bins.versions.clone(),
            crds: crd_files,
            timings: StartTimings::default(),
            controllers: None,
            spawns: Some(launched.spawns),
            timeout: opts.timeout,
        };
        let t_processes = t2.elapsed();

        let t3 = Instant::now();
        if opts.install_crds || opts.controllers {
            let client = cp.try_client()?;
            crds::install_crds(&client, &cp.crds, opts.timeout).await?;
        }
        let t_crds = t3.elapsed();
        let t4 = Instant::now();
        if opts.controllers {
            let client = cp.try_client()?;
            let running = controllers::start(
                &cp.dir,
                &cp.endpoints.kubeconfig,
                &client,
                false,
                cp.watchdog.as_mut(),
                opts.timeout,
            )
            .await?;
            cp.controllers = Some(running);
        }
        cp.timings = StartTimings {
            binaries: t_bins,
            crd_files: t_crd_files,
            processes: t_processes,
            crds: t_crds,
            total: t0.elapsed(),
            crd_count: cp.crds.len(),
            controllers: if opts.controllers {
                t4.elapsed()
            } else {
                Duration::ZERO
            },
        };
        Ok(cp)
    }

    /// Starts the controllers on this running control plane (one started without them, or whose
    /// controllers were stopped) and waits until they reconcile, as installing them into a new
    /// management cluster would. Expects the CRDs installed (`install_crds`). Only one CAPD runs on
    /// a machine: another control plane's controllers must be stopped first.
    pub async fn start_controllers(&mut self) -> Result<(), Error> {
        if self.controllers.is_some() {
            return Ok(());
        }
        let t0 = Instant::now();
        let client = self.try_client()?;
        let running = controllers::start(
            &self.dir,
            &self.endpoints.kubeconfig,
            &client,
            false,
            self.watchdog.as_mut(),
            self.timeout,
        )
        .await?;
        self.controllers = Some(running);
        self.timings.controllers = t0.elapsed();
        Ok(())
    }

    /// Uninstalls the controllers and keeps etcd, the API server and the CRDs: their webhook
    /// configurations deleted and the CRDs' conversion back to `None`, then the processes stopped
    /// (SIGTERM, SIGKILL after the grace period). What CAPD's in-memory backend held goes with its
    /// process, as a management cluster's controllers go when it is retired after a move; the
    /// control plane is then as one started with the CRDs alone, and takes a move's writes.
    pub async fn stop_controllers(&mut self) -> Result<(), Error> {
        if self.controllers.is_none() {
            return Ok(());
        }
        let client = self.try_client()?;
        controllers::uninstall_webhooks(&client).await?;
        if let Some(c) = self.controllers.as_mut() {
            c.stop();
        }
        self.controllers = None;
        Ok(())
    }

    /// Kills etcd (SIGKILL, as a crash would), keeps it down for `down`, then starts it again
    /// on the same data directory and ports and waits until it is healthy. For fault tests;
    /// the API server in front of it sees the outage as it would in production.
    pub async fn crash_etcd(&mut self, down: Duration) -> Result<(), Error> {
        self.crash(0, down).await
    }

    /// Kills kube-apiserver (SIGKILL), keeps it down for `down`, starts it again with the same
    /// flags (same port, certificates, audit log) and waits until it serves.
    pub async fn crash_apiserver(&mut self, down: Duration) -> Result<(), Error> {
        self.crash(1, down).await
    }

    async fn crash(&mut self, which: usize, down: Duration) -> Result<(), Error> {
        let spawn = self
            .spawns
            .as_ref()
            .map(|s| s[which].clone())
            .ok_or(Error::Task("this control plane cannot be restarted".into()))?;
        let slot = if which == 0 {
            &mut self.etcd
        } else {
            &mut self.apiserver
        };
        if let Some(mut child) = slot.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        tokio::time::sleep(down).await;
        let mut child = spawn.start()?;
        if let Some(w) = self.watchdog.as_mut() {
            w.watch(child.id())?;
        }
        if which == 0 {
            wait_etcd(
                &mut child,
                self.endpoints.etcd_client_port,
                &spawn.log,
                self.timeout,
            )
            .await?;
            self.etcd = Some(child);
        } else {
            let client = self.try_client()?;
            wait_apiserver(&mut child, &client, &spawn.log, self.timeout).await?;
            self.apiserver = Some(child);
        }
        Ok(())
    }

    /// The kubeconfig file (user `admin` in `system:masters`, context [`CONTEXT_NAME`]).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.endpoints.kubeconfig
    }

    /// The kubeconfig contents.
    pub fn kubeconfig_yaml(&self) -> &str {
        &self.kubeconfig_yaml
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        &self.endpoints.server_url
    }

    /// `http://127.0.0.1:<port>` of etcd.
    pub fn etcd_url(&self) -> &str {
        &self.endpoints.etcd_url
    }

    /// Ports and paths.
    pub fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    /// The control plane's directory (removed on drop).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A kube client config; clone it to build clients on any runtime.
    pub fn kube_config(&self) -> &Config {
        &self.config
    }

    /// A new client bound to the current tokio runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime, or if the TLS configuration is unusable (it was already
    /// used successfully during start-up).
    pub fn client(&self) -> Client {
        self.try_client()
            .expect("kube client for the test control plane")
    }

    /// Like [`ControlPlane::client`] but returns errors.
    pub fn try_client(&self) -> Result<Client, Error> {
        crate::install_crypto_provider();
        Client::try_from(self.config.clone()).map_err(|source| Error::Kube {
            action: "create client",
            source,
        })
    }

    /// The audit log.
    pub fn audit(&self) -> &AuditLog {
        &self.audit
    }

    /// Pinned versions of the running binaries.
    pub fn versions(&self) -> &Versions {
        &self.versions
    }

    /// The installed CRDs.
    pub fn crds(&self) -> &[CrdFile] {
        &self.crds
    }

    /// How long start-up took.
    pub fn timings(&self) -> &StartTimings {
        &self.timings
    }

    /// The running controllers, when started with them.
    pub fn controllers(&self) -> Option<&Controllers> {
        self.controllers.as_ref()
    }

    /// A guard that keeps the controllers' logs (and prints how they end) when the test
    /// holding it panics. Without controllers it keeps the API server's log.
    pub fn logs_on_failure(&self, test: &str) -> LogsOnFailure {
        let mut logs = self
            .controllers
            .as_ref()
            .map(Controllers::logs)
            .unwrap_or_default();
        logs.insert("kube-apiserver".into(), self.dir.join("kube-apiserver.log"));
        LogsOnFailure::new(test, logs).keeping("audit.log", self.endpoints.audit_log.clone())
    }

    /// Pids of etcd and kube-apiserver.
    pub fn pids(&self) -> Pids {
        Pids {
            etcd: ProcessId::of(self.etcd.as_ref().map(Child::id).unwrap_or(0)),
            kube_apiserver: ProcessId::of(self.apiserver.as_ref().map(Child::id).unwrap_or(0)),
        }
    }

    /// Pid of the watchdog process (see [`crate::process`]).
    pub fn watchdog_pid(&self) -> Option<u32> {
        self.watchdog.as_ref().map(Watchdog::pid)
    }

    /// etcd's `/version` (`{"etcdserver":"3.6.x","etcdcluster":"3.6.0"}`).
    pub async fn etcd_version(&self) -> Result<serde_json::Value, Error> {
        let (code, body) = http_get(self.endpoints.etcd_client_port, "/version")
            .await
            .map_err(io_err("GET etcd /version", &self.dir))?;
        if code != 200 {
            return Err(Error::Task(format!(
                "etcd /version returned {code}: {body}"
            )));
        }
        serde_json::from_str(&body).map_err(|e| Error::Task(format!("etcd /version: {e}: {body}")))
    }

    /// Stops the processes and removes the directory (what `Drop` does, explicitly).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(c) = self.controllers.as_mut() {
            c.stop();
        }
        self.controllers = None;
        if let Some(c) = self.apiserver.as_mut() {
            process::terminate_child(c, GRACE);
        }
        if let Some(c) = self.etcd.as_mut() {
            process::terminate_child(c, GRACE);
        }
        self.apiserver = None;
        self.etcd = None;
        if std::env::var_os("CAPSTAN_KEEP_CONTROL_PLANE").is_some_and(|v| !v.is_empty() && v != "0")
        {
            binaries::progress(&format!(
                "keeping control plane directory {}",
                self.dir.display()
            ));
            if let Some(w) = self.watchdog.take() {
                w.disarm();
            }
            return;
        }
        if self.dir.exists() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        if let Some(w) = self.watchdog.take() {
            w.disarm();
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Runs a blocking closure on tokio's blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Task(e.to_string()))
}

/// Three distinct free ports ([`crate::ports`]).
fn choose_three_ports() -> Result<[u16; 3], Error> {
    let err = io_err("choose ports", Path::new("127.0.0.1"));
    crate::ports::free_ports(3)
        .map_err(err)?
        .try_into()
        .map_err(|ports| Error::Task(format!("asked for three ports, got {ports:?}")))
}

/// [`launch`], retried with fresh ports when a port was taken in the meantime.
pub(crate) async fn launch_with_retries(
    dir: &Path,
    bins: &Binaries,
    detach: bool,
    mut watchdog: Option<&mut Watchdog>,
    opts: &StartOptions,
) -> Result<Launched, Error> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match launch(dir, bins, detach, watchdog.as_deref_mut(), opts).await {
            Err(Error::EarlyExit { tail, .. })
                if attempt < 3
                    && (tail.contains("address already in use") || tail.contains("bind:")) =>
            {
                let _ = std::fs::remove_dir_all(dir.join("etcd-data"));
                continue;
            }
            other => return other,
        }
    }
}

/// Writes certificates and config into `dir`, starts etcd and kube-apiserver and waits
/// until the API server serves the `default` namespace.
pub(crate) async fn launch(
    dir: &Path,
    bins: &Binaries,
    detach: bool,
    mut watchdog: Option<&mut Watchdog>,
    opts: &StartOptions,
) -> Result<Launched, Error> {
    let pki = Pki::generate()?;
    let files = pki.write(&dir.join("pki"))?;
    let policy = dir.join("audit-policy.yaml");
    std::fs::write(&policy, AUDIT_POLICY).map_err(io_err("write", &policy))?;
    let [api_port, etcd_port, peer_port] = choose_three_ports()?;
    let etcd_log = dir.join("etcd.log");
    let api_log = dir.join("kube-apiserver.log");
    let audit_log = dir.join("audit.log");
    let mut guard = Guard {
        etcd: None,
        apiserver: None,
    };

    let etcd_args = vec![
        "--name=capstan".to_owned(),
        format!("--data-dir={}", dir.join("etcd-data").display()),
        format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"),
        format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"),
        format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
        format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
        format!("--initial-cluster=capstan=http://127.0.0.1:{peer_port}"),
        "--unsafe-no-fsync=true".to_owned(),
        "--log-level=warn".to_owned(),
    ];
    let etcd_spawn = Spawn {
        program: bins.etcd.clone(),
        args: etcd_args,
        log: etcd_log.clone(),
        detach,
    };
    let etcd = etcd_spawn.start()?;
    if let Some(w) = watchdog.as_deref_mut() {
        w.watch(etcd.id())?;
    }
    let etcd = guard.etcd.insert(etcd);
    wait_etcd(etcd, etcd_port, &etcd_log, opts.timeout).await?;

    let mut api_args = vec![
        format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
        format!("--cert-dir={}", files.dir.display()),
        format!("--tls-cert-file={}", files.serving_cert.display()),
        format!("--tls-private-key-file={}", files.serving_key.display()),
        format!("--secure-port={api_port}"),
        "--bind-address=127.0.0.1".to_owned(),
        "--advertise-address=127.0.0.1".to_owned(),
        "--service-cluster-ip-range=10.0.0.0/24".to_owned(),
        "--allow-privileged=true".to_owned(),
        "--disable-admission-plugins=ServiceAccount".to_owned(),
        "--authorization-mode=RBAC".to_owned(),
        format!("--client-ca-file={}", files.client_ca.display()),
        format!("--service-account-issuer=https://127.0.0.1:{api_port}/"),
        format!("--service-account-key-file={}", files.sa_public.display()),
        format!(
            "--service-account-signing-key-file={}",
            files.sa_private.display()
        ),
        format!("--audit-log-path={}", audit_log.display()),
        format!("--audit-policy-file={}", policy.display()),
        "--audit-log-mode=blocking".to_owned(),
        "--audit-log-format=json".to_owned(),
        "--audit-log-maxsize=0".to_owned(),
        "--audit-log-maxbackup=0".to_owned(),
    ];
    api_args.extend(opts.extra_apiserver_args.iter().cloned());
    let api_spawn = Spawn {
        program: bins.kube_apiserver.clone(),
        args: api_args,
        log: api_log.clone(),
        detach,
    };
    let apiserver = api_spawn.start()?;
    if let Some(w) = watchdog {
        w.watch(apiserver.id())?;
    }
    guard.apiserver = Some(apiserver);

    let server_url = format!("https://127.0.0.1:{api_port}");
    let kubeconfig_yaml = kubeconfig(&server_url, &pki);
    let kubeconfig_path = dir.join("kubeconfig");
    write_private(&kubeconfig_path, &kubeconfig_yaml)?;
    let kc =
        Kubeconfig::from_yaml(&kubeconfig_yaml).map_err(|e| Error::Kubeconfig(e.to_string()))?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Kubeconfig(e.to_string()))?;
    crate::install_crypto_provider();
    let client = Client::try_from(config.clone()).map_err(|source| Error::Kube {
        action: "create client",
        source,
    })?;
    wait_apiserver(
        guard.apiserver.as_mut().expect("set above"),
        &client,
        &api_log,
        opts.timeout,
    )
    .await?;

    Ok(Launched {
        etcd: guard.etcd.take().expect("set above"),
        apiserver: guard.apiserver.take().expect("set above"),
        spawns: [etcd_spawn, api_spawn],
        endpoints: Endpoints {
            server_url,
            etcd_url: format!("http://127.0.0.1:{etcd_port}"),
            apiserver_port: api_port,
            etcd_client_port: etcd_port,
            etcd_peer_port: peer_port,
            kubeconfig: kubeconfig_path,
            audit_log,
        },
        config,
        kubeconfig_yaml,
    })
}

fn early_exit(child: &mut Child, what: &'static str, log: &Path) -> Result<(), Error> {
    if let Ok(Some(status)) = child.try_wait() {
        return Err(Error::EarlyExit {
            what,
            status,
            log: log.to_owned(),
            tail: process::log_tail(log, 30),
        });
    }
    Ok(())
}

async fn wait_etcd(
    child: &mut Child,
    port: u16,
    log: &Path,
    timeout: Duration,
) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    let mut last;
    loop {
        early_exit(child, "etcd", log)?;
        match http_get(port, "/health").await {
            Ok((200, body)) if body.contains("true") => return Ok(()),
            Ok((code, body)) => last = format!("{code} {body}"),
            Err(e) => last = e.to_string(),
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout {
                what: "etcd /health",
                after: timeout,
                detail: last,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait_apiserver(
    child: &mut Child,
    client: &Client,
    log: &Path,
    timeout: Duration,
) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    let mut last;
    loop {
        early_exit(child, "kube-apiserver", log)?;
        let req = http::Request::get("/healthz")
            .body(Vec::new())
            .expect("static request");
        match client.request_text(req).await {
            Ok(body) if body.trim() == "ok" => {
                let ns: Api<Namespace> = Api::all(client.clone());
                match ns.get("default").await {
                    Ok(_) => return Ok(()),
                    Err(e) => last = format!("namespace default: {e}"),
                }
            }
            Ok(body) => last = body,
            Err(e) => last = e.to_string(),
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout {
                what: "kube-apiserver /healthz and namespace default",
                after: timeout,
                detail: format!("{last}\nlog tail:\n{}", process::log_tail(log, 20)),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Minimal HTTP/1.0 GET on `127.0.0.1:port` (etcd's plain-HTTP endpoints).
pub(crate) async fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
            .await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let code = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        Ok((code, body))
    };
    tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

fn kubeconfig(server: &str, pki: &Pki) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {CONTEXT_NAME}
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: {CONTEXT_NAME}
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: {CONTEXT_NAME}
  context:
    cluster: {CONTEXT_NAME}
    user: {CONTEXT_NAME}
    namespace: default
current-context: {CONTEXT_NAME}
",
        ca = b64(&pki.serving_ca_pem),
        cert = b64(&pki.admin_cert_pem),
        key = b64(&pki.admin_key_pem),
    )
}

/// Writes a file readable only by the owner (it holds a private key).
pub(crate) fn write_private(path: &Path, contents: &str) -> Result<(), Error> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::File::options()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err("create", path))?;
    f.write_all(contents.as_bytes())
        .map_err(io_err("write", path))
}
