//! The renderer: a validated [`Cluster`] and its [`Release`] in, Kubernetes objects out.
//!
//! Pure and deterministic: the same input gives byte-identical output. Rendering runs in two
//! passes over template files (under `templates/providers/`, rendered by minijinja with strict
//! undefined variables):
//!
//! 1. the immutable templates (machine templates, KubeadmConfigTemplates) are rendered with
//!    base names; each then gets a suffix of the sha256 of what it rendered, so a change of
//!    content is a change of name, which is what makes Cluster API roll the machines;
//! 2. everything else is rendered with those final names.
//!
//! Every template's output is parsed back and checked (type info, namespace, names) before it is
//! returned: a template bug is a [`RenderError`], never a silently wrong object.
//!
//! Output order is the apply order: EKS-A objects, immutable templates, infrastructure cluster,
//! etcd, control plane, Cluster, workers, health checks, CNI, then the directory's extra objects.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use minijinja::{Environment, UndefinedBehavior};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::identity::{CLUSTER_LABEL, MANAGED_BY, MANAGED_BY_LABEL};
use crate::release::{Release, VersionsBundle};
use crate::spec::{Cluster, DockerBackend, KubeVersion, Provider, Taint, VSphereMachine};

/// Length of the content-hash suffix of immutable templates, in hex digits.
pub const HASH_LEN: usize = 10;

/// Why rendering failed.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The release has no bundle for a Kubernetes version (validation normally prevents this).
    #[error("EKS Anywhere {release} has no bundle for Kubernetes {version}")]
    MissingBundle {
        /// The release.
        release: String,
        /// The version.
        version: KubeVersion,
    },
    /// A template failed to render.
    #[error("template {template}: {message}")]
    Template {
        /// Template file.
        template: String,
        /// What went wrong, with the template line.
        message: String,
    },
    /// A template rendered something that is not a valid object.
    #[error("template {template} produced invalid output: {message}")]
    Output {
        /// Template file.
        template: String,
        /// What is wrong.
        message: String,
    },
}

macro_rules! template_files {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../providers/", $name))),)*]
    };
}

/// Every provider template, embedded at build time.
const TEMPLATES: &[(&str, &str)] = template_files![
    "common/cluster.yaml.j2",
    "common/cni.yaml.j2",
    "common/etcd.yaml.j2",
    "common/health-checks.yaml.j2",
    "common/kcp-etcd.yaml.j2",
    "common/workers.yaml.j2",
    "docker/bootstrap-templates.yaml.j2",
    "docker/control-plane.yaml.j2",
    "docker/infrastructure-cluster.yaml.j2",
    "docker/kcp-node-registration.yaml.j2",
    "docker/machine-templates.yaml.j2",
    "vsphere/bootstrap-templates.yaml.j2",
    "vsphere/control-plane.yaml.j2",
    "vsphere/infrastructure-cluster.yaml.j2",
    "vsphere/kcp-node-registration.yaml.j2",
    "vsphere/kube-vip.yaml.j2",
    "vsphere/machine-templates.yaml.j2",
    "vsphere/users.yaml.j2",
];

fn environment() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        environment_with(TEMPLATES).expect("embedded templates compile; checked by tests")
    })
}

/// Builds a template environment from `(name, source)` pairs (tests use this to break templates).
pub fn environment_with(
    templates: &[(&'static str, &'static str)],
) -> Result<Environment<'static>, RenderError> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    // Values are quoted explicitly with `tojson`; no implicit escaping by file extension.
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .keep_trailing_newline(true)
        .build()
        .expect("default delimiters are valid");
    env.set_syntax(syntax);
    for (name, src) in templates {
        env.add_template(name, src)
            .map_err(|e| RenderError::Template {
                template: name.to_string(),
                message: e.to_string(),
            })?;
    }
    Ok(env)
}

/// Renders a cluster with the embedded templates.
pub fn render(cluster: &Cluster, release: &Release) -> Result<Vec<Value>, RenderError> {
    render_with(environment(), cluster, release)
}

