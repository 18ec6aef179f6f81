//! The fleet: every cluster of a repository, validated together and rendered.
//!
//! ```text
//! clusters/<mgmt>/*.yaml                                the management cluster's spec
//! clusters/<mgmt>/workload-clusters/<name>/*.yaml       one workload cluster
//! ```
//!
//! A cluster directory holds any number of `.yaml`/`.yml` files, each with one or more documents;
//! together they hold exactly one EKS Anywhere Cluster, its datacenter and machine configs, and
//! optionally further objects (ConfigMaps, Secrets without data, add-ons) applied with it.
//! Markdown files are ignored; anything else in the layout is an error.
//!
//! A management cluster's directory may also hold `fleet.yaml`, the fleet config
//! ([`crate::config`]): it names the release data the whole fleet renders with.
//!
//! Validation is per cluster first (a broken cluster never hides the others: each gets its own
//! diagnostics and the valid ones still render), then across clusters: directory and cluster
//! names, management/workload relations, versions, overlapping CIDRs, tenancy of workload
//! directories, and collisions between the objects that different clusters render.
//!
//! Finding the cluster directories and their files (the layout's own rules) is `discover`'s.

pub mod addons;
mod discover;
mod inventory;
pub mod sealed;

use std::collections::hash_map::Entry as Slot;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use capstan_templates::diag::{Code, Diagnostic, has_errors};
use capstan_templates::release::{Location, Release};
use capstan_templates::spec::{Cluster, SourceDoc, parse_cluster};
use capstan_templates::{render, yaml};
use serde_json::Value;

use self::discover::{Discovered, discover};
use crate::config::{self, FleetConfig};
use crate::objects::{Objects, Rendered};
use crate::releases::{Catalog, Fetched};
use crate::tenancy;
use crate::tree::{Entry, Tree};

/// The directory all clusters live under.
pub const CLUSTERS_DIR: &str = "clusters";
/// The directory of a management cluster's workload clusters.
pub const WORKLOADS_DIR: &str = "workload-clusters";
/// Namespace of the EKSARelease objects on a management cluster (EKS-A's convention).
pub const RELEASE_NAMESPACE: &str = "eksa-system";

/// Whether a cluster manages others or is managed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// `clusters/<name>/`.
    Management,
    /// `clusters/<management>/workload-clusters/<name>/`.
    Workload {
        /// The management cluster's directory name.
        management: String,
    },
}

/// One cluster directory and everything known about it.
#[derive(Debug, Clone)]
pub struct ClusterEntry {
    /// The directory name (the cluster's name when valid).
    pub name: String,
    /// The directory, relative to the repository root.
    pub dir: PathBuf,
    /// Management or workload.
    pub role: Role,
    /// The validated cluster; None when it has errors. Shared: the render cache and every fleet
    /// loaded from it hold the same one.
    pub cluster: Option<Arc<Cluster>>,
    /// Its EKS Anywhere release, once resolved.
    pub release: Option<Arc<Release>>,
    /// The rendered objects, in apply order; None when the cluster has errors.
    pub objects: Option<Objects>,
    /// Every problem of this cluster.
    pub diagnostics: Vec<Diagnostic>,
    /// Deletion or suspension written in the repository.
    pub intent: crate::intent::Intent,
    /// What is applied inside the workload cluster ([`crate::addons`]), in apply order; None:
    /// nothing (a management cluster always).
    pub addons: Option<addons::Addons>,
    /// The Secrets of its own directory kept encrypted with SOPS ([`sealed`]): their rendered
    /// objects hold ciphertext until the agent decrypts them.
    pub sealed: Vec<sealed::SealedObject>,
}

impl ClusterEntry {
    /// Whether the cluster has no errors (warnings allowed).
    pub fn is_valid(&self) -> bool {
        !has_errors(&self.diagnostics) && self.objects.is_some()
    }

    /// The labels of its EKS-A Cluster as written (what waves, alerts and shared add-on sets
    /// select on); empty when nothing is rendered.
    pub fn labels(&self) -> BTreeMap<String, String> {
        self.objects
            .iter()
            .flatten()
            .find(|o| {
                o.kind() == "Cluster"
                    && capstan_templates::identity::group(o.api_version())
                        == capstan_templates::spec::EKSA_GROUP
            })
            .and_then(|o| {
                let labels = o.value().pointer("/metadata/labels")?.as_object()?.clone();
                Some(
                    labels
                        .into_iter()
                        .filter_map(|(k, v)| Some((k, v.as_str()?.to_string())))
                        .collect(),
                )
            })
            .unwrap_or_default()
    }

    /// The management cluster's name.
    pub fn management(&self) -> &str {
        match &self.role {
            Role::Management => &self.name,
            Role::Workload { management } => management,
        }
    }
}

/// A whole repository, validated and rendered.
#[derive(Debug, Clone, Default)]
pub struct Fleet {
    /// Clusters, management clusters first, each followed by its workloads (sorted by name).
    pub clusters: Vec<ClusterEntry>,
    /// Problems that belong to no single cluster (layout errors outside cluster directories).
    pub diagnostics: Vec<Diagnostic>,
    /// `clusters/suspend.yaml`: the whole fleet is suspended.
    pub suspended: bool,
    /// Release documents the fleet configs need and the caller has not supplied: the agent
    /// fetches them and loads again ([`load_fetched`]).
    pub missing_documents: BTreeSet<Location>,
    /// The valid fleet configs, by management cluster.
    pub configs: BTreeMap<String, FleetConfig>,
}

impl Fleet {
    /// Every diagnostic, fleet-level first.
    pub fn all_diagnostics(&self) -> Vec<&Diagnostic> {
        self.diagnostics
            .iter()
            .chain(self.clusters.iter().flat_map(|c| c.diagnostics.iter()))
            .collect()
    }

    /// Whether any diagnostic is an error.
    pub fn has_errors(&self) -> bool {
        self.all_diagnostics().iter().any(|d| d.is_error())
    }

    /// A cluster by name.
    pub fn cluster(&self, name: &str) -> Option<&ClusterEntry> {
        self.clusters.iter().find(|c| c.name == name)
    }

    /// The clusters whose desired state differs from `before`'s (another revision's load):
    /// new ones, and those whose objects, intent or diagnostics changed. The agent reconciles
    /// them ahead of the clusters a new revision only asks it to confirm. Cheap when the loads
    /// share a render cache: an unchanged cluster's objects are the same shared allocation.
    pub fn changed_since(&self, before: &Fleet) -> BTreeSet<&str> {
        let old: BTreeMap<&str, &ClusterEntry> = before
            .clusters
            .iter()
            .map(|c| (c.name.as_str(), c))
            .collect();
        self.clusters
            .iter()
            .filter(|c| {
                old.get(c.name.as_str()).is_none_or(|o| {
                    o.objects != c.objects
                        || o.addons != c.addons
                        || o.intent != c.intent
                        || o.diagnostics != c.diagnostics
                        || o.role != c.role
                })
            })
            .map(|c| c.name.as_str())
            .collect()
    }

    /// Why nothing of this tree may be applied, if so: it is not a fleet (no `clusters/`, or no
    /// cluster in it: a wiped branch), or a directory that lists clusters could not be read.
    /// Applying such a revision would treat every live cluster as removed from the repository;
    /// the agent refuses it instead and leaves the management cluster as it is.
    pub fn unreadable(&self) -> Option<&Diagnostic> {
        self.diagnostics.iter().find(|d| is_unreadable(d))
    }
}

