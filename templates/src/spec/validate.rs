//! Single-cluster rules and EKS Anywhere's defaults: raw objects in, a [`Cluster`] out.
//!
//! The rules follow EKS Anywhere's webhooks and defaulters (see the reference notes): control
//! plane and etcd counts, provider requirements, worker-group defaults and version skew, taints,
//! CIDRs, Cilium and health-check settings. Every problem is reported with the position of the
//! field it concerns; validation goes on after a problem so one run reports them all.

use std::collections::{BTreeMap, BTreeSet};

use ipnet::IpNet;
use serde_json::{Value, json};

use super::parse::{Objects, Parsed, SourceDoc};
use super::raw::{self, Taint};
use super::{
    Cluster, ControlPlane, DEFAULT_NAMESPACE, DOCKER_BACKEND_ANNOTATION, DockerBackend,
    ExternalEtcd, HealthCheck, KubeVersion, Network, Provider, Source, VSphere, VSphereMachine,
    WorkerGroup, is_dns_label, parse_duration_seconds,
};
use crate::diag::{Code, Diagnostic};

/// Maximum length of a cluster name (EKS Anywhere's limit).
pub const MAX_CLUSTER_NAME: usize = 35;

/// Largest machine count: Cluster API replica fields are 32-bit.
pub const MAX_COUNT: i64 = i32::MAX as i64;

/// Whether the directory has a document of an EKS-A kind (and name), typed or not.
fn present(docs: &[SourceDoc], kind: &str, name: Option<&str>) -> bool {
    docs.iter().any(|d| {
        let v = &d.doc.value;
        // The group exactly as `classify` reads it: `anywhere.eks.amazonaws.com-x/v1` is another
        // group (an extra object), not a Cluster that failed to parse (found by fuzzing).
        v.get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|a| a.split_once('/').map(|(g, _)| g) == Some(super::EKSA_GROUP))
            && v.get("kind").and_then(Value::as_str) == Some(kind)
            && name.is_none_or(|n| v.pointer("/metadata/name").and_then(Value::as_str) == Some(n))
    })
}

/// Diagnostics located in one source document.
struct At<'a> {
    sd: &'a SourceDoc,
    diags: &'a mut Vec<Diagnostic>,
}

impl At<'_> {
    fn err(&mut self, code: Code, path: &str, msg: impl Into<String>) {
        self.diags.push(
            Diagnostic::error(code, msg)
                .in_file(&self.sd.file)
                .at(self.sd.doc.pos(path)),
        );
    }
    fn warn(&mut self, code: Code, path: &str, msg: impl Into<String>) {
        self.diags.push(
            Diagnostic::warning(code, msg)
                .in_file(&self.sd.file)
                .at(self.sd.doc.pos(path)),
        );
    }
}

/// The backend a DockerDatacenterConfig chooses (None: an invalid choice, reported).
fn docker_backend(
    d: &Parsed<raw::DockerDatacenterSpec>,
    docs: &[SourceDoc],
    diags: &mut Vec<Diagnostic>,
) -> Option<DockerBackend> {
    let Some(v) = d.meta.annotations.get(DOCKER_BACKEND_ANNOTATION) else {
        return Some(DockerBackend::Docker);
    };
    let backend = DockerBackend::parse(v);
    if backend.is_none() {
        At {
            sd: &docs[d.src],
            diags,
        }
        .err(
            Code::InvalidValue,
            &format!("metadata.annotations.{DOCKER_BACKEND_ANNOTATION}"),
            format!(
                "annotation {DOCKER_BACKEND_ANNOTATION} is `{v}`; use one of: {}",
                DockerBackend::VALUES.join(", ")
            ),
        );
    }
    backend
}