/// Renders a cluster with the templates of `env`.
pub fn render_with(
    env: &Environment<'_>,
    cluster: &Cluster,
    release: &Release,
) -> Result<Vec<Value>, RenderError> {
    let provider = cluster.provider.name();
    let mut ctx = context(cluster, release)?;

    // Pass 1: immutable templates, named by content.
    let values = minijinja::Value::from(minijinja::value::Serde(&ctx));
    let mut immutable = render_file(
        env,
        &format!("{provider}/machine-templates.yaml.j2"),
        &values,
        cluster,
    )?;
    let mut bootstrap = render_file(
        env,
        &format!("{provider}/bootstrap-templates.yaml.j2"),
        &values,
        cluster,
    )?;
    let mut names = BTreeMap::new();
    for obj in &mut immutable {
        hash_name(obj, "", &mut names);
    }
    for obj in &mut bootstrap {
        hash_name(obj, "#bootstrap", &mut names);
    }
    immutable.extend(bootstrap);
    ctx.insert("names".into(), json!(names));
    let values = minijinja::Value::from(minijinja::value::Serde(&ctx));

    // Pass 2: objects that refer to the immutable ones.
    let mut files = vec![format!("{provider}/infrastructure-cluster.yaml.j2")];
    if cluster.etcd.is_some() {
        files.push("common/etcd.yaml.j2".into());
    }
    files.push(format!("{provider}/control-plane.yaml.j2"));
    files.extend(
        [
            "common/cluster.yaml.j2",
            "common/workers.yaml.j2",
            "common/health-checks.yaml.j2",
            "common/cni.yaml.j2",
        ]
        .map(String::from),
    );

    let mut out: Vec<Value> = cluster
        .eksa_objects
        .iter()
        .map(|o| with_eksa_version(o, release))
        .collect();
    out.extend(immutable);
    for f in &files {
        out.extend(render_file(env, f, &values, cluster)?);
    }
    out.extend(cluster.extra_objects.iter().map(|e| {
        let mut v = e.value().clone();
        let cluster_scoped = is_cluster_scoped(
            v.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
            v.get("kind").and_then(Value::as_str).unwrap_or(""),
        );
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut)
            && !cluster_scoped
        {
            meta.entry("namespace")
                .or_insert_with(|| json!(cluster.namespace));
        }
        v
    }));
    for obj in &mut out {
        label(obj, &cluster.name);
    }
    Ok(out)
}

/// Cluster-scoped kinds of Kubernetes itself a management directory may carry: they get no
/// default namespace. (A custom cluster-scoped kind is written without one in the repository.)
pub const CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "PersistentVolume"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("storage.k8s.io", "StorageClass"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("networking.k8s.io", "IngressClass"),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("apiregistration.k8s.io", "APIService"),
];

/// Whether `kind` of `api_version` is one of [`CLUSTER_SCOPED`].
pub fn is_cluster_scoped(api_version: &str, kind: &str) -> bool {
    let group = api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
    CLUSTER_SCOPED.contains(&(group, kind))
}

/// Sets the resolved eksaVersion on the EKS-A Cluster object (a workload inherits its manager's).
fn with_eksa_version(obj: &Value, release: &Release) -> Value {
    let mut v = obj.clone();
    if v.get("kind").and_then(Value::as_str) == Some("Cluster")
        && let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut)
        && !spec.contains_key("bundlesRef")
    {
        spec.insert("eksaVersion".into(), json!(release.version.to_string()));
    }
    v
}

fn label(obj: &mut Value, cluster: &str) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(MANAGED_BY_LABEL.into(), json!(MANAGED_BY));
            labels.insert(CLUSTER_LABEL.into(), json!(cluster));
        }
    }
}

/// The sha256 of an immutable template's kind and spec, as the hex suffix of its name (its
/// metadata does not count: a label change must not roll machines).
pub fn name_suffix(obj: &Value) -> String {
    let mut h = Sha256::new();
    h.update(
        obj.get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .as_bytes(),
    );
    h.update(b"\0");
    // serde_json maps are sorted by key, so this serialisation is canonical.
    h.update(
        serde_json::to_vec(obj.get("spec").unwrap_or(&Value::Null)).expect("values serialise"),
    );
    let digest = hex::encode(h.finalize());
    digest[..HASH_LEN].to_string()
}

