//! The Git source against real servers on loopback: `git daemon` (git://), `git http-backend`
//! behind a small CGI server (smart HTTP, plain http://), `sshd` with a read-only deploy key
//! (ssh://) and a local path. Every server is started by the test on a free port and killed when
//! the test ends.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use capstan::source::{
    GitRef, GitSource, RemoteError, Revision, SourceConfig, SourceError, SyncOutcome, read_local,
};
use capstan_layout::tree::{Entry, MAX_FILE_SIZE};

use crate::source_support;
use crate::source_support::daemon::GitDaemon;
use crate::source_support::http::HttpGitServer;
use crate::source_support::sshd::Sshd;
use crate::source_support::{Upstream, git, has_object, packs};

const README: &str = "# fleet\n";
const MGMT: &str = "kind: Cluster\nmetadata:\n  name: mgmt\n";
const DEV: &str = "kind: Cluster\nmetadata:\n  name: dev\n";

/// An upstream repository holding a management cluster and its workload `dev`.
fn fleet_upstream() -> Upstream {
    Upstream::new(&[
        ("README.md", README),
        ("clusters/mgmt/cluster.yaml", MGMT),
        ("clusters/mgmt/workload-clusters/dev/cluster.yaml", DEV),
    ])
}

fn config(url: String, reference: GitRef, cache: &Path) -> SourceConfig {
    SourceConfig {
        url,
        reference,
        cache_dir: cache.to_path_buf(),
        ssh_key: None,
        known_hosts: None,
        shallow: false,
        ca_file: None,
    }
}

fn branch() -> GitRef {
    GitRef::Branch("main".into())
}

/// The revision's files as text (panics on non-file entries).
fn revision_texts(rev: &Revision) -> BTreeMap<String, String> {
    rev.tree
        .entries
        .iter()
        .map(|(p, e)| match e {
            Entry::File(b) => (
                p.display().to_string(),
                String::from_utf8(b.clone()).unwrap(),
            ),
            other => panic!("{}: unexpected {other:?}", p.display()),
        })
        .collect()
}

fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(p, c)| (p.to_string(), c.to_string()))
        .collect()
}

fn paths(entries: &[&str]) -> BTreeSet<PathBuf> {
    entries.iter().map(PathBuf::from).collect()
}

/// Makes `at` (under `work`) a symlink to `target`, replacing whatever is there.
fn symlink(work: &Path, target: &str, at: &str) {
    let p = work.join(at);
    let _ = std::fs::remove_file(&p);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, p).unwrap();
}

fn updated(outcome: SyncOutcome) -> (Option<String>, Revision) {
    match outcome {
        SyncOutcome::Updated { previous, revision } => (previous, revision),
        other => panic!("expected Updated, got {other:?}"),
    }
}

/// Clone and read, then follow the branch through one pushed commit. Returns the source and the
/// two commits.
fn follow_branch(up: &Upstream, cfg: SourceConfig) -> (GitSource, String, String) {
    let cache = cfg.cache_dir.clone();
    let c1 = up.head();
    let mut src = GitSource::open(cfg).unwrap();
    assert!(src.last_good().is_none());
    assert_eq!(src.remote_commit().unwrap(), c1);

    let (previous, rev) = updated(src.sync().unwrap());
    assert_eq!(previous, None);
    assert_eq!(rev.commit, c1);
    assert_eq!(
        revision_texts(&rev),
        map(&[
            ("README.md", README),
            ("clusters/mgmt/cluster.yaml", MGMT),
            ("clusters/mgmt/workload-clusters/dev/cluster.yaml", DEV),
        ])
    );
    assert_eq!(src.sync().unwrap(), SyncOutcome::Unchanged(c1.clone()));

    let c2 = up.commit_and_push(
        &[
            (
                "clusters/mgmt/cluster.yaml",
                "kind: Cluster\nmetadata:\n  name: mgmt\n# v2\n",
            ),
            ("clusters/mgmt/workload-clusters/prod/cluster.yaml", "prod"),
        ],
        &["README.md"],
        "second",
    );
    assert_eq!(
        src.remote_commit().unwrap(),
        c2,
        "remote_commit sees the push"
    );
    assert!(
        !has_object(&cache, &c2),
        "remote_commit must not download the new commit"
    );
    assert_eq!(
        src.last_good().unwrap().commit,
        c1,
        "remote_commit does not change last_good"
    );

    let (previous, rev) = updated(src.sync().unwrap());
    assert_eq!(previous.as_deref(), Some(c1.as_str()));
    assert_eq!(rev.commit, c2);
    assert_eq!(revision_texts(&rev).len(), 3);
    assert_eq!(
        src.changed_paths(&c1, &c2).unwrap(),
        paths(&[
            "README.md",
            "clusters/mgmt/cluster.yaml",
            "clusters/mgmt/workload-clusters/prod/cluster.yaml"
        ])
    );
    assert_eq!(
        src.changed_paths(&c2, &c1).unwrap().len(),
        3,
        "the diff is symmetric in its paths"
    );
    assert!(src.changed_paths(&c2, &c2).unwrap().is_empty());
    assert_eq!(src.last_good().unwrap().commit, c2);
    assert_eq!(src.sync().unwrap(), SyncOutcome::Unchanged(c2.clone()));
    (src, c1, c2)
}

#[test]
fn git_source_is_send() {
    fn assert_send<T: Send>() {}
    assert_send::<GitSource>();
    assert_send::<SourceError>();
}

#[test]
fn git_daemon_clone_and_follow_branch() {
    let up = fleet_upstream();
    let daemon = GitDaemon::start(&up.root);
    let cache = tempfile::tempdir().unwrap();
    follow_branch(
        &up,
        config(
            daemon.url("repo.git"),
            branch(),
            &cache.path().join("mirror"),
        ),
    );
}

