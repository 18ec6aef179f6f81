//! What the agent may do, rule by rule. Three principals:
//!
//! - the agent's ServiceAccount: its ClusterRole reads the kinds capstan renders (watches, a
//!   live object to compare), creates namespaces, reads its own CRD, and may impersonate exactly
//!   the two fleet identities (which is also how it checks at start that the tenancy policy
//!   holds: a probe write as the workload identity must be refused by it); its Role in `capstan-system` holds its
//!   status objects, their Events and the leader-election Lease. It writes no fleet object
//!   itself;
//! - [`crate::k8s::identity::WORKLOAD_USER`]: writes the kinds workload directories render,
//!   each write confined to its cluster by the tenancy policy ([`super::tenancy`]);
//! - [`crate::k8s::identity::MANAGEMENT_USER`]: writes every kind capstan renders and the kinds
//!   named with `--allow`, never taking over an object another created.
//!
//! No wildcards, and every rule is there for something a test shows failing with `Forbidden`
//! without it (`tests/e2e/tests/reconcile/rbac.rs`); the rules only a management cluster's upgrade of itself
//! needs (reading what its backup holds, the kube-vip ordering) have a scenario of their own
//! there (the backup and the ordering, as the ServiceAccount), and are proven sufficient by
//! `tests/e2e/tests/self_upgrade.rs`, whose agent runs as the agent's ServiceAccount and whose
//! backup must skip no kind. What the rules
//! deliberately do not grant: writing CRDs or RBAC. (Secrets are written: vSphere clusters carry
//! their ClusterResourceSet payloads in Secrets, as EKS Anywhere renders them; credentials never
//! come from the repository.) An agent that could write RBAC could grant itself anything, so the
//! agent never applies its own install manifests; a fleet whose directories carry other kinds
//! (ConfigMaps, CRDs, ...) names them with `capstan install --allow RESOURCE[.GROUP]`, which adds
//! one rule per resource.

use serde_json::{Value, json};

/// Reading a kind capstan renders: the agent's own ServiceAccount watches it, reads a live
/// object to compare, and writes nothing of it itself.
pub const READ: &[&str] = &["get", "list", "watch"];

/// Writing a kind capstan renders, as a cluster's identity ([`crate::k8s::identity`]): creating
/// (server-side apply of an object that does not exist yet is authorised as `patch` and
/// `create`), updating, pruning and deleting on a tombstone.
pub const WRITE: &[&str] = &["create", "patch", "delete"];

/// Which role a rule lives in, and so who holds it: the agent (its ClusterRole, its Role) or a
/// fleet identity. Not a Kubernetes scope (cluster-scoped or namespaced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// The agent's ClusterRole.
    Cluster,
    /// The agent's Role in `capstan-system`.
    System,
    /// The ClusterRole of [`crate::k8s::identity::WORKLOAD_USER`]: what workload directories
    /// may write (the tenancy policy then confines each write to its cluster).
    Workload,
    /// The ClusterRole of [`crate::k8s::identity::MANAGEMENT_USER`]: what management
    /// directories may write.
    Management,
}

/// One RBAC rule and why it is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Which role holds it.
    pub holder: Holder,
    /// API group ("" for the core group).
    pub group: String,
    /// Resources (plural, `resource/subresource` for subresources).
    pub resources: Vec<String>,
    /// Verbs.
    pub verbs: Vec<String>,
    /// Only these objects (empty: all).
    pub resource_names: Vec<String>,
    /// Why capstan needs it.
    pub why: String,
    /// Needed only when a management cluster upgrades itself (backup, kube-vip's holder last):
    /// `tests/e2e/tests/reconcile/rbac.rs` proves it needed with the backup and the ordering rather than
    /// the agent's main scenario.
    pub self_upgrade: bool,
}

impl Rule {
    fn new(holder: Holder, group: &str, resources: &[&str], verbs: &[&str], why: &str) -> Rule {
        Rule {
            holder,
            group: group.into(),
            resources: resources.iter().map(|r| r.to_string()).collect(),
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
            resource_names: Vec::new(),
            why: why.into(),
            self_upgrade: false,
        }
    }

    fn for_self_upgrade(self) -> Rule {
        Rule {
            self_upgrade: true,
            ..self
        }
    }

    fn named(self, names: &[&str]) -> Rule {
        Rule {
            resource_names: names.iter().map(|n| n.to_string()).collect(),
            ..self
        }
    }

