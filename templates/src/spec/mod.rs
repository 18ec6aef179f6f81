//! The cluster spec: raw EKS Anywhere objects in, one validated [`Cluster`] out.
//!
//! ```text
//!   YAML documents of one cluster directory
//!        │  parse.rs   kind dispatch, unsupported/unknown fields, typed deserialisation
//!        ▼
//!   raw::{ClusterSpec, VSphereMachineSpec, ...}     (exactly what the user wrote)
//!        │  validate.rs  EKS Anywhere defaults, references, single-cluster rules
//!        ▼
//!   Cluster                                          (what the renderer accepts)
//! ```
//!
//! A [`Cluster`] cannot exist in an invalid state: the renderer never re-checks what validation
//! already established. Rules that need more than one cluster (layout, names across the repo,
//! CIDR overlap, management/workload versions) live in the `layout` crate.

mod parse;
pub mod raw;
mod validate;
mod version;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use ipnet::IpNet;
use serde_json::Value;

pub use parse::{SourceDoc, deserialize};
pub use version::SemVer;

use crate::json_text::JsonText;
use crate::yaml::{Document, Pos, Positions};

/// The API group of EKS Anywhere objects.
pub const EKSA_GROUP: &str = "anywhere.eks.amazonaws.com";
/// The apiVersion of EKS Anywhere objects.
pub const EKSA_API_VERSION: &str = "anywhere.eks.amazonaws.com/v1alpha1";
/// Namespace of a cluster's objects when its Cluster object names none.
pub const DEFAULT_NAMESPACE: &str = "eksa-system";

/// EKS Anywhere fields capstan does not implement, by kind, each with the reason and what to do
/// instead. `[*]` matches every list item. They are reported as `unsupported-field`, never
/// dropped silently.
pub const UNSUPPORTED: &[(&str, &str, &str)] = &[(
    "Cluster",
    "spec.gitOpsRef",
    "capstan is the fleet's GitOps agent and applies this repository itself; EKS Anywhere's Flux bootstrap does not apply: remove gitOpsRef",
)];

/// EKS Anywhere kinds capstan does not handle, with the reason, so the error can say why and
/// what to use instead rather than "unknown".
pub const UNSUPPORTED_KINDS: &[(&str, &str)] = &[
    (
        "CloudStackDatacenterConfig",
        "EKS Anywhere removed the CloudStack provider in v0.26; capstan renders docker, vSphere, Nutanix and Tinkerbell (bare metal) clusters",
    ),
    (
        "CloudStackMachineConfig",
        "EKS Anywhere removed the CloudStack provider in v0.26; capstan renders docker, vSphere, Nutanix and Tinkerbell (bare metal) clusters",
    ),
    (
        "SnowDatacenterConfig",
        "the Snow provider is not supported by capstan; capstan renders docker, vSphere, Nutanix and Tinkerbell (bare metal) clusters",
    ),
    (
        "SnowMachineConfig",
        "the Snow provider is not supported by capstan; capstan renders docker, vSphere, Nutanix and Tinkerbell (bare metal) clusters",
    ),
    (
        "SnowIPPool",
        "the Snow provider is not supported by capstan; capstan renders docker, vSphere, Nutanix and Tinkerbell (bare metal) clusters",
    ),
    (
        "AWSDatacenterConfig",
        "the legacy AWS provider is not supported; capstan renders docker, vSphere, Nutanix and Tinkerbell (bare metal) clusters",
    ),
    (
        "FluxConfig",
        "capstan is the fleet's GitOps agent and applies this repository itself; remove the FluxConfig and the Cluster's gitOpsRef",
    ),
    (
        "GitOpsConfig",
        "capstan is the fleet's GitOps agent and applies this repository itself; remove the GitOpsConfig and the Cluster's gitOpsRef",
    ),
];

/// A Kubernetes minor version such as 1.31.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubeVersion {
    /// Major (always 1).
    pub major: u32,
    /// Minor.
    pub minor: u32,
}

