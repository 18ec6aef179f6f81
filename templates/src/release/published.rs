//! EKS Anywhere's and EKS Distro's published release documents, as they are written.
//!
//! Three documents make a release usable:
//!
//! ```text
//!   Release manifest (anywhere.eks.amazonaws.com Release)   every EKS-A release: version, number, bundleManifestUrl
//!        │ bundleManifestUrl
//!        ▼
//!   Bundles (anywhere.eks.amazonaws.com Bundles)            per Kubernetes minor: EKS-D name and manifestUrl,
//!        │ versionsBundles[].eksD.manifestUrl                 kind node, haproxy, kube-vip, CPI manager, Cilium
//!        ▼
//!   EKS-D Release (distro.eks.amazonaws.com Release)         the Kubernetes build: kube-apiserver, etcd, CoreDNS,
//!                                                            pause images, the etcd tarball
//! ```
//!
//! Only the fields capstan reads are declared, and unknown fields are ignored: these documents
//! grow with every EKS-A release, and a field capstan does not use must not break it. A field it
//! does use and that is missing is an error naming the document. Images are resolved the way EKS
//! Anywhere resolves them (`pkg/cluster/spec.go`): an EKS-D image's repository is its URI without
//! the tag and the last path element, its tag the part after the last `:`.

use serde::Deserialize;
use serde_json::Value;

use super::{
    Chart, CiliumBundle, Components, EksD, EtcdBuild, Image, ImageRef, NutanixBundle, ReleaseError,
    TinkerbellBundle, VSphereBundle, VersionsBundle,
};

/// `spec` of the EKS-A Release manifest.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ManifestSpec {
    pub latest_version: String,
    pub releases: Vec<ManifestRelease>,
}

/// One entry of the Release manifest.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ManifestRelease {
    pub version: String,
    pub number: u32,
    #[serde(default)]
    pub date: String,
    #[serde(default)]
    pub git_tag: String,
    pub bundle_manifest_url: String,
}

/// `spec` of a Bundles manifest.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BundlesSpec {
    pub number: u32,
    #[serde(default)]
    pub cli_min_version: String,
    #[serde(default)]
    pub cli_max_version: String,
    pub versions_bundles: Vec<RawVersionsBundle>,
}

/// One `versionsBundles` entry, as published.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawVersionsBundle {
    pub kube_version: String,
    #[serde(default)]
    pub end_of_standard_support: String,
    pub eks_d: RawEksD,
    pub cilium: RawCilium,
    #[serde(rename = "clusterAPI")]
    pub cluster_api: Versioned,
    #[serde(default)]
    pub cert_manager: Option<RawCertManager>,
    #[serde(default)]
    pub bootstrap: Option<WithComponents>,
    #[serde(default)]
    pub control_plane: Option<WithComponents>,
    #[serde(default)]
    pub etcdadm_bootstrap: Option<WithComponents>,
    #[serde(default)]
    pub etcdadm_controller: Option<WithComponents>,
    #[serde(default)]
    pub docker: Option<WithComponents>,
    pub haproxy: ImageHolder,
    #[serde(rename = "vSphere")]
    pub vsphere: RawVSphere,
    pub nutanix: RawNutanix,
    pub tinkerbell: RawTinkerbell,
    #[serde(default)]
    pub eksa: Option<RawEksa>,
    #[serde(default)]
    pub package_controller: Option<RawPackageController>,
}

/// `packageController` of a versions bundle (only its Helm chart is read).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawPackageController {
    #[serde(default)]
    pub helm_chart: Option<Chart>,
}

/// `eksa` of a versions bundle (only the diagnostic collector is read).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawEksa {
    #[serde(default)]
    pub diagnostic_collector: Option<Image>,
    #[serde(default)]
    pub components: Option<Uri>,
}

/// `eksD` of a versions bundle.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawEksD {
    pub name: String,
    #[serde(default)]
    pub channel: String,
    pub kube_version: String,
    pub manifest_url: String,
    pub kind_node: Image,
}

/// `cilium` of a versions bundle.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawCilium {
    #[serde(default)]
    pub version: String,
    pub cilium: Image,
    pub operator: Image,
    pub helm_chart: Image,
}

