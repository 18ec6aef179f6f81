//! `capstan dev up` / `dev down` support: a control plane started by one process keeps
//! running after that process exits, and `stop_persistent` removes every trace.

use std::process::{Command, Stdio};
use std::time::Duration;

use capstan_harness::{ControlPlane, PersistentError};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;

const CHILD_ENV: &str = "CAPSTAN_HARNESS_PERSISTENT_CHILD";

#[tokio::test]
async fn persistent_control_plane_outlives_its_starter_and_stops_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dev");

    // Start it from a separate process that exits right away (like `capstan dev up`).
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "start_persistent_helper",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{status}");

    let state = ControlPlane::persistent_state(&dir)
        .unwrap()
        .expect("state.json");
    assert!(state.is_running(), "{state:?}");
    assert!(state.crd_count > 50, "{state:?}");
    assert_eq!(state.versions(), capstan_harness::versions().unwrap());

    // Usable through the kubeconfig it wrote.
    let kc = kube::config::Kubeconfig::read_from(&state.endpoints.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    capstan_harness::install_crypto_provider();
    let client = kube::Client::try_from(config).unwrap();
    assert_eq!(
        client.apiserver_version().await.unwrap().git_version,
        state.kubernetes_version
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    crds.get("clusters.anywhere.eks.amazonaws.com")
        .await
        .unwrap();

    // A second `dev up` refuses instead of starting a twin.
    let again = ControlPlane::start_persistent(&dir).await;
    assert!(
        matches!(again, Err(PersistentError::AlreadyRunning { .. })),
        "{again:?}"
    );

    // `dev down`.
    assert!(ControlPlane::stop_persistent(&dir).unwrap());
    assert!(!state.pids.etcd.is_alive() && !state.pids.kube_apiserver.is_alive());
    assert!(!dir.exists());
    assert!(
        !ControlPlane::stop_persistent(&dir).unwrap(),
        "second stop is a no-op"
    );
}

#[test]
fn refuses_to_touch_a_foreign_directory() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("precious.txt"), "keep me").unwrap();
    let err = ControlPlane::stop_persistent(tmp.path()).unwrap_err();
    assert!(
        matches!(err, PersistentError::NotAControlPlaneDir(_)),
        "{err:?}"
    );
    assert!(tmp.path().join("precious.txt").exists());
}

/// Not a test: the `dev up` stand-in run as a child process above.
#[tokio::test]
#[ignore = "helper run as a child process by the persistent test"]
async fn start_persistent_helper() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let state = ControlPlane::start_persistent(std::path::Path::new(&dir))
        .await
        .unwrap();
    assert!(state.is_running());
    tokio::time::sleep(Duration::from_millis(10)).await;
}
