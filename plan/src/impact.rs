//! What a change does to a cluster's machines, read the way Cluster API will act on it.
//!
//! A diff of rendered objects says *which fields* change; a reviewer needs to know *what
//! happens*: does the control plane roll (and why), which worker groups get new machines,
//! which only scale, whether Cilium is upgraded, and whether the change touches something EKS
//! Anywhere refuses to change on a live cluster. This module answers that from two sets of a
//! cluster's objects, as data ([`Impact`]), with no I/O:
//!
//! ```text
//! old objects (rendered from the base revision, or live) ─┐
//!                                                         ├─ Impact::between ─▶ Impact
//! new objects (rendered from the head revision) ──────────┘
//! ```
//!
//! The rules follow what the controllers do with the objects capstan renders:
//!
//! - **KubeadmControlPlane** rolls its machines when `spec.version`, the machine template it
//!   refers to (`spec.machineTemplate.spec.infrastructureRef.name`, a content-hashed name, so any
//!   change of the template is a new name) or `spec.kubeadmConfigSpec` change; `spec.replicas`
//!   alone scales without replacing a machine; the rollout strategy rolls nothing.
//! - **MachineDeployment** rolls a worker group when its machine template
//!   (`spec.template.spec`: version, infrastructure template, bootstrap template, failure domain)
//!   changes; `spec.replicas` and the autoscaler's min/max annotations only scale.
//! - **EtcdadmCluster** rolls etcd members when its machine template or its
//!   `spec.etcdadmConfigSpec` (the etcd version among it) changes; `spec.replicas` scales.
//! - **HelmChartProxy** (CAAPH; Cilium is one) upgrades a chart when `spec.version` or the
//!   values change.
//! - **Blocked**: fields of the EKS Anywhere objects its webhooks hold immutable on a live
//!   cluster (control-plane endpoint, pod and service CIDRs, DNS and node CIDR settings,
//!   stacked ↔ external etcd, the datacenter, hence the provider, the management cluster, the
//!   proxy, the namespace, the CNI plugin, vSphere server/datacenter/network, a machine's OS
//!   family and storage policy) and version moves it rejects (Kubernetes down or more than one
//!   minor up). Each carries the EKS-A object and spec field path, so a caller can point at
//!   `file:line` in the new revision ([`Blocked::locate`]).
//!
//! "Old" need not come from Git: the agent's plan-time gates pass the **live** objects
//! ([`Basis::Live`]). Live objects carry what the API server and controllers add (defaults,
//! status, metadata), so on that basis only the fields the new objects set are compared; on
//! [`Basis::Rendered`] (two revisions) a field that disappears counts as a change too.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use capstan_templates::yaml::Pos;
use serde::Serialize;
use serde_json::Value;

/// Where the old objects come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Basis {
    /// Rendered from another revision: every field is capstan's, removals count.
    #[default]
    Rendered,
    /// Read from the API server: only the fields the new objects set are compared.
    Live,
}

/// What the change does to the cluster as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Lifecycle {
    /// No old objects: the cluster is created.
    Create,
    /// No new objects: the cluster's objects go (a tombstone, or a removed directory).
    Delete,
    /// Both sides exist.
    Change,
}

/// Why machines are replaced (not a condition reason: those are [`crate::status::Reason`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RollCause {
    /// What changed: `version`, `machineTemplate`, `kubeadmConfig`, `bootstrapTemplate`,
    /// `machineSpec`, `etcdConfig`.
    pub what: &'static str,
    /// Old → new, or the changed fields.
    pub detail: String,
}

/// A rollout: machines replaced one by one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Roll {
    /// Why (at least one cause; `reasons` in the JSON).
    pub reasons: Vec<RollCause>,
}

/// A replica count that moves without replacing machines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Scale {
    /// Replicas before (`None`: left to the autoscaler, or unset).
    pub from: Option<i64>,
    /// Replicas after.
    pub to: Option<i64>,
    /// Autoscaler bounds `min..max` when they change, as text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bounds: Option<String>,
}

/// What happens to the control plane or to etcd.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Machines {
    /// Its machines are replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roll: Option<Roll>,
    /// Its replica count moves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<Scale>,
}

impl Machines {
    fn is_empty(&self) -> bool {
        self.roll.is_none() && self.scale.is_none()
    }
}

