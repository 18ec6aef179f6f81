//! Golden (snapshot) tests: the rendered output of every example cluster is compared byte for
//! byte with `tests/e2e/golden/<cluster>.yaml`. A template or model change that alters output
//! shows up as a diff to review; regenerate with
//! `CAPSTAN_UPDATE_GOLDEN=1 cargo test -p capstan-e2e --test corpus -- golden::`.
//! The same objects, as canonical JSON one per line, are the dictionary the agent compresses the
//! objects it holds against (`templates/src/json_text.dict`); it is checked and rewritten here too.

use std::fs;

use capstan_e2e::{example_fleet, repo_root};
use capstan_layout::{Tree, load};
use capstan_templates::yaml;

#[test]
fn example_fleet_renders_as_recorded() {
    let fleet = load(&Tree::from_dir(&example_fleet()).unwrap());
    assert!(
        !fleet.has_errors(),
        "example fleet must validate: {:#?}",
        fleet.all_diagnostics()
    );
    assert_eq!(fleet.clusters.len(), 6);
    let dir = repo_root().join("tests/e2e/golden");
    let update = std::env::var_os("CAPSTAN_UPDATE_GOLDEN").is_some();
    let mut mismatches = Vec::new();
    let mut dictionary = String::new();
    for c in &fleet.clusters {
        for o in c.objects.as_ref().unwrap().iter() {
            dictionary.push_str(&o.json());
            dictionary.push('\n');
        }
        let text = yaml::to_string_multi(&c.objects.as_ref().unwrap().values());
        let path = dir.join(format!("{}.yaml", c.name));
        if update {
            fs::write(&path, &text).unwrap();
            continue;
        }
        let want = fs::read_to_string(&path).unwrap_or_else(|_| {
            panic!(
                "missing golden file {}; run with CAPSTAN_UPDATE_GOLDEN=1",
                path.display()
            )
        });
        if want != text {
            let first = want
                .lines()
                .zip(text.lines())
                .enumerate()
                .find(|(_, (a, b))| a != b);
            mismatches.push(format!(
                "{}: first difference at {:?}",
                c.name,
                first.map(|(i, (a, b))| (i + 1, a.to_string(), b.to_string()))
            ));
        }
    }
    let dict_path = repo_root().join("templates/src/json_text.dict");
    if update {
        fs::write(&dict_path, &dictionary).unwrap();
    } else if capstan_templates::json_text::DICTIONARY != dictionary.as_bytes() {
        mismatches.push(format!(
            "{} is not the example fleet's objects; run with CAPSTAN_UPDATE_GOLDEN=1",
            dict_path.display()
        ));
    }
    assert!(
        mismatches.is_empty(),
        "rendered output differs from golden files:\n{}",
        mismatches.join("\n")
    );
}

#[test]
fn rendering_twice_is_byte_identical() {
    let tree = Tree::from_dir(&example_fleet()).unwrap();
    let a = load(&tree);
    let b = load(&tree);
    for (x, y) in a.clusters.iter().zip(&b.clusters) {
        assert_eq!(
            yaml::to_string_multi(&x.objects.as_ref().unwrap().values()),
            yaml::to_string_multi(&y.objects.as_ref().unwrap().values())
        );
    }
}

