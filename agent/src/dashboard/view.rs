//! What the dashboard's pages show, as data: built from the watched objects by pure functions
//! (tested without a server), rendered by the templates. Nothing here reads a Secret: the
//! objects it is given are ManagedClusters and Cluster API objects, and of those only names,
//! counts, versions, phases and conditions are kept.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::status::{ManagedCluster, Phase};

/// One cluster's row on the fleet page.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    /// The cluster.
    pub name: String,
    /// Its management cluster (itself for a management cluster).
    pub management: String,
    /// Its directory in the repository.
    pub directory: String,
    /// Phase, as written (`Ready`, `Upgrading`, …); empty before the first status.
    pub phase: String,
    /// A word for the phase's kind, for the badge's class and its text (never colour alone):
    /// `ok`, `busy`, `held`, `bad`, `none`.
    pub tone: &'static str,
    /// The revision live now.
    pub revision: String,
    /// Its first 12 characters.
    pub short_revision: String,
    /// A link to the commit, when the repository is on a known Git host.
    pub commit_url: Option<String>,
    /// The upgrade stage it waits for.
    pub stage: String,
    /// Its wave (`2/3 rest`).
    pub wave: String,
    /// The Kubernetes version of its Cluster API Cluster's topology or control plane.
    pub version: String,
    /// When its status object was created (RFC 3339).
    pub created: String,
    /// The status message.
    pub message: String,
    /// What holds its changes before they start (`wave`, `maintenance window`, …: [`Wait::by`]);
    /// empty when nothing does (a stage rolling is progress, not a hold).
    pub held_by: String,
}

/// The fleet page's filters (query parameters; empty: any).
#[derive(Debug, Clone, Default, serde::Deserialize, Serialize, PartialEq)]
#[serde(default)]
pub struct Filter {
    /// Exact phase.
    pub phase: String,
    /// Exact management cluster.
    pub management: String,
    /// Wave (its leading `n/m` or its name).
    pub wave: String,
    /// A part of the name.
    pub name: String,
}

impl Filter {
    /// Whether `row` passes.
    pub fn keeps(&self, row: &Row) -> bool {
        (self.phase.is_empty() || row.phase == self.phase)
            && (self.management.is_empty() || row.management == self.management)
            && (self.wave.is_empty()
                || row.wave == self.wave
                || row.wave.split(' ').any(|w| w == self.wave))
            && (self.name.is_empty() || row.name.contains(self.name.trim()))
    }
}

/// How a phase reads at a glance.
pub fn tone(phase: Option<&Phase>) -> &'static str {
    match phase {
        Some(Phase::Ready) => "ok",
        Some(Phase::Applying | Phase::Progressing | Phase::Upgrading | Phase::Deleting) => "busy",
        Some(Phase::Suspended | Phase::Orphaned) => "held",
        Some(Phase::Failed) => "bad",
        _ => "none",
    }
}

