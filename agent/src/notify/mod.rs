//! Notifications: a cluster's phase changes (Failed, Ready after an upgrade, an upgrade held by
//! a wave or a window, a conflict) sent to Slack, Microsoft Teams and signed webhooks, as the
//! fleet config's `spec.notifications` routes them
//! ([`capstan_layout::config::notifications`]).
//!
//! ```text
//! driver ─ observe(cluster, what it saw) ─▶ rules: changed? sent already? under the alert's limit?
//!                                             │ try_send (a full queue drops and counts)
//!                                             ▼
//!                                 bounded queue ─▶ sender task ─▶ one task per delivery:
//!                                                   read the Secret, build the body, POST,
//!                                                   retry 429/5xx with backoff (Retry-After)
//! ```
//!
//! Why this shape: a reconcile must never wait for a chat service. The daemon's side
//! ([`Notifier::observe`]) is synchronous and does no I/O: it decides and hands over with
//! `try_send`. The sender reads the Secret at send time (a rotated URL takes effect at once;
//! the URLs never enter Git, the daemon's memory between sends, or a log line: reqwest's errors
//! are stripped of their URL), and a slow or dead endpoint ties up only its own deliveries, at
//! most [`SenderConfig::concurrency`] at once; behind them the queue fills and drops.

pub mod payload;
pub mod rules;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_layout::config::notifications::{Notifications, Provider, ProviderKind};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use tokio::sync::{Semaphore, mpsc};
use tracing::{info, warn};

use crate::metrics::{Metrics, NotifyResult};
use payload::Event;
use rules::{Buckets, Dedup, Seen};

/// Why a delivery failed.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// The Secret could not be read.
    #[error("reading Secret {namespace}/{name}: {source}")]
    Secret {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The Secret lacks a key the provider names (or it is not UTF-8 where a URL is expected).
    #[error("Secret {namespace}/{name} has no usable key `{key}` (provider {provider})")]
    MissingKey {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The key.
        key: String,
        /// The provider naming it.
        provider: String,
    },
    /// The endpoint answered with an error status.
    #[error("provider {provider} answered {status}")]
    Status {
        /// The provider.
        provider: String,
        /// The status.
        status: u16,
    },
    /// The request did not complete (connect, timeout); the URL is left out.
    #[error("provider {provider}: {source}")]
    Transport {
        /// The provider.
        provider: String,
        /// Cause, without its URL.
        #[source]
        source: reqwest::Error,
    },
}

/// How the sender sends.
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// Deliveries waiting at most; past it they are dropped (and counted).
    pub queue: usize,
    /// Deliveries in flight at most.
    pub concurrency: usize,
    /// One request's timeout.
    pub timeout: Duration,
    /// Attempts per delivery.
    pub attempts: u32,
    /// The first retry's delay, doubled each time.
    pub backoff: Duration,
    /// The longest Retry-After honoured (longer: this).
    pub max_retry_after: Duration,
}

impl Default for SenderConfig {
    fn default() -> Self {
        SenderConfig {
            queue: 256,
            concurrency: 4,
            timeout: Duration::from_secs(10),
            attempts: 5,
            backoff: Duration::from_secs(2),
            max_retry_after: Duration::from_secs(300),
        }
    }
}

/// Where the sender reads the URLs and keys.
#[derive(Clone)]
pub enum Secrets {
    /// Secrets of the API server, read at send time.
    Api(Client),
    /// Fixed data by `namespace/name` (tests, and `capstan run` without a cluster).
    Fixed(Arc<BTreeMap<String, BTreeMap<String, Vec<u8>>>>),
}

impl Secrets {
    async fn read(&self, ns: &str, name: &str) -> Result<BTreeMap<String, Vec<u8>>, NotifyError> {
        match self {
            Secrets::Api(client) => {
                let s = Api::<Secret>::namespaced(client.clone(), ns)
                    .get(name)
                    .await
                    .map_err(|source| NotifyError::Secret {
                        namespace: ns.into(),
                        name: name.into(),
                        source,
                    })?;
                Ok(s.data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect())
            }
            Secrets::Fixed(all) => Ok(all
                .get(&format!("{ns}/{name}"))
                .cloned()
                .unwrap_or_default()),
        }
    }
}

