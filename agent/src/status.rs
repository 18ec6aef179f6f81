//! Status: one `ManagedCluster` (capstan.dev/v1alpha1) per fleet cluster in `capstan-system`.
//!
//! It holds the last applied revision, the phase, conditions with reasons, and the inventory of
//! what capstan applied for the cluster (what prune works from, so it lives on the management
//! cluster, next to the objects, and survives agent restarts). `kubectl get managedclusters -n
//! capstan-system` shows it through printer columns. The object is written only when its content
//! changes, so a reconcile that changes nothing writes nothing.

use std::collections::BTreeMap;

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::k8s::{FIELD_MANAGER, Resolver};
use crate::plan::ObjectRef;

/// Namespace of the status objects.
pub const NAMESPACE: &str = "capstan-system";
/// apiVersion of the status objects.
pub const API_VERSION: &str = "capstan.dev/v1alpha1";
/// The CRD, applied by the agent at start.
pub const CRD: &str = include_str!("../manifests/managedclusters.capstan.dev.yaml");

/// Where a cluster is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase {
    /// Known, nothing applied yet.
    #[default]
    Pending,
    /// Objects are being applied.
    Applying,
    /// Applied; Cluster API is not done yet.
    Progressing,
    /// A change to a cluster that was up is going out stage by stage (etcd, control plane, CNI,
    /// workers): the `stage` field says which one it waits for.
    Upgrading,
    /// Applied and the Cluster is Available.
    Ready,
    /// The revision does not validate or apply; the last applied one stays live.
    Failed,
    /// Applied before, no longer in the repository, no tombstone: left untouched.
    Orphaned,
    /// Suspended in the repository.
    Suspended,
    /// Being deleted (tombstone).
    Deleting,
}

impl Phase {
    /// The phase as written in the status.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Applying => "Applying",
            Phase::Progressing => "Progressing",
            Phase::Upgrading => "Upgrading",
            Phase::Ready => "Ready",
            Phase::Failed => "Failed",
            Phase::Orphaned => "Orphaned",
            Phase::Suspended => "Suspended",
            Phase::Deleting => "Deleting",
        }
    }
}

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
    /// The CRD could not be installed.
    #[error("installing the ManagedCluster CRD: {0}")]
    Crd(String),
}

/// A condition: `(type, status, reason, message)`.
pub type Condition = (String, String, String, String);

/// The status capstan computes for a cluster.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterStatus {
    /// Phase.
    pub phase: Phase,
    /// One line for humans.
    pub message: String,
    /// Revision of the objects live now.
    pub last_applied_revision: String,
    /// Revision last tried.
    pub last_attempted_revision: String,
    /// Hash of all desired objects of the last applied revision.
    pub desired_hash: String,
    /// The upgrade stage the cluster waits for (`Etcd`, `ControlPlane`, `CNI`, `Workers`; empty
    /// when none): [`crate::plan::stages`].
    pub stage: String,
    /// When the cluster started waiting for `stage` (RFC 3339; empty when none): what the stage
    /// timeout is measured from.
    pub stage_since: String,
    /// A management cluster upgrading its own etcd or control plane: the backup taken before
    /// it started (its directory). Empty when no such upgrade is in progress; while set, the
    /// workload clusters are paused.
    pub backup: String,
    /// Conditions: `(type, status, reason, message)`.
    pub conditions: Vec<Condition>,
    /// What capstan applied.
    pub inventory: Vec<ObjectRef>,
}

/// A status object as read back (or as just written): spec and status, no server metadata. The
/// inventory is kept typed, apart from the rest of the status (the agent holds one per cluster).
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// Management cluster.
    pub management: String,
    /// The cluster's directory in the repository.
    pub directory: String,
    /// The `status` of the object, without its inventory.
    pub status: Value,
    /// `status.inventory`.
    pub inventory: Vec<ObjectRef>,
}

