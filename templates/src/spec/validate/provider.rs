//! The provider a cluster runs on and the machine configs its parts use.
//!
//! `datacenterRef` picks the provider: a DockerDatacenterConfig (whose annotation chooses CAPD's
//! backend), a VSphereDatacenterConfig (checked in `vsphere`) or a NutanixDatacenterConfig
//! (checked in `nutanix`) or a TinkerbellDatacenterConfig (checked in `tinkerbell`). On vSphere,
//! Nutanix and Tinkerbell every part of the cluster (control plane,
//! etcd, each worker group) needs a machine config of the provider's kind in the directory; the
//! docker provider ignores `machineGroupRef`. A reference to an object that is in the directory
//! but failed to parse is not reported again: its own error says why.

use std::collections::BTreeSet;

use super::nutanix::nutanix;
use super::tinkerbell::tinkerbell;
use super::vsphere::vsphere;
use super::{At, present};
use crate::diag::{Code, Diagnostic};
use crate::spec::parse::{Objects, Parsed, SourceDoc};
use crate::spec::{DOCKER_BACKEND_ANNOTATION, DockerBackend, Provider, raw};

/// The provider `datacenterRef` resolves to; None when it names no usable datacenter config
/// (reported, unless the config is there but broken).
pub(super) fn provider(
    at: &mut At,
    docs: &[SourceDoc],
    objects: &Objects,
    cluster: (&str, &raw::ClusterSpec),
) -> Option<Provider> {
    let dc = &cluster.1.datacenter_ref;
    let workers = &cluster.1.worker_node_group_configurations;
    match dc.kind.as_str() {
        "DockerDatacenterConfig" => {
            match objects
                .docker_datacenters
                .iter()
                .find(|d| d.meta.name == dc.name)
            {
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
            match objects
                .vsphere_datacenters
                .iter()
                .find(|d| d.meta.name == dc.name)
            {
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
                    &objects.vsphere_machines,
                    docs,
                    at.diags,
                ))),
            }
        }
        "NutanixDatacenterConfig" => {
            match objects
                .nutanix_datacenters
                .iter()
                .find(|d| d.meta.name == dc.name)
            {
                // Present but broken: its own error says why; no follow-on dangling-ref.
                None if present(docs, "NutanixDatacenterConfig", Some(&dc.name)) => None,
                None => {
                    at.err(
                        Code::DanglingRef,
                        "spec.datacenterRef.name",
                        format!(
                            "NutanixDatacenterConfig `{}` is not in this cluster directory",
                            dc.name
                        ),
                    );
                    None
                }
                Some(d) => Some(Provider::Nutanix(nutanix(
                    d,
                    &objects.nutanix_machines,
                    docs,
                    at.diags,
                    workers,
                ))),
            }
        }
        "TinkerbellDatacenterConfig" => {
            match objects
                .tinkerbell_datacenters
                .iter()
                .find(|d| d.meta.name == dc.name)
            {
                // Present but broken: its own error says why; no follow-on dangling-ref.
                None if present(docs, "TinkerbellDatacenterConfig", Some(&dc.name)) => None,
                None => {
                    at.err(
                        Code::DanglingRef,
                        "spec.datacenterRef.name",
                        format!(
                            "TinkerbellDatacenterConfig `{}` is not in this cluster directory",
                            dc.name
                        ),
                    );
                    None
                }
                Some(d) => Some(Provider::Tinkerbell(tinkerbell(
                    d,
                    &objects.tinkerbell_machines,
                    &objects.tinkerbell_templates,
                    docs,
                    at.diags,
                    cluster,
                ))),
            }
        }
        other => {
            at.err(Code::InvalidValue, "spec.datacenterRef.kind", format!("datacenterRef kind `{other}` is not supported; use DockerDatacenterConfig, VSphereDatacenterConfig, NutanixDatacenterConfig or TinkerbellDatacenterConfig"));
            None
        }
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

