//! Benchmark (prints figures; not a test): one add-on set applied inside N workload clusters
//! (default 100; `CAPSTAN_BENCH_CLUSTERS` overrides), what the agent's add-on step
//! (`reconcile/addons.rs`) costs the workload clusters' API servers, the management cluster and
//! the agent, cold, when nothing changed, and when one object of every set changed.
//!
//! The management cluster is a private local control plane (CRDs installed, no controllers)
//! holding a scaffolded fleet of N docker workload clusters. The workload clusters' insides are
//! a few more local API servers (kube-apiserver + etcd, no CRDs; default 4,
//! `CAPSTAN_BENCH_SERVERS` overrides), the N clusters spread over them round-robin: one API
//! server per cluster would not fit (each kube-apiserver took about 270 MiB here, etcd beside
//! it, and this 2-core, 24 GiB machine would need 100 of them). Each cluster's add-ons live in a namespace of their own
//! (`a-<cluster>`), so clusters sharing a server do not collide: a Namespace, a ServiceAccount,
//! a Role and its RoleBinding, two ConfigMaps and a Deployment (7 objects). The bench plays
//! Cluster API's part (each cluster's `<cluster>-kubeconfig` Secret, naming its server), the
//! kubelet's (one Ready Node per server) and, after the cold pass, the Deployment controller's
//! (each Deployment's status reported rolled out, as a real cluster's would be).
//!
//! The agent runs in this process: one `capstan::reconcile::Agent` kept across passes (as the
//! daemon keeps it, so its workload connections are cached between passes, up to
//! `addons::MAX_CONNECTIONS` of them), authenticated as
//! the agent's ServiceAccount, concurrency 4 (`capstan run`'s default), the live state read
//! with lists. Passes:
//! - setup: the fleet's cold apply on the management cluster, no kubeconfig yet (the add-ons
//!   wait); then the same again, nothing changed (the baseline: a pass without add-on work);
//! - 1 (cold): the kubeconfig Secrets written, every set applied;
//! - 2 (nothing changed): every set applied again (server-side apply: the cost of a pass);
//! - 3: one ConfigMap changed in every cluster's set;
//! - 4: nothing changed again (the steady state: every set applied, healthy and recorded).
//!
//! Each prints its wall time; the workload API servers' requests from the agent (their audit
//! logs, the agent's user, the servers' own requests left out), as writes, dry runs, reads and
//! discovery, per cluster and by verb and resource; the add-on objects whose resourceVersion
//! changed (what the writes really changed); the management cluster's requests from the agent's
//! ServiceAccount (and of them the kubeconfig Secret reads); the clusters' AddonsReady
//! conditions; and the bench process's peak RSS (VmHWM: the agent, its fleet and the bench's own
//! bookkeeping). At the end it checks that every server holds its clusters' two ConfigMaps each,
//! labelled, the changed one changed, and panics if not.
//!
//! Run: `cargo test --offline -p capstan --bench addons` (debug build, as the other
//! benchmarks' recorded figures), `CAPSTAN_BENCH_CLUSTERS=10` for a quick check.

mod support;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use capstan::reconcile::addons::ADDON_LABEL;
use capstan::reconcile::{Agent, Options, Outcome};
use capstan_harness::{AuditEvent, ControlPlane, StartOptions};
use capstan_layout::Tree;
use capstan_layout::scaffold::{self, ClusterRequest};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

const MGMT: &str = "mgmt";

/// One cluster's add-on set (`__NS__`: its namespace), 7 objects.
const ADDONS: &str = "apiVersion: v1
kind: Namespace
metadata:
  name: __NS__
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: agent
  namespace: __NS__
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: agent
  namespace: __NS__
rules:
- apiGroups: [\"\"]
  resources: [configmaps]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: agent
  namespace: __NS__
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: agent}
subjects:
- {kind: ServiceAccount, name: agent, namespace: __NS__}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: __NS__
data:
  level: info
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: features
  namespace: __NS__
data:
  tracing: \"off\"
  cache: \"on\"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: agent
  namespace: __NS__
spec:
  replicas: 1
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      serviceAccountName: agent
      containers: [{name: agent, image: registry.k8s.io/pause:3.10}]
";

const OBJECTS_PER_SET: usize = 7;

fn cluster_name(i: usize) -> String {
    format!("w{i:04}")
}

fn addon_namespace(cluster: &str) -> String {
    format!("a-{cluster}")
}

fn addon_path(cluster: &str) -> String {
    format!("clusters/{MGMT}/workload-clusters/{cluster}/addons/base.yaml")
}

