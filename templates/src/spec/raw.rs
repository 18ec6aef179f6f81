//! The EKS Anywhere v1alpha1 objects as users write them.
//!
//! These types mirror the YAML exactly: every struct denies unknown fields, so a typo is an error
//! with a position instead of a silently ignored setting. Fields EKS Anywhere has but capstan does
//! not implement yet are not listed here; `parse` reports them as `unsupported-field` before these
//! types ever see them (see [`super::UNSUPPORTED`]). Defaults and cross-field rules live in
//! `validate`, which turns these into [`super::Cluster`].

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// `metadata` of an EKS Anywhere object.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ObjectMeta {
    /// The object's name.
    pub name: String,
    /// The namespace; defaults to the cluster's namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// A `{kind, name}` reference.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Ref {
    /// Kind of the referenced object.
    pub kind: String,
    /// Name of the referenced object.
    pub name: String,
}

/// `Cluster.spec`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Kubernetes minor, e.g. "1.31".
    pub kubernetes_version: String,
    /// The control plane.
    pub control_plane_configuration: ControlPlaneConfiguration,
    /// Worker groups.
    #[serde(default)]
    pub worker_node_group_configurations: Vec<WorkerNodeGroupConfiguration>,
    /// The provider's datacenter config.
    pub datacenter_ref: Ref,
    /// Unstacked etcd.
    #[serde(default)]
    pub external_etcd_configuration: Option<ExternalEtcdConfiguration>,
    /// Pod and service networks, CNI.
    pub cluster_network: ClusterNetwork,
    /// The cluster that manages this one (empty or own name: self-managed).
    #[serde(default)]
    pub management_cluster: Option<ManagementCluster>,
    /// EKS Anywhere release, e.g. "v0.26.1".
    #[serde(default)]
    pub eksa_version: Option<String>,
    /// Deprecated pointer to a Bundles object.
    #[serde(default)]
    pub bundles_ref: Option<BundlesRef>,
    /// Machine health check settings.
    #[serde(default)]
    pub machine_health_check: Option<MachineHealthCheck>,
}

/// `controlPlaneConfiguration`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ControlPlaneConfiguration {
    /// Number of control-plane machines.
    pub count: i64,
    /// API server endpoint.
    #[serde(default)]
    pub endpoint: Option<Endpoint>,
    /// Machine config of the control plane.
    #[serde(default)]
    pub machine_group_ref: Option<Ref>,
    /// Node taints.
    #[serde(default)]
    pub taints: Option<Vec<Taint>>,
    /// Node labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Rollout settings.
    #[serde(default)]
    pub upgrade_rollout_strategy: Option<RolloutStrategy>,
}

/// `endpoint`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    /// Host (IP or name) of the API server endpoint.
    pub host: String,
}

/// A node taint.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value.
    #[serde(default)]
    pub value: Option<String>,
    /// NoSchedule, PreferNoSchedule or NoExecute.
    pub effect: String,
}

/// `upgradeRolloutStrategy`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RolloutStrategy {
    /// RollingUpdate (InPlace is not supported yet).
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// Surge and unavailability.
    #[serde(default)]
    pub rolling_update: Option<RollingUpdate>,
}

/// `rollingUpdate`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RollingUpdate {
    /// Extra machines during a rollout.
    #[serde(default)]
    pub max_surge: Option<Value>,
    /// Machines that may be unavailable (workers only).
    #[serde(default)]
    pub max_unavailable: Option<Value>,
}

/// One `workerNodeGroupConfigurations` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkerNodeGroupConfiguration {
    /// Group name; the first defaults to md-0.
    #[serde(default)]
    pub name: Option<String>,
    /// Machines; defaults to 1, or to minCount with autoscaling.
    #[serde(default)]
    pub count: Option<i64>,
    /// Cluster autoscaler bounds.
    #[serde(default)]
    pub autoscaling_configuration: Option<AutoscalingConfiguration>,
    /// Machine config of the group.
    #[serde(default)]
    pub machine_group_ref: Option<Ref>,
    /// Node taints.
    #[serde(default)]
    pub taints: Option<Vec<Taint>>,
    /// Node labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Kubernetes minor of this group; defaults to the cluster's.
    #[serde(default)]
    pub kubernetes_version: Option<String>,
    /// Rollout settings.
    #[serde(default)]
    pub upgrade_rollout_strategy: Option<RolloutStrategy>,
}

/// `autoscalingConfiguration`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AutoscalingConfiguration {
    /// Lower bound.
    pub min_count: i64,
    /// Upper bound.
    pub max_count: i64,
}