/// The phase as the status writes it.
pub fn phase_text(phase: Option<&Phase>) -> String {
    phase
        .and_then(|p| serde_json::to_value(p).ok())
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// A commit's page on the Git host of `repo` (GitHub, GitLab, Bitbucket; https or scp-like
/// ssh URLs), when it is one.
pub fn commit_url(repo: &str, revision: &str) -> Option<String> {
    if revision.len() < 7 || !revision.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let rest = repo
        .strip_prefix("https://")
        .or_else(|| repo.strip_prefix("ssh://git@"))
        .or_else(|| repo.strip_prefix("git@"))?;
    let rest = rest.replacen(':', "/", usize::from(repo.starts_with("git@")));
    let (host, path) = rest.split_once('/')?;
    let path = path.trim_end_matches('/').trim_end_matches(".git");
    if path.is_empty() || path.contains("..") {
        return None;
    }
    let page = match host {
        "github.com" => "commit",
        "gitlab.com" => "-/commit",
        "bitbucket.org" => "commits",
        _ => return None,
    };
    Some(format!("https://{host}/{path}/{page}/{revision}"))
}

/// A row for every status object, sorted by management cluster (the management cluster first in
/// its group), then name.
pub fn rows(
    statuses: &[ManagedCluster],
    versions: &BTreeMap<String, String>,
    repo: Option<&str>,
) -> Vec<Row> {
    let mut rows: Vec<Row> = statuses
        .iter()
        .map(|mc| {
            let name = mc.metadata.name.clone().unwrap_or_default();
            let st = mc.status.clone().unwrap_or_default();
            let revision = st.last_applied_revision.clone();
            let held_by = wait(&st)
                .map(|w| w.by)
                .filter(|by| *by != "stage")
                .unwrap_or_default();
            Row {
                commit_url: repo.and_then(|r| commit_url(r, &revision)),
                short_revision: revision.chars().take(12).collect(),
                revision,
                management: mc.spec.management.clone(),
                directory: mc.spec.directory.clone(),
                phase: phase_text(st.phase.as_ref()),
                tone: match (st.phase.as_ref(), held_by) {
                    (Some(Phase::Failed), _) | (_, "") => tone(st.phase.as_ref()),
                    _ => "held",
                },
                held_by: held_by.to_string(),
                stage: st.stage.clone().unwrap_or_default(),
                wave: st.wave.clone().unwrap_or_default(),
                version: versions.get(&name).cloned().unwrap_or_default(),
                created: mc
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string())
                    .unwrap_or_default(),
                message: st.message.clone(),
                name,
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        (&a.management, a.name != a.management, &a.name).cmp(&(
            &b.management,
            b.name != b.management,
            &b.name,
        ))
    });
    rows
}

/// The fleet page: rows grouped by management cluster, with what the filters can choose from.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Fleet {
    /// `(management cluster, its rows)`, in order.
    pub groups: Vec<(String, Vec<Row>)>,
    /// Rows shown / rows in all.
    pub shown: usize,
    /// Rows in all.
    pub total: usize,
    /// Count of every phase over all rows.
    pub phases: BTreeMap<String, usize>,
    /// Every management cluster.
    pub managements: Vec<String>,
    /// Every wave.
    pub waves: Vec<String>,
    /// The filter applied.
    pub filter: Filter,
}

/// The most rows one fleet page lists (3,000 clusters filter fine; a page of 3,000 rows is too
/// long to read, and to send on every change).
pub const PAGE_ROWS: usize = 500;

/// The fleet page from every row and a filter.
pub fn fleet(all: Vec<Row>, filter: Filter) -> Fleet {
    let total = all.len();
    let mut phases = BTreeMap::new();
    let mut managements = Vec::new();
    let mut waves = Vec::new();
    for r in &all {
        *phases.entry(r.phase.clone()).or_insert(0) += 1;
        if !managements.contains(&r.management) {
            managements.push(r.management.clone());
        }
        if !r.wave.is_empty() && !waves.contains(&r.wave) {
            waves.push(r.wave.clone());
        }
    }
    waves.sort();
    let mut groups: Vec<(String, Vec<Row>)> = Vec::new();
    let mut shown = 0;
    for r in all.into_iter().filter(|r| filter.keeps(r)) {
        shown += 1;
        if shown > PAGE_ROWS {
            continue;
        }
        match groups.last_mut() {
            Some((m, rows)) if *m == r.management => rows.push(r),
            _ => groups.push((r.management.clone(), vec![r])),
        }
    }
    Fleet {
        groups,
        shown,
        total,
        phases,
        managements,
        waves,
        filter,
    }
}

/// One wave on the waves page.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Wave {
    /// As the status writes it (`2/3 rest`; `-` for clusters in none).
    pub name: String,
    /// Its clusters.
    pub rows: Vec<Row>,
    /// Count by tone (`ok`, `busy`, `held`, `bad`, `none`).
    pub tones: BTreeMap<&'static str, usize>,
}