pub(crate) fn validate(
    docs: &[SourceDoc],
    objects: Objects,
    diags: &mut Vec<Diagnostic>,
) -> Option<Cluster> {
    let Objects {
        clusters,
        docker_datacenters,
        vsphere_datacenters,
        vsphere_machines,
        extras,
    } = objects;
    let cluster = match clusters.len() {
        0 => {
            // Only report a missing Cluster when no Cluster document failed to parse.
            let failed_cluster = present(docs, "Cluster", None);
            if !failed_cluster {
                let mut d = Diagnostic::error(
                    Code::MissingCluster,
                    "no anywhere.eks.amazonaws.com/v1alpha1 Cluster object in this cluster directory",
                );
                if let Some(first) = docs.first() {
                    d = d.in_file(&first.file);
                }
                diags.push(d);
            }
            return None;
        }
        1 => &clusters[0],
        _ => {
            for extra in &clusters[1..] {
                let sd = &docs[extra.src];
                At { sd, diags }.err(
                    Code::MultipleClusters,
                    "metadata.name",
                    format!("second Cluster `{}` in one directory; each cluster has a directory of its own", extra.meta.name),
                );
            }
            return None;
        }
    };
    let sd = &docs[cluster.src];
    let spec = &cluster.spec;
    let name = cluster.meta.name.clone();
    let namespace = cluster
        .meta
        .namespace
        .clone()
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
    let mut at = At { sd, diags };

    if !is_dns_label(&name, MAX_CLUSTER_NAME) {
        at.err(
            Code::InvalidName,
            "metadata.name",
            format!("cluster name `{name}` must be a DNS-1123 label (lowercase letters, digits, '-', starting with a letter) of at most {MAX_CLUSTER_NAME} characters"),
        );
    }
    if !is_dns_label(&namespace, 63) {
        at.err(
            Code::InvalidName,
            "metadata.namespace",
            format!("namespace `{namespace}` is not a DNS-1123 label"),
        );
    }

    // Every EKS-A object of the directory lives in the cluster's namespace, and names are unique per kind.
    let mut seen: BTreeSet<(&str, &str)> = BTreeSet::new();
    let all_meta = clusters
        .iter()
        .map(|p| ("Cluster", &p.meta, p.src))
        .chain(
            docker_datacenters
                .iter()
                .map(|p| ("DockerDatacenterConfig", &p.meta, p.src)),
        )
        .chain(
            vsphere_datacenters
                .iter()
                .map(|p| ("VSphereDatacenterConfig", &p.meta, p.src)),
        )
        .chain(
            vsphere_machines
                .iter()
                .map(|p| ("VSphereMachineConfig", &p.meta, p.src)),
        );
    for (kind, meta, src) in all_meta {
        let mut at = At {
            sd: &docs[src],
            diags: at.diags,
        };
        if let Some(ns) = &meta.namespace
            && *ns != namespace
        {
            at.err(Code::ForeignNamespace, "metadata.namespace", format!("{kind} `{}` is in namespace `{ns}`, but its cluster's namespace is `{namespace}`", meta.name));
        }
        if !seen.insert((kind, meta.name.as_str())) {
            at.err(
                Code::DuplicateName,
                "metadata.name",
                format!("two {kind} objects named `{}`", meta.name),
            );
        }
        if kind != "Cluster" && !is_dns_label(&meta.name, 63) {
            at.err(
                Code::InvalidName,
                "metadata.name",
                format!("{kind} name `{}` is not a DNS-1123 label", meta.name),
            );
        }
    }
    let mut at = At {
        sd,
        diags: at.diags,
    };

    // Versions.
    let kubernetes_version = KubeVersion::parse(&spec.kubernetes_version);
    if kubernetes_version.is_none() {
        at.err(
            Code::InvalidValue,
            "spec.kubernetesVersion",
            format!(
                "kubernetesVersion `{}` is not a Kubernetes minor such as \"1.31\"",
                spec.kubernetes_version
            ),
        );
    }
    let management = match &spec.management_cluster {
        Some(m) if !m.name.is_empty() => m.name.clone(),
        _ => name.clone(),
    };
    if let Some(v) = &spec.eksa_version
        && crate::release::SemVer::parse(v).is_none()
    {
        at.err(
            Code::InvalidValue,
            "spec.eksaVersion",
            format!("eksaVersion `{v}` is not a version such as v0.26.1"),
        );
    }
    let mut bundles_ref = None;
    if let Some(b) = &spec.bundles_ref {
        if spec.eksa_version.is_some() {
            at.err(Code::VersionConflict, "spec.bundlesRef", "eksaVersion and bundlesRef are mutually exclusive; keep eksaVersion (bundlesRef is deprecated)");
        } else {
            at.warn(
                Code::DeprecatedField,
                "spec.bundlesRef",
                "bundlesRef is deprecated; set eksaVersion instead",
            );
        }
        bundles_ref = Some(b.name.clone());
    }

    // Provider.
    let dc = &spec.datacenter_ref;
    let provider = match dc.kind.as_str() {
        "DockerDatacenterConfig" => {
            match docker_datacenters.iter().find(|d| d.meta.name == dc.name) {
                // Present but broken: its own error says why; no follow-on dangling-ref.
                None if present(docs, "DockerDatacenterConfig", Some(&dc.name)) => None,
                None => {
                    at.err(
                        Code::DanglingRef,
                        "spec.datacenterRef.name",
                        format!(
                            "DockerDatacenterConfig `{}` is not in this cluster directory",
                            dc.name
                        ),
                    );
                    None
                }
                Some(d) => docker_backend(d, docs, at.diags).map(Provider::Docker),
            }
        }
        "VSphereDatacenterConfig" => {
            match vsphere_datacenters.iter().find(|d| d.meta.name == dc.name) {
                // Present but broken: its own error says why; no follow-on dangling-ref.
                None if present(docs, "VSphereDatacenterConfig", Some(&dc.name)) => None,
                None => {
                    at.err(
                        Code::DanglingRef,
                        "spec.datacenterRef.name",
                        format!(
                            "VSphereDatacenterConfig `{}` is not in this cluster directory",
                            dc.name
                        ),
                    );
                    None
                }
                Some(d) => Some(Provider::VSphere(vsphere(
                    d,
                    &vsphere_machines,
                    docs,
                    at.diags,
                ))),
            }
        }
        other => {
            at.err(Code::InvalidValue, "spec.datacenterRef.kind", format!("datacenterRef kind `{other}` is not supported; use DockerDatacenterConfig or VSphereDatacenterConfig"));
            None
        }
    };
    // From the reference, not the resolved provider: a broken datacenter config must not make
    // the cluster look like docker.
    let is_vsphere = dc.kind == "VSphereDatacenterConfig";
    let mut used_machines: BTreeSet<String> = BTreeSet::new();
    let mut machine_ref =
        |at: &mut At, r: &Option<raw::Ref>, path: &str, what: &str| -> Option<String> {
            match r {
                None if is_vsphere => {
                    at.err(
                        Code::MissingField,
                        path,
                        format!("{what} needs a machineGroupRef to a VSphereMachineConfig"),
                    );
                    None
                }
                None => None,
                Some(r) if is_vsphere => {
                    if r.kind != "VSphereMachineConfig" {
                        at.err(
                            Code::InvalidValue,
                            &format!("{path}.kind"),
                            format!(
                                "machineGroupRef kind `{}` must be VSphereMachineConfig",
                                r.kind
                            ),
                        );
                    } else if !vsphere_machines.iter().any(|m| m.meta.name == r.name)
                        && !present(docs, "VSphereMachineConfig", Some(&r.name))
                    {
                        at.err(
                            Code::DanglingRef,
                            &format!("{path}.name"),
                            format!(
                                "VSphereMachineConfig `{}` is not in this cluster directory",
                                r.name
                            ),
                        );
                    }
                    used_machines.insert(r.name.clone());
                    Some(r.name.clone())
                }
                Some(_) => {
                    at.warn(
                        Code::UnusedObject,
                        path,
                        "the docker provider ignores machineGroupRef",
                    );
                    None
                }
            }
        };

    // Control plane.
    let cpc = &spec.control_plane_configuration;
    let stacked = spec.external_etcd_configuration.is_none();
    if cpc.count <= 0 || cpc.count > MAX_COUNT {
        at.err(
            Code::InvalidValue,
            "spec.controlPlaneConfiguration.count",
            format!("control plane count must be between 1 and {MAX_COUNT}"),
        );
    } else if stacked && cpc.count % 2 == 0 {
        at.err(
            Code::InvalidValue,
            "spec.controlPlaneConfiguration.count",
            format!(
                "control plane count {} must be odd with stacked etcd (etcd needs a majority)",
                cpc.count
            ),
        );
    }
    let endpoint_host = cpc
        .endpoint
        .as_ref()
        .map(|e| e.host.clone())
        .filter(|h| !h.is_empty());
    if is_vsphere && endpoint_host.is_none() {
        at.err(Code::MissingField, "spec.controlPlaneConfiguration.endpoint", "vSphere clusters need controlPlaneConfiguration.endpoint.host (the kube-vip address of the API server)");
    }
    let cp_machine = machine_ref(
        &mut at,
        &cpc.machine_group_ref,
        "spec.controlPlaneConfiguration.machineGroupRef",
        "the control plane",
    );
    if let Some(t) = &cpc.taints {
        check_taints(&mut at, t, "spec.controlPlaneConfiguration.taints");
    }
    check_labels(
        &mut at,
        &cpc.labels,
        "spec.controlPlaneConfiguration.labels",
    );
    let cp_surge = rollout(
        &mut at,
        &cpc.upgrade_rollout_strategy,
        "spec.controlPlaneConfiguration.upgradeRolloutStrategy",
        false,
    )
    .0;

    // External etcd.
    let etcd = spec.external_etcd_configuration.as_ref().map(|e| {
        if e.count <= 0 || e.count % 2 == 0 || e.count > MAX_COUNT {
            at.err(
                Code::InvalidValue,
                "spec.externalEtcdConfiguration.count",
                format!(
                    "external etcd count {} must be odd, at least 1 and at most {MAX_COUNT}",
                    e.count
                ),
            );
        }
        let machine = machine_ref(
            &mut at,
            &e.machine_group_ref,
            "spec.externalEtcdConfiguration.machineGroupRef",
            "external etcd",
        );
        ExternalEtcd {
            count: e.count.max(0) as u32,
            machine,
        }
    });

    // Workers.
    let mut workers = Vec::new();
    let mut names = BTreeSet::new();
    if spec.worker_node_group_configurations.is_empty() {
        at.err(
            Code::MissingField,
            "spec.workerNodeGroupConfigurations",
            "at least one worker node group is required",
        );
    }
    for (i, w) in spec.worker_node_group_configurations.iter().enumerate() {
        let path = format!("spec.workerNodeGroupConfigurations[{i}]");
        let wname = match (&w.name, i) {
            (Some(n), _) => n.clone(),
            (None, 0) => "md-0".to_string(),
            (None, _) => {
                at.err(
                    Code::MissingField,
                    &path,
                    "worker node groups after the first need a name",
                );
                format!("md-{i}")
            }
        };
        if !is_dns_label(&wname, 63) || name.len() + 1 + wname.len() > 63 {
            at.err(Code::InvalidName, &format!("{path}.name"), format!("worker group name `{wname}` must be a DNS-1123 label and `{name}-{wname}` at most 63 characters"));
        }
        if !names.insert(wname.clone()) {
            at.err(
                Code::DuplicateName,
                &format!("{path}.name"),
                format!("two worker node groups named `{wname}`"),
            );
        }
        let autoscaling = w
            .autoscaling_configuration
            .as_ref()
            .map(|a| (a.min_count, a.max_count));
        let count = w
            .count
            .unwrap_or_else(|| autoscaling.map(|(min, _)| min).unwrap_or(1));
        if !(0..=MAX_COUNT).contains(&count) {
            at.err(
                Code::InvalidValue,
                &format!("{path}.count"),
                format!("worker count must be between 0 and {MAX_COUNT}"),
            );
        }
        if let Some((min, max)) = autoscaling
            && (min < 0
                || !(1..=MAX_COUNT).contains(&max)
                || min > max
                || count < min
                || count > max)
        {
            at.err(
                    Code::InvalidValue,
                    &format!("{path}.autoscalingConfiguration"),
                    format!("autoscaling needs 0 <= minCount <= count <= maxCount and maxCount >= 1 (minCount {min}, count {count}, maxCount {max})"),
                );
        }
        let machine = machine_ref(
            &mut at,
            &w.machine_group_ref,
            &format!("{path}.machineGroupRef"),
            &format!("worker group `{wname}`"),
        );
        let taints = w.taints.clone().unwrap_or_default();
        check_taints(&mut at, &taints, &format!("{path}.taints"));
        check_labels(&mut at, &w.labels, &format!("{path}.labels"));
        let wv = match &w.kubernetes_version {
            None => kubernetes_version,
            Some(v) => match (KubeVersion::parse(v), kubernetes_version) {
                (None, _) => {
                    at.err(
                        Code::InvalidValue,
                        &format!("{path}.kubernetesVersion"),
                        format!(
                            "kubernetesVersion `{v}` is not a Kubernetes minor such as \"1.31\""
                        ),
                    );
                    None
                }
                (Some(wv), Some(cp)) => {
                    if wv.major != cp.major || wv.minor > cp.minor || cp.minor - wv.minor > 2 {
                        at.err(
                            Code::VersionSkew,
                            &format!("{path}.kubernetesVersion"),
                            format!("worker group `{wname}` runs Kubernetes {wv} but the control plane runs {cp}: workers may lag the control plane by at most 2 minors and never lead it"),
                        );
                    }
                    Some(wv)
                }
                (Some(wv), None) => Some(wv),
            },
        };
        let (max_surge, max_unavailable) = rollout(
            &mut at,
            &w.upgrade_rollout_strategy,
            &format!("{path}.upgradeRolloutStrategy"),
            true,
        );
        workers.push(WorkerGroup {
            name: wname,
            replicas: if autoscaling.is_some() {
                None
            } else {
                Some(count.max(0) as u32)
            },
            autoscaling: autoscaling.map(|(a, b)| (a.max(0) as u32, b.max(0) as u32)),
            machine,
            taints,
            labels: w.labels.clone(),
            kubernetes_version: wv.unwrap_or(KubeVersion { major: 1, minor: 0 }),
            max_surge,
            max_unavailable,
        });
    }
    if management == name
        && !workers.is_empty()
        && workers.iter().all(|w| {
            w.taints
                .iter()
                .any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        })
    {
        at.err(Code::InvalidValue, "spec.workerNodeGroupConfigurations", "a management cluster needs at least one worker group without NoSchedule or NoExecute taints to run its controllers");
    }

    // Network.
    let pods = cidr(
        &mut at,
        &spec.cluster_network.pods.cidr_blocks,
        "spec.clusterNetwork.pods.cidrBlocks",
    );
    let services = cidr(
        &mut at,
        &spec.cluster_network.services.cidr_blocks,
        "spec.clusterNetwork.services.cidrBlocks",
    );
    if let (Some(p), Some(s)) = (pods, services)
        && (p.contains(&s.network()) || s.contains(&p.network()))
    {
        at.err(
            Code::CidrOverlap,
            "spec.clusterNetwork.services.cidrBlocks",
            format!("service CIDR {s} overlaps pod CIDR {p}"),
        );
    }
    let cilium = cilium(
        &mut at,
        spec.cluster_network
            .cni_config
            .as_ref()
            .and_then(|c| c.cilium.clone()),
    );

    // Health checks.
    let health = health(&mut at, spec.machine_health_check.as_ref());

    // Unused machine configs.
    for m in &vsphere_machines {
        if !used_machines.contains(&m.meta.name) {
            At {
                sd: &docs[m.src],
                diags: at.diags,
            }
            .warn(
                Code::UnusedObject,
                "metadata.name",
                format!(
                    "VSphereMachineConfig `{}` is not referenced by the cluster",
                    m.meta.name
                ),
            );
        }
    }

    let eksa_objects = eksa_objects(
        docs,
        &clusters,
        &docker_datacenters,
        &vsphere_datacenters,
        &vsphere_machines,
        &namespace,
        &management,
        &name,
    );
    Some(Cluster {
        name,
        namespace,
        kubernetes_version: kubernetes_version?,
        management,
        eksa_version: spec.eksa_version.clone(),
        bundles_ref,
        provider: provider?,
        control_plane: ControlPlane {
            count: cpc.count.max(0) as u32,
            endpoint_host,
            machine: cp_machine,
            taints: cpc.taints.clone(),
            labels: cpc.labels.clone(),
            max_surge: cp_surge,
        },
        etcd,
        workers,
        network: Network {
            pods: pods?,
            services: services?,
            cilium,
        },
        health,
        eksa_objects,
        extra_objects: extras,
        sources: docs
            .iter()
            .filter_map(|d| {
                let kind = d.doc.value.get("kind")?.as_str()?.to_string();
                let name = d.doc.value.pointer("/metadata/name")?.as_str()?.to_string();
                Some(super::ObjectSource {
                    kind,
                    name,
                    file: d.file.clone(),
                    pos: d.doc.pos("metadata.name"),
                })
            })
            .collect(),
        source: Source {
            file: sd.file.clone(),
            doc: sd.doc.clone(),
        },
    })
}

