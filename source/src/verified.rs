//! The source's side of commit verification: which commits of the mirror must verify before a
//! head is accepted, that the head moves forward from the last verified commit, and where that
//! commit is remembered.
//!
//! Why it looks like this:
//!
//! - **Forward only.** A push that moves the branch back to an older signed commit (or to an
//!   unrelated signed history) needs no signing key, only push rights: without a check it rolls
//!   the fleet back to a revision with, say, a known-bad Kubernetes version. So a head must
//!   descend from the last verified commit (the *floor*); one that does not is refused as
//!   [`Why::Rollback`] unless [`Verification::allow_rollback`] says an admin allows it, as
//!   TUF-style updaters refuse older metadata. The same head again is no rollback.
//! - **The floor outlives the pod.** It is, in order: the position the caller keeps outside the
//!   mirror ([`Verification::floor`]: the daemon's ConfigMap, which a replaced pod and the other
//!   replica read), this process's last good revision, the mirror's `refs/capstan/verified/…`.
//!   Without any (the very first sync), the head is trusted on first use.
//! - **Every history shape is a refusal, never a panic.** An ancestor, an unrelated history, the
//!   same commit, a floor the mirror lost: each ends in [`Unverified`] with a reason, so no push
//!   can stop the agent.
//! - [`verify::Mode::Head`] checks the head alone; [`verify::Mode::All`] every commit reachable
//!   from the head and not from the floor (a merge's second parent included). That walk needs
//!   the whole history, so a verifying source fetches without depth
//!   ([`super::SourceConfig::shallow`] false), and a commit whose parents are missing is refused
//!   rather than skipped.

use std::time::SystemTime;

use gix::ObjectId;

use super::verify::{self, Refused, Unverified, Verified, Why};
use super::{GitSource, Revision, Verification};

/// More commits than this between two verified heads are refused, not walked.
pub const MAX_COMMITS: usize = 10_000;

