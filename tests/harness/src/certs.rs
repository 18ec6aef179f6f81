//! Certificates for a throw-away API server, generated fresh for every control plane.
//!
//! Mirrors what controller-runtime's envtest provisions (three independent "tiny CAs"):
//! * a serving CA and a serving certificate for `localhost` / `127.0.0.1` (clients verify
//!   the API server against the CA, so rustls-based kube clients work unchanged);
//! * a client CA (`--client-ca-file`) and an `admin` client certificate in group
//!   `system:masters`, which is what the kubeconfig uses;
//! * a service-account key pair (`--service-account-key-file` /
//!   `--service-account-signing-key-file`).
//!
//! All keys are ECDSA P-256 in PKCS#8 PEM, which both Go and rustls read.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

/// Errors of certificate generation.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// rcgen failed.
    #[error("generate {what}: {source}")]
    Generate {
        what: &'static str,
        source: rcgen::Error,
    },
    /// Writing a PEM file failed.
    #[error("write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// All PEM material of one control plane.
#[derive(Clone)]
pub struct Pki {
    /// CA that signed the serving certificate (the kubeconfig's `certificate-authority-data`).
    pub serving_ca_pem: String,
    /// kube-apiserver serving certificate.
    pub serving_cert_pem: String,
    /// Its key.
    pub serving_key_pem: String,
    /// CA trusted for client certificates.
    pub client_ca_pem: String,
    /// Client certificate of user `admin`, group `system:masters`.
    pub admin_cert_pem: String,
    /// Its key.
    pub admin_key_pem: String,
    /// Service-account token verification key (public).
    pub sa_public_pem: String,
    /// Service-account token signing key (private).
    pub sa_private_pem: String,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki").finish_non_exhaustive()
    }
}

/// Paths of the files [`Pki::write`] creates.
#[derive(Debug, Clone)]
pub struct PkiFiles {
    /// Directory holding them all (also passed as `--cert-dir`).
    pub dir: PathBuf,
    /// `serving-ca.crt`.
    pub serving_ca: PathBuf,
    /// `apiserver.crt`.
    pub serving_cert: PathBuf,
    /// `apiserver.key`.
    pub serving_key: PathBuf,
    /// `client-ca.crt`.
    pub client_ca: PathBuf,
    /// `sa.pub`.
    pub sa_public: PathBuf,
    /// `sa.key`.
    pub sa_private: PathBuf,
}

fn mk<T>(what: &'static str, r: Result<T, rcgen::Error>) -> Result<T, CertError> {
    r.map_err(|source| CertError::Generate { what, source })
}

fn ca(common_name: &str) -> Result<CertifiedIssuer<'static, KeyPair>, CertError> {
    let mut params = mk("CA params", CertificateParams::new(Vec::<String>::new()))?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params
        .distinguished_name
        .push(DnType::OrganizationName, "capstan-harness");
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = mk("CA key", KeyPair::generate())?;
    mk("CA certificate", CertifiedIssuer::self_signed(params, key))
}

/// A serving certificate for webhook servers on loopback (`localhost`, `127.0.0.1`) and the CA
/// that signed it: what cert-manager provides in a real install. The CA goes into the
/// `caBundle` of the webhook configurations and of the CRDs' conversion webhooks.
#[derive(Clone)]
pub struct ServingCert {
    /// The CA certificate.
    pub ca_pem: String,
    /// The serving certificate (`tls.crt`).
    pub cert_pem: String,
    /// Its key (`tls.key`).
    pub key_pem: String,
}

/// A serving certificate for `localhost` / `127.0.0.1`, signed by `issuer`.
fn loopback_serving(
    issuer: &CertifiedIssuer<'static, KeyPair>,
) -> Result<(String, String), CertError> {
    let mut serving = mk(
        "serving params",
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]),
    )?;
    serving.distinguished_name = DistinguishedName::new();
    serving
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    serving.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = mk("serving key", KeyPair::generate())?;
    let cert = mk("serving certificate", serving.signed_by(&key, issuer))?;
    Ok((cert.pem(), key.serialize_pem()))
}

