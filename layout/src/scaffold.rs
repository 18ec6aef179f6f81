//! The scaffolder behind `capstan init` and `capstan new cluster`.
//!
//! It never guesses what only the user can know: CIDRs, and on vSphere the endpoint address and
//! the placement (server, datacenter, datastore, template...) are required, from flags or a
//! values file; vSphere placement may default from the management cluster's own spec. It renders
//! the new files from the scaffold templates, adds them to an in-memory copy of the repository,
//! validates the whole fleet with them, and only then returns them to be written: a cluster that
//! would not validate is never written, and nothing is ever overwritten.
//!
//! The one file it changes rather than adds is `.github/CODEOWNERS` ([`codeowners`]):
//! `capstan init` writes it, and `capstan new cluster --owners` adds the new directory's line.

use std::collections::BTreeSet;
use std::path::PathBuf;

use capstan_templates::diag::Diagnostic;
use capstan_templates::scaffold::render_scaffold;
use capstan_templates::spec::{DockerBackend, Provider};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::fleet::{self, CLUSTERS_DIR, Fleet, Role, WORKLOADS_DIR};
use crate::tree::{Entry, Tree};

pub mod codeowners;

use codeowners::Owner;

/// Why scaffolding refused.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// The target exists.
    #[error("{0} already exists; capstan never overwrites a cluster directory")]
    Exists(PathBuf),
    /// The management cluster is not in the repository.
    #[error("management cluster `{0}` is not in this repository (expected clusters/{0}/)")]
    NoManagement(String),
    /// Values only the user can give are missing.
    #[error("missing required values: {}", .0.join(", "))]
    Missing(Vec<String>),
    /// The values file is unusable.
    #[error("values file: {0}")]
    Values(String),
    /// A template failed.
    #[error(transparent)]
    Template(#[from] capstan_templates::scaffold::ScaffoldError),
    /// The fleet would not validate with the new cluster.
    #[error("the new cluster does not validate:\n{}", .0.iter().map(|d| format!("  {d}")).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<Diagnostic>),
    /// `.github/CODEOWNERS` cannot take the new cluster's owners.
    #[error(".github/CODEOWNERS: {0}")]
    Codeowners(String),
}

/// What the user asked for. Every `Option` may also come from the values file.
#[derive(Debug, Clone, Default)]
pub struct ClusterRequest {
    /// Cluster name.
    pub name: String,
    /// The managing cluster; None for `capstan init` (a new management cluster).
    pub management: Option<String>,
    /// docker, vsphere or nutanix.
    pub provider: String,
    /// Kubernetes minor.
    pub kubernetes_version: Option<String>,
    /// eksaVersion (management clusters default to the latest known; workloads inherit).
    pub eksa_version: Option<String>,
    /// Namespace (default eksa-system).
    pub namespace: Option<String>,
    /// Control-plane machines.
    pub control_plane_count: Option<u32>,
    /// Machines of the default worker group md-0.
    pub worker_count: Option<u32>,
    /// Pod CIDR (required).
    pub pod_cidr: Option<String>,
    /// Service CIDR (required).
    pub service_cidr: Option<String>,
    /// API endpoint host (required on vSphere).
    pub endpoint_host: Option<String>,
    /// External etcd machines.
    pub external_etcd: Option<u32>,
    /// Docker only: what CAPD runs machines on, `docker` or `in-memory` (default: the management
    /// cluster's when it is a docker cluster, else `docker`).
    pub docker_backend: Option<String>,
    /// The parsed values file.
    pub values: Option<Value>,
    /// Management clusters only: write `.github/CODEOWNERS`, giving everything to these
    /// platform admins but the workload directories later given to a team, unless the file
    /// exists. Empty: no file (bootstrap, tests; `capstan init` always gives some, the
    /// placeholder at least).
    pub admins: Vec<Owner>,
    /// Workload clusters only: give the new directory to these owners in `.github/CODEOWNERS`,
    /// when the repository has one. Empty: the admins own it (through `*`).
    pub owners: Vec<Owner>,
}

