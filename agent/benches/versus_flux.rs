//! Benchmark (prints figures; not a test): capstan side by side with Flux and with the API
//! server's own limit, on the same machine, the same control plane build and the same objects,
//! in one run.
//!
//! The fleet: a management cluster and N scaffolded docker workload clusters (default 100;
//! `CAPSTAN_BENCH_CLUSTERS` overrides) committed to branch `main` of a local Git repository.
//! The same fleet rendered by `capstan render` (one directory of plain manifests per cluster)
//! is committed to branch `flux` of that repository. Each peer gets a fresh control plane:
//!
//! - **capstan**: `capstan run` following `main` (concurrency 4).
//! - **Flux**: kustomize-controller (built from Go modules, see `capstan_harness::flux`,
//!   `--concurrent=4`, its default client QPS/burst) with one `Kustomization` per cluster, prune
//!   on. **source-controller is played by this benchmark** (it does not build from the module
//!   proxy): one `GitRepository` whose status carries an artifact, `git archive` of branch
//!   `flux` as a tar.gz served on loopback, its `sha256:` digest and revision, Ready. The
//!   team namespaces are created beforehand (capstan creates the namespaces it needs).
//! - **SSA limit**: a minimal client server-side applying the same objects concurrently (no
//!   reads, no planning; forced and strictly validated, as capstan asks) at several
//!   concurrencies, each into fresh namespaces; the best is the API server's own throughput here.
//!
//! Every peer's control plane has the watch caches of the fleet's kinds built before its clock
//! starts ([`warm_watch_caches`]), as a management cluster running its controllers has them.
//!
//! Measured for capstan and Flux: cold apply (from the process start until every object is
//! applied; for Flux until every Kustomization is Ready at the revision; for capstan also broken
//! down from the audit log: its first write, and what it wrote besides the fleet's objects),
//! the API requests and writes of a no-op reconcile of everything (the audit log, the peer's
//! own requests by user agent; for Flux every Kustomization forced with
//! `reconcile.fluxcd.io/requestedAt`),
//! the latency of a one-cluster change (capstan: from the webhook of the new commit; Flux:
//! from the new artifact in the GitRepository status; both until a watch sees the changed
//! MachineDeployment), the process's peak RSS (VmHWM) and CPU seconds over the run.
//!
//! `CAPSTAN_BENCH_PEERS` (default `capstan,limit,flux`) selects the peers; the scale curve runs
//! `CAPSTAN_BENCH_PEERS=capstan` at N = 100, 1000, 3000, 10000. `CAPSTAN_BENCH_ROUNDS=R` runs
//! capstan and the SSA limit R times, interleaved, and reports the median of each and the ratio
//! round by round; `CAPSTAN_BENCH_CONCURRENCY` sets capstan's and Flux's concurrency (4).
//! `CAPSTAN_BENCH_KEEP_LOG=<file>` keeps a copy of the agent's JSON log (each run's
//! `elapsed_ms`, each revision's load and preparation) after the run.
//!
//! Run: `cargo bench -p capstan --bench versus_flux` (N = 100, a few minutes), or
//! `CAPSTAN_BENCH_CLUSTERS=1000 cargo bench -p capstan --bench versus_flux` (full mode).

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use capstan_harness::{ControlPlane, FluxBinaries};
use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::{Discovery, Scope};
use serde_json::json;
use sha2::{Digest, Sha256};
use support::{
    Agent, Fleet, RunArgs, StepClock, bench_git, cpu_seconds, free_port, md_api, push, queued,
    reconciled, replicas_become, server_cpu, vm, wait_drained, wait_reconciled, write_fleet,
    writes_of_successful,
};

/// Clusters (capstan) and Kustomizations (Flux) reconciled at once; `CAPSTAN_BENCH_CONCURRENCY`
/// overrides it for both.
fn concurrency() -> usize {
    support::env_number("CAPSTAN_BENCH_CONCURRENCY", 4)
}

/// What one peer measured.
#[derive(Default, Clone)]
struct Figures {
    cold_s: f64,
    noop_requests: usize,
    noop_writes: usize,
    change_ms: f64,
    peak_rss_mib: f64,
    cpu_s: f64,
    apiserver_rss_mib: f64,
}

fn kube_api(
    client: &kube::Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    ns: &str,
) -> Api<DynamicObject> {
    let ar = capstan_harness::objects::resource(group, version, kind, plural);
    Api::namespaced_with(client.clone(), ns, &ar)
}

async fn settle(cp: &ControlPlane) {
    cp.audit()
        .settle(Duration::from_millis(500), Duration::from_secs(30))
        .await;
}

