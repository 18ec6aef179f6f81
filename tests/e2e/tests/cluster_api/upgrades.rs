//! Ordered upgrades against the real Cluster API controllers (CAPD's in-memory backend standing
//! in for machines): what capstan applies when, read from the API server's own write order
//! ([`Timeline`]), never from capstan's view.
//!
//! External etcd needs etcdadm's controller, whose machines cannot run on the in-memory
//! backend. [`EtcdadmStandIn`] plays its documented part on the API server instead: for an
//! EtcdadmCluster owned by its Cluster it creates the two Secrets the control plane reads (the
//! etcd CA and the API server's etcd client certificate), and on every new generation reports
//! the members as etcdadm does — first not ready (members being replaced), then, when the test
//! lets it, ready with the new members' endpoints. Everything else is the real thing: the
//! kubeadm control plane controller creates the control plane with those endpoints, CAPD brings
//! up its machines.

use std::collections::BTreeMap;
use std::sync::Arc;

use capstan::plan::Action;
use capstan::status::Phase;
use capstan_e2e::capi::*;
use capstan_harness::ControlPlane;
use capstan_harness::objects::text_at;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

/// The reason of a ManagedCluster's Ready condition ("" without one).
fn ready_reason(v: &Value) -> String {
    v["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .map(|c| text_at(c, "/reason"))
        .unwrap_or_default()
}

/// The endpoints the stand-in reports for a generation: a rollout replaces every member, and
/// new machines have new addresses.
fn endpoints_of(generation: i64) -> String {
    format!("https://10.20.{generation}.1:2379")
}

fn rv_of(o: &DynamicObject) -> u64 {
    o.metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// Plays etcdadm-controller's part on the API server (see the module docs). Each permit added
/// to `ready` lets one generation of one EtcdadmCluster become ready.
struct EtcdadmStandIn {
    ready: Arc<Semaphore>,
    task: tokio::task::JoinHandle<()>,
}

impl EtcdadmStandIn {
    fn start(cp: &ControlPlane, ns: &str, timeline: Arc<Timeline>) -> EtcdadmStandIn {
        let ready = Arc::new(Semaphore::new(0));
        let client = cp.client();
        let etcds: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            ns,
            &gvk_resource("etcdcluster.cluster.x-k8s.io", "v1beta1", "EtcdadmCluster"),
        );
        let secrets: Api<Secret> = Api::namespaced(client, ns);
        let gate = ready.clone();
        let task = tokio::spawn(async move {
            let mut reported: BTreeMap<String, i64> = BTreeMap::new();
            let mut events = watcher::watcher(etcds.clone(), watcher::Config::default()).boxed();
            while let Some(ev) = events.next().await {
                let (Ok(Event::Apply(o)) | Ok(Event::InitApply(o))) = ev else {
                    continue;
                };
                let name = o.metadata.name.clone().unwrap_or_default();
                let generation = o.metadata.generation.unwrap_or(0);
                let Some(owner) = o
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .find(|r| r.kind == "Cluster")
                else {
                    // etcdadm waits for the Cluster to own it.
                    continue;
                };
                if reported.get(&name) == Some(&generation) {
                    continue;
                }
                reported.insert(name.clone(), generation);
                let cluster = owner.name.clone();
                ensure_secrets(&secrets, &cluster, &name, o.metadata.uid.as_deref()).await;
                let replicas = o
                    .data
                    .pointer("/spec/replicas")
                    .cloned()
                    .unwrap_or(json!(1));
                let status = |ready: bool, endpoints: &str| {
                    json!({"status": {
                        "observedGeneration": generation,
                        "ready": ready,
                        "initialized": true,
                        "creationComplete": true,
                        "replicas": if ready { replicas.clone() } else { json!(0) },
                        "endpoints": endpoints,
                        "conditions": [{
                            "type": "EtcdMachinesSpecUpToDate",
                            "status": if ready { "True" } else { "False" },
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                        }],
                    }})
                };
                let previous = o
                    .data
                    .pointer("/status/endpoints")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let pp = PatchParams::default();
                // Members being replaced: not ready, the old endpoints still reported.
                let answer = etcds
                    .patch_status(&name, &pp, &Patch::Merge(status(false, &previous)))
                    .await
                    .unwrap();
                timeline.push(
                    rv_of(&answer),
                    format!("stand-in: etcd {name} generation {generation} rolling"),
                );
                gate.acquire().await.unwrap().forget();
                let answer = etcds
                    .patch_status(
                        &name,
                        &pp,
                        &Patch::Merge(status(true, &endpoints_of(generation))),
                    )
                    .await
                    .unwrap();
                timeline.push(
                    rv_of(&answer),
                    format!(
                        "stand-in: etcd {name} generation {generation} ready at {}",
                        endpoints_of(generation)
                    ),
                );
            }
        });
        EtcdadmStandIn { ready, task }
    }

    /// Lets one more generation become ready.
    fn release(&self) {
        self.ready.add_permits(1);
    }
}

impl Drop for EtcdadmStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The Secrets etcdadm creates for the control plane of `cluster`: `<cluster>-etcd` (the etcd
/// CA) and `<cluster>-apiserver-etcd-client` (the API server's client certificate and key).
/// etcdadm's CA Secret holds the certificate only; this one holds the CA's key too, because
/// CAPD's in-memory backend, standing in for the machines, simulates an etcd member on every
/// control-plane machine and signs its certificate with it.
async fn ensure_secrets(secrets: &Api<Secret>, cluster: &str, owner: &str, uid: Option<&str>) {
    let pem = etcd_pki();
    for (name, data) in [
        (
            format!("{cluster}-etcd"),
            json!({"tls.crt": pem[0], "tls.key": pem[1]}),
        ),
        (
            format!("{cluster}-apiserver-etcd-client"),
            json!({"tls.crt": pem[2], "tls.key": pem[3]}),
        ),
    ] {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": {"cluster.x-k8s.io/cluster-name": cluster},
                "ownerReferences": [{
                    "apiVersion": "etcdcluster.cluster.x-k8s.io/v1beta1",
                    "kind": "EtcdadmCluster",
                    "name": owner,
                    "uid": uid.unwrap_or_default(),
                }],
            },
            "type": "cluster.x-k8s.io/secret",
            "stringData": data,
        }))
        .unwrap();
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("creating Secret {name}: {e}"),
        }
    }
}

