//! The agent's lifecycle scenarios against the real API server: apply a fleet, change one
//! cluster and see only its objects change, scale, orphan, delete on intent (Cluster first), a
//! broken spec that leaves the others applied, drift, autoscaler-owned replicas, health, an agent
//! killed mid-apply, and the zero-write no-op pass (counted from the API server's audit log).
//!
//! Each test has its own management cluster name and namespace, so tests share one control plane
//! without seeing each other.

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use capstan::plan::{Action, ObjectRef};
use capstan::reconcile::{Drift, Options, Outcome, reconcile};
use capstan::status::Phase;
use capstan_e2e::FleetDir;
use capstan_harness::{AuditMark, ControlPlane};
use capstan_layout::Fleet;
use capstan_layout::scaffold::ClusterRequest;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

/// A fleet repository in a temp dir: management `m`, workloads `a` and `b` (docker), all in `ns`.
struct Repo {
    files: FleetDir,
    mgmt: String,
    ns: String,
}

impl Repo {
    fn new(tag: &str) -> Repo {
        let mgmt = format!("m-{tag}");
        let ns = format!("t-{tag}");
        let base = |name: &str, mgmt: Option<&str>, pods: &str, svc: &str| ClusterRequest {
            name: name.into(),
            management: mgmt.map(str::to_string),
            provider: "docker".into(),
            namespace: Some(ns.clone()),
            kubernetes_version: Some("1.33".into()),
            pod_cidr: Some(pods.into()),
            service_cidr: Some(svc.into()),
            ..Default::default()
        };
        let mut files = FleetDir::new(base(&mgmt, None, "192.168.0.0/16", "10.96.0.0/12"));
        let mut a = base(
            &format!("a-{tag}"),
            Some(&mgmt),
            "172.16.0.0/16",
            "10.112.0.0/16",
        );
        a.values = Some(
            json!({"workerGroups": [{"name": "md-0", "count": 2}, {"name": "auto", "autoscaling": {"minCount": 1, "maxCount": 5}}]}),
        );
        files.add(a);
        files.add(base(
            &format!("b-{tag}"),
            Some(&mgmt),
            "172.17.0.0/16",
            "10.113.0.0/16",
        ));
        Repo { files, mgmt, ns }
    }

    fn dir(&self, cluster: &str) -> PathBuf {
        self.files.dir(cluster)
    }

    fn edit(&self, cluster: &str, from: &str, to: &str) {
        self.files.edit(cluster, from, to)
    }

    fn fleet(&self) -> Fleet {
        self.files.fleet()
    }

    async fn reconcile(&self, revision: &str) -> Outcome {
        self.reconcile_with(revision, Drift::Correct, false).await
    }

    async fn reconcile_with(&self, revision: &str, drift: Drift, plan_only: bool) -> Outcome {
        let cp = capstan_harness::shared().await;
        let opts = Options {
            revision: revision.into(),
            drift,
            management: Some(self.mgmt.clone()),
            ..Default::default()
        };
        let client = capstan::install::testing::agent_client(cp).await;
        if plan_only {
            capstan::reconcile::plan(&client, &self.fleet(), &opts)
                .await
                .unwrap()
        } else {
            reconcile(&client, &self.fleet(), &opts).await.unwrap()
        }
    }
}

/// How many entries of `cluster`'s plan in `o` are `action`.
fn count_actions(o: &Outcome, cluster: &str, action: Action) -> usize {
    capstan_e2e::cluster_outcome(o, cluster)
        .plan
        .entries
        .iter()
        .filter(|e| e.action == action)
        .count()
}

async fn list_names(cp: &ControlPlane, ns: &str, r: &ApiResource) -> Vec<String> {
    let api: Api<DynamicObject> = Api::namespaced_with(cp.client(), ns, r);
    let mut names: Vec<String> = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    names.sort();
    names
}

fn capi_clusters() -> ApiResource {
    capstan_e2e::resource("cluster.x-k8s.io", "v1beta2", "Cluster", "clusters")
}
/// The API resource of Cluster API MachineDeployments.
fn machine_deployment_resource() -> ApiResource {
    capstan_e2e::resource(
        "cluster.x-k8s.io",
        "v1beta2",
        "MachineDeployment",
        "machinedeployments",
    )
}
fn machine_templates() -> ApiResource {
    capstan_e2e::resource(
        "infrastructure.cluster.x-k8s.io",
        "v1beta2",
        "DockerMachineTemplate",
        "dockermachinetemplates",
    )
}

/// Writes the API server received since `mark`, in the test's namespace or to its status objects.
async fn writes_since(cp: &ControlPlane, mark: AuditMark, repo: &Repo) -> Vec<String> {
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    let names: Vec<String> = repo
        .fleet()
        .clusters
        .iter()
        .map(|c| c.name.clone())
        .collect();
    cp.audit()
        .events_since(mark)
        .unwrap()
        .into_iter()
        .filter(|e| e.is_write())
        .filter(|e| {
            e.namespace() == Some(repo.ns.as_str())
                || (e.namespace() == Some("capstan-system")
                    && e.object_ref
                        .as_ref()
                        .and_then(|o| o.name.as_ref())
                        .is_some_and(|n| names.contains(n)))
        })
        .map(|e| format!("{} {}", e.verb, e.request_uri))
        .collect()
}

/// A MachineDeployment's `spec.replicas`, from the API server.
async fn replicas(cp: &ControlPlane, ns: &str, name: &str) -> Value {
    let md: Api<DynamicObject> =
        Api::namespaced_with(cp.client(), ns, &machine_deployment_resource());
    md.get(name).await.unwrap().data["spec"]["replicas"].clone()
}

/// The Ready condition of a ManagedCluster read from the API server.
fn ready_condition(st: &Value) -> Value {
    st["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or_else(|| panic!("no Ready condition: {st}"))
}

/// The status of `cluster`'s ManagedCluster, if it has one.
async fn managed_status_of(cp: &ControlPlane, cluster: &str) -> Option<Value> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        cp.client(),
        "capstan-system",
        &capstan_e2e::resource(
            "capstan.dev",
            "v1alpha1",
            "ManagedCluster",
            "managedclusters",
        ),
    );
    api.get_opt(cluster)
        .await
        .unwrap()
        .map(|o| serde_json::to_value(o).unwrap())
}

