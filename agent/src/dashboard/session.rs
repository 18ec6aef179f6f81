//! Sign-in sessions: what a browser's cookie names, kept in the dashboard's memory.
//!
//! A cookie is sent to every port of its host (browsers do not isolate cookies by port, RFC 6265
//! §8.5), so any other page served on `127.0.0.1` — a tenant's application an admin
//! port-forwards — receives the dashboard's cookie. The cookie therefore holds no credential of
//! Kubernetes: only a random id (256 bits from the operating system's CSPRNG) of a session the
//! dashboard keeps here, with the token the user signed in with (the agent's, to review it again
//! on every request) or none (`capstan dashboard`'s, signed in with its per-run secret). A
//! session ends at the latest [`LIFETIME`] after sign-in, after [`IDLE`] without a request, at
//! sign-out (deleted here, so a copied cookie stops working too), or when its token is no longer
//! accepted. At most [`MAX`] sessions are kept, [`PER_USER`] of one user: past that the least
//! recently used goes. Ids are kept by their SHA-256, so neither a lookup's timing nor this
//! memory gives one away.
//!
//! The cookie ([`Cookie`]): `HttpOnly` (no script reads it), `SameSite=Strict` (no other site's
//! page sends it), `Path=/`, `Max-Age` the session's lifetime; and, when the dashboard is reached
//! over HTTPS, `Secure` with the `__Host-` prefix (never sent over plain HTTP, never set for a
//! wider domain).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, header};
use sha2::{Digest, Sha256};

/// A session's longest life, from sign-in.
pub const LIFETIME: Duration = Duration::from_secs(8 * 3600);
/// A session unused this long ends.
pub const IDLE: Duration = Duration::from_secs(3600);
/// The most sessions kept.
pub const MAX: usize = 1024;
/// The most sessions of one user kept.
pub const PER_USER: usize = 16;

/// How long sessions live and how many are kept.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// The longest life, from sign-in.
    pub lifetime: Duration,
    /// Unused this long, a session ends.
    pub idle: Duration,
    /// The most kept.
    pub max: usize,
    /// The most of one user kept.
    pub per_user: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            lifetime: LIFETIME,
            idle: IDLE,
            max: MAX,
            per_user: PER_USER,
        }
    }
}

/// One signed-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    /// Who signed in (the name the API server gave, or `capstan dashboard`'s own).
    pub user: String,
    /// The bearer token signed in with, reviewed again on every request (the agent's).
    pub token: Option<String>,
    created: Instant,
    seen: Instant,
}

/// Why no session could be made.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The operating system gave no random bytes.
    #[error("no random bytes for a session id: {0}")]
    Random(getrandom::Error),
}

/// The sessions, by the SHA-256 of their id.
pub struct Sessions {
    limits: SessionLimits,
    map: Mutex<HashMap<[u8; 32], Session>>,
}

/// `n` random bytes from the operating system's CSPRNG, in hex.
pub fn random_hex<const N: usize>() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes)?;
    Ok(hex::encode(bytes))
}

