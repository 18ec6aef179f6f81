//! The hostile-tenant corpus: attacks by a developer who controls one workload directory
//! (issues 32 and 52: Secrets a controller fills in, references of every kind, names of clusters
//! that have not joined yet). capstan's promise is that a pull request to
//! `clusters/<mgmt>/workload-clusters/<name>/` reaches nothing but cluster `<name>`; each case
//! here tries to break it, in one of three ways:
//!
//! - **refused by validation** (`capstan validate`, so the pull request's check): each case is
//!   stated as its change from the bad-input corpus' base fleet (`bad_input/support.rs`: the
//!   management cluster `mgmt`, a healthy workload `ok`, the attacker `w`, all in EKS Anywhere's
//!   shared `eksa-system`), with the exact code and position, the attacker's cluster not
//!   rendered and every other cluster rendering as before;
//! - **applied** to the real API server by the agent, as the ServiceAccount `capstan install`
//!   creates (its rules, the fleet identities, the tenancy policy), with victims planted first
//!   (objects an admin created, another cluster's objects, what Cluster API would have made):
//!   proven harmless from the API server's audit log (no successful write or delete but the
//!   attacker's own objects, its record and Events, and namespaces) and by reading every victim
//!   back unchanged;
//! - **past validation**: writes a gap in validation would let through, made directly as the
//!   workload identity the agent writes a workload directory's objects as: each refused by the
//!   API server (the tenancy policy or RBAC), nothing written.
//!
//! `corpus_size_by_class` prints how many attacks each class holds.

#[path = "../bad_input/support.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use capstan::k8s::identity::{Tenant, impersonating};
use capstan::plan::Action;
use capstan::reconcile::{Options, Outcome, reconcile};
use capstan::status::{Phase, Reason};
use capstan_e2e::FleetDir;
use capstan_harness::{AuditEvent, ControlPlane};
use capstan_layout::scaffold::ClusterRequest;
use capstan_templates::diag::Code::*;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use support::*;

/// Declares each validation attack as a `#[test]` (run like a bad-input case) and lists them
/// with their class.
macro_rules! refused {
    ($($class:literal $name:ident: $case:expr;)*) => {
        $(
            #[test]
            fn $name() {
                run(stringify!($name), &$case);
            }
        )*
        fn refused_by_validation() -> Vec<(&'static str, &'static str)> {
            vec![$(($class, stringify!($name))),*]
        }
    };
}

const W_ATTACK: &str = "clusters/mgmt/workload-clusters/w/attack.yaml";

/// A ClusterResourceSet of `w` with `selector` and `resources` (flow YAML).
fn resource_set(selector: &str, resources: &str) -> String {
    format!(
        "apiVersion: addons.cluster.x-k8s.io/v1beta2\nkind: ClusterResourceSet\nmetadata: {{name: w-crs}}\nspec:\n  clusterSelector: {selector}\n  resources: {resources}\n"
    )
}

/// A HelmChartProxy of `w` with `selector` and more of its spec (YAML lines).
fn chart(selector: &str, more: &str) -> String {
    format!(
        "apiVersion: addons.cluster.x-k8s.io/v1alpha1\nkind: HelmChartProxy\nmetadata: {{name: w-chart}}\nspec:\n  chartName: evil\n  repoURL: oci://registry.example.invalid/charts\n  clusterSelector: {selector}\n{more}"
    )
}

const OWN: &str = "{matchLabels: {cluster.x-k8s.io/cluster-name: w}}";

/// A chart's `valuesTemplate`, a literal block whose second line is `line`.
fn values(line: &str) -> String {
    format!("  valuesTemplate: |\n    name: {{{{ .Cluster.metadata.name }}}}\n    {line}\n")
}

