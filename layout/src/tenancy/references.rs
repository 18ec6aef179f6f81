//! Validation's reading of the reference table ([`super::table`]): every row of an object's kind,
//! evaluated on the object as written or rendered, with the document path of each violation (so
//! a file's object is reported at the field's `file:line:column`).
//!
//! The policy on the API server reads the same rows (the agent's `install::tenancy` generates its
//! rules from them); here a name of the cluster is also checked against the fleet's longer
//! cluster names ([`super::named_for`]), which the API server cannot know.

use serde_json::Value;

use super::CLUSTER_NAME_LABEL;
use super::table::{self, EVERY_KIND, Must, Row, Step};

/// A field that breaks its row.
#[derive(Debug, Clone)]
pub struct Violation {
    /// Where, as a document path (`spec.resources[1].name`); for a missing required field, its
    /// path (a position then falls back to its nearest written parent).
    pub at: String,
    /// The row.
    pub row: &'static Row,
    /// What was there (`nothing` when missing).
    pub found: String,
}

/// What the rows need to know of the object's cluster.
pub struct Owner<'a> {
    /// The cluster's name.
    pub cluster: &'a str,
    /// The object's namespace.
    pub namespace: &'a str,
    /// Whether a name is of the cluster's own objects.
    pub owns: &'a dyn Fn(&str) -> bool,
}

