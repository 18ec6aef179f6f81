//! Leader election: two replicas of the agent, one reconciling.
//!
//! The replicas compete for a coordination.k8s.io Lease ([kube-lease-manager], which locks it
//! with server-side apply and renews it before it expires). Only the holder reconciles, prunes,
//! deletes and writes status; the others keep serving /healthz, /readyz and /metrics, and accept
//! webhooks: a follower forwards an accepted push by writing the pushed commit into an
//! annotation of the Lease ([`forward`]), which the leader watches ([`watch_forwarded`]), so a
//! push that the Service sent to a follower is applied as fast as one sent to the leader.
//!
//! A leader that loses the Lease (its renewals failed for the whole lease duration, so another
//! replica may already be reconciling) stops at once: the process exits and Kubernetes restarts
//! it as a follower, what controller-runtime's managers do. On SIGTERM the leader releases the
//! Lease, so a rolling update hands over without waiting for it to expire; a leader killed
//! outright is replaced within the lease duration.
//!
//! [kube-lease-manager]: https://docs.rs/kube-lease-manager

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::trigger::{Trigger, TriggerSender};

/// The annotation a follower writes a forwarded push into: `<commit or ->/<delivery or ->`.
pub const FORWARD_ANNOTATION: &str = "capstan.dev/forwarded-push";

/// Which Lease, and who this replica is.
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    /// The Lease's name.
    pub lease: String,
    /// Its namespace.
    pub namespace: String,
    /// This replica (the pod name in a Deployment).
    pub identity: String,
    /// How long a Lease lasts without renewal.
    pub duration: Duration,
}

impl LeaderConfig {
    /// The Lease's API.
    fn api(&self, client: &Client) -> Api<Lease> {
        Api::namespaced(client.clone(), &self.namespace)
    }
}

/// Why the election could not be joined.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The Lease could not be read or created (RBAC, API server down).
    #[error("leader election with Lease {namespace}/{lease}: {source}")]
    Lease {
        /// Namespace.
        namespace: String,
        /// Lease.
        lease: String,
        /// Cause.
        #[source]
        source: LeaseManagerError,
    },
}

/// This replica's part in the election.
pub struct Election {
    rx: watch::Receiver<bool>,
    task: JoinHandle<kube_lease_manager::Result<LeaseManager>>,
}

impl Election {
    /// Joins the election (creating the Lease when it does not exist) and starts competing.
    pub async fn join(client: Client, cfg: &LeaderConfig) -> Result<Election, LeaderError> {
        let secs = cfg.duration.as_secs().max(3);
        let manager = LeaseManagerBuilder::new(client, &cfg.lease)
            .with_namespace(&cfg.namespace)
            .with_identity(&cfg.identity)
            .with_duration(secs)
            .with_grace((secs / 3).max(1))
            .build()
            .await
            .map_err(|source| LeaderError::Lease {
                namespace: cfg.namespace.clone(),
                lease: cfg.lease.clone(),
                source,
            })?;
        let (rx, task) = manager.watch().await;
        Ok(Election { rx, task })
    }

    /// Whether this replica holds the Lease now.
    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    /// Waits until this replica holds the Lease (at once when it does).
    pub async fn acquired(&mut self) {
        let _ = self.rx.wait_for(|l| *l).await;
    }

    /// Waits until this replica no longer holds the Lease.
    pub async fn lost(&mut self) {
        let _ = self.rx.wait_for(|l| !*l).await;
    }

    /// Leaves the election, releasing the Lease if this replica holds it.
    pub async fn release(self) {
        drop(self.rx);
        match tokio::time::timeout(Duration::from_secs(5), self.task).await {
            Ok(Ok(Ok(_))) => tracing::info!("leader election left; Lease released"),
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "releasing the Lease failed"),
            Ok(Err(e)) => tracing::warn!(error = %e, "the election task failed"),
            Err(_) => tracing::warn!("releasing the Lease took more than 5s"),
        }
    }
}

/// A follower hands an accepted push to the leader: the pushed commit and delivery id go into
/// an annotation of the Lease, which the leader watches.
pub async fn forward(
    client: &Client,
    cfg: &LeaderConfig,
    trigger: &Trigger,
) -> Result<(), kube::Error> {
    let Trigger::Webhook { after, delivery } = trigger else {
        return Ok(());
    };
    let value = format!(
        "{}/{}",
        after.as_deref().unwrap_or("-"),
        delivery.as_deref().unwrap_or("-")
    );
    let patch = serde_json::json!({"metadata": {"annotations": {FORWARD_ANNOTATION: value}}});
    cfg.api(client)
        .patch(&cfg.lease, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// The leader's side of [`forward`]: a watch of the Lease that fires a webhook trigger whenever
/// the annotation changes (not for the value it finds when it starts).
pub fn watch_forwarded(client: Client, cfg: &LeaderConfig, tx: TriggerSender) -> JoinHandle<()> {
    let api = cfg.api(&client);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", cfg.lease));
    tokio::spawn(async move {
        let mut last: Option<Option<String>> = None;
        let mut events = watcher::watcher(api, config).default_backoff().boxed();
        while let Some(ev) = events.next().await {
            let lease = match ev {
                Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) => l,
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "watch of the leader Lease failed; retrying");
                    continue;
                }
            };
            let value = lease
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(FORWARD_ANNOTATION))
                .cloned();
            if let Some(prev) = &last
                && *prev != value
                && let Some(v) = &value
            {
                let (after, delivery) = v.split_once('/').unwrap_or((v, "-"));
                let some = |s: &str| (s != "-").then(|| s.to_string());
                tracing::info!(after, delivery, "push forwarded by a follower");
                tx.fire(Trigger::Webhook {
                    after: some(after),
                    delivery: some(delivery),
                });
            }
            last = Some(value);
        }
    })
}
