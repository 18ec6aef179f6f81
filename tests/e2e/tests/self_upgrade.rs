//! A management cluster upgraded from within, against the real Cluster API controllers on a
//! control plane of this test's own (its API server is killed and restarted mid-upgrade, which
//! the shared test bed of other tests must not see).
//!
//! The management cluster `m-self` is, as everything on CAPD's in-memory backend, simulated:
//! its machines and API server are CAPD's. What is real is what capstan and the Cluster API
//! controllers do with its objects on the API server the test runs — the backup, the pause of
//! the workload clusters, the staged rollout, the order in which the kubeadm control plane
//! controller deletes the old machines — and the API server going away and coming back under
//! them. kube-vip cannot run here; the test plays its documented part: the Lease
//! `kube-system/plndr-cp-lock` naming the node that holds the control plane's address.

use std::collections::BTreeSet;
use std::time::Duration;

use capstan::reconcile::converge;
use capstan::status::Phase;
use capstan_e2e::capi::*;
use capstan_harness::objects::comparable;
use capstan_harness::{ControlPlane, StartOptions};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

fn status_of(cluster: &str) -> Value {
    managed_cluster_json(cluster).unwrap()["status"].clone()
}

fn paused(ns: &str, cluster: &str) -> bool {
    cluster_field(ns, cluster, ".spec.paused") == "true"
}