/// Builds the API server's watch cache of every kind of the fleet (and MachineSets, which
/// capstan's health reads), as a management cluster whose controllers watch those kinds has
/// them. A fresh API server builds a custom resource's watch cache on the first request for it
/// and answers reads that need it with 429 "storage is (re)initializing", Retry-After: 1, until
/// then; a peer that reads each kind once at start (capstan's watches) would otherwise wait a
/// second the others (writes only, or kinds the bench created objects of) do not. Every peer
/// gets the same: one list of one object per kind, by the bench's client, before its clock.
async fn warm_watch_caches(client: &kube::Client, fleet: &Fleet) {
    let discovery = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    let mut kinds: std::collections::BTreeSet<(String, String)> = fleet
        .rendered
        .iter()
        .flat_map(|(_, objs)| objs.iter())
        .map(|o| {
            (
                o["apiVersion"].as_str().unwrap().to_string(),
                o["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    kinds.insert(("cluster.x-k8s.io/v1beta2".into(), "MachineSet".into()));
    let lists = kinds.iter().map(|(api_version, kind)| {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        let (ar, _) = discovery.resolve_gvk(&gvk).expect("kind served");
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        async move {
            // The client retries the 429 itself, after the Retry-After the server gives.
            api.list_metadata(&kube::api::ListParams::default().limit(1))
                .await
                .expect("list");
        }
    });
    futures::future::join_all(lists).await;
}

/// The peer's own requests (not watches) since `mark`: those `own` says are its own.
fn requests_since(
    cp: &ControlPlane,
    mark: capstan_harness::AuditMark,
    own: impl Fn(&capstan_harness::AuditEvent) -> bool,
) -> (usize, usize, BTreeMap<String, usize>) {
    let events: Vec<_> = cp
        .audit()
        .events_since(mark)
        .unwrap()
        .into_iter()
        .filter(|e| e.verb != "watch" && own(e))
        .collect();
    let mut by_verb = BTreeMap::new();
    for e in &events {
        *by_verb
            .entry(format!("{}/{}", e.verb, e.resource().unwrap_or("-")))
            .or_insert(0) += 1;
    }
    let writes = events.iter().filter(|e| e.is_write()).count();
    (events.len(), writes, by_verb)
}

async fn run_capstan(fleet: &Fleet, c2: &str, tmp: &Path) -> Figures {
    let cp = ControlPlane::start().await.expect("control plane");
    let client = cp.client();
    // As in production: the agent runs as its ServiceAccount, with the rules of `capstan install`.
    let agent_kubeconfig = capstan::install::testing::agent_kubeconfig(&cp).await;
    let (hook, metrics) = (free_port(), free_port());
    let log = tmp.join("capstan.log");
    warm_watch_caches(&client, fleet).await;
    settle(&cp).await;
    let cold_mark = cp.audit().mark();
    let server_cpu_before = server_cpu(&cp);
    let started_at = std::time::SystemTime::now();
    let started = Instant::now();
    let agent = Agent::run(&RunArgs {
        repo: &fleet.repo,
        kubeconfig: &agent_kubeconfig,
        cache: &tmp.join("mirror"),
        log: &log,
        hook,
        metrics,
        concurrency: &concurrency().to_string(),
    });
    let pid = agent.pid();
    let first = wait_reconciled(
        &log,
        0,
        &fleet.commit,
        fleet.rendered.len(),
        Duration::from_secs(4 * 3600),
    );
    let cold = started.elapsed();
    let (cold_server_cpu, cold_agent_cpu) = (server_cpu(&cp) - server_cpu_before, cpu_seconds(pid));
    let writes = writes_of_successful(&first);
    println!(
        "capstan: cold apply {:.1}s ({} clusters, {writes} writes)",
        cold.as_secs_f64(),
        first.len()
    );
    settle(&cp).await;
    println!(
        "capstan: cold apply, from the API server's audit log: {}",
        cold_timeline(&cp, cold_mark, started_at, fleet.objects, |writes| {
            cpu_per_write(cold_server_cpu, cold_agent_cpu, writes)
        })
    );

    // Let the watch events of the cold apply settle, then the webhook for the same revision:
    // every cluster is planned again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    settle(&cp).await;
    let (q0, r0) = (queued(&log).len(), reconciled(&log).len());
    let mark = cp.audit().mark();
    push(hook, &fleet.commit);
    let again = wait_drained(&log, q0, r0, Duration::from_secs(600));
    settle(&cp).await;
    // Only the agent (its ServiceAccount) talks to this API server; the bench's client is idle.
    let (noop_requests, noop_writes, by_verb) = requests_since(&cp, mark, |e| {
        !e.user.username.starts_with("system:apiserver")
    });
    println!(
        "capstan: no-op pass ({} clusters reconciled) {noop_requests} requests, {noop_writes} writes {by_verb:?}",
        again.len()
    );

    // One-cluster change: main moves to the commit scaling w0000's workers; the webhook says so.
    bench_git(&fleet.repo, &["reset", "-q", "--hard", c2]);
    let mds = md_api(&client, "team-0");
    let seen = tokio::spawn(async move {
        replicas_become(&mds, "w0000-md-0", 3, Duration::from_secs(600)).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let clock = StepClock::start(&log, metrics);
    let sent = Instant::now();
    push(hook, c2);
    let applied = seen.await.unwrap();
    let change_ms = applied.duration_since(sent).as_secs_f64() * 1000.0;
    println!(
        "capstan: one-cluster change applied {change_ms:.0} ms after the push; {}",
        clock.report(&log, metrics, "w0000")
    );
    bench_git(&fleet.repo, &["reset", "-q", "--hard", &fleet.commit]);
    if let Ok(keep) = std::env::var("CAPSTAN_BENCH_KEEP_LOG") {
        std::fs::copy(&log, keep).unwrap();
    }
    Figures {
        cold_s: cold.as_secs_f64(),
        noop_requests,
        noop_writes,
        change_ms,
        peak_rss_mib: vm(pid, "VmHWM:"),
        cpu_s: cpu_seconds(pid),
        apiserver_rss_mib: vm(cp.pids().kube_apiserver.pid as u32, "VmHWM:"),
    }
}

/// Serves the files of `dir` over plain HTTP on loopback (source-controller's artifact server,
/// played by the benchmark). Returns the port.
fn serve_dir(dir: PathBuf) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    return;
                }
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).map_or(true, |n| n == 0) || h == "\r\n" {
                        break;
                    }
                }
                let path = line.split_whitespace().nth(1).unwrap_or("/");
                let file = dir.join(path.trim_start_matches('/'));
                let mut out = stream;
                match fs::read(&file) {
                    Ok(body) => {
                        let _ = write!(
                            out,
                            "HTTP/1.1 200 OK\r\nContent-Type: application/gzip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        );
                        let _ = out.write_all(&body);
                    }
                    Err(_) => {
                        let _ = write!(
                            out,
                            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        );
                    }
                }
            });
        }
    });
    port
}

