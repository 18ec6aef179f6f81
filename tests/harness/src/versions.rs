//! The pinned versions, embedded at compile time.
//!
//! The Go wrapper modules under `tests/control-plane/` are the source of truth: they are
//! what `go build` / `go mod download` act on. This module embeds them with `include_str!`
//! so that
//! * the build cache key changes exactly when a pinned version (or a checksum) changes, and
//! * a test binary never depends on the current working directory to find them.
//!
//! `versions.env` is the human-facing summary; [`check_versions_env`] (run by a unit test)
//! makes sure it does not drift from the `go.mod` files.

use std::collections::BTreeMap;

/// One file of a Go wrapper module: its name inside the module directory and its contents.
#[derive(Debug, Clone, Copy)]
pub struct EmbeddedFile {
    /// File name relative to the module directory (`go.mod`, `go.sum`, `tools.go`).
    pub name: &'static str,
    /// Contents as committed.
    pub contents: &'static str,
}

/// A Go wrapper module embedded in the harness.
#[derive(Debug, Clone, Copy)]
pub struct EmbeddedModule {
    /// Directory name under `tests/control-plane/` (and under the cache's `src/`).
    pub dir: &'static str,
    /// Its files.
    pub files: &'static [EmbeddedFile],
}

/// `tests/control-plane/kube-apiserver`.
pub const KUBE_APISERVER_MODULE: EmbeddedModule = EmbeddedModule {
    dir: "kube-apiserver",
    files: &[
        EmbeddedFile {
            name: "go.mod",
            contents: include_str!("../../control-plane/kube-apiserver/go.mod"),
        },
        EmbeddedFile {
            name: "go.sum",
            contents: include_str!("../../control-plane/kube-apiserver/go.sum"),
        },
    ],
};

/// `tests/control-plane/etcd`.
pub const ETCD_MODULE: EmbeddedModule = EmbeddedModule {
    dir: "etcd",
    files: &[
        EmbeddedFile {
            name: "go.mod",
            contents: include_str!("../../control-plane/etcd/go.mod"),
        },
        EmbeddedFile {
            name: "go.sum",
            contents: include_str!("../../control-plane/etcd/go.sum"),
        },
    ],
};

/// `tests/control-plane/flux`: kustomize-controller and its non-local replace directives.
pub const FLUX_MODULE: EmbeddedModule = EmbeddedModule {
    dir: "flux",
    files: &[
        EmbeddedFile {
            name: "go.mod",
            contents: include_str!("../../control-plane/flux/go.mod"),
        },
        EmbeddedFile {
            name: "go.sum",
            contents: include_str!("../../control-plane/flux/go.sum"),
        },
    ],
};

/// `tests/control-plane/crds`.
pub const CRDS_MODULE: EmbeddedModule = EmbeddedModule {
    dir: "crds",
    files: &[
        EmbeddedFile {
            name: "go.mod",
            contents: include_str!("../../control-plane/crds/go.mod"),
        },
        EmbeddedFile {
            name: "go.sum",
            contents: include_str!("../../control-plane/crds/go.sum"),
        },
        EmbeddedFile {
            name: "tools.go",
            contents: include_str!("../../control-plane/crds/tools.go"),
        },
    ],
};

/// `tests/control-plane/capi`: the Cluster API managers (core, kubeadm bootstrap, kubeadm
/// control plane, CAPD).
pub const CAPI_MODULE: EmbeddedModule = EmbeddedModule {
    dir: "capi",
    files: &[
        EmbeddedFile {
            name: "go.mod",
            contents: include_str!("../../control-plane/capi/go.mod"),
        },
        EmbeddedFile {
            name: "go.sum",
            contents: include_str!("../../control-plane/capi/go.sum"),
        },
    ],
};

/// `tests/control-plane/actionlint`: actionlint, which checks the GitHub Actions example.
pub const ACTIONLINT_MODULE: EmbeddedModule = EmbeddedModule {
    dir: "actionlint",
    files: &[
        EmbeddedFile {
            name: "go.mod",
            contents: include_str!("../../control-plane/actionlint/go.mod"),
        },
        EmbeddedFile {
            name: "go.sum",
            contents: include_str!("../../control-plane/actionlint/go.sum"),
        },
        EmbeddedFile {
            name: "tools.go",
            contents: include_str!("../../control-plane/actionlint/tools.go"),
        },
    ],
};