impl ServingCert {
    /// Generates a fresh CA and serving certificate.
    pub fn generate() -> Result<Self, CertError> {
        let ca = ca("capstan-harness webhook CA")?;
        let (cert_pem, key_pem) = loopback_serving(&ca)?;
        Ok(ServingCert {
            ca_pem: ca.pem(),
            cert_pem,
            key_pem,
        })
    }

    /// Writes `tls.crt` and `tls.key` (the names controller-runtime's webhook server reads) into
    /// `dir` (created if missing).
    pub fn write(&self, dir: &Path) -> Result<(), CertError> {
        let err = |path: PathBuf| move |source| CertError::Write { path, source };
        std::fs::create_dir_all(dir).map_err(err(dir.to_owned()))?;
        for (name, contents) in [("tls.crt", &self.cert_pem), ("tls.key", &self.key_pem)] {
            let path = dir.join(name);
            std::fs::write(&path, contents).map_err(err(path.clone()))?;
        }
        Ok(())
    }
}

impl Pki {
    /// Generates a fresh set of keys and certificates.
    pub fn generate() -> Result<Self, CertError> {
        let serving_ca = ca("capstan-harness serving CA")?;
        let (serving_cert_pem, serving_key_pem) = loopback_serving(&serving_ca)?;

        let client_ca = ca("capstan-harness client CA")?;
        let mut admin = mk(
            "client params",
            CertificateParams::new(Vec::<String>::new()),
        )?;
        admin.distinguished_name = DistinguishedName::new();
        admin.distinguished_name.push(DnType::CommonName, "admin");
        admin
            .distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        admin.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let admin_key = mk("client key", KeyPair::generate())?;
        let admin_cert = mk(
            "client certificate",
            admin.signed_by(&admin_key, &client_ca),
        )?;

        let sa = mk("service-account key", KeyPair::generate())?;
        Ok(Pki {
            serving_ca_pem: serving_ca.pem(),
            serving_cert_pem,
            serving_key_pem,
            client_ca_pem: client_ca.pem(),
            admin_cert_pem: admin_cert.pem(),
            admin_key_pem: admin_key.serialize_pem(),
            sa_public_pem: sa.public_key_pem(),
            sa_private_pem: sa.serialize_pem(),
        })
    }

    /// Writes the files kube-apiserver needs into `dir` (created if missing).
    pub fn write(&self, dir: &Path) -> Result<PkiFiles, CertError> {
        let w = |name: &str, contents: &str| -> Result<PathBuf, CertError> {
            let path = dir.join(name);
            std::fs::write(&path, contents).map_err(|source| CertError::Write {
                path: path.clone(),
                source,
            })?;
            Ok(path)
        };
        std::fs::create_dir_all(dir).map_err(|source| CertError::Write {
            path: dir.to_owned(),
            source,
        })?;
        Ok(PkiFiles {
            dir: dir.to_owned(),
            serving_ca: w("serving-ca.crt", &self.serving_ca_pem)?,
            serving_cert: w("apiserver.crt", &self.serving_cert_pem)?,
            serving_key: w("apiserver.key", &self.serving_key_pem)?,
            client_ca: w("client-ca.crt", &self.client_ca_pem)?,
            sa_public: w("sa.pub", &self.sa_public_pem)?,
            sa_private: w("sa.key", &self.sa_private_pem)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_pem() {
        let p = Pki::generate().unwrap();
        assert!(
            p.serving_cert_pem
                .starts_with("-----BEGIN CERTIFICATE-----")
        );
        assert!(p.admin_key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert!(p.sa_public_pem.starts_with("-----BEGIN PUBLIC KEY-----"));
        let dir = tempfile::tempdir().unwrap();
        let files = p.write(dir.path()).unwrap();
        assert!(files.sa_private.is_file());
    }
}