/// What happens to one worker group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerGroup {
    /// The group's name (`workerNodeGroupConfigurations[].name`).
    pub name: String,
    /// The MachineDeployment.
    pub machine_deployment: String,
    /// Added (new machines), removed (machines deleted), or changed.
    pub change: GroupChange,
    /// Rollout, if its machines are replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roll: Option<Roll>,
    /// Scale, if its replica count or autoscaler bounds move.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<Scale>,
}

/// How a worker group changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupChange {
    /// A new group.
    Added,
    /// A group no longer rendered: its machines are deleted.
    Removed,
    /// An existing group.
    Changed,
}

/// An add-on (a CAAPH HelmChartProxy) that changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Addon {
    /// The chart (`cilium`).
    pub chart: String,
    /// The HelmChartProxy.
    pub name: String,
    /// Chart version before (None: newly installed).
    pub from: Option<String>,
    /// Chart version after (None: removed).
    pub to: Option<String>,
    /// Whether the values change.
    pub values_changed: bool,
}

/// A change EKS Anywhere refuses on a live cluster (or that would break it): not applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Blocked {
    /// Kind of the EKS-A object (`Cluster`, `VSphereDatacenterConfig`, …).
    pub kind: String,
    /// Its name.
    pub name: String,
    /// The spec field path in that object, as written in the repository
    /// (`spec.clusterNetwork.pods.cidrBlocks`).
    pub field: String,
    /// Old value, as text.
    pub from: String,
    /// New value, as text.
    pub to: String,
    /// Why it is refused.
    pub reason: String,
}

impl Blocked {
    /// Where the field is written in the new revision: the file and line of the field in the
    /// Cluster document, or of the object's `metadata.name` for the other EKS-A objects.
    pub fn locate(&self, cluster: &capstan_templates::spec::Cluster) -> Option<(PathBuf, Pos)> {
        if self.kind == "Cluster" && self.name == cluster.name {
            return Some((cluster.source.file.clone(), cluster.source.pos(&self.field)));
        }
        cluster
            .sources
            .iter()
            .find(|s| s.kind == self.kind && s.name == self.name)
            .map(|s| (s.file.clone(), s.pos))
    }
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} {}: {} → {}: {}",
            self.kind, self.name, self.field, self.from, self.to, self.reason
        )
    }
}

/// What a change does to one cluster's machines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Impact {
    /// Create, delete or change.
    pub lifecycle: Lifecycle,
    /// The control plane (KubeadmControlPlane).
    pub control_plane: Machines,
    /// External etcd (EtcdadmCluster), when there is one.
    pub etcd: Machines,
    /// Worker groups that change, in name order.
    pub workers: Vec<WorkerGroup>,
    /// Add-ons that change.
    pub addons: Vec<Addon>,
    /// Refused changes.
    pub blocked: Vec<Blocked>,
}

/// Kinds whose objects are the ones this module reads.
const KCP: &str = "KubeadmControlPlane";
const MD: &str = "MachineDeployment";
const ETCD: &str = "EtcdadmCluster";
const HCP: &str = "HelmChartProxy";
const EKSA_GROUP: &str = "anywhere.eks.amazonaws.com";
const MIN_SIZE: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size";
const MAX_SIZE: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size";

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

fn group_of(v: &Value) -> &str {
    capstan_templates::identity::group(s(v, "/apiVersion"))
}

/// The objects of one kind by name (a cluster has one of each name per kind).
fn by_kind<'a>(objects: &'a [Value], kind: &str) -> BTreeMap<&'a str, &'a Value> {
    objects
        .iter()
        .filter(|o| s(o, "/kind") == kind)
        .map(|o| (s(o, "/metadata/name"), o))
        .collect()
}

fn eksa<'a>(objects: &'a [Value], kind: &str) -> BTreeMap<&'a str, &'a Value> {
    objects
        .iter()
        .filter(|o| s(o, "/kind") == kind && group_of(o) == EKSA_GROUP)
        .map(|o| (s(o, "/metadata/name"), o))
        .collect()
}

