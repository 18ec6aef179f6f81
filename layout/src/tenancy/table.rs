//! What each kind a workload directory writes may refer to: one table, kind × field, from which
//! validation checks every object of a workload directory ([`super::references`]), the agent's
//! `install` generates the tenancy policy's rules for the API server, and `docs/security.md`'s
//! table is generated ([`markdown`]; a test fails when the two differ).
//!
//! Why a table: every field of these kinds that names another object is a way for a controller
//! (Cluster API, its providers, the add-on providers, EKS Anywhere's, the token controller) to
//! read or act on that object for the cluster. A check written per field, in two places, misses
//! fields; one table read by both layers misses none that it lists, and the test
//! `tests/e2e/tests/reconcile/reference_table.rs` walks the upstream CRDs' schemas (Go module
//! cache, the pinned versions) and fails on a field that looks like a reference and has no row.
//!
//! A row's path is dotted; `[]` descends into every item of a list; `[key]` is a map key with dots
//! or slashes. A row on an object covers what is below it. Fields the schema does not describe
//! (`x-kubernetes-preserve-unknown-fields`) need a row too.

/// What a field must be, for an object of cluster `<c>` in namespace `<ns>`. An absent field
/// passes every rule but [`Must::Equals`], [`Must::Selects`] (both required) and none else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Must {
    /// A name of the cluster's own objects: `<c>` or `<c>-…` (validation: and not a longer
    /// cluster name of the fleet).
    Own,
    /// As [`Must::Own`], unless the object's field at the first path (from the object's root,
    /// dotted) is the second value: the same field names a cluster-scoped object for one
    /// provider and an entry of the cluster's own objects for another.
    OwnUnless(&'static str, &'static str),
    /// The cluster's name.
    Cluster,
    /// Empty or the object's own namespace.
    OwnNamespace,
    /// One of these values.
    OneOf(&'static [&'static str]),
    /// This value, required.
    Equals(&'static str),
    /// A label selector whose `matchLabels` require `cluster.x-k8s.io/cluster-name: <c>`
    /// (other terms can only narrow it), required.
    Selects,
    /// A list with at least one item, required (its items' own rows say what each must be).
    NonEmpty,
    /// Not set at all.
    Absent,
    /// Owner references: those the object already had (by UID), and its cluster's Cluster API
    /// Cluster as a plain owner (neither `controller` nor `blockOwnerDeletion`: the agent makes
    /// it an EtcdadmCluster's owner, as etcdadm requires). The API server cannot tell whose UID
    /// an owner reference carries; without those two flags a UID binds only the object's own
    /// fate (the garbage collector deletes it with that owner), adopts it into nothing and
    /// blocks no deletion. Validation: none in a directory, none rendered.
    Owners,
    /// Map keys without a `domain/` prefix, or under one of these prefixes.
    Unprefixed(&'static [&'static str]),
    /// Not checked: the row says why (a name on the cluster's own nodes, a vSphere inventory
    /// path, a field only a paused controller reads).
    Free,
}

/// Which class of attack a row closes, and so the validation code and the policy's reason word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// A reference to another cluster's (or a controller's) object: `foreign-reference`,
    /// `ForeignReference`.
    Reference,
    /// A selector that could select another cluster: `foreign-selector`, `ForeignSelector`.
    Selector,
    /// A Secret the cluster's controllers would fill in or copy into (its type, its
    /// annotations): `fillable-secret`, `FillableSecret`. A value the object already had is
    /// kept (a Secret's type cannot change; an admin's annotation on an adopted Secret stays).
    Fillable,
}

/// One field of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// Dotted path (see the module docs).
    pub path: &'static str,
    /// What it must be.
    pub must: Must,
    /// Why: who reads it, and what a foreign value would make them do.
    pub why: &'static str,
    /// The class of attack it closes.
    pub class: Class,
}

const fn row(path: &'static str, must: Must, why: &'static str) -> Row {
    Row {
        path,
        must,
        why,
        class: Class::Reference,
    }
}

const fn selector(path: &'static str, why: &'static str) -> Row {
    Row {
        path,
        must: Must::Selects,
        why,
        class: Class::Selector,
    }
}

/// A selector row with another rule than [`Must::Selects`] (the list of terms must be there).
const fn selector_row(path: &'static str, must: Must, why: &'static str) -> Row {
    Row {
        path,
        must,
        why,
        class: Class::Selector,
    }
}

const fn fillable(path: &'static str, must: Must, why: &'static str) -> Row {
    Row {
        path,
        must,
        why,
        class: Class::Fillable,
    }
}