/// `git` with an environment (a private index for committing a directory to another branch).
fn git_env(dir: &Path, env: &[(&str, &Path)], args: &[&str]) -> String {
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(dir).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "b@example.com")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "b@example.com")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Renders the repository's fleet with `capstan render` into `<out>/<cluster>/<cluster>.yaml`.
fn render_for_flux(repo: &Path, out: &Path) {
    let flat = out.with_extension("flat");
    let status = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .arg("render")
        .arg(repo)
        .arg("--output-dir")
        .arg(&flat)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "capstan render");
    for e in fs::read_dir(&flat).unwrap().flatten() {
        let name = e.path().file_stem().unwrap().to_string_lossy().to_string();
        fs::create_dir_all(out.join(&name)).unwrap();
        fs::rename(e.path(), out.join(&name).join(format!("{name}.yaml"))).unwrap();
    }
    fs::remove_dir_all(&flat).unwrap();
}

/// One artifact of branch `flux`: the file name served, its digest and its revision.
struct Artifact {
    file: String,
    digest: String,
    revision: String,
}

/// Commits `dir` as the next commit of branch `flux` and archives it as a tar.gz into `serve`.
fn commit_flux_branch(repo: &Path, dir: &Path, serve: &Path, n: usize) -> Artifact {
    let index = serve.join("flux.index");
    let env = [("GIT_INDEX_FILE", index.as_path()), ("GIT_WORK_TREE", dir)];
    git_env(repo, &env, &["add", "-A", "."]);
    let tree = git_env(repo, &env, &["write-tree"]);
    let parent = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["rev-parse", "-q", "--verify", "refs/heads/flux"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let msg = format!("rendered fleet {n}");
    let mut args = vec!["commit-tree", &tree, "-m", &msg];
    if !parent.is_empty() {
        args.extend(["-p", &parent]);
    }
    let commit = git_env(repo, &[], &args);
    git_env(repo, &[], &["update-ref", "refs/heads/flux", &commit]);
    let file = format!("flux-{n}.tar.gz");
    git_env(
        repo,
        &[],
        &[
            "archive",
            "--format=tar.gz",
            "-o",
            serve.join(&file).to_str().unwrap(),
            "flux",
        ],
    );
    let digest = hex::encode(Sha256::digest(fs::read(serve.join(&file)).unwrap()));
    Artifact {
        file,
        digest: format!("sha256:{digest}"),
        revision: format!("flux@sha1:{commit}"),
    }
}

fn now() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Publishes `a` in the GitRepository's status, as source-controller would after a fetch.
async fn publish(repos: &Api<DynamicObject>, port: u16, a: &Artifact) {
    let t = now();
    let status = json!({"status": {
        "observedGeneration": 1,
        "artifact": {
            "path": format!("gitrepository/flux-system/fleet/{}", a.file),
            "url": format!("http://127.0.0.1:{port}/{}", a.file),
            "revision": a.revision,
            "digest": a.digest,
            "lastUpdateTime": t,
        },
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "Succeeded", "observedGeneration": 1,
            "message": format!("stored artifact for revision '{}'", a.revision),
            "lastTransitionTime": t,
        }],
    }});
    repos
        .patch_status("fleet", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("GitRepository status");
}

