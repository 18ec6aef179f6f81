//! The real controllers on a test control plane: kube-controller-manager (garbage collector and
//! namespace controllers) and the Cluster API managers (core, kubeadm bootstrap, kubeadm control
//! plane, CAPD with its in-memory backend standing in for machines).
//!
//! They run as plain processes next to etcd and kube-apiserver, out of cluster, as an install
//! would run them in cluster, minus cert-manager:
//!
//! ```text
//! ensure_controllers()        build once into <cache>/controllers/<key>/bin
//! ServingCert::generate()     a CA and a loopback serving cert: <dir>/webhook-certs/tls.{crt,key}
//! spawn                       each manager on its own loopback ports (webhook, health,
//!                             diagnostics), --leader-elect=false, POD_IP=127.0.0.1 (CAPD serves
//!                             each simulated workload API server on loopback)
//! wait /readyz                each manager's webhook server is up
//! webhooks                    the modules' own config/webhook/manifests.yaml, renamed per
//!                             provider, service references rewritten to https://127.0.0.1:<port>
//!                             with the CA bundle; the CRDs' conversion webhooks as the modules'
//!                             config/crd/kustomization.yaml patches them, pointed the same way
//! readiness                   a canary Cluster gets the core controller's finalizer and is
//!                             deleted (admission webhooks, the core controller and deletion
//!                             work); a canary namespace is deleted (kube-controller-manager's
//!                             namespace controller works)
//! ```
//!
//! Everything the controllers need is read from the Go module cache, never copied here.
//!
//! CAPD's in-memory backend listens on a fixed debug port (19000) and hands out workload ports
//! from 20000 up, on every interface that `POD_IP` names: only one CAPD can run on a machine.
//! [`start`] therefore waits for port 19000 to be free (the previous test binary's CAPD being
//! stopped by its watchdog) and says so when it stays taken (`capstan dev up` running?).
//!
//! Logs: one file per process in the control plane's `logs/` directory; [`LogsOnFailure`] copies
//! them out of the (soon removed) directory when a test panics and prints where they are and
//! how each ends.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use super::{Error, blocking, io_err};
use crate::binaries::{self, ControllerBinaries};
use crate::certs::ServingCert;
use crate::crds;
use crate::process::{self, ProcessId, Watchdog};

pub use crate::ports::CAPD_DEBUG_PORT;

/// Field manager of the webhook wiring (conversion settings of the CRDs, webhook
/// configurations).
pub const WEBHOOK_FIELD_MANAGER: &str = "capstan-harness-webhooks";

/// How long processes get between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(10);

/// One Cluster API manager: which binary, and where its module keeps its configuration.
struct Provider {
    /// Short name: process and log name, suffix of its webhook configurations.
    name: &'static str,
    /// Go module holding its `config/`.
    module: &'static str,
    /// `config/` directory inside the module.
    config: &'static str,
    binary: fn(&ControllerBinaries) -> &Path,
}

const PROVIDERS: &[Provider] = &[
    Provider {
        name: "capi",
        module: "sigs.k8s.io/cluster-api",
        config: "core/config",
        binary: |b| &b.capi,
    },
    Provider {
        name: "capi-kubeadm-bootstrap",
        module: "sigs.k8s.io/cluster-api",
        config: "bootstrap/kubeadm/config",
        binary: |b| &b.kubeadm_bootstrap,
    },
    Provider {
        name: "capi-kubeadm-control-plane",
        module: "sigs.k8s.io/cluster-api",
        config: "controlplane/kubeadm/config",
        binary: |b| &b.kubeadm_control_plane,
    },
    Provider {
        name: "capd",
        module: "sigs.k8s.io/cluster-api/test",
        config: "infrastructure/docker/config",
        binary: |b| &b.capd,
    },
];

/// A controller process.
#[derive(Debug)]
pub(crate) struct Proc {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

/// The running controllers of a control plane.
#[derive(Debug)]
pub struct Controllers {
    pub(crate) procs: Vec<Proc>,
    logs: PathBuf,
    versions: String,
    timings: Duration,
}

impl Controllers {
    /// Log files, by process name.
    pub fn logs(&self) -> BTreeMap<String, PathBuf> {
        self.procs
            .iter()
            .map(|p| (p.name.clone(), p.log.clone()))
            .collect()
    }

    /// The directory of the log files.
    pub fn logs_dir(&self) -> &Path {
        &self.logs
    }

