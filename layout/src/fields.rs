//! The fields the API server knows, for the kinds a cluster directory writes beside its spec:
//! an object with a key its kind's schema does not have is refused here (`unknown-field`, at the
//! key's line), not at apply time.
//!
//! Why: the agent applies with strict field validation, so such an object is refused by the API
//! server, but only once the cluster's pass reaches it, after the objects before it in apply
//! order were written, and with the API server's words, not the file's line. A typo in a
//! HelmChartProxy (`valuesTemplates:`) or a ConfigMap (`date:`) is a mistake in the
//! repository, so it is reported with the repository's other mistakes, at its file and line,
//! and nothing of that cluster is applied.
//!
//! What is checked: the kinds of [`KINDS`] at the versions listed there (every kind a workload
//! directory may write, which management directories write too), and the object metadata of
//! those kinds. Other kinds and versions are left to the API server. The shapes are the API
//! server's own: the test `tests/e2e/tests/reconcile/known_fields.rs` reads the OpenAPI v3
//! document a real kube-apiserver serves, with the upstream CRDs installed, and fails on any
//! field one side has and the other has not.

use capstan_templates::diag::{Code, Diagnostic};
use capstan_templates::spec::ExtraObject;
use serde_json::Value;

/// What a field's value may hold, as far as its keys go.
#[derive(Debug)]
pub enum Shape {
    /// A scalar, a list of scalars, a map of free keys, or a value the schema leaves open: its
    /// keys are not checked.
    Open,
    /// An object with these fields only.
    Fields(&'static [(&'static str, Shape)]),
    /// A list of these.
    List(&'static Shape),
}

use Shape::{Fields, List, Open};

/// Kubernetes' object metadata (`ObjectMeta`).
pub const METADATA: Shape = Fields(&[
    ("annotations", Open),
    ("creationTimestamp", Open),
    ("deletionGracePeriodSeconds", Open),
    ("deletionTimestamp", Open),
    ("finalizers", Open),
    ("generateName", Open),
    ("generation", Open),
    ("labels", Open),
    (
        "managedFields",
        List(&Fields(&[
            ("apiVersion", Open),
            ("fieldsType", Open),
            ("fieldsV1", Open),
            ("manager", Open),
            ("operation", Open),
            ("subresource", Open),
            ("time", Open),
        ])),
    ),
    ("name", Open),
    ("namespace", Open),
    (
        "ownerReferences",
        List(&Fields(&[
            ("apiVersion", Open),
            ("blockOwnerDeletion", Open),
            ("controller", Open),
            ("kind", Open),
            ("name", Open),
            ("uid", Open),
        ])),
    ),
    ("resourceVersion", Open),
    ("selfLink", Open),
    ("uid", Open),
]);

/// A label selector (`LabelSelector`).
const SELECTOR: Shape = Fields(&[
    (
        "matchExpressions",
        List(&Fields(&[
            ("key", Open),
            ("operator", Open),
            ("values", Open),
        ])),
    ),
    ("matchLabels", Open),
]);

/// A Secret reference of CAAPH's (`name`, `namespace`).
const SECRET_REF: Shape = Fields(&[("name", Open), ("namespace", Open)]);

const CONFIG_MAP: Shape = Fields(&[
    ("apiVersion", Open),
    ("binaryData", Open),
    ("data", Open),
    ("immutable", Open),
    ("kind", Open),
    ("metadata", METADATA),
]);

const SECRET: Shape = Fields(&[
    ("apiVersion", Open),
    ("data", Open),
    ("immutable", Open),
    ("kind", Open),
    ("metadata", METADATA),
    ("stringData", Open),
    ("type", Open),
]);

const CLUSTER_RESOURCE_SET: Shape = Fields(&[
    ("apiVersion", Open),
    ("kind", Open),
    ("metadata", METADATA),
    (
        "spec",
        Fields(&[
            ("clusterSelector", SELECTOR),
            (
                "resources",
                List(&Fields(&[("kind", Open), ("name", Open)])),
            ),
            ("strategy", Open),
        ]),
    ),
    // The controller's: an apply of the object drops it (the status subresource).
    ("status", Open),
]);

const HELM_CHART_PROXY: Shape = Fields(&[
    ("apiVersion", Open),
    ("kind", Open),
    ("metadata", METADATA),
    (
        "spec",
        Fields(&[
            ("chartName", Open),
            ("clusterSelector", SELECTOR),
            (
                "credentials",
                Fields(&[("key", Open), ("secret", SECRET_REF)]),
            ),
            ("namespace", Open),
            (
                "options",
                Fields(&[
                    ("atomic", Open),
                    ("dependencyUpdate", Open),
                    ("disableHooks", Open),
                    ("disableOpenAPIValidation", Open),
                    ("enableClientCache", Open),
                    (
                        "install",
                        Fields(&[("createNamespace", Open), ("includeCRDs", Open)]),
                    ),
                    ("options", Open),
                    ("skipCRDs", Open),
                    ("takeOwnership", Open),
                    ("timeout", Open),
                    (
                        "uninstall",
                        Fields(&[("description", Open), ("keepHistory", Open)]),
                    ),
                    (
                        "upgrade",
                        Fields(&[
                            ("cleanupOnFail", Open),
                            ("force", Open),
                            ("maxHistory", Open),
                            ("recreate", Open),
                            ("resetThenReuseValues", Open),
                            ("resetValues", Open),
                            ("reuseValues", Open),
                        ]),
                    ),
                    ("wait", Open),
                    ("waitForJobs", Open),
                ]),
            ),
            ("reconcileStrategy", Open),
            ("releaseName", Open),
            ("repoURL", Open),
            (
                "tlsConfig",
                Fields(&[("caSecret", SECRET_REF), ("insecureSkipTLSVerify", Open)]),
            ),
            ("valuesTemplate", Open),
            ("version", Open),
        ]),
    ),
    ("status", Open),
]);

