//! Cluster API, its providers and EKS Anywhere's controller installed into a cluster from the
//! components manifests a release names: what `clusterctl init` (or EKS-A's create) does to a
//! cluster before it can manage others, for `capstan pivot`'s new management cluster.
//!
//! ```text
//!   Bundles (the management cluster's release and Kubernetes minor)
//!     └─ components::for_provider ─▶ [cert-manager, cluster-api, kubeadm-…, etcdadm-…, <infra>, eks-anywhere]
//!          (+ the Helm add-on provider's manifest, which EKS-A's bundles do not name)
//!   read every manifest   repo: paths from the checkout; https only with a pin in fleet.yaml
//!   fill the variables    clusterctl's ${NAME:=default}, from the environment; all missing ones named
//!   apply                 server-side, field manager `capstan-components`, each object labelled
//!                         `capstan.dev/component: <name>`; CRDs waited for until served
//!   wait                  every labelled Deployment Available, or the ones that are not, named
//! ```
//!
//! Nothing is applied until every manifest is read, matches its pin, parses and has its
//! variables: a bad document leaves the cluster as it was. Re-running applies the same objects
//! again (no change) and waits again, so a run that timed out goes on where it stopped.
//!
//! An https manifest needs a pin because it is a cluster-admin grant: its RBAC, webhooks and
//! Deployments run with the new management cluster's widest rights, and the bytes are checked
//! before any of them is written.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use capstan_layout::tree::{Entry, Tree};
use capstan_templates::release::components::substitute;
use capstan_templates::release::{Component, Location, Release, VersionsBundle, sha256_hex};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::Value;

use crate::install::InstallError;

/// The field manager of the components' objects.
pub const FIELD_MANAGER: &str = "capstan-components";
/// The label every object installed from a components manifest carries: its component's name.
pub const COMPONENT_LABEL: &str = "capstan.dev/component";
/// The name of the Helm add-on provider's component.
pub const ADDON_PROVIDER: &str = "addon-helm";