refused! {
    // ── the cluster's namespace: where its every object goes ──
    "namespace" namespace_kube_system:
        Case::workload().after(W, "name: w", "|  namespace: kube-system").err(ReservedNamespace, W, "namespace");
    "namespace" namespace_capstan_system:
        Case::workload().after(W, "name: w", "|  namespace: capstan-system").err(ReservedNamespace, W, "namespace");
    "namespace" namespace_default:
        Case::workload().after(W, "name: w", "|  namespace: default").err(ReservedNamespace, W, "namespace");
    "namespace" namespace_of_a_controller:
        Case::workload().after(W, "name: w", "|  namespace: capi-system").err(ReservedNamespace, W, "namespace");
    "namespace" namespace_kube_node_lease:
        Case::workload().after(W, "name: w", "|  namespace: kube-node-lease").err(ReservedNamespace, W, "namespace");
    "namespace" extra_object_in_kube_system:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w-coredns, namespace: kube-system}\n")
            .err(ForeignNamespace, W_ATTACK, "namespace");
    "namespace" extra_secret_in_capstan_system:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: Secret\nmetadata: {name: w-git, namespace: capstan-system}\n")
            .err(ForeignNamespace, W_ATTACK, "namespace");

    // ── names: a shared namespace is confined by names ──
    "name" coredns_in_the_shared_namespace:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: coredns}\ndata: {Corefile: '. { forward . 203.0.113.53 }'}\n")
            .err(NameOutsideCluster, W_ATTACK, "name: coredns");
    "name" the_agents_git_secret_name:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: Secret\nmetadata: {name: capstan-git}\n")
            .err(NameOutsideCluster, W_ATTACK, "name: capstan-git");
    "name" the_management_clusters_credentials:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: Secret\nmetadata: {name: mgmt-vsphere-credentials}\n")
            .err(NameOutsideCluster, W_ATTACK, "name: mgmt-vsphere");
    "name" another_workloads_config_map:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok-settings}\n")
            .err(NameOutsideCluster, W_ATTACK, "name: ok-settings");
    "name" an_admins_unprefixed_config_map:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: platform-settings}\n")
            .err(NameOutsideCluster, W_ATTACK, "name: platform");
    "name" the_management_clusters_datacenter:
        Case::workload()
            .set(W, "datacenterRef:", "datacenterRef: {kind: DockerDatacenterConfig, name: mgmt}")
            .set(W_DC, "metadata:", "metadata: {name: mgmt}")
            .err(NameOutsideCluster, W_DC, "name: mgmt");
    "name" another_workloads_machine_config:
        Case::vsphere()
            .set(W_VSPHERE_FILE, "metadata: {name: w-cp}", "metadata: {name: ok-cp}")
            .set(W, "machineGroupRef: {kind: VSphereMachineConfig, name: w-cp}", "machineGroupRef: {kind: VSphereMachineConfig, name: ok-cp}")
            .err(NameOutsideCluster, W_VSPHERE_FILE, "name: ok-cp");
    "name" a_longer_cluster_names_objects:
        Case::workload()
            .file(W2_CLUSTER_FILE, W_OK_CLUSTER)
            .file(W_ATTACK, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w-ok-settings}\n")
            .broken(&[W_DIR])
            .err(NameOutsideCluster, W_ATTACK, "name: w-ok");
    "name" a_worker_group_that_renders_a_longer_cluster_names_objects:
        Case::workload()
            .file(W2_CLUSTER_FILE, W_OK_CLUSTER)
            .set(W, "workerNodeGroupConfigurations:", "workerNodeGroupConfigurations: [{name: ok-md-0, count: 1}]")
            .broken(&[W_DIR])
            .err_col(NameOutsideCluster, W, "name: w", 3);

    // ── the cluster itself: its name and its management cluster ──
    "cluster" a_cluster_named_like_the_management_cluster:
        Case::workload().set(W, "name: w", "name: mgmt").err_col(DirNameMismatch, W, "name: mgmt", 3);
    "cluster" a_cluster_claiming_another_management_cluster:
        Case::workload()
            .set(W, "managementCluster:", "managementCluster: {name: other-mgmt}")
            .err(ManagementMismatch, W, "managementCluster");
    "cluster" a_workload_claiming_to_manage_itself:
        Case::workload()
            .set(W, "managementCluster:", "managementCluster: {name: w}")
            .err(ManagementMismatch, W, "managementCluster");
    "cluster" a_workload_taking_another_workloads_name:
        Case::workload()
            .set(W, "name: w", "name: ok")
            .set(W_DC, "metadata:", "metadata: {name: ok}")
            .set(W, "datacenterRef:", "datacenterRef: {kind: DockerDatacenterConfig, name: ok}")
            .err_col(DirNameMismatch, W, "name: ok", 3);

    // ── kinds a workload directory may not write ──
    "kind" cluster_admin_for_the_tenant:
        Case::workload()
            .file(W_ATTACK, "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: w-admin}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\nsubjects: [{kind: User, name: mallory}]\n")
            .err(ForbiddenKind, W_ATTACK, "apiVersion");
    "kind" a_helm_release_proxy_for_the_management_cluster:
        Case::workload()
            .file(W_ATTACK, "apiVersion: addons.cluster.x-k8s.io/v1alpha1\nkind: HelmReleaseProxy\nmetadata: {name: w-release}\nspec: {clusterRef: {name: mgmt}, chartName: evil, repoURL: https://example.invalid}\n")
            .err(ForbiddenKind, W_ATTACK, "apiVersion");
    "kind" a_resource_set_binding_to_the_management_cluster:
        Case::workload()
            .file(W_ATTACK, "apiVersion: addons.cluster.x-k8s.io/v1beta2\nkind: ClusterResourceSetBinding\nmetadata: {name: mgmt}\nspec: {clusterName: mgmt}\n")
            .err(ForbiddenKind, W_ATTACK, "apiVersion");
    "kind" machines_for_the_management_cluster:
        Case::workload()
            .file(W_ATTACK, "apiVersion: cluster.x-k8s.io/v1beta2\nkind: MachineDeployment\nmetadata: {name: w-extra}\nspec: {clusterName: mgmt}\n")
            .err(ForbiddenKind, W_ATTACK, "apiVersion");
    "kind" a_namespace_of_its_own:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: Namespace\nmetadata: {name: w-ns}\n")
            .err(ForbiddenKind, W_ATTACK, "apiVersion");
    "kind" an_admission_webhook:
        Case::workload()
            .file(W_ATTACK, "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: w-hook}\n")
            .err(ForbiddenKind, W_ATTACK, "apiVersion");

    // ── selectors: what Cluster API's add-on controllers act on ──
    "selector" resource_set_for_the_management_cluster:
        Case::workload()
            .file(W_ATTACK, &resource_set("{matchLabels: {cluster.x-k8s.io/cluster-name: mgmt}}", "[{kind: ConfigMap, name: w-crs}]"))
            .err(ForeignSelector, W_ATTACK, "clusterSelector");
    "selector" resource_set_for_every_cluster:
        Case::workload()
            .file(W_ATTACK, &resource_set("{}", "[{kind: ConfigMap, name: w-crs}]"))
            .err(ForeignSelector, W_ATTACK, "clusterSelector");
    "selector" resource_set_by_match_expressions:
        Case::workload()
            .file(W_ATTACK, &resource_set("{matchExpressions: [{key: cluster.x-k8s.io/cluster-name, operator: In, values: [w, mgmt]}]}", "[{kind: ConfigMap, name: w-crs}]"))
            .err(ForeignSelector, W_ATTACK, "clusterSelector");
    "selector" resource_set_by_another_label:
        Case::workload()
            .file(W_ATTACK, &resource_set("{matchLabels: {tier: prod}}", "[{kind: ConfigMap, name: w-crs}]"))
            .err(ForeignSelector, W_ATTACK, "clusterSelector");
    "selector" resource_set_without_a_selector:
        Case::workload()
            .file(W_ATTACK, "apiVersion: addons.cluster.x-k8s.io/v1beta2\nkind: ClusterResourceSet\nmetadata: {name: w-crs}\nspec:\n  resources: [{kind: ConfigMap, name: w-crs}]\n")
            .err(ForeignSelector, W_ATTACK, "spec");
    "selector" chart_for_another_workload:
        Case::workload()
            .file(W_ATTACK, &chart("{matchLabels: {cluster.x-k8s.io/cluster-name: ok}}", ""))
            .err(ForeignSelector, W_ATTACK, "clusterSelector");
    "selector" chart_for_every_cluster:
        Case::workload()
            .file(W_ATTACK, &chart("{}", ""))
            .err(ForeignSelector, W_ATTACK, "clusterSelector");

    // ── references: what the add-on controllers read on the tenant's behalf ──
    "reference" resource_set_copying_the_management_clusters_credentials:
        Case::workload()
            .file(W_ATTACK, &resource_set(OWN, "[{kind: Secret, name: mgmt-vsphere-credentials}]"))
            .err(ForeignReference, W_ATTACK, "name: mgmt-vsphere");
    "reference" resource_set_copying_an_admins_secret:
        Case::workload()
            .file(W_ATTACK, &resource_set(OWN, "[{kind: ConfigMap, name: w-crs}, {kind: Secret, name: registry-credentials}]"))
            .err(ForeignReference, W_ATTACK, "name: registry");
    "reference" chart_credentials_from_capstan_system:
        Case::workload()
            .file(W_ATTACK, &chart(OWN, "  credentials: {key: token, secret: {name: w-token, namespace: capstan-system}}\n"))
            .err(ForeignReference, W_ATTACK, "namespace: capstan-system");
    "reference" chart_credentials_of_another_cluster:
        Case::workload()
            .file(W_ATTACK, &chart(OWN, "  credentials: {key: token, secret: {name: ok-registry}}\n"))
            .err(ForeignReference, W_ATTACK, "name: ok-registry");
    "reference" chart_ca_from_another_namespace:
        Case::workload()
            .file(W_ATTACK, &chart(OWN, "  tlsConfig: {caSecret: {name: w-ca, namespace: kube-system}}\n"))
            .err(ForeignReference, W_ATTACK, "namespace: kube-system");
    "reference" chart_values_reading_the_controllers_environment:
        Case::workload()
            .file(W_ATTACK, &chart(OWN, "  valuesTemplate: 'token: {{ env \"AWS_SECRET_ACCESS_KEY\" }}'\n"))
            .err(ForeignReference, W_ATTACK, "valuesTemplate");
    "reference" a_config_map_claiming_the_management_cluster:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: w-cm\n  labels: {cluster.x-k8s.io/cluster-name: mgmt}\n")
            .err(ForeignReference, W_ATTACK, "cluster.x-k8s.io/cluster-name: mgmt");
    "reference" an_owner_reference_to_the_management_cluster:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: w-cm\n  ownerReferences: [{apiVersion: cluster.x-k8s.io/v1beta2, kind: Cluster, name: mgmt, uid: 00000000-0000-0000-0000-000000000001}]\n")
            .err(ForeignReference, W_ATTACK, "ownerReferences");

    "reference" an_owner_reference_under_an_own_name_with_anothers_uid:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: w-cm\n  ownerReferences: [{apiVersion: cluster.x-k8s.io/v1beta2, kind: Cluster, name: w, uid: 00000000-0000-0000-0000-00000000000a, blockOwnerDeletion: true}]\n")
            .err(ForeignReference, W_ATTACK, "ownerReferences");
    "reference" an_older_resource_set_copying_the_management_clusters_kubeconfig:
        Case::workload()
            .file(W_ATTACK, "apiVersion: addons.cluster.x-k8s.io/v1beta1\nkind: ClusterResourceSet\nmetadata: {name: w-crs}\nspec:\n  clusterSelector: {matchLabels: {cluster.x-k8s.io/cluster-name: w}}\n  resources: [{kind: Secret, name: mgmt-kubeconfig}]\n")
            .err(ForeignReference, W_ATTACK, "name: mgmt-kubeconfig");
    "reference" chart_ca_of_another_cluster:
        Case::workload()
            .file(W_ATTACK, &chart(OWN, "  tlsConfig: {caSecret: {name: ok-ca}}\n"))
            .err(ForeignReference, W_ATTACK, "name: ok-ca");

    // ── credentials in Git ──
    "secret" a_secret_with_credentials:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: Secret\nmetadata: {name: w-creds}\nstringData: {password: hunter2}\n")
            .err_col(SecretWithData, W_ATTACK, "stringData:", 1);

    // ── Secrets a controller fills in ──
    "secret" a_service_account_token_for_a_management_account:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: w-token\n  annotations: {kubernetes.io/service-account.name: eksa-controller-manager}\ntype: kubernetes.io/service-account-token\n")
            .err(FillableSecret, W_ATTACK, "kubernetes.io/service-account.name")
            .err(FillableSecret, W_ATTACK, "type: kubernetes.io/service-account-token");
    "secret" a_secret_a_reflector_fills_with_the_managements_kubeconfig:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: w-copy\n  annotations: {reflector.v1.k8s.emberstack.com/reflects: eksa-system/mgmt-kubeconfig}\n")
            .err(FillableSecret, W_ATTACK, "reflector.v1");
    "secret" a_secret_of_cluster_apis_own_type:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: Secret\nmetadata: {name: w-kubeconfig-copy}\ntype: cluster.x-k8s.io/secret\n")
            .err(FillableSecret, W_ATTACK, "type: cluster.x-k8s.io/secret");

    // ── names controllers generate for a cluster that has not joined yet ──
    "squat" a_kubeconfig_for_a_cluster_not_yet_joined:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: Secret\nmetadata: {name: w-prod-kubeconfig}\n")
            .err(ReservedName, W_ATTACK, "name: w-prod-kubeconfig");
    "squat" a_ca_for_a_cluster_not_yet_joined:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: Secret\nmetadata: {name: w-prod-ca}\n")
            .err(ReservedName, W_ATTACK, "name: w-prod-ca");
    "squat" an_init_lock_for_a_cluster_not_yet_joined:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w-prod-lock}\n")
            .err(ReservedName, W_ATTACK, "name: w-prod-lock");
    "squat" vsphere_credentials_for_a_cluster_not_yet_joined:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: Secret\nmetadata: {name: w-prod-vsphere-credentials}\n")
            .err(ReservedName, W_ATTACK, "name: w-prod-vsphere");
    "squat" an_etcd_lock_two_clusters_would_share:
        Case::workload()
            .file(W_ATTACK, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w-etcd-lock}\n")
            .err(ReservedName, W_ATTACK, "name: w-etcd-lock");
    "squat" a_cluster_named_to_share_anothers_etcd_lock:
        Case::workload()
            .file(W_ETCD_CLUSTER_FILE, &W_OK_CLUSTER.replace("w-ok", "w-etcd"))
            .broken(&[W_ETCD_DIR])
            .in_cluster(W_ETCD_DIR)
            .err(ReservedName, W_ETCD_CLUSTER_FILE, "name: w-etcd}\nspec");

    // ── kinds at versions the checks do not know ──
    "kind" a_resource_set_at_a_version_the_checks_do_not_know:
        Case::workload()
            .file(W_ATTACK, "apiVersion: addons.cluster.x-k8s.io/v1alpha3\nkind: ClusterResourceSet\nmetadata: {name: w-crs}\nspec:\n  clusterSelector: {matchLabels: {cluster.x-k8s.io/cluster-name: w}}\n  resources: [{kind: Secret, name: mgmt-kubeconfig}]\n")
            .err(ForbiddenKind, W_ATTACK, "apiVersion");

    // ── values templates: read as Go's lexer reads them, calling pure functions only ──
    "template" env_behind_a_quoted_right_delimiter:
        Case::workload()
            .file(W_ATTACK, &chart(OWN, &values("a: {{ \"}}\" }}{{ env \"AWS_SECRET_ACCESS_KEY\" }}")))
            .err(ForeignReference, W_ATTACK, "env \"AWS");
    "template" env_piped_after_a_quoted_right_delimiter:
        Case::workload()
            .file(W_ATTACK, &chart(OWN, &values("a: {{ print \"}}\" | env }}")))
            .err(ForeignReference, W_ATTACK, "env }}");
    "template" env_behind_an_escaped_quote:
        Case::workload()
            .file(W_ATTACK, &chart(OWN, &values("a: {{ print \"\\\"}}\" | expandenv }}")))
            .err(ForeignReference, W_ATTACK, "expandenv");
    "template" a_lookup_behind_a_raw_string_across_lines:
        Case::workload()
            .file(W_ATTACK, &chart(OWN, &values("a: {{ print `\n    }}\n    ` }}{{ getHostByName \"metadata.internal\" }}")))
            .err(ForeignReference, W_ATTACK, "getHostByName");
    "template" env_behind_a_character_constant:
        Case::workload()
            .file(W_ATTACK, &chart(OWN, &values("a: {{ print '}' }}{{ env \"HOME\" }}")))
            .err(ForeignReference, W_ATTACK, "env \"HOME");
    "template" env_behind_a_comment_and_trim_markers:
        Case::workload()
            .file(W_ATTACK, &chart(OWN, &values("a: {{- /* }} */ -}} {{- env \"A\" -}}")))
            .err(ForeignReference, W_ATTACK, "env \"A");
    "template" env_in_a_nested_pipeline:
        Case::workload()
            .file(W_ATTACK, &chart(OWN, &values("a: {{ printf \"%s\" (quote (env \"A\")) }}")))
            .err(ForeignReference, W_ATTACK, "env \"A");
    "template" env_in_a_defined_template:
        Case::workload()
            .file(W_ATTACK, &chart(OWN, &values("{{ define \"t\" }}{{ env \"A\" }}{{ end }}a: {{ template \"t\" }}")))
            .err(ForeignReference, W_ATTACK, "env \"A");
    "template" the_clock_in_the_values:
        Case::workload()
            .file(W_ATTACK, &chart(OWN, &values("a: {{ now | date \"2006\" }}")))
            .err(TemplateFunction, W_ATTACK, "now")
            .err(TemplateFunction, W_ATTACK, "date \"");
    "template" a_function_only_helm_defines:
        Case::workload()
            .file(W_ATTACK, &chart(OWN, &values("a: {{ lookup \"v1\" \"Secret\" \"capstan-system\" \"capstan-git\" }}")))
            .err(TemplateSyntax, W_ATTACK, "lookup");

    // ── the management cluster's fleet-wide objects, written on a workload's behalf ──
    "release" a_release_no_other_cluster_uses:
        Case::workload()
            .set(W, "kubernetesVersion:", "kubernetesVersion: \"1.32\"\neksaVersion: v0.25.2")
            .err(UndeclaredRelease, W, "eksaVersion");
    "release" a_release_by_its_deprecated_bundles_ref:
        Case::workload()
            .set(W, "kubernetesVersion:", "kubernetesVersion: \"1.32\"\nbundlesRef: {apiVersion: anywhere.eks.amazonaws.com/v1alpha1, name: bundles-98, namespace: eksa-system}")
            .warn(DeprecatedField, W, "bundlesRef")
            .err(UndeclaredRelease, W, "name: bundles-98");

    // ── deletion of the management cluster ──
    "tombstone" a_tombstone_for_the_management_cluster:
        Case::management()
            .file("clusters/mgmt/tombstone.yaml", "apiVersion: capstan.dev/v1alpha1\nkind: Tombstone\nreason: cleanup\n")
            .err(ManagementTombstone, "clusters/mgmt/tombstone.yaml", "apiVersion");
}

