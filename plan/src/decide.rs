//! The decisions of a cluster's pass, as pure functions of what the pass gathered: whether it
//! goes ahead at all ([`gate`]), and the status it records once its changes are out
//! ([`settle`]). The pass (the agent's `reconcile::pass`) gathers the facts (the repository's entry, the
//! record, the live facts, what the API server answered), calls these, and performs what they
//! say; the tests below state every branch as a case, without an API server.
//!
//! ```text
//! entry, record, holds, refused kinds ──gate()──▶ Hold | StayOrphaned | Refuse | Delete | Proceed
//!
//! plan, what applying did, health,   ──settle()──▶ the status: phase, message, Ready and its
//! stages, holds, upgrade, clock                    reason, stage and its clock, revisions
//! ```

mod signature;

pub use signature::{Signature, newly_refused, signed};

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use capstan_layout::{ClusterEntry, Role};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::health::Assessment;
use crate::stages::Staged;
use crate::status::ConditionStatus::{False, True, Unknown};
use crate::status::ConditionType::{Applied, Conflict, Ready};
use crate::status::{
    ConditionType, ManagedClusterStatus, NAMESPACE, Phase, Reason, Recorded, condition,
};
use crate::waves::Hold;
use crate::{Action, ObjectRef, Plan};

/// What a cluster's pass does before it plans anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Suspended in the repository, or held while its management cluster upgrades itself:
    /// nothing applied, nothing deleted.
    Hold {
        /// The Ready condition's reason.
        reason: Reason,
        /// Why.
        message: String,
    },
    /// Orphaned, and a directory of its name is back without an admin's mark: it stays so.
    StayOrphaned(String),
    /// This revision is not applied to the cluster.
    Refuse(Refusal),
    /// Its tombstone: delete it.
    Delete,
    /// Plan and apply; `reclaim`: an orphan taken back on an admin's mark (which is then
    /// taken off).
    Proceed {
        /// Taking back an orphaned cluster.
        reclaim: bool,
    },
}

/// A revision refused for a cluster before anything of it was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The Ready condition's reason.
    pub reason: Reason,
    /// Why, for the condition.
    pub why: String,
    /// The phase message.
    pub message: String,
}

/// What [`gate`] decides from.
pub struct GateFacts<'a> {
    /// The cluster's directory, as the repository has it.
    pub entry: &'a ClusterEntry,
    /// Its record.
    pub prev: Option<&'a Recorded>,
    /// The revision.
    pub revision: &'a str,
    /// `clusters/suspend.yaml`.
    pub fleet_suspended: bool,
    /// Why its management cluster's upgrade of itself holds it, when it does.
    pub management_upgrading: Option<String>,
    /// A kind of the cluster's objects the API server refuses to show the agent: `(kind,
    /// apiVersion, the refusal)`.
    pub denied: Option<(String, String, String)>,
    /// The pass runs outside the management cluster, on a temporary cluster it was moved to to
    /// be deleted (`capstan back-out`): its tombstone is carried out there.
    pub backing_out: bool,
}

/// The message of a revision refused for a cluster before anything was applied.
pub fn refused_message(revision: &str, prev: Option<&Recorded>, why: &str) -> String {
    let last_applied = prev.map_or("", |p| p.status.last_applied_revision.as_str());
    format!(
        "revision {revision} not applied ({}): {why}",
        if last_applied.is_empty() {
            "nothing applied yet".to_string()
        } else {
            format!("{last_applied} stays live")
        }
    )
}

/// A refusal with the usual message.
pub fn refusal(revision: &str, prev: Option<&Recorded>, reason: Reason, why: String) -> Refusal {
    Refusal {
        reason,
        message: refused_message(revision, prev, &why),
        why,
    }
}

