//! The impact of spec edits, on objects rendered by the real renderer from the example fleet
//! (a docker cluster with stacked etcd, a vSphere cluster with external etcd and an autoscaled
//! group), edited the way a pull request would.

use std::path::Path;

use capstan_layout::{Tree, load};
use serde_json::{Value, json};

use super::*;

const DEV: &str = "clusters/mgmt/workload-clusters/dev/cluster.yaml";
const PROD: &str = "clusters/mgmt/workload-clusters/prod/cluster.yaml";
const PROD_VSPHERE: &str = "clusters/mgmt/workload-clusters/prod/vsphere.yaml";

fn example() -> Tree {
    Tree::from_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet")).unwrap()
}

fn text(tree: &Tree, path: &str) -> String {
    match &tree.entries[Path::new(path)] {
        capstan_layout::tree::Entry::File(b) => String::from_utf8(b.clone()).unwrap(),
        other => panic!("{path}: {other:?}"),
    }
}

/// The rendered objects of `cluster` after replacing `from` by `to` in `file` (each must match).
fn edited(cluster: &str, edits: &[(&str, &str, &str)]) -> (Vec<Value>, Vec<Value>) {
    let base = example();
    let mut head = base.clone();
    for (file, from, to) in edits {
        let t = text(&head, file);
        assert!(t.contains(from), "{file} has no {from:?}");
        head.insert(*file, t.replacen(from, to, 1));
    }
    (objects(&base, cluster), objects(&head, cluster))
}

fn objects(tree: &Tree, cluster: &str) -> Vec<Value> {
    let fleet = load(tree);
    let c = fleet.cluster(cluster).unwrap();
    assert!(c.is_valid(), "{:?}", c.diagnostics);
    c.objects.as_ref().unwrap().values()
}

fn impact(cluster: &str, edits: &[(&str, &str, &str)]) -> Impact {
    let (old, new) = edited(cluster, edits);
    Impact::between(&old, &new, Basis::Rendered)
}

#[test]
fn nothing_changed_is_empty() {
    let i = impact("prod", &[]);
    assert!(i.is_empty() && !i.rolls() && !i.is_blocked(), "{i:#?}");
    assert_eq!(i.lines(), ["no machine is replaced"]);
}

#[test]
fn a_kubernetes_bump_rolls_the_control_plane_for_its_version_and_workers_following_it() {
    let i = impact(
        "dev",
        &[(
            DEV,
            "kubernetesVersion: \"1.33\"",
            "kubernetesVersion: \"1.34\"",
        )],
    );
    let cp = i.control_plane.roll.as_ref().expect("control plane rolls");
    assert!(
        cp.reasons.iter().any(|r| r.what == "version"
            && r.detail.contains("v1.33")
            && r.detail.contains("v1.34")),
        "{cp:?}"
    );
    assert!(i.control_plane.scale.is_none());
    assert_eq!(i.workers.len(), 1);
    assert_eq!(i.workers[0].name, "md-0");
    assert!(
        i.workers[0]
            .roll
            .as_ref()
            .unwrap()
            .reasons
            .iter()
            .any(|r| r.what == "version")
    );
    assert!(i.blocked.is_empty(), "{:?}", i.blocked);
    assert!(
        i.lines()
            .iter()
            .any(|l| l.starts_with("control plane rolls: version")),
        "{:?}",
        i.lines()
    );
}

#[test]
fn a_control_plane_count_change_scales_without_a_rollout() {
    let i = impact(
        "dev",
        &[(DEV, "count: 3\n    labels", "count: 5\n    labels")],
    );
    assert!(i.control_plane.roll.is_none(), "{i:#?}");
    let s = i.control_plane.scale.as_ref().unwrap();
    assert_eq!((s.from, s.to), (Some(3), Some(5)));
    assert!(i.workers.is_empty() && !i.rolls());
    assert_eq!(i.lines(), ["control plane scales 3 → 5 (no rollout)"]);
}

#[test]
fn a_control_plane_label_changes_the_kubeadm_config() {
    let i = impact("dev", &[(DEV, "team: platform", "team: infra")]);
    let r = &i.control_plane.roll.as_ref().unwrap().reasons;
    assert!(
        r.iter()
            .any(|r| r.what == "kubeadmConfig" && r.detail.contains("nodeRegistration")),
        "{r:?}"
    );
    assert!(
        i.workers.is_empty(),
        "workers keep their machines: {:?}",
        i.workers
    );
}

