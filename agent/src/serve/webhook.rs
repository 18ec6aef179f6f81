//! `POST /hook/github`: GitHub push notifications, so the agent reconciles seconds after a merge
//! instead of at the next poll.
//!
//! The endpoint is reachable from the internet (GitHub has to reach it), so it trusts nothing it
//! has not authenticated. The order of checks is the security argument:
//!
//! 1. No secret configured: 404. An unsigned webhook would let anyone make the agent fetch and
//!    apply at will, so there is no "accept unsigned" mode. An empty secret counts as none.
//! 2. No `X-Hub-Signature-256` header: 401 before a byte of the body is buffered.
//! 3. A declared body over the limit (default 1 MiB): 413, before a byte is buffered.
//! 4. Room to read the body ([`intake`]): at most [`MAX_UNVERIFIED_REQUESTS`] bodies (by
//!    default) are read at once before their signature is checked, holding at most
//!    [`MAX_UNVERIFIED_BYTES`] together (taken as the bytes arrive). Nothing waits: past the
//!    bound on requests the one reading longest is cut off; past the budget of bytes, the ones
//!    holding more than the one that needs bytes, the largest first, then the ones that came
//!    before it, the oldest first (or, if they do not hold enough, that one itself): 503 with
//!    `Retry-After`, counted as `busy`. A cut off body's memory is freed at once. A flood of slow
//!    forged bodies therefore holds a bounded amount of memory, and a push from GitHub, which
//!    sends its few kilobytes at once, still gets through it.
//! 5. An actual body over the limit: 413, reading stops at the limit. A body still not complete
//!    after [`BODY_TIMEOUT`]: 408, counted as `timeout`. (The connection's headers have their own
//!    timeout: [`super::server::HEADER_READ_TIMEOUT`].)
//! 6. HMAC-SHA256 of the raw bytes (before any JSON parsing) against `sha256=<hex>`, compared in
//!    constant time (`Mac::verify_slice`); the legacy SHA-1 header is never accepted. Wrong: 401.
//!    The body's room is given back here, verified or not.
//! 7. Only then is anything believed: a delivery whose id or whose body (its SHA-256) is among
//!    the last [`DELIVERY_LOG_SIZE`] of each is ignored ([`DeliveryLog`]); `ping` answers 200;
//!    events other than `push`, pushes to other refs and branch deletions are acknowledged with
//!    202 and ignored.
//! 8. A `pull_request` delivery (opened, synchronize, reopened; closed drops its plan from the
//!    dashboard) into the followed branch is
//!    queued for a plan ([`crate::github::pr`]; a follower hands it to the leader,
//!    [`crate::github::handover`]) when GitHub credentials are configured; one from a fork only
//!    with `--pr-plans-from-forks`. It never fires a reconcile.
//! 9. A push to the followed branch fires one [`Trigger::Webhook`] carrying `after` and the
//!    delivery id, then answers 202. The trigger channel coalesces bursts, so fifty merges in a
//!    change window are one reconcile, not fifty (Flux's "reconcile storm").
//!
//! Nothing is fired on any failure path, every refusal closes the connection (the rest of an
//! unread body is not waited for), and every request but those to a disabled endpoint is counted
//! by outcome in `capstan_webhook_requests_total`.
//!
//! # Replays
//!
//! GitHub's signature covers the body only: not the delivery id, not the event header, not a
//! time. Whoever captured one signed delivery (a proxy's log, a shared request bin) can send it
//! again under a new id, and no check can tell it from GitHub. So the body itself is remembered:
//! GitHub's bodies differ from one delivery to the next (a push names its commits and the time it
//! was pushed), its redeliveries repeat id and body, and a replay repeats the body. While the
//! body is among the last [`DELIVERY_LOG_SIZE`], a replay is a `duplicate`. What one can do
//! beyond that window (older captures, or after a restart, which forgets): a push fires a trigger
//! that fetches the followed branch and reconciles *its* head (the payload's `after` is only
//! logged), so nothing is applied that is not on the branch already, and triggers coalesce (one
//! revision load at a time, at most one per 100 ms window; on a follower, each accepted push is
//! one update of the leader's Lease, [`crate::leader::forward`]); a `pull_request` queues a plan
//! of the pull request's current head (fetched from `refs/pull/N/head`, one plan at a time, one
//! waiting per pull request), marking the payload's head commit pending, and a `closed` one takes
//! the pull request's plan off the dashboard until its next push. Each capture is accepted once
//! per window: a flood of replays is as many duplicates.

