//! Carrying out a cluster's decision ([`super::decision::Decided`]): per cluster, staged apply →
//! prune → status, or deletion on intent in the order `capstan_plan::deletion` gives; then the
//! Events and the status record.

use std::collections::BTreeMap;

use capstan_layout::{ClusterEntry, Fleet, Rendered};
use futures::StreamExt;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use super::decision::{Course, Decided, Deletion, Home, Planned, refused};
use super::pass::{APPLY_AT_ONCE, Pass, Writer, apply_message};
use super::{ClusterOutcome, ReconcileError};
use crate::k8s::apply::apply_one;
use crate::plan::order;
use crate::plan::planner::{self, Applied, Stamp};
use crate::plan::{self, Action, ObjectRef, Plan};
use crate::status::{self, ManagedClusterStatus, Phase, Reason, Recorded};
use capstan_plan::decide;
use capstan_plan::deletion::{self, ClusterStep};

/// What applying a plan did ([`Pass::apply`]), and its prunes after it.
#[derive(Default)]
struct Applying {
    /// What was written and deleted.
    applied: Applied,
    /// Objects the tenancy policy refused to take over (key → why).
    claimed: BTreeMap<String, String>,
    /// Why applying or pruning stopped, when it did.
    failure: Option<String>,
    /// The ManagedCluster as written beside the apply (a new cluster's).
    spec: Option<Recorded>,
}

