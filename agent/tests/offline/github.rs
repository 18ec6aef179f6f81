//! capstan's GitHub client against the GitHub stand-in (`source_support::github`), which checks
//! every request against GitHub's documented endpoints, headers and payloads: statuses, one
//! plan comment per pull request edited in place (also by a new client, as after a restart),
//! pull requests opened once and then updated, GitHub Enterprise base URLs, GitHub App
//! installation tokens, retries of rate limits and 5xx, a clear error for a token without
//! the needed scope, and the open pull requests listed page after page by the `Link` header.
//!
//! Hostile commenters: a comment carrying capstan's marker written by anyone but capstan's own
//! identity (`GET /user` for a token, the App's bot user for a GitHub App) is never edited,
//! whoever posted first, and capstan's is found again after a restart. Whether the credentials
//! could push to the repository is told for each kind of credentials GitHub has.

use std::time::Duration;

use capstan::github::access::PushAccess;
use capstan::github::identity::Identity;
use capstan::github::{Auth, GitHub, GitHubConfig, GitHubError, Retry, StatusState, Upserted};

use crate::source_support::github::{Account, Fault, GitHubStandIn, TokenKind, User, capstan_bot};

const TOKEN: &str = "ghp_capstantesttoken";
const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

fn client(gh: &GitHubStandIn, auth: Auth) -> GitHub {
    GitHub::new(&GitHubConfig {
        api_url: gh.url(),
        repo: "acme/fleet".into(),
        auth,
        retry: Retry {
            attempts: 5,
            base: Duration::from_millis(50),
            cap: Duration::from_secs(5),
        },
    })
    .unwrap()
}

#[tokio::test]
async fn one_comment_per_pr_edited_in_place_and_statuses_on_github_enterprise() {
    let gh = GitHubStandIn::start("acme/fleet", "/api/v3", TOKEN).await;
    let c = client(&gh, Auth::Token(TOKEN.into()));
    let marker = "<!-- capstan:plan -->";
    let first = c
        .upsert_comment(7, marker, &format!("{marker}\nplan 1"))
        .await
        .unwrap();
    let Upserted::Created(id) = first else {
        panic!("{first:?}")
    };
    assert_eq!(
        c.upsert_comment(7, marker, &format!("{marker}\nplan 2"))
            .await
            .unwrap(),
        Upserted::Updated(id)
    );
    // A new client (the agent restarted) finds the comment by its marker.
    let again = client(&gh, Auth::Token(TOKEN.into()));
    assert_eq!(
        again
            .upsert_comment(7, marker, &format!("{marker}\nplan 2"))
            .await
            .unwrap(),
        Upserted::Unchanged(id)
    );
    let comments = gh.comments(7);
    assert_eq!(comments.len(), 1);
    assert_eq!(comments[0].body, format!("{marker}\nplan 2"));
    c.set_status(
        SHA,
        "capstan/plan",
        StatusState::Success,
        &"x".repeat(300),
        None,
    )
    .await
    .unwrap();
    let st = gh.status(SHA, "capstan/plan").unwrap();
    assert_eq!(st.state, "success");
    assert_eq!(st.description.chars().count(), 140);
    let calls: Vec<String> = gh
        .log()
        .iter()
        .map(|l| format!("{} {}", l.method, l.path))
        .collect();
    // Who capstan is, asked once per client.
    assert_eq!(
        calls,
        [
            "GET /user",
            "GET /repos/acme/fleet/issues/7/comments?per_page=100&page=1",
            "POST /repos/acme/fleet/issues/7/comments",
            "GET /repos/acme/fleet/issues/7/comments?per_page=100&page=1",
            &format!("PATCH /repos/acme/fleet/issues/comments/{id}"),
            "GET /user",
            "GET /repos/acme/fleet/issues/7/comments?per_page=100&page=1",
            &format!("POST /repos/acme/fleet/statuses/{SHA}"),
        ]
    );
    assert!(gh.violations().is_empty(), "{:?}", gh.violations());
}

