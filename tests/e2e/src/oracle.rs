//! Comparing capstan's rendered objects with EKS Anywhere's own (the oracle of
//! `tests/eksa_oracle.rs`), semantically.
//!
//! Both sides are normalised into what the API server would hold, then compared object by object
//! (kind and name) and field by field:
//!
//! - `status`, `metadata.creationTimestamp`, null values, empty strings and empty mappings are
//!   dropped (Go's typed objects print them, capstan's templates leave them out); an empty list is
//!   kept only for `taints` (where `[]` and "not set" differ: no taints versus kubeadm's default);
//! - namespaces are dropped (EKS-A renders into `eksa-system`, capstan into the cluster's
//!   namespace), and so are capstan's identity labels;
//! - immutable templates lose their name suffix (EKS-A's `-1` or its Nutanix workers' creation
//!   time, capstan's content hash), in their names and wherever they are referenced;
//! - `extraArgs` and `kubeletExtraArgs` lists become maps (their order means nothing);
//! - strings holding YAML documents (files written to machines, manifests in ClusterResourceSet
//!   ConfigMaps and Secrets) are parsed and compared as values, so formatting does not count;
//! - what Cluster API's defaulting webhooks set is set on both sides (a KubeadmControlPlane's
//!   rollout type, a MachineDeployment's cluster label, selector and template labels);
//! - apiVersions are compared as they are: both sides speak Cluster API's v1beta2 contract for
//!   core objects and CAPD, v1beta1 for CAPV and etcdadm, so a version move is a difference;
//! - capstan's HelmChartProxy for Cilium becomes the chart, version, namespace and values EKS-A's
//!   Cilium installer hands to Helm (the oracle prints those as `CiliumHelmChart`), and its
//!   HelmChartProxy for a management cluster's curated packages what EKS-A's CLI hands to Helm
//!   for the package controller (`PackagesHelmChart`).
//!
//! What remains different must match an entry of [`ALLOWED`], each with its reason.

use std::collections::{BTreeMap, BTreeSet};

use capstan_templates::identity::{CLUSTER_LABEL, MANAGED_BY_LABEL};
use serde_json::{Map, Value, json};

/// One difference between the two renders.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// `Kind/name` of the object.
    pub object: String,
    /// Dotted path of the field ("" for a whole object).
    pub path: String,
    /// What EKS Anywhere rendered (None: nothing).
    pub eksa: Option<Value>,
    /// What capstan rendered (None: nothing).
    pub capstan: Option<Value>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<Value>| match v {
            None => "<absent>".to_string(),
            Some(v) => {
                let s = v.to_string();
                if s.len() > 600 {
                    format!("{}…", s.chars().take(600).collect::<String>())
                } else {
                    s
                }
            }
        };
        write!(
            f,
            "{} {}: EKS-A {} | capstan {}",
            self.object,
            if self.path.is_empty() {
                "<object>"
            } else {
                &self.path
            },
            show(&self.eksa),
            show(&self.capstan)
        )
    }
}

/// An intentional difference: objects of `kind` whose name ends with `name_suffix`, at `path`
/// (a prefix of the difference's path; "" for a whole object), when the case is tagged `when`
/// (None: always).
#[derive(Debug)]
pub struct Allowed {
    /// Kind of the object.
    pub kind: &'static str,
    /// End of the object's name ("" for any).
    pub name_suffix: &'static str,
    /// Path prefix of the difference.
    pub path: &'static str,
    /// Corpus tag the entry applies to.
    pub when: Option<&'static str>,
    /// Why capstan differs here.
    pub reason: &'static str,
}