/// A cluster `w-etcd`, whose init lock `w-etcd-lock` would be `w`'s etcd lock.
const W_ETCD_DIR: &str = "clusters/mgmt/workload-clusters/w-etcd";
const W_ETCD_CLUSTER_FILE: &str = "clusters/mgmt/workload-clusters/w-etcd/cluster.yaml";

/// The vSphere workload's second file (its datacenter and machine configs).
const W_VSPHERE_FILE: &str = W_VS;
/// A second workload `w-ok`, whose name makes `w-ok-…` its own.
const W2_CLUSTER_FILE: &str = "clusters/mgmt/workload-clusters/w-ok/cluster.yaml";
const W_OK_CLUSTER: &str = r#"
    apiVersion: anywhere.eks.amazonaws.com/v1alpha1
    kind: Cluster
    metadata: {name: w-ok}
    spec:
      kubernetesVersion: "1.33"
      eksaVersion: v0.26.1
      managementCluster: {name: mgmt}
      datacenterRef: {kind: DockerDatacenterConfig, name: w-ok}
      controlPlaneConfiguration: {count: 1}
      workerNodeGroupConfigurations: [{name: md-0, count: 1}]
      clusterNetwork:
        pods: {cidrBlocks: [172.30.0.0/16]}
        services: {cidrBlocks: [10.130.0.0/16]}
    ---
    apiVersion: anywhere.eks.amazonaws.com/v1alpha1
    kind: DockerDatacenterConfig
    metadata: {name: w-ok}
"#;

// ───────────────────────── applied to the real API server ─────────────────────────

/// The attacks applied by the agent (each a `#[tokio::test]` below), with their class.
const APPLIED: &[(&str, &str)] = &[
    (
        "adoption",
        "an_admins_config_map_named_for_the_tenant_is_not_taken_over",
    ),
    (
        "adoption",
        "an_admins_secret_with_credentials_is_not_taken_over",
    ),
    ("adoption", "a_secret_cluster_api_wrote_is_not_taken_over"),
    (
        "adoption",
        "another_clusters_object_named_for_the_tenant_is_not_taken_over",
    ),
    (
        "adoption",
        "an_object_an_admin_marked_for_adoption_is_adopted",
    ),
    (
        "tombstone",
        "a_tombstone_spares_an_object_given_to_another_cluster",
    ),
    (
        "tombstone",
        "a_tombstone_spares_an_object_recreated_under_its_name",
    ),
    (
        "tombstone",
        "the_agent_never_deletes_its_own_management_cluster",
    ),
    (
        "cluster",
        "a_new_directory_taking_an_orphans_name_gets_nothing",
    ),
    (
        "cluster",
        "a_cluster_moving_to_another_namespace_reaches_nothing_else",
    ),
    ("secret", "a_service_account_token_secret_is_never_minted"),
    (
        "squat",
        "a_cluster_joining_after_a_squat_finds_none_of_its_generated_names_taken",
    ),
    (
        "squat",
        "a_cluster_joining_after_its_rendered_names_were_taken_is_refused_naming_the_owner",
    ),
    (
        "release",
        "a_release_of_its_own_is_not_written_as_the_management_identity",
    ),
];

/// A fleet in a namespace shared by its clusters (as EKS Anywhere's `eksa-system` is): the
/// management cluster `hm-<tag>`, the victim `hv-<tag>` and the tenant `ht-<tag>`.
struct Arena {
    files: FleetDir,
    /// A kubeconfig of the agent's ServiceAccount with a token of this arena's own, and the
    /// token's credential id in the audit log: what the agent of this arena wrote, among the
    /// agents of the other tests.
    kubeconfig: std::path::PathBuf,
    credential: String,
    ns: String,
    mgmt: String,
    victim: String,
    tenant: String,
}

const AGENT: &str = "system:serviceaccount:capstan-system:capstan";

fn cm() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
}

fn secret() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&())
}

fn capi_cluster() -> ApiResource {
    capstan_e2e::resource("cluster.x-k8s.io", "v1beta2", "Cluster", "clusters")
}

impl Arena {
    /// The fleet, applied once as the agent (nothing hostile yet).
    async fn new(tag: &str) -> Arena {
        capstan_e2e::agent_logs();
        let ns = format!("hs-{tag}");
        let req = |name: &str, mgmt: Option<&str>, cidrs: (&str, &str)| ClusterRequest {
            name: name.into(),
            management: mgmt.map(str::to_string),
            provider: "docker".into(),
            namespace: Some(ns.clone()),
            pod_cidr: Some(cidrs.0.into()),
            service_cidr: Some(cidrs.1.into()),
            ..Default::default()
        };
        let (mgmt, victim, tenant) = (
            format!("hm-{tag}"),
            format!("hv-{tag}"),
            format!("ht-{tag}"),
        );
        let mut files = FleetDir::new(req(&mgmt, None, ("192.168.0.0/16", "10.96.0.0/12")));
        files.add(req(
            &victim,
            Some(&mgmt),
            ("172.16.0.0/16", "10.112.0.0/16"),
        ));
        files.add(req(
            &tenant,
            Some(&mgmt),
            ("172.17.0.0/16", "10.113.0.0/16"),
        ));
        let cp = capstan_harness::shared().await;
        let (kubeconfig, credential) =
            capstan::install::testing::agent_credential(cp, &format!("hostile-{tag}")).await;
        let arena = Arena {
            files,
            kubeconfig,
            credential,
            ns,
            mgmt,
            victim,
            tenant,
        };
        let out = arena.reconcile("r0", false).await;
        for c in &out.clusters {
            assert_ne!(c.phase, Phase::Failed, "{}: {}", c.name, c.message);
        }
        arena
    }

    async fn reconcile(&self, revision: &str, plan_only: bool) -> Outcome {
        let client = capstan::k8s::connect(Some(&self.kubeconfig), None)
            .await
            .unwrap()
            .client;
        let opts = Options {
            revision: revision.into(),
            management: Some(self.mgmt.clone()),
            ..Default::default()
        };
        if plan_only {
            capstan::reconcile::plan(&client, &self.files.fleet(), &opts)
                .await
                .unwrap()
        } else {
            reconcile(&client, &self.files.fleet(), &opts)
                .await
                .unwrap()
        }
    }

    /// Writes a file into the tenant's directory.
    fn attack(&self, file: &str, yaml: &str) {
        std::fs::write(self.files.dir(&self.tenant).join(file), yaml).unwrap();
    }

    /// An object created by someone else than the agent (an admin, Cluster API), as `manager`.
    async fn plant(&self, ar: &ApiResource, obj: Value) -> Victim {
        let cp = capstan_harness::shared().await;
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        let api: Api<DynamicObject> = Api::namespaced_with(cp.client(), &self.ns, ar);
        let mut obj = obj;
        obj["apiVersion"] = json!(ar.api_version);
        obj["kind"] = json!(ar.kind);
        obj["metadata"]["namespace"] = json!(self.ns);
        let o = api
            .patch(&name, &PatchParams::apply("admin"), &Patch::Apply(&obj))
            .await
            .unwrap();
        Victim {
            ar: ar.clone(),
            ns: self.ns.clone(),
            name,
            version: o.metadata.resource_version.unwrap(),
        }
    }

    /// Runs `f`, then checks from the audit log that every write the agent made meanwhile
    /// succeeded only on the tenant's own objects (or its record, Events, namespaces), and
    /// that every victim is as it was.
    async fn harmless<F: std::future::Future<Output = T>, T>(
        &self,
        victims: &[&Victim],
        f: F,
    ) -> T {
        let cp = capstan_harness::shared().await;
        let mark = cp.audit().mark();
        let out = f.await;
        cp.audit()
            .sync(&cp.client(), Duration::from_secs(10))
            .await
            .unwrap();
        let events = cp.audit().events_since(mark).unwrap();
        let bad: Vec<String> = events
            .iter()
            .filter(|e| e.credential_id() == Some(self.credential.as_str()))
            .filter(|e| e.user.username == AGENT && e.is_write() && succeeded(e))
            .filter(|e| !self.own(e))
            .map(describe)
            .collect();
        assert!(
            bad.is_empty(),
            "the agent wrote beyond the tenant: {bad:#?}"
        );
        for v in victims {
            v.unchanged(cp).await;
        }
        self.selectors_confined(cp).await;
        out
    }

    /// Whether a write is the tenant's own: its objects (named for it, as its identity), its
    /// record and Events in capstan-system, a namespace.
    fn own(&self, e: &AuditEvent) -> bool {
        let Some(o) = &e.object_ref else { return false };
        let resource = o.resource.as_deref().unwrap_or("");
        let name = o.name.as_deref().unwrap_or("");
        if o.namespace.as_deref() == Some(capstan::status::NAMESPACE) {
            return matches!(resource, "managedclusters" | "events");
        }
        if resource == "namespaces" {
            return true;
        }
        let as_tenant = e
            .impersonated_user
            .as_ref()
            .is_some_and(|u| u.username == capstan::k8s::identity::WORKLOAD_USER)
            && e.impersonated_user.as_ref().is_some_and(|u| {
                u.extra.get(capstan::k8s::identity::CLUSTER_EXTRA)
                    == Some(&vec![self.tenant.clone()])
            });
        as_tenant && (name == self.tenant || name.starts_with(&format!("{}-", self.tenant)))
    }

    /// No ClusterResourceSet or HelmChartProxy of the namespace selects another cluster than
    /// its own.
    async fn selectors_confined(&self, cp: &ControlPlane) {
        for (group, version, kind, plural) in [
            (
                "addons.cluster.x-k8s.io",
                "v1beta2",
                "ClusterResourceSet",
                "clusterresourcesets",
            ),
            (
                "addons.cluster.x-k8s.io",
                "v1alpha1",
                "HelmChartProxy",
                "helmchartproxies",
            ),
        ] {
            let ar = capstan_e2e::resource(group, version, kind, plural);
            let api: Api<DynamicObject> = Api::namespaced_with(cp.client(), &self.ns, &ar);
            for o in api.list(&Default::default()).await.unwrap().items {
                let own = o
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(capstan_templates::identity::CLUSTER_LABEL))
                    .cloned();
                let selects = o.data["spec"]["clusterSelector"]["matchLabels"]
                    ["cluster.x-k8s.io/cluster-name"]
                    .as_str()
                    .map(str::to_string);
                assert!(
                    own.is_some() && selects == own,
                    "{kind} {:?} (of {own:?}) selects {selects:?}",
                    o.metadata.name
                );
            }
        }
    }
}

