//! The template context of a cluster: every value the provider templates use, computed once.
//!
//! Templates hold the shape of each object; this module computes what goes into it (versions and
//! images from the release, flags and files from [`super::node`], provider choices), so a
//! template never decides a default or a version-dependent setting on its own. Version-dependent
//! settings follow EKS Anywhere:
//!
//! | Kubernetes | setting |
//! |---|---|
//! | ≥ 1.29 | kube-vip reads `super-admin.conf` on the first control-plane node during `kubeadm init` |
//! | 1.29–1.32 | kubeadm's `EtcdLearnerMode` feature gate off (vSphere) |
//! | ≥ 1.29 | `KMSv1=true` feature gate with KMS encryption |
//! | < 1.33 | kube-apiserver `--cloud-provider=external` (vSphere; the flag is gone in 1.33) |
//! | ≥ 1.31 | kubelet `fail-cgroupv1=false` (docker) |
//!
//! [`context`] assembles the context from its parts, one function each: the release bundle, the
//! control plane (`control_plane`), the worker groups, external etcd, vSphere, Cilium and the
//! health checks.

mod control_plane;

use serde_json::{Map, Value, json};

use self::control_plane::{control_plane, cp_taints};
use super::RenderError;
use super::node::{self, args_json};
use crate::release::{Release, VersionsBundle};
use crate::spec::{
    Cluster, DockerBackend, HardwareChoice, HealthOverride, KubeVersion, Nutanix, NutanixId,
    NutanixMachine, Provider, Taint, Tinkerbell, TinkerbellMachine, VSphere, VSphereMachine,
    WorkerGroup,
};

pub use crate::spec::ETCD_MIN_MEMORY_MIB;

/// The default audit policy as written to machines (parsed once: comments and anchors of the
/// source file dropped).
fn default_audit_policy() -> &'static str {
    static P: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let v = crate::yaml::parse_values(node::DEFAULT_AUDIT_POLICY)
            .expect("the default audit policy parses; checked by a test");
        crate::yaml::to_string(&v[0]).trim_end().to_string()
    })
}

