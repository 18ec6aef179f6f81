//! Helpers of the tests against the real Cluster API controllers: a fleet repository revised
//! and reconciled until it settles ([`Repo`]), and what the controllers did, read from the API
//! server with kubectl or a raw client (Machines, ManagedClusters, watch logs), never from
//! capstan's own view.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan::install::testing::agent_client;
use capstan::reconcile::{Convergence, Options, Outcome, converge};
use capstan::status::Phase;
use capstan_harness::ControlPlane;
use capstan_layout::Fleet;
use capstan_layout::scaffold::ClusterRequest;
use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};

use crate::FleetDir;

/// How long a fleet may take to settle (a cold in-memory cluster comes up in about a minute).
pub const SETTLE: Duration = Duration::from_secs(420);

/// A fleet repository: management cluster `m-<tag>`, workloads in namespace `l-<tag>`, every
/// docker datacenter on CAPD's in-memory backend.
pub struct Repo {
    /// The repository.
    pub files: FleetDir,
    /// The management cluster.
    pub mgmt: String,
    /// The namespace of every cluster.
    pub ns: String,
    /// Revisions reconciled so far (`r<n>` is the next one's name).
    pub revision: usize,
    /// How upgrades go through their stages.
    pub stages: capstan::plan::stages::Settings,
    /// `--stage-timeout` (None: none).
    pub stage_timeout: Option<Duration>,
    /// `--backup-dir` (None: the default).
    pub backup_dir: Option<PathBuf>,
    /// The age identity whose public key backups are encrypted to (`--backup-recipient`), as
    /// an admin's would be: made for this repository, kept off the cluster.
    pub backup_key: age::x25519::Identity,
    /// The client the agent runs with (None: the agent's ServiceAccount on the shared test bed).
    pub client: Option<kube::Client>,
}

impl Repo {
    /// `workloads`: name → worker groups (values file's `workerGroups`).
    pub fn new(tag: &str, workloads: &[(&str, Value)]) -> Repo {
        Repo::new_with(tag, workloads, |_| {})
    }

    /// [`Repo::new`], with `tweak` applied to each workload's scaffolding request.
    pub fn new_with(
        tag: &str,
        workloads: &[(&str, Value)],
        tweak: impl Fn(&mut ClusterRequest),
    ) -> Repo {
        Repo::new_full(tag, |_| {}, workloads, tweak)
    }

    /// [`Repo::new_with`], with `mgmt` applied to the management cluster's request too.
    pub fn new_full(
        tag: &str,
        mgmt_tweak: impl Fn(&mut ClusterRequest),
        workloads: &[(&str, Value)],
        tweak: impl Fn(&mut ClusterRequest),
    ) -> Repo {
        let mgmt = format!("m-{tag}");
        let ns = format!("l-{tag}");
        let mut req = ClusterRequest {
            name: mgmt.clone(),
            provider: "docker".into(),
            docker_backend: Some("in-memory".into()),
            namespace: Some(ns.clone()),
            kubernetes_version: Some("1.33".into()),
            pod_cidr: Some("192.168.0.0/16".into()),
            service_cidr: Some("10.96.0.0/12".into()),
            worker_count: Some(1),
            ..Default::default()
        };
        mgmt_tweak(&mut req);
        let mut files = FleetDir::new(req);
        for (i, (name, groups)) in workloads.iter().enumerate() {
            // The workloads inherit the management cluster's in-memory backend.
            let mut req = ClusterRequest {
                name: name.to_string(),
                management: Some(mgmt.clone()),
                provider: "docker".into(),
                namespace: Some(ns.clone()),
                kubernetes_version: Some("1.33".into()),
                pod_cidr: Some(format!("172.{}.0.0/16", 16 + i)),
                service_cidr: Some(format!("10.{}.0.0/16", 112 + i)),
                values: Some(json!({ "workerGroups": groups })),
                ..Default::default()
            };
            tweak(&mut req);
            files.add(req);
        }
        Repo {
            files,
            mgmt,
            ns,
            revision: 0,
            stages: Default::default(),
            stage_timeout: None,
            backup_dir: None,
            backup_key: age::x25519::Identity::generate(),
            client: None,
        }
    }