#[tokio::test]
async fn pull_requests_are_opened_once_then_updated() {
    let gh = GitHubStandIn::start("acme/fleet", "", TOKEN).await;
    let c = client(&gh, Auth::Token(TOKEN.into()));
    let (n, url, created) = c
        .open_or_update_pr("capstan/new-dev", "main", "Add dev", "body 1")
        .await
        .unwrap();
    assert!(created && n == 1 && url.ends_with("/pull/1"));
    let (n2, _, created) = c
        .open_or_update_pr("capstan/new-dev", "main", "Add dev", "body 2")
        .await
        .unwrap();
    assert_eq!((n2, created), (1, false));
    let pulls = gh.pulls();
    assert_eq!(pulls.len(), 1);
    assert_eq!(pulls[0].body, "body 2");
    assert!(gh.violations().is_empty(), "{:?}", gh.violations());
}

#[tokio::test]
async fn rate_limits_and_server_errors_are_retried() {
    let gh = GitHubStandIn::start("acme/fleet", "", TOKEN).await;
    let c = client(&gh, Auth::Token(TOKEN.into()));
    gh.fault_once("/statuses/", Fault::RateLimit);
    gh.fault_once("/statuses/", Fault::ServerError);
    gh.fault_once("/statuses/", Fault::ServerError);
    c.set_status(SHA, "capstan/dev", StatusState::Pending, "Applying", None)
        .await
        .unwrap();
    let codes: Vec<u16> = gh.log().iter().map(|l| l.status).collect();
    assert_eq!(codes, [403, 502, 502, 201]);
    // Failing for good: gives up after its attempts, saying why.
    gh.fault_always(Some(("/statuses/", Fault::ServerError)));
    let e = c
        .set_status(SHA, "capstan/dev", StatusState::Pending, "Applying", None)
        .await
        .unwrap_err();
    assert!(matches!(e, GitHubError::GaveUp { attempts: 5, .. }), "{e}");
    assert!(e.to_string().contains("502 Server Error"), "{e}");
    assert!(gh.violations().is_empty(), "{:?}", gh.violations());
}

#[tokio::test]
async fn a_token_without_the_scope_gets_a_clear_error_at_once() {
    let gh = GitHubStandIn::start("acme/fleet", "", TOKEN).await;
    let c = client(&gh, Auth::Token(TOKEN.into()));
    gh.fault_once("/statuses/", Fault::MissingScope);
    let e = c
        .set_status(SHA, "capstan/dev", StatusState::Pending, "Applying", None)
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(e, GitHubError::Forbidden { status: 403, .. }),
        "{text}"
    );
    assert!(
        text.contains("Resource not accessible by personal access token"),
        "{text}"
    );
    assert!(text.contains("commit statuses: write"), "{text}");
    assert!(
        text.contains("GitHub accepts scopes: repo, repo:status"),
        "{text}"
    );
    assert!(text.contains("the token has: read:org"), "{text}");
    assert_eq!(gh.log().len(), 1, "not retried");
    // A token GitHub does not know: 401, not retried either.
    let bad = client(&gh, Auth::Token("ghp_wrong".into()));
    let e = bad
        .set_status(SHA, "capstan/dev", StatusState::Pending, "x", None)
        .await
        .unwrap_err();
    assert!(
        matches!(e, GitHubError::Forbidden { status: 401, .. }),
        "{e}"
    );
}

/// A GitHub App's RSA key pair, PEM: (private, public).
fn app_keys() -> (Vec<u8>, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("app.pem");
    let public = dir.path().join("app.pub.pem");
    let run = |args: &[&str]| {
        let st = std::process::Command::new("openssl")
            .args(args)
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
    };
    run(&[
        "genrsa",
        "-traditional",
        "-out",
        key.to_str().unwrap(),
        "2048",
    ]);
    run(&[
        "rsa",
        "-in",
        key.to_str().unwrap(),
        "-pubout",
        "-out",
        public.to_str().unwrap(),
    ]);
    (
        std::fs::read(&key).unwrap(),
        std::fs::read(&public).unwrap(),
    )
}

