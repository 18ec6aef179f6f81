//! The objects of a production install, as data (no I/O): what `capstan install --export`
//! prints, what `capstan install` applies and what `capstan bootstrap` commits to the fleet
//! repository.
//!
//! The agent runs as a Deployment of two replicas with leader election, as its own
//! ServiceAccount with the rules of [`super::rbac`], non-root on a read-only root filesystem
//! (its Git mirror lives in an `emptyDir`), with probes on its ops port. It reads three Secrets,
//! referenced here and created by the admin or `capstan bootstrap`, never by `install`:
//! [`GIT_SECRET`] (deploy key and known_hosts, or a CA for https remotes), [`WEBHOOK_SECRET`]
//! (the GitHub webhook's shared secret) and [`GITHUB_SECRET`] (a token for pull-request
//! features). Resources are sized from the scale curve of the fleet benchmark
//! (`agent/benches/versus_flux.rs`, docs/benchmarks.md "Scale curve"): peak RSS 71 MiB at 1,000 clusters
//! and 161 MiB at 3,000 (about 0.045 MiB per cluster; before the agent shared validated
//! clusters and kept objects as JSON text it was 137 and 360 MiB). The supported fleet size of
//! these defaults is up to 3,000 clusters per management cluster: [`MEMORY_REQUEST`] covers
//! that peak and [`MEMORY_LIMIT`] leaves it three times the headroom. A larger fleet needs a
//! higher limit (about 0.05 MiB per cluster, and headroom).

use serde_json::{Value, json};

use super::rbac::{self, Holder, Rule};
use crate::status::NAMESPACE;

/// Name of the ServiceAccount, (Cluster)Role(Binding)s, Deployment and Service.
pub const NAME: &str = "capstan";
/// The leader-election Lease.
pub const LEASE: &str = "capstan-leader";
/// Git credentials: `identity` (SSH private key), `known_hosts`, optionally `ca.crt`.
pub const GIT_SECRET: &str = "capstan-git";
/// The GitHub webhook secret, key `secret`.
pub const WEBHOOK_SECRET: &str = "capstan-webhook";
/// A GitHub token, key `token`.
pub const GITHUB_SECRET: &str = "capstan-github";
/// Where the Git Secret is mounted.
pub const GIT_MOUNT: &str = "/var/run/secrets/capstan.dev/git";
/// The PersistentVolumeClaim backups are written to ([`crate::backup`]).
pub const BACKUP_CLAIM: &str = "capstan-backups";
/// Where it is mounted: the agent's `--backup-dir`.
pub const BACKUP_MOUNT: &str = "/var/lib/capstan/backups";
/// The ops port: /metrics, /healthz, /readyz.
pub const OPS_PORT: u16 = 8080;
/// The webhook port.
pub const WEBHOOK_PORT: u16 = 9292;
/// The dashboard's port, when it is on.
pub const DASHBOARD_PORT: u16 = 8480;
/// The Deployment's memory request (see the module docs for the sizing).
pub const MEMORY_REQUEST: &str = "256Mi";
/// The Deployment's memory limit: fleets of up to 3,000 clusters (161 MiB peak RSS measured).
pub const MEMORY_LIMIT: &str = "512Mi";
/// The default image.
pub const DEFAULT_IMAGE: &str = concat!("ghcr.io/capstan-dev/capstan:v", env!("CARGO_PKG_VERSION"));

/// What to install.
#[derive(Debug, Clone)]
pub struct Options {
    /// The agent's image.
    pub image: String,
    /// The fleet repository the agent follows.
    pub repo: String,
    /// Its branch.
    pub branch: String,
    /// The management cluster this is.
    pub management: String,
    /// Poll interval (e.g. `1m`).
    pub interval: String,
    /// Replicas (leader election picks one).
    pub replicas: u32,
    /// Extra rules (`--allow`: the agent's read and the management identity's write of each).
    pub allow: Vec<Vec<Rule>>,
    /// The backup volume's access mode: `ReadWriteOnce` (every storage class has it; the
    /// replicas then share a node, the one the volume is attached to) or `ReadWriteMany` (the
    /// replicas spread over nodes).
    pub backup_access_mode: String,
    /// The backup volume's size.
    pub backup_size: String,
    /// Its storage class (None: the cluster's default).
    pub backup_storage_class: Option<String>,
    /// Serve the dashboard (`--dashboard-addr` on [`DASHBOARD_PORT`], a port of the Service);
    /// every request is checked with a TokenReview and a SubjectAccessReview.
    pub dashboard: bool,
}

impl Options {
    /// Defaults for a repository and management cluster.
    pub fn new(repo: &str, branch: &str, management: &str) -> Options {
        Options {
            image: DEFAULT_IMAGE.into(),
            repo: repo.into(),
            branch: branch.into(),
            management: management.into(),
            interval: "1m".into(),
            replicas: 2,
            allow: Vec::new(),
            backup_access_mode: "ReadWriteOnce".into(),
            backup_size: "10Gi".into(),
            backup_storage_class: None,
            dashboard: false,
        }
    }