/// The result: files to write, and the fleet as it will be with them.
#[derive(Debug)]
pub struct Scaffold {
    /// New files: `(path relative to the repository, content)`.
    pub files: Vec<(PathBuf, String)>,
    /// Existing files with their new content (only `.github/CODEOWNERS`).
    pub updated: Vec<(PathBuf, String)>,
    /// What the user should be told: a CODEOWNERS kept as it was or still naming the
    /// placeholder, owners that could not be recorded, lines removed.
    pub notes: Vec<String>,
    /// The fleet validated with the new files.
    pub fleet: Fleet,
}

#[derive(Serialize)]
struct Values {
    name: String,
    management: String,
    self_managed: bool,
    provider: String,
    namespace: Option<String>,
    kubernetes_version: String,
    eksa_version: Option<String>,
    control_plane_count: u32,
    external_etcd: Option<u32>,
    endpoint_host: Option<String>,
    docker_backend: Option<&'static str>,
    pod_cidr: String,
    service_cidr: String,
    worker_groups: Vec<Value>,
    vsphere: Value,
    nutanix: Value,
    tinkerbell: Value,
    datacenter_kind: &'static str,
    machine_kind: Option<&'static str>,
    machine_roles: Vec<&'static str>,
}

const VALUE_KEYS: &[&str] = &[
    "kubernetesVersion",
    "eksaVersion",
    "namespace",
    "controlPlaneCount",
    "workerCount",
    "podCidr",
    "serviceCidr",
    "endpointHost",
    "externalEtcd",
    "workerGroups",
    "vsphere",
    "nutanix",
    "tinkerbell",
];
const TINKERBELL_KEYS: &[&str] = &[
    "tinkerbellIP",
    "osImageURL",
    "osFamily",
    "user",
    "sshAuthorizedKey",
];
const NUTANIX_KEYS: &[&str] = &[
    "endpoint",
    "port",
    "insecure",
    "credentialSecret",
    "image",
    "cluster",
    "subnet",
    "osFamily",
    "vcpuSockets",
    "vcpusPerSocket",
    "memorySize",
    "systemDiskSize",
    "user",
    "sshAuthorizedKey",
];
const VSPHERE_KEYS: &[&str] = &[
    "server",
    "datacenter",
    "network",
    "thumbprint",
    "insecure",
    "datastore",
    "folder",
    "resourcePool",
    "template",
    "osFamily",
    "numCPUs",
    "memoryMiB",
    "diskGiB",
    "user",
    "sshAuthorizedKey",
];

/// Plans a new cluster directory (workload when `req.management` is set, else a management cluster).
pub fn plan(tree: &Tree, req: &ClusterRequest) -> Result<Scaffold, ScaffoldError> {
    let values = req.values.clone().unwrap_or_else(|| json!({}));
    let given = Given::new(&values)?;
    let before = fleet::load(tree);
    let (dir, management) = target(tree, &before, req)?;
    let v = template_values(req, &given, &before, &management)?;
    let mut files = vec![(
        dir.join("cluster.yaml"),
        render_scaffold("cluster.yaml.j2", &v)?,
    )];
    if v.self_managed && !tree.exists(&PathBuf::from("README.md")) {
        files.push((
            PathBuf::from("README.md"),
            render_scaffold("README.md.j2", &v)?,
        ));
    }
    let after = validate_with(tree, &before, &files)?;
    // After validation: the names are DNS-1123 labels now. CODEOWNERS is not part of the fleet.
    let mut updated = Vec::new();
    let mut notes = Vec::new();
    code_owners(tree, req, &management, &mut files, &mut updated, &mut notes)?;
    Ok(Scaffold {
        files,
        updated,
        notes,
        fleet: after,
    })
}

/// The values file: a mapping of known keys, numbers read as text where text is expected.
struct Given<'a> {
    map: &'a Map<String, Value>,
}

impl<'a> Given<'a> {
    /// The values file, refused when it is not a mapping or has a key capstan does not know.
    fn new(values: &'a Value) -> Result<Self, ScaffoldError> {
        let map = values
            .as_object()
            .ok_or_else(|| ScaffoldError::Values("must be a mapping".into()))?;
        for k in map.keys() {
            if !VALUE_KEYS.contains(&k.as_str()) {
                return Err(ScaffoldError::Values(format!(
                    "unknown key `{k}`; known: {}",
                    VALUE_KEYS.join(", ")
                )));
            }
        }
        Ok(Given { map })
    }

