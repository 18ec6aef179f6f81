//! Single-cluster rules and EKS Anywhere's defaults: raw objects in, a [`Cluster`] out.
//!
//! The rules follow EKS Anywhere's webhooks and defaulters (see the reference notes): control
//! plane and etcd counts, provider requirements, worker-group defaults and version skew, taints,
//! CIDRs, Cilium and health-check settings, and the optional features (`options`). Every problem
//! is reported with the position of the field it concerns; validation goes on after a problem so
//! one run reports them all.
//!
//! ```text
//!   mod.rs      the cluster as a whole: names, versions, provider, control plane, etcd, workers
//!   fields.rs   taints, labels, rollouts, CIDRs, Cilium, health checks
//!   options.rs  proxy, registry mirror, pod IAM, etcd encryption, OIDC flags, kubelet patches
//!   vsphere.rs  datacenter and machine configs
//! ```

mod fields;
mod options;
mod vsphere;

use std::collections::BTreeSet;

use serde_json::{Value, json};

use self::fields::{
    check_labels, check_taints, cidr, cilium, cp_rollout, health, health_override, worker_rollout,
};
use self::vsphere::vsphere;
use super::parse::{Objects, Parsed, SourceDoc};
use super::raw;
use super::{
    Cluster, ControlPlane, DEFAULT_NAMESPACE, DOCKER_BACKEND_ANNOTATION, DockerBackend,
    ExternalEtcd, KubeVersion, Network, Provider, Source, WorkerGroup, is_dns_label,
};
use crate::diag::{Code, Diagnostic};
use crate::json_text::JsonText;

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
        oidc_configs,
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
        )
        .chain(oidc_configs.iter().map(|p| ("OIDCConfig", &p.meta, p.src)));
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
    let cp_surge = cp_rollout(
        &mut at,
        &cpc.upgrade_rollout_strategy,
        "spec.controlPlaneConfiguration.upgradeRolloutStrategy",
    );
    options::cert_sans(&mut at, &cpc.cert_sans);
    let oidc = oidc(&mut at, spec, &oidc_configs, docs);
    options::api_server_extra_args(&mut at, &cpc.api_server_extra_args, oidc.is_some());
    let cp_kubelet = options::kubelet_configuration(
        &mut at,
        cpc.kubelet_configuration.as_ref(),
        "spec.controlPlaneConfiguration.kubeletConfiguration",
    );
    let audit_policy = options::audit_policy(&mut at, cpc.audit_policy_content.as_ref());
    let cp_health = health_override(
        &mut at,
        cpc.machine_health_check.as_ref(),
        "spec.controlPlaneConfiguration.machineHealthCheck",
    );

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
    // EKS-A's vSphere defaulter gives etcd machines at least 8192 MiB; so does the renderer.
    if let (
        Some(ExternalEtcd {
            machine: Some(m), ..
        }),
        true,
    ) = (&etcd, is_vsphere)
        && let Some(p) = vsphere_machines.iter().find(|p| &p.meta.name == m)
        && let Some(mem) = p.spec.memory_mib
        && mem < crate::render::ETCD_MIN_MEMORY_MIB
    {
        At {
            sd: &docs[p.src],
            diags: at.diags,
        }
        .warn(
            Code::InvalidValue,
            "spec.memoryMiB",
            format!(
                "memoryMiB {mem} is below the {} MiB etcd machines need; as EKS Anywhere does, the etcd machines get {}",
                crate::render::ETCD_MIN_MEMORY_MIB,
                crate::render::ETCD_MIN_MEMORY_MIB
            ),
        );
    }

    // Workers.
    let mut workers = Vec::new();
    let mut names = BTreeSet::new();
    // A control-plane-only cluster runs its workloads on untainted control-plane nodes (EKS-A's
    // templates render it so; its config validation allows it on bare metal only).
    if spec.worker_node_group_configurations.is_empty()
        && cpc.taints.as_ref().is_some_and(|t| !t.is_empty())
    {
        at.err(
            Code::InvalidValue,
            "spec.controlPlaneConfiguration.taints",
            "a cluster without worker node groups runs its workloads on the control plane, so the control plane cannot be tainted: remove the taints or add a worker node group",
        );
    }
    let failure_domains: BTreeSet<String> = match &provider {
        Some(Provider::VSphere(v)) => v.failure_domains.iter().map(|f| f.name.clone()).collect(),
        _ => BTreeSet::new(),
    };
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
        let rollout = worker_rollout(
            &mut at,
            &w.upgrade_rollout_strategy,
            &format!("{path}.upgradeRolloutStrategy"),
        );
        let kubelet_configuration = options::kubelet_configuration(
            &mut at,
            w.kubelet_configuration.as_ref(),
            &format!("{path}.kubeletConfiguration"),
        );
        let health = health_override(
            &mut at,
            w.machine_health_check.as_ref(),
            &format!("{path}.machineHealthCheck"),
        );
        let failure_domain = w.failure_domains.first().cloned();
        for (j, fd) in w.failure_domains.iter().enumerate() {
            let fpath = format!("{path}.failureDomains[{j}]");
            if !is_vsphere {
                at.err(
                    Code::InvalidValue,
                    &fpath,
                    "failure domains are a vSphere feature",
                );
            } else if !failure_domains.contains(fd) {
                at.err(
                    Code::DanglingRef,
                    &fpath,
                    format!("failure domain `{fd}` is not in the VSphereDatacenterConfig's failureDomains"),
                );
            } else if j > 0 {
                at.warn(
                    Code::UnusedObject,
                    &fpath,
                    format!("only the first failure domain of a worker group is used (as in EKS Anywhere); `{fd}` is ignored"),
                );
            }
        }
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
            rollout,
            kubelet_configuration,
            failure_domain,
            health,
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
    if spec
        .cluster_network
        .cni_config
        .as_ref()
        .is_some_and(|c| c.kindnetd.is_some())
    {
        at.err(Code::InvalidValue, "spec.clusterNetwork.cniConfig.kindnetd", "kindnetd is EKS Anywhere's development-only CNI of its CLI's docker path (its controller installs Cilium only); capstan installs Cilium: use cniConfig: {cilium: {}}");
    }
    let cilium = cilium(
        &mut at,
        spec.cluster_network
            .cni_config
            .as_ref()
            .and_then(|c| c.cilium.clone()),
    );
    let node_cidr_mask_size =
        options::node_cidr_mask(&mut at, spec.cluster_network.nodes.as_ref(), pods);
    let resolv_conf = options::resolv_conf(&mut at, spec.cluster_network.dns.as_ref());

    // Optional features.
    let proxy = options::proxy(&mut at, spec.proxy_configuration.as_ref());
    let registry_mirror =
        options::registry_mirror(&mut at, spec.registry_mirror_configuration.as_ref());
    let pod_iam_issuer = options::pod_iam(&mut at, spec.pod_iam_config.as_ref());
    let etcd_encryption =
        options::etcd_encryption(&mut at, spec.etcd_encryption.as_ref(), is_vsphere);

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
        &clusters,
        &docker_datacenters,
        &vsphere_datacenters,
        &vsphere_machines,
        &oidc_configs,
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
            cert_sans: cpc.cert_sans.clone(),
            api_server_extra_args: cpc.api_server_extra_args.clone(),
            kubelet_configuration: cp_kubelet,
            audit_policy,
            health: cp_health,
        },
        etcd,
        workers,
        network: Network {
            pods: pods?,
            services: services?,
            cilium,
            node_cidr_mask_size,
            resolv_conf,
        },
        health,
        proxy,
        registry_mirror,
        pod_iam_issuer,
        etcd_encryption,
        oidc,
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
            positions: sd.doc.positions(),
        },
    })
}

