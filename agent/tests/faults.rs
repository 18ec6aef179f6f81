//! Randomized fault runs: `capstan run` follows a fleet of 20 clusters through creates, version
//! bumps, scales, suspends and tombstones while faults are injected at random points, and after
//! every run the invariants are checked from the API server and its audit log — never from
//! capstan's own view.
//!
//! ```text
//! git daemon ──▶ capstan run ──▶ TCP proxy (delay, reset, blackhole) ──▶ kube-apiserver ──▶ etcd
//!    ▲ pushes, force-pushes,        ▲ SIGKILL + restart                    ▲ SIGKILL + restart
//!    │ down and back                                                        │ kubectl: a foreign
//!    └── the test, seeded                                                   │ field manager's edits
//!                                 the Cluster API controllers (CAPD in-memory) ┘ act on every apply
//! ```
//!
//! The real Cluster API controllers run beside the agent (core, kubeadm bootstrap and control
//! plane, CAPD with its in-memory backend, kube-controller-manager's garbage collector), so the
//! fleet's clusters come up, scale, roll and are deleted for real while the faults hit: a
//! tombstoned cluster goes only once the controllers have removed its Machines, and the API
//! server and etcd restarts hit the controllers too. `CAPSTAN_FAULT_CONTROLLERS=0` runs without
//! them (capstan alone against the API server). CAPD's in-memory backend has a fixed port, so
//! run this test in its own network namespace (see docs/testing.md).
//!
//! Invariants after each run, once the faults stop (and the last push's webhook is delivered):
//! - every object the desired revision renders for a live cluster exists, with every field
//!   capstan renders as rendered (a suspended cluster keeps what it had; its Cluster exists);
//! - no object of a cluster was deleted without a tombstone: every DELETE in the audit log (across
//!   API server restarts) of an object of any kind capstan renders is judged against the
//!   revisions pushed before the request. The agent may delete what a revision by then no longer
//!   desired for that cluster after an earlier one did (a prune: an old hash-named template);
//!   anyone may delete once a revision by then tombstoned it; nothing else (an object every
//!   revision so far desired, or of a cluster held by a suspend or by errors);
//! - at most one CAPI and one EKS-A Cluster per fleet cluster;
//! - every live cluster's ManagedCluster says the head commit is applied; tombstoned clusters
//!   are gone, status included;
//! - convergence takes a bounded number of cluster runs (counted by the agent's
//!   `capstan_reconciles_total`) after the faults stop.
//!
//! CI runs 2 runs (seed fixed). The long run (70 minutes here; its figures are in
//! docs/reliability.md):
//! `CAPSTAN_FAULT_RUNS=100 CAPSTAN_FAULT_SEED=7 cargo test -p capstan --test faults -- --nocapture`
//! (`CAPSTAN_FAULT_CLUSTERS` sets the fleet size, 20 by default; `CAPSTAN_FAULT_BIN` runs a copy
//! of the `capstan` binary, so rebuilding the workspace does not change the agent mid-run). The
//! last line printed gives the runs, the changes made by type (a version bump only when it
//! changed the version: the model stops at 1.34), the faults injected by type, the deletions
//! checked (by why they were allowed) and the invariant violations.

mod source_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capstan_harness::ControlPlane;
use capstan_harness::objects;
use capstan_harness::run::kubectl_output;
use capstan_layout::scaffold::{self, ClusterRequest};
use capstan_layout::{Tree, load};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject};
use serde_json::Value;
use source_support::agent::{post, push_body, scrape, value_in};
use source_support::daemon::GitDaemon;
use source_support::{Upstream, free_port};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const SECRET: &str = "s3cret-for-faults";
const NS: &str = "t-fault";
const MGMT: &str = "m-fault";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ---------------------------------------------------------------------------------------------
// The fleet model: what the repository says, regenerated from scratch on every change.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Live,
    Suspended,
    Tombstoned,
}

#[derive(Debug, Clone)]
struct Workload {
    index: u32,
    minor: u32,
    count: u32,
    state: State,
}

impl Workload {
    fn name(&self) -> String {
        format!("w-{:03}", self.index)
    }
}

struct Model {
    workloads: Vec<Workload>,
    next: u32,
}

impl Model {
    fn new(n: u32) -> Model {
        let mut m = Model {
            workloads: Vec::new(),
            next: 0,
        };
        for _ in 0..n {
            m.create();
        }
        m
    }

    fn create(&mut self) {
        self.workloads.push(Workload {
            index: self.next,
            minor: 32,
            count: 1,
            state: State::Live,
        });
        self.next += 1;
    }

