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
//! `capstan backup --dir D` then runs as its own process, with the admin kubeconfig, twice:
//! unencrypted (`--backup-plaintext`) and encrypted with age to two recipients. Prints for
//! each: objects and bytes written, the time it took, its peak RSS (VmHWM, sampled every 20 ms
//! until it exits), beside the target: under half the agent Deployment's memory limit
//! (`install::manifests::MEMORY_LIMIT`), so a backup cannot be what pushes the agent over it;
//! and how long reading it back takes (decrypting, parsing: what a restore does before its
//! first write); in `CAPSTAN_BENCH_ROUNDS` alternating rounds (default 2: the first warms the
//! API server). Then `capstan restore` of the last round's onto a fresh API server each, timed
//! (`CAPSTAN_BENCH_RESTORE=0` skips it).
//!
//! Run: `cargo bench -p capstan --bench backup` (and `CAPSTAN_BENCH_CLUSTERS=3000`).

mod support;

use std::time::{Duration, Instant};

use capstan_harness::ControlPlane;
use serde_json::Value;
use support::{apply_all, vm, write_fleet};

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
    support::apply_namespaces(
        &client,
        &resolver,
        fleet.rendered.iter().flat_map(|(_, objs)| objs.iter()),
    )
    .await;
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
        .flat_map(|(i, (name, _))| support::cluster_api_secrets(name, &format!("team-{}", i % 20)))
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

    // The backup, as its own process: unencrypted (chosen), then encrypted with age to two
    // recipients (an admin's and a break-glass key, as production would have).
    let keys = [
        age::x25519::Identity::generate(),
        age::x25519::Identity::generate(),
    ];
    let identity = tmp.path().join("identity.txt");
    std::fs::write(
        &identity,
        format!(
            "{}\n",
            age::secrecy::ExposeSecret::expose_secret(&keys[0].to_string())
        ),
    )
    .unwrap();
    let limit: f64 = capstan::install::manifests::MEMORY_LIMIT
        .trim_end_matches("Mi")
        .parse()
        .unwrap();
    let modes = [
        ("plaintext", vec!["--backup-plaintext".to_string()]),
        (
            "age",
            keys.iter()
                .flat_map(|k| ["--backup-recipient".to_string(), k.to_public().to_string()])
                .collect(),
        ),
    ];
    // Alternating rounds (the first list of a kind warms the API server's caches for the
    // next): the figures to compare are the later rounds'.
    let rounds = support::env_number("CAPSTAN_BENCH_ROUNDS", 2);
    let mut written = Vec::new();
    for (round, (mode, args)) in (0..rounds).flat_map(|r| modes.iter().map(move |m| (r, m))) {
        let mode = *mode;
        let dir = tmp.path().join(format!("backups-{mode}-{round}"));
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_capstan"));
        cmd.arg("backup").arg("--dir").arg(&dir).args(args.iter());
        cmd.arg("--kubeconfig").arg(cp.kubeconfig_path());
        let (took, peak) = measured(cmd, "capstan backup");
        let backup = std::fs::read_dir(&dir)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let manifest: Value =
            serde_json::from_slice(&std::fs::read(backup.join("manifest.json")).unwrap()).unwrap();
        let file = manifest["encryption"]["file"].as_str().unwrap();
        let bytes = std::fs::metadata(backup.join(file)).unwrap().len();
        let count = manifest["objects"].as_u64().unwrap();
        assert!(
            count as usize >= seeded,
            "the backup holds {count} objects, {seeded} were seeded"
        );
        // Reading it back as a restore does before its first write (decrypted, parsed whole).
        let ids = match mode {
            "age" => capstan::backup::Identities::from(keys[0].clone()),
            _ => capstan::backup::Identities::none(),
        };
        let started = Instant::now();
        let read = capstan::backup::read(&backup, &ids).unwrap();
        let read_took = started.elapsed();
        assert_eq!(read.len() as u64, count);
        drop(read);
        println!(
            "round {round}: capstan backup ({mode}): {count} objects, {:.1} MiB ({bytes} bytes) in {file}, written in {:.2} s; peak RSS (VmHWM) {peak:.1} MiB (target: under {:.0} MiB, half the Deployment's {limit:.0} MiB limit); read back (decrypted, parsed) in {:.2} s",
            bytes as f64 / (1024.0 * 1024.0),
            took.as_secs_f64(),
            limit / 2.0,
            read_took.as_secs_f64(),
        );
        if round + 1 == rounds {
            written.push((mode, backup, count));
        }
    }

    // `capstan restore` of each onto a fresh API server of its own (CAPI and EKS-A CRDs
    // installed, as an operator would before restoring), unless CAPSTAN_BENCH_RESTORE=0.
    if support::env_number("CAPSTAN_BENCH_RESTORE", 1) == 0 {
        return;
    }
    for (mode, backup, count) in written {
        let target = ControlPlane::start().await.expect("control plane");
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_capstan"));
        cmd.arg("restore").arg("--from").arg(&backup);
        if mode == "age" {
            cmd.arg("--identity").arg(&identity);
        }
        cmd.arg("--kubeconfig").arg(target.kubeconfig_path());
        let (took, peak) = measured(cmd, "capstan restore");
        println!(
            "capstan restore ({mode}): {count} objects onto a fresh API server in {:.1} s; peak RSS (VmHWM) {peak:.1} MiB",
            took.as_secs_f64(),
        );
    }
}

/// Runs `cmd` to its end (stdout discarded), sampling its peak RSS every 20 ms: how long it
/// took and that peak (MiB). Panics when it fails.
fn measured(mut cmd: std::process::Command, what: &str) -> (Duration, f64) {
    let started = Instant::now();
    let mut child = cmd.stdout(std::process::Stdio::null()).spawn().unwrap();
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
    assert!(status.success(), "{what} failed");
    (started.elapsed(), peak)
}
