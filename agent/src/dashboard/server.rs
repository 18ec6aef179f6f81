//! The dashboard's routes: pages rendered from [`super::Watched`], the change events, the
//! embedded assets, and who gets in ([`super::access`]).
//!
//! | route | what |
//! |---|---|
//! | `GET /` | the fleet; `?phase=&management=&wave=&name=` filter it |
//! | `GET /clusters/{name}` | one cluster: control plane, workers, machines, stage, conditions, inventory |
//! | `GET /waves` | clusters by upgrade wave |
//! | `GET /pulls` | the latest plan of each pull request (the PR workflow on) |
//! | `GET /events` | server-sent events: `changed` whenever anything watched changed (bounded: [`super::streams`]) |
//! | `GET /assets/{file}` | the stylesheet and the script |
//! | `GET`/`POST /login` | the token form (the agent's only) |
//! | `POST /logout` | signs the browser out |

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use minijinja::{Environment, context};

use super::Watched;
use super::access::{Access, Who};
use super::session::{SessionLimits, Sessions};
use super::streams::{Full, Streams};
use super::view;

/// How often an open event stream checks that its session and token are still good.
pub const RECHECK: Duration = Duration::from_secs(30);

/// The bounds a dashboard keeps: its sessions, its event streams.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Sessions' lifetimes and numbers.
    pub sessions: SessionLimits,
    /// The most event streams open.
    pub streams: usize,
    /// The most event streams of one user open.
    pub streams_per_user: usize,
    /// How often an open stream checks its session and token.
    pub recheck: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            sessions: SessionLimits::default(),
            streams: super::streams::TOTAL,
            streams_per_user: super::streams::PER_USER,
            recheck: RECHECK,
        }
    }
}

/// The dashboard: what it watches, its templates, who gets in, and the sessions and event
/// streams it keeps.
pub struct Dashboard {
    watched: Watched,
    env: Environment<'static>,
    pub(super) access: Access,
    pub(super) sessions: Sessions,
    streams: Streams,
    recheck: Duration,
    pulls: Option<crate::dashboard::board::Board>,
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
    ("locked.html", include_str!("templates/locked.html")),
    ("enter.html", include_str!("templates/enter.html")),
];

const CSS: &str = include_str!("assets/dashboard.css");
const SCRIPT: &str = include_str!("assets/live.js");

impl Dashboard {
    /// A dashboard over `watched`, letting in whom `access` says; `pulls`: the pull requests'
    /// plans, when the agent plans them; `followed`: the revision the agent follows (for the
    /// waves' schedules), when it is the agent's.
    pub fn new(
        watched: Watched,
        access: Access,
        pulls: Option<crate::dashboard::board::Board>,
        followed: Option<super::Published>,
    ) -> Arc<Dashboard> {
        Dashboard::with_limits(watched, access, pulls, followed, Limits::default())
    }

    /// As [`Dashboard::new`], within `limits`.
    pub fn with_limits(
        watched: Watched,
        access: Access,
        pulls: Option<crate::dashboard::board::Board>,
        followed: Option<super::Published>,
        limits: Limits,
    ) -> Arc<Dashboard> {
        let mut env = Environment::new();
        for (name, text) in TEMPLATES {
            env.add_template(name, text)
                .unwrap_or_else(|e| panic!("dashboard template {name}: {e}"));
        }
        Arc::new(Dashboard {
            watched,
            env,
            access,
            sessions: Sessions::new(limits.sessions),
            streams: Streams::new(limits.streams, limits.streams_per_user),
            recheck: limits.recheck,
            pulls,
            followed,
        })
    }

    /// What it shows.
    pub fn watched(&self) -> &Watched {
        &self.watched
    }

    /// The sessions kept now.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// The event streams open now.
    pub fn streams(&self) -> usize {
        self.streams.open_now()
    }

    pub(super) fn page(
        &self,
        name: &str,
        who: &Who,
        section: &str,
        ctx: minijinja::Value,
    ) -> Response {
        let base = context! {
            user => who.user.clone(),
            signed_in => who.session.is_some(),
            // Pages for someone let in follow the changes; the sign-in and locked pages not.
            live => !who.key.is_empty(),
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
    pub(super) fn sign_in(&self, problem: Option<&str>) -> Response {
        let mut r = self.page("login.html", &Who::nobody(), "", context! { problem });
        if r.status() == StatusCode::OK {
            *r.status_mut() = StatusCode::UNAUTHORIZED;
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"capstan\""),
            );
        }
        r
    }

