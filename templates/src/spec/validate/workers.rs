//! Worker node groups: names (defaulted as EKS Anywhere does, `md-0` for the first), machine
//! counts and autoscaling bounds, machine configs, taints and labels, version skew against the
//! control plane, rollout, kubelet patch, health check and failure domains. Two rules concern the
//! groups together: without any, workloads run on the control plane, which then may not be
//! tainted; a management cluster needs an untainted group to run its controllers.

use std::collections::BTreeSet;

use super::fields::{check_labels, check_taints, health_override, worker_rollout};
use super::provider::MachineRefs;
use super::{At, MAX_COUNT, Versions, options};
use crate::diag::Code;
use crate::spec::{KubeVersion, Provider, WorkerGroup, is_dns_label, raw};

/// The worker groups as configured, and whether the cluster's workloads and controllers have
/// somewhere to run.
pub(super) fn workers(
    at: &mut At,
    spec: &raw::ClusterSpec,
    name: &str,
    versions: &Versions,
    provider: Option<&Provider>,
    machines: &mut MachineRefs,
) -> Vec<WorkerGroup> {
    // A control-plane-only cluster runs its workloads on untainted control-plane nodes (EKS-A's
    // templates render it so; its config validation allows it on bare metal only).
    if spec.worker_node_group_configurations.is_empty()
        && spec
            .control_plane_configuration
            .taints
            .as_ref()
            .is_some_and(|t| !t.is_empty())
    {
        at.err(
            Code::InvalidValue,
            "spec.controlPlaneConfiguration.taints",
            "a cluster without worker node groups runs its workloads on the control plane, so the control plane cannot be tainted: remove the taints or add a worker node group",
        );
    }
    let mut groups = Groups {
        cluster: name,
        kubernetes_version: versions.kubernetes,
        is_vsphere: machines.is_vsphere(),
        failure_domains: match provider {
            Some(Provider::VSphere(v)) => {
                v.failure_domains.iter().map(|f| f.name.clone()).collect()
            }
            _ => BTreeSet::new(),
        },
        names: BTreeSet::new(),
    };
    let mut workers = Vec::new();
    for (i, w) in spec.worker_node_group_configurations.iter().enumerate() {
        workers.push(groups.group(at, machines, i, w));
    }
    if versions.management == name
        && !workers.is_empty()
        && workers.iter().all(|w| {
            w.taints
                .iter()
                .any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        })
    {
        at.err(Code::InvalidValue, "spec.workerNodeGroupConfigurations", "a management cluster needs at least one worker group without NoSchedule or NoExecute taints to run its controllers");
    }
    workers
}

/// What checking one worker group needs of the cluster, and the group names taken so far.
struct Groups<'a> {
    /// The cluster's name (a group's objects are named `<cluster>-<group>`).
    cluster: &'a str,
    /// The control plane's Kubernetes minor, when valid.
    kubernetes_version: Option<KubeVersion>,
    /// Whether `datacenterRef` is a VSphereDatacenterConfig.
    is_vsphere: bool,
    /// The failure domains of the VSphereDatacenterConfig.
    failure_domains: BTreeSet<String>,
    /// Names of the groups checked so far.
    names: BTreeSet<String>,
}

