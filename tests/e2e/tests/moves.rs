//! Clusters moved to another management cluster and back with `capstan move`, under the real
//! Cluster API controllers: the pivot's move and the back-out's, on two control planes of this
//! test's own.
//!
//! Each end is a real kube-apiserver + etcd with the upstream CRDs. The clusters are created by
//! capstan's pass on the first (`boot`), where the controllers run. Only one CAPD can run on a
//! machine (its in-memory backend holds fixed ports), so after each move the controllers are
//! uninstalled from the end the clusters left (webhooks and processes; what CAPD's in-memory
//! backend held goes with them, as it goes with a retired bootstrap cluster) and started on the
//! end they reached, as installing them into a new management cluster would. What must hold is
//! what `clusterctl move` promises and what its users report it breaks: no Machine replaced
//! (the same names and provider IDs, no new Machine), the new controllers serving the same
//! nodes, the clusters Ready, and capstan's pass on the new end finding nothing to apply.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use capstan::install::testing::agent_client;
use capstan::status::Phase;
use capstan_e2e::capi::{Repo, history, summary};
use capstan_harness::run::{capstan, kubectl, kubectl_json, kubectl_ok};
use capstan_harness::{ControlPlane, StartOptions};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(300);

/// A Machine as the move must keep it: (cluster, name, provider ID, node).
type Placed = (String, String, String, String);

/// The Machines of namespace `ns` on the management cluster behind `kubeconfig`, from kubectl.
fn placed(kubeconfig: &Path, ns: &str) -> BTreeSet<Placed> {
    kubectl_json(kubeconfig, &["get", "machines.cluster.x-k8s.io", "-n", ns])["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let s = |p: &str| {
                m.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            (
                s("/spec/clusterName"),
                s("/metadata/name"),
                s("/spec/providerID"),
                s("/status/nodeRef/name"),
            )
        })
        .collect()
}

/// The nodes each cluster's Machines name, by cluster.
fn nodes_by_cluster(placed: &BTreeSet<Placed>) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (cluster, _, _, node) in placed {
        out.entry(cluster.clone()).or_default().insert(node.clone());
    }
    out
}

/// `capstan move` of `clusters` from `from` to `to`; panics with its output when it fails.
fn capstan_move(from: &ControlPlane, to: &ControlPlane, ns: &str, clusters: &[&str]) -> String {
    let mut args = vec![
        "move".to_string(),
        "--kubeconfig".into(),
        from.kubeconfig_path().display().to_string(),
        "--to".into(),
        to.kubeconfig_path().display().to_string(),
    ];
    for c in clusters {
        args.extend(["--cluster".into(), format!("{ns}/{c}")]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = capstan(&args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "capstan {}:\n{text}", args.join(" "));
    text
}

/// The nodes the workload API server of `cluster` serves, reached with the kubeconfig Secret
/// Cluster API keeps for it on `cp` (None while it does not answer).
fn served_nodes(cp: &ControlPlane, ns: &str, cluster: &str) -> Option<BTreeSet<String>> {
    let (found, kubeconfig) = kubectl(
        cp.kubeconfig_path(),
        &[
            "get",
            "secret",
            &format!("{cluster}-kubeconfig"),
            "-n",
            ns,
            "-o",
            "go-template={{.data.value | base64decode}}",
        ],
    );
    if !found {
        return None;
    }
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), kubeconfig).unwrap();
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(file.path())
        .args(["get", "nodes", "-o", "json", "--request-timeout=5s"])
        .output()
        .unwrap();
    if !out.status.success() {
        return None;
    }
    let list: Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(
        list["items"]
            .as_array()?
            .iter()
            .filter_map(|n| n.pointer("/metadata/name").and_then(Value::as_str))
            .map(str::to_string)
            .collect(),
    )
}