    /// A value as text (a number written as its digits).
    fn str(&self, k: &str) -> Option<String> {
        self.map.get(k).and_then(|v| {
            v.as_str()
                .map(str::to_string)
                .or_else(|| v.as_u64().map(|n| n.to_string()))
        })
    }

    /// A count.
    fn u32(&self, k: &str) -> Option<u32> {
        self.map.get(k).and_then(Value::as_u64).map(|n| n as u32)
    }
}

/// The new cluster's directory and its management cluster's name; refused when the management
/// cluster is not in the repository or the directory exists.
fn target(
    tree: &Tree,
    before: &Fleet,
    req: &ClusterRequest,
) -> Result<(PathBuf, String), ScaffoldError> {
    let (dir, management) = match &req.management {
        Some(m) => {
            if !before
                .clusters
                .iter()
                .any(|c| c.name == *m && c.role == Role::Management)
            {
                return Err(ScaffoldError::NoManagement(m.clone()));
            }
            (
                PathBuf::from(CLUSTERS_DIR)
                    .join(m)
                    .join(WORKLOADS_DIR)
                    .join(&req.name),
                m.clone(),
            )
        }
        None => (
            PathBuf::from(CLUSTERS_DIR).join(&req.name),
            req.name.clone(),
        ),
    };
    if tree.exists(&dir) {
        return Err(ScaffoldError::Exists(dir));
    }
    Ok((dir, management))
}

/// What the scaffold templates get: the request's values, then the values file's, then the
/// defaults; refused when a value only the user can give is missing or a value is unusable.
fn template_values(
    req: &ClusterRequest,
    given: &Given,
    before: &Fleet,
    management: &str,
) -> Result<Values, ScaffoldError> {
    let self_managed = req.management.is_none();
    if req.provider == "tinkerbell"
        && (req.external_etcd.is_some_and(|n| n > 0)
            || given.u32("externalEtcd").is_some_and(|n| n > 0))
    {
        return Err(ScaffoldError::Values(
            "external etcd is not supported on bare metal (EKS Anywhere refuses it too)".into(),
        ));
    }
    let on_vms = req.provider != "docker";
    if on_vms && req.docker_backend.is_some() {
        return Err(ScaffoldError::Values(
            "--docker-backend applies to docker clusters only".into(),
        ));
    }
    let required = required(req, given, before, management)?;
    let docker_backend = docker_backend(req, before, management, on_vms)?;
    let latest = capstan_templates::ReleaseManifest::embedded().latest();
    let kubernetes_version = req
        .kubernetes_version
        .clone()
        .or_else(|| given.str("kubernetesVersion"))
        .unwrap_or_else(|| {
            latest
                .versions_bundles
                .last()
                .map(|b| b.kube_version.clone())
                .unwrap_or_default()
        });
    let eksa_version = req
        .eksa_version
        .clone()
        .or_else(|| given.str("eksaVersion"))
        .or_else(|| self_managed.then(|| latest.version.to_string()));
    let worker_groups = worker_groups(req, given, self_managed)?;
    let external_etcd = req
        .external_etcd
        .or_else(|| given.u32("externalEtcd"))
        .filter(|n| *n > 0);
    let mut machine_roles = vec!["cp", "workers"];
    if external_etcd.is_some() {
        machine_roles.insert(1, "etcd");
    }
    Ok(Values {
        name: req.name.clone(),
        management: management.to_string(),
        self_managed,
        provider: req.provider.clone(),
        namespace: req.namespace.clone().or_else(|| given.str("namespace")),
        kubernetes_version,
        eksa_version,
        control_plane_count: req
            .control_plane_count
            .or_else(|| given.u32("controlPlaneCount"))
            .unwrap_or(if external_etcd.is_some() { 2 } else { 1 }),
        external_etcd,
        endpoint_host: required.endpoint_host,
        docker_backend,
        pod_cidr: required.pod_cidr,
        service_cidr: required.service_cidr,
        worker_groups,
        vsphere: required.vsphere,
        nutanix: required.nutanix,
        tinkerbell: required.tinkerbell,
        datacenter_kind: match req.provider.as_str() {
            "vsphere" => "VSphereDatacenterConfig",
            "nutanix" => "NutanixDatacenterConfig",
            "tinkerbell" => "TinkerbellDatacenterConfig",
            _ => "DockerDatacenterConfig",
        },
        machine_kind: match req.provider.as_str() {
            "vsphere" => Some("VSphereMachineConfig"),
            "nutanix" => Some("NutanixMachineConfig"),
            "tinkerbell" => Some("TinkerbellMachineConfig"),
            _ => None,
        },
        machine_roles,
    })
}