    /// The rule as it goes into a (Cluster)Role.
    pub fn to_value(&self) -> Value {
        let mut v =
            json!({"apiGroups": [self.group], "resources": self.resources, "verbs": self.verbs});
        if !self.resource_names.is_empty() {
            v["resourceNames"] = json!(self.resource_names);
        }
        v
    }

    /// `resource.group` of its first resource (how tests and messages name it).
    pub fn subject(&self) -> String {
        let r = self.resources.first().map(String::as_str).unwrap_or("");
        if self.group.is_empty() {
            r.to_string()
        } else {
            format!("{r}.{}", self.group)
        }
    }
}

/// Which directories' identities write a rendered kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writers {
    /// Management and workload directories render it.
    Both,
    /// Only management directories render it.
    Management,
    /// Only workload directories render it (the AWS IAM authenticator's config: a management
    /// cluster's is refused).
    Workloads,
}

/// The kinds capstan renders: group, resources, which directories render them, and why. The providers' kinds come from their descriptors
/// ([`capstan_templates::provider`]).
fn rendered() -> Vec<(&'static str, Vec<&'static str>, Writers, &'static str)> {
    use capstan_templates::provider::PROVIDERS;
    let infrastructure: Vec<&'static str> = PROVIDERS
        .iter()
        .flat_map(|p| p.infrastructure.iter())
        .flat_map(|i| [i.cluster_plural, i.machine_template_plural])
        .collect();
    // The other kinds providers render (vSphere's failure domains, cluster-scoped), by group.
    let mut others: std::collections::BTreeMap<&'static str, Vec<&'static str>> =
        std::collections::BTreeMap::new();
    for k in PROVIDERS.iter().flat_map(|p| p.kinds.iter()) {
        others.entry(k.group).or_default().push(k.plural);
    }
    // The Cluster, the OIDC identity provider its `identityProviderRefs` may name, and each
    // provider's datacenter and machine configs.
    let eksa: Vec<&'static str> = ["clusters", "oidcconfigs"]
        .into_iter()
        .chain(
            PROVIDERS
                .iter()
                .flat_map(|p| p.eksa_kinds.iter().map(|(_, plural)| *plural)),
        )
        .collect();
    let mut kinds = vec![
        (
            "cluster.x-k8s.io",
            vec!["clusters", "machinedeployments", "machinehealthchecks"],
            Writers::Both,
            "every cluster's Cluster API objects",
        ),
        (
            "controlplane.cluster.x-k8s.io",
            vec!["kubeadmcontrolplanes"],
            Writers::Both,
            "every cluster's control plane",
        ),
        (
            "bootstrap.cluster.x-k8s.io",
            vec!["kubeadmconfigtemplates"],
            Writers::Both,
            "every worker group's bootstrap template",
        ),
        (
            "infrastructure.cluster.x-k8s.io",
            infrastructure,
            Writers::Both,
            "each provider's infrastructure cluster and machine templates",
        ),
        (
            "etcdcluster.cluster.x-k8s.io",
            vec!["etcdadmclusters"],
            Writers::Both,
            "external etcd",
        ),
        (
            "addons.cluster.x-k8s.io",
            vec!["helmchartproxies"],
            Writers::Both,
            "the CNI (Cilium) through Cluster API's Helm add-on provider, and add-ons a directory carries",
        ),
        (
            "anywhere.eks.amazonaws.com",
            eksa,
            Writers::Both,
            "the EKS Anywhere objects of each cluster",
        ),
        (
            "anywhere.eks.amazonaws.com",
            vec!["awsiamconfigs"],
            Writers::Workloads,
            "a workload cluster's AWS IAM authenticator (AWSIamConfig; refused on a management cluster)",
        ),
        (
            "anywhere.eks.amazonaws.com",
            vec!["eksareleases"],
            Writers::Management,
            "the EKS Anywhere releases a management cluster's fleet uses",
        ),
        (
            "addons.cluster.x-k8s.io",
            vec!["clusterresourcesets"],
            Writers::Both,
            "vSphere clusters: the cloud-provider interface is installed through a ClusterResourceSet, as EKS Anywhere does; and resource sets a directory carries",
        ),
        (
            "",
            vec!["configmaps", "secrets"],
            Writers::Both,
            "vSphere clusters: the ClusterResourceSet's payloads (the CPI manifests, and its ServiceAccount as EKS Anywhere renders it, a Secret of type addons.cluster.x-k8s.io/resource-set); ConfigMaps and data-less Secrets a directory carries",
        ),
    ];
    for (group, plurals) in others {
        kinds.push((
            group,
            plurals,
            Writers::Both,
            "the other kinds a provider renders: vSphere's failure domains (a VSphereFailureDomain and a VSphereDeploymentZone per failure domain of a datacenter config, cluster-scoped, named for their cluster)",
        ));
    }
    kinds
}

