//! The fleet config: `clusters/<mgmt>/fleet.yaml`, settings of a management cluster's whole fleet.
//!
//! ```yaml
//! apiVersion: capstan.dev/v1alpha1
//! kind: FleetConfig
//! metadata: {name: mgmt}          # optional
//! spec:
//!   release:                      # which EKS Anywhere release data the fleet renders with
//!     manifest: https://anywhere-assets.eks.amazonaws.com/releases/eks-a/manifest.yaml
//!     sha256: 3f5c…               # required for https; checked for repository files when given
//!     pins:                       # optional: sha256 of the documents the manifest refers to
//!       https://anywhere-assets.eks.amazonaws.com/releases/bundles/104/manifest.yaml: 9a0b…
//!   rollout:                      # how upgrades go out ([`Rollout`]); every field optional
//!     rolloutWait: complete       # complete | firstNode: when a control plane counts as done
//!     workerRollout: parallel     # parallel | sequential: worker groups at once or one by one
//!     maxUnavailable: 1           # or "25%": workload clusters upgrading at once
//!     waves:                      # in order; a cluster is in the first wave that selects it
//!     - name: canary
//!       clusters: [dev-1]         # by name, and/or
//!       matchLabels: {tier: canary}   # by the labels of its EKS-A Cluster
//!     - name: rest                # no selector: every other cluster (only as the last wave)
//!     healthGate: true            # a wave starts once the waves before it are Ready at the revision
//!     maintenanceWindows:         # upgrades start only inside one (UTC)
//!     - {days: [Sat, Sun], start: "02:00", duration: 4h}
//!   eksaVersions: [v0.25.2]       # releases workload clusters may name besides the management
//!                                 # cluster's own (each is an EKSARelease on it: an admin's call)
//!   notifications:                # phase changes to Slack, Teams, webhooks ([`notifications`])
//!     secretRef: capstan-system/capstan-notifications
//!     providers: [{name: chat, type: slack}]
//!     alerts: [{provider: chat, events: [Failed, Ready]}]
//! ```
//!
//! Why a file of its own: a cluster spec is EKS Anywhere's format, and fleet-wide settings
//! (release data, upgrade pacing, waves and maintenance windows) belong to no
//! single cluster. It sits in the management cluster's directory, is read with the same rules as
//! the cluster specs (every unknown field is an error with file:line:col, stable codes), and a
//! broken fleet config keeps the whole fleet of that management cluster from being applied, so
//! nothing renders with the wrong release data.
//!
//! Adding a section: a field of [`RawSpec`] (the raw, as-written form with `deny_unknown_fields`),
//! a field of [`FleetConfig`] (the validated form), and a `check_<section>` function called from
//! [`parse`]. Parsing is pure: documents the release section names are fetched by the agent and
//! checked against the pins in [`crate::fleet`].

pub mod notifications;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use capstan_templates::diag::{Code, Diagnostic};
use capstan_templates::release::{Location, SemVer};
use capstan_templates::spec::{SourceDoc, deserialize};
use capstan_templates::yaml;
use serde::Deserialize;
use serde_json::Value;

/// The file name of the fleet config in a management cluster's directory.
pub const FILE: &str = "fleet.yaml";
/// Its apiVersion.
pub const API_VERSION: &str = "capstan.dev/v1alpha1";
/// Its kind.
pub const KIND: &str = "FleetConfig";

/// `metadata` of the fleet config.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMeta {
    /// A name, for humans.
    #[serde(default)]
    pub name: Option<String>,
}

/// `spec` of the fleet config, as written. One optional field per section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawSpec {
    /// Where the fleet's EKS Anywhere release data comes from.
    #[serde(default)]
    pub release: Option<RawRelease>,
    /// How upgrades go out across the fleet.
    #[serde(default)]
    pub rollout: Option<RawRollout>,
    /// Where phase changes are sent.
    #[serde(default)]
    pub notifications: Option<notifications::RawNotifications>,
    /// Which workload clusters take each shared add-on set (`addons/<set>/`).
    #[serde(default)]
    pub addons: Vec<RawAddonSet>,
    /// The EKS Anywhere releases workload clusters may name besides the management cluster's.
    #[serde(default)]
    pub eksa_versions: Vec<String>,
    /// Who the fleet's SOPS files are encrypted for.
    #[serde(default)]
    pub sops: Option<RawSops>,
}

