//! Pull-request plans and commit statuses from the real `capstan run`: the repository is served by
//! `git daemon` (pull-request heads as `refs/pull/N/head`, as GitHub serves them), the
//! management cluster is the real API server, and GitHub is the stand-in that checks every
//! request against GitHub's documented REST API.
//!
//! One agent run goes through: a warning at start that its token can push to the repository
//! (log and `capstan_github_push_access`); statuses per cluster on the applied commit; a PR
//! opened, where a commenter has already posted a fake plan carrying capstan's marker, planned
//! against live state into one comment of capstan's own and a `capstan/plan` status (nothing
//! applied, the commenter's comment never edited); a push that breaks validation (failure with
//! file:line, the same comment edited); a restart (capstan's comment found again, not the
//! commenter's); a fork (not planned); a PR touching files outside `clusters/` (failure); and a
//! token without the needed scope, with which the agent keeps reconciling. The plan reads the daemon's watch cache: the audit log shows no list of a
//! Cluster API kind under the agent's credential while it plans.
//!
//! A restarted agent starts with an empty dashboard board and no webhook to fill it: it lists
//! the open pull requests (page after page, by the `Link` header) and plans each again, so the
//! board shows them at once; one closed while it was down is not planned nor shown.
//!
//! With two replicas under leader election, a PR announced to the follower is handed over
//! through the Lease and planned by the leader alone: the follower makes no request but its
//! Lease's, and the hand-over is removed from the Lease once taken.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::source_support;
use crate::source_support::agent::{
    fleet_with, get, machine_deployments, post, post_event, push_body, scrape, value_in,
    wait_for_revision, wait_metrics,
};
use crate::source_support::daemon::GitDaemon;
use crate::source_support::github::{Comment, Fault, GitHubStandIn, User, capstan_bot};
use crate::source_support::{Upstream, free_port, git};
use capstan_harness::ControlPlane;
use capstan_harness::audit::AuditMark;

const SECRET: &str = "pr-plans-secret";
const TOKEN: &str = "ghp_prplans";
const MARKER: &str = "<!-- capstan:plan -->";

use crate::source_support::agent::Running as Agent;

/// One agent (`capstan run` with GitHub) and what it needs: its ports, its directory (token,
/// mirror, logs), and a token of its own for the installed ServiceAccount (`capstan install`'s
/// CRD and rules), whose credential id tells its requests apart in the audit log.
/// One workload cluster `w-<tag>` under `m-<tag>` served over Git, the GitHub stand-in, and the
/// setup of an agent (`name`) with its dashboard on `board`.
struct Bed {
    files: Vec<(String, String)>,
    up: Upstream,
    _daemon: GitDaemon,
    gh: GitHubStandIn,
    board: u16,
    setup: Setup,
}

impl Bed {
    async fn new(cp: &capstan_harness::ControlPlane, tag: &str, name: &str) -> Bed {
        let files = fleet_with(tag, &[&format!("w-{tag}")]);
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        let up = Upstream::new(&refs);
        let daemon = GitDaemon::start(&up.root);
        let gh = GitHubStandIn::start("acme/fleet", "/api/v3", TOKEN).await;
        let board = free_port();
        let dashboard_addr = format!("127.0.0.1:{board}");
        let setup = Setup::new(
            cp,
            daemon.url("repo.git"),
            &format!("m-{tag}"),
            name,
            &["--dashboard-addr", &dashboard_addr],
        )
        .await;
        Bed {
            files,
            up,
            _daemon: daemon,
            gh,
            board,
            setup,
        }
    }
}

struct Setup {
    url: String,
    management: String,
    hook: u16,
    metrics: u16,
    dir: tempfile::TempDir,
    kubeconfig: std::path::PathBuf,
    credential: String,
    tag: String,
    /// More arguments of `capstan run` (leader election).
    extra: Vec<String>,
}

impl Setup {
    async fn new(
        cp: &capstan_harness::ControlPlane,
        url: String,
        management: &str,
        tag: &str,
        extra: &[&str],
    ) -> Setup {
        let (kubeconfig, credential) = capstan::install::testing::agent_credential(cp, tag).await;
        Setup {
            url,
            management: management.into(),
            hook: free_port(),
            metrics: free_port(),
            dir: tempfile::tempdir().unwrap(),
            kubeconfig,
            credential,
            tag: tag.into(),
            extra: extra.iter().map(|a| a.to_string()).collect(),
        }
    }

