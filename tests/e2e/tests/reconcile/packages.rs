//! Curated packages end to end on the real API server: a management cluster whose spec asks for
//! the package controller gets a HelmChartProxy of the release bundle's chart that selects the
//! cluster itself, with the values EKS Anywhere's CLI hands to Helm (the oracle compares them
//! field by field; this test shows the agent applies them and prunes them), and a workload of
//! the same fleet gets none. Disabling packages takes the proxy away again.

use capstan_harness::run::{kubectl, kubectl_json};

use super::addons::Bed;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_management_cluster_asking_for_packages_gets_the_package_controller_chart_and_loses_it_when_disabled()
 {
    let cp = capstan_harness::shared().await;
    let bed = Bed::new("pkg", &["ws-pkg"]);
    let file = format!("clusters/{}/cluster.yaml", bed.mgmt);
    let plain = std::fs::read_to_string(bed.root().join(&file)).unwrap();
    let packages = "  packages:\n    controller:\n      tag: v0.4.5-custom\n      env: [HTTP_TIMEOUT=30s]\n      resources:\n        limits: {memory: 750Mi}\n";
    let with = plain.replacen(
        "  datacenterRef:\n",
        &format!("{packages}  datacenterRef:\n"),
        1,
    );
    assert_ne!(with, plain);
    bed.write(&file, &with);
    bed.reconcile("r1").await;

    let mk = cp.kubeconfig_path();
    let name = format!("{}-packages", bed.mgmt);
    let hcp = kubectl_json(
        mk,
        &[
            "-n",
            &bed.ns,
            "get",
            "helmchartproxies.addons.cluster.x-k8s.io",
            &name,
        ],
    );
    let spec = &hcp["spec"];
    assert_eq!(
        spec["clusterSelector"]["matchLabels"]["cluster.x-k8s.io/cluster-name"],
        bed.mgmt.as_str(),
        "{spec}"
    );
    assert_eq!(
        spec["repoURL"], "oci://public.ecr.aws/eks-anywhere",
        "{spec}"
    );
    assert_eq!(spec["chartName"], "eks-anywhere-packages", "{spec}");
    assert_eq!(spec["releaseName"], "eks-anywhere-packages", "{spec}");
    assert_eq!(spec["namespace"], "eksa-packages", "{spec}");
    assert!(
        spec["version"].as_str().unwrap().ends_with("-eks-a-104"),
        "the chart of EKS-A v0.26.1's bundle: {spec}"
    );
    let values = capstan_templates::yaml::parse_values(spec["valuesTemplate"].as_str().unwrap())
        .unwrap()
        .remove(0);
    assert_eq!(values["clusterName"], bed.mgmt.as_str(), "{values}");
    assert_eq!(values["controller"]["tag"], "v0.4.5-custom", "{values}");
    assert_eq!(
        values["controller"]["env"][0],
        serde_json::json!({"name": "HTTP_TIMEOUT", "value": "30s"})
    );
    assert_eq!(
        values["controller"]["resources"]["limits"]["memory"],
        "750Mi"
    );
    // No AWS credentials rendered: the token refresher is suspended, as EKS-A does without them.
    assert_eq!(values["cronjob"]["suspend"], true, "{values}");
    assert_eq!(values["awsSecret"]["id"], "", "{values}");
    assert_eq!(values["sourceRegistry"], "public.ecr.aws/eks-anywhere");

    // The workload (which did not ask, and may not) has no proxy of its own, and the
    // management cluster's selects only the management cluster.
    let all = kubectl_json(
        mk,
        &[
            "-n",
            &bed.ns,
            "get",
            "helmchartproxies.addons.cluster.x-k8s.io",
        ],
    );
    let names: Vec<&str> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert!(!names.contains(&"ws-pkg-packages"), "{names:?}");
    assert!(names.contains(&name.as_str()), "{names:?}");

    // Disabled: the proxy is pruned.
    let disabled = plain.replacen(
        "  datacenterRef:\n",
        "  packages: {disable: true}\n  datacenterRef:\n",
        1,
    );
    bed.write(&file, &disabled);
    bed.reconcile("r2").await;
    let (ok, out) = kubectl(
        mk,
        &[
            "-n",
            &bed.ns,
            "get",
            "helmchartproxies.addons.cluster.x-k8s.io",
            &name,
            "--ignore-not-found",
            "-o",
            "name",
        ],
    );
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "", "the proxy is gone: {out}");
}