/// `tests/control-plane/sops`: sops, which writes the encrypted files capstan's SOPS reader is
/// checked against.
pub const SOPS_MODULE: EmbeddedModule = EmbeddedModule {
    dir: "sops",
    files: &[
        EmbeddedFile {
            name: "go.mod",
            contents: include_str!("../../control-plane/sops/go.mod"),
        },
        EmbeddedFile {
            name: "go.sum",
            contents: include_str!("../../control-plane/sops/go.sum"),
        },
        EmbeddedFile {
            name: "tools.go",
            contents: include_str!("../../control-plane/sops/tools.go"),
        },
    ],
};

/// `tests/eksa-oracle`: EKS Anywhere's own renderer, the oracle of capstan's differential render
/// test, with capstan's stand-in for the CloudStack provider module EKS Anywhere's module zip
/// leaves out (`capc/`) and for the Cluster API package path upstream CAPX imports, which EKS
/// Anywhere's Cluster API fork has elsewhere (`capi-v1beta1/`).
pub const EKSA_ORACLE_MODULE: EmbeddedModule = EmbeddedModule {
    dir: "eksa-oracle",
    files: &[
        EmbeddedFile {
            name: "go.mod",
            contents: include_str!("../../eksa-oracle/go.mod"),
        },
        EmbeddedFile {
            name: "go.sum",
            contents: include_str!("../../eksa-oracle/go.sum"),
        },
        EmbeddedFile {
            name: "main.go",
            contents: include_str!("../../eksa-oracle/main.go"),
        },
        EmbeddedFile {
            name: "packages.go",
            contents: include_str!("../../eksa-oracle/packages.go"),
        },
        EmbeddedFile {
            name: "capc/go.mod",
            contents: include_str!("../../eksa-oracle/capc/go.mod"),
        },
        EmbeddedFile {
            name: "capc/api/v1beta3/stand_in.go",
            contents: include_str!("../../eksa-oracle/capc/api/v1beta3/stand_in.go"),
        },
        EmbeddedFile {
            name: "capi-v1beta1/go.mod",
            contents: include_str!("../../eksa-oracle/capi-v1beta1/go.mod"),
        },
        EmbeddedFile {
            name: "capi-v1beta1/stand_in.go",
            contents: include_str!("../../eksa-oracle/capi-v1beta1/stand_in.go"),
        },
    ],
};

/// `tests/gotemplate-oracle`: Go's text/template with Sprig's function map, the oracle of
/// capstan's Go template parser.
pub const GOTEMPLATE_ORACLE_MODULE: EmbeddedModule = EmbeddedModule {
    dir: "gotemplate-oracle",
    files: &[
        EmbeddedFile {
            name: "go.mod",
            contents: include_str!("../../gotemplate-oracle/go.mod"),
        },
        EmbeddedFile {
            name: "go.sum",
            contents: include_str!("../../gotemplate-oracle/go.sum"),
        },
        EmbeddedFile {
            name: "main.go",
            contents: include_str!("../../gotemplate-oracle/main.go"),
        },
    ],
};

/// `tests/control-plane/versions.env`.
pub const VERSIONS_ENV: &str = include_str!("../../control-plane/versions.env");

/// The module paths whose version the binaries report.
const KUBERNETES_MODULE: &str = "k8s.io/kubernetes";
const ETCD_SERVER_MODULE: &str = "go.etcd.io/etcd/server/v3";

/// Versions of the two binaries, as pinned in their `go.mod` files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    /// `k8s.io/kubernetes` version, e.g. `v1.34.4`.
    pub kubernetes: String,
    /// `go.etcd.io/etcd/server/v3` version, e.g. `v3.6.16`.
    pub etcd: String,
}

