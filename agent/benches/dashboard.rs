//! Benchmark (prints figures; not a test): the dashboard's pages over a fleet of N workload
//! clusters (100, 1,000 and 3,000, each in a process of its own so that its memory is its own;
//! `CAPSTAN_BENCH_CLUSTERS` runs one size), each with a status object (its inventory of fifteen
//! objects), a control plane, two MachineDeployments and five Machines in the stores, in five
//! waves.
//!
//! Prints the memory the stores take (VmRSS before and after filling them) and, for each page,
//! the time to answer it (the median of 20 requests through the router, as a browser's would
//! arrive) and its size: the fleet (all rows, the first 500 listed), the fleet filtered to one
//! phase, the waves page and one cluster's page. The stores are filled directly, one object at a
//! time as a watch's list delivers them (objects shaped like the API server's — a control
//! plane's kubeadm configuration, conditions, addresses — kept as the watches keep them);
//! rendering is the part measured. The agent's RSS with the dashboard on, against the real API
//! server, is `fleet_agent`'s (`CAPSTAN_BENCH_DASHBOARD`).
//!
//! Run: `cargo bench -p capstan --bench dashboard`.

use std::time::{Duration, Instant};

use capstan::dashboard::Watched;
use capstan::dashboard::routes::router;
use capstan::dashboard::server::Dashboard;
use capstan::status::{ManagedCluster, ManagedClusterSpec, ManagedClusterStatus, Phase};
use kube::api::DynamicObject;
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

/// Metadata as the API server returns it (labels, owner, finalizer, annotations).
fn meta(name: &str, ns: &str, cluster: &str, deployment: Option<&str>) -> serde_json::Value {
    let mut labels = json!({"cluster.x-k8s.io/cluster-name": cluster, "capstan.dev/cluster": cluster, "capstan.dev/management": "mgmt"});
    if let Some(d) = deployment {
        labels["cluster.x-k8s.io/deployment-name"] = d.into();
        labels["cluster.x-k8s.io/set-name"] = format!("{d}-5f6d7c8b9").into();
    }
    json!({"name": name, "namespace": ns, "uid": "6f1c2b7e-3d4a-4e5f-9a8b-7c6d5e4f3a2b", "resourceVersion": "123456",
        "generation": 2, "creationTimestamp": "2026-11-01T10:00:00Z", "labels": labels,
        "annotations": {"capstan.dev/hash": "sha256-0123456789abcdef0123456789abcdef"},
        "finalizers": ["cluster.cluster.x-k8s.io"],
        "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": cluster, "uid": "0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d", "controller": true}]})
}

/// `n` conditions as Cluster API writes them.
fn conditions(n: usize) -> Vec<serde_json::Value> {
    (0..n)
        .map(|c| json!({"type": format!("Condition{c}"), "status": "True", "reason": "Ready",
            "message": "all good: the machine's node is healthy and every check passed", "lastTransitionTime": "2026-11-01T10:05:00Z", "observedGeneration": 2}))
        .collect()
}

/// An object as the API server sends it.
fn object(v: serde_json::Value) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