/// A value as short text for messages (`null` for a missing one).
fn show(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "(unset)".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Leaf paths (`a.b[0].c`) under which `old` and `new` differ. On [`Basis::Live`] only what
/// `new` sets counts; arrays are compared whole (their items have no identity here).
pub fn changed_fields(old: Option<&Value>, new: Option<&Value>, basis: Basis) -> Vec<String> {
    let mut out = Vec::new();
    walk("", old, new, basis, &mut out);
    out
}

fn walk(path: &str, old: Option<&Value>, new: Option<&Value>, basis: Basis, out: &mut Vec<String>) {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match (old, new) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let keys: BTreeSet<&String> = match basis {
                Basis::Rendered => a.keys().chain(b.keys()).collect(),
                Basis::Live => b.keys().collect(),
            };
            for k in keys {
                walk(&join(k), a.get(k), b.get(k), basis, out);
            }
        }
        (_, None) if basis == Basis::Live => {}
        (a, b) if a == b => {}
        _ => out.push(if path.is_empty() {
            ".".into()
        } else {
            path.into()
        }),
    }
}

/// A short list of changed fields: the first few, then how many more.
fn fields_text(fields: &[String]) -> String {
    const SHOWN: usize = 4;
    let mut text = fields
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if fields.len() > SHOWN {
        text.push_str(&format!(" and {} more", fields.len() - SHOWN));
    }
    text
}

fn int(v: &Value, p: &str) -> Option<i64> {
    v.pointer(p).and_then(Value::as_i64)
}

impl Impact {
    /// What turning `old` into `new` (one cluster's objects each) does.
    pub fn between(old: &[Value], new: &[Value], basis: Basis) -> Impact {
        let lifecycle = match (old.is_empty(), new.is_empty()) {
            (true, false) => Lifecycle::Create,
            (false, true) => Lifecycle::Delete,
            _ => Lifecycle::Change,
        };
        let mut impact = Impact {
            lifecycle,
            control_plane: Machines::default(),
            etcd: Machines::default(),
            workers: Vec::new(),
            addons: Vec::new(),
            blocked: Vec::new(),
        };
        if lifecycle != Lifecycle::Change {
            return impact;
        }
        impact.control_plane = control_plane(old, new, basis);
        impact.etcd = etcd(old, new, basis);
        impact.workers = workers(old, new, basis);
        impact.addons = addons(old, new, basis);
        impact.blocked = blocked(old, new);
        impact
    }

    /// Whether any machine is replaced (control plane, etcd or a worker group).
    pub fn rolls(&self) -> bool {
        self.control_plane.roll.is_some()
            || self.etcd.roll.is_some()
            || self.workers.iter().any(|w| w.roll.is_some())
    }

    /// Whether anything is refused.
    pub fn is_blocked(&self) -> bool {
        !self.blocked.is_empty()
    }

    /// Whether there is nothing to say about machines, add-ons or refused fields.
    pub fn is_empty(&self) -> bool {
        self.lifecycle == Lifecycle::Change
            && self.control_plane.is_empty()
            && self.etcd.is_empty()
            && self.workers.is_empty()
            && self.addons.is_empty()
            && self.blocked.is_empty()
    }

