//! `capstan kubeconfig CLUSTER`: the real binary reads a workload cluster's kubeconfig Secret
//! (Cluster API's, `<cluster>-kubeconfig`) from the shared API server with the admin's
//! kubeconfig, finding the Cluster's namespace by itself; the printed kubeconfig and the context
//! `--merge` adds work with kubectl (the Secret holds the shared control plane's own kubeconfig,
//! so there is a server behind it). A missing cluster, a Secret of another type and a name in
//! several namespaces are refused with one line that says so.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use capstan_harness::run::{self, kubectl_output};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::json;

/// The real binary with `args`, its environment kept off the user's own kubeconfig: no
/// $KUBECONFIG (unless given), $HOME a directory of the test's.
fn capstan_at_home(args: &[&str], home: &Path, kubeconfig_env: Option<&Path>) -> Output {
    let mut c = run::capstan(args);
    c.env("HOME", home).env_remove("KUBECONFIG");
    if let Some(k) = kubeconfig_env {
        c.env("KUBECONFIG", k);
    }
    c.output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A refusal: exit 1, one line on stderr with every one of `says`, nothing on stdout.
fn assert_refused(o: &Output, says: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(o.stdout.is_empty(), "printed: {}", stdout(o));
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    for s in says {
        assert!(err.contains(s), "`{s}` not in: {err}");
    }
}

/// Creates Cluster API Cluster `ns/name`.
async fn create_cluster(client: &kube::Client, ns: &str, name: &str) {
    let ar = ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    };
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": ns},
        // The smallest spec the CRD admits (at least one field); no controller runs here.
        "spec": {"paused": true}
    }))
    .unwrap();
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap();
}

