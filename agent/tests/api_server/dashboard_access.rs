//! Who gets into the agent's dashboard, against the real API server (its TokenReviews and
//! SubjectAccessReviews), through the dashboard's router in this process: a pasted token becomes
//! a session whose id is all the browser holds; the session is reviewed again, so a binding
//! taken away ends it; signing out deletes it; behind TLS the cookie is `Secure` and
//! `__Host-`; and a flood of made-up tokens evicts no allowed answer from the review cache,
//! counted in the API server's audit log.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use capstan::dashboard::Watched;
use capstan::dashboard::access::Access;
use capstan::dashboard::auth::{ReviewLimits, Reviewer, Verdict};
use capstan::dashboard::routes::router;
use capstan::dashboard::server::{Dashboard, Limits};
use serde_json::json;
use tower::ServiceExt;

use super::dashboard::account;

const HOST: &str = "127.0.0.1:8480";

/// The agent's dashboard over nothing, reviewing with the test's admin client, every answer
/// asked again (no cache), reached over HTTPS when `https`.
fn agent(
    cp: &capstan_harness::ControlPlane,
    https: bool,
) -> (std::sync::Arc<Dashboard>, axum::Router) {
    let reviewer = Reviewer::with_limits(
        cp.client(),
        ReviewLimits {
            cache_for: Duration::ZERO,
            ..ReviewLimits::default()
        },
    );
    let d = Dashboard::with_limits(
        Watched::fixed(Vec::new(), Vec::new()),
        Access::Reviewed {
            reviewer: Box::new(reviewer),
            https,
        },
        None,
        None,
        Limits::default(),
    );
    (d.clone(), router(d))
}

async fn send(
    app: &axum::Router,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> (StatusCode, HeaderMap, String) {
    let mut req = axum::http::Request::builder()
        .method(method)
        .uri(uri)
        .header(header::HOST, HOST);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if body.is_some() {
        req = req.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    }
    let r = app
        .clone()
        .oneshot(req.body(Body::from(body.unwrap_or_default())).unwrap())
        .await
        .unwrap();
    let (parts, body) = r.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into(),
    )
}

/// The form body that signs in with `token`.
fn form(token: &str) -> Option<String> {
    Some(format!(
        "token={}",
        token
            .replace('+', "%2B")
            .replace('/', "%2F")
            .replace('=', "%3D")
    ))
}

