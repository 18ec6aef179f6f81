//! The rehearsal's stand-in (`capstan_templates::rehearsal`): a vSphere cluster with external
//! etcd, three control-plane machines, an autoscaled and a surge-rolled worker group, a proxy and
//! a registry mirror becomes a cluster on CAPD's in-memory backend of the same shape, which
//! validation accepts, with everything that could not carry over listed at its file and line.

use std::path::PathBuf;

use capstan_templates::rehearsal::{self, NotCarried};
use capstan_templates::spec::{self, DockerBackend, Provider, SourceDoc};

const CLUSTER: &str = r#"apiVersion: anywhere.eks.amazonaws.com/v1alpha1
kind: Cluster
metadata:
  name: prod-1
  namespace: team-a
spec:
  kubernetesVersion: "1.33"
  managementCluster:
    name: mgmt
  controlPlaneConfiguration:
    count: 3
    endpoint:
      host: 10.20.0.10
    machineGroupRef:
      kind: VSphereMachineConfig
      name: prod-1-cp
    upgradeRolloutStrategy:
      rollingUpdate:
        maxSurge: 1
  externalEtcdConfiguration:
    count: 3
    machineGroupRef:
      kind: VSphereMachineConfig
      name: prod-1-etcd
  workerNodeGroupConfigurations:
    - name: general
      count: 4
      machineGroupRef:
        kind: VSphereMachineConfig
        name: prod-1-workers
      upgradeRolloutStrategy:
        type: RollingUpdate
        rollingUpdate:
          maxSurge: 2
          maxUnavailable: 1
    - name: batch
      autoscalingConfiguration:
        minCount: 1
        maxCount: 5
      kubernetesVersion: "1.32"
      machineGroupRef:
        kind: VSphereMachineConfig
        name: prod-1-workers
  datacenterRef:
    kind: VSphereDatacenterConfig
    name: prod-1
  clusterNetwork:
    cniConfig:
      cilium: {}
    pods:
      cidrBlocks: [192.168.0.0/16]
    services:
      cidrBlocks: [10.96.0.0/12]
  proxyConfiguration:
    httpProxy: http://proxy.corp:3128
    httpsProxy: http://proxy.corp:3128
    noProxy: [10.0.0.0/8]
  registryMirrorConfiguration:
    endpoint: mirror.corp
    port: "443"
"#;

const DATACENTER: &str = r#"apiVersion: anywhere.eks.amazonaws.com/v1alpha1
kind: VSphereDatacenterConfig
metadata:
  name: prod-1
  namespace: team-a
spec:
  server: vcenter.corp
  datacenter: dc1
  network: /dc1/network/prod
  thumbprint: "AB:CD"
"#;

fn machine(name: &str) -> String {
    format!(
        r#"apiVersion: anywhere.eks.amazonaws.com/v1alpha1
kind: VSphereMachineConfig
metadata:
  name: {name}
  namespace: team-a
spec:
  datastore: /dc1/datastore/ds1
  folder: /dc1/vm/prod
  resourcePool: /dc1/host/cluster1/Resources/prod
  template: /dc1/vm/templates/ubuntu-2204-kube-v1.33
  numCPUs: 4
  memoryMiB: 8192
  diskGiB: 50
  osFamily: ubuntu
"#
    )
}

/// The documents of a cluster directory, each file parsed as the layout reads it.
fn docs(files: &[(&str, String)]) -> Vec<SourceDoc> {
    files
        .iter()
        .flat_map(|(file, text)| {
            capstan_templates::yaml::parse(text)
                .unwrap()
                .into_iter()
                .map(move |doc| SourceDoc {
                    file: PathBuf::from(file),
                    doc,
                })
        })
        .collect()
}

