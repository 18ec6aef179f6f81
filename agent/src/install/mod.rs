//! `capstan install` and `capstan uninstall`: the agent as a production workload on its
//! management cluster ([`manifests`]: Namespace, CRD, ServiceAccount, least-privilege RBAC
//! ([`rbac`]), Service, Deployment), applied with server-side apply as field manager
//! [`FIELD_MANAGER`], so re-running is idempotent and a changed flag updates what it changes.
//!
//! Before anything is written, the cluster is checked for the Cluster API and EKS Anywhere CRDs
//! capstan renders objects of ([`REQUIRED_CRDS`]): installing an agent that can only fail is
//! refused with the list of what is missing. `uninstall` removes the agent and its rights but
//! leaves every managed cluster, and (unless `--purge`) the status records, which hold the
//! inventories prune works from.

mod health;
pub mod manifests;
pub mod rbac;
pub use capstan_client::k8s::tenancy;
#[cfg(feature = "dev")]
pub mod testing;

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;

use crate::k8s::apply::apply_as;
use crate::k8s::{DiscoveryError, Resolver};
use crate::status::{CRD_NAME, NAMESPACE};

pub use health::health;
pub use manifests::Options;

/// The field manager of `capstan install`.
pub const FIELD_MANAGER: &str = "capstan-install";

/// CRDs capstan renders objects of whatever the provider (every cluster's Cilium goes through
/// Cluster API's Helm add-on provider), and MachineSets, which health reads: without them every
/// cluster fails. (A unit test checks the list against what every rendered cluster carries.)
pub const REQUIRED_CRDS: &[&str] = &[
    "clusters.cluster.x-k8s.io",
    "machinedeployments.cluster.x-k8s.io",
    "machinehealthchecks.cluster.x-k8s.io",
    "machinesets.cluster.x-k8s.io",
    "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
    "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
    "helmchartproxies.addons.cluster.x-k8s.io",
    "clusters.anywhere.eks.amazonaws.com",
];

/// Why installing failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The cluster lacks CRDs capstan needs.
    #[error(
        "the cluster lacks the CRDs of Cluster API and EKS Anywhere that capstan applies objects of: {}; install Cluster API (core, kubeadm bootstrap and control plane, the Helm add-on provider) and the EKS Anywhere CRDs first",
        .0.join(", ")
    )]
    MissingCrds(Vec<String>),
    /// An API call failed.
    #[error("{0}: {1}")]
    Api(String, #[source] kube::Error),
    /// An object was not admitted.
    #[error(transparent)]
    Apply(#[from] crate::k8s::ApplyError),
    /// Discovery failed.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// The tenancy policy is not enforced.
    #[error("{0}")]
    Tenancy(String),
}

/// The CRDs of [`REQUIRED_CRDS`] the cluster does not have.
pub async fn missing_crds(client: &Client) -> Result<Vec<String>, InstallError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let have: Vec<String> = crds
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| InstallError::Api("listing CustomResourceDefinitions".into(), e))?
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    Ok(REQUIRED_CRDS
        .iter()
        .filter(|c| !have.iter().any(|h| h == *c))
        .map(|c| c.to_string())
        .collect())
}

/// What an install wrote.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// `Kind/name` of every object applied, in order.
    pub applied: Vec<String>,
}

/// Applies `objects` in order as [`FIELD_MANAGER`], waiting for the CRD to be Established and
/// served once it is applied.
pub async fn apply(
    client: &Client,
    objects: &[Value],
    wait: Duration,
) -> Result<Report, InstallError> {
    apply_by(client, objects, FIELD_MANAGER, wait).await
}

/// [`apply`] as field manager `manager`.
pub async fn apply_by(
    client: &Client,
    objects: &[Value],
    manager: &str,
    wait: Duration,
) -> Result<Report, InstallError> {
    let resolver = Resolver::new(client.clone()).await?;
    let mut report = Report::default();
    for obj in objects {
        apply_as(client, &resolver, obj, manager, false).await?;
        report
            .applied
            .push(capstan_templates::identity::subject_of(obj));
        if obj["kind"] == "CustomResourceDefinition" {
            let name = obj["metadata"]["name"].as_str().unwrap_or(CRD_NAME);
            crate::k8s::wait_served(client, &[name.to_string()], wait).await?;
        }
    }
    Ok(report)
}

