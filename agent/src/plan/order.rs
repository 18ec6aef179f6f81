//! The order the changed objects of one apply stage go out in: every object after the objects of
//! the same stage it names, everything else at once.
//!
//! Why: a new workload cluster is about a dozen objects, and applying them one after the other
//! in render order made a cluster's cold apply a dozen round trips where the API server could
//! take them all together. The API server itself does not care about order, but Cluster API's
//! controllers do: a `Cluster` created before its `DockerCluster`, or a `MachineHealthCheck`
//! before its `Cluster`, is reconciled against an object that is not there yet and retried with
//! backoff. So an object waits for what it references, and nothing else waits:
//!
//! ```text
//! stage Prepare:  layer 0  DockerDatacenterConfig, DockerMachineTemplates, KubeadmConfigTemplate,
//!                          DockerCluster, ConfigMap                      (name nothing: at once)
//!                 layer 1  EKS-A Cluster (datacenterRef), CAPI Cluster (infrastructureRef),
//!                 layer 2  MachineHealthChecks (spec.clusterName → the CAPI Cluster)
//! ```
//!
//! A reference is any mapping inside the object with a `kind` and a `name` (Cluster API's
//! `infrastructureRef`, `controlPlaneRef`, `configRef`, EKS Anywhere's `datacenterRef`,
//! `machineGroupRef`, owner references), scoped by its `apiVersion` or `apiGroup` when it has
//! one and by its `namespace` (else the referrer's); and Cluster API's `spec.clusterName`, which
//! names the `cluster.x-k8s.io` Cluster. Only references to objects in the same set order
//! anything. A reference cycle (none renders today) falls back to render order, one object at a
//! time, after everything else. The stages themselves (etcd, control plane, CNI, workers) keep
//! their own order in [`crate::plan::stages`].

use std::collections::BTreeSet;

use serde_json::Value;

use super::ObjectRef;
use capstan_templates::identity::group;

/// A reference found inside an object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Named {
    /// The group, when the reference says.
    group: Option<String>,
    kind: String,
    namespace: Option<String>,
    name: String,
}

impl Named {
    fn names(&self, r: &ObjectRef, referrer_namespace: &str) -> bool {
        self.kind == r.kind
            && self.name == r.name
            && self.group.as_deref().is_none_or(|g| g == r.group())
            && (r.namespace.is_empty()
                || self.namespace.as_deref().unwrap_or(referrer_namespace) == r.namespace)
    }
}

/// The references inside one object (its own `kind`/`metadata.name` are not one).
fn references(obj: &Value) -> BTreeSet<Named> {
    let mut out = BTreeSet::new();
    if let Some(name) = obj.pointer("/spec/clusterName").and_then(Value::as_str) {
        out.insert(Named {
            group: Some("cluster.x-k8s.io".into()),
            kind: "Cluster".into(),
            namespace: None,
            name: name.into(),
        });
    }
    if let Some(fields) = obj.as_object() {
        for (key, v) in fields {
            if key != "apiVersion" && key != "kind" {
                walk(v, &mut out);
            }
        }
    }
    out
}