fn key(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl Sessions {
    /// No sessions yet; they live and are kept as `limits` say.
    pub fn new(limits: SessionLimits) -> Sessions {
        Sessions {
            limits,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// How long sessions live.
    pub fn limits(&self) -> SessionLimits {
        self.limits
    }

    /// A new session of `user` (signed in with `token`, if any); its id, 64 hex digits.
    pub fn create(&self, user: &str, token: Option<String>) -> Result<String, SessionError> {
        self.create_at(user, token, Instant::now())
    }

    fn create_at(
        &self,
        user: &str,
        token: Option<String>,
        now: Instant,
    ) -> Result<String, SessionError> {
        let id = random_hex::<32>().map_err(SessionError::Random)?;
        let mut map = self.lock();
        self.expire(&mut map, now);
        // Room for one more of this user, then one more of anyone: the least recently used
        // goes.
        let per_user = self.limits.per_user.max(1);
        while map.values().filter(|s| s.user == user).count() >= per_user
            && evict(&mut map, |s| s.user == user)
        {}
        while map.len() >= self.limits.max.max(1) && evict(&mut map, |_| true) {}
        map.insert(
            key(&id),
            Session {
                user: user.to_string(),
                token,
                created: now,
                seen: now,
            },
        );
        Ok(id)
    }

    /// The live session `id` names, marked used now.
    pub fn get(&self, id: &str) -> Option<Session> {
        self.get_at(id, Instant::now(), true)
    }

    /// The live session `id` names, not marked used (an open event stream checking it still
    /// is).
    pub fn peek(&self, id: &str) -> Option<Session> {
        self.get_at(id, Instant::now(), false)
    }

    fn get_at(&self, id: &str, now: Instant, touch: bool) -> Option<Session> {
        let k = key(id);
        let mut map = self.lock();
        let s = map.get_mut(&k)?;
        if !self.live(s, now) {
            map.remove(&k);
            return None;
        }
        if touch {
            s.seen = now;
        }
        Some(s.clone())
    }

    /// Ends session `id` (signed out, its token refused); whether there was one.
    pub fn end(&self, id: &str) -> bool {
        self.lock().remove(&key(id)).is_some()
    }

    /// How many sessions are kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn live(&self, s: &Session, now: Instant) -> bool {
        now.saturating_duration_since(s.created) < self.limits.lifetime
            && now.saturating_duration_since(s.seen) < self.limits.idle
    }

    fn expire(&self, map: &mut HashMap<[u8; 32], Session>, now: Instant) {
        map.retain(|_, s| self.live(s, now));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Session>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Removes the least recently used session of those `which` picks; whether there was one.
fn evict(map: &mut HashMap<[u8; 32], Session>, which: impl Fn(&Session) -> bool) -> bool {
    let oldest = map
        .iter()
        .filter(|(_, s)| which(s))
        .min_by_key(|(_, s)| s.seen)
        .map(|(k, _)| *k);
    oldest.is_some_and(|k| map.remove(&k).is_some())
}

/// The session cookie of one dashboard: its name and whether it is `Secure`.
#[derive(Debug, Clone)]
pub struct Cookie {
    name: String,
    secure: bool,
}

impl Cookie {
    /// The agent's cookie: `__Host-capstan_session`, `Secure`, when it is reached over HTTPS;
    /// else `capstan_session`.
    pub fn agent(https: bool) -> Cookie {
        Cookie {
            name: if https {
                "__Host-capstan_session".into()
            } else {
                "capstan_session".into()
            },
            secure: https,
        }
    }

    /// `capstan dashboard`'s on loopback port `port`: `capstan_local_<port>` (plain HTTP; the
    /// port in the name keeps two runs on two ports from overwriting each other's).
    pub fn local(port: u16) -> Cookie {
        Cookie {
            name: format!("capstan_local_{port}"),
            secure: false,
        }
    }

    /// The cookie's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `Set-Cookie` for session `id`, living `max_age`.
    pub fn set(&self, id: &str, max_age: Duration) -> HeaderValue {
        self.header(id, max_age.as_secs())
    }

    /// `Set-Cookie` that deletes it.
    pub fn clear(&self) -> HeaderValue {
        self.header("", 0)
    }

    fn header(&self, value: &str, max_age: u64) -> HeaderValue {
        let secure = if self.secure { "; Secure" } else { "" };
        let text = format!(
            "{}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}",
            self.name
        );
        // The name is ours and the value hex digits: always a valid header.
        HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    /// The session id a request's cookies carry under this name (64 hex digits, else none).
    pub fn of(&self, headers: &HeaderMap) -> Option<String> {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| *k == self.name)
            .map(|(_, v)| v.trim().to_string())
            .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> SessionLimits {
        SessionLimits {
            lifetime: Duration::from_secs(100),
            idle: Duration::from_secs(30),
            max: 4,
            per_user: 2,
        }
    }

    #[test]
    fn ids_are_random_and_long() {
        let s = Sessions::new(limits());
        let a = s.create("a", None).unwrap();
        let b = s.create("a", None).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 64, "256 bits");
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(s.get(&a).unwrap().user, "a");
        // Another id, or one a digit off, names nothing.
        let mut off = a.clone().into_bytes();
        off[0] = if off[0] == b'0' { b'1' } else { b'0' };
        assert!(s.get(&String::from_utf8(off).unwrap()).is_none());
    }

    #[test]
    fn a_session_ends_when_idle_after_its_lifetime_and_at_sign_out() {
        let s = Sessions::new(limits());
        let t0 = Instant::now();
        let id = s.create_at("a", Some("tok".into()), t0).unwrap();
        // Used every 20 s it stays, until its lifetime is over, however used.
        for n in 1..5 {
            let at = t0 + Duration::from_secs(20 * n);
            assert_eq!(
                s.get_at(&id, at, true).and_then(|x| x.token).as_deref(),
                Some("tok"),
                "at {n}"
            );
        }
        assert!(s.get_at(&id, t0 + Duration::from_secs(100), true).is_none());
        assert!(s.is_empty(), "an ended session is dropped");
        // Unused for its idle time, it ends; peeking does not keep it alive.
        let id = s.create_at("a", None, t0).unwrap();
        assert!(s.get_at(&id, t0 + Duration::from_secs(29), false).is_some());
        assert!(s.get_at(&id, t0 + Duration::from_secs(30), true).is_none());
        // Signed out, it is gone here, whoever holds a copy of the id.
        let id = s.create("a", None).unwrap();
        assert!(s.end(&id));
        assert!(s.get(&id).is_none());
        assert!(!s.end(&id));
    }

    #[test]
    fn sessions_are_bounded_in_all_and_per_user() {
        let s = Sessions::new(limits());
        let t0 = Instant::now();
        let at = |n| t0 + Duration::from_secs(n);
        let a1 = s.create_at("a", None, at(0)).unwrap();
        let a2 = s.create_at("a", None, at(1)).unwrap();
        // One user signing in again and again evicts only their own oldest session.
        let b1 = s.create_at("b", None, at(2)).unwrap();
        let a3 = s.create_at("a", None, at(3)).unwrap();
        assert!(s.get_at(&a1, at(4), false).is_none());
        for id in [&a2, &b1, &a3] {
            assert!(s.get_at(id, at(4), false).is_some());
        }
        // Past the bound of all, the least recently used goes.
        s.get_at(&a2, at(5), true);
        let c1 = s.create_at("c", None, at(6)).unwrap();
        let d1 = s.create_at("d", None, at(7)).unwrap();
        assert_eq!(s.len(), 4);
        assert!(
            s.get_at(&b1, at(8), false).is_none(),
            "b1 was used least recently"
        );
        for id in [&a2, &c1, &d1] {
            assert!(s.get_at(id, at(8), false).is_some());
        }
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_over_https() {
        let plain = Cookie::agent(false);
        assert_eq!(
            plain.set(&"ab".repeat(32), LIFETIME),
            format!(
                "capstan_session={}; Path=/; Max-Age=28800; HttpOnly; SameSite=Strict",
                "ab".repeat(32)
            )
            .as_str()
        );
        let tls = Cookie::agent(true);
        assert_eq!(
            tls.set(&"ab".repeat(32), LIFETIME),
            format!(
                "__Host-capstan_session={}; Path=/; Max-Age=28800; HttpOnly; SameSite=Strict; Secure",
                "ab".repeat(32)
            )
            .as_str()
        );
        assert_eq!(
            tls.clear(),
            "__Host-capstan_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict; Secure"
        );
        assert_eq!(Cookie::local(8480).name(), "capstan_local_8480");
    }

    #[test]
    fn only_a_well_formed_id_is_read_from_the_cookies() {
        let c = Cookie::agent(false);
        let id = "0f".repeat(32);
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            format!("capstan_session_x=1; capstan_session={id}; other=2")
                .parse()
                .unwrap(),
        );
        assert_eq!(c.of(&h).as_deref(), Some(id.as_str()));
        // The secure cookie's name is another.
        assert_eq!(Cookie::agent(true).of(&h), None);
        for bad in [
            "capstan_session=short",
            "capstan_session=",
            &format!("capstan_session={id}0"),
            &format!("capstan_session={}", "zz".repeat(32)),
            // A token as the old cookie held it is no session.
            "capstan_token=eyJhbGciOiJSUzI1NiJ9.e30.sig",
        ] {
            h.insert(header::COOKIE, bad.parse().unwrap());
            assert_eq!(c.of(&h), None, "{bad}");
        }
    }
}