/// The management cluster and `n` docker workload clusters (namespaces `team-0`…`team-19`, as
/// the other benches scaffold them), each with its add-on set, in memory.
fn scaffold_addon_fleet(n: usize) -> Tree {
    let mut tree = Tree::new();
    let mgmt = ClusterRequest {
        name: MGMT.into(),
        provider: "docker".into(),
        pod_cidr: Some("192.168.0.0/16".into()),
        service_cidr: Some("172.16.0.0/16".into()),
        ..Default::default()
    };
    for (p, t) in scaffold::plan(&tree, &mgmt).unwrap().files {
        tree.insert(p, t);
    }
    let base = tree.clone();
    for i in 0..n {
        let name = cluster_name(i);
        let req = ClusterRequest {
            name: name.clone(),
            management: Some(MGMT.into()),
            provider: "docker".into(),
            namespace: Some(format!("team-{}", i % 20)),
            pod_cidr: Some(format!("10.{}.{}.0/22", i / 64, (i % 64) * 4)),
            service_cidr: Some(format!("100.{}.{}.0/24", 64 + i / 256, i % 256)),
            ..Default::default()
        };
        for (p, t) in scaffold::plan(&base, &req).unwrap().files {
            tree.insert(p, t);
        }
        tree.insert(
            addon_path(&name),
            ADDONS.replace("__NS__", &addon_namespace(&name)),
        );
    }
    tree
}

fn load(tree: &Tree) -> capstan_layout::Fleet {
    let fleet = capstan_layout::load(tree);
    assert!(!fleet.has_errors(), "{:?}", fleet.all_diagnostics());
    fleet
}

/// Plays the Deployment controller's part: the cluster's add-on Deployment reported rolled out.
async fn rolled_out(w: &ControlPlane, cluster: String) {
    let api: Api<Deployment> = Api::namespaced(w.client(), &addon_namespace(&cluster));
    let generation = api.get("agent").await.unwrap().metadata.generation.unwrap();
    api.patch_status(
        "agent",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"observedGeneration": generation, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1}})),
    )
    .await
    .unwrap();
}

/// Every add-on object on a server (those labelled [`ADDON_LABEL`]), `Kind/ns/name` →
/// resourceVersion.
async fn addon_versions(w: &ControlPlane) -> BTreeMap<String, String> {
    async fn add_versions_of<K>(client: &Client, out: &mut BTreeMap<String, String>)
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    {
        let api: Api<K> = Api::all(client.clone());
        for o in api
            .list(&ListParams::default().labels(ADDON_LABEL))
            .await
            .unwrap()
        {
            out.insert(
                format!(
                    "{}/{}/{}",
                    K::kind(&()),
                    o.namespace().unwrap_or_default(),
                    o.name_any()
                ),
                o.resource_version().unwrap_or_default(),
            );
        }
    }
    let client = w.client();
    let mut out = BTreeMap::new();
    add_versions_of::<Namespace>(&client, &mut out).await;
    add_versions_of::<ServiceAccount>(&client, &mut out).await;
    add_versions_of::<Role>(&client, &mut out).await;
    add_versions_of::<RoleBinding>(&client, &mut out).await;
    add_versions_of::<ConfigMap>(&client, &mut out).await;
    add_versions_of::<Deployment>(&client, &mut out).await;
    out
}

async fn versions_of(servers: &[ControlPlane]) -> BTreeMap<String, String> {
    let mut all = BTreeMap::new();
    for (s, w) in servers.iter().enumerate() {
        for (k, v) in addon_versions(w).await {
            all.insert(format!("{s}:{k}"), v);
        }
    }
    all
}