/// Waits until every Kustomization is Ready at `revision` (and, with `token`, has handled that
/// reconcile request).
async fn all_ready(ks: &Api<DynamicObject>, revision: &str, token: Option<&str>, limit: Duration) {
    if let Err((ready, all)) = ready_within(ks, revision, token, limit).await {
        panic!("{ready}/{all} Kustomizations ready after {limit:?}");
    }
}

/// Waits up to `limit` until every Kustomization has been seen Ready at `revision` (having
/// handled `token`); otherwise how many were, of how many. Each counts once seen: at 1,000
/// Kustomizations a sweep over the fleet outlasts part of their one-hour interval, so some are
/// always reconciling again and "all Ready at the same moment" may never happen. Read with a
/// watch, as capstan's side is read from its log as it grows: listing every Kustomization five
/// times a second cost the API server Flux was writing through.
async fn ready_within(
    ks: &Api<DynamicObject>,
    revision: &str,
    token: Option<&str>,
    limit: Duration,
) -> Result<(), (usize, usize)> {
    use kube::runtime::watcher::{self, Event};
    let ready = |k: &DynamicObject| {
        let s = &k.data["status"];
        s["lastAppliedRevision"] == revision
            && token.is_none_or(|t| s["lastHandledReconcileAt"] == t)
            && s["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
    };
    let (mut all, mut seen) = (
        std::collections::BTreeSet::new(),
        std::collections::BTreeSet::new(),
    );
    let watch = async {
        let mut events = std::pin::pin!(watcher::watcher(ks.clone(), watcher::Config::default()));
        let mut listed = false;
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Apply(k) | Event::InitApply(k)) => {
                    let name = k.metadata.name.clone().unwrap_or_default();
                    if ready(&k) {
                        seen.insert(name.clone());
                    }
                    all.insert(name);
                }
                Ok(Event::Delete(k)) => {
                    all.remove(&k.metadata.name.unwrap_or_default());
                }
                Ok(Event::InitDone) => listed = true,
                Ok(Event::Init) | Err(_) => {}
            }
            if listed && !all.is_empty() && all.iter().all(|n| seen.contains(n)) {
                return;
            }
        }
    };
    match tokio::time::timeout(limit, watch).await {
        Ok(()) => Ok(()),
        Err(_) => Err((seen.len(), all.len())),
    }
}

