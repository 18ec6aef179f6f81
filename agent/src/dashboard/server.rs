//! The dashboard's routes: pages rendered from [`super::Watched`], the change events, the
//! embedded assets and, when the agent serves it, the sign-in and the check of every request
//! ([`super::auth`]).
//!
//! | route | what |
//! |---|---|
//! | `GET /` | the fleet; `?phase=&management=&wave=&name=` filter it |
//! | `GET /clusters/{name}` | one cluster: control plane, workers, machines, stage, conditions, inventory |
//! | `GET /waves` | clusters by upgrade wave |
//! | `GET /pulls` | the latest plan of each pull request (the PR workflow on) |
//! | `GET /events` | server-sent events: `changed` whenever anything watched changed |
//! | `GET /assets/{file}` | the stylesheet and the script |
//! | `GET`/`POST /login`, `POST /logout` | the token form (agent only) |

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Form, Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use minijinja::{Environment, context};
use serde::Deserialize;

use super::Watched;
use super::auth::{COOKIE, Reviewer, Verdict, token_of};
use super::view;

/// The dashboard: what it watches, its templates, and who checks requests (the agent's; none
/// for `capstan dashboard`, where the user's own kubeconfig already decided what is watched).
pub struct Dashboard {
    watched: Watched,
    env: Environment<'static>,
    reviewer: Option<Reviewer>,
    pulls: Option<crate::github::board::Board>,
    followed: Option<super::Published>,
}

const TEMPLATES: &[(&str, &str)] = &[
    ("base.html", include_str!("templates/base.html")),
    ("badge.html", include_str!("templates/badge.html")),
    ("fleet.html", include_str!("templates/fleet.html")),
    ("cluster.html", include_str!("templates/cluster.html")),
    ("waves.html", include_str!("templates/waves.html")),
    ("login.html", include_str!("templates/login.html")),
    ("pulls.html", include_str!("templates/pulls.html")),
];

const CSS: &str = include_str!("assets/dashboard.css");
const SCRIPT: &str = include_str!("assets/live.js");

/// The user a checked request was made by.
#[derive(Clone)]
struct User(Option<String>);

impl Dashboard {
    /// A dashboard over `watched`; `reviewer` checks every request when set; `pulls`: the pull
    /// requests' plans, when the agent plans them; `followed`: the revision the agent follows
    /// (for the waves' schedules), when it is the agent's.
    pub fn new(
        watched: Watched,
        reviewer: Option<Reviewer>,
        pulls: Option<crate::github::board::Board>,
        followed: Option<super::Published>,
    ) -> Arc<Dashboard> {
        let mut env = Environment::new();
        for (name, text) in TEMPLATES {
            env.add_template(name, text)
                .unwrap_or_else(|e| panic!("dashboard template {name}: {e}"));
        }
        Arc::new(Dashboard {
            watched,
            env,
            reviewer,
            pulls,
            followed,
        })
    }

    fn page(&self, name: &str, user: &User, section: &str, ctx: minijinja::Value) -> Response {
        let base = context! {
            user => user.0.clone(),
            section => section,
            version => *self.watched.changes.borrow(),
            missing => self.watched.missing.clone(),
            limit => view::PAGE_ROWS,
            pulls_on => self.pulls.is_some(),
        };
        match self
            .env
            .get_template(name)
            .and_then(|t| t.render(context! { ..base, ..ctx }))
        {
            Ok(html) => Html(html).into_response(),
            Err(e) => {
                tracing::error!(error = %e, template = name, "dashboard: rendering");
                (StatusCode::INTERNAL_SERVER_ERROR, "rendering failed").into_response()
            }
        }
    }

    /// 401 with the sign-in form (saying `problem`, if any) and the scheme it takes.
    fn sign_in(&self, problem: Option<&str>) -> Response {
        let mut r = self.page("login.html", &User(None), "", context! { problem });
        if r.status() == StatusCode::OK {
            *r.status_mut() = StatusCode::UNAUTHORIZED;
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"capstan\""),
            );
        }
        r
    }

    fn rows(&self) -> Vec<view::Row> {
        view::rows(
            &self.watched.statuses(),
            &self.watched.versions(),
            self.watched.repo.as_deref(),
        )
    }
}

