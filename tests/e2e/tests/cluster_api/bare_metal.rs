//! A bare-metal (Tinkerbell) cluster's whole lifecycle through capstan's pass, against the real
//! Cluster API controllers (core, kubeadm bootstrap and control plane): created, upgraded (the
//! control plane before the workers, held until there is spare Hardware), deleted.
//!
//! CAPT, the Tinkerbell provider, builds from no module the Go proxy serves, and its machines
//! need PXE boot and a BMC, so [`CaptStandIn`] plays its documented part on the API server,
//! named as such: a TinkerbellCluster owned by its Cluster is made ready; a TinkerbellMachine
//! owned by a Machine with bootstrap data takes a free Hardware of its namespace that a required
//! term of its `hardwareAffinity` selects, marks it with CAPT's owner labels and records it in
//! `spec.hardwareName`; on deletion it frees the Hardware. What a provisioned server then runs
//! is CAPD's in-memory backend: a DevMachine per TinkerbellMachine (owned by the Machine, its
//! provider ID copied back) and a DevCluster per TinkerbellCluster, whose simulated API server
//! the stand-in points the cluster's kubeconfig at (kube-vip's part: the virtual IP reaching a
//! control-plane machine). The in-memory backend's CoreDNS stand-in refuses the kubeadm control
//! plane's CoreDNS update forever, so, as capstan's docker templates do on that backend, the
//! KubeadmControlPlane gets the documented `skip-coredns` annotation from the stand-in.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use capstan_e2e::capi::*;
use capstan_harness::ControlPlane;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};

const CLUSTER: &str = "w-bm";
const OWNER_NAMESPACE_LABEL: &str = "v1alpha1.tinkerbell.org/ownerNamespace";
const MACHINE_FINALIZER: &str = "tinkerbellmachine.infrastructure.cluster.x-k8s.io";
const CLUSTER_FINALIZER: &str = "tinkerbellcluster.infrastructure.cluster.x-k8s.io";

/// The string at JSON pointer `p` of `v`, "" when absent.
fn string_at(v: &Value, p: &str) -> String {
    v.pointer(p)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn capt(kind: &str) -> kube::discovery::ApiResource {
    gvk_resource("infrastructure.cluster.x-k8s.io", "v1beta1", kind)
}

fn dev(kind: &str) -> kube::discovery::ApiResource {
    gvk_resource("infrastructure.cluster.x-k8s.io", "v1beta2", kind)
}

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

/// The owner of kind `kind` of an object, if it has one yet.
fn owner_of(
    o: &DynamicObject,
    kind: &str,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    o.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.kind == kind)
        .cloned()
}

/// CAPT's clean-up of a CAPT object going away: its inside (`inside`, of the same name) deleted
/// and gone, then its finalizer dropped.
async fn release(
    o: &DynamicObject,
    api: &Api<DynamicObject>,
    inside: &Api<DynamicObject>,
    finalizer: &str,
) {
    let name = o.metadata.name.clone().unwrap_or_default();
    let _ = inside.delete(&name, &DeleteParams::default()).await;
    while inside.get_opt(&name).await.unwrap().is_some() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let finalizers: Vec<String> = o
        .metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    let _ = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
        )
        .await;
}

/// Plays CAPT's part (see the module docs) for the objects of one namespace.
struct CaptStandIn {
    tasks: Tasks,
}

type Tasks = Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>;

impl Drop for CaptStandIn {
    fn drop(&mut self) {
        for t in self.tasks.lock().unwrap().iter() {
            t.abort();
        }
    }
}