/// The rules, in the order they are written.
pub fn rules() -> Vec<Rule> {
    use crate::k8s::identity::{MANAGEMENT_USER, WORKLOAD_USER};
    use Holder::{Cluster, Management, System, Workload};
    let rendered = rendered();
    let mut rules = Vec::new();
    for (group, resources, _, why) in &rendered {
        rules.push(Rule::new(
            Cluster,
            group,
            resources,
            READ,
            &format!("reading (watches, a live object to compare): {why}"),
        ));
    }
    for (group, resources, writers, why) in &rendered {
        if *writers != Writers::Management {
            rules.push(Rule::new(Workload, group, resources, WRITE, why));
        }
    }
    for (group, resources, writers, why) in &rendered {
        if *writers != Writers::Workloads {
            rules.push(Rule::new(Management, group, resources, WRITE, why));
        }
    }
    rules.extend([
        Rule::new(
            Cluster,
            "",
            &["users"],
            &["impersonate"],
            "every fleet write is made as the identity of its cluster's directory, which the tenancy policy confines",
        )
        .named(&[WORKLOAD_USER, MANAGEMENT_USER]),
        Rule::new(
            Cluster,
            "authentication.k8s.io",
            &[&format!("userextras/{}", crate::k8s::identity::CLUSTER_EXTRA)],
            &["impersonate"],
            "the identity names the cluster it writes for, which the tenancy policy reads",
        ),
        Rule::new(
            Cluster,
            "authentication.k8s.io",
            &[&format!("userextras/{}", crate::k8s::identity::OWNS_EXTRA)],
            &["impersonate"],
            "drift: an object of a cluster's record whose cluster label someone changed is put back, the agent vouching for it by UID",
        ),
        Rule::new(
            Cluster,
            "cluster.x-k8s.io",
            &["machinesets"],
            &["list", "watch"],
            "health: a MachineDeployment's rollout is read from its MachineSets",
        ),
        Rule::new(
            Cluster,
            "tinkerbell.org",
            &["hardware"],
            &["list", "watch"],
            "bare metal: a rolling upgrade starts only when the inventory has the spare Hardware its surge needs (metadata: labels and owner)",
        ),
        Rule::new(
            Cluster,
            "cluster.x-k8s.io",
            &["machines"],
            &["list", "watch"],
            "the dashboard (--dashboard-addr) watches Machines for its cluster pages (and the backup before a management cluster's upgrade of itself lists them)",
        ),
        Rule::new(
            Cluster,
            "authentication.k8s.io",
            &["tokenreviews"],
            &["create"],
            "the dashboard (--dashboard-addr): whose bearer token a request carries",
        ),
        Rule::new(
            Cluster,
            "authorization.k8s.io",
            &["subjectaccessreviews"],
            &["create"],
            "the dashboard (--dashboard-addr): whether a request's user may list ManagedClusters",
        ),
        Rule::new(
            Cluster,
            "",
            &["namespaces"],
            &["list", "create", "patch"],
            "the namespaces the clusters' objects live in are created when missing (never deleted)",
        ),
        Rule::new(
            Cluster,
            "apiextensions.k8s.io",
            &["customresourcedefinitions"],
            &["get"],
            "checking at start that the ManagedCluster CRD is installed at this agent's version",
        )
        .named(&[crate::status::CRD_NAME]),
        Rule::new(
            System,
            "capstan.dev",
            &["managedclusters"],
            &["get", "list", "watch", "create", "patch", "delete"],
            "status objects: read at start and watched, created for a new cluster, read again when a status write's precondition failed, removed after its deletion",
        ),
        Rule::new(
            System,
            "capstan.dev",
            &["managedclusters/status"],
            &["patch"],
            "writing each cluster's status",
        ),
        Rule::new(
            System,
            "events.k8s.io",
            &["events"],
            &["create"],
            "an Event per pass that changed something, on the cluster's ManagedCluster",
        ),
        Rule::new(
            System,
            "",
            &["configmaps"],
            &["get", "patch"],
            "--verify-commits: the last verified commit, which the next head must descend from, kept where a replaced pod and the other replica read it",
        )
        .named(&[crate::source::POSITION_CONFIGMAP]),
        Rule::new(
            System,
            "",
            &["configmaps"],
            &["create"],
            "--verify-commits: the ConfigMap of the last verified commit, created on first use (a create cannot be limited by name)",
        ),
        Rule::new(
            System,
            "coordination.k8s.io",
            &["leases"],
            &["get", "list", "watch", "create", "patch"],
            "leader election: only the holder of the Lease reconciles; followers forward pushes through it, the leader watches it",
        ),
    ]);
    rules.extend(self_upgrade_rules());
    rules
}

