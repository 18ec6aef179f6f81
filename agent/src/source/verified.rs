//! The source's side of commit verification: which commits of the mirror must verify before a
//! head is accepted, and the last verified commit kept across restarts.
//!
//! [`verify::Mode::Head`] checks the head alone. [`verify::Mode::All`] checks every commit
//! reachable from the head and not from the last verified commit (the last good revision, or
//! after a restart the mirror's `refs/capstan/verified/…`); with neither, the head alone. That
//! walk needs the whole history, so a source in that mode fetches without depth (the caller
//! sets [`super::SourceConfig::shallow`] to false), and a commit whose parents are missing is
//! refused rather than skipped.

use std::time::SystemTime;

use gix::ObjectId;

use super::verify::{self, Refused, Unverified, Verified, Why};
use super::{GitSource, Revision, Verification};

/// More commits than this between two verified heads are refused, not walked.
pub const MAX_COMMITS: usize = 10_000;

impl GitSource {
    /// Whether `head` may be accepted: Ok with its signature; Err names the first commit
    /// (oldest first) that does not verify.
    pub(super) fn verify(&self, v: &Verification, head: ObjectId) -> Result<Verified, Unverified> {
        let hex = head.to_string();
        let refuse = |commit: &str, why: Why, detail: String| Unverified {
            head: hex.clone(),
            refused: Refused::new(commit, why, detail),
        };
        let keys = match &v.keys {
            Ok(k) => k,
            Err(e) => {
                return Err(refuse(
                    &hex,
                    Why::NoTrustedKeys,
                    format!("the trusted keys could not be loaded: {e}"),
                ));
            }
        };
        let commits = match (v.mode, self.verified_base()) {
            (verify::Mode::All, Some(base)) => self
                .since(head, base)
                .map_err(|detail| refuse(&hex, Why::Unreadable, detail))?,
            _ => vec![head],
        };
        let now = SystemTime::now();
        let mut last = None;
        for id in commits {
            let commit = id.to_string();
            let data = self
                .mirror
                .repo
                .find_object(id)
                .map_err(|e| {
                    refuse(
                        &commit,
                        Why::Unreadable,
                        format!("cannot read it from the mirror: {}", self.mirror.cause(&e)),
                    )
                })?
                .detach()
                .data;
            last = Some(
                verify::verify_commit(&commit, &data, keys, now).map_err(|refused| Unverified {
                    head: hex.clone(),
                    refused,
                })?,
            );
        }
        Ok(last.expect("the walk holds the head"))
    }

    /// The commit the next head is verified from: the last good revision, else the one a
    /// previous process verified.
    fn verified_base(&self) -> Option<ObjectId> {
        match &self.last_good {
            Some(r) => ObjectId::from_hex(r.commit.as_bytes()).ok(),
            None => self
                .mirror
                .tracking_target(&self.verified_ref())
                .ok()
                .flatten(),
        }
    }

    /// The commits reachable from `head` and not from `base`, oldest first.
    fn since(&self, head: ObjectId, base: ObjectId) -> Result<Vec<ObjectId>, String> {
        let walk = self
            .mirror
            .repo
            .rev_walk([head])
            .with_hidden([base])
            .all()
            .map_err(|e| {
                format!(
                    "cannot walk the history since {base}: {}",
                    self.mirror.cause(&e)
                )
            })?;
        let mut out = Vec::new();
        for info in walk {
            let info = info.map_err(|e| {
                format!(
                    "cannot walk the history since {base}: {}",
                    self.mirror.cause(&e)
                )
            })?;
            out.push(info.id);
            if out.len() > MAX_COMMITS {
                return Err(format!(
                    "more than {MAX_COMMITS} commits since the last verified commit {base}; verify them another way and restart without --verify-commits=all once"
                ));
            }
        }
        out.reverse();
        Ok(out)
    }

    /// After a restart whose head is refused: the last commit a previous process verified, read
    /// as the last good revision when it still verifies (keys may have changed since).
    pub(super) fn restore_verified(&mut self, v: &Verification) {
        let Ok(Some(id)) = self.mirror.tracking_target(&self.verified_ref()) else {
            return;
        };
        let head_only = Verification {
            mode: verify::Mode::Head,
            keys: v.keys.clone(),
        };
        let verified = match self.verify(&head_only, id) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(url = %self.display_url, commit = %id, error = %e, "the last verified commit does not verify any more");
                return;
            }
        };
        match super::read::read_tree_after(&self.mirror.repo, id, &self.display_url, None) {
            Ok((tree, files)) => {
                tracing::info!(url = %self.display_url, commit = %id, "going on with the last verified commit");
                self.last_files = files;
                self.verified = Some(verified);
                self.last_good = Some(Revision {
                    commit: id.to_string(),
                    tree: tree.into(),
                });
            }
            Err(e) => {
                tracing::warn!(url = %self.display_url, commit = %id, error = %e, "cannot read the last verified commit")
            }
        }
    }
}