impl KubeVersion {
    /// Parses "1.31".
    pub fn parse(s: &str) -> Option<Self> {
        let (a, b) = s.split_once('.')?;
        if a.is_empty() || b.is_empty() || !a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit()) {
            return None;
        }
        Some(KubeVersion {
            major: a.parse().ok()?,
            minor: b.parse().ok()?,
        })
    }
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Where a cluster's spec was read from, to locate later (fleet-level) problems.
#[derive(Debug, Clone)]
pub struct Source {
    /// The file of the Cluster object, relative to the repository root.
    pub file: PathBuf,
    /// Where each part of the Cluster document was written (not the document: its value is
    /// not needed once validated).
    pub positions: Positions,
}

impl Source {
    /// The position of a path in the Cluster document.
    pub fn pos(&self, path: &str) -> Pos {
        self.positions.pos(path)
    }
}

/// A validated cluster: everything the renderer needs, with EKS Anywhere's defaults applied.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// metadata.name.
    pub name: String,
    /// Namespace of the cluster's objects (EKS-A and CAPI alike).
    pub namespace: String,
    /// Control-plane Kubernetes minor.
    pub kubernetes_version: KubeVersion,
    /// The managing cluster; equals `name` for a self-managed (management) cluster.
    pub management: String,
    /// eksaVersion as written (vX.Y.Z); the fleet fills in a workload's default.
    pub eksa_version: Option<String>,
    /// Name of the Bundles object of a deprecated bundlesRef.
    pub bundles_ref: Option<String>,
    /// Provider-specific settings.
    pub provider: Provider,
    /// The control plane.
    pub control_plane: ControlPlane,
    /// External (etcdadm) etcd, when unstacked.
    pub etcd: Option<ExternalEtcd>,
    /// Worker groups, in spec order.
    pub workers: Vec<WorkerGroup>,
    /// Pod and service networks and Cilium settings.
    pub network: Network,
    /// MachineHealthCheck settings.
    pub health: HealthCheck,
    /// HTTP(S) proxy of the machines.
    pub proxy: Option<Proxy>,
    /// Registry mirror of the machines.
    pub registry_mirror: Option<RegistryMirror>,
    /// Extra service-account issuer (podIamConfig).
    pub pod_iam_issuer: Option<String>,
    /// KMS encryption of etcd (empty: none).
    pub etcd_encryption: Vec<raw::EtcdEncryption>,
    /// The OIDC identity provider.
    pub oidc: Option<raw::OidcSpec>,
    /// The AWS IAM authenticator (an AWSIamConfig identity provider), defaults applied.
    pub aws_iam: Option<raw::AwsIamSpec>,
    /// Curated packages: the package controller's settings, when the cluster asks for it
    /// (a `packages` section that does not disable it); management clusters only.
    pub packages: Option<raw::PackageConfiguration>,
    /// The EKS Anywhere objects as they will be applied (namespace set, paused for the EKS-A
    /// controller so that capstan alone reconciles them), as text: a validated cluster is kept
    /// for as long as the agent runs.
    pub eksa_objects: Vec<JsonText>,
    /// Other objects of the directory, applied as they are.
    pub extra_objects: Vec<ExtraObject>,
    /// Where every object of the directory was written.
    pub sources: Vec<ObjectSource>,
    /// Where the Cluster object was read.
    pub source: Source,
}

impl Cluster {
    /// Whether the cluster manages itself.
    pub fn is_self_managed(&self) -> bool {
        self.management == self.name
    }
}

/// An object of a cluster directory that is not an EKS Anywhere object.
#[derive(Debug, Clone)]
pub struct ExtraObject {
    /// File it came from.
    pub file: PathBuf,
    /// The document, with positions.
    pub doc: Document,
}

impl ExtraObject {
    /// The object.
    pub fn value(&self) -> &Value {
        &self.doc.value
    }

    /// Where a field of it was written (the object's first line for "").
    pub fn pos(&self, path: &str) -> Pos {
        self.doc.pos(path)
    }
}

/// Where an object of the directory was written: kind, name, file and its metadata.name line.
#[derive(Debug, Clone)]
pub struct ObjectSource {
    /// Kind.
    pub kind: String,
    /// metadata.name.
    pub name: String,
    /// File.
    pub file: PathBuf,
    /// Position of metadata.name.
    pub pos: Pos,
}