/// Creates `<cluster>-kubeconfig` in `ns`, of type `type_`, holding `value`.
async fn create_kubeconfig_secret(
    client: &kube::Client,
    ns: &str,
    cluster: &str,
    type_: &str,
    value: &str,
) {
    let s: Secret = serde_json::from_value(json!({
        "metadata": {
            "name": format!("{cluster}-kubeconfig"),
            "namespace": ns,
            "labels": {"cluster.x-k8s.io/cluster-name": cluster}
        },
        "type": type_,
        "stringData": {"value": value}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_workload_clusters_kubeconfig_is_printed_and_merged_as_a_context() {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let space = cp.test_namespace("kubeconfig").await.unwrap();
    let ns = space.name().to_string();
    let admin = cp.kubeconfig_path();
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path();
    create_cluster(&client, &ns, "kc-w").await;
    create_kubeconfig_secret(
        &client,
        &ns,
        "kc-w",
        "cluster.x-k8s.io/secret",
        cp.kubeconfig_yaml(),
    )
    .await;

    // Printed as the Secret holds it, the namespace found by the Cluster's name.
    let a = admin.to_str().unwrap();
    let out = capstan_at_home(&["kubeconfig", "kc-w", "--kubeconfig", a], home, None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), cp.kubeconfig_yaml());
    let printed = home.join("printed.yaml");
    std::fs::write(&printed, &out.stdout).unwrap();
    let got = kubectl_output(&printed, &["get", "ns", "-o", "name"]);
    assert!(got.status.success(), "{}", stderr(&got));
    assert!(stdout(&got).contains(&format!("namespace/{ns}")));
    // With --namespace (and -n) the same.
    for flag in ["--namespace", "-n"] {
        let out = capstan_at_home(
            &["kubeconfig", "kc-w", flag, &ns, "--kubeconfig", a],
            home,
            None,
        );
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(stdout(&out), cp.kubeconfig_yaml());
    }

    // --merge into a file that has a context already (the management cluster's, which the
    // command also connects with): it stays, and stays current; kc-w is added.
    let file = home.join("config");
    std::fs::write(&file, cp.kubeconfig_yaml()).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let f = file.to_str().unwrap();
    let out = capstan_at_home(
        &["kubeconfig", "kc-w", "--merge", "--kubeconfig", f],
        home,
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim_end(),
        format!("context `kc-w` added to {f}")
    );
    let contexts = |file: &Path| {
        let got = kubectl_output(file, &["config", "get-contexts", "-o", "name"]);
        assert!(got.status.success(), "{}", stderr(&got));
        let mut names: Vec<String> = stdout(&got).lines().map(str::to_string).collect();
        names.sort();
        names
    };
    assert_eq!(contexts(&file), ["capstan-dev", "kc-w"]);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");
    let current = kubectl_output(&file, &["config", "current-context"]);
    assert_eq!(stdout(&current).trim(), "capstan-dev");
    let got = kubectl_output(&file, &["--context", "kc-w", "get", "ns", "-o", "name"]);
    assert!(got.status.success(), "{}", stderr(&got));
    assert!(stdout(&got).contains(&format!("namespace/{ns}")));
    // Its own cluster and user entries, next to the management cluster's.
    let view = kubectl_output(
        &file,
        &[
            "config",
            "view",
            "-o",
            "jsonpath={.clusters[*].name} {.users[*].name}",
        ],
    );
    assert_eq!(stdout(&view), "capstan-dev kc-w capstan-dev kc-w-admin");

    // Again with --use: replaced, not doubled, and now current.
    let out = capstan_at_home(
        &["kubeconfig", "kc-w", "--merge", "--use", "--kubeconfig", f],
        home,
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("context `kc-w` replaced in {f}")),
        "{}",
        stdout(&out)
    );
    assert_eq!(contexts(&file), ["capstan-dev", "kc-w"]);
    let current = kubectl_output(&file, &["config", "current-context"]);
    assert_eq!(stdout(&current).trim(), "kc-w");

    // Without --kubeconfig: the first file of $KUBECONFIG, read and written; --context-name.
    let env_file = home.join("env-config");
    std::fs::write(&env_file, cp.kubeconfig_yaml()).unwrap();
    let out = capstan_at_home(
        &["kubeconfig", "kc-w", "--merge", "--context-name", "work"],
        home,
        Some(&env_file),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(contexts(&env_file), ["capstan-dev", "work"]);
    let got = kubectl_output(&env_file, &["--context", "work", "get", "ns", "-o", "name"]);
    assert!(got.status.success(), "{}", stderr(&got));

    // A cluster that is not there, in any namespace or in the one given.
    let out = capstan_at_home(&["kubeconfig", "kc-missing", "--kubeconfig", a], home, None);
    assert_refused(
        &out,
        &["no Cluster API Cluster named `kc-missing`", "--namespace"],
    );
    let out = capstan_at_home(
        &["kubeconfig", "kc-missing", "-n", &ns, "--kubeconfig", a],
        home,
        None,
    );
    assert_refused(
        &out,
        &[
            &format!("no Secret {ns}/kc-missing-kubeconfig"),
            "kc-missing",
        ],
    );

    // A Secret of that name that is not Cluster API's is neither printed nor merged.
    create_cluster(&client, &ns, "kc-o").await;
    create_kubeconfig_secret(&client, &ns, "kc-o", "Opaque", cp.kubeconfig_yaml()).await;
    let before = std::fs::read(&file).unwrap();
    for merge in [false, true] {
        let mut args = vec!["kubeconfig", "kc-o", "--kubeconfig", f];
        if merge {
            args.push("--merge");
        }
        let out = capstan_at_home(&args, home, None);
        assert_refused(
            &out,
            &[
                &format!("Secret {ns}/kc-o-kubeconfig is not Cluster API's"),
                "Opaque",
            ],
        );
    }
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "the file was written"
    );

    // The same name in two namespaces: both named, --namespace picks one.
    let other = cp.test_namespace("kubeconfig-other").await.unwrap();
    create_cluster(&client, other.name(), "kc-w").await;
    let out = capstan_at_home(&["kubeconfig", "kc-w", "--kubeconfig", a], home, None);
    assert_refused(&out, &[&ns, other.name(), "--namespace"]);
    let out = capstan_at_home(
        &["kubeconfig", "kc-w", "-n", &ns, "--kubeconfig", a],
        home,
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

/// `--aws-iam`: EKS Anywhere's kubeconfig for the users of a cluster with an AWSIamConfig. The
/// server and CA are those of Cluster API's Secret, the user runs `aws-iam-authenticator token
/// -i <ID>` with the ID capstan renders into the cluster's authenticator. kubectl runs it: a
/// stand-in for the authenticator on PATH (named as such: the real one asks AWS STS) records its
/// arguments and hands over a token the API server does not know, so kubectl reaches the server
/// over TLS with that CA and is told Unauthorized. A cluster without an AWSIamConfig is refused.
#[tokio::test]
async fn the_aws_iam_kubeconfig_runs_the_authenticator_with_the_clusters_id() {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let space = cp.test_namespace("kubeconfig-iam").await.unwrap();
    let ns = space.name().to_string();
    let admin = cp.kubeconfig_path();
    let a = admin.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path();
    for name in ["kc-iam", "kc-plain"] {
        create_cluster(&client, &ns, name).await;
        create_kubeconfig_secret(
            &client,
            &ns,
            name,
            "cluster.x-k8s.io/secret",
            cp.kubeconfig_yaml(),
        )
        .await;
    }
    // The EKS Anywhere Clusters capstan applies (paused) beside them.
    let eksa = ApiResource {
        group: "anywhere.eks.amazonaws.com".into(),
        version: "v1alpha1".into(),
        api_version: "anywhere.eks.amazonaws.com/v1alpha1".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    };
    for (name, refs) in [
        (
            "kc-iam",
            json!([{"kind": "AWSIamConfig", "name": "kc-iam-auth"}]),
        ),
        ("kc-plain", json!([])),
    ] {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "anywhere.eks.amazonaws.com/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "kubernetesVersion": "1.33",
                "managementCluster": {"name": "kc-mgmt"},
                "identityProviderRefs": refs,
            }
        }))
        .unwrap();
        Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &eksa)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
    }

    let out = capstan_at_home(
        &["kubeconfig", "kc-iam", "--aws-iam", "--kubeconfig", a],
        home,
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let printed: serde_json::Value = capstan_templates::yaml::parse_values(&stdout(&out))
        .unwrap()
        .remove(0);
    let id = capstan_templates::render::authenticator::cluster_id("kc-mgmt", &ns, "kc-iam");
    assert_eq!(printed["current-context"], "kc-iam-aws", "{printed}");
    let exec = &printed["users"][0]["user"]["exec"];
    assert_eq!(exec["command"], "aws-iam-authenticator", "{printed}");
    assert_eq!(exec["args"], json!(["token", "-i", id]), "{printed}");
    assert!(
        printed["users"][0]["user"].get("client-key-data").is_none(),
        "no admin credential: {printed}"
    );
    let admin_kc: serde_json::Value = capstan_templates::yaml::parse_values(cp.kubeconfig_yaml())
        .unwrap()
        .remove(0);
    assert_eq!(
        printed["clusters"][0]["cluster"]["server"],
        admin_kc["clusters"][0]["cluster"]["server"]
    );

    // kubectl runs the authenticator (a stand-in) with the ID, and reaches the server.
    let bin = home.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let recorded = home.join("args");
    let stand_in = bin.join("aws-iam-authenticator");
    std::fs::write(
        &stand_in,
        format!(
            "#!/bin/sh\necho \"$@\" > {}\necho '{{\"apiVersion\": \"client.authentication.k8s.io/v1beta1\", \"kind\": \"ExecCredential\", \"status\": {{\"token\": \"k8s-aws-v1.stand-in\"}}}}'\n",
            recorded.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = home.join("aws.kubeconfig");
    std::fs::write(&file, &out.stdout).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let got = std::process::Command::new("kubectl")
        .env("PATH", path)
        .arg("--kubeconfig")
        .arg(&file)
        .args(["get", "ns"])
        .output()
        .unwrap();
    assert!(!got.status.success());
    assert!(stderr(&got).contains("Unauthorized"), "{}", stderr(&got));
    assert_eq!(
        std::fs::read_to_string(&recorded).unwrap().trim(),
        format!("token -i {id}")
    );

    // Merged: context and cluster `kc-iam`, user `kc-iam-aws`.
    let merged = home.join("config");
    let m = merged.to_str().unwrap();
    // --kubeconfig is also the connection: the file holds the admin's context.
    std::fs::write(&merged, cp.kubeconfig_yaml()).unwrap();
    let out = capstan_at_home(
        &[
            "kubeconfig",
            "kc-iam",
            "--aws-iam",
            "--merge",
            "--kubeconfig",
            m,
        ],
        home,
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let kc: serde_json::Value =
        capstan_templates::yaml::parse_values(&std::fs::read_to_string(&merged).unwrap())
            .unwrap()
            .remove(0);
    let ctx = kc["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "kc-iam")
        .unwrap_or_else(|| panic!("{kc}"));
    assert_eq!(ctx["context"]["user"], "kc-iam-aws", "{kc}");

    // Without an AWSIamConfig: refused.
    let out = capstan_at_home(
        &["kubeconfig", "kc-plain", "--aws-iam", "--kubeconfig", a],
        home,
        None,
    );
    assert_refused(&out, &["names no AWSIamConfig", "kc-plain"]);
}
