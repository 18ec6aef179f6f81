//! What is live on the management cluster, as far as a plan needs to know.
//!
//! A plan decides "unchanged" from four facts per object: does it exist, which content hash did
//! capstan apply (an annotation), which generation is it at (drift bumps it), and which fleet
//! cluster its label says it belongs to (prune deletes only its own); health needs the rollout
//! status of Cluster API Clusters, control planes and MachineDeployments ([`RolloutStatus`]).
//! [`Live`] keeps exactly those facts ([`LiveObject`], about a hundred bytes) per object, plus the
//! recorded status of every managed cluster, never whole objects: 12,000 objects cost about
//! 3 MiB.
//!
//! The agent fills it (one list per kind for one-shot commands, one watch per kind in the daemon)
//! and keeps it current; this is the store, with the facts as data.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

pub use capstan_templates::identity::SELECTOR;
use capstan_templates::identity::{
    ADOPT_ANNOTATION, CLUSTER_LABEL, FIELD_MANAGER, HASH_ANNOTATION, hash_json, owned_fields,
};

use crate::ObjectRef;
use crate::health::{MachineSet, RolloutStatus};
use crate::status::Recorded;

/// The facts a plan needs about one live object.
#[derive(Debug, Clone, Default)]
pub struct LiveObject {
    /// `metadata.generation`.
    pub generation: i64,
    /// The content hash capstan applied it with.
    pub hash: Option<Box<str>>,
    /// The fleet cluster its `capstan.dev/cluster` label names.
    pub cluster: Option<Box<str>>,
    /// The rollout status of the kinds health reads ([`read_whole`]).
    pub rollout: Option<Arc<RolloutStatus>>,
    /// Has a deletion timestamp (finalizers pending).
    pub deleting: bool,
    /// The hash of the fields capstan owns ([`capstan_templates::identity::owned_fields`]).
    pub fields: Option<Box<str>>,
    /// `metadata.resourceVersion` as a number (0: unknown). Not a fact of its own (every write
    /// moves it, so equality ignores it): it only tells which of two reports of an object is
    /// the later one ([`Live::put`]).
    pub resource_version: u64,
    /// `metadata.uid`, as the 128 bits of its UUID (None when it is not one): a deletion is made
    /// with it as a precondition, so it deletes the object whose labels were checked, never one
    /// created under the same name since.
    pub uid: Option<u128>,
    /// The cluster an admin marked it for adoption by ([`capstan_templates::identity::ADOPT_ANNOTATION`]).
    pub adopt: Option<Box<str>>,
}

impl PartialEq for LiveObject {
    fn eq(&self, other: &LiveObject) -> bool {
        self.generation == other.generation
            && self.hash == other.hash
            && self.cluster == other.cluster
            && self.rollout == other.rollout
            && self.deleting == other.deleting
            && self.fields == other.fields
            && self.uid == other.uid
            && self.adopt == other.adopt
    }
}

impl Eq for LiveObject {}

/// A UID as its 128 bits (None when it is not a UUID: then no deletion precondition uses it).
pub fn parse_uid(uid: &str) -> Option<u128> {
    let hex: String = uid.chars().filter(|c| *c != '-').collect();
    (hex.len() == 32 && uid.len() == 36)
        .then(|| u128::from_str_radix(&hex, 16).ok())
        .flatten()
}

