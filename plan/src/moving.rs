//! What a move of clusters from one management cluster to another takes with it, in which
//! order, and when it must refuse: the decisions of `capstan move`, pure, so that the command,
//! its resume after a crash and the tests all work from one answer.
//!
//! `clusterctl move` walks owner references from the Cluster down and moves what it reaches,
//! plus what carries its labels; the objects outside that chain stay behind (the Secrets a
//! provider or an operator made without an owner, kubernetes-sigs/cluster-api#3603, #1404) and
//! the moved cluster breaks later. Here an object belongs to a cluster when:
//!
//! 1. it is the Cluster API Cluster or the EKS Anywhere Cluster of that name, capstan's
//!    ManagedCluster whose inventory holds that Cluster, or it is labelled for it (`cluster.x-k8s.io/cluster-name`, `capstan.dev/cluster`)
//!    — a label is the final word: such an object belongs to its labelled cluster only;
//! 2. it is a Secret or ConfigMap of the cluster's namespace named `<cluster>-…` (the kubeconfig,
//!    the CAs, etcd and service-account keys, provider credentials), whether owned or not; where
//!    two clusters' names both prefix it, the longer name wins (`w-2-kubeconfig` is w-2's);
//! 3. an object it belongs to owns it, or refers to it from its `spec` (a `{kind, name}`
//!    reference: infrastructure, control plane, bootstrap and machine templates, EKS-A's
//!    datacenter and machine configs, identities, credentials Secrets);
//! 4. it selects the cluster (a ClusterResourceSet's or a HelmChartProxy's `clusterSelector`);
//! 5. it is the EKSARelease (in EKS-A's release namespace) that the cluster's EKS-A Cluster
//!    names by its `spec.eksaVersion`: EKS-A's controllers read the release from it.
//!
//! An object that also belongs to a cluster that stays, or is cluster-scoped, is **shared**: it
//! is copied to the target but not deleted at the source, so the cluster that stays keeps it.
//!
//! The order is owners before what they own, since a copy's owner references name the new
//! UIDs of copies made before it. The source is emptied in the reverse order.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use capstan_layout::fleet::RELEASE_NAMESPACE;
use capstan_templates::identity::{self, CLUSTER_LABEL, MOVED_FROM_ANNOTATION};
use capstan_templates::release::eksa_release_name;
use serde_json::{Value, json};

use crate::health::{self, Observed, RolloutStatus};

/// Cluster API's label naming the cluster of an object.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// The label Cluster API puts on a MachineSet naming its MachineDeployment.
const DEPLOYMENT_NAME_LABEL: &str = "cluster.x-k8s.io/deployment-name";
/// Where capstan keeps its ManagedCluster records.
pub const RECORDS_NAMESPACE: &str = "capstan-system";

/// A Cluster API Cluster: namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterKey {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl fmt::Display for ClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl std::str::FromStr for ClusterKey {
    type Err = String;
    fn from_str(s: &str) -> Result<ClusterKey, String> {
        match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(ClusterKey {
                    namespace: ns.into(),
                    name: name.into(),
                })
            }
            _ => Err(format!("{s:?}: a cluster is NAMESPACE/NAME")),
        }
    }
}

fn text<'a>(o: &'a Value, pointer: &str) -> &'a str {
    o.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn uid(o: &Value) -> &str {
    text(o, "/metadata/uid")
}

fn label<'a>(o: &'a Value, key: &str) -> Option<&'a str> {
    o.pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

fn group_of(o: &Value) -> &str {
    identity::group(text(o, "/apiVersion"))
}

/// An object's identity across both ends of a move: `group/Kind/namespace/name` (a Cluster API
/// Cluster and an EKS Anywhere Cluster share kind and name).
pub fn object_key(o: &Value) -> String {
    format!("{}/{}", group_of(o), identity::subject_of(o))
}

