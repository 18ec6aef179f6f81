//! A coalescing trigger channel: many reasons to reconcile, one reconcile.
//!
//! Polls, GitHub pushes, local edits and manual requests all mean the same thing to the agent:
//! "the desired state may have changed, look again". Queueing each one as a separate unit of work is
//! how GitOps controllers end up in reconcile storms (Flux users merging tens of PRs in a change
//! window saw every Kustomization re-run once per push). Here every [`Trigger`] fired while the
//! reconciler is busy lands in one pending batch, and [`TriggerReceiver::next`] hands the whole batch
//! over in a single wake-up: fifty pushes during an apply become one reconcile of the newest revision.
//!
//! An optional window ([`TriggerReceiver::with_debounce`]) also merges triggers that arrive close
//! together when the reconciler takes them as they come: at most one batch is handed over per
//! window. The first trigger after a quiet window goes at once (a push is not held back: the
//! window used to come before every reconcile, 100 ms of a 170 ms push-to-applied), and the ones
//! that follow it inside the window wait for its end and go as one batch. The window is measured
//! from the previous hand-over and is not extended by triggers, so a steady trickle of events
//! cannot postpone a reconcile forever.
//!
//! [`TriggerSender::fire`] never blocks and never needs a tokio runtime: the file watcher calls it
//! from the debouncer's own thread. The pending batch is bounded ([`MAX_PENDING`]); past that the
//! oldest triggers are dropped, which loses nothing a reconcile of the newest state would not redo.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

/// Most triggers kept between two wake-ups; older ones are dropped first (and counted).
pub const MAX_PENDING: usize = 1024;

/// Why a reconcile was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// The periodic poll timer fired.
    Poll,
    /// A verified GitHub push to the followed branch.
    Webhook {
        /// The pushed commit (`after` in the push payload), when known.
        after: Option<String>,
        /// GitHub's delivery id (`X-GitHub-Delivery`), for correlating logs with GitHub's UI.
        delivery: Option<String>,
    },
    /// A file changed in the watched local working copy.
    LocalChange,
    /// Someone asked for a reconcile (a signal, a CLI request).
    Manual,
    /// A watched object on the management cluster changed under the agent (drift, a Cluster
    /// becoming Available, a status deleted): the revision already applied is reconciled again,
    /// without asking the Git remote. Names the fleet cluster whose object changed, when known
    /// (only that cluster is reconciled again).
    ClusterChange(Option<String>),
}

impl Trigger {
    /// A short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Trigger::Poll => "poll",
            Trigger::Webhook { .. } => "webhook",
            Trigger::LocalChange => "local_change",
            Trigger::Manual => "manual",
            Trigger::ClusterChange(_) => "cluster_change",
        }
    }
}

/// The commit named by the most recent webhook trigger of a batch, if any did name one.
///
/// A batch is in firing order, so this is the newest pushed revision: the one worth fetching.
pub fn newest_revision(batch: &[Trigger]) -> Option<&str> {
    batch.iter().rev().find_map(|t| match t {
        Trigger::Webhook {
            after: Some(after), ..
        } => Some(after.as_str()),
        _ => None,
    })
}

/// Why a trigger could not be delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TriggerError {
    /// The receiver is gone (the agent is shutting down); nobody will reconcile.
    #[error("the trigger receiver was dropped; nobody is listening")]
    Closed,
}

struct State {
    pending: Vec<Trigger>,
    senders: usize,
    receiver_alive: bool,
    dropped: u64,
}

struct Shared {
    state: Mutex<State>,
    notify: Notify,
}

impl Shared {
    /// Locks the state. A panic while holding this lock cannot leave it inconsistent (every update
    /// is a single push or field write), so a poisoned lock is simply taken over.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Creates a trigger channel: any number of senders, one receiver.
pub fn channel() -> (TriggerSender, TriggerReceiver) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            pending: Vec::new(),
            senders: 1,
            receiver_alive: true,
            dropped: 0,
        }),
        notify: Notify::new(),
    });
    (
        TriggerSender {
            shared: shared.clone(),
        },
        TriggerReceiver {
            shared,
            debounce: None,
            handed_over: None,
        },
    )
}

/// The firing end. Cheap to clone; usable from any thread, inside or outside a tokio runtime.
pub struct TriggerSender {
    shared: Arc<Shared>,
}

impl TriggerSender {
    /// Asks for a reconcile. Never blocks; does nothing once the receiver is gone.
    pub fn fire(&self, trigger: Trigger) {
        if self.try_fire(trigger).is_err() {
            tracing::debug!("trigger dropped: the receiver is gone");
        }
    }

    /// Asks for a reconcile, saying whether anyone is still listening.
    pub fn try_fire(&self, trigger: Trigger) -> Result<(), TriggerError> {
        {
            let mut state = self.shared.lock();
            if !state.receiver_alive {
                return Err(TriggerError::Closed);
            }
            if state.pending.len() >= MAX_PENDING {
                state.pending.remove(0);
                state.dropped += 1;
            }
            state.pending.push(trigger);
        }
        // One stored permit is enough however many triggers pile up: the receiver takes them all.
        self.shared.notify.notify_one();
        Ok(())
    }

