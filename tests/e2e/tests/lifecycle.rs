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
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan::plan::Action;
use capstan::reconcile::{Convergence, Options, Outcome, converge};
use capstan::status::Phase;
use capstan_e2e::FleetDir;
use capstan_harness::ControlPlane;
use capstan_layout::Fleet;
use capstan_layout::scaffold::ClusterRequest;
use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};

/// How long a fleet may take to settle (a cold in-memory cluster comes up in about a minute).
const SETTLE: Duration = Duration::from_secs(420);

/// A fleet repository: management cluster `m-<tag>`, workloads in namespace `l-<tag>`, every
/// docker datacenter on CAPD's in-memory backend.
struct Repo {
    files: FleetDir,
    mgmt: String,
    ns: String,
    revision: usize,
}

impl Repo {
    /// `workloads`: name → worker groups (values file's `workerGroups`).
    fn new(tag: &str, workloads: &[(&str, Value)]) -> Repo {
        let mgmt = format!("m-{tag}");
        let ns = format!("l-{tag}");
        let mut files = FleetDir::new(ClusterRequest {
            name: mgmt.clone(),
            provider: "docker".into(),
            docker_backend: Some("in-memory".into()),
            namespace: Some(ns.clone()),
            kubernetes_version: Some("1.33".into()),
            pod_cidr: Some("192.168.0.0/16".into()),
            service_cidr: Some("10.96.0.0/12".into()),
            worker_count: Some(1),
            ..Default::default()
        });
        for (i, (name, groups)) in workloads.iter().enumerate() {
            // The workloads inherit the management cluster's in-memory backend.
            files.add(ClusterRequest {
                name: name.to_string(),
                management: Some(mgmt.clone()),
                provider: "docker".into(),
                namespace: Some(ns.clone()),
                kubernetes_version: Some("1.33".into()),
                pod_cidr: Some(format!("172.{}.0.0/16", 16 + i)),
                service_cidr: Some(format!("10.{}.0.0/16", 112 + i)),
                values: Some(json!({ "workerGroups": groups })),
                ..Default::default()
            });
        }
        Repo {
            files,
            mgmt,
            ns,
            revision: 0,
        }
    }

    fn dir(&self, cluster: &str) -> PathBuf {
        self.files.dir(cluster)
    }

    fn edit(&self, cluster: &str, from: &str, to: &str) {
        self.files.edit(cluster, from, to)
    }

    /// `capstan delete cluster`: the spec goes, a tombstone takes its place.
    fn tombstone(&self, cluster: &str) {
        let dir = self.dir(cluster);
        fs::remove_file(dir.join("cluster.yaml")).unwrap();
        fs::write(
            dir.join(capstan_layout::intent::TOMBSTONE_FILE),
            capstan_layout::intent::document("Tombstone", "lifecycle test"),
        )
        .unwrap();
    }

    /// Removes a worker group from a scaffolded spec.
    fn remove_group(&self, cluster: &str, group: &str) {
        let path = self.dir(cluster).join("cluster.yaml");
        let text = fs::read_to_string(&path).unwrap();
        let start = text
            .find(&format!("    - name: \"{group}\""))
            .expect("the group is in the spec");
        let rest = &text[start + 1..];
        let end = start
            + 1
            + rest
                .find("    - name:")
                .or_else(|| rest.find("  clusterNetwork:"))
                .unwrap();
        fs::write(&path, format!("{}{}", &text[..start], &text[end..])).unwrap();
    }

    fn fleet(&self) -> Fleet {
        self.files.fleet()
    }

    fn opts(&self, only: Option<&str>) -> Options {
        Options {
            revision: format!("r{}", self.revision),
            management: Some(self.mgmt.clone()),
            only: only.map(str::to_string),
            concurrency: 4,
            ..Default::default()
        }
    }