/// Whether `o` is a Cluster API Cluster.
pub fn is_capi_cluster(o: &Value) -> bool {
    text(o, "/kind") == "Cluster" && group_of(o) == "cluster.x-k8s.io"
}

/// Whether `o` is paused for Cluster API: `spec.paused`, or the `cluster.x-k8s.io/paused`
/// annotation.
pub fn is_paused(o: &Value) -> bool {
    o.pointer("/spec/paused").and_then(Value::as_bool) == Some(true)
        || o.pointer("/metadata/annotations")
            .and_then(|a| a.get("cluster.x-k8s.io/paused"))
            .is_some()
}

/// Orders objects so that every owner comes before what it owns (and otherwise as given).
/// Owners missing from the set hold nothing back; a cycle is broken in input order.
pub fn owners_first(objects: Vec<Value>) -> Vec<Value> {
    let order = owners_first_of(&objects, (0..objects.len()).collect());
    let mut slots: Vec<Option<Value>> = objects.into_iter().map(Some).collect();
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}

/// [`owners_first`] of the objects at `indices`: the indices reordered.
pub fn owners_first_of(objects: &[Value], indices: Vec<usize>) -> Vec<usize> {
    let uids: BTreeSet<&str> = indices.iter().map(|&i| uid(&objects[i])).collect();
    let owners = |o: &Value| -> Vec<String> {
        o.pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| r.get("uid").and_then(Value::as_str))
            .filter(|u| uids.contains(*u))
            .map(str::to_string)
            .collect()
    };
    let mut placed: BTreeSet<String> = BTreeSet::new();
    let mut pending = indices;
    let mut out = Vec::with_capacity(pending.len());
    while !pending.is_empty() {
        let before = pending.len();
        let mut rest = Vec::new();
        for i in pending {
            if owners(&objects[i]).iter().all(|u| placed.contains(u)) {
                placed.insert(uid(&objects[i]).to_string());
                out.push(i);
            } else {
                rest.push(i);
            }
        }
        if rest.len() == before {
            let first = rest.remove(0);
            placed.insert(uid(&objects[first]).to_string());
            out.push(first);
        }
        pending = rest;
    }
    out
}

/// The object as it is created anew elsewhere: without what the server assigns (the status
/// kept), its owner references pointing at the new UIDs of copied owners, dropped where the
/// owner was not copied.
pub fn fresh(o: &Value, new_uids: &BTreeMap<String, String>) -> Value {
    let mut v = o.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            meta.remove(k);
        }
        if let Some(refs) = meta
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            refs.retain_mut(|r| {
                let old = r.get("uid").and_then(Value::as_str).unwrap_or("");
                match new_uids.get(old) {
                    Some(new) => {
                        r["uid"] = json!(new);
                        true
                    }
                    None => false,
                }
            });
            if refs.is_empty() {
                meta.remove("ownerReferences");
            }
        }
    }
    v
}

/// The copy of source object `o` that a move creates in the target: [`fresh`], marked with the
/// source UID ([`MOVED_FROM_ANNOTATION`]) and without finalizers (the target's controllers add
/// their own once the cluster is unpaused).
pub fn copy_of(o: &Value, new_uids: &BTreeMap<String, String>) -> Value {
    let mut v = fresh(o, new_uids);
    let source_uid = uid(o).to_string();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("finalizers");
        let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(a) = annotations.as_object_mut() {
            a.insert(MOVED_FROM_ANNOTATION.into(), json!(source_uid));
        }
    }
    v
}

/// The owner references a shared object kept at the source is left with once the move deletes
/// the objects whose source UIDs are `deleted`: the source's garbage collector deletes an object
/// whose owners are all gone, and the cluster that stays still needs it. `None` when it names
/// none of them (nothing to change).
pub fn kept_owners(o: &Value, deleted: &BTreeSet<String>) -> Option<Vec<Value>> {
    let refs = o
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?;
    let kept: Vec<Value> = refs
        .iter()
        .filter(|r| !r["uid"].as_str().is_some_and(|u| deleted.contains(u)))
        .cloned()
        .collect();
    (kept.len() < refs.len()).then_some(kept)
}