#[test]
fn local_path_clone_and_follow_branch() {
    let up = fleet_upstream();
    let cache = tempfile::tempdir().unwrap();
    follow_branch(
        &up,
        config(up.path_url(), branch(), &cache.path().join("mirror")),
    );
    // file:// works the same.
    let cache2 = tempfile::tempdir().unwrap();
    let mut src = GitSource::open(config(
        format!("file://{}", up.path_url()),
        branch(),
        cache2.path(),
    ))
    .unwrap();
    assert_eq!(updated(src.sync().unwrap()).1.commit, up.head());
}

#[test]
fn http_clone_and_follow_branch_and_remote_commit_only_lists_refs() {
    let up = fleet_upstream();
    let server = HttpGitServer::start(&up.root);
    let cache = tempfile::tempdir().unwrap();
    let mirror = cache.path().join("mirror");
    let (mut src, _c1, c2) = follow_branch(&up, config(server.url("repo.git"), branch(), &mirror));
    assert!(
        server.log().iter().any(|r| r.is_fetch()),
        "the syncs fetched packs: {:?}",
        server.log()
    );

    // The cheap check: handshake (GET info/refs) and, with protocol v2, one ls-refs POST. No fetch.
    let c3 = up.commit_and_push(&[("clusters/mgmt/cluster.yaml", "v3")], &[], "third");
    let packs_before = packs(&mirror);
    server.clear_log();
    assert_eq!(src.remote_commit().unwrap(), c3);
    let log = server.log();
    assert!(!log.is_empty());
    for r in &log {
        let listing = (r.method == "GET"
            && r.path == "/repo.git/info/refs"
            && r.query == "service=git-upload-pack")
            || (r.method == "POST"
                && r.path == "/repo.git/git-upload-pack"
                && r.command.as_deref() == Some("ls-refs"));
        assert!(
            listing,
            "remote_commit made a request other than listing refs: {r:?} (all: {log:?})"
        );
        assert_eq!(r.status, 200);
    }
    assert!(
        log.iter().any(|r| r.command.as_deref() == Some("ls-refs")),
        "protocol v2 is used: {log:?}"
    );
    assert_eq!(packs(&mirror), packs_before, "no pack was written");
    assert!(!has_object(&mirror, &c3));
    assert_eq!(src.last_good().unwrap().commit, c2);

    // A sync that finds nothing new does not fetch either.
    let (_, rev) = updated(src.sync().unwrap());
    assert_eq!(rev.commit, c3);
    server.clear_log();
    assert_eq!(src.sync().unwrap(), SyncOutcome::Unchanged(c3));
    assert!(
        server.log().iter().all(|r| !r.is_fetch()),
        "an unchanged sync fetched: {:?}",
        server.log()
    );
}

#[test]
fn ssh_clone_and_follow_branch_with_a_read_only_deploy_key() {
    let up = fleet_upstream();
    let sshd = Sshd::start(&up.root);
    let cache = tempfile::tempdir().unwrap();
    let mut cfg = config(sshd.url(&up.bare), branch(), &cache.path().join("mirror"));
    cfg.ssh_key = Some(sshd.key.clone());
    cfg.known_hosts = Some(sshd.known_hosts.clone());
    follow_branch(&up, cfg);

    // The deploy key can only run git-upload-pack: no push, no shell.
    let push = sshd.run_as_deploy_key(&format!("git-receive-pack '{}'", up.bare.display()));
    assert!(!push.status.success());
    assert!(
        String::from_utf8_lossy(&push.stderr).contains("read-only"),
        "{push:?}"
    );
    let shell = sshd.run_as_deploy_key("id");
    assert!(!shell.status.success(), "{shell:?}");
}

#[test]
fn ssh_protocol_v0_server_and_pinned_commit_fallback() {
    let up = fleet_upstream();
    let c1 = up.head();
    let c2 = up.commit_and_push(&[("clusters/mgmt/cluster.yaml", "v2")], &[], "second");
    let sshd = Sshd::start_v0(&up.root);
    let cache = tempfile::tempdir().unwrap();
    let with_keys = |mut cfg: SourceConfig| {
        cfg.ssh_key = Some(sshd.key.clone());
        cfg.known_hosts = Some(sshd.known_hosts.clone());
        cfg
    };
    // A v0 upload-pack over a connection (not stateless HTTP) refuses a want that is not a ref tip
    // unless uploadpack.allowReachableSHA1InWant is set; the source then fetches all branches and
    // tags and finds the commit there.
    let pinned = cache.path().join("pinned");
    let mut src = GitSource::open(with_keys(config(
        sshd.url(&up.bare),
        GitRef::Commit(c1.clone()),
        &pinned,
    )))
    .unwrap();
    let (_, rev) = updated(src.sync().unwrap());
    assert_eq!(rev.commit, c1);
    assert_eq!(revision_texts(&rev)["clusters/mgmt/cluster.yaml"], MGMT);
    assert_ne!(
        git(&pinned, &["for-each-ref", "refs/capstan/all"]),
        "",
        "the fallback was used"
    );
    assert_eq!(src.sync().unwrap(), SyncOutcome::Unchanged(c1.clone()));

    // Following a branch works over v0 as well; `shallow` falls back to a full fetch there.
    let mirror = cache.path().join("shallow");
    let mut cfg = with_keys(config(sshd.url(&up.bare), branch(), &mirror));
    cfg.shallow = true;
    let mut src = GitSource::open(cfg).unwrap();
    assert_eq!(src.remote_commit().unwrap(), c2);
    assert_eq!(updated(src.sync().unwrap()).1.commit, c2);
    assert!(!mirror.join("shallow").exists() && has_object(&mirror, &c1));
    let c3 = up.commit_and_push(&[("x.yaml", "x")], &[], "third");
    let (previous, rev) = updated(src.sync().unwrap());
    assert_eq!(
        (previous.as_deref(), rev.commit.as_str()),
        (Some(c2.as_str()), c3.as_str())
    );
    assert_eq!(src.changed_paths(&c2, &c3).unwrap(), paths(&["x.yaml"]));
}

