//! Live plans on pull requests: the Atlantis model for cluster specs.
//!
//! ```text
//! pull_request webhook (opened, synchronize, reopened; HMAC-verified) ─▶ PrQueue (newest push per PR)
//! a new leader lists the open PRs (super::resync): each as its synchronize ──▶ the same PrQueue
//!     └─▶ planner task: fetch refs/pull/N/head and the base branch from the followed remote
//!             ─▶ validate + render both (capstan diff's comparison: impact, notes, errors)
//!             ─▶ plan the head against live state (Agent::plan_cluster: dry runs, nothing written)
//!             ─▶ one comment per PR, edited in place (found again by its marker), and
//!                the commit status capstan/plan on the head commit
//! ```
//!
//! The planner is its own task with its own mirror (`<cache>-pulls`), so a PR neither waits for
//! nor delays a reconcile, and never applies anything. It runs on the leader only (a follower
//! hands the PRs it receives over: [`super::handover`]) and reads live state from the leader's
//! agent and its watch cache ([`crate::reconcile::Agent`]): a push to a PR lists nothing, however
//! large the fleet (before, the planner had an agent of its own without watches, which listed
//! every Cluster API kind whole on every push, beside the daemon's watches). It leaves the
//! daemon's scope alone; a kind only the PR renders gets its watch (metadata only, capstan's
//! objects only), which the revision that merges it needs anyway.
//!
//! A pull request whose head lives in a fork is planned only with `--pr-plans-from-forks`:
//! planning runs the fork author's specs through the renderer and a server-side dry run with the
//! agent's credentials.
//!
//! The PR fails `capstan/plan` when a cluster does not validate (the first error, with its
//! file:line), a field is blocked, or a file outside `clusters/` changed (capstan applies nothing
//! from there, and a fleet repository should not hide other changes in a cluster PR).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use capstan_layout::load;
use serde_json::Value;
use tokio::sync::Notify;

use super::{GitHub, GitHubError, StatusState};
use crate::metrics::{GitHubResult, Metrics};
use crate::plan::Action;
use crate::plan::compare::{changed_outside, compare};
use crate::plan::report::{COMMENT_LIMIT, ClusterReport, Report};
use crate::reconcile::{Agent, Options};
use crate::source::{GitRef, GitSource, Revision, SourceConfig};

/// The hidden marker of the plan comment: how the agent finds its comment again.
pub const MARKER: &str = "<!-- capstan:plan -->";
/// The commit status context of PR plans.
pub const CONTEXT: &str = "capstan/plan";

/// What a `pull_request` delivery asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrEvent {
    /// The PR number.
    pub number: u64,
    /// The head commit.
    pub head_sha: String,
    /// The base branch (`main`).
    pub base_ref: String,
    /// Closed (or merged): its plan leaves the dashboard's board; nothing is planned.
    pub closed: bool,
}

/// Why a `pull_request` delivery is not planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// Another action (closed, labeled, …).
    Action(String),
    /// Into another branch than the followed one.
    Base(String),
    /// From a fork, without `--pr-plans-from-forks`.
    Fork(String),
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::Action(a) => write!(f, "pull_request action {a:?} is not planned"),
            Skip::Base(b) => write!(f, "pull request into {b}, not the followed branch"),
            Skip::Fork(r) => write!(
                f,
                "pull request from the fork {r}: planned only with --pr-plans-from-forks"
            ),
        }
    }
}

/// Reads a `pull_request` payload: what to plan, or why not. `Err` for a payload that is not
/// GitHub's.
pub fn parse(payload: &[u8], branch: &str, forks: bool) -> Result<Result<PrEvent, Skip>, String> {
    let v: Value = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
    let action = v.get("action").and_then(Value::as_str).ok_or("no action")?;
    let pull = v.get("pull_request").unwrap_or(&Value::Null);
    let number = pull
        .get("number")
        .or_else(|| v.get("number"))
        .and_then(Value::as_u64)
        .ok_or("no pull request number")?;
    event(action, number, pull, branch, forks)
}

