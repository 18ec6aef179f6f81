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
//!
//! The rules only a management cluster's upgrade of itself needs get a scenario of their own
//! (the whole upgrade, against the real Cluster API controllers, is `self_upgrade.rs`, also run
//! as the agent's ServiceAccount): the backup written before it, which must skip no kind of the
//! test bed's upstream CRDs (all of Cluster API, CAPD, CAPV, CAAPH, etcdadm and EKS Anywhere),
//! and kube-vip's ordering on a control plane of two outdated machines (a stand-in Lease names
//! the holder's node, as kube-vip would). Without a backup rule, exactly that rule's kinds are
//! skipped and refused with `403`; without the Lease or Machine rule, the ordering fails with a
//! `403` on it.

use std::sync::Arc;
use std::time::Duration;

use capstan::install::rbac::{self, Rule};
use capstan::reconcile::{Agent, Options};
use capstan::status::{NAMESPACE, Phase};
use capstan_e2e::FleetDir;
use capstan_harness::ControlPlane;
use capstan_harness::objects::service_account_user;
use capstan_layout::scaffold::ClusterRequest;
use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::json;

/// The control plane of this file's tests, shared by them and started on first use. Not the
/// binary's shared one: the tests change what an API server has one of (the fleet identities'
/// roles, the tenancy policy), which the other tests' agents rely on while they run.
async fn control_plane() -> &'static ControlPlane {
    static CP: tokio::sync::OnceCell<ControlPlane> = tokio::sync::OnceCell::const_new();
    CP.get_or_init(|| async {
        ControlPlane::start()
            .await
            .unwrap_or_else(|e| panic!("starting the RBAC tests' control plane failed: {e}"))
    })
    .await
}

/// A fleet of its own whose clusters render every kind capstan renders, so that the scenario
/// writes each kind as each identity that may: management `m-<tag>` (docker, external etcd) with
/// workloads `w-<tag>` (docker on CAPD's in-memory backend, external etcd), `v-<tag>` (vSphere:
/// its cloud-provider interface goes through a ClusterResourceSet with ConfigMap and Secret
/// payloads), `x-<tag>` (Nutanix: its cloud controller manager goes through a ClusterResourceSet
/// too), `b-<tag>` (bare metal) and `d-<tag>` (docker); and four more management clusters,
/// `n-<tag>` (vSphere), `p-<tag>` (Nutanix), `q-<tag>` (bare metal) and `i-<tag>` (docker in
/// memory). All in namespace `t-<tag>`.
fn every_kind_fleet(tag: &str) -> FleetDir {
    let ns = format!("t-{tag}");
    let vsphere = |host: &str| {
        (
            Some(host.to_string()),
            Some(
                serde_json::json!({"vsphere": {"server": "vc", "datacenter": "dc", "network": "net", "datastore": "ds", "resourcePool": "rp", "template": "t"}}),
            ),
        )
    };
    let nutanix = |host: &str| {
        (
            Some(host.to_string()),
            Some(
                serde_json::json!({"nutanix": {"endpoint": "prism.example", "image": "ubuntu", "cluster": "pe", "subnet": "net"}}),
            ),
        )
    };
    let tinkerbell = |host: &str| {
        (
            Some(host.to_string()),
            Some(
                serde_json::json!({"tinkerbell": {"tinkerbellIP": "10.250.1.20", "osImageURL": "https://images.example/ubuntu.gz", "sshAuthorizedKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBAlf8UkQwwdm0/3owGGfFx0nralmWRxinY3cBBi24tm"}}),
            ),
        )
    };
    let req =
        |name: &str, mgmt: Option<&str>, provider: &str, cidrs: (&str, &str)| ClusterRequest {
            name: format!("{name}-{tag}"),
            management: mgmt.map(|m| format!("{m}-{tag}")),
            provider: provider.into(),
            namespace: Some(ns.clone()),
            pod_cidr: Some(cidrs.0.into()),
            service_cidr: Some(cidrs.1.into()),
            ..Default::default()
        };
    let mut dir = FleetDir::new(ClusterRequest {
        external_etcd: Some(1),
        ..req("m", None, "docker", ("192.168.0.0/16", "10.96.0.0/12"))
    });
    dir.add(ClusterRequest {
        external_etcd: Some(1),
        docker_backend: Some("in-memory".into()),
        ..req("w", Some("m"), "docker", ("172.16.0.0/16", "10.112.0.0/16"))
    });
    let (endpoint_host, values) = vsphere("10.250.0.10");
    dir.add(ClusterRequest {
        endpoint_host,
        values,
        ..req(
            "v",
            Some("m"),
            "vsphere",
            ("172.20.0.0/16", "10.120.0.0/16"),
        )
    });
    dir.add(req(
        "d",
        Some("m"),
        "docker",
        ("172.24.0.0/16", "10.124.0.0/16"),
    ));
    let (endpoint_host, values) = vsphere("10.250.0.11");
    dir.add(ClusterRequest {
        endpoint_host,
        values,
        ..req("n", None, "vsphere", ("192.168.0.0/16", "10.96.0.0/12"))
    });
    dir.add(ClusterRequest {
        docker_backend: Some("in-memory".into()),
        ..req("i", None, "docker", ("192.168.0.0/16", "10.96.0.0/12"))
    });
    let (endpoint_host, values) = nutanix("10.250.0.12");
    dir.add(ClusterRequest {
        endpoint_host,
        values,
        ..req(
            "x",
            Some("m"),
            "nutanix",
            ("172.28.0.0/16", "10.128.0.0/16"),
        )
    });
    let (endpoint_host, values) = nutanix("10.250.0.13");
    dir.add(ClusterRequest {
        endpoint_host,
        values,
        ..req("p", None, "nutanix", ("192.168.0.0/16", "10.96.0.0/12"))
    });
    let (endpoint_host, values) = tinkerbell("10.250.0.14");
    dir.add(ClusterRequest {
        endpoint_host,
        values,
        ..req(
            "b",
            Some("m"),
            "tinkerbell",
            ("172.30.0.0/16", "10.130.0.0/16"),
        )
    });
    let (endpoint_host, values) = tinkerbell("10.250.0.15");
    dir.add(ClusterRequest {
        endpoint_host,
        values,
        ..req("q", None, "tinkerbell", ("192.168.0.0/16", "10.96.0.0/12"))
    });
    // Both vSphere clusters declare a failure domain (the workload's workers are placed in it):
    // each renders a VSphereFailureDomain and a VSphereDeploymentZone, cluster-scoped.
    failure_domain(&dir.dir(&format!("v-{tag}")), true);
    failure_domain(&dir.root.join("clusters").join(format!("n-{tag}")), false);
    // Both bare-metal clusters provision their machines with a TinkerbellTemplateConfig of
    // their own.
    template_config(&dir.dir(&format!("b-{tag}")), &format!("b-{tag}"));
    template_config(
        &dir.root.join("clusters").join(format!("q-{tag}")),
        &format!("q-{tag}"),
    );
    // Identity providers: an OIDCConfig on a management and a workload cluster, an AWSIamConfig
    // on a workload cluster (a management cluster's is refused).
    identity_providers(
        &dir.root.join("clusters").join(format!("m-{tag}")),
        &format!("m-{tag}"),
        &["OIDCConfig"],
    );
    identity_providers(
        &dir.dir(&format!("d-{tag}")),
        &format!("d-{tag}"),
        &["OIDCConfig", "AWSIamConfig"],
    );
    dir
}