/// A kind the workload identity writes, at the versions the table was read from (the policy
/// refuses a workload's write of any other kind or version: another version's fields are at
/// other paths).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    /// API group ("" for the core group).
    pub group: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Plural resource.
    pub plural: &'static str,
    /// Versions.
    pub versions: &'static [&'static str],
    /// Its fields.
    pub rows: &'static [Row],
}

impl Kind {
    /// Whether `api_version` is one of its group's versions the table covers.
    pub fn covers(&self, api_version: &str) -> bool {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        group == self.group && self.versions.contains(&version)
    }
}

/// The label Cluster API reads as the cluster an object belongs to.
const CLUSTER_NAME: &str = "metadata.labels[cluster.x-k8s.io/cluster-name]";

/// Rows of every kind.
pub const EVERY_KIND: &[Row] = &[
    row(
        CLUSTER_NAME,
        Must::Cluster,
        "Cluster API and its add-on providers read it as the cluster an object belongs to",
    ),
    row(
        "metadata.ownerReferences",
        Must::Owners,
        "Cluster API finds an object's cluster, controllers what they control and the garbage collector what waits on a deletion through owners; capstan renders none and makes its own Cluster an EtcdadmCluster's owner, and those a controller set are kept",
    ),
];

const NODES: &str = "kubeadm's configuration on the cluster's own machines: its names are the workload cluster's, not the management cluster's";
const VSPHERE_INVENTORY: &str =
    "a vSphere inventory name: vCenter authorises it for the cluster's own credentials";
const NUTANIX_INVENTORY: &str = "a Nutanix inventory name or UUID (Prism Element cluster, subnet, image, project, category, GPU): Prism Central authorises it for the cluster's own credentials";
const PAUSED: &str = "read only by EKS Anywhere's controller, which the pause keeps off the object";
const HARDWARE: &str = "CAPT provisions the machines on any free Hardware of the namespace a required term matches (OR'd): each term must require the cluster's label, which the admin puts on the Hardware the cluster may take, or the machines would take Hardware kept for another cluster";
const OWN_MACHINES: &str = "what runs on the cluster's own machines (the OS image, the provisioning workflow's actions, the boot ISO)";
const BOOTSTRAP_SECRET: &str = "the bootstrap provider copies this Secret of the management cluster onto the cluster's machines (another cluster's kubeconfig or CA key)";
macro_rules! kubeadm_rows {
    ($prefix:literal) => {
        [
            row(
                concat!($prefix, "files[].contentFrom.secret.name"),
                Must::Own,
                BOOTSTRAP_SECRET,
            ),
            row(
                concat!($prefix, "users[].passwdFrom.secret.name"),
                Must::Own,
                BOOTSTRAP_SECRET,
            ),
            row(concat!($prefix, "clusterConfiguration"), Must::Free, NODES),
            row(concat!($prefix, "initConfiguration"), Must::Free, NODES),
            row(concat!($prefix, "joinConfiguration"), Must::Free, NODES),
        ]
    };
}

const KCP_KUBEADM: [Row; 5] = kubeadm_rows!("spec.kubeadmConfigSpec.");
const KCT_KUBEADM: [Row; 5] = kubeadm_rows!("spec.template.spec.");

const CAPI: &str = "cluster.x-k8s.io";
const INFRA: &str = "infrastructure.cluster.x-k8s.io";
const ADDONS: &str = "addons.cluster.x-k8s.io";
const EKSA: &str = "anywhere.eks.amazonaws.com";
const V1BETA2: &[&str] = &["v1beta2"];
const V1BETA1: &[&str] = &["v1beta1"];

/// The Secret types a workload writes: `Opaque` (a credential an admin fills in, data-less in
/// Git) and a ClusterResourceSet's payload.
pub const SECRET_TYPES: &[&str] = &["Opaque", "addons.cluster.x-k8s.io/resource-set"];

/// The annotation prefixes a workload's Secret may carry besides unprefixed keys: capstan's own.
pub const SECRET_ANNOTATION_PREFIXES: &[&str] = &["capstan.dev/"];

/// EKS Anywhere's annotation that keeps its controller off an object.
pub const EKSA_PAUSED: &str = "anywhere.eks.amazonaws.com/paused";

const EKSA_PAUSED_ROW: Row = row(
    "metadata.annotations[anywhere.eks.amazonaws.com/paused]",
    Must::Equals("true"),
    "capstan reconciles EKS Anywhere's objects itself; unpaused, EKS Anywhere's controller would act on one as itself and follow its references",
);

