//! The holds a pass puts on a cluster's plan before anything of it is applied, decided from the
//! facts the agent gathered: Cluster API deleting the cluster's Cluster, the health gate, the
//! fleet's pacing; and what they add up to for the status ([`Holds`]).
//!
//! Why here: each is a rule an operator relies on ("an unhealthy cluster is not upgraded", "a
//! wave waits for the one before it"), and a rule tested only end to end is one whose corner
//! cases nobody tried. As pure functions each is a table of cases. The agent keeps what needs it
//! (the live state's reads, the health assessment, the lock under which a wave slot is taken)
//! and hands the answers in: the health and the pacing decision as closures, asked only when a
//! hold is possible at all, since both cost more than the checks before them.

use crate::decide::NotStarted;
use crate::status::Phase;
use crate::waves::{self, Hold};
use crate::{Action, ObjectRef, Plan, stages};

/// The annotation on a cluster's EKS-A Cluster (in the repository) that lets its upgrade start
/// while it is unhealthy.
pub const UPGRADE_WHEN_UNHEALTHY: &str = "capstan.dev/upgrade-when-unhealthy";

/// What the holds add up to, for the status ([`crate::decide::settle`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holds {
    /// The health gate held its rollout changes.
    pub gated: bool,
    /// The fleet's pacing held them.
    pub paced: Option<Hold>,
    /// Held before its upgrade started: by what.
    pub not_started: Option<NotStarted>,
}

/// Holds every create and update of `plan`, saying why: Cluster API is deleting `cluster` (it was
/// deleted outside capstan), and what is applied under it now would be deleted with it. Created
/// again from the repository once it is gone.
pub fn under_deletion(plan: &mut Plan, cluster: &ObjectRef) {
    let why = format!(
        "waits until {} is deleted (it was deleted outside capstan; what is applied under it now would be deleted with it): created again from the repository then",
        cluster.subject()
    );
    for e in &mut plan.entries {
        if matches!(e.action, Action::Create | Action::Update) {
            e.action = Action::Held;
            e.reason = Some(why.clone());
        }
    }
}

/// Holds the changes of `plan` that would roll machines of objects that exist (`live`), saying
/// `why`. Creations and scales are not held: they start no upgrade.
pub fn machine_rolls(plan: &mut Plan, why: &str, live: impl Fn(&ObjectRef) -> bool) {
    for e in &mut plan.entries {
        if stages::rolls_machines(e) && live(&e.object) {
            e.action = Action::Held;
            e.reason = Some(why.to_string());
        }
    }
}

/// What the health gate decides from.
#[derive(Debug, Clone, Copy)]
pub struct HealthFacts<'a> {
    /// The repository's fingerprint the record says was last applied (empty: never).
    pub recorded: &'a str,
    /// The fingerprint of this revision.
    pub target: &'a str,
    /// The cluster's EKS-A Cluster carries [`UPGRADE_WHEN_UNHEALTHY`].
    pub overridden: bool,
}

/// Whether applying `plan` would start rolling machines of a revision not applied before: a
/// change of one that exists rolls them, and the record's fingerprint is another's (not empty:
/// a cluster never applied is being created, not upgraded).
pub fn starts_rolling(plan: &Plan, f: &HealthFacts<'_>, live: impl Fn(&ObjectRef) -> bool) -> bool {
    !f.recorded.is_empty()
        && f.recorded != f.target
        && plan
            .entries
            .iter()
            .any(|e| stages::rolls_machines(e) && live(&e.object))
}

/// The gate before an upgrade starts: a cluster that is not healthy at its current revision is
/// not upgraded — its machine-rolling changes are held, with why — unless the repository says
/// so ([`UPGRADE_WHEN_UNHEALTHY`]). An upgrade in progress (this revision applied before) is
/// not gated again, nor are scales, nor a cluster's creation. `health` says whether the cluster
/// is healthy now (`Err`: how it is not); it is asked only when the gate could hold. Returns
/// the hold's reason.
pub fn health_gate(
    plan: &mut Plan,
    f: &HealthFacts<'_>,
    live: impl Fn(&ObjectRef) -> bool,
    health: impl FnOnce() -> Result<(), String>,
) -> Option<String> {
    if f.overridden || !starts_rolling(plan, f, &live) {
        return None;
    }
    let unhealthy = health().err()?;
    let why = format!(
        "the cluster is not healthy at its current revision ({unhealthy}); the upgrade starts once it is, or annotate its Cluster with {UPGRADE_WHEN_UNHEALTHY} in the repository to start it anyway"
    );
    machine_rolls(plan, &why, live);
    Some(why)
}