/// Whether the pass goes ahead, in this order: a hold (suspension, the management cluster
/// upgrading itself) wins over everything; an orphan comes back only on an admin's mark; an
/// invalid directory (a tombstone too) applies and deletes nothing; a tombstone deletes, but
/// never the management cluster the agent runs on; a kind the agent may not read refuses the
/// cluster.
pub fn gate(f: &GateFacts<'_>) -> Gate {
    let entry = f.entry;
    if f.fleet_suspended || entry.intent.suspend.is_some() {
        let why = entry
            .intent
            .suspend
            .as_deref()
            .filter(|r| !r.is_empty())
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        return Gate::Hold {
            reason: Reason::Suspended,
            message: format!("suspended in the repository{why}"),
        };
    }
    if let Some(m) = &f.management_upgrading {
        return Gate::Hold {
            reason: Reason::ManagementUpgrading,
            message: m.clone(),
        };
    }
    // An orphaned cluster is taken back by a directory only when an admin says so: a new
    // directory that merely takes an orphan's name (anyone who may open a pull request may
    // write one) must not get its running cluster, its objects and its inventory.
    let dir = entry.dir.display().to_string();
    let mut reclaim = false;
    if let Some(rec) = f.prev.filter(|p| p.status.phase == Some(Phase::Orphaned)) {
        if rec.adopt.as_deref() != Some(dir.as_str()) {
            return Gate::StayOrphaned(format!(
                "its directory {dir} is in the repository again, but an orphaned cluster is taken back only when an admin says so: `kubectl annotate managedcluster {} -n {NAMESPACE} {}={dir}`; nothing was applied or deleted",
                entry.name,
                capstan_templates::identity::ADOPT_ANNOTATION
            ));
        }
        reclaim = true;
    }
    let tombstone = entry.intent.delete.is_some();
    let invalid = if tombstone {
        capstan_templates::diag::has_errors(&entry.diagnostics)
    } else {
        !entry.is_valid()
    };
    if invalid {
        let first = entry
            .diagnostics
            .iter()
            .find(|d| d.is_error())
            .map(|d| d.to_string())
            .unwrap_or_else(|| "invalid".into());
        let last_applied = f
            .prev
            .map_or("", |p| p.status.last_applied_revision.as_str());
        let message = if last_applied.is_empty() {
            format!("not applied: {first}")
        } else {
            format!(
                "revision {} not applied, {last_applied} stays live: {first}",
                f.revision
            )
        };
        return Gate::Refuse(Refusal {
            reason: Reason::ValidationFailed,
            why: first,
            message,
        });
    }
    if tombstone {
        // The agent runs on its management cluster: deleting it would take down the API
        // server the agent and every workload cluster's objects live on.
        if entry.role == Role::Management && !f.backing_out {
            return Gate::Refuse(refusal(
                f.revision,
                f.prev,
                Reason::DeletionRefused,
                format!(
                    "capstan does not delete the management cluster it runs on ({}); `capstan back-out` moves it onto a temporary cluster and deletes it there, or remove the tombstone",
                    entry.name
                ),
            ));
        }
        return Gate::Delete;
    }
    // A kind the API server refuses to show the agent (RBAC): this cluster cannot be planned;
    // the others go on.
    if let Some((kind, api_version, why)) = &f.denied {
        return Gate::Refuse(refusal(
            f.revision,
            f.prev,
            Reason::Forbidden,
            format!(
                "the agent may not read {kind} ({api_version}): {why}; grant it with `capstan install --allow` or take it out of the repository"
            ),
        ));
    }
    Gate::Proceed { reclaim }
}

/// The status of a cluster the pass holds (suspended, or its management cluster upgrading
/// itself): its record as it was, with the hold's phase and message.
pub fn held(prev: Option<&Recorded>, reason: Reason, message: &str) -> ManagedClusterStatus {
    let last_applied = prev
        .map(|p| p.status.last_applied_revision.clone())
        .unwrap_or_default();
    ManagedClusterStatus {
        phase: Some(Phase::Suspended),
        message: message.to_string(),
        last_attempted_revision: last_applied.clone(),
        last_applied_revision: last_applied,
        desired_hash: prev
            .map(|p| p.status.desired_hash.clone())
            .unwrap_or_default(),
        conditions: vec![condition(Ready, Unknown, reason, message)],
        inventory: prev.map(Recorded::inventory).unwrap_or_default(),
        ..carried(prev)
    }
}

