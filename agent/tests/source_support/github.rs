//! A stand-in for GitHub's REST API (GitHub itself is unreachable from here), on loopback.
//!
//! It serves the endpoints capstan uses, under an optional path prefix (`/api/v3`, as GitHub
//! Enterprise serves them), and checks every request against GitHub's documentation: method and
//! path, `Authorization: Bearer <token>` with a token it issued or was given, `Accept:
//! application/vnd.github+json`, `X-GitHub-Api-Version: 2022-11-28`, a `User-Agent`, and the
//! JSON body's fields and their types. Anything else is answered as GitHub would (401, 404,
//! 422) *and* recorded in [`GitHubStandIn::violations`], which tests assert is empty.
//!
//! GitHub Apps: `POST /app/installations/{id}/access_tokens` verifies the App's RS256 JWT (issuer
//! = app id) with its public key and issues an installation token that the other endpoints
//! then accept, acting as the App's bot user `<slug>[bot]`; `GET /app` and `GET
//! /app/installations/{id}` answer the App's slug and the installation's permissions to the
//! JWT alone, as GitHub documents.
//!
//! Who a token is ([`Account`]): the token given to [`GitHubStandIn::start`] is a classic
//! personal access token (scopes `repo`) of the user `capstan-bot`, who may push; others are
//! added with [`GitHubStandIn::add_token`]. `GET /user` answers the token's user, and 403
//! "Resource not accessible by integration" to an installation token, as GitHub does; every
//! answer to a classic token carries its `X-OAuth-Scopes`, and `GET /repos/{owner}/{repo}`
//! answers the user's `permissions` (none for an installation token). Comments carry their
//! author (`user`: login, id, type): the one whose token wrote them, or anyone else's through
//! [`GitHubStandIn::comment_as`] (a pull request's commenter).
//!
//! Pull requests are listed as GitHub documents (`GET /repos/{owner}/{repo}/pulls`: `state`,
//! `head`, `base`, `sort`, `direction`, `per_page` up to 100, `page`), newest first, a page at a
//! time with a `Link` header whose URLs name the repository by id (`/repositories/{id}/pulls`),
//! as GitHub's do: a client that builds page URLs itself instead of following them is caught.
//!
//! Faults on request: [`Fault::RateLimit`] (403 with `x-ratelimit-remaining: 0` and a reset a
//! second away), [`Fault::ServerError`] (502), [`Fault::MissingScope`] (403 with
//! `x-accepted-oauth-scopes`/`x-oauth-scopes`, as GitHub answers a token without the scope).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A fault to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// 403, primary rate limit exhausted, reset in a second.
    RateLimit,
    /// 502 Bad Gateway.
    ServerError,
    /// 403, the token lacks the scope.
    MissingScope,
}

/// One request as served.
#[derive(Debug, Clone)]
pub struct Logged {
    pub method: String,
    /// Path without the prefix, with the query.
    pub path: String,
    pub status: u16,
    pub body: Value,
}

#[derive(Debug, Clone)]
pub struct Comment {
    pub id: u64,
    pub issue: u64,
    pub body: String,
    /// Who wrote it.
    pub author: User,
}

/// A GitHub account, as comments and `GET /user` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub login: String,
    pub id: u64,
    /// "User" or "Bot".
    pub kind: &'static str,
}

impl User {
    pub fn person(login: &str, id: u64) -> User {
        User {
            login: login.into(),
            id,
            kind: "User",
        }
    }

    fn json(&self) -> Value {
        json!({"login": self.login, "id": self.id, "type": self.kind, "site_admin": false})
    }
}

/// What kind of token, as GitHub tells them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenKind {
    /// A classic personal access token with these scopes (`X-OAuth-Scopes`).
    Classic(String),
    /// A fine-grained personal access token: no scopes header.
    FineGrained,
    /// A GitHub App installation token.
    Installation,
}

/// Whose a token is.
#[derive(Debug, Clone)]
pub struct Account {
    pub user: User,
    pub kind: TokenKind,
    /// Whether the user may push to the repository (`permissions.push`).
    pub push: bool,
}

/// The user of the token [`GitHubStandIn::start`] is given.
pub fn capstan_bot() -> User {
    User::person("capstan-bot", 5001)
}

/// A GitHub App the stand-in accepts.
#[derive(Debug, Clone)]
struct App {
    id: u64,
    public_pem: Vec<u8>,
    installation: u64,
    slug: String,
    permissions: Value,
}

