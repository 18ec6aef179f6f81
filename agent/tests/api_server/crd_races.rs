//! A CRD is marked Established before the API server's discovery documents list its kind (they
//! are rebuilt asynchronously, later on a loaded machine). Whatever capstan does right after a
//! CRD appears must not take the kind for unknown: `install` returns only once discovery serves
//! the status CRD's kind, and a restore right after an operator created a CRD waits for it.
//! (CI once failed on a restore right after `install_crd` that found `ManagedCluster` unknown.)
//! Two spinning threads keep the API server's controllers short of CPU, as a loaded CI machine
//! does: without the waits the install test failed in two runs of three, the restore test in
//! three of three.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::json;

/// Threads that only spin until dropped.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn two_cores() -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Load { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A control plane of the test's own, started without capstan's CRDs.
async fn start_control_plane() -> capstan_harness::ControlPlane {
    capstan_harness::ControlPlane::start_with(capstan_harness::StartOptions {
        install_crds: false,
        ..Default::default()
    })
    .await
    .unwrap()
}

/// Deletes the status CRD and waits, on a watch, until it is gone. Its deletion waits for the
/// API server's finalizer to remove the kind's objects, which takes long on a loaded machine:
/// the bound only ends a test that would otherwise hang.
async fn delete_status_crd(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let uid = crds
        .get(capstan::status::CRD_NAME)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    crds.delete(capstan::status::CRD_NAME, &DeleteParams::default())
        .await
        .unwrap();
    let gone = kube::runtime::wait::await_condition(
        crds,
        capstan::status::CRD_NAME,
        kube::runtime::wait::conditions::is_deleted(&uid),
    );
    tokio::time::timeout(Duration::from_secs(600), gone)
        .await
        .expect("the status CRD is never deleted")
        .unwrap();
}

fn managed_cluster_kind() -> GroupVersionKind {
    let (group, version) = capstan::status::API_VERSION.split_once('/').unwrap();
    GroupVersionKind::gvk(group, version, "ManagedCluster")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_returns_once_discovery_serves_the_status_kind() {
    let cp = start_control_plane().await;
    for round in 0..5 {
        // The spinning threads stop before the deletion: it is not what this test loads.
        let load = Load::two_cores();
        capstan::install::install_crd(&cp.client()).await.unwrap();
        let discovery = kube::discovery::Discovery::new(cp.client())
            .run_aggregated()
            .await
            .unwrap();
        assert!(
            discovery.resolve_gvk(&managed_cluster_kind()).is_some(),
            "round {round}: ManagedCluster not served right after install_crd returned"
        );
        drop(load);
        delete_status_crd(&cp.client()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_right_after_the_crd_is_created_restores_its_objects() {
    let cp = start_control_plane().await;
    let dir = tempfile::tempdir().unwrap();
    let record = json!({
        "apiVersion": capstan::status::API_VERSION,
        "kind": "ManagedCluster",
        "metadata": {"name": "w-restored", "namespace": capstan::status::NAMESPACE,
            "uid": "0b8a3c52-0000-4000-8000-000000000001", "resourceVersion": "12"},
        "spec": {"management": "m", "directory": "clusters/m/workload-clusters/w-restored"},
        "status": {"message": "as backed up"},
    });
    std::fs::write(
        dir.path().join("objects.json"),
        serde_json::to_string(&json!([record])).unwrap(),
    )
    .unwrap();
    // A finished backup has its manifest (written last).
    std::fs::write(
        dir.path().join("manifest.json"),
        json!({"kind": "Backup", "objects": 1}).to_string(),
    )
    .unwrap();
    let crd: CustomResourceDefinition =
        serde_json::from_value(capstan::install::manifests::crd()).unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(cp.client());
    for round in 0..5 {
        let load = Load::two_cores();
        // As an operator would: the CRD created, the restore at once.
        crds.create(&PostParams::default(), &crd).await.unwrap();
        let restored = capstan::backup::restore(
            &cp.client(),
            dir.path(),
            &capstan::backup::Identities::none(),
        )
        .await
        .unwrap();
        assert!(
            restored.created == 1 && restored.unknown.is_empty(),
            "round {round}: {restored:?}"
        );
        let out = Command::new("kubectl")
            .args(["--kubeconfig"])
            .arg(cp.kubeconfig_path())
            .args([
                "get",
                "managedclusters.capstan.dev",
                "-n",
                capstan::status::NAMESPACE,
                "w-restored",
                "-o",
                "jsonpath={.spec.directory} {.status.message}",
            ])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "clusters/m/workload-clusters/w-restored as backed up",
            "round {round}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        drop(load);
        delete_status_crd(&cp.client()).await;
    }
}