/// A workload cluster's inventory as capstan records it: its fifteen rendered objects.
fn inventory(name: &str) -> Vec<capstan::plan::ObjectRef> {
    let kinds = [
        ("anywhere.eks.amazonaws.com/v1alpha1", "Cluster"),
        (
            "anywhere.eks.amazonaws.com/v1alpha1",
            "VSphereDatacenterConfig",
        ),
        (
            "anywhere.eks.amazonaws.com/v1alpha1",
            "VSphereMachineConfig",
        ),
        (
            "anywhere.eks.amazonaws.com/v1alpha1",
            "VSphereMachineConfig",
        ),
        ("cluster.x-k8s.io/v1beta2", "Cluster"),
        ("infrastructure.cluster.x-k8s.io/v1beta1", "VSphereCluster"),
        (
            "controlplane.cluster.x-k8s.io/v1beta2",
            "KubeadmControlPlane",
        ),
        (
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "VSphereMachineTemplate",
        ),
        ("cluster.x-k8s.io/v1beta2", "MachineDeployment"),
        ("cluster.x-k8s.io/v1beta2", "MachineDeployment"),
        (
            "bootstrap.cluster.x-k8s.io/v1beta2",
            "KubeadmConfigTemplate",
        ),
        (
            "bootstrap.cluster.x-k8s.io/v1beta2",
            "KubeadmConfigTemplate",
        ),
        (
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "VSphereMachineTemplate",
        ),
        (
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "VSphereMachineTemplate",
        ),
        ("addons.cluster.x-k8s.io/v1alpha1", "HelmChartProxy"),
    ];
    kinds
        .iter()
        .enumerate()
        .map(|(k, (api_version, kind))| capstan::plan::ObjectRef {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: format!("t-{name}"),
            name: format!("{name}-{k}"),
            hash: "sha256-0123456789abcdef0123456789abcdef".into(),
            generation: 1,
            fields: "sha256-fedcba9876543210fedcba9876543210".into(),
        })
        .collect()
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
    let status = |i: usize| {
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
            inventory: inventory(&name),
            ..Default::default()
        });
        mc
    };
    // As the API server has them (managed fields aside), made one at a time as a watch's list
    // delivers them: the stores keep what the pages read.
    let kcp = |i: usize| {
        let name = format!("w-{i:05}");
        let ns = format!("t-{i}");
        object(
            json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
            "metadata": meta(&name, &ns, &name, None),
            "spec": {"replicas": 3, "version": "v1.34.1",
                "machineTemplate": {"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "VSphereMachineTemplate", "name": format!("{name}-control-plane-1a2b3c")}}},
                "kubeadmConfigSpec": {"clusterConfiguration": {"apiServer": {"extraArgs": [{"name": "audit-log-maxage", "value": "30"}, {"name": "profiling", "value": "false"}]},
                    "controllerManager": {"extraArgs": [{"name": "profiling", "value": "false"}]}, "imageRepository": "public.ecr.aws/eks-distro/kubernetes"},
                    "files": (0..6).map(|f| json!({"path": format!("/etc/kubernetes/file-{f}.yaml"), "owner": "root:root", "content": "x".repeat(600)})).collect::<Vec<_>>(),
                    "preKubeadmCommands": ["hostnamectl set-hostname '{{ ds.meta_data.hostname }}'", "echo '127.0.0.1 localhost' >> /etc/hosts"],
                    "users": [{"name": "capv", "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKZs2mOeKJsYFq0dG8dM0aN7cXgk7yVqTq9E0yM2yZ5D admin"], "sudo": "ALL=(ALL) NOPASSWD:ALL"}]}},
            "status": {"replicas": 3, "readyReplicas": 3, "upToDateReplicas": 3, "availableReplicas": 3, "observedGeneration": 2, "version": "v1.34.1",
                "initialization": {"controlPlaneInitialized": true}, "conditions": conditions(9)}}),
        )
    };
    let md = |j: usize| {
        let (i, g) = (j / 2, j % 2);
        let name = format!("w-{i:05}");
        let ns = format!("t-{i}");
        let md = format!("{name}-md-{g}");
        object(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": meta(&md, &ns, &name, None),
            "spec": {"clusterName": name, "replicas": 1, "selector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": name, "cluster.x-k8s.io/deployment-name": md}},
                "rollout": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}},
                "template": {"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": name, "cluster.x-k8s.io/deployment-name": md}},
                    "spec": {"clusterName": name, "version": "v1.34.1",
                        "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": format!("{md}-4d5e6f")}},
                        "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "VSphereMachineTemplate", "name": format!("{md}-7a8b9c")}}}},
            "status": {"replicas": 1, "readyReplicas": 1, "upToDateReplicas": 1, "availableReplicas": 1, "observedGeneration": 1,
                "selector": format!("cluster.x-k8s.io/cluster-name={name},cluster.x-k8s.io/deployment-name={md}"), "conditions": conditions(8)}}),
        )
    };
    let machine = |j: usize| {
        let (i, m) = (j / 5, j % 5);
        let name = format!("w-{i:05}");
        let ns = format!("t-{i}");
        let machine = format!("{name}-m-{m}");
        let md = format!("{name}-md-{}", m % 2);
        object(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": meta(&machine, &ns, &name, Some(&md)),
            "spec": {"clusterName": name, "version": "v1.34.1", "providerID": format!("vsphere://4237{i:05}-{m}"),
                "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": machine}, "dataSecretName": machine},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "VSphereMachine", "name": machine}},
            "status": {"phase": "Running", "observedGeneration": 2, "nodeRef": {"name": machine},
                "addresses": [{"type": "InternalIP", "address": format!("10.{}.{}.{m}", i / 250, i % 250)}, {"type": "Hostname", "address": machine}],
                "nodeInfo": {"kubeletVersion": "v1.34.1", "kernelVersion": "6.8.0-1015", "osImage": "Bottlerocket OS 1.30.0", "containerRuntimeVersion": "containerd://1.7.27", "architecture": "amd64"},
                "conditions": conditions(10)}}),
        )
    };
    let watched = Watched::fixed(
        (0..n).map(status),
        vec![
            ("KubeadmControlPlane", Box::new((0..n).map(kcp))),
            ("MachineDeployment", Box::new((0..2 * n).map(md))),
            ("Machine", Box::new((0..5 * n).map(machine))),
        ],
    );
    let after = rss_kib();
    println!(
        "dashboard over {n} clusters: stores {:.1} MiB (VmRSS {:.1} → {:.1} MiB)",
        (after.saturating_sub(before)) as f64 / 1024.0,
        before as f64 / 1024.0,
        after as f64 / 1024.0
    );
    pages(&rt, "its own watches (capstan dashboard)", watched);

    // Served by the agent: the same fleet in the agent's cache (records, and the facts of every
    // object a workload cluster renders to: fifteen, of which the control plane and the
    // MachineDeployments carry rollout facts), Machines watched by the dashboard.
    let live = std::sync::Arc::new(capstan::live::Live::default());
    for i in 0..n {
        let mc = status(i);
        let name = mc.metadata.name.clone().unwrap();
        live.set_record(&name, Some(capstan::status::Recorded::from_object(&mc)));
        let mut objects = live.objects_mut();
        for o in std::iter::once(kcp(i)).chain((0..2).map(|g| md(2 * i + g))) {
            let v = serde_json::to_value(&o).unwrap();
            let group = v["apiVersion"]
                .as_str()
                .unwrap()
                .split('/')
                .next()
                .unwrap()
                .to_string();
            let kind = v["kind"].as_str().unwrap().to_string();
            objects.insert(
                capstan::live::key_of(&group, &kind, &o.metadata),
                capstan::live::LiveObject::from_value(&v),
            );
        }
        for r in inventory(&name).iter().skip(3) {
            objects.insert(
                r.key(),
                capstan::live::LiveObject {
                    cluster: Some(name.clone().into()),
                    generation: 1,
                    ..Default::default()
                },
            );
        }
    }
    let watched = Watched::fixed_shared(live, Box::new((0..5 * n).map(machine)));
    pages(
        &rt,
        "the agent's cache (capstan run --dashboard-addr)",
        watched,
    );
}

