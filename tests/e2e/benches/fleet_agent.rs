//! Benchmark (prints figures; not a test): the agent on a scaffolded fleet of N workload clusters
//! (default 1,000; `CAPSTAN_BENCH_CLUSTERS` overrides) against a private local control plane.
//!
//! Prints: cold apply time, no-op reconcile time, API requests per object of the no-op pass (as
//! the API server's audit log counts them), writes of the no-op pass, a one-cluster change
//! applied, and the peak RSS of this process (which is the agent's pipeline plus the fleet).
//!
//! Run: `cargo bench -p capstan-e2e --bench fleet_agent`.

use std::fs;
use std::time::Instant;

use capstan::reconcile::{Options, reconcile};
use capstan_harness::ControlPlane;
use capstan_layout::scaffold::{self, ClusterRequest};
use capstan_layout::{RenderCache, Tree, load_cached};

fn peak_rss_mib() -> f64 {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|k| k.parse::<f64>().ok()).unwrap_or(0.0) / 1024.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::var("CAPSTAN_BENCH_CLUSTERS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let mut tree = Tree::new();
    let write = |tree: &mut Tree, files: Vec<(std::path::PathBuf, String)>| {
        for (p, t) in files {
            let path = root.join(&p);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, &t).unwrap();
            tree.insert(p, t);
        }
    };
    let mgmt = ClusterRequest { name: "mgmt".into(), provider: "docker".into(), pod_cidr: Some("192.168.0.0/16".into()), service_cidr: Some("10.96.0.0/12".into()), ..Default::default() };
    let files = scaffold::plan(&tree, &mgmt).unwrap().files;
    write(&mut tree, files);
    let base = tree.clone();
    for i in 0..n {
        let req = ClusterRequest {
            name: format!("w{i:04}"),
            management: Some("mgmt".into()),
            provider: "docker".into(),
            namespace: Some(format!("team-{}", i % 20)),
            worker_count: Some(2),
            pod_cidr: Some(format!("10.{}.{}.0/24", 128 + i / 256, i % 256)),
            service_cidr: Some(format!("10.{}.{}.0/24", 160 + i / 256, i % 256)),
            ..Default::default()
        };
        let files = scaffold::plan(&base, &req).unwrap().files;
        write(&mut tree, files);
    }
    let mut renders = RenderCache::default();
    let t = Instant::now();
    let fleet = load_cached(&Tree::from_dir(root).unwrap(), &mut renders);
    assert!(!fleet.has_errors());
    let objects: usize = fleet.clusters.iter().map(|c| c.objects.as_ref().map_or(0, |o| o.len())).sum();
    println!("fleet: {} clusters, {objects} objects, loaded and rendered in {:.2}s", fleet.clusters.len(), t.elapsed().as_secs_f64());

    let cp = ControlPlane::start().await.expect("control plane");
    let client = cp.client();
    let opts = Options { revision: "r1".into(), ..Default::default() };

    let t = Instant::now();
    let cold = reconcile(&client, &fleet, &opts).await.unwrap();
    let cold_time = t.elapsed();
    assert!(!cold.has_failures());
    println!("cold apply: {:.1}s ({} writes, {:.0} objects/s)", cold_time.as_secs_f64(), cold.writes, objects as f64 / cold_time.as_secs_f64());

    cp.audit().settle(std::time::Duration::from_millis(500), std::time::Duration::from_secs(10)).await;
    let mark = cp.audit().mark();
    let t = Instant::now();
    let noop = reconcile(&client, &fleet, &opts).await.unwrap();
    assert!(!noop.has_changes());
    let noop_time = t.elapsed();
    cp.audit().settle(std::time::Duration::from_millis(500), std::time::Duration::from_secs(10)).await;
    // The agent's requests (the API server's own lease renewals are not the agent's).
    let events: Vec<_> = cp.audit().events_since(mark).unwrap().into_iter().filter(|e| !e.user.username.starts_with("system:apiserver")).collect();
    let writes = events.iter().filter(|e| e.is_write()).count();
    println!(
        "no-op reconcile: {:.2}s, {} API requests for {objects} objects = {:.4} requests/object (target <= 0.05), {writes} writes",
        noop_time.as_secs_f64(),
        events.len(),
        events.len() as f64 / objects as f64
    );

    // One cluster changes: scale w0000.
    let path = root.join("clusters/mgmt/workload-clusters/w0000/cluster.yaml");
    let text = fs::read_to_string(&path).unwrap().replacen("count: 2", "count: 3", 1);
    fs::write(&path, text).unwrap();
    let t = Instant::now();
    let tree = Tree::from_dir(root).unwrap();
    let read = t.elapsed();
    let fleet = load_cached(&tree, &mut renders);
    let loaded = t.elapsed();
    let change = reconcile(&client, &fleet, &Options { revision: "r2".into(), ..Default::default() }).await.unwrap();
    println!(
        "one-cluster change: {:.2}s in all (read tree {:.2}s, validate + render {:.2}s with {} re-rendered and {} cached, plan + apply {:.2}s), {} writes",
        t.elapsed().as_secs_f64(),
        read.as_secs_f64(),
        (loaded - read).as_secs_f64(),
        renders.misses,
        renders.hits,
        (t.elapsed() - loaded).as_secs_f64(),
        change.writes
    );
    assert_eq!(renders.misses, 1, "exactly the changed cluster is re-rendered");
    println!("peak RSS of the agent process: {:.0} MiB (target <= 100 MiB)", peak_rss_mib());
}