/// The stages of the latest upgrade after a pass in which the cluster waits for `current`
/// (None: for no stage): a new stage starts an entry (and ends the one before); no stage ends
/// the open one; a stage of a cluster that was Ready starts a new upgrade's history. At most
/// [`crate::status::STAGES_KEPT`], the oldest dropped.
pub fn stage_history(
    prev: Option<&Recorded>,
    current: Option<&str>,
    now: &str,
) -> Vec<crate::status::StageRecord> {
    let mut stages = prev.map(|p| p.status.stages.clone()).unwrap_or_default();
    let open = stages
        .last()
        .filter(|l| l.finished.is_none())
        .map(|l| l.name.clone());
    match (open.as_deref(), current) {
        (Some(o), Some(c)) if o == c => {}
        (open, Some(c)) => {
            if open.is_some() {
                if let Some(l) = stages.last_mut() {
                    l.finished = Some(now.to_string());
                }
            } else if prev.is_none_or(|p| p.status.phase == Some(Phase::Ready)) {
                // A stage after the cluster was Ready: another upgrade.
                stages.clear();
            }
            stages.push(crate::status::StageRecord {
                name: c.to_string(),
                started: now.to_string(),
                finished: None,
            });
        }
        (Some(_), None) => {
            if let Some(l) = stages.last_mut() {
                l.finished = Some(now.to_string());
            }
        }
        (None, None) => {}
    }
    let extra = stages.len().saturating_sub(crate::status::STAGES_KEPT);
    stages.drain(..extra);
    stages
}

/// What a status that applies nothing keeps of the record: a management cluster's
/// self-upgrade in progress (its `backup`, while which its workload clusters are held) and the
/// stage it waits for, so a hold, a refusal or an orphaned directory met mid-upgrade neither
/// ends the upgrade's record nor restarts its stage clock; the cluster's wave.
fn carried(prev: Option<&Recorded>) -> ManagedClusterStatus {
    let Some(p) = prev else {
        return ManagedClusterStatus::default();
    };
    ManagedClusterStatus {
        backup: p.status.backup.clone(),
        stage: p.status.stage.clone(),
        stage_since: p.status.stage_since.clone(),
        stage_progress: p.status.stage_progress.clone(),
        wave: p.status.wave.clone(),
        stages: p.status.stages.clone(),
        addons: p.status.addons.clone(),
        ..Default::default()
    }
}

/// The status of a revision not applied to a cluster: Failed with the refusal's reason, the
/// last applied revision, its hash and inventory kept (nothing of it was touched).
pub fn not_applied(prev: Option<&Recorded>, revision: &str, r: &Refusal) -> ManagedClusterStatus {
    ManagedClusterStatus {
        phase: Some(Phase::Failed),
        message: r.message.clone(),
        last_applied_revision: prev
            .map(|p| p.status.last_applied_revision.clone())
            .unwrap_or_default(),
        last_attempted_revision: revision.to_string(),
        desired_hash: prev
            .map(|p| p.status.desired_hash.clone())
            .unwrap_or_default(),
        conditions: vec![condition(Ready, False, r.reason, &r.why)],
        inventory: prev.map(Recorded::inventory).unwrap_or_default(),
        ..carried(prev)
    }
}

/// The status of an orphaned cluster: its record as it was, Orphaned with `message`.
pub fn orphaned(rec: &Recorded, revision: &str, message: &str) -> ManagedClusterStatus {
    ManagedClusterStatus {
        phase: Some(Phase::Orphaned),
        message: message.to_string(),
        last_applied_revision: rec.status.last_applied_revision.clone(),
        last_attempted_revision: revision.to_string(),
        desired_hash: rec.status.desired_hash.clone(),
        conditions: vec![condition(Ready, Unknown, Reason::Orphaned, message)],
        inventory: rec.inventory(),
        ..carried(Some(rec))
    }
}