/// `capstan install`: checks for the Cluster API CRDs, then applies everything.
pub async fn install(client: &Client, o: &Options, wait: Duration) -> Result<Report, InstallError> {
    let missing = missing_crds(client).await?;
    if !missing.is_empty() {
        return Err(InstallError::MissingCrds(missing));
    }
    let report = apply(client, &manifests::all(o), wait).await?;
    tenancy::wait_enforced(client, wait)
        .await
        .map_err(InstallError::Tenancy)?;
    Ok(report)
}

/// Only the Namespace and the CRD: what an agent run with an admin's kubeconfig (`capstan dev`,
/// tests of the agent as a library) needs.
pub async fn install_crd(client: &Client) -> Result<Report, InstallError> {
    apply(
        client,
        &[manifests::namespace(), manifests::crd()],
        Duration::from_secs(30),
    )
    .await
}

/// The tenancy policy and the fleet identities' roles (with `rules`' [`rbac::Holder::Workload`]
/// and [`rbac::Holder::Management`] rules): what an agent needs to write anything, whoever runs
/// it. Returns once the API server enforces the policy ([`tenancy::enforced`]).
pub async fn install_tenancy(
    client: &Client,
    rules: &[rbac::Rule],
    wait: Duration,
) -> Result<Report, InstallError> {
    let report = apply(client, &manifests::tenancy(rules), wait).await?;
    tenancy::wait_enforced(client, wait)
        .await
        .map_err(InstallError::Tenancy)?;
    Ok(report)
}