/// The OIDCConfig of `identityProviderRefs` (at most one); an AWSIamConfig is refused where its
/// kind is written.
fn oidc(
    at: &mut At,
    spec: &raw::ClusterSpec,
    configs: &[Parsed<raw::OidcSpec>],
    docs: &[SourceDoc],
) -> Option<raw::OidcSpec> {
    let mut found = None;
    for (i, r) in spec.identity_provider_refs.iter().enumerate() {
        let path = format!("spec.identityProviderRefs[{i}]");
        match r.kind.as_str() {
            "OIDCConfig" => {
                if found.is_some() {
                    at.err(
                        Code::InvalidValue,
                        &path,
                        "only one OIDCConfig identity provider is supported (as in EKS Anywhere)",
                    );
                    continue;
                }
                match configs.iter().find(|c| c.meta.name == r.name) {
                    Some(c) => {
                        let mut cat = At {
                            sd: &docs[c.src],
                            diags: at.diags,
                        };
                        check_oidc(&mut cat, &c.spec);
                        found = Some(c.spec.clone());
                    }
                    None if present(docs, "OIDCConfig", Some(&r.name)) => {}
                    None => at.err(
                        Code::DanglingRef,
                        &format!("{path}.name"),
                        format!("OIDCConfig `{}` is not in this cluster directory", r.name),
                    ),
                }
            }
            "AWSIamConfig" => at.err(
                Code::UnsupportedField,
                &format!("{path}.kind"),
                "AWS IAM authentication needs the authenticator EKS Anywhere's controller deploys and the CA Secret it creates, which capstan does not run: use an OIDCConfig identity provider",
            ),
            other => at.err(
                Code::InvalidValue,
                &format!("{path}.kind"),
                format!("identity provider kind `{other}` must be OIDCConfig"),
            ),
        }
    }
    for c in configs {
        if !spec
            .identity_provider_refs
            .iter()
            .any(|r| r.kind == "OIDCConfig" && r.name == c.meta.name)
        {
            At {
                sd: &docs[c.src],
                diags: at.diags,
            }
            .warn(
                Code::UnusedObject,
                "metadata.name",
                format!(
                    "OIDCConfig `{}` is not referenced by the cluster's identityProviderRefs",
                    c.meta.name
                ),
            );
        }
    }
    found
}

