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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use minijinja::{Environment, UndefinedBehavior};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::identity::{CLUSTER_LABEL, MANAGED_BY, MANAGED_BY_LABEL};
use crate::release::Release;
use crate::spec::{Cluster, KubeVersion, Provider};

pub mod authenticator;
mod context;
mod json_object;
pub mod node;
pub mod packages;
mod skeleton;
mod slots;

pub use context::{ETCD_MIN_MEMORY_MIB, cilium_values, default_cp_taint};
pub use slots::text_only;

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

fn environment() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        environment_with(&crate::provider::templates())
            .expect("embedded templates compile; checked by tests")
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
    // minijinja's own, except while a template is rendered to be read back (see `slots`).
    env.add_filter("tojson", slots::tojson);
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
    let ctx = context::context(cluster, release)?;
    let kube_vip_at = ctx["cp"]["kube_vip_file_index"].as_u64().unwrap_or(0) as usize;
    let mut root = Arc::new(json_object::Context::new(ctx));
    // The context's entries, wrapped as one map for each pass (a merged context would look
    // every name up in each of its parts: 4 % of a render).
    let mut entries = json_object::entries(&root);
    let kube_vip = match &cluster.provider {
        Provider::VSphere(_) | Provider::Nutanix(_) => true,
        Provider::Tinkerbell(t) => !t.skip_load_balancer,
        Provider::Docker(_) => false,
    };
    if kube_vip {
        with_kube_vip(env, provider, &mut root, kube_vip_at, &mut entries)?;
    }
    let values = minijinja::Value::from(entries.clone());

    // Pass 1: immutable templates, named by content.
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
    // The context of pass 1 with the names added.
    entries.insert("names".into(), minijinja::Value::from(names));
    let values = minijinja::Value::from(entries);

    // Pass 2: objects that refer to the immutable ones.
    let mut files = vec![format!("{provider}/infrastructure-cluster.yaml.j2")];
    if cluster.etcd.is_some() {
        files.push("common/etcd.yaml.j2".into());
    }
    files.push(format!("{provider}/control-plane.yaml.j2"));
    if matches!(cluster.provider, Provider::VSphere(_)) {
        files.push("vsphere/cpi.yaml.j2".into());
        files.push("vsphere/failure-domains.yaml.j2".into());
    }
    if matches!(cluster.provider, Provider::Nutanix(_)) {
        files.push("nutanix/ccm.yaml.j2".into());
    }
    files.extend(
        [
            "common/cluster.yaml.j2",
            "common/workers.yaml.j2",
            "common/health-checks.yaml.j2",
            "common/cni.yaml.j2",
            "common/packages.yaml.j2",
        ]
        .map(String::from),
    );

    let mut out: Vec<Value> = cluster
        .eksa_objects
        .iter()
        .map(|o| with_eksa_version(o.value(), release))
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

/// Whether `kind` of `api_version` is one of [`CLUSTER_SCOPED`], or a cluster-scoped kind a
/// provider renders ([`crate::provider::cluster_scoped`]).
pub fn is_cluster_scoped(api_version: &str, kind: &str) -> bool {
    let group = api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
    CLUSTER_SCOPED.contains(&(group, kind))
        || crate::provider::cluster_scoped().any(|k| k.group == group && k.kind == kind)
}

/// Sets the resolved eksaVersion on the EKS-A Cluster object (a workload inherits its manager's).
fn with_eksa_version(mut v: Value, release: &Release) -> Value {
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
    // serde_json maps are sorted by key, so this serialisation is canonical. Written into a
    // buffer this thread keeps, instead of a new one grown for every template.
    thread_local!(static TEXT: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) });
    TEXT.with_borrow_mut(|text| {
        text.clear();
        serde_json::to_writer(&mut *text, obj.get("spec").unwrap_or(&Value::Null))
            .expect("values serialise");
        h.update(&text[..]);
    });
    let digest = hex::encode(h.finalize());
    digest[..HASH_LEN].to_string()
}

fn hash_name(obj: &mut Value, key_suffix: &str, names: &mut BTreeMap<String, String>) {
    let hash = name_suffix(obj);
    let name = obj
        .get_mut("metadata")
        .and_then(|m| m.get_mut("name"))
        .expect("checked by render_file");
    let base = name.as_str().unwrap_or_default().to_string();
    let full = format!("{base}-{hash}");
    *name = Value::String(full.clone());
    names.insert(format!("{base}{key_suffix}"), full);
}

