//! Everything capstan renders is admitted by a real kube-apiserver with the upstream CRDs
//! (Cluster API v1.14, CAPD, CAPV, CAAPH, etcdadm, EKS Anywhere) under strict field validation:
//! every example cluster and every scaffolded variant (provider x etcd topology x autoscaling) is
//! server-side applied in dry-run mode. And the check can fail: a template broken on purpose
//! (an unknown field, a wrong type) is rejected.

use std::path::PathBuf;

use capstan::k8s::dry_run_all;
use capstan_e2e::example_fleet;
use capstan_layout::scaffold::{self, ClusterRequest};
use capstan_layout::{Tree, load};
use capstan_templates::release::ReleaseManifest;
use capstan_templates::render;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

async fn ensure_namespace(client: &kube::Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
}

async fn admit(objects: &[Value]) -> Vec<String> {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    for o in objects {
        if let Some(ns) = o.pointer("/metadata/namespace").and_then(Value::as_str) {
            ensure_namespace(&client, ns).await;
        }
    }
    dry_run_all(&client, objects)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.to_string())
        .collect()
}

#[tokio::test]
async fn every_example_object_is_admitted_strictly() {
    let fleet = load(&Tree::from_dir(&example_fleet()).unwrap());
    let mut total = 0;
    for c in &fleet.clusters {
        let objects = c.objects.as_ref().unwrap().values();
        total += objects.len();
        let errors = admit(&objects).await;
        assert!(
            errors.is_empty(),
            "cluster {} has objects the API server rejects:\n{}",
            c.name,
            errors.join("\n")
        );
    }
    assert!(
        total > 50,
        "expected the whole example fleet, got {total} objects"
    );
}

/// Every scaffolded shape: provider (docker, vSphere, Nutanix) x etcd topology x autoscaling.
fn variants() -> Tree {
    let mut tree = Tree::new();
    let mgmt = ClusterRequest {
        name: "mgmt".into(),
        provider: "docker".into(),
        pod_cidr: Some("192.168.0.0/16".into()),
        service_cidr: Some("10.96.0.0/12".into()),
        ..Default::default()
    };
    for (p, t) in scaffold::plan(&tree, &mgmt).unwrap().files {
        tree.insert(p, t);
    }
    let mut i = 0;
    for provider in ["docker", "vsphere", "nutanix", "tinkerbell"] {
        for external in [false, true] {
            // EKS Anywhere (and capstan) refuse external etcd on bare metal.
            if provider == "tinkerbell" && external {
                continue;
            }
            for autoscale in [false, true] {
                i += 1;
                let mut values = json!({"workerGroups": [{"name": "md-0", "count": 2}]});
                if autoscale {
                    values["workerGroups"] = json!([{"name": "md-0", "count": 1}, {"name": "auto", "autoscaling": {"minCount": 1, "maxCount": 5}, "labels": {"pool": "auto"}, "taints": [{"key": "pool", "value": "auto", "effect": "NoSchedule"}]}]);
                }
                if provider == "vsphere" {
                    values["vsphere"] = json!({"server": "vc.example", "datacenter": "dc1", "network": "VM Network", "datastore": "ds1", "resourcePool": "rp", "template": "ubuntu", "sshAuthorizedKey": "ssh-ed25519 AAAA x"});
                }
                if provider == "nutanix" {
                    values["nutanix"] = json!({"endpoint": "prism.example", "image": "ubuntu-2204", "cluster": "pe-1", "subnet": "vm-net", "sshAuthorizedKey": "ssh-ed25519 AAAA x"});
                    // Without a key (the scaffold's default): no SSH access, and nothing the
                    // CRDs refuse.
                    if external {
                        values["nutanix"]["sshAuthorizedKey"] = json!("");
                    }
                }
                if provider == "tinkerbell" {
                    values["tinkerbell"] = json!({"tinkerbellIP": "10.0.1.20", "osImageURL": "https://images.example/ubuntu.gz", "sshAuthorizedKey": "ssh-ed25519 AAAA x"});
                }
                let req = ClusterRequest {
                    name: format!("v{i}-{provider}"),
                    management: Some("mgmt".into()),
                    provider: provider.into(),
                    control_plane_count: Some(if external { 2 } else { 3 }),
                    external_etcd: external.then_some(3),
                    pod_cidr: Some(format!("172.{}.0.0/16", 15 + i)),
                    service_cidr: Some(format!("10.{}.0.0/16", 111 + i)),
                    endpoint_host: (provider != "docker").then(|| format!("10.0.0.{i}")),
                    values: Some(values),
                    ..Default::default()
                };
                for (p, t) in scaffold::plan(&tree, &req).unwrap().files {
                    tree.insert(p, t);
                }
            }
        }
    }
    tree
}

#[tokio::test]
async fn every_scaffolded_variant_is_admitted_strictly() {
    let fleet = load(&variants());
    assert!(!fleet.has_errors(), "{:#?}", fleet.all_diagnostics());
    assert_eq!(fleet.clusters.len(), 15);
    for c in &fleet.clusters {
        let errors = admit(&c.objects.as_ref().unwrap().values()).await;
        assert!(
            errors.is_empty(),
            "variant {} rejected:\n{}",
            c.name,
            errors.join("\n")
        );
    }
}

