//! The fleet dashboard: every cluster, every upgrade and why anything waits, read-only, in a
//! browser.
//!
//! One implementation, served two ways: `capstan dashboard` runs on an operator's machine with
//! their own kubeconfig (so Kubernetes RBAC decides what they see, as with kubectl) on loopback;
//! `capstan run --dashboard-addr` serves it from the agent, every request authenticated with a
//! Kubernetes bearer token (TokenReview) and authorised for reading ManagedClusters
//! (SubjectAccessReview): [`auth`].
//!
//! Pages are rendered from watch caches ([`Watched`]: reflector stores of the ManagedClusters
//! and of the Cluster API objects a cluster page shows), never by asking the API server per page
//! view; a change to any of them is announced to open pages over server-sent events, which then
//! fetch themselves again. Templates are files embedded in the binary (`templates/`), rendered
//! with minijinja (HTML escaped); the one script is a few lines that follow the events. Nothing
//! of a Secret is read: the watched kinds are ManagedCluster, the control planes,
//! MachineDeployments and Machines, and of those the pages keep names, counts, versions, phases
//! and conditions ([`view`]).

pub mod auth;
pub mod server;
pub mod view;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::sync::watch;

use crate::status::{self, ManagedCluster};

/// The Cluster API kinds a cluster page shows, `(group, kind)`; each watched when its CRD is
/// served.
pub const KINDS: &[(&str, &str)] = &[
    ("controlplane.cluster.x-k8s.io", "KubeadmControlPlane"),
    ("etcdcluster.cluster.x-k8s.io", "EtcdadmCluster"),
    ("cluster.x-k8s.io", "MachineDeployment"),
    ("cluster.x-k8s.io", "Machine"),
];

/// The revision the agent follows, as the daemon publishes it for the dashboard (the waves
/// page's schedules come from its fleet configs).
#[derive(Debug, Clone, Default)]
pub struct Published(Arc<std::sync::RwLock<Option<Arc<capstan_layout::Fleet>>>>);

impl Published {
    /// A new revision is followed.
    pub fn set(&self, fleet: Arc<capstan_layout::Fleet>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(fleet);
    }