#[test]
fn ssh_host_key_is_checked_against_known_hosts() {
    let up = fleet_upstream();
    let sshd = Sshd::start(&up.root);
    let cache = tempfile::tempdir().unwrap();
    let other = cache.path().join("other_known_hosts");
    std::fs::write(&other, format!("[127.0.0.1]:{} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE4Qg4s0bnS1W4s4D8m8mWb0mrWcW3Z3yXn0Ekz0cO2V\n", sshd.port)).unwrap();
    let url = sshd.url(&up.bare);
    let mut cfg = config(url.clone(), branch(), &cache.path().join("mirror"));
    cfg.ssh_key = Some(sshd.key.clone());
    cfg.known_hosts = Some(other);
    let mut src = GitSource::open(cfg).unwrap();
    let err = src.sync().unwrap_err();
    assert!(
        matches!(err, SourceError::Remote(RemoteError::List { .. })),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&url) && msg.contains("branch main"), "{msg}");
    assert!(src.last_good().is_none());
}

#[test]
fn tags_annotated_and_lightweight() {
    let up = fleet_upstream();
    let c1 = up.head();
    git(&up.work, &["tag", "-a", "-m", "release 1", "v1"]);
    git(&up.work, &["tag", "light1"]);
    up.push();
    let c2 = up.commit_and_push(&[("clusters/mgmt/cluster.yaml", "v2")], &[], "second");
    let daemon = GitDaemon::start(&up.root);
    let cache = tempfile::tempdir().unwrap();

    for (tag, annotated) in [("v1", true), ("light1", false)] {
        let mirror = cache.path().join(tag);
        let mut src = GitSource::open(config(
            daemon.url("repo.git"),
            GitRef::Tag(tag.into()),
            &mirror,
        ))
        .unwrap();
        assert_eq!(
            src.remote_commit().unwrap(),
            c1,
            "{tag} peels to the commit"
        );
        let (_, rev) = updated(src.sync().unwrap());
        assert_eq!(rev.commit, c1, "{tag}");
        assert_eq!(revision_texts(&rev)["clusters/mgmt/cluster.yaml"], MGMT);
        assert_eq!(src.sync().unwrap(), SyncOutcome::Unchanged(c1.clone()));
        let tag_object = git(&up.bare, &["rev-parse", &format!("refs/tags/{tag}")]);
        assert_eq!(tag_object != c1, annotated);
    }

    // Moving a tag is an update like any other.
    let mut src = GitSource::open(config(
        daemon.url("repo.git"),
        GitRef::Tag("v1".into()),
        &cache.path().join("v1"),
    ))
    .unwrap();
    assert_eq!(
        updated(src.sync().unwrap()).0.as_deref(),
        Some(c1.as_str()),
        "after reopening, previous is the synced tag"
    );
    git(
        &up.work,
        &["tag", "-f", "-a", "-m", "release 1 again", "v1", &c2],
    );
    up.push();
    assert_eq!(src.remote_commit().unwrap(), c2);
    let (previous, rev) = updated(src.sync().unwrap());
    assert_eq!(
        (previous.as_deref(), rev.commit.as_str()),
        (Some(c1.as_str()), c2.as_str())
    );
    assert_eq!(
        src.changed_paths(&c1, &c2).unwrap(),
        paths(&["clusters/mgmt/cluster.yaml"])
    );
}

#[test]
fn pinned_commit() {
    let up = fleet_upstream();
    let c1 = up.head();
    let c2 = up.commit_and_push(&[("clusters/mgmt/cluster.yaml", "v2")], &[], "second");
    let _c3 = up.commit_and_push(&[("clusters/mgmt/cluster.yaml", "v3")], &[], "third");
    let server = HttpGitServer::start(&up.root);
    let daemon = GitDaemon::start(&up.root);
    let cache = tempfile::tempdir().unwrap();

    for (name, url) in [
        ("http", server.url("repo.git")),
        ("git", daemon.url("repo.git")),
        ("path", up.path_url()),
    ] {
        for (i, pinned) in [&c1, &c2].into_iter().enumerate() {
            let mirror = cache.path().join(format!("{name}-{i}"));
            let mut src = GitSource::open(config(
                url.clone(),
                GitRef::Commit(pinned.to_uppercase()),
                &mirror,
            ))
            .unwrap();
            assert_eq!(&src.remote_commit().unwrap(), pinned);
            let (previous, rev) = updated(src.sync().unwrap());
            assert_eq!(previous, None);
            assert_eq!(&rev.commit, pinned, "{name}");
            let expected = if i == 0 { MGMT } else { "v2" };
            assert_eq!(
                revision_texts(&rev)["clusters/mgmt/cluster.yaml"],
                expected,
                "{name}"
            );
            assert_eq!(src.sync().unwrap(), SyncOutcome::Unchanged(pinned.clone()));
            // Fetched by id (protocol v2), not through the fetch-everything fallback.
            assert_eq!(
                git(&mirror, &["for-each-ref", "refs/capstan/all"]),
                "",
                "{name}"
            );
        }
    }
    // Pinned-commit syncs go by id: over http only a fetch of the wanted commit, which the
    // remote does not advertise as a ref tip.
    assert!(server.log().iter().any(|r| r.is_fetch()));

    // A commit the remote does not have.
    let missing = "0123456789abcdef0123456789abcdef01234567";
    let url = server.url("repo.git");
    let mut src = GitSource::open(config(
        url.clone(),
        GitRef::Commit(missing.into()),
        &cache.path().join("missing"),
    ))
    .unwrap();
    let err = src.sync().unwrap_err();
    assert!(
        matches!(err, SourceError::Remote(RemoteError::CommitNotFound { .. })),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(missing) && err.to_string().contains(&url),
        "{err}"
    );
}