#[test]
fn a_machine_size_rolls_only_the_groups_that_use_it() {
    // prod-cp is the control plane's machine config only.
    let i = impact("prod", &[(PROD_VSPHERE, "numCPUs: 4", "numCPUs: 8")]);
    let r = &i.control_plane.roll.as_ref().unwrap().reasons;
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].what, "machineTemplate");
    assert!(r[0].detail.contains("numCPUs"), "{r:?}");
    assert!(i.workers.is_empty() && i.etcd.is_empty());
    // prod-workers is shared by both worker groups.
    let i = impact("prod", &[(PROD_VSPHERE, "numCPUs: 8", "numCPUs: 16")]);
    assert!(i.control_plane.is_empty());
    let names: Vec<&str> = i.workers.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ["burst", "general"]);
    assert!(
        i.workers
            .iter()
            .all(|w| w.roll.is_some() && w.change == GroupChange::Changed)
    );
}

#[test]
fn an_etcd_machine_change_rolls_etcd_only() {
    let i = impact("prod", &[(PROD_VSPHERE, "numCPUs: 2", "numCPUs: 4")]);
    assert!(i.etcd.roll.is_some(), "{i:#?}");
    assert!(i.control_plane.is_empty() && i.workers.is_empty());
    assert!(i.lines()[0].starts_with("etcd rolls: machineTemplate"));
}