/// The management cluster capstan's pause of a workload Cluster is recorded for ("" none).
fn paused_for(ns: &str, cluster: &str) -> String {
    cluster_field(
        ns,
        cluster,
        ".metadata.annotations.capstan\\.dev/paused-for",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_management_cluster_upgrades_itself_from_within() {
    let mut cp = ControlPlane::start_with(StartOptions {
        controllers: true,
        timeout: Duration::from_secs(300),
        ..Default::default()
    })
    .await
    .unwrap();
    use_kubeconfig(cp.kubeconfig_path());
    let _logs = cp.logs_on_failure("a_management_cluster_upgrades_itself_from_within");
    let backups = tempfile::tempdir().unwrap();
    let mut repo = Repo::new_full(
        "self",
        |m| {
            m.control_plane_count = Some(3);
            m.kubernetes_version = Some("1.32".into());
        },
        &[
            ("w-self", json!([{"name": "md-0", "count": 1}])),
            ("w-op", json!([{"name": "md-0", "count": 1}])),
        ],
        |w| w.kubernetes_version = Some("1.32".into()),
    );
    // The agent runs as its ServiceAccount with exactly `capstan install`'s rules (no `--allow`):
    // the backup (which skips no kind, below), the pause and kube-vip's ordering need nothing
    // more.
    let agent = capstan::install::testing::agent_client(&cp).await;
    repo.client = Some(agent.clone());
    repo.backup_dir = Some(backups.path().to_path_buf());
    let (ns, mgmt) = (repo.ns.clone(), repo.mgmt.clone());
    repo.converge(None).await;
    let old_cp: Vec<Machine> = of_role(&repo.machines(&mgmt), "control-plane")
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(old_cp.len(), 3);
    // An operator pauses w-op on purpose (their own field manager): capstan's pause for the
    // upgrade must neither take it over nor, after, remove it.
    shared_kubectl(&[
        "patch",
        "clusters.cluster.x-k8s.io",
        "w-op",
        "-n",
        &ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"paused":true}}"#,
    ]);

    // kube-vip's part: the Lease of the control plane's address, held by the node of the
    // second control-plane machine.
    let holder = old_cp[1].name.clone();
    let node = shared_kubectl(&[
        "get",
        "machines.cluster.x-k8s.io",
        &holder,
        "-n",
        &ns,
        "-o",
        "jsonpath={.status.nodeRef.name}",
    ]);
    assert!(!node.is_empty());
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(cp.client(), "kube-system");
    leases
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "plndr-cp-lock"},
                "spec": {"holderIdentity": node, "leaseDurationSeconds": 15}
            }))
            .unwrap(),
        )
        .await
        .unwrap();

    // Every write from here on, for the order in which the old control-plane machines go: the
    // rollout starts in step 1 and may delete the first of them before step 2.
    let audit = cp.audit().mark();

    // 1. The management cluster goes to 1.33, and its workload scales md-0 in the same
    //    revision. A stage that makes no progress in time (1 s here) fails the cluster there:
    //    backup written, workload paused and its change held.
    repo.edit(
        &mgmt,
        "kubernetesVersion: \"1.32\"",
        "kubernetesVersion: \"1.33\"",
    );
    repo.edit(
        "w-self",
        "- name: \"md-0\"\n      count: 1",
        "- name: \"md-0\"\n      count: 2",
    );
    repo.revision += 1;
    // The control plane's controller is paused (Cluster API's annotation), so its stage makes
    // no progress and times out there, however fast the in-memory machines would have rolled
    // (the stage clock restarts at every machine step).
    let kcp_pause = |value: &str| {
        shared_kubectl(&[
            "annotate",
            "--overwrite",
            "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
            &mgmt,
            "-n",
            &ns,
            value,
        ]);
    };
    kcp_pause("cluster.x-k8s.io/paused=");
    let mut opts = repo.opts(None);
    opts.stage_timeout = Some(Duration::from_secs(1));
    let failed = converge(&agent, &repo.fleet(), &opts, SETTLE)
        .await
        .unwrap();
    let last = failed.last();
    let m = last.clusters.iter().find(|c| c.name == mgmt).unwrap();
    assert_eq!(m.phase, Phase::Failed, "{}", m.message);
    let st = status_of(&mgmt);
    assert_eq!(st["stage"], "ControlPlane", "{st}");
    let ready = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready["reason"], "StageTimedOut", "{st}");
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("control plane stage has made no progress"),
        "{st}"
    );
    let backup = st["backup"].as_str().unwrap().to_string();
    assert!(backup.starts_with(backups.path().to_str().unwrap()), "{st}");
    // Encrypted to the repository's key (the admin's, as the agent is configured).
    let identity = || capstan::backup::Identities::from(repo.backup_key.clone());
    assert_eq!(
        capstan::backup::encrypted_to(std::path::Path::new(&backup)).unwrap(),
        Some(vec![repo.backup_key.to_public().to_string()])
    );
    let backed_up = capstan::backup::read(std::path::Path::new(&backup), &identity()).unwrap();
    // Every kind of every backed-up group the API server serves was listed: none refused.
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(std::path::Path::new(&backup).join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["skipped"], json!([]), "{manifest}");
    assert!(
        manifest["kinds"].as_object().unwrap().len() >= 60,
        "{manifest}"
    );
    let kinds: BTreeSet<String> = backed_up
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_string())
        .collect();
    for k in [
        "Cluster",
        "KubeadmControlPlane",
        "MachineDeployment",
        "Machine",
        "Secret",
        "ManagedCluster",
    ] {
        assert!(kinds.contains(k), "{k} not backed up: {kinds:?}");
    }
    assert!(paused(&ns, "w-self"), "the workload cluster was not paused");
    assert_eq!(
        paused_for(&ns, "w-self"),
        mgmt,
        "the pause is recorded on w-self"
    );
    assert!(paused(&ns, "w-op"));
    assert_eq!(
        paused_for(&ns, "w-op"),
        "",
        "the operator's pause was taken over"
    );
    assert_eq!(status_of("w-self")["phase"], "Suspended");
    assert_eq!(
        of_role(&repo.machines("w-self"), "w-self-md-0").len(),
        1,
        "the workload's own change went out while its management cluster upgraded"
    );

    // 2. The same revision with no stage timeout: the upgrade goes on. Its API server is
    //    killed and restarted while the control plane rolls; nothing is lost. And the status
    //    has lost its backup (as a status written without it once did): the pause recorded on
    //    w-self's Cluster is what gets it unpaused once the control plane has rolled out.
    shared_kubectl(&[
        "patch",
        "managedclusters.capstan.dev",
        &mgmt,
        "-n",
        "capstan-system",
        "--subresource=status",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/status/backup"}]"#,
    ]);
    kcp_pause("cluster.x-k8s.io/paused-");
    let client = agent.clone();
    let (fleet, mut opts) = (repo.fleet(), repo.opts(None));
    opts.stage_timeout = None;
    let upgrade = tokio::spawn(async move { converge(&client, &fleet, &opts, SETTLE).await });
    // Once the first new control-plane machine exists, the rollout is under way.
    tokio::time::timeout(SETTLE, async {
        loop {
            let names: BTreeSet<String> = of_role(&repo.machines(&mgmt), "control-plane")
                .iter()
                .map(|m| m.name.clone())
                .collect();
            if names.iter().any(|n| !old_cp.iter().any(|o| &o.name == n)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the control plane started rolling");
    cp.crash_apiserver(Duration::from_secs(2)).await.unwrap();
    let done = upgrade.await.unwrap().unwrap();
    let out = done.last();
    for c in &out.clusters {
        // The operator's paused cluster: said so, not waited for.
        let want = if c.name == "w-op" {
            Phase::Suspended
        } else {
            Phase::Ready
        };
        assert_eq!(c.phase, want, "{}: {}", c.name, c.message);
    }
    let op = status_of("w-op");
    let ready = op["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&json!("Unknown"), &json!("Paused")),
        "{op}"
    );
    let cps = of_role(&repo.machines(&mgmt), "control-plane")
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(cps.len(), 3, "{cps:?}");
    assert!(
        cps.iter()
            .all(|m| m.version.starts_with("v1.33.") && !old_cp.iter().any(|o| o.name == m.name)),
        "{cps:?}"
    );
    // The workload is unpaused, its held change applied; the status no longer names a backup,
    // which stays on disk.
    assert!(!paused(&ns, "w-self"));
    assert_eq!(
        paused_for(&ns, "w-self"),
        "",
        "capstan's record of its pause stays"
    );
    assert!(paused(&ns, "w-op"), "the operator's own pause was removed");
    assert_eq!(of_role(&repo.machines("w-self"), "w-self-md-0").len(), 2);
    assert_eq!(status_of(&mgmt).get("backup"), None);
    assert!(
        std::path::Path::new(&backup)
            .join(capstan::backup::OBJECTS_ENCRYPTED)
            .exists()
    );
    // kube-vip's holder went last: Cluster API deleted the other old machines first.
    let deleted: Vec<String> = cp
        .audit()
        .events_since(audit)
        .unwrap()
        .into_iter()
        .filter(|e| e.verb == "delete" && e.resource() == Some("machines"))
        .filter(|e| (200..300).contains(&e.response_status.code.unwrap_or(0)))
        .filter_map(|e| e.object_ref.and_then(|r| r.name))
        .filter(|n| old_cp.iter().any(|o| &o.name == n))
        .fold(Vec::new(), |mut v, n| {
            if !v.contains(&n) {
                v.push(n);
            }
            v
        });
    assert_eq!(deleted.len(), 3, "{deleted:?}");
    assert_eq!(deleted.last(), Some(&holder), "{deleted:?}");

    // 3. The backup restores onto a fresh API server: every object back as it was. (Its
    //    upstream CRDs are installed; capstan's own status CRD is installed as an operator
    //    would, before restoring.)
    let target = ControlPlane::start().await.unwrap();
    capstan::install::install_crd(&target.client())
        .await
        .unwrap();
    let restored =
        capstan::backup::restore(&target.client(), std::path::Path::new(&backup), &identity())
            .await
            .unwrap();
    assert!(
        restored.existing.is_empty() && restored.unknown.is_empty(),
        "{restored:?}"
    );
    assert_eq!(restored.created, backed_up.len());
    let discovery = kube::discovery::Discovery::new(target.client())
        .run_aggregated()
        .await
        .unwrap();
    for o in &backed_up {
        let s = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or("");
        let (group, version) = s("/apiVersion")
            .split_once('/')
            .unwrap_or(("", s("/apiVersion")));
        let (ar, _) = discovery
            .resolve_gvk(&kube::core::GroupVersionKind::gvk(
                group,
                version,
                s("/kind"),
            ))
            .unwrap();
        let api: Api<DynamicObject> =
            Api::namespaced_with(target.client(), s("/metadata/namespace"), &ar);
        let back = serde_json::to_value(api.get(s("/metadata/name")).await.unwrap()).unwrap();
        let (mut want, mut got) = (comparable(o), comparable(&back));
        got["apiVersion"] = want["apiVersion"].clone();
        got["kind"] = want["kind"].clone();
        for v in [&mut want, &mut got] {
            if let Some(c) = v
                .pointer_mut("/status/conditions")
                .and_then(Value::as_array_mut)
            {
                c.sort_by_key(|c| c["type"].to_string());
            }
        }
        assert_eq!(got, want, "{} {}", s("/kind"), s("/metadata/name"));
    }
}
