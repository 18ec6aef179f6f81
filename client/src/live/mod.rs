//! What is live on the management cluster, as far as a plan needs to know: the store and its
//! facts are [`capstan_plan::live`]; here they are read.
//!
//! The store is filled one of two ways:
//! - [`list`]: one list per kind, metadata only (full objects for the kinds health reads), for
//!   one-shot commands (`reconcile --once`, `plan`): the cost is the number of kinds, about
//!   fifteen requests, plus one per further page of [`PAGE`] objects. A list is read page by
//!   page, each page reduced to its facts before the next is asked for, so a 3,000-cluster
//!   fleet's Clusters, control planes and MachineDeployments are never held whole at once.
//! - [`watch::LiveCache`]: one watch per kind kept open by the daemon, so a steady-state pass
//!   makes no read request at all, and a change on the cluster (drift, a rollout progressing, a
//!   Cluster becoming Available) is seen as it happens and wakes the agent.
//!
//! Either way, a kind whose list failed is an error of the whole pass, never an empty result:
//! reading "nothing exists" from a transient API error is how GitOps tools mass-delete.

pub mod watch;

use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;

pub use capstan_plan::live::*;

use crate::health::MachineSet;
use crate::k8s::refusal::{self, Refused};
use crate::k8s::{DiscoveryError, Resolver};
use crate::plan::ObjectRef;