/// Adds identity providers of `kinds` to the cluster in `dir`, named `<cluster>-<kind>`.
fn identity_providers(dir: &std::path::Path, cluster: &str, kinds: &[&str]) {
    let path = dir.join("cluster.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let namespace = text_namespace(&text).unwrap_or_default();
    let name = |kind: &str| format!("{cluster}-{}", kind.to_lowercase());
    let refs: String = kinds
        .iter()
        .map(|k| format!("    - {{kind: {k}, name: {}}}\n", name(k)))
        .collect();
    let from = "  datacenterRef:\n";
    assert!(text.contains(from), "{}:\n{text}", path.display());
    let mut text = text.replacen(from, &format!("  identityProviderRefs:\n{refs}{from}"), 1);
    for k in kinds {
        let spec = match *k {
            "OIDCConfig" => "  clientId: k8s\n  issuerUrl: https://login.example.com\n",
            _ => "  awsRegion: us-west-2\n  backendMode: [EKSConfigMap]\n",
        };
        text.push_str(&format!(
            "---\napiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: {k}\nmetadata:\n  name: {}\n  namespace: {namespace}\nspec:\n{spec}",
            name(k)
        ));
    }
    std::fs::write(&path, text).unwrap();
}

/// Adds the TinkerbellTemplateConfig `<cluster>-provision` to the bare-metal cluster in `dir`
/// and points its machine configs at it.
fn template_config(dir: &std::path::Path, cluster: &str) {
    let path = dir.join("cluster.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let namespace = text_namespace(&text).unwrap_or_default();
    let from = "  osFamily: \"ubuntu\"\n";
    assert!(
        text.contains(from),
        "{from:?} not in {}:\n{text}",
        path.display()
    );
    let mut text = text.replace(
        from,
        &format!(
            "{from}  templateRef: {{kind: TinkerbellTemplateConfig, name: {cluster}-provision}}\n"
        ),
    );
    text.push_str(&format!(
        "---\napiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: TinkerbellTemplateConfig\nmetadata:\n  name: {cluster}-provision\n  namespace: {}\nspec:\n  template:\n    version: \"0.1\"\n    name: {cluster}-provision\n    id: \"\"\n    global_timeout: 6000\n    tasks:\n      - name: {cluster}-provision\n        worker: \"{{{{.device_1}}}}\"\n        actions:\n          - {{name: stream-image, image: 127.0.0.1/embedded/image2disk, timeout: 600}}\n",
        namespace
    ));
    std::fs::write(&path, text).unwrap();
}

/// The `namespace:` of the first object of a scaffolded cluster file.
fn text_namespace(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("namespace: "))
        .map(|n| n.trim_matches('"').to_string())
}

/// Declares failure domain `fd-1` in the VSphereDatacenterConfig of the vSphere cluster in
/// `dir`, and (`workers`) places its worker group `md-0` in it.
fn failure_domain(dir: &std::path::Path, workers: bool) {
    let edit = |file: &str, from: &str, to: &str| {
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(from),
            "{from:?} not in {}:\n{text}",
            path.display()
        );
        std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    };
    edit(
        "cluster.yaml",
        "  network: \"net\"\n",
        "  network: \"net\"\n  failureDomains:\n    - {name: fd-1, computeCluster: /dc/host/c1, resourcePool: /dc/host/c1/Resources, datastore: /dc/datastore/ds1, folder: /dc/vm/fd-1, network: /dc/network/net}\n",
    );
    if workers {
        edit(
            "cluster.yaml",
            "    - name: \"md-0\"\n",
            "    - name: \"md-0\"\n      failureDomains: [fd-1]\n",
        );
    }
}

