//! Status: one `ManagedCluster` (capstan.dev/v1alpha1, [`api`]) per fleet cluster in
//! `capstan-system`.
//!
//! It holds the last applied revision, the phase, conditions with reasons, and the inventory of
//! what capstan applied for the cluster (what prune works from, so it lives on the management
//! cluster, next to the objects, and survives agent restarts). `kubectl get managedclusters -n
//! capstan-system` shows it through printer columns. The object is written only when its content
//! changes, so a reconcile that changes nothing writes nothing.
//!
//! This module holds the record as data (the CRD's types in [`api`], what a pass reads back as
//! [`Recorded`], what it writes: [`to_record`], the conditions' types, statuses and reasons in
//! [`conditions`]); reading and writing it is the agent's.

pub mod api;
pub mod conditions;

use std::collections::BTreeMap;

use capstan_templates::JsonText;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::Value;

pub use api::{
    AddonsStatus, ManagedCluster, ManagedClusterSpec, ManagedClusterStatus, Phase, STAGES_KEPT,
    StageRecord,
};
pub use conditions::{ConditionStatus, ConditionType, Reason, condition};

use crate::ObjectRef;

/// Namespace of the status objects.
pub const NAMESPACE: &str = "capstan-system";
/// apiVersion of the status objects.
pub const API_VERSION: &str = "capstan.dev/v1alpha1";
/// The CRD's name.
pub const CRD_NAME: &str = "managedclusters.capstan.dev";
/// What to do when the CRD is missing or too old.
pub const RUN_INSTALL: &str =
    "run `capstan install` (it installs the CRD, the ServiceAccount and its RBAC, and the agent)";

/// A status object as read back (or as just written): spec, generation and status.
///
/// The agent keeps one for every cluster for as long as it runs (the watch on ManagedClusters).
/// Most of it is the inventory, a dozen object references of six strings each — about 3.7 KB a
/// cluster as `ObjectRef`s, the largest part of the agent's heap after the rendered objects — so
/// the inventory is held as compressed JSON text ([`JsonText`]) and parsed when a pass asks for
/// it, once per cluster run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Recorded {
    /// Management cluster.
    pub management: String,
    /// The cluster's directory in the repository.
    pub directory: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// The status, without its inventory (see [`Recorded::inventory`]).
    pub status: ManagedClusterStatus,
    /// `status.inventory`, as JSON text; `None` when empty.
    inventory: Option<JsonText>,
    /// A hash of the inventory's kinds (see [`Recorded::kinds_key`]).
    kinds: u64,
    /// The directory an admin lets take the cluster back after it was orphaned
    /// ([`capstan_templates::identity::ADOPT_ANNOTATION`] on the ManagedCluster).
    pub adopt: Option<String>,
    /// `metadata.resourceVersion` of the object this was read from: the precondition of the
    /// next status write, so a writer that read an older object (a replica that no longer
    /// leads, a write delayed in the network) fails instead of overwriting a newer record.
    pub resource_version: Option<String>,
    /// `metadata.creationTimestamp` of the object this was read from (the dashboard's age).
    pub created: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

impl Recorded {
    /// From a ManagedCluster object.
    pub fn from_object(obj: &ManagedCluster) -> Recorded {
        Recorded {
            adopt: obj
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(capstan_templates::identity::ADOPT_ANNOTATION))
                .cloned(),
            resource_version: obj.metadata.resource_version.clone(),
            created: obj.metadata.creation_timestamp.clone(),
            ..Recorded::new(
                obj.spec.management.clone(),
                obj.spec.directory.clone(),
                obj.metadata.generation.unwrap_or(0),
                obj.status.clone().unwrap_or_default(),
            )
        }
    }

    /// From its parts; `status.inventory` is moved into the compact form.
    pub fn new(
        management: String,
        directory: String,
        generation: i64,
        mut status: ManagedClusterStatus,
    ) -> Recorded {
        let refs = std::mem::take(&mut status.inventory);
        let kinds = kinds_key(&refs);
        let inventory = (!refs.is_empty()).then(|| {
            JsonText::new(&serde_json::to_value(refs).expect("object references serialise"))
        });
        Recorded {
            management,
            directory,
            generation,
            status,
            inventory,
            kinds,
            adopt: None,
            resource_version: None,
            created: None,
        }
    }

    /// Equal for two records whose inventories hold the same kinds (group and kind, whatever
    /// their versions and names): preparing a revision needs every recorded kind, and clusters
    /// of a fleet hold a few sets of kinds between them, so one inventory of each key is read
    /// instead of all of them (10,000 decompressed and parsed per revision otherwise).
    pub fn kinds_key(&self) -> u64 {
        self.kinds
    }

    /// Whether `status` is what is recorded, inventory included.
    pub fn records(&self, status: &ManagedClusterStatus) -> bool {
        self.inventory() == status.inventory
            && self.status
                == ManagedClusterStatus {
                    inventory: Vec::new(),
                    ..status.clone()
                }
    }

    /// The recorded inventory.
    pub fn inventory(&self) -> Vec<ObjectRef> {
        self.inventory.as_ref().map_or_else(Vec::new, |t| {
            serde_json::from_value(t.value()).expect("serialised from object references")
        })
    }
}

