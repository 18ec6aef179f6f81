//! Pull requests handed from a follower to the leader: plans run on the leader only.
//!
//! ```text
//! follower: pull_request webhook ─▶ its PrQueue ─▶ hand_over: annotation capstan.dev/forwarded-pr-<n>
//!                                                   on the leader Lease (merge patch)
//! leader:   watch of the Lease ─▶ a forwarded-pr-* annotation it has not taken ─▶ its PrQueue
//!                                 └─▶ the annotation removed (precondition: the version it read)
//! ```
//!
//! A PR plan reads live state from the leader's watch cache ([`super::pr`]); a follower has no
//! warm cache (it lists nothing until it leads), so planning there would list every Cluster API
//! kind whole, beside the leader's watches, on every push to the PR. GitHub does not retry a
//! delivery on its own, so refusing it would lose the plan: the follower hands it over instead.
//!
//! The Lease is the mailbox because both replicas may already write it (the push hand-over,
//! [`crate::leader::FORWARD_ANNOTATION`], works the same way) and the leader already has a
//! reason to watch it. One annotation per PR, so pushes to different PRs never overwrite each
//! other, and a newer push of the same PR replaces the older one (what [`super::pr::PrQueue`]
//! does too). The leader removes what it took, with the Lease's resourceVersion as a
//! precondition, so a newer push written in between is not removed unseen; and a PR handed
//! over while no replica led (or just before the leader changed) is still there for the next
//! leader, which takes what it finds when it starts.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::pr::{PrEvent, PrQueue};
use crate::leader::LeaderConfig;

/// The annotations a follower hands a PR over in: `capstan.dev/forwarded-pr-<number>`.
pub const ANNOTATION_PREFIX: &str = "capstan.dev/forwarded-pr-";

/// Why a PR could not be handed over.
#[derive(Debug, thiserror::Error)]
#[error("handing pull request #{number} to the leader through Lease {namespace}/{lease}: {source}")]
pub struct HandOverError {
    /// The PR.
    pub number: u64,
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease.
    pub lease: String,
    /// Cause.
    #[source]
    pub source: kube::Error,
}

/// The annotation of a PR.
pub fn annotation(number: u64) -> String {
    format!("{ANNOTATION_PREFIX}{number}")
}

/// What the annotation of a PR holds: its head commit and base branch.
pub fn encode(e: &PrEvent) -> String {
    json!({"head": e.head_sha, "base": e.base_ref, "closed": e.closed}).to_string()
}

/// The PR an annotation hands over (`None`: not one of ours, or not readable).
pub fn decode(key: &str, value: &str) -> Option<PrEvent> {
    let number = key.strip_prefix(ANNOTATION_PREFIX)?.parse().ok()?;
    let v: Value = serde_json::from_str(value).ok()?;
    Some(PrEvent {
        number,
        head_sha: v.get("head")?.as_str()?.to_string(),
        base_ref: v.get("base")?.as_str()?.to_string(),
        closed: v.get("closed").and_then(|c| c.as_bool()).unwrap_or(false),
    })
}

/// A follower's next PR to hand over; never, without GitHub (no queue).
pub async fn next(queue: Option<&PrQueue>) -> PrEvent {
    match queue {
        Some(q) => q.next().await,
        None => std::future::pending().await,
    }
}

/// A follower hands a PR to the leader: its annotation on the Lease.
pub async fn hand_over(
    client: &Client,
    lc: &LeaderConfig,
    e: &PrEvent,
) -> Result<(), HandOverError> {
    let patch = json!({"metadata": {"annotations": {annotation(e.number): encode(e)}}});
    let api = Api::<Lease>::namespaced(client.clone(), &lc.namespace);
    crate::write::merge(&api, &lc.lease, &crate::write::Merge::blind(), &patch)
        .await
        .map(|_| ())
        .map_err(|source| HandOverError {
            number: e.number,
            namespace: lc.namespace.clone(),
            lease: lc.lease.clone(),
            source,
        })
}

/// What the leader makes of the Lease's annotations each time it sees the Lease.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Sorted {
    /// PRs handed over that this leader has not queued yet.
    pub new: Vec<PrEvent>,
    /// Annotations to remove: those just taken, those taken before whose removal has not
    /// happened yet, and unreadable ones.
    pub remove: Vec<String>,
}

/// The leader's memory of what it took, so that a Lease seen again before the removal lands
/// (a renewal, a failed removal) does not plan the same push twice.
#[derive(Debug, Default)]
pub struct Mailbox {
    taken: BTreeMap<String, String>,
}

