//! The bad-input corpus: one small broken fleet per case, each checked for the exact diagnostic
//! (code, severity, file, line, column), for who owns it, for the broken cluster not being
//! rendered, and for every other cluster of the fleet still validating and rendering as before
//! ("one broken cluster never hides the results of the others").
//!
//! Every case starts from the base fleet of `bad_input/support.rs` (a docker management cluster
//! `mgmt`, a healthy docker workload `ok`, and the workload under test `w`, or `mgmt` itself under
//! test) and states only what it changes: lines of a base file set, inserted or deleted at a
//! marker (`.set`, `.after`, `.before`, `.delete`, `.delete_block`), files merged, removed, or
//! added when the base has no such document (an extra manifest, a fleet config, a second cluster,
//! bytes that are not YAML). Each expected diagnostic's position is computed from the case's text,
//! never written as numbers: `.err(code, file, "needle")` is where the needle starts,
//! `.err_col`/`.err_line` the line a marker picks (see `support.rs` for the marker syntax).
//!
//! Each case is its own `#[test]` (so one failure names its case); `corpus_*` tests check the
//! corpus as a whole (size, coverage of every diagnostic code).

#[path = "../bad_input/support.rs"]
mod support;

use std::collections::BTreeSet;
use std::process::Command;

use capstan_templates::diag::Code::{self, *};
use support::*;

const W2_DIR: &str = "clusters/mgmt/workload-clusters/w2";
const W2: &str = "clusters/mgmt/workload-clusters/w2/cluster.yaml";
const W_EXTRA: &str = "clusters/mgmt/workload-clusters/w/extra.yaml";
const MGMT2: &str = "clusters/mgmt2/cluster.yaml";
const FLEET: &str = "clusters/mgmt/fleet.yaml";
const W_ADDON: &str = "clusters/mgmt/workload-clusters/w/addons/team.yaml";
const W_IAM: &str = "clusters/mgmt/workload-clusters/w/iam.yaml";
/// A valid AWSIamConfig for `w` (cases break it).
const AWS_IAM_CONFIG: &str = "apiVersion: anywhere.eks.amazonaws.com/v1alpha1
kind: AWSIamConfig
metadata:
  name: w-iam
spec:
  awsRegion: us-west-2
  backendMode: [EKSConfigMap]
  mapRoles:
    - roleARN: arn:aws:iam::123456789012:role/admin
      username: admin
      groups: [system:masters]
";

/// A second management cluster (eksaVersion v0.25.2) for cases that need two.
const MGMT2_CLUSTER: &str = r#"
    apiVersion: anywhere.eks.amazonaws.com/v1alpha1
    kind: Cluster
    metadata: {name: mgmt2}
    spec:
      kubernetesVersion: "1.33"
      eksaVersion: v0.25.2
      managementCluster: {name: mgmt2}
      datacenterRef: {kind: DockerDatacenterConfig, name: mgmt2}
      controlPlaneConfiguration: {count: 1}
      workerNodeGroupConfigurations: [{name: md-0, count: 1}]
      clusterNetwork:
        pods: {cidrBlocks: [192.168.0.0/16]}
        services: {cidrBlocks: [10.96.0.0/12]}
    ---
    apiVersion: anywhere.eks.amazonaws.com/v1alpha1
    kind: DockerDatacenterConfig
    metadata: {name: mgmt2}
"#;

/// A ConfigMap whose `data:` line nests `depth` flow sequences.
fn deeply_nested(depth: usize) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: w-deep}}\ndata: {{x: {}{}}}\n",
        "[".repeat(depth),
        "]".repeat(depth)
    )
}

/// A ConfigMap with an anchor `a:` of `width` scalars and a sequence `b:` of `copies` aliases to
/// it: `width * copies` nodes once expanded.
fn alias_bomb(width: usize, copies: usize) -> String {
    let mut s =
        String::from("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w-bomb}\ndata:\n  a: &a [");
    s.push_str(&vec!["x"; width].join(", "));
    s.push_str("]\n  b: [");
    s.push_str(&vec!["*a"; copies].join(", "));
    s.push_str("]\n");
    s
}

/// A HelmChartProxy of `w` whose values template is a literal block, `name: w` on its first
/// line and `line` on its second.
fn values_chart(line: &str) -> String {
    format!(
        "apiVersion: addons.cluster.x-k8s.io/v1alpha1\nkind: HelmChartProxy\nmetadata: {{name: w-x}}\nspec:\n  chartName: x\n  repoURL: oci://registry.example.invalid/x\n  clusterSelector: {{matchLabels: {{cluster.x-k8s.io/cluster-name: w}}}}\n  valuesTemplate: |\n    cluster: {{{{ .Cluster.metadata.name }}}}\n    {line}\n"
    )
}

/// A file as `sops` writes one with `--encrypted-regex '^(data|stringData)$'` (for checks that
/// need no key): each `ENC` of `doc` becomes a well-formed encrypted value, and the metadata
/// names version `version`.
fn sops_file(doc: &str, version: &str) -> String {
    let enc = "ENC[AES256_GCM,data:AA==,iv:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=,tag:AAAAAAAAAAAAAAAAAAAAAA==,type:str]";
    format!(
        "{}sops:\n  age:\n    - recipient: age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p\n      enc: x\n  lastmodified: \"2026-12-03T07:44:00Z\"\n  mac: {enc}\n  encrypted_regex: ^(data|stringData)$\n  version: {version}\n",
        doc.replace("ENC\n", &format!("{enc}\n"))
    )
}

/// A fleet config (`clusters/mgmt/fleet.yaml`, which the base fleet does not have) with a problem
/// of the management cluster's: every cluster of the fleet is held with it, and `ok` and `w`,
/// whose release comes from it, cannot resolve one. The case adds the management cluster's error.
fn held_by_fleet_config(fleet_config: &str) -> Case {
    Case::workload()
        .file(FLEET, fleet_config)
        .broken(&[MGMT_DIR, OK_DIR, W_DIR])
        .in_cluster(OK_DIR)
        .err(ReleaseUnavailable, OK, "spec:")
        .in_cluster(W_DIR)
        .err(ReleaseUnavailable, W, "spec:")
        .in_cluster(MGMT_DIR)
}

/// Declares each case as a `#[test]` and collects them all for the corpus-wide tests.
macro_rules! corpus {
    ($($name:ident: $case:expr;)*) => {
        $(
            #[test]
            fn $name() {
                run(stringify!($name), &$case);
            }
        )*
        fn corpus() -> Vec<(&'static str, Case)> {
            vec![$((stringify!($name), $case)),*]
        }
    };
}

