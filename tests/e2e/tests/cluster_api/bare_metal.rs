//! A bare-metal (Tinkerbell) cluster's whole lifecycle through capstan's pass, against the real
//! Cluster API controllers (core, kubeadm bootstrap and control plane): created, upgraded (the
//! control plane before the workers, held until there is spare Hardware), deleted.
//!
//! CAPT, the Tinkerbell provider, builds from no module the Go proxy serves, and its machines
//! need PXE boot and a BMC, so its documented part is played on the API server, named as such
//! ([`super::stand_in`], with CAPD's in-memory backend as the servers' inside). What is CAPT's
//! own is the Hardware ([`HardwareClaim`]): a TinkerbellMachine takes a free Hardware of its
//! namespace that a required term of its `hardwareAffinity` selects, marks it with CAPT's owner
//! labels and records it in `spec.hardwareName`; on deletion it frees the Hardware.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use capstan_e2e::capi::*;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::stand_in::{Claim, Infra, StandIn, string_at};

const CLUSTER: &str = "w-bm";
const OWNER_NAMESPACE_LABEL: &str = "v1alpha1.tinkerbell.org/ownerNamespace";
const MACHINE_FINALIZER: &str = "tinkerbellmachine.infrastructure.cluster.x-k8s.io";
const CLUSTER_FINALIZER: &str = "tinkerbellcluster.infrastructure.cluster.x-k8s.io";

fn hardware_resource() -> kube::discovery::ApiResource {
    let mut ar = gvk_resource("tinkerbell.org", "v1alpha1", "Hardware");
    ar.plural = "hardware".into();
    ar
}

/// A Hardware of the namespace, labelled.
fn hardware(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "tinkerbell.org/v1alpha1",
        "kind": "Hardware",
        "metadata": {"name": name, "labels": labels},
        "spec": {"disks": [{"device": "/dev/sda"}]},
    })
}

static CAPT: Infra = Infra {
    name: "CAPT",
    version: "v1beta1",
    cluster_kind: "TinkerbellCluster",
    machine_kind: "TinkerbellMachine",
    cluster_finalizer: CLUSTER_FINALIZER,
    machine_finalizer: MACHINE_FINALIZER,
    address: "10.40.1.10",
};

/// CAPT's Hardware binding (see the module docs).
#[derive(Clone)]
struct HardwareClaim {
    ns: String,
    servers: Api<DynamicObject>,
    /// One binding at a time: two machines never take the same Hardware.
    binding: Arc<tokio::sync::Mutex<()>>,
}

impl Claim for HardwareClaim {
    async fn claim(&self, machines: Api<DynamicObject>, name: String) -> bool {
        loop {
            let Some(o) = machines
                .get_opt(&name)
                .await
                .unwrap()
                .filter(|o| o.metadata.deletion_timestamp.is_none())
            else {
                return false;
            };
            if !string_at(&o.data, "/spec/hardwareName").is_empty() {
                return true;
            }
            let one = self.binding.lock().await;
            let affinity = o.data.pointer("/spec/hardwareAffinity").cloned();
            let free = self
                .servers
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .find(|h| {
                    let labels: BTreeMap<String, String> =
                        h.metadata.labels.clone().unwrap_or_default();
                    !labels.contains_key(capstan_layout::hardware::OWNER_LABEL)
                        && affinity
                            .as_ref()
                            .is_some_and(|a| capstan_layout::hardware::affinity_selects(a, &labels))
                });
            let Some(free) = free else {
                drop(one);
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            let hw = free.metadata.name.clone().unwrap();
            let mark = json!({"metadata": {"labels": {
                capstan_layout::hardware::OWNER_LABEL: name,
                OWNER_NAMESPACE_LABEL: self.ns,
            }}});
            self.servers
                .patch(&hw, &PatchParams::default(), &Patch::Merge(mark))
                .await
                .unwrap();
            machines
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"hardwareName": hw}})),
                )
                .await
                .unwrap();
            return true;
        }
    }

    async fn free(&self, o: DynamicObject) {
        let hw = string_at(&o.data, "/spec/hardwareName");
        if hw.is_empty() {
            return;
        }
        let free = json!({"metadata": {"labels": {
            capstan_layout::hardware::OWNER_LABEL: null,
            OWNER_NAMESPACE_LABEL: null,
        }}});
        self.servers
            .patch(&hw, &PatchParams::default(), &Patch::Merge(free))
            .await
            .unwrap();
    }
}