fn directory() -> Vec<SourceDoc> {
    let dir = "clusters/mgmt/workload-clusters/prod-1";
    let machines = ["prod-1-cp", "prod-1-etcd", "prod-1-workers"]
        .map(machine)
        .join("---\n");
    docs(&[
        (&format!("{dir}/cluster.yaml"), CLUSTER.to_string()),
        (&format!("{dir}/datacenter.yaml"), DATACENTER.to_string()),
        (&format!("{dir}/machines.yaml"), machines),
    ])
}

#[test]
fn a_vsphere_cluster_keeps_its_shape_on_the_in_memory_backend() {
    let real = directory();
    let (cluster, diags) = spec::parse_cluster(&real);
    let real = cluster.unwrap_or_else(|| panic!("the vSphere spec is valid: {diags:#?}"));
    assert!(matches!(real.provider, Provider::VSphere(_)));

    let stand_in = rehearsal::in_memory(&directory());
    // Written out and read again, as the rehearsal's directory would be.
    let text: Vec<(String, String)> = stand_in
        .docs
        .iter()
        .map(|d| {
            (
                d.file.display().to_string(),
                capstan_templates::yaml::to_string(&d.doc.value),
            )
        })
        .collect();
    let reread = docs(
        &text
            .iter()
            .map(|(f, t)| (f.as_str(), t.clone()))
            .collect::<Vec<_>>(),
    );
    let (cluster, diags) = spec::parse_cluster(&reread);
    let rehearsed =
        cluster.unwrap_or_else(|| panic!("validation accepts the stand-in: {diags:#?}"));
    assert!(
        diags.is_empty(),
        "no warning either (nothing ignored): {diags:#?}"
    );

    // The same shape.
    assert!(matches!(
        rehearsed.provider,
        Provider::Docker(DockerBackend::InMemory)
    ));
    assert_eq!(
        (&rehearsed.name, &rehearsed.namespace, &rehearsed.management),
        (&real.name, &real.namespace, &real.management)
    );
    assert_eq!(rehearsed.kubernetes_version, real.kubernetes_version);
    assert_eq!(rehearsed.control_plane.count, 3);
    assert_eq!(
        rehearsed.control_plane.max_surge,
        real.control_plane.max_surge
    );
    assert_eq!(
        rehearsed.etcd.as_ref().map(|e| e.count),
        real.etcd.as_ref().map(|e| e.count)
    );
    let shape = |c: &spec::Cluster| -> Vec<_> {
        c.workers
            .iter()
            .map(|w| {
                (
                    w.name.clone(),
                    w.replicas,
                    w.autoscaling,
                    w.kubernetes_version,
                    w.rollout,
                    w.labels.clone(),
                )
            })
            .collect()
    };
    assert_eq!(shape(&rehearsed), shape(&real));
    assert_eq!(rehearsed.workers.len(), 2);
    assert_eq!(rehearsed.network.pods, real.network.pods);
    assert_eq!(rehearsed.network.services, real.network.services);
    assert!(rehearsed.proxy.is_none() && rehearsed.registry_mirror.is_none());

    // What did not carry over, each where it was written.
    let said: Vec<String> = stand_in
        .not_carried
        .iter()
        .map(NotCarried::to_string)
        .collect();
    let cluster_yaml = "clusters/mgmt/workload-clusters/prod-1/cluster.yaml";
    let line = |needle: &str, nth: usize| {
        CLUSTER
            .lines()
            .enumerate()
            .filter(|(_, l)| l.trim_start().starts_with(needle))
            .nth(nth)
            .map(|(i, _)| i + 1)
            .unwrap()
    };
    for expected in [
        format!(
            "{cluster_yaml}:{}: the control plane's virtual IP 10.20.0.10 (kube-vip)",
            line("endpoint:", 0)
        ),
        format!(
            "{cluster_yaml}:{}: the control-plane machines' machine config",
            line("machineGroupRef:", 0)
        ),
        format!(
            "{cluster_yaml}:{}: the etcd machines' machine config",
            line("machineGroupRef:", 1)
        ),
        format!(
            "{cluster_yaml}:{}: worker group general's machine config",
            line("machineGroupRef:", 2)
        ),
        format!(
            "{cluster_yaml}:{}: worker group batch's machine config",
            line("machineGroupRef:", 3)
        ),
        format!(
            "{cluster_yaml}:{}: the machines' HTTP(S) proxy",
            line("proxyConfiguration:", 0)
        ),
        format!(
            "{cluster_yaml}:{}: the machines' registry mirror",
            line("registryMirrorConfiguration:", 0)
        ),
    ] {
        assert!(said.contains(&expected), "{expected}\nnot in {said:#?}");
    }
    let datacenter = said.iter().find(|s| s.contains("datacenter.yaml")).unwrap();
    assert!(
        datacenter.ends_with(
            "vSphere datacenter: vCenter vcenter.corp, datacenter dc1, network /dc1/network/prod"
        ),
        "{datacenter}"
    );
    let machines: Vec<&String> = said
        .iter()
        .filter(|s| s.contains("machines.yaml"))
        .collect();
    assert_eq!(machines.len(), 3, "{machines:#?}");
    assert!(
        machines[0].contains(
            "machine config prod-1-cp (VM template /dc1/vm/templates/ubuntu-2204-kube-v1.33, 4 vCPUs, 8192 MiB, 50 GiB disk, OS ubuntu"
        ),
        "{}",
        machines[0]
    );
    assert_eq!(said.len(), 7 + 1 + 3, "nothing else: {said:#?}");
}