/// The reviewed differences between capstan and EKS Anywhere.
pub static ALLOWED: &[Allowed] = &[
    Allowed {
        kind: "Secret",
        name_suffix: "registry-credentials",
        path: "",
        when: Some("registry-auth"),
        reason: "an authenticated mirror's login is left to the admin: machines read it from <cluster>-registry-credentials in the cluster's namespace, kept encrypted in Git or created by hand (EKS-A writes registry-credentials from its CLI's environment); the test boots capstan's files with the same login and compares what containerd reads",
    },
    Allowed {
        kind: "Secret",
        name_suffix: "-cloud-provider-vsphere-credentials",
        path: "",
        when: None,
        reason: "credentials are left to the admin: the CPI's ClusterResourceSet names <cluster>-cloud-provider-vsphere-credentials, which the admin keeps on the management cluster (EKS-A writes it from its CLI's environment)",
    },
    Allowed {
        kind: "Secret",
        name_suffix: "-vsphere-credentials",
        path: "",
        when: None,
        reason: "credentials are left to the admin: capstan never renders secrets, it references the Secret <cluster>-vsphere-credentials that the admin keeps on the management cluster (EKS-A writes it from its CLI's environment)",
    },
    Allowed {
        kind: "Cluster",
        name_suffix: "",
        path: "spec.managedExternalEtcdRef",
        when: None,
        reason: "managedExternalEtcdRef exists only in EKS-A's Cluster API fork; with upstream Cluster API the agent wires external etcd itself (the EtcdadmCluster's owner reference, then the KubeadmControlPlane applied with the endpoints from the EtcdadmCluster's status)",
    },
    Allowed {
        kind: "Cluster",
        name_suffix: "",
        path: "metadata.labels.cluster.x-k8s.io/cluster-name",
        when: None,
        reason: "capstan labels every Cluster API Cluster with its name (EKS-A does on vSphere only): the label selects the cluster for capstan's HelmChartProxy (Cilium) and ClusterResourceSets",
    },
    Allowed {
        kind: "KubeadmControlPlane",
        name_suffix: "",
        path: "spec.kubeadmConfigSpec.files",
        when: Some("docker-audit-policy"),
        reason: "auditPolicyContent: EKS-A's docker provider ignores it and writes its default audit policy (its vSphere provider honours it); capstan writes the cluster's policy on every provider",
    },
    Allowed {
        kind: "KubeadmControlPlane",
        name_suffix: "",
        path: "spec.kubeadmConfigSpec.initConfiguration.nodeRegistration.taints",
        when: Some("control-plane-only"),
        reason: "a cluster without worker groups runs its workloads on the control plane: capstan leaves the control plane untainted on every provider; EKS-A's vSphere template keeps the default NoSchedule taint (its config validation refuses this shape outside bare metal, so it never renders it)",
    },
    Allowed {
        kind: "KubeadmControlPlane",
        name_suffix: "",
        path: "spec.kubeadmConfigSpec.joinConfiguration.nodeRegistration.taints",
        when: Some("control-plane-only"),
        reason: "as for initConfiguration: the control plane of a cluster without workers is untainted",
    },
    Allowed {
        kind: "ConfigMap",
        name_suffix: "-cpi-manifests",
        path: "data.data",
        when: Some("control-plane-only"),
        reason: "the cloud controller manager tolerates the control plane's taints; without the default taint there is one toleration less",
    },
    Allowed {
        kind: "Secret",
        name_suffix: "-nutanix-ccm-secret",
        path: "",
        when: None,
        reason: "credentials are left to the admin: the Nutanix cloud controller manager's ClusterResourceSet names <cluster>-nutanix-ccm-secret, which the admin keeps on the management cluster (EKS-A writes it from its CLI's environment)",
    },
    Allowed {
        kind: "NutanixCluster",
        name_suffix: "",
        path: "spec.prismCentral.credentialRef.name",
        when: None,
        reason: "credentials are left to the admin, under the cluster's own name: CAPX's login is the Secret <cluster>-nutanix-credentials (EKS-A's CLI writes capx-<cluster>); every Secret of a cluster is named <cluster>-…, the one shape the tenancy policy lets a workload name, and the name is reserved for its cluster",
    },
    Allowed {
        kind: "ClusterResourceSet",
        name_suffix: "-nutanix-ccm-crs",
        path: "spec.resources",
        when: Some("nutanix-trust-bundle"),
        reason: "EKS-A's ClusterResourceSet also names a ConfigMap user-ca-bundle in the management cluster's namespace, which nothing creates there (a missing resource keeps the set from applying); the trust bundle reaches the workload cluster inside the <cluster>-nutanix-ccm manifests, as in EKS-A",
    },
    Allowed {
        kind: "TinkerbellCluster",
        name_suffix: "",
        path: "spec.controlPlaneEndpoint.port",
        when: None,
        reason: "CAPT copies the endpoint from the Cluster API Cluster; EKS-A's typed TinkerbellCluster prints the empty endpoint's zero port, which capstan leaves out (the API server stores neither)",
    },
];

