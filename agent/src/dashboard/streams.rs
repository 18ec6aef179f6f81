//! The bound on open live-update streams (`GET /events`): each holds a connection and a task for
//! as long as a page is open, so their number is capped — [`TOTAL`] in all (more: 503) and
//! [`PER_USER`] of one user (more: 429), so that one user, or one stolen session, cannot take
//! them all. A browser holds one per open page (and over HTTP/1.1 at most six connections to a
//! host at all). A stream gives its place back when it ends: the page closed, or its session
//! ended.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The most streams open at once.
pub const TOTAL: usize = 256;
/// The most streams of one user open at once.
pub const PER_USER: usize = 32;

/// Why no stream may open now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    /// [`TOTAL`] streams are open.
    #[error("{0} live-update streams are open; try again later")]
    Everyone(usize),
    /// This user has [`PER_USER`] open.
    #[error("you have {0} live-update streams open; close a page")]
    User(usize),
}

/// The streams open, in all and by user.
pub struct Streams {
    total: Arc<Semaphore>,
    max_total: usize,
    per_user: usize,
    users: Arc<Mutex<HashMap<String, usize>>>,
}

/// One open stream's place; given back when dropped.
pub struct Place {
    _total: OwnedSemaphorePermit,
    user: String,
    users: Arc<Mutex<HashMap<String, usize>>>,
}

impl Streams {
    /// At most `total` streams, `per_user` of one user.
    pub fn new(total: usize, per_user: usize) -> Streams {
        Streams {
            total: Arc::new(Semaphore::new(total)),
            max_total: total,
            per_user,
            users: Arc::default(),
        }
    }

    /// A place for one more stream of `user`.
    pub fn open(&self, user: &str) -> Result<Place, Full> {
        let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
        let n = users.get(user).copied().unwrap_or(0);
        if n >= self.per_user {
            return Err(Full::User(self.per_user));
        }
        let permit = self
            .total
            .clone()
            .try_acquire_owned()
            .map_err(|_| Full::Everyone(self.max_total))?;
        users.insert(user.to_string(), n + 1);
        Ok(Place {
            _total: permit,
            user: user.to_string(),
            users: self.users.clone(),
        })
    }

    /// How many are open.
    pub fn open_now(&self) -> usize {
        self.max_total - self.total.available_permits()
    }
}

impl Default for Streams {
    fn default() -> Self {
        Streams::new(TOTAL, PER_USER)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = users.get_mut(&self.user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                users.remove(&self.user);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_bounded_per_user_and_in_all_and_given_back() {
        let s = Streams::new(3, 2);
        let a1 = s.open("a").unwrap();
        let _a2 = s.open("a").unwrap();
        assert_eq!(s.open("a").err(), Some(Full::User(2)));
        let _b1 = s.open("b").unwrap();
        assert_eq!(s.open("c").err(), Some(Full::Everyone(3)));
        assert_eq!(s.open_now(), 3);
        drop(a1);
        assert_eq!(s.open_now(), 2);
        let _c1 = s.open("c").unwrap();
        assert_eq!(s.open("a").err(), Some(Full::Everyone(3)));
    }
}
