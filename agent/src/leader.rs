//! Leader election: several replicas of the agent, one reconciling, never two writing.
//!
//! The replicas compete for a coordination.k8s.io Lease. Only the holder reconciles, prunes,
//! deletes and writes status; the others keep serving /healthz, /readyz and /metrics, and accept
//! webhooks: a follower forwards an accepted push by writing the pushed commit into an
//! annotation of the Lease ([`forward`]), which the leader watches ([`watch_forwarded`]), so a
//! push that the Service sent to a follower is applied as fast as one sent to the leader. A
//! `pull_request` delivery is handed over the same way (`crate::github::handover`): only the
//! leader plans pull requests, from its watch cache.
//!
//! The election follows client-go's rules, because what matters is not who holds the Lease but
//! that two replicas never write at once:
//! - a follower takes the Lease only when it has seen the same record (holder, renew time,
//!   transitions) for the whole lease duration *by its own clock* (or the record names no
//!   holder); the holder's timestamps are never compared with local time, so clock skew between
//!   nodes does not shorten the wait;
//! - every write of the Lease is a patch conditioned on the resourceVersion just read: of two
//!   replicas taking an expired Lease, one wins, the other gets a conflict;
//! - the leader renews every retry period and has a **renew deadline** shorter than the lease
//!   duration (default two thirds of it): each successful renewal opens the write fence
//!   ([`capstan_client::k8s::fence`]) until the renewal's *start* plus the deadline. A leader
//!   that has not renewed by then — the API server unreachable, a partition, a stalled node — has
//!   its fence shut before any follower can take the Lease (the follower waits the full
//!   duration from a moment after that renewal), stops its runs and exits; Kubernetes restarts
//!   it as a follower, as controller-runtime's managers do.
//!
//! kube-lease-manager, used before, renews the Lease with errors only logged and retried, takes
//! an expired Lease by the holder's timestamps, and has no renew deadline: a leader cut off from
//! the API server kept reconciling while a follower took over. On SIGTERM the leader shuts its
//! fence and releases the Lease (no holder), so a rolling update hands over at once; a leader
//! killed outright is replaced within the lease duration.

use std::time::{Duration, Instant};

use capstan_client::k8s::Fence;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, ObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

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
    /// How long a Lease lasts without renewal (whole seconds, at least 3).
    pub duration: Duration,
    /// How long the leader may go without a successful renewal before it stops writing; shorter
    /// than `duration`. `None`: two thirds of it.
    pub renew_deadline: Option<Duration>,
}

impl LeaderConfig {
    /// The Lease's API.
    fn api(&self, client: &Client) -> Api<Lease> {
        Api::namespaced(client.clone(), &self.namespace)
    }

    /// The lease duration as the Lease records it.
    fn seconds(&self) -> i32 {
        self.duration.as_secs().clamp(3, i32::MAX as u64) as i32
    }

    /// The renew deadline.
    pub fn deadline(&self) -> Duration {
        let lease = Duration::from_secs(self.seconds() as u64);
        self.renew_deadline.unwrap_or(lease * 2 / 3)
    }

    /// How often the leader renews and a follower looks again: a fifth of the deadline, so a
    /// leader gets four more tries after a failed renewal (client-go: 15 s, 10 s, 2 s).
    pub fn retry(&self) -> Duration {
        (self.deadline() / 5).max(Duration::from_millis(100))
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
        source: kube::Error,
    },
    /// The renew deadline is not shorter than the lease.
    #[error(
        "leader election: the renew deadline ({deadline:?}) must be shorter than the lease duration ({lease:?})"
    )]
    Deadline {
        /// The renew deadline.
        deadline: Duration,
        /// The lease duration.
        lease: Duration,
    },
}

/// The part of a Lease that says who holds it; a change of any of it is a sign of life.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// `spec.holderIdentity` (`None` also for an empty one).
    pub holder: Option<String>,
    /// `spec.renewTime`.
    pub renewed: Option<MicroTime>,
    /// `spec.leaseTransitions`.
    pub transitions: i32,
    /// `spec.leaseDurationSeconds`.
    pub seconds: Option<i32>,
}

impl Record {
    fn of(lease: &Lease) -> Record {
        let spec = lease.spec.clone().unwrap_or_default();
        Record {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            renewed: spec.renew_time,
            transitions: spec.lease_transitions.unwrap_or(0),
            seconds: spec.lease_duration_seconds,
        }
    }
}

/// What a replica does with the Lease it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// It holds it: renew.
    Renew,
    /// Nobody holds it, or its holder has not been seen renewing for the lease duration: take it.
    Take,
    /// Another replica holds it and renewed within the lease duration: wait.
    Wait,
}

/// The election's rule (pure): `record` was first seen unchanged at `seen`; a holder's own
/// duration counts when it recorded one.
pub fn choose(me: &str, record: &Record, seen: Instant, now: Instant, fallback: Duration) -> Move {
    match record.holder.as_deref() {
        Some(h) if h == me => Move::Renew,
        None => Move::Take,
        Some(_) => {
            let lasts = record
                .seconds
                .filter(|s| *s > 0)
                .map_or(fallback, |s| Duration::from_secs(s as u64));
            if now >= seen + lasts {
                Move::Take
            } else {
                Move::Wait
            }
        }
    }
}

