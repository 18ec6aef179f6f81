//! Discovery: which directories of a repository tree are clusters, and which files each holds.
//!
//! The layout is fixed (see the parent module), so every entry under `clusters/` either belongs
//! to a cluster directory or is a layout error. An error inside a cluster directory is that
//! cluster's (so it is not applied half-read); one outside every cluster directory is the
//! fleet's. Directories that could not be read, paths that are not UTF-8 and names that differ
//! only in case are found here too, before any file is parsed.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use capstan_templates::diag::{Code, Diagnostic};

use super::{CLUSTERS_DIR, Role, WORKLOADS_DIR};
use crate::config;
use crate::tree::{Entry, Tree};

pub(super) type Discovered = Vec<(PathBuf, Role, Vec<PathBuf>, Vec<Diagnostic>)>;

#[derive(Default)]
struct Dir {
    role: Option<Role>,
    files: Vec<PathBuf>,
    diags: Vec<Diagnostic>,
    /// Part of the directory could not be read: it is a cluster (with errors) even without a
    /// readable file, never a directory that is simply not there.
    unreadable: bool,
}

/// The cluster directory a path belongs to (the directory itself included), by the path's
/// components; `None` for `clusters/` itself, a `workload-clusters/` directory, files directly
/// in either, and everything outside `clusters/`.
fn cluster_dir_of(parts: &[&str], is_dir: bool) -> Option<(PathBuf, Role)> {
    let mgmt_dir = |m: &str| PathBuf::from(CLUSTERS_DIR).join(m);
    match parts {
        [c, m, w, name, ..] if *c == CLUSTERS_DIR && *w == WORKLOADS_DIR => Some((
            mgmt_dir(m).join(WORKLOADS_DIR).join(name),
            Role::Workload {
                management: m.to_string(),
            },
        )),
        [c, _, w] if *c == CLUSTERS_DIR && *w == WORKLOADS_DIR => None,
        [c, _] if *c == CLUSTERS_DIR && !is_dir => None,
        [c, m, ..] if *c == CLUSTERS_DIR => Some((mgmt_dir(m), Role::Management)),
        _ => None,
    }
}

/// A path's components as text (lossy where a name is not UTF-8), and whether all were UTF-8.
fn components(path: &Path) -> (Vec<Cow<'_, str>>, bool) {
    let mut utf8 = true;
    let parts = path
        .iter()
        .map(|c| {
            let s = c.to_string_lossy();
            utf8 &= matches!(s, Cow::Borrowed(_));
            s
        })
        .collect();
    (parts, utf8)
}

/// What makes a directory unreadable, as a diagnostic at it.
fn unreadable_dir(path: &Path, entry: &Entry) -> Option<Diagnostic> {
    let d = match entry {
        Entry::TooManyEntries(n) => Diagnostic::error(
            Code::TooManyEntries,
            format!(
                "directory has {n} entries; the limit is {}, so it was not read",
                crate::tree::limit_of(path)
            ),
        ),
        Entry::TooDeep => Diagnostic::error(
            Code::TooDeep,
            format!(
                "directories nested deeper than {} levels; not read any further",
                crate::tree::MAX_DEPTH
            ),
        ),
        _ => return None,
    };
    Some(d.in_file(path))
}

/// Names in one directory that differ only in case (a checkout on macOS or Windows keeps only
/// one of them): every path of such a group, with whether it is a directory.
///
/// Two names that differ only in case cannot both be their own lowercase, so a tree whose
/// paths under `clusters/` have no uppercase letter (and no name outside ASCII, to be safe)
/// has none; that is answered by looking at the bytes, not by grouping every name of the fleet.
fn case_collisions(tree: &Tree) -> Vec<(PathBuf, bool, String)> {
    let may_collide = tree
        .entries
        .keys()
        .filter(|p| p.starts_with(CLUSTERS_DIR))
        .any(|p| {
            p.as_os_str()
                .as_encoded_bytes()
                .iter()
                .any(|b| b.is_ascii_uppercase() || !b.is_ascii())
        });
    if !may_collide {
        return Vec::new();
    }
    let mut names: BTreeMap<(PathBuf, String), BTreeMap<PathBuf, bool>> = BTreeMap::new();
    for path in tree.entries.keys() {
        if !path.starts_with(CLUSTERS_DIR) {
            continue;
        }
        let is_dir_entry = matches!(
            tree.entries[path],
            Entry::TooManyEntries(_) | Entry::TooDeep
        );
        let mut at = PathBuf::new();
        let n = path.components().count();
        for (i, c) in path.iter().enumerate() {
            let key = (at.clone(), c.to_string_lossy().to_lowercase());
            at.push(c);
            names
                .entry(key)
                .or_default()
                .insert(at.clone(), i + 1 < n || is_dir_entry);
        }
    }
    let mut out = Vec::new();
    for group in names.into_values().filter(|g| g.len() > 1) {
        let all: Vec<String> = group.keys().map(|p| format!("`{}`", p.display())).collect();
        for (p, is_dir) in &group {
            out.push((p.clone(), *is_dir, all.join(" and ")));
        }
    }
    out
}

