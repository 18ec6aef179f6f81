//! What capstan knows of each infrastructure provider, in one place: its name, the EKS Anywhere
//! kinds of its directories, the Cluster API infrastructure it renders (one per backend), the
//! other kinds its templates render, and the fields of its kinds EKS Anywhere holds immutable.
//!
//! Everything provider-specific outside this crate derives from [`PROVIDERS`]: the agent's RBAC
//! rules (what it reads, what the fleet identities write), the tenancy policy (the kinds a
//! workload may render cluster-scoped), the impact analysis (immutable fields), the command
//! line's `--provider`. A new provider is a descriptor here, its spec types and validation
//! (`spec`) and its templates (`providers/<name>/`).

/// `(name, source)` of a provider's template files under `providers/<dir>/`, embedded at build
/// time; the name is `<dir>/<file>`, as templates include each other.
macro_rules! provider_templates {
    ($dir:literal: $($file:literal),* $(,)?) => {
        &[$((concat!($dir, "/", $file), include_str!(concat!("../providers/", $dir, "/", $file))),)*]
    };
}

/// The templates every provider's clusters render (the Cluster, its etcd, workers, the CNI,
/// health checks), which include the provider's own.
pub const COMMON_TEMPLATES: &[(&str, &str)] = provider_templates!("common":
    "cluster.yaml.j2",
    "cni.yaml.j2",
    "etcd.yaml.j2",
    "health-checks.yaml.j2",
    "kcp-etcd.yaml.j2",
    "packages.yaml.j2",
    "workers.yaml.j2",
);

/// A kind a provider's templates render besides its infrastructure cluster and machine
/// templates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    /// API group.
    pub group: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Plural resource.
    pub plural: &'static str,
    /// Cluster-scoped (no namespace).
    pub cluster_scoped: bool,
}

/// The Cluster API infrastructure of one backend of a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Infrastructure {
    /// apiVersion of its kinds.
    pub api_version: &'static str,
    /// The infrastructure cluster's kind.
    pub cluster_kind: &'static str,
    /// Its plural resource.
    pub cluster_plural: &'static str,
    /// The machine template's kind.
    pub machine_template_kind: &'static str,
    /// Its plural resource.
    pub machine_template_plural: &'static str,
}

/// A field of an EKS Anywhere kind that a live cluster cannot change, with why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Immutable {
    /// The kind.
    pub kind: &'static str,
    /// The field's dotted path.
    pub field: &'static str,
    /// Why it is refused.
    pub reason: &'static str,
}

/// One infrastructure provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    /// Its name in the command line and the scaffolder.
    pub name: &'static str,
    /// The EKS Anywhere kinds of its directories (datacenter and machine configs), with their
    /// plural resources.
    pub eksa_kinds: &'static [(&'static str, &'static str)],
    /// Its backends' Cluster API infrastructure, the default first.
    pub infrastructure: &'static [Infrastructure],
    /// Other kinds its templates render.
    pub kinds: &'static [Kind],
    /// Fields of its EKS Anywhere kinds that a live cluster cannot change.
    pub immutable: &'static [Immutable],
    /// Its template files (`providers/<name>/`), which the common templates include.
    pub templates: &'static [(&'static str, &'static str)],
}

/// CAPD: containers as machines, or CAPD's in-memory backend (`capstan.dev/docker-backend:
/// in-memory`).
pub const DOCKER: Descriptor = Descriptor {
    name: "docker",
    eksa_kinds: &[("DockerDatacenterConfig", "dockerdatacenterconfigs")],
    infrastructure: &[
        Infrastructure {
            api_version: "infrastructure.cluster.x-k8s.io/v1beta2",
            cluster_kind: "DockerCluster",
            cluster_plural: "dockerclusters",
            machine_template_kind: "DockerMachineTemplate",
            machine_template_plural: "dockermachinetemplates",
        },
        Infrastructure {
            api_version: "infrastructure.cluster.x-k8s.io/v1beta2",
            cluster_kind: "DevCluster",
            cluster_plural: "devclusters",
            machine_template_kind: "DevMachineTemplate",
            machine_template_plural: "devmachinetemplates",
        },
    ],
    kinds: &[],
    immutable: &[],
    templates: provider_templates!("docker":
        "bootstrap-templates.yaml.j2",
        "control-plane.yaml.j2",
        "infrastructure-cluster.yaml.j2",
        "kcp-node-registration.yaml.j2",
        "machine-templates.yaml.j2",
    ),
};

