//! The bare mirror on disk: the only state the source keeps between restarts.
//!
//! Why a bare repository of our own rather than a checkout: the agent never needs a working tree
//! (it reads blobs straight from the object database into a [`capstan_layout::Tree`]), and a bare
//! mirror makes every later fetch incremental, so a restarted agent does not re-clone. The mirror
//! records
//!
//! - the remote URL in `remote.origin.url` (so `git -C <cache> remote -v` tells a human what it is,
//!   and so a changed URL is noticed: the tracking refs are then dropped, objects are kept), and
//! - one tracking ref per configured reference under `refs/capstan/` (`branches/<name>`,
//!   `tags/<name>`, `commits/<hex>`), written by fetch. Its value is what the remote advertised
//!   for the ref (a tag object for an annotated tag), which is what the "has it moved?" check
//!   compares against, and after a restart it is the revision the previous process synced.
//!
//! We never use `refs/heads/*` or a configured fetch refspec, so nothing outside `refs/capstan/`
//! is touched and the same cache directory cannot be confused with a user's clone.
//!
//! SSH settings (deploy key, known_hosts) are passed as in-memory configuration overrides
//! (`core.sshCommand`, `ssh.variant`) when the repository is opened: they never end up in the
//! mirror's config file, and they take precedence over whatever the user's `~/.gitconfig` says.

use std::path::{Path, PathBuf};

use gix::ObjectId;
use gix::bstr::ByteSlice;

use super::GitRef;

/// Errors of the on-disk mirror.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// The cache directory exists, is not empty and is not a bare Git repository.
    #[error("cache directory {} for {url} is not empty and not a Git repository: {cause}", .dir.display())]
    NotARepository {
        /// The cache directory.
        dir: PathBuf,
        /// The (credential-free) remote URL.
        url: String,
        /// What gix said.
        cause: String,
    },
    /// Creating, opening or configuring the mirror failed.
    #[error("cannot {action} the mirror of {url} in {}: {cause}", .dir.display())]
    Setup {
        /// What we were doing.
        action: &'static str,
        /// The cache directory.
        dir: PathBuf,
        /// The (credential-free) remote URL.
        url: String,
        /// What failed.
        cause: String,
    },
    /// Reading or writing a tracking ref failed.
    #[error("cannot {action} {name} in the mirror of {url}: {cause}")]
    Ref {
        /// What we were doing.
        action: &'static str,
        /// The ref name.
        name: String,
        /// The (credential-free) remote URL.
        url: String,
        /// What failed.
        cause: String,
    },
}

/// The bare mirror and the settings it was opened with.
pub(crate) struct Mirror {
    pub(crate) repo: gix::Repository,
    pub(crate) dir: PathBuf,
    /// Credential-free URL, for messages and the mirror's config.
    pub(crate) display_url: String,
    /// The password of the URL, if it has one, scrubbed from every message.
    secret: Option<String>,
    /// Extra CA certificates trusted for https:// (besides the system's roots).
    pub(crate) roots: Vec<reqwest::Certificate>,
}

/// The URL with its password (if any) replaced by `***`, and the password. Over http(s) a user
/// name without a password is treated as a token (`https://<token>@host/…`) and hidden too; an
/// ssh user name (`ssh://git@host/…`) is not a secret.
pub(crate) fn redact(url: &str) -> (String, Option<String>) {
    if let Some((scheme, rest)) = url.split_once("://") {
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if let Some((userinfo, host)) = authority.rsplit_once('@') {
            match userinfo.split_once(':') {
                Some((user, password)) if !password.is_empty() => {
                    return (
                        format!("{scheme}://{user}:***@{host}{path}"),
                        Some(password.to_string()),
                    );
                }
                None if !userinfo.is_empty() && scheme.to_ascii_lowercase().starts_with("http") => {
                    return (
                        format!("{scheme}://***@{host}{path}"),
                        Some(userinfo.to_string()),
                    );
                }
                _ => {}
            }
        }
    }
    (url.to_string(), None)
}