use std::future::poll_fn;
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

pub use super::deliveries::{DELIVERY_LOG_SIZE, DeliveryLog};
use super::intake::Reader;
pub use super::intake::{
    BODY_TIMEOUT, MAX_UNVERIFIED_BYTES, MAX_UNVERIFIED_REQUESTS, RETRY_AFTER_SECS,
};
use super::metrics::WebhookOutcome;
use super::state::ServerState;
use super::trigger::Trigger;

/// The signature header GitHub sends (HMAC-SHA256).
pub const SIGNATURE_HEADER: &str = "x-hub-signature-256";
/// The event-name header.
pub const EVENT_HEADER: &str = "x-github-event";
/// The delivery-id header.
pub const DELIVERY_HEADER: &str = "x-github-delivery";

/// Why a webhook request was refused.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// No secret is configured, so the endpoint does not exist.
    #[error("webhook endpoint disabled: no secret configured")]
    NotConfigured,
    /// No `X-Hub-Signature-256` header.
    #[error("missing X-Hub-Signature-256 header")]
    MissingSignature,
    /// The signature header is not `sha256=<64 hex digits>`.
    #[error("malformed X-Hub-Signature-256 header (expected sha256=<hex>)")]
    MalformedSignature,
    /// The signature does not match the body.
    #[error("signature mismatch")]
    BadSignature,
    /// The body is larger than the limit.
    #[error("request body larger than {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The body could not be read.
    #[error("reading the request body: {0}")]
    BodyRead(#[source] axum::Error),
    /// The body did not arrive in time ([`BODY_TIMEOUT`] by default).
    #[error("request body not received within {0:?}")]
    BodyTimeout(Duration),
    /// Cut off for a newer request, or no room at all, while the bounds on bodies not verified
    /// yet were reached ([`MAX_UNVERIFIED_REQUESTS`], [`MAX_UNVERIFIED_BYTES`]).
    #[error("too many webhook requests being read; retry later")]
    Busy,
    /// No `X-GitHub-Event` header on a signed request.
    #[error("missing X-GitHub-Event header")]
    MissingEvent,
    /// A signed push whose payload is not the JSON GitHub sends.
    #[error(
        "push payload is not JSON with a string \"ref\" (is the webhook's content type application/json?): {0}"
    )]
    BadPayload(#[source] serde_json::Error),
    /// A signed `pull_request` delivery whose payload is not the JSON GitHub sends.
    #[error("pull_request payload is not GitHub's: {0}")]
    BadPullRequest(String),
}

