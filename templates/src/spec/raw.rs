//! The EKS Anywhere v1alpha1 objects as users write them.
//!
//! These types mirror the YAML exactly: every struct denies unknown fields, so a typo is an error
//! with a position instead of a silently ignored setting. Fields EKS Anywhere has but capstan does
//! not implement are not listed here; `parse` reports them as `unsupported-field` with the reason
//! before these types ever see them (see [`super::UNSUPPORTED`]). Fields that are listed but
//! refused in some forms (bottlerocket settings, an authenticated registry mirror, kindnetd) are
//! refused by `validate`, which also applies defaults and cross-field rules and turns these into
//! [`super::Cluster`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
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
    /// Identity providers: an OIDCConfig, an AWSIamConfig, at most one of each.
    #[serde(default)]
    pub identity_provider_refs: Vec<Ref>,
    /// HTTP(S) proxy of the machines.
    #[serde(default)]
    pub proxy_configuration: Option<ProxyConfiguration>,
    /// A registry mirror for every image the machines pull.
    #[serde(default)]
    pub registry_mirror_configuration: Option<RegistryMirrorConfiguration>,
    /// IAM roles for pods: an extra service-account issuer.
    #[serde(default)]
    pub pod_iam_config: Option<PodIamConfig>,
    /// Encryption of resources in etcd through KMS plugins.
    #[serde(default)]
    pub etcd_encryption: Option<Vec<EtcdEncryption>>,
    /// EKS Anywhere's extended-support license (a JWT), carried on the Cluster object.
    #[serde(default)]
    pub license_token: Option<String>,
    /// Curated packages: the package controller's settings.
    #[serde(default)]
    pub packages: Option<PackageConfiguration>,
}

/// `packages`: EKS Anywhere's curated packages controller (EKS-A's field names).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PackageConfiguration {
    /// No package controller on this cluster.
    #[serde(default)]
    pub disable: bool,
    /// The controller's image and settings.
    #[serde(default)]
    pub controller: Option<PackageController>,
    /// The ECR token refresher's cron job.
    #[serde(default)]
    pub cronjob: Option<PackageCronJob>,
}

/// `packages.controller`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PackageController {
    /// Image repository of the controller.
    #[serde(default)]
    pub repository: String,
    /// Image tag.
    #[serde(default)]
    pub tag: String,
    /// Image digest.
    #[serde(default)]
    pub digest: String,
    /// Run the controller without its admission webhooks.
    #[serde(default)]
    pub disable_webhooks: bool,
    /// Environment of the controller, each `NAME=value`.
    #[serde(default)]
    pub env: Vec<String>,
    /// Requests and limits of the controller's container.
    #[serde(default)]
    pub resources: PackageResources,
}

/// `packages.controller.resources`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PackageResources {
    /// Requests.
    #[serde(default)]
    pub requests: ImageResource,
    /// Limits.
    #[serde(default)]
    pub limits: ImageResource,
}

/// CPU and memory of a container (`cpu`, `memory`; empty: not set).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ImageResource {
    /// CPU, e.g. 100m.
    #[serde(default)]
    pub cpu: String,
    /// Memory, e.g. 50Mi.
    #[serde(default)]
    pub memory: String,
}

/// `packages.cronjob`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PackageCronJob {
    /// Image repository of the token refresher.
    #[serde(default)]
    pub repository: String,
    /// Image tag.
    #[serde(default)]
    pub tag: String,
    /// Image digest.
    #[serde(default)]
    pub digest: String,
    /// Suspend the cron job.
    #[serde(default)]
    pub disable: bool,
}

/// `proxyConfiguration`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProxyConfiguration {
    /// Proxy for http.
    #[serde(default)]
    pub http_proxy: String,
    /// Proxy for https.
    #[serde(default)]
    pub https_proxy: String,
    /// Destinations reached without the proxy.
    #[serde(default)]
    pub no_proxy: Vec<String>,
}

/// `registryMirrorConfiguration`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RegistryMirrorConfiguration {
    /// Host of the mirror.
    #[serde(default)]
    pub endpoint: String,
    /// Port of the mirror (default 443).
    #[serde(default)]
    pub port: Option<Value>,
    /// Registries mirrored under a namespace of the mirror.
    #[serde(default)]
    pub oci_namespaces: Vec<OciNamespace>,
    /// CA certificate of the mirror (PEM).
    #[serde(default)]
    pub ca_cert_content: Option<String>,
    /// The mirror needs credentials.
    #[serde(default)]
    pub authenticate: Option<bool>,
    /// Skip TLS verification of the mirror.
    #[serde(default)]
    pub insecure_skip_verify: Option<bool>,
}

