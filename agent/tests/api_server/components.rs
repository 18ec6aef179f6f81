//! `capstan install --cluster-api`: what runs a management cluster, installed into a real API
//! server that has none of it, from the components manifests the management cluster's release
//! names, as `clusterctl init` (and `capstan pivot`'s step 2 on a new cluster) installs it.
//!
//! The manifests are the real ones, built the way their projects' releases build them:
//! `kubectl kustomize` of each module's `config/default` (Cluster API core, kubeadm bootstrap and
//! control plane, CAPD, etcdadm's bootstrap provider and controller, the Helm add-on provider),
//! EKS Anywhere's own `config/manifest/eksa-components.yaml`, and cert-manager's CRDs (its
//! release manifest is a Helm render, which does not happen here: its CRDs stand in for it). The
//! fleet's release is a copy of capstan's sample release whose Bundles name them by paths in the
//! repository, as an air-gapped mirror would.
//!
//! What must hold: a variable the manifests need and the environment lacks is named and nothing
//! is written; with it, every object is admitted by the API server with strict field validation
//! (CRDs served, webhooks, Deployments with the manifests' images, the variables filled) and the
//! run waits for the Deployments, naming those not Available. No pod runs here: the test plays
//! the kubelet's and the Deployment controller's part, named as such, by marking them Available,
//! after which the same command goes on and installs capstan, whose required CRDs are now there.

use std::path::{Path, PathBuf};
use std::process::Command;

use capstan_harness::run;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use super::source_support;

const BUNDLE_BASE: &str =
    "https://anywhere-assets.eks.amazonaws.com/releases/bundles/104/artifacts/";

/// `kubectl kustomize dir` into `out`.
fn kustomize(dir: &Path, out: &Path) {
    let o = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    std::fs::write(out, o.stdout).unwrap();
}

/// The fleet: a docker management cluster whose fleet config names a release in the repository,
/// the sample release with its components at paths under `components/`, built from the modules.
fn fleet_with_components(root: &Path) {
    for (p, t) in source_support::agent::fleet_with("comp", &[]) {
        let path = root.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, t).unwrap();
    }
    std::fs::write(
        root.join("clusters/m-comp/fleet.yaml"),
        "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  release:\n    manifest: release/manifest.yaml\n",
    )
    .unwrap();
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../templates/release");
    let release = root.join("release");
    copy_dir(&sample, &release);
    for entry in std::fs::read_dir(&release).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(&path, text.replace(BUNDLE_BASE, "../components/")).unwrap();
        }
    }
    let dirs = capstan_harness::crds::module_dirs().unwrap();
    let module = |m: &str| -> PathBuf { dirs.get(m).unwrap_or_else(|| panic!("{m}")).1.clone() };
    let out = |rel: &str| root.join("components").join(rel);
    let capi = module("sigs.k8s.io/cluster-api");
    // The paths the sample Bundles of v0.26.1 (Cluster API v1.13.2 in its data) name.
    let v = "v1.13.2";
    kustomize(
        &capi.join("core/config/default"),
        &out(&format!(
            "cluster-api/manifests/cluster-api/{v}/core-components.yaml"
        )),
    );
    kustomize(
        &capi.join("bootstrap/kubeadm/config/default"),
        &out(&format!(
            "cluster-api/manifests/bootstrap-kubeadm/{v}/bootstrap-components.yaml"
        )),
    );
    kustomize(
        &capi.join("controlplane/kubeadm/config/default"),
        &out(&format!(
            "cluster-api/manifests/control-plane-kubeadm/{v}/control-plane-components.yaml"
        )),
    );
    kustomize(
        &module("sigs.k8s.io/cluster-api/test").join("infrastructure/docker/config/default"),
        &out(&format!(
            "cluster-api/manifests/infrastructure-docker/{v}/infrastructure-components-development.yaml"
        )),
    );
    kustomize(
        &module("github.com/aws/etcdadm-bootstrap-provider").join("config/default"),
        &out(
            "etcdadm-bootstrap-provider/manifests/bootstrap-etcdadm-bootstrap/bootstrap-components.yaml",
        ),
    );
    kustomize(
        &module("github.com/aws/etcdadm-controller").join("config/default"),
        &out(
            "etcdadm-controller/manifests/bootstrap-etcdadm-controller/v1.0.28/bootstrap-components.yaml",
        ),
    );
    kustomize(
        &module("sigs.k8s.io/cluster-api-addon-provider-helm").join("config/default"),
        &out("addon-helm/addon-components.yaml"),
    );
    let eksa = module("github.com/aws/eks-anywhere").join("config/manifest/eksa-components.yaml");
    let target = out("eks-anywhere/manifests/cluster-controller/eksa-components.yaml");
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::copy(eksa, target).unwrap();
    let crds = module("github.com/cert-manager/cert-manager").join("deploy/crds");
    let mut cert_manager = String::new();
    let mut files: Vec<_> = std::fs::read_dir(&crds)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for f in files {
        cert_manager += "---\n";
        cert_manager += &std::fs::read_to_string(f).unwrap();
    }
    let target = out("cert-manager/manifests/cert-manager.yaml");
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::write(target, cert_manager).unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
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
            "components/addon-helm/addon-components.yaml",
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

    let images = [
        (
            "ETCDADM_BOOTSTRAP_IMAGE",
            "example.com/etcdadm-bootstrap:v1.0.19",
        ),
        (
            "ETCDADM_CONTROLLER_IMAGE",
            "example.com/etcdadm-controller:v1.0.28",
        ),
    ];
    // --export prints what would be applied, components first, and writes nothing.
    let mut export = run::capstan(&[
        "install",
        "--export",
        "--cluster-api",
        "--checkout",
        root.to_str().unwrap(),
        "--addon-provider",
        "components/addon-helm/addon-components.yaml",
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
