//! Every branch of the pass's decisions as a case: [`gate`] from the repository and the record,
//! [`settle`] from what a pass knows once its changes are out.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use capstan_layout::ClusterEntry;
use capstan_layout::scaffold::ClusterRequest;
use capstan_templates::diag::{Code, Diagnostic};

use super::*;
use crate::Entry;
use crate::stages::Stage;
use crate::status::ManagedClusterStatus;

/// A scaffolded fleet: management `m` and workload `w`, both valid.
fn fleet() -> capstan_layout::Fleet {
    let base = |name: &str, management: Option<&str>, pods: &str, services: &str| ClusterRequest {
        name: name.into(),
        management: management.map(str::to_string),
        provider: "docker".into(),
        pod_cidr: Some(pods.into()),
        service_cidr: Some(services.into()),
        ..Default::default()
    };
    let mut tree = capstan_layout::Tree::new();
    for req in [
        base("m", None, "192.168.0.0/16", "10.96.0.0/12"),
        base("w", Some("m"), "172.16.0.0/16", "10.112.0.0/16"),
    ] {
        for (p, t) in capstan_layout::scaffold::plan(&tree, &req).unwrap().files {
            tree.insert(p, t);
        }
    }
    let fleet = capstan_layout::load(&tree);
    assert!(!fleet.has_errors(), "{:?}", fleet.all_diagnostics());
    fleet
}

fn entry(name: &str) -> ClusterEntry {
    fleet().cluster(name).unwrap().clone()
}

/// A record of `phase` applied at `r1` with desired hash `h1`.
fn record(phase: Phase) -> Recorded {
    Recorded::new(
        "m".into(),
        "clusters/m/workload-clusters/w".into(),
        1,
        ManagedClusterStatus {
            phase: Some(phase),
            last_applied_revision: "r1".into(),
            last_attempted_revision: "r1".into(),
            desired_hash: "h1".into(),
            ..Default::default()
        },
    )
}

fn facts<'a>(entry: &'a ClusterEntry, prev: Option<&'a Recorded>) -> GateFacts<'a> {
    GateFacts {
        entry,
        prev,
        revision: "r2",
        fleet_suspended: false,
        management_upgrading: None,
        denied: None,
        backing_out: false,
    }
}

