//! The fleet dashboard: every cluster, every upgrade and why anything waits, read-only, in a
//! browser.
//!
//! One implementation, served two ways: `capstan dashboard` runs on an operator's machine with
//! their own kubeconfig (so Kubernetes RBAC decides what they see, as with kubectl) on loopback;
//! `capstan run --dashboard-addr` serves it from the agent, every request authenticated with a
//! Kubernetes bearer token (TokenReview) and authorised for reading ManagedClusters
//! (SubjectAccessReview): [`auth`]. `capstan dashboard` lets in only the browser that opened the
//! link it printed, with its per-run secret. A browser holds only a session's id ([`session`]);
//! requests from other origins and, on the user's machine, for other hosts are refused
//! ([`guard`]); who gets in, either way: [`access`]. Live-update streams are bounded
//! ([`streams`]).
//!
//! Pages are rendered from watch caches ([`Watched`]: the ManagedClusters and the Cluster API
//! objects a cluster page shows, each kept as the few fields a page reads), never by asking the
//! API server per page view; a change to any of them is announced to open pages over
//! server-sent events, which then fetch themselves again. Templates are files embedded in the binary (`templates/`), rendered
//! with minijinja (HTML escaped); the one script is a few lines that follow the events. Nothing
//! of a Secret is read: the watched kinds are ManagedCluster, the control planes,
//! MachineDeployments and Machines, and of those the stores keep what the pages show ([`Obj`],
//! [`Entry`]): names, counts, versions, phases, and a ManagedCluster's status.

pub mod access;
pub mod auth;
pub mod board;
pub mod gate;
pub mod guard;
pub mod routes;
pub mod server;
pub mod session;
pub mod streams;
pub mod view;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::sync::watch;

use crate::live::{Live, LiveObject};
use crate::status::{self, ManagedCluster, Recorded};

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

/// What the dashboard watches, held compact: the agent keeps it for as long as it runs, beside
/// its own cache of the same fleet, so a page's needs set what is kept, not the API's objects.
pub struct Watched {
    /// Where the statuses (and, from the agent, the control planes and MachineDeployments)
    /// are read.
    source: Source,
    /// The Cluster API objects watched here, by kind, then `namespace/name`.
    objects: BTreeMap<&'static str, Arc<Table<Obj>>>,
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
    /// What announces a change of fixed stores ([`Watched::fixed`]; watches have their own).
    announce: Option<watch::Sender<u64>>,
}

/// Where a dashboard reads the fleet.
enum Source {
    /// Watches of its own (`capstan dashboard`): the ManagedClusters by name, as records (the
    /// status with the inventory as compressed text, [`Recorded`]), and every [`KINDS`] kind.
    Own(Arc<Table<Recorded>>),
    /// The agent's own cache (`capstan run --dashboard-addr`): the records and the rollout facts
    /// of the control planes and MachineDeployments ([`SHARED_KINDS`]) it keeps for its passes
    /// anyway; only Machines are watched here.
    Agent(Arc<Live>),
}

/// The kinds a dashboard served by the agent reads from the agent's cache, `(apiVersion,
/// kind)` as capstan renders them.
pub const SHARED_KINDS: &[(&str, &str)] = &[
    (
        "controlplane.cluster.x-k8s.io/v1beta2",
        "KubeadmControlPlane",
    ),
    ("etcdcluster.cluster.x-k8s.io/v1beta1", "EtcdadmCluster"),
    ("cluster.x-k8s.io/v1beta2", "MachineDeployment"),
];

fn record_of(mc: ManagedCluster) -> (String, Recorded) {
    (
        mc.metadata.name.clone().unwrap_or_default(),
        Recorded::from_object(&mc),
    )
}

/// A ManagedCluster again from its record, its inventory included when `inventory`.
fn managed_cluster(name: &str, r: &Recorded, inventory: bool) -> ManagedCluster {
    let mut mc = ManagedCluster::new(
        name,
        status::ManagedClusterSpec {
            management: r.management.clone(),
            directory: r.directory.clone(),
        },
    );
    mc.metadata.namespace = Some(status::NAMESPACE.to_string());
    mc.metadata.creation_timestamp = r.created.clone();
    mc.metadata.generation = Some(r.generation);
    let mut st = r.status.clone();
    if inventory {
        st.inventory = r.inventory();
    }
    mc.status = Some(st);
    mc
}