    /// Every rule: capstan's and the `--allow`ed ones.
    pub fn rules(&self) -> Vec<Rule> {
        rbac::rules()
            .into_iter()
            .chain(self.allow.iter().flatten().cloned())
            .collect()
    }

    /// Whether the repository is reached over SSH (then the Git Secret is required).
    pub fn ssh(&self) -> bool {
        self.repo.starts_with("ssh://") || (self.repo.contains('@') && !self.repo.contains("://"))
    }
}

fn labels() -> Value {
    json!({"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "capstan", "app.kubernetes.io/version": env!("CARGO_PKG_VERSION")})
}

fn meta(name: &str, namespaced: bool) -> Value {
    let mut m = json!({"name": name, "labels": labels()});
    if namespaced {
        m["namespace"] = json!(NAMESPACE);
    }
    m
}

/// The Namespace.
pub fn namespace() -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": labels()}})
}

/// The ManagedCluster CRD.
pub fn crd() -> Value {
    let mut crd = serde_json::to_value(crate::status::api::crd()).expect("the CRD serialises");
    crd["metadata"]["labels"] = labels();
    crd
}

/// The ClusterRole and Role of a set of rules, their bindings, and the ServiceAccount.
pub fn rbac(rules: &[Rule]) -> Vec<Value> {
    rbac_named(NAME, rules)
}

/// [`rbac`] for a ServiceAccount `name` in the same namespace, its roles and bindings named
/// alike: a second account beside the agent's (tests that need more than it has).
pub fn rbac_named(name: &str, rules: &[Rule]) -> Vec<Value> {
    let of = |holder| -> Vec<Value> {
        rules
            .iter()
            .filter(|r| r.holder == holder)
            .map(Rule::to_value)
            .collect()
    };
    let subject = json!([{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]);
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(name, true)}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(name, false), "rules": of(Holder::Cluster)}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta(name, false),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}, "subjects": subject}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(name, true), "rules": of(Holder::System)}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta(name, true),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}, "subjects": subject}),
    ]
}

/// The ClusterRoles of the two fleet identities ([`crate::k8s::identity`]) with the
/// [`Holder::Workload`] and [`Holder::Management`] rules of `rules`, bound to their users.
pub fn identities(rules: &[Rule]) -> Vec<Value> {
    use crate::k8s::identity::{MANAGEMENT_USER, WORKLOAD_USER};
    let mut out = Vec::new();
    for (holder, user, name) in [
        (Holder::Workload, WORKLOAD_USER, IDENTITY_ROLES[0]),
        (Holder::Management, MANAGEMENT_USER, IDENTITY_ROLES[1]),
    ] {
        let of: Vec<Value> = rules
            .iter()
            .filter(|r| r.holder == holder)
            .map(Rule::to_value)
            .collect();
        out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(name, false), "rules": of}));
        out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta(name, false),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}));
    }
    out
}

/// The ClusterRoles (and bindings) of the workload and the management identity.
pub const IDENTITY_ROLES: [&str; 2] = ["capstan-workload", "capstan-management"];

/// The tenancy policy and its binding, then the fleet identities' roles ([`identities`]).
pub fn tenancy(rules: &[Rule]) -> Vec<Value> {
    let mut out = vec![super::tenancy::policy(), super::tenancy::binding()];
    out.extend(identities(rules));
    out
}

/// The Deployment's container arguments.
pub fn args(o: &Options) -> Vec<String> {
    let mut a: Vec<String> = [
        "run",
        "--repo",
        &o.repo,
        "--branch",
        &o.branch,
        "--management",
        &o.management,
        "--interval",
        &o.interval,
        "--leader-elect",
        "--metrics-addr",
        &format!("0.0.0.0:{OPS_PORT}"),
        "--webhook-addr",
        &format!("0.0.0.0:{WEBHOOK_PORT}"),
        "--cache-dir",
        "/tmp/capstan/source",
        "--backup-dir",
        BACKUP_MOUNT,
        "--log-json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if o.dashboard {
        a.extend([
            "--dashboard-addr".into(),
            format!("0.0.0.0:{DASHBOARD_PORT}"),
        ]);
    }
    if o.ssh() {
        a.extend([
            "--ssh-key".into(),
            format!("{GIT_MOUNT}/identity"),
            "--known-hosts".into(),
            format!("{GIT_MOUNT}/known_hosts"),
        ]);
    }
    a
}

