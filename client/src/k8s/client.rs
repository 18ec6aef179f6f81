//! Connecting the way kubectl does: `--kubeconfig` wins, then `$KUBECONFIG` (several files
//! merged), then `~/.kube/config`; `--context` picks a context, else the current one; with no
//! kubeconfig at all, the in-cluster service account (the agent running as a pod).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kube::client::{Body, ClientBuilder};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// A Kubernetes API verb, as the API server's audit log names a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// GET one object.
    Get,
    /// LIST a collection.
    List,
    /// WATCH a collection.
    Watch,
    /// POST (create).
    Create,
    /// PUT (replace).
    Update,
    /// PATCH (including server-side apply).
    Patch,
    /// DELETE.
    Delete,
}

impl Verb {
    /// Every verb.
    pub const ALL: &'static [Verb] = &[
        Verb::Get,
        Verb::List,
        Verb::Watch,
        Verb::Create,
        Verb::Update,
        Verb::Patch,
        Verb::Delete,
    ];

    /// As the audit log (and the metrics' label) writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
}

/// Called with the verb of every request a client sends (the agent counts them in its metrics).
pub type RequestHook = Arc<dyn Fn(Verb) + Send + Sync>;

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
    #[error(
        "no kubeconfig found (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not running in a cluster: {0}"
    )]
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
    std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".kube/config"))
        .filter(|p| p.exists())
}

/// Builds a client from an explicit kubeconfig, the environment, or the in-cluster config.
pub async fn connect(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<Connection, ClientError> {
    connect_with(kubeconfig, context, None).await
}

/// [`connect`], with every request reported to `hook`.
pub async fn connect_with(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    hook: Option<RequestHook>,
) -> Result<Connection, ClientError> {
    let opts = KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let (config, source) = if let Some(path) = kubeconfig {
        let err = |source| ClientError::Kubeconfig {
            path: path.display().to_string(),
            source,
        };
        let kc = Kubeconfig::read_from(path).map_err(err)?;
        let config = Config::from_custom_kubeconfig(kc, &opts)
            .await
            .map_err(err)?;
        (config, format!("kubeconfig {}", path.display()))
    } else if std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty())
        || default_kubeconfig().is_some()
    {
        let path = std::env::var("KUBECONFIG")
            .ok()
            .filter(|v| !v.is_empty())
            .or_else(|| default_kubeconfig().map(|p| p.display().to_string()))
            .unwrap_or_default();
        let config =
            Config::from_kubeconfig(&opts)
                .await
                .map_err(|source| ClientError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?;
        (config, format!("kubeconfig {path}"))
    } else {
        (
            Config::incluster().map_err(ClientError::NoConfig)?,
            "in-cluster service account".to_string(),
        )
    };
    let source = match context {
        Some(c) => format!("{source} (context {c})"),
        None => source,
    };
    let server = config.cluster_url.to_string();
    crate::install_crypto_provider();
    let builder = ClientBuilder::try_from(config).map_err(ClientError::Client)?;
    let client = match hook {
        Some(hook) => builder
            .with_layer(&tower::util::MapRequestLayer::new(
                move |req: http::Request<Body>| {
                    hook(verb_of(req.method(), req.uri()));
                    req
                },
            ))
            .build(),
        None => builder.build(),
    };
    Ok(Connection {
        client,
        server,
        source,
    })
}

/// The Kubernetes verb of a request, as the API server's audit log names it: GET of a
/// collection is `list` (`watch` with `?watch=true`), GET of a named object is `get`.
pub fn verb_of(method: &http::Method, uri: &http::Uri) -> Verb {
    match *method {
        http::Method::POST => return Verb::Create,
        http::Method::PUT => return Verb::Update,
        http::Method::PATCH => return Verb::Patch,
        http::Method::DELETE => return Verb::Delete,
        _ => {}
    }
    if uri
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
    {
        return Verb::Watch;
    }
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    // After /api/v1 or /apis/<group>/<version>: [namespaces/<ns>/]<resource>[/<name>[/<subresource>]].
    let rest: &[&str] = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        // Discovery, /version, /openapi: reading one document.
        _ => return Verb::Get,
    };
    let named = match rest {
        [] => true,
        ["namespaces", _ns, _resource, ..] => rest.len() > 3,
        [_resource, ..] => rest.len() > 1,
    };
    if named { Verb::Get } else { Verb::List }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_as_the_api_server_names_them() {
        let v = |m: http::Method, u: &str| verb_of(&m, &u.parse().unwrap());
        assert_eq!(v(http::Method::GET, "/api/v1/namespaces"), Verb::List);
        assert_eq!(
            v(http::Method::GET, "/api/v1/namespaces/capstan-system"),
            Verb::Get
        );
        assert_eq!(
            v(http::Method::GET, "/api/v1/namespaces/ns/secrets"),
            Verb::List
        );
        assert_eq!(
            v(http::Method::GET, "/api/v1/namespaces/ns/secrets/s"),
            Verb::Get
        );
        assert_eq!(
            v(
                http::Method::GET,
                "/apis/cluster.x-k8s.io/v1beta2/clusters?labelSelector=a%3Db"
            ),
            Verb::List
        );
        assert_eq!(
            v(
                http::Method::GET,
                "/apis/cluster.x-k8s.io/v1beta2/namespaces/ns/clusters/c"
            ),
            Verb::Get
        );
        assert_eq!(
            v(
                http::Method::GET,
                "/apis/cluster.x-k8s.io/v1beta2/namespaces/ns/clusters/c/status"
            ),
            Verb::Get
        );
        assert_eq!(
            v(
                http::Method::GET,
                "/apis/cluster.x-k8s.io/v1beta2/clusters?watch=true&resourceVersion=5"
            ),
            Verb::Watch
        );
        assert_eq!(
            v(http::Method::GET, "/apis/cluster.x-k8s.io/v1beta2"),
            Verb::Get
        );
        assert_eq!(v(http::Method::GET, "/apis"), Verb::Get);
        assert_eq!(
            v(
                http::Method::PATCH,
                "/apis/cluster.x-k8s.io/v1beta2/namespaces/ns/clusters/c?fieldManager=capstan"
            ),
            Verb::Patch
        );
        assert_eq!(
            v(http::Method::DELETE, "/api/v1/namespaces/ns/secrets/s"),
            Verb::Delete
        );
        assert_eq!(
            v(
                http::Method::POST,
                "/apis/events.k8s.io/v1/namespaces/ns/events"
            ),
            Verb::Create
        );
        assert_eq!(
            v(http::Method::PUT, "/api/v1/namespaces/ns/secrets/s"),
            Verb::Update
        );
    }
}