#[tokio::test]
async fn a_github_app_authenticates_with_installation_tokens() {
    let (key, public) = app_keys();
    let gh = GitHubStandIn::start("acme/fleet", "/api/v3", TOKEN).await;
    gh.add_app(4242, &public, 99);
    let c = client(
        &gh,
        Auth::App {
            app_id: 4242,
            key_pem: key,
            installation_id: 99,
        },
    );
    let r = c
        .set_status(SHA, "capstan/plan", StatusState::Pending, "planning", None)
        .await;
    assert!(r.is_ok(), "{r:?}: {:?} {:?}", gh.log(), gh.violations());
    c.set_status(SHA, "capstan/plan", StatusState::Success, "done", None)
        .await
        .unwrap();
    let calls: Vec<String> = gh
        .log()
        .iter()
        .map(|l| format!("{} {} {}", l.method, l.path, l.status))
        .collect();
    // One installation token, reused.
    assert_eq!(
        calls,
        [
            "POST /app/installations/99/access_tokens 201".to_string(),
            format!("POST /repos/acme/fleet/statuses/{SHA} 201"),
            format!("POST /repos/acme/fleet/statuses/{SHA} 201"),
        ]
    );
    assert!(gh.violations().is_empty(), "{:?}", gh.violations());
}

#[tokio::test]
async fn open_pull_requests_are_listed_page_after_page_by_the_link_header() {
    let gh = GitHubStandIn::start("acme/fleet", "/api/v3", TOKEN).await;
    for n in 1..=205 {
        gh.open_pull(n, &format!("{n:040x}"), "main", None);
    }
    gh.open_pull(206, SHA, "main", Some("mallory/fleet"));
    gh.close_pull(3);
    let c = client(&gh, Auth::Token(TOKEN.into()));
    // A 5xx on the second page is retried like any call.
    gh.fault_once("/repositories/", Fault::ServerError);
    let open = c.open_pull_requests().await.unwrap();
    let numbers: Vec<u64> = open.iter().map(|p| p["number"].as_u64().unwrap()).collect();
    let want: Vec<u64> = (1..=206).rev().filter(|n| *n != 3).collect();
    assert_eq!(
        numbers, want,
        "every open one, newest first, the closed one left out"
    );
    // The fields a plan reads, as GitHub documents them.
    let fork = &open[0];
    assert_eq!(
        (
            fork["state"].as_str(),
            fork["head"]["sha"].as_str(),
            fork["head"]["ref"].as_str(),
            fork["head"]["repo"]["full_name"].as_str(),
            fork["base"]["ref"].as_str(),
        ),
        (
            Some("open"),
            Some(SHA),
            Some("pr-206"),
            Some("mallory/fleet"),
            Some("main")
        )
    );
    let calls: Vec<String> = gh
        .log()
        .iter()
        .map(|l| format!("{} {} {}", l.method, l.path, l.status))
        .collect();
    let id = crate::source_support::github::REPO_ID;
    assert_eq!(
        calls,
        [
            "GET /repos/acme/fleet/pulls?state=open&per_page=100 200".to_string(),
            format!("GET /repositories/{id}/pulls?per_page=100&state=open&page=2 502"),
            format!("GET /repositories/{id}/pulls?per_page=100&state=open&page=2 200"),
            format!("GET /repositories/{id}/pulls?per_page=100&state=open&page=3 200"),
        ]
    );
    assert!(gh.violations().is_empty(), "{:?}", gh.violations());

    // Without the scope: a clear error naming the permission, not retried.
    gh.fault_once("/pulls", Fault::MissingScope);
    let e = c.open_pull_requests().await.unwrap_err();
    assert!(
        matches!(e, GitHubError::Forbidden { status: 403, .. })
            && e.to_string().contains("pull requests: read"),
        "{e}"
    );
}

const MARKER: &str = "<!-- capstan:plan -->";

fn plan(text: &str) -> String {
    format!("{MARKER}\n{text}")
}