    /// The revision followed now, once there is one.
    pub fn get(&self) -> Option<Arc<capstan_layout::Fleet>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// What the dashboard watches.
pub struct Watched {
    /// The ManagedClusters.
    pub statuses: Store<ManagedCluster>,
    /// The Cluster API objects, by kind.
    pub objects: BTreeMap<&'static str, Store<DynamicObject>>,
    /// Kinds that could not be watched, with why (not served, not allowed).
    pub missing: Vec<String>,
    /// Bumped on every change of anything watched.
    pub changes: watch::Receiver<u64>,
    /// The fleet repository's URL, for links to commits.
    pub repo: Option<String>,
    /// How far the watches got: lists completed, errors met.
    progress: Arc<Progress>,
    /// How many watches run.
    watches: usize,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What the watches report besides their objects.
#[derive(Default)]
struct Progress {
    /// Watches whose first list completed.
    synced: std::sync::atomic::AtomicUsize,
    /// The errors they met (a forbidden kind, an API server away), newest last, a few kept.
    errors: std::sync::Mutex<Vec<String>>,
}

impl Progress {
    fn saw<K>(&self, kind: &str, ev: &Result<watcher::Event<K>, watcher::Error>) {
        match ev {
            Ok(watcher::Event::InitDone) => {
                self.synced
                    .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, kind, "dashboard: watching");
                let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
                if errors.len() >= 16 {
                    errors.remove(0);
                }
                errors.push(format!("{kind}: {e}"));
            }
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Drops what a page never shows before an object enters a store: of the metadata, the name,
/// namespace, the two Cluster API labels the pages group by; of the spec, the counts and
/// versions; of the status, the machine counts and a Machine's phase. Real objects carry much
/// more (a control plane's whole kubeadm configuration, every condition, a Machine's addresses),
/// and the agent holds these stores for as long as it runs.
pub fn slim(o: DynamicObject) -> DynamicObject {
    const LABELS: [&str; 2] = [
        "cluster.x-k8s.io/cluster-name",
        "cluster.x-k8s.io/deployment-name",
    ];
    let labels = o.metadata.labels.map(|mut l| {
        l.retain(|k, _| LABELS.contains(&k.as_str()));
        l
    });
    let keep = |v: Option<&Value>, fields: &[&str]| -> Value {
        let mut out = serde_json::Map::new();
        if let Some(m) = v.and_then(Value::as_object) {
            for f in fields {
                if let Some(x) = m.get(*f) {
                    out.insert((*f).to_string(), x.clone());
                }
            }
        }
        Value::Object(out)
    };
    let mut spec = keep(o.data.get("spec"), &["replicas", "version", "clusterName"]);
    if let Some(version) = o.data.pointer("/spec/template/spec/version") {
        spec["template"] = serde_json::json!({"spec": {"version": version}});
    }
    let status = keep(
        o.data.get("status"),
        &["upToDateReplicas", "availableReplicas", "phase"],
    );
    DynamicObject {
        types: o.types,
        metadata: kube::api::ObjectMeta {
            name: o.metadata.name,
            namespace: o.metadata.namespace,
            labels,
            ..Default::default()
        },
        data: serde_json::json!({"spec": spec, "status": status}),
    }
}

impl Watched {
    /// Starts the watches: the ManagedClusters of `capstan-system` and every [`KINDS`] kind
    /// served, in every namespace. Returns at once; the stores fill as the lists arrive.
    pub async fn start(client: &Client, repo: Option<String>) -> Watched {
        let (tx, changes) = watch::channel(0u64);
        let tx = Arc::new(tx);
        let bump = {
            let tx = tx.clone();
            move || tx.send_modify(|n| *n += 1)
        };
        let mut tasks = Vec::new();
        let progress = Arc::new(Progress::default());
        let (statuses, writer) = reflector::store();
        let api = status::api(client);
        let (b, p) = (bump.clone(), progress.clone());
        tasks.push(tokio::spawn(async move {
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .modify(|mc: &mut ManagedCluster| mc.metadata.managed_fields = None);
            let mut s = reflector::reflector(writer, stream).boxed();
            while let Some(ev) = s.next().await {
                p.saw("ManagedCluster", &ev);
                b();
            }
        }));
        let mut objects = BTreeMap::new();
        let mut missing = Vec::new();
        for (group, kind) in KINDS {
            let ar = match kube::discovery::oneshot::group(client, group).await {
                Ok(g) => match g.recommended_kind(kind) {
                    Some((ar, _)) => ar,
                    None => {
                        missing.push(format!("{kind}: not served"));
                        continue;
                    }
                },
                Err(e) => {
                    missing.push(format!("{kind}: {e}"));
                    continue;
                }
            };
            let writer = reflector::store::Writer::new(ar.clone());
            let store = writer.as_reader();
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let (b, p) = (bump.clone(), progress.clone());
            let name = *kind;
            tasks.push(tokio::spawn(watch_kind(api, ar, writer, b, p, name)));
            objects.insert(*kind, store);
        }
        Watched {
            watches: objects.len() + 1,
            statuses,
            objects,
            missing,
            changes,
            repo,
            progress,
            tasks,
        }
    }

    /// Stores filled with the given objects (slimmed as the watches would) and nothing watched:
    /// the pages' tests and benchmarks.
    pub fn fixed(
        statuses: Vec<ManagedCluster>,
        objects: Vec<(&'static str, ApiResource, Vec<DynamicObject>)>,
    ) -> Watched {
        let mut w = reflector::store::Writer::<ManagedCluster>::default();
        w.apply_watcher_event(&watcher::Event::Init);
        for s in statuses {
            w.apply_watcher_event(&watcher::Event::InitApply(s));
        }
        w.apply_watcher_event(&watcher::Event::InitDone);
        let mut stores = BTreeMap::new();
        for (kind, ar, objs) in objects {
            let mut w = reflector::store::Writer::new(ar);
            w.apply_watcher_event(&watcher::Event::Init);
            for o in objs {
                w.apply_watcher_event(&watcher::Event::InitApply(slim(o)));
            }
            w.apply_watcher_event(&watcher::Event::InitDone);
            stores.insert(kind, w.as_reader());
        }
        Watched {
            statuses: w.as_reader(),
            objects: stores,
            missing: Vec::new(),
            changes: watch::channel(0).1,
            repo: None,
            progress: Arc::new(Progress::default()),
            watches: 0,
            tasks: Vec::new(),
        }
    }

    /// Waits until every watch has listed what it watches, or one failed (its error: a kind
    /// the credentials may not watch, the API server away), or `limit` passed.
    pub async fn synced(&self, limit: std::time::Duration) -> Result<(), String> {
        let mut rx = self.changes.clone();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            {
                let errors = self
                    .progress
                    .errors
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                if !errors.is_empty() {
                    return Err(errors.join("; "));
                }
            }
            if self
                .progress
                .synced
                .load(std::sync::atomic::Ordering::Acquire)
                >= self.watches
            {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => {
                    return Err(format!(
                        "the dashboard's watches did not list within {limit:?}"
                    ));
                }
            }
        }
    }

    /// Every status object now.
    pub fn statuses(&self) -> Vec<ManagedCluster> {
        self.statuses
            .state()
            .into_iter()
            .map(|m| (*m).clone())
            .collect()
    }

    /// The status object of one cluster (no copy of the others).
    pub fn status_of(&self, name: &str) -> Option<ManagedCluster> {
        self.statuses
            .get(&reflector::ObjectRef::new(name).within(status::NAMESPACE))
            .map(|m| (*m).clone())
    }

    /// The objects of one kind that belong to Cluster API cluster `name`: labelled so (what
    /// Cluster API puts on Machines), naming it (`spec.clusterName`), or named after it as
    /// capstan renders control planes (`<cluster>`, `<cluster>-etcd`).
    pub fn of_cluster(&self, kind: &str, name: &str) -> Vec<Value> {
        let Some(store) = self.objects.get(kind) else {
            return Vec::new();
        };
        store
            .state()
            .into_iter()
            .filter(|o| belongs_to(o, name))
            .map(|o| {
                let mut v = serde_json::to_value(&*o).unwrap_or_default();
                if let Some(t) = o.types.as_ref() {
                    v["kind"] = t.kind.clone().into();
                }
                v
            })
            .collect()
    }

    /// Each cluster's Kubernetes version, from its control plane.
    pub fn versions(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        if let Some(store) = self.objects.get("KubeadmControlPlane") {
            for o in store.state() {
                let version = o.data.pointer("/spec/version").and_then(Value::as_str);
                if let (Some(c), Some(v)) = (cluster_of(&o), version) {
                    out.insert(c, v.to_string());
                }
            }
        }
        out
    }
}

/// The Cluster API cluster an object belongs to (see [`Watched::of_cluster`]).
pub fn cluster_of(o: &DynamicObject) -> Option<String> {
    cluster_name(o).map(str::to_string)
}

/// Whether `o` belongs to cluster `name`, without allocating: the cluster page asks it of every
/// watched object.
fn belongs_to(o: &DynamicObject, name: &str) -> bool {
    cluster_name(o) == Some(name)
}

/// The one rule behind both: the Cluster API label, else `spec.clusterName`, else the name as
/// capstan renders control planes (`<cluster>`, `<cluster>-etcd`).
fn cluster_name(o: &DynamicObject) -> Option<&str> {
    if let Some(c) = o
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("cluster.x-k8s.io/cluster-name"))
    {
        return Some(c);
    }
    if let Some(c) = o.data.pointer("/spec/clusterName").and_then(Value::as_str) {
        return Some(c);
    }
    let name = o.metadata.name.as_deref()?;
    match o.types.as_ref().map(|t| t.kind.as_str()) {
        Some("KubeadmControlPlane") => Some(name),
        Some("EtcdadmCluster") => name.strip_suffix("-etcd"),
        _ => None,
    }
}

async fn watch_kind(
    api: Api<DynamicObject>,
    ar: ApiResource,
    writer: reflector::store::Writer<DynamicObject>,
    bump: impl Fn(),
    progress: Arc<Progress>,
    kind: &'static str,
) {
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .map(move |ev| {
            ev.map(|e| {
                e.modify(|o| {
                    let mut slimmed = slim(o.clone());
                    slimmed.types = Some(kube::api::TypeMeta {
                        api_version: ar.api_version.clone(),
                        kind: ar.kind.clone(),
                    });
                    *o = slimmed;
                })
            })
        });
    let mut s = reflector::reflector(writer, stream).boxed();
    while let Some(ev) = s.next().await {
        progress.saw(kind, &ev);
        bump();
    }
}
