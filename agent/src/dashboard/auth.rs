//! Who may see the dashboard the agent serves: whoever Kubernetes says may list ManagedClusters.
//!
//! The agent reads the whole fleet with its own ServiceAccount; without a check, anyone who
//! reaches the port would see it. So each request carries a Kubernetes bearer token (the
//! `Authorization` header), or the id of a sign-in session the agent keeps in its memory with
//! the token pasted into the sign-in form ([`super::session`]); the agent hands the token to the
//! API server: a TokenReview says whose it is (any authenticator the cluster has:
//! ServiceAccount tokens, OIDC, webhook), and a SubjectAccessReview whether that user may `list
//! managedclusters.capstan.dev` in `capstan-system`. The agent's ServiceAccount needs `create`
//! on `tokenreviews` and `subjectaccessreviews` for this (`capstan install` grants it).
//!
//! Answers are kept for [`CACHE_FOR`] by the token's SHA-256 (never the token), so a page's live
//! updates do not send two reviews each; a revoked token or binding stops working within that
//! time. Anyone can send tokens, so the answers are kept in two bounded maps: the tokens allowed
//! in, and everything else. A flood of made-up tokens fills only the second (emptied when full),
//! never evicting an allowed answer; and its reviews share [`REVIEWS_IN_FLIGHT`] permits of their
//! own, while a token allowed before is reviewed again with [`KNOWN_IN_FLIGHT`] others that the
//! flood cannot take.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::Api;
use sha2::{Digest, Sha256};

use crate::status::NAMESPACE;

/// How long a review's answer is kept.
pub const CACHE_FOR: Duration = Duration::from_secs(10);
/// The most answers kept of each kind, allowed and not (the oldest allowed goes first; the
/// others are all dropped at once).
pub const CACHE_MAX: usize = 4096;

/// What the reviews said about a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The user may see the fleet.
    Allowed(String),
    /// Not a valid token.
    Unauthenticated,
    /// A valid token whose user may not list ManagedClusters.
    Forbidden(String),
}

/// The most reviews in flight of tokens not allowed before: requests with ever new tokens
/// (someone trying them) must not become a flood of reviews on the API server; past it such a
/// request is answered 503 at once.
pub const REVIEWS_IN_FLIGHT: usize = 8;
/// The most reviews in flight of tokens allowed before (their answer expired): a permit pool of
/// their own, so that a flood of unknown tokens does not lock out the users signed in.
pub const KNOWN_IN_FLIGHT: usize = 8;

/// How a [`Reviewer`] keeps its answers.
#[derive(Debug, Clone, Copy)]
pub struct ReviewLimits {
    /// How long an answer is kept.
    pub cache_for: Duration,
    /// The most answers kept of each kind.
    pub cache_max: usize,
}

impl Default for ReviewLimits {
    fn default() -> Self {
        ReviewLimits {
            cache_for: CACHE_FOR,
            cache_max: CACHE_MAX,
        }
    }
}

/// The answers kept, by the token's SHA-256.
#[derive(Default)]
struct Cache {
    /// Tokens the API server allowed in: when, and whose. Only a token that passed both reviews
    /// gets here, so no one without one can evict these.
    allowed: HashMap<[u8; 32], (Instant, String)>,
    /// Every other answer: not a token, or a user without the right.
    refused: HashMap<[u8; 32], (Instant, Verdict)>,
}

/// Asks the API server about tokens, keeping the answers a little while.
pub struct Reviewer {
    client: Client,
    limits: ReviewLimits,
    cache: Mutex<Cache>,
    unknown: tokio::sync::Semaphore,
    known: tokio::sync::Semaphore,
}

/// Why a token could not be reviewed.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The API server's answer was an error.
    #[error("reviewing a token: {0}")]
    Api(#[from] kube::Error),
    /// Too many reviews in flight already.
    #[error("{REVIEWS_IN_FLIGHT} token reviews are in flight already")]
    Busy,
}

impl Reviewer {
    /// Reviews with `client` (the agent's own, unfenced or fenced: reviews change nothing).
    pub fn new(client: Client) -> Reviewer {
        Reviewer::with_limits(client, ReviewLimits::default())
    }

    /// As [`Reviewer::new`], keeping answers as `limits` say.
    pub fn with_limits(client: Client, limits: ReviewLimits) -> Reviewer {
        Reviewer {
            client,
            limits,
            cache: Mutex::new(Cache::default()),
            unknown: tokio::sync::Semaphore::new(REVIEWS_IN_FLIGHT),
            known: tokio::sync::Semaphore::new(KNOWN_IN_FLIGHT),
        }
    }

