//! `capstan move`, the binary between two real API servers with the upstream CRDs (strict
//! field validation): clusters move whole — the objects outside the owner chain too — with
//! new owner references and nothing made twice; a cluster an operator paused stays paused; a
//! ClusterResourceSet a cluster that stays still uses is copied and kept, and its ConfigMap,
//! owned by a moved Cluster, loses that owner reference at the source; the move resumes after
//! a SIGKILL at each of its steps; and it refuses, writing nothing, a cluster that is not
//! Ready, a target holding a name already, or a target without a kind's CRD.
//!
//! The source is the shared control plane (each test in namespaces of its own); each target is
//! a control plane of the test's own, since the journal is one per target. Cluster API's
//! controllers do not run here: the objects and their statuses are written as they report
//! them (a stand-in for what they would have written, named as such).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use capstan_harness::objects::resource;
use capstan_harness::run::{capstan_output, kubectl_json, output_report};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

const CAPI: &str = "cluster.x-k8s.io/v1beta2";
const STAND_IN: &str = "cluster-api-stand-in";

fn res(o: &Value) -> ApiResource {
    let api_version = o["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = o["kind"].as_str().unwrap();
    let plural = match kind {
        "ConfigMap" => "configmaps".to_string(),
        "Secret" => "secrets".to_string(),
        k => format!("{}s", k.to_lowercase()),
    };
    resource(group, version, kind, &plural)
}

/// Writes `o` (and its `status`) as Cluster API's controllers would have: the stand-in.
async fn put(client: &kube::Client, o: Value) -> Value {
    let ns = o["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let name = o["metadata"]["name"].as_str().unwrap().to_string();
    let ar = res(&o);
    let api: Api<DynamicObject> = if ns.is_empty() {
        Api::all_with(client.clone(), &ar)
    } else {
        Api::namespaced_with(client.clone(), &ns, &ar)
    };
    let pp = PatchParams::apply(STAND_IN).force();
    let mut body = o.clone();
    let status = body.as_object_mut().unwrap().remove("status");
    let made = api.patch(&name, &pp, &Patch::Apply(&body)).await.unwrap();
    if let Some(status) = status {
        let s = json!({"apiVersion": o["apiVersion"], "kind": o["kind"], "status": status});
        api.patch_status(&name, &pp, &Patch::Apply(&s))
            .await
            .unwrap();
    }
    serde_json::to_value(made).unwrap()
}

fn condition(type_: &str, status: &str) -> Value {
    json!({"type": type_, "status": status, "reason": "StandIn", "message": "",
        "lastTransitionTime": "2026-12-01T00:00:00Z"})
}

/// A workload cluster as the controllers leave it once it is up: the Cluster (Available, or
/// not), its DockerCluster, a MachineSet with one Machine and its DockerMachine (owner chain,
/// the Machine's finalizer), its Secrets (the kubeconfig labelled, one credentials Secret with
/// neither label nor owner), its EKS Anywhere Cluster. Returns the Machine's provider ID.
async fn workload(
    client: &kube::Client,
    ns: &str,
    name: &str,
    available: bool,
    paused: bool,
) -> String {
    let meta = |n: &str| json!({"name": n, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": name}});
    let mut cluster = json!({"apiVersion": CAPI, "kind": "Cluster",
        "metadata": {"name": name, "namespace": ns, "labels": {"env": "prod"}},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": name}},
        // Created at generation 1, observed by the stand-in.
        "status": {"observedGeneration": 1,
            "conditions": [condition("Available", if available { "True" } else { "False" })]}});
    if paused {
        cluster["spec"]["paused"] = json!(true);
    }
    put(client, cluster).await;
    put(
        client,
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerCluster",
        "metadata": {"name": name, "namespace": ns}, "spec": {}}),
    )
    .await;
    let owner = |o: &Value| {
        json!([{"apiVersion": o["apiVersion"], "kind": o["kind"],
        "name": o["metadata"]["name"], "uid": o["metadata"]["uid"], "controller": true}])
    };
    let ms_name = format!("{name}-md-0-x");
    let template = json!({"spec": {"clusterName": name,
        "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
        "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachineTemplate", "name": format!("{name}-md-0")}}});
    let ms = put(
        client,
        json!({"apiVersion": CAPI, "kind": "MachineSet", "metadata": meta(&ms_name),
        "spec": {"clusterName": name, "replicas": 1,
            "selector": {"matchLabels": {"set": ms_name}},
            "template": {"metadata": {"labels": {"set": ms_name}}, "spec": template["spec"]}}}),
    )
    .await;
    let machine_name = format!("{name}-md-0-x-1");
    let provider_id = format!("docker:////{machine_name}");
    let mut m_meta = meta(&machine_name);
    m_meta["ownerReferences"] = owner(&ms);
    m_meta["finalizers"] = json!(["machine.cluster.x-k8s.io"]);
    let machine = put(client, json!({"apiVersion": CAPI, "kind": "Machine", "metadata": m_meta,
        "spec": {"clusterName": name, "providerID": provider_id,
            "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": machine_name}}})).await;
    put(
        client,
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerMachine",
        "metadata": {"name": machine_name, "namespace": ns, "ownerReferences": owner(&machine)},
        "spec": {"providerID": provider_id}}),
    )
    .await;
    put(
        client,
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": format!("{name}-kubeconfig"), "namespace": ns,
            "labels": {"cluster.x-k8s.io/cluster-name": name}},
        "type": "cluster.x-k8s.io/secret", "stringData": {"value": "kubeconfig"}}),
    )
    .await;
    put(
        client,
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": format!("{name}-vsphere-credentials"), "namespace": ns},
        "stringData": {"password": "made by hand"}}),
    )
    .await;
    put(client, json!({"apiVersion": "anywhere.eks.amazonaws.com/v1alpha1", "kind": "Cluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"kubernetesVersion": "1.33",
            "datacenterRef": {"kind": "DockerDatacenterConfig", "name": name},
            "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}, "services": {"cidrBlocks": ["10.96.0.0/12"]}},
            "controlPlaneConfiguration": {"count": 1}}})).await;
    put(client, json!({"apiVersion": "anywhere.eks.amazonaws.com/v1alpha1", "kind": "DockerDatacenterConfig",
        "metadata": {"name": name, "namespace": ns}, "spec": {}})).await;
    provider_id
}

