//! `capstan run` end to end: the real binary follows a repository served by `git daemon`,
//! applies it to the real API server, reacts to signed GitHub push webhooks (and refuses unsigned
//! ones, applying nothing), turns a burst of pushes into one or two passes, keeps the last good
//! revision while the remote is down and recovers when it is back.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;

use crate::source_support::agent::{
    applied_revision, capstan_run, fleet_with, machine_deployments, post, push_body, push_body_at,
    scrape, value_in, wait_for_revision, wait_metrics, write_files,
};
use crate::source_support::daemon::GitDaemon;
use crate::source_support::{Upstream, free_port};

const SECRET: &str = "s3cret-for-tests";

fn fleet_files(tag: &str) -> Vec<(String, String)> {
    fleet_with(tag, &[format!("w-{tag}").as_str()])
}

use crate::source_support::agent::Running as Agent;
use capstan_harness::run::kubectl_ok;

/// `capstan run --watch` on a working copy, polling only once an hour: every run after the
/// first is caused by an edit or a watch event.
async fn watch_working_copy(
    cp: &capstan_harness::ControlPlane,
    repo: &std::path::Path,
    management: &str,
    metrics_port: u16,
    log: &std::path::Path,
    extra: &[&str],
) -> Agent {
    let kubeconfig = capstan::install::testing::agent_kubeconfig(cp).await;
    spawn_watching(&kubeconfig, repo, management, metrics_port, log, extra)
}

/// The agent of [`watch_working_copy`], authenticating with `kubeconfig`.
fn spawn_watching(
    kubeconfig: &std::path::Path,
    repo: &std::path::Path,
    management: &str,
    metrics_port: u16,
    log: &std::path::Path,
    extra: &[&str],
) -> Agent {
    let child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args([
            "run",
            "--interval",
            "1h",
            "--watch",
            "--management",
            management,
        ])
        .arg("--metrics-addr")
        .arg(format!("127.0.0.1:{metrics_port}"))
        .args(extra)
        .arg("--repo")
        .arg(repo)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    Agent(child)
}

/// Nothing queued or running, and every trigger the webhook accepted received by the daemon.
fn idle(text: &str) -> bool {
    value_in(text, "capstan_queue_clusters{state=\"queued\"}") == 0.0
        && value_in(text, "capstan_queue_clusters{state=\"running\"}") == 0.0
        && value_in(text, "capstan_triggers_total{trigger=\"webhook\"}")
            == value_in(text, "capstan_webhook_requests_total{outcome=\"accepted\"}")
}

