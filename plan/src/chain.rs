//! Chained upgrades: a control plane moves one Kubernetes minor at a time.
//!
//! kubeadm upgrades a control plane by one minor version and nothing more, so a spec that jumps
//! from 1.31 to 1.33 cannot be applied as it is. Cluster API's answer for ClusterClass clusters
//! (chained upgrades, v1.12) is to walk the minors in between; directly rendered control planes,
//! like capstan's and EKS Anywhere's, get none of it. So capstan walks them itself:
//!
//! ```text
//! live control plane 1.31, spec 1.33 ─▶ step: control plane 1.32, workers where they are
//!        (rolled out at 1.32)          ─▶ the spec: control plane 1.33, workers 1.33
//! ```
//!
//! The step is taken from the *rolled-out* version of the control plane (the lowest version of
//! its machines), not from its spec, so a step is complete before the next begins. Worker groups
//! skip the minors in between, as Cluster API's chained upgrades let them, unless the skew would
//! grow beyond what is allowed ([`MAX_WORKER_SKEW`]): then they move with the step.
//!
//! A downgrade of the control plane is refused: kubeadm cannot do it.

use std::collections::BTreeMap;

use capstan_templates::spec::KubeVersion;

/// How many minors a worker group may be behind its control plane (EKS Anywhere's rule, the
/// one `capstan validate` applies to specs).
pub const MAX_WORKER_SKEW: u32 = 2;

/// The minor of a Kubernetes version as Cluster API objects write it (`v1.32.8`,
/// `v1.32.8-eks-1-32-30`).
pub fn minor_of(version: &str) -> Option<KubeVersion> {
    let v = version.strip_prefix('v').unwrap_or(version);
    let mut parts = v.split(['.', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some(KubeVersion { major, minor })
}

/// What is live of a cluster's versions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Live {
    /// The control plane's `spec.version`.
    pub control_plane: Option<KubeVersion>,
    /// The lowest version among its machines (what it has rolled out).
    pub control_plane_rolled_out: Option<KubeVersion>,
    /// Worker groups' versions, by group name.
    pub workers: BTreeMap<String, KubeVersion>,
}

/// What to apply of a version change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chain {
    /// The spec as it is (no control plane yet, or at most one minor to go).
    Direct,
    /// One step of a chain: the control plane at `control_plane`, the worker groups at
    /// `workers`.
    Step {
        /// Where the control plane is (rolled out).
        from: KubeVersion,
        /// This step's control-plane version.
        control_plane: KubeVersion,
        /// Where the spec wants it.
        to: KubeVersion,
        /// Every worker group's version at this step.
        workers: BTreeMap<String, KubeVersion>,
    },
    /// Not applied at all, and why.
    Refused(String),
}