/// `externalEtcdConfiguration`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExternalEtcdConfiguration {
    /// Number of etcd machines (odd).
    pub count: i64,
    /// Machine config of the etcd machines.
    #[serde(default)]
    pub machine_group_ref: Option<Ref>,
}

/// `clusterNetwork`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterNetwork {
    /// Pod network.
    pub pods: CidrBlocks,
    /// Service network.
    pub services: CidrBlocks,
    /// CNI settings.
    #[serde(default)]
    pub cni_config: Option<CniConfig>,
}

/// `{cidrBlocks: [...]}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CidrBlocks {
    /// Exactly one CIDR.
    pub cidr_blocks: Vec<String>,
}

/// `cniConfig`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CniConfig {
    /// Cilium, the only CNI capstan installs.
    #[serde(default)]
    pub cilium: Option<Cilium>,
}

/// `cniConfig.cilium`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Cilium {
    /// default, always or never.
    #[serde(default)]
    pub policy_enforcement_mode: Option<String>,
    /// Interfaces to masquerade on.
    #[serde(default)]
    pub egress_masquerade_interfaces: Option<String>,
    /// overlay or direct.
    #[serde(default)]
    pub routing_mode: Option<String>,
    /// Native routing CIDR (required with direct routing).
    #[serde(default, rename = "ipv4NativeRoutingCIDR")]
    pub ipv4_native_routing_cidr: Option<String>,
    /// Native routing CIDR for IPv6.
    #[serde(default, rename = "ipv6NativeRoutingCIDR")]
    pub ipv6_native_routing_cidr: Option<String>,
    /// Leave upgrades of Cilium to the user.
    #[serde(default)]
    pub skip_upgrade: Option<bool>,
    /// Whether Cilium is the only CNI.
    #[serde(default)]
    pub cni_exclusive: Option<bool>,
    /// Raw Helm values; overrides every other field.
    #[serde(default)]
    pub helm_values: Option<Value>,
}

/// `managementCluster`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManagementCluster {
    /// Name of the managing cluster.
    #[serde(default)]
    pub name: String,
}

/// `bundlesRef` (deprecated).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BundlesRef {
    /// Always anywhere.eks.amazonaws.com/v1alpha1.
    pub api_version: String,
    /// bundles-<number>.
    pub name: String,
    /// Namespace of the Bundles object.
    pub namespace: String,
}

/// `machineHealthCheck`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MachineHealthCheck {
    /// How long a machine may take to become a node, e.g. "10m".
    #[serde(default)]
    pub node_startup_timeout: Option<String>,
    /// How long a node may be unhealthy, e.g. "5m".
    #[serde(default)]
    pub unhealthy_machine_timeout: Option<String>,
    /// Remediate only while at most this many (or this %) are unhealthy.
    #[serde(default)]
    pub max_unhealthy: Option<Value>,
}

/// `DockerDatacenterConfig.spec` (empty).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DockerDatacenterSpec {}

/// `VSphereDatacenterConfig.spec`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VSphereDatacenterSpec {
    /// vSphere datacenter name.
    pub datacenter: String,
    /// VM network (name or full path).
    pub network: String,
    /// vCenter server.
    pub server: String,
    /// TLS thumbprint of the server.
    #[serde(default)]
    pub thumbprint: Option<String>,
    /// Skip TLS verification.
    #[serde(default)]
    pub insecure: Option<bool>,
}

/// `VSphereMachineConfig.spec`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VSphereMachineSpec {
    /// Datastore.
    pub datastore: String,
    /// VM folder.
    #[serde(default)]
    pub folder: Option<String>,
    /// Memory; default 8192, at least 2048.
    #[serde(default, rename = "memoryMiB")]
    pub memory_mib: Option<i64>,
    /// vCPUs; default 2.
    #[serde(default, rename = "numCPUs")]
    pub num_cpus: Option<i64>,
    /// Disk size; default 25.
    #[serde(default, rename = "diskGiB")]
    pub disk_gib: Option<i64>,
    /// bottlerocket (EKS-A's default), ubuntu or redhat.
    #[serde(default)]
    pub os_family: Option<String>,
    /// Resource pool.
    pub resource_pool: String,
    /// VM template to clone.
    #[serde(default)]
    pub template: Option<String>,
    /// Users; only the first user and its first key are used.
    #[serde(default)]
    pub users: Vec<User>,
    /// Storage policy.
    #[serde(default)]
    pub storage_policy_name: Option<String>,
    /// fullClone or linkedClone.
    #[serde(default)]
    pub clone_mode: Option<String>,
    /// vSphere tag IDs.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A machine user.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct User {
    /// Login name.
    pub name: String,
    /// SSH public keys.
    #[serde(default)]
    pub ssh_authorized_keys: Vec<String>,
}