/// One notification on its way.
#[derive(Debug, Clone)]
struct Delivery {
    secret: (String, String),
    provider: Provider,
    event: Event,
}

/// A cluster as the daemon saw it after a run.
#[derive(Debug, Clone)]
pub struct Observation<'a> {
    /// The cluster.
    pub cluster: &'a str,
    /// Its management cluster.
    pub management: &'a str,
    /// The labels of its EKS-A Cluster.
    pub labels: &'a BTreeMap<String, String>,
    /// The revision reconciled.
    pub revision: &'a str,
    /// The status message.
    pub message: &'a str,
    /// What it is now.
    pub seen: Seen,
}

/// The daemon's side: what each cluster was, what was sent, each alert's bucket, the queue.
pub struct Notifier {
    seen: BTreeMap<String, Seen>,
    dedup: Dedup,
    buckets: Buckets,
    tx: mpsc::Sender<Delivery>,
    metrics: Arc<Metrics>,
}

impl Notifier {
    /// Starts the sender task.
    pub fn start(secrets: Secrets, metrics: Arc<Metrics>, cfg: SenderConfig) -> Notifier {
        let (tx, rx) = mpsc::channel(cfg.queue.max(1));
        tokio::spawn(send_all(rx, secrets, metrics.clone(), cfg));
        Notifier {
            seen: BTreeMap::new(),
            dedup: Dedup::new(4096),
            buckets: Buckets::default(),
            tx,
            metrics,
        }
    }

    /// Records what a run left a cluster in and queues the notifications its change raises under
    /// `config` (None: none are sent, the change is still recorded). Never waits.
    pub fn observe(&mut self, config: Option<&Notifications>, o: Observation<'_>) {
        let was = self.seen.insert(o.cluster.to_string(), o.seen.clone());
        let Some(config) = config else {
            return;
        };
        let now = Instant::now();
        for (kind, reason) in rules::changes(was.as_ref(), &o.seen) {
            let routes: Vec<_> = config
                .alerts
                .iter()
                .enumerate()
                .filter(|(_, a)| a.wants(kind, o.cluster, o.labels))
                .collect();
            if routes.is_empty() {
                continue;
            }
            let key = (o.cluster.to_string(), kind, reason, o.revision.to_string());
            if !self.dedup.first(key) {
                for (_, a) in &routes {
                    let p = config.providers[a.provider].kind.into();
                    self.metrics.inc_notification(p, NotifyResult::Deduplicated);
                }
                continue;
            }
            let event = Event {
                event: kind.as_str(),
                cluster: o.cluster.to_string(),
                management: o.management.to_string(),
                phase: o.seen.phase.as_str(),
                reason,
                revision: o.revision.to_string(),
                message: o.message.to_string(),
            };
            for (i, a) in routes {
                let provider = &config.providers[a.provider];
                let label = provider.kind.into();
                if !self.buckets.take(i, a.per_minute, now) {
                    self.metrics
                        .inc_notification(label, NotifyResult::RateLimited);
                    warn!(cluster = o.cluster, event = kind.as_str(), provider = %provider.name, "notification over the alert's perMinute: not sent");
                    continue;
                }
                let d = Delivery {
                    secret: (config.secret_namespace.clone(), config.secret_name.clone()),
                    provider: provider.clone(),
                    event: event.clone(),
                };
                if self.tx.try_send(d).is_err() {
                    self.metrics.inc_notification(label, NotifyResult::Dropped);
                    warn!(cluster = o.cluster, event = kind.as_str(), provider = %provider.name, "notification queue full: dropped");
                }
            }
        }
    }

    /// Forgets clusters `keep` refuses.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.seen.retain(|n, _| keep(n));
    }
}

async fn send_all(
    mut rx: mpsc::Receiver<Delivery>,
    secrets: Secrets,
    metrics: Arc<Metrics>,
    cfg: SenderConfig,
) {
    capstan_client::install_crypto_provider();
    let http = match reqwest::Client::builder()
        .timeout(cfg.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(h) => h,
        Err(e) => {
            tracing::error!(error = %e.without_url(), "no HTTP client for notifications: none will be sent");
            return;
        }
    };
    let slots = Arc::new(Semaphore::new(cfg.concurrency.max(1)));
    while let Some(d) = rx.recv().await {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (http, secrets, metrics, cfg) =
            (http.clone(), secrets.clone(), metrics.clone(), cfg.clone());
        tokio::spawn(async move {
            deliver(&http, &secrets, &metrics, &cfg, d).await;
            drop(permit);
        });
    }
}