/// The control-plane taint kubeadm uses and EKS-A defaults to on vSphere.
pub fn default_cp_taint() -> Value {
    json!({"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"})
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

/// A machine config for the templates; `min_memory` raises its memory (etcd), and only worker
/// machines keep their own networks.
fn machine_json(m: Option<&VSphereMachine>, min_memory: i64, own_networks: bool) -> Value {
    match m {
        None => Value::Null,
        Some(m) => json!({
            "datastore": m.datastore, "folder": m.folder,
            "memory_mib": m.memory_mib.max(min_memory), "num_cpus": m.num_cpus,
            "disk_gib": m.disk_gib, "os_family": m.os_family, "resource_pool": m.resource_pool,
            "template": m.template, "storage_policy_name": m.storage_policy_name,
            "clone_mode": m.clone_mode, "tags": m.tags,
            "networks": if own_networks { m.networks.clone() } else { Vec::new() },
        }),
    }
}

/// `{type: name, name: …}` or `{type: uuid, uuid: …}`.
fn nutanix_id(id: &NutanixId) -> Value {
    let mut m = Map::new();
    m.insert("type".into(), json!(id.kind));
    m.insert(id.kind.clone(), json!(id.value));
    Value::Object(m)
}

/// A Tinkerbell machine config for the templates: CAPT's hardware affinity (one required term
/// from a hardwareSelector) and the workflow.
fn tinkerbell_machine_json(m: &TinkerbellMachine) -> Value {
    let affinity = match &m.hardware {
        HardwareChoice::Selector(labels) => {
            json!({"required": [{"labelSelector": {"matchLabels": labels}}]})
        }
        HardwareChoice::Affinity(a) => a.clone(),
    };
    json!({"hardware_affinity": affinity, "workflow": m.workflow})
}

/// A Nutanix machine config for the templates (the CAPX field shapes).
fn nutanix_machine_json(m: &NutanixMachine) -> Value {
    json!({
        "vcpus_per_socket": m.vcpus_per_socket, "vcpu_sockets": m.vcpu_sockets,
        "memory_size": m.memory_size, "system_disk_size": m.system_disk_size,
        "boot_type": m.boot_type,
        "image": nutanix_id(&m.image), "cluster": nutanix_id(&m.cluster),
        "subnet": nutanix_id(&m.subnet),
        "project": m.project.as_ref().map(nutanix_id),
        "categories": m.categories.iter().map(|(k, v)| json!({"key": k, "value": v})).collect::<Vec<_>>(),
        "gpus": m.gpus.iter().map(|g| if g.kind == "deviceID" {
            json!({"type": "deviceID", "deviceID": g.value.parse::<i64>().unwrap_or_default()})
        } else {
            json!({"type": "name", "name": g.value})
        }).collect::<Vec<_>>(),
    })
}

/// `users` of a Nutanix machine's kubeadm config (`lock_password`) or etcdadm config.
fn nutanix_users_json(m: &NutanixMachine, lock_password: bool) -> Value {
    let mut u = json!({"name": m.user.0, "sudo": "ALL=(ALL) NOPASSWD:ALL"});
    // No key, no SSH access: Cluster API's CRDs refuse an empty key (EKS-A's CLI would have
    // generated one; capstan never writes keys into the repository).
    if !m.user.1.is_empty() {
        u["sshAuthorizedKeys"] = json!([m.user.1]);
    }
    if lock_password {
        u["lockPassword"] = json!(false);
    }
    json!([u])
}

/// `users` of a kubeadm or etcdadm config: the machine config's first user and key.
fn users_json(m: Option<&VSphereMachine>) -> Value {
    match m.and_then(|m| m.user.as_ref()) {
        Some((name, key)) if !key.is_empty() => json!([{
            "name": name, "sshAuthorizedKeys": [key], "sudo": "ALL=(ALL) NOPASSWD:ALL",
        }]),
        Some((name, _)) => json!([{"name": name, "sudo": "ALL=(ALL) NOPASSWD:ALL"}]),
        None => json!([]),
    }
}

pub(super) fn bundle_for(
    release: &Release,
    v: KubeVersion,
) -> Result<&VersionsBundle, RenderError> {
    release
        .versions_bundle(v)
        .ok_or_else(|| RenderError::MissingBundle {
            release: release.version.to_string(),
            version: v,
        })
}

/// The Helm values of Cilium, as EKS Anywhere's Cilium templater computes them; `helmValues`
/// replaces them all.
pub fn cilium_values(cluster: &Cluster, bundle: &VersionsBundle) -> Value {
    let c = &cluster.network.cilium;
    if let Some(v) = &c.helm_values {
        return v.clone();
    }
    let (agent_repo, agent_tag) = bundle.cilium.cilium.split();
    let (op_repo, op_tag) = bundle.cilium.operator.split();
    // The chart appends "-generic" to the operator repository itself.
    let op_repo = op_repo.strip_suffix("-generic").unwrap_or(op_repo);
    let mut values = json!({
        "cni": {"chainingMode": "portmap"},
        "ipam": {"mode": "kubernetes"},
        "identityAllocationMode": "crd",
        "prometheus": {"enabled": true},
        "rollOutCiliumPods": true,
        "routingMode": "tunnel",
        "tunnelProtocol": "geneve",
        "image": {"repository": agent_repo, "tag": agent_tag},
        "operator": {
            "image": {"repository": op_repo, "tag": op_tag},
            "prometheus": {"enabled": true},
            "tolerations": [
                {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
                {"key": "node.cilium.io/agent-not-ready", "operator": "Exists"},
            ],
        },
        "envoy": {"enabled": false},
    });
    let obj = values.as_object_mut().expect("literal object");
    if cluster.workers.is_empty() && cluster.control_plane.count == 1 {
        obj["operator"]["replicas"] = json!(1);
    }
    if let Some(m) = &c.policy_enforcement_mode {
        obj.insert("policyEnforcementMode".into(), json!(m));
    }
    if let Some(i) = &c.egress_masquerade_interfaces {
        obj.insert("egressMasqueradeInterfaces".into(), json!(i));
    }
    if let Some(x) = c.cni_exclusive {
        obj["cni"]["exclusive"] = json!(x);
    }
    if c.routing_mode.as_deref() == Some("direct") {
        obj.insert("routingMode".into(), json!("native"));
        obj.insert("autoDirectNodeRoutes".into(), json!("true"));
        obj.remove("tunnelProtocol");
        if let Some(cidr) = &c.ipv4_native_routing_cidr {
            obj.insert("ipv4NativeRoutingCIDR".into(), json!(cidr));
        }
        if let Some(cidr) = &c.ipv6_native_routing_cidr {
            obj.insert("ipv6NativeRoutingCIDR".into(), json!(cidr));
        }
    }
    values
}

/// Cilium's Helm values as YAML text. A fleet's clusters have a few distinct sets of values (one
/// per release and Cilium setting), so the last texts written on this thread are kept: writing
/// them was 4 % of a render.
fn cilium_text(values: Value) -> String {
    const KEPT: usize = 8;
    thread_local! {
        static TEXTS: std::cell::RefCell<std::collections::VecDeque<(Value, String)>> =
            const { std::cell::RefCell::new(std::collections::VecDeque::new()) };
    }
    TEXTS.with_borrow_mut(|texts| {
        if let Some((_, text)) = texts.iter().find(|(v, _)| *v == values) {
            return text.clone();
        }
        let text = crate::yaml::to_string(&values);
        if texts.len() == KEPT {
            texts.pop_back();
        }
        texts.push_front((values, text.clone()));
        text
    })
}

fn health_json(cluster: &Cluster, o: &HealthOverride, default_max: &Value, name: &str) -> Value {
    let h = &cluster.health;
    json!({
        "name": name,
        "node_startup_timeout_seconds": o.node_startup_timeout_seconds.unwrap_or(h.node_startup_timeout_seconds),
        "unhealthy_machine_timeout_seconds": o.unhealthy_machine_timeout_seconds.unwrap_or(h.unhealthy_machine_timeout_seconds),
        "max_unhealthy": o.max_unhealthy.clone().unwrap_or_else(|| default_max.clone()),
    })
}

/// Tolerations of the vSphere cloud controller manager: uninitialized and not-ready nodes, the
/// control plane, and the control plane's own taints.
fn cpi_tolerations(cp_taints: &Value) -> Value {
    let mut t = vec![
        json!({"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}),
        json!({"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"}),
        json!({"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}),
    ];
    t.extend(cp_taints.as_array().cloned().unwrap_or_default());
    Value::Array(t)
}

/// `object` (written with `json!`, which copies every value through its serializer) with the
/// `moved` entries moved in as they are (copying the context's lists and mappings that way was
/// 5 % of a render).
fn with<const N: usize>(mut object: Value, moved: [(&str, Value); N]) -> Value {
    let map = object.as_object_mut().expect("an object literal");
    for (k, v) in moved {
        map.insert(k.to_string(), v);
    }
    object
}

/// The template context of a cluster.
pub(super) fn context(
    cluster: &Cluster,
    release: &Release,
) -> Result<Map<String, Value>, RenderError> {
    let cp_bundle = bundle_for(release, cluster.kubernetes_version)?;
    let s = Shared {
        cluster,
        minor: cluster.kubernetes_version.minor,
        vsphere: match &cluster.provider {
            Provider::VSphere(v) => Some(v),
            _ => None,
        },
        nutanix: match &cluster.provider {
            Provider::Nutanix(n) => Some(n),
            _ => None,
        },
        tinkerbell: match &cluster.provider {
            Provider::Tinkerbell(t) => Some(t),
            _ => None,
        },
    };
    let cp_taints = cp_taints(&s);
    let cp = control_plane(&s, cp_bundle, &cp_taints);
    let (workers, worker_health) = workers(&s, release)?;
    let etcd = etcd(&s);
    let in_memory = matches!(cluster.provider, Provider::Docker(DockerBackend::InMemory));
    let infra = match cluster.provider {
        Provider::Docker(DockerBackend::Docker) => &crate::provider::DOCKER.infrastructure[0],
        Provider::Docker(DockerBackend::InMemory) => &crate::provider::DOCKER.infrastructure[1],
        Provider::VSphere(_) => &crate::provider::VSPHERE.infrastructure[0],
        Provider::Nutanix(_) => &crate::provider::NUTANIX.infrastructure[0],
        Provider::Tinkerbell(_) => &crate::provider::TINKERBELL.infrastructure[0],
    };
    let vsphere = match s.vsphere {
        Some(v) => vsphere_json(cluster, v, &cp_taints),
        None => Value::Null,
    };
    let nutanix = match s.nutanix {
        Some(n) => nutanix_json(cluster, n),
        None => Value::Null,
    };
    let strategy = if cluster.network.cilium.skip_upgrade == Some(true) {
        "InstallOnce"
    } else {
        "Continuous"
    };
    let cilium = cilium_text(cilium_values(cluster, cp_bundle));

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
    ctx.insert("minor".into(), json!(s.minor));
    ctx.insert("bundle".into(), bundle_json(cp_bundle));
    ctx.insert("cp".into(), cp);
    ctx.insert("etcd".into(), etcd);
    ctx.insert("workers".into(), Value::Array(workers));
    ctx.insert("vsphere".into(), vsphere);
    ctx.insert("nutanix".into(), nutanix);
    ctx.insert(
        "tinkerbell".into(),
        match s.tinkerbell {
            Some(t) => json!({
                "tinkerbell_ip": t.tinkerbell_ip,
                "kube_vip": !t.skip_load_balancer,
                "boot_mode": if t.iso_boot { "iso" } else { "netboot" },
                // Smee serves the HookOS ISO on its HTTP port, 7171.
                "iso_url": t.iso_boot.then(|| format!("http://{}:7171/iso/hook.iso", t.tinkerbell_ip)),
                "image_lookup_format": format!("--kube-{}.raw.gz", cp_bundle.eks_d.tag),
            }),
            None => Value::Null,
        },
    );
    // Read from the datacenter as written (an annotation, no field of the spec).
    let instant = in_memory
        && cluster.eksa_objects.iter().any(|o| {
            let o = o.value();
            o["kind"] == "DockerDatacenterConfig"
                && o["metadata"]["annotations"][crate::spec::IN_MEMORY_STARTUP_ANNOTATION]
                    == "instant"
        });
    ctx.insert(
        "docker".into(),
        json!({"in_memory": in_memory, "startup": if instant { "0s" } else { "" }}),
    );
    ctx.insert(
        "infra".into(),
        json!({"api_version": infra.api_version, "cluster_kind": infra.cluster_kind, "machine_template_kind": infra.machine_template_kind}),
    );
    ctx.insert(
        "health".into(),
        with(
            json!({}),
            [
                (
                    "cp",
                    health_json(
                        cluster,
                        &cluster.control_plane.health,
                        &cluster.health.control_plane_max_unhealthy,
                        "",
                    ),
                ),
                ("workers", Value::Array(worker_health)),
            ],
        ),
    );
    ctx.insert(
        "cilium".into(),
        json!({"values": cilium, "reconcile_strategy": strategy}),
    );
    ctx.insert(
        "packages".into(),
        super::packages::context(cluster, cp_bundle)?,
    );
    Ok(ctx)
}

/// What the parts of a context share: the cluster, its control plane's Kubernetes minor, and
/// its vSphere, Nutanix or Tinkerbell settings (None on other providers).
struct Shared<'a> {
    cluster: &'a Cluster,
    minor: u32,
    vsphere: Option<&'a VSphere>,
    nutanix: Option<&'a Nutanix>,
    tinkerbell: Option<&'a Tinkerbell>,
}

impl<'a> Shared<'a> {
    /// Whether the cluster runs on vSphere.
    fn is_vsphere(&self) -> bool {
        self.vsphere.is_some()
    }

    /// Whether the cluster runs on virtual machines (vSphere or Nutanix), whose machines get
    /// their hostname from cloud-init and a kube-vip address.
    fn on_vms(&self) -> bool {
        self.vsphere.is_some() || self.nutanix.is_some()
    }

    /// The Tinkerbell machine config a part names (None on other providers).
    fn tinkerbell_machine_of(&self, name: &Option<String>) -> Option<&'a TinkerbellMachine> {
        name.as_ref()
            .and_then(|n| self.tinkerbell.and_then(|t| t.machines.get(n)))
    }

    /// The vSphere machine config a part names (None on docker, or when it names none).
    fn machine_of(&self, name: &Option<String>) -> Option<&'a VSphereMachine> {
        name.as_ref()
            .and_then(|n| self.vsphere.and_then(|v| v.machines.get(n)))
    }

    /// The Nutanix machine config a part names (None on other providers).
    fn nutanix_machine_of(&self, name: &Option<String>) -> Option<&'a NutanixMachine> {
        name.as_ref()
            .and_then(|n| self.nutanix.and_then(|v| v.machines.get(n)))
    }

    /// The machine config a part names, for the templates; `min_memory` raises a vSphere
    /// machine's memory (etcd), and only worker machines keep their own networks.
    fn machine(&self, name: &Option<String>, min_memory: i64, own_networks: bool) -> Value {
        if let Some(m) = self.tinkerbell_machine_of(name) {
            return tinkerbell_machine_json(m);
        }
        match self.nutanix_machine_of(name) {
            Some(m) => nutanix_machine_json(m),
            None => machine_json(self.machine_of(name), min_memory, own_networks),
        }
    }

    /// NTP servers of the machine config a part names.
    fn ntp(&self, name: &Option<String>) -> Vec<String> {
        if let Some(m) = self.tinkerbell_machine_of(name) {
            return m.ntp_servers.clone();
        }
        self.machine_of(name)
            .map(|m| m.ntp_servers.clone())
            .unwrap_or_default()
    }

    /// `users` of a part's kubeadm config (`etcd`: etcdadm's).
    fn users(&self, name: &Option<String>, etcd: bool) -> Value {
        if let Some(m) = self.tinkerbell_machine_of(name) {
            let (user, key) = &m.user;
            return json!([{"name": user, "sshAuthorizedKeys": [key], "sudo": "ALL=(ALL) NOPASSWD:ALL"}]);
        }
        match self.nutanix_machine_of(name) {
            Some(m) => nutanix_users_json(m, !etcd),
            None => users_json(self.machine_of(name)),
        }
    }

    /// The commands a control-plane or worker node runs before kubeadm, by provider.
    fn pre_commands(&self, control_plane: bool) -> Vec<String> {
        if self.is_vsphere() {
            node::vsphere_pre_commands(self.cluster)
        } else if self.nutanix.is_some() {
            node::nutanix_pre_commands(self.cluster, control_plane)
        } else if self.tinkerbell.is_some() {
            node::tinkerbell_pre_commands(self.cluster)
        } else {
            node::docker_pre_commands(self.cluster)
        }
    }
}

/// The release's images and versions the templates use (from the control plane's bundle).
fn bundle_json(cp_bundle: &VersionsBundle) -> Value {
    let (haproxy_repository, haproxy_tag) = cp_bundle.haproxy.split();
    let haproxy_repository = haproxy_repository
        .rsplit_once('/')
        .map(|(r, _)| r)
        .unwrap_or(haproxy_repository);
    let (chart_ref, chart_version) = cp_bundle.cilium.helm_chart.split();
    let (chart_repo, chart_name) = chart_ref.rsplit_once('/').unwrap_or(("", chart_ref));
    let d = &cp_bundle.eks_d;
    json!({
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
        "cpi_manager_image": cp_bundle.vsphere.manager.uri,
        "nutanix_kube_vip_image": cp_bundle.nutanix.kube_vip.uri,
        "nutanix_ccm_image": cp_bundle.nutanix.cloud_provider.uri,
        "tinkerbell_kube_vip_image": cp_bundle.tinkerbell.kube_vip.uri,
        "cilium_repository": format!("oci://{chart_repo}"),
        "cilium_chart": chart_name,
        "cilium_version": chart_version,
    })
}

/// The worker groups' part of the context, and their health checks; each group renders with the
/// bundle of its own Kubernetes version.
fn workers(s: &Shared, release: &Release) -> Result<(Vec<Value>, Vec<Value>), RenderError> {
    let cluster = s.cluster;
    let mut workers = Vec::new();
    let mut worker_health = Vec::new();
    for w in &cluster.workers {
        let b = bundle_for(release, w.kubernetes_version)?;
        workers.push(worker_json(s, w, b));
        worker_health.push(health_json(
            cluster,
            &w.health,
            &cluster.health.workers_max_unhealthy,
            &w.name,
        ));
    }
    Ok((workers, worker_health))
}

/// One worker group: replicas or autoscaling, versions, machines, kubelet flags and files, and
/// its vSphere failure domain.
fn worker_json(s: &Shared, w: &WorkerGroup, b: &VersionsBundle) -> Value {
    let cluster = s.cluster;
    let (kubelet_args, patch) = node::kubelet(
        cluster,
        w.kubernetes_version.minor,
        w.kubelet_configuration.as_ref(),
        &w.labels,
        node::KubeletRole::Worker,
    );
    let mut files = Vec::new();
    if let Some(p) = &patch {
        files.push(node::kubelet_patch_file(p));
    }
    if let Some(f) = node::proxy_file(cluster) {
        files.push(f);
    }
    if let Some(m) = &cluster.registry_mirror {
        files.extend(node::mirror_files(m, &cluster.name));
    }
    let failure_domain = match (&w.failure_domain, s.vsphere) {
        (Some(fd), Some(v)) => Some(format!("{}-{}-{fd}", cluster.name, v.datacenter_config)),
        _ => None,
    };
    let deployments = match s.nutanix {
        Some(n) => nutanix_deployments(n, w),
        None => Vec::new(),
    };
    let deployments = if deployments.is_empty() {
        vec![
            json!({"name": w.name, "replicas": w.replicas, "failure_domain": failure_domain, "failure_domain_spec": null}),
        ]
    } else {
        deployments
    };
    with(
        json!({
            "name": w.name,
            "replicas": w.replicas,
            "autoscaling": w.autoscaling.map(|(a, b)| json!([a, b])),
            "version": b.eks_d.tag,
            "node_image": b.eks_d.kind_node.uri,
            "ntp": s.ntp(&w.machine),
            "patches": patch.is_some(),
            "pre_commands": s.pre_commands(false),
            "rollout": w.rollout.map(|(surge, u)| json!({"max_surge": surge, "max_unavailable": u})),
            "failure_domain": failure_domain,
        }),
        [
            ("taints", taints_json(&w.taints)),
            ("machine", s.machine(&w.machine, 0, true)),
            ("users", s.users(&w.machine, false)),
            ("deployments", Value::Array(deployments)),
            ("kubelet_args", args_json(&kubelet_args)),
            ("files", Value::Array(files)),
        ],
    )
}

/// External etcd's part of the context (null when etcd is stacked): machines, and on vSphere
/// the proxy and registry mirror etcdadm's machines use.
fn etcd(s: &Shared) -> Value {
    let cluster = s.cluster;
    let Some(e) = &cluster.etcd else {
        return Value::Null;
    };
    let proxy = match (&cluster.proxy, node::provider_server(cluster)) {
        (Some(p), Some(server)) => json!({
            "httpProxy": p.http, "httpsProxy": p.https,
            "noProxy": node::no_proxy(cluster, server),
        }),
        _ => Value::Null,
    };
    let mirror = cluster.registry_mirror.as_ref().map(|r| {
        let public = r
            .namespaces
            .get("public.ecr.aws")
            .map(|m| node::mirror_api_endpoint(m))
            .unwrap_or_default();
        let mut m = json!({"endpoint": public});
        if let Some(ca) = &r.ca_cert {
            m["caCert"] = json!(ca);
        }
        m
    });
    with(
        json!({
            "count": e.count,
            "ntp": s.ntp(&e.machine),
            "cipher_suites": node::CIPHER_SUITES,
            "pre_commands": if s.on_vms() || s.tinkerbell.is_some() { node::hostname_commands() } else { Vec::new() },
        }),
        [
            ("machine", s.machine(&e.machine, ETCD_MIN_MEMORY_MIB, false)),
            ("users", s.users(&e.machine, true)),
            ("proxy", proxy),
            ("registry_mirror", mirror.unwrap_or(Value::Null)),
        ],
    )
}

/// The vSphere part of the context: vCenter, the credentials Secrets' names, the cloud
/// controller manager's tolerations and the failure domains.
fn vsphere_json(cluster: &Cluster, v: &VSphere, cp_taints: &Value) -> Value {
    with(
        json!({
            "server": v.server, "datacenter": v.datacenter, "network": v.network,
            "thumbprint": v.thumbprint, "insecure": v.insecure,
            "credentials_secret": format!("{}-vsphere-credentials", cluster.name),
            "cpi_credentials_secret": format!("{}-cloud-provider-vsphere-credentials", cluster.name),
        }),
        [
            ("cpi_tolerations", cpi_tolerations(cp_taints)),
            (
                "failure_domains",
                Value::Array(v.failure_domains.iter().map(|f| json!({
                    "name": format!("{}-{}-{}", cluster.name, v.datacenter_config, f.name),
                    "datacenter_config": v.datacenter_config,
                    "compute_cluster": f.compute_cluster, "resource_pool": f.resource_pool,
                    "datastore": f.datastore, "folder": f.folder, "network": f.network,
                })).collect()),
            ),
        ],
    )
}

/// The MachineDeployments of a Nutanix worker group spread over failure domains (empty when the
/// group is in none): one per failure domain naming the group, the replicas split as EKS
/// Anywhere splits them (the first failure domain takes the remainder; none with autoscaling).
fn nutanix_deployments(n: &Nutanix, w: &WorkerGroup) -> Vec<Value> {
    let fds: Vec<_> = n
        .failure_domains
        .iter()
        .filter(|f| f.worker_groups.contains(&w.name))
        .collect();
    if fds.is_empty() {
        return Vec::new();
    }
    let count = fds.len() as u32;
    fds.iter()
        .enumerate()
        .map(|(i, f)| {
            let replicas = w.replicas.map(|r| {
                let each = r / count;
                if i == 0 { r - (count - 1) * each } else { each }
            });
            json!({
                "name": format!("{}-{}", w.name, f.name),
                "replicas": replicas,
                "failure_domain": f.name,
                "failure_domain_spec": {
                    "cluster": nutanix_id(&f.cluster),
                    "subnets": f.subnets.iter().map(nutanix_id).collect::<Vec<_>>(),
                },
            })
        })
        .collect()
}

/// The Nutanix part of the context: Prism Central, the credentials Secrets' names, the failure
/// domains and the addresses the cloud controller manager ignores.
fn nutanix_json(cluster: &Cluster, n: &Nutanix) -> Value {
    let mut ignored: Vec<String> = cluster
        .control_plane
        .endpoint_host
        .iter()
        .cloned()
        .collect();
    ignored.extend(n.ccm_ignored_ips.iter().cloned());
    json!({
        "endpoint": n.endpoint, "port": n.port, "insecure": n.insecure,
        "trust_bundle": n.trust_bundle,
        // EKS Anywhere's CLI names CAPX's copy `capx-<cluster>`; capstan names every Secret of a
        // cluster `<cluster>-…`, the one shape the tenancy policy lets a cluster name.
        "credentials_secret": format!("{}-nutanix-credentials", cluster.name),
        "ccm_secret": format!("{}-nutanix-ccm-secret", cluster.name),
        "ccm_ignored_ips": ignored,
        "failure_domains": n.failure_domains.iter().map(|f| json!({
            "name": f.name,
            "cluster": nutanix_id(&f.cluster),
            "subnets": f.subnets.iter().map(nutanix_id).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}