/// Every violation of `obj`'s rows (its kind's and every kind's). An object of a kind the
/// table does not have breaks no row (its kind is refused elsewhere).
pub fn check(obj: &Value, owner: &Owner<'_>) -> Vec<Violation> {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("");
    let Some(kind) = table::kind(s("/apiVersion"), s("/kind")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for row in EVERY_KIND.iter().chain(kind.rows) {
        let mut found = Vec::new();
        walk(obj, &table::steps(row.path), String::new(), &mut found);
        for (at, value) in found {
            judge(row, at, value, obj, owner, &mut out);
        }
    }
    out
}

/// The values at `steps` below `v`, each with its document path; a missing field (not under a
/// list) as `None`.
fn walk<'v>(
    v: &'v Value,
    steps: &[Step<'_>],
    at: String,
    out: &mut Vec<(String, Option<&'v Value>)>,
) {
    let Some((step, rest)) = steps.split_first() else {
        out.push((at, Some(v).filter(|v| !v.is_null())));
        return;
    };
    let join = |k: &str| {
        if at.is_empty() {
            k.to_string()
        } else {
            format!("{at}.{k}")
        }
    };
    match step {
        Step::Field(k) | Step::Key(k) => match v.get(k).filter(|x| !x.is_null()) {
            Some(x) => walk(x, rest, join(k), out),
            None => {
                let mut missing = join(k);
                for s in rest {
                    if let Step::Field(k) | Step::Key(k) = s {
                        missing = format!("{missing}.{k}");
                    }
                }
                if !rest.contains(&Step::Each) {
                    out.push((missing, None));
                }
            }
        },
        Step::Each => {
            for (i, item) in v.as_array().into_iter().flatten().enumerate() {
                walk(item, rest, format!("{at}[{i}]"), out);
            }
        }
    }
}

fn shown(v: Option<&Value>) -> String {
    match v {
        None => "nothing".into(),
        Some(Value::String(s)) => format!("`{s}`"),
        Some(other) => other.to_string(),
    }
}

fn judge(
    row: &'static Row,
    at: String,
    value: Option<&Value>,
    obj: &Value,
    owner: &Owner<'_>,
    out: &mut Vec<Violation>,
) {
    let text = value.and_then(Value::as_str);
    let ok = match row.must {
        Must::Free => true,
        Must::Own => value.is_none() || text.is_some_and(|s| (owner.owns)(s)),
        Must::OwnUnless(path, exempt) => {
            let pointer = format!("/{}", path.replace('.', "/"));
            value.is_none()
                || text.is_some_and(|s| (owner.owns)(s))
                || obj.pointer(&pointer).and_then(Value::as_str) == Some(exempt)
        }
        Must::Cluster => value.is_none() || text == Some(owner.cluster),
        Must::OwnNamespace => {
            value.is_none() || text.is_some_and(|s| s.is_empty() || s == owner.namespace)
        }
        Must::OneOf(allowed) => value.is_none() || text.is_some_and(|s| allowed.contains(&s)),
        Must::Equals(want) => text == Some(want),
        Must::Selects => {
            value
                .and_then(|s| s.get("matchLabels"))
                .and_then(|m| m.get(CLUSTER_NAME_LABEL))
                .and_then(Value::as_str)
                == Some(owner.cluster)
        }
        Must::NonEmpty => value
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty()),
        Must::Absent => value.is_none(),
        // An object of a directory or rendered names no owner (the agent adds the Cluster's).
        Must::Owners => value.and_then(Value::as_array).is_none_or(|a| a.is_empty()),
        Must::Unprefixed(prefixes) => {
            for key in value
                .and_then(Value::as_object)
                .into_iter()
                .flat_map(|m| m.keys())
            {
                if key.contains('/') && !prefixes.iter().any(|p| key.starts_with(p)) {
                    out.push(Violation {
                        at: format!("{at}.{key}"),
                        row,
                        found: format!("`{key}`"),
                    });
                }
            }
            true
        }
    };
    if !ok {
        out.push(Violation {
            at,
            row,
            found: shown(value),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn violations(obj: Value) -> Vec<(String, String)> {
        let owns = |n: &str| n == "dev" || n.starts_with("dev-");
        let owner = Owner {
            cluster: "dev",
            namespace: "ns",
            owns: &owns,
        };
        check(&obj, &owner)
            .into_iter()
            .map(|v| (v.at, v.found))
            .collect()
    }

    #[test]
    fn list_paths_are_read_item_by_item() {
        let kcp = json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
            "metadata": {"name": "dev"},
            "spec": {"kubeadmConfigSpec": {"files": [
                {"path": "/a", "contentFrom": {"secret": {"name": "dev-files", "key": "a"}}},
                {"path": "/etc/kubernetes/admin.conf", "contentFrom": {"secret": {"name": "mgmt-kubeconfig", "key": "value"}}},
            ]}, "machineTemplate": {"spec": {"infrastructureRef": {"name": "prod-cp"}}}}});
        assert_eq!(
            violations(kcp),
            vec![
                (
                    "spec.machineTemplate.spec.infrastructureRef.name".into(),
                    "`prod-cp`".into()
                ),
                (
                    "spec.kubeadmConfigSpec.files[1].contentFrom.secret.name".into(),
                    "`mgmt-kubeconfig`".into()
                ),
            ]
        );
    }

    #[test]
    fn a_failure_domain_is_the_clusters_own_unless_the_machines_are_nutanix() {
        let md = |kind: &str, fd: &str| {
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
                "metadata": {"name": "dev-md-0"},
                "spec": {"clusterName": "dev", "selector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": "dev"}},
                    "template": {"spec": {"clusterName": "dev", "failureDomain": fd,
                        "infrastructureRef": {"kind": kind, "name": "dev-md-0"}}}}})
        };
        let at = "spec.template.spec.failureDomain".to_string();
        // vSphere (and any other kind): the name of a cluster-scoped zone, so the cluster's own.
        assert_eq!(
            violations(md("VSphereMachineTemplate", "zone-a")),
            vec![(at.clone(), "`zone-a`".into())]
        );
        assert_eq!(
            violations(md("DockerMachineTemplate", "zone-a")),
            vec![(at, "`zone-a`".into())]
        );
        assert!(violations(md("VSphereMachineTemplate", "dev-dc-zone-a")).is_empty());
        // Nutanix: an entry of the cluster's own NutanixCluster, as EKS Anywhere names it.
        assert!(violations(md("NutanixMachineTemplate", "pe-1")).is_empty());
    }

    #[test]
    fn bare_metal_machines_take_only_the_hardware_labelled_for_their_cluster() {
        let tmt = |affinity: Value| {
            json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TinkerbellMachineTemplate",
                "metadata": {"name": "dev-md-0"},
                "spec": {"template": {"spec": {"hardwareAffinity": affinity, "templateOverride": "tasks: []"}}}})
        };
        let own = json!({"labelSelector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": "dev", "type": "worker"}}});
        assert!(violations(tmt(json!({"required": [own]}))).is_empty());
        // Every required term is OR'd: one without the label opens all free Hardware to it.
        assert_eq!(
            violations(tmt(
                json!({"required": [own, {"labelSelector": {"matchLabels": {"type": "cp"}}}]})
            )),
            vec![(
                "spec.template.spec.hardwareAffinity.required[1].labelSelector".into(),
                "{\"matchLabels\":{\"type\":\"cp\"}}".into()
            )]
        );
        // No required term: any free Hardware.
        assert_eq!(
            violations(tmt(json!({"preferred": []}))),
            vec![(
                "spec.template.spec.hardwareAffinity.required".into(),
                "nothing".into()
            )]
        );
        assert_eq!(
            violations(tmt(json!({"required": []}))),
            vec![(
                "spec.template.spec.hardwareAffinity.required".into(),
                "[]".into()
            )]
        );
    }

    #[test]
    fn required_fields_selectors_and_secrets() {
        let crs = json!({"apiVersion": "addons.cluster.x-k8s.io/v1beta2", "kind": "ClusterResourceSet",
            "metadata": {"name": "dev-crs"}, "spec": {"resources": []}});
        assert_eq!(
            violations(crs),
            vec![("spec.clusterSelector".into(), "nothing".into())]
        );
        let md = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"name": "dev-md-0", "labels": {"cluster.x-k8s.io/cluster-name": "dev"}},
            "spec": {"clusterName": "dev", "selector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": "dev"}},
                "template": {"spec": {"clusterName": "dev", "bootstrap": {"dataSecretName": "prod-md-0-abc"}}}}});
        assert_eq!(
            violations(md),
            vec![(
                "spec.template.spec.bootstrap.dataSecretName".into(),
                "`prod-md-0-abc`".into()
            )]
        );
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
            "metadata": {"name": "dev-token", "annotations": {"kubernetes.io/service-account.name": "eksa-controller-manager", "note": "x", "capstan.dev/adopt": "dev"}}});
        assert_eq!(
            violations(secret),
            vec![
                (
                    "type".into(),
                    "`kubernetes.io/service-account-token`".into()
                ),
                (
                    "metadata.annotations.kubernetes.io/service-account.name".into(),
                    "`kubernetes.io/service-account.name`".into()
                ),
            ]
        );
        let eksa = json!({"apiVersion": "anywhere.eks.amazonaws.com/v1alpha1", "kind": "DockerDatacenterConfig",
            "metadata": {"name": "dev", "ownerReferences": [{"name": "dev", "uid": "u"}]}});
        assert_eq!(
            violations(eksa),
            vec![
                (
                    "metadata.ownerReferences".into(),
                    r#"[{"name":"dev","uid":"u"}]"#.into()
                ),
                (
                    "metadata.annotations.anywhere.eks.amazonaws.com/paused".into(),
                    "nothing".into()
                ),
            ]
        );
        // A kind the table does not have breaks no row.
        assert!(
            violations(json!({"apiVersion": "v1", "kind": "Pod", "spec": {"topology": 1}}))
                .is_empty()
        );
    }
}
