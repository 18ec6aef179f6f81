//! The repository's open pull requests, as GitHub lists them: `GET
//! /repos/{owner}/{repo}/pulls?state=open&per_page=100`, page after page.
//!
//! Why: the plans the dashboard shows live in the leader's memory ([`crate::dashboard::board`]), so a new
//! leader (a restart, a failover) starts with none; it lists what is open to plan it again
//! ([`super::resync`]) instead of waiting for each pull request's next push.
//!
//! GitHub documents that a list is paginated with the `Link` header, and that clients follow
//! its `rel="next"` URL rather than build page numbers themselves (the URL may name the
//! repository by id). A next URL is followed only when it lies under the configured API URL:
//! the request carries the token, which must not go anywhere else.

use http::Method;
use serde_json::Value;

use super::{GitHub, GitHubError};

/// The most pages followed (100 pull requests each). GitHub lists the newest first, so a
/// repository with more open pull requests than that loses only its oldest ones here.
pub const MAX_PAGES: usize = 50;

/// What the listing is called in errors and logs (and how [`super::needs`] tells it apart).
pub(super) const ACTION: &str = "list the open pull requests";

impl GitHub {
    /// Every open pull request of the repository (GitHub's pull request objects, newest first),
    /// following the `Link` header's next page up to [`MAX_PAGES`].
    pub async fn open_pull_requests(&self) -> Result<Vec<Value>, GitHubError> {
        let mut path = self.path("pulls?state=open&per_page=100");
        let mut all = Vec::new();
        for page in 1..=MAX_PAGES {
            let (list, headers) = self.exchange(ACTION, Method::GET, &path, None).await?;
            let Value::Array(items) = list else {
                return Err(GitHubError::Unexpected {
                    action: ACTION.into(),
                    message: format!("page {page} ({path}) is not a JSON array"),
                });
            };
            all.extend(items);
            let next = headers
                .get_all(http::header::LINK)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .find_map(next_link);
            match next {
                None => return Ok(all),
                Some(url) => {
                    path = self.under_api(url).ok_or_else(|| GitHubError::Unexpected {
                        action: ACTION.into(),
                        message: format!(
                            "the next page's link {url} is not under the API URL {}; not followed",
                            self.api_url
                        ),
                    })?
                }
            }
        }
        tracing::warn!(
            repo = %self.repo(),
            listed = all.len(),
            "more open pull requests than {MAX_PAGES} pages; the oldest are left out"
        );
        Ok(all)
    }

    /// The path (with its query) of `url` below the API URL, if it is below it.
    fn under_api(&self, url: &str) -> Option<String> {
        let rest = url.strip_prefix(self.api_url.trim_end_matches('/'))?;
        rest.starts_with('/').then(|| rest.to_string())
    }
}

/// The `rel="next"` target of a `Link` header value (RFC 8288: `<url>; rel="next", <url>;
/// rel="last"`), if there is one.
pub fn next_link(header: &str) -> Option<&str> {
    let mut rest = header;
    while let Some(open) = rest.find('<') {
        let close = open + rest[open..].find('>')?;
        let url = &rest[open + 1..close];
        let after = &rest[close + 1..];
        let params_end = after.find('<').unwrap_or(after.len());
        let is_next = after[..params_end].split([';', ',']).any(|p| {
            p.trim()
                .strip_prefix("rel=")
                .map(|r| r.trim_matches('"'))
                .is_some_and(|r| r.split_whitespace().any(|t| t.eq_ignore_ascii_case("next")))
        });
        if is_next {
            return Some(url);
        }
        rest = &after[params_end..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_page_is_read_from_the_link_header() {
        let github = concat!(
            "<https://api.github.com/repositories/1300192/pulls?state=open&per_page=100&page=2>; rel=\"next\", ",
            "<https://api.github.com/repositories/1300192/pulls?state=open&per_page=100&page=4>; rel=\"last\""
        );
        assert_eq!(
            next_link(github),
            Some(
                "https://api.github.com/repositories/1300192/pulls?state=open&per_page=100&page=2"
            )
        );
        // The last page has no next; relations may come in any order, unquoted, or several.
        let last =
            "<https://h/api/v3/x?page=1>; rel=\"first\", <https://h/api/v3/x?page=3>; rel=\"prev\"";
        assert_eq!(next_link(last), None);
        assert_eq!(next_link("<a?page=2>; rel=next"), Some("a?page=2"));
        assert_eq!(
            next_link("<b>; rel=\"prev\", <c>; title=\"x\"; rel=\"last next\""),
            Some("c")
        );
        assert_eq!(next_link(""), None);
        assert_eq!(next_link("<unclosed; rel=\"next\""), None);
    }

    // The client needs a runtime to be built (no request is made).
    #[tokio::test]
    async fn a_next_page_is_followed_only_under_the_api_url() {
        let gh = GitHub::new(&super::super::GitHubConfig {
            api_url: "https://ghe.example.com/api/v3/".into(),
            repo: "acme/fleet".into(),
            auth: super::super::Auth::Token("t".into()),
            retry: Default::default(),
        })
        .unwrap();
        assert_eq!(
            gh.under_api("https://ghe.example.com/api/v3/repositories/7/pulls?page=2")
                .as_deref(),
            Some("/repositories/7/pulls?page=2")
        );
        assert_eq!(gh.under_api("https://evil.example/api/v3/x"), None);
        assert_eq!(gh.under_api("https://ghe.example.com/api/v3x/y"), None);
        assert_eq!(gh.under_api("https://ghe.example.com/other"), None);
    }
}
