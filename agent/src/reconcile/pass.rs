//! One pass over the clusters of a revision, and what every step of it reads and writes through:
//! the identity a cluster is written as ([`Writer`]), the live facts, the server's dry runs
//! ([`Pass::plan`]), an object's deletion. Deciding (`decision.rs`, `staging.rs`, `pacing.rs`)
//! and carrying out (`perform.rs`) are `impl Pass` in their own files and build on this one,
//! which builds on none of them. Shared by the clusters reconciled concurrently, so everything
//! is `&self` (counters are atomics, the live state and discovery take their own locks).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use capstan_layout::Rendered;
use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject};

use super::{Agent, Options};
use crate::health;
use crate::k8s::apply::apply_one;
use crate::k8s::{ApplyError, Resolver};
use crate::live::{Live, LiveObject};
use crate::plan::fights::{self, Verdict};
use crate::plan::planner::{self, Decision};
use crate::plan::{self, Action, Entry, ObjectRef, Plan};
use crate::status::Reason;

/// What a decision is for. One that will be carried out claims, as it is made, what the
/// clusters decided beside it must see at once: its slot in the fleet's waves
/// ([`Pass::wave_gate`](super::pacing)) and the drift corrections counted against another field manager
/// ([`crate::plan::fights`]). One that is only shown claims nothing, and asks the server to
/// validate the objects it would create (a reconcile's apply is validated strictly itself, so
/// it does not ask twice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Purpose {
    /// `capstan plan`, a pull request's plan.
    Show,
    /// A reconcile.
    Perform,
}

/// The identity a cluster's objects are written as ([`Pass::writer`]).
pub(super) struct Writer {
    /// Its client.
    pub(super) client: Client,
    tenant: crate::k8s::identity::Tenant,
    cluster: String,
}

/// Objects of one cluster's apply layer written at once ([`crate::plan::order`]): a new
/// cluster's first layer is about eight objects; `--concurrency` clusters each have this many.
pub(super) const APPLY_AT_ONCE: usize = 8;

/// One pass.
pub(super) struct Pass<'a> {
    pub(super) agent: &'a Agent,
    pub(super) live: Arc<Live>,
    pub(super) opts: &'a Options,
    pub(super) writes: AtomicUsize,
    pub(super) reads: AtomicUsize,
}