impl GitSource {
    /// Whether `head` may be accepted: Ok with its signature; Err names the first commit
    /// (oldest first) that does not verify, or why the head is no step forward.
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
        let floor = self
            .floor(v)
            .map_err(|detail| refuse(&hex, Why::Unreadable, detail))?;
        let commits = match floor {
            None => vec![head],
            Some(floor) if floor == head => vec![head],
            Some(floor) => {
                let forward = self
                    .descends(head, floor)
                    .map_err(|detail| refuse(&hex, Why::Unreadable, detail))?;
                if let Err(how) = forward {
                    if !v.allow_rollback {
                        return Err(refuse(&hex, Why::Rollback, rollback_detail(floor, how)));
                    }
                    tracing::warn!(url = %self.display_url, commit = %hex, floor = %floor, "accepting a head that does not descend from the last verified commit: --allow-rollback");
                }
                match v.mode {
                    verify::Mode::Head => vec![head],
                    verify::Mode::All => {
                        let hidden = self.mirror.has_commit(floor).then_some(floor);
                        let mut since = self
                            .since(head, hidden)
                            .map_err(|detail| refuse(&hex, Why::Unreadable, detail))?;
                        // Back to an ancestor (allowed): nothing new, the head itself still
                        // verifies with today's keys.
                        if since.is_empty() {
                            since.push(head);
                        }
                        since
                    }
                }
            }
        };
        let now = SystemTime::now();
        let mut of_head = None;
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
            let verified =
                verify::verify_commit(&commit, &data, keys, now).map_err(|refused| Unverified {
                    head: hex.clone(),
                    refused,
                })?;
            if id == head {
                of_head = Some(verified);
            }
        }
        of_head.ok_or_else(|| {
            refuse(
                &hex,
                Why::Unreadable,
                "the history walked from the head does not hold the head".into(),
            )
        })
    }

    /// The commit the next head must descend from and is verified from (see the module docs).
    /// Err: the caller's floor is no commit id.
    fn floor(&self, v: &Verification) -> Result<Option<ObjectId>, String> {
        let kept = v.floor.as_ref().map_err(|e| {
            format!("the last verified commit kept outside the mirror cannot be read: {e}")
        })?;
        if let Some(f) = kept {
            return ObjectId::from_hex(f.trim().as_bytes()).map(Some).map_err(|_| {
                format!(
                    "the last verified commit kept outside the mirror, {f:?}, is not a commit id"
                )
            });
        }
        Ok(match &self.last_good {
            Some(r) => ObjectId::from_hex(r.commit.as_bytes()).ok(),
            None => self
                .mirror
                .tracking_target(&self.verified_ref())
                .ok()
                .flatten(),
        })
    }

    /// Whether `head` descends from `floor`: Ok(Ok) if so, Ok(Err(how)) saying how it does not,
    /// Err when the history cannot be read.
    fn descends(&self, head: ObjectId, floor: ObjectId) -> Result<Result<(), Gone>, String> {
        if !self.mirror.has_commit(floor) {
            // A head that descends from the floor brings the floor with it (the fetch is
            // whole), so a floor the mirror does not have is not in the head's history.
            return Ok(Err(Gone::NotInHistory));
        }
        match self.mirror.repo.merge_base(head, floor) {
            Ok(Some(base)) if base.detach() == floor => Ok(Ok(())),
            Ok(Some(_)) => Ok(Err(Gone::Diverged)),
            Ok(None) => Ok(Err(Gone::Unrelated)),
            Err(e) => Err(format!(
                "cannot tell whether it descends from the last verified commit {floor}: {}",
                self.mirror.cause(&e)
            )),
        }
    }

    /// The commits reachable from `head` and not from `hidden`, oldest first.
    fn since(&self, head: ObjectId, hidden: Option<ObjectId>) -> Result<Vec<ObjectId>, String> {
        let what = match hidden {
            Some(h) => format!("the history since {h}"),
            None => "the head's history".to_string(),
        };
        let walk = self
            .mirror
            .repo
            .rev_walk([head])
            .with_hidden(hidden)
            .all()
            .map_err(|e| format!("cannot walk {what}: {}", self.mirror.cause(&e)))?;
        let mut out = Vec::new();
        for info in walk {
            let info =
                info.map_err(|e| format!("cannot walk {what}: {}", self.mirror.cause(&e)))?;
            out.push(info.id);
            if out.len() > MAX_COMMITS {
                return Err(format!(
                    "more than {MAX_COMMITS} commits in {what}; verify them another way and restart without --verify-commits=all once"
                ));
            }
        }
        out.reverse();
        Ok(out)
    }

    /// After a restart whose head is refused: the last verified commit (the caller's floor,
    /// else the mirror's), read as the last good revision when the mirror has it and it still
    /// verifies (keys may have changed since).
    pub(super) fn restore_verified(&mut self, v: &Verification) {
        let Ok(Some(id)) = self.floor(v) else {
            return;
        };
        if !self.mirror.has_commit(id) {
            tracing::warn!(url = %self.display_url, commit = %id, "the last verified commit is not in the mirror: nothing is applied until a head verifies");
            return;
        }
        let head_only = Verification {
            mode: verify::Mode::Head,
            keys: v.keys.clone(),
            floor: Ok(Some(id.to_string())),
            allow_rollback: false,
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

/// How a head fails to descend from the floor.
#[derive(Debug, Clone, Copy)]
enum Gone {
    /// The floor is not in the fetched history at all (the branch moved back past it, or to
    /// another history).
    NotInHistory,
    /// Both descend from an older common commit: a sibling history.
    Diverged,
    /// No common history.
    Unrelated,
}

fn rollback_detail(floor: ObjectId, how: Gone) -> String {
    let how = match how {
        Gone::NotInHistory => "the last verified commit is not in its history",
        Gone::Diverged => "it branches off before the last verified commit",
        Gone::Unrelated => "it shares no history with the last verified commit",
    };
    format!(
        "does not descend from {floor}, the last verified commit ({how}): a rollback, refused; an admin allows it with --allow-rollback, or by setting the verified position (ConfigMap capstan-system/{}) to the wanted commit",
        super::POSITION_CONFIGMAP
    )
}
