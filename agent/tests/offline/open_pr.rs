//! `--open-pr` end to end: the real binary makes the change on a branch off the remote's `main`,
//! validates the fleet with it, pushes for real (https through `git http-backend` behind TLS with
//! a private CA, and ssh with a deploy key that may push) and opens the pull request on the
//! GitHub stand-in with the `capstan diff` markdown as its body. Re-running moves the same
//! branch and edits the same pull request; a change that does not validate pushes nothing.

use std::path::Path;
use std::process::Output;

use capstan_harness::certs::Pki;

use crate::source_support;
use crate::source_support::github::GitHubStandIn;
use crate::source_support::http::HttpGitServer;
use crate::source_support::sshd::Sshd;
use crate::source_support::{Upstream, git};
use capstan_harness::run;

const TOKEN: &str = "ghp_openpr";

/// The capstan binary with `args` and `extra`, the user's git configuration ignored: its exit
/// code, stdout and stderr.
fn capstan_git(args: &[&str], extra: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = run::capstan(args)
        .args(extra)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    (
        status.code().unwrap(),
        String::from_utf8(stdout).unwrap(),
        String::from_utf8(stderr).unwrap(),
    )
}

fn has_ref(bare: &Path, name: &str) -> bool {
    source_support::git_command(bare)
        .args(["rev-parse", "--verify", "-q", name])
        .status()
        .unwrap()
        .success()
}

