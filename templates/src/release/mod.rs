//! EKS Anywhere versions: release manifests, bundles, EKS-D builds and the version rules.
//!
//! EKS Anywhere pins everything a cluster runs through its release: a cluster's `eksaVersion`
//! names a release of the release manifest, the release names a Bundles manifest, the bundle has
//! one entry per Kubernetes minor, and each entry names the EKS Distro release whose images the
//! cluster runs. capstan reads these documents in EKS-A's published shapes ([`published`]), from a
//! store of documents by location ([`documents`]): capstan's embedded sample data by default
//! (offline use and tests; its image references are invented), or the published manifest a fleet
//! names in its `fleet.yaml` (see `capstan_layout::config`), fetched by the agent.
//!
//! Reading is lazy and pure: [`ReleaseManifest::read`] parses the manifest only;
//! [`ReleaseManifest::release`] reads a release's Bundles and EKS-D documents the first time it is
//! asked for, and a document the store does not have is reported as
//! [`ReleaseError::Missing`], so the caller can fetch it and ask again.
//!
//! The rules checked here: eksaVersion and bundlesRef are mutually exclusive (in `spec`); a
//! workload's eksaVersion defaults to its management cluster's, must not exceed it, and may lag it
//! by at most two minors; every Kubernetes minor used must be in the release's bundle; an unknown
//! version is an error that lists the supported ones.

pub mod components;
pub mod documents;
pub(crate) mod published;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde::Deserialize;
use serde_json::{Value, json};

pub use components::{Component, Components};
pub use documents::{DocumentMap, Documents, Location, Sample, sha256_hex};

use crate::diag::{Code, Diagnostic};
use crate::spec::{Cluster, KubeVersion};

/// How many EKS-A minors a workload cluster may lag its management cluster.
pub const MAX_EKSA_LAG: u64 = 2;

pub use crate::spec::SemVer;

/// Errors reading release data.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReleaseError {
    /// A document is malformed or lacks a field capstan needs.
    #[error("release document {location}: {message}")]
    Invalid {
        /// Where the document is.
        location: String,
        /// What is wrong.
        message: String,
    },
    /// Documents the store does not have (yet): the agent fetches them and reads again.
    #[error("release documents not available: {}", .0.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", "))]
    Missing(Vec<Location>),
}

/// One Kubernetes minor of a release: the EKS-D build and the images that go with it.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionsBundle {
    /// "1.31".
    pub kube_version: String,
    /// When standard support ends.
    pub end_of_standard_support: String,
    /// The EKS-D build.
    pub eks_d: EksD,
    /// Cilium chart and images.
    pub cilium: CiliumBundle,
    /// The components manifests of what runs a management cluster.
    pub components: Components,
    /// Cluster API version of the release.
    pub cluster_api_version: String,
    /// CAPD's load balancer image.
    pub haproxy: Image,
    /// vSphere images.
    pub vsphere: VSphereBundle,
    /// Nutanix images.
    pub nutanix: NutanixBundle,
    /// Tinkerbell (bare metal) images.
    pub tinkerbell: TinkerbellBundle,
    /// EKS Anywhere's diagnostic collector image (`eksa.diagnosticCollector`), whose shell the
    /// AWS IAM authenticator's init container runs; None when the bundle names none.
    pub diagnostic_collector: Option<Image>,
    /// The curated packages controller's Helm chart (`packageController.helmChart`); None when
    /// the bundle names none.
    pub package_chart: Option<Chart>,
}

/// A Helm chart of a bundle: its name (the Helm release's) and its OCI reference with the
/// version as tag.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Chart {
    /// The chart's name, e.g. eks-anywhere-packages.
    pub name: String,
    /// registry/repository/chart:version, without a scheme.
    pub uri: String,
}

