//! The cluster's network: pod and service CIDRs (valid and apart), the CNI (Cilium, with EKS
//! Anywhere's defaults; kindnetd refused, being EKS-A's development-only CNI), the node CIDR mask
//! and the resolv.conf kubelet reads.

use super::fields::{cidr, cilium};
use super::{At, options};
use crate::diag::Code;
use crate::spec::{Network, raw};

/// The network as configured; None when a CIDR is missing or invalid (reported).
pub(super) fn network(at: &mut At, net: &raw::ClusterNetwork) -> Option<Network> {
    let pods = cidr(
        at,
        &net.pods.cidr_blocks,
        "spec.clusterNetwork.pods.cidrBlocks",
    );
    let services = cidr(
        at,
        &net.services.cidr_blocks,
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
    if net
        .cni_config
        .as_ref()
        .is_some_and(|c| c.kindnetd.is_some())
    {
        at.err(Code::InvalidValue, "spec.clusterNetwork.cniConfig.kindnetd", "kindnetd is EKS Anywhere's development-only CNI of its CLI's docker path (its controller installs Cilium only); capstan installs Cilium: use cniConfig: {cilium: {}}");
    }
    let cilium = cilium(at, net.cni_config.as_ref().and_then(|c| c.cilium.clone()));
    let node_cidr_mask_size = options::node_cidr_mask(at, net.nodes.as_ref(), pods);
    let resolv_conf = options::resolv_conf(at, net.dns.as_ref());
    Some(Network {
        pods: pods?,
        services: services?,
        cilium,
        node_cidr_mask_size,
        resolv_conf,
    })
}
