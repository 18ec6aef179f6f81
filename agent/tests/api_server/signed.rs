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

/// Sends a signed push of `commit` to the webhook on `hook`; asserts it is accepted.
fn send_signed_push(hook: u16, commit: &str) {
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
    send_signed_push(hook, &c2);
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
    // The Event on the ManagedCluster says why. It is written beside the status, not before it:
    // waited for (a minute at most), as the status was.
    let events: Api<Event> = Api::namespaced(client.clone(), "capstan-system");
    let mut listed = Vec::new();
    let mut found = None;
    for _ in 0..600 {
        listed = events
            .list(&ListParams::default().fields("involvedObject.name=w-sig"))
            .await
            .unwrap()
            .items;
        found = listed
            .iter()
            .find(|e| e.reason.as_deref() == Some("UnverifiedRevision"))
            .cloned();
        if found.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ev = found.unwrap_or_else(|| panic!("no UnverifiedRevision event: {listed:?}"));
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert!(
        ev.message.as_deref().unwrap_or_default().contains(&c2),
        "{ev:?}"
    );

    // The same refused head seen again (another push of it) is not counted twice.
    let loads = "capstan_revisions_total{trigger=\"webhook\"}";
    let before = value_in(&crate::source_support::agent::scrape(metrics_port), loads);
    let again = crate::source_support::agent::push_body_at(&c2, 1);
    let sig = capstan::serve::webhook::sign(SECRET.as_bytes(), again.as_bytes());
    assert_eq!(post(hook, &again, Some(&sig)), 202);
    let text = wait_metrics(metrics_port, Duration::from_secs(60), |t| {
        value_in(t, loads) > before
    })
    .await;
    assert_eq!(value_in(&text, unsigned), 1.0);

    // Signed by a key that is not trusted: refused too, and counted as such.
    up.write(&[(&path, &scale(5))]);
    let c3 = keys.commit(&up.work, &Signer::Ssh(mallory), "signed by mallory");
    up.push();
    send_signed_push(hook, &c3);
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
    send_signed_push(hook, &c4);
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
    send_signed_push(hook, &c2);
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

/// The kept position (ConfigMap capstan-system/capstan-source) of the source at `url`: the
/// commit of the entry whose `.source` names it.
async fn kept_position(client: &kube::Client, url: &str) -> Option<String> {
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "capstan-system");
    let data = cms.get_opt("capstan-source").await.unwrap()?.data?;
    let key = data
        .iter()
        .find(|(k, v)| k.ends_with(".source") && v.starts_with(url))?
        .0
        .trim_end_matches(".source")
        .to_string();
    data.get(&format!("{key}.commit")).cloned()
}

/// Waits (bounded) until the kept position is `commit`.
async fn wait_kept(client: &kube::Client, url: &str, commit: &str, log: &std::path::Path) {
    let start = Instant::now();
    while kept_position(client, url).await.as_deref() != Some(commit) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the position never became {commit}: {:?}\n{}",
            kept_position(client, url).await,
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether the agent process is still running, and answers its health probe.
fn alive(agent: &mut crate::source_support::agent::Running, metrics_port: u16) -> bool {
    matches!(agent.0.try_wait(), Ok(None))
        && crate::source_support::agent::get(metrics_port, "/healthz") == 200
}

/// `capstan run --verify-commits=all` facing every history shape a push can give its branch,
/// as an attacker with push rights and no signing key would push them: back to an ancestor,
/// an unrelated signed history, a merge whose second parent is unsigned, an empty tree, the
/// same commit again. The agent never stops (an ancestor once made it panic, and the kept
/// verified ref repeated the panic on every restart); a head that does not descend from the
/// last verified commit is refused as a rollback (status, Event, counter), nothing of it is
/// applied; and a replaced pod (an empty mirror) reads the position from the API server and
/// refuses the same rollback.
#[tokio::test]
async fn no_history_shape_stops_the_agent_and_a_rollback_is_refused_by_a_replaced_pod_too() {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let files = fleet_with("sigrb", &["w-sigrb"]);
    let file_refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let up = Upstream::new(&file_refs);
    let (path, original) = files
        .iter()
        .find(|(p, _)| p.contains("w-sigrb"))
        .cloned()
        .unwrap();
    let scale = |n: u32| original.replacen("count: 2", &format!("count: {n}"), 1);
    let keys = Keyring::new();
    let team_key = keys.ssh_key("team", "ed25519");
    let team = Signer::Ssh(team_key.clone());
    let allowed = keys.dir.path().join("allowed_signers");
    std::fs::write(
        &allowed,
        format!("platform@example.com {}\n", keys.ssh_public(&team_key)),
    )
    .unwrap();
    let c1 = keys.commit(&up.work, &team, "signed by the team");
    up.push();

    let daemon = GitDaemon::start(&up.root);
    let url = daemon.url("repo.git");
    let hook = free_port();
    let kubeconfig = capstan::install::testing::agent_kubeconfig(cp).await;
    let start = |dir: &std::path::Path, metrics_port: u16| {
        capstan_run(
            &[
                "--repo",
                &url,
                "--branch",
                "main",
                "--interval",
                "1h",
                "--management",
                "m-sigrb",
                "--verify-commits=all",
                "--allowed-signers",
                allowed.to_str().unwrap(),
                "--webhook-addr",
                &format!("127.0.0.1:{hook}"),
                "--metrics-addr",
                &format!("127.0.0.1:{metrics_port}"),
            ],
            &kubeconfig,
            dir,
            Some(SECRET),
            &dir.join("agent.log"),
        )
    };
    let pod_a = tempfile::tempdir().unwrap();
    let log = pod_a.path().join("agent.log");
    let metrics_port = free_port();
    let mut agent = start(pod_a.path(), metrics_port);
    assert!(
        wait_for_revision(&client, "w-sigrb", &c1, Duration::from_secs(90))
            .await
            .is_some(),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    wait_kept(&client, &url, &c1, &log).await;
    let ready = (0..100).find(|_| {
        std::thread::sleep(Duration::from_millis(50));
        std::net::TcpStream::connect(("127.0.0.1", hook)).is_ok()
    });
    assert!(ready.is_some());
    up.write(&[(&path, &scale(3))]);
    let c2 = keys.commit(&up.work, &team, "signed scale to 3");
    up.push();
    send_signed_push(hook, &c2);
    assert!(
        wait_for_revision(&client, "w-sigrb", &c2, Duration::from_secs(60))
            .await
            .is_some()
    );
    wait_kept(&client, &url, &c2, &log).await;
    let md = machine_deployments(&client, "t-sigrb");
    let replicas = || async {
        md.get("w-sigrb-md-0").await.unwrap().data["spec"]["replicas"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(replicas().await, 3);

    // Back to an ancestor: the signed c1, with two machines.
    crate::source_support::git(&up.work, &["reset", "-q", "--hard", &c1]);
    up.push();
    send_signed_push(hook, &c1);
    let rollbacks = "capstan_commits_refused_total{reason=\"rollback\"}";
    wait_metrics(metrics_port, Duration::from_secs(60), |t| {
        value_in(t, rollbacks) == 1.0
    })
    .await;
    assert!(
        alive(&mut agent, metrics_port),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    let (_, reason, message) =
        wait_verified(&client, "w-sigrb", &log, |c| c.1 == "RollbackRefused").await;
    assert!(
        message.contains(&format!("revision {c1} not applied ({c2} stays live)"))
            && message.contains("does not descend from"),
        "{reason}: {message}"
    );
    assert_eq!(
        applied_revision(&client, "w-sigrb").await.as_deref(),
        Some(c2.as_str())
    );
    assert_eq!(replicas().await, 3);
    // The Event goes beside the status write, after it: waited for, not read once.
    let events: Api<Event> = Api::namespaced(client.clone(), "capstan-system");
    let started = Instant::now();
    loop {
        let listed = events
            .list(&ListParams::default().fields("involvedObject.name=w-sigrb"))
            .await
            .unwrap();
        if listed.items.iter().any(|e| {
            e.reason.as_deref() == Some("RollbackRefused")
                && e.type_.as_deref() == Some("Warning")
                && e.message.as_deref().unwrap_or_default().contains(&c1)
        }) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no RollbackRefused Event: {:?}",
            listed.items
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // An unrelated signed history.
    let orphan = {
        crate::source_support::git(&up.work, &["checkout", "-q", "--orphan", "rewrite"]);
        up.write(&[(&path, &scale(1))]);
        let c = keys.commit(&up.work, &team, "signed, unrelated");
        crate::source_support::git(&up.work, &["branch", "-M", "rewrite", "main"]);
        up.push();
        c
    };
    send_signed_push(hook, &orphan);
    wait_metrics(metrics_port, Duration::from_secs(60), |t| {
        value_in(t, rollbacks) == 2.0
    })
    .await;
    assert!(alive(&mut agent, metrics_port));
    assert_eq!(replicas().await, 3);

    // The pod is replaced: its emptyDir mirror is gone. The new one reads the position from the
    // API server and refuses the unrelated head as well, applying nothing.
    drop(agent);
    let pod_b = tempfile::tempdir().unwrap();
    let log = pod_b.path().join("agent.log");
    let metrics_port = free_port();
    let mut agent = start(pod_b.path(), metrics_port);
    wait_metrics(metrics_port, Duration::from_secs(90), |t| {
        value_in(t, rollbacks) == 1.0
    })
    .await;
    assert!(
        alive(&mut agent, metrics_port),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    assert_eq!(replicas().await, 3);
    assert_eq!(
        kept_position(&client, &url).await.as_deref(),
        Some(c2.as_str())
    );

    // The branch back on c2 (the same commit as the position): applied by the new pod.
    crate::source_support::git(&up.work, &["checkout", "-q", "-B", "main", &c2]);
    up.push();
    send_signed_push(hook, &c2);
    let (status, _, _) = wait_verified(&client, "w-sigrb", &log, |c| c.0 == "True").await;
    assert_eq!(status, "True");

    // A signed merge whose second parent is unsigned: `all` refuses that parent.
    crate::source_support::git(&up.work, &["checkout", "-q", "-b", "side", &c2]);
    up.write(&[("notes.md", "unsigned\n")]);
    let unsigned = up.commit("unsigned, on a side branch");
    crate::source_support::git(&up.work, &["checkout", "-q", "main"]);
    crate::source_support::git(&up.work, &["merge", "-q", "--no-ff", "--no-commit", "side"]);
    up.write(&[(&path, &scale(4))]);
    let merge = keys.commit(&up.work, &team, "signed merge");
    up.push();
    send_signed_push(hook, &merge);
    let unsigned_total = "capstan_commits_refused_total{reason=\"unsigned\"}";
    wait_metrics(metrics_port, Duration::from_secs(60), |t| {
        value_in(t, unsigned_total) == 1.0
    })
    .await;
    let (_, reason, message) =
        wait_verified(&client, "w-sigrb", &log, |c| c.2.contains(&merge)).await;
    assert_eq!(reason, "UnverifiedRevision");
    assert!(message.contains(&unsigned[..12]), "{message}");
    assert_eq!(replicas().await, 3);

    // A signed commit with an empty tree on top of c2: verified, but a wiped branch is no
    // fleet, so nothing changes on the management cluster — and the agent goes on.
    crate::source_support::git(&up.work, &["checkout", "-q", "-B", "main", &c2]);
    crate::source_support::git(&up.work, &["rm", "-rqf", "."]);
    let empty = keys.commit(&up.work, &team, "signed, empty tree");
    up.push();
    send_signed_push(hook, &empty);
    wait_kept(&client, &url, &empty, &log).await;
    assert!(
        alive(&mut agent, metrics_port),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    assert_eq!(replicas().await, 3);
    assert_eq!(
        applied_revision(&client, "w-sigrb").await.as_deref(),
        Some(c2.as_str())
    );
}