    /// Starts the agent; returns once its webhook listens.
    async fn start(&self, gh: &GitHubStandIn, log: &str) -> Agent {
        let token = self.dir.path().join("token");
        std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args([
                "run",
                "--repo",
                &self.url,
                "--interval",
                "1h",
                "--management",
                &self.management,
            ])
            .args(&self.extra)
            .args(["--webhook-addr", &format!("127.0.0.1:{}", self.hook)])
            .args(["--metrics-addr", &format!("127.0.0.1:{}", self.metrics)])
            .args(["--github-api-url", &gh.url(), "--github-repo", "acme/fleet"])
            .arg("--github-token-file")
            .arg(&token)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("mirror"))
            .env("CAPSTAN_WEBHOOK_SECRET", SECRET)
            // Its identity in a leader election.
            .env("POD_NAME", &self.tag)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.path().join(log)).unwrap())
            .spawn()
            .unwrap();
        let agent = Agent(child);
        let up = (0..400).any(|_| {
            std::thread::sleep(Duration::from_millis(25));
            std::net::TcpStream::connect(("127.0.0.1", self.hook)).is_ok()
        });
        assert!(up, "{}", self.log(log));
        agent
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    /// This agent's requests since `mark` (its credential's), but the watches it keeps open and
    /// its requests of `except` (a plural resource).
    fn requests(&self, cp: &ControlPlane, mark: AuditMark, except: &str) -> Vec<String> {
        cp.audit()
            .events_since(mark)
            .unwrap()
            .into_iter()
            .filter(|e| {
                e.credential_id() == Some(self.credential.as_str())
                    && e.verb != "watch"
                    && e.resource() != Some(except)
            })
            .map(|e| format!("{} {}", e.verb, e.request_uri))
            .collect()
    }
}

/// The Cluster API kinds (and capstan's statuses) a plan reads live state from.
const LIVE_KINDS: &[&str] = &[
    "clusters",
    "kubeadmcontrolplanes",
    "machinedeployments",
    "machinesets",
    "helmchartproxies",
    "managedclusters",
];

/// Lists of [`LIVE_KINDS`] among `requests`.
fn lists_of_live_kinds(requests: &[String]) -> Vec<&String> {
    requests
        .iter()
        .filter(|r| {
            r.starts_with("list ")
                && LIVE_KINDS.iter().any(|k| {
                    r.split('?')
                        .next()
                        .unwrap_or("")
                        .ends_with(&format!("/{k}"))
                })
        })
        .collect()
}

fn pr_body(action: &str, number: u64, sha: &str, head_repo: &str) -> String {
    json!({
        "action": action,
        "number": number,
        "pull_request": {
            "number": number,
            "head": {"sha": sha, "ref": format!("pr-{number}"), "repo": {"full_name": head_repo}},
            "base": {"ref": "main", "repo": {"full_name": "acme/fleet"}},
        },
        "repository": {"full_name": "acme/fleet"},
    })
    .to_string()
}

/// A dashboard page's HTML, fetched with a bearer token.
fn dashboard_page(port: u16, path: &str, token: &str) -> String {
    let out = fetch_page(port, path, token).unwrap();
    assert_eq!(out.split_whitespace().nth(1), Some("200"), "{out}");
    out
}