fn vsphere(
    dc: &Parsed<raw::VSphereDatacenterSpec>,
    machines: &[Parsed<raw::VSphereMachineSpec>],
    docs: &[SourceDoc],
    diags: &mut Vec<Diagnostic>,
) -> VSphere {
    let s = &dc.spec;
    let network = if s.network.starts_with('/') {
        s.network.clone()
    } else {
        format!("/{}/network/{}", s.datacenter, s.network)
    };
    let thumbprint = if s.insecure == Some(true) {
        String::new()
    } else {
        s.thumbprint.clone().unwrap_or_default()
    };
    let mut out = BTreeMap::new();
    for m in machines {
        let mut at = At {
            sd: &docs[m.src],
            diags,
        };
        let s = &m.spec;
        let memory_mib = s.memory_mib.unwrap_or(8192);
        if memory_mib < 2048 {
            at.err(
                Code::InvalidValue,
                "spec.memoryMiB",
                format!("memoryMiB {memory_mib} is below the minimum of 2048"),
            );
        }
        let num_cpus = s.num_cpus.unwrap_or(2);
        if num_cpus < 1 {
            at.err(
                Code::InvalidValue,
                "spec.numCPUs",
                "numCPUs must be at least 1",
            );
        }
        let disk_gib = s.disk_gib.unwrap_or(25);
        if disk_gib < 1 {
            at.err(
                Code::InvalidValue,
                "spec.diskGiB",
                "diskGiB must be at least 1",
            );
        }
        let os_family = s.os_family.clone().unwrap_or_else(|| "bottlerocket".into());
        match os_family.as_str() {
            "ubuntu" | "redhat" => {}
            "bottlerocket" => at.err(
                Code::InvalidValue,
                if s.os_family.is_some() { "spec.osFamily" } else { "spec" },
                "osFamily bottlerocket (EKS Anywhere's default) is not supported yet: upstream Cluster API kubeadm bootstrap has no bottlerocket format; set osFamily: ubuntu or redhat",
            ),
            other => at.err(Code::InvalidValue, "spec.osFamily", format!("osFamily `{other}` must be one of ubuntu, redhat")),
        }
        if let Some(mode) = &s.clone_mode
            && mode != "fullClone"
            && mode != "linkedClone"
        {
            at.err(
                Code::InvalidValue,
                "spec.cloneMode",
                format!("cloneMode `{mode}` must be fullClone or linkedClone"),
            );
        }
        let template = match &s.template {
            Some(t) if !t.is_empty() => t.clone(),
            _ => {
                at.err(Code::MissingField, "spec.template", "VSphereMachineConfig needs the template (OVA) to clone; capstan does not import OVAs");
                String::new()
            }
        };
        let user = s.users.first().map(|u| {
            (
                u.name.clone(),
                u.ssh_authorized_keys.first().cloned().unwrap_or_default(),
            )
        });
        out.insert(
            m.meta.name.clone(),
            VSphereMachine {
                datastore: s.datastore.clone(),
                folder: s.folder.clone().unwrap_or_default(),
                memory_mib,
                num_cpus,
                disk_gib,
                os_family,
                resource_pool: s.resource_pool.clone(),
                template,
                user,
                storage_policy_name: s.storage_policy_name.clone().unwrap_or_default(),
                clone_mode: s.clone_mode.clone().unwrap_or_default(),
                tags: s.tags.clone(),
            },
        );
    }
    VSphere {
        server: s.server.clone(),
        datacenter: s.datacenter.clone(),
        network,
        thumbprint,
        machines: out,
    }
}