/// The hostile commenters of a pull request: each posts a comment carrying capstan's marker
/// before capstan does. Returns their comments' ids.
fn impostors(gh: &GitHubStandIn, pr: u64) -> Vec<u64> {
    let fake = plan("### capstan plan\n\nNo cluster changes.");
    vec![
        // Anyone who may comment.
        gh.comment_as(pr, User::person("mallory", 666), &fake),
        // capstan's login, held by another account (renamed away and taken).
        gh.comment_as(pr, User::person("capstan-bot", 667), &fake),
        // Another App's bot, and one named like capstan's App without the bot suffix.
        gh.comment_as(
            pr,
            User {
                login: "other-app[bot]".into(),
                id: 668,
                kind: "Bot",
            },
            &fake,
        ),
        gh.comment_as(pr, User::person("capstan-fleet", 669), &fake),
    ]
}

/// Asserts that none of `ids` was touched: each still says what its author wrote.
fn untouched(gh: &GitHubStandIn, ids: &[u64]) {
    for id in ids {
        let c = gh.comment(*id).unwrap();
        assert!(
            c.body.ends_with("No cluster changes."),
            "comment {id} by {} edited: {}",
            c.author.login,
            c.body
        );
        assert!(
            !gh.log()
                .iter()
                .any(|l| l.method == "PATCH" && l.path.ends_with(&format!("/comments/{id}"))),
            "capstan edited {}'s comment {id}",
            c.author.login
        );
    }
}

#[tokio::test]
async fn a_comment_carrying_the_marker_by_anyone_else_is_never_edited() {
    let gh = GitHubStandIn::start("acme/fleet", "", TOKEN).await;
    let planted = impostors(&gh, 7);
    let c = client(&gh, Auth::Token(TOKEN.into()));
    assert_eq!(
        c.identity().await.unwrap(),
        Some(Identity {
            login: "capstan-bot".into(),
            id: Some(5001)
        })
    );
    let first = c.upsert_comment(7, MARKER, &plan("plan 1")).await.unwrap();
    let Upserted::Created(mine) = first else {
        panic!("capstan took someone else's comment: {first:?}")
    };
    assert!(!planted.contains(&mine));
    assert_eq!(gh.comment(mine).unwrap().author, capstan_bot());
    assert_eq!(
        c.upsert_comment(7, MARKER, &plan("plan 2")).await.unwrap(),
        Upserted::Updated(mine)
    );
    // A restart: the new process finds its own comment, not the first one with the marker.
    let again = client(&gh, Auth::Token(TOKEN.into()));
    assert_eq!(
        again
            .upsert_comment(7, MARKER, &plan("plan 3"))
            .await
            .unwrap(),
        Upserted::Updated(mine)
    );
    untouched(&gh, &planted);
    assert_eq!(gh.comments(7).len(), planted.len() + 1);
    assert_eq!(gh.comment(mine).unwrap().body, plan("plan 3"));
    // GET /user once per process.
    let users = gh.log().iter().filter(|l| l.path == "/user").count();
    assert_eq!(users, 2);
    assert!(gh.violations().is_empty(), "{:?}", gh.violations());
}

#[tokio::test]
async fn a_github_app_knows_its_comments_by_its_bot_user() {
    let (key, public) = app_keys();
    let gh = GitHubStandIn::start("acme/fleet", "/api/v3", TOKEN).await;
    gh.add_app(4242, &public, 99);
    let app = Auth::App {
        app_id: 4242,
        key_pem: key,
        installation_id: 99,
    };
    let planted = impostors(&gh, 3);
    let c = client(&gh, app.clone());
    assert_eq!(
        c.identity().await.unwrap(),
        Some(Identity {
            login: "capstan-fleet[bot]".into(),
            id: None
        })
    );
    let Upserted::Created(mine) = c.upsert_comment(3, MARKER, &plan("one")).await.unwrap() else {
        panic!("not created")
    };
    assert_eq!(gh.comment(mine).unwrap().author, gh.app_bot());
    let again = client(&gh, app);
    assert_eq!(
        again.upsert_comment(3, MARKER, &plan("two")).await.unwrap(),
        Upserted::Updated(mine)
    );
    untouched(&gh, &planted);
    // The App's slug read with its JWT, never GET /user (an installation token cannot).
    let calls: Vec<String> = gh
        .log()
        .iter()
        .map(|l| format!("{} {} {}", l.method, l.path, l.status))
        .collect();
    assert_eq!(
        calls.iter().filter(|c| *c == "GET /app 200").count(),
        2,
        "{calls:#?}"
    );
    assert!(!calls.iter().any(|c| c.contains("/user")), "{calls:#?}");
    assert!(gh.violations().is_empty(), "{:?}", gh.violations());
}

