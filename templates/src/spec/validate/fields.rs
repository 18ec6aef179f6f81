//! Field-level rules shared by the cluster's parts: taints, labels, rollouts, CIDRs, Cilium and
//! health checks, each checked the way EKS Anywhere's webhook and the Cluster API objects they
//! become require.

use std::collections::BTreeMap;

use ipnet::IpNet;
use serde_json::{Value, json};

use super::{At, MAX_COUNT};
use crate::diag::Code;
use crate::spec::raw::{self, Taint};
use crate::spec::{HealthCheck, HealthOverride, parse_duration_seconds};

pub(super) fn check_taints(at: &mut At, taints: &[Taint], path: &str) {
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

pub(super) fn check_labels(at: &mut At, labels: &BTreeMap<String, String>, path: &str) {
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

/// `upgradeRolloutStrategy` of the control plane: its maxSurge (KubeadmControlPlane allows 0 or 1).
pub(super) fn cp_rollout(at: &mut At, r: &Option<raw::RolloutStrategy>, path: &str) -> Option<u32> {
    let r = r.as_ref()?;
    if !rollout_type(at, r, path) {
        return None;
    }
    let ru = r.rolling_update.as_ref()?;
    if ru.max_unavailable.is_some() {
        at.err(
            Code::InvalidValue,
            &format!("{path}.rollingUpdate.maxUnavailable"),
            "the control plane only supports maxSurge",
        );
    }
    match ru.max_surge.unwrap_or(0) {
        s @ 0..=1 => Some(s as u32),
        s => {
            at.err(
                Code::InvalidValue,
                &format!("{path}.rollingUpdate.maxSurge"),
                format!("control plane maxSurge {s} must be 0 or 1: KubeadmControlPlane replaces at most one machine at a time"),
            );
            None
        }
    }
}

/// `upgradeRolloutStrategy` of a worker group: (maxSurge, maxUnavailable), EKS-A's rules.
pub(super) fn worker_rollout(
    at: &mut At,
    r: &Option<raw::RolloutStrategy>,
    path: &str,
) -> Option<(u32, u32)> {
    let r = r.as_ref()?;
    if !rollout_type(at, r, path) {
        return None;
    }
    let Some(ru) = &r.rolling_update else {
        at.err(
            Code::MissingField,
            path,
            "upgradeRolloutStrategy of type RollingUpdate needs rollingUpdate.maxSurge and/or maxUnavailable",
        );
        return None;
    };
    let (surge, unavailable) = (ru.max_surge.unwrap_or(0), ru.max_unavailable.unwrap_or(0));
    if surge < 0 || unavailable < 0 || surge > MAX_COUNT || unavailable > MAX_COUNT {
        at.err(
            Code::InvalidValue,
            &format!("{path}.rollingUpdate"),
            "maxSurge and maxUnavailable must be between 0 and 2147483647",
        );
        return None;
    }
    if surge == 0 && unavailable == 0 {
        at.err(
            Code::InvalidValue,
            &format!("{path}.rollingUpdate"),
            "maxSurge and maxUnavailable cannot both be 0: the rollout could never make progress",
        );
        return None;
    }
    Some((surge as u32, unavailable as u32))
}

/// Checks the rollout type; false when it is not RollingUpdate (already reported).
fn rollout_type(at: &mut At, r: &raw::RolloutStrategy, path: &str) -> bool {
    match r.kind.as_deref() {
        None | Some("RollingUpdate") => return true,
        Some("InPlace") => at.err(
            Code::UnsupportedField,
            &format!("{path}.type"),
            "in-place upgrades need EKS Anywhere's in-place upgrade controllers and its Cluster API fork; capstan rolls machines: use RollingUpdate",
        ),
        Some(other) => at.err(
            Code::InvalidValue,
            &format!("{path}.type"),
            format!("rollout type `{other}` must be RollingUpdate"),
        ),
    }
    false
}

pub(super) fn int_or_percent(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.as_u64().is_some(),
        Value::String(s) => s
            .strip_suffix('%')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit())),
        _ => false,
    }
}

