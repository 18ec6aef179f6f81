//! Where release documents come from, and how their references are followed.
//!
//! A release is read from three kinds of documents (see [`super::published`]) that refer to each
//! other by URL. Every document has a [`Location`]: an `https://` URL (fetched by the agent), a
//! file of the fleet repository (`repo:/path`), or capstan's embedded sample data
//! (`capstan-sample:/file`). A reference inside a document is resolved against the location of the
//! document that holds it, so a relative `bundleManifestUrl: bundles-104.yaml` next to a manifest
//! in the repository names a file of the repository, and an absolute `https://` reference names a
//! document to fetch.
//!
//! Reading never does I/O: a [`Documents`] store answers with what it has, and a missing
//! document is reported back ([`super::ReleaseError::Missing`]) so that the agent can fetch it and
//! ask again.

use std::collections::BTreeMap;
use std::fmt;

use sha2::{Digest, Sha256};
use url::Url;

/// Scheme of files of the fleet repository.
pub const REPO_SCHEME: &str = "repo";
/// Scheme of capstan's embedded sample release data.
pub const SAMPLE_SCHEME: &str = "capstan-sample";

/// The location of a release document.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Location(Url);

impl Location {
    /// Parses an `https://` URL, a `repo:/path` or a `capstan-sample:/file`.
    pub fn parse(s: &str) -> Option<Location> {
        let url = Url::parse(s).ok()?;
        match url.scheme() {
            "https" if url.host().is_some() => Some(Location(url)),
            REPO_SCHEME | SAMPLE_SCHEME if url.path().starts_with('/') => Some(Location(url)),
            _ => None,
        }
    }

    /// A file of the fleet repository, by its path from the repository root.
    pub fn repo_file(path: &str) -> Option<Location> {
        if path.is_empty()
            || path.starts_with('/')
            || path.split('/').any(|p| p == ".." || p == ".")
        {
            return None;
        }
        Location::parse(&format!("{REPO_SCHEME}:/{path}"))
    }

    /// A file of the embedded sample data.
    pub fn sample(file: &str) -> Location {
        Location::parse(&format!("{SAMPLE_SCHEME}:/{file}")).expect("sample file names are paths")
    }

    /// A reference written in the document at `self`, resolved against it. `None` when the
    /// reference is malformed or leaves the kind of place the document is in for one that is
    /// not allowed (a repository document may refer to https, never the other way round).
    pub fn join(&self, reference: &str) -> Option<Location> {
        let joined = self.0.join(reference).ok()?;
        let allowed = match (self.0.scheme(), joined.scheme()) {
            (a, b) if a == b => true,
            (REPO_SCHEME | SAMPLE_SCHEME, "https") => true,
            _ => false,
        };
        if !allowed {
            return None;
        }
        Location::parse(joined.as_str())
    }

    /// The repository path of a `repo:` location.
    pub fn repo_path(&self) -> Option<&str> {
        (self.0.scheme() == REPO_SCHEME).then(|| self.0.path().trim_start_matches('/'))
    }

    /// Whether this document is fetched over the network.
    pub fn is_remote(&self) -> bool {
        self.0.scheme() == "https"
    }

    /// The location as written.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

/// The hex sha256 of a document's bytes, as pins are written.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A store of release documents by location.
pub trait Documents {
    /// The text of the document at `location`, if the store has it.
    fn get(&self, location: &Location) -> Option<&str>;
}

/// Documents held in memory.
#[derive(Debug, Clone, Default)]
pub struct DocumentMap(pub BTreeMap<Location, String>);

impl Documents for DocumentMap {
    fn get(&self, location: &Location) -> Option<&str> {
        self.0.get(location).map(String::as_str)
    }
}

macro_rules! sample_files {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../../release/", $name))),)*]
    };
}

/// capstan's sample release data (EKS-A's published shapes, invented image references).
const SAMPLE: &[(&str, &str)] = sample_files![
    "manifest.yaml",
    "bundles-85.yaml",
    "bundles-92.yaml",
    "bundles-98.yaml",
    "bundles-104.yaml",
    "eks-distro/kubernetes-1-28-eks-52.yaml",
    "eks-distro/kubernetes-1-29-eks-39.yaml",
    "eks-distro/kubernetes-1-30-eks-31.yaml",
    "eks-distro/kubernetes-1-31-eks-23.yaml",
    "eks-distro/kubernetes-1-32-eks-15.yaml",
    "eks-distro/kubernetes-1-33-eks-9.yaml",
    "eks-distro/kubernetes-1-34-eks-4.yaml",
    "eks-distro/kubernetes-1-35-eks-6.yaml",
    "eks-distro/kubernetes-1-36-eks-2.yaml",
];

/// The embedded sample data.
pub struct Sample;

impl Documents for Sample {
    fn get(&self, location: &Location) -> Option<&str> {
        if location.0.scheme() != SAMPLE_SCHEME {
            return None;
        }
        let path = location.0.path().trim_start_matches('/');
        SAMPLE.iter().find(|(n, _)| *n == path).map(|(_, t)| *t)
    }
}

impl Sample {
    /// Every sample file, `(path, text)`: what the EKS Anywhere oracle is given too.
    pub fn files() -> &'static [(&'static str, &'static str)] {
        SAMPLE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_resolve_against_their_document() {
        let m = Location::repo_file("release/eks-a/manifest.yaml").unwrap();
        assert_eq!(
            m.join("bundles/104.yaml").unwrap().repo_path(),
            Some("release/eks-a/bundles/104.yaml")
        );
        assert_eq!(
            m.join("https://example.com/b.yaml").unwrap().as_str(),
            "https://example.com/b.yaml"
        );
        let h = Location::parse("https://assets.example/releases/eks-a/manifest.yaml").unwrap();
        assert_eq!(
            h.join("../bundles/1/manifest.yaml").unwrap().as_str(),
            "https://assets.example/releases/bundles/1/manifest.yaml"
        );
        // A published document cannot point into the repository or at plain http.
        assert!(h.join("repo:/x.yaml").is_none());
        assert!(h.join("http://example.com/x.yaml").is_none());
        assert!(Location::repo_file("../x").is_none());
        assert!(Location::parse("http://example.com/x").is_none());
    }

    #[test]
    fn sample_files_are_found_by_location() {
        let l = Location::sample("manifest.yaml");
        assert!(Sample.get(&l).unwrap().contains("kind: Release"));
        let b = l.join("eks-distro/kubernetes-1-33-eks-9.yaml").unwrap();
        assert!(Sample.get(&b).is_some());
    }
}
