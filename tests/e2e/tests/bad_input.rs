//! The bad-input corpus: one small broken fleet per case, each checked for the exact diagnostic
//! (code, severity, file, line, column), for who owns it, for the broken cluster not being
//! rendered, and for every other cluster of the fleet still validating and rendering as before
//! ("one broken cluster never hides the results of the others").
//!
//! Every case starts from the base fleet of `bad_input/support.rs` (a docker management cluster
//! `mgmt`, a healthy docker workload `ok`, and the workload under test `w`, or `mgmt` itself under
//! test) and overrides files with inline YAML. YAML is dedented: line 1 is the line after the
//! opening quote. Each line a diagnostic must point at carries a `# <-` comment, which the runner
//! checks, so the numbers in `.err(code, file, line, column)` can be read off the text.
//!
//! Each case is its own `#[test]` (so one failure names its case); `corpus_*` tests check the
//! corpus as a whole (size, coverage of every diagnostic code).

#[path = "bad_input/support.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use capstan_templates::diag::Code::{self, *};
use support::*;

const W2_DIR: &str = "clusters/mgmt/workload-clusters/w2";
const W2: &str = "clusters/mgmt/workload-clusters/w2/cluster.yaml";
const W_EXTRA: &str = "clusters/mgmt/workload-clusters/w/extra.yaml";
const MGMT2: &str = "clusters/mgmt2/cluster.yaml";
const FLEET: &str = "clusters/mgmt/fleet.yaml";

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

/// A ConfigMap whose data nests `depth` flow sequences on line 4.
fn deeply_nested(depth: usize) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: w-deep}}\ndata: {{x: {}{}}}   # <-\n",
        "[".repeat(depth),
        "]".repeat(depth)
    )
}