fn hash_name(obj: &mut Value, key_suffix: &str, names: &mut BTreeMap<String, String>) {
    let hash = name_suffix(obj);
    let name = obj
        .pointer_mut("/metadata/name")
        .expect("checked by render_file");
    let base = name.as_str().unwrap_or_default().to_string();
    let full = format!("{base}-{hash}");
    *name = Value::String(full.clone());
    names.insert(format!("{base}{key_suffix}"), full);
}

fn render_file(
    env: &Environment<'_>,
    name: &str,
    ctx: &minijinja::Value,
    cluster: &Cluster,
) -> Result<Vec<Value>, RenderError> {
    let template_err = |e: minijinja::Error| {
        let mut message = e.to_string();
        if let Some(line) = e.line() {
            message = format!("line {line}: {message}");
        }
        RenderError::Template {
            template: name.to_string(),
            message,
        }
    };
    let tmpl = env.get_template(name).map_err(template_err)?;
    let text = tmpl.render(ctx).map_err(template_err)?;
    let out_err = |message: String| RenderError::Output {
        template: name.to_string(),
        message,
    };
    if std::env::var_os("CAPSTAN_DEBUG_TEMPLATES").is_some() {
        eprintln!("--- {name}\n{text}");
    }
    let docs = crate::yaml::parse_values(&text)
        .map_err(|e| out_err(format!("line {}: {}", e.pos.line, e.message)))?;
    let mut objects = Vec::with_capacity(docs.len());
    for (i, v) in docs.into_iter().enumerate() {
        let line = format!("document {}", i + 1);
        let field = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
        let (Some(_), Some(kind), Some(obj_name), Some(ns)) = (
            field("/apiVersion"),
            field("/kind"),
            field("/metadata/name"),
            field("/metadata/namespace"),
        ) else {
            return Err(out_err(format!(
                "{line}: an object needs apiVersion, kind, metadata.name and metadata.namespace"
            )));
        };
        if ns != cluster.namespace {
            return Err(out_err(format!(
                "{kind}/{obj_name} is in namespace {ns}, not the cluster's {}",
                cluster.namespace
            )));
        }
        if obj_name.is_empty()
            || obj_name.len() > 253 - HASH_LEN - 1
            || !obj_name
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.')
        {
            return Err(out_err(format!(
                "{kind}/{obj_name}: not a valid object name"
            )));
        }
        objects.push(v);
    }
    Ok(objects)
}

