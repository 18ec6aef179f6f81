//! Nutanix datacenter and machine configs: EKS Anywhere's checks that need no Prism Central,
//! its defaults, and the bounds capstan adds.
//!
//! EKS Anywhere's CLI also asks Prism Central whether each image, cluster, subnet, project and
//! category exists and whether the GPUs asked for are free; capstan has no Prism Central at PR
//! time or in the agent's pass, so those are left to CAPX, which reports a missing resource on
//! its NutanixMachine. Everything decidable from the files is checked here, with EKS Anywhere's
//! bounds (1 socket, 1 vCPU per socket, 2 GiB memory, a 20 GiB system disk) and its defaults
//! (ubuntu, user `eksa`).
//!
//! One bound is capstan's: `ccmExcludeNodeIPs` is expanded into the cloud controller manager's
//! configuration address by address, as EKS Anywhere does, so a directory could otherwise make
//! every render of the cluster write millions of addresses (a `/8`); at most
//! [`MAX_CCM_EXCLUDED_IPS`] addresses are accepted.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::At;
use crate::diag::Code;
use crate::spec::parse::{Parsed, SourceDoc};
use crate::spec::{Nutanix, NutanixFailureDomain, NutanixId, NutanixMachine, raw};

/// Why a Nutanix cluster's rollout strategy is refused.
pub(super) const NO_ROLLOUT_STRATEGY: &str = "EKS Anywhere does not support customising the upgrade rollout strategy on Nutanix (its templates ignore it): remove upgradeRolloutStrategy; Cluster API's default rolling update (one machine more, none less) applies";

/// Most addresses `ccmExcludeNodeIPs` may expand to.
pub const MAX_CCM_EXCLUDED_IPS: u128 = 4096;
/// EKS Anywhere's minimum memory of a Nutanix machine, in MiB.
const MIN_MEMORY_MIB: u128 = 2048;
/// EKS Anywhere's minimum system disk of a Nutanix machine, in GiB.
const MIN_DISK_GIB: u128 = 20;

