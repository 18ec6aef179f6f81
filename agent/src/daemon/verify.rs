//! Where `capstan run --verify-commits` gets its trusted keys, read afresh before every sync:
//! files (`--allowed-signers`, `--trusted-keys`) and a Secret (`--trusted-keys-secret`, keys
//! [`SECRET_ALLOWED_SIGNERS`] and [`SECRET_TRUSTED_KEYS`]), all of them trusted together.
//! Rotating a key is editing the Secret: the next sync uses it. Keys that cannot be read refuse
//! every new revision (fail closed); the last verified one stays.

use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

use crate::source::Verification;
use crate::source::verify::{KeysError, Mode, TrustedKeys};

/// The Secret's key holding an allowed_signers file.
pub const SECRET_ALLOWED_SIGNERS: &str = "allowed_signers";
/// The Secret's key holding armored OpenPGP public keys.
pub const SECRET_TRUSTED_KEYS: &str = "trusted.asc";

/// `--verify-commits` and where the keys are.
#[derive(Debug, Clone, Default)]
pub struct VerifyConfig {
    /// The head, or every commit since the last verified one.
    pub mode: Mode,
    /// An allowed_signers file (SSH signatures).
    pub allowed_signers: Option<PathBuf>,
    /// A file of OpenPGP public keys.
    pub trusted_keys: Option<PathBuf>,
    /// A Secret, `(namespace, name)`.
    pub secret: Option<(String, String)>,
    /// Accept a head that does not descend from the last verified commit (`--allow-rollback`).
    pub allow_rollback: bool,
}

impl VerifyConfig {
    /// The keys as they are now, for the next sync (the floor is the caller's to set).
    pub async fn verification(&self, client: &Client) -> Verification {
        Verification {
            mode: self.mode,
            keys: self.keys(client).await.map(Arc::new),
            floor: Ok(None),
            allow_rollback: self.allow_rollback,
        }
    }

    async fn keys(&self, client: &Client) -> Result<TrustedKeys, KeysError> {
        let mut keys: Option<TrustedKeys> = None;
        if self.allowed_signers.is_some() || self.trusted_keys.is_some() {
            let (a, t) = (self.allowed_signers.clone(), self.trusted_keys.clone());
            let from_files = tokio::task::spawn_blocking(move || {
                TrustedKeys::from_files(a.as_deref(), t.as_deref())
            })
            .await
            .map_err(|e| KeysError::Empty(format!("the key files ({e})")))??;
            keys = Some(from_files);
        }
        if let Some((ns, name)) = &self.secret {
            let full = format!("{ns}/{name}");
            let secret = Api::<Secret>::namespaced(client.clone(), ns)
                .get(name)
                .await
                .map_err(|e| KeysError::Secret {
                    name: full.clone(),
                    cause: e.to_string(),
                })?;
            let data = secret.data.unwrap_or_default();
            let allowed = data
                .get(SECRET_ALLOWED_SIGNERS)
                .map(|b| String::from_utf8_lossy(&b.0).into_owned());
            let origin_a = format!("Secret {full} key {SECRET_ALLOWED_SIGNERS}");
            let origin_t = format!("Secret {full} key {SECRET_TRUSTED_KEYS}");
            let from_secret = TrustedKeys::parse(
                allowed.as_deref().map(|t| (origin_a.as_str(), t)),
                data.get(SECRET_TRUSTED_KEYS)
                    .map(|b| (origin_t.as_str(), b.0.as_slice())),
            )
            .map_err(|e| match e {
                KeysError::Empty(_) => KeysError::Empty(format!(
                    "Secret {full} (keys {SECRET_ALLOWED_SIGNERS}, {SECRET_TRUSTED_KEYS})"
                )),
                e => e,
            })?;
            keys = Some(match keys {
                Some(k) => k.merge(from_secret),
                None => from_secret,
            });
        }
        keys.ok_or_else(|| KeysError::Empty("the configuration".into()))
    }
}
