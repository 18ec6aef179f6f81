//! The deliveries the webhook accepted lately, so a redelivery or a replay of one is told apart
//! from a new one: GitHub's redeliveries repeat id and body, and a replay (GitHub signs the body,
//! not the delivery id) repeats the body under any id. See [`super::webhook`]'s replays section.

use std::collections::{HashSet, VecDeque};

use sha2::{Digest, Sha256};

/// How many recent delivery ids, and how many recent bodies' digests, are remembered for
/// duplicate detection.
pub const DELIVERY_LOG_SIZE: usize = 1000;

/// Delivery ids longer than this are not remembered (GitHub's are 36-character GUIDs).
const MAX_DELIVERY_ID_LEN: usize = 128;

/// The last [`DELIVERY_LOG_SIZE`] delivery ids and the SHA-256 of the last
/// [`DELIVERY_LOG_SIZE`] bodies, each oldest first out. The id catches GitHub's redeliveries,
/// the digest a signed body replayed under another id (the id is not signed).
#[derive(Debug, Default)]
pub struct DeliveryLog {
    ids: Recent<String>,
    bodies: Recent<[u8; 32]>,
}

impl DeliveryLog {
    /// Records a verified delivery: its id (when it has one) and its body's digest. `false` when
    /// either was remembered already; then nothing is recorded, so replays do not push
    /// GitHub's deliveries out.
    pub fn insert(&mut self, id: Option<&str>, body: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(body).into();
        let id = id.map(str::to_owned);
        if id.as_ref().is_some_and(|i| self.ids.contains(i)) || self.bodies.contains(&digest) {
            return false;
        }
        // An id longer than GitHub's is not worth memory: its body is remembered all the same.
        if let Some(id) = id.filter(|i| i.len() <= MAX_DELIVERY_ID_LEN) {
            self.ids.push(id);
        }
        self.bodies.push(digest);
        true
    }

    /// How many ids are remembered.
    pub fn len(&self) -> usize {
        self.ids.order.len()
    }

    /// How many bodies are remembered.
    pub fn bodies(&self) -> usize {
        self.bodies.order.len()
    }

    /// Whether nothing is.
    pub fn is_empty(&self) -> bool {
        self.ids.order.is_empty() && self.bodies.order.is_empty()
    }
}

/// The last [`DELIVERY_LOG_SIZE`] values, oldest first out.
#[derive(Debug)]
struct Recent<T> {
    order: VecDeque<T>,
    seen: HashSet<T>,
}

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Recent {
            order: VecDeque::new(),
            seen: HashSet::new(),
        }
    }
}

impl<T: Clone + Eq + std::hash::Hash> Recent<T> {
    fn contains(&self, v: &T) -> bool {
        self.seen.contains(v)
    }

    fn push(&mut self, v: T) {
        if self.order.len() >= DELIVERY_LOG_SIZE
            && let Some(oldest) = self.order.pop_front()
        {
            self.seen.remove(&oldest);
        }
        self.seen.insert(v.clone());
        self.order.push_back(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delivery_log_forgets_the_oldest() {
        let mut log = DeliveryLog::default();
        let body = |i: usize| format!("body-{i}").into_bytes();
        assert!(log.insert(Some("first"), b"first body"));
        assert!(!log.insert(Some("first"), b"first body"), "a redelivery");
        for i in 0..DELIVERY_LOG_SIZE - 1 {
            assert!(log.insert(Some(&format!("id-{i}")), &body(i)));
        }
        assert_eq!(
            (log.len(), log.bodies()),
            (DELIVERY_LOG_SIZE, DELIVERY_LOG_SIZE)
        );
        assert!(
            !log.insert(Some("first"), b"first body"),
            "still remembered at exactly the limit"
        );
        assert!(log.insert(Some("one-more"), b"one more body"));
        assert_eq!(
            (log.len(), log.bodies()),
            (DELIVERY_LOG_SIZE, DELIVERY_LOG_SIZE)
        );
        assert!(
            log.insert(Some("first"), b"first body"),
            "the oldest was forgotten"
        );
    }

    #[test]
    fn a_signed_body_replayed_under_another_id_or_none_is_a_duplicate() {
        let mut log = DeliveryLog::default();
        let push = br#"{"ref":"refs/heads/main","after":"abc"}"#;
        assert!(log.insert(Some("72d3162e-cc78-11e3-81ab-4c9367dc0958"), push));
        for id in [
            Some("another-id"),
            Some(&"x".repeat(MAX_DELIVERY_ID_LEN + 1)),
            None,
        ] {
            assert!(!log.insert(id, push), "{id:?}");
        }
        // Replays record nothing: GitHub's ids and bodies are not pushed out by them.
        assert_eq!((log.len(), log.bodies()), (1, 1));
        assert!(
            log.insert(Some("another-id"), b"{}"),
            "a new body under that id"
        );
        // An overlong id is not remembered, its body is.
        let long = "y".repeat(MAX_DELIVERY_ID_LEN + 1);
        assert!(log.insert(Some(&long), b"[1]"));
        assert!(!log.insert(Some(&long), b"[1]"));
        assert!(log.insert(Some(&long), b"[2]"));
        assert_eq!((log.len(), log.bodies()), (2, 4));
    }
}