pub(super) fn nutanix(
    dc: &Parsed<raw::NutanixDatacenterSpec>,
    machines: &[Parsed<raw::NutanixMachineSpec>],
    docs: &[SourceDoc],
    diags: &mut Vec<crate::diag::Diagnostic>,
    workers: &[raw::WorkerNodeGroupConfiguration],
) -> Nutanix {
    let s = &dc.spec;
    let mut at = At {
        sd: &docs[dc.src],
        diags,
    };
    if s.endpoint.is_empty() {
        at.err(
            Code::MissingField,
            "spec.endpoint",
            "NutanixDatacenterConfig needs endpoint: Prism Central's address",
        );
    }
    if !(1..=65535).contains(&s.port) {
        at.err(
            Code::InvalidValue,
            "spec.port",
            format!(
                "port {} is not a TCP port: Prism Central's port is needed (9440 by default on Prism Central)",
                s.port
            ),
        );
    }
    if let Some(b) = &s.additional_trust_bundle
        && !is_pem_certificate(b)
    {
        at.err(
            Code::InvalidValue,
            "spec.additionalTrustBundle",
            "additionalTrustBundle is not a PEM certificate (-----BEGIN CERTIFICATE----- … -----END CERTIFICATE-----)",
        );
    }
    match &s.credential_ref {
        None => at.err(
            Code::MissingField,
            "spec.credentialRef",
            "NutanixDatacenterConfig needs credentialRef (kind: Secret): the admin keeps Prism Central's credentials in a Secret of the management cluster, never in the repository",
        ),
        Some(r) if r.kind != "Secret" => at.err(
            Code::InvalidValue,
            "spec.credentialRef.kind",
            format!("credentialRef kind `{}` must be Secret", r.kind),
        ),
        Some(r) if r.name.is_empty() => at.err(
            Code::MissingField,
            "spec.credentialRef.name",
            "credentialRef needs the Secret's name",
        ),
        Some(_) => {}
    }
    let mut seen = BTreeSet::new();
    let mut failure_domains = Vec::new();
    for (i, fd) in s.failure_domains.iter().enumerate() {
        let path = format!("spec.failureDomains[{i}]");
        if !crate::spec::is_dns_label(&fd.name, 63) {
            at.err(
                Code::InvalidName,
                &format!("{path}.name"),
                format!(
                    "failure domain name `{}` must hold only lower-case letters, digits and hyphens, starting and ending with a letter or digit",
                    fd.name
                ),
            );
        }
        if !seen.insert(fd.name.as_str()) {
            at.err(
                Code::DuplicateName,
                &format!("{path}.name"),
                format!("two failure domains named `{}`", fd.name),
            );
        }
        for (j, g) in fd.worker_machine_groups.iter().enumerate() {
            let gpath = format!("{path}.workerMachineGroups[{j}]");
            // The first group's name defaults to md-0, as in the worker group checks.
            let group = workers.iter().enumerate().find(|(k, w)| {
                w.name
                    .as_deref()
                    .unwrap_or(if *k == 0 { "md-0" } else { "" })
                    == g
            });
            match group {
                None => at.err(
                    Code::DanglingRef,
                    &gpath,
                    format!("worker group `{g}` is not a worker node group of the cluster"),
                ),
                // EKS Anywhere's rule: a group is spread at most one machine per failure domain.
                Some((_, w)) if w.count.is_some_and(|c| c > s.failure_domains.len() as i64) => at.err(
                    Code::InvalidValue,
                    &gpath,
                    format!(
                        "worker group `{g}` has {} machines, more than the {} failure domains it is spread over (EKS Anywhere's limit)",
                        w.count.unwrap_or_default(),
                        s.failure_domains.len()
                    ),
                ),
                Some(_) => {}
            }
        }
        let cluster = identifier(&mut at, &fd.cluster, &format!("{path}.cluster"));
        let subnets = fd
            .subnets
            .iter()
            .enumerate()
            .map(|(j, sn)| identifier(&mut at, sn, &format!("{path}.subnets[{j}]")))
            .collect();
        failure_domains.push(NutanixFailureDomain {
            name: fd.name.clone(),
            cluster,
            subnets,
            worker_groups: fd.worker_machine_groups.clone(),
        });
    }
    let ccm_ignored_ips = excluded_ips(&mut at, &s.ccm_exclude_node_ips);
    let diags = at.diags;
    let mut out = BTreeMap::new();
    for m in machines {
        let mut at = At {
            sd: &docs[m.src],
            diags,
        };
        out.insert(m.meta.name.clone(), machine(&mut at, &m.spec));
    }
    Nutanix {
        endpoint: s.endpoint.clone(),
        port: s.port,
        insecure: s.insecure == Some(true),
        trust_bundle: s.additional_trust_bundle.clone(),
        failure_domains,
        ccm_ignored_ips,
        machines: out,
    }
}

/// GPUs are for worker machines (EKS Anywhere's rule): the machine configs of the control plane
/// and of etcd (`parts`: what, machine config name) may not ask for any.
pub(super) fn gpus_on_workers_only(
    machines: &[Parsed<raw::NutanixMachineSpec>],
    parts: &[(&str, Option<&String>)],
    docs: &[SourceDoc],
    diags: &mut Vec<crate::diag::Diagnostic>,
) {
    for (what, name) in parts {
        let Some(name) = name else { continue };
        if let Some(m) = machines
            .iter()
            .find(|m| &m.meta.name == *name && !m.spec.gpus.is_empty())
        {
            At {
                sd: &docs[m.src],
                diags: &mut *diags,
            }
            .err(
                Code::InvalidValue,
                "spec.gpus",
                format!("NutanixMachineConfig `{name}` is used by {what}, and GPUs are for worker machines only (EKS Anywhere's rule): give {what} a machine config without gpus"),
            );
        }
    }
}

/// A Nutanix resource identifier: `type: name` with a name, or `type: uuid` with a UUID.
fn identifier(at: &mut At, id: &raw::NutanixIdentifier, path: &str) -> NutanixId {
    let (field, value) = match id.kind.as_str() {
        "name" => ("name", &id.name),
        "uuid" => ("uuid", &id.uuid),
        other => {
            at.err(
                Code::InvalidValue,
                &format!("{path}.type"),
                format!("identifier type `{other}` must be name or uuid"),
            );
            return NutanixId {
                kind: other.to_string(),
                value: String::new(),
            };
        }
    };
    let value = value.clone().unwrap_or_default();
    if value.is_empty() {
        at.err(
            Code::MissingField,
            &format!("{path}.{field}"),
            format!("an identifier of type {field} needs its {field}"),
        );
    }
    NutanixId {
        kind: field.to_string(),
        value,
    }
}