/// The Deployment.
pub fn deployment(o: &Options) -> Value {
    let selector = json!({"app.kubernetes.io/name": NAME});
    let env_from_secret = |name: &str, secret: &str, key: &str| json!({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": true}}});
    let mut ports = vec![
        json!({"name": "ops", "containerPort": OPS_PORT, "protocol": "TCP"}),
        json!({"name": "webhook", "containerPort": WEBHOOK_PORT, "protocol": "TCP"}),
    ];
    if o.dashboard {
        ports
            .push(json!({"name": "dashboard", "containerPort": DASHBOARD_PORT, "protocol": "TCP"}));
    }
    let probe = |path: &str, period: u32| json!({"httpGet": {"path": path, "port": "ops"}, "periodSeconds": period, "timeoutSeconds": 5, "failureThreshold": 3});
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(NAME, true),
        "spec": {
            "replicas": o.replicas,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
            "template": {
                "metadata": {"labels": labels()},
                "spec": {
                    "serviceAccountName": NAME,
                    "automountServiceAccountToken": true,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "affinity": affinity(o, &selector),
                    "terminationGracePeriodSeconds": 30,
                    "containers": [{
                        "name": "agent",
                        "image": o.image,
                        "imagePullPolicy": "IfNotPresent",
                        "args": args(o),
                        "env": [
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                            {"name": "HOME", "value": "/tmp"},
                            {"name": "RUST_LOG", "value": "info"},
                            env_from_secret("CAPSTAN_WEBHOOK_SECRET", WEBHOOK_SECRET, "secret"),
                            env_from_secret("GITHUB_TOKEN", GITHUB_SECRET, "token"),
                        ],
                        "ports": ports,
                        "livenessProbe": probe("/healthz", 20),
                        "readinessProbe": probe("/readyz", 10),
                        "resources": {
                            "requests": {"cpu": "100m", "memory": MEMORY_REQUEST},
                            "limits": {"cpu": "1", "memory": MEMORY_LIMIT},
                        },
                        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                            "privileged": false, "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [
                            {"name": "tmp", "mountPath": "/tmp"},
                            {"name": "git", "mountPath": GIT_MOUNT, "readOnly": true},
                            {"name": "backups", "mountPath": BACKUP_MOUNT},
                        ],
                    }],
                    "volumes": [
                        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
                        {"name": "git", "secret": {"secretName": GIT_SECRET, "defaultMode": 0o440, "optional": !o.ssh()}},
                        {"name": "backups", "persistentVolumeClaim": {"claimName": BACKUP_CLAIM}},
                    ],
                },
            },
        },
    })
}

/// Where the replicas run. The backup volume is mounted by both: a `ReadWriteOnce` volume is
/// attached to one node at a time, so the replicas share that node (a failed pod's work is
/// taken over at once; a failed node's once the volume follows the pods to another); with a
/// `ReadWriteMany` volume they spread over nodes.
fn affinity(o: &Options, selector: &Value) -> Value {
    let term = json!({"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": selector}});
    if o.backup_access_mode == "ReadWriteMany" {
        json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": term}]}})
    } else {
        json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})
    }
}

/// The volume backups are written to before a management cluster upgrades itself: it outlives
/// the agent's pods (a restart, an eviction, the other replica taking over), and the agent
/// that restores, or an operator, reads it. Kept on uninstall (`capstan uninstall` leaves it).
pub fn backup_claim(o: &Options) -> Value {
    let mut spec = json!({
        "accessModes": [o.backup_access_mode],
        "resources": {"requests": {"storage": o.backup_size}},
    });
    if let Some(class) = &o.backup_storage_class {
        spec["storageClassName"] = json!(class);
    }
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta(BACKUP_CLAIM, true),
        "spec": spec,
    })
}

/// The Service in front of the webhook and metrics (and the dashboard, when it is on).
pub fn service(o: &Options) -> Value {
    let mut ports = vec![
        json!({"name": "webhook", "port": 80, "targetPort": "webhook", "protocol": "TCP"}),
        json!({"name": "metrics", "port": OPS_PORT, "targetPort": "ops", "protocol": "TCP"}),
    ];
    if o.dashboard {
        ports.push(json!({"name": "dashboard", "port": DASHBOARD_PORT, "targetPort": "dashboard", "protocol": "TCP"}));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(NAME, true),
        "spec": {
            "selector": {"app.kubernetes.io/name": NAME},
            "ports": ports,
        },
    })
}

/// Everything, in apply order: the Namespace and CRD, the tenancy policy and the fleet
/// identities, the ServiceAccount and RBAC, the Service and the Deployment.
pub fn all(o: &Options) -> Vec<Value> {
    let mut out = vec![namespace(), crd()];
    out.extend(tenancy(&o.rules()));
    out.extend(rbac(&o.rules()));
    out.push(service(o));
    out.push(backup_claim(o));
    out.push(deployment(o));
    out
}

/// [`all`] as one YAML stream, with a header naming the Secrets it reads.
pub fn to_yaml(o: &Options) -> String {
    format!(
        "# capstan {} for management cluster {} following {} ({}).\n\
         # Generated by `capstan install --export`. The agent reads these Secrets in {NAMESPACE}, created\n\
         # by the admin or `capstan bootstrap`: {GIT_SECRET} (identity, known_hosts), {WEBHOOK_SECRET}\n\
         # (secret), {GITHUB_SECRET} (token).\n{}",
        env!("CARGO_PKG_VERSION"),
        o.management,
        o.repo,
        o.branch,
        capstan_templates::yaml::to_string_multi(&all(o))
    )
}
