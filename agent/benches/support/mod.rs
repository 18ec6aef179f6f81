//! What the agent benchmarks share: the scaffolded fleet in a Git repository, the agent as a
//! child process (webhook pushes, its JSON pass log), /proc figures and a watch that waits
//! for a MachineDeployment's replicas.

#![allow(dead_code)]

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use capstan_layout::Tree;
use capstan_layout::scaffold::{self, ClusterRequest};
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher;
use serde_json::Value;

pub const SECRET: &str = "bench-secret";

pub struct Agent(pub Child);

/// `capstan run` following `repo`'s `main` over Git (polling hourly: webhooks drive it), as the
/// ServiceAccount of `kubeconfig`, logging JSON to `log`, with its webhook and metrics servers on
/// `hook` and `metrics`, and its Git mirror under `cache`.
pub struct RunArgs<'a> {
    pub repo: &'a Path,
    pub kubeconfig: &'a Path,
    pub cache: &'a Path,
    pub log: &'a Path,
    pub hook: u16,
    pub metrics: u16,
    pub concurrency: &'a str,
}

impl Agent {
    /// `CAPSTAN_BENCH_AGENT_WRAP` runs the agent under a profiler (`heaptrack -o /tmp/agent`,
    /// `valgrind --tool=dhat`, …): the words of the variable go before the agent's command line.
    /// The peak RSS and CPU figures are then the wrapper's, so read the profiler's instead. The
    /// agent runs in a process group of its own, so that a wrapper's child stops with it.
    pub fn run(a: &RunArgs) -> Agent {
        Agent::run_with(a, &[])
    }