#[test]
fn remote_down_keeps_last_good_and_recovers_on_the_same_port() {
    let up = fleet_upstream();
    let mut daemon = GitDaemon::start(&up.root);
    let cache = tempfile::tempdir().unwrap();
    let url = daemon.url("repo.git");
    let mut src = GitSource::open(config(url.clone(), branch(), cache.path())).unwrap();
    let c1 = updated(src.sync().unwrap()).1.commit;

    daemon.stop();
    let c2 = up.commit_and_push(&[("clusters/mgmt/cluster.yaml", "v2")], &[], "while down");
    let err = src.sync().unwrap_err();
    assert!(err.to_string().contains(&url), "error names the URL: {err}");
    assert!(
        err.to_string().contains("branch main"),
        "error names the ref: {err}"
    );
    assert!(src.remote_commit().is_err());
    let last = src.last_good().expect("last_good survives the outage");
    assert_eq!(last.commit, c1);
    assert_eq!(revision_texts(last)["clusters/mgmt/cluster.yaml"], MGMT);

    daemon.restart();
    assert_eq!(daemon.url("repo.git"), url);
    let (previous, rev) = updated(src.sync().unwrap());
    assert_eq!(
        (previous.as_deref(), rev.commit.as_str()),
        (Some(c1.as_str()), c2.as_str())
    );
    assert_eq!(
        src.changed_paths(&c1, &c2).unwrap(),
        paths(&["clusters/mgmt/cluster.yaml"])
    );
}

#[test]
fn force_push_to_unrelated_history() {
    let up = fleet_upstream();
    let server = HttpGitServer::start(&up.root);
    let cache = tempfile::tempdir().unwrap();
    let url = server.url("repo.git");
    let mut src =
        GitSource::open(config(url.clone(), branch(), &cache.path().join("full"))).unwrap();
    let c1 = updated(src.sync().unwrap()).1.commit;

    // Keep README.md byte-identical, change one file, drop one, add one.
    let rewritten = up.force_push_unrelated(&[
        ("README.md", README),
        ("clusters/mgmt/cluster.yaml", "rewritten"),
        ("clusters/other/cluster.yaml", "other"),
    ]);
    let ancestor = source_support::git_command(&up.bare)
        .args(["merge-base", "--is-ancestor", &c1, &rewritten])
        .status()
        .unwrap();
    assert!(
        !ancestor.success(),
        "the new tip does not descend from the old one"
    );

    assert_eq!(src.remote_commit().unwrap(), rewritten);
    let (previous, rev) = updated(src.sync().unwrap());
    assert_eq!(previous.as_deref(), Some(c1.as_str()));
    assert_eq!(rev.commit, rewritten);
    assert_eq!(
        revision_texts(&rev),
        map(&[
            ("README.md", README),
            ("clusters/mgmt/cluster.yaml", "rewritten"),
            ("clusters/other/cluster.yaml", "other")
        ])
    );
    // The old commit is still in the mirror, so the tree diff stays exact across the rewrite.
    assert_eq!(
        src.changed_paths(&c1, &rewritten).unwrap(),
        paths(&[
            "clusters/mgmt/cluster.yaml",
            "clusters/mgmt/workload-clusters/dev/cluster.yaml",
            "clusters/other/cluster.yaml"
        ])
    );

    // A shallow mirror that never saw the old history (a replica, or a wiped cache) cannot diff:
    // the caller is told to treat everything as changed.
    let mut cfg = config(url.clone(), branch(), &cache.path().join("fresh"));
    cfg.shallow = true;
    let mut fresh = GitSource::open(cfg).unwrap();
    assert_eq!(updated(fresh.sync().unwrap()).1.commit, rewritten);
    let err = fresh.changed_paths(&c1, &rewritten).unwrap_err();
    assert!(err.everything_changed(), "{err:?}");
    assert!(
        err.to_string().contains(&c1) && err.to_string().contains(&url),
        "{err}"
    );
    // A commit that was never fetched on the `to` side is a different error.
    let err = fresh.changed_paths(&rewritten, &c1).unwrap_err();
    assert!(!err.everything_changed(), "{err:?}");

    // A force-push seen by the shallow mirror: still depth 1, still an exact diff.
    let again = up.force_push_unrelated(&[("README.md", "again")]);
    let (previous, rev) = updated(fresh.sync().unwrap());
    assert_eq!(
        (previous.as_deref(), rev.commit.as_str()),
        (Some(rewritten.as_str()), again.as_str())
    );
    assert_eq!(revision_texts(&rev), map(&[("README.md", "again")]));
    assert_eq!(
        fresh.changed_paths(&rewritten, &again).unwrap(),
        paths(&[
            "README.md",
            "clusters/mgmt/cluster.yaml",
            "clusters/other/cluster.yaml"
        ])
    );
    let (_, rev) = updated(src.sync().unwrap());
    assert_eq!(
        rev.commit, again,
        "the full mirror follows the second rewrite too"
    );
}

#[test]
fn http_protocol_v0_server() {
    let up = fleet_upstream();
    let c1 = up.head();
    git(&up.work, &["tag", "-a", "-m", "release 1", "v1"]);
    up.push();
    let server = HttpGitServer::start_v0(&up.root);
    let cache = tempfile::tempdir().unwrap();
    let url = server.url("repo.git");
    let (mut src, _, c2) = follow_branch(
        &up,
        config(url.clone(), branch(), &cache.path().join("branch")),
    );

    // v0 advertises every ref in the GET; listing is that one request.
    let c3 = up.commit_and_push(&[("clusters/mgmt/cluster.yaml", "v3")], &[], "third");
    server.clear_log();
    assert_eq!(src.remote_commit().unwrap(), c3);
    let log = server.log();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(
        (log[0].method.as_str(), log[0].path.as_str()),
        ("GET", "/repo.git/info/refs")
    );
    assert_eq!(log[0].command, None, "protocol v0: {log:?}");

    // Annotated tags are advertised peeled.
    let mut tag = GitSource::open(config(
        url.clone(),
        GitRef::Tag("v1".into()),
        &cache.path().join("tag"),
    ))
    .unwrap();
    assert_eq!(tag.remote_commit().unwrap(), c1);
    assert_eq!(updated(tag.sync().unwrap()).1.commit, c1);

    // A pinned commit that is not a ref tip: smart HTTP v0 (stateless) still serves reachable
    // commits by id.
    let pinned = cache.path().join("pinned");
    let mut src =
        GitSource::open(config(url.clone(), GitRef::Commit(c2.clone()), &pinned)).unwrap();
    let (_, rev) = updated(src.sync().unwrap());
    assert_eq!(rev.commit, c2);
    assert_eq!(
        git(&pinned, &["for-each-ref", "refs/capstan/all"]),
        "",
        "fetched by id"
    );

    // `shallow` against a v0 server: gix would send `deepen-relative` along (see
    // source::remote), so the source fetches the full history on purpose, and it works.
    let full = cache.path().join("shallow");
    let mut cfg = config(url, branch(), &full);
    cfg.shallow = true;
    let mut src = GitSource::open(cfg).unwrap();
    assert_eq!(updated(src.sync().unwrap()).1.commit, c3);
    assert!(!full.join("shallow").exists());
    assert!(has_object(&full, &c1) && has_object(&full, &c2));
}