impl Groups<'_> {
    /// Worker group `i` as configured, each of its fields checked.
    fn group(
        &mut self,
        at: &mut At,
        machines: &mut MachineRefs,
        i: usize,
        w: &raw::WorkerNodeGroupConfiguration,
    ) -> WorkerGroup {
        let path = format!("spec.workerNodeGroupConfigurations[{i}]");
        let wname = self.name(at, &path, i, w);
        let (count, autoscaling) = counts(at, &path, w);
        let machine = machines.resolve(
            at,
            &w.machine_group_ref,
            &format!("{path}.machineGroupRef"),
            &format!("worker group `{wname}`"),
        );
        let taints = w.taints.clone().unwrap_or_default();
        check_taints(at, &taints, &format!("{path}.taints"));
        check_labels(at, &w.labels, &format!("{path}.labels"));
        let wv = self.version(at, &path, &wname, w);
        let rollout = worker_rollout(
            at,
            &w.upgrade_rollout_strategy,
            &format!("{path}.upgradeRolloutStrategy"),
        );
        if machines.kind == Some("NutanixMachineConfig") && w.upgrade_rollout_strategy.is_some() {
            at.err(
                Code::InvalidValue,
                &format!("{path}.upgradeRolloutStrategy"),
                super::nutanix::NO_ROLLOUT_STRATEGY,
            );
        }
        let kubelet_configuration = options::kubelet_configuration(
            at,
            w.kubelet_configuration.as_ref(),
            &format!("{path}.kubeletConfiguration"),
        );
        let health = health_override(
            at,
            w.machine_health_check.as_ref(),
            &format!("{path}.machineHealthCheck"),
        );
        let failure_domain = self.failure_domain(at, &path, w);
        WorkerGroup {
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
        }
    }

    /// The group's name (`md-0` when the first is unnamed), a DNS-1123 label short enough for
    /// `<cluster>-<group>` and not taken by another group.
    fn name(
        &mut self,
        at: &mut At,
        path: &str,
        i: usize,
        w: &raw::WorkerNodeGroupConfiguration,
    ) -> String {
        let name = self.cluster;
        let wname = match (&w.name, i) {
            (Some(n), _) => n.clone(),
            (None, 0) => "md-0".to_string(),
            (None, _) => {
                at.err(
                    Code::MissingField,
                    path,
                    "worker node groups after the first need a name",
                );
                format!("md-{i}")
            }
        };
        if !is_dns_label(&wname, 63) || name.len() + 1 + wname.len() > 63 {
            at.err(Code::InvalidName, &format!("{path}.name"), format!("worker group name `{wname}` must be a DNS-1123 label and `{name}-{wname}` at most 63 characters"));
        }
        if !self.names.insert(wname.clone()) {
            at.err(
                Code::DuplicateName,
                &format!("{path}.name"),
                format!("two worker node groups named `{wname}`"),
            );
        }
        wname
    }

    /// The group's Kubernetes minor (the control plane's unless written), which may lag the
    /// control plane's by at most 2 minors and never lead it.
    fn version(
        &self,
        at: &mut At,
        path: &str,
        wname: &str,
        w: &raw::WorkerNodeGroupConfiguration,
    ) -> Option<KubeVersion> {
        let kubernetes_version = self.kubernetes_version;
        match &w.kubernetes_version {
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
        }
    }

    /// The group's failure domain: the first it names (as in EKS Anywhere), each one a failure
    /// domain of the VSphereDatacenterConfig; a vSphere feature only.
    fn failure_domain(
        &self,
        at: &mut At,
        path: &str,
        w: &raw::WorkerNodeGroupConfiguration,
    ) -> Option<String> {
        let failure_domain = w.failure_domains.first().cloned();
        for (j, fd) in w.failure_domains.iter().enumerate() {
            let fpath = format!("{path}.failureDomains[{j}]");
            if !self.is_vsphere {
                at.err(
                    Code::InvalidValue,
                    &fpath,
                    "failure domains are a vSphere feature",
                );
            } else if !self.failure_domains.contains(fd) {
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
        failure_domain
    }
}

/// The group's machine count (written, else autoscaling's minimum, else 1) and autoscaling
/// bounds, checked to fit Cluster API's replica fields and each other.
fn counts(
    at: &mut At,
    path: &str,
    w: &raw::WorkerNodeGroupConfiguration,
) -> (i64, Option<(i64, i64)>) {
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
        && (min < 0 || !(1..=MAX_COUNT).contains(&max) || min > max || count < min || count > max)
    {
        at.err(
                Code::InvalidValue,
                &format!("{path}.autoscalingConfiguration"),
                format!("autoscaling needs 0 <= minCount <= count <= maxCount and maxCount >= 1 (minCount {min}, count {count}, maxCount {max})"),
            );
    }
    (count, autoscaling)
}