/// A UID as Kubernetes writes it (lower-case hex, 8-4-4-4-12).
pub fn format_uid(uid: u128) -> String {
    let h = format!("{uid:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// A `resourceVersion` as a number (0 when it is not one).
fn resource_version(rv: Option<&str>) -> u64 {
    rv.and_then(|r| r.parse().ok()).unwrap_or(0)
}

impl LiveObject {
    /// From an object's metadata (a metadata-only list or watch).
    pub fn from_meta(meta: &ObjectMeta) -> LiveObject {
        LiveObject {
            generation: meta.generation.unwrap_or(0),
            hash: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(HASH_ANNOTATION))
                .map(|h| h.as_str().into()),
            cluster: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(CLUSTER_LABEL))
                .map(|c| c.as_str().into()),
            rollout: None,
            deleting: meta.deletion_timestamp.is_some(),
            // As `owned_fields` reads it from JSON, here from the typed entries.
            fields: meta.managed_fields.iter().flatten().find_map(|e| {
                (e.manager.as_deref() == Some(FIELD_MANAGER)
                    && e.operation.as_deref() == Some("Apply")
                    && e.subresource.as_deref().is_none_or(str::is_empty))
                .then(|| {
                    let f = e.fields_v1.as_ref().map(|f| &f.0).unwrap_or(&Value::Null);
                    hash_json(&serde_json::to_string(f).expect("values serialise")).into()
                })
            }),
            resource_version: resource_version(meta.resource_version.as_deref()),
            uid: meta.uid.as_deref().and_then(parse_uid),
            adopt: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(ADOPT_ANNOTATION))
                .map(|c| c.as_str().into()),
        }
    }

    /// From a whole object (an apply's answer, a full list), with its rollout status.
    pub fn from_value(obj: &Value) -> LiveObject {
        let meta = |k: &str| obj.pointer("/metadata").and_then(|m| m.get(k));
        LiveObject {
            generation: meta("generation").and_then(Value::as_i64).unwrap_or(0),
            hash: meta("annotations")
                .and_then(|a| a.get(HASH_ANNOTATION))
                .and_then(Value::as_str)
                .map(Into::into),
            cluster: meta("labels")
                .and_then(|l| l.get(CLUSTER_LABEL))
                .and_then(Value::as_str)
                .map(Into::into),
            rollout: Some(Arc::new(RolloutStatus::from_object(obj))),
            deleting: meta("deletionTimestamp").is_some(),
            fields: meta("managedFields").and_then(owned_fields).map(Into::into),
            resource_version: resource_version(meta("resourceVersion").and_then(Value::as_str)),
            uid: meta("uid").and_then(Value::as_str).and_then(parse_uid),
            adopt: meta("annotations")
                .and_then(|a| a.get(ADOPT_ANNOTATION))
                .and_then(Value::as_str)
                .map(Into::into),
        }
    }
}

/// The kinds whose lists hold everything of a set of references, one per group and kind.
pub fn kinds(refs: impl IntoIterator<Item = ObjectRef>) -> Vec<(String, String)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for r in refs {
        if seen.insert((r.group().to_string(), r.kind.clone())) {
            out.push((r.api_version, r.kind));
        }
    }
    out
}

/// Whether objects of a kind are read whole (their status matters for health and the upgrade
/// stages) rather than as metadata: Cluster API Clusters, KubeadmControlPlanes,
/// MachineDeployments, etcdadm's EtcdadmClusters and CAAPH's HelmChartProxies.
pub fn read_whole(api_version: &str, kind: &str) -> bool {
    matches!(
        (capstan_templates::identity::group(api_version), kind),
        ("cluster.x-k8s.io", "Cluster" | "MachineDeployment")
            | ("controlplane.cluster.x-k8s.io", "KubeadmControlPlane")
            | ("etcdcluster.cluster.x-k8s.io", "EtcdadmCluster")
            | ("addons.cluster.x-k8s.io", "HelmChartProxy")
    )
}

/// Live objects by [`ObjectRef::key`] and recorded statuses by cluster name. Shared (`&self`)
/// between the clusters of a pass and, in the daemon, the watches that keep it current.
#[derive(Debug, Default)]
pub struct Live {
    objects: RwLock<HashMap<String, LiveObject>>,
    records: RwLock<BTreeMap<String, Arc<Recorded>>>,
    /// MachineSets by `namespace/deployment/name` ([`MACHINE_SET_SELECTOR`]).
    machine_sets: RwLock<BTreeMap<String, MachineSet>>,
    /// Bare-metal Hardware by `namespace/name` ([`HARDWARE`]); None until it is read (no
    /// bare-metal cluster, no CRD, or refused to the agent).
    servers: RwLock<Option<BTreeMap<String, Server>>>,
    /// Kinds the API server refuses to list to the agent (RBAC), by `(group, kind)`, with its
    /// message: only the clusters that carry one fail ([`Live::denied`]); the others go on.
    denied: RwLock<BTreeMap<(String, String), String>>,
    /// Moves on every change of anything above: a reader that shows the state (the dashboard)
    /// knows when to look again without being told what changed.
    revision: std::sync::atomic::AtomicU64,
}