/// What to plan of a pull request listed open ([`GitHub::open_pull_requests`]), or why not:
/// what a `synchronize` delivery of it would say. `Err` for an object that is not GitHub's.
pub fn listed(pull: &Value, branch: &str, forks: bool) -> Result<Result<PrEvent, Skip>, String> {
    let number = pull
        .get("number")
        .and_then(Value::as_u64)
        .ok_or("no pull request number")?;
    event("synchronize", number, pull, branch, forks)
}

/// The one reading of a pull request object (a delivery's `pull_request`, or one of a list).
fn event(
    action: &str,
    number: u64,
    pull: &Value,
    branch: &str,
    forks: bool,
) -> Result<Result<PrEvent, Skip>, String> {
    let s = |p: &str| pull.pointer(p).and_then(Value::as_str);
    let head_sha = s("/head/sha").ok_or("no head sha")?;
    let base_ref = s("/base/ref").ok_or("no base ref")?;
    if !matches!(action, "opened" | "synchronize" | "reopened" | "closed") {
        return Ok(Err(Skip::Action(action.to_string())));
    }
    let followed = branch.strip_prefix("refs/heads/").unwrap_or(branch);
    if base_ref != followed {
        return Ok(Err(Skip::Base(base_ref.to_string())));
    }
    let base_repo = s("/base/repo/full_name").unwrap_or("");
    // A deleted fork has no head repository: still a fork.
    let head_repo = s("/head/repo/full_name").unwrap_or("(deleted fork)");
    if head_repo != base_repo && !forks {
        return Ok(Err(Skip::Fork(head_repo.to_string())));
    }
    Ok(Ok(PrEvent {
        number,
        head_sha: head_sha.to_string(),
        base_ref: base_ref.to_string(),
        closed: action == "closed",
    }))
}

/// Pull requests waiting to be planned, the newest push of each. Cheap to clone.
#[derive(Clone, Default)]
pub struct PrQueue {
    pending: Arc<Mutex<Pending>>,
    wake: Arc<Notify>,
}

#[derive(Default)]
struct Pending {
    events: BTreeMap<u64, PrEvent>,
    /// While the open pull requests are listed ([`PrQueue::listing`]): the PRs pushed since.
    pushed_while_listing: Option<BTreeSet<u64>>,
}

impl std::fmt::Debug for PrQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PrQueue")
    }
}

impl PrQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a PR (replacing an older push of it still waiting).
    pub fn push(&self, e: PrEvent) {
        {
            let mut p = self.lock();
            if let Some(pushed) = &mut p.pushed_while_listing {
                pushed.insert(e.number);
            }
            p.events.insert(e.number, e);
        }
        self.wake.notify_one();
    }

    /// Notes that the open pull requests are being listed: the PRs pushed from now on are left
    /// out of [`PrQueue::offer_listed`].
    pub fn listing(&self) {
        self.lock().pushed_while_listing = Some(BTreeSet::new());
    }

    /// Queues what a listing begun with [`PrQueue::listing`] found, but the PRs pushed since
    /// (a webhook's word is as new or newer: one closed meanwhile must not come back) and those
    /// still waiting; how many were queued.
    pub fn offer_listed(&self, listed: Vec<PrEvent>) -> usize {
        let queued = {
            let mut p = self.lock();
            let pushed = p.pushed_while_listing.take().unwrap_or_default();
            let mut queued = 0;
            for e in listed {
                if !pushed.contains(&e.number) && !p.events.contains_key(&e.number) {
                    p.events.insert(e.number, e);
                    queued += 1;
                }
            }
            queued
        };
        if queued > 0 {
            self.wake.notify_one();
        }
        queued
    }

    /// Waits for the next PR to plan (or, on a follower, to hand over), lowest number first.
    /// Cancel-safe: a PR is taken only when this returns.
    pub async fn next(&self) -> PrEvent {
        loop {
            let next = {
                let mut p = self.lock();
                let k = p.events.keys().next().copied();
                k.and_then(|k| p.events.remove(&k))
            };
            match next {
                Some(e) => return e,
                None => self.wake.notified().await,
            }
        }
    }
}

