//! A management cluster made from its directory in Git with `capstan pivot`, managing itself
//! and a workload cluster from the new end, then taken down by `capstan back-out` from its
//! tombstone: on two control planes of this test's own, under the real Cluster API controllers.
//!
//! Each end is a real kube-apiserver + etcd with the upstream CRDs. The bootstrap cluster
//! (`boot`) runs the controllers; the new one (`next`) starts as `clusterctl init` leaves a
//! cluster before its pods run: the CRDs. What no process can do here is run pods, so the test
//! plays the kubelet's part, named as such: once the pivot scales capstan's Deployment up, the
//! controllers are uninstalled from the end the clusters left (webhooks and processes; only one
//! CAPD can run on a machine, and what its in-memory backend held goes with it, as it goes with
//! a retired bootstrap cluster) and started on the new end, and the agent is run as the
//! Deployment's ServiceAccount; once the back-out scales it to zero, the agent is stopped with
//! SIGTERM, and the controllers go back with the clusters. What must hold is what `clusterctl
//! move` promises and what its users report it breaks: a pivot killed after creating and run
//! again goes on without creating twice; no Machine replaced (the same names and provider IDs,
//! no new Machine), the new controllers serving the same nodes; the clusters Available; the new
//! end's agent creating the workload cluster and finding nothing else to apply. And for the
//! back-out: refused without the repository's tombstones; killed once moved and run again, it
//! deletes the workload cluster before the management cluster (the API server's watch shows
//! the order), leaving nothing at either end.
//!
//! A second pivot starts from a new cluster with nothing of Cluster API: its step 2 installs the
//! release's components there and stops at waiting for their Deployments, which no pod runs
//! here (see that test).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use capstan::install::testing::agent_client;
use capstan::status::Phase;
use capstan_e2e::capi::{Repo, summary};
use capstan_harness::run::{capstan, git, kubectl, kubectl_json, output_text};
use capstan_harness::{ControlPlane, StartOptions, components};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(300);

/// A Machine as the move must keep it: (cluster, name, provider ID, node).
type Placed = (String, String, String, String);

/// The Machines of namespace `ns` on the management cluster behind `kubeconfig`, from kubectl.
fn placed(kubeconfig: &Path, ns: &str) -> BTreeSet<Placed> {
    kubectl_json(kubeconfig, &["get", "machines.cluster.x-k8s.io", "-n", ns])["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let s = |p: &str| {
                m.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            (
                s("/spec/clusterName"),
                s("/metadata/name"),
                s("/spec/providerID"),
                s("/status/nodeRef/name"),
            )
        })
        .collect()
}

/// The nodes each cluster's Machines name, by cluster.
fn nodes_by_cluster(placed: &BTreeSet<Placed>) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (cluster, _, _, node) in placed {
        out.entry(cluster.clone()).or_default().insert(node.clone());
    }
    out
}

/// The nodes the workload API server of `cluster` serves, reached with the kubeconfig Secret
/// Cluster API keeps for it on `cp` (None while it does not answer).
fn served_nodes(cp: &ControlPlane, ns: &str, cluster: &str) -> Option<BTreeSet<String>> {
    let (found, kubeconfig) = kubectl(
        cp.kubeconfig_path(),
        &[
            "get",
            "secret",
            &format!("{cluster}-kubeconfig"),
            "-n",
            ns,
            "-o",
            "go-template={{.data.value | base64decode}}",
        ],
    );
    if !found {
        return None;
    }
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), kubeconfig).unwrap();
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(file.path())
        .args(["get", "nodes", "-o", "json", "--request-timeout=5s"])
        .output()
        .unwrap();
    if !out.status.success() {
        return None;
    }
    let list: Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(
        list["items"]
            .as_array()?
            .iter()
            .filter_map(|n| n.pointer("/metadata/name").and_then(Value::as_str))
            .map(str::to_string)
            .collect(),
    )
}

