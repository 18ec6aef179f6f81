//! What a rehearsal saw, as data: each cluster's timeline and verdict, built by pure functions
//! from what was observed (the agent's passes, the Machines' watch events, the ManagedCluster's
//! recorded stages), and written out as text, markdown or JSON.
//!
//! ```text
//! passes (phase, stage, hold) ─┐
//! Machines (watch events) ─────┼─▶ ClusterRehearsal { stages, holds, machines, versions, verdict }
//! status.stages (from the API) ┘                      └─▶ exit code: 0 all passed, 1 any failed
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

/// What the change does to the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Change {
    /// New in the head revision.
    Create,
    /// Changed (an upgrade, a scale, a template change).
    Update,
    /// A tombstone: deleted.
    Delete,
}

/// One upgrade stage as the status recorded it, in seconds from the head revision's apply.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageSpan {
    /// `Etcd`, `ControlPlane`, `CNI`, `Workers`.
    pub name: String,
    /// When it started.
    pub start: f64,
    /// When it ended (None: it did not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<f64>,
}

/// A hold the fleet's waves, windows or gates put on the cluster, first seen at `at`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HoldSeen {
    /// Seconds from the head revision's apply.
    pub at: f64,
    /// The reason (`WaitingForWave`, `OutsideMaintenanceWindow`, `MaxUnavailable`, ...).
    pub reason: String,
    /// For humans.
    pub message: String,
}

/// The end of a cluster's rehearsal.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase", tag = "result")]
pub enum Verdict {
    /// Ready at the new revision with its stages in order (or, for a tombstone, gone).
    Passed,
    /// A stage failed, did not finish within the bound, or the stages went out of order.
    Failed {
        /// The stage it failed at or waited for (None: before any stage, e.g. an apply).
        #[serde(skip_serializing_if = "Option::is_none")]
        stage: Option<String>,
        /// Why: capstan's message (a webhook's refusal, a stage timeout, the bound).
        message: String,
        /// What the controllers said: `Kind/name: Condition=False: message` of the cluster's
        /// objects whose conditions are not true.
        conditions: Vec<String>,
    },
}

/// One cluster's rehearsal.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRehearsal {
    /// The cluster.
    pub name: String,
    /// What the change does.
    pub change: Change,
    /// What the in-memory backend could not carry over, `file:line: what`.
    pub not_carried: Vec<String>,
    /// How long the base revision took to come up (None: the cluster is new).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_seconds: Option<f64>,
    /// How long the head revision took, to its end.
    pub seconds: f64,
    /// The upgrade's stages.
    pub stages: Vec<StageSpan>,
    /// Holds applied by waves, windows and gates.
    pub holds: Vec<HoldSeen>,
    /// Machines created during the head revision.
    pub machines_created: usize,
    /// Machines deleted during the head revision.
    pub machines_deleted: usize,
    /// The most machines unavailable at once (wanted but not running, or going away).
    pub max_unavailable: usize,
    /// Kubernetes versions of the machines at the end, by role or group.
    pub versions: BTreeMap<String, BTreeSet<String>>,
    /// Every version each group's machines ran, in the order they first appeared: a chained
    /// upgrade's steps (`control-plane`: v1.31 → v1.32 → v1.33).
    pub steps: BTreeMap<String, Vec<String>>,
    /// The end.
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// One Machine as a watch event shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineSeen {
    /// Its name.
    pub name: String,
    /// `control-plane`, `etcd`, or its MachineDeployment's name.
    pub group: String,
    /// `spec.version`.
    pub version: String,
    /// Running (its phase) and not being deleted.
    pub available: bool,
}

/// Machines counted over the head revision's watch events.
#[derive(Debug, Clone, Default)]
pub struct MachineTally {
    before: BTreeSet<String>,
    seen: BTreeMap<String, MachineSeen>,
    created: BTreeSet<String>,
    deleted: BTreeSet<String>,
    /// Machines wanted at the end (the head revision's counts).
    wanted: usize,
    max_unavailable: usize,
    steps: BTreeMap<String, Vec<String>>,
}