/// Clusters by wave, in wave order, clusters without one last.
pub fn waves(all: &[Row]) -> Vec<Wave> {
    let mut by: BTreeMap<(bool, String), Vec<Row>> = BTreeMap::new();
    for r in all.iter().filter(|r| r.name != r.management) {
        by.entry((r.wave.is_empty(), r.wave.clone()))
            .or_default()
            .push(r.clone());
    }
    by.into_iter()
        .map(|((none, name), rows)| {
            let mut tones = BTreeMap::new();
            for r in &rows {
                *tones.entry(r.tone).or_insert(0) += 1;
            }
            Wave {
                name: if none { "-".into() } else { name },
                rows,
                tones,
            }
        })
        .collect()
}

/// A management cluster's upgrade schedule on the waves page, from the fleet config of the
/// revision the agent follows.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Schedule {
    /// The management cluster.
    pub management: String,
    /// Each wave and what selects its clusters, in order.
    pub waves: Vec<(String, String)>,
    /// Whether a wave waits for the ones before it to be Ready (else: to have started).
    pub health_gate: bool,
    /// Workload clusters unavailable at once, at most (empty: no limit).
    pub max_unavailable: String,
    /// The maintenance windows, in words (`Sat Sun 02:00 UTC for 4h`); none: any time.
    pub windows: Vec<String>,
    /// Whether upgrades may start now.
    pub open: bool,
    /// When the next window opens (RFC 3339), when none is open now.
    pub next_opening: Option<String>,
}

/// A window in words.
fn window_text(w: &capstan_layout::config::Window) -> String {
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    let days = if w.days.len() == 7 {
        "every day".to_string()
    } else {
        w.days
            .iter()
            .filter_map(|d| DAYS.get(usize::from(*d)))
            .copied()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let (h, m) = (w.minutes / 60, w.minutes % 60);
    let length = match (h, m) {
        (0, m) => format!("{m}m"),
        (h, 0) => format!("{h}h"),
        (h, m) => format!("{h}h{m}m"),
    };
    format!(
        "{days} {:02}:{:02} UTC for {length}",
        w.start / 60,
        w.start % 60
    )
}

/// The schedules of every management cluster whose fleet config has a rollout, at `now` (unix
/// seconds).
pub fn schedules(fleet: &capstan_layout::Fleet, now: i64) -> Vec<Schedule> {
    fleet
        .configs
        .iter()
        .filter_map(|(management, c)| Some((management, c.rollout.as_ref()?)))
        .map(|(management, r)| {
            let window = crate::plan::waves::window_at(&r.windows, now);
            Schedule {
                management: management.clone(),
                waves: r
                    .waves
                    .iter()
                    .map(|w| {
                        let mut by: Vec<String> = w.clusters.clone();
                        by.extend(w.match_labels.iter().map(|(k, v)| format!("{k}={v}")));
                        let by = if by.is_empty() {
                            "every other cluster".to_string()
                        } else {
                            by.join(", ")
                        };
                        (w.name.clone(), by)
                    })
                    .chain(
                        // The clusters no wave selects go last, as a wave of their own.
                        r.waves
                            .last()
                            .filter(|w| !w.clusters.is_empty() || !w.match_labels.is_empty())
                            .map(|_| ("rest".to_string(), "every other cluster".to_string())),
                    )
                    .collect(),
                health_gate: r.health_gate,
                max_unavailable: r
                    .max_unavailable
                    .as_ref()
                    .map(|m| m.to_string())
                    .unwrap_or_default(),
                windows: r.windows.iter().map(window_text).collect(),
                open: r.windows.is_empty() || window.is_ok(),
                next_opening: (!r.windows.is_empty())
                    .then(|| window.err().map(crate::plan::waves::rfc3339))
                    .flatten(),
            }
        })
        .collect()
}

/// A condition as the cluster page lists it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Cond {
    /// Type.
    pub kind: String,
    /// `True`, `False`, `Unknown`.
    pub status: String,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
    /// Last transition (RFC 3339).
    pub since: String,
}

/// A control plane or a worker group on the cluster page.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Group {
    /// `KubeadmControlPlane`, `EtcdadmCluster`, `MachineDeployment`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// The version it asks for.
    pub version: String,
    /// Desired machines.
    pub desired: i64,
    /// Up to date.
    pub up_to_date: i64,
    /// Available.
    pub available: i64,
    /// Its machines: `(name, version, phase)`.
    pub machines: Vec<(String, String, String)>,
}

