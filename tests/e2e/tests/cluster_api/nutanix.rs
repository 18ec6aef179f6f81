//! A Nutanix cluster's whole lifecycle through capstan's pass, against the real Cluster API
//! controllers (core, kubeadm bootstrap and control plane): created, upgraded (the control plane
//! before the workers), deleted.
//!
//! CAPX, the Nutanix provider, builds from Go modules, but everything it does goes through
//! Prism Central (the VM is created, powered on and found by its UUID there), which cannot exist
//! here. So its documented part is played on the API server, named as such
//! ([`super::stand_in`]): a NutanixCluster owned by its Cluster is made ready, a NutanixMachine
//! owned by a Machine with bootstrap data gets a server (a DevMachine of CAPD's in-memory
//! backend, as the VM's inside) whose provider ID it reports, and both are cleaned up on
//! deletion. CAPX's CRDs admit everything capstan renders; what the stand-in reads is only what
//! the real controllers wrote.

use std::sync::Arc;

use capstan_e2e::capi::*;

use super::stand_in::{Infra, Nothing, StandIn, string_at};

const CLUSTER: &str = "w-nx";

static CAPX: Infra = Infra {
    name: "CAPX",
    version: "v1beta1",
    cluster_kind: "NutanixCluster",
    machine_kind: "NutanixMachine",
    cluster_finalizer: "nutanixcluster.infrastructure.cluster.x-k8s.io",
    machine_finalizer: "nutanixmachine.infrastructure.cluster.x-k8s.io",
    address: "10.30.1.10",
};

/// The workload's spec: one control-plane machine and one worker, on an image of `version`.
fn nutanix_spec(mgmt: &str, ns: &str, version: &str) -> String {
    let machine = |name: &str| {
        format!(
            "---\napiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: NutanixMachineConfig\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  osFamily: ubuntu\n  vcpuSockets: 2\n  vcpusPerSocket: 1\n  memorySize: 8Gi\n  systemDiskSize: 40Gi\n  image: {{type: name, name: ubuntu-2204-kube-v{version}}}\n  cluster: {{type: name, name: pe1}}\n  subnet: {{type: name, name: vlan-100}}\n  users:\n    - name: eksa\n      sshAuthorizedKeys:\n        - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBAlf8UkQwwdm0/3owGGfFx0nralmWRxinY3cBBi24tm ops@example\n"
        )
    };
    format!(
        "apiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: Cluster\nmetadata:\n  name: {CLUSTER}\n  namespace: {ns}\nspec:\n  kubernetesVersion: \"{version}\"\n  managementCluster:\n    name: {mgmt}\n  datacenterRef:\n    kind: NutanixDatacenterConfig\n    name: {CLUSTER}\n  controlPlaneConfiguration:\n    count: 1\n    endpoint:\n      host: 10.30.0.10\n    machineGroupRef:\n      kind: NutanixMachineConfig\n      name: {CLUSTER}-cp\n  workerNodeGroupConfigurations:\n    - name: md-0\n      count: 1\n      machineGroupRef:\n        kind: NutanixMachineConfig\n        name: {CLUSTER}-workers\n  clusterNetwork:\n    pods:\n      cidrBlocks: [172.31.0.0/16]\n    services:\n      cidrBlocks: [10.121.0.0/16]\n---\napiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: NutanixDatacenterConfig\nmetadata:\n  name: {CLUSTER}\n  namespace: {ns}\nspec:\n  endpoint: prism.example.internal\n  port: 9440\n  credentialRef:\n    kind: Secret\n    name: {CLUSTER}-nutanix-credentials\n{}{}",
        machine(&format!("{CLUSTER}-cp")),
        machine(&format!("{CLUSTER}-workers")),
    )
}

/// NutanixMachine name → the provider ID it reports, as kubectl reads them.
fn provider_ids(ns: &str) -> Vec<(String, String)> {
    kubectl_items(&[
        "get",
        "nutanixmachines.infrastructure.cluster.x-k8s.io",
        "-n",
        ns,
    ])
    .iter()
    .map(|m| {
        (
            string_at(m, "/metadata/name"),
            string_at(m, "/spec/providerID"),
        )
    })
    .collect()
}

/// Created (both machines Running, each NutanixMachine reporting its server's provider ID, the
/// Cluster Available), upgraded 1.33 → 1.34 (every machine replaced by one of the new version and
/// image, the control plane's before the workers'), then deleted: every Machine and NutanixMachine
/// gone. Everything asserted from the API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nutanix_cluster_is_created_upgraded_and_deleted() {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs = cp.logs_on_failure("a_nutanix_cluster");
    capstan_e2e::agent_logs();
    let mut repo = Repo::new("nx", &[]);
    let ns = repo.ns.clone();
    let file = repo.write_spec(CLUSTER, &nutanix_spec(&repo.mgmt, &ns, "1.33"));
    let fleet = repo.fleet();
    assert!(!fleet.has_errors(), "{:?}", fleet.all_diagnostics());
    let _capx = StandIn::start(cp, &ns, &CAPX, Nothing);
    let log = Arc::new(Log::default());
    let _watch = watch_machines(cp, &ns, log.clone());

    // Created.
    repo.converge(Some(CLUSTER)).await;
    let machines = repo.machines(CLUSTER);
    assert_eq!(machines.len(), 2, "{machines:?}");
    assert!(all_running(&machines), "{machines:?}");
    let ids = provider_ids(&ns);
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids.iter().all(|(_, id)| !id.is_empty()), "{ids:?}");
    assert_eq!(cluster_available(CLUSTER, &ns), "True");
    let endpoint = shared_kubectl(&[
        "get",
        "nutanixclusters.infrastructure.cluster.x-k8s.io",
        CLUSTER,
        "-n",
        &ns,
        "-o",
        "jsonpath={.spec.controlPlaneEndpoint.host}",
    ]);
    assert_eq!(endpoint, "10.30.0.10");

    // Upgraded: the control plane first.
    std::fs::write(&file, nutanix_spec(&repo.mgmt, &ns, "1.34")).unwrap();
    repo.revision += 1;
    repo.converge(Some(CLUSTER)).await;
    let machines = repo.machines(CLUSTER);
    assert_eq!(machines.len(), 2, "{machines:?}");
    assert!(
        machines
            .iter()
            .all(|m| m.version.starts_with("v1.34") && m.phase == "Running"),
        "{machines:?}"
    );
    let images: Vec<String> = kubectl_items(&[
        "get",
        "nutanixmachines.infrastructure.cluster.x-k8s.io",
        "-n",
        &ns,
    ])
    .iter()
    .map(|m| string_at(m, "/spec/image/name"))
    .collect();
    assert!(
        images.iter().all(|i| i == "ubuntu-2204-kube-v1.34"),
        "{images:?}"
    );
    // The workers waited for the control plane.
    assert_before(
        &log,
        "deleted control-plane v1.33",
        &format!("added {CLUSTER}-md-0 v1.34"),
    );

    // Deleted.
    repo.tombstone(CLUSTER);
    repo.converge(Some(CLUSTER)).await;
    assert!(repo.machines(CLUSTER).is_empty());
    assert!(provider_ids(&ns).is_empty(), "{:?}", provider_ids(&ns));
}
