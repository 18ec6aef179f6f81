//! The stage timeout bounds a stall, not the length of an upgrade, on the real Cluster API
//! controllers.
//!
//! CAPD's in-memory backend starts each machine after its provisioning delay (the VM after 3 s,
//! its node 1 s later, plus jitter that only adds: `machine-templates.yaml.j2`), so a worker
//! group of five rolled one machine at a time (MachineDeployment's default `maxSurge: 1`,
//! `maxUnavailable: 0`) cannot take less than 20 s, and the test's two groups rolled one after
//! the other (five, then two) not less than 28 s; with Cluster API's own steps they take about
//! two minutes on this 2-core machine, three times the 40 s stage timeout (the test checks that
//! the stage lasted longer than the timeout, or it would show nothing). A single machine's step
//! stays well under it (created → available took up to 10 s, and once, with every Cluster API
//! scenario running at once, more than 20 s, which the timeout was until then): the stage's
//! clock restarts whenever the rollout's report changes (a machine created, available or removed, the next group), as EKS Anywhere's
//! per-machine timeout does. A stall is made real, not simulated: the test pauses the
//! infrastructure machine of the first new machine (Cluster API's `cluster.x-k8s.io/paused`
//! annotation, which CAPD honours), so it never starts and the stage times out; unpaused, the
//! rollout finishes.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use capstan::plan::stages::WorkerRollout;
use capstan::status::Phase;
use capstan_e2e::capi::*;
use serde_json::{Value, json};

const STAGE_TIMEOUT: Duration = Duration::from_secs(40);

/// Seconds between two RFC 3339 timestamps.
fn seconds(from: &str, to: &str) -> f64 {
    let (a, b): (k8s_openapi::jiff::Timestamp, k8s_openapi::jiff::Timestamp) =
        (from.parse().unwrap(), to.parse().unwrap());
    b.duration_since(a).as_secs_f64()
}

