//! The control plane and external etcd: machine counts etcd can keep a majority with, the API
//! endpoint vSphere needs, and the control plane's own settings (taints, labels, rollout, API
//! server flags, kubelet patch, audit policy, health check), as EKS Anywhere's webhook checks
//! them. The OIDCConfig is resolved here too: the API server flags it sets may not be written
//! again in `apiServerExtraArgs`.

use super::fields::{check_labels, check_taints, cp_rollout, health_override};
use super::identity::oidc;
use super::provider::MachineRefs;
use super::{At, MAX_COUNT, options};
use crate::diag::Code;
use crate::spec::parse::Parsed;
use crate::spec::{ControlPlane, ExternalEtcd, raw};

/// The control plane as configured, and the OIDCConfig its API server uses.
pub(super) fn control_plane(
    at: &mut At,
    spec: &raw::ClusterSpec,
    machines: &mut MachineRefs,
    oidc_configs: &[Parsed<raw::OidcSpec>],
) -> (ControlPlane, Option<raw::OidcSpec>) {
    let cpc = &spec.control_plane_configuration;
    check_count(at, cpc, spec.external_etcd_configuration.is_none());
    let endpoint_host = cpc
        .endpoint
        .as_ref()
        .map(|e| e.host.clone())
        .filter(|h| !h.is_empty());
    match (machines.kind, &endpoint_host) {
        (Some("VSphereMachineConfig"), None) => at.err(Code::MissingField, "spec.controlPlaneConfiguration.endpoint", "vSphere clusters need controlPlaneConfiguration.endpoint.host (the kube-vip address of the API server)"),
        (Some("TinkerbellMachineConfig"), None) => at.err(Code::MissingField, "spec.controlPlaneConfiguration.endpoint", "bare-metal (Tinkerbell) clusters need controlPlaneConfiguration.endpoint.host (the address of the API server, announced by kube-vip)"),
        (Some(_), None) => at.err(Code::MissingField, "spec.controlPlaneConfiguration.endpoint", "Nutanix clusters need controlPlaneConfiguration.endpoint.host (the kube-vip address of the API server)"),
        // EKS Anywhere's Tinkerbell validator: the endpoint is an IP address.
        (Some("TinkerbellMachineConfig"), Some(h)) if h.parse::<std::net::IpAddr>().is_err() => at.err(
            Code::InvalidValue,
            "spec.controlPlaneConfiguration.endpoint.host",
            format!("controlPlaneConfiguration.endpoint.host `{h}` must be an IP address on bare metal (kube-vip announces it)"),
        ),
        // EKS Anywhere's Nutanix validator: kube-vip's address is an IP address.
        (Some("NutanixMachineConfig"), Some(h)) if h.parse::<std::net::IpAddr>().is_err() => at.err(
            Code::InvalidValue,
            "spec.controlPlaneConfiguration.endpoint.host",
            format!("controlPlaneConfiguration.endpoint.host `{h}` must be an IP address on Nutanix (kube-vip announces it)"),
        ),
        _ => {}
    }
    let machine = machines.resolve(
        at,
        &cpc.machine_group_ref,
        "spec.controlPlaneConfiguration.machineGroupRef",
        "the control plane",
    );
    if let Some(t) = &cpc.taints {
        check_taints(at, t, "spec.controlPlaneConfiguration.taints");
    }
    check_labels(at, &cpc.labels, "spec.controlPlaneConfiguration.labels");
    let max_surge = cp_rollout(
        at,
        &cpc.upgrade_rollout_strategy,
        "spec.controlPlaneConfiguration.upgradeRolloutStrategy",
    );
    if machines.kind == Some("NutanixMachineConfig") && cpc.upgrade_rollout_strategy.is_some() {
        at.err(
            Code::InvalidValue,
            "spec.controlPlaneConfiguration.upgradeRolloutStrategy",
            super::nutanix::NO_ROLLOUT_STRATEGY,
        );
    }
    options::cert_sans(at, &cpc.cert_sans);
    let oidc = oidc(at, spec, oidc_configs, machines.docs);
    options::api_server_extra_args(at, &cpc.api_server_extra_args, oidc.is_some());
    let kubelet_configuration = options::kubelet_configuration(
        at,
        cpc.kubelet_configuration.as_ref(),
        "spec.controlPlaneConfiguration.kubeletConfiguration",
    );
    let audit_policy = options::audit_policy(at, cpc.audit_policy_content.as_ref());
    let health = health_override(
        at,
        cpc.machine_health_check.as_ref(),
        "spec.controlPlaneConfiguration.machineHealthCheck",
    );
    let control_plane = ControlPlane {
        count: cpc.count.max(0) as u32,
        endpoint_host,
        machine,
        taints: cpc.taints.clone(),
        labels: cpc.labels.clone(),
        max_surge,
        cert_sans: cpc.cert_sans.clone(),
        api_server_extra_args: cpc.api_server_extra_args.clone(),
        kubelet_configuration,
        audit_policy,
        skip_admission: cpc.skip_admission_for_system_resources == Some(true),
        health,
    };
    (control_plane, oidc)
}

/// Whether the control plane's machine count is in range, and odd when etcd is stacked on it
/// (etcd needs a majority).
fn check_count(at: &mut At, cpc: &raw::ControlPlaneConfiguration, stacked: bool) {
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
}

/// External etcd, when configured: an odd machine count in range and its machine config, whose
/// memory is warned about when below what etcd machines need.
pub(super) fn external_etcd(
    at: &mut At,
    spec: &raw::ClusterSpec,
    machines: &mut MachineRefs,
) -> Option<ExternalEtcd> {
    let etcd = spec.external_etcd_configuration.as_ref().map(|e| {
        if machines.kind == Some("TinkerbellMachineConfig") {
            at.err(
                Code::InvalidValue,
                "spec.externalEtcdConfiguration",
                "external etcd is not supported on bare metal (EKS Anywhere refuses it too): remove externalEtcdConfiguration to run etcd on the control-plane machines",
            );
        }
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
        let machine = machines.resolve(
            at,
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
    ) = (&etcd, machines.is_vsphere())
        && let Some(p) = machines.vsphere_machines.iter().find(|p| &p.meta.name == m)
        && let Some(mem) = p.spec.memory_mib
        && mem < crate::spec::ETCD_MIN_MEMORY_MIB
    {
        At {
            sd: &machines.docs[p.src],
            diags: at.diags,
        }
        .warn(
            Code::InvalidValue,
            "spec.memoryMiB",
            format!(
                "memoryMiB {mem} is below the {} MiB etcd machines need; as EKS Anywhere does, the etcd machines get {}",
                crate::spec::ETCD_MIN_MEMORY_MIB,
                crate::spec::ETCD_MIN_MEMORY_MIB
            ),
        );
    }
    etcd
}
