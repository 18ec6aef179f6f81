//! What a cluster's pass decides before anything is written: a value, [`Decided`].
//!
//! `capstan plan` and a pull request's plan show it ([`Pass::show`]); the reconcile carries it
//! out ([`Pass::perform`], in `pass.rs`), so a plan is the reconcile's own decision stopped
//! before the apply, not a mode the executor checks as it goes. Deciding reads — the live
//! facts the watches hold, the server's dry runs, the live EKS-A objects immutable fields are
//! checked against — and writes nothing to the management cluster. The rules it applies are
//! pure and tested apart: `capstan_plan::decide` (the gate, refusals, holds, the settled
//! status), the planner, the stages, the waves, the chain.

use capstan_layout::{ClusterEntry, Fleet, Objects, Rendered};

use super::pass::{Pass, Purpose, Writer};
use super::staging::Versioned;
use super::{ClusterOutcome, desired, fingerprint};
use crate::plan::planner;
use crate::plan::stages::{Settings, Staged};
use crate::plan::{self, ObjectRef, Plan};
use crate::status::{ManagedClusterStatus, Phase, Reason, Recorded};
use capstan_plan::decide::{self, Gate};
use capstan_plan::holds;

/// A cluster's name and where its record says it lives.
pub(super) struct Home {
    pub(super) name: String,
    pub(super) management: String,
    pub(super) dir: String,
}

impl Home {
    fn of(entry: &ClusterEntry) -> Home {
        Home {
            name: entry.name.clone(),
            management: entry.management().to_string(),
            dir: entry.dir.display().to_string(),
        }
    }
}

/// One cluster's decision.
pub(super) struct Decided<'e> {
    pub(super) home: Home,
    /// Its record before this pass.
    pub(super) prev: Option<&'e Recorded>,
    /// An orphan taken back on an admin's mark: the mark is cleared (it lets it back once).
    pub(super) reclaim: bool,
    pub(super) course: Course<'e>,
}

/// What is to be done with a cluster.
pub(super) enum Course<'e> {
    /// Held before planning (suspended, its management cluster upgrading, a kind the agent
    /// may not write): this status recorded, nothing applied.
    Held {
        status: ManagedClusterStatus,
        message: String,
    },
    /// A recorded cluster whose directory is gone without a tombstone: it stays Orphaned,
    /// nothing applied, nothing deleted.
    Orphaned { message: String },
    /// This revision refused for the cluster: the refusal recorded; the plan shown when it
    /// says why (objects that exist and are not the cluster's).
    Refused {
        refusal: decide::Refusal,
        plan: Option<Plan>,
    },
    /// Deletion on intent.
    Delete(Deletion),
    /// Changes to apply.
    Apply(Box<Planned<'e>>),
}

/// A deletion a tombstone asks for ([`crate::plan::deletion`]), and whom it is written as.
pub(super) struct Deletion {
    pub(super) writer: Writer,
    pub(super) planned: crate::plan::deletion::Deletion,
}

/// A plan to apply, with what applying it and settling its status need.
pub(super) struct Planned<'e> {
    pub(super) entry: &'e ClusterEntry,
    pub(super) writer: Writer,
    /// The revision's identity for this cluster: what the repository asks for, before the
    /// chain step and the live-dependent wiring.
    pub(super) fingerprint: String,
    /// The chain step taken, for the status.
    pub(super) note: Option<String>,
    pub(super) settings: Settings,
    /// What is applied: the rendered objects, a chain step's, or either wired to live etcd.
    pub(super) objects: Objects,
    pub(super) previous_inventory: Vec<ObjectRef>,
    pub(super) plan: Plan,
    pub(super) holds: crate::plan::holds::Holds,
    /// Its wave, when the fleet paces upgrades.
    pub(super) wave: Option<String>,
    pub(super) staged: Staged,
}

impl Planned<'_> {
    /// The objects applied, with their references.
    pub(super) fn objects(&self) -> Vec<(&Rendered, ObjectRef)> {
        references(&self.objects)
    }

    /// The outcome of this plan: `plan` as it ended, where the stages wait.
    pub(super) fn outcome(
        &self,
        plan: Plan,
        phase: Phase,
        message: String,
        waiting: Option<(crate::plan::stages::Stage, String)>,
    ) -> ClusterOutcome {
        ClusterOutcome {
            staged: Staged {
                waiting,
                ..self.staged.clone()
            },
            paced: self.holds.paced.clone(),
            ..ClusterOutcome::new(&self.entry.name, plan, phase, message)
        }
    }
}

fn references(objects: &Objects) -> Vec<(&Rendered, ObjectRef)> {
    objects.iter().map(|o| (o, plan::reference(o))).collect()
}

