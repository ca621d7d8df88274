//! The HTTP surface: the media-stream endpoint, health, metrics, admin.
//!
//! `/metrics` needs the admin token once one is configured (readable by
//! any peer until then: `serve --check` names it).
//! `/admin/*` (and `/v1/sessions/{id}`, a receipt) is closed by default: without a configured
//! `server.admin_token` only loopback peers are served; once a token is
//! configured every request needs `Authorization: Bearer <token>` — from
//! loopback too, since behind a reverse proxy on the same host every
//! request arrives from loopback (see [`admin_allowed`]). The peer address comes from the listener
//! (`ConnectInfo`, set up in `server`), so a router served without it
//! refuses every admin request.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use tracing::{info, warn};

use crate::app::{App, Counters};
use crate::carrier::Carriers;
use crate::drain;
use crate::metrics as m;

/// Every route on one listener (`server.admin_listen` unset).
pub fn router(app: Arc<App>, carriers: &Carriers) -> Router {
    Router::new()
        .merge(carriers.routes().with_state(Arc::clone(&app.call)))
        .merge(operator_only(&app))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(app)
}

/// What `server.listen` serves when the admin surface has its own
/// listener: the carrier and partner upgrades and the two probes — nothing
/// an operator reads or changes.
pub fn public_router(app: Arc<App>, carriers: &Carriers) -> Router {
    Router::new()
        .merge(carriers.routes().with_state(Arc::clone(&app.call)))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(app)
}

/// What `server.admin_listen` serves: `/metrics`, `/admin/*` and receipts
/// (behind the same guard as on a shared listener), and the probes.
pub fn operator_router(app: Arc<App>) -> Router {
    Router::new()
        .merge(operator_only(&app))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(app)
}

/// `/metrics`, and `/admin/*` with receipts behind [`admin_guard`].
fn operator_only(app: &Arc<App>) -> Router<Arc<App>> {
    let admin = Router::new()
        .route("/admin/status", get(status))
        // A receipt is admin data: the same guard as `/admin/*`.
        .route("/v1/sessions", get(crate::sessions::lookup))
        .route("/v1/sessions/{id}", get(crate::sessions::session))
        .route("/admin/reload", post(reload))
        .route("/admin/drain", post(start_drain))
        .route("/admin/undrain", post(undrain))
        .route("/admin/audit", get(crate::audit_http::get_audit))
        .route_layer(middleware::from_fn_with_state(Arc::clone(app), admin_guard));
    // `/metrics` is the instance's load, its refusals and its callers'
    // latencies: behind the admin token once one is set (from every peer,
    // as `/admin/*`); without a token, readable as before (a scraper on
    // another host), and `serve --check` says so.
    let metrics = Router::new()
        .route("/metrics", get(metrics_text))
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(app),
            metrics_guard,
        ));
    metrics.merge(admin)
}

/// The layer in front of `/metrics`: the admin token when one is set.
async fn metrics_guard(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let cfg = app.cfg();
    let token = cfg.server.admin_token.as_deref().filter(|t| !t.is_empty());
    let Some(token) = token else {
        drop(cfg);
        return next.run(request).await;
    };
    let auth = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    if peer.is_some_and(|ip| admin_allowed(ip, Some(token), auth)) {
        drop(cfg);
        return next.run(request).await;
    }
    info!(peer = ?peer, "metrics request refused: no admin token");
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "admin token required: Authorization: Bearer <server.admin_token>\n",
    )
        .into_response()
}

/// Liveness: the process serves HTTP. Stays healthy while draining.
async fn healthz() -> &'static str {
    "ok\n"
}

