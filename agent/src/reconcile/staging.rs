//! The staged part of a cluster's pass: the wiring upstream Cluster API lacks for external etcd,
//! and holding what waits for an earlier upgrade stage ([`crate::plan::stages`]).
//!
//! External etcd: EKS Anywhere's fork of Cluster API has a `managedExternalEtcdRef` on the
//! Cluster, and its controllers make the Cluster the EtcdadmCluster's owner (etcdadm's
//! controller does nothing until it has an owning Cluster) and copy etcd's endpoints into the
//! control plane once etcd is up. Upstream has neither, so capstan does both:
//!
//! ```text
//! pass 1   Cluster created (prepare stage)     EtcdadmCluster held: its owner has no UID yet
//! pass 2   EtcdadmCluster created, owned by the Cluster's UID; KubeadmControlPlane held
//! pass n   etcd rolled out, endpoints known ─▶ KubeadmControlPlane applied with those endpoints
//! ```
//!
//! An etcd upgrade moves its members (new machines, new addresses): the control plane's
//! endpoints change once, after etcd has rolled out, together with whatever else the revision
//! changes in the control plane. So an etcd change costs one control-plane rollout, never two.

use std::collections::BTreeMap;
use std::sync::Arc;

use capstan_layout::{ClusterEntry, Fleet, Objects, Rendered};
use serde_json::{Value, json};

use super::pass::Pass;
use crate::health::{MachineSet, Observed, RolloutStatus};
use crate::plan::chain::{self, Chain, minor_of};
use crate::plan::impact::{Basis, Impact};
use crate::plan::stages::{self, Progress, Settings, Staged};
use crate::plan::{Action, ObjectRef, Plan};
use capstan_templates::spec::EKSA_GROUP;

/// What a cluster's pass knows of its live rollout objects (Cluster, EtcdadmCluster, control
/// plane, HelmChartProxies, MachineDeployments and their MachineSets), read once at its start.
/// The chain step, the etcd wiring and the stages all decide from this one copy: the watches
/// keep the cache moving while the pass plans, and a control plane wired with the endpoints of
/// one moment and staged on the etcd status of the next could be applied with stale endpoints.
pub(super) struct Snapshot(BTreeMap<String, Fact>);

/// One object of a [`Snapshot`]: `Kind/name`, its generation, its rollout status and, for a
/// MachineDeployment, its MachineSets.
type Fact = (String, i64, Option<Arc<RolloutStatus>>, Vec<MachineSet>);

impl Snapshot {
    fn rollout(&self, o: &Rendered) -> Option<Arc<RolloutStatus>> {
        self.0
            .get(&crate::plan::reference(o).key())
            .and_then(|f| f.2.clone())
    }

    fn observed(&self, r: &ObjectRef) -> Option<Observed<'_>> {
        self.0
            .get(&r.key())
            .map(|(what, generation, rollout, sets)| Observed {
                what,
                generation: *generation,
                rollout: rollout.as_deref(),
                machine_sets: sets,
            })
    }
}

/// What of a cluster's spec is applied in this pass, version-wise ([`chain`]).
pub(super) enum Versioned {
    /// The spec as rendered.
    Spec,
    /// One step of a chained upgrade: these objects, and a note for the status.
    Step(Objects, String),
    /// Nothing: why.
    Refused(String),
}

/// Where the KubeadmControlPlane keeps external etcd's endpoints.
const KCP_ENDPOINTS: &str = "/spec/kubeadmConfigSpec/clusterConfiguration/etcd/external/endpoints";

/// Objects whose desired content depends on live state, rewritten; and desired objects that
/// cannot be applied yet (by key, with the reason).
pub(super) struct Wired {
    /// The rewritten objects (None: the rendered ones as they are).
    pub objects: Option<Vec<Rendered>>,
    /// Objects held before any stage is looked at.
    pub held: BTreeMap<String, String>,
}