    /// Pids by process name.
    pub fn pids(&self) -> BTreeMap<String, ProcessId> {
        self.procs
            .iter()
            .map(|p| (p.name.clone(), ProcessId::of(p.child.id())))
            .collect()
    }

    /// The Cluster API version running.
    pub fn cluster_api_version(&self) -> &str {
        &self.versions
    }

    /// How long starting them took (build excluded when cached), until ready.
    pub fn start_time(&self) -> Duration {
        self.timings
    }

    /// Stops every process (SIGTERM, SIGKILL after the grace period).
    pub(crate) fn stop(&mut self) {
        for p in self.procs.iter_mut().rev() {
            process::terminate_child(&mut p.child, GRACE);
        }
    }
}

/// Ports of one manager.
#[derive(Debug, Clone, Copy)]
struct Ports {
    webhook: u16,
    health: u16,
    diagnostics: u16,
}

/// `n` distinct free ports ([`crate::ports`]).
fn choose_ports(n: usize) -> Result<Vec<u16>, Error> {
    crate::ports::free_ports(n).map_err(io_err("choose ports", Path::new("127.0.0.1")))
}

/// The controller whose port was taken between choosing and binding it (another test's
/// process got it first), when that is why a start failed: the start is tried again with
/// fresh ports.
fn port_lost_by(e: &Error) -> Option<&str> {
    match e {
        Error::ControllerExit { name, tail, .. } if tail.contains("address already in use") => {
            Some(name)
        }
        _ => None,
    }
}

/// Waits until CAPD's fixed debug port can be bound (nothing else serves it).
async fn wait_capd_port(timeout: Duration) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    let mut told = false;
    loop {
        if TcpListener::bind(("0.0.0.0", CAPD_DEBUG_PORT)).is_ok() {
            return Ok(());
        }
        if !told {
            binaries::progress(&format!(
                "port {CAPD_DEBUG_PORT} (CAPD's in-memory backend) is taken: waiting for the other CAPD to stop (`capstan dev down` stops the local management cluster's)"
            ));
            told = true;
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout {
                what: "CAPD's port 19000 to be free",
                after: timeout,
                detail: "another CAPD in-memory backend runs on this machine (is `capstan dev up` running? `capstan dev down` stops it)".into(),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Starts the controllers against the control plane whose files are in `dir`, installs their
/// webhooks and waits until they reconcile. `detach`: processes that outlive the caller
/// (`capstan dev up`). A start that lost a port to another process is tried again, up to
/// three times.
pub(crate) async fn start(
    dir: &Path,
    kubeconfig: &Path,
    client: &Client,
    detach: bool,
    mut watchdog: Option<&mut Watchdog>,
    timeout: Duration,
) -> Result<Controllers, Error> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let result = start_once(
            dir,
            kubeconfig,
            client,
            detach,
            watchdog.as_deref_mut(),
            timeout,
        )
        .await;
        match result.as_ref().err().and_then(port_lost_by) {
            Some(name) if attempt < 3 => binaries::progress(&format!(
                "{name} lost its port to another process: starting the controllers again on new ports"
            )),
            _ => return result,
        }
    }
}

async fn start_once(
    dir: &Path,
    kubeconfig: &Path,
    client: &Client,
    detach: bool,
    mut watchdog: Option<&mut Watchdog>,
    timeout: Duration,
) -> Result<Controllers, Error> {
    let t0 = Instant::now();
    let bins = blocking(binaries::ensure_controllers).await??;
    let modules = blocking(crds::module_dirs).await??;
    wait_capd_port(timeout).await?;

    let cert = ServingCert::generate()?;
    let cert_dir = dir.join("webhook-certs");
    cert.write(&cert_dir)?;
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(io_err("create", &logs))?;
    let kubeconfig = kubeconfig.display().to_string();

    let mut controllers = Controllers {
        procs: Vec::new(),
        logs: logs.clone(),
        versions: bins.cluster_api_version.clone(),
        timings: Duration::ZERO,
    };
    let result = async {
        // kube-controller-manager: only what a real cluster does behind every controller's
        // back (owner references collected, namespaces emptied on deletion).
        let mut chosen = choose_ports(1 + 3 * PROVIDERS.len())?.into_iter();
        let mut next_port = || chosen.next().expect("one port per listener");
        let kcm_port = next_port();
        let kcm_args = vec![
            format!("--kubeconfig={kubeconfig}"),
            format!("--authentication-kubeconfig={kubeconfig}"),
            format!("--authorization-kubeconfig={kubeconfig}"),
            "--controllers=garbagecollector,namespace".to_owned(),
            // The test API server has no front-proxy CA to look up.
            "--authentication-skip-lookup".to_owned(),
            "--leader-elect=false".to_owned(),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={kcm_port}"),
            format!("--cert-dir={}", dir.join("kcm-certs").display()),
            "--concurrent-gc-syncs=5".to_owned(),
            "-v=1".to_owned(),
        ];
        spawn(
            &mut controllers,
            watchdog.as_deref_mut(),
            "kube-controller-manager",
            &bins.kube_controller_manager,
            &kcm_args,
            detach,
            &[],
        )?;

        let mut ports = Vec::new();
        for p in PROVIDERS {
            let ports_of = Ports {
                webhook: next_port(),
                health: next_port(),
                diagnostics: next_port(),
            };
            let args = vec![
                format!("--kubeconfig={kubeconfig}"),
                "--leader-elect=false".to_owned(),
                format!("--webhook-port={}", ports_of.webhook),
                format!("--webhook-cert-dir={}", cert_dir.display()),
                format!("--health-addr=127.0.0.1:{}", ports_of.health),
                format!("--diagnostics-address=127.0.0.1:{}", ports_of.diagnostics),
                "--insecure-diagnostics".to_owned(),
                "--v=1".to_owned(),
            ];
            spawn(
                &mut controllers,
                watchdog.as_deref_mut(),
                p.name,
                (p.binary)(&bins),
                &args,
                detach,
                &[("POD_IP", "127.0.0.1")],
            )?;
            ports.push(ports_of);
        }

        // The webhook servers are up once /readyz says so (it checks the server started).
        let deadline = Instant::now() + timeout;
        for (p, ports_of) in PROVIDERS.iter().zip(&ports) {
            wait_ready(&mut controllers, p.name, ports_of.health, deadline, timeout).await?;
        }
        install_webhooks(client, &modules, &ports, &cert.ca_pem).await?;
        readiness(client, &mut controllers, deadline, timeout).await?;
        Ok::<_, Error>(())
    }
    .await;
    if let Err(e) = result {
        controllers.stop();
        return Err(e);
    }
    controllers.timings = t0.elapsed();
    Ok(controllers)
}

fn spawn(
    controllers: &mut Controllers,
    watchdog: Option<&mut Watchdog>,
    name: &str,
    binary: &Path,
    args: &[String],
    detach: bool,
    env: &[(&str, &str)],
) -> Result<(), Error> {
    let log = controllers.logs.join(format!("{name}.log"));
    let child = process::spawn_logged_env(binary, args, &log, detach, env)?;
    if let Some(w) = watchdog {
        w.watch(child.id())?;
    }
    controllers.procs.push(Proc {
        name: name.to_owned(),
        child,
        log,
    });
    Ok(())
}

/// Fails when a controller process has exited.
fn check_alive(controllers: &mut Controllers) -> Result<(), Error> {
    for p in &mut controllers.procs {
        if let Ok(Some(status)) = p.child.try_wait() {
            return Err(Error::ControllerExit {
                name: p.name.clone(),
                status,
                log: p.log.clone(),
                tail: process::log_tail(&p.log, 30),
            });
        }
    }
    Ok(())
}

async fn wait_ready(
    controllers: &mut Controllers,
    name: &str,
    port: u16,
    deadline: Instant,
    timeout: Duration,
) -> Result<(), Error> {
    let mut last;
    loop {
        check_alive(controllers)?;
        match super::http_get(port, "/readyz").await {
            Ok((200, _)) => return Ok(()),
            Ok((code, body)) => last = format!("{code} {body}"),
            Err(e) => last = e.to_string(),
        }
        if Instant::now() > deadline {
            let log = controllers.logs.join(format!("{name}.log"));
            return Err(Error::Timeout {
                what: "a Cluster API manager's /readyz",
                after: timeout,
                detail: format!("{name}: {last}\nlog tail:\n{}", process::log_tail(&log, 20)),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reads a YAML file of the module cache into its documents.
fn read_docs(path: &Path) -> Result<Vec<Value>, Error> {
    let text = std::fs::read_to_string(path).map_err(io_err("read", path))?;
    serde_saphyr::from_str_multiple(&text)
        .map(|docs: Vec<Value>| docs.into_iter().filter(|d| !d.is_null()).collect())
        .map_err(|e| Error::Task(format!("parse {}: {e}", path.display())))
}

/// The provider's webhook configurations, renamed and pointed at its loopback port.
fn webhook_configurations(
    config: &Path,
    provider: &str,
    port: u16,
    ca: &str,
) -> Result<Vec<Value>, Error> {
    let path = config.join("webhook/manifests.yaml");
    let mut out = Vec::new();
    for mut doc in read_docs(&path)? {
        let name = doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("webhook-configuration")
            .to_owned();
        doc["metadata"] = json!({"name": format!("{provider}-{name}")});
        for hook in doc
            .get_mut("webhooks")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let path = hook
                .pointer("/clientConfig/service/path")
                .and_then(Value::as_str)
                .unwrap_or("/")
                .to_owned();
            hook["clientConfig"] =
                json!({"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": b64(ca)});
        }
        out.push(doc);
    }
    Ok(out)
}

/// `(CRD name, conversion review versions)` of the conversion webhooks a provider's
/// `config/crd/kustomization.yaml` enables.
fn conversion_patches(config: &Path) -> Result<Vec<(String, Value)>, Error> {
    let crd = config.join("crd");
    let kustomization = read_docs(&crd.join("kustomization.yaml"))?
        .into_iter()
        .next()
        .unwrap_or(Value::Null);
    let mut out = Vec::new();
    for patch in kustomization
        .get("patches")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(file) = patch.get("path").and_then(Value::as_str) else {
            continue;
        };
        for doc in read_docs(&crd.join(file))? {
            let (Some(name), Some(webhook)) = (
                doc.pointer("/metadata/name").and_then(Value::as_str),
                doc.pointer("/spec/conversion/webhook"),
            ) else {
                continue;
            };
            let versions = webhook
                .get("conversionReviewVersions")
                .cloned()
                .unwrap_or(json!(["v1"]));
            out.push((name.to_owned(), versions));
        }
    }
    Ok(out)
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

async fn install_webhooks(
    client: &Client,
    modules: &BTreeMap<String, (String, PathBuf)>,
    ports: &[Ports],
    ca: &str,
) -> Result<(), Error> {
    // A field manager of its own: applied as the CRDs' manager, these partial objects would
    // give up every other field the CRDs were installed with.
    let params = PatchParams::apply(WEBHOOK_FIELD_MANAGER).force();
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
        )),
    );
    for (p, ports_of) in PROVIDERS.iter().zip(ports) {
        let (_, root) = modules
            .get(p.module)
            .ok_or_else(|| Error::Task(format!("module {} was not downloaded", p.module)))?;
        let config = root.join(p.config);
        for (name, versions) in conversion_patches(&config)? {
            let patch = json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": name},
                "spec": {"conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": versions, "clientConfig": {
                    "url": format!("https://127.0.0.1:{}/convert", ports_of.webhook), "caBundle": b64(ca)}}}},
            });
            crds.patch(&name, &params, &Patch::Apply(&patch))
                .await
                .map_err(|source| Error::Kube {
                    action: "install a conversion webhook",
                    source,
                })?;
        }
        for doc in webhook_configurations(&config, p.name, ports_of.webhook, ca)? {
            let kind = doc
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let name = doc
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let api: Api<DynamicObject> = Api::all_with(
                client.clone(),
                &ApiResource::from_gvk(&GroupVersionKind::gvk(
                    "admissionregistration.k8s.io",
                    "v1",
                    &kind,
                )),
            );
            api.patch(&name, &params, &Patch::Apply(&doc))
                .await
                .map_err(|source| Error::Kube {
                    action: "install a webhook configuration",
                    source,
                })?;
        }
    }
    Ok(())
}

