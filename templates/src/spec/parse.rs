//! From YAML documents to raw typed objects, with every problem located.
//!
//! Dispatch is by `apiVersion`/`kind`: EKS Anywhere kinds capstan handles are deserialised into
//! the [`raw`](super::raw) types; other EKS Anywhere kinds are `unsupported-kind`; anything else is
//! an extra object of the directory, checked for tenancy by the layout. Before typed
//! deserialisation, fields on the [`UNSUPPORTED`](super::UNSUPPORTED) list are reported and
//! removed, so the typed pass only ever sees fields capstan knows.

use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::raw::{self, ObjectMeta};
use super::{EKSA_API_VERSION, EKSA_GROUP, ExtraObject, UNSUPPORTED, UNSUPPORTED_KINDS};
use crate::diag::{Code, Diagnostic};
use crate::yaml::Document;

/// One YAML document and the file it came from.
#[derive(Debug, Clone)]
pub struct SourceDoc {
    /// The file, relative to the repository root.
    pub file: PathBuf,
    /// The document.
    pub doc: Document,
}

/// A typed EKS Anywhere object and where it came from.
#[derive(Debug, Clone)]
pub(crate) struct Parsed<T> {
    pub meta: ObjectMeta,
    pub spec: T,
    pub src: usize,
    /// The object as it will be applied: case variants renamed, deprecated fields rewritten,
    /// status dropped.
    pub value: Value,
}

/// Every object of a cluster directory, sorted by kind.
#[derive(Debug, Default)]
pub(crate) struct Objects {
    pub clusters: Vec<Parsed<raw::ClusterSpec>>,
    pub docker_datacenters: Vec<Parsed<raw::DockerDatacenterSpec>>,
    pub vsphere_datacenters: Vec<Parsed<raw::VSphereDatacenterSpec>>,
    pub vsphere_machines: Vec<Parsed<raw::VSphereMachineSpec>>,
    pub nutanix_datacenters: Vec<Parsed<raw::NutanixDatacenterSpec>>,
    pub nutanix_machines: Vec<Parsed<raw::NutanixMachineSpec>>,
    pub tinkerbell_datacenters: Vec<Parsed<raw::TinkerbellDatacenterSpec>>,
    pub tinkerbell_machines: Vec<Parsed<raw::TinkerbellMachineSpec>>,
    pub tinkerbell_templates: Vec<Parsed<raw::TinkerbellTemplateSpec>>,
    pub oidc_configs: Vec<Parsed<raw::OidcSpec>>,
    pub aws_iam_configs: Vec<Parsed<raw::AwsIamSpec>>,
    pub extras: Vec<ExtraObject>,
}

/// Every object of the documents of one cluster directory, read and sorted by kind (what
/// does not read is in `diags`).
pub(crate) fn objects(docs: &[SourceDoc], diags: &mut Vec<Diagnostic>) -> Objects {
    let mut objects = Objects::default();
    for (i, sd) in docs.iter().enumerate() {
        classify(sd, i, &mut objects, diags);
    }
    objects
}