impl<'e> Decided<'e> {
    /// A recorded cluster the repository no longer has.
    pub(super) fn orphan(name: &str, rec: &'e Recorded) -> Decided<'e> {
        Decided {
            home: Home {
                name: name.to_string(),
                management: rec.management.clone(),
                dir: rec.directory.clone(),
            },
            prev: Some(rec),
            reclaim: false,
            course: Course::Orphaned {
                message: "its directory is gone from the repository; nothing was deleted (use `capstan delete cluster` to delete it)".to_string(),
            },
        }
    }
}

impl Pass<'_> {
    /// Decides a cluster: gate → version step → wiring → plan → refusals → holds → stages.
    pub(super) async fn decide<'e>(
        &self,
        fleet: &Fleet,
        entry: &'e ClusterEntry,
        prev: Option<&'e Recorded>,
        purpose: Purpose,
    ) -> Decided<'e> {
        let writer = self.writer(&entry.role, &entry.name);
        let denied = entry.objects.iter().flatten().find_map(|o| {
            self.live
                .denied(o.api_version(), o.kind())
                .map(|why| (o.kind().to_string(), o.api_version().to_string(), why))
        });
        let gate = decide::gate(&decide::GateFacts {
            entry,
            prev,
            revision: &self.opts.revision,
            fleet_suspended: fleet.suspended,
            management_upgrading: self.management_upgrading(entry),
            denied,
            backing_out: self.opts.backing_out,
        });
        let decided = |reclaim, course| Decided {
            home: Home::of(entry),
            prev,
            reclaim,
            course,
        };
        match gate {
            Gate::Hold { reason, message } => {
                let status = decide::held(prev, reason, &message);
                decided(false, Course::Held { status, message })
            }
            Gate::StayOrphaned(message) => decided(false, Course::Orphaned { message }),
            Gate::Refuse(refusal) => decided(
                false,
                Course::Refused {
                    refusal,
                    plan: None,
                },
            ),
            Gate::Delete => decided(false, Course::Delete(self.deletion(entry, prev, writer))),
            Gate::Proceed { reclaim } => decided(
                reclaim,
                self.planned(fleet, entry, prev, writer, purpose).await,
            ),
        }
    }

    /// The course of a cluster that passed the gate: refused, or a plan to apply.
    async fn planned<'e>(
        &self,
        fleet: &Fleet,
        entry: &'e ClusterEntry,
        prev: Option<&'e Recorded>,
        writer: Writer,
        purpose: Purpose,
    ) -> Course<'e> {
        let name = &entry.name;
        let fp = fingerprint(&desired(entry));
        let settings = self.settings(fleet, entry);
        let snap = self.snapshot(entry);
        let (step, note) = match self.versioned(entry, &snap) {
            Versioned::Spec => (None, None),
            Versioned::Step(objects, note) => (Some(objects), Some(note)),
            Versioned::Refused(why) => {
                let at = entry.cluster.as_ref().map(|c| {
                    let pos = c.source.pos("spec.kubernetesVersion");
                    format!("{}:{}:{}: ", c.source.file.display(), pos.line, pos.column)
                });
                let why = format!("{}{why}", at.unwrap_or_default());
                let refusal =
                    decide::refusal(&self.opts.revision, prev, Reason::UpgradeRefused, why);
                return Course::Refused {
                    refusal,
                    plan: None,
                };
            }
        };
        let wired = match &step {
            Some(objects) => self.wire(objects.iter(), &snap),
            None => self.wire(entry.objects.iter().flatten(), &snap),
        };
        let objects: Objects = match (wired.objects, step) {
            (Some(objs), _) => objs.into_iter().collect(),
            (None, Some(objs)) => objs,
            (None, None) => entry.objects.clone().unwrap_or_default(),
        };
        // The Secrets kept encrypted in its directory, decrypted in memory for this pass.
        let objects = match super::sops::open_sealed(
            self.client(),
            &super::sops::sops_secret(self.opts),
            &entry.sealed,
            objects,
        )
        .await
        {
            Ok(objects) => objects,
            Err(why) => {
                let refusal =
                    decide::refusal(&self.opts.revision, prev, Reason::DecryptionFailed, why);
                return Course::Refused {
                    refusal,
                    plan: None,
                };
            }
        };
        let previous_inventory = prev.map(Recorded::inventory).unwrap_or_default();
        let (plan, holds, staged) = {
            let refs = references(&objects);
            let mut plan = self
                .plan(name, &writer, &refs, &previous_inventory, purpose)
                .await;
            if let Some(refusal) = self
                .refusal(entry, prev, &plan, &refs, &previous_inventory)
                .await
            {
                // The plan shows why (an object that is not the cluster's is a conflict in it).
                let plan = (refusal.reason == Reason::AlreadyExists).then_some(plan);
                return Course::Refused { refusal, plan };
            }
            self.hold_under_deletion(&mut plan, &refs);
            let holds = self.holds(fleet, entry, &mut plan, &refs, prev, &fp, purpose);
            let mut staged = self.stage(&mut plan, settings, &wired.held, &snap);
            staged.outline = crate::plan::stages::outline(&plan.entries, settings);
            (plan, holds, staged)
        };
        Course::Apply(Box::new(Planned {
            entry,
            writer,
            fingerprint: fp,
            note,
            settings,
            objects,
            previous_inventory,
            plan,
            holds,
            wave: self.wave_label(fleet, entry),
            staged,
        }))
    }

    /// A cluster whose Cluster API Cluster someone deleted outside capstan: Cluster API is
    /// tearing it down, deleting what belongs to it, and whatever capstan applied meanwhile
    /// would be deleted again — recreated objects would keep the deletion from ever finishing.
    /// Nothing of the cluster is written until the Cluster is gone
    /// ([`crate::plan::holds::under_deletion`]); the repository's cluster is then created again.
    fn hold_under_deletion(&self, plan: &mut Plan, objects: &[(&Rendered, ObjectRef)]) {
        if let Some(cluster) = objects
            .iter()
            .map(|(_, r)| r)
            .find(|r| r.kind == "Cluster" && r.group() == "cluster.x-k8s.io")
            .filter(|r| self.live.get(r).is_some_and(|l| l.deleting))
        {
            holds::under_deletion(plan, cluster);
        }
    }

    /// The holds before anything is applied ([`crate::plan::holds`]): the health gate, then
    /// (once the cluster itself is fit to start) the fleet's pacing.
    #[allow(clippy::too_many_arguments)]
    fn holds(
        &self,
        fleet: &Fleet,
        entry: &ClusterEntry,
        plan: &mut Plan,
        objects: &[(&Rendered, ObjectRef)],
        prev: Option<&Recorded>,
        fp: &str,
        purpose: Purpose,
    ) -> holds::Holds {
        let live = |r: &ObjectRef| self.live.get(r).is_some();
        let facts = holds::HealthFacts {
            recorded: prev.map(|p| p.status.desired_hash.as_str()).unwrap_or(""),
            target: fp,
            overridden: upgrade_when_unhealthy(entry),
        };
        let gated = holds::health_gate(plan, &facts, live, || {
            let a = self.assessment(objects, &[]);
            match a.ready {
                true => Ok(()),
                false => Err(decide::health(&a).1),
            }
        });
        // Bare metal: a rollout starts only with the spare servers its surge needs.
        let bare_metal = objects
            .iter()
            .any(|(r, _)| crate::live::draws_on_hardware(r.api_version(), r.kind()));
        let short = match (&gated, bare_metal) {
            (None, true) => {
                let desired: Vec<serde_json::Value> = objects
                    .iter()
                    .filter(|(r, _)| {
                        matches!(
                            r.kind(),
                            "KubeadmControlPlane"
                                | "MachineDeployment"
                                | "TinkerbellMachineTemplate"
                        )
                    })
                    .map(|(r, _)| r.value())
                    .collect();
                crate::plan::spare::spare_gate(plan, &facts, &desired, live, || {
                    let servers = self.live.servers();
                    tracing::debug!(
                        cluster = %entry.name,
                        hardware = ?servers.as_ref().map(Vec::len),
                        "spare-hardware gate: the Hardware read (None: unread, nothing held)"
                    );
                    servers
                })
            }
            _ => None,
        };
        let paced = match (&gated, &short) {
            (None, None) => self.wave_gate(fleet, entry, plan, prev, fp, purpose),
            _ => None,
        };
        let upgrading = prev.is_some_and(|p| p.status.phase == Some(Phase::Upgrading));
        holds::combined(gated, short, paced, upgrading)
    }

    /// Whether the object is the cluster's to delete: what the record holds and is still
    /// labelled for it (the inventory is capstan's record; the label is what the object says
    /// now). An object relabelled for another cluster, or whose capstan labels were taken off,
    /// is left alone (`Err`: why). Gone is gone (`Ok(false)`).
    pub(super) fn ours(&self, cluster: &str, r: &ObjectRef) -> Result<bool, String> {
        match self.live.get(r) {
            None => Ok(false),
            Some(o) if o.cluster.as_deref() == Some(cluster) => Ok(true),
            Some(o) => Err(format!(
                "its capstan.dev/cluster label names {}: not this cluster's to delete",
                o.cluster
                    .as_deref()
                    .map_or("no fleet cluster".to_string(), |c| format!(
                        "fleet cluster {c}"
                    ))
            )),
        }
    }

    /// The deletion a tombstone asks for, planned ([`crate::plan::deletion::planned`]).
    fn deletion(&self, entry: &ClusterEntry, prev: Option<&Recorded>, writer: Writer) -> Deletion {
        let inventory = prev.map(Recorded::inventory).unwrap_or_default();
        Deletion {
            writer,
            planned: crate::plan::deletion::planned(&entry.name, inventory, |r| {
                self.ours(&entry.name, r)
            }),
        }
    }

    /// A decision as `capstan plan` shows it: nothing written; a plan's prunes held where the
    /// rollout it would start still needs the old templates.
    pub(super) fn show(&self, d: Decided<'_>) -> ClusterOutcome {
        let name = &d.home.name;
        match d.course {
            Course::Held { message, .. } => ClusterOutcome::empty(name, Phase::Suspended, message),
            Course::Orphaned { message } => ClusterOutcome::empty(name, Phase::Orphaned, message),
            Course::Refused { refusal, plan } => refused(name, refusal, plan),
            Course::Delete(deletion) => ClusterOutcome::new(
                name,
                deletion.planned.plan,
                Phase::Deleting,
                "deletion requested".into(),
            ),
            Course::Apply(planned) => {
                let mut plan = planned.plan.clone();
                let rollout = self.rollout(&plan, &planned.objects(), &planned.staged);
                planner::hold_prunes(&mut plan.entries, &rollout);
                // Its add-ons, against what its record says was applied inside it.
                let recorded = d
                    .prev
                    .and_then(|p| p.status.addons.as_ref())
                    .map(|a| a.inventory.as_slice())
                    .unwrap_or_default();
                let wanted = planned.entry.addons.as_deref().map(Vec::as_slice);
                plan.entries.extend(crate::plan::addons::against_record(
                    wanted.unwrap_or_default(),
                    recorded,
                ));
                let phase = if plan.has_changes() {
                    Phase::Pending
                } else {
                    Phase::Ready
                };
                let waiting = planned.staged.waiting.clone();
                planned.outcome(plan, phase, String::new(), waiting)
            }
        }
    }
}