fn check_taints(at: &mut At, taints: &[Taint], path: &str) {
    for (i, t) in taints.iter().enumerate() {
        if !matches!(
            t.effect.as_str(),
            "NoSchedule" | "PreferNoSchedule" | "NoExecute"
        ) {
            at.err(
                Code::InvalidValue,
                &format!("{path}[{i}].effect"),
                format!(
                    "taint effect `{}` must be NoSchedule, PreferNoSchedule or NoExecute",
                    t.effect
                ),
            );
        }
        if t.key.is_empty() {
            at.err(
                Code::InvalidValue,
                &format!("{path}[{i}].key"),
                "taint key cannot be empty",
            );
        }
    }
}

fn check_labels(at: &mut At, labels: &BTreeMap<String, String>, path: &str) {
    for (k, v) in labels {
        let name = k.rsplit('/').next().unwrap_or(k);
        let ok_name = !name.is_empty()
            && name.len() <= 63
            && name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(&c));
        let ok_value = v.len() <= 63
            && v.bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(&c));
        if !ok_name || !ok_value || v.contains(',') {
            at.err(
                Code::InvalidValue,
                &format!("{path}.{k}"),
                format!("label `{k}: {v}` is not a valid Kubernetes label"),
            );
        }
    }
}

fn rollout(
    at: &mut At,
    r: &Option<raw::RolloutStrategy>,
    path: &str,
    workers: bool,
) -> (Option<Value>, Option<Value>) {
    let Some(r) = r else { return (None, None) };
    if let Some(kind) = &r.kind {
        match kind.as_str() {
            "RollingUpdate" => {}
            "InPlace" => at.err(
                Code::UnsupportedField,
                &format!("{path}.type"),
                "in-place upgrades are not supported by capstan yet; use RollingUpdate",
            ),
            other => at.err(
                Code::InvalidValue,
                &format!("{path}.type"),
                format!("rollout type `{other}` must be RollingUpdate"),
            ),
        }
    }
    let Some(ru) = &r.rolling_update else {
        return (None, None);
    };
    for (field, v) in [
        ("maxSurge", &ru.max_surge),
        ("maxUnavailable", &ru.max_unavailable),
    ] {
        if let Some(v) = v
            && !int_or_percent(v)
        {
            at.err(
                Code::InvalidValue,
                &format!("{path}.rollingUpdate.{field}"),
                format!("{field} must be a number or a percentage such as \"25%\""),
            );
        }
    }
    if !workers && ru.max_unavailable.is_some() {
        at.err(
            Code::InvalidValue,
            &format!("{path}.rollingUpdate.maxUnavailable"),
            "the control plane only supports maxSurge",
        );
    }
    (ru.max_surge.clone(), ru.max_unavailable.clone())
}