fn classify(sd: &SourceDoc, src: usize, objects: &mut Objects, diags: &mut Vec<Diagnostic>) {
    let here = |code, msg: String, path: &str| {
        Diagnostic::error(code, msg)
            .in_file(&sd.file)
            .at(sd.doc.pos(path))
    };
    let Value::Object(obj) = &sd.doc.value else {
        diags.push(here(
            Code::MissingTypeInfo,
            "a document must be a mapping with apiVersion, kind and metadata".into(),
            "",
        ));
        return;
    };
    // An empty string is as good as missing: the API server would refuse the object.
    let text = |k: &str| obj.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    let (Some(api_version), Some(kind)) = (text("apiVersion"), text("kind")) else {
        diags.push(here(
            Code::MissingTypeInfo,
            "document has no apiVersion or kind".into(),
            "",
        ));
        return;
    };
    if obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .is_none()
    {
        diags.push(here(
            Code::MissingTypeInfo,
            format!("{kind} has no metadata.name"),
            "metadata",
        ));
        return;
    }
    let group = api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
    if group != EKSA_GROUP {
        objects.extras.push(ExtraObject {
            file: sd.file.clone(),
            doc: sd.doc.clone(),
        });
        return;
    }
    if api_version != EKSA_API_VERSION {
        diags.push(here(
            Code::InvalidValue,
            format!("apiVersion `{api_version}` is not supported; use {EKSA_API_VERSION}"),
            "apiVersion",
        ));
        return;
    }
    match kind {
        "Cluster" => push(typed(sd, src, kind, diags), &mut objects.clusters),
        "DockerDatacenterConfig" => push(typed(sd, src, kind, diags), &mut objects.docker_datacenters),
        "VSphereDatacenterConfig" => push(typed(sd, src, kind, diags), &mut objects.vsphere_datacenters),
        "VSphereMachineConfig" => push(typed(sd, src, kind, diags), &mut objects.vsphere_machines),
        "NutanixDatacenterConfig" => push(typed(sd, src, kind, diags), &mut objects.nutanix_datacenters),
        "NutanixMachineConfig" => push(typed(sd, src, kind, diags), &mut objects.nutanix_machines),
        "TinkerbellDatacenterConfig" => push(typed(sd, src, kind, diags), &mut objects.tinkerbell_datacenters),
        "TinkerbellMachineConfig" => push(typed(sd, src, kind, diags), &mut objects.tinkerbell_machines),
        "TinkerbellTemplateConfig" => push(typed(sd, src, kind, diags), &mut objects.tinkerbell_templates),
        "OIDCConfig" => push(typed(sd, src, kind, diags), &mut objects.oidc_configs),
        "AWSIamConfig" => push(typed(sd, src, kind, diags), &mut objects.aws_iam_configs),
        k => match UNSUPPORTED_KINDS.iter().find(|(u, _)| *u == k) {
            Some((_, why)) => diags.push(here(
                Code::UnsupportedKind,
                format!("{k} is not supported: {why} (supported kinds: Cluster, DockerDatacenterConfig, VSphereDatacenterConfig, VSphereMachineConfig, NutanixDatacenterConfig, NutanixMachineConfig, TinkerbellDatacenterConfig, TinkerbellMachineConfig, TinkerbellTemplateConfig, OIDCConfig, AWSIamConfig)"),
                "kind",
            )),
            None => diags.push(here(Code::UnsupportedKind, format!("unknown EKS Anywhere kind `{k}`"), "kind")),
        },
    }
}

/// Spellings EKS Anywhere accepts (Go's JSON decoding matches field names case-insensitively)
/// that capstan reads with a warning naming the canonical one: `(kind, parent path, canonical
/// field)`.
const CASE_VARIANTS: &[(&str, &str, &str)] =
    &[("Cluster", "spec.controlPlaneConfiguration", "certSans")];

/// Renames case variants of fields EKS Anywhere documents under several spellings, and turns the
/// deprecated `clusterNetwork.cni` into `cniConfig`, each with a warning.
fn normalize(sd: &SourceDoc, kind: &str, value: &mut Value, diags: &mut Vec<Diagnostic>) {
    for (k, parent, field) in CASE_VARIANTS.iter().filter(|(k, ..)| *k == kind) {
        let _ = k;
        let pointer = format!("/{}", parent.replace('.', "/"));
        let Some(obj) = value.pointer_mut(&pointer).and_then(Value::as_object_mut) else {
            continue;
        };
        let variants: Vec<String> = obj
            .keys()
            .filter(|key| key.as_str() != *field && key.eq_ignore_ascii_case(field))
            .cloned()
            .collect();
        for variant in variants {
            let path = format!("{parent}.{variant}");
            if obj.contains_key(*field) {
                diags.push(
                    Diagnostic::error(
                        Code::InvalidValue,
                        format!("`{variant}` and `{field}` are the same field; keep `{field}`"),
                    )
                    .in_file(&sd.file)
                    .at(sd.doc.pos(&path)),
                );
                obj.remove(&variant);
                continue;
            }
            let v = obj.remove(&variant).expect("listed above");
            obj.insert(field.to_string(), v);
            diags.push(
                Diagnostic::warning(Code::DeprecatedField, format!("`{variant}` is read as `{field}` (EKS Anywhere matches field names regardless of case); write `{field}`"))
                    .in_file(&sd.file)
                    .at(sd.doc.pos(&path)),
            );
        }
    }
    if kind != "Cluster" {
        return;
    }
    let Some(net) = value
        .pointer_mut("/spec/clusterNetwork")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let Some(cni) = net.remove("cni") else {
        return;
    };
    let at = |path: &str| sd.doc.pos(path);
    let path = "spec.clusterNetwork.cni";
    if net.contains_key("cniConfig") {
        diags.push(
            Diagnostic::error(Code::InvalidValue, "clusterNetwork.cni and clusterNetwork.cniConfig are both set; keep cniConfig (cni is deprecated)")
                .in_file(&sd.file)
                .at(at(path)),
        );
        return;
    }
    match cni.as_str() {
        Some("cilium") => {
            net.insert("cniConfig".into(), serde_json::json!({"cilium": {}}));
            diags.push(
                Diagnostic::warning(Code::DeprecatedField, "clusterNetwork.cni is deprecated; write cniConfig: {cilium: {}}")
                    .in_file(&sd.file)
                    .at(at(path)),
            );
        }
        Some("kindnetd") => {
            net.insert("cniConfig".into(), serde_json::json!({"kindnetd": {}}));
        }
        _ => diags.push(
            Diagnostic::error(Code::InvalidValue, format!("clusterNetwork.cni `{cni}` is not a CNI EKS Anywhere knows; write cniConfig: {{cilium: {{}}}}"))
                .in_file(&sd.file)
                .at(at(path)),
        ),
    }
}