/// Readiness: fails while draining so load balancers stop sending calls.
async fn readyz(State(app): State<Arc<App>>) -> Response {
    let snap = app.call.gate.snapshot();
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
    let snap = app.call.gate.snapshot();
    metrics::gauge!(m::CALLS_ACTIVE).set(snap.active as f64);
    metrics::gauge!(m::CALLS_QUEUED).set(snap.queued as f64);
    metrics::gauge!(m::CAPACITY).set(f64::from(snap.capacity));
    metrics::gauge!(m::CAPACITY_CONFIGURED).set(f64::from(snap.configured.calls));
    let ceiling = snap.instance.ceiling.unwrap_or(snap.configured.calls);
    metrics::gauge!(m::INSTANCE_CEILING).set(f64::from(ceiling));
    metrics::counter!(m::INSTANCE_TRIPS).absolute(snap.instance.trips);
    let max_setups = snap.max_setups.map_or(f64::INFINITY, f64::from);
    metrics::gauge!(m::SETUPS_MAX).set(max_setups);
    metrics::gauge!(m::DRAINING).set(if snap.draining { 1.0 } else { 0.0 });
    metrics::gauge!("callgate_calls_overflowing")
        .set(Counters::get(&app.call.counters.overflowing) as f64);
    metrics::gauge!("callgate_calls_setting_up")
        .set(Counters::get(&app.call.counters.setting_up) as f64);
    metrics::gauge!("callgate_calls_speaking")
        .set(Counters::get(&app.call.counters.speaking) as f64);
    let pool = app.call.store.pool_status();
    metrics::gauge!("callgate_db_pool_size").set(pool.size as f64);
    metrics::gauge!("callgate_db_pool_available").set(pool.available as f64);
    metrics::gauge!("callgate_db_pool_waiting").set(pool.waiting as f64);
    refresh_partner_gauges(app, &snap.partners);
    refresh_pressure_gauges(app);
}

/// Committed pressure and its unweighted components.
fn refresh_pressure_gauges(app: &App) {
    let p = crate::reconcile::pressure::view(&app.call);
    metrics::gauge!(m::PRESSURE).set(p.score);
    metrics::gauge!(m::PRESSURE_WEIGHTS_VERSION).set(f64::from(p.weights_version));
    for (component, n) in [
        ("active", p.active),
        ("speaking", p.speaking),
        ("delegating", p.delegating),
        ("recovering", p.recovering),
    ] {
        metrics::gauge!(m::PRESSURE_COMPONENT, "component" => component).set(f64::from(n));
    }
}

/// Calls each configured partner holds in the gate (labels bounded by the
/// configuration), and its quota where it has one.
fn refresh_partner_gauges(app: &App, loads: &[admission::PartnerLoad]) {
    for (id, p) in &app.cfg().partners {
        let load = loads.iter().find(|l| l.partner.as_str() == id.as_str());
        let (active, queued) = load.map_or((0, 0), |l| (l.active, l.queued));
        let partner = id.clone();
        metrics::gauge!(m::PARTNER_CALLS, "partner" => partner.clone(), "state" => "active")
            .set(f64::from(active));
        metrics::gauge!(m::PARTNER_CALLS, "partner" => partner.clone(), "state" => "queued")
            .set(f64::from(queued));
        if let Some(q) = p.max_concurrent_calls {
            metrics::gauge!(m::PARTNER_QUOTA, "partner" => partner).set(f64::from(q));
        }
    }
}

/// Whether an `/admin/*` request may proceed. With no configured (or an
/// empty) token: only a loopback peer (127.0.0.0/8, `::1`, or either as an
/// IPv4-mapped IPv6 address). With a token: any peer presenting
/// `Authorization: Bearer <token>`, and no peer without it.
pub fn admin_allowed(peer: IpAddr, token_cfg: Option<&str>, auth_header: Option<&str>) -> bool {
    let Some(token) = token_cfg.filter(|t| !t.is_empty()) else {
        return peer.to_canonical().is_loopback();
    };
    auth_header
        .and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        })
        .is_some_and(|given| constant_time_eq(given.as_bytes(), token.as_bytes()))
}

/// Compares without an early exit on the first differing byte (only the
/// length, which is not secret enough to matter, can end it sooner).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The layer in front of every `/admin/*` route.
async fn admin_guard(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    let cfg = app.cfg();
    let token = cfg.server.admin_token.as_deref().filter(|t| !t.is_empty());
    let auth = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if peer.is_some_and(|ip| admin_allowed(ip, token, auth)) {
        drop(cfg);
        return next.run(request).await;
    }
    let reason = if token.is_some() {
        "admin token required: Authorization: Bearer <server.admin_token>\n"
    } else {
        "admin endpoints accept loopback only until server.admin_token is set\n"
    };
    info!(peer = ?peer, path = %request.uri().path(), "admin request refused");
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        reason,
    )
        .into_response()
}

