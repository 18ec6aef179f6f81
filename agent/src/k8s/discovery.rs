//! Group/version/kind to API resource and scope, asked of the server.
//!
//! capstan applies CRDs it has never heard of (whatever a cluster directory carries, and the
//! upstream provider CRDs of whichever version is installed), so there is no built-in table:
//! the server's aggregated discovery is read once per pass, and a kind it did not list (a CRD
//! installed since) is looked up on its own before giving up.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::Client;
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope, pinned_kind};

/// Why a kind could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// Discovery failed.
    #[error("API discovery failed: {0}")]
    Failed(#[source] kube::Error),
    /// The server does not serve the kind (its CRD is not installed).
    #[error("the API server does not serve {0} (is its CRD installed?)")]
    Unknown(String),
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
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
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
