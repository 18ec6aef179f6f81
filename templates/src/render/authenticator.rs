//! The AWS IAM authenticator inside a workload cluster: what EKS Anywhere's controller applies
//! there for an AWSIamConfig (`pkg/awsiamauth`), rendered as the cluster's add-ons.
//!
//! The control-plane machines get the webhook's kubeconfig and the authenticator's certificate
//! ([`super::node::aws_iam_files`]); the API server asks the authenticator on the node's
//! loopback whether a token is an AWS identity. The authenticator itself is a DaemonSet on the
//! control-plane nodes (host network, the certificate and kubeconfig from the host), its RBAC,
//! the ConfigMap with its cluster ID, and the EKS-style `aws-auth` ConfigMap holding the role and
//! user mappings.
//!
//! Why add-ons: these objects live inside the workload cluster, where capstan already applies a
//! cluster's add-ons through Cluster API's kubeconfig (never on the management cluster). They
//! join the cluster's own add-ons, so they are applied, kept against drift and pruned (the
//! AWSIamConfig removed) like any other.
//!
//! The cluster ID: EKS Anywhere draws a random UUID once and keeps it in the cluster. A rendered
//! object must be the same at every pass, so capstan derives the ID from the cluster's identity
//! ([`cluster_id`]): the management cluster, the namespace and the name. Tokens name the ID they
//! are for (`aws-iam-authenticator token -i <id>`), which keeps a token for one cluster from
//! being accepted by another; the ID is not a secret.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::RenderError;
use crate::release::{Release, VersionsBundle};
use crate::spec::Cluster;
use crate::spec::raw::{AwsIamSpec, IamMapping};

/// The authenticator's ConfigMap (its `config.yaml`: the cluster ID), in kube-system.
pub const CONFIG_MAP: &str = "aws-iam-authenticator";

/// The cluster ID of the authenticator of `cluster` managed by `management`: a UUID (version 8,
/// RFC 9562) from the SHA-256 of the three names, the same at every render.
pub fn cluster_id(management: &str, namespace: &str, cluster: &str) -> String {
    let mut h = Sha256::new();
    for part in [
        "capstan aws-iam-authenticator",
        management,
        namespace,
        cluster,
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let mut b: [u8; 16] = h.finalize()[..16].try_into().expect("16 of 32 bytes");
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let x = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &x[..8],
        &x[8..12],
        &x[12..16],
        &x[16..20],
        &x[20..]
    )
}

/// The authenticator's objects for `cluster` (none without an AWSIamConfig), with its
/// [`cluster_id`] and the images of its control plane's Kubernetes version.
pub fn addons(cluster: &Cluster, release: &Release) -> Result<Vec<Value>, RenderError> {
    if cluster.aws_iam.is_none() {
        return Ok(Vec::new());
    }
    let bundle = super::context::bundle_for(release, cluster.kubernetes_version)?;
    let id = cluster_id(&cluster.management, &cluster.namespace, &cluster.name);
    manifest(cluster, bundle, &id)
}

/// The objects EKS Anywhere applies inside the cluster for its AWSIamConfig, in its order, with
/// `id` as the cluster ID; empty without an AWSIamConfig.
pub fn manifest(
    cluster: &Cluster,
    bundle: &VersionsBundle,
    id: &str,
) -> Result<Vec<Value>, RenderError> {
    let Some(iam) = &cluster.aws_iam else {
        return Ok(Vec::new());
    };
    let missing = |what: &str| RenderError::Output {
        template: "aws-iam-authenticator".into(),
        message: format!(
            "the AWS IAM authenticator needs {what}, which the release's Kubernetes {} bundle does not name",
            bundle.kube_version
        ),
    };
    let image = bundle
        .eks_d
        .aws_iam_auth
        .as_ref()
        .ok_or_else(|| missing("the EKS-D aws-iam-authenticator-image"))?;
    let init_image = bundle
        .diagnostic_collector
        .as_ref()
        .ok_or_else(|| missing("eksa.diagnosticCollector"))?;
    let labels = json!({"k8s-app": "aws-iam-authenticator"});
    let mut out = vec![
        cluster_role(),
        json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "aws-iam-authenticator", "namespace": "kube-system"},
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "aws-iam-authenticator"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "aws-iam-authenticator"},
            "subjects": [{"kind": "ServiceAccount", "name": "aws-iam-authenticator", "namespace": "kube-system"}],
        }),
        daemon_set(cluster, iam, &image.uri, &init_image.uri),
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CONFIG_MAP, "namespace": "kube-system", "labels": labels},
            "data": {"config.yaml": format!("clusterID: {id}\n")},
        }),
    ];
    let mut data = Map::new();
    if !iam.map_roles.is_empty() {
        data.insert(
            "mapRoles".into(),
            json!(mappings(&iam.map_roles, "rolearn")),
        );
    }
    if !iam.map_users.is_empty() {
        data.insert(
            "mapUsers".into(),
            json!(mappings(&iam.map_users, "userarn")),
        );
    }
    let mut aws_auth = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "aws-auth", "namespace": "kube-system"},
    });
    if !data.is_empty() {
        aws_auth["data"] = Value::Object(data);
    }
    out.push(aws_auth);
    Ok(out)
}