/// The management clusters of [`fleet`].
fn managements(tag: &str) -> [String; 5] {
    [
        format!("m-{tag}"),
        format!("n-{tag}"),
        format!("i-{tag}"),
        format!("p-{tag}"),
        format!("q-{tag}"),
    ]
}

/// A ServiceAccount bound to a ClusterRole and a Role holding `rules`; a client as it, once the
/// authorizer grants what they grant.
async fn account_client(cp: &ControlPlane, sa: &str, rules: &[Rule]) -> kube::Client {
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
    let dir = every_kind_fleet(tag);
    let mgmt = format!("m-{tag}");
    let w = format!("w-{tag}");
    let lc = capstan::leader::LeaderConfig {
        lease: format!("lease-{tag}"),
        namespace: NAMESPACE.into(),
        identity: tag.into(),
        duration: Duration::from_secs(15),
        renew_deadline: None,
    };
    let fence = capstan::k8s::Fence::shut();
    let mut election = capstan::leader::Election::join(client.clone(), &lc, fence.clone())
        .await
        .map_err(|e| e.to_string())?;
    election.acquired().await;
    assert!(fence.is_open(), "the leader's fence is open");
    election.release().await;
    assert!(!fence.is_open(), "released: the fence is shut");

    // --verify-commits: the kept position, created on first use, then read. One scenario at a
    // time, with the ConfigMap gone before it (its name is fixed), so each one's write is the
    // create a first use makes and the patch every later one does.
    {
        static POSITION: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let _one = POSITION.lock().await;
        let admin: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(cp.client(), NAMESPACE);
        match admin
            .delete(capstan::source::POSITION_CONFIGMAP, &Default::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => panic!("deleting the position: {e}"),
        }
        let source = capstan::source::SourceConfig {
            url: format!("https://git.invalid/{tag}.git"),
            reference: capstan::source::GitRef::Branch("main".into()),
            cache_dir: std::path::PathBuf::new(),
            ssh_key: None,
            known_hosts: None,
            shallow: false,
            ca_file: None,
        };
        let position =
            capstan::daemon::position::Position::new(client.clone(), NAMESPACE, &mgmt, &source);
        let commit = "1".repeat(40);
        position
            .write(&commit, "rbac")
            .await
            .map_err(|e| format!("keeping the position: {e}"))?;
        position
            .write(&commit, "rbac")
            .await
            .map_err(|e| e.to_string())?;
        let kept = position.read().await?;
        assert_eq!(kept.as_deref(), Some(commit.as_str()));
    }

    let opts = |rev: &str, mgmt: &str| Options {
        revision: rev.into(),
        management: Some(mgmt.to_string()),
        ..Default::default()
    };
    // The daemon's way: watches. Every management cluster and its workloads, twice (the second
    // time the watches have started following changes).
    let agent = Agent::connect(client.clone())
        .await
        .map_err(|e| e.to_string())?
        .with_watches(Arc::new(|_: &str, _: Option<&str>| {}));
    for m in managements(tag) {
        for _ in 0..2 {
            let out = agent
                .reconcile(&dir.fleet(), &opts("r1", &m))
                .await
                .map_err(|e| e.to_string())?;
            failures(&out)?;
        }
    }
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
        // And its cluster label changed by hand: put back, the agent vouching for it.
        &Patch::Merge(
            json!({"spec": {"checks": {"nodeStartupTimeoutSeconds": 42}},
            "metadata": {"labels": {capstan_templates::identity::CLUSTER_LABEL: "someone-else"}}}),
        ),
    )
    .await
    .unwrap();
    let out = capstan::reconcile::reconcile(&client, &dir.fleet(), &opts("r1", &mgmt))
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
    let out = capstan::reconcile::reconcile(&client, &dir.fleet(), &opts("r2", &mgmt))
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

    // The dashboard the agent serves: its watches list, and a request's token is reviewed
    // (the ServiceAccount's own: authenticated, then its access to ManagedClusters asked).
    let watched = capstan::dashboard::Watched::start(&client, None).await;
    watched.synced(Duration::from_secs(60)).await?;
    let token = cp
        .service_account_token(NAMESPACE, tag)
        .await
        .map_err(|e| e.to_string())?;
    let reviewer = capstan::dashboard::auth::Reviewer::new(client.clone());
    let verdict = reviewer.review(&token).await.map_err(|e| e.to_string())?;
    if verdict == capstan::dashboard::auth::Verdict::Unauthenticated {
        return Err("the dashboard's token review: a valid token unauthenticated".into());
    }
    Ok(())
}

