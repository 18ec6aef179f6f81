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

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use ipnet::IpNet;
use serde_json::Value;

pub use parse::{SourceDoc, parse_cluster};

use crate::yaml::{Document, Pos};

/// The API group of EKS Anywhere objects.
pub const EKSA_GROUP: &str = "anywhere.eks.amazonaws.com";
/// The apiVersion of EKS Anywhere objects.
pub const EKSA_API_VERSION: &str = "anywhere.eks.amazonaws.com/v1alpha1";
/// Namespace of a cluster's objects when its Cluster object names none.
pub const DEFAULT_NAMESPACE: &str = "eksa-system";

/// EKS Anywhere fields capstan does not implement yet, by kind. `[*]` matches every list item.
/// They are reported as `unsupported-field`, never dropped silently.
pub const UNSUPPORTED: &[(&str, &str)] = &[
    ("Cluster", "spec.identityProviderRefs"),
    ("Cluster", "spec.gitOpsRef"),
    ("Cluster", "spec.proxyConfiguration"),
    ("Cluster", "spec.registryMirrorConfiguration"),
    ("Cluster", "spec.podIamConfig"),
    ("Cluster", "spec.packages"),
    ("Cluster", "spec.etcdEncryption"),
    ("Cluster", "spec.licenseToken"),
    (
        "Cluster",
        "spec.controlPlaneConfiguration.skipLoadBalancerDeployment",
    ),
    ("Cluster", "spec.controlPlaneConfiguration.certSans"),
    (
        "Cluster",
        "spec.controlPlaneConfiguration.machineHealthCheck",
    ),
    (
        "Cluster",
        "spec.controlPlaneConfiguration.apiServerExtraArgs",
    ),
    (
        "Cluster",
        "spec.controlPlaneConfiguration.kubeletConfiguration",
    ),
    (
        "Cluster",
        "spec.controlPlaneConfiguration.auditPolicyContent",
    ),
    (
        "Cluster",
        "spec.controlPlaneConfiguration.skipAdmissionForSystemResources",
    ),
    (
        "Cluster",
        "spec.workerNodeGroupConfigurations[*].machineHealthCheck",
    ),
    (
        "Cluster",
        "spec.workerNodeGroupConfigurations[*].kubeletConfiguration",
    ),
    (
        "Cluster",
        "spec.workerNodeGroupConfigurations[*].failureDomains",
    ),
    ("Cluster", "spec.clusterNetwork.cni"),
    ("Cluster", "spec.clusterNetwork.dns"),
    ("Cluster", "spec.clusterNetwork.nodes"),
    ("Cluster", "spec.clusterNetwork.cniConfig.kindnetd"),
    ("VSphereDatacenterConfig", "spec.failureDomains"),
    ("VSphereMachineConfig", "spec.networks"),
    ("VSphereMachineConfig", "spec.hostOSConfiguration"),
];

/// EKS Anywhere kinds of other providers and features, recognised so the error can say
/// "not supported yet" rather than "unknown".
pub const UNSUPPORTED_KINDS: &[&str] = &[
    "TinkerbellDatacenterConfig",
    "TinkerbellMachineConfig",
    "TinkerbellTemplateConfig",
    "CloudStackDatacenterConfig",
    "CloudStackMachineConfig",
    "NutanixDatacenterConfig",
    "NutanixMachineConfig",
    "SnowDatacenterConfig",
    "SnowMachineConfig",
    "SnowIPPool",
    "AWSDatacenterConfig",
    "OIDCConfig",
    "AWSIamConfig",
    "FluxConfig",
    "GitOpsConfig",
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
    /// The Cluster document.
    pub doc: Document,
}

impl Source {
    /// The position of a path in the Cluster document.
    pub fn pos(&self, path: &str) -> Pos {
        self.doc.pos(path)
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
    /// The EKS Anywhere objects as they will be applied (namespace set, paused for the EKS-A
    /// controller so that capstan alone reconciles them).
    pub eksa_objects: Vec<Value>,
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
}

impl Provider {
    /// "docker" or "vsphere".
    pub fn name(&self) -> &'static str {
        match self {
            Provider::Docker(_) => "docker",
            Provider::VSphere(_) => "vsphere",
        }
    }
}

/// Annotation of a `DockerDatacenterConfig` choosing what CAPD runs machines on.
pub const DOCKER_BACKEND_ANNOTATION: &str = "capstan.dev/docker-backend";

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
    /// Rollout surge.
    pub max_surge: Option<Value>,
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
    /// Rollout surge.
    pub max_surge: Option<Value>,
    /// Rollout unavailability.
    pub max_unavailable: Option<Value>,
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