/// One `ociNamespaces` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OciNamespace {
    /// The registry mirrored, e.g. public.ecr.aws.
    #[serde(default)]
    pub registry: String,
    /// Its namespace on the mirror.
    #[serde(default)]
    pub namespace: String,
}

/// `podIamConfig`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PodIamConfig {
    /// The issuer added to kube-apiserver's service-account-issuer.
    #[serde(default)]
    pub service_account_issuer: String,
}

/// One `etcdEncryption` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EtcdEncryption {
    /// KMS providers, in order.
    #[serde(default)]
    pub providers: Vec<EtcdEncryptionProvider>,
    /// Resources encrypted, e.g. secrets.
    #[serde(default)]
    pub resources: Vec<String>,
}

/// One encryption provider.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdEncryptionProvider {
    /// The KMS plugin.
    pub kms: Kms,
}

/// A KMS plugin.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Kms {
    /// Name of the plugin.
    #[serde(default)]
    pub name: String,
    /// Unix socket the plugin listens on.
    #[serde(default)]
    pub socket_listen_address: String,
    /// Objects cached in memory (default 1000).
    #[serde(default, rename = "cachesize")]
    pub cache_size: Option<i64>,
    /// How long kube-apiserver waits for the plugin (default 3s).
    #[serde(default)]
    pub timeout: Option<String>,
}

/// `AWSIamConfig.spec`: the AWS IAM authenticator's settings (EKS Anywhere's field names).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AwsIamSpec {
    /// The AWS region of the STS endpoint tokens are checked against.
    #[serde(default)]
    pub aws_region: String,
    /// Where the authenticator reads its mappings, in order (`EKSConfigMap`, `CRD`, `File`).
    #[serde(default)]
    pub backend_mode: Vec<String>,
    /// IAM roles mapped to Kubernetes users and groups (the `aws-auth` ConfigMap).
    #[serde(default)]
    pub map_roles: Vec<IamMapping>,
    /// IAM users mapped to Kubernetes users and groups.
    #[serde(default)]
    pub map_users: Vec<IamMapping>,
    /// The AWS partition (default `aws`).
    #[serde(default)]
    pub partition: String,
}

/// One entry of `mapRoles` (`roleARN`) or `mapUsers` (`userARN`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IamMapping {
    /// The role's ARN (`mapRoles`).
    #[serde(default, rename = "roleARN")]
    pub role_arn: Option<String>,
    /// The user's ARN (`mapUsers`).
    #[serde(default, rename = "userARN")]
    pub user_arn: Option<String>,
    /// The Kubernetes user name.
    #[serde(default)]
    pub username: String,
    /// The Kubernetes groups.
    #[serde(default)]
    pub groups: Vec<String>,
}

/// `OIDCConfig.spec`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OidcSpec {
    /// Client ID.
    #[serde(default)]
    pub client_id: String,
    /// Claim holding the groups.
    #[serde(default)]
    pub groups_claim: String,
    /// Prefix of group names.
    #[serde(default)]
    pub groups_prefix: String,
    /// Issuer URL (https).
    #[serde(default)]
    pub issuer_url: String,
    /// Claims a token must carry.
    #[serde(default)]
    pub required_claims: Vec<RequiredClaim>,
    /// Claim holding the user name.
    #[serde(default)]
    pub username_claim: String,
    /// Prefix of user names.
    #[serde(default)]
    pub username_prefix: String,
}

