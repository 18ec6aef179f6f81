//! Add-ons applied inside workload clusters: the management cluster is the shared test bed, and
//! each workload cluster's API server is a second real kube-apiserver + etcd the test starts.
//! The test plays Cluster API's part of writing `<cluster>-kubeconfig` (what CAPI's cluster
//! controller does once the control plane is up: a Secret of type `cluster.x-k8s.io/secret`,
//! labelled for the cluster, key `value`), the kubelet's part of reporting a Node Ready, and the
//! Deployment controller's part of reporting a rollout — there is no kubelet or scheduler
//! here, and CAPD's in-memory backend serves only what Cluster API itself asks of a workload
//! API server (no Deployments, no CRDs), so it cannot stand in for a workload cluster's inside.
//! Everything is asserted from the API servers with kubectl.

use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use capstan::reconcile::{Options, Outcome, reconcile};
use capstan_e2e::FleetDir;
use capstan_harness::run::{kubectl, kubectl_json};
use capstan_harness::{ControlPlane, StartOptions};
use capstan_layout::scaffold::ClusterRequest;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

fn exists(kubeconfig: &Path, args: &[&str]) -> bool {
    let (ok, text) = kubectl(kubeconfig, args);
    assert!(
        ok || text.contains("NotFound") || text.contains("doesn't have a resource type"),
        "kubectl {args:?}: {text}"
    );
    ok
}

/// What an agent's watches reported: (kind, cluster) pairs, and a wake-up for each.
#[derive(Default)]
struct Heard(Mutex<Vec<(String, String)>>, Notify);