corpus! {
    // ───────────────────────────── yaml-syntax ─────────────────────────────
    yaml_duplicate_key:
        Case::workload()
            .merge(W, W_DC)
            .after(W, "workerNodeGroupConfigurations:", r#"kubernetesVersion: "1.32""#)
            .err(YamlSyntax, W, r#"kubernetesVersion: "1.32"#);

    yaml_duplicate_key_in_flow_mapping:
        Case::workload()
            .merge(W, W_DC)
            .set(W, "workerNodeGroupConfigurations:", "workerNodeGroupConfigurations: [{name: md-0, count: 1, name: md-1}]")
            .err(YamlSyntax, W, "name: md-1");

    yaml_mapping_value_in_plain_scalar:
        Case::workload()
            .remove(W_DC)
            .set(W, "managementCluster:", "managementCluster: name: mgmt")
            .err(YamlSyntax, W, ": mgmt");

    yaml_bad_indentation:
        Case::workload()
            .remove(W_DC)
            .set(W, "services:", "|   services: {cidrBlocks: [10.113.0.0/16]}")
            .err(YamlSyntax, W, "services");

    yaml_tab_indentation:
        Case::workload()
            .remove(W_DC)
            .set(W, "controlPlaneConfiguration:", "controlPlaneConfiguration:\n|\tcount: 1")
            .err_line(YamlSyntax, W, "count: 1");

    yaml_unterminated_quote:
        Case::workload()
            .remove(W_DC)
            .set(W, "kubernetesVersion:", r#"kubernetesVersion: "1.33"#)
            .err_line(YamlSyntax, W, "kubernetesVersion:");

    yaml_unknown_anchor:
        Case::workload()
            .remove(W_DC)
            .delete(W, "services:")
            .delete(W, "pods:")
            .delete(W, "clusterNetwork:")
            .delete(W, "workerNodeGroupConfigurations:")
            .delete(W, "controlPlaneConfiguration:")
            .set(W, "managementCluster:", "managementCluster: {name: *mgmt}")
            .err(YamlSyntax, W, "*");

    yaml_invalid_core_tag:
        Case::workload()
            .remove(W_DC)
            .delete(W, "services:")
            .delete(W, "pods:")
            .delete(W, "clusterNetwork:")
            .delete(W, "workerNodeGroupConfigurations:")
            .set(W, "controlPlaneConfiguration:", r#"
                controlPlaneConfiguration:
                  count: !!int three
            "#)
            .err_line(YamlSyntax, W, "count:");

    yaml_error_in_second_document:
        Case::workload()
            .merge(W, W_DC)
            .after(W, "metadata: {name: w}", "metadata: {name: w2}")
            .err(YamlSyntax, W, "metadata: {name: w2");

    // A YAML error in the Cluster's file must not also claim the directory has no Cluster: the
    // Cluster is there, it just does not parse (the DockerDatacenterConfig is in another file).
    yaml_error_in_cluster_file_does_not_cascade:
        Case::workload()
            .after(W, "name:", "name: w")
            .delete_block(W, "spec:")
            .err_col(YamlSyntax, W, "metadata: >> name: >> name:", 3);

    // Nesting deeper than the parser allows is a syntax error, not a stack overflow.
    yaml_nesting_too_deep:
        Case::workload()
            .file(W_EXTRA, &deeply_nested(400))
            .err_line(YamlSyntax, W_EXTRA, "data:");

    // "Billion laughs": 300 KB of YAML whose aliases expand to a billion nodes. A workload
    // directory comes from a developer's pull request, so this must be a located error, not an
    // agent that runs out of memory (the case runs in a child process under a memory limit).
    yaml_alias_expansion_bomb:
        Case::workload()
            .file(W_EXTRA, &alias_bomb(20_000, 50_000))
            .isolated()
            .err_line(YamlSyntax, W_EXTRA, "b: [");

    // Windows line endings do not shift positions.
    yaml_crlf_line_endings:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", "workerNodeGroupConfigurations: [{name: md-0, count: 1, replicas: 1}]")
            .crlf(W)
            .err(UnknownField, W, "replicas");

    // ─────────────────────────── unexpected-entry ──────────────────────────
    unexpected_file_directly_under_clusters:
        Case::workload()
            .file("clusters/stray.yaml", "a: 1\n")
            .renders()
            .in_fleet()
            .err_file(UnexpectedEntry, "clusters/stray.yaml");

    unexpected_file_directly_under_workload_clusters:
        Case::workload()
            .file("clusters/mgmt/workload-clusters/w3.yaml", "a: 1\n")
            .renders()
            .in_fleet()
            .err_file(UnexpectedEntry, "clusters/mgmt/workload-clusters/w3.yaml");

    // An entry inside a cluster's directory is that cluster's problem: the file may hold part of
    // its configuration, so the cluster must not be rendered without it.
    unexpected_non_yaml_file_in_workload_dir:
        Case::workload()
            .file("clusters/mgmt/workload-clusters/w/values.json", "{}\n")
            .err_file(UnexpectedEntry, "clusters/mgmt/workload-clusters/w/values.json");

    unexpected_subdirectory_in_workload_dir:
        Case::workload()
            .file("clusters/mgmt/workload-clusters/w/patches/cp.yaml", "a: 1\n")
            .err_file(UnexpectedEntry, "clusters/mgmt/workload-clusters/w/patches/cp.yaml");

    unexpected_subdirectory_in_management_dir:
        Case::management()
            .file("clusters/mgmt/addons/cm.yaml", "a: 1\n")
            .err_file(UnexpectedEntry, "clusters/mgmt/addons/cm.yaml");

    // A workload directory under a management directory that has no spec: the workload cannot be
    // managed by anything, so it is not rendered.
    unexpected_workload_of_missing_management_cluster:
        Case::workload()
            .file("clusters/ghost/README.md", "# nothing yet\n")
            .file("clusters/ghost/workload-clusters/w3/cluster.yaml", r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w3}
            spec:
              kubernetesVersion: "1.33"
              eksaVersion: v0.26.1
              managementCluster: {name: ghost}
              datacenterRef: {kind: DockerDatacenterConfig, name: w3}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.30.0.0/16]}
                services: {cidrBlocks: [10.130.0.0/16]}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: DockerDatacenterConfig
            metadata: {name: w3}
        "#)
            .broken(&["clusters/ghost/workload-clusters/w3"])
            .in_cluster("clusters/ghost/workload-clusters/w3")
            .err_file(UnexpectedEntry, "clusters/ghost/workload-clusters/w3/cluster.yaml");

    // ─────────────────────────── missing-cluster ───────────────────────────
    missing_cluster_only_other_objects:
        Case::workload()
            .file(W, r#"
            apiVersion: v1
            kind: ConfigMap
            metadata: {name: w-notes}
            data: {owner: team-w}
        "#)
            .err_file(MissingCluster, W);

    missing_cluster_comment_only_file:
        Case::workload()
            .remove(W_DC)
            .file(W, r#"
            # TODO: describe cluster w
        "#)
            .err_file(MissingCluster, W);

    // A Cluster API Cluster is not an EKS Anywhere Cluster: the directory has no spec, and that
    // must be reported (otherwise the cluster silently disappears and validation passes).
    missing_cluster_capi_cluster_instead_of_eksa:
        Case::workload()
            .set(W, "apiVersion:", "apiVersion: cluster.x-k8s.io/v1beta1")
            .delete_block(W, "spec:")
            .after(W, "name:", "|spec: {}")
            .err_file(MissingCluster, W);

    // ────────────────────────── multiple-clusters ──────────────────────────
    multiple_clusters_in_one_file:
        Case::workload()
            .after(W, "services:", r#"
                |---
                |apiVersion: anywhere.eks.amazonaws.com/v1alpha1
                |kind: Cluster
                |metadata:
                |  name: w-second
                |spec:
                |  kubernetesVersion: "1.33"
                |  managementCluster: {name: mgmt}
                |  datacenterRef: {kind: DockerDatacenterConfig, name: w}
                |  controlPlaneConfiguration: {count: 1}
                |  workerNodeGroupConfigurations: [{name: md-0, count: 1}]
                |  clusterNetwork:
                pods: {cidrBlocks: [172.18.0.0/16]}
                services: {cidrBlocks: [10.114.0.0/16]}
            "#)
            .err(MultipleClusters, W, "name: w-");

    multiple_clusters_across_files:
        Case::workload()
            .file("clusters/mgmt/workload-clusters/w/second.yaml", r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.32"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
            .err_col(MultipleClusters, "clusters/mgmt/workload-clusters/w/second.yaml", "name:", 3);

    // ────────────────────────── dir-name-mismatch ──────────────────────────
    dir_name_mismatch_workload:
        Case::workload()
            .set(W, "name:", "name: w-renamed")
            .err(DirNameMismatch, W, "name: w-");

    dir_name_mismatch_management:
        Case::management()
            .set(M, "metadata: >> name:", "name: management")
            .set(M, "managementCluster: >> name:", "name: management")
            .err_col(DirNameMismatch, M, "metadata: >> name:", 3);

    // ───────────────────────── management-mismatch ─────────────────────────
    management_mismatch_other_management_cluster:
        Case::workload()
            .set(W, "managementCluster:", "managementCluster: {name: mgmt2}")
            .err(ManagementMismatch, W, "managementCluster");

    management_mismatch_workload_without_management_cluster:
        Case::workload()
            .set(W, "managementCluster:", "eksaVersion: v0.26.1")
            .err(ManagementMismatch, W, "spec");

    // ─────────────────────────── not-self-managed ──────────────────────────
    not_self_managed_management_cluster:
        Case::management()
            .set(M, "managementCluster: >> name:", "name: other")
            .err(NotSelfManaged, M, "name: other");

    // ───────────────────────────── invalid-name ────────────────────────────
    invalid_name_uppercase_cluster:
        Case::workload()
            .file("clusters/mgmt/workload-clusters/Dev/cluster.yaml", r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: Dev
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: dev}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.30.0.0/16]}
                services: {cidrBlocks: [10.130.0.0/16]}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: DockerDatacenterConfig
            metadata: {name: dev}
        "#)
            .broken(&["clusters/mgmt/workload-clusters/Dev"])
            .in_cluster("clusters/mgmt/workload-clusters/Dev")
            .err(InvalidName, "clusters/mgmt/workload-clusters/Dev/cluster.yaml", "name: Dev");

    invalid_name_longer_than_35_characters:
        Case::workload()
            .file("clusters/mgmt/workload-clusters/this-cluster-name-is-much-too-long-x/cluster.yaml", r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: this-cluster-name-is-much-too-long-x
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: long}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.30.0.0/16]}
                services: {cidrBlocks: [10.130.0.0/16]}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: DockerDatacenterConfig
            metadata: {name: long}
        "#)
            .broken(&["clusters/mgmt/workload-clusters/this-cluster-name-is-much-too-long-x"])
            .in_cluster("clusters/mgmt/workload-clusters/this-cluster-name-is-much-too-long-x")
            .err(InvalidName, "clusters/mgmt/workload-clusters/this-cluster-name-is-much-too-long-x/cluster.yaml", "name: this");

    invalid_name_worker_group:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", r#"
                workerNodeGroupConfigurations:
                  - name: MD_0
                    count: 1
            "#)
            .err(InvalidName, W, "name: MD");

    invalid_name_worker_group_machine_deployment_too_long:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", r#"
                workerNodeGroupConfigurations:
                  - name: md-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx
                    count: 1
            "#)
            .err(InvalidName, W, "name: md");

    invalid_name_namespace:
        Case::workload()
            .after(W, "name:", "namespace: Team_W")
            .err(InvalidName, W, "namespace");

    invalid_name_datacenter_config:
        Case::workload()
            .set(W, "datacenterRef:", "datacenterRef: {kind: DockerDatacenterConfig, name: W_dc}")
            .set(W_DC, "metadata:", r#"
                metadata:
                  name: W_dc
            "#)
            .err(InvalidName, W_DC, "name");

    // ───────────────────────────── duplicate-name ──────────────────────────
    duplicate_cluster_name_under_two_management_clusters:
        Case::workload()
            .file(MGMT2, MGMT2_CLUSTER)
            .file("clusters/mgmt2/workload-clusters/w/cluster.yaml", r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt2}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: DockerDatacenterConfig
            metadata: {name: w}
        "#)
            .broken(&["clusters/mgmt2/workload-clusters/w"])
            .in_cluster("clusters/mgmt2/workload-clusters/w")
            .err_col(DuplicateName, "clusters/mgmt2/workload-clusters/w/cluster.yaml", "name:", 3);

    duplicate_worker_group_name:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", r#"
                workerNodeGroupConfigurations:
                  - name: md-0
                    count: 1
                  - name: md-0
                    count: 2
            "#)
            .err_col(DuplicateName, W, "count: 1 >> - name:", 7);

    duplicate_machine_config_name:
        Case::vsphere()
            .after(W_VS, "metadata: {name: w-workers} >> osFamily:", r#"
                |---
                |apiVersion: anywhere.eks.amazonaws.com/v1alpha1
                |kind: VSphereMachineConfig
                |metadata:
                |  name: w-workers
                |spec: {datastore: ds2, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: redhat}
            "#)
            .err_col(DuplicateName, W_VS, "name:", 3);

    // Two clusters of one management cluster rendering the same object: one would overwrite the
    // other's. Workload directories name their objects for their clusters, so only an admin's
    // management directory can write a workload's name: the name is the workload's, and the
    // management cluster is reported, at the object's name.
    duplicate_rendered_object_across_clusters:
        Case::workload()
            .file("clusters/mgmt/extra.yaml", r#"
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: w-settings
            data: {owner: mgmt}
        "#)
            .file(W_EXTRA, r#"
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: w-settings
            data: {owner: w}
        "#)
            .broken(&[MGMT_DIR])
            .in_cluster(MGMT_DIR)
            .err(DuplicateName, "clusters/mgmt/extra.yaml", "name");

    duplicate_rendered_datacenter_across_clusters:
        Case::workload()
            .file(W2, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w2}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.18.0.0/16]}
                services: {cidrBlocks: [10.114.0.0/16]}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: DockerDatacenterConfig
            metadata:
              name: w
        "#)
            .broken(&[W2_DIR])
            .in_cluster(W2_DIR)
            .err_col(NameOutsideCluster, W2, "name:", 3);

    // ─────────────────────────── missing-type-info ─────────────────────────
    missing_type_info_no_kind:
        Case::workload()
            .file(W_EXTRA, r#"
            apiVersion: v1
            metadata: {name: w-notes}
            data: {owner: team-w}
        "#)
            .err(MissingTypeInfo, W_EXTRA, "apiVersion");

    missing_type_info_no_metadata_name:
        Case::workload()
            .file(W_EXTRA, r#"
            apiVersion: v1
            kind: ConfigMap
            metadata:
              labels: {team: w}
            data: {owner: team-w}
        "#)
            .err(MissingTypeInfo, W_EXTRA, "metadata");

    missing_type_info_document_is_a_list:
        Case::workload()
            .file(W_EXTRA, r#"
            - apiVersion: v1
              kind: ConfigMap
              metadata: {name: w-notes}
        "#)
            .err(MissingTypeInfo, W_EXTRA, "- apiVersion");

    missing_type_info_in_second_document:
        Case::workload()
            .after(W, "services:", r#"
                |---
                |kind: ConfigMap
                |metadata: {name: w-notes}
            "#)
            .err(MissingTypeInfo, W, "kind: ConfigMap");

    // ─────────────────────────── unsupported-kind ──────────────────────────
    unsupported_kind_snow_datacenter:
        Case::workload()
            .file(W_EXTRA, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: SnowDatacenterConfig
            metadata: {name: w}
            spec: {}
        "#)
            .err(UnsupportedKind, W_EXTRA, "kind");

    unsupported_kind_flux_config:
        Case::workload()
            .file(W_EXTRA, r#"
            apiVersion: v1
            kind: ConfigMap
            metadata: {name: w-flux-settings}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: FluxConfig
            metadata: {name: w-flux}
            spec: {branch: main}
        "#)
            .err(UnsupportedKind, W_EXTRA, "kind: FluxConfig");

    unsupported_kind_unknown_eksa_kind:
        Case::workload()
            .file(W_EXTRA, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: DockerMachineConfig
            metadata: {name: w-machines}
            spec: {}
        "#)
            .err(UnsupportedKind, W_EXTRA, "kind");

    // ───────────────────────────── unknown-field ───────────────────────────
    unknown_field_top_level:
        Case::workload()
            .after(W, "name:", "|labels: {team: w}")
            .err(UnknownField, W, "labels");

    unknown_field_in_spec:
        Case::workload()
            .after(W, "kubernetesVersion:", "eksaVerison: v0.26.1")
            .err(UnknownField, W, "eksaVerison");

    unknown_field_in_worker_group:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", r#"
                workerNodeGroupConfigurations:
                  - name: md-0
                    count: 1
                    autoscaling: {minCount: 1, maxCount: 3}
            "#)
            .err(UnknownField, W, "autoscaling");

    unknown_field_in_metadata:
        Case::workload()
            .after(W, "name:", "lables: {team: w}")
            .err(UnknownField, W, "lables");

    unknown_field_in_machine_config:
        Case::vsphere()
            .after(W_VS, "metadata: {name: w-workers} >> osFamily:", "numCPU: 8")
            .delete(W_VS, "metadata: {name: w-cp} >> osFamily:")
            .delete(W_VS, "metadata: {name: w-cp} >> template:")
            .delete(W_VS, "metadata: {name: w-cp} >> resourcePool:")
            .delete(W_VS, "metadata: {name: w-cp} >> datastore:")
            .set(W_VS, "metadata: {name: w-cp} >> spec:", "spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}")
            .err(UnknownField, W_VS, "numCPU");

    // The DockerDatacenterConfig is in the directory, it just has a typo: only the typo is
    // reported, not also a dangling datacenterRef.
    unknown_field_in_datacenter_config_does_not_cascade:
        Case::workload()
            .after(W_DC, "metadata:", r#"
                spec:
                  network: kind
            "#)
            .err(UnknownField, W_DC, "network");

    unknown_fields_at_three_levels_reported_together:
        Case::workload()
            .after(W, "services:", r#"
                |  machineHealthCheck: {nodeStartupTimeout: 10m, timeout: 5m}
                |status: {phase: Ready}
                |annotations: {note: x}
            "#)
            .after(W, "name:", "lables: {team: w}")
            .err(UnknownField, W, "lables")
            .err(UnknownField, W, "timeout")
            .err(UnknownField, W, "annotations");

    // Two typos in different parts of one spec: both are reported in one run, so the user does
    // not fix one, re-run and only then learn about the other.
    unknown_fields_two_in_one_spec_reported_together:
        Case::workload()
            .after(W, "services:", r#"
                cniConfig:
                  calico: {}
            "#)
            .set(W, "controlPlaneConfiguration:", r#"
                controlPlaneConfiguration:
                  count: 1
                  replicas: 1
            "#)
            .err(UnknownField, W, "replicas")
            .err(UnknownField, W, "calico");

    // A warning, not an error: EKS-A's defaulter raises etcd machines to 8192 MiB, and so does capstan.
    invalid_value_warning_small_etcd_machine:
        Case::vsphere()
            .set(W, "machineGroupRef: {kind: VSphereMachineConfig, name: w-workers}", "machineGroupRef: {kind: VSphereMachineConfig, name: w-cp}")
            .before(W, "workerNodeGroupConfigurations:", r#"
                externalEtcdConfiguration:
                  count: 3
                  machineGroupRef: {kind: VSphereMachineConfig, name: w-workers}
            "#)
            .after(W_VS, "metadata: {name: w-workers} >> osFamily:", "memoryMiB: 4096")
            .renders()
            .warn(InvalidValue, W_VS, "memoryMiB");

    // ───────────────────────────── fleet config ────────────────────────────
    // clusters/<mgmt>/fleet.yaml: its problems are the management cluster's, and every cluster of
    // the fleet is held with it (their release data comes from it).
    unknown_field_fleet_config:
        held_by_fleet_config(r#"
            apiVersion: capstan.dev/v1alpha1
            kind: FleetConfig
            spec:
              release:
                manifest: release/manifest.yaml
                sha: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
        "#)
            .err(UnknownField, FLEET, "sha:");

    invalid_value_fleet_config_kind:
        held_by_fleet_config(r#"
            apiVersion: capstan.dev/v1alpha1
            kind: Fleet
            spec: {}
        "#)
            .err(InvalidValue, FLEET, "kind");

    missing_field_unpinned_https_release_manifest:
        held_by_fleet_config(r#"
            apiVersion: capstan.dev/v1alpha1
            kind: FleetConfig
            spec:
              release:
                manifest: https://anywhere-assets.eks.amazonaws.com/releases/eks-a/manifest.yaml
        "#)
            .err(MissingField, FLEET, "release:");

    release_unavailable_manifest_not_in_repository:
        Case::workload().file(FLEET, r#"
            apiVersion: capstan.dev/v1alpha1
            kind: FleetConfig
            spec:
              release:
                manifest: release/eks-a/manifest.yaml
        "#)
            .broken(&[MGMT_DIR, OK_DIR, W_DIR])
            .in_cluster(MGMT_DIR)
            .err(ReleaseUnavailable, FLEET, "release:")
            .in_cluster(OK_DIR)
            .err(ReleaseUnavailable, FLEET, "release:")
            .in_cluster(W_DIR)
            .err(ReleaseUnavailable, FLEET, "release:");

    checksum_mismatch_release_manifest:
        Case::workload()
        .file("release/manifest.yaml", "apiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: Release\n")
        .file(FLEET, r#"
            apiVersion: capstan.dev/v1alpha1
            kind: FleetConfig
            spec:
              release:
                manifest: release/manifest.yaml
                sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
        "#)
        .broken(&[MGMT_DIR, OK_DIR, W_DIR])
        .in_cluster(MGMT_DIR)
        .err(ChecksumMismatch, FLEET, "release:")
        .in_cluster(OK_DIR)
        .err(ChecksumMismatch, FLEET, "release:")
        .in_cluster(W_DIR)
        .err(ChecksumMismatch, FLEET, "release:");

    invalid_value_fleet_rollout_max_unavailable:
        held_by_fleet_config(r#"
            apiVersion: capstan.dev/v1alpha1
            kind: FleetConfig
            spec:
              rollout:
                maxUnavailable: "0%"
        "#)
            .err(InvalidValue, FLEET, "maxUnavailable");

    invalid_value_fleet_rollout_worker_rollout:
        held_by_fleet_config(r#"
            apiVersion: capstan.dev/v1alpha1
            kind: FleetConfig
            spec:
              rollout:
                workerRollout: serial
        "#)
            .err(InvalidValue, FLEET, "workerRollout");

    unknown_field_fleet_rollout_wave:
        held_by_fleet_config(r#"
            apiVersion: capstan.dev/v1alpha1
            kind: FleetConfig
            spec:
              rollout:
                waves:
                - name: canary
                  selector: {tier: canary}
        "#)
            .err(UnknownField, FLEET, "selector");

    invalid_value_fleet_rollout_window_start:
        held_by_fleet_config(r#"
            apiVersion: capstan.dev/v1alpha1
            kind: FleetConfig
            spec:
              rollout:
                maintenanceWindows:
                - days: [Sat]
                  start: "2am"
                  duration: 4h
        "#)
            .err(InvalidValue, FLEET, "start:");

    invalid_value_fleet_rollout_wave_names_the_management_cluster:
        held_by_fleet_config(r#"
            apiVersion: capstan.dev/v1alpha1
            kind: FleetConfig
            spec:
              rollout:
                waves:
                - name: canary
                  clusters: [w, mgmt]
        "#)
            .err(InvalidValue, FLEET, "mgmt]");

    invalid_value_fleet_notifications_webhook_without_hmac_key:
        held_by_fleet_config(r#"
            apiVersion: capstan.dev/v1alpha1
            kind: FleetConfig
            spec:
              notifications:
                secretRef: capstan-system/hooks
                providers:
                - name: audit
                  type: webhook
        "#)
            .err(InvalidValue, FLEET, "name: audit");

    unknown_field_fleet_notifications_url_in_git:
        held_by_fleet_config(r#"
            apiVersion: capstan.dev/v1alpha1
            kind: FleetConfig
            spec:
              notifications:
                secretRef: capstan-system/hooks
                providers:
                - name: chat
                  type: slack
                  url: https://hooks.slack.com/services/T0/B0/x
        "#)
            .err(UnknownField, FLEET, "url:");

    invalid_value_fleet_eksa_versions:
        held_by_fleet_config(r#"
            apiVersion: capstan.dev/v1alpha1
            kind: FleetConfig
            spec:
              eksaVersions: [v0.25.2, 0.24.3]
        "#)
            .err(InvalidValue, FLEET, "0.24.3");

    // ─────────────────────────── undeclared-release ─────────────────────────
    // A workload naming a release its management cluster does not run would have the agent
    // write that release's EKSARelease (fleet-wide) as the management identity: only a release
    // an admin declares in the fleet config is taken. The management cluster renders as before
    // (no new release object).
    undeclared_release_eksa_version:
        Case::workload()
            .set(W, "kubernetesVersion:", "kubernetesVersion: \"1.32\"\neksaVersion: v0.25.2")
            .err(UndeclaredRelease, W, "eksaVersion");

    undeclared_release_bundles_ref:
        Case::workload()
            .set(W, "kubernetesVersion:", r#"
                kubernetesVersion: "1.32"
                bundlesRef:
                  apiVersion: anywhere.eks.amazonaws.com/v1alpha1
                  name: bundles-98
                  namespace: eksa-system
            "#)
            .warn(DeprecatedField, W, "bundlesRef")
            .err(UndeclaredRelease, W, "name: bundles-98");

    undeclared_release_another_one_declared:
        Case::workload()
            .file(FLEET, "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec: {eksaVersions: [v0.24.3]}\n")
            .set(W, "kubernetesVersion:", "kubernetesVersion: \"1.32\"\neksaVersion: v0.25.2")
            .err(UndeclaredRelease, W, "eksaVersion");

    // ─────────────────────────── unsupported-field ─────────────────────────
    unsupported_field_gitops_ref:
        Case::workload()
            .after(W, "kubernetesVersion:", "gitOpsRef: {kind: FluxConfig, name: w-flux}")
            .err(UnsupportedField, W, "gitOpsRef");

    missing_field_proxy_https_proxy:
        Case::workload()
            .after(W, "workerNodeGroupConfigurations:", r#"
                proxyConfiguration:
                  httpProxy: http://10.0.0.2:3128
                  noProxy: [10.0.0.0/8]
            "#)
            .err(MissingField, W, "proxyConfiguration");

    invalid_value_proxy_without_port:
        Case::workload()
            .after(W, "workerNodeGroupConfigurations:", r#"
                proxyConfiguration:
                  httpProxy: http://10.0.0.2:3128
                  httpsProxy: http://proxy.internal
            "#)
            .err(InvalidValue, W, "httpsProxy");

    missing_secret_registry_mirror_login:
        Case::workload()
            .after(W, "services:", r#"
                |  registryMirrorConfiguration:
                |    endpoint: harbor.internal
                |    authenticate: true
            "#)
            .renders()
            .warn(MissingSecret, W, "authenticate");

    invalid_type_registry_mirror_port_number:
        Case::workload()
            .after(W, "services:", r#"
                |  registryMirrorConfiguration:
                |    endpoint: harbor.internal
                |    port: 5000
            "#)
            .err(InvalidType, W, "port");

    invalid_value_control_plane_machine_health_check_duration:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", r#"
                controlPlaneConfiguration:
                  count: 1
                  machineHealthCheck:
                    maxUnhealthy: 1
                    nodeStartupTimeout: 10min
            "#)
            .err(InvalidValue, W, "nodeStartupTimeout");

    invalid_value_worker_kubelet_configuration_provider_id:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", r#"
                workerNodeGroupConfigurations:
                  - name: md-0
                    count: 1
                  - name: md-1
                    count: 1
                    kubeletConfiguration:
                      maxPods: 50
                      providerID: vsphere://x
            "#)
            .err(InvalidValue, W, "providerID");

    invalid_type_kubelet_configuration_not_a_mapping:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", r#"
                controlPlaneConfiguration:
                  count: 1
                  kubeletConfiguration: maxPods=50
            "#)
            .err(InvalidType, W, "kubeletConfiguration");

    invalid_value_cluster_network_cni:
        Case::workload()
            .before(W, "pods:", "cni: weave")
            .err(InvalidValue, W, "cni");

    deprecated_field_cluster_network_cni_and_cert_sans_spelling:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", r#"
                controlPlaneConfiguration:
                  count: 1
                  certSANs: [api.w.example.com]
            "#)
            .before(W, "pods:", "cni: cilium")
            .renders()
            .warn(DeprecatedField, W, "certSANs")
            .warn(DeprecatedField, W, "cni");

    invalid_value_kindnetd:
        Case::workload()
            .before(W, "pods:", r#"
                cniConfig:
                  kindnetd: {}
            "#)
            .err(InvalidValue, W, "kindnetd");

    invalid_value_vsphere_cert_bundles_on_ubuntu:
        Case::vsphere()
            .after(W_VS, "metadata: {name: w-cp} >> osFamily:", r#"
                hostOSConfiguration:
                  ntpConfiguration: {servers: [time.internal]}
                  certBundles: [{name: corp, data: x}]
            "#)
            .err(InvalidValue, W_VS, "certBundles");

    invalid_value_vsphere_bottlerocket_configuration_on_ubuntu:
        Case::vsphere()
            .after(W_VS, "metadata: {name: w-cp} >> osFamily:", r#"
                hostOSConfiguration:
                  bottlerocketConfiguration:
                    kernel: {sysctlSettings: {vm.max_map_count: "262144"}}
            "#)
            .err(InvalidValue, W_VS, "bottlerocketConfiguration");

    missing_field_vsphere_failure_domain:
        Case::vsphere()
            .set(W_VS, "spec: {datacenter:", r#"
                spec:
                  datacenter: dc1
                  network: VM Network
                  server: vcenter.example.internal
                  insecure: true
                  failureDomains:
                    - name: fd-1
                      computeCluster: c1
            "#)
            .err(MissingField, W_VS, "name: fd-1");

    unsupported_field_in_place_rollout:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", r#"
                controlPlaneConfiguration:
                  count: 1
                  upgradeRolloutStrategy:
                    type: InPlace
            "#)
            .err(UnsupportedField, W, "type");

    unsupported_fields_many_reported_together:
        Case::workload()
            .after(W, "services:", "|  gitOpsRef: {kind: FluxConfig, name: w}")
            .file(W_EXTRA, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: SnowDatacenterConfig
            metadata: {name: w}
            spec: {}
        "#)
            .err(UnsupportedField, W, "gitOpsRef")
            .err(UnsupportedKind, W_EXTRA, "kind");

    unsupported_field_packages_of_a_workload_cluster:
        Case::workload()
            .after(W, "managementCluster:", "packages: {}")
            .err(UnsupportedField, W, "packages");

    unsupported_field_packages_with_an_authenticated_mirror:
        Case::management()
            .after(M, "eksaVersion:", "packages: {}")
            .before(M, "clusterNetwork:", r#"
                registryMirrorConfiguration:
                  endpoint: harbor.internal
                  authenticate: true
            "#)
            .err(UnsupportedField, M, "packages");

    invalid_value_packages_controller_env:
        Case::management()
            .after(M, "eksaVersion:", r#"
                packages:
                  controller:
                    env: [HTTP_TIMEOUT=30s, VERBOSE]
            "#)
            .err(InvalidValue, M, "VERBOSE");

    invalid_value_license_token_not_a_jwt:
        Case::workload()
            .after(W, "managementCluster:", "licenseToken: my-licence-1234")
            .err(InvalidValue, W, "licenseToken");

    invalid_value_etcd_encryption_on_docker:
        Case::workload()
            .after(W, "services:", r#"
                |  etcdEncryption:
                |    - providers: [{kms: {name: kms, socketListenAddress: "unix:///var/run/kmsplugin/socket.sock"}}]
                |      resources: [secrets]
            "#)
            .err(InvalidValue, W, "etcdEncryption");

    invalid_value_control_plane_max_surge:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", r#"
                controlPlaneConfiguration:
                  count: 3
                  upgradeRolloutStrategy:
                    type: RollingUpdate
                    rollingUpdate: {maxSurge: 2}
            "#)
            .err(InvalidValue, W, "maxSurge");

    missing_secret_aws_iam_authenticator_ca:
        Case::workload()
            .after(W, "datacenterRef:", "identityProviderRefs: [{kind: AWSIamConfig, name: w-iam}]")
            .file(W_IAM, AWS_IAM_CONFIG)
            .renders()
            .warn(MissingSecret, W, "identityProviderRefs");

    missing_field_aws_iam_region:
        Case::workload()
            .after(W, "datacenterRef:", "identityProviderRefs: [{kind: AWSIamConfig, name: w-iam}]")
            .file(W_IAM, &AWS_IAM_CONFIG.replace("  awsRegion: us-west-2\n", ""))
            .err(MissingField, W_IAM, "spec:");

    invalid_value_aws_iam_mounted_file_backend:
        Case::workload()
            .after(W, "datacenterRef:", "identityProviderRefs: [{kind: AWSIamConfig, name: w-iam}]")
            .file(W_IAM, &AWS_IAM_CONFIG.replace("[EKSConfigMap]", "[EKSConfigMap, MountedFile]"))
            .err(InvalidValue, W_IAM, "MountedFile");

    missing_field_aws_iam_mapping_username:
        Case::workload()
            .after(W, "datacenterRef:", "identityProviderRefs: [{kind: AWSIamConfig, name: w-iam}]")
            .file(W_IAM, &AWS_IAM_CONFIG.replace("      username: admin\n", ""))
            .err(MissingField, W_IAM, "roleARN: arn");

    dangling_ref_aws_iam_config:
        Case::workload()
            .after(W, "datacenterRef:", "identityProviderRefs: [{kind: AWSIamConfig, name: w-iam}]")
            .err(DanglingRef, W, "name: w-iam");

    unsupported_field_aws_iam_on_the_management_cluster:
        Case::management()
            .after(M, "eksaVersion:", "identityProviderRefs: [{kind: AWSIamConfig, name: mgmt-iam}]")
            .file("clusters/mgmt/iam.yaml", &AWS_IAM_CONFIG.replace("name: w-iam", "name: mgmt-iam"))
            .err(UnsupportedField, M, "kind: AWSIamConfig");

    dangling_ref_oidc_config:
        Case::workload()
            .after(W, "datacenterRef:", r#"
                identityProviderRefs:
                  - kind: OIDCConfig
                    name: w-oidc
            "#)
            .err(DanglingRef, W, "name: w-oidc");

    invalid_value_oidc_flag_twice:
        Case::workload()
            .after(W, "datacenterRef:", "identityProviderRefs: [{kind: OIDCConfig, name: w-oidc}]")
            .set(W, "controlPlaneConfiguration:", r#"
                controlPlaneConfiguration:
                  count: 1
                  apiServerExtraArgs:
                    oidc-issuer-url: https://other.example.com
            "#)
            .after(W, "services:", r#"
                |---
                |apiVersion: anywhere.eks.amazonaws.com/v1alpha1
                |kind: OIDCConfig
                |metadata: {name: w-oidc}
                |spec: {clientId: k8s, issuerUrl: "https://login.example.com"}
            "#)
            .err(InvalidValue, W, "oidc-issuer-url");

    // ───────────────────────────── Nutanix ───────────────────────────────
    invalid_value_nutanix_memory_below_2gi:
        Case::nutanix()
            .set(W_NX, "metadata: {name: w-cp} >> memorySize:", "memorySize: 1024Mi")
            .err(InvalidValue, W_NX, "memorySize: 1024Mi");

    invalid_value_nutanix_disk_not_a_quantity:
        Case::nutanix()
            .set(W_NX, "metadata: {name: w-workers} >> systemDiskSize:", "systemDiskSize: 40GB")
            .err(InvalidValue, W_NX, "systemDiskSize: 40GB");

    invalid_value_nutanix_identifier_type:
        Case::nutanix()
            .set(W_NX, "metadata: {name: w-cp} >> subnet:", "subnet: {type: id, name: vlan-100}")
            .err(InvalidValue, W_NX, "type: id");

    missing_field_nutanix_identifier_uuid:
        Case::nutanix()
            .set(W_NX, "metadata: {name: w-workers} >> image:", "image: {type: uuid, name: ubuntu}")
            .err(MissingField, W_NX, "image: {type: uuid");

    missing_field_nutanix_credential_ref:
        Case::nutanix()
            .delete(W_NX, "credentialRef: {kind: Secret")
            .err_col(MissingField, W_NX, "kind: NutanixDatacenterConfig >> spec:", 1);

    invalid_value_nutanix_endpoint_host_not_an_ip:
        Case::nutanix()
            .set(W, "endpoint: {host: 10.30.0.10}", "endpoint: {host: api.w.example.internal}")
            .err(InvalidValue, W, "host: api.w.example.internal");

    invalid_value_nutanix_rollout_strategy:
        Case::nutanix()
            .after(W, "machineGroupRef: {kind: NutanixMachineConfig, name: w-workers}", r#"
                  upgradeRolloutStrategy:
                    rollingUpdate: {maxSurge: 1, maxUnavailable: 0}
            "#)
            .err(InvalidValue, W, "upgradeRolloutStrategy");

    invalid_value_nutanix_gpus_on_control_plane:
        Case::nutanix()
            .after(W_NX, "metadata: {name: w-cp} >> osFamily:", "gpus: [{type: name, name: Ampere 40}]")
            .err(InvalidValue, W_NX, "gpus: [{type");

    invalid_value_nutanix_ccm_exclude_too_wide:
        Case::nutanix()
            .after(W_NX, "credentialRef: {kind: Secret", "ccmExcludeNodeIPs: [10.0.0.0/8]")
            .err(InvalidValue, W_NX, "10.0.0.0/8");

    dangling_ref_nutanix_failure_domain_worker_group:
        Case::nutanix()
            .after(W_NX, "credentialRef: {kind: Secret", r#"
                  failureDomains:
                    - name: pe1
                      cluster: {type: name, name: pe1}
                      subnets: [{type: name, name: vlan-100}]
                      workerMachineGroups: [md-9]
            "#)
            .err(DanglingRef, W_NX, "md-9");

    // ─────────────────────────── Bare metal ──────────────────────────────
    invalid_value_tinkerbell_ip_not_an_ip:
        Case::tinkerbell()
            .set(W_TK, "tinkerbellIP: 10.40.0.20", "tinkerbellIP: tink.example.internal")
            .err(InvalidValue, W_TK, "tinkerbellIP: tink.example.internal");

    invalid_value_tinkerbell_endpoint_host_not_an_ip:
        Case::tinkerbell()
            .set(W, "endpoint: {host: 10.40.0.10}", "endpoint: {host: api.w.example.internal}")
            .err(InvalidValue, W, "host: api.w.example.internal");

    invalid_value_tinkerbell_hardware_selector_of_two_labels:
        Case::tinkerbell()
            .set(W_TK, "hardwareSelector: {cluster.x-k8s.io/cluster-name: w}", "hardwareSelector: {cluster.x-k8s.io/cluster-name: w, type: worker}")
            .err(InvalidValue, W_TK, "hardwareSelector: {cluster.x-k8s.io/cluster-name: w, type");

    invalid_value_tinkerbell_selector_and_affinity:
        Case::tinkerbell()
            .after(W_TK, "metadata: {name: w-cp} >> osFamily: ubuntu", "hardwareSelector: {type: cp}")
            .err(InvalidValue, W_TK, "hardwareAffinity:");

    invalid_value_tinkerbell_affinity_operator:
        Case::tinkerbell()
            .after(W_TK, "matchLabels: {cluster.x-k8s.io/cluster-name: w, type: cp}", "matchExpressions: [{key: rack, operator: Within, values: [r1]}]")
            .err(InvalidValue, W_TK, "operator: Within");

    invalid_value_tinkerbell_bottlerocket:
        Case::tinkerbell()
            .set(W_TK, "metadata: {name: w-workers} >> osFamily: ubuntu", "osFamily: bottlerocket")
            .err(InvalidValue, W_TK, "osFamily: bottlerocket");

    invalid_value_tinkerbell_external_etcd:
        Case::tinkerbell()
            .after(W, "datacenterRef: {kind: TinkerbellDatacenterConfig, name: w}", "externalEtcdConfiguration: {count: 3, machineGroupRef: {kind: TinkerbellMachineConfig, name: w-cp}}")
            .err(InvalidValue, W, "externalEtcdConfiguration:");

    invalid_value_tinkerbell_hook_iso_without_iso_boot:
        Case::tinkerbell()
            .after(W_TK, "tinkerbellIP: 10.40.0.20", "hookIsoURL: https://images.example.internal/hook.iso")
            .err(InvalidValue, W_TK, "hookIsoURL:");

    missing_field_tinkerbell_ssh_key:
        Case::tinkerbell()
            .set(W_TK, "metadata: {name: w-workers} >> sshAuthorizedKeys:", "sshAuthorizedKeys: []")
            .err(MissingField, W_TK, "sshAuthorizedKeys: []");

    missing_field_tinkerbell_os_image:
        Case::tinkerbell()
            .delete(W_TK, "osImageURL: https://images.example.internal")
            .err_col(MissingField, W_TK, "metadata: {name: w-cp} >> spec:", 1)
            .err_col(MissingField, W_TK, "metadata: {name: w-workers} >> spec:", 1);

    dangling_ref_tinkerbell_template_config:
        Case::tinkerbell()
            .after(W_TK, "metadata: {name: w-workers} >> osFamily: ubuntu", "templateRef: {kind: TinkerbellTemplateConfig, name: w-gpu}")
            .err(DanglingRef, W_TK, "name: w-gpu}");

    not_enough_hardware_for_the_machines:
        Case::tinkerbell()
            .file("clusters/mgmt/hardware-rack-1.yaml", r#"
            apiVersion: tinkerbell.org/v1alpha1
            kind: Hardware
            metadata:
              name: hw-1
              namespace: eksa-system
              labels: {cluster.x-k8s.io/cluster-name: other, type: cp}
            spec: {disks: [{device: /dev/sda}]}
        "#)
            .err(NotEnoughHardware, W, "machineGroupRef: {kind: TinkerbellMachineConfig, name: w-cp}")
            .err(NotEnoughHardware, W, "machineGroupRef: {kind: TinkerbellMachineConfig, name: w-workers}");

    not_enough_hardware_for_a_rolling_upgrade:
        Case::tinkerbell()
            .file("clusters/mgmt/hardware-rack-1.yaml", r#"
            apiVersion: tinkerbell.org/v1alpha1
            kind: Hardware
            metadata:
              name: hw-1
              namespace: eksa-system
              labels: {cluster.x-k8s.io/cluster-name: w, type: cp}
            spec: {disks: [{device: /dev/sda}]}
            ---
            apiVersion: tinkerbell.org/v1alpha1
            kind: Hardware
            metadata:
              name: hw-2
              namespace: eksa-system
              labels: {cluster.x-k8s.io/cluster-name: w, type: worker}
            spec: {disks: [{device: /dev/sda}]}
        "#)
            .renders()
            .warn(NotEnoughHardware, W, "machineGroupRef: {kind: TinkerbellMachineConfig, name: w-cp}");

    foreign_selector_tinkerbell_hardware_kept_for_another_cluster:
        Case::tinkerbell()
            .set(W_TK, "hardwareSelector: {cluster.x-k8s.io/cluster-name: w}", "hardwareSelector: {type: worker}")
            .err_col(ForeignSelector, W, "metadata: >> name: w", 3);

    dangling_ref_nutanix_machine_config:
        Case::nutanix()
            .set(W, "machineGroupRef: {kind: NutanixMachineConfig, name: w-workers}", "machineGroupRef: {kind: NutanixMachineConfig, name: w-nope}")
            .err(DanglingRef, W, "name: w-nope")
            // w-workers is then referenced by nothing.
            .warn(UnusedObject, W_NX, "name: w-workers");

    // ───────────────────────────── missing-field ───────────────────────────
    missing_field_vsphere_endpoint:
        Case::vsphere()
            .delete(W, "endpoint:")
            .err(MissingField, W, "controlPlaneConfiguration");

    missing_field_vsphere_worker_machine_group_ref:
        Case::vsphere()
            .delete(W, "machineGroupRef: {kind: VSphereMachineConfig, name: w-workers}")
            .err(MissingField, W, "name: md")
            // w-workers is then referenced by nothing.
            .warn(UnusedObject, W_VS, "name: w-workers");

    invalid_value_tainted_control_plane_without_workers:
        Case::workload()
            .delete(W, "workerNodeGroupConfigurations:")
            .set(W, "controlPlaneConfiguration:", r#"
                controlPlaneConfiguration:
                  count: 1
                  taints:
                    - {key: dedicated, value: cp, effect: NoSchedule}
            "#)
            .err(InvalidValue, W, "taints");

    invalid_value_node_cidr_mask_too_short:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", "workerNodeGroupConfigurations: []")
            .after(W, "services:", "nodes: {cidrMaskSize: 16}")
            .err(InvalidValue, W, "cidrMaskSize");

    missing_field_no_spec:
        Case::workload()
            .delete_block(W, "spec:")
            .err(MissingField, W, "apiVersion");

    missing_field_no_spec_in_second_document:
        Case::workload()
            .delete_block(W, "spec:")
            .merge_ahead(W, W_DC)
            .err_col(MissingField, W, "--- >> apiVersion:", 1);

    missing_field_kubernetes_version:
        Case::workload()
            .delete(W, "kubernetesVersion:")
            .err(MissingField, W, "spec");

    missing_field_second_worker_group_name:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", r#"
                workerNodeGroupConfigurations:
                  - count: 1
                  - count: 2
            "#)
            .err(MissingField, W, "count: 2");

    missing_field_direct_routing_without_native_cidr:
        Case::workload()
            .after(W, "services:", r#"
                cniConfig:
                  cilium:
                    routingMode: direct
            "#)
            .err(MissingField, W, "routingMode");

    missing_field_vsphere_machine_template:
        Case::vsphere()
            .delete(W_VS, "metadata: {name: w-workers} >> osFamily:")
            .delete(W_VS, "metadata: {name: w-workers} >> template:")
            .delete(W_VS, "metadata: {name: w-workers} >> resourcePool:")
            .delete(W_VS, "metadata: {name: w-workers} >> datastore:")
            .set(W_VS, "metadata: {name: w-workers} >> spec:", "spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}")
            .delete(W_VS, "template:")
            .err_col(MissingField, W_VS, "metadata: {name: w-cp} >> spec:", 1);

    // The VSphereDatacenterConfig is there but lacks `server`: that is the one problem (no
    // dangling datacenterRef, no "docker provider ignores machineGroupRef", no unused machines).
    missing_field_vsphere_datacenter_server_does_not_cascade:
        Case::vsphere()
            .set(W_VS, "spec: {datacenter:", "spec: {datacenter: dc1, network: VM Network, insecure: true}")
            .err(MissingField, W_VS, "spec: {datacenter");

    // ───────────────────────────── invalid-type ────────────────────────────
    invalid_type_control_plane_count_string:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", r#"
                controlPlaneConfiguration:
                  count: "three"
            "#)
            .err(InvalidType, W, r#"count: ""#);

    invalid_type_worker_count_word:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", r#"
                workerNodeGroupConfigurations:
                  - name: md-0
                    count: three
            "#)
            .err(InvalidType, W, "count: three");

    invalid_type_labels_as_list:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", r#"
                workerNodeGroupConfigurations:
                  - name: md-0
                    count: 1
                    labels:
                      - tier=general
            "#)
            .err(InvalidType, W, "labels");

    invalid_type_cidr_blocks_not_a_list:
        Case::workload()
            .set(W, "pods:", r#"
                pods:
                  cidrBlocks: 172.17.0.0/16
            "#)
            .err(InvalidType, W, "cidrBlocks: 172");

    invalid_type_cilium_helm_values_list:
        Case::workload()
            .after(W, "services:", r#"
                cniConfig:
                  cilium:
                    helmValues: [hubble]
            "#)
            .err(InvalidType, W, "helmValues");

    // ──────────────────────────── invalid-value ────────────────────────────
    invalid_value_even_control_plane_count_with_stacked_etcd:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", r#"
                controlPlaneConfiguration:
                  count: 2
            "#)
            .err(InvalidValue, W, "count: 2");

    invalid_value_docker_backend:
        Case::workload()
            .set(W_DC, "metadata:", r#"
                metadata:
                  name: w
                  annotations:
                    capstan.dev/docker-backend: kind
            "#)
            .err(InvalidValue, W_DC, "capstan");

    invalid_value_control_plane_count_zero:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", "controlPlaneConfiguration: {count: 0}")
            .err(InvalidValue, W, "count: 0");

    // A count that does not fit the replica field must not wrap around (4294967297 as u32 is 1).
    invalid_value_control_plane_count_too_large:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", r#"
                controlPlaneConfiguration:
                  count: 4294967297
            "#)
            .err(InvalidValue, W, "count: 4294967297");

    invalid_value_worker_count_too_large:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", r#"
                workerNodeGroupConfigurations:
                  - name: md-0
                    count: 4294967296
            "#)
            .err(InvalidValue, W, "count: 4294967296");

    invalid_value_even_external_etcd_count:
        Case::vsphere()
            .after(W, "endpoint:", r#"
                machineGroupRef: {kind: VSphereMachineConfig, name: w-cp}
                |  externalEtcdConfiguration:
                count: 2
            "#)
            .set(W, "controlPlaneConfiguration: >> count:", "count: 2")
            .err_col(InvalidValue, W, "externalEtcdConfiguration: >> count:", 5);

    invalid_value_taint_effect:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", r#"
                workerNodeGroupConfigurations:
                  - name: md-0
                    count: 1
                    taints:
                      - key: dedicated
                        value: gpu
                        effect: NoScheduling
            "#)
            .err(InvalidValue, W, "effect");

    invalid_value_autoscaling_min_above_max:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", r#"
                workerNodeGroupConfigurations:
                  - name: md-0
                    autoscalingConfiguration:
                      minCount: 5
                      maxCount: 2
            "#)
            .err(InvalidValue, W, "autoscalingConfiguration");

    invalid_value_negative_worker_count:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", r#"
                workerNodeGroupConfigurations:
                  - name: md-0
                    count: -1
            "#)
            .err(InvalidValue, W, "count: -");

    invalid_value_kubernetes_version_format:
        Case::workload()
            .set(W, "kubernetesVersion:", "kubernetesVersion: v1.33")
            .err(InvalidValue, W, "kubernetesVersion");

    invalid_value_eksa_version_format:
        Case::workload()
            .after(W, "kubernetesVersion:", "eksaVersion: 0.26.1")
            .err(InvalidValue, W, "eksaVersion");

    invalid_value_datacenter_ref_kind:
        Case::workload()
            .set(W, "datacenterRef:", r#"
                datacenterRef:
                  kind: SnowDatacenterConfig
                  name: w
            "#)
            .err(InvalidValue, W, "kind: SnowDatacenterConfig");

    invalid_value_unsupported_api_version:
        Case::workload()
            .set(W, "apiVersion:", "apiVersion: anywhere.eks.amazonaws.com/v1alpha2")
            .err(InvalidValue, W, "apiVersion");

    invalid_value_os_family_bottlerocket:
        Case::vsphere()
            .set(W_VS, "metadata: {name: w-cp} >> template:", "template: bottlerocket-kube-v1.33")
            .set(W_VS, "metadata: {name: w-cp} >> osFamily:", "osFamily: bottlerocket")
            .err(InvalidValue, W_VS, "osFamily: bottlerocket");

    invalid_value_os_family_defaults_to_bottlerocket:
        Case::vsphere()
            .delete(W_VS, "metadata: {name: w-workers} >> osFamily:")
            .delete(W_VS, "osFamily:")
            .delete(W_VS, "metadata: {name: w-cp} >> template:")
            .delete(W_VS, "metadata: {name: w-cp} >> resourcePool:")
            .delete(W_VS, "metadata: {name: w-cp} >> datastore:")
            .set(W_VS, "metadata: {name: w-cp} >> spec:", "spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}")
            .err_col(InvalidValue, W_VS, "metadata: {name: w-workers} >> spec:", 1);

    invalid_value_os_family_unknown:
        Case::vsphere()
            .set(W_VS, "metadata: {name: w-workers} >> template:", "template: win-2022")
            .set(W_VS, "metadata: {name: w-workers} >> osFamily:", "osFamily: windows")
            .err(InvalidValue, W_VS, "osFamily: windows");

    invalid_value_memory_too_small:
        Case::vsphere()
            .delete(W_VS, "metadata: {name: w-workers} >> osFamily:")
            .delete(W_VS, "metadata: {name: w-workers} >> template:")
            .delete(W_VS, "metadata: {name: w-workers} >> resourcePool:")
            .delete(W_VS, "metadata: {name: w-workers} >> datastore:")
            .set(W_VS, "metadata: {name: w-workers} >> spec:", "spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}")
            .after(W_VS, "osFamily:", "memoryMiB: 1024")
            .err(InvalidValue, W_VS, "memoryMiB");

    invalid_value_clone_mode:
        Case::vsphere()
            .after(W_VS, "metadata: {name: w-workers} >> osFamily:", "cloneMode: instantClone")
            .delete(W_VS, "metadata: {name: w-cp} >> osFamily:")
            .delete(W_VS, "metadata: {name: w-cp} >> template:")
            .delete(W_VS, "metadata: {name: w-cp} >> resourcePool:")
            .delete(W_VS, "metadata: {name: w-cp} >> datastore:")
            .set(W_VS, "metadata: {name: w-cp} >> spec:", "spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}")
            .err(InvalidValue, W_VS, "cloneMode");

    invalid_value_machine_group_ref_kind:
        Case::vsphere()
            .set(W, "machineGroupRef: {kind: VSphereMachineConfig, name: w-cp}", r#"
                machineGroupRef:
                  kind: DockerMachineConfig
                  name: w-cp
            "#)
            .err(InvalidValue, W, "kind: DockerMachineConfig");

    invalid_value_machine_health_check_duration:
        Case::workload()
            .after(W, "services:", r#"
                |  machineHealthCheck:
                nodeStartupTimeout: 10 minutes
            "#)
            .err(InvalidValue, W, "nodeStartupTimeout");

    invalid_value_machine_health_check_max_unhealthy:
        Case::workload()
            .after(W, "services:", r#"
                |  machineHealthCheck:
                maxUnhealthy: forty percent
            "#)
            .err(InvalidValue, W, "maxUnhealthy");

    invalid_value_cilium_policy_enforcement_mode:
        Case::workload()
            .after(W, "services:", r#"
                cniConfig:
                  cilium:
                    policyEnforcementMode: strict
            "#)
            .err(InvalidValue, W, "policyEnforcementMode");

    invalid_value_cilium_routing_mode:
        Case::workload()
            .after(W, "services:", r#"
                cniConfig:
                  cilium:
                    routingMode: native
            "#)
            .err(InvalidValue, W, "routingMode");

    invalid_value_control_plane_max_unavailable:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", r#"
                controlPlaneConfiguration:
                  count: 1
                  upgradeRolloutStrategy:
                    rollingUpdate:
                      maxUnavailable: 1
            "#)
            .err(InvalidValue, W, "maxUnavailable");

    invalid_value_rollout_type:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", r#"
                workerNodeGroupConfigurations:
                  - name: md-0
                    count: 1
                    upgradeRolloutStrategy:
                      type: Recreate
            "#)
            .err(InvalidValue, W, "type");

    invalid_value_node_label:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", r#"
                controlPlaneConfiguration:
                  count: 1
                  labels:
                    tier: "front end"
            "#)
            .err(InvalidValue, W, "tier");

    invalid_value_management_workers_all_tainted:
        Case::management()
            .after(M, "- name: md-0 >> count:", "taints: [{key: dedicated, effect: NoSchedule}]")
            .err(InvalidValue, M, "workerNodeGroupConfigurations");

    // ──────────────────────────── unquoted-version ─────────────────────────
    unquoted_kubernetes_version:
        Case::workload()
            .set(W, "kubernetesVersion:", "kubernetesVersion: 1.30")
            .err(UnquotedVersion, W, "kubernetesVersion");

    unquoted_worker_kubernetes_version:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", r#"
                workerNodeGroupConfigurations:
                  - name: md-0
                    count: 1
                    kubernetesVersion: 1.32
            "#)
            .err(UnquotedVersion, W, "kubernetesVersion: 1");

    // ────────────────────────────── dangling-ref ───────────────────────────
    dangling_datacenter_ref:
        Case::workload()
            .set(W, "datacenterRef:", r#"
                datacenterRef:
                  kind: DockerDatacenterConfig
                  name: w-dc
            "#)
            .err(DanglingRef, W, "name: w-");

    dangling_machine_group_ref:
        Case::vsphere()
            .set(W, "machineGroupRef: {kind: VSphereMachineConfig, name: w-workers}", r#"
                machineGroupRef:
                  kind: VSphereMachineConfig
                  name: w-worker
            "#)
            .err(DanglingRef, W, "name: w-worker")
            // w-workers is then referenced by nothing.
            .warn(UnusedObject, W_VS, "name: w-workers");

    // A vSphere cluster whose VSphereDatacenterConfig name is mistyped is still a vSphere cluster:
    // its machineGroupRefs are not "ignored by the docker provider" and its machines are used.
    dangling_vsphere_datacenter_ref_does_not_cascade:
        Case::vsphere()
            .set(W, "datacenterRef:", r#"
                datacenterRef:
                  kind: VSphereDatacenterConfig
                  name: w-dc
            "#)
            .err(DanglingRef, W, "name: w-dc");

    // ───────────────────────────── unknown-version ─────────────────────────
    unknown_version_eksa_version:
        Case::workload()
            .after(W, "kubernetesVersion:", "eksaVersion: v0.99.0")
            .err(UnknownVersion, W, "eksaVersion");

    unknown_version_kubernetes_not_in_bundle:
        Case::workload()
            .set(W, "kubernetesVersion:", r#"kubernetesVersion: "1.20""#)
            .err(UnknownVersion, W, "kubernetesVersion");

    unknown_version_worker_kubernetes_not_in_bundle:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", r#"
                workerNodeGroupConfigurations:
                  - name: md-0
                    count: 1
                    kubernetesVersion: "1.28"
            "#)
            .set(W, r#"kubernetesVersion: "1.33""#, r#"
                kubernetesVersion: "1.30"
                eksaVersion: v0.25.2
            "#)
            .err(UnknownVersion, W, r#"kubernetesVersion: "1.28"#);

    unknown_version_bundles_ref:
        Case::workload()
            .after(W, "kubernetesVersion:", r#"
                bundlesRef:
                  apiVersion: anywhere.eks.amazonaws.com/v1alpha1
                  name: bundles-1
                  namespace: eksa-system
            "#)
            .warn(DeprecatedField, W, "bundlesRef")
            .err(UnknownVersion, W, "name: bundles");

    // A workload that inherits its version from a broken management cluster cannot resolve one;
    // the sibling with an explicit eksaVersion is unaffected.
    unknown_version_inherited_from_broken_management:
        Case::workload()
            .set(M, "cidrBlocks: [192", "cidrBlocks: [192.168.0.0/33]")
            .broken(&[MGMT_DIR, W_DIR])
            .in_cluster(MGMT_DIR)
            .err(InvalidCidr, M, "192")
            .in_cluster(W_DIR)
            .err(UnknownVersion, W, "spec");

    // ──────────────────────────── version-conflict ─────────────────────────
    version_conflict_eksa_version_and_bundles_ref:
        Case::workload()
            .after(W, "kubernetesVersion:", r#"
                eksaVersion: v0.26.1
                bundlesRef:
                  apiVersion: anywhere.eks.amazonaws.com/v1alpha1
                  name: bundles-104
                  namespace: eksa-system
            "#)
            .err(VersionConflict, W, "bundlesRef");

    // ────────────────────────────── version-skew ───────────────────────────
    version_skew_worker_three_minors_behind:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", r#"
                workerNodeGroupConfigurations:
                  - name: md-0
                    count: 1
                    kubernetesVersion: "1.30"
            "#)
            .err(VersionSkew, W, r#"kubernetesVersion: "1.30"#);

    version_skew_worker_ahead_of_control_plane:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", r#"
                workerNodeGroupConfigurations:
                  - name: md-0
                    count: 1
                  - name: md-1
                    count: 1
                    kubernetesVersion: "1.33"
            "#)
            .set(W, "spec: >> kubernetesVersion:", r#"kubernetesVersion: "1.32""#)
            .err(VersionSkew, W, r#"kubernetesVersion: "1.33"#);

    version_skew_workload_newer_than_management:
        Case::workload()
            .file(MGMT2, MGMT2_CLUSTER)
            .file("clusters/mgmt2/workload-clusters/w3/cluster.yaml", r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w3}
            spec:
              kubernetesVersion: "1.33"
              eksaVersion: v0.26.1
              managementCluster: {name: mgmt2}
              datacenterRef: {kind: DockerDatacenterConfig, name: w3}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.30.0.0/16]}
                services: {cidrBlocks: [10.130.0.0/16]}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: DockerDatacenterConfig
            metadata: {name: w3}
        "#)
            .broken(&["clusters/mgmt2/workload-clusters/w3"])
            .in_cluster("clusters/mgmt2/workload-clusters/w3")
            .err(VersionSkew, "clusters/mgmt2/workload-clusters/w3/cluster.yaml", "eksaVersion");

    version_skew_workload_three_minors_behind_management:
        Case::workload()
            .set(W, "kubernetesVersion:", r#"
                kubernetesVersion: "1.32"
                eksaVersion: v0.23.5
            "#)
            .err(VersionSkew, W, "eksaVersion");

    // With a (deprecated) bundlesRef the version comes from bundlesRef, so that is where the
    // skew is.
    version_skew_bundles_ref_lags_management:
        Case::workload()
            .set(W, "kubernetesVersion:", r#"
                kubernetesVersion: "1.32"
                bundlesRef:
                  apiVersion: anywhere.eks.amazonaws.com/v1alpha1
                  name: bundles-85
                  namespace: eksa-system
            "#)
            .warn(DeprecatedField, W, "bundlesRef")
            .err(VersionSkew, W, "bundlesRef");

    // ────────────────────────────── invalid-cidr ───────────────────────────
    invalid_cidr_not_a_cidr:
        Case::workload()
            .set(W, "pods:", r#"
                pods:
                  cidrBlocks:
                    - pod-network
            "#)
            .err(InvalidCidr, W, "pod-");

    invalid_cidr_host_bits_set:
        Case::workload()
            .set(W, "services:", "services: {cidrBlocks: [10.113.5.0/16]}")
            .err(InvalidCidr, W, "10");

    invalid_cidr_two_blocks:
        Case::workload()
            .set(W, "pods:", r#"
                pods:
                  cidrBlocks: [172.17.0.0/16, 172.18.0.0/16]
            "#)
            .err(InvalidCidr, W, "cidrBlocks: [172");

    invalid_cidr_no_blocks:
        Case::workload()
            .set(W, "services:", r#"
                services:
                  cidrBlocks: []
            "#)
            .err(InvalidCidr, W, "cidrBlocks: []");

    // ────────────────────────────── cidr-overlap ───────────────────────────
    cidr_overlap_pods_and_services_of_one_cluster:
        Case::workload()
            .set(W, "services:", r#"
                services:
                  cidrBlocks: [172.17.128.0/17]
            "#)
            .err(CidrOverlap, W, "cidrBlocks: [172.17.128");

    cidr_overlap_between_two_workloads:
        Case::workload()
            .file(W2, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w2}
            spec:
              kubernetesVersion: "1.33"
              eksaVersion: v0.26.1
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w2}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods:
                  cidrBlocks: [172.17.0.0/17]
                services: {cidrBlocks: [10.114.0.0/16]}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: DockerDatacenterConfig
            metadata: {name: w2}
        "#)
            .broken(&[W_DIR, W2_DIR])
            .in_cluster(W_DIR)
            .err(CidrOverlap, W, "cidrBlocks: [172")
            .in_cluster(W2_DIR)
            .err(CidrOverlap, W2, "cidrBlocks: [172");

    cidr_overlap_workload_and_management:
        Case::workload()
            .set(W, "services:", r#"
                services:
                  cidrBlocks: [10.100.0.0/16]
            "#)
            .broken(&[MGMT_DIR, W_DIR])
            .in_cluster(W_DIR)
            .err(CidrOverlap, W, "cidrBlocks: [10")
            .in_cluster(MGMT_DIR)
            .err(CidrOverlap, M, "cidrBlocks: [10");

    // ────────────────────────────── forbidden-kind ─────────────────────────
    forbidden_kind_cluster_role:
        Case::workload()
            .file("clusters/mgmt/workload-clusters/w/rbac.yaml", r#"
            apiVersion: rbac.authorization.k8s.io/v1
            kind: ClusterRole
            metadata: {name: w-admin}
            rules: [{apiGroups: ["*"], resources: ["*"], verbs: ["*"]}]
        "#)
            .err(ForbiddenKind, "clusters/mgmt/workload-clusters/w/rbac.yaml", "apiVersion");

    forbidden_kind_namespace_after_document_separator:
        Case::workload()
            .after(W, "services:", r#"
                |---
                |apiVersion: v1
                |kind: Namespace
                |metadata: {name: team-w}
            "#)
            .err(ForbiddenKind, W, "apiVersion: v1");

    forbidden_kind_deployment:
        Case::workload()
            .file(W_EXTRA, r#"
            apiVersion: apps/v1
            kind: Deployment
            metadata: {name: w-tool}
            spec:
              selector: {matchLabels: {app: tool}}
              template:
                metadata: {labels: {app: tool}}
                spec: {containers: [{name: tool, image: busybox}]}
        "#)
            .err(ForbiddenKind, W_EXTRA, "apiVersion");

    forbidden_kind_cluster_api_object:
        Case::workload()
            .file(W_EXTRA, r#"
            apiVersion: cluster.x-k8s.io/v1beta1
            kind: MachineDeployment
            metadata: {name: w-extra-md}
            spec: {clusterName: w, replicas: 10}
        "#)
            .err(ForbiddenKind, W_EXTRA, "apiVersion");

    // ─────────────────────────── foreign-namespace ─────────────────────────
    foreign_namespace_extra_object:
        Case::workload()
            .file(W_EXTRA, r#"
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: w-notes
              namespace: kube-system
            data: {owner: team-w}
        "#)
            .err(ForeignNamespace, W_EXTRA, "namespace");

    foreign_namespace_eksa_object:
        Case::workload()
            .set(W_DC, "metadata:", r#"
                metadata:
                  name: w
                  namespace: team-x
            "#)
            .err(ForeignNamespace, W_DC, "namespace");

    // ──────────────────────────── secret-with-data ─────────────────────────
    secret_with_data:
        Case::workload()
            .file(W_EXTRA, r#"
            apiVersion: v1
            kind: Secret
            metadata: {name: w-registry}
            data:
              password: aHVudGVyMg==
        "#)
            .err_col(SecretWithData, W_EXTRA, "data:", 1);

    secret_with_string_data:
        Case::workload()
            .file(W_EXTRA, r#"
            apiVersion: v1
            kind: Secret
            metadata: {name: w-registry}
            type: Opaque
            stringData: {password: hunter2}
        "#)
            .err(SecretWithData, W_EXTRA, "stringData");

    secret_with_data_in_management_dir:
        Case::management()
            .file("clusters/mgmt/secrets.yaml", r#"
            apiVersion: v1
            kind: Secret
            metadata: {name: vsphere-credentials, namespace: eksa-system}
            data:
              username: YWRtaW4=
        "#)
            .err_col(SecretWithData, "clusters/mgmt/secrets.yaml", "data:", 1);

    // ───────────────────── not-utf8, file-too-large, symlinks ───────────────
    not_utf8_in_memory:
        Case::workload()
            .bytes("clusters/mgmt/workload-clusters/w/notes.yaml", b"# owner: team-w\n# site: M\xfcnchen\n".to_vec())
            .err_line(NotUtf8, "clusters/mgmt/workload-clusters/w/notes.yaml", "# site:");

    not_utf8_on_disk:
        Case::workload()
            .on_disk()
            .bytes(W_EXTRA, b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w-notes}\ndata: {city: \xe9vry}\n".to_vec())
            .err_line(NotUtf8, W_EXTRA, "data:");

    file_too_large:
        Case::workload()
            .big_file(W_EXTRA, 1024 * 1024 + 1)
            .err_file(FileTooLarge, W_EXTRA);

    symlink_escapes_the_repository:
        Case::workload()
            .outside("shared/cm.yaml", r#"
            apiVersion: v1
            kind: ConfigMap
            metadata: {name: w-notes}
        "#)
            .symlink(W_EXTRA, "../../../../../shared/cm.yaml")
            .err_file(SymlinkEscapes, W_EXTRA);

    symlink_dangling:
        Case::workload()
            .symlink(W_EXTRA, "does-not-exist.yaml")
            .err_file(SymlinkEscapes, W_EXTRA);

    // ─────────── add-ons: the same file rules, and add-ons' own ────────────
    addon_secret_with_data:
        Case::workload()
            .file(W_ADDON, r#"
            apiVersion: v1
            kind: Secret
            metadata: {name: registry, namespace: apps}
            data:
              password: aHVudGVyMg==
        "#)
            .err_col(SecretWithData, W_ADDON, "data:", 1);

    // SOPS files, checked without a key (their decryption: corpus/sops.rs, with the real sops).
    addon_sops_version_unknown:
        Case::workload()
            .file(W_ADDON, &sops_file("apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: apps}\nstringData:\n  password: ENC\n", "2.0.0"))
            .err_file(SopsInvalid, W_ADDON);

    addon_sops_config_map_encrypted:
        Case::workload()
            .file(W_ADDON, &sops_file("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: apps}\ndata:\n  level: ENC\n", "3.13.3"))
            .err_line(SopsInvalid, W_ADDON, "kind: ConfigMap");

    addon_sops_value_left_in_plain_text:
        Case::workload()
            .file(W_ADDON, &sops_file("apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: apps}\nstringData:\n  user: ENC\n  password: hunter2\n", "3.13.3"))
            .err_line(SopsInvalid, W_ADDON, "password: hunter2");

    addon_sops_encrypted_for_another_cluster:
        Case::workload()
            .file(W_ADDON, &sops_file("apiVersion: v1\nkind: Secret\nmetadata:\n  name: registry\n  namespace: apps\n  annotations: {capstan.dev/encrypted-for: ok}\nstringData:\n  password: ENC\n", "3.13.3"))
            .err_line(SopsInvalid, W_ADDON, "metadata:");

    addon_sops_rules_that_encrypt_nothing:
        Case::workload()
            .file(W_ADDON, &sops_file("apiVersion: v1\nkind: Secret\nmetadata:\n  name: registry\n  namespace: apps\n  annotations: {capstan.dev/encrypted-for: w}\nstringData:\n  password: hunter2\n", "3.13.3").replace("^(data|stringData)$", "^nothing$"))
            .err_line(SopsInvalid, W_ADDON, "password: hunter2");

    // A cluster directory's own encrypted Secrets (applied on the management cluster) name
    // `<management>:<cluster>`; an add-on names its cluster. Neither goes where the other does.
    sops_secret_of_a_cluster_directory_encrypted_as_an_add_on:
        Case::workload()
            .file(W_EXTRA, &sops_file("apiVersion: v1\nkind: Secret\nmetadata:\n  name: w-registry\n  annotations: {capstan.dev/encrypted-for: w}\ntype: Opaque\nstringData:\n  password: ENC\n", "3.13.3"))
            .err_line(SopsInvalid, W_EXTRA, "metadata:");

    sops_add_on_encrypted_for_the_management_cluster:
        Case::workload()
            .file(W_ADDON, &sops_file("apiVersion: v1\nkind: Secret\nmetadata:\n  name: registry\n  namespace: apps\n  annotations: {capstan.dev/encrypted-for: \"mgmt:w\"}\nstringData:\n  password: ENC\n", "3.13.3"))
            .err_line(SopsInvalid, W_ADDON, "metadata:");

    sops_secret_of_a_cluster_directory_copied_from_another:
        Case::workload()
            .file(W_EXTRA, &sops_file("apiVersion: v1\nkind: Secret\nmetadata:\n  name: w-registry\n  annotations: {capstan.dev/encrypted-for: \"mgmt:ok\"}\ntype: Opaque\nstringData:\n  password: ENC\n", "3.13.3"))
            .err_line(SopsInvalid, W_EXTRA, "metadata:");

    sops_secret_named_for_another_cluster:
        Case::workload()
            .file(W_EXTRA, &sops_file("apiVersion: v1\nkind: Secret\nmetadata:\n  name: ok-vsphere-credentials\n  annotations: {capstan.dev/encrypted-for: \"mgmt:w\"}\ntype: Opaque\nstringData:\n  password: ENC\n", "3.13.3"))
            .err_line(NameOutsideCluster, W_EXTRA, "name: ok-vsphere-credentials");

    sops_secret_of_a_cluster_directory_whose_rules_encrypt_nothing:
        Case::workload()
            .file(W_EXTRA, &sops_file("apiVersion: v1\nkind: Secret\nmetadata:\n  name: w-registry\n  annotations: {capstan.dev/encrypted-for: \"mgmt:w\"}\ntype: Opaque\nstringData:\n  password: hunter2\n", "3.13.3").replace("^(data|stringData)$", "^nothing$"))
            .err_line(SopsInvalid, W_EXTRA, "password: hunter2");

    addon_sops_pgp_only:
        Case::workload()
            .file(W_ADDON, &sops_file("apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: apps}\nstringData:\n  password: ENC\n", "3.13.3").replace("  age:\n    - recipient: age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p\n      enc: x\n", "  pgp:\n    - fp: 85D77543B3D624B63CEA9E6DBC17301B491B3F21\n"))
            .err_file(SopsInvalid, W_ADDON);

    invalid_value_sops_identity_as_recipient:
        held_by_fleet_config(r#"
            apiVersion: capstan.dev/v1alpha1
            kind: FleetConfig
            spec:
              sops:
                ageRecipients: [AGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ]
        "#)
            .err(InvalidValue, FLEET, "AGE-SECRET-KEY");

    addon_alias_expansion_bomb:
        Case::workload()
            .file(W_ADDON, &alias_bomb(20_000, 50_000))
            .isolated()
            .err_line(YamlSyntax, W_ADDON, "b: [");

    addon_symlink_escapes_the_repository:
        Case::workload()
            .outside("shared/cm.yaml", r#"
            apiVersion: v1
            kind: ConfigMap
            metadata: {name: notes}
        "#)
            .symlink(W_ADDON, "../../../../../../shared/cm.yaml")
            .err_file(SymlinkEscapes, W_ADDON);

    addon_file_too_large:
        Case::workload()
            .big_file(W_ADDON, 1024 * 1024 + 1)
            .err_file(FileTooLarge, W_ADDON);

    addon_without_a_name:
        Case::workload()
            .file(W_ADDON, r#"
            apiVersion: v1
            kind: ConfigMap
            metadata: {namespace: apps}
        "#)
            .err_line(MissingTypeInfo, W_ADDON, "apiVersion");

    addon_list_kind:
        Case::workload()
            .file(W_ADDON, r#"
            apiVersion: v1
            kind: List
            metadata: {name: all}
            items: []
        "#)
            .err(UnsupportedKind, W_ADDON, "kind");

    addon_written_twice:
        Case::workload()
            .file(W_ADDON, r#"
            apiVersion: v1
            kind: Namespace
            metadata: {name: apps}
            ---
            apiVersion: v1
            kind: Namespace
            metadata: {name: apps, labels: {team: x}}
        "#)
            .err_line(DuplicateName, W_ADDON, "metadata: {name: apps, labels");

    addon_not_yaml:
        Case::workload()
            .bytes("clusters/mgmt/workload-clusters/w/addons/install.sh", b"#!/bin/sh\nkubectl apply -f .\n".to_vec())
            .err_file(UnexpectedEntry, "clusters/mgmt/workload-clusters/w/addons/install.sh");

    shared_addon_outside_a_set:
        Case::management()
            .file("clusters/mgmt/addons/base.yaml", r#"
            apiVersion: v1
            kind: Namespace
            metadata: {name: base}
        "#)
            .err_file(UnexpectedEntry, "clusters/mgmt/addons/base.yaml");

    // ──────────────── warnings: reported, the cluster still renders ─────────
    warning_deprecated_bundles_ref:
        Case::workload()
            .after(W, "kubernetesVersion:", r#"
                bundlesRef:
                  apiVersion: anywhere.eks.amazonaws.com/v1alpha1
                  name: bundles-104
                  namespace: eksa-system
            "#)
            .renders()
            .warn(DeprecatedField, W, "bundlesRef");

    warning_unused_machine_config:
        Case::vsphere()
            .file("clusters/mgmt/workload-clusters/w/spare.yaml", r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata:
              name: w-spare
            spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}
        "#)
            .renders()
            .warn(UnusedObject, "clusters/mgmt/workload-clusters/w/spare.yaml", "name");

    warning_docker_ignores_machine_group_ref:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", r#"
                controlPlaneConfiguration:
                  count: 1
                  machineGroupRef: {kind: VSphereMachineConfig, name: w-cp}
            "#)
            .renders()
            .warn(UnusedObject, W, "machineGroupRef");

    // ───────────────── several problems, all reported in one run ────────────
    multi_five_problems_in_one_cluster:
        Case::workload()
            .set(W, "services:", r#"
                services:
                  cidrBlocks: [10.113.0.0/33]
                cniConfig:
                  cilium: {policyEnforcementMode: sometimes}
                |  machineHealthCheck:
                unhealthyMachineTimeout: 5 min
            "#)
            .delete(W, "workerNodeGroupConfigurations:")
            .set(W, "controlPlaneConfiguration:", r#"
                controlPlaneConfiguration:
                  count: 2
                workerNodeGroupConfigurations:
                  - name: md-0
                    count: 1
                    taints: [{key: a, effect: Never}]
            "#)
            .err(InvalidValue, W, "count: 2")
            .err(InvalidValue, W, "effect")
            .err(InvalidCidr, W, "10")
            .err(InvalidValue, W, "policyEnforcementMode")
            .err(InvalidValue, W, "unhealthyMachineTimeout");

    multi_problems_in_three_files_of_one_cluster:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", "controlPlaneConfiguration: {count: 4}")
            .file(W_EXTRA, r#"
            apiVersion: v1
            kind: ConfigMap
            metadata: {name: w-notes
            data: {}
        "#)
            .file("clusters/mgmt/workload-clusters/w/flux.yaml", r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: GitOpsConfig
            metadata: {name: w-gitops}
        "#)
            .err(InvalidValue, W, "count: 4")
            .err_line(YamlSyntax, W_EXTRA, "data:")
            .err(UnsupportedKind, "clusters/mgmt/workload-clusters/w/flux.yaml", "kind");

    // Layout problems (name, management relation) are known even when the spec has other errors,
    // so they are reported in the same run.
    multi_layout_and_spec_problems_together:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", "controlPlaneConfiguration: {count: 2}")
            .set(W, "name:", "name: w-renamed")
            .err(DirNameMismatch, W, "name: w-")
            .err(InvalidValue, W, "count: 2");

    multi_dir_name_and_management_mismatch:
        Case::workload()
            .set(W, "managementCluster:", "managementCluster: {name: mgmt-old}")
            .set(W, "name:", "name: w-renamed")
            .err(DirNameMismatch, W, "name: w-")
            .err(ManagementMismatch, W, "managementCluster");

    multi_problems_in_several_clusters:
        Case::workload()
            .after(M, "cidrBlocks: [10.96", "|  gitOpsRef: {kind: FluxConfig, name: fleet}")
            .set(W, "workerNodeGroupConfigurations:", "workerNodeGroupConfigurations: [{name: md-0, count: 1, lables: {a: b}}]")
            .file(W2, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w2}
            spec:
              kubernetesVersion: "1.33"
              eksaVersion: v0.26.1
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w2}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.18.0.0/16]}
                services: {cidrBlocks: [10.114.0.0/16]}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: DockerDatacenterConfig
            metadata: {name: w2}
        "#)
            .file("clusters/mgmt/workload-clusters/w2/bot.yaml", r#"
            apiVersion: v1
            kind: ServiceAccount
            metadata: {name: w2-bot}
        "#)
            .file("clusters/notes.txt", "not a cluster\n")
            .broken(&[MGMT_DIR, W_DIR, W2_DIR])
            .in_cluster(MGMT_DIR)
            .err(UnsupportedField, M, "gitOpsRef")
            .in_cluster(W_DIR)
            .err(UnknownField, W, "lables")
            .in_cluster(W2_DIR)
            .err(ForbiddenKind, "clusters/mgmt/workload-clusters/w2/bot.yaml", "apiVersion")
            .in_fleet()
            .err_file(UnexpectedEntry, "clusters/notes.txt");

    // ─────────────────────── hostile repositories (working copy) ───────────────────────
    symlink_into_git_config:
        Case::workload()
            .bytes(".git/config", b"[core]\n\tbare = false\n".to_vec())
            .symlink(W_EXTRA, "../../../../.git/config")
            .err_file(SymlinkIntoGit, W_EXTRA);

    symlink_into_git_directory:
        Case::workload()
            .bytes(".git/HEAD", b"ref: refs/heads/main\n".to_vec())
            .symlink("clusters/mgmt/workload-clusters/w/objects.yaml", "../../../../.git")
            .err_file(SymlinkIntoGit, "clusters/mgmt/workload-clusters/w/objects.yaml");

    symlink_into_git_from_management_dir:
        Case::management()
            .bytes(".git/config", b"[core]\n".to_vec())
            .symlink("clusters/mgmt/extra.yaml", "../../.git/config")
            .err_file(SymlinkIntoGit, "clusters/mgmt/extra.yaml");

    symlink_absolute_outside:
        Case::workload()
            .symlink(W_EXTRA, "/etc/hostname")
            .err_file(SymlinkEscapes, W_EXTRA);

    symlink_to_sibling_cluster_file_is_read:
        Case::workload()
            .symlink(W_EXTRA, "../ok/cluster.yaml")
            // Its content is ok's cluster.yaml, read through the link: a second Cluster in w.
            .err_via(MultipleClusters, W_EXTRA, OK, "name: ok\n");

    file_too_large_in_management_dir:
        Case::management()
            .big_file("clusters/mgmt/big.yaml", 2 * 1024 * 1024)
            .err_file(FileTooLarge, "clusters/mgmt/big.yaml");

    binary_file_png_in_workload_dir:
        Case::workload()
            .bytes(W_EXTRA, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR".to_vec())
            .err_col(BinaryFile, W_EXTRA, "\0", 1);

    binary_file_nul_in_yaml:
        Case::workload()
            .bytes(W_EXTRA, b"apiVersion: v1\nkind: ConfigMap\x00\n".to_vec())
            .err_col(BinaryFile, W_EXTRA, "kind: ConfigMap\0", 1);

    binary_file_on_disk:
        Case::workload()
            .on_disk()
            .bytes(W_EXTRA, vec![0u8; 64])
            .err_col(BinaryFile, W_EXTRA, "\0", 1);

    binary_file_in_management_dir:
        Case::management()
            .bytes("clusters/mgmt/blob.yaml", b"\x00\x01\x02".to_vec())
            .err_col(BinaryFile, "clusters/mgmt/blob.yaml", "\0", 1);

    not_utf8_latin1_in_cluster_file:
        Case::workload()
            .set(W_DC, "metadata:", "metadata: {name: w}   # München")
            .latin1(W_DC)
            .err_line(NotUtf8, W_DC, "metadata:")
            // The datacenter config is unreadable, so the Cluster's reference to it dangles.
            .err(DanglingRef, W, "name: w}");

    not_utf8_utf16_file:
        Case::workload()
            .bytes(W_EXTRA, b"\xff\xfea\x00p\x00i\x00".to_vec())
            .err_col(BinaryFile, W_EXTRA, "\u{FFFD}\u{FFFD}a\0", 1);

    non_utf8_file_name_in_workload_dir:
        Case::workload()
            .raw_name(b"clusters/mgmt/workload-clusters/w/caf\xe9.yaml", "
                apiVersion: v1
                kind: ConfigMap
                metadata: {name: w-cafe}
            ")
            .err_file(InvalidPath, "clusters/mgmt/workload-clusters/w/caf\u{FFFD}.yaml");

    non_utf8_file_name_in_management_dir:
        Case::management()
            .raw_name(b"clusters/mgmt/\xff.yaml", "# nothing\n")
            .err_file(InvalidPath, "clusters/mgmt/\u{FFFD}.yaml");

    case_collision_two_files:
        Case::workload()
            .file("clusters/mgmt/workload-clusters/w/Cluster.yaml", "
                apiVersion: v1
                kind: ConfigMap
                metadata: {name: w-notes}
            ")
            .err_file(CaseCollision, W)
            .err_file(CaseCollision, "clusters/mgmt/workload-clusters/w/Cluster.yaml");

    case_collision_on_disk:
        Case::workload()
            .on_disk()
            .file("clusters/mgmt/workload-clusters/w/DATACENTER.yaml", "
                apiVersion: v1
                kind: ConfigMap
                metadata: {name: w-dc-notes}
            ")
            .err_file(CaseCollision, W_DC)
            .err_file(CaseCollision, "clusters/mgmt/workload-clusters/w/DATACENTER.yaml");

    case_collision_in_management_dir:
        Case::management()
            .file("clusters/mgmt/Datacenter.yaml", "
                apiVersion: v1
                kind: ConfigMap
                metadata: {name: mgmt-notes}
            ")
            .err_file(CaseCollision, M_DC)
            .err_file(CaseCollision, "clusters/mgmt/Datacenter.yaml");

    ten_thousand_files_in_a_workload_dir:
        Case::workload()
            .many_files(W_DIR, 10_000)
            .err_file(TooManyEntries, W_DIR);

    too_many_entries_in_workload_clusters_refuses_the_revision:
        Case::workload()
            .many_files("clusters/mgmt/workload-clusters", capstan_layout::tree::MAX_DIR_ENTRIES + 1)
            .in_fleet()
            .err_file(TooManyEntries, "clusters/mgmt/workload-clusters")
            .refused();

    too_many_entries_under_clusters_refuses_the_revision:
        Case::workload()
            .many_files("clusters", capstan_layout::tree::MAX_DIR_ENTRIES + 1)
            .in_fleet()
            .err_file(TooManyEntries, "clusters")
            .refused();

    too_many_entries_outside_clusters_are_ignored:
        Case::workload()
            .many_files("docs/generated", capstan_layout::tree::MAX_DIR_ENTRIES + 1)
            .renders();

    deep_nesting_in_a_workload_dir:
        Case::workload()
            .nested(W_DIR, 60)
            .err_file(TooDeep, &format!("{W_DIR}{}", "/d".repeat(28)));

    deep_nesting_in_a_management_dir:
        Case::management()
            .nested("clusters/mgmt/tools", 40)
            .err_file(TooDeep, &format!("clusters/mgmt/tools{}", "/d".repeat(29)));

    deep_nesting_outside_clusters_is_ignored:
        Case::workload()
            .nested("vendor", 100)
            .renders();

    secret_with_data_in_the_cluster_file:
        Case::workload()
            .merge(W, W_DC)
            .after(W, "metadata: {name: w}", r#"
                |---
                |apiVersion: v1
                |kind: Secret
                |metadata: {name: w-creds}
                |data: {token: c2VjcmV0}
            "#)
            .err_col(SecretWithData, W, "data: {token", 1);

    secret_with_binary_data_in_workload_dir:
        Case::workload()
            .file(W_EXTRA, "
                apiVersion: v1
                kind: Secret
                metadata: {name: w-tls}
                type: kubernetes.io/tls
                data:
                  tls.crt: LS0tLS1CRUdJTg==
                  tls.key: LS0tLS1CRUdJTg==
            ")
            .err_col(SecretWithData, W_EXTRA, "data:", 1)
            // A TLS Secret is not a type a workload writes either (data-less, it is useless).
            .err(FillableSecret, W_EXTRA, "type: kubernetes.io/tls");

    yaml_billion_laughs:
        Case::workload()
            .file(W_EXTRA, r#"
                apiVersion: v1
                kind: ConfigMap
                metadata: {name: w-lol}
                data:
                  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
                  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
                  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
                  d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
                  e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
                  f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
                  g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
                  h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
                  i: [*h,*h,*h,*h,*h,*h,*h,*h,*h]
            "#)
            .isolated()
            .err_line(YamlSyntax, W_EXTRA, "f: &f");

    yaml_merge_key_bomb:
        Case::workload()
            .file(W_EXTRA, "
                apiVersion: v1
                kind: ConfigMap
                metadata: {name: w-merge}
                data:
                  a: &a {k0: v, k1: v, k2: v, k3: v, k4: v, k5: v, k6: v, k7: v}
                  b: &b {<<: *a, x: [*a, *a, *a, *a, *a, *a, *a, *a]}
                  c: &c {<<: *b, y: [*b, *b, *b, *b, *b, *b, *b, *b]}
                  d: &d {<<: *c, z: [*c, *c, *c, *c, *c, *c, *c, *c]}
                  e: &e {<<: *d, w: [*d, *d, *d, *d, *d, *d, *d, *d]}
                  f: [*e, *e, *e, *e, *e, *e, *e, *e]
            ")
            .isolated()
            .err_col(YamlSyntax, W_EXTRA, "f: [", 7);

    // Block nesting as deep as the file size limit allows is read without exhausting the stack
    // (the parser and the conversion do not recurse per level): not an error of its own.
    yaml_deep_block_nesting_within_the_size_limit_is_read:
        Case::workload()
            .bytes(W_EXTRA, {
                let mut s = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w-deep}\ndata:\n");
                // One space a level: about 1,400 levels fit in the 1 MiB file limit.
                for i in 0..1400 {
                    s.push_str(&format!("{}k:\n", " ".repeat(i + 1)));
                }
                s.into_bytes()
            })
            .isolated()
            .renders();

    // ─────────────────── not a fleet: refused, never an empty desired fleet ───────────────────
    not_a_fleet_empty_repository:
        Case::workload()
            .remove(M).remove(M_DC).remove(OK).remove(W).remove(W_DC)
            .in_fleet()
            .err_file(NotAFleet, "clusters")
            .refused();

    not_a_fleet_no_clusters_directory:
        Case::workload()
            .remove(M).remove(M_DC).remove(OK).remove(W).remove(W_DC)
            .file("README.md", "# my infrastructure\n")
            .file("k8s/deployment.yaml", "
                apiVersion: apps/v1
                kind: Deployment
                metadata: {name: web}
            ")
            .in_fleet()
            .err_file(NotAFleet, "clusters")
            .refused();

    not_a_fleet_clusters_holds_only_a_readme:
        Case::workload()
            .remove(M).remove(M_DC).remove(OK).remove(W).remove(W_DC)
            .file("clusters/README.md", "# clusters go here\n")
            .in_fleet()
            .err_file(NotAFleet, "clusters")
            .refused();

    not_a_fleet_clusters_holds_only_suspend:
        Case::workload()
            .remove(M).remove(M_DC).remove(OK).remove(W).remove(W_DC)
            .file("clusters/suspend.yaml", "
                apiVersion: capstan.dev/v1alpha1
                kind: Suspend
                metadata: {name: fleet}
            ")
            .in_fleet()
            .err_file(NotAFleet, "clusters")
            .refused();

    not_a_fleet_on_disk:
        Case::workload()
            .remove(M).remove(M_DC).remove(OK).remove(W).remove(W_DC)
            .file("src/main.rs", "fn main() {}\n")
            .on_disk()
            .in_fleet()
            .err_file(NotAFleet, "clusters")
            .refused();

    // Found by fuzzing: a Cluster whose apiVersion has a typo in the group is another group's
    // object, so the directory has no EKS Anywhere Cluster — an error, not a silent skip.
    missing_cluster_typo_in_the_api_group:
        Case::workload()
            .set(W, "apiVersion:", "apiVersion: anywhere.eks.amazonaws.com-x/v1alpha1")
            .err_file(MissingCluster, W);

    // ─────────────── families: one change each, from the base fleet ───────────────
    forbidden_kind_cluster_role_binding:
        Case::workload()
            .file(W_EXTRA, "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_role_binding:
        Case::workload()
            .file(W_EXTRA, "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_service_account:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_pod:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: Pod\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_daemon_set:
        Case::workload()
            .file(W_EXTRA, "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_stateful_set:
        Case::workload()
            .file(W_EXTRA, "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_cron_job:
        Case::workload()
            .file(W_EXTRA, "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_custom_resource_definition:
        Case::workload()
            .file(W_EXTRA, "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_mutating_webhook_configuration:
        Case::workload()
            .file(W_EXTRA, "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_validating_webhook_configuration:
        Case::workload()
            .file(W_EXTRA, "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_a_p_i_service:
        Case::workload()
            .file(W_EXTRA, "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_persistent_volume:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_storage_class:
        Case::workload()
            .file(W_EXTRA, "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_priority_class:
        Case::workload()
            .file(W_EXTRA, "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_machine_deployment:
        Case::workload()
            .file(W_EXTRA, "apiVersion: cluster.x-k8s.io/v1beta2\nkind: MachineDeployment\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_docker_machine_template:
        Case::workload()
            .file(W_EXTRA, "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: DockerMachineTemplate\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_helm_release_proxy:
        Case::workload()
            .file(W_EXTRA, "apiVersion: addons.cluster.x-k8s.io/v1alpha1\nkind: HelmReleaseProxy\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_service:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: Service\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_network_policy:
        Case::workload()
            .file(W_EXTRA, "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    forbidden_kind_pod_disruption_budget:
        Case::workload()
            .file(W_EXTRA, "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: w-x}\n")
            .err(ForbiddenKind, W_EXTRA, "apiVersion");
    foreign_namespace_configmap_in_default:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w-x, namespace: default}\n")
            .err(ForeignNamespace, W_EXTRA, "namespace");
    foreign_namespace_configmap_in_kube_system:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w-x, namespace: kube-system}\n")
            .err(ForeignNamespace, W_EXTRA, "namespace");
    foreign_namespace_configmap_in_capstan_system:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w-x, namespace: capstan-system}\n")
            .err(ForeignNamespace, W_EXTRA, "namespace");
    foreign_namespace_configmap_in_kube_public:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w-x, namespace: kube-public}\n")
            .err(ForeignNamespace, W_EXTRA, "namespace");
    foreign_namespace_configmap_in_l_other:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w-x, namespace: l-other}\n")
            .err(ForeignNamespace, W_EXTRA, "namespace");
    foreign_namespace_secret_without_data:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: Secret\nmetadata: {name: w-x, namespace: default}\n")
            .err(ForeignNamespace, W_EXTRA, "namespace");
    foreign_namespace_helm_chart_proxy:
        Case::workload()
            .file(W_EXTRA, "apiVersion: addons.cluster.x-k8s.io/v1alpha1\nkind: HelmChartProxy\nmetadata: {name: w-x, namespace: default}\nspec: {chartName: x, repoURL: https://example.invalid, clusterSelector: {matchLabels: {cluster.x-k8s.io/cluster-name: w}}}\n")
            .err(ForeignNamespace, W_EXTRA, "namespace");
    // ─────── tenancy (one case per code; the hostile-tenant corpus, hostile_tenant.rs, has the
    // attacks: every class, and each tried against the real API server too) ───────
    reserved_namespace_kube_system:
        Case::workload()
            .after(W, "name: w", "|  namespace: kube-system")
            .err(ReservedNamespace, W, "namespace");
    name_outside_cluster_config_map:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: coredns}\n")
            .err(NameOutsideCluster, W_EXTRA, "name: coredns");
    foreign_selector_empty:
        Case::workload()
            .file(W_EXTRA, "apiVersion: addons.cluster.x-k8s.io/v1beta2\nkind: ClusterResourceSet\nmetadata: {name: w-crs}\nspec:\n  clusterSelector: {}\n  resources: [{kind: ConfigMap, name: w-crs}]\n")
            .err(ForeignSelector, W_EXTRA, "clusterSelector");
    foreign_reference_resource_set:
        Case::workload()
            .file(W_EXTRA, "apiVersion: addons.cluster.x-k8s.io/v1beta2\nkind: ClusterResourceSet\nmetadata: {name: w-crs}\nspec:\n  clusterSelector: {matchLabels: {cluster.x-k8s.io/cluster-name: w}}\n  resources: [{kind: Secret, name: mgmt-vsphere-credentials}]\n")
            .err(ForeignReference, W_EXTRA, "name: mgmt-vsphere");
    fillable_secret_service_account_token:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: Secret\nmetadata: {name: w-token}\ntype: kubernetes.io/service-account-token\n")
            .err(FillableSecret, W_EXTRA, "type: kubernetes.io/service-account-token");
    reserved_name_kubeconfig_of_a_longer_name:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: Secret\nmetadata: {name: w-next-kubeconfig}\n")
            .err(ReservedName, W_EXTRA, "name: w-next-kubeconfig");
    // A values template is read as Go's text/template reads it (layout/src/gotemplate): the
    // error or the call is located on its line of the literal block.
    foreign_reference_env_behind_a_quoted_right_delimiter:
        Case::workload()
            .file(W_EXTRA, &values_chart("tag: {{ \"}}\" }}{{ env \"AWS_SECRET_ACCESS_KEY\" }}"))
            .err(ForeignReference, W_EXTRA, "env \"AWS");
    template_function_random_password:
        Case::workload()
            .file(W_EXTRA, &values_chart("password: {{ randAlphaNum 16 }}"))
            .err(TemplateFunction, W_EXTRA, "randAlphaNum");
    template_syntax_a_function_caaph_does_not_define:
        Case::workload()
            .file(W_EXTRA, &values_chart("spec: {{ toYaml .Cluster.spec }}"))
            .err(TemplateSyntax, W_EXTRA, "toYaml");
    template_syntax_in_a_management_directory:
        Case::management()
            .file("clusters/mgmt/chart.yaml", &values_chart("name: {{ .Cluster.metadata.name | nosuch }}").replace("cluster-name: w", "cluster-name: mgmt"))
            .err(TemplateSyntax, "clusters/mgmt/chart.yaml", "nosuch");
    // A key the kind's schema does not have (layout/src/fields.rs): the API server would refuse
    // the object at apply, after what comes before it in apply order.
    unknown_field_in_a_helm_chart_proxy:
        Case::workload()
            .file(W_EXTRA, &values_chart("a: b").replace("  chartName: x\n", "  chartName: x\n  valuesTemplates: x\n"))
            .err(UnknownField, W_EXTRA, "valuesTemplates");
    unknown_field_in_a_config_map:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w-settings}\ndate: {a: b}\n")
            .err(UnknownField, W_EXTRA, "date:");
    unknown_field_in_a_secrets_metadata:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: w-creds\n  label: {a: b}\n")
            .err(UnknownField, W_EXTRA, "label:");
    unknown_field_in_a_resource_set_of_a_management_directory:
        Case::management()
            .file("clusters/mgmt/crs.yaml", "apiVersion: addons.cluster.x-k8s.io/v1beta2\nkind: ClusterResourceSet\nmetadata: {name: mgmt-crs}\nspec:\n  clusterSelector: {matchLabels: {cluster.x-k8s.io/cluster-name: mgmt}}\n  resources:\n  - {kind: ConfigMap, name: mgmt-crs}\n  - {kind: ConfigMap, name: mgmt-crs2, namespace: other}\n")
            .err(UnknownField, "clusters/mgmt/crs.yaml", "namespace: other");
    management_tombstone:
        Case::management()
            .file("clusters/mgmt/tombstone.yaml", "apiVersion: capstan.dev/v1alpha1\nkind: Tombstone\nreason: gone\n")
            .err(ManagementTombstone, "clusters/mgmt/tombstone.yaml", "apiVersion");
    secret_with_one_data_key:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: Secret\nmetadata: {name: w-x}\ndata: {a: Yg==}\n")
            .err_col(SecretWithData, W_EXTRA, "data:", 1);
    secret_with_string_data_password:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: Secret\nmetadata: {name: w-x}\nstringData: {password: hunter2}\n")
            .err_col(SecretWithData, W_EXTRA, "stringData:", 1);
    secret_with_data_and_string_data:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: Secret\nmetadata: {name: w-x}\ndata: {a: Yg==}\nstringData: {b: c}\n")
            .err_col(SecretWithData, W_EXTRA, "data:", 1);
    secret_with_ssh_key_data:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: Secret\nmetadata: {name: w-x}\ndata:\n  ssh-privatekey: LS0tLS1CRUdJTg==\n")
            .err_col(SecretWithData, W_EXTRA, "data:", 1);
    invalid_cidr_pods_0:
        Case::workload()
            .set(W, "pods:", "pods: {cidrBlocks: [\"10.0.0.0/33\"]}")
            .err(InvalidCidr, W, "\"10.0.0.0/33\"");
    invalid_cidr_services_0:
        Case::workload()
            .set(W, "services:", "services: {cidrBlocks: [\"10.0.0.0/33\"]}")
            .err(InvalidCidr, W, "\"10.0.0.0/33\"");
    invalid_cidr_pods_1:
        Case::workload()
            .set(W, "pods:", "pods: {cidrBlocks: [\"300.1.0.0/16\"]}")
            .err(InvalidCidr, W, "\"300.1.0.0/16\"");
    invalid_cidr_services_1:
        Case::workload()
            .set(W, "services:", "services: {cidrBlocks: [\"300.1.0.0/16\"]}")
            .err(InvalidCidr, W, "\"300.1.0.0/16\"");
    invalid_cidr_pods_2:
        Case::workload()
            .set(W, "pods:", "pods: {cidrBlocks: [\"10.1.0.0\"]}")
            .err(InvalidCidr, W, "\"10.1.0.0\"");
    invalid_cidr_services_2:
        Case::workload()
            .set(W, "services:", "services: {cidrBlocks: [\"10.1.0.0\"]}")
            .err(InvalidCidr, W, "\"10.1.0.0\"");
    invalid_cidr_pods_3:
        Case::workload()
            .set(W, "pods:", "pods: {cidrBlocks: [\"10.1.0.0/16/8\"]}")
            .err(InvalidCidr, W, "\"10.1.0.0/16/8\"");
    invalid_cidr_services_3:
        Case::workload()
            .set(W, "services:", "services: {cidrBlocks: [\"10.1.0.0/16/8\"]}")
            .err(InvalidCidr, W, "\"10.1.0.0/16/8\"");
    invalid_cidr_pods_4:
        Case::workload()
            .set(W, "pods:", "pods: {cidrBlocks: [\"10.1.0/16\"]}")
            .err(InvalidCidr, W, "\"10.1.0/16\"");
    invalid_cidr_services_4:
        Case::workload()
            .set(W, "services:", "services: {cidrBlocks: [\"10.1.0/16\"]}")
            .err(InvalidCidr, W, "\"10.1.0/16\"");
    invalid_cidr_pods_5:
        Case::workload()
            .set(W, "pods:", "pods: {cidrBlocks: [\"fd00::/200\"]}")
            .err(InvalidCidr, W, "\"fd00::/200\"");
    invalid_cidr_services_5:
        Case::workload()
            .set(W, "services:", "services: {cidrBlocks: [\"fd00::/200\"]}")
            .err(InvalidCidr, W, "\"fd00::/200\"");
    invalid_cidr_pods_6:
        Case::workload()
            .set(W, "pods:", "pods: {cidrBlocks: [\"10.1.0.0/-1\"]}")
            .err(InvalidCidr, W, "\"10.1.0.0/-1\"");
    invalid_cidr_services_6:
        Case::workload()
            .set(W, "services:", "services: {cidrBlocks: [\"10.1.0.0/-1\"]}")
            .err(InvalidCidr, W, "\"10.1.0.0/-1\"");
    invalid_cidr_pods_7:
        Case::workload()
            .set(W, "pods:", "pods: {cidrBlocks: [\"any\"]}")
            .err(InvalidCidr, W, "\"any\"");
    invalid_cidr_services_7:
        Case::workload()
            .set(W, "services:", "services: {cidrBlocks: [\"any\"]}")
            .err(InvalidCidr, W, "\"any\"");
    invalid_name_worker_group_0:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", "workerNodeGroupConfigurations: [{name: \"MD-0\", count: 1}]")
            .err(InvalidName, W, "name: \"MD-0");
    invalid_name_worker_group_1:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", "workerNodeGroupConfigurations: [{name: \"md_0\", count: 1}]")
            .err(InvalidName, W, "name: \"md_0");
    invalid_name_worker_group_2:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", "workerNodeGroupConfigurations: [{name: \"-md\", count: 1}]")
            .err(InvalidName, W, "name: \"-md");
    invalid_name_worker_group_3:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", "workerNodeGroupConfigurations: [{name: \"md-\", count: 1}]")
            .err(InvalidName, W, "name: \"md-");
    invalid_name_worker_group_4:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", "workerNodeGroupConfigurations: [{name: \"md.0\", count: 1}]")
            .err(InvalidName, W, "name: \"md.0");
    invalid_name_worker_group_5:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", "workerNodeGroupConfigurations: [{name: \"md 0\", count: 1}]")
            .err(InvalidName, W, "name: \"md 0");
    invalid_name_worker_group_6:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", "workerNodeGroupConfigurations: [{name: \"mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm\", count: 1}]")
            .err(InvalidName, W, "name: \"mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm");
    unknown_field_spec_zone_hint:
        Case::workload()
            .after(W, "managementCluster:", "zoneHint: a")
            .err(UnknownField, W, "zoneHint");
    unknown_field_spec_node_count:
        Case::workload()
            .after(W, "managementCluster:", "nodeCount: 3")
            .err(UnknownField, W, "nodeCount");
    unknown_field_spec_region:
        Case::workload()
            .after(W, "managementCluster:", "region: us-west-2")
            .err(UnknownField, W, "region");
    unknown_field_spec_replicas:
        Case::workload()
            .after(W, "managementCluster:", "replicas: 3")
            .err(UnknownField, W, "replicas");
    unknown_field_spec_cluster_name:
        Case::workload()
            .after(W, "managementCluster:", "clusterName: w")
            .err(UnknownField, W, "clusterName");
    unknown_field_spec_provider:
        Case::workload()
            .after(W, "managementCluster:", "provider: docker")
            .err(UnknownField, W, "provider");
    unknown_field_spec_machines:
        Case::workload()
            .after(W, "managementCluster:", "machines: 3")
            .err(UnknownField, W, "machines");
    unknown_field_spec_network_name:
        Case::workload()
            .after(W, "managementCluster:", "networkName: default")
            .err(UnknownField, W, "networkName");
    unknown_field_control_plane_replicaz:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", "controlPlaneConfiguration: {count: 1, replicaz: 1}")
            .err(UnknownField, W, "replicaz");
    unknown_field_worker_group_replicaz:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", "workerNodeGroupConfigurations: [{name: md-0, count: 1, replicaz: 1}]")
            .err(UnknownField, W, "replicaz");
    unknown_field_control_plane_size:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", "controlPlaneConfiguration: {count: 1, size: large}")
            .err(UnknownField, W, "size");
    unknown_field_worker_group_size:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", "workerNodeGroupConfigurations: [{name: md-0, count: 1, size: large}]")
            .err(UnknownField, W, "size");
    unknown_field_docker_datacenter_spec:
        Case::workload()
            .after(W_DC, "metadata:", "spec: {bogusRegistry: x}")
            .err(UnknownField, W_DC, "bogusRegistry");
    unknown_field_cluster_network:
        Case::workload()
            .after(W, "clusterNetwork:", "  nodes: {cidrBlocks: [10.0.0.0/8]}")
            .err(UnknownField, W, "cidrBlocks: [10.0.0.0/8]");
    unquoted_kubernetes_version_1_31:
        Case::workload()
            .set(W, "kubernetesVersion:", "kubernetesVersion: 1.31")
            .err(UnquotedVersion, W, "kubernetesVersion");
    unquoted_kubernetes_version_1_32:
        Case::workload()
            .set(W, "kubernetesVersion:", "kubernetesVersion: 1.32")
            .err(UnquotedVersion, W, "kubernetesVersion");
    unquoted_kubernetes_version_1_34:
        Case::workload()
            .set(W, "kubernetesVersion:", "kubernetesVersion: 1.34")
            .err(UnquotedVersion, W, "kubernetesVersion");
    unquoted_kubernetes_version_1_29:
        Case::workload()
            .set(W, "kubernetesVersion:", "kubernetesVersion: 1.29")
            .err(UnquotedVersion, W, "kubernetesVersion");
    invalid_type_family_0:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", "controlPlaneConfiguration: {count: true}")
            .err(InvalidType, W, "count: true");
    invalid_type_family_1:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", "controlPlaneConfiguration: {count: [1]}")
            .err(InvalidType, W, "count: [1]");
    invalid_type_family_2:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", "controlPlaneConfiguration: {count: 1.5}")
            .err(InvalidType, W, "count: 1.5");
    invalid_type_family_3:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", "workerNodeGroupConfigurations: [{name: md-0, count: \"1\"}]")
            .err(InvalidType, W, "count: \"1\"");
    invalid_type_family_4:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", "workerNodeGroupConfigurations: [{name: md-0, count: {n: 1}}]")
            .err(InvalidType, W, "count: {n");
    invalid_type_family_5:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", "workerNodeGroupConfigurations: {name: md-0, count: 1}")
            .err(InvalidType, W, "workerNodeGroupConfigurations");
    invalid_type_family_6:
        Case::workload()
            .set(W, "managementCluster:", "managementCluster: mgmt")
            .err(InvalidType, W, "managementCluster")
            .err(ManagementMismatch, W, "managementCluster");
    invalid_type_family_7:
        Case::workload()
            .set(W, "datacenterRef:", "datacenterRef: DockerDatacenterConfig")
            .err(InvalidType, W, "datacenterRef");
    invalid_type_family_8:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", "controlPlaneConfiguration: 3")
            .err(InvalidType, W, "controlPlaneConfiguration");
    invalid_type_family_9:
        Case::workload()
            .set(W, "clusterNetwork:", "clusterNetwork: []")
            .delete(W, "pods:")
            .delete(W, "services:")
            .err(InvalidType, W, "clusterNetwork");
    invalid_type_family_10:
        Case::workload()
            .set(W, "kubernetesVersion:", "kubernetesVersion: [\"1.33\"]")
            .err(InvalidType, W, "kubernetesVersion");
    invalid_type_family_11:
        Case::workload()
            .set(W, "pods:", "pods: {cidrBlocks: 172.17.0.0/16}")
            .err(InvalidType, W, "cidrBlocks: 172");
    invalid_value_family_0:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", "controlPlaneConfiguration: {count: 4}")
            .err(InvalidValue, W, "count: 4");
    invalid_value_family_1:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", "controlPlaneConfiguration: {count: 6}")
            .err(InvalidValue, W, "count: 6");
    invalid_value_family_2:
        Case::workload()
            .set(W, "controlPlaneConfiguration:", "controlPlaneConfiguration: {count: -1}")
            .err(InvalidValue, W, "count: -1");
    invalid_value_family_3:
        Case::workload()
            .set(W, "workerNodeGroupConfigurations:", "workerNodeGroupConfigurations: [{name: md-0, count: -5}]")
            .err(InvalidValue, W, "count: -5");
    invalid_value_family_4:
        Case::workload()
            .set(W, "kubernetesVersion:", "kubernetesVersion: \"latest\"")
            .err(InvalidValue, W, "kubernetesVersion");
    invalid_value_family_5:
        Case::workload()
            .set(W, "kubernetesVersion:", "kubernetesVersion: \"1.33.1\"")
            .err(InvalidValue, W, "kubernetesVersion");
    invalid_value_family_6:
        Case::workload()
            .set(W, "kubernetesVersion:", "kubernetesVersion: \"\"")
            .err(InvalidValue, W, "kubernetesVersion");
    unknown_version_eksa_v0_99_0:
        Case::workload()
            .after(W, "kubernetesVersion:", "eksaVersion: v0.99.0")
            .err(UnknownVersion, W, "eksaVersion");
    unknown_version_eksa_v0_1_0:
        Case::workload()
            .after(W, "kubernetesVersion:", "eksaVersion: v0.1.0")
            .err(UnknownVersion, W, "eksaVersion");
    unknown_version_eksa_v9_0_0:
        Case::workload()
            .after(W, "kubernetesVersion:", "eksaVersion: v9.0.0")
            .err(UnknownVersion, W, "eksaVersion");
    unknown_version_kubernetes_1_19:
        Case::workload()
            .set(W, "kubernetesVersion:", "kubernetesVersion: \"1.19\"")
            .err(UnknownVersion, W, "kubernetesVersion");
    unknown_version_kubernetes_1_40:
        Case::workload()
            .set(W, "kubernetesVersion:", "kubernetesVersion: \"1.40\"")
            .err(UnknownVersion, W, "kubernetesVersion");
    dangling_datacenter_ref_w_other:
        Case::workload()
            .set(W, "datacenterRef:", "datacenterRef: {kind: DockerDatacenterConfig, name: w-other}")
            .err(DanglingRef, W, "name: w-other}");
    dangling_datacenter_ref_ok:
        Case::workload()
            .set(W, "datacenterRef:", "datacenterRef: {kind: DockerDatacenterConfig, name: ok}")
            .err(DanglingRef, W, "name: ok}");
    missing_type_info_no_api_version:
        Case::workload()
            .file(W_EXTRA, "kind: ConfigMap\nmetadata: {name: w-x}\n")
            .err(MissingTypeInfo, W_EXTRA, "kind");
    missing_type_info_empty_name:
        Case::workload()
            .file(W_EXTRA, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: \"\"}\n")
            .err(MissingTypeInfo, W_EXTRA, "metadata");

}

// ─────────────────────────────── the corpus as a whole ───────────────────────────────

#[test]
fn corpus_has_at_least_250_cases() {
    let cases = corpus();
    let names: BTreeSet<&str> = cases.iter().map(|(n, _)| *n).collect();
    assert_eq!(names.len(), cases.len());
    assert!(cases.len() >= 250, "only {} cases", cases.len());
    println!("bad-input corpus: {} cases", cases.len());
    let multi = cases
        .iter()
        .filter(|(_, c)| {
            c.expectations()
                .iter()
                .filter(|e| e.severity == capstan_templates::diag::Severity::Error)
                .count()
                >= 3
        })
        .count();
    assert!(multi >= 3, "only {multi} cases with three or more errors");
}

#[test]
fn corpus_covers_every_code_that_input_can_trigger() {
    // io-error needs a file that disappears while it is read; render-failed is a template bug.
    // Neither can be produced by a repository's content.
    let untriggerable = [Io, RenderFailed];
    let covered: BTreeSet<Code> = corpus().iter().flat_map(|(_, c)| c.codes()).collect();
    let missing: Vec<&str> = Code::ALL
        .iter()
        .filter(|c| !covered.contains(c) && !untriggerable.contains(c))
        .map(|c| c.as_str())
        .collect();
    assert!(
        missing.is_empty(),
        "codes without a bad-input case: {missing:?}"
    );
}

#[test]
fn the_base_fleets_are_clean() {
    for (name, fleet) in [
        ("docker", base_fleet()),
        ("vsphere", base_vsphere_fleet()),
        ("nutanix", base_nutanix_fleet()),
    ] {
        let diags: Vec<String> = fleet
            .all_diagnostics()
            .iter()
            .map(|d| d.to_string())
            .collect();
        assert!(
            diags.is_empty(),
            "{name} base fleet has diagnostics: {diags:#?}"
        );
        let names: Vec<&str> = fleet.clusters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["mgmt", "ok", "w"], "{name}");
        assert!(
            fleet
                .clusters
                .iter()
                .all(|c| c.is_valid() && c.objects.is_some()),
            "{name}"
        );
    }
}

#[test]
fn the_base_fleet_reads_the_same_from_disk() {
    let case = Case::workload().on_disk();
    let fleet = capstan_layout::load(&case.tree());
    assert!(!fleet.has_errors());
    for c in &fleet.clusters {
        let base = base_fleet()
            .clusters
            .iter()
            .find(|b| b.dir == c.dir)
            .unwrap();
        assert_eq!(c.objects, base.objects, "{}", c.name);
    }
}

/// A `# <-` comment is checked: on a line no expected diagnostic points at, it fails the case;
/// on the line of one, the case passes.
#[test]
fn a_marker_that_marks_no_diagnostic_fails_its_case() {
    let broken = || {
        Case::workload()
            .set(
                W,
                "controlPlaneConfiguration:",
                "controlPlaneConfiguration: {count: 2}",
            )
            .err(InvalidValue, W, "count: 2")
    };
    run(
        "marker_on_the_diagnostic",
        &broken().set(
            W,
            "controlPlaneConfiguration:",
            "controlPlaneConfiguration: {count: 2}   # <-",
        ),
    );
    let dead = broken().set(
        W,
        "kubernetesVersion:",
        r#"kubernetesVersion: "1.33"   # <-"#,
    );
    let failure = std::panic::catch_unwind(|| run("marker_on_another_line", &dead))
        .expect_err("a dead marker must fail its case");
    let report = failure
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        report.contains(":6: `# <-` marks no expected diagnostic"),
        "{report}"
    );
}

// ──────────────────────────────── the real binary ────────────────────────────────

/// `capstan validate --output json` on a broken fleet written to disk: exit code 1, every problem
/// in the JSON with its file and line, the broken cluster invalid and the healthy ones valid.
#[test]
fn cli_validate_reports_broken_cluster_as_json() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path();
    let case_files = [
        (M, dedent(MGMT_CLUSTER)),
        (M_DC, dedent(MGMT_DATACENTER)),
        (OK, dedent(OK_CLUSTER)),
        (W_DC, dedent(W_DATACENTER)),
        (
            W,
            dedent(
                r#"
                apiVersion: anywhere.eks.amazonaws.com/v1alpha1
                kind: Cluster
                metadata: {name: w}
                spec:
                  kubernetesVersion: "1.33"
                  managementCluster: {name: mgmt}
                  datacenterRef: {kind: DockerDatacenterConfig, name: w}
                  controlPlaneConfiguration:
                    count: 2
                  workerNodeGroupConfigurations: [{name: md-0, count: 1}]
                  clusterNetwork:
                    pods: {cidrBlocks: [172.17.0.0/16]}
                    services: {cidrBlocks: [10.113.0.0/16]}
                "#,
            ),
        ),
    ];
    for (path, text) in &case_files {
        let p = repo.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let out = Command::new(capstan_harness::capstan_bin())
        .arg("validate")
        .arg(repo)
        .args(["--output", "json"])
        .output()
        .expect("running cargo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "exit code\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let report: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}\nstderr:\n{stderr}"));
    assert_eq!(report["valid"], false, "{report:#}");
    assert_eq!(report["errors"], 1, "{report:#}");
    let diags = report["diagnostics"].as_array().expect("diagnostics array");
    assert_eq!(diags.len(), 1, "{report:#}");
    let d = &diags[0];
    assert_eq!(d["code"], "invalid-value", "{d:#}");
    assert_eq!(d["severity"], "error", "{d:#}");
    assert_eq!(d["file"], W, "{d:#}");
    assert_eq!(d["line"], 9, "{d:#}");
    assert_eq!(d["column"], 5, "{d:#}");
    assert_eq!(d["cluster"], "w", "{d:#}");
    let clusters = report["clusters"].as_array().expect("clusters array");
    let valid = |name: &str| {
        clusters
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no cluster {name}: {report:#}"))["valid"]
            .clone()
    };
    assert_eq!(valid("w"), false);
    assert_eq!(valid("ok"), true);
    assert_eq!(valid("mgmt"), true);
    let w = clusters.iter().find(|c| c["name"] == "w").unwrap();
    assert!(
        w["objects"].is_null(),
        "broken cluster has no objects: {w:#}"
    );
    let ok = clusters.iter().find(|c| c["name"] == "ok").unwrap();
    assert!(ok["objects"].as_u64().is_some_and(|n| n > 0), "{ok:#}");
}