/// The phase, message and conditions of a cluster whose changes are out, from Cluster API's
/// report ([`crate::health::assess`]).
pub fn health(a: &Assessment) -> (Phase, String, Vec<Condition>) {
    let applied = condition(
        Applied,
        True,
        Reason::Applied,
        "every object of the cluster is applied",
    );
    // Paused outside capstan: nothing to wait for until someone unpauses it (settled, as a
    // suspended cluster is; its Ready is unknown: Cluster API reports nothing meanwhile).
    let (phase, status) = match (a.ready, a.reason) {
        (true, _) => (Phase::Ready, True),
        (false, Reason::Paused) => (Phase::Suspended, Unknown),
        (false, _) => (Phase::Progressing, False),
    };
    let message = match (a.ready, a.reason) {
        (true, _) => a.message.clone(),
        (false, Reason::Paused) => format!("applied; {}", a.message),
        (false, _) => format!("applied; waiting for Cluster API: {}", a.message),
    };
    (
        phase,
        message.clone(),
        vec![applied, condition(Ready, status, a.reason, &message)],
    )
}

/// The objects pruned now or before that their finalizers still hold.
pub fn deleting<'p>(plan: &'p Plan, terminating: &BTreeSet<String>) -> Vec<&'p ObjectRef> {
    plan.entries
        .iter()
        .filter(|e| e.action == Action::Deleting || terminating.contains(&e.object.key()))
        .map(|e| &e.object)
        .collect()
}

/// What a management cluster's upgrade of itself left for the status: its backup (empty:
/// none) and why its preparation failed, if it did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Upgrade {
    /// The backup taken before it (empty: none).
    pub backup: String,
    /// Why preparing it failed.
    pub failure: Option<String>,
}

/// The record a management cluster's pass writes once it has backed up and paused its
/// workload clusters, before it applies anything of the upgrade: the record as it was, with
/// the backup (`None`: no backup this pass, or the record names it already, or there is no
/// record, which the pass's own status then writes).
///
/// Written first so that a leader killed while its etcd or control-plane change goes out
/// leaves its successor the upgrade's record: the successor finds that change applied and
/// takes no backup of its own, so without this the status would never name the backup, and
/// the workload clusters' own passes, which hold while it is named, would go on.
pub fn backed_up(prev: Option<&Recorded>, upgrade: &Upgrade) -> Option<ManagedClusterStatus> {
    let p = prev?;
    if upgrade.backup.is_empty() || p.status.backup.as_deref() == Some(upgrade.backup.as_str()) {
        return None;
    }
    Some(ManagedClusterStatus {
        backup: Some(upgrade.backup.clone()),
        inventory: p.inventory(),
        ..p.status.clone()
    })
}

/// Why a cluster held before its upgrade started is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotStarted {
    /// By the fleet's waves, maxUnavailable or maintenance windows.
    Paced(Hold),
    /// By the health gate (no earlier upgrade still rolling).
    Unhealthy(String),
    /// Short of spare bare-metal Hardware ([`crate::spare`]).
    NoSpareHardware(String),
}

/// What [`settle`] decides from: everything the pass knows once its changes are out.
pub struct Settled<'a> {
    /// The revision.
    pub revision: &'a str,
    /// What the repository asks for (the agent's `reconcile::fingerprint`).
    pub fingerprint: &'a str,
    /// The record before this pass.
    pub prev: Option<&'a Recorded>,
    /// The plan, as it was carried out (held entries held, conflicts marked).
    pub plan: &'a Plan,
    /// Why applying or pruning stopped, when it did.
    pub failure: Option<&'a str>,
    /// Objects the tenancy policy refused to take over (key → why).
    pub claimed: &'a BTreeMap<String, String>,
    /// Cluster API's report, with the objects still deleting counted.
    pub health: &'a Assessment,
    /// Where the stages stand now that the changes are out.
    pub after: &'a Staged,
    /// The step of a chained upgrade this pass applied.
    pub note: Option<&'a str>,
    /// A management cluster's upgrade of itself.
    pub upgrade: &'a Upgrade,
    /// Held before its upgrade started: by what.
    pub not_started: Option<&'a NotStarted>,
    /// Held by the health gate (an upgrade started before goes on: not "not started").
    pub gated: bool,
    /// Held by the fleet's pacing.
    pub paced: bool,
    /// The agent's stage timeout.
    pub stage_timeout: Option<Duration>,
    /// Now.
    pub now: k8s_openapi::jiff::Timestamp,
    /// Its wave.
    pub wave: Option<String>,
    /// The inventory to record ([`crate::planner::next_inventory`]).
    pub inventory: Vec<ObjectRef>,
    /// What the pass did with the cluster's add-ons, when it has or had some
    /// ([`crate::addons`]); None: the record's are kept.
    pub addons: Option<&'a crate::addons::Outcome>,
}