/// Errors about the embedded version pins.
#[derive(Debug, thiserror::Error)]
pub enum VersionsError {
    /// A `go.mod` does not mention a module it must pin.
    #[error("{module} is not pinned in tests/control-plane/{dir}/go.mod")]
    NotPinned { module: String, dir: &'static str },
    /// A version string does not look like `vMAJOR.MINOR.PATCH`.
    #[error("cannot parse version {0:?}")]
    BadVersion(String),
    /// versions.env disagrees with a go.mod.
    #[error("versions.env says {key}={env} but go.mod pins {module} {gomod}")]
    Drift {
        key: String,
        env: String,
        module: String,
        gomod: String,
    },
    /// versions.env lacks a key.
    #[error("versions.env has no {0}")]
    MissingKey(String),
}

/// The versions pinned by the embedded `go.mod` files.
pub fn versions() -> Result<Versions, VersionsError> {
    Ok(Versions {
        kubernetes: module_version(&KUBE_APISERVER_MODULE, KUBERNETES_MODULE)?,
        etcd: module_version(&ETCD_MODULE, ETCD_SERVER_MODULE)?,
    })
}

/// `(major, minor)` of a `vMAJOR.MINOR.PATCH` version string.
pub fn major_minor(version: &str) -> Result<(u32, u32), VersionsError> {
    let bad = || VersionsError::BadVersion(version.to_owned());
    let mut parts = version.strip_prefix('v').ok_or_else(bad)?.split('.');
    let major = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    let minor = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    Ok((major, minor))
}

/// The version `module` resolves to in `m`'s go.mod: a `replace` target wins over `require`.
pub fn module_version(m: &EmbeddedModule, module: &str) -> Result<String, VersionsError> {
    let go_mod = m
        .files
        .iter()
        .find(|f| f.name == "go.mod")
        .map(|f| f.contents)
        .unwrap_or("");
    let mut required = None;
    let mut replaced = None;
    let mut block: Option<&str> = None;
    for raw in go_mod.lines() {
        let line = raw.split("//").next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if line == ")" {
            block = None;
            continue;
        }
        let (directive, rest) = match block {
            Some(b) => (b, line),
            None => {
                let (d, r) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
                let r = r.trim();
                if r == "(" {
                    block = Some(d);
                    continue;
                }
                (d, r)
            }
        };
        let words: Vec<&str> = rest.split_whitespace().collect();
        match (directive, words.as_slice()) {
            ("require", [m, v]) if *m == module => required = Some((*v).to_owned()),
            ("replace", [m, "=>", _, v]) if *m == module => replaced = Some((*v).to_owned()),
            _ => {}
        }
    }
    replaced
        .or(required)
        .ok_or_else(|| VersionsError::NotPinned {
            module: module.to_owned(),
            dir: m.dir,
        })
}

/// `KEY=value` pairs of `versions.env` (comments and blank lines skipped).
pub fn versions_env() -> BTreeMap<String, String> {
    VERSIONS_ENV
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// Which `versions.env` key names which module in which wrapper module.
pub const VERSIONS_ENV_KEYS: &[(&str, &EmbeddedModule, &str)] = &[
    (
        "KUBERNETES_VERSION",
        &KUBE_APISERVER_MODULE,
        "k8s.io/kubernetes",
    ),
    (
        "KUBERNETES_STAGING_VERSION",
        &KUBE_APISERVER_MODULE,
        "k8s.io/api",
    ),
    ("ETCD_VERSION", &ETCD_MODULE, "go.etcd.io/etcd/server/v3"),
    (
        "CLUSTER_API_VERSION",
        &CRDS_MODULE,
        "sigs.k8s.io/cluster-api",
    ),
    // The controllers run the very version whose CRDs are installed.
    (
        "CLUSTER_API_VERSION",
        &CAPI_MODULE,
        "sigs.k8s.io/cluster-api",
    ),
    (
        "CLUSTER_API_VERSION",
        &CAPI_MODULE,
        "sigs.k8s.io/cluster-api/api",
    ),
    ("CAPD_VERSION", &CAPI_MODULE, "sigs.k8s.io/cluster-api/test"),
    ("CAPD_VERSION", &CRDS_MODULE, "sigs.k8s.io/cluster-api/test"),
    (
        "CAPV_VERSION",
        &CRDS_MODULE,
        "sigs.k8s.io/cluster-api-provider-vsphere",
    ),
    (
        "CAPX_VERSION",
        &CRDS_MODULE,
        "github.com/nutanix-cloud-native/cluster-api-provider-nutanix",
    ),
    // The oracle renders Nutanix clusters with the CAPX types whose CRDs are installed.
    (
        "CAPX_VERSION",
        &EKSA_ORACLE_MODULE,
        "github.com/nutanix-cloud-native/cluster-api-provider-nutanix",
    ),
    (
        "TINKERBELL_VERSION",
        &CRDS_MODULE,
        "github.com/tinkerbell/tinkerbell",
    ),
    (
        "CAAPH_VERSION",
        &CRDS_MODULE,
        "sigs.k8s.io/cluster-api-addon-provider-helm",
    ),
    (
        "EKS_ANYWHERE_VERSION",
        &CRDS_MODULE,
        "github.com/aws/eks-anywhere",
    ),
    // The oracle renders with the EKS Anywhere release whose CRDs are installed.
    (
        "EKS_ANYWHERE_VERSION",
        &EKSA_ORACLE_MODULE,
        "github.com/aws/eks-anywhere",
    ),
    (
        "EKSA_CLUSTER_API_FORK_VERSION",
        &EKSA_ORACLE_MODULE,
        "sigs.k8s.io/cluster-api",
    ),
    (
        "SPRIG_VERSION",
        &GOTEMPLATE_ORACLE_MODULE,
        "github.com/Masterminds/sprig/v3",
    ),
    (
        "ETCDADM_CONTROLLER_VERSION",
        &CRDS_MODULE,
        "github.com/aws/etcdadm-controller",
    ),
    (
        "ETCDADM_BOOTSTRAP_PROVIDER_VERSION",
        &CRDS_MODULE,
        "github.com/aws/etcdadm-bootstrap-provider",
    ),
    (
        "CERT_MANAGER_VERSION",
        &CRDS_MODULE,
        "github.com/cert-manager/cert-manager",
    ),
    (
        "CLUSTER_INVENTORY_API_VERSION",
        &CRDS_MODULE,
        "sigs.k8s.io/cluster-inventory-api",
    ),
    (
        "FLUX_KUSTOMIZE_CONTROLLER_VERSION",
        &FLUX_MODULE,
        "github.com/fluxcd/kustomize-controller",
    ),
    // Its CRDs come from the source-controller module of the same version as this API module.
    (
        "FLUX_SOURCE_CONTROLLER_VERSION",
        &FLUX_MODULE,
        "github.com/fluxcd/source-controller/api",
    ),
    (
        "ACTIONLINT_VERSION",
        &ACTIONLINT_MODULE,
        "github.com/rhysd/actionlint",
    ),
    ("SOPS_VERSION", &SOPS_MODULE, "github.com/getsops/sops/v3"),
];

/// Fails when `versions.env` and the `go.mod` files disagree.
pub fn check_versions_env() -> Result<(), VersionsError> {
    let env = versions_env();
    for (key, m, module) in VERSIONS_ENV_KEYS {
        let env_v = env
            .get(*key)
            .ok_or_else(|| VersionsError::MissingKey((*key).to_owned()))?;
        let mod_v = module_version(m, module)?;
        if *env_v != mod_v {
            return Err(VersionsError::Drift {
                key: (*key).to_owned(),
                env: env_v.clone(),
                module: (*module).to_owned(),
                gomod: mod_v,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_env_matches_go_mod() {
        check_versions_env().unwrap();
    }

    #[test]
    fn pinned_versions_parse() {
        let v = versions().unwrap();
        assert_eq!(major_minor(&v.kubernetes).unwrap().0, 1);
        assert_eq!(major_minor(&v.etcd).unwrap().0, 3);
    }

    #[test]
    fn every_staging_module_uses_the_staging_version() {
        let env = versions_env();
        let staging = &env["KUBERNETES_STAGING_VERSION"];
        let go_mod = KUBE_APISERVER_MODULE.files[0].contents;
        let replaces: Vec<&str> = go_mod
            .lines()
            .filter(|l| l.contains("=> k8s.io/"))
            .collect();
        assert!(
            replaces.len() >= 31,
            "expected the full staging replace block"
        );
        for l in replaces {
            assert!(l.trim_end().ends_with(staging.as_str()), "{l}");
        }
    }
}