/// A view for a template.
fn value(v: &impl serde::Serialize) -> minijinja::Value {
    minijinja::Value::from(minijinja::value::Serde(v))
}

/// `capstan dashboard`'s server: the pages over what `client` may read (no token checks: the
/// client's own credentials already decided what is watched), on `listener`, until `shutdown`.
pub async fn serve_local(
    client: &kube::Client,
    repo: Option<String>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let watched = Watched::start(client, repo).await;
    let app = router(Dashboard::new(watched, None, None, None));
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// The dashboard's router.
pub fn router(d: Arc<Dashboard>) -> Router {
    let checked = Router::new()
        .route("/", get(fleet))
        .route("/clusters/{name}", get(cluster))
        .route("/waves", get(waves))
        .route("/pulls", get(pulls))
        .route("/events", get(events))
        .route_layer(middleware::from_fn_with_state(d.clone(), check));
    Router::new()
        .merge(checked)
        .route("/login", get(login_form).post(login))
        .route("/logout", axum::routing::post(logout))
        .route("/assets/{file}", get(asset))
        .layer(middleware::from_fn(headers))
        .with_state(d)
}

/// Headers every answer carries: no framing, no sniffing, no referrer with a token in it, and a
/// policy that runs only the dashboard's own script.
async fn headers(req: Request, next: Next) -> Response {
    let mut r = next.run(req).await;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; form-action 'self'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Lets a request through when no reviewer is set, or when its token's user may list
/// ManagedClusters. Without a token the API server accepts, the answer is 401 (what a client
/// of the API expects) with the sign-in form as its body (what a browser shows); a user the
/// API server does not let list ManagedClusters gets 403.
async fn check(State(d): State<Arc<Dashboard>>, mut req: Request, next: Next) -> Response {
    let Some(reviewer) = &d.reviewer else {
        req.extensions_mut().insert(User(None));
        return next.run(req).await;
    };
    let Some(token) = token_of(req.headers()) else {
        return d.sign_in(None);
    };
    match reviewer.review(&token).await {
        Ok(Verdict::Allowed(user)) => {
            req.extensions_mut().insert(User(Some(user)));
            next.run(req).await
        }
        Ok(Verdict::Unauthenticated) => d.sign_in(Some(TOKEN_REFUSED)),
        Ok(Verdict::Forbidden(user)) => (
            StatusCode::FORBIDDEN,
            format!("{user} may not list managedclusters.capstan.dev in capstan-system"),
        )
            .into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "dashboard: reviewing a token");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the API server could not review the token",
            )
                .into_response()
        }
    }
}

async fn fleet(
    State(d): State<Arc<Dashboard>>,
    axum::Extension(user): axum::Extension<User>,
    Query(filter): Query<view::Filter>,
) -> Response {
    let fleet = view::fleet(d.rows(), filter);
    d.page(
        "fleet.html",
        &user,
        "fleet",
        context! { fleet => value(&fleet) },
    )
}

async fn waves(
    State(d): State<Arc<Dashboard>>,
    axum::Extension(user): axum::Extension<User>,
) -> Response {
    let waves = view::waves(&d.rows());
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let schedules = d
        .followed
        .as_ref()
        .and_then(|f| f.get())
        .map(|fleet| view::schedules(&fleet, now));
    d.page(
        "waves.html",
        &user,
        "waves",
        context! { waves => value(&waves), schedules => value(&schedules) },
    )
}

async fn pulls(
    State(d): State<Arc<Dashboard>>,
    axum::Extension(user): axum::Extension<User>,
) -> Response {
    let Some(board) = &d.pulls else {
        return (
            StatusCode::NOT_FOUND,
            "pull-request plans are off (--github-repo)",
        )
            .into_response();
    };
    let pulls = board.all();
    d.page(
        "pulls.html",
        &user,
        "pulls",
        context! { pulls => value(&pulls) },
    )
}