/// Undoes [`install_webhooks`]: the webhook configurations it applied are deleted and the CRDs'
/// conversion goes back to `None`, so that a control plane whose controllers are stopped takes
/// writes again, as one started with the CRDs alone does.
pub(crate) async fn uninstall_webhooks(client: &Client) -> Result<(), Error> {
    let ours = |o: &DynamicObject| {
        o.metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|f| f.manager.as_deref() == Some(WEBHOOK_FIELD_MANAGER))
    };
    let kube = |action: &'static str| move |source| Error::Kube { action, source };
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
        )),
    );
    let params = PatchParams::apply(WEBHOOK_FIELD_MANAGER).force();
    for crd in crds
        .list(&Default::default())
        .await
        .map_err(kube("list the CRDs"))?
        .items
        .iter()
        .filter(|c| ours(c))
    {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let patch = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": name},
            "spec": {"conversion": {"strategy": "None"}},
        });
        crds.patch(&name, &params, &Patch::Apply(&patch))
            .await
            .map_err(kube("remove a conversion webhook"))?;
    }
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        let api: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &ApiResource::from_gvk(&GroupVersionKind::gvk(
                "admissionregistration.k8s.io",
                "v1",
                kind,
            )),
        );
        for hook in api
            .list(&Default::default())
            .await
            .map_err(kube("list the webhook configurations"))?
            .items
            .iter()
            .filter(|h| ours(h))
        {
            let name = hook.metadata.name.clone().unwrap_or_default();
            api.delete(&name, &DeleteParams::default())
                .await
                .map_err(kube("delete a webhook configuration"))?;
        }
    }
    Ok(())
}