#[tokio::test]
async fn apply_then_a_no_op_pass_makes_zero_writes() {
    let repo = Repo::new("noop");
    let cp = capstan_harness::shared().await;
    let first = repo.reconcile("r1").await;
    assert!(!first.has_failures(), "{:#?}", first.clusters);
    let a = "a-noop".to_string();
    assert!(count_actions(&first, &a, Action::Create) >= 10);
    assert_eq!(
        list_names(cp, &repo.ns, &capi_clusters()).await,
        vec![a.clone(), "b-noop".to_string(), "m-noop".to_string()]
    );
    // kubectl, an independent client, sees the objects and the status columns.
    let out = std::process::Command::new("kubectl")
        .args([
            "--kubeconfig",
            cp.kubeconfig_path().to_str().unwrap(),
            "get",
            "managedclusters",
            "-n",
            "capstan-system",
            a.as_str(),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("PHASE") && text.contains("Progressing") && text.contains("r1"),
        "{text}"
    );

    // An Event records what the pass did, on the cluster's ManagedCluster.
    let events = std::process::Command::new("kubectl")
        .args([
            "--kubeconfig",
            cp.kubeconfig_path().to_str().unwrap(),
            "get",
            "events.events.k8s.io",
            "-n",
            "capstan-system",
            "-o",
            "jsonpath={range .items[*]}{.regarding.name} {.reason} {.note}{\"\\n\"}{end}",
        ])
        .output()
        .unwrap();
    let events = String::from_utf8_lossy(&events.stdout);
    assert!(
        events
            .lines()
            .any(|l| l.starts_with(&format!("{a} Applied")) && l.contains("create")),
        "{events}"
    );

    let mark = cp.audit().mark();
    let second = repo.reconcile("r1").await;
    assert!(!second.has_changes());
    assert_eq!(second.writes, 0);
    assert!(writes_since(cp, mark, &repo).await.is_empty());
    // Nothing else either: no CRD or namespace re-applied (writes by this test's client only,
    // i.e. capstan's field manager).
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    let capstan_writes: Vec<String> = cp
        .audit()
        .writes_by_manager_since(mark, "capstan")
        .unwrap()
        .into_iter()
        .map(|e| e.request_uri)
        .collect();
    assert!(
        capstan_writes
            .iter()
            .all(|u| !u.contains("customresourcedefinitions/managedclusters")
                && !u.contains("namespaces/capstan-system?")),
        "{capstan_writes:#?}"
    );
    let objects: usize = second.clusters.iter().map(|c| c.plan.entries.len()).sum();
    // One list per kind, a status list, a namespace list: a fraction of a request per object.
    assert!(
        (second.reads as f64) / (objects as f64) < 0.5,
        "{} reads for {objects} objects",
        second.reads
    );
}

#[tokio::test]
async fn a_version_bump_changes_only_that_cluster_and_rolls_its_templates() {
    let repo = Repo::new("bump");
    let cp = capstan_harness::shared().await;
    repo.reconcile("r1").await;
    let before = list_names(cp, &repo.ns, &machine_templates()).await;
    let a = "a-bump";
    repo.edit(
        a,
        "kubernetesVersion: \"1.33\"",
        "kubernetesVersion: \"1.34\"",
    );
    // Without the Cluster API controllers the cluster never reports itself healthy, and the
    // health gate would hold the whole upgrade (it has not started then: `Progressing`); the
    // repository says to upgrade it anyway, so that its stages go out.
    repo.edit(
        a,
        "metadata:\n  name: \"a-bump\"\n",
        "metadata:\n  name: \"a-bump\"\n  annotations:\n    capstan.dev/upgrade-when-unhealthy: \"no Cluster API controllers here\"\n",
    );

    let plan = repo.reconcile_with("r2", Drift::Correct, true).await;
    assert_eq!(
        count_actions(&plan, "b-bump", Action::Unchanged),
        capstan_e2e::cluster_outcome(&plan, "b-bump")
            .plan
            .entries
            .len()
    );
    assert_eq!(
        count_actions(&plan, "m-bump", Action::Unchanged),
        capstan_e2e::cluster_outcome(&plan, "m-bump")
            .plan
            .entries
            .len()
    );
    assert!(
        count_actions(&plan, a, Action::Create) >= 3,
        "new hashed templates: {:#?}",
        capstan_e2e::cluster_outcome(&plan, a).plan.entries
    );
    // Stage by stage: the control plane first, the workers (and the prune of the templates
    // they still use) held until it has rolled out — which, without the Cluster API controllers
    // of `lifecycle.rs`, it never does here.
    assert!(
        count_actions(&plan, a, Action::Held) >= 2,
        "workers and prunes held: {:#?}",
        capstan_e2e::cluster_outcome(&plan, a).plan.entries
    );

    let mark = cp.audit().mark();
    let out = repo.reconcile("r2").await;
    assert!(!out.has_failures());
    // Object writes only touch the bumped cluster (status objects record the new revision for all).
    let writes: Vec<String> = writes_since(cp, mark, &repo)
        .await
        .into_iter()
        .filter(|w| !w.contains("/managedclusters/"))
        .collect();
    assert!(
        writes.iter().all(|w| w.contains(&format!("/{a}"))),
        "writes outside the bumped cluster: {writes:#?}"
    );
    let after = list_names(cp, &repo.ns, &machine_templates()).await;
    let a_before: Vec<_> = before.iter().filter(|n| n.starts_with(a)).collect();
    let a_new: Vec<_> = after
        .iter()
        .filter(|n| n.starts_with(a) && !before.contains(n))
        .collect();
    assert_eq!(
        a_before.len(),
        a_new.len(),
        "every template of {a} has a new name: {a_before:?} -> {after:?}"
    );
    assert_eq!(
        capstan_e2e::cluster_outcome(&out, a).phase,
        Phase::Upgrading,
        "{}",
        capstan_e2e::cluster_outcome(&out, a).message
    );
    assert_eq!(
        before
            .iter()
            .filter(|n| !n.starts_with(a))
            .collect::<Vec<_>>(),
        after
            .iter()
            .filter(|n| !n.starts_with(a))
            .collect::<Vec<_>>()
    );
    let md: Api<DynamicObject> =
        Api::namespaced_with(cp.client(), &repo.ns, &machine_deployment_resource());
    let md0 = md.get(&format!("{a}-md-0")).await.unwrap();
    assert!(
        md0.data["spec"]["template"]["spec"]["version"]
            .as_str()
            .unwrap()
            .starts_with("v1.33"),
        "the workers changed before the control plane rolled out"
    );
}

#[tokio::test]
async fn scaling_a_worker_group_updates_replicas_only() {
    let repo = Repo::new("scale");
    let cp = capstan_harness::shared().await;
    repo.reconcile("r1").await;
    let templates = list_names(cp, &repo.ns, &machine_templates()).await;
    repo.edit("a-scale", "count: 2", "count: 4");
    let out = repo.reconcile("r2").await;
    let updates: Vec<String> = capstan_e2e::cluster_outcome(&out, "a-scale")
        .plan
        .entries
        .iter()
        .filter(|e| e.action != Action::Unchanged)
        .map(|e| format!("{} {}", e.action, e.object.subject()))
        .collect();
    assert!(
        updates.iter().any(|u| u.starts_with("update")
            && u.contains("MachineDeployment")
            && u.contains("md-0")),
        "{updates:?}"
    );
    assert!(
        updates.iter().all(|u| !u.contains("Template")),
        "scaling must not roll templates: {updates:?}"
    );
    assert_eq!(
        list_names(cp, &repo.ns, &machine_templates()).await,
        templates
    );
    let md: Api<DynamicObject> =
        Api::namespaced_with(cp.client(), &repo.ns, &machine_deployment_resource());
    assert_eq!(
        md.get("a-scale-md-0").await.unwrap().data["spec"]["replicas"],
        4
    );
}

#[tokio::test]
async fn the_autoscaler_owns_replicas() {
    let repo = Repo::new("auto");
    let cp = capstan_harness::shared().await;
    repo.reconcile("r1").await;
    let md: Api<DynamicObject> =
        Api::namespaced_with(cp.client(), &repo.ns, &machine_deployment_resource());
    let auto = md.get("a-auto-auto").await.unwrap();
    assert!(
        auto.data["spec"].get("replicas").is_none()
            || auto.data["spec"]["replicas"].is_null()
            || auto.data["spec"]["replicas"] == 1,
        "{:?}",
        auto.data["spec"]["replicas"]
    );
    // The cluster autoscaler scales the group: a different field manager sets replicas.
    let pp = PatchParams::apply("cluster-autoscaler").force();
    md.patch("a-auto-auto", &pp, &Patch::Apply(json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment", "spec": {"replicas": 4}}))).await.unwrap();
    let mark = cp.audit().mark();
    let out = repo.reconcile("r1").await;
    assert!(!out.has_failures());
    assert_eq!(
        md.get("a-auto-auto").await.unwrap().data["spec"]["replicas"],
        4,
        "capstan must never re-apply replicas of an autoscaled group"
    );
    let writes = writes_since(cp, mark, &repo).await;
    assert!(
        writes
            .iter()
            .all(|w| !w.contains("machinedeployments/a-auto-auto")),
        "{writes:?}"
    );
}

#[tokio::test]
async fn a_removed_directory_is_orphaned_and_nothing_is_deleted() {
    let repo = Repo::new("orphan");
    let cp = capstan_harness::shared().await;
    repo.reconcile("r1").await;
    let before = list_names(cp, &repo.ns, &machine_templates()).await;
    fs::remove_dir_all(repo.dir("b-orphan")).unwrap();
    let mark = cp.audit().mark();
    let out = repo.reconcile("r2").await;
    assert_eq!(
        capstan_e2e::cluster_outcome(&out, "b-orphan").phase,
        Phase::Orphaned
    );
    let deletes: Vec<String> = writes_since(cp, mark, &repo)
        .await
        .into_iter()
        .filter(|w| w.starts_with("delete"))
        .collect();
    assert!(deletes.is_empty(), "{deletes:?}");
    assert_eq!(list_names(cp, &repo.ns, &machine_templates()).await, before);
    assert!(
        list_names(cp, &repo.ns, &capi_clusters())
            .await
            .contains(&"b-orphan".to_string())
    );
    assert_eq!(
        managed_status_of(cp, "b-orphan").await.unwrap()["status"]["phase"],
        "Orphaned"
    );
}

#[tokio::test]
async fn a_tombstone_deletes_the_cluster_object_first_then_the_rest() {
    let repo = Repo::new("tomb");
    let cp = capstan_harness::shared().await;
    repo.reconcile("r1").await;
    let dir = repo.dir("b-tomb");
    fs::remove_file(dir.join("cluster.yaml")).unwrap();
    fs::write(
        dir.join("tombstone.yaml"),
        capstan_layout::intent::document("Tombstone", "test"),
    )
    .unwrap();
    let mark = cp.audit().mark();
    let out = repo.reconcile("r2").await;
    assert_eq!(
        capstan_e2e::cluster_outcome(&out, "b-tomb").message,
        "deleted"
    );
    let deletes: Vec<String> = writes_since(cp, mark, &repo)
        .await
        .into_iter()
        .filter(|w| w.starts_with("delete"))
        .collect();
    assert!(
        deletes
            .first()
            .is_some_and(|d| d.contains("/clusters/b-tomb")),
        "the CAPI Cluster goes first: {deletes:#?}"
    );
    assert!(deletes.len() >= 8, "{deletes:#?}");
    assert!(
        !list_names(cp, &repo.ns, &capi_clusters())
            .await
            .contains(&"b-tomb".to_string())
    );
    assert!(
        list_names(cp, &repo.ns, &machine_templates())
            .await
            .iter()
            .all(|n| !n.starts_with("b-tomb"))
    );
    assert!(
        list_names(cp, &repo.ns, &capi_clusters())
            .await
            .contains(&"a-tomb".to_string()),
        "other clusters untouched"
    );
    assert!(managed_status_of(cp, "b-tomb").await.is_none());
}

#[tokio::test]
async fn a_broken_spec_keeps_its_last_revision_and_the_others_still_apply() {
    let repo = Repo::new("broken");
    let cp = capstan_harness::shared().await;
    repo.reconcile("r1").await;
    repo.edit("a-broken", "count: 2", "count: two");
    repo.edit(
        "b-broken",
        "count: 1\n  clusterNetwork",
        "count: 3\n  clusterNetwork",
    );
    let out = repo.reconcile("r2").await;
    let a = capstan_e2e::cluster_outcome(&out, "a-broken");
    assert_eq!(a.phase, Phase::Failed);
    assert!(a.message.contains("r1 stays live"), "{}", a.message);
    assert_eq!(
        managed_status_of(cp, "a-broken").await.unwrap()["status"]["lastAppliedRevision"],
        "r1"
    );
    let md: Api<DynamicObject> =
        Api::namespaced_with(cp.client(), &repo.ns, &machine_deployment_resource());
    assert_eq!(
        md.get("a-broken-md-0").await.unwrap().data["spec"]["replicas"],
        2,
        "the broken cluster's objects stay as applied"
    );
    assert_eq!(
        md.get("b-broken-md-0").await.unwrap().data["spec"]["replicas"],
        3,
        "the other cluster still applies"
    );
    assert_eq!(
        managed_status_of(cp, "b-broken").await.unwrap()["status"]["lastAppliedRevision"],
        "r2"
    );
}

/// Suspension, as the agent's ServiceAccount: a suspended cluster keeps what it has — its change
/// is not applied, a hand edit is not corrected, nothing is pruned — and says so in its status,
/// while the other cluster still applies; resumed, the pending change goes out.
#[tokio::test]
async fn a_suspended_cluster_is_left_alone_and_resumed_it_catches_up() {
    let repo = Repo::new("susp");
    let cp = capstan_harness::shared().await;
    repo.reconcile("r1").await;
    let md: Api<DynamicObject> =
        Api::namespaced_with(cp.client(), &repo.ns, &machine_deployment_resource());
    std::fs::write(
        repo.dir("a-susp").join("suspend.yaml"),
        "apiVersion: capstan.dev/v1alpha1\nkind: Suspend\nreason: maintenance by hand\n",
    )
    .unwrap();
    repo.edit("a-susp", "count: 2", "count: 4");
    repo.edit(
        "b-susp",
        "count: 1\n  clusterNetwork",
        "count: 3\n  clusterNetwork",
    );
    // A hand edit of the suspended cluster's MachineDeployment stays as it is.
    md.patch(
        "a-susp-md-0",
        &PatchParams::apply("someone").force(),
        &Patch::Apply(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"name": "a-susp-md-0", "namespace": repo.ns},
            "spec": {"replicas": 7}}),
        ),
    )
    .await
    .unwrap();
    let mark = cp.audit().mark();
    let out = repo.reconcile("r2").await;
    let a = capstan_e2e::cluster_outcome(&out, "a-susp");
    assert_eq!(a.phase, Phase::Suspended, "{}", a.message);
    assert!(a.message.contains("maintenance by hand"), "{}", a.message);
    assert_eq!(
        replicas(cp, &repo.ns, "a-susp-md-0").await,
        7,
        "nothing applied to it"
    );
    assert_eq!(
        replicas(cp, &repo.ns, "b-susp-md-0").await,
        3,
        "the other cluster applies"
    );
    let st = managed_status_of(cp, "a-susp").await.unwrap();
    assert_eq!(st["status"]["phase"], "Suspended", "{st:#}");
    assert_eq!(st["status"]["lastAppliedRevision"], "r1", "{st:#}");
    // From the API server: no write to the suspended cluster's objects.
    let writes = writes_since(cp, mark, &repo).await;
    assert!(
        !writes.iter().any(|w| w.contains("a-susp")
            && !w.contains("managedclusters")
            && !w.contains("/events")),
        "{writes:#?}"
    );

    // Resumed: the pending change is applied and the hand edit corrected.
    std::fs::remove_file(repo.dir("a-susp").join("suspend.yaml")).unwrap();
    let out = repo.reconcile("r3").await;
    let a = capstan_e2e::cluster_outcome(&out, "a-susp");
    assert_ne!(a.phase, Phase::Failed, "{}", a.message);
    assert_ne!(a.phase, Phase::Suspended, "{}", a.message);
    assert_eq!(replicas(cp, &repo.ns, "a-susp-md-0").await, 4);
    assert_eq!(
        managed_status_of(cp, "a-susp").await.unwrap()["status"]["lastAppliedRevision"],
        "r3"
    );
}

