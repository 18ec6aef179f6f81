//! The Git source: follow one branch, tag or pinned commit of a remote repository and hand the
//! agent a [`Revision`] (commit id plus every file of its tree) whenever it moves.
//!
//! ```text
//!   remote ──ls-refs──▶ remote_commit()            cheap poll: handshake only, no pack
//!          ──fetch────▶ bare mirror (cache_dir) ──read──▶ Revision { commit, Tree }
//!                                                │
//!                                                └──diff──▶ changed_paths(from, to)
//! ```
//!
//! Why it looks like this:
//!
//! - **Blocking API.** gix's HTTP transport is `reqwest::blocking`, which must not be created or
//!   dropped on a tokio runtime thread, and ssh:// runs the system `ssh` binary. Callers run
//!   [`GitSource`] methods inside `tokio::task::spawn_blocking`; `GitSource` is `Send`.
//! - **A persistent bare mirror** in [`SourceConfig::cache_dir`] (`mirror.rs`): restarts fetch
//!   incrementally instead of re-cloning, and the tracking ref remembers what the previous
//!   process synced, which becomes [`SyncOutcome::Updated::previous`].
//! - **Polling is cheap** (`remote.rs`): [`GitSource::remote_commit`] and the first half of
//!   [`GitSource::sync`] only list the followed ref; the pack is fetched only when it moved.
//! - **Failures keep the last good state.** A failed sync leaves [`GitSource::last_good`] alone, so
//!   the agent keeps reconciling the last revision it read while the remote is unreachable.
//! - **Force-pushes** are ordinary updates (force refspec); the old commit stays in the mirror,
//!   so [`GitSource::changed_paths`] stays exact (`diff.rs`).
//!
//! - **Verified commits only, when asked** ([`GitSource::set_verification`], `verify/`): a head
//!   whose signature (or, in [`verify::Mode::All`], one of whose commits since the last verified
//!   one) does not verify is refused like an unreachable remote: [`SourceError::Unverified`],
//!   and the last good revision stays. A head must also descend from the last verified commit
//!   (`verified.rs`: no rollback to an older signed commit without an admin's leave). The last
//!   verified commit is kept in the mirror (`refs/capstan/verified/…`) and by the caller outside
//!   it ([`Verification::floor`]), so a restarted agent, or the other replica, facing a refused
//!   head goes on with it.
//!
//! Transports: `https://`, `http://`, `ssh://` (with [`SourceConfig::ssh_key`] and
//! [`SourceConfig::known_hosts`]: `ssh -i KEY -o IdentitiesOnly=yes -o UserKnownHostsFile=FILE
//! -o StrictHostKeyChecking=yes`), `git://` and local paths (`file://` or a plain path; these run
//! `git-upload-pack`, so `git` must be installed).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use gix::ObjectId;

mod diff;
mod mirror;
mod read;
pub mod release;
mod remote;
mod verified;
pub mod verify;

pub use diff::DiffError;
pub use mirror::{MirrorError, PACK_LIMIT};
pub use read::ReadError;
pub use remote::RemoteError;

/// What to follow.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GitRef {
    /// A branch name without `refs/heads/`, e.g. `main`.
    Branch(String),
    /// A tag name without `refs/tags/`, annotated or lightweight.
    Tag(String),
    /// A full hexadecimal commit id (40 characters for SHA-1).
    Commit(String),
    /// The head of a GitHub pull request, `refs/pull/<n>/head` (what the agent plans on a PR).
    Pull(u64),
}

impl fmt::Display for GitRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GitRef::Branch(b) => write!(f, "branch {b}"),
            GitRef::Tag(t) => write!(f, "tag {t}"),
            GitRef::Commit(c) => write!(f, "commit {c}"),
            GitRef::Pull(n) => write!(f, "pull request #{n}"),
        }
    }
}

/// Where the repository is and how to reach it.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// `https://`, `http://`, `ssh://`, `git://`, `file://` or a local path.
    pub url: String,
    /// The branch, tag or commit to follow.
    pub reference: GitRef,
    /// Where the bare mirror lives; created if missing, reused across restarts.
    pub cache_dir: PathBuf,
    /// Private key for ssh:// (a read-only deploy key); must be mode 0600 or `ssh` ignores it.
    pub ssh_key: Option<PathBuf>,
    /// known_hosts file for ssh://; when set, host keys are checked strictly against it only.
    pub known_hosts: Option<PathBuf>,
    /// Fetch with depth 1 when the server supports it.
    pub shallow: bool,
    /// PEM file of CA certificates trusted for https:// remotes besides the system's roots (a
    /// self-hosted Git server with a private CA).
    pub ca_file: Option<PathBuf>,
}