impl WebhookError {
    /// The HTTP status this error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            WebhookError::NotConfigured => StatusCode::NOT_FOUND,
            WebhookError::MissingSignature
            | WebhookError::MalformedSignature
            | WebhookError::BadSignature => StatusCode::UNAUTHORIZED,
            WebhookError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            WebhookError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            WebhookError::Busy => StatusCode::SERVICE_UNAVAILABLE,
            WebhookError::BodyRead(_)
            | WebhookError::MissingEvent
            | WebhookError::BadPayload(_)
            | WebhookError::BadPullRequest(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// The metrics outcome, if the request is counted (a disabled endpoint says nothing about
    /// GitHub's deliveries).
    fn outcome(&self) -> Option<WebhookOutcome> {
        match self {
            WebhookError::NotConfigured => None,
            WebhookError::BodyTimeout(_) => Some(WebhookOutcome::Timeout),
            WebhookError::Busy => Some(WebhookOutcome::Busy),
            WebhookError::MissingSignature
            | WebhookError::MalformedSignature
            | WebhookError::BadSignature => Some(WebhookOutcome::Unauthorized),
            WebhookError::TooLarge { .. } => Some(WebhookOutcome::TooLarge),
            WebhookError::BodyRead(_)
            | WebhookError::MissingEvent
            | WebhookError::BadPayload(_)
            | WebhookError::BadPullRequest(_) => Some(WebhookOutcome::Ignored),
        }
    }
}

impl IntoResponse for WebhookError {
    fn into_response(self) -> Response {
        // Say what was wrong, never anything about the secret or the expected signature. Close
        // the connection: the rest of a body left unread is not waited for.
        let status = self.status();
        let mut response = (
            status,
            [
                (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                (header::CONNECTION, "close"),
            ],
            format!("{self}\n"),
        )
            .into_response();
        if matches!(self, WebhookError::Busy) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        response
    }
}

/// Checks a `X-Hub-Signature-256` header value against the raw body, in constant time.
pub fn verify_signature(
    secret: &[u8],
    header_value: &[u8],
    body: &[u8],
) -> Result<(), WebhookError> {
    let hex_sig = header_value
        .strip_prefix(b"sha256=")
        .ok_or(WebhookError::MalformedSignature)?;
    let expected =
        hex::decode(hex_sig.trim_ascii()).map_err(|_| WebhookError::MalformedSignature)?;
    if expected.len() != 32 {
        return Err(WebhookError::MalformedSignature);
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).map_err(|_| WebhookError::BadSignature)?;
    mac.update(body);
    mac.verify_slice(&expected)
        .map_err(|_| WebhookError::BadSignature)
}

/// The header value GitHub would send for this body: `sha256=<hex HMAC-SHA256>`.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The fields of a push payload the agent uses.
#[derive(Debug, serde::Deserialize)]
struct PushPayload {
    #[serde(rename = "ref")]
    git_ref: String,
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    deleted: bool,
}

/// What an authenticated request amounted to.
enum Verdict {
    Accepted,
    Planned(u64),
    Closed(u64),
    Pong,
    Ignored(String),
    Duplicate,
}

/// The `POST /hook/github` handler.
pub(super) async fn github(
    State(state): State<ServerState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let delivery = header_str(&headers, DELIVERY_HEADER).map(str::to_owned);
    let event = header_str(&headers, EVENT_HEADER).map(str::to_owned);
    match handle(&state, &headers, body, delivery.as_deref()).await {
        Ok(verdict) => {
            let (outcome, status, text) = match verdict {
                Verdict::Accepted => (
                    WebhookOutcome::Accepted,
                    StatusCode::ACCEPTED,
                    "reconcile triggered".to_owned(),
                ),
                Verdict::Planned(n) => (
                    WebhookOutcome::Accepted,
                    StatusCode::ACCEPTED,
                    format!("plan of pull request #{n} queued"),
                ),
                Verdict::Closed(n) => (
                    WebhookOutcome::Accepted,
                    StatusCode::ACCEPTED,
                    format!("pull request #{n} closed: its plan is forgotten"),
                ),
                Verdict::Pong => (WebhookOutcome::Ignored, StatusCode::OK, "pong".to_owned()),
                Verdict::Ignored(why) => (
                    WebhookOutcome::Ignored,
                    StatusCode::ACCEPTED,
                    format!("ignored: {why}"),
                ),
                Verdict::Duplicate => (
                    WebhookOutcome::Duplicate,
                    StatusCode::ACCEPTED,
                    "ignored: duplicate delivery".to_owned(),
                ),
            };
            state.metrics().inc_webhook(outcome);
            tracing::info!(
                outcome = outcome.as_str(),
                event,
                delivery,
                "webhook: {text}"
            );
            (
                status,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                format!("{text}\n"),
            )
                .into_response()
        }
        Err(e) => {
            match e.outcome() {
                Some(outcome) => {
                    state.metrics().inc_webhook(outcome);
                    tracing::warn!(outcome = outcome.as_str(), event, delivery, error = %e, "webhook request refused");
                }
                None if matches!(e, WebhookError::NotConfigured) => {
                    tracing::warn!(
                        "webhook request received but no webhook secret is configured; answering 404"
                    );
                }
                None => tracing::warn!(event, delivery, error = %e, "webhook request refused"),
            }
            e.into_response()
        }
    }
}

async fn handle(
    state: &ServerState,
    headers: &HeaderMap,
    body: Body,
    delivery: Option<&str>,
) -> Result<Verdict, WebhookError> {
    let config = state.config();
    let secret = config
        .webhook_secret
        .as_deref()
        .filter(|s| !s.is_empty())
        .ok_or(WebhookError::NotConfigured)?;
    let signature = headers
        .get(SIGNATURE_HEADER)
        .ok_or(WebhookError::MissingSignature)?;
    if !signature.as_bytes().starts_with(b"sha256=") {
        return Err(WebhookError::MalformedSignature);
    }
    let limit = config.body_limit;
    let declared =
        header_str(headers, header::CONTENT_LENGTH.as_str()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(WebhookError::TooLarge { limit });
    }
    let room = state.intake().admit().map_err(|_| WebhookError::Busy)?;
    let raw = tokio::time::timeout(config.body_timeout, read_limited(body, limit, room))
        .await
        .map_err(|_| WebhookError::BodyTimeout(config.body_timeout))??;
    verify_signature(secret, signature.as_bytes(), &raw)?;

    // Authenticated from here on.
    let event = header_str(headers, EVENT_HEADER).ok_or(WebhookError::MissingEvent)?;
    if !state.remember_delivery(delivery, &raw) {
        return Ok(Verdict::Duplicate);
    }
    match event {
        "ping" => return Ok(Verdict::Pong),
        "push" => {}
        "pull_request" => return pull_request(state, &raw),
        other => return Ok(Verdict::Ignored(format!("event {other:?} is not a push"))),
    }
    let push: PushPayload = serde_json::from_slice(&raw).map_err(WebhookError::BadPayload)?;
    let followed = config.branch_ref();
    if push.git_ref != followed {
        return Ok(Verdict::Ignored(format!(
            "push to {}, following {followed}",
            push.git_ref
        )));
    }
    if push.deleted {
        return Ok(Verdict::Ignored(format!("{followed} was deleted")));
    }
    state.triggers().fire(Trigger::Webhook {
        after: push.after,
        delivery: delivery.map(str::to_owned),
    });
    Ok(Verdict::Accepted)
}

/// A verified `pull_request` delivery: queued for a plan, or acknowledged and ignored.
fn pull_request(state: &ServerState, raw: &[u8]) -> Result<Verdict, WebhookError> {
    let config = state.config();
    let Some(queue) = &config.pull_requests else {
        return Ok(Verdict::Ignored(
            "pull request plans need GitHub credentials (--github-token-file or a GitHub App)"
                .into(),
        ));
    };
    match crate::github::pr::parse(raw, &config.branch, config.pr_forks)
        .map_err(WebhookError::BadPullRequest)?
    {
        Ok(event) if event.closed => {
            let n = event.number;
            queue.push(event);
            Ok(Verdict::Closed(n))
        }
        Ok(event) => {
            let n = event.number;
            queue.push(event);
            Ok(Verdict::Planned(n))
        }
        Err(skip) => {
            if matches!(skip, crate::github::pr::Skip::Fork(_)) {
                state
                    .metrics()
                    .inc_pr_plan(crate::serve::GitHubResult::Ignored);
            }
            Ok(Verdict::Ignored(skip.to_string()))
        }
    }
}

/// Reads the whole body into `room` (which takes its bytes from the budget), refusing (and
/// stopping reading) once it passes `limit` bytes, and stopping when another request cuts it off.
async fn read_limited(
    mut body: Body,
    limit: usize,
    mut room: Reader,
) -> Result<Vec<u8>, WebhookError> {
    let mut read = 0;
    loop {
        let frame = tokio::select! {
            biased;
            () = room.cut_off() => return Err(WebhookError::Busy),
            frame = poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)) => frame,
        };
        match frame {
            None => return room.finish().map_err(|_| WebhookError::Busy),
            Some(Err(e)) => return Err(WebhookError::BodyRead(e)),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    read += data.len();
                    if read > limit {
                        return Err(WebhookError::TooLarge { limit });
                    }
                    room.push(&data).map_err(|_| WebhookError::Busy)?;
                }
            }
        }
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_round_trip_and_reject_everything_else() {
        let body = br#"{"ref":"refs/heads/main"}"#;
        let good = sign(b"s3cret", body);
        assert!(good.starts_with("sha256=") && good.len() == 7 + 64);
        verify_signature(b"s3cret", good.as_bytes(), body).expect("valid");
        assert!(matches!(
            verify_signature(b"other", good.as_bytes(), body),
            Err(WebhookError::BadSignature)
        ));
        assert!(matches!(
            verify_signature(b"s3cret", good.as_bytes(), b"{}"),
            Err(WebhookError::BadSignature)
        ));
        let sha1 = good.replacen("sha256=", "sha1=", 1);
        assert!(matches!(
            verify_signature(b"s3cret", sha1.as_bytes(), body),
            Err(WebhookError::MalformedSignature)
        ));
        assert!(matches!(
            verify_signature(b"s3cret", b"sha256=zz", body),
            Err(WebhookError::MalformedSignature)
        ));
        assert!(matches!(
            verify_signature(b"s3cret", b"sha256=abcd", body),
            Err(WebhookError::MalformedSignature)
        ));
    }
}