/// Every kind a workload directory renders, with its fields: the agent's `install::rbac` grants
/// the workload identity no resource that is not here (a test holds it), and the policy refuses
/// its write of any other kind or version.
pub const KINDS: &[Kind] = &[
    Kind {
        group: "",
        kind: "ConfigMap",
        plural: "configmaps",
        versions: &["v1"],
        rows: &[],
    },
    Kind {
        group: "",
        kind: "Secret",
        plural: "secrets",
        versions: &["v1"],
        rows: &[
            fillable(
                "type",
                Must::OneOf(SECRET_TYPES),
                "the token controller fills a kubernetes.io/service-account-token Secret with the token of the ServiceAccount it names (a management controller's, in a shared namespace); a workload needs Opaque credentials and ClusterResourceSet payloads only",
            ),
            fillable(
                "metadata.annotations",
                Must::Unprefixed(SECRET_ANNOTATION_PREFIXES),
                "controllers act on annotations under their own domain (kubernetes.io/service-account.name, a reflector's reflects: ...) and fill or copy the Secret; unprefixed keys are the user's by Kubernetes' convention",
            ),
        ],
    },
    Kind {
        group: ADDONS,
        kind: "ClusterResourceSet",
        plural: "clusterresourcesets",
        versions: &["v1beta2", "v1beta1"],
        rows: &[
            selector(
                "spec.clusterSelector",
                "the resource set is applied to every cluster of the namespace it selects, the management cluster included",
            ),
            row(
                "spec.resources[].name",
                Must::Own,
                "copied into the selected cluster: another's Secret would be handed over",
            ),
        ],
    },
    Kind {
        group: ADDONS,
        kind: "HelmChartProxy",
        plural: "helmchartproxies",
        versions: &["v1alpha1"],
        rows: &[
            selector(
                "spec.clusterSelector",
                "the chart is installed into every cluster it selects",
            ),
            row(
                "spec.credentials.secret.name",
                Must::Own,
                "the add-on provider reads the registry credentials from it",
            ),
            row(
                "spec.credentials.secret.namespace",
                Must::OwnNamespace,
                "the add-on provider reads Secrets of any namespace",
            ),
            row(
                "spec.tlsConfig.caSecret.name",
                Must::Own,
                "the add-on provider reads the registry's CA from it",
            ),
            row(
                "spec.tlsConfig.caSecret.namespace",
                Must::OwnNamespace,
                "the add-on provider reads Secrets of any namespace",
            ),
            row(
                "spec.namespace",
                Must::Free,
                "the namespace in the workload cluster the chart is installed into",
            ),
        ],
    },
    Kind {
        group: CAPI,
        kind: "Cluster",
        plural: "clusters",
        versions: V1BETA2,
        rows: &[
            row(
                "spec.controlPlaneRef.name",
                Must::Own,
                "Cluster API adopts the control plane it names",
            ),
            row(
                "spec.infrastructureRef.name",
                Must::Own,
                "Cluster API adopts the infrastructure cluster it names",
            ),
            row(
                "spec.topology",
                Must::Absent,
                "a ClusterClass topology makes Cluster API write the cluster's objects from the class's templates (another namespace's); capstan renders none",
            ),
        ],
    },
    Kind {
        group: CAPI,
        kind: "MachineDeployment",
        plural: "machinedeployments",
        versions: V1BETA2,
        rows: &[
            row(
                "spec.clusterName",
                Must::Cluster,
                "the machines join the cluster it names",
            ),
            selector(
                "spec.selector",
                "Cluster API adopts the orphaned MachineSets of the namespace it selects",
            ),
            row(
                "spec.template.spec.clusterName",
                Must::Cluster,
                "the machines join the cluster it names",
            ),
            row(
                "spec.template.spec.bootstrap.configRef.name",
                Must::Own,
                "the machines boot with the bootstrap configuration it names",
            ),
            row(
                "spec.template.spec.bootstrap.dataSecretName",
                Must::Own,
                "the machines boot with the bootstrap data (join credentials) of the Secret it names",
            ),
            row(
                "spec.template.spec.infrastructureRef.name",
                Must::Own,
                "the machines are cloned from the template it names",
            ),
            row(
                "spec.template.spec.failureDomain",
                Must::OwnUnless(
                    "spec.template.spec.infrastructureRef.kind",
                    "NutanixMachineTemplate",
                ),
                "on vSphere the machines are placed by the cluster-scoped VSphereDeploymentZone it names; a Nutanix machine's failure domain is an entry of its own cluster's NutanixCluster (CAPX v1.3), so there any name is the cluster's own",
            ),
        ],
    },
    Kind {
        group: CAPI,
        kind: "MachineHealthCheck",
        plural: "machinehealthchecks",
        versions: V1BETA2,
        rows: &[
            row(
                "spec.clusterName",
                Must::Cluster,
                "Cluster API remediates (deletes) machines of the cluster it names",
            ),
            row(
                "spec.selector",
                Must::Free,
                "Cluster API adds cluster.x-k8s.io/cluster-name: spec.clusterName to it",
            ),
            row(
                "spec.remediation.templateRef.name",
                Must::Own,
                "machines are remediated from the template it names",
            ),
        ],
    },
    Kind {
        group: "controlplane.cluster.x-k8s.io",
        kind: "KubeadmControlPlane",
        plural: "kubeadmcontrolplanes",
        versions: V1BETA2,
        rows: &[
            row(
                "spec.machineTemplate.spec.infrastructureRef.name",
                Must::Own,
                "the control-plane machines are cloned from the template it names",
            ),
            KCP_KUBEADM[0],
            KCP_KUBEADM[1],
            KCP_KUBEADM[2],
            KCP_KUBEADM[3],
            KCP_KUBEADM[4],
        ],
    },
    Kind {
        group: "bootstrap.cluster.x-k8s.io",
        kind: "KubeadmConfigTemplate",
        plural: "kubeadmconfigtemplates",
        versions: V1BETA2,
        rows: &[
            KCT_KUBEADM[0],
            KCT_KUBEADM[1],
            KCT_KUBEADM[2],
            KCT_KUBEADM[3],
            KCT_KUBEADM[4],
        ],
    },
    Kind {
        group: INFRA,
        kind: "DockerCluster",
        plural: "dockerclusters",
        versions: V1BETA2,
        rows: &[
            row(
                "spec.loadBalancer.customHAProxyConfigTemplateRef.name",
                Must::Own,
                "CAPD configures the load balancer from the ConfigMap it names",
            ),
            row(
                "spec.failureDomains[].name",
                Must::Free,
                "names the failure domains it defines",
            ),
        ],
    },
    Kind {
        group: INFRA,
        kind: "DockerMachineTemplate",
        plural: "dockermachinetemplates",
        versions: V1BETA2,
        rows: &[],
    },
    Kind {
        group: INFRA,
        kind: "DevCluster",
        plural: "devclusters",
        versions: V1BETA2,
        rows: &[
            row(
                "spec.backend.docker.loadBalancer.customHAProxyConfigTemplateRef.name",
                Must::Own,
                "CAPD configures the load balancer from the ConfigMap it names",
            ),
            row(
                "spec.backend.docker.failureDomains[].name",
                Must::Free,
                "names the failure domains it defines",
            ),
        ],
    },
    Kind {
        group: INFRA,
        kind: "DevMachineTemplate",
        plural: "devmachinetemplates",
        versions: V1BETA2,
        rows: &[],
    },
    Kind {
        group: INFRA,
        kind: "VSphereCluster",
        plural: "vsphereclusters",
        versions: V1BETA1,
        rows: &[
            row(
                "spec.identityRef.kind",
                Must::OneOf(&["Secret"]),
                "a VSphereClusterIdentity is cluster-scoped and shared by the namespaces an admin allows",
            ),
            row(
                "spec.identityRef.name",
                Must::Own,
                "CAPV logs in to vCenter with the credentials of the Secret it names, and takes that Secret over (owner reference)",
            ),
            row(
                "spec.failureDomainSelector",
                Must::Absent,
                "selects cluster-scoped VSphereDeploymentZones, every cluster's; capstan renders none",
            ),
            row(
                "spec.clusterModules[].targetObjectName",
                Must::Own,
                "CAPV keeps the cluster modules of the control plane and MachineDeployments it names",
            ),
        ],
    },
    Kind {
        group: INFRA,
        kind: "VSphereMachineTemplate",
        plural: "vspheremachinetemplates",
        versions: V1BETA1,
        rows: &[
            row(
                "spec.template.spec.failureDomain",
                Must::Own,
                "CAPV places the machines by the cluster-scoped VSphereDeploymentZone it names",
            ),
            row(
                "spec.template.spec.network.devices[].addressesFromPools[].name",
                Must::Own,
                "the machines claim IP addresses from the pool it names",
            ),
            row(
                "spec.template.spec.storagePolicyName",
                Must::Free,
                VSPHERE_INVENTORY,
            ),
        ],
    },
    Kind {
        group: INFRA,
        kind: "VSphereFailureDomain",
        plural: "vspherefailuredomains",
        versions: V1BETA1,
        rows: &[
            row(
                "spec.topology.networkConfigurations[].addressesFromPools[].name",
                Must::Own,
                "the machines placed in it claim IP addresses from the pool it names",
            ),
            row("spec.region.name", Must::Free, VSPHERE_INVENTORY),
            row("spec.zone.name", Must::Free, VSPHERE_INVENTORY),
            row(
                "spec.topology",
                Must::Free,
                "vSphere inventory names (datacenter, compute cluster, datastore, networks, host groups): vCenter authorises them for the cluster's own credentials; its address pools are checked (above)",
            ),
        ],
    },
    Kind {
        group: INFRA,
        kind: "VSphereDeploymentZone",
        plural: "vspheredeploymentzones",
        versions: V1BETA1,
        rows: &[
            row(
                "spec.failureDomain",
                Must::Own,
                "CAPV places the machines of this zone by the cluster-scoped VSphereFailureDomain it names",
            ),
            row("spec.placementConstraint", Must::Free, VSPHERE_INVENTORY),
        ],
    },
    Kind {
        group: INFRA,
        kind: "NutanixCluster",
        plural: "nutanixclusters",
        versions: V1BETA1,
        rows: &[
            row(
                "spec.prismCentral.credentialRef.kind",
                Must::OneOf(&["Secret"]),
                "CAPX reads Prism Central's credentials from the Secret it names",
            ),
            row(
                "spec.prismCentral.credentialRef.name",
                Must::Own,
                "CAPX logs in to Prism Central with the credentials of the Secret it names",
            ),
            row(
                "spec.prismCentral.credentialRef.namespace",
                Must::OwnNamespace,
                "CAPX reads the credentials Secret of the namespace it names",
            ),
            row(
                "spec.prismCentral.additionalTrustBundle.kind",
                Must::OneOf(&["ConfigMap"]),
                "CAPX trusts the CA certificates of the ConfigMap it names",
            ),
            row(
                "spec.prismCentral.additionalTrustBundle.name",
                Must::Own,
                "CAPX trusts the CA certificates of the ConfigMap it names (another cluster's would be read for this one)",
            ),
            row(
                "spec.prismCentral.additionalTrustBundle.namespace",
                Must::OwnNamespace,
                "CAPX reads the trust bundle of the namespace it names",
            ),
            row("spec.failureDomains", Must::Free, NUTANIX_INVENTORY),
        ],
    },
    Kind {
        group: INFRA,
        kind: "NutanixMachineTemplate",
        plural: "nutanixmachinetemplates",
        versions: V1BETA1,
        rows: &[
            row(
                "spec.template.spec.bootstrapRef",
                Must::Absent,
                "CAPX boots the VM with the Secret it names as user data (another cluster's bootstrap data holds its certificates); Cluster API sets it on each NutanixMachine",
            ),
            row("spec.template.spec.image", Must::Free, NUTANIX_INVENTORY),
            row("spec.template.spec.cluster", Must::Free, NUTANIX_INVENTORY),
            row("spec.template.spec.subnet", Must::Free, NUTANIX_INVENTORY),
            row("spec.template.spec.project", Must::Free, NUTANIX_INVENTORY),
            row("spec.template.spec.gpus", Must::Free, NUTANIX_INVENTORY),
            row(
                "spec.template.spec.additionalCategories",
                Must::Free,
                NUTANIX_INVENTORY,
            ),
        ],
    },
    Kind {
        group: INFRA,
        kind: "TinkerbellCluster",
        plural: "tinkerbellclusters",
        versions: V1BETA1,
        rows: &[
            row(
                "spec.controlPlaneEndpoint",
                Must::Free,
                "the cluster's own API endpoint (CAPT copies it from the Cluster API Cluster)",
            ),
            row("spec.imageLookupBaseRegistry", Must::Free, OWN_MACHINES),
            row("spec.imageLookupFormat", Must::Free, OWN_MACHINES),
        ],
    },
    Kind {
        group: INFRA,
        kind: "TinkerbellMachineTemplate",
        plural: "tinkerbellmachinetemplates",
        versions: V1BETA1,
        rows: &[
            selector_row(
                "spec.template.spec.hardwareAffinity.required",
                Must::NonEmpty,
                HARDWARE,
            ),
            selector(
                "spec.template.spec.hardwareAffinity.required[].labelSelector",
                HARDWARE,
            ),
            row(
                "spec.template.spec.hardwareAffinity.preferred",
                Must::Free,
                "preferred terms only order the Hardware the required terms already allow",
            ),
            row(
                "spec.template.spec.hardwareName",
                Must::Absent,
                "names one Hardware outright (another cluster's, or one kept for the management cluster), past every selector",
            ),
            row(
                "spec.template.spec.providerID",
                Must::Absent,
                "CAPT sets it on each TinkerbellMachine from the Hardware it took",
            ),
            row(
                "spec.template.spec.templateOverride",
                Must::Free,
                OWN_MACHINES,
            ),
            row("spec.template.spec.bootOptions", Must::Free, OWN_MACHINES),
            row(
                "spec.template.spec.imageLookupFormat",
                Must::Free,
                OWN_MACHINES,
            ),
            row(
                "spec.template.spec.imageLookupBaseRegistry",
                Must::Free,
                OWN_MACHINES,
            ),
        ],
    },
    Kind {
        group: "etcdcluster.cluster.x-k8s.io",
        kind: "EtcdadmCluster",
        plural: "etcdadmclusters",
        versions: V1BETA1,
        rows: &[
            row(
                "spec.infrastructureTemplate.name",
                Must::Own,
                "the etcd machines are cloned from the template it names",
            ),
            row(
                "spec.infrastructureTemplate.namespace",
                Must::OwnNamespace,
                "the etcd machines are cloned from a template of the namespace it names",
            ),
            row(
                "spec.etcdadmConfigSpec.files[].contentFrom.secret.name",
                Must::Own,
                BOOTSTRAP_SECRET,
            ),
            row(
                "spec.etcdadmConfigSpec.users[].passwdFrom.secret.name",
                Must::Own,
                BOOTSTRAP_SECRET,
            ),
            row(
                "spec.etcdadmConfigSpec.certBundles[].name",
                Must::Free,
                "names a certificate bundle written inline",
            ),
        ],
    },
    Kind {
        group: EKSA,
        kind: "Cluster",
        plural: "clusters",
        versions: &["v1alpha1"],
        rows: &[
            EKSA_PAUSED_ROW,
            row(
                "spec.datacenterRef.name",
                Must::Own,
                "the cluster's datacenter configuration",
            ),
            row(
                "spec.controlPlaneConfiguration.machineGroupRef.name",
                Must::Own,
                "the control plane's machine configuration",
            ),
            row(
                "spec.workerNodeGroupConfigurations[].machineGroupRef.name",
                Must::Own,
                "a worker group's machine configuration",
            ),
            row(
                "spec.externalEtcdConfiguration.machineGroupRef.name",
                Must::Own,
                "external etcd's machine configuration",
            ),
            row(
                "spec.identityProviderRefs[].name",
                Must::Own,
                "the API server's identity provider",
            ),
            row(
                "spec.gitOpsRef",
                Must::Absent,
                "EKS Anywhere's Flux bootstrap; capstan applies the repository itself",
            ),
            row("spec.bundlesRef", Must::Free, PAUSED),
            row(
                "spec.managementCluster.name",
                Must::Free,
                "validation checks it names the fleet's management cluster (management-mismatch); otherwise read only by EKS Anywhere's controller, which the pause keeps off the object",
            ),
            row(
                "spec.registryMirrorConfiguration.ociNamespaces[].namespace",
                Must::Free,
                "a namespace of the registry mirror",
            ),
            row(
                "spec.etcdEncryption[].providers[].kms.name",
                Must::Free,
                "the KMS plugin on the cluster's own machines",
            ),
            row(
                "spec.clusterNetwork.cniConfig.cilium.helmValues",
                Must::Free,
                "Cilium's values in the workload cluster",
            ),
            row(
                "spec.controlPlaneConfiguration.kubeletConfiguration",
                Must::Free,
                "the kubelet's configuration on the cluster's own machines",
            ),
            row(
                "spec.workerNodeGroupConfigurations[].kubeletConfiguration",
                Must::Free,
                "the kubelet's configuration on the cluster's own machines",
            ),
        ],
    },
    Kind {
        group: EKSA,
        kind: "DockerDatacenterConfig",
        plural: "dockerdatacenterconfigs",
        versions: &["v1alpha1"],
        rows: &[EKSA_PAUSED_ROW],
    },
    Kind {
        group: EKSA,
        kind: "VSphereDatacenterConfig",
        plural: "vspheredatacenterconfigs",
        versions: &["v1alpha1"],
        rows: &[
            EKSA_PAUSED_ROW,
            row(
                "spec.failureDomains[].name",
                Must::Free,
                "names the failure domains it defines",
            ),
        ],
    },
    Kind {
        group: EKSA,
        kind: "VSphereMachineConfig",
        plural: "vspheremachineconfigs",
        versions: &["v1alpha1"],
        rows: &[
            EKSA_PAUSED_ROW,
            row("spec.storagePolicyName", Must::Free, VSPHERE_INVENTORY),
            row(
                "spec.users[].name",
                Must::Free,
                "a user on the cluster's own machines",
            ),
            row(
                "spec.hostOSConfiguration",
                Must::Free,
                "the operating system's configuration on the cluster's own machines",
            ),
        ],
    },
    Kind {
        group: EKSA,
        kind: "NutanixDatacenterConfig",
        plural: "nutanixdatacenterconfigs",
        versions: &["v1alpha1"],
        rows: &[
            EKSA_PAUSED_ROW,
            row("spec.credentialRef", Must::Free, PAUSED),
            row("spec.failureDomains", Must::Free, NUTANIX_INVENTORY),
        ],
    },
    Kind {
        group: EKSA,
        kind: "NutanixMachineConfig",
        plural: "nutanixmachineconfigs",
        versions: &["v1alpha1"],
        rows: &[
            EKSA_PAUSED_ROW,
            row("spec.image", Must::Free, NUTANIX_INVENTORY),
            row("spec.cluster", Must::Free, NUTANIX_INVENTORY),
            row("spec.subnet", Must::Free, NUTANIX_INVENTORY),
            row("spec.project", Must::Free, NUTANIX_INVENTORY),
            row("spec.gpus", Must::Free, NUTANIX_INVENTORY),
            row(
                "spec.users[].name",
                Must::Free,
                "a user on the cluster's own machines",
            ),
        ],
    },
    Kind {
        group: EKSA,
        kind: "TinkerbellDatacenterConfig",
        plural: "tinkerbelldatacenterconfigs",
        versions: &["v1alpha1"],
        rows: &[EKSA_PAUSED_ROW],
    },
    Kind {
        group: EKSA,
        kind: "TinkerbellMachineConfig",
        plural: "tinkerbellmachineconfigs",
        versions: &["v1alpha1"],
        rows: &[
            EKSA_PAUSED_ROW,
            row("spec.hardwareSelector", Must::Free, PAUSED),
            row("spec.hardwareAffinity", Must::Free, PAUSED),
            row("spec.templateRef", Must::Free, PAUSED),
            row(
                "spec.users[].name",
                Must::Free,
                "a user on the cluster's own machines",
            ),
        ],
    },
    Kind {
        group: EKSA,
        kind: "TinkerbellTemplateConfig",
        plural: "tinkerbelltemplateconfigs",
        versions: &["v1alpha1"],
        rows: &[EKSA_PAUSED_ROW],
    },
    Kind {
        group: EKSA,
        kind: "OIDCConfig",
        plural: "oidcconfigs",
        versions: &["v1alpha1"],
        rows: &[EKSA_PAUSED_ROW],
    },
    Kind {
        group: EKSA,
        kind: "AWSIamConfig",
        plural: "awsiamconfigs",
        versions: &["v1alpha1"],
        rows: &[EKSA_PAUSED_ROW],
    },
];

