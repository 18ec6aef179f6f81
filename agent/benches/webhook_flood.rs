//! Benchmark (prints figures; not a test): the GitHub webhook under a flood of slow forged
//! deliveries, and signed pushes sent meanwhile.
//!
//! The agent's real webhook server (`ServerState`, `webhook_router`, `serve`, default limits)
//! runs in a child process of its own (this benchmark run again with `CAPSTAN_BENCH_ROLE=server`),
//! so that its memory is measured apart from the flood's. The flood: `CAPSTAN_BENCH_FLOOD`
//! connections (default 500), each sending a request with a forged `X-Hub-Signature-256`, a
//! declared `Content-Length` at the 1 MiB limit and `CAPSTAN_BENCH_BURST` bytes of it at once
//! (default 256 KiB), then dribbling 1 KiB every 100 ms; a request the server answers or drops
//! is followed at once by another on a new connection, until the end. Meanwhile a signed push
//! (an 8 KiB body, as GitHub sends for a merge) goes every `CAPSTAN_BENCH_PUSH_EVERY_MS`
//! (default 250) on a connection of its own.
//!
//! Prints: the server's RSS before the flood and its peak (VmHWM), its CPU time; the flood's
//! requests by how they ended (cut off with 503, 408 after the body timeout, dropped), the
//! server's `capstan_webhook_requests_total{outcome}`; the signed pushes accepted out of those
//! sent, with their latency (connect to answer) at the median, p90, p99 and worst.
//!
//! Run: `cargo bench -p capstan --bench webhook_flood` (`CAPSTAN_BENCH_SECONDS`, default 30;
//! `CAPSTAN_BENCH_BOUND` sets the server's bound on bodies read at once, default the agent's).

use std::io::{BufRead, BufReader, Write as _};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use capstan::serve::webhook::sign;
use capstan::serve::{
    Metrics, ReadyFlag, ServerConfig, ServerState, WebhookOutcome, channel, ops_router, serve,
    webhook_router,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod support;
use support::{cpu_seconds, setting};

const SECRET: &str = "bench-secret";
const ROLE: &str = "CAPSTAN_BENCH_ROLE";
/// What a slow sender sends every [`DRIBBLE_EVERY`] after its burst.
const DRIBBLE: usize = 1024;
const DRIBBLE_EVERY: Duration = Duration::from_millis(100);
/// A forged signature of the right shape.
const FORGED: &str = "sha256=0000000000000000000000000000000000000000000000000000000000000000";

fn main() {
    if std::env::var_os(ROLE).is_some() {
        server();
    } else {
        flood();
    }
}

/// The child: the webhook and ops listeners with the agent's defaults, until stdin closes.
fn server() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (tx, mut triggers) = channel();
        let metrics = Arc::new(Metrics::new());
        let mut config = ServerConfig::new("main").with_webhook_secret(SECRET);
        config.unverified_requests =
            setting::<u64>("CAPSTAN_BENCH_BOUND", config.unverified_requests as u64) as usize;
        let state = ServerState::new(config, tx, metrics, ReadyFlag::new());
        let hook = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ops = TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!(
            "{} {}",
            hook.local_addr().unwrap().port(),
            ops.local_addr().unwrap().port()
        );
        std::io::stdout().flush().unwrap();
        // The agent's reconciler, reduced to taking the triggers.
        tokio::spawn(async move { while triggers.next().await.is_some() {} });
        let stdin_closed = async {
            let _ = tokio::task::spawn_blocking(|| {
                let mut line = String::new();
                let _ = std::io::stdin().read_line(&mut line);
            })
            .await;
        };
        let (stop, _) = tokio::sync::broadcast::channel::<()>(1);
        let mut a = stop.subscribe();
        let mut b = stop.subscribe();
        let hook = tokio::spawn(serve(hook, webhook_router(state.clone()), async move {
            let _ = a.recv().await;
        }));
        let ops = tokio::spawn(serve(ops, ops_router(state), async move {
            let _ = b.recv().await;
        }));
        stdin_closed.await;
        let _ = stop.send(());
        let _ = hook.await;
        let _ = ops.await;
    });
}

