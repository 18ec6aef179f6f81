//! Whether a management cluster's bare-metal inventory can hold its clusters' machines, at
//! pull-request time.
//!
//! CAPT provisions a machine on any free Hardware of the machine's namespace that its template's
//! hardware affinity matches, so every machine group of every bare-metal cluster managed from
//! one directory draws on the same Hardware (the management directory's Hardware objects, as
//! `capstan hardware import` writes them). Groups whose machine configs select alike share a
//! pool: per namespace and selector, the machines of every such group are added up. Fewer
//! matching Hardware than machines is an error (the cluster would never come up); fewer than the
//! machines plus the largest surge of those groups is a warning (a rolling upgrade adds a machine
//! before it removes one, and would wait for Hardware that never frees up), as EKS Anywhere's CLI
//! asserts both against its CSV. Hardware the directory does not hold (applied outside Git) is
//! not known here: with no Hardware in the directory nothing is checked. Hardware that two
//! different selectors both match counts for each of their pools, so overlapping selectors can
//! pass here and still compete for the same machines.

use std::collections::BTreeMap;

use capstan_templates::diag::{Code, Diagnostic};
use capstan_templates::spec::{HardwareChoice, Provider};

use super::ClusterEntry;
use crate::hardware;

/// One Hardware of an inventory: its namespace and labels.
type Held = (String, BTreeMap<String, String>);

/// What one pool (namespace and selector) must hold: machines, the largest surge, and where the
/// first group drawing on it is written (cluster index, path in its Cluster).
struct Pool {
    choice: HardwareChoice,
    machines: u32,
    surge: u32,
    groups: Vec<String>,
    first: (usize, String),
}

/// Whether Hardware labelled `labels` matches `choice`.
fn matches(choice: &HardwareChoice, labels: &BTreeMap<String, String>) -> bool {
    match choice {
        HardwareChoice::Selector(want) => want.iter().all(|(k, v)| labels.get(k) == Some(v)),
        HardwareChoice::Affinity(a) => hardware::affinity_selects(a, labels),
    }
}

/// Checks every bare-metal cluster's machine groups against its management directory's
/// Hardware.
pub(super) fn check(clusters: &mut [ClusterEntry]) {
    // Each management cluster's Hardware: (namespace, labels) by name.
    let mut inventories: BTreeMap<String, Vec<Held>> = BTreeMap::new();
    for e in clusters.iter() {
        let Some(c) = &e.cluster else { continue };
        if !c.is_self_managed() {
            continue;
        }
        let hw: Vec<Held> = c
            .extra_objects
            .iter()
            .filter_map(|x| {
                let o = x.value();
                let labels = hardware::inventory(std::slice::from_ref(o))
                    .into_values()
                    .next()?;
                let ns = o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or(capstan_templates::spec::DEFAULT_NAMESPACE);
                Some((ns.to_string(), labels))
            })
            .collect();
        if !hw.is_empty() {
            inventories.insert(e.name.clone(), hw);
        }
    }
    // The pools each management cluster's bare-metal groups draw on.
    let mut pools: BTreeMap<(String, String, String), Pool> = BTreeMap::new();
    for (i, e) in clusters.iter().enumerate() {
        let Some(c) = &e.cluster else { continue };
        let Provider::Tinkerbell(t) = &c.provider else {
            continue;
        };
        if !inventories.contains_key(&c.management) {
            continue;
        }
        let mut groups: Vec<(String, &Option<String>, u32, u32, String)> = vec![(
            format!("{}: the control plane", c.name),
            &c.control_plane.machine,
            c.control_plane.count,
            c.control_plane.max_surge.unwrap_or(1),
            "spec.controlPlaneConfiguration.machineGroupRef".to_string(),
        )];
        for (j, w) in c.workers.iter().enumerate() {
            groups.push((
                format!("{}: worker group `{}`", c.name, w.name),
                &w.machine,
                w.replicas
                    .or(w.autoscaling.map(|(min, _)| min))
                    .unwrap_or(0),
                w.rollout.map(|(surge, _)| surge).unwrap_or(1),
                format!("spec.workerNodeGroupConfigurations[{j}].machineGroupRef"),
            ));
        }
        for (what, machine, count, surge, path) in groups {
            let Some(m) = machine.as_ref().and_then(|n| t.machines.get(n)) else {
                continue;
            };
            let key = (
                c.management.clone(),
                c.namespace.clone(),
                serde_json::to_string(&match &m.hardware {
                    HardwareChoice::Selector(s) => serde_json::json!(s),
                    HardwareChoice::Affinity(a) => a.clone(),
                })
                .unwrap_or_default(),
            );
            let pool = pools.entry(key).or_insert_with(|| Pool {
                choice: m.hardware.clone(),
                machines: 0,
                surge: 0,
                groups: Vec::new(),
                first: (i, path),
            });
            pool.machines += count;
            pool.surge = pool.surge.max(surge);
            pool.groups.push(what);
        }
    }
    for ((management, namespace, _), pool) in pools {
        let have = inventories[&management]
            .iter()
            .filter(|(ns, labels)| *ns == namespace && matches(&pool.choice, labels))
            .count() as u32;
        let (i, path) = &pool.first;
        let entry = &clusters[*i];
        let Some(c) = &entry.cluster else { continue };
        let with_spare = pool.machines + pool.surge;
        let message = |need: u32, why: &str| {
            format!(
                "{have} Hardware of clusters/{management}/ in namespace {namespace} match this machine config's selector; {} {} {need}{why}",
                pool.groups.join(", "),
                if pool.groups.len() == 1 {
                    "needs"
                } else {
                    "need"
                },
            )
        };
        let d = if have < pool.machines {
            Diagnostic::error(
                Code::NotEnoughHardware,
                message(
                    pool.machines,
                    ": import more with `capstan hardware import`",
                ),
            )
        } else if have < with_spare {
            Diagnostic::warning(
                Code::NotEnoughHardware,
                message(
                    with_spare,
                    &format!(
                        " with the spare a rolling upgrade takes (surge {}): an upgrade would wait for Hardware",
                        pool.surge
                    ),
                ),
            )
        } else {
            continue;
        };
        let d = d
            .in_file(&c.source.file)
            .at(c.source.pos(path))
            .for_cluster(&entry.name);
        clusters[*i].diagnostics.push(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_and_affinity_terms_match_as_kubernetes_matches_them() {
        let hw = labels(&[
            ("cluster.x-k8s.io/cluster-name", "w"),
            ("type", "cp"),
            ("rack", "r1"),
        ]);
        let sel = |pairs: &[(&str, &str)]| HardwareChoice::Selector(labels(pairs));
        assert!(matches(&sel(&[("type", "cp")]), &hw));
        assert!(!matches(&sel(&[("type", "worker")]), &hw));
        let aff = |terms: Value| HardwareChoice::Affinity(json!({"required": terms}));
        assert!(matches(
            &aff(
                json!([{"labelSelector": {"matchLabels": {"type": "worker"}}}, {"labelSelector": {"matchLabels": {"type": "cp"}}}])
            ),
            &hw
        ));
        assert!(matches(
            &aff(
                json!([{"labelSelector": {"matchLabels": {"type": "cp"}, "matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1", "r2"]}, {"key": "gpu", "operator": "DoesNotExist"}]}}])
            ),
            &hw
        ));
        assert!(!matches(
            &aff(
                json!([{"labelSelector": {"matchExpressions": [{"key": "rack", "operator": "NotIn", "values": ["r1"]}]}}])
            ),
            &hw
        ));
        assert!(!matches(&aff(json!([])), &hw));
    }
}