fn int_or_percent(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.as_u64().is_some(),
        Value::String(s) => s
            .strip_suffix('%')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit())),
        _ => false,
    }
}

fn cidr(at: &mut At, blocks: &[String], path: &str) -> Option<IpNet> {
    if blocks.len() != 1 {
        at.err(
            Code::InvalidCidr,
            path,
            format!("exactly one CIDR block is required, found {}", blocks.len()),
        );
        return None;
    }
    match blocks[0].parse::<IpNet>() {
        Ok(net) if net.trunc() == net => Some(net),
        Ok(net) => {
            at.err(
                Code::InvalidCidr,
                &format!("{path}[0]"),
                format!(
                    "`{}` has host bits set; did you mean {}?",
                    blocks[0],
                    net.trunc()
                ),
            );
            None
        }
        Err(_) => {
            at.err(
                Code::InvalidCidr,
                &format!("{path}[0]"),
                format!("`{}` is not a CIDR such as 192.168.0.0/16", blocks[0]),
            );
            None
        }
    }
}

fn cilium(at: &mut At, c: Option<raw::Cilium>) -> raw::Cilium {
    let mut c = c.unwrap_or_default();
    let base = "spec.clusterNetwork.cniConfig.cilium";
    let mode = c
        .policy_enforcement_mode
        .get_or_insert_with(|| "default".into());
    if !matches!(mode.as_str(), "default" | "always" | "never") {
        at.err(
            Code::InvalidValue,
            &format!("{base}.policyEnforcementMode"),
            format!("policyEnforcementMode `{mode}` must be default, always or never"),
        );
    }
    let routing = c.routing_mode.get_or_insert_with(|| "overlay".into());
    match routing.as_str() {
        "overlay" => {}
        "direct" if c.ipv4_native_routing_cidr.is_none() => {
            at.err(
                Code::MissingField,
                &format!("{base}.routingMode"),
                "routingMode direct requires ipv4NativeRoutingCIDR",
            );
        }
        "direct" => {}
        other => at.err(
            Code::InvalidValue,
            &format!("{base}.routingMode"),
            format!("routingMode `{other}` must be overlay or direct"),
        ),
    }
    if let Some(v) = &c.helm_values
        && !v.is_object()
    {
        at.err(
            Code::InvalidType,
            &format!("{base}.helmValues"),
            "helmValues must be a mapping of Helm values",
        );
    }
    c
}