/// The node whose machine holds kube-vip's address (the stand-in Lease names it).
const HOLDER: &str = "node-holder";

fn machine_resource() -> ApiResource {
    ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Machine".into(),
        plural: "machines".into(),
    }
}

/// kube-vip's part: the Lease of the control plane's address names [`HOLDER`].
async fn kube_vip_lease(cp: &ControlPlane) {
    let (ns, name) = capstan::reconcile::self_upgrade::KUBE_VIP_LEASE;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(cp.client(), ns);
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"holderIdentity": HOLDER, "leaseDurationSeconds": 15}});
    leases
        .patch(
            name,
            &PatchParams::apply("kube-vip-stand-in"),
            &Patch::Apply(&lease),
        )
        .await
        .unwrap();
}

/// A control plane `kcp` in `ns` of two outdated machines, `<kcp>-holder` on [`HOLDER`]'s node
/// and `<kcp>-other` (what Cluster API's controllers would have written, status included).
async fn outdated_control_plane(cp: &ControlPlane, ns: &str, kcp: &str) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cp.client());
    let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    namespaces
        .patch(ns, &PatchParams::apply("capstan-test"), &Patch::Apply(&obj))
        .await
        .unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(cp.client(), ns, &machine_resource());
    for (suffix, node) in [("holder", HOLDER), ("other", "node-other")] {
        let name = format!("{kcp}-{suffix}");
        let m = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "namespace": ns,
                "labels": {"cluster.x-k8s.io/control-plane-name": kcp, "cluster.x-k8s.io/cluster-name": kcp}},
            "spec": {"clusterName": kcp, "bootstrap": {"dataSecretName": format!("{name}-data")},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": name}}});
        let pp = PatchParams::apply("capi-stand-in");
        api.patch(&name, &pp, &Patch::Apply(&m)).await.unwrap();
        let status = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "status": {"nodeRef": {"name": node}, "conditions": [{"type": "UpToDate", "status": "False",
                "reason": "NotUpToDate", "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"}]}});
        api.patch_status(&name, &pp, &Patch::Apply(&status))
            .await
            .unwrap();
    }
}

/// What a management cluster's upgrade of itself does besides the scenario, as `client`: the
/// backup (the kinds it skipped, and the `Kind.group`s it holds), then kube-vip's ordering on a
/// control plane of its own (the machines marked).
async fn self_upgrade_scenario(
    cp: &ControlPlane,
    client: kube::Client,
    tag: &str,
) -> (Backup, Result<Vec<String>, String>) {
    let dir = tempfile::tempdir().unwrap();
    // Encrypted as the agent encrypts (here to a key of the test's: the recipients' Secret and
    // its rule are `install`'s extras, tested in the agent's own tests).
    let to = capstan::backup::Encryption::To(vec![age::x25519::Identity::generate().to_public()]);
    let backup = capstan::backup::write(&client, dir.path(), tag, &to)
        .await
        .unwrap_or_else(|e| panic!("{tag}: backup: {e}"));
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(backup.dir.join("manifest.json")).unwrap()).unwrap();
    let kinds = manifest["kinds"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let ns = format!("t-{tag}");
    outdated_control_plane(cp, &ns, tag).await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &machine_resource());
    let marked = capstan::reconcile::self_upgrade::mark_all_but_kube_vip_holder(
        &client,
        &api,
        tag,
        &|| {},
        &|| {},
    )
    .await;
    ((backup.skipped, kinds), marked)
}

/// A backup's skipped kinds (`resource.group`) and the kinds it holds (`Kind.group`).
type Backup = (Vec<String>, std::collections::BTreeSet<String>);

/// Runs the self-upgrade scenario as `sa` with `rules`: its result and the requests refused.
async fn run_self_upgrade(
    cp: &ControlPlane,
    sa: String,
    rules: Vec<Rule>,
) -> (Backup, Result<Vec<String>, String>, Refused) {
    let client = account_client(cp, &sa, &rules).await;
    let (backup, marked) = self_upgrade_scenario(cp, client, &sa).await;
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    (backup, marked, refused_requests(cp, &sa))
}

/// Requests refused: `(verb, group, resource[/subresource])`.
type Refused = Vec<(String, String, String)>;