/// One look at the Lease.
enum Attempt {
    /// This replica holds it now (renewed, taken or created).
    Holds,
    /// Another replica holds it.
    Held(String),
    /// The Lease changed between reading and writing it: look again at once.
    Conflict,
}

/// The loop's memory: the record last seen and when (by the local clock).
struct Elector {
    api: Api<Lease>,
    cfg: LeaderConfig,
    seen: Option<(Record, Instant)>,
}

impl Elector {
    async fn attempt(&mut self) -> Result<Attempt, kube::Error> {
        let me = self.cfg.identity.clone();
        let now = k8s_openapi::jiff::Timestamp::now();
        let Some(lease) = self.api.get_opt(&self.cfg.lease).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.lease.clone()),
                    ..Default::default()
                },
                spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(self.cfg.seconds()),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match crate::write::create(&self.api, None, &lease).await {
                Ok(l) => {
                    self.seen = Some((Record::of(&l), Instant::now()));
                    Ok(Attempt::Holds)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Conflict),
                Err(e) => Err(e),
            };
        };
        let record = Record::of(&lease);
        let seen = match &self.seen {
            Some((r, at)) if *r == record => *at,
            _ => {
                let at = Instant::now();
                self.seen = Some((record.clone(), at));
                at
            }
        };
        let mv = choose(&me, &record, seen, Instant::now(), self.cfg.duration);
        if mv == Move::Wait {
            return Ok(Attempt::Held(record.holder.unwrap_or_default()));
        }
        let spec = lease.spec.clone().unwrap_or_default();
        let (acquired, transitions) = match mv {
            Move::Renew => (
                spec.acquire_time.unwrap_or(MicroTime(now)),
                record.transitions,
            ),
            _ => (MicroTime(now), record.transitions + 1),
        };
        let patch = json!({
            "spec": {
                "holderIdentity": me,
                "leaseDurationSeconds": self.cfg.seconds(),
                "acquireTime": acquired,
                "renewTime": MicroTime(now),
                "leaseTransitions": transitions,
            },
        });
        let read = crate::write::Merge::read(lease.metadata.resource_version.clone());
        match crate::write::merge(&self.api, &self.cfg.lease, &read, &patch).await {
            Ok(l) => {
                self.seen = Some((Record::of(&l), Instant::now()));
                Ok(Attempt::Holds)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Conflict),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up (no holder) if this replica still holds it.
    async fn release(&self) -> Result<(), kube::Error> {
        let Some(lease) = self.api.get_opt(&self.cfg.lease).await? else {
            return Ok(());
        };
        if Record::of(&lease).holder.as_deref() != Some(self.cfg.identity.as_str()) {
            return Ok(());
        }
        let patch = json!({
            "spec": {"holderIdentity": null, "renewTime": null, "acquireTime": null},
        });
        let read = crate::write::Merge::read(lease.metadata.resource_version.clone());
        crate::write::merge(&self.api, &self.cfg.lease, &read, &patch)
            .await
            .map(|_| ())
    }
}

