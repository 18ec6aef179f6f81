//! GitHub's REST API, for the pull-request workflow: plan comments, commit statuses and pull
//! requests. Everything goes through [`GitHub::call`], which authenticates (a token, or a GitHub
//! App's installation token that octocrab mints and refreshes), sends GitHub's documented
//! `Accept` and API-version headers, and retries what is worth retrying:
//!
//! - 5xx and transport errors: exponential backoff ([`Retry`]);
//! - rate limits (403 or 429 with `x-ratelimit-remaining: 0`, `retry-after`, or a "rate limit"
//!   message): after `retry-after`, or until `x-ratelimit-reset`, capped by [`Retry::cap`];
//! - never a 401, a 403 that is not a rate limit, or a 404 (a token without the scope the call
//!   needs, or no access to the repository): those are [`GitHubError::Forbidden`] with the scope
//!   GitHub says it wanted (`x-accepted-oauth-scopes`) and the one the token has.
//!
//! The endpoints used (all under the configured API URL, `https://api.github.com` or a GitHub
//! Enterprise `https://HOST/api/v3`):
//!
//! | call | endpoint |
//! |---|---|
//! | [`GitHub::set_status`] | `POST /repos/{owner}/{repo}/statuses/{sha}` |
//! | [`GitHub::identity`] | `GET /user` (a token), `GET /app` (a GitHub App, with its JWT) |
//! | [`GitHub::upsert_comment`] | `GET /repos/{owner}/{repo}/issues/{n}/comments`, `POST /repos/{owner}/{repo}/issues/{n}/comments`, `PATCH /repos/{owner}/{repo}/issues/comments/{id}` |
//! | [`GitHub::push_access`] | `GET /repos/{owner}/{repo}` (a token), `GET /app/installations/{id}` (a GitHub App, with its JWT) |
//! | [`GitHub::open_pull_requests`] | `GET /repos/{owner}/{repo}/pulls?state=open&per_page=100`, then each `Link: <…>; rel="next"` |
//! | [`GitHub::open_or_update_pr`] | `GET /repos/{owner}/{repo}/pulls?head=…&base=…&state=open`, `POST /repos/{owner}/{repo}/pulls`, `PATCH /repos/{owner}/{repo}/pulls/{n}` |
//! | GitHub App auth (octocrab) | `POST /app/installations/{id}/access_tokens` |
//!
//! Callers in the daemon run these on their own tasks ([`notify`]), so a slow or failing GitHub
//! never holds up reconciliation.

pub mod access;
mod comments;
pub mod handover;
pub mod identity;
pub mod notify;
pub mod open_pulls;
pub mod pr;
pub mod resync;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Method;
use http::header::HeaderName;
use octocrab::Octocrab;
use serde_json::{Value, json};

/// The media type GitHub documents for its REST API.
pub const ACCEPT: &str = "application/vnd.github+json";
/// The REST API version capstan is written against.
pub const API_VERSION: &str = "2022-11-28";
/// github.com's API.
pub const DEFAULT_API_URL: &str = "https://api.github.com";
/// Longest commit-status description GitHub accepts.
pub const STATUS_DESCRIPTION_LIMIT: usize = 140;

/// How to authenticate.
#[derive(Clone)]
pub enum Auth {
    /// A personal, fine-grained or installation token.
    Token(String),
    /// A GitHub App: its id, private key (PEM) and the installation on the repository.
    App {
        /// App id.
        app_id: u64,
        /// The App's private key, PEM.
        key_pem: Vec<u8>,
        /// Installation id.
        installation_id: u64,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Token(_) => f.write_str("Token(<redacted>)"),
            Auth::App {
                app_id,
                installation_id,
                ..
            } => write!(f, "App(app {app_id}, installation {installation_id})"),
        }
    }
}

/// Retries of one call.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Attempts in all (at least one).
    pub attempts: u32,
    /// First delay after a 5xx; doubles each time.
    pub base: Duration,
    /// Longest single wait (a rate-limit reset further away is not waited for).
    pub cap: Duration,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry {
            attempts: 6,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(300),
        }
    }
}

