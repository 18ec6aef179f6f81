//! `capstan back-out`: a management cluster that manages itself taken down the way Cluster API
//! takes clusters down, decided from what the two clusters hold.
//!
//! A management cluster's agent never deletes the cluster it runs on: its API server holds the
//! objects whose finalizers the controllers need to tear the machines down. So the back-out is
//! the pivot backwards: capstan's agent in it stopped, the management cluster and its workload
//! clusters moved onto a temporary cluster (kind, `capstan dev up`'s), and there the workload
//! clusters deleted first and the management cluster last, each by capstan's own pass carrying
//! out its tombstone (the CAPI Cluster first, the rest once the machines are gone).
//!
//! It is driven by the repository, as every deletion is: the management directory holds a
//! tombstone, and so does every workload directory of it (the layout refuses the management
//! cluster's tombstone otherwise). It is refused, before anything is written, when:
//! - the management directory has no tombstone;
//! - a cluster on the management cluster is being deleted already (the agent carrying out a
//!   workload's tombstone): the move cannot take a half-deleted cluster, and it is soon gone;
//! - the management cluster holds a Cluster API cluster the back-out would not move (another
//!   team's, or one whose directory was removed): its objects would be lost with the API server.
//!
//! Where a run starts ([`start`]):
//!
//! | facts                                                  | start at                        |
//! |--------------------------------------------------------|---------------------------------|
//! | the temporary cluster's journal: a move of it, unfinished | [`Step::Move`] (resume it)   |
//! | the management Cluster still on the management cluster | [`Step::Stop`]                  |
//! | on the temporary cluster, with workload clusters there | [`Step::DeleteWorkloads`]       |
//! | on the temporary cluster alone                         | [`Step::DeleteManagement`]      |
//! | nowhere                                                | [`Step::Done`]                  |

use std::fmt;

use crate::pivot::Journaled;

/// The steps of a back-out, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// capstan's agent in the management cluster scaled to zero, its leader lease let go: it
    /// would re-create from Git what leaves.
    Stop,
    /// The management cluster and its workload clusters moved onto the temporary cluster.
    Move,
    /// The workload clusters deleted there, each by its tombstone, until gone.
    DeleteWorkloads,
    /// The management cluster deleted there by its tombstone, until gone.
    DeleteManagement,
    /// Nothing left.
    Done,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Step::Stop => "stop capstan's agent in the management cluster",
            Step::Move => "move everything onto the temporary cluster",
            Step::DeleteWorkloads => "delete the workload clusters",
            Step::DeleteManagement => "delete the management cluster",
            Step::Done => "done",
        })
    }
}

/// What the two ends hold, as read at the start of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The management directory holds a tombstone.
    pub tombstone: bool,
    /// The management cluster's Cluster API Cluster is on the management cluster itself.
    pub at_management: bool,
    /// It is on the temporary cluster.
    pub at_temporary: bool,
    /// The temporary cluster's move journal, if there is one.
    pub journal: Option<Journaled>,
    /// The fleet's workload clusters of this management cluster on the temporary cluster.
    pub workloads_at_temporary: usize,
    /// Clusters on the management cluster being deleted already (`namespace/name`).
    pub being_deleted: Vec<String>,
    /// Cluster API clusters on the management cluster the back-out would not move.
    pub others: Vec<String>,
}

/// Why the back-out is refused before anything is written, if it is.
pub fn refusal(management: &str, f: &Facts) -> Option<String> {
    if !f.tombstone {
        return Some(format!(
            "clusters/{management}/ has no tombstone: a management cluster is backed out only when the repository asks (`capstan delete cluster {management}` once every workload directory has one too)"
        ));
    }
    if !f.being_deleted.is_empty() {
        return Some(format!(
            "being deleted on the management cluster already ({}): the agent there is carrying out a tombstone; run this again once it is gone",
            f.being_deleted.join(", ")
        ));
    }
    if !f.others.is_empty() {
        return Some(format!(
            "the management cluster holds Cluster API clusters this back-out would not take ({}): their objects would be lost with its API server; give them tombstones in the repository or move them away first (`capstan move`)",
            f.others.join(", ")
        ));
    }
    None
}

/// Where a run starts.
pub fn start(f: &Facts) -> Step {
    match &f.journal {
        Some(j) if j.names_management && !j.done => Step::Move,
        _ if f.at_management => Step::Stop,
        _ if f.at_temporary && f.workloads_at_temporary > 0 => Step::DeleteWorkloads,
        _ if f.at_temporary => Step::DeleteManagement,
        _ => Step::Done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal(names_management: bool, done: bool) -> Option<Journaled> {
        Some(Journaled {
            names_management,
            done,
        })
    }

    #[test]
    fn a_back_out_starts_where_the_clusters_are() {
        let base = Facts {
            tombstone: true,
            ..Default::default()
        };
        let cases: Vec<(&str, Facts, Step)> = vec![
            (
                "not moved yet",
                Facts {
                    at_management: true,
                    ..base.clone()
                },
                Step::Stop,
            ),
            (
                "killed mid move: at both ends, the journal unfinished",
                Facts {
                    at_management: true,
                    at_temporary: true,
                    journal: journal(true, false),
                    ..base.clone()
                },
                Step::Move,
            ),
            (
                "killed after the copies were deleted at the source, before the journal finished",
                Facts {
                    at_temporary: true,
                    journal: journal(true, false),
                    workloads_at_temporary: 1,
                    ..base.clone()
                },
                Step::Move,
            ),
            (
                "moved, workload clusters there",
                Facts {
                    at_temporary: true,
                    journal: journal(true, true),
                    workloads_at_temporary: 2,
                    ..base.clone()
                },
                Step::DeleteWorkloads,
            ),
            (
                "moved, the workload clusters gone",
                Facts {
                    at_temporary: true,
                    journal: journal(true, true),
                    ..base.clone()
                },
                Step::DeleteManagement,
            ),
            (
                "an unrelated journal in the temporary cluster",
                Facts {
                    at_management: true,
                    journal: journal(false, false),
                    ..base.clone()
                },
                Step::Stop,
            ),
            ("gone everywhere", base.clone(), Step::Done),
        ];
        for (what, facts, want) in cases {
            assert_eq!(start(&facts), want, "{what}");
        }
    }

    #[test]
    fn a_back_out_is_refused_without_a_tombstone_mid_deletion_or_with_clusters_left_behind() {
        let ok = Facts {
            tombstone: true,
            at_management: true,
            ..Default::default()
        };
        assert_eq!(refusal("m", &ok), None);
        let cases: Vec<(&str, Facts, &str)> = vec![
            (
                "no tombstone",
                Facts {
                    tombstone: false,
                    ..ok.clone()
                },
                "clusters/m/ has no tombstone",
            ),
            (
                "a workload being deleted by the agent",
                Facts {
                    being_deleted: vec!["ns/w".into()],
                    ..ok.clone()
                },
                "being deleted on the management cluster already (ns/w)",
            ),
            (
                "a cluster the back-out would not take",
                Facts {
                    others: vec!["ns/theirs".into()],
                    ..ok.clone()
                },
                "would not take (ns/theirs)",
            ),
        ];
        for (what, facts, want) in cases {
            let why = refusal("m", &facts).unwrap_or_default();
            assert!(why.contains(want), "{what}: {why}");
        }
    }
}
