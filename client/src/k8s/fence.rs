//! The write fence of a replica that leads by Lease: one gate in front of every request its
//! client sends, shut the moment the replica can no longer be sure that it leads.
//!
//! Leader election alone does not keep two writers apart. A leader cut off from the API server
//! cannot renew its Lease; once the Lease runs out another replica takes it and writes, while the
//! old one, not knowing, may still hold a pass in flight and write as soon as the network heals
//! (old specs applied over new ones, the new leader's inventory overwritten). The election
//! (`capstan::leader`) therefore gives the leader a deadline shorter than the Lease: every renewal
//! that succeeds moves the fence's deadline to the renewal's start plus the renew deadline, and
//! a follower takes the Lease only after it has seen it unchanged for the whole lease duration
//! on its own clock. So the old leader's fence shuts before anyone else can lead.
//!
//! The fence is read at the moment each request is sent, not by a timer that could run late: a
//! request that would change something (create, update, patch, delete) after the deadline fails
//! at once without leaving the process. What never changes state still passes: reads and
//! watches, server-side dry runs (`dryRun=All`), and the review APIs (`SelfSubjectAccessReview`,
//! `TokenReview`, …), which create nothing. The Lease itself is renewed by a client without a
//! fence (it is how the fence opens again).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;

/// Why a request was refused at the fence.
#[derive(Debug, thiserror::Error)]
#[error(
    "refused {method} {path}: this replica does not hold the leader Lease (or has not renewed it \
     within its renew deadline), so another replica may be writing"
)]
pub struct Fenced {
    /// The request's method.
    pub method: Method,
    /// The request's path.
    pub path: String,
}

/// A deadline shared by the election and the fenced client: writes pass until it.
#[derive(Debug, Clone)]
pub struct Fence {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// What `deadline` counts from.
    base: Instant,
    /// Nanoseconds after `base` until which writes pass; 0: shut.
    deadline: AtomicU64,
}

impl Fence {
    /// A shut fence (a replica that does not lead yet).
    pub fn shut() -> Fence {
        Fence {
            inner: Arc::new(Inner {
                base: Instant::now(),
                deadline: AtomicU64::new(0),
            }),
        }
    }

    /// Lets writes pass until `until` (never shortens a later deadline already set).
    pub fn open_until(&self, until: Instant) {
        let nanos = until
            .checked_duration_since(self.inner.base)
            .unwrap_or_default()
            .as_nanos()
            .min(u64::MAX as u128) as u64;
        self.inner.deadline.fetch_max(nanos, Ordering::AcqRel);
    }

    /// Shuts the fence now, whatever its deadline.
    pub fn shut_now(&self) {
        self.inner.deadline.store(0, Ordering::Release);
    }

    /// Whether writes pass at `now`.
    pub fn is_open_at(&self, now: Instant) -> bool {
        let deadline = self.inner.deadline.load(Ordering::Acquire);
        deadline > 0 && self.inner.base + Duration::from_nanos(deadline) > now
    }

    /// Whether writes pass now.
    pub fn is_open(&self) -> bool {
        self.is_open_at(Instant::now())
    }

    /// When the fence shuts (`None`: shut already).
    pub fn deadline(&self) -> Option<Instant> {
        let d = self.inner.deadline.load(Ordering::Acquire);
        (d > 0).then(|| self.inner.base + Duration::from_nanos(d))
    }

    /// The same client with this fence in front of it.
    pub fn guard(&self, client: &Client) -> Client {
        let ns = client.default_namespace().to_string();
        Client::new(
            Guarded {
                client: client.clone(),
                fence: self.clone(),
            },
            ns,
        )
    }
}

/// Whether a request changes state: what the fence stops.
pub fn changes_state(method: &Method, path: &str, query: Option<&str>) -> bool {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return false;
    }
    if query.is_some_and(|q| q.split('&').any(|kv| kv == "dryRun=All")) {
        return false;
    }
    // The review APIs answer a question; POSTing one stores nothing.
    let reviews = [
        "/apis/authorization.k8s.io/",
        "/apis/authentication.k8s.io/",
    ];
    !(*method == Method::POST && reviews.iter().any(|p| path.starts_with(p)))
}

/// The service behind a fenced client: the checked request goes on to the real client.
#[derive(Clone)]
struct Guarded {
    client: Client,
    fence: Fence,
}

impl tower::Service<Request<Body>> for Guarded {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let uri = req.uri();
        if changes_state(req.method(), uri.path(), uri.query()) && !self.fence.is_open() {
            let err = Fenced {
                method: req.method().clone(),
                path: uri.path().to_string(),
            };
            tracing::warn!(error = %err, "write stopped at the fence");
            return Box::pin(async move { Err(kube::Error::Service(Box::new(err))) });
        }
        let client = self.client.clone();
        Box::pin(async move { client.send(req).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_pass_until_the_deadline_and_reads_always() {
        let f = Fence::shut();
        let now = Instant::now();
        assert!(
            !f.is_open_at(now),
            "a replica that does not lead writes nothing"
        );
        f.open_until(now + Duration::from_secs(4));
        assert!(f.is_open_at(now + Duration::from_secs(3)));
        assert!(!f.is_open_at(now + Duration::from_secs(4)));
        // A late renewal's deadline never moves an earlier-set later one back.
        f.open_until(now + Duration::from_secs(2));
        assert!(f.is_open_at(now + Duration::from_secs(3)));
        f.shut_now();
        assert!(!f.is_open_at(now));
        assert_eq!(f.deadline(), None);
    }

    #[test]
    fn what_the_fence_stops() {
        let p = "/apis/cluster.x-k8s.io/v1beta2/namespaces/a/clusters/c";
        for m in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(changes_state(&m, p, None), "{m}");
            assert!(
                changes_state(&m, p, Some("fieldManager=capstan&force=true")),
                "{m}"
            );
            assert!(!changes_state(
                &m,
                p,
                Some("fieldManager=capstan&dryRun=All")
            ));
        }
        assert!(!changes_state(&Method::GET, p, Some("watch=true")));
        let ssar = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
        assert!(!changes_state(&Method::POST, ssar, None));
        assert!(changes_state(&Method::DELETE, ssar, None));
        let events = "/api/v1/namespaces/capstan-system/events";
        assert!(changes_state(&Method::POST, events, None));
    }
}
