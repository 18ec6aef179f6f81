//! The latest plan of each pull request the leader planned, kept for the dashboard's pull
//! requests page: the same words as the PR's comment and `capstan/plan` status, without asking
//! GitHub again. Held in memory by the replica that plans (the leader); the newest
//! [`KEPT`] pull requests are kept.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

/// How many pull requests' plans are kept.
pub const KEPT: usize = 50;

/// One pull request's latest plan.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Posted {
    /// The pull request's number.
    pub number: u64,
    /// The commit planned.
    pub head: String,
    /// `success`, `failure` or `error` (the plan could not be made or posted).
    pub state: &'static str,
    /// The status's description: what changes, or the first problem with its `file:line`.
    pub description: String,
    /// The plan as the comment says it (Markdown, shown as text).
    pub plan: String,
    /// When it was planned (RFC 3339).
    pub at: String,
}

/// The plans, newest pull request first.
#[derive(Debug, Clone, Default)]
pub struct Board(Arc<Mutex<BTreeMap<u64, Posted>>>);

impl Board {
    /// Records a pull request's latest plan, forgetting the oldest beyond [`KEPT`].
    pub fn record(&self, p: Posted) {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.insert(p.number, p);
        while all.len() > KEPT {
            all.pop_first();
        }
    }

    /// Forgets a pull request (closed or merged).
    pub fn remove(&self, number: u64) {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.remove(&number);
    }

    /// Every kept plan, the newest pull request first.
    pub fn all(&self) -> Vec<Posted> {
        let all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.values().rev().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn posted(number: u64, head: &str) -> Posted {
        Posted {
            number,
            head: head.into(),
            state: "success",
            description: "no cluster changes".into(),
            plan: String::new(),
            at: String::new(),
        }
    }

    #[test]
    fn the_latest_plan_of_each_pull_request_newest_first_bounded() {
        let b = Board::default();
        b.record(posted(3, "a"));
        b.record(posted(7, "b"));
        b.record(posted(3, "c"));
        let all = b.all();
        assert_eq!(all.len(), 2);
        assert_eq!(
            (all[0].number, all[1].number, all[1].head.as_str()),
            (7, 3, "c")
        );
        // A closed pull request leaves.
        b.remove(7);
        assert_eq!(b.all().iter().map(|p| p.number).collect::<Vec<_>>(), [3]);
        b.record(posted(7, "d"));
        for n in 100..100 + KEPT as u64 + 5 {
            b.record(posted(n, "x"));
        }
        let all = b.all();
        assert_eq!(all.len(), KEPT);
        assert_eq!(all.last().unwrap().number, 105);
    }
}