/// The values only the user can give (no default would be right).
struct Required {
    pod_cidr: String,
    service_cidr: String,
    endpoint_host: Option<String>,
    /// vSphere placement (null on other providers).
    vsphere: Value,
    /// Nutanix placement (null on other providers).
    nutanix: Value,
    /// The Tinkerbell stack and OS image (null on other providers).
    tinkerbell: Value,
}

/// The CIDRs, and on vSphere and Nutanix the endpoint and the placement (which may default
/// from the management cluster's); refused with every missing flag named.
fn required(
    req: &ClusterRequest,
    given: &Given,
    before: &Fleet,
    management: &str,
) -> Result<Required, ScaffoldError> {
    let vsphere = req.provider == "vsphere";
    let nutanix = req.provider == "nutanix";
    let tinkerbell = req.provider == "tinkerbell";
    let mut missing = Vec::new();
    let mut need = |v: Option<String>, flag: &str| -> String {
        v.unwrap_or_else(|| {
            missing.push(flag.to_string());
            String::new()
        })
    };
    let pod_cidr = need(
        req.pod_cidr.clone().or_else(|| given.str("podCidr")),
        "--pod-cidr",
    );
    let service_cidr = need(
        req.service_cidr
            .clone()
            .or_else(|| given.str("serviceCidr")),
        "--service-cidr",
    );
    let endpoint_host = req
        .endpoint_host
        .clone()
        .or_else(|| given.str("endpointHost"));
    if (vsphere || nutanix || tinkerbell) && endpoint_host.is_none() {
        missing.push("--endpoint-host".into());
    }
    let vs = if vsphere {
        vsphere_values(before, management, given.map.get("vsphere"), &mut missing)?
    } else {
        Value::Null
    };
    let nx = if nutanix {
        nutanix_values(before, management, given.map.get("nutanix"), &mut missing)?
    } else {
        Value::Null
    };
    let tk = if tinkerbell {
        tinkerbell_values(
            before,
            management,
            given.map.get("tinkerbell"),
            &mut missing,
        )?
    } else {
        Value::Null
    };
    if !missing.is_empty() {
        return Err(ScaffoldError::Missing(missing));
    }
    Ok(Required {
        pod_cidr,
        service_cidr,
        endpoint_host,
        vsphere: vs,
        nutanix: nx,
        tinkerbell: tk,
    })
}

/// The docker backend the template writes: `in-memory` or nothing (CAPD's default, docker).
/// Written, or else a workload's management cluster's (a workload runs where its management
/// cluster's machines run).
fn docker_backend(
    req: &ClusterRequest,
    before: &Fleet,
    management: &str,
    on_vms: bool,
) -> Result<Option<&'static str>, ScaffoldError> {
    let docker_backend = match (&req.docker_backend, on_vms) {
        // (vSphere or Nutanix with a docker backend was refused above.)
        (Some(b), _) => Some(DockerBackend::parse(b).ok_or_else(|| {
            ScaffoldError::Values(format!(
                "docker backend `{b}`; use one of: {}",
                DockerBackend::VALUES.join(", ")
            ))
        })?),
        // A workload runs where its management cluster's machines run.
        (None, false) => before
            .clusters
            .iter()
            .find(|c| c.name == management)
            .and_then(|c| c.cluster.as_ref())
            .and_then(|c| match c.provider {
                Provider::Docker(b) => Some(b),
                Provider::VSphere(_) | Provider::Nutanix(_) | Provider::Tinkerbell(_) => None,
            }),
        (None, true) => None,
    };
    Ok(docker_backend
        .filter(|b| *b == DockerBackend::InMemory)
        .map(|_| "in-memory"))
}