impl CaptStandIn {
    fn start(cp: &ControlPlane, ns: &str) -> CaptStandIn {
        let client = cp.client();
        let api = |ar: kube::discovery::ApiResource| -> Api<DynamicObject> {
            Api::namespaced_with(client.clone(), ns, &ar)
        };
        let clusters = api(capt("TinkerbellCluster"));
        let machines = api(capt("TinkerbellMachine"));
        let dev_clusters = api(dev("DevCluster"));
        let dev_machines = api(dev("DevMachine"));
        let servers = api(hardware_resource());
        let capi_machines = api(gvk_resource("cluster.x-k8s.io", "v1beta2", "Machine"));
        let kcps = api(gvk_resource(
            "controlplane.cluster.x-k8s.io",
            "v1beta2",
            "KubeadmControlPlane",
        ));
        let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
        let ns = ns.to_string();
        let tasks: Tasks = Default::default();

        // The in-memory backend's CoreDNS stand-in refuses KCP's update forever: KCP is told to
        // leave it alone, as capstan's docker templates tell it on that backend.
        let coredns_task = tokio::spawn(async move {
            let mut events = watcher::watcher(kcps.clone(), watcher::Config::default()).boxed();
            while let Some(ev) = events.next().await {
                let (Ok(Event::Apply(o)) | Ok(Event::InitApply(o))) = ev else {
                    continue;
                };
                const SKIP: &str = "controlplane.cluster.x-k8s.io/skip-coredns";
                if o.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(SKIP))
                {
                    continue;
                }
                let name = o.metadata.name.clone().unwrap_or_default();
                let skip = json!({"metadata": {"annotations": {SKIP: ""}}});
                let _ = kcps
                    .patch(&name, &PatchParams::default(), &Patch::Merge(skip))
                    .await;
            }
        });

        // TinkerbellClusters: ready (with a DevCluster as the servers' inside), cleaned up on
        // deletion; the kubeconfig pointed at the DevCluster's API server.
        let cluster_task = {
            let (clusters, dev_clusters, secrets, tasks) = (
                clusters.clone(),
                dev_clusters.clone(),
                secrets.clone(),
                tasks.clone(),
            );
            tokio::spawn(async move {
                let mut pointed = std::collections::BTreeSet::new();
                let mut events =
                    watcher::watcher(clusters.clone(), watcher::Config::default()).boxed();
                while let Some(ev) = events.next().await {
                    let (Ok(Event::Apply(o)) | Ok(Event::InitApply(o))) = ev else {
                        continue;
                    };
                    let name = o.metadata.name.clone().unwrap_or_default();
                    let Some(owner) = owner_of(&o, "Cluster") else {
                        continue;
                    };
                    if o.metadata.deletion_timestamp.is_some() {
                        release(&o, &clusters, &dev_clusters, CLUSTER_FINALIZER).await;
                        continue;
                    }
                    if !o
                        .metadata
                        .finalizers
                        .iter()
                        .flatten()
                        .any(|f| f == CLUSTER_FINALIZER)
                    {
                        let mut finalizers = o.metadata.finalizers.clone().unwrap_or_default();
                        finalizers.push(CLUSTER_FINALIZER.to_string());
                        clusters
                            .patch(
                                &name,
                                &PatchParams::default(),
                                &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
                            )
                            .await
                            .unwrap();
                    }
                    // The servers' inside: a DevCluster of the same name (CAPD finds it by the
                    // Cluster's infrastructure reference), owned by the Cluster.
                    let devc: DynamicObject = serde_json::from_value(json!({
                        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
                        "kind": "DevCluster",
                        "metadata": {
                            "name": name,
                            "annotations": {"capstan.dev/stand-in": "CAPT"},
                            "ownerReferences": [{
                                "apiVersion": owner.api_version, "kind": "Cluster",
                                "name": owner.name, "uid": owner.uid,
                            }],
                        },
                        "spec": {"backend": {"inMemory": {}}},
                    }))
                    .unwrap();
                    match dev_clusters.create(&PostParams::default(), &devc).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(s)) if s.code == 409 => {}
                        Err(e) => panic!("DevCluster {name}: {e}"),
                    }
                    if o.data.pointer("/status/ready") != Some(&json!(true)) {
                        clusters
                            .patch_status(
                                &name,
                                &PatchParams::default(),
                                &Patch::Merge(json!({"status": {"ready": true}})),
                            )
                            .await
                            .unwrap();
                    }
                    if !pointed.insert(name.clone()) {
                        continue;
                    }
                    // kube-vip's part, each time the kubeconfig is written.
                    let endpoint = loop {
                        let d = dev_clusters.get(&name).await.unwrap();
                        let host = string_at(&d.data, "/spec/controlPlaneEndpoint/host");
                        let port = d.data.pointer("/spec/controlPlaneEndpoint/port").cloned();
                        if !host.is_empty() {
                            break format!("https://{host}:{}", port.unwrap_or(json!(6443)));
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    };
                    let (secrets, cluster) = (secrets.clone(), owner.name.clone());
                    let t = tokio::spawn(point_kubeconfig(secrets, cluster, endpoint));
                    tasks.lock().unwrap().push(t);
                }
            })
        };

        // TinkerbellMachines: a free Hardware bound, a DevMachine as its inside, freed on
        // deletion.
        let machine_tasks = tasks.clone();
        let machine_task = tokio::spawn(async move {
            let mut provisioning = std::collections::BTreeSet::new();
            // One binding at a time: two machines never take the same Hardware.
            let binding = Arc::new(tokio::sync::Mutex::new(()));
            let mut events = watcher::watcher(machines.clone(), watcher::Config::default()).boxed();
            while let Some(ev) = events.next().await {
                let (Ok(Event::Apply(o)) | Ok(Event::InitApply(o))) = ev else {
                    continue;
                };
                let name = o.metadata.name.clone().unwrap_or_default();
                let Some(owner) = owner_of(&o, "Machine") else {
                    continue;
                };
                if o.metadata.deletion_timestamp.is_some() {
                    // The Hardware is freed once the server's inside is gone.
                    let hw = string_at(&o.data, "/spec/hardwareName");
                    if !hw.is_empty() {
                        let _ = dev_machines.delete(&name, &DeleteParams::default()).await;
                        while dev_machines.get_opt(&name).await.unwrap().is_some() {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        let free = json!({"metadata": {"labels": {
                            capstan_layout::hardware::OWNER_LABEL: null,
                            OWNER_NAMESPACE_LABEL: null,
                        }}});
                        servers
                            .patch(&hw, &PatchParams::default(), &Patch::Merge(free))
                            .await
                            .unwrap();
                    }
                    release(&o, &machines, &dev_machines, MACHINE_FINALIZER).await;
                    continue;
                }
                if o.data.pointer("/status/ready") == Some(&json!(true))
                    || !provisioning.insert(name.clone())
                {
                    continue;
                }
                let p = Provision {
                    name,
                    owner,
                    ns: ns.clone(),
                    machines: machines.clone(),
                    capi_machines: capi_machines.clone(),
                    dev_machines: dev_machines.clone(),
                    servers: servers.clone(),
                    binding: binding.clone(),
                };
                let t = tokio::spawn(p.run());
                machine_tasks.lock().unwrap().push(t);
            }
        });
        tasks
            .lock()
            .unwrap()
            .extend([coredns_task, cluster_task, machine_task]);
        CaptStandIn { tasks }
    }
}