/// Provider-specific settings.
#[derive(Debug, Clone)]
pub enum Provider {
    /// CAPD: containers as machines.
    Docker(DockerBackend),
    /// CAPV.
    VSphere(VSphere),
    /// CAPX.
    Nutanix(Nutanix),
    /// CAPT (bare metal).
    Tinkerbell(Tinkerbell),
}

impl Provider {
    /// "docker", "vsphere", "nutanix" or "tinkerbell".
    pub fn name(&self) -> &'static str {
        match self {
            Provider::Docker(_) => "docker",
            Provider::VSphere(_) => "vsphere",
            Provider::Nutanix(_) => "nutanix",
            Provider::Tinkerbell(_) => "tinkerbell",
        }
    }
}

/// Annotation of a `DockerDatacenterConfig` choosing what CAPD runs machines on.
pub const DOCKER_BACKEND_ANNOTATION: &str = "capstan.dev/docker-backend";

/// How an in-memory datacenter's machines start: `instant` (they come up as soon as Cluster API
/// asks; what a rehearsal uses unless the datacenter says otherwise, where a boot time proves
/// nothing) or anything else, or absent, after a simulated boot (the VM 3 s, then its node, API
/// server and etcd 1 s each: what the quick start and the timing tests see).
pub const IN_MEMORY_STARTUP_ANNOTATION: &str = "capstan.dev/in-memory-startup";

/// What CAPD runs a docker cluster's machines on. EKS Anywhere's docker provider runs
/// containers; CAPD's in-memory backend simulates machines and API servers inside the CAPD
/// process, which is how capstan's test bed and quick start bring clusters up with the real
/// Cluster API controllers on a machine without Docker. Chosen explicitly per datacenter
/// (annotation [`DOCKER_BACKEND_ANNOTATION`]: `docker` or `in-memory`), never implied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DockerBackend {
    /// Containers (`DockerCluster`, `DockerMachineTemplate`): what EKS Anywhere renders.
    #[default]
    Docker,
    /// CAPD's in-memory backend (`DevCluster`, `DevMachineTemplate` with `backend.inMemory`).
    InMemory,
}

impl DockerBackend {
    /// The annotation's values.
    pub const VALUES: &[&str] = &["docker", "in-memory"];

    /// From the annotation's value.
    pub fn parse(s: &str) -> Option<DockerBackend> {
        match s {
            "docker" => Some(DockerBackend::Docker),
            "in-memory" => Some(DockerBackend::InMemory),
            _ => None,
        }
    }
}

/// vSphere settings of a cluster.
#[derive(Debug, Clone)]
pub struct VSphere {
    /// vCenter server.
    pub server: String,
    /// Datacenter.
    pub datacenter: String,
    /// Full network path (/<dc>/network/<net>).
    pub network: String,
    /// Server thumbprint (empty when insecure).
    pub thumbprint: String,
    /// Skip TLS verification of vCenter.
    pub insecure: bool,
    /// Name of the VSphereDatacenterConfig (failure domain objects are named after it).
    pub datacenter_config: String,
    /// Failure domains.
    pub failure_domains: Vec<raw::FailureDomain>,
    /// Machine configs by name.
    pub machines: BTreeMap<String, VSphereMachine>,
}

/// A validated VSphereMachineConfig.
#[derive(Debug, Clone, PartialEq)]
pub struct VSphereMachine {
    /// Datastore.
    pub datastore: String,
    /// Folder.
    pub folder: String,
    /// Memory.
    pub memory_mib: i64,
    /// vCPUs.
    pub num_cpus: i64,
    /// Disk.
    pub disk_gib: i64,
    /// ubuntu or redhat.
    pub os_family: String,
    /// Resource pool.
    pub resource_pool: String,
    /// VM template.
    pub template: String,
    /// First user name and key, if any.
    pub user: Option<(String, String)>,
    /// Storage policy.
    pub storage_policy_name: String,
    /// fullClone or linkedClone (empty: provider default).
    pub clone_mode: String,
    /// Tag IDs.
    pub tags: Vec<String>,
    /// Networks as written (workers); empty: the datacenter's network.
    pub networks: Vec<String>,
    /// NTP servers.
    pub ntp_servers: Vec<String>,
}