/// What the planner needs.
pub struct Planner {
    /// The followed remote (its URL and credentials; the reference is replaced).
    pub source: SourceConfig,
    /// The management cluster this agent runs on.
    pub management: Option<String>,
    /// GitHub.
    pub github: GitHub,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Where each plan is kept for the dashboard.
    pub board: crate::dashboard::board::Board,
}

impl Planner {
    /// Plans queued pull requests, one at a time, until the process ends, against the live
    /// state of `agent` (the leader's, with its watch cache).
    pub async fn run(self, queue: PrQueue, agent: Arc<Agent>) {
        loop {
            let e = queue.next().await;
            if e.closed {
                self.board.remove(e.number);
                tracing::info!(
                    pr = e.number,
                    "pull request closed: its plan leaves the board"
                );
                continue;
            }
            let result = self.plan(&e, &agent).await;
            match result {
                Ok(()) => self.metrics.inc_pr_plan(GitHubResult::Posted),
                Err(err) => {
                    self.metrics.inc_pr_plan(GitHubResult::Failed);
                    self.board.record(crate::dashboard::board::Posted {
                        number: e.number,
                        head: e.head_sha.clone(),
                        state: "error",
                        description: crate::errors::error_chain(&err),
                        plan: String::new(),
                        at: k8s_openapi::jiff::Timestamp::now().to_string(),
                    });
                    match err.downcast_ref::<GitHubError>() {
                        Some(GitHubError::Forbidden { .. }) => {
                            tracing::error!(pr = e.number, error = %crate::errors::error_chain(&err), "cannot post the plan of a pull request; reconciling goes on")
                        }
                        _ => {
                            tracing::warn!(pr = e.number, error = %crate::errors::error_chain(&err), "planning the pull request failed")
                        }
                    }
                }
            }
        }
    }

    fn fetch(
        &self,
        reference: GitRef,
    ) -> tokio::task::JoinHandle<Result<Revision, crate::source::SourceError>> {
        let mut cfg = self.source.clone();
        cfg.reference = reference;
        // Deep enough that both revisions are there; a shallow mirror of PR heads is fine.
        cfg.cache_dir = PathBuf::from(format!("{}-pulls", self.source.cache_dir.display()));
        tokio::task::spawn_blocking(move || {
            let mut src = GitSource::open(cfg)?;
            src.sync()?;
            Ok(src.last_good().cloned().expect("synced"))
        })
    }

