//! Fleet-wide waves: which workload clusters may *start* an upgrade now, from the fleet config's
//! `rollout` section (`maxUnavailable`, `waves`, `healthGate`, `maintenanceWindows`).
//!
//! ```text
//!   wave 1/2 "canary"  dev-1 ──upgrading──▶ Ready at the revision ─┐
//!   wave 2/2 "rest"    prod-1, prod-2  (held: WaitingForWave)      └─▶ start, maxUnavailable at once
//! ```
//!
//! One revision reaches every cluster, but a version bump rolls machines for many minutes: a
//! platform team wants it on a canary first, the rest once the canary is healthy, never too many
//! clusters rolling at once, and only inside a maintenance window. Fleet (Rancher) calls these
//! partitions and `maxUnavailable`; capstan decides it per cluster, each time a cluster's pass is
//! about to start an upgrade, so a held cluster is simply requeued and never blocks a pass or
//! another cluster.
//!
//! What is held: only the start of an upgrade — a change that rolls machines of a cluster that
//! was applied before (the upgrade stages' changes, [`super::stages`]). Never held: creations (a
//! new cluster replaces no machine and takes nothing down), scale-only changes, drift
//! corrections, the objects that roll nothing, deletions (they follow intent), and an upgrade
//! already started (it goes on to its end, whatever its wave). The management cluster is in no
//! wave: it upgrades itself, its workload clusters paused, before any of them moves
//! (the agent's `reconcile::self_upgrade`).
//!
//! [`decide`] is the whole decision, pure: the revision's target per cluster × the fleet's
//! recorded statuses × the config × now. Order of the checks, first hold wins: a failed cluster
//! in this wave or an earlier one stops it (until a new revision fixes it: the failed cluster
//! itself may always try again); the waves before must be Ready at the revision (`healthGate`,
//! or only started without it); a maintenance window must be open; fewer than `maxUnavailable`
//! others may be upgrading.

use std::collections::BTreeMap;
use std::fmt;

use capstan_layout::config::{Rollout, Window};

use super::{Entry, ObjectRef};
use crate::status::{Phase, Reason};

/// The `rollout` section of a management cluster's fleet config.
pub fn rollout_of<'f>(fleet: &'f capstan_layout::Fleet, management: &str) -> Option<&'f Rollout> {
    fleet
        .configs
        .get(management)
        .and_then(|c| c.rollout.as_ref())
}

/// One workload cluster of the fleet, as the decision sees it.
#[derive(Debug, Clone)]
pub struct Member {
    /// Its name.
    pub name: String,
    /// The labels of its EKS-A Cluster in the repository.
    pub labels: BTreeMap<String, String>,
    /// The `desiredHash` it has once this revision is applied.
    pub target: String,
    /// Its recorded phase, `desiredHash` and message (None: never recorded).
    pub record: Option<(Phase, String, String)>,
    /// Started by this agent at `target`, its status maybe not written yet.
    pub admitted: bool,
    /// Why it is not available, whether or not it is upgrading ([`unavailable`]); `None`:
    /// Cluster API reports it Available.
    pub unavailable: Option<String>,
}

/// Why a workload cluster is not available, from its Cluster API Cluster as the live state
/// holds it (`None`: not in it yet). What `maxUnavailable` counts besides upgrades: a cluster
/// whose control plane lost a machine or whose API server does not answer is as unavailable to
/// its users as one being upgraded, and starting another upgrade beside it risks more.
pub fn unavailable(cluster: Option<&crate::live::LiveObject>) -> Option<String> {
    let Some(cluster) = cluster else {
        return Some("its Cluster does not exist yet".into());
    };
    if cluster.deleting {
        return Some("its Cluster is being deleted".into());
    }
    match cluster
        .rollout
        .as_ref()
        .and_then(|r| r.condition("Available"))
    {
        Some(a) if &*a.status == "True" => None,
        Some(a) if a.reason.is_empty() => Some("Cluster API reports it not Available".into()),
        Some(a) => Some(format!(
            "Cluster API reports it not Available ({})",
            a.reason
        )),
        None => Some("Cluster API reports no Available condition yet".into()),
    }
}

