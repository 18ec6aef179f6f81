//! vSphere datacenter and machine configs: EKS Anywhere's defaults and the rules capstan adds.
//!
//! Defaults follow EKS-A's defaulter (memory 8192 MiB, 2 vCPUs, 25 GiB, the network as a full
//! path). What upstream Cluster API cannot do is refused with the reason: bottlerocket (no kubeadm
//! bootstrap format upstream), importing OVAs (no template given), and the bottlerocket-only host
//! OS settings.

use std::collections::{BTreeMap, BTreeSet};

use super::At;
use crate::diag::Code;
use crate::spec::parse::{Parsed, SourceDoc};
use crate::spec::{VSphere, VSphereMachine, raw};

/// Most networks a machine may have (EKS-A's limit).
pub const MAX_NETWORKS: usize = 2;

pub(super) fn vsphere(
    dc: &Parsed<raw::VSphereDatacenterSpec>,
    machines: &[Parsed<raw::VSphereMachineSpec>],
    docs: &[SourceDoc],
    diags: &mut Vec<crate::diag::Diagnostic>,
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
    let mut at = At {
        sd: &docs[dc.src],
        diags,
    };
    let mut seen = BTreeSet::new();
    for (i, fd) in s.failure_domains.iter().enumerate() {
        let path = format!("spec.failureDomains[{i}]");
        if !crate::spec::is_dns_label(&fd.name, 63) {
            at.err(
                Code::InvalidName,
                &format!("{path}.name"),
                format!("failure domain name `{}` must be a DNS-1123 label", fd.name),
            );
        }
        if !seen.insert(fd.name.as_str()) {
            at.err(
                Code::DuplicateName,
                &format!("{path}.name"),
                format!("two failure domains named `{}`", fd.name),
            );
        }
        for (field, v) in [
            ("computeCluster", &fd.compute_cluster),
            ("resourcePool", &fd.resource_pool),
            ("datastore", &fd.datastore),
            ("folder", &fd.folder),
            ("network", &fd.network),
        ] {
            if v.is_empty() {
                at.err(
                    Code::MissingField,
                    &format!("{path}.{field}"),
                    format!("failure domain `{}` needs {field}", fd.name),
                );
            }
        }
    }
    let diags = at.diags;
    let mut out = BTreeMap::new();
    for m in machines {
        let mut at = At {
            sd: &docs[m.src],
            diags,
        };
        out.insert(m.meta.name.clone(), machine(&mut at, &m.spec));
    }
    VSphere {
        server: s.server.clone(),
        datacenter: s.datacenter.clone(),
        network,
        thumbprint,
        insecure: s.insecure == Some(true),
        datacenter_config: dc.meta.name.clone(),
        failure_domains: s.failure_domains.clone(),
        machines: out,
    }
}

fn machine(at: &mut At, s: &raw::VSphereMachineSpec) -> VSphereMachine {
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
            "osFamily bottlerocket (EKS Anywhere's default) is not supported: upstream Cluster API's kubeadm bootstrap has no bottlerocket format (EKS Anywhere uses its fork for it); set osFamily: ubuntu or redhat and an ubuntu/redhat template",
        ),
        other => at.err(
            Code::InvalidValue,
            "spec.osFamily",
            format!("osFamily `{other}` must be one of ubuntu, redhat"),
        ),
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
            at.err(Code::MissingField, "spec.template", "VSphereMachineConfig needs the template (OVA) to clone: EKS Anywhere's CLI imports OVAs through vCenter, capstan does not; import the OVA for this Kubernetes version once and name its template here");
            String::new()
        }
    };
    if s.networks.len() > MAX_NETWORKS {
        at.err(
            Code::InvalidValue,
            "spec.networks",
            format!(
                "at most {MAX_NETWORKS} networks per machine (EKS Anywhere's limit), found {}",
                s.networks.len()
            ),
        );
    }
    let ntp_servers = super::fields::host_os(
        at,
        s.host_os_configuration.as_ref(),
        "the ubuntu/redhat template",
    );
    VSphereMachine {
        datastore: s.datastore.clone(),
        folder: s.folder.clone().unwrap_or_default(),
        memory_mib,
        num_cpus,
        disk_gib,
        os_family,
        resource_pool: s.resource_pool.clone(),
        template,
        // EKS-A's defaulter generates a key when none is given; capstan never writes keys into
        // the repository, so a machine without a user gets no SSH access.
        user: s.users.first().map(|u| {
            (
                u.name.clone(),
                strip_key_comment(
                    u.ssh_authorized_keys
                        .first()
                        .map(String::as_str)
                        .unwrap_or(""),
                ),
            )
        }),
        storage_policy_name: s.storage_policy_name.clone().unwrap_or_default(),
        clone_mode: s.clone_mode.clone().unwrap_or_default(),
        tags: s.tags.clone(),
        // As written: EKS-A expands only the datacenter's network to a full path.
        networks: s.networks.clone(),
        ntp_servers,
    }
}

/// An SSH public key without its trailing comment, as EKS Anywhere renders it (`type key`).
fn strip_key_comment(key: &str) -> String {
    let mut parts = key.split_whitespace();
    match (parts.next(), parts.next()) {
        (Some(t), Some(k)) => format!("{t} {k}"),
        _ => key.trim().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_comments_are_stripped() {
        assert_eq!(
            strip_key_comment("ssh-ed25519 AAAA user@host"),
            "ssh-ed25519 AAAA"
        );
        assert_eq!(strip_key_comment("ssh-ed25519 AAAA"), "ssh-ed25519 AAAA");
    }
}