/// A commit and every file of its tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    /// Full hexadecimal commit id.
    pub commit: String,
    /// The files, read as `read.rs` describes (symlinks resolved inside the repository); shared
    /// between the source's last good revision and the one handed out, not copied.
    pub tree: std::sync::Arc<capstan_layout::Tree>,
}

/// The result of [`GitSource::sync`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncOutcome {
    /// The ref still points at the commit of [`GitSource::last_good`].
    Unchanged(String),
    /// A new revision was read and is now [`GitSource::last_good`].
    Updated {
        /// The commit of the former `last_good`; after a restart, the commit the mirror had synced
        /// before (which can equal `revision.commit`); `None` on the very first sync.
        previous: Option<String>,
        /// The new revision.
        revision: Revision,
    },
}

/// Errors of the source. Every message names the URL and, where it applies, the reference.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The configuration cannot work (bad commit id, bad ref name, missing key file, ...).
    #[error("invalid source {reference} at {url}: {reason}")]
    InvalidConfig {
        /// The (credential-free) URL.
        url: String,
        /// The reference.
        reference: String,
        /// Why.
        reason: String,
    },
    /// The cache directory.
    #[error(transparent)]
    Mirror(#[from] MirrorError),
    /// The network.
    #[error(transparent)]
    Remote(#[from] RemoteError),
    /// Reading the tree.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// Diffing two commits.
    #[error(transparent)]
    Diff(#[from] DiffError),
    /// The head (or a commit since the last verified one) did not verify: nothing of it is read.
    #[error("revision {} refused: {}", .0.head, .0)]
    Unverified(Box<verify::Unverified>),
}

impl SourceError {
    /// Whether the caller should treat every path as changed (see [`DiffError::FromUnavailable`]).
    pub fn everything_changed(&self) -> bool {
        matches!(self, SourceError::Diff(DiffError::FromUnavailable { .. }))
    }
}

/// One followed ref of one remote repository, with its mirror and last good revision.
pub struct GitSource {
    cfg: SourceConfig,
    display_url: String,
    tracking: String,
    mirror: mirror::Mirror,
    last_good: Option<Revision>,
    /// The files of `last_good` by path with their blob ids: the next revision's unchanged
    /// files are taken from its tree ([`read::read_tree_after`]).
    last_files: BTreeMap<PathBuf, ObjectId>,
    /// Which commits must verify, with which keys (`None`: none).
    verification: Option<Verification>,
    /// The signature of `last_good`'s head, when verified.
    verified: Option<verify::Verified>,
}

/// What a [`GitSource`] verifies before it accepts a revision.
#[derive(Debug, Clone)]
pub struct Verification {
    /// The head alone, or every commit since the last verified one.
    pub mode: verify::Mode,
    /// The trusted keys, or why they could not be loaded (then every new revision is refused).
    pub keys: Result<std::sync::Arc<verify::TrustedKeys>, verify::KeysError>,
    /// The last verified commit as kept outside the mirror (the daemon keeps it in the
    /// [`POSITION_CONFIGMAP`], where a replaced pod and the other replica read it): the next
    /// head must descend from it. `Ok(None)`: none kept, so this process's own last good
    /// revision, else the mirror's, else none (the first head is trusted on first use).
    /// `Err`: it could not be read, and every new head is refused until it can.
    pub floor: Result<Option<String>, String>,
    /// Accept a head that does not descend from the floor (`capstan run --allow-rollback`).
    pub allow_rollback: bool,
}

/// The ConfigMap (in the agent's namespace) where `capstan run --verify-commits` keeps the last
/// verified commit of the source it follows ([`Verification::floor`]).
pub const POSITION_CONFIGMAP: &str = "capstan-source";

impl fmt::Debug for GitSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitSource")
            .field("url", &self.display_url)
            .field("reference", &self.cfg.reference)
            .field("cache_dir", &self.cfg.cache_dir)
            .field("last_good", &self.last_good.as_ref().map(|r| &r.commit))
            .finish()
    }
}