fn machine(at: &mut At, s: &raw::NutanixMachineSpec) -> NutanixMachine {
    if s.vcpu_sockets < 1 {
        at.err(
            Code::InvalidValue,
            "spec.vcpuSockets",
            format!("vcpuSockets {} must be at least 1", s.vcpu_sockets),
        );
    }
    if s.vcpus_per_socket < 1 {
        at.err(
            Code::InvalidValue,
            "spec.vcpusPerSocket",
            format!("vcpusPerSocket {} must be at least 1", s.vcpus_per_socket),
        );
    }
    let memory_size = sized(
        at,
        s.memory_size.as_ref(),
        "spec.memorySize",
        MIN_MEMORY_MIB << 20,
        "2Gi",
    );
    let system_disk_size = sized(
        at,
        s.system_disk_size.as_ref(),
        "spec.systemDiskSize",
        MIN_DISK_GIB << 30,
        "20Gi",
    );
    let os_family = s.os_family.clone().unwrap_or_else(|| "ubuntu".into());
    match os_family.as_str() {
        "ubuntu" | "redhat" => {}
        "bottlerocket" => at.err(
            Code::InvalidValue,
            "spec.osFamily",
            "osFamily bottlerocket is not supported: upstream Cluster API's kubeadm bootstrap has no bottlerocket format; set osFamily: ubuntu or redhat",
        ),
        other => at.err(
            Code::InvalidValue,
            "spec.osFamily",
            format!("osFamily `{other}` must be one of ubuntu, redhat"),
        ),
    }
    let boot_type = s.boot_type.clone().unwrap_or_default();
    if !matches!(boot_type.as_str(), "" | "legacy" | "uefi") {
        at.err(
            Code::InvalidValue,
            "spec.bootType",
            format!("bootType `{boot_type}` must be legacy or uefi"),
        );
    }
    let mut categories = Vec::new();
    for (i, c) in s.additional_categories.iter().enumerate() {
        for (field, v) in [("key", &c.key), ("value", &c.value)] {
            if v.is_empty() {
                at.err(
                    Code::MissingField,
                    &format!("spec.additionalCategories[{i}].{field}"),
                    format!("a category needs its {field}"),
                );
            }
        }
        categories.push((c.key.clone(), c.value.clone()));
    }
    let mut gpus = Vec::new();
    for (i, g) in s.gpus.iter().enumerate() {
        let path = format!("spec.gpus[{i}]");
        let value = match (g.kind.as_str(), g.device_id, &g.name) {
            ("deviceID", Some(id), _) => Some(id.to_string()),
            ("name", _, Some(n)) if !n.is_empty() => Some(n.clone()),
            ("deviceID", None, _) => {
                at.err(
                    Code::MissingField,
                    &format!("{path}.deviceID"),
                    "a GPU of type deviceID needs its deviceID",
                );
                None
            }
            ("name", _, _) => {
                at.err(
                    Code::MissingField,
                    &format!("{path}.name"),
                    "a GPU of type name needs its name",
                );
                None
            }
            (other, _, _) => {
                at.err(
                    Code::InvalidValue,
                    &format!("{path}.type"),
                    format!("GPU type `{other}` must be deviceID or name"),
                );
                None
            }
        };
        if let Some(value) = value {
            gpus.push(NutanixId {
                kind: g.kind.clone(),
                value,
            });
        }
    }
    NutanixMachine {
        os_family,
        // EKS Anywhere's defaults: user `eksa` and an empty key (no SSH access; capstan never
        // writes keys into the repository).
        user: match s.users.first() {
            Some(u) => (
                if u.name.is_empty() {
                    "eksa".into()
                } else {
                    u.name.clone()
                },
                u.ssh_authorized_keys.first().cloned().unwrap_or_default(),
            ),
            None => ("eksa".into(), String::new()),
        },
        vcpus_per_socket: s.vcpus_per_socket,
        vcpu_sockets: s.vcpu_sockets,
        memory_size,
        system_disk_size,
        image: identifier(at, &s.image, "spec.image"),
        cluster: identifier(at, &s.cluster, "spec.cluster"),
        subnet: identifier(at, &s.subnet, "spec.subnet"),
        project: s
            .project
            .as_ref()
            .map(|p| identifier(at, p, "spec.project")),
        categories,
        gpus,
        boot_type,
    }
}

