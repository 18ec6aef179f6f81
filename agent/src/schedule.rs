//! The daemon's work queue: clusters reconciled independently, each at its own pace.
//!
//! ```text
//! new revision ──────────▶ enqueue(every cluster; workloads after their management cluster;
//!                           the clusters the revision changed first)
//! watch: cluster X changed ─▶ enqueue(X)            (already queued: one entry; running: once more after)
//!                                  │
//!                  take_ready(now) ─▶ up to `cap` clusters at once, changed ones first, then
//!                                     oldest first, never one twice; while a changed one runs
//!                                     (up to CHANGES_ALONE), nothing else starts
//!                                  │
//!           finish(X, ok) ─▶ failed: back in the queue after 2 s, 4 s, 8 s … 5 min (±20 % jitter)
//!                            ok: its backoff forgotten; the next trigger runs it at once
//! ```
//!
//! Why a queue and not a pass over the fleet: a pass is only as fast as its slowest cluster. A
//! Cluster API deletion takes minutes, a webhook can time out, a control plane rolls for a
//! quarter of an hour; with one ordered pass every other cluster's change waits behind it, and a
//! cluster that keeps failing is retried as often as anything triggers. Here a cluster that
//! waits is simply not in the queue (its watch events bring it back), a failing one backs off
//! alone, and `cap` bounds how many talk to the API server at once.
//!
//! A new revision queues every cluster (each records the revision it was reconciled at), but
//! the clusters whose desired state it changed go ahead of the rest: with ten thousand clusters
//! re-confirmed in trigger order, the one a push changed could wait behind hundreds of no-op
//! plans. The others still follow, so a cluster's drift is never left for long.
//!
//! Going first is not enough on its own: a changed cluster's run waits on the API server (a
//! read, a dry run, the apply, its status) while the confirmations started beside it keep the
//! agent's and the API server's CPU busy. Measured at 1,000 clusters on two cores, a one-object
//! change's run took 120 ms with confirmations running beside it, 43 ms of it in the plan's
//! read and dry run; at 10,000 clusters, 813 ms. So while a changed cluster runs, only other
//! changed clusters start; confirmations and watch-triggered runs wait until the changes are
//! out, or [`CHANGES_ALONE`] after the latest change started (a change whose run hangs on a
//! webhook's timeout holds the rest of the fleet up for no longer than that).
//!
//! A trigger never shortens a failed cluster's backoff unless it is `urgent` (a new revision:
//! the fix may be in it), so a controller that keeps rewriting what capstan applies cannot make
//! the two fight at the watch's pace. The queue is pure: time and jitter come in as arguments.
//!
//! The daemon asks the queue what to do after every event, with up to the whole fleet queued,
//! so those questions stay cheap. Entries are indexed twice over: those not yet due by due time,
//! those due in the order they start (changed first, then oldest trigger); a start looks at the
//! head of the second, not at every queued cluster (ten thousand starts over ten thousand entries
//! were a hundred million looks per pass). The counts are kept as entries come and go, a look
//! asks about each management cluster an entry waits for once, not once per entry, and at the
//! cap [`Queue::next_due`] has nothing to wake for (a finishing run wakes the daemon): a due time
//! then would only wake it to find no room, again and again until a run finished.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// First retry delay after a failure.
pub const BACKOFF_BASE: Duration = Duration::from_secs(2);
/// Longest retry delay (a cluster failing for hours is retried every five minutes).
pub const BACKOFF_CAP: Duration = Duration::from_secs(300);
/// Spread of the retry delay (±): clusters failing together (an API server restart) do not
/// come back in lockstep.
pub const JITTER: f64 = 0.2;
/// How long a changed cluster's run keeps the others from starting (it normally takes well
/// under a second; one that takes longer no longer holds them).
pub const CHANGES_ALONE: Duration = Duration::from_secs(5);