impl Pass<'_> {
    /// The stage settings of a cluster: the agent's, with the fleet config's `rollout`
    /// section ([`Settings::for_cluster`]).
    pub(super) fn settings(&self, fleet: &Fleet, entry: &ClusterEntry) -> Settings {
        Settings::for_cluster(
            self.opts.stages,
            crate::plan::waves::rollout_of(fleet, entry.management()),
            entry.role == capstan_layout::Role::Management,
        )
    }

    /// The [`Snapshot`] of a cluster's rollout objects.
    pub(super) fn snapshot(&self, entry: &ClusterEntry) -> Snapshot {
        let facts = entry
            .objects
            .iter()
            .flatten()
            .map(crate::plan::reference)
            .filter(|r| crate::live::read_whole(&r.api_version, &r.kind))
            .filter_map(|r| {
                let live = self.live.get(&r)?;
                let sets = if crate::live::has_machine_sets(&r.api_version, &r.kind) {
                    self.live.machine_sets(&r.namespace, &r.name)
                } else {
                    Vec::new()
                };
                Some((
                    r.key(),
                    (
                        format!("{}/{}", r.kind, r.name),
                        live.generation,
                        live.rollout,
                        sets,
                    ),
                ))
            })
            .collect();
        Snapshot(facts)
    }

    /// Whether the spec's control-plane version can be applied as it is, or only one step of a
    /// chain towards it ([`crate::plan::chain`]), from the live versions.
    pub(super) fn versioned(&self, entry: &ClusterEntry, snap: &Snapshot) -> Versioned {
        let objects = entry.objects.iter().flatten();
        let of_kind = |group: &'static str, kind: &'static str| {
            objects.clone().filter(move |o| {
                o.kind() == kind && capstan_templates::identity::group(o.api_version()) == group
            })
        };
        let Some(kcp) = of_kind("controlplane.cluster.x-k8s.io", "KubeadmControlPlane").next()
        else {
            return Versioned::Spec;
        };
        let live = |o: &Rendered| snap.rollout(o);
        let version_in = |o: &Rendered, p: &str| {
            o.value()
                .pointer(p)
                .and_then(Value::as_str)
                .and_then(minor_of)
        };
        let Some(desired) = version_in(kcp, "/spec/version") else {
            return Versioned::Spec;
        };
        let live_kcp = live(kcp);
        let group_of = |o: &Rendered| {
            o.name()
                .strip_prefix(&format!("{}-", entry.name))
                .unwrap_or(o.name())
                .to_string()
        };
        let mds: Vec<&Rendered> = of_kind("cluster.x-k8s.io", "MachineDeployment").collect();
        let desired_workers = mds
            .iter()
            .filter_map(|o| Some((group_of(o), version_in(o, "/spec/template/spec/version")?)))
            .collect();
        let now = chain::Live {
            control_plane: live_kcp
                .as_ref()
                .and_then(|r| r.version.as_deref().and_then(minor_of)),
            control_plane_rolled_out: live_kcp
                .as_ref()
                .and_then(|r| r.rolled_out_version.as_deref().and_then(minor_of)),
            workers: mds
                .iter()
                .filter_map(|o| {
                    let v = live(o)?.version.as_deref().and_then(minor_of)?;
                    Some((group_of(o), v))
                })
                .collect(),
        };
        match chain::decide(desired, &desired_workers, &now, !self.opts.no_chain) {
            Chain::Direct => Versioned::Spec,
            Chain::Refused(why) => Versioned::Refused(why),
            Chain::Step {
                from,
                control_plane,
                to,
                workers,
            } => match capstan_layout::step::render_at(entry, control_plane, &workers) {
                Ok(objects) => Versioned::Step(
                    objects,
                    format!("chained upgrade {from} → {to}, step {control_plane}"),
                ),
                Err(e) => Versioned::Refused(format!(
                    "a chained upgrade {from} → {to} needs Kubernetes {control_plane} first: {e}"
                )),
            },
        }
    }

    /// The external-etcd wiring of a cluster's objects ([module docs](self)).
    pub(super) fn wire<'o>(
        &self,
        rendered: impl Iterator<Item = &'o Rendered> + Clone,
        snap: &Snapshot,
    ) -> Wired {
        let mut out = Wired {
            objects: None,
            held: BTreeMap::new(),
        };
        let Some(etcd) = rendered.clone().find(|o| {
            o.kind() == "EtcdadmCluster"
                && capstan_templates::identity::group(o.api_version())
                    == "etcdcluster.cluster.x-k8s.io"
        }) else {
            return out;
        };
        let cluster = rendered.clone().find(|o| {
            o.kind() == "Cluster"
                && capstan_templates::identity::group(o.api_version()) == "cluster.x-k8s.io"
        });
        let live = |o: &Rendered| snap.rollout(o);
        let uid = cluster
            .and_then(live)
            .and_then(|r| r.uid.as_deref().map(str::to_string));
        let endpoints: Option<String> = live(etcd)
            .and_then(|r| r.etcd.as_ref().map(|e| e.endpoints.to_string()))
            .filter(|e| !e.is_empty());
        let objects = rendered
            .map(|o| match o.kind() {
                "EtcdadmCluster" if std::ptr::eq(o, etcd) => match (&uid, cluster) {
                    (Some(uid), Some(c)) => {
                        let mut v = o.value();
                        v["metadata"]["ownerReferences"] = json!([{
                            "apiVersion": c.api_version(),
                            "kind": "Cluster",
                            "name": c.name(),
                            "uid": uid,
                        }]);
                        Rendered::new(&v)
                    }
                    _ => {
                        out.held.insert(
                            crate::plan::reference(o).key(),
                            format!(
                                "waits for its owner Cluster/{} to exist (etcdadm acts only on an EtcdadmCluster its Cluster owns)",
                                cluster.map_or("?", Rendered::name)
                            ),
                        );
                        o.clone()
                    }
                },
                "KubeadmControlPlane" => {
                    let mut v = o.value();
                    match (v.pointer_mut(KCP_ENDPOINTS), &endpoints) {
                        (Some(slot), Some(eps)) => {
                            *slot = Value::Array(
                                eps.split(',')
                                    .map(|e| Value::String(e.trim().to_string()))
                                    .collect(),
                            );
                            Rendered::new(&v)
                        }
                        (Some(_), None) => {
                            out.held.insert(
                                crate::plan::reference(o).key(),
                                format!(
                                    "waits for etcd's endpoints ({} reports none yet)",
                                    etcd.subject()
                                ),
                            );
                            o.clone()
                        }
                        (None, _) => o.clone(),
                    }
                }
                _ => o.clone(),
            })
            .collect();
        out.objects = Some(objects);
        out
    }

    /// Where the stages of an applied plan stand, from the live facts now: its creates and
    /// updates are out, what was held is still held.
    pub(super) fn progress(&self, entry: &ClusterEntry, plan: &Plan, settings: Settings) -> Staged {
        let snap = self.snapshot(entry);
        let entries: Vec<crate::plan::Entry> = plan
            .entries
            .iter()
            .map(|e| {
                let mut e = e.clone();
                if matches!(e.action, Action::Create | Action::Update) {
                    e.action = Action::Unchanged;
                }
                e
            })
            .collect();
        stages::schedule(&entries, |r: &ObjectRef| snap.observed(r), settings)
    }

    /// Holds, in `plan`, what waits for an earlier stage. Returns the stages. (Prunes are held
    /// once the pass knows where the rollout stands: [`crate::plan::planner::hold_prunes`].)
    pub(super) fn stage(
        &self,
        plan: &mut Plan,
        settings: Settings,
        held: &BTreeMap<String, String>,
        snap: &Snapshot,
    ) -> Staged {
        for e in &mut plan.entries {
            if let Some(why) = held.get(&e.object.key())
                && matches!(e.action, Action::Create | Action::Update)
            {
                e.action = Action::Held;
                e.reason = Some(why.clone());
            }
        }
        let staged = stages::schedule(&plan.entries, |r: &ObjectRef| snap.observed(r), settings);
        for e in &mut plan.entries {
            if let Some(why) = staged.held.get(&e.object.key()) {
                e.action = Action::Held;
                e.reason = Some(why.clone());
            }
        }
        staged
    }

    /// Where the cluster's rollout stands ([`crate::plan::planner::hold_prunes`]): done when no
    /// stage of `staged` waits and Cluster API reports the cluster rolled out at this revision,
    /// with the objects pruned before and still deleting counted as not done.
    pub(super) fn rollout(
        &self,
        plan: &Plan,
        objects: &[(&Rendered, ObjectRef)],
        staged: &Staged,
    ) -> Progress {
        if let Some((stage, progress)) = &staged.waiting {
            return Progress::Waiting(format!("the {stage} stage: {progress}"));
        }
        let deleting: Vec<&ObjectRef> = plan
            .entries
            .iter()
            .filter(|e| e.action == Action::Deleting)
            .map(|e| &e.object)
            .collect();
        let health = self.assessment(objects, &deleting);
        if health.ready {
            Progress::Done
        } else {
            Progress::Waiting(health.message)
        }
    }
}