/// CAPT provisioning one TinkerbellMachine: once its Machine has bootstrap data, a free Hardware
/// its required affinity selects is taken (the machine waits while there is none, as with
/// CAPT), then the server's inside (a DevMachine) comes up and its provider ID is reported.
struct Provision {
    name: String,
    owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    ns: String,
    machines: Api<DynamicObject>,
    capi_machines: Api<DynamicObject>,
    dev_machines: Api<DynamicObject>,
    servers: Api<DynamicObject>,
    binding: Arc<tokio::sync::Mutex<()>>,
}

impl Provision {
    /// The TinkerbellMachine, unless it is gone or going.
    async fn current(&self) -> Option<DynamicObject> {
        self.machines
            .get_opt(&self.name)
            .await
            .unwrap()
            .filter(|o| o.metadata.deletion_timestamp.is_none())
    }

    async fn run(self) {
        let tick = || tokio::time::sleep(Duration::from_millis(200));
        // Bootstrap data first.
        let machine = loop {
            if self.current().await.is_none() {
                return;
            }
            if let Some(m) = self.capi_machines.get_opt(&self.owner.name).await.unwrap()
                && !string_at(&m.data, "/spec/bootstrap/dataSecretName").is_empty()
            {
                break m;
            }
            tick().await;
        };
        // A Hardware.
        loop {
            let Some(o) = self.current().await else {
                return;
            };
            if !string_at(&o.data, "/spec/hardwareName").is_empty() {
                break;
            }
            let _one = self.binding.lock().await;
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
                drop(_one);
                tick().await;
                continue;
            };
            let hw = free.metadata.name.clone().unwrap();
            let mark = json!({"metadata": {"labels": {
                capstan_layout::hardware::OWNER_LABEL: self.name,
                OWNER_NAMESPACE_LABEL: self.ns,
            }}});
            self.servers
                .patch(&hw, &PatchParams::default(), &Patch::Merge(mark))
                .await
                .unwrap();
            let mut finalizers = o.metadata.finalizers.clone().unwrap_or_default();
            finalizers.push(MACHINE_FINALIZER.to_string());
            self.machines
                .patch(
                    &self.name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({
                        "metadata": {"finalizers": finalizers},
                        "spec": {"hardwareName": hw},
                    })),
                )
                .await
                .unwrap();
            break;
        }
        // The server's inside.
        let durations = json!({"startupDuration": "1s", "startupJitter": "0.2"});
        let devm: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "DevMachine",
            "metadata": {
                "name": self.name,
                "labels": machine.metadata.labels.clone().unwrap_or_default(),
                "ownerReferences": [{
                    "apiVersion": self.owner.api_version, "kind": "Machine",
                    "name": self.owner.name, "uid": self.owner.uid,
                }],
            },
            "spec": {"backend": {"inMemory": {
                "vm": {"provisioning": durations},
                "node": {"provisioning": durations},
                "apiServer": {"provisioning": durations},
                "etcd": {"provisioning": durations},
            }}},
        }))
        .unwrap();
        match self
            .dev_machines
            .create(&PostParams::default(), &devm)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("DevMachine {}: {e}", self.name),
        }
        // Provisioned: the provider ID the node reports, the server's address.
        let id = loop {
            if self.current().await.is_none() {
                return;
            }
            let d = self.dev_machines.get_opt(&self.name).await.unwrap();
            let id = d
                .as_ref()
                .map(|d| string_at(&d.data, "/spec/providerID"))
                .unwrap_or_default();
            if !id.is_empty() {
                break id;
            }
            tick().await;
        };
        let pp = PatchParams::default();
        let _ = self
            .machines
            .patch(
                &self.name,
                &pp,
                &Patch::Merge(json!({"spec": {"providerID": id}})),
            )
            .await;
        let _ = self
            .machines
            .patch_status(
                &self.name,
                &pp,
                &Patch::Merge(json!({"status": {"ready": true, "addresses": [
                    {"type": "InternalIP", "address": "10.40.1.10"},
                ]}})),
            )
            .await;
    }
}

