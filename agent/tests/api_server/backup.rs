//! `capstan backup` and `capstan restore`, the binary against real API servers: a backup is
//! encrypted with age to the recipients of the Secret the admin keeps (no key of a cluster in
//! the clear on disk), restores whole with one recipient's identity, and a restore without an
//! identity, or with another one, is refused before it writes anything. Without recipients no
//! backup is written at all, unless plaintext is chosen.

use std::path::{Path, PathBuf};

use age::secrecy::ExposeSecret;
use capstan_harness::run::{capstan_output, output_report};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

fn clusters() -> ApiResource {
    ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    }
}

async fn create_secret(client: &kube::Client, ns: &str, body: Value) {
    let s: Secret = serde_json::from_value(body).unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let n: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &n)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("namespace {name}: {e}"),
    }
}

/// A workload cluster's keys as Cluster API keeps them: its CA, service-account keys and
/// kubeconfig, each holding `marker` (what must never be on disk in the clear).
fn cluster_secrets(ns: &str, cluster: &str, marker: &str) -> Vec<Value> {
    let key = |what: &str| {
        format!("-----BEGIN EC PRIVATE KEY-----\n{marker}-{what}\n-----END EC PRIVATE KEY-----\n")
    };
    let labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
    vec![
        json!({"metadata": {"name": format!("{cluster}-ca"), "namespace": ns, "labels": labels},
            "type": "cluster.x-k8s.io/secret",
            "stringData": {"tls.crt": "-----BEGIN CERTIFICATE-----\n", "tls.key": key("ca")}}),
        json!({"metadata": {"name": format!("{cluster}-sa"), "namespace": ns, "labels": labels},
            "type": "cluster.x-k8s.io/secret",
            "stringData": {"tls.crt": "pub", "tls.key": key("sa")}}),
        json!({"metadata": {"name": format!("{cluster}-kubeconfig"), "namespace": ns, "labels": labels},
            "type": "cluster.x-k8s.io/secret",
            "stringData": {"value": format!("users:\n- name: admin\n  user:\n    token: {marker}-token\n")}}),
    ]
}

/// The one backup directory under `root`.
fn only_backup(root: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].clone()
}

fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// An age identity file holding `key`, as age-keygen writes one.
fn identity_file(dir: &Path, name: &str, key: &age::x25519::Identity) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "# public key: {}\n{}\n",
            key.to_public(),
            key.to_string().expose_secret()
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_backup_holds_no_key_in_the_clear_and_restores_only_with_an_identity() {
    // The backed-up management cluster: a control plane of its own (the backup holds every
    // object of the backed-up kinds on it). The restore goes onto the shared one.
    let source = capstan_harness::ControlPlane::start().await.unwrap();
    let target = capstan_harness::shared().await;
    let space = target.test_namespace("backup-restore").await.unwrap();
    let ns = space.name().to_string();
    let src = source.client();
    create_namespace(&src, &ns).await;
    let marker = format!("capstan-backup-test-{}", fastrand::u64(..));
    let secrets = cluster_secrets(&ns, "w1", &marker);
    for s in &secrets {
        create_secret(&src, &ns, s.clone()).await;
    }
    let cluster: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "w1", "namespace": ns}, "spec": {"paused": true}}))
    .unwrap();
    Api::<DynamicObject>::namespaced_with(src.clone(), &ns, &clusters())
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    // The admin's recipients, where `capstan install` points the agent by default: two public
    // keys (an operator's and a break-glass key), the identities kept off the cluster.
    let (admin, glass) = (
        age::x25519::Identity::generate(),
        age::x25519::Identity::generate(),
    );
    create_namespace(&src, "capstan-system").await;
    create_secret(
        &src,
        "capstan-system",
        json!({"metadata": {"name": capstan::backup::encryption::RECIPIENTS_SECRET},
            "stringData": {"recipients": format!("# operator\n{}\n# break-glass\n{}\n",
                admin.to_public(), glass.to_public())}}),
    )
    .await;

    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("backups");
    let src_kubeconfig = source.kubeconfig_path().to_str().unwrap().to_string();
    let out = capstan_output(&[
        "backup",
        "--dir",
        root.to_str().unwrap(),
        "--kubeconfig",
        &src_kubeconfig,
    ]);
    assert!(out.status.success(), "{}", output_report(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("encrypted with age to"),
        "{}",
        output_report(&out)
    );
    let backup = only_backup(&root);
    assert!(!backup.join(capstan::backup::OBJECTS_PLAIN).exists());
    let bytes = std::fs::read(backup.join(capstan::backup::OBJECTS_ENCRYPTED)).unwrap();
    assert!(serde_json::from_slice::<Value>(&bytes).is_err());
    // None of the keys on disk: not as written, not as the Secrets hold them (base64).
    let b64 = |s: &str| {
        serde_json::to_value(k8s_openapi::ByteString(s.as_bytes().to_vec()))
            .unwrap()
            .as_str()
            .unwrap()
            .to_string()
    };
    for needle in [
        marker.clone(),
        b64(&format!("-----BEGIN EC PRIVATE KEY-----\n{marker}-ca\n")),
        "w1-kubeconfig".to_string(),
    ] {
        assert!(!holds(&bytes, needle.as_bytes()), "{needle} is on disk");
    }
    // The manifest, readable without a key: encrypted, to whom, and nothing secret.
    let manifest_text = std::fs::read_to_string(backup.join(capstan::backup::MANIFEST)).unwrap();
    let manifest: Value = serde_json::from_str(&manifest_text).unwrap();
    assert_eq!(manifest["objects"], 4, "{manifest}");
    assert_eq!(
        manifest["encryption"],
        json!({"format": "age", "file": capstan::backup::OBJECTS_ENCRYPTED,
            "recipients": [admin.to_public().to_string(), glass.to_public().to_string()]})
    );
    assert!(!manifest_text.contains(&marker) && !manifest_text.contains("AGE-SECRET-KEY"));

    let secrets_in = |ns: String| async move {
        Api::<Secret>::namespaced(target.client(), &ns)
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .collect::<Vec<String>>()
    };
    let target_kubeconfig = target.kubeconfig_path().to_str().unwrap().to_string();
    let restore = |extra: &[&str]| {
        let mut args = vec![
            "restore",
            "--from",
            backup.to_str().unwrap(),
            "--kubeconfig",
            &target_kubeconfig,
        ];
        args.extend_from_slice(extra);
        capstan_output(&args)
    };
    // No identity: refused, saying what it needs; nothing written.
    let out = restore(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", output_report(&out));
    assert!(
        err.contains("is encrypted with age")
            && err.contains("--identity FILE")
            && err.contains(&admin.to_public().to_string()),
        "{err}"
    );
    // Another identity: refused as not one of the recipients; nothing written.
    let other = identity_file(tmp.path(), "other.txt", &age::x25519::Identity::generate());
    let out = restore(&["--identity", other.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", output_report(&out));
    assert!(
        err.contains("cannot decrypt") && err.contains("other.txt"),
        "{err}"
    );
    // A public key where the identity goes: refused without repeating the file.
    let public = tmp.path().join("public.txt");
    std::fs::write(&public, format!("{}\n", admin.to_public())).unwrap();
    let out = restore(&["--identity", public.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", output_report(&out));
    assert!(
        err.contains("public.txt") && err.contains("line 1"),
        "{err}"
    );
    assert!(
        secrets_in(ns.clone()).await.is_empty(),
        "a refused restore wrote Secrets"
    );
    let on_target = Api::<DynamicObject>::namespaced_with(target.client(), &ns, &clusters());
    assert!(on_target.get_opt("w1").await.unwrap().is_none());

    // The break-glass identity restores every object as it was.
    let id = identity_file(tmp.path(), "glass.txt", &glass);
    let out = restore(&["--identity", id.to_str().unwrap()]);
    assert!(out.status.success(), "{}", output_report(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("4 objects restored, 0 already there"),
        "{}",
        output_report(&out)
    );
    let restored = Api::<Secret>::namespaced(target.client(), &ns);
    for s in &secrets {
        let name = s["metadata"]["name"].as_str().unwrap();
        let back = restored.get(name).await.unwrap();
        let want: std::collections::BTreeMap<String, Vec<u8>> = s["stringData"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().as_bytes().to_vec()))
            .collect();
        let got: std::collections::BTreeMap<String, Vec<u8>> = back
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        assert_eq!(got, want, "{name}");
    }
    let w1 = on_target.get("w1").await.unwrap();
    assert_eq!(w1.data["spec"], json!({"paused": true}));
}

#[tokio::test]
async fn without_recipients_no_backup_is_written_unless_plaintext_is_chosen() {
    let cp = capstan_harness::shared().await;
    let space = cp.test_namespace("backup-recipients").await.unwrap();
    let ns = space.name().to_string();
    let kubeconfig = cp.kubeconfig_path().to_str().unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("backups");
    let backup = |extra: &[&str]| {
        let mut args = vec![
            "backup",
            "--dir",
            root.to_str().unwrap(),
            "--kubeconfig",
            &kubeconfig,
        ];
        args.extend_from_slice(extra);
        capstan_output(&args)
    };
    let key = age::x25519::Identity::generate();
    let secret_key = key.to_string().expose_secret().to_string();
    create_secret(
        &cp.client(),
        &ns,
        json!({"metadata": {"name": "no-key"}, "stringData": {"other": "x"}}),
    )
    .await;
    create_secret(
        &cp.client(),
        &ns,
        json!({"metadata": {"name": "comments"}, "stringData": {"recipients": "# to do\n\n"}}),
    )
    .await;
    create_secret(
        &cp.client(),
        &ns,
        json!({"metadata": {"name": "identity"},
            "stringData": {"recipients": format!("{}\n{secret_key}\n", key.to_public())}}),
    )
    .await;
    let cases: [(&str, &[&str]); 4] = [
        ("absent", &["does not exist", "--backup-plaintext"]),
        ("no-key", &["has no key `recipients`", "--backup-plaintext"]),
        (
            "comments",
            &["holds no age public key", "--backup-plaintext"],
        ),
        (
            "identity",
            &["key `recipients` line 2", "an age identity (a secret key)"],
        ),
    ];
    for (name, says) in cases {
        let secret = format!("{ns}/{name}");
        let out = backup(&["--backup-recipients-secret", &secret]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{name}: {}",
            output_report(&out)
        );
        assert!(err.contains(&secret), "{name}: {err}");
        for s in says {
            assert!(err.contains(s), "{name}: `{s}` not in {err}");
        }
        assert!(
            !err.contains(&secret_key[15..]),
            "{name}: the identity echoed"
        );
        assert!(!root.exists(), "{name}: something was written");
    }
    // Flags that contradict each other are refused by the parser.
    let recipient = key.to_public().to_string();
    let out = backup(&["--backup-plaintext", "--backup-recipient", &recipient]);
    assert_eq!(out.status.code(), Some(2), "{}", output_report(&out));
    assert!(!root.exists());
    // Plaintext, chosen: written, said, and marked as such in the manifest.
    let out = backup(&["--backup-plaintext"]);
    assert!(out.status.success(), "{}", output_report(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("NOT encrypted"),
        "{}",
        output_report(&out)
    );
    let dir = only_backup(&root);
    let objects: Value =
        serde_json::from_slice(&std::fs::read(dir.join(capstan::backup::OBJECTS_PLAIN)).unwrap())
            .unwrap();
    assert!(objects.is_array());
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join(capstan::backup::MANIFEST)).unwrap())
            .unwrap();
    assert_eq!(manifest["encryption"]["format"], "none", "{manifest}");
}