async fn cluster(
    State(d): State<Arc<Dashboard>>,
    axum::Extension(user): axum::Extension<User>,
    Path(name): Path<String>,
) -> Response {
    let Some(mc) = d.watched.status_of(&name) else {
        return (StatusCode::NOT_FOUND, format!("no cluster {name}")).into_response();
    };
    let owners: Vec<serde_json::Value> =
        ["KubeadmControlPlane", "EtcdadmCluster", "MachineDeployment"]
            .iter()
            .flat_map(|k| d.watched.of_cluster(k, &name))
            .collect();
    // Its version, from its own control plane: the others are not read.
    let versions = owners
        .iter()
        .find(|o| o["kind"] == "KubeadmControlPlane")
        .and_then(|o| o.pointer("/spec/version").and_then(|v| v.as_str()))
        .map(|v| [(name.clone(), v.to_string())].into_iter().collect())
        .unwrap_or_default();
    let row = view::rows(
        std::slice::from_ref(&mc),
        &versions,
        d.watched.repo.as_deref(),
    )
    .remove(0);
    let machines = d.watched.of_cluster("Machine", &name);
    let page = view::cluster(&mc, row, &owners, &machines);
    d.page(
        "cluster.html",
        &user,
        "fleet",
        context! { page => value(&page) },
    )
}