/// One object of a move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its index in the objects given to [`plan`].
    pub index: usize,
    /// `Kind/namespace/name`.
    pub subject: String,
    /// Copied but kept at the source: it also belongs to a cluster that stays, or is
    /// cluster-scoped.
    pub shared: bool,
}

/// What a move takes, in the order it creates them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MovePlan {
    /// The clusters moved.
    pub clusters: Vec<ClusterKey>,
    /// The objects, owners first.
    pub objects: Vec<Member>,
}

impl MovePlan {
    /// Objects per kind (`Kind.group`), in the order the kinds first come.
    pub fn kinds(&self, objects: &[Value]) -> Vec<(String, usize)> {
        let mut out: Vec<(String, usize)> = Vec::new();
        for m in &self.objects {
            let o = &objects[m.index];
            let group = group_of(o);
            let kind = if group.is_empty() {
                text(o, "/kind").to_string()
            } else {
                format!("{}.{group}", text(o, "/kind"))
            };
            match out.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, n)) => *n += 1,
                None => out.push((kind, 1)),
            }
        }
        out
    }
}

/// Why a move does not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No such Cluster API Cluster at the source.
    NoSuchCluster(ClusterKey),
    /// The cluster is being deleted.
    Deleting(ClusterKey),
    /// The cluster is not Ready, or is rolling out: moving it would hand a half-done rollout
    /// to controllers that did not start it.
    NotReady {
        /// The cluster.
        cluster: ClusterKey,
        /// Health's first unmet rule.
        why: String,
    },
    /// The target holds an object of that name that is not a copy of this move's object.
    Exists {
        /// `Kind/namespace/name`.
        subject: String,
    },
    /// capstan's agent runs at the source: it would apply the moved clusters there again from
    /// Git once they are deleted, and two sets of controllers would own the same machines.
    AgentRunning {
        /// What shows it.
        why: String,
    },
    /// The target does not serve a kind the move needs: its CRD is missing.
    MissingKind {
        /// `Kind.group`.
        kind: String,
        /// How many objects of it the move has.
        objects: usize,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NoSuchCluster(c) => write!(f, "Cluster {c}: no such Cluster at the source"),
            Refusal::Deleting(c) => write!(f, "Cluster {c} is being deleted"),
            Refusal::NotReady { cluster, why } => write!(
                f,
                "Cluster {cluster} is not Ready or is rolling out ({why}): move it once it has settled"
            ),
            Refusal::Exists { subject } => write!(
                f,
                "{subject} already exists in the target and is not a copy of the source's (no {MOVED_FROM_ANNOTATION} naming it): remove or rename it"
            ),
            Refusal::AgentRunning { why } => write!(
                f,
                "capstan's agent runs at the source ({why}): it would apply the moved clusters there again from Git; stop it first (kubectl -n {RECORDS_NAMESPACE} scale deployment capstan --replicas 0)"
            ),
            Refusal::MissingKind { kind, objects } => write!(
                f,
                "the target does not serve {kind} ({objects} object(s) to move): install its CRD (the provider's controllers) there first"
            ),
        }
    }
}

/// Membership of every object in every cluster it belongs to (see the module docs).
struct Belonging<'a> {
    objects: &'a [Value],
    clusters: Vec<BTreeSet<usize>>,
}

/// The name of the cluster an object is labelled for.
fn labelled_cluster(o: &Value) -> Option<&str> {
    label(o, CLUSTER_NAME_LABEL).or_else(|| label(o, CLUSTER_LABEL))
}

