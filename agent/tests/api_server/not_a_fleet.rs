//! A directory that is not a fleet repository (no `clusters/`), or whose `clusters/` holds no
//! cluster (a wiped branch checked out), is an error for every command — `validate`, `render`,
//! `plan` and `reconcile` — never "0 clusters, 0 errors" or an empty desired fleet; against a
//! real API server nothing is written. (The daemon's case is in `daemon.rs`:
//! `a_wiped_branch_changes_nothing_on_the_management_cluster`.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use capstan_harness::ControlPlane;
use capstan_harness::run::{self, output_text};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

/// The capstan binary with `args`, on fleet directory `dir`, against `kubeconfig` if given.
fn capstan_on(args: &[&str], dir: &Path, kubeconfig: Option<&Path>) -> Output {
    let mut c = run::capstan(args);
    c.arg(dir);
    if let Some(k) = kubeconfig {
        c.arg("--kubeconfig").arg(k);
    }
    c.output().unwrap()
}

/// The shapes of "not a fleet": an empty directory, a repository of something else, a
/// `clusters/` with only a README, a `clusters/` with only the fleet's suspend file.
fn not_fleets(root: &Path) -> Vec<(&'static str, std::path::PathBuf)> {
    let mk = |name: &str, files: &[(&str, &str)]| {
        let d = root.join(name);
        std::fs::create_dir_all(&d).unwrap();
        for (p, t) in files {
            let p = d.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, t).unwrap();
        }
        d
    };
    vec![
        ("an empty directory", mk("empty", &[])),
        (
            "another project",
            mk(
                "other",
                &[
                    ("README.md", "# web\n"),
                    ("k8s/app.yaml", "kind: Deployment\n"),
                ],
            ),
        ),
        (
            "an empty clusters/",
            mk("wiped", &[("clusters/README.md", "# nothing yet\n")]),
        ),
        (
            "clusters/ with only the suspend file",
            mk(
                "suspended",
                &[(
                    "clusters/suspend.yaml",
                    "apiVersion: capstan.dev/v1alpha1\nkind: Suspend\nmetadata: {name: fleet}\n",
                )],
            ),
        ),
    ]
}

#[test]
fn validate_and_render_refuse_what_is_not_a_fleet() {
    let tmp = tempfile::tempdir().unwrap();
    for (what, dir) in not_fleets(tmp.path()) {
        for cmd in [
            &["validate"][..],
            &["validate", "--output", "json"],
            &["render"],
        ] {
            let out = capstan_on(cmd, &dir, None);
            let t = output_text(&out);
            assert_eq!(out.status.code(), Some(1), "{cmd:?} on {what}:\n{t}");
            assert!(t.contains("not-a-fleet"), "{cmd:?} on {what}:\n{t}");
            assert!(!t.contains("0 errors"), "{cmd:?} on {what}:\n{t}");
        }
    }
}

/// A kubeconfig with every right the admin has (a ServiceAccount of `ns` bound to
/// `cluster-admin`, once the authorizer grants it) and a token of its own, and that token's
/// credential id as the audit log records it: capstan's requests told apart from those of the
/// other tests sharing the API server, which write as its admin. The binding is named `ns`.
async fn admin_credential(cp: &ControlPlane, ns: &str) -> (PathBuf, String) {
    let client = cp.client();
    let sa = "not-a-fleet";
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": sa, "namespace": ns}})).unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    // The authorizer learns of the binding from its informer.
    let reviews: Api<SubjectAccessReview> = Api::all(client);
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:{ns}:{sa}")),
            resource_attributes: Some(ResourceAttributes {
                verb: Some("create".into()),
                resource: Some("namespaces".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let start = Instant::now();
    while !reviews
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "cluster-admin not granted"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    cp.service_account_credential(ns, sa, "not-a-fleet")
        .await
        .unwrap()
}

#[tokio::test]
async fn plan_and_reconcile_refuse_what_is_not_a_fleet_and_write_nothing() {
    let cp = capstan_harness::shared().await;
    let tmp = tempfile::tempdir().unwrap();
    let ns = cp.test_namespace("not-a-fleet").await.unwrap();
    let (kubeconfig, credential) = admin_credential(cp, ns.name()).await;
    let mark = cp.audit().mark();
    for (what, dir) in not_fleets(tmp.path()) {
        for cmd in [&["plan"][..], &["reconcile", "--once"]] {
            let mut args = cmd.to_vec();
            args.push("--repo");
            let out = if cmd[0] == "plan" {
                capstan_on(cmd, &dir, Some(&kubeconfig))
            } else {
                capstan_on(&args, &dir, Some(&kubeconfig))
            };
            let t = output_text(&out);
            assert_eq!(out.status.code(), Some(1), "{cmd:?} on {what}:\n{t}");
            assert!(t.contains("not-a-fleet"), "{cmd:?} on {what}:\n{t}");
            assert!(t.contains("nothing applied"), "{cmd:?} on {what}:\n{t}");
        }
    }
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    let writes: Vec<String> = cp
        .audit()
        .events_since(mark)
        .unwrap()
        .into_iter()
        // capstan's, by its token.
        .filter(|e| e.is_write() && e.credential_id() == Some(credential.as_str()))
        .map(|e| format!("{} {} {}", e.user.username, e.verb, e.request_uri))
        .collect();
    assert!(writes.is_empty(), "writes: {writes:#?}");
    Api::<ClusterRoleBinding>::all(cp.client())
        .delete(ns.name(), &DeleteParams::default())
        .await
        .unwrap();
}

/// A user's first mistake with a real fleet: a kubeconfig path that does not exist. The error
/// names the path and says each cause once (it used to print the same cause three times), exits
/// 1, and nothing else is attempted.
#[test]
fn a_missing_kubeconfig_is_said_once_with_its_path() {
    let root = tempfile::tempdir().unwrap();
    let fleet = root.path().join("fleet");
    let init = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["init"])
        .arg(&fleet)
        .args([
            "--management",
            "mgmt",
            "--provider",
            "docker",
            "--pod-cidr",
            "192.168.0.0/16",
            "--service-cidr",
            "10.96.0.0/12",
        ])
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", output_text(&init));
    let missing = root.path().join("no-such-dir/kubeconfig");
    let f = fleet.to_str().unwrap();
    let m = missing.to_str().unwrap();
    for args in [
        vec!["plan", f, "--kubeconfig", m],
        vec!["reconcile", "--once", "--repo", f, "--kubeconfig", m],
        vec!["status", "--kubeconfig", m],
    ] {
        let cmd = args[0];
        let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(&args)
            .output()
            .unwrap();
        let said = output_text(&out);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {said}");
        let lines: Vec<&str> = said.lines().filter(|l| l.starts_with("error")).collect();
        assert_eq!(lines.len(), 1, "{cmd}: {said}");
        assert_eq!(
            said.matches("No such file or directory").count(),
            1,
            "{cmd}: {said}"
        );
        assert_eq!(
            said.matches("failed to read kubeconfig").count(),
            1,
            "{cmd}: {said}"
        );
        assert!(said.contains(m), "{cmd}: {said}");
    }
}