/// Whether `denied` holds a request for what `missing` grants.
fn refused_for<'a>(denied: &'a Refused, missing: &Rule) -> Option<&'a (String, String, String)> {
    denied.iter().find(|(verb, group, resource)| {
        // A server-side apply that creates is a `patch` request the server also authorises as
        // `create`.
        let as_verb = |v: &str| missing.verbs.iter().any(|m| m == v);
        group == &missing.group
            && missing.resources.contains(resource)
            && (as_verb(verb) || (verb == "patch" && as_verb("create")))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_self_upgrade_rule_is_needed_and_together_they_suffice() {
    let cp = control_plane().await;
    capstan::install::install_crd(&cp.client()).await.unwrap();
    kube_vip_lease(cp).await;
    let all = rbac::rules();

    // With every rule: a backup of every kind the test bed serves, and the holder goes last.
    let ((skipped, kinds), marked, denied) =
        run_self_upgrade(cp, "rbac-su-all".into(), all.clone()).await;
    assert!(skipped.is_empty(), "the backup skipped {skipped:?}");
    // Every kind of the backed-up groups the server has a CRD for, whatever version serves it.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(cp.client());
    let served: std::collections::BTreeSet<String> = crds
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|c| capstan::backup::backed_up_group(&c.spec.group))
        .map(|c| format!("{}.{}", c.spec.names.kind, c.spec.group))
        .collect();
    assert!(served.len() >= 60, "{served:?}");
    let missing: Vec<&String> = served.difference(&kinds).collect();
    assert!(missing.is_empty(), "not in the backup: {missing:?}");
    assert_eq!(marked, Ok(vec!["rbac-su-all-other".to_string()]));
    assert!(denied.is_empty(), "with every rule, refused: {denied:?}");
    let other =
        Api::<DynamicObject>::namespaced_with(cp.client(), "t-rbac-su-all", &machine_resource())
            .get("rbac-su-all-other")
            .await
            .unwrap();
    assert!(
        other
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(capstan::reconcile::self_upgrade::DELETE_MACHINE),
        "the marked machine carries the deletion mark"
    );

    let cases: Vec<(String, Vec<Rule>, Rule)> = all
        .iter()
        .enumerate()
        .filter(|(_, r)| r.self_upgrade)
        .map(|(i, rule)| {
            let mut rules = all.clone();
            rules.remove(i);
            (format!("rbac-su{i}"), rules, rule.clone())
        })
        .collect();
    assert!(cases.len() >= 10, "{cases:?}");
    let results: Vec<_> = futures::stream::iter(
        cases
            .iter()
            .map(|(sa, rules, _)| run_self_upgrade(cp, sa.clone(), rules.clone())),
    )
    .buffered(4)
    .collect()
    .await;
    let mut report = Vec::new();
    for ((sa, _, missing), ((skipped, _), marked, denied)) in cases.iter().zip(results) {
        let Some((verb, _, resource)) = refused_for(&denied, missing) else {
            panic!(
                "{sa}: without {missing:?} nothing was refused for it (skipped {skipped:?}, marked {marked:?}, refused {denied:?})"
            );
        };
        let outcome = if missing.verbs == ["list"] && missing.resource_names.is_empty() {
            // A backup rule: exactly its kinds are left out (and the machines of the ordering
            // cannot be listed without the Machine one).
            let mut want: Vec<String> = missing
                .resources
                .iter()
                .map(|r| format!("{r}.{}", missing.group))
                .collect();
            let mut got = skipped.clone();
            want.sort();
            got.sort();
            assert_eq!(got, want, "{sa}: without {}", missing.subject());
            format!("backup skipped {}", got.join(", "))
        } else {
            assert!(skipped.is_empty(), "{sa}: the backup skipped {skipped:?}");
            let e = marked.expect_err(sa);
            assert!(e.contains("forbidden"), "{sa}: {e}");
            e.chars().take(100).collect()
        };
        report.push(format!(
            "{:<60} {:<12} -> 403 on {verb} {resource}: {outcome}",
            format!("{} {}", missing.subject(), missing.verbs.join(",")),
            sa,
        ));
    }
    println!("{}", report.join("\n"));
}

/// Requests of `sa` the API server refused (`verb resource[/subresource]`).
fn refused_requests(cp: &ControlPlane, sa: &str) -> Refused {
    cp.audit()
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| {
            e.user.username == service_account_user(NAMESPACE, sa)
                && e.response_status.code == Some(403)
        })
        .filter_map(|e| {
            let message = e.raw["responseStatus"]["message"].as_str().unwrap_or("");
            // A write the tenancy policy refuses (the probe at start must be) is not RBAC's.
            if message.contains("ValidatingAdmissionPolicy") {
                return None;
            }
            // A refused impersonation is recorded on the request it was for.
            if let Some(rest) = message.split("cannot impersonate resource \"").nth(1) {
                let resource = rest.split('"').next().unwrap_or("").to_string();
                let group = rest
                    .split("in API group \"")
                    .nth(1)
                    .and_then(|g| g.split('"').next())
                    .unwrap_or("")
                    .to_string();
                return Some(("impersonate".to_string(), group, resource));
            }
            let o = e.object_ref.clone().unwrap_or_default();
            let resource = match &o.subresource {
                Some(s) => format!("{}/{s}", o.resource.unwrap_or_default()),
                None => o.resource.unwrap_or_default(),
            };
            Some((e.verb, o.api_group.unwrap_or_default(), resource))
        })
        .collect()
}