/// Waits until the controllers on `cp` serve, for every cluster, exactly the nodes its Machines
/// name: CAPD's in-memory backend on this end has rebuilt the same machines, not new ones.
async fn wait_served(cp: &ControlPlane, ns: &str, want: &BTreeMap<String, BTreeSet<String>>) {
    let deadline = Instant::now() + TIMEOUT;
    for (cluster, nodes) in want {
        loop {
            let served = served_nodes(cp, ns, cluster);
            if served.as_ref() == Some(nodes) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{cluster}: the workload API server serves {served:?}, the Machines name {nodes:?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Each Cluster API Cluster of `ns` on `cp`: its `Available` condition's status and message,
/// from kubectl.
fn availability(cp: &ControlPlane, ns: &str) -> BTreeMap<String, (String, String)> {
    kubectl_json(
        cp.kubeconfig_path(),
        &["get", "clusters.cluster.x-k8s.io", "-n", ns],
    )["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let available = c
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|k| k["type"] == "Available");
            let field = |f: &str| {
                available
                    .and_then(|k| k[f].as_str())
                    .unwrap_or("")
                    .to_string()
            };
            (
                c["metadata"]["name"].as_str().unwrap().to_string(),
                (field("status"), field("message")),
            )
        })
        .collect()
}

/// Waits until `n` Clusters of `ns` on `cp` are Available, as its controllers report it.
async fn wait_available(cp: &ControlPlane, ns: &str, n: usize) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let now = availability(cp, ns);
        if now.len() == n && now.values().all(|(s, _)| s == "True") {
            return;
        }
        assert!(Instant::now() < deadline, "not Available: {now:#?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// capstan's pass, as the agent on the end the clusters are on: every cluster Ready, nothing to
/// apply.
async fn nothing_to_apply(repo: &Repo) {
    let out = repo.pass(None).await;
    assert!(
        !out.has_changes() && out.clusters.iter().all(|c| c.phase == Phase::Ready),
        "after the move: {}\n{:#?}",
        summary(&out),
        out.clusters
            .iter()
            .flat_map(|c| c.plan.entries.iter())
            .filter(|e| e.action != capstan::plan::Action::Unchanged)
            .map(|e| format!("{} {}", e.action, e.object.name))
            .collect::<Vec<_>>()
    );
}

/// Runs `capstan pivot` with the failpoint `pivot-created` armed, waits until it reports it
/// (the management cluster Ready on the bootstrap cluster) and SIGKILLs it there.
fn pivot_killed_after_create(args: &[&str]) {
    let mut child = Killed(
        capstan(args)
            .env(capstan::failpoint::ENV, "pivot-created")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut seen = Vec::new();
    for line in BufReader::new(child.0.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        let reached = line.contains("failpoint reached") && line.contains("pivot-created");
        seen.push(line);
        if reached {
            return; // killed as `child` drops
        }
    }
    panic!("pivot ended before its failpoint:\n{}", seen.join("\n"));
}

/// `capstan pivot` from `boot` to `next` of `repo`'s management cluster, its agent following the
/// repository directory with one replica.
fn pivot_args(boot: &ControlPlane, next: &ControlPlane, repo: &Repo) -> Vec<String> {
    let root = repo.files.root.display().to_string();
    [
        "pivot",
        "--kubeconfig",
        &boot.kubeconfig_path().display().to_string(),
        "--to",
        &next.kubeconfig_path().display().to_string(),
        "--checkout",
        &root,
        "--repo",
        &root,
        "--management",
        &repo.mgmt,
        "--replicas",
        "1",
        "--timeout",
        "4m",
    ]
    .map(String::from)
    .to_vec()
}

/// `path` opened for appending: a process's stdout and stderr into one log, neither over the
/// other.
fn appending(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new().append(true).open(path).unwrap()
}

/// A process killed when dropped (the agent the test runs in the kubelet's place).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The replicas capstan's Deployment asks for on `cp` (None: no Deployment).
fn agent_replicas(cp: &ControlPlane) -> Option<i64> {
    let (found, text) = kubectl(
        cp.kubeconfig_path(),
        &[
            "get",
            "deployment",
            "capstan",
            "-n",
            "capstan-system",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
    );
    found.then(|| text.trim().parse().ok()).flatten()
}

/// The phase of a ManagedCluster on `cp` ("" while there is none).
fn record_phase(cp: &ControlPlane, cluster: &str) -> String {
    let (_, text) = kubectl(
        cp.kubeconfig_path(),
        &[
            "get",
            "managedclusters.capstan.dev",
            cluster,
            "-n",
            "capstan-system",
            "-o",
            "jsonpath={.status.phase}",
        ],
    );
    text.trim().to_string()
}

/// Polls `done` until it holds, for at most [`TIMEOUT`]; panics with `what` when it does not.
async fn polled_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_management_cluster_pivots_onto_itself_and_backs_out_with_no_machine_replaced() {
    let start = |controllers| {
        ControlPlane::start_with(StartOptions {
            controllers,
            install_crds: true,
            timeout: TIMEOUT,
            ..Default::default()
        })
    };
    // The bootstrap cluster runs the controllers; the new one starts as `clusterctl init` leaves
    // a cluster before its controllers' pods run: the CRDs.
    let mut boot = start(true).await.unwrap();
    let _logs = boot.logs_on_failure("a_management_cluster_pivots_onto_itself");
    let mut next = start(false).await.unwrap();
    let mut repo = Repo::new("pv", &[("w-pv", json!([{"name": "md-0", "count": 1}]))]);
    // What the new end's agent follows: the fleet directory as a Git repository, on `main`.
    git(&repo.files.root, &["init", "-q", "-b", "main"]);
    git(&repo.files.root, &["add", "-A"]);
    git(&repo.files.root, &["commit", "-q", "-m", "fleet"]);
    let (mgmt, ns) = (repo.mgmt.clone(), repo.ns.clone());
    let root = repo.files.root.display().to_string();
    let boot_cfg = boot.kubeconfig_path().display().to_string();
    let next_cfg = next.kubeconfig_path().display().to_string();
    let pivot_owned = pivot_args(&boot, &next, &repo);
    let pivot_args: Vec<&str> = pivot_owned.iter().map(String::as_str).collect();

    let t0 = Instant::now();
    // --dry-run: the steps and what the pass would create to move; nothing written.
    let mut dry = pivot_args.to_vec();
    dry.push("--dry-run");
    let out = capstan(&dry).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("[1/4] create the management cluster")
            && said.contains("[4/4] hand over")
            && said.contains("KubeadmControlPlane"),
        "{said}"
    );
    assert_eq!(availability(&boot, &ns), BTreeMap::new(), "a dry run wrote");
    // A first run, killed once the management cluster is Ready on the bootstrap cluster.
    pivot_killed_after_create(&pivot_args);
    eprintln!(
        "[{:>6.1}s] the first pivot killed",
        t0.elapsed().as_secs_f64()
    );
    let before = placed(boot.kubeconfig_path(), &ns);
    assert_eq!(before.len(), 2, "{before:#?}");
    assert!(
        before
            .iter()
            .all(|(c, _, id, node)| *c == mgmt && !id.is_empty() && !node.is_empty()),
        "{before:#?}"
    );
    assert_eq!(placed(next.kubeconfig_path(), &ns), BTreeSet::new());

    // The same command again goes on from there.
    let pivot_log = tempfile::NamedTempFile::new().unwrap();
    let mut pivot = Killed(
        capstan(&pivot_args)
            .stdout(appending(pivot_log.path()))
            .stderr(appending(pivot_log.path()))
            .spawn()
            .unwrap(),
    );
    let read_log = || std::fs::read_to_string(pivot_log.path()).unwrap();
    // Handing over, it scales the agent up: the move is done. The kubelet's part, played here:
    // the bootstrap cluster's controllers go, the new cluster's start, and the agent runs.
    polled_until("the hand-over", || {
        agent_replicas(&next) == Some(1) || pivot.0.try_wait().unwrap().is_some()
    })
    .await;
    eprintln!("[{:>6.1}s] the move is done", t0.elapsed().as_secs_f64());
    assert_eq!(
        placed(boot.kubeconfig_path(), &ns),
        BTreeSet::new(),
        "{}",
        read_log()
    );
    assert_eq!(
        placed(next.kubeconfig_path(), &ns),
        before,
        "{}",
        read_log()
    );
    boot.stop_controllers().await.unwrap();
    next.start_controllers().await.unwrap();
    eprintln!(
        "[{:>6.1}s] the new cluster's controllers run",
        t0.elapsed().as_secs_f64()
    );
    let _next_logs = next.logs_on_failure("a_management_cluster_pivots_onto_itself (new)");
    let agent_cfg = capstan::install::testing::agent_kubeconfig(&next).await;
    let cache = tempfile::tempdir().unwrap();
    let agent_args = [
        "run",
        "--git",
        "--repo",
        &root,
        "--management",
        &mgmt,
        "--interval",
        "10s",
        "--cache-dir",
        &cache.path().display().to_string(),
        "--kubeconfig",
        &agent_cfg.display().to_string(),
    ]
    .map(str::to_string);
    let agent_log = tempfile::NamedTempFile::new().unwrap();
    let mut agent = Killed(
        capstan(&agent_args.iter().map(String::as_str).collect::<Vec<_>>())
            .stdout(appending(agent_log.path()))
            .stderr(appending(agent_log.path()))
            .spawn()
            .unwrap(),
    );
    eprintln!("[{:>6.1}s] the agent runs", t0.elapsed().as_secs_f64());
    let status = tokio::task::spawn_blocking(move || pivot.0.wait().unwrap())
        .await
        .unwrap();
    let said = read_log();
    assert!(
        status.success() && said.contains("pivoted:"),
        "{said}\nthe agent:\n{}",
        std::fs::read_to_string(agent_log.path()).unwrap()
    );
    assert!(said.contains("[1/4]") && said.contains("[4/4]"), "{said}");

    // The new management cluster manages itself: the same machines, served by its own
    // controllers, and the workload cluster its agent creates from Git.
    wait_served(&next, &ns, &nodes_by_cluster(&before)).await;
    polled_until(
        "w-pv Ready, made by the new management cluster's agent",
        || record_phase(&next, "w-pv") == "Ready",
    )
    .await;
    wait_available(&next, &ns, 2).await;
    let managed = placed(next.kubeconfig_path(), &ns);
    assert!(
        before.is_subset(&managed) && managed.len() == 4,
        "a Machine replaced: {managed:#?}"
    );
    wait_served(&next, &ns, &nodes_by_cluster(&managed)).await;
    assert_eq!(placed(next.kubeconfig_path(), &ns), managed);

    // Its agent's view: every cluster Ready, nothing to apply.
    repo.client = Some(agent_client(&next).await);
    nothing_to_apply(&repo).await;

    // Back out onto a temporary cluster (the first, its controllers gone), driven by the
    // repository: refused without the management cluster's tombstone, and while a workload
    // directory has none. The tombstones are written into the working copy the back-out reads
    // and not committed, so the agent (following `main`'s commits) does not race it for the
    // workload cluster; had it deleted it first, only the management cluster would move.
    // A bare `capstan move` away is refused while the agent runs: it would apply from Git again
    // what leaves.
    let keys: Vec<String> = [mgmt.as_str(), "w-pv"]
        .iter()
        .map(|c| format!("{ns}/{c}"))
        .collect();
    let mut args = vec!["move", "--kubeconfig", &next_cfg, "--to", &boot_cfg];
    for k in &keys {
        args.extend(["--cluster", k.as_str()]);
    }
    let refused = capstan(&args).output().unwrap();
    let text = output_text(&refused);
    assert_eq!(refused.status.code(), Some(2), "{text}");
    assert!(
        text.contains("capstan's agent runs at the source"),
        "{text}"
    );
    let backout_args = [
        "back-out",
        "--kubeconfig",
        &next_cfg,
        "--to",
        &boot_cfg,
        "--checkout",
        &root,
        "--timeout",
        "4m",
    ];
    let refused = capstan(&backout_args).output().unwrap();
    let text = output_text(&refused);
    assert_eq!(refused.status.code(), Some(2), "{text}");
    assert!(
        text.contains(&format!("clusters/{mgmt}/ has no tombstone")),
        "{text}"
    );
    let deleted = capstan(&["delete", "cluster", &mgmt, "--repo", &root])
        .output()
        .unwrap();
    assert!(!deleted.status.success(), "{}", output_text(&deleted));
    assert!(
        output_text(&deleted).contains("still manages workload clusters (w-pv)"),
        "{}",
        output_text(&deleted)
    );
    let out = capstan(&["delete", "cluster", "w-pv", "--repo", &root])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let out = capstan(&["delete", "cluster", &mgmt, "--repo", &root])
        .output()
        .unwrap();
    assert!(
        out.status.success() && output_text(&out).contains("capstan back-out"),
        "{}",
        output_text(&out)
    );
    assert_eq!(agent_replicas(&next), Some(1), "a refusal wrote");
    let mut dry = backout_args.to_vec();
    dry.push("--dry-run");
    let out = capstan(&dry).output().unwrap();
    let said = output_text(&out);
    assert!(
        out.status.success()
            && said.contains("[1/4] stop capstan's agent")
            && said.contains("[4/4] delete the management cluster")
            && said.contains("KubeadmControlPlane"),
        "{said}"
    );
    assert_eq!(agent_replicas(&next), Some(1), "a dry run wrote");

    // A first run, killed once everything is on the temporary cluster. The kubelet's part:
    // when the back-out scales capstan's Deployment to zero, its process is stopped as a pod
    // is (SIGTERM: it lets its leader lease go).
    let backout_log = tempfile::NamedTempFile::new().unwrap();
    let mut backout = Killed(
        capstan(&backout_args)
            .env(capstan::failpoint::ENV, "back-out-moved")
            .stdout(appending(backout_log.path()))
            .stderr(appending(backout_log.path()))
            .spawn()
            .unwrap(),
    );
    let read_backout = || std::fs::read_to_string(backout_log.path()).unwrap();
    polled_until("the agent scaled to zero", || {
        agent_replicas(&next) == Some(0) || backout.0.try_wait().unwrap().is_some()
    })
    .await;
    terminate(&mut agent.0);
    polled_until("the back-out's failpoint", || {
        read_backout().contains("back-out-moved") || backout.0.try_wait().unwrap().is_some()
    })
    .await;
    let said = read_backout();
    assert!(said.contains("failpoint reached"), "{said}");
    drop(backout);
    eprintln!(
        "[{:>6.1}s] backed out onto the temporary cluster",
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(
        placed(next.kubeconfig_path(), &ns),
        BTreeSet::new(),
        "{said}"
    );
    assert_eq!(placed(boot.kubeconfig_path(), &ns), managed, "{said}");
    // The kubelet's part again: the controllers follow the clusters.
    next.stop_controllers().await.unwrap();
    boot.start_controllers().await.unwrap();
    wait_served(&boot, &ns, &nodes_by_cluster(&managed)).await;
    wait_available(&boot, &ns, 2).await;
    assert_eq!(
        placed(boot.kubeconfig_path(), &ns),
        managed,
        "a Machine replaced"
    );
    // capstan's pass on the temporary cluster, from the repository as it was before the
    // tombstones (set aside, then put back): every cluster Ready, nothing to apply.
    git(
        &repo.files.root,
        &["stash", "push", "-q", "--include-untracked"],
    );
    repo.client = Some(agent_client(&boot).await);
    nothing_to_apply(&repo).await;
    git(&repo.files.root, &["stash", "pop", "-q"]);

    // The same command goes on: the workload cluster deleted, then the management cluster, as
    // the API server's watch of the Clusters shows them go.
    let watch = Watch::start(
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(boot.kubeconfig_path())
            .args([
                "get",
                "clusters.cluster.x-k8s.io",
                "-n",
                &ns,
                "--watch",
                "--output-watch-events",
                "-o",
                "json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let out = capstan(&backout_args).output().unwrap();
    let said = output_text(&out);
    assert!(
        out.status.success() && said.contains("backed out:"),
        "{said}"
    );
    assert!(
        said.contains("resuming at step 3") && said.contains("[3/4]"),
        "{said}"
    );
    assert!(!said.contains("[2/4]"), "moved again: {said}");
    let events = watch.events();
    eprintln!(
        "[{:>6.1}s] backed out ({} watch events):\n{said}",
        t0.elapsed().as_secs_f64(),
        events.len()
    );
    let deleted_at = |name: &str| {
        events
            .iter()
            .position(|(kind, n, _)| kind == "DELETED" && n == name)
    };
    let deleting_from = |name: &str| {
        events
            .iter()
            .position(|(_, n, deleting)| n == name && *deleting)
    };
    let (w_gone, m_deleting) = (deleted_at("w-pv"), deleting_from(&mgmt));
    assert!(
        w_gone.is_some() && deleted_at(&mgmt).is_some() && w_gone < m_deleting,
        "not in Cluster API's order: {events:#?}\n{said}"
    );
    // From the API servers: nothing left at either end, nor capstan's records.
    assert_eq!(availability(&boot, &ns), BTreeMap::new());
    assert_eq!(placed(boot.kubeconfig_path(), &ns), BTreeSet::new());
    for cp in [&boot, &next] {
        let records = kubectl_json(
            cp.kubeconfig_path(),
            &["get", "managedclusters.capstan.dev", "-n", "capstan-system"],
        );
        assert_eq!(records["items"], json!([]), "{said}");
    }
    // Again: nothing to do.
    let out = capstan(&backout_args).output().unwrap();
    assert!(
        out.status.success() && output_text(&out).contains("nothing to do"),
        "{}",
        output_text(&out)
    );
    let _ = std::fs::read_to_string(agent_log.path());
}

/// Stops a process as the kubelet stops a pod's: SIGTERM, then waits for it.
fn terminate(child: &mut Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    child.wait().unwrap();
}

/// A `kubectl get --watch --output-watch-events -o json`, read as it prints (a pipe left
/// unread would stall it once full).
struct Watch {
    child: Killed,
    read: std::thread::JoinHandle<String>,
}

impl Watch {
    fn start(mut child: Child) -> Watch {
        let mut out = child.stdout.take().unwrap();
        let read = std::thread::spawn(move || {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut out, &mut text).unwrap();
            text
        });
        Watch {
            child: Killed(child),
            read,
        }
    }

    /// The events printed until now, in order: (type, name, whether it was being deleted).
    fn events(mut self) -> Vec<(String, String, bool)> {
        let _ = self.child.0.kill();
        let _ = self.child.0.wait();
        let text = self.read.join().unwrap();
        serde_json::Deserializer::from_str(&text)
            .into_iter::<Value>()
            .map(|e| {
                let e = e.unwrap();
                (
                    e["type"].as_str().unwrap_or("").to_string(),
                    e.pointer("/object/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    e.pointer("/object/metadata/deletionTimestamp").is_some(),
                )
            })
            .collect()
    }
}

/// `capstan pivot` onto a new cluster that has no Cluster API at all: step 2 installs there what
/// the management cluster's release names ([`capstan_harness::components`]: the real manifests,
/// built from the modules) and waits for its Deployments. No kubelet runs their pods here, so
/// the run stops at that wait with exit code 2, naming them, having moved nothing: the same
/// command would go on once they are Available (`capstan install --cluster-api`'s test,
/// agent/tests/api_server/components.rs, shows the going on; a whole pivot through it would need
/// the components' webhooks served in the new cluster before the move, which only their pods do).
#[tokio::test]
async fn a_pivot_installs_cluster_api_into_a_new_cluster_that_has_none() {
    let boot = ControlPlane::start_with(StartOptions {
        controllers: true,
        install_crds: true,
        timeout: TIMEOUT,
        ..Default::default()
    })
    .await
    .unwrap();
    let _logs = boot.logs_on_failure("a_pivot_installs_cluster_api_into_a_new_cluster");
    let next = ControlPlane::start_with(StartOptions {
        install_crds: false,
        timeout: TIMEOUT,
        ..Default::default()
    })
    .await
    .unwrap();
    let repo = Repo::new("pc", &[]);
    let root = repo.files.root.clone();
    std::fs::write(
        root.join(format!("clusters/{}/fleet.yaml", repo.mgmt)),
        components::FLEET_CONFIG,
    )
    .unwrap();
    components::write_release(&root);
    git(&root, &["init", "-q", "-b", "main"]);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "fleet"]);
    let ns = repo.ns.clone();
    let mut args = pivot_args(&boot, &next, &repo);
    args.extend(
        [
            "--addon-provider",
            components::ADDON_PROVIDER,
            "--components-wait",
            "3s",
        ]
        .map(String::from),
    );
    let mut pivot = capstan(&args.iter().map(String::as_str).collect::<Vec<_>>());
    for (k, v) in components::IMAGES {
        pivot.env(k, v);
    }
    let out = pivot.output().unwrap();
    let said = output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("[2/4]"), "{said}");
    assert!(
        said.contains("the new cluster lacks")
            && said.contains("installing the components of EKS Anywhere v0.26.1"),
        "{said}"
    );
    assert!(
        said.contains("not Available after 3s")
            && said.contains("Deployment/capi-system/capi-controller-manager")
            && said.contains("nothing was moved"),
        "{said}"
    );
    assert!(!said.contains("[3/4]"), "went on to the move: {said}");
    // From the new cluster's API server: the components are there, each labelled, with the
    // release's Cluster API and the provider; no Cluster, nothing of capstan's agent yet.
    let deployments = kubectl_json(
        next.kubeconfig_path(),
        &[
            "get",
            "deployments",
            "-A",
            "-l",
            capstan::components::COMPONENT_LABEL,
        ],
    );
    let names: BTreeSet<String> = deployments["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["metadata"]["namespace"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    for want in [
        "capi-system/capi-controller-manager",
        "capi-kubeadm-bootstrap-system/capi-kubeadm-bootstrap-controller-manager",
        "capi-kubeadm-control-plane-system/capi-kubeadm-control-plane-controller-manager",
        "capd-system/capd-controller-manager",
        "eksa-system/eksa-controller-manager",
    ] {
        assert!(names.contains(want), "{want} not in {names:?}");
    }
    let clusters = kubectl_json(
        next.kubeconfig_path(),
        &["get", "clusters.cluster.x-k8s.io", "-A"],
    );
    assert_eq!(clusters["items"], json!([]), "something moved");
    let (has_agent, _) = kubectl(
        next.kubeconfig_path(),
        &[
            "get",
            "deployment",
            "-n",
            capstan::status::NAMESPACE,
            "capstan",
        ],
    );
    assert!(
        !has_agent,
        "capstan installed before the components were Available"
    );
    // The management cluster stays on the bootstrap cluster, Ready there.
    assert_eq!(placed(boot.kubeconfig_path(), &ns).len(), 2);
}
