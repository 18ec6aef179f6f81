//! Two revisions of a fleet, compared cluster by cluster without a management cluster: what
//! `capstan diff` prints and what the PR comments and bodies summarise.
//!
//! Both revisions are validated and rendered (`capstan_layout::load`); objects are matched by
//! identity (`group/Kind/namespace/name`) and equal when their content hashes are. A cluster's
//! machines are judged by [`Impact::between`] on the rendered basis. What the agent would do
//! with a directory is said the way the agent does it: a tombstone deletes (Cluster first), a
//! directory removed without one is left Orphaned with nothing deleted, a suspended cluster is
//! left alone, an invalid one keeps its last applied revision live.

use std::collections::BTreeMap;
use std::path::PathBuf;

use capstan_layout::{ClusterEntry, Fleet, Tree};
use serde_json::Value;

use super::impact::{Basis, Impact};
use super::report::{ClusterReport, Report};
use super::stages::Settings;
use super::{Action, Entry, ObjectRef, diff_between, reference};

/// The report of going from `base` to `head`. `outside` lists the changed files outside
/// `clusters/` (see [`changed_outside`]).
pub fn compare(title: &str, base: &Fleet, head: &Fleet, outside: Vec<String>) -> Report {
    let mut clusters = Vec::new();
    for h in &head.clusters {
        let settings = Settings::for_cluster(
            Settings::default(),
            super::waves::rollout_of(head, h.management()),
            h.role == capstan_layout::Role::Management,
        );
        let r = cluster(Some(h), base.cluster(&h.name), settings);
        if r.has_changes() || !r.errors.is_empty() || !r.notes.is_empty() {
            clusters.push(r);
        }
    }
    for b in base
        .clusters
        .iter()
        .filter(|b| head.cluster(&b.name).is_none())
    {
        clusters.push(cluster(None, Some(b), Settings::default()));
    }
    Report {
        title: title.to_string(),
        clusters,
        errors: head
            .diagnostics
            .iter()
            .filter(|d| d.is_error())
            .map(ToString::to_string)
            .collect(),
        outside,
    }
}

/// Files that differ between two trees outside `clusters/`.
pub fn changed_outside(base: &Tree, head: &Tree) -> Vec<String> {
    let dir = std::path::Path::new(capstan_layout::fleet::CLUSTERS_DIR);
    let mut paths: Vec<&PathBuf> = base
        .entries
        .iter()
        .filter(|(p, e)| head.entries.get(*p) != Some(e))
        .map(|(p, _)| p)
        .chain(
            head.entries
                .keys()
                .filter(|p| !base.entries.contains_key(*p)),
        )
        .filter(|p| !p.starts_with(dir))
        .collect();
    paths.sort();
    paths.dedup();
    paths.iter().map(|p| p.display().to_string()).collect()
}

fn values(e: Option<&ClusterEntry>) -> Vec<Value> {
    e.and_then(|e| e.objects.as_ref())
        .map(|o| o.values())
        .unwrap_or_default()
}

