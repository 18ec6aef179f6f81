//! The `ManagedCluster` API (`capstan.dev/v1alpha1`) as Rust types: the CRD is generated from
//! them ([`crd`], [`crd_yaml`]), and the YAML shipped in `agent/manifests/` is checked against the
//! generated one by a test, so the types are the one definition.
//!
//! Compatibility rules, because several agent versions meet the same records (rolling upgrades,
//! two replicas, a downgrade):
//! - every status field has a default (`#[serde(default)]` on the struct): a record written by
//!   an older agent, which lacks the newer fields, still reads;
//! - a new field is optional and left out when empty (`Option` with `skip_serializing_if`, or a
//!   collection that is skipped when empty), so adding one is one line here, and older agents
//!   (which ignore fields they do not know) keep working next to it;
//! - a phase this agent does not know (written by a newer one) reads as [`Phase::Unknown`]
//!   instead of making the whole record unreadable: a record is also where the inventory lives,
//!   and an inventory that cannot be read would turn into orphans.
//!
//! The status is a subresource: capstan writes the spec (management cluster and directory)
//! when it creates the object, and the status through `/status`, so `observedGeneration` says
//! which spec the status describes.

// The printer columns repeat `type_ = "string"`, which clippy takes for duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use kube::core::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ObjectRef;

/// What a `ManagedCluster` names: one cluster of the fleet, where it lives in the repository.
#[derive(
    CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema,
)]
#[kube(
    group = "capstan.dev",
    version = "v1alpha1",
    kind = "ManagedCluster",
    namespaced,
    status = "ManagedClusterStatus",
    shortname = "mc",
    category = "capstan",
    doc = "One cluster of a capstan fleet: what capstan applied for it, where it is in its lifecycle, and the inventory prune works from.",
    printcolumn(name = "Management", type_ = "string", json_path = ".spec.management"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Stage", type_ = "string", json_path = ".status.stage"),
    printcolumn(name = "Wave", type_ = "string", json_path = ".status.wave"),
    printcolumn(
        name = "Revision",
        type_ = "string",
        json_path = ".status.lastAppliedRevision"
    ),
    printcolumn(name = "Objects", type_ = "integer", json_path = ".status.objectCount"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.message",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase", default)]
pub struct ManagedClusterSpec {
    /// The management cluster whose agent manages this cluster.
    pub management: String,
    /// The cluster's directory in the fleet repository.
    pub directory: String,
}

/// What capstan last did for a cluster and found.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ManagedClusterStatus {
    /// The `metadata.generation` (the spec) this status was written for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Where the cluster is in its lifecycle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// One line for humans.
    pub message: String,
    /// The revision of the objects live now.
    pub last_applied_revision: String,
    /// The revision last tried.
    pub last_attempted_revision: String,
    /// The hash of every desired object of the last applied revision: equal hashes mean the
    /// cluster is up to date whatever revision the objects came from.
    pub desired_hash: String,
    /// How many objects the inventory holds (a printer column).
    pub object_count: i64,
    /// `Ready`, `Applied`, `Conflict`, with reasons.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// What capstan applied for the cluster: what prune and deletion work from.
    pub inventory: Vec<ObjectRef>,
    /// The upgrade stage the cluster waits for (`Etcd`, `ControlPlane`, `CNI`, `Workers`):
    /// `crate::stages`. Absent when no upgrade is going out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// When the cluster started waiting for `stage`, or last saw it make progress (RFC 3339):
    /// what the stage timeout is measured from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage_since: Option<String>,
    /// What the stage reported at `stageSince` (`MachineDeployment/dev-md-0: 2/6 machines up
    /// to date, 6 available, 7 in all`): a different report is progress (another worker group,
    /// a machine created, available or removed) and restarts the stage's clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage_progress: Option<String>,
    /// The cluster's upgrade wave when the fleet config paces upgrades (`2/3 rest`: the second
    /// of three waves, named `rest`): `crate::waves`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wave: Option<String>,
    /// When an upgrade held outside the maintenance windows may start at the earliest: the next
    /// window's opening (RFC 3339). Absent unless a window holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_until: Option<String>,
    /// A management cluster upgrading its own etcd or control plane: the backup taken before it
    /// started (its directory). While set, the workload clusters are paused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
    /// The stages of the latest upgrade, in the order they went out, each with when it started
    /// and ended (at most [`STAGES_KEPT`]): what the dashboard's cluster page shows.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageRecord>,
    /// What capstan applied inside the workload cluster (its add-ons): what their prune works
    /// from. Absent for a cluster that never had add-ons.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addons: Option<AddonsStatus>,
}

/// A workload cluster's add-ons as last applied inside it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct AddonsStatus {
    /// The hash of the add-on set last applied in full (empty: never applied in full).
    pub hash: String,
    /// The revision it came from.
    pub revision: String,
    /// What is applied inside the workload cluster (the objects' own identities there).
    pub inventory: Vec<ObjectRef>,
}

/// How many stages of an upgrade a status keeps.
pub const STAGES_KEPT: usize = 8;

/// One stage of an upgrade in a cluster's status.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct StageRecord {
    /// The stage (`Etcd`, `ControlPlane`, `CNI`, `Workers`).
    pub name: String,
    /// When the cluster started waiting for it (RFC 3339).
    pub started: String,
    /// When it was done, or the upgrade stopped waiting for it (failed, held); absent while it
    /// goes on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished: Option<String>,
}

