//! The agent's RBAC is sufficient and minimal, proven against the real API server's authorizer.
//!
//! One scenario exercises everything an agent does: join the leader election, a first pass with
//! the daemon's watches (a fresh fleet with external etcd: namespaces, every rendered kind, the
//! CRD check, status objects and their status, an Event), a drift that needs the live object
//! read, and a tombstone that deletes a cluster and its status. Run as a ServiceAccount bound to
//! exactly `capstan install`'s rules it succeeds. Then, for each rule in turn, a ServiceAccount
//! bound to all rules but that one runs it again and the API server answers `403` for that
//! rule's resource (read from the audit log), and the scenario fails saying "forbidden" (the
//! Event excepted: a pass records events on a best-effort basis, so there the 403 in the audit
//! log is the failure). The same is done verb by verb for the main Cluster API rule.

use std::sync::Arc;
use std::time::Duration;

use capstan::install::rbac::{self, Rule};
use capstan::reconcile::{Agent, Options};
use capstan::status::{NAMESPACE, Phase};
use capstan_e2e::FleetDir;
use capstan_harness::ControlPlane;
use capstan_layout::scaffold::ClusterRequest;
use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::json;

/// A fleet of its own: management `m-<tag>`, workload `w-<tag>` with one external etcd machine.
fn fleet(tag: &str) -> FleetDir {
    let ns = format!("t-{tag}");
    let mut dir = FleetDir::new(ClusterRequest {
        name: format!("m-{tag}"),
        provider: "docker".into(),
        namespace: Some(ns.clone()),
        pod_cidr: Some("192.168.0.0/16".into()),
        service_cidr: Some("10.96.0.0/12".into()),
        ..Default::default()
    });
    dir.add(ClusterRequest {
        name: format!("w-{tag}"),
        management: Some(format!("m-{tag}")),
        provider: "docker".into(),
        namespace: Some(ns),
        pod_cidr: Some("172.16.0.0/16".into()),
        service_cidr: Some("10.112.0.0/16".into()),
        external_etcd: Some(1),
        ..Default::default()
    });
    // A vSphere cluster: its cloud-provider interface goes through a ClusterResourceSet with
    // ConfigMap and Secret payloads.
    dir.add(ClusterRequest {
        name: format!("v-{tag}"),
        management: Some(format!("m-{tag}")),
        provider: "vsphere".into(),
        namespace: Some(format!("t-{tag}")),
        pod_cidr: Some("172.20.0.0/16".into()),
        service_cidr: Some("10.120.0.0/16".into()),
        endpoint_host: Some("10.250.0.10".into()),
        values: Some(serde_json::json!({"vsphere": {"server": "vc", "datacenter": "dc", "network": "net", "datastore": "ds", "resourcePool": "rp", "template": "t"}})),
        ..Default::default()
    });
    dir
}

fn user(sa: &str) -> String {
    format!("system:serviceaccount:{NAMESPACE}:{sa}")
}

/// A ServiceAccount bound to a ClusterRole and a Role holding `rules`; a client as it, once the
/// authorizer grants what they grant.
async fn account(cp: &ControlPlane, sa: &str, rules: &[Rule]) -> kube::Client {
    let admin = cp.client();
    let objects = capstan::install::manifests::rbac_named(sa, rules);
    capstan::install::apply(&admin, &objects, Duration::from_secs(30))
        .await
        .unwrap();
    capstan::install::testing::granted(&admin, sa, rules).await;
    cp.service_account_client(NAMESPACE, sa).await.unwrap()
}

/// Failed clusters, and objects skipped because they could not be read or applied.
fn failures(out: &capstan::reconcile::Outcome) -> Result<(), String> {
    let mut failed: Vec<String> = out
        .clusters
        .iter()
        .filter(|c| c.phase == Phase::Failed)
        .map(|c| format!("{}: {}", c.name, c.message))
        .collect();
    failed.extend(out.clusters.iter().flat_map(|c| {
        c.plan
            .entries
            .iter()
            .filter(|e| e.action == capstan::plan::Action::Skip)
            .filter_map(|e| Some(format!("{}: {}", e.object.subject(), e.reason.as_deref()?)))
    }));
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

/// Everything an agent does, as `client`; the first failure.
async fn scenario(cp: &ControlPlane, client: kube::Client, tag: &str) -> Result<(), String> {
    let dir = fleet(tag);
    let mgmt = format!("m-{tag}");
    let w = format!("w-{tag}");
    let lc = capstan::leader::LeaderConfig {
        lease: format!("lease-{tag}"),
        namespace: NAMESPACE.into(),
        identity: tag.into(),
        duration: Duration::from_secs(15),
    };
    let mut election = capstan::leader::Election::join(client.clone(), &lc)
        .await
        .map_err(|e| e.to_string())?;
    election.acquired().await;
    election.release().await;

    let opts = |rev: &str| Options {
        revision: rev.into(),
        management: Some(mgmt.clone()),
        ..Default::default()
    };
    // The daemon's way: watches.
    let agent = Agent::connect(client.clone())
        .await
        .map_err(|e| e.to_string())?
        .with_watches(Arc::new(|_: &str, _: Option<&str>| {}));
    let out = agent
        .reconcile(&dir.fleet(), &opts("r1"))
        .await
        .map_err(|e| e.to_string())?;
    failures(&out)?;
    // Again: the watches have started following changes since.
    let out = agent
        .reconcile(&dir.fleet(), &opts("r1"))
        .await
        .map_err(|e| e.to_string())?;
    failures(&out)?;
    drop(agent);

    // Drift: the live object must be read to compare.
    let mhc = ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "MachineHealthCheck".into(),
        plural: "machinehealthchecks".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(cp.client(), &format!("t-{tag}"), &mhc);
    api.patch(
        &format!("{w}-md-0-worker-unhealthy"),
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"checks": {"nodeStartupTimeoutSeconds": 42}}})),
    )
    .await
    .unwrap();
    let out = capstan::reconcile::reconcile(&client, &dir.fleet(), &opts("r1"))
        .await
        .map_err(|e| e.to_string())?;
    failures(&out)?;

    // A tombstone: the cluster's objects and its status deleted.
    let wdir = dir.dir(&w);
    std::fs::remove_file(wdir.join("cluster.yaml")).unwrap();
    std::fs::write(
        wdir.join("tombstone.yaml"),
        capstan_layout::intent::document("Tombstone", "rbac test"),
    )
    .unwrap();
    let out = capstan::reconcile::reconcile(&client, &dir.fleet(), &opts("r2"))
        .await
        .map_err(|e| e.to_string())?;
    failures(&out)?;
    let gone = out
        .clusters
        .iter()
        .any(|c| c.name == w && c.message == capstan::reconcile::DELETED);
    if !gone {
        return Err(format!("{w} not deleted: {:?}", out.clusters));
    }
    Ok(())
}