/// Whether the cluster's EKS-A Cluster, in the repository, lets its upgrade start while it is
/// unhealthy ([`holds::UPGRADE_WHEN_UNHEALTHY`]).
fn upgrade_when_unhealthy(entry: &ClusterEntry) -> bool {
    entry.objects.iter().flatten().any(|o| {
        o.kind() == "Cluster"
            && capstan_templates::identity::group(o.api_version())
                == capstan_templates::spec::EKSA_GROUP
            && o.value()
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(holds::UPGRADE_WHEN_UNHEALTHY))
                .is_some()
    })
}

/// The outcome of a refused revision, with `plan` when it shows why.
pub(super) fn refused(name: &str, r: decide::Refusal, plan: Option<Plan>) -> ClusterOutcome {
    let mut outcome = ClusterOutcome::empty(name, Phase::Failed, r.message);
    if let Some(plan) = plan {
        outcome.plan = plan;
    }
    outcome
}

impl Pass<'_> {
    /// Why this revision is refused for the cluster after planning, when it is: objects that
    /// exist and are not the cluster's (nothing of it is applied until an admin hands them
    /// over or the repository renames them), objects the API server refuses as they are (a
    /// webhook's denial: nothing of the revision is applied to the cluster, the last applied
    /// one stays live), or fields EKS Anywhere holds immutable.
    pub(super) async fn refusal(
        &self,
        entry: &ClusterEntry,
        prev: Option<&Recorded>,
        plan: &Plan,
        objects: &[(&Rendered, ObjectRef)],
        previous: &[ObjectRef],
    ) -> Option<decide::Refusal> {
        let revision = &self.opts.revision;
        let claimed: Vec<String> = plan
            .entries
            .iter()
            .filter(|e| planner::is_claimed(e))
            .map(|e| e.reason.clone().unwrap_or_default())
            .collect();
        if !claimed.is_empty() {
            let why = claimed.join("; ");
            return Some(decide::refusal(revision, prev, Reason::AlreadyExists, why));
        }
        let refused: Vec<String> = plan
            .entries
            .iter()
            .filter(|e| planner::is_refused_by_the_server(e))
            .map(|e| {
                format!(
                    "{}: {}",
                    e.object.subject(),
                    e.reason.as_deref().unwrap_or_default()
                )
            })
            .collect();
        if !refused.is_empty() {
            let why = refused.join("; ");
            return Some(decide::refusal(revision, prev, Reason::ApplyFailed, why));
        }
        match self.immutable_gate(entry, plan, objects, previous).await {
            Ok(None) => None,
            Ok(Some(why)) => Some(decide::refusal(revision, prev, Reason::ImmutableField, why)),
            Err(e) => Some(decide::refusal(
                revision,
                prev,
                Reason::ReadFailed,
                format!("reading its live EKS-A objects: {e}"),
            )),
        }
    }
}