    /// The next revision, reconciled until it settles; panics when it does not.
    async fn converge(&mut self, only: Option<&str>) -> Convergence {
        self.revision += 1;
        let cp = capstan_harness::shared_with_controllers().await;
        let converged = converge(&cp.client(), &self.fleet(), &self.opts(only), SETTLE)
            .await
            .unwrap();
        let out = converged.last();
        assert!(
            out.settled(),
            "not settled after {SETTLE:?}: {}",
            summary(out)
        );
        for c in &out.clusters {
            assert!(
                matches!(c.phase, Phase::Ready | Phase::Deleting),
                "{}: {:?} {}",
                c.name,
                c.phase,
                c.message
            );
        }
        converged
    }

    /// Machines of a cluster, from kubectl.
    fn machines(&self, cluster: &str) -> Vec<Machine> {
        kubectl_items(&[
            "get",
            "machines.cluster.x-k8s.io",
            "-n",
            &self.ns,
            "-l",
            &format!("cluster.x-k8s.io/cluster-name={cluster}"),
        ])
        .iter()
        .map(Machine::of)
        .collect()
    }

    /// Names of the objects of a kind in the namespace, from kubectl.
    fn names(&self, resource: &str) -> BTreeSet<String> {
        kubectl_items(&["get", resource, "-n", &self.ns])
            .iter()
            .filter_map(|o| o.pointer("/metadata/name").and_then(Value::as_str))
            .map(str::to_string)
            .collect()
    }
}

fn summary(out: &Outcome) -> String {
    out.clusters
        .iter()
        .map(|c| format!("{} {:?}: {}", c.name, c.phase, c.message))
        .collect::<Vec<_>>()
        .join("; ")
}

fn kubectl(args: &[&str]) -> String {
    let cp = capstan_harness::shared_if_started_with_controllers().expect("started");
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cp.kubeconfig_path())
        .args(args)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn kubectl_items(args: &[&str]) -> Vec<Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let list: Value = serde_json::from_str(&kubectl(&all)).unwrap();
    list["items"].as_array().cloned().unwrap_or_default()
}

/// What a test needs of a Machine.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Machine {
    name: String,
    /// `control-plane` or the MachineDeployment's name.
    role: String,
    version: String,
    phase: String,
    deleting: bool,
}

impl Machine {
    fn of(m: &Value) -> Machine {
        let s = |p: &str| {
            m.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let labels = m.pointer("/metadata/labels");
        let role = if labels
            .and_then(|l| l.get("cluster.x-k8s.io/control-plane"))
            .is_some()
        {
            "control-plane".to_string()
        } else {
            labels
                .and_then(|l| l.get("cluster.x-k8s.io/deployment-name"))
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string()
        };
        Machine {
            name: s("/metadata/name"),
            role,
            version: s("/spec/version"),
            phase: s("/status/phase"),
            deleting: m.pointer("/metadata/deletionTimestamp").is_some(),
        }
    }
}

fn of_role<'a>(machines: &'a [Machine], role: &str) -> Vec<&'a Machine> {
    machines.iter().filter(|m| m.role == role).collect()
}

fn names_of(machines: &[&Machine]) -> BTreeSet<String> {
    machines.iter().map(|m| m.name.clone()).collect()
}

fn all_running(machines: &[Machine]) -> bool {
    machines.iter().all(|m| m.phase == "Running" && !m.deleting)
}

/// The ManagedCluster of a cluster, from kubectl.
fn managed_cluster(cluster: &str) -> Option<Value> {
    kubectl_items(&["get", "managedclusters.capstan.dev", "-n", "capstan-system"])
        .into_iter()
        .find(|o| o.pointer("/metadata/name").and_then(Value::as_str) == Some(cluster))
}

fn ar(group: &str, version: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(group, version, kind))
}

/// Events seen by watches, in the order the test saw them.
#[derive(Default)]
struct Log(Mutex<Vec<String>>);

