//! Whether capstan's GitHub credentials could push to the repository whose branch it applies.
//!
//! Why: capstan applies whatever reaches the followed branch to the management cluster, which
//! holds every cluster's credentials. Its GitHub credentials need to comment, set commit
//! statuses and read; a token that can also push is a way around every review the branch
//! protection asks for, held by a long-running process. capstan cannot take the right away,
//! but it can say so, once at start, where an admin looks: a warning in the log and the
//! `capstan_github_push_access` metric (a state set an alert can match: `access="granted"`),
//! rather than a status condition or an Event that would belong to no cluster (and an Event
//! expires after an hour).
//!
//! What GitHub lets a client observe, without trying a write:
//!
//! - a classic token (or an OAuth token) shows its scopes in every answer's `X-OAuth-Scopes`;
//!   it can push when it holds `repo` (or `public_repo` for a public repository) and its user
//!   may push: `GET /repos/{owner}/{repo}` answers `permissions.push` (or `maintain`, `admin`)
//!   for the authenticated user. Verdict: [`PushAccess::Granted`] or [`PushAccess::None`].
//! - a fine-grained personal access token has no scopes header, and GitHub shows its own
//!   permissions nowhere; the repository's `permissions` are its user's. A token never exceeds
//!   its user, so a user who may not push means a token that cannot
//!   ([`PushAccess::None`]); a user who may means a token that may ([`PushAccess::Possible`]):
//!   the admin must check that its Contents permission is read-only.
//! - a GitHub App: `GET /app/installations/{id}` (with the App's JWT) answers the
//!   installation's permissions; `contents: write` pushes ([`PushAccess::Granted`]). Every
//!   permission beyond what capstan uses is listed too ([`Access::excess`]).
//! - an installation token given as a token: the repository's answer carries no permissions
//!   for it, and nothing else tells: [`PushAccess::Unknown`].
//!
//! Branch protection or a ruleset may still refuse a push to the followed branch; the warning
//! speaks of the right the credentials hold, which they should not hold at all.

use std::collections::BTreeMap;
use std::sync::Arc;

use http::Method;
use serde_json::Value;
use tokio::task::JoinHandle;

use super::{Auth, GitHub, GitHubError};
use crate::metrics::Metrics;

/// What the credentials may do to the repository's branches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PushAccess {
    /// They can push.
    Granted,
    /// Their user can push, and the token's own permissions are not shown (fine-grained).
    Possible,
    /// They cannot.
    None,
    /// Nothing tells (or GitHub could not be asked).
    Unknown,
}

impl PushAccess {
    /// Every verdict as the metric's label says it.
    pub const LABELS: [&'static str; 4] = [
        PushAccess::Granted.as_str(),
        PushAccess::Possible.as_str(),
        PushAccess::None.as_str(),
        PushAccess::Unknown.as_str(),
    ];

    /// As the metric's label says it.
    pub const fn as_str(self) -> &'static str {
        match self {
            PushAccess::Granted => "granted",
            PushAccess::Possible => "possible",
            PushAccess::None => "none",
            PushAccess::Unknown => "unknown",
        }
    }
}

/// The verdict, why, and what else the credentials hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// Whether they can push.
    pub push: PushAccess,
    /// What GitHub said that led to it.
    pub because: String,
    /// A GitHub App's permissions beyond what capstan uses (`administration: write`, …).
    pub excess: Vec<String>,
}

/// What capstan uses of a GitHub App installation: reading the repository and its contents,
/// pull requests (comments, listing, opening) and commit statuses.
pub const NEEDED: &[(&str, &str)] = &[
    ("metadata", "read"),
    ("contents", "read"),
    ("pull_requests", "write"),
    ("statuses", "write"),
];

fn level(l: &str) -> u8 {
    match l {
        "read" => 1,
        "write" => 2,
        "admin" => 3,
        _ => 4,
    }
}

