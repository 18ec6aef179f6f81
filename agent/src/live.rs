//! What is live on the management cluster, read with as few requests as possible.
//!
//! One list per kind per pass, across all namespaces, filtered by the label every object capstan
//! renders carries: the cost is the number of kinds (about fifteen), not the number of objects or
//! clusters. Lists are metadata-only (what the unchanged check needs: annotations, generation,
//! owners), except for Cluster API Clusters, whose status gives health; a full object is read
//! only when an object has to be compared. Managed fields are dropped on arrival. A failed list is an error of the whole pass, never an empty result: reading "nothing
//! exists" from a transient API error is how GitOps tools mass-delete.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::{Api, DynamicObject, ListParams};
use kube::Client;
use serde_json::Value;

use crate::k8s::{DiscoveryError, Resolver};
use crate::plan::ObjectRef;

/// Label selector of everything capstan applied.
pub const SELECTOR: &str = "app.kubernetes.io/managed-by=capstan";

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
}

/// Live objects by [`ObjectRef::key`].
#[derive(Debug, Default)]
pub struct Live {
    objects: BTreeMap<String, Value>,
    /// List requests made.
    pub requests: usize,
}

impl Live {
    /// Lists every kind of `refs` once.
    pub async fn load(client: &Client, resolver: &mut Resolver, refs: impl IntoIterator<Item = ObjectRef>) -> Result<Live, LiveError> {
        let kinds: BTreeSet<(String, String)> = refs.into_iter().map(|r| (r.api_version, r.kind)).collect();
        let mut live = Live::default();
        let mut seen_group_kind = BTreeSet::new();
        for (api_version, kind) in kinds {
            let group = api_version.split_once('/').map(|(g, _)| g).unwrap_or("").to_string();
            if !seen_group_kind.insert((group, kind.clone())) {
                continue;
            }
            let (ar, _) = match resolver.resolve(&api_version, &kind).await {
                Ok(r) => r,
                // A kind whose CRD is gone has no live objects of ours; anything else is an error.
                Err(DiscoveryError::Unknown(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let lp = ListParams::default().labels(SELECTOR);
            let err = |source| LiveError::List { api_version: api_version.clone(), kind: kind.clone(), source };
            let items: Vec<Value> = if kind == "Cluster" && api_version.starts_with("cluster.x-k8s.io/") {
                api.list(&lp).await.map_err(err)?.items.iter().map(|i| serde_json::to_value(i).expect("objects serialise")).collect()
            } else {
                api.list_metadata(&lp).await.map_err(err)?.items.iter().map(|i| serde_json::json!({"metadata": serde_json::to_value(&i.metadata).expect("metadata serialises")})).collect()
            };
            live.requests += 1;
            for mut v in items {
                if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.remove("managedFields");
                }
                // List items carry no type information; put it back.
                v["apiVersion"] = Value::String(api_version.clone());
                v["kind"] = Value::String(kind.clone());
                live.objects.insert(ObjectRef::of(&v).key(), v);
            }
        }
        Ok(live)
    }

    /// The live object of a reference.
    pub fn get(&self, r: &ObjectRef) -> Option<&Value> {
        self.objects.get(&r.key())
    }

    /// The whole live object (a GET), for a comparison.
    pub async fn fetch(client: &Client, resolver: &mut Resolver, r: &ObjectRef) -> Result<Option<Value>, LiveError> {
        let (ar, namespaced) = resolver.resolve(&r.api_version, &r.kind).await?;
        let api: Api<DynamicObject> = if namespaced { Api::namespaced_with(client.clone(), &r.namespace, &ar) } else { Api::all_with(client.clone(), &ar) };
        let obj = api.get_opt(&r.name).await.map_err(|source| LiveError::List { api_version: r.api_version.clone(), kind: r.kind.clone(), source })?;
        Ok(obj.map(|o| {
            let mut v = serde_json::to_value(&o).expect("objects serialise");
            v["apiVersion"] = Value::String(r.api_version.clone());
            v["kind"] = Value::String(r.kind.clone());
            v
        }))
    }

    /// Records what an apply returned, so later lookups in the same pass see it.
    pub fn put(&mut self, mut obj: Value) {
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        self.objects.insert(ObjectRef::of(&obj).key(), obj);
    }

    /// Forgets a deleted object.
    pub fn remove(&mut self, r: &ObjectRef) {
        self.objects.remove(&r.key());
    }
}