/// `spec.sops`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawSops {
    /// The age recipients (`age1…`) every SOPS file of the management cluster's tree must be
    /// encrypted for: the public half of the identity the agent holds, and any the admins keep.
    #[serde(default)]
    pub age_recipients: Vec<String>,
}

/// `spec.addons[]`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawAddonSet {
    /// The set's directory name under `addons/`.
    pub name: String,
    /// Workload clusters by the labels of their EKS-A Cluster (all must match).
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

/// A shared add-on set's selection ([`crate::fleet::addons::selects`]): a set not named goes to
/// every workload cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddonSet {
    /// The set's directory name under the management cluster's `addons/`.
    pub name: String,
    /// The labels a workload cluster's EKS-A Cluster must all carry.
    pub match_labels: BTreeMap<String, String>,
}

/// `spec.rollout`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawRollout {
    /// `complete` or `firstNode`.
    #[serde(default)]
    pub rollout_wait: Option<String>,
    /// `parallel` or `sequential`.
    #[serde(default)]
    pub worker_rollout: Option<String>,
    /// A count or a percentage (`"25%"`).
    #[serde(default)]
    pub max_unavailable: Option<Value>,
    /// Waves, in order.
    #[serde(default)]
    pub waves: Vec<RawWave>,
    /// Whether a wave waits for the waves before it to be Ready.
    #[serde(default)]
    pub health_gate: Option<bool>,
    /// When upgrades may start.
    #[serde(default)]
    pub maintenance_windows: Vec<RawWindow>,
}

/// `spec.rollout.waves[]`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawWave {
    /// The wave's name.
    pub name: String,
    /// Workload clusters by name.
    #[serde(default)]
    pub clusters: Vec<String>,
    /// Workload clusters by the labels of their EKS-A Cluster.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

/// `spec.rollout.maintenanceWindows[]`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawWindow {
    /// `Mon` … `Sun`; none: every day.
    #[serde(default)]
    pub days: Vec<String>,
    /// `HH:MM`, UTC.
    pub start: String,
    /// `4h`, `90m`, `1h30m`.
    pub duration: String,
}

/// `spec.release`, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawRelease {
    /// An https:// URL or a path from the repository root.
    pub manifest: String,
    /// sha256 (hex) of the manifest.
    #[serde(default)]
    pub sha256: Option<String>,
    /// sha256 (hex) of documents the manifest refers to, by URL.
    #[serde(default)]
    pub pins: BTreeMap<String, String>,
}

/// A validated fleet config.
#[derive(Debug, Clone, Default)]
pub struct FleetConfig {
    /// The file, relative to the repository root.
    pub file: PathBuf,
    /// The release data of the fleet; None: capstan's embedded sample data.
    pub release: Option<ReleaseSource>,
    /// How upgrades go out; None: no `rollout` section (every cluster at once, the agent's
    /// stage settings).
    pub rollout: Option<Rollout>,
    /// Where phase changes are sent; None: nowhere.
    pub notifications: Option<notifications::Notifications>,
    /// Which workload clusters take which shared add-on set; a set not named: all of them.
    pub addons: Vec<AddonSet>,
    /// The EKS Anywhere releases (`spec.eksaVersions`) workload clusters may name (eksaVersion,
    /// bundlesRef) besides the management cluster's own: each needs an EKSARelease object on the
    /// management cluster, a fleet-wide object, so which ones exist is an admin's decision.
    pub eksa_versions: BTreeSet<SemVer>,
    /// The age recipients every SOPS file must be encrypted for (`spec.sops.ageRecipients`);
    /// empty: any (the agent's identity decides at apply time).
    pub sops_recipients: Vec<String>,
}

/// When a control plane's rollout counts as done and the next stage may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RolloutWait {
    /// Every control-plane machine up to date and available, the old ones gone.
    #[default]
    Complete,
    /// The first new control-plane machine up and the control plane back at full availability
    /// (workload clusters only: a management cluster always waits for the whole rollout).
    FirstNode,
}

