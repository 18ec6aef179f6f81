//! A new leader plans the pull requests already open.
//!
//! Why: the plans the dashboard shows are held in the leader's memory ([`crate::dashboard::board`]) and
//! filled when a `pull_request` webhook arrives. After a restart or a failover the new leader
//! has none, and GitHub does not deliver again, so the page would stay empty until each pull
//! request's next push. When a replica starts to lead with the PR workflow on, it lists the
//! repository's open pull requests ([`GitHub::open_pull_requests`]) and queues each one as
//! its `synchronize` delivery would ([`super::pr::listed`], [`PrQueue::offer_listed`]): the
//! same filters (followed base branch, forks only with `--pr-plans-from-forks`), the same
//! planner one at a time, the same comment (edited in place, left alone when it already says
//! the same, found again by its marker) and the same `capstan/plan` status. A PR a webhook told
//! of while the listing was under way is left to that webhook (closed meanwhile, it stays off).
//!
//! Only the newest [`KEPT`] are planned: the board shows no more, and planning every open pull
//! request of a busy repository on each failover would spend GitHub's rate limit on plans the
//! page cannot show (their comments and statuses from before still stand on GitHub). A listing
//! that fails is logged and tried again with the reconcile queue's backoff (2 s doubling to
//! 5 min, jittered), on its own task: reconciling never waits for it.

use serde_json::Value;
use tokio::task::JoinHandle;

use super::pr::{PrEvent, PrQueue, listed};
use super::{GitHub, GitHubError};
use crate::dashboard::board::{Board, KEPT};

/// What a new leader needs to plan what is open.
#[derive(Debug, Clone)]
pub struct Resync {
    /// The repository.
    pub github: GitHub,
    /// The plans already made (by this leader, from webhooks that came first).
    pub board: Board,
    /// The followed branch (pull requests into another one are not planned).
    pub branch: String,
    /// Plan pull requests from forks too.
    pub forks: bool,
}

/// Which of the listed pull requests are planned.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Chosen {
    /// To plan, the newest first.
    pub plan: Vec<PrEvent>,
    /// Not planned, and why.
    pub skipped: Vec<(u64, String)>,
}

/// Sorts the listed pull requests (GitHub's objects) as their `synchronize` deliveries would
/// be, leaves out those `planned` already holds at the same head, and keeps the newest [`KEPT`].
pub fn choose(
    open: &[Value],
    branch: &str,
    forks: bool,
    planned: &[crate::dashboard::board::Posted],
) -> Chosen {
    let mut chosen = Chosen::default();
    for pull in open {
        let number = pull.get("number").and_then(Value::as_u64).unwrap_or(0);
        match listed(pull, branch, forks) {
            Ok(Ok(e))
                if planned
                    .iter()
                    .any(|p| p.number == e.number && p.head == e.head_sha) =>
            {
                chosen
                    .skipped
                    .push((number, "planned at this head already".into()))
            }
            Ok(Ok(e)) => chosen.plan.push(e),
            Ok(Err(skip)) => chosen.skipped.push((number, skip.to_string())),
            Err(why) => chosen
                .skipped
                .push((number, format!("not a pull request object: {why}"))),
        }
    }
    chosen.plan.sort_by_key(|e| std::cmp::Reverse(e.number));
    for e in chosen.plan.split_off(chosen.plan.len().min(KEPT)) {
        chosen.skipped.push((
            e.number,
            format!("older than the {KEPT} newest open pull requests the dashboard keeps"),
        ));
    }
    chosen
}

impl Resync {
    /// Lists and queues on a task of its own, trying again with backoff until one listing
    /// succeeds.
    pub fn start(self, queue: PrQueue) -> JoinHandle<()> {
        tokio::spawn(async move {
            let mut failures = 0;
            loop {
                match self.once(&queue).await {
                    Ok(()) => return,
                    Err(e) => {
                        failures += 1;
                        let wait = crate::schedule::backoff(failures, fastrand::f64());
                        let error = e.to_string();
                        if let GitHubError::Forbidden { .. } = e {
                            tracing::error!(%error, retry_in_s = wait.as_secs(), "cannot list the open pull requests to plan them again; the dashboard shows each after its next push");
                        } else {
                            tracing::warn!(%error, retry_in_s = wait.as_secs(), "listing the open pull requests to plan them again failed; retrying");
                        }
                        tokio::time::sleep(wait).await;
                    }
                }
            }
        })
    }

    /// One listing: every open pull request worth a plan queued.
    async fn once(&self, queue: &PrQueue) -> Result<(), GitHubError> {
        queue.listing();
        let open = self.github.open_pull_requests().await?;
        let chosen = choose(&open, &self.branch, self.forks, &self.board.all());
        for (pr, why) in &chosen.skipped {
            tracing::debug!(pr, why, "open pull request not planned again");
        }
        // Those a webhook told of meanwhile are left to it (closed, or pushed again).
        let queued = queue.offer_listed(chosen.plan);
        tracing::info!(
            open = open.len(),
            queued,
            skipped = chosen.skipped.len(),
            "open pull requests listed; planning them again for the new leader"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pull(number: u64, sha: &str, base: &str, head_repo: &str) -> Value {
        json!({
            "number": number,
            "state": "open",
            "head": {"sha": sha, "ref": format!("pr-{number}"), "repo": {"full_name": head_repo}},
            "base": {"ref": base, "repo": {"full_name": "acme/fleet"}},
        })
    }

    fn event(number: u64, sha: &str) -> PrEvent {
        PrEvent {
            number,
            head_sha: sha.into(),
            base_ref: "main".into(),
            closed: false,
        }
    }

    #[test]
    fn open_pull_requests_are_sorted_as_their_deliveries_would_be() {
        let open = [
            pull(9, "a9", "main", "acme/fleet"),
            pull(8, "a8", "release/1.x", "acme/fleet"),
            pull(7, "a7", "main", "mallory/fleet"),
            pull(6, "a6", "main", "acme/fleet"),
            pull(5, "a5", "main", "acme/fleet"),
            json!({"number": 4}),
        ];
        let planned = [crate::dashboard::board::Posted {
            number: 5,
            head: "a5".into(),
            state: "success",
            description: String::new(),
            plan: String::new(),
            at: String::new(),
        }];
        let c = choose(&open, "main", false, &planned);
        assert_eq!(c.plan, vec![event(9, "a9"), event(6, "a6")]);
        let skipped: Vec<u64> = c.skipped.iter().map(|(n, _)| *n).collect();
        assert_eq!(skipped, [8, 7, 5, 4]);
        assert!(c.skipped[1].1.contains("fork"), "{:?}", c.skipped);
        // With forks on, the fork is planned too.
        assert_eq!(choose(&open, "main", true, &planned).plan.len(), 3);
    }

    #[test]
    fn only_the_newest_the_board_keeps_are_planned() {
        let open: Vec<Value> = (1..=KEPT as u64 + 3)
            .map(|n| pull(n, "s", "main", "acme/fleet"))
            .collect();
        let c = choose(&open, "main", false, &[]);
        assert_eq!(c.plan.len(), KEPT);
        assert_eq!(c.plan[0].number, KEPT as u64 + 3);
        assert_eq!(c.plan.last().unwrap().number, 4);
        assert_eq!(c.skipped.len(), 3);
    }
}