/// The hash of the distinct (group, kind) pairs of `refs`, in order.
fn kinds_key(refs: &[ObjectRef]) -> u64 {
    use std::hash::{Hash, Hasher};
    let kinds: std::collections::BTreeSet<(&str, &str)> =
        refs.iter().map(|r| (r.group(), r.kind.as_str())).collect();
    // SipHash with fixed keys: the same in every process, and 64 bits make a collision between
    // the few sets of a fleet negligible.
    let mut h = std::hash::DefaultHasher::new();
    kinds.hash(&mut h);
    h.finish()
}

/// The schema of the served v1alpha1 version of a CRD.
pub fn crd_schema(crd: &Value) -> Value {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "v1alpha1" && v["served"] == true)
        .and_then(|v| v.pointer("/schema/openAPIV3Schema"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// The properties `expected` has and `installed` lacks, as dotted paths.
pub fn missing_fields(installed: &Value, expected: &Value) -> Vec<String> {
    fn walk(installed: &Value, expected: &Value, path: &str, out: &mut Vec<String>) {
        if installed.is_null() {
            out.push(if path.is_empty() {
                "a v1alpha1 schema".into()
            } else {
                path.to_string()
            });
            return;
        }
        if let Some(props) = expected.get("properties").and_then(Value::as_object) {
            for (name, schema) in props {
                let sub = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                let have = installed
                    .pointer(&format!("/properties/{name}"))
                    .unwrap_or(&Value::Null);
                walk(have, schema, &sub, out);
            }
        }
        if let Some(items) = expected.get("items") {
            walk(
                installed.get("items").unwrap_or(&Value::Null),
                items,
                &format!("{path}[]"),
                out,
            );
        }
    }
    let mut out = Vec::new();
    walk(installed, expected, "", &mut out);
    out
}

/// Now, to the second.
pub fn now() -> Time {
    let t = k8s_openapi::jiff::Timestamp::now();
    Time(t.round(k8s_openapi::jiff::Unit::Second).unwrap_or(t))
}

/// Now, as RFC 3339 to the second (what `stageSince` holds).
pub fn timestamp() -> String {
    now().0.to_string()
}

/// How long ago an RFC 3339 time was (None: not a time, or in the future).
pub fn age(rfc3339: &str) -> Option<std::time::Duration> {
    let t: k8s_openapi::jiff::Timestamp = rfc3339.parse().ok()?;
    let d = k8s_openapi::jiff::Timestamp::now().duration_since(t);
    std::time::Duration::try_from(d).ok()
}

/// The status to record: what the pass computed, with the transition times of conditions whose
/// status did not change kept, the object count, and the generation it describes.
pub fn to_record(
    status: &ManagedClusterStatus,
    generation: i64,
    previous: Option<&Recorded>,
) -> ManagedClusterStatus {
    let prev: BTreeMap<&str, &Condition> = previous
        .map(|p| {
            p.status
                .conditions
                .iter()
                .map(|c| (c.type_.as_str(), c))
                .collect()
        })
        .unwrap_or_default();
    let mut out = status.clone();
    out.observed_generation = Some(generation);
    out.object_count = out.inventory.len() as i64;
    for c in &mut out.conditions {
        c.observed_generation = Some(generation);
        c.last_transition_time = match prev.get(c.type_.as_str()) {
            Some(p) if p.status == c.status => p.last_transition_time.clone(),
            _ => now(),
        };
    }
    out
}

/// Whether `previous` already records this spec: the management cluster and directory, at a
/// generation the API server gave it (else the object itself must be written first).
pub fn spec_written(previous: Option<&Recorded>, management: &str, directory: &str) -> bool {
    previous
        .is_some_and(|p| p.management == management && p.directory == directory && p.generation > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConditionStatus::{False, True};
    use ConditionType::{Applied, Ready};
    use serde_json::json;

    #[test]
    fn an_older_crd_lacks_fields_a_newer_one_does_not() {
        let expected = crd_schema(&serde_json::to_value(api::crd()).unwrap());
        assert!(missing_fields(&expected, &expected).is_empty());
        let mut older = expected.clone();
        older["properties"]["status"]["properties"]
            .as_object_mut()
            .unwrap()
            .remove("observedGeneration");
        older["properties"]["status"]["properties"]["inventory"]["items"]["properties"]
            .as_object_mut()
            .unwrap()
            .remove("fields");
        assert_eq!(
            missing_fields(&older, &expected),
            ["status.inventory[].fields", "status.observedGeneration"]
        );
        let mut newer = expected.clone();
        newer["properties"]["status"]["properties"]["progress"] = json!({"type": "string"});
        assert!(missing_fields(&newer, &expected).is_empty());
        assert_eq!(
            missing_fields(&Value::Null, &expected),
            ["a v1alpha1 schema"]
        );
    }

    #[test]
    fn a_record_gives_its_inventory_back_and_knows_the_status_it_holds() {
        let cm = |name: &str| {
            let mut r = ObjectRef::of(
                &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "eksa-system"}}),
            );
            r.hash = format!("{:016x}", name.len());
            r.generation = 3;
            r.fields = "00ff00ff00ff00ff".into();
            r
        };
        let status = ManagedClusterStatus {
            message: "applied".into(),
            inventory: vec![cm("a"), cm("bb"), cm("ccc")],
            conditions: vec![condition(Ready, True, Reason::Available, "")],
            ..Default::default()
        };
        let rec = Recorded::new(
            "mgmt".into(),
            "clusters/mgmt/workload-clusters/w".into(),
            2,
            status.clone(),
        );
        assert_eq!(rec.inventory(), status.inventory);
        assert!(rec.status.inventory.is_empty(), "held once, compactly");
        assert!(rec.records(&status));
        let mut other = status.clone();
        other.inventory[1].generation = 4;
        assert!(!rec.records(&other), "an inventory entry changed");
        let mut other = status.clone();
        other.message = "planned".into();
        assert!(!rec.records(&other));
        let mut other = status.clone();
        other.conditions[0].status = "False".into();
        assert!(!rec.records(&other));
        let empty = Recorded::new(
            String::new(),
            String::new(),
            1,
            ManagedClusterStatus::default(),
        );
        assert!(empty.inventory().is_empty());
        assert!(empty.records(&ManagedClusterStatus::default()));
        assert!(!empty.records(&status));
    }

    #[test]
    fn records_of_the_same_kinds_share_a_kinds_key() {
        let obj = |api: &str, kind: &str, name: &str| {
            ObjectRef::of(
                &json!({"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": "eksa-system"}}),
            )
        };
        let rec = |refs: Vec<ObjectRef>| {
            Recorded::new(
                String::new(),
                String::new(),
                1,
                ManagedClusterStatus {
                    inventory: refs,
                    ..Default::default()
                },
            )
        };
        let md = "cluster.x-k8s.io/v1beta2";
        let a = rec(vec![
            obj(md, "MachineDeployment", "a-md-0"),
            obj(md, "Cluster", "a"),
            obj("v1", "ConfigMap", "a"),
        ]);
        // Other names, another order, another version of the group, a repeated kind.
        let b = rec(vec![
            obj("v1", "ConfigMap", "b"),
            obj("cluster.x-k8s.io/v1beta1", "Cluster", "b"),
            obj(md, "MachineDeployment", "b-md-0"),
            obj(md, "MachineDeployment", "b-md-1"),
        ]);
        assert_eq!(a.kinds_key(), b.kinds_key());
        let c = rec(vec![
            obj(md, "MachineDeployment", "c-md-0"),
            obj(md, "Cluster", "c"),
            obj("v1", "Secret", "c"),
        ]);
        assert_ne!(a.kinds_key(), c.kinds_key(), "another kind");
        let d = rec(vec![
            obj(md, "MachineDeployment", "d-md-0"),
            obj(md, "Cluster", "d"),
        ]);
        assert_ne!(a.kinds_key(), d.kinds_key(), "a kind fewer");
        assert_ne!(a.kinds_key(), rec(Vec::new()).kinds_key());
    }

    #[test]
    fn transition_times_are_kept_while_a_condition_holds() {
        let t0 = Time("2026-11-01T00:00:00Z".parse().unwrap());
        let mut ready = condition(Ready, True, Reason::Available, "");
        ready.last_transition_time = t0.clone();
        let previous = Recorded::new(
            String::new(),
            String::new(),
            1,
            ManagedClusterStatus {
                conditions: vec![ready],
                ..Default::default()
            },
        );
        let st = ManagedClusterStatus {
            conditions: vec![
                condition(Ready, True, Reason::Available, "still"),
                condition(Applied, True, Reason::Applied, ""),
            ],
            ..Default::default()
        };
        let out = to_record(&st, 1, Some(&previous));
        assert_eq!(out.conditions[0].last_transition_time, t0);
        assert_ne!(out.conditions[1].last_transition_time, t0);
        assert_eq!(out.observed_generation, Some(1));
        let flipped = ManagedClusterStatus {
            conditions: vec![condition(Ready, False, Reason::Progressing, "")],
            ..Default::default()
        };
        assert_ne!(
            to_record(&flipped, 1, Some(&previous)).conditions[0].last_transition_time,
            t0
        );
    }
}