/// Where and who.
#[derive(Debug, Clone)]
pub struct GitHubConfig {
    /// API base URL (`https://api.github.com`, or `https://HOST/api/v3` for GitHub Enterprise).
    pub api_url: String,
    /// `owner/name` of the repository.
    pub repo: String,
    /// Credentials.
    pub auth: Auth,
    /// Retry policy.
    pub retry: Retry,
}

/// Why a GitHub call failed.
#[derive(Debug, thiserror::Error)]
pub enum GitHubError {
    /// The configuration cannot work (no token, a bad key, a repository that is not owner/name).
    #[error("GitHub configuration: {0}")]
    Config(String),
    /// Refused for lack of permission: a token without the needed scope, or no access.
    #[error("GitHub refused to {action} ({status}): {message}; {hint}")]
    Forbidden {
        /// What was being done.
        action: String,
        /// HTTP status.
        status: u16,
        /// GitHub's message.
        message: String,
        /// Which permission is needed, and what the token has when GitHub says.
        hint: String,
    },
    /// Still rate-limited or failing after every retry.
    #[error("GitHub did not {action} after {attempts} attempts: {last}")]
    GaveUp {
        /// What was being done.
        action: String,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// A successful answer capstan cannot use (not the JSON documented, a page link that
    /// leaves the API URL).
    #[error("GitHub's answer to {action} cannot be used: {message}")]
    Unexpected {
        /// What was being done.
        action: String,
        /// What is wrong with it.
        message: String,
    },
    /// Any other answer (422 and alike).
    #[error("GitHub refused to {action} ({status}): {message}")]
    Rejected {
        /// What was being done.
        action: String,
        /// HTTP status.
        status: u16,
        /// GitHub's message.
        message: String,
    },
}

/// A client for one repository.
#[derive(Clone)]
pub struct GitHub {
    octo: Octocrab,
    /// A GitHub App's own client (its JWT), for what only the App may ask (`GET /app`, its
    /// installation's permissions); `None` with a token.
    app: Option<Octocrab>,
    auth: Auth,
    owner: String,
    name: String,
    retry: Retry,
    api_url: String,
    /// Who the credentials write as, once known ([`identity`]); shared by every clone.
    me: Arc<Mutex<Option<identity::Known>>>,
}

impl std::fmt::Debug for GitHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GitHub({} at {})", self.repo(), self.api_url)
    }
}

/// The state of a commit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusState {
    /// Not done yet.
    Pending,
    /// Done and good.
    Success,
    /// Done and bad.
    Failure,
    /// Could not be determined.
    Error,
}

impl StatusState {
    /// As GitHub spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusState::Pending => "pending",
            StatusState::Success => "success",
            StatusState::Failure => "failure",
            StatusState::Error => "error",
        }
    }
}

/// What [`GitHub::upsert_comment`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upserted {
    /// A new comment, with its id.
    Created(u64),
    /// The marked comment, edited.
    Updated(u64),
    /// The marked comment already said exactly this.
    Unchanged(u64),
}

/// `owner/name` from a GitHub remote URL (`https://github.com/o/n.git`, `git@github.com:o/n`,
/// `ssh://git@ghe.example.com/o/n.git`), if it looks like one.
pub fn repo_from_url(url: &str) -> Option<String> {
    let rest = url
        .split_once("://")
        .map(|(_, r)| r.split_once('/').map(|(_, p)| p).unwrap_or(""))
        .or_else(|| url.split_once(':').map(|(_, p)| p))?;
    let rest = rest.trim_end_matches('/').trim_end_matches(".git");
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    match parts.as_slice() {
        [owner, name] => Some(format!("{owner}/{name}")),
        _ => None,
    }
}