/// kube-vip's part: `<cluster>-kubeconfig`'s server, whenever written, is the DevCluster's
/// simulated API server (the virtual IP reaching a control-plane machine).
async fn point_kubeconfig(secrets: Api<Secret>, cluster: String, endpoint: String) {
    let name = format!("{cluster}-kubeconfig");
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher::watcher(secrets.clone(), config).boxed();
    while let Some(ev) = events.next().await {
        let (Ok(Event::Apply(s)) | Ok(Event::InitApply(s))) = ev else {
            continue;
        };
        let Some(value) = s.data.as_ref().and_then(|d| d.get("value")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&value.0).into_owned();
        let Some(server) = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .map(str::to_string)
        else {
            continue;
        };
        if server == endpoint {
            continue;
        }
        let rewritten = text.replace(&format!("server: {server}"), &format!("server: {endpoint}"));
        use base64::Engine;
        let patch =
            json!({"data": {"value": base64::engine::general_purpose::STANDARD.encode(rewritten)}});
        let _ = secrets
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await;
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
    let file = repo.files.root.join(format!(
        "clusters/{}/workload-clusters/{CLUSTER}/cluster.yaml",
        repo.mgmt
    ));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, bare_metal_spec(&repo.mgmt, &ns, "1.33")).unwrap();
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
    let _capt = CaptStandIn::start(cp, &ns);
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
    let available = shared_kubectl(&[
        "get",
        "clusters.cluster.x-k8s.io",
        CLUSTER,
        "-n",
        &ns,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Available\")].status}",
    ]);
    assert_eq!(available, "True");

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
    let events = log.snapshot();
    let at = |prefix: &str| {
        events
            .iter()
            .position(|e| e.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` in {events:#?}"))
    };
    assert!(
        at("deleted control-plane v1.33") < at(&format!("added {CLUSTER}-md-0 v1.34")),
        "the workers waited for the control plane: {events:#?}"
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