/// `vSphere` of a versions bundle.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawVSphere {
    pub kube_vip: Image,
    pub manager: Image,
    #[serde(default)]
    pub components: Option<Uri>,
}

/// `nutanix` of a versions bundle.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawNutanix {
    pub kube_vip: Image,
    pub cloud_provider: Image,
    #[serde(default)]
    pub components: Option<Uri>,
}

/// `tinkerbell` of a versions bundle.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawTinkerbell {
    pub kube_vip: Image,
    #[serde(default)]
    pub components: Option<Uri>,
}

/// `{version}`.
#[derive(Debug, Deserialize)]
pub(crate) struct Versioned {
    pub version: String,
    #[serde(default)]
    pub components: Option<Uri>,
}

/// `{uri}`: a manifest of a bundle.
#[derive(Debug, Deserialize)]
pub(crate) struct Uri {
    pub uri: String,
}

/// A provider entry of a bundle, of which only its components manifest is read.
#[derive(Debug, Deserialize)]
pub(crate) struct WithComponents {
    #[serde(default)]
    pub components: Option<Uri>,
}

/// `certManager` of a versions bundle (only its manifest is read).
#[derive(Debug, Deserialize)]
pub(crate) struct RawCertManager {
    #[serde(default)]
    pub manifest: Option<Uri>,
}

/// `{image: {uri}}`.
#[derive(Debug, Deserialize)]
pub(crate) struct ImageHolder {
    pub image: Image,
}

/// An EKS-D release manifest (`distro.eks.amazonaws.com/v1alpha1` Release).
#[derive(Debug, Deserialize)]
pub(crate) struct EksDRelease {
    pub status: EksDStatus,
}

#[derive(Debug, Deserialize)]
pub(crate) struct EksDStatus {
    #[serde(default)]
    pub components: Vec<EksDComponent>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EksDComponent {
    pub name: String,
    #[serde(default)]
    pub git_tag: String,
    #[serde(default)]
    pub assets: Vec<EksDAsset>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct EksDAsset {
    pub name: String,
    #[serde(default)]
    pub arch: Vec<String>,
    #[serde(default)]
    pub image: Option<Image>,
    #[serde(default)]
    pub archive: Option<Image>,
}

/// The `spec` of a document of `kind`, or an error naming `location`.
pub(crate) fn spec_of<T: serde::de::DeserializeOwned>(
    location: &str,
    text: &str,
    kind: &str,
    part: &str,
) -> Result<T, ReleaseError> {
    let invalid = |message: String| ReleaseError::Invalid {
        location: location.to_string(),
        message,
    };
    let docs = crate::yaml::parse(text).map_err(|e| invalid(e.to_string()))?;
    let doc = docs
        .into_iter()
        .find(|d| d.value.get("kind").and_then(Value::as_str) == Some(kind))
        .ok_or_else(|| invalid(format!("no {kind} document")))?;
    let value = if part.is_empty() {
        doc.value
    } else {
        doc.value.get(part).cloned().unwrap_or(Value::Null)
    };
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        invalid(format!("{kind} {part}.{path}: {}", e.inner()))
    })
}

/// The repository of an EKS-D image as EKS Anywhere uses it: the URI without its tag and its
/// last path element (`…/kubernetes/kube-apiserver:v1.31.2-eks-1-31-5` → `…/kubernetes`).
fn distro_repository(image: &Image) -> (String, String) {
    let (repo, tag) = image.split();
    let repo = repo.rsplit_once('/').map(|(r, _)| r).unwrap_or(repo);
    (repo.to_string(), tag.to_string())
}

fn uri_of(p: Option<WithComponents>) -> Option<String> {
    p.and_then(|p| p.components).map(|u| u.uri)
}