/// Where a cluster is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub enum Phase {
    /// Known, nothing applied yet.
    Pending,
    /// Objects are being applied.
    Applying,
    /// Applied; Cluster API is not done yet.
    Progressing,
    /// A change to a cluster that was up is going out stage by stage (etcd, control plane, CNI,
    /// workers): `stage` says which one it waits for.
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
    /// A phase this agent does not know (written by a newer version).
    Unknown,
}

impl Phase {
    /// Every phase, as written.
    pub const ALL: [Phase; 10] = [
        Phase::Pending,
        Phase::Applying,
        Phase::Progressing,
        Phase::Upgrading,
        Phase::Ready,
        Phase::Failed,
        Phase::Orphaned,
        Phase::Suspended,
        Phase::Deleting,
        Phase::Unknown,
    ];

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
            Phase::Unknown => "Unknown",
        }
    }
}

impl<'de> Deserialize<'de> for Phase {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Phase, D::Error> {
        let s = String::deserialize(d)?;
        Ok(Phase::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .unwrap_or(Phase::Unknown))
    }
}

/// The CRD, generated from the types.
pub fn crd() -> CustomResourceDefinition {
    ManagedCluster::crd()
}

/// The CRD as YAML, as shipped in `agent/manifests/managedclusters.capstan.dev.yaml`.
pub fn crd_yaml() -> String {
    let value = serde_json::to_value(crd()).expect("the CRD serialises");
    format!(
        "# capstan's status object: one ManagedCluster per cluster of the fleet, in capstan-system.\n\
         # Generated from plan/src/status/api.rs (`capstan install --export --crd-only`); do not edit.\n{}",
        capstan_templates::yaml::to_string(&value)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_crd_is_the_generated_one() {
        let shipped = include_str!("../../../agent/manifests/managedclusters.capstan.dev.yaml");
        let generated = crd_yaml();
        if std::env::var_os("CAPSTAN_UPDATE_CRD").is_some() {
            let path = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../agent/manifests/managedclusters.capstan.dev.yaml"
            );
            std::fs::write(path, &generated).unwrap();
            return;
        }
        assert!(
            shipped == generated,
            "agent/manifests/managedclusters.capstan.dev.yaml is not what the types generate; \
             regenerate it with `capstan install --export --crd-only > agent/manifests/managedclusters.capstan.dev.yaml` \
             (or CAPSTAN_UPDATE_CRD=1 cargo test -p capstan-plan --lib)\n{}",
            similar::TextDiff::from_lines(shipped, &generated)
                .unified_diff()
                .header("shipped", "generated")
        );
    }

    #[test]
    fn records_of_older_and_newer_agents_read() {
        // Written before the typed API: no observedGeneration, no objectCount, conditions
        // without observedGeneration.
        let old = serde_json::json!({
            "phase": "Ready", "message": "ok", "lastAppliedRevision": "abc",
            "conditions": [{"type": "Ready", "status": "True", "reason": "Available", "message": "", "lastTransitionTime": "2026-11-01T00:00:00Z"}],
            "inventory": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": "ns", "name": "x", "hash": "h"}]
        });
        let s: ManagedClusterStatus = serde_json::from_value(old).unwrap();
        assert_eq!(s.phase, Some(Phase::Ready));
        assert_eq!(s.observed_generation, None);
        assert_eq!(s.inventory.len(), 1);
        assert_eq!(s.conditions[0].type_, "Ready");
        // A newer agent's record: a phase and fields this one does not know.
        let new = serde_json::json!({"phase": "Hibernating", "hibernatedAt": "2027-01-01T00:00:00Z",
            "inventory": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}]});
        let s: ManagedClusterStatus = serde_json::from_value(new).unwrap();
        assert_eq!(s.phase, Some(Phase::Unknown));
        assert_eq!(s.inventory.len(), 1, "the inventory survives");
        // An empty status object reads as the default.
        let s: ManagedClusterStatus = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(s, ManagedClusterStatus::default());
    }

    #[test]
    fn the_schema_keeps_the_fields_and_columns() {
        let crd = serde_json::to_value(crd()).unwrap();
        let version = &crd["spec"]["versions"][0];
        let status = &version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
        for field in [
            "phase",
            "message",
            "lastAppliedRevision",
            "lastAttemptedRevision",
            "desiredHash",
            "conditions",
            "inventory",
            "objectCount",
            "observedGeneration",
            "stage",
            "stageSince",
            "stageProgress",
            "wave",
            "backup",
        ] {
            assert!(status.get(field).is_some(), "status.{field} in {status:#}");
        }
        let inventory = &status["inventory"]["items"]["properties"];
        for field in ["generation", "fields", "hash", "namespace"] {
            assert!(inventory.get(field).is_some(), "inventory {field}");
        }
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            columns,
            [
                "Management",
                "Phase",
                "Stage",
                "Wave",
                "Revision",
                "Objects",
                "Age",
                "Message"
            ]
        );
        assert_eq!(version["subresources"]["status"], serde_json::json!({}));
        assert_eq!(crd["spec"]["names"]["shortNames"][0], "mc");
    }
}
