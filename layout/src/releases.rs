//! The release data of each management cluster's fleet, and the documents it is read from.
//!
//! A management cluster's fleet renders with capstan's embedded sample data unless its
//! `fleet.yaml` names a release manifest ([`crate::config`]). Documents of that manifest come from
//! the repository tree (`repo:` locations) or from what the agent fetched over https
//! ([`Fetched`]); every document with a pin must hash to it. The layout never fetches: documents
//! it needs and does not have are listed in [`crate::Fleet::missing_documents`], the agent fetches
//! them and loads again (at most three rounds: manifest, Bundles, EKS-D releases).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use capstan_templates::diag::{Code, Diagnostic};
use capstan_templates::release::{
    Documents, Location, Release, ReleaseError, ReleaseManifest, Resolved, Sample, sha256_hex,
};
use capstan_templates::spec::Cluster;

use crate::config::ReleaseSource;
use crate::tree::{Entry, Tree};

/// Release documents the agent fetched over https, and why others could not be fetched.
#[derive(Debug, Clone, Default)]
pub struct Fetched {
    /// Documents by location.
    pub docs: BTreeMap<Location, String>,
    /// Fetch errors by location (shown in the diagnostics of the clusters that need them).
    pub failures: BTreeMap<Location, String>,
}

/// The documents one management cluster's fleet can read.
struct FleetDocs<'a> {
    tree: &'a Tree,
    fetched: &'a Fetched,
    pins: BTreeMap<Location, String>,
    /// Documents whose bytes do not match their pin: location → actual sha256.
    mismatched: RefCell<BTreeMap<Location, String>>,
}

impl Documents for FleetDocs<'_> {
    fn get(&self, location: &Location) -> Option<&str> {
        let text = if let Some(path) = location.repo_path() {
            match self.tree.entries.get(&PathBuf::from(path)) {
                Some(Entry::File(bytes)) => std::str::from_utf8(bytes).ok(),
                _ => None,
            }
        } else if location.is_remote() {
            self.fetched.docs.get(location).map(String::as_str)
        } else {
            Sample.get(location)
        }?;
        if let Some(pin) = self.pins.get(location) {
            let actual = sha256_hex(text.as_bytes());
            if actual != *pin {
                self.mismatched
                    .borrow_mut()
                    .insert(location.clone(), actual);
                return None;
            }
        }
        Some(text)
    }
}

/// The release data of one management cluster's fleet.
pub(crate) struct Catalog<'a> {
    docs: FleetDocs<'a>,
    manifest: Result<ManifestRef, ReleaseError>,
    source: Option<(PathBuf, ReleaseSource)>,
}

enum ManifestRef {
    Embedded,
    Owned(Box<ReleaseManifest>),
}

impl<'a> Catalog<'a> {
    /// The catalog of a fleet whose config names `source` (None: the embedded sample data).
    pub(crate) fn new(
        tree: &'a Tree,
        fetched: &'a Fetched,
        source: Option<(PathBuf, ReleaseSource)>,
    ) -> Catalog<'a> {
        let docs = FleetDocs {
            tree,
            fetched,
            pins: source
                .as_ref()
                .map(|(_, s)| s.pins.clone())
                .unwrap_or_default(),
            mismatched: RefCell::new(BTreeMap::new()),
        };
        let manifest = match &source {
            None => Ok(ManifestRef::Embedded),
            Some((_, s)) => {
                ReleaseManifest::read(&docs, &s.manifest).map(|m| ManifestRef::Owned(Box::new(m)))
            }
        };
        Catalog {
            docs,
            manifest,
            source,
        }
    }

    /// Whether the fleet's release manifest itself cannot be read (every cluster of the fleet
    /// then reports why).
    pub(crate) fn is_broken(&self) -> bool {
        self.manifest.is_err()
    }

    /// Resolves a cluster's release; documents still to fetch are added to `missing`.
    pub(crate) fn resolve(
        &self,
        cluster: &Cluster,
        management: Option<&Release>,
        missing: &mut BTreeSet<Location>,
    ) -> (Option<Arc<Release>>, Vec<Diagnostic>) {
        let manifest = match &self.manifest {
            Ok(ManifestRef::Embedded) => ReleaseManifest::embedded(),
            Ok(ManifestRef::Owned(m)) => m,
            Err(e) => {
                let locations = match e {
                    ReleaseError::Missing(l) => l.clone(),
                    ReleaseError::Invalid { .. } => Vec::new(),
                };
                let diags = self.unavailable(cluster, &locations, Some(e), missing);
                return (None, diags);
            }
        };
        let Resolved {
            release,
            diagnostics,
            missing: needed,
        } = manifest.resolve(&self.docs, cluster, management);
        if needed.is_empty() {
            return (release, diagnostics);
        }
        // Replace resolve's summary with one diagnostic per document, at the fleet config.
        let mut diags: Vec<Diagnostic> = diagnostics
            .into_iter()
            .filter(|d| d.code != Code::ReleaseUnavailable)
            .collect();
        diags.extend(self.unavailable(cluster, &needed, None, missing));
        (None, diags)
    }

    /// Diagnostics for documents a cluster needs and cannot read.
    fn unavailable(
        &self,
        cluster: &Cluster,
        locations: &[Location],
        error: Option<&ReleaseError>,
        missing: &mut BTreeSet<Location>,
    ) -> Vec<Diagnostic> {
        let (file, pos) = match &self.source {
            Some((file, s)) => (file.clone(), s.pos),
            None => (cluster.source.file.clone(), cluster.source.pos("spec")),
        };
        let at = |code, msg: String| {
            Diagnostic::error(code, msg)
                .in_file(&file)
                .at(pos)
                .for_cluster(&cluster.name)
        };
        let mut out = Vec::new();
        if let Some(ReleaseError::Invalid { location, message }) = error {
            out.push(at(
                Code::ReleaseUnavailable,
                format!("release document {location} is unusable: {message}"),
            ));
        }
        let mismatched = self.docs.mismatched.borrow();
        for l in locations {
            if let Some(actual) = mismatched.get(l) {
                out.push(at(
                    Code::ChecksumMismatch,
                    format!(
                        "{l} has sha256 {actual}, not the {} pinned in the fleet config: the document changed (or the pin is wrong); check it and update the pin",
                        self.docs.pins[l]
                    ),
                ));
            } else if let Some(path) = l.repo_path() {
                out.push(at(
                    Code::ReleaseUnavailable,
                    format!("release document {path} is not a readable file of the repository"),
                ));
            } else if let Some(why) = self.docs.fetched.failures.get(l) {
                out.push(at(
                    Code::ReleaseUnavailable,
                    format!("release document {l} could not be fetched: {why}"),
                ));
            } else {
                missing.insert(l.clone());
                out.push(at(
                    Code::ReleaseUnavailable,
                    format!("release document {l} has not been fetched (the agent fetches and caches it)"),
                ));
            }
        }
        out
    }
}
