//! Server-side apply of rendered objects.
//!
//! Field manager `capstan`, always with strict field validation (an unknown or mistyped field is
//! an error, never silently dropped by the server). The dry-run form asks the real API server to
//! admit every object exactly as it would on apply (schema, defaults, validation rules) without
//! persisting anything: what `capstan validate --server` and the tests use.

use kube::Client;
use kube::api::{Api, DynamicObject};
use serde_json::Value;

use super::discovery::{DiscoveryError, Resolver};

pub use capstan_templates::identity::FIELD_MANAGER;

/// Why an object was not admitted.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Its kind is not served.
    #[error("{subject}: {source}")]
    Discovery {
        /// Kind/namespace/name.
        subject: String,
        /// Cause.
        #[source]
        source: DiscoveryError,
    },
    /// The server rejected it.
    #[error("{subject}: {message}")]
    Rejected {
        /// Kind/namespace/name.
        subject: String,
        /// What the server said.
        message: String,
        /// The server judged the object itself and refused it (422 Invalid, 400 Bad Request:
        /// schema, strict field validation, an admission webhook's denial), as opposed to
        /// being unable to answer (a timeout, a 5xx, a webhook not reachable): trying again
        /// will not change the answer.
        invalid: bool,
    },
}

impl ApplyError {
    /// The subject of the error.
    pub fn subject(&self) -> &str {
        match self {
            ApplyError::Discovery { subject, .. } | ApplyError::Rejected { subject, .. } => subject,
        }
    }
}

/// Server-side applies one object (or dry-runs it) and returns what the server made of it.
pub async fn apply_one(
    client: &Client,
    resolver: &Resolver,
    obj: &Value,
    dry_run: bool,
) -> Result<Value, ApplyError> {
    apply_as(client, resolver, obj, FIELD_MANAGER, dry_run).await
}

/// [`apply_one`] with another field manager (`capstan install` applies as `capstan-install`).
pub async fn apply_as(
    client: &Client,
    resolver: &Resolver,
    obj: &Value,
    manager: &str,
    dry_run: bool,
) -> Result<Value, ApplyError> {
    let subject = capstan_templates::identity::subject_of(obj);
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("");
    let (ar, namespaced) = resolver
        .resolve(s("/apiVersion"), s("/kind"))
        .await
        .map_err(|source| ApplyError::Discovery {
            subject: subject.clone(),
            source,
        })?;
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(client.clone(), s("/metadata/namespace"), &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    let how = crate::write::Apply::by(manager).strict();
    let how = if dry_run { how.dry_run() } else { how };
    let out = crate::write::apply(&api, s("/metadata/name"), &how, obj)
        .await
        .map_err(|e| ApplyError::Rejected {
            subject: subject.clone(),
            invalid: matches!(&e, kube::Error::Api(s) if s.code == 422 || s.code == 400),
            message: match e {
                kube::Error::Api(status) => status.message.clone(),
                other => other.to_string(),
            },
        })?;
    Ok(serde_json::to_value(out).expect("objects serialise"))
}

/// Dry-runs every object; returns one error per rejected object (all of them, not the first).
///
/// An object whose namespace does not exist yet (capstan creates namespaces when it applies) is
/// checked in `default` instead: schema and validation rules do not depend on the namespace, and
/// a dry run must not create anything.
pub async fn dry_run_all(
    client: &Client,
    objects: &[Value],
) -> Result<Vec<ApplyError>, DiscoveryError> {
    let resolver = Resolver::new(client.clone()).await?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let mut missing: std::collections::BTreeMap<String, bool> = std::collections::BTreeMap::new();
    let mut errors = Vec::new();
    for obj in objects {
        let mut obj = obj.clone();
        if let Some(ns) = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string)
        {
            let absent = match missing.get(&ns) {
                Some(a) => *a,
                None => {
                    let a = matches!(namespaces.get_opt(&ns).await, Ok(None));
                    missing.insert(ns.clone(), a);
                    a
                }
            };
            if absent {
                obj["metadata"]["namespace"] = Value::String("default".into());
            }
        }
        if let Err(e) = apply_one(client, &resolver, &obj, true).await {
            errors.push(e);
        }
    }
    Ok(errors)
}