fn as_obj(v: &mut Value) -> Option<&mut Map<String, Value>> {
    v.as_object_mut()
}

/// Kinds whose names carry a suffix for immutability.
const IMMUTABLE: &[&str] = &[
    "DockerMachineTemplate",
    "VSphereMachineTemplate",
    "NutanixMachineTemplate",
    "TinkerbellMachineTemplate",
    "KubeadmConfigTemplate",
];

/// EKS Anywhere's name of an immutable template without its suffix: `-1` (what it names a new
/// cluster's templates), or the creation time in Unix milliseconds its Nutanix workers are named
/// with (`<cluster>-<group>-<ms>`, `<cluster>-<group>-template-<ms>`, and per failure domain
/// `<cluster>-<group>-<ms>-<fd>`).
fn eksa_base_name(name: &str) -> Option<String> {
    let parts: Vec<&str> = name.split('-').collect();
    let stamp = parts
        .iter()
        .position(|p| p.len() >= 10 && p.bytes().all(|b| b.is_ascii_digit()));
    match stamp {
        Some(i) => {
            let mut kept: Vec<&str> = parts[..i].to_vec();
            if kept.last() == Some(&"template") {
                kept.pop();
            }
            kept.extend(&parts[i + 1..]);
            Some(kept.join("-"))
        }
        None => name.strip_suffix("-1").map(str::to_string),
    }
}

/// Which side an object comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// EKS Anywhere (the oracle).
    Eksa,
    /// capstan.
    Capstan,
}

/// Normalises one side's objects into `Kind/name` → comparable value.
pub fn normalise(objects: &[Value], side: Side) -> BTreeMap<String, Value> {
    // Immutable template names → base names.
    let mut renames = BTreeMap::new();
    for o in objects {
        let kind = o["kind"].as_str().unwrap_or("");
        if !IMMUTABLE.contains(&kind) {
            continue;
        }
        let name = o
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let base = match side {
            Side::Eksa => eksa_base_name(name),
            Side::Capstan => name
                .rsplit_once('-')
                .filter(|(_, h)| h.len() == capstan_templates::render::HASH_LEN)
                .map(|(b, _)| b.to_string()),
        };
        if let Some(b) = base {
            renames.insert(name.to_string(), b);
        }
    }
    let mut out = BTreeMap::new();
    for o in objects {
        let kind = o["kind"].as_str().unwrap_or("").to_string();
        let group = o["apiVersion"].as_str().unwrap_or("");
        if group.starts_with("anywhere.eks.amazonaws.com") {
            continue;
        }
        let mut v = match kind.as_str() {
            "HelmChartProxy" => helm_chart_proxy(o),
            _ => o.clone(),
        };
        rename(&mut v, &renames);
        if let Some(meta) = v.get_mut("metadata").and_then(as_obj) {
            meta.remove("namespace");
            meta.remove("creationTimestamp");
            if let Some(labels) = meta.get_mut("labels").and_then(as_obj) {
                labels.remove(MANAGED_BY_LABEL);
                labels.remove(CLUSTER_LABEL);
            }
        }
        if let Some(obj) = as_obj(&mut v) {
            obj.remove("status");
        }
        capi_defaults(&kind, &mut v);
        let mut v = clean(v, "");
        let kind = v["kind"].as_str().unwrap_or(&kind).to_string();
        if kind == "CiliumHelmChart" {
            v["metadata"] = json!({"name": "cilium"});
        }
        let name = v
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        out.insert(format!("{kind}/{name}"), v);
    }
    out
}

