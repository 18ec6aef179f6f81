//! The control plane's part of the template context: its machines, taints, kubeadm flags, the
//! files its machines get (in EKS Anywhere's order, which the kube-vip manifest's index depends
//! on), the API server's volumes, certificate SANs and pre-kubeadm commands.

use serde_json::{Value, json};

use super::{Shared, default_audit_policy, default_cp_taint, taints_json, with};
use crate::release::VersionsBundle;
use crate::render::node::{self, args_json};
use crate::spec::{Cluster, Provider};

/// Control-plane taints: as written; none written means the default NoSchedule taint on
/// vSphere and kubeadm's own on docker and Nutanix, except on a cluster without workers, whose control
/// plane must take workloads.
pub(super) fn cp_taints(s: &Shared) -> Value {
    match (
        &s.cluster.control_plane.taints,
        s.cluster.workers.is_empty(),
    ) {
        (_, true) => json!([]),
        (Some(t), false) => taints_json(t),
        (None, false) if s.is_vsphere() => json!([default_cp_taint()]),
        (None, false) => Value::Null,
    }
}

/// The control plane's part of the context: machines, kubeadm settings and flags, the files
/// its machines get.
pub(super) fn control_plane(s: &Shared, cp_bundle: &VersionsBundle, cp_taints: &Value) -> Value {
    let cluster = s.cluster;
    let minor = s.minor;
    let cp = &cluster.control_plane;
    let d = &cp_bundle.eks_d;
    let (cp_kubelet_args, cp_kubelet_patch) = node::kubelet(
        cluster,
        minor,
        cp.kubelet_configuration.as_ref(),
        &cp.labels,
        node::KubeletRole::Init,
    );
    let (cp_join_kubelet_args, _) = node::kubelet(
        cluster,
        minor,
        cp.kubelet_configuration.as_ref(),
        &cp.labels,
        node::KubeletRole::Join,
    );
    let encryption = node::encryption_config(cluster);
    let (cp_files, kube_vip_index) =
        cp_files(cluster, cp_kubelet_patch.as_deref(), encryption.as_deref());
    let feature_gates = ((s.is_vsphere() || s.tinkerbell.is_some()) && (29..33).contains(&minor))
        .then(|| json!({"EtcdLearnerMode": false}));
    with(
        json!({
            "count": cp.count,
            "version": d.tag,
            "endpoint_host": cp.endpoint_host,
            "node_image": d.kind_node.uri,
            "ntp": s.ntp(&cp.machine),
            "max_surge": cp.max_surge.unwrap_or(1),
            "patches": cp_kubelet_patch.is_some(),
            "cert_sans": cp_cert_sans(s),
            "kube_vip_file_index": kube_vip_index,
            "pre_commands": cp_pre_commands(s),
        }),
        [
            ("machine", s.machine(&cp.machine, 0, false)),
            ("users", s.users(&cp.machine, false)),
            ("taints", cp_taints.clone()),
            ("kubelet_args", args_json(&cp_kubelet_args)),
            ("kubelet_join_args", args_json(&cp_join_kubelet_args)),
            (
                "apiserver_args",
                args_json(&node::apiserver_args(cluster, minor)),
            ),
            (
                "controller_manager_args",
                args_json(&node::controller_manager_args(cluster)),
            ),
            ("scheduler_args", args_json(&node::scheduler_args())),
            ("etcd_args", args_json(&node::etcd_args())),
            (
                "extra_volumes",
                Value::Array(cp_extra_volumes(cluster, encryption.is_some())),
            ),
            ("apiserver_envs", apiserver_envs(cp.skip_admission)),
            ("files", Value::Array(cp_files)),
            ("feature_gates", feature_gates.unwrap_or(Value::Null)),
        ],
    )
}