/// An etcd CA and a client certificate it signed, RSA as etcdadm makes them (CAPD's in-memory
/// backend only takes RSA keys): `[ca.crt, ca.key, client.crt, client.key]`, by openssl.
fn etcd_pki() -> [String; 4] {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir.path())
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-subj",
        "/CN=etcd-ca",
        "-days",
        "2",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "client.key",
        "-out",
        "client.csr",
        "-subj",
        "/CN=apiserver-etcd-client",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "client.crt",
        "-days",
        "2",
    ]);
    ["ca.crt", "ca.key", "client.crt", "client.key"]
        .map(|f| std::fs::read_to_string(dir.path().join(f)).unwrap())
}

/// Waits until the ManagedCluster of `cluster` satisfies `pred` (its status as JSON).
async fn wait_status(cp: &ControlPlane, cluster: &str, pred: impl Fn(&Value) -> bool) -> Value {
    // The status CRD is installed with the agent's rights, before its first pass.
    capstan::install::testing::agent_client(cp).await;
    let api: Api<DynamicObject> = Api::namespaced_with(
        cp.client(),
        "capstan-system",
        &gvk_resource("capstan.dev", "v1alpha1", "ManagedCluster"),
    );
    let cond =
        move |o: Option<&DynamicObject>| o.and_then(|o| o.data.get("status")).is_some_and(&pred);
    let found = tokio::time::timeout(
        SETTLE,
        kube::runtime::wait::await_condition(api.clone(), cluster, cond),
    )
    .await;
    match found {
        Ok(found) => found.unwrap().unwrap().data["status"].clone(),
        Err(_) => {
            let last = api.get_opt(cluster).await.ok().flatten();
            let status = last.map(|o| o.data["status"].clone()).unwrap_or_default();
            panic!("{cluster}: the status never got there; it is {status:#}")
        }
    }
}

fn kcp(ns: &str, cluster: &str) -> Option<Value> {
    kubectl_items(&[
        "get",
        "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
        "-n",
        ns,
    ])
    .into_iter()
    .find(|o| o.pointer("/metadata/name").and_then(Value::as_str) == Some(cluster))
}