/// Times each page over `watched` (the median of 20 requests through the router, as a
/// browser's would arrive) and prints it with its size.
fn pages(rt: &tokio::runtime::Runtime, source: &str, watched: Watched) {
    println!("  read from {source}:");
    // As `capstan dashboard` serves it, each request bringing its secret.
    let local =
        capstan::dashboard::access::Local::with_token(([127, 0, 0, 1], 8480).into(), "bench");
    let app = router(Dashboard::new(
        watched,
        capstan::dashboard::access::Access::Local(local),
        None,
        None,
    ));
    for page in ["/", "/?phase=Failed", "/waves", "/clusters/w-00042"] {
        let mut times = Vec::new();
        let mut bytes = 0;
        let mut bytes_of_last = axum::body::Bytes::new();
        for _ in 0..20 {
            let started = Instant::now();
            let body = rt.block_on(async {
                let r = app
                    .clone()
                    .oneshot(
                        axum::http::Request::builder()
                            .uri(page)
                            .header("host", "127.0.0.1:8480")
                            .header("authorization", "Bearer bench")
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
            bytes_of_last = body;
        }
        if page.starts_with("/clusters/") {
            // What is timed is the whole page: its groups and their machines.
            let html = String::from_utf8_lossy(&bytes_of_last);
            for part in ["w-00042-md-1", "w-00042-m-4", "v1.34.1"] {
                assert!(html.contains(part), "{page} lacks {part}: {html}");
            }
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