/// A duration as the flags take it (`90s`, `30m`, `1h`).
pub fn humanize(d: Duration) -> String {
    let s = d.as_secs();
    if s.is_multiple_of(3600) && s > 0 {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) && s > 0 {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// Replaces the Ready condition.
fn ready(mut conditions: Vec<Condition>, reason: Reason, message: &str) -> Vec<Condition> {
    conditions.retain(|c| c.type_ != ConditionType::Ready.as_str());
    conditions.insert(0, condition(Ready, False, reason, message));
    conditions
}

/// The status a pass records once its changes are out, in this order:
///
/// 1. applying or pruning failed: Failed, `AlreadyExists` when the tenancy policy refused to
///    take an object over, else `ApplyFailed`;
/// 2. else a conflict in the plan (a fight with another field manager): Failed, `Conflict`;
/// 3. else a stage not rolled out: `Upgrading` for a cluster applied before at another
///    revision (or already upgrading), `Progressing` for a new one; a chained upgrade's step
///    rolled out: `Upgrading`; rolled out with prunes left for the next pass: `Pruning`; else
///    what Cluster API reports (`Ready` or `Progressing`);
/// 4. over all that: the upgrade's own failure (`UpgradeFailed`), a stage past its timeout
///    (`StageTimedOut`), or a cluster held before its upgrade started (Progressing, with the
///    hold's reason);
///
/// and the revisions: a cluster the revision does not touch keeps its record's, a failure
/// keeps the last applied one, a held revision keeps the recorded desired hash.
pub fn settle(s: &Settled<'_>) -> ManagedClusterStatus {
    let prev = s.prev;
    let last_applied = prev
        .map(|p| p.status.last_applied_revision.clone())
        .unwrap_or_default();
    // How long the cluster's current stage has gone without progress: its clock restarts
    // when the stage changes or reports something else (the next worker group of a sequential
    // rollout, one more machine up to date), so the timeout bounds a stall, not the length of
    // the whole rollout.
    let waiting_for = s.after.waiting.as_ref();
    let stage_since = match (waiting_for, prev) {
        (Some((stage, progress)), Some(p))
            if p.status.stage.as_deref() == Some(stage.name())
                && p.status.stage_progress.as_deref() == Some(progress.as_str()) =>
        {
            p.status
                .stage_since
                .clone()
                .unwrap_or_else(|| s.now.to_string())
        }
        (Some(_), _) => s.now.to_string(),
        (None, _) => String::new(),
    };
    let not_started = s.not_started.is_some();
    let age = |t: &str| -> Option<Duration> {
        let t: k8s_openapi::jiff::Timestamp = t.parse().ok()?;
        Duration::try_from(s.now.duration_since(t)).ok()
    };
    let timed_out = match (&s.after.waiting, s.stage_timeout) {
        (Some((stage, progress)), Some(limit))
            if !not_started && age(&stage_since).is_some_and(|a| a > limit) =>
        {
            Some(format!(
                "the {stage} stage has made no progress within {}: {progress}",
                humanize(limit)
            ))
        }
        _ => None,
    };
    let (phase, message, conditions) = match s.failure {
        Some(_) if !s.claimed.is_empty() => {
            let why = s.claimed.values().cloned().collect::<Vec<_>>().join("; ");
            (
                Phase::Failed,
                format!("applying revision {}: {why}", s.revision),
                vec![
                    condition(Ready, False, Reason::AlreadyExists, &why),
                    condition(Conflict, True, Reason::AlreadyExists, &why),
                ],
            )
        }
        Some(f) => (
            Phase::Failed,
            format!("applying revision {}: {f}", s.revision),
            vec![condition(Ready, False, Reason::ApplyFailed, f)],
        ),
        None => converged(s),
    };
    // Failures of the upgrade itself: its backup or pause could not be made, or a stage has
    // not rolled out in time (later stages stay held; a management cluster's workload clusters
    // stay paused and its backup stays).
    let (phase, message, conditions) = match (&s.upgrade.failure, &timed_out) {
        (Some(f), _) => (
            Phase::Failed,
            format!("upgrade not started: {f}"),
            vec![condition(Ready, False, Reason::UpgradeFailed, f)],
        ),
        (None, Some(t)) if s.failure.is_none() => {
            let t = if s.upgrade.backup.is_empty() {
                t.clone()
            } else {
                format!(
                    "{t}; its workload clusters stay paused; the backup taken before is in {}",
                    s.upgrade.backup
                )
            };
            (
                Phase::Failed,
                t.clone(),
                vec![condition(Ready, False, Reason::StageTimedOut, &t)],
            )
        }
        // Held before it started, by the fleet's pacing or by the health gate (no earlier
        // revision's upgrade still rolling): it is not upgrading (it takes no slot of
        // maxUnavailable, and once healthy the waves still decide when it starts), and it says
        // what it waits for.
        (None, None) if s.failure.is_none() && phase != Phase::Failed && not_started => {
            let (reason, why) = match s.not_started.expect("not started") {
                NotStarted::Paced(hold) => (hold.reason, hold.message.as_str()),
                NotStarted::Unhealthy(why) => (Reason::WaitingForHealth, why.as_str()),
                NotStarted::NoSpareHardware(why) => (Reason::WaitingForHardware, why.as_str()),
            };
            let message = format!("upgrade to revision {} not started: {why}", s.revision);
            let conditions = ready(conditions, reason, &message);
            (Phase::Progressing, message, conditions)
        }
        _ => (phase, message, conditions),
    };
    // The add-ons, over all that: a cluster is Ready only when its add-ons are too.
    let (phase, message, conditions) = match s.addons {
        Some(a) => with_addons(phase, message, conditions, &a.verdict),
        None => (phase, message, conditions),
    };
    // A cluster the new revision does not touch keeps the revision its objects came from: its
    // status is then unchanged and costs no write.
    let untouched = s.failure.is_none()
        && !s.plan.has_changes()
        && prev.is_some_and(|p| p.status.desired_hash == s.fingerprint);
    ManagedClusterStatus {
        phase: Some(phase),
        message,
        last_applied_revision: if untouched || s.failure.is_some() {
            last_applied
        } else {
            s.revision.to_string()
        },
        last_attempted_revision: if untouched {
            prev.map(|p| p.status.last_attempted_revision.clone())
                .unwrap_or_default()
        } else {
            s.revision.to_string()
        },
        // Gated: this revision has not started; the next pass gates it again.
        desired_hash: if s.failure.is_none() && !s.gated && !s.paced {
            s.fingerprint.to_string()
        } else {
            prev.map(|p| p.status.desired_hash.clone())
                .unwrap_or_default()
        },
        // A cluster held before its upgrade started waits for no stage of its own: no stage, and
        // no stage timeout.
        stage: match (s.failure, &s.after.waiting, not_started) {
            (None, Some((stage, _)), false) => Some(stage.name().to_string()),
            _ => None,
        },
        stage_progress: match (s.failure, &s.after.waiting, not_started) {
            (None, Some((_, progress)), false) => Some(progress.clone()),
            _ => None,
        },
        stages: stage_history(
            prev,
            match (s.failure, &s.after.waiting, not_started) {
                (None, Some((stage, _)), false) => Some(stage.name()),
                _ => None,
            },
            &s.now.to_string(),
        ),
        stage_since: (s.failure.is_none() && !stage_since.is_empty() && !not_started)
            .then_some(stage_since),
        wave: s.wave.clone(),
        held_until: match s.not_started {
            Some(NotStarted::Paced(Hold {
                until: Some(at), ..
            })) if s.failure.is_none() => Some(crate::waves::rfc3339(*at)),
            _ => None,
        },
        backup: (!s.upgrade.backup.is_empty()).then(|| s.upgrade.backup.clone()),
        conditions,
        inventory: s.inventory.clone(),
        addons: match s.addons {
            Some(a) => a.status.clone(),
            None => prev.and_then(|p| p.status.addons.clone()),
        },
        ..Default::default()
    }
}

/// The `AddonsReady` condition added, and a cluster Cluster API reports Ready held at
/// Progressing (its add-ons on their way or waiting for it) or Failed (an add-on failed) until
/// its add-ons are Ready too. A cluster not Ready for its own reasons keeps them.
fn with_addons(
    phase: Phase,
    message: String,
    mut conditions: Vec<Condition>,
    v: &crate::addons::Verdict,
) -> (Phase, String, Vec<Condition>) {
    conditions.retain(|c| c.type_ != ConditionType::AddonsReady.as_str());
    conditions.push(condition(
        ConditionType::AddonsReady,
        v.status,
        v.reason,
        &v.message,
    ));
    if phase != Phase::Ready || v.status == True {
        return (phase, message, conditions);
    }
    let message = format!("add-ons: {}", v.message);
    let conditions = ready(conditions, v.reason, &message);
    let phase = if v.reason == Reason::AddonsFailed {
        Phase::Failed
    } else {
        Phase::Progressing
    };
    (phase, message, conditions)
}

/// The phase, message and conditions of a pass whose writes all went out (step 2 and 3 of
/// [`settle`]).
fn converged(s: &Settled<'_>) -> (Phase, String, Vec<Condition>) {
    let conflicts: Vec<String> = s
        .plan
        .entries
        .iter()
        .filter(|e| e.action == Action::Conflict)
        .map(|e| {
            format!(
                "{}: {}",
                e.object.subject(),
                e.reason.as_deref().unwrap_or("conflict")
            )
        })
        .collect();
    let (phase, message, conditions) = health(s.health);
    if !conflicts.is_empty() {
        // Not converged, and not something waiting will fix: someone has to settle which side
        // owns the field.
        let message = conflicts.join("; ");
        let mut conditions = ready(conditions, Reason::Conflict, &message);
        conditions.push(condition(
            Conflict,
            True,
            Reason::FieldManagerConflict,
            &message,
        ));
        return (Phase::Failed, message, conditions);
    }
    match s.after.summary() {
        // A stage is not rolled out: that, not the Cluster's own summary, is what the cluster
        // waits for.
        Some(summary) => {
            // A change to a cluster applied before at another revision is an upgrade, and stays
            // one until it is done; a new cluster is being created.
            let upgrading = s.prev.is_some_and(|p| {
                let recorded = &p.status.desired_hash;
                (!recorded.is_empty() && *recorded != s.fingerprint)
                    || p.status.phase == Some(Phase::Upgrading)
            });
            let (phase, reason, verb) = if upgrading {
                (Phase::Upgrading, Reason::Upgrading, "upgrading")
            } else {
                (
                    Phase::Progressing,
                    Reason::Progressing,
                    "applied, rolling out",
                )
            };
            let message = match s.note {
                Some(n) => format!("{verb} ({n}): {summary}"),
                None => format!("{verb}: {summary}"),
            };
            let conditions = ready(conditions, reason, &message);
            (phase, message, conditions)
        }
        // A chain step rolled out: the next step is the next pass's.
        None if s.note.is_some() => {
            let message = format!(
                "upgrading ({}): this step has rolled out",
                s.note.unwrap_or_default()
            );
            let conditions = ready(conditions, Reason::Upgrading, &message);
            (Phase::Upgrading, message, conditions)
        }
        // Rolled out, but prunes wait for a pass that sees it so (the deletion that held them
        // has just completed): not converged yet.
        None if phase == Phase::Ready
            && s.plan.entries.iter().any(|e| e.action == Action::Held) =>
        {
            let held: Vec<String> = s
                .plan
                .entries
                .iter()
                .filter(|e| e.action == Action::Held)
                .map(|e| e.object.subject())
                .collect();
            let message = format!(
                "rolled out at this revision; pruned by the next pass: {}",
                held.join(", ")
            );
            let conditions = ready(conditions, Reason::Pruning, &message);
            (Phase::Progressing, message, conditions)
        }
        None => (phase, message, conditions),
    }
}

#[cfg(test)]
mod tests;