/// Reads the credentials the CLI names: a token file, or an App's id, key file and installation.
pub fn auth_from_files(
    token_file: Option<&PathBuf>,
    app: Option<(u64, &PathBuf, u64)>,
) -> Result<Option<Auth>, GitHubError> {
    match (token_file, app) {
        (Some(_), Some(_)) => Err(GitHubError::Config(
            "give either a token file or a GitHub App, not both".into(),
        )),
        (Some(f), None) => {
            let t = std::fs::read_to_string(f)
                .map_err(|e| GitHubError::Config(format!("reading {}: {e}", f.display())))?;
            let t = t.trim().to_string();
            if t.is_empty() {
                return Err(GitHubError::Config(format!("{} is empty", f.display())));
            }
            Ok(Some(Auth::Token(t)))
        }
        (None, Some((app_id, key, installation_id))) => {
            let key_pem = std::fs::read(key)
                .map_err(|e| GitHubError::Config(format!("reading {}: {e}", key.display())))?;
            Ok(Some(Auth::App {
                app_id,
                key_pem,
                installation_id,
            }))
        }
        (None, None) => Ok(None),
    }
}

fn header(h: &http::HeaderMap, name: &str) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// How long to wait before retrying a rate-limited answer, if it is one.
fn rate_limit_wait(status: u16, h: &http::HeaderMap, message: &str) -> Option<Duration> {
    if status != 403 && status != 429 {
        return None;
    }
    if let Some(s) = header(h, "retry-after").and_then(|v| v.parse::<u64>().ok()) {
        return Some(Duration::from_secs(s));
    }
    let exhausted = header(h, "x-ratelimit-remaining").as_deref() == Some("0");
    if exhausted {
        let reset = header(h, "x-ratelimit-reset").and_then(|v| v.parse::<u64>().ok());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        return Some(Duration::from_secs(
            reset.map_or(60, |r| r.saturating_sub(now) + 1),
        ));
    }
    // Secondary rate limits say so in the message only.
    (status == 429 || message.to_ascii_lowercase().contains("rate limit"))
        .then_some(Duration::from_secs(60))
}