fn push<T>(p: Option<Parsed<T>>, into: &mut Vec<Parsed<T>>) {
    if let Some(p) = p {
        into.push(p);
    }
}

/// Reports unsupported and unknown fields, then deserialises metadata and spec.
fn typed<T: DeserializeOwned>(
    sd: &SourceDoc,
    src: usize,
    kind: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<Parsed<T>> {
    let mut value = sd.doc.value.clone();
    let before = diags.len();
    let obj = value
        .as_object_mut()
        .expect("classify checked this is a mapping");
    for key in obj.keys() {
        if !matches!(
            key.as_str(),
            "apiVersion" | "kind" | "metadata" | "spec" | "status"
        ) {
            diags.push(
                Diagnostic::error(
                    Code::UnknownField,
                    format!("unknown field `{key}` in {kind}"),
                )
                .in_file(&sd.file)
                .at(sd.doc.pos(key)),
            );
        }
    }
    obj.remove("status");
    for (_, pattern, why) in UNSUPPORTED.iter().filter(|(k, ..)| *k == kind) {
        for path in take_matches(&mut value, pattern) {
            diags.push(
                Diagnostic::error(
                    Code::UnsupportedField,
                    format!("{kind} field `{path}` is not supported: {why}"),
                )
                .in_file(&sd.file)
                .at(sd.doc.pos(&path)),
            );
        }
    }
    normalize(sd, kind, &mut value, diags);
    let normalized = value.clone();
    check_versions_quoted(sd, &mut value, diags);
    let obj = value.as_object_mut().expect("still a mapping");
    let meta = deserialize::<ObjectMeta>(
        obj.remove("metadata").unwrap_or(Value::Null),
        "metadata",
        sd,
        diags,
    );
    let spec = match obj.remove("spec") {
        Some(Value::Null) | None if kind == "DockerDatacenterConfig" => {
            deserialize::<T>(Value::Object(Default::default()), "spec", sd, diags)
        }
        Some(spec) => deserialize::<T>(spec, "spec", sd, diags),
        None => {
            diags.push(
                Diagnostic::error(Code::MissingField, format!("{kind} has no spec"))
                    .in_file(&sd.file)
                    .at(sd.doc.start),
            );
            None
        }
    };
    if diags[before..].iter().any(Diagnostic::is_error) {
        return None;
    }
    Some(Parsed {
        meta: meta?,
        spec: spec?,
        src,
        value: normalized,
    })
}

/// `kubernetesVersion: 1.30` is the number 1.3 in YAML; say so instead of a type error.
fn check_versions_quoted(sd: &SourceDoc, value: &mut Value, diags: &mut Vec<Diagnostic>) {
    let mut paths = vec!["spec.kubernetesVersion".to_string()];
    if let Some(groups) = value
        .pointer("/spec/workerNodeGroupConfigurations")
        .and_then(Value::as_array)
        .cloned()
    {
        paths.extend(
            (0..groups.len())
                .map(|i| format!("spec.workerNodeGroupConfigurations[{i}].kubernetesVersion")),
        );
    }
    for path in paths {
        let pointer = format!("/{}", path.replace(['.', '['], "/").replace(']', ""));
        if let Some(slot @ Value::Number(_)) = value.pointer_mut(&pointer) {
            let n = slot.to_string();
            *slot = Value::String(n.clone());
            diags.push(
                Diagnostic::error(
                    Code::UnquotedVersion,
                    format!("`{path}` must be a quoted string: YAML reads the unquoted {n} as a number, so write \"1.30\", not 1.30"),
                )
                .in_file(&sd.file)
                .at(sd.doc.pos(&path)),
            );
        }
    }
}

/// Deserialises `value` (the part of `sd` at path `prefix`) into `T`, reporting every unknown
/// field and the first other problem with its position. Used for every typed part of the
/// repository: cluster objects here, the fleet config in the layout.
pub fn deserialize<T: DeserializeOwned>(
    mut value: Value,
    prefix: &str,
    sd: &SourceDoc,
    diags: &mut Vec<Diagnostic>,
) -> Option<T> {
    // serde stops at the first unknown field; remove it and try again so that every unknown
    // field of the object is reported in one run.
    let mut unknown = 0;
    loop {
        let e = match serde_path_to_error::deserialize::<_, T>(value.clone()) {
            Ok(v) if unknown == 0 => return Some(v),
            Ok(_) => return None,
            Err(e) => e,
        };
        let inner = e.inner().to_string();
        let raw_path = e.path().to_string();
        let mut path = if raw_path == "." {
            prefix.to_string()
        } else {
            format!("{prefix}.{raw_path}")
        };
        let code = if let Some(field) = backticked(&inner, "unknown field `") {
            let mut rel = if raw_path == "." {
                String::new()
            } else {
                raw_path.clone()
            };
            if !path.ends_with(&format!(".{field}")) {
                path = format!("{path}.{field}");
                rel = if rel.is_empty() {
                    field.to_string()
                } else {
                    format!("{rel}.{field}")
                };
            }
            diags.push(
                Diagnostic::error(Code::UnknownField, format!("{path}: {inner}"))
                    .in_file(&sd.file)
                    .at(sd.doc.pos(&path)),
            );
            unknown += 1;
            if unknown < 100 && remove_path(&mut value, &rel) {
                continue;
            }
            return None;
        } else if inner.starts_with("missing field") {
            Code::MissingField
        } else if inner.starts_with("invalid type") || inner.starts_with("invalid length") {
            Code::InvalidType
        } else {
            Code::InvalidValue
        };
        diags.push(
            Diagnostic::error(code, format!("{path}: {inner}"))
                .in_file(&sd.file)
                .at(sd.doc.pos(&path)),
        );
        return None;
    }
}

/// Removes the value at a dotted path with `[i]` indexes (as serde_path_to_error writes them).
fn remove_path(value: &mut Value, path: &str) -> bool {
    let mut segs: Vec<String> = Vec::new();
    for part in path.split('.') {
        let mut rest = part;
        if let Some(i) = rest.find('[') {
            segs.push(rest[..i].to_string());
            rest = &rest[i..];
            while let Some(end) = rest.find(']') {
                segs.push(rest[..=end].to_string());
                rest = &rest[end + 1..];
            }
        } else {
            segs.push(rest.to_string());
        }
    }
    segs.retain(|s| !s.is_empty());
    let Some((last, parents)) = segs.split_last() else {
        return false;
    };
    let mut cur = value;
    for seg in parents {
        let next = match seg.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            Some(i) => i.parse::<usize>().ok().and_then(|i| cur.get_mut(i)),
            None => cur.get_mut(seg.as_str()),
        };
        match next {
            Some(n) => cur = n,
            None => return false,
        }
    }
    cur.as_object_mut()
        .is_some_and(|m| m.remove(last).is_some())
}

