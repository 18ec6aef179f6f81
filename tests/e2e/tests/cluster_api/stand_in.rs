//! An infrastructure provider's documented part, played on the API server for a provider whose
//! controller or backend cannot run here (CAPT: no module the Go proxy serves, PXE-booted
//! servers; CAPX: Prism Central), named as such. What a provisioned machine then runs is CAPD's
//! in-memory backend.
//!
//! For the objects of one namespace: an infrastructure cluster owned by its Cluster gets a
//! finalizer, a DevCluster of the same name as its machines' inside (CAPD finds it by the
//! Cluster's infrastructure reference), is made ready, and the cluster's kubeconfig is pointed at
//! the DevCluster's simulated API server (kube-vip's part: the virtual IP reaching a
//! control-plane machine). An infrastructure machine owned by a Machine with bootstrap data gets
//! a finalizer, takes what the provider's [`Claim`] gives it (Hardware on bare metal), a
//! DevMachine as its inside (owned by the Machine), and reports the inside's provider ID and an
//! address. On deletion the inside goes first, then what the machine held, then the finalizer.
//! The in-memory backend's CoreDNS stand-in refuses the kubeadm control plane's CoreDNS update
//! forever, so, as capstan's docker templates do on that backend, each KubeadmControlPlane gets
//! the documented `skip-coredns` annotation.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use capstan_e2e::capi::gvk_resource;
use capstan_harness::ControlPlane;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};

/// The provider whose part is played: its kinds (group `infrastructure.cluster.x-k8s.io`), its
/// finalizers, and the address its machines report.
pub(super) struct Infra {
    /// The provider's short name, recorded on what the stand-in creates.
    pub name: &'static str,
    /// API version of its kinds.
    pub version: &'static str,
    pub cluster_kind: &'static str,
    pub machine_kind: &'static str,
    pub cluster_finalizer: &'static str,
    pub machine_finalizer: &'static str,
    /// The InternalIP its machines report.
    pub address: &'static str,
}

/// What a provider takes for a machine before its server exists, and gives back after.
pub(super) trait Claim: Clone + Send + Sync + 'static {
    /// Takes what infrastructure machine `name` needs (waiting while there is none); false when
    /// the machine went away meanwhile.
    fn claim(
        &self,
        machines: Api<DynamicObject>,
        name: String,
    ) -> impl Future<Output = bool> + Send;
    /// Gives back what the going machine `o` held, once its inside is gone.
    fn free(&self, o: DynamicObject) -> impl Future<Output = ()> + Send;
}

/// A provider whose machines take nothing but their server.
#[derive(Clone)]
pub(super) struct Nothing;

impl Claim for Nothing {
    async fn claim(&self, _: Api<DynamicObject>, _: String) -> bool {
        true
    }
    async fn free(&self, _: DynamicObject) {}
}

/// The string at JSON pointer `p` of `v`, "" when absent.
pub(super) fn string_at(v: &Value, p: &str) -> String {
    v.pointer(p)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn dev(kind: &str) -> kube::discovery::ApiResource {
    gvk_resource("infrastructure.cluster.x-k8s.io", "v1beta2", kind)
}

/// The owner of kind `kind` of an object, if it has one yet.
fn owner_of(o: &DynamicObject, kind: &str) -> Option<OwnerReference> {
    o.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.kind == kind)
        .cloned()
}

fn tick() -> tokio::time::Sleep {
    tokio::time::sleep(Duration::from_millis(200))
}

/// Adds `finalizer` to `o` unless it has it.
async fn hold(o: &DynamicObject, api: &Api<DynamicObject>, finalizer: &str) {
    if o.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == finalizer)
    {
        return;
    }
    let mut finalizers = o.metadata.finalizers.clone().unwrap_or_default();
    finalizers.push(finalizer.to_string());
    let name = o.metadata.name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
    )
    .await
    .unwrap();
}

