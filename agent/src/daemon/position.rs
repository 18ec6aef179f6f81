//! Where `capstan run --verify-commits` keeps the last verified commit of the source it follows,
//! so that the next head must descend from it (`source/verified.rs`) in whichever process reads
//! it next: this one after a sync, a pod that replaced it (the mirror lives on an `emptyDir`
//! and is gone), or the other replica once it leads.
//!
//! The position lives in the ConfigMap [`POSITION_CONFIGMAP`] of the agent's namespace, one
//! entry per followed source (keyed by a digest of the management cluster, URL and reference,
//! so agents sharing an API server keep apart): `<key>.commit`, and for people reading it
//! `<key>.source` and `<key>.signer`. Why a ConfigMap there: tenants cannot write anything in
//! `capstan-system` (both layers of the tenancy model refuse the namespace), only the leader
//! writes it (through the fenced client), and an admin reads and, to allow one rollback, edits
//! it with kubectl. A position that cannot be read refuses every new head (fail closed); one
//! that is missing is a first use.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use sha2::{Digest, Sha256};

pub use crate::source::POSITION_CONFIGMAP;
use crate::source::SourceConfig;

/// The kept position of one followed source.
#[derive(Clone)]
pub struct Position {
    api: Api<ConfigMap>,
    namespace: String,
    /// The entries' prefix, and the field manager's suffix: each source's writes own its
    /// entries only, so a server-side apply for one source never drops another's.
    key: String,
    /// The source as a person reads it.
    source: String,
}

impl Position {
    /// The position of `source` followed for `management`, in `namespace`.
    pub fn new(client: Client, namespace: &str, management: &str, source: &SourceConfig) -> Self {
        let url = crate::source::redact_url(&source.url);
        let described = format!("{url} {}", source.reference);
        let digest = Sha256::digest(format!("{management}\n{url}\n{}", source.reference));
        Position {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            key: hex::encode(&digest[..8]),
            source: described,
        }
    }

    /// Where it is kept, for messages: `ConfigMap NS/NAME key K`.
    pub fn describe(&self) -> String {
        format!(
            "ConfigMap {}/{POSITION_CONFIGMAP} key {}",
            self.namespace,
            self.entry()
        )
    }

    /// The entry holding the commit.
    pub fn entry(&self) -> String {
        format!("{}.commit", self.key)
    }

    /// The kept commit: `Ok(None)` when none is kept yet.
    pub async fn read(&self) -> Result<Option<String>, String> {
        match self.api.get_opt(POSITION_CONFIGMAP).await {
            Ok(cm) => Ok(cm
                .and_then(|cm| cm.data)
                .and_then(|mut d| d.remove(&self.entry()))
                .filter(|c| !c.trim().is_empty())),
            Err(e) => Err(format!(
                "reading ConfigMap {}/{POSITION_CONFIGMAP}: {e}",
                self.namespace
            )),
        }
    }

    /// Keeps `commit`, signed by `signer`, as the position.
    pub async fn write(&self, commit: &str, signer: &str) -> Result<(), kube::Error> {
        let data: BTreeMap<String, String> = [
            (self.entry(), commit.to_string()),
            (format!("{}.source", self.key), self.source.clone()),
            (format!("{}.signer", self.key), signer.to_string()),
        ]
        .into_iter()
        .collect();
        let cm = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": POSITION_CONFIGMAP,
                "labels": {"app.kubernetes.io/managed-by": "capstan"},
            },
            "data": data,
        });
        let manager = format!("capstan-position-{}", self.key);
        crate::write::apply(
            &self.api,
            POSITION_CONFIGMAP,
            &crate::write::Apply::by(&manager),
            &cm,
        )
        .await
        .map(|_| ())
    }
}