    /// 401 with `capstan dashboard`'s locked page (saying `problem`, if any).
    pub(super) fn locked(&self, problem: Option<&str>) -> Response {
        let mut r = self.page("locked.html", &Who::nobody(), "", context! { problem });
        if r.status() == StatusCode::OK {
            *r.status_mut() = StatusCode::UNAUTHORIZED;
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

/// Headers every answer carries: no framing, no sniffing, no referrer to another origin (not
/// `no-referrer`: under it browsers send `Origin: null` on the dashboard's own forms, which the
/// origin check could not tell from a sandboxed attacker's), nothing cached, and a policy that
/// runs only the dashboard's own script.
pub(super) async fn headers(req: Request, next: Next) -> Response {
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
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

pub(super) async fn fleet(
    State(d): State<Arc<Dashboard>>,
    axum::Extension(who): axum::Extension<Who>,
    Query(filter): Query<view::Filter>,
) -> Response {
    let fleet = view::fleet(d.rows(), filter);
    d.page(
        "fleet.html",
        &who,
        "fleet",
        context! { fleet => value(&fleet) },
    )
}

pub(super) async fn waves(
    State(d): State<Arc<Dashboard>>,
    axum::Extension(who): axum::Extension<Who>,
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
        &who,
        "waves",
        context! { waves => value(&waves), schedules => value(&schedules) },
    )
}

pub(super) async fn pulls(
    State(d): State<Arc<Dashboard>>,
    axum::Extension(who): axum::Extension<Who>,
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
        &who,
        "pulls",
        context! { pulls => value(&pulls) },
    )
}

pub(super) async fn cluster(
    State(d): State<Arc<Dashboard>>,
    axum::Extension(who): axum::Extension<Who>,
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
        &who,
        "fleet",
        context! { page => value(&page) },
    )
}

/// `changed` whenever the watched state changed, at most every quarter second, and a comment
/// every 15 s so proxies keep the stream open. Bounded ([`super::streams`]: 429 past a user's
/// share, 503 past all); a stream ends when its session or token no longer is good (checked
/// every [`Limits::recheck`]), and the page's `EventSource` asks again (and is refused).
pub(super) async fn events(
    State(d): State<Arc<Dashboard>>,
    axum::Extension(who): axum::Extension<Who>,
) -> Response {
    let place = match d.streams.open(&who.key) {
        Ok(p) => p,
        Err(full @ Full::User(_)) => {
            return (StatusCode::TOO_MANY_REQUESTS, full.to_string()).into_response();
        }
        Err(full @ Full::Everyone(_)) => {
            return (StatusCode::SERVICE_UNAVAILABLE, full.to_string()).into_response();
        }
    };
    let rx = d.watched.changes.clone();
    let start = tokio::time::Instant::now() + d.recheck;
    let tick = tokio::time::interval_at(start, d.recheck);
    let state = (rx, tick, d, who, place);
    let stream = futures::stream::unfold(state, |(mut rx, mut tick, d, who, place)| async move {
        loop {
            tokio::select! {
                changed = rx.changed() => {
                    changed.ok()?;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    let n = *rx.borrow_and_update();
                    let event = Event::default().data(n.to_string());
                    return Some((Ok::<_, std::convert::Infallible>(event), (rx, tick, d, who, place)));
                }
                _ = tick.tick() => {
                    if !d.still(&who).await {
                        return None;
                    }
                }
            }
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

pub(super) async fn asset(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "dashboard.css" => (CSS, "text/css; charset=utf-8"),
        "live.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::access;
    use crate::dashboard::routes::router;
    use crate::status::{ManagedCluster, ManagedClusterSpec, ManagedClusterStatus, Phase};
    use axum::Router;
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
        let board = crate::dashboard::board::Board::default();
        board.record(crate::dashboard::board::Posted {
            number: 12,
            head: "0123456789abcdef".into(),
            state: "failure",
            description: "clusters/m/workload-clusters/w-1/cluster.yaml:3: bad".into(),
            plan: "### w-1 <b>changes</b>".into(),
            at: "2026-11-28T09:00:00Z".into(),
        });
        let local = access::Local::with_token("127.0.0.1:8480".parse().unwrap(), "secret");
        router(Dashboard::new(
            Watched::fixed(
                vec![mc],
                vec![("MachineDeployment", Box::new(std::iter::once(md)))],
            ),
            Access::Local(local),
            Some(board),
            None,
        ))
    }

    async fn get(app: Router, uri: &str) -> (StatusCode, String, axum::http::HeaderMap) {
        let r = app
            .oneshot(
                Request::builder()
                    .uri(uri)
                    .header(header::HOST, "127.0.0.1:8480")
                    .header(header::AUTHORIZATION, "Bearer secret")
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
        // Not `no-referrer`: under it Chromium sends `Origin: null` and no `Sec-Fetch-Site` on
        // the dashboard's own forms over plain HTTP to a name that is not loopback, which the
        // origin check must refuse.
        assert_eq!(h[header::REFERRER_POLICY], "same-origin");
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