/// The AddonsReady conditions of the workload clusters' ManagedClusters, counted by
/// `status/reason`.
async fn addons_ready(mgmt: &Client) -> BTreeMap<String, usize> {
    let ar = ApiResource {
        group: "capstan.dev".into(),
        version: "v1alpha1".into(),
        api_version: "capstan.dev/v1alpha1".into(),
        kind: "ManagedCluster".into(),
        plural: "managedclusters".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(mgmt.clone(), "capstan-system", &ar);
    let mut out = BTreeMap::new();
    for mc in api.list(&ListParams::default()).await.unwrap() {
        if mc.name_any() == MGMT {
            continue;
        }
        let c = mc.data["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "AddonsReady"))
            .map(|c| {
                format!(
                    "{}/{}",
                    c["status"].as_str().unwrap_or("?"),
                    c["reason"].as_str().unwrap_or("?")
                )
            })
            .unwrap_or_else(|| "none".into());
        *out.entry(c).or_default() += 1;
    }
    out
}

/// Requests of one pass on one API server, by kind of request.
#[derive(Default)]
struct Counts {
    writes: usize,
    dry_runs: usize,
    reads: usize,
    discovery: usize,
    /// `verb resource` (or `GET /path` for discovery) → count.
    by: BTreeMap<String, usize>,
    /// Kubeconfig Secret reads (management cluster only).
    kubeconfigs: usize,
}

impl Counts {
    fn total(&self) -> usize {
        self.writes + self.dry_runs + self.reads + self.discovery
    }

    fn add(&mut self, e: &AuditEvent) {
        let write_verb = matches!(
            e.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        );
        let resource = e.resource().map(|r| match e.object_ref.as_ref() {
            Some(o) if o.subresource.is_some() => {
                format!("{r}/{}", o.subresource.as_deref().unwrap_or(""))
            }
            _ => r.to_string(),
        });
        let key = match &resource {
            Some(r) if write_verb && !e.is_write() => {
                self.dry_runs += 1;
                format!("dry-run {} {r}", e.verb)
            }
            Some(r) if write_verb => {
                self.writes += 1;
                format!("{} {r}", e.verb)
            }
            Some(r) => {
                self.reads += 1;
                if r == "secrets" && e.verb == "get" && e.request_uri.ends_with("-kubeconfig") {
                    self.kubeconfigs += 1;
                }
                format!("{} {r}", e.verb)
            }
            None => {
                self.discovery += 1;
                let path = e.request_uri.split('?').next().unwrap_or("");
                format!("GET {path}")
            }
        };
        *self.by.entry(key).or_default() += 1;
    }

    fn summary(&self) -> String {
        format!(
            "{} requests: {} writes, {} dry runs, {} reads, {} discovery",
            self.total(),
            self.writes,
            self.dry_runs,
            self.reads,
            self.discovery
        )
    }

    fn per(&self, n: usize) -> String {
        let n = n.max(1) as f64;
        let by: Vec<String> = self
            .by
            .iter()
            .map(|(k, v)| format!("{k} {}", fmt_per(*v as f64 / n)))
            .collect();
        format!(
            "{} ({} writes, {} dry runs, {} reads, {} discovery): {}",
            fmt_per(self.total() as f64 / n),
            fmt_per(self.writes as f64 / n),
            fmt_per(self.dry_runs as f64 / n),
            fmt_per(self.reads as f64 / n),
            fmt_per(self.discovery as f64 / n),
            by.join(", ")
        )
    }
}

fn fmt_per(x: f64) -> String {
    if (x - x.round()).abs() < 0.005 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// The request of the audit log's own sync, made by the bench.
fn is_sync(e: &AuditEvent) -> bool {
    e.request_uri.contains("capstan-audit-sync")
}

struct Bed {
    cp: ControlPlane,
    admin: Client,
    servers: Vec<ControlPlane>,
    agent: Agent,
    n: usize,
}

/// A pass's figures.
struct Pass {
    wall: Duration,
    workload: Counts,
    mgmt: Counts,
    outcome: Outcome,
}

impl Bed {
    async fn pass(&self, fleet: &capstan_layout::Fleet, revision: &str) -> Pass {
        let opts = Options {
            revision: revision.into(),
            management: Some(MGMT.into()),
            concurrency: 4,
            ..Default::default()
        };
        let mgmt_mark = self.cp.audit().mark();
        let marks: Vec<_> = self.servers.iter().map(|w| w.audit().mark()).collect();
        let started = Instant::now();
        let outcome = self.agent.reconcile(fleet, &opts).await.unwrap();
        let wall = started.elapsed();
        let limit = Duration::from_secs(30);
        self.cp
            .audit()
            .sync(&self.admin, limit)
            .await
            .expect("audit sync");
        let mut workload = Counts::default();
        for (w, mark) in self.servers.iter().zip(marks) {
            w.audit()
                .sync(&w.client(), limit)
                .await
                .expect("audit sync");
            for e in w.audit().events_since(mark).unwrap() {
                // The API server's own requests (its loopback client) are not the agent's.
                if is_sync(&e) || e.user.username.starts_with("system:") {
                    continue;
                }
                workload.add(&e);
            }
        }
        let mut mgmt = Counts::default();
        for e in self.cp.audit().events_since(mgmt_mark).unwrap() {
            if !is_sync(&e)
                && e.user
                    .username
                    .starts_with("system:serviceaccount:capstan-system:")
            {
                mgmt.add(&e);
            }
        }
        Pass {
            wall,
            workload,
            mgmt,
            outcome,
        }
    }

    fn print(&self, title: &str, p: &Pass, changed: Option<(usize, usize)>, ready: &str) {
        let n = self.n;
        println!(
            "{title}: {:.2} s wall ({:.1} ms per cluster at concurrency 4); the agent counted {} writes, {} reads on the management cluster",
            p.wall.as_secs_f64(),
            p.wall.as_secs_f64() * 1000.0 / n as f64,
            p.outcome.writes,
            p.outcome.reads,
        );
        println!(
            "  workload API servers: {} ({} per cluster)",
            p.workload.summary(),
            fmt_per(p.workload.total() as f64 / n as f64)
        );
        if p.workload.total() > 0 {
            println!("    per cluster: {}", p.workload.per(n));
        }
        if let Some((changed, present)) = changed {
            println!("    add-on objects whose resourceVersion changed: {changed} of {present}");
        }
        println!(
            "  management cluster (the agent's ServiceAccount): {}; of the reads, {} kubeconfig Secret GETs",
            p.mgmt.summary(),
            p.mgmt.kubeconfigs,
        );
        println!("    per cluster: {}", p.mgmt.per(n));
        println!("  AddonsReady: {ready}");
        println!(
            "  bench process peak RSS (VmHWM) so far: {:.1} MiB",
            support::vm(std::process::id(), "VmHWM:")
        );
    }
}

fn ready_text(m: &BTreeMap<String, usize>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} ×{v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How many of `before`'s keys changed version in `after`, and how many keys `after` has.
fn changed(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> (usize, usize) {
    let c = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(*v))
        .count();
    (c, after.len())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = support::env_number("CAPSTAN_BENCH_CLUSTERS", 100).max(1);
    let s = support::env_number("CAPSTAN_BENCH_SERVERS", 4).clamp(1, n);
    let started = Instant::now();
    let cp = ControlPlane::start()
        .await
        .expect("management control plane");
    let servers: Vec<ControlPlane> = futures::future::join_all((0..s).map(|_| {
        ControlPlane::start_with(StartOptions {
            install_crds: false,
            ..Default::default()
        })
    }))
    .await
    .into_iter()
    .map(|r| r.expect("a workload API server"))
    .collect();
    for w in &servers {
        capstan_harness::workload::ready_node(&w.client(), "node-1")
            .await
            .unwrap();
    }
    let admin = cp.client();
    let client = capstan::install::testing::agent_client(&cp).await;
    let agent = Agent::connect(client).await.expect("the agent connects");
    let mut tree = scaffold_addon_fleet(n);
    let fleet = load(&tree);
    let bed = Bed {
        cp,
        admin,
        servers,
        agent,
        n,
    };
    println!(
        "{n} workload clusters over {s} workload API servers, {} add-on objects each ({} in all); set up in {:.1} s",
        OBJECTS_PER_SET,
        n * OBJECTS_PER_SET,
        started.elapsed().as_secs_f64()
    );

    // Setup: the fleet's own objects, cold, with no kubeconfig (the add-ons wait); then a pass
    // that changes nothing and still reaches no cluster: the baseline without add-on work.
    let p = bed.pass(&fleet, "r1").await;
    assert!(!p.outcome.has_failures(), "setup pass failed");
    let ready = ready_text(&addons_ready(&bed.admin).await);
    bed.print(
        "setup pass (the fleet's cold apply, no kubeconfig yet)",
        &p,
        None,
        &ready,
    );
    let p = bed.pass(&fleet, "r1").await;
    let ready = ready_text(&addons_ready(&bed.admin).await);
    bed.print(
        "baseline pass (nothing changed, add-ons still waiting for a kubeconfig)",
        &p,
        None,
        &ready,
    );

    // Cluster API's kubeconfigs, each cluster's naming its server.
    futures::stream::iter(0..n)
        .map(|i| {
            let name = cluster_name(i);
            let kubeconfig = bed.servers[i % s].kubeconfig_yaml().to_string();
            let admin = bed.admin.clone();
            async move {
                capstan_harness::workload::kubeconfig_secret(
                    &admin,
                    &format!("team-{}", i % 20),
                    &name,
                    &kubeconfig,
                )
                .await
                .unwrap()
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;

    // Pass 1: every set applied, cold.
    let before = versions_of(&bed.servers).await;
    let p = bed.pass(&fleet, "r1").await;
    assert!(!p.outcome.has_failures(), "pass 1 failed");
    let after = versions_of(&bed.servers).await;
    let ready = ready_text(&addons_ready(&bed.admin).await);
    bed.print(
        "pass 1 (cold: every add-on set applied)",
        &p,
        Some(changed(&before, &after)),
        &ready,
    );

    // The Deployment controller's part: every add-on Deployment rolled out.
    futures::stream::iter(0..n)
        .map(|i| rolled_out(&bed.servers[i % s], cluster_name(i)))
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;

    // Pass 2: nothing changed.
    let before = versions_of(&bed.servers).await;
    let p = bed.pass(&fleet, "r1").await;
    assert!(!p.outcome.has_failures(), "pass 2 failed");
    let after = versions_of(&bed.servers).await;
    let ready = ready_text(&addons_ready(&bed.admin).await);
    bed.print(
        "pass 2 (nothing changed; Deployments rolled out)",
        &p,
        Some(changed(&before, &after)),
        &ready,
    );

    // Pass 3: one ConfigMap changed in every cluster's set.
    for i in 0..n {
        let name = cluster_name(i);
        tree.insert(
            addon_path(&name),
            ADDONS
                .replace("__NS__", &addon_namespace(&name))
                .replace("level: info", "level: debug"),
        );
    }
    let fleet = load(&tree);
    let before = versions_of(&bed.servers).await;
    let p = bed.pass(&fleet, "r2").await;
    assert!(!p.outcome.has_failures(), "pass 3 failed");
    let after = versions_of(&bed.servers).await;
    let ready = ready_text(&addons_ready(&bed.admin).await);
    let (moved, present) = changed(&before, &after);
    bed.print(
        "pass 3 (one ConfigMap changed in every set)",
        &p,
        Some((moved, present)),
        &ready,
    );

    // Pass 4: nothing changed again (the steady state: the sets applied and healthy, the status
    // recorded at this revision).
    let before = versions_of(&bed.servers).await;
    let p = bed.pass(&fleet, "r2").await;
    assert!(!p.outcome.has_failures(), "pass 4 failed");
    let after = versions_of(&bed.servers).await;
    let ready = ready_text(&addons_ready(&bed.admin).await);
    bed.print(
        "pass 4 (nothing changed again)",
        &p,
        Some(changed(&before, &after)),
        &ready,
    );

    // Correctness: every server holds its clusters' two ConfigMaps, labelled, the changed one
    // changed; every set whole.
    let mut total = 0;
    for (si, w) in bed.servers.iter().enumerate() {
        let mine = (0..n).filter(|i| i % s == si).count();
        let cms: Api<ConfigMap> = Api::all(w.client());
        let listed = cms
            .list(&ListParams::default().labels(ADDON_LABEL))
            .await
            .unwrap();
        assert_eq!(
            listed.items.len(),
            mine * 2,
            "server {si}: {} add-on ConfigMaps, {mine} clusters",
            listed.items.len()
        );
        for cm in &listed.items {
            let ns = cm.namespace().unwrap_or_default();
            let owner = cm.labels().get(ADDON_LABEL).cloned().unwrap_or_default();
            assert_eq!(ns, addon_namespace(&owner), "{ns}/{}", cm.name_any());
            if cm.name_any() == "settings" {
                assert_eq!(
                    cm.data
                        .as_ref()
                        .and_then(|d| d.get("level"))
                        .map(String::as_str),
                    Some("debug"),
                    "{ns}/settings not changed"
                );
            }
        }
        total += listed.items.len();
    }
    assert_eq!(total, n * 2);
    assert_eq!(present, n * OBJECTS_PER_SET, "every set whole");
    assert_eq!(moved, n, "pass 3 changed exactly the N settings ConfigMaps");
    let rss = |pid: i32| support::vm(pid as u32, "VmHWM:");
    let workload_rss: Vec<String> = bed
        .servers
        .iter()
        .map(|w| format!("{:.0}", rss(w.pids().kube_apiserver.pid)))
        .collect();
    println!(
        "checked: {total} add-on ConfigMaps ({n} × 2) on {s} servers, every settings ConfigMap changed; peak RSS (VmHWM): bench process {:.1} MiB, workload kube-apiservers {} MiB, management kube-apiserver {:.0} MiB; whole run {:.1} s",
        support::vm(std::process::id(), "VmHWM:"),
        workload_rss.join(" / "),
        rss(bed.cp.pids().kube_apiserver.pid),
        started.elapsed().as_secs_f64()
    );
}
