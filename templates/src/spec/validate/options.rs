//! The optional cluster features: proxy, registry mirror, pod IAM, etcd encryption, OIDC, the
//! control plane's API server settings and kubelet configuration patches.
//!
//! Each is checked as EKS Anywhere's validations check it (`pkg/api/v1alpha1/cluster.go`), except
//! where EKS Anywhere asks the network (it resolves proxy host names; capstan only checks the
//! form, so validation stays a pure function of the repository). Where EKS Anywhere would take a
//! secret from its CLI's environment (registry mirror credentials), capstan refuses and says why:
//! credentials never go into the repository.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::{Map, Value};

use super::At;
use crate::diag::Code;
use crate::spec::{Proxy, RegistryMirror, raw};

/// kube-apiserver flags an OIDCConfig sets; writing them in apiServerExtraArgs too is an error.
pub const OIDC_FLAGS: &[&str] = &[
    "oidc-issuer-url",
    "oidc-client-id",
    "oidc-groups-claim",
    "oidc-groups-prefix",
    "oidc-required-claim",
    "oidc-username-claim",
    "oidc-username-prefix",
];

/// EKS-A's default node CIDR mask size (kube-controller-manager's default too).
pub const DEFAULT_NODE_CIDR_MASK: u32 = 24;

pub(super) fn proxy(at: &mut At, p: Option<&raw::ProxyConfiguration>) -> Option<Proxy> {
    let p = p?;
    let base = "spec.proxyConfiguration";
    for (field, v) in [("httpProxy", &p.http_proxy), ("httpsProxy", &p.https_proxy)] {
        if v.is_empty() {
            at.err(
                Code::MissingField,
                &format!("{base}.{field}"),
                format!("proxyConfiguration needs {field}"),
            );
        } else if !proxy_address_ok(v) {
            at.err(
                Code::InvalidValue,
                &format!("{base}.{field}"),
                format!("{field} `{v}` is not a proxy address such as http://10.0.0.1:3128 (a host and a port from 1 to 65535)"),
            );
        }
    }
    Some(Proxy {
        http: p.http_proxy.clone(),
        https: p.https_proxy.clone(),
        no_proxy: p.no_proxy.clone(),
    })
}

/// `[scheme://]host:port` with a port from 1 to 65535 (EKS-A's form check).
fn proxy_address_ok(v: &str) -> bool {
    let rest = v.split_once("://").map(|(_, r)| r).unwrap_or(v);
    let hostport = rest.split('/').next().unwrap_or("");
    let hostport = hostport
        .rsplit_once('@')
        .map(|(_, h)| h)
        .unwrap_or(hostport);
    let Some((host, port)) = hostport.rsplit_once(':') else {
        return false;
    };
    !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
}

pub(super) fn registry_mirror(
    at: &mut At,
    m: Option<&raw::RegistryMirrorConfiguration>,
) -> Option<RegistryMirror> {
    let m = m?;
    let base = "spec.registryMirrorConfiguration";
    if m.endpoint.is_empty() {
        at.err(
            Code::MissingField,
            &format!("{base}.endpoint"),
            "registryMirrorConfiguration needs endpoint (the mirror's host)",
        );
    }
    let port = match &m.port {
        None => "443".to_string(),
        Some(Value::String(p)) if p.parse::<u16>().is_ok_and(|n| n > 0) => p.clone(),
        Some(Value::Number(n)) => {
            at.err(
                Code::InvalidType,
                &format!("{base}.port"),
                format!("port must be a quoted string (EKS Anywhere's schema types it so): write port: \"{n}\""),
            );
            n.to_string()
        }
        Some(other) => {
            at.err(
                Code::InvalidValue,
                &format!("{base}.port"),
                format!("port {other} is not a port from 1 to 65535"),
            );
            "443".into()
        }
    };
    let host = if m.endpoint.contains(':') && m.endpoint.parse::<IpAddr>().is_ok() {
        format!("[{}]", m.endpoint)
    } else {
        m.endpoint.clone()
    };
    let base_addr = format!("{host}:{port}");
    let mut namespaces = BTreeMap::new();
    for (i, ns) in m.oci_namespaces.iter().enumerate() {
        if ns.registry.is_empty() {
            at.err(
                Code::MissingField,
                &format!("{base}.ociNamespaces[{i}].registry"),
                "ociNamespaces entries need the registry they mirror",
            );
            continue;
        }
        let target = if ns.namespace.is_empty() {
            base_addr.clone()
        } else {
            format!("{base_addr}/{}", ns.namespace.trim_matches('/'))
        };
        namespaces.insert(ns.registry.clone(), target);
    }
    if namespaces.is_empty() {
        // EKS-A mirrors EKS Anywhere's own registry when no namespaces are given.
        namespaces.insert("public.ecr.aws".into(), base_addr.clone());
    }
    Some(RegistryMirror {
        base: base_addr,
        namespaces,
        ca_cert: m.ca_cert_content.clone().filter(|c| !c.is_empty()),
        insecure_skip_verify: m.insecure_skip_verify == Some(true),
        authenticate: m.authenticate == Some(true),
    })
}