/// Where a member stands with respect to the revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Ready at the revision.
    Done,
    /// An upgrade is going out.
    Upgrading,
    /// Failed: why.
    Failed(String),
    /// Not started (or not Ready at the revision yet).
    Pending,
}

impl Standing {
    /// The label value of `capstan_wave_clusters{state}`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Standing::Done => "done",
            Standing::Upgrading => "upgrading",
            Standing::Failed(_) => "failed",
            Standing::Pending => "pending",
        }
    }
}

impl Member {
    /// Where it stands.
    pub fn standing(&self) -> Standing {
        match &self.record {
            Some((Phase::Failed, _, message)) => Standing::Failed(message.clone()),
            Some((Phase::Ready, hash, _)) if *hash == self.target => Standing::Done,
            Some((Phase::Upgrading, _, _)) => Standing::Upgrading,
            _ if self.admitted => Standing::Upgrading,
            _ => Standing::Pending,
        }
    }
}

/// An upgrade held back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// Why, as a condition reason: [`Reason::WaveStopped`], [`Reason::WaitingForWave`],
    /// [`Reason::OutsideMaintenanceWindow`] or [`Reason::MaxUnavailable`].
    pub reason: Reason,
    /// Why, for humans.
    pub message: String,
    /// When it may start at the earliest (a window opening; unix seconds), if known.
    pub until: Option<i64>,
}

impl fmt::Display for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The wave of a cluster: its index and name. Clusters no wave selects form a last wave of
/// their own, `rest`, after the written ones (none written: one wave of every cluster).
pub fn wave_of<'r>(
    rollout: &'r Rollout,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> (usize, &'r str) {
    rollout
        .waves
        .iter()
        .enumerate()
        .find(|(_, w)| w.selects(name, labels))
        .map(|(i, w)| (i, w.name.as_str()))
        .unwrap_or((rollout.waves.len(), IMPLICIT))
}

/// The name of the last wave of the clusters no written wave selects.
pub const IMPLICIT: &str = "rest";

/// How many waves a fleet has: the written ones, and the implicit last one when some cluster
/// falls into it.
pub fn wave_count(rollout: &Rollout, members: &[Member]) -> usize {
    let implicit = members
        .iter()
        .any(|m| wave_of(rollout, &m.name, &m.labels).0 == rollout.waves.len());
    (rollout.waves.len() + usize::from(implicit)).max(1)
}

/// `wave 2/3 "rest"`.
pub fn label(rollout: &Rollout, members: &[Member], m: &Member) -> String {
    let (i, name) = wave_of(rollout, &m.name, &m.labels);
    format!("{}/{} {name}", i + 1, wave_count(rollout, members))
}

const WEEK: i64 = 7 * 24 * 60;

/// Whether `now` (unix seconds) is inside a window; else when the next one opens (unix seconds).
pub fn window_at(windows: &[Window], now: i64) -> Result<(), i64> {
    // Minutes since Monday 00:00 UTC (1970-01-01 was a Thursday, three days after a Monday).
    let minute = now.div_euclid(60);
    let of_week = (minute + 3 * 24 * 60).rem_euclid(WEEK);
    let mut next = i64::MAX;
    for w in windows {
        for &d in &w.days {
            let open = i64::from(d) * 24 * 60 + i64::from(w.start);
            // How long ago it last opened (across the week's end), and whether it still is.
            let since = (of_week - open).rem_euclid(WEEK);
            if since < i64::from(w.minutes) {
                return Ok(());
            }
            next = next.min(WEEK - since);
        }
    }
    Err((minute + next) * 60)
}

/// An RFC 3339 time of unix seconds.
pub fn rfc3339(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| secs.to_string())
}

