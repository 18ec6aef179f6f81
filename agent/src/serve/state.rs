//! What the agent's HTTP handlers share: the configuration, the readiness flag, the triggers a
//! verified push fires, the metrics, the webhook's deliveries seen lately and its intake of
//! bodies not verified yet. Its own module so the routers ([`super::server`]) and the webhook
//! handler ([`super::webhook`]) both build on it and neither on the other.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::deliveries::DeliveryLog;
use super::intake::{self, Intake};
use super::metrics::Metrics;
use super::trigger::TriggerSender;

/// What the HTTP server needs to know.
#[derive(Clone)]
pub struct ServerConfig {
    /// The shared secret of the GitHub webhook. `None` (or empty) disables the webhook endpoint,
    /// which then answers 404: unsigned pushes are never accepted.
    pub webhook_secret: Option<Vec<u8>>,
    /// The followed branch: `main` or `refs/heads/main`. Pushes to other refs are ignored.
    pub branch: String,
    /// Largest webhook body accepted, in bytes; larger ones get 413.
    pub body_limit: usize,
    /// Where verified `pull_request` deliveries go to be planned (`None`: no GitHub
    /// credentials, pull requests are acknowledged and ignored).
    pub pull_requests: Option<crate::github::pr::PrQueue>,
    /// Plan pull requests whose head is in a fork.
    pub pr_forks: bool,
    /// How long a webhook body may take to arrive ([`intake::BODY_TIMEOUT`]).
    pub body_timeout: Duration,
    /// Webhook bodies read at once before their signature is checked
    /// ([`intake::MAX_UNVERIFIED_REQUESTS`]).
    pub unverified_requests: usize,
    /// Bytes those bodies hold together ([`intake::MAX_UNVERIFIED_BYTES`]).
    pub unverified_bytes: usize,
}

impl ServerConfig {
    /// The default body limit: 1 MiB (GitHub caps payloads at 25 MB, but a push to a fleet repo is
    /// a few kilobytes, and a smaller cap is a smaller lever for anyone flooding the endpoint).
    pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

    /// Follows `branch`, with no webhook secret and the default body limit.
    pub fn new(branch: impl Into<String>) -> ServerConfig {
        ServerConfig {
            webhook_secret: None,
            branch: branch.into(),
            body_limit: Self::DEFAULT_BODY_LIMIT,
            pull_requests: None,
            pr_forks: false,
            body_timeout: intake::BODY_TIMEOUT,
            unverified_requests: intake::MAX_UNVERIFIED_REQUESTS,
            unverified_bytes: intake::MAX_UNVERIFIED_BYTES,
        }
    }

    /// Plans pull requests into the followed branch through `queue` (forks too with `forks`).
    pub fn with_pull_requests(
        mut self,
        queue: crate::github::pr::PrQueue,
        forks: bool,
    ) -> ServerConfig {
        self.pull_requests = Some(queue);
        self.pr_forks = forks;
        self
    }

    /// Sets the webhook secret.
    pub fn with_webhook_secret(mut self, secret: impl Into<Vec<u8>>) -> ServerConfig {
        self.webhook_secret = Some(secret.into());
        self
    }

    /// Sets the body limit.
    pub fn with_body_limit(mut self, bytes: usize) -> ServerConfig {
        self.body_limit = bytes;
        self
    }

    /// Sets the body timeout.
    pub fn with_body_timeout(mut self, timeout: Duration) -> ServerConfig {
        self.body_timeout = timeout;
        self
    }

    /// Sets the bounds on webhook bodies not verified yet: how many are read at once, and the
    /// bytes they hold together.
    pub fn with_unverified_bounds(mut self, requests: usize, bytes: usize) -> ServerConfig {
        self.unverified_requests = requests;
        self.unverified_bytes = bytes;
        self
    }

    /// The full ref pushes must name: `refs/heads/<branch>`, or `branch` itself when it already
    /// starts with `refs/`.
    pub fn branch_ref(&self) -> String {
        if self.branch.starts_with("refs/") {
            self.branch.clone()
        } else {
            format!("refs/heads/{}", self.branch)
        }
    }