fn upstream() -> Upstream {
    let files = source_support::agent::fleet_with("opr", &[]);
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    Upstream::new(&refs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_cluster_open_pr_pushes_over_https_and_keeps_one_pr() {
    let up = upstream();
    git(&up.bare, &["config", "http.receivepack", "true"]);
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::generate().unwrap();
    let ca = tmp.path().join("ca.pem");
    std::fs::write(&ca, &pki.serving_ca_pem).unwrap();
    let server = HttpGitServer::start_tls(&up.root, &pki.serving_cert_pem, &pki.serving_key_pem);
    git(
        &up.work,
        &["remote", "set-url", "origin", &server.url("repo.git")],
    );
    let gh = GitHubStandIn::start("acme/fleet", "", TOKEN).await;
    let token = tmp.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let work = up.work.clone();
    let gh_url = gh.url();
    let new = move |name: &str, workers: &str, pod: &str| {
        let base = vec![
            "new",
            "cluster",
            name,
            "--management",
            "m-opr",
            "--provider",
            "docker",
            "--namespace",
            "t-opr",
            "--pod-cidr",
            pod,
            "--service-cidr",
            "10.112.0.0/16",
            "--worker-count",
            workers,
            "--open-pr",
            "--github-repo",
            "acme/fleet",
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
        let mut args = base;
        args.extend(["--github-api-url".into(), gh_url.clone()]);
        let extra = [
            "--repo".as_ref(),
            work.as_os_str(),
            "--ca-file".as_ref(),
            ca.as_os_str(),
            "--github-token-file".as_ref(),
            token.as_os_str(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        capstan_git(&args, &extra)
    };
    let run = tokio::task::spawn_blocking({
        let new = new.clone();
        move || new("dev-a", "2", "172.16.0.0/16")
    });
    let (code, out, err) = run.await.unwrap();
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("opened pull request #1"), "{out}");
    let branch = "refs/heads/capstan/new-cluster-dev-a";
    assert!(has_ref(&up.bare, branch));
    let spec = git(
        &up.bare,
        &[
            "show",
            &format!("{branch}:clusters/m-opr/workload-clusters/dev-a/cluster.yaml"),
        ],
    );
    assert!(spec.contains("count: 2"), "{spec}");
    assert!(
        !up.work
            .join("clusters/m-opr/workload-clusters/dev-a")
            .exists(),
        "working copy untouched"
    );
    let pulls = gh.pulls();
    assert_eq!(pulls.len(), 1);
    assert_eq!(
        (pulls[0].head.as_str(), pulls[0].base.as_str()),
        ("capstan/new-cluster-dev-a", "main")
    );
    assert_eq!(pulls[0].title, "Add cluster dev-a (managed by m-opr)");
    assert!(
        pulls[0].body.contains("#### Cluster `dev-a`"),
        "{}",
        pulls[0].body
    );
    assert!(
        pulls[0]
            .body
            .contains("new cluster: every machine is created"),
        "{}",
        pulls[0].body
    );
    // Pushed over https for real: receive-pack went through the TLS server.
    assert!(
        server
            .log()
            .iter()
            .any(|l| l.path.ends_with("git-receive-pack")),
        "{:?}",
        server.log()
    );

    // Re-running with other values: the same branch (one commit on main) and the same PR.
    let (code, out, err) = tokio::task::spawn_blocking({
        let new = new.clone();
        move || new("dev-a", "3", "172.16.0.0/16")
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("updated pull request #1"), "{out}");
    assert_eq!(
        git(
            &up.bare,
            &["rev-list", "--count", &format!("main..{branch}")]
        ),
        "1"
    );
    let pulls = gh.pulls();
    assert_eq!(pulls.len(), 1);
    assert!(
        pulls[0].body.contains("+  replicas: 3"),
        "{}",
        pulls[0].body
    );

    // A cluster whose pods overlap the management cluster's: refused, nothing pushed.
    let (code, out, err) = tokio::task::spawn_blocking(move || new("dev-b", "2", "192.168.0.0/16"))
        .await
        .unwrap();
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("overlaps"), "{err}");
    assert!(!has_ref(&up.bare, "refs/heads/capstan/new-cluster-dev-b"));
    assert_eq!(gh.pulls().len(), 1);
    assert!(gh.violations().is_empty(), "{:?}", gh.violations());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_and_delete_open_prs_over_ssh() {
    let up = upstream();
    let sshd = Sshd::start_push(&up.root);
    git(
        &up.work,
        &["remote", "set-url", "origin", &sshd.url(&up.bare)],
    );
    let gh = GitHubStandIn::start("acme/fleet", "", TOKEN).await;
    let tmp = tempfile::tempdir().unwrap();
    let token = tmp.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let url = gh.url();
    let (work, key, kh) = (up.work.clone(), sshd.key.clone(), sshd.known_hosts.clone());
    let run = move |verb: &'static str| {
        let (work, key, kh, token, url) = (
            work.clone(),
            key.clone(),
            kh.clone(),
            token.clone(),
            url.clone(),
        );
        tokio::task::spawn_blocking(move || {
            capstan_git(
                &[
                    verb,
                    "cluster",
                    "m-opr",
                    "--reason",
                    "maintenance",
                    "--open-pr",
                    "--github-repo",
                    "acme/fleet",
                    "--github-api-url",
                    &url,
                ],
                &[
                    "--repo".as_ref(),
                    work.as_os_str(),
                    "--ssh-key".as_ref(),
                    key.as_os_str(),
                    "--known-hosts".as_ref(),
                    kh.as_os_str(),
                    "--github-token-file".as_ref(),
                    token.as_os_str(),
                ],
            )
        })
    };
    let (code, out, err) = run("suspend").await.unwrap();
    assert_eq!(code, 0, "{out}{err}\n{}", sshd.log());
    assert!(has_ref(
        &up.bare,
        "refs/heads/capstan/suspend-cluster-m-opr"
    ));
    let suspend = git(
        &up.bare,
        &[
            "show",
            "capstan/suspend-cluster-m-opr:clusters/m-opr/suspend.yaml",
        ],
    );
    assert!(
        suspend.contains("kind: Suspend") && suspend.contains("maintenance"),
        "{suspend}"
    );
    let (code, out, err) = run("delete").await.unwrap();
    assert_eq!(code, 0, "{out}{err}");
    let pulls = gh.pulls();
    assert_eq!(pulls.len(), 2);
    assert!(
        pulls[0]
            .body
            .contains("suspended: the agent applies nothing"),
        "{}",
        pulls[0].body
    );
    assert_eq!(pulls[1].title, "Delete cluster m-opr");
    assert!(
        pulls[1]
            .body
            .contains("tombstone: the agent deletes this cluster"),
        "{}",
        pulls[1].body
    );
    assert!(gh.violations().is_empty(), "{:?}", gh.violations());
}
