//! Whether a `403 Forbidden` is the API server's answer, or an accident of its start.
//!
//! kube-apiserver serves requests before it is ready. Until its RBAC informers have synced, its
//! authorizer finds no binding and refuses what it will allow a moment later
//! (kubernetes/kubernetes#121635). A management cluster that upgrades itself restarts its API
//! servers under the agent, so the agent meets exactly that: CI once saw a kind the agent reads
//! every pass refused right after the restart, and the management cluster failed "forbidden".
//!
//! So a refusal is believed only when the API server then says it is ready (`/readyz`, which
//! waits for its informers) **and** an access review asked after that still refuses. The second
//! question closes the gap between the refusal and the readiness check: a server that became
//! ready in between answers it with its synced authorizer. Anything else is not an answer; the
//! caller treats the refusal as a failed request and tries again.
//!
//! Costs nothing while the agent is allowed: the two requests are made only after a 403.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::Api;
use kube::{Client, Error};

/// What a 403 turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The API server is ready and still refuses: the agent's rights do not reach the resource.
    Stands,
    /// Not an answer (why): the API server is not ready or would not say, or it now allows the
    /// request.
    Unsure(String),
}

/// What the agent was refused: `verbs` on a resource (`group` "" for the core group).
#[derive(Debug, Clone)]
pub struct Refused {
    pub group: String,
    /// The resource's plural, as in RBAC rules.
    pub resource: String,
    /// The namespace asked about (`None`: all of them, or a cluster-scoped resource).
    pub namespace: Option<String>,
    pub verbs: &'static [&'static str],
}

/// The verbs a watch needs: its list, then its watch.
pub const WATCH: &[&str] = &["list", "watch"];

/// The verb a list needs.
pub const LIST: &[&str] = &["list"];

impl Refused {
    /// The refusal of `verbs` on `resource` in `group`.
    pub fn new(group: &str, resource: &str, verbs: &'static [&'static str]) -> Refused {
        Refused {
            group: group.to_string(),
            resource: resource.to_string(),
            namespace: None,
            verbs,
        }
    }

    /// The same refusal, in one namespace.
    pub fn in_namespace(mut self, namespace: &str) -> Refused {
        self.namespace = Some(namespace.to_string());
        self
    }

    /// The API server's message when `e` is a 403 it confirms ([`Refused::confirm`]); `None`
    /// for any other error and for a refusal it does not confirm (both failed requests).
    pub async fn confirmed(&self, client: &Client, e: &Error) -> Option<String> {
        let Error::Api(status) = e else { return None };
        if status.code != 403 {
            return None;
        }
        match self.confirm(client).await {
            Refusal::Stands => Some(status.message.clone()),
            Refusal::Unsure(why) => {
                tracing::warn!(resource = %self.resource, %why, "a refusal the API server did not confirm");
                None
            }
        }
    }

    /// Asks the API server whether it meant it ([module docs](self)).
    pub async fn confirm(&self, client: &Client) -> Refusal {
        if let Err(e) = ready(client).await {
            return Refusal::Unsure(format!("the API server is not ready ({e})"));
        }
        let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
        for verb in self.verbs {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(self.group.clone()),
                        resource: Some(self.resource.clone()),
                        namespace: self.namespace.clone(),
                        verb: Some(verb.to_string()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer = crate::write::review(&reviews, &review).await;
            match answer.map(|r| r.status.map(|s| s.allowed)) {
                Ok(Some(true)) => {}
                Ok(Some(false)) => return Refusal::Stands,
                Ok(None) => return Refusal::Unsure("an access review came back empty".into()),
                Err(e) => return Refusal::Unsure(format!("an access review failed ({e})")),
            }
        }
        Refusal::Unsure(format!(
            "asked again, the API server allows {} on {}",
            self.verbs.join(" and "),
            self.resource
        ))
    }
}

/// `Ok` when the API server's `/readyz` answers 200.
async fn ready(client: &Client) -> Result<(), Error> {
    let request = http::Request::get("/readyz")
        .body(Vec::new())
        .expect("a static request");
    client.request_text(request).await.map(drop)
}