/// Why the components could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum ComponentsError {
    /// The release does not name what the provider needs.
    #[error("the release {release} cannot install a {provider} management cluster:\n  {}", .problems.join("\n  "))]
    Release {
        /// The release version.
        release: String,
        /// The provider.
        provider: String,
        /// Each missing or unreadable field.
        problems: Vec<String>,
    },
    /// A manifest could not be read.
    #[error("{component}: reading {location}: {message}")]
    Read {
        /// The component.
        component: String,
        /// Where.
        location: String,
        /// Why.
        message: String,
    },
    /// An https manifest without a pin.
    #[error(
        "{component}: {location} has no sha256 pin in the fleet config's release.pins: a components manifest grants cluster-admin rights and is applied only when its bytes are pinned"
    )]
    Unpinned {
        /// The component.
        component: String,
        /// Where.
        location: String,
    },
    /// A manifest does not match its pin.
    #[error("{component}: {location} does not match its pin (sha256 {actual})")]
    Mismatch {
        /// The component.
        component: String,
        /// Where.
        location: String,
        /// Its actual sha256.
        actual: String,
    },
    /// Variables the manifests need and the environment does not set.
    #[error("{component}: set the variables it needs (as for clusterctl init): {}", .names.join(", "))]
    Variables {
        /// The component.
        component: String,
        /// The unset variables.
        names: Vec<String>,
    },
    /// A manifest is not YAML of Kubernetes objects.
    #[error("{component}: {location}:{line}: {message}")]
    Parse {
        /// The component.
        component: String,
        /// Where.
        location: String,
        /// The line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// Applying failed.
    #[error(transparent)]
    Apply(#[from] InstallError),
    /// Listing the Deployments failed.
    #[error("listing the components' Deployments: {0}")]
    Api(#[source] kube::Error),
    /// Deployments that did not become Available in time.
    #[error("not Available after {}s: {}", .waited.as_secs(), .deployments.join(", "))]
    NotAvailable {
        /// How long was waited.
        waited: Duration,
        /// namespace/name of each.
        deployments: Vec<String>,
    },
}

/// One component's manifest, read.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// The component's name.
    pub name: String,
    /// Where it was read.
    pub location: String,
    /// Its text.
    pub text: String,
}

/// The components a management cluster of `release` and `bundle` needs for `provider`, in
/// install order, with the add-on provider's manifest (`addon`) before EKS Anywhere's.
pub fn wanted(
    release: &Release,
    bundle: &VersionsBundle,
    provider: &str,
    addon: Option<&Location>,
) -> Result<Vec<Component>, ComponentsError> {
    let mut list = bundle
        .components
        .for_provider(provider, &release.bundles_location)
        .map_err(|problems| ComponentsError::Release {
            release: release.version.to_string(),
            provider: provider.to_string(),
            problems,
        })?;
    if let Some(at) = addon {
        let last = list.len().saturating_sub(1);
        list.insert(
            last,
            Component {
                name: ADDON_PROVIDER,
                location: at.clone(),
            },
        );
    }
    Ok(list)
}

/// Reads every manifest: `repo:` locations from the `tree` of `checkout`, https ones over the network (with
/// the disk cache of release documents) where `pins` pins them. Blocking.
pub fn read(
    checkout: &Path,
    tree: &Tree,
    components: &[Component],
    pins: &BTreeMap<Location, String>,
) -> Result<Vec<Manifest>, ComponentsError> {
    let mut out = Vec::new();
    let mut fetcher = None;
    for c in components {
        let err = |message: String| ComponentsError::Read {
            component: c.name.to_string(),
            location: c.location.to_string(),
            message,
        };
        let text = if let Some(path) = c.location.repo_path() {
            // From the tree the fleet was loaded from (which never follows a link out of it).
            let bytes = match tree.entries.get(Path::new(path)) {
                Some(Entry::File(bytes)) => bytes.clone(),
                // A regular file of the tree over the layout's size limit (Cluster API's
                // CRDs make a components manifest a few MiB): read up to the release
                // documents' limit.
                Some(Entry::TooLarge(size)) if *size <= crate::source::release::MAX_DOCUMENT => {
                    std::fs::read(checkout.join(path)).map_err(|e| err(e.to_string()))?
                }
                Some(Entry::TooLarge(size)) => {
                    return Err(err(format!(
                        "{size} bytes, over the limit of {}",
                        crate::source::release::MAX_DOCUMENT
                    )));
                }
                _ => return Err(err("no such file in the checkout".into())),
            };
            String::from_utf8(bytes).map_err(|_| err("not UTF-8 text".into()))?
        } else if c.location.is_remote() {
            let Some(pin) = pins.get(&c.location) else {
                return Err(ComponentsError::Unpinned {
                    component: c.name.to_string(),
                    location: c.location.to_string(),
                });
            };
            let f = match &mut fetcher {
                Some(f) => f,
                None => fetcher.insert(
                    crate::source::release::ReleaseFetcher::new(
                        &crate::source::release::ReleaseFetcher::default_cache_dir(),
                        None,
                    )
                    .map_err(|e| err(e.to_string()))?,
                ),
            };
            f.fetch(vec![(c.location.clone(), Some(pin.clone()))]);
            match f.fetched.docs.get(&c.location) {
                Some(t) => t.clone(),
                None => {
                    return Err(err(f
                        .fetched
                        .failures
                        .get(&c.location)
                        .cloned()
                        .unwrap_or_else(|| "not fetched".into())));
                }
            }
        } else {
            return Err(err(
                "capstan's sample release data names no real manifests: name a published release in the fleet config".into(),
            ));
        };
        if let Some(pin) = pins.get(&c.location) {
            let actual = sha256_hex(text.as_bytes());
            if actual != *pin {
                return Err(ComponentsError::Mismatch {
                    component: c.name.to_string(),
                    location: c.location.to_string(),
                    actual,
                });
            }
        }
        out.push(Manifest {
            name: c.name.to_string(),
            location: c.location.to_string(),
            text,
        });
    }
    Ok(out)
}

/// The objects of every manifest, variables filled by `lookup`, each labelled with its
/// component, in apply order: every CRD first (a component's objects may be of another's
/// kinds: cert-manager's Certificates), then every Namespace, then the rest in manifest order.
pub fn objects(
    manifests: &[Manifest],
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Vec<Value>, ComponentsError> {
    let (mut crds, mut namespaces, mut rest) = (Vec::new(), Vec::new(), Vec::new());
    for m in manifests {
        let text = substitute(&m.text, &lookup).map_err(|names| ComponentsError::Variables {
            component: m.name.clone(),
            names,
        })?;
        let docs = capstan_templates::yaml::parse(&text).map_err(|e| ComponentsError::Parse {
            component: m.name.clone(),
            location: m.location.clone(),
            line: e.pos.line,
            message: e.message,
        })?;
        for doc in docs {
            let mut obj = doc.value;
            let (kind, name) = (
                obj["kind"].as_str().unwrap_or_default().to_string(),
                obj.pointer("/metadata/name").and_then(Value::as_str),
            );
            if obj["apiVersion"].as_str().is_none() || kind.is_empty() || name.is_none() {
                return Err(ComponentsError::Parse {
                    component: m.name.clone(),
                    location: m.location.clone(),
                    line: doc.start.line,
                    message: "not a Kubernetes object (apiVersion, kind and metadata.name)".into(),
                });
            }
            let labels = &mut obj["metadata"]["labels"];
            if !labels.is_object() {
                *labels = Value::Object(Default::default());
            }
            labels[COMPONENT_LABEL] = Value::String(m.name.clone());
            match kind.as_str() {
                "CustomResourceDefinition" => crds.push(obj),
                "Namespace" => namespaces.push(obj),
                _ => rest.push(obj),
            }
        }
    }
    crds.extend(namespaces);
    crds.extend(rest);
    Ok(crds)
}

/// Waits until every Deployment labelled [`COMPONENT_LABEL`] is Available.
pub async fn wait_available(client: &Client, wait: Duration) -> Result<(), ComponentsError> {
    let api: Api<Deployment> = Api::all(client.clone());
    let lp = ListParams::default().labels(COMPONENT_LABEL);
    let deadline = tokio::time::Instant::now() + wait;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let list = api.list(&lp).await.map_err(ComponentsError::Api)?;
        let waiting: Vec<String> = list
            .items
            .iter()
            .filter(|d| !available(d))
            .map(|d| {
                format!(
                    "Deployment/{}/{}",
                    d.metadata.namespace.as_deref().unwrap_or_default(),
                    d.metadata.name.as_deref().unwrap_or_default()
                )
            })
            .collect();
        if waiting.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ComponentsError::NotAvailable {
                waited: wait,
                deployments: waiting,
            });
        }
    }
}