static SLOW_READS: AtomicUsize = AtomicUsize::new(0);
static SLOT_MISSES: AtomicUsize = AtomicUsize::new(0);

/// How many rendered template outputs in this process the fast block-YAML reader could not read
/// back, so that the general YAML parser (several times slower) did. The provider templates are
/// written to stay inside the fast reader's subset, since every cluster renders every one of
/// them; a property test renders every shape of cluster and asserts this stays zero.
pub fn slow_reads() -> usize {
    SLOW_READS.load(Ordering::Relaxed)
}

/// How many templates in this process had to be rendered again as text because their value
/// slots could not be read back (see `slots`): like [`slow_reads`], the provider templates are
/// written so that this stays zero, and the property test asserts it.
pub fn slot_misses() -> usize {
    SLOT_MISSES.load(Ordering::Relaxed)
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
    let out_err = |message: String| RenderError::Output {
        template: name.to_string(),
        message,
    };
    let tmpl = env.get_template(name).map_err(template_err)?;
    let debug = std::env::var_os("CAPSTAN_DEBUG_TEMPLATES").is_some();
    let slotted = if debug {
        None
    } else {
        slots::render(&tmpl, ctx).and_then(slots::Slotted::read)
    };
    let docs = match slotted {
        Some(docs) => docs,
        None => {
            if !debug && !slots::is_text_only() {
                SLOT_MISSES.fetch_add(1, Ordering::Relaxed);
            }
            let text = tmpl.render(ctx).map_err(template_err)?;
            if debug {
                eprintln!("--- {name}\n{text}");
            }
            let (docs, fast) = crate::yaml::parse_values_read(&text)
                .map_err(|e| out_err(format!("line {}: {}", e.pos.line, e.message)))?;
            if !fast {
                SLOW_READS.fetch_add(1, Ordering::Relaxed);
            }
            docs
        }
    };
    let mut objects = Vec::with_capacity(docs.len());
    for (i, v) in docs.into_iter().enumerate() {
        let (Some(api_version), Some(kind), Some(obj_name)) = (
            str_at(&v, "apiVersion", None),
            str_at(&v, "kind", None),
            str_at(&v, "metadata", Some("name")),
        ) else {
            return Err(out_err(format!(
                "document {}: an object needs apiVersion, kind and metadata.name",
                i + 1
            )));
        };
        let ns = str_at(&v, "metadata", Some("namespace"));
        if is_cluster_scoped(api_version, kind) {
            if let Some(ns) = ns {
                return Err(out_err(format!(
                    "{kind}/{obj_name} is cluster-scoped but has namespace {ns}"
                )));
            }
        } else if ns != Some(cluster.namespace.as_str()) {
            let ns = ns.unwrap_or_default();
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

/// The string at `key` (or `key.sub`) of an object: a direct lookup (a JSON pointer would
/// unescape its path on every call).
fn str_at<'v>(v: &'v Value, key: &str, sub: Option<&str>) -> Option<&'v str> {
    let at = v.get(key)?;
    match sub {
        Some(sub) => at.get(sub)?.as_str(),
        None => at.as_str(),
    }
}

/// Renders the kube-vip static pod manifest and puts it among the control plane's files in the
/// context, at `at` (`entries` then read the changed context).
fn with_kube_vip(
    env: &Environment<'_>,
    provider: &str,
    root: &mut Arc<json_object::Context>,
    at: usize,
    entries: &mut BTreeMap<String, minijinja::Value>,
) -> Result<(), RenderError> {
    let name = &format!("{provider}/kube-vip.yaml.j2");
    let err = |e: minijinja::Error| RenderError::Template {
        template: name.into(),
        message: e.to_string(),
    };
    let manifest = env
        .get_template(name)
        .map_err(err)?
        .render(minijinja::Value::from(entries.clone()))
        .map_err(err)?;
    // The entries hold the context: without them it is changed in place, not copied.
    entries.clear();
    let file = json!({"path": "/etc/kubernetes/manifests/kube-vip.yaml", "owner": "root:root", "content": manifest});
    let added = Arc::make_mut(root).insert(&["cp", "files"], at, file);
    assert!(added, "the context has cp.files");
    *entries = json_object::entries(root);
    Ok(())
}