    /// Whether the receiver has been dropped.
    pub fn is_closed(&self) -> bool {
        !self.shared.lock().receiver_alive
    }
}

impl Clone for TriggerSender {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        TriggerSender {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for TriggerSender {
    fn drop(&mut self) {
        let last = {
            let mut state = self.shared.lock();
            state.senders -= 1;
            state.senders == 0
        };
        if last {
            // Wake the receiver so it can see the channel is closed.
            self.shared.notify.notify_one();
        }
    }
}

impl std::fmt::Debug for TriggerSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TriggerSender").finish_non_exhaustive()
    }
}

/// The reconciler's end.
pub struct TriggerReceiver {
    shared: Arc<Shared>,
    debounce: Option<Duration>,
    /// When the last batch was handed over: the window runs from there.
    handed_over: Option<tokio::time::Instant>,
}

impl TriggerReceiver {
    /// Hands over at most one batch per `window`: a trigger after a quiet window goes at once,
    /// later ones wait until the window since the previous hand-over has passed and go together.
    /// Triggers arriving inside the window do not extend it. A zero window means none.
    pub fn with_debounce(mut self, window: Duration) -> Self {
        self.debounce = (!window.is_zero()).then_some(window);
        self
    }

    /// The debounce window, if any.
    pub fn debounce(&self) -> Option<Duration> {
        self.debounce
    }

    /// Waits for at least one trigger and returns every trigger fired since the previous call, in
    /// firing order. `None` once every sender is gone and nothing is pending.
    ///
    /// Cancel-safe: dropping the future (for example in a `select!` with a shutdown signal) loses
    /// no trigger; they stay pending for the next call.
    pub async fn next(&mut self) -> Option<Vec<Trigger>> {
        loop {
            loop {
                {
                    let state = self.shared.lock();
                    if !state.pending.is_empty() {
                        break;
                    }
                    if state.senders == 0 {
                        return None;
                    }
                }
                // A trigger fired between the check above and this await left a permit behind, so
                // this cannot miss it; a stale permit only costs one more trip round the loop.
                self.shared.notify.notified().await;
            }
            if let (Some(window), Some(last)) = (self.debounce, self.handed_over) {
                // A deadline, not a fresh sleep: a `next` cancelled inside the window and called
                // again does not start the window over.
                self.wait_until(last + window).await;
            }
            if let Some(batch) = self.try_next() {
                return Some(batch);
            }
        }
    }

    /// Sleeps until the window's end, ending early if every sender goes away (shutdown).
    async fn wait_until(&self, end: tokio::time::Instant) {
        let sleep = tokio::time::sleep_until(end);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                () = &mut sleep => return,
                () = self.shared.notify.notified() => {
                    if self.shared.lock().senders == 0 {
                        return;
                    }
                }
            }
        }
    }

    /// Takes whatever is pending without waiting; `None` when nothing is.
    pub fn try_next(&mut self) -> Option<Vec<Trigger>> {
        let mut state = self.shared.lock();
        if state.pending.is_empty() {
            None
        } else {
            self.handed_over = Some(tokio::time::Instant::now());
            Some(std::mem::take(&mut state.pending))
        }
    }

    /// How many triggers were dropped because more than [`MAX_PENDING`] piled up.
    pub fn dropped(&self) -> u64 {
        self.shared.lock().dropped
    }
}

impl Drop for TriggerReceiver {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.receiver_alive = false;
        state.pending.clear();
    }
}

