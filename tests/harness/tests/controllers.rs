//! The controllers the harness runs, checked from the API server: contract labels, webhooks
//! served as upstream wires them (defaulting, validation, conversion), the garbage collector,
//! and a cluster on CAPD's in-memory backend brought up by the real Cluster API controllers.

use std::time::Duration;

use capstan_harness::{ControlPlane, StartOptions};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

fn api(cp: &ControlPlane, ns: &str, group: &str, version: &str, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        cp.client(),
        ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind)),
    )
}

async fn wait<F, Fut>(what: &str, timeout: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + timeout;
    while !f().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_reconcile_with_webhooks_conversion_and_garbage_collection() {
    let cp = ControlPlane::start_with(StartOptions {
        controllers: true,
        timeout: Duration::from_secs(180),
        ..Default::default()
    })
    .await
    .unwrap();
    let _logs = cp.logs_on_failure("controllers");
    let controllers = cp.controllers().expect("started with controllers");
    assert_eq!(
        controllers.logs().len(),
        5,
        "kube-controller-manager and four Cluster API managers"
    );
    assert!(controllers.cluster_api_version().starts_with("v1."));
    let test_ns = cp.test_namespace("controllers").await.unwrap();
    let ns = test_ns.name().to_owned();

    // Contract labels, as kustomize adds them in a real install.
    let crds: Api<DynamicObject> = Api::all_with(
        cp.client(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
        )),
    );
    let dmt = crds
        .get("devmachinetemplates.infrastructure.cluster.x-k8s.io")
        .await
        .unwrap();
    assert_eq!(
        dmt.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("cluster.x-k8s.io/v1beta2"))
            .map(String::as_str),
        Some("v1beta2")
    );
    // Conversion goes to the managers.
    let clusters_crd = crds.get("clusters.cluster.x-k8s.io").await.unwrap();
    assert_eq!(
        clusters_crd.data.pointer("/spec/conversion/strategy"),
        Some(&json!("Webhook"))
    );

    // A Cluster written as v1beta2 reads back converted as v1beta1 (without the conversion
    // webhook, the API server would only rewrite apiVersion).
    let v2 = api(&cp, &ns, "cluster.x-k8s.io", "v1beta2", "Cluster");
    let body: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "convert", "namespace": ns},
        "spec": {"paused": true, "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DevCluster", "name": "convert"}},
    }))
    .unwrap();
    v2.create(&PostParams::default(), &body).await.unwrap();
    // v1beta1 references carry an apiVersion where v1beta2 ones name the group: the conversion
    // webhook looks the version up through the DevCluster CRD's contract label.
    let v1 = api(&cp, &ns, "cluster.x-k8s.io", "v1beta1", "Cluster");
    let read = serde_json::to_value(v1.get("convert").await.unwrap()).unwrap();
    assert_eq!(
        read.pointer("/spec/infrastructureRef/apiVersion"),
        Some(&json!("infrastructure.cluster.x-k8s.io/v1beta2")),
        "{read}"
    );
    assert_eq!(
        read.pointer("/spec/infrastructureRef/apiGroup"),
        None,
        "{read}"
    );
    v2.patch(
        "convert",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"paused": false}})),
    )
    .await
    .unwrap();

    // Validation webhooks reject what the CRD schema alone would accept.
    let kcp = api(
        &cp,
        &ns,
        "controlplane.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmControlPlane",
    );
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane", "metadata": {"name": "bad", "namespace": ns},
        "spec": {"replicas": 2, "version": "v1.33.1", "machineTemplate": {"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DevMachineTemplate", "name": "x"}}}},
    }))
    .unwrap();
    let err = kcp
        .create(&PostParams::default(), &bad)
        .await
        .expect_err("an even replica count with stacked etcd is refused");
    assert!(err.to_string().contains("replicas"), "{err}");

    // The garbage collector: a dependent goes with its owner.
    let cms: Api<ConfigMap> = Api::namespaced(cp.client(), &ns);
    let owner = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap(),
        )
        .await
        .unwrap();
    let uid = owner.metadata.uid.unwrap();
    cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "dependent", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]}})).unwrap()).await.unwrap();
    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    wait(
        "the garbage collector to delete the dependent",
        Duration::from_secs(60),
        || async { matches!(cms.get_opt("dependent").await, Ok(None)) },
    )
    .await;

    // A 1+1 cluster on the in-memory backend, from the objects CAPD's own template uses.
    let cluster = "mem";
    let apply = |kind: &str, group: &str, body: Value| {
        let a = api(&cp, &ns, group, "v1beta2", kind);
        let name = body["metadata"]["name"].as_str().unwrap().to_owned();
        async move {
            a.patch(
                &name,
                &PatchParams::apply("test").force(),
                &Patch::Apply(&body),
            )
            .await
            .unwrap()
        }
    };
    let machine = json!({"backend": {"inMemory": {"vm": {"provisioning": {"startupDuration": "2s"}}, "node": {"provisioning": {"startupDuration": "1s"}},
        "apiServer": {"provisioning": {"startupDuration": "1s"}}, "etcd": {"provisioning": {"startupDuration": "1s"}}}}});
    apply("DevCluster", "infrastructure.cluster.x-k8s.io", json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DevCluster",
        "metadata": {"name": cluster, "namespace": ns, "annotations": {"test": "in-memory"}}, "spec": {"backend": {"inMemory": {}}}})).await;
    apply("DevMachineTemplate", "infrastructure.cluster.x-k8s.io", json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DevMachineTemplate",
        "metadata": {"name": "mem-machines", "namespace": ns}, "spec": {"template": {"spec": machine}}})).await;
    apply("KubeadmControlPlane", "controlplane.cluster.x-k8s.io", json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
        "metadata": {"name": cluster, "namespace": ns}, "spec": {"replicas": 1, "version": "v1.33.1",
        "machineTemplate": {"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DevMachineTemplate", "name": "mem-machines"}}},
        "kubeadmConfigSpec": {"initConfiguration": {"nodeRegistration": {"criSocket": "unix:///var/run/containerd/containerd.sock"}}}}})).await;
    apply("Cluster", "cluster.x-k8s.io", json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": cluster, "namespace": ns},
        "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}, "services": {"cidrBlocks": ["10.128.0.0/12"]}},
            "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": cluster},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DevCluster", "name": cluster}}})).await;
    let clusters = api(&cp, &ns, "cluster.x-k8s.io", "v1beta2", "Cluster");
    let available = || async {
        let c = clusters.get(cluster).await.unwrap();
        c.data
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Available" && c["status"] == "True")
            })
    };
    wait(
        "the in-memory cluster to become Available",
        Duration::from_secs(240),
        available,
    )
    .await;
    let machines = api(&cp, &ns, "cluster.x-k8s.io", "v1beta2", "Machine");
    let list = machines.list(&Default::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        list.items[0].data.pointer("/status/phase"),
        Some(&json!("Running"))
    );

    // Deletion: the Cluster and every Machine go.
    clusters
        .delete(cluster, &DeleteParams::default())
        .await
        .unwrap();
    wait(
        "the Cluster to be deleted",
        Duration::from_secs(120),
        || async { matches!(clusters.get_opt(cluster).await, Ok(None)) },
    )
    .await;
    assert!(
        machines
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    test_ns.delete().await.unwrap();
    let pids = controllers.pids();
    cp.stop();
    for (name, pid) in pids {
        assert!(!pid.is_alive(), "{name} still runs after stop");
    }
}
