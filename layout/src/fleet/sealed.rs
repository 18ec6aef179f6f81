//! Encrypted Secrets of a cluster's own directory: applied on the management cluster.
//!
//! A cluster's provider credentials (CAPV's `<c>-vsphere-credentials`, CAPX's
//! `<c>-nutanix-credentials`, the cloud provider's resource-set Secrets) and any other Secret an
//! admin keeps beside a spec may be kept in Git encrypted with SOPS, in the management directory
//! (the admins') or in the workload cluster's own directory. They are checked here without a key
//! (the same rules as encrypted add-ons, [`super::addons`]); the agent decrypts them in memory
//! just before it plans the cluster, and they then pass the tenancy policy exactly as a plain
//! Secret would.
//!
//! Where a file may be decrypted is bound by [`crate::sops::ENCRYPTED_FOR`], covered by the MAC: here
//! `<management>:<cluster>` ([`crate::sops::management_scope`]), the management cluster it is applied to and the
//! cluster it belongs to. An add-on says only its cluster (`dev`), so a file encrypted for the
//! management side cannot be copied into `addons/` to have its credentials applied inside the
//! workload cluster (where the cluster's users read them), nor an add-on's Secret the other
//! way, nor one cluster's file into another's directory.
//!
//! The rendered object keeps its ciphertext (`capstan diff` and the PR comments compare and show
//! only that, masked), and the file's documents lose their `sops` metadata before the spec is
//! read; the agent finds what to decrypt in [`ClusterEntry::sealed`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use capstan_templates::diag::{Code, Diagnostic};
use capstan_templates::yaml::Document;

use super::addons::{Sealed, check_sealed};
use super::{ClusterEntry, file_documents, file_text};
use crate::config::FleetConfig;
use crate::tree::Tree;

/// An encrypted Secret of a cluster's own directory, as it is applied (namespace resolved).
#[derive(Debug, Clone, PartialEq)]
pub struct SealedObject {
    /// `metadata.namespace` (the cluster's when the file gives none).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// Its file and document.
    pub sealed: Sealed,
    /// The file it is in.
    pub file: PathBuf,
    /// The line of its `metadata.name`.
    pub line: usize,
}

impl SealedObject {
    /// `file:line`, for errors.
    pub fn place(&self) -> String {
        format!("{}:{}", self.file.display(), self.line)
    }
}

/// Whether a file of the tree is a SOPS file.
pub(crate) fn is_sealed_file(tree: &Tree, file: &Path) -> bool {
    file_text(tree, file).is_some_and(crate::sops::is_sops)
}

/// A SOPS file's documents without their `sops` metadata (what the spec reader sees; checked
/// with it by [`attach`]).
pub(super) fn strip(docs: &mut [Document]) {
    for d in docs {
        if let Some(m) = d.value.as_object_mut() {
            m.remove("sops");
        }
    }
}

/// Warns where a cluster's machines read a login or key from a Secret that neither its
/// directory nor its management directory keeps encrypted: an authenticated registry mirror's
/// [`capstan_templates::spec::registry_credentials_secret`], an AWSIamConfig's
/// [`capstan_templates::spec::aws_iam_ca_secret`]. Its machines wait for it (Cluster API does
/// not make their bootstrap data without it); an admin may create it on the management cluster
/// by hand, so this is a warning.
pub(super) fn check_logins(clusters: &mut [ClusterEntry]) {
    let kept: BTreeSet<(String, String, String)> = clusters
        .iter()
        .flat_map(|e| {
            e.sealed.iter().map(|s| {
                (
                    e.management().to_string(),
                    s.namespace.clone(),
                    s.name.clone(),
                )
            })
        })
        .collect();
    for entry in clusters.iter_mut() {
        let Some(cluster) = entry.cluster.clone() else {
            continue;
        };
        let mut needed = Vec::new();
        if cluster
            .registry_mirror
            .as_ref()
            .is_some_and(|m| m.authenticate)
        {
            needed.push((
                capstan_templates::spec::registry_credentials_secret(&cluster.name),
                "the registry mirror's login",
                "username and password",
                "spec.registryMirrorConfiguration.authenticate",
            ));
        }
        if cluster.aws_iam.is_some() {
            needed.push((
                capstan_templates::spec::aws_iam_ca_secret(&cluster.name),
                "the AWS IAM authenticator's certificate",
                "cert.pem and key.pem",
                "spec.identityProviderRefs",
            ));
        }
        for (name, what, keys, field) in needed {
            let key = (
                entry.management().to_string(),
                cluster.namespace.clone(),
                name.clone(),
            );
            if kept.contains(&key) {
                continue;
            }
            let ns = &cluster.namespace;
            entry.diagnostics.push(
                Diagnostic::warning(
                    Code::MissingSecret,
                    format!(
                        "{what} is read from Secret {ns}/{name} (keys {keys}), which no SOPS file of this directory or the management directory holds: keep it there encrypted (`capstan secret encrypt`), or create it on the management cluster; the machines wait until it exists"
                    ),
                )
                .in_file(&cluster.source.file)
                .at(cluster.source.pos(field))
                .for_cluster(&entry.name),
            );
        }
    }
}

/// Checks the SOPS files of every valid cluster's own directory without a key, and records
/// their Secrets in [`ClusterEntry::sealed`]; a file's problems are its cluster's.
pub(super) fn attach(
    tree: &Tree,
    clusters: &mut [ClusterEntry],
    configs: &BTreeMap<String, Option<FleetConfig>>,
) {
    for entry in clusters.iter_mut() {
        let Some(cluster) = entry.cluster.clone() else {
            continue;
        };
        let files: BTreeSet<&PathBuf> = cluster
            .extra_objects
            .iter()
            .map(|o| &o.file)
            .filter(|f| is_sealed_file(tree, f))
            .collect();
        if files.is_empty() {
            continue;
        }
        let mgmt = entry.management().to_string();
        let recipients = configs
            .get(&mgmt)
            .and_then(Option::as_ref)
            .map(|c| c.sops_recipients.as_slice())
            .unwrap_or_default();
        let scope = crate::sops::management_scope(&mgmt, &entry.name);
        for file in files {
            let Some(text) = file_text(tree, file).map(Arc::<str>::from) else {
                continue;
            };
            let mut docs = match file_documents(tree, file) {
                Ok(d) => d,
                Err(d) => {
                    entry.diagnostics.push(d.for_cluster(&entry.name));
                    continue;
                }
            };
            if let Err(d) = check_sealed(&text, &mut docs, file, recipients, &scope) {
                entry.diagnostics.push(d.for_cluster(&entry.name));
                continue;
            }
            for (i, doc) in docs.iter().enumerate() {
                let s = |p: &str| doc.value.pointer(p).and_then(|v| v.as_str());
                entry.sealed.push(SealedObject {
                    namespace: s("/metadata/namespace")
                        .unwrap_or(&cluster.namespace)
                        .to_string(),
                    name: s("/metadata/name").unwrap_or_default().to_string(),
                    sealed: Sealed {
                        text: text.clone(),
                        doc: i,
                    },
                    file: file.clone(),
                    line: doc.pos("metadata.name").line,
                });
            }
        }
    }
}