/// capstan's HelmChartProxy as what it hands to Helm: chart, version, namespace, values (the
/// values template run as the add-on provider runs it: these templates print text only). Cilium's
/// becomes `CiliumHelmChart`; the package controller's `PackagesHelmChart`, named by its release,
/// whose CRDs are installed (`skipCRDs` false: a management cluster's release).
fn helm_chart_proxy(o: &Value) -> Value {
    let s = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or("");
    let text = s("/spec/valuesTemplate").replace("{{\"{{\"}}", "{{");
    let values = capstan_templates::yaml::parse_values(&text)
        .ok()
        .and_then(|v| v.into_iter().next())
        .unwrap_or(Value::Null);
    let mut v = json!({
        "kind": "CiliumHelmChart",
        "metadata": {"name": "cilium"},
        "chart": format!("{}/{}", s("/spec/repoURL"), s("/spec/chartName")),
        "version": s("/spec/version"),
        "namespace": s("/spec/namespace"),
        "values": values,
    });
    if s("/spec/releaseName") != "cilium" {
        v["kind"] = json!("PackagesHelmChart");
        v["metadata"] = json!({"name": s("/spec/releaseName")});
        v["skipCRDs"] = json!(
            o.pointer("/spec/options/skipCRDs")
                .and_then(Value::as_bool)
                .unwrap_or(false)
        );
    }
    v
}

fn rename(v: &mut Value, renames: &BTreeMap<String, String>) {
    match v {
        Value::String(s) => {
            if let Some(b) = renames.get(s.as_str()) {
                *s = b.clone();
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| rename(x, renames)),
        Value::Object(m) => {
            if m.get("namespace").is_some_and(Value::is_string)
                && m.contains_key("kind")
                && m.contains_key("name")
            {
                // A reference with a namespace (EtcdadmCluster.infrastructureTemplate).
                m.remove("namespace");
            }
            m.values_mut().for_each(|x| rename(x, renames));
        }
        _ => {}
    }
}

/// What Cluster API's defaulting webhooks set, set on both sides.
fn capi_defaults(kind: &str, v: &mut Value) {
    match kind {
        "KubeadmControlPlane" => {
            if let Some(s) = v.pointer_mut("/spec/rollout/strategy").and_then(as_obj)
                && s.contains_key("rollingUpdate")
            {
                s.entry("type").or_insert(json!("RollingUpdate"));
            }
        }
        "MachineDeployment" => {
            let cluster = v
                .pointer("/spec/clusterName")
                .cloned()
                .unwrap_or(Value::Null);
            let name = v.pointer("/metadata/name").cloned().unwrap_or(Value::Null);
            let labels = json!({"cluster.x-k8s.io/cluster-name": cluster, "cluster.x-k8s.io/deployment-name": name});
            if let Some(meta) = v.get_mut("metadata").and_then(as_obj) {
                let l = meta.entry("labels").or_insert(json!({}));
                if let Some(l) = l.as_object_mut() {
                    l.insert("cluster.x-k8s.io/cluster-name".into(), cluster.clone());
                }
            }
            if let Some(spec) = v.get_mut("spec").and_then(as_obj) {
                spec.insert("selector".into(), json!({"matchLabels": labels.clone()}));
                let tm = spec
                    .entry("template")
                    .or_insert(json!({}))
                    .as_object_mut()
                    .map(|t| t.entry("metadata").or_insert(json!({})));
                if let Some(Value::Object(meta)) = tm {
                    let l = meta.entry("labels").or_insert(json!({}));
                    if let (Some(l), Some(d)) = (l.as_object_mut(), labels.as_object()) {
                        for (k, x) in d {
                            l.insert(k.clone(), x.clone());
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

/// Drops empty values, turns argument lists into maps and YAML strings into values.
fn clean(v: Value, key: &str) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, x) in m {
                let x = clean(x, &k);
                if !is_empty(&x, &k) {
                    out.insert(k, x);
                }
            }
            Value::Object(out)
        }
        Value::Array(a) if key == "extraArgs" || key == "kubeletExtraArgs" => {
            let mut m = Map::new();
            for x in a {
                if let (Some(n), Some(val)) = (x["name"].as_str(), x.get("value")) {
                    m.insert(n.to_string(), val.clone());
                }
            }
            Value::Object(m)
        }
        Value::Array(a) => Value::Array(a.into_iter().map(|x| clean(x, "")).collect()),
        Value::String(s) if s.contains('\n') => match yaml_documents(&s) {
            Some(v) => clean(v, key),
            None => Value::String(s.trim_end().to_string()),
        },
        other => other,
    }
}

/// A string holding one or more YAML mappings, or one list (a JSON file's rules), parsed (one
/// document: the mapping or list; several: a list, without empty documents).
fn yaml_documents(s: &str) -> Option<Value> {
    let docs = capstan_templates::yaml::parse_values(s).ok()?;
    let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
    let one_list = docs.len() == 1 && docs[0].is_array();
    if docs.is_empty() || !(one_list || docs.iter().all(Value::is_object)) {
        return None;
    }
    Some(if docs.len() == 1 {
        docs.into_iter().next().expect("one")
    } else {
        Value::Array(docs)
    })
}

fn is_empty(v: &Value, key: &str) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty() && key != "taints",
        _ => false,
    }
}

/// Every difference between two normalised renders.
pub fn diff(eksa: &BTreeMap<String, Value>, capstan: &BTreeMap<String, Value>) -> Vec<Difference> {
    let mut out = Vec::new();
    let keys: BTreeSet<&String> = eksa.keys().chain(capstan.keys()).collect();
    for k in keys {
        match (eksa.get(k), capstan.get(k)) {
            (Some(a), Some(b)) => diff_values(k, "", a, b, &mut out),
            (a, b) => out.push(Difference {
                object: k.clone(),
                path: String::new(),
                eksa: a.cloned(),
                capstan: b.cloned(),
            }),
        }
    }
    out
}

fn diff_values(object: &str, path: &str, a: &Value, b: &Value, out: &mut Vec<Difference>) {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                // A mapping on one side only is compared with an empty one, so differences
                // are reported at their leaves.
                let empty = Value::Object(Map::new());
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => diff_values(object, &join(k), p, q, out),
                    (Some(p @ Value::Object(_)), None) => {
                        diff_values(object, &join(k), p, &empty, out)
                    }
                    (None, Some(q @ Value::Object(_))) => {
                        diff_values(object, &join(k), &empty, q, out)
                    }
                    (p, q) => out.push(Difference {
                        object: object.to_string(),
                        path: join(k),
                        eksa: p.cloned(),
                        capstan: q.cloned(),
                    }),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff_values(object, &format!("{path}[{i}]"), p, q, out);
            }
        }
        _ if a == b => {}
        _ => out.push(Difference {
            object: object.to_string(),
            path: path.to_string(),
            eksa: Some(a.clone()),
            capstan: Some(b.clone()),
        }),
    }
}

