//! The agent's HTTP surface over real sockets: a server on 127.0.0.1 and a small HTTP/1.1 client
//! written against `tokio::net::TcpStream` (no mocks, no in-process service calls), plus the file
//! watcher on a real temporary directory.
//!
//! No assertion depends on elapsed time; waits are bounded by generous timeouts only.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use capstan::serve::webhook::sign;
use capstan::serve::{
    Metrics, ReadyFlag, ServerConfig, ServerState, Trigger, TriggerReceiver, TriggerSender,
    WebhookOutcome, channel, newest_revision, ops_router, router, serve, watch_local_with,
    webhook_router,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

const SECRET: &[u8] = b"It's a Secret to Everybody";
const TIMEOUT: Duration = Duration::from_secs(30);

/// A running server and the agent-side ends of what it feeds.
struct Harness {
    addr: std::net::SocketAddr,
    triggers: TriggerReceiver,
    metrics: Arc<Metrics>,
    ready: ReadyFlag,
    server: Server,
}

/// A server task and the switch that stops it.
struct Server {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), capstan::serve::ServerError>>,
}

impl Server {
    fn spawn(listener: TcpListener, app: axum::Router) -> Server {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, app, async move {
            let _ = stopped.await;
        }));
        Server { stop, task }
    }

    /// Stops the server and checks it shut down cleanly.
    async fn shutdown(self) {
        let _ = self.stop.send(());
        let result = tokio::time::timeout(TIMEOUT, self.task)
            .await
            .expect("server stops")
            .expect("task");
        result.expect("server ended without error");
    }
}