/// What the instance is doing now: state, capacity and the ceiling that
/// set it, committed pressure, and the three session counters with their
/// ages (unknown: `null` with `"known": false`) and divergences.
async fn status(State(app): State<Arc<App>>) -> Response {
    let snap = app.call.gate.snapshot();
    let pool = app.call.store.pool_status();
    let pressure = crate::reconcile::pressure::view(&app.call);
    let weights = app.cfg().pressure.weights();
    let reconcile = app.reconcile.to_json(Instant::now());
    Json(serde_json::json!({
        "instance": app.instance(),
        "version": env!("CARGO_PKG_VERSION"),
        "state": if snap.draining { "draining" } else { "serving" },
        "drain": drain::status(&app, Instant::now()),
        "capacity": snap.capacity,
        "decided_by": snap.decided_by.to_string(),
        "active": snap.active,
        "queued": snap.queued,
        "pressure": {
            "score": pressure.score,
            "capacity": pressure.capacity,
            "utilization": admission::utilization(pressure.score, pressure.capacity),
            "components": {
                "active": pressure.active,
                "speaking": pressure.speaking,
                "delegating": pressure.delegating,
                "recovering": pressure.recovering,
            },
            "weights": {
                "version": weights.version,
                "speaking": weights.speaking,
                "delegating": weights.delegating,
                "recovering": weights.recovering,
            },
        },
        "counters": reconcile["counters"],
        "divergences": reconcile["divergences"],
        "reconcile": {
            "observed": reconcile["observed"],
            "observed_s_ago": reconcile["observed_s_ago"],
            "recent_receipts": reconcile["recent_receipts"],
        },
        "admission": {
            "capacity": snap.capacity,
            "decided_by": snap.decided_by.to_string(),
            "configured_capacity": snap.configured.calls,
            "configured_decided_by": snap.configured.decided_by.to_string(),
            "instance": instance_json(&app, &snap),
            "setting_up": snap.setting_up,
            "max_setups": snap.max_setups,
            "active": snap.active,
            "queued": snap.queued,
            "draining": snap.draining,
            "admitted_total": snap.admitted_total,
            "released_total": snap.released_total,
        },
        "calls": {
            "setting_up": Counters::get(&app.call.counters.setting_up),
            "overflowing": Counters::get(&app.call.counters.overflowing),
            "speaking": Counters::get(&app.call.counters.speaking),
        },
        "db_pool": { "size": pool.size, "available": pool.available, "waiting": pool.waiting },
        "write_backlog": app.call.writes.backlog(),
    }))
    .into_response()
}

/// The instance ceiling for `/admin/status`: its state, the measured p99
/// against the bound, the ceiling, and why capacity is below the
/// configured one when it is.
fn instance_json(app: &App, snap: &admission::GateSnapshot) -> serde_json::Value {
    let v = &snap.instance;
    let cfg = app.call.gate.instance_config();
    let below = snap.decided_by == admission::Decider::Instance;
    serde_json::json!({
        "enabled": cfg.is_on(),
        "state": v.state.as_str(),
        "lag_p99_ms": v.p99.map(|p| p.as_secs_f64() * 1e3),
        "max_lag_ms": cfg.max_lag.as_millis() as u64,
        "window_ms": cfg.window.as_millis() as u64,
        "samples": v.samples,
        "ceiling": v.ceiling,
        "trips": v.trips,
        "reason": below.then(|| format!(
            "capacity {} is below the configured {}: the instance's media clock ran late (p99 over {} ms); it reopens below half of that and steps up a tenth per healthy window",
            snap.capacity, snap.configured.calls, cfg.max_lag.as_millis()
        )),
    })
}

/// Re-reads the configuration file and applies the new caps.
async fn reload(State(app): State<Arc<App>>) -> Response {
    match reload_config(&app) {
        Ok(body) => Json(body).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    }
}

