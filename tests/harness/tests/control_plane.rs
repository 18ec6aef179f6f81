//! The shared control plane: real versions, every CRD group capstan needs, strict
//! server-side-apply validation, the kubeconfig and the audit log.

use std::time::Duration;

use capstan_harness::{FIELD_MANAGER, shared, versions};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Discovery, Scope};
use serde_json::json;

#[tokio::test]
async fn reports_the_pinned_kubernetes_and_etcd_versions() {
    let cp = shared().await;
    let pinned = versions().unwrap();
    let info = cp.client().apiserver_version().await.unwrap();
    assert!(info.git_version.starts_with("v1.34."), "{info:?}");
    assert_eq!(info.git_version, pinned.kubernetes);
    assert_eq!((info.major.as_str(), info.minor.as_str()), ("1", "34"));

    let etcd = cp.etcd_version().await.unwrap();
    assert_eq!(
        etcd["etcdserver"],
        pinned.etcd.trim_start_matches('v'),
        "{etcd}"
    );
    println!(
        "kube-apiserver {} / etcd {}",
        info.git_version, etcd["etcdserver"]
    );
}

/// `(group, version, kind)` every capstan feature relies on.
const REQUIRED: &[(&str, &str, &str)] = &[
    ("cluster.x-k8s.io", "v1beta2", "Cluster"),
    ("cluster.x-k8s.io", "v1beta2", "MachineDeployment"),
    ("cluster.x-k8s.io", "v1beta2", "MachineHealthCheck"),
    (
        "controlplane.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmControlPlane",
    ),
    (
        "bootstrap.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmConfigTemplate",
    ),
    (
        "infrastructure.cluster.x-k8s.io",
        "v1beta2",
        "DockerCluster",
    ),
    (
        "infrastructure.cluster.x-k8s.io",
        "v1beta2",
        "DockerMachineTemplate",
    ),
    (
        "infrastructure.cluster.x-k8s.io",
        "v1beta1",
        "VSphereCluster",
    ),
    (
        "infrastructure.cluster.x-k8s.io",
        "v1beta1",
        "VSphereMachineTemplate",
    ),
    (
        "infrastructure.cluster.x-k8s.io",
        "v1beta1",
        "NutanixCluster",
    ),
    (
        "infrastructure.cluster.x-k8s.io",
        "v1beta1",
        "NutanixMachineTemplate",
    ),
    (
        "anywhere.eks.amazonaws.com",
        "v1alpha1",
        "NutanixDatacenterConfig",
    ),
    (
        "anywhere.eks.amazonaws.com",
        "v1alpha1",
        "NutanixMachineConfig",
    ),
    ("etcdcluster.cluster.x-k8s.io", "v1beta1", "EtcdadmCluster"),
    ("bootstrap.cluster.x-k8s.io", "v1beta1", "EtcdadmConfig"),
    ("addons.cluster.x-k8s.io", "v1alpha1", "HelmChartProxy"),
    ("anywhere.eks.amazonaws.com", "v1alpha1", "Cluster"),
    ("anywhere.eks.amazonaws.com", "v1alpha1", "EKSARelease"),
    ("anywhere.eks.amazonaws.com", "v1alpha1", "Bundles"),
    (
        "anywhere.eks.amazonaws.com",
        "v1alpha1",
        "DockerDatacenterConfig",
    ),
    (
        "anywhere.eks.amazonaws.com",
        "v1alpha1",
        "VSphereDatacenterConfig",
    ),
    (
        "anywhere.eks.amazonaws.com",
        "v1alpha1",
        "VSphereMachineConfig",
    ),
];

#[tokio::test]
async fn serves_every_crd_group_capstan_needs() {
    let cp = shared().await;
    let client = cp.client();
    let discovery = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    let mut missing = Vec::new();
    for (g, v, k) in REQUIRED {
        match discovery.resolve_gvk(&GroupVersionKind::gvk(g, v, k)) {
            Some((_, caps)) => assert_eq!(caps.scope, Scope::Namespaced, "{g}/{v} {k}"),
            None => missing.push(format!("{g}/{v} {k}")),
        }
    }
    assert!(missing.is_empty(), "not served: {missing:?}");

    // The CAPI/CAPD kinds we write must be stored in the version we use (the CRDs run with
    // conversion strategy None, so only the storage version round-trips faithfully).
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    for name in [
        "clusters.cluster.x-k8s.io",
        "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
        "dockerclusters.infrastructure.cluster.x-k8s.io",
        "dockermachinetemplates.infrastructure.cluster.x-k8s.io",
    ] {
        let crd = crds.get(name).await.unwrap();
        let storage: Vec<_> = crd
            .spec
            .versions
            .iter()
            .filter(|v| v.storage)
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(storage, ["v1beta2"], "{name}");
        assert!(
            crd.spec
                .conversion
                .as_ref()
                .is_none_or(|c| c.strategy == "None"),
            "{name}"
        );
    }
    // Each CRD name installed exactly once (EKS-A ships bundles/eksareleases twice).
    let names: std::collections::BTreeSet<_> = cp.crds().iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.len(), cp.crds().len());
    assert!(names.contains("bundles.anywhere.eks.amazonaws.com"));
}