    pub fn dir(&self, cluster: &str) -> PathBuf {
        self.files.dir(cluster)
    }

    /// Writes a workload's whole spec (`cluster.yaml` of its directory, made if need be); the
    /// path it wrote.
    pub fn write_spec(&self, cluster: &str, text: &str) -> PathBuf {
        let file = self.dir(cluster).join("cluster.yaml");
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(&file, text).unwrap();
        file
    }

    pub fn edit(&self, cluster: &str, from: &str, to: &str) {
        self.files.edit(cluster, from, to)
    }

    /// `capstan delete cluster`: the spec goes, a tombstone takes its place.
    pub fn tombstone(&self, cluster: &str) {
        let dir = self.dir(cluster);
        fs::remove_file(dir.join("cluster.yaml")).unwrap();
        fs::write(
            dir.join(capstan_layout::intent::TOMBSTONE_FILE),
            capstan_layout::intent::document("Tombstone", "lifecycle test"),
        )
        .unwrap();
    }

    /// Removes a worker group from a scaffolded spec.
    pub fn remove_group(&self, cluster: &str, group: &str) {
        let path = self.dir(cluster).join("cluster.yaml");
        let text = fs::read_to_string(&path).unwrap();
        let start = text
            .find(&format!("    - name: \"{group}\""))
            .expect("the group is in the spec");
        let rest = &text[start + 1..];
        let end = start
            + 1
            + rest
                .find("    - name:")
                .or_else(|| rest.find("  clusterNetwork:"))
                .unwrap();
        fs::write(&path, format!("{}{}", &text[..start], &text[end..])).unwrap();
    }

    pub fn fleet(&self) -> Fleet {
        self.files.fleet()
    }

    pub fn opts(&self, only: Option<&str>) -> Options {
        Options {
            revision: format!("r{}", self.revision),
            management: Some(self.mgmt.clone()),
            only: only.map(str::to_string),
            concurrency: 4,
            stages: self.stages,
            stage_timeout: self.stage_timeout,
            backup_dir: self.backup_dir.clone(),
            backup_encryption: capstan::backup::Encryption::To(vec![self.backup_key.to_public()]),
            ..Default::default()
        }
    }

    /// The next revision, reconciled until it settles, in a task of its own (the test meanwhile
    /// watches, or plays a controller's part).
    pub fn converge_in_background(
        &mut self,
        only: Option<&str>,
    ) -> tokio::task::JoinHandle<Convergence> {
        self.revision += 1;
        let (fleet, opts, client) = (self.fleet(), self.opts(only), self.client.clone());
        tokio::spawn(async move {
            let client = match client {
                Some(c) => c,
                None => agent_client(capstan_harness::shared_with_controllers().await).await,
            };
            converge(&client, &fleet, &opts, SETTLE).await.unwrap()
        })
    }

    /// The client the agent runs with.
    pub async fn agent(&self) -> kube::Client {
        match &self.client {
            Some(c) => c.clone(),
            None => agent_client(capstan_harness::shared_with_controllers().await).await,
        }
    }

    /// One pass at the current revision, as the agent.
    pub async fn pass(&self, only: Option<&str>) -> Outcome {
        capstan::reconcile::reconcile(&self.agent().await, &self.fleet(), &self.opts(only))
            .await
            .unwrap()
    }

    /// The next revision, reconciled until it settles; panics when it does not.
    pub async fn converge(&mut self, only: Option<&str>) -> Convergence {
        self.revision += 1;
        let client = self.agent().await;
        let converged = converge(&client, &self.fleet(), &self.opts(only), SETTLE)
            .await
            .unwrap();
        let out = converged.last();
        assert!(
            out.settled(),
            "not settled after {SETTLE:?}: {}\npasses:\n{}",
            summary(out),
            history(&converged)
        );
        for c in &out.clusters {
            assert!(
                matches!(c.phase, Phase::Ready | Phase::Deleting),
                "{}: {:?} {}",
                c.name,
                c.phase,
                c.message
            );
        }
        converged
    }