/// The infrastructure machines (DevMachines) of a MachineDeployment's Machines, from kubectl.
fn dev_machines(ns: &str, deployment: &str) -> BTreeSet<String> {
    kubectl_items(&[
        "get",
        "machines.cluster.x-k8s.io",
        "-n",
        ns,
        "-l",
        &format!("cluster.x-k8s.io/deployment-name={deployment}"),
    ])
    .iter()
    .filter_map(|m| {
        m.pointer("/spec/infrastructureRef/name")
            .and_then(Value::as_str)
            .map(str::to_string)
    })
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_longer_than_the_stage_timeout_completes_and_a_stalled_one_times_out() {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs = cp.logs_on_failure(
        "a_rollout_longer_than_the_stage_timeout_completes_and_a_stalled_one_times_out",
    );
    let mut repo = Repo::new(
        "pace",
        &[(
            "w-pace",
            json!([{"name": "md-0", "count": 5}, {"name": "md-1", "count": 2}]),
        )],
    );
    repo.stages.workers = WorkerRollout::Sequential;
    let only = Some("w-pace");
    repo.converge(only).await;
    let before = repo.machines("w-pace");
    assert_eq!(before.len(), 8, "{before:?}");

    // Every progress report the status makes, read from the API server as it happens.
    let tl = Arc::new(Timeline::default());
    let _watch = watch_objects(
        cp,
        "capstan-system",
        gvk_resource("capstan.dev", "v1alpha1", "ManagedCluster"),
        tl.clone(),
        |v| {
            let t = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("-");
            format!(
                "mc {} phase={} stage={} since={} progress={}",
                t("/metadata/name"),
                t("/status/phase"),
                t("/status/stage"),
                t("/status/stageSince"),
                t("/status/stageProgress"),
            )
        },
    );

    // 1. Both groups' machine templates change (a label): md-0 rolls its five machines one at a
    //    time, then md-1 its two, under the 40 s stage timeout. The upgrade completes.
    for (group, count) in [("md-0", 5), ("md-1", 2)] {
        repo.edit(
            "w-pace",
            &format!("- name: \"{group}\"\n      count: {count}\n"),
            &format!(
                "- name: \"{group}\"\n      count: {count}\n      labels: {{\"tier\": \"paced\"}}\n"
            ),
        );
    }
    repo.stage_timeout = Some(STAGE_TIMEOUT);
    repo.converge(only).await;
    let machines = repo.machines("w-pace");
    assert_eq!(machines.len(), 8, "{machines:?}");
    assert!(all_running(&machines), "{machines:?}");
    let old = names_of(&before.iter().collect::<Vec<_>>());
    assert!(
        machines
            .iter()
            .filter(|m| m.role != "control-plane")
            .all(|m| !old.contains(&m.name)),
        "a worker machine was not replaced: {machines:?}"
    );
    // The workers' stage, as the status recorded it, lasted longer than the timeout.
    let mc = managed_cluster_json("w-pace").unwrap();
    let stages = mc["status"]["stages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let workers = stages
        .iter()
        .rfind(|s| s["name"] == "Workers")
        .unwrap_or_else(|| panic!("no Workers stage: {stages:#?}"));
    let took = seconds(
        workers["started"].as_str().unwrap(),
        workers["finished"].as_str().unwrap(),
    );
    assert!(
        took > STAGE_TIMEOUT.as_secs_f64(),
        "the workers rolled out in {took:.1} s, within the {STAGE_TIMEOUT:?} timeout: the test \
         shows nothing ({stages:#?})"
    );
    // Its clock restarted with each machine of md-0 and again with md-1.
    let events = tl.events();
    let progress: BTreeSet<&str> = events
        .iter()
        .filter(|e| e.starts_with("mc w-pace ") && e.contains("stage=Workers "))
        .filter_map(|e| e.split(" progress=").nth(1))
        .collect();
    let of = |group: &str| {
        progress
            .iter()
            .filter(|p| p.contains(&format!("MachineDeployment/w-pace-{group}:")))
            .count()
    };
    assert!(
        of("md-0") >= 3 && of("md-1") >= 1,
        "the clock did not restart as machines came up: {progress:#?}"
    );
    let worst = events
        .iter()
        .filter(|e| e.starts_with("mc w-pace ") && e.contains("phase=Failed"))
        .count();
    assert_eq!(worst, 0, "the cluster failed on the way: {events:#?}");
    eprintln!(
        "workers' stage: {took:.1} s under a {} s stage timeout, {} progress reports",
        STAGE_TIMEOUT.as_secs(),
        progress.len()
    );

    // 2. md-1 changes again and its first new machine never starts (its DevMachine is paused):
    //    no progress for longer than the timeout, the cluster fails at the Workers stage, naming
    //    the group; md-1's old machines stay (maxUnavailable 0).
    let md1_before = dev_machines(&repo.ns, "w-pace-md-1");
    repo.edit(
        "w-pace",
        "- name: \"md-1\"\n      count: 2\n      labels: {\"tier\": \"paced\"}\n",
        "- name: \"md-1\"\n      count: 2\n      labels: {\"tier\": \"stalled\"}\n",
    );
    let run = repo.converge_in_background(only);
    let ns = repo.ns.clone();
    let stalled = tokio::time::timeout(SETTLE, async {
        loop {
            if let Some(new) = dev_machines(&ns, "w-pace-md-1")
                .difference(&md1_before)
                .next()
            {
                return new.clone();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("md-1 started rolling");
    shared_kubectl(&[
        "annotate",
        "devmachines.infrastructure.cluster.x-k8s.io",
        "-n",
        &ns,
        &stalled,
        "cluster.x-k8s.io/paused=",
    ]);
    let out = run.await.unwrap();
    let last = out.last();
    let c = last.clusters.iter().find(|c| c.name == "w-pace").unwrap();
    assert_eq!(c.phase, Phase::Failed, "{}", c.message);
    let st = managed_cluster_json("w-pace").unwrap()["status"].clone();
    assert_eq!(st["phase"], "Failed", "{st}");
    assert_eq!(st["stage"], "Workers", "{st}");
    let ready = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready["reason"], "StageTimedOut", "{st}");
    let why = ready["message"].as_str().unwrap();
    assert!(
        why.contains("the workers w-pace-md-1 stage has made no progress within 40s")
            && why.contains("MachineDeployment/w-pace-md-1: 1/2 machines up to date"),
        "{why}"
    );
    let md1 = of_role(&repo.machines("w-pace"), "w-pace-md-1")
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    let old_md1 = md1
        .iter()
        .filter(|m| m.phase == "Running" && !m.deleting)
        .count();
    assert!(
        old_md1 >= 2,
        "md-1 went below its count while stalled: {md1:?}"
    );

    // 3. The machine unpaused, the same revision goes on to Ready.
    shared_kubectl(&[
        "annotate",
        "devmachines.infrastructure.cluster.x-k8s.io",
        "-n",
        &ns,
        &stalled,
        "cluster.x-k8s.io/paused-",
    ]);
    repo.stage_timeout = None;
    repo.converge(only).await;
    let machines = repo.machines("w-pace");
    assert_eq!(machines.len(), 8, "{machines:?}");
    assert!(all_running(&machines), "{machines:?}");
}