#[test]
fn a_docker_cluster_moves_to_the_in_memory_backend_and_says_so() {
    let text = CLUSTER
        .replace(
            "kind: VSphereDatacenterConfig",
            "kind: DockerDatacenterConfig",
        )
        .split("  proxyConfiguration:")
        .next()
        .unwrap()
        .replace("    endpoint:\n      host: 10.20.0.10\n", "");
    let dc = "apiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: DockerDatacenterConfig\nmetadata:\n  name: prod-1\n  namespace: team-a\nspec: {}\n";
    let stand_in = rehearsal::in_memory(&docs(&[
        ("c/cluster.yaml", text),
        ("c/dc.yaml", dc.to_string()),
        (
            "c/extra.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  namespace: team-a\ndata:\n  a: b\n"
                .to_string(),
        ),
    ]));
    let said: Vec<String> = stand_in
        .not_carried
        .iter()
        .map(NotCarried::to_string)
        .collect();
    assert!(
        said.contains(
            &"c/dc.yaml:3: machines as Docker containers: the in-memory backend simulates them"
                .to_string()
        ),
        "{said:#?}"
    );
    // (The machine configs a docker cluster names were ignored by its provider already.)
    assert_eq!(said.len(), 5, "{said:#?}");
    // Objects that are not EKS Anywhere's stay as they are.
    let extra = stand_in
        .docs
        .iter()
        .find(|d| d.doc.value["kind"] == "ConfigMap")
        .unwrap();
    assert_eq!(extra.doc.value["data"]["a"], "b");
    let (cluster, diags) = spec::parse_cluster(&stand_in.docs);
    let cluster = cluster.unwrap_or_else(|| panic!("{diags:#?}"));
    assert!(matches!(
        cluster.provider,
        Provider::Docker(DockerBackend::InMemory)
    ));
    // An in-memory cluster stays as it is, and nothing is said.
    let again = rehearsal::in_memory(&stand_in.docs);
    assert!(again.not_carried.is_empty(), "{:#?}", again.not_carried);
}

const NUTANIX: &str = r#"apiVersion: anywhere.eks.amazonaws.com/v1alpha1
kind: Cluster
metadata:
  name: edge-1
