//! `capstan pivot`: where a run starts, decided from what the two clusters hold.
//!
//! A pivot creates the management cluster on a bootstrap cluster, installs capstan into it,
//! moves every object onto it and hands over to the capstan running there. Each step is
//! idempotent, and a run that died (or was stopped, e.g. to install Cluster API into the new
//! cluster) is resumed by running the same command again. What must never happen on a resume is
//! the one non-idempotent mistake: creating the management cluster on the bootstrap cluster a
//! second time after it was moved away. So the start is decided from facts read at both ends,
//! not from where the last run said it was:
//!
//! | facts                                               | start at                    |
//! |-----------------------------------------------------|-----------------------------|
//! | the new cluster's journal: a move of it, unfinished | [`Step::Move`] (resume it)  |
//! | the journal: that move finished                     | [`Step::HandOver`]          |
//! | the Cluster in the new cluster, not at the bootstrap| [`Step::HandOver`]          |
//! | anything else (nowhere yet, or at the bootstrap)    | [`Step::Create`]            |
//!
//! Creating is a pass of capstan's own reconciler, which finds nothing to do on a cluster that
//! exists; installing is server-side apply; the move resumes from its journal.
//!
//! The move takes the management cluster and the workload clusters of the fleet already on the
//! bootstrap cluster, but only those capstan's record there says are this management cluster's
//! ([`goes_along`]): the fleet's directory names are a tenant's to write, and a name alone must
//! not pull another team's cluster off a bootstrap cluster that is not throwaway.

use std::fmt;

use capstan_templates::identity;

use crate::moving::ClusterKey;
use crate::status::ManagedCluster;

/// The steps of a pivot, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// The management cluster created on the bootstrap cluster by capstan's pass, until Ready.
    Create,
    /// capstan installed into the new cluster, its agent scaled to zero until the move is done.
    Install,
    /// Every object of the management cluster (and of the workload clusters already on the
    /// bootstrap cluster) moved onto the new cluster.
    Move,
    /// The agent in the new cluster scaled up; done when it reports the management cluster
    /// applied from Git and Ready.
    HandOver,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Step::Create => "create the management cluster on the bootstrap cluster",
            Step::Install => "install capstan into the new cluster",
            Step::Move => "move everything onto the new cluster",
            Step::HandOver => "hand over to capstan in the new cluster",
        })
    }
}

/// A move recorded in the new cluster's journal (`capstan move`'s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journaled {
    /// Whether it names the management cluster.
    pub names_management: bool,
    /// Whether it finished.
    pub done: bool,
}

/// What the two ends hold, as read at the start of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The management cluster's Cluster API Cluster is on the bootstrap cluster.
    pub at_bootstrap: bool,
    /// It is on the new cluster (false when the new cluster is not known yet).
    pub at_target: bool,
    /// The new cluster's move journal, if there is one.
    pub journal: Option<Journaled>,
}

/// Where a run starts.
pub fn start(f: &Facts) -> Step {
    match &f.journal {
        Some(j) if j.names_management && !j.done => Step::Move,
        Some(j) if j.names_management && j.done => Step::HandOver,
        _ if f.at_target && !f.at_bootstrap => Step::HandOver,
        _ => Step::Create,
    }
}

/// Whether a workload cluster found on the bootstrap cluster goes with the management cluster:
/// capstan's record of it (its ManagedCluster there) names this management cluster and holds
/// that Cluster API Cluster. A directory of the fleet naming a cluster that the bootstrap cluster
/// holds for someone else (a bootstrap cluster that is not throwaway) does not take it along.
pub fn goes_along(record: Option<&ManagedCluster>, key: &ClusterKey, management: &str) -> bool {
    record.is_some_and(|r| {
        r.spec.management == management
            && r.status.as_ref().is_some_and(|s| {
                s.inventory.iter().any(|o| {
                    o.kind == "Cluster"
                        && identity::group(&o.api_version) == "cluster.x-k8s.io"
                        && o.namespace == key.namespace
                        && o.name == key.name
                })
            })
    })
}

/// The Cluster API Cluster capstan's record of a cluster holds, if it holds one: where a
/// tombstoned cluster (whose spec the repository no longer has) is found.
pub fn recorded_cluster(record: &ManagedCluster) -> Option<ClusterKey> {
    record.status.as_ref()?.inventory.iter().find_map(|o| {
        (o.kind == "Cluster" && identity::group(&o.api_version) == "cluster.x-k8s.io").then(|| {
            ClusterKey {
                namespace: o.namespace.clone(),
                name: o.name.clone(),
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_pivot_never_creates_the_management_cluster_again_once_it_moved() {
        let j = |names_management, done| {
            Some(Journaled {
                names_management,
                done,
            })
        };
        let cases = [
            // (at bootstrap, at target, journal) → start
            ((false, false, None), Step::Create),
            ((true, false, None), Step::Create),
            // Half moved: the Cluster is at both ends (copied, not yet deleted).
            ((true, true, j(true, false)), Step::Move),
            // Paused or copying, Cluster not yet in the target.
            ((true, false, j(true, false)), Step::Move),
            // Deleted at the source, not yet unpaused.
            ((false, true, j(true, false)), Step::Move),
            ((false, true, j(true, true)), Step::HandOver),
            // The journal was removed by hand: the Cluster's place decides.
            ((false, true, None), Step::HandOver),
            // Another move's journal (workload clusters only) says nothing of this one.
            ((true, false, j(false, true)), Step::Create),
            ((false, true, j(false, false)), Step::HandOver),
            // At both ends without a journal: not this pivot's copy; the move refuses it.
            ((true, true, None), Step::Create),
        ];
        for ((at_bootstrap, at_target, journal), want) in cases {
            let f = Facts {
                at_bootstrap,
                at_target,
                journal: journal.clone(),
            };
            assert_eq!(start(&f), want, "{f:?}");
        }
    }

    #[test]
    fn a_workload_cluster_goes_along_only_when_the_fleets_record_of_it_says_so() {
        let record = |management: &str, ns: &str, name: &str, kind: &str| {
            let mut r = ManagedCluster::new(
                name,
                crate::status::ManagedClusterSpec {
                    management: management.into(),
                    directory: format!("clusters/{management}/workload-clusters/{name}"),
                },
            );
            r.status = Some(crate::status::ManagedClusterStatus {
                inventory: vec![crate::ObjectRef {
                    api_version: "cluster.x-k8s.io/v1beta2".into(),
                    kind: kind.into(),
                    namespace: ns.into(),
                    name: name.into(),
                    hash: String::new(),
                    generation: 0,
                    fields: String::new(),
                }],
                ..Default::default()
            });
            r
        };
        let key: ClusterKey = "fleet/w".parse().unwrap();
        let cases = [
            (Some(record("m", "fleet", "w", "Cluster")), true),
            (None, false),
            // Another management cluster's, or a record of a cluster of another namespace.
            (Some(record("other", "fleet", "w", "Cluster")), false),
            (Some(record("m", "elsewhere", "w", "Cluster")), false),
            // Its inventory holds no Cluster of that name.
            (
                Some(record("m", "fleet", "w", "KubeadmControlPlane")),
                false,
            ),
        ];
        for (r, want) in cases {
            assert_eq!(goes_along(r.as_ref(), &key, "m"), want, "{r:?}");
        }
        // Where a record says its cluster is (a tombstoned directory has no spec to say it).
        assert_eq!(
            recorded_cluster(&record("m", "fleet", "w", "Cluster")),
            Some(key.clone())
        );
        assert_eq!(
            recorded_cluster(&record("m", "fleet", "w", "KubeadmControlPlane")),
            None
        );
    }
}