#[test]
fn shallow_clone_over_http_git_and_ssh() {
    let up = fleet_upstream();
    let c1 = up.head();
    let c2 = up.commit_and_push(&[("clusters/mgmt/cluster.yaml", "v2")], &[], "second");
    let c3 = up.commit_and_push(&[("clusters/mgmt/cluster.yaml", "v3")], &[], "third");
    let server = HttpGitServer::start(&up.root);
    let daemon = GitDaemon::start(&up.root);
    let sshd = Sshd::start(&up.root);
    let cache = tempfile::tempdir().unwrap();

    let c4 = {
        let mut last = c3.clone();
        for (name, url) in [
            ("http", server.url("repo.git")),
            ("git", daemon.url("repo.git")),
            ("ssh", sshd.url(&up.bare)),
            ("path", up.path_url()),
        ] {
            let mirror = cache.path().join(name);
            let mut cfg = config(url, branch(), &mirror);
            cfg.shallow = true;
            cfg.ssh_key = Some(sshd.key.clone());
            cfg.known_hosts = Some(sshd.known_hosts.clone());
            let mut src = GitSource::open(cfg).unwrap();
            let (_, rev) = updated(src.sync().unwrap());
            assert_eq!(rev.commit, last, "{name}");
            assert_eq!(
                revision_texts(&rev)["clusters/mgmt/cluster.yaml"],
                if last == c3 { "v3" } else { "v4" }
            );
            assert!(
                mirror.join("shallow").is_file(),
                "{name}: the mirror is shallow"
            );
            assert!(has_object(&mirror, &last), "{name}");
            assert!(
                !has_object(&mirror, &c2) && !has_object(&mirror, &c1),
                "{name}: history beyond depth 1 was not fetched"
            );

            // Following the branch stays shallow and diffs stay exact (both tips are present).
            let next = up.commit_and_push(
                &[
                    ("clusters/mgmt/cluster.yaml", "v4"),
                    (&format!("{name}.txt"), name),
                ],
                &[],
                name,
            );
            let (previous, rev) = updated(src.sync().unwrap());
            assert_eq!(
                (previous.as_deref(), rev.commit.as_str()),
                (Some(last.as_str()), next.as_str())
            );
            let mut expected = vec![format!("{name}.txt")];
            if last == c3 {
                expected.push("clusters/mgmt/cluster.yaml".into());
            }
            assert_eq!(
                src.changed_paths(&last, &next).unwrap(),
                expected.iter().map(PathBuf::from).collect()
            );
            assert!(!has_object(&mirror, &c2), "{name}: still shallow");
            last = next;
        }
        last
    };
    assert_ne!(c4, c3);
}

#[test]
fn reopening_the_cache_does_not_reclone() {
    let up = fleet_upstream();
    let server = HttpGitServer::start(&up.root);
    let cache = tempfile::tempdir().unwrap();
    let mirror = cache.path().join("mirror");
    let cfg = config(server.url("repo.git"), branch(), &mirror);
    let c1 = {
        let mut src = GitSource::open(cfg.clone()).unwrap();
        updated(src.sync().unwrap()).1.commit
    };
    let packs_before = packs(&mirror);
    assert!(!packs_before.is_empty());

    // Restart: same commit on the remote. No fetch, the tree is read from the mirror, and
    // `previous` tells the caller what the previous process had synced.
    server.clear_log();
    let mut src = GitSource::open(cfg.clone()).unwrap();
    assert!(src.last_good().is_none());
    let (previous, rev) = updated(src.sync().unwrap());
    assert_eq!(
        (previous.as_deref(), rev.commit.as_str()),
        (Some(c1.as_str()), c1.as_str())
    );
    assert_eq!(revision_texts(&rev).len(), 3);
    assert!(
        server.log().iter().all(|r| !r.is_fetch()),
        "reopening fetched: {:?}",
        server.log()
    );
    assert_eq!(packs(&mirror), packs_before);
    drop(src);

    // Restart after a push: only the new objects come (one more, small pack).
    let c2 = up.commit_and_push(&[("clusters/mgmt/cluster.yaml", "v2")], &[], "second");
    server.clear_log();
    let mut src = GitSource::open(cfg).unwrap();
    let (previous, rev) = updated(src.sync().unwrap());
    assert_eq!(
        (previous.as_deref(), rev.commit.as_str()),
        (Some(c1.as_str()), c2.as_str())
    );
    assert_eq!(
        src.changed_paths(&c1, &c2).unwrap(),
        paths(&["clusters/mgmt/cluster.yaml"])
    );
    let after = packs(&mirror);
    assert_eq!(after.len(), packs_before.len() + 1);
    assert!(
        packs_before.iter().all(|p| after.contains(p)),
        "old packs are kept"
    );
    assert_eq!(server.log().iter().filter(|r| r.is_fetch()).count(), 1);

    // A different URL on the same cache: the old tracking state is dropped, not reused.
    let other = Upstream::new(&[("only.yaml", "x")]);
    let mut src = GitSource::open(config(other.path_url(), branch(), &mirror)).unwrap();
    let (previous, rev) = updated(src.sync().unwrap());
    assert_eq!(previous, None);
    assert_eq!(revision_texts(&rev), map(&[("only.yaml", "x")]));
}