    async fn plan(&self, e: &PrEvent, agent: &Agent) -> anyhow::Result<()> {
        let short: String = e.head_sha.chars().take(7).collect();
        tracing::info!(pr = e.number, head = %e.head_sha, "planning pull request");
        self.github
            .set_status(
                &e.head_sha,
                CONTEXT,
                StatusState::Pending,
                "capstan is planning this change",
                None,
            )
            .await?;
        let head = self.fetch(GitRef::Pull(e.number)).await??;
        let base = self.fetch(GitRef::Branch(e.base_ref.clone())).await??;
        let (base_fleet, head_fleet) = (load(&base.tree), load(&head.tree));
        let planned: String = head.commit.chars().take(7).collect();
        let mut report = compare(
            &format!("capstan plan of #{} at {planned}", e.number),
            &base_fleet,
            &head_fleet,
            changed_outside(&base.tree, &head.tree),
        );
        let opts = Options {
            management: self.management.clone(),
            revision: head.commit.clone(),
            concurrency: 2,
            ..Default::default()
        };
        let live = live_plan(agent, &head_fleet, &opts)
            .await
            .map_err(|e| e.to_string());
        merge_live(&mut report, live);
        let problem = report.first_problem().or_else(|| {
            (!report.outside.is_empty()).then(|| {
                format!(
                    "files outside clusters/ changed: {}",
                    report.outside.join(", ")
                )
            })
        });
        let body = format!(
            "{MARKER}\n{}",
            report.markdown(COMMENT_LIMIT - MARKER.len() - 1)
        );
        let done = self.github.upsert_comment(e.number, MARKER, &body).await?;
        tracing::info!(pr = e.number, comment = ?done, "plan comment posted");
        let (state, description) = match problem {
            Some(p) => (StatusState::Failure, p),
            None if report.has_changes() => (
                StatusState::Success,
                format!(
                    "{} clusters change; see the plan comment",
                    report.clusters.iter().filter(|c| c.has_changes()).count()
                ),
            ),
            None => (StatusState::Success, "no cluster changes".into()),
        };
        self.board.record(crate::dashboard::board::Posted {
            number: e.number,
            head: head.commit.clone(),
            state: match state {
                StatusState::Failure => "failure",
                _ => "success",
            },
            description: description.clone(),
            plan: body
                .strip_prefix(MARKER)
                .unwrap_or(&body)
                .trim_start()
                .to_string(),
            at: k8s_openapi::jiff::Timestamp::now().to_string(),
        });
        // The status goes on the commit that was planned (the PR may have moved since; its
        // newer push is queued and planned next).
        self.github
            .set_status(&head.commit, CONTEXT, state, &description, None)
            .await?;
        if head.commit != e.head_sha {
            tracing::info!(pr = e.number, webhook = %short, planned = %planned, "the pull request moved while fetching");
        }
        Ok(())
    }
}

/// The plan of every cluster of a revision against live state, one cluster after the other.
async fn live_plan(
    agent: &Agent,
    fleet: &capstan_layout::Fleet,
    opts: &Options,
) -> Result<crate::reconcile::Outcome, crate::reconcile::ReconcileError> {
    let scope = agent.prepare_plan(fleet, opts).await?;
    let names: Vec<String> = scope.clusters().map(|(n, _)| n.to_string()).collect();
    let mut out = crate::reconcile::Outcome::default();
    for name in names {
        let run = agent.plan_cluster(fleet, opts, &scope, &name).await?;
        out.clusters.push(run.outcome);
    }
    Ok(out)
}

