//! The identity provider of a cluster: at most one OIDCConfig of the directory, referenced from
//! `identityProviderRefs`, which sets the API server's OIDC flags. AWS IAM authentication is
//! refused: it needs the authenticator EKS Anywhere's controller deploys, which capstan does not
//! run. An OIDCConfig nothing references is warned about.

use super::{At, present};
use crate::diag::Code;
use crate::spec::parse::{Parsed, SourceDoc};
use crate::spec::raw;

/// The OIDCConfig of `identityProviderRefs` (at most one); an AWSIamConfig is refused where its
/// kind is written.
pub(super) fn oidc(
    at: &mut At,
    spec: &raw::ClusterSpec,
    configs: &[Parsed<raw::OidcSpec>],
    docs: &[SourceDoc],
) -> Option<raw::OidcSpec> {
    let mut found = None;
    for (i, r) in spec.identity_provider_refs.iter().enumerate() {
        let path = format!("spec.identityProviderRefs[{i}]");
        match r.kind.as_str() {
            "OIDCConfig" => {
                if found.is_some() {
                    at.err(
                        Code::InvalidValue,
                        &path,
                        "only one OIDCConfig identity provider is supported (as in EKS Anywhere)",
                    );
                    continue;
                }
                match configs.iter().find(|c| c.meta.name == r.name) {
                    Some(c) => {
                        let mut cat = At {
                            sd: &docs[c.src],
                            diags: at.diags,
                        };
                        check_oidc(&mut cat, &c.spec);
                        found = Some(c.spec.clone());
                    }
                    None if present(docs, "OIDCConfig", Some(&r.name)) => {}
                    None => at.err(
                        Code::DanglingRef,
                        &format!("{path}.name"),
                        format!("OIDCConfig `{}` is not in this cluster directory", r.name),
                    ),
                }
            }
            "AWSIamConfig" => at.err(
                Code::UnsupportedField,
                &format!("{path}.kind"),
                "AWS IAM authentication needs the authenticator EKS Anywhere's controller deploys and the CA Secret it creates, which capstan does not run: use an OIDCConfig identity provider",
            ),
            other => at.err(
                Code::InvalidValue,
                &format!("{path}.kind"),
                format!("identity provider kind `{other}` must be OIDCConfig"),
            ),
        }
    }
    for c in configs {
        if !spec
            .identity_provider_refs
            .iter()
            .any(|r| r.kind == "OIDCConfig" && r.name == c.meta.name)
        {
            At {
                sd: &docs[c.src],
                diags: at.diags,
            }
            .warn(
                Code::UnusedObject,
                "metadata.name",
                format!(
                    "OIDCConfig `{}` is not referenced by the cluster's identityProviderRefs",
                    c.meta.name
                ),
            );
        }
    }
    found
}

/// Whether an OIDCConfig has a clientId, an https:// issuer and at most one required claim.
fn check_oidc(at: &mut At, o: &raw::OidcSpec) {
    if o.client_id.is_empty() {
        at.err(
            Code::MissingField,
            "spec.clientId",
            "OIDCConfig needs clientId",
        );
    }
    if !o.issuer_url.starts_with("https://") {
        at.err(
            Code::InvalidValue,
            "spec.issuerUrl",
            "OIDCConfig issuerUrl must be an https:// URL",
        );
    }
    if o.required_claims.len() > 1 {
        at.err(
            Code::InvalidValue,
            "spec.requiredClaims",
            "only one required claim is supported (as in EKS Anywhere)",
        );
    }
}