#[tokio::test]
async fn an_installation_token_given_as_a_token_edits_only_what_it_created() {
    let gh = GitHubStandIn::start("acme/fleet", "", TOKEN).await;
    let bot = User {
        login: "ci-app[bot]".into(),
        id: 4100,
        kind: "Bot",
    };
    gh.add_token(
        "ghs_given",
        Account {
            user: bot.clone(),
            kind: TokenKind::Installation,
            push: false,
        },
    );
    let planted = impostors(&gh, 9);
    let c = client(&gh, Auth::Token("ghs_given".into()));
    // GET /user is refused to an installation token: capstan cannot tell who it is yet.
    assert_eq!(c.identity().await.unwrap(), None);
    let Upserted::Created(mine) = c.upsert_comment(9, MARKER, &plan("one")).await.unwrap() else {
        panic!("not created")
    };
    // Learned from the comment it created.
    assert_eq!(
        c.identity().await.unwrap(),
        Some(Identity {
            login: bot.login.clone(),
            id: Some(bot.id)
        })
    );
    assert_eq!(
        c.upsert_comment(9, MARKER, &plan("two")).await.unwrap(),
        Upserted::Updated(mine)
    );
    untouched(&gh, &planted);
    assert!(gh.violations().is_empty(), "{:?}", gh.violations());
}

#[tokio::test]
async fn whether_the_credentials_can_push_is_told_for_each_kind() {
    let gh = GitHubStandIn::start("acme/fleet", "", TOKEN).await;
    let person = |kind: TokenKind, push: bool| Account {
        user: User::person("someone", 77),
        kind,
        push,
    };
    let cases = [
        // The default: a classic token with repo, of a user who may push.
        (TOKEN, None, PushAccess::Granted),
        (
            "ghp_statuses_only",
            Some(person(
                TokenKind::Classic("repo:status, public_repo".into()),
                true,
            )),
            PushAccess::None,
        ),
        (
            "ghp_reader",
            Some(person(TokenKind::Classic("repo".into()), false)),
            PushAccess::None,
        ),
        (
            "github_pat_writer",
            Some(person(TokenKind::FineGrained, true)),
            PushAccess::Possible,
        ),
        (
            "github_pat_reader",
            Some(person(TokenKind::FineGrained, false)),
            PushAccess::None,
        ),
        (
            "ghs_given",
            Some(person(TokenKind::Installation, false)),
            PushAccess::Unknown,
        ),
    ];
    for (token, account, want) in cases {
        if let Some(a) = account {
            gh.add_token(token, a);
        }
        let access = client(&gh, Auth::Token(token.into()))
            .push_access()
            .await
            .unwrap();
        assert_eq!(access.push, want, "{token}: {access:?}");
    }
    // A GitHub App: its installation's permissions, read with its JWT.
    let (key, public) = app_keys();
    gh.add_app(4242, &public, 99);
    let app = client(
        &gh,
        Auth::App {
            app_id: 4242,
            key_pem: key,
            installation_id: 99,
        },
    );
    let least = app.push_access().await.unwrap();
    assert_eq!(
        (least.push, least.excess.len()),
        (PushAccess::None, 0),
        "{least:?}"
    );
    gh.set_app_permissions(serde_json::json!({
        "metadata": "read", "contents": "write", "pull_requests": "write",
        "statuses": "write", "administration": "write",
    }));
    let broad = app.push_access().await.unwrap();
    assert_eq!(broad.push, PushAccess::Granted, "{broad:?}");
    assert_eq!(broad.excess, ["administration: write", "contents: write"]);
    assert!(gh.violations().is_empty(), "{:?}", gh.violations());
}