    /// The summary as lines of plain text (no trailing newline), most important first:
    /// blocked changes, then etcd, control plane, workers, add-ons.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        match self.lifecycle {
            Lifecycle::Create => out.push("new cluster: every machine is created".into()),
            Lifecycle::Delete => {
                out.push("cluster removed: its machines are deleted (its Cluster first)".into())
            }
            Lifecycle::Change => {}
        }
        for b in &self.blocked {
            out.push(format!(
                "BLOCKED {}/{} {}: {} → {} ({})",
                b.kind, b.name, b.field, b.from, b.to, b.reason
            ));
        }
        let reasons = |r: &Roll| {
            r.reasons
                .iter()
                .map(|r| format!("{} {}", r.what, r.detail))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let scale = |s: &Scale| {
            let n = |v: Option<i64>| v.map_or("autoscaler".to_string(), |n| n.to_string());
            let mut t = format!("{} → {}", n(s.from), n(s.to));
            if let Some(b) = &s.bounds {
                t = if s.from == s.to {
                    format!("autoscaler bounds {b}")
                } else {
                    format!("{t}, autoscaler bounds {b}")
                };
            }
            t
        };
        for (what, m) in [("etcd", &self.etcd), ("control plane", &self.control_plane)] {
            if let Some(r) = &m.roll {
                out.push(format!("{what} rolls: {}", reasons(r)));
            }
            if let Some(s) = &m.scale {
                out.push(format!("{what} scales {} (no rollout)", scale(s)));
            }
        }
        for w in &self.workers {
            match w.change {
                GroupChange::Added => out.push(format!(
                    "worker group {} added ({})",
                    w.name,
                    w.scale
                        .as_ref()
                        .and_then(|s| s.to)
                        .map_or("autoscaled".to_string(), |n| format!("{n} machines"))
                )),
                GroupChange::Removed => out.push(format!(
                    "worker group {} removed: its machines are deleted",
                    w.name
                )),
                GroupChange::Changed => {
                    if let Some(r) = &w.roll {
                        out.push(format!("worker group {} rolls: {}", w.name, reasons(r)));
                    }
                    if let Some(s) = &w.scale {
                        let how = if w.roll.is_some() {
                            ""
                        } else {
                            " (no rollout)"
                        };
                        out.push(format!("worker group {} scales {}{how}", w.name, scale(s)));
                    }
                }
            }
        }
        for a in &self.addons {
            let v = |v: &Option<String>| v.clone().unwrap_or_else(|| "(none)".into());
            let what = match (&a.from, &a.to) {
                (None, _) => format!("{} installed ({})", a.chart, v(&a.to)),
                (_, None) => format!("{} removed", a.chart),
                (f, t) if f != t => format!("{} upgrades {} → {}", a.chart, v(f), v(t)),
                _ => format!("{} values change", a.chart),
            };
            out.push(if a.values_changed && a.from.is_some() && a.from != a.to {
                format!("{what} (values change too)")
            } else {
                what
            });
        }
        if out.is_empty() {
            out.push("no machine is replaced".into());
        }
        out
    }
}

fn control_plane(old: &[Value], new: &[Value], basis: Basis) -> Machines {
    let (olds, news) = (by_kind(old, KCP), by_kind(new, KCP));
    let (Some(o), Some(n)) = (olds.values().next(), news.values().next()) else {
        return Machines::default();
    };
    let mut reasons = Vec::new();
    let version = |v: &Value| v.pointer("/spec/version").cloned();
    if version(o) != version(n) {
        reasons.push(RollCause {
            what: "version",
            detail: format!(
                "{} → {}",
                show(o.pointer("/spec/version")),
                show(n.pointer("/spec/version"))
            ),
        });
    }
    let tpl = "/spec/machineTemplate/spec/infrastructureRef/name";
    if s(o, tpl) != s(n, tpl) {
        reasons.push(template_cause(old, new, s(o, tpl), s(n, tpl), basis));
    }
    let cfg = changed_fields(
        o.pointer("/spec/kubeadmConfigSpec"),
        n.pointer("/spec/kubeadmConfigSpec"),
        basis,
    );
    if !cfg.is_empty() {
        reasons.push(RollCause {
            what: "kubeadmConfig",
            detail: fields_text(&cfg),
        });
    }
    Machines {
        roll: (!reasons.is_empty()).then_some(Roll { reasons }),
        scale: replicas(o, n, None),
    }
}

/// The reason of a template whose (content-hashed) name changed: which of its fields differ.
fn template_cause(old: &[Value], new: &[Value], from: &str, to: &str, basis: Basis) -> RollCause {
    let find = |objs: &'_ [Value], name: &str| -> Option<Value> {
        objs.iter()
            .find(|o| s(o, "/metadata/name") == name && o.pointer("/spec/template").is_some())
            .and_then(|o| o.pointer("/spec/template").cloned())
    };
    let fields = match (find(old, from), find(new, to)) {
        (Some(a), Some(b)) => changed_fields(Some(&a), Some(&b), basis),
        _ => Vec::new(),
    };
    RollCause {
        what: "machineTemplate",
        detail: if fields.is_empty() {
            format!("{from} → {to}")
        } else {
            format!("{from} → {to} ({})", fields_text(&fields))
        },
    }
}

fn replicas(o: &Value, n: &Value, bounds: Option<String>) -> Option<Scale> {
    let (from, to) = (int(o, "/spec/replicas"), int(n, "/spec/replicas"));
    // A live object always has replicas; the autoscaler owns them when the new one has none.
    let moved = to.is_some() && from != to;
    (moved || bounds.is_some()).then_some(Scale { from, to, bounds })
}