#[tokio::test]
async fn strict_dry_run_apply_rejects_unknown_fields() {
    let cp = shared().await;
    let ns = cp.test_namespace("strict").await.unwrap();
    let client = cp.client();
    let discovery = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    let (ar, _) = discovery
        .resolve_gvk(&GroupVersionKind::gvk(
            "cluster.x-k8s.io",
            "v1beta2",
            "Cluster",
        ))
        .unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client, ns.name(), &ar);
    let strict = PatchParams::apply(FIELD_MANAGER)
        .force()
        .dry_run()
        .validation_strict();

    let mut cluster = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": "mgmt", "namespace": ns.name()},
        "spec": {
            "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}},
            "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "mgmt"},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": "mgmt"}
        }
    });
    let mark = cp.audit().mark();
    // The valid object passes: a rejection below is about the unknown field only.
    let ok = api.patch("mgmt", &strict, &Patch::Apply(&cluster)).await;
    assert!(ok.is_ok(), "valid Cluster rejected: {ok:?}");

    cluster["spec"]["controlPlaneEndpointTypo"] = json!({"host": "10.0.0.1", "port": 6443});
    let err = api
        .patch("mgmt", &strict, &Patch::Apply(&cluster))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = &err else {
        panic!("unexpected error {err:?}")
    };
    // kube-apiserver 1.34 fails the apply while building the typed patch: HTTP 500 (not a
    // 4xx!) with ".spec.controlPlaneEndpointTypo: field not declared in schema". Server-side
    // apply does this for every fieldValidation value, so callers must treat this 500 as
    // permanent, not retry it.
    assert!(status.code >= 400, "{status:?}");
    assert!(
        status
            .message
            .contains(".spec.controlPlaneEndpointTypo: field not declared in schema"),
        "{status:?}"
    );
    println!("SSA strict dry-run: {} {}", status.code, status.message);

    // fieldValidation=Strict on a plain create is a 400 "strict decoding error" (kube's
    // PostParams has no validation setter, hence the raw request); Warn would accept it.
    let req = http::Request::post(format!(
        "/apis/cluster.x-k8s.io/v1beta2/namespaces/{}/clusters?dryRun=All&fieldValidation=Strict",
        ns.name()
    ))
    .header("content-type", "application/json")
    .body(serde_json::to_vec(&cluster).unwrap())
    .unwrap();
    let err = cp.client().request_text(req).await.unwrap_err();
    let kube::Error::Api(status) = &err else {
        panic!("unexpected error {err:?}")
    };
    assert_eq!(status.code, 400, "{status:?}");
    assert!(
        status
            .message
            .contains(r#"strict decoding error: unknown field "spec.controlPlaneEndpointTypo""#),
        "{status:?}"
    );

    // Dry runs are recorded but are not writes, and nothing was stored.
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    let events = cp.audit().events_since(mark).unwrap();
    let mine: Vec<_> = events
        .iter()
        .filter(|e| e.namespace() == Some(ns.name()) && e.resource() == Some("clusters"))
        .map(|e| (e.verb.as_str(), e.response_status.code, e.is_write()))
        .collect();
    assert_eq!(
        mine,
        [
            ("patch", Some(201), false),
            ("patch", Some(500), false),
            ("create", Some(400), false)
        ]
    );
    assert!(api.get_opt("mgmt").await.unwrap().is_none());
}

#[tokio::test]
async fn audit_log_counts_write_requests() {
    let cp = shared().await;
    let ns = cp.test_namespace("audit").await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(cp.client(), ns.name());
    let mark = cp.audit().mark();
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for i in 0..3 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"i": i.to_string()}});
        api.patch("c", &pp, &Patch::Apply(&cm)).await.unwrap();
    }
    api.get("c").await.unwrap();
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    let in_ns = |e: &capstan_harness::AuditEvent| e.namespace() == Some(ns.name());
    assert_eq!(cp.audit().count_writes_since(mark, in_ns).unwrap(), 3);
    let events = cp.audit().events_since(mark).unwrap();
    let get = events
        .iter()
        .find(|e| in_ns(e) && e.verb == "get")
        .expect("get event");
    assert_eq!(get.user.username, "admin");
    assert_eq!(get.response_status.code, Some(200));
}

#[tokio::test]
async fn kubeconfig_file_connects_as_admin() {
    let cp = shared().await;
    let path = cp.kubeconfig_path();
    assert!(path.starts_with(cp.dir()));
    let kc = kube::config::Kubeconfig::read_from(path).unwrap();
    assert_eq!(
        kc.current_context.as_deref(),
        Some(capstan_harness::CONTEXT_NAME)
    );
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    assert_eq!(
        config.cluster_url.to_string().trim_end_matches('/'),
        cp.server_url()
    );
    capstan_harness::install_crypto_provider();
    let client = kube::Client::try_from(config).unwrap();
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    ns.get("default").await.unwrap();
}

#[tokio::test]
async fn test_namespaces_are_unique_and_removed() {
    let cp = shared().await;
    let a = cp.test_namespace("twin").await.unwrap();
    let b = cp.test_namespace("twin").await.unwrap();
    assert_ne!(a.name(), b.name());
    let name = a.name().to_owned();
    drop(a); // synchronous delete, including the finalizer
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cp.client());
    assert!(
        api.get_opt(&name).await.unwrap().is_none(),
        "{name} still exists"
    );
    let name = b.name().to_owned();
    b.delete().await.unwrap();
    assert!(
        api.get_opt(&name).await.unwrap().is_none(),
        "{name} still exists"
    );
}