fn cluster(
    head: Option<&ClusterEntry>,
    base: Option<&ClusterEntry>,
    settings: Settings,
) -> ClusterReport {
    let name = head.or(base).map(|c| c.name.clone()).unwrap_or_default();
    let mut r = ClusterReport {
        name,
        ..Default::default()
    };
    let old = values(base);
    let Some(h) = head else {
        r.notes.push(
            "its directory is removed without a tombstone: the agent marks it Orphaned and deletes nothing (`capstan delete cluster` writes a tombstone)".into(),
        );
        return r;
    };
    r.errors = h
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(ToString::to_string)
        .collect();
    if h.intent.delete.is_some() {
        let already = base.is_some_and(|b| b.intent.delete.is_some());
        if !already {
            r.notes.push("tombstone: the agent deletes this cluster, its Cluster first and the rest once Cluster API has removed its machines".into());
            r.entries = old
                .iter()
                .map(|o| Entry::new(ObjectRef::of(o), Action::Prune, None))
                .collect();
            r.impact = (!old.is_empty()).then(|| Impact::between(&old, &[], Basis::Rendered));
        }
        return r;
    }
    if !r.errors.is_empty() || h.objects.is_none() {
        r.notes
            .push("not applied while it has errors: the last applied revision stays live".into());
        return r;
    }
    if h.intent.suspend.is_some() && base.is_none_or(|b| b.intent.suspend.is_none()) {
        r.notes
            .push("suspended: the agent applies nothing to it until it is resumed".into());
    } else if h.intent.suspend.is_none() && base.is_some_and(|b| b.intent.suspend.is_some()) {
        r.notes.push("resumed: the agent applies it again".into());
    }
    if base.is_some_and(|b| !b.is_valid() && b.intent.delete.is_none()) {
        r.notes.push(
            "the base revision of this cluster did not validate: every object is shown as new"
                .into(),
        );
    }
    let objects = h.objects.as_ref().expect("checked above");
    let before: BTreeMap<String, (&Value, String)> = old
        .iter()
        .map(|o| {
            let r = ObjectRef::of(o);
            (r.key(), (o, capstan_templates::identity::content_hash(o)))
        })
        .collect();
    let mut seen = Vec::new();
    for obj in objects {
        let re = reference(obj);
        let key = re.key();
        seen.push(key.clone());
        let new = obj.value();
        let (action, old_obj) = match before.get(&key) {
            None => (Action::Create, None),
            Some((o, hash)) if *hash == re.hash => {
                let _ = o;
                continue;
            }
            Some((o, _)) => (Action::Update, Some(*o)),
        };
        let diff = diff_between(old_obj, Some(&new), &re.subject(), ("base", "head"));
        r.entries.push(Entry {
            diff: Some(diff),
            scale_only: old_obj.is_some_and(|o| super::planner::scale_only(o, &new)),
            ..Entry::new(re, action, None)
        });
    }
    for o in &old {
        let re = ObjectRef::of(o);
        if !seen.contains(&re.key()) {
            let reason = re
                .is_cluster()
                .then(|| super::planner::CLUSTER_NOT_PRUNED.to_string());
            let action = if reason.is_some() {
                Action::Skip
            } else {
                Action::Prune
            };
            r.entries.push(Entry::new(re, action, reason));
        }
    }
    r.stages = super::stages::outline(&r.entries, settings);
    // Inside the workload cluster, after its own objects: its add-ons.
    let addons = |e: Option<&ClusterEntry>| e.and_then(|e| e.addons.clone()).unwrap_or_default();
    r.entries
        .extend(super::addons::compare(&addons(base), &addons(Some(h))));
    let new = objects.values();
    let impact = Impact::between(&old, &new, Basis::Rendered);
    r.impact = (!impact.is_empty() || impact.is_blocked()).then_some(impact);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_layout::load;
    use std::path::Path;

    fn example() -> Tree {
        Tree::from_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet")).unwrap()
    }

    fn edit(tree: &mut Tree, path: &str, from: &str, to: &str) {
        let Some(capstan_layout::tree::Entry::File(b)) = tree.entries.get(Path::new(path)) else {
            panic!("{path}")
        };
        let t = String::from_utf8(b.clone()).unwrap();
        assert!(t.contains(from));
        tree.insert(path, t.replacen(from, to, 1));
    }

    const DEV: &str = "clusters/mgmt/workload-clusters/dev/cluster.yaml";

    #[test]
    fn an_unchanged_fleet_reports_nothing() {
        let t = example();
        let r = compare("x", &load(&t), &load(&t), changed_outside(&t, &t));
        assert!(r.clusters.is_empty() && !r.has_changes() && !r.has_errors());
    }

    #[test]
    fn a_scale_updates_one_object_and_scales_without_rollout() {
        let base = example();
        let mut head = base.clone();
        edit(&mut head, DEV, "count: 2", "count: 3");
        head.insert("README.md", "hello");
        let r = compare(
            "x",
            &load(&base),
            &load(&head),
            changed_outside(&base, &head),
        );
        assert_eq!(r.clusters.len(), 1);
        let c = &r.clusters[0];
        assert_eq!(c.name, "dev");
        let updated: Vec<String> = c
            .entries
            .iter()
            .map(|e| format!("{} {}", e.action, e.object.subject()))
            .collect();
        // The EKS-A Cluster (its spec) and the MachineDeployment.
        assert_eq!(
            updated,
            [
                "update Cluster/team-dev/dev",
                "update MachineDeployment/team-dev/dev-md-0"
            ]
        );
        assert!(
            c.entries[1]
                .diff
                .as_deref()
                .unwrap()
                .contains("-  replicas: 2\n+  replicas: 3")
        );
        assert!(!c.impact.as_ref().unwrap().rolls());
        assert_eq!(c.stages.as_deref(), Some("scale only: no waits"));
        assert!(
            r.text(false).contains("  * scale only: no waits\n"),
            "{}",
            r.text(false)
        );
        assert_eq!(r.outside, ["README.md"]);
    }

    #[test]
    fn tombstones_removed_directories_and_invalid_heads_say_what_the_agent_does() {
        let base = example();
        let mut head = base.clone();
        head.entries.remove(Path::new(DEV));
        head.insert(
            "clusters/mgmt/workload-clusters/dev/tombstone.yaml",
            capstan_layout::intent::document("Tombstone", "done"),
        );
        head.entries
            .retain(|p, _| !p.starts_with("clusters/mgmt/workload-clusters/legacy"));
        edit(
            &mut head,
            "clusters/mgmt/workload-clusters/prod/cluster.yaml",
            "count: 3\n    endpoint",
            "count: two\n    endpoint",
        );
        let r = compare("x", &load(&base), &load(&head), Vec::new());
        let by = |n: &str| r.clusters.iter().find(|c| c.name == n).unwrap();
        let dev = by("dev");
        assert!(dev.notes[0].starts_with("tombstone"));
        assert!(dev.entries.iter().all(|e| e.action == Action::Prune) && !dev.entries.is_empty());
        assert!(by("legacy").notes[0].contains("Orphaned"));
        let prod = by("prod");
        assert!(
            prod.errors[0].contains("clusters/mgmt/workload-clusters/prod/cluster.yaml:"),
            "{:?}",
            prod.errors
        );
        assert!(r.has_errors());
        assert!(r.first_problem().unwrap().contains("prod/cluster.yaml"));
    }
}