/// Files of control-plane machines, in EKS-A's order, and the index the template puts the
/// kube-vip manifest at (vSphere; rendered by the template itself).
fn cp_files(
    cluster: &Cluster,
    kubelet_patch: Option<&str>,
    encryption: Option<&str>,
) -> (Vec<Value>, usize) {
    let audit_policy = match &cluster.control_plane.audit_policy {
        Some(p) => p.clone(),
        None => default_audit_policy().to_string(),
    };
    let mut cp_files = Vec::new();
    if let Some(p) = kubelet_patch {
        cp_files.push(node::kubelet_patch_file(p));
    }
    if let Some(e) = encryption {
        cp_files.push(
            json!({"path": node::ENCRYPTION_CONFIG_PATH, "owner": "root:root", "content": e}),
        );
    }
    // The kube-vip manifest goes here (vSphere), rendered by the template itself.
    let kube_vip_index = cp_files.len();
    let audit =
        json!({"path": node::AUDIT_POLICY_PATH, "owner": "root:root", "content": audit_policy});
    // EKS Anywhere's Nutanix template writes the audit policy last, its vSphere one before the
    // proxy and mirror files.
    let nutanix = matches!(cluster.provider, Provider::Nutanix(_));
    // The exclusion rules come right before the audit policy on every provider.
    let admission = cluster.control_plane.skip_admission.then(|| {
        json!({"path": node::ADMISSION_EXCLUSION_PATH, "owner": "root:root", "content": node::admission_exclusion_rules()})
    });
    // EKS Anywhere's bare-metal template writes the AWS IAM authenticator's files right after
    // the audit policy, the others after the registry mirror's.
    let tinkerbell = matches!(cluster.provider, Provider::Tinkerbell(_));
    if !nutanix {
        cp_files.extend(admission.clone());
        cp_files.push(audit.clone());
    }
    if tinkerbell {
        cp_files.extend(node::aws_iam_files(cluster));
    }
    if let Some(f) = node::proxy_file(cluster) {
        cp_files.push(f);
    }
    if let Some(m) = &cluster.registry_mirror {
        cp_files.extend(node::mirror_files(m, &cluster.name));
    }
    if !tinkerbell {
        cp_files.extend(node::aws_iam_files(cluster));
    }
    if nutanix {
        cp_files.extend(admission);
        cp_files.push(audit);
    }
    (cp_files, kube_vip_index)
}

/// The API server's environment: with `skipAdmissionForSystemResources`, where its exclusion
/// rules are (EKS Distro's API server reads them; upstream's ignores the variable).
fn apiserver_envs(skip_admission: bool) -> Value {
    if !skip_admission {
        return Value::Null;
    }
    json!([{"name": node::ADMISSION_EXCLUSION_ENV, "value": node::ADMISSION_EXCLUSION_PATH}])
}

/// The API server's extra volumes: the audit policy and log, the admission exclusion rules when
/// they are written, the AWS IAM authenticator's two directories, and with etcd encryption its config and the KMS plugin's socket directory.
fn cp_extra_volumes(cluster: &Cluster, encrypted: bool) -> Vec<Value> {
    let skip_admission = cluster.control_plane.skip_admission;
    let mut extra_volumes = vec![
        json!({"name": "audit-policy", "hostPath": node::AUDIT_POLICY_PATH, "mountPath": node::AUDIT_POLICY_PATH, "pathType": "File", "readOnly": true}),
        json!({"name": "audit-log-dir", "hostPath": "/var/log/kubernetes", "mountPath": "/var/log/kubernetes", "pathType": "DirectoryOrCreate", "readOnly": false}),
    ];
    if skip_admission {
        extra_volumes.push(json!({"name": "admission-exclusion-rules", "hostPath": node::ADMISSION_EXCLUSION_PATH, "mountPath": node::ADMISSION_EXCLUSION_PATH, "pathType": "File", "readOnly": true}));
    }
    extra_volumes.extend(node::aws_iam_volumes(cluster));
    if encrypted {
        extra_volumes.push(json!({"name": "encryption-config", "hostPath": node::ENCRYPTION_CONFIG_PATH, "mountPath": "/etc/kubernetes/enc/encryption-config.yaml", "pathType": "File", "readOnly": true}));
        extra_volumes.push(json!({"name": "kms-plugin", "hostPath": "/var/run/kmsplugin/", "mountPath": "/var/run/kmsplugin/", "readOnly": false}));
    }
    extra_volumes
}

/// The API server certificate's SANs: localhost on docker and Nutanix (and 0.0.0.0 there, as
/// EKS Anywhere's Nutanix template has it), then the written ones.
fn cp_cert_sans(s: &Shared) -> Vec<String> {
    let mut cert_sans: Vec<String> = Vec::new();
    if !s.is_vsphere() && s.tinkerbell.is_none() {
        cert_sans.extend(["localhost", "127.0.0.1"].map(String::from));
    }
    if s.nutanix.is_some() {
        cert_sans.push("0.0.0.0".into());
    }
    cert_sans.extend(s.cluster.control_plane.cert_sans.iter().cloned());
    cert_sans
}

/// Commands a control-plane node runs before kubeadm: the provider's, and on vSphere from 1.29
/// kube-vip's switch to super-admin.conf on the first node.
fn cp_pre_commands(s: &Shared) -> Vec<String> {
    let mut cp_pre = s.pre_commands(true);
    if (s.on_vms() || s.tinkerbell.is_some()) && s.minor >= 29 {
        // kubeadm init (only the first control-plane node has /run/kubeadm/kubeadm.yaml) hands
        // admin.conf its RBAC only after the API server is up, which kube-vip must front first.
        cp_pre.push("if [ -f /run/kubeadm/kubeadm.yaml ]; then sed -i 's#path: /etc/kubernetes/admin.conf#path: /etc/kubernetes/super-admin.conf#' /etc/kubernetes/manifests/kube-vip.yaml; fi".into());
    }
    cp_pre
}