    /// [`Agent::run`] with more arguments of `capstan run` (GitHub's, for pull-request plans).
    pub fn run_with(a: &RunArgs, extra: &[String]) -> Agent {
        let wrap = std::env::var("CAPSTAN_BENCH_AGENT_WRAP").unwrap_or_default();
        let mut words = wrap.split_whitespace();
        let mut cmd = match words.next() {
            Some(program) => {
                let mut cmd = Command::new(program);
                cmd.args(words).arg(env!("CARGO_BIN_EXE_capstan"));
                cmd
            }
            None => Command::new(env!("CARGO_BIN_EXE_capstan")),
        };
        let child = cmd
            .args(["run", "--git", "--branch", "main", "--interval", "1h"])
            .args(["--log-json", "--management", "mgmt"])
            .args(["--concurrency", a.concurrency])
            .arg("--repo")
            .arg(a.repo)
            .args(["--webhook-addr", &format!("127.0.0.1:{}", a.hook)])
            .args(["--metrics-addr", &format!("127.0.0.1:{}", a.metrics)])
            .arg("--kubeconfig")
            .arg(a.kubeconfig)
            .arg("--cache-dir")
            .arg(a.cache)
            .args(extra)
            .env("CAPSTAN_WEBHOOK_SECRET", SECRET)
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(fs::File::create(a.log).unwrap())
            .process_group(0)
            .spawn()
            .unwrap();
        Agent(child)
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Agent {
    /// SIGTERM to the process and its process group (a profiler wrapping the agent writes its
    /// data out), then SIGKILL to whatever of them is left after ten seconds. The process is
    /// named too: kustomize-controller is run through this type without a group of its own.
    fn drop(&mut self) {
        let pid = self.0.id().to_string();
        let group = format!("-{pid}");
        let signal = |s: &str| {
            let _ = Command::new("kill")
                .args([s, "--", &pid, &group])
                .stderr(std::process::Stdio::null())
                .status();
        };
        signal("-TERM");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && matches!(self.0.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        signal("-KILL");
        let _ = self.0.wait();
    }
}

/// Runs git in `dir` as the benchmarks' author; its trimmed stdout, panicking on failure.
pub fn bench_git(dir: &Path, args: &[&str]) -> String {
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

#[allow(unused_imports)]
pub use capstan_harness::ports::free_port;

pub fn http(port: u16, request: &str) -> (u16, String) {
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

pub fn push(port: u16, commit: &str) {
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

/// The agent's per-cluster "reconciled" log records (JSON logs), in order.
pub fn reconciled(log: &Path) -> Vec<Value> {
    let mut tail = LogTail::new(log);
    tail.poll();
    tail.reconciled
}

/// The agent's "queued" records (a trigger reached the queue), in order.
pub fn queued(log: &Path) -> Vec<Value> {
    let mut tail = LogTail::new(log);
    tail.poll();
    tail.queued
}

/// The agent's JSON log read as it grows: each poll reads only what was appended since the one
/// before. (Waiting by re-reading the whole log every 20 ms cost the bench up to a fifth of the
/// machine's two cores during a 3,000-cluster cold apply, growing with the log: CPU the API server
/// needed for the agent's writes.)
pub struct LogTail {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
    /// "reconciled" records seen so far, in order.
    pub reconciled: Vec<Value>,
    /// "queued" records seen so far, in order.
    pub queued: Vec<Value>,
}

impl LogTail {
    pub fn new(path: &Path) -> LogTail {
        LogTail {
            path: path.to_path_buf(),
            offset: 0,
            partial: Vec::new(),
            reconciled: Vec::new(),
            queued: Vec::new(),
        }
    }

    /// Reads what was appended since the last poll.
    pub fn poll(&mut self) {
        use std::io::{Seek, SeekFrom};
        let Ok(mut f) = fs::File::open(&self.path) else {
            return;
        };
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buf = std::mem::take(&mut self.partial);
        let Ok(n) = f.read_to_end(&mut buf) else {
            self.partial = buf;
            return;
        };
        self.offset += n as u64;
        let complete = buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        self.partial = buf.split_off(complete);
        for line in String::from_utf8_lossy(&buf).lines() {
            // A record's `fields` carry `message` twice (the event and the cluster's status
            // message), so the event is matched on the raw line.
            let list = if line.contains(r#""message":"reconciled""#) {
                &mut self.reconciled
            } else if line.contains(r#""message":"queued""#) {
                &mut self.queued
            } else {
                continue;
            };
            if let Ok(v) = serde_json::from_str::<Value>(line) {
                list.push(v["fields"].clone());
            }
        }
    }
}

/// Waits until each of `clusters` clusters has a "reconciled" record at `revision` after the
/// first `skip` records; returns those first records per cluster.
pub fn wait_reconciled(
    log: &Path,
    skip: usize,
    revision: &str,
    clusters: usize,
    limit: Duration,
) -> std::collections::BTreeMap<String, Value> {
    let start = Instant::now();
    let mut tail = LogTail::new(log);
    let mut seen = std::collections::BTreeMap::new();
    let mut read = skip;
    loop {
        tail.poll();
        for r in tail.reconciled.iter().skip(read) {
            if r["revision"] == revision {
                let name = r["cluster"].as_str().unwrap_or("").to_string();
                seen.entry(name).or_insert_with(|| r.clone());
            }
        }
        read = read.max(tail.reconciled.len());
        if seen.len() >= clusters {
            return seen;
        }
        assert!(
            start.elapsed() < limit,
            "{} of {clusters} clusters reconciled at {revision} after {limit:?}",
            seen.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The writes of a pass's "reconciled" records (from [`wait_reconciled`]); none may have failed.
pub fn writes_of_successful(records: &std::collections::BTreeMap<String, Value>) -> u64 {
    let failed = records.values().filter(|r| r["phase"] == "Failed").count();
    assert_eq!(failed, 0, "{records:?}");
    records
        .values()
        .map(|r| r["writes"].as_u64().unwrap_or(0))
        .sum()
}

/// Waits for a "queued" record after the first `skip` and then until the queue is drained
/// (a later record with nothing queued or running); returns the "reconciled" records since
/// `skip_reconciled`.
pub fn wait_drained(
    log: &Path,
    skip: usize,
    skip_reconciled: usize,
    limit: Duration,
) -> Vec<Value> {
    let start = Instant::now();
    let mut tail = LogTail::new(log);
    loop {
        tail.poll();
        if tail.queued.len() > skip {
            let r = tail.reconciled.get(skip_reconciled..).unwrap_or_default();
            let last = tail.queued.last().unwrap();
            let idle = |v: &Value| v["queued"] == 0 && v["running"] == 0;
            if idle(last) && r.is_empty() || r.last().is_some_and(idle) {
                return r.to_vec();
            }
        }
        assert!(start.elapsed() < limit, "queue not drained after {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A number a bench takes from the environment (`CAPSTAN_BENCH_CLUSTERS`, …), else `default`.
pub fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn vm(pid: u32, field: &str) -> f64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|k| k.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

pub fn md_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
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
pub async fn replicas_become(
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

/// CPU seconds of the control plane (kube-apiserver, etcd) so far.
pub fn server_cpu(cp: &capstan_harness::ControlPlane) -> f64 {
    let pids = cp.pids();
    cpu_seconds(pids.kube_apiserver.pid as u32) + cpu_seconds(pids.etcd.pid as u32)
}

/// CPU seconds (user + system) the process has used so far (`/proc/<pid>/stat`).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at field 3.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 after ")".
    (ticks(11) + ticks(12)) / clock_ticks()
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// A scaffolded fleet committed to a Git repository.
pub struct Fleet {
    /// The repository (branch `main`).
    pub repo: PathBuf,
    /// The commit of the whole fleet.
    pub commit: String,
    /// Objects the fleet renders to (management cluster included).
    pub objects: usize,
    /// Every rendered object, per cluster (management cluster first).
    pub rendered: Vec<(String, Vec<Value>)>,
}

/// Scaffolds a management cluster and `n` docker workload clusters (`w0000`…, two workers,
/// namespaces `team-0`…`team-19`) into `repo` and commits them to `main`.
pub fn write_fleet(repo: &Path, n: usize) -> Fleet {
    assert!(
        n <= 16_384,
        "the benchmark's CIDR scheme has room for 16,384 clusters"
    );
    fs::create_dir_all(repo).unwrap();
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
        service_cidr: Some("172.16.0.0/16".into()),
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
            // Pods in 10.0.0.0/8, services in 100.64.0.0/10: distinct up to 16,384 clusters.
            pod_cidr: Some(format!("10.{}.{}.0/22", i / 64, (i % 64) * 4)),
            service_cidr: Some(format!("100.{}.{}.0/24", 64 + i / 256, i % 256)),
            ..Default::default()
        };
        let files = scaffold::plan(&base, &req).unwrap().files;
        write(&mut tree, files);
    }
    let fleet = capstan_layout::load(&tree);
    assert!(!fleet.has_errors());
    let rendered: Vec<(String, Vec<Value>)> = fleet
        .clusters
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                c.objects.as_ref().map(|o| o.values()).unwrap_or_default(),
            )
        })
        .collect();
    let objects = rendered.iter().map(|(_, o)| o.len()).sum();
    bench_git(repo, &["init", "-q", "-b", "main"]);
    bench_git(repo, &["add", "-A"]);
    bench_git(repo, &["commit", "-q", "-m", "fleet"]);
    let commit = bench_git(repo, &["rev-parse", "HEAD"]);
    Fleet {
        repo: repo.to_owned(),
        commit,
        objects,
        rendered,
    }
}

/// Scales `w0000`'s workers from 2 to `count` in the repository and commits; returns the commit.
pub fn scale_w0000(repo: &Path, from: u32, to: u32) -> String {
    let spec = repo.join("clusters/mgmt/workload-clusters/w0000/cluster.yaml");
    fs::write(
        &spec,
        fs::read_to_string(&spec).unwrap().replacen(
            &format!("count: {from}"),
            &format!("count: {to}"),
            1,
        ),
    )
    .unwrap();
    bench_git(repo, &["commit", "-q", "-am", "scale w0000"]);
    bench_git(repo, &["rev-parse", "HEAD"])
}

/// The agent's pipeline step times (`capstan_reconcile_duration_seconds_sum` by its `stage`
/// label, from its /metrics) and log position when a change is pushed, to say afterwards where
/// its time went.
pub struct StepClock {
    before: std::collections::BTreeMap<String, f64>,
    queued: usize,
    reconciled: usize,
}

impl StepClock {
    pub fn start(log: &Path, metrics: u16) -> StepClock {
        StepClock {
            before: step_seconds(metrics),
            queued: queued(log).len(),
            reconciled: reconciled(log).len(),
        }
    }

    /// Waits until the change's pass has drained the queue; then the time the agent spent in
    /// each pipeline step for it, how long after the revision was queued `cluster`'s run finished, and
    /// how many runs finished before it (runs that change nothing finish in well under a
    /// millisecond, so others finish first even when `cluster` started first).
    pub fn report(&self, log: &Path, metrics: u16, cluster: &str) -> String {
        let order = wait_drained(log, self.queued, self.reconciled, Duration::from_secs(1800));
        let position = order.iter().position(|r| r["cluster"] == cluster);
        let spent: Vec<String> = step_seconds(metrics)
            .iter()
            .map(|(step, s)| {
                let d = s - self.before.get(step).copied().unwrap_or(0.0);
                format!("{step} {:.0} ms", d * 1000.0)
            })
            .collect();
        // The changed cluster's run, and its management cluster's (a workload waits for it when
        // it must).
        let run_of = |c: &str| {
            timestamps(log, self.queued, self.reconciled, c).map_or(
                "-".to_string(),
                |(q, r, took)| {
                    format!(
                        "finished {:.0} ms after the revision was queued, after {took} ms running",
                        (r - q).rem_euclid(86_400.0) * 1000.0
                    )
                },
            )
        };
        // The stage sums cover every load and preparation until the queue drained (a watch's
        // re-list prepares the revision again); the revision's own "queued" record says what its
        // trigger took.
        let mut passes = queued(log);
        let passes = passes.split_off(self.queued.min(passes.len()));
        let own = passes.first().map_or("-".to_string(), |q| {
            format!(
                "load {} ms + prepare {} ms = queued {} ms after the trigger",
                q["load_ms"], q["prepare_ms"], q["elapsed_ms"]
            )
        });
        let prepared = passes
            .iter()
            .filter(|q| q["prepare_ms"].as_u64().unwrap_or(0) > 0)
            .count();
        format!(
            "the revision's own trigger: {own}; the agent's stage times until the queue drained ({prepared} preparations): {}; {cluster}'s run {}, {} of {} runs to finish; mgmt's run {}",
            spent.join(", "),
            run_of(cluster),
            position.map_or("-".to_string(), |p| (p + 1).to_string()),
            order.len(),
            run_of("mgmt")
        )
    }
}

/// Seconds into the day of a log record's UTC timestamp (`…THH:MM:SS.ffffffZ`).
fn seconds_of_day(record: &Value) -> Option<f64> {
    let (_, time) = record["timestamp"].as_str()?.split_once('T')?;
    let mut parts = time.trim_end_matches('Z').split(':');
    let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
    Some(h.parse::<f64>().ok()? * 3600.0 + m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
}

/// When the first revision after `skip_queued` "queued" records was queued, when `cluster`'s
/// first "reconciled" record after `skip_reconciled` was written, and how long that run took.
fn timestamps(
    log: &Path,
    skip_queued: usize,
    skip_reconciled: usize,
    cluster: &str,
) -> Option<(f64, f64, u64)> {
    let text = fs::read_to_string(log).ok()?;
    // By the line's text, as [`reconciled`] does: a "reconciled" record's fields carry a second
    // `message` (the cluster's), which is the one a JSON parser keeps.
    let of = |message: &'static str| {
        let needle = format!(r#""message":"{message}""#);
        text.lines()
            .filter(move |l| l.contains(&needle))
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    };
    let queued = of("queued").nth(skip_queued)?;
    let run = of("reconciled")
        .skip(skip_reconciled)
        .find(|r| r["fields"]["cluster"] == cluster)?;
    let took = run["fields"]["elapsed_ms"].as_u64().unwrap_or(0);
    Some((seconds_of_day(&queued)?, seconds_of_day(&run)?, took))
}

fn step_seconds(metrics: u16) -> std::collections::BTreeMap<String, f64> {
    let (_, body) = http(
        metrics,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    );
    body.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("capstan_reconcile_duration_seconds_sum{stage=\"")?;
            let (step, value) = rest.split_once("\"} ")?;
            Some((step.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// The positive number in environment variable `var`, else `default`.
pub fn setting<T: std::str::FromStr + PartialOrd + Default>(var: &str, default: T) -> T {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > T::default())
        .unwrap_or(default)
}

/// Secrets of one running cluster: (name suffix, [(key, bytes)]).
fn secrets_of(cluster: &str) -> Vec<(String, Vec<(&'static str, usize)>)> {
    let cert = [("tls.crt", 1_200), ("tls.key", 1_700)];
    let mut out = vec![
        (format!("{cluster}-ca"), cert.to_vec()),
        (format!("{cluster}-etcd"), cert.to_vec()),
        (format!("{cluster}-proxy"), cert.to_vec()),
        (format!("{cluster}-sa"), cert.to_vec()),
        (format!("{cluster}-kubeconfig"), vec![("value", 5_600)]),
    ];
    for m in 0..3 {
        out.push((format!("{cluster}-bootstrap-{m}"), vec![("value", 9_000)]));
    }
    out
}

/// `len` random bytes as base64 (random characters of its alphabet, a multiple of four).
fn random_base64(len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    (0..len.div_ceil(3) * 4)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect()
}

/// Applies `objects` as capstan does, 32 at a time; how many the server took.
pub async fn apply_all<'a>(
    client: &kube::Client,
    resolver: &capstan::k8s::Resolver,
    objects: impl Iterator<Item = &'a Value>,
) -> usize {
    futures::stream::iter(objects)
        .map(|o| capstan::k8s::apply::apply_one(client, resolver, o, false))
        .buffer_unordered(32)
        .filter(|r| futures::future::ready(r.is_ok()))
        .count()
        .await
}

/// The Secrets Cluster API writes for a running cluster `name` in `ns`: its CA, etcd CA,
/// service-account keys, front-proxy CA, kubeconfig and one bootstrap-data Secret per machine
/// (three machines), with contents of their real sizes (random bytes, base64: what counts is
/// volume, not validity).
pub fn cluster_api_secrets(name: &str, ns: &str) -> Vec<Value> {
    secrets_of(name)
        .into_iter()
        .map(|(s, keys)| {
            let data: serde_json::Map<String, Value> = keys
                .into_iter()
                .map(|(k, len)| (k.to_string(), serde_json::json!(random_base64(len))))
                .collect();
            serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": s, "namespace": ns,
                    "labels": {"cluster.x-k8s.io/cluster-name": name}},
                "type": "cluster.x-k8s.io/secret", "data": data})
        })
        .collect()
}

/// Applies the Namespaces of `objects` (capstan creates a namespace before what goes in it).
pub async fn apply_namespaces<'a>(
    client: &kube::Client,
    resolver: &capstan::k8s::Resolver,
    objects: impl Iterator<Item = &'a Value>,
) {
    let namespaces: std::collections::BTreeSet<&str> = objects
        .filter_map(|o| o.pointer("/metadata/namespace").and_then(Value::as_str))
        .collect();
    for ns in namespaces {
        let obj =
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        capstan::k8s::apply::apply_one(client, resolver, &obj, false)
            .await
            .unwrap();
    }
}