/// An object planted before an attack, with the version it was left at.
struct Victim {
    ar: ApiResource,
    ns: String,
    name: String,
    version: String,
}

impl Victim {
    async fn unchanged(&self, cp: &ControlPlane) {
        let api: Api<DynamicObject> = Api::namespaced_with(cp.client(), &self.ns, &self.ar);
        let now = api
            .get_opt(&self.name)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{} {} was deleted", self.ar.kind, self.name));
        assert_eq!(
            now.metadata.resource_version.as_deref(),
            Some(self.version.as_str()),
            "{} {} was changed: {:?}",
            self.ar.kind,
            self.name,
            now.metadata
        );
    }
}

fn succeeded(e: &AuditEvent) -> bool {
    e.response_status
        .code
        .is_some_and(|c| (200..300).contains(&c))
}

fn describe(e: &AuditEvent) -> String {
    format!(
        "{} {} as {:?}: {}",
        e.verb,
        e.request_uri,
        e.impersonated_user.as_ref().map(|u| &u.username),
        e.response_status.code.unwrap_or_default()
    )
}

/// The tenant is Failed with AlreadyExists naming `object`, the conflict in its plan, and a
/// plan shows the same conflict (not a create).
async fn refused_as_conflict(arena: &Arena, out: &Outcome, object: &str) {
    let t = capstan_e2e::cluster_outcome(out, &arena.tenant);
    assert_eq!(t.phase, Phase::Failed, "{}", t.message);
    assert!(
        t.message.contains(Reason::AlreadyExists.as_str()) && t.message.contains(object),
        "{}",
        t.message
    );
    assert!(t.message.contains("capstan.dev/adopt="), "{}", t.message);
    let plan = arena.reconcile("plan", true).await;
    let entry = capstan_e2e::cluster_outcome(&plan, &arena.tenant)
        .plan
        .entries
        .iter()
        .find(|e| e.object.name == object)
        .unwrap_or_else(|| panic!("{object} not in the plan"));
    assert_eq!(entry.action, Action::Conflict, "{entry:?}");
    // The other clusters go on.
    for c in [&arena.mgmt, &arena.victim] {
        assert_ne!(capstan_e2e::cluster_outcome(out, c).phase, Phase::Failed);
    }
}

#[tokio::test]
async fn an_admins_config_map_named_for_the_tenant_is_not_taken_over() {
    let a = Arena::new("cm").await;
    let name = format!("{}-settings", a.tenant);
    let victim = a
        .plant(
            &cm(),
            json!({"metadata": {"name": name}, "data": {"owner": "admin"}}),
        )
        .await;
    a.attack(
        "attack.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{owner: tenant}}\n"
        ),
    );
    let out = a.harmless(&[&victim], a.reconcile("r1", false)).await;
    refused_as_conflict(&a, &out, &name).await;
}

#[tokio::test]
async fn an_admins_secret_with_credentials_is_not_taken_over() {
    let a = Arena::new("sec").await;
    let name = format!("{}-registry", a.tenant);
    let victim = a
        .plant(
            &secret(),
            json!({"metadata": {"name": name}, "stringData": {"token": "s3cr3t"}}),
        )
        .await;
    a.attack(
        "attack.yaml",
        &format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}}}\n"),
    );
    let out = a.harmless(&[&victim], a.reconcile("r1", false)).await;
    refused_as_conflict(&a, &out, &name).await;
}

#[tokio::test]
async fn a_secret_cluster_api_wrote_is_not_taken_over() {
    let a = Arena::new("kcfg").await;
    let name = format!("{}-kubeconfig", a.tenant);
    let victim = a
        .plant(
            &secret(),
            json!({"metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": a.tenant}},
                "type": "cluster.x-k8s.io/secret", "stringData": {"value": "apiVersion: v1\nkind: Config\n"}}),
        )
        .await;
    a.attack(
        "attack.yaml",
        &format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}}}\n"),
    );
    let out = a.harmless(&[&victim], a.reconcile("r1", false)).await;
    refused_as_conflict(&a, &out, &name).await;
}

#[tokio::test]
async fn another_clusters_object_named_for_the_tenant_is_not_taken_over() {
    let a = Arena::new("oth").await;
    let name = format!("{}-shared", a.tenant);
    // Labelled as the agent labels the victim's objects (the watches see it as the victim's).
    let victim = a
        .plant(
            &cm(),
            json!({"metadata": {"name": name, "labels": {
                capstan_templates::identity::MANAGED_BY_LABEL: capstan_templates::identity::MANAGED_BY,
                capstan_templates::identity::CLUSTER_LABEL: a.victim}}, "data": {"owner": "victim"}}),
        )
        .await;
    a.attack(
        "attack.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{owner: tenant}}\n"
        ),
    );
    let out = a.harmless(&[&victim], a.reconcile("r1", false)).await;
    refused_as_conflict(&a, &out, &name).await;
    let t = capstan_e2e::cluster_outcome(&out, &a.tenant);
    assert!(
        t.message
            .contains(&format!("labelled for cluster {}", a.victim)),
        "{}",
        t.message
    );
}

#[tokio::test]
async fn an_object_an_admin_marked_for_adoption_is_adopted() {
    // The other side of the rule: what an admin hands over on purpose is taken over.
    let a = Arena::new("adopt").await;
    let cp = capstan_harness::shared().await;
    let name = format!("{}-settings", a.tenant);
    a.plant(
        &cm(),
        json!({"metadata": {"name": name, "annotations": {capstan_templates::identity::ADOPT_ANNOTATION: a.tenant}}, "data": {"owner": "admin"}}),
    )
    .await;
    a.attack(
        "attack.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{owner: tenant}}\n"
        ),
    );
    let out = a.harmless(&[], a.reconcile("r1", false)).await;
    assert_ne!(
        capstan_e2e::cluster_outcome(&out, &a.tenant).phase,
        Phase::Failed
    );
    let api: Api<DynamicObject> = Api::namespaced_with(cp.client(), &a.ns, &cm());
    let now = api.get(&name).await.unwrap();
    assert_eq!(now.data["data"]["owner"], "tenant");
    assert_eq!(
        now.metadata.labels.unwrap()[capstan_templates::identity::CLUSTER_LABEL],
        a.tenant
    );
}

/// The tenant's ConfigMap `<tenant>-cm`, applied by the agent.
async fn tenant_config_map(a: &Arena) -> String {
    let name = format!("{}-cm", a.tenant);
    a.attack(
        "cm.yaml",
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{a: b}}\n"),
    );
    let out = a.reconcile("r1", false).await;
    assert_ne!(
        capstan_e2e::cluster_outcome(&out, &a.tenant).phase,
        Phase::Failed
    );
    name
}

/// Replaces the tenant's spec with a tombstone.
fn tombstone(a: &Arena) {
    let dir = a.files.dir(&a.tenant);
    for f in std::fs::read_dir(&dir).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    std::fs::write(
        dir.join("tombstone.yaml"),
        capstan_layout::intent::document("Tombstone", "the tenant deletes itself"),
    )
    .unwrap();
}

/// Reconciles until the tenant is deleted (the Cluster goes first; the rest once it is gone).
async fn until_deleted(a: &Arena) {
    for round in 0..20 {
        let out = a.reconcile(&format!("d{round}"), false).await;
        if capstan_e2e::cluster_outcome(&out, &a.tenant).message == capstan::reconcile::DELETED {
            return;
        }
        // The garbage collector is not running here: a Cluster without finalizers goes at once.
    }
    panic!("{} not deleted", a.tenant);
}

#[tokio::test]
async fn a_tombstone_spares_an_object_given_to_another_cluster() {
    let a = Arena::new("give").await;
    let cp = capstan_harness::shared().await;
    let name = tenant_config_map(&a).await;
    // An admin hands the tenant's ConfigMap to the victim cluster (relabels it).
    let api: Api<DynamicObject> = Api::namespaced_with(cp.client(), &a.ns, &cm());
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"labels": {capstan_templates::identity::CLUSTER_LABEL: a.victim}}}),
        ),
    )
    .await
    .unwrap();
    let given = Victim {
        ar: cm(),
        ns: a.ns.clone(),
        name: name.clone(),
        version: api
            .get(&name)
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap(),
    };
    tombstone(&a);
    a.harmless(&[&given], until_deleted(&a)).await;
    let capi: Api<DynamicObject> = Api::namespaced_with(cp.client(), &a.ns, &capi_cluster());
    assert!(
        capi.get_opt(&a.tenant).await.unwrap().is_none(),
        "the tenant's own Cluster is deleted"
    );
}

#[tokio::test]
async fn a_tombstone_spares_an_object_recreated_under_its_name() {
    let a = Arena::new("recr").await;
    let cp = capstan_harness::shared().await;
    let name = tenant_config_map(&a).await;
    // Deleted under the agent and created again by an admin, with the same name, unlabelled.
    let api: Api<DynamicObject> = Api::namespaced_with(cp.client(), &a.ns, &cm());
    api.delete(&name, &Default::default()).await.unwrap();
    let recreated = a
        .plant(
            &cm(),
            json!({"metadata": {"name": name}, "data": {"owner": "admin"}}),
        )
        .await;
    tombstone(&a);
    a.harmless(&[&recreated], until_deleted(&a)).await;
}

#[tokio::test]
async fn the_agent_never_deletes_its_own_management_cluster() {
    // Validation refuses a management cluster's tombstone while it manages workloads; with none
    // left (their directories gone: orphaned), it passes validation, and the agent refuses it.
    let a = Arena::new("mgmt").await;
    let cp = capstan_harness::shared().await;
    for w in [&a.victim, &a.tenant] {
        std::fs::remove_dir_all(a.files.dir(w)).unwrap();
    }
    let mdir = a.files.dir(&a.mgmt);
    for f in std::fs::read_dir(&mdir).unwrap() {
        let p = f.unwrap().path();
        if p.is_file() {
            std::fs::remove_file(p).unwrap();
        }
    }
    std::fs::write(
        mdir.join("tombstone.yaml"),
        capstan_layout::intent::document("Tombstone", "by hand"),
    )
    .unwrap();
    assert!(
        !a.files.fleet().has_errors(),
        "{:?}",
        a.files.fleet().all_diagnostics()
    );
    let capi: Api<DynamicObject> = Api::namespaced_with(cp.client(), &a.ns, &capi_cluster());
    let mgmt = Victim {
        ar: capi_cluster(),
        ns: a.ns.clone(),
        name: a.mgmt.clone(),
        version: capi
            .get(&a.mgmt)
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap(),
    };
    let out = a.harmless(&[&mgmt], a.reconcile("r1", false)).await;
    let m = capstan_e2e::cluster_outcome(&out, &a.mgmt);
    assert_eq!(m.phase, Phase::Failed, "{}", m.message);
    assert!(
        m.message.contains("does not delete the management cluster"),
        "{}",
        m.message
    );
}

