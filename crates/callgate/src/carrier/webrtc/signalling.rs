//! WebRTC signalling over HTTP, the WHIP way (RFC 9725 shape, two-way;
//! `docs/webrtc.md`). `POST /v1/webrtc` takes the browser's offer; the gate
//! is asked before anything is answered: admitted or queued → `201` with
//! the answer, the session URL (`Location`) and an `ETag`; refused → `503`
//! with `Retry-After` and a JSON reason (or a prompt-only call, per
//! `webrtc.overflow`). The session URL takes `GET` (state), `DELETE`
//! (hang-up), `PATCH` (`405`: no trickle, no ICE restart) and
//! `POST …/stats` (the page's client evidence). `GET /call` is the page.
//!
//! Closed by default: a partner key (`Authorization: Bearer`) unless
//! `webrtc.open`. Every refusal is a JSON body with an `error` kind, counted
//! by `callgate_webrtc_offers_total{outcome}`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use state_store::CallId;
use str0m::change::SdpOffer;
use str0m::{Candidate, RtcConfig};
use tokio::sync::{mpsc, oneshot};
use tracing::{Instrument, info, info_span, warn};

use super::WebrtcShared;
use super::leg::{Answer, Pending, WebrtcLeg};
use super::registry::SessionId;
use super::router::INBOX;
use super::sdp::{self, OfferFacts};
use super::session::Settings;
use crate::app::CallServices;
use crate::call::labels::{Labels, Transport};
use crate::call::setup::Arrival;
use crate::carrier::partner::ingress::authenticate;
use crate::config::{WebrtcConfig, ms};
use crate::leg::{Ingress, LegFormat};
use crate::metrics as m;

const PAGE: &str = include_str!("call.html");
const SESSION_HEADER: HeaderName = HeaderName::from_static("callgate-session");
const ALLOW: &str = "GET, DELETE, OPTIONS";

type Shared = (Arc<CallServices>, Arc<WebrtcShared>);

/// The signalling routes, with the state they need.
pub fn routes(webrtc: Arc<WebrtcShared>) -> Router<Arc<CallServices>> {
    Router::new()
        .route("/v1/webrtc", post(offer).options(options))
        .route(
            "/v1/webrtc/sessions/{id}",
            get(status).delete(hang_up).patch(patch).options(options),
        )
        .route(
            "/v1/webrtc/sessions/{id}/stats",
            post(evidence).options(options),
        )
        .route(
            "/v1/webrtc/sessions/{id}/conversation",
            get(conversation).options(options),
        )
        .layer(DefaultBodyLimit::max(WebrtcConfig::MAX_OFFER_BYTES))
        .layer(axum::Extension(webrtc))
        .route("/call", get(|| async { Html(PAGE) }))
}

fn json_error(status: StatusCode, kind: &str, detail: &str) -> Response {
    metrics::counter!(m::WEBRTC_OFFERS, "outcome" => kind.to_string()).increment(1);
    let body = serde_json::json!({ "error": kind, "detail": detail });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn cors(cfg: &WebrtcConfig, mut r: Response) -> Response {
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&cfg.allow_origin) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("Location, ETag, Link, Retry-After, Callgate-Session"),
    );
    r
}

async fn options(axum::Extension(w): axum::Extension<Arc<WebrtcShared>>) -> Response {
    let r = (
        StatusCode::NO_CONTENT,
        [
            ("accept-post", "application/sdp"),
            (
                "access-control-allow-methods",
                "POST, GET, DELETE, PATCH, OPTIONS",
            ),
            (
                "access-control-allow-headers",
                "Authorization, Content-Type, If-Match",
            ),
            ("access-control-max-age", "600"),
        ],
    )
        .into_response();
    cors(&w.cfg, r)
}

async fn offer(
    State(app): State<Arc<CallServices>>,
    axum::Extension(w): axum::Extension<Arc<WebrtcShared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let r = offer_inner((app, Arc::clone(&w)), &headers, &body).await;
    cors(&w.cfg, r)
}

