//! The webhook under hostile load, over real sockets: the bounds on bodies read before their
//! signature is checked (how many, how many bytes), the body timeout and the header timeout,
//! and a signed push getting through while slow forged bodies fill the bounds.
//!
//! No assertion depends on elapsed time: the tests wait for the server's own counters
//! (`ServerState::unverified_requests`, `capstan_webhook_requests_total{outcome}`) or for its
//! answer, bounded by generous timeouts only.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use capstan::serve::server::HEADER_READ_TIMEOUT;
use capstan::serve::webhook::{RETRY_AFTER_SECS, sign};
use capstan::serve::{
    Metrics, ReadyFlag, ServerConfig, ServerState, Trigger, TriggerReceiver, WebhookOutcome,
    channel, serve, webhook_router,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

const SECRET: &[u8] = b"flood-secret";
const TIMEOUT: Duration = Duration::from_secs(30);
/// A signature of the right shape that matches nothing.
const FORGED: &str = "sha256=0000000000000000000000000000000000000000000000000000000000000000";

struct Harness {
    addr: SocketAddr,
    state: ServerState,
    metrics: Arc<Metrics>,
    triggers: TriggerReceiver,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), capstan::serve::ServerError>>,
}

impl Harness {
    async fn start(config: ServerConfig) -> Harness {
        let (tx, triggers) = channel();
        let metrics = Arc::new(Metrics::new());
        let state = ServerState::new(
            config.with_webhook_secret(SECRET),
            tx,
            metrics.clone(),
            ReadyFlag::new(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, webhook_router(state.clone()), async move {
            let _ = stopped.await;
        }));
        Harness {
            addr,
            state,
            metrics,
            triggers,
            stop,
            task,
        }
    }

    async fn shutdown(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(TIMEOUT, self.task)
            .await
            .expect("server stops")
            .expect("task")
            .expect("server ended without error");
    }

    fn count(&self, outcome: WebhookOutcome) -> u64 {
        self.metrics.webhook_requests(outcome)
    }
}

/// Waits until `done` holds, looking every few milliseconds.
async fn spin_until(what: &str, mut done: impl FnMut() -> bool) {
    let wait = async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    tokio::time::timeout(TIMEOUT, wait)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

/// A forged push whose body is still arriving: its headers (declaring `declared` bytes) and the
/// first `sent` bytes have been written.
async fn slow(addr: SocketAddr, declared: usize, sent: usize) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /hook/github HTTP/1.1\r\nHost: {addr}\r\nX-GitHub-Event: push\r\n\
         X-Hub-Signature-256: {FORGED}\r\nContent-Type: application/json\r\n\
         Content-Length: {declared}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    stream.write_all(&vec![b' '; sent]).await.expect("write");
    stream
}

