//! capstan's GitHub client against the GitHub stand-in (`source_support::github`), which checks
//! every request against GitHub's documented endpoints, headers and payloads: statuses, one
//! plan comment per pull request edited in place (also by a new client, as after a restart),
//! pull requests opened once and then updated, GitHub Enterprise base URLs, GitHub App
//! installation tokens, retries of rate limits and 5xx, a clear error for a token without
//! the needed scope, and the open pull requests listed page after page by the `Link` header.

use std::time::Duration;

use capstan::github::{Auth, GitHub, GitHubConfig, GitHubError, Retry, StatusState, Upserted};

use crate::source_support::github::{Fault, GitHubStandIn};

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
    assert_eq!(
        calls,
        [
            "GET /repos/acme/fleet/issues/7/comments?per_page=100&page=1",
            "POST /repos/acme/fleet/issues/7/comments",
            "GET /repos/acme/fleet/issues/7/comments?per_page=100&page=1",
            &format!("PATCH /repos/acme/fleet/issues/comments/{id}"),
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

#[tokio::test]
async fn a_github_app_authenticates_with_installation_tokens() {
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
    let gh = GitHubStandIn::start("acme/fleet", "/api/v3", TOKEN).await;
    gh.add_app(4242, &std::fs::read(&public).unwrap(), 99);
    let c = client(
        &gh,
        Auth::App {
            app_id: 4242,
            key_pem: std::fs::read(&key).unwrap(),
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
