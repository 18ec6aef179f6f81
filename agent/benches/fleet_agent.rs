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

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use capstan_harness::ControlPlane;
use capstan_layout::Tree;
use capstan_layout::scaffold::{self, ClusterRequest};
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher;
use serde_json::Value;

const SECRET: &str = "bench-secret";

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "b@example.com")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "b@example.com")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn http(port: u16, request: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let code = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (
        code,
        resp.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default(),
    )
}

fn push(port: u16, commit: &str) {
    let body = format!(
        "{{\"ref\":\"refs/heads/main\",\"after\":\"{commit}\",\"repository\":{{\"full_name\":\"acme/fleet\"}}}}"
    );
    let sig = capstan::serve::webhook::sign(SECRET.as_bytes(), body.as_bytes());
    let req = format!(
        "POST /hook/github HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nX-GitHub-Event: push\r\nX-GitHub-Delivery: {commit}-{}\r\nX-Hub-Signature-256: {sig}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        Instant::now().elapsed().as_nanos(),
        body.len()
    );
    assert_eq!(http(port, &req).0, 202);
}

/// The agent's "reconciled" log records (JSON logs).
fn passes(log: &Path) -> Vec<Value> {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.pointer("/fields/message").and_then(Value::as_str) == Some("reconciled"))
        .collect()
}