fn names(ms: &[&Member]) -> String {
    let mut out: Vec<&str> = ms.iter().take(3).map(|m| m.name.as_str()).collect();
    if ms.len() > 3 {
        out.push("…");
    }
    out.join(", ")
}

/// Whether `candidate` may start its upgrade now; `members` are every workload cluster of the
/// fleet (the candidate among them), `now` unix seconds. See the [module docs](self).
pub fn decide(
    rollout: &Rollout,
    members: &[Member],
    candidate: &str,
    now: i64,
) -> Result<(), Hold> {
    let Some(me) = members.iter().find(|m| m.name == candidate) else {
        return Ok(());
    };
    let wave = |m: &Member| wave_of(rollout, &m.name, &m.labels);
    let (mine, my_name) = wave(me);
    let total = wave_count(rollout, members);
    let here = format!("wave {}/{total} \"{my_name}\"", mine + 1);
    let hold = |reason, message: String| Hold {
        reason,
        message,
        until: None,
    };
    let others: Vec<&Member> = members.iter().filter(|m| m.name != candidate).collect();
    // A failure in this wave or an earlier one stops it.
    if let Some((m, why)) = others.iter().find_map(|m| match m.standing() {
        Standing::Failed(why) if wave(m).0 <= mine => Some((m, why)),
        _ => None,
    }) {
        let why: String = why.chars().take(160).collect();
        return Err(hold(
            Reason::WaveStopped,
            format!(
                "{here} is stopped: {} failed ({why}); no further upgrade starts until a new revision fixes it",
                m.name
            ),
        ));
    }
    // The waves before.
    let before: Vec<&Member> = others
        .iter()
        .copied()
        .filter(|m| wave(m).0 < mine)
        .collect();
    let waiting: Vec<&Member> = before
        .iter()
        .copied()
        .filter(|m| match m.standing() {
            Standing::Done => false,
            Standing::Upgrading => rollout.health_gate,
            _ => true,
        })
        .collect();
    if let Some(first) = waiting.first() {
        let (_, wave_name) = wave(first);
        let what = if rollout.health_gate {
            "not Ready at this revision"
        } else {
            "not started"
        };
        return Err(hold(
            Reason::WaitingForWave,
            format!(
                "{here} waits for wave \"{wave_name}\": {} {what}",
                names(&waiting)
            ),
        ));
    }
    if !rollout.windows.is_empty()
        && let Err(next) = window_at(&rollout.windows, now)
    {
        return Err(Hold {
            until: Some(next),
            ..hold(
                Reason::OutsideMaintenanceWindow,
                format!(
                    "outside the maintenance windows; the next opens at {}",
                    rfc3339(next)
                ),
            )
        });
    }
    if let Some(max) = rollout.max_unavailable {
        // Every other cluster that is not available counts: those upgrading, and those down
        // for any other reason.
        let (upgrading, down): (Vec<&Member>, Vec<&Member>) = others
            .iter()
            .copied()
            .filter(|m| m.standing() == Standing::Upgrading || m.unavailable.is_some())
            .partition(|m| m.standing() == Standing::Upgrading);
        let limit = max.of(members.len());
        if upgrading.len() + down.len() >= limit {
            let mut counted = Vec::new();
            if !upgrading.is_empty() {
                counted.push(format!(
                    "{} cluster(s) upgrading ({})",
                    upgrading.len(),
                    names(&upgrading)
                ));
            }
            if !down.is_empty() {
                let why = down[0].unavailable.as_deref().unwrap_or_default();
                counted.push(format!(
                    "{} cluster(s) not available ({}: {why})",
                    down.len(),
                    names(&down)
                ));
            }
            return Err(hold(
                Reason::MaxUnavailable,
                format!("maxUnavailable {max}: {}", counted.join(", ")),
            ));
        }
    }
    Ok(())
}

