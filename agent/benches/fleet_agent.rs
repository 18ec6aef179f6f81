//! Benchmark (prints figures; not a test): the real agent, `capstan run` as its own process,
//! following a Git repository of a scaffolded fleet of N workload clusters (default 1,000;
//! `CAPSTAN_BENCH_CLUSTERS` overrides) on a private local control plane.
//!
//! Prints:
//! - cold apply: from the agent's start until its first pass has applied everything;
//! - a no-op pass (a signed webhook for the revision already applied): its time, and the API
//!   requests it made as the API server's audit log counts them (per object), and its writes;
//! - push-to-applied latency of a one-cluster change: from the signed webhook for the new commit
//!   until a watch of the bench's own sees the changed MachineDeployment on the API server;
//! - drift: from `kubectl scale` of a MachineDeployment until the agent has put it back;
//! - the agent process's peak RSS (VmHWM) and its API requests by verb (its /metrics).
//!
//! Targets: one-cluster change applied within 1 s of the push; a no-op pass at most 0.05
//! requests per object; agent RSS at most 100 MiB.
//!
//! Run: `cargo bench -p capstan --bench fleet_agent`.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use capstan_harness::ControlPlane;
use support::{
    Agent, RunArgs, StepClock, free_port, http, md_api, push, queued, reconciled, replicas_become,
    vm, wait_drained, wait_reconciled, write_fleet, writes_of_successful,
};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = support::env_number("CAPSTAN_BENCH_CLUSTERS", 1000);
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    let fleet = write_fleet(&repo, n);
    let (objects, c1) = (fleet.objects, fleet.commit.clone());
    drop(fleet);
    println!(
        "fleet: {} workload clusters + management, {objects} objects, in a Git repository",
        n
    );

    let cp = ControlPlane::start().await.expect("control plane");
    let client = cp.client();
    // As in production: the agent runs as its ServiceAccount, with the rules of `capstan install`.
    let agent_kubeconfig = capstan::install::testing::agent_kubeconfig(&cp).await;
    let (hook, metrics) = (free_port(), free_port());
    let log = tmp.path().join("agent.log");
    let concurrency = std::env::var("CAPSTAN_BENCH_CONCURRENCY").unwrap_or_else(|_| "4".into());
    let started = Instant::now();
    let agent = Agent::run(&RunArgs {
        repo: &repo,
        kubeconfig: &agent_kubeconfig,
        cache: &tmp.path().join("mirror"),
        log: &log,
        hook,
        metrics,
        concurrency: &concurrency,
    });
    let pid = agent.pid();

    // Cold apply: every cluster reconciled once at the fleet's revision.
    let first = wait_reconciled(&log, 0, &c1, n + 1, Duration::from_secs(3600));
    let cold = started.elapsed();
    let writes = writes_of_successful(&first);
    println!(
        "cold apply: {:.1}s from the agent's start ({writes} writes, {:.0} objects/s, concurrency {concurrency})",
        cold.as_secs_f64(),
        objects as f64 / cold.as_secs_f64()
    );
    println!(
        "agent RSS after the cold apply: {:.0} MiB (peak so far {:.0} MiB)",
        vm(pid, "VmRSS:"),
        vm(pid, "VmHWM:")
    );

    // Let the watch events of the cold apply settle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    cp.audit()
        .settle(Duration::from_millis(500), Duration::from_secs(20))
        .await;

    // A no-op pass: the webhook for the revision already applied plans every cluster again.
    let (q0, r0) = (queued(&log).len(), reconciled(&log).len());
    let mark = cp.audit().mark();
    let t = Instant::now();
    push(hook, &c1);
    let again = wait_drained(&log, q0, r0, Duration::from_secs(600));
    let took = t.elapsed();
    cp.audit()
        .settle(Duration::from_millis(500), Duration::from_secs(10))
        .await;
    let events: Vec<_> = cp
        .audit()
        .events_since(mark)
        .unwrap()
        .into_iter()
        .filter(|e| !e.user.username.starts_with("system:apiserver") && e.verb != "watch")
        .collect();
    let writes = events.iter().filter(|e| e.is_write()).count();
    println!(
        "no-op pass: {:.0} ms for {} clusters, {} API requests for {objects} objects = {:.4} requests/object (target <= 0.05), {writes} writes (audit log); agent peak RSS so far {:.0} MiB",
        took.as_secs_f64() * 1000.0,
        again.len(),
        events.len(),
        events.len() as f64 / objects as f64,
        vm(pid, "VmHWM:"),
    );

    // One-cluster change: scale w0000's workers, commit, push, time until the API server has it.
    let c2 = support::scale_w0000(&repo, 2, 3);
    let mds = md_api(&client, "team-0");
    let seen = tokio::spawn({
        let mds = mds.clone();
        async move { replicas_become(&mds, "w0000-md-0", 3, Duration::from_secs(120)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let clock = StepClock::start(&log, metrics);
    let sent = Instant::now();
    push(hook, &c2);
    let applied = seen.await.unwrap();
    println!(
        "one-cluster change: applied {:.0} ms after the push (target <= 1000 ms); {}; agent peak RSS so far {:.0} MiB",
        applied.duration_since(sent).as_secs_f64() * 1000.0,
        clock.report(&log, metrics, "w0000"),
        vm(pid, "VmHWM:"),
    );

    // Drift: kubectl scales a MachineDeployment by hand; the agent's watch sees it and reverts it.
    let seen = tokio::spawn({
        let mds = mds.clone();
        async move {
            replicas_become(&mds, "w0020-md-0", 7, Duration::from_secs(60)).await;
            replicas_become(&mds, "w0020-md-0", 2, Duration::from_secs(60)).await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let edited = Instant::now();
    let status = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cp.kubeconfig_path())
        .args([
            "-n",
            "team-0",
            "patch",
            "machinedeployments.cluster.x-k8s.io",
            "w0020-md-0",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"replicas":7}}"#,
        ])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let reverted = seen.await.unwrap();
    println!(
        "drift: reverted {:.0} ms after kubectl's edit, without a poll",
        reverted.duration_since(edited).as_secs_f64() * 1000.0
    );

    println!(
        "agent peak RSS (VmHWM): {:.0} MiB (target: at most half of Flux's kustomize-controller, 118 MiB at 1,000 clusters in versus_flux); RSS now {:.0} MiB",
        vm(pid, "VmHWM:"),
        vm(pid, "VmRSS:")
    );
    let (_, body) = http(
        metrics,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    );
    let verbs: Vec<String> = body
        .lines()
        .filter(|l| l.starts_with("capstan_api_requests_total"))
        .map(|l| l.replace("capstan_api_requests_total", ""))
        .collect();
    println!(
        "agent API requests by verb (its /metrics, whole run): {}",
        verbs.join(" ")
    );
}