/// Runs the scenario as `sa` with `rules`: its result and the requests refused.
async fn run_as(
    cp: &ControlPlane,
    sa: String,
    rules: Vec<Rule>,
) -> (String, Result<(), String>, Refused) {
    let client = account_client(cp, &sa, &rules).await;
    let result = scenario(cp, client, &sa).await;
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    let refused = refused_requests(cp, &sa);
    (sa, result, refused)
}

/// The fleet identity a holder is (None: the agent itself, through its ClusterRole or Role).
fn identity_of(holder: rbac::Holder) -> Option<&'static str> {
    match holder {
        rbac::Holder::Workload => Some(capstan::k8s::identity::WORKLOAD_USER),
        rbac::Holder::Management => Some(capstan::k8s::identity::MANAGEMENT_USER),
        rbac::Holder::Cluster | rbac::Holder::System => None,
    }
}

/// Installs the fleet identities' roles with `rules`, and waits until the authorizer grants
/// them and no longer grants `denied` (a rule of capstan's and a verb of it `rules` lack).
async fn identities(cp: &ControlPlane, rules: &[Rule], denied: &[(&Rule, &str)]) {
    let admin = cp.client();
    capstan::install::apply(
        &admin,
        &capstan::install::manifests::identities(rules),
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let wanted: Vec<Rule> = rules
        .iter()
        .filter(|r| identity_of(r.holder).is_some())
        .cloned()
        .collect();
    capstan::install::testing::granted(&admin, "unused", &wanted).await;
    for (r, verb) in denied {
        let user = identity_of(r.holder).unwrap();
        let start = std::time::Instant::now();
        while authorizer_allows(&admin, user, r, verb).await {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{user} still granted {verb} of {r:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

/// Whether the authorizer grants `user` `verb` on the first resource of `rule`.
async fn authorizer_allows(admin: &kube::Client, user: &str, rule: &Rule, verb: &str) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: Some(vec!["system:authenticated".into()]),
            resource_attributes: Some(ResourceAttributes {
                group: Some(rule.group.clone()),
                resource: Some(rule.resources[0].clone()),
                verb: Some(verb.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let reviews: Api<SubjectAccessReview> = Api::all(admin.clone());
    reviews
        .create(&Default::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

/// A request of `verb` on an object of `resource` (in `discovery`) as `tenant` writing for
/// cluster `c-rbac`: its HTTP status (a dry run for `create` and `patch`; a delete of an object
/// that does not exist: the authorizer answers before anything else).
async fn attempt(
    discovery: &kube::Discovery,
    sa: &kube::Client,
    tenant: capstan::k8s::identity::Tenant,
    group: &str,
    resource: &str,
    verb: &str,
) -> u16 {
    let (ar, namespaced) = discovery
        .groups()
        .filter(|g| g.name() == group)
        .flat_map(|g| {
            g.versions()
                .flat_map(|v| g.versioned_resources(v))
                .collect::<Vec<_>>()
        })
        .find(|(ar, _)| ar.plural == resource)
        .map(|(ar, caps)| (ar, caps.scope == kube::discovery::Scope::Namespaced))
        .unwrap_or_else(|| panic!("{resource}.{group} is not served"));
    let writer = capstan::k8s::identity::impersonating(sa, tenant, "c-rbac");
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(writer, "t-rbac-all", &ar)
    } else {
        Api::all_with(writer, &ar)
    };
    let name = "c-rbac-probe";
    let body = json!({"apiVersion": ar.api_version, "kind": ar.kind, "metadata": {"name": name,
        "labels": {capstan_templates::identity::CLUSTER_LABEL: "c-rbac"}}});
    let result = match verb {
        "delete" => api.delete(name, &Default::default()).await.map(|_| ()),
        // A create request: the authorizer answers before the object is validated (a
        // server-side apply that creates is authorised as `create` only after validation).
        "create" => {
            let obj: DynamicObject = serde_json::from_value(body).unwrap();
            api.create(
                &kube::api::PostParams {
                    dry_run: true,
                    ..Default::default()
                },
                &obj,
            )
            .await
            .map(|_| ())
        }
        _ => api
            .patch(
                name,
                &PatchParams::apply("capstan").dry_run().force(),
                &Patch::Apply(&body),
            )
            .await
            .map(|_| ()),
    };
    match result {
        Ok(()) => 200,
        Err(kube::Error::Api(s)) => s.code,
        Err(e) => panic!("{verb} {resource}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rule_is_needed_and_together_they_suffice() {
    let cp = control_plane().await;
    capstan::install::install_crd(&cp.client()).await.unwrap();
    let all = rbac::rules();
    capstan::install::install_tenancy(&cp.client(), &all, Duration::from_secs(60))
        .await
        .unwrap();

    let (_, ok, denied) = run_as(cp, "rbac-all".into(), all.clone()).await;
    assert_eq!(ok, Ok(()), "with every rule: {denied:?}");
    assert!(denied.is_empty(), "with every rule, refused: {denied:?}");

    // The agent's own rules, each removed in turn (and each verb of its first rule, reading
    // Cluster API's kinds), for a ServiceAccount of its own: the scenario fails with a 403.
    let mut cases: Vec<(String, Vec<Rule>, Rule)> = Vec::new();
    // (The rules a management cluster's upgrade of itself needs: the next test.)
    for (i, rule) in all
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.self_upgrade && identity_of(r.holder).is_none())
    {
        let mut rules = all.clone();
        rules.remove(i);
        cases.push((format!("rbac-r{i}"), rules, rule.clone()));
    }
    for verb in rbac::READ {
        let mut rules = all.clone();
        rules[0].verbs.retain(|v| v != verb);
        let mut missing = all[0].clone();
        missing.verbs = vec![verb.to_string()];
        cases.push((format!("rbac-v{verb}"), rules, missing));
    }
    let results: Vec<_> = futures::stream::iter(
        cases
            .iter()
            .map(|(sa, rules, _)| run_as(cp, sa.clone(), rules.clone())),
    )
    .buffered(4)
    .collect()
    .await;
    let mut report = Vec::new();
    for ((_, _, missing), (sa, result, denied)) in cases.iter().zip(results) {
        let Some((verb, _, resource)) = refused_for(&denied, missing) else {
            panic!(
                "{sa}: without {missing:?} nothing was refused for it (result {result:?}, refused {denied:?})"
            );
        };
        // Events are best effort; so is the Hardware a bare-metal rollout's spare-server gate
        // reads (unreadable, it holds nothing: plan/src/spare.rs). Each is still asked for.
        let best_effort = matches!(missing.group.as_str(), "events.k8s.io" | "tinkerbell.org");
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

    // The fleet identities' rules are one pair of roles for the whole API server, so they are
    // not taken away while scenarios run: each is shown used by the scenario with every rule
    // (the identity wrote each of its resources, from the audit log), and refused without it
    // (the identity's request for that resource and verb answered 403 by the authorizer).
    let sa_client = cp
        .service_account_client(capstan::status::NAMESPACE, "rbac-all")
        .await
        .unwrap();
    let written: std::collections::BTreeSet<(String, String, String)> = cp
        .audit()
        .events()
        .unwrap()
        .into_iter()
        .filter(|e| e.user.username == service_account_user(NAMESPACE, "rbac-all") && e.is_write())
        .filter(|e| {
            e.response_status
                .code
                .is_some_and(|c| (200..300).contains(&c))
        })
        .filter_map(|e| {
            let o = e.object_ref.clone()?;
            Some((
                e.impersonated_user?.username,
                o.api_group.unwrap_or_default(),
                o.resource?,
            ))
        })
        .collect();
    let discovery = kube::Discovery::new(cp.client()).run().await.unwrap();
    let identity_rules: Vec<(usize, &Rule)> = all
        .iter()
        .enumerate()
        .filter(|(_, r)| identity_of(r.holder).is_some())
        .collect();
    assert!(identity_rules.len() >= 18, "{identity_rules:?}");
    for (i, rule) in identity_rules {
        let user = identity_of(rule.holder).unwrap();
        let tenant = match rule.holder {
            rbac::Holder::Workload => capstan::k8s::identity::Tenant::Workload,
            _ => capstan::k8s::identity::Tenant::Management,
        };
        for resource in &rule.resources {
            assert!(
                written.contains(&(user.to_string(), rule.group.clone(), resource.clone())),
                "the scenario never wrote {resource}.{} as {user}: {written:?}",
                rule.group
            );
        }
        // Without the rule (and, for the workload identity's Cluster API rule, without each
        // of its verbs in turn).
        let mut variants: Vec<(String, Vec<Rule>, Vec<&str>)> = Vec::new();
        let mut without = all.clone();
        without.remove(i);
        variants.push((
            "the rule".into(),
            without,
            rule.verbs.iter().map(String::as_str).collect(),
        ));
        if rule.holder == rbac::Holder::Workload && rule.group == "cluster.x-k8s.io" {
            for verb in rbac::WRITE {
                let mut rules = all.clone();
                rules[i].verbs.retain(|v| v != verb);
                variants.push((format!("verb {verb}"), rules, vec![verb]));
            }
        }
        for (what, rules, verbs) in variants {
            let denied: Vec<(&Rule, &str)> = verbs.iter().map(|v| (rule, *v)).collect();
            identities(cp, &rules, &denied).await;
            for verb in verbs {
                let code = attempt(
                    &discovery,
                    &sa_client,
                    tenant,
                    &rule.group,
                    &rule.resources[0],
                    verb,
                )
                .await;
                assert_eq!(
                    code, 403,
                    "{user} without {what} of {rule:?}: {verb} {} answered {code}",
                    rule.resources[0]
                );
                report.push(format!(
                    "{:<60} {:<28} -> 403 on {verb} {}",
                    format!("{} {} ({user})", rule.subject(), rule.verbs.join(",")),
                    what,
                    rule.resources[0]
                ));
            }
        }
        identities(cp, &all, &[]).await;
    }
    println!("{}", report.join("\n"));
}

/// kube-apiserver answers before it is ready, and until its RBAC informers have synced it
/// refuses what it allows a moment later (what CI once saw when the self-upgrade test restarted
/// its API server). The agent believes a 403 only from a ready API server that, asked again,
/// still refuses; any other 403 is a failed request, tried again. A real API server is made not
/// ready here the one way that keeps it answering: SIGTERM with a shutdown delay, during which
/// `/readyz` fails while requests are served (and the authorizer still refuses the agent what
/// its rules do not grant, which is what the agent must not believe then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_counts_only_when_a_ready_api_server_confirms_it() {
    use capstan::k8s::Resolver;
    use capstan::k8s::refusal::{Refusal, Refused, WATCH};
    use capstan::live::{LiveError, watch::LiveCache};

    let cp = ControlPlane::start_with(capstan_harness::StartOptions {
        install_crds: false,
        extra_apiserver_args: vec!["--shutdown-delay-duration=600s".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let agent = capstan::install::testing::agent_client(&cp).await;
    let resolver = Resolver::new(agent.clone()).await.unwrap();
    // Not among the agent's rules (`capstan install --allow` grants it): the API server refuses.
    let crds = Refused::new("apiextensions.k8s.io", "customresourcedefinitions", WATCH);
    let crd_kind = vec![(
        "apiextensions.k8s.io/v1".to_string(),
        "CustomResourceDefinition".to_string(),
    )];
    let crds_api: Api<DynamicObject> = Api::all_with(
        agent.clone(),
        &ApiResource::erase::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >(&()),
    );
    let refused_now = || async {
        matches!(
            crds_api.list(&Default::default()).await,
            Err(kube::Error::Api(s)) if s.code == 403
        )
    };
    let cache = |timeout| {
        let mut c = LiveCache::start(agent.clone(), Arc::new(|_: &str, _: Option<&str>| {}));
        c.sync_timeout = timeout;
        c
    };

    // Ready: the refusal stands, for a single list and for a watch.
    assert!(refused_now().await);
    assert_eq!(crds.confirm(&agent).await, Refusal::Stands);
    let (live, _) = capstan::live::list(&agent, &resolver, &crd_kind)
        .await
        .unwrap();
    assert!(
        live.denied("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            .is_some_and(|m| m.contains("forbidden")),
        "a single list: not marked refused"
    );
    let watched = cache(Duration::from_secs(60));
    watched.ensure(&resolver, &crd_kind).await.unwrap();
    assert!(
        watched
            .live()
            .denied("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            .is_some(),
        "a watch: not marked refused"
    );
    // A 403 for what the agent's rules grant (as a not-ready server gives) is not confirmed.
    let clusters = Refused::new("cluster.x-k8s.io", "clusters", WATCH);
    match clusters.confirm(&agent).await {
        Refusal::Unsure(why) => assert!(why.contains("allows"), "{why}"),
        Refusal::Stands => panic!("a refusal of what the agent may do was confirmed"),
    }

    // Not ready: SIGTERM, and /readyz fails while the server goes on answering for the delay.
    let pid = cp.pids().kube_apiserver.pid;
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let admin = cp.client();
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let readyz = http::Request::get("/readyz").body(Vec::new()).unwrap();
            if admin.request_text(readyz).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("/readyz fails after SIGTERM");
    assert!(
        refused_now().await,
        "the API server still answers, and refuses"
    );
    match crds.confirm(&agent).await {
        Refusal::Unsure(why) => assert!(why.contains("not ready"), "{why}"),
        Refusal::Stands => panic!("a refusal from an API server that is not ready was believed"),
    }
    // A single list fails the pass (tried again) instead of failing the clusters with the kind.
    let Err(LiveError::List { kind, .. }) = capstan::live::list(&agent, &resolver, &crd_kind).await
    else {
        panic!("a refusal from an API server that is not ready was not an error of the pass");
    };
    assert_eq!(kind, "CustomResourceDefinition");
    // A new watch is still waited for: not marked refused (the pass gives up at its limit).
    let watched = cache(Duration::from_secs(5));
    match watched.ensure(&resolver, &crd_kind).await {
        Err(LiveError::NotSynced(what)) => assert!(what.contains("CustomResourceDefinition")),
        other => panic!("a watch refused by an API server that is not ready gave {other:?}"),
    }
    assert_eq!(
        watched
            .live()
            .denied("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
        None
    );
}