/// What one attempt says about the next.
enum Attempt {
    Sent,
    /// Retry after this long (None: the backoff's).
    Retry(Option<Duration>, NotifyError),
    GiveUp(NotifyError),
}

async fn deliver(
    http: &reqwest::Client,
    secrets: &Secrets,
    metrics: &Metrics,
    cfg: &SenderConfig,
    d: Delivery,
) {
    let label = d.provider.kind.into();
    let mut backoff = cfg.backoff;
    for attempt in 1..=cfg.attempts.max(1) {
        let (wait, error) = match once(http, secrets, &d).await {
            Attempt::Sent => {
                metrics.inc_notification(label, NotifyResult::Sent);
                info!(cluster = %d.event.cluster, event = d.event.event, provider = %d.provider.name, attempt, "notification sent");
                return;
            }
            Attempt::GiveUp(e) => {
                metrics.inc_notification(label, NotifyResult::Failed);
                warn!(cluster = %d.event.cluster, event = d.event.event, error = %e, "notification not sent; not retried");
                return;
            }
            Attempt::Retry(after, e) => (after.map_or(backoff, |a| a.min(cfg.max_retry_after)), e),
        };
        if attempt == cfg.attempts.max(1) {
            metrics.inc_notification(label, NotifyResult::Failed);
            warn!(cluster = %d.event.cluster, event = d.event.event, error = %error, attempts = attempt, "notification not sent; out of retries");
            return;
        }
        metrics.inc_notification(label, NotifyResult::Retried);
        warn!(cluster = %d.event.cluster, event = d.event.event, error = %error, retry_in_ms = wait.as_millis() as u64, "notification failed; retrying");
        tokio::time::sleep(wait).await;
        backoff = backoff.saturating_mul(2);
    }
}

async fn once(http: &reqwest::Client, secrets: &Secrets, d: &Delivery) -> Attempt {
    let (ns, name) = &d.secret;
    let data = match secrets.read(ns, name).await {
        Ok(data) => data,
        // The Secret may be created or fixed meanwhile.
        Err(e) => return Attempt::Retry(None, e),
    };
    let missing = |key: &str| NotifyError::MissingKey {
        namespace: ns.clone(),
        name: name.clone(),
        key: key.to_string(),
        provider: d.provider.name.clone(),
    };
    let url = match data
        .get(&d.provider.url_key)
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::trim)
        .filter(|u| !u.is_empty())
    {
        Some(u) => u.to_string(),
        None => return Attempt::GiveUp(missing(&d.provider.url_key)),
    };
    let body = payload::body(d.provider.kind, &d.event);
    let mut req = http
        .post(url)
        .header(http::header::CONTENT_TYPE, "application/json");
    if d.provider.kind == ProviderKind::Webhook {
        let key_name = d.provider.hmac_key.as_deref().unwrap_or_default();
        let Some(key) = data.get(key_name).filter(|k| !k.is_empty()) else {
            return Attempt::GiveUp(missing(key_name));
        };
        req = req.header(payload::SIGNATURE_HEADER, payload::signature(key, &body));
    }
    let transport = |e: reqwest::Error| NotifyError::Transport {
        provider: d.provider.name.clone(),
        source: e.without_url(),
    };
    let resp = match req.body(body).send().await {
        Ok(r) => r,
        Err(e) => return Attempt::Retry(None, transport(e)),
    };
    let status = resp.status();
    if status.is_success() {
        return Attempt::Sent;
    }
    let err = NotifyError::Status {
        provider: d.provider.name.clone(),
        status: status.as_u16(),
    };
    if status == http::StatusCode::TOO_MANY_REQUESTS {
        let after = resp
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        return Attempt::Retry(after, err);
    }
    if status.is_server_error() {
        return Attempt::Retry(None, err);
    }
    Attempt::GiveUp(err)
}

#[cfg(test)]
mod hostile;
#[cfg(test)]
mod tests;
