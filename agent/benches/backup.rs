//! Benchmark (prints figures; not a test): `capstan backup` of a management cluster holding a
//! fleet of N workload clusters (default 1,000; `CAPSTAN_BENCH_CLUSTERS` overrides), what the
//! agent writes before its management cluster upgrades itself.
//!
//! The management cluster is a private local control plane. It holds what the fleet renders
//! (every Cluster API and EKS Anywhere object of a scaffolded docker fleet, applied as capstan
//! applies them) and, per workload cluster, the Secrets Cluster API writes for a running
//! cluster — its CA, etcd CA, service-account keys, front-proxy CA, kubeconfig and one
//! bootstrap-data Secret per machine (three machines) — with contents of their real sizes
//! (random bytes, base64: what counts here is volume, not validity). No controller runs.
//!
//! `capstan backup --dir D` then runs as its own process, with the admin kubeconfig. Prints:
//! objects and bytes written, the time it took, and its peak RSS (VmHWM, sampled every 20 ms
//! until it exits), beside the target: under half the agent Deployment's memory limit
//! (`install::manifests::MEMORY_LIMIT`), so a backup cannot be what pushes the agent over it.
//!
//! Run: `cargo bench -p capstan --bench backup` (and `CAPSTAN_BENCH_CLUSTERS=3000`).

mod support;

use std::time::{Duration, Instant};

use capstan_harness::ControlPlane;
use futures::StreamExt;
use serde_json::{Value, json};
use support::{vm, write_fleet};

/// Secrets of one running cluster: (name suffix, [(key, bytes)]).
fn secrets_of(cluster: &str) -> Vec<(String, Vec<(&'static str, usize)>)> {
    let cert = [("tls.crt", 1_200), ("tls.key", 1_700)];
    let mut out = vec![
        (format!("{cluster}-ca"), cert.to_vec()),
        (format!("{cluster}-etcd"), cert.to_vec()),
        (format!("{cluster}-proxy"), cert.to_vec()),
        (format!("{cluster}-sa"), cert.to_vec()),
        (format!("{cluster}-kubeconfig"), vec![("value", 5_600)]),
    ];
    for m in 0..3 {
        out.push((format!("{cluster}-bootstrap-{m}"), vec![("value", 9_000)]));
    }
    out
}

/// `len` random bytes as base64 (random characters of its alphabet, a multiple of four).
fn random_base64(len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    (0..len.div_ceil(3) * 4)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect()
}

/// Applies `objects` as capstan does, 32 at a time; how many the server took.
async fn apply_all<'a>(
    client: &kube::Client,
    resolver: &capstan::k8s::Resolver,
    objects: impl Iterator<Item = &'a Value>,
) -> usize {
    futures::stream::iter(objects)
        .map(|o| capstan::k8s::apply::apply_one(client, resolver, o, false))
        .buffer_unordered(32)
        .filter(|r| futures::future::ready(r.is_ok()))
        .count()
        .await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = support::env_number("CAPSTAN_BENCH_CLUSTERS", 1000);
    let tmp = tempfile::tempdir().unwrap();
    let fleet = write_fleet(&tmp.path().join("fleet"), n);
    let cp = ControlPlane::start().await.expect("control plane");
    let client = cp.client();
    let resolver = capstan::k8s::Resolver::new(client.clone()).await.unwrap();

    // What the fleet renders, applied as capstan applies it (namespaces first).
    let started = Instant::now();
    let namespaces: std::collections::BTreeSet<String> = fleet
        .rendered
        .iter()
        .flat_map(|(_, objs)| objs.iter())
        .filter_map(|o| o.pointer("/metadata/namespace").and_then(Value::as_str))
        .map(str::to_string)
        .collect();
    for ns in &namespaces {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        capstan::k8s::apply::apply_one(&client, &resolver, &obj, false)
            .await
            .unwrap();
    }
    let objects: Vec<&Value> = fleet
        .rendered
        .iter()
        .flat_map(|(_, objs)| objs.iter())
        .collect();
    let applied = apply_all(&client, &resolver, objects.iter().copied()).await;
    assert_eq!(applied, objects.len(), "every rendered object applied");

    // Cluster API's Secrets of every workload cluster.
    let secrets: Vec<Value> = fleet
        .rendered
        .iter()
        .filter(|(name, _)| name != "mgmt")
        .enumerate()
        .flat_map(|(i, (name, _))| {
            let ns = format!("team-{}", i % 20);
            secrets_of(name).into_iter().map(move |(s, keys)| {
                let data: serde_json::Map<String, Value> = keys
                    .into_iter()
                    .map(|(k, len)| (k.to_string(), json!(random_base64(len))))
                    .collect();
                json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": s, "namespace": ns,
                        "labels": {"cluster.x-k8s.io/cluster-name": name}},
                    "type": "cluster.x-k8s.io/secret", "data": data})
            })
        })
        .collect();
    let made = apply_all(&client, &resolver, secrets.iter()).await;
    assert_eq!(made, secrets.len(), "every Secret created");
    let seeded = objects.len() + secrets.len();
    drop(secrets);
    println!(
        "management cluster: {n} workload clusters, {} rendered objects and {made} Secrets applied in {:.1} s",
        objects.len(),
        started.elapsed().as_secs_f64()
    );

    // The backup, as its own process.
    let dir = tmp.path().join("backups");
    let started = Instant::now();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_capstan"))
        .arg("backup")
        .arg("--dir")
        .arg(&dir)
        .arg("--kubeconfig")
        .arg(cp.kubeconfig_path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut peak = 0.0f64;
    let status = loop {
        // The high-water mark only grows: the last reading before the exit is the peak, up to
        // what the final 20 ms added.
        let hwm = vm(pid, "VmHWM:");
        if hwm > 0.0 {
            peak = hwm;
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = started.elapsed();
    assert!(status.success(), "capstan backup failed");
    let written = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(written.join("manifest.json")).unwrap()).unwrap();
    let bytes = std::fs::metadata(written.join("objects.json"))
        .unwrap()
        .len();
    let count = manifest["objects"].as_u64().unwrap();
    assert!(
        count as usize >= seeded,
        "the backup holds {count} objects, {seeded} were seeded"
    );
    let limit: f64 = capstan::install::manifests::MEMORY_LIMIT
        .trim_end_matches("Mi")
        .parse()
        .unwrap();
    println!(
        "capstan backup: {count} objects, {:.1} MiB written in {:.1} s; peak RSS (VmHWM) {peak:.1} MiB (target: under {:.0} MiB, half the Deployment's {limit:.0} MiB limit)",
        bytes as f64 / (1024.0 * 1024.0),
        took.as_secs_f64(),
        limit / 2.0,
    );
}
