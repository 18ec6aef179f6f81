//! Which paths differ between two fetched commits.
//!
//! The agent re-plans only the clusters whose files changed, so the answer must never miss a
//! change; reporting too much is merely slower. Hence:
//!
//! - the answer is a diff of the two commits' *trees*, not of history. It is exact whenever both
//!   commits are in the mirror, including after a force-push (the old commit stays in the object
//!   database; nothing here runs `gc`);
//! - rename tracking is off: a rename is its old path (deleted) plus its new path (added);
//! - paths are those of [`capstan_layout::Tree`]: files and symlinks, never directories. When
//!   either tree holds a symlink, the trees are compared as `read::read_tree`
//!   materialises them, because a link's entry changes when its target does, which a Git tree diff
//!   does not show;
//! - when `from` is not in the mirror (a shallow mirror that never saw it, a cache that was wiped,
//!   a commit from another repository), the diff is impossible and [`DiffError::FromUnavailable`]
//!   tells the caller to treat every path as changed.

use std::collections::BTreeSet;
use std::path::PathBuf;

use capstan_layout::Tree;
use gix::ObjectId;

use super::read;

/// Errors computing changed paths.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// `from` is not in the mirror: treat every path as changed.
    #[error(
        "commit {from} is not in the mirror of {url} (shallow history, a rewritten branch or a wiped cache); \
         cannot diff it against {to}: treat every path as changed"
    )]
    FromUnavailable {
        /// The (credential-free) remote URL.
        url: String,
        /// The older commit.
        from: String,
        /// The newer commit.
        to: String,
    },
    /// `to` has not been fetched.
    #[error("commit {to} has not been fetched from {url}; sync first")]
    ToUnavailable {
        /// The (credential-free) remote URL.
        url: String,
        /// The newer commit.
        to: String,
    },
    /// A commit id is not a full hexadecimal object id.
    #[error("{commit:?} is not a full commit id (diffing commits of {url})")]
    BadCommitId {
        /// The (credential-free) remote URL.
        url: String,
        /// What was given.
        commit: String,
    },
    /// Reading or diffing the trees failed.
    #[error("cannot diff {from}..{to} of {url}: {cause}")]
    Diff {
        /// The (credential-free) remote URL.
        url: String,
        /// The older commit.
        from: String,
        /// The newer commit.
        to: String,
        /// What failed.
        cause: String,
    },
}

fn cause(e: &(dyn std::error::Error + 'static)) -> String {
    super::describe(e)
}

/// Parses a full hex object id.
pub(crate) fn parse_id(s: &str, url: &str) -> Result<ObjectId, DiffError> {
    ObjectId::from_hex(s.as_bytes()).map_err(|_| DiffError::BadCommitId {
        url: url.to_string(),
        commit: s.to_string(),
    })
}

/// The paths whose entry differs between the trees of `from` and `to`. `known` may carry an
/// already materialised tree of either commit (the last synced revision) to avoid re-reading it.
pub(crate) fn changed_paths(
    repo: &gix::Repository,
    url: &str,
    from: &str,
    to: &str,
    known: Option<(&str, &Tree)>,
) -> Result<BTreeSet<PathBuf>, DiffError> {
    let from_id = parse_id(from, url)?;
    let to_id = parse_id(to, url)?;
    let present = |id: ObjectId| {
        repo.find_commit(id)
            .ok()
            .and_then(|c| c.tree_id().ok())
            .is_some_and(|t| repo.has_object(t))
    };
    if !present(to_id) {
        return Err(DiffError::ToUnavailable {
            url: url.to_string(),
            to: to.to_string(),
        });
    }
    if !present(from_id) {
        return Err(DiffError::FromUnavailable {
            url: url.to_string(),
            from: from.to_string(),
            to: to.to_string(),
        });
    }
    let err = |e: &(dyn std::error::Error + 'static)| DiffError::Diff {
        url: url.to_string(),
        from: from.to_string(),
        to: to.to_string(),
        cause: cause(e),
    };
    if from_id == to_id {
        return Ok(BTreeSet::new());
    }

    let old_listing = read::list(repo, from_id, url).map_err(|e| err(&e))?;
    let new_listing = read::list(repo, to_id, url).map_err(|e| err(&e))?;
    if !old_listing.links.is_empty() || !new_listing.links.is_empty() {
        let materialise = |id: ObjectId, hex: &str| -> Result<Tree, DiffError> {
            match known {
                Some((c, t)) if c == hex => Ok(t.clone()),
                _ => read::read_tree(repo, id, url).map_err(|e| err(&e)),
            }
        };
        let old = materialise(from_id, from)?;
        let new = materialise(to_id, to)?;
        return Ok(compare_trees(&old, &new));
    }

    let old_tree = repo
        .find_commit(from_id)
        .and_then(|c| c.tree())
        .map_err(|e| err(&e))?;
    let new_tree = repo
        .find_commit(to_id)
        .and_then(|c| c.tree())
        .map_err(|e| err(&e))?;
    let options = gix::diff::Options::default().with_rewrites(None);
    let changes = repo
        .diff_tree_to_tree(&old_tree, &new_tree, options)
        .map_err(|e| err(&e))?;
    let mut paths = BTreeSet::new();
    for change in changes {
        let (new_mode, _) = change.entry_mode_and_id();
        let (old_mode, _) = change.source_entry_mode_and_id();
        let is_content = |m: gix::objs::tree::EntryMode| m.is_blob_or_symlink();
        if is_content(new_mode) || is_content(old_mode) {
            paths.insert(read::to_path(change.location()));
        }
    }
    Ok(paths)
}

/// Paths present in only one tree or with different entries.
pub(crate) fn compare_trees(old: &Tree, new: &Tree) -> BTreeSet<PathBuf> {
    let mut paths: BTreeSet<PathBuf> = BTreeSet::new();
    for (p, e) in &old.entries {
        if new.entries.get(p) != Some(e) {
            paths.insert(p.clone());
        }
    }
    for p in new.entries.keys() {
        if !old.entries.contains_key(p) {
            paths.insert(p.clone());
        }
    }
    paths
}
