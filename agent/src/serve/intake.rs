//! Room for webhook bodies read before their signature is checked: how many are read at once,
//! how many bytes they hold together, and who gives way when either bound is reached.
//!
//! Before the HMAC check, a delivery from GitHub and a forged one look the same, except that
//! GitHub sends a small body at once, while a flood that wants to hold the agent's memory has to
//! keep its bodies incomplete, and large. So nothing waits in a queue, and when a bound is
//! reached someone is cut off (503, `busy`):
//!
//! - past the bound on requests, the request that has been reading longest: a newcomer always
//!   gets a slot;
//! - past the budget of bytes, the requests holding more than the one that needs the bytes
//!   would then hold, the largest first, then the requests that came before it, the oldest
//!   first; if those do not hold enough, the one that needs them is refused.
//!
//! A push from GitHub therefore gets room at once, and keeps it while it is read unless the
//! whole bound of newer requests arrives meanwhile, or newer bodies smaller than it fill the
//! budget: a flood of large bodies gives way to it, however fast it comes.
//!
//! The intake owns what the bodies have read so far, so cutting a reader off frees its slot,
//! its bytes and its buffer at once, under the intake's lock, not when its task next runs: a
//! flood that keeps the runtime busy cannot make the bounds lag behind.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use std::time::Duration;
use tokio::sync::Notify;

/// How long a client may take to send the body, once it has room to be read. GitHub sends its
/// few kilobytes at once and gives up on a delivery not answered within 10 s, so a body still
/// incomplete by then is no delivery GitHub waits for: a slow sender holding a slot and memory.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Bodies read at once before their signature is checked. Memory is for the byte budget to
/// bound ([`MAX_UNVERIFIED_BYTES`]); this keeps the count bounded however many connections a
/// flood opens. It is high because past it the body read longest is cut off, whoever sent it: a
/// push from GitHub, read in milliseconds but longer on a runtime the flood keeps busy, is safe
/// from that while fewer bodies than this are being read (the `webhook_flood` benchmark, 500
/// slow connections reconnecting at once: no push lost at 512, 32 of 73 at 32).
pub const MAX_UNVERIFIED_REQUESTS: usize = 512;

/// Bytes the bodies not verified yet hold together: eight bodies at the 1 MiB limit, or hundreds
/// of pushes to a fleet repository (a few kilobytes each), and 1/64 of the agent pod's 512 MiB.
pub const MAX_UNVERIFIED_BYTES: usize = 8 * 1024 * 1024;

/// `Retry-After` of a `busy` answer, in seconds. Those cut off are the bodies read longest or the
/// biggest, and a newcomer gets room, so a retry has nothing to wait for but a second's pause.
pub const RETRY_AFTER_SECS: u64 = 1;

/// The bounds on bodies not verified yet, shared by every webhook request.
#[derive(Debug)]
pub(crate) struct Intake {
    max_requests: usize,
    max_bytes: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The readers, by arrival: oldest first.
    readers: BTreeMap<u64, Registered>,
    /// The bytes they hold together.
    bytes: usize,
    next: u64,
}

#[derive(Debug)]
struct Registered {
    body: Arc<Body>,
    /// Bytes of the budget it holds (what it has read).
    bytes: usize,
}

/// A reader's body so far, shared between the reader and the intake.
#[derive(Debug, Default)]
struct Body {
    /// `None` once cut off.
    read: Mutex<Option<Vec<u8>>>,
    /// Notified when cut off.
    cut: Notify,
}

impl Body {
    fn read(&self) -> MutexGuard<'_, Option<Vec<u8>>> {
        self.read
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// No room for this request's body.
#[derive(Debug)]
pub(crate) struct Busy;

impl Intake {
    /// Room for `requests` bodies at once, holding `bytes` bytes together.
    pub(crate) fn new(requests: usize, bytes: usize) -> Intake {
        Intake {
            max_requests: requests,
            max_bytes: bytes,
            state: Mutex::default(),
        }
    }