spec:
  kubernetesVersion: "1.33"
  managementCluster:
    name: mgmt
  controlPlaneConfiguration:
    count: 3
    endpoint:
      host: 10.30.0.10
    machineGroupRef:
      kind: NutanixMachineConfig
      name: edge-1-cp
  workerNodeGroupConfigurations:
    - name: md-0
      count: 2
      machineGroupRef:
        kind: NutanixMachineConfig
        name: edge-1-cp
  datacenterRef:
    kind: NutanixDatacenterConfig
    name: edge-1
  clusterNetwork:
    cniConfig:
      cilium: {}
    pods:
      cidrBlocks: [192.168.0.0/16]
    services:
      cidrBlocks: [10.96.0.0/12]
---
apiVersion: anywhere.eks.amazonaws.com/v1alpha1
kind: NutanixDatacenterConfig
metadata:
  name: edge-1
spec:
  endpoint: prism.corp
  port: 9440
  credentialRef: {kind: Secret, name: nutanix-credentials}
  failureDomains:
    - name: pe1
      cluster: {type: name, name: pe-1}
      subnets: [{type: name, name: vlan-10}]
      workerMachineGroups: [md-0]
    - name: pe2
      cluster: {type: uuid, uuid: 0005b0f4-0000-0000-0000-000000000002}
      subnets: [{type: name, name: vlan-20}]
      workerMachineGroups: [md-0]
---
apiVersion: anywhere.eks.amazonaws.com/v1alpha1
kind: NutanixMachineConfig
metadata:
  name: edge-1-cp
spec:
  osFamily: ubuntu
  vcpuSockets: 2
  vcpusPerSocket: 1
  memorySize: 8Gi
  systemDiskSize: 40Gi
  image: {type: name, name: ubuntu-2204-kube-v1.33}
  cluster: {type: name, name: pe-1}
  subnet: {type: uuid, uuid: 9f6b7c1e-0000-0000-0000-000000000010}
"#;

/// A Nutanix cluster is rehearsed on the in-memory backend with its shape, and Prism Central,
/// the failure domains and the machine config (its image, Prism Element cluster and subnet) are
/// listed at their lines.
#[test]
fn a_nutanix_cluster_keeps_its_shape_on_the_in_memory_backend() {
    let file = "clusters/mgmt/workload-clusters/edge-1/cluster.yaml";
    let real_docs = docs(&[(file, NUTANIX.to_string())]);
    let (cluster, diags) = spec::parse_cluster(&real_docs);
    let real = cluster.unwrap_or_else(|| panic!("the Nutanix spec is valid: {diags:#?}"));
    assert!(matches!(real.provider, Provider::Nutanix(_)));

    let stand_in = rehearsal::in_memory(&real_docs);
    let (cluster, diags) = spec::parse_cluster(&stand_in.docs);
    let rehearsed =
        cluster.unwrap_or_else(|| panic!("validation accepts the stand-in: {diags:#?}"));
    assert!(matches!(
        rehearsed.provider,
        Provider::Docker(DockerBackend::InMemory)
    ));
    assert_eq!(rehearsed.control_plane.count, 3);
    assert_eq!(
        rehearsed
            .workers
            .iter()
            .map(|w| (w.name.as_str(), w.replicas))
            .collect::<Vec<_>>(),
        [("md-0", Some(2))]
    );
    let listed: Vec<String> = stand_in.not_carried.iter().map(|n| n.to_string()).collect();
    let line_of = |needle: &str| NUTANIX.lines().position(|l| l.contains(needle)).unwrap() + 1;
    for (needle, what) in [
        ("host: 10.30.0.10", "virtual IP 10.30.0.10"),
        (
            "endpoint: prism.corp",
            "Prism Central prism.corp:9440, 2 failure domains",
        ),
        (
            "osFamily: ubuntu",
            "image ubuntu-2204-kube-v1.33, 2 sockets of 1 vCPUs, 8Gi memory, 40Gi system disk, OS ubuntu, Prism Element cluster pe-1, subnet uuid 9f6b7c1e",
        ),
    ] {
        // Each note is at the key above the needle: the endpoint, the datacenter's and the
        // machine config's `spec`.
        let line = line_of(needle) - 1;
        assert!(
            listed
                .iter()
                .any(|l| l.starts_with(&format!("{file}:{line}:")) && l.contains(what)),
            "{what} at line {line}: {listed:#?}"
        );
    }
}