#[derive(Debug, Clone)]
pub struct Status {
    pub sha: String,
    pub state: String,
    pub context: String,
    pub description: String,
}

#[derive(Debug, Clone)]
pub struct Pull {
    pub number: u64,
    /// The head branch.
    pub head: String,
    /// The head commit.
    pub head_sha: String,
    /// `owner/name` of the head's repository (a fork's, or this one).
    pub head_repo: String,
    pub base: String,
    pub title: String,
    pub body: String,
    /// Open (else closed).
    pub open: bool,
}

/// The repository's id, as `Link` URLs name it.
pub const REPO_ID: u64 = 1296269;

#[derive(Default)]
struct State {
    repo: String,
    prefix: String,
    tokens: BTreeMap<String, Account>,
    app: Option<App>,
    comments: BTreeMap<u64, Comment>,
    next_id: u64,
    statuses: Vec<Status>,
    pulls: Vec<Pull>,
    log: Vec<Logged>,
    faults: VecDeque<(String, Fault)>,
    /// A fault for every request whose path contains the string, until cleared.
    always: Option<(String, Fault)>,
    violations: Vec<String>,
}

/// The running stand-in; stops with the test's runtime.
#[derive(Clone)]
pub struct GitHubStandIn {
    pub port: u16,
    state: Arc<Mutex<State>>,
}

fn answer(status: StatusCode, body: Value) -> Response {
    (
        status,
        [("content-type", "application/json; charset=utf-8")],
        body.to_string(),
    )
        .into_response()
}