    /// Room for one more body: at once if the bound is not reached, else by cutting off the
    /// request that has been reading longest.
    pub(crate) fn admit(self: &Arc<Self>) -> Result<Reader, Busy> {
        let mut state = self.state();
        if self.max_requests == 0 {
            return Err(Busy);
        }
        while state.readers.len() >= self.max_requests {
            let Some((_, oldest)) = state.readers.pop_first() else {
                break;
            };
            state.cut(oldest);
        }
        let id = state.next;
        state.next += 1;
        let body = Arc::new(Body {
            read: Mutex::new(Some(Vec::new())),
            cut: Notify::new(),
        });
        state.readers.insert(
            id,
            Registered {
                body: body.clone(),
                bytes: 0,
            },
        );
        Ok(Reader {
            intake: self.clone(),
            id,
            body,
        })
    }

    /// How many bodies are being read.
    pub(crate) fn readers(&self) -> usize {
        self.state().readers.len()
    }

    /// How many bytes they hold.
    pub(crate) fn bytes(&self) -> usize {
        self.state().bytes
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    /// Frees what a reader (already out of the map) holds and tells it so.
    fn cut(&mut self, reader: Registered) {
        self.bytes -= reader.bytes;
        *reader.body.read() = None;
        reader.body.cut.notify_one();
    }

    /// Cuts off readers to free `need` bytes for reader `id`, which will then hold `holding`:
    /// first those holding more than that, the largest first (then the oldest); then those that
    /// came before it, the oldest first. Cuts none and answers false when all of them would not
    /// free enough.
    fn make_room(&mut self, id: u64, holding: usize, need: usize) -> bool {
        let mut larger: Vec<(u64, usize)> = self
            .readers
            .iter()
            .filter(|&(&other, r)| other != id && r.bytes > holding)
            .map(|(&other, r)| (other, r.bytes))
            .collect();
        larger.sort_by_key(|&(other, bytes)| (Reverse(bytes), other));
        let older = self
            .readers
            .range(..id)
            .filter(|(_, r)| r.bytes <= holding)
            .map(|(&other, r)| (other, r.bytes));
        let mut freed = 0;
        let mut victims = Vec::new();
        for (other, bytes) in larger.into_iter().chain(older) {
            if freed >= need {
                break;
            }
            freed += bytes;
            victims.push(other);
        }
        if freed < need {
            return false;
        }
        for other in victims {
            if let Some(r) = self.readers.remove(&other) {
                self.cut(r);
            }
        }
        true
    }
}

/// One request's room: its slot, and what it has read. Dropping it gives both back.
#[derive(Debug)]
pub(crate) struct Reader {
    intake: Arc<Intake>,
    id: u64,
    body: Arc<Body>,
}

impl Reader {
    /// Completes when another request has cut this one off.
    pub(crate) async fn cut_off(&self) {
        self.body.cut.notified().await;
    }

    /// Adds `data` to the body, taking its bytes from the budget, and cutting off bigger or older
    /// readers for them if need be.
    pub(crate) fn push(&mut self, data: &[u8]) -> Result<(), Busy> {
        let n = data.len();
        {
            let mut state = self.intake.state();
            let held = state.readers.get(&self.id).ok_or(Busy)?.bytes;
            let over = (state.bytes + n).saturating_sub(self.intake.max_bytes);
            if over > 0 && !state.make_room(self.id, held + n, over) {
                return Err(Busy);
            }
            state.bytes += n;
            state.readers.get_mut(&self.id).ok_or(Busy)?.bytes += n;
        }
        // Cut off since (the intake dropped the buffer): nothing is kept.
        let mut read = self.body.read();
        let body = read.as_mut().ok_or(Busy)?;
        // Grown exactly, so that the bytes taken are the bytes allocated (a large buffer is
        // grown in place by the allocator, not copied).
        body.reserve_exact(n);
        body.extend_from_slice(data);
        Ok(())
    }

