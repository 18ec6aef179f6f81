//! What a cluster becomes to be rehearsed: the same cluster on CAPD's in-memory backend.
//!
//! `capstan rehearse` (issue 36) brings a pull request's clusters up on the real Cluster API
//! controllers, where machines are simulated. For that to say anything about the real cluster,
//! the rehearsed one must have the same *shape*: the same control-plane count, stacked or
//! external etcd and its count, the same worker groups with their counts, autoscaler bounds,
//! Kubernetes versions and rollout strategies, the same networks and the same management
//! cluster. What only the real infrastructure has — vSphere's placement and VM templates, the
//! control plane's virtual IP, the machines' proxy and registry mirror, KMS encryption, the AWS
//! IAM authenticator, curated packages — cannot
//! be carried over, and is said so, each with the file and line it was written at
//! ([`NotCarried`]): never silently dropped.
//!
//! ```text
//! Cluster            datacenterRef ─▶ DockerDatacenterConfig (same name)    counts, versions,
//!                    machineGroupRef, endpoint, proxy, mirror, KMS, packages ─▶ listed
//!                                                          (counts, rollouts, networks kept)
//! VSphereDatacenterConfig ─▶ DockerDatacenterConfig, capstan.dev/docker-backend: in-memory
//! VSphereMachineConfig    ─▶ (none: the backend simulates machines), listed
//! NutanixDatacenterConfig ─▶ DockerDatacenterConfig, capstan.dev/docker-backend: in-memory
//! NutanixMachineConfig    ─▶ (none: the backend simulates machines), listed
//! TinkerbellDatacenterConfig ─▶ DockerDatacenterConfig, capstan.dev/docker-backend: in-memory
//! TinkerbellMachineConfig ─▶ (none: the backend simulates machines, not Hardware), listed
//! TinkerbellTemplateConfig ─▶ (none: nothing is provisioned), listed
//! AWSIamConfig            ─▶ (none, and taken out of identityProviderRefs), listed
//! DockerDatacenterConfig  ─▶ the same, backend in-memory (containers listed when they were)
//! anything else           ─▶ as it is
//! ```
//!
//! One pure function over the directory's documents: its output goes through the same
//! validation and rendering as any cluster directory, so a rehearsal never runs what
//! `capstan validate` refuses.

use std::fmt;
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::spec::{DOCKER_BACKEND_ANNOTATION, EKSA_GROUP, SourceDoc};
use crate::yaml::Pos;

/// Something of the real cluster the rehearsal cannot have, and where it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotCarried {
    /// The file, relative to the repository root.
    pub file: PathBuf,
    /// Where in it.
    pub pos: Pos,
    /// What, in a reader's words.
    pub what: String,
}

impl fmt::Display for NotCarried {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}",
            self.file.display(),
            self.pos.line,
            self.what
        )
    }
}

/// A cluster directory's documents made for the in-memory backend, and what did not carry over.
#[derive(Debug, Clone)]
pub struct StandIn {
    /// The documents, in the order read (machine configs left out).
    pub docs: Vec<SourceDoc>,
    /// What the rehearsal will not have, in the order written.
    pub not_carried: Vec<NotCarried>,
}