const TINKERBELL: &str = r#"apiVersion: anywhere.eks.amazonaws.com/v1alpha1
kind: Cluster
metadata:
  name: rack-1
spec:
  kubernetesVersion: "1.33"
  managementCluster:
    name: mgmt
  controlPlaneConfiguration:
    count: 3
    endpoint:
      host: 10.40.0.10
    machineGroupRef:
      kind: TinkerbellMachineConfig
      name: rack-1-cp
  workerNodeGroupConfigurations:
    - name: md-0
      count: 2
      machineGroupRef:
        kind: TinkerbellMachineConfig
        name: rack-1-cp
  datacenterRef:
    kind: TinkerbellDatacenterConfig
    name: rack-1
  clusterNetwork:
    cniConfig:
      cilium: {}
    pods:
      cidrBlocks: [192.168.0.0/16]
    services:
      cidrBlocks: [10.96.0.0/12]
---
apiVersion: anywhere.eks.amazonaws.com/v1alpha1
kind: TinkerbellDatacenterConfig
metadata:
  name: rack-1
spec:
  tinkerbellIP: 10.40.0.20
  osImageURL: https://images.example.com/ubuntu-2204-kube-1-33.gz
---
apiVersion: anywhere.eks.amazonaws.com/v1alpha1
kind: TinkerbellMachineConfig
metadata:
  name: rack-1-cp
spec:
  hardwareSelector:
    cluster.x-k8s.io/cluster-name: rack-1
  osFamily: ubuntu
  users:
    - name: ec2-user
      sshAuthorizedKeys:
        - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBAlf8UkQwwdm0/3owGGfFx0nralmWRxinY3cBBi24tm
"#;

/// A bare-metal cluster is rehearsed on the in-memory backend with its shape; the Tinkerbell
/// stack, the OS image and the Hardware its machines take are listed at their lines.
#[test]
fn a_bare_metal_cluster_keeps_its_shape_on_the_in_memory_backend() {
    let file = "clusters/mgmt/workload-clusters/rack-1/cluster.yaml";
    let real_docs = docs(&[(file, TINKERBELL.to_string())]);
    let (cluster, diags) = spec::parse_cluster(&real_docs);
    let real = cluster.unwrap_or_else(|| panic!("the Tinkerbell spec is valid: {diags:#?}"));
    assert!(matches!(real.provider, Provider::Tinkerbell(_)));

    let stand_in = rehearsal::in_memory(&real_docs);
    let (cluster, diags) = spec::parse_cluster(&stand_in.docs);
    let rehearsed =
        cluster.unwrap_or_else(|| panic!("validation accepts the stand-in: {diags:#?}"));
    assert!(matches!(
        rehearsed.provider,
        Provider::Docker(DockerBackend::InMemory)
    ));
    assert_eq!(rehearsed.control_plane.count, 3);
    assert_eq!(
        rehearsed
            .workers
            .iter()
            .map(|w| (w.name.as_str(), w.replicas))
            .collect::<Vec<_>>(),
        [("md-0", Some(2))]
    );
    let listed: Vec<String> = stand_in.not_carried.iter().map(|n| n.to_string()).collect();
    let line_of = |needle: &str| TINKERBELL.lines().position(|l| l.contains(needle)).unwrap() + 1;
    for (needle, what) in [
        ("host: 10.40.0.10", "virtual IP 10.40.0.10"),
        (
            "tinkerbellIP: 10.40.0.20",
            "Tinkerbell stack at 10.40.0.20, OS image https://images.example.com/ubuntu-2204-kube-1-33.gz",
        ),
        (
            "hardwareSelector:",
            "Hardware cluster.x-k8s.io/cluster-name=rack-1, OS ubuntu",
        ),
    ] {
        let line = line_of(needle) - 1;
        assert!(
            listed
                .iter()
                .any(|l| l.starts_with(&format!("{file}:{line}:")) && l.contains(what)),
            "{what} at line {line}: {listed:#?}"
        );
    }
}

