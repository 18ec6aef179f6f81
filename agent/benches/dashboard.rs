//! Benchmark (prints figures; not a test): the dashboard's pages over a fleet of N workload
//! clusters (100, 1,000 and 3,000, each in a process of its own so that its memory is its own;
//! `CAPSTAN_BENCH_CLUSTERS` runs one size), each with a status object, a
//! control plane, two MachineDeployments and five Machines in the stores, in five waves.
//!
//! Prints the memory the stores take (VmRSS before and after filling them) and, for each page,
//! the time to answer it (the median of 20 requests through the router, as a browser's would
//! arrive) and its size: the fleet (all rows, the first 500 listed), the fleet filtered to one
//! phase, the waves page and one cluster's page. The stores are filled directly (what the
//! watches would hold after their first lists); rendering is the part measured.
//!
//! Run: `cargo bench -p capstan --bench dashboard`.

use std::time::{Duration, Instant};

use capstan::dashboard::Watched;
use capstan::dashboard::server::{Dashboard, router};
use capstan::status::{ManagedCluster, ManagedClusterSpec, ManagedClusterStatus, Phase};
use kube::api::DynamicObject;
use kube::discovery::ApiResource;
use serde_json::json;
use tower::ServiceExt;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn ar(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: "v1beta2".into(),
        api_version: format!("{group}/v1beta2"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn object(v: serde_json::Value) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

fn main() {
    let Some(n) = std::env::var("CAPSTAN_BENCH_CLUSTERS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    else {
        for n in [100, 1000, 3000] {
            let status = std::process::Command::new(std::env::current_exe().unwrap())
                .args(std::env::args_os().skip(1))
                .env("CAPSTAN_BENCH_CLUSTERS", n.to_string())
                .status()
                .unwrap();
            assert!(status.success(), "the run over {n} clusters failed");
        }
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let before = rss_kib();
    let phases = [
        Phase::Ready,
        Phase::Ready,
        Phase::Ready,
        Phase::Upgrading,
        Phase::Failed,
    ];
    let mut statuses = Vec::new();
    let (mut kcps, mut mds, mut machines) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let name = format!("w-{i:05}");
        let mut mc = ManagedCluster::new(
            &name,
            ManagedClusterSpec {
                management: "mgmt".into(),
                directory: format!("clusters/mgmt/workload-clusters/{name}"),
            },
        );
        mc.status = Some(ManagedClusterStatus {
            phase: Some(phases[i % phases.len()]),
            message: format!(
                "clusters/mgmt/workload-clusters/{name}/cluster.yaml:12: something to say about {name}"
            ),
            last_applied_revision: "0123456789abcdef0123456789abcdef01234567".into(),
            wave: Some(format!("{}/5 wave-{}", i % 5 + 1, i % 5 + 1)),
            ..Default::default()
        });
        statuses.push(mc);
        let ns = format!("t-{i}");
        kcps.push(object(json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
            "metadata": {"name": name, "namespace": ns}, "spec": {"replicas": 3, "version": "v1.34.1"},
            "status": {"upToDateReplicas": 3, "availableReplicas": 3}})));
        for g in 0..2 {
            mds.push(object(json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
                "metadata": {"name": format!("{name}-md-{g}"), "namespace": ns},
                "spec": {"clusterName": name, "replicas": 1, "template": {"spec": {"version": "v1.34.1"}}},
                "status": {"upToDateReplicas": 1, "availableReplicas": 1}})));
        }
        for m in 0..5 {
            machines.push(object(json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": format!("{name}-m-{m}"), "namespace": ns,
                    "labels": {"cluster.x-k8s.io/cluster-name": name, "cluster.x-k8s.io/deployment-name": format!("{name}-md-{}", m % 2)}},
                "spec": {"version": "v1.34.1"}, "status": {"phase": "Running"}})));
        }
    }
    let watched = Watched::fixed(
        statuses,
        vec![
            (
                "KubeadmControlPlane",
                ar(
                    "controlplane.cluster.x-k8s.io",
                    "KubeadmControlPlane",
                    "kubeadmcontrolplanes",
                ),
                kcps,
            ),
            (
                "MachineDeployment",
                ar(
                    "cluster.x-k8s.io",
                    "MachineDeployment",
                    "machinedeployments",
                ),
                mds,
            ),
            (
                "Machine",
                ar("cluster.x-k8s.io", "Machine", "machines"),
                machines,
            ),
        ],
    );
    let after = rss_kib();
    let app = router(Dashboard::new(watched, None, None, None));
    println!(
        "dashboard over {n} clusters: stores {:.1} MiB (VmRSS {:.1} → {:.1} MiB)",
        (after.saturating_sub(before)) as f64 / 1024.0,
        before as f64 / 1024.0,
        after as f64 / 1024.0
    );
    for page in ["/", "/?phase=Failed", "/waves", "/clusters/w-00042"] {
        let mut times = Vec::new();
        let mut bytes = 0;
        for _ in 0..20 {
            let started = Instant::now();
            let body = rt.block_on(async {
                let r = app
                    .clone()
                    .oneshot(
                        axum::http::Request::builder()
                            .uri(page)
                            .body(axum::body::Body::empty())
                            .unwrap(),
                    )
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200, "{page}");
                axum::body::to_bytes(r.into_body(), 1 << 30).await.unwrap()
            });
            times.push(started.elapsed());
            bytes = body.len();
        }
        times.sort();
        let median: Duration = times[times.len() / 2];
        println!(
            "  {page:<20} {:>8.1} ms median, {:>8.1} KiB",
            median.as_secs_f64() * 1000.0,
            bytes as f64 / 1024.0
        );
    }
}