#[test]
fn rendered_output_is_what_the_issue_asks_for() {
    let fleet = load(&Tree::from_dir(&example_fleet()).unwrap());
    let prod = fleet
        .cluster("prod")
        .unwrap()
        .objects
        .as_ref()
        .unwrap()
        .values();
    let kinds: Vec<&str> = prod.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    for k in [
        "Cluster",
        "KubeadmControlPlane",
        "VSphereCluster",
        "VSphereMachineTemplate",
        "MachineDeployment",
        "KubeadmConfigTemplate",
        "MachineHealthCheck",
        "EtcdadmCluster",
        "HelmChartProxy",
        "VSphereDatacenterConfig",
        "VSphereMachineConfig",
    ] {
        assert!(kinds.contains(&k), "prod renders no {k}: {kinds:?}");
    }
    // The autoscaled group has no replicas and carries the autoscaler annotations.
    let burst = prod
        .iter()
        .find(|o| o["kind"] == "MachineDeployment" && o["metadata"]["name"] == "prod-burst")
        .unwrap();
    assert!(burst["spec"].get("replicas").is_none());
    assert_eq!(
        burst["metadata"]["annotations"]["cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"],
        "10"
    );
    let general = prod
        .iter()
        .find(|o| o["kind"] == "MachineDeployment" && o["metadata"]["name"] == "prod-general")
        .unwrap();
    assert_eq!(general["spec"]["replicas"], 3);
    // Credentials are referenced by name, never rendered.
    let vc = prod.iter().find(|o| o["kind"] == "VSphereCluster").unwrap();
    assert_eq!(
        vc["spec"]["identityRef"]["name"],
        "prod-vsphere-credentials"
    );
    // No Secret carries data from the repository: the only rendered Secret is the CPI's
    // ServiceAccount manifest; the CPI's vCenter credentials are a Secret the admin keeps.
    for s in prod.iter().filter(|o| o["kind"] == "Secret") {
        assert!(s.get("data").is_none(), "{s}");
        assert_eq!(s["type"], "addons.cluster.x-k8s.io/resource-set");
        assert!(
            !s["stringData"]["data"]
                .as_str()
                .unwrap()
                .contains("password")
        );
    }
    let crs = prod
        .iter()
        .find(|o| o["kind"] == "ClusterResourceSet")
        .unwrap();
    assert!(
        crs["spec"]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "prod-cloud-provider-vsphere-credentials")
    );
    // Core CAPI in v1beta2; CAPV and etcdadm in v1beta1.
    for o in prod {
        let (api, kind) = (
            o["apiVersion"].as_str().unwrap(),
            o["kind"].as_str().unwrap(),
        );
        match kind {
            "Cluster" if api.starts_with("cluster.x-k8s.io") => {
                assert_eq!(api, "cluster.x-k8s.io/v1beta2")
            }
            "KubeadmControlPlane"
            | "MachineDeployment"
            | "MachineHealthCheck"
            | "KubeadmConfigTemplate" => assert!(api.ends_with("/v1beta2"), "{kind} {api}"),
            "VSphereCluster" | "VSphereMachineTemplate" | "EtcdadmCluster" => {
                assert!(api.ends_with("/v1beta1"), "{kind} {api}")
            }
            _ => {}
        }
    }
    // The management cluster carries the EKSARelease objects of every release its fleet uses.
    let mgmt = fleet
        .cluster("mgmt")
        .unwrap()
        .objects
        .as_ref()
        .unwrap()
        .values();
    let releases: Vec<&str> = mgmt
        .iter()
        .filter(|o| o["kind"] == "EKSARelease")
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(releases, vec!["eksa-v0-25-2", "eksa-v0-26-1"]);
    // Every object of a workload lives in its cluster's namespace.
    for o in fleet
        .cluster("dev")
        .unwrap()
        .objects
        .as_ref()
        .unwrap()
        .values()
    {
        assert_eq!(o["metadata"]["namespace"], "team-dev", "{}", o["kind"]);
    }
}

#[test]
fn the_render_cache_rerenders_only_changed_clusters() {
    let mut tree = Tree::from_dir(&example_fleet()).unwrap();
    let mut cache = capstan_layout::RenderCache::default();
    let first = capstan_layout::load_cached(&tree, &mut cache);
    assert_eq!((cache.hits, cache.misses), (0, 6));
    let again = capstan_layout::load_cached(&tree, &mut cache);
    assert_eq!((cache.hits, cache.misses), (6, 0));
    for (a, b) in first.clusters.iter().zip(&again.clusters) {
        assert_eq!(a.objects, b.objects);
    }
    let path = std::path::PathBuf::from("clusters/mgmt/workload-clusters/dev/cluster.yaml");
    let text = match &tree.entries[&path] {
        capstan_layout::tree::Entry::File(b) => String::from_utf8(b.clone()).unwrap(),
        _ => unreachable!(),
    };
    tree.insert(path, text.replace("count: 2", "count: 5"));
    let changed = capstan_layout::load_cached(&tree, &mut cache);
    assert_eq!((cache.hits, cache.misses), (5, 1));
    let md = changed
        .cluster("dev")
        .unwrap()
        .objects
        .as_ref()
        .unwrap()
        .values()
        .iter()
        .find(|o| o["kind"] == "MachineDeployment")
        .unwrap()
        .clone();
    assert_eq!(md["spec"]["replicas"], 5);
    assert_eq!(
        changed.cluster("prod").unwrap().objects,
        first.cluster("prod").unwrap().objects
    );
}