impl GitHubStandIn {
    /// Serves `repo` (`owner/name`) under `prefix` ("" or "/api/v3"), accepting `token`.
    pub async fn start(repo: &str, prefix: &str, token: &str) -> GitHubStandIn {
        let state = Arc::new(Mutex::new(State {
            repo: repo.into(),
            prefix: prefix.into(),
            tokens: [(
                token.to_string(),
                Account {
                    user: capstan_bot(),
                    kind: TokenKind::Classic("repo".into()),
                    push: true,
                },
            )]
            .into(),
            next_id: 1000,
            ..Default::default()
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let s = state.clone();
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let s = s.clone();
                async move { handle(&s, method, uri, headers, body) }
            },
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        GitHubStandIn { port, state }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// The API URL to give capstan.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}{}", self.port, self.lock().prefix)
    }

    /// Accepts a GitHub App's installation (its public key, PEM), with the permissions capstan
    /// needs; its slug is `capstan-fleet`.
    pub fn add_app(&self, app_id: u64, public_pem: &[u8], installation: u64) {
        self.lock().app = Some(App {
            id: app_id,
            public_pem: public_pem.to_vec(),
            installation,
            slug: "capstan-fleet".into(),
            permissions: json!({"metadata": "read", "contents": "read", "pull_requests": "write", "statuses": "write"}),
        });
    }

    /// The installation's permissions (`{"contents": "write", …}`) from now on.
    pub fn set_app_permissions(&self, permissions: Value) {
        if let Some(app) = self.lock().app.as_mut() {
            app.permissions = permissions;
        }
    }

    /// The App's bot user, as its installation tokens write.
    pub fn app_bot(&self) -> User {
        let s = self.lock();
        let app = s.app.as_ref().expect("no App added");
        bot_of(app)
    }

    /// Accepts another token, of `account`.
    pub fn add_token(&self, token: &str, account: Account) {
        self.lock().tokens.insert(token.into(), account);
    }

    /// A comment on `issue` written by `author` (someone else than capstan, on GitHub's site);
    /// its id.
    pub fn comment_as(&self, issue: u64, author: User, body: &str) -> u64 {
        let mut s = self.lock();
        let id = s.next_id;
        s.next_id += 1;
        s.comments.insert(
            id,
            Comment {
                id,
                issue,
                body: body.into(),
                author,
            },
        );
        id
    }

    /// The comment `id` as it stands.
    pub fn comment(&self, id: u64) -> Option<Comment> {
        self.lock().comments.get(&id).cloned()
    }

    /// Answers the next request whose path contains `path` with `fault`.
    pub fn fault_once(&self, path: &str, fault: Fault) {
        self.lock().faults.push_back((path.into(), fault));
    }

    /// Answers every request whose path contains `path` with `fault` (None: stop).
    pub fn fault_always(&self, fault: Option<(&str, Fault)>) {
        self.lock().always = fault.map(|(p, f)| (p.to_string(), f));
    }

    pub fn comments(&self, issue: u64) -> Vec<Comment> {
        self.lock()
            .comments
            .values()
            .filter(|c| c.issue == issue)
            .cloned()
            .collect()
    }

    pub fn statuses(&self) -> Vec<Status> {
        self.lock().statuses.clone()
    }

    /// The newest status of `context` on `sha`.
    pub fn status(&self, sha: &str, context: &str) -> Option<Status> {
        self.lock()
            .statuses
            .iter()
            .rev()
            .find(|s| s.sha == sha && s.context == context)
            .cloned()
    }

    pub fn pulls(&self) -> Vec<Pull> {
        self.lock().pulls.clone()
    }

    /// A pull request opened on GitHub (by someone else than capstan): `pr-<number>` at
    /// `head_sha` into `base`, from this repository or from the fork `head_repo`.
    pub fn open_pull(&self, number: u64, head_sha: &str, base: &str, head_repo: Option<&str>) {
        let mut s = self.lock();
        assert!(
            s.pulls.iter().all(|p| p.number != number),
            "#{number} exists"
        );
        let head_repo = head_repo.map_or_else(|| s.repo.clone(), str::to_string);
        s.pulls.push(Pull {
            number,
            head: format!("pr-{number}"),
            head_sha: head_sha.into(),
            head_repo,
            base: base.into(),
            title: format!("PR {number}"),
            body: String::new(),
            open: true,
        });
    }

    /// A pull request pushed to (its head moves).
    pub fn push_pull(&self, number: u64, head_sha: &str) {
        let mut s = self.lock();
        let p = s.pulls.iter_mut().find(|p| p.number == number).unwrap();
        p.head_sha = head_sha.into();
    }

    /// A pull request closed (or merged).
    pub fn close_pull(&self, number: u64) {
        let mut s = self.lock();
        let p = s.pulls.iter_mut().find(|p| p.number == number).unwrap();
        p.open = false;
    }

    pub fn log(&self) -> Vec<Logged> {
        self.lock().log.clone()
    }

    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    /// Waits (bounded) until `until` holds for the stand-in, re-checking as requests arrive.
    pub async fn wait(&self, what: &str, until: impl Fn(&GitHubStandIn) -> bool) {
        let start = std::time::Instant::now();
        while !until(self) {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(120),
                "GitHub stand-in: never saw {what}; log: {:#?}",
                self.log()
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

fn handle(
    state: &Mutex<State>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut s = state.lock().unwrap();
    let full = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let parsed: Value = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap_or(json!("<not JSON>"))
    };
    let prefix = s.prefix.clone();
    let Some(rest) = full.strip_prefix(&prefix) else {
        s.violations
            .push(format!("{method} {full}: not under {prefix}"));
        return answer(StatusCode::NOT_FOUND, json!({"message": "Not Found"}));
    };
    let rest = rest.to_string();
    let resp = route(&mut s, &method, &rest, &headers, &parsed);
    let status = resp.0.as_u16();
    s.log.push(Logged {
        method: method.to_string(),
        path: rest,
        status,
        body: parsed,
    });
    let mut r = answer(resp.0, resp.1);
    for (k, v) in resp.2 {
        r.headers_mut().insert(k, v.parse().unwrap());
    }
    r
}

type Answer = (StatusCode, Value, Vec<(&'static str, String)>);

fn plain(status: StatusCode, body: Value) -> Answer {
    (status, body, Vec::new())
}

fn violation(s: &mut State, what: String) -> Answer {
    s.violations.push(what.clone());
    plain(
        StatusCode::UNPROCESSABLE_ENTITY,
        json!({"message": "Validation Failed", "errors": [what]}),
    )
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

fn route(s: &mut State, method: &Method, full: &str, h: &HeaderMap, body: &Value) -> Answer {
    let (path, query) = full.split_once('?').unwrap_or((full, ""));
    let query: BTreeMap<&str, &str> = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    // Headers every documented call carries.
    if header(h, "accept") != Some("application/vnd.github+json") {
        let got = header(h, "accept").unwrap_or("none").to_string();
        return violation(s, format!("{method} {path}: Accept is {got}"));
    }
    if header(h, "x-github-api-version") != Some("2022-11-28") {
        return violation(
            s,
            format!("{method} {path}: no X-GitHub-Api-Version: 2022-11-28"),
        );
    }
    if header(h, "user-agent").is_none_or(str::is_empty) {
        return violation(s, format!("{method} {path}: no User-Agent"));
    }
    let auth = header(h, "authorization").unwrap_or("");
    let bearer = auth
        .strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("token "))
        .unwrap_or("");
    // GitHub Apps: the JWT buys an installation token, and reads the App and its installation.
    if path == "/app" || path.starts_with("/app/") {
        return app_route(s, method, path, bearer);
    }
    let Some(account) = s.tokens.get(bearer).cloned() else {
        s.violations.push(format!(
            "{method} {path}: Authorization {auth:?} is not a known token"
        ));
        return plain(
            StatusCode::UNAUTHORIZED,
            json!({"message": "Bad credentials"}),
        );
    };
    let mut answer = as_account(s, method, path, &query, h, body, &account);
    // GitHub tells a classic token's scopes in every answer.
    if let TokenKind::Classic(scopes) = &account.kind
        && !answer.2.iter().any(|(k, _)| *k == "x-oauth-scopes")
    {
        answer.2.push(("x-oauth-scopes", scopes.clone()));
    }
    answer
}

/// A request with a token GitHub knows, by `account`.
fn as_account(
    s: &mut State,
    method: &Method,
    path: &str,
    query: &BTreeMap<&str, &str>,
    h: &HeaderMap,
    body: &Value,
    account: &Account,
) -> Answer {
    // Injected faults, answered as GitHub does.
    let fault = match s.faults.iter().position(|(p, _)| path.contains(p.as_str())) {
        Some(i) => s.faults.remove(i).map(|(_, f)| f),
        None => s
            .always
            .as_ref()
            .filter(|(p, _)| path.contains(p.as_str()))
            .map(|(_, f)| *f),
    };
    match fault {
        Some(Fault::RateLimit) => {
            let reset = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                + 1;
            return (
                StatusCode::FORBIDDEN,
                json!({"message": "API rate limit exceeded for installation.", "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}),
                vec![
                    ("x-ratelimit-remaining", "0".into()),
                    ("x-ratelimit-reset", reset.to_string()),
                ],
            );
        }
        Some(Fault::ServerError) => {
            return plain(StatusCode::BAD_GATEWAY, json!({"message": "Server Error"}));
        }
        Some(Fault::MissingScope) => {
            return (
                StatusCode::FORBIDDEN,
                json!({"message": "Resource not accessible by personal access token", "documentation_url": "https://docs.github.com/rest"}),
                vec![
                    ("x-accepted-oauth-scopes", "repo, repo:status".into()),
                    ("x-oauth-scopes", "read:org".into()),
                ],
            );
        }
        None => {}
    }
    if path == "/user" {
        if *method != Method::GET {
            return violation(s, format!("{method} /user: capstan only reads it"));
        }
        if account.kind == TokenKind::Installation {
            return plain(
                StatusCode::FORBIDDEN,
                json!({"message": "Resource not accessible by integration", "documentation_url": "https://docs.github.com/rest/users/users#get-the-authenticated-user", "status": "403"}),
            );
        }
        let mut u = account.user.json();
        u["name"] = json!(null);
        return plain(StatusCode::OK, u);
    }
    if path == format!("/repos/{}", s.repo) {
        if *method != Method::GET {
            return violation(
                s,
                format!("{method} {path}: capstan only reads the repository"),
            );
        }
        let mut r = json!({"id": REPO_ID, "full_name": s.repo, "private": true, "visibility": "private", "default_branch": "main"});
        if account.kind != TokenKind::Installation {
            let push = account.push;
            r["permissions"] = json!({"admin": false, "maintain": false, "push": push, "triage": true, "pull": true});
        }
        return plain(StatusCode::OK, r);
    }
    repo_route(s, method, path, query, h, body, account)
}

/// `/repos/{owner}/{repo}/…` (or `/repositories/{id}/…`, as `Link` headers name it): statuses,
/// comments, pull requests.
fn repo_route(
    s: &mut State,
    method: &Method,
    path: &str,
    query: &BTreeMap<&str, &str>,
    h: &HeaderMap,
    body: &Value,
    account: &Account,
) -> Answer {
    let repo_prefix = format!("/repos/{}/", s.repo);
    let by_id = format!("/repositories/{REPO_ID}/");
    let Some(rest) = path
        .strip_prefix(&repo_prefix)
        .or_else(|| path.strip_prefix(&by_id))
    else {
        s.violations
            .push(format!("{method} {path}: not a path of /repos/{}", s.repo));
        return plain(StatusCode::NOT_FOUND, json!({"message": "Not Found"}));
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let str_field = |b: &Value, k: &str| b.get(k).and_then(Value::as_str).map(str::to_string);
    match (method.clone(), parts.as_slice()) {
        (Method::POST, ["statuses", sha]) => {
            if sha.len() != 40 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
                return violation(s, format!("statuses: {sha} is not a commit id"));
            }
            let state = str_field(body, "state").unwrap_or_default();
            if !["pending", "success", "failure", "error"].contains(&state.as_str()) {
                return violation(s, format!("statuses: state {state:?}"));
            }
            let description = str_field(body, "description").unwrap_or_default();
            if description.chars().count() > 140 {
                return violation(s, "statuses: description over 140 characters".into());
            }
            if let Some(extra) = body.as_object().and_then(|o| {
                o.keys().find(|k| {
                    !["state", "target_url", "description", "context"].contains(&k.as_str())
                })
            }) {
                return violation(s, format!("statuses: unknown field {extra}"));
            }
            let context = str_field(body, "context").unwrap_or_else(|| "default".into());
            s.statuses.push(Status {
                sha: sha.to_string(),
                state: state.clone(),
                context: context.clone(),
                description: description.clone(),
            });
            plain(
                StatusCode::CREATED,
                json!({"state": state, "context": context, "description": description, "id": s.statuses.len()}),
            )
        }
        (Method::GET, ["issues", n, "comments"]) => {
            let n: u64 = n.parse().unwrap_or(0);
            let per_page: usize = query
                .get("per_page")
                .and_then(|v| v.parse().ok())
                .unwrap_or(30);
            let page: usize = query.get("page").and_then(|v| v.parse().ok()).unwrap_or(1);
            if per_page > 100 {
                return violation(s, "comments: per_page over 100".into());
            }
            let all: Vec<Value> = s
                .comments
                .values()
                .filter(|c| c.issue == n)
                .map(comment_json)
                .collect();
            let items: Vec<Value> = all
                .into_iter()
                .skip((page - 1) * per_page)
                .take(per_page)
                .collect();
            plain(StatusCode::OK, Value::Array(items))
        }
        (Method::POST, ["issues", n, "comments"]) => {
            let Some(text) = str_field(body, "body") else {
                return violation(s, "comments: no body".into());
            };
            if text.chars().count() > 65_536 {
                return violation(
                    s,
                    "comments: body is too long (maximum is 65536 characters)".into(),
                );
            }
            let id = s.next_id;
            s.next_id += 1;
            let issue: u64 = n.parse().unwrap_or(0);
            let c = Comment {
                id,
                issue,
                body: text,
                author: account.user.clone(),
            };
            let j = comment_json(&c);
            s.comments.insert(id, c);
            plain(StatusCode::CREATED, j)
        }
        (Method::PATCH, ["issues", "comments", id]) => {
            let Some(text) = str_field(body, "body") else {
                return violation(s, "comments: no body".into());
            };
            if text.chars().count() > 65_536 {
                return violation(s, "comments: body is too long".into());
            }
            let id: u64 = id.parse().unwrap_or(0);
            match s.comments.get_mut(&id) {
                Some(c) => {
                    c.body = text;
                    let j = comment_json(c);
                    plain(StatusCode::OK, j)
                }
                None => plain(StatusCode::NOT_FOUND, json!({"message": "Not Found"})),
            }
        }
        (Method::GET, ["pulls"]) => list_pulls(s, query, header(h, "host").unwrap_or("")),
        (Method::POST, ["pulls"]) => {
            let (Some(title), Some(head), Some(base)) = (
                str_field(body, "title"),
                str_field(body, "head"),
                str_field(body, "base"),
            ) else {
                return violation(s, "pulls: title, head and base are required".into());
            };
            if s.pulls.iter().any(|p| p.head == head && p.base == base) {
                return plain(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    json!({"message": "Validation Failed", "errors": [{"message": format!("A pull request already exists for {head}.")}]}),
                );
            }
            let number = s.pulls.iter().map(|p| p.number).max().unwrap_or(0) + 1;
            let p = Pull {
                number,
                head_sha: format!("{number:040x}"),
                head_repo: s.repo.clone(),
                head,
                base,
                title,
                body: str_field(body, "body").unwrap_or_default(),
                open: true,
            };
            let j = pull_json(&s.repo, &p);
            s.pulls.push(p);
            plain(StatusCode::CREATED, j)
        }
        (Method::PATCH, ["pulls", n]) => {
            let n: u64 = n.parse().unwrap_or(0);
            let repo = s.repo.clone();
            match s.pulls.iter_mut().find(|p| p.number == n) {
                Some(p) => {
                    if let Some(t) = str_field(body, "title") {
                        p.title = t;
                    }
                    if let Some(b) = str_field(body, "body") {
                        p.body = b;
                    }
                    let j = pull_json(&repo, p);
                    plain(StatusCode::OK, j)
                }
                None => plain(StatusCode::NOT_FOUND, json!({"message": "Not Found"})),
            }
        }
        _ => {
            s.violations.push(format!(
                "{method} {path}: not an endpoint capstan should call"
            ));
            plain(StatusCode::NOT_FOUND, json!({"message": "Not Found"}))
        }
    }
}

/// A comment as GitHub returns it (the fields a client reads).
fn comment_json(c: &Comment) -> Value {
    json!({
        "id": c.id,
        "body": c.body,
        "user": c.author.json(),
        "author_association": "NONE",
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    })
}

fn bot_of(app: &App) -> User {
    User {
        login: format!("{}[bot]", app.slug),
        id: 41_000_000 + app.id,
        kind: "Bot",
    }
}

/// `/app…`: what a GitHub App asks with its JWT (RS256, issuer = app id): `POST
/// /app/installations/{id}/access_tokens`, `GET /app`, `GET /app/installations/{id}`.
fn app_route(s: &mut State, method: &Method, path: &str, bearer: &str) -> Answer {
    let Some(app) = s.app.clone() else {
        return violation(s, format!("{path}: no GitHub App configured"));
    };
    use octocrab::jsonwebtoken::{Algorithm, DecodingKey, Validation, decode};
    let key = DecodingKey::from_rsa_pem(&app.public_pem).unwrap();
    let mut v = Validation::new(Algorithm::RS256);
    v.set_required_spec_claims(&["exp", "iat"]);
    v.validate_aud = false;
    let claims = match decode::<Value>(bearer, &key, &v) {
        Ok(d) => d.claims,
        Err(e) => {
            s.violations
                .push(format!("{method} {path}: bad App JWT: {e}"));
            return plain(
                StatusCode::UNAUTHORIZED,
                json!({"message": "A JSON web token could not be decoded"}),
            );
        }
    };
    if claims["iss"] != json!(app.id.to_string()) && claims["iss"] != json!(app.id) {
        return violation(s, format!("{path}: JWT issuer {}", claims["iss"]));
    }
    let installation = format!("/app/installations/{}", app.installation);
    match (method.clone(), path) {
        (Method::GET, "/app") => plain(
            StatusCode::OK,
            json!({"id": app.id, "slug": app.slug, "name": "capstan fleet", "owner": {"login": "acme", "id": 1, "type": "Organization"}, "permissions": app.permissions}),
        ),
        (Method::GET, p) if p == installation => plain(
            StatusCode::OK,
            json!({"id": app.installation, "app_id": app.id, "app_slug": app.slug, "account": {"login": "acme", "id": 1, "type": "Organization"}, "repository_selection": "selected", "permissions": app.permissions}),
        ),
        (Method::POST, p) if p == format!("{installation}/access_tokens") => {
            let token = format!("ghs_installation_{}", s.tokens.len());
            s.tokens.insert(
                token.clone(),
                Account {
                    user: bot_of(&app),
                    kind: TokenKind::Installation,
                    push: false,
                },
            );
            plain(
                StatusCode::CREATED,
                json!({"token": token, "expires_at": "2099-01-01T00:00:00Z", "permissions": app.permissions}),
            )
        }
        _ => violation(
            s,
            format!(
                "{method} {path}: not an App endpoint capstan should call, or another installation"
            ),
        ),
    }
}

/// `GET /repos/{owner}/{repo}/pulls`, with the documented query parameters checked; a page of
/// them, and a `Link` header when there are others.
fn list_pulls(s: &mut State, query: &BTreeMap<&str, &str>, host: &str) -> Answer {
    const KNOWN: [&str; 7] = [
        "state",
        "head",
        "base",
        "sort",
        "direction",
        "per_page",
        "page",
    ];
    if let Some(k) = query.keys().find(|k| !KNOWN.contains(k)) {
        return violation(s, format!("pulls: unknown query parameter {k}"));
    }
    let state = query.get("state").copied().unwrap_or("open");
    if !["open", "closed", "all"].contains(&state) {
        return violation(s, format!("pulls: state {state:?}"));
    }
    let sort = query.get("sort").copied().unwrap_or("created");
    if !["created", "updated", "popularity", "long-running"].contains(&sort) {
        return violation(s, format!("pulls: sort {sort:?}"));
    }
    let direction = query.get("direction").copied().unwrap_or("desc");
    if !["asc", "desc"].contains(&direction) {
        return violation(s, format!("pulls: direction {direction:?}"));
    }
    let number = |k: &str, default: usize| match query.get(k) {
        None => Some(default),
        Some(v) => v.parse::<usize>().ok().filter(|n| *n >= 1),
    };
    let (Some(per_page), Some(page)) = (number("per_page", 30), number("page", 1)) else {
        return violation(s, "pulls: per_page and page are positive integers".into());
    };
    if per_page > 100 {
        return violation(s, "pulls: per_page over 100".into());
    }
    let head = query.get("head").copied().unwrap_or("");
    let base = query.get("base").copied();
    let owner = s.repo.split('/').next().unwrap_or("").to_string();
    let mut all: Vec<&Pull> = s
        .pulls
        .iter()
        .filter(|p| state == "all" || (state == "open") == p.open)
        .filter(|p| head.is_empty() || format!("{owner}:{}", p.head) == head)
        .filter(|p| base.is_none_or(|b| b == p.base))
        .collect();
    // Numbers grow with creation: "created" order (the stand-in orders every sort so).
    all.sort_by_key(|p| p.number);
    if direction == "desc" {
        all.reverse();
    }
    let pages = all.len().div_ceil(per_page).max(1);
    let items: Vec<Value> = all
        .iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .map(|p| pull_json(&s.repo, p))
        .collect();
    // GitHub's links keep the query but the page, and name the repository by id.
    let link = |n: usize, rel: &str| {
        let mut q: Vec<String> = query
            .iter()
            .filter(|(k, _)| **k != "page")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        q.push(format!("page={n}"));
        format!(
            "<http://{host}{}/repositories/{REPO_ID}/pulls?{}>; rel=\"{rel}\"",
            s.prefix,
            q.join("&")
        )
    };
    let mut links = Vec::new();
    if page > 1 {
        links.push(link(page - 1, "prev"));
    }
    if page < pages {
        links.push(link(page + 1, "next"));
        links.push(link(pages, "last"));
    }
    if page > 1 {
        links.push(link(1, "first"));
    }
    let headers = if links.is_empty() {
        Vec::new()
    } else {
        vec![("link", links.join(", "))]
    };
    (StatusCode::OK, Value::Array(items), headers)
}

/// A pull request as GitHub lists and returns it (the fields a client reads).
fn pull_json(repo: &str, p: &Pull) -> Value {
    let owner = |r: &str| r.split('/').next().unwrap_or("").to_string();
    json!({
        "url": format!("https://api.github.example/repos/{repo}/pulls/{}", p.number),
        "id": 10_000 + p.number,
        "number": p.number,
        "html_url": format!("https://github.example/{repo}/pull/{}", p.number),
        "title": p.title,
        "body": p.body,
        "state": if p.open { "open" } else { "closed" },
        "draft": false,
        "locked": false,
        "user": {"login": "octocat"},
        "head": {
            "label": format!("{}:{}", owner(&p.head_repo), p.head),
            "ref": p.head,
            "sha": p.head_sha,
            "repo": {"full_name": p.head_repo, "fork": p.head_repo != repo},
        },
        "base": {
            "label": format!("{}:{}", owner(repo), p.base),
            "ref": p.base,
            "repo": {"full_name": repo, "id": REPO_ID, "fork": false},
        },
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
        "closed_at": if p.open { Value::Null } else { json!("2026-01-02T00:00:00Z") },
    })
}
