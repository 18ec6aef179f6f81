//! `capstan run --verify-commits` end to end: the real binary follows a repository served by
//! `git daemon` whose commits are signed by real `ssh-keygen` keys through `git` itself. A
//! signed head is applied; an unsigned push is refused — nothing of it reaches the API server,
//! the last verified revision stays live, the ManagedCluster's status and an Event name the
//! commit and why, and `capstan_commits_refused_total` counts it once; a commit signed by an
//! untrusted key is refused alike; a signed push afterwards is applied.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};

use crate::source_support::agent::{
    applied_revision, capstan_run, fleet_with, machine_deployments, post, push_body, value_in,
    wait_for_revision, wait_metrics,
};
use crate::source_support::daemon::GitDaemon;
use crate::source_support::signing::{Keyring, Signer};
use crate::source_support::{Upstream, free_port};

const SECRET: &str = "s3cret-for-signed-tests";

/// The ManagedCluster's `Verified` condition: (status, reason, message).
async fn verified(client: &kube::Client, cluster: &str) -> Option<(String, String, String)> {
    let mc = crate::source_support::agent::managed_cluster(client, cluster).await?;
    let conds = mc.data["status"]["conditions"].as_array()?.clone();
    let c = conds.iter().find(|c| c["type"] == "Verified")?;
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

/// Waits (bounded) until the `Verified` condition satisfies `until`.
async fn wait_verified(
    client: &kube::Client,
    cluster: &str,
    log: &std::path::Path,
    until: impl Fn(&(String, String, String)) -> bool,
) -> (String, String, String) {
    let start = Instant::now();
    loop {
        if let Some(c) = verified(client, cluster).await
            && until(&c)
        {
            return c;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "the Verified condition of {cluster} never got there: {:?}\n{}",
            verified(client, cluster).await,
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn signed_push(hook: u16, commit: &str) {
    let body = push_body(commit);
    let sig = capstan::serve::webhook::sign(SECRET.as_bytes(), body.as_bytes());
    assert_eq!(post(hook, &body, Some(&sig)), 202);
}

#[tokio::test]
async fn an_unsigned_push_is_refused_and_the_last_verified_revision_stays() {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let files = fleet_with("sig", &["w-sig"]);
    let file_refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let up = Upstream::new(&file_refs);
    let (path, original) = files
        .iter()
        .find(|(p, _)| p.contains("w-sig"))
        .cloned()
        .unwrap();
    assert_eq!(original.matches("count: 2").count(), 1);
    let scale = |n: u32| original.replacen("count: 2", &format!("count: {n}"), 1);

    // The platform team's key is trusted; mallory's is not.
    let keys = Keyring::new();
    let team = keys.ssh_key("team", "ed25519");
    let mallory = keys.ssh_key("mallory", "ed25519");
    let allowed = keys.dir.path().join("allowed_signers");
    std::fs::write(
        &allowed,
        format!("platform@example.com {}\n", keys.ssh_public(&team)),
    )
    .unwrap();
    let c1 = keys.commit(&up.work, &Signer::Ssh(team.clone()), "signed by the team");
    up.push();

    let daemon = GitDaemon::start(&up.root);
    let hook = free_port();
    let metrics_port = free_port();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("agent.log");
    let kubeconfig = capstan::install::testing::agent_kubeconfig(cp).await;
    let _agent = capstan_run(
        &[
            "--repo",
            &daemon.url("repo.git"),
            "--branch",
            "main",
            "--interval",
            "1h",
            "--management",
            "m-sig",
            "--verify-commits",
            "--allowed-signers",
            allowed.to_str().unwrap(),
            "--webhook-addr",
            &format!("127.0.0.1:{hook}"),
            "--metrics-addr",
            &format!("127.0.0.1:{metrics_port}"),
        ],
        &kubeconfig,
        tmp.path(),
        Some(SECRET),
        &log,
    );

    // The signed head is applied, and its status says who signed it.
    assert!(
        wait_for_revision(&client, "w-sig", &c1, Duration::from_secs(90))
            .await
            .is_some(),
        "the signed revision was not applied:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
    let (status, reason, message) = wait_verified(&client, "w-sig", &log, |c| c.0 == "True").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "SignatureVerified")
    );
    assert!(message.contains("platform@example.com"), "{message}");
    let md = machine_deployments(&client, "t-sig");
    assert_eq!(
        md.get("w-sig-md-0").await.unwrap().data["spec"]["replicas"],
        2
    );
    let ready = (0..100).find(|_| {
        std::thread::sleep(Duration::from_millis(50));
        std::net::TcpStream::connect(("127.0.0.1", hook)).is_ok()
    });
    assert!(ready.is_some());

    // An unsigned push that scales the cluster: refused.
    let c2 = up.commit_and_push(&[(&path, &scale(3))], &[], "unsigned scale");
    signed_push(hook, &c2);
    let unsigned = "capstan_commits_refused_total{reason=\"unsigned\"}";
    wait_metrics(metrics_port, Duration::from_secs(60), |t| {
        value_in(t, unsigned) == 1.0
    })
    .await;
    let (_, reason, message) = wait_verified(&client, "w-sig", &log, |c| c.0 == "False").await;
    assert_eq!(reason, "UnverifiedRevision");
    assert!(
        message.contains(&format!("revision {c2} not applied ({c1} stays live)"))
            && message.contains("the commit is not signed"),
        "{message}"
    );
    // Nothing of it applied: the live revision and the MachineDeployment are c1's.
    assert_eq!(
        applied_revision(&client, "w-sig").await.as_deref(),
        Some(c1.as_str())
    );
    assert_eq!(
        md.get("w-sig-md-0").await.unwrap().data["spec"]["replicas"],
        2
    );
    // The Event on the ManagedCluster says why.
    let events: Api<Event> = Api::namespaced(client.clone(), "capstan-system");
    let listed = events
        .list(&ListParams::default().fields("involvedObject.name=w-sig"))
        .await
        .unwrap();
    let ev = listed
        .items
        .iter()
        .find(|e| e.reason.as_deref() == Some("UnverifiedRevision"))
        .unwrap_or_else(|| panic!("no UnverifiedRevision event: {:?}", listed.items));
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert!(
        ev.message.as_deref().unwrap_or_default().contains(&c2),
        "{ev:?}"
    );

    // The same refused head seen again (another push of it) is not counted twice.
    let loads = "capstan_revisions_total{trigger=\"webhook\"}";
    let before = value_in(&crate::source_support::agent::scrape(metrics_port), loads);
    signed_push(hook, &c2);
    let text = wait_metrics(metrics_port, Duration::from_secs(60), |t| {
        value_in(t, loads) > before
    })
    .await;
    assert_eq!(value_in(&text, unsigned), 1.0);

    // Signed by a key that is not trusted: refused too, and counted as such.
    up.write(&[(&path, &scale(5))]);
    let c3 = keys.commit(&up.work, &Signer::Ssh(mallory), "signed by mallory");
    up.push();
    signed_push(hook, &c3);
    let untrusted = "capstan_commits_refused_total{reason=\"untrusted_key\"}";
    wait_metrics(metrics_port, Duration::from_secs(60), |t| {
        value_in(t, untrusted) == 1.0
    })
    .await;
    let (_, _, message) = wait_verified(&client, "w-sig", &log, |c| c.2.contains(&c3)).await;
    assert!(message.contains("not an allowed signer"), "{message}");
    assert_eq!(
        applied_revision(&client, "w-sig").await.as_deref(),
        Some(c1.as_str())
    );
    assert_eq!(
        md.get("w-sig-md-0").await.unwrap().data["spec"]["replicas"],
        2
    );

    // The team signs a fix: applied, and verified again.
    up.write(&[(&path, &scale(4))]);
    let c4 = keys.commit(&up.work, &Signer::Ssh(team), "signed by the team again");
    up.push();
    signed_push(hook, &c4);
    assert!(
        wait_for_revision(&client, "w-sig", &c4, Duration::from_secs(60))
            .await
            .is_some(),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    assert_eq!(
        md.get("w-sig-md-0").await.unwrap().data["spec"]["replicas"],
        4
    );
    let (status, _, _) = wait_verified(&client, "w-sig", &log, |c| c.0 == "True").await;
    assert_eq!(status, "True");
}

/// The keys in a Secret (`--trusted-keys-secret`), read by the agent's ServiceAccount through
/// the Role `capstan install --verify-commits --trusted-keys-secret` adds: a signed head is
/// applied, an unsigned push refused.
#[tokio::test]
async fn keys_from_a_secret_apply_a_signed_head_and_refuse_an_unsigned_push() {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let files = fleet_with("sigsec", &["w-sigsec"]);
    let file_refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let up = Upstream::new(&file_refs);
    let (path, original) = files
        .iter()
        .find(|(p, _)| p.contains("w-sigsec"))
        .cloned()
        .unwrap();
    let keys = Keyring::new();
    let team = keys.ssh_key("team", "ed25519");
    let c1 = keys.commit(&up.work, &Signer::Ssh(team.clone()), "signed by the team");
    up.push();

    // The Secret, and exactly the Role the install adds for it.
    let (ns, name) = ("keys-sigsec", "fleet-signers");
    let mut o = capstan::install::manifests::Options::new("x", "main", "m-sigsec");
    o.verify_commits = Some("head".into());
    o.trusted_keys_secret = Some((ns.into(), name.into()));
    // (Not the backups' recipients' Role: not this test's.)
    o.backup_plaintext = true;
    let mut objects = vec![
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns},
            "stringData": {"allowed_signers": format!("platform@example.com {}\n", keys.ssh_public(&team))}}),
    ];
    objects.extend(capstan::install::manifests::extras(&o));
    capstan::install::apply(&client, &objects, Duration::from_secs(30))
        .await
        .unwrap();
    let args = capstan::install::manifests::args(&o);
    let secret_arg = args
        .iter()
        .position(|a| a == "--trusted-keys-secret")
        .map(|i| args[i + 1].clone())
        .unwrap();
    assert_eq!(secret_arg, format!("{ns}/{name}"));

    let daemon = GitDaemon::start(&up.root);
    let hook = free_port();
    let metrics_port = free_port();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("agent.log");
    let kubeconfig = capstan::install::testing::agent_kubeconfig(cp).await;
    let _agent = capstan_run(
        &[
            "--repo",
            &daemon.url("repo.git"),
            "--branch",
            "main",
            "--interval",
            "1h",
            "--management",
            "m-sigsec",
            "--verify-commits",
            "--trusted-keys-secret",
            &secret_arg,
            "--webhook-addr",
            &format!("127.0.0.1:{hook}"),
            "--metrics-addr",
            &format!("127.0.0.1:{metrics_port}"),
        ],
        &kubeconfig,
        tmp.path(),
        Some(SECRET),
        &log,
    );

    assert!(
        wait_for_revision(&client, "w-sigsec", &c1, Duration::from_secs(90))
            .await
            .is_some(),
        "the signed revision was not applied:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
    let (status, _, message) = wait_verified(&client, "w-sigsec", &log, |c| c.0 == "True").await;
    assert_eq!(status, "True");
    assert!(message.contains("platform@example.com"), "{message}");
    let ready = (0..100).find(|_| {
        std::thread::sleep(Duration::from_millis(50));
        std::net::TcpStream::connect(("127.0.0.1", hook)).is_ok()
    });
    assert!(ready.is_some());

    let scaled = original.replacen("count: 2", "count: 3", 1);
    let c2 = up.commit_and_push(&[(&path, &scaled)], &[], "unsigned scale");
    signed_push(hook, &c2);
    wait_metrics(metrics_port, Duration::from_secs(60), |t| {
        value_in(t, "capstan_commits_refused_total{reason=\"unsigned\"}") == 1.0
    })
    .await;
    let (_, reason, message) = wait_verified(&client, "w-sigsec", &log, |c| c.0 == "False").await;
    assert_eq!(reason, "UnverifiedRevision");
    assert!(message.contains(&c2), "{message}");
    assert_eq!(
        applied_revision(&client, "w-sigsec").await.as_deref(),
        Some(c1.as_str())
    );
    let md = machine_deployments(&client, "t-sigsec");
    assert_eq!(
        md.get("w-sigsec-md-0").await.unwrap().data["spec"]["replicas"],
        2
    );
}