/// A Nutanix resource: `type` (`name` or `uuid`) and the name or UUID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NutanixId {
    /// `name` or `uuid`.
    pub kind: String,
    /// The name or the UUID.
    pub value: String,
}

/// A validated Nutanix failure domain.
#[derive(Debug, Clone, PartialEq)]
pub struct NutanixFailureDomain {
    /// Name.
    pub name: String,
    /// The Prism Element cluster.
    pub cluster: NutanixId,
    /// Its subnets.
    pub subnets: Vec<NutanixId>,
    /// Worker groups spread over this failure domain.
    pub worker_groups: Vec<String>,
}

/// Nutanix settings of a cluster.
#[derive(Debug, Clone)]
pub struct Nutanix {
    /// Prism Central's address.
    pub endpoint: String,
    /// Prism Central's port.
    pub port: i64,
    /// Skip TLS verification of Prism Central.
    pub insecure: bool,
    /// CA certificates (PEM) for Prism Central, as written.
    pub trust_bundle: Option<String>,
    /// Failure domains.
    pub failure_domains: Vec<NutanixFailureDomain>,
    /// The addresses the cloud controller manager ignores, expanded (the control-plane
    /// endpoint first, as in EKS Anywhere).
    pub ccm_ignored_ips: Vec<String>,
    /// Machine configs by name.
    pub machines: BTreeMap<String, NutanixMachine>,
}

/// A validated NutanixMachineConfig.
#[derive(Debug, Clone, PartialEq)]
pub struct NutanixMachine {
    /// ubuntu or redhat.
    pub os_family: String,
    /// The first user and its first key (EKS Anywhere's defaults: `eksa`, no key).
    pub user: (String, String),
    /// vCPUs per socket.
    pub vcpus_per_socket: i64,
    /// Sockets.
    pub vcpu_sockets: i64,
    /// Memory, as Kubernetes prints the quantity.
    pub memory_size: String,
    /// System disk, as Kubernetes prints the quantity.
    pub system_disk_size: String,
    /// Disk image.
    pub image: NutanixId,
    /// Prism Element cluster.
    pub cluster: NutanixId,
    /// Subnet.
    pub subnet: NutanixId,
    /// Project.
    pub project: Option<NutanixId>,
    /// Categories `(key, value)`.
    pub categories: Vec<(String, String)>,
    /// GPUs: `deviceID` with the ID, or `name` with the name.
    pub gpus: Vec<NutanixId>,
    /// legacy or uefi (empty: Nutanix's default).
    pub boot_type: String,
}

/// Tinkerbell (bare metal) settings of a cluster.
#[derive(Debug, Clone)]
pub struct Tinkerbell {
    /// The Tinkerbell stack's address (metadata service, ISO server).
    pub tinkerbell_ip: String,
    /// Leave kube-vip out of the control plane (an external load balancer holds the endpoint).
    pub skip_load_balancer: bool,
    /// Boot HookOS from an ISO instead of the network.
    pub iso_boot: bool,
    /// Machine configs by name.
    pub machines: BTreeMap<String, TinkerbellMachine>,
}

/// How a Tinkerbell machine config picks its Hardware: one label, or affinity terms.
#[derive(Debug, Clone, PartialEq)]
pub enum HardwareChoice {
    /// `hardwareSelector`: one label (key, value).
    Selector(BTreeMap<String, String>),
    /// `hardwareAffinity` as written (validated).
    Affinity(Value),
}

/// A validated TinkerbellMachineConfig.
#[derive(Debug, Clone, PartialEq)]
pub struct TinkerbellMachine {
    /// ubuntu or redhat.
    pub os_family: String,
    /// The first user and its first key.
    pub user: (String, String),
    /// Which Hardware the machines run on.
    pub hardware: HardwareChoice,
    /// The Tinkerbell workflow provisioning the machines, as YAML (the template config it
    /// names, or EKS Anywhere's default for its OS family and image).
    pub workflow: String,
    /// NTP servers.
    pub ntp_servers: Vec<String>,
}