/// The allow-list entry that covers a difference, if any.
pub fn allowed(d: &Difference, tags: &[&str]) -> Option<&'static Allowed> {
    let (kind, name) = d.object.split_once('/').unwrap_or((&d.object, ""));
    ALLOWED.iter().find(|a| {
        a.kind == kind
            && name.ends_with(a.name_suffix)
            && (d.path == a.path
                || d.path.starts_with(&format!("{}.", a.path))
                || d.path.starts_with(&format!("{}[", a.path))
                || a.path.is_empty() && d.path.is_empty())
            && a.when.is_none_or(|t| tags.contains(&t))
    })
}

/// Kubernetes minors of capstan's release data, and the EKS-A release that carries each.
pub const VERSIONS: &[(u32, &str)] = &[
    (28, "v0.24.3"),
    (29, "v0.24.3"),
    (30, "v0.26.1"),
    (31, "v0.26.1"),
    (32, "v0.26.1"),
    (33, "v0.26.1"),
    (34, "v0.26.1"),
    (35, "v0.26.1"),
    (36, "v0.26.1"),
];

/// One spec of the corpus (`tests/e2e/oracle/*.yaml`).
pub struct CorpusSpec {
    /// File stem.
    pub name: String,
    /// The spec as written.
    pub text: String,
    /// `# tags:` of the spec.
    pub tags: Vec<String>,
    /// `# worker-lag:`: how many minors worker groups with a kubernetesVersion lag.
    pub worker_lag: u32,
}

/// `# key: value` directives at the top of a corpus spec.
fn directive(text: &str, key: &str) -> Option<String> {
    text.lines()
        .take_while(|l| l.starts_with('#'))
        .find_map(|l| l.strip_prefix(&format!("# {key}:")))
        .map(|v| v.trim().to_string())
}

/// Every spec of the corpus, sorted by name.
pub fn corpus_specs() -> Vec<CorpusSpec> {
    let dir = crate::repo_root().join("tests/e2e/oracle");
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/e2e/oracle")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).expect("corpus spec");
            CorpusSpec {
                name: f
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or("")
                    .to_string(),
                tags: directive(&text, "tags")
                    .map(|t| t.split(',').map(|s| s.trim().to_string()).collect())
                    .unwrap_or_default(),
                worker_lag: directive(&text, "worker-lag")
                    .map(|l| l.parse().expect("worker-lag is a number"))
                    .unwrap_or(0),
                text,
            }
        })
        .collect()
}