#[test]
fn scale_and_autoscaler_bounds_are_not_rollouts() {
    let i = impact(
        "prod",
        &[
            (
                PROD,
                "count: 3\n      machineGroupRef:\n        kind: VSphereMachineConfig\n        name: prod-workers",
                "count: 6\n      machineGroupRef:\n        kind: VSphereMachineConfig\n        name: prod-workers",
            ),
            (PROD, "maxCount: 10", "maxCount: 20"),
        ],
    );
    assert!(!i.rolls(), "{i:#?}");
    let general = i.workers.iter().find(|w| w.name == "general").unwrap();
    assert_eq!(
        general.scale.as_ref().map(|s| (s.from, s.to)),
        Some((Some(3), Some(6)))
    );
    let burst = i.workers.iter().find(|w| w.name == "burst").unwrap();
    assert_eq!(
        burst.scale.as_ref().unwrap().bounds.as_deref(),
        Some("1..20")
    );
    let lines = i.lines();
    assert!(
        lines.contains(&"worker group general scales 3 → 6 (no rollout)".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.contains(
            &"worker group burst scales autoscaler bounds 1..20 (no rollout)".to_string()
        ),
        "{lines:?}"
    );
}

#[test]
fn a_taint_rolls_its_group_through_the_bootstrap_template() {
    let i = impact("prod", &[(PROD, "value: burst", "value: batch")]);
    let burst = &i.workers;
    assert_eq!(burst.len(), 1);
    let reasons = &burst[0].roll.as_ref().unwrap().reasons;
    assert!(
        reasons
            .iter()
            .any(|r| r.what == "bootstrapTemplate" && r.detail.contains("taints")),
        "{reasons:?}"
    );
}

#[test]
fn groups_added_and_removed() {
    let (base, _) = edited("dev", &[]);
    let (_, head) = edited(
        "dev",
        &[(
            DEV,
            "    - name: md-0\n      count: 2",
            "    - name: md-1\n      count: 4",
        )],
    );
    let i = Impact::between(&base, &head, Basis::Rendered);
    let changes: Vec<(&str, GroupChange)> = i
        .workers
        .iter()
        .map(|w| (w.name.as_str(), w.change))
        .collect();
    assert_eq!(
        changes,
        [("md-0", GroupChange::Removed), ("md-1", GroupChange::Added)]
    );
    assert!(
        i.lines()
            .contains(&"worker group md-1 added (4 machines)".to_string())
    );
    assert!(
        i.lines()
            .contains(&"worker group md-0 removed: its machines are deleted".to_string())
    );
}

#[test]
fn a_cilium_setting_changes_the_addon_values_and_an_eksa_upgrade_its_version() {
    let i = impact(
        "prod",
        &[(
            PROD,
            "policyEnforcementMode: always",
            "policyEnforcementMode: default",
        )],
    );
    assert_eq!(i.addons.len(), 1, "{i:#?}");
    assert_eq!(i.addons[0].chart, "cilium");
    assert!(i.addons[0].values_changed && i.addons[0].from == i.addons[0].to);
    assert!(!i.rolls());
    // An older EKS-A release ships another Cilium chart.
    let i = impact(
        "prod",
        &[(PROD, "eksaVersion: v0.26.1", "eksaVersion: v0.25.2")],
    );
    let a = &i.addons[0];
    assert_ne!(a.from, a.to, "{a:?}");
    assert!(
        i.lines().iter().any(|l| l.starts_with("cilium upgrades")),
        "{:?}",
        i.lines()
    );
}

#[test]
fn immutable_fields_are_blocked_with_their_spec_path_and_file_line() {
    let i = impact(
        "prod",
        &[
            (PROD, "host: 10.20.0.10", "host: 10.20.0.11"),
            (PROD, "[172.20.0.0/16]", "[172.21.0.0/16]"),
            (
                PROD_VSPHERE,
                "server: vcenter.example.internal",
                "server: vcenter2.example.internal",
            ),
            (
                PROD_VSPHERE,
                "osFamily: ubuntu\n  numCPUs: 2",
                "osFamily: redhat\n  numCPUs: 2",
            ),
        ],
    );
    let fields: Vec<(&str, &str)> = i
        .blocked
        .iter()
        .map(|b| (b.kind.as_str(), b.field.as_str()))
        .collect();
    assert_eq!(
        fields,
        [
            ("Cluster", "spec.controlPlaneConfiguration.endpoint.host"),
            ("Cluster", "spec.clusterNetwork.pods"),
            ("VSphereDatacenterConfig", "spec.server"),
            ("VSphereMachineConfig", "spec.osFamily"),
        ]
    );
    assert_eq!(
        (i.blocked[0].from.as_str(), i.blocked[0].to.as_str()),
        ("10.20.0.10", "10.20.0.11")
    );
    assert!(i.lines()[0].starts_with(
        "BLOCKED Cluster/prod spec.controlPlaneConfiguration.endpoint.host: 10.20.0.10 → 10.20.0.11"
    ));
    // Located in the head revision: the endpoint's line in cluster.yaml, the machine config's
    // metadata.name line in vsphere.yaml.
    let mut head = example();
    head.insert(
        PROD,
        text(&head, PROD).replacen("host: 10.20.0.10", "host: 10.20.0.11", 1),
    );
    let fleet = load(&head);
    let spec = fleet.cluster("prod").unwrap().cluster.as_ref().unwrap();
    let (file, pos) = i.blocked[0].locate(spec).unwrap();
    assert_eq!(file, Path::new(PROD));
    let line = text(&head, PROD)
        .lines()
        .nth(pos.line - 1)
        .unwrap()
        .to_string();
    assert!(line.contains("host: 10.20.0.11"), "{line}");
    let (file, pos) = i.blocked[3].locate(spec).unwrap();
    assert_eq!(file, Path::new(PROD_VSPHERE));
    assert!(
        text(&head, PROD_VSPHERE)
            .lines()
            .nth(pos.line - 1)
            .unwrap()
            .contains("name: prod-etcd")
    );
}

#[test]
fn etcd_topology_provider_namespace_and_version_skips_are_blocked() {
    let no_etcd = "  externalEtcdConfiguration:\n    count: 3\n    machineGroupRef:\n      kind: VSphereMachineConfig\n      name: prod-etcd\n";
    let i = impact("prod", &[(PROD, no_etcd, "")]);
    assert!(
        i.blocked
            .iter()
            .any(|b| b.field == "spec.externalEtcdConfiguration"
                && b.from == "external"
                && b.to == "stacked"),
        "{:?}",
        i.blocked
    );

    let i = impact(
        "dev",
        &[(
            DEV,
            "kubernetesVersion: \"1.33\"",
            "kubernetesVersion: \"1.31\"",
        )],
    );
    assert!(
        i.blocked
            .iter()
            .any(|b| b.field == "spec.kubernetesVersion" && b.reason.contains("downgraded")),
        "{:?}",
        i.blocked
    );

    let i = impact(
        "dev",
        &[
            (
                DEV,
                "namespace: team-dev\nspec:\n  kubernetesVersion",
                "namespace: team-x\nspec:\n  kubernetesVersion",
            ),
            (
                DEV,
                "namespace: team-dev\nspec: {}",
                "namespace: team-x\nspec: {}",
            ),
        ],
    );
    assert!(
        i.blocked
            .iter()
            .any(|b| b.field == "metadata.namespace" && b.to == "team-x"),
        "{:?}",
        i.blocked
    );

    // Kubernetes 1.31 → 1.33 skips a minor (two revisions rendered by hand-edited objects).
    let (_, old) = edited(
        "dev",
        &[(
            DEV,
            "kubernetesVersion: \"1.33\"",
            "kubernetesVersion: \"1.31\"",
        )],
    );
    let (_, new) = edited("dev", &[]);
    let i = Impact::between(&old, &new, Basis::Rendered);
    assert!(
        i.blocked
            .iter()
            .any(|b| b.reason.contains("one minor at a time (1.31 → 1.32 first)")),
        "{:?}",
        i.blocked
    );

    // A provider change: the datacenter kind moves.
    let mut old = vec![
        json!({"apiVersion": "anywhere.eks.amazonaws.com/v1alpha1", "kind": "Cluster", "metadata": {"name": "c", "namespace": "n"}, "spec": {"datacenterRef": {"kind": "DockerDatacenterConfig", "name": "c"}}}),
    ];
    let mut new = old.clone();
    new[0]["spec"]["datacenterRef"]["kind"] = json!("VSphereDatacenterConfig");
    old.push(json!({"apiVersion": "anywhere.eks.amazonaws.com/v1alpha1", "kind": "DockerDatacenterConfig", "metadata": {"name": "c"}}));
    new.push(json!({"apiVersion": "anywhere.eks.amazonaws.com/v1alpha1", "kind": "VSphereDatacenterConfig", "metadata": {"name": "c"}}));
    let i = Impact::between(&old, &new, Basis::Rendered);
    assert_eq!(i.blocked.len(), 1, "{:?}", i.blocked);
    assert_eq!(i.blocked[0].field, "spec.datacenterRef");
}

#[test]
fn live_objects_as_old_ignore_what_the_server_adds() {
    let (rendered, _) = edited("dev", &[]);
    // Live copies: status, server metadata and a defaulted field the repository never sets.
    let live: Vec<Value> = rendered
        .iter()
        .map(|o| {
            let mut o = o.clone();
            o["status"] = json!({"ready": true});
            o["metadata"]["resourceVersion"] = json!("42");
            if o["kind"] == "KubeadmControlPlane" {
                o["spec"]["kubeadmConfigSpec"]["format"] = json!("cloud-config");
            }
            if o["kind"] == "MachineDeployment" {
                o["spec"]["template"]["spec"]["nodeDeletionTimeoutSeconds"] = json!(10);
            }
            o
        })
        .collect();
    let i = Impact::between(&live, &rendered, Basis::Live);
    assert!(i.is_empty(), "{i:#?}");
    // On the rendered basis the same defaults would read as changes.
    assert!(Impact::between(&live, &rendered, Basis::Rendered).rolls());
    // A real change still shows against live objects.
    let (_, bumped) = edited(
        "dev",
        &[(
            DEV,
            "kubernetesVersion: \"1.33\"",
            "kubernetesVersion: \"1.34\"",
        )],
    );
    assert!(
        Impact::between(&live, &bumped, Basis::Live)
            .control_plane
            .roll
            .is_some()
    );
}

#[test]
fn created_and_deleted_clusters() {
    let (objs, _) = edited("dev", &[]);
    assert_eq!(
        Impact::between(&[], &objs, Basis::Rendered).lifecycle,
        Lifecycle::Create
    );
    let gone = Impact::between(&objs, &[], Basis::Rendered);
    assert_eq!(gone.lifecycle, Lifecycle::Delete);
    assert!(!gone.is_empty());
}

#[test]
fn changed_fields_walks_maps_and_compares_lists_whole() {
    let a = json!({"x": {"y": 1, "z": [1, 2]}, "gone": true});
    let b = json!({"x": {"y": 2, "z": [1, 2]}, "new": "v"});
    assert_eq!(
        changed_fields(Some(&a), Some(&b), Basis::Rendered),
        ["gone", "new", "x.y"]
    );
    assert_eq!(
        changed_fields(Some(&a), Some(&b), Basis::Live),
        ["new", "x.y"]
    );
    assert!(changed_fields(Some(&a), Some(&a), Basis::Rendered).is_empty());
}