/// The retry delay after `failures` consecutive failures (≥ 1), `jitter` in [0, 1).
pub fn backoff(failures: u32, jitter: f64) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    let delay = BACKOFF_BASE.saturating_mul(1 << exp).min(BACKOFF_CAP);
    delay.mul_f64(1.0 - JITTER + 2.0 * JITTER * jitter.clamp(0.0, 1.0))
}

#[derive(Debug, Clone)]
struct Queued {
    due: Instant,
    seq: u64,
    /// Not started while this key is queued (not as a retry) or running.
    after: Option<String>,
    /// Queued by [`Queue::finish`] after a failure.
    retry: bool,
    /// Queued by [`Queue::recheck`]: any trigger brings it forward, and it holds back no one.
    recheck: bool,
    /// Queued by [`Queue::enqueue_first`]: goes ahead of every entry that is not.
    first: bool,
    /// Found due: indexed in [`Queue::due`], else in [`Queue::later`].
    ready: bool,
}

impl Queued {
    /// A new entry, not yet found due.
    fn new(due: Instant, seq: u64, after: Option<String>) -> Queued {
        Queued {
            due,
            seq,
            after,
            retry: false,
            recheck: false,
            first: false,
            ready: false,
        }
    }
}

/// A running key's next run, asked for while it ran.
#[derive(Debug, Clone, Default)]
struct Again {
    after: Option<String>,
    urgent: bool,
    first: bool,
}

/// What became of a finished run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// Triggered while it ran: queued to run again at once.
    Again,
    /// Failed: retried after this delay.
    Retry(Duration),
    /// Done until the next trigger.
    Idle,
}

/// Clusters waiting to be reconciled, running, and backing off.
#[derive(Debug, Default)]
pub struct Queue {
    cap: usize,
    queued: BTreeMap<String, Queued>,
    /// Queued entries found due, in the order they start: changed first (`false` sorts
    /// first), then by trigger.
    due: BTreeSet<(bool, u64, String)>,
    /// Queued entries not yet found due, by due time.
    later: BTreeSet<(Instant, u64, String)>,
    /// How many of `queued` are rechecks.
    rechecks: usize,
    /// Running keys, and whether they were triggered again meanwhile.
    running: BTreeMap<String, Option<Again>>,
    /// The running keys queued as changed, and when they started.
    changing: BTreeMap<String, Instant>,
    failures: BTreeMap<String, u32>,
    seq: u64,
}

impl Queue {
    /// A queue running at most `cap` clusters at once (0 counts as 1).
    pub fn new(cap: usize) -> Queue {
        Queue {
            cap: cap.max(1),
            ..Default::default()
        }
    }

    /// Asks for `key` to be reconciled, after `after` (its management cluster) when that is
    /// queued or running. `urgent` (a new revision) also cuts a failure backoff short.
    pub fn enqueue(&mut self, key: &str, after: Option<&str>, urgent: bool, now: Instant) {
        self.ask(key, after, urgent, false, now);
    }

    /// [`Queue::enqueue`] for a cluster whose desired state a new revision changed (urgent): it
    /// goes ahead of every cluster that is only queued to be confirmed, even those queued
    /// earlier, and, if it is running, its next run does.
    pub fn enqueue_first(&mut self, key: &str, after: Option<&str>, now: Instant) {
        self.ask(key, after, true, true, now);
    }

    fn ask(&mut self, key: &str, after: Option<&str>, urgent: bool, first: bool, now: Instant) {
        let after = after.filter(|a| *a != key).map(str::to_string);
        if let Some(again) = self.running.get_mut(key) {
            let was = again.take().unwrap_or_default();
            *again = Some(Again {
                after,
                urgent: urgent || was.urgent,
                first: first || was.first,
            });
            return;
        }
        self.seq += 1;
        let seq = self.seq;
        match self.queued.remove(key) {
            Some(mut q) => {
                self.unindex(key, &q);
                if urgent || !q.retry {
                    q.due = q.due.min(now);
                    q.retry = false;
                    self.rechecks -= usize::from(std::mem::take(&mut q.recheck));
                }
                q.first |= first;
                q.after = after.or(q.after.take());
                self.index(key, &q);
                self.queued.insert(key.to_string(), q);
            }
            None => {
                self.insert(
                    key,
                    Queued {
                        first,
                        ..Queued::new(now, seq, after)
                    },
                );
            }
        }
    }

