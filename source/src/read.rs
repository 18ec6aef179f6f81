//! Reading a commit of the mirror into a [`capstan_layout::Tree`], without a checkout.
//!
//! The layout validates a `Tree` and never the disk, so the agent reads the commit's tree straight
//! from the object database. The rules match [`capstan_layout::Tree::from_dir`] so a revision
//! read from Git and the same files in a working copy validate alike:
//!
//! - a blob over [`MAX_FILE_SIZE`] becomes [`Entry::TooLarge`] and is never loaded (its size comes
//!   from the object header);
//! - a symlink is followed, inside the commit, component by component (links through links are
//!   fine, up to 40 hops). A link to a file gets that file's entry; a link to a directory gets a
//!   copy of the directory's entries under the link's path. A link that leaves the repository
//!   (`..` past the root, an absolute target), dangles, loops, or points at one of its own
//!   ancestor directories becomes [`Entry::EscapingSymlink`] with its target as written;
//! - a link into `.git` becomes [`Entry::GitSymlink`];
//! - a directory over its entry limit ([`capstan_layout::tree::over_limit`]:
//!   [`capstan_layout::tree::MAX_DIR_ENTRIES`], cluster directories of `workload-clusters/` up
//!   to [`capstan_layout::tree::MAX_CLUSTER_DIRS`]) or below [`capstan_layout::tree::MAX_DEPTH`]
//!   is not read ([`capstan_layout::tree::cuts`]): its blobs are never loaded;
//! - submodules (gitlinks) are skipped: their content is not part of this repository, and so are
//!   entries named `.git` (Git refuses to check them out; a crafted tree may hold them).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use capstan_layout::tree::{Entry, MAX_FILE_SIZE, Tree};
use gix::ObjectId;
use gix::objs::tree::EntryKind;

/// Errors reading a commit's tree.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The commit, a tree or a blob could not be read from the mirror.
    #[error("cannot read {what} of commit {commit} from the mirror of {url}: {cause}")]
    Object {
        /// The (credential-free) remote URL.
        url: String,
        /// The commit being read.
        commit: String,
        /// Which object.
        what: String,
        /// What failed.
        cause: String,
    },
}

/// How deep symlink chains are followed (the Linux limit).
const MAX_HOPS: usize = 40;

/// Everything a commit's tree holds, before symlinks are resolved.
#[derive(Default)]
pub(crate) struct Listing {
    pub files: BTreeMap<PathBuf, ObjectId>,
    pub links: BTreeMap<PathBuf, PathBuf>,
    pub dirs: BTreeSet<PathBuf>,
}