/// The cluster page.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClusterPage {
    /// Its row (phase, revision, stage, wave, message).
    pub row: Row,
    /// The status's conditions.
    pub conditions: Vec<Cond>,
    /// The control plane and worker groups.
    pub groups: Vec<Group>,
    /// When the current stage started or last made progress, and what it reported then.
    pub stage_since: String,
    /// What the stage reported.
    pub stage_progress: String,
    /// The revision last tried (differs from the live one when it failed or waits).
    pub attempted: String,
    /// The last error with its `file:line`, when the cluster failed.
    pub error: Option<String>,
    /// Why changes wait, when they do (a wave, a window, maxUnavailable, the health gate, a
    /// stage, a suspension, the management cluster's own upgrade).
    pub waits: Option<Wait>,
    /// The inventory: `(kind, namespace/name)`.
    pub inventory: Vec<(String, String)>,
    /// A management cluster upgrading itself: its backup.
    pub backup: String,
    /// The latest upgrade's stages, each with its start and end.
    pub stages: Vec<crate::status::StageRecord>,
}

/// Why a cluster's changes wait, as data: what holds them, the condition's reason, until when
/// (a maintenance window's opening, or since when a stage has rolled), and the details.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Wait {
    /// What holds it: `wave`, `maintenance window`, `maxUnavailable`, `health gate`, `stage`,
    /// `suspended`, `management upgrade`.
    pub by: &'static str,
    /// The wave, or the stage, it waits on (empty when neither).
    pub on: String,
    /// The Ready condition's reason (`WaitingForWave`, …), or `Upgrading` for a stage.
    pub reason: String,
    /// When it may go on at the earliest (a window's opening; RFC 3339).
    pub until: Option<String>,
    /// Since when (a stage's start or last progress; RFC 3339).
    pub since: Option<String>,
    /// The status's own words: the hold's message, or what the stage reported.
    pub detail: String,
}

/// Why the cluster's changes wait, if they do: read from its status alone (the Ready
/// condition's reason says which hold; a stage is one while it upgrades).
pub fn wait(st: &crate::status::ManagedClusterStatus) -> Option<Wait> {
    let ready = st.conditions.iter().find(|c| c.type_ == "Ready");
    let reason = ready.map(|c| c.reason.as_str()).unwrap_or_default();
    let held = |by, on: String| Wait {
        by,
        on,
        reason: reason.to_string(),
        until: None,
        since: None,
        detail: st.message.clone(),
    };
    let wave = st.wave.clone().unwrap_or_default();
    Some(match reason {
        "WaitingForWave" | "WaveStopped" => held("wave", wave),
        "OutsideMaintenanceWindow" => Wait {
            until: st.held_until.clone(),
            ..held("maintenance window", String::new())
        },
        "MaxUnavailable" => held("maxUnavailable", String::new()),
        "WaitingForHealth" => held("health gate", String::new()),
        "WaitingForHardware" => held("spare hardware", String::new()),
        "ManagementUpgrading" => held("management upgrade", String::new()),
        _ if st.phase == Some(Phase::Suspended) => held("suspended", String::new()),
        _ if st.phase == Some(Phase::Upgrading) && st.stage.is_some() => Wait {
            by: "stage",
            on: st.stage.clone().unwrap_or_default(),
            reason: "Upgrading".into(),
            until: None,
            since: st.stage_since.clone(),
            detail: st
                .stage_progress
                .clone()
                .unwrap_or_else(|| st.message.clone()),
        },
        _ => return None,
    })
}