/// Two clusters to move (`a` running, `b` paused by an operator), one that stays, and a
/// ClusterResourceSet (with its ConfigMap) that selects all three.
async fn fleet(client: &kube::Client, ns: &str) {
    workload(client, ns, "a", true, false).await;
    workload(client, ns, "b", true, true).await;
    workload(client, ns, "stay", true, false).await;
    // Owned by a Cluster that moves, used by the one that stays: kept at the source, where it
    // must not be left to the garbage collector once its owner is deleted there.
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &resource("cluster.x-k8s.io", "v1beta2", "Cluster", "clusters"),
    );
    let a_uid = clusters.get("a").await.unwrap().metadata.uid.unwrap();
    put(
        client,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cni", "namespace": ns,
            "ownerReferences": [{"apiVersion": CAPI, "kind": "Cluster", "name": "a", "uid": a_uid}]},
        "data": {"cni.yaml": "kind: List"}}),
    )
    .await;
    put(
        client,
        json!({"apiVersion": "addons.cluster.x-k8s.io/v1beta2", "kind": "ClusterResourceSet",
        "metadata": {"name": "cni", "namespace": ns},
        "spec": {"clusterSelector": {"matchLabels": {"env": "prod"}},
            "resources": [{"kind": "ConfigMap", "name": "cni"}]}}),
    )
    .await;
}