/// Requests of `sa` the API server refused (`verb resource[/subresource]`).
fn refused(cp: &ControlPlane, sa: &str) -> Vec<(String, String, String)> {
    cp.audit()
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| e.user.username == user(sa) && e.response_status.code == Some(403))
        .map(|e| {
            let o = e.object_ref.clone().unwrap_or_default();
            let resource = match &o.subresource {
                Some(s) => format!("{}/{s}", o.resource.unwrap_or_default()),
                None => o.resource.unwrap_or_default(),
            };
            (e.verb, o.api_group.unwrap_or_default(), resource)
        })
        .collect()
}

/// Runs the scenario as `sa` with `rules`: its result and the requests refused.
async fn run(
    cp: &ControlPlane,
    sa: String,
    rules: Vec<Rule>,
) -> (String, Result<(), String>, Vec<(String, String, String)>) {
    let client = account(cp, &sa, &rules).await;
    let result = scenario(cp, client, &sa).await;
    cp.audit()
        .settle(Duration::from_millis(200), Duration::from_secs(5))
        .await;
    let refused = refused(cp, &sa);
    (sa, result, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rule_is_needed_and_together_they_suffice() {
    let cp = capstan_harness::shared().await;
    capstan::install::install_crd(&cp.client()).await.unwrap();
    let all = rbac::rules();

    let (_, ok, denied) = run(cp, "rbac-all".into(), all.clone()).await;
    assert_eq!(ok, Ok(()), "with every rule: {denied:?}");
    assert!(denied.is_empty(), "with every rule, refused: {denied:?}");

    // Each rule removed in turn (and each verb of the main Cluster API rule).
    let mut cases: Vec<(String, Vec<Rule>, Rule)> = Vec::new();
    // (The rules a management cluster's upgrade of itself needs are proven by
    // tests/e2e/tests/self_upgrade.rs, which runs as the agent's ServiceAccount.)
    for (i, rule) in all.iter().enumerate().filter(|(_, r)| !r.self_upgrade) {
        let mut rules = all.clone();
        rules.remove(i);
        cases.push((format!("rbac-r{i}"), rules, rule.clone()));
    }
    for verb in rbac::MANAGE {
        let mut rules = all.clone();
        rules[0].verbs.retain(|v| v != verb);
        let mut missing = all[0].clone();
        missing.verbs = vec![verb.to_string()];
        cases.push((format!("rbac-v{verb}"), rules, missing));
    }
    let results: Vec<_> = futures::stream::iter(
        cases
            .iter()
            .map(|(sa, rules, _)| run(cp, sa.clone(), rules.clone())),
    )
    .buffered(4)
    .collect()
    .await;
    let mut report = Vec::new();
    for ((_, _, missing), (sa, result, denied)) in cases.iter().zip(results) {
        let hit = denied.iter().find(|(verb, group, resource)| {
            // A server-side apply that creates is a `patch` request the server also authorises
            // as `create`.
            let as_verb = |v: &str| missing.verbs.iter().any(|m| m == v);
            group == &missing.group
                && missing.resources.contains(resource)
                && (as_verb(verb) || (verb == "patch" && as_verb("create")))
        });
        let Some((verb, _, resource)) = hit else {
            panic!(
                "{sa}: without {missing:?} nothing was refused for it (result {result:?}, refused {denied:?})"
            );
        };
        let best_effort = missing.group == "events.k8s.io";
        match (&result, best_effort) {
            (Err(e), false) => assert!(e.contains("forbidden"), "{sa}: {e}"),
            (Ok(()), true) => {}
            (r, _) => panic!("{sa}: without {missing:?} the scenario gave {r:?}"),
        }
        report.push(format!(
            "{:<60} {:<28} -> 403 on {verb} {resource}: {}",
            format!("{} {}", missing.subject(), missing.verbs.join(",")),
            sa,
            result
                .err()
                .map(|e| e.chars().take(100).collect::<String>())
                .unwrap_or_else(|| "(event not recorded)".into())
        ));
    }
    println!("{}", report.join("\n"));
}