fn text(v: &Value, p: &str) -> String {
    match v.pointer(p) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

fn int(v: &Value, p: &str) -> i64 {
    v.pointer(p).and_then(Value::as_i64).unwrap_or(0)
}

/// The Kubernetes version of a Cluster API object: a control plane's or MachineDeployment's.
pub fn version_of(v: &Value) -> String {
    let s = text(v, "/spec/version");
    if s.is_empty() {
        text(v, "/spec/template/spec/version")
    } else {
        s
    }
}

/// A control plane or MachineDeployment with its Machines (the Machines' owner labels say whose
/// they are).
pub fn group(obj: &Value, machines: &[Value]) -> Group {
    let kind = text(obj, "/kind");
    let name = text(obj, "/metadata/name");
    let label = if kind == "MachineDeployment" {
        "cluster.x-k8s.io/deployment-name"
    } else if kind == "EtcdadmCluster" {
        "etcd-cluster.cluster.x-k8s.io/etcd-cluster-name"
    } else {
        "cluster.x-k8s.io/control-plane-name"
    };
    let key = format!("/metadata/labels/{}", label.replace('/', "~1"));
    let mut ms: Vec<(String, String, String)> = machines
        .iter()
        .filter(|m| text(m, &key) == name)
        .map(|m| {
            (
                text(m, "/metadata/name"),
                text(m, "/spec/version"),
                text(m, "/status/phase"),
            )
        })
        .collect();
    ms.sort();
    let desired = obj
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(ms.len() as i64);
    Group {
        version: version_of(obj),
        desired,
        up_to_date: int(obj, "/status/upToDateReplicas"),
        available: int(obj, "/status/availableReplicas"),
        machines: ms,
        kind,
        name,
    }
}

/// The cluster page from its status object, its row and the Cluster API objects of the cluster
/// (control planes and MachineDeployments; Machines).
pub fn cluster(mc: &ManagedCluster, row: Row, owners: &[Value], machines: &[Value]) -> ClusterPage {
    let st = mc.status.clone().unwrap_or_default();
    let conditions = st
        .conditions
        .iter()
        .map(|c| Cond {
            kind: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
            since: c.last_transition_time.0.to_string(),
        })
        .collect();
    let mut groups: Vec<Group> = owners.iter().map(|o| group(o, machines)).collect();
    groups.sort_by(|a, b| {
        (a.kind != "KubeadmControlPlane", &a.name).cmp(&(b.kind != "KubeadmControlPlane", &b.name))
    });
    let inventory = {
        let status: crate::status::Recorded = crate::status::Recorded::from_object(mc);
        status
            .inventory()
            .into_iter()
            .map(|r| {
                let at = if r.namespace.is_empty() {
                    r.name.clone()
                } else {
                    format!("{}/{}", r.namespace, r.name)
                };
                (r.kind, at)
            })
            .collect()
    };
    let failed = st.phase == Some(Phase::Failed);
    let waits = wait(&st);
    ClusterPage {
        conditions,
        groups,
        stage_since: st.stage_since.clone().unwrap_or_default(),
        stage_progress: st.stage_progress.clone().unwrap_or_default(),
        attempted: st.last_attempted_revision.clone(),
        error: failed.then(|| st.message.clone()),
        waits,
        inventory,
        backup: st.backup.clone().unwrap_or_default(),
        stages: st.stages.clone(),
        row,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{ManagedClusterSpec, ManagedClusterStatus};

    fn mc(name: &str, mgmt: &str, phase: Phase, wave: Option<&str>) -> ManagedCluster {
        let mut m = ManagedCluster::new(
            name,
            ManagedClusterSpec {
                management: mgmt.into(),
                directory: format!("clusters/{mgmt}/{name}"),
            },
        );
        m.status = Some(ManagedClusterStatus {
            phase: Some(phase),
            wave: wave.map(str::to_string),
            last_applied_revision: "0123456789abcdef0123".into(),
            message: format!("{name} says hi"),
            ..Default::default()
        });
        m
    }

    #[test]
    fn rows_group_by_management_with_the_management_first_and_filter() {
        let all = [
            mc("w-b", "m", Phase::Failed, Some("2/2 rest")),
            mc("m", "m", Phase::Ready, None),
            mc("w-a", "m", Phase::Upgrading, Some("1/2 canary")),
            mc("a", "a", Phase::Ready, None),
        ];
        let versions = BTreeMap::from([("w-a".to_string(), "v1.33.1".to_string())]);
        let rows = rows(&all, &versions, Some("git@github.com:acme/fleet.git"));
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["a", "m", "w-a", "w-b"]);
        assert_eq!(rows[2].version, "v1.33.1");
        assert_eq!(rows[3].tone, "bad");
        assert_eq!(
            rows[1].commit_url.as_deref(),
            Some("https://github.com/acme/fleet/commit/0123456789abcdef0123")
        );
        let f = fleet(rows.clone(), Filter::default());
        assert_eq!((f.shown, f.total, f.groups.len()), (4, 4, 2));
        assert_eq!(f.phases["Ready"], 2);
        let only = |filter: Filter| -> Vec<String> {
            fleet(rows.clone(), filter)
                .groups
                .into_iter()
                .flat_map(|(_, rs)| rs.into_iter().map(|r| r.name))
                .collect()
        };
        let by = |phase: &str, management: &str, wave: &str, name: &str| Filter {
            phase: phase.into(),
            management: management.into(),
            wave: wave.into(),
            name: name.into(),
        };
        assert_eq!(only(by("Failed", "", "", "")), ["w-b"]);
        assert_eq!(only(by("", "a", "", "")), ["a"]);
        assert_eq!(only(by("", "", "canary", "")), ["w-a"]);
        assert_eq!(only(by("", "", "2/2", "")), ["w-b"]);
        assert_eq!(only(by("", "m", "", "w-")), ["w-a", "w-b"]);
        let waves = waves(&rows);
        let names: Vec<&str> = waves.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["1/2 canary", "2/2 rest"]);
    }

    #[test]
    fn a_schedule_says_its_windows_and_when_the_next_opens() {
        let mut tree = capstan_layout::Tree::new();
        let m = capstan_layout::scaffold::ClusterRequest {
            name: "m".into(),
            provider: "docker".into(),
            pod_cidr: Some("192.168.0.0/16".into()),
            service_cidr: Some("10.96.0.0/12".into()),
            ..Default::default()
        };
        for (p, t) in capstan_layout::scaffold::plan(&tree, &m).unwrap().files {
            tree.insert(p, t);
        }
        tree.insert(
            "clusters/m/fleet.yaml",
            "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  rollout:\n    maxUnavailable: 1\n    waves:\n      - name: canary\n        matchLabels: {tier: canary}\n      - name: rest\n    maintenanceWindows:\n      - {days: [Sat, Sun], start: \"02:00\", duration: 4h}\n",
        );
        let fleet = capstan_layout::load(&tree);
        assert!(fleet.configs.contains_key("m"), "{:?}", fleet.diagnostics);
        // 2026-11-28 is a Saturday: open at 03:00 UTC, closed at 07:00 (next: Sunday 02:00).
        let sat = |h: i64| 1_795_824_000 + h * 3600;
        let open = schedules(&fleet, sat(3));
        assert_eq!(open.len(), 1);
        let s = &open[0];
        assert_eq!(s.windows, ["Sat Sun 02:00 UTC for 4h"]);
        assert!(s.open && s.next_opening.is_none(), "{s:?}");
        assert_eq!(s.waves[0], ("canary".into(), "tier=canary".into()));
        assert_eq!(s.waves[1].1, "every other cluster");
        assert_eq!(s.max_unavailable, "1");
        let closed = &schedules(&fleet, sat(7))[0];
        assert!(!closed.open);
        assert_eq!(closed.next_opening.as_deref(), Some("2026-11-29T02:00:00Z"));
    }

    #[test]
    fn commit_links_only_for_known_hosts() {
        let rev = "0123456789abcdef";
        assert_eq!(
            commit_url("https://gitlab.com/g/p.git", rev).as_deref(),
            Some("https://gitlab.com/g/p/-/commit/0123456789abcdef")
        );
        assert_eq!(commit_url("https://git.example.com/p.git", rev), None);
        assert_eq!(commit_url("https://github.com/a/b", "main"), None);
        assert_eq!(commit_url("file:///tmp/repo", rev), None);
    }

    #[test]
    fn a_group_counts_its_own_machines() {
        let md = serde_json::json!({"kind": "MachineDeployment", "metadata": {"name": "w-md-0"},
            "spec": {"replicas": 3, "template": {"spec": {"version": "v1.34.0"}}},
            "status": {"upToDateReplicas": 1, "availableReplicas": 3}});
        let m = |name: &str, md: &str, v: &str| {
            serde_json::json!({"metadata": {"name": name,
            "labels": {"cluster.x-k8s.io/deployment-name": md}}, "spec": {"version": v}, "status": {"phase": "Running"}})
        };
        let machines = [
            m("a", "w-md-0", "v1.34.0"),
            m("b", "w-md-0", "v1.33.1"),
            m("c", "w-md-1", "v1.33.1"),
        ];
        let g = group(&md, &machines);
        assert_eq!((g.desired, g.up_to_date, g.available), (3, 1, 3));
        assert_eq!(g.version, "v1.34.0");
        assert_eq!(g.machines.len(), 2);
        assert_eq!(
            g.machines[1],
            ("b".into(), "v1.33.1".into(), "Running".into())
        );
    }

    /// Every hold the status can express reads as what holds it, its reason, and (for a
    /// window) until when; a stage rolling is a wait but not a hold; nothing else waits.
    #[test]
    fn why_changes_wait_is_read_from_the_status() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
        let with = |phase: Phase, reason: &str| {
            let mut st = mc("w", "m", phase, Some("2/2 rest")).status.unwrap();
            st.conditions = vec![Condition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: reason.into(),
                message: st.message.clone(),
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                observed_generation: None,
            }];
            st
        };
        let by = |st: &ManagedClusterStatus| wait(st).map(|w| (w.by, w.on, w.reason));
        let s = |x: &str| x.to_string();
        assert_eq!(
            by(&with(Phase::Progressing, "WaitingForWave")),
            Some(("wave", s("2/2 rest"), s("WaitingForWave")))
        );
        let mut windowed = with(Phase::Progressing, "OutsideMaintenanceWindow");
        windowed.held_until = Some("2026-11-28T02:00:00Z".into());
        let w = wait(&windowed).unwrap();
        assert_eq!(
            (w.by, w.until.as_deref(), w.detail.as_str()),
            (
                "maintenance window",
                Some("2026-11-28T02:00:00Z"),
                "w says hi"
            )
        );
        assert_eq!(
            by(&with(Phase::Progressing, "MaxUnavailable")).unwrap().0,
            "maxUnavailable"
        );
        assert_eq!(
            by(&with(Phase::Progressing, "WaitingForHealth")).unwrap().0,
            "health gate"
        );
        assert_eq!(
            by(&with(Phase::Suspended, "ManagementUpgrading"))
                .unwrap()
                .0,
            "management upgrade"
        );
        assert_eq!(
            by(&with(Phase::Suspended, "Suspended")).unwrap().0,
            "suspended"
        );
        let mut upgrading = with(Phase::Upgrading, "RollingOut");
        upgrading.stage = Some("Workers".into());
        upgrading.stage_since = Some("2026-11-28T01:00:00Z".into());
        upgrading.stage_progress = Some("MachineDeployment/w-md-0: 1/3 machines up to date".into());
        let w = wait(&upgrading).unwrap();
        assert_eq!(
            (w.by, w.on.as_str(), w.since.as_deref(), w.detail.as_str()),
            (
                "stage",
                "Workers",
                Some("2026-11-28T01:00:00Z"),
                "MachineDeployment/w-md-0: 1/3 machines up to date"
            )
        );
        assert_eq!(by(&with(Phase::Ready, "Available")), None);
        assert_eq!(by(&with(Phase::Failed, "ApplyFailed")), None);
        // On the fleet page: a hold makes the row's tone `held`, a stage does not.
        let rows_of = |st: ManagedClusterStatus| {
            let mut m = mc("w", "m", Phase::Ready, None);
            m.status = Some(st);
            rows(&[m], &BTreeMap::new(), None).remove(0)
        };
        let r = rows_of(with(Phase::Progressing, "WaitingForWave"));
        assert_eq!((r.tone, r.held_by.as_str()), ("held", "wave"));
        let r = rows_of(upgrading);
        assert_eq!((r.tone, r.held_by.as_str()), ("busy", ""));
    }
}