#[tokio::test]
async fn the_agent_follows_git_and_webhooks() {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let files = fleet_files("run");
    let file_refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let up = Upstream::new(&file_refs);
    let mut daemon = GitDaemon::start(&up.root);
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
            "--webhook-addr",
            &format!("127.0.0.1:{hook}"),
            "--metrics-addr",
            &format!("127.0.0.1:{metrics_port}"),
            "--management",
            "m-run",
        ],
        &kubeconfig,
        tmp.path(),
        Some(SECRET),
        &log,
    );

    // The first pass applies the initial commit.
    let c1 = up.head();
    assert!(
        wait_for_revision(&client, "w-run", &c1, Duration::from_secs(90))
            .await
            .is_some(),
        "initial revision not applied:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
    let ready = (0..100).find(|_| {
        std::thread::sleep(Duration::from_millis(50));
        std::net::TcpStream::connect(("127.0.0.1", hook)).is_ok()
    });
    assert!(ready.is_some());

    // A change pushed, announced with a bad signature: 401 and nothing applied.
    let original = files
        .iter()
        .find(|(p, _)| p.contains("w-run"))
        .unwrap()
        .1
        .clone();
    assert_eq!(original.matches("count: 2").count(), 1);
    let scale = |n: u32| original.replacen("count: 2", &format!("count: {n}"), 1);
    let scaled = scale(3);
    let path = files
        .iter()
        .find(|(p, _)| p.contains("w-run"))
        .unwrap()
        .0
        .clone();
    let c2 = up.commit_and_push(&[(&path, &scaled)], &[], "scale w-run");
    let before = scrape(metrics_port);
    assert_eq!(post(hook, &push_body(&c2), Some("sha256=0000")), 401);
    assert_eq!(post(hook, &push_body(&c2), None), 401);
    // The endpoint counts before it answers: both refused, neither accepted (only an accepted
    // push fires a trigger), so nothing can have been queued.
    let after = scrape(metrics_port);
    let series = |o: &str| format!("capstan_webhook_requests_total{{outcome=\"{o}\"}}");
    assert_eq!(
        value_in(&after, &series("unauthorized")),
        value_in(&before, &series("unauthorized")) + 2.0
    );
    assert_eq!(
        value_in(&after, &series("accepted")),
        value_in(&before, &series("accepted"))
    );
    assert_eq!(
        applied_revision(&client, "w-run").await.as_deref(),
        Some(c1.as_str()),
        "an unsigned push must not trigger anything"
    );

    // Signed: applied.
    let body = push_body(&c2);
    let sig = capstan::serve::webhook::sign(SECRET.as_bytes(), body.as_bytes());
    let sent = Instant::now();
    assert_eq!(post(hook, &body, Some(&sig)), 202);
    let latency = wait_for_revision(&client, "w-run", &c2, Duration::from_secs(60))
        .await
        .expect("signed push applied");
    println!(
        "push-to-applied latency (webhook, git daemon, one cluster): {:?} (from send: {:?})",
        latency,
        sent.elapsed()
    );
    let md = machine_deployments(&client, "t-run");
    assert_eq!(
        md.get("w-run-md-0").await.unwrap().data["spec"]["replicas"],
        3
    );

    // A burst of 20 signed pushes of the same revision (each its own delivery, as GitHub's
    // differ): one to three revision loads, not twenty.
    let text = wait_metrics(metrics_port, Duration::from_secs(60), idle).await;
    let webhook_loads = "capstan_revisions_total{trigger=\"webhook\"}";
    let before = value_in(&text, webhook_loads);
    let c3 = up.commit_and_push(&[(&path, &scale(5))], &[], "scale again");
    for i in 0..20 {
        let body = push_body_at(&c3, i);
        let sig = capstan::serve::webhook::sign(SECRET.as_bytes(), body.as_bytes());
        assert_eq!(post(hook, &body, Some(&sig)), 202);
    }
    assert!(
        wait_for_revision(&client, "w-run", &c3, Duration::from_secs(60))
            .await
            .is_some()
    );
    // Every accepted push received by the daemon and nothing left to run: the count is final.
    let text = wait_metrics(metrics_port, Duration::from_secs(60), idle).await;
    let loads = value_in(&text, webhook_loads) - before;
    assert!(
        (1.0..=3.0).contains(&loads),
        "a burst of 20 pushes loaded {loads} revisions"
    );

    // The remote goes down: the agent keeps the last good revision and stays healthy.
    daemon.stop();
    let c4 = up.commit_and_push(&[(&path, &scale(4))], &[], "while down");
    let body = push_body(&c4);
    let sig = capstan::serve::webhook::sign(SECRET.as_bytes(), body.as_bytes());
    let loads = value_in(&scrape(metrics_port), webhook_loads);
    assert_eq!(post(hook, &body, Some(&sig)), 202);
    // The push was received and the source tried (a revision load is counted after the sync,
    // failed or not), and the clusters run: the last good revision stays applied.
    wait_metrics(metrics_port, Duration::from_secs(60), |t| {
        idle(t) && value_in(t, webhook_loads) > loads
    })
    .await;
    assert_eq!(
        applied_revision(&client, "w-run").await.as_deref(),
        Some(c3.as_str()),
        "last good revision stays"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("source unavailable"), "{text}");
    // It comes back: the next push applies the newest revision.
    daemon.restart();
    let body = push_body_at(&c4, 1);
    let sig = capstan::serve::webhook::sign(SECRET.as_bytes(), body.as_bytes());
    assert_eq!(post(hook, &body, Some(&sig)), 202);
    assert!(
        wait_for_revision(&client, "w-run", &c4, Duration::from_secs(60))
            .await
            .is_some(),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    assert_eq!(
        md.get("w-run-md-0").await.unwrap().data["spec"]["replicas"],
        4
    );
}

/// Requests made since `mark` with the credential `id` (one agent's token: other tests' agents
/// share the API server and the ServiceAccount), except the long-running watches it keeps open.
fn agent_requests(
    cp: &capstan_harness::ControlPlane,
    mark: capstan_harness::audit::AuditMark,
    id: &str,
) -> Vec<String> {
    cp.audit()
        .events_since(mark)
        .unwrap()
        .into_iter()
        .filter(|e| e.credential_id() == Some(id) && e.verb != "watch")
        .map(|e| format!("{} {}", e.verb, e.request_uri))
        .collect()
}

#[tokio::test]
async fn the_agent_sees_drift_from_watch_events_and_reads_nothing_in_steady_state() {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    write_fleet_files(&repo, "drift");
    let log = tmp.path().join("agent.log");
    let metrics_port = free_port();
    // An hour between polls: every pass after the first is caused by a watch event or an edit.
    // A token of its own, so that its requests can be told from the other tests' agents'.
    let (kubeconfig, credential) = capstan::install::testing::agent_credential(cp, "drift").await;
    let started = cp.audit().mark();
    let _agent = spawn_watching(
        &kubeconfig,
        &repo,
        "m-drift",
        metrics_port,
        &log,
        &["--concurrency", "2"],
    );
    assert!(
        wait_for_revision(&client, "w-drift", "local", Duration::from_secs(90))
            .await
            .is_some(),
        "not applied:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
    let md = machine_deployments(&client, "t-drift");
    assert_eq!(
        md.get("w-drift-md-0").await.unwrap().data["spec"]["replicas"],
        2
    );
    let runs = "capstan_reconciles_total{result=\"success\"}";
    let local_loads = "capstan_revisions_total{trigger=\"local_change\"}";
    let text = wait_metrics(metrics_port, Duration::from_secs(60), idle).await;

    // Steady state: an edit that changes nothing makes a run that reads and writes nothing.
    let (loads, passes) = (value_in(&text, local_loads), value_in(&text, runs));
    let mark = cp.audit().mark();
    let spec = repo.join("clusters/m-drift/workload-clusters/w-drift/cluster.yaml");
    let text = std::fs::read_to_string(&spec).unwrap();
    std::fs::write(&spec, format!("{text}\n")).unwrap();
    wait_metrics(metrics_port, Duration::from_secs(30), |t| {
        idle(t) && value_in(t, local_loads) > loads && value_in(t, runs) > passes
    })
    .await;
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    // (The credential does tell this agent's requests: its first pass is in the log under it.)
    assert!(
        agent_requests(cp, started, &credential)
            .iter()
            .any(|r| r.starts_with("patch ") && r.contains("/namespaces/t-drift/")),
        "no request of this agent's first pass carries its credential id"
    );
    let requests = agent_requests(cp, mark, &credential);
    assert!(
        requests.is_empty(),
        "a steady-state pass made API requests: {requests:#?}"
    );

    // Drift: kubectl scales the MachineDeployment by hand. No poll is due; the watch sees it,
    // and only the cluster it belongs to runs again, from the revision already loaded.
    let text = scrape(metrics_port);
    let watch_triggers = "capstan_triggers_total{trigger=\"cluster_change\"}";
    // Preparing a revision (its scope over the whole fleet) is timed as the "plan" stage.
    let prepares = "capstan_reconcile_duration_seconds_count{stage=\"plan\"}";
    let (passes, triggers) = (value_in(&text, runs), value_in(&text, watch_triggers));
    let prepared = value_in(&text, prepares);
    assert!(prepared >= 1.0, "no revision prepared yet:\n{text}");
    let loads: f64 = ["poll", "webhook", "local_change", "manual"]
        .iter()
        .map(|k| {
            value_in(
                &text,
                &format!("capstan_revisions_total{{trigger=\"{k}\"}}"),
            )
        })
        .sum();
    let status = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cp.kubeconfig_path())
        .args([
            "-n",
            "t-drift",
            "patch",
            "machinedeployments.cluster.x-k8s.io",
            "w-drift-md-0",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"replicas":9}}"#,
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let start = Instant::now();
    let text = wait_metrics(metrics_port, Duration::from_secs(30), |t| {
        idle(t) && value_in(t, watch_triggers) > triggers && value_in(t, runs) > passes
    })
    .await;
    let replicas = md.get("w-drift-md-0").await.unwrap().data["spec"]["replicas"].clone();
    assert_eq!(
        replicas,
        2,
        "drift not corrected:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
    println!("drift corrected {:?} after kubectl's edit", start.elapsed());
    let loads_after: f64 = ["poll", "webhook", "local_change", "manual"]
        .iter()
        .map(|k| {
            value_in(
                &text,
                &format!("capstan_revisions_total{{trigger=\"{k}\"}}"),
            )
        })
        .sum();
    assert_eq!(
        loads_after, loads,
        "the watch event reloaded the revision:\n{text}"
    );
    assert_eq!(
        value_in(&text, prepares),
        prepared,
        "a watch event naming one cluster prepared the whole revision again:\n{text}"
    );

    // A label edit (no new generation) that even takes the object away from its cluster: the
    // watch still wakes the cluster it belonged to, and the label is put back.
    let status = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cp.kubeconfig_path())
        .args([
            "-n",
            "t-drift",
            "label",
            "machinedeployments.cluster.x-k8s.io",
            "w-drift-md-0",
            "capstan.dev/cluster=someone-else",
            "--overwrite",
        ])
        .status()
        .unwrap();
    assert!(status.success());
    // No poll is due for an hour: only the watch can bring the label back.
    wait_until(
        "the label put back",
        &log,
        Duration::from_secs(30),
        || async {
            md.get("w-drift-md-0")
                .await
                .unwrap()
                .metadata
                .labels
                .unwrap()["capstan.dev/cluster"]
                == "w-drift"
        },
    )
    .await;

    // The client counts its requests by verb for /metrics.
    let mut s = TcpStream::connect(("127.0.0.1", metrics_port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    let count = |verb: &str| -> f64 {
        body.lines()
            .find(|l| l.starts_with(&format!("capstan_api_requests_total{{verb=\"{verb}\"}}")))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1.0)
    };
    // Watches (one per kind), patches (the applies), at least one get (the drift comparison).
    assert!(
        count("watch") >= 1.0 && count("patch") >= 1.0 && count("get") >= 1.0,
        "{body}"
    );
}

/// The namespace controller's part in deleting `ns`, played by the test (this control plane runs
/// no kube-controller-manager): the namespace marked for deletion, every namespaced object in it
/// deleted, then its `kubernetes` finalizer taken off through the finalize subresource, after
/// which the API server removes it.
fn delete_namespace_as_its_controller_would(cp: &capstan_harness::ControlPlane, ns: &str) {
    kubectl_ok(
        cp.kubeconfig_path(),
        &["delete", "namespace", ns, "--wait=false"],
    );
    let kinds = kubectl_ok(
        cp.kubeconfig_path(),
        &[
            "api-resources",
            "--namespaced",
            "--verbs=list,delete",
            "-o",
            "name",
        ],
    );
    let kinds: Vec<&str> = kinds.lines().filter(|l| !l.is_empty()).collect();
    kubectl_ok(
        cp.kubeconfig_path(),
        &[
            "delete",
            "-n",
            ns,
            "--all",
            "--wait=false",
            &kinds.join(","),
        ],
    );
    let mut namespace: serde_json::Value = serde_json::from_str(&kubectl_ok(
        cp.kubeconfig_path(),
        &["get", "namespace", ns, "-o", "json"],
    ))
    .unwrap();
    namespace["spec"]["finalizers"] = serde_json::json!([]);
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), namespace.to_string()).unwrap();
    kubectl_ok(
        cp.kubeconfig_path(),
        &[
            "replace",
            "--raw",
            &format!("/api/v1/namespaces/{ns}/finalize"),
            "-f",
            &file.path().display().to_string(),
        ],
    );
}