/// Hostile files in one cluster's directory, against the API server: a symlink out of the
/// repository, then a Secret with data. That cluster fails with the path in its message, nothing
/// of the revision is applied to it, and the other cluster's change still applies.
#[tokio::test]
async fn a_hostile_file_in_one_cluster_applies_nothing_of_it_and_the_others_still_apply() {
    let repo = Repo::new("hostile");
    let cp = capstan_harness::shared().await;
    repo.reconcile("r1").await;
    let link = repo.dir("a-hostile").join("passwd.yaml");
    let secret = repo.dir("a-hostile").join("credentials.yaml");
    let mut b_count = 1;
    for (revision, path) in [("r2", "passwd.yaml"), ("r3", "credentials.yaml")] {
        if revision == "r2" {
            std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
        } else {
            std::fs::remove_file(&link).unwrap();
            let text = format!(
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n  namespace: {}\nstringData:\n  token: hunter2\n",
                repo.ns
            );
            std::fs::write(&secret, text).unwrap();
        }
        // The same revision also changes both clusters' worker counts.
        if revision == "r2" {
            repo.edit("a-hostile", "count: 2", "count: 4");
        }
        repo.edit(
            "b-hostile",
            &format!("count: {b_count}\n  clusterNetwork"),
            &format!("count: {}\n  clusterNetwork", b_count + 1),
        );
        b_count += 1;
        let out = repo.reconcile(revision).await;
        let a = capstan_e2e::cluster_outcome(&out, "a-hostile");
        assert_eq!(a.phase, Phase::Failed, "{revision}: {}", a.message);
        assert!(a.message.contains(path), "{revision}: {}", a.message);
        assert_eq!(
            a.plan.entries.len(),
            0,
            "{revision}: nothing planned for it"
        );
        let st = managed_status_of(cp, "a-hostile").await.unwrap();
        assert_eq!(st["status"]["lastAppliedRevision"], "r1", "{st:#}");
        assert_eq!(
            replicas(cp, &repo.ns, "a-hostile-md-0").await,
            2,
            "{revision}"
        );
        assert_eq!(
            replicas(cp, &repo.ns, "b-hostile-md-0").await,
            b_count,
            "{revision}"
        );
        assert_eq!(
            managed_status_of(cp, "b-hostile").await.unwrap()["status"]["lastAppliedRevision"],
            revision
        );
    }
    // Nothing of the hostile files reached the API server.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(cp.client(), &repo.ns);
    assert!(secrets.get_opt("creds").await.unwrap().is_none());
}

