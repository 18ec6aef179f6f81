//! A repository as an in-memory tree of files.
//!
//! The layout never reads the disk while it validates: a [`Tree`] is filled first, from a working
//! copy ([`Tree::from_dir`]) or from a Git commit (the agent's source), and everything after that
//! is a pure function of the tree. The scaffolder uses the same trick to validate a fleet with a
//! new cluster *before* writing anything: it adds the new files to the tree and validates that.
//!
//! Reading is defensive: files larger than [`MAX_FILE_SIZE`] are recorded but not read, and a
//! symlink is followed only when its target stays inside the repository.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Files larger than this are rejected (a cluster spec is a few KiB).
pub const MAX_FILE_SIZE: u64 = 1024 * 1024;

/// One entry of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A regular file (or a symlink to one inside the repository) and its bytes.
    File(Vec<u8>),
    /// A file over [`MAX_FILE_SIZE`], with its size.
    TooLarge(u64),
    /// A symlink whose target is outside the repository or missing.
    EscapingSymlink(PathBuf),
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
        walk(&root, &root, &mut tree)?;
        Ok(tree)
    }
}

fn walk(root: &Path, dir: &Path, tree: &mut Tree) -> io::Result<()> {
    let mut entries: Vec<_> = fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let rel = path
            .strip_prefix(root)
            .expect("walk stays below root")
            .to_path_buf();
        let ft = e.file_type()?;
        if ft.is_dir() {
            if e.file_name() == ".git" {
                continue;
            }
            walk(root, &path, tree)?;
        } else if ft.is_symlink() {
            let target = fs::read_link(&path)?;
            match path.canonicalize() {
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

/// A symlinked directory inside the repository is read as if it were at the link's place. Links
/// inside it are judged against the linked directory (stricter than the repository root).
fn walk_linked_dir(target: &Path, at: &Path, tree: &mut Tree) -> io::Result<()> {
    let mut sub = Tree::new();
    walk(target, target, &mut sub)?;
    for (p, e) in sub.entries {
        tree.entries.insert(at.join(p), e);
    }
    Ok(())
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