pub(super) fn pod_iam(at: &mut At, p: Option<&raw::PodIamConfig>) -> Option<String> {
    let p = p?;
    if p.service_account_issuer.is_empty() {
        at.err(
            Code::MissingField,
            "spec.podIamConfig.serviceAccountIssuer",
            "podIamConfig needs serviceAccountIssuer",
        );
        return None;
    }
    Some(p.service_account_issuer.clone())
}

pub(super) fn etcd_encryption(
    at: &mut At,
    e: Option<&Vec<raw::EtcdEncryption>>,
    on_vms: bool,
) -> Vec<raw::EtcdEncryption> {
    let Some(list) = e else {
        return Vec::new();
    };
    let base = "spec.etcdEncryption";
    if list.len() != 1 {
        at.err(
            Code::InvalidValue,
            base,
            "etcdEncryption takes exactly one entry (EKS Anywhere supports one encryption configuration)",
        );
    }
    if !list.is_empty() && !on_vms {
        at.err(Code::InvalidValue, base, "etcdEncryption needs a KMS plugin running on the control-plane machines; EKS Anywhere supports it on vSphere and Nutanix (not docker or bare metal), and so does capstan");
    }
    for (i, enc) in list.iter().enumerate() {
        let path = format!("{base}[{i}]");
        if enc.resources.is_empty() {
            at.err(
                Code::MissingField,
                &format!("{path}.resources"),
                "etcdEncryption entries need the resources to encrypt, e.g. [secrets]",
            );
        }
        if enc.providers.len() != 1 {
            at.err(
                Code::InvalidValue,
                &format!("{path}.providers"),
                "etcdEncryption entries take exactly one KMS provider (as in EKS Anywhere)",
            );
        }
        for (j, p) in enc.providers.iter().enumerate() {
            let pp = format!("{path}.providers[{j}].kms");
            if p.kms.name.is_empty() {
                at.err(
                    Code::MissingField,
                    &format!("{pp}.name"),
                    "a KMS provider needs a name",
                );
            }
            if !p.kms.socket_listen_address.starts_with("unix://") {
                at.err(
                    Code::InvalidValue,
                    &format!("{pp}.socketListenAddress"),
                    "socketListenAddress must be a unix socket such as unix:///var/run/kmsplugin/socket.sock",
                );
            }
            if let Some(t) = &p.kms.timeout
                && crate::spec::parse_duration_seconds(t).is_none()
            {
                at.err(
                    Code::InvalidValue,
                    &format!("{pp}.timeout"),
                    format!("timeout `{t}` is not a duration such as 3s"),
                );
            }
        }
    }
    list.clone()
}

/// `certSans`: IP addresses or DNS names.
pub(super) fn cert_sans(at: &mut At, sans: &[String]) {
    for (i, san) in sans.iter().enumerate() {
        if san.parse::<IpAddr>().is_err() && !is_dns_name(san) {
            at.err(
                Code::InvalidValue,
                &format!("spec.controlPlaneConfiguration.certSans[{i}]"),
                format!("certSans entry `{san}` must be an IP address or a domain name"),
            );
        }
    }
}