pub(super) fn cidr(at: &mut At, blocks: &[String], path: &str) -> Option<IpNet> {
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

pub(super) fn cilium(at: &mut At, c: Option<raw::Cilium>) -> raw::Cilium {
    let c = c.unwrap_or_default();
    let base = "spec.clusterNetwork.cniConfig.cilium";
    if let Some(mode) = &c.policy_enforcement_mode
        && !matches!(mode.as_str(), "default" | "always" | "never")
    {
        at.err(
            Code::InvalidValue,
            &format!("{base}.policyEnforcementMode"),
            format!("policyEnforcementMode `{mode}` must be default, always or never"),
        );
    }
    match c.routing_mode.as_deref().unwrap_or("overlay") {
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

/// The global machineHealthCheck: timeouts and maxUnhealthy with EKS-A's defaults (10m, 20m on
/// bare metal, whose machines boot an installer first; 5m; 100% for the control plane, 40% for
/// workers unless a global maxUnhealthy is written).
pub(super) fn health(
    at: &mut At,
    m: Option<&raw::MachineHealthCheck>,
    bare_metal: bool,
) -> HealthCheck {
    let o = health_override(at, m, "spec.machineHealthCheck");
    let startup = if bare_metal { 1200 } else { 600 };
    HealthCheck {
        node_startup_timeout_seconds: o.node_startup_timeout_seconds.unwrap_or(startup),
        unhealthy_machine_timeout_seconds: o.unhealthy_machine_timeout_seconds.unwrap_or(300),
        control_plane_max_unhealthy: o.max_unhealthy.clone().unwrap_or_else(|| json!("100%")),
        workers_max_unhealthy: o.max_unhealthy.unwrap_or_else(|| json!("40%")),
    }
}

/// A machineHealthCheck block (global or per group), each field optional.
pub(super) fn health_override(
    at: &mut At,
    m: Option<&raw::MachineHealthCheck>,
    base: &str,
) -> HealthOverride {
    let Some(m) = m else {
        return HealthOverride::default();
    };
    let dur = |at: &mut At, v: Option<&String>, field: &str| {
        v.and_then(|s| {
            let d = parse_duration_seconds(s);
            if d.is_none() {
                at.err(
                    Code::InvalidValue,
                    &format!("{base}.{field}"),
                    format!("{field} `{s}` is not a duration such as 10m or 5m0s"),
                );
            }
            d
        })
    };
    let node_startup_timeout_seconds =
        dur(at, m.node_startup_timeout.as_ref(), "nodeStartupTimeout");
    let unhealthy_machine_timeout_seconds = dur(
        at,
        m.unhealthy_machine_timeout.as_ref(),
        "unhealthyMachineTimeout",
    );
    if let Some(v) = &m.max_unhealthy
        && !int_or_percent(v)
    {
        at.err(
            Code::InvalidValue,
            &format!("{base}.maxUnhealthy"),
            "maxUnhealthy must be a number or a percentage such as \"40%\"",
        );
    }
    HealthOverride {
        node_startup_timeout_seconds,
        unhealthy_machine_timeout_seconds,
        max_unhealthy: m.max_unhealthy.clone(),
    }
}

/// A machine config's `hostOSConfiguration`: its NTP servers (at least one when written), and
/// the bottlerocket-only settings refused (capstan has no bottlerocket); `image` says where CA
/// certificates go instead (a VM template, an OS image).
pub(super) fn host_os(
    at: &mut At,
    h: Option<&raw::HostOsConfiguration>,
    image: &str,
) -> Vec<String> {
    let Some(h) = h else {
        return Vec::new();
    };
    let mut ntp_servers = Vec::new();
    if let Some(ntp) = &h.ntp_configuration {
        if ntp.servers.is_empty() {
            at.err(
                Code::MissingField,
                "spec.hostOSConfiguration.ntpConfiguration.servers",
                "ntpConfiguration needs at least one server",
            );
        }
        ntp_servers = ntp.servers.clone();
    }
    if h.cert_bundles.is_some() {
        at.err(Code::InvalidValue, "spec.hostOSConfiguration.certBundles", format!("certBundles apply to bottlerocket machines only (EKS Anywhere's rule), and capstan does not support bottlerocket: bake the CA certificates into {image}"));
    }
    if h.bottlerocket_configuration.is_some() {
        at.err(Code::InvalidValue, "spec.hostOSConfiguration.bottlerocketConfiguration", "bottlerocketConfiguration applies to bottlerocket machines, which capstan does not support (upstream Cluster API has no bottlerocket bootstrap): remove it");
    }
    ntp_servers
}
