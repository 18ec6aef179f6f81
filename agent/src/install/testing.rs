//! For tests that run the agent against the harness's control plane: capstan installed as
//! `capstan install` installs it (the CRD, the ServiceAccount and its RBAC; no Deployment, the
//! tests run the agent themselves), and credentials of the agent's ServiceAccount from the
//! TokenRequest API.
//!
//! Two accounts, so that what an agent test proves holds for production:
//! - the agent's own ([`agent_kubeconfig`], [`agent_client`], [`agent_credential`]): bound to
//!   exactly [`rbac::rules`], the rules `capstan install` writes without `--allow`;
//! - [`ALLOWING_ACCOUNT`] ([`allowing_agent_client`]): those rules plus one per [`TEST_ALLOW`]
//!   kind, as `capstan install --allow` adds them, for the tests whose fleets carry such kinds
//!   as extra manifests. No other test uses it.

use std::path::PathBuf;

use capstan_harness::ControlPlane;
use kube::Client;
use serde_json::Value;

use super::{manifests, rbac};
use crate::status::NAMESPACE;

/// Kinds some test fleets' directories carry besides what capstan renders (extra manifests:
/// a CRD, an object of its kind, the Namespace it lives in; the Hardware and Rufio BMC machines
/// `capstan hardware import` writes), which production grants only when a platform team names
/// them with `capstan install --allow`.
pub const TEST_ALLOW: &[&str] = &[
    "namespaces",
    "customresourcedefinitions.apiextensions.k8s.io",
    "widgets.crd.example.com",
    "hardware.tinkerbell.org",
    "machines.bmc.tinkerbell.org",
];

/// The ServiceAccount (and ClusterRole, Role, bindings) with [`TEST_ALLOW`] on top of the
/// agent's rules.
pub const ALLOWING_ACCOUNT: &str = "capstan-test-allow";