/// A required claim of an OIDCConfig.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequiredClaim {
    /// Claim.
    #[serde(default)]
    pub claim: String,
    /// Value it must have.
    #[serde(default)]
    pub value: String,
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
    /// Extra subject alternative names of the API server certificate (`certSans`; EKS-A also
    /// reads other capitalisations, which parse accepts with a warning).
    #[serde(default)]
    pub cert_sans: Vec<String>,
    /// Health check overrides of the control plane.
    #[serde(default)]
    pub machine_health_check: Option<MachineHealthCheck>,
    /// Extra kube-apiserver flags.
    #[serde(default)]
    pub api_server_extra_args: BTreeMap<String, String>,
    /// A KubeletConfiguration patch for control-plane nodes.
    #[serde(default)]
    pub kubelet_configuration: Option<Value>,
    /// The API server's audit policy (replaces EKS-A's default).
    #[serde(default)]
    pub audit_policy_content: Option<String>,
    /// Skip the in-cluster load balancer EKS-A deploys (no effect on Cluster API objects).
    #[serde(default)]
    pub skip_load_balancer_deployment: Option<bool>,
    /// Exempt system components' own objects from admission plugins (EKS-A's patched API
    /// server reads the exclusion rules from a file).
    #[serde(default)]
    pub skip_admission_for_system_resources: Option<bool>,
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
    /// Extra machines during a rollout (an integer: EKS-A's CRD types it so).
    #[serde(default)]
    pub max_surge: Option<i64>,
    /// Machines that may be unavailable (workers only).
    #[serde(default)]
    pub max_unavailable: Option<i64>,
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
    /// Health check overrides of this group.
    #[serde(default)]
    pub machine_health_check: Option<MachineHealthCheck>,
    /// A KubeletConfiguration patch for this group's nodes.
    #[serde(default)]
    pub kubelet_configuration: Option<Value>,
    /// vSphere failure domains of this group (the first is used, as in EKS-A).
    #[serde(default)]
    pub failure_domains: Vec<String>,
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
    /// Deprecated CNI name (`cilium`); parse turns it into cniConfig with a warning.
    #[serde(default)]
    pub cni: Option<String>,
    /// DNS settings of the nodes.
    #[serde(default)]
    pub dns: Option<Dns>,
    /// Per-node pod CIDR size.
    #[serde(default)]
    pub nodes: Option<Nodes>,
}

/// `clusterNetwork.dns`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Dns {
    /// The resolv.conf kubelet hands to pods.
    #[serde(default)]
    pub resolv_conf: Option<ResolvConf>,
}

/// `clusterNetwork.dns.resolvConf`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolvConf {
    /// Path on the node.
    #[serde(default)]
    pub path: String,
}

/// `clusterNetwork.nodes`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Nodes {
    /// Mask size of each node's pod CIDR.
    #[serde(default)]
    pub cidr_mask_size: Option<i64>,
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
    /// kindnetd (EKS-A's docker-only development CNI), refused with a reason.
    #[serde(default)]
    pub kindnetd: Option<Value>,
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

/// `DockerDatacenterConfig.spec` (empty; a null spec reads as empty).
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
    /// Failure domains worker groups can be placed in.
    #[serde(default)]
    pub failure_domains: Vec<FailureDomain>,
}

/// A vSphere failure domain (a compute cluster of the datacenter).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FailureDomain {
    /// Name, referenced by worker groups.
    pub name: String,
    /// Compute cluster (full path).
    pub compute_cluster: String,
    /// Resource pool (full path).
    pub resource_pool: String,
    /// Datastore (full path).
    pub datastore: String,
    /// VM folder (full path).
    pub folder: String,
    /// Network (full path).
    pub network: String,
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
    /// Networks of the machines (workers; the datacenter's network when empty).
    #[serde(default)]
    pub networks: Vec<String>,
    /// Host OS settings.
    #[serde(default, rename = "hostOSConfiguration")]
    pub host_os_configuration: Option<HostOsConfiguration>,
}

/// `hostOSConfiguration`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HostOsConfiguration {
    /// NTP servers.
    #[serde(default, rename = "ntpConfiguration")]
    pub ntp_configuration: Option<NtpConfiguration>,
    /// Bottlerocket settings (refused: bottlerocket is not supported).
    #[serde(default)]
    pub bottlerocket_configuration: Option<Value>,
    /// CA bundles (bottlerocket only in EKS-A; refused).
    #[serde(default)]
    pub cert_bundles: Option<Value>,
}

/// `ntpConfiguration`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NtpConfiguration {
    /// NTP servers.
    #[serde(default)]
    pub servers: Vec<String>,
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