/// Puts the live plan's entries in place of the rendered diff's (what the server would do
/// beats what the revisions differ in), adds clusters only the live plan changes (drift), and
/// says when there is no live plan.
fn merge_live(report: &mut Report, live: Result<crate::reconcile::Outcome, String>) {
    let out = match live {
        Ok(o) => o,
        Err(e) => {
            report.title.push_str(" (rendered diff only)");
            for c in &mut report.clusters {
                c.notes.push(format!("no live plan: {e}"));
            }
            return;
        }
    };
    report.title.push_str(" against live state");
    for c in out.clusters {
        let entries: Vec<_> = c
            .plan
            .entries
            .into_iter()
            .filter(|e| e.action != Action::Unchanged)
            .collect();
        let failed = c.phase == crate::status::Phase::Failed;
        match report.clusters.iter_mut().find(|r| r.name == c.name) {
            Some(r) => {
                r.entries = entries;
                if failed && r.errors.is_empty() && !c.message.is_empty() {
                    r.errors.push(c.message);
                }
            }
            None if !entries.is_empty() || failed => report.clusters.push(ClusterReport {
                name: c.name,
                entries,
                errors: if failed { vec![c.message] } else { Vec::new() },
                notes: vec!["unchanged in the pull request, but the live cluster differs".into()],
                ..Default::default()
            }),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn payload(action: &str, base: &str, head_repo: Option<&str>) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "action": action,
            "number": 7,
            "pull_request": {
                "number": 7,
                "head": {"sha": "abc", "ref": "feature", "repo": head_repo.map(|r| json!({"full_name": r}))},
                "base": {"ref": base, "repo": {"full_name": "acme/fleet"}},
            },
        }))
        .unwrap()
    }

    #[test]
    fn opened_synchronize_and_reopened_into_the_followed_branch_are_planned() {
        for a in ["opened", "synchronize", "reopened"] {
            let e = parse(&payload(a, "main", Some("acme/fleet")), "main", false)
                .unwrap()
                .unwrap();
            assert_eq!((e.number, e.head_sha.as_str()), (7, "abc"));
        }
        // Closed: not planned, but taken, so that its plan leaves the board.
        let closed = parse(
            &payload("closed", "main", Some("acme/fleet")),
            "main",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(closed.closed);
        assert_eq!(
            parse(
                &payload("labeled", "main", Some("acme/fleet")),
                "main",
                false
            )
            .unwrap(),
            Err(Skip::Action("labeled".into()))
        );
        assert_eq!(
            parse(
                &payload("opened", "dev", Some("acme/fleet")),
                "refs/heads/main",
                false
            )
            .unwrap(),
            Err(Skip::Base("dev".into()))
        );
        assert!(parse(b"{}", "main", false).is_err());
    }

    #[test]
    fn forks_only_with_the_flag() {
        let fork = payload("opened", "main", Some("mallory/fleet"));
        assert_eq!(
            parse(&fork, "main", false).unwrap(),
            Err(Skip::Fork("mallory/fleet".into()))
        );
        assert!(parse(&fork, "main", true).unwrap().is_ok());
        let deleted = payload("opened", "main", None);
        assert!(matches!(
            parse(&deleted, "main", false).unwrap(),
            Err(Skip::Fork(_))
        ));
    }

    #[tokio::test]
    async fn the_queue_keeps_the_newest_push_of_each_pr() {
        let q = PrQueue::default();
        let e = |n, sha: &str| PrEvent {
            number: n,
            head_sha: sha.into(),
            base_ref: "main".into(),
            closed: false,
        };
        q.push(e(2, "a"));
        q.push(e(1, "b"));
        q.push(e(2, "c"));
        assert_eq!(q.next().await, e(1, "b"));
        assert_eq!(q.next().await, e(2, "c"));
        // What a listing found: not a PR waiting already, nor one pushed (closed) since the
        // listing began; the others are queued.
        q.push(e(3, "d"));
        q.listing();
        let mut closed = e(5, "e");
        closed.closed = true;
        q.push(closed.clone());
        assert_eq!(
            q.offer_listed(vec![e(3, "listed"), e(4, "listed"), e(5, "listed")]),
            1
        );
        assert_eq!(q.next().await, e(3, "d"));
        assert_eq!(q.next().await, e(4, "listed"));
        assert_eq!(q.next().await, closed);
        // The listing over, pushes are no longer noted.
        q.push(e(6, "f"));
        assert_eq!(q.next().await, e(6, "f"));
        assert_eq!(q.offer_listed(vec![e(6, "listed")]), 1);
    }

    #[test]
    fn a_listed_pull_request_reads_as_its_synchronize_delivery() {
        let v: Value =
            serde_json::from_slice(&payload("opened", "main", Some("acme/fleet"))).unwrap();
        let pull = &v["pull_request"];
        let e = listed(pull, "main", false).unwrap().unwrap();
        assert_eq!(
            e,
            PrEvent {
                number: 7,
                head_sha: "abc".into(),
                base_ref: "main".into(),
                closed: false
            }
        );
        assert_eq!(
            listed(pull, "dev", false).unwrap(),
            Err(Skip::Base("main".into()))
        );
        let fork: Value =
            serde_json::from_slice(&payload("opened", "main", Some("mallory/fleet"))).unwrap();
        assert!(matches!(
            listed(&fork["pull_request"], "main", false).unwrap(),
            Err(Skip::Fork(_))
        ));
        assert!(listed(&json!({"number": 1}), "main", false).is_err());
    }
}