    /// Files an entry in the index it belongs to.
    fn index(&mut self, key: &str, q: &Queued) {
        if q.ready {
            self.due.insert((!q.first, q.seq, key.to_string()));
        } else {
            self.later.insert((q.due, q.seq, key.to_string()));
        }
    }

    /// Takes an entry out of its index.
    fn unindex(&mut self, key: &str, q: &Queued) {
        let was = if q.ready {
            self.due.remove(&(!q.first, q.seq, key.to_string()))
        } else {
            self.later.remove(&(q.due, q.seq, key.to_string()))
        };
        debug_assert!(was, "{key} was not indexed");
    }

    /// Queues `key` (not queued yet).
    fn insert(&mut self, key: &str, q: Queued) {
        self.rechecks += usize::from(q.recheck);
        self.index(key, &q);
        let was = self.queued.insert(key.to_string(), q);
        debug_assert!(was.is_none(), "{key} was queued twice");
    }

    /// Takes `key` out of the queue.
    fn remove(&mut self, key: &str) -> Option<Queued> {
        let q = self.queued.remove(key)?;
        self.unindex(key, &q);
        self.rechecks -= usize::from(q.recheck);
        Some(q)
    }

    /// Moves the entries due by `now` to the start order.
    fn promote(&mut self, now: Instant) {
        while let Some((due, _, _)) = self.later.first()
            && *due <= now
        {
            let (_, _, key) = self.later.pop_first().expect("just seen");
            let q = self
                .queued
                .get_mut(&key)
                .expect("indexed entries are queued");
            q.ready = true;
            self.due.insert((!q.first, q.seq, key));
        }
    }

    /// Whether `after` holds back the entries that wait for it: it is running, or queued to run
    /// (not backing off after a failure, not only due for a recheck) and waiting for no one
    /// itself. Waits are one deep, so they never close into a cycle whose entries would each
    /// wait for the next forever: whatever holds an entry back can start itself.
    fn holds(&self, after: &str) -> bool {
        self.running.contains_key(after)
            || self
                .queued
                .get(after)
                .is_some_and(|b| !b.retry && !b.recheck && b.after.is_none())
    }