/// A size (`memorySize`, `systemDiskSize`) as Kubernetes prints the quantity; reported when
/// missing, not a quantity, or below `min` bytes.
fn sized(
    at: &mut At,
    v: Option<&serde_json::Value>,
    path: &str,
    min: u128,
    min_text: &str,
) -> String {
    let Some(v) = v else {
        at.err(
            Code::MissingField,
            path,
            format!("{path} is required (at least {min_text})"),
        );
        return String::new();
    };
    let text = match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        _ => String::new(),
    };
    match Quantity::parse(&text) {
        None => {
            at.err(
                Code::InvalidValue,
                path,
                format!("`{text}` is not a size of whole bytes: write a number with a Kubernetes suffix, e.g. 8Gi or 4096Mi"),
            );
            String::new()
        }
        Some(q) if q.bytes < min => {
            at.err(
                Code::InvalidValue,
                path,
                format!("{} is below the minimum of {min_text}", q.canonical()),
            );
            q.canonical()
        }
        Some(q) => q.canonical(),
    }
}

/// A Kubernetes quantity of whole bytes: its bytes and whether it was written with a binary
/// suffix (Ki, Mi, …), which decides how it prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Quantity {
    bytes: u128,
    binary: bool,
}

const BINARY: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
const DECIMAL: [&str; 6] = ["k", "M", "G", "T", "P", "E"];

impl Quantity {
    /// `8Gi`, `4096Mi`, `1.5Gi`, `2G`, `2147483648`; None for anything else, and for a fraction
    /// that is not a whole number of bytes.
    fn parse(s: &str) -> Option<Quantity> {
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 20 {
            return None;
        }
        let (whole, rest) = s.split_at(digits);
        let (frac, suffix) = match rest.strip_prefix('.') {
            Some(r) => {
                let n = r.bytes().take_while(u8::is_ascii_digit).count();
                if n == 0 || n > 18 {
                    return None;
                }
                r.split_at(n)
            }
            None => ("", rest),
        };
        let (multiplier, binary) = if suffix.is_empty() {
            (1u128, false)
        } else if let Some(i) = BINARY.iter().position(|b| *b == suffix) {
            (1u128 << (10 * (i as u32 + 1)), true)
        } else {
            let i = DECIMAL.iter().position(|d| *d == suffix)?;
            (1000u128.pow(i as u32 + 1), false)
        };
        let scale = 10u128.pow(frac.len() as u32);
        let n: u128 = format!("{whole}{frac}").parse().ok()?;
        let scaled = n.checked_mul(multiplier)?;
        if !scaled.is_multiple_of(scale) {
            return None;
        }
        Some(Quantity {
            bytes: scaled / scale,
            binary,
        })
    }

    /// As Kubernetes prints it: the largest suffix of the written kind that keeps a whole
    /// number (`4096Mi` prints as `4Gi`).
    fn canonical(self) -> String {
        let (base, suffixes) = if self.binary {
            (1024u128, BINARY)
        } else {
            (1000u128, DECIMAL)
        };
        if self.bytes == 0 {
            return "0".into();
        }
        let (mut n, mut i) = (self.bytes, 0);
        while i < suffixes.len() && n.is_multiple_of(base) {
            n /= base;
            i += 1;
        }
        match i {
            0 => n.to_string(),
            _ => format!("{n}{}", suffixes[i - 1]),
        }
    }
}

/// A PEM block of a certificate with a base64 body.
fn is_pem_certificate(s: &str) -> bool {
    let Some((_, rest)) = s.split_once("-----BEGIN CERTIFICATE-----") else {
        return false;
    };
    let Some((body, _)) = rest.split_once("-----END CERTIFICATE-----") else {
        return false;
    };
    let body: String = body.split_whitespace().collect();
    !body.is_empty()
        && body.len().is_multiple_of(4)
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=')
}