fn backticked<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = s.strip_prefix(prefix)?;
    rest.split('`').next()
}

/// Removes every value matching `pattern` (dotted, `[*]` for all items) and returns their paths.
fn take_matches(value: &mut Value, pattern: &str) -> Vec<String> {
    let segments: Vec<&str> = pattern.split('.').collect();
    let mut found = Vec::new();
    take_rec(value, &segments, String::new(), &mut found);
    found
}

fn take_rec(value: &mut Value, segs: &[&str], path: String, found: &mut Vec<String>) {
    let Some((first, rest)) = segs.split_first() else {
        return;
    };
    let (key, all_items) = match first.strip_suffix("[*]") {
        Some(k) => (k, true),
        None => (*first, false),
    };
    let Some(obj) = value.as_object_mut() else {
        return;
    };
    let here = if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    };
    if rest.is_empty() && !all_items {
        if obj.remove(key).is_some() {
            found.push(here);
        }
        return;
    }
    let Some(child) = obj.get_mut(key) else {
        return;
    };
    if all_items {
        if let Some(items) = child.as_array_mut() {
            for (i, item) in items.iter_mut().enumerate() {
                take_rec(item, rest, format!("{here}[{i}]"), found);
            }
        }
    } else {
        take_rec(child, rest, here, found);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn take_matches_walks_lists() {
        let mut v = json!({"spec": {"w": [{"a": 1, "b": 2}, {"b": 3}]}});
        let found = take_matches(&mut v, "spec.w[*].a");
        assert_eq!(found, vec!["spec.w[0].a"]);
        assert_eq!(v, json!({"spec": {"w": [{"b": 2}, {"b": 3}]}}));
    }
}