#[tokio::test]
async fn an_immutable_field_change_is_refused_with_its_line_and_nothing_of_the_revision_applied() {
    let repo = Repo::new("immut");
    let cp = capstan_harness::shared().await;
    repo.reconcile("r1").await;
    // a: a new pod CIDR (EKS Anywhere refuses it on a live cluster) and a scale in the same
    // revision; b: a scale.
    repo.edit("a-immut", "172.16.0.0/16", "172.30.0.0/16");
    repo.edit("a-immut", "count: 2", "count: 3");
    repo.edit(
        "b-immut",
        "count: 1\n  clusterNetwork",
        "count: 3\n  clusterNetwork",
    );
    let out = repo.reconcile("r2").await;
    let a = capstan_e2e::cluster_outcome(&out, "a-immut");
    assert_eq!(a.phase, Phase::Failed, "{}", a.message);
    let spec = repo.dir("a-immut").join("cluster.yaml");
    let text = std::fs::read_to_string(&spec).unwrap();
    // The field is pointed at where it is written: `pods:` under `clusterNetwork:`.
    let network = text
        .lines()
        .position(|l| l.trim() == "clusterNetwork:")
        .unwrap();
    let line = network
        + text
            .lines()
            .skip(network)
            .position(|l| l.trim_start().starts_with("pods:"))
            .unwrap()
        + 1;
    assert!(
        a.message.contains("r1 stays live")
            && a.message.contains("spec.clusterNetwork.pods")
            && a.message.contains("172.30.0.0/16")
            && a.message.contains(&format!("cluster.yaml:{line}:")),
        "{} (pods: is on line {line})",
        a.message
    );
    // From the API server: the status says why, and nothing of r2 reached a's objects.
    let st = managed_status_of(cp, "a-immut").await.unwrap();
    assert_eq!(st["status"]["lastAppliedRevision"], "r1");
    let ready = ready_condition(&st);
    assert_eq!(ready["reason"], "ImmutableField", "{ready}");
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(cp.client(), &repo.ns, &capi_clusters());
    assert_eq!(
        clusters.get("a-immut").await.unwrap().data["spec"]["clusterNetwork"]["pods"]["cidrBlocks"],
        json!(["172.16.0.0/16"])
    );
    let md: Api<DynamicObject> =
        Api::namespaced_with(cp.client(), &repo.ns, &machine_deployment_resource());
    assert_eq!(
        md.get("a-immut-md-0").await.unwrap().data["spec"]["replicas"],
        2,
        "the refused revision's scale is not applied either"
    );
    assert_eq!(
        md.get("b-immut-md-0").await.unwrap().data["spec"]["replicas"],
        3,
        "the other cluster applies"
    );
    // Reverted in the repository: the scale goes out.
    repo.edit("a-immut", "172.30.0.0/16", "172.16.0.0/16");
    let out = repo.reconcile("r3").await;
    assert_ne!(
        capstan_e2e::cluster_outcome(&out, "a-immut").phase,
        Phase::Failed
    );
    assert_eq!(
        md.get("a-immut-md-0").await.unwrap().data["spec"]["replicas"],
        3
    );
}