impl MachineTally {
    /// Starts from the machines live when the head revision is applied; `wanted` is how many
    /// the head revision runs (0 for a deletion: every machine going counts as unavailable
    /// only while it goes).
    pub fn new(live: impl IntoIterator<Item = MachineSeen>, wanted: usize) -> MachineTally {
        let mut t = MachineTally {
            wanted,
            ..Default::default()
        };
        for m in live {
            t.step(&m);
            t.before.insert(m.name.clone());
            t.seen.insert(m.name.clone(), m);
        }
        t.count();
        t
    }

    fn step(&mut self, m: &MachineSeen) {
        let steps = self.steps.entry(m.group.clone()).or_default();
        if !m.version.is_empty() && !steps.contains(&m.version) {
            steps.push(m.version.clone());
        }
    }

    /// A Machine added or modified.
    pub fn applied(&mut self, m: MachineSeen) {
        self.step(&m);
        if !self.before.contains(&m.name) {
            self.created.insert(m.name.clone());
        }
        self.seen.insert(m.name.clone(), m);
        self.count();
    }

    /// A Machine gone.
    pub fn deleted(&mut self, name: &str) {
        if self.seen.remove(name).is_some() || self.before.contains(name) {
            self.deleted.insert(name.to_string());
        }
        self.count();
    }

    fn count(&mut self) {
        let available = self.seen.values().filter(|m| m.available).count();
        // A deletion wants none: what is going counts until it is gone.
        let unavailable = if self.wanted == 0 {
            self.seen.values().filter(|m| !m.available).count()
        } else {
            self.wanted.saturating_sub(available)
        };
        self.max_unavailable = self.max_unavailable.max(unavailable);
    }

    /// Machines created, deleted, and the most unavailable at once, after the first
    /// observation (the baseline a new cluster starts from is not counted as unavailable).
    pub fn totals(&self) -> (usize, usize, usize) {
        (self.created.len(), self.deleted.len(), self.max_unavailable)
    }

    /// Every version each group ran, in the order first seen.
    pub fn steps(&self) -> BTreeMap<String, Vec<String>> {
        self.steps.clone()
    }

    /// The versions of the machines there now, by group.
    pub fn versions(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for m in self.seen.values() {
            out.entry(m.group.clone())
                .or_default()
                .insert(m.version.clone());
        }
        out
    }
}

/// Seconds from `t0` to an RFC 3339 timestamp (None when it does not parse).
pub fn seconds_from(t0: k8s_openapi::jiff::Timestamp, at: &str) -> Option<f64> {
    let t: k8s_openapi::jiff::Timestamp = at.parse().ok()?;
    Some((t.as_millisecond() - t0.as_millisecond()) as f64 / 1000.0)
}

/// The recorded stages `(name, started, finished)` of the status, those that started at or
/// after `t0` (an earlier upgrade's are not this rehearsal's), in seconds from `t0`.
pub fn stage_spans<'a>(
    t0: k8s_openapi::jiff::Timestamp,
    records: impl IntoIterator<Item = (&'a str, &'a str, Option<&'a str>)>,
) -> Vec<StageSpan> {
    records
        .into_iter()
        .filter_map(|(name, started, finished)| {
            let start = seconds_from(t0, started)?;
            // Timestamps are whole seconds: a stage recorded in the second the apply began.
            (start > -1.0).then(|| StageSpan {
                name: name.to_string(),
                start: start.max(0.0),
                end: finished
                    .and_then(|f| seconds_from(t0, f))
                    .map(|e| e.max(0.0)),
            })
        })
        .collect()
}

