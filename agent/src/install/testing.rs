//! For tests that run the agent against the harness's control plane: capstan installed as
//! `capstan install` installs it (the CRD, the ServiceAccount and its RBAC; no Deployment, the
//! tests run the agent themselves), and credentials of the agent's ServiceAccount from the
//! TokenRequest API, so every agent test runs with exactly the rights production has.
//!
//! One place for every test binary: `agent_kubeconfig` for tests that start the `capstan`
//! binary, `agent_client` for tests that call the library.

use std::path::PathBuf;

use capstan_harness::ControlPlane;
use kube::Client;

use super::{manifests, rbac};
use crate::status::NAMESPACE;

/// Kinds the test fleets' directories carry besides what capstan renders (extra manifests):
/// what a platform team names with `capstan install --allow`.
pub const TEST_ALLOW: &[&str] = &[
    "configmaps",
    "namespaces",
    "customresourcedefinitions.apiextensions.k8s.io",
    "widgets.crd.example.com",
];

/// Per control plane (by server URL): the agent's kubeconfig, once installed.
static INSTALLED: tokio::sync::Mutex<Vec<(String, PathBuf)>> =
    tokio::sync::Mutex::const_new(Vec::new());

/// Installs capstan's CRD and the agent's ServiceAccount with its rules (and [`TEST_ALLOW`]) on
/// `cp`, once per control plane; the path of a kubeconfig authenticated as that ServiceAccount.
pub async fn agent_kubeconfig(cp: &ControlPlane) -> PathBuf {
    let mut installed = INSTALLED.lock().await;
    if let Some((_, path)) = installed.iter().find(|(url, _)| url == cp.server_url()) {
        return path.clone();
    }
    let path = {
        let client = cp.client();
        let mut rules = rbac::rules();
        rules.extend(
            TEST_ALLOW
                .iter()
                .map(|r| rbac::allow(r).expect("a resource")),
        );
        let mut objects = vec![manifests::namespace(), manifests::crd()];
        objects.extend(manifests::rbac(&rules));
        super::apply(&client, &objects, std::time::Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("installing capstan for the tests: {e}"));
        cp.service_account_kubeconfig(NAMESPACE, manifests::NAME)
            .await
            .unwrap_or_else(|e| panic!("the agent's ServiceAccount token: {e}"))
    };
    installed.push((cp.server_url().to_string(), path.clone()));
    path
}

/// A client authenticated as the agent's ServiceAccount (see [`agent_kubeconfig`]), for the
/// calling runtime.
pub async fn agent_client(cp: &ControlPlane) -> Client {
    let path = agent_kubeconfig(cp).await;
    crate::k8s::connect(Some(&path), None)
        .await
        .unwrap_or_else(|e| panic!("client for {}: {e}", path.display()))
        .client
}