/// `capstan uninstall`: the Deployment, Service, RBAC (the fleet identities' and the tenancy
/// policy too), ServiceAccount and Lease go; managed
/// clusters are not touched, nor the backup volume. With `purge`, the status records (the CRD)
/// and the namespace (the backup volume with it) go too. Returns `Kind/name` of what was deleted.
pub async fn uninstall(client: &Client, purge: bool) -> Result<Vec<String>, InstallError> {
    let resolver = Resolver::new(client.clone()).await?;
    let mut targets: Vec<(&str, &str, &str, bool)> = vec![
        ("apps/v1", "Deployment", manifests::NAME, true),
        ("v1", "Service", manifests::NAME, true),
        ("coordination.k8s.io/v1", "Lease", manifests::LEASE, true),
        (
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            manifests::NAME,
            true,
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "Role",
            manifests::NAME,
            true,
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            manifests::NAME,
            false,
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            manifests::NAME,
            false,
        ),
        ("v1", "ServiceAccount", manifests::NAME, true),
        // The Role reading the backups' recipients' Secret, where install puts it by default.
        (
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            manifests::BACKUP_RECIPIENTS_ROLE,
            true,
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "Role",
            manifests::BACKUP_RECIPIENTS_ROLE,
            true,
        ),
    ];
    // The fleet identities' rights go with the agent (the policy that confines them last).
    for role in manifests::IDENTITY_ROLES {
        targets.push((
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            role,
            false,
        ));
        targets.push(("rbac.authorization.k8s.io/v1", "ClusterRole", role, false));
    }
    let policy = crate::k8s::identity::POLICY;
    targets.push((
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
        policy,
        false,
    ));
    targets.push((
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
        policy,
        false,
    ));
    if purge {
        targets.push((
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            CRD_NAME,
            false,
        ));
        targets.push(("v1", "Namespace", NAMESPACE, false));
    }
    let mut deleted = Vec::new();
    for (api_version, kind, name, namespaced) in targets {
        let (ar, _) = resolver.resolve(api_version, kind).await?;
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(client.clone(), NAMESPACE, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        };
        match crate::write::delete(&api, name, &crate::write::Delete::any().background()).await {
            Ok(crate::write::Deleted::Absent) => {}
            Ok(_) => deleted.push(format!("{kind}/{name}")),
            Err(e) => return Err(InstallError::Api(format!("deleting {kind}/{name}"), e)),
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_layout::scaffold::{self, ClusterRequest};

    /// `(group, resource)` of every kind each cluster renders, for every provider and option
    /// (a management cluster, external etcd, CAPD's in-memory backend, vSphere).
    fn rendered_kinds() -> Vec<std::collections::BTreeSet<(String, String)>> {
        let base = |name: &str, mgmt: Option<&str>, provider: &str| ClusterRequest {
            name: name.into(),
            management: mgmt.map(str::to_string),
            provider: provider.into(),
            pod_cidr: Some("192.168.0.0/16".into()),
            service_cidr: Some("10.96.0.0/12".into()),
            endpoint_host: (provider == "vsphere").then(|| "10.0.0.10".into()),
            ..Default::default()
        };
        let mut tree = capstan_layout::Tree::new();
        let mut reqs = vec![
            base("mgmt", None, "docker"),
            ClusterRequest {
                external_etcd: Some(3),
                pod_cidr: Some("172.16.0.0/16".into()),
                service_cidr: Some("10.112.0.0/16".into()),
                ..base("etcd", Some("mgmt"), "docker")
            },
            ClusterRequest {
                docker_backend: Some("in-memory".into()),
                pod_cidr: Some("172.17.0.0/16".into()),
                service_cidr: Some("10.113.0.0/16".into()),
                ..base("mem", Some("mgmt"), "docker")
            },
        ];
        reqs.push(ClusterRequest { pod_cidr: Some("172.18.0.0/16".into()), service_cidr: Some("10.114.0.0/16".into()), values: Some(serde_json::json!({"vsphere": {"server": "vc", "datacenter": "dc", "network": "net", "datastore": "ds", "resourcePool": "rp", "template": "t"}})), ..base("vs", Some("mgmt"), "vsphere") });
        for req in reqs {
            match scaffold::plan(&tree, &req) {
                Ok(plan) => {
                    for (p, t) in plan.files {
                        tree.insert(p, t);
                    }
                }
                Err(e) => panic!("{}: {e}", req.name),
            }
        }
        let fleet = capstan_layout::load(&tree);
        fleet
            .clusters
            .iter()
            .map(|c| {
                let objects = c
                    .objects
                    .as_ref()
                    .unwrap_or_else(|| panic!("{} renders: {:?}", c.name, c.diagnostics));
                objects
                    .values()
                    .iter()
                    .map(|o| {
                        let group =
                            capstan_templates::identity::group(o["apiVersion"].as_str().unwrap())
                                .to_string();
                        let kind = o["kind"].as_str().unwrap().to_lowercase();
                        let resource = match kind.strip_suffix('y') {
                            Some(stem) => format!("{stem}ies"),
                            None => format!("{kind}s"),
                        };
                        (group, resource)
                    })
                    .collect()
            })
            .collect()
    }

    /// Every kind the renderer produces, for every provider and option, is covered by a rule.
    #[test]
    fn the_rules_cover_every_rendered_kind() {
        let rules = rbac::rules();
        let kinds: std::collections::BTreeSet<_> = rendered_kinds().into_iter().flatten().collect();
        assert!(kinds.len() >= 15, "{kinds:?}");
        for (group, resource) in &kinds {
            for (holder, verbs) in [
                (rbac::Holder::Cluster, rbac::READ),
                (rbac::Holder::Management, rbac::WRITE),
            ] {
                let rule = rules.iter().find(|r| {
                    r.holder == holder && &r.group == group && r.resources.contains(resource)
                });
                let rule = rule.unwrap_or_else(|| {
                    panic!("no {holder:?} rule for {resource}.{group} (rendered: {kinds:?})")
                });
                assert_eq!(rule.verbs, verbs, "{resource}.{group}");
            }
        }
    }

    /// The install preflight asks for the CRD of every kind that every cluster renders, whatever
    /// its provider (the provider's own kinds are checked when a cluster of it is applied).
    #[test]
    fn the_preflight_requires_what_every_cluster_renders() {
        let per_cluster = rendered_kinds();
        assert!(per_cluster.len() >= 4);
        let mut common = per_cluster[0].clone();
        for kinds in &per_cluster[1..] {
            common.retain(|k| kinds.contains(k));
        }
        let common: Vec<String> = common
            .into_iter()
            .filter(|(group, _)| group.contains('.'))
            .map(|(group, resource)| format!("{resource}.{group}"))
            .collect();
        assert!(
            common.contains(&"helmchartproxies.addons.cluster.x-k8s.io".to_string()),
            "{common:?}"
        );
        for crd in &common {
            assert!(
                REQUIRED_CRDS.contains(&crd.as_str()),
                "{crd} is not checked"
            );
        }
    }

    #[test]
    fn the_deployment_is_locked_down() {
        let o = Options::new("ssh://git@example.com/fleet.git", "main", "mgmt");
        let d = manifests::deployment(&o);
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(d["spec"]["replicas"], 2);
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(
            d["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"],
            true
        );
        // Sized for fleets of up to 3,000 clusters: 161 MiB peak RSS measured there.
        assert_eq!(c["resources"]["limits"]["memory"], "512Mi");
        assert_eq!(c["resources"]["requests"]["memory"], "256Mi");
        let args: Vec<&str> = c["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(args.contains(&"--leader-elect"), "{args:?}");
        assert!(
            args.contains(&"/var/run/secrets/capstan.dev/git/identity"),
            "{args:?}"
        );
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
        // Backups go to the persistent volume, which the replicas share.
        assert!(
            args.windows(2)
                .any(|w| w == ["--backup-dir", manifests::BACKUP_MOUNT]),
            "{args:?}"
        );
        let pod = &d["spec"]["template"]["spec"];
        assert!(
            pod["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["persistentVolumeClaim"]["claimName"] == manifests::BACKUP_CLAIM),
            "{pod:#}"
        );
        // ReadWriteOnce (the default): attached to one node, so the replicas share it;
        // ReadWriteMany: they spread.
        let term =
            &pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
        assert_eq!(term["topologyKey"], "kubernetes.io/hostname", "{pod:#}");
        let mut many = o.clone();
        many.backup_access_mode = "ReadWriteMany".into();
        let spread = manifests::deployment(&many);
        assert!(
            spread["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"].is_object(),
            "{spread:#}"
        );
        let all = manifests::all(&o);
        let at = |kind: &str| all.iter().position(|v| v["kind"] == kind).unwrap();
        assert!(at("PersistentVolumeClaim") < at("Deployment"));
        assert_eq!(
            all[at("PersistentVolumeClaim")]["spec"]["accessModes"],
            serde_json::json!(["ReadWriteOnce"])
        );
        // An https repository does not need the Git Secret.
        let https = manifests::deployment(&Options::new(
            "https://example.com/fleet.git",
            "main",
            "mgmt",
        ));
        assert_eq!(
            https["spec"]["template"]["spec"]["volumes"][1]["secret"]["optional"],
            true
        );
    }

    #[test]
    fn the_dashboard_is_off_unless_asked_for_and_then_served_on_the_service() {
        let mut o = Options::new("https://example.com/fleet.git", "main", "mgmt");
        let served = |o: &Options| {
            let d = manifests::deployment(o);
            let c = &d["spec"]["template"]["spec"]["containers"][0];
            let args: Vec<String> = c["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect();
            let ports = |v: &serde_json::Value| -> Vec<String> {
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p["name"].as_str().unwrap().to_string())
                    .collect()
            };
            (
                args.windows(2)
                    .find(|w| w[0] == "--dashboard-addr")
                    .map(|w| w[1].clone()),
                ports(&c["ports"]),
                ports(&manifests::service(o)["spec"]["ports"]),
            )
        };
        let (addr, container, service) = served(&o);
        assert_eq!(addr, None);
        assert!(!container.contains(&"dashboard".to_string()));
        assert!(!service.contains(&"dashboard".to_string()));
        o.dashboard = true;
        let (addr, container, service) = served(&o);
        assert_eq!(addr.as_deref(), Some("0.0.0.0:8480"));
        assert!(
            container.contains(&"dashboard".to_string()),
            "{container:?}"
        );
        assert!(service.contains(&"dashboard".to_string()), "{service:?}");
        // The RBAC the dashboard needs is installed either way (reviews, machines).
        let rules = serde_json::to_string(&manifests::all(&o)).unwrap();
        assert!(rules.contains("tokenreviews") && rules.contains("subjectaccessreviews"));
    }
}