/// Why the stages are not in order: one not ended, or one begun before the one before it
/// ended. None when each ended before the next began.
pub fn out_of_order(stages: &[StageSpan]) -> Option<String> {
    for (i, s) in stages.iter().enumerate() {
        let Some(end) = s.end else {
            return Some(format!("stage {} did not end", s.name));
        };
        if let Some(next) = stages.get(i + 1)
            && next.start < end
        {
            return Some(format!(
                "stage {} began at {:.0}s, before {} ended at {end:.0}s",
                next.name, next.start, s.name
            ));
        }
    }
    None
}

/// The verdict of a cluster's head revision: `phase` and `message` of its last pass (None:
/// gone, a completed deletion), whether the passes settled within the bound, the stage the
/// status waited for, and the recorded stages.
pub fn verdict(
    change: Change,
    last: Option<(&str, &str)>,
    settled: bool,
    waiting: Option<&str>,
    stages: &[StageSpan],
    conditions: Vec<String>,
) -> Verdict {
    let failed = |stage: Option<&str>, message: String| Verdict::Failed {
        stage: stage.map(str::to_string),
        message,
        conditions: conditions.clone(),
    };
    match (change, last) {
        (Change::Delete, None) => Verdict::Passed,
        (Change::Delete, Some((_, m))) if m == crate::reconcile::DELETED => Verdict::Passed,
        (Change::Delete, Some((phase, message))) => failed(
            waiting,
            format!("the deletion did not complete ({phase}: {message})"),
        ),
        (_, None) => failed(waiting, "the cluster's status is gone".into()),
        (_, Some(("Ready", _))) if settled => match out_of_order(stages) {
            None => Verdict::Passed,
            Some(why) => failed(
                None,
                format!("Ready, but the stages went out of order: {why}"),
            ),
        },
        (_, Some(("Failed", message))) => failed(waiting, message.to_string()),
        (_, Some((phase, message))) => failed(
            waiting,
            format!("did not reach Ready within the bound ({phase}: {message})"),
        ),
    }
}

/// The exit code of a rehearsal: 0 when every cluster passed, 1 otherwise.
pub fn exit_code(clusters: &[ClusterRehearsal]) -> u8 {
    u8::from(
        clusters
            .iter()
            .any(|c| matches!(c.verdict, Verdict::Failed { .. })),
    )
}

fn secs(s: f64) -> String {
    if s >= 60.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!("{s:.0}s")
    }
}

fn stage_line(s: &StageSpan) -> String {
    match s.end {
        Some(e) => format!(
            "{} {} → {} ({})",
            s.name,
            secs(s.start),
            secs(e),
            secs(e - s.start)
        ),
        None => format!("{} {} → (not ended)", s.name, secs(s.start)),
    }
}

fn versions_line(v: &BTreeMap<String, BTreeSet<String>>) -> String {
    if v.is_empty() {
        return "no machines".into();
    }
    v.iter()
        .map(|(g, vs)| format!("{g} {}", vs.iter().cloned().collect::<Vec<_>>().join("+")))
        .collect::<Vec<_>>()
        .join(", ")
}

impl ClusterRehearsal {
    fn headline(&self) -> String {
        let what = match self.change {
            Change::Create => "created",
            Change::Update => "changed",
            Change::Delete => "deleted",
        };
        match &self.verdict {
            Verdict::Passed => format!("{}: PASSED ({what} in {})", self.name, secs(self.seconds)),
            Verdict::Failed { stage, .. } => format!(
                "{}: FAILED{} after {}",
                self.name,
                stage
                    .as_ref()
                    .map(|s| format!(" at stage {s}"))
                    .unwrap_or_default(),
                secs(self.seconds)
            ),
        }
    }

