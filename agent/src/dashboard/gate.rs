//! The dashboard's gate: the middleware every request passes ([`guard`], then [`check`] on the
//! pages) and the sign-in and sign-out handlers, carrying out [`super::access`]'s rules with the
//! dashboard's sessions and pages.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Form, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use minijinja::context;
use serde::Deserialize;

use super::access::{Access, LOCAL_USER, Local, SESSION_OVER, TOKEN_REFUSED, Who};
use super::auth::{Reviewer, Verdict, token_of};
use super::server::Dashboard;

/// The guards of every request, before any route: the `Host` (`capstan dashboard`), then the
/// origin of what changes something.
pub async fn guard(State(d): State<Arc<Dashboard>>, req: Request, next: Next) -> Response {
    if let Access::Local(l) = &d.access
        && let Err(e) = l.hosts().check(req.uri(), req.headers())
    {
        return (StatusCode::FORBIDDEN, e.to_string()).into_response();
    }
    if let Err(e) = super::guard::check(req.method(), req.headers()) {
        return (StatusCode::FORBIDDEN, e.to_string()).into_response();
    }
    next.run(req).await
}

/// What [`check`] decided.
enum Admission {
    /// Let in, made by this.
    In(Who),
    /// Answered here.
    Answered(Response),
}

/// Lets a request through with who made it ([`Who`] in its extensions), or answers it: the
/// sign-in form (401), a user who may not see the fleet (403), the API server away (503);
/// for `capstan dashboard` the locked page (401), or a link's token exchanged for a session.
pub async fn check(State(d): State<Arc<Dashboard>>, mut req: Request, next: Next) -> Response {
    let admitted = match &d.access {
        Access::Local(l) => admit_local(&d, l, &req),
        Access::Reviewed { reviewer, .. } => admit_reviewed(&d, reviewer, req.headers()).await,
    };
    match admitted {
        Admission::In(who) => {
            req.extensions_mut().insert(who);
            next.run(req).await
        }
        Admission::Answered(answer) => answer,
    }
}

fn admit_local(d: &Dashboard, l: &Local, req: &Request) -> Admission {
    let who = |session| Who {
        user: None,
        key: LOCAL_USER.into(),
        session,
        token: None,
    };
    let query: HashMap<String, String> = Query::try_from_uri(req.uri())
        .map(|Query(q)| q)
        .unwrap_or_default();
    if let Some(token) = query.get("token") {
        return Admission::Answered(if l.admits(token) {
            enter(d, req.uri())
        } else {
            d.locked(Some("That link's token is not this run's."))
        });
    }
    if let Some(t) = token_of(req.headers()) {
        return if l.admits(&t) {
            Admission::In(who(None))
        } else {
            Admission::Answered(d.locked(Some("That token is not this run's.")))
        };
    }
    match d.access.cookie().of(req.headers()) {
        Some(id) if d.sessions.get(&id).is_some() => Admission::In(who(Some(id))),
        Some(_) => Admission::Answered(d.locked(Some(SESSION_OVER))),
        None => Admission::Answered(d.locked(None)),
    }
}

/// The link's token was this run's: a session, its cookie, and a page that goes on to the
/// same address without the token (a `refresh`, so that the request after it is the page's
/// own and carries the `SameSite=Strict` cookie even when the link was opened from a file).
fn enter(d: &Dashboard, uri: &axum::http::Uri) -> Response {
    let id = match d.sessions.create(LOCAL_USER, None) {
        Ok(id) => id,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    let rest: Vec<&str> = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty() && kv.split('=').next() != Some("token"))
        .collect();
    // One leading slash: `//host/` would leave for another host.
    let mut next = format!("/{}", uri.path().trim_start_matches('/'));
    if !rest.is_empty() {
        next = format!("{next}?{}", rest.join("&"));
    }
    let mut r = d.page("enter.html", &Who::nobody(), "", context! { next });
    r.headers_mut().insert(
        header::SET_COOKIE,
        d.access.cookie().set(&id, d.sessions.limits().lifetime),
    );
    r
}