/// A fleet-level diagnostic that makes the whole revision unusable ([`Fleet::unreadable`]).
fn is_unreadable(d: &Diagnostic) -> bool {
    matches!(
        d.code,
        Code::NotAFleet | Code::TooManyEntries | Code::TooDeep
    ) && d.cluster.is_none()
}

/// Rendered objects of earlier loads, keyed by everything rendering depends on: the bytes of the
/// cluster's files and its release. The agent keeps one across revisions, so a push that touches
/// one cluster re-renders that cluster only (what a tree diff would select, without trusting one).
/// It keeps each cluster's directory as read and validated too (keyed by the directory, its role
/// and its files' bytes), so that parsing — the largest part of loading a fleet whose renders are
/// cached — is also done for changed clusters only. Both keep only what the last load used.
#[derive(Debug, Default)]
pub struct RenderCache {
    entries: BTreeMap<String, Objects>,
    read: BTreeMap<[u8; 32], ClusterEntry>,
    /// Cluster directories read and validated again by the last load (the rest came from the
    /// cache).
    pub reads: usize,
    /// Renders served from the cache by the last load.
    pub hits: usize,
    /// Renders done by the last load.
    pub misses: usize,
}

fn render_key(tree: &Tree, dir: &Path, release: &Release) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(release.version.to_string().as_bytes());
    h.update(release.digest.as_bytes());
    for (path, entry) in tree.entries.range(dir.to_path_buf()..) {
        if !path.starts_with(dir) {
            break;
        }
        // A management cluster's render does not depend on its workloads' files (or on the
        // fleet config, whose effect is the release, hashed above).
        if path.starts_with(dir.join(WORKLOADS_DIR)) || path == &dir.join(config::FILE) {
            continue;
        }
        h.update(path.to_string_lossy().as_bytes());
        if let Entry::File(bytes) = entry {
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        }
    }
    hex::encode(h.finalize())
}

/// What [`read_cluster`] depends on: the directory, its role and its files (paths and bytes). A
/// directory with layout diagnostics is never cached (None).
fn read_key(
    tree: &Tree,
    dir: &Path,
    role: &Role,
    files: &[PathBuf],
    layout_diags: &[Diagnostic],
) -> Option<[u8; 32]> {
    use sha2::{Digest, Sha256};
    if !layout_diags.is_empty() {
        return None;
    }
    let mut h = Sha256::new();
    h.update(dir.to_string_lossy().as_bytes());
    h.update([0]);
    if let Role::Workload { management } = role {
        h.update(management.as_bytes());
    }
    for file in files {
        h.update([0]);
        h.update(file.to_string_lossy().as_bytes());
        match tree.entries.get(file) {
            Some(Entry::File(bytes)) => {
                h.update((bytes.len() as u64).to_le_bytes());
                h.update(bytes);
            }
            // Anything but a file is reported by read_cluster: read it again every time.
            _ => return None,
        }
    }
    Some(h.finalize().into())
}

/// Reads, validates and renders every cluster of a repository tree.
pub fn load(tree: &Tree) -> Fleet {
    load_cached(tree, &mut RenderCache::default())
}

/// [`load`], reusing the renders of clusters whose inputs did not change.
pub fn load_cached(tree: &Tree, cache: &mut RenderCache) -> Fleet {
    load_fetched(tree, &Fetched::default(), cache)
}

/// [`load_cached`] with the release documents the agent fetched for the fleet configs.
pub fn load_fetched(tree: &Tree, fetched: &Fetched, cache: &mut RenderCache) -> Fleet {
    let (dirs, mut fleet_diags) = discover(tree);
    if dirs.is_empty() && !fleet_diags.iter().any(is_unreadable) {
        fleet_diags.push(not_a_fleet(tree));
    }
    let mut clusters = read_all(tree, dirs, cache);
    let mut configs = read_configs(tree, &mut clusters);
    check_waves(tree, &mut clusters, &mut configs);
    let missing_documents = resolve_releases(tree, fetched, &configs, &mut clusters);
    sealed::attach(tree, &mut clusters, &configs);
    sealed::check_logins(&mut clusters);

    check_names(&mut clusters);
    check_cidrs(&mut clusters);
    check_tenancy(tree, &mut clusters);
    check_fields(&mut clusters);
    inventory::check(&mut clusters);

    render_all(tree, &mut clusters, cache);
    add_release_objects(&mut clusters);
    // Names a longer cluster name claims first: such a cluster's objects collide with nothing.
    check_claims(&mut clusters);
    check_collisions(&mut clusters);
    let valid_configs: BTreeMap<String, FleetConfig> = configs
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.clone()?)))
        .collect();
    addons::attach(tree, &mut clusters, &valid_configs, ClusterEntry::labels);
    for entry in &mut clusters {
        if has_errors(&entry.diagnostics) {
            entry.objects = None;
        }
        entry.diagnostics.sort_by(|a, b| {
            (&a.file, a.line, a.column, a.code).cmp(&(&b.file, b.line, b.column, b.code))
        });
    }
    fleet_diags.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    let suspended = fleet_suspended(tree);
    Fleet {
        clusters,
        diagnostics: fleet_diags,
        suspended,
        missing_documents,
        configs: valid_configs,
    }
}

/// Why a tree with no cluster directory is never applied: an empty revision, or not a fleet
/// repository at all.
fn not_a_fleet(tree: &Tree) -> Diagnostic {
    let has_clusters_dir = tree.entries.keys().any(|p| p.starts_with(CLUSTERS_DIR));
    let message = if has_clusters_dir {
        "clusters/ holds no cluster directory: an empty revision (a wiped branch, a force-push of an empty tree) is never applied as an empty fleet"
    } else {
        "not a fleet repository: there is no clusters/ directory (clusters/<management>/ holds each management cluster's spec)"
    };
    Diagnostic::error(Code::NotAFleet, message).in_file(CLUSTERS_DIR)
}

/// Each discovered directory read and validated, from the cache when its files are unchanged
/// (the cache then keeps this revision's reads only).
fn read_all(tree: &Tree, dirs: Discovered, cache: &mut RenderCache) -> Vec<ClusterEntry> {
    let mut read = BTreeMap::new();
    cache.reads = 0;
    let clusters = dirs
        .into_iter()
        .map(|(dir, role, files, diags)| {
            let key = read_key(tree, &dir, &role, &files, &diags);
            if let Some(entry) = key.and_then(|k| cache.read.remove(&k)) {
                read.insert(key.unwrap_or_default(), entry.clone());
                return entry;
            }
            cache.reads += 1;
            let entry = read_cluster(tree, dir, role, &files, diags);
            if let Some(k) = key {
                read.insert(k, entry.clone());
            }
            entry
        })
        .collect();
    cache.read = read;
    clusters
}