impl GitSource {
    /// Replaces a mirror full of packs with an empty one; the sync that follows fetches the
    /// branch afresh (shallow where the server allows) into a single pack. The last good revision
    /// stays in memory meanwhile.
    fn compact(&mut self) -> Result<(), SourceError> {
        let packs = self.mirror.packs();
        let dir = self.mirror.dir.clone();
        let (_, secret) = mirror::redact(&self.cfg.url);
        let ssh = mirror::ssh_command(self.cfg.ssh_key.as_deref(), self.cfg.known_hosts.as_deref());
        let roots = std::mem::take(&mut self.mirror.roots);
        std::fs::remove_dir_all(&dir).map_err(|e| MirrorError::Setup {
            action: "clear (to compact)",
            dir: dir.clone(),
            url: self.display_url.clone(),
            cause: e.to_string(),
        })?;
        self.mirror = mirror::Mirror::open(&dir, &self.display_url, secret, ssh)?;
        self.mirror.roots = roots;
        tracing::info!(url = %self.display_url, packs, "mirror compacted: fetching afresh into an empty one");
        Ok(())
    }

    /// Opens (or creates) the mirror in `cfg.cache_dir` and checks the configuration. No network.
    pub fn open(cfg: SourceConfig) -> Result<GitSource, SourceError> {
        let (display_url, secret) = mirror::redact(&cfg.url);
        let invalid = |reason: String| SourceError::InvalidConfig {
            url: display_url.clone(),
            reference: cfg.reference.to_string(),
            reason,
        };
        gix::url::parse(cfg.url.as_str()).map_err(|e| invalid(format!("not a Git URL: {e}")))?;
        match &cfg.reference {
            GitRef::Commit(c) => {
                let ok = c.len() == gix::hash::Kind::Sha1.len_in_hex()
                    && ObjectId::from_hex(c.as_bytes()).is_ok();
                if !ok {
                    return Err(invalid(
                        "a pinned commit must be a full 40-character hexadecimal id".into(),
                    ));
                }
            }
            GitRef::Branch(name) | GitRef::Tag(name) => {
                let full = remote::remote_name(&cfg.reference);
                if name.is_empty()
                    || name.starts_with("refs/")
                    || gix::validate::reference::name(full.as_str().into()).is_err()
                {
                    return Err(invalid(format!("{name:?} is not a valid short ref name")));
                }
            }
            GitRef::Pull(_) => {}
        }
        for (what, path) in [
            ("ssh key", &cfg.ssh_key),
            ("known_hosts file", &cfg.known_hosts),
            ("CA file", &cfg.ca_file),
        ] {
            if let Some(p) = path
                && !p.is_file()
            {
                return Err(invalid(format!("{what} {} does not exist", p.display())));
            }
        }
        let cfg = SourceConfig {
            reference: normalise(&cfg.reference),
            ..cfg
        };
        let ssh = mirror::ssh_command(cfg.ssh_key.as_deref(), cfg.known_hosts.as_deref());
        let roots = match &cfg.ca_file {
            None => Vec::new(),
            Some(path) => {
                let pem = std::fs::read(path)
                    .map_err(|e| invalid(format!("CA file {}: {e}", path.display())))?;
                match reqwest::Certificate::from_pem_bundle(&pem) {
                    Ok(certs) if !certs.is_empty() => certs,
                    Ok(_) => {
                        return Err(invalid(format!(
                            "CA file {} holds no PEM certificate",
                            path.display()
                        )));
                    }
                    Err(e) => return Err(invalid(format!("CA file {}: {e}", path.display()))),
                }
            }
        };
        let mut mirror = mirror::Mirror::open(&cfg.cache_dir, &display_url, secret, ssh)?;
        mirror.roots = roots;
        let tracking = mirror::tracking_ref(&cfg.reference);
        Ok(GitSource {
            cfg,
            display_url,
            tracking,
            mirror,
            last_good: None,
            last_files: BTreeMap::new(),
            verification: None,
            verified: None,
        })
    }

    /// The signature of the last good revision, when it was verified.
    pub fn verified(&self) -> Option<&verify::Verified> {
        self.verified.as_ref()
    }

    /// Verify commits from the next sync on (`None`: stop verifying). The keys can change
    /// between syncs (a rotated Secret).
    pub fn set_verification(&mut self, verification: Option<Verification>) {
        self.verification = verification;
    }

    /// The ref that remembers the last verified commit of the followed reference.
    fn verified_ref(&self) -> String {
        self.tracking
            .replacen("refs/capstan/", "refs/capstan/verified/", 1)
    }

    /// The configuration this source was opened with.
    pub fn config(&self) -> &SourceConfig {
        &self.cfg
    }