    /// The lines under the headline.
    fn details(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(b) = self.base_seconds {
            out.push(format!("base revision up in {}", secs(b)));
        }
        for s in &self.stages {
            out.push(format!("stage {}", stage_line(s)));
        }
        for h in &self.holds {
            out.push(format!(
                "held at {} ({}): {}",
                secs(h.at),
                h.reason,
                h.message
            ));
        }
        out.push(format!(
            "machines: {} created, {} deleted, at most {} unavailable at once",
            self.machines_created, self.machines_deleted, self.max_unavailable
        ));
        out.push(format!(
            "versions at the end: {}",
            versions_line(&self.versions)
        ));
        for (group, steps) in self.steps.iter().filter(|(_, s)| s.len() > 1) {
            out.push(format!("{group} went {}", steps.join(" → ")));
        }
        if let Verdict::Failed {
            message,
            conditions,
            ..
        } = &self.verdict
        {
            out.push(format!("why: {message}"));
            for c in conditions {
                out.push(format!("controllers: {c}"));
            }
        }
        for n in &self.not_carried {
            out.push(format!("not rehearsed: {n}"));
        }
        out
    }
}

/// The rehearsal as text.
pub fn text(title: &str, clusters: &[ClusterRehearsal]) -> String {
    let mut out = format!("{title}\n");
    if clusters.is_empty() {
        out.push_str("no cluster changes: nothing to rehearse\n");
    }
    for c in clusters {
        let _ = writeln!(out, "\n{}", c.headline());
        for d in c.details() {
            let _ = writeln!(out, "  {d}");
        }
    }
    out
}

/// The rehearsal as GitHub-flavoured markdown (a pull request comment's section).
pub fn markdown(title: &str, clusters: &[ClusterRehearsal]) -> String {
    let mut out = format!("### {title}\n\n");
    if clusters.is_empty() {
        out.push_str("No cluster changes: nothing to rehearse.\n");
    }
    for c in clusters {
        let mark = match c.verdict {
            Verdict::Passed => "✅",
            Verdict::Failed { .. } => "❌",
        };
        let _ = writeln!(out, "**{mark} {}**\n", c.headline());
        if !c.stages.is_empty() {
            out.push_str("| stage | start | end | took |\n|---|---|---|---|\n");
            for s in &c.stages {
                let (end, took) = match s.end {
                    Some(e) => (secs(e), secs(e - s.start)),
                    None => ("—".into(), "—".into()),
                };
                let _ = writeln!(out, "| {} | {} | {end} | {took} |", s.name, secs(s.start));
            }
            out.push('\n');
        }
        for d in c.details().into_iter().filter(|d| !d.starts_with("stage ")) {
            let _ = writeln!(out, "- {}", d.replace('|', "\\|"));
        }
        out.push('\n');
    }
    out
}