fn wait_passes(log: &Path, n: usize, limit: Duration) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let p = passes(log);
        if p.len() >= n {
            return p;
        }
        assert!(
            start.elapsed() < limit,
            "no pass {n} after {limit:?}:\n{}",
            fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn vm(pid: u32, field: &str) -> f64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|k| k.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

fn md_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "MachineDeployment".into(),
        plural: "machinedeployments".into(),
    };
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Waits until a watch of the bench's own sees `name`'s replicas at `want`; returns when it did.
async fn replicas_become(
    api: &Api<DynamicObject>,
    name: &str,
    want: i64,
    limit: Duration,
) -> Instant {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher::watcher(api.clone(), cfg));
    let seen = tokio::time::timeout(limit, async {
        while let Some(ev) = events.next().await {
            let objs: Vec<DynamicObject> = match ev {
                Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::InitApply(o)) => vec![o],
                _ => vec![],
            };
            if objs
                .iter()
                .any(|o| o.data.pointer("/spec/replicas").and_then(Value::as_i64) == Some(want))
            {
                return Instant::now();
            }
        }
        panic!("watch ended");
    })
    .await;
    seen.unwrap_or_else(|_| panic!("{name} never reached {want} replicas within {limit:?}"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::var("CAPSTAN_BENCH_CLUSTERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    fs::create_dir_all(&repo).unwrap();
    let mut tree = Tree::new();
    let write = |tree: &mut Tree, files: Vec<(std::path::PathBuf, String)>| {
        for (p, t) in files {
            let path = repo.join(&p);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, &t).unwrap();
            tree.insert(p, t);
        }
    };
    let mgmt = ClusterRequest {
        name: "mgmt".into(),
        provider: "docker".into(),
        pod_cidr: Some("192.168.0.0/16".into()),
        service_cidr: Some("10.96.0.0/12".into()),
        ..Default::default()
    };
    let files = scaffold::plan(&tree, &mgmt).unwrap().files;
    write(&mut tree, files);
    let base = tree.clone();
    for i in 0..n {
        let req = ClusterRequest {
            name: format!("w{i:04}"),
            management: Some("mgmt".into()),
            provider: "docker".into(),
            namespace: Some(format!("team-{}", i % 20)),
            worker_count: Some(2),
            // A /22 per cluster: a node's /24 is a slice of it (EKS-A's and kubeadm's rule).
            pod_cidr: Some(format!("10.{}.{}.0/22", 16 + i / 64, (i % 64) * 4)),
            service_cidr: Some(format!("10.{}.{}.0/24", 160 + i / 256, i % 256)),
            ..Default::default()
        };
        let files = scaffold::plan(&base, &req).unwrap().files;
        write(&mut tree, files);
    }
    let fleet = capstan_layout::load(&tree);
    assert!(!fleet.has_errors());
    let objects: usize = fleet
        .clusters
        .iter()
        .map(|c| c.objects.as_ref().map_or(0, |o| o.len()))
        .sum();
    drop((fleet, tree, base));
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "fleet"]);
    let c1 = git(&repo, &["rev-parse", "HEAD"]);
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
    let child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args([
            "run",
            "--git",
            "--branch",
            "main",
            "--interval",
            "1h",
            "--log-json",
            "--management",
            "mgmt",
            "--concurrency",
            &concurrency,
        ])
        .arg("--repo")
        .arg(&repo)
        .args([
            "--webhook-addr",
            &format!("127.0.0.1:{hook}"),
            "--metrics-addr",
            &format!("127.0.0.1:{metrics}"),
        ])
        .arg("--kubeconfig")
        .arg(&agent_kubeconfig)
        .arg("--cache-dir")
        .arg(tmp.path().join("mirror"))
        .env("CAPSTAN_WEBHOOK_SECRET", SECRET)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id();
    let _agent = Agent(child);

    // Cold apply: the first pass.
    let first = wait_passes(&log, 1, Duration::from_secs(3600));
    let cold = started.elapsed();
    let p = &first[0]["fields"];
    assert_eq!(p["failed"], 0, "{p}");
    println!(
        "cold apply: {:.1}s from the agent's start ({} writes, {:.0} objects/s, concurrency {concurrency})",
        cold.as_secs_f64(),
        p["writes"],
        objects as f64 / cold.as_secs_f64()
    );
    println!(
        "agent RSS after the cold apply: {:.0} MiB (peak so far {:.0} MiB)",
        vm(pid, "VmRSS:"),
        vm(pid, "VmHWM:")
    );

    // Let the watch events of the cold apply settle (they may cause one more, empty, pass).
    tokio::time::sleep(Duration::from_secs(3)).await;
    cp.audit()
        .settle(Duration::from_millis(500), Duration::from_secs(20))
        .await;

    // A no-op pass: the webhook for the revision already applied.
    let before = passes(&log).len();
    let mark = cp.audit().mark();
    push(hook, &c1);
    let noop = wait_passes(&log, before + 1, Duration::from_secs(120));
    cp.audit()
        .settle(Duration::from_millis(500), Duration::from_secs(10))
        .await;
    let p = &noop[before]["fields"];
    let events: Vec<_> = cp
        .audit()
        .events_since(mark)
        .unwrap()
        .into_iter()
        .filter(|e| !e.user.username.starts_with("system:apiserver") && e.verb != "watch")
        .collect();
    let writes = events.iter().filter(|e| e.is_write()).count();
    println!(
        "no-op pass: {} ms, {} API requests for {objects} objects = {:.4} requests/object (target <= 0.05), {writes} writes (audit log; agent's own count: {} reads, {} writes)",
        p["elapsed_ms"],
        events.len(),
        events.len() as f64 / objects as f64,
        p["reads"],
        p["writes"]
    );

    // One-cluster change: scale w0000's workers, commit, push, time until the API server has it.
    let spec = repo.join("clusters/mgmt/workload-clusters/w0000/cluster.yaml");
    fs::write(
        &spec,
        fs::read_to_string(&spec)
            .unwrap()
            .replacen("count: 2", "count: 3", 1),
    )
    .unwrap();
    git(&repo, &["commit", "-q", "-am", "scale w0000"]);
    let c2 = git(&repo, &["rev-parse", "HEAD"]);
    let mds = md_api(&client, "team-0");
    let before = passes(&log).len();
    let seen = tokio::spawn({
        let mds = mds.clone();
        async move { replicas_become(&mds, "w0000-md-0", 3, Duration::from_secs(120)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = Instant::now();
    push(hook, &c2);
    let applied = seen.await.unwrap();
    let change = wait_passes(&log, before + 1, Duration::from_secs(120));
    let p = &change[before]["fields"];
    println!(
        "one-cluster change: applied {:.0} ms after the push (target <= 1000 ms); the pass took {} ms with {} writes and {} reads",
        applied.duration_since(sent).as_secs_f64() * 1000.0,
        p["elapsed_ms"],
        p["writes"],
        p["reads"]
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
        "agent peak RSS (VmHWM): {:.0} MiB (target <= 100 MiB); RSS now {:.0} MiB",
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
