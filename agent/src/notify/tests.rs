//! The sender against local stand-ins of Slack, Teams and a signed webhook: each stand-in checks
//! the documented shape of what it receives, answers as scripted (an error, a 429 with
//! Retry-After, or nothing at all), and records what came.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use capstan_layout::config::notifications::{
    Alert, EventKind, Notifications, PER_MINUTE, Provider, ProviderKind,
};
use serde_json::Value;

use super::*;
use crate::metrics::NotifyProvider;
use crate::status::Phase;

/// How a stand-in answers one request.
#[derive(Clone, Copy)]
enum Answer {
    Status(u16),
    TooMany { retry_after: u64 },
    Hang,
}

#[derive(Default)]
struct Stand {
    script: Mutex<VecDeque<Answer>>,
    got: Mutex<Vec<(Instant, HeaderMap, Value)>>,
}

async fn handle(State(s): State<Arc<Stand>>, headers: HeaderMap, body: Bytes) -> Response {
    let v: Value = serde_json::from_slice(&body).expect("a JSON body");
    // The signature is over the raw body: kept for the test to check.
    let mut headers = headers;
    headers.insert(
        "x-raw-body-hex",
        hex::encode(&body).parse().expect("hex is a header value"),
    );
    s.got.lock().unwrap().push((Instant::now(), headers, v));
    let answer = s.script.lock().unwrap().pop_front();
    match answer.unwrap_or(Answer::Status(200)) {
        Answer::Status(c) => StatusCode::from_u16(c).unwrap().into_response(),
        Answer::TooMany { retry_after } => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", retry_after.to_string())],
        )
            .into_response(),
        Answer::Hang => std::future::pending().await,
    }
}

