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
    // Bare metal: CAPT (from EKS Anywhere's copy), Tinkerbell's own kinds and Rufio's (from
    // Tinkerbell's mono-repo), and EKS Anywhere's Tinkerbell configs.
    (
        "infrastructure.cluster.x-k8s.io",
        "v1beta1",
        "TinkerbellCluster",
    ),
    (
        "infrastructure.cluster.x-k8s.io",
        "v1beta1",
        "TinkerbellMachine",
    ),
    (
        "infrastructure.cluster.x-k8s.io",
        "v1beta1",
        "TinkerbellMachineTemplate",
    ),
    ("tinkerbell.org", "v1alpha1", "Hardware"),
    ("tinkerbell.org", "v1alpha1", "Template"),
    ("tinkerbell.org", "v1alpha1", "Workflow"),
    ("bmc.tinkerbell.org", "v1alpha1", "Machine"),
    ("bmc.tinkerbell.org", "v1alpha1", "Task"),
    ("bmc.tinkerbell.org", "v1alpha1", "Job"),
    (
        "anywhere.eks.amazonaws.com",
        "v1alpha1",
        "TinkerbellDatacenterConfig",
    ),
    (
        "anywhere.eks.amazonaws.com",
        "v1alpha1",
        "TinkerbellMachineConfig",
    ),
    (
        "anywhere.eks.amazonaws.com",
        "v1alpha1",
        "TinkerbellTemplateConfig",
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
    // ... and those two are the only CRDs left out for a same-named one earlier in CRD_SOURCES:
    // a module added later that ships a CRD another already installs must be looked at.
    let shadowed: Vec<_> = tokio::task::spawn_blocking(capstan_harness::crds::shadowed_crds)
        .await
        .unwrap()
        .unwrap()
        .into_iter()
        .map(|s| (s.name, s.kept.0, s.dropped.0))
        .collect();
    let eksa = "github.com/aws/eks-anywhere";
    assert_eq!(
        shadowed,
        [
            (
                "bundles.anywhere.eks.amazonaws.com".to_owned(),
                eksa.into(),
                eksa.into()
            ),
            (
                "eksareleases.anywhere.eks.amazonaws.com".to_owned(),
                eksa.into(),
                eksa.into()
            ),
        ]
    );
    // Where the bare-metal CRDs come from (tests/control-plane/versions.env says why).
    let from = |name: &str| {
        let f = cp.crds().iter().find(|c| c.name == name);
        f.map(|f| f.module.as_str()).unwrap_or("none")
    };
    assert_eq!(
        from("tinkerbellmachinetemplates.infrastructure.cluster.x-k8s.io"),
        eksa
    );
    for name in [
        "hardware.tinkerbell.org",
        "templates.tinkerbell.org",
        "workflows.tinkerbell.org",
        "machines.bmc.tinkerbell.org",
        "tasks.bmc.tinkerbell.org",
        "jobs.bmc.tinkerbell.org",
    ] {
        assert_eq!(from(name), "github.com/tinkerbell/tinkerbell", "{name}");
    }
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

/// A strict server-side dry-run apply of `obj`: `Ok` or the API server's refusal.
async fn strict_dry_run(
    discovery: &Discovery,
    client: &kube::Client,
    obj: &serde_json::Value,
) -> Result<(), kube::core::Status> {
    let (group, version) = obj["apiVersion"].as_str().unwrap().split_once('/').unwrap();
    let gvk = GroupVersionKind::gvk(group, version, obj["kind"].as_str().unwrap());
    let (ar, _) = discovery.resolve_gvk(&gvk).unwrap();
    let ns = obj["metadata"]["namespace"].as_str().unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let strict = PatchParams::apply(FIELD_MANAGER)
        .force()
        .dry_run()
        .validation_strict();
    let name = obj["metadata"]["name"].as_str().unwrap();
    match api.patch(name, &strict, &Patch::Apply(obj)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err(*status),
        Err(e) => panic!("{gvk:?} {name}: {e:?}"),
    }
}

/// Bare metal, strictly: the API server admits a TinkerbellMachineTemplate as EKS Anywhere
/// v0.26.1's template-cp.yaml renders it (hardwareAffinity, bootOptions, templateOverride), and a
/// Hardware and a Rufio Machine as its hardware CSV import writes them
/// (pkg/providers/tinkerbell/hardware: hardwareFromMachine, toRufioMachine), and refuses each with
/// a misspelt field.
#[tokio::test]
async fn strict_dry_run_apply_of_bare_metal_objects() {
    let cp = shared().await;
    let ns = cp.test_namespace("baremetal").await.unwrap();
    let client = cp.client();
    let discovery = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    let ns = ns.name();

    let template = json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "TinkerbellMachineTemplate",
        "metadata": {"name": "mgmt-control-plane-template-1", "namespace": ns},
        "spec": {"template": {"spec": {
            "hardwareAffinity": {
                "required": [{"labelSelector": {"matchLabels": {"type": "cp"}}}],
                "preferred": [{
                    "weight": 50,
                    "hardwareAffinityTerm": {"labelSelector": {"matchExpressions": [
                        {"key": "rack", "operator": "In", "values": ["r1", "r2"]}
                    ]}}
                }]
            },
            "bootOptions": {"bootMode": "iso", "isoURL": "http://5.6.7.8:7171/iso/hook.iso"},
            "templateOverride": "global_timeout: 6000\nid: \"\"\nname: mgmt\ntasks:\n- actions:\n  - environment:\n      COMPRESSED: \"true\"\n      DEST_DISK: '{{ index .Hardware.Disks 0 }}'\n      IMG_URL: https://ubuntu-1-33.gz\n    image: 127.0.0.1/embedded/image2disk\n    name: stream image to disk\n    timeout: 600\n  name: mgmt\n  volumes:\n  - /dev:/dev\n  worker: '{{.device_1}}'\nversion: \"0.1\"\n"
        }}}
    });
    let hardware = json!({
        "apiVersion": "tinkerbell.org/v1alpha1",
        "kind": "Hardware",
        "metadata": {"name": "worker1", "namespace": ns, "labels": {"type": "cp"}},
        "spec": {
            "bmcRef": {"kind": "Machine", "name": "bmc-worker1"},
            "disks": [{"device": "/dev/sda"}],
            "metadata": {
                "facility": {"facility_code": "onprem", "plan_slug": "c2.medium.x86"},
                "instance": {
                    "id": "00:00:00:00:00:01",
                    "hostname": "worker1",
                    "ips": [{
                        "address": "10.10.10.10",
                        "netmask": "255.255.255.0",
                        "gateway": "10.10.10.1",
                        "family": 4,
                        "public": true
                    }],
                    "operating_system": {},
                    "allow_pxe": true,
                    "always_pxe": true
                }
            },
            "interfaces": [{
                "netboot": {"allowPXE": true, "allowWorkflow": true},
                "dhcp": {
                    "arch": "x86_64",
                    "mac": "00:00:00:00:00:01",
                    "ip": {
                        "address": "10.10.10.10",
                        "netmask": "255.255.255.0",
                        "gateway": "10.10.10.1",
                        "family": 4
                    },
                    "lease_time": 4294967294_i64,
                    "hostname": "worker1",
                    "name_servers": ["1.1.1.1"],
                    "uefi": true,
                    "vlan_id": "100"
                }
            }]
        }
    });
    let bmc = json!({
        "apiVersion": "bmc.tinkerbell.org/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": "bmc-worker1", "namespace": ns},
        "spec": {"connection": {
            "host": "192.168.0.10",
            "authSecretRef": {"name": "bmc-worker1-auth", "namespace": ns},
            "insecureTLS": true,
            "providerOptions": {"preferredOrder": ["gofish"]}
        }}
    });

    // (object, where to add a misspelt field, its name, the path the API server reports)
    for (valid, pointer, typo, reported) in [
        (
            &template,
            "/spec/template/spec",
            "hardwareAfinity",
            ".spec.template.spec.hardwareAfinity",
        ),
        (
            &hardware,
            "/spec/interfaces/0",
            "netbot",
            ".spec.interfaces[0].netbot",
        ),
        (
            &bmc,
            "/spec/connection",
            "insecureTLSS",
            ".spec.connection.insecureTLSS",
        ),
    ] {
        let kind = valid["kind"].as_str().unwrap();
        let ok = strict_dry_run(&discovery, &client, valid).await;
        assert!(ok.is_ok(), "valid {kind} refused: {ok:?}");

        let mut bad = valid.clone();
        bad.pointer_mut(pointer).unwrap()[typo] = json!(true);
        let status = strict_dry_run(&discovery, &client, &bad)
            .await
            .expect_err(kind);
        // An HTTP 500, as for the Cluster above.
        assert!(status.code >= 400, "{kind}: {status:?}");
        assert!(
            status
                .message
                .contains(&format!("{reported}: field not declared in schema")),
            "{kind}: {status:?}"
        );
        println!("{kind}: {} {}", status.code, status.message);
    }
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