fn etcd(old: &[Value], new: &[Value], basis: Basis) -> Machines {
    let (olds, news) = (by_kind(old, ETCD), by_kind(new, ETCD));
    let (Some(o), Some(n)) = (olds.values().next(), news.values().next()) else {
        return Machines::default();
    };
    let mut reasons = Vec::new();
    let tpl = "/spec/infrastructureTemplate/name";
    if s(o, tpl) != s(n, tpl) {
        reasons.push(template_cause(old, new, s(o, tpl), s(n, tpl), basis));
    }
    let ver = "/spec/etcdadmConfigSpec/cloudInitConfig/version";
    if o.pointer(ver) != n.pointer(ver) {
        reasons.push(RollCause {
            what: "version",
            detail: format!("etcd {} → {}", show(o.pointer(ver)), show(n.pointer(ver))),
        });
    }
    let cfg: Vec<String> = changed_fields(
        o.pointer("/spec/etcdadmConfigSpec"),
        n.pointer("/spec/etcdadmConfigSpec"),
        basis,
    )
    .into_iter()
    .filter(|f| !f.starts_with("cloudInitConfig."))
    .collect();
    if !cfg.is_empty() {
        reasons.push(RollCause {
            what: "etcdConfig",
            detail: fields_text(&cfg),
        });
    }
    Machines {
        roll: (!reasons.is_empty()).then_some(Roll { reasons }),
        scale: replicas(o, n, None),
    }
}

fn group_name<'a>(md: &'a Value, name: &'a str) -> &'a str {
    let cluster = s(md, "/spec/clusterName");
    name.strip_prefix(cluster)
        .and_then(|r| r.strip_prefix('-'))
        .unwrap_or(name)
}

