//! The HTTP surface: the media-stream endpoint, health, metrics, admin.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use tracing::{info, warn};

use crate::app::{App, Counters};
use crate::metrics as m;
use crate::{drain, ingress};

/// All routes.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/media-stream", get(ingress::media_stream))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route("/admin/status", get(status))
        .route("/admin/reload", post(reload))
        .route("/admin/drain", post(start_drain))
        .with_state(app)
}

/// Liveness: the process serves HTTP. Stays healthy while draining.
async fn healthz() -> &'static str {
    "ok\n"
}

/// Readiness: fails while draining so load balancers stop sending calls.
async fn readyz(State(app): State<Arc<App>>) -> Response {
    let snap = app.gate.snapshot();
    let body = serde_json::json!({
        "status": if snap.draining { "draining" } else { "ready" },
        "active": snap.active,
        "capacity": snap.capacity,
    });
    let code = if snap.draining {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (code, Json(body)).into_response()
}

/// Refreshes the gauges from their sources, then renders Prometheus text.
async fn metrics_text(State(app): State<Arc<App>>) -> Response {
    refresh_gauges(&app);
    (
        [("content-type", "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
        .into_response()
}

fn refresh_gauges(app: &App) {
    let snap = app.gate.snapshot();
    metrics::gauge!(m::CALLS_ACTIVE).set(snap.active as f64);
    metrics::gauge!(m::CALLS_QUEUED).set(snap.queued as f64);
    metrics::gauge!(m::CAPACITY).set(f64::from(snap.capacity));
    metrics::gauge!(m::DRAINING).set(if snap.draining { 1.0 } else { 0.0 });
    metrics::gauge!("callgate_calls_overflowing")
        .set(Counters::get(&app.counters.overflowing) as f64);
    metrics::gauge!("callgate_calls_setting_up")
        .set(Counters::get(&app.counters.setting_up) as f64);
    metrics::gauge!("callgate_calls_speaking").set(Counters::get(&app.counters.speaking) as f64);
    let pool = app.store.pool_status();
    metrics::gauge!("callgate_db_pool_size").set(pool.size as f64);
    metrics::gauge!("callgate_db_pool_available").set(pool.available as f64);
    metrics::gauge!("callgate_db_pool_waiting").set(pool.waiting as f64);
}

fn authorized(app: &App, headers: &HeaderMap) -> bool {
    let cfg = app.cfg();
    let Some(token) = cfg.server.admin_token.as_deref().filter(|t| !t.is_empty()) else {
        return true;
    };
    let given = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    given
        .strip_prefix("Bearer ")
        .is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes()))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn forbidden() -> Response {
    (StatusCode::UNAUTHORIZED, "admin token required\n").into_response()
}

/// What the instance is doing now.
async fn status(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if !authorized(&app, &headers) {
        return forbidden();
    }
    let snap = app.gate.snapshot();
    let pool = app.store.pool_status();
    Json(serde_json::json!({
        "instance": app.instance(),
        "admission": {
            "capacity": snap.capacity,
            "decided_by": snap.decided_by.to_string(),
            "active": snap.active,
            "queued": snap.queued,
            "draining": snap.draining,
            "admitted_total": snap.admitted_total,
            "released_total": snap.released_total,
        },
        "calls": {
            "setting_up": Counters::get(&app.counters.setting_up),
            "overflowing": Counters::get(&app.counters.overflowing),
            "speaking": Counters::get(&app.counters.speaking),
        },
        "db_pool": { "size": pool.size, "available": pool.available, "waiting": pool.waiting },
        "write_backlog": app.writes.backlog(),
    }))
    .into_response()
}

/// Re-reads the configuration file and applies the new caps.
async fn reload(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if !authorized(&app, &headers) {
        return forbidden();
    }
    match reload_config(&app) {
        Ok(body) => Json(body).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    }
}

/// Shared by `POST /admin/reload` and SIGHUP.
pub fn reload_config(app: &App) -> anyhow::Result<serde_json::Value> {
    let cfg = crate::config::Config::load(app.config_path.as_deref())?;
    app.apply(cfg);
    let snap = app.gate.snapshot();
    info!(capacity = snap.capacity, decided_by = %snap.decided_by, active = snap.active, "configuration reloaded");
    Ok(
        serde_json::json!({ "capacity": snap.capacity, "decided_by": snap.decided_by.to_string(), "active": snap.active }),
    )
}

/// Starts a drain: admission refuses at once, calls run on to the deadline.
async fn start_drain(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if !authorized(&app, &headers) {
        return forbidden();
    }
    if app.gate.is_draining() {
        return (StatusCode::ACCEPTED, "already draining\n").into_response();
    }
    warn!("drain requested through the admin API");
    let deadline = std::time::Duration::from_secs(app.cfg().server.drain_timeout_s);
    tokio::spawn(drain::run(Arc::clone(&app), Instant::now() + deadline));
    (StatusCode::ACCEPTED, "draining\n").into_response()
}