#[tokio::test]
async fn a_new_directory_taking_an_orphans_name_gets_nothing() {
    let a = Arena::new("orph").await;
    let cp = capstan_harness::shared().await;
    // The victim's directory is removed (a bad merge, or on purpose): it is orphaned, running.
    let kept = std::fs::read_to_string(a.files.dir(&a.victim).join("cluster.yaml")).unwrap();
    std::fs::remove_dir_all(a.files.dir(&a.victim)).unwrap();
    let out = a.reconcile("r1", false).await;
    assert_eq!(
        capstan_e2e::cluster_outcome(&out, &a.victim).phase,
        Phase::Orphaned
    );
    let capi: Api<DynamicObject> = Api::namespaced_with(cp.client(), &a.ns, &capi_cluster());
    let victim = Victim {
        ar: capi_cluster(),
        ns: a.ns.clone(),
        name: a.victim.clone(),
        version: capi
            .get(&a.victim)
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap(),
    };
    // A pull request adds a directory of that name: first with a tombstone, then with a spec.
    let dir = a.files.dir(&a.victim);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("tombstone.yaml"),
        capstan_layout::intent::document("Tombstone", "mine now"),
    )
    .unwrap();
    let out = a.harmless(&[&victim], a.reconcile("r2", false)).await;
    let v = capstan_e2e::cluster_outcome(&out, &a.victim);
    assert_eq!(v.phase, Phase::Orphaned, "{}", v.message);
    assert!(v.message.contains("capstan.dev/adopt="), "{}", v.message);
    std::fs::remove_file(dir.join("tombstone.yaml")).unwrap();
    std::fs::write(
        dir.join("cluster.yaml"),
        kept.replace("count: 1", "count: 3"),
    )
    .unwrap();
    let out = a.harmless(&[&victim], a.reconcile("r3", false)).await;
    assert_eq!(
        capstan_e2e::cluster_outcome(&out, &a.victim).phase,
        Phase::Orphaned
    );
}

#[tokio::test]
async fn a_cluster_moving_to_another_namespace_reaches_nothing_else() {
    let a = Arena::new("move").await;
    let cp = capstan_harness::shared().await;
    let api: Api<DynamicObject> = Api::namespaced_with(cp.client(), &a.ns, &capi_cluster());
    let mut victims = Vec::new();
    for c in [&a.mgmt, &a.victim] {
        victims.push(Victim {
            ar: capi_cluster(),
            ns: a.ns.clone(),
            name: c.clone(),
            version: api.get(c).await.unwrap().metadata.resource_version.unwrap(),
        });
    }
    let text = std::fs::read_to_string(a.files.dir(&a.tenant).join("cluster.yaml")).unwrap();
    let moved = text.replace(
        &format!("namespace: \"{}\"", a.ns),
        &format!("namespace: \"{}-moved\"", a.ns),
    );
    assert_ne!(moved, text);
    std::fs::write(a.files.dir(&a.tenant).join("cluster.yaml"), moved).unwrap();
    let refs: Vec<&Victim> = victims.iter().collect();
    let out = a.harmless(&refs, a.reconcile("r1", false)).await;
    // EKS Anywhere holds a cluster's namespace immutable: nothing of the revision is applied.
    let t = capstan_e2e::cluster_outcome(&out, &a.tenant);
    assert_eq!(t.phase, Phase::Failed, "{}", t.message);
    assert!(t.message.contains("metadata.namespace"), "{}", t.message);
}

#[tokio::test]
async fn a_service_account_token_secret_is_never_minted() {
    // kube-controller-manager's token controller fills a Secret of type
    // kubernetes.io/service-account-token with a token of the account it names: a management
    // controller's account, in the namespace clusters share, is one Secret away.
    let a = Arena::new("tok").await;
    let cp = capstan_harness::shared().await;
    let controller = capstan_harness::TokenController::start(cp).await.unwrap();
    let account = format!("{}-controller", a.mgmt);
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(cp.client(), &a.ns);
    accounts
        .patch(
            &account,
            &PatchParams::apply("admin"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}})),
        )
        .await
        .unwrap();
    let token_secret = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
            "metadata": {"name": name, "annotations": {"kubernetes.io/service-account.name": account}}})
    };
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(cp.client(), &a.ns);

    // The attack is real: the same Secret written by an admin is filled with a token that
    // authenticates as the account.
    let real = format!("{}-admin-token", a.mgmt);
    secrets
        .patch(
            &real,
            &PatchParams::apply("admin"),
            &Patch::Apply(token_secret(&real)),
        )
        .await
        .unwrap();
    let filled = kube::runtime::wait::await_condition(
        secrets.clone(),
        &real,
        |s: Option<&k8s_openapi::api::core::v1::Secret>| {
            s.and_then(|s| s.data.as_ref())
                .is_some_and(|d| d.contains_key("token"))
        },
    );
    let filled = tokio::time::timeout(Duration::from_secs(60), filled)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the token controller never filled {real}:\n{}",
                controller.log_tail()
            )
        })
        .unwrap()
        .unwrap();
    let token = String::from_utf8(filled.data.unwrap()["token"].0.clone()).unwrap();
    let reviews: Api<k8s_openapi::api::authentication::v1::TokenReview> = Api::all(cp.client());
    let review = reviews
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        review.status.and_then(|s| s.user).and_then(|u| u.username),
        Some(format!("system:serviceaccount:{}:{account}", a.ns))
    );

    // From the tenant's directory: refused by validation, nothing written.
    let attack = format!("{}-token", a.tenant);
    a.attack(
        "attack.yaml",
        &format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: {attack}\n  annotations: {{kubernetes.io/service-account.name: {account}}}\ntype: kubernetes.io/service-account-token\n"),
    );
    let out = a.harmless(&[], a.reconcile("r1", false)).await;
    let t = capstan_e2e::cluster_outcome(&out, &a.tenant);
    assert_eq!(t.phase, Phase::Failed, "{}", t.message);
    // As the workload identity itself, past validation: refused by the API server.
    let agent = capstan::k8s::connect(Some(&a.kubeconfig), None)
        .await
        .unwrap()
        .client;
    let writer: Api<DynamicObject> = Api::namespaced_with(
        impersonating(&agent, Tenant::Workload, &a.tenant),
        &a.ns,
        &secret(),
    );
    let mut obj = token_secret(&attack);
    obj["metadata"]["labels"] = json!({capstan_templates::identity::MANAGED_BY_LABEL: capstan_templates::identity::MANAGED_BY, capstan_templates::identity::CLUSTER_LABEL: a.tenant});
    match writer
        .patch(
            &attack,
            &PatchParams::apply(capstan::k8s::FIELD_MANAGER).force(),
            &Patch::Apply(&obj),
        )
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(
            capstan::install::tenancy::denial(&s.message).map(|(r, _)| r),
            Some(Reason::FillableSecret.as_str()),
            "{}",
            s.message
        ),
        other => panic!("the workload identity's token Secret was not refused: {other:?}"),
    }
    assert!(secrets.get_opt(&attack).await.unwrap().is_none());
}

/// A `ClusterRequest` for a workload cluster of the arena's management cluster.
fn joining(a: &Arena, name: &str, cidrs: (&str, &str)) -> ClusterRequest {
    ClusterRequest {
        name: name.into(),
        management: Some(a.mgmt.clone()),
        provider: "docker".into(),
        namespace: Some(a.ns.clone()),
        pod_cidr: Some(cidrs.0.into()),
        service_cidr: Some(cidrs.1.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_cluster_joining_after_a_squat_finds_none_of_its_generated_names_taken() {
    let mut a = Arena::new("sq").await;
    let cp = capstan_harness::shared().await;
    let prod = format!("{}-prod", a.tenant);
    // Before `<tenant>-prod` joins, the tenant writes what Cluster API and its bootstrap
    // provider would generate for it: its kubeconfig, its CA, its init lock.
    a.attack(
        "attack.yaml",
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: {prod}-kubeconfig}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: {prod}-ca}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {prod}-lock}}\n"
        ),
    );
    let out = a.harmless(&[], a.reconcile("r1", false)).await;
    let t = capstan_e2e::cluster_outcome(&out, &a.tenant);
    assert_eq!(t.phase, Phase::Failed, "{}", t.message);
    assert!(t.message.contains("reserved-name"), "{}", t.message);
    // Then it joins: nothing of its generated names is there to poison it.
    let req = joining(&a, &prod, ("172.18.0.0/16", "10.114.0.0/16"));
    a.files.add(req);
    let out = a.reconcile("r2", false).await;
    let p = capstan_e2e::cluster_outcome(&out, &prod);
    assert_ne!(p.phase, Phase::Failed, "{}", p.message);
    for (ar, suffix) in [
        (secret(), "-kubeconfig"),
        (secret(), "-ca"),
        (cm(), "-lock"),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(cp.client(), &a.ns, &ar);
        assert!(
            api.get_opt(&format!("{prod}{suffix}"))
                .await
                .unwrap()
                .is_none(),
            "{prod}{suffix} was written before {prod} joined"
        );
    }
}

#[tokio::test]
async fn a_cluster_joining_after_its_rendered_names_were_taken_is_refused_naming_the_owner() {
    // What capstan renders for a cluster that has not joined is the agent's to refuse: the
    // tenant's worker group `prod-md-0` renders MachineDeployment `<tenant>-prod-md-0`, valid
    // while no cluster `<tenant>-prod` exists; when it joins, its own `<tenant>-prod-md-0` is
    // not taken over, and the new cluster fails naming the owner.
    let mut a = Arena::new("sr").await;
    let cp = capstan_harness::shared().await;
    let prod = format!("{}-prod", a.tenant);
    let file = a.files.dir(&a.tenant).join("cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let renamed = text.replacen("name: \"md-0\"", "name: \"prod-md-0\"", 1);
    assert_ne!(renamed, text);
    std::fs::write(&file, renamed).unwrap();
    let out = a.reconcile("r1", false).await;
    assert_ne!(
        capstan_e2e::cluster_outcome(&out, &a.tenant).phase,
        Phase::Failed
    );
    let md = capstan_e2e::resource(
        "cluster.x-k8s.io",
        "v1beta2",
        "MachineDeployment",
        "machinedeployments",
    );
    let mds: Api<DynamicObject> = Api::namespaced_with(cp.client(), &a.ns, &md);
    let taken = format!("{prod}-md-0");
    let squatted = Victim {
        ar: md.clone(),
        ns: a.ns.clone(),
        name: taken.clone(),
        version: mds
            .get(&taken)
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap(),
    };
    let req = joining(&a, &prod, ("172.18.0.0/16", "10.114.0.0/16"));
    a.files.add(req);
    let out = a.reconcile("r2", false).await;
    let p = capstan_e2e::cluster_outcome(&out, &prod);
    assert_eq!(p.phase, Phase::Failed, "{}", p.message);
    assert!(
        p.message.contains(Reason::AlreadyExists.as_str())
            && p.message.contains(&taken)
            && p.message
                .contains(&format!("labelled for cluster {}", a.tenant)),
        "{}",
        p.message
    );
    // The squatter's names now belong to the longer cluster: it is refused by validation.
    let t = capstan_e2e::cluster_outcome(&out, &a.tenant);
    assert_eq!(t.phase, Phase::Failed, "{}", t.message);
    squatted.unchanged(cp).await;
}