    /// The commit the followed ref points at on the remote (peeled through annotated tags), from
    /// the handshake and a filtered `ls-refs` only: no pack is downloaded and the mirror is not
    /// changed. A pinned commit cannot move and is returned without contacting the remote.
    pub fn remote_commit(&mut self) -> Result<String, SourceError> {
        if let GitRef::Commit(c) = &self.cfg.reference {
            return Ok(c.clone());
        }
        let ad = remote::list(
            &self.mirror,
            &self.cfg.url,
            &self.cfg.reference,
            &self.tracking,
        )?;
        let commit = ad
            .peeled
            .or_else(|| self.mirror.peel_to_commit(ad.target))
            .unwrap_or(ad.target);
        Ok(commit.to_string())
    }

    /// Brings the mirror up to date with the followed ref and reads the new revision if it moved
    /// (or on the first call). On error, [`last_good`](Self::last_good) is left as it was.
    pub fn sync(&mut self) -> Result<SyncOutcome, SourceError> {
        if self.mirror.needs_compaction() {
            self.compact()?;
        }
        let before = self.mirror.tracking_target(&self.tracking)?;
        let target = match &self.cfg.reference {
            GitRef::Commit(c) => {
                let id = ObjectId::from_hex(c.as_bytes()).expect("validated in open");
                if !self.mirror.has_commit(id) || (!self.cfg.shallow && self.mirror.is_shallow()) {
                    let shallow = remote::shallow_setting(&self.mirror, self.cfg.shallow, true);
                    remote::fetch_commit(&self.mirror, &self.cfg.url, id, &self.tracking, shallow)?;
                } else if before != Some(id) {
                    self.mirror.set_tracking(&self.tracking, id)?;
                }
                id
            }
            reference => {
                let ad = remote::list(&self.mirror, &self.cfg.url, reference, &self.tracking)?;
                let have = before == Some(ad.target)
                    && (self.cfg.shallow || !self.mirror.is_shallow())
                    && self
                        .mirror
                        .peel_to_commit(ad.target)
                        .is_some_and(|c| self.mirror.has_commit(c));
                if have {
                    ad.target
                } else {
                    let shallow = remote::shallow_setting(
                        &self.mirror,
                        self.cfg.shallow,
                        ad.shallow_supported,
                    );
                    remote::fetch(
                        &self.mirror,
                        &self.cfg.url,
                        reference,
                        &self.tracking,
                        shallow,
                    )?
                }
            }
        };
        let commit =
            self.mirror
                .peel_to_commit(target)
                .ok_or_else(|| SourceError::InvalidConfig {
                    url: self.display_url.clone(),
                    reference: self.cfg.reference.to_string(),
                    reason: format!("{target} does not point to a commit"),
                })?;
        let hex = commit.to_string();
        if let Some(last) = &self.last_good
            && last.commit == hex
        {
            return Ok(SyncOutcome::Unchanged(hex));
        }
        let verified = match self.verification.clone() {
            None => None,
            Some(v) => match self.verify(&v, commit) {
                Ok(verified) => Some(verified),
                Err(refused) => {
                    if self.last_good.is_none() {
                        self.restore_verified(&v);
                    }
                    tracing::warn!(url = %self.display_url, reference = %self.cfg.reference, commit = %hex, reason = refused.refused.why.as_str(), error = %refused, "revision refused: its signature does not verify");
                    return Err(SourceError::Unverified(Box::new(refused)));
                }
            },
        };
        let previous = self
            .last_good
            .as_ref()
            .map(|r| (&self.last_files, r.tree.as_ref()));
        let (tree, files) =
            read::read_tree_after(&self.mirror.repo, commit, &self.display_url, previous)?;
        self.last_files = files;
        let revision = Revision {
            commit: hex,
            tree: tree.into(),
        };
        let previous = match &self.last_good {
            Some(last) => Some(last.commit.clone()),
            None => before
                .and_then(|b| self.mirror.peel_to_commit(b))
                .map(|c| c.to_string()),
        };
        tracing::info!(url = %self.display_url, reference = %self.cfg.reference, commit = %revision.commit, ?previous, "source updated");
        if verified.is_some() {
            self.mirror.set_tracking(&self.verified_ref(), commit)?;
        }
        self.verified = verified;
        self.last_good = Some(revision.clone());
        Ok(SyncOutcome::Updated { previous, revision })
    }

    /// The last revision read successfully, kept across failed syncs.
    pub fn last_good(&self) -> Option<&Revision> {
        self.last_good.as_ref()
    }