/// One Cluster API object as the pages read it: a few dozen bytes of names, counts and versions
/// where the API's object holds kilobytes (a control plane's whole kubeadm configuration, every
/// condition, a Machine's addresses).
#[derive(Debug, Clone, PartialEq)]
pub struct Obj {
    kind: &'static str,
    name: Box<str>,
    namespace: Box<str>,
    /// The Cluster API cluster it belongs to ([`cluster_name`]).
    cluster: Option<Box<str>>,
    /// The labels a Machine's owner is read from ([`GROUP_LABELS`]), those it has.
    labels: Vec<(&'static str, Box<str>)>,
    replicas: Option<i64>,
    /// A control plane's or Machine's `spec.version`, a MachineDeployment's template's.
    version: Box<str>,
    up_to_date: i64,
    available: i64,
    /// A Machine's `status.phase`.
    phase: Box<str>,
}

/// The labels that say whose a Machine is: its cluster, and its MachineDeployment, control plane
/// or etcd cluster.
pub const GROUP_LABELS: [&str; 4] = [
    "cluster.x-k8s.io/cluster-name",
    "cluster.x-k8s.io/deployment-name",
    "cluster.x-k8s.io/control-plane-name",
    "etcd-cluster.cluster.x-k8s.io/etcd-cluster-name",
];

impl Obj {
    /// The parts of `o` (of `kind`, one of [`KINDS`]) a page shows.
    pub fn of(kind: &'static str, o: &DynamicObject) -> Obj {
        let text = |p: &str| -> Box<str> {
            o.data
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .into()
        };
        let int = |p: &str| o.data.pointer(p).and_then(Value::as_i64);
        let labels = o.metadata.labels.as_ref();
        let mut version = text("/spec/version");
        if version.is_empty() {
            version = text("/spec/template/spec/version");
        }
        Obj {
            kind,
            name: o.metadata.name.as_deref().unwrap_or_default().into(),
            namespace: o.metadata.namespace.as_deref().unwrap_or_default().into(),
            cluster: cluster_name(kind, o).map(Into::into),
            labels: GROUP_LABELS
                .iter()
                .filter_map(|l| Some((*l, labels?.get(*l)?.as_str().into())))
                .collect(),
            replicas: int("/spec/replicas"),
            version,
            up_to_date: int("/status/upToDateReplicas").unwrap_or(0),
            available: int("/status/availableReplicas").unwrap_or(0),
            phase: text("/status/phase"),
        }
    }

    /// A control plane, etcd cluster or MachineDeployment from the agent's facts of it (`key`:
    /// [`crate::plan::ObjectRef::key`]), when it is one of `kind`.
    fn from_live(kind: &'static str, key: &str, o: &LiveObject) -> Option<Obj> {
        // Only the kinds health reads carry rollout facts: the others are passed over first.
        let rollout = Some(o.rollout.as_deref()?);
        let mut parts = key.splitn(4, '/');
        let (_group, k, namespace, name) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if k != kind {
            return None;
        }
        let replicas = rollout.and_then(|r| r.replicas.as_ref());
        Some(Obj {
            kind,
            name: name.into(),
            namespace: namespace.into(),
            cluster: o.cluster.clone(),
            labels: Vec::new(),
            replicas: rollout.and_then(|r| r.desired),
            version: rollout.and_then(|r| r.version.clone()).unwrap_or_default(),
            up_to_date: replicas.map_or(0, |r| r.up_to_date),
            available: replicas.map_or(0, |r| r.available),
            phase: "".into(),
        })
    }

    /// As JSON shaped like the API's object, for [`view`].
    fn value(&self) -> Value {
        let labels: serde_json::Map<String, Value> = self
            .labels
            .iter()
            .map(|(k, v)| ((*k).to_string(), Value::from(&**v)))
            .collect();
        serde_json::json!({
            "kind": self.kind,
            "metadata": {"name": &*self.name, "namespace": &*self.namespace, "labels": labels},
            "spec": {"replicas": self.replicas, "version": &*self.version},
            "status": {"upToDateReplicas": self.up_to_date, "availableReplicas": self.available, "phase": &*self.phase},
        })
    }
}

/// A store filled from a watch: its objects by key, a relist built aside and swapped in whole
/// (so a page never sees half a list).
struct Table<T> {
    now: std::sync::RwLock<std::collections::HashMap<String, Arc<T>>>,
    relist: std::sync::Mutex<Option<std::collections::HashMap<String, Arc<T>>>>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            now: Default::default(),
            relist: Default::default(),
        }
    }
}