async fn run_flux(flux: &FluxBinaries, fleet: &Fleet, c2: &str, tmp: &Path) -> Figures {
    // The rendered fleet on branch `flux`, twice: as of main and as of the scaled commit.
    let serve = tmp.join("artifacts");
    fs::create_dir_all(&serve).unwrap();
    let r1 = tmp.join("rendered-1");
    render_for_flux(&fleet.repo, &r1);
    let a1 = commit_flux_branch(&fleet.repo, &r1, &serve, 1);
    bench_git(&fleet.repo, &["reset", "-q", "--hard", c2]);
    let r2 = tmp.join("rendered-2");
    render_for_flux(&fleet.repo, &r2);
    bench_git(&fleet.repo, &["reset", "-q", "--hard", &fleet.commit]);
    let a2 = commit_flux_branch(&fleet.repo, &r2, &serve, 2);
    let port = serve_dir(serve.clone());

    let cp = ControlPlane::start().await.expect("control plane");
    let client = cp.client();
    capstan_harness::install_crds(&client, &flux.crds, Duration::from_secs(120))
        .await
        .expect("Flux CRDs");
    warm_watch_caches(&client, fleet).await;
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    // The namespaces the objects live in (capstan creates the ones it needs itself).
    let mut names: std::collections::BTreeSet<String> = fleet
        .rendered
        .iter()
        .flat_map(|(_, objs)| objs.iter())
        .filter_map(|o| o["metadata"]["namespace"].as_str().map(str::to_string))
        .collect();
    names.insert("flux-system".into());
    for ns in names {
        let _ = nss
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
            )
            .await;
    }
    let repos = kube_api(
        &client,
        "source.toolkit.fluxcd.io",
        "v1",
        "GitRepository",
        "gitrepositories",
        "flux-system",
    );
    let repo_obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": "fleet", "namespace": "flux-system"},
        "spec": {"url": format!("http://127.0.0.1:{port}/fleet.git"), "interval": "1h", "ref": {"branch": "flux"}},
    }))
    .unwrap();
    repos
        .create(&PostParams::default(), &repo_obj)
        .await
        .unwrap();
    publish(&repos, port, &a1).await;
    let ks = kube_api(
        &client,
        "kustomize.toolkit.fluxcd.io",
        "v1",
        "Kustomization",
        "kustomizations",
        "flux-system",
    );
    for (name, _) in &fleet.rendered {
        let k: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": name, "namespace": "flux-system"},
            "spec": {"interval": "1h", "path": format!("./{name}"), "prune": true,
                     "sourceRef": {"kind": "GitRepository", "name": "fleet"}},
        }))
        .unwrap();
        ks.create(&PostParams::default(), &k).await.unwrap();
    }

    let log = tmp.join("kustomize-controller.log");
    let started = Instant::now();
    let child = Command::new(&flux.kustomize_controller)
        .args([
            &format!("--concurrent={}", concurrency()),
            "--enable-leader-election=false",
            &format!("--metrics-addr=127.0.0.1:{}", free_port()),
            &format!("--health-addr=127.0.0.1:{}", free_port()),
            "--log-encoding=json",
        ])
        .env("KUBECONFIG", cp.kubeconfig_path())
        .env("RUNTIME_NAMESPACE", "flux-system")
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id();
    let _controller = Agent(child);
    all_ready(&ks, &a1.revision, None, Duration::from_secs(4 * 3600)).await;
    let cold = started.elapsed();
    println!(
        "Flux: cold apply {:.1}s (every Kustomization Ready at {})",
        cold.as_secs_f64(),
        a1.revision
    );

    // A forced no-op reconcile of every Kustomization.
    tokio::time::sleep(Duration::from_secs(3)).await;
    settle(&cp).await;
    let mark = cp.audit().mark();
    let token = "noop-1";
    let pp = PatchParams::default();
    for (name, _) in &fleet.rendered {
        let p = json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}});
        ks.patch(name, &pp, &Patch::Merge(&p)).await.unwrap();
    }
    all_ready(&ks, &a1.revision, Some(token), Duration::from_secs(3600)).await;
    settle(&cp).await;
    let own = |e: &capstan_harness::AuditEvent| {
        e.user_agent
            .as_deref()
            .is_some_and(|ua| ua.contains("kustomize-controller"))
    };
    let (noop_requests, noop_writes, by_verb) = requests_since(&cp, mark, own);
    println!("Flux: no-op reconcile {noop_requests} requests, {noop_writes} writes {by_verb:?}");

    // One-cluster change: the new artifact appears in the GitRepository status.
    let mds = md_api(&client, "team-0");
    let seen = tokio::spawn(async move {
        replicas_become(&mds, "w0000-md-0", 3, Duration::from_secs(3600)).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = Instant::now();
    publish(&repos, port, &a2).await;
    let applied = seen.await.unwrap();
    let change_ms = applied.duration_since(sent).as_secs_f64() * 1000.0;
    // Flux then re-applies every other Kustomization at the new artifact. At N = 1,000 that
    // takes over half an hour (each reconcile unpacks the whole fleet's artifact), so the wait
    // for it is bounded and the figures are read where it stands.
    let catch_up = Duration::from_secs(300);
    match ready_within(&ks, &a2.revision, None, catch_up).await {
        Ok(()) => println!(
            "Flux: one-cluster change applied {change_ms:.0} ms after the new artifact; every Kustomization at the new revision after {:.1}s",
            sent.elapsed().as_secs_f64()
        ),
        Err((ready, all)) => println!(
            "Flux: one-cluster change applied {change_ms:.0} ms after the new artifact; {ready} of {all} Kustomizations at the new revision {:.1}s after it (not waited for further; RSS and CPU read now)",
            sent.elapsed().as_secs_f64()
        ),
    }
    Figures {
        cold_s: cold.as_secs_f64(),
        noop_requests,
        noop_writes,
        change_ms,
        peak_rss_mib: vm(pid, "VmHWM:"),
        cpu_s: cpu_seconds(pid),
        apiserver_rss_mib: vm(cp.pids().kube_apiserver.pid as u32, "VmHWM:"),
    }
}

/// Where a cold apply's time went, from the audit log: the agent's first request and first
/// write after its start, and what it wrote (the fleet's objects, and the rest: namespaces,
/// status records, Events).
fn cold_timeline(
    cp: &ControlPlane,
    mark: capstan_harness::AuditMark,
    started: std::time::SystemTime,
    objects: usize,
    cpu: impl Fn(usize) -> String,
) -> String {
    let events: Vec<_> = cp
        .audit()
        .events_since(mark)
        .unwrap()
        .into_iter()
        .filter(|e| e.verb != "watch" && !e.user.username.starts_with("system:apiserver"))
        .collect();
    let at = |e: &capstan_harness::AuditEvent| {
        let t: k8s_openapi::jiff::Timestamp = e.raw["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .expect("audit events carry their time");
        std::time::SystemTime::from(t)
            .duration_since(started)
            .unwrap_or_default()
            .as_secs_f64()
    };
    let first = events.first().map(at).unwrap_or_default();
    let writes: Vec<_> = events.iter().filter(|e| e.is_write()).collect();
    let first_write = writes.first().map(|e| at(e)).unwrap_or_default();
    let last_write = writes.last().map(|e| at(e)).unwrap_or_default();
    let mut other = BTreeMap::new();
    for e in writes.iter().filter(|e| {
        matches!(
            e.resource(),
            Some("namespaces" | "events" | "managedclusters")
        )
    }) {
        let what = match (e.resource(), e.raw["objectRef"]["subresource"].as_str()) {
            (Some(r), Some(sub)) => format!("{r}/{sub}"),
            (Some(r), None) => r.to_string(),
            _ => "-".into(),
        };
        *other.entry(what).or_insert(0) += 1;
    }
    let failed = events
        .iter()
        .filter(|e| e.response_status.code.is_some_and(|c| c >= 400))
        .count();
    format!(
        "first request {first:.2}s after the start, first write {first_write:.2}s, last write \
         {last_write:.2}s; {} writes ({objects} fleet objects, besides them {other:?}); {} reads; \
         {failed} answered with an error; {}; {}",
        writes.len(),
        events.len() - writes.len(),
        server_view(&writes),
        cpu(writes.len())
    )
}

/// CPU spent per write over a stretch: by the control plane and by the client.
fn cpu_per_write(server_s: f64, client_s: f64, writes: usize) -> String {
    format!(
        "CPU per write: control plane {:.2} ms, client {:.2} ms",
        server_s * 1000.0 / writes as f64,
        client_s * 1000.0 / writes as f64
    )
}

/// How the API server saw a run of requests: how many were in flight on average (the time they
/// spent in the server, summed, over the span from the first received to the last answered)
/// and the mean time each kind spent in the server (fleet objects apart from capstan's own).
fn server_view(events: &[&capstan_harness::AuditEvent]) -> String {
    let time = |e: &capstan_harness::AuditEvent, field: &str| -> f64 {
        let t: k8s_openapi::jiff::Timestamp = e.raw[field]
            .as_str()
            .and_then(|t| t.parse().ok())
            .expect("audit events carry their times");
        t.as_millisecond() as f64 + f64::from(t.subsec_microsecond() % 1000) / 1000.0
    };
    let (Some(start), Some(end)) = (
        events
            .iter()
            .map(|e| time(e, "requestReceivedTimestamp"))
            .reduce(f64::min),
        events
            .iter()
            .map(|e| time(e, "stageTimestamp"))
            .reduce(f64::max),
    ) else {
        return "no requests".into();
    };
    let mut by_kind: BTreeMap<&str, (usize, f64)> = BTreeMap::new();
    let mut busy = 0.0;
    for e in events {
        let ms = time(e, "stageTimestamp") - time(e, "requestReceivedTimestamp");
        busy += ms;
        let kind = match (e.resource(), e.raw["objectRef"]["subresource"].as_str()) {
            (Some("managedclusters"), Some(_)) => "managedclusters/status",
            (Some(r @ ("namespaces" | "events" | "managedclusters")), _) => r,
            _ => "fleet objects",
        };
        let k = by_kind.entry(kind).or_default();
        k.0 += 1;
        k.1 += ms;
    }
    let means: Vec<_> = by_kind
        .iter()
        .map(|(k, (n, ms))| format!("{k} {:.1} ms", ms / *n as f64))
        .collect();
    format!(
        "{:.1} in flight on average over {:.2}s; mean time in the server: {}",
        busy / (end - start),
        (end - start) / 1000.0,
        means.join(", ")
    )
}

/// The API server's own server-side apply throughput: the fleet's objects applied with no
/// reads and no planning, `c` at a time, into fresh namespaces per round. Returns the best
/// round's (concurrency, seconds).
async fn ssa_limit(fleet: &Fleet) -> (usize, f64, Vec<(usize, f64)>) {
    let cp = ControlPlane::start().await.expect("control plane");
    let client = cp.client();
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    warm_watch_caches(&client, fleet).await;
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    // What capstan asks of the API server for each object: a forced apply, strictly validated.
    let pp = PatchParams::apply("ssa-limit")
        .force()
        .validation(kube::api::ValidationDirective::Strict);
    let mut rounds = Vec::new();
    for c in [4usize, 16, 64] {
        let prefix = format!("r{c}-");
        let mut objects = Vec::new();
        let mut namespaces = std::collections::BTreeSet::new();
        for (_, objs) in &fleet.rendered {
            for o in objs {
                let (group, version) = match o["apiVersion"].as_str().unwrap().split_once('/') {
                    Some((g, v)) => (g.to_string(), v.to_string()),
                    None => (String::new(), o["apiVersion"].as_str().unwrap().to_string()),
                };
                let gvk =
                    kube::api::GroupVersionKind::gvk(&group, &version, o["kind"].as_str().unwrap());
                let (ar, caps) = discovery.resolve_gvk(&gvk).expect("kind served");
                let mut o = o.clone();
                let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
                    let ns = format!(
                        "{prefix}{}",
                        o["metadata"]["namespace"].as_str().unwrap_or("default")
                    );
                    o["metadata"]["namespace"] = json!(ns);
                    namespaces.insert(ns.clone());
                    Api::namespaced_with(client.clone(), &ns, &ar)
                } else {
                    Api::all_with(client.clone(), &ar)
                };
                objects.push((api, o));
            }
        }
        for ns in &namespaces {
            nss.create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
            )
            .await
            .unwrap();
        }
        settle(&cp).await;
        let mark = cp.audit().mark();
        let cpu_before = (server_cpu(&cp), cpu_seconds(std::process::id()));
        let t = Instant::now();
        let results: Vec<_> = futures::stream::iter(objects.iter().map(|(api, o)| {
            let name = o["metadata"]["name"].as_str().unwrap().to_string();
            let pp = pp.clone();
            async move { api.patch(&name, &pp, &Patch::Apply(o)).await.map(|_| ()) }
        }))
        .buffer_unordered(c)
        .collect()
        .await;
        let secs = t.elapsed().as_secs_f64();
        let cpu = cpu_per_write(
            server_cpu(&cp) - cpu_before.0,
            cpu_seconds(std::process::id()) - cpu_before.1,
            objects.len(),
        );
        let failed: Vec<_> = results
            .iter()
            .filter_map(|r| r.as_ref().err())
            .take(3)
            .collect();
        assert!(failed.is_empty(), "SSA failed: {failed:?}");
        let events = cp.audit().events_since(mark).unwrap();
        let writes: Vec<_> = events
            .iter()
            .filter(|e| e.is_write() && !e.user.username.starts_with("system:apiserver"))
            .collect();
        println!(
            "SSA limit: {} objects at concurrency {c}: {secs:.2}s = {:.0} objects/s; {}; {cpu}",
            objects.len(),
            objects.len() as f64 / secs,
            server_view(&writes)
        );
        rounds.push((c, secs));
    }
    let best = rounds
        .iter()
        .copied()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap();
    (best.0, best.1, rounds)
}