/// The `machineGroupRef`s of the cluster's parts, checked against the directory's machine
/// configs; it remembers which configs are used, to warn about the others.
pub(super) struct MachineRefs<'a> {
    /// The directory's documents.
    pub(super) docs: &'a [SourceDoc],
    /// The directory's vSphere machine configs (etcd's memory is checked against them).
    pub(super) vsphere_machines: &'a [Parsed<raw::VSphereMachineSpec>],
    /// The machine config kind `datacenterRef`'s provider needs (written so, resolved or not);
    /// None on docker.
    pub(super) kind: Option<&'static str>,
    /// The directory's machine configs, of every provider: kind, name and document.
    configs: Vec<(&'static str, &'a str, usize)>,
    used: BTreeSet<String>,
}

impl<'a> MachineRefs<'a> {
    /// No machine config used yet, for a cluster whose `datacenterRef` is of `datacenter_kind`.
    pub(super) fn new(docs: &'a [SourceDoc], objects: &'a Objects, datacenter_kind: &str) -> Self {
        let kind = match datacenter_kind {
            "VSphereDatacenterConfig" => Some("VSphereMachineConfig"),
            "NutanixDatacenterConfig" => Some("NutanixMachineConfig"),
            "TinkerbellDatacenterConfig" => Some("TinkerbellMachineConfig"),
            _ => None,
        };
        let configs = objects
            .vsphere_machines
            .iter()
            .map(|m| ("VSphereMachineConfig", m.meta.name.as_str(), m.src))
            .chain(
                objects
                    .nutanix_machines
                    .iter()
                    .map(|m| ("NutanixMachineConfig", m.meta.name.as_str(), m.src)),
            )
            .chain(
                objects
                    .tinkerbell_machines
                    .iter()
                    .map(|m| ("TinkerbellMachineConfig", m.meta.name.as_str(), m.src)),
            )
            .collect();
        MachineRefs {
            docs,
            vsphere_machines: &objects.vsphere_machines,
            kind,
            configs,
            used: BTreeSet::new(),
        }
    }

    /// Whether `datacenterRef` is a VSphereDatacenterConfig.
    pub(super) fn is_vsphere(&self) -> bool {
        self.kind == Some("VSphereMachineConfig")
    }

    /// The machine config a part (`what`, at `path`) uses: required on vSphere, Nutanix and Tinkerbell and
    /// naming a machine config of the provider's kind in the directory; ignored (warned) on
    /// docker.
    pub(super) fn resolve(
        &mut self,
        at: &mut At,
        r: &Option<raw::Ref>,
        path: &str,
        what: &str,
    ) -> Option<String> {
        let Some(kind) = self.kind else {
            if r.is_some() {
                at.warn(
                    Code::UnusedObject,
                    path,
                    "the docker provider ignores machineGroupRef",
                );
            }
            return None;
        };
        let Some(r) = r else {
            at.err(
                Code::MissingField,
                path,
                format!("{what} needs a machineGroupRef to a {kind}"),
            );
            return None;
        };
        if r.kind != kind {
            at.err(
                Code::InvalidValue,
                &format!("{path}.kind"),
                format!("machineGroupRef kind `{}` must be {kind}", r.kind),
            );
        } else if !self
            .configs
            .iter()
            .any(|(k, n, _)| *k == kind && *n == r.name)
            && !present(self.docs, kind, Some(&r.name))
        {
            at.err(
                Code::DanglingRef,
                &format!("{path}.name"),
                format!("{kind} `{}` is not in this cluster directory", r.name),
            );
        }
        self.used.insert(r.name.clone());
        Some(r.name.clone())
    }

    /// Warns about each machine config no part of the cluster referenced.
    pub(super) fn warn_unused(&self, diags: &mut Vec<Diagnostic>) {
        for (kind, name, src) in &self.configs {
            if !self.used.contains(*name) {
                At {
                    sd: &self.docs[*src],
                    diags: &mut *diags,
                }
                .warn(
                    Code::UnusedObject,
                    "metadata.name",
                    format!("{kind} `{name}` is not referenced by the cluster"),
                );
            }
        }
    }
}