    fn request(w: &Workload) -> ClusterRequest {
        let k = w.index;
        ClusterRequest {
            name: w.name(),
            management: Some(MGMT.into()),
            provider: "docker".into(),
            namespace: Some(NS.into()),
            kubernetes_version: Some(format!("1.{}", w.minor)),
            pod_cidr: Some(format!("10.{}.0.0/16", k + 1)),
            service_cidr: Some(format!("100.{}.{}.0/18", 64 + k / 4, (k % 4) * 64)),
            worker_count: Some(w.count),
            ..Default::default()
        }
    }

    /// Every file of the repository.
    fn files(&self) -> BTreeMap<String, String> {
        let mut tree = Tree::new();
        let mut out = BTreeMap::new();
        let mgmt = ClusterRequest {
            name: MGMT.into(),
            provider: "docker".into(),
            // The workloads inherit it: every machine is one of CAPD's in-memory machines.
            docker_backend: Some("in-memory".into()),
            namespace: Some(NS.into()),
            kubernetes_version: Some("1.34".into()),
            pod_cidr: Some("172.16.0.0/16".into()),
            service_cidr: Some("172.17.0.0/16".into()),
            ..Default::default()
        };
        fn add(tree: &mut Tree, out: &mut BTreeMap<String, String>, req: &ClusterRequest) {
            for (p, t) in scaffold::plan(tree, req).unwrap().files {
                tree.insert(p.clone(), t.clone());
                out.insert(p.display().to_string(), t);
            }
        }
        add(&mut tree, &mut out, &mgmt);
        for w in &self.workloads {
            add(&mut tree, &mut out, &Self::request(w));
            let dir = format!("clusters/{MGMT}/workload-clusters/{}", w.name());
            match w.state {
                State::Live => {}
                State::Suspended => {
                    out.insert(
                        format!("{dir}/{}", capstan_layout::intent::SUSPEND_FILE),
                        capstan_layout::intent::document("Suspend", "fault run"),
                    );
                }
                State::Tombstoned => {
                    out.remove(&format!("{dir}/cluster.yaml"));
                    out.insert(
                        format!("{dir}/{}", capstan_layout::intent::TOMBSTONE_FILE),
                        capstan_layout::intent::document("Tombstone", "fault run"),
                    );
                }
            }
        }
        out
    }