/// An installation's permissions (`{"contents": "write", …}`) beyond [`NEEDED`].
pub fn excess(permissions: &BTreeMap<String, String>) -> Vec<String> {
    permissions
        .iter()
        .filter(|(name, l)| {
            NEEDED
                .iter()
                .find(|(n, _)| n == name)
                .is_none_or(|(_, needed)| level(l) > level(needed))
        })
        .map(|(name, l)| format!("{name}: {l}"))
        .collect()
}

/// The verdict for a token from the repository's answer and its `X-OAuth-Scopes` header.
pub fn token_verdict(repo: &Value, scopes: Option<&str>) -> (PushAccess, String) {
    let Some(perms) = repo.get("permissions").filter(|p| p.is_object()) else {
        return (
            PushAccess::Unknown,
            "GitHub shows no permissions for these credentials (an installation token?)".into(),
        );
    };
    let flag = |k: &str| perms.get(k).and_then(Value::as_bool).unwrap_or(false);
    let role = ["admin", "maintain", "push"].into_iter().find(|k| flag(k));
    let Some(role) = role else {
        return (
            PushAccess::None,
            "the token's user may not push to the repository".into(),
        );
    };
    match scopes {
        Some(scopes) => {
            let scopes: Vec<&str> = scopes.split(',').map(str::trim).collect();
            let private = repo.get("private").and_then(Value::as_bool).unwrap_or(true);
            let writes = scopes.contains(&"repo") || (!private && scopes.contains(&"public_repo"));
            if writes {
                (
                    PushAccess::Granted,
                    format!(
                        "a classic token with scopes {} whose user has {role} permission",
                        scopes.join(", ")
                    ),
                )
            } else {
                (
                    PushAccess::None,
                    format!(
                        "a classic token without the repo scope (scopes: {})",
                        scopes.join(", ")
                    ),
                )
            }
        }
        None => (
            PushAccess::Possible,
            format!(
                "the token's user has {role} permission and GitHub does not show a fine-grained token's own permissions"
            ),
        ),
    }
}

impl GitHub {
    /// Whether these credentials could push to the repository (see the module's overview).
    pub async fn push_access(&self) -> Result<Access, GitHubError> {
        match &self.auth {
            Auth::Token(_) => {
                let (repo, headers) = self
                    .exchange(
                        "read the repository",
                        Method::GET,
                        &format!("/repos/{}/{}", self.owner, self.name),
                        None,
                    )
                    .await?;
                let scopes = headers.get("x-oauth-scopes").and_then(|v| v.to_str().ok());
                let (push, because) = token_verdict(&repo, scopes);
                Ok(Access {
                    push,
                    because,
                    excess: Vec::new(),
                })
            }
            Auth::App {
                installation_id, ..
            } => {
                let v = self
                    .call_as_app(
                        "read the GitHub App's installation",
                        Method::GET,
                        &format!("/app/installations/{installation_id}"),
                    )
                    .await?;
                let permissions: BTreeMap<String, String> = v
                    .get("permissions")
                    .and_then(Value::as_object)
                    .map(|o| {
                        o.iter()
                            .filter_map(|(k, l)| Some((k.clone(), l.as_str()?.to_string())))
                            .collect()
                    })
                    .unwrap_or_default();
                let contents = permissions.get("contents").map_or("none", String::as_str);
                // Anything but read (write, or a level capstan does not know) is taken to push.
                let push = if matches!(contents, "none" | "read") {
                    PushAccess::None
                } else {
                    PushAccess::Granted
                };
                Ok(Access {
                    push,
                    because: format!("the GitHub App installation has contents: {contents}"),
                    excess: excess(&permissions),
                })
            }
        }
    }
}