/// The ManagedCluster's Ready reason ("" without one).
fn managed_ready_reason(cluster: &str) -> String {
    managed_cluster_json(cluster)
        .and_then(|v| {
            v["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                .map(|c| string_at(c, "/reason"))
        })
        .unwrap_or_default()
}

/// Hardware name → the TinkerbellMachine that owns it ("" when free), as kubectl reads them.
fn owners(ns: &str) -> BTreeMap<String, String> {
    kubectl_items(&["get", "hardware.tinkerbell.org", "-n", ns])
        .iter()
        .map(|h| {
            (
                string_at(h, "/metadata/name"),
                h["metadata"]["labels"][capstan_layout::hardware::OWNER_LABEL]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}

/// The workload's spec: one control-plane machine and one worker, each on Hardware labelled for
/// it and of its type.
fn bare_metal_spec(mgmt: &str, ns: &str, version: &str) -> String {
    let config = |name: &str, kind: &str| {
        format!(
            "---\napiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: TinkerbellMachineConfig\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  osFamily: ubuntu\n  hardwareAffinity:\n    required:\n      - labelSelector:\n          matchLabels:\n            cluster.x-k8s.io/cluster-name: {CLUSTER}\n            type: {kind}\n  users:\n    - name: ec2-user\n      sshAuthorizedKeys:\n        - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBAlf8UkQwwdm0/3owGGfFx0nralmWRxinY3cBBi24tm ops@example\n"
        )
    };
    format!(
        "apiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: Cluster\nmetadata:\n  name: {CLUSTER}\n  namespace: {ns}\nspec:\n  kubernetesVersion: \"{version}\"\n  managementCluster:\n    name: {mgmt}\n  datacenterRef:\n    kind: TinkerbellDatacenterConfig\n    name: {CLUSTER}\n  controlPlaneConfiguration:\n    count: 1\n    endpoint:\n      host: 10.40.0.10\n    machineGroupRef:\n      kind: TinkerbellMachineConfig\n      name: {CLUSTER}-cp\n  workerNodeGroupConfigurations:\n    - name: md-0\n      count: 1\n      machineGroupRef:\n        kind: TinkerbellMachineConfig\n        name: {CLUSTER}-workers\n  clusterNetwork:\n    pods:\n      cidrBlocks: [172.30.0.0/16]\n    services:\n      cidrBlocks: [10.120.0.0/16]\n---\napiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: TinkerbellDatacenterConfig\nmetadata:\n  name: {CLUSTER}\n  namespace: {ns}\nspec:\n  tinkerbellIP: 10.40.0.20\n  osImageURL: https://images.example.com/ubuntu-2204.gz\n{}{}",
        config(&format!("{CLUSTER}-cp"), "cp"),
        config(&format!("{CLUSTER}-workers"), "worker"),
    )
}

/// Created on its own Hardware (never another cluster's), upgraded only once there is a spare
/// for each group (the control plane's machines replaced before the workers', each new machine
/// on a spare, the old Hardware freed), then deleted: every machine gone, every Hardware free,
/// the inventory itself kept. Everything asserted from the API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_metal_cluster_is_created_upgraded_on_spare_hardware_and_deleted() {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs = cp.logs_on_failure("a_bare_metal_cluster");
    capstan_e2e::agent_logs();
    let mut repo = Repo::new("bm", &[]);
    let ns = repo.ns.clone();
    let file = repo.write_spec(CLUSTER, &bare_metal_spec(&repo.mgmt, &ns, "1.33"));
    let fleet = repo.fleet();
    assert!(!fleet.has_errors(), "{:?}", fleet.all_diagnostics());

    // The inventory, applied by an admin: a server of each type for the cluster, and one
    // labelled for another cluster.
    let admin = cp.client();
    let ns_obj: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .patch(&ns, &PatchParams::apply("test"), &Patch::Apply(&ns_obj))
        .await
        .unwrap();
    let servers: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), &ns, &hardware_resource());
    let add = |name: &str, cluster: &str, kind: &str| {
        let h: DynamicObject = serde_json::from_value(hardware(
            name,
            json!({"cluster.x-k8s.io/cluster-name": cluster, "type": kind}),
        ))
        .unwrap();
        let servers = servers.clone();
        async move {
            servers.create(&PostParams::default(), &h).await.unwrap();
        }
    };
    add("hw-cp-1", CLUSTER, "cp").await;
    add("hw-worker-1", CLUSTER, "worker").await;
    add("hw-foreign", "someone-else", "cp").await;
    let claim = HardwareClaim {
        ns: ns.clone(),
        servers: servers.clone(),
        binding: Default::default(),
    };
    let _capt = StandIn::start(cp, &ns, &CAPT, claim);
    let log = Arc::new(Log::default());
    let _watch = watch_machines(cp, &ns, log.clone());

    // Created: both machines Running, each on Hardware of its type; the foreign one untouched.
    repo.converge(Some(CLUSTER)).await;
    let machines = repo.machines(CLUSTER);
    assert_eq!(machines.len(), 2, "{machines:?}");
    assert!(all_running(&machines), "{machines:?}");
    let held = owners(&ns);
    assert_eq!(held["hw-foreign"], "", "{held:?}");
    assert!(
        !held["hw-cp-1"].is_empty() && !held["hw-worker-1"].is_empty(),
        "{held:?}"
    );
    assert_eq!(cluster_available(CLUSTER, &ns), "True");

    // 1.33 → 1.34 with no spare Hardware: held, waiting for Hardware, nothing rolled.
    std::fs::write(&file, bare_metal_spec(&repo.mgmt, &ns, "1.34")).unwrap();
    repo.revision += 1;
    let out = repo.pass(Some(CLUSTER)).await;
    assert_eq!(
        managed_ready_reason(CLUSTER),
        "WaitingForHardware",
        "{}\n{:#?}\n{:?}",
        summary(&out),
        out.clusters
            .iter()
            .flat_map(|c| &c.plan.entries)
            .filter(|e| e.action != capstan::plan::Action::Unchanged)
            .map(|e| format!("{} {} {:?}", e.action, e.object.subject(), e.reason))
            .collect::<Vec<_>>(),
        owners(&ns)
    );
    let kcp_version = shared_kubectl(&[
        "get",
        "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
        CLUSTER,
        "-n",
        &ns,
        "-o",
        "jsonpath={.spec.version}",
    ]);
    assert!(kcp_version.starts_with("v1.33"), "{kcp_version}");

    // A spare of each type: the upgrade goes out, control plane first.
    add("hw-cp-2", CLUSTER, "cp").await;
    add("hw-worker-2", CLUSTER, "worker").await;
    repo.revision -= 1; // the same revision, reconciled until it settles
    repo.converge(Some(CLUSTER)).await;
    let machines = repo.machines(CLUSTER);
    assert_eq!(machines.len(), 2, "{machines:?}");
    assert!(
        machines
            .iter()
            .all(|m| m.version.starts_with("v1.34") && m.phase == "Running"),
        "{machines:?}"
    );
    // The workers waited for the control plane.
    assert_before(
        &log,
        "deleted control-plane v1.33",
        &format!("added {CLUSTER}-md-0 v1.34"),
    );
    let held = owners(&ns);
    assert!(
        !held["hw-cp-2"].is_empty() && !held["hw-worker-2"].is_empty(),
        "new machines on the spares: {held:?}"
    );
    assert_eq!(held["hw-cp-1"], "", "{held:?}");
    assert_eq!(held["hw-worker-1"], "", "{held:?}");
    assert_eq!(held["hw-foreign"], "", "{held:?}");

    // Deleted: every machine gone, every Hardware free and still there.
    repo.tombstone(CLUSTER);
    repo.converge(Some(CLUSTER)).await;
    assert!(repo.machines(CLUSTER).is_empty());
    let held = owners(&ns);
    assert_eq!(held.len(), 5, "{held:?}");
    assert!(held.values().all(String::is_empty), "{held:?}");
}