/// A lowercase domain name with at least two labels.
fn is_dns_name(s: &str) -> bool {
    let labels: Vec<&str> = s.split('.').collect();
    labels.len() >= 2
        && s.len() <= 253
        && labels.iter().all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

pub(super) fn api_server_extra_args(at: &mut At, args: &BTreeMap<String, String>, has_oidc: bool) {
    for k in args.keys() {
        let path = format!("spec.controlPlaneConfiguration.apiServerExtraArgs.{k}");
        if has_oidc && OIDC_FLAGS.contains(&k.as_str()) {
            at.err(
                Code::InvalidValue,
                &path,
                format!(
                    "`{k}` is set by the cluster's OIDCConfig; remove it from apiServerExtraArgs"
                ),
            );
        } else if k.is_empty() || k.starts_with('-') {
            at.err(
                Code::InvalidValue,
                &path,
                format!("`{k}` must be a flag name without leading dashes, e.g. enable-admission-plugins"),
            );
        }
    }
}

/// A kubeletConfiguration patch: a mapping that does not set what EKS Anywhere and Cluster API
/// own (providerID, cloudProvider).
pub(super) fn kubelet_configuration(
    at: &mut At,
    v: Option<&Value>,
    path: &str,
) -> Option<Map<String, Value>> {
    let v = v?;
    let Some(m) = v.as_object() else {
        at.err(
            Code::InvalidType,
            path,
            "kubeletConfiguration must be a mapping of KubeletConfiguration fields",
        );
        return None;
    };
    for key in ["providerID", "cloudProvider"] {
        if m.contains_key(key) {
            at.err(
                Code::InvalidValue,
                &format!("{path}.{key}"),
                format!("kubeletConfiguration cannot set {key}: Cluster API and the cloud provider set it"),
            );
        }
    }
    if let Some(k) = m.get("kind")
        && k != "KubeletConfiguration"
    {
        at.err(
            Code::InvalidValue,
            &format!("{path}.kind"),
            format!("kubeletConfiguration kind must be KubeletConfiguration, not {k}"),
        );
    }
    Some(m.clone())
}

/// `auditPolicyContent`: YAML of an audit Policy.
pub(super) fn audit_policy(at: &mut At, v: Option<&String>) -> Option<String> {
    let text = v.filter(|t| !t.trim().is_empty())?;
    let path = "spec.controlPlaneConfiguration.auditPolicyContent";
    match crate::yaml::parse_values(text) {
        Ok(docs)
            if docs.len() == 1 && docs[0].get("kind").and_then(Value::as_str) == Some("Policy") => {
        }
        Ok(_) => at.err(
            Code::InvalidValue,
            path,
            "auditPolicyContent must be one audit.k8s.io Policy document (kind: Policy)",
        ),
        Err(e) => at.err(
            Code::InvalidValue,
            path,
            format!("auditPolicyContent is not valid YAML: {}", e.message),
        ),
    }
    Some(text.trim().to_string())
}

/// `clusterNetwork.nodes.cidrMaskSize` against the pod CIDR (kubeadm's rule, which EKS-A checks
/// up front): the node mask is longer than the pod mask by at most 16 bits.
pub(super) fn node_cidr_mask(
    at: &mut At,
    nodes: Option<&raw::Nodes>,
    pods: Option<ipnet::IpNet>,
) -> Option<u32> {
    let written = nodes.and_then(|n| n.cidr_mask_size);
    let path = if written.is_some() {
        "spec.clusterNetwork.nodes.cidrMaskSize"
    } else {
        "spec.clusterNetwork.pods.cidrBlocks"
    };
    let mask = written.unwrap_or(DEFAULT_NODE_CIDR_MASK as i64);
    if let Some(p) = pods {
        let pod = p.prefix_len() as i64;
        if !(pod < mask && mask - pod <= 16 && mask <= p.max_prefix_len() as i64) {
            at.err(
                Code::InvalidValue,
                path,
                format!("the node CIDR mask (/{mask}) must be longer than the pod CIDR's /{pod} by 1 to 16 bits, so every node gets a slice of {p}"),
            );
        }
    }
    written.map(|m| m.clamp(0, 128) as u32)
}

pub(super) fn resolv_conf(at: &mut At, dns: Option<&raw::Dns>) -> Option<String> {
    let r = dns?.resolv_conf.as_ref()?;
    if !r.path.starts_with('/') {
        at.err(
            Code::InvalidValue,
            "spec.clusterNetwork.dns.resolvConf.path",
            "resolvConf.path must be an absolute path on the node, e.g. /etc/my-resolv.conf",
        );
    }
    Some(r.path.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_addresses() {
        assert!(proxy_address_ok("http://10.0.0.1:3128"));
        assert!(proxy_address_ok("proxy.corp:8080"));
        assert!(proxy_address_ok("http://user@proxy.corp:8080/"));
        assert!(!proxy_address_ok("http://proxy.corp"));
        assert!(!proxy_address_ok("http://proxy.corp:0"));
        assert!(!proxy_address_ok("http://proxy.corp:99999"));
    }

    #[test]
    fn dns_names() {
        assert!(is_dns_name("api.example.com"));
        assert!(!is_dns_name("localhost"));
        assert!(!is_dns_name("API.example.com"));
        assert!(!is_dns_name("-a.example.com"));
    }
}