#[test]
fn symlinks_and_large_files() {
    let up = fleet_upstream();
    let w = &up.work;
    let link = |target: &str, at: &str| symlink(w, target, at);
    link("../../../etc/passwd", "clusters/mgmt/evil.yaml");
    link("/etc/passwd", "absolute.yaml");
    link("missing.yaml", "dangling.yaml");
    link("clusters/mgmt/cluster.yaml", "alias.yaml");
    link("alias.yaml", "alias-of-alias.yaml");
    link("workload-clusters/dev", "clusters/mgmt/dev-link");
    link("..", "clusters/loop");
    link("clusters/mgmt/../../..", "up-and-out");
    std::fs::write(w.join("big.bin"), vec![b'x'; MAX_FILE_SIZE as usize + 1]).unwrap();
    let c = up.commit("links");
    up.push();

    let cache = tempfile::tempdir().unwrap();
    let mut src = GitSource::open(config(up.path_url(), branch(), cache.path())).unwrap();
    let (_, rev) = updated(src.sync().unwrap());
    assert_eq!(rev.commit, c);
    let e = &rev.tree.entries;
    let escaping = |p: &str, target: &str| {
        assert_eq!(
            e[Path::new(p)],
            Entry::EscapingSymlink(PathBuf::from(target)),
            "{p}"
        )
    };
    escaping("clusters/mgmt/evil.yaml", "../../../etc/passwd");
    escaping("absolute.yaml", "/etc/passwd");
    escaping("dangling.yaml", "missing.yaml");
    escaping("clusters/loop", "..");
    escaping("up-and-out", "clusters/mgmt/../../..");
    assert_eq!(e[Path::new("alias.yaml")], Entry::File(MGMT.into()));
    assert_eq!(
        e[Path::new("alias-of-alias.yaml")],
        Entry::File(MGMT.into())
    );
    assert_eq!(
        e[Path::new("clusters/mgmt/dev-link/cluster.yaml")],
        Entry::File(DEV.into())
    );
    assert_eq!(e[Path::new("big.bin")], Entry::TooLarge(MAX_FILE_SIZE + 1));

    // A change behind a link shows up at the link's path too.
    let c2 = up.commit_and_push(
        &[(
            "clusters/mgmt/workload-clusters/dev/cluster.yaml",
            "changed",
        )],
        &[],
        "dev",
    );
    let (_, rev) = updated(src.sync().unwrap());
    assert_eq!(
        rev.tree.entries[Path::new("clusters/mgmt/dev-link/cluster.yaml")],
        Entry::File(b"changed".to_vec())
    );
    assert_eq!(
        src.changed_paths(&c, &c2).unwrap(),
        paths(&[
            "clusters/mgmt/dev-link/cluster.yaml",
            "clusters/mgmt/workload-clusters/dev/cluster.yaml"
        ])
    );
}

#[test]
fn a_revision_read_after_another_reads_like_a_fresh_read() {
    // The next revision takes its unchanged files from the last one (by blob id); whatever
    // changed between them, it must hold exactly what reading it on its own gives.
    let up = fleet_upstream();
    let w = &up.work;
    let link = |target: &str, at: &str| symlink(w, target, at);
    link("clusters/mgmt/cluster.yaml", "alias.yaml");
    link("workload-clusters/dev", "clusters/mgmt/dev-link");
    std::fs::write(w.join("big.bin"), vec![b'x'; MAX_FILE_SIZE as usize + 1]).unwrap();
    up.commit("first");
    up.push();
    let cache = tempfile::tempdir().unwrap();
    let mut src = GitSource::open(config(up.path_url(), branch(), cache.path())).unwrap();
    let (_, first) = updated(src.sync().unwrap());
    assert_eq!(
        first.tree.entries[Path::new("alias.yaml")],
        Entry::File(MGMT.into())
    );

    // A file changed behind a directory link, a link retargeted, a large file made small, a
    // file removed, and the content of one file added at a new path.
    link(
        "clusters/mgmt/workload-clusters/dev/cluster.yaml",
        "alias.yaml",
    );
    let c2 = up.commit_and_push(
        &[
            ("clusters/mgmt/workload-clusters/dev/cluster.yaml", "dev v2"),
            ("big.bin", "small now"),
            ("clusters/mgmt/workload-clusters/copy/cluster.yaml", MGMT),
        ],
        &["README.md"],
        "second",
    );
    let (_, second) = updated(src.sync().unwrap());
    assert_eq!(second.commit, c2);
    let fresh = read_local(w, &c2).unwrap();
    assert_eq!(second.tree, fresh.tree);
    let e = &second.tree.entries;
    assert_eq!(e[Path::new("alias.yaml")], Entry::File(b"dev v2".to_vec()));
    assert_eq!(
        e[Path::new("clusters/mgmt/dev-link/cluster.yaml")],
        Entry::File(b"dev v2".to_vec())
    );
    assert_eq!(e[Path::new("big.bin")], Entry::File(b"small now".to_vec()));
    assert!(!e.contains_key(Path::new("README.md")));

    // And back: the large file again, the link as it was.
    link("clusters/mgmt/cluster.yaml", "alias.yaml");
    std::fs::write(w.join("big.bin"), vec![b'x'; MAX_FILE_SIZE as usize + 1]).unwrap();
    let c3 = up.commit("third");
    up.push();
    let (_, third) = updated(src.sync().unwrap());
    assert_eq!(third.commit, c3);
    assert_eq!(third.tree, read_local(w, &c3).unwrap().tree);
    assert_eq!(
        third.tree.entries[Path::new("big.bin")],
        Entry::TooLarge(MAX_FILE_SIZE + 1)
    );
}