/// A canary Cluster through the webhooks and the core controller, and a canary namespace
/// through kube-controller-manager's namespace controller.
async fn readiness(
    client: &Client,
    controllers: &mut Controllers,
    deadline: Instant,
    timeout: Duration,
) -> Result<(), Error> {
    let ns = format!("capstan-harness-readiness-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let body: Namespace =
        serde_json::from_value(json!({"metadata": {"name": ns}})).expect("static namespace");
    match namespaces.create(&PostParams::default(), &body).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(source) => {
            return Err(Error::Kube {
                action: "create the readiness namespace",
                source,
            });
        }
    }
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "cluster.x-k8s.io",
            "v1beta2",
            "Cluster",
        )),
    );
    let canary: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "canary", "namespace": ns},
        // An infrastructure reference because validation requires one; the DevCluster does not
        // exist, which the controller tolerates (and deletion with it). Not paused: a paused
        // Cluster keeps its finalizer when deleted.
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DevCluster", "name": "canary"}},
    }))
    .expect("static object");
    // The admission webhooks answer as soon as they are installed; a create can race the API
    // server's webhook client (first TLS handshake), so retry until the deadline. A denial is
    // an answer: fail at once.
    let mut last = String::new();
    let created = loop {
        check_alive(controllers)?;
        match clusters.create(&PostParams::default(), &canary).await {
            Ok(_) => break true,
            Err(kube::Error::Api(s)) if s.code == 409 => break true,
            Err(kube::Error::Api(s)) if s.code == 422 || s.code == 400 => {
                return Err(Error::Kube {
                    action: "create a canary Cluster",
                    source: kube::Error::Api(s),
                });
            }
            Err(e) => last = e.to_string(),
        }
        if Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    if !created {
        return Err(Error::Timeout {
            what: "a canary Cluster through the Cluster API webhooks",
            after: timeout,
            detail: last,
        });
    }
    let finalized = wait_for(controllers, deadline, || async {
        Ok(clusters
            .get_opt("canary")
            .await
            .ok()
            .flatten()
            .is_some_and(|c| {
                c.metadata
                    .finalizers
                    .is_some_and(|f| f.iter().any(|f| f == "cluster.cluster.x-k8s.io"))
            }))
    })
    .await?;
    if !finalized {
        return Err(Error::Timeout {
            what: "the core controller to add its finalizer to a canary Cluster",
            after: timeout,
            detail: process::log_tail(&controllers.logs.join("capi.log"), 20),
        });
    }
    let _ = clusters.delete("canary", &DeleteParams::default()).await;
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    let gone = wait_for(controllers, deadline, || async {
        Ok(matches!(namespaces.get_opt(&ns).await, Ok(None)))
    })
    .await?;
    if !gone {
        return Err(Error::Timeout {
            what: "a canary namespace to be deleted (kube-controller-manager and the core controller)",
            after: timeout,
            detail: process::log_tail(&controllers.logs.join("kube-controller-manager.log"), 20),
        });
    }
    Ok(())
}