/// A response: its status and head.
#[derive(Debug)]
struct Reply {
    status: u16,
    head: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Reads what the server answers on `stream` until it closes the connection.
async fn reply(stream: &mut TcpStream) -> Reply {
    let mut raw = Vec::new();
    let read = tokio::time::timeout(TIMEOUT, stream.read_to_end(&mut raw))
        .await
        .expect("the server answered and closed in time");
    let text = String::from_utf8_lossy(&raw);
    let Some((head, _)) = text.split_once("\r\n\r\n") else {
        panic!("no response ({read:?}): {text:?}");
    };
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    Reply {
        status,
        head: head.to_owned(),
    }
}

/// A signed push of `after` to main, sent whole.
fn signed_push(addr: SocketAddr, after: &str, delivery: &str) -> impl Future<Output = Reply> {
    let body = format!(r#"{{"ref":"refs/heads/main","after":"{after}","deleted":false}}"#);
    let head = format!(
        "POST /hook/github HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         X-GitHub-Event: push\r\nX-GitHub-Delivery: {delivery}\r\n\
         X-Hub-Signature-256: {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        sign(SECRET, body.as_bytes()),
        body.len()
    );
    async move {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(head.as_bytes()).await.expect("write");
        reply(&mut stream).await
    }
}

fn pushed(after: &str, delivery: &str) -> Vec<Trigger> {
    vec![Trigger::Webhook {
        after: Some(after.to_owned()),
        delivery: Some(delivery.to_owned()),
    }]
}

#[tokio::test]
async fn past_the_bound_the_body_read_longest_is_cut_off_and_a_signed_push_gets_through() {
    const BOUND: usize = 4;
    // The body timeout out of the way: on a loaded machine the slow bodies must be cut by the
    // bound, not time out first.
    let mut h = Harness::start(
        ServerConfig::new("main")
            .with_unverified_bounds(BOUND, 1 << 20)
            .with_body_timeout(Duration::from_secs(600)),
    )
    .await;
    // The bound filled by slow forged bodies, one after the other (so their order is known).
    let mut slow_ones = Vec::new();
    for i in 0..BOUND {
        slow_ones.push(slow(h.addr, 1000, 10).await);
        spin_until("the slow body to be read", || {
            h.state.unverified_requests() == i + 1
        })
        .await;
    }

    // One more: the oldest is cut off at once (503, Retry-After), the newcomer is read.
    let mut newest = slow(h.addr, 1000, 10).await;
    let cut = reply(&mut slow_ones[0]).await;
    assert_eq!(cut.status, 503, "{cut:?}");
    assert_eq!(
        cut.header("retry-after"),
        Some(RETRY_AFTER_SECS.to_string().as_str())
    );
    assert_eq!(h.count(WebhookOutcome::Busy), 1);
    spin_until("the newcomer to be read", || {
        h.state.unverified_requests() == BOUND
    })
    .await;

    // A signed push while the bound is full of slow bodies: it cuts the next oldest and is in.
    let push = signed_push(h.addr, "abc123", "d-1").await;
    assert_eq!(push.status, 202, "{push:?}");
    assert_eq!(h.triggers.try_next(), Some(pushed("abc123", "d-1")));
    assert_eq!(reply(&mut slow_ones[1]).await.status, 503);
    assert_eq!(h.count(WebhookOutcome::Busy), 2);
    assert_eq!(h.count(WebhookOutcome::Accepted), 1);
    // What is left: two slow bodies and the newest, none of them fired anything.
    assert_eq!(h.state.unverified_requests(), BOUND - 1);

    // Senders that go away give their room back.
    drop(slow_ones);
    drop(newest.shutdown().await);
    drop(newest);
    spin_until("every slow body to be let go", || {
        h.state.unverified_requests() == 0 && h.state.unverified_bytes() == 0
    })
    .await;
    assert_eq!(h.triggers.try_next(), None);
    h.shutdown().await;
}

#[tokio::test]
async fn a_slow_body_is_cut_off_after_the_body_timeout() {
    let h = Harness::start(ServerConfig::new("main").with_body_timeout(Duration::from_millis(200)))
        .await;
    let mut stream = slow(h.addr, 1000, 100).await;
    let cut = reply(&mut stream).await;
    assert_eq!(cut.status, 408, "{cut:?}");
    assert_eq!(cut.header("connection"), Some("close"));
    assert_eq!(h.count(WebhookOutcome::Timeout), 1);
    assert_eq!(h.state.unverified_requests(), 0);
    // The timeout counts from the body's first wait, not the connection's: a push still goes.
    let push = signed_push(h.addr, "def456", "d-2").await;
    assert_eq!(push.status, 202, "{push:?}");
    h.shutdown().await;
}

#[tokio::test]
async fn past_the_byte_budget_the_bigger_body_gives_way() {
    const BUDGET: usize = 64 * 1024;
    let mut h = Harness::start(
        ServerConfig::new("main")
            .with_unverified_bounds(16, BUDGET)
            .with_body_timeout(Duration::from_secs(600)),
    )
    .await;
    let mut older = slow(h.addr, 100_000, 40_000).await;
    spin_until("the older body's bytes to be held", || {
        h.state.unverified_bytes() >= 40_000
    })
    .await;
    // 40,000 + 30,000 bytes do not fit in 64 KiB: the bigger body gives way.
    let mut newer = slow(h.addr, 100_000, 30_000).await;
    let cut = reply(&mut older).await;
    assert_eq!(cut.status, 503, "{cut:?}");
    assert_eq!(h.count(WebhookOutcome::Busy), 1);
    spin_until("the newer body's bytes to be held", || {
        h.state.unverified_requests() == 1 && h.state.unverified_bytes() >= 30_000
    })
    .await;
    assert!(h.state.unverified_bytes() <= BUDGET);
    // A push fits beside it.
    let push = signed_push(h.addr, "0123abcd", "d-3").await;
    assert_eq!(push.status, 202, "{push:?}");
    assert_eq!(h.triggers.try_next(), Some(pushed("0123abcd", "d-3")));
    drop(newer.shutdown().await);
    h.shutdown().await;
}

#[tokio::test]
async fn a_body_larger_than_the_whole_byte_budget_is_refused() {
    let h = Harness::start(ServerConfig::new("main").with_unverified_bounds(4, 16)).await;
    let push = signed_push(h.addr, "fedcba98", "d-4").await;
    assert_eq!(push.status, 503, "{push:?}");
    assert_eq!(h.count(WebhookOutcome::Busy), 1);
    assert_eq!(h.count(WebhookOutcome::Accepted), 0);
    h.shutdown().await;
}

#[tokio::test]
async fn a_connection_that_never_finishes_its_headers_is_closed() {
    let h = Harness::start(ServerConfig::new("main")).await;
    let mut stream = TcpStream::connect(h.addr).await.expect("connect");
    stream
        .write_all(b"POST /hook/github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: pu")
        .await
        .expect("write");
    // The server closes it (after HEADER_READ_TIMEOUT), answering 408 or nothing.
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(TIMEOUT, stream.read_to_end(&mut raw))
        .await
        .expect("the server closed the connection");
    let text = String::from_utf8_lossy(&raw);
    assert!(
        text.is_empty() || text.starts_with("HTTP/1.1 408"),
        "{text:?} ({HEADER_READ_TIMEOUT:?})"
    );
    assert_eq!(h.state.unverified_requests(), 0);
    h.shutdown().await;
}