#[test]
fn configuration_and_ref_errors_name_the_url_and_ref() {
    let up = fleet_upstream();
    let cache = tempfile::tempdir().unwrap();
    let url = up.path_url();

    let bad = GitSource::open(config(
        url.clone(),
        GitRef::Commit("abc123".into()),
        cache.path(),
    ))
    .unwrap_err();
    assert!(matches!(bad, SourceError::InvalidConfig { .. }), "{bad:?}");
    assert!(
        bad.to_string().contains("abc123") && bad.to_string().contains(&url),
        "{bad}"
    );

    let mut cfg = config(url.clone(), branch(), cache.path());
    cfg.ssh_key = Some(cache.path().join("no-such-key"));
    assert!(matches!(
        GitSource::open(cfg).unwrap_err(),
        SourceError::InvalidConfig { .. }
    ));

    let mut src = GitSource::open(config(
        url.clone(),
        GitRef::Branch("nope".into()),
        cache.path(),
    ))
    .unwrap();
    let err = src.sync().unwrap_err();
    assert!(
        matches!(err, SourceError::Remote(RemoteError::RefNotFound { .. })),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("branch nope does not exist at {url}")
    );
    assert!(src.remote_commit().is_err());

    let not_a_repo = cache.path().join("file");
    std::fs::create_dir_all(&not_a_repo).unwrap();
    std::fs::write(not_a_repo.join("x"), "x").unwrap();
    let err = GitSource::open(config(url.clone(), branch(), &not_a_repo)).unwrap_err();
    assert!(matches!(err, SourceError::Mirror(_)), "{err:?}");

    let mut src = GitSource::open(config(
        format!("{url}-missing"),
        branch(),
        &cache.path().join("m2"),
    ))
    .unwrap();
    let err = src.sync().unwrap_err();
    assert!(err.to_string().contains(&format!("{url}-missing")), "{err}");

    // Credentials in URLs never reach messages.
    let mut src = GitSource::open(config(
        "http://user:s3cret@127.0.0.1:1/repo.git".into(),
        branch(),
        &cache.path().join("m3"),
    ))
    .unwrap();
    let err = src.sync().unwrap_err();
    assert!(
        !err.to_string().contains("s3cret") && !format!("{err:?}").contains("s3cret"),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("http://user:***@127.0.0.1:1/repo.git"),
        "{err}"
    );
    let mut src = GitSource::open(config(
        "http://ghp_t0ken@127.0.0.1:1/repo.git".into(),
        branch(),
        &cache.path().join("m4"),
    ))
    .unwrap();
    let err = src.sync().unwrap_err();
    assert!(
        !err.to_string().contains("t0ken") && !format!("{err:?}").contains("t0ken"),
        "{err}"
    );
    assert!(!format!("{src:?}").contains("t0ken"));
    let stored = git(&cache.path().join("m4"), &["config", "remote.origin.url"]);
    assert_eq!(
        stored, "http://***@127.0.0.1:1/repo.git",
        "no credential on disk"
    );
}

/// A long-running agent syncs every push. Each fetch adds a pack; the mirror keeps working past
/// the number of pack indices its object store was opened with (found by the fault runs: after
/// about 33 fetches every sync failed with "too few index slots" until a restart), and the packs
/// never pile up past [`capstan::source::PACK_LIMIT`]: the mirror is rebuilt by a fresh fetch.
#[test]
fn a_long_running_source_survives_many_fetches_and_bounds_its_packs() {
    let up = fleet_upstream();
    let daemon = GitDaemon::start(&up.root);
    let tmp = tempfile::tempdir().unwrap();
    let mirror = tmp.path().join("mirror");
    let mut src = GitSource::open(config(daemon.url("repo.git"), branch(), &mirror)).unwrap();
    src.sync().unwrap();
    let pushes = capstan::source::PACK_LIMIT + 40;
    let mut most = 0;
    for i in 0..pushes {
        let c = up.commit_and_push(
            &[(
                "clusters/mgmt/workload-clusters/dev/cluster.yaml",
                &format!("{DEV}# {i}\n"),
            )],
            &[],
            &format!("push {i}"),
        );
        let (_, rev) = updated(
            src.sync()
                .unwrap_or_else(|e| panic!("sync after push {i}: {e}")),
        );
        assert_eq!(rev.commit, c, "push {i}");
        assert_eq!(
            revision_texts(&rev)["clusters/mgmt/workload-clusters/dev/cluster.yaml"],
            format!("{DEV}# {i}\n")
        );
        most = most.max(packs(&mirror).len());
    }
    assert!(
        most <= capstan::source::PACK_LIMIT + 1,
        "{most} packs at most after {pushes} fetches"
    );
    assert!(
        packs(&mirror).len() < capstan::source::PACK_LIMIT,
        "the mirror was compacted along the way"
    );
}

/// A valid fleet (management `mgmt`, workloads `ok` and `w`) as scaffolded.
fn valid_fleet() -> Vec<(String, String)> {
    use capstan_layout::scaffold::{self, ClusterRequest};
    let mut tree = capstan_layout::Tree::new();
    let mut out = Vec::new();
    let req = |name: &str, mgmt: Option<&str>, pods: &str, services: &str| ClusterRequest {
        name: name.into(),
        management: mgmt.map(str::to_string),
        provider: "docker".into(),
        kubernetes_version: Some("1.33".into()),
        pod_cidr: Some(pods.into()),
        service_cidr: Some(services.into()),
        ..Default::default()
    };
    for r in [
        req("mgmt", None, "192.168.0.0/16", "10.96.0.0/12"),
        req("ok", Some("mgmt"), "172.16.0.0/16", "10.112.0.0/16"),
        req("w", Some("mgmt"), "172.17.0.0/16", "10.113.0.0/16"),
    ] {
        for (p, t) in scaffold::plan(&tree, &r).unwrap().files {
            tree.insert(p.clone(), t.clone());
            out.push((p.display().to_string(), t));
        }
    }
    out
}

