//! Measures the harness' costs: `cargo run -p capstan-harness --example measure`.
//!
//! Prints the time of `ensure_binaries` (first call in this process, then a second call
//! that must hit the on-disk cache), `crd_files`, and a full `ControlPlane::start` broken
//! down by phase. Point `CAPSTAN_CACHE_DIR` (and `GOCACHE`) at empty directories to measure
//! a cold build.

use std::time::Instant;

use capstan_harness::{ControlPlane, binaries, crd_files, ensure_binaries};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cache root: {}", binaries::cache_root()?.display());
    println!("cache key:  {}", binaries::cache_key()?);

    let t = Instant::now();
    let b = ensure_binaries()?;
    println!(
        "ensure_binaries (first call in this process): {:.1} ms (built: {})",
        t.elapsed().as_secs_f64() * 1000.0,
        b.built
    );
    println!("  {} {}", b.kube_apiserver.display(), b.versions.kubernetes);
    println!("  {} {}", b.etcd.display(), b.versions.etcd);

    let t = Instant::now();
    let out = std::process::Command::new(&b.kube_apiserver)
        .arg("--version")
        .output()?;
    println!(
        "kube-apiserver --version: {} ({:.2}s)",
        String::from_utf8_lossy(&out.stdout).trim(),
        t.elapsed().as_secs_f64()
    );

    let t = Instant::now();
    let files = crd_files()?;
    println!(
        "crd_files: {} CRDs in {:.2}s",
        files.len(),
        t.elapsed().as_secs_f64()
    );

    for i in 1..=2 {
        let t = Instant::now();
        let cp = ControlPlane::start().await?;
        let start = t.elapsed();
        let tm = cp.timings().clone();
        println!(
            "ControlPlane::start #{i}: {:.2}s total (binaries {:.2}s, crd_files {:.2}s, processes ready {:.2}s, {} CRDs established+discoverable {:.2}s)",
            start.as_secs_f64(),
            tm.binaries.as_secs_f64(),
            tm.crd_files.as_secs_f64(),
            tm.processes.as_secs_f64(),
            tm.crd_count,
            tm.crds.as_secs_f64()
        );
        let v = cp.client().apiserver_version().await?;
        println!(
            "  /version: {} etcd: {}",
            v.git_version,
            cp.etcd_version().await?
        );
        let t = Instant::now();
        drop(cp);
        println!("  drop: {:.2}s", t.elapsed().as_secs_f64());
    }
    Ok(())
}