/// `changed` whenever the watched state changed, at most every quarter second, and a comment
/// every 15 s so proxies keep the stream open.
async fn events(State(d): State<Arc<Dashboard>>) -> impl IntoResponse {
    let rx = d.watched.changes.clone();
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        tokio::time::sleep(Duration::from_millis(250)).await;
        let n = *rx.borrow_and_update();
        Some((
            Ok::<_, std::convert::Infallible>(Event::default().data(n.to_string())),
            rx,
        ))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

async fn asset(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "dashboard.css" => (CSS, "text/css; charset=utf-8"),
        "live.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Problem {
    problem: String,
}

/// What the sign-in form says of a token the API server did not accept.
const TOKEN_REFUSED: &str = "That token was not accepted by the API server.";

async fn login_form(State(d): State<Arc<Dashboard>>, Query(p): Query<Problem>) -> Response {
    let problem = (p.problem == "token").then_some(TOKEN_REFUSED);
    d.page("login.html", &User(None), "", context! { problem })
}

#[derive(Deserialize)]
struct Login {
    token: String,
}

/// The pasted token becomes an HttpOnly, SameSite=Strict cookie, checked like a header's on
/// every request. The agent serves plain HTTP like its other listeners: a dashboard reached
/// from outside the cluster belongs behind TLS (an ingress, `kubectl port-forward`).
async fn login(State(d): State<Arc<Dashboard>>, Form(l): Form<Login>) -> Response {
    let token = l.token.trim();
    if token.is_empty() || token.len() > 16 * 1024 || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Redirect::to("/login?problem=token").into_response();
    }
    if let Some(r) = &d.reviewer
        && !matches!(r.review(token).await, Ok(Verdict::Allowed(_)))
    {
        return Redirect::to("/login?problem=token").into_response();
    }
    let cookie = format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict");
    let mut r = Redirect::to("/").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

async fn logout() -> Response {
    let mut r = Redirect::to("/login").into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("capstan_token=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{ManagedCluster, ManagedClusterSpec, ManagedClusterStatus, Phase};
    use kube::api::DynamicObject;
    use tower::ServiceExt;

    fn fixture() -> Router {
        let mut mc = ManagedCluster::new(
            "w-1",
            ManagedClusterSpec {
                management: "m".into(),
                directory: "clusters/m/workload-clusters/w-1".into(),
            },
        );
        mc.status = Some(ManagedClusterStatus {
            phase: Some(Phase::Failed),
            message: "clusters/m/workload-clusters/w-1/cluster.yaml:12: <script>alert(1)</script>"
                .into(),
            stage: Some("Workers".into()),
            stages: vec![
                crate::status::StageRecord {
                    name: "ControlPlane".into(),
                    started: "2026-11-28T08:00:00Z".into(),
                    finished: Some("2026-11-28T08:05:00Z".into()),
                },
                crate::status::StageRecord {
                    name: "Workers".into(),
                    started: "2026-11-28T08:05:00Z".into(),
                    finished: None,
                },
            ],
            ..Default::default()
        });
        let md: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"name": "w-1-md-0", "namespace": "t", "labels": {"cluster.x-k8s.io/cluster-name": "w-1"}},
            "spec": {"replicas": 2, "template": {"spec": {"version": "v1.34.1"}}},
            "status": {"upToDateReplicas": 1, "availableReplicas": 2}}))
        .unwrap();
        let board = crate::github::board::Board::default();
        board.record(crate::github::board::Posted {
            number: 12,
            head: "0123456789abcdef".into(),
            state: "failure",
            description: "clusters/m/workload-clusters/w-1/cluster.yaml:3: bad".into(),
            plan: "### w-1 <b>changes</b>".into(),
            at: "2026-11-28T09:00:00Z".into(),
        });
        router(Dashboard::new(
            Watched::fixed(
                vec![mc],
                vec![("MachineDeployment", Box::new(std::iter::once(md)))],
            ),
            None,
            Some(board),
            None,
        ))
    }

    async fn get(app: Router, uri: &str) -> (StatusCode, String, axum::http::HeaderMap) {
        let r = app
            .oneshot(
                Request::builder()
                    .uri(uri)
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let (parts, body) = r.into_parts();
        let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
        (
            parts.status,
            String::from_utf8(body.to_vec()).unwrap(),
            parts.headers,
        )
    }

    #[tokio::test]
    async fn every_page_renders_escaped_with_its_headers() {
        let (s, html, h) = get(fixture(), "/").await;
        assert_eq!(s, StatusCode::OK);
        assert!(html.contains(r#"data-cluster="w-1""#), "{html}");
        assert!(html.contains("&lt;script&gt;"), "escaped: {html}");
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(
            h[header::CONTENT_SECURITY_POLICY]
                .to_str()
                .unwrap()
                .contains("script-src 'self'")
        );
        let (s, html, _) = get(fixture(), "/clusters/w-1").await;
        assert_eq!(s, StatusCode::OK);
        assert!(html.contains("MachineDeployment w-1-md-0"), "{html}");
        assert!(html.contains("2 desired"), "{html}");
        assert!(html.contains("Last error"), "{html}");
        assert!(
            html.contains(r#"<li data-stage="ControlPlane">ControlPlane: started"#)
                && html.contains("going on"),
            "{html}"
        );
        let (s, _, _) = get(fixture(), "/clusters/nope").await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        let (s, html, _) = get(fixture(), "/waves").await;
        assert_eq!(s, StatusCode::OK);
        assert!(html.contains("No wave"), "{html}");
        let (s, html, _) = get(fixture(), "/?phase=Ready").await;
        assert_eq!(s, StatusCode::OK);
        assert!(
            !html.contains(r#"data-cluster="w-1""#),
            "filtered out: {html}"
        );
        let (s, html, _) = get(fixture(), "/pulls").await;
        assert_eq!(s, StatusCode::OK);
        assert!(html.contains(r#"data-pull="12""#), "{html}");
        assert!(html.contains("cluster.yaml:3: bad"), "{html}");
        assert!(html.contains("&lt;b&gt;changes"), "escaped: {html}");
        assert!(html.contains("✗ refused"), "{html}");
        let (s, css, h) = get(fixture(), "/assets/dashboard.css").await;
        assert_eq!(s, StatusCode::OK);
        assert!(css.contains(".badge"));
        assert_eq!(h[header::CONTENT_TYPE], "text/css; charset=utf-8");
    }
}