    /// One random change: its kind (as the summary counts it) and its description. A version
    /// bump of a cluster already at the newest minor the model knows (1.34) changes nothing and
    /// is not counted as a bump.
    fn change(&mut self, rng: &mut fastrand::Rng) -> (&'static str, String) {
        let alive: Vec<usize> = (0..self.workloads.len())
            .filter(|&i| self.workloads[i].state != State::Tombstoned)
            .collect();
        let pick = |rng: &mut fastrand::Rng| alive[rng.usize(..alive.len())];
        match rng.u32(0..10) {
            0 => {
                self.create();
                let name = self.workloads.last().unwrap().name();
                ("create", format!("create {name}"))
            }
            1 if alive.len() > 3 => {
                let i = pick(rng);
                self.workloads[i].state = State::Tombstoned;
                (
                    "tombstone",
                    format!("tombstone {}", self.workloads[i].name()),
                )
            }
            2 => {
                let i = pick(rng);
                let w = &mut self.workloads[i];
                let (state, kind) = if w.state == State::Suspended {
                    (State::Live, "resume")
                } else {
                    (State::Suspended, "suspend")
                };
                w.state = state;
                (kind, format!("{:?} {}", w.state, w.name()))
            }
            3 | 4 => {
                let i = pick(rng);
                let w = &mut self.workloads[i];
                if w.minor < 34 {
                    w.minor += 1;
                    (
                        "version bump",
                        format!("version {} 1.{}", w.name(), w.minor),
                    )
                } else {
                    (
                        "version unchanged",
                        format!("version {} stays 1.{}", w.name(), w.minor),
                    )
                }
            }
            _ => {
                let i = pick(rng);
                let w = &mut self.workloads[i];
                w.count = 1 + (w.count + rng.u32(1..4)) % 5;
                ("scale", format!("scale {} {}", w.name(), w.count))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A TCP proxy between the agent and the API server.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Pass,
    /// Every chunk waits this long in each direction.
    Delay(Duration),
    /// Connections are accepted and nothing is forwarded.
    Blackhole,
}

struct Proxy {
    port: u16,
    mode: Arc<Mutex<Mode>>,
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    _accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(Mutex::new(Mode::Pass));
        let conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (m, c) = (mode.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let m = m.clone();
                let task = tokio::spawn(async move {
                    if *m.lock().unwrap() == Mode::Blackhole {
                        // Hold the connection open, forwarding nothing, until reset.
                        let _held = client;
                        return std::future::pending::<()>().await;
                    }
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(
                        pipe_by_mode(cr, sw, m.clone()),
                        pipe_by_mode(sr, cw, m.clone())
                    );
                });
                let mut all = c.lock().unwrap();
                all.retain(|h| !h.is_finished());
                all.push(task.abort_handle());
            }
        });
        Proxy {
            port,
            mode,
            conns,
            _accept: accept,
        }
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Cuts every open connection (the agent's watches and requests fail mid-flight).
    fn reset(&self) {
        for h in self.conns.lock().unwrap().drain(..) {
            h.abort();
        }
    }
}

/// Copies one direction of a proxied connection, as the fault `mode` says.
async fn pipe_by_mode(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mode: Arc<Mutex<Mode>>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let m = *mode.lock().unwrap();
        match m {
            Mode::Delay(d) => tokio::time::sleep(d).await,
            Mode::Blackhole => std::future::pending::<()>().await,
            Mode::Pass => {}
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// The agent under test.

struct AgentProcess {
    child: Option<Child>,
    cmd: Vec<String>,
    log: PathBuf,
    hook: u16,
    metrics: u16,
}

impl AgentProcess {
    fn start(repo_url: &str, kubeconfig: &Path, cache: &Path, log: &Path) -> AgentProcess {
        let (hook, metrics) = (free_port(), free_port());
        let cmd = vec![
            "run".to_string(),
            "--repo".into(),
            repo_url.into(),
            "--branch".into(),
            "main".into(),
            "--interval".into(),
            "30s".into(),
            "--webhook-addr".into(),
            format!("127.0.0.1:{hook}"),
            "--metrics-addr".into(),
            format!("127.0.0.1:{metrics}"),
            "--management".into(),
            MGMT.into(),
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--cache-dir".into(),
            cache.display().to_string(),
        ];
        let mut a = AgentProcess {
            child: None,
            cmd,
            log: log.to_owned(),
            hook,
            metrics,
        };
        a.spawn();
        a
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        // CAPSTAN_FAULT_BIN: a copy of the binary, so a long run is not disturbed by rebuilds.
        let bin = std::env::var("CAPSTAN_FAULT_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_capstan").to_string());
        let child = Command::new(bin)
            .args(&self.cmd)
            .env("CAPSTAN_WEBHOOK_SECRET", SECRET)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// SIGKILL, then started again at once.
    fn crash(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.spawn();
    }

    /// Delivers the push webhook of `commit` (as GitHub does, and redelivers after an outage);
    /// false while the agent is not listening yet.
    fn push(&self, commit: &str) -> bool {
        let body = push_body(commit);
        let sig = capstan::serve::webhook::sign(SECRET.as_bytes(), body.as_bytes());
        std::net::TcpStream::connect(("127.0.0.1", self.hook)).is_ok()
            && post(self.hook, &body, Some(&sig)) == 202
    }

    fn runs(&self) -> f64 {
        let text = scrape(self.metrics);
        ["success", "failure"]
            .iter()
            .map(|r| {
                value_in(
                    &text,
                    &format!("capstan_reconciles_total{{result=\"{r}\"}}"),
                )
            })
            .sum()
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Faults.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    AgentKilled,
    ApiServerKilled,
    EtcdKilled,
    ConnectionsReset,
    Delayed,
    Blackholed,
    GitDown,
    ForcePush,
    ForeignEdit,
}

const FAULTS: [Fault; 9] = [
    Fault::AgentKilled,
    Fault::ApiServerKilled,
    Fault::EtcdKilled,
    Fault::ConnectionsReset,
    Fault::Delayed,
    Fault::Blackholed,
    Fault::GitDown,
    Fault::ForcePush,
    Fault::ForeignEdit,
];

/// Every leaf of `want` equals the same path in `have` (lists element by element).
fn contains(have: &Value, want: &Value, path: &str, out: &mut Vec<String>) {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => {
            for (k, v) in w {
                match h.get(k) {
                    Some(hv) => contains(hv, v, &format!("{path}.{k}"), out),
                    None => out.push(format!("{path}.{k} missing")),
                }
            }
        }
        (Value::Array(w), Value::Array(h)) if w.len() == h.len() => {
            for (i, (wv, hv)) in w.iter().zip(h).enumerate() {
                contains(hv, wv, &format!("{path}[{i}]"), out);
            }
        }
        (w, h) if w == h => {}
        // The API server writes some numbers back as their canonical form ("1" vs 1.0).
        (Value::Number(w), Value::Number(h)) if w.as_f64() == h.as_f64() => {}
        (w, h) => out.push(format!("{path}: want {w}, have {h}")),
    }
}

/// The invariants, read from the API server; the violations found.
async fn check_invariants(
    cp: &ControlPlane,
    model: &Model,
    (head, ancestors): (&str, &BTreeSet<String>),
    files: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut violations = Vec::new();
    let client = cp.client();
    let mut tree = Tree::new();
    for (p, t) in files {
        tree.insert(PathBuf::from(p), t.clone());
    }
    let fleet = load(&tree);
    let discovery = match kube::discovery::Discovery::new(client.clone()).run().await {
        Ok(d) => d,
        Err(e) => return vec![format!("discovery: {e}")],
    };
    let managed: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "capstan-system",
        &objects::resource(
            "capstan.dev",
            "v1alpha1",
            "ManagedCluster",
            "managedclusters",
        ),
    );
    for w in &model.workloads {
        let name = w.name();
        let status = match managed.get_opt(&name).await {
            Ok(s) => s,
            Err(e) => {
                violations.push(format!("{name}: reading its ManagedCluster: {e}"));
                continue;
            }
        };
        let entry = fleet.clusters.iter().find(|c| c.name == name);
        match w.state {
            State::Tombstoned => {
                if status.is_some() {
                    violations.push(format!("{name}: tombstoned, its ManagedCluster remains"));
                }
            }
            State::Live | State::Suspended => {
                let Some(st) = status else {
                    violations.push(format!("{name}: no ManagedCluster"));
                    continue;
                };
                let field = |k: &str| st.data["status"][k].as_str().unwrap_or("").to_string();
                let phase = field("phase");
                let Some(entry) = entry else {
                    violations.push(format!("{name}: not in the rendered fleet"));
                    continue;
                };
                // Applied at the head: the recorded desired content is the head's (a cluster
                // the last commits did not touch keeps the revision its objects came from).
                let want = capstan::reconcile::desired_hash(entry);
                if w.state == State::Live
                    && (field("desiredHash") != want
                        || !ancestors.contains(&field("lastAppliedRevision")))
                {
                    violations.push(format!(
                        "{name}: desiredHash {} at {} (head {head} renders {want}; {phase}: {})",
                        field("desiredHash"),
                        field("lastAppliedRevision"),
                        field("message")
                    ));
                }
                if w.state == State::Suspended && phase != "Suspended" {
                    violations.push(format!("{name}: suspended in Git, phase {phase}"));
                }
                // A suspended cluster keeps what it had when it was suspended (its Cluster is
                // counted below); what the repository renders for it now is not applied yet.
                let objects = match w.state {
                    State::Live => entry.objects.iter().flatten().collect::<Vec<_>>(),
                    _ => Vec::new(),
                };
                for obj in objects {
                    let v = obj.value();
                    let (api_version, kind) = (obj.api_version(), obj.kind());
                    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
                    let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
                    let Some((res, _)) = discovery.resolve_gvk(&gvk) else {
                        violations.push(format!("{name}: {kind} is not served"));
                        continue;
                    };
                    let api: Api<DynamicObject> = if obj.namespace().is_empty() {
                        Api::all_with(client.clone(), &res)
                    } else {
                        Api::namespaced_with(client.clone(), obj.namespace(), &res)
                    };
                    match api.get_opt(obj.name()).await {
                        Ok(Some(live)) => {
                            let live = serde_json::to_value(&live).unwrap();
                            let mut diffs = Vec::new();
                            contains(&live, &v, "", &mut diffs);
                            if !diffs.is_empty() {
                                violations.push(format!(
                                    "{name}: {kind}/{} differs: {}",
                                    obj.name(),
                                    diffs.join("; ")
                                ));
                            }
                        }
                        Ok(None) => {
                            violations.push(format!("{name}: {kind}/{} missing", obj.name()))
                        }
                        Err(e) => violations.push(format!("{name}: reading {kind}: {e}")),
                    }
                }
            }
        }
        // One CAPI and one EKS-A Cluster at most per fleet cluster.
        for (group, version) in [
            ("cluster.x-k8s.io", "v1beta2"),
            ("anywhere.eks.amazonaws.com", "v1alpha1"),
        ] {
            let api: Api<DynamicObject> = Api::namespaced_with(
                client.clone(),
                NS,
                &objects::resource(group, version, "Cluster", "clusters"),
            );
            let lp =
                kube::api::ListParams::default().labels(&format!("capstan.dev/cluster={name}"));
            let n = match api.list(&lp).await {
                Ok(l) => l.items.len(),
                Err(e) => {
                    violations.push(format!("{name}: listing {group} Clusters: {e}"));
                    continue;
                }
            };
            let expected = usize::from(w.state != State::Tombstoned);
            if n != expected {
                violations.push(format!("{name}: {n} {group} Clusters, expected {expected}"));
            }
        }
    }
    violations
}

// ---------------------------------------------------------------------------------------------
// Deletions: judged against what the revisions pushed by then asked for.

/// An object as both the rendered fleet and the audit log name it: group, kind, namespace, name.
type ObjKey = (String, String, String, String);

/// What one pushed revision asks of a fleet cluster.
#[derive(Debug)]
enum Desired {
    /// Applied: these objects, and no others of its own (what it had besides may be pruned).
    Live(BTreeSet<ObjKey>),
    /// Left as it is: suspended, or not rendered (errors). Nothing of it may be pruned.
    Held,
    /// Deleted on intent: everything of it may go.
    Tombstoned,
}

/// Every revision pushed to the branch (force-pushed ones included), with the moment its push
/// began: whatever the agent deletes because of a revision, it deletes after that moment.
#[derive(Default)]
struct Timeline {
    revisions: Vec<(Timestamp, Arc<BTreeMap<String, Desired>>)>,
    /// The files of the last revision recorded (a push of the same content reuses its reading).
    last: BTreeMap<String, String>,
    /// Every object any revision rendered, and the cluster that rendered it.
    owner: BTreeMap<ObjKey, String>,
    /// Every kind (group, kind) capstan rendered for a cluster.
    kinds: BTreeSet<(String, String)>,
}

impl Timeline {
    /// Records the revision about to be pushed (call it right before the push).
    fn record(&mut self, files: &BTreeMap<String, String>) {
        let desired = match self.revisions.last() {
            Some((_, d)) if self.last == *files => d.clone(),
            _ => Arc::new(self.read(files)),
        };
        self.last = files.clone();
        self.revisions.push((Timestamp::now(), desired));
    }

    fn read(&mut self, files: &BTreeMap<String, String>) -> BTreeMap<String, Desired> {
        let mut tree = Tree::new();
        for (p, t) in files {
            tree.insert(PathBuf::from(p), t.clone());
        }
        let fleet = load(&tree);
        let mut out = BTreeMap::new();
        for c in &fleet.clusters {
            // Its objects (a suspended cluster's too: they are its own once it resumes).
            let mut keys = BTreeSet::new();
            for o in c.objects.iter().flatten() {
                let key: ObjKey = (
                    capstan_templates::identity::group(o.api_version()).to_string(),
                    o.kind().to_string(),
                    o.namespace().to_string(),
                    o.name().to_string(),
                );
                self.kinds.insert((key.0.clone(), key.1.clone()));
                self.owner.insert(key.clone(), c.name.clone());
                keys.insert(key);
            }
            let desired = if c.intent.delete.is_some() {
                Desired::Tombstoned
            } else if c.intent.suspend.is_some() || !c.is_valid() {
                Desired::Held
            } else {
                Desired::Live(keys)
            };
            out.insert(c.name.clone(), desired);
        }
        out
    }
}

/// Why a deletion was allowed.
#[derive(Debug, PartialEq, Eq)]
enum Allowed {
    /// A revision pushed before it had tombstoned the cluster.
    Tombstoned,
    /// By the agent, after a revision that asked for the cluster without the object.
    Pruned,
}

/// Whether deleting `key`, an object of `cluster`, at `at` was allowed (and why); None: it was
/// not. A prune needs a revision that no longer desired the object after one that did (a
/// revision from before the object existed does not count: it never asked for it to go).
fn deletion_allowed(
    timeline: &Timeline,
    cluster: &str,
    key: &ObjKey,
    by_agent: bool,
    at: Timestamp,
) -> Option<Allowed> {
    let before: Vec<&Desired> = timeline
        .revisions
        .iter()
        .take_while(|(pushed, _)| *pushed <= at)
        .filter_map(|(_, d)| d.get(cluster))
        .collect();
    if before.iter().any(|d| matches!(d, Desired::Tombstoned)) {
        return Some(Allowed::Tombstoned);
    }
    let mut desired = false;
    for d in before {
        if let Desired::Live(keys) = d {
            if keys.contains(key) {
                desired = true;
            } else if desired && by_agent {
                return Some(Allowed::Pruned);
            }
        }
    }
    None
}

/// The deletions seen, by why they were allowed.
#[derive(Debug, Default, Clone)]
struct Deletions {
    /// Pruned by the agent: a revision pushed before asked for the cluster without the object.
    pruned: usize,
    /// Of a cluster a revision pushed before had tombstoned (by the agent or the controllers).
    tombstoned: usize,
    /// By the agent, of objects no revision rendered (a chained upgrade's intermediate step).
    unrendered: usize,
}

/// Every successful DELETE in the audit log (all of it: it survives the API server's restarts)
/// of an object of a kind capstan renders, judged by [`allowed`]: one that a fleet cluster
/// rendered in some revision may be deleted by the agent only when a revision pushed before the
/// request no longer desired it for that cluster (a prune: an old hash-named template, a removed
/// group), and by anyone once a revision pushed before had tombstoned the cluster.
async fn deletions(cp: &ControlPlane, timeline: &Timeline) -> (Vec<String>, Deletions) {
    let mut violations = Vec::new();
    let mut seen = Deletions::default();
    let discovery = match kube::discovery::Discovery::new(cp.client()).run().await {
        Ok(d) => d,
        Err(e) => return (vec![format!("discovery: {e}")], seen),
    };
    // The audit log names the resource (plural); the rendered objects their kind.
    let mut kind_of: BTreeMap<(String, String), String> = BTreeMap::new();
    for group in discovery.groups() {
        for (ar, _) in group.recommended_resources() {
            kind_of.insert((ar.group.clone(), ar.plural.clone()), ar.kind.clone());
        }
    }
    let agent = format!(
        "system:serviceaccount:{}:{}",
        capstan::status::NAMESPACE,
        capstan::install::manifests::NAME
    );
    let events = match cp
        .audit()
        .events_since(capstan_harness::AuditMark::default())
    {
        Ok(e) => e,
        Err(e) => return (vec![format!("reading the audit log: {e}")], seen),
    };
    for e in events {
        let ok = e
            .response_status
            .code
            .is_some_and(|c| (200..300).contains(&c));
        let Some(o) = e.object_ref.as_ref() else {
            continue;
        };
        if e.verb != "delete" || !ok || o.subresource.is_some() {
            continue;
        }
        let group = o.api_group.clone().unwrap_or_default();
        let resource = o.resource.clone().unwrap_or_default();
        let Some(kind) = kind_of.get(&(group.clone(), resource.clone())) else {
            continue;
        };
        if !timeline.kinds.contains(&(group.clone(), kind.clone())) {
            continue;
        }
        let key: ObjKey = (
            group,
            kind.clone(),
            o.namespace.clone().unwrap_or_default(),
            o.name.clone().unwrap_or_default(),
        );
        let by_agent = e.user.username == agent;
        let Some(cluster) = timeline.owner.get(&key) else {
            // No revision rendered it: Cluster API's own objects (a Machine's bootstrap Secret)
            // or the harness's canary cluster's when others delete them; when the agent does, an
            // intermediate step of a chained upgrade (counted: it should not happen here, where
            // the model bumps one minor at a time and every intermediate revision is pushed).
            seen.unrendered += usize::from(by_agent);
            continue;
        };
        let at = e.raw["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<Timestamp>().ok());
        let Some(at) = at else {
            violations.push(format!("a DELETE without its time: {}", e.raw));
            continue;
        };
        match deletion_allowed(timeline, cluster, &key, by_agent, at) {
            Some(Allowed::Tombstoned) => seen.tombstoned += 1,
            Some(Allowed::Pruned) => seen.pruned += 1,
            None => {
                let (_, kind, ns, name) = &key;
                violations.push(format!(
                    "{cluster}: {kind} {ns}/{name} deleted by {} at {at} without a tombstone, \
                     while every revision pushed by then desired it (or held the cluster)",
                    e.user.username
                ));
            }
        }
    }
    (violations, seen)
}

/// The judgement of a deletion, without a server: a prune is allowed only after a revision that
/// no longer desires the object, and only to the agent; a tombstone allows anyone, from its push.
#[test]
fn deletions_are_judged_by_the_revisions_pushed_before_them() {
    let key = |name: &str| -> ObjKey {
        (
            "infrastructure.cluster.x-k8s.io".into(),
            "DockerMachineTemplate".into(),
            NS.into(),
            name.into(),
        )
    };
    let (old, new) = (key("w-000-md-0-1a2b"), key("w-000-md-0-3c4d"));
    let at = |s: i64| Timestamp::from_second(1_800_000_000 + s).unwrap();
    let revision = |d: Desired| Arc::new(BTreeMap::from([("w-000".to_string(), d)]));
    let timeline = Timeline {
        revisions: vec![
            (at(0), revision(Desired::Live([old.clone()].into()))),
            (at(10), revision(Desired::Held)),
            (at(20), revision(Desired::Live([new.clone()].into()))),
            (at(30), revision(Desired::Tombstoned)),
        ],
        ..Default::default()
    };
    let judge =
        |k: &ObjKey, agent: bool, s: i64| deletion_allowed(&timeline, "w-000", k, agent, at(s));
    // Desired by every revision so far, or the cluster suspended: never.
    assert_eq!(judge(&old, true, 5), None);
    assert_eq!(judge(&old, true, 15), None);
    // Pruned after the revision that replaced it, by the agent only.
    assert_eq!(judge(&old, true, 25), Some(Allowed::Pruned));
    assert_eq!(judge(&old, false, 25), None);
    // A revision from before the object existed does not ask for it to go.
    assert_eq!(judge(&new, true, 25), None);
    // Anyone's once the tombstone is pushed, not before.
    assert_eq!(judge(&new, false, 29), None);
    assert_eq!(judge(&new, false, 30), Some(Allowed::Tombstoned));
    assert_eq!(judge(&new, true, 31), Some(Allowed::Tombstoned));
    // Another cluster's revisions say nothing about this one.
    assert_eq!(
        deletion_allowed(&timeline, "w-001", &old, true, at(40)),
        None
    );
}

// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_fault_runs_keep_the_invariants() {
    let runs = env_or("CAPSTAN_FAULT_RUNS", 2);
    let clusters = env_or("CAPSTAN_FAULT_CLUSTERS", 20) as u32;
    let seed = env_or("CAPSTAN_FAULT_SEED", 7);
    let mut rng = fastrand::Rng::with_seed(seed);
    let controllers = env_or("CAPSTAN_FAULT_CONTROLLERS", 1) != 0;
    // Its own control plane: this test kills etcd and the API server.
    let mut cp = ControlPlane::start_with(capstan_harness::StartOptions {
        controllers,
        timeout: Duration::from_secs(180),
        ..Default::default()
    })
    .await
    .unwrap();
    let _logs = cp.logs_on_failure("randomized_fault_runs_keep_the_invariants");
    let proxy = Proxy::start(cp.endpoints().apiserver_port).await;
    let tmp = tempfile::tempdir().unwrap();
    let proxied = tmp.path().join("kubeconfig");
    // The agent's own ServiceAccount, through the proxy.
    let agent_kubeconfig = capstan::install::testing::agent_kubeconfig(&cp).await;
    std::fs::write(
        &proxied,
        std::fs::read_to_string(&agent_kubeconfig).unwrap().replace(
            &format!("127.0.0.1:{}", cp.endpoints().apiserver_port),
            &format!("127.0.0.1:{}", proxy.port),
        ),
    )
    .unwrap();

    let mut model = Model::new(clusters - 1);
    let files = model.files();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let mut timeline = Timeline::default();
    timeline.record(&files);
    let up = Upstream::new(&refs);
    let mut pushed: BTreeSet<String> = BTreeSet::from([up.head()]);
    let mut git = GitDaemon::start(&up.root);
    let log = tmp.path().join("agent.log");
    let mut agent = AgentProcess::start(
        &git.url("repo.git"),
        &proxied,
        &tmp.path().join("mirror"),
        &log,
    );
    let mut current = files;
    let mut injected: BTreeMap<Fault, usize> = BTreeMap::new();
    let mut made: BTreeMap<&str, usize> = BTreeMap::new();
    let mut deleted = Deletions::default();
    let mut violations: Vec<String> = Vec::new();
    let mut max_runs_to_converge = 0f64;
    let started = Instant::now();

    for run in 0..=runs {
        // Run 0 is the initial apply, without faults.
        let steps = if run == 0 { 0 } else { rng.usize(2..6) };
        let mut changes = Vec::new();
        for _ in 0..steps {
            let (kind, change) = model.change(&mut rng);
            *made.entry(kind).or_default() += 1;
            changes.push(change);
            let next = model.files();
            let write: Vec<(&str, &str)> = next
                .iter()
                .filter(|(p, t)| current.get(*p) != Some(t))
                .map(|(p, t)| (p.as_str(), t.as_str()))
                .collect();
            let remove: Vec<&str> = current
                .keys()
                .filter(|p| !next.contains_key(*p))
                .map(String::as_str)
                .collect();
            let fault = FAULTS[rng.usize(..FAULTS.len())];
            *injected.entry(fault).or_default() += 1;
            // Some faults start before the push, some after, at a random moment.
            let early = rng.bool();
            let pause = Duration::from_millis(rng.u64(0..1500));
            if !early {
                timeline.record(&next);
                let commit = up.commit_and_push(&write, &remove, &changes.join(", "));
                pushed.insert(commit.clone());
                agent.push(&commit);
                tokio::time::sleep(pause).await;
            }
            match fault {
                Fault::AgentKilled => agent.crash(),
                Fault::ApiServerKilled => cp
                    .crash_apiserver(Duration::from_millis(rng.u64(0..2000)))
                    .await
                    .unwrap(),
                Fault::EtcdKilled => cp
                    .crash_etcd(Duration::from_millis(rng.u64(0..2000)))
                    .await
                    .unwrap(),
                Fault::ConnectionsReset => proxy.reset(),
                Fault::Delayed => proxy.set(Mode::Delay(Duration::from_millis(rng.u64(50..400)))),
                Fault::Blackholed => {
                    proxy.set(Mode::Blackhole);
                    proxy.reset();
                }
                Fault::GitDown => git.stop(),
                Fault::ForcePush => {
                    // The branch's content (before or after this step's push) on an unrelated
                    // history: a rewritten branch.
                    let pushed_now = if early { &current } else { &next };
                    let all: Vec<(&str, &str)> = pushed_now
                        .iter()
                        .map(|(p, t)| (p.as_str(), t.as_str()))
                        .collect();
                    timeline.record(pushed_now);
                    pushed.insert(up.force_push_unrelated(&all));
                }
                Fault::ForeignEdit => {
                    let live: Vec<&Workload> = model
                        .workloads
                        .iter()
                        .filter(|w| w.state == State::Live)
                        .collect();
                    if let Some(w) = live.get(rng.usize(..live.len().max(1))) {
                        let _ = kubectl_output(
                            cp.kubeconfig_path(),
                            &[
                                "-n",
                                NS,
                                "patch",
                                "machinedeployments.cluster.x-k8s.io",
                                &format!("{}-md-0", w.name()),
                                "--type",
                                "merge",
                                "-p",
                                r#"{"spec":{"replicas":9},"metadata":{"labels":{"capstan.dev/cluster":"someone-else"}}}"#,
                            ],
                        );
                    }
                }
            }
            if early {
                tokio::time::sleep(pause).await;
                timeline.record(&next);
                let commit = up.commit_and_push(&write, &remove, &changes.join(", "));
                pushed.insert(commit.clone());
                agent.push(&commit);
            }
            // Faults that last a while end before the next step.
            tokio::time::sleep(Duration::from_millis(rng.u64(0..1000))).await;
            proxy.set(Mode::Pass);
            if fault == Fault::Blackholed {
                proxy.reset();
            }
            if fault == Fault::GitDown {
                git.restart();
            }
            current = next;
        }
        // The faults have stopped. A push of the head (the force-push may have rewritten it)
        // is delivered once the agent listens, as GitHub redelivers; then wait for the state.
        timeline.record(&current);
        let head = up.commit_and_push(&[], &[], &format!("run {run}"));
        pushed.insert(head.clone());
        let delivered = Instant::now();
        while !agent.push(&head) {
            assert!(
                delivered.elapsed() < Duration::from_secs(60),
                "the agent does not listen"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Every commit pushed so far (force-pushed ones and those a force-push rewrote away
        // included): a cluster's applied revision is one of them. (A cluster the latest commits
        // did not touch keeps the older revision its objects came from.)
        let ancestors = pushed.clone();
        let before = agent.runs().max(0.0);
        let deadline = Instant::now() + Duration::from_secs(180);
        let found = loop {
            let found = check_invariants(&cp, &model, (&head, &ancestors), &current).await;
            if found.is_empty() || Instant::now() > deadline {
                break found;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        let took = agent.runs() - before;
        max_runs_to_converge = max_runs_to_converge.max(took);
        // Bounded: every cluster a few times over, not a run per event forever. The fleet grows
        // (creates; tombstoned directories stay and are still visited), so the bound does too.
        // With the controllers, a cluster coming up or rolling is a few more runs of its own (its
        // Cluster, control plane and machine deployments report progress through the watches).
        let per_cluster = if controllers { 30.0 } else { 4.0 };
        let bound = per_cluster * (model.workloads.len() as f64 + 1.0) + 20.0;
        if took > bound {
            violations.push(format!(
                "run {run}: {took} cluster runs to converge (bound {bound})"
            ));
        }
        println!(
            "run {run}: {} changes [{}], converged: {}, cluster runs after the faults: {took}",
            changes.len(),
            changes.join(", "),
            found.is_empty()
        );
        violations.extend(found.into_iter().map(|v| format!("run {run}: {v}")));
        // No object of a cluster deleted without its tombstone, ever (the whole audit log).
        let (gone, seen) = deletions(&cp, &timeline).await;
        deleted = seen;
        violations.extend(gone.into_iter().map(|v| format!("run {run}: {v}")));
        if !violations.is_empty() {
            break;
        }
    }
    println!(
        "fault runs: seed {seed}, {runs} runs of a {clusters}-cluster fleet (controllers: {controllers}) in {:?}; changes: {made:?}; faults injected: {injected:?}; deletions checked: {} pruned by the agent, {} after a tombstone, {} by the agent of objects no revision rendered; most cluster runs to converge after faults: {max_runs_to_converge}; invariant violations: {}",
        started.elapsed(),
        deleted.pruned,
        deleted.tombstoned,
        deleted.unrendered,
        violations.len()
    );
    if !violations.is_empty() {
        let keep = std::env::temp_dir().join(format!("capstan-faults-{seed}.log"));
        let _ = std::fs::copy(&log, &keep);
        println!("the agent's whole log: {}", keep.display());
    }
    assert!(
        violations.is_empty(),
        "invariant violations (seed {seed}):\n{}\n\nthe agent's log (tail):\n{}",
        violations.join("\n"),
        capstan_harness::process::log_tail(&log, 80)
    );
}