/// `NutanixDatacenterConfig.spec`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NutanixDatacenterSpec {
    /// Prism Central's address.
    #[serde(default)]
    pub endpoint: String,
    /// Prism Central's port (9440 in Nutanix's documentation; required, as in EKS Anywhere).
    #[serde(default)]
    pub port: i64,
    /// CA certificates (PEM) Prism Central's certificate is checked against.
    #[serde(default)]
    pub additional_trust_bundle: Option<String>,
    /// Skip TLS verification of Prism Central.
    #[serde(default)]
    pub insecure: Option<bool>,
    /// The Secret with Prism Central's credentials (kind Secret).
    #[serde(default)]
    pub credential_ref: Option<Ref>,
    /// Failure domains (Prism Element clusters and their subnets).
    #[serde(default)]
    pub failure_domains: Vec<NutanixFailureDomain>,
    /// Addresses, CIDRs and ranges (`a-b`) the cloud controller manager ignores on nodes.
    #[serde(default, rename = "ccmExcludeNodeIPs")]
    pub ccm_exclude_node_ips: Vec<String>,
}

/// A Nutanix failure domain: a Prism Element cluster, its subnets, and the worker groups
/// spread over the failure domains that name them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NutanixFailureDomain {
    /// Name.
    pub name: String,
    /// The Prism Element cluster.
    pub cluster: NutanixIdentifier,
    /// Its subnets.
    #[serde(default)]
    pub subnets: Vec<NutanixIdentifier>,
    /// Worker groups whose machines are spread over this failure domain.
    #[serde(default)]
    pub worker_machine_groups: Vec<String>,
}

/// A Nutanix resource, by name or by UUID (`type: name` or `type: uuid`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NutanixIdentifier {
    /// `name` or `uuid`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The name (type name).
    #[serde(default)]
    pub name: Option<String>,
    /// The UUID (type uuid).
    #[serde(default)]
    pub uuid: Option<String>,
}

/// A category of a Nutanix VM.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NutanixCategory {
    /// Category key.
    #[serde(default)]
    pub key: String,
    /// Category value.
    #[serde(default)]
    pub value: String,
}

/// A GPU of a Nutanix VM, by device ID or by name.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NutanixGpu {
    /// `deviceID` or `name`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The device ID (type deviceID).
    #[serde(default, rename = "deviceID")]
    pub device_id: Option<i64>,
    /// The name (type name).
    #[serde(default)]
    pub name: Option<String>,
}

/// `NutanixMachineConfig.spec`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NutanixMachineSpec {
    /// ubuntu (EKS Anywhere's default) or redhat.
    #[serde(default)]
    pub os_family: Option<String>,
    /// Users; only the first user and its first key are used.
    #[serde(default)]
    pub users: Vec<User>,
    /// vCPUs per socket.
    #[serde(default)]
    pub vcpus_per_socket: i64,
    /// Sockets.
    #[serde(default)]
    pub vcpu_sockets: i64,
    /// Memory, a Kubernetes quantity (at least 2Gi).
    #[serde(default)]
    pub memory_size: Option<Value>,
    /// The disk image (its name carries the Kubernetes version).
    pub image: NutanixIdentifier,
    /// The Prism Element cluster.
    pub cluster: NutanixIdentifier,
    /// The subnet.
    pub subnet: NutanixIdentifier,
    /// The Prism Central project.
    #[serde(default)]
    pub project: Option<NutanixIdentifier>,
    /// System disk, a Kubernetes quantity (at least 20Gi).
    #[serde(default)]
    pub system_disk_size: Option<Value>,
    /// Categories attached to the VMs.
    #[serde(default)]
    pub additional_categories: Vec<NutanixCategory>,
    /// GPUs (worker machines only).
    #[serde(default)]
    pub gpus: Vec<NutanixGpu>,
    /// legacy or uefi.
    #[serde(default)]
    pub boot_type: Option<String>,
}

/// `TinkerbellDatacenterConfig.spec`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TinkerbellDatacenterSpec {
    /// The address of the Tinkerbell stack (its load balancer): the metadata service the
    /// machines' cloud-init reads, and Smee's ISO server.
    #[serde(default, rename = "tinkerbellIP")]
    pub tinkerbell_ip: String,
    /// The OS image every machine streams to its disk unless its machine config names one.
    #[serde(default, rename = "osImageURL")]
    pub os_image_url: String,
    /// Where the Tinkerbell stack serves HookOS from (the stack's concern; accepted, not used).
    #[serde(default, rename = "hookImagesURLPath")]
    pub hook_images_url_path: String,
    /// Leave the control plane's kube-vip static pod out (an external load balancer holds the
    /// endpoint).
    #[serde(default)]
    pub skip_load_balancer_deployment: bool,
    /// The interface the stack's load balancer announces on (the stack's concern).
    #[serde(default)]
    pub load_balancer_interface: String,
    /// Boot HookOS from an ISO (through the BMC's virtual media) instead of the network.
    #[serde(default)]
    pub iso_boot: bool,
    /// Where the HookOS ISO is (only with isoBoot).
    #[serde(default, rename = "hookIsoURL")]
    pub hook_iso_url: String,
}

