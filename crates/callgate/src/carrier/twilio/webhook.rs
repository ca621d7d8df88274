//! The Twilio voice webhook: `POST /v1/twilio/voice`, answered with TwiML.
//!
//! Twilio asks it what to do with an incoming call before anything else
//! happens, so this is where admission is cheapest: the gate decides here
//! (waiting at most `twilio.webhook.wait_ms` for a queued slot while the
//! caller hears ringing), and
//!
//! - admitted: the slot is reserved for the call's stream
//!   ([`super::reservations`]) and the answer is `<Connect><Stream>` to
//!   callgate's media stream, then the transfer target for when callgate
//!   ends the stream to transfer;
//! - refused: the answer is `<Play>` of the bundled overflow prompt (served
//!   at [`OVERFLOW_PROMPT_PATH`]) and `<Dial>` to `twilio.webhook.transfer_to`
//!   — no stream, no STT/TTS/dialog session, nothing held. The refusal is
//!   recorded (`admission_rejections`, by `CallSid`) like any other.
//!
//! Signed like the stream: with `twilio.auth_token` or
//! `twilio.shared_key_secret` set, `X-Twilio-Signature` over the URL and
//! the form parameters is required (`403` otherwise). Bounded: a body over
//! [`MAX_BODY`] is `413`, a missing or malformed `CallSid` `400`. Off unless
//! `twilio.webhook.enabled` (`404`). Logs the `CallSid` and the decision,
//! never the caller's number.

use std::sync::{Arc, LazyLock};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use state_store::CallId;
use tracing::{info, warn};

use super::reservations::Reservations;
use super::signature;
use crate::app::CallServices;
use crate::call::labels::{Labels, Transport};
use crate::call::setup::Arrival;
use crate::config::{Config, ms};
use crate::ingress::Refusal;
use crate::leg::{Ingress, LegFormat};
use crate::metrics as m;
use crate::prompts::Prompt;
use crate::text::form_decode;

/// Where the overflow prompt is served for `<Play>`.
pub const OVERFLOW_PROMPT_PATH: &str = "/v1/twilio/prompts/overflow.wav";
/// Largest webhook body read (Twilio's voice webhook is ~1 KiB).
pub const MAX_BODY: usize = 16 * 1024;
/// The `<Parameter>` carrying callgate's call id into the stream's `start`.
pub const CALL_ID_PARAMETER: &str = "callgate_call_id";