/// Finds the cluster directories and the files of each. An entry the layout does not allow is
/// an error of the cluster whose directory holds it (so that cluster is not applied half-read),
/// or of the fleet when it is outside every cluster directory.
///
/// A tree that is not a fleet (no `clusters/`, or no cluster directory in it) and a
/// `clusters/` or `workload-clusters/` directory that could not be read are [`Code::NotAFleet`]
/// and read-limit errors of the fleet: [`super::Fleet::unreadable`] then says nothing of this revision
/// may be applied (an unread directory hides clusters that would otherwise look removed).
pub(super) fn discover(tree: &Tree) -> (Discovered, Vec<Diagnostic>) {
    let mut found = Found::default();
    for (path, entry) in &tree.entries {
        found.entry(path, entry);
    }
    found.check_managed();
    for (path, is_dir, all) in case_collisions(tree) {
        let (owned, _) = components(&path);
        let parts: Vec<&str> = owned.iter().map(Cow::as_ref).collect();
        let diag = Diagnostic::error(
            Code::CaseCollision,
            format!("{all} differ only in case: a checkout on a case-insensitive filesystem (macOS, Windows) keeps one of them"),
        )
        .in_file(&path);
        found.blame(&parts, is_dir, diag);
    }
    found.finish()
}

/// An entry the layout does not allow, and why.
fn unexpected(p: &Path, why: &str) -> Diagnostic {
    Diagnostic::error(
        Code::UnexpectedEntry,
        format!("{why}; see the layout in the README"),
    )
    .in_file(p)
}

/// What discovery has found so far: the cluster directories, and the fleet's own problems.
#[derive(Default)]
struct Found {
    dirs: BTreeMap<PathBuf, Dir>,
    fleet_diags: Vec<Diagnostic>,
}

impl Found {
    /// Where a problem of a path goes: the cluster directory it belongs to (which it makes
    /// unreadable), else the fleet.
    fn blame(&mut self, parts: &[&str], is_dir: bool, diag: Diagnostic) {
        match cluster_dir_of(parts, is_dir) {
            Some((dir, role)) => {
                let d = self.dirs.entry(dir).or_default();
                d.role.get_or_insert(role);
                d.diags.push(diag);
                d.unreadable = true;
            }
            None => self.fleet_diags.push(diag),
        }
    }

    /// Records a file of a cluster directory, or a problem of it.
    fn add(&mut self, dir: PathBuf, role: Role, file: Option<&PathBuf>, diag: Option<Diagnostic>) {
        let d = self.dirs.entry(dir).or_default();
        d.role.get_or_insert(role);
        d.files.extend(file.cloned());
        d.diags.extend(diag);
    }

    /// Where one entry of the tree belongs: nowhere (outside `clusters/`, or allowed and
    /// ignored), a cluster directory (a spec file or a problem), or the fleet (a problem).
    fn entry(&mut self, path: &PathBuf, entry: &Entry) {
        let (owned, utf8) = components(path);
        let parts: Vec<&str> = owned.iter().map(Cow::as_ref).collect();
        if parts.first() != Some(&CLUSTERS_DIR) {
            return;
        }
        if let Some(diag) = unreadable_dir(path, entry) {
            self.blame(&parts, true, diag);
            return;
        }
        if !utf8 {
            let diag = Diagnostic::error(
                Code::InvalidPath,
                "the path is not valid UTF-8 (names in a fleet repository are text)",
            )
            .in_file(path);
            self.blame(&parts, false, diag);
            return;
        }
        self.place(path, &parts);
    }