fn health(at: &mut At, m: Option<&raw::MachineHealthCheck>) -> HealthCheck {
    let base = "spec.machineHealthCheck";
    let dur = |at: &mut At, v: Option<&String>, field: &str, default: u64| match v {
        None => default,
        Some(s) => parse_duration_seconds(s).unwrap_or_else(|| {
            at.err(
                Code::InvalidValue,
                &format!("{base}.{field}"),
                format!("{field} `{s}` is not a duration such as 10m or 5m0s"),
            );
            default
        }),
    };
    let node_startup_timeout_seconds = dur(
        at,
        m.and_then(|m| m.node_startup_timeout.as_ref()),
        "nodeStartupTimeout",
        600,
    );
    let unhealthy_machine_timeout_seconds = dur(
        at,
        m.and_then(|m| m.unhealthy_machine_timeout.as_ref()),
        "unhealthyMachineTimeout",
        300,
    );
    let max = m.and_then(|m| m.max_unhealthy.clone());
    if let Some(v) = &max
        && !int_or_percent(v)
    {
        at.err(
            Code::InvalidValue,
            &format!("{base}.maxUnhealthy"),
            "maxUnhealthy must be a number or a percentage such as \"40%\"",
        );
    }
    HealthCheck {
        node_startup_timeout_seconds,
        unhealthy_machine_timeout_seconds,
        control_plane_max_unhealthy: max.clone().unwrap_or_else(|| json!("100%")),
        workers_max_unhealthy: max.unwrap_or_else(|| json!("40%")),
    }
}

