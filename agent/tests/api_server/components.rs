//! `capstan install --cluster-api`: what runs a management cluster, installed into a real API
//! server that has none of it, from the components manifests the management cluster's release
//! names, as `clusterctl init` (and `capstan pivot`'s step 2 on a new cluster) installs it.
//!
//! The manifests are the real ones, built the way their projects' releases build them
//! ([`capstan_harness::components`]); the fleet's release is a copy of capstan's sample release
//! whose Bundles name them by paths in the repository, as an air-gapped mirror would.
//!
//! What must hold: a variable the manifests need and the environment lacks is named and nothing
//! is written; with it, every object is admitted by the API server with strict field validation
//! (CRDs served, webhooks, Deployments with the manifests' images, the variables filled) and the
//! run waits for the Deployments, naming those not Available. No pod runs here: the test plays
//! the kubelet's and the Deployment controller's part, named as such, by marking them Available,
//! after which the same command goes on and installs capstan, whose required CRDs are now there.

use std::path::Path;

use capstan_harness::{components, run};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use super::source_support;

/// The fleet: a docker management cluster whose fleet config names the release with components
/// in the repository.
fn fleet_with_components(root: &Path) {
    for (p, t) in source_support::agent::fleet_with("comp", &[]) {
        let path = root.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, t).unwrap();
    }
    std::fs::write(
        root.join("clusters/m-comp/fleet.yaml"),
        components::FLEET_CONFIG,
    )
    .unwrap();
    components::write_release(root);
}

#[tokio::test]
async fn cluster_api_and_the_provider_are_installed_from_the_release_components() {
    let cp = capstan_harness::ControlPlane::start_with(capstan_harness::StartOptions {
        install_crds: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fleet");
    fleet_with_components(&root);
    let install = |env: &[(&str, &str)]| {
        let mut c = run::capstan(&[
            "install",
            "--cluster-api",
            "--checkout",
            root.to_str().unwrap(),
            "--addon-provider",
            components::ADDON_PROVIDER,
            "--components-wait",
            "2s",
            "--repo",
            "https://example.com/fleet.git",
            "--management",
            "m-comp",
            "--replicas",
            "0",
        ]);
        c.arg("--kubeconfig").arg(cp.kubeconfig_path());
        c.env_remove("ETCDADM_BOOTSTRAP_IMAGE")
            .env_remove("ETCDADM_CONTROLLER_IMAGE");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let namespaces: Api<Namespace> = Api::all(cp.client());

    // etcdadm's manifests need their images from the environment: named, nothing written.
    let out = install(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("etcdadm-bootstrap: set the variables it needs (as for clusterctl init): ETCDADM_BOOTSTRAP_IMAGE"),
        "{err}"
    );
    assert!(
        namespaces.get_opt("capi-system").await.unwrap().is_none(),
        "written before every manifest was read"
    );

    let images = components::IMAGES;
    // --export prints what would be applied, components first, and writes nothing.
    let mut export = run::capstan(&[
        "install",
        "--export",
        "--cluster-api",
        "--checkout",
        root.to_str().unwrap(),
        "--addon-provider",
        components::ADDON_PROVIDER,
        "--repo",
        "https://example.com/fleet.git",
        "--management",
        "m-comp",
    ]);
    for (k, v) in images {
        export.env(k, v);
    }
    let out = export.output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let components_at = printed
        .find("capstan.dev/component: cluster-api")
        .expect("the components are printed");
    let agent_at = printed
        .find("name: capstan\n")
        .expect("capstan's own manifests are printed");
    assert!(components_at < agent_at, "the components come first");
    assert!(printed.contains("example.com/etcdadm-controller:v1.0.28"));
    assert!(
        namespaces.get_opt("capi-system").await.unwrap().is_none(),
        "--export wrote"
    );

    // With the variables: every object admitted; the run waits for Deployments no kubelet runs.
    let out = install(&images);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("not Available after 2s"), "{err}");
    assert!(
        err.contains("Deployment/capi-system/capi-controller-manager"),
        "{err}"
    );
    let crds = run::kubectl_ok(
        cp.kubeconfig_path(),
        &["get", "crd", "-o", "jsonpath={.items[*].metadata.name}"],
    );
    for crd in capstan::install::REQUIRED_CRDS.iter().chain(&[
        "certificates.cert-manager.io",
        "etcdadmclusters.etcdcluster.cluster.x-k8s.io",
    ]) {
        assert!(
            crds.split(' ').any(|c| c == *crd),
            "{crd} not installed: {crds}"
        );
    }
    let deployments: Api<Deployment> = Api::all(cp.client());
    let lp = ListParams::default().labels(capstan::components::COMPONENT_LABEL);
    let listed = deployments.list(&lp).await.unwrap().items;
    let by_name = |ns: &str, name: &str| {
        listed
            .iter()
            .find(|d| {
                d.metadata.namespace.as_deref() == Some(ns)
                    && d.metadata.name.as_deref() == Some(name)
            })
            .unwrap_or_else(|| panic!("no Deployment {ns}/{name}"))
    };
    let spec_of = |d: &Deployment| serde_json::to_value(&d.spec).unwrap();
    let core = spec_of(by_name("capi-system", "capi-controller-manager"));
    let args = core
        .pointer("/template/spec/containers/0/args")
        .unwrap()
        .to_string();
    assert!(!args.contains("${"), "a variable is left: {args}");
    assert!(args.contains("MachinePool=true"), "{args}");
    assert_eq!(
        core.pointer("/template/spec/containers/0/image").unwrap(),
        "gcr.io/k8s-staging-cluster-api/cluster-api-controller:main"
    );
    let etcdadm = spec_of(by_name(
        "etcdadm-bootstrap-provider-system",
        "etcdadm-bootstrap-provider-controller-manager",
    ));
    assert!(
        etcdadm
            .to_string()
            .contains("example.com/etcdadm-bootstrap:v1.0.19"),
        "{etcdadm}"
    );
    assert!(listed.len() >= 8, "{} Deployments", listed.len());
    let webhooks = run::kubectl_ok(
        cp.kubeconfig_path(),
        &["get", "validatingwebhookconfigurations", "-o", "name"],
    );
    assert!(
        webhooks.contains("capi-validating-webhook-configuration"),
        "{webhooks}"
    );
    // Applied as capstan-components, every object labelled with its component.
    let labelled = run::kubectl_ok(
        cp.kubeconfig_path(),
        &[
            "get",
            "crd",
            "clusters.cluster.x-k8s.io",
            "-o",
            "jsonpath={.metadata.labels.capstan\\.dev/component}",
        ],
    );
    assert_eq!(labelled.trim(), "cluster-api");

    // Playing the kubelet and the Deployment controller (named as such: no node runs pods here):
    // every component Deployment is marked Available.
    for d in &listed {
        let api: Api<Deployment> =
            Api::namespaced(cp.client(), d.metadata.namespace.as_deref().unwrap());
        api.patch_status(
            d.metadata.name.as_deref().unwrap(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1,
                "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                    "lastUpdateTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})),
        )
        .await
        .unwrap();
    }
    // The same command goes on: the components again (no change), then capstan itself.
    let out = install(&images);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("their Deployments Available"), "{err}");
    let agent = run::kubectl_ok(
        cp.kubeconfig_path(),
        &[
            "get",
            "deployment",
            "-n",
            capstan::status::NAMESPACE,
            "-o",
            "name",
        ],
    );
    assert!(agent.contains("deployment.apps/capstan"), "{agent}");
}
