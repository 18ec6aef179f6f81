//! EKS Anywhere versions: the embedded release manifest and the version rules.
//!
//! EKS Anywhere pins everything a cluster runs through its release: a cluster's `eksaVersion`
//! names a release, the release names a Bundles manifest, and the bundle has one entry per
//! Kubernetes minor with the EKS-D build (tag, etcd, CoreDNS) and the provider images. capstan
//! embeds such a manifest (files under `templates/release/`, in EKS-A's `Release`/`Bundles`
//! shape; the EKS-D facts EKS-A reads from a separate EKS-D Release object are folded into each
//! bundle's `eksD` block) so rendering never needs the network.
//!
//! The rules checked here: eksaVersion and bundlesRef are mutually exclusive (in `spec`); a
//! workload's eksaVersion defaults to its management cluster's, must not exceed it, and may lag it
//! by at most two minors; every Kubernetes minor used must be in the release's bundle; an unknown
//! version is an error that lists the supported ones.

use std::fmt;
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::diag::{Code, Diagnostic};
use crate::spec::{Cluster, KubeVersion};

/// How many EKS-A minors a workload cluster may lag its management cluster.
pub const MAX_EKSA_LAG: u64 = 2;

/// An EKS Anywhere version, `vMAJOR.MINOR.PATCH[-pre][+build]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SemVer {
    /// Major.
    pub major: u64,
    /// Minor.
    pub minor: u64,
    /// Patch.
    pub patch: u64,
    /// Pre-release and build suffix, as written.
    pub suffix: String,
}

impl SemVer {
    /// Parses `v0.26.1` (the leading `v` is required, as in EKS-A).
    pub fn parse(s: &str) -> Option<SemVer> {
        let rest = s.strip_prefix('v')?;
        let end = rest.find(['-', '+']).unwrap_or(rest.len());
        let (core, suffix) = rest.split_at(end);
        let mut it = core.split('.');
        let mut num = || -> Option<u64> {
            let p = it.next()?;
            if p.is_empty() || !p.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            p.parse().ok()
        };
        let (major, minor, patch) = (num()?, num()?, num()?);
        if it.next().is_some() {
            return None;
        }
        Some(SemVer {
            major,
            minor,
            patch,
            suffix: suffix.to_string(),
        })
    }
}

impl fmt::Display for SemVer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "v{}.{}.{}{}",
            self.major, self.minor, self.patch, self.suffix
        )
    }
}

/// Errors loading release data.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// A manifest file does not parse.
    #[error("release data {file}: {message}")]
    Invalid {
        /// File name.
        file: String,
        /// What is wrong.
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawManifestSpec {
    latest_version: String,
    releases: Vec<RawRelease>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawRelease {
    version: String,
    number: u32,
    date: String,
    git_tag: String,
    bundle_manifest_url: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawBundlesSpec {
    number: u32,
    cli_min_version: String,
    cli_max_version: String,
    versions_bundles: Vec<VersionsBundle>,
}

/// One Kubernetes minor of a release: the EKS-D build and the images that go with it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VersionsBundle {
    /// "1.31".
    pub kube_version: String,
    /// When standard support ends.
    pub end_of_standard_support: String,
    /// The EKS-D build.
    pub eks_d: EksD,
    /// Cilium chart and images.
    pub cilium: CiliumBundle,
    /// Cluster API version of the release.
    #[serde(rename = "clusterAPI")]
    pub cluster_api: VersionOnly,
    /// CAPD's load balancer image.
    pub haproxy: ImageHolder,
    /// vSphere images.
    #[serde(rename = "vSphere")]
    pub vsphere: VSphereBundle,
    /// etcdadm controller version.
    pub etcdadm_controller: VersionOnly,
}

/// The EKS-D build of one Kubernetes minor.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EksD {
    /// EKS-D release name, e.g. kubernetes-1-31-eks-23.
    pub name: String,
    /// Release channel, e.g. 1-31.
    pub channel: String,
    /// Upstream Kubernetes version, e.g. v1.31.11.
    pub kube_version: String,
    /// The EKS-D image tag used as the machine version, e.g. v1.31.11-eks-1-31-23.
    pub tag: String,
    /// Image repository of the Kubernetes components.
    pub image_repository: String,
    /// etcd of this build.
    pub etcd: EtcdBuild,
    /// CoreDNS of this build.
    pub coredns: ImageRef,
    /// The CAPD node image.
    pub kind_node: Image,
}

/// etcd of an EKS-D build.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EtcdBuild {
    /// e.g. 3.5.21.
    pub version: String,
    /// Image repository.
    pub image_repository: String,
    /// Image tag.
    pub image_tag: String,
    /// Tarball used by etcdadm.
    pub release_url: String,
}