/// Shared by `POST /admin/reload` and SIGHUP.
pub fn reload_config(app: &App) -> anyhow::Result<serde_json::Value> {
    let cfg = crate::config::Config::load(app.config_path.as_deref())?;
    app.apply(cfg);
    let snap = app.call.gate.snapshot();
    info!(capacity = snap.capacity, decided_by = %snap.decided_by, active = snap.active, "configuration reloaded");
    Ok(
        serde_json::json!({ "capacity": snap.capacity, "decided_by": snap.decided_by.to_string(), "active": snap.active }),
    )
}

/// Starts a drain: admission refuses at once, calls run on to the deadline.
async fn start_drain(State(app): State<Arc<App>>) -> Response {
    // Admission is closed before the answer, so a readiness probe that
    // follows the 202 already fails; only the waiting runs in the background.
    if !drain::begin(&app, drain::plan::Origin::Admin) {
        return (StatusCode::ACCEPTED, "already draining\n").into_response();
    }
    warn!("drain requested through the admin API");
    tokio::spawn(drain::run_until_done(Arc::clone(&app)));
    (StatusCode::ACCEPTED, "draining\n").into_response()
}

/// `POST /admin/undrain`: cancels a drain the admin API started, before its
/// deadline. 409 with the reason otherwise; 503 when the declaration could
/// not be written (admission then stays closed).
async fn undrain(State(app): State<Arc<App>>) -> Response {
    match drain::undrain(&app).await {
        Ok(()) => (StatusCode::OK, "serving\n").into_response(),
        Err(e @ drain::plan::UndrainRefused::NotRecorded(_)) => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response()
        }
        Err(e) => {
            info!(reason = %e, "undrain refused");
            (StatusCode::CONFLICT, format!("{e}\n")).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    const V4_LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
    const V4_REMOTE: IpAddr = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7));

    #[test]
    fn loopback_is_allowed_while_no_token_is_configured() {
        for peer in [
            V4_LOOPBACK,
            IpAddr::V4(Ipv4Addr::new(127, 8, 9, 10)),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
        ] {
            assert!(admin_allowed(peer, None, None), "{peer}");
            // Once a token is set, loopback needs it too (a proxy on the
            // same host makes every request a loopback one).
            assert!(!admin_allowed(peer, Some("s3cret"), None), "{peer}");
            assert!(
                admin_allowed(peer, Some("s3cret"), Some("Bearer s3cret")),
                "{peer}"
            );
        }
    }

    #[test]
    fn ipv4_mapped_loopback_is_loopback_and_mapped_remote_is_not() {
        let mapped = IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped());
        assert_eq!(mapped.to_string(), "::ffff:127.0.0.1");
        assert!(admin_allowed(mapped, None, None));
        let remote = IpAddr::V6(Ipv4Addr::new(203, 0, 113, 7).to_ipv6_mapped());
        assert!(!admin_allowed(remote, None, None));
        assert!(admin_allowed(remote, Some("s3cret"), Some("Bearer s3cret")));
    }

    #[test]
    fn a_remote_peer_without_a_configured_token_is_refused() {
        assert!(!admin_allowed(V4_REMOTE, None, None));
        assert!(!admin_allowed(V4_REMOTE, None, Some("Bearer anything")));
        // An empty token is no token: it must not match an empty bearer.
        assert!(!admin_allowed(V4_REMOTE, Some(""), Some("Bearer ")));
        let v6 = IpAddr::V6("2001:db8::1".parse().unwrap());
        assert!(!admin_allowed(v6, None, None));
    }

    #[test]
    fn a_remote_peer_with_the_right_token_is_allowed() {
        let token = Some("s3cret-token");
        assert!(admin_allowed(V4_REMOTE, token, Some("Bearer s3cret-token")));
        assert!(admin_allowed(V4_REMOTE, token, Some("bearer s3cret-token")));
    }

    #[test]
    fn a_wrong_or_missing_token_is_refused() {
        let token = Some("s3cret-token");
        for given in [
            None,
            Some(""),
            Some("s3cret-token"),
            Some("Bearer "),
            Some("Bearer s3cret-tokem"),
            Some("Bearer s3cret-token "),
            Some("Bearer s3cret"),
            Some("Basic s3cret-token"),
        ] {
            assert!(!admin_allowed(V4_REMOTE, token, given), "{given:?}");
        }
    }

    #[test]
    fn constant_time_eq_compares_whole_values() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(constant_time_eq(b"", b""));
    }
}