fn cause(e: &(dyn std::error::Error + 'static)) -> String {
    super::describe(e)
}

/// A Git path (bytes) as a `PathBuf`; lossless on Unix, lossy only for ill-formed UTF-8 elsewhere.
pub(crate) fn to_path(bytes: &[u8]) -> PathBuf {
    gix::path::from_byte_slice(bytes)
        .map(Path::to_path_buf)
        .unwrap_or_else(|_| PathBuf::from(String::from_utf8_lossy(bytes).into_owned()))
}

/// Lists the tree of `commit`: paths and object ids of files, symlink targets, directories.
pub(crate) fn list(
    repo: &gix::Repository,
    commit: ObjectId,
    url: &str,
) -> Result<Listing, ReadError> {
    let err = |what: &str, e: &(dyn std::error::Error + 'static)| ReadError::Object {
        url: url.to_string(),
        commit: commit.to_string(),
        what: what.to_string(),
        cause: cause(e),
    };
    let tree = repo
        .find_commit(commit)
        .map_err(|e| err("the commit", &e))?
        .tree()
        .map_err(|e| err("the root tree", &e))?;
    let records = tree
        .traverse()
        .breadthfirst
        .files()
        .map_err(|e| err("the trees", &e))?;
    let mut listing = Listing::default();
    for r in records {
        let path = to_path(&r.filepath);
        if path.components().any(|c| c.as_os_str() == ".git") {
            continue;
        }
        match r.mode.kind() {
            EntryKind::Tree => {
                listing.dirs.insert(path);
            }
            EntryKind::Blob | EntryKind::BlobExecutable => {
                listing.files.insert(path, r.oid);
            }
            EntryKind::Link => {
                let blob = repo
                    .find_blob(r.oid)
                    .map_err(|e| err(&format!("symlink {}", path.display()), &e))?;
                listing.links.insert(path, to_path(&blob.data));
            }
            EntryKind::Commit => tracing::debug!(path = %path.display(), "skipping submodule"),
        }
    }
    Ok(listing)
}

/// The files of a revision read before, by path with their blob ids, and what they were read
/// into: a file whose blob is unchanged is taken from it, not decompressed from the pack again.
pub(crate) type Previous<'a> = (&'a BTreeMap<PathBuf, ObjectId>, &'a Tree);

/// Reads every file of `commit` into a `Tree`.
pub(crate) fn read_tree(
    repo: &gix::Repository,
    commit: ObjectId,
    url: &str,
) -> Result<Tree, ReadError> {
    read_tree_after(repo, commit, url, None).map(|(tree, _)| tree)
}

/// [`read_tree`], taking the files whose blobs did not change from the `previous` revision
/// (a push that changes one cluster of ten thousand reads one file from the pack, not ten
/// thousand); also returns the files read, by path with their blob ids, for the next read.
pub(crate) fn read_tree_after(
    repo: &gix::Repository,
    commit: ObjectId,
    url: &str,
    previous: Option<Previous<'_>>,
) -> Result<(Tree, BTreeMap<PathBuf, ObjectId>), ReadError> {
    let mut listing = list(repo, commit, url)?;
    let cuts = capstan_layout::tree::cuts(
        listing
            .files
            .keys()
            .chain(listing.links.keys())
            .chain(listing.dirs.iter())
            .map(PathBuf::as_path),
    );
    if !cuts.is_empty() {
        let below = |p: &PathBuf| cuts.keys().any(|d| p.starts_with(d));
        listing.files.retain(|p, _| !below(p));
        listing.links.retain(|p, _| !below(p));
        listing.dirs.retain(|p| !below(p));
    }
    let err = |what: &Path, e: &(dyn std::error::Error + 'static)| ReadError::Object {
        url: url.to_string(),
        commit: commit.to_string(),
        what: what.display().to_string(),
        cause: cause(e),
    };
    let mut tree = Tree::new();
    for (path, oid) in &listing.files {
        // A blob's entry depends on the blob alone: the same id at the same path reads the same.
        let before = previous
            .filter(|(files, _)| files.get(path) == Some(oid))
            .and_then(|(_, tree)| tree.entries.get(path))
            .filter(|e| matches!(e, Entry::File(_) | Entry::TooLarge(_)));
        if let Some(e) = before {
            tree.entries.insert(path.clone(), e.clone());
            continue;
        }
        let size = repo.find_header(*oid).map_err(|e| err(path, &e))?.size();
        let entry = if size > MAX_FILE_SIZE {
            Entry::TooLarge(size)
        } else {
            let mut data = repo
                .find_blob(*oid)
                .map_err(|e| err(path, &e))?
                .detach()
                .data;
            // The buffer comes from the repository's pool and can be larger than the blob; the
            // tree is kept for as long as the revision is current.
            data.shrink_to_fit();
            Entry::File(data)
        };
        tree.entries.insert(path.clone(), entry);
    }
    // Links to files (and escaping ones) first, from the plain files only.
    let mut dir_links = Vec::new();
    for (path, target) in &listing.links {
        match resolve(path, &listing) {
            Resolved::File(to) => {
                let entry = tree
                    .entries
                    .get(&to)
                    .cloned()
                    .unwrap_or_else(|| Entry::EscapingSymlink(target.clone()));
                tree.entries.insert(path.clone(), entry);
            }
            Resolved::Dir(to) if !path.starts_with(&to) => dir_links.push((path.clone(), to)),
            Resolved::Escaping if into_git(path, target) => {
                tree.entries
                    .insert(path.clone(), Entry::GitSymlink(target.clone()));
            }
            Resolved::Dir(_) | Resolved::Escaping => {
                tree.entries
                    .insert(path.clone(), Entry::EscapingSymlink(target.clone()));
            }
        }
    }
    // Then links to directories, copying what the directory holds (including file links), but not
    // what other directory links added, which keeps a pair of links from feeding each other.
    let snapshot = if dir_links.is_empty() {
        BTreeMap::new()
    } else {
        tree.entries.clone()
    };
    for (link, dir) in dir_links {
        for (p, e) in snapshot
            .range(dir.clone()..)
            .take_while(|(p, _)| p.starts_with(&dir))
        {
            let rel = p.strip_prefix(&dir).expect("range stays below dir");
            tree.entries.insert(link.join(rel), e.clone());
        }
    }
    tree.entries.extend(cuts);
    Ok((tree, listing.files))
}

/// Whether the link at `link` to `target`, followed as written from the link's directory, enters
/// a `.git` directory (which the listing never holds).
fn into_git(link: &Path, target: &Path) -> bool {
    if target.has_root() {
        return false;
    }
    let mut at: Vec<&std::ffi::OsStr> = link
        .parent()
        .map(|p| p.iter().collect())
        .unwrap_or_default();
    for c in target.iter() {
        match c.to_str() {
            Some(".") | Some("") => {}
            Some("..") => {
                if at.pop().is_none() {
                    return false;
                }
            }
            _ if c == ".git" => return true,
            _ => at.push(c),
        }
    }
    false
}

/// Where a symlink leads, inside the commit.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Resolved {
    File(PathBuf),
    Dir(PathBuf),
    Escaping,
}