/// Decides how to apply a spec whose control plane asks for `desired` and whose worker groups
/// ask for `desired_workers`, given what is live. `chain: false` refuses a jump of several
/// minors instead of walking it (`--no-chain`).
pub fn decide(
    desired: KubeVersion,
    desired_workers: &BTreeMap<String, KubeVersion>,
    live: &Live,
    chain: bool,
) -> Chain {
    let Some(spec) = live.control_plane else {
        return Chain::Direct;
    };
    if desired.major != spec.major || desired.minor < spec.minor {
        return Chain::Refused(format!(
            "the control plane runs Kubernetes {spec} and the spec asks for {desired}: a downgrade, which kubeadm cannot do"
        ));
    }
    let from = live.control_plane_rolled_out.map_or(spec, |r| r.min(spec));
    if desired.minor <= from.minor + 1 {
        return Chain::Direct;
    }
    if !chain {
        return Chain::Refused(format!(
            "the control plane runs Kubernetes {from} and the spec asks for {desired}: {} minors at once, and chained upgrades are off (--no-chain); upgrade one minor at a time",
            desired.minor - from.minor
        ));
    }
    let step = KubeVersion {
        major: from.major,
        minor: from.minor + 1,
    };
    let workers = desired_workers
        .iter()
        .map(|(group, want)| {
            let highest = (*want).min(step);
            let lowest = step.minor.saturating_sub(MAX_WORKER_SKEW);
            let at = match live.workers.get(group) {
                // Where it is, while the skew allows and it is not ahead.
                Some(now) if now.minor >= lowest && *now <= highest => *now,
                // A new group, or one that must move: as far as this step allows.
                _ => highest,
            };
            (group.clone(), at)
        })
        .collect();
    Chain::Step {
        from,
        control_plane: step,
        to: desired,
        workers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(minor: u32) -> KubeVersion {
        KubeVersion { major: 1, minor }
    }

    fn live(spec: u32, rolled: u32, workers: &[(&str, u32)]) -> Live {
        Live {
            control_plane: Some(v(spec)),
            control_plane_rolled_out: Some(v(rolled)),
            workers: workers
                .iter()
                .map(|(g, m)| (g.to_string(), v(*m)))
                .collect(),
        }
    }

    fn want(workers: &[(&str, u32)]) -> BTreeMap<String, KubeVersion> {
        workers
            .iter()
            .map(|(g, m)| (g.to_string(), v(*m)))
            .collect()
    }

    #[test]
    fn versions_as_cluster_api_writes_them() {
        assert_eq!(minor_of("v1.32.8"), Some(v(32)));
        assert_eq!(minor_of("v1.32.8-eks-1-32-30"), Some(v(32)));
        assert_eq!(minor_of("1.31.0"), Some(v(31)));
        assert_eq!(minor_of("garbage"), None);
    }

    #[test]
    fn one_minor_goes_directly() {
        let w = want(&[("md-0", 32)]);
        assert_eq!(
            decide(v(32), &w, &live(31, 31, &[("md-0", 31)]), true),
            Chain::Direct
        );
        assert_eq!(decide(v(33), &w, &Live::default(), true), Chain::Direct);
    }

    #[test]
    fn several_minors_walk_the_control_plane_and_let_workers_skip() {
        let w = want(&[("md-0", 34)]);
        let l = live(31, 31, &[("md-0", 31)]);
        assert_eq!(
            decide(v(34), &w, &l, true),
            Chain::Step {
                from: v(31),
                control_plane: v(32),
                to: v(34),
                workers: want(&[("md-0", 31)]),
            }
        );
        // The control plane's spec is at 1.32 but its machines are still rolling: same step.
        let l = live(32, 31, &[("md-0", 31)]);
        assert!(matches!(
            decide(v(34), &w, &l, true),
            Chain::Step { control_plane, .. } if control_plane == v(32)
        ));
        // Rolled out at 1.32: the next step; md-0 at 1.31 is still within two minors of 1.33.
        let l = live(32, 32, &[("md-0", 31)]);
        assert_eq!(
            decide(v(34), &w, &l, true),
            Chain::Step {
                from: v(32),
                control_plane: v(33),
                to: v(34),
                workers: want(&[("md-0", 31)]),
            }
        );
        // At 1.33: the spec itself, workers straight to 1.34.
        assert_eq!(
            decide(v(34), &w, &live(33, 33, &[("md-0", 31)]), true),
            Chain::Direct
        );
    }

    #[test]
    fn workers_move_with_a_step_when_the_skew_demands_it() {
        // md-0 at 1.30 cannot stay when the control plane goes to 1.33.
        let w = want(&[("md-0", 34), ("md-1", 31), ("new", 34)]);
        let l = live(32, 32, &[("md-0", 30), ("md-1", 31)]);
        let Chain::Step { workers, .. } = decide(v(34), &w, &l, true) else {
            panic!()
        };
        assert_eq!(workers, want(&[("md-0", 33), ("md-1", 31), ("new", 33)]));
    }

    #[test]
    fn refused_downgrades_and_unchained_jumps() {
        let w = want(&[]);
        assert!(matches!(
            decide(v(31), &w, &live(32, 32, &[]), true),
            Chain::Refused(m) if m.contains("downgrade")
        ));
        assert!(matches!(
            decide(v(34), &w, &live(32, 32, &[]), false),
            Chain::Refused(m) if m.contains("--no-chain")
        ));
    }
}