async fn offer_inner((app, w): Shared, headers: &HeaderMap, body: &[u8]) -> Response {
    let cfg = app.cfg();
    let partner = if w.cfg.open {
        None
    } else {
        let auth = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        match authenticate(&cfg, auth) {
            Ok(p) => Some(p),
            Err(e) => {
                warn!(why = e.as_str(), "WebRTC offer refused: 401");
                return json_error(StatusCode::UNAUTHORIZED, "unauthorized", e.as_str());
            }
        }
    };
    let sdp_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().to_ascii_lowercase().starts_with("application/sdp"));
    if !sdp_type {
        return json_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "content_type",
            "Content-Type must be application/sdp",
        );
    }
    let facts = match sdp::screen(body) {
        Ok(f) => f,
        Err(e) => {
            let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
            return json_error(status, e.kind, &e.detail);
        }
    };
    if w.registry.live() >= w.cfg.max_sessions {
        warn!(
            max = w.cfg.max_sessions,
            "WebRTC session limit reached: 503"
        );
        return refused(&w.cfg, "webrtc_sessions", None);
    }
    let text = String::from_utf8_lossy(body);
    let (rtc, answer) = match answer(&w, &text) {
        Ok(a) => a,
        Err(detail) => return json_error(StatusCode::BAD_REQUEST, "bad_sdp", &detail),
    };
    start_call(app, w, rtc, answer, facts, partner).await
}

/// The `Rtc` for an offer, and its answer.
fn answer(w: &WebrtcShared, offer: &str) -> Result<(str0m::Rtc, String), String> {
    let c = &w.cfg;
    let mut rtc = RtcConfig::new()
        .set_ice_lite(true)
        .set_dtls_cert(w.cert.clone())
        .clear_codecs()
        .enable_opus(true, false)
        .set_reordering_size_audio(c.reorder_packets)
        .set_reordering_timeout_audio(Some(ms(c.reorder_ms)))
        .set_stats_interval(Some(Duration::from_secs(1)))
        .build(Instant::now());
    let cand = Candidate::host(w.advertised, "udp").map_err(|e| format!("our candidate: {e}"))?;
    rtc.add_local_candidate(cand);
    let offer = SdpOffer::from_sdp_string(offer).map_err(|e| format!("unparsable offer: {e}"))?;
    let answer = rtc
        .sdp_api()
        .accept_offer(offer)
        .map_err(|e| format!("offer not acceptable: {e}"))?;
    Ok((
        rtc,
        sdp::answer::finish(&answer.to_sdp_string(), w.advertised),
    ))
}

/// A `503` refusal. `call_id` is the id the refusal was recorded under
/// (`GET /v1/sessions/<call_id>` answers for it); refusals before a call
/// existed (the session cap, a ufrag collision) have none and are counted
/// only in `callgate_webrtc_offers_total`.
fn refused(cfg: &WebrtcConfig, reason: &str, call_id: Option<CallId>) -> Response {
    metrics::counter!(m::WEBRTC_OFFERS, "outcome" => "refused").increment(1);
    let mut body = serde_json::json!({
        "error": "refused", "reason": reason, "retry_after_s": cfg.retry_after_s,
    });
    if let Some(id) = call_id {
        body["call_id"] = id.to_string().into();
    }
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [
            (header::CONTENT_TYPE, "application/json".to_string()),
            (header::RETRY_AFTER, cfg.retry_after_s.to_string()),
        ],
        body.to_string(),
    )
        .into_response()
}

async fn start_call(
    app: Arc<CallServices>,
    w: Arc<WebrtcShared>,
    mut rtc: str0m::Rtc,
    answer_sdp: String,
    facts: OfferFacts,
    partner: Option<admission::PartnerId>,
) -> Response {
    let ufrag = rtc.direct_api().local_ice_credentials().ufrag;
    let (inbox_tx, inbox) = mpsc::channel(INBOX);
    let Some(routes) = w.routes.add(&ufrag, inbox_tx) else {
        return refused(&w.cfg, "ice_ufrag_collision", None);
    };
    let id = SessionId::random();
    let call_id = CallId::new_random();
    let owner = partner.as_ref().map(ToString::to_string);
    let guard = w.registry.add(id.clone(), call_id.to_string(), owner);
    let settings = Settings {
        ice_timeout: ms(w.cfg.ice_timeout_ms),
        dtls_timeout: ms(w.cfg.dtls_timeout_ms),
        consent_timeout: ms(w.cfg.consent_timeout_ms),
        media_stall: ms(app.cfg().call.media_stall_ms),
        fec: facts.fec,
        opus_complexity: w.cfg.opus_complexity,
        opus_pt: facts.opus_pt,
        local: w.local,
    };
    let (tx, rx) = oneshot::channel();
    let pending = Pending {
        rtc,
        settings,
        inbox,
        routes,
    };
    let leg = WebrtcLeg::new(Arc::clone(&w), guard, tx, pending);
    let arrival = arrival(call_id, &id, partner, &app);
    let span =
        info_span!("call", call_id = %call_id, webrtc_session = %id.as_str(), ingress = "webrtc");
    tokio::spawn(crate::ingress::run(Arc::clone(&app), leg, arrival).instrument(span));
    // The gate answers at once (admitted, queued or refused); the bound only
    // covers a call task that died before it could say.
    let bound = ms(app.cfg().admission.queue_timeout_ms) + Duration::from_secs(5);
    match tokio::time::timeout(bound, rx).await {
        Ok(Ok(Answer::Go)) => created(&w, &id, answer_sdp),
        Ok(Ok(Answer::Refused { reason })) => refused(&w.cfg, &reason, Some(call_id)),
        Ok(Ok(Answer::Failed(why))) => json_error(StatusCode::SERVICE_UNAVAILABLE, "failed", &why),
        _ => json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "failed",
            "the call did not start",
        ),
    }
}