impl GitHub {
    /// A client; no request is made.
    pub fn new(cfg: &GitHubConfig) -> Result<GitHub, GitHubError> {
        let (owner, name) = cfg
            .repo
            .split_once('/')
            .filter(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'))
            .ok_or_else(|| {
                GitHubError::Config(format!("repository {:?} is not owner/name", cfg.repo))
            })?;
        capstan_client::install_crypto_provider();
        let mut b = Octocrab::builder()
            .base_uri(cfg.api_url.trim_end_matches('/'))
            .map_err(|e| GitHubError::Config(format!("API URL {}: {e}", cfg.api_url)))?
            .add_header(http::header::ACCEPT, ACCEPT.into())
            .add_header(
                HeaderName::from_static("x-github-api-version"),
                API_VERSION.into(),
            )
            .set_connect_timeout(Some(Duration::from_secs(20)))
            .set_read_timeout(Some(Duration::from_secs(60)));
        let installation = match &cfg.auth {
            Auth::Token(t) => {
                b = b.personal_token(t.clone());
                None
            }
            Auth::App {
                app_id,
                key_pem,
                installation_id,
            } => {
                let key =
                    octocrab::jsonwebtoken::EncodingKey::from_rsa_pem(key_pem).map_err(|e| {
                        GitHubError::Config(format!(
                            "the GitHub App key is not an RSA PEM key: {e}"
                        ))
                    })?;
                b = b.app((*app_id).into(), key);
                Some(*installation_id)
            }
        };
        let mut octo = b
            .build()
            .map_err(|e| GitHubError::Config(format!("building the client: {e}")))?;
        let mut app = None;
        if let Some(id) = installation {
            let installed = octo
                .installation(id.into())
                .map_err(|e| GitHubError::Config(format!("installation {id}: {e}")))?;
            app = Some(std::mem::replace(&mut octo, installed));
        }
        Ok(GitHub {
            octo,
            app,
            auth: cfg.auth.clone(),
            owner: owner.to_string(),
            name: name.to_string(),
            retry: cfg.retry,
            api_url: cfg.api_url.clone(),
            me: Arc::default(),
        })
    }

    /// `owner/name`.
    pub fn repo(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    /// The repository owner.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    fn path(&self, rest: &str) -> String {
        format!("/repos/{}/{}/{rest}", self.owner, self.name)
    }

    /// One REST call with retries; the parsed JSON answer (`null` for an empty one).
    pub async fn call(
        &self,
        action: &str,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, GitHubError> {
        self.exchange(action, method, path, body)
            .await
            .map(|(v, _)| v)
    }

    /// [`GitHub::call`], with the answer's headers too (a list's `Link`).
    pub async fn exchange(
        &self,
        action: &str,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(Value, http::HeaderMap), GitHubError> {
        self.send(&self.octo, action, method, path, body).await
    }

    /// A call authenticated as the GitHub App itself (its JWT), with the same retries; a
    /// [`GitHubError::Config`] with a token.
    pub(crate) async fn call_as_app(
        &self,
        action: &str,
        method: Method,
        path: &str,
    ) -> Result<Value, GitHubError> {
        let app = self.app.as_ref().ok_or_else(|| {
            GitHubError::Config(format!("{action}: only a GitHub App may ask this"))
        })?;
        self.send(app, action, method, path, None)
            .await
            .map(|(v, _)| v)
    }

    async fn send(
        &self,
        octo: &Octocrab,
        action: &str,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(Value, http::HeaderMap), GitHubError> {
        let mut last = String::new();
        let attempts = self.retry.attempts.max(1);
        for attempt in 1..=attempts {
            let sent = match method {
                Method::GET => octo._get(path).await,
                Method::POST => octo._post(path, body).await,
                Method::PATCH => octo._patch(path, body).await,
                _ => {
                    return Err(GitHubError::Config(format!(
                        "{action}: {method} is not a method capstan sends"
                    )));
                }
            };
            let delay = match sent {
                Err(e) => {
                    last = crate::source::describe(&e);
                    self.retry.base.saturating_mul(1 << (attempt - 1).min(10))
                }
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let headers = resp.headers().clone();
                    let text = octo.body_to_string(resp).await.unwrap_or_default();
                    let parsed: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                    if (200..300).contains(&status) {
                        return Ok((parsed, headers));
                    }
                    let message = parsed
                        .get("message")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .unwrap_or_else(|| text.chars().take(200).collect());
                    last = format!("{status} {message}");
                    if let Some(wait) = rate_limit_wait(status, &headers, &message) {
                        if wait > self.retry.cap {
                            return Err(GitHubError::GaveUp {
                                action: action.into(),
                                attempts: attempt,
                                last: format!("{last} (rate limit resets in {}s)", wait.as_secs()),
                            });
                        }
                        tracing::warn!(
                            action,
                            status,
                            wait_s = wait.as_secs(),
                            "GitHub rate limit; waiting"
                        );
                        wait
                    } else if status >= 500 {
                        self.retry.base.saturating_mul(1 << (attempt - 1).min(10))
                    } else if matches!(status, 401 | 403 | 404) {
                        let wanted = header(&headers, "x-accepted-oauth-scopes");
                        let has = header(&headers, "x-oauth-scopes");
                        let mut hint = format!("the credentials need {}", needs(action));
                        if let Some(w) = wanted.filter(|w| !w.is_empty()) {
                            hint.push_str(&format!("; GitHub accepts scopes: {w}"));
                        }
                        if let Some(h) = has {
                            hint.push_str(&format!(
                                "; the token has: {}",
                                if h.is_empty() { "none" } else { &h }
                            ));
                        }
                        return Err(GitHubError::Forbidden {
                            action: action.into(),
                            status,
                            message,
                            hint,
                        });
                    } else {
                        return Err(GitHubError::Rejected {
                            action: action.into(),
                            status,
                            message,
                        });
                    }
                }
            };
            if attempt < attempts {
                tokio::time::sleep(delay.min(self.retry.cap)).await;
            }
        }
        Err(GitHubError::GaveUp {
            action: action.into(),
            attempts,
            last,
        })
    }

    /// Sets a commit status (`context` like `capstan/plan`); the description is cut to GitHub's
    /// 140 characters.
    pub async fn set_status(
        &self,
        sha: &str,
        context: &str,
        state: StatusState,
        description: &str,
        target_url: Option<&str>,
    ) -> Result<(), GitHubError> {
        let mut d: String = description.chars().take(STATUS_DESCRIPTION_LIMIT).collect();
        if d.chars().count() < description.chars().count() {
            d = d
                .chars()
                .take(STATUS_DESCRIPTION_LIMIT - 1)
                .collect::<String>()
                + "…";
        }
        let mut body = json!({"state": state.as_str(), "context": context, "description": d});
        if let Some(u) = target_url {
            body["target_url"] = json!(u);
        }
        self.call(
            &format!("set commit status {context} on {sha}"),
            Method::POST,
            &self.path(&format!("statuses/{sha}")),
            Some(&body),
        )
        .await
        .map(|_| ())
    }

    /// Opens a pull request from `head` (a branch of this repository) into `base`, or updates
    /// the title and body of the open one; its number, URL and whether it was created.
    pub async fn open_or_update_pr(
        &self,
        head: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<(u64, String, bool), GitHubError> {
        let open = self
            .call(
                &format!("list open pull requests from {head}"),
                Method::GET,
                &self.path(&format!(
                    "pulls?head={}:{head}&base={base}&state=open",
                    self.owner
                )),
                None,
            )
            .await?;
        let first = open.as_array().and_then(|a| a.first()).cloned();
        let field = |v: &Value| {
            (
                v.get("number").and_then(Value::as_u64).unwrap_or_default(),
                v.get("html_url")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            )
        };
        match first {
            Some(pr) => {
                let (n, url) = field(&pr);
                self.call(
                    &format!("update pull request #{n}"),
                    Method::PATCH,
                    &self.path(&format!("pulls/{n}")),
                    Some(&json!({"title": title, "body": body})),
                )
                .await?;
                Ok((n, url, false))
            }
            None => {
                let made = self
                    .call(
                        &format!("open a pull request from {head} into {base}"),
                        Method::POST,
                        &self.path("pulls"),
                        Some(&json!({"title": title, "head": head, "base": base, "body": body})),
                    )
                    .await?;
                let (n, url) = field(&made);
                Ok((n, url, true))
            }
        }
    }
}

/// The permission an action needs, for error messages.
fn needs(action: &str) -> &'static str {
    if action.contains("status") {
        "commit statuses: write (classic token scope repo:status)"
    } else if action == open_pulls::ACTION {
        "pull requests: read (classic token scope repo)"
    } else if action.contains("comment") {
        "pull requests: write (classic token scope repo or public_repo)"
    } else if action.contains("pull request") {
        "pull requests: write and contents: read (classic token scope repo)"
    } else {
        "access to the repository"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_from_remote_urls() {
        for (url, want) in [
            ("https://github.com/acme/fleet.git", Some("acme/fleet")),
            (
                "https://x-access-token:t@github.com/acme/fleet",
                Some("acme/fleet"),
            ),
            ("git@github.com:acme/fleet.git", Some("acme/fleet")),
            (
                "ssh://git@ghe.example.com/acme/fleet.git",
                Some("acme/fleet"),
            ),
            ("git://127.0.0.1:9418/repo.git", None),
            ("/srv/repo.git", None),
        ] {
            assert_eq!(repo_from_url(url).as_deref(), want, "{url}");
        }
    }

    #[test]
    fn rate_limits_are_told_apart_from_missing_scopes() {
        let mut h = http::HeaderMap::new();
        assert_eq!(
            rate_limit_wait(403, &h, "Resource not accessible by integration"),
            None
        );
        h.insert("retry-after", "3".parse().unwrap());
        assert_eq!(rate_limit_wait(403, &h, ""), Some(Duration::from_secs(3)));
        let mut h = http::HeaderMap::new();
        h.insert("x-ratelimit-remaining", "0".parse().unwrap());
        h.insert("x-ratelimit-reset", "0".parse().unwrap());
        assert_eq!(rate_limit_wait(403, &h, ""), Some(Duration::from_secs(1)));
        assert!(
            rate_limit_wait(
                403,
                &http::HeaderMap::new(),
                "You have exceeded a secondary rate limit"
            )
            .is_some()
        );
        assert_eq!(rate_limit_wait(500, &h, ""), None);
    }
}