/// Checks once, on a task of its own, and says so: a warning when the credentials can (or may)
/// push, and the metric. GitHub unreachable or failing is retried with the reconcile queue's
/// backoff; a refusal (no access to the repository) is the verdict `unknown`.
pub fn check_at_start(github: GitHub, metrics: Arc<Metrics>) -> JoinHandle<Access> {
    tokio::spawn(async move {
        let mut failures = 0;
        let access = loop {
            match github.push_access().await {
                Ok(a) => break a,
                Err(e @ GitHubError::GaveUp { .. }) => {
                    failures += 1;
                    let wait = crate::schedule::backoff(failures, fastrand::f64());
                    tracing::warn!(error = %e, retry_in_s = wait.as_secs(), "cannot tell yet whether the GitHub credentials can push to the repository; retrying");
                    tokio::time::sleep(wait).await;
                }
                Err(e) => {
                    break Access {
                        push: PushAccess::Unknown,
                        because: e.to_string(),
                        excess: Vec::new(),
                    };
                }
            }
        };
        let repo = github.repo();
        let because = access.because.as_str();
        match access.push {
            PushAccess::Granted => tracing::warn!(
                %repo, because,
                "capstan's GitHub credentials can push to the repository whose branch it applies: whoever holds them changes every cluster without review. Give them pull requests: write, commit statuses: write, contents: read and metadata: read, nothing more (docs/pull-requests.md)"
            ),
            PushAccess::Possible => tracing::warn!(
                %repo, because,
                "capstan's GitHub token may push to the repository whose branch it applies: make sure the fine-grained token's Contents permission is read-only (docs/pull-requests.md)"
            ),
            PushAccess::None => {
                tracing::info!(%repo, because, "capstan's GitHub credentials cannot push to the repository")
            }
            PushAccess::Unknown => tracing::warn!(
                %repo, because,
                "cannot tell whether capstan's GitHub credentials can push to the repository"
            ),
        }
        if !access.excess.is_empty() {
            tracing::warn!(
                %repo,
                excess = %access.excess.join(", "),
                "the GitHub App holds permissions capstan does not use; remove them"
            );
        }
        // After the log, so that whoever sees the metric finds the warning written.
        metrics.set_github_push_access(access.push.as_str(), &PushAccess::LABELS);
        access
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn repo(push: bool, private: bool) -> Value {
        json!({"full_name": "acme/fleet", "private": private,
               "permissions": {"admin": false, "maintain": false, "push": push, "triage": true, "pull": true}})
    }

    #[test]
    fn a_token_pushes_with_a_write_scope_and_a_user_who_may() {
        let v = |r: &Value, s: Option<&str>| token_verdict(r, s).0;
        assert_eq!(
            v(&repo(true, true), Some("repo, read:org")),
            PushAccess::Granted
        );
        assert_eq!(
            v(&repo(true, false), Some("public_repo")),
            PushAccess::Granted
        );
        // public_repo does not write a private repository; repo:status writes statuses only.
        assert_eq!(v(&repo(true, true), Some("public_repo")), PushAccess::None);
        assert_eq!(v(&repo(true, true), Some("repo:status")), PushAccess::None);
        assert_eq!(v(&repo(false, true), Some("repo")), PushAccess::None);
        // Fine-grained: the user's rights only.
        assert_eq!(v(&repo(true, true), None), PushAccess::Possible);
        assert_eq!(v(&repo(false, true), None), PushAccess::None);
        let admin = json!({"private": true, "permissions": {"admin": true, "push": false}});
        assert_eq!(v(&admin, None), PushAccess::Possible);
        assert_eq!(
            v(&json!({"private": true}), Some("repo")),
            PushAccess::Unknown
        );
        assert_eq!(
            v(&json!({"permissions": "push"}), Some("repo")),
            PushAccess::Unknown
        );
    }

    #[test]
    fn an_apps_permissions_beyond_what_capstan_uses_are_listed() {
        let p = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(
            excess(&p(&[
                ("metadata", "read"),
                ("contents", "read"),
                ("pull_requests", "write"),
                ("statuses", "write"),
            ]))
            .is_empty()
        );
        assert!(excess(&p(&[("pull_requests", "read")])).is_empty());
        assert_eq!(
            excess(&p(&[
                ("contents", "write"),
                ("administration", "read"),
                ("statuses", "write"),
                ("workflows", "write"),
            ])),
            [
                "administration: read",
                "contents: write",
                "workflows: write"
            ]
        );
        assert_eq!(
            excess(&p(&[("statuses", "sideways")])),
            ["statuses: sideways"]
        );
    }
}
