//! The agent's HTTP surface: the GitHub webhook, probes and metrics.
//!
//! Two audiences, possibly two listeners: GitHub must reach the webhook (often through an ingress
//! from the internet), while kubelet probes and Prometheus scrape from inside the cluster. The CLI's
//! `--webhook-addr` and `--metrics-addr` can therefore differ, so one [`ServerState`] yields a
//! [`webhook_router`] and an [`ops_router`] (or [`router`] with everything, for one address).
//!
//! - `GET /healthz` answers 200 as long as the process serves HTTP at all (liveness: restarting
//!   would not help with anything else).
//! - `GET /readyz` answers 503 until the agent calls [`ReadyFlag::set_ready`] (typically after the
//!   first successful source fetch), then 200 (readiness: route webhooks here only when they can be
//!   acted on).
//! - `GET /metrics` is the OpenMetrics exposition of [`Metrics`].
//! - `POST /hook/github` is [`super::webhook`].
//!
//! [`serve`] speaks HTTP/1.1 only, through hyper's connection builder rather than `axum::serve`,
//! for the knobs a listener on the internet needs and `axum::serve` does not offer: a deadline
//! for a request's headers ([`HEADER_READ_TIMEOUT`]) and a small read buffer per connection
//! ([`READ_BUFFER_LIMIT`]), so that connections that never finish their headers hold neither a
//! task nor memory for long. Bodies have the webhook's own bounds.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

use super::metrics::CONTENT_TYPE;
use super::state::ServerState;
use super::webhook;

/// How long a client may take to send a request's headers, and how long a kept-alive connection
/// may sit idle (hyper times both from the moment it waits for headers). GitHub and kubelet send
/// theirs in one packet; a connection that trickles them is someone holding sockets open.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The most a connection buffers while reading (twice hyper's minimum; its default is about
/// 400 KiB, which a few thousand connections trickling headers would turn into gigabytes).
/// Headers over it are refused (431): GitHub's are about 1 KiB. Bodies stream through it.
pub const READ_BUFFER_LIMIT: usize = 16 * 1024;

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The server stopped with an I/O error.
    #[error("HTTP server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// Every route: the webhook, probes and metrics, for a single listener.
pub fn router(state: ServerState) -> Router {
    webhook_router(state.clone()).merge(ops_router(state))
}

/// Only `POST /hook/github`, for the listener GitHub reaches.
pub fn webhook_router(state: ServerState) -> Router {
    Router::new()
        .route("/hook/github", post(webhook::github))
        .with_state(state)
}

/// Only `/healthz`, `/readyz` and `/metrics`, for the in-cluster listener.
pub fn ops_router(state: ServerState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<ServerState>) -> Response {
    if state.ready().is_ready() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
    }
}

async fn metrics(State(state): State<ServerState>) -> Response {
    match state.metrics().try_encode() {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "encoding metrics");
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response()
        }
    }
}

/// Binds a TCP listener, naming the address in the error.
pub async fn bind(addr: &str) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind {
            addr: addr.to_owned(),
            source,
        })
}

/// Serves `router` on `listener` (HTTP/1.1, with [`HEADER_READ_TIMEOUT`] and
/// [`READ_BUFFER_LIMIT`]) until `shutdown` completes, then finishes in-flight requests.
pub async fn serve(
    mut listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    tracing::info!(addr = ?addr, "serving HTTP");
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(READ_BUFFER_LIMIT);
    let connections = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // axum's accept: retries what a flood of connections can make fail (EMFILE: after a
        // second's pause), logging it.
        let (stream, _peer) = tokio::select! {
            accepted = axum::serve::Listener::accept(&mut listener) => accepted,
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = connections.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
        });
    }
    drop(listener);
    connections.shutdown().await;
    Ok(())
}