/// Polls `done` every 100 ms until it holds (true) or the deadline passes (false), failing at
/// once when a controller dies.
async fn wait_for<F, Fut>(
    controllers: &mut Controllers,
    deadline: Instant,
    mut done: F,
) -> Result<bool, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, Error>>,
{
    loop {
        check_alive(controllers)?;
        if done().await? {
            return Ok(true);
        }
        if Instant::now() > deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Keeps the controllers' logs of a failing test: when dropped during a panic, copies them out
/// of the control plane's directory (which is removed when the control plane stops) and prints
/// where they are and how each ends; files it is told to keep (the audit log: who wrote what,
/// when) are copied beside them, not printed.
#[must_use = "the guard acts when it is dropped"]
pub struct LogsOnFailure {
    logs: BTreeMap<String, PathBuf>,
    kept: BTreeMap<String, PathBuf>,
    test: String,
}

impl LogsOnFailure {
    /// A guard for `test` over the given logs.
    pub fn new(test: &str, logs: BTreeMap<String, PathBuf>) -> LogsOnFailure {
        LogsOnFailure {
            logs,
            kept: BTreeMap::new(),
            test: test.to_owned(),
        }
    }

    /// Also keeps `path` (as `name`), without printing its end.
    pub fn keeping(mut self, name: &str, path: PathBuf) -> LogsOnFailure {
        self.kept.insert(name.to_owned(), path);
        self
    }
}

impl Drop for LogsOnFailure {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let keep = std::env::temp_dir().join(format!(
            "capstan-failed-{}-{}",
            self.test,
            std::process::id()
        ));
        let _ = std::fs::create_dir_all(&keep);
        let mut report = format!(
            "test {} failed; controller logs kept in {}",
            self.test,
            keep.display()
        );
        for (name, path) in &self.logs {
            let _ = std::fs::copy(path, keep.join(format!("{name}.log")));
            report.push_str(&format!(
                "\n--- {name} (last lines)\n{}",
                process::log_tail(path, 15)
            ));
        }
        for (name, path) in &self.kept {
            let _ = std::fs::copy(path, keep.join(name));
        }
        binaries::progress(&report);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn only_a_lost_port_starts_the_controllers_again() {
        let exit = |tail: &str| Error::ControllerExit {
            name: "capd".into(),
            status: std::process::ExitStatus::from_raw(256),
            log: PathBuf::from("capd.log"),
            tail: tail.into(),
        };
        let lost = exit("listen tcp 127.0.0.1:33931: bind: address already in use");
        assert_eq!(port_lost_by(&lost), Some("capd"));
        assert_eq!(port_lost_by(&exit("unable to get kubeconfig")), None);
        assert_eq!(
            port_lost_by(&Error::Task("address already in use".into())),
            None
        );
    }

    #[test]
    fn webhook_configurations_point_at_loopback() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("webhook")).unwrap();
        std::fs::write(
            dir.path().join("webhook/manifests.yaml"),
            "---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: validating-webhook-configuration\nwebhooks:\n- name: v.x\n  clientConfig:\n    service:\n      name: webhook-service\n      namespace: system\n      path: /validate-x\n",
        )
        .unwrap();
        let docs = webhook_configurations(dir.path(), "capd", 4443, "CA").unwrap();
        assert_eq!(
            docs[0]["metadata"]["name"],
            "capd-validating-webhook-configuration"
        );
        assert_eq!(
            docs[0]["webhooks"][0]["clientConfig"]["url"],
            "https://127.0.0.1:4443/validate-x"
        );
        assert_eq!(
            docs[0]["webhooks"][0]["clientConfig"]["caBundle"],
            b64("CA")
        );
        assert!(
            docs[0]["webhooks"][0]["clientConfig"]
                .get("service")
                .is_none()
        );
    }

    #[test]
    fn conversion_patches_follow_the_kustomization() {
        let dir = tempfile::tempdir().unwrap();
        let crd = dir.path().join("crd");
        std::fs::create_dir_all(crd.join("patches")).unwrap();
        std::fs::write(
            crd.join("kustomization.yaml"),
            "resources: [bases/a.yaml]\npatches:\n- path: patches/webhook_in_as.yaml\n",
        )
        .unwrap();
        std::fs::write(
            crd.join("patches/webhook_in_as.yaml"),
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: as.x.io\nspec:\n  conversion:\n    strategy: Webhook\n    webhook:\n      conversionReviewVersions: [\"v1\"]\n      clientConfig:\n        service: {namespace: system, name: webhook-service, path: /convert}\n",
        )
        .unwrap();
        // A patch file the kustomization does not list is not enabled.
        std::fs::write(
            crd.join("patches/webhook_in_bs.yaml"),
            "metadata: {name: bs.x.io}\n",
        )
        .unwrap();
        assert_eq!(
            conversion_patches(dir.path()).unwrap(),
            vec![("as.x.io".to_owned(), json!(["v1"]))]
        );
    }
}