/// How worker groups roll.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkerRollout {
    /// Every group at once (as EKS Anywhere and Cluster API do by themselves).
    #[default]
    Parallel,
    /// One group at a time, by name.
    Sequential,
}

/// How many workload clusters may be upgrading at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxUnavailable {
    /// This many.
    Count(u32),
    /// This percentage of the fleet's workload clusters, rounded down, at least one.
    Percent(u32),
}

impl MaxUnavailable {
    /// The number of clusters for a fleet of `total` workload clusters (at least one, so an
    /// upgrade always progresses).
    pub fn of(self, total: usize) -> usize {
        match self {
            MaxUnavailable::Count(n) => n as usize,
            MaxUnavailable::Percent(p) => total * p as usize / 100,
        }
        .max(1)
    }
}

impl std::fmt::Display for MaxUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MaxUnavailable::Count(n) => write!(f, "{n}"),
            MaxUnavailable::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A wave of workload clusters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wave {
    /// Its name.
    pub name: String,
    /// Clusters by name.
    pub clusters: Vec<String>,
    /// Clusters whose EKS-A Cluster carries every one of these labels.
    pub match_labels: BTreeMap<String, String>,
}

impl Wave {
    /// Whether a cluster is selected: by name, or by every label; a wave with neither selects
    /// every cluster.
    pub fn selects(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        (self.clusters.is_empty() && self.match_labels.is_empty())
            || self.clusters.iter().any(|c| c == name)
            || (!self.match_labels.is_empty()
                && self
                    .match_labels
                    .iter()
                    .all(|(k, v)| labels.get(k) == Some(v)))
    }
}

/// A weekly maintenance window, UTC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// Days it opens on, 0 = Monday … 6 = Sunday (every day when written without days).
    pub days: Vec<u8>,
    /// When it opens, in minutes after midnight.
    pub start: u32,
    /// How long it stays open, in minutes (at most a week).
    pub minutes: u32,
}

/// `spec.rollout`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    /// When a control plane counts as done (None: not written).
    pub rollout_wait: Option<RolloutWait>,
    /// How worker groups roll (None: not written).
    pub worker_rollout: Option<WorkerRollout>,
    /// Workload clusters upgrading at once (None: no limit).
    pub max_unavailable: Option<MaxUnavailable>,
    /// Waves, in order (none: one wave of every workload cluster).
    pub waves: Vec<Wave>,
    /// A wave starts once every cluster of the waves before it is Ready at the revision
    /// (default); without it, once they have all started.
    pub health_gate: bool,
    /// Upgrades start only inside one of these (none: any time).
    pub windows: Vec<Window>,
}

impl Default for Rollout {
    fn default() -> Self {
        Rollout {
            rollout_wait: None,
            worker_rollout: None,
            max_unavailable: None,
            waves: Vec::new(),
            health_gate: true,
            windows: Vec::new(),
        }
    }
}

impl Rollout {
    /// Whether anything holds an upgrade back fleet-wide.
    pub fn paces(&self) -> bool {
        self.max_unavailable.is_some() || !self.waves.is_empty() || !self.windows.is_empty()
    }
}

/// Where a fleet's release data comes from, and what it must hash to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseSource {
    /// The EKS Anywhere release manifest.
    pub manifest: Location,
    /// sha256 pins by document (the manifest's own included).
    pub pins: BTreeMap<Location, String>,
    /// Where the section was written (for diagnostics about its documents).
    pub pos: yaml::Pos,
}

