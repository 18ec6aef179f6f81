//! Continuous lifecycle testing, as the kindless-upgrades design asks: clusters with single and
//! three-node control planes (stacked etcd) are walked through one Kubernetes minor after the
//! other, with scale-ups in between, against the real Cluster API controllers; after every step
//! the order of the stages is checked from the Machines themselves — their versions and their
//! creation and deletion timestamps as the API server recorded them — never from capstan's
//! logs or status.
//!
//! CI runs the short form (one round: 1.32 → 1.33 with a scale-up between). The long run:
//!
//! ```sh
//! CAPSTAN_SOAK_ROUNDS=5 CAPSTAN_SOAK_FROM=1.31 cargo test -p capstan-e2e --test cluster_api -- soak:: --nocapture
//! ```
//!
//! Each round creates its clusters at `CAPSTAN_SOAK_FROM`, upgrades them one minor at a time to
//! the newest minor of the embedded release (1.34), scaling a worker group up before each
//! upgrade, then deletes them; it prints what it checked.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use capstan_e2e::capi::*;
use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};

/// What the API server recorded of a Machine.
#[derive(Debug, Clone)]
struct Life {
    role: String,
    version: String,
    created: String,
    deleted: Option<String>,
}

/// Every Machine of a namespace, as a watch sees them (deletion timestamps included: a deleted
/// Machine passes through a state with one before it goes).
fn record_machines(
    cp: &capstan_harness::ControlPlane,
    ns: &str,
) -> (
    Arc<Mutex<BTreeMap<String, Life>>>,
    tokio::task::JoinHandle<()>,
) {
    let seen: Arc<Mutex<BTreeMap<String, Life>>> = Arc::default();
    let api: Api<DynamicObject> = Api::namespaced_with(
        cp.client(),
        ns,
        &gvk_resource("cluster.x-k8s.io", "v1beta2", "Machine"),
    );
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = events.next().await {
            let (Ok(Event::Apply(o)) | Ok(Event::InitApply(o)) | Ok(Event::Delete(o))) = ev else {
                continue;
            };
            let v = serde_json::to_value(&o).unwrap();
            let m = Machine::of(&v);
            let s = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
            let mut seen = out.lock().unwrap();
            let life = seen.entry(m.name.clone()).or_insert(Life {
                role: m.role.clone(),
                version: m.version.clone(),
                created: s("/metadata/creationTimestamp").unwrap_or_default(),
                deleted: None,
            });
            if let Some(d) = s("/metadata/deletionTimestamp") {
                life.deleted.get_or_insert(d);
            }
        }
    });
    (seen, task)
}

/// The stages of an upgrade to `version` of `cluster`, checked from its Machines: every
/// control-plane machine of an older version was deleted before (or in the second) the first
/// worker machine of the new version was created, and none of the new version's workers came
/// before the last new control-plane machine. Returns a line for the log.
fn check_order(
    lives: &BTreeMap<String, Life>,
    cluster: &str,
    version: &str,
) -> Result<String, String> {
    // Roles are `control-plane` or `worker`; names start with their cluster's.
    let of = |role: &str, new: bool| -> Vec<&Life> {
        lives
            .iter()
            .filter(|(n, l)| n.starts_with(&format!("{cluster}-")) && l.role == role)
            .map(|(_, l)| l)
            .filter(|l| l.version.starts_with(version) == new)
            .collect()
    };
    let old_cp = of("control-plane", false);
    let new_cp = of("control-plane", true);
    let new_workers = of("worker", true);
    let first_worker = new_workers.iter().map(|l| l.created.as_str()).min();
    let last_cp_gone = old_cp.iter().filter_map(|l| l.deleted.as_deref()).max();
    let last_cp_new = new_cp.iter().map(|l| l.created.as_str()).max();
    if old_cp.iter().any(|l| l.deleted.is_none()) {
        return Err(format!(
            "{cluster}: an old control-plane machine is left: {old_cp:?}"
        ));
    }
    match (first_worker, last_cp_gone, last_cp_new) {
        (Some(w), Some(gone), Some(new)) if w >= gone && w >= new => Ok(format!(
            "{cluster} → {version}: {} control-plane machines replaced by {} (last old one deleted {gone}), then {} workers (first created {w})",
            old_cp.len(),
            new_cp.len(),
            new_workers.len()
        )),
        (Some(w), gone, new) => Err(format!(
            "{cluster} → {version}: a worker of the new version was created at {w} before the control plane rolled out (last old deleted {gone:?}, last new created {new:?}): {lives:#?}"
        )),
        (None, ..) => Err(format!(
            "{cluster} → {version}: no worker of the new version"
        )),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_walk_minor_by_minor_with_the_stages_in_order() {
    let rounds: u32 = std::env::var("CAPSTAN_SOAK_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let from: u32 = std::env::var("CAPSTAN_SOAK_FROM")
        .ok()
        .and_then(|v| v.trim_start_matches("1.").parse().ok())
        .unwrap_or(32);
    let to: u32 = if rounds > 1 || from < 32 { 34 } else { 33 };
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs = cp.logs_on_failure("clusters_walk_minor_by_minor_with_the_stages_in_order");
    let mut checked = Vec::new();
    for round in 0..rounds {
        let tag = format!("soak{round}");
        let version = |m: u32| format!("\"1.{m}\"");
        let mut repo = Repo::new_with(
            &tag,
            &[
                ("s-one", json!([{"name": "md-0", "count": 1}])),
                ("s-three", json!([{"name": "md-0", "count": 1}])),
            ],
            |w| {
                w.kubernetes_version = Some(format!("1.{from}"));
                w.control_plane_count = Some(if w.name == "s-three" { 3 } else { 1 });
            },
        );
        let ns = repo.ns.clone();
        let (lives, watch) = record_machines(cp, &ns);
        repo.converge(None).await;
        let mut count = 1;
        for minor in from + 1..=to {
            // A scale-up first: Machines added, none replaced.
            count += 1;
            for c in ["s-one", "s-three"] {
                repo.edit(
                    c,
                    &format!("- name: \"md-0\"\n      count: {}", count - 1),
                    &format!("- name: \"md-0\"\n      count: {count}"),
                );
            }
            repo.converge(None).await;
            for c in ["s-one", "s-three"] {
                let machines = repo.machines(c);
                assert_eq!(
                    of_role(&machines, &format!("{c}-md-0")).len(),
                    count,
                    "{machines:?}"
                );
            }
            // Then one minor up, both clusters together.
            for c in ["s-one", "s-three"] {
                repo.edit(
                    c,
                    &format!("kubernetesVersion: {}", version(minor - 1)),
                    &format!("kubernetesVersion: {}", version(minor)),
                );
            }
            repo.converge(None).await;
            let lives = {
                let mut l = lives.lock().unwrap().clone();
                for life in l.values_mut() {
                    if life.role != "control-plane" {
                        life.role = "worker".into();
                    }
                }
                l
            };
            for c in ["s-one", "s-three"] {
                let line = check_order(&lives, c, &format!("v1.{minor}.")).unwrap();
                println!("round {round}: {line}");
                checked.push(line);
            }
        }
        for c in ["s-one", "s-three"] {
            repo.tombstone(c);
        }
        repo.converge(None).await;
        watch.abort();
    }
    println!(
        "soak: {rounds} round(s), {} upgrade steps checked, 1.{from} → 1.{to}",
        checked.len()
    );
    assert_eq!(checked.len() as u32, rounds * (to - from) * 2);
}