/// The fleet config of each management cluster (a default one when it has no file; None when it
/// has errors). A config's problems are its management cluster's; its workloads are held with
/// it, since their release data comes from it.
fn read_configs(
    tree: &Tree,
    clusters: &mut [ClusterEntry],
) -> BTreeMap<String, Option<FleetConfig>> {
    let mut configs: BTreeMap<String, Option<FleetConfig>> = BTreeMap::new();
    for entry in clusters.iter_mut().filter(|c| c.role == Role::Management) {
        let path = entry.dir.join(config::FILE);
        let Some(Entry::File(bytes)) = tree.entries.get(&path) else {
            configs.insert(entry.name.clone(), Some(FleetConfig::default()));
            continue;
        };
        let (cfg, diags) = match std::str::from_utf8(bytes) {
            Ok(text) => config::parse(&path, text),
            Err(_) => (
                None,
                vec![Diagnostic::error(Code::NotUtf8, "file is not valid UTF-8").in_file(&path)],
            ),
        };
        entry
            .diagnostics
            .extend(diags.into_iter().map(|d| d.for_cluster(&entry.name)));
        configs.insert(entry.name.clone(), cfg);
    }
    configs
}

/// Whether each fleet config's waves name workload clusters of its own fleet: the management
/// cluster is never in a wave (it upgrades itself first, its workloads paused), an error that
/// makes the config invalid; a name no cluster has is most likely a typo that would leave a
/// canary wave empty, a warning.
fn check_waves(
    tree: &Tree,
    clusters: &mut [ClusterEntry],
    configs: &mut BTreeMap<String, Option<FleetConfig>>,
) {
    for (mgmt, cfg) in configs.iter_mut() {
        let Some(rollout) = cfg.as_ref().and_then(|c| c.rollout.as_ref()) else {
            continue;
        };
        let workloads: BTreeSet<&str> = clusters
            .iter()
            .filter(|c| c.management() == mgmt && c.role != Role::Management)
            .map(|c| c.name.as_str())
            .collect();
        let path = PathBuf::from(CLUSTERS_DIR).join(mgmt).join(config::FILE);
        let Some(Entry::File(bytes)) = tree.entries.get(&path) else {
            continue;
        };
        let found = wave_problems(bytes, &path, mgmt, rollout, &workloads);
        // An error makes the config invalid like any other of its errors.
        let broken = found.iter().any(Diagnostic::is_error);
        if let Some(entry) = clusters.iter_mut().find(|c| &c.name == mgmt) {
            entry
                .diagnostics
                .extend(found.into_iter().map(|d| d.for_cluster(mgmt)));
        }
        if broken {
            *cfg = None;
        }
    }
}

/// The problems of one fleet config's waves (`bytes`, read from `path`), each at the name it
/// concerns: the management cluster `mgmt` named, or a name not among its `workloads`.
fn wave_problems(
    bytes: &[u8],
    path: &Path,
    mgmt: &str,
    rollout: &config::Rollout,
    workloads: &BTreeSet<&str>,
) -> Vec<Diagnostic> {
    let doc = std::str::from_utf8(bytes)
        .ok()
        .and_then(|t| yaml::parse(t).ok())
        .and_then(|mut d| d.pop());
    let mut found = Vec::new();
    for (i, w) in rollout.waves.iter().enumerate() {
        for (j, name) in w.clusters.iter().enumerate() {
            let at = doc
                .as_ref()
                .map(|d| d.pos(&format!("spec.rollout.waves[{i}].clusters[{j}]")));
            let d = if name == mgmt {
                Diagnostic::error(
                    Code::InvalidValue,
                    format!(
                        "wave `{}` names the management cluster `{name}`: it is never in a wave (it upgrades itself before its workload clusters, which wait for it)",
                        w.name
                    ),
                )
            } else if !workloads.contains(name.as_str()) {
                Diagnostic::warning(
                    Code::InvalidValue,
                    format!(
                        "wave `{}` names `{name}`, which is not a workload cluster of `{mgmt}`",
                        w.name
                    ),
                )
            } else {
                continue;
            };
            let d = d.in_file(path);
            found.push(match at {
                Some(at) => d.at(at),
                None => d,
            });
        }
    }
    found
}

/// Resolves every cluster's release, management clusters first, then their workloads (which
/// inherit their management cluster's); returns the release documents still to fetch.
fn resolve_releases<'a>(
    tree: &'a Tree,
    fetched: &'a Fetched,
    configs: &'a BTreeMap<String, Option<FleetConfig>>,
    clusters: &mut [ClusterEntry],
) -> BTreeSet<Location> {
    let mut catalogs: BTreeMap<String, Catalog> = BTreeMap::new();
    for (mgmt, cfg) in configs {
        if let Some(cfg) = cfg {
            let source = cfg.release.clone().map(|r| (cfg.file.clone(), r));
            catalogs.insert(mgmt.clone(), Catalog::new(tree, fetched, source));
        }
    }
    let mut releases = Releases {
        configs,
        catalogs,
        // Clusters under a directory that holds no management cluster (reported by the layout
        // checks) resolve against the embedded data.
        default_catalog: Catalog::new(tree, fetched, None),
        mgmt_release: BTreeMap::new(),
        missing_documents: BTreeSet::new(),
    };
    for pass_management in [true, false] {
        for entry in clusters
            .iter_mut()
            .filter(|c| (c.role == Role::Management) == pass_management)
        {
            releases.resolve(entry, pass_management);
        }
    }
    releases.missing_documents
}

/// What resolving releases reads (each fleet's release data) and has found so far.
struct Releases<'a> {
    /// The fleet configs, by management cluster (None: invalid).
    configs: &'a BTreeMap<String, Option<FleetConfig>>,
    /// The release data of each fleet whose config is valid.
    catalogs: BTreeMap<String, Catalog<'a>>,
    /// The embedded release data.
    default_catalog: Catalog<'a>,
    /// The release of each management cluster resolved so far.
    mgmt_release: BTreeMap<String, Arc<Release>>,
    /// Release documents the catalogs need and the caller has not supplied.
    missing_documents: BTreeSet<Location>,
}

impl Releases<'_> {
    /// Resolves one cluster's release, unless its fleet's release data is unknown (an invalid
    /// fleet config) or a workload has no version of its own and nothing to inherit one from.
    fn resolve(&mut self, entry: &mut ClusterEntry, pass_management: bool) {
        let Some(cluster) = &entry.cluster else {
            return;
        };
        let catalog = match self.configs.get(entry.management()) {
            None => Some(&self.default_catalog),
            Some(_) => self.catalogs.get(entry.management()),
        };
        let Some(catalog) = catalog else {
            // The management cluster carries its fleet config's own diagnostics.
            if entry.role == Role::Management {
                return;
            }
            let file = PathBuf::from(CLUSTERS_DIR)
                .join(entry.management())
                .join(config::FILE);
            entry.diagnostics.push(
                Diagnostic::error(
                    Code::ReleaseUnavailable,
                    format!("the fleet config {} has errors, so this fleet's release data is unknown; no cluster of the fleet is applied until it is fixed", file.display()),
                )
                .in_file(&cluster.source.file)
                .at(cluster.source.pos("spec"))
                .for_cluster(&entry.name),
            );
            return;
        };
        let mgmt = self.mgmt_release.get(entry.management()).cloned();
        if !pass_management
            && !catalog.is_broken()
            && mgmt.is_none()
            && cluster.eksa_version.is_none()
            && cluster.bundles_ref.is_none()
        {
            entry.diagnostics.push(
                Diagnostic::error(Code::UnknownVersion, format!("no eksaVersion, and management cluster `{}` is invalid so its version cannot be inherited", entry.management()))
                    .in_file(&cluster.source.file)
                    .at(cluster.source.pos("spec"))
                    .for_cluster(&entry.name),
            );
            return;
        }
        let (mut release, diags) =
            catalog.resolve(cluster, mgmt.as_deref(), &mut self.missing_documents);
        entry.diagnostics.extend(diags);
        if let (false, Some(r), Some(m)) = (pass_management, &release, &mgmt) {
            let declared = self
                .configs
                .get(entry.management())
                .and_then(Option::as_ref)
                .is_some_and(|c| c.eksa_versions.contains(&r.version));
            if r.version != m.version && !declared {
                let d = undeclared_release(entry.management(), cluster, r, m);
                entry.diagnostics.push(d.for_cluster(&entry.name));
                release = None;
            }
        }
        if let (true, Some(r)) = (pass_management, &release) {
            self.mgmt_release.insert(entry.name.clone(), r.clone());
        }
        entry.release = release;
    }
}