/// The EKS-D build of one Kubernetes minor.
#[derive(Debug, Clone, PartialEq)]
pub struct EksD {
    /// EKS-D release name, e.g. kubernetes-1-31-eks-23.
    pub name: String,
    /// Release channel, e.g. 1-31.
    pub channel: String,
    /// Upstream Kubernetes version, e.g. v1.31.11.
    pub kube_version: String,
    /// The kube-apiserver image tag, used as the machine version, e.g. v1.31.11-eks-1-31-23.
    pub tag: String,
    /// Image repository of the Kubernetes components.
    pub image_repository: String,
    /// etcd of this build.
    pub etcd: EtcdBuild,
    /// CoreDNS of this build.
    pub coredns: ImageRef,
    /// The pause image.
    pub pause: Image,
    /// The CAPD node image.
    pub kind_node: Image,
    /// The AWS IAM authenticator image of this build (`aws-iam-authenticator-image`); None when
    /// the release names none.
    pub aws_iam_auth: Option<Image>,
}

/// etcd of an EKS-D build.
#[derive(Debug, Clone, PartialEq)]
pub struct EtcdBuild {
    /// e.g. 3.5.21.
    pub version: String,
    /// Image repository.
    pub image_repository: String,
    /// Image tag.
    pub image_tag: String,
    /// Tarball used by etcdadm (linux/amd64).
    pub release_url: String,
}

/// An image as repository and tag.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageRef {
    /// Repository.
    pub image_repository: String,
    /// Tag.
    pub image_tag: String,
}

/// An image URI.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Image {
    /// repository:tag.
    pub uri: String,
}

impl Image {
    /// Splits the URI at its last `:` into repository and tag, as EKS-A does.
    pub fn split(&self) -> (&str, &str) {
        self.uri.rsplit_once(':').unwrap_or((&self.uri, ""))
    }
}

/// Cilium of a release.
#[derive(Debug, Clone, PartialEq)]
pub struct CiliumBundle {
    /// Cilium version.
    pub version: String,
    /// Agent image.
    pub cilium: Image,
    /// Operator image (`…/operator-generic:tag`).
    pub operator: Image,
    /// The Helm chart, as an OCI reference (`registry/path/chart:version`).
    pub helm_chart: Image,
}

/// vSphere images of a release.
#[derive(Debug, Clone, PartialEq)]
pub struct VSphereBundle {
    /// kube-vip image.
    pub kube_vip: Image,
    /// The vSphere cloud controller manager (CPI).
    pub manager: Image,
}

/// Nutanix images of a release.
#[derive(Debug, Clone, PartialEq)]
pub struct NutanixBundle {
    /// kube-vip image.
    pub kube_vip: Image,
    /// The Nutanix cloud controller manager.
    pub cloud_provider: Image,
}

/// Tinkerbell (bare metal) images of a release.
#[derive(Debug, Clone, PartialEq)]
pub struct TinkerbellBundle {
    /// kube-vip image.
    pub kube_vip: Image,
}

/// One EKS Anywhere release and its bundle.
#[derive(Debug, Clone)]
pub struct Release {
    /// The version.
    pub version: SemVer,
    /// Monotonic release number.
    pub number: u32,
    /// Release date.
    pub date: String,
    /// Git tag.
    pub git_tag: String,
    /// Name of the Bundles object, bundles-<number>.
    pub bundles_name: String,
    /// Where the Bundles manifest was read.
    pub bundles_location: Location,
    /// sha256 over the bundle and EKS-D documents: two releases with one version but different
    /// data (the sample and the published v0.26.1) never share a render.
    pub digest: String,
    /// One entry per Kubernetes minor.
    pub versions_bundles: Vec<VersionsBundle>,
}

/// EKS-A's EKSARelease name for a version (`v0.26.1`): `eksa-` and the version with `.` → `-`
/// and `+` → `-plus-` (`eksa-v0-26-1`), the object a Cluster's `spec.eksaVersion` names.
pub fn eksa_release_name(version: &str) -> String {
    format!("eksa-{}", version.replace('+', "-plus-").replace('.', "-"))
}

impl Release {
    /// The bundle entry of a Kubernetes minor.
    pub fn versions_bundle(&self, v: KubeVersion) -> Option<&VersionsBundle> {
        let want = v.to_string();
        self.versions_bundles
            .iter()
            .find(|b| b.kube_version == want)
    }

