//! Benchmark (prints figures; not a test): a pull request planned by the real agent, `capstan
//! run` as its own process with GitHub configured, following a Git repository of a scaffolded
//! fleet of N workload clusters (default 3,000; `CAPSTAN_BENCH_CLUSTERS` overrides, e.g. 100 for
//! a quick check) on a private local control plane, with a stand-in for GitHub's REST API.
//!
//! After the cold apply (and the commit statuses it posts), the PR scales `w0000`'s workers:
//! 1. planned alone (the first plan also clones the PR mirror);
//! 2. a newer push to it planned while the daemon makes a fleet pass over every cluster (a
//!    signed push webhook for the revision already applied), both sent at once: the two fleets
//!    the plan loads (base and head) beside the daemon's revision and its watch cache.
//!
//! Prints for each: the time from the webhook to the `capstan/plan` status at the stand-in, the
//! agent's peak RSS during it (VmHWM, reset through `/proc/<pid>/clear_refs` before each, so it
//! is that phase's own peak), and the agent's lists of live-state kinds during it (audit log:
//! a plan reads the daemon's watch cache, so none are expected); for the second, the pass's
//! time too. Target: the peak under the agent Deployment's memory limit
//! (`install::manifests::MEMORY_LIMIT`) with room to spare.
//!
//! Run: `cargo test --workspace --locked --bench pr_plan` (debug build, as the other benchmarks'
//! recorded figures), `CAPSTAN_BENCH_CLUSTERS=1000` for a smaller fleet.

mod support;

#[allow(dead_code)]
#[path = "../tests/source_support/github.rs"]
mod github;

use std::path::Path;
use std::time::{Duration, Instant};

use capstan_harness::ControlPlane;
use capstan_harness::audit::AuditMark;
use github::GitHubStandIn;
use serde_json::json;
use support::{
    Agent, RunArgs, SECRET, bench_git, free_port, http, push, queued, reconciled, vm, wait_drained,
    wait_reconciled, write_fleet,
};

const TOKEN: &str = "ghp_bench";

/// The kinds a plan reads live state from (plural resources).
const LIVE_KINDS: &[&str] = &[
    "clusters",
    "kubeadmcontrolplanes",
    "machinedeployments",
    "machinesets",
    "helmchartproxies",
    "managedclusters",
];

/// Commits `w0000` scaled to `to` workers on branch `pr-1` and publishes it as
/// `refs/pull/1/head`, as GitHub serves a PR's head; returns the commit.
fn push_scaled_pr(repo: &Path, from: u32, to: u32) -> String {
    let exists = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["rev-parse", "--verify", "-q", "pr-1"])
        .output()
        .unwrap()
        .status
        .success();
    bench_git(
        repo,
        &(if exists {
            vec!["checkout", "-q", "pr-1"]
        } else {
            vec!["checkout", "-q", "-b", "pr-1", "main"]
        }),
    );
    let head = support::scale_w0000(repo, from, to);
    bench_git(repo, &["update-ref", "refs/pull/1/head", &head]);
    bench_git(repo, &["checkout", "-q", "main"]);
    head
}

