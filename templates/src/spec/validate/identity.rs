//! The identity providers of a cluster, referenced from `identityProviderRefs`: at most one
//! OIDCConfig of the directory, which sets the API server's OIDC flags, and at most one
//! AWSIamConfig, which turns on the AWS IAM authenticator (its webhook on the control-plane
//! machines, the authenticator itself inside the cluster as an add-on). Its checks are EKS
//! Anywhere's (`awsiamconfig.go`): a region, a backend mode other than `MountedFile`, an ARN and a
//! user name in every mapping; `partition` defaults to `aws`. The authenticator's inside is
//! installed through the cluster's add-ons, which capstan applies to workload clusters only: a
//! management cluster's AWSIamConfig is refused, saying so. A config nothing references is warned
//! about.

use super::{At, present};
use crate::diag::Code;
use crate::spec::parse::{Parsed, SourceDoc};
use crate::spec::raw;

/// The OIDCConfig of `identityProviderRefs` (at most one); a kind other than OIDCConfig and
/// AWSIamConfig is refused where it is written.
pub(super) fn oidc(
    at: &mut At,
    spec: &raw::ClusterSpec,
    configs: &[Parsed<raw::OidcSpec>],
    docs: &[SourceDoc],
) -> Option<raw::OidcSpec> {
    for (i, r) in spec.identity_provider_refs.iter().enumerate() {
        if !matches!(r.kind.as_str(), "OIDCConfig" | "AWSIamConfig") {
            at.err(
                Code::InvalidValue,
                &format!("spec.identityProviderRefs[{i}].kind"),
                format!(
                    "identity provider kind `{}` must be OIDCConfig or AWSIamConfig",
                    r.kind
                ),
            );
        }
    }
    resolve(at, spec, "OIDCConfig", configs, docs, check_oidc, None)
}

/// The config of `kind` that `identityProviderRefs` names (at most one, as in EKS Anywhere),
/// checked by `check`: a second reference, or one to a config the directory does not hold, is an
/// error at the reference; a config of the kind nothing references is warned about. With
/// `refused`, every reference to the kind is that error at its `kind` instead.
fn resolve<T: Clone>(
    at: &mut At,
    spec: &raw::ClusterSpec,
    kind: &str,
    configs: &[Parsed<T>],
    docs: &[SourceDoc],
    check: fn(&mut At, &T),
    refused: Option<&str>,
) -> Option<T> {
    let mut found = None;
    for (i, r) in spec.identity_provider_refs.iter().enumerate() {
        if r.kind != kind {
            continue;
        }
        let path = format!("spec.identityProviderRefs[{i}]");
        if let Some(why) = refused {
            at.err(Code::UnsupportedField, &format!("{path}.kind"), why);
            continue;
        }
        if found.is_some() {
            at.err(
                Code::InvalidValue,
                &path,
                format!("only one {kind} identity provider is supported (as in EKS Anywhere)"),
            );
            continue;
        }
        match configs.iter().find(|c| c.meta.name == r.name) {
            Some(c) => {
                let mut cat = At {
                    sd: &docs[c.src],
                    diags: at.diags,
                };
                check(&mut cat, &c.spec);
                found = Some(c.spec.clone());
            }
            None if present(docs, kind, Some(&r.name)) => {}
            None => at.err(
                Code::DanglingRef,
                &format!("{path}.name"),
                format!("{kind} `{}` is not in this cluster directory", r.name),
            ),
        }
    }
    for c in configs {
        if !spec
            .identity_provider_refs
            .iter()
            .any(|r| r.kind == kind && r.name == c.meta.name)
        {
            At {
                sd: &docs[c.src],
                diags: at.diags,
            }
            .warn(
                Code::UnusedObject,
                "metadata.name",
                format!(
                    "{kind} `{}` is not referenced by the cluster's identityProviderRefs",
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

/// EKS Anywhere's default `partition`.
const DEFAULT_PARTITION: &str = "aws";

/// The AWSIamConfig of `identityProviderRefs` (at most one), checked as EKS Anywhere checks it,
/// `partition` defaulted. `management` is whether the cluster manages itself: its
/// AWSIamConfig is refused at each reference.
pub(super) fn aws_iam(
    at: &mut At,
    spec: &raw::ClusterSpec,
    configs: &[Parsed<raw::AwsIamSpec>],
    docs: &[SourceDoc],
    management: bool,
) -> Option<raw::AwsIamSpec> {
    let refused = management.then_some(
        "the AWS IAM authenticator runs inside its cluster, and capstan installs it there as an add-on of a workload cluster; a management cluster's is not installed by capstan: use an OIDCConfig identity provider on the management cluster",
    );
    let mut found = resolve(
        at,
        spec,
        "AWSIamConfig",
        configs,
        docs,
        check_aws_iam,
        refused,
    )?;
    if found.partition.is_empty() {
        found.partition = DEFAULT_PARTITION.to_string();
    }
    Some(found)
}

/// EKS Anywhere's checks of an AWSIamConfig: a region, at least one backend mode and none of
/// them `MountedFile`, an ARN and a user name in every mapping.
fn check_aws_iam(at: &mut At, s: &raw::AwsIamSpec) {
    if s.aws_region.is_empty() {
        at.err(
            Code::MissingField,
            "spec.awsRegion",
            "AWSIamConfig needs awsRegion",
        );
    }
    if s.backend_mode.is_empty() {
        at.err(
            Code::MissingField,
            "spec.backendMode",
            "AWSIamConfig needs backendMode (EKSConfigMap maps the roles and users of mapRoles and mapUsers)",
        );
    }
    for (i, m) in s.backend_mode.iter().enumerate() {
        if m == "MountedFile" {
            at.err(
                Code::InvalidValue,
                &format!("spec.backendMode[{i}]"),
                "the MountedFile backend is not supported (as in EKS Anywhere): use EKSConfigMap",
            );
        }
    }
    for (list, arn, items) in [
        ("mapRoles", "roleARN", &s.map_roles),
        ("mapUsers", "userARN", &s.map_users),
    ] {
        for (i, m) in items.iter().enumerate() {
            let (own, other) = if arn == "roleARN" {
                (&m.role_arn, &m.user_arn)
            } else {
                (&m.user_arn, &m.role_arn)
            };
            let at_item = format!("spec.{list}[{i}]");
            if other.is_some() {
                let wrong = if arn == "roleARN" {
                    "userARN"
                } else {
                    "roleARN"
                };
                at.err(
                    Code::InvalidValue,
                    &format!("{at_item}.{wrong}"),
                    format!("{list} entries name their ARN as {arn}"),
                );
            }
            if own.as_deref().unwrap_or("").is_empty() {
                at.err(
                    Code::MissingField,
                    &at_item,
                    format!("every {list} entry needs {arn}"),
                );
            }
            if m.username.is_empty() {
                at.err(
                    Code::MissingField,
                    &at_item,
                    format!("every {list} entry needs username"),
                );
            }
        }
    }
}
