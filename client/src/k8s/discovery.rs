//! Group/version/kind to API resource and scope, asked of the server.
//!
//! capstan applies CRDs it has never heard of (whatever a cluster directory carries, and the
//! upstream provider CRDs of whichever version is installed), so there is no built-in table:
//! the server's aggregated discovery is read once per pass, and a kind it did not list (a CRD
//! installed since) is looked up on its own before giving up.
//!
//! A CRD just applied is marked Established before the server's discovery documents list its
//! kind (they are rebuilt asynchronously, later still on a loaded machine), so whoever applies a
//! CRD and then objects of its kind waits for both ([`wait_served`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::Api;
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope, pinned_kind};
use kube::runtime::wait::{await_condition, conditions};

/// Why a kind could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// Discovery failed.
    #[error("API discovery failed: {0}")]
    Failed(#[source] kube::Error),
    /// The server does not serve the kind (its CRD is not installed).
    #[error("the API server does not serve {0} (is its CRD installed?)")]
    Unknown(String),
    /// A CRD did not become Established and listed by discovery.
    #[error("CustomResourceDefinition/{name} not Established and served: {reason}")]
    NotServed {
        /// The CRD's name.
        name: String,
        /// What happened instead.
        reason: String,
    },
}

/// How long a CRD just applied is waited for before giving up.
pub const SERVED_WAIT: Duration = Duration::from_secs(60);

/// The group/version/kind of an `apiVersion` (`group/version`, or `version` for the core group)
/// and `kind`.
pub fn gvk_of(api_version: &str, kind: &str) -> GroupVersionKind {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, kind)
}

/// Waits, up to `limit` in all, until every CRD of `names` is Established and aggregated
/// discovery lists its kind in each version it serves.
pub async fn wait_served(
    client: &Client,
    names: &[String],
    limit: Duration,
) -> Result<(), DiscoveryError> {
    let deadline = tokio::time::Instant::now() + limit;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in names {
        let served = async {
            let crd = await_condition(api.clone(), name, conditions::is_crd_established())
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "deleted while waiting".to_string())?;
            let group = crd.spec.group.as_str();
            let kinds: Vec<GroupVersionKind> = crd
                .spec
                .versions
                .iter()
                .filter(|v| v.served)
                .map(|v| GroupVersionKind::gvk(group, &v.name, &crd.spec.names.kind))
                .collect();
            let mut pause = Duration::from_millis(20);
            loop {
                let discovery = Discovery::new(client.clone())
                    .filter(&[group])
                    .run_aggregated()
                    .await
                    .map_err(|e| format!("discovery: {e}"))?;
                if kinds.iter().all(|k| discovery.resolve_gvk(k).is_some()) {
                    return Ok::<(), String>(());
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
        };
        let reason = match tokio::time::timeout_at(deadline, served).await {
            Ok(Ok(())) => continue,
            Ok(Err(reason)) => reason,
            Err(_) => format!("not within {limit:?}"),
        };
        return Err(DiscoveryError::NotServed {
            name: name.clone(),
            reason,
        });
    }
    Ok(())
}

/// Resolves kinds to resources, caching what the server said. Shared by concurrent work (`&self`).
pub struct Resolver {
    client: Client,
    discovery: Discovery,
    extra: Mutex<HashMap<String, (ApiResource, ApiCapabilities)>>,
}

impl Resolver {
    /// Runs discovery.
    pub async fn new(client: Client) -> Result<Resolver, DiscoveryError> {
        let discovery = Discovery::new(client.clone())
            .run_aggregated()
            .await
            .map_err(DiscoveryError::Failed)?;
        Ok(Resolver {
            client,
            discovery,
            extra: Mutex::new(HashMap::new()),
        })
    }

    /// The resource and scope of an `apiVersion` and `kind`.
    pub async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, bool), DiscoveryError> {
        let gvk = gvk_of(api_version, kind);
        if let Some((ar, caps)) = self.discovery.resolve_gvk(&gvk) {
            return Ok((ar, caps.scope == Scope::Namespaced));
        }
        let key = format!("{api_version}/{kind}");
        if let Some((ar, caps)) = self
            .extra
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok((ar.clone(), caps.scope == Scope::Namespaced));
        }
        match pinned_kind(&self.client, &gvk).await {
            Ok((ar, caps)) => {
                let namespaced = caps.scope == Scope::Namespaced;
                self.extra
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, (ar.clone(), caps));
                Ok((ar, namespaced))
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                Err(DiscoveryError::Unknown(format!("{kind} in {api_version}")))
            }
            Err(kube::Error::Discovery(_)) => {
                Err(DiscoveryError::Unknown(format!("{kind} in {api_version}")))
            }
            Err(e) => Err(DiscoveryError::Failed(e)),
        }
    }
}