/// Hostile repositories, read from a Git commit (the agent's source) and from the same files
/// as a working copy (`capstan validate`): each is rejected with the same diagnostics both
/// ways, naming the path; the cluster it is in does not render, the others do, and a tree that
/// hides the list of clusters refuses the whole revision.
#[test]
fn hostile_commits_are_rejected_like_working_copies() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    const W: &str = "clusters/mgmt/workload-clusters/w";
    type Setup = fn(&Path);
    let cases: Vec<(&str, Setup, &str, &str, Option<&str>)> = vec![
        // (what, setup in the work tree, code, path, owner cluster or None for the fleet)
        (
            "symlink out of the repository",
            |w| std::os::unix::fs::symlink("/etc/hostname", w.join(W).join("x.yaml")).unwrap(),
            "symlink-escapes",
            "clusters/mgmt/workload-clusters/w/x.yaml",
            Some("w"),
        ),
        (
            "symlink into .git",
            |w| {
                std::os::unix::fs::symlink("../../../../.git/config", w.join(W).join("x.yaml"))
                    .unwrap()
            },
            "symlink-into-git",
            "clusters/mgmt/workload-clusters/w/x.yaml",
            Some("w"),
        ),
        (
            "a file over the size limit",
            |w| {
                std::fs::write(
                    w.join(W).join("big.yaml"),
                    vec![b'#'; MAX_FILE_SIZE as usize + 1],
                )
                .unwrap()
            },
            "file-too-large",
            "clusters/mgmt/workload-clusters/w/big.yaml",
            Some("w"),
        ),
        (
            "a binary file",
            |w| std::fs::write(w.join(W).join("logo.yaml"), b"\x89PNG\r\n\x1a\n\0\0").unwrap(),
            "binary-file",
            "clusters/mgmt/workload-clusters/w/logo.yaml",
            Some("w"),
        ),
        (
            "a file that is not UTF-8",
            |w| std::fs::write(w.join(W).join("notes.yaml"), b"# M\xfcnchen\n").unwrap(),
            "not-utf8",
            "clusters/mgmt/workload-clusters/w/notes.yaml",
            Some("w"),
        ),
        (
            "a name that is not UTF-8",
            |w| {
                let p = w.join(W).join(OsStr::from_bytes(b"caf\xe9.yaml"));
                std::fs::write(p, "# x\n").unwrap()
            },
            "invalid-path",
            "clusters/mgmt/workload-clusters/w/caf\u{FFFD}.yaml",
            Some("w"),
        ),
        (
            "names that differ only in case",
            |w| std::fs::write(w.join(W).join("Cluster.yaml"), "# x\n").unwrap(),
            "case-collision",
            "clusters/mgmt/workload-clusters/w/Cluster.yaml",
            Some("w"),
        ),
        (
            "10,000 files in a directory",
            |w| {
                for i in 0..10_000 {
                    std::fs::write(w.join(W).join(format!("f{i:05}.yaml")), "# x\n").unwrap();
                }
            },
            "too-many-entries",
            "clusters/mgmt/workload-clusters/w",
            Some("w"),
        ),
        (
            "deep nesting",
            |w| {
                let mut d = w.join(W);
                for _ in 0..40 {
                    d.push("d");
                }
                std::fs::create_dir_all(&d).unwrap();
                std::fs::write(d.join("x.yaml"), "# x\n").unwrap();
            },
            "too-deep",
            "clusters/mgmt/workload-clusters/w/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d/d",
            Some("w"),
        ),
        (
            "a Secret with data",
            |w| {
                std::fs::write(
                    w.join(W).join("secret.yaml"),
                    "apiVersion: v1\nkind: Secret\nmetadata: {name: w-creds}\ndata: {token: c2VjcmV0}\n",
                )
                .unwrap()
            },
            "secret-with-data",
            "clusters/mgmt/workload-clusters/w/secret.yaml",
            Some("w"),
        ),
        (
            "a YAML bomb",
            |w| {
                let mut s = String::from(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w-lol}\ndata:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n",
                );
                for i in 1..9 {
                    let refs = vec![format!("*{}", (b'a' + i - 1) as char); 10].join(", ");
                    s.push_str(&format!("  {c}: &{c} [{refs}]\n", c = (b'a' + i) as char));
                }
                std::fs::write(w.join(W).join("bomb.yaml"), s).unwrap()
            },
            "yaml-syntax",
            "clusters/mgmt/workload-clusters/w/bomb.yaml",
            Some("w"),
        ),
        (
            "10,000 workload directories' worth of entries",
            |w| {
                let d = w.join("clusters/mgmt/workload-clusters");
                for i in 0..10_000 {
                    std::fs::write(d.join(format!("f{i:05}.md")), "x\n").unwrap();
                }
            },
            "too-many-entries",
            "clusters/mgmt/workload-clusters",
            None,
        ),
    ];
    for (what, setup, code, path, owner) in cases {
        let files = valid_fleet();
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        let up = Upstream::new(&refs);
        setup(&up.work);
        let commit = up.commit(what);
        up.push();
        let cache = tempfile::tempdir().unwrap();
        let mut src = GitSource::open(config(up.path_url(), branch(), cache.path())).unwrap();
        let (_, rev) = updated(src.sync().unwrap());
        assert_eq!(rev.commit, commit);
        let from_git = capstan_layout::load(&rev.tree);
        let from_dir = capstan_layout::load(&capstan_layout::Tree::from_dir(&up.work).unwrap());
        let shown = |f: &capstan_layout::Fleet| {
            let mut d: Vec<String> = f.all_diagnostics().iter().map(|d| d.to_string()).collect();
            d.sort();
            d
        };
        assert_eq!(
            shown(&from_git),
            shown(&from_dir),
            "{what}: Git and working copy differ"
        );
        let found = from_git.all_diagnostics().into_iter().find(|d| {
            d.code.as_str() == code
                && d.file
                    .as_ref()
                    .map(|f| f.to_string_lossy().into_owned())
                    .as_deref()
                    == Some(path)
        });
        let Some(found) = found else {
            panic!("{what}: no {code} at {path}: {:#?}", shown(&from_git));
        };
        assert_eq!(found.cluster.as_deref(), owner, "{what}: {found}");
        match owner {
            Some(_) => {
                let w = from_git.cluster("w").expect("w is still a cluster");
                assert!(w.objects.is_none(), "{what}: w rendered");
                for ok in ["mgmt", "ok"] {
                    assert!(
                        from_git.cluster(ok).is_some_and(|c| c.is_valid()),
                        "{what}: {ok}"
                    );
                }
                assert!(from_git.unreadable().is_none(), "{what}");
            }
            None => assert!(from_git.unreadable().is_some(), "{what}: not refused"),
        }
    }
}