fn kcp_endpoints(kcp: &Value) -> Vec<String> {
    kcp.pointer("/spec/kubeadmConfigSpec/clusterConfiguration/etcd/external/endpoints")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|e| e.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_etcd_is_wired_and_upgraded_before_the_control_plane_with_etcdadm_played_by_the_test()
 {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs = cp.logs_on_failure("external_etcd_is_wired_and_upgraded_before_the_control_plane");
    let mut repo = Repo::new_with(
        "xetcd",
        &[("w-ext", json!([{"name": "md-0", "count": 1}]))],
        |req| {
            req.external_etcd = Some(1);
            req.control_plane_count = Some(1);
        },
    );
    let ns = repo.ns.clone();
    let tl = Arc::new(Timeline::default());
    let etcdadm = EtcdadmStandIn::start(cp, &ns, tl.clone());
    let kcp_watch = watch_objects(
        cp,
        &ns,
        gvk_resource(
            "controlplane.cluster.x-k8s.io",
            "v1beta2",
            "KubeadmControlPlane",
        ),
        tl.clone(),
        |v| {
            format!(
                "kcp {} generation={} version={} endpoints={}",
                text_at(v, "/metadata/name"),
                text_at(v, "/metadata/generation"),
                text_at(v, "/spec/version"),
                kcp_endpoints(v).join(","),
            )
        },
    );
    let machine_watch = watch_objects(
        cp,
        &ns,
        gvk_resource("cluster.x-k8s.io", "v1beta2", "Machine"),
        tl.clone(),
        |v| {
            let m = Machine::of(v);
            format!("machine {} {} {}", m.role, m.version, m.name)
        },
    );

    // Create: the Cluster first, then the EtcdadmCluster owned by it, and no control plane
    // until etcd reports its endpoints.
    let only = Some("w-ext");
    let created = repo.converge_in_background(only);
    let status = wait_status(cp, "w-ext", |s| s["stage"] == "Etcd").await;
    assert_eq!(status["phase"], "Progressing", "{status}");
    // The first pass reports the Etcd stage with the EtcdadmCluster held until its owner
    // Cluster has a UID; the next pass creates it.
    let etcd_api: Api<DynamicObject> = Api::namespaced_with(
        cp.client(),
        &ns,
        &gvk_resource("etcdcluster.cluster.x-k8s.io", "v1beta1", "EtcdadmCluster"),
    );
    tokio::time::timeout(
        SETTLE,
        kube::runtime::wait::await_condition(
            etcd_api,
            "w-ext-etcd",
            |o: Option<&DynamicObject>| o.is_some(),
        ),
    )
    .await
    .expect("the EtcdadmCluster was never created")
    .unwrap();
    let etcd = kubectl_items(&[
        "get",
        "etcdadmclusters.etcdcluster.cluster.x-k8s.io",
        "-n",
        &ns,
    ]);
    assert_eq!(etcd.len(), 1);
    let cluster_uid = shared_kubectl(&[
        "get",
        "clusters.cluster.x-k8s.io",
        "w-ext",
        "-n",
        &ns,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let owners = etcd[0]["metadata"]["ownerReferences"].clone();
    assert_eq!(owners[0]["kind"], "Cluster", "{owners}");
    assert_eq!(owners[0]["name"], "w-ext");
    assert_eq!(owners[0]["uid"], cluster_uid.as_str(), "{owners}");
    assert!(
        kcp(&ns, "w-ext").is_none(),
        "the control plane was created before etcd reported its endpoints"
    );
    etcdadm.release();
    let converged = created.await.unwrap();
    assert!(converged.settled());
    let first = kcp(&ns, "w-ext").unwrap();
    assert_eq!(kcp_endpoints(&first), vec![endpoints_of(1)]);
    let machines = repo.machines("w-ext");
    assert!(all_running(&machines), "{machines:?}");
    assert_eq!(
        managed_cluster_json("w-ext").unwrap()["status"]["phase"],
        "Ready"
    );
    let old_version = first["spec"]["version"].as_str().unwrap().to_string();
    let kcp_generation = first["metadata"]["generation"].as_i64().unwrap();

    // Upgrade to 1.34 (a new etcd version too): etcd first, the control plane held until etcd
    // has rolled out, then changed once — version and new endpoints together — so it rolls
    // once.
    repo.edit(
        "w-ext",
        "kubernetesVersion: \"1.33\"",
        "kubernetesVersion: \"1.34\"",
    );
    let upgraded = repo.converge_in_background(only);
    let status = wait_status(cp, "w-ext", |s| {
        s["phase"] == "Upgrading" && s["stage"] == "Etcd"
    })
    .await;
    assert!(
        status["message"].as_str().unwrap().contains("etcd"),
        "{status}"
    );
    let held = kcp(&ns, "w-ext").unwrap();
    assert_eq!(
        (
            held["metadata"]["generation"].as_i64().unwrap(),
            held["spec"]["version"].as_str().unwrap()
        ),
        (kcp_generation, old_version.as_str()),
        "the control plane changed while etcd was rolling"
    );
    etcdadm.release();
    let out = upgraded.await.unwrap();
    assert!(out.settled());
    let after = kcp(&ns, "w-ext").unwrap();
    let new_version = after["spec"]["version"].as_str().unwrap().to_string();
    assert!(new_version.starts_with("v1.34."), "{new_version}");
    assert_eq!(
        after["metadata"]["generation"].as_i64().unwrap(),
        kcp_generation + 1,
        "one change of the control plane for the etcd and version change together: {:#?}\n{}",
        tl.events(),
        history(&out)
    );
    assert_eq!(kcp_endpoints(&after), vec![endpoints_of(2)]);
    let events = tl.events();
    let etcd_ready = events
        .iter()
        .position(|e| e.contains("generation 2 ready"))
        .expect("etcd rolled");
    let kcp_changed = events
        .iter()
        .position(|e| e.starts_with("kcp w-ext") && e.contains(&new_version))
        .expect("control plane changed");
    assert!(etcd_ready < kcp_changed, "{events:#?}");
    // One control-plane rollout: one new control-plane machine (the count is one).
    let new_cp_machines = events
        .iter()
        .filter(|e| e.starts_with(&format!("machine control-plane {new_version} ")))
        .count();
    assert_eq!(new_cp_machines, 1, "{events:#?}");
    let first_pass = &out.first().clusters[0];
    assert_eq!(first_pass.phase, Phase::Upgrading);
    assert!(
        first_pass
            .plan
            .entries
            .iter()
            .any(|e| e.object.kind == "KubeadmControlPlane" && e.action == Action::Held),
        "{:?}",
        first_pass.plan.entries
    );
    let machines = repo.machines("w-ext");
    assert!(
        all_running(&machines) && machines.iter().all(|m| m.version == new_version),
        "{machines:?}"
    );
    kcp_watch.abort();
    machine_watch.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jump_of_two_minors_goes_one_minor_at_a_time_or_is_refused_with_no_chain() {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs = cp.logs_on_failure("a_jump_of_two_minors_goes_one_minor_at_a_time");
    let mut repo = Repo::new_with(
        "chain",
        &[("w-chain", json!([{"name": "md-0", "count": 1}]))],
        |w| w.kubernetes_version = Some("1.31".into()),
    );
    let only = Some("w-chain");
    repo.converge(only).await;
    let ns = repo.ns.clone();
    let before = kcp(&ns, "w-chain").unwrap();
    let generation = before["metadata"]["generation"].as_i64().unwrap();
    let tl = Arc::new(Timeline::default());
    let watches = [
        watch_objects(
            cp,
            &ns,
            gvk_resource(
                "controlplane.cluster.x-k8s.io",
                "v1beta2",
                "KubeadmControlPlane",
            ),
            tl.clone(),
            |v| format!("kcp version={}", text_at(v, "/spec/version")),
        ),
        watch_objects(
            cp,
            &ns,
            gvk_resource("cluster.x-k8s.io", "v1beta2", "MachineDeployment"),
            tl.clone(),
            |v| format!("md version={}", text_at(v, "/spec/template/spec/version")),
        ),
        watch_objects(
            cp,
            &ns,
            gvk_resource("cluster.x-k8s.io", "v1beta2", "Machine"),
            tl.clone(),
            |v| {
                let m = Machine::of(v);
                format!("machine {} {}", m.role, m.version)
            },
        ),
    ];
    repo.edit(
        "w-chain",
        "kubernetesVersion: \"1.31\"",
        "kubernetesVersion: \"1.33\"",
    );

    // --no-chain: refused at plan time, with the spec's line, nothing applied.
    repo.revision += 1;
    let mut opts = repo.opts(only);
    opts.no_chain = true;
    let refused = capstan::reconcile::converge(
        &capstan::install::testing::agent_client(cp).await,
        &repo.fleet(),
        &opts,
        SETTLE,
    )
    .await
    .unwrap();
    let c = &refused.last().clusters[0];
    assert_eq!(c.phase, Phase::Failed, "{}", c.message);
    assert!(
        c.message.contains("--no-chain") && c.message.contains("cluster.yaml:"),
        "{}",
        c.message
    );
    assert_eq!(
        kcp(&ns, "w-chain").unwrap()["metadata"]["generation"].as_i64(),
        Some(generation),
        "the refused revision changed the control plane"
    );

    // Chained: 1.32 first, rolled out, then 1.33; the workers skip 1.32.
    let out = repo.converge(only).await;
    let events = tl.events();
    let v = |minor: &str| format!("v1.{minor}.");
    let at = |prefix: String| {
        events
            .iter()
            .position(|e| e.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` in {events:#?}"))
    };
    let step = at(format!("kcp version={}", v("32")));
    let step_rolled = at(format!("deleted machine control-plane {}", v("31")));
    let target = at(format!("kcp version={}", v("33")));
    assert!(
        step < step_rolled && step_rolled < target,
        "1.33 before the 1.32 step rolled out: {events:#?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e.starts_with(&format!("machine control-plane {}", v("32")))),
        "{events:#?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| e.starts_with(&format!("md version={}", v("32")))),
        "the workers did not skip 1.32: {events:#?}"
    );
    let md = at(format!("md version={}", v("33")));
    assert!(target < md, "{events:#?}");
    assert!(
        out.passes.iter().any(|p| p.clusters[0]
            .message
            .contains("chained upgrade 1.31 → 1.33, step 1.32")),
        "{}",
        history(&out)
    );
    let machines = repo.machines("w-chain");
    assert!(
        all_running(&machines) && machines.iter().all(|m| m.version.starts_with(&v("33"))),
        "{machines:?}"
    );
    for w in watches {
        w.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_waits_for_a_cluster_that_is_not_healthy_unless_the_repository_says_otherwise() {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs = cp.logs_on_failure("an_upgrade_waits_for_a_cluster_that_is_not_healthy");
    let mut repo = Repo::new("gate", &[("w-gate", json!([{"name": "md-0", "count": 1}]))]);
    let only = Some("w-gate");
    repo.converge(only).await;
    let ns = repo.ns.clone();

    // Revision A rolls md-0 (a new label); capstan applies it and moves on while it rolls.
    repo.edit(
        "w-gate",
        "- name: \"md-0\"\n      count: 1\n",
        "- name: \"md-0\"\n      count: 1\n      labels: {\"tier\": \"a\"}\n",
    );
    repo.revision += 1;
    let one = repo.pass(only).await;
    assert_eq!(one.clusters[0].phase, Phase::Upgrading);
    // Revision B, a version bump, arrives while A still rolls: it does not start.
    repo.edit(
        "w-gate",
        "kubernetesVersion: \"1.33\"",
        "kubernetesVersion: \"1.34\"",
    );
    repo.revision += 1;
    let gated = repo.pass(only).await;
    let c = &gated.clusters[0];
    let kcp_entry = c
        .plan
        .entries
        .iter()
        .find(|e| e.object.kind == "KubeadmControlPlane")
        .unwrap();
    assert_eq!(kcp_entry.action, Action::Held, "{c:?}");
    assert!(
        kcp_entry
            .reason
            .as_deref()
            .unwrap()
            .contains("not healthy at its current revision"),
        "{kcp_entry:?}"
    );
    let version = |o: Option<Value>| o.unwrap()["spec"]["version"].as_str().unwrap().to_string();
    assert!(version(kcp(&ns, "w-gate")).starts_with("v1.33."));
    // Once A has rolled out, B goes: the same revision, reconciled until it settles.
    repo.revision -= 1;
    let out = repo.converge(only).await;
    assert!(version(kcp(&ns, "w-gate")).starts_with("v1.34."));
    assert!(
        out.passes.iter().any(|p| p.clusters[0]
            .message
            .contains("not healthy at its current revision")),
        "{}",
        history(&out)
    );

    // The override: an unhealthy cluster (md-0 rolling again) has its control plane rolled at
    // once when its Cluster carries the annotation.
    repo.edit(
        "w-gate",
        "labels: {\"tier\": \"a\"}",
        "labels: {\"tier\": \"b\"}",
    );
    repo.revision += 1;
    repo.pass(only).await;
    repo.edit(
        "w-gate",
        "metadata:\n  name: \"w-gate\"\n",
        "metadata:\n  name: \"w-gate\"\n  annotations:\n    capstan.dev/upgrade-when-unhealthy: \"the test says so\"\n",
    );
    repo.edit(
        "w-gate",
        "controlPlaneConfiguration:\n    count: 1",
        "controlPlaneConfiguration:\n    count: 1\n    labels: {\"plane\": \"x\"}",
    );
    repo.revision += 1;
    let forced = repo.pass(only).await;
    let c = &forced.clusters[0];
    assert!(
        !c.plan.entries.iter().any(|e| e
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("not healthy"))),
        "{:#?}",
        c.plan.entries
    );
    repo.converge(only).await;
}

/// The fleet config of the waves test: a canary wave by label, everything else after it, one
/// workload cluster upgrading at a time.
const WAVES: &str = "apiVersion: capstan.dev/v1alpha1
kind: FleetConfig
spec:
  rollout:
    maxUnavailable: 1
    waves:
    - name: canary
      matchLabels: {tier: canary}
    healthGate: true
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_bump_goes_out_in_waves_canary_first_one_cluster_at_a_time_and_a_failed_canary_stops_the_rest()
 {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs = cp.logs_on_failure("a_version_bump_goes_out_in_waves");
    let group = json!([{"name": "md-0", "count": 1}]);
    let mut repo = Repo::new(
        "waves",
        &[
            ("w-wb", group.clone()),
            ("w-wcan", group.clone()),
            ("w-wc", group),
        ],
    );
    let ns = repo.ns.clone();
    repo.edit(
        "w-wcan",
        "metadata:\n  name: \"w-wcan\"\n",
        "metadata:\n  name: \"w-wcan\"\n  labels:\n    tier: canary\n",
    );
    std::fs::write(repo.dir(&repo.mgmt).join("fleet.yaml"), WAVES).unwrap();
    // Creations are not paced: the whole fleet comes up at once.
    repo.converge(None).await;
    let workloads = ["w-wcan", "w-wb", "w-wc"];
    let before: BTreeMap<&str, Vec<Machine>> =
        workloads.iter().map(|c| (*c, repo.machines(c))).collect();
    let old_version = before["w-wcan"][0].version.clone();
    for c in workloads {
        assert_eq!(
            managed_cluster_json(c).unwrap()["status"]["wave"],
            if c == "w-wcan" {
                "1/2 canary"
            } else {
                "2/2 rest"
            }
        );
    }

    // Every write to the control planes, Machines and ManagedClusters, in the API server's order.
    let tl = Arc::new(Timeline::default());
    let kcp_ar = gvk_resource(
        "controlplane.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmControlPlane",
    );
    let _watches = [
        watch_objects(cp, &ns, kcp_ar, tl.clone(), |v| {
            format!(
                "kcp {} version={}",
                text_at(v, "/metadata/name"),
                text_at(v, "/spec/version")
            )
        }),
        watch_objects(
            cp,
            &ns,
            gvk_resource("cluster.x-k8s.io", "v1beta2", "Machine"),
            tl.clone(),
            |v| {
                format!(
                    "machine {} {} {}",
                    text_at(v, "/spec/clusterName"),
                    text_at(v, "/spec/version"),
                    text_at(v, "/metadata/name")
                )
            },
        ),
        watch_objects(
            cp,
            "capstan-system",
            gvk_resource("capstan.dev", "v1alpha1", "ManagedCluster"),
            tl.clone(),
            |v| {
                let ready = ready_reason(v);
                format!(
                    "mc {} phase={} reason={ready} revision={}",
                    text_at(v, "/metadata/name"),
                    text_at(v, "/status/phase"),
                    text_at(v, "/status/lastAppliedRevision"),
                )
            },
        ),
    ];

    // The version bump, to every workload cluster in one revision.
    for c in workloads {
        repo.edit(
            c,
            "kubernetesVersion: \"1.33\"",
            "kubernetesVersion: \"1.34\"",
        );
    }
    let out = repo.converge(None).await;
    let rev = format!("r{}", repo.revision);
    let new_version = kcp(&ns, "w-wcan").unwrap()["spec"]["version"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(new_version.starts_with("v1.34."), "{new_version}");
    for c in workloads {
        let machines = repo.machines(c);
        assert!(
            machines.iter().all(|m| m.version == new_version) && all_running(&machines),
            "{c}: {machines:?}"
        );
    }

    // From the API server's write order: each cluster's upgrade is the span from its control
    // plane's version change to the deletion of its last old Machine. The canary's came first,
    // and no two spans overlap: one cluster upgrading at a time, the next one started only
    // once the one before had rolled out.
    let events = tl.events();
    let at = |prefix: String| {
        tl.first(&prefix)
            .unwrap_or_else(|| panic!("no `{prefix}` in {events:#?}"))
    };
    let mut spans: Vec<(usize, usize, &str)> = workloads
        .iter()
        .map(|c| {
            let start = at(format!("kcp {c} version={new_version}"));
            let end = before[c]
                .iter()
                .map(|m| at(format!("deleted machine {c} {old_version} {}", m.name)))
                .max()
                .unwrap();
            (start, end, *c)
        })
        .collect();
    spans.sort();
    assert_eq!(
        spans[0].2, "w-wcan",
        "the canary goes first: {spans:?}\n{events:#?}"
    );
    for pair in spans.windows(2) {
        assert!(
            pair[0].1 < pair[1].0,
            "{} started before {} had rolled out: {spans:?}\n{events:#?}",
            pair[1].2,
            pair[0].2
        );
    }
    // The health gate, from the canary's own status: Ready at the revision before the rest
    // started.
    let canary_ready = at(format!(
        "mc w-wcan phase=Ready reason=Available revision={rev}"
    ));
    assert!(canary_ready < spans[1].0, "{events:#?}");
    // And the statuses said why the others waited.
    let said = |what: &str| {
        events
            .iter()
            .any(|e| e.starts_with("mc ") && e.contains(what))
    };
    assert!(
        said("phase=Progressing reason=WaitingForWave"),
        "{events:#?}"
    );
    assert!(
        said("phase=Progressing reason=MaxUnavailable"),
        "{events:#?}"
    );
    assert!(
        out.passes.iter().any(|p| p.clusters.iter().any(|c| c
            .message
            .contains("wave 2/2 \"rest\" waits for wave \"canary\": w-wcan not Ready"))),
        "{}",
        history(&out)
    );

    // A failed canary stops the rest: its next revision changes a field EKS Anywhere holds
    // immutable (refused, Failed), while the others' would roll their control planes.
    let generation = |c: &str| kcp(&ns, c).unwrap()["metadata"]["generation"].clone();
    let generations: Vec<Value> = ["w-wb", "w-wc"].iter().map(|c| generation(c)).collect();
    repo.edit("w-wcan", "- \"172.17.0.0/16\"", "- \"172.30.0.0/16\"");
    for c in ["w-wb", "w-wc"] {
        repo.edit(
            c,
            "controlPlaneConfiguration:\n    count: 1",
            "controlPlaneConfiguration:\n    count: 1\n    labels: {\"plane\": \"x\"}",
        );
    }
    repo.revision += 1;
    // Two passes: in the first the others may still see the canary Ready at its old revision
    // (it is not Ready at this one: they wait for the wave); in the second it has failed.
    repo.pass(None).await;
    repo.pass(None).await;
    let status = |c: &str| managed_cluster_json(c).unwrap()["status"].clone();
    let can = status("w-wcan");
    assert_eq!(can["phase"], "Failed", "{can:#}");
    assert_eq!(can["conditions"][0]["reason"], "ImmutableField", "{can:#}");
    for (c, g) in ["w-wb", "w-wc"].iter().zip(&generations) {
        let st = status(c);
        assert_eq!(st["phase"], "Progressing", "{c}: {st:#}");
        assert_eq!(st["conditions"][0]["reason"], "WaveStopped", "{c}: {st:#}");
        let message = st["message"].as_str().unwrap();
        assert!(message.contains("w-wcan failed"), "{c}: {message}");
        // Nothing of the held upgrade reached the control plane.
        assert_eq!(&generation(c), g, "{c}");
        assert!(st["stage"].is_null(), "{c}: {st:#}");
    }

    // A held cluster that turns unhealthy (its worker Machine deleted, replaced by its
    // MachineSet) is held by the health gate meanwhile. That is not an upgrade under way: it
    // says what it waits for, takes no stage, and once healthy again its wave still holds it
    // (an `Upgrading` status here once let its upgrade start past the stopped wave).
    let worker = repo
        .machines("w-wb")
        .into_iter()
        .find(|m| m.role != "control-plane")
        .expect("w-wb has a worker Machine");
    shared_kubectl(&[
        "delete",
        "machines.cluster.x-k8s.io",
        "-n",
        &ns,
        &worker.name,
        "--wait=false",
    ]);
    let deadline = std::time::Instant::now() + SETTLE;
    let gated = loop {
        let out = repo.pass(Some("w-wb")).await;
        let c = out.clusters[0].clone();
        if c.plan.entries.iter().any(|e| {
            e.reason
                .as_deref()
                .is_some_and(|r| r.contains("not healthy at its current revision"))
        }) {
            break c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "w-wb never seen unhealthy: {c:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let st = status("w-wb");
    assert_eq!(st["phase"], "Progressing", "{gated:?}\n{st:#}");
    assert_eq!(st["conditions"][0]["reason"], "WaitingForHealth", "{st:#}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("not started: the cluster is not healthy"),
        "{st:#}"
    );
    assert!(st["stage"].is_null(), "{st:#}");
    assert_eq!(generation("w-wb"), generations[0]);
    loop {
        repo.pass(Some("w-wb")).await;
        let st = status("w-wb");
        if st["conditions"][0]["reason"] == "WaveStopped" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline && st["phase"] != "Upgrading",
            "w-wb after its health came back: {st:#}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(generation("w-wb"), generations[0]);
}

/// The daemon's side of waves: `capstan run --watch` (in this process) on a working copy whose
/// fleet config has a canary wave, `maxUnavailable: 1` and a maintenance window that opens a
/// minute or so after the change. Nothing but the daemon's own scheduling starts anything after
/// the edit: the held upgrades are looked at again when the window opens (the hold's opening,
/// not a periodic recheck), the canary goes first, and the rest is started when the canary's
/// phase changes. What happened is read from the API server's write order; the statuses, the
/// WAVE column of `capstan status` and the wave metrics say why along the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_starts_held_upgrades_when_the_window_opens_and_the_next_wave_when_the_canary_is_ready()
 {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs = cp.logs_on_failure("the_daemon_starts_held_upgrades");
    capstan_e2e::agent_logs();
    let group = json!([{"name": "md-0", "count": 1}]);
    let repo = Repo::new("dwaves", &[("w-dcan", group.clone()), ("w-drest", group)]);
    let ns = repo.ns.clone();
    // `capstan status` is run as a user runs it, from the binary: built now (cargo's artifact
    // message names it), so that running it later takes a moment, not a build or a wait for
    // cargo's lock.
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let built = std::process::Command::new(env!("CARGO"))
        .current_dir(&workspace)
        .args(["build", "-q", "-p", "capstan", "--bin", "capstan"])
        .args(["--message-format", "json-render-diagnostics"])
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let binary = String::from_utf8_lossy(&built.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|m| m["executable"].as_str().map(std::path::PathBuf::from))
        .expect("cargo names the capstan executable");
    let capstan = |args: &[&str]| {
        std::process::Command::new(&binary)
            .args(args)
            .output()
            .unwrap()
    };
    repo.edit(
        "w-dcan",
        "metadata:\n  name: \"w-dcan\"\n",
        "metadata:\n  name: \"w-dcan\"\n  labels:\n    tier: canary\n",
    );
    let fleet_yaml = repo.dir(&repo.mgmt).join("fleet.yaml");
    std::fs::write(&fleet_yaml, WAVES).unwrap();

    // The daemon, as `capstan run --watch --repo <dir> --management m-dwaves` runs it.
    let port = capstan_harness::ports::free_ports(1).unwrap()[0];
    let backups = tempfile::tempdir().unwrap();
    let cfg = capstan::daemon::RunConfig {
        repo: capstan::daemon::Repo::WorkingCopy(repo.files.root.clone()),
        interval: std::time::Duration::from_secs(3600),
        webhook_addr: None,
        metrics_addr: Some(([127, 0, 0, 1], port).into()),
        dashboard_addr: None,
        dashboard_behind_tls: false,
        webhook_secret: None,
        branch: "main".into(),
        watch: true,
        management: Some(repo.mgmt.clone()),
        drift: Default::default(),
        concurrency: 4,
        upgrade: capstan::cli::UpgradeArgs {
            no_chain: false,
            stage_timeout: std::time::Duration::from_secs(3600),
            backup_dir: backups.path().to_path_buf(),
            backup_encryption: capstan::cli::BackupEncryptionArgs {
                backup_recipient: vec![repo.backup_key.to_public()],
                ..Default::default()
            },
            sops_age_secret: None,
        },
        leader: None,
        ca_file: None,
        github: None,
        verify: None,
        notify: Default::default(),
        cluster_profiles: None,
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // On a runtime of its own, as the binary runs it (the daemon's future stays on its thread).
    let daemon = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let client = capstan::install::testing::agent_client(cp).await;
            capstan::daemon::run(client, cfg, async move {
                let _ = stopped.await;
            })
            .await
        })
    });
    let metrics = || capstan_harness::metrics::scrape(port);
    let metric = |series: &str| capstan_harness::metrics::value_in(&metrics(), series);
    let ready = |s: &Value| s["phase"] == "Ready";
    for c in [repo.mgmt.as_str(), "w-dcan", "w-drest"] {
        wait_status(cp, c, ready).await;
    }

    // Every change of the worker groups' bootstrap templates and of the ManagedClusters, in the
    // API server's write order.
    let tl = Arc::new(Timeline::default());
    let _watches = [
        watch_objects(
            cp,
            &ns,
            gvk_resource("cluster.x-k8s.io", "v1beta2", "MachineDeployment"),
            tl.clone(),
            |v| {
                format!(
                    "md {} template={}",
                    text_at(v, "/spec/clusterName"),
                    text_at(v, "/spec/template/spec/bootstrap/configRef/name")
                )
            },
        ),
        watch_objects(
            cp,
            "capstan-system",
            gvk_resource("capstan.dev", "v1alpha1", "ManagedCluster"),
            tl.clone(),
            |v| {
                let reason = ready_reason(v);
                format!(
                    "mc {} phase={} reason={reason}",
                    text_at(v, "/metadata/name"),
                    text_at(v, "/status/phase")
                )
            },
        ),
    ];
    let template = |c: &str| {
        kubectl_items(&["get", "machinedeployments.cluster.x-k8s.io", "-n", &ns])
            .into_iter()
            .find(|m| m["spec"]["clusterName"] == c)
            .map(|m| text_at(&m, "/spec/template/spec/bootstrap/configRef/name"))
            .unwrap()
    };
    let old: BTreeMap<&str, String> = ["w-dcan", "w-drest"]
        .into_iter()
        .map(|c| (c, template(c)))
        .collect();

    // A maintenance window opening at the next whole minute at least 60 s away (the edit, the
    // held passes and the checks below happen before it), open for an hour, every day.
    let now = capstan::reconcile::unix_now();
    let mut open = (now / 60 + 1) * 60;
    if open - now < 60 {
        open += 60;
    }
    let hhmm = format!(
        "{:02}:{:02}",
        open.rem_euclid(86_400) / 3600,
        open.rem_euclid(3600) / 60
    );
    let revisions = || metric("capstan_revisions_total{trigger=\"local_change\"}");
    let before = revisions();
    std::fs::write(
        &fleet_yaml,
        format!("{WAVES}    maintenanceWindows:\n    - start: \"{hhmm}\"\n      duration: 1h\n"),
    )
    .unwrap();
    // The fleet config is loaded before the upgrades are written (else the canary could start
    // outside the window it has not read yet).
    settle_until(|| revisions() > before).await;
    for c in ["w-dcan", "w-drest"] {
        repo.edit(
            c,
            "- name: \"md-0\"\n      count: 1\n",
            "- name: \"md-0\"\n      count: 1\n      labels: {\"tier\": \"general\"}\n",
        );
    }

    // Held: the canary for the window, the rest for the canary's wave. Nothing of the upgrade
    // reached the MachineDeployments.
    let opens_at = capstan::plan::waves::rfc3339(open);
    let st = wait_status(cp, "w-dcan", |s| {
        s["conditions"][0]["reason"] == "OutsideMaintenanceWindow"
    })
    .await;
    assert_eq!(st["phase"], "Progressing", "{st:#}");
    let message = st["message"].as_str().unwrap();
    assert!(message.contains(&opens_at), "{message}");
    let st = wait_status(cp, "w-drest", |s| {
        s["conditions"][0]["reason"] == "WaitingForWave"
    })
    .await;
    assert_eq!(st["phase"], "Progressing", "{st:#}");
    let message = st["message"].as_str().unwrap();
    assert!(
        message.contains("wave 2/2 \"rest\" waits for wave \"canary\": w-dcan"),
        "{message}"
    );
    // Counted once every pass the edits caused has finished.
    let idle = || {
        let text = metrics();
        capstan_harness::metrics::value_in(&text, "capstan_queue_clusters{state=\"queued\"}") == 0.0
            && capstan_harness::metrics::value_in(
                &text,
                "capstan_queue_clusters{state=\"running\"}",
            ) == 0.0
    };
    settle_until(idle).await;
    assert!(
        metric("capstan_upgrades_held_total{reason=\"outside_maintenance_window\"}") >= 1.0,
        "{}",
        metrics()
    );
    assert!(
        metric("capstan_upgrades_held_total{reason=\"waiting_for_wave\"}") >= 1.0,
        "{}",
        metrics()
    );
    for wave in ["canary", "rest"] {
        let series = format!("capstan_wave_clusters{{wave=\"{wave}\",state=\"pending\"}}");
        assert_eq!(metric(&series), 1.0, "{series}\n{}", metrics());
    }
    // `capstan status`, as an admin would run it: the wave of each cluster and why it waits.
    let out = capstan(&[
        "status",
        "--kubeconfig",
        cp.kubeconfig_path().to_str().unwrap(),
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{table}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let header = table.lines().next().unwrap_or_default();
    assert!(header.contains("WAVE"), "{table}");
    for (c, wave, why) in [
        ("w-dcan", "1/2 canary", "outside the maintenance windows"),
        ("w-drest", "2/2 rest", "waits for wave"),
    ] {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("{c} ")))
            .unwrap_or_else(|| panic!("no {c} in\n{table}"));
        assert!(row.contains(wave), "{row}");
        assert!(row.contains(why), "{row}");
    }
    assert_eq!(template("w-dcan"), old["w-dcan"]);
    assert_eq!(template("w-drest"), old["w-drest"]);
    assert!(
        capstan::reconcile::unix_now() < open,
        "the checks of the held state ran past the window's opening: the test needs a later one"
    );
    // Looking at a held cluster again writes nothing when nothing changed: no status write, no
    // Event. The rest is looked at again (its recheck, or the canary's start) — counted by the
    // hold metric — and the API server saw no write of the agent's about it meanwhile. Unless
    // something did change: Cluster API may report the cluster not Available for a moment (an
    // etcd member it could not reach), and the health gate's hold is a status of its own; its
    // status then changed twice (the timeline shows it), and the look is taken again.
    let wave_holds = || metric("capstan_upgrades_held_total{reason=\"waiting_for_wave\"}");
    let statuses = || {
        tl.events()
            .iter()
            .filter(|e| e.starts_with("mc w-drest "))
            .count()
    };
    for look in 1.. {
        let mark = cp.audit().mark();
        let before = statuses();
        let seen = wave_holds();
        settle_until(|| wave_holds() > seen).await;
        cp.audit()
            .sync(&cp.client(), std::time::Duration::from_secs(10))
            .await
            .unwrap();
        let writes: Vec<String> = cp
            .audit()
            .events_since(mark)
            .unwrap()
            .into_iter()
            .filter(|e| {
                e.is_write()
                    && e.user.username.starts_with("system:serviceaccount:")
                    && e.object_ref
                        .as_ref()
                        .and_then(|o| o.name.as_deref())
                        .is_some_and(|n| n.starts_with("w-drest"))
            })
            .map(|e| format!("{} {}", e.verb, e.request_uri))
            .collect();
        if writes.is_empty() {
            break;
        }
        // The watch behind the timeline may trail the audit log a little.
        let settle = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while statuses() == before && std::time::Instant::now() < settle {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(
            statuses() > before && look < 3,
            "look {look}: {writes:#?}\n{:#?}",
            tl.events()
        );
    }

    // The window opens: with nothing else happening, the canary's upgrade starts, and not
    // before the window's first second.
    let changed = |events: &[String], c: &str| {
        events
            .iter()
            .position(|e| e.starts_with(&format!("md {c} ")) && !e.ends_with(&old[c]))
    };
    settle_until(|| changed(&tl.events(), "w-dcan").is_some()).await;
    assert!(capstan::reconcile::unix_now() >= open);

    // The canary Ready at the new revision wakes the rest, which then rolls too.
    for c in ["w-dcan", "w-drest"] {
        let old = old[c].clone();
        wait_status(cp, c, move |s| s["phase"] == "Ready").await;
        let fresh = template(c);
        assert_ne!(fresh, old, "{c}");
    }
    let events = tl.events();
    let canary_started = changed(&events, "w-dcan").unwrap();
    let canary_ready = events
        .iter()
        .enumerate()
        .position(|(i, e)| i > canary_started && e == "mc w-dcan phase=Ready reason=Available")
        .unwrap_or_else(|| panic!("the canary never Ready after its start: {events:#?}"));
    let rest_started = changed(&events, "w-drest").unwrap();
    assert!(canary_ready < rest_started, "{events:#?}");
    for wave in ["canary", "rest"] {
        let series = format!("capstan_wave_clusters{{wave=\"{wave}\",state=\"done\"}}");
        settle_until(|| metric(&series) == 1.0).await;
    }
    let _ = stop.send(());
    daemon.join().unwrap().unwrap();
}

/// `maxUnavailable` counts every workload cluster that is not available, not only those
/// upgrading. One cluster is taken down by someone else than capstan — an operator deletes its
/// Cluster API Cluster, which a finalizer the test holds keeps in the API server while Cluster
/// API tears its machines down — and the other's upgrade is held with `MaxUnavailable`, naming
/// it and why, nothing of it reaching the control plane. Once the first is back (the finalizer
/// released; capstan recreates what the repository still asks for), the upgrade goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_unavailable_counts_a_cluster_that_is_down_for_another_reason() {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs = cp.logs_on_failure("max_unavailable_counts_a_cluster_that_is_down");
    let group = json!([{"name": "md-0", "count": 1}]);
    let mut repo = Repo::new("maxun", &[("w-mud", group.clone()), ("w-muu", group)]);
    let ns = repo.ns.clone();
    std::fs::write(
        repo.dir(&repo.mgmt).join("fleet.yaml"),
        "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  rollout:\n    maxUnavailable: 1\n",
    )
    .unwrap();
    repo.converge(None).await;

    // w-mud goes down, not for an upgrade: its Cluster deleted by an operator.
    const HOLD: &str = "test.capstan.dev/hold";
    let clusters = "clusters.cluster.x-k8s.io";
    let add = json!([{"op": "add", "path": "/metadata/finalizers/-", "value": HOLD}]);
    shared_kubectl(&[
        "patch",
        clusters,
        "-n",
        &ns,
        "w-mud",
        "--type=json",
        "-p",
        &add.to_string(),
    ]);
    shared_kubectl(&["delete", clusters, "-n", &ns, "w-mud", "--wait=false"]);

    // w-muu's version bump is held: one cluster is already unavailable.
    let generation = |c: &str| kcp(&ns, c).unwrap()["metadata"]["generation"].clone();
    let before = generation("w-muu");
    repo.edit(
        "w-muu",
        "kubernetesVersion: \"1.33\"",
        "kubernetesVersion: \"1.34\"",
    );
    repo.revision += 1;
    repo.pass(Some("w-muu")).await;
    let st = managed_cluster_json("w-muu").unwrap()["status"].clone();
    assert_eq!(st["phase"], "Progressing", "{st:#}");
    assert_eq!(st["conditions"][0]["reason"], "MaxUnavailable", "{st:#}");
    let message = st["message"].as_str().unwrap();
    assert!(
        message.contains("1 cluster(s) not available (w-mud: its Cluster is being deleted)"),
        "{message}"
    );
    assert_eq!(generation("w-muu"), before, "the held upgrade reached KCP");
    assert!(st["stage"].is_null(), "{st:#}");

    // Back: the finalizer released, the deletion completes, capstan recreates w-mud from the
    // repository, and w-muu's upgrade goes out.
    drop_finalizer(cp, &ns, clusters, "w-mud", HOLD);
    repo.converge(None).await;
    let new_version = kcp(&ns, "w-muu").unwrap()["spec"]["version"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(new_version.starts_with("v1.34."), "{new_version}");
    let machines = repo.machines("w-muu");
    assert!(
        machines.iter().all(|m| m.version == new_version) && all_running(&machines),
        "{machines:?}"
    );
    for c in ["w-mud", "w-muu"] {
        let st = managed_cluster_json(c).unwrap()["status"].clone();
        assert_eq!(st["phase"], "Ready", "{c}: {st:#}");
    }
}

/// Takes `finalizer` off an object: found in its list and removed at that index, tried again
/// when a controller changed the list in between (the patch's `test` fails then).
fn drop_finalizer(cp: &ControlPlane, ns: &str, resource: &str, name: &str, finalizer: &str) {
    for _ in 0..20 {
        let list = shared_kubectl(&[
            "get",
            resource,
            "-n",
            ns,
            name,
            "-o",
            "jsonpath={.metadata.finalizers}",
        ]);
        let list: Vec<String> = serde_json::from_str(&list).unwrap_or_default();
        let Some(i) = list.iter().position(|f| f == finalizer) else {
            return;
        };
        let at = format!("/metadata/finalizers/{i}");
        let patch = json!([
            {"op": "test", "path": at, "value": finalizer},
            {"op": "remove", "path": at},
        ]);
        let done = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(cp.kubeconfig_path())
            .args(["patch", resource, "-n", ns, name, "--type=json", "-p"])
            .arg(patch.to_string())
            .status()
            .unwrap()
            .success();
        if done {
            return;
        }
    }
    panic!("could not take {finalizer} off {resource} {ns}/{name}");
}

/// Waits until `cond` holds, re-checked as things change (at most [`SETTLE`]).
async fn settle_until(cond: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + SETTLE;
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "never happened");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
