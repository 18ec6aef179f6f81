//! Secrets of a cluster's own directory kept encrypted with SOPS (written by the real `sops`),
//! decrypted by the agent in memory and applied on the management cluster: the management
//! directory's and a workload directory's. Asserted from the API server with kubectl.

use std::path::Path;

use capstan_harness::run::kubectl;

use super::addons::{Bed, identities_secret, managed_cluster_conditions};

const IDENTITIES: &str = "sops-age-sealed-test";

/// The message of the condition whose reason is `reason`, if any.
fn reason_message(cluster: &str, reason: &str) -> Option<String> {
    managed_cluster_conditions(cluster)
        .into_iter()
        .find(|c| c.2 == reason)
        .map(|c| c.3)
}

/// A Secret on the management cluster, as kubectl reads it; None when there is none.
fn live_secret(kubeconfig: &Path, ns: &str, name: &str) -> Option<serde_json::Value> {
    let (ok, text) = kubectl(kubeconfig, &["-n", ns, "get", "secret", name, "-o", "json"]);
    if !ok {
        assert!(text.contains("NotFound"), "{text}");
        return None;
    }
    Some(serde_json::from_str(&text).unwrap())
}

/// The management directory's and a workload directory's encrypted Secrets are decrypted with
/// the identities of the Secret the admin names and applied on the management cluster; the
/// value is nowhere else (the ManagedCluster status, the plan), and the recorded content hash
/// is keyed (not the hash of the plain Secret). Without the identities, with a foreign key, or
/// with a file changed after encryption, that cluster's revision is refused (DecryptionFailed,
/// naming the file) and nothing of it is applied, the other cluster going on; rotating the
/// keys with `sops updatekeys` writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_directorys_encrypted_secrets_are_decrypted_onto_the_management_cluster() {
    let cp = capstan_harness::shared().await;
    let kc = cp.kubeconfig_path();
    let mut bed = Bed::new("sealed", &["ws-seal"]);
    bed.sops = Some(("capstan-system".into(), IDENTITIES.into()));
    let (mgmt, ns) = (bed.mgmt.clone(), bed.ns.clone());
    let fleet_key = age::x25519::Identity::generate();
    let recipient = fleet_key.to_public().to_string();
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("keys.txt");
    {
        use age::secrecy::ExposeSecret;
        std::fs::write(&key_file, fleet_key.to_string().expose_secret()).unwrap();
    }
    bed.write(
        &format!("clusters/{mgmt}/fleet.yaml"),
        &format!("apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  sops:\n    ageRecipients: [{recipient}]\n"),
    );
    let args = capstan_e2e::sops::data_only(&recipient);
    let mgmt_plain = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {mgmt}-registry\n  namespace: {ns}\n  annotations:\n    capstan.dev/encrypted-for: {mgmt}:{mgmt}\ntype: Opaque\nstringData:\n  password: hunter2-mgmt\n"
    );
    let ws_plain = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: ws-seal-credentials\n  annotations:\n    capstan.dev/encrypted-for: {mgmt}:ws-seal\ntype: Opaque\nstringData:\n  username: admin\n  password: hunter2-ws\n"
    );
    let mgmt_sealed =
        capstan_e2e::sops::encrypt(keys.path(), &key_file, "m.yaml", &mgmt_plain, &args);
    let ws_sealed = capstan_e2e::sops::encrypt(keys.path(), &key_file, "w.yaml", &ws_plain, &args);
    let mgmt_file = format!("clusters/{mgmt}/registry.sops.yaml");
    let ws_file = format!("clusters/{mgmt}/workload-clusters/ws-seal/credentials.sops.yaml");
    bed.write(&mgmt_file, &mgmt_sealed);
    bed.write(&ws_file, &ws_sealed);

    // No identities yet: both clusters refused, naming the Secret; nothing of them applied.
    let out = bed.reconcile("r0").await;
    for name in [mgmt.as_str(), "ws-seal"] {
        let c = out.clusters.iter().find(|c| c.name == name).unwrap();
        assert!(
            c.message.contains(IDENTITIES) && c.message.contains("does not exist"),
            "{name}: {}",
            c.message
        );
        let why = reason_message(name, "DecryptionFailed")
            .unwrap_or_else(|| panic!("{name}: {:?}", managed_cluster_conditions(name)));
        assert!(why.contains(IDENTITIES), "{why}");
    }
    assert!(live_secret(kc, &ns, "ws-seal-credentials").is_none());
    assert!(
        !kubectl(
            kc,
            &["-n", &ns, "get", "clusters.cluster.x-k8s.io", "ws-seal"]
        )
        .0,
        "the refused cluster was applied"
    );

    identities_secret(IDENTITIES, &fleet_key).await;
    let planned = format!("{:?}", bed.plan("r1").await);
    bed.reconcile("r1").await;
    let b64 = |s: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    let m = live_secret(kc, &ns, &format!("{mgmt}-registry")).expect("the management's Secret");
    assert_eq!(m["data"]["password"], b64("hunter2-mgmt"), "{m}");
    let w = live_secret(kc, &ns, "ws-seal-credentials").expect("the workload's Secret");
    assert_eq!(w["data"]["password"], b64("hunter2-ws"), "{w}");
    assert_eq!(w["data"]["username"], b64("admin"), "{w}");
    // Nowhere else: the statuses and the plan hold neither value nor its base64.
    for name in [mgmt.as_str(), "ws-seal"] {
        let status = kubectl(
            kc,
            &[
                "-n",
                "capstan-system",
                "get",
                "managedclusters.capstan.dev",
                name,
                "-o",
                "json",
            ],
        )
        .1;
        assert!(
            reason_message(name, "DecryptionFailed").is_none(),
            "{status}"
        );
        for text in [&status, &planned] {
            for v in ["hunter2", &b64("hunter2-ws"), &b64("hunter2-mgmt")] {
                assert!(!text.contains(v), "{v} in {text}");
            }
        }
    }

    // Keys rotated: both files re-encrypted for the fleet's key and a new one (`sops
    // updatekeys`), the agent given only the new key: nothing is written.
    let version = |name: &str| {
        live_secret(kc, &ns, name).unwrap()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let before = (
        version(&format!("{mgmt}-registry")),
        version("ws-seal-credentials"),
    );
    let new_key = age::x25519::Identity::generate();
    let both = format!("{recipient},{}", new_key.to_public());
    let rotated_ws =
        capstan_e2e::sops::updatekeys(keys.path(), &key_file, "w2.yaml", &ws_sealed, &both);
    let rotated_mgmt =
        capstan_e2e::sops::updatekeys(keys.path(), &key_file, "m2.yaml", &mgmt_sealed, &both);
    assert_ne!(rotated_ws, ws_sealed);
    assert!(rotated_ws.contains(&new_key.to_public().to_string()));
    bed.write(&ws_file, &rotated_ws);
    bed.write(&mgmt_file, &rotated_mgmt);
    identities_secret(IDENTITIES, &new_key).await;
    bed.reconcile("r2").await;
    assert!(reason_message("ws-seal", "DecryptionFailed").is_none());
    assert_eq!(
        (
            version(&format!("{mgmt}-registry")),
            version("ws-seal-credentials")
        ),
        before,
        "a re-encryption rewrote a Secret"
    );

    // Changed after encryption (renamed, still a name of its cluster): the MAC refuses it; the
    // workload is refused naming the file and keeps what it had; the management cluster goes on.
    bed.write(
        &ws_file,
        &rotated_ws.replace("ws-seal-credentials", "ws-seal-credentialz"),
    );
    let out = bed.reconcile("r3").await;
    let why = reason_message("ws-seal", "DecryptionFailed")
        .unwrap_or_else(|| panic!("{:?}", managed_cluster_conditions("ws-seal")));
    assert!(
        why.contains("credentials.sops.yaml") && why.contains("MAC"),
        "{why}"
    );
    assert!(!why.contains("hunter2"), "{why}");
    assert!(live_secret(kc, &ns, "ws-seal-credentialz").is_none());
    assert_eq!(
        live_secret(kc, &ns, "ws-seal-credentials").unwrap()["data"]["password"],
        b64("hunter2-ws")
    );
    let m = out.clusters.iter().find(|c| c.name == mgmt).unwrap();
    assert!(
        reason_message(&mgmt, "DecryptionFailed").is_none(),
        "{}",
        m.message
    );

    // A key the files are not encrypted for: nothing decrypts, the recipients named.
    bed.write(&ws_file, &rotated_ws);
    identities_secret(IDENTITIES, &age::x25519::Identity::generate()).await;
    bed.reconcile("r4").await;
    for name in [mgmt.as_str(), "ws-seal"] {
        let why = reason_message(name, "DecryptionFailed")
            .unwrap_or_else(|| panic!("{name}: {:?}", managed_cluster_conditions(name)));
        assert!(why.contains(&recipient), "{why}");
    }
}