/// An object the API server refuses as it is (here its own validation: a ConfigMap key it does
/// not allow; on the Cluster API controllers, a webhook's denial: the rehearsal test) fails its
/// cluster with the server's words, and nothing of that revision reaches the cluster. Before,
/// the refused object was skipped, the rest applied, and the cluster reported Ready.
#[tokio::test]
async fn an_object_the_api_server_refuses_fails_its_cluster_and_nothing_of_the_revision_applies() {
    let repo = Repo::new("srvref");
    let cp = capstan_harness::shared().await;
    let settings = |key: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a-srvref-settings\n  namespace: {}\ndata:\n  {key}: strict\n",
            repo.ns
        )
    };
    let file = repo.dir("a-srvref").join("settings.yaml");
    fs::write(&file, settings("mode")).unwrap();
    repo.reconcile("r1").await;
    // r2: the ConfigMap gets a key the API server refuses, and a scales in the same revision.
    fs::write(&file, settings("bad key!")).unwrap();
    repo.edit("a-srvref", "count: 2", "count: 3");
    repo.edit(
        "b-srvref",
        "count: 1\n  clusterNetwork",
        "count: 3\n  clusterNetwork",
    );
    let out = repo.reconcile("r2").await;
    let a = capstan_e2e::cluster_outcome(&out, "a-srvref");
    assert_eq!(a.phase, Phase::Failed, "{}", a.message);
    assert!(
        a.message.contains("ConfigMap")
            && a.message.contains("a-srvref-settings")
            && a.message.contains("refused by the API server")
            && a.message.contains("r1 stays live"),
        "{}",
        a.message
    );
    // From the API server: why, and nothing of r2 on a's objects; b applied.
    let st = managed_status_of(cp, "a-srvref").await.unwrap();
    assert_eq!(st["status"]["lastAppliedRevision"], "r1");
    let ready = ready_condition(&st);
    assert_eq!(ready["reason"], "ApplyFailed", "{ready}");
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(cp.client(), &repo.ns);
    let cm = cms.get("a-srvref-settings").await.unwrap();
    assert_eq!(
        cm.data.unwrap().keys().cloned().collect::<Vec<_>>(),
        ["mode"]
    );
    let md: Api<DynamicObject> =
        Api::namespaced_with(cp.client(), &repo.ns, &machine_deployment_resource());
    assert_eq!(
        md.get("a-srvref-md-0").await.unwrap().data["spec"]["replicas"],
        2,
        "the refused revision's scale is not applied either"
    );
    assert_eq!(
        md.get("b-srvref-md-0").await.unwrap().data["spec"]["replicas"],
        3,
        "the other cluster applies"
    );
    // Fixed in the repository: the revision goes out.
    fs::write(&file, settings("level")).unwrap();
    let out = repo.reconcile("r3").await;
    assert_ne!(
        capstan_e2e::cluster_outcome(&out, "a-srvref").phase,
        Phase::Failed
    );
    assert_eq!(
        md.get("a-srvref-md-0").await.unwrap().data["spec"]["replicas"],
        3
    );
}