fn bounds(v: &Value) -> Option<String> {
    let a = |k: &str| {
        v.pointer("/metadata/annotations")
            .and_then(|a| a.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    match (a(MIN_SIZE), a(MAX_SIZE)) {
        (None, None) => None,
        (min, max) => Some(format!(
            "{}..{}",
            min.unwrap_or_default(),
            max.unwrap_or_default()
        )),
    }
}

fn workers(old: &[Value], new: &[Value], basis: Basis) -> Vec<WorkerGroup> {
    let (olds, news) = (by_kind(old, MD), by_kind(new, MD));
    let names: BTreeSet<&str> = olds.keys().chain(news.keys()).copied().collect();
    let mut out = Vec::new();
    for name in names {
        let group = |change, roll, scale, md: &Value| WorkerGroup {
            name: group_name(md, name).to_string(),
            machine_deployment: name.to_string(),
            change,
            roll,
            scale,
        };
        match (olds.get(name), news.get(name)) {
            (None, Some(n)) => out.push(group(
                GroupChange::Added,
                None,
                Some(Scale {
                    from: None,
                    to: int(n, "/spec/replicas"),
                    bounds: bounds(n),
                }),
                n,
            )),
            (Some(o), None) => out.push(group(GroupChange::Removed, None, None, o)),
            (Some(o), Some(n)) => {
                let mut reasons = Vec::new();
                let spec =
                    |v: &'_ Value, p: &str| v.pointer(&format!("/spec/template/spec{p}")).cloned();
                if spec(o, "/version") != spec(n, "/version") {
                    reasons.push(RollCause {
                        what: "version",
                        detail: format!(
                            "{} → {}",
                            show(spec(o, "/version").as_ref()),
                            show(spec(n, "/version").as_ref())
                        ),
                    });
                }
                let infra = "/spec/template/spec/infrastructureRef/name";
                if s(o, infra) != s(n, infra) {
                    reasons.push(template_cause(old, new, s(o, infra), s(n, infra), basis));
                }
                let boot = "/spec/template/spec/bootstrap/configRef/name";
                if s(o, boot) != s(n, boot) {
                    let fields = template_cause(old, new, s(o, boot), s(n, boot), basis);
                    reasons.push(RollCause {
                        what: "bootstrapTemplate",
                        detail: fields.detail,
                    });
                }
                let rest: Vec<String> = changed_fields(
                    o.pointer("/spec/template/spec"),
                    n.pointer("/spec/template/spec"),
                    basis,
                )
                .into_iter()
                .filter(|f| {
                    !(f == "version"
                        || f.starts_with("infrastructureRef.")
                        || f.starts_with("bootstrap."))
                })
                .collect();
                if !rest.is_empty() {
                    reasons.push(RollCause {
                        what: "machineSpec",
                        detail: fields_text(&rest),
                    });
                }
                let b = bounds(n);
                let b = (b != bounds(o)).then_some(b.unwrap_or_else(|| "removed".into()));
                let roll = (!reasons.is_empty()).then_some(Roll { reasons });
                let scale = replicas(o, n, b);
                if roll.is_some() || scale.is_some() {
                    out.push(group(GroupChange::Changed, roll, scale, n));
                }
            }
            (None, None) => {}
        }
    }
    out
}

fn addons(old: &[Value], new: &[Value], basis: Basis) -> Vec<Addon> {
    let (olds, news) = (by_kind(old, HCP), by_kind(new, HCP));
    let names: BTreeSet<&str> = olds.keys().chain(news.keys()).copied().collect();
    let mut out = Vec::new();
    for name in names {
        let (o, n) = (olds.get(name), news.get(name));
        let version = |v: Option<&&Value>| {
            v.and_then(|v| v.pointer("/spec/version"))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let values =
            |v: Option<&&Value>| v.and_then(|v| v.pointer("/spec/valuesTemplate")).cloned();
        let (from, to) = (version(o), version(n));
        let values_changed = match basis {
            Basis::Live if values(n).is_none() => false,
            _ => values(o) != values(n),
        };
        if o.is_some() && n.is_some() && from == to && !values_changed {
            continue;
        }
        let chart = o
            .or(n)
            .map(|v| s(v, "/spec/chartName"))
            .filter(|c| !c.is_empty())
            .unwrap_or(name);
        out.push(Addon {
            chart: chart.to_string(),
            name: name.to_string(),
            from: if o.is_some() { from } else { None },
            to: if n.is_some() { to } else { None },
            values_changed,
        });
    }
    out
}

use capstan_templates::provider::{Immutable, PROVIDERS};

/// The immutable fields of every cluster, whatever its provider (the providers' own are in
/// their descriptors, [`capstan_templates::provider`]).
const RULES: &[Immutable] = &[
    Immutable {
        kind: "Cluster",
        field: "spec.controlPlaneConfiguration.endpoint.host",
        reason: "the control-plane endpoint is immutable (EKS Anywhere's webhook refuses it; machines and certificates carry it)",
    },
    Immutable {
        kind: "Cluster",
        field: "spec.clusterNetwork.pods",
        reason: "the pod CIDR is immutable on a live cluster (every node's pod range comes from it)",
    },
    Immutable {
        kind: "Cluster",
        field: "spec.clusterNetwork.services",
        reason: "the service CIDR is immutable on a live cluster (every Service's IP comes from it)",
    },
    Immutable {
        kind: "Cluster",
        field: "spec.clusterNetwork.dns",
        reason: "cluster DNS settings are immutable (EKS Anywhere's webhook)",
    },
    Immutable {
        kind: "Cluster",
        field: "spec.clusterNetwork.nodes",
        reason: "the node CIDR mask is immutable (EKS Anywhere's webhook)",
    },
    Immutable {
        kind: "Cluster",
        field: "spec.datacenterRef",
        reason: "the datacenter (and so the provider) of a cluster cannot change; create a new cluster instead",
    },
    Immutable {
        kind: "Cluster",
        field: "spec.managementCluster",
        reason: "a cluster cannot move to another management cluster",
    },
    Immutable {
        kind: "Cluster",
        field: "spec.proxyConfiguration",
        reason: "proxy settings are immutable (EKS Anywhere's webhook)",
    },
];

/// Every immutable field: every cluster's and every provider's.
fn rules() -> impl Iterator<Item = &'static Immutable> {
    RULES
        .iter()
        .chain(PROVIDERS.iter().flat_map(|p| p.immutable.iter()))
}

fn at<'a>(v: &'a Value, field: &str) -> Option<&'a Value> {
    v.pointer(&format!("/{}", field.replace('.', "/")))
}