/// `capstan hardware import` end to end: EKS Anywhere's hardware CSV becomes the management
/// directory's Hardware and Rufio Machines in plain text and their BMC credentials encrypted
/// beside them; the agent, granted the two kinds as `capstan install --allow
/// hardware.tinkerbell.org --allow machines.bmc.tinkerbell.org` grants them, applies all of it,
/// the credentials decrypted in memory, every object admitted strictly by Tinkerbell's and
/// Rufio's own CRDs. Read back with kubectl: each Rufio Machine points at a Secret that holds its
/// BMC's password, the Hardware keep their labels; the password is in no file of the repository
/// and in no status; the next pass writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_hardware_and_its_sealed_bmc_credentials_reach_the_management_cluster() {
    let cp = capstan_harness::shared().await;
    let kc = cp.kubeconfig_path();
    let mut bed = Bed::new("bmc", &[]);
    bed.sops = Some(("capstan-system".into(), "sops-age-bmc-test".into()));
    bed.allowing = true;
    let (mgmt, ns) = (bed.mgmt.clone(), bed.ns.clone());
    let fleet_key = age::x25519::Identity::generate();
    bed.write(
        &format!("clusters/{mgmt}/fleet.yaml"),
        &format!(
            "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  sops:\n    ageRecipients: [{}]\n",
            fleet_key.to_public()
        ),
    );
    // Two servers with a BMC, one without (no Rufio Machine, no Secret).
    let csv = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        csv.path(),
        "hostname,bmc_ip,bmc_username,bmc_password,mac,ip_address,netmask,gateway,nameservers,labels,disk\n\
         bmc-cp-1,192.168.0.10,Admin,hunter2-bmc-1,00:00:00:00:01:01,10.10.10.11,255.255.255.0,10.10.10.1,1.1.1.1,type=cp,/dev/sda\n\
         bmc-cp-2,192.168.0.11,Admin,hunter2-bmc-2,00:00:00:00:01:02,10.10.10.12,255.255.255.0,10.10.10.1,1.1.1.1,type=cp,/dev/sda\n\
         bmc-worker-1,,,,00:00:00:00:01:03,10.10.10.13,255.255.255.0,10.10.10.1,1.1.1.1,type=worker,/dev/nvme0n1\n",
    )
    .unwrap();
    let out = capstan_harness::run::capstan_output(&[
        "hardware",
        "import",
        csv.path().to_str().unwrap(),
        "--repo",
        bed.root().to_str().unwrap(),
        "--management",
        &mgmt,
        "--namespace",
        &ns,
        "--name",
        "rack",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("3 Hardware, 2 BMC machine(s)"), "{err}");
    for f in capstan_harness::run::files_under(bed.root(), &[".git"]) {
        let text = String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned();
        assert!(
            !text.contains("hunter2"),
            "{} holds a password",
            f.display()
        );
    }

    // capstan installed (its namespace first), then the fleet's identity given to it.
    capstan::install::testing::allowing_agent_client(cp).await;
    identities_secret("sops-age-bmc-test", &fleet_key).await;
    let out = bed.reconcile("r1").await;
    let m = out.clusters.iter().find(|c| c.name == mgmt).unwrap();
    assert!(!out.has_failures(), "{}", m.message);

    let get = |what: &str, name: &str| -> serde_json::Value {
        let (ok, text) = kubectl(kc, &["-n", &ns, "get", what, name, "-o", "json"]);
        assert!(ok, "{what} {name}: {text}");
        serde_json::from_str(&text).unwrap()
    };
    let b64 = |s: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    for (host, password) in [("bmc-cp-1", "hunter2-bmc-1"), ("bmc-cp-2", "hunter2-bmc-2")] {
        let hw = get("hardware.tinkerbell.org", host);
        assert_eq!(hw["metadata"]["labels"]["type"], "cp", "{hw}");
        let bmc = get("machines.bmc.tinkerbell.org", &format!("bmc-{host}"));
        let secret_ref = &bmc["spec"]["connection"]["authSecretRef"];
        assert_eq!(secret_ref["namespace"], ns.as_str(), "{bmc}");
        let secret = live_secret(kc, &ns, secret_ref["name"].as_str().unwrap())
            .unwrap_or_else(|| panic!("{host}'s BMC Secret {secret_ref}"));
        assert_eq!(secret["data"]["password"], b64(password), "{host}");
        assert_eq!(secret["data"]["username"], b64("Admin"), "{host}");
        assert_eq!(secret["type"], "kubernetes.io/basic-auth");
    }
    let worker = get("hardware.tinkerbell.org", "bmc-worker-1");
    assert_eq!(worker["metadata"]["labels"]["type"], "worker", "{worker}");
    let (ok, text) = kubectl(
        kc,
        &[
            "-n",
            &ns,
            "get",
            "machines.bmc.tinkerbell.org",
            "bmc-bmc-worker-1",
        ],
    );
    assert!(!ok && text.contains("NotFound"), "{text}");
    let status = kubectl(
        kc,
        &[
            "-n",
            "capstan-system",
            "get",
            "managedclusters.capstan.dev",
            &mgmt,
            "-o",
            "json",
        ],
    )
    .1;
    for v in ["hunter2", &b64("hunter2-bmc-1"), &b64("hunter2-bmc-2")] {
        assert!(!status.contains(v), "{v} in {status}");
    }

    // Applied once: the next pass over the same revision writes nothing.
    let again = bed.reconcile("r2").await;
    assert_eq!(again.writes, 0, "{:?}", again.clusters);
}