/// A signed `pull_request` webhook for PR 1 at `head`.
fn send_pull_request_hook(port: u16, action: &str, head: &str) {
    let body = json!({
        "action": action,
        "number": 1,
        "pull_request": {
            "number": 1,
            "head": {"sha": head, "ref": "pr-1", "repo": {"full_name": "acme/fleet"}},
            "base": {"ref": "main", "repo": {"full_name": "acme/fleet"}},
        },
        "repository": {"full_name": "acme/fleet"},
    })
    .to_string();
    let sig = capstan::serve::webhook::sign(SECRET.as_bytes(), body.as_bytes());
    let req = format!(
        "POST /hook/github HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nX-GitHub-Event: pull_request\r\nX-GitHub-Delivery: pr-{head}\r\nX-Hub-Signature-256: {sig}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    assert_eq!(http(port, &req).0, 202);
}

/// Waits until the stand-in has a final `capstan/plan` status on `head`; returns when.
async fn planned(gh: &GitHubStandIn, head: &str, limit: Duration) -> Instant {
    let start = Instant::now();
    loop {
        if let Some(s) = gh.status(head, "capstan/plan")
            && s.state != "pending"
        {
            assert_eq!(s.state, "success", "{s:?}");
            return Instant::now();
        }
        assert!(start.elapsed() < limit, "no plan of {head} after {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Resets the process's peak RSS (VmHWM) to its current RSS.
fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset VmHWM");
}

/// The agent's lists of [`LIVE_KINDS`] since `mark` (the audit log; the bench's own requests
/// are the admin's).
async fn live_lists(cp: &ControlPlane, mark: AuditMark) -> usize {
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(30))
        .await
        .unwrap();
    cp.audit()
        .events_since(mark)
        .unwrap()
        .iter()
        .filter(|e| {
            e.verb == "list"
                && e.user
                    .username
                    .starts_with("system:serviceaccount:capstan-system:")
                && e.resource().is_some_and(|r| LIVE_KINDS.contains(&r))
        })
        .count()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = support::env_number("CAPSTAN_BENCH_CLUSTERS", 3000);
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    let fleet = write_fleet(&repo, n);
    let (objects, c1) = (fleet.objects, fleet.commit.clone());
    drop(fleet);
    println!("fleet: {n} workload clusters + management, {objects} objects, in a Git repository");

    let cp = ControlPlane::start().await.expect("control plane");
    let kubeconfig = capstan::install::testing::agent_kubeconfig(&cp).await;
    let gh = GitHubStandIn::start("acme/fleet", "", TOKEN).await;
    let token = tmp.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let (hook, metrics) = (free_port(), free_port());
    let log = tmp.path().join("agent.log");
    let github: Vec<String> = [
        "--github-api-url",
        &gh.url(),
        "--github-repo",
        "acme/fleet",
        "--github-token-file",
        token.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let started = Instant::now();
    let agent = Agent::run_with(
        &RunArgs {
            repo: &repo,
            kubeconfig: &kubeconfig,
            cache: &tmp.path().join("mirror"),
            log: &log,
            hook,
            metrics,
            concurrency: "4",
        },
        &github,
    );
    let pid = agent.pid();

    // Cold apply, and the commit status of every cluster it posts.
    wait_reconciled(&log, 0, &c1, n + 1, Duration::from_secs(3600));
    println!(
        "cold apply: {:.1} s; agent peak RSS so far {:.0} MiB",
        started.elapsed().as_secs_f64(),
        vm(pid, "VmHWM:")
    );
    let statuses = Instant::now();
    while gh.statuses().iter().filter(|s| s.sha == c1).count() < n + 1 {
        assert!(
            statuses.elapsed() < Duration::from_secs(1800),
            "the cold apply's statuses never all arrived"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cp.audit()
        .settle(Duration::from_millis(500), Duration::from_secs(30))
        .await;
    println!(
        "statuses of the cold apply posted {:.1} s after it; agent RSS {:.0} MiB (peak so far {:.0} MiB)",
        statuses.elapsed().as_secs_f64(),
        vm(pid, "VmRSS:"),
        vm(pid, "VmHWM:")
    );

    // 1. The PR planned alone.
    let h1 = push_scaled_pr(&repo, 2, 3);
    let before = vm(pid, "VmRSS:");
    reset_peak(pid);
    let mark = cp.audit().mark();
    let sent = Instant::now();
    send_pull_request_hook(hook, "opened", &h1);
    let done = planned(&gh, &h1, Duration::from_secs(1800)).await;
    println!(
        "PR plan alone: {:.1} s from the webhook to the status (the PR mirror cloned first); agent peak RSS {:.0} MiB (RSS before {before:.0} MiB); lists of live-state kinds: {}",
        done.duration_since(sent).as_secs_f64(),
        vm(pid, "VmHWM:"),
        live_lists(&cp, mark).await
    );
    cp.audit()
        .settle(Duration::from_millis(500), Duration::from_secs(30))
        .await;

    // 2. A newer push to the PR, planned while the daemon passes over every cluster.
    let h2 = push_scaled_pr(&repo, 3, 4);
    let (q0, r0) = (queued(&log).len(), reconciled(&log).len());
    let before = vm(pid, "VmRSS:");
    reset_peak(pid);
    let mark = cp.audit().mark();
    let sent = Instant::now();
    push(hook, &c1);
    send_pull_request_hook(hook, "synchronize", &h2);
    let gh_done = planned(&gh, &h2, Duration::from_secs(1800));
    let pass = tokio::task::spawn_blocking({
        let log = log.clone();
        move || {
            let runs = wait_drained(&log, q0, r0, Duration::from_secs(1800));
            (Instant::now(), runs.len())
        }
    });
    let done = gh_done.await;
    let (pass_done, runs) = pass.await.unwrap();
    println!(
        "PR plan during a fleet pass: {:.1} s from the webhook to the status; the pass ({runs} cluster runs) drained {:.1} s after its push; agent peak RSS {:.0} MiB (RSS before {before:.0} MiB); lists of live-state kinds: {}",
        done.duration_since(sent).as_secs_f64(),
        pass_done.duration_since(sent).as_secs_f64(),
        vm(pid, "VmHWM:"),
        live_lists(&cp, mark).await
    );
    let comments = gh.comments(1);
    assert_eq!(comments.len(), 1, "one plan comment, edited");
    assert!(
        comments[0].body.contains("scales 2 → 4"),
        "{}",
        comments[0].body
    );
    println!(
        "the agent Deployment's memory limit: {}",
        capstan::install::manifests::MEMORY_LIMIT
    );
    drop(agent);
}