#[test]
fn the_aws_iam_authenticator_is_listed_and_left_out_of_a_rehearsal_while_oidc_stays() {
    let text = CLUSTER
        .replace(
            "kind: VSphereDatacenterConfig",
            "kind: DockerDatacenterConfig",
        )
        .split("  proxyConfiguration:")
        .next()
        .unwrap()
        .replace("    endpoint:\n      host: 10.20.0.10\n", "")
        .replacen(
            "spec:\n",
            "spec:\n  identityProviderRefs:\n    - {kind: AWSIamConfig, name: prod-1-iam}\n    - {kind: OIDCConfig, name: prod-1-oidc}\n",
            1,
        );
    let dc = "apiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: DockerDatacenterConfig\nmetadata:\n  name: prod-1\n  namespace: team-a\nspec: {}\n";
    let iam = "apiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: AWSIamConfig\nmetadata:\n  name: prod-1-iam\n  namespace: team-a\nspec:\n  awsRegion: us-west-2\n  backendMode: [EKSConfigMap]\n";
    let oidc = "apiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: OIDCConfig\nmetadata:\n  name: prod-1-oidc\n  namespace: team-a\nspec:\n  clientId: k8s\n  issuerUrl: https://login.example.com\n";
    let stand_in = rehearsal::in_memory(&docs(&[
        ("c/cluster.yaml", text),
        ("c/dc.yaml", dc.to_string()),
        ("c/iam.yaml", iam.to_string()),
        ("c/oidc.yaml", oidc.to_string()),
    ]));
    let said: Vec<String> = stand_in
        .not_carried
        .iter()
        .map(NotCarried::to_string)
        .collect();
    assert!(
        said.iter()
            .any(|s| s
                .starts_with("c/iam.yaml:6: AWS IAM authenticator prod-1-iam (region us-west-2)")),
        "{said:#?}"
    );
    assert!(
        said.iter()
            .any(|s| s.starts_with("c/cluster.yaml:") && s.contains("token webhook")),
        "{said:#?}"
    );
    assert!(
        !stand_in
            .docs
            .iter()
            .any(|d| d.doc.value["kind"] == "AWSIamConfig")
    );
    let (cluster, diags) = spec::parse_cluster(&stand_in.docs);
    let cluster = cluster.unwrap_or_else(|| panic!("{diags:#?}"));
    assert!(cluster.aws_iam.is_none());
    assert!(cluster.oidc.is_some(), "the OIDC provider is rehearsed");
}

#[test]
fn curated_packages_are_listed_and_left_out_of_a_rehearsal() {
    let text = CLUSTER
        .replace(
            "kind: VSphereDatacenterConfig",
            "kind: DockerDatacenterConfig",
        )
        .split("  proxyConfiguration:")
        .next()
        .unwrap()
        .replace("    endpoint:\n      host: 10.20.0.10\n", "")
        .replacen(
            "spec:\n",
            "spec:\n  packages:\n    controller: {tag: v1}\n",
            1,
        );
    let dc = "apiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: DockerDatacenterConfig\nmetadata:\n  name: prod-1\n  namespace: team-a\nspec: {}\n";
    let stand_in = rehearsal::in_memory(&docs(&[
        ("c/cluster.yaml", text),
        ("c/dc.yaml", dc.to_string()),
    ]));
    let said: Vec<String> = stand_in
        .not_carried
        .iter()
        .map(NotCarried::to_string)
        .collect();
    assert!(
        said.iter()
            .any(|s| s.starts_with("c/cluster.yaml:") && s.contains("curated packages")),
        "{said:#?}"
    );
    let (cluster, diags) = spec::parse_cluster(&stand_in.docs);
    let cluster = cluster.unwrap_or_else(|| panic!("{diags:#?}"));
    assert!(cluster.packages.is_none());
}
