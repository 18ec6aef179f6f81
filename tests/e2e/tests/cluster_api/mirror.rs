//! An authenticated registry mirror against the real kubeadm bootstrap provider: the login is
//! kept out of every object capstan applies, and Cluster API's own bootstrap provider brings it
//! from the cluster's `<cluster>-registry-credentials` Secret into each machine's bootstrap data
//! (what cloud-init runs on a real machine; CAPD's in-memory backend stands in for the machines).

use base64::Engine;
use capstan_e2e::capi::*;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

const USER: &str = "mirror-robot";
const PASSWORD: &str = "mirror-pw-3b7e91";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authenticated_mirrors_login_reaches_the_bootstrap_data_and_no_object_capstan_applies() {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs = cp.logs_on_failure("an_authenticated_mirrors_login");
    let mut repo = Repo::new(
        "mirror",
        &[("w-mirror", json!([{"name": "md-0", "count": 1}]))],
    );
    repo.edit(
        "w-mirror",
        "  clusterNetwork:\n",
        "  registryMirrorConfiguration:\n    endpoint: mirror.corp.example\n    port: \"5000\"\n    authenticate: true\n  clusterNetwork:\n",
    );
    // The login, created on the management cluster by hand, as an admin may (the other way,
    // encrypted in the directory, is the same Secret once the agent has decrypted it).
    let admin = cp.client();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": repo.ns}})).unwrap();
    Api::<Namespace>::all(admin.clone())
        .patch(&repo.ns, &PatchParams::apply("test"), &Patch::Apply(&ns))
        .await
        .unwrap();
    let name = capstan_templates::spec::registry_credentials_secret("w-mirror");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": repo.ns},
        "stringData": {"username": USER, "password": PASSWORD},
    }))
    .unwrap();
    Api::<Secret>::namespaced(admin.clone(), &repo.ns)
        .patch(&name, &PatchParams::apply("test"), &Patch::Apply(&secret))
        .await
        .unwrap();

    repo.converge(Some("w-mirror")).await;
    let machines = repo.machines("w-mirror");
    assert_eq!(machines.len(), 2, "{machines:?}");
    assert!(all_running(&machines), "{machines:?}");

    // Each machine's bootstrap data, as the kubeadm bootstrap provider wrote it: the login's
    // two files with the Secret's values, and the command that makes containerd's header.
    let b64 = base64::engine::general_purpose::STANDARD;
    for m in &machines {
        let data = shared_kubectl(&[
            "get",
            "machines.cluster.x-k8s.io",
            &m.name,
            "-n",
            &repo.ns,
            "-o",
            "jsonpath={.spec.bootstrap.dataSecretName}",
        ]);
        assert!(!data.is_empty(), "{} has no bootstrap data", m.name);
        let value = shared_kubectl(&[
            "get",
            "secret",
            &data,
            "-n",
            &repo.ns,
            "-o",
            "jsonpath={.data.value}",
        ]);
        let cloud_config = String::from_utf8(b64.decode(value.trim()).unwrap()).unwrap();
        let login = capstan_templates::render::node::MIRROR_LOGIN_DIR;
        for (file, content) in [("username", USER), ("password", PASSWORD)] {
            let at = cloud_config
                .find(&format!("path: {login}/{file}"))
                .unwrap_or_else(|| panic!("{}: no {login}/{file}:\n{cloud_config}", m.name));
            // cloud-init's write_files entry: path, then its content.
            let entry: String = cloud_config[at..]
                .lines()
                .take(6)
                .collect::<Vec<_>>()
                .join("\n");
            assert!(entry.contains(content), "{}: {entry}", m.name);
        }
        assert!(
            cloud_config.contains("hosts.toml") && cloud_config.contains("base64 -w0"),
            "{}: {cloud_config}",
            m.name
        );
    }
    // No object capstan applied holds it, nor its base64: as kubectl reads them.
    for resource in [
        "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
        "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
        "kubeadmconfigs.bootstrap.cluster.x-k8s.io",
        "clusters.anywhere.eks.amazonaws.com",
        "managedclusters.capstan.dev",
    ] {
        let text = shared_kubectl(&["get", resource, "-A", "-o", "json"]);
        for v in [PASSWORD.to_string(), b64.encode(PASSWORD)] {
            assert!(!text.contains(&v), "{resource} holds the password");
        }
    }
}
