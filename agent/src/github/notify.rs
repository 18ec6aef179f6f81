//! Commit statuses for what the agent applied, sent off the reconcile path.
//!
//! For every revision it applies, the agent reports each cluster on that commit as
//! `capstan/<cluster>`: pending while Applying or Progressing, success when Ready, failure when
//! Failed (with the phase message), as Flux's notification-controller does for Kustomizations.
//! A merged pull request then shows, on its merge commit, when its clusters are actually ready.
//!
//! The daemon only calls [`Statuses::report`], which records the newest state per context and
//! returns at once; one task posts them. A context that moves again before it was posted is
//! posted once, in its newest state; a state already posted is not posted again; GitHub being
//! slow, rate-limited or down delays statuses, never a reconcile.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use super::{GitHub, GitHubError, StatusState};
use crate::metrics::{GitHubResult, Metrics};
use crate::status::Phase;

/// One commit status to post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// The commit.
    pub sha: String,
    /// State.
    pub state: StatusState,
    /// Description.
    pub description: String,
}

/// The state a cluster's phase maps to (None: nothing worth a status, e.g. Suspended).
pub fn state_of(phase: Phase) -> Option<StatusState> {
    match phase {
        Phase::Pending
        | Phase::Applying
        | Phase::Progressing
        | Phase::Upgrading
        | Phase::Deleting => Some(StatusState::Pending),
        Phase::Ready => Some(StatusState::Success),
        Phase::Failed => Some(StatusState::Failure),
        Phase::Orphaned | Phase::Suspended | Phase::Unknown => None,
    }
}

#[derive(Default)]
struct Inner {
    /// Newest wanted state per context.
    wanted: BTreeMap<String, Update>,
    /// What was posted last per context.
    posted: BTreeMap<String, Update>,
}

/// The handle the daemon reports through. Cheap to clone.
#[derive(Clone)]
pub struct Statuses {
    inner: Arc<Mutex<Inner>>,
    wake: Arc<Notify>,
}

impl Statuses {
    /// Starts the posting task.
    pub fn start(github: GitHub, metrics: Arc<Metrics>) -> Statuses {
        let s = Statuses {
            inner: Arc::default(),
            wake: Arc::new(Notify::new()),
        };
        let worker = s.clone();
        tokio::spawn(async move { worker.run(github, metrics).await });
        s
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a cluster's phase on a commit; returns at once.
    pub fn report(&self, sha: &str, cluster: &str, phase: Phase, message: &str) {
        let Some(state) = state_of(phase) else {
            return;
        };
        let description = if message.is_empty() {
            phase.as_str().to_string()
        } else {
            format!("{}: {message}", phase.as_str())
        };
        let update = Update {
            sha: sha.to_string(),
            state,
            description,
        };
        let context = format!("capstan/{cluster}");
        {
            let mut inner = self.lock();
            if inner.posted.get(&context) == Some(&update) {
                inner.wanted.remove(&context);
                return;
            }
            inner.wanted.insert(context, update);
        }
        self.wake.notify_one();
    }

    async fn run(&self, github: GitHub, metrics: Arc<Metrics>) {
        loop {
            let next = {
                let mut inner = self.lock();
                let key = inner.wanted.keys().next().cloned();
                key.and_then(|k| inner.wanted.remove(&k).map(|u| (k, u)))
            };
            let Some((context, update)) = next else {
                self.wake.notified().await;
                continue;
            };
            match github
                .set_status(
                    &update.sha,
                    &context,
                    update.state,
                    &update.description,
                    None,
                )
                .await
            {
                Ok(()) => {
                    metrics.inc_commit_status(GitHubResult::Posted);
                    tracing::info!(context, sha = %update.sha, state = update.state.as_str(), "commit status posted");
                    self.lock().posted.insert(context, update);
                }
                Err(e) => {
                    metrics.inc_commit_status(GitHubResult::Failed);
                    match e {
                        GitHubError::Forbidden { .. } => {
                            tracing::error!(context, error = %e, "cannot post commit statuses; reconciling goes on")
                        }
                        _ => {
                            tracing::warn!(context, error = %e, "commit status not posted; retrying later");
                            // Put it back unless something newer came meanwhile.
                            self.lock().wanted.entry(context).or_insert(update);
                            tokio::time::sleep(Duration::from_secs(30)).await;
                        }
                    }
                }
            }
        }
    }
}