/// The cluster of `docs` (one cluster directory's documents, as read) on CAPD's in-memory
/// backend (see the module's overview).
pub fn in_memory(docs: &[SourceDoc]) -> StandIn {
    let mut out = StandIn {
        docs: Vec::new(),
        not_carried: Vec::new(),
    };
    for sd in docs {
        let mut note = |path: &str, what: String| {
            out.not_carried.push(NotCarried {
                file: sd.file.clone(),
                pos: sd.doc.pos(path),
                what,
            });
        };
        let kind = sd.doc.value["kind"].as_str().unwrap_or_default();
        let eksa = sd.doc.value["apiVersion"]
            .as_str()
            .is_some_and(|v| v.split('/').next() == Some(EKSA_GROUP));
        let value = match (eksa, kind) {
            (true, "Cluster") => Some(cluster(&sd.doc.value, &mut note)),
            (true, "VSphereDatacenterConfig") => {
                let spec = &sd.doc.value["spec"];
                note(
                    "spec",
                    format!(
                        "vSphere datacenter: vCenter {}, datacenter {}, network {}{}",
                        text(spec, "/server"),
                        text(spec, "/datacenter"),
                        text(spec, "/network"),
                        match spec["failureDomains"].as_array().map(Vec::len) {
                            Some(n) if n > 0 => format!(", {n} failure domains"),
                            _ => String::new(),
                        }
                    ),
                );
                Some(datacenter(&sd.doc.value))
            }
            (true, "VSphereMachineConfig") => {
                let spec = &sd.doc.value["spec"];
                note(
                    "spec",
                    format!(
                        "machine config {} (VM template {}, {} vCPUs, {} MiB, {} GiB disk, OS {}, datastore {}, resource pool {}): the in-memory backend simulates machines",
                        text(&sd.doc.value, "/metadata/name"),
                        text(spec, "/template"),
                        text(spec, "/numCPUs"),
                        text(spec, "/memoryMiB"),
                        text(spec, "/diskGiB"),
                        text(spec, "/osFamily"),
                        text(spec, "/datastore"),
                        text(spec, "/resourcePool"),
                    ),
                );
                None
            }
            (true, "NutanixDatacenterConfig") => {
                let spec = &sd.doc.value["spec"];
                note(
                    "spec",
                    format!(
                        "Nutanix datacenter: Prism Central {}:{}{}{}",
                        text(spec, "/endpoint"),
                        text(spec, "/port"),
                        match spec["failureDomains"].as_array().map(Vec::len) {
                            Some(n) if n > 0 => format!(", {n} failure domains"),
                            _ => String::new(),
                        },
                        match spec["ccmExcludeNodeIPs"].as_array().map(Vec::len) {
                            Some(n) if n > 0 => {
                                format!(", {n} addresses the cloud controller manager ignores")
                            }
                            _ => String::new(),
                        }
                    ),
                );
                Some(datacenter(&sd.doc.value))
            }
            (true, "NutanixMachineConfig") => {
                let spec = &sd.doc.value["spec"];
                note(
                    "spec",
                    format!(
                        "machine config {} (image {}, {} sockets of {} vCPUs, {} memory, {} system disk, OS {}, Prism Element cluster {}, subnet {}{}): the in-memory backend simulates machines",
                        text(&sd.doc.value, "/metadata/name"),
                        nutanix_id(&spec["image"]),
                        text(spec, "/vcpuSockets"),
                        text(spec, "/vcpusPerSocket"),
                        text(spec, "/memorySize"),
                        text(spec, "/systemDiskSize"),
                        text(spec, "/osFamily"),
                        nutanix_id(&spec["cluster"]),
                        nutanix_id(&spec["subnet"]),
                        match spec["gpus"].as_array().map(Vec::len) {
                            Some(n) if n > 0 => format!(", {n} GPUs"),
                            _ => String::new(),
                        },
                    ),
                );
                None
            }
            (true, "TinkerbellDatacenterConfig") => {
                let spec = &sd.doc.value["spec"];
                note(
                    "spec",
                    format!(
                        "bare-metal datacenter: Tinkerbell stack at {}, OS image {}{}{}",
                        text(spec, "/tinkerbellIP"),
                        text(spec, "/osImageURL"),
                        if spec["isoBoot"] == true {
                            ", ISO boot"
                        } else {
                            ""
                        },
                        if spec["skipLoadBalancerDeployment"] == true {
                            ", external load balancer"
                        } else {
                            ""
                        },
                    ),
                );
                Some(datacenter(&sd.doc.value))
            }
            (true, "TinkerbellMachineConfig") => {
                let spec = &sd.doc.value["spec"];
                let hardware = match spec["hardwareSelector"].as_object() {
                    Some(m) if !m.is_empty() => m
                        .iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                        .collect::<Vec<_>>()
                        .join(","),
                    _ => "hardwareAffinity terms".to_string(),
                };
                note(
                    "spec",
                    format!(
                        "machine config {} (Hardware {hardware}, OS {}): the in-memory backend simulates machines, not Hardware, so whether enough Hardware matches is not rehearsed",
                        text(&sd.doc.value, "/metadata/name"),
                        text(spec, "/osFamily"),
                    ),
                );
                None
            }
            (true, "TinkerbellTemplateConfig") => {
                note(
                    "spec",
                    format!(
                        "provisioning workflow {}: nothing is provisioned in a rehearsal",
                        text(&sd.doc.value, "/metadata/name"),
                    ),
                );
                None
            }
            (true, "AWSIamConfig") => {
                note(
                    "spec",
                    format!(
                        "AWS IAM authenticator {} (region {}): its certificate is the real cluster's Secret, and tokens are checked against AWS",
                        text(&sd.doc.value, "/metadata/name"),
                        text(&sd.doc.value["spec"], "/awsRegion"),
                    ),
                );
                None
            }
            (true, "DockerDatacenterConfig") => {
                let backend = sd.doc.value["metadata"]["annotations"][DOCKER_BACKEND_ANNOTATION]
                    .as_str()
                    .unwrap_or("docker");
                if backend != "in-memory" {
                    note(
                        "metadata",
                        "machines as Docker containers: the in-memory backend simulates them"
                            .to_string(),
                    );
                }
                Some(datacenter(&sd.doc.value))
            }
            _ => Some(sd.doc.value.clone()),
        };
        if let Some(value) = value {
            let mut doc = sd.doc.clone();
            doc.value = value;
            out.docs.push(SourceDoc {
                file: sd.file.clone(),
                doc,
            });
        }
    }
    out
}