#[tokio::test]
async fn a_namespace_deleted_under_the_agent_is_created_again_with_its_objects() {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    write_fleet_files(&repo, "nsdel");
    let log = tmp.path().join("agent.log");
    let metrics_port = free_port();
    let kubeconfig = capstan::install::testing::agent_kubeconfig(cp).await;
    // An hour between polls: after the first load, only watch events bring the agent back.
    let _agent = spawn_watching(&kubeconfig, &repo, "m-nsdel", metrics_port, &log, &[]);
    assert!(
        wait_for_revision(&client, "w-nsdel", "local", Duration::from_secs(90))
            .await
            .is_some(),
        "not applied:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
    let text = wait_metrics(metrics_port, Duration::from_secs(60), idle).await;
    let prepares = "capstan_reconcile_duration_seconds_count{stage=\"plan\"}";
    let prepared = value_in(&text, prepares);
    assert!(prepared >= 1.0, "no revision prepared yet:\n{text}");

    delete_namespace_as_its_controller_would(cp, "t-nsdel");
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let md = machine_deployments(&client, "t-nsdel");
    // The objects' deletions are watch events naming their clusters: the clusters run again,
    // find the namespace gone, create it and apply everything into it.
    wait_until(
        "the namespace and the workload cluster's objects back",
        &log,
        Duration::from_secs(120),
        || async {
            let ns_live = nss
                .get_opt("t-nsdel")
                .await
                .unwrap()
                .is_some_and(|n| n.metadata.deletion_timestamp.is_none());
            ns_live
                && md
                    .get_opt("w-nsdel-md-0")
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|m| m.data["spec"]["replicas"] == 2)
        },
    )
    .await;
    let created_by = kubectl_ok(
        cp.kubeconfig_path(),
        &[
            "get",
            "namespace",
            "t-nsdel",
            "-o",
            "jsonpath={.metadata.labels.app\\.kubernetes\\.io/created-by}",
        ],
    );
    assert_eq!(created_by, "capstan");
    // Done by the clusters' own runs, from the revision already prepared.
    let text = scrape(metrics_port);
    assert_eq!(
        value_in(&text, prepares),
        prepared,
        "the revision was prepared again:\n{text}"
    );
}