/// A workload's release that is neither its management cluster's nor declared in the fleet
/// config: writing its EKSARelease (a fleet-wide object, as the management identity) is not the
/// workload directory's decision.
fn undeclared_release(
    management: &str,
    cluster: &Cluster,
    release: &Release,
    mgmt_release: &Release,
) -> Diagnostic {
    let (path, what) = match (&cluster.eksa_version, &cluster.bundles_ref) {
        (Some(v), _) => ("spec.eksaVersion", format!("eksaVersion `{v}`")),
        (None, Some(b)) => ("spec.bundlesRef.name", format!("bundlesRef `{b}`")),
        (None, None) => ("spec", format!("release {}", release.version)),
    };
    let fleet_config = PathBuf::from(CLUSTERS_DIR)
        .join(management)
        .join(config::FILE);
    Diagnostic::error(
        Code::UndeclaredRelease,
        format!(
            "{what} is not the release management cluster `{management}` runs ({}) and {} does not declare {} in spec.eksaVersions: each release a workload uses is an EKSARelease object on the management cluster, shared by its fleet, so an admin declares which ones workloads may use",
            mgmt_release.version,
            fleet_config.display(),
            release.version
        ),
    )
    .in_file(&cluster.source.file)
    .at(cluster.source.pos(path))
}

/// Renders every cluster without errors whose release is resolved, from the cache when its
/// inputs are unchanged (the cache then keeps this revision's renders only).
fn render_all(tree: &Tree, clusters: &mut [ClusterEntry], cache: &mut RenderCache) {
    let mut fresh = BTreeMap::new();
    cache.hits = 0;
    cache.misses = 0;
    for entry in clusters {
        if has_errors(&entry.diagnostics) {
            continue;
        }
        let (Some(cluster), Some(release)) = (&entry.cluster, entry.release.as_deref()) else {
            continue;
        };
        let key = render_key(tree, &entry.dir, release);
        if let Some(objects) = cache.entries.remove(&key) {
            cache.hits += 1;
            entry.objects = Some(objects.clone());
            fresh.insert(key, objects);
            continue;
        }
        cache.misses += 1;
        match render::render(cluster, release) {
            Ok(objects) => {
                // A workload's render that reaches beyond its cluster is refused, and not cached
                // (the next load renders and refuses it again).
                if matches!(entry.role, Role::Workload { .. }) {
                    let found = tenancy::check_rendered(cluster, &objects);
                    if !found.is_empty() {
                        entry.diagnostics.extend(found);
                        continue;
                    }
                }
                let objects = Objects::from_values(&objects);
                fresh.insert(key, objects.clone());
                entry.objects = Some(objects)
            }
            Err(e) => entry.diagnostics.push(
                Diagnostic::error(Code::RenderFailed, e.to_string())
                    .in_file(&cluster.source.file)
                    .for_cluster(&entry.name),
            ),
        }
    }
    // Only the renders of this revision stay cached.
    cache.entries = fresh;
}

/// Whether `clusters/suspend.yaml` holds a Suspend document.
fn fleet_suspended(tree: &Tree) -> bool {
    let path = PathBuf::from(CLUSTERS_DIR).join(crate::intent::SUSPEND_FILE);
    let Some(Entry::File(bytes)) = tree.entries.get(&path) else {
        return false;
    };
    let docs = std::str::from_utf8(bytes)
        .ok()
        .and_then(|t| yaml::parse(t).ok())
        .unwrap_or_default();
    let docs = docs
        .into_iter()
        .map(|doc| SourceDoc {
            file: path.clone(),
            doc,
        })
        .collect();
    crate::intent::split(docs).1.suspend.is_some()
}

fn read_cluster(
    tree: &Tree,
    dir: PathBuf,
    role: Role,
    files: &[PathBuf],
    layout_diags: Vec<Diagnostic>,
) -> ClusterEntry {
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    let mut diags: Vec<Diagnostic> = layout_diags
        .into_iter()
        .map(|d| d.for_cluster(&name))
        .collect();
    let mut docs = Vec::new();
    // A directory kept for a read error with no file read: "no Cluster" would only repeat it.
    let mut file_errors = files.is_empty();
    for file in files {
        let before = diags.len();
        match file_documents(tree, file) {
            Err(d) => diags.push(d.for_cluster(&name)),
            Ok(mut parsed) => docs.extend(
                {
                    if sealed::is_sealed_file(tree, file) {
                        sealed::strip(&mut parsed);
                    }
                    parsed
                }
                .into_iter()
                .map(|doc| SourceDoc {
                    file: file.clone(),
                    doc,
                }),
            ),
        }
        file_errors |= diags.len() > before;
    }
    let (docs, intent) = crate::intent::split(docs);
    if intent.delete.is_some() {
        // Being deleted: the spec (if any is left) is not validated or rendered.
        return ClusterEntry {
            name,
            dir,
            role,
            cluster: None,
            release: None,
            objects: None,
            diagnostics: diags,
            intent,
            addons: None,
            sealed: Vec::new(),
        };
    }
    let (cluster, cluster_diags) = parse_cluster(&docs);
    let first_file = files.first().cloned().unwrap_or_else(|| dir.clone());
    diags.extend(
        cluster_diags
            .into_iter()
            // With a file unreadable, "no Cluster" is a consequence, not a finding of its own.
            .filter(|d| !(file_errors && d.code == Code::MissingCluster))
            .map(|mut d| {
                d.cluster = Some(name.clone());
                if d.file.is_none() {
                    d.file = Some(first_file.clone());
                }
                d
            }),
    );
    let mut entry = ClusterEntry {
        name,
        dir,
        role,
        cluster: None,
        release: None,
        objects: None,
        diagnostics: diags,
        intent,
        addons: None,
        sealed: Vec::new(),
    };
    check_layout(&mut entry, &docs);
    if !file_errors {
        entry.cluster = cluster.map(Arc::new);
    }
    entry
}

/// A file's text, when it is a readable UTF-8 file of the tree (what [`file_documents`] parses).
pub(crate) fn file_text<'t>(tree: &'t Tree, file: &Path) -> Option<&'t str> {
    match tree.entries.get(file) {
        Some(Entry::File(bytes)) => std::str::from_utf8(bytes).ok(),
        _ => None,
    }
}