/// The worker groups: the values file's `workerGroups`, else one group of the requested count
/// (default 2 for a management cluster, 1 for a workload).
fn worker_groups(
    req: &ClusterRequest,
    given: &Given,
    self_managed: bool,
) -> Result<Vec<Value>, ScaffoldError> {
    let worker_count = req
        .worker_count
        .or_else(|| given.u32("workerCount"))
        .unwrap_or(if self_managed { 2 } else { 1 });
    match given.map.get("workerGroups") {
        Some(Value::Array(groups)) => groups
            .iter()
            .enumerate()
            .map(|(i, g)| worker_group(i, g))
            .collect::<Result<_, _>>(),
        Some(_) => Err(ScaffoldError::Values("workerGroups must be a list".into())),
        None => Ok(vec![worker_group(0, &json!({"count": worker_count}))?]),
    }
}

/// The fleet with the new files, validated; refused with the errors the new files bring (those
/// the repository had before are not the new cluster's).
fn validate_with(
    tree: &Tree,
    before: &Fleet,
    files: &[(PathBuf, String)],
) -> Result<Fleet, ScaffoldError> {
    let mut after_tree = tree.clone();
    for (p, text) in files {
        after_tree.insert(p.clone(), text.as_bytes().to_vec());
    }
    let after = fleet::load(&after_tree);
    let old: BTreeSet<String> = before
        .all_diagnostics()
        .iter()
        .map(|d| d.to_string())
        .collect();
    let new_errors: Vec<Diagnostic> = after
        .all_diagnostics()
        .into_iter()
        .filter(|d| d.is_error() && !old.contains(&d.to_string()))
        .cloned()
        .collect();
    if !new_errors.is_empty() {
        return Err(ScaffoldError::Invalid(new_errors));
    }
    Ok(after)
}

/// `.github/CODEOWNERS`: written for a new management cluster given admins, changed for a new
/// workload cluster (its owners' line; lines naming its directory before it existed removed).
fn code_owners(
    tree: &Tree,
    req: &ClusterRequest,
    management: &str,
    files: &mut Vec<(PathBuf, String)>,
    updated: &mut Vec<(PathBuf, String)>,
    notes: &mut Vec<String>,
) -> Result<(), ScaffoldError> {
    let path = PathBuf::from(codeowners::PATH);
    let existing = match tree.entries.get(&path) {
        Some(Entry::File(bytes)) => Some(
            String::from_utf8(bytes.clone())
                .map_err(|_| ScaffoldError::Codeowners("not UTF-8".into()))?,
        ),
        Some(_) => {
            return Err(ScaffoldError::Codeowners(
                "not a regular file capstan can read".into(),
            ));
        }
        None => None,
    };
    let placeholder = || {
        format!(
            "{} names the placeholder {}: replace it with your platform admins (`@user` or \
             `@org/team`); until then it protects nothing",
            codeowners::PATH,
            codeowners::PLACEHOLDER
        )
    };
    if req.management.is_none() {
        if req.admins.is_empty() {
            return Ok(());
        }
        match existing {
            Some(_) => notes.push(format!(
                "{} exists and was left as it is: check that it gives clusters/{management}/ \
                 to the platform admins",
                codeowners::PATH
            )),
            None => {
                files.push((path, codeowners::render(management, &req.admins)));
                if req.admins.iter().any(Owner::is_placeholder) {
                    notes.push(placeholder());
                }
            }
        }
        return Ok(());
    }
    let Some(text) = existing else {
        if !req.owners.is_empty() {
            notes.push(format!(
                "the repository has no {}, so the owners of {} were not recorded \
                 (`capstan init --admins` writes one)",
                codeowners::PATH,
                codeowners::workload_pattern(management, &req.name)
            ));
        }
        return Ok(());
    };
    let edit = codeowners::set_workload_owners(&text, management, &req.name, &req.owners)
        .map_err(ScaffoldError::Codeowners)?;
    for line in &edit.removed {
        notes.push(format!(
            "removed `{line}` from {}: it named the directory of an earlier cluster `{}`",
            codeowners::PATH,
            req.name
        ));
    }
    if edit.at_end {
        notes.push(format!(
            "{} has no capstan blocks: the owners' line went at its end (it covers \
             that directory only)",
            codeowners::PATH
        ));
    }
    if !req.owners.is_empty() && codeowners::has_placeholder(&edit.text) {
        notes.push(placeholder());
    }
    if edit.text != text {
        updated.push((path, edit.text));
    }
    Ok(())
}