/// Per control plane (by server URL) and account: the kubeconfig, once installed.
static INSTALLED: tokio::sync::Mutex<Vec<(String, &'static str, PathBuf)>> =
    tokio::sync::Mutex::const_new(Vec::new());

/// Applies `objects` (with the account's RBAC for `rules`) as `capstan install` does, once per
/// control plane and `account`, and waits until the authorizer grants what the rules grant; a
/// kubeconfig authenticated as that ServiceAccount.
async fn installed(
    cp: &ControlPlane,
    account: &'static str,
    mut objects: Vec<Value>,
    rules: &[rbac::Rule],
) -> PathBuf {
    let mut installed = INSTALLED.lock().await;
    if let Some((_, _, path)) = installed
        .iter()
        .find(|(url, a, _)| url == cp.server_url() && *a == account)
    {
        return path.clone();
    }
    let client = cp.client();
    objects.extend(manifests::rbac_named(account, rules));
    super::apply(&client, &objects, std::time::Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("installing capstan ({account}) for the tests: {e}"));
    granted(&client, account, rules).await;
    granted(&client, account, &identity_rules()).await;
    super::tenancy::wait_enforced(&client, std::time::Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("installing capstan ({account}) for the tests: {e}"));
    let path = cp
        .service_account_kubeconfig(NAMESPACE, account)
        .await
        .unwrap_or_else(|e| panic!("a token for ServiceAccount {account}: {e}"));
    installed.push((cp.server_url().to_string(), account, path.clone()));
    path
}

/// Installs capstan's CRD and the agent's ServiceAccount with exactly `capstan install`'s rules
/// on `cp`, once per control plane; the path of a kubeconfig authenticated as that
/// ServiceAccount.
pub async fn agent_kubeconfig(cp: &ControlPlane) -> PathBuf {
    let mut objects = vec![manifests::namespace(), manifests::crd()];
    // The fleet identities may write the kinds of TEST_ALLOW too (as `--allow` grants the
    // management identity): whether an agent may is decided by its own right to read them.
    objects.extend(manifests::tenancy(&identity_rules()));
    installed(cp, manifests::NAME, objects, &rbac::rules()).await
}

/// The rules of the fleet identities in the test bed: capstan's, and the management
/// identity's write of every [`TEST_ALLOW`] kind.
pub fn identity_rules() -> Vec<rbac::Rule> {
    rbac::rules()
        .into_iter()
        .chain(
            TEST_ALLOW
                .iter()
                .flat_map(|r| rbac::allow(r).expect("a resource")),
        )
        .filter(|r| matches!(r.holder, rbac::Holder::Workload | rbac::Holder::Management))
        .collect()
}

/// A kubeconfig for the agent's ServiceAccount (installed as [`agent_kubeconfig`] does) with a
/// token of its own, and that token's credential id as the audit log records it: for a test that
/// counts the requests of its own agent while other tests' agents share the API server.
pub async fn agent_credential(cp: &ControlPlane, tag: &str) -> (PathBuf, String) {
    agent_kubeconfig(cp).await;
    cp.service_account_credential(NAMESPACE, manifests::NAME, tag)
        .await
        .unwrap_or_else(|e| panic!("a token for the agent's ServiceAccount: {e}"))
}

/// A client authenticated as the agent's ServiceAccount (see [`agent_kubeconfig`]), for the
/// calling runtime.
pub async fn agent_client(cp: &ControlPlane) -> Client {
    client_of(&agent_kubeconfig(cp).await).await
}

/// A client authenticated as [`ALLOWING_ACCOUNT`]: the agent's rules plus [`TEST_ALLOW`], as
/// `capstan install --allow` would grant them. Only for tests whose fleets carry those kinds.
pub async fn allowing_agent_client(cp: &ControlPlane) -> Client {
    agent_kubeconfig(cp).await;
    let mut rules = rbac::rules();
    rules.extend(
        TEST_ALLOW
            .iter()
            .flat_map(|r| rbac::allow(r).expect("a resource"))
            .filter(|r| r.holder == rbac::Holder::Cluster),
    );
    client_of(&installed(cp, ALLOWING_ACCOUNT, Vec::new(), &rules).await).await
}

/// Waits until the API server's authorizer (which learns of new bindings from its informers)
/// grants every rule's first verb on its first resource: to `account` (a ServiceAccount in
/// `capstan-system`) the agent's rules, to the fleet identities theirs.
pub async fn granted(admin: &Client, account: &str, rules: &[rbac::Rule]) {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let reviews: kube::Api<SubjectAccessReview> = kube::Api::all(admin.clone());
    for r in rules {
        let (resource, subresource) = match r.resources[0].split_once('/') {
            Some((a, b)) => (a.to_string(), Some(b.to_string())),
            None => (r.resources[0].clone(), None),
        };
        let (user, groups) = match r.holder {
            rbac::Holder::Cluster | rbac::Holder::System => (
                format!("system:serviceaccount:{NAMESPACE}:{account}"),
                vec![
                    "system:serviceaccounts".to_string(),
                    "system:authenticated".into(),
                ],
            ),
            rbac::Holder::Workload => (
                crate::k8s::identity::WORKLOAD_USER.to_string(),
                vec!["system:authenticated".to_string()],
            ),
            rbac::Holder::Management => (
                crate::k8s::identity::MANAGEMENT_USER.to_string(),
                vec!["system:authenticated".to_string()],
            ),
        };
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user),
                groups: Some(groups),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(r.group.clone()),
                    resource: Some(resource),
                    subresource,
                    verb: Some(r.verbs[0].clone()),
                    namespace: (r.holder == rbac::Holder::System).then(|| NAMESPACE.to_string()),
                    name: r.resource_names.first().cloned(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let start = std::time::Instant::now();
        loop {
            let answer = crate::write::review(&reviews, &review)
                .await
                .unwrap_or_else(|e| panic!("SubjectAccessReview for {account}: {e}"));
            if answer.status.is_some_and(|s| s.allowed) {
                break;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(30),
                "{account} never granted {r:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    }
}

async fn client_of(path: &std::path::Path) -> Client {
    crate::k8s::connect(Some(path), None)
        .await
        .unwrap_or_else(|e| panic!("client for {}: {e}", path.display()))
        .client
}