/// A file of the tree as YAML documents, or why it cannot be read (too large, a symlink out
/// of the repository or into `.git`, binary, not UTF-8, not YAML) at its file and line. The one
/// set of file rules for spec files and add-ons alike.
pub(crate) fn file_documents(tree: &Tree, file: &Path) -> Result<Vec<yaml::Document>, Diagnostic> {
    let err = |code, msg: String| Diagnostic::error(code, msg).in_file(file);
    match tree.entries.get(file) {
        None => Err(err(Code::UnexpectedEntry, "file is not in the tree".into())),
        Some(Entry::TooLarge(n)) => Err(err(
            Code::FileTooLarge,
            format!(
                "file is {n} bytes; the limit is {} bytes",
                crate::tree::MAX_FILE_SIZE
            ),
        )),
        Some(Entry::EscapingSymlink(t)) => Err(err(
            Code::SymlinkEscapes,
            format!(
                "symlink to `{}` leaves the repository (or is dangling)",
                t.display()
            ),
        )),
        Some(Entry::GitSymlink(t)) => Err(err(
            Code::SymlinkIntoGit,
            format!(
                "symlink to `{}` points into .git, which is not part of the fleet",
                t.display()
            ),
        )),
        Some(Entry::TooManyEntries(_) | Entry::TooDeep) => {
            unreachable!("discover reports unreadable directories, never as files")
        }
        Some(Entry::File(bytes)) if bytes.contains(&0) => {
            let at = bytes.iter().position(|b| *b == 0).unwrap_or(0);
            let line = bytes[..at].iter().filter(|b| **b == b'\n').count() + 1;
            Err(err(
                Code::BinaryFile,
                format!("file is binary (a NUL byte at byte {at}), not a YAML spec"),
            )
            .at(yaml::Pos { line, column: 1 }))
        }
        Some(Entry::File(bytes)) => match std::str::from_utf8(bytes) {
            Err(e) => {
                let line = bytes[..e.valid_up_to()]
                    .iter()
                    .filter(|b| **b == b'\n')
                    .count()
                    + 1;
                Err(err(
                    Code::NotUtf8,
                    format!("file is not valid UTF-8 (byte {})", e.valid_up_to()),
                )
                .at(yaml::Pos { line, column: 1 }))
            }
            Ok(text) => yaml::parse(text).map_err(|e| err(Code::YamlSyntax, e.message).at(e.pos)),
        },
    }
}

/// Directory name and management relation, read from the Cluster document as written (so they
/// are checked even when the spec has other errors).
fn check_layout(entry: &mut ClusterEntry, docs: &[SourceDoc]) {
    let Some(sd) = docs.iter().find(|d| {
        let v = &d.doc.value;
        v.get("kind").and_then(Value::as_str) == Some("Cluster")
            && v.get("apiVersion")
                .and_then(Value::as_str)
                .is_some_and(|a| a.starts_with("anywhere.eks.amazonaws.com/"))
    }) else {
        return;
    };
    let v = &sd.doc.value;
    let Some(cname) = v.pointer("/metadata/name").and_then(Value::as_str) else {
        return;
    };
    let has_spec = v.get("spec").is_some_and(Value::is_object);
    let mgmt = v
        .pointer("/spec/managementCluster/name")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .unwrap_or(cname);
    let self_managed = mgmt == cname;
    let at = |code, msg: String, path: &str| {
        Diagnostic::error(code, msg)
            .in_file(&sd.file)
            .at(sd.doc.pos(path))
            .for_cluster(&entry.name)
    };
    if cname != entry.name {
        entry.diagnostics.push(at(
            Code::DirNameMismatch,
            format!(
                "Cluster is named `{cname}` but its directory is `{}`; they must be equal",
                entry.name
            ),
            "metadata.name",
        ));
    }
    match &entry.role {
        Role::Management if has_spec && !self_managed => entry.diagnostics.push(at(
            Code::NotSelfManaged,
            format!("clusters/{0}/ holds a management cluster, but its managementCluster is `{1}`; workload clusters go in clusters/{1}/workload-clusters/{0}/", entry.name, mgmt),
            "spec.managementCluster.name",
        )),
        Role::Workload { management } if has_spec && mgmt != management => entry.diagnostics.push(at(
            Code::ManagementMismatch,
            if self_managed {
                format!("workload cluster must set managementCluster.name: {management} (its parent directory)")
            } else {
                format!("managementCluster is `{mgmt}` but the cluster sits under clusters/{management}/")
            },
            "spec.managementCluster",
        )),
        _ => {}
    }
}

/// Cluster names are unique across the repository.
fn check_names(clusters: &mut [ClusterEntry]) {
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    for entry in clusters.iter_mut() {
        if let Some(first) = seen.get(&entry.name) {
            let d = Diagnostic::error(
                Code::DuplicateName,
                format!(
                    "cluster name `{}` is already used by {}",
                    entry.name,
                    first.display()
                ),
            )
            .for_cluster(&entry.name);
            let d = match &entry.cluster {
                Some(c) => d.in_file(&c.source.file).at(c.source.pos("metadata.name")),
                None => d.in_file(&entry.dir),
            };
            entry.diagnostics.push(d);
        } else {
            seen.insert(entry.name.clone(), entry.dir.clone());
        }
    }
}

/// Pod and service CIDRs of the clusters of one management cluster must not overlap.
///
/// Two CIDRs either nest or are disjoint, so sorted by (management, address, prefix length) a
/// range overlaps exactly the ranges still open above it: one sweep with a stack of enclosing
/// ranges finds every overlapping pair in O(n log n + pairs), where comparing every pair took a
/// second per revision at 10,000 clusters. Diagnostics come out in the same order as a pairwise
/// check: per cluster, pods then services, the other ranges in cluster order.
fn check_cidrs(clusters: &mut [ClusterEntry]) {
    struct Net<'a> {
        entry: usize,
        management: &'a str,
        kind: &'static str,
        net: ipnet::IpNet,
    }
    let mut nets: Vec<Net> = Vec::new();
    for (i, e) in clusters.iter().enumerate() {
        if let Some(c) = &e.cluster {
            for (kind, net) in [("pods", c.network.pods), ("services", c.network.services)] {
                nets.push(Net {
                    entry: i,
                    management: e.management(),
                    kind,
                    net,
                });
            }
        }
    }
    let keys: Vec<(&str, usize, ipnet::IpNet)> = nets
        .iter()
        .map(|n| (n.management, n.entry, n.net))
        .collect();
    let overlaps = overlapping(&keys);
    let mut found: Vec<(usize, Diagnostic)> = Vec::new();
    for (mine, others) in overlaps {
        let m = &nets[mine];
        let entry = &clusters[m.entry];
        let Some(c) = &entry.cluster else { continue };
        let path = format!("spec.clusterNetwork.{}.cidrBlocks", m.kind);
        for other in others {
            let o = &nets[other];
            found.push((
                m.entry,
                Diagnostic::error(
                    Code::CidrOverlap,
                    format!(
                        "{} CIDR {} overlaps the {} CIDR {} of cluster `{}` (same management cluster `{}`)",
                        m.kind, m.net, o.kind, o.net, clusters[o.entry].name, m.management
                    ),
                )
                .in_file(&c.source.file)
                .at(c.source.pos(&path))
                .for_cluster(&entry.name),
            ));
        }
    }
    for (entry, d) in found {
        clusters[entry].diagnostics.push(d);
    }
}