fn available(d: &Deployment) -> bool {
    d.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Available" && c.status == "True")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(name: &str, text: &str) -> Manifest {
        Manifest {
            name: name.into(),
            location: format!("repo:/{name}.yaml"),
            text: text.into(),
        }
    }

    #[test]
    fn crds_go_first_then_namespaces_and_every_object_is_labelled() {
        let a = manifest(
            "cert-manager",
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: cert-manager\n---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: certificates.cert-manager.io\n",
        );
        let b = manifest(
            "cluster-api",
            "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata:\n  name: serving-cert\n  namespace: capi-system\n  labels: {a: b}\n---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: clusters.cluster.x-k8s.io\n",
        );
        let objs = objects(&[a, b], |_| None).unwrap();
        let kinds: Vec<_> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "CustomResourceDefinition",
                "CustomResourceDefinition",
                "Namespace",
                "Certificate"
            ]
        );
        assert_eq!(objs[3]["metadata"]["labels"]["a"], "b");
        assert_eq!(
            objs[3]["metadata"]["labels"][COMPONENT_LABEL],
            "cluster-api"
        );
        assert_eq!(
            objs[2]["metadata"]["labels"][COMPONENT_LABEL],
            "cert-manager"
        );
    }

    #[test]
    fn a_missing_variable_is_named_with_its_component_and_nothing_comes_back() {
        let m = manifest(
            "vsphere",
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\nstringData:\n  username: ${VSPHERE_USERNAME}\n  password: ${VSPHERE_PASSWORD}\n",
        );
        let err = objects(&[m], |_| None).unwrap_err().to_string();
        assert_eq!(
            err,
            "vsphere: set the variables it needs (as for clusterctl init): VSPHERE_PASSWORD, VSPHERE_USERNAME"
        );
    }

    fn component(location: &str) -> Component {
        Component {
            name: "cluster-api",
            location: Location::parse(location).unwrap(),
        }
    }

    #[test]
    fn https_manifests_need_a_pin_and_sample_data_is_refused() {
        let tree = Tree::new();
        let none = BTreeMap::new();
        let err = read(
            Path::new("/nonexistent"),
            &tree,
            &[component("https://example.com/core-components.yaml")],
            &none,
        )
        .unwrap_err();
        assert!(matches!(err, ComponentsError::Unpinned { .. }), "{err}");
        assert!(err.to_string().contains("has no sha256 pin"), "{err}");
        let err = read(
            Path::new("/nonexistent"),
            &tree,
            &[component("capstan-sample:/core-components.yaml")],
            &none,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("sample release data names no real manifests"),
            "{err}"
        );
    }

    #[test]
    fn a_repository_manifest_is_read_from_the_tree_and_checked_against_its_pin() {
        let mut tree = Tree::new();
        tree.insert(
            "release/core.yaml",
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n",
        );
        let c = component("repo:/release/core.yaml");
        let read_with = |pins: &BTreeMap<Location, String>| {
            read(
                Path::new("/nonexistent"),
                &tree,
                std::slice::from_ref(&c),
                pins,
            )
        };
        assert_eq!(read_with(&BTreeMap::new()).unwrap()[0].name, "cluster-api");
        let pins = BTreeMap::from([(c.location.clone(), "0".repeat(64))]);
        let err = read_with(&pins).unwrap_err();
        assert!(matches!(err, ComponentsError::Mismatch { .. }), "{err}");
        let missing = read(
            Path::new("/nonexistent"),
            &tree,
            &[component("repo:/release/none.yaml")],
            &BTreeMap::new(),
        )
        .unwrap_err();
        assert!(
            missing.to_string().contains("no such file in the checkout"),
            "{missing}"
        );
    }

    #[test]
    fn a_document_that_is_not_an_object_is_refused_at_its_line() {
        let m = manifest(
            "docker",
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\nfoo: bar\n",
        );
        let err = objects(&[m], |_| None).unwrap_err().to_string();
        assert!(
            err.starts_with("docker: repo:/docker.yaml:6: not a Kubernetes object"),
            "{err}"
        );
    }
}