    /// The whole body, its room given back.
    pub(crate) fn finish(self) -> Result<Vec<u8>, Busy> {
        let body = self.body.read().take().ok_or(Busy);
        drop(self);
        body
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let mut state = self.intake.state();
        if let Some(r) = state.readers.remove(&self.id) {
            state.bytes -= r.bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_newcomer_cuts_off_the_oldest_reader_and_its_buffer_goes_at_once() {
        let intake = Arc::new(Intake::new(2, 1 << 20));
        let mut first = intake.admit().unwrap();
        first.push(b"first").unwrap();
        let mut second = intake.admit().unwrap();
        second.push(b"second").unwrap();
        assert_eq!((intake.readers(), intake.bytes()), (2, 11));
        let third = intake.admit().unwrap();
        // Cut off, and its bytes freed, before its task even looks.
        assert_eq!((intake.readers(), intake.bytes()), (2, 6));
        first.cut_off().await;
        assert!(first.push(b"more").is_err());
        assert!(first.finish().is_err());
        assert_eq!(second.finish().unwrap(), b"second");
        drop(third);
        assert_eq!((intake.readers(), intake.bytes()), (0, 0));
    }

    #[test]
    fn bytes_go_from_bigger_bodies_to_smaller_ones() {
        let intake = Arc::new(Intake::new(4, 100));
        let mut big = intake.admit().unwrap();
        let mut small = intake.admit().unwrap();
        big.push(&[0; 60]).unwrap();
        small.push(&[0; 30]).unwrap();
        assert_eq!(intake.bytes(), 90);
        // The bigger body cannot cut the smaller one: it is refused itself.
        assert!(big.push(&[0; 20]).is_err());
        // The smaller one, at 45, still holds less than the bigger one: the bigger one goes.
        small.push(&[0; 15]).unwrap();
        assert_eq!((intake.readers(), intake.bytes()), (1, 45));
        assert!(big.push(&[0]).is_err());
        assert_eq!(small.finish().unwrap().len(), 45);
        assert_eq!((intake.readers(), intake.bytes()), (0, 0));
    }

    #[test]
    fn the_largest_holders_give_way_first_whatever_their_age() {
        let intake = Arc::new(Intake::new(4, 100));
        let mut small = intake.admit().unwrap();
        let mut large = intake.admit().unwrap();
        let mut new = intake.admit().unwrap();
        small.push(&[0; 10]).unwrap();
        large.push(&[0; 80]).unwrap();
        // 20 more for the newest: the larger holder goes, though the smaller one is older.
        new.push(&[0; 20]).unwrap();
        assert_eq!((intake.readers(), intake.bytes()), (2, 30));
        assert!(large.finish().is_err());
        assert_eq!(small.finish().unwrap().len(), 10);
    }

    #[test]
    fn a_newcomer_takes_bytes_from_older_smaller_bodies_when_no_bigger_one_holds_enough() {
        let intake = Arc::new(Intake::new(8, 100));
        let mut old: Vec<Reader> = (0..5).map(|_| intake.admit().unwrap()).collect();
        for r in &mut old {
            r.push(&[0; 20]).unwrap();
        }
        let mut new = intake.admit().unwrap();
        new.push(&[0; 30]).unwrap();
        // The two oldest went for it.
        assert_eq!((intake.readers(), intake.bytes()), (4, 90));
        assert!(old.remove(0).finish().is_err() && old.remove(0).finish().is_err());
        // An older body never takes bytes from a newer one its size or smaller.
        assert!(old[0].push(&[0; 11]).is_err());
    }

    #[test]
    fn a_body_larger_than_the_whole_budget_is_refused() {
        let intake = Arc::new(Intake::new(4, 100));
        let mut alone = intake.admit().unwrap();
        assert!(alone.push(&[0; 101]).is_err());
        assert_eq!(intake.bytes(), 0);
    }
}