impl Harness {
    async fn start(config: ServerConfig) -> Harness {
        let (tx, triggers) = channel();
        let metrics = Arc::new(Metrics::new());
        let ready = ReadyFlag::new();
        let state = ServerState::new(config, tx, metrics.clone(), ready.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        Harness {
            addr,
            triggers,
            metrics,
            ready,
            server: Server::spawn(listener, router(state)),
        }
    }

    async fn signed() -> Harness {
        Harness::start(ServerConfig::new("main").with_webhook_secret(SECRET)).await
    }

    async fn shutdown(self) {
        self.server.shutdown().await;
    }
}

/// An HTTP response.
#[derive(Debug)]
struct Reply {
    status: u16,
    head: String,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Sends one request (`Connection: close`) and reads the whole response. The body is written
/// concurrently with reading, so a server that answers before reading it all (413) is fine.
async fn request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Reply {
    request_with(addr, method, path, headers, Body::Sized(body)).await
}

enum Body {
    Sized(Vec<u8>),
    Chunked(Vec<Vec<u8>>),
}

async fn request_with(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Body,
) -> Reply {
    let work = async {
        let stream = TcpStream::connect(addr).await.expect("connect");
        let (mut read, mut write) = stream.into_split();
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nUser-Agent: GitHub-Hookshot/test\r\n"
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        let payload = match body {
            Body::Sized(bytes) => {
                head.push_str(&format!("Content-Length: {}\r\n", bytes.len()));
                bytes
            }
            Body::Chunked(chunks) => {
                head.push_str("Transfer-Encoding: chunked\r\n");
                let mut out = Vec::new();
                for chunk in chunks.iter().filter(|c| !c.is_empty()) {
                    out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                    out.extend_from_slice(chunk);
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(b"0\r\n\r\n");
                out
            }
        };
        head.push_str("\r\n");
        let writer = tokio::spawn(async move {
            // Errors are expected when the server refuses early and closes; the reply says why.
            if write.write_all(head.as_bytes()).await.is_ok() {
                let _ = write.write_all(&payload).await;
                let _ = write.flush().await;
            }
            write
        });
        let mut raw = Vec::new();
        let read_result = read.read_to_end(&mut raw).await;
        let _write_half = writer.await.expect("writer");
        if raw.is_empty() {
            panic!("no response: {read_result:?}");
        }
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text
            .split_once("\r\n\r\n")
            .expect("a complete response head");
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status code");
        Reply {
            status,
            head: head.to_owned(),
            body: body.to_owned(),
        }
    };
    tokio::time::timeout(TIMEOUT, work)
        .await
        .expect("request finished in time")
}

fn push_payload(git_ref: &str, after: &str) -> Vec<u8> {
    format!(
        r#"{{"ref":"{git_ref}","before":"0000000000000000000000000000000000000000","after":"{after}","created":false,"deleted":false,"forced":false,"commits":[],"repository":{{"full_name":"acme/fleet"}}}}"#
    )
    .into_bytes()
}

/// Posts a GitHub event signed with `secret`.
async fn post_signed_event(
    addr: std::net::SocketAddr,
    event: &str,
    delivery: &str,
    body: Vec<u8>,
    secret: &[u8],
) -> Reply {
    let signature = sign(secret, &body);
    request(
        addr,
        "POST",
        "/hook/github",
        &[
            ("Content-Type", "application/json"),
            ("X-GitHub-Event", event),
            ("X-GitHub-Delivery", delivery),
            ("X-Hub-Signature-256", &signature),
        ],
        body,
    )
    .await
}

fn sha(i: usize) -> String {
    format!("{i:040x}")
}

fn webhook(after: &str, delivery: &str) -> Trigger {
    Trigger::Webhook {
        after: Some(after.to_owned()),
        delivery: Some(delivery.to_owned()),
    }
}

#[tokio::test]
async fn a_signed_push_to_the_branch_fires_exactly_one_trigger() {
    let mut h = Harness::signed().await;
    let reply = post_signed_event(
        h.addr,
        "push",
        "d-1",
        push_payload("refs/heads/main", &sha(1)),
        SECRET,
    )
    .await;
    assert_eq!(reply.status, 202, "{reply:?}");
    // The handler fires before it answers, so the trigger is already pending.
    assert_eq!(h.triggers.try_next(), Some(vec![webhook(&sha(1), "d-1")]));
    assert_eq!(h.triggers.try_next(), None);
    assert_eq!(h.metrics.webhook_requests(WebhookOutcome::Accepted), 1);
    h.shutdown().await;
}

#[tokio::test]
async fn bad_signatures_are_401_and_fire_nothing() {
    let mut h = Harness::signed().await;
    let body = push_payload("refs/heads/main", &sha(2));
    let good = sign(SECRET, &body);
    let wrong_secret = sign(b"guess", &body);
    let sha1_prefixed = good.replacen("sha256=", "sha1=", 1);
    let tampered_body = {
        let mut b = body.clone();
        b.extend_from_slice(b" ");
        b
    };
    let cases: Vec<(&str, Option<&str>, Vec<u8>)> = vec![
        ("wrong secret", Some(&wrong_secret), body.clone()),
        ("missing", None, body.clone()),
        ("sha1= prefix", Some(&sha1_prefixed), body.clone()),
        ("not hex", Some("sha256=not-hex"), body.clone()),
        ("body changed after signing", Some(&good), tampered_body),
    ];
    let count = cases.len() as u64;
    for (what, signature, body) in cases {
        let mut headers = vec![("X-GitHub-Event", "push"), ("X-GitHub-Delivery", what)];
        if let Some(s) = signature {
            headers.push(("X-Hub-Signature-256", s));
        }
        let reply = request(h.addr, "POST", "/hook/github", &headers, body).await;
        assert_eq!(reply.status, 401, "{what}: {reply:?}");
        assert!(
            !reply.body.contains(&good[7..]),
            "{what}: the expected signature leaked"
        );
    }
    assert_eq!(h.triggers.try_next(), None, "nothing fired");
    assert_eq!(
        h.metrics.webhook_requests(WebhookOutcome::Unauthorized),
        count
    );
    assert_eq!(h.metrics.webhook_requests(WebhookOutcome::Accepted), 0);
    h.shutdown().await;
}

#[tokio::test]
async fn oversized_bodies_are_413_and_fire_nothing() {
    let mut h = Harness::signed().await;
    // A valid push padded to 2 MiB, correctly signed: the size alone must refuse it.
    let mut body = push_payload("refs/heads/main", &sha(3));
    body.pop();
    body.extend_from_slice(br#","padding":""#);
    body.resize(2 * 1024 * 1024 - 2, b'x');
    body.extend_from_slice(b"\"}");
    let signature = sign(SECRET, &body);
    let headers = [
        ("X-GitHub-Event", "push"),
        ("X-GitHub-Delivery", "big-1"),
        ("X-Hub-Signature-256", signature.as_str()),
    ];
    let reply = request(h.addr, "POST", "/hook/github", &headers, body.clone()).await;
    assert_eq!(reply.status, 413, "{reply:?}");

    // Chunked, with no Content-Length to refuse up front: reading stops at the limit.
    let chunks: Vec<Vec<u8>> = body.chunks(64 * 1024).map(<[u8]>::to_vec).collect();
    let headers = [
        ("X-GitHub-Event", "push"),
        ("X-GitHub-Delivery", "big-2"),
        ("X-Hub-Signature-256", signature.as_str()),
    ];
    let reply = request_with(
        h.addr,
        "POST",
        "/hook/github",
        &headers,
        Body::Chunked(chunks),
    )
    .await;
    assert_eq!(reply.status, 413, "{reply:?}");

    assert_eq!(h.triggers.try_next(), None);
    assert_eq!(h.metrics.webhook_requests(WebhookOutcome::TooLarge), 2);
    h.shutdown().await;
}

#[tokio::test]
async fn a_configurable_limit_and_a_chunked_body_under_it() {
    let mut h = Harness::start(
        ServerConfig::new("main")
            .with_webhook_secret(SECRET)
            .with_body_limit(512),
    )
    .await;
    let body = push_payload("refs/heads/main", &sha(4));
    assert!(body.len() < 512);
    let signature = sign(SECRET, &body);
    let chunks: Vec<Vec<u8>> = body.chunks(7).map(<[u8]>::to_vec).collect();
    let headers = [
        ("X-GitHub-Event", "push"),
        ("X-GitHub-Delivery", "small"),
        ("X-Hub-Signature-256", signature.as_str()),
    ];
    let reply = request_with(
        h.addr,
        "POST",
        "/hook/github",
        &headers,
        Body::Chunked(chunks),
    )
    .await;
    assert_eq!(reply.status, 202, "{reply:?}");
    assert_eq!(h.triggers.try_next(), Some(vec![webhook(&sha(4), "small")]));

    let mut big = body.clone();
    big.resize(513, b' ');
    let reply = post_signed_event(h.addr, "push", "too-big", big, SECRET).await;
    assert_eq!(reply.status, 413, "{reply:?}");
    assert_eq!(h.triggers.try_next(), None);
    h.shutdown().await;
}

#[tokio::test]
async fn pings_other_events_other_branches_and_deletions_fire_nothing() {
    let mut h = Harness::signed().await;
    let reply = post_signed_event(
        h.addr,
        "ping",
        "p-1",
        br#"{"zen":"Keep it logically awesome.","hook_id":1}"#.to_vec(),
        SECRET,
    )
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");

    let reply = post_signed_event(
        h.addr,
        "push",
        "o-1",
        push_payload("refs/heads/feature", &sha(5)),
        SECRET,
    )
    .await;
    assert_eq!(reply.status, 202, "{reply:?}");
    assert!(reply.body.contains("ignored"), "{reply:?}");

    let reply = post_signed_event(
        h.addr,
        "push",
        "t-1",
        push_payload("refs/tags/main", &sha(5)),
        SECRET,
    )
    .await;
    assert_eq!(reply.status, 202, "{reply:?}");

    let reply = post_signed_event(
        h.addr,
        "pull_request",
        "pr-1",
        br#"{"action":"opened"}"#.to_vec(),
        SECRET,
    )
    .await;
    assert_eq!(reply.status, 202, "{reply:?}");

    let deleted = String::from_utf8(push_payload("refs/heads/main", &sha(0)))
        .expect("utf8")
        .replace(r#""deleted":false"#, r#""deleted":true"#);
    let reply = post_signed_event(h.addr, "push", "del-1", deleted.into_bytes(), SECRET).await;
    assert_eq!(reply.status, 202, "{reply:?}");

    assert_eq!(h.triggers.try_next(), None);
    assert_eq!(h.metrics.webhook_requests(WebhookOutcome::Ignored), 5);
    h.shutdown().await;
}

#[tokio::test]
async fn a_duplicate_delivery_is_ignored() {
    let mut h = Harness::signed().await;
    let body = push_payload("refs/heads/main", &sha(6));
    let first = post_signed_event(
        h.addr,
        "push",
        "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        body.clone(),
        SECRET,
    )
    .await;
    assert_eq!(first.status, 202, "{first:?}");
    let again = post_signed_event(
        h.addr,
        "push",
        "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        body,
        SECRET,
    )
    .await;
    assert_eq!(again.status, 202, "{again:?}");
    assert!(again.body.contains("duplicate"), "{again:?}");
    assert_eq!(
        h.triggers.try_next(),
        Some(vec![webhook(
            &sha(6),
            "72d3162e-cc78-11e3-81ab-4c9367dc0958"
        )])
    );
    assert_eq!(h.metrics.webhook_requests(WebhookOutcome::Duplicate), 1);
    h.shutdown().await;
}

#[tokio::test]
async fn a_signed_body_replayed_under_new_delivery_ids_fires_once() {
    // GitHub signs the body, not the X-GitHub-Delivery header: a captured delivery replayed
    // with fresh ids is the same body, remembered by its digest.
    let mut h = Harness::signed().await;
    let body = push_payload("refs/heads/main", &sha(8));
    let first = post_signed_event(h.addr, "push", "captured-1", body.clone(), SECRET).await;
    assert_eq!(first.status, 202, "{first:?}");
    for i in 0..20 {
        let again =
            post_signed_event(h.addr, "push", &format!("replay-{i}"), body.clone(), SECRET).await;
        assert_eq!(again.status, 202, "{again:?}");
        assert!(again.body.contains("duplicate"), "{again:?}");
    }
    assert_eq!(
        h.triggers.try_next(),
        Some(vec![webhook(&sha(8), "captured-1")])
    );
    assert_eq!(h.metrics.webhook_requests(WebhookOutcome::Duplicate), 20);
    assert_eq!(h.metrics.webhook_requests(WebhookOutcome::Accepted), 1);
    // GitHub's next push is another body: accepted.
    let next = post_signed_event(
        h.addr,
        "push",
        "next-1",
        push_payload("refs/heads/main", &sha(9)),
        SECRET,
    )
    .await;
    assert_eq!(next.status, 202, "{next:?}");
    assert_eq!(
        h.triggers.try_next(),
        Some(vec![webhook(&sha(9), "next-1")])
    );
    h.shutdown().await;
}

#[tokio::test]
async fn without_a_secret_the_webhook_is_404_even_for_signed_requests() {
    let mut h = Harness::start(ServerConfig::new("main")).await;
    let reply = post_signed_event(
        h.addr,
        "push",
        "n-1",
        push_payload("refs/heads/main", &sha(7)),
        b"",
    )
    .await;
    assert_eq!(reply.status, 404, "{reply:?}");
    let reply = post_signed_event(
        h.addr,
        "push",
        "n-2",
        push_payload("refs/heads/main", &sha(7)),
        SECRET,
    )
    .await;
    assert_eq!(reply.status, 404, "{reply:?}");
    assert_eq!(h.triggers.try_next(), None);
    h.shutdown().await;
}

/// The reconciler's side of a burst: it wakes, then is busy "reconciling" until the burst is over
/// (the test says when), then wakes once more for everything that piled up meanwhile.
async fn reconciler(
    mut rx: TriggerReceiver,
    expected: usize,
    burst_over: oneshot::Receiver<()>,
) -> (usize, Vec<Vec<Trigger>>) {
    let mut burst_over = Some(burst_over);
    let mut wakeups = 0;
    let mut batches = Vec::new();
    let mut seen = 0;
    while seen < expected {
        let batch = rx.next().await.expect("senders alive");
        wakeups += 1;
        seen += batch.len();
        batches.push(batch);
        if let Some(over) = burst_over.take() {
            let _ = over.await;
        }
    }
    (wakeups, batches)
}

#[tokio::test]
async fn fifty_pushes_in_a_burst_wake_the_reconciler_at_most_twice() {
    let Harness {
        addr,
        triggers,
        metrics,
        server,
        ..
    } = Harness::signed().await;
    let (over_tx, over_rx) = oneshot::channel();
    let reconciling = tokio::spawn(reconciler(triggers, 50, over_rx));
    for i in 0..50 {
        let reply = post_signed_event(
            addr,
            "push",
            &format!("burst-{i}"),
            push_payload("refs/heads/main", &sha(100 + i)),
            SECRET,
        )
        .await;
        assert_eq!(reply.status, 202, "push {i}: {reply:?}");
    }
    let _ = over_tx.send(());
    let (wakeups, batches) = tokio::time::timeout(TIMEOUT, reconciling)
        .await
        .expect("reconciled")
        .expect("task");
    assert!(
        (1..=2).contains(&wakeups),
        "{wakeups} wake-ups for 50 pushes"
    );
    let all: Vec<Trigger> = batches.concat();
    assert_eq!(all.len(), 50);
    assert_eq!(
        newest_revision(batches.last().expect("a batch")),
        Some(sha(149).as_str()),
        "the last batch has the newest push"
    );
    assert_eq!(metrics.webhook_requests(WebhookOutcome::Accepted), 50);
    server.shutdown().await;
}

#[tokio::test]
async fn fifty_pushes_before_the_reconciler_looks_are_one_batch() {
    let mut h = Harness::signed().await;
    for i in 0..50 {
        let reply = post_signed_event(
            h.addr,
            "push",
            &format!("b-{i}"),
            push_payload("refs/heads/main", &sha(200 + i)),
            SECRET,
        )
        .await;
        assert_eq!(reply.status, 202, "push {i}: {reply:?}");
    }
    let batch = tokio::time::timeout(TIMEOUT, h.triggers.next())
        .await
        .expect("woke")
        .expect("batch");
    assert_eq!(batch.len(), 50, "one wake-up carries the whole burst");
    assert_eq!(newest_revision(&batch), Some(sha(249).as_str()));
    assert_eq!(h.triggers.try_next(), None);
    h.shutdown().await;
}

#[tokio::test]
async fn health_and_readiness() {
    let h = Harness::signed().await;
    let reply = request(h.addr, "GET", "/healthz", &[], Vec::new()).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let reply = request(h.addr, "GET", "/readyz", &[], Vec::new()).await;
    assert_eq!(reply.status, 503, "{reply:?}");
    h.ready.set_ready(true);
    let reply = request(h.addr, "GET", "/readyz", &[], Vec::new()).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    h.ready.set_ready(false);
    let reply = request(h.addr, "GET", "/readyz", &[], Vec::new()).await;
    assert_eq!(reply.status, 503, "{reply:?}");
    let reply = request(h.addr, "GET", "/hook/github", &[], Vec::new()).await;
    assert_eq!(reply.status, 405, "{reply:?}");
    h.shutdown().await;
}

fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn metrics_are_openmetrics_and_count_webhook_outcomes() {
    let h = Harness::signed().await;
    let push = push_payload("refs/heads/main", &sha(8));
    assert_eq!(
        post_signed_event(h.addr, "push", "m-1", push.clone(), SECRET)
            .await
            .status,
        202
    );
    assert_eq!(
        post_signed_event(h.addr, "push", "m-1", push.clone(), SECRET)
            .await
            .status,
        202
    );
    assert_eq!(
        post_signed_event(h.addr, "push", "m-2", push.clone(), b"wrong")
            .await
            .status,
        401
    );
    assert_eq!(
        post_signed_event(h.addr, "push", "m-3", push.clone(), b"wrong")
            .await
            .status,
        401
    );
    assert_eq!(
        post_signed_event(h.addr, "ping", "m-4", b"{}".to_vec(), SECRET)
            .await
            .status,
        200
    );
    h.metrics
        .inc_reconcile(capstan::serve::ReconcileResult::Success);
    h.metrics.set_clusters("Provisioned", 3);

    let reply = request(h.addr, "GET", "/metrics", &[], Vec::new()).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(
        reply.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    let text = &reply.body;
    for name in [
        "capstan_reconcile_duration_seconds",
        "capstan_api_requests_total",
        "capstan_objects_total",
        "capstan_reconciles_total",
        "capstan_webhook_requests_total",
        "capstan_clusters",
    ] {
        assert!(text.contains(name), "{name} missing from\n{text}");
    }
    let outcome = |o: &str| {
        metric_value(
            text,
            &format!("capstan_webhook_requests_total{{outcome=\"{o}\"}}"),
        )
    };
    assert_eq!(outcome("accepted"), Some(1.0), "{text}");
    assert_eq!(outcome("duplicate"), Some(1.0), "{text}");
    assert_eq!(outcome("unauthorized"), Some(2.0), "{text}");
    assert_eq!(outcome("ignored"), Some(1.0), "{text}");
    assert_eq!(outcome("too_large"), Some(0.0), "{text}");
    assert_eq!(
        metric_value(text, "capstan_reconciles_total{result=\"success\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric_value(text, "capstan_clusters{phase=\"Provisioned\"}"),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        metric_value(
            text,
            "capstan_reconcile_duration_seconds_count{stage=\"apply\"}"
        ),
        Some(0.0),
        "{text}"
    );
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    h.shutdown().await;
}

#[tokio::test]
async fn webhook_and_metrics_can_listen_apart() {
    let (tx, mut rx) = channel();
    let metrics = Arc::new(Metrics::new());
    let ready = ReadyFlag::new();
    let state = ServerState::new(
        ServerConfig::new("main").with_webhook_secret(SECRET),
        tx,
        metrics,
        ready,
    );
    let hook_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let ops_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let hook_addr = hook_listener.local_addr().expect("addr");
    let ops_addr = ops_listener.local_addr().expect("addr");
    let hook = Server::spawn(hook_listener, webhook_router(state.clone()));
    let ops = Server::spawn(ops_listener, ops_router(state));

    assert_eq!(
        post_signed_event(
            hook_addr,
            "push",
            "s-1",
            push_payload("refs/heads/main", &sha(9)),
            SECRET
        )
        .await
        .status,
        202
    );
    assert_eq!(
        post_signed_event(
            ops_addr,
            "push",
            "s-2",
            push_payload("refs/heads/main", &sha(9)),
            SECRET
        )
        .await
        .status,
        404
    );
    assert_eq!(
        request(hook_addr, "GET", "/metrics", &[], Vec::new())
            .await
            .status,
        404
    );
    let reply = request(ops_addr, "GET", "/metrics", &[], Vec::new()).await;
    assert_eq!(
        metric_value(
            &reply.body,
            "capstan_webhook_requests_total{outcome=\"accepted\"}"
        ),
        Some(1.0),
        "{reply:?}"
    );
    assert_eq!(
        request(ops_addr, "GET", "/healthz", &[], Vec::new())
            .await
            .status,
        200
    );
    assert_eq!(rx.try_next(), Some(vec![webhook(&sha(9), "s-1")]));

    hook.shutdown().await;
    ops.shutdown().await;
}

/// Waits for the next batch, at most `wait`.
async fn next_within(rx: &mut TriggerReceiver, wait: Duration) -> Option<Vec<Trigger>> {
    tokio::time::timeout(wait, rx.next()).await.ok().flatten()
}

#[tokio::test]
async fn the_watcher_fires_on_a_file_write_but_not_for_git_or_editor_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    std::fs::create_dir_all(root.join(".git/refs/heads")).expect("mkdir");
    std::fs::create_dir_all(root.join("clusters/mgmt")).expect("mkdir");
    let (tx, mut rx): (TriggerSender, TriggerReceiver) = channel();
    let watcher = watch_local_with(root, Duration::from_millis(100), tx).expect("watch");

    // Writes under .git/ and editor swap files, then one spec edit: the events arrive in order,
    // so when the edit has fired, every earlier write has been judged, and the only path that
    // made the watcher fire is the spec's (an ignored write would have fired first, in an earlier
    // batch or as the first relevant path of the same one).
    write_file(&root.join(".git/index"), "index");
    write_file(&root.join(".git/refs/heads/main"), "0123");
    std::fs::create_dir_all(root.join(".git/objects/ab")).expect("mkdir");
    write_file(&root.join(".git/objects/ab/cdef"), "blob");
    write_file(&root.join("clusters/mgmt/.cluster.yaml.swp"), "swap");
    write_file(&root.join("clusters/mgmt/cluster.yaml~"), "backup");
    write_file(
        &root.join("clusters/mgmt/cluster.yaml"),
        "apiVersion: anywhere.eks.amazonaws.com/v1alpha1\n",
    );
    let batch = next_within(&mut rx, TIMEOUT)
        .await
        .expect("a file write fires");
    assert!(
        !batch.is_empty() && batch.iter().all(|t| *t == Trigger::LocalChange),
        "{batch:?}"
    );
    let spec = watcher.root().join("clusters/mgmt/cluster.yaml");
    let fired = watcher.fired_for();
    assert!(
        !fired.is_empty() && fired.iter().all(|p| *p == spec),
        "fired for {fired:?}, not only for {}",
        spec.display()
    );

    watcher.stop();
}

/// Writes `text` to `path`.
fn write_file(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write");
}

#[test]
fn tracing_can_be_initialised_twice_and_rejects_a_bad_filter() {
    assert!(capstan::serve::init_tracing(true, Some("capstan=notalevel")).is_err());
    let first = capstan::serve::init_tracing(true, Some("error")).expect("valid filter");
    let second = capstan::serve::init_tracing(false, None).expect("second call is fine");
    assert!(first, "the first call installs the subscriber");
    assert!(!second, "the second leaves it in place");
}