/// An image as repository and tag.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageRef {
    /// Repository.
    pub image_repository: String,
    /// Tag.
    pub image_tag: String,
}

/// An image URI.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
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

/// `{image: {uri}}`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ImageHolder {
    /// The image.
    pub image: Image,
}

/// `{version}`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VersionOnly {
    /// The version.
    pub version: String,
}

/// Cilium of a release.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CiliumBundle {
    /// Cilium version.
    pub version: String,
    /// The Helm chart.
    pub helm_chart: HelmChart,
    /// Agent image.
    pub cilium: Image,
    /// Operator image.
    pub operator: Image,
}

/// A Helm chart in an OCI repository.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HelmChart {
    /// Chart name.
    pub name: String,
    /// Repository URL.
    pub repository: String,
    /// Chart version.
    pub version: String,
}

/// vSphere images of a release.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VSphereBundle {
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
    /// One entry per Kubernetes minor.
    pub versions_bundles: Vec<VersionsBundle>,
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

    /// EKS-A's EKSARelease name: `eksa-` and the version with `.` → `-` and `+` → `-plus-`.
    pub fn eksa_release_name(&self) -> String {
        format!(
            "eksa-{}",
            self.version
                .to_string()
                .replace('+', "-plus-")
                .replace('.', "-")
        )
    }

    /// The EKSARelease object for the management cluster.
    pub fn eksa_release_object(&self, namespace: &str) -> Value {
        json!({
            "apiVersion": "anywhere.eks.amazonaws.com/v1alpha1",
            "kind": "EKSARelease",
            "metadata": {"name": self.eksa_release_name(), "namespace": namespace},
            "spec": {
                "releaseDate": self.date,
                "version": self.version.to_string(),
                "gitCommit": self.git_tag,
                "bundleManifestUrl": format!("{}.yaml", self.bundles_name),
                "bundlesRef": {"apiVersion": "anywhere.eks.amazonaws.com/v1alpha1", "name": self.bundles_name, "namespace": namespace},
            },
        })
    }
}

/// Every release capstan knows.
#[derive(Debug, Clone)]
pub struct ReleaseManifest {
    /// The newest release.
    pub latest: SemVer,
    /// Releases, oldest first.
    pub releases: Vec<Release>,
}

macro_rules! release_files {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../release/", $name))),)*]
    };
}

/// The files of the embedded release data.
const FILES: &[(&str, &str)] = release_files![
    "manifest.yaml",
    "bundles-85.yaml",
    "bundles-92.yaml",
    "bundles-98.yaml",
    "bundles-104.yaml"
];