fn arrival(
    call_id: CallId,
    id: &SessionId,
    partner: Option<admission::PartnerId>,
    app: &CallServices,
) -> Arrival {
    let cfg = app.cfg();
    let transfer_target = partner
        .as_ref()
        .and_then(|p| cfg.partners.get(p.as_str()))
        .and_then(|p| p.transfer_target.clone())
        .or_else(|| Some(cfg.partner.transfer_target.clone()));
    Arrival {
        call_id,
        ingress: Ingress::Webrtc,
        format: LegFormat::L16k16,
        carrier_call_id: id.as_str().to_string(),
        metadata: vec![
            ("ingress".to_string(), "webrtc".to_string()),
            ("carrier_call_id".to_string(), id.as_str().to_string()),
        ],
        partner,
        transfer_target,
        transport: Transport::WebrtcUdp,
        labels: Labels::default(),
    }
}

fn created(w: &WebrtcShared, id: &SessionId, answer: String) -> Response {
    metrics::counter!(m::WEBRTC_OFFERS, "outcome" => "answered").increment(1);
    info!(session = id.as_str(), "WebRTC offer answered: 201");
    let location = format!("/v1/webrtc/sessions/{}", id.as_str());
    let etag = format!("\"{}\"", &id.as_str()[..12]);
    let mut r = (
        StatusCode::CREATED,
        [
            (header::CONTENT_TYPE, "application/sdp".to_string()),
            (header::LOCATION, location),
            (header::ETAG, etag),
        ],
        answer,
    )
        .into_response();
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(id.as_str()) {
        h.insert(SESSION_HEADER, v);
    }
    for url in &w.cfg.ice_servers {
        if let Ok(v) = HeaderValue::from_str(&format!("<{url}>; rel=\"ice-server\"")) {
            h.append(header::LINK, v);
        }
    }
    r
}

fn not_found() -> Response {
    let body = serde_json::json!({ "error": "not_found" }).to_string();
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

type Session = (axum::Extension<Arc<WebrtcShared>>, Path<String>);

fn entry(w: &WebrtcShared, id: &str) -> Option<Arc<super::registry::Entry>> {
    SessionId::parse(id).and_then(|id| w.registry.get(&id))
}

async fn status((axum::Extension(w), Path(id)): Session) -> Response {
    let r = match entry(&w, &id) {
        Some(e) => {
            let s = e
                .status
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            axum::Json(s).into_response()
        }
        None => not_found(),
    };
    cors(&w.cfg, r)
}

async fn conversation(
    State(app): State<Arc<CallServices>>,
    axum::Extension(w): axum::Extension<Arc<WebrtcShared>>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let r = match entry(&w, &id) {
        Some(e) => super::conversation::read(&app, &w, &e, &headers, query.as_deref()).await,
        None => not_found(),
    };
    cors(&w.cfg, r)
}

async fn hang_up((axum::Extension(w), Path(id)): Session) -> Response {
    let r = match entry(&w, &id) {
        Some(e) => {
            info!(session = %id, "WebRTC session deleted: the caller hangs up");
            e.delete();
            StatusCode::OK.into_response()
        }
        None => not_found(),
    };
    cors(&w.cfg, r)
}

/// This resource supports neither trickle ICE (an ICE-lite server learns
/// the browser's address from its checks) nor ICE restarts, so every
/// `PATCH` is `405` with `Allow` (RFC 9725 names `422` only for a resource
/// that supports one of the two; `405` is our choice for neither).
async fn patch((axum::Extension(w), Path(_)): Session) -> Response {
    let r = (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, ALLOW)]).into_response();
    cors(&w.cfg, r)
}

async fn evidence(
    axum::Extension(w): axum::Extension<Arc<WebrtcShared>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let r = match entry(&w, &id) {
        None => not_found(),
        Some(e) => super::evidence::accept(&e, &body),
    };
    cors(&w.cfg, r)
}