impl Heard {
    /// Waits (a minute at most) until `wanted` has been reported.
    async fn wait_for(&self, wanted: &(String, String), or: &str) {
        tokio::time::timeout(std::time::Duration::from_secs(60), async {
            while !self.0.lock().unwrap().contains(wanted) {
                self.1.notified().await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{or}: {:?}", self.0.lock().unwrap()));
    }
}

pub(super) struct Bed {
    files: FleetDir,
    pub(super) mgmt: String,
    pub(super) ns: String,
    /// The Secret of the SOPS identities (`--sops-age-secret`); None: the default.
    pub(super) sops: Option<(String, String)>,
    /// Reconcile as the account `capstan install --allow` makes (the test bed's allowed kinds
    /// granted), not the agent's own.
    pub(super) allowing: bool,
}

impl Bed {
    pub(super) fn new(tag: &str, workloads: &[&str]) -> Bed {
        let mgmt = format!("m-{tag}");
        let ns = format!("t-{tag}");
        let req = |name: &str, mgmt: Option<&str>, i: u8| ClusterRequest {
            name: name.into(),
            management: mgmt.map(str::to_string),
            provider: "docker".into(),
            namespace: Some(ns.clone()),
            kubernetes_version: Some("1.33".into()),
            pod_cidr: Some(format!("172.{}.0.0/16", 16 + i)),
            service_cidr: Some(format!("10.{}.0.0/16", 112 + i)),
            ..Default::default()
        };
        let mut files = FleetDir::new(ClusterRequest {
            pod_cidr: Some("192.168.0.0/16".into()),
            service_cidr: Some("10.96.0.0/12".into()),
            ..req(&mgmt, None, 0)
        });
        for (i, w) in workloads.iter().enumerate() {
            files.add(req(w, Some(&mgmt), i as u8 + 1));
        }
        Bed {
            files,
            mgmt,
            ns,
            sops: None,
            allowing: false,
        }
    }

    /// The fleet repository's root.
    pub(super) fn root(&self) -> &std::path::Path {
        &self.files.root
    }

    pub(super) fn write(&self, rel: &str, text: &str) {
        let path = self.files.root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    pub(super) fn remove(&self, rel: &str) {
        std::fs::remove_file(self.files.root.join(rel)).unwrap();
    }

    fn addon(&self, cluster: &str, file: &str, text: &str) {
        self.write(
            &format!(
                "clusters/{}/workload-clusters/{cluster}/addons/{file}",
                self.mgmt
            ),
            text,
        );
    }

    fn opts(&self, revision: &str) -> Options {
        Options {
            revision: revision.into(),
            management: Some(self.mgmt.clone()),
            sops_age_secret: self.sops.clone(),
            ..Default::default()
        }
    }

    pub(super) async fn reconcile(&self, revision: &str) -> Outcome {
        let cp = capstan_harness::shared().await;
        let fleet = self.files.fleet();
        assert!(!fleet.has_errors(), "{:?}", fleet.all_diagnostics());
        let opts = self.opts(revision);
        let client = if self.allowing {
            capstan::install::testing::allowing_agent_client(cp).await
        } else {
            capstan::install::testing::agent_client(cp).await
        };
        reconcile(&client, &fleet, &opts).await.unwrap()
    }

    pub(super) async fn plan(&self, revision: &str) -> Outcome {
        let cp = capstan_harness::shared().await;
        let opts = self.opts(revision);
        let client = capstan::install::testing::agent_client(cp).await;
        capstan::reconcile::plan(&client, &self.files.fleet(), &opts)
            .await
            .unwrap()
    }

    /// The ManagedCluster's AddonsReady condition as kubectl reads it: (status, reason, message).
    fn addons_ready(&self, cluster: &str) -> (String, String, String) {
        let c = managed_cluster_conditions(cluster)
            .into_iter()
            .find(|c| c.0 == "AddonsReady")
            .unwrap_or_else(|| {
                panic!(
                    "no AddonsReady condition: {:?}",
                    managed_cluster_conditions(cluster)
                )
            });
        (c.1, c.2, c.3)
    }

    /// Plays Cluster API's part: the workload cluster's kubeconfig Secret
    /// ([`capstan_harness::workload::kubeconfig_secret`]).
    pub(super) async fn kubeconfig_secret(&self, cluster: &str, kubeconfig: &str) {
        let cp = capstan_harness::shared().await;
        capstan_harness::workload::kubeconfig_secret(&cp.client(), &self.ns, cluster, kubeconfig)
            .await
            .unwrap();
    }
}

pub(super) async fn workload_server() -> ControlPlane {
    ControlPlane::start_with(StartOptions {
        install_crds: false,
        ..Default::default()
    })
    .await
    .expect("a workload cluster's API server")
}

/// Plays the kubelet's part for `node-1` of workload `w` ([`capstan_harness::workload::ready_node`]).
pub(super) async fn ready_node_1(w: &ControlPlane) {
    capstan_harness::workload::ready_node(&w.client(), "node-1")
        .await
        .unwrap();
}

const ADDONS: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: platform
data:
  level: info
---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: w1
  namespace: platform
spec:
  size: 3
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: ingress
  namespace: platform
spec:
  replicas: 1
  selector: {matchLabels: {app: ingress}}
  template:
    metadata: {labels: {app: ingress}}
    spec:
      containers: [{name: ingress, image: registry.k8s.io/pause:3.10}]
---
apiVersion: v1
kind: Namespace
metadata:
  name: platform
";

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_ons_wait_for_the_cluster_then_go_in_in_order_follow_the_repository_and_never_touch_the_management_cluster()
 {
    let cp = capstan_harness::shared().await;
    let w = workload_server().await;
    let bed = Bed::new("addons", &["w-addons"]);
    let c = "w-addons";
    bed.addon(c, "platform.yaml", ADDONS);
    bed.addon(c, "crds/widgets.yaml", CRD);
    let wk = w.kubeconfig_path();

    // No kubeconfig from Cluster API yet: the add-ons wait, and say for what.
    bed.reconcile("r1").await;
    let (status, reason, message) = bed.addons_ready(c);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "WaitingForCluster"),
        "{message}"
    );
    assert!(message.contains("kubeconfig"), "{message}");

    // The kubeconfig, but no Ready node (the CNI is not up): still waiting, nothing applied.
    bed.kubeconfig_secret(c, w.kubeconfig_yaml()).await;
    bed.reconcile("r1").await;
    let (_, reason, message) = bed.addons_ready(c);
    assert_eq!(reason, "WaitingForCluster", "{message}");
    assert!(message.contains("0 nodes, none Ready"), "{message}");
    assert!(!exists(wk, &["get", "namespace", "platform"]));

    // A Ready node: everything goes in, CRD and Namespace before what needs them.
    ready_node_1(&w).await;
    let mark = w.audit().mark();
    bed.reconcile("r1").await;
    let (_, reason, message) = bed.addons_ready(c);
    assert_ne!(reason, "AddonsFailed", "{message}");
    for (kind, name) in [("namespace", "platform"), ("crd", "widgets.example.com")] {
        assert!(exists(wk, &["get", kind, name]), "{kind}/{name}");
    }
    let cm = kubectl_json(wk, &["-n", "platform", "get", "configmap", "settings"]);
    assert_eq!(cm["data"]["level"], "info");
    assert_eq!(cm["metadata"]["labels"]["capstan.dev/addon-of"], c);
    let widget = kubectl_json(wk, &["-n", "platform", "get", "widgets.example.com", "w1"]);
    assert_eq!(widget["spec"]["size"], 3);
    w.audit()
        .sync(&w.client(), std::time::Duration::from_secs(10))
        .await
        .unwrap();
    let writes: Vec<String> = w
        .audit()
        .events_since(mark)
        .unwrap()
        .into_iter()
        .filter(|e| {
            e.is_write()
                && e.field_manager() == Some("capstan")
                && !e.request_uri.contains("dryRun")
        })
        .filter_map(|e| e.resource().map(str::to_string))
        .collect();
    let first = |r: &str| {
        writes
            .iter()
            .position(|w| w == r)
            .unwrap_or_else(|| panic!("{r} not written: {writes:?}"))
    };
    assert!(
        first("customresourcedefinitions") < first("widgets"),
        "{writes:?}"
    );
    assert!(first("namespaces") < first("configmaps"), "{writes:?}");
    assert!(first("namespaces") < first("deployments"), "{writes:?}");

    // Nothing of it on the management cluster.
    let mk = cp.kubeconfig_path();
    assert!(!exists(mk, &["get", "namespace", "platform"]));
    assert!(!exists(mk, &["get", "crd", "widgets.example.com"]));

    // The Deployment has not rolled out (no controller here): the add-ons say which waits.
    let (status, reason, message) = bed.addons_ready(c);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "AddonsProgressing"),
        "{message}"
    );
    assert!(message.contains("Deployment/platform/ingress"), "{message}");
    // Playing the Deployment controller's part: the rollout reported done.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(w.client(), "platform");
    let generation = deployments
        .get("ingress")
        .await
        .unwrap()
        .metadata
        .generation
        .unwrap();
    deployments
        .patch_status(
            "ingress",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"observedGeneration": generation, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1}})),
        )
        .await
        .unwrap();
    bed.reconcile("r1").await;
    let (status, reason, message) = bed.addons_ready(c);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "Available"),
        "{message}"
    );

    // A change in the repository goes in.
    bed.addon(
        c,
        "platform.yaml",
        &ADDONS.replace("level: info", "level: debug"),
    );
    // `capstan plan` shows it first, against the record of what went in.
    let planned = bed.plan("r2").await;
    let entries: Vec<String> = planned
        .clusters
        .iter()
        .find(|o| o.name == c)
        .unwrap()
        .plan
        .entries
        .iter()
        .filter(|e| e.reason.as_deref() == Some(capstan::plan::addons::INSIDE))
        .map(|e| format!("{:?} {}", e.action, e.object.subject()))
        .collect();
    assert_eq!(entries, ["Update ConfigMap/platform/settings"]);
    bed.reconcile("r2").await;
    let cm = kubectl_json(wk, &["-n", "platform", "get", "configmap", "settings"]);
    assert_eq!(cm["data"]["level"], "debug");

    // Drift inside the cluster: an agent with watches (as the daemon runs it) watches the
    // cluster's add-ons, hears of the change made inside it, and its next pass puts it back.
    let heard: Arc<Heard> = Default::default();
    let ear = heard.clone();
    let agent =
        capstan::reconcile::Agent::connect(capstan::install::testing::agent_client(cp).await)
            .await
            .unwrap()
            .with_watches(Arc::new(move |kind: &str, cluster: Option<&str>| {
                if let Some(cluster) = cluster {
                    ear.0
                        .lock()
                        .unwrap()
                        .push((kind.to_string(), cluster.to_string()));
                    ear.1.notify_one();
                }
            }));
    let opts = bed.opts("r2");
    agent.reconcile(&bed.files.fleet(), &opts).await.unwrap();
    let wanted = ("ConfigMap".to_string(), c.to_string());
    // The watch reports its first listing (a change made before it listened shows only
    // there); from then on it hears changes as they are made.
    heard.wait_for(&wanted, "no listing reported").await;
    heard.0.lock().unwrap().clear();
    let (ok, text) = kubectl(
        wk,
        &[
            "-n",
            "platform",
            "patch",
            "configmap",
            "settings",
            "--type=merge",
            "-p",
            r#"{"data":{"level":"trace"}}"#,
        ],
    );
    assert!(ok, "{text}");
    heard
        .wait_for(&wanted, "no change heard from inside the cluster")
        .await;
    agent.reconcile(&bed.files.fleet(), &opts).await.unwrap();
    let cm = kubectl_json(wk, &["-n", "platform", "get", "configmap", "settings"]);
    assert_eq!(cm["data"]["level"], "debug");
    drop(agent);

    // What leaves the repository is pruned from the cluster; what stays, stays.
    bed.remove(&format!(
        "clusters/{}/workload-clusters/{c}/addons/crds/widgets.yaml",
        bed.mgmt
    ));
    bed.addon(c, "platform.yaml", &ADDONS.replace("---\napiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n  namespace: platform\nspec:\n  size: 3\n", ""));
    bed.reconcile("r3").await;
    assert!(!exists(wk, &["get", "crd", "widgets.example.com"]));
    assert!(exists(
        wk,
        &["-n", "platform", "get", "configmap", "settings"]
    ));
    let cp_mc = kubectl_json(
        mk,
        &[
            "-n",
            "capstan-system",
            "get",
            "managedclusters.capstan.dev",
            c,
        ],
    );
    let inventory: Vec<String> = cp_mc["status"]["addons"]["inventory"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}/{}",
                r["kind"].as_str().unwrap(),
                r["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        inventory,
        [
            "Namespace/platform",
            "ConfigMap/settings",
            "Deployment/ingress"
        ]
    );

    // Unreachable (Cluster API's kubeconfig now names a server that does not answer): the
    // add-ons wait with the reason; then it answers again and they are Ready.
    let dead = w
        .kubeconfig_yaml()
        .replace(w.server_url(), "https://127.0.0.1:1");
    bed.kubeconfig_secret(c, &dead).await;
    bed.reconcile("r3").await;
    let (_, reason, message) = bed.addons_ready(c);
    assert_eq!(reason, "WaitingForCluster", "{message}");
    assert!(message.contains("API server"), "{message}");
    bed.kubeconfig_secret(c, w.kubeconfig_yaml()).await;
    bed.reconcile("r3").await;
    let (status, _, message) = bed.addons_ready(c);
    assert_eq!(status, "True", "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_sets_follow_their_selector_a_broken_add_on_fails_only_its_cluster_and_a_kubeconfig_that_runs_a_command_is_refused()
 {
    let a = workload_server().await;
    let b = workload_server().await;
    let bed = Bed::new("shared", &["wa-shared", "wb-shared", "wc-shared"]);
    // wa is labelled tier: prod; the "prod" set goes only there, the "base" set everywhere.
    bed.files.edit(
        "wa-shared",
        "  name: \"wa-shared\"\n",
        "  name: \"wa-shared\"\n  labels:\n    tier: prod\n",
    );
    let root = format!("clusters/{}", bed.mgmt);
    bed.write(
        &format!("{root}/addons/base/ns.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: base\n",
    );
    bed.write(
        &format!("{root}/addons/prod/quota.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: prod-only\n  namespace: base\n",
    );
    bed.write(
        &format!("{root}/fleet.yaml"),
        "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  addons:\n  - name: prod\n    matchLabels: {tier: prod}\n",
    );
    // wb's own add-on is one its API server refuses (a negative replica count).
    bed.addon("wb-shared", "bad.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: bad\n  namespace: base\nspec:\n  replicas: -1\n  selector: {matchLabels: {app: bad}}\n  template:\n    metadata: {labels: {app: bad}}\n    spec:\n      containers: [{name: bad, image: registry.k8s.io/pause:3.10}]\n");
    ready_node_1(&a).await;
    ready_node_1(&b).await;
    // The first pass creates the clusters' namespace (where Cluster API writes kubeconfigs).
    bed.reconcile("r1").await;
    bed.kubeconfig_secret("wa-shared", a.kubeconfig_yaml())
        .await;
    bed.kubeconfig_secret("wb-shared", b.kubeconfig_yaml())
        .await;
    // wc's kubeconfig would run a command in the agent (an exec plugin) if it were used.
    let marker = std::env::temp_dir().join(format!("capstan-exec-ran-{}", std::process::id()));
    let exec = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: '{}'}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [-c, 'touch {}']\n",
        a.server_url(),
        marker.display()
    );
    bed.kubeconfig_secret("wc-shared", &exec).await;

    bed.reconcile("r1").await;
    let (ak, bk) = (a.kubeconfig_path(), b.kubeconfig_path());
    // wa: both sets.
    assert!(exists(ak, &["get", "namespace", "base"]));
    assert!(exists(ak, &["-n", "base", "get", "configmap", "prod-only"]));
    assert_eq!(bed.addons_ready("wa-shared").0, "True");
    // wb: the base set, not prod's; its own broken add-on fails its add-ons, named, and is not
    // applied.
    assert!(exists(bk, &["get", "namespace", "base"]));
    assert!(!exists(
        bk,
        &["-n", "base", "get", "configmap", "prod-only"]
    ));
    assert!(!exists(bk, &["-n", "base", "get", "deployment", "bad"]));
    let (status, reason, message) = bed.addons_ready("wb-shared");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "AddonsFailed"),
        "{message}"
    );
    assert!(
        message.contains("Deployment/base/bad") && message.contains("bad.yaml:4"),
        "{message}"
    );
    // wc: refused before anything ran.
    let (status, reason, message) = bed.addons_ready("wc-shared");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "AddonsFailed"),
        "{message}"
    );
    assert!(message.contains("exec plugin"), "{message}");
    assert!(!marker.exists(), "the exec plugin ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_leader_fence_is_shut_writes_nothing_into_a_workload_cluster() {
    let cp = capstan_harness::shared().await;
    let w = workload_server().await;
    let bed = Bed::new("fenced", &["w-fenced"]);
    let c = "w-fenced";
    bed.addon(
        c,
        "ns.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: fenced\n",
    );
    bed.reconcile("r1").await;
    ready_node_1(&w).await;
    bed.kubeconfig_secret(c, w.kubeconfig_yaml()).await;
    // A replica past its renew deadline (its fence shut, as the election leaves it): the
    // workload cluster's client is behind the same fence as the management cluster's.
    let agent =
        capstan::reconcile::Agent::connect(capstan::install::testing::agent_client(cp).await)
            .await
            .unwrap()
            .with_fence(capstan::k8s::fence::Fence::shut());
    agent
        .reconcile(&bed.files.fleet(), &bed.opts("r1"))
        .await
        .unwrap();
    let (status, reason, message) = bed.addons_ready(c);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "AddonsFailed"),
        "{message}"
    );
    assert!(message.contains("leader Lease"), "{message}");
    assert!(!exists(
        w.kubeconfig_path(),
        &["get", "namespace", "fenced"]
    ));
    // The leader (no fence shut) applies it.
    bed.reconcile("r1").await;
    assert!(exists(w.kubeconfig_path(), &["get", "namespace", "fenced"]));
}

