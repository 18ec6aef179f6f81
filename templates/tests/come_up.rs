//! What a cluster needs to come up, one test per problem found by comparing capstan's render with
//! EKS Anywhere's (issue 14). Each would fail on the renderer before the fix; the differential test
//! (`tests/e2e/tests/eksa_oracle.rs`) covers the same ground against EKS-A's own code, these name
//! each requirement on its own.

use std::path::PathBuf;

use capstan_templates::release::{ReleaseManifest, Sample};
use capstan_templates::spec::{SourceDoc, parse_cluster};
use capstan_templates::{render, yaml};
use serde_json::Value;

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBAlf8UkQwwdm0/3owGGfFx0nralmWRxinY3cBBi24tm ops@example";

fn vsphere(minor: u32, etcd: bool) -> String {
    let eksa = if minor < 30 { "v0.24.3" } else { "v0.26.1" };
    let external = if etcd {
        "  externalEtcdConfiguration:\n    count: 3\n    machineGroupRef: {kind: VSphereMachineConfig, name: etcd}\n"
    } else {
        ""
    };
    format!(
        r#"apiVersion: anywhere.eks.amazonaws.com/v1alpha1
kind: Cluster
metadata: {{name: c}}
spec:
  kubernetesVersion: "1.{minor}"
  eksaVersion: {eksa}
  controlPlaneConfiguration:
    count: 3
    endpoint: {{host: 10.0.0.10}}
    machineGroupRef: {{kind: VSphereMachineConfig, name: m}}
{external}  workerNodeGroupConfigurations:
    - name: md-0
      count: 2
      machineGroupRef: {{kind: VSphereMachineConfig, name: m}}
  datacenterRef: {{kind: VSphereDatacenterConfig, name: dc}}
  clusterNetwork:
    cniConfig: {{cilium: {{}}}}
    pods: {{cidrBlocks: [192.168.0.0/16]}}
    services: {{cidrBlocks: [10.96.0.0/12]}}
---
apiVersion: anywhere.eks.amazonaws.com/v1alpha1
kind: VSphereDatacenterConfig
metadata: {{name: dc}}
spec: {{datacenter: dc1, network: net, server: vc.example.com, thumbprint: "AA:BB"}}
---
apiVersion: anywhere.eks.amazonaws.com/v1alpha1
kind: VSphereMachineConfig
metadata: {{name: m}}
spec: {{datastore: ds, resourcePool: rp, template: ubuntu, osFamily: ubuntu, users: [{{name: capv, sshAuthorizedKeys: ["{KEY}"]}}]}}
---
apiVersion: anywhere.eks.amazonaws.com/v1alpha1
kind: VSphereMachineConfig
metadata: {{name: etcd}}
spec: {{datastore: ds, resourcePool: rp, template: ubuntu, osFamily: ubuntu, memoryMiB: 4096}}
"#
    )
}

fn render_text(text: &str) -> Vec<Value> {
    let docs: Vec<SourceDoc> = yaml::parse(text)
        .unwrap()
        .into_iter()
        .map(|doc| SourceDoc {
            file: PathBuf::from("c.yaml"),
            doc,
        })
        .collect();
    let (cluster, diags) = parse_cluster(&docs);
    let cluster = cluster.unwrap_or_else(|| panic!("{diags:#?}"));
    let release = ReleaseManifest::embedded()
        .resolve(&Sample, &cluster, None)
        .release
        .unwrap();
    render::render(&cluster, &release).unwrap()
}

fn find<'a>(objs: &'a [Value], kind: &str) -> &'a Value {
    objs.iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