fn walk(v: &Value, out: &mut BTreeSet<Named>) {
    match v {
        Value::Object(m) => {
            let s = |k: &str| m.get(k).and_then(Value::as_str);
            if let (Some(kind), Some(name)) = (s("kind"), s("name")) {
                out.insert(Named {
                    group: s("apiVersion")
                        .map(|a| group(a).to_string())
                        .or_else(|| s("apiGroup").filter(|g| !g.is_empty()).map(str::to_string)),
                    kind: kind.into(),
                    namespace: s("namespace").map(str::to_string),
                    name: name.into(),
                });
            }
            m.values().for_each(|v| walk(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
        _ => {}
    }
}

/// The layers `objects` are applied in: indices into `objects`, each layer after the ones before
/// it, the objects of a layer at once, each layer in the order given.
pub fn layers(objects: &[(&ObjectRef, &Value)]) -> Vec<Vec<usize>> {
    let deps: Vec<BTreeSet<usize>> = objects
        .iter()
        .enumerate()
        .map(|(i, (r, v))| {
            let named = references(v);
            objects
                .iter()
                .enumerate()
                .filter(|&(j, (target, _))| {
                    j != i && named.iter().any(|n| n.names(target, &r.namespace))
                })
                .map(|(j, _)| j)
                .collect()
        })
        .collect();
    let mut placed = vec![false; objects.len()];
    let mut out: Vec<Vec<usize>> = Vec::new();
    loop {
        let layer: Vec<usize> = (0..objects.len())
            .filter(|&i| !placed[i] && deps[i].iter().all(|&d| placed[d]))
            .collect();
        if layer.is_empty() {
            break;
        }
        layer.iter().for_each(|&i| placed[i] = true);
        out.push(layer);
    }
    // A cycle: what is left, one at a time in render order.
    out.extend((0..objects.len()).filter(|&i| !placed[i]).map(|i| vec![i]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rf(v: &Value) -> ObjectRef {
        crate::plan::reference(&capstan_layout::Rendered::new(v))
    }

    fn obj(api_version: &str, kind: &str, name: &str, spec: Value) -> Value {
        json!({"apiVersion": api_version, "kind": kind,
               "metadata": {"name": name, "namespace": "team"}, "spec": spec})
    }

    fn order(objs: &[Value]) -> Vec<Vec<String>> {
        let refs: Vec<ObjectRef> = objs.iter().map(rf).collect();
        let pairs: Vec<(&ObjectRef, &Value)> = refs.iter().zip(objs).collect();
        layers(&pairs)
            .into_iter()
            .map(|l| l.into_iter().map(|i| refs[i].subject()).collect())
            .collect()
    }

    const CAPI: &str = "cluster.x-k8s.io/v1beta2";
    const CAPD: &str = "infrastructure.cluster.x-k8s.io/v1beta2";
    const EKSA: &str = "anywhere.eks.amazonaws.com/v1alpha1";

    /// A new docker workload cluster's Prepare stage, in render order: what names nothing goes
    /// out at once, each referrer after what it names.
    #[test]
    fn a_cluster_prepare_stage_goes_out_in_three_layers() {
        let objs = [
            obj(EKSA, "DockerDatacenterConfig", "dev", json!({})),
            obj(
                EKSA,
                "Cluster",
                "dev",
                json!({"datacenterRef": {"kind": "DockerDatacenterConfig", "name": "dev"}}),
            ),
            obj(CAPD, "DockerMachineTemplate", "dev-cp", json!({})),
            obj(CAPD, "DockerCluster", "dev", json!({})),
            obj(
                CAPI,
                "Cluster",
                "dev",
                json!({
                    "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io",
                                        "kind": "KubeadmControlPlane", "name": "dev"},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                          "kind": "DockerCluster", "name": "dev"}}),
            ),
            obj(
                CAPI,
                "MachineHealthCheck",
                "dev-kcp",
                json!({"clusterName": "dev"}),
            ),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "dev-owners", "namespace": "team"}}),
        ];
        assert_eq!(
            order(&objs),
            vec![
                vec![
                    "DockerDatacenterConfig/team/dev",
                    "DockerMachineTemplate/team/dev-cp",
                    "DockerCluster/team/dev",
                    "ConfigMap/team/dev-owners"
                ],
                vec!["Cluster/team/dev", "Cluster/team/dev"],
                vec!["MachineHealthCheck/team/dev-kcp"],
            ]
        );
    }

    /// The group and namespace of a reference scope it: the EKS-A Cluster and the CAPI Cluster
    /// share a name, and another namespace's object of the same name is someone else's.
    #[test]
    fn references_are_scoped_by_group_and_namespace() {
        let objs = [
            obj(CAPI, "Cluster", "dev", json!({})),
            obj(EKSA, "Cluster", "dev", json!({})),
            obj(
                CAPI,
                "MachineDeployment",
                "dev-md-0",
                json!({"clusterName": "dev"}),
            ),
            obj(
                CAPI,
                "MachineSet",
                "x",
                json!({"ref": {"apiVersion": CAPD, "kind": "DockerCluster",
                               "name": "dev", "namespace": "elsewhere"}}),
            ),
            obj(CAPD, "DockerCluster", "dev", json!({})),
        ];
        assert_eq!(
            order(&objs),
            vec![
                vec![
                    "Cluster/team/dev",
                    "Cluster/team/dev",
                    "MachineSet/team/x",
                    "DockerCluster/team/dev"
                ],
                vec!["MachineDeployment/team/dev-md-0"],
            ]
        );
        // The MachineDeployment waited for the CAPI Cluster alone.
        let refs: Vec<ObjectRef> = objs.iter().map(rf).collect();
        let named = references(&objs[2]);
        assert!(named.iter().any(|n| n.names(&refs[0], "team")));
        assert!(!named.iter().any(|n| n.names(&refs[1], "team")));
    }

    /// A cluster-scoped object named from a namespaced one is found without a namespace.
    #[test]
    fn a_cluster_scoped_target_matches_from_any_namespace() {
        let objs = [
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "dev-admins", "namespace": "team"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                               "kind": "ClusterRole", "name": "dev-admin"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "dev-admin"}}),
        ];
        assert_eq!(
            order(&objs),
            vec![
                vec!["ClusterRole/dev-admin".to_string()],
                vec!["RoleBinding/team/dev-admins".into()]
            ]
        );
    }

    /// A cycle cannot be layered: those objects go one at a time in render order, last.
    #[test]
    fn a_cycle_falls_back_to_render_order() {
        let objs = [
            obj(CAPD, "A", "a", json!({"x": {"kind": "B", "name": "b"}})),
            obj(CAPD, "C", "c", json!({})),
            obj(CAPD, "B", "b", json!({"x": {"kind": "A", "name": "a"}})),
        ];
        assert_eq!(
            order(&objs),
            vec![vec!["C/team/c"], vec!["A/team/a"], vec!["B/team/b"]]
        );
    }

    /// The example fleet as the real renderer renders it: in each cluster's Prepare stage the
    /// CAPI Cluster goes out after its infrastructure cluster, the EKS-A Cluster after its
    /// datacenter and machine configs, the MachineHealthChecks after the CAPI Cluster, and the
    /// rest of the stage at once.
    #[test]
    fn the_rendered_example_fleet_goes_out_referenced_first() {
        use crate::plan::stages::{Stage, stage};
        let tree = capstan_layout::Tree::from_dir(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet"),
        )
        .unwrap();
        let fleet = capstan_layout::load(&tree);
        for name in ["dev", "prod"] {
            let objs = fleet
                .cluster(name)
                .unwrap()
                .objects
                .as_ref()
                .unwrap()
                .values();
            let prepare: Vec<Value> = objs
                .into_iter()
                .filter(|v| stage(&rf(v), Default::default()) == Stage::Prepare)
                .collect();
            let refs: Vec<ObjectRef> = prepare.iter().map(rf).collect();
            let pairs: Vec<(&ObjectRef, &Value)> = refs.iter().zip(&prepare).collect();
            let layered = layers(&pairs);
            let layer_of = |i: usize| layered.iter().position(|l| l.contains(&i)).unwrap();
            let at = |kind: &str, group: &str| {
                let i = refs
                    .iter()
                    .position(|r| r.kind == kind && r.group() == group)
                    .unwrap_or_else(|| panic!("{name}: no {group} {kind}"));
                layer_of(i)
            };
            let infra = ["DockerCluster", "VSphereCluster"]
                .into_iter()
                .find(|k| refs.iter().any(|r| r.kind == *k))
                .unwrap();
            let capi = at("Cluster", "cluster.x-k8s.io");
            assert!(
                at(infra, "infrastructure.cluster.x-k8s.io") < capi,
                "{name}: {layered:?}"
            );
            assert!(
                at("MachineHealthCheck", "cluster.x-k8s.io") > capi,
                "{name}: {layered:?}"
            );
            let eksa_cluster = at("Cluster", "anywhere.eks.amazonaws.com");
            let configs: Vec<usize> = (0..refs.len())
                .filter(|&i| {
                    refs[i].group() == "anywhere.eks.amazonaws.com" && refs[i].kind != "Cluster"
                })
                .collect();
            assert!(!configs.is_empty(), "{name}");
            assert!(
                configs.iter().all(|&i| layer_of(i) < eksa_cluster),
                "{name}: {layered:?}"
            );
            assert!(layered.len() <= 3, "{name}: {layered:?}");
            assert!(layered[0].len() * 2 > prepare.len(), "{name}: {layered:?}");
        }
    }

    /// Nothing to apply: no layers.
    #[test]
    fn nothing_gives_no_layers() {
        assert!(layers(&[]).is_empty());
    }
}
