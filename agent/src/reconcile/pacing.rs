//! Fleet-wide pacing in a cluster's pass: the fleet config's waves, `maxUnavailable` and
//! maintenance windows ([`crate::plan::waves`] decides; this gathers its facts and holds).
//!
//! Clusters of one management cluster are reconciled concurrently (the daemon's queue, or
//! `--concurrency`), and a cluster's status says Upgrading only once its pass has written it.
//! So the decision and the admission of a cluster happen under one lock ([`Admitted`]): a
//! cluster admitted at a revision counts as upgrading until its status says otherwise, and two
//! passes deciding at the same moment never both take the last slot.

use std::collections::BTreeMap;
use std::sync::Mutex;

use capstan_layout::{ClusterEntry, Fleet, Role};

/// Cluster API's group.
const CAPI_GROUP: &str = "cluster.x-k8s.io";

use super::pass::Pass;
use super::pass::Purpose;
use crate::plan::live::{Live, LiveObject};
use crate::plan::waves::{self, Hold, Member, rollout_of};
use crate::plan::{Plan, holds};
use crate::status::{Phase, Recorded};

/// Workload clusters started by this agent, with the `desiredHash` they were started at.
#[derive(Default)]
pub(super) struct Admitted(Mutex<BTreeMap<String, String>>);

/// The Cluster API Cluster a cluster's directory renders, as the live state holds it: `None`
/// when nothing is rendered (an invalid directory: its availability is unknown, not counted, so
/// a broken directory does not take a slot of `maxUnavailable` from a cluster that is up);
/// `Some(None)` when rendered but not live.
fn live_cluster(live: &Live, entry: &ClusterEntry) -> Option<Option<LiveObject>> {
    let capi = entry.objects.iter().flatten().find(|o| {
        o.kind() == "Cluster" && capstan_templates::identity::group(o.api_version()) == CAPI_GROUP
    })?;
    Some(live.get(&crate::plan::reference(capi)))
}

/// The workload clusters of a management cluster's fleet that waves pace (deleted and suspended
/// ones are not: they upgrade nothing), with their recorded statuses and, when `live` is given,
/// whether Cluster API reports each Available.
pub(super) fn members(
    fleet: &Fleet,
    management: &str,
    records: &BTreeMap<String, std::sync::Arc<Recorded>>,
    admitted: &BTreeMap<String, String>,
    live: Option<&Live>,
) -> Vec<Member> {
    fleet
        .clusters
        .iter()
        .filter(|c| {
            c.role != Role::Management
                && c.management() == management
                && c.intent.delete.is_none()
                && c.intent.suspend.is_none()
        })
        .map(|c| {
            let target = super::desired_hash(c);
            Member {
                name: c.name.clone(),
                labels: c.labels(),
                admitted: admitted.get(&c.name) == Some(&target),
                record: records.get(&c.name).map(|r| {
                    (
                        r.status.phase.unwrap_or(Phase::Unknown),
                        r.status.desired_hash.clone(),
                        r.status.message.clone(),
                    )
                }),
                unavailable: live
                    .and_then(|l| live_cluster(l, c))
                    .and_then(|capi| waves::unavailable(capi.as_ref())),
                target,
            }
        })
        .collect()
}

impl Pass<'_> {
    /// The wave of a workload cluster (`2/3 rest`), when its fleet config paces upgrades.
    pub(super) fn wave_label(&self, fleet: &Fleet, entry: &ClusterEntry) -> Option<String> {
        let rollout = rollout_of(fleet, entry.management()).filter(|r| r.paces())?;
        if entry.role == Role::Management {
            return None;
        }
        let all = members(
            fleet,
            entry.management(),
            &BTreeMap::new(),
            &BTreeMap::new(),
            None,
        );
        let me = all.iter().find(|m| m.name == entry.name)?;
        Some(waves::label(rollout, &all, me))
    }

    /// The fleet-wide gate before an upgrade starts ([`crate::plan::holds::wave_gate`], which
    /// [`waves::decide`] answers): when the cluster may not start now, its machine-rolling
    /// changes are held with why, and the hold returned. A cluster that may start is admitted (it
    /// counts as upgrading from now on) when the decision is to be carried out; a plan only shown
    /// admits nothing. Deciding and admitting happen under one lock ([`Admitted`]).
    pub(super) fn wave_gate(
        &self,
        fleet: &Fleet,
        entry: &ClusterEntry,
        plan: &mut Plan,
        prev: Option<&Recorded>,
        target: &str,
        purpose: Purpose,
    ) -> Option<Hold> {
        let rollout = rollout_of(fleet, entry.management()).filter(|r| r.paces())?;
        let facts = holds::PaceFacts {
            management: entry.role == Role::Management,
            recorded: prev.map(|p| {
                (
                    p.status.phase.unwrap_or(Phase::Unknown),
                    p.status.desired_hash.as_str(),
                )
            }),
            target,
        };
        let live = |r: &crate::plan::ObjectRef| self.live.get(r).is_some();
        holds::wave_gate(plan, &facts, live, || {
            let mut admitted = self
                .agent
                .admitted
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let all = members(
                fleet,
                entry.management(),
                &self.live.records(),
                &admitted,
                Some(&self.live),
            );
            let d = waves::decide(rollout, &all, &entry.name, super::unix_now());
            if d.is_ok() && purpose == Purpose::Perform {
                admitted.insert(entry.name.clone(), target.to_string());
            }
            d
        })
    }
}
