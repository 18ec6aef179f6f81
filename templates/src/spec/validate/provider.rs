//! The provider a cluster runs on and the machine configs its parts use.
//!
//! `datacenterRef` picks the provider: a DockerDatacenterConfig (whose annotation chooses CAPD's
//! backend) or a VSphereDatacenterConfig (checked in `vsphere`). On vSphere every part of the
//! cluster (control plane, etcd, each worker group) needs a VSphereMachineConfig of the directory;
//! the docker provider ignores `machineGroupRef`. A reference to an object that is in the
//! directory but failed to parse is not reported again: its own error says why.

use std::collections::BTreeSet;

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
    dc: &raw::Ref,
) -> Option<Provider> {
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
        other => {
            at.err(Code::InvalidValue, "spec.datacenterRef.kind", format!("datacenterRef kind `{other}` is not supported; use DockerDatacenterConfig or VSphereDatacenterConfig"));
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
    /// The directory's machine configs.
    pub(super) machines: &'a [Parsed<raw::VSphereMachineSpec>],
    /// Whether `datacenterRef` is a VSphereDatacenterConfig (written so, resolved or not).
    pub(super) is_vsphere: bool,
    used: BTreeSet<String>,
}

impl<'a> MachineRefs<'a> {
    /// No machine config used yet.
    pub(super) fn new(
        docs: &'a [SourceDoc],
        machines: &'a [Parsed<raw::VSphereMachineSpec>],
        is_vsphere: bool,
    ) -> Self {
        MachineRefs {
            docs,
            machines,
            is_vsphere,
            used: BTreeSet::new(),
        }
    }

    /// The machine config a part (`what`, at `path`) uses: required on vSphere and naming a
    /// VSphereMachineConfig of the directory; ignored (warned) on docker.
    pub(super) fn resolve(
        &mut self,
        at: &mut At,
        r: &Option<raw::Ref>,
        path: &str,
        what: &str,
    ) -> Option<String> {
        match r {
            None if self.is_vsphere => {
                at.err(
                    Code::MissingField,
                    path,
                    format!("{what} needs a machineGroupRef to a VSphereMachineConfig"),
                );
                None
            }
            None => None,
            Some(r) if self.is_vsphere => {
                if r.kind != "VSphereMachineConfig" {
                    at.err(
                        Code::InvalidValue,
                        &format!("{path}.kind"),
                        format!(
                            "machineGroupRef kind `{}` must be VSphereMachineConfig",
                            r.kind
                        ),
                    );
                } else if !self.machines.iter().any(|m| m.meta.name == r.name)
                    && !present(self.docs, "VSphereMachineConfig", Some(&r.name))
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
                self.used.insert(r.name.clone());
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
    }

    /// Warns about each machine config no part of the cluster referenced.
    pub(super) fn warn_unused(&self, diags: &mut Vec<Diagnostic>) {
        for m in self.machines {
            if !self.used.contains(&m.meta.name) {
                At {
                    sd: &self.docs[m.src],
                    diags: &mut *diags,
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
    }
}
