//! `capstan rehearse` on the real Cluster API controllers (issue 36): a pull request's base
//! revision brought up, its head applied through the agent's pass and followed, what happened
//! read back from the API server with kubectl.
//!
//! The rehearsal runs here on the shared control plane with its controllers (the scenario where
//! the rehearsal's control plane is already running); `agent/tests/dev.rs` has the one where it
//! is not. The clusters are scaffolded on CAPD's in-memory backend already, so the stand-in
//! mapping changes their files little; its vSphere cases are `templates/tests/rehearsal.rs`.
//!
//! A test binary of its own, not a module of `cluster_api`: its three tests bring up eleven
//! clusters, and the `cluster_api` scenarios, which all run at once, are sensitive to load on a
//! 2-core runner. This binary runs in the second pass of `.ci/test`, after them.

use std::collections::BTreeSet;
use std::time::Duration;

use capstan::rehearse::timeline::{ClusterRehearsal, Verdict};
use capstan::rehearse::{self, Change, Options};
use capstan_e2e::capi::*;
use capstan_layout::Tree;
use capstan_layout::scaffold::ClusterRequest;
use serde_json::{Value, json};

fn options(head_timeout: Duration) -> (Options, tempfile::TempDir) {
    let backup = tempfile::tempdir().unwrap();
    (
        Options {
            concurrency: 2,
            timeout: head_timeout,
            base_timeout: SETTLE,
            // Kept, so the test reads the outcome from the API server; it deletes them after.
            keep: true,
            backup_dir: backup.path().to_path_buf(),
        },
        backup,
    )
}

/// The rehearsal of cluster `name` in `out`; panics when there is none.
fn rehearsal_of<'a>(out: &'a [ClusterRehearsal], name: &str) -> &'a ClusterRehearsal {
    out.iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("{name} not rehearsed: {out:#?}"))
}

/// The recorded stages of a ManagedCluster, `(name, started, finished)`, from kubectl.
fn recorded_stages(cluster: &str) -> Vec<(String, String, String)> {
    let mc = managed_cluster_json(cluster).unwrap_or_else(|| panic!("{cluster} has no status"));
    mc["status"]["stages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|s| {
            let f = |k: &str| s[k].as_str().unwrap_or_default().to_string();
            (f("name"), f("started"), f("finished"))
        })
        .collect()
}