/// The kinds checked: (apiVersion, kind, shape).
pub const KINDS: &[(&str, &str, &Shape)] = &[
    ("v1", "ConfigMap", &CONFIG_MAP),
    ("v1", "Secret", &SECRET),
    (
        "addons.cluster.x-k8s.io/v1beta2",
        "ClusterResourceSet",
        &CLUSTER_RESOURCE_SET,
    ),
    (
        "addons.cluster.x-k8s.io/v1alpha1",
        "HelmChartProxy",
        &HELM_CHART_PROXY,
    ),
];

/// The shape of a kind at a version, when it is checked here.
pub fn shape_of(api_version: &str, kind: &str) -> Option<&'static Shape> {
    KINDS
        .iter()
        .find(|(a, k, _)| *a == api_version && *k == kind)
        .map(|(_, _, s)| *s)
}

/// The fields of `v` its shape does not have, as dotted paths (`spec.valuesTemplates`,
/// `spec.resources[1].namespace`), in document order of the shape's walk.
pub fn unknown(v: &Value, shape: &Shape) -> Vec<String> {
    let mut out = Vec::new();
    walk(v, shape, "", &mut out);
    out
}

fn walk(v: &Value, shape: &Shape, path: &str, out: &mut Vec<String>) {
    let join = |k: &str| match path {
        "" => k.to_string(),
        p => format!("{p}.{k}"),
    };
    match (shape, v) {
        (Open, _) => {}
        (Fields(fields), Value::Object(map)) => {
            for (k, child) in map {
                match fields.iter().find(|(name, _)| name == k) {
                    Some((_, s)) => walk(child, s, &join(k), out),
                    None => out.push(join(k)),
                }
            }
        }
        (List(item), Value::Array(items)) => {
            for (i, child) in items.iter().enumerate() {
                walk(child, item, &format!("{path}[{i}]"), out);
            }
        }
        // A value of the wrong type is the schema's to refuse, at apply.
        _ => {}
    }
}

/// The `unknown-field` errors of a directory's objects, for cluster `cluster`.
pub fn check(cluster: &str, objects: &[ExtraObject]) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for o in objects {
        let v = o.value();
        let (Some(api), Some(kind)) = (
            v.get("apiVersion").and_then(Value::as_str),
            v.get("kind").and_then(Value::as_str),
        ) else {
            continue;
        };
        let Some(shape) = shape_of(api, kind) else {
            continue;
        };
        for path in unknown(v, shape) {
            let field = path.rsplit('.').next().unwrap_or(&path);
            out.push(
                Diagnostic::error(
                    Code::UnknownField,
                    format!(
                        "{} has a field its schema does not know: `{path}` ({kind} {api} has no `{field}` there); the API server would refuse it",
                        capstan_templates::identity::subject_of(v)
                    ),
                )
                .in_file(&o.file)
                .at(o.pos(&path))
                .for_cluster(cluster),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_found_at_every_depth_and_nowhere_else() {
        let cases: &[(Value, &[&str])] = &[
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"x/y": "z"}}, "data": {"k": "v"}}),
                &[],
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "date": {"k": "v"}}),
                &["date"],
            ),
            (
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a", "label": {}}, "type": "Opaque"}),
                &["metadata.label"],
            ),
            (
                json!({"apiVersion": "addons.cluster.x-k8s.io/v1beta2", "kind": "ClusterResourceSet", "metadata": {"name": "a"},
                    "spec": {"clusterSelector": {"matchLabels": {"a": "b"}, "matchExpression": []},
                             "resources": [{"kind": "ConfigMap", "name": "a"}, {"kind": "Secret", "name": "b", "namespace": "x"}]}}),
                &[
                    "spec.clusterSelector.matchExpression",
                    "spec.resources[1].namespace",
                ],
            ),
            (
                json!({"apiVersion": "addons.cluster.x-k8s.io/v1alpha1", "kind": "HelmChartProxy", "metadata": {"name": "a"},
                    "spec": {"valuesTemplates": "x", "options": {"install": {"createNamespace": true, "wait": true}}}}),
                &["spec.options.install.wait", "spec.valuesTemplates"],
            ),
        ];
        for (v, want) in cases {
            let shape = shape_of(
                v["apiVersion"].as_str().unwrap(),
                v["kind"].as_str().unwrap(),
            )
            .unwrap();
            let mut got = unknown(v, shape);
            got.sort();
            assert_eq!(got, *want, "{v}");
        }
        // Kinds and versions not listed are the API server's to check.
        assert!(shape_of("addons.cluster.x-k8s.io/v1beta1", "ClusterResourceSet").is_none());
        assert!(shape_of("v1", "Service").is_none());
    }
}