/// The fleet config of a management cluster directory, if the tree has one: the validated config
/// (None when it has errors) and every problem found.
pub fn parse(file: &Path, text: &str) -> (Option<FleetConfig>, Vec<Diagnostic>) {
    let mut diags = Vec::new();
    let docs = match yaml::parse(text) {
        Ok(d) => d,
        Err(e) => {
            diags.push(
                Diagnostic::error(Code::YamlSyntax, e.message)
                    .in_file(file)
                    .at(e.pos),
            );
            return (None, diags);
        }
    };
    let here = |code, msg: String, sd: &SourceDoc, path: &str| {
        Diagnostic::error(code, msg)
            .in_file(file)
            .at(sd.doc.pos(path))
    };
    let mut docs: Vec<SourceDoc> = docs
        .into_iter()
        .map(|doc| SourceDoc {
            file: file.to_path_buf(),
            doc,
        })
        .collect();
    if docs.len() != 1 {
        let mut d = Diagnostic::error(
            Code::InvalidValue,
            format!(
                "{FILE} holds exactly one {KIND} document, found {}",
                docs.len()
            ),
        )
        .in_file(file);
        if let Some(second) = docs.get(1) {
            d = d.at(second.doc.start);
        }
        diags.push(d);
        return (None, diags);
    }
    let sd = docs.remove(0);
    let Value::Object(obj) = &sd.doc.value else {
        diags.push(here(
            Code::MissingTypeInfo,
            format!("{FILE} must be a mapping with apiVersion: {API_VERSION} and kind: {KIND}"),
            &sd,
            "",
        ));
        return (None, diags);
    };
    let text_of = |k: &str| obj.get(k).and_then(Value::as_str);
    match (text_of("apiVersion"), text_of("kind")) {
        (Some(API_VERSION), Some(KIND)) => {}
        (Some(a), Some(k)) => {
            diags.push(here(
                Code::InvalidValue,
                format!("{FILE} must be apiVersion: {API_VERSION}, kind: {KIND}, not {a} {k}; it is reserved for the fleet config"),
                &sd,
                if a != API_VERSION { "apiVersion" } else { "kind" },
            ));
            return (None, diags);
        }
        _ => {
            diags.push(here(
                Code::MissingTypeInfo,
                format!("{FILE} needs apiVersion: {API_VERSION} and kind: {KIND}"),
                &sd,
                "",
            ));
            return (None, diags);
        }
    }
    for key in obj.keys() {
        if !matches!(key.as_str(), "apiVersion" | "kind" | "metadata" | "spec") {
            diags.push(here(
                Code::UnknownField,
                format!("unknown field `{key}` in {KIND}"),
                &sd,
                key,
            ));
        }
    }
    let _meta: Option<RawMeta> = match obj.get("metadata") {
        Some(m) => deserialize(m.clone(), "metadata", &sd, &mut diags),
        None => Some(RawMeta::default()),
    };
    let spec: Option<RawSpec> = match obj.get("spec") {
        Some(s) => deserialize(s.clone(), "spec", &sd, &mut diags),
        None => Some(RawSpec::default()),
    };
    let Some(spec) = spec else {
        return (None, diags);
    };
    let mut config = FleetConfig {
        file: file.to_path_buf(),
        release: None,
        rollout: None,
        notifications: None,
        addons: Vec::new(),
        eksa_versions: BTreeSet::new(),
        sops_recipients: Vec::new(),
    };
    if let Some(r) = &spec.release {
        config.release = check_release(r, &sd, &mut diags);
    }
    if let Some(r) = &spec.rollout {
        config.rollout = Some(check_rollout(r, &sd, &mut diags));
    }
    if let Some(n) = &spec.notifications {
        config.notifications = Some(notifications::check(n, &sd, &mut diags));
    }
    config.addons = check_addons(&spec.addons, &sd, &mut diags);
    config.eksa_versions = check_eksa_versions(&spec.eksa_versions, &sd, &mut diags);
    if let Some(sops) = &spec.sops {
        config.sops_recipients = check_sops(sops, &sd, &mut diags);
    }
    let ok = !capstan_templates::diag::has_errors(&diags);
    (ok.then_some(config), diags)
}

/// `spec.sops.ageRecipients`: age public keys, each once.
fn check_sops(raw: &RawSops, sd: &SourceDoc, diags: &mut Vec<Diagnostic>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (i, r) in raw.age_recipients.iter().enumerate() {
        let path = format!("spec.sops.ageRecipients[{i}]");
        let bad = |msg: String| {
            Diagnostic::error(Code::InvalidValue, msg)
                .in_file(&sd.file)
                .at(sd.doc.pos(&path))
        };
        if r.parse::<age::x25519::Recipient>().is_err() {
            diags.push(bad(format!(
                "`{r}` is not an age recipient (a public key `age1…`; never put the identity `AGE-SECRET-KEY-1…` here)"
            )));
        } else if out.contains(r) {
            diags.push(bad(format!("`{r}` is listed twice")));
        } else {
            out.push(r.clone());
        }
    }
    out
}