/// The table's kind of an object.
pub fn kind(api_version: &str, kind: &str) -> Option<&'static Kind> {
    let group = api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
    KINDS.iter().find(|k| k.group == group && k.kind == kind)
}

/// One step of a row's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    /// A field.
    Field(&'a str),
    /// A map key with dots or slashes (`[key]`).
    Key(&'a str),
    /// Every item of a list (`[]`).
    Each,
}

/// The steps of a row's path.
pub fn steps(path: &str) -> Vec<Step<'_>> {
    let mut out = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').unwrap_or(r.len());
            out.push(if end == 0 {
                Step::Each
            } else {
                Step::Key(&r[..end])
            });
            rest = r.get(end + 1..).unwrap_or("");
        } else {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            out.push(Step::Field(&rest[..end]));
            rest = &rest[end..];
        }
        rest = rest.strip_prefix('.').unwrap_or(rest);
    }
    out
}

impl Must {
    /// What it requires, in words (`<c>`: the cluster).
    pub fn describe(&self) -> String {
        let list = |v: &[&str]| {
            v.iter()
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Must::Own => "`<c>` or `<c>-…`".into(),
            Must::OwnUnless(path, value) => format!("`<c>` or `<c>-…` unless `{path}` is `{value}`"),
            Must::Cluster => "`<c>`".into(),
            Must::OwnNamespace => "empty or the object's namespace".into(),
            Must::OneOf(v) => format!("one of {}", list(v)),
            Must::Equals(v) => format!("`{v}` (required)"),
            Must::Selects => {
                "requires `cluster.x-k8s.io/cluster-name: <c>` in `matchLabels` (required)".into()
            }
            Must::NonEmpty => "a list of at least one item (required)".into(),
            Must::Absent => "absent".into(),
            Must::Owners => "owners it had, or the Cluster `<c>` without `controller` or `blockOwnerDeletion` (none in a directory)".into(),
            Must::Unprefixed(p) => format!("keys without a prefix, or under {}", list(p)),
            Must::Free => "not checked".into(),
        }
    }
}