impl Pass<'_> {
    pub(super) fn client(&self) -> &Client {
        &self.agent.client
    }

    pub(super) fn resolver(&self) -> &Resolver {
        &self.agent.resolver
    }

    /// Who writes a cluster's objects: its cluster's identity ([`crate::k8s::identity`]),
    /// which the tenancy policy confines to that cluster.
    pub(super) fn writer(&self, role: &capstan_layout::Role, cluster: &str) -> Writer {
        let tenant = crate::k8s::identity::Tenant::of(role);
        Writer {
            client: self.agent.identities.client(tenant, cluster),
            tenant,
            cluster: cluster.to_string(),
        }
    }

    /// The client that writes `r` as `w`: vouching for it by UID when its live cluster label is
    /// not `w`'s cluster any more (someone relabelled an object of the cluster's record: drift,
    /// put back; objects the record does not hold are never written, [`planner::decide`]).
    pub(super) fn client_for(&self, w: &Writer, r: &ObjectRef) -> Client {
        match self.live.get(r) {
            Some(l) if l.cluster.as_deref() != Some(w.cluster.as_str()) => match l.uid {
                Some(uid) => self.agent.identities.vouching(
                    w.tenant,
                    &w.cluster,
                    &[crate::live::format_uid(uid)],
                ),
                None => w.client.clone(),
            },
            _ => w.client.clone(),
        }
    }

    pub(super) fn wrote(&self) {
        self.writes.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn read(&self) {
        self.reads.fetch_add(1, Ordering::Relaxed);
    }

    /// A drift correction about to be made, unless capstan has been fighting another field
    /// manager over this object ([`fights`]): then a [`Action::Conflict`] that names it.
    /// Only a correction to be made counts towards a fight; a plan shown does not.
    fn fought(&self, mut e: Entry, live: Option<&serde_json::Value>, purpose: Purpose) -> Entry {
        let correcting = e.action == Action::Update
            && e.reason.as_deref().is_some_and(|r| r.starts_with("drift"));
        if !correcting || purpose == Purpose::Show {
            return e;
        }
        let manager = live.and_then(fights::other_manager);
        let verdict = self.agent.fights().drifted(
            &e.object.key(),
            manager.as_deref(),
            std::time::Instant::now(),
        );
        if let Verdict::Hold {
            manager,
            corrections,
            left,
            ..
        } = verdict
        {
            e.action = Action::Conflict;
            e.reason = Some(format!(
                "conflict: {} keeps changing fields capstan owns (corrected {corrections} times within {}s); not re-applied for {}s",
                manager.map_or("another field manager".to_string(), |m| format!(
                    "field manager `{m}`"
                )),
                fights::FIGHT_WINDOW.as_secs(),
                left.as_secs(),
            ));
        }
        e
    }

    /// A live object read whole (None: absent or unreadable; the caller's facts say so).
    pub(super) async fn get_live(&self, r: &ObjectRef) -> Option<serde_json::Value> {
        let api = self.api_for(r).await.ok()?;
        self.read();
        let obj = api.get_opt(&r.name).await.ok()??;
        serde_json::to_value(obj).ok()
    }

    /// The plan of one cluster: the planner's decisions, with the server's dry run where only a
    /// comparison can tell (and for every object when the plan is only shown: [`Purpose`]).
    pub(super) async fn plan(
        &self,
        name: &str,
        writer: &Writer,
        objects: &[(&Rendered, ObjectRef)],
        previous: &[ObjectRef],
        purpose: Purpose,
    ) -> Plan {
        let recorded: BTreeMap<String, &ObjectRef> =
            previous.iter().map(|r| (r.key(), r)).collect();
        let entry = |r: &ObjectRef, action, diff, reason| Entry {
            object: r.clone(),
            action,
            diff,
            reason,
            scale_only: false,
        };
        // Decided from the live facts where they suffice; the rest (index, drift, whether
        // there is a live object to read) asked of the server below.
        let mut entries: Vec<Option<Entry>> = Vec::with_capacity(objects.len());
        let mut ask: Vec<(usize, bool, bool)> = Vec::new();
        for (i, (rendered, r)) in objects.iter().enumerate() {
            let live = self.live.get(r);
            let fleet_wide = || {
                rendered
                    .value()
                    .pointer("/metadata/labels")
                    .and_then(|l| l.get(capstan_templates::identity::CLUSTER_LABEL))
                    .is_none()
            };
            match planner::decide(
                name,
                r,
                recorded.get(&r.key()).copied(),
                live.as_ref(),
                fleet_wide,
            ) {
                Decision::Unchanged => entries.push(Some(entry(r, Action::Unchanged, None, None))),
                Decision::Claimed { by } => entries.push(Some(planner::claimed(
                    r,
                    name,
                    &by.map_or("capstan did not create it".to_string(), |c| {
                        format!("it is labelled for cluster {c}")
                    }),
                ))),
                // Creating for real: the apply itself is validated strictly, no need to ask first.
                Decision::Create if purpose == Purpose::Perform => {
                    let obj = plan::annotated(rendered);
                    let diff = plan::diff(None, &obj, &r.subject());
                    entries.push(Some(entry(r, Action::Create, Some(diff), None)));
                }
                Decision::Create => {
                    entries.push(None);
                    ask.push((i, false, false));
                }
                Decision::Compare { drift } => {
                    entries.push(None);
                    ask.push((i, drift, live.is_some()));
                }
            }
        }
        // Ask the server what it would persist, and compare that with the whole live object
        // (the cache holds facts, not objects): the read and the dry run at once, and the
        // objects of the cluster side by side, so a change costs one round trip, not two per
        // object.
        let answers: Vec<(usize, Entry)> = futures::stream::iter(ask)
            .map(|(i, drift, has_live)| async move {
                let (rendered, r) = &objects[i];
                let body = plan::annotated(rendered);
                let read = async {
                    if has_live {
                        self.read();
                        Some(crate::live::fetch(self.client(), self.resolver(), r).await)
                    } else {
                        None
                    }
                };
                self.read();
                let dry = async {
                    apply_one(&self.client_for(writer, r), self.resolver(), &body, true).await
                };
                let (full, dry) = futures::join!(read, dry);
                let full = match full.transpose() {
                    Ok(full) => full.flatten(),
                    Err(e) => {
                        let why = format!("could not read the live object: {e}");
                        return (i, entry(r, Action::Skip, None, Some(why)));
                    }
                };
                let e = match dry {
                    Err(e) => {
                        let message = apply_message(&e);
                        match crate::k8s::tenancy::denial(&message) {
                            // Exists and is not the cluster's: a conflict, not a create.
                            Some((reason, why)) if reason == Reason::AlreadyExists.as_str() => {
                                Entry::new(r.clone(), Action::Conflict, Some(why.to_string()))
                            }
                            // The object itself is refused (a webhook, the schema): the
                            // revision cannot apply to this cluster ([`Self::refusal`]).
                            _ if matches!(e, ApplyError::Rejected { invalid: true, .. }) => {
                                planner::refused_by_the_server(r, &message)
                            }
                            _ => entry(
                                r,
                                Action::Skip,
                                None,
                                Some(format!("rejected by the API server: {message}")),
                            ),
                        }
                    }
                    Ok(dry) => {
                        let e = planner::compared(r, drift, self.opts.drift, full.as_ref(), &dry);
                        self.fought(e, full.as_ref(), purpose)
                    }
                };
                (i, e)
            })
            .buffered(APPLY_AT_ONCE)
            .collect()
            .await;
        for (i, e) in answers {
            entries[i] = Some(e);
        }
        let mut entries: Vec<Entry> = entries
            .into_iter()
            .map(|e| e.expect("every object is decided or asked"))
            .collect();
        let desired_keys: BTreeSet<String> = objects.iter().map(|(_, r)| r.key()).collect();
        entries.extend(planner::prunes(name, previous, &desired_keys, |r| {
            self.live.get(r)
        }));
        Plan {
            cluster: name.to_string(),
            entries,
        }
    }

    /// [`health::assess`] of the live facts of the cluster's Cluster, control plane and
    /// MachineDeployments; not ready while objects pruned before are still `deleting`.
    pub(super) fn assessment(
        &self,
        objects: &[(&Rendered, ObjectRef)],
        deleting: &[&ObjectRef],
    ) -> health::Assessment {
        // (kind, `Kind/name`, facts, MachineSets) of the kinds health reads.
        type Facts<'r> = (&'r str, String, Option<LiveObject>, Vec<health::MachineSet>);
        let facts: Vec<Facts<'_>> = objects
            .iter()
            .map(|(_, r)| r)
            .filter(|r| crate::live::read_whole(&r.api_version, &r.kind))
            .map(|r| {
                let sets = if crate::live::has_machine_sets(&r.api_version, &r.kind) {
                    self.live.machine_sets(&r.namespace, &r.name)
                } else {
                    Vec::new()
                };
                (
                    r.kind.as_str(),
                    format!("{}/{}", r.kind, r.name),
                    self.live.get(r),
                    sets,
                )
            })
            .collect();
        let observed: Vec<(&str, health::Observed<'_>)> = facts
            .iter()
            .map(|(kind, what, live, sets)| {
                let o = health::Observed {
                    what,
                    generation: live.as_ref().map_or(0, |l| l.generation),
                    rollout: live.as_ref().and_then(|l| l.rollout.as_deref()),
                    machine_sets: sets,
                };
                (*kind, o)
            })
            .collect();
        let of_kind = |kind: &str| -> Vec<health::Observed<'_>> {
            observed
                .iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, o)| *o)
                .collect()
        };
        match of_kind("Cluster").first() {
            None => health::Assessment {
                ready: false,
                reason: Reason::Progressing,
                message: "no Cluster API Cluster rendered".into(),
            },
            Some(_) if !deleting.is_empty() => health::Assessment {
                ready: false,
                reason: Reason::Deleting,
                message: format!(
                    "waiting for {} pruned object(s) to be deleted: {}",
                    deleting.len(),
                    deleting
                        .iter()
                        .map(|r| r.subject())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
            Some(cluster) => health::assess(
                *cluster,
                of_kind("KubeadmControlPlane").first().copied(),
                &of_kind("MachineDeployment"),
            ),
        }
    }

    pub(super) async fn api_for(&self, r: &ObjectRef) -> Result<Api<DynamicObject>, String> {
        let (ar, namespaced) = self
            .resolver()
            .resolve(&r.api_version, &r.kind)
            .await
            .map_err(|e| e.to_string())?;
        Ok(if namespaced {
            Api::namespaced_with(self.client().clone(), &r.namespace, &ar)
        } else {
            Api::all_with(self.client().clone(), &ar)
        })
    }

    /// Deletes an object as `writer` (the cluster's identity, which the tenancy policy lets
    /// delete only objects labelled for that cluster), with the UID the live facts know as a
    /// precondition: what is deleted is the object whose labels were checked, never one created
    /// under its name since. Returns whether it is still there, waiting for finalizers.
    pub(super) async fn delete(&self, writer: &Writer, r: &ObjectRef) -> Result<bool, String> {
        let (ar, namespaced) = self
            .resolver()
            .resolve(&r.api_version, &r.kind)
            .await
            .map_err(|e| e.to_string())?;
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(writer.client.clone(), &r.namespace, &ar)
        } else {
            Api::all_with(writer.client.clone(), &ar)
        };
        let uid = self
            .live
            .get(r)
            .and_then(|l| l.uid)
            .map(crate::live::format_uid);
        let how = crate::write::Delete::of_uid(uid).background();
        match crate::write::delete(&api, &r.name, &how).await {
            // A held object is left to the watch: its events (deletion timestamp set, then
            // gone) may already have overtaken this answer, and forgetting it here would read
            // as gone on the next pass while it still is not. At worst the next pass deletes
            // it once more.
            Ok(crate::write::Deleted::Terminating) => {
                self.wrote();
                Ok(true)
            }
            Ok(crate::write::Deleted::Gone) => {
                self.wrote();
                self.live.remove(r);
                Ok(false)
            }
            Ok(crate::write::Deleted::Absent) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// What an apply error says, for the plan and the status.
pub(super) fn apply_message(e: &ApplyError) -> String {
    match e {
        ApplyError::Rejected { message, .. } => message.clone(),
        other => other.to_string(),
    }
}