    /// A test of whether an entry is blocked that asks [`Queue::holds`] once per management
    /// cluster named, not once per entry (a scan covers up to the whole fleet).
    fn blocked_test(&self) -> impl FnMut(&Queued) -> bool + '_ {
        let mut known: Vec<(String, bool)> = Vec::new();
        move |q: &Queued| {
            let Some(after) = q.after.as_deref() else {
                return false;
            };
            if let Some((_, held)) = known.iter().find(|(a, _)| a == after) {
                return *held;
            }
            let held = self.holds(after);
            known.push((after.to_string(), held));
            held
        }
    }

    /// Until when the changed clusters running now keep the others from starting (`None`: no
    /// changed cluster is running). A time already past holds nothing.
    fn changes_hold_until(&self) -> Option<Instant> {
        self.changing.values().max().map(|s| *s + CHANGES_ALONE)
    }

    /// The clusters to start now: due, not blocked, changed ones first, then oldest trigger
    /// first, as many as the cap leaves room for; while a changed cluster runs (or starts now),
    /// only changed ones. They count as running until [`Queue::finish`].
    pub fn take_ready(&mut self, now: Instant) -> Vec<String> {
        let room = self.cap.saturating_sub(self.running.len());
        if room == 0 {
            return Vec::new();
        }
        self.promote(now);
        let mut alone = self.changes_hold_until().is_some_and(|h| now < h);
        let out: Vec<(String, bool)> = {
            let mut blocked = self.blocked_test();
            // In start order: the first `room` not blocked (blocked ones are skipped, not
            // scanned past when there is no room left). Changed entries come before the
            // others, so the first other one ends the scan when a change holds them.
            let mut out = Vec::new();
            for (other, _, k) in &self.due {
                if out.len() == room || (*other && alone) {
                    break;
                }
                if blocked(&self.queued[k]) {
                    continue;
                }
                alone |= !*other;
                out.push((k.clone(), !*other));
            }
            out
        };
        for (k, first) in &out {
            self.remove(k);
            self.running.insert(k.clone(), None);
            if *first {
                self.changing.insert(k.clone(), now);
            }
        }
        out.into_iter().map(|(k, _)| k).collect()
    }

    /// Records the end of `key`'s run. `jitter` in [0, 1) spreads the retry delay.
    pub fn finish(&mut self, key: &str, ok: bool, now: Instant, jitter: f64) -> Finished {
        let again = self.running.remove(key).flatten();
        self.changing.remove(key);
        let retry = if ok {
            self.failures.remove(key);
            None
        } else {
            let n = self.failures.entry(key.to_string()).or_default();
            *n += 1;
            Some(backoff(*n, jitter))
        };
        self.seq += 1;
        let seq = self.seq;
        match (again, retry) {
            (Some(again), retry) if again.urgent || retry.is_none() => {
                self.insert(
                    key,
                    Queued {
                        first: again.first,
                        ..Queued::new(now, seq, again.after)
                    },
                );
                Finished::Again
            }
            (again, Some(delay)) => {
                self.insert(
                    key,
                    Queued {
                        retry: true,
                        ..Queued::new(now + delay, seq, again.and_then(|a| a.after))
                    },
                );
                Finished::Retry(delay)
            }
            (_, None) => Finished::Idle,
        }
    }

    /// Asks for `key` to be looked at again by `at` at the latest (a cluster waiting for an
    /// upgrade stage, in case no watch event says it finished): queued with that due time unless
    /// it is queued or running already.
    pub fn recheck(&mut self, key: &str, at: Instant) {
        if self.running.contains_key(key) || self.queued.contains_key(key) {
            return;
        }
        self.seq += 1;
        self.insert(
            key,
            Queued {
                // Any trigger meanwhile brings it forward (not a retry), and it waits on its own.
                recheck: true,
                ..Queued::new(at, self.seq, None)
            },
        );
    }

    /// Forgets a key that left the fleet (queued, retries and failure count).
    pub fn forget(&mut self, key: &str) {
        self.remove(key);
        self.failures.remove(key);
    }

    /// When the next queued cluster falls due (`None`: nothing waits on time). At the cap,
    /// `None`: nothing can start before a run finishes, and the caller hears of that anyway.
    pub fn next_due(&self) -> Option<Instant> {
        if self.running.len() >= self.cap {
            return None;
        }
        // An entry found due is due now (its time has passed); otherwise the earliest of those
        // not yet found due, blocked ones aside. One that is not a change starts no earlier
        // than the running changes let it.
        let hold = self.changes_hold_until();
        let when = |q: &Queued| match hold {
            Some(h) if !q.first => q.due.max(h),
            _ => q.due,
        };
        let mut blocked = self.blocked_test();
        let now = self
            .due
            .iter()
            .map(|(_, _, k)| &self.queued[k])
            .find(|q| !blocked(q))
            .map(when);
        let mut later = None;
        for q in self.later.iter().map(|(_, _, k)| &self.queued[k]) {
            // By due time: past the earliest candidate, nothing starts sooner.
            if later.is_some_and(|l| q.due >= l) {
                break;
            }
            if !blocked(q) {
                later = Some(later.map_or(when(q), |l: Instant| l.min(when(q))));
            }
        }
        now.into_iter().chain(later).min()
    }

    /// Consecutive failures of a key.
    pub fn failures(&self, key: &str) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }

    /// Keys running now.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Keys waiting (due or backing off), not counting [`Queue::recheck`]s.
    pub fn queued(&self) -> usize {
        self.queued.len() - self.rechecks
    }

    /// Keys only due for a [`Queue::recheck`] (clusters waiting for an upgrade stage).
    pub fn rechecks(&self) -> usize {
        self.rechecks
    }

    /// Whether nothing is queued or running (rechecks aside: they are timers, not work).
    pub fn is_idle(&self) -> bool {
        self.queued() == 0 && self.running.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn entries_queued_after_each_other_do_not_wait_forever() {
        // Two clusters each queued after the other (each queued again after the other's run,
        // once while it ran): neither may wait for the other, or neither ever starts.
        let t = Instant::now();
        let mut q = Queue::new(4);
        q.enqueue("a", None, false, t);
        q.enqueue("b", None, false, t);
        assert_eq!(q.take_ready(t), vec!["a", "b"]);
        q.finish("a", true, t, 0.5);
        q.enqueue("b", Some("a"), false, t);
        assert_eq!(q.finish("b", true, t, 0.5), Finished::Again);
        q.enqueue("a", Some("b"), false, t);
        assert_eq!(q.take_ready(t), vec!["b", "a"]);
        // A longer ring, none of it running.
        let mut q = Queue::new(4);
        for (k, after) in [("a", "c"), ("b", "a"), ("c", "b")] {
            q.enqueue(k, Some(after), false, t);
        }
        assert_eq!(q.take_ready(t).len(), 3);
        // One deep: a workload still waits for its management cluster queued before it.
        let mut q = Queue::new(4);
        q.enqueue("mgmt", None, false, t);
        q.enqueue("w", Some("mgmt"), false, t);
        assert_eq!(q.take_ready(t), vec!["mgmt"]);
    }

    #[test]
    fn a_recheck_is_due_later_and_any_trigger_brings_it_forward() {
        let t0 = Instant::now();
        let mut q = Queue::new(2);
        q.recheck("a", t0 + Duration::from_secs(30));
        assert!(q.take_ready(t0).is_empty());
        assert_eq!(q.next_due(), Some(t0 + Duration::from_secs(30)));
        q.enqueue("a", None, false, t0);
        assert_eq!(q.take_ready(t0), vec!["a".to_string()]);
        // Running or queued already: nothing changes.
        q.recheck("a", t0 + Duration::from_secs(30));
        assert_eq!(q.queued(), 0);
        // A management cluster waiting for a recheck holds back none of its workloads.
        let mut q = Queue::new(2);
        q.recheck("m", t0 + Duration::from_secs(30));
        q.enqueue("w", Some("m"), false, t0);
        assert_eq!(q.take_ready(t0), vec!["w".to_string()]);
    }

    #[test]
    fn the_backoff_doubles_up_to_the_cap_with_bounded_jitter() {
        assert_eq!(backoff(1, 0.5), secs(2));
        assert_eq!(backoff(2, 0.5), secs(4));
        assert_eq!(backoff(5, 0.5), secs(32));
        assert_eq!(backoff(9, 0.5), BACKOFF_CAP);
        assert_eq!(backoff(1000, 0.5), BACKOFF_CAP);
        assert_eq!(backoff(1, 0.0), Duration::from_millis(1600));
        assert_eq!(backoff(1, 1.0), Duration::from_millis(2400));
    }

    #[test]
    fn triggers_are_deduplicated_and_a_cluster_never_runs_twice_at_once() {
        let t = Instant::now();
        let mut q = Queue::new(4);
        q.enqueue("a", None, false, t);
        q.enqueue("a", None, false, t);
        q.enqueue("b", None, false, t);
        assert_eq!(q.take_ready(t), vec!["a", "b"]);
        assert!(q.take_ready(t).is_empty());
        // Triggered while running: once more afterwards, however many triggers.
        q.enqueue("a", None, false, t);
        q.enqueue("a", None, false, t);
        assert!(q.take_ready(t).is_empty(), "a is still running");
        assert_eq!(q.finish("a", true, t, 0.5), Finished::Again);
        assert_eq!(q.finish("b", true, t, 0.5), Finished::Idle);
        assert_eq!(q.take_ready(t), vec!["a"]);
        assert_eq!(q.finish("a", true, t, 0.5), Finished::Idle);
        assert!(q.is_idle());
    }

    #[test]
    fn the_cap_bounds_runs_and_the_oldest_trigger_goes_first() {
        let t = Instant::now();
        let mut q = Queue::new(2);
        for k in ["c", "a", "d", "b"] {
            q.enqueue(k, None, false, t);
        }
        assert_eq!(q.take_ready(t), vec!["c", "a"]);
        assert_eq!(q.running(), 2);
        assert!(q.take_ready(t).is_empty());
        q.finish("a", true, t, 0.5);
        assert_eq!(q.take_ready(t), vec!["d"]);
    }

    #[test]
    fn a_changed_cluster_goes_ahead_of_those_only_confirmed_even_if_running() {
        let t = Instant::now();
        let mut q = Queue::new(1);
        // A management cluster and its workloads, queued and waiting for rechecks before the
        // revision; "w3" is running when it comes.
        q.enqueue("w3", Some("m"), false, t);
        assert_eq!(q.take_ready(t), vec!["w3"]);
        for w in ["w0", "w1"] {
            q.recheck(w, t);
        }
        // The new revision changed w2 and w3; it queues the management cluster first, then its
        // workloads in name order.
        q.enqueue("m", None, true, t);
        for w in ["w0", "w1", "w2", "w3"] {
            if w == "w2" || w == "w3" {
                q.enqueue_first(w, Some("m"), t);
            } else {
                q.enqueue(w, Some("m"), true, t);
            }
        }
        assert_eq!(q.finish("w3", true, t, 0.5), Finished::Again);
        let mut order = Vec::new();
        while let Some(k) = q.take_ready(t).pop() {
            q.finish(&k, true, t, 0.5);
            order.push(k);
        }
        // The management cluster still goes before its workloads, then the changed ones.
        assert_eq!(order, vec!["m", "w2", "w3", "w0", "w1"]);
        // Taken: a later plain trigger is ordinary again.
        q.enqueue("w1", None, false, t);
        q.enqueue("w2", None, false, t);
        assert_eq!(q.take_ready(t), vec!["w1"]);
    }

    #[test]
    fn while_a_change_runs_the_others_wait_for_it_up_to_a_bound() {
        let t = Instant::now();
        let mut q = Queue::new(4);
        // A revision that changed "c" and asks to confirm "a" and "b".
        q.enqueue("a", None, true, t);
        q.enqueue_first("c", None, t);
        q.enqueue("b", None, true, t);
        assert_eq!(q.take_ready(t), vec!["c"], "the change runs alone");
        assert_eq!(q.next_due(), Some(t + CHANGES_ALONE));
        // A watch event for another cluster waits too; another change does not.
        q.enqueue("d", None, false, t);
        q.enqueue_first("e", None, t);
        assert_eq!(q.take_ready(t), vec!["e"]);
        q.finish("c", true, t, 0.5);
        assert!(q.take_ready(t).is_empty(), "e still runs");
        q.finish("e", true, t, 0.5);
        assert_eq!(q.next_due(), Some(t));
        assert_eq!(q.take_ready(t), vec!["a", "b", "d"]);

        // A change whose run hangs holds the others for CHANGES_ALONE, no longer.
        let mut q = Queue::new(4);
        q.enqueue_first("slow", None, t);
        q.enqueue("a", None, true, t);
        assert_eq!(q.take_ready(t), vec!["slow"]);
        let before = t + CHANGES_ALONE - Duration::from_millis(1);
        assert!(q.take_ready(before).is_empty());
        assert_eq!(q.take_ready(t + CHANGES_ALONE), vec!["a"]);
        assert_eq!(q.next_due(), None, "nothing else is queued");

        // Confirmations already running when a change comes go on; no new one starts beside it.
        let mut q = Queue::new(3);
        for k in ["a", "b", "c"] {
            q.enqueue(k, None, true, t);
        }
        assert_eq!(q.take_ready(t), vec!["a", "b", "c"]);
        q.enqueue_first("x", None, t);
        q.enqueue("d", None, true, t);
        q.finish("a", true, t, 0.5);
        assert_eq!(q.take_ready(t), vec!["x"]);
        q.finish("b", true, t, 0.5);
        assert!(q.take_ready(t).is_empty(), "d waits for x");
        q.finish("x", true, t, 0.5);
        assert_eq!(q.take_ready(t), vec!["d"]);
    }

    #[test]
    fn a_slow_cluster_does_not_hold_the_others() {
        let t = Instant::now();
        let mut q = Queue::new(2);
        q.enqueue("deleting", None, false, t);
        q.enqueue("a", None, false, t);
        q.enqueue("b", None, false, t);
        assert_eq!(q.take_ready(t), vec!["deleting", "a"]);
        // "deleting" is still running; "a" finishes and "b" starts in its place.
        q.finish("a", true, t, 0.5);
        assert_eq!(q.take_ready(t), vec!["b"]);
    }

    #[test]
    fn failures_back_off_and_watch_triggers_do_not_cut_the_backoff_short() {
        let t = Instant::now();
        let mut q = Queue::new(4);
        q.enqueue("a", None, false, t);
        q.take_ready(t);
        assert_eq!(q.finish("a", false, t, 0.5), Finished::Retry(secs(2)));
        assert_eq!(q.next_due(), Some(t + secs(2)));
        // A watch event (someone rewrote a field): still waits.
        q.enqueue("a", None, false, t + secs(1));
        assert!(q.take_ready(t + secs(1)).is_empty());
        assert_eq!(q.take_ready(t + secs(2)), vec!["a"]);
        assert_eq!(
            q.finish("a", false, t + secs(2), 0.5),
            Finished::Retry(secs(4))
        );
        assert_eq!(q.failures("a"), 2);
        // A new revision may hold the fix: at once.
        q.enqueue("a", None, true, t + secs(3));
        assert_eq!(q.take_ready(t + secs(3)), vec!["a"]);
        assert_eq!(q.finish("a", true, t + secs(3), 0.5), Finished::Idle);
        assert_eq!(q.failures("a"), 0, "success forgets the failures");
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn an_urgent_trigger_while_failing_runs_again_at_once() {
        let t = Instant::now();
        let mut q = Queue::new(4);
        q.enqueue("a", None, false, t);
        q.take_ready(t);
        q.enqueue("a", None, true, t);
        assert_eq!(q.finish("a", false, t, 0.5), Finished::Again);
        assert_eq!(q.take_ready(t), vec!["a"]);
        // A plain trigger during a failing run: the backoff wins.
        q.enqueue("a", None, false, t);
        assert_eq!(q.finish("a", false, t, 0.5), Finished::Retry(secs(4)));
    }

    #[test]
    fn workloads_wait_for_their_management_cluster_unless_it_is_backing_off() {
        let t = Instant::now();
        let mut q = Queue::new(4);
        q.enqueue("mgmt", None, true, t);
        q.enqueue("w1", Some("mgmt"), true, t);
        q.enqueue("w2", Some("mgmt"), true, t);
        q.enqueue("other", None, false, t);
        assert_eq!(q.take_ready(t), vec!["mgmt", "other"]);
        assert!(q.take_ready(t).is_empty(), "mgmt is running");
        // It failed: the workloads go ahead while it backs off (as they would after a failed
        // pass), rather than wait minutes.
        q.finish("mgmt", false, t, 0.5);
        assert_eq!(q.take_ready(t), vec!["w1", "w2"]);
    }

    #[test]
    fn at_the_cap_nothing_is_due_until_a_run_finishes() {
        // The daemon sleeps until next_due; a due time in the past at the cap would wake it
        // over and over with no room to start anything.
        let t = Instant::now();
        let mut q = Queue::new(2);
        for k in ["a", "b", "c", "d"] {
            q.enqueue(k, None, false, t);
        }
        assert_eq!(q.next_due(), Some(t));
        assert_eq!(q.take_ready(t), vec!["a", "b"]);
        assert_eq!(q.next_due(), None, "c and d are due, but there is no room");
        q.finish("a", true, t + secs(1), 0.5);
        assert_eq!(q.next_due(), Some(t), "room again: c is due");
        assert_eq!(q.take_ready(t + secs(1)), vec!["c"]);
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn the_counts_follow_every_operation() {
        // Random operations on a few keys, some queued after others (their management cluster,
        // or any other: a ring of waits must not form); after each, the kept counts agree with
        // a scan, and with nothing running, whatever is queued has a time to start.
        let mut rng = fastrand::Rng::with_seed(7);
        let keys = ["m", "a", "b", "c", "d"];
        let t0 = Instant::now();
        let mut q = Queue::new(2);
        for step in 0..5_000u64 {
            let now = t0 + Duration::from_millis(step * 100);
            let key = keys[rng.usize(..keys.len())];
            let after = match rng.u8(..4) {
                0 | 1 if key != "m" => Some("m"),
                2 => Some(keys[rng.usize(..keys.len())]),
                _ => None,
            };
            match rng.u8(..7) {
                0 => q.enqueue(key, after, rng.bool(), now),
                1 => q.enqueue_first(key, after, now),
                2 => q.recheck(key, now + secs(rng.u64(..30))),
                3 => q.forget(key),
                4 => {
                    // The indexes give what a scan of every entry gives.
                    let room = q.cap.saturating_sub(q.running.len());
                    let held = q.changing.values().any(|s| now < *s + CHANGES_ALONE);
                    let mut expected: Vec<(bool, u64, String)> = q
                        .queued
                        .iter()
                        .filter(|(_, e)| {
                            e.due <= now && !e.after.as_deref().is_some_and(|a| q.holds(a))
                        })
                        .map(|(k, e)| (!e.first, e.seq, k.clone()))
                        .collect();
                    expected.sort();
                    // While a change runs or starts, only changes.
                    let changes = expected.iter().filter(|e| !e.0).count();
                    if held || changes > 0 {
                        expected.truncate(changes);
                    }
                    expected.truncate(room);
                    let expected: Vec<String> = expected.into_iter().map(|e| e.2).collect();
                    assert_eq!(q.take_ready(now), expected, "step {step}");
                }
                _ => {
                    if q.running.contains_key(key) {
                        q.finish(key, rng.bool(), now, rng.f64());
                    }
                }
            }
            let rechecks = q.queued.values().filter(|e| e.recheck).count();
            // Every queued entry is in exactly one index, under its current key.
            assert_eq!(q.due.len() + q.later.len(), q.queued.len(), "step {step}");
            for (k, e) in &q.queued {
                let filed = if e.ready {
                    q.due.contains(&(!e.first, e.seq, k.clone()))
                } else {
                    q.later.contains(&(e.due, e.seq, k.clone()))
                };
                assert!(filed, "step {step}: {k} not indexed");
            }
            assert_eq!(q.rechecks(), rechecks, "step {step}");
            assert_eq!(q.queued(), q.queued.len() - rechecks, "step {step}");
            assert!(q.running() <= 2);
            if q.running() == 0 && !q.queued.is_empty() {
                assert!(q.next_due().is_some(), "step {step}: stuck {:?}", q.queued);
            }
        }
    }

    #[test]
    fn a_forgotten_cluster_leaves_the_queue() {
        let t = Instant::now();
        let mut q = Queue::new(1);
        q.enqueue("gone", None, false, t);
        q.forget("gone");
        assert!(q.is_idle());
        assert_eq!(q.next_due(), None);
    }
}