#[tokio::test]
async fn drift_is_corrected_or_only_reported() {
    let repo = Repo::new("drift");
    let cp = capstan_harness::shared().await;
    repo.reconcile("r1").await;
    let mhc = capstan_e2e::resource(
        "cluster.x-k8s.io",
        "v1beta2",
        "MachineHealthCheck",
        "machinehealthchecks",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(cp.client(), &repo.ns, &mhc);
    let name = "b-drift-md-0-worker-unhealthy";
    let edit = || async {
        let pp = PatchParams::default();
        api.patch(
            name,
            &pp,
            &Patch::Merge(json!({"spec": {"checks": {"nodeStartupTimeoutSeconds": 42}}})),
        )
        .await
        .unwrap();
    };
    edit().await;
    let report = repo.reconcile_with("r1", Drift::Report, false).await;
    let e = capstan_e2e::cluster_outcome(&report, "b-drift")
        .plan
        .entries
        .iter()
        .find(|e| e.object.name == name)
        .unwrap();
    assert_eq!(e.action, Action::Skip);
    assert!(e.reason.as_deref().unwrap().contains("drift"));
    assert!(e.diff.as_deref().unwrap().contains("42"));
    assert_eq!(
        api.get(name).await.unwrap().data["spec"]["checks"]["nodeStartupTimeoutSeconds"],
        42
    );
    let fix = repo.reconcile("r1").await;
    assert_eq!(
        capstan_e2e::cluster_outcome(&fix, "b-drift")
            .plan
            .entries
            .iter()
            .find(|e| e.object.name == name)
            .unwrap()
            .action,
        Action::Update
    );
    assert_eq!(
        api.get(name).await.unwrap().data["spec"]["checks"]["nodeStartupTimeoutSeconds"],
        600
    );
}

/// Plays Cluster API's part in writing status (the lifecycle tests run the real controllers):
/// a stale `Available` is not Ready, a converged cluster is, and an upgrade applied on top of a
/// converged status is not Ready until the controllers observe it.
/// Edits the generation does not show — a ConfigMap's data (it has no generation), a label
/// overwritten, an annotation removed — are seen in the fields capstan owns, reported with
/// `--drift report` and corrected otherwise; afterwards a pass has nothing to do again.
#[tokio::test]
async fn drift_beyond_generation_labels_annotations_and_configmaps() {
    let repo = Repo::new("meta");
    let cp = capstan_harness::shared().await;
    fs::write(
        repo.dir("b-meta").join("settings.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b-meta-settings\n  namespace: {}\n  labels:\n    team: blue\n  annotations:\n    owner: platform\ndata:\n  mode: strict\n",
            repo.ns
        ),
    )
    .unwrap();
    let first = repo.reconcile("r1").await;
    assert_eq!(
        capstan_e2e::cluster_outcome(&first, "b-meta").phase,
        Phase::Progressing,
        "{}",
        capstan_e2e::cluster_outcome(&first, "b-meta").message
    );
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(cp.client(), &repo.ns);
    let name = "b-meta-settings";
    let entry = |o: &Outcome| {
        capstan_e2e::cluster_outcome(o, "b-meta")
            .plan
            .entries
            .iter()
            .find(|e| e.object.name == name)
            .cloned()
            .unwrap()
    };
    let kubectl = |args: &[&str]| {
        let out = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(cp.kubeconfig_path())
            .args(["-n", &repo.ns])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let quiet = repo.reconcile("r1").await;
    assert_eq!(entry(&quiet).action, Action::Unchanged);

    for (what, edit, check) in [
        (
            "data edited",
            vec![
                "patch",
                "configmap",
                name,
                "--type",
                "merge",
                "-p",
                r#"{"data":{"mode":"lax"}}"#,
            ],
            "mode",
        ),
        (
            "label overwritten",
            vec!["label", "configmap", name, "team=red", "--overwrite"],
            "team",
        ),
        (
            "annotation removed",
            vec!["annotate", "configmap", name, "owner-"],
            "owner",
        ),
    ] {
        kubectl(&edit);
        let report = repo.reconcile_with("r1", Drift::Report, false).await;
        let e = entry(&report);
        assert_eq!(e.action, Action::Skip, "{what}: {e:?}");
        assert!(
            e.reason.as_deref().unwrap_or("").contains("drift"),
            "{what}: {e:?}"
        );
        assert!(
            e.diff.as_deref().unwrap_or("").contains(check),
            "{what}: {e:?}"
        );
        let fix = repo.reconcile("r1").await;
        assert_eq!(entry(&fix).action, Action::Update, "{what}");
        let live = cms.get(name).await.unwrap();
        assert_eq!(live.data.unwrap()["mode"], "strict", "{what}");
        assert_eq!(live.metadata.labels.unwrap()["team"], "blue", "{what}");
        assert_eq!(
            live.metadata.annotations.unwrap()["owner"],
            "platform",
            "{what}"
        );
        // Corrected: the next pass finds nothing to do, without a dry run.
        let mark = cp.audit().mark();
        let again = repo.reconcile("r1").await;
        assert_eq!(entry(&again).action, Action::Unchanged, "{what}");
        let requests: Vec<String> = cp
            .audit()
            .events_since(mark)
            .unwrap()
            .into_iter()
            .filter(|e| e.request_uri.contains(&format!("/configmaps/{name}")))
            .map(|e| format!("{} {}", e.verb, e.request_uri))
            .collect();
        assert!(requests.is_empty(), "{what}: {requests:#?}");
    }
}

/// A second field manager that keeps rewriting a field capstan owns: capstan corrects it a
/// couple of times, then stops, reports a Conflict naming the other manager (plan entry,
/// ManagedCluster condition, Event) and leaves the object alone instead of flapping with it.
#[tokio::test]
async fn a_field_manager_that_keeps_rewriting_a_field_is_a_conflict_not_a_fight() {
    let repo = Repo::new("fight");
    let cp = capstan_harness::shared().await;
    let name = "b-fight-settings";
    fs::write(
        repo.dir("b-fight").join("settings.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {}\ndata:\n  mode: strict\n",
            repo.ns
        ),
    )
    .unwrap();
    // One agent across passes, as the daemon runs: the fight is remembered between them.
    let agent =
        capstan::reconcile::Agent::connect(capstan::install::testing::agent_client(cp).await)
            .await
            .unwrap();
    let opts = Options {
        revision: "r1".into(),
        management: Some(repo.mgmt.clone()),
        ..Default::default()
    };
    let fleet = repo.fleet();
    agent.reconcile(&fleet, &opts).await.unwrap();
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(cp.client(), &repo.ns);
    let rival = |n: u32| {
        let cms = cms.clone();
        let ns = repo.ns.clone();
        async move {
            let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": {"mode": format!("rival-{n}")}});
            cms.patch(
                name,
                &PatchParams::apply("rival-controller").force(),
                &Patch::Apply(&obj),
            )
            .await
            .unwrap();
        }
    };
    let entry = |o: &Outcome| {
        capstan_e2e::cluster_outcome(o, "b-fight")
            .plan
            .entries
            .iter()
            .find(|e| e.object.name == name)
            .cloned()
            .unwrap()
    };
    let mode = || async { cms.get(name).await.unwrap().data.unwrap()["mode"].clone() };
    for n in 1..=2 {
        rival(n).await;
        let out = agent.reconcile(&fleet, &opts).await.unwrap();
        assert_eq!(entry(&out).action, Action::Update, "correction {n}");
        assert_eq!(mode().await, "strict", "correction {n}");
    }
    rival(3).await;
    let out = agent.reconcile(&fleet, &opts).await.unwrap();
    let e = entry(&out);
    assert_eq!(e.action, Action::Conflict, "{e:?}");
    assert!(
        e.reason.as_deref().unwrap().contains("rival-controller"),
        "{e:?}"
    );
    assert_eq!(
        capstan_e2e::cluster_outcome(&out, "b-fight").phase,
        Phase::Failed
    );
    assert_eq!(mode().await, "rival-3", "not re-applied while in conflict");
    assert_eq!(
        capstan_e2e::cluster_outcome(&out, "a-fight").phase,
        capstan_e2e::cluster_outcome(&out, "m-fight").phase,
        "the other clusters are not affected"
    );
    let status = managed_status_of(cp, "b-fight").await.unwrap();
    let conflict = status["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Conflict")
        .cloned()
        .unwrap_or_default();
    assert_eq!(conflict["status"], "True", "{status:#}");
    assert!(
        conflict["message"]
            .as_str()
            .unwrap()
            .contains("rival-controller"),
        "{conflict:#}"
    );
    let events = capstan_harness::run::kubectl_output(
        cp.kubeconfig_path(),
        &[
            "get",
            "events",
            "-n",
            "capstan-system",
            "--field-selector",
            "involvedObject.name=b-fight,reason=Conflict",
            "-o",
            "name",
        ],
    );
    assert!(
        !String::from_utf8_lossy(&events.stdout).trim().is_empty(),
        "a Conflict event: {}",
        String::from_utf8_lossy(&events.stderr)
    );

    // The rival writes again: still a conflict, and capstan writes nothing to the object.
    let mark = cp.audit().mark();
    rival(4).await;
    let out = agent.reconcile(&fleet, &opts).await.unwrap();
    assert_eq!(entry(&out).action, Action::Conflict);
    assert_eq!(mode().await, "rival-4");
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    let writes: Vec<String> = cp
        .audit()
        .writes_by_manager_since(mark, "capstan")
        .unwrap()
        .into_iter()
        .filter(|e| e.request_uri.contains(&format!("/configmaps/{name}")))
        .map(|e| e.request_uri)
        .collect();
    assert!(writes.is_empty(), "{writes:#?}");
}

#[tokio::test]
async fn ready_only_when_converged_at_this_revision() {
    let repo = Repo::new("health");
    let cp = capstan_harness::shared().await;
    let out = repo.reconcile("r1").await;
    assert_eq!(
        capstan_e2e::cluster_outcome(&out, "a-health").phase,
        Phase::Progressing
    );
    let api = |r: ApiResource| Api::<DynamicObject>::namespaced_with(cp.client(), &repo.ns, &r);
    let kcp = capstan_e2e::resource(
        "controlplane.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmControlPlane",
        "kubeadmcontrolplanes",
    );
    let write_status = |r: ApiResource, name: &'static str, status: Value| {
        let api = api(r.clone());
        async move {
            let generation = api.get(name).await.unwrap().metadata.generation.unwrap();
            let mut status = status;
            if status.get("observedGeneration") == Some(&json!("current")) {
                status["observedGeneration"] = json!(generation);
            }
            for c in status["conditions"].as_array_mut().into_iter().flatten() {
                c["observedGeneration"] = json!(generation);
                c["lastTransitionTime"] = json!("2026-11-22T00:00:00Z");
                c["message"] = json!("");
            }
            let body = json!({"apiVersion": r.api_version, "kind": r.kind, "status": status});
            api.patch_status(
                name,
                &PatchParams::apply("capi-controller").force(),
                &Patch::Apply(body),
            )
            .await
            .unwrap();
        }
    };
    let available = json!([{"type": "Available", "status": "True", "reason": "Available"}]);
    // The Cluster says Available, but nothing has observed what capstan applied.
    write_status(
        capi_clusters(),
        "a-health",
        json!({"conditions": available}),
    )
    .await;
    let out = repo.reconcile("r1").await;
    let a = capstan_e2e::cluster_outcome(&out, "a-health");
    assert_eq!(a.phase, Phase::Progressing, "{}", a.message);
    assert!(a.message.contains("not observed"), "{}", a.message);

    // Everything observed and rolled out.
    let rolled = |n: i64| {
        json!({"observedGeneration": "current", "replicas": n, "upToDateReplicas": n, "availableReplicas": n, "readyReplicas": n,
        "conditions": [{"type": "RollingOut", "status": "False", "reason": "NotRollingOut"}]})
    };
    write_status(
        capi_clusters(),
        "a-health",
        json!({"observedGeneration": "current", "conditions": available}),
    )
    .await;
    write_status(kcp.clone(), "a-health", rolled(1)).await;
    write_status(machine_deployment_resource(), "a-health-md-0", rolled(2)).await;
    write_status(machine_deployment_resource(), "a-health-auto", rolled(1)).await;
    // A MachineDeployment's counts add up its MachineSets': until they exist, it is not done.
    let out = repo.reconcile("r1").await;
    let a = capstan_e2e::cluster_outcome(&out, "a-health");
    assert!(
        a.message
            .contains("machines of the current template available"),
        "{}",
        a.message
    );
    // The MachineSets the MachineDeployment controller would create, with their machines up.
    let sets = api(capstan_e2e::resource(
        "cluster.x-k8s.io",
        "v1beta2",
        "MachineSet",
        "machinesets",
    ));
    for (md, n) in [("a-health-md-0", 2), ("a-health-auto", 1)] {
        let md_obj = api(machine_deployment_resource()).get(md).await.unwrap();
        let template = md_obj.data["spec"]["template"].clone();
        let labels = json!({"cluster.x-k8s.io/cluster-name": "a-health", "cluster.x-k8s.io/deployment-name": md});
        let ms = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
            "metadata": {"name": format!("{md}-x"), "namespace": repo.ns, "labels": labels},
            "spec": {"clusterName": "a-health", "replicas": n, "selector": {"matchLabels": labels}, "template": template}});
        let pp = PatchParams::apply("capi-controller").force();
        sets.patch(&format!("{md}-x"), &pp, &Patch::Apply(ms))
            .await
            .unwrap();
        let status = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
            "status": {"replicas": n, "availableReplicas": n, "readyReplicas": n, "upToDateReplicas": n}});
        sets.patch_status(&format!("{md}-x"), &pp, &Patch::Apply(status))
            .await
            .unwrap();
    }
    let out = repo.reconcile("r1").await;
    assert_eq!(
        capstan_e2e::cluster_outcome(&out, "a-health").phase,
        Phase::Ready,
        "{}",
        capstan_e2e::cluster_outcome(&out, "a-health").message
    );
    assert_eq!(
        capstan_e2e::cluster_outcome(&out, "b-health").phase,
        Phase::Progressing
    );
    assert_eq!(
        managed_status_of(cp, "a-health").await.unwrap()["status"]["phase"],
        "Ready"
    );

    // An upgrade applied on top: the old statuses still say converged, the cluster is not.
    repo.edit(
        "a-health",
        "kubernetesVersion: \"1.33\"",
        "kubernetesVersion: \"1.34\"",
    );
    let out = repo.reconcile("r2").await;
    let a = capstan_e2e::cluster_outcome(&out, "a-health");
    assert_eq!(a.phase, Phase::Upgrading);
    assert!(
        a.message
            .contains("KubeadmControlPlane/a-health: generation"),
        "{}",
        a.message
    );
    // The control plane rolls, then is done; the workers are still on their old generation.
    let rolling = json!({"observedGeneration": "current", "replicas": 2, "upToDateReplicas": 1, "availableReplicas": 2,
        "conditions": [{"type": "RollingOut", "status": "True", "reason": "RollingOut"}]});
    write_status(kcp.clone(), "a-health", rolling).await;
    let a = capstan_e2e::cluster_outcome(&repo.reconcile("r2").await, "a-health").clone();
    assert!(
        a.message.contains("1/1 machines up to date")
            || a.message.contains("machines for 1 desired"),
        "{}",
        a.message
    );
    write_status(kcp, "a-health", rolled(1)).await;
    let a = capstan_e2e::cluster_outcome(&repo.reconcile("r2").await, "a-health").clone();
    assert!(
        a.message
            .contains("MachineDeployment/a-health-md-0: generation"),
        "{}",
        a.message
    );
}

