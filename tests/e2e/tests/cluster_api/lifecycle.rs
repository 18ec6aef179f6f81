//! The lifecycle against the real Cluster API controllers (core, kubeadm bootstrap and control
//! plane, CAPD with its in-memory backend standing in for machines, kube-controller-manager's
//! garbage collector): capstan applies, the controllers act, and every assertion reads what the
//! controllers did from the API server — Machines through kubectl, an independent client — not
//! capstan's own view.
//!
//! Each test has its own fleet (management cluster, namespace, cluster names), so the tests run
//! side by side on one shared control plane. capstan runs as `reconcile --once --wait` does
//! ([`capstan::reconcile::converge`]): a pass, then another on every watch event, until every
//! cluster is Ready.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use capstan::plan::Action;
use capstan::plan::stages::WorkerRollout;
use capstan::status::Phase;
use capstan_e2e::capi::*;
use capstan_harness::objects::text_at;
use kube::api::{Api, DynamicObject};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_scale_and_remove_a_worker_group() {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs = cp.logs_on_failure("create_scale_and_remove_a_worker_group");
    let mut repo = Repo::new(
        "scale",
        &[(
            "w-scale",
            json!([{"name": "md-0", "count": 1}, {"name": "md-1", "count": 1}]),
        )],
    );
    let only = Some("w-scale");

    // Create: every Machine Running, the Cluster Available, the ManagedCluster Ready.
    repo.converge(only).await;
    let machines = repo.machines("w-scale");
    assert_eq!(machines.len(), 3, "{machines:?}");
    assert!(all_running(&machines), "{machines:?}");
    assert_eq!(cluster_available("w-scale", &repo.ns), "True");
    assert_eq!(
        managed_cluster_json("w-scale").unwrap()["status"]["phase"],
        "Ready"
    );

    // Scale md-0 up: Machines added, none replaced, one MachineSet (no rollout).
    let md0_before = names_of(&of_role(&machines, "w-scale-md-0"));
    let others_before = names_of(
        &machines
            .iter()
            .filter(|m| m.role != "w-scale-md-0")
            .collect::<Vec<_>>(),
    );
    let sets_before = repo.names("machinesets.cluster.x-k8s.io");
    repo.edit(
        "w-scale",
        "- name: \"md-0\"\n      count: 1",
        "- name: \"md-0\"\n      count: 3",
    );
    let out = repo.converge(only).await;
    let updates: Vec<String> = out.first().clusters[0]
        .plan
        .entries
        .iter()
        .filter(|e| e.action != Action::Unchanged)
        .map(|e| format!("{} {} {}", e.action, e.object.group(), e.object.subject()))
        .collect();
    assert_eq!(
        updates,
        vec![
            format!(
                "update anywhere.eks.amazonaws.com Cluster/{}/w-scale",
                repo.ns
            ),
            format!(
                "update cluster.x-k8s.io MachineDeployment/{}/w-scale-md-0",
                repo.ns
            )
        ],
        "{:#?}",
        out.first().clusters[0]
            .plan
            .entries
            .iter()
            .filter(|e| e.action != Action::Unchanged)
            .collect::<Vec<_>>()
    );
    let machines = repo.machines("w-scale");
    let md0 = of_role(&machines, "w-scale-md-0");
    assert_eq!(md0.len(), 3, "{machines:?}");
    assert!(all_running(&machines), "{machines:?}");
    assert!(
        md0_before.is_subset(&names_of(&md0)),
        "the existing machine stays: {machines:?}"
    );
    assert_eq!(
        names_of(
            &machines
                .iter()
                .filter(|m| m.role != "w-scale-md-0")
                .collect::<Vec<_>>()
        ),
        others_before
    );
    assert_eq!(
        repo.names("machinesets.cluster.x-k8s.io"),
        sets_before,
        "a scale is not a rollout"
    );

    // Scale down: Machines removed, still no rollout.
    repo.edit(
        "w-scale",
        "- name: \"md-0\"\n      count: 3",
        "- name: \"md-0\"\n      count: 1",
    );
    repo.converge(only).await;
    let machines = repo.machines("w-scale");
    let md0 = of_role(&machines, "w-scale-md-0");
    assert_eq!(md0.len(), 1, "{machines:?}");
    assert!(all_running(&machines), "{machines:?}");
    assert_eq!(repo.names("machinesets.cluster.x-k8s.io"), sets_before);

    // Remove md-1: its MachineDeployment, Machines and templates go; the rest stays.
    let inventory_before = managed_cluster_json("w-scale").unwrap()["status"]["inventory"].clone();
    let md1_objects: Vec<(String, String)> = inventory_before
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"].as_str().unwrap().starts_with("w-scale-md-1"))
        .map(|r| {
            (
                r["kind"].as_str().unwrap().to_string(),
                r["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let kinds: BTreeSet<&str> = md1_objects.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            "DevMachineTemplate",
            "KubeadmConfigTemplate",
            "MachineDeployment",
            "MachineHealthCheck"
        ]),
        "{md1_objects:?}"
    );
    // Cluster API made the Cluster the owner of the group's MachineDeployment and templates:
    // prune goes by capstan's inventory and labels, whatever the owner references say.
    let cluster_uid = shared_kubectl(&[
        "get",
        "clusters.cluster.x-k8s.io",
        "w-scale",
        "-n",
        &repo.ns,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    for (kind, name) in md1_objects
        .iter()
        .filter(|(k, _)| k != "MachineHealthCheck")
    {
        let owners = shared_kubectl(&[
            "get",
            &resource_of(kind),
            name,
            "-n",
            &repo.ns,
            "-o",
            "jsonpath={range .metadata.ownerReferences[*]}{.apiVersion} {.kind} {.name} {.uid}{\"\\n\"}{end}",
        ]);
        assert!(
            owners.lines().any(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                f.len() == 4
                    && f[0].starts_with("cluster.x-k8s.io/")
                    && f[1..] == ["Cluster", "w-scale", cluster_uid.as_str()]
            }),
            "{kind}/{name} is not owned by Cluster/w-scale: {owners:?}"
        );
    }
    let old_md1: Vec<(String, String, String)> = of_role(&machines, "w-scale-md-1")
        .iter()
        .map(|m| (m.role.clone(), m.version.clone(), m.name.clone()))
        .collect();
    let tl = Arc::new(Timeline::default());
    let watches = watch_machines_and_templates(cp, &repo.ns, &tl);
    repo.remove_group("w-scale", "md-1");
    let out = repo.converge(only).await;
    let pruned_in = |p: &capstan::reconcile::Outcome| -> BTreeSet<(String, String)> {
        p.clusters[0]
            .plan
            .entries
            .iter()
            .filter(|e| e.action == Action::Prune)
            .map(|e| (e.object.kind.clone(), e.object.name.clone()))
            .collect()
    };
    let pruned: BTreeSet<(String, String)> = out.passes.iter().flat_map(pruned_in).collect();
    assert_eq!(
        pruned,
        md1_objects.iter().cloned().collect(),
        "the removed group's objects are pruned\n{}",
        history(&out)
    );
    // Its templates outlive its MachineDeployment: its MachineSet makes machines from them
    // until its last Machine is gone.
    let templates: Vec<(String, String)> = md1_objects
        .iter()
        .filter(|(k, _)| k.ends_with("Template"))
        .cloned()
        .collect();
    assert!(
        pruned_in(out.first())
            .iter()
            .all(|(k, _)| !k.ends_with("Template")),
        "{}",
        history(&out)
    );
    templates_deleted_after_machines(&tl, &templates, &old_md1).await;
    for w in watches {
        w.abort();
    }
    for (kind, name) in &md1_objects {
        assert!(
            !repo.names(&resource_of(kind)).contains(name),
            "{kind}/{name} is still there"
        );
    }
    let machines = repo.machines("w-scale");
    assert!(
        of_role(&machines, "w-scale-md-1").is_empty(),
        "{machines:?}"
    );
    assert_eq!(machines.len(), 2, "{machines:?}");
    let inventory = managed_cluster_json("w-scale").unwrap()["status"]["inventory"].clone();
    assert!(
        !inventory.to_string().contains("w-scale-md-1"),
        "the removed group's objects left the inventory: {inventory}"
    );
}

/// The kubectl resource of a kind a worker group renders.
fn resource_of(kind: &str) -> String {
    match kind {
        "DevMachineTemplate" => "devmachinetemplates.infrastructure.cluster.x-k8s.io",
        "KubeadmConfigTemplate" => "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
        "MachineDeployment" => "machinedeployments.cluster.x-k8s.io",
        "MachineHealthCheck" => "machinehealthchecks.cluster.x-k8s.io",
        other => panic!("no resource for {other}"),
    }
    .to_string()
}

/// A `Kind`'s API resource in the test bed's versions.
fn kind(group: &str, version: &str, kind: &str) -> kube::discovery::ApiResource {
    gvk_resource(group, version, kind)
}

/// Watches what the upgrade stages are read from and act on, into one timeline: the control
/// plane's version and rollout, the MachineDeployments' versions and replicas, Machines, and
/// the ManagedClusters' phase and stage.
fn watch_upgrade(
    cp: &capstan_harness::ControlPlane,
    ns: &str,
    tl: &Arc<Timeline>,
) -> Vec<tokio::task::JoinHandle<()>> {
    vec![
        watch_objects(
            cp,
            ns,
            kind(
                "controlplane.cluster.x-k8s.io",
                "v1beta2",
                "KubeadmControlPlane",
            ),
            tl.clone(),
            |v| {
                format!(
                    "kcp {} version={} generation={} observed={} uptodate={}/{}",
                    text_at(v, "/metadata/name"),
                    text_at(v, "/spec/version"),
                    text_at(v, "/metadata/generation"),
                    text_at(v, "/status/observedGeneration"),
                    text_at(v, "/status/upToDateReplicas"),
                    text_at(v, "/status/replicas"),
                )
            },
        ),
        watch_objects(
            cp,
            ns,
            kind("cluster.x-k8s.io", "v1beta2", "MachineDeployment"),
            tl.clone(),
            |v| {
                format!(
                    "md {} version={} replicas={}",
                    text_at(v, "/metadata/name"),
                    text_at(v, "/spec/template/spec/version"),
                    text_at(v, "/spec/replicas"),
                )
            },
        ),
        watch_machines_into(cp, ns, tl),
        watch_objects(
            cp,
            "capstan-system",
            kind("capstan.dev", "v1alpha1", "ManagedCluster"),
            tl.clone(),
            |v| {
                format!(
                    "mc {} phase={} stage={} | since={} progress={}",
                    text_at(v, "/metadata/name"),
                    text_at(v, "/status/phase"),
                    text_at(v, "/status/stage"),
                    text_at(v, "/status/stageSince"),
                    text_at(v, "/status/stageProgress"),
                )
            },
        ),
    ]
}

/// Watches a namespace's Machines into the timeline as `machine <role> <version> <name>`.
fn watch_machines_into(
    cp: &capstan_harness::ControlPlane,
    ns: &str,
    tl: &Arc<Timeline>,
) -> tokio::task::JoinHandle<()> {
    watch_objects(
        cp,
        ns,
        kind("cluster.x-k8s.io", "v1beta2", "Machine"),
        tl.clone(),
        |v| {
            let m = Machine::of(v);
            format!("machine {} {} {}", m.role, m.version, m.name)
        },
    )
}

/// Watches the Machines and the machine and bootstrap templates of a namespace into one
/// timeline: `machine <role> <version> <name>`, `template <Kind> <name>`, and `deleted …` when
/// they go.
fn watch_machines_and_templates(
    cp: &capstan_harness::ControlPlane,
    ns: &str,
    tl: &Arc<Timeline>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut watches = vec![watch_machines_into(cp, ns, tl)];
    watches.extend(watch_templates(cp, ns, tl));
    watches
}

/// Watches the DevMachineTemplates and KubeadmConfigTemplates of a namespace into a timeline:
/// `template <Kind> <name>`, `deleted template <Kind> <name>`.
fn watch_templates(
    cp: &capstan_harness::ControlPlane,
    ns: &str,
    tl: &Arc<Timeline>,
) -> Vec<tokio::task::JoinHandle<()>> {
    [
        kind(
            "infrastructure.cluster.x-k8s.io",
            "v1beta2",
            "DevMachineTemplate",
        ),
        kind(
            "bootstrap.cluster.x-k8s.io",
            "v1beta2",
            "KubeadmConfigTemplate",
        ),
    ]
    .into_iter()
    .map(|resource| {
        watch_objects(cp, ns, resource, tl.clone(), |v| {
            format!(
                "template {} {}",
                text_at(v, "/kind"),
                text_at(v, "/metadata/name")
            )
        })
    })
    .collect()
}

/// Asserts, from the API server's write order, that each of `templates` (`(Kind, name)`) was
/// deleted, and only after every one of `machines` (`(role, version, name)`) was.
async fn templates_deleted_after_machines(
    tl: &Timeline,
    templates: &[(String, String)],
    machines: &[(String, String, String)],
) {
    assert!(!templates.is_empty() && !machines.is_empty());
    for (k, n) in templates {
        tl.wait_for(
            &format!("deleted template {k} {n}"),
            Duration::from_secs(60),
        )
        .await;
    }
    let events = tl.events();
    let at = |prefix: String| {
        tl.first(&prefix)
            .unwrap_or_else(|| panic!("no `{prefix}` in {events:#?}"))
    };
    let last_machine = machines
        .iter()
        .map(|(role, version, name)| at(format!("deleted machine {role} {version} {name}")))
        .max()
        .unwrap();
    for (k, n) in templates {
        let deleted = at(format!("deleted template {k} {n}"));
        assert!(
            deleted > last_machine,
            "{k}/{n} was deleted before the last old Machine: {events:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_bump_goes_out_stage_by_stage_and_a_scale_never_waits() {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs =
        cp.logs_on_failure("a_version_bump_goes_out_stage_by_stage_and_a_scale_never_waits");
    let mut repo = Repo::new(
        "bump",
        &[(
            "w-bump",
            json!([{"name": "md-0", "count": 1}, {"name": "md-1", "count": 1}]),
        )],
    );
    repo.stages.workers = WorkerRollout::Sequential;
    let only = Some("w-bump");
    repo.converge(only).await;
    let before = repo.machines("w-bump");
    assert_eq!(before.len(), 3, "{before:?}");
    let old_version = before[0].version.clone();

    let templates = |repo: &Repo, resource: &str| -> BTreeSet<String> {
        repo.names(resource)
            .into_iter()
            .filter(|n| n.starts_with("w-bump-"))
            .collect()
    };
    let (dmt, kct) = (
        "devmachinetemplates.infrastructure.cluster.x-k8s.io",
        "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
    );
    let (dmt_before, kct_before) = (templates(&repo, dmt), templates(&repo, kct));
    assert_eq!((dmt_before.len(), kct_before.len()), (3, 2));

    let tl = Arc::new(Timeline::default());
    let mut watches = watch_upgrade(cp, &repo.ns, &tl);
    watches.extend(watch_templates(cp, &repo.ns, &tl));
    let at_ready = machines_when_first_ready(cp, &repo.ns, "w-bump", "r2");
    repo.edit(
        "w-bump",
        "kubernetesVersion: \"1.33\"",
        "kubernetesVersion: \"1.34\"",
    );
    let out = repo.converge(only).await;
    let new_version = shared_kubectl(&[
        "get",
        "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
        "w-bump",
        "-n",
        &repo.ns,
        "-o",
        "jsonpath={.spec.version}",
    ]);
    assert!(new_version.starts_with("v1.34."), "{new_version}");
    assert_ne!(new_version, old_version);

    // Right after the upgrade was applied the cluster was not Ready, although its old status
    // said Available: it is upgrading, its control plane first, the workers held.
    let first = &out.first().clusters[0];
    assert_eq!(first.phase, Phase::Upgrading, "{}", first.message);
    let held: BTreeSet<String> = first
        .plan
        .entries
        .iter()
        .filter(|e| e.action == Action::Held)
        .map(|e| e.object.name.clone())
        .collect();
    assert!(
        held.contains("w-bump-md-0") && held.contains("w-bump-md-1"),
        "{held:?}"
    );
    assert!(out.passes.len() > 1);

    // Every Machine at the new version, none left over; and so already when capstan first
    // reported the cluster Ready at this revision.
    let machines = repo.machines("w-bump");
    assert_eq!(machines.len(), 3, "{machines:?}");
    assert!(all_running(&machines), "{machines:?}");
    assert!(
        machines.iter().all(|m| m.version == new_version),
        "{machines:?}"
    );
    let at_ready = tokio::time::timeout(Duration::from_secs(30), at_ready)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(at_ready.len(), 3, "at Ready: {at_ready:?}");
    assert!(
        at_ready
            .iter()
            .all(|m| m.version == new_version && !m.deleting),
        "Ready was reported before the rollout completed: {at_ready:?}"
    );

    // Stage by stage, read from the API server's own write order: the control plane's version
    // changed first; md-0's spec only once the control plane had rolled out (its old machine
    // gone); md-1's only once md-0 had (sequential worker rollout).
    let old_cp = of_role(&before, "control-plane")[0].name.clone();
    let old_md0 = of_role(&before, "w-bump-md-0")[0].name.clone();
    let events = tl.events();
    let at = |prefix: String| {
        tl.first(&prefix)
            .unwrap_or_else(|| panic!("no `{prefix}` in {events:#?}"))
    };
    let kcp_changed = at(format!("kcp w-bump version={new_version}"));
    let cp_old_gone = at(format!(
        "deleted machine control-plane {old_version} {old_cp}"
    ));
    let md0_changed = at(format!("md w-bump-md-0 version={new_version}"));
    let md0_old_gone = at(format!(
        "deleted machine w-bump-md-0 {old_version} {old_md0}"
    ));
    let md1_changed = at(format!("md w-bump-md-1 version={new_version}"));
    assert!(
        kcp_changed < cp_old_gone && cp_old_gone < md0_changed,
        "workers changed before the control plane rolled out: {events:#?}"
    );
    assert!(
        md0_changed < md0_old_gone && md0_old_gone < md1_changed,
        "md-1 changed before md-0 rolled out: {events:#?}"
    );
    // The status said so: Upgrading at the control plane, then at the workers, then Ready.
    let mc: Vec<&String> = events
        .iter()
        .filter(|e| e.starts_with("mc w-bump "))
        .collect();
    let stage_at = |s: &str| mc.iter().position(|e| e.contains(&format!("{s} | ")));
    let (cp_stage, workers_stage) = (
        stage_at("phase=Upgrading stage=ControlPlane"),
        stage_at("phase=Upgrading stage=Workers"),
    );
    assert!(
        cp_stage.is_some() && workers_stage.is_some() && cp_stage < workers_stage,
        "{mc:#?}"
    );
    assert!(
        mc.last().unwrap().contains("phase=Ready stage=- | "),
        "{mc:#?}"
    );
    // The status keeps the upgrade's stages with their start and end, read from the API
    // server: the control plane's first, the workers' last, each ended, one after the other.
    let mc_now = managed_cluster_json("w-bump").unwrap();
    let stages = mc_now["status"]["stages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = stages.iter().filter_map(|s| s["name"].as_str()).collect();
    assert!(
        names.first() == Some(&"ControlPlane") && names.last() == Some(&"Workers"),
        "{stages:#?}"
    );
    for pair in stages.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(
            a["finished"]
                .as_str()
                .is_some_and(|f| Some(f) <= b["started"].as_str()),
            "{stages:#?}"
        );
    }
    assert!(
        stages
            .iter()
            .all(|s| s["finished"].as_str() >= s["started"].as_str()),
        "every stage ended: {stages:#?}"
    );
    // The workers' stage clock restarted with the next group (the stage timeout bounds a stall,
    // not the rollout): the status recorded md-1's progress with a later `stageSince` than the
    // one md-0's rollout started from.
    let since_of = |group: &str| -> Option<&str> {
        mc.iter()
            .find(|e| {
                e.contains("stage=Workers |") && e.contains(&format!("MachineDeployment/{group}:"))
            })
            .and_then(|e| e.split(" since=").nth(1))
            .map(|rest| rest.split(' ').next().unwrap_or(""))
    };
    let (md0, md1) = (since_of("w-bump-md-0"), since_of("w-bump-md-1"));
    assert!(
        md0.is_some() && md1.is_some() && md0 < md1,
        "md-0's clock {md0:?}, md-1's {md1:?}: {mc:#?}"
    );

    // The bump renamed every machine template (the node image is part of the in-memory
    // template too, as of the docker one); the old ones, and the bootstrap templates the bump
    // renamed, are gone from the API server and the inventory, deleted only after the last old
    // Machine was: until then a remediation or a scale of an old MachineSet still reads them.
    let (dmt_after, kct_after) = (templates(&repo, dmt), templates(&repo, kct));
    assert_eq!(dmt_after.len(), 3, "{dmt_after:?}");
    assert!(
        dmt_after.is_disjoint(&dmt_before),
        "{dmt_before:?} -> {dmt_after:?}"
    );
    assert_eq!(kct_after.len(), 2, "{kct_after:?}");
    let old: Vec<(String, String)> = dmt_before
        .iter()
        .map(|n| ("DevMachineTemplate".to_string(), n.clone()))
        .chain(
            kct_before
                .difference(&kct_after)
                .map(|n| ("KubeadmConfigTemplate".to_string(), n.clone())),
        )
        .collect();
    let inventory = managed_cluster_json("w-bump").unwrap()["status"]["inventory"].to_string();
    for (_, n) in &old {
        assert!(!inventory.contains(n.as_str()), "{n} left in {inventory}");
    }
    let old_machines: Vec<(String, String, String)> = before
        .iter()
        .map(|m| (m.role.clone(), m.version.clone(), m.name.clone()))
        .collect();
    templates_deleted_after_machines(&tl, &old, &old_machines).await;
    let pruned_in_first = out.first().clusters[0]
        .plan
        .entries
        .iter()
        .filter(|e| e.action == Action::Prune)
        .count();
    assert_eq!(
        pruned_in_first, 0,
        "nothing is pruned while the upgrade starts"
    );

    // A template change of md-0 and a scale of md-1 together: md-0 rolls, md-1's scale goes at
    // once (a scale rolls nothing and waits for nothing).
    let rolled_md0 = of_role(&repo.machines("w-bump"), "w-bump-md-0")[0]
        .name
        .clone();
    repo.edit(
        "w-bump",
        "- name: \"md-0\"\n      count: 1\n",
        "- name: \"md-0\"\n      count: 1\n      labels: {\"tier\": \"general\"}\n",
    );
    repo.edit(
        "w-bump",
        "- name: \"md-1\"\n      count: 1",
        "- name: \"md-1\"\n      count: 2",
    );
    let out = repo.converge(only).await;
    let md1 = out.first().clusters[0]
        .plan
        .entries
        .iter()
        .find(|e| e.object.name == "w-bump-md-1" && e.object.kind == "MachineDeployment")
        .unwrap();
    assert_eq!((md1.action, md1.scale_only), (Action::Update, true));
    let scaled = at(format!("md w-bump-md-1 version={new_version} replicas=2"));
    let md0_rolled = at(format!(
        "deleted machine w-bump-md-0 {new_version} {rolled_md0}"
    ));
    assert!(
        scaled < md0_rolled,
        "the scale waited for md-0's rollout: {:#?}",
        tl.events()
    );
    assert_eq!(of_role(&repo.machines("w-bump"), "w-bump-md-1").len(), 2);
    for w in watches {
        w.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_change_rolls_only_its_group_and_remediation_is_not_fought() {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs =
        cp.logs_on_failure("a_template_change_rolls_only_its_group_and_remediation_is_not_fought");
    // Three machines in md-1: EKS-A's default maxUnhealthy for workers is 40%, so one
    // unhealthy machine of one is never remediated (Cluster API short-circuits), one of three is.
    let mut repo = Repo::new(
        "tmpl",
        &[(
            "w-tmpl",
            json!([{"name": "md-0", "count": 1}, {"name": "md-1", "count": 3}]),
        )],
    );
    let only = Some("w-tmpl");
    repo.converge(only).await;
    let before = repo.machines("w-tmpl");
    let templates_before = repo.names("kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io");
    let tl = Arc::new(Timeline::default());
    let watches = watch_machines_and_templates(cp, &repo.ns, &tl);

    // New node labels for md-0: a new KubeadmConfigTemplate, md-0 rolls, nothing else does; the
    // old template is held (its MachineSet still makes machines from it) until md-0 has rolled.
    repo.edit(
        "w-tmpl",
        "- name: \"md-0\"\n      count: 1\n",
        "- name: \"md-0\"\n      count: 1\n      labels: {\"tier\": \"general\"}\n",
    );
    let out = repo.converge(only).await;
    let changes: BTreeSet<(String, String)> = out.first().clusters[0]
        .plan
        .entries
        .iter()
        .filter(|e| e.action != Action::Unchanged)
        .map(|e| (e.action.to_string(), e.object.kind.clone()))
        .collect();
    let expected: BTreeSet<(String, String)> = [
        ("create", "KubeadmConfigTemplate"),
        ("update", "MachineDeployment"),
        ("update", "Cluster"), // the EKS-A Cluster object
        ("held", "KubeadmConfigTemplate"),
    ]
    .into_iter()
    .map(|(a, k)| (a.to_string(), k.to_string()))
    .collect();
    assert_eq!(changes, expected);
    let after = repo.machines("w-tmpl");
    assert!(all_running(&after), "{after:?}");
    assert_ne!(
        names_of(&of_role(&after, "w-tmpl-md-0")),
        names_of(&of_role(&before, "w-tmpl-md-0")),
        "md-0 rolled"
    );
    assert_eq!(
        names_of(&of_role(&after, "w-tmpl-md-1")),
        names_of(&of_role(&before, "w-tmpl-md-1")),
        "md-1 did not"
    );
    assert_eq!(
        names_of(&of_role(&after, "control-plane")),
        names_of(&of_role(&before, "control-plane"))
    );
    // The old template was pruned after the rollout, from the API server and the inventory.
    let templates = repo.names("kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io");
    let removed: Vec<&String> = templates_before.difference(&templates).collect();
    let added: Vec<&String> = templates.difference(&templates_before).collect();
    assert_eq!(
        (removed.len(), added.len()),
        (1, 1),
        "{templates_before:?} -> {templates:?}"
    );
    assert!(removed[0].starts_with("w-tmpl-md-0-") && added[0].starts_with("w-tmpl-md-0-"));
    let inventory = managed_cluster_json("w-tmpl").unwrap()["status"]["inventory"].to_string();
    assert!(!inventory.contains(removed[0].as_str()) && inventory.contains(added[0].as_str()));
    let pruned_by: Vec<usize> = out
        .passes
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            p.clusters[0]
                .plan
                .entries
                .iter()
                .any(|e| e.action == Action::Prune && e.object.name == *removed[0])
        })
        .map(|(i, _)| i)
        .collect();
    assert!(
        pruned_by.len() == 1 && pruned_by[0] > 0,
        "pruned by a later pass than the one that applied the change, once: {pruned_by:?}\n{}",
        history(&out)
    );
    // From the API server's write order: deleted only after md-0's last old Machine was.
    let old_md0: Vec<(String, String, String)> = of_role(&before, "w-tmpl-md-0")
        .iter()
        .map(|m| (m.role.clone(), m.version.clone(), m.name.clone()))
        .collect();
    templates_deleted_after_machines(
        &tl,
        &[("KubeadmConfigTemplate".into(), removed[0].clone())],
        &old_md0,
    )
    .await;
    for w in watches {
        w.abort();
    }

    // MachineHealthCheck remediation: md-1's machine is marked unhealthy, Cluster API replaces
    // it; capstan, reconciling the same revision meanwhile, changes none of its objects.
    let victim = of_role(&after, "w-tmpl-md-1")[0].name.clone();
    let machines: Api<DynamicObject> = Api::namespaced_with(
        cp.client(),
        &repo.ns,
        &gvk_resource("cluster.x-k8s.io", "v1beta2", "Machine"),
    );
    let uid = machines.get(&victim).await.unwrap().metadata.uid.unwrap();
    let mark = cp.audit().mark();
    shared_kubectl(&[
        "annotate",
        "machines.cluster.x-k8s.io",
        &victim,
        "-n",
        &repo.ns,
        "cluster.x-k8s.io/remediate-machine=",
    ]);
    tokio::time::timeout(
        SETTLE,
        kube::runtime::wait::await_condition(
            machines,
            &victim,
            kube::runtime::wait::conditions::is_deleted(&uid),
        ),
    )
    .await
    .expect("the unhealthy machine is remediated")
    .unwrap();
    // Reconciling the same revision while Cluster API replaces it, until Ready again.
    let healed = repo.converge(only).await;
    for p in &healed.passes {
        assert!(
            !p.has_changes(),
            "capstan fought the remediation: {}",
            summary(p)
        );
    }
    let md1 = of_role(&repo.machines("w-tmpl"), "w-tmpl-md-1")
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(md1.len(), 3, "{md1:?}");
    assert!(
        md1.iter().all(|m| m.name != victim && m.phase == "Running"),
        "{md1:?}"
    );
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    let capstan_writes: Vec<String> = cp
        .audit()
        .writes_by_manager_since(mark, "capstan")
        .unwrap()
        .into_iter()
        .filter(|e| e.namespace() == Some(repo.ns.as_str()))
        .map(|e| format!("{} {}", e.verb, e.request_uri))
        .collect();
    assert!(
        capstan_writes.is_empty(),
        "capstan wrote during remediation: {capstan_writes:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tombstone_deletes_the_cluster_and_its_machines_and_nothing_else() {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs =
        cp.logs_on_failure("a_tombstone_deletes_the_cluster_and_its_machines_and_nothing_else");
    let mut repo = Repo::new(
        "del",
        &[
            ("w-del", json!([{"name": "md-0", "count": 1}])),
            ("w-keep", json!([{"name": "md-0", "count": 1}])),
        ],
    );
    repo.converge(None).await;
    let keep = repo.machines("w-keep");
    let mgmt = repo.machines(&repo.mgmt.clone());
    assert_eq!(repo.machines("w-del").len(), 2);
    assert_eq!((keep.len(), mgmt.len()), (2, 2));

    repo.tombstone("w-del");
    let out = repo.converge(None).await;
    let del = out
        .last()
        .clusters
        .iter()
        .find(|c| c.name == "w-del")
        .unwrap();
    assert_eq!(
        (del.phase, del.message.as_str()),
        (Phase::Deleting, capstan::reconcile::DELETED)
    );

    // The Cluster and every Machine are gone, and every object capstan rendered for it.
    assert!(!repo.names("clusters.cluster.x-k8s.io").contains("w-del"));
    assert!(repo.machines("w-del").is_empty());
    for resource in [
        "clusters.anywhere.eks.amazonaws.com",
        "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
        "machinedeployments.cluster.x-k8s.io",
        "machinehealthchecks.cluster.x-k8s.io",
        "devclusters.infrastructure.cluster.x-k8s.io",
        "devmachinetemplates.infrastructure.cluster.x-k8s.io",
        "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
    ] {
        let left = kubectl_items(&[
            "get",
            resource,
            "-n",
            &repo.ns,
            "-l",
            "capstan.dev/cluster=w-del",
        ]);
        assert!(left.is_empty(), "{resource}: {left:?}");
    }
    assert!(managed_cluster_json("w-del").is_none());
    // Nothing else touched.
    assert_eq!(repo.machines("w-keep"), keep);
    assert_eq!(repo.machines(&repo.mgmt.clone()), mgmt);
    assert_eq!(
        managed_cluster_json("w-keep").unwrap()["status"]["phase"],
        "Ready"
    );
}
