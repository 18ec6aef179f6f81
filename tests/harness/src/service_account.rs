//! Authenticating as a ServiceAccount: tokens from the TokenRequest API (the API server signs
//! them with the harness's service-account key), and kubeconfigs or clients that use them.
//!
//! This is how tests run an agent with exactly the rights its RBAC grants instead of the
//! harness's `system:masters` admin: the API server authenticates the token as
//! `system:serviceaccount:<namespace>:<name>` and authorises every request against the
//! (Cluster)Roles bound to it, as it would for a pod.

use std::path::PathBuf;

use base64::Engine as _;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::control_plane::{ControlPlane, Error, write_private};

/// How long test tokens live.
const TOKEN_SECONDS: i64 = 24 * 3600;

impl ControlPlane {
    /// A token for `namespace/name` from the TokenRequest API (the ServiceAccount must exist).
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<String, Error> {
        let api: Api<ServiceAccount> = Api::namespaced(self.try_client()?, namespace);
        let req = TokenRequest {
            spec: TokenRequestSpec {
                audiences: Vec::new(),
                expiration_seconds: Some(TOKEN_SECONDS),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = api
            .create_token_request(name, &PostParams::default(), &req)
            .await
            .map_err(|source| Error::Kube {
                action: "requesting a ServiceAccount token",
                source,
            })?;
        answer
            .status
            .map(|s| s.token)
            .ok_or_else(|| Error::Task("TokenRequest answered without a token".into()))
    }

    /// The API server's CA (PEM), as a pod finds it in `ca.crt`.
    pub fn ca_pem(&self) -> String {
        let kc = Kubeconfig::from_yaml(self.kubeconfig_yaml()).expect("the harness kubeconfig");
        let data = kc
            .clusters
            .first()
            .and_then(|c| c.cluster.as_ref())
            .and_then(|c| c.certificate_authority_data.clone())
            .expect("the harness kubeconfig has a CA");
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(data)
                .expect("base64 CA"),
        )
        .expect("PEM")
    }

    /// A kubeconfig that authenticates as `namespace/name` with a fresh token, written into the
    /// control plane's directory; its path.
    pub async fn service_account_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<PathBuf, Error> {
        let token = self.service_account_token(namespace, name).await?;
        let yaml = format!(
            "apiVersion: v1
kind: Config
clusters:
- name: sa
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: {namespace}-{name}
  user:
    token: {token}
contexts:
- name: sa
  context:
    cluster: sa
    user: {namespace}-{name}
current-context: sa
",
            server = self.server_url(),
            ca = base64::engine::general_purpose::STANDARD.encode(self.ca_pem()),
        );
        let path = self.dir().join(format!("sa-{namespace}-{name}.kubeconfig"));
        write_private(&path, &yaml)?;
        Ok(path)
    }

    /// A client for the calling runtime authenticated as `namespace/name`.
    pub async fn service_account_client(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Client, Error> {
        let path = self.service_account_kubeconfig(namespace, name).await?;
        let kc = Kubeconfig::read_from(&path).map_err(|e| Error::Kubeconfig(e.to_string()))?;
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .map_err(|e| Error::Kubeconfig(e.to_string()))?;
        crate::install_crypto_provider();
        Client::try_from(config).map_err(|source| Error::Kube {
            action: "create client",
            source,
        })
    }
}
