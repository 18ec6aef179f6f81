//! The backup a management cluster writes before it upgrades its own control plane, as the
//! agent's pass writes it: with no recipients to encrypt to (the default Secret absent) nothing
//! is written and the whole upgrade is held with that reason; once the admin's Secret holds a
//! public key, the backup is written encrypted to it — no key of a cluster in the clear — and
//! the upgrade goes out. (The whole self-upgrade, on the Cluster API controllers, is
//! `self_upgrade.rs`.)

use std::path::Path;

use capstan::backup::{Encryption, Identities};
use capstan::plan::Action;
use capstan::reconcile::{Options, reconcile};
use capstan_e2e::FleetDir;
use capstan_layout::scaffold::ClusterRequest;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

fn control_plane_version(o: &DynamicObject) -> String {
    o.data["spec"]["version"].as_str().unwrap_or("").to_string()
}

#[tokio::test]
async fn a_self_upgrade_waits_for_recipients_and_its_backup_is_encrypted_to_them() {
    let cp = capstan_harness::shared().await;
    let tag = "bk-su";
    let (mgmt, ns) = (format!("m-{tag}"), format!("t-{tag}"));
    let req = |name: &str, management: Option<&str>, pods: &str, svc: &str| ClusterRequest {
        name: name.into(),
        management: management.map(str::to_string),
        provider: "docker".into(),
        namespace: Some(ns.clone()),
        kubernetes_version: Some("1.33".into()),
        pod_cidr: Some(pods.into()),
        service_cidr: Some(svc.into()),
        ..Default::default()
    };
    let mut files = FleetDir::new(req(&mgmt, None, "192.168.0.0/16", "10.96.0.0/12"));
    let workload = format!("w-{tag}");
    files.add(req(
        &workload,
        Some(&mgmt),
        "172.16.0.0/16",
        "10.112.0.0/16",
    ));
    let client = capstan::install::testing::agent_client(cp).await;
    let backups = tempfile::tempdir().unwrap();
    let opts = |revision: &str, encryption: Encryption| Options {
        revision: revision.into(),
        management: Some(mgmt.clone()),
        backup_dir: Some(backups.path().to_path_buf()),
        backup_encryption: encryption,
        ..Default::default()
    };
    let first = reconcile(&client, &files.fleet(), &opts("r1", Encryption::default()))
        .await
        .unwrap();
    assert!(!first.has_failures());
    // A key of the workload cluster's, as Cluster API keeps it.
    let marker = "capstan-self-upgrade-key-5b1f0c9e";
    let ca: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{workload}-ca"), "namespace": ns,
            "labels": {"cluster.x-k8s.io/cluster-name": workload}},
        "type": "cluster.x-k8s.io/secret",
        "stringData": {"tls.key": format!("-----BEGIN RSA PRIVATE KEY-----\n{marker}\n")}}))
    .unwrap();
    Api::<Secret>::namespaced(cp.client(), &ns)
        .create(&PostParams::default(), &ca)
        .await
        .unwrap();

    // The management cluster goes to 1.34 (upgraded although no controller reports it healthy
    // here).
    files.edit(
        &mgmt,
        "kubernetesVersion: \"1.33\"",
        "kubernetesVersion: \"1.34\"",
    );
    files.edit(
        &mgmt,
        &format!("metadata:\n  name: \"{mgmt}\"\n"),
        &format!(
            "metadata:\n  name: \"{mgmt}\"\n  annotations:\n    capstan.dev/upgrade-when-unhealthy: \"no Cluster API controllers here\"\n"
        ),
    );
    let kcp_api = Api::<DynamicObject>::namespaced_with(
        cp.client(),
        &ns,
        &ApiResource {
            group: "controlplane.cluster.x-k8s.io".into(),
            version: "v1beta2".into(),
            api_version: "controlplane.cluster.x-k8s.io/v1beta2".into(),
            kind: "KubeadmControlPlane".into(),
            plural: "kubeadmcontrolplanes".into(),
        },
    );
    let kcp_name = kcp_api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|k| k.metadata.name)
        .find(|n| n.starts_with(&mgmt))
        .unwrap();
    let before = control_plane_version(&kcp_api.get(&kcp_name).await.unwrap());
    assert!(before.starts_with("v1.33"), "{before}");

    // 1. The default: recipients from capstan-system/capstan-backup-recipients, which the
    //    admin has not created. No backup, nothing of the upgrade applied, the reason said.
    let held = reconcile(&client, &files.fleet(), &opts("r2", Encryption::default()))
        .await
        .unwrap();
    let m = held.clusters.iter().find(|c| c.name == mgmt).unwrap();
    // Nothing of the management cluster goes out; the control plane's change (and whatever
    // else its stages would have applied now) waits for the backup, saying why.
    assert!(
        m.plan
            .entries
            .iter()
            .all(|e| !matches!(e.action, Action::Create | Action::Update | Action::Prune)),
        "{:#?}",
        m.plan.entries
    );
    let kcp = m
        .plan
        .entries
        .iter()
        .find(|e| e.object.kind == "KubeadmControlPlane")
        .unwrap();
    assert_eq!(kcp.action, Action::Held, "{kcp:#?}");
    let reason = kcp.reason.as_deref().unwrap_or("");
    assert!(
        reason.starts_with("waits for the backup")
            && reason.contains(
                "no backup recipients: the Secret capstan-system/capstan-backup-recipients does not exist"
            )
            && reason.contains("--backup-plaintext"),
        "{reason}"
    );
    assert!(m.message.contains("no backup recipients"), "{}", m.message);
    assert_eq!(std::fs::read_dir(backups.path()).unwrap().count(), 0);
    assert_eq!(
        control_plane_version(&kcp_api.get(&kcp_name).await.unwrap()),
        before
    );

    // 2. The admin's Secret, one public key: the backup is written, encrypted to it, and the
    //    upgrade goes out.
    let key = age::x25519::Identity::generate();
    let recipients: Secret = serde_json::from_value(json!({
        "metadata": {"name": "fleet-backup-recipients", "namespace": ns},
        "stringData": {"recipients": format!("{}\n", key.to_public())}}))
    .unwrap();
    Api::<Secret>::namespaced(cp.client(), &ns)
        .create(&PostParams::default(), &recipients)
        .await
        .unwrap();
    let from_secret = Encryption::Secret {
        namespace: ns.clone(),
        name: "fleet-backup-recipients".into(),
    };
    let out = reconcile(&client, &files.fleet(), &opts("r2", from_secret))
        .await
        .unwrap();
    let m = out.clusters.iter().find(|c| c.name == mgmt).unwrap();
    assert!(
        !m.plan.entries.iter().any(|e| e
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("waits for the backup"))),
        "{:#?}",
        m.plan.entries
    );
    assert!(
        control_plane_version(&kcp_api.get(&kcp_name).await.unwrap()).starts_with("v1.34"),
        "the upgrade did not go out: {}",
        m.message
    );
    let dirs: Vec<_> = std::fs::read_dir(backups.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let dir: &Path = &dirs[0];
    assert_eq!(
        capstan::backup::encrypted_to(dir).unwrap(),
        Some(vec![key.to_public().to_string()])
    );
    let bytes = std::fs::read(dir.join(capstan::backup::OBJECTS_ENCRYPTED)).unwrap();
    assert!(!bytes.windows(marker.len()).any(|w| w == marker.as_bytes()));
    assert!(!dir.join(capstan::backup::OBJECTS_PLAIN).exists());
    // The identity (held by the admin, not the agent) reads the key back.
    let objects = capstan::backup::read(dir, &Identities::from(key.clone())).unwrap();
    let backed_up_ca = objects
        .iter()
        .find(|o| o["kind"] == "Secret" && o["metadata"]["name"] == format!("{workload}-ca"))
        .unwrap();
    let tls_key: k8s_openapi::ByteString =
        serde_json::from_value(backed_up_ca["data"]["tls.key"].clone()).unwrap();
    assert!(String::from_utf8_lossy(&tls_key.0).contains(marker));
    assert!(
        objects
            .iter()
            .any(|o: &Value| o["kind"] == "KubeadmControlPlane"
                && o["metadata"]["name"] == kcp_name.as_str())
    );
}