    /// Whose `token` is, and whether they may see the fleet. `Err`: the API server could not
    /// be asked.
    pub async fn review(&self, token: &str) -> Result<Verdict, ReviewError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        let fresh = |at: &Instant| now.duration_since(*at) < self.limits.cache_for;
        let known = {
            let cache = self.lock();
            match cache.allowed.get(&key) {
                Some((at, user)) if fresh(at) => return Ok(Verdict::Allowed(user.clone())),
                Some(_) => true,
                None => {
                    if let Some((at, v)) = cache.refused.get(&key)
                        && fresh(at)
                    {
                        return Ok(v.clone());
                    }
                    false
                }
            }
        };
        let _permit = self.permit(known)?;
        let verdict = self.ask(token).await?;
        self.keep(key, now, &verdict);
        Ok(verdict)
    }

    /// A permit to ask the API server: from the pool of tokens allowed before when `known`.
    fn permit(&self, known: bool) -> Result<tokio::sync::SemaphorePermit<'_>, ReviewError> {
        let pool = if known { &self.known } else { &self.unknown };
        pool.try_acquire().map_err(|_| ReviewError::Busy)
    }

    /// Keeps an answer got at `now`.
    fn keep(&self, key: [u8; 32], now: Instant, verdict: &Verdict) {
        let max = self.limits.cache_max.max(1);
        let mut cache = self.lock();
        match verdict {
            Verdict::Allowed(user) => {
                cache.refused.remove(&key);
                if cache.allowed.len() >= max && !cache.allowed.contains_key(&key) {
                    // The oldest answer goes: a token not used for longest.
                    if let Some(oldest) = cache
                        .allowed
                        .iter()
                        .min_by_key(|(_, (at, _))| *at)
                        .map(|(k, _)| *k)
                    {
                        cache.allowed.remove(&oldest);
                    }
                }
                cache.allowed.insert(key, (now, user.clone()));
            }
            other => {
                cache.allowed.remove(&key);
                if cache.refused.len() >= max {
                    let cache_for = self.limits.cache_for;
                    cache
                        .refused
                        .retain(|_, (at, _)| now.duration_since(*at) < cache_for);
                    if cache.refused.len() >= max {
                        cache.refused.clear();
                    }
                }
                cache.refused.insert(key, (now, other.clone()));
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn ask(&self, token: &str) -> Result<Verdict, kube::Error> {
        let tr = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = crate::write::review(&Api::all(self.client.clone()), &tr).await?;
        let Some(status) = answer.status.filter(|s| s.authenticated == Some(true)) else {
            return Ok(Verdict::Unauthenticated);
        };
        let user = status.user.unwrap_or_default();
        let name = user.username.clone().unwrap_or_default();
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                resource_attributes: Some(ResourceAttributes {
                    group: Some("capstan.dev".into()),
                    resource: Some("managedclusters".into()),
                    verb: Some("list".into()),
                    namespace: Some(NAMESPACE.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = crate::write::review(&Api::all(self.client.clone()), &sar).await?;
        Ok(if answer.status.is_some_and(|s| s.allowed) {
            Verdict::Allowed(name)
        } else {
            Verdict::Forbidden(name)
        })
    }
}

/// The bearer token of a request's `Authorization` header.
pub fn token_of(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_comes_from_the_header_only() {
        let mut h = axum::http::HeaderMap::new();
        assert_eq!(token_of(&h), None);
        // A cookie holds a session's id, never a token: one named as the old cookie was is
        // no credential.
        h.insert("cookie", "a=b; capstan_token=tok1; c=d".parse().unwrap());
        assert_eq!(token_of(&h), None);
        h.insert("authorization", "Bearer tok2".parse().unwrap());
        assert_eq!(token_of(&h).as_deref(), Some("tok2"));
        h.insert("authorization", "Basic dXNlcjpwYXNz".parse().unwrap());
        assert_eq!(token_of(&h), None);
        h.insert("authorization", "Bearer   ".parse().unwrap());
        assert_eq!(token_of(&h), None);
    }

    /// No API server is asked here: the reviewer's client points nowhere.
    fn reviewer(limits: ReviewLimits) -> Reviewer {
        capstan_client::install_crypto_provider();
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        Reviewer::with_limits(Client::try_from(config).unwrap(), limits)
    }

    #[tokio::test]
    async fn reviews_of_unknown_tokens_cannot_take_the_permits_of_known_ones() {
        let r = reviewer(ReviewLimits::default());
        // A flood of unknown tokens holds every permit of its pool.
        let flood: Vec<_> = (0..REVIEWS_IN_FLIGHT)
            .map(|_| r.permit(false).unwrap())
            .collect();
        assert!(matches!(r.permit(false), Err(ReviewError::Busy)));
        // A token allowed before is still reviewed, up to its own pool.
        let known: Vec<_> = (0..KNOWN_IN_FLIGHT)
            .map(|_| r.permit(true).unwrap())
            .collect();
        assert!(matches!(r.permit(true), Err(ReviewError::Busy)));
        drop(flood);
        assert!(r.permit(false).is_ok());
        drop(known);
    }

    #[tokio::test]
    async fn refused_answers_never_evict_an_allowed_one() {
        let r = reviewer(ReviewLimits {
            cache_for: Duration::from_secs(3600),
            cache_max: 8,
        });
        let now = Instant::now();
        let key = |n: u32| -> [u8; 32] { Sha256::digest(n.to_be_bytes()).into() };
        r.keep(key(0), now, &Verdict::Allowed("admin".into()));
        for n in 1..1000 {
            r.keep(key(n), now, &Verdict::Unauthenticated);
        }
        for n in 1000..1100 {
            r.keep(key(n), now, &Verdict::Forbidden("nobody".into()));
        }
        let cache = r.lock();
        assert_eq!(
            cache.allowed.get(&key(0)).map(|(_, u)| u.as_str()),
            Some("admin")
        );
        assert!(cache.refused.len() <= 8, "bounded: {}", cache.refused.len());
        drop(cache);
        // Allowed answers are bounded too: the oldest goes first.
        for n in 2000..2010 {
            r.keep(
                key(n),
                now + Duration::from_secs(n.into()),
                &Verdict::Allowed(format!("u{n}")),
            );
        }
        let cache = r.lock();
        assert_eq!(cache.allowed.len(), 8);
        assert!(!cache.allowed.contains_key(&key(0)));
        assert!(cache.allowed.contains_key(&key(2009)));
    }
}
