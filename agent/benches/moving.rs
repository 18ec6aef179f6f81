//! Benchmark (prints figures; not a test): `capstan move` of N workload clusters between two
//! local API servers (default N = 100 then 1,000; `CAPSTAN_BENCH_CLUSTERS=100,1000` sets the
//! list).
//!
//! Per N: two private control planes (the upstream CRDs installed). The source holds what a
//! scaffolded docker fleet renders, applied as capstan applies it, plus the Secrets Cluster API
//! writes for a running cluster (`support::cluster_api_secrets`). The statuses a settled
//! cluster reports are written too: the Cluster `Available`, everything observed. The move
//! refuses anything less. This is a stand-in for the controllers, which do not run here.
//!
//! `capstan move` of every workload cluster then runs as its own process. Printed:
//! - the objects moved and the wall time;
//! - objects per second, beside the target API server's raw create rate measured in the same
//!   run: ConfigMaps of about the same size, created 32 at a time with kube directly;
//! - the mover's peak RSS (VmHWM, sampled every 20 ms).
//!
//! `clusterctl move` is not run beside it: it needs clusterctl's provider inventory (`clusterctl
//! init` on both clusters, which installs the controllers through images), which cannot be made
//! here.
//!
//! Run: `cargo bench -p capstan --bench moving`.

mod support;

use std::time::{Duration, Instant};

use capstan_harness::ControlPlane;
use futures::StreamExt;
use serde_json::{Value, json};
use support::{apply_all, vm, write_fleet};

/// The status a settled object reports (a stand-in for its controller's): observed, and for a
/// Cluster, Available.
fn settled_status(o: &Value) -> Option<Value> {
    let kind = o["kind"].as_str()?;
    let api_version = o["apiVersion"].as_str()?;
    let status = match kind {
        "Cluster" if api_version.starts_with("cluster.x-k8s.io/") => {
            json!({"observedGeneration": 1,
            "conditions": [{"type": "Available", "status": "True", "reason": "Available", "message": "",
                "lastTransitionTime": "2026-12-01T00:00:00Z"}]})
        }
        "KubeadmControlPlane" | "MachineDeployment" => json!({"observedGeneration": 1}),
        _ => return None,
    };
    Some(json!({"apiVersion": api_version, "kind": kind,
        "metadata": {"name": o["metadata"]["name"], "namespace": o["metadata"]["namespace"]},
        "status": status}))
}

/// Runs `cmd` to its end, sampling its peak RSS every 20 ms: how long it took, the peak (MiB)
/// and its stdout.
fn run_measured(mut cmd: std::process::Command) -> (Duration, f64, String) {
    let started = Instant::now();
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut peak = 0.0f64;
    loop {
        let hwm = vm(pid, "VmHWM:");
        if hwm > 0.0 {
            peak = hwm;
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "capstan move failed");
    (
        started.elapsed(),
        peak,
        String::from_utf8_lossy(&out.stdout).to_string(),
    )
}

/// The target's raw create rate: `n` ConfigMaps of `bytes` each, 32 at a time (objects/s).
async fn raw_create_rate(client: &kube::Client, n: usize, bytes: usize) -> f64 {
    use k8s_openapi::api::core::v1::ConfigMap;
    let ns = "raw-create";
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    namespaces
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), ns);
    let payload = "x".repeat(bytes);
    let started = Instant::now();
    let made = futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let cm: ConfigMap = serde_json::from_value(
                json!({"metadata": {"name": format!("raw-{i}")}, "data": {"v": payload}}),
            )
            .unwrap();
            async move { api.create(&Default::default(), &cm).await }
        })
        .buffer_unordered(32)
        .filter(|r| futures::future::ready(r.is_ok()))
        .count()
        .await;
    assert_eq!(made, n);
    n as f64 / started.elapsed().as_secs_f64()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let sizes: Vec<usize> = std::env::var("CAPSTAN_BENCH_CLUSTERS")
        .unwrap_or_else(|_| "100,1000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("CAPSTAN_BENCH_CLUSTERS: numbers"))
        .collect();
    for n in sizes {
        one(n).await;
    }
}

async fn one(n: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = write_fleet(&tmp.path().join("fleet"), n);
    let (source, target) = (
        ControlPlane::start().await.expect("source"),
        ControlPlane::start().await.expect("target"),
    );
    let client = source.client();
    let resolver = capstan::k8s::Resolver::new(client.clone()).await.unwrap();
    let started = Instant::now();
    let workloads: Vec<&(String, Vec<Value>)> =
        fleet.rendered.iter().filter(|(c, _)| c != "mgmt").collect();
    let objects: Vec<&Value> = workloads.iter().flat_map(|(_, o)| o.iter()).collect();
    support::apply_namespaces(&client, &resolver, objects.iter().copied()).await;
    assert_eq!(
        apply_all(&client, &resolver, objects.iter().copied()).await,
        objects.len()
    );
    let mut statuses = 0;
    for o in &objects {
        if let Some(s) = settled_status(o) {
            let ns = o["metadata"]["namespace"].as_str().unwrap();
            let name = o["metadata"]["name"].as_str().unwrap();
            let (ar, _) = resolver
                .resolve(
                    o["apiVersion"].as_str().unwrap(),
                    o["kind"].as_str().unwrap(),
                )
                .await
                .unwrap();
            let api: kube::Api<kube::api::DynamicObject> =
                kube::Api::namespaced_with(client.clone(), ns, &ar);
            capstan::write::apply_status(&api, name, &capstan::write::Apply::by("stand-in"), &s)
                .await
                .unwrap();
            statuses += 1;
        }
    }
    let secrets: Vec<Value> = workloads
        .iter()
        .flat_map(|(name, objs)| {
            let ns = objs
                .iter()
                .find_map(|o| o.pointer("/metadata/namespace").and_then(Value::as_str))
                .unwrap()
                .to_string();
            support::cluster_api_secrets(name, &ns)
        })
        .collect();
    assert_eq!(
        apply_all(&client, &resolver, secrets.iter()).await,
        secrets.len()
    );
    println!(
        "source: {} workload clusters, {} rendered objects ({statuses} statuses) and {} Secrets seeded in {:.1} s",
        workloads.len(),
        objects.len(),
        secrets.len(),
        started.elapsed().as_secs_f64()
    );

    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_capstan"));
    cmd.arg("move")
        .arg("--kubeconfig")
        .arg(source.kubeconfig_path())
        .arg("--to")
        .arg(target.kubeconfig_path());
    for (name, objs) in &workloads {
        let ns = objs
            .iter()
            .find_map(|o| o.pointer("/metadata/namespace").and_then(Value::as_str))
            .unwrap();
        cmd.arg("--cluster").arg(format!("{ns}/{name}"));
    }
    let (took, peak, out) = run_measured(cmd);
    let created: usize = out
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("`moved: N created …`");
    let raw = raw_create_rate(&target.client(), 2_000, 2_000).await;
    println!(
        "capstan move of {n} clusters: {created} objects created in the target and deleted at the source in {:.1} s ({:.0} objects/s moved; the target's raw create rate in this run: {raw:.0} objects/s, 32 at a time); peak RSS (VmHWM) {peak:.1} MiB",
        took.as_secs_f64(),
        created as f64 / took.as_secs_f64(),
    );
    source.stop();
    target.stop();
}
