//! The Twilio media-stream ingress: `GET /v1/media-stream`.
//!
//! Per connection: check the signature, wait (bounded) for `start`, check
//! the media format, then hand the leg to the generic call path
//! ([`super::run`]).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{State, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use state_store::CallId;
use tracing::{Instrument, info_span, warn};

use super::leg::{Limits, TwilioLeg};
use super::reservations::Reservations;
use super::signature;
use super::wire as twilio;
use crate::app::CallServices;
use crate::call::labels::{Labels, Transport};
use crate::call::setup::Arrival;
use crate::carrier::ws;
use crate::config::ms;
use crate::ingress::Refusal;
use crate::leg::{Ingress, LegFormat};
use crate::metrics as m;

/// The Twilio carrier's routes: the media stream, the voice webhook and
/// the prompt it plays.
pub fn routes(reservations: Arc<Reservations>) -> Router<Arc<CallServices>> {
    Router::new()
        .route("/v1/media-stream", get(media_stream))
        .route("/v1/twilio/voice", post(super::webhook::voice))
        .route("/v1/twilio/status", post(super::webhook::status))
        .route(
            super::webhook::OVERFLOW_PROMPT_PATH,
            get(super::webhook::overflow_prompt),
        )
        .layer(axum::Extension(reservations))
}

/// The upgrade handler.
pub async fn media_stream(
    State(app): State<Arc<CallServices>>,
    axum::Extension(reservations): axum::Extension<Arc<Reservations>>,
    headers: HeaderMap,
    uri: Uri,
    ws: WebSocketUpgrade,
) -> Response {
    let cfg = app.cfg();
    let keys = signature::SigningKeys::of(&cfg.twilio);
    if keys.any() {
        let urls = signed_urls(cfg.twilio.public_url.as_deref(), &headers, &uri);
        if let Err(why) = signature::verify_request(keys, &urls, &[], &headers) {
            warn!(url = %urls[0], why = %why, kind = why.kind(), "media stream refused: invalid X-Twilio-Signature");
            metrics::counter!(m::PROTOCOL_ERRORS, "kind" => "bad_signature").increment(1);
            return (StatusCode::FORBIDDEN, "invalid X-Twilio-Signature").into_response();
        }
    }
    let max = cfg.twilio.max_message_bytes;
    let tracker = app.tasks.clone();
    // Carrier frames are ~300 bytes: an 8 KiB read buffer (tungstenite's
    // default is 128 KiB, zero-filled on every read) keeps thousands of
    // streams cheap in memory and CPU. Writes are flushed per batch.
    let cap = ws::transport_cap(max);
    ws.max_message_size(cap)
        .max_frame_size(cap)
        .read_buffer_size(8 * 1024)
        .on_upgrade(move |socket| async move {
            tracker.spawn(handle(app, reservations, socket)).await.ok();
        })
}

/// The URLs Twilio may have signed: the configured public URL, or the
/// request's Host and path under `wss://` (Twilio's scheme) and `ws://`
/// (the scheme this listener sees when TLS ends at a proxy). The HMAC, not
/// the scheme, is what authenticates. Each is also tried with a trailing
/// `/` and without and with its port ([`signature::url_candidates`]).
fn signed_urls(public: Option<&str>, headers: &HeaderMap, uri: &Uri) -> Vec<String> {
    if let Some(p) = public.filter(|p| !p.is_empty()) {
        return vec![p.to_string()];
    }
    let host = headers
        .get("host")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("localhost");
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    vec![format!("wss://{host}{path}"), format!("ws://{host}{path}")]
}

async fn handle(
    app: Arc<CallServices>,
    reservations: Arc<Reservations>,
    socket: axum::extract::ws::WebSocket,
) {
    let cfg = app.cfg();
    let timeout = ms(cfg.twilio.start_timeout_ms);
    let limits = Limits {
        message: cfg.twilio.max_message_bytes,
        payload: cfg.twilio.max_media_payload_bytes,
    };
    let accepted = TwilioLeg::accept(socket, limits, timeout).await;
    let (leg, start) = match accepted {
        Ok(x) => x,
        Err(why) => {
            warn!(why = %why.0, "media stream closed before a call started");
            metrics::counter!(m::PROTOCOL_ERRORS, "kind" => "no_start").increment(1);
            return;
        }
    };
    // A call the webhook admitted runs on the slot it reserved.
    let reserved = reservations.claim(&start.call_sid);
    let arrival = Arrival {
        call_id: reserved.as_ref().map_or_else(CallId::new_random, |r| r.1),
        ingress: Ingress::Twilio,
        format: LegFormat::Mulaw8k,
        carrier_call_id: start.call_sid.clone(),
        partner: None,
        metadata: metadata(&start),
        transfer_target: None,
        transport: Transport::WebSocket,
        labels: Labels::from_params(&cfg.receipt, &start.custom_parameters),
    };
    let span = info_span!("call", call_id = %arrival.call_id, call_sid = %start.call_sid, ingress = "twilio");
    async move {
        if !start.media_format.is_twilio_mulaw() {
            let f = &start.media_format;
            let why = format!(
                "unsupported mediaFormat {}@{}x{}",
                f.encoding, f.sample_rate, f.channels
            );
            warn!(why = %why, "closing stream");
            metrics::counter!(m::PROTOCOL_ERRORS, "kind" => "unsupported_media_format")
                .increment(1);
            crate::ingress::record_refusal(
                &app,
                &arrival,
                Refusal::UnsupportedFormat,
                Duration::ZERO,
            );
            leg.refuse(&why).await;
            return;
        }
        let permit = reserved.map(|(p, _)| p);
        crate::ingress::run_reserved(app, leg, arrival, permit).await;
    }
    .instrument(span)
    .await;
}

fn metadata(start: &twilio::Start) -> Vec<(String, String)> {
    let mut md = vec![
        ("ingress".to_string(), "twilio".to_string()),
        ("carrier_call_id".to_string(), start.call_sid.clone()),
        ("stream_id".to_string(), start.stream_sid.clone()),
    ];
    md.extend(
        start
            .custom_parameters
            .iter()
            .map(|(k, v)| (format!("param.{k}"), v.clone())),
    );
    md
}