/// CAPV.
pub const VSPHERE: Descriptor = Descriptor {
    name: "vsphere",
    eksa_kinds: &[
        ("VSphereDatacenterConfig", "vspheredatacenterconfigs"),
        ("VSphereMachineConfig", "vspheremachineconfigs"),
    ],
    infrastructure: &[Infrastructure {
        api_version: "infrastructure.cluster.x-k8s.io/v1beta1",
        cluster_kind: "VSphereCluster",
        cluster_plural: "vsphereclusters",
        machine_template_kind: "VSphereMachineTemplate",
        machine_template_plural: "vspheremachinetemplates",
    }],
    kinds: &[
        Kind {
            group: "infrastructure.cluster.x-k8s.io",
            kind: "VSphereFailureDomain",
            plural: "vspherefailuredomains",
            cluster_scoped: true,
        },
        Kind {
            group: "infrastructure.cluster.x-k8s.io",
            kind: "VSphereDeploymentZone",
            plural: "vspheredeploymentzones",
            cluster_scoped: true,
        },
    ],
    immutable: &[
        Immutable {
            kind: "VSphereDatacenterConfig",
            field: "spec.server",
            reason: "the vCenter server of a cluster is immutable",
        },
        Immutable {
            kind: "VSphereDatacenterConfig",
            field: "spec.datacenter",
            reason: "the vSphere datacenter of a cluster is immutable",
        },
        Immutable {
            kind: "VSphereDatacenterConfig",
            field: "spec.network",
            reason: "the vSphere network of a cluster is immutable",
        },
        Immutable {
            kind: "VSphereMachineConfig",
            field: "spec.osFamily",
            reason: "a machine config's OS family is immutable",
        },
        Immutable {
            kind: "VSphereMachineConfig",
            field: "spec.storagePolicyName",
            reason: "a machine config's storage policy is immutable",
        },
    ],
    templates: provider_templates!("vsphere":
        "bootstrap-templates.yaml.j2",
        "control-plane.yaml.j2",
        "cpi.yaml.j2",
        "failure-domains.yaml.j2",
        "infrastructure-cluster.yaml.j2",
        "kcp-node-registration.yaml.j2",
        "kube-vip.yaml.j2",
        "machine-templates.yaml.j2",
    ),
};

/// CAPX (Nutanix). Its controller is not run here (Prism Central cannot exist in the test bed):
/// its CRDs admit what capstan renders.
pub const NUTANIX: Descriptor = Descriptor {
    name: "nutanix",
    eksa_kinds: &[
        ("NutanixDatacenterConfig", "nutanixdatacenterconfigs"),
        ("NutanixMachineConfig", "nutanixmachineconfigs"),
    ],
    infrastructure: &[Infrastructure {
        api_version: "infrastructure.cluster.x-k8s.io/v1beta1",
        cluster_kind: "NutanixCluster",
        cluster_plural: "nutanixclusters",
        machine_template_kind: "NutanixMachineTemplate",
        machine_template_plural: "nutanixmachinetemplates",
    }],
    kinds: &[],
    immutable: &[
        Immutable {
            kind: "NutanixDatacenterConfig",
            field: "spec.endpoint",
            reason: "the Prism Central of a cluster is immutable",
        },
        Immutable {
            kind: "NutanixMachineConfig",
            field: "spec.osFamily",
            reason: "a machine config's OS family is immutable",
        },
    ],
    templates: provider_templates!("nutanix":
        "bootstrap-templates.yaml.j2",
        "ccm.yaml.j2",
        "control-plane.yaml.j2",
        "infrastructure-cluster.yaml.j2",
        "kube-vip.yaml.j2",
        "machine-templates.yaml.j2",
    ),
};