/// What a management cluster's upgrade of itself needs besides the rules above: listing every
/// kind the backup holds that the rules above do not already let it list — every kind of Cluster
/// API's groups and EKS Anywhere's, as `clusterctl move` moves them all (a restore without, say,
/// a cluster's IPAddressClaims, ClusterResourceSetBindings or its release's Bundles is not the fleet it was),
/// one rule per group; the clusters' Secrets, certificates and kubeconfigs a restore cannot do
/// without are readable through the rule for vSphere's payloads. Then reading kube-vip's Lease
/// and marking the control-plane machines that do not hold its address for deletion first.
/// Read-only but for that mark. The backup skips (and names) a kind it may not list: a provider
/// installed besides those EKS Anywhere ships has kinds these rules do not name.
fn self_upgrade_rules() -> Vec<Rule> {
    use Holder::Cluster;
    let backup =
        "the backup a management cluster writes before upgrading its own etcd or control plane";
    let list = |group: &str, resources: &[&str]| {
        Rule::new(Cluster, group, resources, &["list"], backup).for_self_upgrade()
    };
    vec![
        list(
            "cluster.x-k8s.io",
            &["machinepools", "clusterclasses", "machinedrainrules"],
        ),
        list(
            "bootstrap.cluster.x-k8s.io",
            &["kubeadmconfigs", "etcdadmconfigs"],
        ),
        list(
            "controlplane.cluster.x-k8s.io",
            &["kubeadmcontrolplanetemplates"],
        ),
        list(
            "infrastructure.cluster.x-k8s.io",
            &[
                "dockermachines",
                "dockerclustertemplates",
                "dockermachinepools",
                "dockermachinepooltemplates",
                "devmachines",
                "devclustertemplates",
                "devmachinepools",
                "devmachinepooltemplates",
                "vspheremachines",
                "vspherevms",
                "vsphereclustertemplates",
                "vsphereclusteridentities",
                "nutanixmachines",
                "tinkerbellmachines",
            ],
        ),
        list(
            "addons.cluster.x-k8s.io",
            &["helmreleaseproxies", "clusterresourcesetbindings"],
        ),
        list("ipam.cluster.x-k8s.io", &["ipaddressclaims", "ipaddresses"]),
        list("runtime.cluster.x-k8s.io", &["extensionconfigs"]),
        list(
            "anywhere.eks.amazonaws.com",
            &[
                "bundles",
                "releases",
                "machinedeploymentupgrades",
                "nodeupgrades",
                "controlplaneupgrades",
                "gitopsconfigs",
                "fluxconfigs",
                "awsdatacenterconfigs",
                "cloudstackdatacenterconfigs",
                "cloudstackmachineconfigs",
                "snowdatacenterconfigs",
                "snowippools",
                "snowmachineconfigs",
            ],
        ),
        list("capstan.dev", &["managedclusters"]),
        Rule {
            resource_names: vec![crate::reconcile::self_upgrade::KUBE_VIP_LEASE.1.into()],
            ..Rule::new(
                Cluster,
                "coordination.k8s.io",
                &["leases"],
                &["get"],
                "a management cluster's upgrade of itself rolls the machine holding kube-vip's Lease last",
            )
            .for_self_upgrade()
        },
        Rule::new(
            Cluster,
            "cluster.x-k8s.io",
            &["machines"],
            &["patch"],
            "a management cluster's upgrade of itself marks the control-plane machines not holding kube-vip's address for deletion first",
        )
        .for_self_upgrade(),
    ]
}

/// The agent's Role in the ClusterProfiles' namespace (`--cluster-profiles`,
/// [`crate::reconcile::profile`]): nothing outside that namespace.
pub fn profile_rules() -> Vec<Rule> {
    vec![
        Rule::new(
            Holder::System,
            "multicluster.x-k8s.io",
            &["clusterprofiles"],
            &["get", "create", "patch", "delete"],
            "every workload cluster's ClusterProfile: applied (patch, create), read before its deletion to check it is capstan's (get), deleted with the cluster",
        ),
        Rule::new(
            Holder::System,
            "multicluster.x-k8s.io",
            &["clusterprofiles/status"],
            &["patch"],
            "the ClusterProfile's status: conditions, version, access provider",
        ),
    ]
}

