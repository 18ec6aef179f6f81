//! `capstan dev up|down`: a local management cluster (kube-apiserver + etcd built from Go
//! modules, upstream Cluster API and EKS Anywhere CRDs installed, the Cluster API controllers
//! running with CAPD's in-memory backend standing in for machines, capstan's ManagedCluster CRD
//! installed) for the quick start.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use capstan_harness::{ControlPlane, PersistentState, StartOptions};

use crate::cli::DevCommand;

pub(super) fn default_dir() -> anyhow::Result<PathBuf> {
    let base = match std::env::var_os("CAPSTAN_CACHE_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?)
            .join(".cache/capstan"),
    };
    Ok(base.join("dev"))
}

/// The kubeconfig of the local management cluster `capstan dev up` runs (in its default
/// directory), if one runs: the bootstrap cluster `capstan pivot` takes when none is named.
pub(super) fn running_kubeconfig() -> Option<PathBuf> {
    let state = ControlPlane::persistent_state(&default_dir().ok()?).ok()??;
    state
        .is_running()
        .then(|| state.endpoints.kubeconfig.clone())
}

/// The local management cluster of `dir`: the running one (false), or one started now (true),
/// with capstan's CRD and tenancy installed so the agent's pass runs on it with its admin
/// kubeconfig (a production install is `capstan install`). Idempotent, so the quick start can
/// be run again.
pub(super) fn up(dir: &Path, controllers: bool) -> anyhow::Result<(PersistentState, bool)> {
    if let Some(state) = ControlPlane::persistent_state(dir)?
        && state.is_running()
    {
        return Ok((state, false));
    }
    eprintln!(
        "starting a local management cluster in {} (the first run builds kube-apiserver, etcd and the controllers: several minutes)",
        dir.display()
    );
    let opts = StartOptions {
        controllers,
        timeout: Duration::from_secs(300),
        ..Default::default()
    };
    let state = super::runtime()?.block_on(async {
        let state = ControlPlane::start_persistent_with(dir, opts).await?;
        let conn = crate::k8s::connect(Some(&state.endpoints.kubeconfig), None).await?;
        crate::install::install_crd(&conn.client).await?;
        crate::install::install_tenancy(
            &conn.client,
            &crate::install::rbac::rules(),
            Duration::from_secs(60),
        )
        .await?;
        quickstart_identity(&conn.client).await?;
        anyhow::Ok(state)
    })?;
    Ok((state, true))
}

/// The quick start's age identity (`examples/quickstart/quickstart.agekey`): a demo key,
/// public in the repository, that the quick start's encrypted add-on is encrypted for.
const QUICKSTART_AGE_KEY: &str = include_str!("../../../examples/quickstart/quickstart.agekey");

/// Gives the local management cluster the quick start's age identity, as an admin gives a
/// fleet's: the Secret the agent decrypts SOPS files with by default
/// ([`crate::reconcile::addons::SOPS_AGE_SECRET`]), unless one exists (an identity of the user's own
/// is left alone).
async fn quickstart_identity(client: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Secret;
    let ns = crate::status::NAMESPACE;
    let name = crate::reconcile::addons::SOPS_AGE_SECRET;
    let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), ns);
    if api.get_opt(name).await?.is_some() {
        return Ok(());
    }
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
        "stringData": {"quickstart.agekey": QUICKSTART_AGE_KEY},
    });
    crate::install::apply(client, &[secret], Duration::from_secs(30))
        .await
        .with_context(|| format!("creating Secret {ns}/{name}, the quick start's age identity"))?;
    Ok(())
}

/// Stops the local management cluster of `dir`; whether one ran.
pub(super) fn down(dir: &Path) -> anyhow::Result<bool> {
    Ok(ControlPlane::stop_persistent(dir)?)
}

/// Runs `dev up` or `dev down`.
pub fn run(cmd: DevCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        DevCommand::Up {
            dir,
            no_controllers,
        } => {
            let dir = dir.map(Ok).unwrap_or_else(default_dir)?;
            let started = Instant::now();
            let (state, new) = up(&dir, !no_controllers)?;
            if !new {
                eprintln!(
                    "a local management cluster is already running from {} (Kubernetes {})",
                    dir.display(),
                    state.kubernetes_version
                );
                println!("{}", state.endpoints.kubeconfig.display());
                return Ok(ExitCode::SUCCESS);
            }
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
            if down(&dir)? {
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