impl Log {
    fn push(&self, e: String) {
        self.0.lock().unwrap().push(e);
    }
    fn snapshot(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Records `added <role> <version> <name>` and `deleted <role> <version> <name>` for the
/// Machines of a namespace, as a watch sees them.
fn watch_machines(cp: &ControlPlane, ns: &str, log: Arc<Log>) -> tokio::task::JoinHandle<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        cp.client(),
        ns,
        &ar("cluster.x-k8s.io", "v1beta2", "Machine"),
    );
    tokio::spawn(async move {
        let mut seen = BTreeSet::new();
        let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = events.next().await {
            let (obj, deleted) = match ev {
                Ok(Event::Apply(o)) | Ok(Event::InitApply(o)) => (o, false),
                Ok(Event::Delete(o)) => (o, true),
                _ => continue,
            };
            let m = Machine::of(&serde_json::to_value(&obj).unwrap());
            if deleted {
                log.push(format!("deleted {} {} {}", m.role, m.version, m.name));
            } else if seen.insert(m.name.clone()) {
                log.push(format!("added {} {} {}", m.role, m.version, m.name));
            }
        }
    })
}

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
    let available = kubectl(&[
        "get",
        "clusters.cluster.x-k8s.io",
        "w-scale",
        "-n",
        &repo.ns,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Available\")].status}",
    ]);
    assert_eq!(available, "True");
    assert_eq!(
        managed_cluster("w-scale").unwrap()["status"]["phase"],
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
    let inventory_before = managed_cluster("w-scale").unwrap()["status"]["inventory"].clone();
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
    repo.remove_group("w-scale", "md-1");
    let out = repo.converge(only).await;
    let pruned: BTreeSet<(String, String)> = out.first().clusters[0]
        .plan
        .entries
        .iter()
        .filter(|e| e.action == Action::Prune)
        .map(|e| (e.object.kind.clone(), e.object.name.clone()))
        .collect();
    assert_eq!(
        pruned,
        md1_objects.iter().cloned().collect(),
        "the removed group's objects are pruned"
    );
    for (kind, name) in &md1_objects {
        let resource = match kind.as_str() {
            "DevMachineTemplate" => "devmachinetemplates.infrastructure.cluster.x-k8s.io",
            "KubeadmConfigTemplate" => "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
            "MachineDeployment" => "machinedeployments.cluster.x-k8s.io",
            _ => "machinehealthchecks.cluster.x-k8s.io",
        };
        assert!(
            !repo.names(resource).contains(name),
            "{kind}/{name} is still there"
        );
    }
    let machines = repo.machines("w-scale");
    assert!(
        of_role(&machines, "w-scale-md-1").is_empty(),
        "{machines:?}"
    );
    assert_eq!(machines.len(), 2, "{machines:?}");
    let inventory = managed_cluster("w-scale").unwrap()["status"]["inventory"].clone();
    assert!(
        !inventory.to_string().contains("w-scale-md-1"),
        "the removed group's objects left the inventory: {inventory}"
    );
}