    /// Where a readable file (by its path's components) belongs in the layout.
    fn place(&mut self, path: &PathBuf, parts: &[&str]) {
        let ignorable = parts
            .last()
            .is_some_and(|f| f.ends_with(".md") || *f == ".gitkeep");
        let is_yaml = parts
            .last()
            .is_some_and(|f| f.ends_with(".yaml") || f.ends_with(".yml"));
        let mgmt_dir = |m: &str| PathBuf::from(CLUSTERS_DIR).join(m);
        // Add-ons are read by `crate::addons` (after the clusters, since shared sets select
        // workload clusters by their labels).
        if super::addons::is_addon_path(parts) {
            return;
        }
        match parts {
            [_, file] if *file == crate::intent::SUSPEND_FILE => {}
            [_, mgmt, a, _file] if *a == super::addons::DIR && !ignorable => {
                self.add(
                    mgmt_dir(mgmt),
                    Role::Management,
                    None,
                    Some(unexpected(
                        path,
                        "shared add-ons go in a set directory, clusters/<management>/addons/<set>/",
                    )),
                );
            }
            [_, _file] if !ignorable => {
                self.fleet_diags.push(unexpected(
                    path,
                    "files directly under clusters/ belong to no cluster",
                ));
            }
            [_, _mgmt, file] if *file == config::FILE => {}
            [_, mgmt, _file] => {
                self.spec_file(mgmt_dir(mgmt), Role::Management, path, is_yaml, ignorable);
            }
            [_, mgmt, w, name, _file] if *w == WORKLOADS_DIR => {
                let dir = mgmt_dir(mgmt).join(WORKLOADS_DIR).join(name);
                let role = Role::Workload {
                    management: mgmt.to_string(),
                };
                self.spec_file(dir, role, path, is_yaml, ignorable);
            }
            [_, _mgmt, w, _file]
                if *w == WORKLOADS_DIR
                // Not part of any cluster's spec: a fleet problem that blocks no cluster.
                && !ignorable =>
            {
                self.fleet_diags.push(unexpected(
                    path,
                    "workload-clusters/ holds one directory per workload cluster, not files",
                ));
            }
            [_, mgmt, w, name, ..] if *w == WORKLOADS_DIR && !ignorable => {
                let dir = mgmt_dir(mgmt).join(WORKLOADS_DIR).join(name);
                self.add(
                    dir,
                    Role::Workload {
                        management: mgmt.to_string(),
                    },
                    None,
                    Some(unexpected(
                        path,
                        "a workload cluster directory has no subdirectories but addons/",
                    )),
                );
            }
            [_, mgmt, ..] if !ignorable => {
                self.add(
                    mgmt_dir(mgmt),
                    Role::Management,
                    None,
                    Some(unexpected(
                        path,
                        "a management cluster directory holds its spec files, workload-clusters/ and addons/ only",
                    )),
                );
            }
            _ => {}
        }
    }

    /// A file directly in a cluster directory: a spec file when it is YAML, allowed when
    /// ignorable (Markdown, `.gitkeep`), else a problem of the cluster.
    fn spec_file(
        &mut self,
        dir: PathBuf,
        role: Role,
        path: &PathBuf,
        is_yaml: bool,
        ignorable: bool,
    ) {
        if is_yaml {
            self.add(dir, role, Some(path), None);
        } else if !ignorable {
            self.add(
                dir,
                role,
                None,
                Some(unexpected(
                    path,
                    "only .yaml/.yml files (and .md) belong in a cluster directory",
                )),
            );
        }
    }

    /// Whether each workload directory's management directory exists with a spec.
    fn check_managed(&mut self) {
        let mgmts: BTreeSet<PathBuf> = self
            .dirs
            .iter()
            .filter(|(_, d)| d.role == Some(Role::Management) && !d.files.is_empty())
            .map(|(p, _)| p.clone())
            .collect();
        for d in self.dirs.values_mut() {
            if let (Some(Role::Workload { management }), Some(file)) = (&d.role, d.files.first())
                && !mgmts.contains(&PathBuf::from(CLUSTERS_DIR).join(management))
            {
                let diag = Diagnostic::error(
                    Code::UnexpectedEntry,
                    format!(
                        "workload cluster under `{management}`, which has no management cluster spec"
                    ),
                )
                .in_file(file);
                d.diags.push(diag);
            }
        }
    }

    /// The cluster directories (those with a file, or unreadable), and the fleet's problems:
    /// its own and those of directories that turned out to hold no cluster.
    fn finish(self) -> (Discovered, Vec<Diagnostic>) {
        let mut fleet_diags = self.fleet_diags;
        let mut out = Vec::new();
        for (path, d) in self.dirs {
            if d.files.is_empty() && !d.unreadable {
                fleet_diags.extend(d.diags);
            } else {
                out.push((
                    path,
                    d.role.expect("set with the first entry"),
                    d.files,
                    d.diags,
                ));
            }
        }
        (out, fleet_diags)
    }
}
