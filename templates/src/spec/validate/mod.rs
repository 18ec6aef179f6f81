//! Single-cluster rules and EKS Anywhere's defaults: raw objects in, a [`Cluster`] out.
//!
//! The rules follow EKS Anywhere's webhooks and defaulters (see the reference notes): control
//! plane and etcd counts, provider requirements, worker-group defaults and version skew, taints,
//! CIDRs, Cilium and health-check settings, and the optional features (`options`). Every problem
//! is reported with the position of the field it concerns; validation goes on after a problem so
//! one run reports them all.
//!
//! [`validate`] runs the checks in a fixed order, one concern after another, so the diagnostics
//! of a directory always come out in the same order (the golden tests and the bad-input corpus
//! compare them):
//!
//! ```text
//!   mod.rs            the order of the checks; the one Cluster, names and namespaces, versions
//!   provider.rs       the datacenter reference and the machine configs the parts reference
//!   control_plane.rs  control plane and external etcd
//!   identity.rs       the identity providers: OIDCConfig, AWSIamConfig
//!   workers.rs        worker node groups: names, counts, version skew, failure domains
//!   network.rs        pod and service CIDRs, the CNI, node CIDR mask, resolv.conf
//!   fields.rs         taints, labels, rollouts, CIDRs, Cilium, health checks
//!   options.rs        proxy, registry mirror, pod IAM, etcd encryption, OIDC flags, kubelet patches
//!   vsphere.rs        datacenter and machine configs
//!   nutanix.rs        datacenter and machine configs
//!   tinkerbell.rs     datacenter, machine and template configs; the default workflow
//!   eksa_objects.rs   the EKS-A objects as capstan applies them
//! ```

mod control_plane;
mod eksa_objects;
mod fields;
mod identity;
mod license;
mod network;
mod nutanix;
mod options;
mod packages;
mod provider;
mod tinkerbell;
mod vsphere;
mod workers;

use std::collections::BTreeSet;

use serde_json::Value;

use self::fields::health;
use self::provider::MachineRefs;
use super::parse::{Objects, Parsed, SourceDoc};
use super::raw;
use super::{Cluster, DEFAULT_NAMESPACE, KubeVersion, Provider, Source, is_dns_label};
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

/// The directory's cluster with EKS Anywhere's defaults, when its objects pass every check (run
/// in the order below, each reporting all it finds).
pub(crate) fn validate(
    docs: &[SourceDoc],
    objects: Objects,
    diags: &mut Vec<Diagnostic>,
) -> Option<Cluster> {
    let cluster = the_cluster(docs, &objects.clusters, diags)?;
    let sd = &docs[cluster.src];
    let spec = &cluster.spec;
    let name = cluster.meta.name.clone();
    let namespace = cluster
        .meta
        .namespace
        .clone()
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
    let mut at = At { sd, diags };

    check_cluster_names(&mut at, &name, &namespace);
    check_object_names(at.diags, docs, &objects, &namespace);
    let versions = versions(&mut at, spec, &name);
    let provider = provider::provider(&mut at, docs, &objects, (&name, spec));
    // From the reference, not the resolved provider: a broken datacenter config must not make
    // the cluster look like docker.
    let mut machines = MachineRefs::new(docs, &objects, &spec.datacenter_ref.kind);
    let (control_plane, oidc) =
        control_plane::control_plane(&mut at, spec, &mut machines, &objects.oidc_configs);
    let etcd = control_plane::external_etcd(&mut at, spec, &mut machines);
    if matches!(provider, Some(Provider::Nutanix(_))) {
        nutanix::gpus_on_workers_only(
            &objects.nutanix_machines,
            &[
                ("the control plane", control_plane.machine.as_ref()),
                ("etcd", etcd.as_ref().and_then(|e| e.machine.as_ref())),
            ],
            docs,
            at.diags,
        );
    }
    let workers = workers::workers(
        &mut at,
        spec,
        &name,
        &versions,
        provider.as_ref(),
        &mut machines,
    );
    let network = network::network(&mut at, &spec.cluster_network);

    // Optional features.
    let proxy = options::proxy(&mut at, spec.proxy_configuration.as_ref());
    let registry_mirror =
        options::registry_mirror(&mut at, spec.registry_mirror_configuration.as_ref());
    let pod_iam_issuer = options::pod_iam(&mut at, spec.pod_iam_config.as_ref());
    let aws_iam = identity::aws_iam(
        &mut at,
        spec,
        &objects.aws_iam_configs,
        docs,
        versions.management == name,
    );
    license::license_token(&mut at, spec.license_token.as_ref());
    let packages = packages::packages(
        &mut at,
        spec.packages.as_ref(),
        versions.management == name,
        registry_mirror.as_ref(),
    );
    let etcd_encryption = options::etcd_encryption(
        &mut at,
        spec.etcd_encryption.as_ref(),
        machines.kind.is_some() && machines.kind != Some("TinkerbellMachineConfig"),
    );

    // Health checks.
    let health = health(
        &mut at,
        spec.machine_health_check.as_ref(),
        matches!(provider, Some(Provider::Tinkerbell(_))),
    );

    // Unused machine configs.
    machines.warn_unused(at.diags);

    let eksa_objects =
        eksa_objects::eksa_objects(&objects, &namespace, &versions.management, &name);
    Some(Cluster {
        name,
        namespace,
        kubernetes_version: versions.kubernetes?,
        management: versions.management,
        eksa_version: spec.eksa_version.clone(),
        bundles_ref: versions.bundles_ref,
        provider: provider?,
        control_plane,
        etcd,
        workers,
        network: network?,
        health,
        proxy,
        registry_mirror,
        pod_iam_issuer,
        etcd_encryption,
        oidc,
        aws_iam,
        packages,
        eksa_objects,
        extra_objects: objects.extras,
        sources: sources(docs),
        source: Source {
            file: sd.file.clone(),
            positions: sd.doc.positions(),
        },
    })
}