/// The spec with the case's versions written in: the Cluster's kubernetesVersion and
/// eksaVersion, and `minor - lag` for worker groups that name a version.
pub fn with_versions(text: &str, minor: u32, lag: u32, eksa: &str) -> String {
    let mut docs = capstan_templates::yaml::parse_values(text).expect("corpus specs parse");
    for d in &mut docs {
        if d["kind"] != "Cluster" {
            continue;
        }
        let spec = d["spec"].as_object_mut().expect("a Cluster has a spec");
        spec.insert("kubernetesVersion".into(), json!(format!("1.{minor}")));
        spec.insert("eksaVersion".into(), json!(eksa));
        if let Some(groups) = spec
            .get_mut("workerNodeGroupConfigurations")
            .and_then(Value::as_array_mut)
        {
            for g in groups {
                if let Some(v) = g.get_mut("kubernetesVersion") {
                    *v = json!(format!("1.{}", minor - lag));
                }
            }
        }
    }
    capstan_templates::yaml::to_string_multi(&docs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eksa_template_suffixes_are_dropped() {
        for (name, base) in [
            ("v-control-plane-1", Some("v-control-plane")),
            ("n-md-0-1764733800123", Some("n-md-0")),
            ("n-md-0-template-1764733800123", Some("n-md-0")),
            ("n-md-0-1764733800123-pe1", Some("n-md-0-pe1")),
            ("n-md-0", None),
        ] {
            assert_eq!(eksa_base_name(name).as_deref(), base, "{name}");
        }
    }

    #[test]
    fn argument_order_formatting_and_template_suffixes_do_not_count() {
        let eksa = vec![json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate",
            "metadata": {"name": "c-md-0-1", "namespace": "eksa-system", "creationTimestamp": null},
            "spec": {"template": {"spec": {"joinConfiguration": {"pause": {}, "nodeRegistration": {
                "kubeletExtraArgs": [{"name": "b", "value": "2"}, {"name": "a", "value": "1"}], "taints": []}},
                "files": [{"path": "/x.yaml", "content": "a: 1\nb: [x]\n"}]}}},
        })];
        let capstan = vec![json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate",
            "metadata": {"name": "c-md-0-0123456789", "namespace": "team", "labels": {MANAGED_BY_LABEL: "capstan"}},
            "spec": {"template": {"spec": {"joinConfiguration": {"nodeRegistration": {
                "kubeletExtraArgs": [{"name": "a", "value": "1"}, {"name": "b", "value": "2"}], "taints": []}},
                "files": [{"path": "/x.yaml", "content": "b:\n  - x\na: 1\n"}]}}},
        })];
        let d = diff(
            &normalise(&eksa, Side::Eksa),
            &normalise(&capstan, Side::Capstan),
        );
        assert!(d.is_empty(), "{d:?}");
    }

    #[test]
    fn a_changed_value_and_a_missing_taint_list_are_differences() {
        let eksa = vec![
            json!({"kind": "KubeadmControlPlane", "metadata": {"name": "c"},
            "spec": {"kubeadmConfigSpec": {"initConfiguration": {"nodeRegistration": {"criSocket": "x", "taints": []}}},
                     "kubeadmConfigSpecX": {"profiling": "false"}}}),
        ];
        let capstan = vec![
            json!({"kind": "KubeadmControlPlane", "metadata": {"name": "c"},
            "spec": {"kubeadmConfigSpec": {"initConfiguration": {"nodeRegistration": {"criSocket": "x"}}},
                     "kubeadmConfigSpecX": {"profiling": "true"}}}),
        ];
        let d = diff(
            &normalise(&eksa, Side::Eksa),
            &normalise(&capstan, Side::Capstan),
        );
        let paths: Vec<&str> = d.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "spec.kubeadmConfigSpec.initConfiguration.nodeRegistration.taints",
                "spec.kubeadmConfigSpecX.profiling"
            ]
        );
        assert!(d.iter().all(|d| allowed(d, &[]).is_none()));
    }
}