    /// Machines of a cluster, from kubectl.
    pub fn machines(&self, cluster: &str) -> Vec<Machine> {
        kubectl_items(&[
            "get",
            "machines.cluster.x-k8s.io",
            "-n",
            &self.ns,
            "-l",
            &format!("cluster.x-k8s.io/cluster-name={cluster}"),
        ])
        .iter()
        .map(Machine::of)
        .collect()
    }

    /// Names of the objects of a kind in the namespace, from kubectl.
    pub fn names(&self, resource: &str) -> BTreeSet<String> {
        kubectl_items(&["get", resource, "-n", &self.ns])
            .iter()
            .filter_map(|o| o.pointer("/metadata/name").and_then(Value::as_str))
            .map(str::to_string)
            .collect()
    }
}

/// Every pass of a convergence, one line each (repeated lines once, with a count).
pub fn history(c: &Convergence) -> String {
    let mut lines: Vec<(String, usize)> = Vec::new();
    for p in &c.passes {
        let changes: Vec<String> = p
            .clusters
            .iter()
            .flat_map(|c| {
                c.plan
                    .entries
                    .iter()
                    .filter(|e| e.action != capstan::plan::Action::Unchanged)
                    .map(|e| format!("{} {}", e.action, e.object.name))
            })
            .collect();
        let line = format!("{} [{}]", summary(p), changes.join(", "));
        match lines.last_mut() {
            Some((l, n)) if *l == line => *n += 1,
            _ => lines.push((line, 1)),
        }
    }
    lines
        .iter()
        .map(|(l, n)| format!("  {n}× {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One line per cluster of a pass: phase and message.
pub fn summary(out: &Outcome) -> String {
    out.clusters
        .iter()
        .map(|c| format!("{} {:?}: {}", c.name, c.phase, c.message))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The kubeconfig [`kubectl`] uses instead of the shared test bed's ([`use_kubeconfig`]).
static KUBECONFIG: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Makes [`kubectl`] talk to a test's own control plane (once per test binary).
pub fn use_kubeconfig(path: &std::path::Path) {
    KUBECONFIG
        .set(path.to_path_buf())
        .expect("one control plane per test binary");
}

/// kubectl's stdout against this binary's control plane; panics with its stderr when it fails.
pub fn shared_kubectl(args: &[&str]) -> String {
    let kubeconfig = match KUBECONFIG.get() {
        Some(k) => k.clone(),
        None => capstan_harness::shared_if_started_with_controllers()
            .expect("started")
            .kubeconfig_path()
            .to_path_buf(),
    };
    capstan_harness::run::kubectl_ok(&kubeconfig, args)
}

pub fn kubectl_items(args: &[&str]) -> Vec<Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let list: Value = serde_json::from_str(&shared_kubectl(&all)).unwrap();
    list["items"].as_array().cloned().unwrap_or_default()
}

/// What a test needs of a Machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// Name.
    pub name: String,
    /// `control-plane` or the MachineDeployment's name.
    pub role: String,
    /// `spec.version`.
    pub version: String,
    /// `status.phase`.
    pub phase: String,
    /// Has a deletion timestamp.
    pub deleting: bool,
}

impl Machine {
    pub fn of(m: &Value) -> Machine {
        let s = |p: &str| {
            m.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let labels = m.pointer("/metadata/labels");
        let role = if labels
            .and_then(|l| l.get("cluster.x-k8s.io/control-plane"))
            .is_some()
        {
            "control-plane".to_string()
        } else {
            labels
                .and_then(|l| l.get("cluster.x-k8s.io/deployment-name"))
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string()
        };
        Machine {
            name: s("/metadata/name"),
            role,
            version: s("/spec/version"),
            phase: s("/status/phase"),
            deleting: m.pointer("/metadata/deletionTimestamp").is_some(),
        }
    }
}

pub fn of_role<'a>(machines: &'a [Machine], role: &str) -> Vec<&'a Machine> {
    machines.iter().filter(|m| m.role == role).collect()
}

pub fn names_of(machines: &[&Machine]) -> BTreeSet<String> {
    machines.iter().map(|m| m.name.clone()).collect()
}

pub fn all_running(machines: &[Machine]) -> bool {
    machines.iter().all(|m| m.phase == "Running" && !m.deleting)
}

/// The ManagedCluster of a cluster, from kubectl.
pub fn managed_cluster_json(cluster: &str) -> Option<Value> {
    kubectl_items(&["get", "managedclusters.capstan.dev", "-n", "capstan-system"])
        .into_iter()
        .find(|o| o.pointer("/metadata/name").and_then(Value::as_str) == Some(cluster))
}

/// A field of a Cluster API Cluster (a kubectl JSONPath such as `.spec.paused`), read with
/// kubectl ("" when absent).
pub fn cluster_field(ns: &str, cluster: &str, path: &str) -> String {
    let jsonpath = format!("jsonpath={{{path}}}");
    shared_kubectl(&[
        "get",
        "clusters.cluster.x-k8s.io",
        cluster,
        "-n",
        ns,
        "-o",
        &jsonpath,
    ])
}

/// The status of the Cluster API Cluster's `Available` condition ("" without one), from kubectl.
pub fn cluster_available(cluster: &str, ns: &str) -> String {
    cluster_field(
        ns,
        cluster,
        ".status.conditions[?(@.type==\"Available\")].status",
    )
}

/// Asserts that the first event of `log` starting with `earlier` came before the first starting
/// with `later` (each must be there).
pub fn assert_before(log: &Log, earlier: &str, later: &str) {
    let events = log.snapshot();
    let at = |prefix: &str| {
        events
            .iter()
            .position(|e| e.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` in {events:#?}"))
    };
    assert!(
        at(earlier) < at(later),
        "`{earlier}` came after `{later}`: {events:#?}"
    );
}

/// The API resource of a kind, its plural guessed from the kind.
pub fn gvk_resource(group: &str, version: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(group, version, kind))
}

/// Events seen by watches, in the order the test saw them.
#[derive(Default)]
pub struct Log(Mutex<Vec<String>>);

impl Log {
    pub fn push(&self, e: String) {
        self.0.lock().unwrap().push(e);
    }
    pub fn snapshot(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Records `added <role> <version> <name>` and `deleted <role> <version> <name>` for the
/// Machines of a namespace, as a watch sees them.
pub fn watch_machines(cp: &ControlPlane, ns: &str, log: Arc<Log>) -> tokio::task::JoinHandle<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        cp.client(),
        ns,
        &gvk_resource("cluster.x-k8s.io", "v1beta2", "Machine"),
    );
    tokio::spawn(async move {
        let mut seen = BTreeSet::new();
        let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = events.next().await {
            let (obj, deleted) = match ev {
                Ok(Event::Apply(o)) | Ok(Event::InitApply(o)) => (o, false),
                Ok(Event::Delete(o)) => (o, true),
                _ => continue,
            };
            let m = Machine::of(&serde_json::to_value(&obj).unwrap());
            if deleted {
                log.push(format!("deleted {} {} {}", m.role, m.version, m.name));
            } else if seen.insert(m.name.clone()) {
                log.push(format!("added {} {} {}", m.role, m.version, m.name));
            }
        }
    })
}

/// Lists a cluster's Machines with the raw client the first time its ManagedCluster says Ready
/// at `revision`: what the controllers had done when capstan declared the cluster converged.
pub fn machines_when_first_ready(
    cp: &ControlPlane,
    ns: &str,
    cluster: &str,
    revision: &str,
) -> tokio::task::JoinHandle<Vec<Machine>> {
    let statuses: Api<DynamicObject> = Api::namespaced_with(
        cp.client(),
        "capstan-system",
        &gvk_resource("capstan.dev", "v1alpha1", "ManagedCluster"),
    );
    let machines: Api<DynamicObject> = Api::namespaced_with(
        cp.client(),
        ns,
        &gvk_resource("cluster.x-k8s.io", "v1beta2", "Machine"),
    );
    let (cluster, revision) = (cluster.to_string(), revision.to_string());
    tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={cluster}"));
        let mut events = watcher::watcher(statuses, config).boxed();
        while let Some(ev) = events.next().await {
            let (Ok(Event::Apply(o)) | Ok(Event::InitApply(o))) = ev else {
                continue;
            };
            let status = o.data.get("status").cloned().unwrap_or_default();
            if status["phase"] == "Ready" && status["lastAppliedRevision"] == revision.as_str() {
                let selector = format!("cluster.x-k8s.io/cluster-name={cluster}");
                let list = machines
                    .list(&kube::api::ListParams::default().labels(&selector))
                    .await
                    .unwrap();
                return list
                    .items
                    .iter()
                    .map(|m| Machine::of(&serde_json::to_value(m).unwrap()))
                    .collect();
            }
        }
        Vec::new()
    })
}

/// Events of several watches, ordered by the resource version the API server gave each write.
///
/// Watches of different kinds deliver their events on separate streams, so the order a test
/// sees them in says little about which write came first. On one etcd the resource version is
/// etcd's revision, one counter for every write of every kind: ordering by it orders the writes
/// themselves (the test bed runs one etcd; Kubernetes calls the value opaque for clients in
/// general, which is why this lives in a test).
#[derive(Default)]
pub struct Timeline(Mutex<Vec<(u64, String)>>, tokio::sync::Notify);

impl Timeline {
    /// Records an event of the write at resource version `rv`.
    pub fn push(&self, rv: u64, what: String) {
        self.0.lock().unwrap().push((rv, what));
        self.1.notify_waiters();
    }

    /// Every event so far, in write order.
    pub fn events(&self) -> Vec<String> {
        let mut all = self.0.lock().unwrap().clone();
        all.sort();
        all.into_iter().map(|(_, e)| e).collect()
    }

    /// The position (in write order) of the first event starting with `prefix`.
    pub fn first(&self, prefix: &str) -> Option<usize> {
        self.events().iter().position(|e| e.starts_with(prefix))
    }

    /// Waits until a watch has delivered an event starting with `prefix` (a write the test
    /// knows was made may reach the watch after the call that made it returned); panics with
    /// the timeline after `timeout`.
    pub async fn wait_for(&self, prefix: &str, timeout: Duration) {
        let seen = async {
            loop {
                let next = self.1.notified();
                if self.first(prefix).is_some() {
                    return;
                }
                next.await;
            }
        };
        if tokio::time::timeout(timeout, seen).await.is_err() {
            panic!("no `{prefix}` within {timeout:?} in {:#?}", self.events());
        }
    }
}

/// Watches the objects of a kind in a namespace and records, in `timeline`, `describe(obj)`
/// every time it changes (and `deleted <describe>` when the object goes).
pub fn watch_objects(
    cp: &ControlPlane,
    ns: &str,
    resource: ApiResource,
    timeline: Arc<Timeline>,
    describe: impl Fn(&Value) -> String + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(cp.client(), ns, &resource);
    tokio::spawn(async move {
        let mut last: std::collections::BTreeMap<String, String> = Default::default();
        let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = events.next().await {
            let (obj, deleted) = match ev {
                Ok(Event::Apply(o)) | Ok(Event::InitApply(o)) => (o, false),
                Ok(Event::Delete(o)) => (o, true),
                _ => continue,
            };
            let v = serde_json::to_value(&obj).unwrap();
            let rv: u64 = obj
                .metadata
                .resource_version
                .as_deref()
                .and_then(|r| r.parse().ok())
                .unwrap_or(0);
            let name = obj.metadata.name.clone().unwrap_or_default();
            let text = describe(&v);
            if deleted {
                timeline.push(rv, format!("deleted {text}"));
                last.remove(&name);
            } else if last.get(&name) != Some(&text) {
                timeline.push(rv, text.clone());
                last.insert(name, text);
            }
        }
    })
}
