//! A repository as an in-memory tree of files.
//!
//! The layout never reads the disk while it validates: a [`Tree`] is filled first, from a working
//! copy ([`Tree::from_dir`]) or from a Git commit (the agent's source), and everything after that
//! is a pure function of the tree. The scaffolder uses the same trick to validate a fleet with a
//! new cluster *before* writing anything: it adds the new files to the tree and validates that.
//!
//! Reading is defensive, because a repository is input anyone with push access shapes:
//! - files larger than [`MAX_FILE_SIZE`] are recorded ([`Entry::TooLarge`]) but not read;
//! - a symlink is followed only when its target stays inside the repository and out of `.git`
//!   ([`Entry::EscapingSymlink`], [`Entry::GitSymlink`]);
//! - a directory with more than [`MAX_DIR_ENTRIES`] entries, or deeper than [`MAX_DEPTH`], is
//!   recorded ([`Entry::TooManyEntries`], [`Entry::TooDeep`]) and not read any further, so a
//!   hostile tree costs a bounded amount of time and memory before it is rejected.
//!
//! The same rules apply to a Git commit read without a checkout (the agent's source): it asks
//! [`cuts`] which directories of its listing not to read. Names that are not UTF-8 or collide case-insensitively are
//! kept as they are here and rejected by the layout (see [`crate::fleet`]).

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Files larger than this are rejected (a cluster spec is a few KiB).
pub const MAX_FILE_SIZE: u64 = 1024 * 1024;

/// Directories with more entries than this are rejected unread (a directory of 10,000 generated
/// files does not fit), except for the cluster directories of [`MAX_CLUSTER_DIRS`].
pub const MAX_DIR_ENTRIES: usize = 5000;

/// How many cluster directories `clusters/<mgmt>/workload-clusters/` may hold: one management
/// cluster's fleet (16,384, the room a /10 of service CIDRs leaves for /24s). Files and links
/// there still count against [`MAX_DIR_ENTRIES`]; a cluster directory's own files are read
/// with the same limits as any other.
pub const MAX_CLUSTER_DIRS: usize = 16_384;

/// Whether `dir` (relative to the root) is a management cluster's `workload-clusters`.
fn holds_clusters(dir: &Path) -> bool {
    let parts: Vec<_> = dir.components().map(|c| c.as_os_str()).collect();
    parts.len() == 3 && parts[0] == "clusters" && parts[2] == "workload-clusters"
}

/// Whether a directory with `dirs` subdirectories and `others` other entries is over its limit.
pub fn over_limit(dir: &Path, dirs: usize, others: usize) -> bool {
    if holds_clusters(dir) {
        dirs > MAX_CLUSTER_DIRS || others > MAX_DIR_ENTRIES
    } else {
        dirs + others > MAX_DIR_ENTRIES
    }
}

/// The limit [`over_limit`] applies to `dir`, for humans.
pub fn limit_of(dir: &Path) -> String {
    if holds_clusters(dir) {
        format!("{MAX_CLUSTER_DIRS} cluster directories and {MAX_DIR_ENTRIES} other entries")
    } else {
        format!("{MAX_DIR_ENTRIES} entries")
    }
}

/// Directories deeper than this many components are rejected unread (the layout itself is at
/// most five deep: `clusters/<mgmt>/workload-clusters/<name>/<file>`).
pub const MAX_DEPTH: usize = 32;

/// One entry of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A regular file (or a symlink to one inside the repository) and its bytes.
    File(Vec<u8>),
    /// A file over [`MAX_FILE_SIZE`], with its size.
    TooLarge(u64),
    /// A symlink whose target is outside the repository or missing.
    EscapingSymlink(PathBuf),
    /// A symlink into `.git` (the repository's own metadata, never part of the fleet).
    GitSymlink(PathBuf),
    /// A directory with more than [`MAX_DIR_ENTRIES`] entries (its count), not read.
    TooManyEntries(usize),
    /// A directory at [`MAX_DEPTH`] that has subdirectories, not read any further.
    TooDeep,
}

/// A repository's files by path relative to its root (`/`-separated, no `.` or `..`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    /// The entries.
    pub entries: BTreeMap<PathBuf, Entry>,
}

impl Tree {
    /// An empty tree.
    pub fn new() -> Tree {
        Tree::default()
    }

    /// Adds or replaces a file.
    pub fn insert(&mut self, path: impl Into<PathBuf>, bytes: impl Into<Vec<u8>>) {
        self.entries.insert(path.into(), Entry::File(bytes.into()));
    }

    /// Whether a path or anything below it exists.
    pub fn exists(&self, path: &Path) -> bool {
        self.entries.keys().any(|p| p.starts_with(path))
    }

    /// Reads a working copy. `.git` directories are skipped.
    pub fn from_dir(root: &Path) -> io::Result<Tree> {
        let root = root.canonicalize()?;
        let mut tree = Tree::new();
        walk(&root, &root, Path::new(""), &mut tree)?;
        Ok(tree)
    }
}