    /// The Kubernetes minors this release supports, e.g. "1.30, 1.31".
    pub fn kube_versions(&self) -> String {
        self.versions_bundles
            .iter()
            .map(|b| b.kube_version.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// EKS-A's EKSARelease name ([`eksa_release_name`] of the version).
    pub fn eksa_release_name(&self) -> String {
        eksa_release_name(&self.version.to_string())
    }

    /// The EKSARelease object for the management cluster.
    pub fn eksa_release_object(&self, namespace: &str) -> Value {
        let url = if self.bundles_location.is_remote() {
            self.bundles_location.to_string()
        } else {
            format!("{}.yaml", self.bundles_name)
        };
        json!({
            "apiVersion": "anywhere.eks.amazonaws.com/v1alpha1",
            "kind": "EKSARelease",
            "metadata": {"name": self.eksa_release_name(), "namespace": namespace},
            "spec": {
                "releaseDate": self.date,
                "version": self.version.to_string(),
                "gitCommit": self.git_tag,
                "bundleManifestUrl": url,
                "bundlesRef": {"apiVersion": "anywhere.eks.amazonaws.com/v1alpha1", "name": self.bundles_name, "namespace": namespace},
            },
        })
    }
}

/// One entry of a release manifest, before its documents are read.
#[derive(Debug, Clone)]
pub struct ReleaseEntry {
    /// The version.
    pub version: SemVer,
    /// Monotonic release number.
    pub number: u32,
    /// Release date.
    pub date: String,
    /// Git tag.
    pub git_tag: String,
    /// Where its Bundles manifest is.
    pub bundles: Location,
}

/// A release manifest: every release it lists, each read on first use.
#[derive(Debug)]
pub struct ReleaseManifest {
    /// Where the manifest was read.
    pub location: Location,
    /// The newest release.
    pub latest: SemVer,
    /// Releases, oldest first.
    pub entries: Vec<ReleaseEntry>,
    loaded: Mutex<BTreeMap<SemVer, Arc<Release>>>,
}

impl ReleaseManifest {
    /// capstan's embedded sample data, every release read.
    pub fn embedded() -> &'static ReleaseManifest {
        static M: OnceLock<ReleaseManifest> = OnceLock::new();
        M.get_or_init(|| {
            let m = ReleaseManifest::read(&Sample, &Location::sample("manifest.yaml"))
                .expect("embedded release data is checked by the test suite");
            for e in m.entries.clone() {
                m.release(&Sample, &e.version)
                    .expect("embedded release data is checked by the test suite");
            }
            m
        })
    }

    /// Reads the manifest at `location` (its releases' documents are read on demand).
    pub fn read(
        docs: &dyn Documents,
        location: &Location,
    ) -> Result<ReleaseManifest, ReleaseError> {
        let text = docs
            .get(location)
            .ok_or_else(|| ReleaseError::Missing(vec![location.clone()]))?;
        let spec: published::ManifestSpec =
            published::spec_of(location.as_str(), text, "Release", "spec")?;
        let invalid = |message: String| ReleaseError::Invalid {
            location: location.to_string(),
            message,
        };
        let mut entries = Vec::new();
        for r in spec.releases {
            let version = SemVer::parse(&r.version)
                .ok_or_else(|| invalid(format!("release version `{}` is not vX.Y.Z", r.version)))?;
            let bundles = location.join(&r.bundle_manifest_url).ok_or_else(|| {
                invalid(format!(
                    "bundleManifestUrl `{}` of {version} is not a location capstan reads (https, or a path next to the manifest)",
                    r.bundle_manifest_url
                ))
            })?;
            entries.push(ReleaseEntry {
                version,
                number: r.number,
                date: r.date,
                git_tag: r.git_tag,
                bundles,
            });
        }
        if entries.is_empty() {
            return Err(invalid("the manifest lists no releases".into()));
        }
        entries.sort_by(|a, b| a.version.cmp(&b.version));
        let latest = SemVer::parse(&spec.latest_version).ok_or_else(|| {
            invalid(format!(
                "latestVersion `{}` is not vX.Y.Z",
                spec.latest_version
            ))
        })?;
        Ok(ReleaseManifest {
            location: location.clone(),
            latest,
            entries,
            loaded: Mutex::new(BTreeMap::new()),
        })
    }

    /// The entry of a version.
    pub fn entry(&self, v: &SemVer) -> Option<&ReleaseEntry> {
        self.entries.iter().find(|r| r.version == *v)
    }

    /// The newest release's entry (`latestVersion`, else the highest version).
    pub fn latest_entry(&self) -> &ReleaseEntry {
        self.entry(&self.latest)
            .unwrap_or_else(|| self.entries.last().expect("at least one release"))
    }

    /// The newest release, read from the embedded data (panics for other manifests whose
    /// documents were not read: use [`ReleaseManifest::release`]).
    pub fn latest(&self) -> Arc<Release> {
        let v = self.latest_entry().version.clone();
        self.loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&v)
            .cloned()
            .expect("latest() is for manifests whose releases are read")
    }

