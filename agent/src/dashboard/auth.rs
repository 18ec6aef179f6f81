//! Who may see the dashboard the agent serves: whoever Kubernetes says may list ManagedClusters.
//!
//! The agent reads the whole fleet with its own ServiceAccount; without a check, anyone who
//! reaches the port would see it. So each request carries a Kubernetes bearer token (the
//! `Authorization` header, or the cookie the login form sets from a token pasted into it, as
//! the Kubernetes Dashboard does), which the agent hands to the API server: a TokenReview says
//! whose it is (any authenticator the cluster has: ServiceAccount tokens, OIDC, webhook), and a
//! SubjectAccessReview whether that user may `list managedclusters.capstan.dev` in
//! `capstan-system`. The agent's ServiceAccount needs `create` on `tokenreviews` and
//! `subjectaccessreviews` for this (`capstan install` grants it). Answers are kept for
//! [`CACHE_FOR`] by the token's SHA-256 (never the token), so a page's live updates do not
//! send two reviews each; a revoked token or binding stops working within that time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};

use crate::status::NAMESPACE;

/// How long a review's answer is kept.
pub const CACHE_FOR: Duration = Duration::from_secs(10);
/// The most answers kept (older ones are dropped first).
const CACHE_MAX: usize = 4096;

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

/// The most reviews in flight: requests with ever new tokens (someone trying them) must not
/// become a flood of reviews on the API server; past it a request is answered 503 at once.
pub const REVIEWS_IN_FLIGHT: usize = 8;

/// Asks the API server about tokens, keeping the answers a little while.
pub struct Reviewer {
    client: Client,
    cache: Mutex<HashMap<[u8; 32], (Instant, Verdict)>>,
    in_flight: tokio::sync::Semaphore,
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
        Reviewer {
            client,
            cache: Mutex::new(HashMap::new()),
            in_flight: tokio::sync::Semaphore::new(REVIEWS_IN_FLIGHT),
        }
    }

    /// Whose `token` is, and whether they may see the fleet. `Err`: the API server could not
    /// be asked.
    pub async fn review(&self, token: &str) -> Result<Verdict, ReviewError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        if let Some((at, v)) = self.lock().get(&key)
            && now.duration_since(*at) < CACHE_FOR
        {
            return Ok(v.clone());
        }
        let _permit = self
            .in_flight
            .try_acquire()
            .map_err(|_| ReviewError::Busy)?;
        let verdict = self.ask(token).await?;
        let mut cache = self.lock();
        if cache.len() >= CACHE_MAX {
            cache.retain(|_, (at, _)| now.duration_since(*at) < CACHE_FOR);
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
        }
        cache.insert(key, (now, verdict.clone()));
        Ok(verdict)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], (Instant, Verdict)>> {
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
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &tr)
            .await?;
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
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &sar)
            .await?;
        Ok(if answer.status.is_some_and(|s| s.allowed) {
            Verdict::Allowed(name)
        } else {
            Verdict::Forbidden(name)
        })
    }
}

/// The bearer token of a request: the `Authorization` header's, else the login cookie's.
pub fn token_of(headers: &axum::http::HeaderMap) -> Option<String> {
    if let Some(t) = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return Some(t.trim().to_string()).filter(|t| !t.is_empty());
    }
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| {
            kv.trim()
                .strip_prefix(&format!("{COOKIE}="))
                .map(str::to_string)
        })
        .filter(|t| !t.is_empty())
}

/// The login cookie's name.
pub const COOKIE: &str = "capstan_token";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_comes_from_the_header_or_the_cookie() {
        let mut h = axum::http::HeaderMap::new();
        assert_eq!(token_of(&h), None);
        h.insert("cookie", "a=b; capstan_token=tok1; c=d".parse().unwrap());
        assert_eq!(token_of(&h).as_deref(), Some("tok1"));
        h.insert("authorization", "Bearer tok2".parse().unwrap());
        assert_eq!(token_of(&h).as_deref(), Some("tok2"));
        h.insert("authorization", "Basic dXNlcjpwYXNz".parse().unwrap());
        assert_eq!(token_of(&h).as_deref(), Some("tok1"));
    }
}