/// `spec.addons`: each set named once, by a directory name.
fn check_addons(raw: &[RawAddonSet], sd: &SourceDoc, diags: &mut Vec<Diagnostic>) -> Vec<AddonSet> {
    let mut out: Vec<AddonSet> = Vec::new();
    for (i, s) in raw.iter().enumerate() {
        let at = |code, msg: String, path: &str| {
            Diagnostic::error(code, msg)
                .in_file(&sd.file)
                .at(sd.doc.pos(&format!("spec.addons[{i}]{path}")))
        };
        let valid = !s.name.is_empty()
            && s.name.len() <= 63
            && s.name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !valid {
            diags.push(at(
                Code::InvalidName,
                format!(
                    "`{}` is not an add-on set's directory name (lowercase letters, digits, `-`)",
                    s.name
                ),
                ".name",
            ));
        } else if out.iter().any(|o| o.name == s.name) {
            diags.push(at(
                Code::DuplicateName,
                format!("the add-on set `{}` is named twice", s.name),
                ".name",
            ));
        } else {
            out.push(AddonSet {
                name: s.name.clone(),
                match_labels: s.match_labels.clone(),
            });
        }
    }
    out
}

/// `spec.eksaVersions`: each an EKS Anywhere version (`v0.25.2`), named once.
fn check_eksa_versions(
    raw: &[String],
    sd: &SourceDoc,
    diags: &mut Vec<Diagnostic>,
) -> BTreeSet<SemVer> {
    let mut out = BTreeSet::new();
    for (i, v) in raw.iter().enumerate() {
        let at = |code, msg: String| {
            Diagnostic::error(code, msg)
                .in_file(&sd.file)
                .at(sd.doc.pos(&format!("spec.eksaVersions[{i}]")))
        };
        match SemVer::parse(v) {
            None => diags.push(at(
                Code::InvalidValue,
                format!("`{v}` is not an EKS Anywhere version such as v0.25.2"),
            )),
            Some(parsed) => {
                if !out.insert(parsed) {
                    diags.push(at(Code::DuplicateName, format!("`{v}` is declared twice")));
                }
            }
        }
    }
    out
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
}

fn check_release(
    r: &RawRelease,
    sd: &SourceDoc,
    diags: &mut Vec<Diagnostic>,
) -> Option<ReleaseSource> {
    let mut err = |code, path: &str, msg: String| {
        diags.push(
            Diagnostic::error(code, msg)
                .in_file(&sd.file)
                .at(sd.doc.pos(path)),
        );
    };
    let manifest = if r.manifest.starts_with("https://") {
        Location::parse(&r.manifest)
    } else if r.manifest.contains("://") {
        None
    } else {
        Location::repo_file(r.manifest.trim_start_matches("./"))
    };
    let Some(manifest) = manifest else {
        err(
            Code::InvalidValue,
            "spec.release.manifest",
            format!(
                "manifest `{}` must be an https:// URL or a path from the repository root (no `..`)",
                r.manifest
            ),
        );
        return None;
    };
    let mut pins = BTreeMap::new();
    match &r.sha256 {
        Some(h) if !is_sha256(h) => err(
            Code::InvalidValue,
            "spec.release.sha256",
            format!("sha256 `{h}` must be 64 lowercase hex digits"),
        ),
        Some(h) => {
            pins.insert(manifest.clone(), h.clone());
        }
        None if manifest.is_remote() => err(
            Code::MissingField,
            "spec.release",
            format!(
                "a release manifest fetched over https must be pinned: add sha256 (the hex sha256 of {manifest}, e.g. from `sha256sum`)"
            ),
        ),
        None => {}
    }
    for (url, h) in &r.pins {
        let path = format!("spec.release.pins.{url}");
        match Location::parse(url).filter(Location::is_remote) {
            None => err(
                Code::InvalidValue,
                &path,
                format!("pin `{url}` must be an https:// URL of a document the manifest refers to"),
            ),
            Some(_) if !is_sha256(h) => err(
                Code::InvalidValue,
                &path,
                format!("sha256 `{h}` must be 64 lowercase hex digits"),
            ),
            Some(l) => {
                pins.insert(l, h.clone());
            }
        }
    }
    Some(ReleaseSource {
        manifest,
        pins,
        pos: sd.doc.pos("spec.release"),
    })
}

