//! The EKS-A objects of a cluster as capstan applies them. capstan reconciles them itself, so
//! each is paused for EKS Anywhere's controller; the fields EKS-A's defaulter would fill in and
//! its CRD requires are filled in here.

use serde_json::{Value, json};

use crate::json_text::JsonText;
use crate::spec::parse::Objects;

/// The EKS-A objects as capstan applies them: namespace filled in, paused for the EKS-A
/// controller (capstan reconciles them; the annotation also lets the EKS-A webhook accept a
/// self-managed Cluster), workloads marked with their manager, status dropped.
pub(super) fn eksa_objects(
    objects: &Objects,
    namespace: &str,
    management: &str,
    name: &str,
) -> Vec<JsonText> {
    let values = objects
        .docker_datacenters
        .iter()
        .map(|p| &p.value)
        .chain(objects.vsphere_datacenters.iter().map(|p| &p.value))
        .chain(objects.vsphere_machines.iter().map(|p| &p.value))
        .chain(objects.nutanix_datacenters.iter().map(|p| &p.value))
        .chain(objects.nutanix_machines.iter().map(|p| &p.value))
        .chain(objects.tinkerbell_datacenters.iter().map(|p| &p.value))
        .chain(objects.tinkerbell_machines.iter().map(|p| &p.value))
        .chain(objects.tinkerbell_templates.iter().map(|p| &p.value))
        .chain(objects.oidc_configs.iter().map(|p| &p.value))
        .chain(objects.aws_iam_configs.iter().map(|p| &p.value))
        .chain(objects.clusters.iter().map(|p| &p.value));
    values
        .map(|value| {
            let mut v = value.clone();
            let obj = v.as_object_mut().expect("typed objects are mappings");
            obj.remove("status");
            // EKS-A's CRD requires `insecure` and `thumbprint` (its defaulter fills them in).
            if obj.get("kind").and_then(Value::as_str) == Some("VSphereDatacenterConfig")
                && let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
            {
                spec.entry("insecure").or_insert(json!(false));
                spec.entry("thumbprint").or_insert(json!(""));
            }
            // EKS-A's CRD requires `osFamily` (its defaulter fills in ubuntu on Nutanix).
            if obj.get("kind").and_then(Value::as_str) == Some("NutanixMachineConfig")
                && let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
            {
                spec.entry("osFamily").or_insert(json!("ubuntu"));
            }
            // EKS-A's CRD requires a workflow template's `id` (EKS-A's own writes it empty).
            if obj.get("kind").and_then(Value::as_str) == Some("TinkerbellTemplateConfig")
                && let Some(t) = obj
                    .get_mut("spec")
                    .and_then(|s| s.get_mut("template"))
                    .and_then(Value::as_object_mut)
            {
                t.entry("id").or_insert(json!(""));
            }
            // A DockerDatacenterConfig written with a null spec is applied with an empty one.
            if obj.get("spec").is_some_and(Value::is_null) {
                obj.insert("spec".into(), json!({}));
            }
            let meta = obj
                .get_mut("metadata")
                .and_then(Value::as_object_mut)
                .expect("typed objects have metadata");
            meta.insert("namespace".into(), Value::String(namespace.to_string()));
            let ann = meta.entry("annotations").or_insert_with(|| json!({}));
            if let Some(ann) = ann.as_object_mut() {
                ann.insert("anywhere.eks.amazonaws.com/paused".into(), json!("true"));
                if management != name {
                    ann.insert(
                        "anywhere.eks.amazonaws.com/managed-by".into(),
                        json!(management),
                    );
                }
            }
            JsonText::new(&v)
        })
        .collect()
}
