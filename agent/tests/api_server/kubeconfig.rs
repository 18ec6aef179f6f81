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