impl Recorded {
    /// From a ManagedCluster object.
    pub fn from_object(obj: &DynamicObject) -> Recorded {
        let s = |p: &str| {
            obj.data
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let mut status = obj.data.get("status").cloned().unwrap_or(Value::Null);
        let inventory = status
            .as_object_mut()
            .and_then(|m| m.remove("inventory"))
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        Recorded {
            management: s("/spec/management"),
            directory: s("/spec/directory"),
            status,
            inventory,
        }
    }

    /// The recorded inventory.
    pub fn inventory(&self) -> Vec<ObjectRef> {
        self.inventory.clone()
    }

    /// A string field of the status.
    pub fn field(&self, name: &str) -> &str {
        self.status.get(name).and_then(Value::as_str).unwrap_or("")
    }
}

/// The ManagedCluster API of `capstan-system`.
pub fn api(client: &Client) -> Api<DynamicObject> {
    let ar = kube::discovery::ApiResource {
        group: "capstan.dev".into(),
        version: "v1alpha1".into(),
        api_version: API_VERSION.into(),
        kind: "ManagedCluster".into(),
        plural: "managedclusters".into(),
    };
    Api::namespaced_with(client.clone(), NAMESPACE, &ar)
}

/// Installs the CRD and the namespace, and waits until the CRD is served.
pub async fn install(client: &Client) -> Result<(), StatusError> {
    let mut crd: Value = capstan_templates::yaml::parse(CRD)
        .map_err(|e| StatusError::Crd(e.to_string()))?
        .remove(0)
        .value;
    let hash = crate::plan::content_hash(&crd);
    crd["metadata"]["annotations"] = json!({crate::plan::HASH_ANNOTATION: hash});
    // Already installed at this version (and its namespace present): nothing to write.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client.clone());
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    if let (Ok(Some(live)), Ok(Some(_))) = (
        crds.get_opt("managedclusters.capstan.dev").await,
        namespaces.get_opt(NAMESPACE).await,
    ) {
        let live_hash = live
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::plan::HASH_ANNOTATION));
        if live_hash == Some(&hash) {
            return Ok(());
        }
    }
    let resolver = Resolver::new(client.clone())
        .await
        .map_err(|e| StatusError::Crd(e.to_string()))?;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}});
    for obj in [&crd, &ns] {
        crate::k8s::apply::apply_one(client, &resolver, obj, false)
            .await
            .map_err(|e| StatusError::Crd(e.to_string()))?;
    }
    let established = kube::runtime::wait::await_condition(
        crds,
        "managedclusters.capstan.dev",
        kube::runtime::wait::conditions::is_crd_established(),
    );
    tokio::time::timeout(std::time::Duration::from_secs(30), established)
        .await
        .map_err(|_| StatusError::Crd("not Established after 30s".into()))?
        .map_err(|e| StatusError::Crd(e.to_string()))?;
    Ok(())
}

/// Every recorded status, by cluster name. An error is an error, never an empty map.
pub async fn read_all(client: &Client) -> Result<BTreeMap<String, Recorded>, StatusError> {
    let list = api(client)
        .list(&ListParams::default())
        .await
        .map_err(|source| StatusError::Api {
            action: "listing",
            name: "*".into(),
            source,
        })?;
    Ok(list
        .items
        .iter()
        .map(|o| {
            (
                o.metadata.name.clone().unwrap_or_default(),
                Recorded::from_object(o),
            )
        })
        .collect())
}

/// Now, as RFC 3339.
pub fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// How long ago an RFC 3339 time was (None: not a time).
pub fn age(rfc3339: &str) -> Option<std::time::Duration> {
    let t: k8s_openapi::jiff::Timestamp = rfc3339.parse().ok()?;
    let d = k8s_openapi::jiff::Timestamp::now().duration_since(t);
    std::time::Duration::try_from(d).ok()
}

/// Writes a cluster's status when it differs from what is recorded. Returns what it wrote, or
/// `None` when there was nothing to write.
pub async fn write(
    client: &Client,
    name: &str,
    management: &str,
    directory: &str,
    status: &ClusterStatus,
    previous: Option<&Recorded>,
) -> Result<Option<Recorded>, StatusError> {
    let prev_conditions: BTreeMap<String, Value> = previous
        .and_then(|p| p.status.get("conditions"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|c| Some((c.get("type")?.as_str()?.to_string(), c.clone())))
                .collect()
        })
        .unwrap_or_default();
    let conditions: Vec<Value> = status
        .conditions
        .iter()
        .map(|(t, s, reason, message)| {
            // Keep the transition time unless the condition's status changed.
            let time = match prev_conditions.get(t) {
                Some(c) if c.get("status").and_then(Value::as_str) == Some(s) => c.get("lastTransitionTime").cloned().unwrap_or_else(|| json!(now())),
                _ => json!(now()),
            };
            json!({"type": t, "status": s, "reason": reason, "message": message, "lastTransitionTime": time})
        })
        .collect();
    let desired_status = json!({
        "phase": status.phase.as_str(),
        "message": status.message,
        "lastAppliedRevision": status.last_applied_revision,
        "lastAttemptedRevision": status.last_attempted_revision,
        "desiredHash": status.desired_hash,
        "stage": status.stage,
        "stageSince": status.stage_since,
        "backup": status.backup,
        "objectCount": status.inventory.len(),
        "conditions": conditions,
    });
    let record = Recorded {
        management: management.to_string(),
        directory: directory.to_string(),
        status: desired_status,
        inventory: status.inventory.clone(),
    };
    if previous == Some(&record) {
        return Ok(None);
    }
    let spec = json!({"management": management, "directory": directory});
    let obj = json!({
        "apiVersion": API_VERSION,
        "kind": "ManagedCluster",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app.kubernetes.io/managed-by": "capstan-status", "capstan.dev/management": management}},
        "spec": spec,
        "status": record.status,
    });
    let mut obj = obj;
    obj["status"]["inventory"] =
        serde_json::to_value(&record.inventory).expect("references serialise");
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    api(client)
        .patch(name, &pp, &Patch::Apply(&obj))
        .await
        .map_err(|source| StatusError::Api {
            action: "writing",
            name: name.into(),
            source,
        })?;
    Ok(Some(record))
}

/// Removes a cluster's status object (after its deletion completed).
pub async fn remove(client: &Client, name: &str) -> Result<(), StatusError> {
    match api(client).delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(StatusError::Api {
            action: "deleting",
            name: name.into(),
            source,
        }),
    }
}