/// The median item of `items` by `key`; of an even count the upper middle, the slower run.
fn median_by<T>(mut items: Vec<T>, key: impl Fn(&T) -> f64) -> Option<T> {
    items.sort_by(|a, b| key(a).total_cmp(&key(b)));
    let middle = items.len() / 2;
    (!items.is_empty()).then(|| items.swap_remove(middle))
}

/// The median of `values` (of an even count, the mean of the two middle ones).
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

fn row(name: &str, capstan: Option<f64>, flux: Option<f64>, fmt: fn(f64) -> String) {
    let cell = |v: Option<f64>| v.map(fmt).unwrap_or_else(|| "-".into());
    let ratio = match (capstan, flux) {
        (Some(c), Some(f)) if f != 0.0 => format!("{:.3}", c / f),
        (Some(0.0), Some(_)) => "0 (both 0)".into(),
        _ => "-".into(),
    };
    println!("| {name} | {} | {} | {ratio} |", cell(capstan), cell(flux));
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = support::env_number("CAPSTAN_BENCH_CLUSTERS", 100);
    let peers =
        std::env::var("CAPSTAN_BENCH_PEERS").unwrap_or_else(|_| "capstan,limit,flux".into());
    let flux_bin = peers
        .contains("flux")
        .then(|| capstan_harness::ensure_flux().expect("kustomize-controller"));
    let tmp = tempfile::tempdir().unwrap();
    let fleet = write_fleet(&tmp.path().join("fleet"), n);
    let c2 = support::scale_w0000(&fleet.repo, 2, 3);
    bench_git(&fleet.repo, &["reset", "-q", "--hard", &fleet.commit]);
    println!(
        "fleet: {n} workload clusters + management, {} objects; concurrency {}",
        fleet.objects,
        concurrency()
    );

    // Rounds of capstan and the SSA limit, interleaved: on a shared machine one run of either
    // can be a third off. The median round stands for each in the table, and the ratio to the
    // limit is the median of the rounds' own ratios.
    let rounds: usize = std::env::var("CAPSTAN_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    let (mut capstans, mut limits) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        if rounds > 1 {
            println!("round {round} of {rounds}");
        }
        if peers.contains("capstan") {
            capstans.push(run_capstan(&fleet, &c2, tmp.path()).await);
        }
        if peers.contains("limit") {
            limits.push(ssa_limit(&fleet).await);
        }
    }
    let ratios: Vec<f64> = capstans
        .iter()
        .zip(&limits)
        .map(|(c, l)| c.cold_s / l.1)
        .collect();
    let capstan = median_by(capstans, |f| f.cold_s);
    let limit = median_by(limits, |l| l.1);
    let flux = match &flux_bin {
        Some(f) => Some(run_flux(f, &fleet, &c2, tmp.path()).await),
        None => None,
    };

    let objects = fleet.objects as f64;
    println!();
    println!("N = {n} workload clusters, {} objects", fleet.objects);
    if let Some(f) = &flux_bin {
        println!(
            "Flux: kustomize-controller {} (source-controller {} CRDs; source-controller played by the benchmark)",
            f.kustomize_controller_version, f.source_controller_version
        );
    }
    println!("| figure | capstan | Flux | capstan/Flux |");
    println!("|---|---|---|---|");
    let pick = |f: fn(&Figures) -> f64| (capstan.as_ref().map(f), flux.as_ref().map(f));
    let (c, fx) = pick(|f| f.cold_s);
    row("cold apply (s)", c, fx, |v| format!("{v:.1}"));
    row(
        "cold apply (objects/s)",
        c.map(|v| objects / v),
        fx.map(|v| objects / v),
        |v| format!("{v:.0}"),
    );
    let (c, fx) = pick(|f| f.noop_requests as f64);
    row(
        "no-op: API requests per object",
        c.map(|v| v / objects),
        fx.map(|v| v / objects),
        |v| format!("{v:.3}"),
    );
    let (c, fx) = pick(|f| f.noop_writes as f64);
    row(
        "no-op: writes per object",
        c.map(|v| v / objects),
        fx.map(|v| v / objects),
        |v| format!("{v:.3}"),
    );
    let (c, fx) = pick(|f| f.change_ms);
    row("one-cluster change (ms)", c, fx, |v| format!("{v:.0}"));
    let (c, fx) = pick(|f| f.peak_rss_mib);
    row("peak RSS (MiB)", c, fx, |v| format!("{v:.0}"));
    let (c, fx) = pick(|f| f.cpu_s);
    row("CPU seconds (whole run)", c, fx, |v| format!("{v:.1}"));
    let (c, fx) = pick(|f| f.apiserver_rss_mib);
    row("kube-apiserver peak RSS (MiB)", c, fx, |v| {
        format!("{v:.0}")
    });
    if let Some((conc, secs, _)) = limit {
        println!(
            "API server SSA limit: {secs:.1}s for {} objects ({:.0} objects/s, concurrency {conc})",
            fleet.objects,
            objects / secs
        );
        if let Some(ratio) = median(ratios.clone()) {
            let each: Vec<_> = ratios.iter().map(|r| format!("{r:.2}x")).collect();
            println!(
                "capstan cold apply / SSA limit: {ratio:.2}x (goal <= 1.5x; the median of the \
                 rounds' ratios: {})",
                each.join(", ")
            );
        }
        if let Some(f) = &flux {
            println!("Flux cold apply / SSA limit: {:.2}x", f.cold_s / secs);
        }
    }
}