/// The EKS-A objects as capstan applies them: namespace filled in, paused for the EKS-A
/// controller (capstan reconciles them; the annotation also lets the EKS-A webhook accept a
/// self-managed Cluster), workloads marked with their manager, status dropped.
#[allow(clippy::too_many_arguments)]
fn eksa_objects(
    docs: &[SourceDoc],
    clusters: &[Parsed<raw::ClusterSpec>],
    docker: &[Parsed<raw::DockerDatacenterSpec>],
    vsphere: &[Parsed<raw::VSphereDatacenterSpec>],
    machines: &[Parsed<raw::VSphereMachineSpec>],
    namespace: &str,
    management: &str,
    name: &str,
) -> Vec<Value> {
    let srcs = docker
        .iter()
        .map(|p| p.src)
        .chain(vsphere.iter().map(|p| p.src))
        .chain(machines.iter().map(|p| p.src))
        .chain(clusters.iter().map(|p| p.src));
    srcs.map(|src| {
        let mut v = docs[src].doc.value.clone();
        let obj = v.as_object_mut().expect("typed objects are mappings");
        obj.remove("status");
        // EKS-A's CRD requires `insecure` and `thumbprint` (its defaulter fills them in).
        if obj.get("kind").and_then(Value::as_str) == Some("VSphereDatacenterConfig")
            && let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
        {
            spec.entry("insecure").or_insert(json!(false));
            spec.entry("thumbprint").or_insert(json!(""));
        }
        let meta = obj
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .expect("typed objects have metadata");
        meta.insert("namespace".into(), Value::String(namespace.to_string()));
        let ann = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(ann) = ann.as_object_mut() {
            ann.insert("anywhere.eks.amazonaws.com/paused".into(), json!("true"));
            if management != name {
                ann.insert(
                    "anywhere.eks.amazonaws.com/managed-by".into(),
                    json!(management),
                );
            }
        }
        v
    })
    .collect()
}