/// Decodes `%XX` escapes (a password may appear decoded in gix's messages).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Some(v) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The in-memory configuration for ssh:// URLs: use exactly this key and known_hosts file, never
/// prompt, never hang forever on a dead connection.
pub(crate) fn ssh_command(key: Option<&Path>, known_hosts: Option<&Path>) -> Option<String> {
    if key.is_none() && known_hosts.is_none() {
        return None;
    }
    let mut cmd = String::from(
        "ssh -o BatchMode=yes -o ConnectTimeout=20 -o ServerAliveInterval=15 -o ServerAliveCountMax=4",
    );
    if let Some(key) = key {
        cmd.push_str(" -o IdentitiesOnly=yes -i ");
        cmd.push_str(&shell_quote(&key.to_string_lossy()));
    }
    if let Some(kh) = known_hosts {
        cmd.push_str(" -o StrictHostKeyChecking=yes -o GlobalKnownHostsFile=/dev/null -o UserKnownHostsFile=");
        cmd.push_str(&shell_quote(&kh.to_string_lossy()));
    }
    Some(cmd)
}

/// Single-quotes `s` for `sh` (gix runs a `core.sshCommand` with arguments through the shell).
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The tracking ref of a configured reference.
pub(crate) fn tracking_ref(reference: &GitRef) -> String {
    match reference {
        GitRef::Branch(b) => format!("refs/capstan/branches/{b}"),
        GitRef::Tag(t) => format!("refs/capstan/tags/{t}"),
        GitRef::Commit(c) => format!("refs/capstan/commits/{c}"),
        GitRef::Pull(n) => format!("refs/capstan/pulls/{n}"),
    }
}