/// Waits until the controllers on `cp` serve, for every cluster, exactly the nodes its Machines
/// name: CAPD's in-memory backend on this end has rebuilt the same machines, not new ones.
async fn wait_served(cp: &ControlPlane, ns: &str, want: &BTreeMap<String, BTreeSet<String>>) {
    let deadline = Instant::now() + TIMEOUT;
    for (cluster, nodes) in want {
        loop {
            let served = served_nodes(cp, ns, cluster);
            if served.as_ref() == Some(nodes) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{cluster}: the workload API server serves {served:?}, the Machines name {nodes:?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Each Cluster API Cluster of `ns` on `cp`: its `Available` condition's status and message,
/// from kubectl.
fn availability(cp: &ControlPlane, ns: &str) -> BTreeMap<String, (String, String)> {
    kubectl_json(
        cp.kubeconfig_path(),
        &["get", "clusters.cluster.x-k8s.io", "-n", ns],
    )["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let available = c
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|k| k["type"] == "Available");
            let field = |f: &str| {
                available
                    .and_then(|k| k[f].as_str())
                    .unwrap_or("")
                    .to_string()
            };
            (
                c["metadata"]["name"].as_str().unwrap().to_string(),
                (field("status"), field("message")),
            )
        })
        .collect()
}

/// Waits until both Clusters of `ns` on `cp` are Available, as its controllers report it.
async fn wait_available(cp: &ControlPlane, ns: &str) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let now = availability(cp, ns);
        if now.len() == 2 && now.values().all(|(s, _)| s == "True") {
            return;
        }
        assert!(Instant::now() < deadline, "not Available: {now:#?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// capstan's pass, as the agent on the end the clusters are on: every cluster Ready, nothing to
/// apply.
async fn nothing_to_apply(repo: &Repo) {
    let out = repo.pass(None).await;
    assert!(
        !out.has_changes() && out.clusters.iter().all(|c| c.phase == Phase::Ready),
        "after the move: {}\n{:#?}",
        summary(&out),
        out.clusters
            .iter()
            .flat_map(|c| c.plan.entries.iter())
            .filter(|e| e.action != capstan::plan::Action::Unchanged)
            .map(|e| format!("{} {}", e.action, e.object.name))
            .collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_move_to_a_new_management_cluster_and_back_with_no_machine_replaced() {
    let start = |controllers| {
        ControlPlane::start_with(StartOptions {
            controllers,
            install_crds: true,
            timeout: TIMEOUT,
            ..Default::default()
        })
    };
    let mut boot = start(true).await.unwrap();
    let _logs = boot.logs_on_failure("clusters_move_to_a_new_management_cluster_and_back");
    let mut repo = Repo::new("mv", &[("w-mv", json!([{"name": "md-0", "count": 1}]))]);
    repo.client = Some(agent_client(&boot).await);
    repo.converge(None).await;
    let (mgmt, ns) = (repo.mgmt.clone(), repo.ns.clone());
    let clusters = [mgmt.as_str(), "w-mv"];
    let before = placed(boot.kubeconfig_path(), &ns);
    wait_available(&boot, &ns).await;
    assert_eq!(before.len(), 4, "{before:#?}");
    assert!(
        before
            .iter()
            .all(|(_, _, id, node)| !id.is_empty() && !node.is_empty()),
        "{before:#?}"
    );

    // The new management cluster: the CRDs, capstan's own as `capstan install` writes them.
    let mut next = start(false).await.unwrap();
    let next_agent = agent_client(&next).await;
    let said = capstan_move(&boot, &next, &ns, &clusters);
    assert!(said.contains("done"), "{said}");
    assert_eq!(placed(boot.kubeconfig_path(), &ns), BTreeSet::new());
    assert_eq!(placed(next.kubeconfig_path(), &ns), before);

    boot.stop_controllers().await.unwrap();
    next.start_controllers().await.unwrap();
    let _next_logs = next.logs_on_failure("clusters_move_to_a_new_management_cluster");
    wait_served(&next, &ns, &nodes_by_cluster(&before)).await;
    assert_eq!(
        placed(next.kubeconfig_path(), &ns),
        before,
        "a Machine replaced"
    );
    wait_available(&next, &ns).await;
    for c in &clusters {
        let paused = kubectl_ok(
            next.kubeconfig_path(),
            &[
                "get",
                "clusters.cluster.x-k8s.io",
                c,
                "-n",
                &ns,
                "-o",
                "jsonpath={.spec.paused}",
            ],
        );
        assert_ne!(paused.trim(), "true", "{c} left paused");
    }
    repo.client = Some(next_agent);
    nothing_to_apply(&repo).await;

    // Managed from there: a worker more, made by the new end's controllers; none replaced.
    repo.edit(
        "w-mv",
        "- name: \"md-0\"\n      count: 1",
        "- name: \"md-0\"\n      count: 2",
    );
    let out = repo.converge(None).await;
    let grown = placed(next.kubeconfig_path(), &ns);
    assert!(
        grown.len() == 5 && before.is_subset(&grown),
        "{grown:#?}\n{}",
        history(&out)
    );

    // And back: the back-out's move onto a temporary cluster (the first end, its controllers
    // gone, as a fresh one would be).
    let said = capstan_move(&next, &boot, &ns, &clusters);
    assert!(said.contains("done"), "{said}");
    assert_eq!(placed(next.kubeconfig_path(), &ns), BTreeSet::new());
    assert_eq!(placed(boot.kubeconfig_path(), &ns), grown);
    next.stop_controllers().await.unwrap();
    boot.start_controllers().await.unwrap();
    wait_served(&boot, &ns, &nodes_by_cluster(&grown)).await;
    assert_eq!(
        placed(boot.kubeconfig_path(), &ns),
        grown,
        "a Machine replaced"
    );
    wait_available(&boot, &ns).await;
    repo.client = Some(agent_client(&boot).await);
    nothing_to_apply(&repo).await;
}