/// The table as Markdown, as `docs/security.md` holds it.
pub fn markdown() -> String {
    let mut out = String::from("| kind (versions) | field | must be | why |\n|---|---|---|---|\n");
    let cell = |s: &str| s.replace('|', "\\|");
    for r in EVERY_KIND {
        out.push_str(&format!(
            "| every kind | `{}` | {} | {} |\n",
            r.path,
            r.must.describe(),
            cell(r.why)
        ));
    }
    for k in KINDS {
        let group = if k.group.is_empty() { "core" } else { k.group };
        let name = format!("{} ({group}/{})", k.kind, k.versions.join(", "));
        if k.rows.is_empty() {
            out.push_str(&format!(
                "| {name} | — | | no field names another object |\n"
            ));
        }
        for r in k.rows {
            out.push_str(&format!(
                "| {name} | `{}` | {} | {} |\n",
                r.path,
                r.must.describe(),
                cell(r.why)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_read_into_steps() {
        assert_eq!(
            steps("spec.kubeadmConfigSpec.files[].contentFrom.secret.name"),
            vec![
                Step::Field("spec"),
                Step::Field("kubeadmConfigSpec"),
                Step::Field("files"),
                Step::Each,
                Step::Field("contentFrom"),
                Step::Field("secret"),
                Step::Field("name"),
            ]
        );
        assert_eq!(
            steps(CLUSTER_NAME),
            vec![
                Step::Field("metadata"),
                Step::Field("labels"),
                Step::Key("cluster.x-k8s.io/cluster-name"),
            ]
        );
        assert_eq!(steps("type"), vec![Step::Field("type")]);
    }

    #[test]
    fn kinds_are_unique_and_every_row_says_why() {
        let mut seen = std::collections::BTreeSet::new();
        for k in KINDS {
            assert!(seen.insert((k.group, k.kind)), "{} twice", k.kind);
            assert!(!k.versions.is_empty());
            for r in k.rows.iter().chain(EVERY_KIND) {
                assert!(!r.why.is_empty() && !r.why.contains('\n'), "{}", r.path);
                assert!(!steps(r.path).is_empty());
            }
        }
        assert!(kind("cluster.x-k8s.io/v1beta2", "Cluster").is_some_and(|k| k.group == CAPI));
        assert!(kind("v1", "Secret").is_some_and(|k| k.covers("v1")));
        assert!(
            !kind("cluster.x-k8s.io/v1beta1", "Cluster")
                .unwrap()
                .covers("cluster.x-k8s.io/v1beta1")
        );
    }

    /// docs/security.md holds the table as generated (regenerate: run this test with
    /// `CAPSTAN_WRITE_DOCS=1`).
    #[test]
    fn the_docs_table_is_the_generated_one() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/security.md");
        let text = std::fs::read_to_string(&path).unwrap();
        let (start, end) = (
            "<!-- reference table: generated by capstan_layout::tenancy::table::markdown -->\n",
            "<!-- end of reference table -->",
        );
        let from = text.find(start).expect("the table's start marker") + start.len();
        let to = from + text[from..].find(end).expect("the table's end marker");
        let want = markdown();
        if std::env::var_os("CAPSTAN_WRITE_DOCS").is_some() {
            let new = format!("{}{want}{}", &text[..from], &text[to..]);
            std::fs::write(&path, new).unwrap();
            return;
        }
        assert_eq!(
            text[from..to],
            want,
            "docs/security.md's reference table differs from the table: run `CAPSTAN_WRITE_DOCS=1 cargo test -p capstan-layout the_docs_table` to regenerate it"
        );
    }
}
