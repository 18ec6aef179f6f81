//! A management cluster upgrading itself while its agent is SIGKILLed at every step, on the real
//! Cluster API controllers (CAPD's in-memory backend), with a second replica taking over each
//! time; then `capstan restore`, a process of its own, re-creates the fleet from the backup a
//! killed leader wrote.
//!
//! Replicas are `capstan run --leader-elect` processes, so a kill is a real SIGKILL: no pass
//! finishes, no Lease is released, nothing in memory survives. Each is stopped exactly at its
//! step by a failpoint (`capstan::failpoint`, armed per process) and killed there once the
//! step's state is read from the API server; the other replica, started beforehand, takes over
//! when the Lease expires. One self-upgrade carries every kill:
//!
//! ```text
//! leader  armed failpoint              state read at the kill                   takes over
//! a       self-upgrade-backed-up       backup 1 finished; nothing paused;       b
//!                                      control plane as it was
//! b       self-upgrade-paused-one      w-a paused for m-kill, w-b not;          a2
//!                                      no backup in the status
//! a2      self-upgrade-applied         control plane changed, both workloads    b2
//!                                      paused, backup 3 in the status (recorded
//!                                      before the change; the pass's own status
//!                                      never written)
//! b2      self-upgrade-rolling-out     new control-plane machine beside old     a3
//!                                      ones; backup 3 still the record
//! a3      self-upgrade-rolled-out      every control-plane machine new;         b3
//!                                      workloads still paused; backup recorded
//! b3      (none)                       the upgrade ends: everything unpaused but what an
//!                                      operator paused, stage and backup cleared
//! ```
//!
//! What the test asserts is read from the API server (and the backup directory), never from the
//! agents. w-op is paused by an operator before the upgrade: no replica may take that pause
//! over, nor remove it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use capstan_harness::objects;
use capstan_harness::{ControlPlane, StartOptions};
use capstan_layout::scaffold::{self, ClusterRequest};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

const MGMT: &str = "m-kill";
const NS: &str = "l-kill";
const LEASE: &str = "capstan-kill-test";
const LEASE_NS: &str = "capstan-system";
/// Short, so that each of the five take-overs costs seconds.
const LEASE_SECONDS: u64 = 4;
/// How long any one step may take (a cold in-memory fleet comes up in about a minute).
const STEP: Duration = Duration::from_secs(300);
/// The workload clusters capstan pauses, in the repository's order (pausing goes in it).
const PAUSABLE: [&str; 2] = ["w-a", "w-b"];
/// The workload cluster an operator paused.
const OPERATOR: &str = "w-op";

/// One `capstan run --leader-elect` replica, its log in a file.
struct Replica {
    name: String,
    child: Child,
    log: PathBuf,
}

/// What every replica runs with.
struct Setup {
    repo: PathBuf,
    backups: PathBuf,
    /// The admin's age identity, off the cluster: the replicas encrypt to its public key,
    /// `capstan restore --identity` reads this file.
    identity: PathBuf,
    recipient: String,
    kubeconfig: PathBuf,
    logs: PathBuf,
}