async fn delete(repo: &mut Repo, names: &[&str]) {
    for n in names {
        repo.tombstone(n);
        repo.converge(Some(n)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_request_rehearses_green_an_upgrade_a_new_cluster_and_a_deletion() {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs = cp.logs_on_failure("a_pull_request_rehearses_green");
    // w-up: three control-plane machines and two worker groups on 1.32; w-del: one of each.
    let mut repo = Repo::new_with(
        "rh",
        &[
            (
                "w-up",
                json!([{"name": "md-0", "count": 2}, {"name": "md-1", "count": 1}]),
            ),
            ("w-del", json!([{"name": "md-0", "count": 1}])),
            ("w-chain", json!([{"name": "md-0", "count": 1}])),
        ],
        |w| {
            if w.name == "w-up" {
                w.control_plane_count = Some(3);
                w.kubernetes_version = Some("1.32".into());
            }
            if w.name == "w-chain" {
                w.kubernetes_version = Some("1.31".into());
            }
        },
    );
    let base = Tree::from_dir(&repo.files.root).unwrap();
    // The pull request: w-up to 1.33, w-chain from 1.31 to 1.33, w-del deleted, w-new created.
    repo.edit(
        "w-up",
        "kubernetesVersion: \"1.32\"",
        "kubernetesVersion: \"1.33\"",
    );
    repo.edit(
        "w-chain",
        "kubernetesVersion: \"1.31\"",
        "kubernetesVersion: \"1.33\"",
    );
    repo.tombstone("w-del");
    repo.files.add(ClusterRequest {
        name: "w-new".into(),
        management: Some(repo.mgmt.clone()),
        provider: "docker".into(),
        namespace: Some(repo.ns.clone()),
        kubernetes_version: Some("1.33".into()),
        pod_cidr: Some("172.30.0.0/16".into()),
        service_cidr: Some("10.130.0.0/16".into()),
        values: Some(json!({"workerGroups": [{"name": "md-0", "count": 1}]})),
        ..Default::default()
    });
    let head = Tree::from_dir(&repo.files.root).unwrap();

    let prepared =
        rehearse::prepare("rehearsal", &base, &head, None, &capstan_layout::load).unwrap();
    let targets: Vec<(&str, Change)> = prepared
        .targets
        .iter()
        .map(|t| (t.name.as_str(), t.change))
        .collect();
    assert_eq!(
        targets,
        [
            ("w-chain", Change::Update),
            ("w-del", Change::Delete),
            ("w-new", Change::Create),
            ("w-up", Change::Update)
        ],
        "only the changed clusters, not the management cluster"
    );
    let (mut opts, _backup) = options(SETTLE);
    opts.concurrency = 3;
    let client = capstan::install::testing::agent_client(cp).await;
    let out = rehearse::rehearse(&client, &prepared, &opts, &|l| eprintln!("{l}")).await;
    let report = capstan::rehearse::timeline::text("rehearsal", &out);
    eprintln!("{report}");
    assert_eq!(
        capstan::rehearse::timeline::exit_code(&out),
        0,
        "every cluster passes: {report}"
    );

    // The upgrade: its stages in order, as the API server recorded them.
    let up = rehearsal_of(&out, "w-up");
    let names: Vec<&str> = up.stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["ControlPlane", "Workers"], "{report}");
    let recorded = recorded_stages("w-up");
    let last_two: Vec<&str> = recorded
        .iter()
        .rev()
        .take(2)
        .rev()
        .map(|s| s.0.as_str())
        .collect();
    assert_eq!(last_two, ["ControlPlane", "Workers"], "{recorded:?}");
    let (cp_stage, workers) = (&recorded[recorded.len() - 2], &recorded[recorded.len() - 1]);
    assert!(
        !cp_stage.2.is_empty() && !workers.2.is_empty() && workers.1 >= cp_stage.2,
        "the workers began after the control plane ended: {recorded:?}"
    );
    let mc = managed_cluster_json("w-up").unwrap();
    assert_eq!(mc["status"]["phase"], "Ready");
    assert_eq!(mc["status"]["lastAppliedRevision"], "head");
    // Every machine was replaced, none went missing, and all run 1.33 now.
    let machines = repo.machines("w-up");
    assert_eq!(machines.len(), 6, "{machines:?}");
    assert!(all_running(&machines), "{machines:?}");
    let versions: BTreeSet<String> = kubectl_items(&[
        "get",
        "machines.cluster.x-k8s.io",
        "-n",
        &repo.ns,
        "-l",
        "cluster.x-k8s.io/cluster-name=w-up",
    ])
    .iter()
    .map(|m| {
        m["spec"]["version"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    })
    .collect();
    assert!(
        versions.len() == 1 && versions.iter().all(|v| v.starts_with("v1.33")),
        "{versions:?}"
    );
    assert_eq!(
        up.versions
            .values()
            .flatten()
            .cloned()
            .collect::<BTreeSet<_>>(),
        versions,
        "the timeline's versions are the API server's"
    );
    assert_eq!(
        (up.machines_created, up.machines_deleted),
        (6, 6),
        "{report}"
    );
    assert_eq!(
        up.max_unavailable, 0,
        "surge rollouts (control plane maxSurge 1, workers maxUnavailable 0): {report}"
    );
    assert!(up.base_seconds.is_some());

    // The new cluster came up; the deleted one and only its objects went.
    let new = rehearsal_of(&out, "w-new");
    assert_eq!((new.machines_created, new.machines_deleted), (2, 0));
    assert_eq!(repo.machines("w-new").len(), 2);
    let del = rehearsal_of(&out, "w-del");
    assert_eq!(del.verdict, Verdict::Passed);
    assert_eq!(del.machines_deleted, 2, "{report}");
    assert!(repo.machines("w-del").is_empty());
    assert!(!repo.names("clusters.cluster.x-k8s.io").contains("w-del"));
    assert!(managed_cluster_json("w-del").is_none());
    assert!(repo.names("clusters.cluster.x-k8s.io").contains("w-up"));

    // The chained jump shows both steps: the control plane went through 1.32, the workers
    // skipped it (Cluster API's skew rules allow it); the API server agrees at the end.
    let chain = rehearsal_of(&out, "w-chain");
    let minors = |steps: &[String]| -> Vec<String> {
        steps
            .iter()
            .map(|v| v.split('.').take(2).collect::<Vec<_>>().join("."))
            .collect()
    };
    assert_eq!(
        minors(&chain.steps["control-plane"]),
        ["v1.31", "v1.32", "v1.33"],
        "{report}"
    );
    assert_eq!(
        minors(&chain.steps["w-chain-md-0"]),
        ["v1.31", "v1.33"],
        "{report}"
    );
    assert!(report.contains("control-plane went v1.31"), "{report}");
    assert!(
        repo.machines("w-chain")
            .iter()
            .all(|m| m.version.starts_with("v1.33")),
        "{:?}",
        repo.machines("w-chain")
    );

    // JSON and markdown say the same.
    let j = capstan::rehearse::timeline::json("rehearsal", &out);
    assert_eq!(j["passed"], true);
    let md = capstan::rehearse::timeline::markdown("rehearsal", &out);
    assert!(md.contains("| ControlPlane |"), "{md}");
    delete(&mut repo, &["w-up", "w-new", "w-chain"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_that_never_finishes_rehearses_red_naming_the_stage_and_the_controllers_words() {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs = cp.logs_on_failure("a_rollout_that_never_finishes_rehearses_red");
    let mut repo = Repo::new_with(
        "rhs",
        &[
            ("w-stall", json!([{"name": "md-0", "count": 1}])),
            ("w-mhc", json!([{"name": "md-0", "count": 1}])),
        ],
        |w| w.kubernetes_version = Some("1.32".into()),
    );
    // Simulated boots for w-stall (a rehearsal's machines otherwise start at once): the test
    // needs the moment between a machine's creation and its start to pause it.
    let dc = repo.dir("w-stall").join("cluster.yaml");
    let text = std::fs::read_to_string(&dc).unwrap();
    let at = "capstan.dev/docker-backend: \"in-memory\"";
    assert!(text.contains(at), "{text}");
    std::fs::write(
        &dc,
        text.replacen(
            at,
            &format!("{at}\n    capstan.dev/in-memory-startup: \"boot\""),
            1,
        ),
    )
    .unwrap();
    let base = Tree::from_dir(&repo.files.root).unwrap();
    repo.edit(
        "w-stall",
        "kubernetesVersion: \"1.32\"",
        "kubernetesVersion: \"1.33\"",
    );
    // A health check capstan's validation accepts and Cluster API's webhook refuses (a node
    // startup timeout under its 30 s minimum): only the real webhook finds it.
    repo.edit(
        "w-mhc",
        "  clusterNetwork:",
        "  machineHealthCheck:\n    nodeStartupTimeout: 10s\n  clusterNetwork:",
    );
    let head = Tree::from_dir(&repo.files.root).unwrap();
    let prepared =
        rehearse::prepare("rehearsal", &base, &head, None, &capstan_layout::load).unwrap();
    // The head's bound: short, since the machine below never comes.
    let (opts, _backup) = options(Duration::from_secs(45));

    // The in-memory backend is told never to provision the first 1.33 machine: its
    // DevMachine is paused (Cluster API's annotation, which CAPD honours).
    let ns = repo.ns.clone();
    let pauser = tokio::spawn(async move {
        loop {
            let new = kubectl_items(&[
                "get",
                "machines.cluster.x-k8s.io",
                "-n",
                &ns,
                "-l",
                "cluster.x-k8s.io/cluster-name=w-stall",
            ])
            .into_iter()
            .find(|m| {
                m["spec"]["version"]
                    .as_str()
                    .is_some_and(|v| v.starts_with("v1.33"))
                    && m["spec"]["infrastructureRef"]["name"].is_string()
            });
            if let Some(m) = new {
                let dev = m["spec"]["infrastructureRef"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string();
                shared_kubectl(&[
                    "annotate",
                    "devmachines.infrastructure.cluster.x-k8s.io",
                    "-n",
                    &ns,
                    &dev,
                    "cluster.x-k8s.io/paused=",
                ]);
                return dev;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let client = capstan::install::testing::agent_client(cp).await;
    let out = rehearse::rehearse(&client, &prepared, &opts, &|l| eprintln!("{l}")).await;
    let report = capstan::rehearse::timeline::text("rehearsal", &out);
    eprintln!("{report}");
    assert_eq!(capstan::rehearse::timeline::exit_code(&out), 1, "{report}");
    let c = rehearsal_of(&out, "w-stall");
    let Verdict::Failed {
        stage,
        message,
        conditions,
    } = &c.verdict
    else {
        panic!("{report}")
    };
    assert_eq!(stage.as_deref(), Some("ControlPlane"), "{report}");
    assert!(message.contains("within the bound"), "{message}");
    assert!(
        conditions
            .iter()
            .any(|c| c.starts_with("Machine/") || c.starts_with("KubeadmControlPlane/")),
        "the controllers' own conditions are named: {conditions:?}"
    );
    // The webhook's refusal, naming the object and in the webhook's own words; nothing of the
    // change applied.
    let Verdict::Failed { message, .. } = &rehearsal_of(&out, "w-mhc").verdict else {
        panic!("{report}")
    };
    assert!(
        message.contains("MachineHealthCheck") && message.contains("must be at least 30s"),
        "{message}"
    );
    let mhcs = kubectl_items(&[
        "get",
        "machinehealthchecks.cluster.x-k8s.io",
        "-n",
        &repo.ns,
        "-l",
        "capstan.dev/cluster=w-mhc",
    ]);
    assert!(
        mhcs.iter()
            .all(|m| m["spec"]["checks"]["nodeStartupTimeoutSeconds"] != 10),
        "{mhcs:?}"
    );
    // The API server agrees: the control plane is still rolling, the paused machine not up.
    let st: Value = managed_cluster_json("w-stall").unwrap()["status"].clone();
    assert_eq!(st["stage"], "ControlPlane", "{st}");
    assert_ne!(st["phase"], "Ready", "{st}");
    assert!(
        report.contains("w-stall: FAILED at stage ControlPlane"),
        "{report}"
    );

    let dev = pauser.await.unwrap();
    shared_kubectl(&[
        "annotate",
        "devmachines.infrastructure.cluster.x-k8s.io",
        "-n",
        &repo.ns,
        &dev,
        "cluster.x-k8s.io/paused-",
    ]);
    delete(&mut repo, &["w-stall", "w-mhc"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_of_a_later_wave_shows_its_hold_until_the_canary_is_done() {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs = cp.logs_on_failure("a_cluster_of_a_later_wave_shows_its_hold");
    // The canary's upgrade is the longer one (three control-plane machines, two workers), so
    // the other cluster's upgrade is ready to start well before the canary is done.
    let mut repo = Repo::new_with(
        "rhw",
        &[
            ("w-can", json!([{"name": "md-0", "count": 2}])),
            ("w-rest", json!([{"name": "md-0", "count": 1}])),
        ],
        |w| {
            w.kubernetes_version = Some("1.32".into());
            if w.name == "w-can" {
                w.control_plane_count = Some(3);
            }
        },
    );
    repo.edit(
        "w-can",
        "metadata:\n  name: \"w-can\"\n",
        "metadata:\n  name: \"w-can\"\n  labels:\n    tier: canary\n",
    );
    std::fs::write(
        repo.dir(&repo.mgmt).join("fleet.yaml"),
        "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  rollout:\n    waves:\n    - name: canary\n      matchLabels: {tier: canary}\n",
    )
    .unwrap();
    let base = Tree::from_dir(&repo.files.root).unwrap();
    for c in ["w-can", "w-rest"] {
        repo.edit(
            c,
            "kubernetesVersion: \"1.32\"",
            "kubernetesVersion: \"1.33\"",
        );
    }
    let head = Tree::from_dir(&repo.files.root).unwrap();
    let prepared =
        rehearse::prepare("rehearsal", &base, &head, None, &capstan_layout::load).unwrap();
    let (opts, _backup) = options(SETTLE);
    let client = capstan::install::testing::agent_client(cp).await;
    let out = rehearse::rehearse(&client, &prepared, &opts, &|l| eprintln!("{l}")).await;
    let report = capstan::rehearse::timeline::text("rehearsal", &out);
    eprintln!("{report}");
    assert_eq!(capstan::rehearse::timeline::exit_code(&out), 0, "{report}");
    let (can, rest) = (rehearsal_of(&out, "w-can"), rehearsal_of(&out, "w-rest"));
    assert!(can.holds.is_empty(), "the canary is never held: {report}");
    let hold = rest
        .holds
        .first()
        .unwrap_or_else(|| panic!("the later wave was not held: {report}"));
    assert_eq!(hold.reason, "WaitingForWave", "{report}");
    assert!(hold.message.contains("w-can"), "{report}");
    assert!(report.contains("held at"), "{report}");
    // The API server recorded the wave and the upgrade at the new revision.
    let mc = managed_cluster_json("w-rest").unwrap();
    assert_eq!(mc["status"]["wave"], "2/2 rest");
    assert_eq!(mc["status"]["lastAppliedRevision"], "head");
    delete(&mut repo, &["w-can", "w-rest"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_management_cluster_that_changes_is_rehearsed_upgrading_itself() {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs = cp.logs_on_failure("a_management_cluster_that_changes_is_rehearsed");
    let repo = Repo::new_full(
        "rhm",
        |m| m.kubernetes_version = Some("1.32".into()),
        &[("w-rhm", json!([{"name": "md-0", "count": 1}]))],
        |_| {},
    );
    let mgmt = repo.mgmt.clone();
    let base = Tree::from_dir(&repo.files.root).unwrap();
    repo.edit(
        &mgmt,
        "kubernetesVersion: \"1.32\"",
        "kubernetesVersion: \"1.33\"",
    );
    let head = Tree::from_dir(&repo.files.root).unwrap();
    let prepared =
        rehearse::prepare("rehearsal", &base, &head, None, &capstan_layout::load).unwrap();
    let targets: Vec<&str> = prepared.targets.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        targets,
        [mgmt.as_str()],
        "only the management cluster changed"
    );
    let (mut opts, backup) = options(SETTLE);
    // Cleaned up by the rehearsal itself: the agent never deletes a management cluster through
    // a tombstone, so the rehearsal deletes its stand-in from outside.
    opts.keep = false;
    // As `capstan rehearse` runs: with the control plane's admin credentials (the agent's
    // ServiceAccount may not delete a management cluster's Cluster, and should not); the
    // agent's install and tenancy are in place.
    capstan::install::testing::agent_client(cp).await;
    let client = cp.client();
    let out = rehearse::rehearse(&client, &prepared, &opts, &|l| eprintln!("{l}")).await;
    let report = capstan::rehearse::timeline::text("rehearsal", &out);
    eprintln!("{report}");
    assert_eq!(capstan::rehearse::timeline::exit_code(&out), 0, "{report}");
    let m = rehearsal_of(&out, &mgmt);
    let names: Vec<&str> = m.stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["ControlPlane", "Workers"], "{report}");
    // It upgraded itself as the agent does: a backup first, into the rehearsal's directory.
    assert!(
        std::fs::read_dir(backup.path()).unwrap().count() > 0,
        "no backup was taken"
    );
    assert!(
        !m.versions.is_empty()
            && m.versions
                .values()
                .flatten()
                .all(|v| v.starts_with("v1.33")),
        "{report}"
    );
    // Then deleted, with everything capstan rendered for it, read from the API server.
    assert!(managed_cluster_json(&mgmt).is_none());
    assert!(!repo.names("clusters.cluster.x-k8s.io").contains(&mgmt));
    assert!(repo.machines(&mgmt).is_empty());
    for resource in [
        "clusters.anywhere.eks.amazonaws.com",
        "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
        "machinedeployments.cluster.x-k8s.io",
    ] {
        let left = kubectl_items(&[
            "get",
            resource,
            "-n",
            &repo.ns,
            "-l",
            &format!("capstan.dev/cluster={mgmt}"),
        ]);
        assert!(left.is_empty(), "{resource}: {left:?}");
    }
}