async fn admit_reviewed(d: &Dashboard, reviewer: &Reviewer, headers: &HeaderMap) -> Admission {
    let (token, session) = match token_of(headers) {
        Some(t) => (t, None),
        None => match d.access.cookie().of(headers) {
            None => return Admission::Answered(d.sign_in(None)),
            Some(id) => match d.sessions.get(&id).and_then(|s| s.token) {
                Some(t) => (t, Some(id)),
                None => return Admission::Answered(ended(d, d.sign_in(Some(SESSION_OVER)))),
            },
        },
    };
    let refused = |answer: Response| {
        if let Some(id) = &session {
            d.sessions.end(id);
            return ended(d, answer);
        }
        answer
    };
    match reviewer.review(&token).await {
        Ok(Verdict::Allowed(user)) => Admission::In(Who {
            user: Some(user.clone()),
            key: user,
            session,
            token: Some(token),
        }),
        Ok(Verdict::Unauthenticated) => {
            Admission::Answered(refused(d.sign_in(Some(TOKEN_REFUSED))))
        }
        Ok(Verdict::Forbidden(user)) => Admission::Answered(refused(
            (
                StatusCode::FORBIDDEN,
                format!("{user} may not list managedclusters.capstan.dev in capstan-system"),
            )
                .into_response(),
        )),
        Err(e) => {
            tracing::warn!(error = %e, "dashboard: reviewing a token");
            Admission::Answered(
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the API server could not review the token",
                )
                    .into_response(),
            )
        }
    }
}

/// `answer` with the session cookie cleared.
fn ended(d: &Dashboard, mut answer: Response) -> Response {
    answer
        .headers_mut()
        .insert(header::SET_COOKIE, d.access.cookie().clear());
    answer
}

impl Dashboard {
    /// Whether the request `who` made may still be answered (an open event stream asks): its
    /// session live, its token still allowed. A review that could not be made keeps it.
    pub async fn still(&self, who: &Who) -> bool {
        if let Some(id) = &who.session
            && self.sessions.peek(id).is_none()
        {
            return false;
        }
        match (&self.access, &who.token) {
            (Access::Reviewed { reviewer, .. }, Some(t)) => !matches!(
                reviewer.review(t).await,
                Ok(Verdict::Unauthenticated | Verdict::Forbidden(_))
            ),
            _ => true,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Problem {
    problem: String,
}

/// `GET /login`: the form.
pub async fn login_form(State(d): State<Arc<Dashboard>>, Query(p): Query<Problem>) -> Response {
    let problem = match p.problem.as_str() {
        "token" => Some(TOKEN_REFUSED),
        "busy" => Some("The API server could not review the token now; try again."),
        _ => None,
    };
    d.page("login.html", &Who::nobody(), "", context! { problem })
}

#[derive(Deserialize)]
pub struct Login {
    token: String,
}

/// `POST /login`: a pasted token the API server allows becomes a session; the browser gets its
/// id (the guard already refused a form from another origin).
pub async fn login(
    State(d): State<Arc<Dashboard>>,
    headers: HeaderMap,
    Form(l): Form<Login>,
) -> Response {
    let Access::Reviewed { reviewer, .. } = &d.access else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let token = l.token.trim();
    if token.is_empty() || token.len() > 16 * 1024 || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Redirect::to("/login?problem=token").into_response();
    }
    let user = match reviewer.review(token).await {
        Ok(Verdict::Allowed(user)) => user,
        Ok(_) => return Redirect::to("/login?problem=token").into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "dashboard: reviewing a token at sign-in");
            return Redirect::to("/login?problem=busy").into_response();
        }
    };
    let cookie = d.access.cookie();
    if let Some(old) = cookie.of(&headers) {
        d.sessions.end(&old);
    }
    let id = match d.sessions.create(&user, Some(token.to_string())) {
        Ok(id) => id,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    let mut r = Redirect::to("/").into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        cookie.set(&id, d.sessions.limits().lifetime),
    );
    r
}

