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
//! time, after everything else.
//!
//! Before the layers come the steps ([`steps`]): a cluster's definitions (CRDs, Namespaces) go
//! first, then its upgrade stages (etcd, control plane, CNI, workers: [`crate::stages`])
//! one after the other, because a rolling change must not start before the stage before it.
//! A pass that rolls nothing — a cluster being created, a new worker group, changes to objects
//! that roll no machine — has no such order to keep (Cluster API orders a creation itself; EKS
//! Anywhere and clusterctl apply a new cluster in one go), so all of it is one step and only
//! the references order it: a new docker cluster goes out in four round trips instead of six.

use std::collections::BTreeSet;

use serde_json::Value;

use super::ObjectRef;
use super::stages::{Stage, WorkerRollout, stage};
use capstan_templates::identity::group;

/// Whether an object defines where or what others are (a CRD, a Namespace): such objects go
/// before the rest of their cluster.
pub fn is_definition(r: &ObjectRef) -> bool {
    (r.kind == "CustomResourceDefinition" && r.group() == "apiextensions.k8s.io")
        || (r.kind == "Namespace" && r.group().is_empty())
}

/// The steps one cluster's changed objects go out in, as indices into `changed` (each an object
/// and whether it is new), each step ordered further by [`layers`]. The first step holds the
/// definitions and is always there, even empty (the caller waits for new CRDs after it). Then,
/// when some object of a rolling stage (etcd, control plane, CNI, workers) changes in place, one
/// step per stage in stage order; else one step with all the rest.
pub fn steps(changed: &[(&ObjectRef, bool)], workers: WorkerRollout) -> Vec<Vec<usize>> {
    let (definitions, mut rest): (Vec<usize>, Vec<usize>) =
        (0..changed.len()).partition(|&i| is_definition(changed[i].0));
    let stage_of = |i: usize| stage(changed[i].0, workers);
    let rolls = rest
        .iter()
        .any(|&i| !changed[i].1 && stage_of(i) != Stage::Prepare);
    let mut out = vec![definitions];
    if !rolls {
        out.extend((!rest.is_empty()).then_some(rest));
        return out;
    }
    // Stable: render order within a stage.
    rest.sort_by_key(|&i| stage_of(i));
    out.extend(
        rest.chunk_by(|&a, &b| stage_of(a) == stage_of(b))
            .map(<[usize]>::to_vec),
    );
    out
}

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
        crate::reference(&capstan_layout::Rendered::new(v))
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

    /// The example fleet's docker (`dev`) and vSphere (`prod`) clusters, as the real renderer
    /// renders them.
    fn example_fleet() -> Vec<(&'static str, Vec<Value>)> {
        let tree = capstan_layout::Tree::from_dir(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet"),
        )
        .unwrap();
        let fleet = capstan_layout::load(&tree);
        ["dev", "prod"]
            .into_iter()
            .map(|name| {
                let objs = fleet.cluster(name).unwrap().objects.as_ref().unwrap();
                (name, objs.values().into_iter().collect())
            })
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
        use crate::stages::{Stage, stage};
        for (name, objs) in example_fleet() {
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

    /// A new cluster from the example fleet as the renderer renders it: one step after its
    /// (empty) definitions, and within it the references order everything — the objects a
    /// stage held back before (control plane, workers) after what they name, not after whole
    /// stages.
    #[test]
    fn a_new_cluster_is_one_step_ordered_by_its_references() {
        for (name, objs) in example_fleet() {
            let refs: Vec<ObjectRef> = objs.iter().map(rf).collect();
            let new: Vec<(&ObjectRef, bool)> = refs.iter().map(|r| (r, true)).collect();
            let steps = steps(&new, WorkerRollout::Sequential);
            let defs = refs.iter().filter(|r| is_definition(r)).count();
            assert_eq!(steps.len(), 2, "{name}: {steps:?}");
            assert_eq!(steps[0].len(), defs, "{name}");
            assert_eq!(steps[1].len(), refs.len() - defs, "{name}");
            let rest: Vec<Value> = steps[1].iter().map(|&i| objs[i].clone()).collect();
            let rest_refs: Vec<ObjectRef> = rest.iter().map(rf).collect();
            let pairs: Vec<(&ObjectRef, &Value)> = rest_refs.iter().zip(&rest).collect();
            let layered = layers(&pairs);
            let layer_of = |kind: &str, group: &str| {
                let i = rest_refs
                    .iter()
                    .position(|r| r.kind == kind && r.group() == group)
                    .unwrap_or_else(|| panic!("{name}: no {group} {kind}"));
                layered.iter().position(|l| l.contains(&i)).unwrap()
            };
            let capi = layer_of("Cluster", "cluster.x-k8s.io");
            let kcp = layer_of("KubeadmControlPlane", "controlplane.cluster.x-k8s.io");
            let md = layer_of("MachineDeployment", "cluster.x-k8s.io");
            assert!(kcp < capi, "{name}: controlPlaneRef: {layered:?}");
            assert!(md > capi, "{name}: spec.clusterName: {layered:?}");
            let stages: BTreeSet<Stage> = rest_refs
                .iter()
                .map(|r| stage(r, WorkerRollout::Sequential))
                .collect();
            assert!(stages.len() >= 3, "{name}: {stages:?}");
            assert!(layered.len() <= 4, "{name}: {layered:?}");
        }
    }

    /// An in-place change of a rolling stage keeps the stages apart, in stage order, whatever
    /// the render order; a change that rolls nothing beside new objects does not.
    #[test]
    fn a_rolling_change_keeps_its_stages_in_order() {
        let r = |kind: &str, api_version: &str, name: &str| {
            rf(&obj(api_version, kind, name, json!({})))
        };
        let md = r("MachineDeployment", CAPI, "dev-md-0");
        let kcp = r(
            "KubeadmControlPlane",
            "controlplane.cluster.x-k8s.io/v1beta2",
            "dev",
        );
        let tmpl = r("DockerMachineTemplate", CAPD, "dev-cp-2");
        let capi = r("Cluster", CAPI, "dev");
        let ns =
            rf(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}));
        // The control plane's version bump: workers after it, the new template before it.
        let upgrade = [(&md, false), (&kcp, false), (&tmpl, true), (&ns, true)];
        assert_eq!(
            steps(&upgrade, WorkerRollout::Parallel),
            vec![vec![3], vec![2], vec![1], vec![0]]
        );
        // The same objects all new, or only the Cluster changed in place (it rolls nothing):
        // one step after the definitions.
        let created = [(&md, true), (&kcp, true), (&tmpl, true), (&ns, true)];
        assert_eq!(
            steps(&created, WorkerRollout::Parallel),
            vec![vec![3], vec![0, 1, 2]]
        );
        let grown = [(&md, true), (&capi, false), (&tmpl, true)];
        assert_eq!(
            steps(&grown, WorkerRollout::Parallel),
            vec![vec![], vec![0, 1, 2]]
        );
        // Nothing changed: only the (empty) definitions step.
        assert_eq!(
            steps(&[], WorkerRollout::Parallel),
            vec![Vec::<usize>::new()]
        );
    }

    /// Nothing to apply: no layers.
    #[test]
    fn nothing_gives_no_layers() {
        assert!(layers(&[]).is_empty());
    }
}