impl Pass<'_> {
    /// The plan-time gate for fields EKS Anywhere holds immutable on a live cluster (endpoint,
    /// pod and service CIDRs, etcd topology, datacenter and so provider, namespace, CNI, …;
    /// [`crate::plan::impact`]): when the plan changes an EKS-A object, the live objects are
    /// read and compared, and a change to such a field refuses the whole revision for this
    /// cluster, each field with its `file:line` and why. Kubernetes versions are not judged
    /// here: the chain ([`chain`]) applies jumps one minor at a time and refuses downgrades.
    /// Reads only when an EKS-A object changes, so a no-op pass stays without requests.
    pub(super) async fn immutable_gate(
        &self,
        entry: &ClusterEntry,
        plan: &Plan,
        objects: &[(&Rendered, ObjectRef)],
        previous: &[ObjectRef],
    ) -> Result<Option<String>, String> {
        let Some(spec) = entry.cluster.as_ref() else {
            return Ok(None);
        };
        // A cluster's namespace (EKS Anywhere holds it immutable): its objects in another
        // namespace would be a second cluster beside the first, not the same one moved.
        if let Some(recorded) = previous
            .iter()
            .find(|r| r.group() == EKSA_GROUP && r.kind == "Cluster" && r.name == spec.name)
            .filter(|r| r.namespace != spec.namespace)
        {
            let pos = spec.source.pos("metadata.namespace");
            return Ok(Some(format!(
                "{}:{}:{}: metadata.namespace: the cluster lives in namespace `{}`; EKS Anywhere holds a cluster's namespace immutable (moving it would make a second cluster beside the first)",
                spec.source.file.display(),
                pos.line,
                pos.column,
                recorded.namespace
            )));
        }
        let changed: Vec<&ObjectRef> = plan
            .entries
            .iter()
            .filter(|e| e.action == Action::Update && e.object.group() == EKSA_GROUP)
            .map(|e| &e.object)
            .collect();
        let (mut live, mut new) = (Vec::new(), Vec::new());
        for r in changed {
            let api = self.api_for(r).await?;
            self.read();
            let obj = api
                .get_opt(&r.name)
                .await
                .map_err(|e| format!("{}: {e}", r.subject()))?;
            let desired = objects.iter().find(|(_, o)| o.key() == r.key());
            if let (Some(obj), Some((o, _))) = (obj, desired) {
                live.push(serde_json::to_value(&obj).unwrap_or(Value::Null));
                new.push(o.value());
            }
        }
        if live.is_empty() {
            return Ok(None);
        }
        let blocked: Vec<String> = Impact::between(&live, &new, Basis::Live)
            .blocked
            .into_iter()
            .filter(|b| b.field != "spec.kubernetesVersion")
            .map(|b| match b.locate(spec) {
                Some((file, pos)) => {
                    format!("{}:{}:{}: {b}", file.display(), pos.line, pos.column)
                }
                None => b.to_string(),
            })
            .collect();
        Ok((!blocked.is_empty()).then(|| blocked.join("; ")))
    }
}