impl Replica {
    /// Starts replica `name` with the failpoint `stop` armed (None: none).
    fn start(setup: &Setup, name: &str, stop: Option<&str>) -> Replica {
        let log = setup.logs.join(format!("{name}.log"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_capstan"));
        cmd.arg("run")
            .arg("--repo")
            .arg(&setup.repo)
            .args(["--watch", "--interval", "1h", "--management", MGMT])
            .args(["--leader-elect", "--lease-name", LEASE])
            .args(["--lease-namespace", LEASE_NS])
            .args(["--lease-duration", &format!("{LEASE_SECONDS}s")])
            .arg("--backup-dir")
            .arg(&setup.backups)
            .args(["--backup-recipient", &setup.recipient])
            .arg("--kubeconfig")
            .arg(&setup.kubeconfig)
            .env("POD_NAME", name)
            .env("RUST_LOG", "info")
            .env_remove(capstan::failpoint::ENV)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if let Some(point) = stop {
            cmd.env(capstan::failpoint::ENV, point);
        }
        Replica {
            name: name.into(),
            child: cmd.spawn().unwrap(),
            log,
        }
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether it logged that it stopped at the failpoint `point`.
    fn stopped_at(&self, point: &str) -> bool {
        self.logs()
            .lines()
            .any(|l| l.contains("failpoint reached") && l.contains(point))
    }

    /// SIGKILL, and the process reaped.
    fn kill(mut self) -> Killed {
        let at = Instant::now();
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        Killed {
            name: self.name.clone(),
            at,
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last lines of each replica's log, for a failure message.
fn tails(replicas: &[&Replica]) -> String {
    replicas
        .iter()
        .map(|r| {
            let logs = r.logs();
            let lines: Vec<&str> = logs.lines().collect();
            let from = lines.len().saturating_sub(30);
            format!("--- {} ---\n{}", r.name, lines[from..].join("\n"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Polls `probe` until it yields a value; panics after `STEP` with `what` and the replicas'
/// logs.
async fn until<T, F, Fut>(what: &str, replicas: &[&Replica], mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            start.elapsed() < STEP,
            "waited {STEP:?} for {what}\n{}",
            tails(replicas)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The API server, as the test reads it (admin).
struct Server {
    client: kube::Client,
}

impl Server {
    fn api(&self, group: &str, kind: &str, plural: &str, ns: &str) -> Api<DynamicObject> {
        let ar = ApiResource {
            group: group.into(),
            version: if group == "capstan.dev" {
                "v1alpha1".into()
            } else {
                "v1beta2".into()
            },
            api_version: if group == "capstan.dev" {
                format!("{group}/v1alpha1")
            } else {
                format!("{group}/v1beta2")
            },
            kind: kind.into(),
            plural: plural.into(),
        };
        Api::namespaced_with(self.client.clone(), ns, &ar)
    }

    async fn get(&self, group: &str, kind: &str, plural: &str, ns: &str, name: &str) -> Value {
        let o = self
            .api(group, kind, plural, ns)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("{kind} {name}: {e}"));
        serde_json::to_value(o).unwrap()
    }

    /// A workload cluster's Cluster API Cluster: (spec.paused, the paused-for annotation).
    async fn pause(&self, cluster: &str) -> (bool, Option<String>) {
        let c = self
            .get("cluster.x-k8s.io", "Cluster", "clusters", NS, cluster)
            .await;
        let paused = c.pointer("/spec/paused").and_then(Value::as_bool) == Some(true);
        let by = c
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(capstan::reconcile::self_upgrade::PAUSED_FOR))
            .and_then(Value::as_str)
            .map(str::to_string);
        (paused, by)
    }

    /// A ManagedCluster's status.
    async fn status(&self, cluster: &str) -> Value {
        self.get(
            "capstan.dev",
            "ManagedCluster",
            "managedclusters",
            LEASE_NS,
            cluster,
        )
        .await["status"]
            .clone()
    }

    /// The management cluster's control-plane machines: (name, spec.version, deleting).
    async fn control_plane(&self) -> Vec<(String, String, bool)> {
        let lp = ListParams::default().labels(&format!(
            "cluster.x-k8s.io/cluster-name={MGMT},cluster.x-k8s.io/control-plane"
        ));
        let list = self
            .api("cluster.x-k8s.io", "Machine", "machines", NS)
            .list(&lp)
            .await
            .unwrap();
        list.items
            .into_iter()
            .map(|m| {
                let v = serde_json::to_value(&m).unwrap();
                let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("").into();
                (
                    s("/metadata/name"),
                    s("/spec/version"),
                    v.pointer("/metadata/deletionTimestamp").is_some(),
                )
            })
            .collect()
    }

    async fn leader(&self) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), LEASE_NS);
        leases
            .get_opt(LEASE)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
    }
}

/// A replica SIGKILLed: who, and when.
struct Killed {
    name: String,
    at: Instant,
}

/// Waits until `next` holds the Lease after `killed` was killed at `step`; prints how long that
/// took.
async fn take_over(server: &Server, killed: Killed, next: &Replica, step: &str) {
    until(&format!("{} to take over", next.name), &[next], || async {
        (server.leader().await.as_deref() == Some(next.name.as_str())).then_some(())
    })
    .await;
    println!(
        "{} killed {step}: {} leads {:.1}s later",
        killed.name,
        next.name,
        killed.at.elapsed().as_secs_f64()
    );
}

/// The finished backups (with a manifest) under `root`, oldest first.
fn backups(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    dirs.retain(|d| d.join("manifest.json").is_file());
    dirs.sort();
    dirs
}

/// Scaffolds the fleet into `root`, as `capstan init` and `capstan new cluster` would: m-kill
/// (three control-plane machines, Kubernetes 1.32) and its workload clusters.
fn scaffold_fleet(root: &Path) {
    let mut tree = capstan_layout::Tree::new();
    let mut reqs = vec![ClusterRequest {
        name: MGMT.into(),
        provider: "docker".into(),
        docker_backend: Some("in-memory".into()),
        namespace: Some(NS.into()),
        kubernetes_version: Some("1.32".into()),
        control_plane_count: Some(3),
        worker_count: Some(1),
        pod_cidr: Some("192.168.0.0/16".into()),
        service_cidr: Some("10.96.0.0/12".into()),
        ..Default::default()
    }];
    for (i, name) in PAUSABLE.iter().chain([&OPERATOR]).enumerate() {
        reqs.push(ClusterRequest {
            name: name.to_string(),
            management: Some(MGMT.into()),
            provider: "docker".into(),
            namespace: Some(NS.into()),
            kubernetes_version: Some("1.32".into()),
            pod_cidr: Some(format!("172.{}.0.0/16", 16 + i)),
            service_cidr: Some(format!("10.{}.0.0/16", 112 + i)),
            values: Some(json!({"workerGroups": [{"name": "md-0", "count": 1}]})),
            ..Default::default()
        });
    }
    for req in reqs {
        for (p, text) in scaffold::plan(&tree, &req).unwrap().files {
            let path = root.join(&p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &text).unwrap();
            tree.insert(p, text);
        }
    }
}

/// A backed-up object as restored ([`objects::comparable`]), its conditions in type order.
fn comparable_conditions_sorted(o: &Value) -> Value {
    let mut v = objects::comparable(o);
    if let Some(c) = v
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        c.sort_by_key(|c| c["type"].to_string());
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_step_of_a_self_upgrade_survives_its_leader_being_killed() {
    let started = Instant::now();
    let cp = ControlPlane::start_with(StartOptions {
        controllers: true,
        timeout: Duration::from_secs(300),
        ..Default::default()
    })
    .await
    .unwrap();
    let _logs = cp.logs_on_failure("every_step_of_a_self_upgrade_survives_its_leader_being_killed");
    let server = Server {
        client: cp.client(),
    };
    let tmp = tempfile::tempdir().unwrap();
    let key = age::x25519::Identity::generate();
    let identity = tmp.path().join("backup-identity.txt");
    std::fs::write(
        &identity,
        format!(
            "{}\n",
            age::secrecy::ExposeSecret::expose_secret(&key.to_string())
        ),
    )
    .unwrap();
    let setup = Setup {
        repo: tmp.path().join("fleet"),
        backups: tmp.path().join("backups"),
        identity,
        recipient: key.to_public().to_string(),
        // Every replica as the agent's ServiceAccount, with `capstan install`'s rules.
        kubeconfig: capstan::install::testing::agent_kubeconfig(&cp).await,
        logs: tmp.path().to_path_buf(),
    };
    scaffold_fleet(&setup.repo);

    // a leads and brings the fleet up at 1.32; b follows.
    let a = Replica::start(&setup, "a", Some("self-upgrade-backed-up"));
    until("a to lead", &[&a], || async {
        (server.leader().await.as_deref() == Some("a")).then_some(())
    })
    .await;
    let b = Replica::start(&setup, "b", Some("self-upgrade-paused-one"));
    let all = [MGMT, PAUSABLE[0], PAUSABLE[1], OPERATOR];
    until("the fleet to be Ready", &[&a, &b], || async {
        for c in all {
            let api = capstan::status::api(&server.client);
            let phase = api
                .get_opt(c)
                .await
                .ok()
                .flatten()
                .and_then(|o| serde_json::to_value(o).ok())
                .and_then(|o| o.pointer("/status/phase").cloned());
            if phase != Some(json!("Ready")) {
                return None;
            }
        }
        Some(())
    })
    .await;
    let old_cp = server.control_plane().await;
    assert_eq!(old_cp.len(), 3, "{old_cp:?}");
    assert!(old_cp.iter().all(|(_, v, _)| v.starts_with("v1.32.")));
    let old = |n: &str| old_cp.iter().any(|(o, _, _)| o == n);
    println!(
        "fleet Ready at 1.32 after {:.0}s",
        started.elapsed().as_secs_f64()
    );

    // An operator pauses w-op, as their own field manager.
    server
        .api("cluster.x-k8s.io", "Cluster", "clusters", NS)
        .patch(
            OPERATOR,
            &PatchParams {
                field_manager: Some("operator".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();

    // The management cluster goes to 1.33: a reads the edit, backs up, and stops there.
    let spec = setup.repo.join(format!("clusters/{MGMT}/cluster.yaml"));
    let text = std::fs::read_to_string(&spec).unwrap();
    assert!(text.contains("kubernetesVersion: \"1.32\""), "{text}");
    std::fs::write(
        &spec,
        text.replacen(
            "kubernetesVersion: \"1.32\"",
            "kubernetesVersion: \"1.33\"",
            1,
        ),
    )
    .unwrap();
    let upgrade = Instant::now();

    // 1. a killed after the backup: written whole, nothing paused, nothing applied.
    until("a to stop after the backup", &[&a, &b], || async {
        a.stopped_at("self-upgrade-backed-up").then_some(())
    })
    .await;
    let first = backups(&setup.backups);
    assert_eq!(first.len(), 1, "{first:?}");
    for w in PAUSABLE {
        assert_eq!(
            server.pause(w).await,
            (false, None),
            "{w} paused before the kill"
        );
    }
    assert_eq!(server.status(MGMT).await.get("backup"), None);
    let kcp_version = || async {
        let list = server
            .api(
                "controlplane.cluster.x-k8s.io",
                "KubeadmControlPlane",
                "kubeadmcontrolplanes",
                NS,
            )
            .list(&ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={MGMT}")))
            .await
            .unwrap();
        assert_eq!(list.items.len(), 1);
        serde_json::to_value(&list.items[0]).unwrap()["spec"]["version"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(kcp_version().await.starts_with("v1.32."));
    take_over(&server, a.kill(), &b, "after the backup").await;

    // 2. b takes over, backs up again, pauses the first workload cluster and is killed.
    until("b to stop after pausing one cluster", &[&b], || async {
        b.stopped_at("self-upgrade-paused-one").then_some(())
    })
    .await;
    assert_eq!(server.leader().await.as_deref(), Some("b"));
    assert_eq!(backups(&setup.backups).len(), 2);
    assert_eq!(
        server.pause(PAUSABLE[0]).await,
        (true, Some(MGMT.into())),
        "{} not paused for the upgrade",
        PAUSABLE[0]
    );
    assert_eq!(server.pause(PAUSABLE[1]).await, (false, None));
    assert_eq!(server.pause(OPERATOR).await, (true, None));
    assert_eq!(server.status(MGMT).await.get("backup"), None);
    assert!(kcp_version().await.starts_with("v1.32."));
    let a2 = Replica::start(&setup, "a2", Some("self-upgrade-applied"));
    take_over(&server, b.kill(), &a2, "after pausing one cluster").await;

    // 3. a2 takes over: backs up, pauses the rest, changes the control plane, and is killed
    //    before its pass writes the status. The backup is recorded already: the record goes
    //    down before anything of the upgrade is applied.
    until(
        "a2 to stop with the control plane changed",
        &[&a2],
        || async { a2.stopped_at("self-upgrade-applied").then_some(()) },
    )
    .await;
    assert!(kcp_version().await.starts_with("v1.33."));
    for w in PAUSABLE {
        assert_eq!(server.pause(w).await, (true, Some(MGMT.into())), "{w}");
    }
    assert_eq!(server.pause(OPERATOR).await, (true, None));
    let third = backups(&setup.backups);
    assert_eq!(third.len(), 3, "{third:?}");
    let recorded = json!(third[2].display().to_string());
    let st = server.status(MGMT).await;
    assert_eq!(st["backup"], recorded, "the backup is not recorded: {st}");
    let b2 = Replica::start(&setup, "b2", Some("self-upgrade-rolling-out"));
    take_over(&server, a2.kill(), &b2, "after changing the control plane").await;

    // 4. b2 takes over and is killed while the control plane rolls out.
    let cp_mid = until(
        "b2 to stop mid-rollout with a new control-plane machine",
        &[&b2],
        || async {
            if !b2.stopped_at("self-upgrade-rolling-out") {
                return None;
            }
            let machines = server.control_plane().await;
            machines.iter().any(|(n, _, _)| !old(n)).then_some(machines)
        },
    )
    .await;
    let a3 = Replica::start(&setup, "a3", Some("self-upgrade-rolled-out"));
    let killed = b2.kill();
    // Read right after the kill: an old machine still there now was there at the kill.
    let after_kill = server.control_plane().await;
    take_over(&server, killed, &a3, "mid-rollout").await;
    assert!(
        after_kill.iter().any(|(n, _, _)| old(n)) && after_kill.iter().any(|(n, _, _)| !old(n)),
        "not mid-rollout at the kill: {cp_mid:?} then {after_kill:?}"
    );
    for w in PAUSABLE {
        assert_eq!(server.pause(w).await, (true, Some(MGMT.into())), "{w}");
    }
    let st = server.status(MGMT).await;
    assert_eq!(st["backup"], recorded, "{st}");
    assert_eq!(
        backups(&setup.backups).len(),
        3,
        "a backup again mid-rollout"
    );

    // 5. a3 takes over, the rollout ends, and a3 is killed before it unpauses.
    until("a3 to stop before unpausing", &[&a3], || async {
        a3.stopped_at("self-upgrade-rolled-out").then_some(())
    })
    .await;
    let rolled = server.control_plane().await;
    assert!(
        rolled.len() == 3
            && rolled
                .iter()
                .all(|(n, v, deleting)| !old(n) && v.starts_with("v1.33.") && !deleting),
        "{rolled:?}"
    );
    for w in PAUSABLE {
        assert_eq!(server.pause(w).await, (true, Some(MGMT.into())), "{w}");
    }
    assert_eq!(server.status(MGMT).await["backup"], recorded);
    let b3 = Replica::start(&setup, "b3", None);
    take_over(&server, a3.kill(), &b3, "before unpausing").await;

    // 6. b3 takes over and finishes: every workload cluster capstan paused is unpaused and
    //    reconciled again, the operator's pause stays, the record of the upgrade is gone.
    until("b3 to finish the upgrade", &[&b3], || async {
        for w in PAUSABLE {
            if server.pause(w).await != (false, None) || server.status(w).await["phase"] != "Ready"
            {
                return None;
            }
        }
        let st = server.status(MGMT).await;
        (st["phase"] == "Ready" && st.get("backup").is_none() && st.get("stage").is_none())
            .then_some(())
    })
    .await;
    assert_eq!(server.leader().await.as_deref(), Some("b3"));
    assert_eq!(server.pause(OPERATOR).await, (true, None));
    assert_eq!(server.status(OPERATOR).await["phase"], "Suspended");
    let done = server.control_plane().await;
    assert!(
        done.len() == 3
            && done
                .iter()
                .all(|(n, v, _)| !old(n) && v.starts_with("v1.33.")),
        "{done:?}"
    );
    println!(
        "self-upgrade through five leader kills: {:.0}s from the edit to done ({:.0}s in all)",
        upgrade.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    drop(b3);

    // 7. `capstan restore`, a process of its own, re-creates on a fresh API server what a,
    //    killed right after, had backed up. (Its upstream CRDs are installed; capstan's status
    //    CRD is installed as an operator would, before restoring.)
    let target = ControlPlane::start().await.unwrap();
    capstan::install::install_crd(&target.client())
        .await
        .unwrap();
    let backed_up =
        capstan::backup::read(&first[0], &capstan::backup::Identities::from(key.clone())).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .arg("restore")
        .arg("--from")
        .arg(&first[0])
        .arg("--identity")
        .arg(&setup.identity)
        .arg("--kubeconfig")
        .arg(target.kubeconfig_path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with(&format!(
            "{} objects restored, 0 already there, 0 of kinds",
            backed_up.len()
        )),
        "{stdout}"
    );
    let discovery = kube::discovery::Discovery::new(target.client())
        .run_aggregated()
        .await
        .unwrap();
    let mut clusters = 0;
    for o in &backed_up {
        let s = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or("");
        let (group, version) = s("/apiVersion")
            .split_once('/')
            .unwrap_or(("", s("/apiVersion")));
        let (ar, _) = discovery
            .resolve_gvk(&kube::core::GroupVersionKind::gvk(
                group,
                version,
                s("/kind"),
            ))
            .unwrap();
        let api: Api<DynamicObject> =
            Api::namespaced_with(target.client(), s("/metadata/namespace"), &ar);
        let mut back = serde_json::to_value(api.get(s("/metadata/name")).await.unwrap()).unwrap();
        back["apiVersion"] = o["apiVersion"].clone();
        back["kind"] = o["kind"].clone();
        assert_eq!(
            comparable_conditions_sorted(&back),
            comparable_conditions_sorted(o),
            "{} {}",
            s("/kind"),
            s("/metadata/name")
        );
        if s("/kind") == "Cluster" && group == "cluster.x-k8s.io" {
            clusters += 1;
        }
    }
    // Backed up before anything was paused: every Cluster, the operator's pause included.
    assert_eq!(clusters, all.len());
}