    /// Every version, e.g. "v0.25.2, v0.26.1".
    pub fn versions(&self) -> String {
        self.entries
            .iter()
            .map(|r| r.version.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The release of version `v` with its Bundles and EKS-D documents read from `docs`.
    pub fn release(&self, docs: &dyn Documents, v: &SemVer) -> Result<Arc<Release>, ReleaseError> {
        if let Some(r) = self.loaded.lock().unwrap_or_else(|e| e.into_inner()).get(v) {
            return Ok(r.clone());
        }
        let entry = self.entry(v).ok_or_else(|| ReleaseError::Invalid {
            location: self.location.to_string(),
            message: format!("no release {v}"),
        })?;
        let release = read_release(docs, entry)?;
        let release = Arc::new(release);
        self.loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(v.clone(), release.clone());
        Ok(release)
    }
}

fn read_release(docs: &dyn Documents, entry: &ReleaseEntry) -> Result<Release, ReleaseError> {
    use sha2::{Digest, Sha256};
    let loc = &entry.bundles;
    let text = docs
        .get(loc)
        .ok_or_else(|| ReleaseError::Missing(vec![loc.clone()]))?;
    let spec: published::BundlesSpec = published::spec_of(loc.as_str(), text, "Bundles", "spec")?;
    let invalid = |message: String| ReleaseError::Invalid {
        location: loc.to_string(),
        message,
    };
    if spec.number != entry.number {
        return Err(invalid(format!(
            "Bundles number {} does not match release {} (number {})",
            spec.number, entry.version, entry.number
        )));
    }
    let _ = (&spec.cli_min_version, &spec.cli_max_version);
    let mut digest = Sha256::new();
    digest.update(text.as_bytes());
    let mut eksd = Vec::new();
    let mut missing = Vec::new();
    for vb in &spec.versions_bundles {
        let at = loc.join(&vb.eks_d.manifest_url).ok_or_else(|| {
            invalid(format!(
                "eksD.manifestUrl `{}` of Kubernetes {} is not a location capstan reads",
                vb.eks_d.manifest_url, vb.kube_version
            ))
        })?;
        match docs.get(&at) {
            Some(t) => eksd.push((at, t)),
            None if !missing.contains(&at) => missing.push(at),
            None => {}
        }
    }
    if !missing.is_empty() {
        return Err(ReleaseError::Missing(missing));
    }
    let mut bundles = Vec::new();
    for (vb, (at, t)) in spec.versions_bundles.into_iter().zip(eksd) {
        digest.update(at.as_str().as_bytes());
        digest.update(t.as_bytes());
        let r: published::EksDRelease = published::spec_of(at.as_str(), t, "Release", "")?;
        bundles.push(vb.resolve(&r, at.as_str())?);
    }
    Ok(Release {
        version: entry.version.clone(),
        number: entry.number,
        date: entry.date.clone(),
        git_tag: entry.git_tag.clone(),
        bundles_name: format!("bundles-{}", entry.number),
        bundles_location: loc.clone(),
        digest: hex::encode(digest.finalize()),
        versions_bundles: bundles,
    })
}

/// The outcome of resolving a cluster's release.
#[derive(Debug, Default)]
pub struct Resolved {
    /// The release, when it is known, available and fits the rules.
    pub release: Option<Arc<Release>>,
    /// Problems, located in the cluster's spec.
    pub diagnostics: Vec<Diagnostic>,
    /// Release documents that must be fetched before the release can be read.
    pub missing: Vec<Location>,
}

impl ReleaseManifest {
    /// Resolves the release of a cluster and checks the version rules.
    ///
    /// `management` is the release of the cluster's management cluster (None for a management
    /// cluster itself, or when the management cluster is broken). A cluster that names no version
    /// gets the management cluster's, and a management cluster that names none gets the latest.
    pub fn resolve(
        &self,
        docs: &dyn Documents,
        cluster: &Cluster,
        management: Option<&Release>,
    ) -> Resolved {
        let mut out = Resolved::default();
        let src = &cluster.source;
        let diags = &mut out.diagnostics;
        let mut err = |code, path: &str, msg: String| {
            diags.push(
                Diagnostic::error(code, msg)
                    .in_file(&src.file)
                    .at(src.pos(path))
                    .for_cluster(&cluster.name),
            );
        };
        let entry = if let Some(v) = &cluster.eksa_version {
            let parsed = SemVer::parse(v);
            match parsed.as_ref().and_then(|p| self.entry(p)) {
                Some(r) => Some(r),
                None => {
                    err(
                        Code::UnknownVersion,
                        "spec.eksaVersion",
                        format!(
                            "eksaVersion `{v}` is not a release of {}; supported: {}",
                            self.source_name(),
                            self.versions()
                        ),
                    );
                    None
                }
            }
        } else if let Some(b) = &cluster.bundles_ref {
            match self
                .entries
                .iter()
                .find(|r| format!("bundles-{}", r.number) == *b)
            {
                Some(r) => Some(r),
                None => {
                    let known = self
                        .entries
                        .iter()
                        .map(|r| format!("bundles-{}", r.number))
                        .collect::<Vec<_>>()
                        .join(", ");
                    err(
                        Code::UnknownVersion,
                        "spec.bundlesRef.name",
                        format!(
                            "bundlesRef `{b}` is not a known Bundles object; supported: {known}"
                        ),
                    );
                    None
                }
            }
        } else if cluster.is_self_managed() {
            Some(self.latest_entry())
        } else {
            management.and_then(|m| self.entry(&m.version))
        };
        let Some(entry) = entry else {
            return out;
        };
        let path = if cluster.eksa_version.is_some() {
            "spec.eksaVersion"
        } else if cluster.bundles_ref.is_some() {
            "spec.bundlesRef"
        } else {
            "spec"
        };
        if let (Some(m), false) = (management, cluster.is_self_managed()) {
            let (w, mv) = (&entry.version, &m.version);
            if w > mv {
                err(
                    Code::VersionSkew,
                    path,
                    format!(
                        "eksaVersion {w} is newer than management cluster `{}`'s {mv}; upgrade the management cluster first",
                        cluster.management
                    ),
                );
            } else if w.major != mv.major || mv.minor - w.minor > MAX_EKSA_LAG {
                err(
                    Code::VersionSkew,
                    path,
                    format!(
                        "eksaVersion {w} lags management cluster `{}`'s {mv} by more than {MAX_EKSA_LAG} minor versions",
                        cluster.management
                    ),
                );
            }
        }
        let release = match self.release(docs, &entry.version) {
            Ok(r) => r,
            Err(ReleaseError::Missing(locations)) => {
                let list = locations
                    .iter()
                    .map(|l| l.to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                err(
                    Code::ReleaseUnavailable,
                    path,
                    format!(
                        "EKS Anywhere {} needs release documents that are not available: {list}",
                        entry.version
                    ),
                );
                out.missing = locations;
                return out;
            }
            Err(e) => {
                err(Code::ReleaseUnavailable, path, e.to_string());
                return out;
            }
        };
        let mut check_kube = |v: KubeVersion, path: &str| {
            if release.versions_bundle(v).is_none() {
                err(
                    Code::UnknownVersion,
                    path,
                    format!(
                        "Kubernetes {v} is not in EKS Anywhere {}; supported: {}",
                        release.version,
                        release.kube_versions()
                    ),
                );
            }
        };
        check_kube(cluster.kubernetes_version, "spec.kubernetesVersion");
        for (i, w) in cluster.workers.iter().enumerate() {
            if w.kubernetes_version != cluster.kubernetes_version {
                check_kube(
                    w.kubernetes_version,
                    &format!("spec.workerNodeGroupConfigurations[{i}].kubernetesVersion"),
                );
            }
        }
        if out.diagnostics.is_empty() {
            out.release = Some(release);
        }
        out
    }

    /// How diagnostics name this manifest: "capstan's sample release data" or its location.
    pub fn source_name(&self) -> String {
        if self.location == Location::sample("manifest.yaml") {
            "capstan's sample release data".into()
        } else {
            format!("the release manifest {}", self.location)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_manifest_loads() {
        let m = ReleaseManifest::embedded();
        assert!(m.entries.len() >= 3);
        assert_eq!(m.latest().version, m.latest);
        for e in &m.entries {
            let r = m.release(&Sample, &e.version).unwrap();
            assert!(!r.versions_bundles.is_empty());
            assert!(r.eksa_release_name().starts_with("eksa-v0-"));
        }
        // v0.26 ships Kubernetes 1.30 to 1.36.
        let r = m
            .release(&Sample, &SemVer::parse("v0.26.1").unwrap())
            .unwrap();
        assert_eq!(
            r.kube_versions(),
            "1.30, 1.31, 1.32, 1.33, 1.34, 1.35, 1.36"
        );
        let b = r
            .versions_bundle(KubeVersion {
                major: 1,
                minor: 33,
            })
            .unwrap();
        assert_eq!(b.eks_d.tag, "v1.33.5-eks-1-33-9");
        assert_eq!(
            b.eks_d.image_repository,
            "public.ecr.aws/eks-distro/kubernetes"
        );
        assert_eq!(b.eks_d.etcd.version, "3.5.21");
        assert_eq!(
            b.eks_d.coredns.image_repository,
            "public.ecr.aws/eks-distro/coredns"
        );
        assert!(
            b.eks_d
                .etcd
                .release_url
                .ends_with("etcd-linux-amd64-v3.5.21.tar.gz")
        );
    }

    #[test]
    fn release_names_follow_eksa() {
        let r = ReleaseManifest::embedded()
            .release(&Sample, &SemVer::parse("v0.26.1").unwrap())
            .unwrap();
        assert_eq!(r.eksa_release_name(), "eksa-v0-26-1");
        let mut dev = (*r).clone();
        dev.version = SemVer::parse("v0.19.0-dev+latest").unwrap();
        assert_eq!(dev.eksa_release_name(), "eksa-v0-19-0-dev-plus-latest");
    }

    #[test]
    fn semver_parses_and_orders() {
        assert!(SemVer::parse("0.26.1").is_none());
        assert!(SemVer::parse("v0.26").is_none());
        assert!(SemVer::parse("v0.25.9").unwrap() < SemVer::parse("v0.26.0").unwrap());
    }

    #[test]
    fn missing_documents_are_reported_stage_by_stage() {
        let mut docs = DocumentMap::default();
        let m = Location::parse("https://assets.example/releases/eks-a/manifest.yaml").unwrap();
        let sample = |f: &str| Sample.get(&Location::sample(f)).unwrap().to_string();
        let err = ReleaseManifest::read(&docs, &m).unwrap_err();
        assert_eq!(err, ReleaseError::Missing(vec![m.clone()]));
        docs.0.insert(m.clone(), sample("manifest.yaml"));
        let manifest = ReleaseManifest::read(&docs, &m).unwrap();
        let v = SemVer::parse("v0.26.1").unwrap();
        let bundles =
            Location::parse("https://assets.example/releases/eks-a/bundles-104.yaml").unwrap();
        assert_eq!(
            manifest.release(&docs, &v).unwrap_err(),
            ReleaseError::Missing(vec![bundles.clone()])
        );
        docs.0.insert(bundles, sample("bundles-104.yaml"));
        let ReleaseError::Missing(eksd) = manifest.release(&docs, &v).unwrap_err() else {
            panic!("expected the EKS-D documents");
        };
        assert_eq!(eksd.len(), 7);
        for l in eksd {
            let file = l.as_str().rsplit_once("eks-a/").unwrap().1.to_string();
            docs.0.insert(l, sample(&file));
        }
        let r = manifest.release(&docs, &v).unwrap();
        assert_eq!(r.versions_bundles.len(), 7);
        let embedded = ReleaseManifest::embedded().release(&Sample, &v).unwrap();
        assert_eq!(r.versions_bundles, embedded.versions_bundles);
        assert_ne!(
            r.digest, embedded.digest,
            "the digest covers the locations too"
        );
    }
}
