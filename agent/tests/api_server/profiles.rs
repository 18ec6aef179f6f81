//! `--cluster-profiles`: the real binary keeps a ClusterProfile (the upstream CRD, installed by
//! the harness from the `sigs.k8s.io/cluster-inventory-api` module) for every workload cluster
//! it manages; a tombstone removes that cluster's profile and leaves the other's. Also: the
//! CRD capstan ships is the upstream module's file, byte for byte.

use std::time::{Duration, Instant};

use capstan::install::manifests;
use capstan::reconcile::profile;

use crate::source_support::Upstream;
use crate::source_support::agent::{capstan_run, fleet_with, wait_for_revision};
use crate::source_support::daemon::GitDaemon;

#[test]
fn the_shipped_crd_is_the_upstream_modules() {
    let files = capstan_harness::crds::crd_files().unwrap();
    let upstream = files
        .iter()
        .find(|f| f.name == profile::CRD_NAME)
        .expect("the harness installs the ClusterProfile CRD");
    assert_eq!(upstream.module, "sigs.k8s.io/cluster-inventory-api");
    let text = std::fs::read_to_string(&upstream.path).unwrap();
    assert!(
        text == profile::CRD_YAML,
        "agent/manifests/multicluster.x-k8s.io_clusterprofiles.yaml differs from {} ({}): copy it again",
        upstream.path.display(),
        upstream.version
    );
}

/// `kubectl get clusterprofile NAME -n NS -o json`, None when it does not exist.
fn kubectl_get(kubeconfig: &std::path::Path, ns: &str, name: &str) -> Option<serde_json::Value> {
    let out = capstan_harness::run::kubectl_output(
        kubeconfig,
        &[
            "get",
            "clusterprofiles.multicluster.x-k8s.io",
            name,
            "-n",
            ns,
            "-o",
            "json",
        ],
    );
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("NotFound"), "kubectl get {ns}/{name}: {err}");
        return None;
    }
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

/// Waits (blocking, 90 s at most) until `f` holds; panics with `what` and the agent's log.
fn wait_until_sync(what: &str, log: &std::path::Path, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "{what} never happened:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test]
async fn a_managed_cluster_has_a_profile_and_a_tombstone_removes_it() {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let ns = "inventory-prof";
    // The Roles `capstan install --cluster-profiles` adds (the CRD is the harness's).
    let mut o = manifests::Options::new("x", "main", "m-prof");
    o.cluster_profiles = Some(ns.into());
    // (Not the backups' recipients' Role: not this test's.)
    o.backup_plaintext = true;
    let extras: Vec<serde_json::Value> = manifests::extras(&o)
        .into_iter()
        .filter(|x| x["kind"] != "CustomResourceDefinition")
        .collect();
    capstan::install::apply(&client, &extras, Duration::from_secs(30))
        .await
        .unwrap();

    let files = fleet_with("prof", &["w-prof-a", "w-prof-b"]);
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let up = Upstream::new(&refs);
    let c1 = up.commit("two workload clusters");
    up.push();
    let daemon = GitDaemon::start(&up.root);
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("agent.log");
    let admin = cp.kubeconfig_path();
    let kubeconfig = capstan::install::testing::agent_kubeconfig(cp).await;
    let _agent = capstan_run(
        &[
            "--repo",
            &daemon.url("repo.git"),
            "--branch",
            "main",
            "--interval",
            "2s",
            "--management",
            "m-prof",
            "--cluster-profiles",
            ns,
        ],
        &kubeconfig,
        tmp.path(),
        None,
        &log,
    );
    assert!(
        wait_for_revision(&client, "w-prof-a", &c1, Duration::from_secs(90))
            .await
            .is_some(),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );

    // Both workload clusters have their profile; the management cluster has none.
    let mut got = None;
    wait_until_sync("w-prof-a's and w-prof-b's ClusterProfiles", &log, || {
        got = kubectl_get(admin, ns, "w-prof-a");
        got.is_some() && kubectl_get(admin, ns, "w-prof-b").is_some()
    });
    let p = got.unwrap();
    assert_eq!(
        p["metadata"]["labels"]["x-k8s.io/cluster-manager"],
        "capstan"
    );
    assert_eq!(p["spec"]["clusterManager"]["name"], "capstan");
    assert_eq!(p["spec"]["displayName"], "w-prof-a");
    let types: Vec<&str> = p["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["ControlPlaneHealthy", "Joined"]);
    // No Cluster API controllers run here: nothing is provisioned.
    let joined = &p["status"]["conditions"][1];
    assert_eq!(joined["status"], "False");
    assert_eq!(
        p["status"]["version"]["kubernetes"]
            .as_str()
            .map(|v| v.starts_with("v1.")),
        Some(true)
    );
    assert_eq!(
        p["status"]["properties"][0],
        serde_json::json!({"name": profile::KUBECONFIG_PROPERTY, "value": "t-prof/w-prof-a-kubeconfig"})
    );
    assert!(kubectl_get(admin, ns, "m-prof").is_none());
    let b_before = kubectl_get(admin, ns, "w-prof-b").unwrap();

    // A tombstone for w-prof-a: its profile goes, w-prof-b's stays as it was.
    let dir: Vec<&str> = files
        .iter()
        .map(|(p, _)| p.as_str())
        .filter(|p| p.contains("/w-prof-a/"))
        .collect();
    let tomb_path = format!("{}/tombstone.yaml", dir[0].rsplit_once('/').unwrap().0);
    let tomb = capstan_layout::intent::document("Tombstone", "test");
    up.commit_and_push(&[(&tomb_path, &tomb)], &dir, "tombstone w-prof-a");
    wait_until_sync("w-prof-a's ClusterProfile removed", &log, || {
        kubectl_get(admin, ns, "w-prof-a").is_none()
    });
    let b_after = kubectl_get(admin, ns, "w-prof-b").unwrap();
    assert_eq!(b_after["metadata"]["uid"], b_before["metadata"]["uid"]);
    assert_eq!(b_after["spec"], b_before["spec"]);
}