fn args(v: &Value) -> Vec<(String, String)> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| {
                    (
                        x["name"].as_str().unwrap().to_string(),
                        x["value"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn arg(v: &Value, name: &str) -> Option<String> {
    args(v).into_iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

#[test]
fn kube_apiserver_gets_cloud_provider_only_below_1_33() {
    for (minor, expected) in [(31, true), (32, true), (33, false), (34, false)] {
        let kcp = find(&render_text(&vsphere(minor, false)), "KubeadmControlPlane").clone();
        let cc = &kcp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"];
        assert_eq!(
            arg(&cc["apiServer"]["extraArgs"], "cloud-provider").is_some(),
            expected,
            "1.{minor}"
        );
        // The controller manager and kubelets keep it at every version.
        assert_eq!(
            arg(&cc["controllerManager"]["extraArgs"], "cloud-provider").as_deref(),
            Some("external")
        );
    }
}

#[test]
fn vsphere_clusters_deploy_the_cloud_controller_manager() {
    let objs = render_text(&vsphere(33, false));
    let crs = find(&objs, "ClusterResourceSet");
    assert_eq!(crs["metadata"]["name"], "c-cpi");
    assert_eq!(
        crs["spec"]["clusterSelector"]["matchLabels"]["cluster.x-k8s.io/cluster-name"],
        "c"
    );
    let names: Vec<&str> = crs["spec"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "c-cloud-controller-manager",
            "c-cloud-provider-vsphere-credentials",
            "c-cpi-manifests"
        ]
    );
    let cm = objs
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "c-cpi-manifests")
        .unwrap();
    let manifests = yaml::parse_values(cm["data"]["data"].as_str().unwrap()).unwrap();
    let ds = manifests.iter().find(|m| m["kind"] == "DaemonSet").unwrap();
    let c = &ds["spec"]["template"]["spec"]["containers"][0];
    assert!(
        c["image"]
            .as_str()
            .unwrap()
            .contains("cloud-provider-vsphere/cpi/manager")
    );
    // It runs on uninitialized nodes, which is what it is there to initialise.
    assert!(
        ds["spec"]["template"]["spec"]["tolerations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["key"] == "node.cloudprovider.kubernetes.io/uninitialized")
    );
    let conf = manifests
        .iter()
        .find(|m| m["kind"] == "ConfigMap" && m["metadata"]["name"] == "vsphere-cloud-config")
        .unwrap();
    let conf = &yaml::parse_values(conf["data"]["vsphere.conf"].as_str().unwrap()).unwrap()[0];
    assert_eq!(conf["vcenter"]["vc.example.com"]["datacenters"][0], "dc1");
}

#[test]
fn kube_vip_reads_super_admin_conf_on_the_first_node_from_1_29() {
    for (minor, expected) in [(28, false), (29, true), (33, true)] {
        let kcp = find(&render_text(&vsphere(minor, false)), "KubeadmControlPlane").clone();
        let cmds: Vec<String> = kcp["spec"]["kubeadmConfigSpec"]["preKubeadmCommands"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            cmds.iter().any(|c| c.contains("/run/kubeadm/kubeadm.yaml")
                && c.contains("super-admin.conf")
                && c.contains("kube-vip.yaml")),
            expected,
            "1.{minor}: {cmds:#?}"
        );
    }
}

/// A custom CNI (EKS Anywhere's `cilium.skipUpgrade`): Cilium is installed once, for the cluster
/// to come up, and then left to whoever replaces or upgrades it.
#[test]
fn a_custom_cni_gets_cilium_installed_once() {
    let strategy = |text: &str| {
        find(&render_text(text), "HelmChartProxy")["spec"]["reconcileStrategy"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let plain = vsphere(33, false);
    assert_eq!(strategy(&plain), "Continuous");
    let custom = plain.replace(
        "cniConfig: {cilium: {}}",
        "cniConfig: {cilium: {skipUpgrade: true}}",
    );
    assert_ne!(custom, plain);
    assert_eq!(strategy(&custom), "InstallOnce");
}

#[test]
fn cilium_values_can_be_pulled_and_run() {
    let objs = render_text(&vsphere(33, false));
    let hcp = find(&objs, "HelmChartProxy");
    let values = &yaml::parse_values(hcp["spec"]["valuesTemplate"].as_str().unwrap()).unwrap()[0];
    let op = values["operator"]["image"]["repository"].as_str().unwrap();
    assert!(
        !op.ends_with("-generic"),
        "the chart appends -generic itself: {op}"
    );
    assert_eq!(values["cni"]["chainingMode"], "portmap");
    assert_eq!(values["envoy"]["enabled"], false);
    let tolerations: Vec<&str> = values["operator"]["tolerations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    assert!(tolerations.contains(&"node-role.kubernetes.io/control-plane"));
    assert!(tolerations.contains(&"node.kubernetes.io/not-ready"));
}

#[test]
fn control_planes_and_nodes_are_hardened_as_eks_anywhere_does() {
    let objs = render_text(&vsphere(33, true));
    let kcp = find(&objs, "KubeadmControlPlane");
    let spec = &kcp["spec"]["kubeadmConfigSpec"];
    let cc = &spec["clusterConfiguration"];
    let cipher = "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256";
    for component in ["apiServer", "controllerManager", "scheduler"] {
        let a = &cc[component]["extraArgs"];
        assert_eq!(
            arg(a, "tls-cipher-suites").as_deref(),
            Some(cipher),
            "{component}"
        );
        assert_eq!(arg(a, "profiling").as_deref(), Some("false"), "{component}");
    }
    let api = &cc["apiServer"];
    assert_eq!(
        arg(&api["extraArgs"], "audit-policy-file").as_deref(),
        Some("/etc/kubernetes/audit-policy.yaml")
    );
    assert_eq!(
        arg(&api["extraArgs"], "audit-log-path").as_deref(),
        Some("/var/log/kubernetes/api-audit.log")
    );
    let volumes: Vec<&str> = api["extraVolumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(volumes, ["audit-policy", "audit-log-dir"]);
    let files = spec["files"].as_array().unwrap();
    let policy = files
        .iter()
        .find(|f| f["path"] == "/etc/kubernetes/audit-policy.yaml")
        .unwrap();
    assert!(policy["content"].as_str().unwrap().contains("kind: Policy"));
    let kubelet = &spec["initConfiguration"]["nodeRegistration"]["kubeletExtraArgs"];
    assert_eq!(arg(kubelet, "tls-cipher-suites").as_deref(), Some(cipher));
    assert_eq!(arg(kubelet, "read-only-port").as_deref(), Some("0"));
    assert_eq!(arg(kubelet, "anonymous-auth").as_deref(), Some("false"));
    // kube-vip's lease timings.
    let vip = files
        .iter()
        .find(|f| f["path"] == "/etc/kubernetes/manifests/kube-vip.yaml")
        .unwrap();
    let pod = &yaml::parse_values(vip["content"].as_str().unwrap()).unwrap()[0];
    let env: Vec<(String, String)> = pod["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["value"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (k, v) in [
        ("vip_leaseduration", "15"),
        ("vip_renewdeadline", "10"),
        ("vip_retryperiod", "2"),
    ] {
        assert!(
            env.contains(&(k.to_string(), v.to_string())),
            "{k}: {env:?}"
        );
    }
    // External etcd on vSphere: hostnames from cloud-init, cipher suites, a memory floor.
    let etcd = find(&objs, "EtcdadmCluster");
    let e = &etcd["spec"]["etcdadmConfigSpec"];
    assert_eq!(e["cipherSuites"], cipher);
    assert!(
        e["preEtcdadmCommands"][0]
            .as_str()
            .unwrap()
            .starts_with("hostname ")
    );
    let etcd_mt = objs
        .iter()
        .find(|o| {
            o["kind"] == "VSphereMachineTemplate"
                && o["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .starts_with("c-etcd-")
        })
        .unwrap();
    assert_eq!(etcd_mt["spec"]["template"]["spec"]["memoryMiB"], 8192);
    // Stacked etcd (another cluster) takes the cipher suites too.
    let stacked = find(&render_text(&vsphere(33, false)), "KubeadmControlPlane").clone();
    let local = &stacked["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["etcd"]["local"];
    assert_eq!(
        arg(&local["extraArgs"], "cipher-suites").as_deref(),
        Some(cipher)
    );
}
