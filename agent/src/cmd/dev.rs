//! `capstan dev up|down`: a local management cluster (kube-apiserver + etcd built from Go
//! modules, upstream Cluster API and EKS Anywhere CRDs installed, the Cluster API controllers
//! running with CAPD's in-memory backend standing in for machines, capstan's ManagedCluster CRD
//! installed) for the quick start.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use capstan_harness::{ControlPlane, StartOptions};

use crate::cli::DevCommand;

fn default_dir() -> anyhow::Result<PathBuf> {
    let base = match std::env::var_os("CAPSTAN_CACHE_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?)
            .join(".cache/capstan"),
    };
    Ok(base.join("dev"))
}

/// Runs `dev up` or `dev down`.
pub fn run(cmd: DevCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        DevCommand::Up {
            dir,
            no_controllers,
        } => {
            let dir = dir.map(Ok).unwrap_or_else(default_dir)?;
            // Idempotent, so the quick start can be run again: a running one is reused.
            if let Some(state) = ControlPlane::persistent_state(&dir)?
                && state.is_running()
            {
                eprintln!(
                    "a local management cluster is already running from {} (Kubernetes {})",
                    dir.display(),
                    state.kubernetes_version
                );
                println!("{}", state.endpoints.kubeconfig.display());
                return Ok(ExitCode::SUCCESS);
            }
            let started = Instant::now();
            eprintln!(
                "starting a local management cluster in {} (the first run builds kube-apiserver, etcd and the controllers: several minutes)",
                dir.display()
            );
            let opts = StartOptions {
                controllers: !no_controllers,
                timeout: Duration::from_secs(300),
                ..Default::default()
            };
            let state = super::runtime()?.block_on(async {
                let state = ControlPlane::start_persistent_with(&dir, opts).await?;
                // capstan's own CRD, so the agent can run with this admin kubeconfig (a
                // production install is `capstan install`).
                let conn = crate::k8s::connect(Some(&state.endpoints.kubeconfig), None).await?;
                crate::install::install_crd(&conn.client).await?;
                crate::install::install_tenancy(
                    &conn.client,
                    &crate::install::rbac::rules(),
                    Duration::from_secs(60),
                )
                .await?;
                anyhow::Ok(state)
            })?;
            let controllers = if state.controllers.is_empty() {
                "no controllers".to_string()
            } else {
                format!(
                    "Cluster API {} controllers ({})",
                    state.cluster_api_version,
                    state
                        .controllers
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            eprintln!(
                "ready in {:.1}s: Kubernetes {}, etcd {}, {} CRDs, {controllers}; logs in {}",
                started.elapsed().as_secs_f64(),
                state.kubernetes_version,
                state.etcd_version,
                state.crd_count,
                dir.join("logs").display()
            );
            println!("{}", state.endpoints.kubeconfig.display());
            Ok(ExitCode::SUCCESS)
        }
        DevCommand::Down { dir } => {
            let dir = dir.map(Ok).unwrap_or_else(default_dir)?;
            if ControlPlane::stop_persistent(&dir)? {
                eprintln!(
                    "stopped the local management cluster and removed {}",
                    dir.display()
                );
            } else {
                eprintln!("no local management cluster in {}", dir.display());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