/// A label selector (Kubernetes' `metav1.LabelSelector`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels the Hardware must carry.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    /// Expressions the Hardware's labels must satisfy.
    #[serde(default)]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One expression of a label selector.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelSelectorRequirement {
    /// The label.
    pub key: String,
    /// In, NotIn, Exists or DoesNotExist.
    #[serde(default)]
    pub operator: String,
    /// The values (In, NotIn only).
    #[serde(default)]
    pub values: Vec<String>,
}

/// A term of a hardware affinity.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HardwareAffinityTerm {
    /// Which Hardware the term matches.
    pub label_selector: LabelSelector,
}

/// A weighted term of a hardware affinity.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WeightedHardwareAffinityTerm {
    /// 1 to 100.
    #[serde(default)]
    pub weight: i64,
    /// The term.
    pub hardware_affinity_term: HardwareAffinityTerm,
}

/// `hardwareAffinity` of a TinkerbellMachineConfig: required terms (one must match) and
/// preferred ones (weighted).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardwareAffinity {
    /// Terms of which a Hardware must match one.
    #[serde(default)]
    pub required: Vec<HardwareAffinityTerm>,
    /// Terms preferred, by weight.
    #[serde(default)]
    pub preferred: Vec<WeightedHardwareAffinityTerm>,
}

/// `TinkerbellMachineConfig.spec`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TinkerbellMachineSpec {
    /// One label the machines' Hardware carries.
    #[serde(default)]
    pub hardware_selector: BTreeMap<String, String>,
    /// Label selector terms the machines' Hardware matches (instead of hardwareSelector).
    #[serde(default)]
    pub hardware_affinity: Option<HardwareAffinity>,
    /// The TinkerbellTemplateConfig provisioning the machines (default: EKS Anywhere's
    /// workflow for the OS family).
    #[serde(default)]
    pub template_ref: Option<Ref>,
    /// ubuntu, redhat or bottlerocket.
    #[serde(default)]
    pub os_family: Option<String>,
    /// The OS image, replacing the datacenter's.
    #[serde(default, rename = "osImageURL")]
    pub os_image_url: String,
    /// Users; only the first user and its first key are used.
    #[serde(default)]
    pub users: Vec<User>,
    /// NTP servers and the bottlerocket-only settings.
    #[serde(default, rename = "hostOSConfiguration")]
    pub host_os_configuration: Option<HostOsConfiguration>,
}

/// `TinkerbellTemplateConfig.spec`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TinkerbellTemplateSpec {
    /// The Tinkerbell workflow template (version, name, global_timeout, tasks).
    pub template: TinkerbellWorkflow,
}

/// A Tinkerbell workflow template, as EKS Anywhere's TinkerbellTemplateConfig holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TinkerbellWorkflow {
    /// Template format version ("0.1").
    #[serde(default)]
    pub version: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// ID (empty).
    #[serde(default)]
    pub id: String,
    /// Timeout of the whole workflow, in seconds.
    #[serde(default)]
    pub global_timeout: i64,
    /// Tasks.
    #[serde(default)]
    pub tasks: Vec<TinkerbellTask>,
}

/// A task of a Tinkerbell workflow.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TinkerbellTask {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// The worker running it (`{{.device_1}}`).
    #[serde(default)]
    pub worker: String,
    /// Actions, in order.
    #[serde(default)]
    pub actions: Vec<TinkerbellAction>,
    /// Volumes every action gets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
    /// Environment every action gets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
}

/// An action of a Tinkerbell workflow task: a container image run on the machine.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TinkerbellAction {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Image.
    #[serde(default)]
    pub image: String,
    /// Timeout in seconds.
    #[serde(default)]
    pub timeout: i64,
    /// Command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Run on timeout.
    #[serde(default, rename = "on-timeout", skip_serializing_if = "Vec::is_empty")]
    pub on_timeout: Vec<String>,
    /// Run on failure.
    #[serde(default, rename = "on-failure", skip_serializing_if = "Vec::is_empty")]
    pub on_failure: Vec<String>,
    /// Volumes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
    /// Environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    /// PID namespace (`host`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pid: String,
}