#[tokio::test]
async fn a_release_of_its_own_is_not_written_as_the_management_identity() {
    // The tenant names an EKS Anywhere release no cluster of the fleet runs: its EKSARelease
    // would be a new fleet-wide object on the management cluster, written as the management
    // identity. Nothing is written for it until an admin declares the release.
    let a = Arena::new("rel").await;
    let cp = capstan_harness::shared().await;
    let spec = a.files.dir(&a.tenant).join("cluster.yaml");
    let text = std::fs::read_to_string(&spec).unwrap();
    let old: String = text
        .lines()
        .map(|l| match l.starts_with("  kubernetesVersion:") {
            true => "  kubernetesVersion: \"1.32\"\n  eksaVersion: v0.25.2\n".to_string(),
            false => format!("{l}\n"),
        })
        .collect();
    assert!(old.contains("eksaVersion: v0.25.2"), "{text}");
    std::fs::write(&spec, old).unwrap();
    let releases = capstan_e2e::resource(
        "anywhere.eks.amazonaws.com",
        "v1alpha1",
        "EKSARelease",
        "eksareleases",
    );
    let mark = cp.audit().mark();
    let out = a.harmless(&[], a.reconcile("r1", false)).await;
    let t = capstan_e2e::cluster_outcome(&out, &a.tenant);
    assert_eq!(t.phase, Phase::Failed, "{}", t.message);
    assert!(t.message.contains("undeclared-release"), "{}", t.message);
    let written = |since| -> Vec<String> {
        cp.audit()
            .events_since(since)
            .unwrap()
            .iter()
            .filter(|e| e.credential_id() == Some(a.credential.as_str()))
            .filter(|e| e.is_write() && succeeded(e))
            .filter(|e| {
                e.object_ref
                    .as_ref()
                    .is_some_and(|o| o.resource.as_deref() == Some("eksareleases"))
            })
            .map(describe)
            .collect()
    };
    assert_eq!(written(mark), Vec::<String>::new());
    let api: Api<DynamicObject> = Api::namespaced_with(cp.client(), "eksa-system", &releases);
    assert!(api.get_opt("eksa-v0-25-2").await.unwrap().is_none());

    // The admin's decision: declared in the management cluster's fleet config, the release
    // object is written, as the management identity (the write the audit check above looks for).
    std::fs::write(
        a.files.dir(&a.mgmt).join("fleet.yaml"),
        "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec: {eksaVersions: [v0.25.2]}\n",
    )
    .unwrap();
    let mark = cp.audit().mark();
    a.reconcile("r2", false).await;
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    let by_management: Vec<String> = written(mark)
        .into_iter()
        .filter(|w| w.contains("eksa-v0-25-2"))
        .collect();
    assert!(
        !by_management.is_empty()
            && by_management
                .iter()
                .all(|w| w.contains(capstan::k8s::identity::MANAGEMENT_USER)),
        "{by_management:?}"
    );
}

// ───────────────── past validation: the policy holds on its own ─────────────────

/// In [`past_validation`]'s objects: the UID of an object of another cluster (replaced by a
/// planted object's UID when the test runs).
const VICTIM_UID: &str = "victim-uid";