/// CAPT (bare metal): machines are Hardware objects of the Tinkerbell stack, provisioned by
/// Tinkerbell workflows. Neither CAPT's controller nor the stack runs here (machines that PXE
/// boot cannot exist in the test bed): their CRDs admit what capstan renders.
pub const TINKERBELL: Descriptor = Descriptor {
    name: "tinkerbell",
    eksa_kinds: &[
        ("TinkerbellDatacenterConfig", "tinkerbelldatacenterconfigs"),
        ("TinkerbellMachineConfig", "tinkerbellmachineconfigs"),
        ("TinkerbellTemplateConfig", "tinkerbelltemplateconfigs"),
    ],
    infrastructure: &[Infrastructure {
        api_version: "infrastructure.cluster.x-k8s.io/v1beta1",
        cluster_kind: "TinkerbellCluster",
        cluster_plural: "tinkerbellclusters",
        machine_template_kind: "TinkerbellMachineTemplate",
        machine_template_plural: "tinkerbellmachinetemplates",
    }],
    kinds: &[],
    immutable: &[
        Immutable {
            kind: "TinkerbellDatacenterConfig",
            field: "spec.tinkerbellIP",
            reason: "the Tinkerbell stack's address of a cluster is immutable",
        },
        Immutable {
            kind: "TinkerbellDatacenterConfig",
            field: "spec.skipLoadBalancerDeployment",
            reason: "whether kube-vip holds a bare-metal cluster's endpoint is immutable",
        },
        Immutable {
            kind: "TinkerbellMachineConfig",
            field: "spec.osFamily",
            reason: "a machine config's OS family is immutable",
        },
    ],
    templates: provider_templates!("tinkerbell":
        "bootstrap-templates.yaml.j2",
        "control-plane.yaml.j2",
        "infrastructure-cluster.yaml.j2",
        "kube-vip.yaml.j2",
        "machine-templates.yaml.j2",
    ),
};

/// Every provider capstan renders.
pub const PROVIDERS: &[&Descriptor] = &[&DOCKER, &VSPHERE, &NUTANIX, &TINKERBELL];

/// The provider named `name`.
pub fn named(name: &str) -> Option<&'static Descriptor> {
    PROVIDERS.iter().copied().find(|p| p.name == name)
}

/// Every provider's name.
pub fn names() -> Vec<&'static str> {
    PROVIDERS.iter().map(|p| p.name).collect()
}

/// Every template: the common ones and every provider's.
pub fn templates() -> Vec<(&'static str, &'static str)> {
    COMMON_TEMPLATES
        .iter()
        .chain(PROVIDERS.iter().flat_map(|p| p.templates.iter()))
        .copied()
        .collect()
}

/// The cluster-scoped kinds any provider renders: `(group, kind, plural)`.
pub fn cluster_scoped() -> impl Iterator<Item = &'static Kind> {
    PROVIDERS
        .iter()
        .flat_map(|p| p.kinds.iter())
        .filter(|k| k.cluster_scoped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        let mut names = names();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), PROVIDERS.len());
        assert_eq!(named("vsphere"), Some(&VSPHERE));
        assert_eq!(named("openstack"), None);
        assert!(
            cluster_scoped()
                .map(|k| k.kind)
                .eq(["VSphereFailureDomain", "VSphereDeploymentZone"])
        );
    }

    /// Every file under `providers/` is some descriptor's template (or the audit policy the
    /// renderer reads on its own), and each is named for its directory.
    #[test]
    fn every_template_file_is_in_a_descriptor() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("providers");
        let mut on_disk = Vec::new();
        for dir in std::fs::read_dir(&root).unwrap() {
            let dir = dir.unwrap().path();
            for f in std::fs::read_dir(&dir).unwrap() {
                let f = f.unwrap().path();
                if f.extension().is_some_and(|e| e == "j2") {
                    on_disk.push(f.strip_prefix(&root).unwrap().display().to_string());
                }
            }
        }
        on_disk.sort();
        let mut described: Vec<String> = templates().iter().map(|(n, _)| n.to_string()).collect();
        described.sort();
        assert_eq!(described, on_disk);
        for p in PROVIDERS {
            assert!(
                p.templates
                    .iter()
                    .all(|(n, _)| n.starts_with(&format!("{}/", p.name)))
            );
        }
    }
}