/// This replica's part in the election.
pub struct Election {
    rx: watch::Receiver<bool>,
    fence: Fence,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Election {
    /// Joins the election (creating the Lease when it does not exist) and starts competing.
    /// `fence` is opened while this replica leads and renews in time.
    pub async fn join(
        client: Client,
        cfg: &LeaderConfig,
        fence: Fence,
    ) -> Result<Election, LeaderError> {
        let lease = Duration::from_secs(cfg.seconds() as u64);
        if cfg.deadline() >= lease {
            return Err(LeaderError::Deadline {
                deadline: cfg.deadline(),
                lease,
            });
        }
        let mut elector = Elector {
            api: cfg.api(&client),
            cfg: cfg.clone(),
            seen: None,
        };
        // The first look answers here, so RBAC or an absent API server fails the start.
        let start = Instant::now();
        let first = elector
            .attempt()
            .await
            .map_err(|source| LeaderError::Lease {
                namespace: cfg.namespace.clone(),
                lease: cfg.lease.clone(),
                source,
            })?;
        let leading = matches!(first, Attempt::Holds);
        if leading {
            fence.open_until(start + cfg.deadline());
        }
        let (tx, rx) = watch::channel(leading);
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(compete(elector, fence.clone(), tx, stopped, leading, start));
        Ok(Election {
            rx,
            fence,
            stop: Some(stop),
            task,
        })
    }

    /// Whether this replica holds the Lease now.
    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    /// The fence this election opens.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// Waits until this replica holds the Lease (at once when it does).
    pub async fn acquired(&mut self) {
        let _ = self.rx.wait_for(|l| *l).await;
    }

    /// Waits until this replica no longer holds the Lease (or can no longer be sure it does).
    pub async fn lost(&mut self) {
        let _ = self.rx.wait_for(|l| !*l).await;
    }

    /// Leaves the election: the fence shut, then the Lease released if this replica holds it.
    pub async fn release(mut self) {
        self.fence.shut_now();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match tokio::time::timeout(Duration::from_secs(5), self.task).await {
            Ok(Ok(())) => info!("leader election left"),
            Ok(Err(e)) => warn!(error = %e, "the election task failed"),
            Err(_) => warn!("leaving the leader election took more than 5s"),
        }
    }
}

/// The election's loop: look at the Lease every retry period; while leading, renew and keep the
/// fence open; stop leading (for good: the process exits) at the renew deadline or when another
/// holder shows.
async fn compete(
    mut elector: Elector,
    fence: Fence,
    tx: watch::Sender<bool>,
    mut stopped: oneshot::Receiver<()>,
    mut leading: bool,
    mut renewed: Instant,
) {
    let deadline = elector.cfg.deadline();
    let retry = elector.cfg.retry();
    let me = elector.cfg.identity.clone();
    let mut next = Instant::now() + retry;
    loop {
        let wake = tokio::time::Instant::from_std(if leading {
            next.min(renewed + deadline)
        } else {
            next
        });
        tokio::select! {
            _ = &mut stopped => break,
            _ = tokio::time::sleep_until(wake) => {}
        }
        let start = Instant::now();
        // A look may not outlast the deadline: an unanswered renewal is a failed one.
        let budget = if leading {
            (renewed + deadline).saturating_duration_since(start)
        } else {
            deadline
        };
        let looked = tokio::time::timeout(budget, elector.attempt()).await;
        next = start + retry;
        match looked {
            Ok(Ok(Attempt::Holds)) => {
                renewed = start;
                fence.open_until(start + deadline);
                if !leading {
                    leading = true;
                    info!(identity = %me, "acquired the leader Lease");
                    let _ = tx.send(true);
                }
            }
            Ok(Ok(Attempt::Conflict)) => next = Instant::now(),
            Ok(Ok(Attempt::Held(holder))) if leading => {
                fence.shut_now();
                error!(identity = %me, %holder, "another replica holds the leader Lease: writes stopped");
                let _ = tx.send(false);
                return;
            }
            Ok(Ok(Attempt::Held(_))) => {}
            Ok(Err(e)) => warn!(identity = %me, error = %e, "looking at the leader Lease failed"),
            Err(_) => warn!(identity = %me, ?budget, "looking at the leader Lease got no answer"),
        }
        if leading && Instant::now() >= renewed + deadline {
            fence.shut_now();
            error!(
                identity = %me,
                ?deadline,
                "the leader Lease was not renewed within the renew deadline: writes stopped before another replica can take it"
            );
            let _ = tx.send(false);
            return;
        }
    }
    fence.shut_now();
    if leading && let Err(e) = elector.release().await {
        warn!(error = %e, "releasing the leader Lease failed");
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
    crate::write::merge(
        &cfg.api(client),
        &cfg.lease,
        &crate::write::Merge::blind(),
        &patch,
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    fn held(by: Option<&str>, seconds: Option<i32>) -> Record {
        Record {
            holder: by.map(str::to_string),
            renewed: None,
            transitions: 1,
            seconds,
        }
    }

    #[test]
    fn a_follower_waits_the_whole_duration_from_when_it_saw_the_record() {
        let t = Instant::now();
        let s = Duration::from_secs;
        let r = held(Some("a"), Some(6));
        assert_eq!(choose("a", &r, t, t + s(100), s(15)), Move::Renew);
        assert_eq!(choose("b", &r, t, t, s(15)), Move::Wait);
        assert_eq!(choose("b", &r, t, t + s(5), s(15)), Move::Wait);
        // The holder's own duration counts, not the follower's setting.
        assert_eq!(choose("b", &r, t, t + s(6), s(15)), Move::Take);
        assert_eq!(
            choose("b", &held(Some("a"), None), t, t + s(6), s(15)),
            Move::Wait
        );
        // Released: nobody holds it.
        assert_eq!(choose("b", &held(None, Some(6)), t, t, s(15)), Move::Take);
    }

    #[test]
    fn the_deadline_is_shorter_than_the_lease_and_retries_fit_in_it() {
        let cfg = |secs: u64, deadline: Option<u64>| LeaderConfig {
            lease: "l".into(),
            namespace: "n".into(),
            identity: "i".into(),
            duration: Duration::from_secs(secs),
            renew_deadline: deadline.map(Duration::from_secs),
        };
        let c = cfg(15, None);
        assert_eq!(c.deadline(), Duration::from_secs(10));
        assert_eq!(c.retry(), Duration::from_secs(2));
        let c = cfg(6, None);
        assert_eq!(c.deadline(), Duration::from_secs(4));
        assert!(c.retry() * 4 < c.deadline());
        assert_eq!(cfg(1, None).seconds(), 3, "at least 3 s");
    }
}