    /// The files that differ between the trees of two fetched commits (added, removed, modified,
    /// both ends of a rename). [`SourceError::everything_changed`] is true when `from` is not in
    /// the mirror and the caller should treat every path as changed.
    pub fn changed_paths(&self, from: &str, to: &str) -> Result<BTreeSet<PathBuf>, SourceError> {
        let known = self
            .last_good
            .as_ref()
            .map(|r| (r.commit.as_str(), &*r.tree));
        Ok(diff::changed_paths(
            &self.mirror.repo,
            &self.display_url,
            from,
            to,
            known,
        )?)
    }
}

/// The `ssh` command the source runs for ssh:// remotes with this deploy key and known_hosts
/// (`None` when neither is set): for other Git commands that must reach the same remote alike
/// (`GIT_SSH_COMMAND` of the scaffolder's push).
pub fn ssh_command(
    key: Option<&std::path::Path>,
    known_hosts: Option<&std::path::Path>,
) -> Option<String> {
    mirror::ssh_command(key, known_hosts)
}

/// A URL with its password or token replaced by `***`, for messages.
pub fn redact_url(url: &str) -> String {
    mirror::redact(url).0
}

/// Reads the tree of `rev` (any Git revision expression: a branch, `origin/main`, a tag, a
/// commit id, `HEAD~2`) from the local repository at `path` (a working copy or a bare
/// repository), without a checkout and without touching the network.
pub fn read_local(path: &std::path::Path, rev: &str) -> Result<Revision, SourceError> {
    let url = path.display().to_string();
    let invalid = |reason: String| SourceError::InvalidConfig {
        url: url.clone(),
        reference: format!("revision {rev}"),
        reason,
    };
    let repo = gix::discover(path)
        .map_err(|e| invalid(format!("not a Git repository: {}", describe(&e))))?;
    let id = repo
        .rev_parse_single(rev)
        .map_err(|e| invalid(format!("unknown revision: {}", describe(&e))))?;
    let commit = id
        .object()
        .and_then(|o| o.peel_to_commit())
        .map_err(|e| invalid(format!("not a commit: {}", describe(&e))))?;
    let tree = read::read_tree(&repo, commit.id, &url)?;
    Ok(Revision {
        commit: commit.id.to_string(),
        tree: tree.into(),
    })
}

/// The commit a change was made from: the merge base of `base` and `head` (`HEAD` when None)
/// in the local repository at `path`, as a pull request's diff is taken (GitHub's three dots):
/// what the base branch gained since the change branched off is not part of the change.
pub fn merge_base(
    path: &std::path::Path,
    base: &str,
    head: Option<&str>,
) -> Result<String, SourceError> {
    let head = head.unwrap_or("HEAD");
    let url = path.display().to_string();
    let invalid = |reason: String| SourceError::InvalidConfig {
        url: url.clone(),
        reference: format!("merge base of {base} and {head}"),
        reason,
    };
    let repo = gix::discover(path)
        .map_err(|e| invalid(format!("not a Git repository: {}", describe(&e))))?;
    let commit = |rev: &str| {
        repo.rev_parse_single(rev)
            .map_err(|e| invalid(format!("unknown revision {rev}: {}", describe(&e))))?
            .object()
            .and_then(|o| o.peel_to_commit())
            .map(|c| c.id)
            .map_err(|e| invalid(format!("{rev} is not a commit: {}", describe(&e))))
    };
    let (a, b) = (commit(base)?, commit(head)?);
    match repo.merge_base(a, b) {
        Ok(Some(id)) => Ok(id.to_string()),
        Ok(None) => Err(invalid("the two have no common history".into())),
        Err(e) => Err(invalid(describe(&e))),
    }
}

/// An error and its causes on one line (`a: b: c`), for messages that must stand on their own
/// (callers often log only `Display`). gix errors are walked with their own traversal, which
/// also reaches causes that are not exposed through `source()`.
pub fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut push = |s: String| {
        let s = s.trim().to_string();
        if !s.is_empty() && !parts.iter().any(|p| p == &s) {
            parts.push(s);
        }
    };
    if let Some(g) = e.downcast_ref::<gix::Error>() {
        for cause in g.iter_errors() {
            push(cause.to_string());
        }
    } else {
        let mut next = Some(e);
        while let Some(cur) = next {
            push(cur.to_string());
            next = cur.source();
        }
    }
    parts.join(": ")
}

/// Commit ids in lower case, so they compare equal to what gix prints.
fn normalise(reference: &GitRef) -> GitRef {
    match reference {
        GitRef::Commit(c) => GitRef::Commit(c.to_ascii_lowercase()),
        other => other.clone(),
    }
}