/// Whether a cluster's pass is about to *start* an upgrade, the one thing waves pace: a
/// workload cluster applied before (`recorded`: its phase and `desiredHash`) at another revision,
/// not already upgrading, whose plan changes an object that rolls machines and is live
/// (`live`). Creations, scales, drift corrections and an upgrade already going out are not.
pub fn starts_upgrade(
    entries: &[Entry],
    management: bool,
    recorded: Option<(Phase, &str)>,
    target: &str,
    live: impl Fn(&ObjectRef) -> bool,
) -> bool {
    let Some((phase, hash)) = recorded else {
        return false;
    };
    !management
        && !hash.is_empty()
        && hash != target
        && phase != Phase::Upgrading
        && entries
            .iter()
            .any(|e| super::stages::rolls_machines(e) && live(&e.object))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_layout::config::{MaxUnavailable, Wave};

    fn m(name: &str, tier: &str, record: Option<(Phase, &str)>) -> Member {
        Member {
            name: name.into(),
            labels: BTreeMap::from([("tier".to_string(), tier.to_string())]),
            target: "new".into(),
            record: record.map(|(p, h)| (p, h.to_string(), format!("{p:?} message"))),
            admitted: false,
            unavailable: None,
        }
    }

    fn canary() -> Rollout {
        Rollout {
            max_unavailable: Some(MaxUnavailable::Count(1)),
            waves: vec![Wave {
                name: "canary".into(),
                clusters: vec![],
                match_labels: BTreeMap::from([("tier".to_string(), "canary".to_string())]),
            }],
            ..Rollout::default()
        }
    }

    const READY_OLD: Option<(Phase, &str)> = Some((Phase::Ready, "old"));

    #[test]
    fn the_canary_goes_first_and_the_rest_once_it_is_ready_at_the_revision() {
        let r = canary();
        let mut fleet = vec![
            m("dev-1", "canary", READY_OLD),
            m("prod-1", "prod", READY_OLD),
            m("prod-2", "prod", READY_OLD),
        ];
        assert_eq!(decide(&r, &fleet, "dev-1", 0), Ok(()));
        let held = decide(&r, &fleet, "prod-1", 0).unwrap_err();
        assert_eq!(held.reason, Reason::WaitingForWave);
        assert_eq!(
            held.message,
            "wave 2/2 \"rest\" waits for wave \"canary\": dev-1 not Ready at this revision"
        );
        // Started (not recorded yet), then upgrading, then Ready at the old hash: still held.
        fleet[0].admitted = true;
        assert!(decide(&r, &fleet, "prod-1", 0).is_err());
        fleet[0].record = Some((Phase::Upgrading, "new".into(), String::new()));
        assert!(decide(&r, &fleet, "prod-1", 0).is_err());
        fleet[0].record = Some((Phase::Ready, "new".into(), String::new()));
        assert_eq!(decide(&r, &fleet, "prod-1", 0), Ok(()));
        // maxUnavailable 1: prod-1 upgrading holds prod-2.
        fleet[1].admitted = true;
        let held = decide(&r, &fleet, "prod-2", 0).unwrap_err();
        assert_eq!(held.reason, Reason::MaxUnavailable);
        assert_eq!(
            held.message,
            "maxUnavailable 1: 1 cluster(s) upgrading (prod-1)"
        );
        fleet[1].record = Some((Phase::Ready, "new".into(), String::new()));
        assert_eq!(decide(&r, &fleet, "prod-2", 0), Ok(()));
    }

    #[test]
    fn waves_go_in_order_by_name_then_labels_and_the_unselected_last() {
        let mut r = canary();
        r.max_unavailable = None;
        r.waves.insert(
            0,
            Wave {
                name: "first".into(),
                clusters: vec!["prod-9".into()],
                match_labels: BTreeMap::new(),
            },
        );
        let fleet = vec![
            m("dev-1", "canary", READY_OLD),
            m("prod-9", "canary", READY_OLD),
            m("prod-1", "prod", READY_OLD),
        ];
        assert_eq!(wave_of(&r, "prod-9", &fleet[1].labels), (0, "first"));
        assert_eq!(wave_of(&r, "dev-1", &fleet[0].labels), (1, "canary"));
        assert_eq!(wave_of(&r, "prod-1", &fleet[2].labels), (2, IMPLICIT));
        assert_eq!(label(&r, &fleet, &fleet[2]), "3/3 rest");
        assert_eq!(decide(&r, &fleet, "prod-9", 0), Ok(()));
        let held = decide(&r, &fleet, "dev-1", 0).unwrap_err();
        assert!(
            held.message
                .starts_with("wave 2/3 \"canary\" waits for wave \"first\": prod-9"),
            "{held}"
        );
        // Without the health gate a wave waits only for the ones before to have started.
        r.health_gate = false;
        let mut started = fleet.clone();
        started[1].record = Some((Phase::Upgrading, "new".into(), String::new()));
        assert_eq!(decide(&r, &started, "dev-1", 0), Ok(()));
        assert!(
            decide(&r, &started, "prod-1", 0)
                .unwrap_err()
                .message
                .contains("not started")
        );
        // No waves written: one wave of everything, nothing to wait for.
        let none = Rollout::default();
        assert_eq!(wave_count(&none, &fleet), 1);
        assert_eq!(decide(&none, &fleet, "prod-1", 0), Ok(()));
    }

    #[test]
    fn a_failed_cluster_stops_its_wave_and_the_later_ones_but_may_itself_try_again() {
        let mut r = canary();
        r.max_unavailable = None;
        let mut fleet = vec![
            m("dev-1", "canary", Some((Phase::Failed, "old"))),
            m("dev-2", "canary", READY_OLD),
            m("prod-1", "prod", READY_OLD),
        ];
        fleet[0].record.as_mut().unwrap().2 = "revision r2 not applied: ImmutableField".into();
        for other in ["dev-2", "prod-1"] {
            let held = decide(&r, &fleet, other, 0).unwrap_err();
            assert_eq!(held.reason, Reason::WaveStopped);
            assert!(
                held.message
                    .contains("dev-1 failed (revision r2 not applied: ImmutableField)"),
                "{held}"
            );
        }
        assert_eq!(decide(&r, &fleet, "dev-1", 0), Ok(()));
        // A failure in a later wave stops only that one.
        fleet[0].record = Some((Phase::Ready, "new".into(), String::new()));
        fleet[1].record = Some((Phase::Ready, "new".into(), String::new()));
        fleet.push(m("prod-2", "prod", Some((Phase::Failed, "old"))));
        assert_eq!(decide(&r, &fleet, "dev-2", 0), Ok(()));
        assert_eq!(
            decide(&r, &fleet, "prod-1", 0).unwrap_err().reason,
            Reason::WaveStopped
        );
    }

    #[test]
    fn max_unavailable_as_a_percentage_counts_the_whole_fleet() {
        let r = Rollout {
            max_unavailable: Some(MaxUnavailable::Percent(50)),
            ..Rollout::default()
        };
        let mut fleet: Vec<Member> = (0..4)
            .map(|i| m(&format!("c{i}"), "x", READY_OLD))
            .collect();
        fleet[0].admitted = true;
        assert_eq!(decide(&r, &fleet, "c1", 0), Ok(()));
        fleet[1].record = Some((Phase::Upgrading, "new".into(), String::new()));
        let held = decide(&r, &fleet, "c2", 0).unwrap_err();
        assert_eq!(
            held.message,
            "maxUnavailable 50%: 2 cluster(s) upgrading (c0, c1)"
        );
        // 25% of 3 rounds down to 0: at least one still goes.
        let r = Rollout {
            max_unavailable: Some(MaxUnavailable::Percent(25)),
            ..Rollout::default()
        };
        let fleet: Vec<Member> = (0..3)
            .map(|i| m(&format!("c{i}"), "x", READY_OLD))
            .collect();
        assert_eq!(decide(&r, &fleet, "c0", 0), Ok(()));
    }

    #[test]
    fn max_unavailable_counts_clusters_down_for_any_reason() {
        let r = Rollout {
            max_unavailable: Some(MaxUnavailable::Count(1)),
            ..Rollout::default()
        };
        let mut fleet: Vec<Member> = (0..3)
            .map(|i| m(&format!("c{i}"), "x", READY_OLD))
            .collect();
        // c2 is not upgrading, but its control plane lost a machine: it takes the one slot.
        fleet[2].unavailable = Some("Cluster API reports it not Available (NotAvailable)".into());
        let held = decide(&r, &fleet, "c0", 0).unwrap_err();
        assert_eq!(held.reason, Reason::MaxUnavailable);
        assert_eq!(
            held.message,
            "maxUnavailable 1: 1 cluster(s) not available (c2: Cluster API reports it not Available (NotAvailable))"
        );
        // The cluster that is down may itself upgrade (only the others count).
        assert_eq!(decide(&r, &fleet, "c2", 0), Ok(()));
        // With two slots, one down and one upgrading fill them; both are named.
        let r2 = Rollout {
            max_unavailable: Some(MaxUnavailable::Count(2)),
            ..Rollout::default()
        };
        fleet.push(m("c3", "x", Some((Phase::Upgrading, "new"))));
        let held = decide(&r2, &fleet, "c0", 0).unwrap_err();
        assert_eq!(
            held.message,
            "maxUnavailable 2: 1 cluster(s) upgrading (c3), 1 cluster(s) not available (c2: Cluster API reports it not Available (NotAvailable))"
        );
        // Available again: the slot is free.
        fleet[2].unavailable = None;
        assert_eq!(decide(&r2, &fleet, "c0", 0), Ok(()));
        // An upgrading cluster that is also not available counts once.
        fleet[3].unavailable = Some("x".into());
        assert_eq!(decide(&r2, &fleet, "c0", 0), Ok(()));
    }

    #[test]
    fn a_cluster_is_available_only_when_cluster_api_says_so() {
        use crate::live::LiveObject;
        let cluster = |conditions: serde_json::Value, deleting: bool| {
            let mut obj = serde_json::json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": "c", "namespace": "n", "generation": 1},
                "status": {"observedGeneration": 1, "conditions": conditions},
            });
            if deleting {
                obj["metadata"]["deletionTimestamp"] = "2026-11-28T00:00:00Z".into();
            }
            LiveObject::from_value(&obj)
        };
        let up = cluster(
            serde_json::json!([{"type": "Available", "status": "True", "reason": "Available"}]),
            false,
        );
        assert_eq!(unavailable(Some(&up)), None);
        let down = cluster(
            serde_json::json!([{"type": "Available", "status": "False", "reason": "NotAvailable"}]),
            false,
        );
        assert_eq!(
            unavailable(Some(&down)).as_deref(),
            Some("Cluster API reports it not Available (NotAvailable)")
        );
        assert!(unavailable(Some(&cluster(serde_json::json!([]), false))).is_some());
        let going = cluster(
            serde_json::json!([{"type": "Available", "status": "True", "reason": "Available"}]),
            true,
        );
        assert_eq!(
            unavailable(Some(&going)).as_deref(),
            Some("its Cluster is being deleted")
        );
        assert_eq!(
            unavailable(None).as_deref(),
            Some("its Cluster does not exist yet")
        );
    }

    /// Unix seconds of a UTC day of January 2024 (the 1st was a Monday) and time.
    fn at(day: i64, h: i64, min: i64) -> i64 {
        1_704_067_200 + (day - 1) * 86_400 + h * 3600 + min * 60
    }

    #[test]
    fn maintenance_windows_across_midnight_and_the_week_end() {
        assert_eq!(rfc3339(at(1, 0, 0)), "2024-01-01T00:00:00Z");
        // Sunday 23:00 for 4h: open until Monday 03:00.
        let sunday = Window {
            days: vec![6],
            start: 23 * 60,
            minutes: 240,
        };
        let ws = [sunday];
        assert_eq!(window_at(&ws, at(7, 23, 30)), Ok(()));
        assert_eq!(window_at(&ws, at(8, 2, 59)), Ok(()));
        assert_eq!(window_at(&ws, at(1, 2, 0)), Ok(()));
        assert_eq!(window_at(&ws, at(8, 3, 0)), Err(at(14, 23, 0)));
        assert_eq!(window_at(&ws, at(3, 12, 0)), Err(at(7, 23, 0)));
        // Every day 02:00 for 90m.
        let daily = [Window {
            days: (0..7).collect(),
            start: 120,
            minutes: 90,
        }];
        assert_eq!(window_at(&daily, at(3, 3, 29)), Ok(()));
        assert_eq!(window_at(&daily, at(3, 3, 30)), Err(at(4, 2, 0)));
        // The decision says when; a cluster already upgrading is not asked again (the caller).
        let r = Rollout {
            windows: ws.to_vec(),
            ..Rollout::default()
        };
        let fleet = vec![m("a", "x", READY_OLD)];
        let held = decide(&r, &fleet, "a", at(3, 12, 0)).unwrap_err();
        assert_eq!(held.reason, Reason::OutsideMaintenanceWindow);
        assert_eq!(held.until, Some(at(7, 23, 0)));
        assert_eq!(
            held.message,
            "outside the maintenance windows; the next opens at 2024-01-07T23:00:00Z"
        );
        assert_eq!(decide(&r, &fleet, "a", at(8, 1, 0)), Ok(()));
    }

    #[test]
    fn only_the_start_of_an_upgrade_of_a_workload_cluster_is_paced() {
        use crate::Action;
        let r = |kind: &str, name: &str| {
            let api = match kind {
                "KubeadmControlPlane" => "controlplane.cluster.x-k8s.io/v1beta2",
                "MachineDeployment" => "cluster.x-k8s.io/v1beta2",
                _ => "infrastructure.cluster.x-k8s.io/v1beta2",
            };
            ObjectRef::of(&serde_json::json!({"apiVersion": api, "kind": kind,
                "metadata": {"namespace": "ns", "name": name}}))
        };
        let bump = vec![
            Entry::new(r("DockerMachineTemplate", "t-2"), Action::Create, None),
            Entry::new(r("KubeadmControlPlane", "c"), Action::Update, None),
        ];
        let scale = vec![Entry {
            scale_only: true,
            ..Entry::new(r("MachineDeployment", "c-md-0"), Action::Update, None)
        }];
        let drift = vec![Entry::new(
            r("KubeadmControlPlane", "c"),
            Action::Update,
            Some("drift: corrected".into()),
        )];
        let live = |_: &ObjectRef| true;
        let ready = Some((Phase::Ready, "old"));
        assert!(starts_upgrade(&bump, false, ready, "new", live));
        // The management cluster is in no wave.
        assert!(!starts_upgrade(&bump, true, ready, "new", live));
        // A scale, a drift correction, a creation (nothing recorded, nothing live) go at once.
        assert!(!starts_upgrade(&scale, false, ready, "new", live));
        assert!(!starts_upgrade(&drift, false, ready, "new", live));
        assert!(!starts_upgrade(&bump, false, None, "new", live));
        assert!(!starts_upgrade(&bump, false, ready, "new", |_| false));
        // Started already: this revision applied before, or an upgrade still going out.
        assert!(!starts_upgrade(
            &bump,
            false,
            Some((Phase::Upgrading, "new")),
            "new",
            live
        ));
        assert!(!starts_upgrade(
            &bump,
            false,
            Some((Phase::Ready, "new")),
            "new",
            live
        ));
        assert!(!starts_upgrade(
            &bump,
            false,
            Some((Phase::Upgrading, "old")),
            "new",
            live
        ));
    }
}