/// Why the live state could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// A kind could not be resolved.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// A list failed.
    #[error("listing {kind} ({api_version}): {source}")]
    List {
        /// apiVersion.
        api_version: String,
        /// Kind.
        kind: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// A get failed.
    #[error("reading {subject}: {source}")]
    Get {
        /// Kind/namespace/name.
        subject: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The API server refuses to list or watch a kind (RBAC).
    #[error("watching {0}: forbidden: {1}")]
    Forbidden(String, String),
    /// A watch did not deliver its initial list in time.
    #[error("the watch of {0} has not listed its objects yet (is the API server reachable?)")]
    NotSynced(String),
}

/// A list's answer, or `None` when the API server refused it and confirms the refusal
/// ([`Refused::confirmed`]), which is recorded: the clusters that carry the kind fail, not
/// the pass. An unconfirmed refusal stays an error (the pass is tried again).
pub(crate) async fn unless_denied<T>(
    live: &Live,
    client: &Client,
    refusal: &Refused,
    kind: &str,
    listed: Result<T, kube::Error>,
) -> Result<Option<T>, kube::Error> {
    match listed {
        Ok(l) => Ok(Some(l)),
        Err(e) => match refusal.confirmed(client, &e).await {
            Some(message) => {
                live.set_denied(&refusal.group, kind, Some(message));
                Ok(None)
            }
            None => Err(e),
        },
    }
}

pub use crate::k8s::paged::{PAGE, paged};

/// Lists every kind (`apiVersion`, `kind`) once, page by page ([`paged`]). Returns the state and
/// the number of requests made. Statuses are read separately ([`status::read_all`], then
/// [`Live::set_records`]).
pub async fn list(
    client: &Client,
    resolver: &Resolver,
    kinds: &[(String, String)],
) -> Result<(Live, usize), LiveError> {
    let live = Live::default();
    let mut requests = 0;
    for (api_version, kind) in kinds {
        let (ar, _) = match resolver.resolve(api_version, kind).await {
            Ok(r) => r,
            // A kind whose CRD is gone has no live objects of ours; anything else is an error.
            Err(DiscoveryError::Unknown(_)) => continue,
            Err(e) => return Err(e.into()),
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let lp = ListParams::default().labels(SELECTOR);
        let err = |source| LiveError::List {
            api_version: api_version.clone(),
            kind: kind.clone(),
            source,
        };
        let group = ar.group.as_str();
        let refusal = Refused::new(group, &ar.plural, refusal::LIST);
        let (listed, asked) = if read_whole(api_version, kind) {
            let fetch = |lp: ListParams| {
                let api = api.clone();
                async move { api.list(&lp).await }
            };
            paged(&lp, fetch, |o: &DynamicObject| {
                (
                    key_of(group, kind, &o.metadata),
                    LiveObject::from_value(&serde_json::to_value(o).expect("objects serialise")),
                )
            })
            .await
        } else {
            let fetch = |lp: ListParams| {
                let api = api.clone();
                async move { api.list_metadata(&lp).await }
            };
            paged(
                &lp,
                fetch,
                |o: &kube::api::PartialObjectMeta<DynamicObject>| {
                    (
                        key_of(group, kind, &o.metadata),
                        LiveObject::from_meta(&o.metadata),
                    )
                },
            )
            .await
        };
        requests += asked;
        let Some(facts) = unless_denied(&live, client, &refusal, kind, listed)
            .await
            .map_err(err)?
        else {
            continue;
        };
        live.objects_mut().extend(facts);
        if has_machine_sets(api_version, kind) {
            requests += list_machine_sets(&live, client, resolver).await?;
        }
    }
    if kinds.iter().any(|(v, k)| draws_on_hardware(v, k)) {
        requests += list_servers(&live, client, resolver).await?;
    }
    Ok((live, requests))
}

/// Lists the bare-metal Hardware (metadata: namespace and labels), page by page; the requests
/// made. No CRD, or a refusal the API server confirms, leaves it unread (the spare-hardware
/// gate then holds nothing).
async fn list_servers(
    live: &Live,
    client: &Client,
    resolver: &Resolver,
) -> Result<usize, LiveError> {
    let (api_version, kind) = HARDWARE;
    let ar = match resolver.resolve(api_version, kind).await {
        Ok((ar, _)) => ar,
        Err(DiscoveryError::Unknown(_)) => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let fetch = |lp: ListParams| {
        let api = api.clone();
        async move { api.list_metadata(&lp).await }
    };
    let (listed, requests) = paged(
        &ListParams::default(),
        fetch,
        |o: &kube::api::PartialObjectMeta<DynamicObject>| server_of(&o.metadata),
    )
    .await;
    match listed {
        Ok(servers) => *live.servers_mut() = Some(servers.into_iter().collect()),
        Err(e) => {
            let refusal = Refused::new(&ar.group, &ar.plural, refusal::LIST);
            if refusal.confirmed(client, &e).await.is_none() {
                return Err(LiveError::List {
                    api_version: api_version.into(),
                    kind: kind.into(),
                    source: e,
                });
            }
        }
    }
    Ok(requests)
}

/// Lists every MachineSet of a MachineDeployment, page by page; the requests made.
async fn list_machine_sets(
    live: &Live,
    client: &Client,
    resolver: &Resolver,
) -> Result<usize, LiveError> {
    let (api_version, kind) = MACHINE_SET;
    let (ar, _) = resolver.resolve(api_version, kind).await?;
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let fetch = |lp: ListParams| {
        let api = api.clone();
        async move { api.list(&lp).await }
    };
    let lp = ListParams::default().labels(MACHINE_SET_SELECTOR);
    let (listed, requests) = paged(&lp, fetch, |o: &DynamicObject| {
        (
            machine_set_key(&o.metadata),
            MachineSet::from_object(&serde_json::to_value(o).expect("objects serialise")),
        )
    })
    .await;
    let sets = listed.map_err(|source| LiveError::List {
        api_version: api_version.into(),
        kind: kind.into(),
        source,
    })?;
    live.machine_sets_mut().extend(sets);
    Ok(requests)
}

/// The whole object (a GET), for a comparison.
pub async fn fetch(
    client: &Client,
    resolver: &Resolver,
    r: &ObjectRef,
) -> Result<Option<Value>, LiveError> {
    let (ar, namespaced) = resolver.resolve(&r.api_version, &r.kind).await?;
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(client.clone(), &r.namespace, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    let obj = api
        .get_opt(&r.name)
        .await
        .map_err(|source| LiveError::Get {
            subject: r.subject(),
            source,
        })?;
    Ok(obj.map(|o| {
        let mut v = serde_json::to_value(&o).expect("objects serialise");
        v["apiVersion"] = Value::String(r.api_version.clone());
        v["kind"] = Value::String(r.kind.clone());
        v
    }))
}