/// Follows the symlink at `link` through the listing, as the kernel would in a checkout rooted at
/// the repository (but with `..` at the root and absolute targets counting as escapes).
pub(crate) fn resolve(link: &Path, listing: &Listing) -> Resolved {
    let Some(target) = listing.links.get(link) else {
        return Resolved::Escaping;
    };
    // Where we are (the directory the next component is looked up in) and what is left to walk,
    // as a stack with the next component on top.
    let mut at: Vec<PathBuf> = link.parent().map(components).unwrap_or_default();
    let mut todo: Vec<PathBuf> = Vec::new();
    if !push_target(&mut todo, target) {
        return Resolved::Escaping;
    }
    let mut hops = 0;
    while let Some(c) = todo.pop() {
        match c.as_os_str().to_str() {
            Some(".") | Some("") => continue,
            Some("..") => {
                if at.pop().is_none() {
                    return Resolved::Escaping;
                }
                continue;
            }
            _ => {}
        }
        let candidate: PathBuf = at.iter().chain(std::iter::once(&c)).collect();
        if let Some(next) = listing.links.get(&candidate) {
            hops += 1;
            if hops > MAX_HOPS || !push_target(&mut todo, next) {
                return Resolved::Escaping;
            }
        } else if listing.dirs.contains(&candidate) {
            at.push(c);
        } else if listing.files.contains_key(&candidate)
            && todo.iter().all(|c| c.as_os_str() == ".")
        {
            return Resolved::File(candidate);
        } else {
            // Missing, or a file used as a directory.
            return Resolved::Escaping;
        }
    }
    Resolved::Dir(at.iter().collect())
}

fn components(p: &Path) -> Vec<PathBuf> {
    p.components()
        .map(|c| PathBuf::from(c.as_os_str()))
        .collect()
}

/// Pushes the components of a link target so that the first one is popped first. Absolute
/// targets cannot be followed inside the repository.
fn push_target(todo: &mut Vec<PathBuf>, target: &Path) -> bool {
    if target.has_root() {
        return false;
    }
    todo.extend(components(target).into_iter().rev());
    true
}