fn listed(kubeconfig: &Path, kind: &str, ns: &str) -> Vec<Value> {
    kubectl_json(kubeconfig, &["get", kind, "-n", ns, "-o", "json"])["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn names(items: &[Value]) -> Vec<String> {
    let mut n: Vec<String> = items
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    n.sort();
    n
}

/// What a finished move of `a` and `b` leaves, read with kubectl on both servers.
fn assert_moved(source: &Path, target: &Path, ns: &str, before: &[(String, Value)]) {
    // Nothing of a and b is left at the source; the cluster that stays, and the shared
    // ClusterResourceSet and its ConfigMap, are.
    assert_eq!(
        names(&listed(source, "clusters.cluster.x-k8s.io", ns)),
        ["stay"]
    );
    assert_eq!(
        names(&listed(source, "machines.cluster.x-k8s.io", ns)),
        ["stay-md-0-x-1"]
    );
    assert_eq!(
        names(&listed(source, "clusters.anywhere.eks.amazonaws.com", ns)),
        ["stay"]
    );
    assert_eq!(
        names(&listed(source, "secrets", ns)),
        ["stay-kubeconfig", "stay-vsphere-credentials"]
    );
    assert_eq!(names(&listed(source, "clusterresourcesets", ns)), ["cni"]);
    let config_maps: Vec<String> = names(&listed(source, "configmaps", ns))
        .into_iter()
        .filter(|n| n != "kube-root-ca.crt")
        .collect();
    assert_eq!(config_maps, ["cni"]);
    // The ConfigMap kept at the source names no owner deleted there (no garbage collector runs
    // here: the reference it would act on is what is checked); its copy names the target's a.
    let cni = |at: &Path| {
        listed(at, "configmaps", ns)
            .into_iter()
            .find(|o| o["metadata"]["name"] == "cni")
            .unwrap()
    };
    let owners = |o: &Value| -> Vec<String> {
        o["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| r["uid"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(owners(&cni(source)), Vec::<String>::new());
    let target_a = listed(target, "clusters.cluster.x-k8s.io", ns)
        .into_iter()
        .find(|o| o["metadata"]["name"] == "a")
        .unwrap();
    assert_eq!(
        owners(&cni(target)),
        [target_a["metadata"]["uid"].as_str().unwrap().to_string()]
    );
    // Everything of a and b is in the target once, each a copy of the source object it names.
    for (key, source_object) in before {
        let (kind, name) = key.split_once(' ').unwrap();
        let there: Vec<Value> = listed(target, kind, ns)
            .into_iter()
            .filter(|o| o["metadata"]["name"] == name)
            .collect();
        assert_eq!(there.len(), 1, "{key} in the target: {there:?}");
        assert_eq!(
            there[0]["metadata"]["annotations"]["capstan.dev/moved-from"],
            source_object["metadata"]["uid"],
            "{key}"
        );
        for p in ["/spec/providerID", "/data", "/spec/clusterName"] {
            assert_eq!(there[0].pointer(p), source_object.pointer(p), "{key} {p}");
        }
    }
    // Owner references name the target's objects.
    for m in ["a", "b"] {
        let machine = listed(target, "machines.cluster.x-k8s.io", ns)
            .into_iter()
            .find(|o| o["metadata"]["name"] == format!("{m}-md-0-x-1"))
            .unwrap();
        let set = listed(target, "machinesets.cluster.x-k8s.io", ns)
            .into_iter()
            .find(|o| o["metadata"]["name"] == format!("{m}-md-0-x"))
            .unwrap();
        assert_eq!(
            machine["metadata"]["ownerReferences"][0]["uid"],
            set["metadata"]["uid"]
        );
    }
    // a runs again in the target; b, which an operator had paused, is still paused; no mark of
    // the move's pause is left.
    let clusters = listed(target, "clusters.cluster.x-k8s.io", ns);
    let cluster = |n: &str| {
        clusters
            .iter()
            .find(|o| o["metadata"]["name"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(cluster("a")["spec"].get("paused"), None, "{}", cluster("a"));
    assert_eq!(cluster("b")["spec"]["paused"], true);
    for c in &clusters {
        assert!(
            c["metadata"]["annotations"]
                .get("capstan.dev/paused-for-move")
                .is_none(),
            "{c}"
        );
    }
    assert_eq!(
        cluster("a")["status"]["conditions"][0]["type"],
        "Available",
        "the status came along"
    );
    for e in listed(target, "clusters.anywhere.eks.amazonaws.com", ns) {
        assert!(
            e["metadata"]["annotations"]
                .get("anywhere.eks.amazonaws.com/paused")
                .is_none(),
            "{e}"
        );
    }
    assert_eq!(names(&listed(target, "clusterresourcesets", ns)), ["cni"]);
}

/// Every object of `a` and `b` at the source before the move, `kind name` → the object.
fn moved_objects(source: &Path, ns: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for kind in [
        "clusters.cluster.x-k8s.io",
        "dockerclusters",
        "machinesets.cluster.x-k8s.io",
        "machines.cluster.x-k8s.io",
        "dockermachines",
        "secrets",
        "clusters.anywhere.eks.amazonaws.com",
        "dockerdatacenterconfigs",
    ] {
        for o in listed(source, kind, ns) {
            let name = o["metadata"]["name"].as_str().unwrap().to_string();
            if name.starts_with("a") || name.starts_with("b") {
                out.push((format!("{kind} {name}"), o));
            }
        }
    }
    out
}

fn move_args<'a>(source: &'a str, target: &'a str, ns: &'a str) -> Vec<String> {
    vec![
        "move".into(),
        "--kubeconfig".into(),
        source.into(),
        "--to".into(),
        target.into(),
        "--cluster".into(),
        format!("{ns}/a"),
        "--cluster".into(),
        format!("{ns}/b"),
    ]
}

/// Runs `capstan move` with the failpoint `point` armed, waits until it reports reaching it,
/// and SIGKILLs it there.
fn killed_at(args: &[String], point: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .env(capstan::failpoint::ENV, point)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut seen = Vec::new();
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap();
        let reached = line.contains("failpoint reached") && line.contains(point);
        seen.push(line);
        if reached {
            child.kill().unwrap();
            child.wait().unwrap();
            return;
        }
    }
    let status = child.wait().unwrap();
    panic!(
        "capstan move ended ({status}) before failpoint {point}:\n{}",
        seen.join("\n")
    );
}

#[tokio::test]
async fn a_move_killed_at_every_step_resumes_and_ends_with_every_object_once_in_the_target() {
    let cp = capstan_harness::shared().await;
    let target = capstan_harness::ControlPlane::start().await.unwrap();
    let source_cfg = cp.kubeconfig_path().to_str().unwrap().to_string();
    let target_cfg = target.kubeconfig_path().to_str().unwrap().to_string();
    // One namespace per step killed at, moved in turn (the journal is the target's).
    let mut spaces = Vec::new();
    for point in capstan::mover::FAILPOINTS.iter().chain(&["none"]) {
        let space = cp.test_namespace("move").await.unwrap();
        let ns = space.name().to_string();
        fleet(&cp.client(), &ns).await;
        let before = moved_objects(cp.kubeconfig_path(), &ns);
        assert_eq!(before.len(), 18, "{before:?}");
        let args = move_args(&source_cfg, &target_cfg, &ns);
        if *point != "none" {
            killed_at(&args, point);
            // What the kill left: the journal names the move; a and only a is paused by it.
            let journal = kubectl_json(
                target.kubeconfig_path(),
                &[
                    "get",
                    "configmap",
                    "capstan-move",
                    "-n",
                    "capstan-system",
                    "-o",
                    "json",
                ],
            );
            let record: Value =
                serde_json::from_str(journal["data"]["move.json"].as_str().unwrap()).unwrap();
            assert_eq!(
                record["operatorPaused"],
                json!([format!("{ns}/b")]),
                "{point}"
            );
            assert_ne!(record["phase"], "done", "{point}");
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = capstan_output(&args);
        assert!(out.status.success(), "{point}: {}", output_report(&out));
        // The second run resumed where the first was killed, from the journal.
        let resumed_at = match *point {
            "move-paused" | "move-mid-create" | "move-created" => Some("at Copying"),
            "move-mid-delete" | "move-deleted" => Some("at Deleting"),
            _ => None,
        };
        let report = output_report(&out);
        match resumed_at {
            Some(phase) => assert!(
                report.contains("resuming move") && report.contains(phase),
                "{point}: {report}"
            ),
            None => assert!(!report.contains("resuming move"), "{report}"),
        }
        // Copies an earlier run made are found, not made again.
        if matches!(*point, "move-mid-create" | "move-created") {
            assert!(
                !report.contains("(0 found made by an earlier run)"),
                "{point}: {report}"
            );
        }
        assert_moved(cp.kubeconfig_path(), target.kubeconfig_path(), &ns, &before);
        // Run again: finished, nothing done.
        let again = capstan_output(&args);
        assert!(again.status.success(), "{}", output_report(&again));
        assert!(
            output_report(&again).contains("had finished: nothing to do"),
            "{}",
            output_report(&again)
        );
        spaces.push(space);
    }
    for s in spaces {
        s.delete().await.unwrap();
    }
    target.stop();
}

#[tokio::test]
async fn a_move_that_cannot_go_whole_is_refused_and_writes_nothing() {
    let cp = capstan_harness::shared().await;
    let target = capstan_harness::ControlPlane::start().await.unwrap();
    let space = cp.test_namespace("move-no").await.unwrap();
    let ns = space.name().to_string();
    fleet(&cp.client(), &ns).await;
    workload(&cp.client(), &ns, "rolling", false, false).await;
    let source_cfg = cp.kubeconfig_path().to_str().unwrap().to_string();
    let target_cfg = target.kubeconfig_path().to_str().unwrap().to_string();
    let run = |extra: &[&str]| {
        let mut args = vec!["move", "--kubeconfig", &source_cfg, "--to", &target_cfg];
        args.extend_from_slice(extra);
        capstan_output(&args)
    };
    let nothing_written = |what: &str| {
        for c in listed(cp.kubeconfig_path(), "clusters.cluster.x-k8s.io", &ns) {
            assert!(
                c["metadata"]["annotations"]
                    .get("capstan.dev/paused-for-move")
                    .is_none(),
                "{what}: {c}"
            );
        }
        assert!(
            listed(target.kubeconfig_path(), "clusters.cluster.x-k8s.io", &ns).is_empty(),
            "{what}"
        );
        assert!(
            listed(target.kubeconfig_path(), "configmaps", "capstan-system").is_empty(),
            "{what}"
        );
    };
    let a = format!("{ns}/a");
    // The dry run: the plan, kind by kind in order and object by object.
    let out = run(&["--cluster", &a, "--dry-run"]);
    assert!(out.status.success(), "{}", output_report(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("would move 11 objects of 1 cluster(s)"),
        "{text}"
    );
    assert!(
        text.contains(&format!("Secret/{ns}/a-vsphere-credentials\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!("ClusterResourceSet/{ns}/cni  (shared)")),
        "{text}"
    );
    assert!(
        text.find(&format!("MachineSet/{ns}/a-md-0-x"))
            < text.find(&format!("Machine/{ns}/a-md-0-x-1")),
        "{text}"
    );
    nothing_written("dry run");
    // Not Ready.
    let out = run(&["--cluster", &a, "--cluster", &format!("{ns}/rolling")]);
    assert_eq!(out.status.code(), Some(2), "{}", output_report(&out));
    assert!(
        output_report(&out).contains(&format!("Cluster {ns}/rolling is not Ready")),
        "{}",
        output_report(&out)
    );
    nothing_written("not ready");
    // A cluster that is not there.
    let out = run(&["--cluster", &format!("{ns}/nope")]);
    assert_eq!(out.status.code(), Some(2), "{}", output_report(&out));
    assert!(
        output_report(&out).contains("no such Cluster at the source"),
        "{}",
        output_report(&out)
    );
    // The target holds one of the names already.
    put(
        &target.client(),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .await;
    put(&target.client(), json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "a-kubeconfig", "namespace": ns}, "stringData": {"value": "someone else's"}})).await;
    let out = run(&["--cluster", &a]);
    assert_eq!(out.status.code(), Some(2), "{}", output_report(&out));
    assert!(
        output_report(&out).contains(&format!(
            "Secret/{ns}/a-kubeconfig already exists in the target"
        )),
        "{}",
        output_report(&out)
    );
    nothing_written("name taken");
    // A kind the target does not serve.
    capstan_harness::run::kubectl_ok(
        target.kubeconfig_path(),
        &[
            "delete",
            "crd",
            "dockermachines.infrastructure.cluster.x-k8s.io",
            "--wait",
        ],
    );
    // Until discovery stops serving it (the event the refusal reads).
    let served = || {
        capstan_harness::run::kubectl_ok(
            target.kubeconfig_path(),
            &[
                "get",
                "--raw",
                "/apis/infrastructure.cluster.x-k8s.io/v1beta2",
            ],
        )
        .contains("\"dockermachines\"")
    };
    let mut asked = 0;
    while served() {
        asked += 1;
        assert!(
            asked < 600,
            "DockerMachine still served after its CRD was deleted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let out = run(&["--cluster", &a]);
    assert_eq!(out.status.code(), Some(2), "{}", output_report(&out));
    assert!(
        output_report(&out)
            .contains("does not serve DockerMachine.infrastructure.cluster.x-k8s.io"),
        "{}",
        output_report(&out)
    );
    nothing_written("missing CRD");
    space.delete().await.unwrap();
    target.stop();
}