/// The directory's one Cluster; None (reported) when it has none or several.
fn the_cluster<'o>(
    docs: &[SourceDoc],
    clusters: &'o [Parsed<raw::ClusterSpec>],
    diags: &mut Vec<Diagnostic>,
) -> Option<&'o Parsed<raw::ClusterSpec>> {
    match clusters.len() {
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
            None
        }
        1 => Some(&clusters[0]),
        _ => {
            for extra in &clusters[1..] {
                let sd = &docs[extra.src];
                At { sd, diags }.err(
                    Code::MultipleClusters,
                    "metadata.name",
                    format!("second Cluster `{}` in one directory; each cluster has a directory of its own", extra.meta.name),
                );
            }
            None
        }
    }
}

/// Whether the cluster's name and namespace are DNS-1123 labels short enough for what capstan
/// derives from them.
fn check_cluster_names(at: &mut At, name: &str, namespace: &str) {
    if !is_dns_label(name, MAX_CLUSTER_NAME) {
        at.err(
            Code::InvalidName,
            "metadata.name",
            format!("cluster name `{name}` must be a DNS-1123 label (lowercase letters, digits, '-', starting with a letter) of at most {MAX_CLUSTER_NAME} characters"),
        );
    }
    if !is_dns_label(namespace, 63) {
        at.err(
            Code::InvalidName,
            "metadata.namespace",
            format!("namespace `{namespace}` is not a DNS-1123 label"),
        );
    }
}

/// Whether every EKS-A object of the directory lives in the cluster's namespace, has a name
/// unique for its kind, and (but the Cluster, checked on its own) a DNS-1123 name.
fn check_object_names(
    diags: &mut Vec<Diagnostic>,
    docs: &[SourceDoc],
    objects: &Objects,
    namespace: &str,
) {
    let mut seen: BTreeSet<(&str, &str)> = BTreeSet::new();
    let all_meta = objects
        .clusters
        .iter()
        .map(|p| ("Cluster", &p.meta, p.src))
        .chain(
            objects
                .docker_datacenters
                .iter()
                .map(|p| ("DockerDatacenterConfig", &p.meta, p.src)),
        )
        .chain(
            objects
                .vsphere_datacenters
                .iter()
                .map(|p| ("VSphereDatacenterConfig", &p.meta, p.src)),
        )
        .chain(
            objects
                .vsphere_machines
                .iter()
                .map(|p| ("VSphereMachineConfig", &p.meta, p.src)),
        )
        .chain(
            objects
                .nutanix_datacenters
                .iter()
                .map(|p| ("NutanixDatacenterConfig", &p.meta, p.src)),
        )
        .chain(
            objects
                .nutanix_machines
                .iter()
                .map(|p| ("NutanixMachineConfig", &p.meta, p.src)),
        )
        .chain(
            objects
                .tinkerbell_datacenters
                .iter()
                .map(|p| ("TinkerbellDatacenterConfig", &p.meta, p.src)),
        )
        .chain(
            objects
                .tinkerbell_machines
                .iter()
                .map(|p| ("TinkerbellMachineConfig", &p.meta, p.src)),
        )
        .chain(
            objects
                .tinkerbell_templates
                .iter()
                .map(|p| ("TinkerbellTemplateConfig", &p.meta, p.src)),
        )
        .chain(
            objects
                .oidc_configs
                .iter()
                .map(|p| ("OIDCConfig", &p.meta, p.src)),
        )
        .chain(
            objects
                .aws_iam_configs
                .iter()
                .map(|p| ("AWSIamConfig", &p.meta, p.src)),
        );
    for (kind, meta, src) in all_meta {
        let mut at = At {
            sd: &docs[src],
            diags,
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
}

/// The cluster's versions and its management cluster, as written.
struct Versions {
    /// The control plane's Kubernetes minor; None when it is not one (reported).
    kubernetes: Option<KubeVersion>,
    /// The managing cluster's name (the cluster's own when self-managed).
    management: String,
    /// The deprecated bundlesRef's name, when written.
    bundles_ref: Option<String>,
}

/// Whether kubernetesVersion is a Kubernetes minor, eksaVersion a version, and bundlesRef (deprecated)
/// written without eksaVersion; and which cluster manages this one.
fn versions(at: &mut At, spec: &raw::ClusterSpec, name: &str) -> Versions {
    let kubernetes = KubeVersion::parse(&spec.kubernetes_version);
    if kubernetes.is_none() {
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
        _ => name.to_string(),
    };
    if let Some(v) = &spec.eksa_version
        && crate::spec::SemVer::parse(v).is_none()
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
    Versions {
        kubernetes,
        management,
        bundles_ref,
    }
}

/// Where each object of the directory is written (by kind and name), for diagnostics about
/// objects after rendering.
fn sources(docs: &[SourceDoc]) -> Vec<super::ObjectSource> {
    docs.iter()
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
        .collect()
}