/// What the fleet's pacing decides from.
#[derive(Debug, Clone, Copy)]
pub struct PaceFacts<'a> {
    /// The cluster is a management cluster (never paced).
    pub management: bool,
    /// Its recorded phase and fingerprint, when it has a record.
    pub recorded: Option<(Phase, &'a str)>,
    /// The fingerprint of this revision.
    pub target: &'a str,
}

/// The fleet-wide gate before an upgrade starts: when this pass would start an upgrade
/// ([`waves::starts_upgrade`]), `decide` says whether the fleet's waves, `maxUnavailable` and
/// maintenance windows let it start now (the agent decides and takes its slot under one lock);
/// if not, its machine-rolling changes are held with why, and the hold returned.
pub fn wave_gate(
    plan: &mut Plan,
    f: &PaceFacts<'_>,
    live: impl Fn(&ObjectRef) -> bool,
    decide: impl FnOnce() -> Result<(), Hold>,
) -> Option<Hold> {
    if !waves::starts_upgrade(&plan.entries, f.management, f.recorded, f.target, &live) {
        return None;
    }
    let hold = decide().err()?;
    machine_rolls(plan, &hold.message, live);
    Some(hold)
}

/// What the health gate's and the pacing's holds add up to. A cluster held before its upgrade
/// started (by the waves, or by the health gate with no earlier upgrade still rolling) is not
/// upgrading: it waits for no stage of its own.
/// A bare-metal cluster short of spare Hardware (`short`, [`crate::spare::spare_gate`]) is held
/// as the health gate holds: not started, unless an earlier upgrade is still rolling.
pub fn combined(
    gated: Option<String>,
    short: Option<String>,
    paced: Option<Hold>,
    upgrading: bool,
) -> Holds {
    let not_started = match (&paced, &gated, &short) {
        (Some(hold), _, _) => Some(NotStarted::Paced(hold.clone())),
        (None, Some(why), _) if !upgrading => Some(NotStarted::Unhealthy(why.clone())),
        (None, None, Some(why)) if !upgrading => Some(NotStarted::NoSpareHardware(why.clone())),
        _ => None,
    };
    Holds {
        gated: gated.is_some() || short.is_some(),
        paced,
        not_started,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Entry;
    use crate::status::Reason;

    fn object(api_version: &str, kind: &str, name: &str) -> ObjectRef {
        ObjectRef::of(&serde_json::json!({
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"namespace": "ns", "name": name},
        }))
    }

    fn entry(kind: &str, name: &str, action: Action) -> Entry {
        let api_version = match kind {
            "KubeadmControlPlane" => "controlplane.cluster.x-k8s.io/v1beta2",
            "MachineDeployment" | "Cluster" => "cluster.x-k8s.io/v1beta2",
            "DockerMachineTemplate" => "infrastructure.cluster.x-k8s.io/v1beta1",
            _ => "v1",
        };
        Entry::new(object(api_version, kind, name), action, None)
    }

    /// A plan that rolls the control plane (an update), scales nothing, creates a template and
    /// leaves a ConfigMap alone.
    fn plan() -> Plan {
        Plan {
            cluster: "w".into(),
            entries: vec![
                entry("KubeadmControlPlane", "w", Action::Update),
                entry("DockerMachineTemplate", "w-cp-2", Action::Create),
                entry("ConfigMap", "w-cm", Action::Unchanged),
            ],
        }
    }

    fn actions(p: &Plan) -> Vec<Action> {
        p.entries.iter().map(|e| e.action).collect()
    }

    fn hold(reason: Reason) -> Hold {
        Hold {
            reason,
            message: "wave 2/2 waits".into(),
            until: None,
        }
    }

    #[test]
    fn the_health_gate_holds_only_an_upgrade_of_an_unhealthy_cluster_that_is_not_overridden() {
        let facts = |recorded, overridden| HealthFacts {
            recorded,
            target: "new",
            overridden,
        };
        let all_live = |_: &ObjectRef| true;
        // (facts, live objects, health, held?)
        type Live = fn(&ObjectRef) -> bool;
        let cases: Vec<(HealthFacts<'_>, Live, Result<(), String>, bool)> = vec![
            (
                facts("old", false),
                all_live,
                Err("1/3 machines".into()),
                true,
            ),
            (facts("old", false), all_live, Ok(()), false),
            (facts("old", true), all_live, Err("1/3".into()), false),
            (facts("", false), all_live, Err("1/3".into()), false), // never applied: a creation
            (facts("new", false), all_live, Err("1/3".into()), false), // upgrading already
            (facts("old", false), |_| false, Err("1/3".into()), false), // nothing live rolls
        ];
        for (i, (f, live, health, held)) in cases.into_iter().enumerate() {
            let mut p = plan();
            let asked = std::cell::Cell::new(false);
            let got = health_gate(&mut p, &f, live, || {
                asked.set(true);
                health
            });
            assert_eq!(got.is_some(), held, "case {i}");
            if held {
                assert!(got.unwrap().contains("1/3 machines"), "case {i}");
                assert_eq!(
                    actions(&p),
                    [Action::Held, Action::Create, Action::Unchanged],
                    "case {i}: the rolling update is held, the creation is not"
                );
                assert!(
                    p.entries[0]
                        .reason
                        .as_deref()
                        .unwrap()
                        .contains(UPGRADE_WHEN_UNHEALTHY)
                );
            } else {
                assert_eq!(actions(&p), actions(&plan()), "case {i}");
            }
            // Health is asked only when the gate could hold.
            assert_eq!(asked.get(), i < 2, "case {i}");
        }
    }

    #[test]
    fn the_wave_gate_holds_an_upgrade_the_pacing_does_not_let_start() {
        let f = |management, recorded| PaceFacts {
            management,
            recorded,
            target: "new",
        };
        let live = |_: &ObjectRef| true;
        let ready = Some((Phase::Ready, "old"));
        // (facts, the pacing's decision, held?, decision asked?)
        let cases = [
            (
                f(false, ready),
                Err(hold(Reason::WaitingForWave)),
                true,
                true,
            ),
            (f(false, ready), Ok(()), false, true),
            (
                f(true, ready),
                Err(hold(Reason::MaxUnavailable)),
                false,
                false,
            ),
            (
                f(false, None),
                Err(hold(Reason::MaxUnavailable)),
                false,
                false,
            ),
            (
                f(false, Some((Phase::Upgrading, "old"))),
                Err(hold(Reason::MaxUnavailable)),
                false,
                false,
            ),
            (
                f(false, Some((Phase::Ready, "new"))),
                Err(hold(Reason::MaxUnavailable)),
                false,
                false,
            ),
        ];
        for (i, (facts, decision, held, asked)) in cases.into_iter().enumerate() {
            let mut p = plan();
            let was_asked = std::cell::Cell::new(false);
            let got = wave_gate(&mut p, &facts, live, || {
                was_asked.set(true);
                decision
            });
            assert_eq!(got.is_some(), held, "case {i}");
            assert_eq!(was_asked.get(), asked, "case {i}");
            let first = if held { Action::Held } else { Action::Update };
            assert_eq!(
                actions(&p),
                [first, Action::Create, Action::Unchanged],
                "case {i}"
            );
        }
    }

    #[test]
    fn a_cluster_under_deletion_holds_every_create_and_update() {
        let mut p = plan();
        let cluster = object("cluster.x-k8s.io/v1beta2", "Cluster", "w");
        under_deletion(&mut p, &cluster);
        assert_eq!(actions(&p), [Action::Held, Action::Held, Action::Unchanged]);
        assert!(
            p.entries[1]
                .reason
                .as_deref()
                .unwrap()
                .contains("Cluster/ns/w")
        );
    }

    #[test]
    fn holds_add_up_to_not_started_only_before_an_upgrade_started() {
        let why = || Some("unhealthy".to_string());
        let paced = || Some(hold(Reason::WaitingForWave));
        // (gated, paced, upgrading) → (gated, not started by)
        let cases = [
            (None, None, false, false, None),
            (why(), None, false, true, Some("unhealthy")),
            (why(), None, true, true, None), // an upgrade that started goes on
            (None, paced(), false, false, Some("paced")),
            (None, paced(), true, false, Some("paced")),
        ];
        for (i, (gated, p, upgrading, is_gated, by)) in cases.into_iter().enumerate() {
            let h = combined(gated, None, p, upgrading);
            assert_eq!(h.gated, is_gated, "case {i}");
            let got = match &h.not_started {
                None => None,
                Some(NotStarted::Paced(_)) => Some("paced"),
                Some(NotStarted::Unhealthy(w)) => {
                    Some(if w == "unhealthy" { "unhealthy" } else { "?" })
                }
                Some(NotStarted::NoSpareHardware(_)) => Some("?"),
            };
            assert_eq!(got, by, "case {i}");
        }
        // Short of spare Hardware: held as the health gate holds, second to it and to pacing.
        let short = || Some("no spare".to_string());
        let h = combined(None, short(), None, false);
        assert!(h.gated);
        assert_eq!(
            h.not_started,
            Some(NotStarted::NoSpareHardware("no spare".into()))
        );
        assert_eq!(combined(None, short(), None, true).not_started, None);
        assert!(matches!(
            combined(why(), short(), None, false).not_started,
            Some(NotStarted::Unhealthy(_))
        ));
        assert!(matches!(
            combined(None, short(), paced(), false).not_started,
            Some(NotStarted::Paced(_))
        ));
    }
}