/// The rehearsal as JSON.
pub fn json(title: &str, clusters: &[ClusterRehearsal]) -> serde_json::Value {
    serde_json::json!({
        "title": title,
        "passed": exit_code(clusters) == 0,
        "clusters": clusters,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, group: &str, version: &str, available: bool) -> MachineSeen {
        MachineSeen {
            name: name.into(),
            group: group.into(),
            version: version.into(),
            available,
        }
    }

    #[test]
    fn a_surge_rollout_counts_its_machines_and_never_counts_a_surge_as_unavailable() {
        let mut t = MachineTally::new(
            [m("a", "md-0", "v1.32", true), m("b", "md-0", "v1.32", true)],
            2,
        );
        // maxSurge 1: a new machine, ready, then an old one goes.
        t.applied(m("c", "md-0", "v1.33", false));
        t.applied(m("c", "md-0", "v1.33", true));
        t.applied(m("a", "md-0", "v1.32", false)); // deleting
        t.deleted("a");
        t.applied(m("d", "md-0", "v1.33", false));
        t.applied(m("d", "md-0", "v1.33", true));
        t.deleted("b");
        assert_eq!(t.totals(), (2, 2, 0));
        assert_eq!(t.steps()["md-0"], ["v1.32", "v1.33"]);
        assert_eq!(
            t.versions(),
            BTreeMap::from([("md-0".into(), BTreeSet::from(["v1.33".into()]))])
        );
    }

    #[test]
    fn a_machine_taken_down_before_its_replacement_is_unavailable() {
        let mut t = MachineTally::new([m("a", "md-0", "v1", true), m("b", "md-0", "v1", true)], 2);
        t.applied(m("a", "md-0", "v1", false));
        t.applied(m("b", "md-0", "v1", false));
        t.deleted("a");
        assert_eq!(t.totals(), (0, 1, 2));
    }

    #[test]
    fn a_new_cluster_counts_every_machine_created() {
        let mut t = MachineTally::new([], 3);
        for n in ["a", "b", "c"] {
            t.applied(m(n, "control-plane", "v1.33", false));
            t.applied(m(n, "control-plane", "v1.33", true));
        }
        let (created, deleted, _) = t.totals();
        assert_eq!((created, deleted), (3, 0));
    }

    fn span(name: &str, start: f64, end: Option<f64>) -> StageSpan {
        StageSpan {
            name: name.into(),
            start,
            end,
        }
    }

    #[test]
    fn stages_come_from_the_status_relative_to_the_apply_and_earlier_ones_are_left_out() {
        let t0: k8s_openapi::jiff::Timestamp = "2026-11-28T10:00:00Z".parse().unwrap();
        let spans = stage_spans(
            t0,
            [
                (
                    "Workers",
                    "2026-11-28T09:00:00Z",
                    Some("2026-11-28T09:01:00Z"),
                ),
                (
                    "ControlPlane",
                    "2026-11-28T10:00:00Z",
                    Some("2026-11-28T10:00:40Z"),
                ),
                ("Workers", "2026-11-28T10:00:40Z", None),
            ],
        );
        assert_eq!(
            spans,
            [
                span("ControlPlane", 0.0, Some(40.0)),
                span("Workers", 40.0, None)
            ]
        );
    }

    #[test]
    fn stages_are_in_order_when_each_ends_before_the_next_begins() {
        assert_eq!(
            out_of_order(&[
                span("Etcd", 0.0, Some(10.0)),
                span("ControlPlane", 10.0, Some(30.0))
            ]),
            None
        );
        assert!(
            out_of_order(&[
                span("ControlPlane", 0.0, Some(30.0)),
                span("Workers", 20.0, Some(40.0))
            ])
            .unwrap()
            .contains("before ControlPlane ended")
        );
        assert!(
            out_of_order(&[span("ControlPlane", 0.0, None)])
                .unwrap()
                .contains("did not end")
        );
    }

    #[test]
    fn verdicts() {
        let ok = [
            span("ControlPlane", 0.0, Some(5.0)),
            span("Workers", 5.0, Some(9.0)),
        ];
        let v = |change, last, settled, stages: &[StageSpan]| {
            verdict(
                change,
                last,
                settled,
                Some("Workers"),
                stages,
                vec!["x".into()],
            )
        };
        assert_eq!(
            v(Change::Update, Some(("Ready", "")), true, &ok),
            Verdict::Passed
        );
        assert_eq!(
            v(Change::Create, Some(("Ready", "")), true, &[]),
            Verdict::Passed
        );
        assert_eq!(v(Change::Delete, None, true, &[]), Verdict::Passed);
        assert_eq!(
            v(
                Change::Delete,
                Some(("Deleting", crate::reconcile::DELETED)),
                true,
                &[]
            ),
            Verdict::Passed
        );
        let Verdict::Failed {
            stage,
            message,
            conditions,
        } = v(
            Change::Update,
            Some(("Upgrading", "2/3 up to date")),
            false,
            &ok,
        )
        else {
            panic!()
        };
        assert_eq!(stage.as_deref(), Some("Workers"));
        assert!(message.contains("within the bound"), "{message}");
        assert_eq!(conditions, ["x"]);
        let Verdict::Failed { message, .. } = v(
            Change::Update,
            Some((
                "Failed",
                "applying MachineDeployment/x: denied by the webhook",
            )),
            true,
            &ok,
        ) else {
            panic!()
        };
        assert!(message.contains("denied by the webhook"));
        // Ready but out of order is not a pass.
        let bad = [
            span("ControlPlane", 0.0, Some(5.0)),
            span("Workers", 1.0, Some(9.0)),
        ];
        assert!(matches!(
            v(Change::Update, Some(("Ready", "")), true, &bad),
            Verdict::Failed { .. }
        ));
        assert!(matches!(
            v(Change::Delete, Some(("Deleting", "waiting")), false, &[]),
            Verdict::Failed { .. }
        ));
    }

    fn rehearsal(verdict: Verdict) -> ClusterRehearsal {
        ClusterRehearsal {
            name: "prod-1".into(),
            change: Change::Update,
            not_carried: vec![
                "clusters/m/workload-clusters/prod-1/cluster.yaml:12: the proxy".into(),
            ],
            base_seconds: Some(61.0),
            seconds: 95.0,
            stages: vec![
                span("ControlPlane", 0.0, Some(52.0)),
                span("Workers", 52.0, Some(95.0)),
            ],
            holds: vec![HoldSeen {
                at: 0.0,
                reason: "WaitingForWave".into(),
                message: "wave 2/2 waits for wave 1".into(),
            }],
            machines_created: 5,
            machines_deleted: 5,
            max_unavailable: 0,
            versions: BTreeMap::from([(
                "control-plane".into(),
                BTreeSet::from(["v1.33.1".into()]),
            )]),
            steps: BTreeMap::from([(
                "control-plane".into(),
                vec!["v1.31.9".into(), "v1.32.8".into(), "v1.33.1".into()],
            )]),
            verdict,
        }
    }

    #[test]
    fn the_outputs_say_the_same() {
        let passed = rehearsal(Verdict::Passed);
        let failed = rehearsal(Verdict::Failed {
            stage: Some("Workers".into()),
            message: "did not reach Ready".into(),
            conditions: vec!["Machine/x: Ready=False: waiting | for infra".into()],
        });
        assert_eq!(exit_code(std::slice::from_ref(&passed)), 0);
        assert_eq!(exit_code(&[passed.clone(), failed.clone()]), 1);
        let t = text(
            "capstan rehearse main → pr",
            &[passed.clone(), failed.clone()],
        );
        assert!(t.contains("prod-1: PASSED (changed in 1m35s)"), "{t}");
        assert!(t.contains("stage ControlPlane 0s → 52s (52s)"), "{t}");
        assert!(
            t.contains("held at 0s (WaitingForWave): wave 2/2 waits for wave 1"),
            "{t}"
        );
        assert!(
            t.contains("prod-1: FAILED at stage Workers after 1m35s"),
            "{t}"
        );
        assert!(t.contains("controllers: Machine/x"), "{t}");
        assert!(
            t.contains("control-plane went v1.31.9 → v1.32.8 → v1.33.1"),
            "{t}"
        );
        assert!(
            t.contains("not rehearsed: clusters/m/workload-clusters/prod-1/cluster.yaml:12"),
            "{t}"
        );
        let md = markdown("r", std::slice::from_ref(&failed));
        assert!(md.contains("| Workers | 52s | 1m35s | 43s |"), "{md}");
        assert!(md.contains("waiting \\| for infra"), "{md}");
        let j = json("r", &[passed, failed]);
        assert_eq!(j["passed"], false);
        assert_eq!(j["clusters"][0]["result"], "passed");
        assert_eq!(j["clusters"][1]["result"], "failed");
        assert_eq!(j["clusters"][1]["stage"], "Workers");
        assert_eq!(j["clusters"][0]["stages"][1]["end"], 95.0);
        assert_eq!(j["clusters"][0]["maxUnavailable"], 0);
    }
}
