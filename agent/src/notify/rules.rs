//! Which phase changes notify, which were sent already, and how many may go out a minute: the
//! pure part of [`super`], so each rule is a table test with no server and no clock.
//!
//! A notification is a *change*: the daemon keeps what it saw of each cluster after its last run
//! ([`Seen`]) and [`changes`] compares. Failed, Held and Conflict notify when they start; Ready
//! notifies when a cluster that was seen in another phase (upgrading, failed, a first rollout)
//! comes Ready, never on the daemon's first sight of a Ready cluster, so a restart of the agent
//! does not announce the whole fleet. A cluster flapping (Failed, Progressing, Failed at one
//! revision) notifies once: [`Dedup`] remembers cluster, event, reason and revision.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::time::Instant;

use capstan_layout::config::notifications::EventKind;

use crate::status::Phase;

/// What the daemon saw of a cluster after a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Its phase.
    pub phase: Phase,
    /// The reason its upgrade is held (`WaitingForWave`, `OutsideMaintenanceWindow`, …), if it is.
    pub held: Option<&'static str>,
    /// Whether its plan met a field-manager conflict.
    pub conflict: bool,
}

/// The events a move from `was` (None: first sight) to `now` raises, with their reasons.
pub fn changes(was: Option<&Seen>, now: &Seen) -> Vec<(EventKind, Option<&'static str>)> {
    let mut out = Vec::new();
    let was_phase = was.map(|w| w.phase);
    if now.phase == Phase::Failed && was_phase != Some(Phase::Failed) {
        out.push((EventKind::Failed, None));
    }
    if now.phase == Phase::Ready && was_phase.is_some_and(|p| p != Phase::Ready) {
        out.push((EventKind::Ready, None));
    }
    if let Some(reason) = now.held
        && was.and_then(|w| w.held) != Some(reason)
    {
        out.push((EventKind::Held, Some(reason)));
    }
    if now.conflict && !was.is_some_and(|w| w.conflict) {
        out.push((EventKind::Conflict, Some("FieldManagerConflict")));
    }
    out
}

/// What identifies a notification already sent: cluster, event, reason, revision.
pub type Key = (String, EventKind, Option<&'static str>, String);

/// The keys sent recently, the oldest forgotten past `capacity`.
#[derive(Debug)]
pub struct Dedup {
    seen: HashSet<Key>,
    order: VecDeque<Key>,
    capacity: usize,
}

impl Dedup {
    /// Remembers up to `capacity` keys.
    pub fn new(capacity: usize) -> Dedup {
        Dedup {
            seen: HashSet::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// Whether `key` is new (and remembers it).
    pub fn first(&mut self, key: Key) -> bool {
        if self.seen.contains(&key) {
            return false;
        }
        if self.order.len() == self.capacity
            && let Some(old) = self.order.pop_front()
        {
            self.seen.remove(&old);
        }
        self.seen.insert(key.clone());
        self.order.push_back(key);
        true
    }
}

/// A token bucket: `per_minute` tokens at most, refilled evenly over a minute.
#[derive(Debug, Clone)]
pub struct Bucket {
    per_minute: u32,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// A full bucket.
    pub fn new(per_minute: u32, now: Instant) -> Bucket {
        Bucket {
            per_minute,
            tokens: f64::from(per_minute),
            last: now,
        }
    }

    /// Takes a token if there is one.
    pub fn take(&mut self, now: Instant) -> bool {
        let cap = f64::from(self.per_minute);
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * cap / 60.0).min(cap);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The buckets of a fleet's alerts, by alert index; rebuilt when the limit written changes.
#[derive(Debug, Default)]
pub struct Buckets(BTreeMap<usize, Bucket>);

impl Buckets {
    /// Takes a token from alert `i`'s bucket of `per_minute`.
    pub fn take(&mut self, i: usize, per_minute: u32, now: Instant) -> bool {
        let b = self
            .0
            .entry(i)
            .or_insert_with(|| Bucket::new(per_minute, now));
        if b.per_minute != per_minute {
            *b = Bucket::new(per_minute, now);
        }
        b.take(now)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn seen(phase: Phase) -> Seen {
        Seen {
            phase,
            held: None,
            conflict: false,
        }
    }

    #[test]
    fn only_changes_notify() {
        use EventKind::*;
        let held = |r| Seen {
            held: Some(r),
            ..seen(Phase::Progressing)
        };
        let conflict = Seen {
            conflict: true,
            ..seen(Phase::Ready)
        };
        type Row = (Option<Seen>, Seen, Vec<(EventKind, Option<&'static str>)>);
        let table: Vec<Row> = vec![
            (None, seen(Phase::Failed), vec![(Failed, None)]),
            (None, seen(Phase::Ready), vec![]),
            (
                Some(seen(Phase::Upgrading)),
                seen(Phase::Ready),
                vec![(Ready, None)],
            ),
            (
                Some(seen(Phase::Failed)),
                seen(Phase::Ready),
                vec![(Ready, None)],
            ),
            (Some(seen(Phase::Ready)), seen(Phase::Ready), vec![]),
            (Some(seen(Phase::Failed)), seen(Phase::Failed), vec![]),
            (
                Some(seen(Phase::Ready)),
                seen(Phase::Failed),
                vec![(Failed, None)],
            ),
            (
                Some(seen(Phase::Ready)),
                held("WaitingForWave"),
                vec![(Held, Some("WaitingForWave"))],
            ),
            (Some(held("WaitingForWave")), held("WaitingForWave"), vec![]),
            (
                Some(held("WaitingForWave")),
                held("OutsideMaintenanceWindow"),
                vec![(Held, Some("OutsideMaintenanceWindow"))],
            ),
            (
                Some(seen(Phase::Ready)),
                conflict.clone(),
                vec![(Conflict, Some("FieldManagerConflict"))],
            ),
            (Some(conflict.clone()), conflict, vec![]),
        ];
        for (was, now, want) in table {
            assert_eq!(changes(was.as_ref(), &now), want, "{was:?} -> {now:?}");
        }
    }

    #[test]
    fn a_key_is_sent_once_until_forgotten() {
        let key = |c: &str, rev: &str| (c.to_string(), EventKind::Failed, None, rev.to_string());
        let mut d = Dedup::new(2);
        assert!(d.first(key("a", "r1")));
        assert!(!d.first(key("a", "r1")));
        assert!(d.first(key("a", "r2")), "another revision is news");
        assert!(d.first(key("b", "r1")));
        // Capacity 2: the oldest, a@r1, is forgotten.
        assert!(d.first(key("a", "r1")));
    }

    #[test]
    fn the_bucket_refills_evenly() {
        let t0 = Instant::now();
        let mut b = Bucket::new(2, t0);
        assert!(b.take(t0) && b.take(t0));
        assert!(!b.take(t0));
        assert!(!b.take(t0 + Duration::from_secs(29)));
        assert!(b.take(t0 + Duration::from_secs(31)));
        let mut all = Buckets::default();
        assert!(all.take(0, 1, t0));
        assert!(!all.take(0, 1, t0));
        assert!(all.take(1, 1, t0), "each alert has its own");
        assert!(all.take(0, 5, t0), "a new limit starts full");
    }
}