/// Starts a stand-in answering `script` (then 200s); returns it and its URL.
async fn stand_in(script: &[Answer]) -> (Arc<Stand>, String) {
    let s = Arc::new(Stand::default());
    s.script.lock().unwrap().extend(script.iter().copied());
    let app = Router::new()
        .route("/hook", axum::routing::post(handle))
        .with_state(s.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (s, format!("http://{addr}/hook"))
}

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn provider(name: &str, kind: ProviderKind) -> Provider {
    Provider {
        name: name.into(),
        kind,
        url_key: format!("{name}-url"),
        hmac_key: (kind == ProviderKind::Webhook).then(|| format!("{name}-hmac")),
    }
}

fn config(providers: Vec<Provider>, per_minute: u32) -> Notifications {
    let alerts = (0..providers.len())
        .map(|i| Alert {
            provider: i,
            events: EventKind::ALL.to_vec(),
            clusters: vec![],
            match_labels: BTreeMap::new(),
            per_minute,
        })
        .collect();
    Notifications {
        secret_namespace: "capstan-system".into(),
        secret_name: "hooks".into(),
        providers,
        alerts,
    }
}

fn secrets(data: &[(&str, &[u8])]) -> Secrets {
    let data = data
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect();
    Secrets::Fixed(Arc::new(BTreeMap::from([(
        "capstan-system/hooks".to_string(),
        data,
    )])))
}

fn fast() -> SenderConfig {
    SenderConfig {
        backoff: Duration::from_millis(20),
        ..SenderConfig::default()
    }
}

fn seen(phase: Phase) -> Seen {
    Seen {
        phase,
        held: None,
        conflict: false,
    }
}

fn observe(n: &mut Notifier, c: &Notifications, cluster: &str, rev: &str, s: Seen) {
    n.observe(
        Some(c),
        Observation {
            cluster,
            management: "mgmt",
            labels: &BTreeMap::new(),
            revision: rev,
            message: "a message",
            seen: s,
        },
    );
}

#[tokio::test]
async fn slack_teams_and_webhook_get_their_documented_shapes() {
    let (slack, slack_url) = stand_in(&[]).await;
    let (teams, teams_url) = stand_in(&[]).await;
    let (hook, hook_url) = stand_in(&[]).await;
    let metrics = Arc::new(Metrics::new());
    let c = config(
        vec![
            provider("chat", ProviderKind::Slack),
            provider("team", ProviderKind::Teams),
            provider("audit", ProviderKind::Webhook),
        ],
        PER_MINUTE,
    );
    let s = secrets(&[
        ("chat-url", slack_url.as_bytes()),
        ("team-url", teams_url.as_bytes()),
        ("audit-url", hook_url.as_bytes()),
        ("audit-hmac", b"s3cret"),
    ]);
    let mut n = Notifier::start(s, metrics.clone(), fast());
    // First sight Ready: nothing. Upgrading then Ready: one Ready to each.
    observe(&mut n, &c, "dev", "r1", seen(Phase::Ready));
    observe(&mut n, &c, "dev", "r2", seen(Phase::Upgrading));
    observe(&mut n, &c, "dev", "r2", seen(Phase::Ready));
    let sent = |p| metrics.notifications(p, NotifyResult::Sent);
    wait_until("three sends", || {
        sent(NotifyProvider::Slack) + sent(NotifyProvider::Teams) + sent(NotifyProvider::Webhook)
            == 3
    })
    .await;

    let got = slack.got.lock().unwrap();
    assert_eq!(got.len(), 1);
    let (_, h, v) = &got[0];
    assert_eq!(h["content-type"], "application/json");
    assert!(
        v["text"].as_str().unwrap().contains("dev is Ready at r2"),
        "{v}"
    );
    for b in v["blocks"].as_array().unwrap() {
        let t = b["type"].as_str().unwrap();
        assert!(["section", "context"].contains(&t), "{b}");
        if t == "section" {
            assert!(
                b["text"]["type"] == "mrkdwn" || b["fields"].is_array(),
                "{b}"
            );
        }
    }

    let got = teams.got.lock().unwrap();
    assert_eq!(got.len(), 1);
    let v = &got[0].2;
    assert_eq!(v["type"], "message");
    let a = &v["attachments"].as_array().unwrap()[0];
    assert_eq!(a["contentType"], "application/vnd.microsoft.card.adaptive");
    assert_eq!(a["content"]["type"], "AdaptiveCard");
    assert_eq!(a["content"]["version"], "1.4");
    assert!(
        a["content"]["body"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["type"] == "RichTextBlock")
    );

    let got = hook.got.lock().unwrap();
    assert_eq!(got.len(), 1);
    let (_, h, v) = &got[0];
    assert_eq!(v["event"]["event"], "Ready");
    assert_eq!(v["event"]["cluster"], "dev");
    assert_eq!(v["event"]["revision"], "r2");
    let raw = hex::decode(h["x-raw-body-hex"].as_bytes()).unwrap();
    let sig = h[payload::SIGNATURE_HEADER].to_str().unwrap();
    let hex_mac = sig.strip_prefix("sha256=").expect("sha256= prefix");
    let mut mac = <hmac::Hmac<sha2::Sha256> as hmac::KeyInit>::new_from_slice(b"s3cret").unwrap();
    hmac::Mac::update(&mut mac, &raw);
    hmac::Mac::verify_slice(mac, &hex::decode(hex_mac).unwrap()).expect("the signature verifies");
}

#[tokio::test]
async fn a_change_is_sent_once_across_passes() {
    let (hook, url) = stand_in(&[]).await;
    let metrics = Arc::new(Metrics::new());
    let c = config(vec![provider("chat", ProviderKind::Slack)], PER_MINUTE);
    let mut n = Notifier::start(
        secrets(&[("chat-url", url.as_bytes())]),
        metrics.clone(),
        fast(),
    );
    // Failed, Failed again, flapping through Progressing back to Failed at the same revision.
    for p in [
        Phase::Failed,
        Phase::Failed,
        Phase::Progressing,
        Phase::Failed,
    ] {
        observe(&mut n, &c, "dev", "r1", seen(p));
    }
    // A held upgrade, then held for another reason.
    let held = |r| Seen {
        held: Some(r),
        ..seen(Phase::Progressing)
    };
    observe(&mut n, &c, "dev", "r1", held("WaitingForWave"));
    observe(&mut n, &c, "dev", "r1", held("WaitingForWave"));
    observe(&mut n, &c, "dev", "r1", held("OutsideMaintenanceWindow"));
    wait_until("three sends", || {
        metrics.notifications(NotifyProvider::Slack, NotifyResult::Sent) == 3
    })
    .await;
    assert_eq!(
        metrics.notifications(NotifyProvider::Slack, NotifyResult::Deduplicated),
        1
    );
    let texts: Vec<String> = hook
        .got
        .lock()
        .unwrap()
        .iter()
        .map(|(_, _, v)| v["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(texts.len(), 3, "{texts:?}");
    assert!(texts.iter().any(|t| t.contains("dev is Failed")));
    assert!(texts.iter().any(|t| t.contains("(WaitingForWave)")));
    assert!(
        texts
            .iter()
            .any(|t| t.contains("(OutsideMaintenanceWindow)"))
    );
}

#[tokio::test]
async fn errors_are_retried_429_after_its_retry_after_and_4xx_not_at_all() {
    let (flaky, flaky_url) = stand_in(&[Answer::Status(500)]).await;
    let (busy, busy_url) = stand_in(&[Answer::TooMany { retry_after: 1 }]).await;
    let (refusing, refusing_url) = stand_in(&[Answer::Status(404)]).await;
    let metrics = Arc::new(Metrics::new());
    let c = config(
        vec![
            provider("flaky", ProviderKind::Slack),
            provider("busy", ProviderKind::Teams),
            provider("refusing", ProviderKind::Webhook),
        ],
        PER_MINUTE,
    );
    let s = secrets(&[
        ("flaky-url", flaky_url.as_bytes()),
        ("busy-url", busy_url.as_bytes()),
        ("refusing-url", refusing_url.as_bytes()),
        ("refusing-hmac", b"k"),
    ]);
    let mut n = Notifier::start(s, metrics.clone(), fast());
    observe(&mut n, &c, "dev", "r1", seen(Phase::Failed));
    let m = |p, r| metrics.notifications(p, r);
    wait_until("the retries", || {
        m(NotifyProvider::Slack, NotifyResult::Sent) == 1
            && m(NotifyProvider::Teams, NotifyResult::Sent) == 1
            && m(NotifyProvider::Webhook, NotifyResult::Failed) == 1
    })
    .await;
    assert_eq!(m(NotifyProvider::Slack, NotifyResult::Retried), 1);
    assert_eq!(flaky.got.lock().unwrap().len(), 2);
    let got = busy.got.lock().unwrap();
    assert_eq!(got.len(), 2);
    assert!(
        got[1].0 - got[0].0 >= Duration::from_secs(1),
        "Retry-After: 1 honoured, not the 20 ms backoff"
    );
    assert_eq!(
        refusing.got.lock().unwrap().len(),
        1,
        "a 404 is not retried"
    );
    assert_eq!(m(NotifyProvider::Webhook, NotifyResult::Retried), 0);
}

#[tokio::test]
async fn a_dead_endpoint_never_blocks_the_caller() {
    let (dead, url) = stand_in(&[Answer::Hang; 16]).await;
    let metrics = Arc::new(Metrics::new());
    let c = config(vec![provider("dead", ProviderKind::Slack)], 600);
    let cfg = SenderConfig {
        queue: 1,
        concurrency: 1,
        timeout: Duration::from_secs(3600),
        ..fast()
    };
    let mut n = Notifier::start(
        secrets(&[("dead-url", url.as_bytes())]),
        metrics.clone(),
        cfg,
    );
    let t = Instant::now();
    for i in 0..10 {
        observe(&mut n, &c, &format!("c{i}"), "r1", seen(Phase::Failed));
        // Let the sender take what it can, so the queue is what fills.
        tokio::task::yield_now().await;
    }
    assert!(t.elapsed() < Duration::from_secs(1), "observe waited");
    wait_until("the hanging request", || {
        dead.got.lock().unwrap().len() == 1
    })
    .await;
    // One in flight, one taken off the queue waiting for a slot, one queued: the rest (at
    // least seven) dropped and counted, none sent.
    let dropped = metrics.notifications(NotifyProvider::Slack, NotifyResult::Dropped);
    assert!((7..=9).contains(&dropped), "dropped {dropped}");
    assert_eq!(
        metrics.notifications(NotifyProvider::Slack, NotifyResult::Sent),
        0
    );
}

#[tokio::test]
async fn the_alert_limit_holds_and_a_missing_key_fails_without_retry() {
    let (hook, url) = stand_in(&[]).await;
    let metrics = Arc::new(Metrics::new());
    let c = config(
        vec![
            provider("chat", ProviderKind::Slack),
            provider("nokey", ProviderKind::Teams),
        ],
        2,
    );
    let mut n = Notifier::start(
        secrets(&[("chat-url", url.as_bytes())]),
        metrics.clone(),
        fast(),
    );
    for i in 0..5 {
        observe(&mut n, &c, &format!("c{i}"), "r1", seen(Phase::Failed));
    }
    let m = |p, r| metrics.notifications(p, r);
    wait_until("the sends", || {
        m(NotifyProvider::Slack, NotifyResult::Sent) == 2
            && m(NotifyProvider::Teams, NotifyResult::Failed) == 2
    })
    .await;
    assert_eq!(m(NotifyProvider::Slack, NotifyResult::RateLimited), 3);
    assert_eq!(m(NotifyProvider::Teams, NotifyResult::Retried), 0);
    assert_eq!(hook.got.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn hostile_text_arrives_at_each_endpoint_shown_literally() {
    use super::hostile::{HOSTILE, check_slack, check_teams, check_webhook};
    let (slack, slack_url) = stand_in(&[]).await;
    let (teams, teams_url) = stand_in(&[]).await;
    let (hook, hook_url) = stand_in(&[]).await;
    let metrics = Arc::new(Metrics::new());
    let c = config(
        vec![
            provider("chat", ProviderKind::Slack),
            provider("team", ProviderKind::Teams),
            provider("audit", ProviderKind::Webhook),
        ],
        600,
    );
    let s = secrets(&[
        ("chat-url", slack_url.as_bytes()),
        ("team-url", teams_url.as_bytes()),
        ("audit-url", hook_url.as_bytes()),
        ("audit-hmac", b"k"),
    ]);
    let mut n = Notifier::start(s, metrics.clone(), fast());
    // Each hostile string as a cluster's refusal message, as the daemon observes it.
    for (i, h) in HOSTILE.iter().enumerate() {
        n.observe(
            Some(&c),
            Observation {
                cluster: &format!("c{i}"),
                management: "mgmt",
                labels: &BTreeMap::new(),
                revision: "r1",
                message: h,
                seen: seen(Phase::Failed),
            },
        );
    }
    let sent = |p| metrics.notifications(p, NotifyResult::Sent);
    wait_until("every notification", || {
        [
            NotifyProvider::Slack,
            NotifyProvider::Teams,
            NotifyProvider::Webhook,
        ]
        .iter()
        .all(|p| sent(*p) == HOSTILE.len() as u64)
    })
    .await;
    let bodies = |s: &Stand| -> BTreeMap<String, Value> {
        s.got
            .lock()
            .unwrap()
            .iter()
            .map(|(_, _, v)| {
                let c = v["event"]["cluster"]
                    .as_str()
                    .or_else(|| v["blocks"][1]["fields"][0]["text"].as_str())
                    .or_else(|| {
                        v["attachments"][0]["content"]["body"][1]["inlines"][1]["text"].as_str()
                    })
                    .unwrap_or_default()
                    .trim_start_matches("*Cluster*\n")
                    .trim_matches('`')
                    .to_string();
                (c, v.clone())
            })
            .collect()
    };
    let (slack, teams, hook) = (bodies(&slack), bodies(&teams), bodies(&hook));
    for (i, h) in HOSTILE.iter().enumerate() {
        let c = format!("c{i}");
        check_slack(&slack[&c], "message", h).unwrap_or_else(|e| panic!("slack, {h:?}: {e}"));
        check_teams(&teams[&c], h).unwrap_or_else(|e| panic!("teams, {h:?}: {e}"));
        check_webhook(&hook[&c], "message", h).unwrap_or_else(|e| panic!("webhook, {h:?}: {e}"));
    }
}