fn block(kind: &str, name: &str, field: &str, from: String, to: String, reason: String) -> Blocked {
    Blocked {
        kind: kind.into(),
        name: name.into(),
        field: field.into(),
        from,
        to,
        reason,
    }
}

fn minor(v: Option<&Value>) -> Option<(u64, u64)> {
    let text = match v? {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let mut parts = text.trim_start_matches('v').split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

fn blocked(old: &[Value], new: &[Value]) -> Vec<Blocked> {
    let mut out = Vec::new();
    for rule in rules() {
        let (olds, news) = (eksa(old, rule.kind), eksa(new, rule.kind));
        for (name, n) in &news {
            let Some(o) = olds.get(name) else { continue };
            let (a, b) = (at(o, rule.field), at(n, rule.field));
            // What the server defaulted and the repository leaves out is not a change.
            if b.is_none() || a == b {
                continue;
            }
            out.push(block(
                rule.kind,
                name,
                rule.field,
                show(a),
                show(b),
                rule.reason.into(),
            ));
        }
    }
    let (olds, news) = (eksa(old, "Cluster"), eksa(new, "Cluster"));
    for (name, n) in &news {
        let Some(o) = olds.get(name) else { continue };
        let etcd = |v: &Value| v.pointer("/spec/externalEtcdConfiguration").is_some();
        if etcd(o) != etcd(n) {
            let topo = |e: bool| if e { "external" } else { "stacked" }.to_string();
            out.push(block(
                "Cluster",
                name,
                "spec.externalEtcdConfiguration",
                topo(etcd(o)),
                topo(etcd(n)),
                "etcd cannot move between stacked and external on a live cluster".into(),
            ));
        }
        let ns = |v: &Value| s(v, "/metadata/namespace").to_string();
        if ns(o) != ns(n) && !ns(n).is_empty() {
            out.push(block(
                "Cluster",
                name,
                "metadata.namespace",
                ns(o),
                ns(n),
                "a cluster's namespace cannot change: its objects would be created anew beside the live ones".into(),
            ));
        }
        let cni = |v: &Value| {
            v.pointer("/spec/clusterNetwork/cniConfig")
                .and_then(Value::as_object)
                .and_then(|m| m.keys().next().cloned())
        };
        if let (Some(a), Some(b)) = (cni(o), cni(n))
            && a != b
        {
            out.push(block(
                "Cluster",
                name,
                "spec.clusterNetwork.cniConfig",
                a,
                b,
                "the CNI plugin of a live cluster cannot change".into(),
            ));
        }
        let field = "spec.kubernetesVersion";
        if let (Some(a), Some(b)) = (minor(at(o, field)), minor(at(n, field)))
            && (b < a || (b.0 == a.0 && b.1 > a.1 + 1))
        {
            let why = if b < a {
                "Kubernetes cannot be downgraded".to_string()
            } else {
                format!(
                    "Kubernetes upgrades go one minor at a time ({}.{} → {}.{} first)",
                    a.0,
                    a.1,
                    a.0,
                    a.1 + 1
                )
            };
            out.push(block(
                "Cluster",
                name,
                field,
                show(at(o, field)),
                show(at(n, field)),
                why,
            ));
        }
    }
    // An EKS-A object moved to another datacenter kind: a provider change.
    let kinds = |objs: &[Value]| -> BTreeSet<String> {
        objs.iter()
            .filter(|o| group_of(o) == EKSA_GROUP && s(o, "/kind").ends_with("DatacenterConfig"))
            .map(|o| s(o, "/kind").to_string())
            .collect()
    };
    let (a, b) = (kinds(old), kinds(new));
    if !a.is_empty()
        && !b.is_empty()
        && a != b
        && !out.iter().any(|x| x.field == "spec.datacenterRef")
    {
        let name = eksa(new, "Cluster").keys().next().copied().unwrap_or("");
        out.push(block(
            "Cluster",
            name,
            "spec.datacenterRef.kind",
            a.into_iter().collect::<Vec<_>>().join(","),
            b.into_iter().collect::<Vec<_>>().join(","),
            "the provider of a cluster cannot change; create a new cluster instead".into(),
        ));
    }
    out
}

#[cfg(test)]
mod tests;
