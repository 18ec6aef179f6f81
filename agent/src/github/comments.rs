//! The one comment capstan keeps on a pull request (its plan), found again by a hidden marker
//! and by its author.
//!
//! Why both: the marker (`<!-- capstan:plan -->`) finds the comment after a restart without
//! any state of capstan's own, but anyone who may comment can write it too. A comment counts as
//! capstan's only when capstan's own identity wrote it ([`super::identity`]); every other one
//! carrying the marker is left alone (never edited, whoever posted first), and capstan's is
//! created beside it.

use http::Method;
use serde_json::{Value, json};

use super::identity::Identity;
use super::{GitHub, GitHubError, Upserted};

impl GitHub {
    /// Keeps exactly one comment of capstan's holding `marker` on issue or pull request
    /// `number`: edits it in place when there is one (found again after a restart), else
    /// creates it. Only a comment written by capstan's own identity ([`GitHub::identity`])
    /// counts: one by anyone else carrying the marker is left alone, never edited, and capstan's
    /// is created beside it. `body` must contain `marker`.
    pub async fn upsert_comment(
        &self,
        number: u64,
        marker: &str,
        body: &str,
    ) -> Result<Upserted, GitHubError> {
        debug_assert!(body.contains(marker));
        let me = self.identity().await?;
        let mut found: Option<(u64, String)> = None;
        // Comments carrying the marker by anyone else: how many, and the first few authors.
        let (mut others, mut named) = (0usize, Vec::new());
        for page in 1.. {
            let list = self
                .call(
                    &format!("list the comments of #{number}"),
                    Method::GET,
                    &self.path(&format!(
                        "issues/{number}/comments?per_page=100&page={page}"
                    )),
                    None,
                )
                .await?;
            let items = list.as_array().cloned().unwrap_or_default();
            for c in &items {
                let text = c.get("body").and_then(Value::as_str).unwrap_or("");
                if !text.contains(marker) {
                    continue;
                }
                let id = c.get("id").and_then(Value::as_u64);
                match (&me, id) {
                    (Some(me), Some(id)) if me.wrote(c) => {
                        found = Some((id, text.to_string()));
                        break;
                    }
                    _ => {
                        others += 1;
                        if named.len() < 5 {
                            named.push(Identity::author_of(c).map_or_else(
                                || "an unknown author".to_string(),
                                |a| a.to_string(),
                            ));
                        }
                    }
                }
            }
            if found.is_some() || items.len() < 100 {
                break;
            }
        }
        if others > 0 {
            tracing::warn!(
                pr = number,
                others,
                authors = %named.join(", "),
                "comments carrying capstan's marker by someone else than capstan are ignored, never edited"
            );
        }
        let payload = json!({"body": body});
        match found {
            Some((id, text)) if text == body => Ok(Upserted::Unchanged(id)),
            Some((id, _)) => {
                self.call(
                    &format!("edit the plan comment of #{number}"),
                    Method::PATCH,
                    &self.path(&format!("issues/comments/{id}")),
                    Some(&payload),
                )
                .await?;
                Ok(Upserted::Updated(id))
            }
            None => {
                let made = self
                    .call(
                        &format!("comment on #{number}"),
                        Method::POST,
                        &self.path(&format!("issues/{number}/comments")),
                        Some(&payload),
                    )
                    .await?;
                self.learn(&made);
                Ok(Upserted::Created(
                    made.get("id").and_then(Value::as_u64).unwrap_or_default(),
                ))
            }
        }
    }
}