/// The agent's Role in the trusted keys' namespace (`--verify-commits`): `get` on that one
/// Secret, by name (no list, no watch, no other Secret).
pub fn trusted_keys_rules(secret: &str) -> Vec<Rule> {
    vec![
        Rule::new(
            Holder::System,
            "",
            &["secrets"],
            &["get"],
            "the keys commits are verified with, read again before every sync",
        )
        .named(&[secret]),
    ]
}

/// The rule that lets the agent read the age recipients its backups are encrypted to: `get` of
/// exactly that Secret (public keys only; the agent holds no identity).
pub fn backup_recipients_rules(secret: &str) -> Vec<Rule> {
    vec![
        Rule::new(
            Holder::System,
            "",
            &["secrets"],
            &["get"],
            "the age recipients backups are encrypted to, read again before every backup",
        )
        .named(&[secret]),
    ]
}

/// The rules for a kind management directories carry besides what capstan renders: `RESOURCE`
/// (core group) or `RESOURCE.GROUP`, e.g. `configmaps` or `widgets.example.com`: the agent
/// reads it, the management identity writes it. (Workload directories never get more kinds than
/// [`capstan_layout::tenancy::WORKLOAD_ALLOWED`].)
pub fn allow(resource: &str) -> Result<Vec<Rule>, String> {
    let (resource, group) = resource.split_once('.').unwrap_or((resource, ""));
    let valid = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    };
    if !valid(resource) || (!group.is_empty() && !valid(group)) || resource.contains('*') {
        return Err(format!(
            "`{resource}` is not a resource such as `configmaps` or `widgets.example.com` (plural, lower case, no wildcards)"
        ));
    }
    let why = "named with `capstan install --allow`: a kind the management directories carry";
    Ok(vec![
        Rule::new(Holder::Cluster, group, &[resource], READ, why),
        Rule::new(Holder::Management, group, &[resource], WRITE, why),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_wildcards_and_every_rule_says_why() {
        for r in rules() {
            assert!(!r.why.is_empty());
            for s in r.resources.iter().chain(&r.verbs).chain([&r.group]) {
                assert!(!s.contains('*'), "{r:?}");
            }
        }
        // No verb on a resource granted twice (to the same holder).
        let mut seen = std::collections::BTreeSet::new();
        for r in rules() {
            for res in &r.resources {
                for v in &r.verbs {
                    let key = (
                        format!("{:?}", r.holder),
                        r.group.clone(),
                        res.clone(),
                        v.clone(),
                    );
                    assert!(seen.insert(key), "{v} {res}.{} granted twice", r.group);
                }
            }
        }
        assert!(allow("*").is_err());
        assert!(allow("configmaps").unwrap()[0].group.is_empty());
        let w = allow("widgets.crd.example.com").unwrap();
        assert_eq!(
            (w[1].holder, w[1].group.as_str(), w[1].resources[0].as_str()),
            (Holder::Management, "crd.example.com", "widgets")
        );
        // Every rendered kind: read by the agent, written by the identities of the directories
        // that render it.
        for (group, resources, writers, _) in rendered() {
            for res in resources {
                let holds = |holder: Holder, verbs: &[&str]| {
                    rules().iter().any(|r| {
                        r.holder == holder
                            && r.group == group
                            && r.resources.iter().any(|x| x == res)
                            && r.verbs == verbs
                    })
                };
                assert!(holds(Holder::Cluster, READ), "{res}");
                assert_eq!(
                    holds(Holder::Management, WRITE),
                    writers != Writers::Workloads,
                    "{res}"
                );
                assert_eq!(
                    holds(Holder::Workload, WRITE),
                    writers != Writers::Management,
                    "{res}"
                );
            }
        }
    }

    #[test]
    fn the_agent_may_read_the_secrets_it_is_pointed_at() {
        // The notifications Secret (the fleet config's spec.notifications.secretRef) and
        // --trusted-keys-secret are read with `get` by the agent's own ServiceAccount: its
        // ClusterRole's read of the Secrets capstan renders covers them, so no rule of its own
        // (and no write) is added for either.
        assert!(rules().iter().any(|r| r.holder == Holder::Cluster
            && r.group.is_empty()
            && r.resources.iter().any(|x| x == "secrets")
            && r.verbs.iter().any(|v| v == "get")));
    }
}