impl<T> Table<T> {
    /// Applies one watch event, each object made a `T` (with its key) by `conv`.
    fn apply<K>(&self, ev: watcher::Event<K>, conv: impl Fn(K) -> (String, T)) {
        let mut relist = self.relist.lock().unwrap_or_else(|p| p.into_inner());
        match ev {
            watcher::Event::Init => *relist = Some(Default::default()),
            watcher::Event::InitApply(k) => {
                let (key, t) = conv(k);
                relist
                    .get_or_insert_with(Default::default)
                    .insert(key, Arc::new(t));
            }
            watcher::Event::InitDone => {
                if let Some(all) = relist.take() {
                    *self.now.write().unwrap_or_else(|p| p.into_inner()) = all;
                }
            }
            watcher::Event::Apply(k) => {
                let (key, t) = conv(k);
                self.now
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, Arc::new(t));
            }
            watcher::Event::Delete(k) => {
                let (key, _) = conv(k);
                self.now
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&key);
            }
        }
    }

    fn get(&self, key: &str) -> Option<Arc<T>> {
        self.now
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    fn entries(&self) -> Vec<(String, Arc<T>)> {
        self.now
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn all(&self) -> Vec<Arc<T>> {
        self.now
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }
}

/// The key of an object in its [`Table`].
fn key(o: &Obj) -> String {
    format!("{}/{}", o.namespace, o.name)
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

/// What tells open pages that something changed: a counter bumped (by the returned function)
/// on every change, and its receiver.
fn signal() -> (
    impl Fn() + Clone + Send + Sync + 'static,
    watch::Receiver<u64>,
) {
    let (tx, changes) = watch::channel(0u64);
    let tx = Arc::new(tx);
    (move || tx.send_modify(|n| *n += 1), changes)
}

/// The objects of a list page the watches ask for at once: a list's page is held whole while it
/// is read, so a smaller page keeps the agent's peak lower at a few more requests per relist.
const PAGE: u32 = 100;

impl Watched {
    /// Starts the watches: the ManagedClusters of `capstan-system` and every [`KINDS`] kind
    /// served, in every namespace. Returns at once; the stores fill as the lists arrive.
    pub async fn start(client: &Client, repo: Option<String>) -> Watched {
        let (bump, changes) = signal();
        let mut tasks = Vec::new();
        let progress = Arc::new(Progress::default());
        let statuses = Arc::new(Table::default());
        let api = status::api(client);
        let (b, p, table) = (bump.clone(), progress.clone(), statuses.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default().page_size(PAGE))
                .default_backoff()
                .boxed();
            while let Some(ev) = s.next().await {
                p.saw("ManagedCluster", &ev);
                if let Ok(ev) = ev {
                    table.apply(ev, record_of);
                }
                b();
            }
        }));
        let (objects, missing) = watch_kinds(client, KINDS, &bump, &progress, &mut tasks).await;
        Watched {
            watches: objects.len() + 1,
            source: Source::Own(statuses),
            objects,
            missing,
            changes,
            repo,
            progress,
            tasks,
            announce: None,
        }
    }

    /// The dashboard served by the agent: the statuses, control planes and MachineDeployments
    /// read from the agent's own cache (`live`), whose watches `shared` opens and lists (see
    /// [`crate::reconcile::Agent::watch_for_dashboard`]; tried again until it succeeds), so that
    /// the dashboard costs the agent no second copy of them; Machines, which the agent does not
    /// watch, watched here. A change of the cache is seen within a quarter second.
    pub async fn start_shared<F>(
        client: &Client,
        repo: Option<String>,
        live: Arc<Live>,
        shared: impl Fn() -> F + Send + 'static,
    ) -> Watched
    where
        F: std::future::Future<Output = Result<(), String>> + Send,
    {
        let (bump, changes) = signal();
        let mut tasks = Vec::new();
        let progress = Arc::new(Progress::default());
        let p = progress.clone();
        tasks.push(tokio::spawn(async move {
            let mut wait = std::time::Duration::from_secs(1);
            loop {
                match shared().await {
                    Ok(()) => {
                        p.synced.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "dashboard: watching the agent's kinds; trying again");
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(std::time::Duration::from_secs(60));
                    }
                }
            }
        }));
        let (b, l) = (bump.clone(), live.clone());
        tasks.push(tokio::spawn(async move {
            let mut seen = l.revision();
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(250));
            loop {
                tick.tick().await;
                let now = l.revision();
                if now != seen {
                    seen = now;
                    b();
                }
            }
        }));
        let machines: Vec<(&str, &str)> = KINDS
            .iter()
            .filter(|(_, k)| *k == "Machine")
            .copied()
            .collect();
        let (objects, missing) = watch_kinds(client, &machines, &bump, &progress, &mut tasks).await;
        Watched {
            watches: objects.len() + 1,
            source: Source::Agent(live),
            objects,
            missing,
            changes,
            repo,
            progress,
            tasks,
            announce: None,
        }
    }

    /// Stores filled with the given objects (kept as the watches keep them) and nothing
    /// watched: the pages' tests and benchmarks. The objects are taken one at a time, so a
    /// caller may make them as they are taken.
    pub fn fixed(
        statuses: impl IntoIterator<Item = ManagedCluster>,
        objects: Vec<(&'static str, Box<dyn Iterator<Item = DynamicObject> + '_>)>,
    ) -> Watched {
        let table = Table::default();
        table.apply::<ManagedCluster>(watcher::Event::Init, record_of);
        for s in statuses {
            table.apply(watcher::Event::InitApply(s), record_of);
        }
        table.apply::<ManagedCluster>(watcher::Event::InitDone, record_of);
        let mut stores = BTreeMap::new();
        for (kind, objs) in objects {
            let kind = KINDS
                .iter()
                .map(|(_, k)| *k)
                .find(|k| *k == kind)
                .unwrap_or_else(|| panic!("the dashboard does not keep {kind}"));
            let t = Table::default();
            let conv = |o: DynamicObject| {
                let o = Obj::of(kind, &o);
                (key(&o), o)
            };
            t.apply(watcher::Event::Init, conv);
            for o in objs {
                t.apply(watcher::Event::InitApply(o), conv);
            }
            t.apply(watcher::Event::InitDone, conv);
            stores.insert(kind, Arc::new(t));
        }
        let (announce, changes) = watch::channel(0);
        Watched {
            source: Source::Own(Arc::new(table)),
            objects: stores,
            missing: Vec::new(),
            changes,
            repo: None,
            progress: Arc::new(Progress::default()),
            watches: 0,
            tasks: Vec::new(),
            announce: Some(announce),
        }
    }

    /// As [`Watched::fixed`] for the dashboard served by the agent: the statuses and rollout
    /// facts read from `live`, the Machines given.
    pub fn fixed_shared(
        live: Arc<Live>,
        machines: Box<dyn Iterator<Item = DynamicObject> + '_>,
    ) -> Watched {
        let own = Watched::fixed(Vec::new(), vec![("Machine", machines)]);
        let (announce, changes) = watch::channel(0);
        Watched {
            source: Source::Agent(live),
            objects: own.objects.clone(),
            missing: Vec::new(),
            changes,
            repo: None,
            progress: Arc::new(Progress::default()),
            watches: 0,
            tasks: Vec::new(),
            announce: Some(announce),
        }
    }

    /// Tells open pages that something changed (fixed stores: [`Watched::fixed`]; watched ones
    /// announce their own changes).
    pub fn announce(&self) {
        if let Some(tx) = &self.announce {
            tx.send_modify(|n| *n += 1);
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

    /// Every status object now (their inventories left out: the fleet's pages do not show
    /// them).
    pub fn statuses(&self) -> Vec<ManagedCluster> {
        match &self.source {
            Source::Own(t) => t
                .entries()
                .iter()
                .map(|(name, r)| managed_cluster(name, r, false))
                .collect(),
            Source::Agent(live) => live
                .records()
                .iter()
                .map(|(name, r)| managed_cluster(name, r, false))
                .collect(),
        }
    }

    /// The status object of one cluster, whole (no copy of the others).
    pub fn status_of(&self, name: &str) -> Option<ManagedCluster> {
        let r = match &self.source {
            Source::Own(t) => t.get(name),
            Source::Agent(live) => live.record(name),
        };
        r.map(|r| managed_cluster(name, &r, true))
    }

    /// The objects of `kind` (one of [`KINDS`]) of cluster `cluster` (`None`: of every
    /// cluster): those watched here, else the agent's facts.
    fn objects_of(&self, kind: &str, cluster: Option<&str>) -> Vec<Arc<Obj>> {
        let of = |c: Option<&str>| cluster.is_none() || c == cluster;
        if let Some(store) = self.objects.get(kind) {
            return store
                .all()
                .into_iter()
                .filter(|o| of(o.cluster.as_deref()))
                .collect();
        }
        let (Source::Agent(live), Some(kind)) = (
            &self.source,
            SHARED_KINDS.iter().map(|(_, k)| *k).find(|k| *k == kind),
        ) else {
            return Vec::new();
        };
        live.scan(|key, o| {
            of(o.cluster.as_deref())
                .then(|| Obj::from_live(kind, key, o).map(Arc::new))
                .flatten()
        })
    }

    /// The objects of one kind that belong to Cluster API cluster `name` ([`cluster_name`]), as
    /// JSON shaped like the API's (what [`view`] reads).
    pub fn of_cluster(&self, kind: &str, name: &str) -> Vec<Value> {
        self.objects_of(kind, Some(name))
            .into_iter()
            .map(|o| o.value())
            .collect()
    }

    /// Each cluster's Kubernetes version, from its control plane.
    pub fn versions(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for o in self.objects_of("KubeadmControlPlane", None) {
            if let (Some(c), false) = (o.cluster.as_deref(), o.version.is_empty()) {
                out.insert(c.to_string(), o.version.to_string());
            }
        }
        out
    }
}

/// Starts a watch of each of `kinds` that is served, into a table of its own; returns the
/// tables and what could not be watched.
async fn watch_kinds(
    client: &Client,
    kinds: &[(&'static str, &'static str)],
    bump: &(impl Fn() + Clone + Send + Sync + 'static),
    progress: &Arc<Progress>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> (BTreeMap<&'static str, Arc<Table<Obj>>>, Vec<String>) {
    let mut objects = BTreeMap::new();
    let mut missing = Vec::new();
    for (group, kind) in kinds {
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
        let table = Arc::new(Table::default());
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let (b, p, t) = (bump.clone(), progress.clone(), table.clone());
        tasks.push(tokio::spawn(watch_kind(api, t, b, p, kind)));
        objects.insert(*kind, table);
    }
    (objects, missing)
}

/// The Cluster API cluster an object of `kind` belongs to: the Cluster API label (what Cluster
/// API puts on Machines), else `spec.clusterName`, else the name as capstan renders control
/// planes (`<cluster>`, `<cluster>-etcd`).
fn cluster_name<'o>(kind: &str, o: &'o DynamicObject) -> Option<&'o str> {
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
    match kind {
        "KubeadmControlPlane" => Some(name),
        "EtcdadmCluster" => name.strip_suffix("-etcd"),
        _ => None,
    }
}

async fn watch_kind(
    api: Api<DynamicObject>,
    table: Arc<Table<Obj>>,
    bump: impl Fn(),
    progress: Arc<Progress>,
    kind: &'static str,
) {
    let mut s = watcher(api, watcher::Config::default().page_size(PAGE))
        .default_backoff()
        .boxed();
    while let Some(ev) = s.next().await {
        progress.saw(kind, &ev);
        if let Ok(ev) = ev {
            table.apply(ev, |o: DynamicObject| {
                let o = Obj::of(kind, &o);
                (key(&o), o)
            });
        }
        bump();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dynamic(v: Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn an_object_keeps_what_a_page_reads() {
        let md = Obj::of(
            "MachineDeployment",
            &dynamic(
                json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
                "metadata": {"name": "w-1-md-0", "namespace": "t", "labels": {"team": "a"}, "annotations": {"big": "x"}},
                "spec": {"clusterName": "w-1", "replicas": 3, "template": {"spec": {"version": "v1.34.1", "bootstrap": {}}}},
                "status": {"upToDateReplicas": 1, "availableReplicas": 2, "conditions": [{"type": "Available"}]}}),
            ),
        );
        assert_eq!(md.cluster.as_deref(), Some("w-1"));
        assert_eq!(
            md.value(),
            json!({"kind": "MachineDeployment",
                "metadata": {"name": "w-1-md-0", "namespace": "t", "labels": {}},
                "spec": {"replicas": 3, "version": "v1.34.1"},
                "status": {"upToDateReplicas": 1, "availableReplicas": 2, "phase": ""}})
        );
        // A control-plane Machine keeps the label that says whose it is; others go.
        let m = Obj::of(
            "Machine",
            &dynamic(
                json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": "w-1-cp-x", "namespace": "t", "labels": {
                    "cluster.x-k8s.io/cluster-name": "w-1", "cluster.x-k8s.io/control-plane-name": "w-1",
                    "cluster.x-k8s.io/control-plane": ""}},
                "spec": {"clusterName": "w-1", "version": "v1.33.4"}, "status": {"phase": "Running"}}),
            ),
        );
        assert_eq!(
            m.labels,
            vec![
                ("cluster.x-k8s.io/cluster-name", "w-1".into()),
                ("cluster.x-k8s.io/control-plane-name", "w-1".into())
            ]
        );
        assert_eq!((&*m.version, &*m.phase), ("v1.33.4", "Running"));
        // Control planes and etcd are named after their cluster.
        let etcd = Obj::of(
            "EtcdadmCluster",
            &dynamic(
                json!({"apiVersion": "etcdcluster.cluster.x-k8s.io/v1beta1", "kind": "EtcdadmCluster",
                "metadata": {"name": "w-2-etcd", "namespace": "t"}, "spec": {"replicas": 3}}),
            ),
        );
        assert_eq!(etcd.cluster.as_deref(), Some("w-2"));
    }

    #[test]
    fn a_relist_replaces_the_table_whole_and_only_when_done() {
        let t: Table<Obj> = Table::default();
        let obj = |name: &str| {
            dynamic(
                json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": name, "namespace": "t"}, "spec": {"clusterName": "w"}}),
            )
        };
        let conv = |o: DynamicObject| {
            let o = Obj::of("Machine", &o);
            (key(&o), o)
        };
        for ev in [
            watcher::Event::Init,
            watcher::Event::InitApply(obj("a")),
            watcher::Event::InitApply(obj("b")),
            watcher::Event::InitDone,
        ] {
            t.apply(ev, conv);
        }
        let names = |t: &Table<Obj>| {
            let mut n: Vec<String> = t.all().iter().map(|o| o.name.to_string()).collect();
            n.sort();
            n
        };
        assert_eq!(names(&t), ["a", "b"]);
        t.apply(watcher::Event::Delete(obj("a")), conv);
        t.apply(watcher::Event::Apply(obj("c")), conv);
        assert_eq!(names(&t), ["b", "c"]);
        // A relist after the watch broke: "b" went meanwhile. Until it is done, pages read the
        // old set; then the new one, whole.
        t.apply(watcher::Event::Init, conv);
        t.apply(watcher::Event::InitApply(obj("c")), conv);
        assert_eq!(names(&t), ["b", "c"]);
        t.apply(watcher::Event::InitDone, conv);
        assert_eq!(names(&t), ["c"]);
    }

    #[test]
    fn a_status_is_kept_compact_and_given_back_whole() {
        let mut mc = ManagedCluster::new(
            "w-1",
            status::ManagedClusterSpec {
                management: "m".into(),
                directory: "clusters/m/workload-clusters/w-1".into(),
            },
        );
        mc.metadata.namespace = Some(status::NAMESPACE.into());
        mc.metadata.generation = Some(4);
        mc.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-01T10:00:00Z".parse().unwrap(),
            ));
        mc.metadata.managed_fields = Some(vec![Default::default()]);
        mc.status = Some(status::ManagedClusterStatus {
            message: "ok".into(),
            inventory: vec![crate::plan::ObjectRef {
                api_version: "cluster.x-k8s.io/v1beta2".into(),
                kind: "Cluster".into(),
                namespace: "t".into(),
                name: "w-1".into(),
                hash: "h".into(),
                generation: 1,
                fields: String::new(),
            }],
            ..Default::default()
        });
        let w = Watched::fixed(vec![mc.clone()], Vec::new());
        let whole = w.status_of("w-1").unwrap();
        assert_eq!(whole.status, mc.status);
        assert_eq!(whole.spec, mc.spec);
        assert_eq!(
            whole.metadata.creation_timestamp,
            mc.metadata.creation_timestamp
        );
        assert_eq!(whole.metadata.managed_fields, None);
        let listed = w.statuses();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].status.as_ref().unwrap().inventory.is_empty());
        assert_eq!(listed[0].status.as_ref().unwrap().message, "ok");
    }

    #[tokio::test]
    async fn served_by_the_agent_it_reads_the_agents_cache() {
        use crate::health::{Replicas, RolloutStatus};
        let live = Arc::new(Live::default());
        let mut mc = ManagedCluster::new(
            "w-1",
            status::ManagedClusterSpec {
                management: "m".into(),
                directory: "clusters/m/workload-clusters/w-1".into(),
            },
        );
        mc.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-01T10:00:00Z".parse().unwrap(),
            ));
        mc.status = Some(status::ManagedClusterStatus {
            message: "rolling".into(),
            ..Default::default()
        });
        live.set_record("w-1", Some(Recorded::from_object(&mc)));
        let facts = |desired, up_to_date, version: &str| LiveObject {
            cluster: Some("w-1".into()),
            rollout: Some(Arc::new(RolloutStatus {
                replicas: Some(Replicas {
                    desired: Some(desired),
                    current: desired,
                    up_to_date,
                    available: desired,
                }),
                version: Some(version.into()),
                desired: Some(desired),
                ..Default::default()
            })),
            ..Default::default()
        };
        {
            let mut objects = live.objects_mut();
            objects.insert(
                "controlplane.cluster.x-k8s.io/KubeadmControlPlane/t/w-1".into(),
                facts(3, 1, "v1.34.1"),
            );
            objects.insert(
                "cluster.x-k8s.io/MachineDeployment/t/w-1-md-0".into(),
                facts(2, 2, "v1.33.4"),
            );
            // Another cluster's, and a kind the pages do not show.
            let mut other = facts(1, 1, "v1.34.1");
            other.cluster = Some("w-2".into());
            objects.insert(
                "cluster.x-k8s.io/MachineDeployment/t/w-2-md-0".into(),
                other,
            );
            objects.insert("cluster.x-k8s.io/Cluster/t/w-1".into(), facts(0, 0, ""));
        }
        let (tx, changes) = watch::channel(0);
        drop(tx);
        let w = Watched {
            source: Source::Agent(live.clone()),
            objects: BTreeMap::new(),
            missing: Vec::new(),
            changes,
            repo: None,
            progress: Arc::new(Progress::default()),
            watches: 0,
            tasks: Vec::new(),
            announce: None,
        };
        let all = w.statuses();
        assert_eq!(all.len(), 1);
        assert_eq!(
            all[0].metadata.creation_timestamp,
            mc.metadata.creation_timestamp
        );
        assert_eq!(w.status_of("w-1").unwrap().status, mc.status);
        assert_eq!(
            w.versions(),
            [("w-1".to_string(), "v1.34.1".to_string())].into()
        );
        let mds = w.of_cluster("MachineDeployment", "w-1");
        assert_eq!(
            mds,
            vec![json!({"kind": "MachineDeployment",
                "metadata": {"name": "w-1-md-0", "namespace": "t", "labels": {}},
                "spec": {"replicas": 2, "version": "v1.33.4"},
                "status": {"upToDateReplicas": 2, "availableReplicas": 2, "phase": ""}})]
        );
        assert_eq!(w.of_cluster("KubeadmControlPlane", "w-1").len(), 1);
        assert!(w.of_cluster("Cluster", "w-1").is_empty());
        // Every change of the cache moves its revision (what tells open pages to look again).
        let before = live.revision();
        live.set_record("w-1", None);
        assert!(live.revision() > before);
        assert!(w.statuses().is_empty());
    }
}