/// Reads `dir` (at `at`, relative to the repository root) into `tree`; links are judged against
/// `root`.
fn walk(root: &Path, dir: &Path, at: &Path, tree: &mut Tree) -> io::Result<()> {
    let depth = at.components().count();
    let cap = if holds_clusters(at) {
        MAX_CLUSTER_DIRS + MAX_DIR_ENTRIES
    } else {
        MAX_DIR_ENTRIES
    };
    let mut entries = Vec::new();
    for e in fs::read_dir(dir)? {
        entries.push(e?);
        if entries.len() > cap {
            // Counted, not read: stop holding entries once over the limit.
            let n = fs::read_dir(dir)?.count();
            tree.entries
                .insert(at.to_path_buf(), Entry::TooManyEntries(n));
            return Ok(());
        }
    }
    let dirs = entries
        .iter()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .count();
    if over_limit(at, dirs, entries.len() - dirs) {
        tree.entries
            .insert(at.to_path_buf(), Entry::TooManyEntries(entries.len()));
        return Ok(());
    }
    if depth >= MAX_DEPTH
        && entries
            .iter()
            .any(|e| e.file_type().is_ok_and(|t| t.is_dir()))
    {
        tree.entries.insert(at.to_path_buf(), Entry::TooDeep);
        return Ok(());
    }
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let rel = at.join(e.file_name());
        let ft = e.file_type()?;
        if ft.is_dir() {
            if e.file_name() == ".git" {
                continue;
            }
            walk(root, &path, &rel, tree)?;
        } else if ft.is_symlink() {
            let target = fs::read_link(&path)?;
            match path.canonicalize() {
                Ok(resolved) if resolved.starts_with(root) && in_git(&resolved, root) => {
                    tree.entries.insert(rel, Entry::GitSymlink(target));
                }
                Ok(resolved) if resolved.starts_with(root) && resolved.is_file() => {
                    tree.entries.insert(rel, read_file(&resolved)?);
                }
                Ok(resolved) if resolved.starts_with(root) && resolved.is_dir() => {
                    walk_linked_dir(&resolved, &rel, tree)?
                }
                _ => {
                    tree.entries.insert(rel, Entry::EscapingSymlink(target));
                }
            }
        } else if ft.is_file() {
            tree.entries.insert(rel, read_file(&path)?);
        }
    }
    Ok(())
}

/// Whether `resolved` (below `root`) is inside a `.git` directory.
fn in_git(resolved: &Path, root: &Path) -> bool {
    resolved
        .strip_prefix(root)
        .is_ok_and(|rel| rel.components().any(|c| c.as_os_str() == ".git"))
}

/// A symlinked directory inside the repository is read as if it were at the link's place. Links
/// inside it are judged against the linked directory (stricter than the repository root).
fn walk_linked_dir(target: &Path, at: &Path, tree: &mut Tree) -> io::Result<()> {
    let mut sub = Tree::new();
    walk(target, target, Path::new(""), &mut sub)?;
    for (p, e) in sub.entries {
        tree.entries.insert(at.join(p), e);
    }
    Ok(())
}

/// [`MAX_DIR_ENTRIES`] and [`MAX_DEPTH`] for a tree listed in full before it is read (a Git
/// commit, whose listing comes whole from the object database): the directories not to read,
/// each with the entry [`Tree::from_dir`] records for it. `paths` are every file, link and
/// directory of the listing; whatever lies below a returned directory is to be left unread.
pub fn cuts<'a>(paths: impl IntoIterator<Item = &'a Path>) -> BTreeMap<PathBuf, Entry> {
    let mut children: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
    let mut cut: BTreeMap<PathBuf, Entry> = BTreeMap::new();
    for p in paths {
        let parent = p.parent().unwrap_or(Path::new("")).to_path_buf();
        children.entry(parent).or_default().push(p.to_path_buf());
        if p.components().count() > MAX_DEPTH + 1 {
            cut.entry(p.components().take(MAX_DEPTH).collect())
                .or_insert(Entry::TooDeep);
        }
    }
    // A child that is itself a parent is a directory.
    for (d, kids) in &children {
        let dirs = kids.iter().filter(|k| children.contains_key(*k)).count();
        if over_limit(d, dirs, kids.len() - dirs) {
            cut.insert(d.clone(), Entry::TooManyEntries(kids.len()));
        }
    }
    // The outermost cut wins: what lies below a cut directory is not read, so not reported.
    let outer: Vec<PathBuf> = cut
        .keys()
        .filter(|d| !cut.keys().any(|o| o != *d && d.starts_with(o)))
        .cloned()
        .collect();
    cut.retain(|d, _| outer.contains(d));
    cut
}