/// The authenticator's ClusterRole: its mapping CRD, events, and the ConfigMaps it reads.
fn cluster_role() -> Value {
    let rule = |groups: &str, resources: &str, verbs: &[&str]| json!({"apiGroups": [groups], "resources": [resources], "verbs": verbs});
    let mut aws_auth = rule("", "configmaps", &["get"]);
    aws_auth["resourceNames"] = json!(["aws-auth"]);
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "aws-iam-authenticator"},
        "rules": [
            rule("iamauthenticator.k8s.aws", "iamidentitymappings", &["get", "list", "watch"]),
            rule("iamauthenticator.k8s.aws", "iamidentitymappings/status", &["patch", "update"]),
            rule("", "events", &["create", "update", "patch"]),
            rule("", "configmaps", &["list", "watch"]),
            aws_auth,
        ],
    })
}

/// The DaemonSet: on every control-plane node, on the host's network, serving with the
/// certificate the machine wrote from the cluster's CA Secret.
fn daemon_set(cluster: &Cluster, iam: &AwsIamSpec, image: &str, init_image: &str) -> Value {
    let mut tolerations = vec![
        json!({"effect": "NoSchedule", "key": "node-role.kubernetes.io/master"}),
        json!({"effect": "NoSchedule", "key": "node-role.kubernetes.io/control-plane"}),
        json!({"key": "CriticalAddonsOnly", "operator": "Exists"}),
    ];
    for t in cluster.control_plane.taints.iter().flatten() {
        let mut m = Map::new();
        m.insert("key".into(), json!(t.key));
        if let Some(v) = &t.value {
            m.insert("value".into(), json!(v));
        }
        m.insert("effect".into(), json!(t.effect));
        tolerations.push(Value::Object(m));
    }
    let mounts = |names: &[(&str, &str)]| -> Vec<Value> {
        names
            .iter()
            .map(|(n, p)| json!({"name": n, "mountPath": p}))
            .collect()
    };
    let files = [
        ("cert", "/var/aws-iam-authenticator/cert.pem"),
        ("key", "/var/aws-iam-authenticator/key.pem"),
        (
            "kubeconfig",
            "/etc/kubernetes/aws-iam-authenticator/kubeconfig.yaml",
        ),
    ];
    let mut main_mounts = mounts(&[("config", "/etc/aws-iam-authenticator/")]);
    main_mounts.extend(mounts(&files));
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": "aws-iam-authenticator",
            "namespace": "kube-system",
            "labels": {"k8s-app": "aws-iam-authenticator"},
            "annotations": {"seccomp.security.alpha.kubernetes.io/pod": "runtime/default"},
        },
        "spec": {
            "selector": {"matchLabels": {"k8s-app": "aws-iam-authenticator"}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {
                    "annotations": {"scheduler.alpha.kubernetes.io/critical-pod": ""},
                    "labels": {"k8s-app": "aws-iam-authenticator"},
                },
                "spec": {
                    "serviceAccountName": "aws-iam-authenticator",
                    "hostNetwork": true,
                    "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
                    "tolerations": tolerations,
                    "containers": [{
                        "name": "aws-iam-authenticator",
                        "image": image,
                        "env": [{"name": "AWS_REGION", "value": iam.aws_region}],
                        "args": [
                            "server",
                            format!("--backend-mode={}", iam.backend_mode.join(",")),
                            format!("--partition={}", iam.partition),
                            "--config=/etc/aws-iam-authenticator/config.yaml",
                            "--state-dir=/var/aws-iam-authenticator",
                            "--generate-kubeconfig=/etc/kubernetes/aws-iam-authenticator/kubeconfig.yaml",
                            "--kubeconfig-pregenerated=true",
                        ],
                        "securityContext": {
                            "runAsUser": 65532,
                            "allowPrivilegeEscalation": false,
                            "capabilities": {"drop": ["ALL"]},
                        },
                        "resources": {
                            "requests": {"memory": "20Mi", "cpu": "10m"},
                            "limits": {"memory": "20Mi", "cpu": "100m"},
                        },
                        "volumeMounts": main_mounts,
                    }],
                    "initContainers": [{
                        "name": "chown",
                        "image": init_image,
                        "command": ["sh", "-c", "chown 65532:65532 /var/aws-iam-authenticator/cert.pem; chown 65532:65532 /var/aws-iam-authenticator/key.pem; chown 65532:65532 /etc/kubernetes/aws-iam-authenticator/kubeconfig.yaml"],
                        "volumeMounts": mounts(&files),
                    }],
                    "volumes": [
                        {"name": "config", "configMap": {"name": CONFIG_MAP}},
                        {"name": "kubeconfig", "hostPath": {"path": "/var/lib/kubeadm/aws-iam-authenticator/kubeconfig.yaml"}},
                        {"name": "cert", "hostPath": {"path": "/var/lib/kubeadm/aws-iam-authenticator/pki/cert.pem"}},
                        {"name": "key", "hostPath": {"path": "/var/lib/kubeadm/aws-iam-authenticator/pki/key.pem"}},
                    ],
                },
            },
        },
    })
}