const GROUP_KEYS: &[&str] = &[
    "name",
    "count",
    "autoscaling",
    "kubernetesVersion",
    "labels",
    "taints",
];

/// A worker group of the values file, every key present (the templates are strict).
fn worker_group(i: usize, g: &Value) -> Result<Value, ScaffoldError> {
    let g = g
        .as_object()
        .ok_or_else(|| ScaffoldError::Values(format!("workerGroups[{i}] must be a mapping")))?;
    if let Some(k) = g.keys().find(|k| !GROUP_KEYS.contains(&k.as_str())) {
        return Err(ScaffoldError::Values(format!(
            "workerGroups[{i}]: unknown key `{k}`; known: {}",
            GROUP_KEYS.join(", ")
        )));
    }
    let mut out = Map::new();
    out.insert(
        "name".into(),
        g.get("name")
            .cloned()
            .unwrap_or_else(|| json!(format!("md-{i}"))),
    );
    out.insert("count".into(), g.get("count").cloned().unwrap_or(json!(1)));
    for k in ["autoscaling", "kubernetesVersion", "labels", "taints"] {
        out.insert(k.into(), g.get(k).cloned().unwrap_or(Value::Null));
    }
    Ok(Value::Object(out))
}

/// vSphere placement: values file first, then the management cluster's own vSphere spec.
fn vsphere_values(
    before: &Fleet,
    management: &str,
    given: Option<&Value>,
    missing: &mut Vec<String>,
) -> Result<Value, ScaffoldError> {
    let mut out = Map::new();
    if let Some(Provider::VSphere(vs)) = before
        .cluster(management)
        .and_then(|e| e.cluster.as_ref())
        .map(|c| &c.provider)
    {
        out.insert("server".into(), json!(vs.server));
        out.insert("datacenter".into(), json!(vs.datacenter));
        out.insert("network".into(), json!(vs.network));
        if !vs.thumbprint.is_empty() {
            out.insert("thumbprint".into(), json!(vs.thumbprint));
        }
        if let Some(m) = vs.machines.values().next() {
            out.insert("datastore".into(), json!(m.datastore));
            out.insert("folder".into(), json!(m.folder));
            out.insert("resourcePool".into(), json!(m.resource_pool));
            out.insert("template".into(), json!(m.template));
            out.insert("osFamily".into(), json!(m.os_family));
        }
    }
    if let Some(g) = given {
        let g = g
            .as_object()
            .ok_or_else(|| ScaffoldError::Values("vsphere must be a mapping".into()))?;
        for (k, v) in g {
            if !VSPHERE_KEYS.contains(&k.as_str()) {
                return Err(ScaffoldError::Values(format!(
                    "unknown vsphere key `{k}`; known: {}",
                    VSPHERE_KEYS.join(", ")
                )));
            }
            out.insert(k.clone(), v.clone());
        }
    }
    for k in [
        "server",
        "datacenter",
        "network",
        "datastore",
        "resourcePool",
        "template",
    ] {
        if !out.contains_key(k) {
            missing.push(format!("vsphere.{k} (values file)"));
        }
    }
    out.entry("folder").or_insert(json!(""));
    out.entry("osFamily").or_insert(json!("ubuntu"));
    out.entry("numCPUs").or_insert(json!(2));
    out.entry("memoryMiB").or_insert(json!(8192));
    out.entry("diskGiB").or_insert(json!(25));
    out.entry("user").or_insert(json!("capv"));
    out.entry("thumbprint").or_insert(json!(""));
    out.entry("insecure").or_insert(json!(false));
    out.entry("sshAuthorizedKey").or_insert(json!(""));
    Ok(Value::Object(out))
}