#[tokio::test]
async fn an_agent_killed_mid_apply_converges_with_nothing_duplicated_or_deleted() {
    let repo = Repo::new("killed");
    let cp = capstan_harness::shared().await;
    let fleet = repo.fleet();
    // The first agent got through half of cluster a's objects, then died before writing status.
    let a = fleet.cluster("a-killed").unwrap().objects.clone().unwrap();
    let resolver = capstan::k8s::Resolver::new(cp.client()).await.unwrap();
    let ns_obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": repo.ns}});
    capstan::k8s::apply::apply_one(&cp.client(), &resolver, &ns_obj, false)
        .await
        .unwrap();
    for obj in &a[..a.len() / 2] {
        capstan::k8s::apply::apply_one(
            &cp.client(),
            &resolver,
            &capstan::plan::annotated(obj),
            false,
        )
        .await
        .unwrap();
    }
    let mark = cp.audit().mark();
    let out = repo.reconcile("r1").await;
    assert!(!out.has_failures());
    let a_out = capstan_e2e::cluster_outcome(&out, "a-killed");
    assert_eq!(
        count_actions(&out, "a-killed", Action::Unchanged),
        a.len() / 2,
        "what the first agent applied is recognised, not re-applied"
    );
    assert_eq!(
        count_actions(&out, "a-killed", Action::Create),
        a.len() - a.len() / 2
    );
    assert_eq!(
        a_out
            .plan
            .entries
            .iter()
            .filter(|e| e.action == Action::Prune)
            .count(),
        0
    );
    assert!(
        writes_since(cp, mark, &repo)
            .await
            .iter()
            .all(|w| !w.starts_with("delete"))
    );
    let inv: Vec<ObjectRef> = serde_json::from_value(
        managed_status_of(cp, "a-killed").await.unwrap()["status"]["inventory"].clone(),
    )
    .unwrap();
    assert_eq!(inv.len(), a.len());
    let again = repo.reconcile("r1").await;
    let changed: Vec<String> = again
        .clusters
        .iter()
        .flat_map(|c| {
            c.plan
                .entries
                .iter()
                .filter(|e| e.action != Action::Unchanged)
                .map(|e| format!("{} {} {:?}", e.action, e.object.subject(), e.reason))
        })
        .collect();
    assert_eq!(
        again.writes, 0,
        "second pass after convergence writes nothing: {changed:#?}"
    );
}

