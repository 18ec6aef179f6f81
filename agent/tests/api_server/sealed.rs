//! A value the agent decrypts reaches its Secret and nothing else: the real `capstan run`
//! binary, as the agent's ServiceAccount, applies a workload directory's SOPS-encrypted Secret
//! (encrypted by `capstan secret encrypt`) with a fleet whose notifications go to a local
//! webhook stand-in and whose dashboard serves on a local port. The Secret is applied with the
//! value; the file then changed after encryption makes the cluster Failed and notified. Then
//! nothing else holds the value or its base64: not the agent's log (at debug), the notification,
//! the dashboard's pages, the metrics, the ManagedCluster records (status, plan), the Events or
//! the ConfigMaps of any namespace, all read from the API server as an admin.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::dashboard::{account, response};
use super::notifications::{stand_in, wait_until_phase};
use crate::source_support::agent::Running as Agent;
use crate::source_support::agent::{fleet_with, write_files};
use crate::source_support::free_port;

/// The value, distinctive enough that any copy of it is found.
const VALUE: &str = "np-plaintext-7c1e9a4d";
const SECRET: &str = "w-np-credentials";
const FILE: &str = "clusters/m-np/workload-clusters/w-np/credentials.yaml";

#[tokio::test]
async fn a_decrypted_value_reaches_its_secret_and_nothing_else() {
    let cp = capstan_harness::shared().await;
    let admin = cp.client();
    let (hook, hook_url) = stand_in(&[]).await;

    // The fleet: its age recipient and a webhook for every event in fleet.yaml; the Secret
    // written in plain text, then encrypted in place by capstan (the place binds it to
    // `m-np:w-np`).
    let key = age::x25519::Identity::generate();
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    write_files(&repo, fleet_with("np", &["w-np"]));
    std::fs::write(
        repo.join("clusters/m-np/fleet.yaml"),
        format!(
            "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  sops:\n    ageRecipients: [{}]\n  notifications:\n    secretRef: capstan-system/np-hooks\n    providers:\n    - {{name: hook, type: webhook, hmacKey: hmac}}\n    alerts:\n    - {{provider: hook}}\n",
            key.to_public()
        ),
    )
    .unwrap();
    std::fs::write(
        repo.join(FILE),
        format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: {SECRET}\n  namespace: t-np\ntype: Opaque\nstringData:\n  password: {VALUE}\n"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["secret", "encrypt", "--in-place"])
        .arg(repo.join(FILE))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sealed = std::fs::read_to_string(repo.join(FILE)).unwrap();
    assert!(!sealed.contains(VALUE), "{sealed}");

    // The identities and the webhook's URL, in Secrets on the management cluster only (the
    // agent's namespace and account installed first).
    let kubeconfig = capstan::install::testing::agent_kubeconfig(cp).await;
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "capstan-system");
    let identity = {
        use age::secrecy::ExposeSecret;
        key.to_string().expose_secret().to_string()
    };
    for (name, data) in [
        ("np-age", json!({"fleet.agekey": identity})),
        ("np-hooks", json!({"hook-url": hook_url, "hmac": "np-hmac"})),
    ] {
        let s: Secret = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": "capstan-system"}, "stringData": data}))
        .unwrap();
        secrets
            .patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&s))
            .await
            .unwrap();
    }

    let (dashboard, metrics) = (free_port(), free_port());
    let log = tmp.path().join("agent.log");
    let _agent = Agent(
        Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(["run", "--interval", "1h", "--watch", "--management", "m-np"])
            .args(["--sops-age-secret", "capstan-system/np-age"])
            .arg("--dashboard-addr")
            .arg(format!("127.0.0.1:{dashboard}"))
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{metrics}"))
            .arg("--repo")
            .arg(&repo)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            // Everything capstan logs, its own debug lines included.
            .env(
                "RUST_LOG",
                "info,capstan=debug,capstan_layout=debug,capstan_plan=debug",
            )
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let the_log = || std::fs::read_to_string(&log).unwrap_or_default();

    // The Secret applied with the decrypted value.
    let applied: Api<Secret> = Api::namespaced(admin.clone(), "t-np");
    let start = Instant::now();
    loop {
        let value = applied
            .get_opt(SECRET)
            .await
            .unwrap()
            .and_then(|s| s.data)
            .and_then(|d| d.get("password").map(|v| v.0.clone()));
        if value.as_deref() == Some(VALUE.as_bytes()) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "{SECRET} never applied with its value:\n{}",
            the_log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The file changed after encryption (the Secret renamed): refused, Failed, notified.
    std::fs::write(
        repo.join(FILE),
        sealed.replace(&format!("name: {SECRET}\n"), &format!("name: {SECRET}-2\n")),
    )
    .unwrap();
    wait_until_phase(&admin, "w-np", "Failed", &the_log).await;
    let start = Instant::now();
    let notified = loop {
        let bodies: Vec<String> = hook
            .got
            .lock()
            .unwrap()
            .iter()
            .map(|(_, _, b)| String::from_utf8_lossy(b).into_owned())
            .collect();
        if bodies
            .iter()
            .any(|b| b.contains("Failed") && b.contains("w-np"))
        {
            break bodies;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no Failed notification of w-np: {bodies:#?}\n{}",
            the_log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        notified.iter().any(|b| b.contains("MAC")),
        "the notification says why: {notified:#?}"
    );

    // Everywhere else, as an admin reads it.
    let viewer = account(cp, "np-viewer", true).await;
    let mut places: Vec<(String, String)> = vec![
        ("the agent's log".into(), the_log()),
        ("the notifications".into(), notified.join("\n")),
        ("the metrics".into(), response(metrics, "/metrics", None).1),
    ];
    // (`/events` is a stream of the same pages' parts, open until the browser goes.)
    for page in ["/", "/clusters/w-np", "/waves"] {
        let (code, body) = response(dashboard, page, Some(&viewer));
        assert_eq!(code, 200, "{page}: {body}");
        places.push((format!("the dashboard's {page}"), body));
    }
    let kc = cp.kubeconfig_path();
    for (what, args) in [
        (
            "the ManagedClusters",
            vec!["get", "managedclusters.capstan.dev", "-A"],
        ),
        ("the Events", vec!["get", "events", "-A"]),
        ("the ConfigMaps", vec!["get", "configmaps", "-A"]),
    ] {
        places.push((
            what.to_string(),
            capstan_harness::run::kubectl_json(kc, &args).to_string(),
        ));
    }
    let encoded = base64::engine::general_purpose::STANDARD.encode(VALUE);
    for (what, text) in &places {
        println!(
            "{what}: {} bytes, names {SECRET}: {}",
            text.len(),
            text.contains(SECRET)
        );
        assert!(!text.is_empty(), "{what} is empty");
        assert!(!text.contains(VALUE), "{what} holds the value");
        assert!(!text.contains(&encoded), "{what} holds the value's base64");
    }
    // And the file's name is what the failure names, where an admin looks.
    let status = &places
        .iter()
        .find(|(w, _)| w == "the ManagedClusters")
        .unwrap()
        .1;
    assert!(status.contains("credentials.yaml"), "{status}");
}
