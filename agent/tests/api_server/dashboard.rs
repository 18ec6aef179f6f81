//! The dashboard the agent serves (`capstan run --dashboard-addr`), in a real browser: headless
//! Chromium from Debian's packages against the real API server, the agent running as its
//! installed ServiceAccount. Who may see it is the API server's answer (TokenReview, then a
//! SubjectAccessReview for listing ManagedClusters): no token is sent to sign in, a token whose
//! user may not list ManagedClusters is refused, a viewer's token pasted into the sign-in form
//! shows the fleet. The browser then holds only a session's id (HttpOnly, SameSite=Strict, for
//! the session's lifetime), which a page on another port of the host receives but cannot use to
//! sign the user out or in as someone else (refused 403); signing out ends the session, so a
//! copied id stops working. Then the pages: the fleet grouped by management cluster, a cluster
//! page with its worker groups, a push that changes a worker count showing on the open page
//! without a reload (server-sent events), the waves page, a phone's viewport without sideways
//! scrolling, and the keyboard's first stop the skip link; axe-core finds no serious or critical
//! accessibility violation on any page. Screenshots are kept under
//! `$CARGO_TARGET_DIR/dashboard-screenshots/`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::json;

use crate::source_support::agent::{Served, capstan_run, post, push_body};
use crate::source_support::free_port;
use capstan_harness::browser::Browser;

const SECRET: &str = "dashboard-secret";

/// `GET path` with an optional bearer token: the status code and the `Location` header.
fn get_with_token(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
    let (code, out) = response(port, path, token);
    let location = out
        .lines()
        .find_map(|l| l.strip_prefix("location: "))
        .unwrap_or_default()
        .to_string();
    (code, location)
}

/// `GET path` with an optional bearer token: the status code and the whole response (0 and
/// why, when nothing listens there yet).
pub(crate) fn response(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    raw(port, path, &auth)
}

/// `GET path` with more header lines: the status code and the whole response.
fn raw(port: u16, path: &str, more: &str) -> (u16, String) {
    let mut s = match TcpStream::connect(("127.0.0.1", port)) {
        Ok(s) => s,
        Err(e) => return (0, format!("connecting to port {port}: {e}")),
    };
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{more}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, out)
}

/// Someone else's page on another port of the same host (a tenant's application an admin
/// port-forwards): forms aimed at the dashboard on `dashboard` — one signing the user out, one
/// signing them in with `token` — and the `Cookie` headers its server received.
async fn other_port(
    dashboard: u16,
    token: &str,
) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><title>a tenant's app</title></head><body><main>\
         <form id=\"out\" method=\"post\" action=\"http://127.0.0.1:{dashboard}/logout\"></form>\
         <form id=\"in\" method=\"post\" action=\"http://127.0.0.1:{dashboard}/login\">\
         <input name=\"token\" value=\"{token}\"></form></main></body></html>"
    );
    let s = seen.clone();
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move |headers: axum::http::HeaderMap| {
            let (s, html) = (s.clone(), html.clone());
            async move {
                if let Some(c) = headers
                    .get(axum::http::header::COOKIE)
                    .and_then(|c| c.to_str().ok())
                {
                    s.lock().unwrap().push(c.to_string());
                }
                axum::response::Html(html)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, seen)
}

/// A ServiceAccount in `capstan-system`, bound to a Role listing ManagedClusters when `viewer`;
/// its token.
pub(crate) async fn account(
    cp: &capstan_harness::ControlPlane,
    name: &str,
    viewer: bool,
) -> String {
    let client = cp.client();
    let ns = capstan::status::NAMESPACE;
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}}),
    ];
    if viewer {
        objects.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": ns},
            "rules": [{"apiGroups": ["capstan.dev"], "resources": ["managedclusters"], "verbs": ["list"]}]}));
        objects.push(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}),
        );
    }
    let resolver = capstan::k8s::Resolver::new(client.clone()).await.unwrap();
    for o in &objects {
        capstan::k8s::apply::apply_as(&client, &resolver, o, "capstan-test", false)
            .await
            .unwrap();
    }
    cp.service_account_token(ns, name).await.unwrap()
}

