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
//! features); and, created by the admin, the age recipients its backups are encrypted to
//! ([`crate::backup::encryption::RECIPIENTS_SECRET`], public keys only: the agent holds no
//! identity). Resources are sized from the scale curve of the fleet benchmark
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
    /// Keep ClusterProfiles in this namespace (`run --cluster-profiles`): their CRD, the
    /// namespace and a Role there ([`rbac::profile_rules`]) are installed too.
    pub cluster_profiles: Option<String>,
    /// Verify commit signatures (`run --verify-commits=head|all`).
    pub verify_commits: Option<String>,
    /// The Secret the trusted keys are read from (`NAMESPACE/NAME`; with `verify_commits`,
    /// [`TRUSTED_KEYS_SECRET`] in [`NAMESPACE`] unless given). A Role in its namespace lets the
    /// agent `get` exactly that Secret ([`rbac::trusted_keys_rules`]).
    pub trusted_keys_secret: Option<(String, String)>,
    /// The Secret the backups' age recipients are read from (`NAMESPACE/NAME`;
    /// [`crate::backup::encryption::RECIPIENTS_SECRET`] in [`NAMESPACE`] unless given). A Role
    /// in its namespace lets the agent `get` exactly that Secret
    /// ([`rbac::backup_recipients_rules`]).
    pub backup_recipients_secret: Option<(String, String)>,
    /// Backups unencrypted (`run --backup-plaintext`): no recipients' Secret, no Role for it.
    pub backup_plaintext: bool,
}

/// The Secret of trusted keys (`allowed_signers`, `trusted.asc`) when `--verify-commits` names none.
pub const TRUSTED_KEYS_SECRET: &str = "capstan-trusted-keys";
/// The Roles (and bindings) outside `capstan-system`: the ClusterProfiles' namespace, the
/// trusted keys' Secret.
pub const PROFILE_ROLE: &str = "capstan-cluster-profiles";
/// See [`PROFILE_ROLE`].
pub const TRUSTED_KEYS_ROLE: &str = "capstan-trusted-keys";
/// The Role (and binding) that reads the backups' recipients' Secret.
pub const BACKUP_RECIPIENTS_ROLE: &str = "capstan-backup-recipients";

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
            cluster_profiles: None,
            verify_commits: None,
            trusted_keys_secret: None,
            backup_recipients_secret: None,
            backup_plaintext: false,
        }
    }

    /// The backups' recipients' Secret: the one given, else the default; none with plaintext.
    pub fn backup_recipients(&self) -> Option<(String, String)> {
        if self.backup_plaintext {
            return None;
        }
        Some(self.backup_recipients_secret.clone().unwrap_or_else(|| {
            (
                NAMESPACE.to_string(),
                crate::backup::encryption::RECIPIENTS_SECRET.to_string(),
            )
        }))
    }

    /// The trusted keys' Secret when verifying commits: the one given, else the default.
    pub fn trusted_keys(&self) -> Option<(String, String)> {
        self.verify_commits.as_ref()?;
        Some(
            self.trusted_keys_secret
                .clone()
                .unwrap_or_else(|| (NAMESPACE.to_string(), TRUSTED_KEYS_SECRET.to_string())),
        )
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
    if let Some(ns) = &o.cluster_profiles {
        a.extend(["--cluster-profiles".into(), ns.clone()]);
    }
    if let (Some(mode), Some((ns, name))) = (&o.verify_commits, o.trusted_keys()) {
        a.extend([
            format!("--verify-commits={mode}"),
            "--trusted-keys-secret".into(),
            format!("{ns}/{name}"),
        ]);
    }
    match o.backup_recipients() {
        Some((ns, name)) => a.extend(["--backup-recipients-secret".into(), format!("{ns}/{name}")]),
        None => a.push("--backup-plaintext".into()),
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

/// The ClusterProfile CRD exactly as upstream ships it
/// ([`crate::reconcile::profile::CRD_YAML`]), with capstan's labels.
pub fn profile_crd() -> Value {
    let mut crd = capstan_templates::yaml::parse_values(crate::reconcile::profile::CRD_YAML)
        .ok()
        .and_then(|docs| docs.into_iter().next())
        .expect("the shipped ClusterProfile CRD parses (a unit test reads it)");
    crd["metadata"]["labels"] = labels();
    crd
}

/// A Role in `namespace` with `rules`, bound to the agent's ServiceAccount.
fn role_in(namespace: &str, name: &str, rules: &[Rule]) -> Vec<Value> {
    let mut m = json!({"name": name, "namespace": namespace, "labels": labels()});
    let rules: Vec<Value> = rules.iter().map(Rule::to_value).collect();
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": m.clone(), "rules": rules});
    m["name"] = json!(name);
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": m,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]});
    vec![role, binding]
}

/// What `--cluster-profiles` and `--verify-commits` add: the ClusterProfile CRD, its namespace
/// and a Role there; a Role that reads exactly the trusted keys' Secret. And, unless backups
/// are plaintext, a Role that reads exactly the backups' recipients' Secret.
pub fn extras(o: &Options) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(ns) = &o.cluster_profiles {
        out.push(profile_crd());
        if ns != NAMESPACE {
            out.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels()}}));
        }
        out.extend(role_in(ns, PROFILE_ROLE, &rbac::profile_rules()));
    }
    if let Some((ns, name)) = o.trusted_keys() {
        out.extend(role_in(
            &ns,
            TRUSTED_KEYS_ROLE,
            &rbac::trusted_keys_rules(&name),
        ));
    }
    if let Some((ns, name)) = o.backup_recipients() {
        out.extend(role_in(
            &ns,
            BACKUP_RECIPIENTS_ROLE,
            &rbac::backup_recipients_rules(&name),
        ));
    }
    out
}