/// `mapRoles` or `mapUsers` as the YAML text of the `aws-auth` ConfigMap (the authenticator's
/// and EKS's field names: `rolearn` or `userarn`, `username`, `groups`). Scalars are written as
/// JSON strings, which YAML reads as the same strings.
fn mappings(items: &[IamMapping], arn_key: &str) -> String {
    let q = |s: &str| Value::String(s.to_string()).to_string();
    let mut out = String::new();
    for m in items {
        let arn = m
            .role_arn
            .as_deref()
            .or(m.user_arn.as_deref())
            .unwrap_or("");
        out.push_str(&format!("- {arn_key}: {}\n", q(arn)));
        out.push_str(&format!("  username: {}\n", q(&m.username)));
        if m.groups.is_empty() {
            out.push_str("  groups: []\n");
        } else {
            out.push_str("  groups:\n");
            for g in &m.groups {
                out.push_str(&format!("  - {}\n", q(g)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_ids_are_uuids_fixed_per_cluster_and_distinct_across_fleets() {
        let a = cluster_id("mgmt", "eksa-system", "dev");
        assert_eq!(a, cluster_id("mgmt", "eksa-system", "dev"));
        assert_ne!(a, cluster_id("other-mgmt", "eksa-system", "dev"));
        assert_ne!(a, cluster_id("mgmt", "team-a", "dev"));
        // Separators are part of the hash: moving a character between names changes the ID.
        assert_ne!(cluster_id("ab", "c", "d"), cluster_id("a", "bc", "d"));
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('8'), "version 8: {a}");
        assert!(
            matches!(&parts[3][..1], "8" | "9" | "a" | "b"),
            "RFC variant: {a}"
        );
    }

    #[test]
    fn mappings_read_back_as_the_entries_written() {
        let items = vec![
            IamMapping {
                role_arn: Some("arn:aws:iam::123456789012:role/admin".into()),
                user_arn: None,
                username: "admin: \"root\"".into(),
                groups: vec!["system:masters".into()],
            },
            IamMapping {
                role_arn: Some("arn:aws:iam::123456789012:role/view".into()),
                user_arn: None,
                username: "viewer".into(),
                groups: vec![],
            },
        ];
        let text = mappings(&items, "rolearn");
        let back = crate::yaml::parse_values(&text).unwrap();
        assert_eq!(
            back[0],
            json!([
                {"rolearn": "arn:aws:iam::123456789012:role/admin", "username": "admin: \"root\"", "groups": ["system:masters"]},
                {"rolearn": "arn:aws:iam::123456789012:role/view", "username": "viewer", "groups": []},
            ])
        );
    }
}