/// Writes a validation gap would let through, as the workload identity of the tenant cluster
/// `hp-t` (in namespace `hp-ns`, beside the management cluster `hp-m` and a victim `hp-v`):
/// `(class, name, resource, object, the reason word or HTTP status it is refused with)`.
fn past_validation() -> Vec<(&'static str, &'static str, ApiResource, Value, &'static str)> {
    let ar = capstan_e2e::resource;
    let labels = json!({capstan_templates::identity::MANAGED_BY_LABEL: "capstan", capstan_templates::identity::CLUSTER_LABEL: "hp-t"});
    let meta = |name: &str, ns: &str| json!({"name": name, "namespace": ns, "labels": labels});
    let crs = ar(
        "addons.cluster.x-k8s.io",
        "v1beta2",
        "ClusterResourceSet",
        "clusterresourcesets",
    );
    let hcp = ar(
        "addons.cluster.x-k8s.io",
        "v1alpha1",
        "HelmChartProxy",
        "helmchartproxies",
    );
    let capi = |kind: &str, plural: &str| ar("cluster.x-k8s.io", "v1beta2", kind, plural);
    let sel = |v: &str| json!({"matchLabels": {"cluster.x-k8s.io/cluster-name": v}});
    let chart_spec = |selector: Value| json!({"clusterSelector": selector, "chartName": "x", "repoURL": "oci://registry.example.invalid/x"});
    vec![
        (
            "namespace",
            "a_config_map_in_kube_system",
            cm(),
            json!({"metadata": meta("hp-t-dns", "kube-system"), "data": {"a": "b"}}),
            "ReservedNamespace",
        ),
        (
            "namespace",
            "a_secret_in_capstan_system",
            secret(),
            json!({"metadata": meta("hp-t-git", "capstan-system")}),
            "ReservedNamespace",
        ),
        (
            "name",
            "coredns_in_the_shared_namespace",
            cm(),
            json!({"metadata": meta("coredns", "hp-ns"), "data": {"Corefile": "."}}),
            "OutsideCluster",
        ),
        (
            "name",
            "the_management_clusters_credentials",
            secret(),
            json!({"metadata": meta("hp-m-vsphere-credentials", "hp-ns")}),
            "OutsideCluster",
        ),
        (
            "name",
            "the_victims_object",
            cm(),
            json!({"metadata": meta("hp-v-settings", "hp-ns")}),
            "OutsideCluster",
        ),
        (
            "adoption",
            "an_object_labelled_for_the_victim",
            cm(),
            json!({"metadata": {"name": "hp-t-x", "namespace": "hp-ns", "labels": {capstan_templates::identity::CLUSTER_LABEL: "hp-v"}}}),
            "Unlabelled",
        ),
        (
            "adoption",
            "an_admins_unlabelled_object_named_for_the_tenant",
            cm(),
            json!({"metadata": meta("hp-t-admin", "hp-ns"), "data": {"owner": "tenant"}}),
            "AlreadyExists",
        ),
        (
            "selector",
            "a_resource_set_for_the_management_cluster",
            crs.clone(),
            json!({"metadata": meta("hp-t-crs", "hp-ns"), "spec": {"clusterSelector": sel("hp-m"), "resources": [{"kind": "ConfigMap", "name": "hp-t-crs"}]}}),
            "ForeignSelector",
        ),
        (
            "selector",
            "a_resource_set_for_every_cluster",
            crs.clone(),
            json!({"metadata": meta("hp-t-crs", "hp-ns"), "spec": {"clusterSelector": {}, "resources": [{"kind": "ConfigMap", "name": "hp-t-crs"}]}}),
            "ForeignSelector",
        ),
        (
            "selector",
            "a_resource_set_by_match_expressions",
            crs.clone(),
            json!({"metadata": meta("hp-t-crs", "hp-ns"), "spec": {"clusterSelector": {"matchExpressions": [{"key": "cluster.x-k8s.io/cluster-name", "operator": "In", "values": ["hp-t", "hp-m"]}]}, "resources": [{"kind": "ConfigMap", "name": "hp-t-crs"}]}}),
            "ForeignSelector",
        ),
        (
            "selector",
            "a_chart_for_the_victim",
            hcp.clone(),
            json!({"metadata": meta("hp-t-chart", "hp-ns"), "spec": chart_spec(sel("hp-v"))}),
            "ForeignSelector",
        ),
        (
            "reference",
            "a_resource_set_copying_the_managements_secret",
            crs,
            json!({"metadata": meta("hp-t-crs", "hp-ns"), "spec": {"clusterSelector": sel("hp-t"), "resources": [{"kind": "Secret", "name": "hp-m-vsphere-credentials"}]}}),
            "ForeignReference",
        ),
        (
            "reference",
            "chart_credentials_from_capstan_system",
            hcp,
            json!({"metadata": meta("hp-t-chart", "hp-ns"), "spec": {"clusterSelector": sel("hp-t"), "chartName": "x", "repoURL": "oci://registry.example.invalid/x", "credentials": {"key": "token", "secret": {"name": "hp-t-token", "namespace": "capstan-system"}}}}),
            "ForeignReference",
        ),
        (
            "reference",
            "machines_for_the_management_cluster",
            capi("MachineDeployment", "machinedeployments"),
            json!({"metadata": meta("hp-t-md", "hp-ns"), "spec": {"clusterName": "hp-m", "selector": {"matchLabels": {"hp": "t"}}, "template": {"metadata": {"labels": {"hp": "t"}}, "spec": {"clusterName": "hp-m", "bootstrap": {"dataSecretName": "hp-t-x"}, "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachineTemplate", "name": "hp-t-x"}}}}}),
            "ForeignReference",
        ),
        (
            "reference",
            "a_cluster_on_the_managements_control_plane",
            capi("Cluster", "clusters"),
            json!({"metadata": meta("hp-t", "hp-ns"), "spec": {"controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "hp-m"}}}),
            "ForeignReference",
        ),
        (
            "reference",
            "a_config_map_claiming_the_management_cluster",
            cm(),
            json!({"metadata": {"name": "hp-t-cm", "namespace": "hp-ns", "labels": {capstan_templates::identity::CLUSTER_LABEL: "hp-t", "cluster.x-k8s.io/cluster-name": "hp-m"}}}),
            "ForeignReference",
        ),
        (
            "reference",
            "an_owner_that_is_not_the_tenants",
            cm(),
            json!({"metadata": {"name": "hp-t-own", "namespace": "hp-ns", "labels": labels, "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "hp-m", "uid": "00000000-0000-4000-8000-000000000001"}]}}),
            "ForeignReference",
        ),
        (
            "reference",
            "a_control_plane_copying_the_managements_kubeconfig_onto_its_nodes",
            ar(
                "controlplane.cluster.x-k8s.io",
                "v1beta2",
                "KubeadmControlPlane",
                "kubeadmcontrolplanes",
            ),
            json!({"metadata": meta("hp-t", "hp-ns"), "spec": {"version": "v1.33.0",
                "machineTemplate": {"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachineTemplate", "name": "hp-t-cp"}}},
                "kubeadmConfigSpec": {"files": [{"path": "/etc/kubernetes/stolen.conf", "contentFrom": {"secret": {"name": "hp-m-kubeconfig", "key": "value"}}}]}}}),
            "ForeignReference",
        ),
        (
            "reference",
            "a_control_plane_cloned_from_anothers_machine_template",
            ar(
                "controlplane.cluster.x-k8s.io",
                "v1beta2",
                "KubeadmControlPlane",
                "kubeadmcontrolplanes",
            ),
            json!({"metadata": meta("hp-t", "hp-ns"), "spec": {"version": "v1.33.0",
                "machineTemplate": {"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachineTemplate", "name": "hp-v-control-plane-0123abcd"}}}}}),
            "ForeignReference",
        ),
        (
            "reference",
            "worker_machines_given_the_managements_ca_key",
            ar(
                "bootstrap.cluster.x-k8s.io",
                "v1beta2",
                "KubeadmConfigTemplate",
                "kubeadmconfigtemplates",
            ),
            json!({"metadata": meta("hp-t-md-0", "hp-ns"), "spec": {"template": {"spec": {"files": [
                {"path": "/root/ca.key", "contentFrom": {"secret": {"name": "hp-m-ca", "key": "tls.key"}}}]}}}}),
            "ForeignReference",
        ),
        (
            "reference",
            "worker_passwords_from_anothers_secret",
            ar(
                "bootstrap.cluster.x-k8s.io",
                "v1beta2",
                "KubeadmConfigTemplate",
                "kubeadmconfigtemplates",
            ),
            json!({"metadata": meta("hp-t-md-0", "hp-ns"), "spec": {"template": {"spec": {"users": [
                {"name": "root", "passwdFrom": {"secret": {"name": "hp-v-etcd", "key": "tls.key"}}}]}}}}),
            "ForeignReference",
        ),
        (
            "reference",
            "machines_cloned_from_anothers_templates",
            capi("MachineDeployment", "machinedeployments"),
            json!({"metadata": meta("hp-t-md", "hp-ns"), "spec": {"clusterName": "hp-t", "selector": sel("hp-t"),
                "template": {"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": "hp-t"}}, "spec": {"clusterName": "hp-t",
                    "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "hp-v-md-0-0123abcd"}},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachineTemplate", "name": "hp-v-md-0-0123abcd"}}}}}),
            "ForeignReference",
        ),
        (
            "reference",
            "machines_booting_with_anothers_join_credentials",
            capi("MachineDeployment", "machinedeployments"),
            json!({"metadata": meta("hp-t-md", "hp-ns"), "spec": {"clusterName": "hp-t", "selector": sel("hp-t"),
                "template": {"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": "hp-t"}}, "spec": {"clusterName": "hp-t",
                    "bootstrap": {"dataSecretName": "hp-v-md-0-x7k2p"},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachineTemplate", "name": "hp-t-md-0"}}}}}),
            "ForeignReference",
        ),
        (
            "reference",
            "machines_placed_in_anothers_vsphere_zone",
            capi("MachineDeployment", "machinedeployments"),
            json!({"metadata": meta("hp-t-md", "hp-ns"), "spec": {"clusterName": "hp-t", "selector": sel("hp-t"),
                "template": {"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": "hp-t"}}, "spec": {"clusterName": "hp-t",
                    "bootstrap": {"dataSecretName": "hp-t-md-0"}, "failureDomain": "hp-v-dc-zone-a",
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "VSphereMachineTemplate", "name": "hp-t-md-0"}}}}}),
            "ForeignReference",
        ),
        (
            "selector",
            "bare_metal_machines_taking_hardware_kept_for_another_cluster",
            ar(
                "infrastructure.cluster.x-k8s.io",
                "v1beta1",
                "TinkerbellMachineTemplate",
                "tinkerbellmachinetemplates",
            ),
            json!({"metadata": meta("hp-t-md-0", "hp-ns"), "spec": {"template": {"spec": {
                "hardwareAffinity": {"required": [
                    {"labelSelector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": "hp-t", "type": "worker"}}},
                    {"labelSelector": {"matchLabels": {"type": "cp"}}}]},
                "bootOptions": {"bootMode": "netboot"}}}}}),
            "ForeignSelector",
        ),
        (
            "selector",
            "bare_metal_machines_taking_any_free_hardware",
            ar(
                "infrastructure.cluster.x-k8s.io",
                "v1beta1",
                "TinkerbellMachineTemplate",
                "tinkerbellmachinetemplates",
            ),
            json!({"metadata": meta("hp-t-md-0", "hp-ns"), "spec": {"template": {"spec": {
                "bootOptions": {"bootMode": "netboot"}}}}}),
            "ForeignSelector",
        ),
        (
            "reference",
            "a_bare_metal_machine_on_hardware_named_outright",
            ar(
                "infrastructure.cluster.x-k8s.io",
                "v1beta1",
                "TinkerbellMachineTemplate",
                "tinkerbellmachinetemplates",
            ),
            json!({"metadata": meta("hp-t-md-0", "hp-ns"), "spec": {"template": {"spec": {
                "hardwareAffinity": {"required": [
                    {"labelSelector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": "hp-t"}}}]},
                "hardwareName": "hp-m-hw-0"}}}}),
            "ForeignReference",
        ),
        (
            "selector",
            "machines_adopting_anothers_machine_sets",
            capi("MachineDeployment", "machinedeployments"),
            json!({"metadata": meta("hp-t-md", "hp-ns"), "spec": {"clusterName": "hp-t", "selector": {"matchLabels": {"cluster.x-k8s.io/deployment-name": "hp-v-md-0"}},
                "template": {"metadata": {"labels": {"cluster.x-k8s.io/deployment-name": "hp-v-md-0"}}, "spec": {"clusterName": "hp-t",
                    "bootstrap": {"dataSecretName": "hp-t-md-0"},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachineTemplate", "name": "hp-t-md-0"}}}}}),
            "ForeignSelector",
        ),
        (
            "reference",
            "a_vsphere_cluster_logging_in_as_the_management_cluster",
            ar(
                "infrastructure.cluster.x-k8s.io",
                "v1beta1",
                "VSphereCluster",
                "vsphereclusters",
            ),
            json!({"metadata": meta("hp-t", "hp-ns"), "spec": {"server": "vcenter.example.invalid",
                "identityRef": {"kind": "Secret", "name": "hp-m-vsphere-credentials"}}}),
            "ForeignReference",
        ),
        (
            "reference",
            "a_vsphere_cluster_with_a_shared_identity",
            ar(
                "infrastructure.cluster.x-k8s.io",
                "v1beta1",
                "VSphereCluster",
                "vsphereclusters",
            ),
            json!({"metadata": meta("hp-t", "hp-ns"), "spec": {"server": "vcenter.example.invalid",
                "identityRef": {"kind": "VSphereClusterIdentity", "name": "hp-t-identity"}}}),
            "ForeignReference",
        ),
        (
            "reference",
            "a_cluster_built_from_an_admins_cluster_class",
            capi("Cluster", "clusters"),
            json!({"metadata": meta("hp-t", "hp-ns"), "spec": {"topology": {"classRef": {"name": "platform", "namespace": "capstan-system"}, "version": "v1.33.0"}}}),
            "ForeignReference",
        ),
        (
            "reference",
            "etcd_machines_from_another_namespaces_template",
            ar(
                "etcdcluster.cluster.x-k8s.io",
                "v1beta1",
                "EtcdadmCluster",
                "etcdadmclusters",
            ),
            json!({"metadata": meta("hp-t-etcd", "hp-ns"), "spec": {"infrastructureTemplate": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerMachineTemplate", "name": "hp-t-etcd", "namespace": "capstan-system"}}}),
            "ForeignReference",
        ),
        (
            "reference",
            "an_eksa_object_the_eksa_controller_would_act_on",
            ar(
                "anywhere.eks.amazonaws.com",
                "v1alpha1",
                "DockerDatacenterConfig",
                "dockerdatacenterconfigs",
            ),
            json!({"metadata": meta("hp-t", "hp-ns"), "spec": {}}),
            "ForeignReference",
        ),
        (
            "reference",
            "a_blocking_owner_reference_with_anothers_uid_under_an_own_name",
            cm(),
            json!({"metadata": {"name": "hp-t-own-uid", "namespace": "hp-ns", "labels": labels, "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "hp-t", "uid": VICTIM_UID, "blockOwnerDeletion": true}]}}),
            "ForeignReference",
        ),
        (
            "reference",
            "a_controller_owner_reference_with_anothers_uid_under_an_own_name",
            cm(),
            json!({"metadata": {"name": "hp-t-own-ctl", "namespace": "hp-ns", "labels": labels, "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "hp-t", "uid": VICTIM_UID, "controller": true}]}}),
            "ForeignReference",
        ),
        (
            "secret",
            "a_service_account_token_for_a_management_account",
            secret(),
            json!({"metadata": {"name": "hp-t-token", "namespace": "hp-ns", "labels": labels, "annotations": {"kubernetes.io/service-account.name": "hp-m-controller"}}, "type": "kubernetes.io/service-account-token"}),
            "FillableSecret",
        ),
        (
            "secret",
            "a_secret_a_reflector_fills_with_the_managements_kubeconfig",
            secret(),
            json!({"metadata": {"name": "hp-t-copy", "namespace": "hp-ns", "labels": labels, "annotations": {"reflector.v1.k8s.emberstack.com/reflects": "hp-ns/hp-m-kubeconfig"}}}),
            "FillableSecret",
        ),
        (
            "secret",
            "a_secret_of_cluster_apis_own_type",
            secret(),
            json!({"metadata": meta("hp-t-kubeconfig-copy", "hp-ns"), "type": "cluster.x-k8s.io/secret", "stringData": {"value": "apiVersion: v1\nkind: Config\n"}}),
            "FillableSecret",
        ),
        (
            "squat",
            "a_kubeconfig_for_a_cluster_not_yet_joined",
            secret(),
            json!({"metadata": meta("hp-t-prod-kubeconfig", "hp-ns"), "stringData": {"value": "apiVersion: v1\nkind: Config\nclusters: [{name: x, cluster: {server: 'https://attacker.example.invalid'}}]\n"}}),
            "ReservedName",
        ),
        (
            "squat",
            "a_ca_for_a_cluster_not_yet_joined",
            secret(),
            json!({"metadata": meta("hp-t-prod-ca", "hp-ns"), "stringData": {"tls.crt": "attacker's CA", "tls.key": "attacker's key"}}),
            "ReservedName",
        ),
        (
            "squat",
            "an_init_lock_for_a_cluster_not_yet_joined",
            cm(),
            json!({"metadata": meta("hp-t-prod-lock", "hp-ns"), "data": {"lock-information": "{\"machineName\":\"never\"}"}}),
            "ReservedName",
        ),
        (
            "squat",
            "writes_of_a_cluster_named_to_share_anothers_etcd_lock",
            cm(),
            json!({"metadata": {"name": "hp-v-etcd-settings", "namespace": "hp-ns", "labels": {capstan_templates::identity::CLUSTER_LABEL: "hp-v-etcd"}}}),
            "ReservedName",
        ),
        (
            "kind",
            "machines_at_a_version_whose_references_are_elsewhere",
            ar(
                "cluster.x-k8s.io",
                "v1beta1",
                "MachineDeployment",
                "machinedeployments",
            ),
            json!({"metadata": meta("hp-t-md-old", "hp-ns"), "spec": {"clusterName": "hp-t", "selector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": "hp-t"}},
                "template": {"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": "hp-t"}}, "spec": {"clusterName": "hp-t",
                    "bootstrap": {"configRef": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "KubeadmConfigTemplate", "name": "hp-m-md-0", "namespace": "capstan-system"}},
                    "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "DockerMachineTemplate", "name": "hp-t-md-0"}}}}}),
            "UncheckedKind",
        ),
        (
            "kind",
            "cluster_admin_for_the_tenant",
            ar(
                "rbac.authorization.k8s.io",
                "v1",
                "ClusterRoleBinding",
                "clusterrolebindings",
            ),
            json!({"metadata": {"name": "hp-t-admin", "labels": labels}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"}, "subjects": [{"kind": "User", "name": "mallory"}]}),
            "403",
        ),
        (
            "kind",
            "a_helm_release_proxy_for_the_management_cluster",
            ar(
                "addons.cluster.x-k8s.io",
                "v1alpha1",
                "HelmReleaseProxy",
                "helmreleaseproxies",
            ),
            json!({"metadata": meta("hp-t-rel", "hp-ns"), "spec": {"clusterRef": {"name": "hp-m"}, "chartName": "x", "repoURL": "https://example.invalid"}}),
            "403",
        ),
    ]
}

/// Each write of [`past_validation`], as the tenant's identity, is refused; the audit log
/// holds no successful write of it; the admin's object it aims at is unchanged.
#[tokio::test]
async fn writes_past_validation_are_refused_by_the_api_server() {
    let cp = capstan_harness::shared().await;
    let (kubeconfig, credential) =
        capstan::install::testing::agent_credential(cp, "hostile-past").await;
    let agent = capstan::k8s::connect(Some(&kubeconfig), None)
        .await
        .unwrap()
        .client;
    let admin = cp.client();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
    namespaces
        .patch(
            "hp-ns",
            &PatchParams::apply("admin"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "hp-ns"}}),
            ),
        )
        .await
        .unwrap();
    let admins: Api<DynamicObject> = Api::namespaced_with(admin.clone(), "hp-ns", &cm());
    let planted = admins
        .patch(
            "hp-t-admin",
            &PatchParams::apply("admin"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hp-t-admin"}, "data": {"owner": "admin"}})),
        )
        .await
        .unwrap();
    let victim_uid = planted.metadata.uid.clone().unwrap();
    let writer = impersonating(&agent, Tenant::Workload, "hp-t");
    let mark = cp.audit().mark();
    let mut refusals = BTreeMap::new();
    let mut wrong = Vec::new();
    for (_, name, ar, mut obj, want) in past_validation() {
        obj["apiVersion"] = json!(ar.api_version);
        obj["kind"] = json!(ar.kind);
        if let Some(refs) = obj
            .pointer_mut("/metadata/ownerReferences")
            .and_then(Value::as_array_mut)
        {
            for r in refs.iter_mut().filter(|r| r["uid"] == VICTIM_UID) {
                r["uid"] = json!(victim_uid);
            }
        }
        // Written as the identity of the cluster it is labelled for (the tenant's, but for a
        // case about a cluster's name).
        let writer =
            match obj["metadata"]["labels"][capstan_templates::identity::CLUSTER_LABEL].as_str() {
                Some(c) if c.starts_with("hp-v-") => impersonating(&agent, Tenant::Workload, c),
                _ => writer.clone(),
            };
        let ns = obj["metadata"]["namespace"].as_str().map(str::to_string);
        let oname = obj["metadata"]["name"].as_str().unwrap().to_string();
        let api: Api<DynamicObject> = match &ns {
            Some(ns) => Api::namespaced_with(writer.clone(), ns, &ar),
            None => Api::all_with(writer.clone(), &ar),
        };
        let got = api
            .patch(
                &oname,
                &PatchParams::apply("capstan").force(),
                &Patch::Apply(&obj),
            )
            .await;
        let status = match got {
            Ok(_) => {
                wrong.push(format!("{name}: admitted"));
                continue;
            }
            Err(kube::Error::Api(s)) => s,
            Err(e) => panic!("{name}: {e}"),
        };
        let reason = capstan::install::tenancy::denial(&status.message)
            .map(|(r, _)| r.to_string())
            .unwrap_or_else(|| status.code.to_string());
        if reason != want {
            wrong.push(format!(
                "{name}: refused with {reason}, not {want}: {}",
                status.message
            ));
        }
        refusals.insert(name, reason);
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // The other side of the failure-domain row: a Nutanix worker group's failure domain is an
    // entry of the cluster's own NutanixCluster (EKS Anywhere names it as written), admitted.
    let mds: Api<DynamicObject> = Api::namespaced_with(
        writer.clone(),
        "hp-ns",
        &capstan_e2e::resource(
            "cluster.x-k8s.io",
            "v1beta2",
            "MachineDeployment",
            "machinedeployments",
        ),
    );
    let nutanix_md = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
        "metadata": {"name": "hp-t-md-0-pe-1", "namespace": "hp-ns", "labels": {capstan_templates::identity::MANAGED_BY_LABEL: "capstan", capstan_templates::identity::CLUSTER_LABEL: "hp-t"}},
        "spec": {"clusterName": "hp-t", "selector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": "hp-t"}},
            "template": {"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": "hp-t"}}, "spec": {"clusterName": "hp-t",
                "bootstrap": {"dataSecretName": "hp-t-md-0"}, "failureDomain": "pe-1",
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "NutanixMachineTemplate", "name": "hp-t-md-0-pe-1"}}}}});
    mds.patch(
        "hp-t-md-0-pe-1",
        &PatchParams::apply("capstan").force().dry_run(),
        &Patch::Apply(&nutanix_md),
    )
    .await
    .expect("a Nutanix worker group in its own failure domain is admitted");
    // Bare metal: machines that take only the Hardware the admin labelled for the cluster (and
    // narrow it by type) are admitted.
    let tmts: Api<DynamicObject> = Api::namespaced_with(
        writer.clone(),
        "hp-ns",
        &capstan_e2e::resource(
            "infrastructure.cluster.x-k8s.io",
            "v1beta1",
            "TinkerbellMachineTemplate",
            "tinkerbellmachinetemplates",
        ),
    );
    let own_hardware = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TinkerbellMachineTemplate",
        "metadata": {"name": "hp-t-md-0", "namespace": "hp-ns", "labels": {capstan_templates::identity::MANAGED_BY_LABEL: "capstan", capstan_templates::identity::CLUSTER_LABEL: "hp-t"}},
        "spec": {"template": {"spec": {
            "hardwareAffinity": {"required": [{"labelSelector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": "hp-t", "type": "worker"}}}],
                "preferred": [{"weight": 50, "hardwareAffinityTerm": {"labelSelector": {"matchExpressions": [{"key": "ssd", "operator": "Exists"}]}}}]},
            "bootOptions": {"bootMode": "netboot"},
            "templateOverride": "version: \"0.1\"\nname: hp-t\nglobal_timeout: 6000\ntasks: []\n"}}}});
    tmts.patch(
        "hp-t-md-0",
        &PatchParams::apply("capstan").force().dry_run(),
        &Patch::Apply(&own_hardware),
    )
    .await
    .expect("bare-metal machines on the cluster's own Hardware are admitted");
    // And the deletion of another's object.
    let victims: Api<DynamicObject> = Api::namespaced_with(writer.clone(), "hp-ns", &cm());
    let Err(kube::Error::Api(s)) = victims.delete("hp-t-admin", &Default::default()).await else {
        panic!("the admin's object was deleted");
    };
    assert_eq!(
        capstan::install::tenancy::denial(&s.message).map(|(r, _)| r),
        Some(Reason::AlreadyExists.as_str()),
        "{}",
        s.message
    );
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    let admitted: Vec<String> = cp
        .audit()
        .events_since(mark)
        .unwrap()
        .iter()
        .filter(|e| e.credential_id() == Some(credential.as_str()))
        .filter(|e| e.user.username == AGENT && e.is_write() && succeeded(e))
        .map(describe)
        .collect();
    assert!(admitted.is_empty(), "{admitted:#?}");
    let now = admins.get("hp-t-admin").await.unwrap();
    assert_eq!(
        now.metadata.resource_version,
        planted.metadata.resource_version
    );
    println!("{refusals:#?}");
}

#[test]
fn corpus_size_by_class() {
    let mut by_class: BTreeMap<&str, (usize, usize, usize)> = BTreeMap::new();
    for (class, _) in refused_by_validation() {
        by_class.entry(class).or_default().0 += 1;
    }
    for (class, _) in APPLIED {
        by_class.entry(class).or_default().1 += 1;
    }
    for (class, ..) in past_validation() {
        by_class.entry(class).or_default().2 += 1;
    }
    let total: usize = by_class.values().map(|(a, b, c)| a + b + c).sum();
    println!(
        "{:<12} {:>10} {:>8} {:>16}",
        "class", "validation", "applied", "past validation"
    );
    for (class, (v, a, p)) in &by_class {
        println!("{class:<12} {v:>10} {a:>8} {p:>16}");
    }
    println!("hostile-tenant corpus: {total} attacks");
    assert!(total >= 40, "only {total} attacks");
}

/// The other side of the policy: every write the quick start's fleet (`examples/quickstart`:
/// the management cluster, `dev` with its add-ons and chart, `legacy` on a release of its own)
/// makes, as `capstan install` sets the agent up, is admitted. On a control plane of its own
/// (the quick start's names are plain), the agent's pass twice (creates, then nothing to do);
/// from the audit log: no write of its credential refused, and writes made as both fleet
/// identities (so the policy was asked).
#[tokio::test]
async fn every_write_of_the_quick_start_is_admitted_by_the_policy() {
    let cp = ControlPlane::start().await.unwrap();
    let (kubeconfig, credential) =
        capstan::install::testing::agent_credential(&cp, "quickstart").await;
    let client = capstan::k8s::connect(Some(&kubeconfig), None)
        .await
        .unwrap()
        .client;
    let tree =
        capstan_layout::Tree::from_dir(&capstan_e2e::repo_root().join("examples/quickstart"))
            .unwrap();
    let fleet = capstan_layout::load(&tree);
    assert!(
        fleet.clusters.len() >= 3 && fleet.clusters.iter().all(|c| c.is_valid()),
        "{:#?}",
        fleet
            .clusters
            .iter()
            .map(|c| (&c.name, &c.diagnostics))
            .collect::<Vec<_>>()
    );
    let mark = cp.audit().mark();
    for rev in ["qs-1", "qs-1"] {
        let opts = Options {
            revision: rev.into(),
            management: Some("mgmt".into()),
            ..Default::default()
        };
        let out = reconcile(&client, &fleet, &opts).await.unwrap();
        for c in &out.clusters {
            assert_ne!(c.phase, Phase::Failed, "{}: {}", c.name, c.message);
            let skipped: Vec<String> = c
                .plan
                .entries
                .iter()
                .filter(|e| e.action == Action::Skip)
                .map(|e| format!("{}: {:?}", e.object.subject(), e.reason))
                .collect();
            assert!(skipped.is_empty(), "{}: {skipped:#?}", c.name);
        }
    }
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    let events = cp.audit().events_since(mark).unwrap();
    let writes: Vec<&AuditEvent> = events
        .iter()
        .filter(|e| e.credential_id() == Some(credential.as_str()) && e.is_write())
        .collect();
    let refused: Vec<String> = writes
        .iter()
        .filter(|e| e.response_status.code.is_some_and(|c| c == 403 || c == 422))
        .map(|e| describe(e))
        .collect();
    assert!(refused.is_empty(), "{refused:#?}");
    let as_identity = |user: &str| {
        writes
            .iter()
            .filter(|e| succeeded(e))
            .filter(|e| {
                e.impersonated_user
                    .as_ref()
                    .is_some_and(|u| u.username == user)
            })
            .count()
    };
    let (workload, management) = (
        as_identity(capstan::k8s::identity::WORKLOAD_USER),
        as_identity(capstan::k8s::identity::MANAGEMENT_USER),
    );
    assert!(workload > 0 && management > 0, "{workload} {management}");
    println!(
        "quick start: {} writes of the agent's credential, none refused; admitted as the workload identity {workload}, as the management identity {management}",
        writes.len()
    );
}