impl ReleaseManifest {
    /// The manifest embedded in the binary.
    pub fn embedded() -> &'static ReleaseManifest {
        static M: OnceLock<ReleaseManifest> = OnceLock::new();
        M.get_or_init(|| {
            ReleaseManifest::from_files(FILES)
                .expect("embedded release data is checked by the test suite")
        })
    }

    /// Builds a manifest from `(file name, text)` pairs: one `manifest.yaml` and its bundles.
    pub fn from_files(files: &[(&str, &str)]) -> Result<ReleaseManifest, ReleaseError> {
        let invalid = |file: &str, message: String| ReleaseError::Invalid {
            file: file.to_string(),
            message,
        };
        let spec_of = |file: &str, kind: &str| -> Result<Value, ReleaseError> {
            let text = files
                .iter()
                .find(|(n, _)| *n == file)
                .map(|(_, t)| *t)
                .ok_or_else(|| invalid(file, "missing".into()))?;
            let docs = crate::yaml::parse(text).map_err(|e| invalid(file, e.to_string()))?;
            let doc = docs
                .into_iter()
                .next()
                .ok_or_else(|| invalid(file, "empty".into()))?;
            if doc.value.get("kind").and_then(Value::as_str) != Some(kind) {
                return Err(invalid(file, format!("expected kind {kind}")));
            }
            Ok(doc.value.get("spec").cloned().unwrap_or(Value::Null))
        };
        let spec: RawManifestSpec = serde_json::from_value(spec_of("manifest.yaml", "Release")?)
            .map_err(|e| invalid("manifest.yaml", e.to_string()))?;
        let mut releases = Vec::new();
        for r in spec.releases {
            let version = SemVer::parse(&r.version)
                .ok_or_else(|| invalid("manifest.yaml", format!("bad version {}", r.version)))?;
            let b: RawBundlesSpec =
                serde_json::from_value(spec_of(&r.bundle_manifest_url, "Bundles")?)
                    .map_err(|e| invalid(&r.bundle_manifest_url, e.to_string()))?;
            if b.number != r.number
                || b.cli_min_version != r.version
                || b.cli_max_version != r.version
            {
                return Err(invalid(
                    &r.bundle_manifest_url,
                    format!(
                        "bundle number or CLI versions do not match release {}",
                        r.version
                    ),
                ));
            }
            releases.push(Release {
                version,
                number: r.number,
                date: r.date,
                git_tag: r.git_tag,
                bundles_name: format!("bundles-{}", r.number),
                versions_bundles: b.versions_bundles,
            });
        }
        releases.sort_by(|a, b| a.version.cmp(&b.version));
        let latest = SemVer::parse(&spec.latest_version)
            .ok_or_else(|| invalid("manifest.yaml", "bad latestVersion".into()))?;
        Ok(ReleaseManifest { latest, releases })
    }

    /// The release of a version.
    pub fn find(&self, v: &SemVer) -> Option<&Release> {
        self.releases.iter().find(|r| r.version == *v)
    }

    /// The newest release.
    pub fn latest(&self) -> &Release {
        self.find(&self.latest)
            .unwrap_or_else(|| self.releases.last().expect("at least one release"))
    }

    /// Every version, e.g. "v0.25.2, v0.26.1".
    pub fn versions(&self) -> String {
        self.releases
            .iter()
            .map(|r| r.version.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Resolves the release of a cluster and checks the version rules.
    ///
    /// `management` is the release of the cluster's management cluster (None for a management
    /// cluster itself, or when the management cluster is broken). A cluster that names no version
    /// gets the management cluster's, and a management cluster that names none gets the latest.
    pub fn resolve<'a>(
        &'a self,
        cluster: &Cluster,
        management: Option<&Release>,
    ) -> (Option<&'a Release>, Vec<Diagnostic>) {
        let mut diags = Vec::new();
        let src = &cluster.source;
        let mut err = |code, path: &str, msg: String| {
            diags.push(
                Diagnostic::error(code, msg)
                    .in_file(&src.file)
                    .at(src.pos(path))
                    .for_cluster(&cluster.name),
            );
        };
        let release = if let Some(v) = &cluster.eksa_version {
            let parsed = SemVer::parse(v);
            match parsed.as_ref().and_then(|p| self.find(p)) {
                Some(r) => Some(r),
                None => {
                    err(
                        Code::UnknownVersion,
                        "spec.eksaVersion",
                        format!(
                            "eksaVersion `{v}` is not a known EKS Anywhere release; supported: {}",
                            self.versions()
                        ),
                    );
                    None
                }
            }
        } else if let Some(b) = &cluster.bundles_ref {
            match self.releases.iter().find(|r| r.bundles_name == *b) {
                Some(r) => Some(r),
                None => {
                    let known = self
                        .releases
                        .iter()
                        .map(|r| r.bundles_name.as_str())
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
            Some(self.latest())
        } else {
            management.and_then(|m| self.find(&m.version))
        };
        let Some(release) = release else {
            return (None, diags);
        };
        let path = if cluster.eksa_version.is_some() {
            "spec.eksaVersion"
        } else if cluster.bundles_ref.is_some() {
            "spec.bundlesRef"
        } else {
            "spec"
        };
        if let (Some(m), false) = (management, cluster.is_self_managed()) {
            let (w, mv) = (&release.version, &m.version);
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
        let ok = diags.is_empty();
        (ok.then_some(release), diags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_manifest_loads() {
        let m = ReleaseManifest::embedded();
        assert!(m.releases.len() >= 3);
        assert_eq!(m.latest().version, m.latest);
        for r in &m.releases {
            assert!(!r.versions_bundles.is_empty());
            assert!(r.eksa_release_name().starts_with("eksa-v0-"));
        }
    }

    #[test]
    fn release_names_follow_eksa() {
        let m = ReleaseManifest::embedded();
        let r = m.find(&SemVer::parse("v0.26.1").unwrap()).unwrap();
        assert_eq!(r.eksa_release_name(), "eksa-v0-26-1");
        let mut dev = r.clone();
        dev.version = SemVer::parse("v0.19.0-dev+latest").unwrap();
        assert_eq!(dev.eksa_release_name(), "eksa-v0-19-0-dev-plus-latest");
    }

    #[test]
    fn semver_parses_and_orders() {
        assert!(SemVer::parse("0.26.1").is_none());
        assert!(SemVer::parse("v0.26").is_none());
        assert!(SemVer::parse("v0.25.9").unwrap() < SemVer::parse("v0.26.0").unwrap());
    }
}