#[tokio::test]
async fn crds_and_namespaces_are_applied_first_and_crds_established_before_their_objects() {
    let repo = Repo::new("crd");
    let cp = capstan_harness::shared().await;
    // In the file, the object comes before the CRD that defines its kind, and the namespace it
    // lives in comes last: render order alone would fail.
    let addons = r#"apiVersion: crd.example.com/v1
kind: Widget
metadata:
  name: w1
  namespace: widgets-crd
spec:
  size: 3
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.crd.example.com
spec:
  group: crd.example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer}
---
apiVersion: v1
kind: Namespace
metadata:
  name: widgets-crd
"#;
    fs::write(
        repo.files
            .root
            .join("clusters")
            .join(&repo.mgmt)
            .join("addons.yaml"),
        addons,
    )
    .unwrap();
    let fleet = repo.fleet();
    assert!(!fleet.has_errors(), "{:?}", fleet.all_diagnostics());
    // These kinds are not capstan's: the agent's own rights (exactly `capstan install`'s) do
    // not reach them, and the API server says so. Only the cluster that carries them fails
    // (nothing of it applied); its workload clusters are applied all the same.
    let opts = Options {
        revision: "r1".into(),
        management: Some(repo.mgmt.clone()),
        ..Default::default()
    };
    let out = reconcile(
        &capstan::install::testing::agent_client(cp).await,
        &fleet,
        &opts,
    )
    .await
    .unwrap();
    let mgmt = capstan_e2e::cluster_outcome(&out, &repo.mgmt);
    assert_eq!(mgmt.phase, Phase::Failed, "{}", mgmt.message);
    assert!(
        mgmt.message.contains("forbidden")
            && mgmt.message.contains("CustomResourceDefinition")
            && mgmt.message.contains("capstan install --allow"),
        "{}",
        mgmt.message
    );
    let st = managed_status_of(cp, &repo.mgmt).await.unwrap();
    assert_eq!(
        st["status"]["conditions"][0]["reason"], "Forbidden",
        "{st:#}"
    );
    for c in ["a-crd", "b-crd"] {
        let o = capstan_e2e::cluster_outcome(&out, c);
        assert_ne!(o.phase, Phase::Failed, "{c}: {}", o.message);
    }
    let capi = list_names(cp, &repo.ns, &capi_clusters()).await;
    assert!(
        capi.contains(&"a-crd".to_string()) && capi.contains(&"b-crd".to_string()),
        "{capi:?}"
    );
    assert!(
        !capi.contains(&repo.mgmt),
        "nothing of the refused cluster is applied: {capi:?}"
    );
    // With them granted (`capstan install --allow`), they are applied in order.
    let allowed = capstan::install::testing::allowing_agent_client(cp).await;
    let out = reconcile(&allowed, &fleet, &opts).await.unwrap();
    assert!(
        !out.has_failures(),
        "{:?}",
        capstan_e2e::cluster_outcome(&out, &repo.mgmt)
    );
    let widget = Api::<DynamicObject>::namespaced_with(
        cp.client(),
        "widgets-crd",
        &capstan_e2e::resource("crd.example.com", "v1", "Widget", "widgets"),
    )
    .get("w1")
    .await
    .unwrap();
    assert_eq!(widget.data["spec"]["size"], 3);
    // Cluster-scoped objects carry no namespace, so their live copy is recognised next time.
    let again = reconcile(&allowed, &repo.fleet(), &opts).await.unwrap();
    let changed: Vec<String> = again
        .clusters
        .iter()
        .flat_map(|c| {
            c.plan
                .entries
                .iter()
                .filter(|e| e.action != Action::Unchanged)
                .map(|e| format!("{} {}", e.action, e.object.subject()))
        })
        .collect();
    assert_eq!(again.writes, 0, "{changed:?}");
    let crd = capstan_e2e::cluster_outcome(&again, &repo.mgmt)
        .plan
        .entries
        .iter()
        .find(|e| e.object.kind == "CustomResourceDefinition")
        .unwrap();
    assert_eq!(crd.object.namespace, "");
}