#[tokio::test]
async fn the_agents_dashboard_in_a_browser_signed_in_live_and_readable() {
    let cp = capstan_harness::shared().await;
    let kubeconfig = capstan::install::testing::agent_kubeconfig(cp).await;
    let fleet = Served::new("dash", &["w-dash1", "w-dash2"]);
    // A schedule for the waves page: waves and a maintenance window (creations and scales do
    // not wait for it).
    fleet.up.commit_and_push(
        &[(
            "clusters/m-dash/fleet.yaml",
            "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  rollout:\n    maxUnavailable: 1\n    waves:\n    - name: canary\n      clusters: [w-dash1]\n    maintenanceWindows:\n    - {days: [Sat, Sun], start: \"02:00\", duration: 4h}\n",
        )],
        &[],
        "waves and a window",
    );
    let tmp = tempfile::tempdir().unwrap();
    let (hook, port) = (free_port(), free_port());
    let log = tmp.path().join("agent.log");
    let _agent = capstan_run(
        &[
            "--repo",
            &fleet.url(),
            "--interval",
            "1h",
            "--management",
            "m-dash",
            "--webhook-addr",
            &format!("127.0.0.1:{hook}"),
            "--dashboard-addr",
            &format!("127.0.0.1:{port}"),
        ],
        &kubeconfig,
        tmp.path(),
        Some(SECRET),
        &log,
    );
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let up_ = (0..800).any(|_| {
        std::thread::sleep(Duration::from_millis(25));
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(up_, "{}", logs());
    let viewer = account(cp, "dash-viewer", true).await;
    let nobody = account(cp, "dash-nobody", false).await;

    // Who may see it.
    // Without a token the API server accepts: 401, the sign-in form as the body.
    assert_eq!(
        get_with_token(port, "/", None),
        (401, String::new()),
        "{}",
        logs()
    );
    assert_eq!(get_with_token(port, "/", Some("not-a-token")).0, 401);
    assert_eq!(get_with_token(port, "/events", None).0, 401);
    assert_eq!(
        get_with_token(port, "/", Some(&nobody)).0,
        403,
        "{}",
        logs()
    );
    assert_eq!(
        get_with_token(port, "/clusters/w-dash1", Some(&nobody)).0,
        403
    );
    assert_eq!(get_with_token(port, "/events", Some(&nobody)).0, 403);
    assert_eq!(get_with_token(port, "/assets/dashboard.css", None).0, 200);

    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let mut b = Browser::start(&target.join("dashboard-screenshots")).await;
    let base = format!("http://127.0.0.1:{port}");

    // Signing in: the token pasted into the form.
    b.goto(&format!("{base}/")).await;
    assert!(
        b.until("document.querySelector('#token')", 30).await,
        "{}",
        b.text().await
    );
    b.screenshot("sign-in").await;
    let serious = b.accessibility().await;
    assert!(
        serious.is_empty(),
        "axe-core on the sign-in page: {serious:#?}"
    );
    b.eval(&format!(
        "document.querySelector('#token').value = {}; document.querySelector('form').submit(); true",
        json!(viewer)
    ))
    .await;
    // The fleet: both workload clusters under their management cluster, applied.
    let applied = "['w-dash1', 'w-dash2', 'm-dash'].every(n => { const r = document.querySelector(`tr[data-cluster=\"${n}\"]`); return r && r.dataset.phase && r.dataset.phase !== 'Pending'; })";
    assert!(
        b.until(applied, 120).await,
        "{}\n{}",
        b.text().await,
        logs()
    );
    let text = b.text().await;
    assert!(
        text.contains("Signed in as system:serviceaccount:capstan-system:dash-viewer"),
        "{text}"
    );
    assert!(text.contains("m-dash"), "{text}");
    b.screenshot("fleet").await;
    let serious = b.accessibility().await;
    assert!(
        serious.is_empty(),
        "axe-core on the fleet page: {serious:#?}"
    );
    // The browser holds a session's id, never the token: HttpOnly (no script reads it),
    // SameSite=Strict, on every path, for the session's lifetime.
    let cookies = b.cookies(&base).await;
    assert_eq!(cookies.len(), 1, "{cookies:#?}");
    let c = &cookies[0];
    assert_eq!(c["name"], "capstan_session");
    assert_eq!(
        (
            &c["httpOnly"],
            &c["sameSite"],
            &c["path"],
            &c["secure"],
            &c["session"]
        ),
        (
            &json!(true),
            &json!("Strict"),
            &json!("/"),
            &json!(false),
            &json!(false)
        ),
        "{c}"
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let left = c["expires"].as_f64().unwrap_or(0.0) - now;
    assert!(
        (8.0 * 3600.0 - 600.0..=8.0 * 3600.0 + 60.0).contains(&left),
        "Max-Age: the session's eight hours: {left}"
    );
    let session = c["value"].as_str().unwrap().to_string();
    assert_eq!(session.len(), 64);
    assert!(!session.contains(&viewer) && !viewer.contains(&session));
    assert_eq!(b.eval("document.cookie").await, json!(""));

    // A page on another port of the host receives the cookie (browsers do not keep cookies
    // apart by port): the session's id, not the token. Its forms, posted at the dashboard in
    // the user's browser, are refused: no signing the user out, no signing them in as someone
    // else.
    let (evil, received) = other_port(port, &nobody).await;
    b.goto(&format!("http://127.0.0.1:{evil}/")).await;
    {
        let received = received.lock().unwrap();
        assert!(
            received.iter().any(|c| c.contains(&session)),
            "{received:?}"
        );
        assert!(
            !received.iter().any(|c| c.contains(&viewer)),
            "{received:?}"
        );
    }
    for form in ["out", "in"] {
        b.goto(&format!("http://127.0.0.1:{evil}/")).await;
        b.eval(&format!("document.getElementById('{form}').submit(); true"))
            .await;
        assert!(
            b.until(
                "document.body.innerText.includes('cross-origin request refused')",
                30
            )
            .await,
            "{form}: {}\n{}",
            b.text().await,
            logs()
        );
        b.screenshot(&format!("cross-origin-{form}")).await;
    }
    b.goto(&format!("{base}/")).await;
    let text = b.text().await;
    assert!(
        text.contains("Signed in as system:serviceaccount:capstan-system:dash-viewer"),
        "still the viewer, still signed in: {text}"
    );

    // Filtered by name.
    b.goto(&format!("{base}/?name=dash2")).await;
    assert!(b.until("document.querySelector('tr[data-cluster=\"w-dash2\"]') && !document.querySelector('tr[data-cluster=\"w-dash1\"]')", 10).await, "{}", b.text().await);

    // A cluster page, then a push that changes its workers, seen without a reload.
    b.goto(&format!("{base}/clusters/w-dash1")).await;
    assert!(
        b.until("document.body.innerText.includes('MachineDeployment w-dash1-md-0') && document.body.innerText.includes('2 desired')", 60).await,
        "{}",
        b.text().await
    );
    b.eval("window.__same_page = true").await;
    b.screenshot("cluster").await;
    let serious = b.accessibility().await;
    assert!(
        serious.is_empty(),
        "axe-core on the cluster page: {serious:#?}"
    );
    let c2 = fleet.scale("w-dash1", 3, "three workers");
    let sig = capstan::serve::webhook::sign(SECRET.as_bytes(), push_body(&c2).as_bytes());
    assert_eq!(post(hook, &push_body(&c2), Some(&sig)), 202, "{}", logs());
    assert!(
        b.until(&format!("document.body.innerText.includes('3 desired') && document.body.innerText.includes('{c2}')"), 120).await,
        "the open page did not follow the change:\n{}\n{}",
        b.text().await,
        logs()
    );
    assert_eq!(
        b.eval("window.__same_page === true").await,
        json!(true),
        "updated in place, not reloaded"
    );
    b.screenshot("cluster-updated").await;

    // The waves page.
    b.goto(&format!("{base}/waves")).await;
    assert!(
        b.until(
            "document.querySelector('h1') && document.querySelector('h1').textContent === 'Waves'",
            10
        )
        .await
    );
    let text = b.text().await;
    assert!(text.contains("w-dash1"), "{text}");
    assert!(text.contains("Schedule of m-dash"), "{text}");
    assert!(
        text.contains("1. canary (w-dash1); 2. rest (every other cluster)"),
        "{text}"
    );
    assert!(text.contains("Sat Sun 02:00 UTC for 4h"), "{text}");
    assert!(
        text.contains("open now") || text.contains("next opens"),
        "{text}"
    );
    b.screenshot("waves").await;
    let serious = b.accessibility().await;
    assert!(
        serious.is_empty(),
        "axe-core on the waves page: {serious:#?}"
    );

    // The keyboard's first stop is the skip link; a phone needs no sideways scrolling.
    b.goto(&format!("{base}/")).await;
    assert_eq!(b.tab(1).await, "Skip to content");
    b.phone().await;
    b.goto(&format!("{base}/")).await;
    assert_eq!(
        b.eval("document.documentElement.scrollWidth <= window.innerWidth")
            .await,
        json!(true),
        "the page scrolls sideways on a phone"
    );
    let shot = b.screenshot("fleet-phone").await;
    let serious = b.accessibility().await;
    assert!(
        serious.is_empty(),
        "axe-core on the fleet-phone page: {serious:#?}"
    );
    println!(
        "dashboard screenshots in {}",
        shot.parent().unwrap().display()
    );

    // Signing out ends the session where it is kept: the id, copied, no longer works.
    let copied = format!("Cookie: capstan_session={session}\r\n");
    assert_eq!(raw(port, "/", &copied).0, 200);
    b.eval("document.querySelector('form[action=\"/logout\"] button').click(); true")
        .await;
    assert!(
        b.until("document.querySelector('#token')", 30).await,
        "{}",
        b.text().await
    );
    assert!(b.cookies(&base).await.is_empty());
    let (code, answer) = raw(port, "/", &copied);
    assert_eq!(code, 401, "{answer}");
}

/// The dashboard reads the agent's own watch cache; a follower, whose passes never opened those
/// watches, opens them for its dashboard: it shows the fleet the leader applies, and follows a
/// change the leader makes.
#[tokio::test]
async fn a_followers_dashboard_opens_the_watches_it_reads() {
    let cp = capstan_harness::shared().await;
    let kubeconfig = capstan::install::testing::agent_kubeconfig(cp).await;
    let fleet = Served::new("dashf", &["w-dashf1"]);
    let election: Vec<String> = [
        "--leader-elect",
        "--lease-name",
        "capstan-leader-dashf",
        "--lease-namespace",
        "capstan-system",
        "--lease-duration",
        "6s",
    ]
    .map(String::from)
    .to_vec();
    let tmp = tempfile::tempdir().unwrap();
    let (hook, metrics, dash) = (free_port(), free_port(), free_port());
    let url = fleet.url();
    // Both agents follow the same fleet as the agent's ServiceAccount; `args`: their own.
    let run_agent = |dir: &std::path::Path, log: &std::path::Path, args: &[String]| {
        let args: Vec<&str> = [
            "--repo",
            url.as_str(),
            "--interval",
            "1h",
            "--management",
            "m-dashf",
        ]
        .into_iter()
        .chain(args.iter().map(String::as_str))
        .collect();
        capstan_run(&args, &kubeconfig, dir, Some(SECRET), log)
    };
    let (log_a, log_b) = (tmp.path().join("a.log"), tmp.path().join("b.log"));
    let leader = [
        election.clone(),
        vec!["--webhook-addr".into(), format!("127.0.0.1:{hook}")],
    ]
    .concat();
    let dir_a = tmp.path().join("a");
    let _a = run_agent(&dir_a, &log_a, &leader);
    let client = cp.client();
    let first = fleet.up.head();
    assert!(
        crate::source_support::agent::wait_for_revision(
            &client,
            "w-dashf1",
            &first,
            Duration::from_secs(90)
        )
        .await
        .is_some(),
        "{}",
        std::fs::read_to_string(&log_a).unwrap_or_default()
    );
    let follower = [
        election,
        vec![
            "--metrics-addr".into(),
            format!("127.0.0.1:{metrics}"),
            "--dashboard-addr".into(),
            format!("127.0.0.1:{dash}"),
        ],
    ]
    .concat();
    let dir_b = tmp.path().join("b");
    let _b = run_agent(&dir_b, &log_b, &follower);
    let logs = || std::fs::read_to_string(&log_b).unwrap_or_default();
    let viewer = account(cp, "dashf-viewer", true).await;

    // The follower's cluster page: the control plane and the worker group, as the leader
    // applied them, read from the watches the follower opened.
    let shows = |what: &[&str]| {
        let (code, page) = response(dash, "/clusters/w-dashf1", Some(&viewer));
        (code == 200 && what.iter().all(|w| page.contains(w)), page)
    };
    let mut last = String::new();
    let seen = (0..1200).any(|_| {
        let (ok, page) = shows(&["MachineDeployment w-dashf1-md-0", "2 desired", &first]);
        last = page;
        ok || {
            std::thread::sleep(Duration::from_millis(50));
            false
        }
    });
    assert!(seen, "{last}\n{}", logs());
    let text = crate::source_support::agent::wait_metrics(metrics, Duration::from_secs(10), |t| {
        t.contains("capstan_leader 0")
    })
    .await;
    assert!(text.contains("capstan_leader 0"), "it follows");

    // The leader scales the workers; the follower's page follows.
    let c2 = fleet.scale("w-dashf1", 3, "three workers");
    let sig = capstan::serve::webhook::sign(SECRET.as_bytes(), push_body(&c2).as_bytes());
    assert_eq!(post(hook, &push_body(&c2), Some(&sig)), 202);
    let seen = (0..2400).any(|_| {
        let (ok, page) = shows(&["3 desired", &c2]);
        last = page;
        ok || {
            std::thread::sleep(Duration::from_millis(50));
            false
        }
    });
    assert!(seen, "{last}\n{}", logs());
    assert!(
        !logs().contains("dashboard: watching the agent's kinds"),
        "the follower's watches opened at the first try: {}",
        logs()
    );
}