/// The provider's clean-up of an object going away: its inside (`inside`, of the same name)
/// deleted and gone, then `then`, then its finalizer dropped.
async fn release(
    o: &DynamicObject,
    api: &Api<DynamicObject>,
    inside: &Api<DynamicObject>,
    finalizer: &str,
    then: impl Future<Output = ()>,
) {
    let name = o.metadata.name.clone().unwrap_or_default();
    let _ = inside.delete(&name, &DeleteParams::default()).await;
    while inside.get_opt(&name).await.unwrap().is_some() {
        tick().await;
    }
    then.await;
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

/// Plays a provider's part (see the module docs) for the objects of one namespace, until
/// dropped.
pub(super) struct StandIn {
    tasks: Tasks,
}

type Tasks = Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>;

impl Drop for StandIn {
    fn drop(&mut self) {
        for t in self.tasks.lock().unwrap().iter() {
            t.abort();
        }
    }
}

impl StandIn {
    pub(super) fn start<C: Claim>(
        cp: &ControlPlane,
        ns: &str,
        infra: &'static Infra,
        claim: C,
    ) -> StandIn {
        let client = cp.client();
        let api = |ar: kube::discovery::ApiResource| -> Api<DynamicObject> {
            Api::namespaced_with(client.clone(), ns, &ar)
        };
        let kind = |k: &str| gvk_resource("infrastructure.cluster.x-k8s.io", infra.version, k);
        let clusters = api(kind(infra.cluster_kind));
        let machines = api(kind(infra.machine_kind));
        let dev_clusters = api(dev("DevCluster"));
        let dev_machines = api(dev("DevMachine"));
        let capi_machines = api(gvk_resource("cluster.x-k8s.io", "v1beta2", "Machine"));
        let kcps = api(gvk_resource(
            "controlplane.cluster.x-k8s.io",
            "v1beta2",
            "KubeadmControlPlane",
        ));
        let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
        let tasks: Tasks = Default::default();

        let coredns_task = tokio::spawn(skip_coredns(kcps));

        // Infrastructure clusters: ready (with a DevCluster as the machines' inside), cleaned up
        // on deletion; the kubeconfig pointed at the DevCluster's API server.
        let cluster_task = {
            let tasks = tasks.clone();
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
                        release(
                            &o,
                            &clusters,
                            &dev_clusters,
                            infra.cluster_finalizer,
                            async {},
                        )
                        .await;
                        continue;
                    }
                    hold(&o, &clusters, infra.cluster_finalizer).await;
                    let devc: DynamicObject = serde_json::from_value(json!({
                        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
                        "kind": "DevCluster",
                        "metadata": {
                            "name": name,
                            "annotations": {"capstan.dev/stand-in": infra.name},
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
                    let endpoint = loop {
                        let d = dev_clusters.get(&name).await.unwrap();
                        let host = string_at(&d.data, "/spec/controlPlaneEndpoint/host");
                        let port = d.data.pointer("/spec/controlPlaneEndpoint/port").cloned();
                        if !host.is_empty() {
                            break format!("https://{host}:{}", port.unwrap_or(json!(6443)));
                        }
                        tick().await;
                    };
                    let (secrets, cluster) = (secrets.clone(), owner.name.clone());
                    let t = tokio::spawn(point_kubeconfig(secrets, cluster, endpoint));
                    tasks.lock().unwrap().push(t);
                }
            })
        };

        // Infrastructure machines: claimed, a DevMachine as the inside, released on deletion.
        let machine_tasks = tasks.clone();
        let machine_task = tokio::spawn(async move {
            let mut provisioning = std::collections::BTreeSet::new();
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
                    let free = claim.free(o.clone());
                    release(&o, &machines, &dev_machines, infra.machine_finalizer, free).await;
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
                    infra,
                    machines: machines.clone(),
                    capi_machines: capi_machines.clone(),
                    dev_machines: dev_machines.clone(),
                };
                let t = tokio::spawn(p.run(claim.clone()));
                machine_tasks.lock().unwrap().push(t);
            }
        });
        tasks
            .lock()
            .unwrap()
            .extend([coredns_task, cluster_task, machine_task]);
        StandIn { tasks }
    }
}

/// The in-memory backend's CoreDNS stand-in refuses KCP's update forever: KCP is told to leave
/// it alone, as capstan's docker templates tell it on that backend.
async fn skip_coredns(kcps: Api<DynamicObject>) {
    const SKIP: &str = "controlplane.cluster.x-k8s.io/skip-coredns";
    let mut events = watcher::watcher(kcps.clone(), watcher::Config::default()).boxed();
    while let Some(ev) = events.next().await {
        let (Ok(Event::Apply(o)) | Ok(Event::InitApply(o))) = ev else {
            continue;
        };
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
}

/// The provider provisioning one infrastructure machine: once its Machine has bootstrap data,
/// what the machine needs is claimed (it waits while there is none), then the server's inside (a
/// DevMachine) comes up and its provider ID is reported.
struct Provision {
    name: String,
    owner: OwnerReference,
    infra: &'static Infra,
    machines: Api<DynamicObject>,
    capi_machines: Api<DynamicObject>,
    dev_machines: Api<DynamicObject>,
}

impl Provision {
    /// The infrastructure machine, unless it is gone or going.
    async fn current(&self) -> Option<DynamicObject> {
        self.machines
            .get_opt(&self.name)
            .await
            .unwrap()
            .filter(|o| o.metadata.deletion_timestamp.is_none())
    }

    async fn run(self, claim: impl Claim) {
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
        let Some(o) = self.current().await else {
            return;
        };
        hold(&o, &self.machines, self.infra.machine_finalizer).await;
        if !claim.claim(self.machines.clone(), self.name.clone()).await {
            return;
        }
        // The server's inside.
        let durations = json!({"startupDuration": "1s", "startupJitter": "0.2"});
        let devm: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "DevMachine",
            "metadata": {
                "name": self.name,
                "labels": machine.metadata.labels.clone().unwrap_or_default(),
                "annotations": {"capstan.dev/stand-in": self.infra.name},
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
                    {"type": "InternalIP", "address": self.infra.address},
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