fn node_labels(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn taints_json(taints: &[Taint]) -> Value {
    Value::Array(
        taints
            .iter()
            .map(|t| {
                let mut m = Map::new();
                m.insert("key".into(), json!(t.key));
                if let Some(v) = &t.value {
                    m.insert("value".into(), json!(v));
                }
                m.insert("effect".into(), json!(t.effect));
                Value::Object(m)
            })
            .collect(),
    )
}

fn machine_json(m: Option<&VSphereMachine>) -> Value {
    match m {
        None => Value::Null,
        Some(m) => json!({
            "datastore": m.datastore, "folder": m.folder, "memory_mib": m.memory_mib, "num_cpus": m.num_cpus,
            "disk_gib": m.disk_gib, "os_family": m.os_family, "resource_pool": m.resource_pool, "template": m.template,
            "user": m.user.as_ref().map(|(u, k)| json!([u, k])), "storage_policy_name": m.storage_policy_name,
            "clone_mode": m.clone_mode, "tags": m.tags,
        }),
    }
}

fn bundle_for(release: &Release, v: KubeVersion) -> Result<&VersionsBundle, RenderError> {
    release
        .versions_bundle(v)
        .ok_or_else(|| RenderError::MissingBundle {
            release: release.version.to_string(),
            version: v,
        })
}

fn cilium_values(cluster: &Cluster, bundle: &VersionsBundle) -> (String, &'static str) {
    let c = &cluster.network.cilium;
    let strategy = if c.skip_upgrade == Some(true) {
        "InstallOnce"
    } else {
        "Continuous"
    };
    if let Some(v) = &c.helm_values {
        return (crate::yaml::to_string(v), strategy);
    }
    let (agent_repo, agent_tag) = bundle.cilium.cilium.split();
    let (op_repo, op_tag) = bundle.cilium.operator.split();
    let mut values = json!({
        "ipam": {"mode": "kubernetes"},
        "identityAllocationMode": "crd",
        "prometheus": {"enabled": true},
        "rollOutCiliumPods": true,
        "policyEnforcementMode": c.policy_enforcement_mode.clone().unwrap_or_else(|| "default".into()),
        "image": {"repository": agent_repo, "tag": agent_tag, "useDigest": false},
        "operator": {"image": {"repository": op_repo, "tag": op_tag, "useDigest": false}, "prometheus": {"enabled": true}},
    });
    let obj = values.as_object_mut().expect("literal object");
    if c.routing_mode.as_deref() == Some("direct") {
        obj.insert("routingMode".into(), json!("native"));
        if let Some(cidr) = &c.ipv4_native_routing_cidr {
            obj.insert("ipv4NativeRoutingCIDR".into(), json!(cidr));
        }
        if let Some(cidr) = &c.ipv6_native_routing_cidr {
            obj.insert("ipv6NativeRoutingCIDR".into(), json!(cidr));
        }
        obj.insert("autoDirectNodeRoutes".into(), json!(true));
    } else {
        obj.insert("routingMode".into(), json!("tunnel"));
        obj.insert("tunnelProtocol".into(), json!("geneve"));
    }
    if let Some(i) = &c.egress_masquerade_interfaces {
        obj.insert("egressMasqueradeInterfaces".into(), json!(i));
    }
    if let Some(x) = c.cni_exclusive {
        obj.insert("cni".into(), json!({"exclusive": x}));
    }
    (crate::yaml::to_string(&values), strategy)
}

/// The template context of a cluster.
fn context(cluster: &Cluster, release: &Release) -> Result<Map<String, Value>, RenderError> {
    let cp_bundle = bundle_for(release, cluster.kubernetes_version)?;
    let (haproxy_repository, haproxy_tag) = cp_bundle.haproxy.image.split();
    let d = &cp_bundle.eks_d;
    let bundle = json!({
        "kube_image_repository": d.image_repository,
        "etcd_repository": d.etcd.image_repository,
        "etcd_tag": d.etcd.image_tag,
        "etcd_version": d.etcd.version,
        "etcd_release_url": d.etcd.release_url,
        "coredns_repository": d.coredns.image_repository,
        "coredns_tag": d.coredns.image_tag,
        "haproxy_repository": haproxy_repository,
        "haproxy_tag": haproxy_tag,
        "kube_vip_image": cp_bundle.vsphere.kube_vip.uri,
        "cilium_repository": cp_bundle.cilium.helm_chart.repository,
        "cilium_chart": cp_bundle.cilium.helm_chart.name,
        "cilium_version": cp_bundle.cilium.helm_chart.version,
    });
    let machines = match &cluster.provider {
        Provider::VSphere(v) => Some(&v.machines),
        Provider::Docker(_) => None,
    };
    let machine = |name: &Option<String>| {
        machine_json(name.as_ref().and_then(|n| machines.and_then(|m| m.get(n))))
    };
    let cp = &cluster.control_plane;
    let cp_taints = cp.taints.as_deref().map(taints_json);
    let default_cp_taints =
        json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]);
    let mut workers = Vec::new();
    for w in &cluster.workers {
        let b = bundle_for(release, w.kubernetes_version)?;
        workers.push(json!({
            "name": w.name,
            "replicas": w.replicas,
            "autoscaling": w.autoscaling.map(|(a, b)| json!([a, b])),
            "node_labels": node_labels(&w.labels),
            "taints": taints_json(&w.taints),
            "version": b.eks_d.tag,
            "node_image": b.eks_d.kind_node.uri,
            "machine": machine(&w.machine),
            "max_surge": w.max_surge.clone().unwrap_or(json!(1)),
            "max_unavailable": w.max_unavailable.clone().unwrap_or(json!(0)),
        }));
    }
    let in_memory = matches!(cluster.provider, Provider::Docker(DockerBackend::InMemory));
    let (infra_api, cluster_kind, mt_kind) = match cluster.provider {
        Provider::Docker(DockerBackend::Docker) => (
            "infrastructure.cluster.x-k8s.io/v1beta2",
            "DockerCluster",
            "DockerMachineTemplate",
        ),
        Provider::Docker(DockerBackend::InMemory) => (
            "infrastructure.cluster.x-k8s.io/v1beta2",
            "DevCluster",
            "DevMachineTemplate",
        ),
        Provider::VSphere(_) => (
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "VSphereCluster",
            "VSphereMachineTemplate",
        ),
    };
    let vsphere = match &cluster.provider {
        Provider::VSphere(v) => json!({
            "server": v.server, "datacenter": v.datacenter, "network": v.network, "thumbprint": v.thumbprint,
            "credentials_secret": format!("{}-vsphere-credentials", cluster.name),
        }),
        Provider::Docker(_) => Value::Null,
    };
    let (values, strategy) = cilium_values(cluster, cp_bundle);
    let mut ctx = Map::new();
    ctx.insert(
        "cluster".into(),
        json!({
            "name": cluster.name,
            "namespace": cluster.namespace,
            "management": cluster.management,
            "pods_cidr": cluster.network.pods.to_string(),
            "services_cidr": cluster.network.services.to_string(),
        }),
    );
    ctx.insert("bundle".into(), bundle);
    ctx.insert(
        "cp".into(),
        json!({
            "count": cp.count,
            "version": d.tag,
            "endpoint_host": cp.endpoint_host,
            "node_labels": node_labels(&cp.labels),
            "taints": cp_taints,
            "taints_or_default": cp_taints.clone().unwrap_or(default_cp_taints),
            "node_image": d.kind_node.uri,
            "machine": machine(&cp.machine),
            "max_surge": cp.max_surge.clone().unwrap_or(json!(1)),
        }),
    );
    ctx.insert(
        "etcd".into(),
        match &cluster.etcd {
            Some(e) => json!({"count": e.count, "machine": machine(&e.machine)}),
            None => Value::Null,
        },
    );
    ctx.insert("workers".into(), Value::Array(workers));
    ctx.insert("vsphere".into(), vsphere);
    ctx.insert("docker".into(), json!({"in_memory": in_memory}));
    ctx.insert("infra".into(), json!({"api_version": infra_api, "cluster_kind": cluster_kind, "machine_template_kind": mt_kind}));
    ctx.insert(
        "health".into(),
        json!({
            "node_startup_timeout_seconds": cluster.health.node_startup_timeout_seconds,
            "unhealthy_machine_timeout_seconds": cluster.health.unhealthy_machine_timeout_seconds,
            "control_plane_max_unhealthy": cluster.health.control_plane_max_unhealthy,
            "workers_max_unhealthy": cluster.health.workers_max_unhealthy,
        }),
    );
    ctx.insert(
        "cilium".into(),
        json!({"values": values, "reconcile_strategy": strategy}),
    );
    if matches!(cluster.provider, Provider::VSphere(_)) {
        let manifest = environment_render_kube_vip(&ctx)?;
        ctx.insert("kube_vip_manifest".into(), json!(manifest));
    }
    Ok(ctx)
}

fn environment_render_kube_vip(ctx: &Map<String, Value>) -> Result<String, RenderError> {
    let name = "vsphere/kube-vip.yaml.j2";
    let err = |e: minijinja::Error| RenderError::Template {
        template: name.into(),
        message: e.to_string(),
    };
    environment()
        .get_template(name)
        .map_err(err)?
        .render(minijinja::Value::from(minijinja::value::Serde(ctx)))
        .map_err(err)
}