/// Everything, in apply order: the Namespace and CRD, the tenancy policy and the fleet
/// identities, the ServiceAccount and RBAC ([`extras`] with it), the Service and the Deployment.
pub fn all(o: &Options) -> Vec<Value> {
    let mut out = vec![namespace(), crd()];
    out.extend(tenancy(&o.rules()));
    out.extend(rbac(&o.rules()));
    out.extend(extras(o));
    out.push(service(o));
    out.push(backup_claim(o));
    out.push(deployment(o));
    out
}

/// [`all`] as one YAML stream, with a header naming the Secrets it reads.
pub fn to_yaml(o: &Options) -> String {
    let backups = match o.backup_recipients() {
        Some((ns, name)) => format!(
            "# Backups are encrypted to the age public keys (one per line) of the Secret {ns}/{name},\n\
             # key recipients, created by the admin; the identities stay off the cluster.\n"
        ),
        None => {
            "# Backups are written UNENCRYPTED (--backup-plaintext): whoever reads the volume\n\
                 # capstan-backups or its snapshots holds every cluster's keys.\n"
                .to_string()
        }
    };
    format!(
        "# capstan {} for management cluster {} following {} ({}).\n\
         # Generated by `capstan install --export`. The agent reads these Secrets in {NAMESPACE}, created\n\
         # by the admin or `capstan bootstrap`: {GIT_SECRET} (identity, known_hosts), {WEBHOOK_SECRET}\n\
         # (secret), {GITHUB_SECRET} (token).\n{backups}{}",
        env!("CARGO_PKG_VERSION"),
        o.management,
        o.repo,
        o.branch,
        capstan_templates::yaml::to_string_multi(&all(o))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of_kind<'v>(all: &'v [Value], kind: &str, ns: &str) -> Vec<&'v Value> {
        all.iter()
            .filter(|o| o["kind"] == kind && o["metadata"]["namespace"] == ns)
            .collect()
    }

    #[test]
    fn verify_commits_passes_through_and_reads_exactly_its_secret() {
        let mut o = Options::new("https://example.com/fleet.git", "main", "mgmt");
        // The backups' recipients and their Role aside (their own test, below).
        o.backup_plaintext = true;
        assert!(extras(&o).is_empty());
        assert!(!args(&o).iter().any(|a| a.contains("verify")));
        o.verify_commits = Some("all".into());
        o.trusted_keys_secret = Some(("keys".into(), "fleet-signers".into()));
        let a = args(&o);
        let at = a.iter().position(|x| x == "--trusted-keys-secret").unwrap();
        assert_eq!(a[at + 1], "keys/fleet-signers");
        assert!(a.contains(&"--verify-commits=all".to_string()));
        let all = all(&o);
        let roles = of_kind(&all, "Role", "keys");
        assert_eq!(roles.len(), 1);
        assert_eq!(
            roles[0]["rules"],
            json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["fleet-signers"]}])
        );
        let binding = of_kind(&all, "RoleBinding", "keys")[0];
        assert_eq!(binding["subjects"][0]["name"], NAME);
        assert_eq!(binding["roleRef"]["name"], TRUSTED_KEYS_ROLE);
        // What the flag adds names that Secret only. (The ClusterRole reads Secrets already:
        // the rendered kinds include vSphere's ClusterResourceSet payloads.)
        let added: Vec<Value> = extras(&o)
            .iter()
            .filter(|x| x["kind"] == "Role")
            .flat_map(|x| x["rules"].as_array().unwrap().clone())
            .collect();
        assert_eq!(added.len(), 1);
        assert_eq!(added[0]["resourceNames"], json!(["fleet-signers"]));
        // The shipped default.
        o.trusted_keys_secret = None;
        o.verify_commits = Some("head".into());
        let a = args(&o);
        assert!(a.contains(&format!("{NAMESPACE}/{TRUSTED_KEYS_SECRET}")));
        assert_eq!(
            of_kind(&extras(&o), "Role", NAMESPACE)[0]["rules"][0]["resourceNames"],
            json!([TRUSTED_KEYS_SECRET])
        );
    }

    #[test]
    fn backups_are_encrypted_to_a_secret_the_agent_reads_alone_unless_plaintext_is_chosen() {
        let mut o = Options::new("https://example.com/fleet.git", "main", "mgmt");
        let secret = crate::backup::encryption::RECIPIENTS_SECRET;
        // The default: the agent runs with the Secret named, and may get exactly that one.
        let a = args(&o);
        let at = a
            .iter()
            .position(|x| x == "--backup-recipients-secret")
            .unwrap();
        assert_eq!(a[at + 1], format!("{NAMESPACE}/{secret}"));
        assert!(!a.iter().any(|x| x == "--backup-plaintext"));
        let role = |all: &[Value], ns: &str| -> Vec<Value> {
            all.iter()
                .filter(|x| {
                    x["kind"] == "Role"
                        && x["metadata"]["namespace"] == ns
                        && x["metadata"]["name"] == BACKUP_RECIPIENTS_ROLE
                })
                .cloned()
                .collect()
        };
        let everything = all(&o);
        let roles = role(&everything, NAMESPACE);
        assert_eq!(roles.len(), 1);
        assert_eq!(
            roles[0]["rules"],
            json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": [secret]}])
        );
        assert!(everything.iter().any(|x| x["kind"] == "RoleBinding"
            && x["metadata"]["name"] == BACKUP_RECIPIENTS_ROLE
            && x["subjects"][0]["name"] == NAME));
        assert!(to_yaml(&o).contains(&format!("Secret {NAMESPACE}/{secret},")));
        // Another Secret, elsewhere.
        o.backup_recipients_secret = Some(("vault".into(), "fleet-backup-keys".into()));
        let a = args(&o);
        assert!(a.contains(&"vault/fleet-backup-keys".to_string()));
        assert_eq!(
            role(&all(&o), "vault")[0]["rules"][0]["resourceNames"],
            json!(["fleet-backup-keys"])
        );
        // Plaintext, chosen: said in the arguments and the header, and no Role at all.
        o.backup_plaintext = true;
        let a = args(&o);
        assert!(a.contains(&"--backup-plaintext".to_string()));
        assert!(!a.iter().any(|x| x == "--backup-recipients-secret"));
        assert!(role(&all(&o), "vault").is_empty() && role(&all(&o), NAMESPACE).is_empty());
        assert!(to_yaml(&o).contains("UNENCRYPTED"));
        // The arguments parse as `capstan run`'s.
        for plaintext in [false, true] {
            o.backup_plaintext = plaintext;
            let mut argv = vec!["capstan".to_string()];
            argv.extend(args(&o));
            <crate::cli::Cli as clap::Parser>::try_parse_from(&argv).unwrap();
        }
    }

    #[test]
    fn cluster_profiles_install_the_crd_a_namespace_and_a_role_there() {
        let mut o = Options::new("https://example.com/fleet.git", "main", "mgmt");
        o.cluster_profiles = Some("inventory".into());
        let a = args(&o);
        let at = a.iter().position(|x| x == "--cluster-profiles").unwrap();
        assert_eq!(a[at + 1], "inventory");
        let all = all(&o);
        let crd = all
            .iter()
            .find(|x| x["metadata"]["name"] == crate::reconcile::profile::CRD_NAME)
            .unwrap();
        assert_eq!(crd["spec"]["group"], "multicluster.x-k8s.io");
        assert!(
            all.iter()
                .any(|x| x["kind"] == "Namespace" && x["metadata"]["name"] == "inventory")
        );
        let role = of_kind(&all, "Role", "inventory")[0];
        let resources: Vec<&Value> = role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["resources"].as_array().unwrap())
            .collect();
        assert_eq!(
            resources,
            [&json!("clusterprofiles"), &json!("clusterprofiles/status")]
        );
        // The CRD comes before anything that could need it, after capstan's own.
        let pos = |name: &str| {
            all.iter()
                .position(|x| x["metadata"]["name"] == name)
                .unwrap()
        };
        assert!(pos(crate::status::CRD_NAME) < pos(crate::reconcile::profile::CRD_NAME));
    }
}