fn cause(e: &(dyn std::error::Error + 'static)) -> String {
    super::describe(e)
}

/// Packs the mirror may pile up (one per fetch that brought objects) before it is rebuilt by a
/// fresh fetch into an empty mirror: a long-running agent fetches every push, and gix neither
/// repacks nor can hold an unbounded number of pack indices open. (Git's own `gc --auto` repacks
/// at 50 packs.)
pub const PACK_LIMIT: usize = 64;

impl Mirror {
    /// Pack indices in the object store.
    pub(crate) fn packs(&self) -> usize {
        std::fs::read_dir(self.repo.objects.store_ref().path().join("pack"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.path().extension().is_some_and(|x| x == "idx"))
                    .count()
            })
            .unwrap_or(0)
    }

    /// Whether enough packs have piled up that the next sync starts from an empty mirror.
    pub(crate) fn needs_compaction(&self) -> bool {
        self.packs() > PACK_LIMIT
    }

    /// Opens the bare mirror in `dir`, creating it if `dir` is missing or empty. No network.
    pub(crate) fn open(
        dir: &Path,
        display_url: &str,
        secret: Option<String>,
        ssh_command: Option<String>,
    ) -> Result<Mirror, MirrorError> {
        let setup =
            |action: &'static str, e: &(dyn std::error::Error + 'static)| MirrorError::Setup {
                action,
                dir: dir.to_path_buf(),
                url: display_url.to_string(),
                cause: cause(e),
            };
        let empty = match std::fs::read_dir(dir) {
            Ok(mut entries) => entries.next().is_none(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir).map_err(|e| setup("create", &e))?;
                true
            }
            Err(e) => return Err(setup("read", &e)),
        };
        if empty {
            gix::init_bare(dir).map_err(|e| setup("initialise", &e))?;
        }

        let mut overrides: Vec<String> = Vec::new();
        if let Some(cmd) = ssh_command {
            overrides.push(format!("core.sshCommand={cmd}"));
            overrides.push("ssh.variant=ssh".to_string());
        }
        // Every fetch adds a pack, and the object store holds as many pack indices as it had
        // slots when opened: room for PACK_LIMIT and then some, and the mirror is rebuilt
        // before it gets there ([`Mirror::needs_compaction`]).
        let options = gix::open::Options::default()
            .config_overrides(overrides)
            .object_store_slots(gix::odb::store::init::Slots::AsNeededByDiskState {
                multiplier: 2.0,
                minimum: 2 * PACK_LIMIT,
            });
        let repo = gix::open_opts(dir, options).map_err(|e| MirrorError::NotARepository {
            dir: dir.to_path_buf(),
            url: display_url.to_string(),
            cause: cause(&e),
        })?;
        if !repo.is_bare() {
            return Err(MirrorError::NotARepository {
                dir: dir.to_path_buf(),
                url: display_url.to_string(),
                cause: "it has a working tree; the cache must be a bare mirror".into(),
            });
        }
        let mut mirror = Mirror {
            repo,
            dir: dir.to_path_buf(),
            display_url: display_url.to_string(),
            secret,
            roots: Vec::new(),
        };
        mirror.record_url(display_url)?;
        Ok(mirror)
    }

    /// An error's full chain as text, with the URL's password scrubbed.
    pub(crate) fn cause(&self, e: &(dyn std::error::Error + 'static)) -> String {
        let mut text = cause(e);
        if let Some(secret) = &self.secret {
            for s in [secret.clone(), percent_decode(secret)] {
                if !s.is_empty() {
                    text = text.replace(&s, "***");
                }
            }
        }
        text
    }

    /// Stores `url` (credential-free) as `remote.origin.url`; when a different URL was stored, the tracking refs
    /// are dropped so nothing synced from the old remote is mistaken for the new one's state.
    fn record_url(&mut self, url: &str) -> Result<(), MirrorError> {
        let stored = self
            .repo
            .config_snapshot()
            .string("remote.origin.url")
            .map(|s| s.to_str_lossy().into_owned());
        if stored.as_deref() == Some(url) {
            return Ok(());
        }
        if stored.is_some() {
            tracing::info!(url = %self.display_url, "source URL changed; dropping the mirror's tracking refs");
            self.drop_tracking_refs()?;
        }
        let err =
            |action: &'static str, e: &(dyn std::error::Error + 'static)| MirrorError::Setup {
                action,
                dir: self.dir.clone(),
                url: self.display_url.clone(),
                cause: cause(e),
            };
        let path = self
            .repo
            .config_path(gix::config::Source::Local)
            .map_err(|e| err("locate the config of", &e))?;
        let mut file = self
            .repo
            .config_file_mut(path)
            .map_err(|e| err("lock the config of", &e))?;
        file.set_raw_value("remote.origin.url", url)
            .map_err(|e| err("configure", &e))?;
        file.commit().map_err(|e| err("write the config of", &e))?;
        Ok(())
    }

    fn drop_tracking_refs(&self) -> Result<(), MirrorError> {
        let err = |e: &(dyn std::error::Error + 'static)| MirrorError::Ref {
            action: "delete",
            name: "refs/capstan/*".into(),
            url: self.display_url.clone(),
            cause: cause(e),
        };
        let platform = self.repo.references().map_err(|e| err(&e))?;
        let refs: Vec<_> = platform
            .prefixed("refs/capstan/")
            .map_err(|e| err(&e))?
            .filter_map(Result::ok)
            .collect();
        for r in refs {
            r.delete().map_err(|e| err(&e))?;
        }
        Ok(())
    }

    /// The value of a tracking ref (not peeled), if it exists.
    pub(crate) fn tracking_target(&self, name: &str) -> Result<Option<ObjectId>, MirrorError> {
        let found = self
            .repo
            .try_find_reference(name)
            .map_err(|e| MirrorError::Ref {
                action: "read",
                name: name.to_string(),
                url: self.display_url.clone(),
                cause: cause(&e),
            })?;
        Ok(found.and_then(|r| r.try_id().map(|id| id.detach())))
    }

    /// Points a tracking ref at `id` (used for pinned commits found through a full fetch).
    pub(crate) fn set_tracking(&self, name: &str, id: ObjectId) -> Result<(), MirrorError> {
        self.repo
            .reference(
                name,
                id,
                gix::refs::transaction::PreviousValue::Any,
                "capstan: pin",
            )
            .map(|_| ())
            .map_err(|e| MirrorError::Ref {
                action: "write",
                name: name.to_string(),
                url: self.display_url.clone(),
                cause: cause(&e),
            })
    }

    /// Peels `id` (a commit or a chain of tag objects) to a commit, if it is present locally.
    pub(crate) fn peel_to_commit(&self, id: ObjectId) -> Option<ObjectId> {
        let object = self.repo.try_find_object(id).ok()??;
        object.peel_to_commit().ok().map(|c| c.id)
    }

    /// Whether the mirror has a commit together with its root tree.
    pub(crate) fn has_commit(&self, id: ObjectId) -> bool {
        match self.repo.find_commit(id) {
            Ok(c) => c.tree_id().is_ok_and(|t| self.repo.has_object(t)),
            Err(_) => false,
        }
    }

    /// Whether the mirror has a `shallow` file (a history cut off at some depth).
    pub(crate) fn is_shallow(&self) -> bool {
        self.repo.is_shallow().unwrap_or(false)
    }
}
