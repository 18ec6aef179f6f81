//! The dashboard's routes: which page answers which path, behind which of the gate's checks
//! ([`super::gate`]), and `capstan dashboard`'s server on the user's machine.

use std::sync::Arc;

use axum::Router;
use axum::middleware;
use axum::routing::get;

use super::Watched;
use super::access::{self, Access};
use super::gate;
use super::server::{self, Dashboard};

/// `capstan dashboard`'s server: the pages over what `client` may read, on `listener`, to whoever
/// brings `local`'s secret, until `shutdown`.
pub async fn serve_local(
    client: &kube::Client,
    repo: Option<String>,
    listener: tokio::net::TcpListener,
    local: access::Local,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let watched = Watched::start(client, repo).await;
    let app = router(Dashboard::new(watched, Access::Local(local), None, None));
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// The dashboard's router.
pub fn router(d: Arc<Dashboard>) -> Router {
    let checked = Router::new()
        .route("/", get(server::fleet))
        .route("/clusters/{name}", get(server::cluster))
        .route("/waves", get(server::waves))
        .route("/pulls", get(server::pulls))
        .route("/events", get(server::events))
        .route_layer(middleware::from_fn_with_state(d.clone(), gate::check));
    let mut open = Router::new()
        .route("/logout", axum::routing::post(gate::logout))
        .route("/assets/{file}", get(server::asset));
    if matches!(d.access, Access::Reviewed { .. }) {
        open = open.route("/login", get(gate::login_form).post(gate::login));
    }
    Router::new()
        .merge(checked)
        .merge(open)
        .layer(middleware::from_fn_with_state(d.clone(), gate::guard))
        .layer(middleware::from_fn(server::headers))
        .with_state(d)
}