impl RawVersionsBundle {
    /// Combines the bundle entry with its EKS-D release into what the renderer uses.
    pub(crate) fn resolve(
        self,
        eksd: &EksDRelease,
        eksd_location: &str,
    ) -> Result<VersionsBundle, ReleaseError> {
        let missing = |what: &str| ReleaseError::Invalid {
            location: eksd_location.to_string(),
            message: format!("EKS-D release has no {what}"),
        };
        let asset = |name: &str| {
            eksd.status
                .components
                .iter()
                .flat_map(|c| c.assets.iter())
                .find(|a| a.name == name)
                .and_then(|a| a.image.clone())
                .ok_or_else(|| missing(name))
        };
        let apiserver = asset("kube-apiserver-image")?;
        let etcd_image = asset("etcd-image")?;
        let coredns = asset("coredns-image")?;
        let pause = asset("pause-image")?;
        let aws_iam_auth = asset("aws-iam-authenticator-image").ok();
        let etcd = eksd
            .status
            .components
            .iter()
            .find(|c| c.name == "etcd")
            .ok_or_else(|| missing("etcd component"))?;
        let etcd_url = etcd
            .assets
            .iter()
            .find(|a| a.arch.first().map(String::as_str) == Some("amd64") && a.archive.is_some())
            .and_then(|a| a.archive.as_ref())
            .map(|a| a.uri.clone())
            .unwrap_or_default();
        let (kube_repo, kube_tag) = distro_repository(&apiserver);
        let (etcd_repo, etcd_tag) = distro_repository(&etcd_image);
        let (coredns_repo, coredns_tag) = distro_repository(&coredns);
        Ok(VersionsBundle {
            kube_version: self.kube_version,
            end_of_standard_support: self.end_of_standard_support,
            eks_d: EksD {
                name: self.eks_d.name,
                channel: self.eks_d.channel,
                kube_version: self.eks_d.kube_version,
                tag: kube_tag,
                image_repository: kube_repo,
                etcd: EtcdBuild {
                    version: etcd.git_tag.trim_start_matches('v').to_string(),
                    image_repository: etcd_repo,
                    image_tag: etcd_tag,
                    release_url: etcd_url,
                },
                coredns: ImageRef {
                    image_repository: coredns_repo,
                    image_tag: coredns_tag,
                },
                pause,
                kind_node: self.eks_d.kind_node,
                aws_iam_auth,
            },
            cilium: CiliumBundle {
                version: self.cilium.version,
                cilium: self.cilium.cilium,
                operator: self.cilium.operator,
                helm_chart: self.cilium.helm_chart,
            },
            components: Components {
                cert_manager: self.cert_manager.and_then(|c| c.manifest).map(|u| u.uri),
                core: self.cluster_api.components.map(|u| u.uri),
                bootstrap: uri_of(self.bootstrap),
                control_plane: uri_of(self.control_plane),
                etcdadm_bootstrap: uri_of(self.etcdadm_bootstrap),
                etcdadm_controller: uri_of(self.etcdadm_controller),
                docker: uri_of(self.docker),
                vsphere: self.vsphere.components.map(|u| u.uri),
                nutanix: self.nutanix.components.map(|u| u.uri),
                tinkerbell: self.tinkerbell.components.map(|u| u.uri),
                eksa: self
                    .eksa
                    .as_ref()
                    .and_then(|e| e.components.as_ref())
                    .map(|u| u.uri.clone()),
            },
            cluster_api_version: self.cluster_api.version,
            haproxy: self.haproxy.image,
            vsphere: VSphereBundle {
                kube_vip: self.vsphere.kube_vip,
                manager: self.vsphere.manager,
            },
            nutanix: NutanixBundle {
                kube_vip: self.nutanix.kube_vip,
                cloud_provider: self.nutanix.cloud_provider,
            },
            tinkerbell: TinkerbellBundle {
                kube_vip: self.tinkerbell.kube_vip,
            },
            diagnostic_collector: self.eksa.and_then(|e| e.diagnostic_collector),
            package_chart: self.package_controller.and_then(|p| p.helm_chart),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distro_repositories_drop_the_image_name() {
        let i = Image {
            uri: "public.ecr.aws/eks-distro/kubernetes/kube-apiserver:v1.31.2-eks-1-31-5".into(),
        };
        assert_eq!(
            distro_repository(&i),
            (
                "public.ecr.aws/eks-distro/kubernetes".into(),
                "v1.31.2-eks-1-31-5".into()
            )
        );
    }
}