/// `POST /logout`: the session is deleted here (a copy of its id stops working too) and the
/// cookie cleared.
pub async fn logout(State(d): State<Arc<Dashboard>>, headers: HeaderMap) -> Response {
    let cookie = d.access.cookie();
    if let Some(id) = cookie.of(&headers) {
        d.sessions.end(&id);
    }
    let to = match d.access {
        Access::Reviewed { .. } => "/login",
        Access::Local(_) => "/",
    };
    let mut r = Redirect::to(to).into_response();
    r.headers_mut().insert(header::SET_COOKIE, cookie.clear());
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::Watched;
    use crate::dashboard::routes::router;
    use crate::dashboard::server::Limits;
    use axum::Router;
    use axum::body::Body;
    use futures::StreamExt;
    use tower::ServiceExt;

    const HOST: &str = "127.0.0.1:8480";
    const SECRET: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const SAME_ORIGIN: (&str, &str) = ("sec-fetch-site", "same-origin");

    /// `capstan dashboard` on 127.0.0.1:8480 with secret [`SECRET`].
    fn local(limits: Limits) -> (Arc<Dashboard>, Router) {
        let d = Dashboard::with_limits(
            Watched::fixed(Vec::new(), Vec::new()),
            Access::Local(Local::with_token(HOST.parse().unwrap(), SECRET)),
            None,
            None,
            limits,
        );
        (d.clone(), router(d))
    }

    async fn answer(app: &Router, method: &str, uri: &str, headers: &[(&str, &str)]) -> Response {
        let mut req = axum::http::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        app.clone()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    async fn send(
        app: &Router,
        method: &str,
        uri: &str,
        headers: &[(&str, &str)],
    ) -> (StatusCode, HeaderMap, String) {
        let (parts, body) = answer(app, method, uri, headers).await.into_parts();
        let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
        (
            parts.status,
            parts.headers,
            String::from_utf8_lossy(&body).into(),
        )
    }

    /// The session id a `Set-Cookie` sets.
    fn session_of(h: &HeaderMap) -> String {
        let c = h[header::SET_COOKIE].to_str().unwrap();
        let id = c.strip_prefix("capstan_local_8480=").unwrap();
        id.split(';').next().unwrap().to_string()
    }

    #[tokio::test]
    async fn capstan_dashboard_lets_in_only_its_printed_link_on_its_own_host() {
        let (d, app) = local(Limits::default());
        let host = ("host", HOST);
        // Nothing, a wrong token, a token that is not the secret: the locked page, 401.
        for (uri, auth) in [
            ("/", None),
            ("/?token=0000", None),
            (&format!("/?token={SECRET}x")[..], None),
            ("/", Some("Bearer wrong")),
            ("/", Some(&format!("Bearer {SECRET}0")[..])),
            ("/events", None),
            ("/clusters/w-1", None),
        ] {
            let mut h = vec![host];
            let bearer;
            if let Some(a) = auth {
                bearer = a.to_string();
                h.push(("authorization", &bearer));
            }
            let (s, _, body) = send(&app, "GET", uri, &h).await;
            assert_eq!(s, StatusCode::UNAUTHORIZED, "{uri} {auth:?}");
            assert!(body.contains("Open the printed link"), "{body}");
        }
        assert_eq!(d.sessions(), 0);
        // The printed link: a session, its cookie, and the same page again without the token.
        let (s, h, body) = send(
            &app,
            "GET",
            &format!("/?phase=Ready&token={SECRET}"),
            &[host],
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{body}");
        let cookie = h[header::SET_COOKIE].to_str().unwrap();
        let id = session_of(&h);
        assert_eq!(id.len(), 64);
        assert_ne!(id, SECRET);
        assert_eq!(
            cookie,
            format!("capstan_local_8480={id}; Path=/; Max-Age=28800; HttpOnly; SameSite=Strict")
        );
        // (minijinja writes `/` as `&#x2f;`; the browser reads it back.)
        assert!(
            body.contains(r#"content="0; url=&#x2f;?phase=Ready""#),
            "{body}"
        );
        assert!(
            !body.contains(SECRET),
            "the token leaves the address: {body}"
        );
        // The cookie lets in; so does the secret as a bearer token.
        let with_cookie = format!("capstan_local_8480={id}");
        let (s, _, body) = send(&app, "GET", "/", &[host, ("cookie", &with_cookie)]).await;
        assert_eq!(s, StatusCode::OK, "{body}");
        assert!(body.contains("Sign out"), "{body}");
        let bearer = format!("Bearer {SECRET}");
        for h in ["127.0.0.1:8480", "localhost:8480", "[::1]:8480"] {
            let (s, _, _) = send(
                &app,
                "GET",
                "/waves",
                &[("host", h), ("authorization", &bearer)],
            )
            .await;
            assert_eq!(s, StatusCode::OK, "{h}");
        }
        // Another Host — DNS rebinding, another port, none — is refused whatever it brings.
        for h in [
            "evil.example:8480",
            "127.0.0.1:8481",
            "127.0.0.1.nip.io:8480",
        ] {
            for creds in [
                ("cookie", with_cookie.as_str()),
                ("authorization", bearer.as_str()),
            ] {
                let (s, _, body) = send(&app, "GET", "/", &[("host", h), creds]).await;
                assert_eq!(s, StatusCode::FORBIDDEN, "{h}: {body}");
            }
            let (s, _, _) = send(&app, "GET", &format!("/?token={SECRET}"), &[("host", h)]).await;
            assert_eq!(s, StatusCode::FORBIDDEN, "{h}");
            let (s, _, _) = send(&app, "GET", "/assets/dashboard.css", &[("host", h)]).await;
            assert_eq!(s, StatusCode::FORBIDDEN, "{h}");
        }
        let (s, _, _) = send(&app, "GET", "/", &[("cookie", &with_cookie)]).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "no Host");
        // A page's link goes on to that page, its other parameters kept; a path that would
        // leave for another host is no page.
        let (s, _, body) = send(
            &app,
            "GET",
            &format!("/clusters/w-1?token={SECRET}&x=%3Cb%3E"),
            &[host],
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{body}");
        assert!(
            body.contains(r#"url=&#x2f;clusters&#x2f;w-1?x=%3Cb%3E""#),
            "{body}"
        );
        let (s, h, _) = send(
            &app,
            "GET",
            &format!("//evil.example/x?token={SECRET}"),
            &[host],
        )
        .await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        assert!(h.get(header::SET_COOKIE).is_none());
        // No sign-in form here.
        let (s, _, _) = send(&app, "POST", "/login", &[host, SAME_ORIGIN]).await;
        assert_eq!(s, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn signing_out_from_another_origin_is_refused_from_its_own_ends_the_session() {
        let (d, app) = local(Limits::default());
        let host = ("host", HOST);
        let (_, h, _) = send(&app, "GET", &format!("/?token={SECRET}"), &[host]).await;
        let cookie = format!("capstan_local_8480={}", session_of(&h));
        let c = ("cookie", cookie.as_str());
        // A page on another port of the host, another site, a forger without headers.
        for attack in [
            vec![
                host,
                c,
                ("sec-fetch-site", "same-site"),
                ("origin", "http://127.0.0.1:9000"),
            ],
            vec![
                host,
                c,
                ("sec-fetch-site", "cross-site"),
                ("origin", "https://evil.example"),
            ],
            vec![host, c, ("origin", "http://127.0.0.1:9000")],
            vec![host, c, ("origin", "null")],
            vec![host, c],
        ] {
            let (s, h, body) = send(&app, "POST", "/logout", &attack).await;
            assert_eq!(s, StatusCode::FORBIDDEN, "{attack:?}");
            assert!(body.contains("cross-origin"), "{body}");
            assert!(h.get(header::SET_COOKIE).is_none());
        }
        assert_eq!(send(&app, "GET", "/", &[host, c]).await.0, StatusCode::OK);
        // Another port's page may not hold the user's event streams open either.
        let (s, _, _) = send(
            &app,
            "GET",
            "/events",
            &[
                host,
                c,
                ("sec-fetch-site", "same-site"),
                ("sec-fetch-mode", "no-cors"),
                ("sec-fetch-dest", "image"),
            ],
        )
        .await;
        assert_eq!(s, StatusCode::FORBIDDEN);
        // From its own page: the session ends here, the cookie is cleared.
        let (s, h, _) = send(
            &app,
            "POST",
            "/logout",
            &[host, c, SAME_ORIGIN, ("origin", "null")],
        )
        .await;
        assert_eq!(s, StatusCode::SEE_OTHER);
        assert_eq!(
            h[header::SET_COOKIE],
            "capstan_local_8480=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"
        );
        assert_eq!(d.sessions(), 0);
        let (s, _, body) = send(&app, "GET", "/", &[host, c]).await;
        assert_eq!(
            s,
            StatusCode::UNAUTHORIZED,
            "a copied cookie no longer works"
        );
        assert!(body.contains("session is over"), "{body}");
    }

    #[tokio::test]
    async fn a_session_past_its_lifetime_or_idle_time_is_refused() {
        use crate::dashboard::session::SessionLimits;
        let host = ("host", HOST);
        // Sessions that are over as soon as they begin: by their lifetime, by idleness.
        for (lifetime, idle) in [
            (std::time::Duration::ZERO, super::super::session::IDLE),
            (super::super::session::LIFETIME, std::time::Duration::ZERO),
        ] {
            let (d, app) = local(Limits {
                sessions: SessionLimits {
                    lifetime,
                    idle,
                    ..SessionLimits::default()
                },
                ..Limits::default()
            });
            let (s, h, _) = send(&app, "GET", &format!("/?token={SECRET}"), &[host]).await;
            assert_eq!(s, StatusCode::OK);
            assert!(
                h[header::SET_COOKIE]
                    .to_str()
                    .unwrap()
                    .contains(&format!("Max-Age={}", lifetime.as_secs())),
                "the cookie lives as long as the session"
            );
            let cookie = format!("capstan_local_8480={}", session_of(&h));
            let (s, _, body) = send(&app, "GET", "/", &[host, ("cookie", &cookie)]).await;
            assert_eq!(s, StatusCode::UNAUTHORIZED, "{lifetime:?} {idle:?}");
            assert!(body.contains("session is over"), "{body}");
            assert_eq!(d.sessions(), 0, "dropped");
        }
    }

    #[tokio::test]
    async fn event_streams_are_bounded_per_user_and_in_all() {
        let host = ("host", HOST);
        let bearer = format!("Bearer {SECRET}");
        let auth = ("authorization", bearer.as_str());
        let (d, app) = local(Limits {
            streams_per_user: 2,
            ..Limits::default()
        });
        let a = answer(&app, "GET", "/events", &[host, auth]).await;
        let b = answer(&app, "GET", "/events", &[host, auth]).await;
        assert_eq!((a.status(), b.status()), (StatusCode::OK, StatusCode::OK));
        assert_eq!(
            a.headers()[header::CONTENT_TYPE],
            "text/event-stream",
            "a stream"
        );
        // (Statuses only: a stream let through never ends by itself.)
        let third = answer(&app, "GET", "/events", &[host, auth]).await;
        assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
        drop(third);
        assert_eq!(d.streams(), 2);
        // A closed page gives its place back.
        drop(a);
        assert_eq!(d.streams(), 1);
        let c = answer(&app, "GET", "/events", &[host, auth]).await;
        assert_eq!(c.status(), StatusCode::OK);
        drop((b, c));
        // Past the bound of all: 503.
        let (d, app) = local(Limits {
            streams: 2,
            streams_per_user: 10,
            ..Limits::default()
        });
        let open = [
            answer(&app, "GET", "/events", &[host, auth]).await,
            answer(&app, "GET", "/events", &[host, auth]).await,
        ];
        assert!(open.iter().all(|r| r.status() == StatusCode::OK));
        let third = answer(&app, "GET", "/events", &[host, auth]).await;
        assert_eq!(third.status(), StatusCode::SERVICE_UNAVAILABLE);
        drop(third);
        assert_eq!(d.streams(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_stream_ends_when_its_session_does() {
        let (d, app) = local(Limits::default());
        let host = ("host", HOST);
        let (_, h, _) = send(&app, "GET", &format!("/?token={SECRET}"), &[host]).await;
        let cookie = format!("capstan_local_8480={}", session_of(&h));
        let c = ("cookie", cookie.as_str());
        let stream = answer(&app, "GET", "/events", &[host, c, SAME_ORIGIN]).await;
        assert_eq!(stream.status(), StatusCode::OK);
        let mut body = stream.into_body().into_data_stream();
        // It follows changes while the session lasts.
        d.watched().announce();
        let first = body.next().await.unwrap().unwrap();
        assert!(
            String::from_utf8_lossy(&first).contains("data: 1"),
            "{first:?}"
        );
        assert_eq!(
            send(&app, "POST", "/logout", &[host, c, SAME_ORIGIN])
                .await
                .0,
            StatusCode::SEE_OTHER
        );
        // Signed out, the stream ends at its next check: a few keep-alives at most (time
        // here moves only when everything waits).
        let mut frames = 0;
        while let Some(frame) = body.next().await {
            frame.unwrap();
            frames += 1;
            assert!(frames < 5, "the stream outlived its session");
        }
        assert_eq!(d.streams(), 0, "its place given back");
    }
}