impl Mailbox {
    /// Sorts the annotations of the Lease as seen now.
    pub fn sort(&mut self, annotations: &BTreeMap<String, String>) -> Sorted {
        let ours: BTreeMap<&String, &String> = annotations
            .iter()
            .filter(|(k, _)| k.starts_with(ANNOTATION_PREFIX))
            .collect();
        // Removed (by this leader or another): forgotten, so the same push handed over again
        // later is planned again.
        self.taken.retain(|k, _| ours.contains_key(k));
        let mut sorted = Sorted::default();
        for (key, value) in ours {
            if self.taken.get(key) != Some(value) {
                match decode(key, value) {
                    Some(e) => sorted.new.push(e),
                    None => {
                        tracing::warn!(%key, %value, "an unreadable pull request hand-over; removing it")
                    }
                }
                self.taken.insert(key.clone(), value.clone());
            }
            sorted.remove.push(key.clone());
        }
        sorted
    }
}

/// The leader's side of [`hand_over`]: a watch of the Lease that queues every PR handed over
/// (those already there when it starts too), then removes their annotations.
pub fn take_over(client: Client, lc: &LeaderConfig, queue: PrQueue) -> JoinHandle<()> {
    let api: Api<Lease> = Api::namespaced(client, &lc.namespace);
    let name = lc.lease.clone();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    tokio::spawn(async move {
        let mut mailbox = Mailbox::default();
        let mut events = watcher::watcher(api.clone(), config)
            .default_backoff()
            .boxed();
        while let Some(ev) = events.next().await {
            let lease = match ev {
                Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) => l,
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "watch of the leader Lease for pull requests failed; retrying");
                    continue;
                }
            };
            let sorted = mailbox.sort(
                lease
                    .metadata
                    .annotations
                    .as_ref()
                    .unwrap_or(&BTreeMap::new()),
            );
            for e in sorted.new {
                tracing::info!(pr = e.number, head = %e.head_sha, "pull request handed over by a follower");
                queue.push(e);
            }
            if sorted.remove.is_empty() {
                continue;
            }
            // Only from the version read: a newer push handed over since is seen (and taken) first.
            let nulls: serde_json::Map<String, Value> = sorted
                .remove
                .into_iter()
                .map(|k| (k, Value::Null))
                .collect();
            let patch = json!({"metadata": {"annotations": nulls}});
            let read = crate::write::Merge::read(lease.metadata.resource_version.clone());
            match crate::write::merge(&api, &name, &read, &patch).await {
                Ok(_) => {}
                // Changed since (a renewal, another hand-over): the next event tries again.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => {
                    tracing::warn!(error = %e, "removing handed-over pull requests from the Lease failed; retrying with its next change")
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pr(number: u64, head: &str) -> PrEvent {
        PrEvent {
            number,
            head_sha: head.into(),
            base_ref: "release/1.x".into(),
            closed: false,
        }
    }

    fn lease(entries: &[(String, String)]) -> BTreeMap<String, String> {
        entries.iter().cloned().collect()
    }

    #[test]
    fn a_hand_over_reads_back_as_the_pull_request_it_carries() {
        let e = pr(42, "abc123");
        assert_eq!(decode(&annotation(42), &encode(&e)), Some(e));
        assert_eq!(decode("capstan.dev/forwarded-push", "abc/-"), None);
        assert_eq!(decode(&annotation(1), "not json"), None);
        assert_eq!(
            decode("capstan.dev/forwarded-pr-x", &encode(&pr(1, "a"))),
            None
        );
    }

    #[test]
    fn each_push_is_taken_once_and_removed_until_it_is_gone() {
        let mut m = Mailbox::default();
        let a = (annotation(7), encode(&pr(7, "a")));
        let other = ("capstan.dev/forwarded-push".to_string(), "x/-".to_string());
        // Found when the leader starts: taken, and its removal asked for.
        let s = m.sort(&lease(&[a.clone(), other.clone()]));
        assert_eq!(s.new, vec![pr(7, "a")]);
        assert_eq!(s.remove, vec![a.0.clone()]);
        // Seen again before the removal landed (a renewal): not queued twice, removal retried.
        let s = m.sort(&lease(&[a.clone(), other.clone()]));
        assert!(s.new.is_empty());
        assert_eq!(s.remove, vec![a.0.clone()]);
        // A newer push of the same PR written before the removal: taken too.
        let b = (annotation(7), encode(&pr(7, "b")));
        let c = (annotation(8), encode(&pr(8, "c")));
        let s = m.sort(&lease(&[b.clone(), c.clone()]));
        assert_eq!(s.new, vec![pr(7, "b"), pr(8, "c")]);
        // Removed: forgotten, so the same push handed over again is planned again.
        assert_eq!(m.sort(&lease(&[other])), Sorted::default());
        assert_eq!(m.sort(&lease(&[b])).new, vec![pr(7, "b")]);
    }

    #[test]
    fn an_unreadable_hand_over_is_removed_without_a_plan() {
        let mut m = Mailbox::default();
        let s = m.sort(&lease(&[(annotation(3), "{}".into())]));
        assert!(s.new.is_empty());
        assert_eq!(s.remove, vec![annotation(3)]);
    }
}