/// `ccmExcludeNodeIPs` expanded as EKS Anywhere expands them (a CIDR's every address, a range
/// `a-b` inclusive, an address as written), each checked; at most [`MAX_CCM_EXCLUDED_IPS`].
fn excluded_ips(at: &mut At, written: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut total: u128 = 0;
    for (i, w) in written.iter().enumerate() {
        let path = format!("spec.ccmExcludeNodeIPs[{i}]");
        let w = w.trim();
        let span: Option<(u128, u128, bool)> = if w.contains('/') {
            match w.parse::<ipnet::IpNet>() {
                Ok(net) => Some((
                    ip_number(net.network()),
                    ip_number(net.broadcast()),
                    net.network().is_ipv4(),
                )),
                Err(_) => {
                    at.err(Code::InvalidValue, &path, format!("`{w}` is not a CIDR"));
                    None
                }
            }
        } else if let Some((a, b)) = w.split_once('-') {
            match (a.trim().parse::<IpAddr>(), b.trim().parse::<IpAddr>()) {
                (Ok(a), Ok(b)) if a.is_ipv4() == b.is_ipv4() && ip_number(a) <= ip_number(b) => {
                    Some((ip_number(a), ip_number(b), a.is_ipv4()))
                }
                (Ok(a), Ok(b)) if a.is_ipv4() == b.is_ipv4() => {
                    at.err(
                        Code::InvalidValue,
                        &path,
                        format!("the range `{w}` starts at {a}, after its end {b}"),
                    );
                    None
                }
                _ => {
                    at.err(
                        Code::InvalidValue,
                        &path,
                        format!("`{w}` is not a range of two addresses of one family (a-b)"),
                    );
                    None
                }
            }
        } else {
            match w.parse::<IpAddr>() {
                Ok(_) => {
                    total += 1;
                    out.push(w.to_string());
                    None
                }
                Err(_) => {
                    at.err(
                        Code::InvalidValue,
                        &path,
                        format!("`{w}` is not an IP address"),
                    );
                    None
                }
            }
        };
        let Some((first, last, v4)) = span else {
            continue;
        };
        total = total.saturating_add(last - first + 1);
        if total > MAX_CCM_EXCLUDED_IPS {
            at.err(
                Code::InvalidValue,
                &path,
                format!("ccmExcludeNodeIPs expand to more than {MAX_CCM_EXCLUDED_IPS} addresses (each is written into the cloud controller manager's configuration): list the nodes' addresses or a smaller range"),
            );
            return out;
        }
        for n in first..=last {
            out.push(ip_text(n, v4));
        }
    }
    out
}

fn ip_number(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}

fn ip_text(n: u128, v4: bool) -> String {
    if v4 {
        std::net::Ipv4Addr::from(n as u32).to_string()
    } else {
        std::net::Ipv6Addr::from(n).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_print_as_kubernetes_prints_them() {
        for (written, printed, bytes) in [
            ("4Gi", "4Gi", 4u128 << 30),
            ("4096Mi", "4Gi", 4 << 30),
            ("1536Mi", "1536Mi", 1536 << 20),
            ("2G", "2G", 2_000_000_000),
            ("2000M", "2G", 2_000_000_000),
            ("2147483648", "2147483648", 1 << 31),
            ("1000", "1k", 1000),
            ("1.5Gi", "1536Mi", 1536 << 20),
            ("40.5Gi", "41472Mi", 41472 << 20),
        ] {
            let q = Quantity::parse(written).unwrap();
            assert_eq!(
                (q.canonical().as_str(), q.bytes),
                (printed, bytes),
                "{written}"
            );
        }
        for bad in [
            "",
            "0.1",
            "1.Gi",
            "Gi",
            "4gi",
            "40GB",
            "-4Gi",
            "4 Gi",
            "99999999999999999999999Ei",
        ] {
            assert_eq!(Quantity::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn pem_certificates_are_recognised() {
        assert!(is_pem_certificate(
            "-----BEGIN CERTIFICATE-----\nMIIB\nAAAA\n-----END CERTIFICATE-----\n"
        ));
        assert!(!is_pem_certificate("MIIBAAAA"));
        assert!(!is_pem_certificate(
            "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----"
        ));
    }
}