/// The day names of a maintenance window, Monday first.
pub const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// `90m`, `4h`, `1h30m` in minutes.
fn minutes(text: &str) -> Option<u32> {
    let (mut total, mut digits, mut any) = (0u32, String::new(), false);
    for c in text.chars() {
        match c {
            '0'..='9' => digits.push(c),
            'h' | 'm' if !digits.is_empty() => {
                let n: u32 = digits.parse().ok()?;
                total = total.checked_add(if c == 'h' { n.checked_mul(60)? } else { n })?;
                digits.clear();
                any = true;
            }
            _ => return None,
        }
    }
    (any && digits.is_empty()).then_some(total)
}

fn check_rollout(r: &RawRollout, sd: &SourceDoc, diags: &mut Vec<Diagnostic>) -> Rollout {
    let mut err = |path: &str, msg: String| {
        diags.push(
            Diagnostic::error(Code::InvalidValue, msg)
                .in_file(&sd.file)
                .at(sd.doc.pos(path)),
        );
    };
    let p = "spec.rollout";
    let rollout_wait = r.rollout_wait.as_deref().and_then(|w| match w {
        "complete" => Some(RolloutWait::Complete),
        "firstNode" => Some(RolloutWait::FirstNode),
        other => {
            err(
                &format!("{p}.rolloutWait"),
                format!("rolloutWait `{other}` must be `complete` or `firstNode`"),
            );
            None
        }
    });
    let worker_rollout = r.worker_rollout.as_deref().and_then(|w| match w {
        "parallel" => Some(WorkerRollout::Parallel),
        "sequential" => Some(WorkerRollout::Sequential),
        other => {
            err(
                &format!("{p}.workerRollout"),
                format!("workerRollout `{other}` must be `parallel` or `sequential`"),
            );
            None
        }
    });
    let max_unavailable = r.max_unavailable.as_ref().and_then(|v| {
        let parsed = match v {
            Value::Number(n) => n
                .as_u64()
                .filter(|n| (1..=u32::MAX as u64).contains(n))
                .map(|n| MaxUnavailable::Count(n as u32)),
            Value::String(s) => s
                .strip_suffix('%')
                .and_then(|n| n.parse::<u32>().ok())
                .filter(|n| (1..=100).contains(n))
                .map(MaxUnavailable::Percent),
            _ => None,
        };
        if parsed.is_none() {
            err(
                &format!("{p}.maxUnavailable"),
                format!("maxUnavailable `{}` must be a count of at least 1 or a percentage from \"1%\" to \"100%\"", match v { Value::String(s) => s.clone(), other => other.to_string() }),
            );
        }
        parsed
    });
    let mut waves: Vec<Wave> = Vec::new();
    for (i, w) in r.waves.iter().enumerate() {
        let at = format!("{p}.waves[{i}]");
        let valid_name = !w.name.is_empty()
            && w.name.len() <= 63
            && w.name
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
        if !valid_name {
            err(
                &format!("{at}.name"),
                format!(
                    "wave name `{}` must be lowercase letters, digits and `-` (at most 63)",
                    w.name
                ),
            );
        } else if waves.iter().any(|o| o.name == w.name) {
            err(
                &format!("{at}.name"),
                format!("wave `{}` is named twice", w.name),
            );
        }
        if let Some(prev) = waves
            .iter()
            .find(|o| o.clusters.is_empty() && o.match_labels.is_empty())
        {
            err(
                &at,
                format!(
                    "wave `{}` can never start: wave `{}` before it has no selector and takes every cluster (a wave without `clusters` or `matchLabels` must be the last)",
                    w.name, prev.name
                ),
            );
        }
        waves.push(Wave {
            name: w.name.clone(),
            clusters: w.clusters.clone(),
            match_labels: w.match_labels.clone(),
        });
    }
    let mut windows = Vec::new();
    for (i, w) in r.maintenance_windows.iter().enumerate() {
        let at = format!("{p}.maintenanceWindows[{i}]");
        let mut days = Vec::new();
        for (j, d) in w.days.iter().enumerate() {
            match DAYS.iter().position(|n| n.eq_ignore_ascii_case(d)) {
                Some(n) => days.push(n as u8),
                None => err(
                    &format!("{at}.days[{j}]"),
                    format!("day `{d}` must be one of {}", DAYS.join(", ")),
                ),
            }
        }
        if days.is_empty() && w.days.is_empty() {
            days = (0..7).collect();
        }
        let start = w.start.split_once(':').and_then(|(h, m)| {
            let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
            (h < 24 && m < 60 && w.start.len() == 5).then_some(h * 60 + m)
        });
        if start.is_none() {
            err(
                &format!("{at}.start"),
                format!("start `{}` must be a UTC time of day as \"HH:MM\"", w.start),
            );
        }
        let length = minutes(&w.duration).filter(|m| (1..=7 * 24 * 60).contains(m));
        if length.is_none() {
            err(
                &format!("{at}.duration"),
                format!(
                    "duration `{}` must be like 4h, 90m or 1h30m, from 1m to 168h",
                    w.duration
                ),
            );
        }
        if let (Some(start), Some(minutes)) = (start, length) {
            windows.push(Window {
                days,
                start,
                minutes,
            });
        }
    }
    Rollout {
        rollout_wait,
        worker_rollout,
        max_unavailable,
        waves,
        health_gate: r.health_gate.unwrap_or(true),
        windows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIN: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn a_pinned_https_manifest_parses() {
        let text = format!(
            "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  release:\n    manifest: https://assets.example/m.yaml\n    sha256: {PIN}\n"
        );
        let (c, d) = parse(Path::new("clusters/m/fleet.yaml"), &text);
        assert!(d.is_empty(), "{d:?}");
        let r = c.unwrap().release.unwrap();
        assert_eq!(r.manifest.as_str(), "https://assets.example/m.yaml");
        assert_eq!(r.pins[&r.manifest], PIN);
    }

    #[test]
    fn problems_are_located() {
        let text = "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  release:\n    manifest: https://assets.example/m.yaml\n    sha: x\n";
        let (c, d) = parse(Path::new("f.yaml"), text);
        assert!(c.is_none());
        let codes: Vec<_> = d.iter().map(|d| (d.code, d.line)).collect();
        assert_eq!(codes, vec![(Code::UnknownField, 6)]);
    }

    #[test]
    fn a_repository_manifest_needs_no_pin() {
        let text = "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  release:\n    manifest: release/manifest.yaml\n";
        let (c, d) = parse(Path::new("f.yaml"), text);
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(
            c.unwrap().release.unwrap().manifest.repo_path(),
            Some("release/manifest.yaml")
        );
    }

    const HEAD: &str = "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  rollout:\n";

    #[test]
    fn a_rollout_section_parses_with_its_defaults() {
        let text = format!(
            "{HEAD}    rolloutWait: firstNode\n    workerRollout: sequential\n    maxUnavailable: \"25%\"\n    waves:\n    - name: canary\n      clusters: [dev-1]\n      matchLabels: {{tier: canary}}\n    - name: rest\n    maintenanceWindows:\n    - days: [Sat, sun]\n      start: \"23:30\"\n      duration: 4h30m\n    - start: \"02:00\"\n      duration: 90m\n"
        );
        let (c, d) = parse(Path::new("f.yaml"), &text);
        assert!(d.is_empty(), "{d:?}");
        let r = c.unwrap().rollout.unwrap();
        assert_eq!(r.rollout_wait, Some(RolloutWait::FirstNode));
        assert_eq!(r.worker_rollout, Some(WorkerRollout::Sequential));
        assert_eq!(r.max_unavailable, Some(MaxUnavailable::Percent(25)));
        assert!(r.health_gate);
        assert_eq!(r.waves.len(), 2);
        let labels = |t: &str| BTreeMap::from([("tier".to_string(), t.to_string())]);
        assert!(r.waves[0].selects("dev-1", &BTreeMap::new()));
        assert!(r.waves[0].selects("x", &labels("canary")));
        assert!(!r.waves[0].selects("x", &labels("prod")));
        assert!(r.waves[1].selects("x", &BTreeMap::new()));
        assert_eq!(
            r.windows,
            vec![
                Window {
                    days: vec![5, 6],
                    start: 23 * 60 + 30,
                    minutes: 270
                },
                Window {
                    days: (0..7).collect(),
                    start: 120,
                    minutes: 90
                },
            ]
        );
        // Nothing written: nothing paced, the agent's stage settings.
        let (c, d) = parse(
            Path::new("f.yaml"),
            &format!("{HEAD}    healthGate: false\n"),
        );
        assert!(d.is_empty(), "{d:?}");
        let r = c.unwrap().rollout.unwrap();
        assert!(!r.paces() && !r.health_gate && r.rollout_wait.is_none());
    }

    #[test]
    fn declared_releases_are_versions_named_once() {
        let head = "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n";
        let (c, d) = parse(
            Path::new("f.yaml"),
            &format!("{head}  eksaVersions: [v0.25.2, v0.24.3]\n"),
        );
        assert!(d.is_empty(), "{d:?}");
        let declared: Vec<String> = c
            .unwrap()
            .eksa_versions
            .iter()
            .map(|v| v.to_string())
            .collect();
        assert_eq!(declared, ["v0.24.3", "v0.25.2"]);
        let (c, d) = parse(
            Path::new("f.yaml"),
            &format!("{head}  eksaVersions:\n  - 0.25.2\n  - v0.24.3\n  - v0.24.3\n"),
        );
        assert!(c.is_none());
        let found: Vec<(Code, usize)> = d.iter().map(|d| (d.code, d.line)).collect();
        assert_eq!(found, [(Code::InvalidValue, 5), (Code::DuplicateName, 7)]);
    }

    #[test]
    fn max_unavailable_is_at_least_one() {
        assert_eq!(MaxUnavailable::Percent(25).of(3), 1);
        assert_eq!(MaxUnavailable::Percent(50).of(8), 4);
        assert_eq!(MaxUnavailable::Percent(100).of(3), 3);
        assert_eq!(MaxUnavailable::Count(2).of(1), 2);
    }

    #[test]
    fn bad_rollout_values_are_located() {
        let text = format!(
            "{HEAD}    rolloutWait: half\n    workerRollout: serial\n    maxUnavailable: 0\n    waves:\n    - name: all\n    - name: Canary\n      clusters: [a]\n    maintenanceWindows:\n    - days: [Caturday]\n      start: \"25:00\"\n      duration: forever\n"
        );
        let (c, d) = parse(Path::new("clusters/m/fleet.yaml"), &text);
        assert!(c.is_none());
        let got: Vec<_> = d.iter().map(|d| (d.code, d.line, d.column)).collect();
        assert_eq!(
            got,
            vec![
                (Code::InvalidValue, 5, 5),
                (Code::InvalidValue, 6, 5),
                (Code::InvalidValue, 7, 5),
                (Code::InvalidValue, 10, 7),
                (Code::InvalidValue, 10, 7),
                (Code::InvalidValue, 13, 14),
                (Code::InvalidValue, 14, 7),
                (Code::InvalidValue, 15, 7),
            ],
            "{d:#?}"
        );
        assert!(
            d.iter()
                .all(|d| d.file.as_deref() == Some(Path::new("clusters/m/fleet.yaml")))
        );
        assert!(d[4].message.contains("can never start"), "{}", d[4].message);
        let (c, d) = parse(
            Path::new("f.yaml"),
            &format!("{HEAD}    waves:\n    - name: a\n      matchLabel: {{x: y}}\n"),
        );
        assert!(c.is_none());
        assert_eq!(
            d.iter().map(|d| (d.code, d.line)).collect::<Vec<_>>(),
            vec![(Code::UnknownField, 7)]
        );
        let (_, d) = parse(
            Path::new("f.yaml"),
            &format!("{HEAD}    maxUnavailable: \"150%\"\n"),
        );
        assert_eq!(d.len(), 1);
        assert!(d[0].message.contains("150%"));
    }
}
