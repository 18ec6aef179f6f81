//! Who capstan is on GitHub, so that it edits its own comments and nobody else's.
//!
//! Why: the plan comment is found again by a hidden marker (`<!-- capstan:plan -->`), and anyone
//! who may comment on a pull request may write that marker too. Matched by text alone, an
//! impostor's comment posted first would be the one capstan edits, and its author could edit it
//! back into a fake "No cluster changes" under the thread's only "plan". So a comment counts as
//! capstan's only when its author is the identity capstan's own credentials act as:
//!
//! - a token (classic or fine-grained personal access token, OAuth token): `GET /user`, the
//!   authenticated user's `login` and `id`; comments are matched by the user id, which GitHub
//!   never gives to another account (a login can be renamed and taken);
//! - a GitHub App: `GET /app` with the App's JWT gives its `slug`, and the App's installation
//!   writes as the bot user `<slug>[bot]`; comments are matched by that login (GitHub reserves
//!   the `[bot]` suffix for Apps' bot users, so no person can hold it);
//! - an installation token given as a token (`GET /user` is not available to installation
//!   tokens: GitHub answers 403): capstan cannot tell before it writes, so it edits nothing and
//!   learns who it is from the author of the first comment it creates.
//!
//! Whatever the credentials, the author of a comment capstan has just created is who capstan
//! is ([`GitHub::learn`]): that corrects a guess (a renamed App) for the rest of the process.
//! The identity is asked for once per process and shared by every clone of the client; a
//! failure (GitHub down) is not remembered, so the next plan asks again.

use http::Method;
use serde_json::Value;

use super::{Auth, GitHub, GitHubError};

/// The author capstan's comments carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The login (`capstan-bot`, `capstan-fleet[bot]`).
    pub login: String,
    /// The account's id, when known (matched instead of the login).
    pub id: Option<u64>,
}

/// What the client knows of its identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Known {
    /// Who it is.
    Me(Identity),
    /// The credentials cannot say (an installation token given as a token) and nothing was
    /// created yet.
    Hidden,
}

impl Identity {
    /// The author of a comment (or any object with a `user`), if it names one.
    pub fn author_of(object: &Value) -> Option<Identity> {
        let user = object.get("user")?;
        let login = user.get("login").and_then(Value::as_str)?;
        (!login.is_empty()).then(|| Identity {
            login: login.to_string(),
            id: user.get("id").and_then(Value::as_u64),
        })
    }

    /// Whether `comment` was written by this identity: the same account id when both are
    /// known, else the same login (GitHub's logins are case-insensitive).
    pub fn wrote(&self, comment: &Value) -> bool {
        let Some(author) = Identity::author_of(comment) else {
            return false;
        };
        match (self.id, author.id) {
            (Some(mine), Some(theirs)) => mine == theirs,
            _ => self.login.eq_ignore_ascii_case(&author.login),
        }
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.id {
            Some(id) => write!(f, "{} (id {id})", self.login),
            None => f.write_str(&self.login),
        }
    }
}

impl GitHub {
    fn known(&self) -> Option<Known> {
        self.me.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn remember(&self, k: Known) {
        *self.me.lock().unwrap_or_else(|p| p.into_inner()) = Some(k);
    }

    /// Who these credentials write as, asked of GitHub once per process (`None`: they cannot
    /// say; see the module's overview).
    pub async fn identity(&self) -> Result<Option<Identity>, GitHubError> {
        if let Some(k) = self.known() {
            return Ok(match k {
                Known::Me(i) => Some(i),
                Known::Hidden => None,
            });
        }
        let found = match &self.auth {
            Auth::Token(_) => self.authenticated_user().await?,
            Auth::App { .. } => Some(self.app_bot().await?),
        };
        match &found {
            Some(i) => {
                tracing::info!(identity = %i, "capstan's GitHub identity: only its comments are edited");
                self.remember(Known::Me(i.clone()))
            }
            None => {
                tracing::warn!(
                    "the GitHub token cannot say whose it is (GET /user is refused: an installation token?); capstan edits no existing comment and learns its identity from the first one it creates"
                );
                self.remember(Known::Hidden)
            }
        }
        Ok(found)
    }

    /// `GET /user`: the token's user; `None` when GitHub refuses it (an installation token).
    async fn authenticated_user(&self) -> Result<Option<Identity>, GitHubError> {
        const ACTION: &str = "read the token's user (GET /user)";
        match self.call(ACTION, Method::GET, "/user", None).await {
            Ok(v) => {
                let login = v.get("login").and_then(Value::as_str).unwrap_or("");
                let id = v.get("id").and_then(Value::as_u64);
                if login.is_empty() || id.is_none() {
                    return Err(GitHubError::Unexpected {
                        action: ACTION.into(),
                        message: "no login and id in the answer".into(),
                    });
                }
                Ok(Some(Identity {
                    login: login.to_string(),
                    id,
                }))
            }
            Err(GitHubError::Forbidden {
                status: 403 | 404, ..
            }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `GET /app` with the App's JWT: its slug, and so its bot user `<slug>[bot]`.
    async fn app_bot(&self) -> Result<Identity, GitHubError> {
        const ACTION: &str = "read the GitHub App (GET /app)";
        let v = self.call_as_app(ACTION, Method::GET, "/app").await?;
        let slug = v.get("slug").and_then(Value::as_str).unwrap_or("");
        if slug.is_empty() {
            return Err(GitHubError::Unexpected {
                action: ACTION.into(),
                message: "no slug in the answer".into(),
            });
        }
        Ok(Identity {
            login: format!("{slug}[bot]"),
            id: None,
        })
    }

    /// Learns from a comment capstan has just created who it is (its author), when that is
    /// news: the first comment of an installation token, or an App whose bot is not the one
    /// its slug said.
    pub(super) fn learn(&self, created: &Value) {
        let Some(author) = Identity::author_of(created) else {
            return;
        };
        let same = matches!(self.known(), Some(Known::Me(ref i)) if *i == author);
        if !same {
            tracing::info!(identity = %author, "capstan's GitHub identity, from the comment it created");
            self.remember(Known::Me(author));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_comment_is_ours_by_the_account_id_else_by_the_login() {
        let by = |login: &str, id: u64| json!({"id": 1, "body": "x", "user": {"login": login, "id": id, "type": "User"}});
        let me = Identity {
            login: "capstan-bot".into(),
            id: Some(7),
        };
        assert!(me.wrote(&by("capstan-bot", 7)));
        // The login renamed and taken by someone else: not ours.
        assert!(!me.wrote(&by("capstan-bot", 8)));
        // Our account, renamed: still ours.
        assert!(me.wrote(&by("capstan-renamed", 7)));
        let bot = Identity {
            login: "capstan-fleet[bot]".into(),
            id: None,
        };
        assert!(bot.wrote(&by("Capstan-Fleet[bot]", 99)));
        assert!(!bot.wrote(&by("capstan-fleet", 99)));
        // No author, an empty login, a ghost: never ours.
        assert!(!me.wrote(&json!({"body": "x"})));
        assert!(!bot.wrote(&json!({"user": {"login": ""}})));
        assert!(!me.wrote(&json!({"user": null})));
    }
}