/// The Tinkerbell stack's address, the OS image and the machines' user: values file first,
/// then the management cluster's own bare-metal spec. The key is required: EKS Anywhere's
/// bare-metal templates write it and capstan generates none.
fn tinkerbell_values(
    before: &Fleet,
    management: &str,
    given: Option<&Value>,
    missing: &mut Vec<String>,
) -> Result<Value, ScaffoldError> {
    let mut out = Map::new();
    let mgmt = before.cluster(management).and_then(|e| e.cluster.as_ref());
    if let Some(Provider::Tinkerbell(t)) = mgmt.map(|c| &c.provider) {
        out.insert("tinkerbellIP".into(), json!(t.tinkerbell_ip));
        if let Some(m) = t.machines.values().next() {
            out.insert("osFamily".into(), json!(m.os_family));
            out.insert("user".into(), json!(m.user.0));
            out.insert("sshAuthorizedKey".into(), json!(m.user.1));
        }
    }
    if let Some(g) = given {
        let g = g
            .as_object()
            .ok_or_else(|| ScaffoldError::Values("tinkerbell must be a mapping".into()))?;
        for (k, v) in g {
            if !TINKERBELL_KEYS.contains(&k.as_str()) {
                return Err(ScaffoldError::Values(format!(
                    "unknown tinkerbell key `{k}`; known: {}",
                    TINKERBELL_KEYS.join(", ")
                )));
            }
            out.insert(k.clone(), v.clone());
        }
    }
    for k in ["tinkerbellIP", "osImageURL", "sshAuthorizedKey"] {
        if out.get(k).and_then(Value::as_str).is_none_or(str::is_empty) {
            missing.push(format!("tinkerbell.{k} (values file)"));
        }
    }
    out.entry("osFamily").or_insert(json!("ubuntu"));
    out.entry("user").or_insert(json!("ec2-user"));
    Ok(Value::Object(out))
}

/// Nutanix placement: values file first, then the management cluster's own Nutanix spec
/// (Prism Central, and the first machine config's image, cluster, subnet and OS).
fn nutanix_values(
    before: &Fleet,
    management: &str,
    given: Option<&Value>,
    missing: &mut Vec<String>,
) -> Result<Value, ScaffoldError> {
    let mut out = Map::new();
    let mgmt = before.cluster(management).and_then(|e| e.cluster.as_ref());
    if let Some(Provider::Nutanix(n)) = mgmt.map(|c| &c.provider) {
        out.insert("endpoint".into(), json!(n.endpoint));
        out.insert("port".into(), json!(n.port));
        out.insert("insecure".into(), json!(n.insecure));
        if let Some(m) = n.machines.values().next() {
            for (k, id) in [
                ("image", &m.image),
                ("cluster", &m.cluster),
                ("subnet", &m.subnet),
            ] {
                if id.kind == "name" {
                    out.insert(k.into(), json!(id.value));
                }
            }
            out.insert("osFamily".into(), json!(m.os_family));
        }
    }
    if let Some(g) = given {
        let g = g
            .as_object()
            .ok_or_else(|| ScaffoldError::Values("nutanix must be a mapping".into()))?;
        for (k, v) in g {
            if !NUTANIX_KEYS.contains(&k.as_str()) {
                return Err(ScaffoldError::Values(format!(
                    "unknown nutanix key `{k}`; known: {}",
                    NUTANIX_KEYS.join(", ")
                )));
            }
            out.insert(k.clone(), v.clone());
        }
    }
    for k in ["endpoint", "image", "cluster", "subnet"] {
        if !out.contains_key(k) {
            missing.push(format!("nutanix.{k} (values file)"));
        }
    }
    out.entry("port").or_insert(json!(9440));
    out.entry("insecure").or_insert(json!(false));
    out.entry("credentialSecret")
        .or_insert(json!("nutanix-credentials"));
    out.entry("osFamily").or_insert(json!("ubuntu"));
    out.entry("vcpuSockets").or_insert(json!(2));
    out.entry("vcpusPerSocket").or_insert(json!(1));
    out.entry("memorySize").or_insert(json!("8Gi"));
    out.entry("systemDiskSize").or_insert(json!("40Gi"));
    out.entry("user").or_insert(json!("eksa"));
    out.entry("sshAuthorizedKey").or_insert(json!(""));
    Ok(Value::Object(out))
}
