//! Status: one `ManagedCluster` (capstan.dev/v1alpha1) per fleet cluster in `capstan-system`,
//! read and written ([`capstan_plan::status`] holds the record as data: its types, what is read
//! back, what is written).
//!
//! The object is written only when its content changes, so a reconcile that changes nothing
//! writes nothing. The agent does not install the CRD (that takes cluster-wide rights on CRDs,
//! which an agent running as its own ServiceAccount has no business holding): `capstan install`
//! does, and the agent checks at start that the CRD is there and carries every field it writes
//! ([`check_crd`]).

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::json;

pub use capstan_plan::status::*;

use crate::k8s::FIELD_MANAGER;
use crate::write;

/// Why status could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// An API call failed.
    #[error("{action} ManagedCluster {name}: {source}")]
    Api {
        /// What was being done.
        action: &'static str,
        /// Which object.
        name: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The CRD is missing, not served, or older than this agent.
    #[error("the ManagedCluster CRD ({CRD_NAME}) {0}: {RUN_INSTALL}")]
    Crd(String),
    /// The CRD could not be read.
    #[error("reading the ManagedCluster CRD ({CRD_NAME}): {0}")]
    CrdRead(#[source] kube::Error),
}

/// The ManagedCluster API of `capstan-system`.
pub fn api(client: &Client) -> Api<ManagedCluster> {
    Api::namespaced(client.clone(), NAMESPACE)
}

/// Checks that the CRD is installed, Established, and serves every field this agent writes (an
/// older CRD would silently drop the newer ones). A newer CRD, with fields this agent does not
/// know, is fine.
pub async fn check_crd(client: &Client) -> Result<(), StatusError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let live = crds
        .get_opt(CRD_NAME)
        .await
        .map_err(StatusError::CrdRead)?
        .ok_or_else(|| StatusError::Crd("is not installed".into()))?;
    let established = live
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Established" && c.status == "True");
    if !established {
        return Err(StatusError::Crd("is not Established".into()));
    }
    let missing = missing_fields(
        &crd_schema(&serde_json::to_value(&live).unwrap_or_default()),
        &crd_schema(&serde_json::to_value(api::crd()).expect("the CRD serialises")),
    );
    if !missing.is_empty() {
        return Err(StatusError::Crd(format!(
            "is older than this agent (it lacks {})",
            missing.join(", ")
        )));
    }
    Ok(())
}

/// Every recorded status, by cluster name, read page by page ([`crate::k8s::paged::paged`]). An error
/// is an error, never an empty map.
pub async fn read_all(client: &Client) -> Result<BTreeMap<String, Recorded>, StatusError> {
    let api = api(client);
    let fetch = |lp: ListParams| {
        let api = api.clone();
        async move { api.list(&lp).await }
    };
    let (listed, _) =
        crate::k8s::paged::paged(&ListParams::default(), fetch, |o: &ManagedCluster| {
            (
                o.metadata.name.clone().unwrap_or_default(),
                Recorded::from_object(o),
            )
        })
        .await;
    Ok(listed
        .map_err(|source| StatusError::Api {
            action: "listing",
            name: "*".into(),
            source,
        })?
        .into_iter()
        .collect())
}

/// The error of a request about cluster `name`'s status object.
fn api_error(action: &'static str, name: &str) -> impl FnOnce(kube::Error) -> StatusError {
    let name = name.to_string();
    move |source| StatusError::Api {
        action,
        name,
        source,
    }
}

/// Writes the object itself, its spec (management cluster and directory): creates it when new,
/// moves it when its directory or management cluster changed. Returns what is recorded now,
/// with the status the object already had.
pub async fn write_spec(
    client: &Client,
    name: &str,
    management: &str,
    directory: &str,
) -> Result<Recorded, StatusError> {
    let obj = json!({
        "apiVersion": API_VERSION,
        "kind": "ManagedCluster",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app.kubernetes.io/managed-by": "capstan-status", "capstan.dev/management": management}},
        "spec": {"management": management, "directory": directory},
    });
    let answer = write::apply(&api(client), name, &write::Apply::by(FIELD_MANAGER), &obj)
        .await
        .map_err(api_error("writing", name))?;
    Ok(Recorded::from_object(&answer))
}

/// Writes a cluster's status when it differs from what is recorded: the object itself (its spec)
/// when it is new or moved ([`write_spec`]), then the status subresource. Returns what is
/// recorded now, or `None` when there was nothing to write.
pub async fn write(
    client: &Client,
    name: &str,
    management: &str,
    directory: &str,
    status: &ManagedClusterStatus,
    previous: Option<&Recorded>,
) -> Result<Option<Recorded>, StatusError> {
    let spec_written = spec_written(previous, management, directory);
    let generation = match previous {
        Some(p) if spec_written => p.generation,
        _ => {
            let r = write_spec(client, name, management, directory).await?;
            if r.generation > 0 { r.generation } else { 1 }
        }
    };
    let record = to_record(status, generation, previous);
    if spec_written && previous.is_some_and(|p| p.records(&record)) {
        return Ok(None);
    }
    let put = |rv: Option<&str>| {
        let mut body =
            json!({"apiVersion": API_VERSION, "kind": "ManagedCluster", "status": record});
        if let Some(rv) = rv {
            body["metadata"] = json!({"resourceVersion": rv});
        }
        let api = api(client);
        async move { write::apply_status(&api, name, &write::Apply::by(FIELD_MANAGER), &body).await }
    };
    // The object read when the pass decided is the precondition (none for one written just now).
    let read = previous
        .filter(|_| spec_written)
        .and_then(|p| p.resource_version.as_deref());
    let answer = match put(read).await {
        // Changed since it was read: by another writer, or only ahead of the watch that fed the
        // record. Written once more over what is there now; a replica that no longer leads gets
        // no further (its fence refuses the write).
        Err(kube::Error::Api(s)) if s.code == 409 && read.is_some() => {
            let now = api(client)
                .get(name)
                .await
                .map_err(api_error("reading", name))?;
            tracing::info!(cluster = name, read, now = ?now.metadata.resource_version, "status changed since it was read; writing over the newer object");
            put(now.metadata.resource_version.as_deref()).await
        }
        other => other,
    }
    .map_err(api_error("writing the status of", name))?;
    Ok(Some(Recorded::from_object(&answer)))
}

/// Takes the adoption mark off a cluster's record once the cluster has been taken back: it
/// lets one directory take it back once, not again after a later orphaning.
pub async fn clear_adoption(client: &Client, name: &str) -> Result<(), StatusError> {
    let patch =
        json!({"metadata": {"annotations": {capstan_templates::identity::ADOPT_ANNOTATION: null}}});
    write::merge(&api(client), name, &write::Merge::blind(), &patch)
        .await
        .map(|_| ())
        .map_err(api_error("writing", name))
}

/// Removes a cluster's status object (after its deletion completed).
pub async fn remove(client: &Client, name: &str) -> Result<(), StatusError> {
    write::delete(&api(client), name, &write::Delete::any())
        .await
        .map(|_| ())
        .map_err(api_error("deleting", name))
}