/// Waits until `token`'s user may list ManagedClusters (RBAC reaches the authorizer a moment
/// after the binding is written): asks until the API server says so.
async fn wait_until_allowed(cp: &capstan_harness::ControlPlane, token: &str) -> String {
    let r = Reviewer::with_limits(
        cp.client(),
        ReviewLimits {
            cache_for: Duration::ZERO,
            ..ReviewLimits::default()
        },
    );
    for _ in 0..600 {
        if let Ok(Verdict::Allowed(user)) = r.review(token).await {
            return user;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the viewer's binding never took effect");
}

#[tokio::test]
async fn a_pasted_token_becomes_a_session_reviewed_again_and_ended_at_sign_out() {
    let cp = capstan_harness::shared().await;
    capstan::install::testing::agent_kubeconfig(cp).await;
    let viewer = account(cp, "dasha-viewer", true).await;
    let user = wait_until_allowed(cp, &viewer).await;
    let (d, app) = agent(cp, false);
    let own = [
        ("sec-fetch-site", "same-origin"),
        ("origin", "http://127.0.0.1:8480"),
    ];

    // A sign-in form posted from another port of the host, or another site: refused before
    // the token is looked at (login CSRF: the user signed in as the attacker).
    for attack in [
        [
            ("sec-fetch-site", "same-site"),
            ("origin", "http://127.0.0.1:9000"),
        ],
        [
            ("sec-fetch-site", "cross-site"),
            ("origin", "https://evil.example"),
        ],
    ] {
        let (s, h, _) = send(&app, "POST", "/login", &attack, form(&viewer)).await;
        assert_eq!(s, StatusCode::FORBIDDEN);
        assert!(h.get(header::SET_COOKIE).is_none());
    }
    let (s, _, _) = send(&app, "POST", "/login", &[("origin", "null")], form(&viewer)).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert_eq!(d.sessions(), 0);

    // A token the API server does not accept makes no session.
    let (s, h, _) = send(&app, "POST", "/login", &own, form("not-a-token")).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert_eq!(h[header::LOCATION], "/login?problem=token");
    assert!(h.get(header::SET_COOKIE).is_none());

    // The viewer's: a session; the browser gets its id, never the token.
    let (s, h, _) = send(&app, "POST", "/login", &own, form(&viewer)).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    let set = h[header::SET_COOKIE].to_str().unwrap().to_string();
    let id = set
        .strip_prefix("capstan_session=")
        .and_then(|v| v.split(';').next())
        .unwrap()
        .to_string();
    assert_eq!(
        set,
        format!("capstan_session={id}; Path=/; Max-Age=28800; HttpOnly; SameSite=Strict")
    );
    assert_eq!(id.len(), 64);
    assert!(!set.contains(&viewer), "the token stays on the server");
    assert_eq!(d.sessions(), 1);
    let cookie = format!("capstan_session={id}");
    let (s, _, page) = send(&app, "GET", "/", &[("cookie", &cookie)], None).await;
    assert_eq!(s, StatusCode::OK, "{page}");
    assert!(page.contains(&format!("Signed in as {user}")), "{page}");
    assert!(page.contains("Sign out"), "{page}");

    // The raw token as the old cookie held it is no credential.
    let old = format!("capstan_token={viewer}");
    let (s, _, _) = send(&app, "GET", "/", &[("cookie", &old)], None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    // Signed out: the session is deleted here, so the id a tenant's page on another port
    // received with its requests no longer works either.
    let (s, h, _) = send(
        &app,
        "POST",
        "/logout",
        &[("cookie", &cookie), own[0]],
        None,
    )
    .await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert_eq!(
        h[header::SET_COOKIE],
        "capstan_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"
    );
    assert_eq!(d.sessions(), 0);
    let (s, _, page) = send(&app, "GET", "/", &[("cookie", &cookie)], None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert!(page.contains("session is over"), "{page}");

    // A new session, then the viewer's binding taken away: the next request is refused and
    // the session ends.
    let (_, h, _) = send(&app, "POST", "/login", &own, form(&viewer)).await;
    let cookie = h[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        send(&app, "GET", "/waves", &[("cookie", &cookie)], None)
            .await
            .0,
        StatusCode::OK
    );
    let bindings: kube::Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        kube::Api::namespaced(cp.client(), capstan::status::NAMESPACE);
    bindings
        .delete("dasha-viewer", &Default::default())
        .await
        .unwrap();
    let mut refused = false;
    for _ in 0..600 {
        let (s, _, _) = send(&app, "GET", "/waves", &[("cookie", &cookie)], None).await;
        if s == StatusCode::FORBIDDEN {
            refused = true;
            break;
        }
        assert_eq!(s, StatusCode::OK);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(refused, "the binding's removal never reached the dashboard");
    assert_eq!(d.sessions(), 0, "its session ended with it");
    let (s, _, _) = send(&app, "GET", "/waves", &[("cookie", &cookie)], None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn behind_tls_the_cookie_is_secure_and_host_only() {
    let cp = capstan_harness::shared().await;
    capstan::install::testing::agent_kubeconfig(cp).await;
    let viewer = account(cp, "dashtls-viewer", true).await;
    wait_until_allowed(cp, &viewer).await;
    let (_, app) = agent(cp, true);
    let own = [("sec-fetch-site", "same-origin")];
    let (s, h, _) = send(&app, "POST", "/login", &own, form(&viewer)).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    let set = h[header::SET_COOKIE].to_str().unwrap();
    let id = set
        .strip_prefix("__Host-capstan_session=")
        .and_then(|v| v.split(';').next())
        .unwrap();
    assert_eq!(
        set,
        format!(
            "__Host-capstan_session={id}; Path=/; Max-Age=28800; HttpOnly; SameSite=Strict; Secure"
        )
    );
    let cookie = format!("__Host-capstan_session={id}");
    assert_eq!(
        send(&app, "GET", "/", &[("cookie", &cookie)], None).await.0,
        StatusCode::OK
    );
    // The same id under the plain name (set over plain HTTP by whoever) is not read.
    let plain = format!("capstan_session={id}");
    assert_eq!(
        send(&app, "GET", "/", &[("cookie", &plain)], None).await.0,
        StatusCode::UNAUTHORIZED
    );
}

/// A ServiceAccount that may review tokens (`system:auth-delegator`), as a client: its reviews
/// are told from everyone else's in the audit log by its name.
async fn reviewing_account(cp: &capstan_harness::ControlPlane, name: &str) -> kube::Client {
    let ns = capstan::status::NAMESPACE;
    let client = cp.client();
    let resolver = capstan::k8s::Resolver::new(client.clone()).await.unwrap();
    for o in [
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}),
    ] {
        capstan::k8s::apply::apply_as(&client, &resolver, &o, "capstan-test", false)
            .await
            .unwrap();
    }
    let kubeconfig = cp.service_account_kubeconfig(ns, name).await.unwrap();
    let conn = capstan::k8s::connect(Some(&kubeconfig), None)
        .await
        .unwrap();
    // Until its binding reaches the authorizer.
    let r = Reviewer::new(conn.client.clone());
    for _ in 0..600 {
        if r.review("probe").await.is_ok() {
            return conn.client;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{name} never could review tokens");
}

#[tokio::test]
async fn a_flood_of_made_up_tokens_evicts_no_allowed_answer() {
    let cp = capstan_harness::shared().await;
    capstan::install::testing::agent_kubeconfig(cp).await;
    let viewer = account(cp, "dashflood-viewer", true).await;
    wait_until_allowed(cp, &viewer).await;
    let name = "dashflood-reviewer";
    let client = reviewing_account(cp, name).await;
    let username = format!(
        "system:serviceaccount:{}:{name}",
        capstan::status::NAMESPACE
    );
    // Answers kept long (no answer expires while the test runs) in a small cache.
    let cache_max = 16;
    let reviewer = Reviewer::with_limits(
        client,
        ReviewLimits {
            cache_for: Duration::from_secs(3600),
            cache_max,
        },
    );
    let audit = cp.audit();
    let mark = audit.mark();
    let Ok(Verdict::Allowed(_)) = reviewer.review(&viewer).await else {
        panic!("the viewer is allowed");
    };
    // Made-up tokens, four times what the cache holds, each reviewed once.
    let flood = 4 * cache_max;
    for n in 0..flood {
        let token = format!("made-up-{n}-{}", fastrand::u64(..));
        assert_eq!(
            reviewer.review(&token).await.unwrap(),
            Verdict::Unauthenticated
        );
    }
    // The viewer's answer is still kept: no review of it again.
    let Ok(Verdict::Allowed(_)) = reviewer.review(&viewer).await else {
        panic!("the viewer is still allowed");
    };
    audit
        .sync(&cp.client(), Duration::from_secs(60))
        .await
        .unwrap();
    let reviews = audit
        .events_since(mark)
        .unwrap()
        .into_iter()
        .filter(|e| e.resource() == Some("tokenreviews") && e.user.username == username)
        .count();
    assert_eq!(
        reviews,
        1 + flood,
        "one review of the viewer's token and one of each made-up token"
    );
}