/// Lists a cluster's Machines with the raw client the first time its ManagedCluster says Ready
/// at `revision`: what the controllers had done when capstan declared the cluster converged.
fn machines_when_first_ready(
    cp: &ControlPlane,
    ns: &str,
    cluster: &str,
    revision: &str,
) -> tokio::task::JoinHandle<Vec<Machine>> {
    let statuses: Api<DynamicObject> = Api::namespaced_with(
        cp.client(),
        "capstan-system",
        &ar("capstan.dev", "v1alpha1", "ManagedCluster"),
    );
    let machines: Api<DynamicObject> = Api::namespaced_with(
        cp.client(),
        ns,
        &ar("cluster.x-k8s.io", "v1beta2", "Machine"),
    );
    let (cluster, revision) = (cluster.to_string(), revision.to_string());
    tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={cluster}"));
        let mut events = watcher::watcher(statuses, config).boxed();
        while let Some(ev) = events.next().await {
            let (Ok(Event::Apply(o)) | Ok(Event::InitApply(o))) = ev else {
                continue;
            };
            let status = o.data.get("status").cloned().unwrap_or_default();
            if status["phase"] == "Ready" && status["lastAppliedRevision"] == revision.as_str() {
                let selector = format!("cluster.x-k8s.io/cluster-name={cluster}");
                let list = machines
                    .list(&kube::api::ListParams::default().labels(&selector))
                    .await
                    .unwrap();
                return list
                    .items
                    .iter()
                    .map(|m| Machine::of(&serde_json::to_value(m).unwrap()))
                    .collect();
            }
        }
        Vec::new()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_bump_rolls_the_control_plane_first_then_the_workers() {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs = cp.logs_on_failure("a_version_bump_rolls_the_control_plane_first_then_the_workers");
    let mut repo = Repo::new("bump", &[("w-bump", json!([{"name": "md-0", "count": 1}]))]);
    let only = Some("w-bump");
    repo.converge(only).await;
    let before = repo.machines("w-bump");
    assert_eq!(before.len(), 2, "{before:?}");
    let old_version = before[0].version.clone();

    let log = Arc::new(Log::default());
    let watch = watch_machines(cp, &repo.ns, log.clone());
    let at_ready = machines_when_first_ready(cp, &repo.ns, "w-bump", "r2");
    repo.edit(
        "w-bump",
        "kubernetesVersion: \"1.33\"",
        "kubernetesVersion: \"1.34\"",
    );
    let out = repo.converge(only).await;
    let new_version = kubectl(&[
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
    // said Available.
    let first = &out.first().clusters[0];
    assert_eq!(first.phase, Phase::Progressing, "{}", first.message);
    assert!(out.passes.len() > 1);

    // Every Machine at the new version, none left over; and so already when capstan first
    // reported the cluster Ready at this revision.
    let machines = repo.machines("w-bump");
    assert_eq!(machines.len(), 2, "{machines:?}");
    assert!(all_running(&machines), "{machines:?}");
    assert!(
        machines.iter().all(|m| m.version == new_version),
        "{machines:?}"
    );
    let at_ready = tokio::time::timeout(Duration::from_secs(30), at_ready)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(at_ready.len(), 2, "at Ready: {at_ready:?}");
    assert!(
        at_ready
            .iter()
            .all(|m| m.version == new_version && !m.deleting),
        "Ready was reported before the rollout completed: {at_ready:?}"
    );

    // Control plane first: the old control-plane machine was gone before the first worker
    // machine of the new version was created.
    watch.abort();
    let events = log.snapshot();
    let at = |prefix: String| events.iter().position(|e| e.starts_with(&prefix));
    let old_cp = of_role(&before, "control-plane")[0].name.clone();
    let cp_deleted = at(format!("deleted control-plane {old_version} {old_cp}"))
        .expect("old control-plane machine deleted");
    let cp_added =
        at(format!("added control-plane {new_version}")).expect("new control-plane machine");
    let worker_added = at(format!("added w-bump-md-0 {new_version}")).expect("new worker machine");
    assert!(
        cp_added < cp_deleted && cp_deleted < worker_added,
        "{events:#?}"
    );
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

    // New node labels for md-0: a new KubeadmConfigTemplate, md-0 rolls, nothing else does.
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
        ("prune", "KubeadmConfigTemplate"),
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
    let inventory = managed_cluster("w-tmpl").unwrap()["status"]["inventory"].to_string();
    assert!(!inventory.contains(removed[0].as_str()) && inventory.contains(added[0].as_str()));

    // MachineHealthCheck remediation: md-1's machine is marked unhealthy, Cluster API replaces
    // it; capstan, reconciling the same revision meanwhile, changes none of its objects.
    let victim = of_role(&after, "w-tmpl-md-1")[0].name.clone();
    let machines: Api<DynamicObject> = Api::namespaced_with(
        cp.client(),
        &repo.ns,
        &ar("cluster.x-k8s.io", "v1beta2", "Machine"),
    );
    let uid = machines.get(&victim).await.unwrap().metadata.uid.unwrap();
    let mark = cp.audit().mark();
    kubectl(&[
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
    assert!(managed_cluster("w-del").is_none());
    // Nothing else touched.
    assert_eq!(repo.machines("w-keep"), keep);
    assert_eq!(repo.machines(&repo.mgmt.clone()), mgmt);
    assert_eq!(
        managed_cluster("w-keep").unwrap()["status"]["phase"],
        "Ready"
    );
}