/// A ConfigMap with an anchor of `width` scalars (line 5) and, on line 6, a sequence of
/// `copies` aliases to it: `width * copies` nodes once expanded.
fn alias_bomb(width: usize, copies: usize) -> String {
    let mut s =
        String::from("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w-bomb}\ndata:\n  a: &a [");
    s.push_str(&vec!["x"; width].join(", "));
    s.push_str("]\n  b: [");
    s.push_str(&vec!["*a"; copies].join(", "));
    s.push_str("]   # <-\n");
    s
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
        Case::workload().remove(W_DC).file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              kubernetesVersion: "1.32"   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: DockerDatacenterConfig
            metadata: {name: w}
        "#)
        .err(YamlSyntax, W, 11, 3);

    yaml_duplicate_key_in_flow_mapping:
        Case::workload().remove(W_DC).file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1, name: md-1}]   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: DockerDatacenterConfig
            metadata: {name: w}
        "#)
        .err(YamlSyntax, W, 10, 58);

    yaml_mapping_value_in_plain_scalar:
        Case::workload().remove(W_DC).file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: name: mgmt   # <-
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(YamlSyntax, W, 7, 26);

    yaml_bad_indentation:
        Case::workload().remove(W_DC).file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
               services: {cidrBlocks: [10.113.0.0/16]}   # <-
        "#)
        .err(YamlSyntax, W, 13, 4);

    yaml_tab_indentation:
        Case::workload().remove(W_DC).file(W, "
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: \"1.33\"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration:
            \tcount: 1   # <-
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        ")
        .err_line(YamlSyntax, W, 10);

    yaml_unterminated_quote:
        Case::workload().remove(W_DC).file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33   # <-
              managementCluster: {name: mgmt}
        "#)
        .err_line(YamlSyntax, W, 6);

    yaml_unknown_anchor:
        Case::workload().remove(W_DC).file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: *mgmt}   # <-
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
        "#)
        .err(YamlSyntax, W, 7, 29);

    yaml_invalid_core_tag:
        Case::workload().remove(W_DC).file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: !!int three   # <-
        "#)
        .err_line(YamlSyntax, W, 10);

    yaml_error_in_second_document:
        Case::workload().remove(W_DC).file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
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
            metadata: {name: w2}   # <-
        "#)
        .err(YamlSyntax, W, 18, 1);

    // A YAML error in the Cluster's file must not also claim the directory has no Cluster: the
    // Cluster is there, it just does not parse (the DockerDatacenterConfig is in another file).
    yaml_error_in_cluster_file_does_not_cascade:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
              name: w   # <-
        "#)
        .err(YamlSyntax, W, 5, 3);

    // Nesting deeper than the parser allows is a syntax error, not a stack overflow.
    yaml_nesting_too_deep:
        Case::workload().file(W_EXTRA, &deeply_nested(400))
        .err_line(YamlSyntax, W_EXTRA, 4);

    // "Billion laughs": 300 KB of YAML whose aliases expand to a billion nodes. A workload
    // directory comes from a developer's pull request, so this must be a located error, not an
    // agent that runs out of memory (the case runs in a child process under a memory limit).
    yaml_alias_expansion_bomb:
        Case::workload().file(W_EXTRA, &alias_bomb(20_000, 50_000))
        .isolated()
        .err_line(YamlSyntax, W_EXTRA, 6);

    // Windows line endings do not shift positions.
    yaml_crlf_line_endings:
        Case::workload().bytes(W, dedent(r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1, replicas: 1}]   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#).replace('\n', "\r\n"))
        .err(UnknownField, W, 9, 58);

    // ─────────────────────────── unexpected-entry ──────────────────────────
    unexpected_file_directly_under_clusters:
        Case::workload().file("clusters/stray.yaml", "a: 1\n")
        .renders().in_fleet()
        .err_file(UnexpectedEntry, "clusters/stray.yaml");

    unexpected_file_directly_under_workload_clusters:
        Case::workload().file("clusters/mgmt/workload-clusters/w3.yaml", "a: 1\n")
        .renders().in_fleet()
        .err_file(UnexpectedEntry, "clusters/mgmt/workload-clusters/w3.yaml");

    // An entry inside a cluster's directory is that cluster's problem: the file may hold part of
    // its configuration, so the cluster must not be rendered without it.
    unexpected_non_yaml_file_in_workload_dir:
        Case::workload().file("clusters/mgmt/workload-clusters/w/values.json", "{}\n")
        .err_file(UnexpectedEntry, "clusters/mgmt/workload-clusters/w/values.json");

    unexpected_subdirectory_in_workload_dir:
        Case::workload().file("clusters/mgmt/workload-clusters/w/patches/cp.yaml", "a: 1\n")
        .err_file(UnexpectedEntry, "clusters/mgmt/workload-clusters/w/patches/cp.yaml");

    unexpected_subdirectory_in_management_dir:
        Case::management().file("clusters/mgmt/addons/cm.yaml", "a: 1\n")
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
        Case::workload().file(W, r#"
            apiVersion: v1
            kind: ConfigMap
            metadata: {name: w-notes}
            data: {owner: team-w}
        "#)
        .err_file(MissingCluster, W);

    missing_cluster_comment_only_file:
        Case::workload().remove(W_DC).file(W, r#"
            # TODO: describe cluster w
        "#)
        .err_file(MissingCluster, W);

    // A Cluster API Cluster is not an EKS Anywhere Cluster: the directory has no spec, and that
    // must be reported (otherwise the cluster silently disappears and validation passes).
    missing_cluster_capi_cluster_instead_of_eksa:
        Case::workload().file(W, r#"
            apiVersion: cluster.x-k8s.io/v1beta1
            kind: Cluster
            metadata: {name: w}
            spec: {}
        "#)
        .err_file(MissingCluster, W);

    // ────────────────────────── multiple-clusters ──────────────────────────
    multiple_clusters_in_one_file:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w-second   # <-
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.18.0.0/16]}
                services: {cidrBlocks: [10.114.0.0/16]}
        "#)
        .err(MultipleClusters, W, 17, 3);

    multiple_clusters_across_files:
        Case::workload().file("clusters/mgmt/workload-clusters/w/second.yaml", r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w   # <-
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
        .err(MultipleClusters, "clusters/mgmt/workload-clusters/w/second.yaml", 4, 3);

    // ────────────────────────── dir-name-mismatch ──────────────────────────
    dir_name_mismatch_workload:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w-renamed   # <-
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(DirNameMismatch, W, 4, 3);

    dir_name_mismatch_management:
        Case::management().file(M, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: management   # <-
            spec:
              kubernetesVersion: "1.33"
              eksaVersion: v0.26.1
              managementCluster: {name: management}
              datacenterRef: {kind: DockerDatacenterConfig, name: mgmt}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [192.168.0.0/16]}
                services: {cidrBlocks: [10.96.0.0/12]}
        "#)
        .err(DirNameMismatch, M, 4, 3);

    // ───────────────────────── management-mismatch ─────────────────────────
    management_mismatch_other_management_cluster:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt2}   # <-
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(ManagementMismatch, W, 7, 3);

    management_mismatch_workload_without_management_cluster:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:   # <-
              kubernetesVersion: "1.33"
              eksaVersion: v0.26.1
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(ManagementMismatch, W, 5, 1);

    // ─────────────────────────── not-self-managed ──────────────────────────
    not_self_managed_management_cluster:
        Case::management().file(M, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: mgmt
            spec:
              kubernetesVersion: "1.33"
              eksaVersion: v0.26.1
              managementCluster:
                name: other   # <-
              datacenterRef: {kind: DockerDatacenterConfig, name: mgmt}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [192.168.0.0/16]}
                services: {cidrBlocks: [10.96.0.0/12]}
        "#)
        .err(NotSelfManaged, M, 9, 5);

    // ───────────────────────────── invalid-name ────────────────────────────
    invalid_name_uppercase_cluster:
        Case::workload().file("clusters/mgmt/workload-clusters/Dev/cluster.yaml", r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: Dev   # <-
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
        .err(InvalidName, "clusters/mgmt/workload-clusters/Dev/cluster.yaml", 4, 3);

    invalid_name_longer_than_35_characters:
        Case::workload().file("clusters/mgmt/workload-clusters/this-cluster-name-is-much-too-long-x/cluster.yaml", r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: this-cluster-name-is-much-too-long-x   # <-
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
        .err(InvalidName, "clusters/mgmt/workload-clusters/this-cluster-name-is-much-too-long-x/cluster.yaml", 4, 3);

    invalid_name_worker_group:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations:
                - name: MD_0   # <-
                  count: 1
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidName, W, 11, 7);

    invalid_name_worker_group_machine_deployment_too_long:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations:
                - name: md-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx   # <-
                  count: 1
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidName, W, 11, 7);

    invalid_name_namespace:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
              namespace: Team_W   # <-
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidName, W, 5, 3);

    invalid_name_datacenter_config:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: W_dc}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .file(W_DC, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: DockerDatacenterConfig
            metadata:
              name: W_dc   # <-
        "#)
        .err(InvalidName, W_DC, 4, 3);

    // ───────────────────────────── duplicate-name ──────────────────────────
    duplicate_cluster_name_under_two_management_clusters:
        Case::workload()
        .file(MGMT2, MGMT2_CLUSTER)
        .file("clusters/mgmt2/workload-clusters/w/cluster.yaml", r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w   # <-
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
        .err(DuplicateName, "clusters/mgmt2/workload-clusters/w/cluster.yaml", 4, 3);

    duplicate_worker_group_name:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations:
                - name: md-0
                  count: 1
                - name: md-0   # <-
                  count: 2
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(DuplicateName, W, 13, 7);

    duplicate_machine_config_name:
        Case::vsphere().file(W_VS, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereDatacenterConfig
            metadata: {name: w}
            spec: {datacenter: dc1, network: VM Network, server: vcenter.example.internal, insecure: true}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-cp}
            spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-workers}
            spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata:
              name: w-workers   # <-
            spec: {datastore: ds2, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: redhat}
        "#)
        .err(DuplicateName, W_VS, 19, 3);

    // Two clusters of one management cluster rendering the same object: one would overwrite the
    // other's. The later cluster is reported, at the object's name.
    duplicate_rendered_object_across_clusters:
        Case::workload()
        .file("clusters/mgmt/workload-clusters/ok/extra.yaml", r#"
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: shared-settings
            data: {owner: ok}
        "#)
        .file(W_EXTRA, r#"
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: shared-settings   # <-
            data: {owner: w}
        "#)
        .err(DuplicateName, W_EXTRA, 4, 3);

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
              name: w   # <-
        "#)
        .broken(&[W2_DIR])
        .in_cluster(W2_DIR)
        .err(DuplicateName, W2, 17, 3);

    // ─────────────────────────── missing-type-info ─────────────────────────
    missing_type_info_no_kind:
        Case::workload().file(W_EXTRA, r#"
            apiVersion: v1   # <-
            metadata: {name: w-notes}
            data: {owner: team-w}
        "#)
        .err(MissingTypeInfo, W_EXTRA, 1, 1);

    missing_type_info_no_metadata_name:
        Case::workload().file(W_EXTRA, r#"
            apiVersion: v1
            kind: ConfigMap
            metadata:   # <-
              labels: {team: w}
            data: {owner: team-w}
        "#)
        .err(MissingTypeInfo, W_EXTRA, 3, 1);

    missing_type_info_document_is_a_list:
        Case::workload().file(W_EXTRA, r#"
            - apiVersion: v1   # <-
              kind: ConfigMap
              metadata: {name: w-notes}
        "#)
        .err(MissingTypeInfo, W_EXTRA, 1, 1);

    missing_type_info_in_second_document:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
            ---
            kind: ConfigMap   # <-
            metadata: {name: w-notes}
        "#)
        .err(MissingTypeInfo, W, 14, 1);

    // ─────────────────────────── unsupported-kind ──────────────────────────
    unsupported_kind_tinkerbell_datacenter:
        Case::workload().file(W_EXTRA, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: TinkerbellDatacenterConfig   # <-
            metadata: {name: w}
            spec: {tinkerbellIP: 10.0.0.5}
        "#)
        .err(UnsupportedKind, W_EXTRA, 2, 1);

    unsupported_kind_flux_config:
        Case::workload().file(W_EXTRA, r#"
            apiVersion: v1
            kind: ConfigMap
            metadata: {name: w-flux-settings}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: FluxConfig   # <-
            metadata: {name: w-flux}
            spec: {branch: main}
        "#)
        .err(UnsupportedKind, W_EXTRA, 6, 1);

    unsupported_kind_unknown_eksa_kind:
        Case::workload().file(W_EXTRA, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: DockerMachineConfig   # <-
            metadata: {name: w-machines}
            spec: {}
        "#)
        .err(UnsupportedKind, W_EXTRA, 2, 1);

    // ───────────────────────────── unknown-field ───────────────────────────
    unknown_field_top_level:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            labels: {team: w}   # <-
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(UnknownField, W, 4, 1);

    unknown_field_in_spec:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              eksaVerison: v0.26.1   # <-
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(UnknownField, W, 6, 3);

    unknown_field_in_worker_group:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations:
                - name: md-0
                  count: 1
                  autoscaling: {minCount: 1, maxCount: 3}   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(UnknownField, W, 12, 7);

    unknown_field_in_metadata:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
              lables: {team: w}   # <-
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(UnknownField, W, 5, 3);

    unknown_field_in_machine_config:
        Case::vsphere().file(W_VS, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereDatacenterConfig
            metadata: {name: w}
            spec: {datacenter: dc1, network: VM Network, server: vcenter.example.internal, insecure: true}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-cp}
            spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-workers}
            spec:
              datastore: ds1
              resourcePool: /dc1/host/c1/Resources
              template: ubuntu-2204-kube-v1.33
              osFamily: ubuntu
              numCPU: 8   # <-
        "#)
        .err(UnknownField, W_VS, 19, 3);

    // The DockerDatacenterConfig is in the directory, it just has a typo: only the typo is
    // reported, not also a dangling datacenterRef.
    unknown_field_in_datacenter_config_does_not_cascade:
        Case::workload().file(W_DC, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: DockerDatacenterConfig
            metadata: {name: w}
            spec:
              network: kind   # <-
        "#)
        .err(UnknownField, W_DC, 5, 3);

    unknown_fields_at_three_levels_reported_together:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
              lables: {team: w}   # <-
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
              machineHealthCheck: {nodeStartupTimeout: 10m, timeout: 5m}   # <-
            status: {phase: Ready}
            annotations: {note: x}   # <-
        "#)
        .err(UnknownField, W, 5, 3)
        .err(UnknownField, W, 15, 49)
        .err(UnknownField, W, 17, 1);

    // Two typos in different parts of one spec: both are reported in one run, so the user does
    // not fix one, re-run and only then learn about the other.
    unknown_fields_two_in_one_spec_reported_together:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 1
                replicas: 1   # <-
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
                cniConfig:
                  calico: {}   # <-
        "#)
        .err(UnknownField, W, 10, 5)
        .err(UnknownField, W, 16, 7);

    // A warning, not an error: EKS-A's defaulter raises etcd machines to 8192 MiB, and so does capstan.
    invalid_value_warning_small_etcd_machine:
        Case::vsphere()
        .file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: VSphereDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 1
                endpoint: {host: 10.20.0.10}
                machineGroupRef: {kind: VSphereMachineConfig, name: w-cp}
              externalEtcdConfiguration:
                count: 3
                machineGroupRef: {kind: VSphereMachineConfig, name: w-workers}
              workerNodeGroupConfigurations:
                - name: md-0
                  count: 1
                  machineGroupRef: {kind: VSphereMachineConfig, name: w-cp}
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .file(W_VS, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereDatacenterConfig
            metadata: {name: w}
            spec: {datacenter: dc1, network: VM Network, server: vcenter.example.internal, insecure: true}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-cp}
            spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-workers}
            spec:
              datastore: ds1
              resourcePool: /dc1/host/c1/Resources
              template: ubuntu-2204-kube-v1.33
              osFamily: ubuntu
              memoryMiB: 4096   # <-
        "#)
        .renders()
        .warn(InvalidValue, W_VS, 19, 3);

    // ───────────────────────────── fleet config ────────────────────────────
    // clusters/<mgmt>/fleet.yaml: its problems are the management cluster's, and every cluster of
    // the fleet is held with it (their release data comes from it).
    unknown_field_fleet_config:
        Case::workload().file(FLEET, r#"
            apiVersion: capstan.dev/v1alpha1
            kind: FleetConfig
            spec:
              release:
                manifest: release/manifest.yaml
                sha: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08   # <-
        "#)
        .broken(&[MGMT_DIR, OK_DIR, W_DIR])
        .in_cluster(MGMT_DIR)
        .err(UnknownField, FLEET, 6, 5)
        .in_cluster(OK_DIR)
        .err(ReleaseUnavailable, OK, 5, 1)
        .in_cluster(W_DIR)
        .err(ReleaseUnavailable, W, 5, 1);

    invalid_value_fleet_config_kind:
        Case::workload().file(FLEET, r#"
            apiVersion: capstan.dev/v1alpha1
            kind: Fleet   # <-
            spec: {}
        "#)
        .broken(&[MGMT_DIR, OK_DIR, W_DIR])
        .in_cluster(MGMT_DIR)
        .err(InvalidValue, FLEET, 2, 1)
        .in_cluster(OK_DIR)
        .err(ReleaseUnavailable, OK, 5, 1)
        .in_cluster(W_DIR)
        .err(ReleaseUnavailable, W, 5, 1);

    missing_field_unpinned_https_release_manifest:
        Case::workload().file(FLEET, r#"
            apiVersion: capstan.dev/v1alpha1
            kind: FleetConfig
            spec:
              release:   # <-
                manifest: https://anywhere-assets.eks.amazonaws.com/releases/eks-a/manifest.yaml
        "#)
        .broken(&[MGMT_DIR, OK_DIR, W_DIR])
        .in_cluster(MGMT_DIR)
        .err(MissingField, FLEET, 4, 3)
        .in_cluster(OK_DIR)
        .err(ReleaseUnavailable, OK, 5, 1)
        .in_cluster(W_DIR)
        .err(ReleaseUnavailable, W, 5, 1);

    release_unavailable_manifest_not_in_repository:
        Case::workload().file(FLEET, r#"
            apiVersion: capstan.dev/v1alpha1
            kind: FleetConfig
            spec:
              release:   # <-
                manifest: release/eks-a/manifest.yaml
        "#)
        .broken(&[MGMT_DIR, OK_DIR, W_DIR])
        .in_cluster(MGMT_DIR)
        .err(ReleaseUnavailable, FLEET, 4, 3)
        .in_cluster(OK_DIR)
        .err(ReleaseUnavailable, FLEET, 4, 3)
        .in_cluster(W_DIR)
        .err(ReleaseUnavailable, FLEET, 4, 3);

    checksum_mismatch_release_manifest:
        Case::workload()
        .file("release/manifest.yaml", "apiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: Release\n")
        .file(FLEET, r#"
            apiVersion: capstan.dev/v1alpha1
            kind: FleetConfig
            spec:
              release:   # <-
                manifest: release/manifest.yaml
                sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
        "#)
        .broken(&[MGMT_DIR, OK_DIR, W_DIR])
        .in_cluster(MGMT_DIR)
        .err(ChecksumMismatch, FLEET, 4, 3)
        .in_cluster(OK_DIR)
        .err(ChecksumMismatch, FLEET, 4, 3)
        .in_cluster(W_DIR)
        .err(ChecksumMismatch, FLEET, 4, 3);

    // ─────────────────────────── unsupported-field ─────────────────────────
    unsupported_field_gitops_ref:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              gitOpsRef: {kind: FluxConfig, name: w-flux}   # <-
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(UnsupportedField, W, 6, 3);

    missing_field_proxy_https_proxy:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              proxyConfiguration:   # <-
                httpProxy: http://10.0.0.2:3128
                noProxy: [10.0.0.0/8]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(MissingField, W, 10, 3);

    invalid_value_proxy_without_port:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              proxyConfiguration:
                httpProxy: http://10.0.0.2:3128
                httpsProxy: http://proxy.internal   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 12, 5);

    invalid_value_registry_mirror_with_credentials:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
              registryMirrorConfiguration:
                endpoint: harbor.internal
                authenticate: true   # <-
        "#)
        .err(InvalidValue, W, 15, 5);

    invalid_type_registry_mirror_port_number:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
              registryMirrorConfiguration:
                endpoint: harbor.internal
                port: 5000   # <-
        "#)
        .err(InvalidType, W, 15, 5);

    invalid_value_control_plane_machine_health_check_duration:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 1
                machineHealthCheck:
                  maxUnhealthy: 1
                  nodeStartupTimeout: 10min   # <-
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 12, 7);

    invalid_value_worker_kubelet_configuration_provider_id:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations:
                - name: md-0
                  count: 1
                - name: md-1
                  count: 1
                  kubeletConfiguration:
                    maxPods: 50
                    providerID: vsphere://x   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 16, 9);

    invalid_type_kubelet_configuration_not_a_mapping:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 1
                kubeletConfiguration: maxPods=50   # <-
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidType, W, 10, 5);

    invalid_value_cluster_network_cni:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                cni: weave   # <-
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 11, 5);

    deprecated_field_cluster_network_cni_and_cert_sans_spelling:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 1
                certSANs: [api.w.example.com]   # <-
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                cni: cilium   # <-
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .renders()
        .warn(DeprecatedField, W, 10, 5)
        .warn(DeprecatedField, W, 13, 5);

    invalid_value_kindnetd:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                cniConfig:
                  kindnetd: {}   # <-
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 12, 7);

    invalid_value_vsphere_cert_bundles_on_ubuntu:
        Case::vsphere().file(W_VS, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereDatacenterConfig
            metadata: {name: w}
            spec: {datacenter: dc1, network: VM Network, server: vcenter.example.internal, insecure: true}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-cp}
            spec:
              datastore: ds1
              resourcePool: /dc1/host/c1/Resources
              template: ubuntu-2204-kube-v1.33
              osFamily: ubuntu
              hostOSConfiguration:
                ntpConfiguration: {servers: [time.internal]}
                certBundles: [{name: corp, data: x}]   # <-
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-workers}
            spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}
        "#)
        .err(InvalidValue, W_VS, 16, 5);

    missing_field_vsphere_failure_domain:
        Case::vsphere().file(W_VS, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereDatacenterConfig
            metadata: {name: w}
            spec:
              datacenter: dc1
              network: VM Network
              server: vcenter.example.internal
              insecure: true
              failureDomains:
                - name: fd-1   # <-
                  computeCluster: c1
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-cp}
            spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-workers}
            spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}
        "#)
        .err(MissingField, W_VS, 10, 7);

    unsupported_field_in_place_rollout:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 1
                upgradeRolloutStrategy:
                  type: InPlace   # <-
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(UnsupportedField, W, 11, 7);

    unsupported_fields_many_reported_together:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              packages: {disable: true}   # <-
              licenseToken: abc   # <-
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 1
                skipAdmissionForSystemResources: true   # <-
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
              gitOpsRef: {kind: FluxConfig, name: w}   # <-
        "#)
        .err(UnsupportedField, W, 7, 3)
        .err(UnsupportedField, W, 8, 3)
        .err(UnsupportedField, W, 12, 5)
        .err(UnsupportedField, W, 17, 3);

    invalid_value_etcd_encryption_on_docker:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
              etcdEncryption:   # <-
                - providers: [{kms: {name: kms, socketListenAddress: "unix:///var/run/kmsplugin/socket.sock"}}]
                  resources: [secrets]
        "#)
        .err(InvalidValue, W, 13, 3);

    invalid_value_control_plane_max_surge:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 3
                upgradeRolloutStrategy:
                  type: RollingUpdate
                  rollingUpdate: {maxSurge: 2}   # <-
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 12, 23);

    unsupported_kind_aws_iam_identity_provider:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              identityProviderRefs:
                - {kind: AWSIamConfig, name: w-iam}   # <-
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(UnsupportedField, W, 9, 8);

    dangling_ref_oidc_config:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              identityProviderRefs:
                - kind: OIDCConfig
                  name: w-oidc   # <-
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(DanglingRef, W, 10, 7);

    invalid_value_oidc_flag_twice:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              identityProviderRefs: [{kind: OIDCConfig, name: w-oidc}]
              controlPlaneConfiguration:
                count: 1
                apiServerExtraArgs:
                  oidc-issuer-url: https://other.example.com   # <-
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: OIDCConfig
            metadata: {name: w-oidc}
            spec: {clientId: k8s, issuerUrl: "https://login.example.com"}
        "#)
        .err(InvalidValue, W, 12, 7);

    // ───────────────────────────── missing-field ───────────────────────────
    missing_field_vsphere_endpoint:
        Case::vsphere().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: VSphereDatacenterConfig, name: w}
              controlPlaneConfiguration:   # <-
                count: 1
                machineGroupRef: {kind: VSphereMachineConfig, name: w-cp}
              workerNodeGroupConfigurations:
                - name: md-0
                  count: 1
                  machineGroupRef: {kind: VSphereMachineConfig, name: w-workers}
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(MissingField, W, 9, 3);

    missing_field_vsphere_worker_machine_group_ref:
        Case::vsphere().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: VSphereDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 1
                endpoint: {host: 10.20.0.10}
                machineGroupRef: {kind: VSphereMachineConfig, name: w-cp}
              workerNodeGroupConfigurations:
                - name: md-0   # <-
                  count: 1
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(MissingField, W, 14, 7)
        // w-workers is then referenced by nothing.
        .warn(UnusedObject, W_VS, 17, 12);

    invalid_value_tainted_control_plane_without_workers:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 1
                taints:   # <-
                  - {key: dedicated, value: cp, effect: NoSchedule}
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 10, 5);

    invalid_value_node_cidr_mask_too_short:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: []
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
                nodes: {cidrMaskSize: 16}   # <-
        "#)
        .err(InvalidValue, W, 13, 13);

    missing_field_no_spec:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1   # <-
            kind: Cluster
            metadata: {name: w}
        "#)
        .err(MissingField, W, 1, 1);

    missing_field_no_spec_in_second_document:
        Case::workload().remove(W_DC).file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: DockerDatacenterConfig
            metadata: {name: w}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1   # <-
            kind: Cluster
            metadata: {name: w}
        "#)
        .err(MissingField, W, 5, 1);

    missing_field_kubernetes_version:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:   # <-
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(MissingField, W, 4, 1);

    missing_field_second_worker_group_name:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations:
                - count: 1
                - count: 2   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(MissingField, W, 11, 7);

    missing_field_direct_routing_without_native_cidr:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
                cniConfig:
                  cilium:
                    routingMode: direct   # <-
        "#)
        .err(MissingField, W, 15, 9);

    missing_field_vsphere_machine_template:
        Case::vsphere().file(W_VS, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereDatacenterConfig
            metadata: {name: w}
            spec: {datacenter: dc1, network: VM Network, server: vcenter.example.internal, insecure: true}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-cp}
            spec:   # <-
              datastore: ds1
              resourcePool: /dc1/host/c1/Resources
              osFamily: ubuntu
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-workers}
            spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}
        "#)
        .err(MissingField, W_VS, 9, 1);

    // The VSphereDatacenterConfig is there but lacks `server`: that is the one problem (no
    // dangling datacenterRef, no "docker provider ignores machineGroupRef", no unused machines).
    missing_field_vsphere_datacenter_server_does_not_cascade:
        Case::vsphere().file(W_VS, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereDatacenterConfig
            metadata: {name: w}
            spec: {datacenter: dc1, network: VM Network, insecure: true}   # <-
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-cp}
            spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-workers}
            spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}
        "#)
        .err(MissingField, W_VS, 4, 1);

    // ───────────────────────────── invalid-type ────────────────────────────
    invalid_type_control_plane_count_string:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: "three"   # <-
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidType, W, 9, 5);

    invalid_type_worker_count_word:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations:
                - name: md-0
                  count: three   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidType, W, 11, 7);

    invalid_type_labels_as_list:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations:
                - name: md-0
                  count: 1
                  labels:   # <-
                    - tier=general
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidType, W, 12, 7);

    invalid_type_cidr_blocks_not_a_list:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods:
                  cidrBlocks: 172.17.0.0/16   # <-
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidType, W, 12, 7);

    invalid_type_cilium_helm_values_list:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
                cniConfig:
                  cilium:
                    helmValues: [hubble]   # <-
        "#)
        .err(InvalidType, W, 15, 9);

    // ──────────────────────────── invalid-value ────────────────────────────
    invalid_value_even_control_plane_count_with_stacked_etcd:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 2   # <-
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 9, 5);

    invalid_value_docker_backend:
        Case::workload().file(W_DC, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: DockerDatacenterConfig
            metadata:
              name: w
              annotations:
                capstan.dev/docker-backend: kind   # <-
        "#)
        .err(InvalidValue, W_DC, 6, 5);

    invalid_value_control_plane_count_zero:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 0}   # <-
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 8, 31);

    // A count that does not fit the replica field must not wrap around (4294967297 as u32 is 1).
    invalid_value_control_plane_count_too_large:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 4294967297   # <-
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 9, 5);

    invalid_value_worker_count_too_large:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations:
                - name: md-0
                  count: 4294967296   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 11, 7);

    invalid_value_even_external_etcd_count:
        Case::vsphere().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: VSphereDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 2
                endpoint: {host: 10.20.0.10}
                machineGroupRef: {kind: VSphereMachineConfig, name: w-cp}
              externalEtcdConfiguration:
                count: 2   # <-
                machineGroupRef: {kind: VSphereMachineConfig, name: w-cp}
              workerNodeGroupConfigurations:
                - name: md-0
                  count: 1
                  machineGroupRef: {kind: VSphereMachineConfig, name: w-workers}
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 14, 5);

    invalid_value_taint_effect:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations:
                - name: md-0
                  count: 1
                  taints:
                    - key: dedicated
                      value: gpu
                      effect: NoScheduling   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 15, 11);

    invalid_value_autoscaling_min_above_max:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations:
                - name: md-0
                  autoscalingConfiguration:   # <-
                    minCount: 5
                    maxCount: 2
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 11, 7);

    invalid_value_negative_worker_count:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations:
                - name: md-0
                  count: -1   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 11, 7);

    invalid_value_kubernetes_version_format:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: v1.33   # <-
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 5, 3);

    invalid_value_eksa_version_format:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              eksaVersion: 0.26.1   # <-
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 6, 3);

    invalid_value_datacenter_ref_kind:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef:
                kind: TinkerbellDatacenterConfig   # <-
                name: w
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 8, 5);

    invalid_value_unsupported_api_version:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha2   # <-
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 1, 1);

    invalid_value_os_family_bottlerocket:
        Case::vsphere().file(W_VS, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereDatacenterConfig
            metadata: {name: w}
            spec: {datacenter: dc1, network: VM Network, server: vcenter.example.internal, insecure: true}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-cp}
            spec:
              datastore: ds1
              resourcePool: /dc1/host/c1/Resources
              template: bottlerocket-kube-v1.33
              osFamily: bottlerocket   # <-
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-workers}
            spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}
        "#)
        .err(InvalidValue, W_VS, 13, 3);

    invalid_value_os_family_defaults_to_bottlerocket:
        Case::vsphere().file(W_VS, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereDatacenterConfig
            metadata: {name: w}
            spec: {datacenter: dc1, network: VM Network, server: vcenter.example.internal, insecure: true}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-cp}
            spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-workers}
            spec:   # <-
              datastore: ds1
              resourcePool: /dc1/host/c1/Resources
              template: ubuntu-2204-kube-v1.33
        "#)
        .err(InvalidValue, W_VS, 14, 1);

    invalid_value_os_family_unknown:
        Case::vsphere().file(W_VS, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereDatacenterConfig
            metadata: {name: w}
            spec: {datacenter: dc1, network: VM Network, server: vcenter.example.internal, insecure: true}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-cp}
            spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-workers}
            spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: win-2022, osFamily: windows}   # <-
        "#)
        .err(InvalidValue, W_VS, 14, 82);

    invalid_value_memory_too_small:
        Case::vsphere().file(W_VS, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereDatacenterConfig
            metadata: {name: w}
            spec: {datacenter: dc1, network: VM Network, server: vcenter.example.internal, insecure: true}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-cp}
            spec:
              datastore: ds1
              resourcePool: /dc1/host/c1/Resources
              template: ubuntu-2204-kube-v1.33
              osFamily: ubuntu
              memoryMiB: 1024   # <-
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-workers}
            spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}
        "#)
        .err(InvalidValue, W_VS, 14, 3);

    invalid_value_clone_mode:
        Case::vsphere().file(W_VS, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereDatacenterConfig
            metadata: {name: w}
            spec: {datacenter: dc1, network: VM Network, server: vcenter.example.internal, insecure: true}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-cp}
            spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata: {name: w-workers}
            spec:
              datastore: ds1
              resourcePool: /dc1/host/c1/Resources
              template: ubuntu-2204-kube-v1.33
              osFamily: ubuntu
              cloneMode: instantClone   # <-
        "#)
        .err(InvalidValue, W_VS, 19, 3);

    invalid_value_machine_group_ref_kind:
        Case::vsphere().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: VSphereDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 1
                endpoint: {host: 10.20.0.10}
                machineGroupRef:
                  kind: DockerMachineConfig   # <-
                  name: w-cp
              workerNodeGroupConfigurations:
                - name: md-0
                  count: 1
                  machineGroupRef: {kind: VSphereMachineConfig, name: w-workers}
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 13, 7);

    invalid_value_machine_health_check_duration:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
              machineHealthCheck:
                nodeStartupTimeout: 10 minutes   # <-
        "#)
        .err(InvalidValue, W, 14, 5);

    invalid_value_machine_health_check_max_unhealthy:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
              machineHealthCheck:
                maxUnhealthy: forty percent   # <-
        "#)
        .err(InvalidValue, W, 14, 5);

    invalid_value_cilium_policy_enforcement_mode:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
                cniConfig:
                  cilium:
                    policyEnforcementMode: strict   # <-
        "#)
        .err(InvalidValue, W, 15, 9);

    invalid_value_cilium_routing_mode:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
                cniConfig:
                  cilium:
                    routingMode: native   # <-
        "#)
        .err(InvalidValue, W, 15, 9);

    invalid_value_control_plane_max_unavailable:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 1
                upgradeRolloutStrategy:
                  rollingUpdate:
                    maxUnavailable: 1   # <-
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 12, 9);

    invalid_value_rollout_type:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations:
                - name: md-0
                  count: 1
                  upgradeRolloutStrategy:
                    type: Recreate   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 13, 9);

    invalid_value_node_label:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 1
                labels:
                  tier: "front end"   # <-
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidValue, W, 11, 7);

    invalid_value_management_workers_all_tainted:
        Case::management().file(M, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: mgmt
            spec:
              kubernetesVersion: "1.33"
              eksaVersion: v0.26.1
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: mgmt}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations:   # <-
                - name: md-0
                  count: 1
                  taints: [{key: dedicated, effect: NoSchedule}]
              clusterNetwork:
                pods: {cidrBlocks: [192.168.0.0/16]}
                services: {cidrBlocks: [10.96.0.0/12]}
        "#)
        .err(InvalidValue, M, 11, 3);

    // ──────────────────────────── unquoted-version ─────────────────────────
    unquoted_kubernetes_version:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: 1.30   # <-
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(UnquotedVersion, W, 5, 3);

    unquoted_worker_kubernetes_version:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations:
                - name: md-0
                  count: 1
                  kubernetesVersion: 1.32   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(UnquotedVersion, W, 12, 7);

    // ────────────────────────────── dangling-ref ───────────────────────────
    dangling_datacenter_ref:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef:
                kind: DockerDatacenterConfig
                name: w-dc   # <-
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(DanglingRef, W, 9, 5);

    dangling_machine_group_ref:
        Case::vsphere().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: VSphereDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 1
                endpoint: {host: 10.20.0.10}
                machineGroupRef: {kind: VSphereMachineConfig, name: w-cp}
              workerNodeGroupConfigurations:
                - name: md-0
                  count: 1
                  machineGroupRef:
                    kind: VSphereMachineConfig
                    name: w-worker   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(DanglingRef, W, 18, 9)
        // w-workers is then referenced by nothing.
        .warn(UnusedObject, W_VS, 17, 12);

    // A vSphere cluster whose VSphereDatacenterConfig name is mistyped is still a vSphere cluster:
    // its machineGroupRefs are not "ignored by the docker provider" and its machines are used.
    dangling_vsphere_datacenter_ref_does_not_cascade:
        Case::vsphere().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef:
                kind: VSphereDatacenterConfig
                name: w-dc   # <-
              controlPlaneConfiguration:
                count: 1
                endpoint: {host: 10.20.0.10}
                machineGroupRef: {kind: VSphereMachineConfig, name: w-cp}
              workerNodeGroupConfigurations:
                - name: md-0
                  count: 1
                  machineGroupRef: {kind: VSphereMachineConfig, name: w-workers}
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(DanglingRef, W, 10, 5);

    // ───────────────────────────── unknown-version ─────────────────────────
    unknown_version_eksa_version:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              eksaVersion: v0.99.0   # <-
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(UnknownVersion, W, 6, 3);

    unknown_version_kubernetes_not_in_bundle:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.20"   # <-
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(UnknownVersion, W, 5, 3);

    unknown_version_worker_kubernetes_not_in_bundle:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.30"
              eksaVersion: v0.25.2
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations:
                - name: md-0
                  count: 1
                  kubernetesVersion: "1.28"   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(UnknownVersion, W, 13, 7);

    unknown_version_bundles_ref:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              bundlesRef:   # <-
                apiVersion: anywhere.eks.amazonaws.com/v1alpha1
                name: bundles-1   # <-
                namespace: eksa-system
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .warn(DeprecatedField, W, 6, 3)
        .err(UnknownVersion, W, 8, 5);

    // A workload that inherits its version from a broken management cluster cannot resolve one;
    // the sibling with an explicit eksaVersion is unaffected.
    unknown_version_inherited_from_broken_management:
        Case::workload().file(M, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: mgmt
            spec:
              kubernetesVersion: "1.33"
              eksaVersion: v0.26.1
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: mgmt}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [192.168.0.0/33]}   # <-
                services: {cidrBlocks: [10.96.0.0/12]}
        "#)
        .broken(&[MGMT_DIR, W_DIR])
        .in_cluster(MGMT_DIR)
        .err(InvalidCidr, M, 13, 25)
        .in_cluster(W_DIR)
        .err(UnknownVersion, W, 5, 1);

    // ──────────────────────────── version-conflict ─────────────────────────
    version_conflict_eksa_version_and_bundles_ref:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              eksaVersion: v0.26.1
              bundlesRef:   # <-
                apiVersion: anywhere.eks.amazonaws.com/v1alpha1
                name: bundles-104
                namespace: eksa-system
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(VersionConflict, W, 7, 3);

    // ────────────────────────────── version-skew ───────────────────────────
    version_skew_worker_three_minors_behind:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations:
                - name: md-0
                  count: 1
                  kubernetesVersion: "1.30"   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(VersionSkew, W, 12, 7);

    version_skew_worker_ahead_of_control_plane:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.32"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations:
                - name: md-0
                  count: 1
                - name: md-1
                  count: 1
                  kubernetesVersion: "1.33"   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(VersionSkew, W, 14, 7);

    version_skew_workload_newer_than_management:
        Case::workload()
        .file(MGMT2, MGMT2_CLUSTER)
        .file("clusters/mgmt2/workload-clusters/w3/cluster.yaml", r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w3}
            spec:
              kubernetesVersion: "1.33"
              eksaVersion: v0.26.1   # <-
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
        .err(VersionSkew, "clusters/mgmt2/workload-clusters/w3/cluster.yaml", 6, 3);

    version_skew_workload_three_minors_behind_management:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.32"
              eksaVersion: v0.23.5   # <-
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(VersionSkew, W, 6, 3);

    // With a (deprecated) bundlesRef the version comes from bundlesRef, so that is where the
    // skew is.
    version_skew_bundles_ref_lags_management:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.32"
              bundlesRef:   # <-
                apiVersion: anywhere.eks.amazonaws.com/v1alpha1
                name: bundles-85
                namespace: eksa-system
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .warn(DeprecatedField, W, 6, 3)
        .err(VersionSkew, W, 6, 3);

    // ────────────────────────────── invalid-cidr ───────────────────────────
    invalid_cidr_not_a_cidr:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods:
                  cidrBlocks:
                    - pod-network   # <-
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidCidr, W, 13, 11);

    invalid_cidr_host_bits_set:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.5.0/16]}   # <-
        "#)
        .err(InvalidCidr, W, 12, 29);

    invalid_cidr_two_blocks:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods:
                  cidrBlocks: [172.17.0.0/16, 172.18.0.0/16]   # <-
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(InvalidCidr, W, 12, 7);

    invalid_cidr_no_blocks:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services:
                  cidrBlocks: []   # <-
        "#)
        .err(InvalidCidr, W, 13, 7);

    // ────────────────────────────── cidr-overlap ───────────────────────────
    cidr_overlap_pods_and_services_of_one_cluster:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services:
                  cidrBlocks: [172.17.128.0/17]   # <-
        "#)
        .err(CidrOverlap, W, 13, 7);

    cidr_overlap_between_two_workloads:
        Case::workload().file(W2, r#"
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
                  cidrBlocks: [172.17.0.0/17]   # <-
                services: {cidrBlocks: [10.114.0.0/16]}
            ---
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: DockerDatacenterConfig
            metadata: {name: w2}
        "#)
        .broken(&[W_DIR, W2_DIR])
        .in_cluster(W_DIR)
        .err(CidrOverlap, W, 12, 12)
        .in_cluster(W2_DIR)
        .err(CidrOverlap, W2, 13, 7);

    cidr_overlap_workload_and_management:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services:
                  cidrBlocks: [10.100.0.0/16]   # <-
        "#)
        .broken(&[MGMT_DIR, W_DIR])
        .in_cluster(W_DIR)
        .err(CidrOverlap, W, 13, 7)
        .in_cluster(MGMT_DIR)
        .err(CidrOverlap, M, 22, 7);

    // ────────────────────────────── forbidden-kind ─────────────────────────
    forbidden_kind_cluster_role:
        Case::workload().file("clusters/mgmt/workload-clusters/w/rbac.yaml", r#"
            apiVersion: rbac.authorization.k8s.io/v1   # <-
            kind: ClusterRole
            metadata: {name: w-admin}
            rules: [{apiGroups: ["*"], resources: ["*"], verbs: ["*"]}]
        "#)
        .err(ForbiddenKind, "clusters/mgmt/workload-clusters/w/rbac.yaml", 1, 1);

    forbidden_kind_namespace_after_document_separator:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
            ---
            apiVersion: v1   # <-
            kind: Namespace
            metadata: {name: team-w}
        "#)
        .err(ForbiddenKind, W, 14, 1);

    forbidden_kind_deployment:
        Case::workload().file(W_EXTRA, r#"
            apiVersion: apps/v1   # <-
            kind: Deployment
            metadata: {name: w-tool}
            spec:
              selector: {matchLabels: {app: tool}}
              template:
                metadata: {labels: {app: tool}}
                spec: {containers: [{name: tool, image: busybox}]}
        "#)
        .err(ForbiddenKind, W_EXTRA, 1, 1);

    forbidden_kind_cluster_api_object:
        Case::workload().file(W_EXTRA, r#"
            apiVersion: cluster.x-k8s.io/v1beta1   # <-
            kind: MachineDeployment
            metadata: {name: w-extra-md}
            spec: {clusterName: w, replicas: 10}
        "#)
        .err(ForbiddenKind, W_EXTRA, 1, 1);

    // ─────────────────────────── foreign-namespace ─────────────────────────
    foreign_namespace_extra_object:
        Case::workload().file(W_EXTRA, r#"
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: w-notes
              namespace: kube-system   # <-
            data: {owner: team-w}
        "#)
        .err(ForeignNamespace, W_EXTRA, 5, 3);

    foreign_namespace_eksa_object:
        Case::workload().file(W_DC, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: DockerDatacenterConfig
            metadata:
              name: w
              namespace: team-x   # <-
        "#)
        .err(ForeignNamespace, W_DC, 5, 3);

    // ──────────────────────────── secret-with-data ─────────────────────────
    secret_with_data:
        Case::workload().file(W_EXTRA, r#"
            apiVersion: v1
            kind: Secret
            metadata: {name: w-registry}
            data:   # <-
              password: aHVudGVyMg==
        "#)
        .err(SecretWithData, W_EXTRA, 4, 1);

    secret_with_string_data:
        Case::workload().file(W_EXTRA, r#"
            apiVersion: v1
            kind: Secret
            metadata: {name: w-registry}
            type: Opaque
            stringData: {password: hunter2}   # <-
        "#)
        .err(SecretWithData, W_EXTRA, 5, 1);

    secret_with_data_in_management_dir:
        Case::management().file("clusters/mgmt/secrets.yaml", r#"
            apiVersion: v1
            kind: Secret
            metadata: {name: vsphere-credentials, namespace: eksa-system}
            data:   # <-
              username: YWRtaW4=
        "#)
        .err(SecretWithData, "clusters/mgmt/secrets.yaml", 4, 1);

    // ───────────────────── not-utf8, file-too-large, symlinks ───────────────
    not_utf8_in_memory:
        Case::workload().bytes("clusters/mgmt/workload-clusters/w/notes.yaml", b"# owner: team-w\n# site: M\xfcnchen   # <-\n".to_vec())
        .err_line(NotUtf8, "clusters/mgmt/workload-clusters/w/notes.yaml", 2);

    not_utf8_on_disk:
        Case::workload().on_disk().bytes(W_EXTRA, b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w-notes}\ndata: {city: \xe9vry}   # <-\n".to_vec())
        .err_line(NotUtf8, W_EXTRA, 4);

    file_too_large:
        Case::workload().big_file(W_EXTRA, 1024 * 1024 + 1)
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

    // ──────────────── warnings: reported, the cluster still renders ─────────
    warning_deprecated_bundles_ref:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              bundlesRef:   # <-
                apiVersion: anywhere.eks.amazonaws.com/v1alpha1
                name: bundles-104
                namespace: eksa-system
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .renders()
        .warn(DeprecatedField, W, 6, 3);

    warning_unused_machine_config:
        Case::vsphere().file("clusters/mgmt/workload-clusters/w/spare.yaml", r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: VSphereMachineConfig
            metadata:
              name: w-spare   # <-
            spec: {datastore: ds1, resourcePool: /dc1/host/c1/Resources, template: ubuntu-2204-kube-v1.33, osFamily: ubuntu}
        "#)
        .renders()
        .warn(UnusedObject, "clusters/mgmt/workload-clusters/w/spare.yaml", 4, 3);

    warning_docker_ignores_machine_group_ref:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 1
                machineGroupRef: {kind: VSphereMachineConfig, name: w-cp}   # <-
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .renders()
        .warn(UnusedObject, W, 10, 5);

    // ───────────────── several problems, all reported in one run ────────────
    multi_five_problems_in_one_cluster:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration:
                count: 2   # <-
              workerNodeGroupConfigurations:
                - name: md-0
                  count: 1
                  taints: [{key: a, effect: Never}]   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services:
                  cidrBlocks: [10.113.0.0/33]   # <-
                cniConfig:
                  cilium: {policyEnforcementMode: sometimes}   # <-
              machineHealthCheck:
                unhealthyMachineTimeout: 5 min   # <-
        "#)
        .err(InvalidValue, W, 9, 5)
        .err(InvalidValue, W, 13, 25)
        .err(InvalidCidr, W, 17, 20)
        .err(InvalidValue, W, 19, 16)
        .err(InvalidValue, W, 21, 5);

    multi_problems_in_three_files_of_one_cluster:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 4}   # <-
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .file(W_EXTRA, r#"
            apiVersion: v1
            kind: ConfigMap
            metadata: {name: w-notes
            data: {}   # <-
        "#)
        .file("clusters/mgmt/workload-clusters/w/flux.yaml", r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: GitOpsConfig   # <-
            metadata: {name: w-gitops}
        "#)
        .err(InvalidValue, W, 8, 31)
        .err_line(YamlSyntax, W_EXTRA, 4)
        .err(UnsupportedKind, "clusters/mgmt/workload-clusters/w/flux.yaml", 2, 1);

    // Layout problems (name, management relation) are known even when the spec has other errors,
    // so they are reported in the same run.
    multi_layout_and_spec_problems_together:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w-renamed   # <-
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 2}   # <-
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(DirNameMismatch, W, 4, 3)
        .err(InvalidValue, W, 9, 31);

    multi_dir_name_and_management_mismatch:
        Case::workload().file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: w-renamed   # <-
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt-old}   # <-
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
        .err(DirNameMismatch, W, 4, 3)
        .err(ManagementMismatch, W, 7, 3);

    multi_problems_in_several_clusters:
        Case::workload()
        .file(M, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata:
              name: mgmt
            spec:
              kubernetesVersion: "1.33"
              eksaVersion: v0.26.1
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: mgmt}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1}]
              clusterNetwork:
                pods: {cidrBlocks: [192.168.0.0/16]}
                services: {cidrBlocks: [10.96.0.0/12]}
              gitOpsRef: {kind: FluxConfig, name: fleet}   # <-
        "#)
        .file(W, r#"
            apiVersion: anywhere.eks.amazonaws.com/v1alpha1
            kind: Cluster
            metadata: {name: w}
            spec:
              kubernetesVersion: "1.33"
              managementCluster: {name: mgmt}
              datacenterRef: {kind: DockerDatacenterConfig, name: w}
              controlPlaneConfiguration: {count: 1}
              workerNodeGroupConfigurations: [{name: md-0, count: 1, lables: {a: b}}]   # <-
              clusterNetwork:
                pods: {cidrBlocks: [172.17.0.0/16]}
                services: {cidrBlocks: [10.113.0.0/16]}
        "#)
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
            apiVersion: v1   # <-
            kind: ServiceAccount
            metadata: {name: w2-bot}
        "#)
        .file("clusters/notes.txt", "not a cluster\n")
        .broken(&[MGMT_DIR, W_DIR, W2_DIR])
        .in_cluster(MGMT_DIR)
        .err(UnsupportedField, M, 15, 3)
        .in_cluster(W_DIR)
        .err(UnknownField, W, 9, 58)
        .in_cluster(W2_DIR)
        .err(ForbiddenKind, "clusters/mgmt/workload-clusters/w2/bot.yaml", 1, 1)
        .in_fleet()
        .err_file(UnexpectedEntry, "clusters/notes.txt");
}

// ─────────────────────────────── the corpus as a whole ───────────────────────────────

#[test]
fn corpus_has_at_least_70_cases() {
    let cases = corpus();
    let names: BTreeSet<&str> = cases.iter().map(|(n, _)| *n).collect();
    assert_eq!(names.len(), cases.len());
    assert!(cases.len() >= 70, "only {} cases", cases.len());
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
    for (name, fleet) in [("docker", base_fleet()), ("vsphere", base_vsphere_fleet())] {
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
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(env!("CARGO"))
        .current_dir(&workspace)
        .args(["run", "-q", "-p", "capstan", "--", "validate"])
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