/// The server child; killed when dropped.
struct ServerProcess(Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn proc_status_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|k| k.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// How the flood's requests ended.
#[derive(Default)]
struct FloodCounts {
    sent: AtomicU64,
    busy: AtomicU64,
    timeout: AtomicU64,
    other: AtomicU64,
    dropped: AtomicU64,
    connect_failed: AtomicU64,
}

/// The status code of a raw HTTP/1.1 response, if it starts like one.
fn status_code_of(raw: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(raw.get(..raw.len().min(64))?).ok()?;
    text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

/// One slow sender: request after request until `end`.
async fn slow_sender(addr: SocketAddr, burst: usize, end: Instant, counts: Arc<FloodCounts>) {
    let limit = ServerConfig::DEFAULT_BODY_LIMIT;
    let head = format!(
        "POST /hook/github HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: GitHub-Hookshot/forged\r\n\
         X-GitHub-Event: push\r\nX-GitHub-Delivery: forged\r\nX-Hub-Signature-256: {FORGED}\r\n\
         Content-Type: application/json\r\nContent-Length: {limit}\r\n\r\n"
    );
    let burst = vec![b' '; burst.min(limit)];
    let dribble = [b' '; DRIBBLE];
    while Instant::now() < end {
        let Ok(stream) = TcpStream::connect(addr).await else {
            counts.connect_failed.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        counts.sent.fetch_add(1, Ordering::Relaxed);
        let (mut read, mut write) = stream.into_split();
        let writing = async {
            write.write_all(head.as_bytes()).await?;
            write.write_all(&burst).await?;
            let mut sent = burst.len();
            while sent + DRIBBLE < limit {
                tokio::time::sleep(DRIBBLE_EVERY).await;
                write.write_all(&dribble).await?;
                sent += DRIBBLE;
            }
            std::future::pending::<std::io::Result<()>>().await
        };
        let reading = async {
            let mut raw = Vec::new();
            let _ = read.read_to_end(&mut raw).await;
            raw
        };
        let raw = tokio::select! {
            raw = reading => raw,
            // The server closed and the write failed first: what it answered is read below.
            _ = writing => {
                let mut raw = Vec::new();
                let _ = tokio::time::timeout(Duration::from_secs(1), read.read_to_end(&mut raw)).await;
                raw
            }
            () = tokio::time::sleep_until(end.into()) => return,
        };
        let counter = match status_code_of(&raw) {
            Some(503) => &counts.busy,
            Some(408) => &counts.timeout,
            Some(_) => &counts.other,
            None => &counts.dropped,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// A signed push like GitHub's for a merge (about 8 KiB): its status and latency.
async fn timed_signed_push(addr: SocketAddr, i: u64) -> (Option<u16>, Duration) {
    let padding = "x".repeat(8 * 1024);
    let body = format!(
        r#"{{"ref":"refs/heads/main","after":"{i:040x}","deleted":false,"repository":{{"full_name":"acme/fleet"}},"head_commit":{{"message":"{padding}"}}}}"#
    );
    let request = format!(
        "POST /hook/github HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         User-Agent: GitHub-Hookshot/bench\r\nX-GitHub-Event: push\r\nX-GitHub-Delivery: push-{i}\r\n\
         X-Hub-Signature-256: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        sign(SECRET.as_bytes(), body.as_bytes()),
        body.len()
    );
    let started = Instant::now();
    let attempt = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        let _ = stream.read_to_end(&mut raw).await;
        status_code_of(&raw)
    };
    let status = tokio::time::timeout(Duration::from_secs(30), attempt)
        .await
        .ok()
        .flatten();
    (status, started.elapsed())
}

/// The server's `capstan_webhook_requests_total{outcome="…"}`.
async fn server_count(ops: SocketAddr, outcome: WebhookOutcome) -> u64 {
    let series = format!(
        "capstan_webhook_requests_total{{outcome=\"{}\"}} ",
        outcome.as_str()
    );
    let Ok(mut s) = TcpStream::connect(ops).await else {
        return 0;
    };
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {ops}\r\nConnection: close\r\n\r\n");
    if s.write_all(request.as_bytes()).await.is_err() {
        return 0;
    }
    let mut text = String::new();
    let _ = s.read_to_string(&mut text).await;
    text.lines()
        .find_map(|l| l.strip_prefix(&series)?.trim().parse().ok())
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn flood() {
    let connections = setting::<u64>("CAPSTAN_BENCH_FLOOD", 500);
    let burst = setting::<u64>("CAPSTAN_BENCH_BURST", 256 * 1024) as usize;
    let seconds = setting::<u64>("CAPSTAN_BENCH_SECONDS", 30);
    let push_every = Duration::from_millis(setting::<u64>("CAPSTAN_BENCH_PUSH_EVERY_MS", 250));

    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(ROLE, "server")
        .env("RUST_LOG", "off")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ports = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ports)
        .unwrap();
    let server = ServerProcess(child);
    let pid = server.0.id();
    let mut ports = ports.split_whitespace().map(|p| p.parse::<u16>().unwrap());
    let hook = SocketAddr::from(([127, 0, 0, 1], ports.next().unwrap()));
    let ops = SocketAddr::from(([127, 0, 0, 1], ports.next().unwrap()));

    // A push before the flood, for the baseline.
    let (status, quiet) = timed_signed_push(hook, 0).await;
    assert_eq!(status, Some(202), "a push without a flood is accepted");
    let rss_before = proc_status_mib(pid, "VmRSS:");
    let cpu_before = cpu_seconds(pid);
    println!(
        "server: RSS {rss_before:.1} MiB before the flood; a signed push without it: {}",
        ms(quiet)
    );
    println!(
        "flood: {connections} connections for {seconds} s, each a forged request declaring {} bytes, \
         {} KiB at once then 1 KiB every 100 ms, again at once when answered; a signed push every {} ms",
        ServerConfig::DEFAULT_BODY_LIMIT,
        burst / 1024,
        push_every.as_millis()
    );

    let started = Instant::now();
    let end = started + Duration::from_secs(seconds);
    let counts = Arc::new(FloodCounts::default());
    let senders: Vec<_> = (0..connections)
        .map(|_| tokio::spawn(slow_sender(hook, burst, end, counts.clone())))
        .collect();
    // Pushes once the flood has filled the bound (the server has cut off a first slow body).
    let filled = async {
        while server_count(ops, WebhookOutcome::Busy).await == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), filled)
        .await
        .expect("the flood fills the bound");
    println!(
        "bound full after {} (the first slow body cut off)",
        ms(started.elapsed())
    );
    let mut pushes = Vec::new();
    let mut i = 1;
    let mut tick = tokio::time::interval(push_every);
    while Instant::now() + Duration::from_secs(2) < end {
        tick.tick().await;
        pushes.push(tokio::spawn(timed_signed_push(hook, i)));
        i += 1;
    }
    let mut latencies = Vec::new();
    let mut refused = std::collections::BTreeMap::<String, u64>::new();
    for p in pushes {
        let (status, latency) = p.await.unwrap();
        match status {
            Some(202) => latencies.push(latency),
            other => {
                *refused
                    .entry(other.map_or("no answer".into(), |s| s.to_string()))
                    .or_default() += 1
            }
        }
    }
    for s in senders {
        let _ = s.await;
    }

    let peak = proc_status_mib(pid, "VmHWM:");
    let cpu = cpu_seconds(pid) - cpu_before;
    let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
    println!(
        "slow requests: {} sent; {} cut off (503 busy), {} timed out (408), {} other answers, \
         {} dropped without an answer; {} connects failed",
        n(&counts.sent),
        n(&counts.busy),
        n(&counts.timeout),
        n(&counts.other),
        n(&counts.dropped),
        n(&counts.connect_failed)
    );
    let mut outcomes = Vec::new();
    for &o in WebhookOutcome::ALL {
        outcomes.push(format!("{} {}", o.as_str(), server_count(ops, o).await));
    }
    println!(
        "server capstan_webhook_requests_total: {}",
        outcomes.join(", ")
    );
    latencies.sort();
    let sent = latencies.len() as u64 + refused.values().sum::<u64>();
    println!(
        "signed pushes: {} of {sent} accepted (202){}; latency median {}, p90 {}, p99 {}, worst {}",
        latencies.len(),
        if refused.is_empty() {
            String::new()
        } else {
            format!(", refused: {refused:?}")
        },
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.9)),
        ms(percentile(&latencies, 0.99)),
        ms(latencies.last().copied().unwrap_or_default())
    );
    println!(
        "server: peak RSS (VmHWM) {peak:.1} MiB, {cpu:.1} s CPU during the flood ({:.0} % of a core)",
        100.0 * cpu / started.elapsed().as_secs_f64()
    );
    drop(server);
}