fn refused(g: Gate) -> Refusal {
    match g {
        Gate::Refuse(r) => r,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn the_gate_in_order() {
    let w = entry("w");
    let orphan = record(Phase::Orphaned);
    let marked_for = |dir: &str| {
        let mut r = record(Phase::Orphaned);
        r.adopt = Some(dir.into());
        r
    };
    let marked = marked_for("clusters/m/workload-clusters/w");
    let marked_elsewhere = marked_for("clusters/m/workload-clusters/x");
    let mut suspended = w.clone();
    suspended.intent.suspend = Some("maintenance".into());
    let mut tombstone = w.clone();
    tombstone.intent.delete = Some(String::new());
    tombstone.objects = None;
    let mut broken = w.clone();
    broken
        .diagnostics
        .push(Diagnostic::error(Code::InvalidValue, "bad").for_cluster("w"));
    let mut broken_tombstone = tombstone.clone();
    broken_tombstone.diagnostics = broken.diagnostics.clone();
    let mut management_tombstone = entry("m");
    management_tombstone.intent.delete = Some(String::new());
    management_tombstone.objects = None;
    let applied = record(Phase::Ready);

    let cases: Vec<(&str, GateFacts<'_>, Gate)> = vec![
        (
            "valid, new",
            facts(&w, None),
            Gate::Proceed { reclaim: false },
        ),
        (
            "valid, recorded",
            facts(&w, Some(&applied)),
            Gate::Proceed { reclaim: false },
        ),
        (
            "the fleet suspended",
            GateFacts {
                fleet_suspended: true,
                ..facts(&w, None)
            },
            Gate::Hold {
                reason: Reason::Suspended,
                message: "suspended in the repository".into(),
            },
        ),
        (
            "suspended, with a reason",
            facts(&suspended, None),
            Gate::Hold {
                reason: Reason::Suspended,
                message: "suspended in the repository: maintenance".into(),
            },
        ),
        (
            "its management cluster upgrading itself",
            GateFacts {
                management_upgrading: Some("m upgrades".into()),
                ..facts(&w, None)
            },
            Gate::Hold {
                reason: Reason::ManagementUpgrading,
                message: "m upgrades".into(),
            },
        ),
        (
            "suspended wins over the management cluster's upgrade",
            GateFacts {
                management_upgrading: Some("m upgrades".into()),
                ..facts(&suspended, None)
            },
            Gate::Hold {
                reason: Reason::Suspended,
                message: "suspended in the repository: maintenance".into(),
            },
        ),
        (
            "an orphan's directory back, marked",
            facts(&w, Some(&marked)),
            Gate::Proceed { reclaim: true },
        ),
        (
            "a tombstone",
            facts(&tombstone, Some(&applied)),
            Gate::Delete,
        ),
    ];
    for (what, f, want) in cases {
        assert_eq!(gate(&f), want, "{what}");
    }

    for (what, prev) in [
        ("unmarked", &orphan),
        ("marked for another directory", &marked_elsewhere),
    ] {
        match gate(&facts(&w, Some(prev))) {
            Gate::StayOrphaned(m) => assert!(
                m.contains("kubectl annotate managedcluster w -n capstan-system capstan.dev/adopt=clusters/m/workload-clusters/w"),
                "{what}: {m}"
            ),
            other => panic!("{what}: {other:?}"),
        }
    }
    // Orphaned comes before invalid: nothing of the directory is read as the cluster's.
    assert!(matches!(
        gate(&facts(&broken, Some(&orphan))),
        Gate::StayOrphaned(_)
    ));

    let r = refused(gate(&facts(&broken, None)));
    assert_eq!(
        (r.reason.as_str(), r.message.as_str()),
        (
            "ValidationFailed",
            "not applied: error[invalid-value]: bad (cluster w)"
        )
    );
    let r = refused(gate(&facts(&broken, Some(&applied))));
    assert!(
        r.message
            .starts_with("revision r2 not applied, r1 stays live: "),
        "{}",
        r.message
    );
    let r = refused(gate(&facts(&broken_tombstone, Some(&applied))));
    assert_eq!(
        r.reason.as_str(),
        "ValidationFailed",
        "an invalid tombstone deletes nothing"
    );
    let r = refused(gate(&facts(&management_tombstone, Some(&applied))));
    assert_eq!(r.reason.as_str(), "DeletionRefused");
    assert_eq!(
        r.message,
        "revision r2 not applied (r1 stays live): capstan does not delete the management cluster it runs on (m); `capstan back-out` moves it onto a temporary cluster and deletes it there, or remove the tombstone"
    );
    // On the temporary cluster it was moved to, the back-out's pass carries the tombstone out.
    let backing_out = GateFacts {
        backing_out: true,
        ..facts(&management_tombstone, Some(&applied))
    };
    assert_eq!(gate(&backing_out), Gate::Delete);
    // Backing out does not carry out what is invalid, nor a workload's tombstone differently.
    let broken_management = {
        let mut b = management_tombstone.clone();
        b.diagnostics = broken.diagnostics.clone();
        b
    };
    assert_eq!(
        refused(gate(&GateFacts {
            backing_out: true,
            ..facts(&broken_management, Some(&applied))
        }))
        .reason
        .as_str(),
        "ValidationFailed"
    );
    assert_eq!(
        gate(&GateFacts {
            backing_out: true,
            ..facts(&tombstone, Some(&applied))
        }),
        Gate::Delete
    );
    let r = refused(gate(&GateFacts {
        denied: Some(("Widget".into(), "example.com/v1".into(), "forbidden".into())),
        ..facts(&w, None)
    }));
    assert_eq!(r.reason.as_str(), "Forbidden");
    assert!(r.message.starts_with("revision r2 not applied (nothing applied yet): the agent may not read Widget (example.com/v1): forbidden"), "{}", r.message);
}

#[test]
fn held_not_applied_and_orphaned_records_keep_what_was_applied() {
    let prev = record(Phase::Ready);
    let h = held(Some(&prev), Reason::Suspended, "suspended");
    assert_eq!(
        (
            h.phase,
            h.last_applied_revision.as_str(),
            h.last_attempted_revision.as_str(),
            h.desired_hash.as_str()
        ),
        (Some(Phase::Suspended), "r1", "r1", "h1")
    );
    let r = refusal("r2", Some(&prev), Reason::ImmutableField, "endpoint".into());
    let n = not_applied(Some(&prev), "r2", &r);
    assert_eq!(
        (
            n.phase,
            n.last_applied_revision.as_str(),
            n.last_attempted_revision.as_str(),
            n.desired_hash.as_str()
        ),
        (Some(Phase::Failed), "r1", "r2", "h1")
    );
    assert_eq!(n.conditions[0].reason, "ImmutableField");
    assert_eq!(
        n.message,
        "revision r2 not applied (r1 stays live): endpoint"
    );
    let o = orphaned(&prev, "r2", "gone");
    assert_eq!(
        (o.phase, o.conditions[0].reason.as_str()),
        (Some(Phase::Orphaned), "Orphaned")
    );
}

fn object(kind: &str, name: &str) -> ObjectRef {
    ObjectRef {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: kind.into(),
        namespace: "ns".into(),
        name: name.into(),
        hash: String::new(),
        generation: 0,
        fields: String::new(),
    }
}

fn plan_of(entries: Vec<(Action, &str)>) -> Plan {
    Plan {
        cluster: "w".into(),
        entries: entries
            .into_iter()
            .map(|(action, name)| {
                Entry::new(
                    object("MachineDeployment", name),
                    action,
                    Some(format!("{name} why")),
                )
            })
            .collect(),
    }
}

fn ready_health() -> Assessment {
    Assessment {
        ready: true,
        reason: Reason::Available,
        message: "Cluster API reports the cluster Available".into(),
    }
}

fn waiting(stage: Stage) -> Staged {
    Staged {
        waiting: Some((stage, "1/3 machines up to date".into())),
        ..Default::default()
    }
}

/// The facts of a pass that applied one update to a recorded cluster, rolled out and Ready.
struct Case {
    prev: Option<Recorded>,
    plan: Plan,
    failure: Option<String>,
    claimed: BTreeMap<String, String>,
    health: Assessment,
    after: Staged,
    note: Option<String>,
    upgrade: Upgrade,
    not_started: Option<NotStarted>,
    gated: bool,
    paced: bool,
    stage_timeout: Option<Duration>,
    addons: Option<crate::addons::Outcome>,
}

impl Case {
    fn new() -> Case {
        Case {
            prev: Some(record(Phase::Ready)),
            plan: plan_of(vec![(Action::Update, "w-md-0")]),
            failure: None,
            claimed: BTreeMap::new(),
            health: ready_health(),
            after: Staged::default(),
            note: None,
            upgrade: Upgrade::default(),
            not_started: None,
            gated: false,
            paced: false,
            stage_timeout: None,
            addons: None,
        }
    }

    fn settle(&self, now: &str) -> ManagedClusterStatus {
        settle(&Settled {
            revision: "r2",
            fingerprint: "h2",
            prev: self.prev.as_ref(),
            plan: &self.plan,
            failure: self.failure.as_deref(),
            claimed: &self.claimed,
            health: &self.health,
            after: &self.after,
            note: self.note.as_deref(),
            upgrade: &self.upgrade,
            not_started: self.not_started.as_ref(),
            gated: self.gated,
            paced: self.paced,
            stage_timeout: self.stage_timeout,
            now: now.parse().unwrap(),
            wave: None,
            inventory: vec![object("MachineDeployment", "w-md-0")],
            addons: self.addons.as_ref(),
        })
    }
}

const NOW: &str = "2026-11-27T12:00:00Z";

/// `(phase, Ready's reason, message)`.
fn said(s: &ManagedClusterStatus) -> (Phase, String, String) {
    let ready = s
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("a Ready condition");
    (s.phase.unwrap(), ready.reason.clone(), s.message.clone())
}

#[test]
fn the_status_after_a_pass_in_order() {
    let upgraded = |c: Case| said(&c.settle(NOW));
    let cases: Vec<(&str, Case, (Phase, &str, &str))> = vec![
        (
            "rolled out and available",
            Case::new(),
            (
                Phase::Ready,
                "Available",
                "Cluster API reports the cluster Available",
            ),
        ),
        (
            "not available yet",
            Case {
                health: Assessment {
                    ready: false,
                    reason: Reason::Progressing,
                    message: "no machine yet".into(),
                },
                ..Case::new()
            },
            (
                Phase::Progressing,
                "Progressing",
                "applied; waiting for Cluster API: no machine yet",
            ),
        ),
        (
            "an apply failed",
            Case {
                failure: Some("Cluster/ns/w: invalid".into()),
                ..Case::new()
            },
            (
                Phase::Failed,
                "ApplyFailed",
                "applying revision r2: Cluster/ns/w: invalid",
            ),
        ),
        (
            "the tenancy policy refused to take an object over",
            Case {
                failure: Some("denied".into()),
                claimed: [(
                    "k".to_string(),
                    "AlreadyExists: ConfigMap/ns/w-cm exists".to_string(),
                )]
                .into(),
                ..Case::new()
            },
            (
                Phase::Failed,
                "AlreadyExists",
                "applying revision r2: AlreadyExists: ConfigMap/ns/w-cm exists",
            ),
        ),
        (
            "a fight with another field manager",
            Case {
                plan: plan_of(vec![(Action::Conflict, "w-md-0")]),
                ..Case::new()
            },
            (
                Phase::Failed,
                "Conflict",
                "MachineDeployment/ns/w-md-0: w-md-0 why",
            ),
        ),
        (
            "a stage rolling, a new cluster",
            Case {
                prev: None,
                after: waiting(Stage::ControlPlane),
                ..Case::new()
            },
            (
                Phase::Progressing,
                "Progressing",
                "applied, rolling out: control plane: 1/3 machines up to date",
            ),
        ),
        (
            "a stage rolling, another revision than the record's",
            Case {
                after: waiting(Stage::ControlPlane),
                ..Case::new()
            },
            (
                Phase::Upgrading,
                "Upgrading",
                "upgrading: control plane: 1/3 machines up to date",
            ),
        ),
        (
            "a chain step rolling",
            Case {
                after: waiting(Stage::ControlPlane),
                note: Some("chained upgrade 1.31 → 1.33, step 1.32".into()),
                ..Case::new()
            },
            (
                Phase::Upgrading,
                "Upgrading",
                "upgrading (chained upgrade 1.31 → 1.33, step 1.32): control plane: 1/3 machines up to date",
            ),
        ),
        (
            "a chain step rolled out",
            Case {
                note: Some("chained upgrade 1.31 → 1.33, step 1.32".into()),
                ..Case::new()
            },
            (
                Phase::Upgrading,
                "Upgrading",
                "upgrading (chained upgrade 1.31 → 1.33, step 1.32): this step has rolled out",
            ),
        ),
        (
            "rolled out, prunes left for the next pass",
            Case {
                plan: plan_of(vec![(Action::Held, "w-md-old")]),
                ..Case::new()
            },
            (
                Phase::Progressing,
                "Pruning",
                "rolled out at this revision; pruned by the next pass: MachineDeployment/ns/w-md-old",
            ),
        ),
        (
            "the upgrade's preparation failed",
            Case {
                upgrade: Upgrade {
                    backup: String::new(),
                    failure: Some("backup: disk full".into()),
                },
                ..Case::new()
            },
            (
                Phase::Failed,
                "UpgradeFailed",
                "upgrade not started: backup: disk full",
            ),
        ),
        (
            "held by a wave before it started",
            Case {
                paced: true,
                not_started: Some(NotStarted::Paced(Hold {
                    reason: Reason::WaitingForWave,
                    message: "wave 2/2 rest waits".into(),
                    until: None,
                })),
                ..Case::new()
            },
            (
                Phase::Progressing,
                "WaitingForWave",
                "upgrade to revision r2 not started: wave 2/2 rest waits",
            ),
        ),
        (
            "held by the health gate before it started",
            Case {
                gated: true,
                not_started: Some(NotStarted::Unhealthy("not healthy".into())),
                ..Case::new()
            },
            (
                Phase::Progressing,
                "WaitingForHealth",
                "upgrade to revision r2 not started: not healthy",
            ),
        ),
    ];
    for (what, case, (phase, reason, message)) in cases {
        assert_eq!(
            upgraded(case),
            (phase, reason.to_string(), message.to_string()),
            "{what}"
        );
    }
}

#[test]
fn revisions_and_hashes_after_a_pass() {
    // Applied: this revision, its hash.
    let s = Case::new().settle(NOW);
    assert_eq!(
        (
            s.last_applied_revision.as_str(),
            s.last_attempted_revision.as_str(),
            s.desired_hash.as_str()
        ),
        ("r2", "r2", "h2")
    );
    // Failed: the last applied revision and hash stay.
    let s = Case {
        failure: Some("x".into()),
        ..Case::new()
    }
    .settle(NOW);
    assert_eq!(
        (
            s.last_applied_revision.as_str(),
            s.last_attempted_revision.as_str(),
            s.desired_hash.as_str()
        ),
        ("r1", "r2", "h1")
    );
    // Untouched by the revision (nothing to change, the same desired hash): the record's.
    let mut prev = record(Phase::Ready);
    prev.status.desired_hash = "h2".into();
    let s = Case {
        prev: Some(prev),
        plan: plan_of(vec![(Action::Unchanged, "w-md-0")]),
        ..Case::new()
    }
    .settle(NOW);
    assert_eq!(
        (
            s.last_applied_revision.as_str(),
            s.last_attempted_revision.as_str()
        ),
        ("r1", "r1")
    );
    // Held by the gate or the waves: the revision has not started, the hash stays.
    for case in [
        Case {
            gated: true,
            ..Case::new()
        },
        Case {
            paced: true,
            ..Case::new()
        },
    ] {
        assert_eq!(case.settle(NOW).desired_hash, "h1");
    }
}

#[test]
fn the_stage_clock() {
    // A new stage starts its clock now; the same stage as recorded keeps the recorded start.
    let s = Case {
        after: waiting(Stage::ControlPlane),
        ..Case::new()
    }
    .settle(NOW);
    assert_eq!(
        (s.stage.as_deref(), s.stage_since.as_deref()),
        (Some("ControlPlane"), Some(NOW))
    );
    let mut prev = record(Phase::Upgrading);
    prev.status.stage = Some("ControlPlane".into());
    prev.status.stage_since = Some("2026-11-27T10:00:00Z".into());
    prev.status.stage_progress = Some("1/3 machines up to date".into());
    let rolling = |timeout: Option<Duration>, backup: &str| Case {
        prev: Some(prev.clone()),
        after: waiting(Stage::ControlPlane),
        stage_timeout: timeout,
        upgrade: Upgrade {
            backup: backup.into(),
            failure: None,
        },
        ..Case::new()
    };
    let s = rolling(None, "").settle(NOW);
    assert_eq!(s.stage_since.as_deref(), Some("2026-11-27T10:00:00Z"));
    // Two hours on the stage: within a 3 h timeout, past a 1 h one.
    assert_eq!(
        said(&rolling(Some(Duration::from_secs(3 * 3600)), "").settle(NOW)).0,
        Phase::Upgrading
    );
    let (phase, reason, message) = said(&rolling(Some(Duration::from_secs(3600)), "").settle(NOW));
    assert_eq!((phase, reason.as_str()), (Phase::Failed, "StageTimedOut"));
    assert_eq!(
        message,
        "the control plane stage has made no progress within 1h: 1/3 machines up to date"
    );
    let (_, _, message) =
        said(&rolling(Some(Duration::from_secs(3600)), "/backups/m-1").settle(NOW));
    assert!(
        message.ends_with(
            "; its workload clusters stay paused; the backup taken before is in /backups/m-1"
        ),
        "{message}"
    );
    // A cluster held before its upgrade started waits for no stage of its own: no clock.
    let held = Case {
        paced: true,
        not_started: Some(NotStarted::Paced(Hold {
            reason: Reason::WaitingForWave,
            message: "waits".into(),
            until: None,
        })),
        stage_timeout: Some(Duration::from_secs(1)),
        ..rolling(None, "")
    }
    .settle(NOW);
    assert_eq!(
        (
            held.phase,
            held.stage.as_deref(),
            held.stage_since.as_deref()
        ),
        (Some(Phase::Progressing), None, None)
    );
    assert_eq!(held.held_until, None, "a wave gives no time");
    // Held by a maintenance window: the status says when the next one opens.
    let windowed = Case {
        paced: true,
        not_started: Some(NotStarted::Paced(Hold {
            reason: Reason::OutsideMaintenanceWindow,
            message: "outside the maintenance windows".into(),
            until: Some(1_795_831_200),
        })),
        ..rolling(None, "")
    }
    .settle(NOW);
    assert_eq!(
        (windowed.phase, windowed.held_until.as_deref()),
        (Some(Phase::Progressing), Some("2026-11-28T02:00:00Z"))
    );
}

#[test]
fn the_stage_clock_restarts_on_progress() {
    // Recorded two hours ago on the first of several sequential worker groups, one machine of
    // six up to date; the timeout is one hour.
    let mut prev = record(Phase::Upgrading);
    prev.status.stage = Some("Workers".into());
    prev.status.stage_since = Some("2026-11-27T10:00:00Z".into());
    prev.status.stage_progress = Some("MachineDeployment/dev-md-0: 1/6 machines up to date".into());
    let now_on = |prev: &Recorded, progress: &str| {
        Case {
            prev: Some(prev.clone()),
            after: Staged {
                waiting: Some((Stage::Workers(None), progress.into())),
                ..Default::default()
            },
            stage_timeout: Some(Duration::from_secs(3600)),
            ..Case::new()
        }
        .settle(NOW)
    };
    // | what the stage reports now                          | clock      | phase     |
    for (progress, since, phase) in [
        // stuck: the same report for two hours
        (
            "MachineDeployment/dev-md-0: 1/6 machines up to date",
            "2026-11-27T10:00:00Z",
            Phase::Failed,
        ),
        // one more machine up to date: progress
        (
            "MachineDeployment/dev-md-0: 2/6 machines up to date",
            NOW,
            Phase::Upgrading,
        ),
        // the next worker group of a sequential rollout: progress
        (
            "MachineDeployment/dev-md-1: 0/2 machines up to date",
            NOW,
            Phase::Upgrading,
        ),
    ] {
        let s = now_on(&prev, progress);
        assert_eq!(
            (
                s.stage_since.as_deref(),
                s.stage_progress.as_deref(),
                s.phase
            ),
            (Some(since), Some(progress), Some(phase)),
            "{progress}"
        );
    }
    // A record written before the progress was kept: the clock restarts once.
    prev.status.stage_progress = None;
    let s = now_on(&prev, "MachineDeployment/dev-md-0: 1/6 machines up to date");
    assert_eq!(
        (s.stage_since.as_deref(), s.phase),
        (Some(NOW), Some(Phase::Upgrading))
    );
    // A failed or rolled-out stage keeps no progress.
    let done = Case {
        prev: Some(prev.clone()),
        ..Case::new()
    }
    .settle(NOW);
    assert_eq!((done.stage_progress, done.stage_since), (None, None));
}

#[test]
fn a_status_that_applies_nothing_keeps_the_self_upgrade() {
    // A management cluster mid-way through upgrading itself: its backup recorded (its
    // workload clusters paused and held), waiting for its control plane.
    let mut rec = record(Phase::Upgrading);
    rec.status.backup = Some("/backups/m-1".into());
    rec.status.stage = Some("ControlPlane".into());
    rec.status.stage_since = Some("2026-11-27T10:00:00Z".into());
    rec.status.stage_progress = Some("KubeadmControlPlane/m: 1/3 machines up to date".into());
    rec.status.wave = Some("1/1 all".into());
    let refusal = refusal("r2", Some(&rec), Reason::ImmutableField, "no".into());
    // | the path that writes a status without applying | status                          |
    for (path, st) in [
        (
            "suspended",
            held(Some(&rec), Reason::Suspended, "suspended"),
        ),
        ("refused", not_applied(Some(&rec), "r2", &refusal)),
        ("orphaned", orphaned(&rec, "r2", "gone")),
    ] {
        assert_eq!(
            (
                st.backup.as_deref(),
                st.stage.as_deref(),
                st.stage_since.as_deref(),
                st.stage_progress.as_deref(),
                st.wave.as_deref(),
            ),
            (
                Some("/backups/m-1"),
                Some("ControlPlane"),
                Some("2026-11-27T10:00:00Z"),
                Some("KubeadmControlPlane/m: 1/3 machines up to date"),
                Some("1/1 all"),
            ),
            "{path}"
        );
    }
    // Nothing recorded: nothing to keep.
    let fresh = held(None, Reason::Suspended, "suspended");
    assert_eq!((fresh.backup, fresh.stage), (None, None));
}

#[test]
fn a_new_backup_is_recorded_before_the_upgrade_is_applied() {
    let base = record(Phase::Ready);
    let rec = Recorded::new(
        base.management,
        base.directory,
        base.generation,
        ManagedClusterStatus {
            inventory: vec![object("KubeadmControlPlane", "m")],
            ..base.status
        },
    );
    let taken = |backup: &str| Upgrade {
        backup: backup.into(),
        failure: None,
    };
    // The record as it was, with the backup: nothing else of it changes, its inventory kept.
    let st = backed_up(Some(&rec), &taken("/backups/m-2")).expect("a new backup is recorded");
    assert_eq!(st.backup.as_deref(), Some("/backups/m-2"));
    assert_eq!(
        ManagedClusterStatus {
            backup: None,
            inventory: Vec::new(),
            ..st.clone()
        },
        rec.status
    );
    assert_eq!(st.inventory, rec.inventory());
    // | the pass                                | writes first |
    let mut recorded = rec.clone();
    recorded.status.backup = Some("/backups/m-2".into());
    for (what, prev, upgrade, early) in [
        ("took no backup", Some(&rec), taken(""), false),
        (
            "recorded already",
            Some(&recorded),
            taken("/backups/m-2"),
            false,
        ),
        ("a newer one", Some(&recorded), taken("/backups/m-3"), true),
        ("no record", None, taken("/backups/m-2"), false),
    ] {
        assert_eq!(backed_up(prev, &upgrade).is_some(), early, "{what}");
    }
}

#[test]
fn deleting_and_health() {
    let plan = plan_of(vec![
        (Action::Deleting, "a"),
        (Action::Prune, "b"),
        (Action::Unchanged, "c"),
    ]);
    let terminating: BTreeSet<String> = [object("MachineDeployment", "b").key()].into();
    let names: Vec<&str> = deleting(&plan, &terminating)
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(names, ["a", "b"]);
    let (phase, message, conditions) = health(&ready_health());
    assert_eq!(
        (phase, message.as_str()),
        (Phase::Ready, "Cluster API reports the cluster Available")
    );
    assert_eq!(
        conditions
            .iter()
            .map(|c| c.type_.as_str())
            .collect::<Vec<_>>(),
        ["Applied", "Ready"]
    );
}

#[test]
fn the_stage_history_records_each_stage_of_an_upgrade_with_its_start_and_end() {
    use crate::status::StageRecord;
    let rec = |phase: Phase, stages: Vec<StageRecord>| {
        let mut r = record(phase);
        r.status.stages = stages;
        r
    };
    let st = |name: &str, started: &str, finished: Option<&str>| StageRecord {
        name: name.into(),
        started: started.into(),
        finished: finished.map(str::to_string),
    };
    // A Ready cluster starts upgrading: a new history, the old one dropped.
    let old = rec(Phase::Ready, vec![st("Workers", "t0", Some("t1"))]);
    let h = stage_history(Some(&old), Some("ControlPlane"), "t2");
    assert_eq!(h, vec![st("ControlPlane", "t2", None)]);
    // The same stage: unchanged. The next stage: the one before ends.
    let up = rec(Phase::Upgrading, h.clone());
    assert_eq!(stage_history(Some(&up), Some("ControlPlane"), "t3"), h);
    let h = stage_history(Some(&up), Some("Workers"), "t4");
    assert_eq!(
        h,
        vec![
            st("ControlPlane", "t2", Some("t4")),
            st("Workers", "t4", None)
        ]
    );
    // No stage any more: the last ends; a pass after that changes nothing.
    let up = rec(Phase::Upgrading, h);
    let h = stage_history(Some(&up), None, "t5");
    assert_eq!(h[1], st("Workers", "t4", Some("t5")));
    let done = rec(Phase::Ready, h.clone());
    assert_eq!(stage_history(Some(&done), None, "t6"), h);
    // A stage again while still upgrading (not Ready between): appended, not a new history.
    let mid = rec(Phase::Upgrading, h.clone());
    assert_eq!(stage_history(Some(&mid), Some("CNI"), "t7").len(), 3);
    // Bounded.
    let many = rec(
        Phase::Upgrading,
        (0..crate::status::STAGES_KEPT)
            .map(|i| st(&format!("S{i}"), "t", Some("t")))
            .collect(),
    );
    let h = stage_history(Some(&many), Some("Workers"), "t8");
    assert_eq!(h.len(), crate::status::STAGES_KEPT);
    assert_eq!(h.last().unwrap().name, "Workers");
    assert_eq!(h[0].name, "S1");
}

#[test]
fn a_cluster_is_ready_only_when_its_add_ons_are() {
    use crate::addons::{Health, Outcome, Reach, verdict};
    use crate::status::AddonsStatus;
    let record = AddonsStatus {
        hash: "a1".into(),
        revision: "r2".into(),
        inventory: vec![object("ConfigMap", "c")],
    };
    let outcome = |reach: Reach, failure: Option<&str>, health: Vec<(String, Health)>| Outcome {
        verdict: verdict(&reach, failure, &health),
        status: Some(record.clone()),
        applied: 0,
        pruned: 0,
    };
    let addons_ready = |s: &ManagedClusterStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == "AddonsReady")
            .map(|c| (c.status.clone(), c.reason.clone()))
    };
    let current = vec![("ConfigMap/w/c".to_string(), Health::Current)];
    let cases = [
        (
            outcome(Reach::Ready, None, current.clone()),
            Phase::Ready,
            "Available",
            "True",
        ),
        (
            outcome(Reach::NoKubeconfig, None, vec![]),
            Phase::Progressing,
            "WaitingForCluster",
            "False",
        ),
        (
            outcome(
                Reach::Ready,
                None,
                vec![("Deployment/w/d".into(), Health::InProgress("0/1".into()))],
            ),
            Phase::Progressing,
            "AddonsProgressing",
            "False",
        ),
        (
            outcome(Reach::Ready, Some("ConfigMap/w/c: denied"), current.clone()),
            Phase::Failed,
            "AddonsFailed",
            "False",
        ),
    ];
    for (o, phase, reason, status) in cases {
        let mut c = Case::new();
        c.addons = Some(o);
        let st = c.settle(NOW);
        let (p, ready_reason, message) = said(&st);
        assert_eq!(p, phase, "{message}");
        if phase != Phase::Ready {
            assert_eq!(ready_reason, reason);
            assert!(message.starts_with("add-ons: "), "{message}");
        }
        assert_eq!(
            addons_ready(&st),
            Some((status.to_string(), reason.to_string()))
        );
        assert_eq!(
            st.addons.as_ref(),
            Some(&record),
            "the add-on record is kept"
        );
    }
    // A cluster not Ready for its own reasons says so; the add-ons' condition is beside it.
    let mut c = Case::new();
    c.after = waiting(Stage::ControlPlane);
    c.addons = Some(outcome(Reach::NoKubeconfig, None, vec![]));
    let st = c.settle(NOW);
    assert_eq!(said(&st).1, "Upgrading");
    assert_eq!(addons_ready(&st).unwrap().1, "WaitingForCluster");
    // No add-on step this pass: the record's add-ons are kept.
    let mut c = Case::new();
    let mut prev = c.prev.take().unwrap().status.clone();
    prev.addons = Some(record.clone());
    c.prev = Some(Recorded::new(
        "m".into(),
        "clusters/m/workload-clusters/w".into(),
        1,
        prev,
    ));
    assert_eq!(c.settle(NOW).addons, Some(record.clone()));
}