/// Whether a `clusterSelector` selects a Cluster with these labels.
fn selects(selector: &Value, labels: &serde_json::Map<String, Value>, empty_matches: bool) -> bool {
    let get = |k: &str| labels.get(k).and_then(Value::as_str);
    let match_labels = selector.get("matchLabels").and_then(Value::as_object);
    let exprs = selector.get("matchExpressions").and_then(Value::as_array);
    if match_labels.is_none_or(|m| m.is_empty()) && exprs.is_none_or(|e| e.is_empty()) {
        return empty_matches;
    }
    let labels_hold = match_labels
        .into_iter()
        .flatten()
        .all(|(k, v)| get(k) == v.as_str());
    let exprs_hold = exprs.into_iter().flatten().all(|e| {
        let key = text(e, "/key");
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        match text(e, "/operator") {
            "In" => get(key).is_some_and(|v| values.contains(&v)),
            "NotIn" => get(key).is_none_or(|v| !values.contains(&v)),
            "Exists" => get(key).is_some(),
            "DoesNotExist" => get(key).is_none(),
            _ => false,
        }
    });
    labels_hold && exprs_hold
}

/// Every `{kind, name}` reference in a value: (group if named, kind, namespace if named, name).
fn references<'a>(
    v: &'a Value,
    out: &mut Vec<(Option<&'a str>, &'a str, Option<&'a str>, &'a str)>,
) {
    match v {
        Value::Object(m) => {
            if let (Some(kind), Some(name)) = (
                m.get("kind").and_then(Value::as_str),
                m.get("name").and_then(Value::as_str),
            ) {
                let group = m.get("apiGroup").and_then(Value::as_str).or_else(|| {
                    m.get("apiVersion")
                        .and_then(Value::as_str)
                        .map(identity::group)
                });
                out.push((
                    group,
                    kind,
                    m.get("namespace").and_then(Value::as_str),
                    name,
                ));
            }
            for x in m.values() {
                references(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| references(x, out)),
        _ => {}
    }
}

impl<'a> Belonging<'a> {
    fn new(objects: &'a [Value]) -> Belonging<'a> {
        let clusters: Vec<usize> = (0..objects.len())
            .filter(|&i| is_capi_cluster(&objects[i]))
            .collect();
        let key_of = |i: usize| {
            (
                text(&objects[i], "/metadata/namespace"),
                text(&objects[i], "/metadata/name"),
            )
        };
        let mut by_key: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for &c in &clusters {
            by_key.insert(key_of(c), c);
        }
        let mut member: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); objects.len()];
        let mut seeded = vec![false; objects.len()];
        // 1 and 2: the seeds.
        for (i, o) in objects.iter().enumerate() {
            let ns = text(o, "/metadata/namespace");
            let name = text(o, "/metadata/name");
            let kind = text(o, "/kind");
            let group = group_of(o);
            let found = if let Some(c) = labelled_cluster(o) {
                by_key.get(&(ns, c)).copied()
            } else if (kind == "Cluster"
                && matches!(group, "cluster.x-k8s.io" | "anywhere.eks.amazonaws.com"))
                || (kind == "ManagedCluster" && group == "capstan.dev")
            {
                if kind == "ManagedCluster" {
                    // A record lives apart from its cluster, under the cluster's name; it is that
                    // cluster's only when its inventory holds the Cluster in that namespace (a
                    // name alone could be another namespace's cluster).
                    clusters.iter().copied().find(|&c| {
                        let (cns, cname) = key_of(c);
                        cname == name
                            && o.pointer("/status/inventory")
                                .and_then(Value::as_array)
                                .into_iter()
                                .flatten()
                                .any(|r| {
                                    text(r, "/kind") == "Cluster"
                                        && text(r, "/namespace") == cns
                                        && text(r, "/name") == cname
                                        && identity::group(text(r, "/apiVersion"))
                                            == "cluster.x-k8s.io"
                                })
                    })
                } else {
                    by_key.get(&(ns, name)).copied()
                }
            } else if group.is_empty() && matches!(kind, "Secret" | "ConfigMap") {
                clusters
                    .iter()
                    .copied()
                    .filter(|&c| {
                        let (cns, cname) = key_of(c);
                        cns == ns
                            && (name == cname
                                || name.strip_prefix(cname).is_some_and(|r| r.starts_with('-')))
                    })
                    .max_by_key(|&c| text(&objects[c], "/metadata/name").len())
            } else {
                None
            };
            if let Some(c) = found {
                member[i].insert(c);
                seeded[i] = true;
            } else if labelled_cluster(o).is_some() {
                // Labelled for a cluster that is not here: it is that cluster's, not ours.
                seeded[i] = true;
            }
        }
        // 4: selectors.
        for (i, o) in objects.iter().enumerate() {
            if seeded[i] {
                continue;
            }
            let Some(selector) = o.pointer("/spec/clusterSelector") else {
                continue;
            };
            let empty_matches = text(o, "/kind") != "ClusterResourceSet";
            let ns = text(o, "/metadata/namespace");
            for &c in &clusters {
                let labels = objects[c]
                    .pointer("/metadata/labels")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                if key_of(c).0 == ns && selects(selector, &labels, empty_matches) {
                    member[i].insert(c);
                }
            }
        }
        // 3: owners and references, to a fixed point; a seeded object keeps its seed.
        let by_uid: BTreeMap<&str, usize> = objects
            .iter()
            .enumerate()
            .filter(|(_, o)| !uid(o).is_empty())
            .map(|(i, o)| (uid(o), i))
            .collect();
        let mut by_name: BTreeMap<(&str, &str, &str), Vec<usize>> = BTreeMap::new();
        for (i, o) in objects.iter().enumerate() {
            by_name
                .entry((
                    text(o, "/kind"),
                    text(o, "/metadata/namespace"),
                    text(o, "/metadata/name"),
                ))
                .or_default()
                .push(i);
        }
        let mut edges: Vec<(usize, usize)> = Vec::new(); // (from, to): `to` gets `from`'s clusters
        for (i, o) in objects.iter().enumerate() {
            for r in o
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(&owner) = r
                    .get("uid")
                    .and_then(Value::as_str)
                    .and_then(|u| by_uid.get(u))
                {
                    edges.push((owner, i));
                }
            }
            let mut refs = Vec::new();
            if let Some(spec) = o.get("spec") {
                references(spec, &mut refs);
            }
            let ns = text(o, "/metadata/namespace");
            for (group, kind, rns, name) in refs {
                for candidate_ns in [rns.unwrap_or(ns), ""] {
                    for &t in by_name
                        .get(&(kind, candidate_ns, name))
                        .into_iter()
                        .flatten()
                    {
                        if t != i && group.is_none_or(|g| g == group_of(&objects[t])) {
                            edges.push((i, t));
                        }
                    }
                }
            }
        }
        // 5: EKS-A's release. An EKS-A Cluster's `spec.eksaVersion` names, without a `kind`, the
        // EKSARelease of the release namespace its controllers read the release from.
        for (i, o) in objects.iter().enumerate() {
            let Some(version) = o.pointer("/spec/eksaVersion").and_then(Value::as_str) else {
                continue;
            };
            if text(o, "/kind") != "Cluster" || group_of(o) != "anywhere.eks.amazonaws.com" {
                continue;
            }
            let name = eksa_release_name(version);
            edges.extend(
                objects
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| {
                        text(r, "/kind") == "EKSARelease"
                            && group_of(r) == "anywhere.eks.amazonaws.com"
                            && text(r, "/metadata/namespace") == RELEASE_NAMESPACE
                            && text(r, "/metadata/name") == name
                    })
                    .map(|(t, _)| (i, t)),
            );
        }
        loop {
            let mut changed = false;
            for &(from, to) in &edges {
                if seeded[to] || member[from].is_empty() {
                    continue;
                }
                let add: Vec<usize> = member[from].difference(&member[to]).copied().collect();
                if !add.is_empty() {
                    member[to].extend(add);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        Belonging {
            objects,
            clusters: member,
        }
    }
}

/// The move of `moved` (Cluster API Clusters at the source) among `objects` (everything the
/// source holds of the moved kinds in their namespaces, the cluster-scoped objects of those
/// kinds, the Secrets and ConfigMaps of those namespaces, capstan's records): which objects go,
/// owners first, or the clusters that are not there.
pub fn plan(objects: &[Value], moved: &[ClusterKey]) -> Result<MovePlan, Vec<Refusal>> {
    let belonging = Belonging::new(objects);
    let mut indices: BTreeSet<usize> = BTreeSet::new();
    let mut refusals = Vec::new();
    for key in moved {
        match objects.iter().position(|o| {
            is_capi_cluster(o)
                && text(o, "/metadata/namespace") == key.namespace
                && text(o, "/metadata/name") == key.name
        }) {
            Some(i) => {
                indices.insert(i);
            }
            None => refusals.push(Refusal::NoSuchCluster(key.clone())),
        }
    }
    if !refusals.is_empty() {
        return Err(refusals);
    }
    let mut members = Vec::new();
    for (i, of) in belonging.clusters.iter().enumerate() {
        if of.is_empty() || of.is_disjoint(&indices) {
            continue;
        }
        let o = &belonging.objects[i];
        members.push(Member {
            index: i,
            subject: identity::subject_of(o),
            shared: !of.is_subset(&indices) || text(o, "/metadata/namespace").is_empty(),
        });
    }
    let order = owners_first_of(objects, members.iter().map(|m| m.index).collect());
    let mut slots: BTreeMap<usize, Member> = members.into_iter().map(|m| (m.index, m)).collect();
    let members = order.into_iter().filter_map(|i| slots.remove(&i)).collect();
    Ok(MovePlan {
        clusters: moved.to_vec(),
        objects: members,
    })
}

/// Whether a cluster may move now: None, or the first reason why not (health's rules on the
/// Cluster, its control plane and its MachineDeployments and MachineSets). A cluster paused by
/// an operator is judged on what its controllers last reported, as if it ran.
pub fn readiness(objects: &[Value], key: &ClusterKey) -> Option<Refusal> {
    let in_ns = |o: &&Value| text(o, "/metadata/namespace") == key.namespace;
    let cluster = objects
        .iter()
        .filter(in_ns)
        .find(|o| is_capi_cluster(o) && text(o, "/metadata/name") == key.name)?;
    if cluster.pointer("/metadata/deletionTimestamp").is_some() {
        return Some(Refusal::Deleting(key.clone()));
    }
    let generation = |o: &Value| {
        o.pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let mut cluster_status = RolloutStatus::from_object(cluster);
    cluster_status.paused = false;
    let cp_name = text(cluster, "/spec/controlPlaneRef/name");
    let cp_kind = text(cluster, "/spec/controlPlaneRef/kind");
    let control_plane = objects.iter().filter(in_ns).find(|o| {
        !cp_name.is_empty() && text(o, "/metadata/name") == cp_name && text(o, "/kind") == cp_kind
    });
    let cp_status = control_plane.map(RolloutStatus::from_object);
    let labelled = |kind: &str| -> Vec<&Value> {
        objects
            .iter()
            .filter(in_ns)
            .filter(|o| {
                text(o, "/kind") == kind
                    && group_of(o) == "cluster.x-k8s.io"
                    && label(o, CLUSTER_NAME_LABEL) == Some(key.name.as_str())
            })
            .collect()
    };
    let deployments = labelled("MachineDeployment");
    let sets = labelled("MachineSet");
    let md: Vec<(String, i64, RolloutStatus, Vec<health::MachineSet>)> = deployments
        .iter()
        .map(|d| {
            let name = text(d, "/metadata/name");
            let ms = sets
                .iter()
                .filter(|s| label(s, DEPLOYMENT_NAME_LABEL) == Some(name))
                .map(|s| health::MachineSet::from_object(s))
                .collect();
            (
                format!("MachineDeployment/{name}"),
                generation(d),
                RolloutStatus::from_object(d),
                ms,
            )
        })
        .collect();
    let workers: Vec<Observed<'_>> = md
        .iter()
        .map(|(what, generation, status, ms)| Observed {
            what,
            generation: *generation,
            rollout: Some(status),
            machine_sets: ms,
        })
        .collect();
    let cluster_what = format!("Cluster/{}", key.name);
    let cp_what = format!("{cp_kind}/{cp_name}");
    let verdict = health::assess(
        Observed {
            what: &cluster_what,
            generation: generation(cluster),
            rollout: Some(&cluster_status),
            machine_sets: &[],
        },
        control_plane.map(|cp| Observed {
            what: &cp_what,
            generation: generation(cp),
            rollout: cp_status.as_ref(),
            machine_sets: &[],
        }),
        &workers,
    );
    (!verdict.ready).then(|| Refusal::NotReady {
        cluster: key.clone(),
        why: verdict.message,
    })
}

/// Whether capstan's agent runs at the source, from its Deployment (`capstan-system/capstan`)
/// and its leader Lease (`capstan-system/capstan-leader`) as read there, at `now` (Unix
/// seconds): a Deployment asking for replicas, or a Lease renewed within its duration.
pub fn agent_running(
    deployment: Option<&Value>,
    lease: Option<&Value>,
    now: i64,
) -> Option<Refusal> {
    if let Some(d) = deployment {
        let replicas = d
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        if replicas > 0 {
            return Some(Refusal::AgentRunning {
                why: format!(
                    "Deployment {RECORDS_NAMESPACE}/capstan asks for {replicas} replica(s)"
                ),
            });
        }
    }
    let l = lease?;
    let holder = text(l, "/spec/holderIdentity");
    let duration = l
        .pointer("/spec/leaseDurationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let renewed = text(l, "/spec/renewTime")
        .parse::<k8s_openapi::jiff::Timestamp>()
        .ok()?
        .as_second();
    (!holder.is_empty() && renewed + duration >= now).then(|| Refusal::AgentRunning {
        why: format!(
            "Lease {RECORDS_NAMESPACE}/capstan-leader is held by {holder}, renewed {}s ago",
            now - renewed
        ),
    })
}

/// What the target holds that a move checks before it creates anything.
#[derive(Debug, Clone, Default)]
pub struct TargetFacts {
    /// The kinds it serves: (group, kind).
    pub served: BTreeSet<(String, String)>,
    /// Objects of the move's names it already holds: [`object_key`] → their
    /// [`MOVED_FROM_ANNOTATION`], if any.
    pub existing: BTreeMap<String, Option<String>>,
}

/// The target's refusals of a plan: kinds it does not serve, names it holds that are not this
/// move's copies.
pub fn target_refusals(objects: &[Value], plan: &MovePlan, target: &TargetFacts) -> Vec<Refusal> {
    let mut missing: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for m in &plan.objects {
        let o = &objects[m.index];
        let (group, kind) = (group_of(o), text(o, "/kind"));
        if !target
            .served
            .contains(&(group.to_string(), kind.to_string()))
        {
            *missing.entry(format!("{kind}.{group}")).or_default() += 1;
            continue;
        }
        if let Some(from) = target.existing.get(&object_key(o))
            && from.as_deref() != Some(uid(o))
        {
            out.push(Refusal::Exists {
                subject: m.subject.clone(),
            });
        }
    }
    out.extend(
        missing
            .into_iter()
            .map(|(kind, objects)| Refusal::MissingKind { kind, objects }),
    );
    out
}

#[cfg(test)]
mod tests;