/// HTTP(S) proxy settings, validated.
#[derive(Debug, Clone)]
pub struct Proxy {
    /// Proxy for http.
    pub http: String,
    /// Proxy for https.
    pub https: String,
    /// Destinations reached directly, as written.
    pub no_proxy: Vec<String>,
}

/// A registry mirror, validated.
#[derive(Debug, Clone)]
pub struct RegistryMirror {
    /// `host:port` of the mirror.
    pub base: String,
    /// Registry mirrored → `host:port/namespace` on the mirror (public.ecr.aws → base when none
    /// is given, as EKS-A does).
    pub namespaces: BTreeMap<String, String>,
    /// CA certificate (PEM).
    pub ca_cert: Option<String>,
    /// Skip TLS verification.
    pub insecure_skip_verify: bool,
    /// The mirror needs a login: machines read it from the cluster's
    /// [`registry_credentials_secret`] (never from the repository's plain text).
    pub authenticate: bool,
}

/// The Secret an authenticated registry mirror's login is read from, in the cluster's
/// namespace (keys `username` and `password`, as EKS Anywhere's `registry-credentials`): one
/// per cluster, so that which clusters get a login is the admin's choice, and a workload's
/// machines never get another cluster's.
pub fn registry_credentials_secret(cluster: &str) -> String {
    format!("{cluster}-registry-credentials")
}

/// The Secret the AWS IAM authenticator's certificate and key are read from, in the cluster's
/// namespace (keys `cert.pem` and `key.pem`), as EKS Anywhere names it. The control-plane
/// machines write both where the authenticator serves from and the API server trusts it.
pub fn aws_iam_ca_secret(cluster: &str) -> String {
    format!("{cluster}-aws-iam-authenticator-ca")
}

/// Per-group overrides of the MachineHealthCheck settings.
#[derive(Debug, Clone, Default)]
pub struct HealthOverride {
    /// nodeStartupTimeout in seconds.
    pub node_startup_timeout_seconds: Option<u64>,
    /// unhealthyMachineTimeout in seconds.
    pub unhealthy_machine_timeout_seconds: Option<u64>,
    /// maxUnhealthy.
    pub max_unhealthy: Option<Value>,
}

/// A taint on nodes.
pub type Taint = raw::Taint;

/// Control-plane settings.
#[derive(Debug, Clone)]
pub struct ControlPlane {
    /// Machines.
    pub count: u32,
    /// API endpoint host (vSphere).
    pub endpoint_host: Option<String>,
    /// Machine config name (vSphere).
    pub machine: Option<String>,
    /// Taints (None: provider default).
    pub taints: Option<Vec<Taint>>,
    /// Node labels.
    pub labels: BTreeMap<String, String>,
    /// Rollout surge (0 or 1).
    pub max_surge: Option<u32>,
    /// Extra certificate SANs.
    pub cert_sans: Vec<String>,
    /// Extra kube-apiserver flags.
    pub api_server_extra_args: BTreeMap<String, String>,
    /// KubeletConfiguration patch.
    pub kubelet_configuration: Option<serde_json::Map<String, Value>>,
    /// Audit policy replacing the default.
    pub audit_policy: Option<String>,
    /// Whether the API server exempts system components' objects from admission plugins
    /// (`skipAdmissionForSystemResources`).
    pub skip_admission: bool,
    /// Health check overrides.
    pub health: HealthOverride,
}

/// External etcd settings.
#[derive(Debug, Clone)]
pub struct ExternalEtcd {
    /// Machines.
    pub count: u32,
    /// Machine config name (vSphere).
    pub machine: Option<String>,
}

/// A worker group.
#[derive(Debug, Clone)]
pub struct WorkerGroup {
    /// Name (md-0 by default for the first).
    pub name: String,
    /// Machines, or None when the autoscaler owns the count.
    pub replicas: Option<u32>,
    /// Autoscaler bounds.
    pub autoscaling: Option<(u32, u32)>,
    /// Machine config name (vSphere).
    pub machine: Option<String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Node labels.
    pub labels: BTreeMap<String, String>,
    /// Kubernetes minor of the group.
    pub kubernetes_version: KubeVersion,
    /// Rollout surge and unavailability, when an upgradeRolloutStrategy is written.
    pub rollout: Option<(u32, u32)>,
    /// KubeletConfiguration patch.
    pub kubelet_configuration: Option<serde_json::Map<String, Value>>,
    /// vSphere failure domain.
    pub failure_domain: Option<String>,
    /// Health check overrides.
    pub health: HealthOverride,
}