/// The handler.
pub async fn voice(
    State(app): State<Arc<CallServices>>,
    axum::Extension(reservations): axum::Extension<Arc<Reservations>>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Response {
    let cfg = app.cfg();
    if !cfg.twilio.webhook.enabled {
        return not_enabled();
    }
    let (status, outcome, answer) = match checked(&cfg, &headers, &uri, &body) {
        Err((status, why)) => (status, why, format!("{why}\n")),
        Ok(call_sid) => {
            let (outcome, twiml) = decide(&app, &cfg, &reservations, &headers, &call_sid).await;
            (StatusCode::OK, outcome, twiml)
        }
    };
    metrics::counter!(m::TWILIO_WEBHOOKS, "outcome" => outcome).increment(1);
    if status != StatusCode::OK {
        return (status, answer).into_response();
    }
    ([(header::CONTENT_TYPE, "text/xml; charset=utf-8")], answer).into_response()
}

fn not_enabled() -> Response {
    let why = "the Twilio webhook is not enabled (twilio.webhook.enabled)\n";
    (StatusCode::NOT_FOUND, why).into_response()
}

/// The request's `CallSid`, once its size, signature and form are good.
fn checked(cfg: &Config, headers: &HeaderMap, uri: &Uri, body: &[u8]) -> Result<String, Refused> {
    checked_form(cfg, headers, uri, body).map(|(sid, _)| sid)
}

/// A request's form parameters, in order.
type Form = Vec<(String, String)>;
/// Why a request was refused: its status and the metric's outcome.
type Refused = (StatusCode, &'static str);

/// [`checked`], with the form's parameters.
fn checked_form(
    cfg: &Config,
    headers: &HeaderMap,
    uri: &Uri,
    body: &[u8],
) -> Result<(String, Form), Refused> {
    if body.len() > MAX_BODY {
        return Err((StatusCode::PAYLOAD_TOO_LARGE, "bad_request"));
    }
    let params = form(body).ok_or((StatusCode::BAD_REQUEST, "bad_request"))?;
    verify(cfg, headers, uri, &params).map_err(|()| (StatusCode::FORBIDDEN, "bad_signature"))?;
    let sid = param(&params, "CallSid")
        .filter(|s| is_call_sid(s))
        .map(str::to_string);
    let sid = sid.ok_or((StatusCode::BAD_REQUEST, "bad_request"))?;
    Ok((sid, params))
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Twilio's final call statuses: the ones a status callback records.
const FINAL_STATUSES: [&str; 5] = ["completed", "busy", "failed", "no-answer", "canceled"];

/// `POST /v1/twilio/status`: the number's call-status callback. Twilio's
/// own account of a call's end (its `CallStatus` and billed
/// `CallDuration`) is written beside the receipt's (`carrier_end`), never
/// over it; a status that is not final is acknowledged and ignored. `204`
/// once handled (also when no receipt has that `CallSid`: a call refused at
/// the webhook has none), `503` when Postgres does not answer; checked
/// like the webhook.
pub async fn status(
    State(app): State<Arc<CallServices>>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Response {
    let cfg = app.cfg();
    if !cfg.twilio.webhook.enabled {
        return not_enabled();
    }
    let (sid, params) = match checked_form(&cfg, &headers, &uri, &body) {
        Ok(x) => x,
        Err((status, why)) => {
            metrics::counter!(m::TWILIO_STATUS_CALLBACKS, "result" => why).increment(1);
            return (status, format!("{why}\n")).into_response();
        }
    };
    let status = param(&params, "CallStatus").unwrap_or("");
    let Some(status) = FINAL_STATUSES.into_iter().find(|s| *s == status) else {
        metrics::counter!(m::TWILIO_STATUS_CALLBACKS, "result" => "not_final").increment(1);
        return StatusCode::NO_CONTENT.into_response();
    };
    let end = serde_json::json!({
        "status": status,
        "duration_s": param(&params, "CallDuration").and_then(|d| d.parse::<u64>().ok()),
        "carrier_timestamp": param(&params, "Timestamp").map(|t| t.chars().take(64).collect::<String>()),
        "at": crate::sessions::rfc3339(std::time::SystemTime::now()),
        "source": "twilio_status_callback",
    });
    match app.store.record_carrier_end("twilio", &sid, &end).await {
        Ok(n) => {
            let result = if n > 0 { "recorded" } else { "no_receipt" };
            metrics::counter!(m::TWILIO_STATUS_CALLBACKS, "result" => result).increment(1);
            info!(call_sid = %sid, status, receipts = n, "Twilio call status recorded beside the receipt");
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => {
            metrics::counter!(m::TWILIO_STATUS_CALLBACKS, "result" => "unavailable").increment(1);
            warn!(call_sid = %sid, error = %e, "Twilio call status could not be recorded");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the ledger is unavailable; retry\n",
            )
                .into_response()
        }
    }
}

/// A Twilio `CallSid`: `CA` and 32 hex digits (ids from other carriers
/// speaking TwiML are accepted up to 64 letters and digits).
fn is_call_sid(s: &str) -> bool {
    (2..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

fn verify(
    cfg: &Config,
    headers: &HeaderMap,
    uri: &Uri,
    params: &[(String, String)],
) -> Result<(), ()> {
    let keys = signature::SigningKeys::of(&cfg.twilio);
    if !keys.any() {
        return Ok(());
    }
    let urls = signed_urls(cfg, headers, uri);
    let pairs: Vec<(&str, &str)> = params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    signature::verify_request(keys, &urls, &pairs, headers)
        .map(|_| ())
        .map_err(|why| {
            warn!(url = %urls[0], why = %why, kind = why.kind(), "Twilio webhook refused: invalid X-Twilio-Signature");
        })
}

/// The URLs Twilio may have signed: under the public base (`https://` and
/// the host of `twilio.public_url`) when set, else the Host header under
/// `https://` and `http://` (TLS ending at a proxy).
fn signed_urls(cfg: &Config, headers: &HeaderMap, uri: &Uri) -> Vec<String> {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    match public_host(cfg) {
        Some(host) => vec![format!("https://{host}{path}")],
        None => {
            let host = host(headers);
            vec![
                format!("https://{host}{path}"),
                format!("http://{host}{path}"),
            ]
        }
    }
}

fn host(headers: &HeaderMap) -> String {
    headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("localhost")
        .to_string()
}

/// The host (and port) of `twilio.public_url`, when set.
fn public_host(cfg: &Config) -> Option<String> {
    let url = cfg.twilio.public_url.as_deref().filter(|u| !u.is_empty())?;
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    Some(rest.split('/').next().unwrap_or(rest).to_string())
}

/// `application/x-www-form-urlencoded` pairs; `None` when not UTF-8.
fn form(body: &[u8]) -> Option<Form> {
    let text = std::str::from_utf8(body).ok()?;
    let mut out = Vec::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.push((form_decode(k)?, form_decode(v)?));
    }
    Some(out)
}

/// The gate's answer for `call_sid`, as TwiML.
async fn decide(
    app: &Arc<CallServices>,
    cfg: &Config,
    reservations: &Arc<Reservations>,
    headers: &HeaderMap,
    call_sid: &str,
) -> (&'static str, String) {
    let wh = &cfg.twilio.webhook;
    let stream = stream_url(cfg, headers);
    // Twilio retried the webhook: the call already holds its slot.
    if let Some(id) = reservations.reserved(call_sid) {
        return (
            "connect",
            twiml::connect(&stream, id, wh.transfer_to.as_deref()),
        );
    }
    match admit(app, cfg).await {
        Ok(permit) => {
            let id = CallId::new_random();
            reservations.hold(call_sid, id, permit, ms(wh.reservation_ms));
            info!(call_sid, call_id = %id, "Twilio webhook: admitted, slot reserved for the stream");
            (
                "connect",
                twiml::connect(&stream, id, wh.transfer_to.as_deref()),
            )
        }
        Err(r) => {
            refused(app, call_sid, &r);
            let prompt = format!("{}{OVERFLOW_PROMPT_PATH}", public_base(cfg, headers));
            ("refused", twiml::refuse(&prompt, wh.transfer_to.as_deref()))
        }
    }
}

/// A slot now, or within `twilio.webhook.wait_ms` (the gate's own queue
/// timeout bounds it too).
async fn admit(
    app: &CallServices,
    cfg: &Config,
) -> Result<admission::Permit, admission::Rejection> {
    let now = Instant::now();
    let mut ticket = app.gate.enqueue_for(None, now)?;
    let until = ticket.deadline().min(now + ms(cfg.twilio.webhook.wait_ms));
    tokio::select! {
        res = &mut ticket => res,
        () = tokio::time::sleep_until(until.into()) => ticket.expire(Instant::now()),
    }
}

fn refused(app: &CallServices, call_sid: &str, r: &admission::Rejection) {
    let reason = r.reason.as_str();
    let arrival = Arrival {
        call_id: CallId::new_random(),
        ingress: Ingress::Twilio,
        format: LegFormat::Mulaw8k,
        carrier_call_id: call_sid.to_string(),
        partner: None,
        metadata: Vec::new(),
        transfer_target: None,
        transport: Transport::WebSocket,
        labels: Labels::default(),
    };
    warn!(
        call_sid,
        call_id = %arrival.call_id,
        reason,
        waited_ms = r.waited.as_millis() as u64,
        "call_admission_rejected at the Twilio webhook: overflow prompt and <Dial>, no stream"
    );
    metrics::counter!(m::REJECTED, "reason" => reason, "ingress" => "twilio").increment(1);
    crate::ingress::record_refusal(app, &arrival, Refusal::Admission(r.reason), r.waited);
}

/// `twilio.public_url` if set, else `wss://` and the Host header.
fn stream_url(cfg: &Config, headers: &HeaderMap) -> String {
    match cfg.twilio.public_url.as_deref().filter(|u| !u.is_empty()) {
        Some(u) => u.to_string(),
        None => format!("wss://{}/v1/media-stream", host(headers)),
    }
}

/// `https://` and the public host (Twilio fetches `<Play>` URLs over HTTPS).
fn public_base(cfg: &Config, headers: &HeaderMap) -> String {
    format!(
        "https://{}",
        public_host(cfg).unwrap_or_else(|| host(headers))
    )
}

/// `GET` [`OVERFLOW_PROMPT_PATH`]: the bundled overflow prompt as a μ-law
/// 8 kHz WAV, the words every refused caller hears.
pub async fn overflow_prompt() -> Response {
    static WAV: LazyLock<Vec<u8>> =
        LazyLock::new(|| twiml::mulaw_wav(Prompt::Overflow.audio(LegFormat::Mulaw8k)));
    (
        [
            (header::CONTENT_TYPE, "audio/wav"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        WAV.as_slice(),
    )
        .into_response()
}

/// The TwiML documents, and the WAV wrapper (pure).
pub mod twiml {
    use state_store::CallId;

    use super::CALL_ID_PARAMETER;

    const HEAD: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>";

    /// Escapes text and attribute values.
    pub fn escape(s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        for c in s.chars() {
            match c {
                '&' => out.push_str("&amp;"),
                '<' => out.push_str("&lt;"),
                '>' => out.push_str("&gt;"),
                '"' => out.push_str("&quot;"),
                '\'' => out.push_str("&apos;"),
                c => out.push(c),
            }
        }
        out
    }

    /// Where a refused or transferred caller goes; `<Hangup/>` without one.
    pub fn onward(transfer_to: Option<&str>) -> String {
        match transfer_to {
            Some(t) if t.starts_with("sip:") => format!("<Dial><Sip>{}</Sip></Dial>", escape(t)),
            Some(t) => format!("<Dial><Number>{}</Number></Dial>", escape(t)),
            None => "<Hangup/>".to_string(),
        }
    }

    /// Admitted: the bidirectional stream, with callgate's call id, then
    /// where the caller goes when callgate ends the stream.
    pub fn connect(stream_url: &str, call_id: CallId, transfer_to: Option<&str>) -> String {
        format!(
            "{HEAD}<Response><Connect><Stream url=\"{}\"><Parameter name=\"{CALL_ID_PARAMETER}\" value=\"{call_id}\"/></Stream></Connect>{}</Response>",
            escape(stream_url),
            onward(transfer_to)
        )
    }

    /// Refused: the overflow prompt, then the transfer target.
    pub fn refuse(prompt_url: &str, transfer_to: Option<&str>) -> String {
        format!(
            "{HEAD}<Response><Play>{}</Play>{}</Response>",
            escape(prompt_url),
            onward(transfer_to)
        )
    }

    /// A WAV file (format 7, μ-law, 8 kHz mono, with the `fact` chunk
    /// non-PCM formats carry) around `ulaw`.
    pub fn mulaw_wav(ulaw: &[u8]) -> Vec<u8> {
        let n = u32::try_from(ulaw.len()).unwrap_or(u32::MAX);
        let mut w = Vec::with_capacity(ulaw.len() + 58);
        w.extend_from_slice(b"RIFF");
        w.extend_from_slice(&(50 + n).to_le_bytes());
        w.extend_from_slice(b"WAVEfmt ");
        w.extend_from_slice(&18u32.to_le_bytes());
        w.extend_from_slice(&7u16.to_le_bytes()); // WAVE_FORMAT_MULAW
        w.extend_from_slice(&1u16.to_le_bytes()); // mono
        w.extend_from_slice(&8_000u32.to_le_bytes());
        w.extend_from_slice(&8_000u32.to_le_bytes()); // bytes per second
        w.extend_from_slice(&1u16.to_le_bytes()); // block align
        w.extend_from_slice(&8u16.to_le_bytes()); // bits per sample
        w.extend_from_slice(&0u16.to_le_bytes()); // no extension
        w.extend_from_slice(b"fact");
        w.extend_from_slice(&4u32.to_le_bytes());
        w.extend_from_slice(&n.to_le_bytes());
        w.extend_from_slice(b"data");
        w.extend_from_slice(&n.to_le_bytes());
        w.extend_from_slice(ulaw);
        w
    }
}

#[cfg(test)]
mod tests;