impl Pass<'_> {
    /// An orphaned cluster stays so, with `message`: nothing applied, nothing deleted, its
    /// record (revision, inventory) kept.
    async fn stay_orphaned(
        &self,
        home: &Home,
        rec: &Recorded,
        message: String,
    ) -> Result<ClusterOutcome, ReconcileError> {
        let name = &home.name;
        let st = decide::orphaned(rec, &self.opts.revision, &message);
        self.write_status(home, &st, Some(rec)).await?;
        Ok(ClusterOutcome::empty(name, Phase::Orphaned, message))
    }

    /// A Kubernetes Event on the cluster's ManagedCluster: what this pass did. Best effort: an
    /// event that cannot be written is logged, never a failure of the pass.
    async fn event(&self, c: &ClusterOutcome) {
        let counts: Vec<String> = c
            .plan
            .counts()
            .iter()
            .filter(|(a, n)| *n > 0 && *a != Action::Unchanged)
            .map(|(a, n)| format!("{n} {a}"))
            .collect();
        let note = if counts.is_empty() {
            c.message.clone()
        } else {
            format!(
                "revision {}: {}; {}",
                self.opts.revision,
                counts.join(", "),
                c.message
            )
        };
        let conflict = c.plan.entries.iter().any(|e| e.action == Action::Conflict);
        let (type_, reason) = match c.phase {
            Phase::Failed if conflict => (EventType::Warning, Reason::Conflict),
            Phase::Failed => (EventType::Warning, Reason::ReconcileFailed),
            Phase::Orphaned => (EventType::Warning, Reason::Orphaned),
            Phase::Deleting => (EventType::Normal, Reason::Deleting),
            Phase::Suspended => (EventType::Normal, Reason::Suspended),
            _ => (EventType::Normal, Reason::Applied),
        };
        self.publish(&c.name, type_, reason, note).await;
    }

    /// Publishes an Event on cluster `name`'s ManagedCluster. Best effort: logged on failure.
    async fn publish(&self, name: &str, type_: EventType, reason: Reason, note: String) {
        let reference = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(status::API_VERSION.into()),
            kind: Some("ManagedCluster".into()),
            namespace: Some(status::NAMESPACE.into()),
            name: Some(name.to_string()),
            ..Default::default()
        };
        let recorder = Recorder::new(
            self.client().clone(),
            Reporter {
                controller: "capstan".into(),
                instance: std::env::var("HOSTNAME").ok(),
            },
        );
        let ev = Event {
            type_,
            reason: reason.as_str().into(),
            note: Some(note.chars().take(1000).collect()),
            action: "Reconcile".into(),
            secondary: None,
        };
        match recorder.publish(&ev, &reference).await {
            Ok(()) => self.wrote(),
            Err(e) => tracing::warn!(cluster = %name, error = %e, "could not record an event"),
        }
    }

    /// Applies a cluster's changed objects: `steps` one after the other, each in layers
    /// ([`order::layers`]), the CRDs among them Established before the second step. Stops after
    /// the layer in which a write failed and returns the first failure (in order); what was
    /// written is stamped into `applied`.
    async fn apply_steps(
        &self,
        writer: &Writer,
        objects: &[(&Rendered, ObjectRef)],
        steps: &[Vec<usize>],
        crds: &[String],
        applied: &mut Applied,
        claimed: &mut BTreeMap<String, String>,
    ) -> Option<String> {
        let mut failure = None;
        'steps: for (n, group) in steps.iter().enumerate() {
            if n == 1 {
                // CRDs just applied: their kinds served before objects of them go out.
                failure = crate::k8s::wait_served(self.client(), crds, crate::k8s::SERVED_WAIT)
                    .await
                    .err()
                    .map(|e| e.to_string());
                if failure.is_some() {
                    break;
                }
            }
            let bodies: Vec<serde_json::Value> = group
                .iter()
                .map(|&i| plan::annotated(objects[i].0))
                .collect();
            let pairs: Vec<(&ObjectRef, &serde_json::Value)> =
                group.iter().map(|&i| &objects[i].1).zip(&bodies).collect();
            for layer in order::layers(&pairs) {
                let answers: Vec<_> = futures::stream::iter(layer)
                    .map(|k| {
                        let body = &bodies[k];
                        let client = self.client_for(writer, &objects[group[k]].1);
                        async move { (k, apply_one(&client, self.resolver(), body, false).await) }
                    })
                    .buffered(APPLY_AT_ONCE)
                    .collect()
                    .await;
                for (k, answer) in answers {
                    let r = &objects[group[k]].1;
                    match answer {
                        Ok(answer) => {
                            self.wrote();
                            let facts = self.live.put(r, &answer);
                            applied.stamps.insert(r.key(), Stamp::of(&facts));
                        }
                        Err(err) => {
                            let message = err.to_string();
                            if message.contains("namespaces \"") && message.contains("not found") {
                                self.agent.known_namespaces().clear();
                            }
                            // An object that exists and is not the cluster's: the tenancy
                            // policy refused to overwrite it.
                            if let Some((reason, why)) =
                                crate::k8s::tenancy::denial(&apply_message(&err))
                                && reason == Reason::AlreadyExists.as_str()
                            {
                                claimed.insert(r.key(), why.to_string());
                            }
                            failure.get_or_insert(message);
                        }
                    }
                }
                if failure.is_some() {
                    break 'steps;
                }
            }
        }
        failure
    }

    /// Writes a status when it changed; returns whether it wrote.
    async fn write_status(
        &self,
        home: &Home,
        st: &ManagedClusterStatus,
        prev: Option<&Recorded>,
    ) -> Result<bool, ReconcileError> {
        let Home {
            name,
            management,
            dir,
        } = home;
        let signed;
        let st = match &self.opts.signature {
            Some(s) => {
                signed = decide::signed(st, s, &self.opts.revision);
                &signed
            }
            None => st,
        };
        match status::write(self.client(), name, management, dir, st, prev).await? {
            Some(record) => {
                self.live.set_record(name, Some(record));
                self.wrote();
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Namespaces the fleet's objects live in are created when missing (and never pruned).
    pub(super) async fn ensure_namespaces<'e>(
        &self,
        clusters: impl Iterator<Item = &'e ClusterEntry>,
    ) -> Result<(), ReconcileError> {
        self.agent
            .ensure_namespaces(clusters, &self.reads, &self.writes)
            .await
    }

    /// Carries out a cluster's decision ([`Pass::decide`]): the hold, orphan or refusal
    /// recorded, the deletion's step taken, or the plan applied, pruned and settled. An Event
    /// goes with anything that changed: something written (the Event then goes beside the
    /// status), or its status. A cluster looked at again while its changes stay held (a stage
    /// or a wave it waits for) records nothing new, so it adds no Event either.
    pub(super) async fn perform(
        &self,
        fleet: &Fleet,
        d: Decided<'_>,
    ) -> Result<ClusterOutcome, ReconcileError> {
        let Decided {
            home,
            prev,
            reclaim,
            course,
        } = d;
        if reclaim {
            status::clear_adoption(self.client(), &home.name).await?;
            self.wrote();
        }
        let deleting = matches!(course, Course::Delete(_));
        let (outcome, changed, evented) = match course {
            Course::Held { status, message } => {
                let changed = self.write_status(&home, &status, prev).await?;
                (
                    ClusterOutcome::empty(&home.name, Phase::Suspended, message),
                    changed,
                    false,
                )
            }
            Course::Orphaned { message } => {
                let rec = prev.expect("only a recorded cluster is orphaned");
                (self.stay_orphaned(&home, rec, message).await?, false, false)
            }
            Course::Refused { refusal, plan } => {
                let st = decide::not_applied(prev, &self.opts.revision, &refusal);
                let changed = self.write_status(&home, &st, prev).await?;
                (refused(&home.name, refusal, plan), changed, false)
            }
            Course::Delete(deletion) => {
                let (outcome, changed) = self.delete_cluster(&home, deletion, prev).await?;
                (outcome, changed, false)
            }
            Course::Apply(planned) => self.carry_out(fleet, &home, prev, *planned).await?,
        };
        if let Some(ns) = &self.opts.cluster_profiles {
            self.keep_profile(fleet, &home, ns, deleting, &outcome)
                .await;
        }
        if !evented && (outcome.plan.writes_now() || changed) {
            self.event(&outcome).await;
        }
        if let Some(s @ decide::Signature::Refused { .. }) = &self.opts.signature
            && changed
            && decide::newly_refused(prev, s, &self.opts.revision)
        {
            let note = decide::signed(&Default::default(), s, &self.opts.revision).message;
            self.publish(&home.name, EventType::Warning, s.reason(), note)
                .await;
        }
        Ok(outcome)
    }

    /// The cluster's ClusterProfile ([`super::profile`]) brought up to date from the live
    /// Cluster and control plane, or removed once its deletion is over. Workload clusters only;
    /// a failure is logged and tried again on the next pass, never failing the cluster.
    async fn keep_profile(
        &self,
        fleet: &Fleet,
        home: &Home,
        namespace: &str,
        deleting: bool,
        outcome: &ClusterOutcome,
    ) {
        let name = home.name.as_str();
        if name == home.management {
            return;
        }
        let result = if deleting {
            if outcome.message != super::DELETED {
                return; // still deleting: the profile says what Cluster API reports until then
            }
            super::profile::remove(self.client(), namespace, name).await
        } else {
            let Some(entry) = fleet.clusters.iter().find(|c| c.name == name) else {
                return;
            };
            let objects = super::desired(entry);
            // The Cluster API Cluster (EKS Anywhere's Cluster has the same kind).
            let Some(cluster_ref) = objects
                .iter()
                .map(|(_, r)| r)
                .find(|r| r.kind == "Cluster" && r.api_version.starts_with("cluster.x-k8s.io/"))
                .cloned()
            else {
                return;
            };
            let cp_ref = objects
                .iter()
                .map(|(_, r)| r)
                .find(|r| r.kind == "KubeadmControlPlane")
                .cloned();
            let cluster = self.get_live(&cluster_ref).await;
            let control_plane = match &cp_ref {
                Some(r) => self.get_live(r).await,
                None => None,
            };
            let facts = super::profile::Facts {
                name,
                namespace,
                cluster_namespace: &cluster_ref.namespace,
                cluster_name: &cluster_ref.name,
                cluster: cluster.as_ref(),
                control_plane: control_plane.as_ref(),
            };
            let (object, status) = super::profile::desired(&facts);
            super::profile::apply(self.client(), &object, &status).await
        };
        if let Err(e) = result {
            tracing::warn!(cluster = name, error = %e, "the cluster's ClusterProfile is not up to date");
        }
    }

    /// A plan applied: a management cluster's self-upgrade steps first when it changes its own
    /// etcd or control plane, then apply → prune → settled status, written with its Event.
    /// Returns the outcome, whether the status was written and whether the Event was.
    async fn carry_out(
        &self,
        fleet: &Fleet,
        home: &Home,
        prev: Option<&Recorded>,
        planned: Planned<'_>,
    ) -> Result<(ClusterOutcome, bool, bool), ReconcileError> {
        let entry = planned.entry;
        let objects = planned.objects();
        let mut plan = planned.plan.clone();
        // A management cluster changing its own etcd or control plane backs up and pauses its
        // workload clusters first.
        let upgrade = self
            .self_upgrade(fleet, entry, &mut plan, &planned.staged, prev)
            .await;
        // Its backup recorded before any of it is applied (a leader killed from here on
        // leaves the record to its successor).
        if let Some(st) = decide::backed_up(prev, &upgrade) {
            self.write_status(home, &st, prev).await?;
        }
        let mut out = self
            .apply(
                &planned.writer,
                entry,
                prev,
                &mut plan,
                &objects,
                planned.settings,
            )
            .await?;
        if !upgrade.backup.is_empty() {
            crate::failpoint::stop_here("self-upgrade-applied").await;
        }
        // Where the stages stand now that this pass's changes are out: what decides which
        // prunes wait, what the status says, what the stage timeout measures, when to look
        // again.
        let after = self.progress(entry, &plan, planned.settings);
        if out.failure.is_none() {
            let rollout = self.rollout(&plan, &objects, &after);
            planner::hold_prunes(&mut plan.entries, &rollout);
            out.failure = self.prune(&planned.writer, &plan, &mut out.applied).await;
        }
        out.applied.complete = out.failure.is_none();
        let refs: Vec<ObjectRef> = objects.iter().map(|(_, r)| r.clone()).collect();
        let inventory = planner::next_inventory(
            &planned.previous_inventory,
            &refs,
            &plan,
            &out.applied,
            |r| self.live.get(r).map(|l| Stamp::of(&l)).unwrap_or_default(),
        );
        let deleting = decide::deleting(&plan, &out.applied.terminating);
        let health = self.assessment(&objects, &deleting);
        let holds = &planned.holds;
        // Inside the workload cluster: its add-ons, reached through Cluster API's kubeconfig.
        let addons = match entry.role {
            capstan_layout::Role::Workload { .. } if out.failure.is_none() => {
                super::addons::step(
                    self.client(),
                    &self.agent.connections,
                    self.agent.on_change.as_ref(),
                    self.agent.fence.as_ref(),
                    entry,
                    prev,
                    self.opts,
                )
                .await
            }
            _ => None,
        };
        if addons.is_some() {
            // The kubeconfig Secret's read (the workload cluster's requests are its own).
            self.read();
        }
        let st = decide::settle(&decide::Settled {
            revision: &self.opts.revision,
            fingerprint: &planned.fingerprint,
            prev,
            plan: &plan,
            failure: out.failure.as_deref(),
            claimed: &out.claimed,
            health: &health,
            after: &after,
            note: planned.note.as_deref(),
            upgrade: &upgrade,
            not_started: holds.not_started.as_ref(),
            gated: holds.gated,
            paced: holds.paced.is_some(),
            stage_timeout: self.opts.stage_timeout,
            now: status::now().0,
            wave: planned.wave.clone(),
            inventory,
            addons: addons.as_ref(),
        });
        let (phase, message) = (st.phase.unwrap_or(Phase::Pending), st.message.clone());
        // The failure itself is in the phase and message. The spec written with the apply is
        // what the record is now. Something written: its Event goes beside the status.
        let mut outcome = planned.outcome(plan, phase, message, after.waiting.clone());
        outcome.addons = addons.as_ref().map(|a| crate::plan::addons::Tally {
            reason: a.verdict.reason,
            applied: a.applied,
            pruned: a.pruned,
        });
        let evented = outcome.plan.writes_now();
        let (changed, ()) = futures::join!(
            self.write_status(home, &st, out.spec.as_ref().or(prev)),
            async {
                if evented {
                    self.event(&outcome).await;
                }
            }
        );
        Ok((outcome, changed?, evented))
    }

    /// Applies the plan's changes: its namespaces when an apply has found one missing since
    /// the revision was prepared (the daemon prepares a revision once, not on every watch
    /// event), then in steps — CRDs and Namespaces first (and the CRDs Established before
    /// anything that may be one of their kinds), then the rest by upgrade stage when something
    /// of a rolling stage changes in place, else all the rest as one step; each object after
    /// the objects of its step it names and the rest at once ([`crate::plan::order`]); held
    /// changes wait for a later pass. A new cluster's ManagedCluster is written while its
    /// objects go out. What the tenancy policy refused to take over is marked a conflict.
    async fn apply(
        &self,
        writer: &Writer,
        entry: &ClusterEntry,
        prev: Option<&Recorded>,
        plan: &mut Plan,
        objects: &[(&Rendered, ObjectRef)],
        settings: crate::plan::stages::Settings,
    ) -> Result<Applying, ReconcileError> {
        let (name, mgmt) = (&entry.name, entry.management());
        let dir = entry.dir.display().to_string();
        if plan.writes_now() {
            self.ensure_namespaces(std::iter::once(entry)).await?;
        }
        let changed: Vec<usize> = (0..objects.len())
            .filter(|&i| matches!(plan.entries[i].action, Action::Create | Action::Update))
            .collect();
        let crds: Vec<String> = changed
            .iter()
            .map(|&i| &objects[i].1)
            .filter(|r| r.kind == "CustomResourceDefinition" && order::is_definition(r))
            .map(|r| r.name.clone())
            .collect();
        let changes: Vec<(&ObjectRef, bool)> = changed
            .iter()
            .map(|&i| (&objects[i].1, plan.entries[i].action == Action::Create))
            .collect();
        let groups: Vec<Vec<usize>> = order::steps(&changes, settings.workers)
            .into_iter()
            .map(|step| step.into_iter().map(|k| changed[k]).collect())
            .collect();
        // One round trip less on every creation, and the record is there from the start.
        let spec_needed = plan.writes_now() && !status::spec_written(prev, mgmt, &dir);
        let spec = async {
            if spec_needed {
                Some(status::write_spec(self.client(), name, mgmt, &dir).await)
            } else {
                None
            }
        };
        let mut out = Applying::default();
        let (spec, failure) = futures::join!(
            spec,
            self.apply_steps(
                writer,
                objects,
                &groups,
                &crds,
                &mut out.applied,
                &mut out.claimed
            )
        );
        out.failure = failure;
        for e in plan.entries.iter_mut() {
            if let Some(why) = out.claimed.get(&e.object.key()) {
                e.action = Action::Conflict;
                e.reason = Some(why.clone());
            }
        }
        // A spec that could not be written is written again with the status (which reports
        // the error if it fails again).
        out.spec = match spec {
            Some(Ok(record)) => Some(record),
            Some(Err(e)) => {
                tracing::debug!(cluster = %name, error = %e, "writing the ManagedCluster failed; retried with its status");
                None
            }
            None => None,
        };
        Ok(out)
    }

    /// Deletes the plan's prunes in reverse order; the first failure stops them.
    async fn prune(&self, writer: &Writer, plan: &Plan, applied: &mut Applied) -> Option<String> {
        for e in plan.entries.iter().filter(|e| e.action == Action::Prune) {
            match self.delete(writer, &e.object).await {
                Ok(terminating) => {
                    applied.pruned.insert(e.object.key());
                    if terminating {
                        applied.terminating.insert(e.object.key());
                    }
                }
                Err(err) => return Some(format!("pruning {}: {err}", e.object.subject())),
            }
        }
        None
    }

    /// Deletion on intent, one step per run ([`crate::plan::deletion`] decides the order and
    /// what a step waits for): the Cluster objects first (CAPI tears the machines down behind
    /// their finalizers); once they are gone, everything else in reverse apply order and the
    /// status. A run never waits for a finalizer.
    async fn delete_cluster(
        &self,
        home: &Home,
        deletion: Deletion,
        prev: Option<&Recorded>,
    ) -> Result<(ClusterOutcome, bool), ReconcileError> {
        let Deletion { writer, planned } = deletion;
        let deletion::Deletion {
            inventory,
            clusters,
            rest,
            plan,
        } = planned;
        let name = home.name.as_str();
        let ours = |r: &ObjectRef| self.ours(name, r);
        if prev.is_none() {
            // Nothing recorded: deleted already (its record goes last), or never applied.
            return Ok((
                ClusterOutcome::new(name, plan, Phase::Deleting, super::DELETED.into()),
                false,
            ));
        }
        // The Cluster objects first. One still held by its finalizers (Cluster API tearing the
        // machines down) ends this step: the cluster stays Deleting, and the watch's event when
        // it is gone brings the cluster back for the rest. Nothing waits here.
        let mut failure = None;
        let mut waiting = None;
        for r in &clusters {
            let live = self.live.get(r).map(|o| o.deleting);
            let held = match deletion::cluster_step(live, matches!(ours(r), Ok(true))) {
                ClusterStep::Next => None,
                ClusterStep::Await => Some(Action::Deleting),
                ClusterStep::Delete => match self.delete(&writer, r).await {
                    Ok(true) => Some(Action::Prune),
                    Ok(false) => None,
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                },
            };
            if let Some(action) = held {
                // The CAPI Cluster goes before the EKS-A Cluster: one at a time.
                waiting = Some((r.clone(), action));
                break;
            }
        }
        if let (None, Some((held, action))) = (&failure, waiting) {
            let (plan, message) = deletion::waiting(plan, &held, action);
            return self
                .still_deleting(home, plan, message.clone(), message, inventory, prev)
                .await;
        }
        if failure.is_none() {
            for r in deletion::rest(&rest, ours) {
                if let Err(e) = self.delete(&writer, r).await {
                    failure = Some(e);
                    break;
                }
            }
        }
        match failure {
            None => {
                // Forget the record first, so the watch's delete event is not read as someone
                // else's doing.
                self.live.set_record(name, None);
                status::remove(self.client(), name).await?;
                self.wrote();
                Ok((
                    ClusterOutcome::new(name, plan, Phase::Deleting, super::DELETED.into()),
                    true,
                ))
            }
            Some(f) => {
                self.still_deleting(home, plan, format!("deleting: {f}"), f, inventory, prev)
                    .await
            }
        }
    }

    /// The outcome and status of a deletion that is not over: phase Deleting, Ready False.
    #[allow(clippy::too_many_arguments)]
    async fn still_deleting(
        &self,
        home: &Home,
        plan: Plan,
        status_message: String,
        message: String,
        inventory: Vec<ObjectRef>,
        prev: Option<&Recorded>,
    ) -> Result<(ClusterOutcome, bool), ReconcileError> {
        let st = deletion::still_deleting(
            prev,
            &self.opts.revision,
            status_message,
            &message,
            inventory,
        );
        let changed = self.write_status(home, &st, prev).await?;
        Ok((
            ClusterOutcome::new(&home.name, plan, Phase::Deleting, message),
            changed,
        ))
    }
}