/// Selects the MachineSets Cluster API creates for MachineDeployments. They are not capstan's
/// (no capstan label, never in an inventory, never pruned), but health reads them: a
/// MachineDeployment's own counts lag behind them ([`crate::health`]).
pub const MACHINE_SET_SELECTOR: &str = "cluster.x-k8s.io/deployment-name";

/// The apiVersion and kind MachineSets are read as.
pub const MACHINE_SET: (&str, &str) = ("cluster.x-k8s.io/v1beta2", "MachineSet");

/// The apiVersion and kind bare-metal Hardware is read as: not capstan's (an admin's
/// inventory, applied from the management directory or by hand, so read whole, unlabelled),
/// but whether a rolling upgrade has spare servers is decided from it ([`crate::spare`]).
pub const HARDWARE: (&str, &str) = ("tinkerbell.org/v1alpha1", "Hardware");

/// Whether a kind's objects are machines drawn from [`HARDWARE`] (TinkerbellMachineTemplates):
/// a fleet with one reads the Hardware.
pub fn draws_on_hardware(api_version: &str, kind: &str) -> bool {
    kind == "TinkerbellMachineTemplate"
        && capstan_templates::identity::group(api_version) == "infrastructure.cluster.x-k8s.io"
}

/// One Hardware of the management cluster, as the gate needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// Its namespace (CAPT takes Hardware of the machine's namespace only).
    pub namespace: String,
    /// Its labels (the owner label says a machine holds it).
    pub labels: BTreeMap<String, String>,
}

impl Server {
    /// Whether no machine holds it.
    pub fn free(&self) -> bool {
        !self
            .labels
            .contains_key(capstan_layout::hardware::OWNER_LABEL)
    }
}

/// A Hardware's facts, from its metadata: `(namespace/name, server)`.
pub fn server_of(meta: &ObjectMeta) -> (String, Server) {
    let namespace = meta.namespace.clone().unwrap_or_default();
    (
        format!("{namespace}/{}", meta.name.as_deref().unwrap_or("")),
        Server {
            namespace,
            labels: meta.labels.clone().unwrap_or_default(),
        },
    )
}

/// Whether a kind's objects have MachineSets health must read (MachineDeployments).
pub fn has_machine_sets(api_version: &str, kind: &str) -> bool {
    kind == "MachineDeployment"
        && capstan_templates::identity::group(api_version) == "cluster.x-k8s.io"
}

/// The key of a MachineSet in [`Live`], from its metadata: `namespace/deployment/name`.
pub fn machine_set_key(meta: &ObjectMeta) -> String {
    let deployment = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(MACHINE_SET_SELECTOR))
        .map(String::as_str)
        .unwrap_or("");
    format!(
        "{}/{deployment}/{}",
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref().unwrap_or("")
    )
}

impl Live {
    /// A number that moves whenever anything here may have changed.
    pub fn revision(&self) -> u64 {
        self.revision.load(std::sync::atomic::Ordering::Acquire)
    }

    fn changed(&self) {
        self.revision
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// What `f` makes of each object's key and facts, where it makes something.
    pub fn scan<T>(&self, mut f: impl FnMut(&str, &LiveObject) -> Option<T>) -> Vec<T> {
        self.objects
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(|(k, o)| f(k, o))
            .collect()
    }

    /// Why the API server refuses the agent objects of this kind, when it does.
    pub fn denied(&self, api_version: &str, kind: &str) -> Option<String> {
        let group = capstan_templates::identity::group(api_version).to_string();
        self.denied
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(group, kind.to_string()))
            .cloned()
    }