/// The whole answer to a GET of a dashboard page (status line, headers, HTML).
fn fetch_page(port: u16, path: &str, token: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

fn signed(body: &str) -> String {
    capstan::serve::webhook::sign(SECRET.as_bytes(), body.as_bytes())
}

/// Commits `files` on a branch off main and publishes it as `refs/pull/<n>/head`.
fn push_pr(up: &Upstream, n: u64, files: &[(&str, &str)], msg: &str) -> String {
    let branch = format!("pr-{n}");
    let exists = source_support::git_command(&up.work)
        .args(["rev-parse", "--verify", "-q", &branch])
        .status()
        .unwrap()
        .success();
    if exists {
        git(&up.work, &["checkout", "-q", &branch]);
    } else {
        git(&up.work, &["checkout", "-q", "-b", &branch, "main"]);
    }
    up.write(files);
    let sha = up.commit(msg);
    git(
        &up.work,
        &[
            "push",
            "-q",
            "-f",
            "origin",
            &format!("HEAD:refs/pull/{n}/head"),
        ],
    );
    git(&up.work, &["checkout", "-q", "main"]);
    sha
}

async fn md_replicas(client: &kube::Client) -> Option<i64> {
    let md = machine_deployments(client, "t-prp")
        .get("w-prp-md-0")
        .await
        .ok()?;
    md.data.pointer("/spec/replicas").and_then(|v| v.as_i64())
}

fn posted(text: &str) -> f64 {
    value_in(text, "capstan_pr_plans_total{result=\"posted\"}")
}

/// capstan's own comments on pull request `n` (its token's user wrote them).
fn ours(gh: &GitHubStandIn, n: u64) -> Vec<Comment> {
    gh.comments(n)
        .into_iter()
        .filter(|c| c.author == capstan_bot())
        .collect()
}

/// A fake plan carrying capstan's marker, as a hostile commenter posts it; its id.
fn plant_fake_plan(gh: &GitHubStandIn, n: u64) -> (u64, String) {
    let fake =
        format!("{MARKER}\n### capstan plan of #{n} against live state\n\nNo cluster changes.\n");
    (gh.comment_as(n, User::person("mallory", 666), &fake), fake)
}

/// Asserts that the planted comment still says what its author wrote and was never edited.
fn untouched_comment(gh: &GitHubStandIn, (id, fake): &(u64, String)) {
    assert_eq!(gh.comment(*id).map(|c| c.body).as_ref(), Some(fake));
    let edits: Vec<_> = gh
        .log()
        .into_iter()
        .filter(|l| l.method == "PATCH" && l.path.ends_with(&format!("/comments/{id}")))
        .collect();
    assert!(
        edits.is_empty(),
        "capstan edited the commenter's comment: {edits:?}"
    );
}

/// Waits for the verdict `granted` on the agent's push access (`log`): said once, in the log
/// and the metric.
async fn said_once_it_can_push(setup: &Setup, log: &str) {
    wait_metrics(setup.metrics, Duration::from_secs(30), |t| {
        value_in(t, "capstan_github_push_access{access=\"granted\"}") == 1.0
    })
    .await;
    let text = setup.log(log);
    assert_eq!(
        text.matches("can push to the repository whose branch it applies")
            .count(),
        1,
        "{text}"
    );
}

/// The dashboard's pull requests page shows #1 refused at `head` (a file:line in `wpath`), for
/// a user allowed to see the fleet; closed, #1 leaves the page.
async fn shown_refused_then_closed(
    cp: &ControlPlane,
    setup: &Setup,
    board: u16,
    wpath: &str,
    head: &str,
) {
    let viewer = cp
        .service_account_token(capstan::status::NAMESPACE, "capstan")
        .await
        .unwrap();
    let page = dashboard_page(board, "/pulls", &viewer);
    assert!(page.contains(r#"data-pull="1""#), "{page}");
    // (minijinja escapes `/` in HTML as `&#x2f;`)
    let escaped = wpath.replace('/', "&#x2f;");
    assert!(
        page.contains("✗ refused") && page.contains(&format!("{escaped}:")),
        "{page}"
    );
    assert!(page.contains(&head[..12]), "{page}");
    // Closed, it leaves the page (and nothing is planned for it).
    let body = pr_body("closed", 1, head, "acme/fleet");
    assert_eq!(
        post_event(setup.hook, "pull_request", &body, Some(&signed(&body))),
        202
    );
    let gone = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if !dashboard_page(board, "/pulls", &viewer).contains(r#"data-pull="1""#) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "{}", dashboard_page(board, "/pulls", &viewer));
}

#[tokio::test]
async fn pull_requests_get_one_live_plan_comment_and_applied_commits_get_statuses() {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    // With the dashboard: the plans are shown there too.
    let Bed {
        files,
        up,
        _daemon,
        gh,
        board,
        setup,
    } = Bed::new(cp, "prp", "pr-plans").await;
    let agent = setup.start(&gh, "agent.log").await;
    let c1 = up.head();
    assert!(
        wait_for_revision(&client, "w-prp", &c1, Duration::from_secs(90))
            .await
            .is_some(),
        "{}",
        setup.log("agent.log")
    );
    // The stand-in's token is a classic one with `repo`, of a user who may push.
    said_once_it_can_push(&setup, "agent.log").await;

    // Statuses per cluster on the applied commit: nothing runs the machines here, so the
    // clusters are Progressing: pending, with the phase message.
    gh.wait("a status per cluster on the applied commit", |g| {
        g.status(&c1, "capstan/w-prp").is_some() && g.status(&c1, "capstan/m-prp").is_some()
    })
    .await;
    let st = gh.status(&c1, "capstan/w-prp").unwrap();
    assert_eq!(st.state, "pending", "{st:?}");
    assert!(
        st.description.starts_with("Progressing") || st.description.starts_with("Applying"),
        "{st:?}"
    );

    // A PR scaling w-prp's workers: one comment with the live plan and the machine impact, a
    // success status, and nothing applied.
    let (wpath, wtext) = files.iter().find(|(p, _)| p.contains("w-prp")).unwrap();
    assert_eq!(wtext.matches("count: 2").count(), 1);
    let scaled = wtext.replacen("count: 2", "count: 3", 1);
    let h1 = push_pr(&up, 1, &[(wpath, &scaled)], "scale w-prp");
    // A commenter was first to post capstan's marker, with a fake plan.
    let planted = plant_fake_plan(&gh, 1);
    let body = pr_body("opened", 1, &h1, "acme/fleet");
    let mark = cp.audit().mark();
    assert_eq!(
        post_event(setup.hook, "pull_request", &body, Some(&signed(&body))),
        202
    );
    // Unsigned: refused like a push.
    assert_eq!(post_event(setup.hook, "pull_request", &body, None), 401);
    wait_metrics(setup.metrics, Duration::from_secs(90), |t| posted(t) >= 1.0).await;
    // Planned from the daemon's watch cache (warm: the revision is applied): no list of a
    // Cluster API kind, only the dry run and read of what the PR changes.
    cp.audit()
        .sync(&client, Duration::from_secs(10))
        .await
        .unwrap();
    let requests = setup.requests(cp, mark, "leases");
    assert!(
        lists_of_live_kinds(&requests).is_empty(),
        "the PR plan listed live state: {requests:#?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.contains("dryRun=All") && r.contains("/machinedeployments/w-prp-md-0")),
        "no dry run of the changed MachineDeployment under this agent's credential: {requests:#?}"
    );
    println!("the PR plan's API requests: {requests:#?}");
    let comments = ours(&gh, 1);
    assert_eq!(comments.len(), 1, "{:?}", gh.comments(1));
    untouched_comment(&gh, &planted);
    let text = &comments[0].body;
    assert!(text.starts_with(MARKER), "{text}");
    assert!(text.contains("against live state"), "{text}");
    assert!(
        text.contains("worker group md-0 scales 2 → 3 (no rollout)"),
        "{text}"
    );
    assert!(
        text.contains("| update | `MachineDeployment/t-prp/w-prp-md-0`"),
        "{text}"
    );
    assert!(text.contains("-  replicas: 2\n+  replicas: 3"), "{text}");
    let st = gh.status(&h1, "capstan/plan").unwrap();
    assert_eq!(st.state, "success", "{st:?}");
    assert_eq!(md_replicas(&client).await, Some(2), "a PR is never applied");
    println!("sample plan comment:\n{text}");

    // A push that breaks validation: the same comment, edited; a failure naming file:line.
    let broken = wtext.replacen("count: 2", "count: two", 1);
    let h2 = push_pr(&up, 1, &[(wpath, &broken)], "oops");
    let body = pr_body("synchronize", 1, &h2, "acme/fleet");
    assert_eq!(
        post_event(setup.hook, "pull_request", &body, Some(&signed(&body))),
        202
    );
    wait_metrics(setup.metrics, Duration::from_secs(90), |t| posted(t) >= 2.0).await;
    let comments = ours(&gh, 1);
    assert_eq!(comments.len(), 1, "edited in place");
    assert!(
        comments[0].body.contains(&format!("{wpath}:")),
        "{}",
        comments[0].body
    );
    let st = gh.status(&h2, "capstan/plan").unwrap();
    assert_eq!(st.state, "failure");
    assert!(st.description.starts_with(&format!("{wpath}:")), "{st:?}");
    // The dashboard's pull requests page says the same; closed, the PR leaves it.
    shown_refused_then_closed(cp, &setup, board, wpath, &h2).await;
    assert_eq!(
        gh.comments(1).len(),
        2,
        "a closed pull request is not planned"
    );

    // A restarted agent finds its own comment again, not the commenter's that came first.
    drop(agent);
    let agent = setup.start(&gh, "agent2.log").await;
    let rescaled = wtext.replacen("count: 2", "count: 4", 1);
    let h3 = push_pr(&up, 1, &[(wpath, &rescaled)], "scale to 4");
    let body = pr_body("synchronize", 1, &h3, "acme/fleet");
    assert_eq!(
        post_event(setup.hook, "pull_request", &body, Some(&signed(&body))),
        202
    );
    wait_metrics(setup.metrics, Duration::from_secs(90), |t| posted(t) >= 1.0).await;
    let comments = ours(&gh, 1);
    assert_eq!(comments.len(), 1, "still one comment after a restart");
    untouched_comment(&gh, &planted);
    assert!(
        comments[0].body.contains("scales 2 → 4"),
        "{}",
        comments[0].body
    );
    assert_eq!(gh.status(&h3, "capstan/plan").unwrap().state, "success");

    // A fork is not planned without --pr-plans-from-forks.
    let h4 = push_pr(&up, 2, &[(wpath, &scaled)], "from a fork");
    let body = pr_body("opened", 2, &h4, "mallory/fleet");
    assert_eq!(
        post_event(setup.hook, "pull_request", &body, Some(&signed(&body))),
        202
    );
    wait_metrics(setup.metrics, Duration::from_secs(30), |t| {
        value_in(t, "capstan_pr_plans_total{result=\"ignored\"}") >= 1.0
    })
    .await;
    assert!(gh.comments(2).is_empty() && gh.status(&h4, "capstan/plan").is_none());

    // A PR touching files outside clusters/: failure.
    let h5 = push_pr(
        &up,
        3,
        &[(wpath, &scaled), ("scripts/deploy.sh", "echo hi\n")],
        "outside",
    );
    let body = pr_body("opened", 3, &h5, "acme/fleet");
    assert_eq!(
        post_event(setup.hook, "pull_request", &body, Some(&signed(&body))),
        202
    );
    wait_metrics(setup.metrics, Duration::from_secs(90), |t| posted(t) >= 2.0).await;
    let st = gh.status(&h5, "capstan/plan").unwrap();
    assert_eq!(st.state, "failure");
    assert!(
        st.description
            .contains("outside clusters/ changed: scripts/deploy.sh"),
        "{st:?}"
    );
    assert!(gh.violations().is_empty(), "{:?}", gh.violations());

    // A token without the scope for statuses: a clear error, and reconciling goes on.
    gh.fault_always(Some(("/statuses/", Fault::MissingScope)));
    let c2 = up.commit_and_push(&[(wpath, &scaled)], &[], "scale w-prp on main");
    let push = push_body(&c2);
    assert_eq!(post(setup.hook, &push, Some(&signed(&push))), 202);
    assert!(
        wait_for_revision(&client, "w-prp", &c2, Duration::from_secs(60))
            .await
            .is_some(),
        "{}",
        setup.log("agent2.log")
    );
    assert_eq!(md_replicas(&client).await, Some(3));
    wait_metrics(setup.metrics, Duration::from_secs(30), |t| {
        value_in(t, "capstan_commit_statuses_total{result=\"failed\"}") >= 1.0
    })
    .await;
    let log = setup.log("agent2.log");
    assert!(
        log.contains("cannot post commit statuses; reconciling goes on"),
        "{log}"
    );
    assert!(log.contains("repo:status"), "{log}");
    drop(agent);
}

/// Whether `log` (an agent's) has a line containing `text`.
fn logged(setup: &Setup, log: &str, text: &str) -> bool {
    setup.log(log).contains(text)
}

#[tokio::test]
async fn a_pull_request_sent_to_a_follower_is_planned_by_the_leader_alone() {
    const LEASE: &str = "capstan-leader-pr-handover";
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let files = fleet_with("prh", &["w-prh"]);
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let up = Upstream::new(&refs);
    let daemon = GitDaemon::start(&up.root);
    let gh = GitHubStandIn::start("acme/fleet", "/api/v3", TOKEN).await;
    let election = [
        "--leader-elect",
        "--lease-name",
        LEASE,
        "--lease-namespace",
        "capstan-system",
        "--lease-duration",
        "6s",
    ];
    let url = daemon.url("repo.git");
    let a = Setup::new(cp, url.clone(), "m-prh", "pr-handover-a", &election).await;
    let b = Setup::new(cp, url, "m-prh", "pr-handover-b", &election).await;

    // a leads (its first revision applied: its watch cache is warm); b follows.
    let _a = a.start(&gh, "a.log").await;
    wait_metrics(a.metrics, Duration::from_secs(60), |t| {
        value_in(t, "capstan_leader") == 1.0
    })
    .await;
    assert!(
        wait_for_revision(&client, "w-prh", &up.head(), Duration::from_secs(90))
            .await
            .is_some(),
        "{}",
        a.log("a.log")
    );
    let _b = b.start(&gh, "b.log").await;
    // Ready once it has joined the election.
    let mut joined = false;
    for _ in 0..1200 {
        joined = get(b.metrics, "/readyz") == 200;
        if joined {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(joined, "{}", b.log("b.log"));
    assert_eq!(value_in(&scrape(b.metrics), "capstan_leader"), 0.0);

    // A PR announced to the follower: handed over, planned by the leader.
    let (wpath, wtext) = files.iter().find(|(p, _)| p.contains("w-prh")).unwrap();
    let scaled = wtext.replacen("count: 2", "count: 3", 1);
    let head = push_pr(&up, 11, &[(wpath, &scaled)], "scale w-prh");
    let body = pr_body("opened", 11, &head, "acme/fleet");
    let mark = cp.audit().mark();
    assert_eq!(
        post_event(b.hook, "pull_request", &body, Some(&signed(&body))),
        202
    );
    wait_metrics(a.metrics, Duration::from_secs(90), |t| posted(t) >= 1.0).await;
    let st = gh.status(&head, "capstan/plan").unwrap();
    assert_eq!(st.state, "success", "{st:?}");
    let comments = gh.comments(11);
    assert_eq!(comments.len(), 1);
    assert!(
        comments[0].body.contains("worker group md-0 scales 2 → 3"),
        "{}",
        comments[0].body
    );
    assert!(logged(
        &b,
        "b.log",
        "pull request handed over to the leader"
    ));
    assert!(logged(
        &a,
        "a.log",
        "pull request handed over by a follower"
    ));
    assert!(logged(&a, "a.log", "plan comment posted"));
    assert!(!logged(&b, "b.log", "plan comment posted"));
    assert_eq!(posted(&scrape(b.metrics)), 0.0);

    // The follower only wrote the Lease; the leader planned from its cache, listing nothing.
    cp.audit()
        .sync(&client, Duration::from_secs(10))
        .await
        .unwrap();
    let by_b = b.requests(cp, mark, "leases");
    assert!(by_b.is_empty(), "the follower's requests: {by_b:#?}");
    let by_a = a.requests(cp, mark, "leases");
    assert!(
        lists_of_live_kinds(&by_a).is_empty(),
        "the leader listed live state for the plan: {by_a:#?}"
    );
    // The hand-over is gone from the Lease once taken.
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), "capstan-system");
    let mut left = true;
    for _ in 0..600 {
        let lease = leases.get(LEASE).await.unwrap();
        left = lease
            .metadata
            .annotations
            .unwrap_or_default()
            .keys()
            .any(|k| k.starts_with(capstan::github::handover::ANNOTATION_PREFIX));
        if !left {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!left, "the hand-over annotation stays on the Lease");
    assert!(gh.violations().is_empty(), "{:?}", gh.violations());
}

/// Polls the dashboard's pull requests page (bounded) until it answers and `until` holds;
/// the page. (A dashboard just started may not listen yet.)
async fn wait_for_page(port: u16, token: &str, what: &str, until: impl Fn(&str) -> bool) -> String {
    let start = std::time::Instant::now();
    loop {
        let page = fetch_page(port, "/pulls", token).unwrap_or_else(|e| e.to_string());
        if page.split_whitespace().nth(1) == Some("200") && until(&page) {
            return page;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the pull requests page never showed {what}:\n{page}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_restarted_agent_shows_the_open_pull_requests_without_a_new_push() {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let Bed {
        files,
        up,
        _daemon,
        gh,
        board,
        setup,
    } = Bed::new(cp, "prr", "pr-resync").await;
    let viewer = cp
        .service_account_token(capstan::status::NAMESPACE, "capstan")
        .await
        .unwrap();
    let agent = setup.start(&gh, "agent.log").await;
    assert!(
        wait_for_revision(&client, "w-prr", &up.head(), Duration::from_secs(90))
            .await
            .is_some(),
        "{}",
        setup.log("agent.log")
    );

    // Two PRs into main, opened on GitHub and announced by webhooks, planned and shown.
    let (wpath, wtext) = files.iter().find(|(p, _)| p.contains("w-prr")).unwrap();
    let scaled = |n: &str| wtext.replacen("count: 2", &format!("count: {n}"), 1);
    let h1 = push_pr(&up, 1, &[(wpath, &scaled("3"))], "scale w-prr to 3");
    let h2 = push_pr(&up, 2, &[(wpath, &scaled("5"))], "scale w-prr to 5");
    for (n, h) in [(1, &h1), (2, &h2)] {
        gh.open_pull(n, h, "main", None);
        let body = pr_body("opened", n, h, "acme/fleet");
        assert_eq!(
            post_event(setup.hook, "pull_request", &body, Some(&signed(&body))),
            202
        );
    }
    // More open PRs than a page holds, into another branch: never planned, but the listing
    // must page past them to find #1 (GitHub lists the newest first).
    for n in 100..210 {
        gh.open_pull(n, &format!("{n:040x}"), "release/1.x", None);
    }
    wait_metrics(setup.metrics, Duration::from_secs(90), |t| posted(t) >= 2.0).await;
    let page = dashboard_page(board, "/pulls", &viewer);
    assert!(
        page.contains(r#"data-pull="1""#) && page.contains(r#"data-pull="2""#),
        "{page}"
    );
    assert_eq!(gh.status(&h2, "capstan/plan").unwrap().state, "success");
    let plans_of_h2 = |g: &GitHubStandIn| {
        g.statuses()
            .iter()
            .filter(|s| s.sha == h2 && s.context == "capstan/plan")
            .count()
    };
    let h2_before = plans_of_h2(&gh);

    // Down: #1 gets a push and #2 is closed, and the webhooks reach no one.
    drop(agent);
    let h1b = push_pr(&up, 1, &[(wpath, &scaled("4"))], "scale w-prr to 4");
    gh.push_pull(1, &h1b);
    gh.close_pull(2);
    // The first listing is refused (a token without the scope): logged, and tried again.
    gh.fault_once("/pulls", Fault::MissingScope);
    let listed_before = gh.log().len();

    // Up again, a new process: no webhook, yet the page shows #1 at its new head.
    let agent = setup.start(&gh, "agent2.log").await;
    let page = wait_for_page(board, &viewer, "#1 planned again", |p| {
        p.contains(r#"data-pull="1""#) && p.contains(&h1b[..12])
    })
    .await;
    assert!(page.contains("scales 2 → 4"), "{page}");
    assert!(
        !page.contains(r#"data-pull="2""#),
        "a closed PR is shown: {page}"
    );
    assert!(
        !page.contains(r#"data-pull="100""#),
        "a PR into another branch is shown: {page}"
    );
    let log = setup.log("agent2.log");
    assert!(
        log.contains("cannot list the open pull requests to plan them again"),
        "{log}"
    );
    // One PR of the 112 open ones queued: #2 is closed, the others go into release/1.x.
    assert!(
        log.contains("open pull requests listed") && log.contains("open=111 queued=1 "),
        "{log}"
    );
    // The listing as GitHub documents it: page 1 asked for, page 2 followed by its Link.
    let lists: Vec<String> = gh.log()[listed_before..]
        .iter()
        .filter(|l| l.method == "GET" && l.path.contains("/pulls?"))
        .map(|l| format!("{} {}", l.status, l.path))
        .collect();
    assert_eq!(
        lists,
        [
            "403 /repos/acme/fleet/pulls?state=open&per_page=100".to_string(),
            "200 /repos/acme/fleet/pulls?state=open&per_page=100".to_string(),
            format!(
                "200 /repositories/{}/pulls?per_page=100&state=open&page=2",
                crate::source_support::github::REPO_ID
            ),
        ]
    );
    // The same comment and status a push would have: edited in place, on the new head.
    let comments = gh.comments(1);
    assert_eq!(comments.len(), 1, "still one comment: {comments:?}");
    assert!(
        comments[0].body.contains("scales 2 → 4"),
        "{}",
        comments[0].body
    );
    gh.wait("#1's plan status on its new head", |g| {
        g.status(&h1b, "capstan/plan")
            .is_some_and(|s| s.state == "success")
    })
    .await;
    assert_eq!(
        plans_of_h2(&gh),
        h2_before,
        "the closed PR was planned again"
    );
    assert!(gh.violations().is_empty(), "{:?}", gh.violations());
    drop(agent);
}