fn read_file(path: &Path) -> io::Result<Entry> {
    let len = fs::metadata(path)?.len();
    if len > MAX_FILE_SIZE {
        return Ok(Entry::TooLarge(len));
    }
    Ok(Entry::File(fs::read(path)?))
}

/// Whether a relative path is clean (no `..`, no root, no `.`).
pub fn is_clean(path: &Path) -> bool {
    path.components().all(|c| matches!(c, Component::Normal(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_are_the_outermost_oversized_or_too_deep_directories() {
        let mut paths: Vec<PathBuf> = (0..=MAX_DIR_ENTRIES)
            .map(|i| PathBuf::from(format!("clusters/m/workload-clusters/w/f{i}.yaml")))
            .collect();
        // Inside the oversized directory: not reported again.
        let deep_inside: PathBuf = std::iter::once("clusters/m/workload-clusters/w".to_string())
            .chain((0..40).map(|_| "d".to_string()))
            .collect();
        paths.push(deep_inside.join("x.yaml"));
        let deep: PathBuf = std::iter::once("other".to_string())
            .chain((0..40).map(|_| "d".to_string()))
            .collect();
        paths.push(deep.join("x.yaml"));
        paths.push(PathBuf::from("clusters/m/cluster.yaml"));
        let cut = cuts(paths.iter().map(PathBuf::as_path));
        let want_deep: PathBuf = deep.components().take(MAX_DEPTH).collect();
        assert_eq!(
            cut,
            BTreeMap::from([
                (
                    PathBuf::from("clusters/m/workload-clusters/w"),
                    Entry::TooManyEntries(MAX_DIR_ENTRIES + 1)
                ),
                (want_deep, Entry::TooDeep),
            ])
        );
        // Within the limits: nothing cut.
        assert!(cuts(paths[..10].iter().map(PathBuf::as_path)).is_empty());
    }

    /// A management cluster's `workload-clusters/` holds up to [`MAX_CLUSTER_DIRS`] cluster
    /// directories, from a Git listing and a working copy alike; files there, and entries of any
    /// other directory, still stop at [`MAX_DIR_ENTRIES`].
    #[test]
    fn workload_clusters_holds_a_large_fleet_of_cluster_directories_but_not_of_files() {
        let list = "clusters/m/workload-clusters";
        let fleet = |n: usize, file: bool| -> Vec<PathBuf> {
            (0..n)
                .flat_map(|i| {
                    if file {
                        vec![PathBuf::from(format!("{list}/f{i}.yaml"))]
                    } else {
                        let d = PathBuf::from(format!("{list}/w{i}"));
                        vec![d.join("cluster.yaml"), d]
                    }
                })
                .collect()
        };
        let ten_thousand = fleet(10_000, false);
        assert!(cuts(ten_thousand.iter().map(PathBuf::as_path)).is_empty());
        let too_many = fleet(MAX_CLUSTER_DIRS + 1, false);
        assert_eq!(
            cuts(too_many.iter().map(PathBuf::as_path)),
            BTreeMap::from([(
                PathBuf::from(list),
                Entry::TooManyEntries(MAX_CLUSTER_DIRS + 1)
            )])
        );
        let files = fleet(MAX_DIR_ENTRIES + 1, true);
        assert_eq!(
            cuts(files.iter().map(PathBuf::as_path)),
            BTreeMap::from([(
                PathBuf::from(list),
                Entry::TooManyEntries(MAX_DIR_ENTRIES + 1)
            )])
        );
        // Anywhere else, directories count like files.
        let elsewhere: Vec<PathBuf> = (0..=MAX_DIR_ENTRIES)
            .flat_map(|i| {
                let d = PathBuf::from(format!("clusters/m/w{i}"));
                vec![d.join("x.yaml"), d]
            })
            .collect();
        assert_eq!(
            cuts(elsewhere.iter().map(PathBuf::as_path)),
            BTreeMap::from([(
                PathBuf::from("clusters/m"),
                Entry::TooManyEntries(MAX_DIR_ENTRIES + 1)
            )])
        );

        // The same from a working copy.
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        for p in ten_thousand.iter().filter(|p| p.extension().is_some()) {
            fs::create_dir_all(root.join(p).parent().unwrap()).unwrap();
            fs::write(root.join(p), "# x\n").unwrap();
        }
        let tree = Tree::from_dir(root).unwrap();
        assert!(
            !tree
                .entries
                .values()
                .any(|e| matches!(e, Entry::TooManyEntries(_))),
            "10,000 cluster directories are read"
        );
        assert_eq!(tree.entries.len(), 10_000);
        for i in 0..=MAX_DIR_ENTRIES {
            fs::write(root.join(list).join(format!("f{i}.yaml")), "# x\n").unwrap();
        }
        let tree = Tree::from_dir(root).unwrap();
        assert!(matches!(
            tree.entries.get(Path::new(list)),
            Some(Entry::TooManyEntries(_))
        ));
    }
}