fn check_oidc(at: &mut At, o: &raw::OidcSpec) {
    if o.client_id.is_empty() {
        at.err(
            Code::MissingField,
            "spec.clientId",
            "OIDCConfig needs clientId",
        );
    }
    if !o.issuer_url.starts_with("https://") {
        at.err(
            Code::InvalidValue,
            "spec.issuerUrl",
            "OIDCConfig issuerUrl must be an https:// URL",
        );
    }
    if o.required_claims.len() > 1 {
        at.err(
            Code::InvalidValue,
            "spec.requiredClaims",
            "only one required claim is supported (as in EKS Anywhere)",
        );
    }
}

/// The EKS-A objects as capstan applies them: namespace filled in, paused for the EKS-A
/// controller (capstan reconciles them; the annotation also lets the EKS-A webhook accept a
/// self-managed Cluster), workloads marked with their manager, status dropped.
#[allow(clippy::too_many_arguments)]
fn eksa_objects(
    clusters: &[Parsed<raw::ClusterSpec>],
    docker: &[Parsed<raw::DockerDatacenterSpec>],
    vsphere: &[Parsed<raw::VSphereDatacenterSpec>],
    machines: &[Parsed<raw::VSphereMachineSpec>],
    oidc: &[Parsed<raw::OidcSpec>],
    namespace: &str,
    management: &str,
    name: &str,
) -> Vec<JsonText> {
    let values = docker
        .iter()
        .map(|p| &p.value)
        .chain(vsphere.iter().map(|p| &p.value))
        .chain(machines.iter().map(|p| &p.value))
        .chain(oidc.iter().map(|p| &p.value))
        .chain(clusters.iter().map(|p| &p.value));
    values
        .map(|value| {
            let mut v = value.clone();
            let obj = v.as_object_mut().expect("typed objects are mappings");
            obj.remove("status");
            // EKS-A's CRD requires `insecure` and `thumbprint` (its defaulter fills them in).
            if obj.get("kind").and_then(Value::as_str) == Some("VSphereDatacenterConfig")
                && let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
            {
                spec.entry("insecure").or_insert(json!(false));
                spec.entry("thumbprint").or_insert(json!(""));
            }
            // A DockerDatacenterConfig written with a null spec is applied with an empty one.
            if obj.get("spec").is_some_and(Value::is_null) {
                obj.insert("spec".into(), json!({}));
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
            JsonText::new(&v)
        })
        .collect()
}