/// Writes the files of [`fleet_files`]`(suffix)` under `repo`.
fn write_fleet_files(repo: &std::path::Path, suffix: &str) {
    write_files(repo, fleet_files(suffix));
}

async fn managed_cluster_strict(client: &kube::Client, cluster: &str) -> Option<DynamicObject> {
    let ar = ApiResource {
        group: "capstan.dev".into(),
        version: "v1alpha1".into(),
        api_version: "capstan.dev/v1alpha1".into(),
        kind: "ManagedCluster".into(),
        plural: "managedclusters".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "capstan-system", &ar);
    api.get_opt(cluster).await.unwrap()
}

/// Waits until `check` holds for what the API server says, re-reading every 50 ms.
async fn wait_until<F, Fut>(what: &str, log: &std::path::Path, limit: Duration, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(
            start.elapsed() < limit,
            "{what}: not within {limit:?}; the agent's log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A Cluster whose deletion hangs on a finalizer (as it does for minutes while Cluster API
/// removes its machines) holds up neither the agent nor another cluster's change; when the
/// finalizer goes, the watch brings the deletion back and the rest of its objects go.
#[tokio::test]
async fn a_slow_deletion_does_not_delay_another_clusters_change() {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    write_files(&repo, fleet_with("slow", &["a-slow", "b-slow"]));
    let log = tmp.path().join("agent.log");
    let metrics_port = free_port();
    let _agent = watch_working_copy(cp, &repo, "m-slow", metrics_port, &log, &[]).await;
    for c in ["a-slow", "b-slow"] {
        assert!(
            wait_for_revision(&client, c, "local", Duration::from_secs(90))
                .await
                .is_some(),
            "{c} not applied:\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
    }
    // What Cluster API's finalizer does while it deletes machines: hold the Cluster.
    kubectl_ok(
        cp.kubeconfig_path(),
        &[
            "-n",
            "t-slow",
            "patch",
            "clusters.cluster.x-k8s.io",
            "a-slow",
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"finalizers":["test.capstan.dev/hold"]}}"#,
        ],
    );
    let dir = repo.join("clusters/m-slow/workload-clusters");
    std::fs::remove_file(dir.join("a-slow/cluster.yaml")).unwrap();
    std::fs::write(
        dir.join("a-slow/tombstone.yaml"),
        capstan_layout::intent::document("Tombstone", "test"),
    )
    .unwrap();
    wait_until("a-slow Deleting", &log, Duration::from_secs(60), || async {
        managed_cluster_strict(&client, "a-slow")
            .await
            .is_some_and(|o| o.data["status"]["phase"] == "Deleting")
    })
    .await;

    // Another cluster's change, while the deletion hangs: applied.
    let spec = dir.join("b-slow/cluster.yaml");
    let text = std::fs::read_to_string(&spec).unwrap();
    assert_eq!(text.matches("count: 2").count(), 1, "{text}");
    std::fs::write(&spec, text.replacen("count: 2", "count: 3", 1)).unwrap();
    let md = machine_deployments(&client, "t-slow");
    wait_until("b-slow scaled", &log, Duration::from_secs(60), || async {
        md.get("b-slow-md-0").await.unwrap().data["spec"]["replicas"] == 3
    })
    .await;
    let held = kubectl_ok(
        cp.kubeconfig_path(),
        &[
            "-n",
            "t-slow",
            "get",
            "clusters.cluster.x-k8s.io",
            "a-slow",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ],
    );
    assert!(!held.is_empty(), "a-slow's Cluster is still being deleted");
    let status = managed_cluster_strict(&client, "a-slow").await.unwrap();
    assert_eq!(status.data["status"]["phase"], "Deleting");
    assert!(
        status.data["status"]["message"]
            .as_str()
            .unwrap()
            .contains("waiting for Cluster/t-slow/a-slow"),
        "{:?}",
        status.data["status"]
    );
    assert!(
        md.get_opt("a-slow-md-0").await.unwrap().is_some(),
        "nothing else of a-slow is deleted before its Cluster is gone"
    );

    // The finalizer goes: the watch sees the Cluster gone and the deletion completes.
    kubectl_ok(
        cp.kubeconfig_path(),
        &[
            "-n",
            "t-slow",
            "patch",
            "clusters.cluster.x-k8s.io",
            "a-slow",
            "--type",
            "json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ],
    );
    wait_until("a-slow deleted", &log, Duration::from_secs(60), || async {
        managed_cluster_strict(&client, "a-slow").await.is_none()
            && md.get_opt("a-slow-md-0").await.unwrap().is_none()
    })
    .await;
    assert_eq!(
        md.get("b-slow-md-0").await.unwrap().data["spec"]["replicas"],
        3
    );
}

/// A cluster whose apply the API server rejects is retried on its own, with a growing delay,
/// while the other cluster's changes still apply.
#[tokio::test]
async fn a_failing_cluster_is_retried_with_backoff_and_the_others_go_on() {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    write_files(&repo, fleet_with("retry", &["a-retry", "b-retry"]));
    // A data key the API server refuses (a ConfigMap's keys are [-._a-zA-Z0-9]+): validation
    // knows the fields but not that rule, so the apply is refused, on every attempt.
    let dir = repo.join("clusters/m-retry/workload-clusters");
    std::fs::write(
        dir.join("a-retry/broken.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a-retry-broken\n  namespace: t-retry\ndata:\n  \"not a key!\": field\n",
    )
    .unwrap();
    let log = tmp.path().join("agent.log");
    let metrics_port = free_port();
    let mark = cp.audit().mark();
    let _agent = watch_working_copy(cp, &repo, "m-retry", metrics_port, &log, &[]).await;
    assert!(
        wait_for_revision(&client, "b-retry", "local", Duration::from_secs(90))
            .await
            .is_some(),
        "b-retry not applied:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
    // Retried without any trigger (no poll for an hour, no edit): the backoff's own timer.
    let text = wait_metrics(metrics_port, Duration::from_secs(60), |t| {
        value_in(t, "capstan_retries_total") >= 3.0
    })
    .await;
    assert!(value_in(&text, "capstan_reconciles_total{result=\"failure\"}") >= 3.0);
    let status = managed_cluster_strict(&client, "a-retry").await.unwrap();
    assert_eq!(
        status.data["status"]["phase"], "Failed",
        "{:?}",
        status.data
    );
    // The API server's own record of the attempts (the refused applies of the broken object):
    // each wait between them longer than the one before.
    cp.audit()
        .sync(&client, Duration::from_secs(10))
        .await
        .unwrap();
    let attempts: Vec<i64> = cp
        .audit()
        .events_since(mark)
        .unwrap()
        .iter()
        .filter(|e| {
            e.verb == "patch"
                && e.object_ref
                    .as_ref()
                    .is_some_and(|o| o.name.as_deref() == Some("a-retry-broken"))
        })
        .map(|e| {
            let at = e.raw["requestReceivedTimestamp"].as_str().unwrap();
            at.parse::<k8s_openapi::jiff::Timestamp>()
                .unwrap()
                .as_millisecond()
        })
        .collect();
    assert!(attempts.len() >= 3, "{attempts:?}");
    let waits: Vec<i64> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        waits.windows(2).take(2).all(|w| w[1] > w[0]),
        "the waits between attempts grow: {waits:?} ms"
    );

    // The other cluster still applies its changes.
    let spec = dir.join("b-retry/cluster.yaml");
    let text = std::fs::read_to_string(&spec).unwrap();
    std::fs::write(&spec, text.replacen("count: 2", "count: 4", 1)).unwrap();
    let md = machine_deployments(&client, "t-retry");
    wait_until("b-retry scaled", &log, Duration::from_secs(60), || async {
        md.get("b-retry-md-0").await.unwrap().data["spec"]["replicas"] == 4
    })
    .await;
}

/// A wiped branch — a force-push of a tree without `clusters/`, then one whose `clusters/` holds
/// no cluster — is refused as a revision: nothing on the management cluster changes (no apply,
/// no prune, no delete, every ManagedCluster status as it was), the failure is counted and
/// logged with its `not-a-fleet` diagnostic, and the fleet pushed back applies as before.
#[tokio::test]
async fn a_wiped_branch_changes_nothing_on_the_management_cluster() {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let names = ["m-wipe", "a-wipe", "b-wipe"];
    let files = fleet_with("wipe", &names[1..]);
    let file_refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let up = Upstream::new(&file_refs);
    let _git = GitDaemon::start(&up.root);
    let (hook, metrics_port) = (free_port(), free_port());
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("agent.log");
    let _agent = capstan_run(
        &[
            "--repo",
            &_git.url("repo.git"),
            "--branch",
            "main",
            "--interval",
            "1h",
            "--management",
            "m-wipe",
            "--webhook-addr",
            &format!("127.0.0.1:{hook}"),
            "--metrics-addr",
            &format!("127.0.0.1:{metrics_port}"),
        ],
        cp.kubeconfig_path(),
        tmp.path(),
        Some(SECRET),
        &log,
    );
    let c1 = up.head();
    for n in names {
        assert!(
            wait_for_revision(&client, n, &c1, Duration::from_secs(90))
                .await
                .is_some(),
            "{n}: first revision not applied:\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
    }
    // Settled: nothing queued or running.
    wait_metrics(metrics_port, Duration::from_secs(60), idle).await;
    let snapshot = || async {
        let mut out = Vec::new();
        for n in names {
            let mc = managed_cluster_strict(&client, n)
                .await
                .expect("a ManagedCluster");
            out.push((
                n,
                mc.metadata.resource_version.clone(),
                mc.data["status"].clone(),
            ));
        }
        let objects = kubectl_ok(
            cp.kubeconfig_path(),
            &[
                "-n",
                "t-wipe",
                "get",
                "clusters.cluster.x-k8s.io,machinedeployments.cluster.x-k8s.io,kubeadmcontrolplanes.controlplane.cluster.x-k8s.io,clusters.anywhere.eks.amazonaws.com",
                "-o",
                "custom-columns=KIND:.kind,NAME:.metadata.name,UID:.metadata.uid,RV:.metadata.resourceVersion,DELETING:.metadata.deletionTimestamp",
                "--no-headers",
            ],
        );
        (out, objects)
    };
    let before = snapshot().await;
    assert!(before.1.lines().count() >= 6, "{}", before.1);
    let mark = cp.audit().mark();

    let wiped: [(&str, Vec<(&str, &str)>); 2] = [
        ("no clusters/", vec![("README.md", "# moved elsewhere\n")]),
        (
            "an empty clusters/",
            vec![("clusters/README.md", "# nothing here yet\n")],
        ),
    ];
    for (what, tree) in wiped {
        let text = scrape(metrics_port);
        let failures = value_in(&text, "capstan_reconciles_total{result=\"failure\"}").max(0.0);
        let revisions = value_in(&text, "capstan_revisions_total{trigger=\"webhook\"}").max(0.0);
        let commit = up.force_push_unrelated(&tree);
        assert_eq!(
            post(
                hook,
                &push_body(&commit),
                Some(&capstan::serve::webhook::sign(
                    SECRET.as_bytes(),
                    push_body(&commit).as_bytes()
                ))
            ),
            202
        );
        // The revision was loaded and refused (counted as a failed run), and the daemon is idle.
        wait_metrics(metrics_port, Duration::from_secs(60), |t| {
            value_in(t, "capstan_revisions_total{trigger=\"webhook\"}") > revisions
                && value_in(t, "capstan_reconciles_total{result=\"failure\"}") > failures
                && idle(t)
        })
        .await;
        let logged = std::fs::read_to_string(&log).unwrap();
        assert!(
            logged.contains("not-a-fleet") && logged.contains("nothing applied"),
            "{what}: the refusal is not in the log:\n{logged}"
        );
        let now = snapshot().await;
        assert_eq!(now.0, before.0, "{what}: a ManagedCluster changed");
        assert_eq!(now.1, before.1, "{what}: a Cluster API object changed");
    }
    // Nothing written for this fleet since the first revision settled.
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    let writes: Vec<String> = cp
        .audit()
        .events_since(mark)
        .unwrap()
        .into_iter()
        .filter(|e| e.is_write())
        .filter(|e| {
            e.namespace() == Some("t-wipe")
                || e.object_ref
                    .as_ref()
                    .and_then(|o| o.name.as_deref())
                    .is_some_and(|n| names.contains(&n))
        })
        .map(|e| format!("{} {}", e.verb, e.request_uri))
        .collect();
    assert!(writes.is_empty(), "writes after the wipe: {writes:#?}");

    // The fleet pushed back, with one change, applies as before: the changed cluster at the new
    // commit, the others keep the revision their objects came from.
    let mut back = files.clone();
    let a = back
        .iter_mut()
        .find(|(p, _)| p.contains("/a-wipe/"))
        .expect("a-wipe's spec");
    assert_eq!(a.1.matches("count: 2").count(), 1);
    a.1 = a.1.replacen("count: 2", "count: 3", 1);
    let back_refs: Vec<(&str, &str)> = back.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    let restored = up.force_push_unrelated(&back_refs);
    let body = push_body(&restored);
    let sig = capstan::serve::webhook::sign(SECRET.as_bytes(), body.as_bytes());
    assert_eq!(post(hook, &body, Some(&sig)), 202);
    assert!(
        wait_for_revision(&client, "a-wipe", &restored, Duration::from_secs(90))
            .await
            .is_some(),
        "the restored fleet is not applied:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
    for n in ["m-wipe", "b-wipe"] {
        assert_eq!(
            applied_revision(&client, n).await.as_deref(),
            Some(c1.as_str())
        );
    }
}

/// A controller that keeps rewriting a field capstan owns, against the real binary: the watch
/// brings each rewrite, the agent corrects it twice, and the third time within the window it
/// stops (no more applies of that object), counts the object under
/// `capstan_objects_total{action="conflict"}`, records an Event, and the rival's value stays.
#[tokio::test]
async fn the_daemon_backs_off_from_a_fight_and_counts_it() {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    write_fleet_files(&repo, "rival");
    let name = "w-rival-settings";
    std::fs::write(
        repo.join("clusters/m-rival/workload-clusters/w-rival/settings.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: t-rival\ndata:\n  mode: strict\n"
        ),
    )
    .unwrap();
    let log = tmp.path().join("agent.log");
    let metrics_port = free_port();
    let _agent = watch_working_copy(cp, &repo, "m-rival", metrics_port, &log, &[]).await;
    assert!(
        wait_for_revision(&client, "w-rival", "local", Duration::from_secs(90))
            .await
            .is_some(),
        "not applied:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "t-rival");
    let mode = || async { cms.get(name).await.unwrap().data.unwrap_or_default()["mode"].clone() };
    let conflicts = |t: &str| value_in(t, "capstan_objects_total{action=\"conflict\"}").max(0.0);
    let rival = |n: u32| {
        let cms = cms.clone();
        async move {
            let obj = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "t-rival"}, "data": {"mode": format!("rival-{n}")}});
            cms.patch(
                name,
                &kube::api::PatchParams::apply("rival-controller").force(),
                &kube::api::Patch::Apply(&obj),
            )
            .await
            .unwrap();
        }
    };
    // Two rewrites, each corrected by the agent on the watch event it causes.
    for n in 1..=2 {
        rival(n).await;
        wait_until(
            &format!("correction {n}"),
            &log,
            Duration::from_secs(60),
            || async { mode().await == "strict" },
        )
        .await;
    }
    assert_eq!(conflicts(&scrape(metrics_port)), 0.0);
    // The third within the window is a fight: counted, and the rival's value is left alone.
    rival(3).await;
    let text = wait_metrics(metrics_port, Duration::from_secs(60), |t| {
        conflicts(t) >= 1.0
    })
    .await;
    assert_eq!(mode().await, "rival-3", "re-applied while in conflict");
    // Runs go on (watch events, the failed cluster's backoff) and leave the object alone: two
    // more held runs, at least one of them wholly after the next rewrite.
    let held = conflicts(&text);
    rival(4).await;
    wait_metrics(metrics_port, Duration::from_secs(120), |t| {
        conflicts(t) >= held + 2.0
    })
    .await;
    assert_eq!(mode().await, "rival-4", "re-applied while in conflict");
    let events = kubectl_ok(
        cp.kubeconfig_path(),
        &[
            "-n",
            "capstan-system",
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=w-rival,reason=Conflict",
            "-o",
            "name",
        ],
    );
    assert!(!events.trim().is_empty(), "no Conflict event");
}

/// The clusters named by the "reconciled" records of a JSON log written after the first
/// "queued" record with `"changed":1`, in the order their runs finished.
fn runs_after_the_change(log: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap();
    text.lines()
        .skip_while(|l| !(l.contains(r#""message":"queued""#) && l.contains(r#""changed":1,"#)))
        .filter(|l| l.contains(r#""message":"reconciled""#))
        .filter_map(|l| {
            let (_, rest) = l.split_once(r#""cluster":""#)?;
            Some(rest.split('"').next()?.to_string())
        })
        .collect()
}

/// A change runs ahead of the clusters its revision only confirms, and alone: its management
/// cluster first (the change waits for it), then the changed workload, and only after it the
/// others, although the concurrency would let four runs go at once.
#[tokio::test]
async fn a_change_runs_ahead_of_the_confirmations_and_alone() {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    let names = ["a-alone", "b-alone", "c-alone", "d-alone"];
    write_files(&repo, fleet_with("alone", &names));
    let log = tmp.path().join("agent.log");
    let metrics_port = free_port();
    let extra = ["--log-json", "--concurrency", "4"];
    let _agent = watch_working_copy(cp, &repo, "m-alone", metrics_port, &log, &extra).await;
    for c in names {
        assert!(
            wait_for_revision(&client, c, "local", Duration::from_secs(90))
                .await
                .is_some(),
            "{c} not applied:\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
    }
    let local_loads = "capstan_revisions_total{trigger=\"local_change\"}";
    let text = wait_metrics(metrics_port, Duration::from_secs(60), idle).await;
    let loads = value_in(&text, local_loads);

    // The last workload scaled: the revision changes it alone.
    let spec = repo.join("clusters/m-alone/workload-clusters/d-alone/cluster.yaml");
    let text = std::fs::read_to_string(&spec).unwrap();
    assert_eq!(text.matches("count: 2").count(), 1, "{text}");
    // Written whole and renamed into place, as editors save: the agent watching the working copy
    // must not read a half-written file (a load of the truncated spec would change d-alone
    // twice and mix its runs in with the confirmations).
    let staged = tmp.path().join("cluster.yaml.new");
    std::fs::write(&staged, text.replacen("count: 2", "count: 3", 1)).unwrap();
    std::fs::rename(&staged, &spec).unwrap();
    wait_metrics(metrics_port, Duration::from_secs(60), |t| {
        idle(t) && value_in(t, local_loads) > loads
    })
    .await;
    let md = machine_deployments(&client, "t-alone");
    assert_eq!(
        md.get("d-alone-md-0").await.unwrap().data["spec"]["replicas"],
        3
    );
    let order = runs_after_the_change(&log);
    let log_text = || std::fs::read_to_string(&log).unwrap();
    assert!(order.len() >= 5, "{order:?}\n{}", log_text());
    assert_eq!(
        order[..2],
        ["m-alone".to_string(), "d-alone".to_string()],
        "{order:?}\n{}",
        log_text()
    );
    // After those two, the confirmations. A watch on the changed cluster's own objects may run
    // it (or its management cluster) again in between: a re-run is not a confirmation, so only
    // the first run of each other cluster is counted.
    let mut confirmed: Vec<&str> = Vec::new();
    for c in order[2..].iter().map(String::as_str) {
        if !["m-alone", "d-alone"].contains(&c) && !confirmed.contains(&c) {
            confirmed.push(c);
        }
    }
    confirmed.sort();
    assert_eq!(
        confirmed,
        ["a-alone", "b-alone", "c-alone"],
        "{order:?}\n{}",
        log_text()
    );
}