impl std::fmt::Debug for TriggerReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TriggerReceiver")
            .field("debounce", &self.debounce)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(after: &str) -> Trigger {
        Trigger::Webhook {
            after: Some(after.to_owned()),
            delivery: None,
        }
    }

    // None asserts on elapsed real time: the windows are an hour (only an early hand-over or the
    // senders going end them inside the test's timeout), or the clock is tokio's paused one.

    #[tokio::test]
    async fn a_burst_is_one_batch_in_firing_order() {
        let (tx, mut rx) = channel();
        for i in 0..50 {
            tx.fire(hook(&format!("c{i}")));
        }
        let batch = rx.next().await.expect("batch");
        assert_eq!(batch.len(), 50);
        assert_eq!(batch[0], hook("c0"));
        assert_eq!(newest_revision(&batch), Some("c49"));
        assert!(rx.try_next().is_none(), "nothing left after the batch");
    }

    #[tokio::test]
    async fn pending_triggers_outlive_the_senders_then_none() {
        let (tx, mut rx) = channel();
        let tx2 = tx.clone();
        tx.fire(Trigger::Poll);
        tx2.fire(Trigger::Manual);
        drop(tx);
        drop(tx2);
        assert_eq!(rx.next().await, Some(vec![Trigger::Poll, Trigger::Manual]));
        assert_eq!(rx.next().await, None);
    }

    #[tokio::test]
    async fn a_waiting_receiver_wakes_on_a_fire_from_a_plain_thread() {
        let (tx, mut rx) = channel();
        let waiter = tokio::spawn(async move { rx.next().await });
        tokio::task::yield_now().await;
        std::thread::spawn(move || tx.fire(Trigger::LocalChange))
            .join()
            .expect("thread");
        let batch = tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .expect("woke")
            .expect("task");
        assert_eq!(batch, Some(vec![Trigger::LocalChange]));
    }

    #[tokio::test]
    async fn a_trigger_after_a_quiet_window_goes_at_once() {
        let (tx, rx) = channel();
        // A window far longer than the test timeout: only a hand-over without waiting passes.
        let mut rx = rx.with_debounce(Duration::from_secs(3600));
        tx.fire(hook("a"));
        let batch = tokio::time::timeout(Duration::from_secs(30), rx.next())
            .await
            .expect("the first trigger was not held for the window");
        assert_eq!(batch, Some(vec![hook("a")]));
    }

    #[tokio::test]
    async fn triggers_inside_the_window_wait_for_its_end_and_go_together() {
        let (tx, rx) = channel();
        let mut rx = rx.with_debounce(Duration::from_secs(3600));
        tx.fire(hook("a"));
        assert_eq!(rx.next().await, Some(vec![hook("a")]));
        // Inside the window opened by that hand-over: `b` is held, and `c`, fired while the
        // receiver waits, joins it.
        tx.fire(hook("b"));
        let waiter = tokio::spawn(async move {
            let batch = rx.next().await;
            (rx, batch)
        });
        tokio::task::yield_now().await;
        tx.fire(hook("c"));
        tokio::task::yield_now().await;
        assert!(
            !waiter.is_finished(),
            "a trigger inside the window went early"
        );
        // The window is an hour; the last sender going is what ends it here.
        drop(tx);
        let (mut rx, batch) = tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .expect("woke")
            .expect("task");
        assert_eq!(batch, Some(vec![hook("b"), hook("c")]));
        assert_eq!(rx.next().await, None);
    }

    // Paused time: the clock moves only when every task waits, so the hold is exact.
    #[tokio::test(start_paused = true)]
    async fn a_cancelled_wait_does_not_restart_the_window() {
        let (tx, rx) = channel();
        let mut rx = rx.with_debounce(Duration::from_millis(200));
        tx.fire(Trigger::Manual);
        assert_eq!(rx.next().await, Some(vec![Trigger::Manual]));
        let opened = rx.handed_over.expect("handed over");
        tx.fire(Trigger::Poll);
        // Cancelled inside the window, as a `select!` with another branch does.
        assert!(
            tokio::time::timeout(Duration::from_millis(1), rx.next())
                .await
                .is_err()
        );
        let batch = rx.next().await;
        assert_eq!(batch, Some(vec![Trigger::Poll]));
        // Handed over at the end of the first window, not one window after the cancelled call.
        assert_eq!(
            rx.handed_over.expect("handed over") - opened,
            Duration::from_millis(200)
        );
    }

    #[tokio::test]
    async fn the_window_ends_when_the_last_sender_goes() {
        let (tx, rx) = channel();
        // A window far longer than the test timeout: only the early exit can make this pass.
        let mut rx = rx.with_debounce(Duration::from_secs(3600));
        tx.fire(Trigger::Manual);
        assert_eq!(rx.next().await, Some(vec![Trigger::Manual]));
        tx.fire(Trigger::Poll);
        let waiter = tokio::spawn(async move { rx.next().await });
        tokio::task::yield_now().await;
        drop(tx);
        let batch = tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .expect("woke")
            .expect("task");
        assert_eq!(batch, Some(vec![Trigger::Poll]));
    }

    #[test]
    fn firing_after_the_receiver_is_gone_is_an_error_not_a_leak() {
        let (tx, rx) = channel();
        tx.fire(Trigger::Poll);
        drop(rx);
        assert!(tx.is_closed());
        assert_eq!(tx.try_fire(Trigger::Poll), Err(TriggerError::Closed));
        tx.fire(Trigger::Poll); // silently ignored
    }

    #[test]
    fn the_pending_batch_is_bounded_keeping_the_newest() {
        let (tx, mut rx) = channel();
        for i in 0..MAX_PENDING + 10 {
            tx.fire(hook(&i.to_string()));
        }
        let batch = rx.try_next().expect("batch");
        assert_eq!(batch.len(), MAX_PENDING);
        assert_eq!(batch[0], hook("10"));
        assert_eq!(
            newest_revision(&batch),
            Some((MAX_PENDING + 9).to_string().as_str())
        );
        assert_eq!(rx.dropped(), 10);
    }

    #[test]
    fn a_zero_window_is_no_window() {
        let (_tx, rx) = channel();
        assert_eq!(rx.with_debounce(Duration::ZERO).debounce(), None);
    }
}