/// The EKS-A Cluster: its datacenter a DockerDatacenterConfig of the same name, and what only
/// the real infrastructure has taken out (each noted at `path`).
fn cluster(c: &Value, note: &mut impl FnMut(&str, String)) -> Value {
    let mut c = c.clone();
    let Some(spec) = c.get_mut("spec").and_then(Value::as_object_mut) else {
        return c;
    };
    if let Some(r) = spec.get_mut("datacenterRef").and_then(Value::as_object_mut) {
        r.insert("kind".into(), "DockerDatacenterConfig".into());
    }
    if let Some(cp) = spec
        .get_mut("controlPlaneConfiguration")
        .and_then(Value::as_object_mut)
    {
        let at = "spec.controlPlaneConfiguration";
        if let Some(host) = cp.get("endpoint").map(|e| text(e, "/host")) {
            cp.remove("endpoint");
            note(
                &format!("{at}.endpoint"),
                format!("the control plane's virtual IP {host} (kube-vip)"),
            );
        }
        take_out(
            cp,
            at,
            "machineGroupRef",
            "the control-plane machines' machine config",
            note,
        );
        take_out(
            cp,
            at,
            "skipLoadBalancerDeployment",
            "skipLoadBalancerDeployment (vSphere)",
            note,
        );
    }
    if let Some(etcd) = spec
        .get_mut("externalEtcdConfiguration")
        .and_then(Value::as_object_mut)
    {
        take_out(
            etcd,
            "spec.externalEtcdConfiguration",
            "machineGroupRef",
            "the etcd machines' machine config",
            note,
        );
    }
    if let Some(groups) = spec
        .get_mut("workerNodeGroupConfigurations")
        .and_then(Value::as_array_mut)
    {
        for (i, g) in groups.iter_mut().enumerate() {
            let Some(g) = g.as_object_mut() else { continue };
            let at = format!("spec.workerNodeGroupConfigurations[{i}]");
            let name = g
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string();
            take_out(
                g,
                &at,
                "machineGroupRef",
                &format!("worker group {name}'s machine config"),
                note,
            );
            take_out(
                g,
                &at,
                "failureDomains",
                &format!("worker group {name}'s vSphere failure domains"),
                note,
            );
        }
    }
    let at = "spec";
    // The AWS IAM authenticator goes with its config (above); an OIDC provider stays.
    if let Some(refs) = spec
        .get_mut("identityProviderRefs")
        .and_then(Value::as_array_mut)
    {
        let before = refs.len();
        refs.retain(|r| r["kind"] != "AWSIamConfig");
        if refs.len() != before {
            note(
                "spec.identityProviderRefs",
                "the AWS IAM authenticator (the API server's token webhook)".to_string(),
            );
        }
    }
    take_out(
        spec,
        at,
        "proxyConfiguration",
        "the machines' HTTP(S) proxy",
        note,
    );
    take_out(
        spec,
        at,
        "registryMirrorConfiguration",
        "the machines' registry mirror",
        note,
    );
    take_out(
        spec,
        at,
        "etcdEncryption",
        "KMS encryption of etcd (a KMS plugin on real control-plane machines)",
        note,
    );
    take_out(
        spec,
        at,
        "packages",
        "curated packages (the package controller's chart is pulled from EKS Anywhere's registry)",
        note,
    );
    c
}

/// Takes `key` out of `spec` (at `at`), noting `what` went when it was there.
fn take_out(
    spec: &mut serde_json::Map<String, Value>,
    at: &str,
    key: &str,
    what: &str,
    note: &mut impl FnMut(&str, String),
) {
    if spec.remove(key).is_some() {
        note(&format!("{at}.{key}"), what.to_string());
    }
}

/// A DockerDatacenterConfig of the same name and namespace for CAPD's in-memory backend.
fn datacenter(dc: &Value) -> Value {
    // A rehearsal proves order and acceptance, not boot times: machines start at once, unless
    // the datacenter asks for simulated boots itself.
    let startup = dc["metadata"]["annotations"][crate::spec::IN_MEMORY_STARTUP_ANNOTATION]
        .as_str()
        .unwrap_or("instant");
    let mut metadata = json!({
        "name": dc["metadata"]["name"],
        "annotations": {
            DOCKER_BACKEND_ANNOTATION: "in-memory",
            crate::spec::IN_MEMORY_STARTUP_ANNOTATION: startup,
        },
    });
    if let Some(ns) = dc["metadata"].get("namespace") {
        metadata["namespace"] = ns.clone();
    }
    json!({
        "apiVersion": dc["apiVersion"],
        "kind": "DockerDatacenterConfig",
        "metadata": metadata,
        "spec": {},
    })
}

/// A scalar at `pointer` as text ("?" when absent).
/// A Nutanix identifier as a reader names it: its name, or `uuid <uuid>`.
fn nutanix_id(v: &Value) -> String {
    match v["type"].as_str() {
        Some("uuid") => format!("uuid {}", text(v, "/uuid")),
        _ => text(v, "/name"),
    }
}

fn text(v: &Value, pointer: &str) -> String {
    match v.pointer(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => "?".into(),
    }
}