    /// Whether the webhook endpoint is enabled (a non-empty secret is configured).
    pub fn webhook_enabled(&self) -> bool {
        self.webhook_secret.as_ref().is_some_and(|s| !s.is_empty())
    }
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field(
                "webhook_secret",
                &self.webhook_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("branch", &self.branch)
            .field("body_limit", &self.body_limit)
            .field("pull_requests", &self.pull_requests.is_some())
            .field("pr_forks", &self.pr_forks)
            .field("body_timeout", &self.body_timeout)
            .field("unverified_requests", &self.unverified_requests)
            .field("unverified_bytes", &self.unverified_bytes)
            .finish()
    }
}

/// Whether the agent is ready to act on triggers; shared between the agent and `/readyz`.
#[derive(Debug, Clone, Default)]
pub struct ReadyFlag(Arc<AtomicBool>);

impl ReadyFlag {
    /// A flag that starts not ready.
    pub fn new() -> ReadyFlag {
        ReadyFlag::default()
    }

    /// Wraps an existing flag.
    pub fn from_arc(flag: Arc<AtomicBool>) -> ReadyFlag {
        ReadyFlag(flag)
    }

    /// The underlying flag.
    pub fn as_arc(&self) -> &Arc<AtomicBool> {
        &self.0
    }

    /// Marks the agent ready (or not ready again, e.g. while it shuts down).
    pub fn set_ready(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }

    /// Whether the agent is ready.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

struct Inner {
    config: ServerConfig,
    triggers: TriggerSender,
    metrics: Arc<Metrics>,
    ready: ReadyFlag,
    deliveries: Mutex<DeliveryLog>,
    intake: Arc<Intake>,
}

/// Everything the handlers share. Cheap to clone.
#[derive(Clone)]
pub struct ServerState {
    inner: Arc<Inner>,
}

impl ServerState {
    /// Builds the state: verified pushes fire into `triggers`, outcomes count into `metrics`,
    /// `/readyz` reads `ready`.
    pub fn new(
        config: ServerConfig,
        triggers: TriggerSender,
        metrics: Arc<Metrics>,
        ready: ReadyFlag,
    ) -> ServerState {
        if !config.webhook_enabled() {
            tracing::info!("no webhook secret configured: POST /hook/github answers 404");
        }
        let intake = Arc::new(Intake::new(
            config.unverified_requests,
            config.unverified_bytes,
        ));
        ServerState {
            inner: Arc::new(Inner {
                intake,
                config,
                triggers,
                metrics,
                ready,
                deliveries: Mutex::new(DeliveryLog::default()),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    /// The readiness flag.
    pub fn ready(&self) -> &ReadyFlag {
        &self.inner.ready
    }

    /// The trigger sender.
    pub fn triggers(&self) -> &TriggerSender {
        &self.inner.triggers
    }

    /// Webhook bodies being read before their signature is checked.
    pub fn unverified_requests(&self) -> usize {
        self.inner.intake.readers()
    }

    /// Bytes those bodies hold.
    pub fn unverified_bytes(&self) -> usize {
        self.inner.intake.bytes()
    }

    /// The bounds on webhook bodies not verified yet.
    pub(super) fn intake(&self) -> &Arc<Intake> {
        &self.inner.intake
    }

    /// Records a verified delivery's id and body; `false` if either was seen recently.
    pub(super) fn remember_delivery(&self, id: Option<&str>, body: &[u8]) -> bool {
        self.inner
            .deliveries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(id, body)
    }
}

impl std::fmt::Debug for ServerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerState")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_refs_and_redaction() {
        assert_eq!(ServerConfig::new("main").branch_ref(), "refs/heads/main");
        assert_eq!(
            ServerConfig::new("refs/heads/release/1.2").branch_ref(),
            "refs/heads/release/1.2"
        );
        let config = ServerConfig::new("main").with_webhook_secret("hunter2");
        assert!(config.webhook_enabled());
        assert!(!format!("{config:?}").contains("hunter2"));
        assert!(
            !ServerConfig::new("main")
                .with_webhook_secret("")
                .webhook_enabled()
        );
        assert_eq!(ServerConfig::new("main").body_limit, 1 << 20);
    }

    #[test]
    fn the_ready_flag_is_shared() {
        let flag = ReadyFlag::new();
        let clone = flag.clone();
        assert!(!flag.is_ready());
        clone.set_ready(true);
        assert!(flag.is_ready());
    }
}
