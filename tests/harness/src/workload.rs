//! A workload cluster's inside for tests that need one: what Cluster API and the kubelet do that
//! a bare kube-apiserver does not, played by the test and named as such.
//!
//! The workload cluster itself is a [`crate::ControlPlane`] started without CRDs (a second real
//! kube-apiserver + etcd); CAPD's in-memory backend cannot stand in for it where what runs inside
//! matters, since it serves only what Cluster API asks of a workload API server (no server-side
//! apply, no controllers).

use k8s_openapi::api::core::v1::{Node, Secret};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// Plays the kubelet's part: a Node `name` that reports Ready (a kubelet does once the CNI is
/// up).
pub async fn ready_node(workload: &Client, name: &str) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(workload.clone());
    let node: Node =
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("a Node from its name");
    nodes.create(&PostParams::default(), &node).await?;
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}]}})),
        )
        .await?;
    Ok(())
}

/// Plays Cluster API's part: the workload cluster's kubeconfig Secret on the management cluster,
/// as CAPI's cluster controller writes it once the control plane is up (`<cluster>-kubeconfig`
/// in the cluster's namespace, type `cluster.x-k8s.io/secret`, labelled for the cluster, key
/// `value`). Written again (a rotated or changed kubeconfig) when it exists.
pub async fn kubeconfig_secret(
    mgmt: &Client,
    namespace: &str,
    cluster: &str,
    kubeconfig: &str,
) -> Result<(), kube::Error> {
    let secrets: Api<Secret> = Api::namespaced(mgmt.clone(), namespace);
    let name = format!("{cluster}-kubeconfig");
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
        "type": "cluster.x-k8s.io/secret",
        "stringData": {"value": kubeconfig},
    });
    secrets
        .patch(
            &name,
            &PatchParams::apply("cluster-api-stand-in").force(),
            &Patch::Apply(secret),
        )
        .await?;
    Ok(())
}
