//! Benchmark (prints figures; not a test): how long `capstan rehearse` takes, warm, on this
//! machine, for the two changes a platform team rehearses most:
//!
//! - a minor upgrade (1.32 → 1.33) of a cluster with three control-plane machines and two
//!   worker groups (two machines and one): the base revision brought up, then the upgrade
//!   followed through the control plane and both groups, then the cluster deleted;
//! - the creation of a new cluster of the same shape, then its deletion.
//!
//! The real binary runs each (`--control-plane` names a control plane with the Cluster API
//! controllers and CAPD's in-memory backend, started once here; the controllers' build is
//! cached in `~/.cache/capstan`, so "warm" means it exists). Each rehearsal's wall time is
//! printed with the phases its JSON report gives (the base revision, the stages), over
//! `CAPSTAN_BENCH_ROUNDS` rounds (default 1).
//!
//! Target (issue 36): under 3 minutes each.
//!
//! Run: `cargo bench -p capstan --bench rehearse` (alone: CAPD's in-memory backend has a fixed
//! port, so nothing else on the machine may run the controllers meanwhile).

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use capstan_harness::{ControlPlane, StartOptions};
use capstan_layout::Tree;
use capstan_layout::scaffold::{self, ClusterRequest};
use serde_json::{Value, json};
use support::bench_git;

/// Scaffolds `req` into `tree` and writes its files under `root`.
fn write_cluster(root: &Path, tree: &mut Tree, req: ClusterRequest) {
    for (p, t) in scaffold::plan(tree, &req).expect("scaffold").files {
        let path = root.join(&p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &t).unwrap();
        tree.insert(p, t);
    }
}

/// A docker cluster request in `bench-rehearse`: management when `mgmt` is None, else its workload.
fn cluster_request(name: &str, mgmt: Option<&str>, version: &str, cidr: u8) -> ClusterRequest {
    ClusterRequest {
        name: name.into(),
        management: mgmt.map(str::to_string),
        provider: "docker".into(),
        docker_backend: mgmt.is_none().then(|| "in-memory".into()),
        namespace: Some("bench-rehearse".into()),
        kubernetes_version: Some(version.into()),
        control_plane_count: mgmt.map(|_| 3),
        pod_cidr: Some(format!("172.{cidr}.0.0/16")),
        service_cidr: Some(format!("10.{}.0.0/16", 100 + cidr)),
        values: mgmt.map(|_| {
            json!({"workerGroups": [{"name": "md-0", "count": 2}, {"name": "md-1", "count": 1}]})
        }),
        worker_count: mgmt.is_none().then_some(1),
        ..Default::default()
    }
}

/// Runs `capstan rehearse` from `base` to `head`; its wall time and JSON report.
fn rehearse_timed(repo: &Path, kubeconfig: &Path, base: &str, head: &str) -> (f64, Value) {
    let out_file = repo.join("../rehearse.json");
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .arg("rehearse")
        .arg(repo)
        .args(["--base", base, "--head", head, "--json-file"])
        .arg(&out_file)
        .arg("--control-plane")
        .arg(kubeconfig)
        .env_remove("KUBECONFIG")
        .output()
        .expect("capstan rehearse");
    let took = started.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "rehearse failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report = serde_json::from_slice(&std::fs::read(&out_file).unwrap()).unwrap();
    (took, report)
}

fn phases(report: &Value) -> String {
    let c = &report["clusters"][0];
    let mut parts = Vec::new();
    if let Some(b) = c["baseSeconds"].as_f64() {
        parts.push(format!("base up {b:.0} s"));
    }
    for s in c["stages"].as_array().into_iter().flatten() {
        let (a, b) = (s["start"].as_f64().unwrap_or(0.0), s["end"].as_f64());
        parts.push(match b {
            Some(b) => format!("{} {:.0} s", s["name"].as_str().unwrap_or("?"), b - a),
            None => format!("{} not ended", s["name"].as_str().unwrap_or("?")),
        });
    }
    parts.push(format!(
        "head {:.0} s, {} machines created, {} deleted, at most {} unavailable",
        c["seconds"].as_f64().unwrap_or(0.0),
        c["machinesCreated"],
        c["machinesDeleted"],
        c["maxUnavailable"]
    ));
    parts.join(", ")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds = support::env_number("CAPSTAN_BENCH_ROUNDS", 1);
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    std::fs::create_dir_all(&repo).unwrap();
    let mut tree = Tree::new();
    write_cluster(
        &repo,
        &mut tree,
        cluster_request("m-bench", None, "1.33", 16),
    );
    write_cluster(
        &repo,
        &mut tree,
        cluster_request("w-up", Some("m-bench"), "1.32", 17),
    );
    bench_git(&repo, &["init", "-q", "-b", "main"]);
    bench_git(&repo, &["add", "-A"]);
    bench_git(&repo, &["commit", "-q", "-m", "base"]);
    // The upgrade.
    bench_git(&repo, &["checkout", "-q", "-b", "upgrade"]);
    let spec = repo.join("clusters/m-bench/workload-clusters/w-up/cluster.yaml");
    let text = std::fs::read_to_string(&spec).unwrap();
    std::fs::write(
        &spec,
        text.replacen(
            "kubernetesVersion: \"1.32\"",
            "kubernetesVersion: \"1.33\"",
            1,
        ),
    )
    .unwrap();
    bench_git(&repo, &["commit", "-q", "-am", "upgrade"]);
    // The creation.
    bench_git(&repo, &["checkout", "-q", "-b", "create", "main"]);
    write_cluster(
        &repo,
        &mut tree,
        cluster_request("w-born", Some("m-bench"), "1.33", 18),
    );
    bench_git(&repo, &["add", "-A"]);
    bench_git(&repo, &["commit", "-q", "-m", "create"]);

    let started = Instant::now();
    let cp = ControlPlane::start_with(StartOptions {
        controllers: true,
        ..Default::default()
    })
    .await
    .expect("control plane with controllers");
    println!(
        "control plane with the Cluster API controllers up in {:.1} s (warm: the build is cached)",
        started.elapsed().as_secs_f64()
    );
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    println!("scenario                                   wall time   phases");
    for round in 1..=rounds {
        for (what, head) in [
            ("3 CP + 2 groups, minor upgrade 1.32→1.33", "upgrade"),
            ("3 CP + 2 groups, creation", "create"),
        ] {
            let (kc, r) = (kubeconfig.clone(), repo.clone());
            let (took, report) =
                tokio::task::spawn_blocking(move || rehearse_timed(&r, &kc, "main", head))
                    .await
                    .unwrap();
            let mark = if took < 180.0 { "under" } else { "OVER" };
            println!(
                "round {round}: {what:<42} {took:>6.1} s   ({mark} the 3 min target) {}",
                phases(&report)
            );
        }
    }
    cp.stop();
}