/// For each `(group, owner, range)`, the indices of the ranges of the same group and another
/// owner that overlap it, ascending (see [`check_cidrs`] for the sweep).
fn overlapping(nets: &[(&str, usize, ipnet::IpNet)]) -> BTreeMap<usize, Vec<usize>> {
    let mut order: Vec<usize> = (0..nets.len()).collect();
    order.sort_by_key(|&i| {
        let (group, _, net) = &nets[i];
        (*group, net.network(), net.prefix_len())
    });
    let mut overlaps: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut open: Vec<usize> = Vec::new();
    for &i in &order {
        let (group, owner, net) = &nets[i];
        while let Some(&top) = open.last() {
            let (g, _, t) = &nets[top];
            if g == group && t.contains(&net.network()) {
                break;
            }
            open.pop();
        }
        for &outer in &open {
            if nets[outer].1 != *owner {
                overlaps.entry(outer).or_default().push(i);
                overlaps.entry(i).or_default().push(outer);
            }
        }
        open.push(i);
    }
    for others in overlaps.values_mut() {
        others.sort_unstable();
    }
    overlaps
}

/// Puts one EKSARelease per release in use into each management cluster's objects.
fn add_release_objects(clusters: &mut [ClusterEntry]) {
    let mut used: BTreeMap<String, BTreeMap<String, Arc<Release>>> = BTreeMap::new();
    for e in clusters.iter() {
        if let Some(r) = &e.release {
            used.entry(e.management().to_string())
                .or_default()
                .insert(r.version.to_string(), r.clone());
        }
    }
    for e in clusters.iter_mut().filter(|e| e.role == Role::Management) {
        let (Some(objects), Some(releases)) = (&mut e.objects, used.get(&e.name)) else {
            continue;
        };
        let mut release_objects: Vec<Value> = releases
            .values()
            .map(|r| r.eksa_release_object(RELEASE_NAMESPACE))
            .collect();
        for o in &mut release_objects {
            if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                // No cluster label: a release object describes the release, the same for every
                // cluster that uses it.
                meta.insert(
                    "labels".into(),
                    serde_json::json!({capstan_templates::identity::MANAGED_BY_LABEL: capstan_templates::identity::MANAGED_BY}),
                );
            }
        }
        // Release objects go first: clusters refer to them.
        *objects = release_objects
            .iter()
            .map(Rendered::new)
            .chain(objects.iter().cloned())
            .collect();
    }
}

/// The objects beside each spec have only fields their kind's schema knows ([`crate::fields`]).
fn check_fields(clusters: &mut [ClusterEntry]) {
    for entry in clusters.iter_mut() {
        if let Some(cluster) = &entry.cluster {
            let found = crate::fields::check(&entry.name, &cluster.extra_objects);
            entry.diagnostics.extend(found);
        }
    }
}

/// What a cluster directory may put on the management cluster ([`tenancy`]): workload
/// directories confined to their cluster, no Secret data anywhere, and no tombstone for a
/// management cluster while it still manages workload clusters.
fn check_tenancy(tree: &Tree, clusters: &mut [ClusterEntry]) {
    let names: BTreeSet<String> = clusters.iter().map(|e| e.name.clone()).collect();
    let mut managing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // A workload with a tombstone of its own is being deleted with its management cluster
    // (`capstan back-out` deletes the workloads first, in Cluster API's order): only the
    // others keep the management cluster's tombstone from being carried out.
    for e in clusters
        .iter()
        .filter(|e| e.role != Role::Management && e.intent.delete.is_none())
    {
        managing
            .entry(e.management().to_string())
            .or_default()
            .push(e.name.clone());
    }
    for entry in clusters.iter_mut() {
        // SOPS files: checked by `sealed::attach`, their Secrets' data is ciphertext.
        let sops: BTreeSet<PathBuf> = entry
            .cluster
            .iter()
            .flat_map(|c| &c.extra_objects)
            .map(|o| o.file.clone())
            .filter(|f| sealed::is_sealed_file(tree, f))
            .collect();
        let found = match (&entry.role, &entry.cluster) {
            (Role::Workload { .. }, Some(cluster)) => tenancy::check_workload(
                cluster,
                tenancy::Fleet {
                    directory: &entry.name,
                    names: &names,
                    sealed: &sops,
                },
            ),
            (Role::Management, Some(cluster)) => tenancy::check_management(cluster, &sops),
            _ => Vec::new(),
        };
        entry.diagnostics.extend(found);
        if let (Role::Management, Some(at), Some(workloads)) = (
            &entry.role,
            &entry.intent.delete_at,
            managing.get(&entry.name),
        ) {
            entry.diagnostics.push(
                Diagnostic::error(
                    Code::ManagementTombstone,
                    format!(
                        "management cluster `{}` still manages workload clusters ({}): delete them first, or give each a tombstone too; its API server holds their objects",
                        entry.name,
                        workloads.join(", ")
                    ),
                )
                .in_file(&at.0)
                .at(at.1)
                .for_cluster(&entry.name),
            );
        }
    }
}

/// Rendered names that a longer cluster name claims: `dev`'s worker group `prod-md-0` renders
/// `dev-prod-md-0`, which is cluster `dev-prod`'s name space ([`tenancy::owner_of`]).
fn check_claims(clusters: &mut [ClusterEntry]) {
    let names: BTreeSet<String> = clusters.iter().map(|e| e.name.clone()).collect();
    for e in clusters.iter_mut() {
        if e.role == Role::Management {
            continue;
        }
        let Some(cluster) = &e.cluster else { continue };
        // Objects written in the directory were reported by name already.
        let claimed: BTreeMap<&str, Vec<String>> = e
            .objects
            .iter()
            .flatten()
            .filter(|o| {
                !cluster
                    .sources
                    .iter()
                    .any(|s| s.kind == o.kind() && s.name == o.name())
            })
            .filter_map(|o| {
                let owner = tenancy::owner_of(o.name(), &names)?;
                (owner != e.name).then(|| (owner, o.subject()))
            })
            .fold(BTreeMap::new(), |mut m, (owner, subject)| {
                m.entry(owner).or_insert_with(Vec::new).push(subject);
                m
            });
        let found: Vec<Diagnostic> = claimed
            .into_iter()
            .map(|(owner, subjects)| {
                Diagnostic::error(
                    Code::NameOutsideCluster,
                    format!(
                        "renders {}, names that belong to cluster `{owner}`; rename what they are made from (a worker group, a machine config)",
                        subjects.join(", ")
                    ),
                )
                .in_file(&cluster.source.file)
                .at(cluster.source.pos("metadata.name"))
                .for_cluster(&e.name)
            })
            .collect();
        if !found.is_empty() {
            e.diagnostics.extend(found);
            e.objects = None;
        }
    }
}