/// Networks and CNI.
#[derive(Debug, Clone)]
pub struct Network {
    /// Pod CIDR.
    pub pods: IpNet,
    /// Service CIDR.
    pub services: IpNet,
    /// Cilium settings (EKS-A defaults applied).
    pub cilium: raw::Cilium,
    /// Per-node pod CIDR mask size.
    pub node_cidr_mask_size: Option<u32>,
    /// resolv.conf path for kubelet.
    pub resolv_conf: Option<String>,
}

/// MachineHealthCheck settings, defaults applied.
#[derive(Debug, Clone)]
pub struct HealthCheck {
    /// nodeStartupTimeout in seconds (default 10m).
    pub node_startup_timeout_seconds: u64,
    /// unhealthyMachineTimeout in seconds (default 5m).
    pub unhealthy_machine_timeout_seconds: u64,
    /// maxUnhealthy of the control plane (default 100%).
    pub control_plane_max_unhealthy: Value,
    /// maxUnhealthy of worker groups (default 40%).
    pub workers_max_unhealthy: Value,
}

/// The smallest memory of an external etcd machine on vSphere (EKS-A's defaulter raises it).
pub const ETCD_MIN_MEMORY_MIB: i64 = 8192;

/// Parses and validates the documents of one cluster directory: raw objects first
/// ([`parse`]), then the validated [`Cluster`] ([`validate`]).
///
/// Returns the cluster when it is valid (warnings allowed), and every diagnostic found either way.
pub fn parse_cluster(docs: &[SourceDoc]) -> (Option<Cluster>, Vec<crate::diag::Diagnostic>) {
    let mut diags = Vec::new();
    let objects = parse::objects(docs, &mut diags);
    let cluster = validate::validate(docs, objects, &mut diags);
    let name = cluster.as_ref().map(|c| c.name.clone());
    if let Some(name) = name.as_deref() {
        diags = diags.into_iter().map(|d| d.for_cluster(name)).collect();
    }
    let cluster = if crate::diag::has_errors(&diags) {
        None
    } else {
        cluster
    };
    (cluster, diags)
}

/// Whether `s` is a DNS-1123 label of at most `max` characters.
pub fn is_dns_label(s: &str, max: usize) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= max
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// Parses a Go-style duration ("10m", "5m0s", "1h30m", "90s") into seconds.
pub fn parse_duration_seconds(s: &str) -> Option<u64> {
    let mut total = 0u64;
    let mut num = String::new();
    if s.is_empty() {
        return None;
    }
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let n: u64 = num.parse().ok()?;
        num.clear();
        let unit = match c {
            'h' => 3600,
            'm' if chars.peek() == Some(&'s') => return None,
            'm' => 60,
            's' => 1,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(unit)?)?;
    }
    if !num.is_empty() {
        return None;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_seconds("10m"), Some(600));
        assert_eq!(parse_duration_seconds("5m0s"), Some(300));
        assert_eq!(parse_duration_seconds("1h30m"), Some(5400));
        assert_eq!(parse_duration_seconds("10"), None);
        assert_eq!(parse_duration_seconds("10ms"), None);
        assert_eq!(parse_duration_seconds("x"), None);
    }

    #[test]
    fn dns_labels() {
        assert!(is_dns_label("mgmt-1", 35));
        assert!(!is_dns_label("Mgmt", 35));
        assert!(!is_dns_label("-a", 35));
        assert!(!is_dns_label("a-", 35));
        assert!(!is_dns_label(&"a".repeat(36), 35));
    }

    #[test]
    fn kube_versions() {
        assert_eq!(
            KubeVersion::parse("1.31"),
            Some(KubeVersion {
                major: 1,
                minor: 31
            })
        );
        assert_eq!(KubeVersion::parse("v1.31"), None);
        assert_eq!(KubeVersion::parse("1.31.2"), None);
    }
}
