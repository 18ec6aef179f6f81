//! Each cluster's last phase and how many clusters are in each, for the clusters-by-phase gauge:
//! kept as runs finish, not recounted over the fleet after every run.

use std::collections::BTreeMap;

use crate::serve::Metrics;
use crate::status::Phase;

/// Each cluster's last phase, and how many clusters are in each: kept as runs finish, not
/// recounted over the fleet after every run (ten thousand runs over ten thousand clusters).
#[derive(Default)]
pub(super) struct Phases {
    of: BTreeMap<String, Phase>,
    counts: BTreeMap<&'static str, i64>,
}

impl Phases {
    /// Records `name`'s phase; returns the one before.
    pub(super) fn insert(&mut self, name: &str, phase: Phase) -> Option<Phase> {
        let was = match self.of.get_mut(name) {
            Some(p) => Some(std::mem::replace(p, phase)),
            None => {
                self.of.insert(name.to_string(), phase);
                None
            }
        };
        if let Some(w) = was {
            self.uncount(w);
        }
        *self.counts.entry(phase.as_str()).or_default() += 1;
        was
    }

    fn uncount(&mut self, phase: Phase) {
        if let Some(n) = self.counts.get_mut(phase.as_str()) {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(phase.as_str());
            }
        }
    }

    /// Forgets the clusters `keep` refuses.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        let mut gone = Vec::new();
        self.of.retain(|n, p| {
            let k = keep(n);
            if !k {
                gone.push(*p);
            }
            k
        });
        for p in gone {
            self.uncount(p);
        }
    }

    /// Sets the clusters-by-phase gauge.
    pub(super) fn publish(&self, metrics: &Metrics) {
        metrics.set_cluster_phases(self.counts.iter().map(|(k, v)| (*k, *v)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phase_counts_follow_every_change() {
        // Random phases recorded and clusters forgotten; after each step the kept counts agree
        // with a count over every cluster.
        let mut rng = fastrand::Rng::with_seed(11);
        let all = [Phase::Ready, Phase::Failed, Phase::Orphaned, Phase::Unknown];
        let mut phases = Phases::default();
        for step in 0..2_000 {
            let name = format!("w{}", rng.usize(..8));
            if rng.u8(..5) == 0 {
                phases.retain(|n| n != name);
            } else {
                phases.insert(&name, all[rng.usize(..all.len())]);
            }
            let mut counted = BTreeMap::<&str, i64>::new();
            for p in phases.of.values() {
                *counted.entry(p.as_str()).or_default() += 1;
            }
            assert_eq!(phases.counts, counted, "step {step}");
        }
    }
}