/// Two clusters must never render the same object.
///
/// Keyed by borrowed parts, not a formatted subject: the fleet's every object passes through
/// here on every load (120,000 at ten thousand clusters), and two strings formatted per object
/// were half of loading a revision whose clusters all came from the cache.
fn check_collisions(clusters: &mut [ClusterEntry]) {
    // Objects of different management clusters land on different API servers.
    type Key<'a> = (&'a str, &'a str, &'a str, &'a str, &'a str);
    let total = clusters
        .iter()
        .map(|e| e.objects.as_ref().map_or(0, |o| o.len()))
        .sum();
    // foldhash: the default SipHash, hashing five strings per object, was a fifth of the load.
    let mut owner: HashMap<Key, usize, foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(total, Default::default());
    let names: BTreeSet<String> = clusters.iter().map(|e| e.name.clone()).collect();
    let mut problems: Vec<(usize, String, String, String, String)> = Vec::new();
    for (i, e) in clusters.iter().enumerate() {
        for o in e.objects.iter().flatten() {
            let key = (
                e.management(),
                o.api_version(),
                o.kind(),
                o.namespace(),
                o.name(),
            );
            match owner.entry(key) {
                Slot::Occupied(first) if clusters[*first.get()].name != e.name => {
                    // The cluster the name belongs to keeps it; else the one read first does.
                    let first = *first.get();
                    let (blamed, other) =
                        if tenancy::owner_of(o.name(), &names) == Some(e.name.as_str()) {
                            (first, i)
                        } else {
                            (i, first)
                        };
                    problems.push((
                        blamed,
                        format!(
                            "{}/{} on management cluster {}",
                            o.api_version(),
                            o.subject(),
                            e.management()
                        ),
                        clusters[other].name.clone(),
                        o.kind().to_string(),
                        o.name().to_string(),
                    ))
                }
                Slot::Occupied(_) => {}
                Slot::Vacant(v) => {
                    v.insert(i);
                }
            }
        }
    }
    for (i, subject, first, kind, name) in problems {
        let e = &mut clusters[i];
        let d = Diagnostic::error(
            Code::DuplicateName,
            format!("renders {subject}, which cluster `{first}` renders too; use distinct names"),
        )
        .for_cluster(&e.name);
        let d = match &e.cluster {
            // The object as written in this directory, else the Cluster its objects are named after.
            Some(c) => match c.sources.iter().find(|s| s.kind == kind && s.name == name) {
                Some(src) => d.in_file(&src.file).at(src.pos),
                None => d.in_file(&c.source.file).at(c.source.pos("metadata.name")),
            },
            None => d.in_file(&e.dir),
        };
        e.diagnostics.push(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every pair compared: what the sweep must find.
    fn pairwise(nets: &[(&str, usize, ipnet::IpNet)]) -> BTreeMap<usize, Vec<usize>> {
        let mut out: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, (g, o, a)) in nets.iter().enumerate() {
            for (j, (h, p, b)) in nets.iter().enumerate() {
                if g == h && o != p && (a.contains(&b.network()) || b.contains(&a.network())) {
                    out.entry(i).or_default().push(j);
                }
            }
        }
        out
    }

    /// A management cluster and three workloads written by the scaffolder; the tree and the
    /// path of each workload's spec.
    fn small_fleet() -> (Tree, Vec<PathBuf>) {
        use crate::scaffold::{ClusterRequest, plan};
        let mut tree = Tree::new();
        let mgmt = ClusterRequest {
            name: "mgmt".into(),
            provider: "docker".into(),
            pod_cidr: Some("192.168.0.0/16".into()),
            service_cidr: Some("10.96.0.0/12".into()),
            ..Default::default()
        };
        for (p, t) in plan(&tree, &mgmt).unwrap().files {
            tree.insert(p, t);
        }
        let mut specs = Vec::new();
        for i in 0..3 {
            let req = ClusterRequest {
                name: format!("w{i}"),
                management: Some("mgmt".into()),
                provider: "docker".into(),
                pod_cidr: Some(format!("10.{i}.0.0/16")),
                service_cidr: Some(format!("10.20{i}.0.0/16")),
                ..Default::default()
            };
            for (p, t) in plan(&tree, &req).unwrap().files {
                specs.push(p.clone());
                tree.insert(p, t);
            }
        }
        (tree, specs)
    }

    /// What a workload renders is checked against the reference table and the reserved names
    /// too (`tenancy::check_rendered`): a template or spec that reached beyond its cluster.
    #[test]
    fn rendered_references_beyond_the_cluster_are_refused() {
        let (tree, _) = small_fleet();
        let fleet = load(&tree);
        let w0 = fleet.clusters.iter().find(|c| c.name == "w0").unwrap();
        let cluster = w0.cluster.as_ref().unwrap();
        let mut objects = w0.objects.as_ref().unwrap().values();
        assert!(tenancy::check_rendered(cluster, &objects).is_empty());
        let kcp = objects
            .iter_mut()
            .find(|o| o["kind"] == "KubeadmControlPlane")
            .unwrap();
        kcp["spec"]["kubeadmConfigSpec"]["files"] = serde_json::json!([
            {"path": "/etc/kubernetes/stolen.conf", "contentFrom": {"secret": {"name": "mgmt-kubeconfig", "key": "value"}}}
        ]);
        objects.push(serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "w0-prod-ca", "namespace": "eksa-system"}}));
        let found: Vec<(Code, String)> = tenancy::check_rendered(cluster, &objects)
            .into_iter()
            .map(|d| (d.code, d.message))
            .collect();
        assert_eq!(found.len(), 2, "{found:#?}");
        assert_eq!(found[0].0, Code::ForeignReference);
        assert!(
            found[0].1.contains(
                "spec.kubeadmConfigSpec.files[0].contentFrom.secret.name names `mgmt-kubeconfig`"
            ),
            "{}",
            found[0].1
        );
        assert_eq!(found[1].0, Code::ReservedName);
    }

    /// A management cluster's tombstone is refused while one of its workload directories has
    /// none, and is valid (the back-out's) once every one has.
    #[test]
    fn a_management_tombstone_waits_for_a_tombstone_in_every_workload_directory() {
        let (mut tree, _) = small_fleet();
        let tombstone = "apiVersion: capstan.dev/v1alpha1\nkind: Tombstone\nreason: retired\n";
        let management_errors = |tree: &Tree| -> Vec<String> {
            let fleet = load(tree);
            let mgmt = fleet.clusters.iter().find(|c| c.name == "mgmt").unwrap();
            assert!(mgmt.intent.delete.is_some());
            mgmt.diagnostics
                .iter()
                .filter(|d| d.is_error())
                .map(|d| d.message.clone())
                .collect()
        };
        tree.entries
            .retain(|p, _| p.parent() != Some(Path::new("clusters/mgmt")));
        tree.insert("clusters/mgmt/tombstone.yaml", tombstone);
        let errors = management_errors(&tree);
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert!(
            errors[0].contains("still manages workload clusters (w0, w1, w2)"),
            "{}",
            errors[0]
        );
        for i in 0..3 {
            let dir = format!("clusters/mgmt/workload-clusters/w{i}");
            tree.entries.retain(|p, _| !p.starts_with(&dir));
            tree.insert(format!("{dir}/tombstone.yaml"), tombstone);
            let errors = management_errors(&tree);
            if i < 2 {
                assert!(
                    errors[0].contains("still manages workload clusters"),
                    "{errors:#?}"
                );
                assert!(!errors[0].contains(&format!("w{i}")), "{}", errors[0]);
            } else {
                assert_eq!(errors, Vec::<String>::new());
            }
        }
    }

    /// The EKSARelease objects a fleet's management cluster `mgmt` renders, by name.
    fn release_objects(fleet: &Fleet) -> Vec<String> {
        let mgmt = fleet.clusters.iter().find(|c| c.name == "mgmt").unwrap();
        mgmt.objects
            .iter()
            .flatten()
            .filter(|o| o.kind() == "EKSARelease")
            .map(|o| o.name().to_string())
            .collect()
    }

    #[test]
    fn a_workload_uses_a_release_the_management_cluster_does_not_run_only_once_declared() {
        use crate::scaffold::{ClusterRequest, plan};
        let (mut tree, _) = small_fleet();
        let req = ClusterRequest {
            name: "old".into(),
            management: Some("mgmt".into()),
            provider: "docker".into(),
            pod_cidr: Some("10.9.0.0/16".into()),
            service_cidr: Some("10.209.0.0/16".into()),
            kubernetes_version: Some("1.32".into()),
            ..Default::default()
        };
        for (p, t) in plan(&tree, &req).unwrap().files {
            // (The scaffolder refuses the release itself: its result is validated.)
            let t = t.replace(
                "kubernetesVersion: \"1.32\"\n",
                "kubernetesVersion: \"1.32\"\n  eksaVersion: v0.25.2\n",
            );
            tree.insert(p, t);
        }
        let fleet = load(&tree);
        let old = fleet.clusters.iter().find(|c| c.name == "old").unwrap();
        let codes: Vec<Code> = old.diagnostics.iter().map(|d| d.code).collect();
        assert_eq!(codes, [Code::UndeclaredRelease], "{:?}", old.diagnostics);
        assert!(old.objects.is_none() && old.release.is_none());
        // Nothing is written on the management cluster on its behalf.
        assert_eq!(release_objects(&fleet), ["eksa-v0-26-1"]);
        assert!(
            fleet
                .clusters
                .iter()
                .filter(|c| c.name != "old")
                .all(ClusterEntry::is_valid)
        );

        // An admin declares it: the workload renders, and so does the release object.
        tree.insert(
            PathBuf::from("clusters/mgmt/fleet.yaml"),
            "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec: {eksaVersions: [v0.25.2]}\n",
        );
        let fleet = load(&tree);
        let old = fleet.clusters.iter().find(|c| c.name == "old").unwrap();
        assert!(old.is_valid(), "{:?}", old.diagnostics);
        assert_eq!(release_objects(&fleet), ["eksa-v0-25-2", "eksa-v0-26-1"]);
    }

    fn same_fleet(a: &Fleet, b: &Fleet) {
        assert_eq!(a.clusters.len(), b.clusters.len());
        for (x, y) in a.clusters.iter().zip(&b.clusters) {
            assert_eq!(x.name, y.name);
            assert_eq!(
                format!("{:?}", x.diagnostics),
                format!("{:?}", y.diagnostics)
            );
            assert!(x.objects == y.objects, "{}", x.name);
        }
    }

    #[test]
    fn a_revision_names_exactly_the_clusters_it_changed() {
        let (mut tree, specs) = small_fleet();
        let mut cache = RenderCache::default();
        let first = load_cached(&tree, &mut cache);
        let none: BTreeSet<&str> = BTreeSet::new();
        assert_eq!(load_cached(&tree, &mut cache).changed_since(&first), none);
        // Every cluster is new to an empty fleet.
        assert_eq!(first.changed_since(&Fleet::default()).len(), 4);
        let text = |tree: &Tree, p: &PathBuf| match &tree.entries[p] {
            Entry::File(b) => String::from_utf8(b.clone()).unwrap(),
            _ => unreachable!(),
        };
        // A comment changes no object; a worker count does; a broken spec changes its
        // diagnostics.
        let w0 = text(&tree, &specs[0]);
        tree.insert(specs[0].clone(), format!("{w0}# a comment\n"));
        let after_comment = load_cached(&tree, &mut cache);
        assert_eq!(after_comment.changed_since(&first), none);
        let w1 = text(&tree, &specs[1]);
        assert!(w1.contains("count: 1\n"), "{w1}");
        tree.insert(specs[1].clone(), w1.replacen("count: 1\n", "count: 3\n", 1));
        let w2 = text(&tree, &specs[2]);
        tree.insert(
            specs[2].clone(),
            w2.replace("kind: Cluster\n", "kind: Clustr\n"),
        );
        let next = load_cached(&tree, &mut cache);
        assert_eq!(
            next.changed_since(&after_comment),
            BTreeSet::from(["w1", "w2"])
        );
    }

    #[test]
    fn a_load_after_a_change_reads_and_renders_only_the_changed_clusters_and_equals_a_fresh_load() {
        let (mut tree, specs) = small_fleet();
        let mut cache = RenderCache::default();
        same_fleet(&load_cached(&tree, &mut cache), &load(&tree));
        assert_eq!((cache.reads, cache.misses), (4, 4));
        same_fleet(&load_cached(&tree, &mut cache), &load(&tree));
        assert_eq!((cache.reads, cache.hits, cache.misses), (0, 4, 0));

        // One spec edited, one broken (its error kept while it stays broken), one made to
        // overlap another's pods: the third is read again only because its own bytes changed,
        // yet the fleet-wide check still sees the overlap on both sides.
        let text = |p: &PathBuf| match &tree.entries[p] {
            Entry::File(b) => String::from_utf8(b.clone()).unwrap(),
            _ => unreachable!(),
        };
        let (w0, w1, w2) = (text(&specs[0]), text(&specs[1]), text(&specs[2]));
        tree.insert(specs[0].clone(), format!("{w0}# edited\n"));
        tree.insert(
            specs[1].clone(),
            w1.replace("kind: Cluster\n", "kind: Clustr\n"),
        );
        tree.insert(specs[2].clone(), w2.replace("10.2.0.0/16", "10.0.0.0/16"));
        let fresh = load(&tree);
        assert!(fresh.has_errors());
        same_fleet(&load_cached(&tree, &mut cache), &fresh);
        assert_eq!(cache.reads, 3);
        same_fleet(&load_cached(&tree, &mut cache), &fresh);
        assert_eq!(cache.reads, 0);
        let overlap = |n: &str| {
            fresh
                .clusters
                .iter()
                .find(|c| c.name == n)
                .unwrap()
                .diagnostics
                .iter()
                .any(|d| d.code == Code::CidrOverlap)
        };
        let all: Vec<_> = fresh
            .clusters
            .iter()
            .map(|c| (&c.name, &c.diagnostics))
            .collect();
        assert!(
            overlap("w0") && overlap("w2") && !overlap("mgmt"),
            "{all:#?}"
        );
    }

    proptest! {
        /// Ranges drawn from a small space so that they nest, repeat and touch often; two
        /// management clusters, owners repeating (a cluster's own pods and services never count).
        #[test]
        fn the_sweep_finds_exactly_the_overlapping_pairs(
            drawn in proptest::collection::vec((0u8..2, 0usize..6, 0u32..64, 26u8..=32), 0..40)
        ) {
            let nets: Vec<(&str, usize, ipnet::IpNet)> = drawn
                .iter()
                .map(|&(g, owner, slot, len)| {
                    let addr = std::net::Ipv4Addr::from(0x0a00_0000u32 + slot * 16);
                    let net = ipnet::IpNet::V4(ipnet::Ipv4Net::new(addr, len).unwrap());
                    (["m1", "m2"][g as usize], owner, net)
                })
                .collect();
            prop_assert_eq!(overlapping(&nets), pairwise(&nets));
        }
    }
}