    /// Records whether a kind is refused (`Some(message)`) or readable (`None`).
    pub fn set_denied(&self, group: &str, kind: &str, refused: Option<String>) {
        self.changed();
        let mut denied = self.denied.write().unwrap_or_else(|p| p.into_inner());
        let key = (group.to_string(), kind.to_string());
        match refused {
            Some(message) => {
                denied.insert(key, message);
            }
            None => {
                denied.remove(&key);
            }
        }
    }

    /// The live facts of a reference.
    pub fn get(&self, r: &ObjectRef) -> Option<LiveObject> {
        self.objects
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&r.key())
            .cloned()
    }

    /// The MachineSets of a MachineDeployment.
    pub fn machine_sets(&self, namespace: &str, deployment: &str) -> Vec<MachineSet> {
        let prefix = format!("{namespace}/{deployment}/");
        self.machine_sets
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(_, s)| s.clone())
            .collect()
    }

    /// The MachineSets, to update (the lists and watches that fill the store).
    pub fn machine_sets_mut(
        &self,
    ) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, MachineSet>> {
        self.changed();
        self.machine_sets.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The bare-metal Hardware, when it was read.
    pub fn servers(&self) -> Option<Vec<Server>> {
        self.servers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|s| s.values().cloned().collect())
    }

    /// The Hardware, to update (the list and the watch that fill it); `None` in it: read.
    pub fn servers_mut(&self) -> std::sync::RwLockWriteGuard<'_, Option<BTreeMap<String, Server>>> {
        self.changed();
        self.servers.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Records what an apply returned, so later lookups (and the watch that will report the same
    /// write) see it — unless the watch already reported a later write (a controller that acted
    /// on the object before the apply's answer came back): the cache keeps the later one. Returns
    /// the facts of the apply's answer.
    ///
    /// Resource versions are etcd's revision numbers on every API server capstan has met; a
    /// version that is not a number compares as 0 and the apply's answer is kept.
    pub fn put(&self, r: &ObjectRef, applied: &Value) -> LiveObject {
        let mut facts = LiveObject::from_value(applied);
        // Watches of other kinds carry metadata only: keep the facts comparable with theirs.
        if !read_whole(&r.api_version, &r.kind) {
            facts.rollout = None;
        }
        let mut objects = self.objects_mut();
        match objects.get(&r.key()) {
            Some(seen) if seen.resource_version > facts.resource_version => {}
            _ => {
                objects.insert(r.key(), facts.clone());
            }
        }
        facts
    }

    /// The fleet cluster the facts of `key` name ([`LiveObject::cluster`]).
    pub fn cluster_of(&self, key: &str) -> Option<String> {
        self.objects
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .and_then(|o| o.cluster.as_deref().map(str::to_string))
    }

    /// Forgets a deleted object.
    pub fn remove(&self, r: &ObjectRef) {
        self.objects_mut().remove(&r.key());
    }

    /// Every recorded status.
    pub fn records(&self) -> BTreeMap<String, Arc<Recorded>> {
        self.records
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// One cluster's recorded status.
    pub fn record(&self, name: &str) -> Option<Arc<Recorded>> {
        self.records
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Replaces every recorded status.
    pub fn set_records(&self, records: BTreeMap<String, Recorded>) {
        self.changed();
        *self.records.write().unwrap_or_else(|p| p.into_inner()) =
            records.into_iter().map(|(k, v)| (k, Arc::new(v))).collect();
    }

    /// Replaces every recorded status with shared ones.
    pub fn replace_records(&self, records: BTreeMap<String, Arc<Recorded>>) {
        self.changed();
        *self.records.write().unwrap_or_else(|p| p.into_inner()) = records;
    }

    /// Records one cluster's status as written (`None`: removed). Returns whether one was
    /// recorded before.
    pub fn set_record(&self, name: &str, record: Option<Recorded>) -> bool {
        self.changed();
        let mut records = self.records.write().unwrap_or_else(|p| p.into_inner());
        match record {
            Some(r) => records.insert(name.to_string(), Arc::new(r)),
            None => records.remove(name),
        }
        .is_some()
    }

    /// The objects' facts, to update (the lists and watches that fill the store).
    pub fn objects_mut(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, LiveObject>> {
        self.changed();
        self.objects.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// The [`ObjectRef::key`] of an object of a group and kind.
pub fn key_of(group: &str, kind: &str, meta: &ObjectMeta) -> String {
    crate::key(
        group,
        kind,
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref().unwrap_or(""),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn facts_from_a_whole_object_and_from_metadata_agree() {
        let v = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c", "namespace": "ns", "generation": 3, "annotations": {HASH_ANNOTATION: "abc"},
                         "labels": {CLUSTER_LABEL: "dev"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Thing", "name": "t", "uid": "u"}]},
            "status": {"observedGeneration": 3, "conditions": [{"type": "Ready", "status": "False"}, {"type": "Available", "status": "True", "reason": "Available"}]}
        });
        let whole = LiveObject::from_value(&v);
        assert_eq!(whole.generation, 3);
        assert_eq!(whole.hash.as_deref(), Some("abc"));
        assert_eq!(whole.cluster.as_deref(), Some("dev"));
        let rollout = whole.rollout.clone().unwrap();
        assert_eq!(rollout.observed_generation, 3);
        assert_eq!(&*rollout.condition("Available").unwrap().status, "True");
        let meta: ObjectMeta = serde_json::from_value(v["metadata"].clone()).unwrap();
        assert_eq!(
            LiveObject {
                rollout: whole.rollout.clone(),
                ..LiveObject::from_meta(&meta)
            },
            whole
        );
        assert_eq!(
            key_of("cluster.x-k8s.io", "Cluster", &meta),
            ObjectRef::of(&v).key()
        );
    }

    #[test]
    fn an_apply_answer_does_not_replace_a_later_watch_event() {
        let live = Live::default();
        let obj = |rv: &str, observed: i64| {
            json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
                "metadata": {"name": "c", "namespace": "ns", "generation": 1, "resourceVersion": rv},
                "status": {"observedGeneration": observed}})
        };
        let r = ObjectRef::of(&obj("1", 0));
        // The controller's status write (rv 6) reached the watch before the apply's answer (rv 5).
        live.objects_mut()
            .insert(r.key(), LiveObject::from_value(&obj("6", 1)));
        let answered = live.put(&r, &obj("5", 0));
        assert_eq!(answered.rollout.unwrap().observed_generation, 0);
        assert_eq!(
            live.get(&r).unwrap().rollout.unwrap().observed_generation,
            1,
            "the later report stays"
        );
        // The usual order: the apply's answer is the latest.
        live.put(&r, &obj("9", 1));
        assert_eq!(live.get(&r).unwrap().resource_version, 9);
    }

    #[test]
    fn health_kinds_are_read_whole() {
        assert!(read_whole("cluster.x-k8s.io/v1beta2", "Cluster"));
        assert!(read_whole("cluster.x-k8s.io/v1beta2", "MachineDeployment"));
        assert!(read_whole(
            "controlplane.cluster.x-k8s.io/v1beta2",
            "KubeadmControlPlane"
        ));
        assert!(!read_whole(
            "anywhere.eks.amazonaws.com/v1alpha1",
            "Cluster"
        ));
        assert!(!read_whole(
            "infrastructure.cluster.x-k8s.io/v1beta2",
            "DevMachineTemplate"
        ));
    }

    #[test]
    fn one_list_per_group_and_kind() {
        let r = |v: &str, k: &str| ObjectRef {
            api_version: v.into(),
            kind: k.into(),
            namespace: "n".into(),
            name: "x".into(),
            hash: String::new(),
            generation: 0,
            fields: String::new(),
        };
        let ks = kinds([
            r("cluster.x-k8s.io/v1beta2", "Cluster"),
            r("cluster.x-k8s.io/v1beta1", "Cluster"),
            r("anywhere.eks.amazonaws.com/v1alpha1", "Cluster"),
            r("v1", "Secret"),
        ]);
        assert_eq!(ks.len(), 3);
    }
}
