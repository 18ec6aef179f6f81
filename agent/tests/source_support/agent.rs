//! Talking to a running `capstan run` the way GitHub and Prometheus do: signed push webhooks,
//! and the /metrics text (tests wait on its counters, never on the clock).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use capstan_layout::Tree;
use capstan_layout::scaffold::{self, ClusterRequest};
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;

/// A signed (or unsigned) GitHub push webhook to `/hook/github` on `port`: the status code.
pub fn post(port: u16, body: &str, signature: Option<&str>) -> u16 {
    post_event(port, "push", body, signature)
}

/// A signed (or unsigned) GitHub webhook of `event` to `/hook/github` on `port`: the status code.
pub fn post_event(port: u16, event: &str, body: &str, signature: Option<&str>) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut req = format!(
        "POST /hook/github HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nX-GitHub-Event: {event}\r\nX-GitHub-Delivery: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        uuidish(),
        body.len()
    );
    if let Some(sig) = signature {
        req.push_str(&format!("X-Hub-Signature-256: {sig}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// A plain GET of `path` on `port`: the status code (0 when nothing answers).
pub fn get(port: u16, path: &str) -> u16 {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return 0;
    }
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

pub fn uuidish() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "delivery-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

pub fn push_body(after: &str) -> String {
    format!(
        "{{\"ref\":\"refs/heads/main\",\"after\":\"{after}\",\"repository\":{{\"full_name\":\"acme/fleet\"}}}}"
    )
}

/// Another push of `after` (GitHub's payload says when, `repository.pushed_at`): a body of its
/// own, where the same body again would be a replay the agent ignores.
pub fn push_body_at(after: &str, pushed_at: u64) -> String {
    format!(
        "{{\"ref\":\"refs/heads/main\",\"after\":\"{after}\",\"repository\":{{\"full_name\":\"acme/fleet\",\"pushed_at\":{pushed_at}}}}}"
    )
}

// Not every test binary reads both.
#[allow(unused_imports)]
pub use capstan_harness::metrics::{scrape, value_in};

/// Waits until the metrics satisfy `until` (re-read after each change the agent makes, at most
/// `limit`); returns the text that did.
pub async fn wait_metrics(port: u16, limit: Duration, until: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let text = scrape(port);
        if until(&text) {
            return text;
        }
        assert!(
            start.elapsed() < limit,
            "metrics never got there in {limit:?}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A management cluster `m-<tag>` and the given workload clusters (two workers each), in
/// namespace `t-<tag>`.
pub fn fleet_with(tag: &str, workloads: &[&str]) -> Vec<(String, String)> {
    let mut tree = Tree::new();
    let mut out = Vec::new();
    let mut reqs = vec![ClusterRequest {
        name: format!("m-{tag}"),
        provider: "docker".into(),
        namespace: Some(format!("t-{tag}")),
        pod_cidr: Some("192.168.0.0/16".into()),
        service_cidr: Some("10.96.0.0/12".into()),
        ..Default::default()
    }];
    for (i, w) in workloads.iter().enumerate() {
        reqs.push(ClusterRequest {
            name: w.to_string(),
            management: Some(format!("m-{tag}")),
            provider: "docker".into(),
            namespace: Some(format!("t-{tag}")),
            pod_cidr: Some(format!("172.{}.0.0/16", 16 + i)),
            service_cidr: Some(format!("10.{}.0.0/16", 112 + i)),
            worker_count: Some(2),
            ..Default::default()
        });
    }
    for req in reqs {
        for (p, t) in scaffold::plan(&tree, &req).unwrap().files {
            tree.insert(p.clone(), t.clone());
            out.push((p.display().to_string(), t));
        }
    }
    out
}

/// A fleet of [`fleet_with`] in an upstream repository served by `git daemon`.
pub struct Served {
    /// The files as first pushed.
    pub files: Vec<(String, String)>,
    /// The upstream repository.
    pub up: super::Upstream,
    /// Its server.
    pub git: super::daemon::GitDaemon,
}

impl Served {
    /// Scaffolds, pushes and serves the fleet.
    pub fn new(tag: &str, workloads: &[&str]) -> Served {
        let files = fleet_with(tag, workloads);
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        let up = super::Upstream::new(&refs);
        let git = super::daemon::GitDaemon::start(&up.root);
        Served { files, up, git }
    }

    /// The repository's URL.
    pub fn url(&self) -> String {
        self.git.url("repo.git")
    }

    /// Commits and pushes `cluster`'s first worker group at `count` machines (from the 2 it was
    /// scaffolded with); the commit.
    pub fn scale(&self, cluster: &str, count: u32, msg: &str) -> String {
        let (path, text) = self
            .files
            .iter()
            .find(|(p, _)| p.contains(&format!("{cluster}/cluster")))
            .unwrap_or_else(|| panic!("no cluster file of {cluster}"));
        self.up.commit_and_push(
            &[(
                path,
                &text.replacen("count: 2", &format!("count: {count}"), 1),
            )],
            &[],
            msg,
        )
    }
}

/// The MachineDeployments of namespace `ns`.
pub fn machine_deployments(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource {
            group: "cluster.x-k8s.io".into(),
            version: "v1beta2".into(),
            api_version: "cluster.x-k8s.io/v1beta2".into(),
            kind: "MachineDeployment".into(),
            plural: "machinedeployments".into(),
        },
    )
}

/// Writes `files` (paths relative to `repo`) into a working copy.
pub fn write_files(repo: &std::path::Path, files: Vec<(String, String)>) {
    for (p, t) in files {
        let path = repo.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, t).unwrap();
    }
}

/// `capstan run` as the tests start it: `args` after `run` (the repository, the management
/// cluster, the listeners, …), `kubeconfig`'s credentials, its Git mirror under `dir`, the
/// webhook secret `secret` when there is one, `RUST_LOG=info` and its log in `log`.
pub fn capstan_run(
    args: &[&str],
    kubeconfig: &std::path::Path,
    dir: &std::path::Path,
    secret: Option<&str>,
    log: &std::path::Path,
) -> Running {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_capstan"));
    cmd.arg("run")
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(dir.join("mirror"))
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    if let Some(secret) = secret {
        cmd.env("CAPSTAN_WEBHOOK_SECRET", secret);
    }
    Running(cmd.spawn().unwrap())
}

/// A running `capstan` process, killed and reaped when dropped.
pub struct Running(pub std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A cluster's ManagedCluster as the API server has it now.
pub async fn managed_cluster(client: &kube::Client, cluster: &str) -> Option<DynamicObject> {
    let ar = ApiResource {
        group: "capstan.dev".into(),
        version: "v1alpha1".into(),
        api_version: "capstan.dev/v1alpha1".into(),
        kind: "ManagedCluster".into(),
        plural: "managedclusters".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "capstan-system", &ar);
    api.get_opt(cluster).await.ok()?
}

pub async fn applied_revision(client: &kube::Client, cluster: &str) -> Option<String> {
    let o = managed_cluster(client, cluster).await?;
    o.data
        .pointer("/status/lastAppliedRevision")
        .and_then(|v| v.as_str())
        .map(str::to_string)
}

pub async fn wait_for_revision(
    client: &kube::Client,
    cluster: &str,
    rev: &str,
    limit: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if applied_revision(client, cluster).await.as_deref() == Some(rev) {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}
