//! Connecting the way kubectl does: `--kubeconfig` wins, then `$KUBECONFIG` (several files
//! merged), then `~/.kube/config`; `--context` picks a context, else the current one; with no
//! kubeconfig at all, the in-cluster service account (the agent running as a pod).

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig could not be read or has no such context.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// Where it was read.
        path: String,
        /// Cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No kubeconfig and not running in a cluster.
    #[error("no kubeconfig found (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not running in a cluster: {0}")]
    NoConfig(#[source] kube::config::InClusterError),
    /// The client could not be built.
    #[error("building the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
}

/// A client and a description of where it points.
#[derive(Clone)]
pub struct Connection {
    /// The client.
    pub client: Client,
    /// The API server URL.
    pub server: String,
    /// Which configuration was used ("kubeconfig /path (context x)" or "in-cluster").
    pub source: String,
}

fn default_kubeconfig() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".kube/config")).filter(|p| p.exists())
}

/// Builds a client from an explicit kubeconfig, the environment, or the in-cluster config.
pub async fn connect(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<Connection, ClientError> {
    let opts = KubeConfigOptions { context: context.map(str::to_string), ..Default::default() };
    let (config, source) = if let Some(path) = kubeconfig {
        let err = |source| ClientError::Kubeconfig { path: path.display().to_string(), source };
        let kc = Kubeconfig::read_from(path).map_err(err)?;
        let config = Config::from_custom_kubeconfig(kc, &opts).await.map_err(err)?;
        (config, format!("kubeconfig {}", path.display()))
    } else if std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty()) || default_kubeconfig().is_some() {
        let path = std::env::var("KUBECONFIG").ok().filter(|v| !v.is_empty()).or_else(|| default_kubeconfig().map(|p| p.display().to_string())).unwrap_or_default();
        let config = Config::from_kubeconfig(&opts).await.map_err(|source| ClientError::Kubeconfig { path: path.clone(), source })?;
        (config, format!("kubeconfig {path}"))
    } else {
        (Config::incluster().map_err(ClientError::NoConfig)?, "in-cluster service account".to_string())
    };
    let source = match context {
        Some(c) => format!("{source} (context {c})"),
        None => source,
    };
    let server = config.cluster_url.to_string();
    capstan_harness::install_crypto_provider();
    let client = Client::try_from(config).map_err(ClientError::Client)?;
    Ok(Connection { client, server, source })
}