/// Every spec of the differential corpus (every accepted field: proxy, registry mirror, OIDC,
/// KMS encryption, kubelet patches, failure domains, the vSphere CPI, ...) at the oldest and the
/// newest Kubernetes version: each rendered object is admitted.
#[tokio::test]
async fn every_corpus_spec_is_admitted_strictly() {
    use capstan_e2e::oracle;
    use capstan_templates::release::Sample;
    use capstan_templates::spec::{SourceDoc, parse_cluster};
    let mut total = 0;
    for spec in oracle::corpus_specs() {
        for (minor, eksa) in [(29, "v0.24.3"), (36, "v0.26.1")] {
            let text = oracle::with_versions(&spec.text, minor, spec.worker_lag, eksa);
            let docs: Vec<SourceDoc> = capstan_templates::yaml::parse(&text)
                .unwrap()
                .into_iter()
                .map(|doc| SourceDoc {
                    file: PathBuf::from("c.yaml"),
                    doc,
                })
                .collect();
            let (cluster, diags) = parse_cluster(&docs);
            let cluster = cluster.unwrap_or_else(|| panic!("{}: {diags:#?}", spec.name));
            let release = ReleaseManifest::embedded()
                .resolve(&Sample, &cluster, None)
                .release
                .unwrap();
            let objects = render::render(&cluster, &release).unwrap();
            total += objects.len();
            let errors = admit(&objects).await;
            assert!(
                errors.is_empty(),
                "{} at 1.{minor} rejected:\n{}",
                spec.name,
                errors.join("\n")
            );
        }
    }
    assert!(
        total > 300,
        "expected the whole corpus, got {total} objects"
    );
}

/// The same check catches a broken template: the test above can fail.
#[tokio::test]
async fn a_broken_template_is_rejected() {
    let fleet = load(&Tree::from_dir(&example_fleet()).unwrap());
    let entry = fleet.cluster("dev").unwrap();
    let cluster = entry.cluster.as_ref().unwrap();
    let release = entry.release.clone().unwrap();
    let _ = ReleaseManifest::embedded();
    let breakages = [
        (
            "unknown field",
            "  loadBalancer:\n",
            "  loadBalancr:\n",
            "loadBalancr",
        ),
        (
            "wrong type",
            "  replicas: {{ cp.count }}\n",
            "  replicas: \"three\"\n",
            "replicas",
        ),
    ];
    for (what, from, to, needle) in breakages {
        let mut templates: Vec<(&'static str, &'static str)> = Vec::new();
        let mut changed = false;
        for (name, src) in render_templates() {
            if src.contains(from) {
                changed = true;
                templates.push((name, Box::leak(src.replacen(from, to, 1).into_boxed_str())));
            } else {
                templates.push((name, src));
            }
        }
        assert!(changed, "{what}: no template contains {from:?}");
        let env = render::environment_with(&templates).unwrap();
        let objects = render::render_with(&env, cluster, &release).unwrap();
        let errors = admit(&objects).await;
        assert!(
            errors.iter().any(|e| e.contains(needle)),
            "{what}: expected a rejection naming `{needle}`, got {errors:?}"
        );
    }
}

/// The embedded provider templates, read from the source tree (the same files the crate embeds).
fn render_templates() -> Vec<(&'static str, &'static str)> {
    let root = capstan_e2e::repo_root().join("templates/providers");
    let mut out = Vec::new();
    for dir in ["common", "docker", "vsphere"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p: PathBuf = e.unwrap().path();
            let name = format!("{dir}/{}", p.file_name().unwrap().to_str().unwrap());
            out.push((
                &*Box::leak(name.into_boxed_str()),
                &*Box::leak(std::fs::read_to_string(&p).unwrap().into_boxed_str()),
            ));
        }
    }
    out
}

/// What `capstan hardware import` writes (a Hardware with and without a BMC, VLAN-tagged or not,
/// labelled for a cluster; the Rufio Machine; the BMC Secret as it is once decrypted) is admitted
/// by Tinkerbell's and Rufio's CRDs (the versions of versions.env), strictly.
#[tokio::test]
async fn imported_hardware_is_admitted_strictly() {
    use capstan_layout::hardware;
    let machines = hardware::read_csv(
        "hostname,bmc_ip,bmc_username,bmc_password,mac,ip_address,netmask,gateway,nameservers,labels,disk,vlan_id
cp-1,192.168.0.10,Admin,s3cret,00:00:00:00:00:01,10.10.10.10,255.255.255.0,10.10.10.1,1.1.1.1|8.8.8.8,type=cp,/dev/sda,
worker-1,,,,00:00:00:00:00:02,10.10.10.11,255.255.255.0,10.10.10.1,1.1.1.1,type=worker,/dev/nvme0n1,42
",
    )
    .unwrap();
    let mut objects = Vec::new();
    for m in &machines {
        objects.push(hardware::hardware(m, "hw-ns", Some("dev")));
        objects.extend(hardware::bmc_machine(m, "hw-ns"));
        objects.extend(hardware::bmc_secret(m, "hw-ns"));
    }
    assert_eq!(objects.len(), 4);
    let errors = admit(&objects).await;
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}