/// The admin's Secret of age identities on the management cluster (`capstan-system/<name>`,
/// key `fleet.agekey`), replaced if present.
/// A ManagedCluster's conditions as kubectl reads them: (type, status, reason, message).
pub(super) fn managed_cluster_conditions(cluster: &str) -> Vec<(String, String, String, String)> {
    let cp = capstan_harness::shared_if_started().expect("started");
    let mc = kubectl_json(
        cp.kubeconfig_path(),
        &[
            "-n",
            "capstan-system",
            "get",
            "managedclusters.capstan.dev",
            cluster,
        ],
    );
    mc["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
            (s("type"), s("status"), s("reason"), s("message"))
        })
        .collect()
}

pub(super) async fn identities_secret(name: &str, identity: &age::x25519::Identity) {
    use age::secrecy::ExposeSecret;
    use k8s_openapi::api::core::v1::Secret;
    let cp = capstan_harness::shared().await;
    let api: Api<Secret> = Api::namespaced(cp.client(), "capstan-system");
    let s: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": "capstan-system"},
        "stringData": {"fleet.agekey": format!("# the fleet's key\n{}\n", identity.to_string().expose_secret())}
    }))
    .unwrap();
    api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&s))
        .await
        .unwrap();
}

/// An add-on Secret kept in Git encrypted with SOPS (by the real `sops`) is decrypted in memory
/// and applied inside its cluster; nothing outside the workload cluster ever holds the value (the
/// ManagedCluster's status and the plan carry neither it nor its base64); a file changed after
/// encryption, or the identity replaced by one the file is not encrypted for, fails the add-ons
/// naming the file, and what is inside the cluster stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_add_on_is_decrypted_in_memory_and_applied_only_inside_its_cluster() {
    let cp = capstan_harness::shared().await;
    let w = workload_server().await;
    let mut bed = Bed::new("sops", &["ws-sops"]);
    bed.sops = Some(("capstan-system".into(), "sops-age-addons-test".into()));
    let fleet_key = age::x25519::Identity::generate();
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("keys.txt");
    let recipient = fleet_key.to_public().to_string();
    bed.write(
        &format!("clusters/{}/fleet.yaml", bed.mgmt),
        &format!("apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  sops:\n    ageRecipients: [{recipient}]\n"),
    );
    let plain = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  namespace: default\n  annotations:\n    capstan.dev/encrypted-for: ws-sops\ntype: Opaque\nstringData:\n  password: hunter2\n";
    let sealed = capstan_e2e::sops::encrypt(
        keys.path(),
        &key_file,
        "db.yaml",
        plain,
        &capstan_e2e::sops::data_only(&recipient),
    );
    assert!(!sealed.contains("hunter2"));
    bed.addon("ws-sops", "db.sops.yaml", &sealed);
    ready_node_1(&w).await;
    // The first pass creates the namespaces (capstan's, where the identities' Secret goes, and
    // the clusters', where Cluster API writes kubeconfigs).
    bed.reconcile("r1").await;
    identities_secret("sops-age-addons-test", &fleet_key).await;
    bed.kubeconfig_secret("ws-sops", w.kubeconfig_yaml()).await;
    let planned = bed.plan("r1").await;
    let plan_text = format!("{planned:?}");
    bed.reconcile("r1").await;

    let wk = w.kubeconfig_path();
    let got = kubectl_json(wk, &["-n", "default", "get", "secret", "db"]);
    assert_eq!(got["data"]["password"], "aHVudGVyMg==", "{got}");
    assert_eq!(bed.addons_ready("ws-sops").0, "True");
    // Nothing on the management cluster, nothing in the plan, holds the value.
    let status = kubectl(
        cp.kubeconfig_path(),
        &[
            "-n",
            "capstan-system",
            "get",
            "managedclusters.capstan.dev",
            "ws-sops",
            "-o",
            "json",
        ],
    )
    .1;
    assert!(
        status.contains("Secret/default/db") || status.contains("\"db\""),
        "{status}"
    );
    for text in [&status, &plan_text] {
        assert!(
            !text.contains("hunter2") && !text.contains("aHVudGVyMg"),
            "{text}"
        );
    }
    assert!(!exists(
        cp.kubeconfig_path(),
        &["-n", "default", "get", "secret", "db"]
    ));

    // Keys rotated: the same Secret encrypted again for the fleet's key and a new one (a new
    // data key, every ciphertext new), then the agent given only the new key. The file changed,
    // the Secret did not: nothing is written inside the cluster.
    let version = |wk: &Path| {
        kubectl_json(wk, &["-n", "default", "get", "secret", "db"])["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let before = version(wk);
    let new_key = age::x25519::Identity::generate();
    let both = format!("{recipient},{}", new_key.to_public());
    let rotated = capstan_e2e::sops::encrypt(
        keys.path(),
        &key_file,
        "db2.yaml",
        plain,
        &capstan_e2e::sops::data_only(&both),
    );
    assert_ne!(rotated, sealed);
    bed.addon("ws-sops", "db.sops.yaml", &rotated);
    identities_secret("sops-age-addons-test", &new_key).await;
    bed.reconcile("r1b").await;
    assert_eq!(bed.addons_ready("ws-sops").0, "True");
    assert_eq!(
        version(wk),
        before,
        "a re-encryption rewrote the Secret inside the cluster"
    );
    identities_secret("sops-age-addons-test", &fleet_key).await;

    // Changed after encryption: the MAC refuses it; the cluster keeps what it had.
    bed.addon(
        "ws-sops",
        "db.sops.yaml",
        &sealed.replace("namespace: default", "namespace: kube-public"),
    );
    bed.reconcile("r2").await;
    let (status, reason, message) = bed.addons_ready("ws-sops");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "AddonsFailed"),
        "{message}"
    );
    assert!(
        message.contains("db.sops.yaml") && message.contains("MAC"),
        "{message}"
    );
    assert!(!exists(wk, &["-n", "kube-public", "get", "secret", "db"]));
    assert_eq!(
        kubectl_json(wk, &["-n", "default", "get", "secret", "db"])["data"]["password"],
        "aHVudGVyMg=="
    );

    // The file back, the identity replaced by another fleet's: nothing decrypts.
    bed.addon("ws-sops", "db.sops.yaml", &sealed);
    identities_secret("sops-age-addons-test", &age::x25519::Identity::generate()).await;
    bed.reconcile("r3").await;
    let (status, _, message) = bed.addons_ready("ws-sops");
    assert_eq!(status, "False", "{message}");
    assert!(
        message.contains("no key capstan holds decrypts") && message.contains(&recipient),
        "{message}"
    );
    assert!(!message.contains("hunter2"), "{message}");
}
