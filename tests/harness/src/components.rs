//! A release whose Bundles name real components manifests, for the tests of capstan's
//! components install (`capstan install --cluster-api`, `capstan pivot`'s step 2): capstan's
//! sample release copied into a fleet repository, its components' https locations turned into
//! paths under `components/`, and there the manifests built as their projects' releases build
//! them: `kubectl kustomize` of each module's `config/default` (Cluster API core, kubeadm
//! bootstrap and control plane, CAPD, etcdadm's bootstrap provider and controller, the Helm
//! add-on provider, at [`ADDON_PROVIDER`]), EKS Anywhere's own
//! `config/manifest/eksa-components.yaml`, and cert-manager's CRDs (its release manifest is a
//! Helm render, which does not happen here: its CRDs stand in for it). Modules come from the
//! Go module cache ([`crate::crds::module_dirs`]), never copied into the repository.
//!
//! etcdadm's manifests need [`IMAGES`] in the environment.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The add-on provider's manifest, from the repository root (`--addon-provider`).
pub const ADDON_PROVIDER: &str = "components/addon-helm/addon-components.yaml";

/// The fleet config naming the release under `release/` (for `clusters/<mgmt>/fleet.yaml`).
pub const FLEET_CONFIG: &str = "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  release:\n    manifest: release/manifest.yaml\n";

/// The variables etcdadm's manifests need (their images), with test values.
pub const IMAGES: [(&str, &str); 2] = [
    (
        "ETCDADM_BOOTSTRAP_IMAGE",
        "example.com/etcdadm-bootstrap:v1.0.19",
    ),
    (
        "ETCDADM_CONTROLLER_IMAGE",
        "example.com/etcdadm-controller:v1.0.28",
    ),
];

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

/// Writes `release/` and `components/` into the repository at `root`.
pub fn write_release(root: &Path) {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates/release");
    let release = root.join("release");
    copy_dir(&sample, &release);
    for entry in std::fs::read_dir(&release).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(&path, text.replace(BUNDLE_BASE, "../components/")).unwrap();
        }
    }
    let dirs = crate::crds::module_dirs().unwrap();
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
