//! Client evidence: the page's `getStats()` summary
//! (`POST /v1/webrtc/sessions/{id}/stats`), what the caller's browser
//! measured of the audio it received — kept apart from the server's own
//! figures in the receipt (`media.transport.client`).
//!
//! Untrusted and personal-adjacent, so minimal: at most
//! [`MAX_STATS_BYTES`], only the fields below, only finite numbers
//! (non-negative, except `packetsLost`, which RTCP lets go below zero when
//! duplicates outnumber losses; anything else is dropped), and `final`
//! (the page's hang-up summary, not its running one every 5 s; the latest
//! post wins). Posts after the receipt was written get
//! `409`: they would be stored nowhere.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use super::registry::Entry;
use crate::config::WebrtcConfig;

pub const MAX_STATS_BYTES: usize = WebrtcConfig::MAX_STATS_BYTES;

/// The `inbound-rtp` fields kept.
pub const INBOUND: [&str; 7] = [
    "jitter",
    "packetsLost",
    "packetsReceived",
    "jitterBufferDelay",
    "jitterBufferEmittedCount",
    "concealedSamples",
    "totalSamplesReceived",
];
/// The `remote-inbound-rtp` fields kept.
pub const REMOTE_INBOUND: [&str; 3] = ["roundTripTime", "packetsLost", "jitter"];

/// The kept part of a posted summary, or why it is refused.
pub fn sanitize(body: &[u8]) -> Result<Value, (StatusCode, &'static str)> {
    if body.len() > MAX_STATS_BYTES {
        return Err((StatusCode::PAYLOAD_TOO_LARGE, "too_large"));
    }
    let v: Value =
        serde_json::from_slice(body).map_err(|_| (StatusCode::BAD_REQUEST, "bad_json"))?;
    let obj = v.as_object().ok_or((StatusCode::BAD_REQUEST, "bad_json"))?;
    let pick = |section: &str, fields: &[&str]| {
        let mut out = Map::new();
        if let Some(s) = obj.get(section).and_then(Value::as_object) {
            for f in fields {
                if let Some(n) = s
                    .get(*f)
                    .and_then(Value::as_f64)
                    .filter(|n| n.is_finite() && (*n >= 0.0 || *f == "packetsLost"))
                {
                    out.insert((*f).to_string(), Value::from(n));
                }
            }
        }
        Value::Object(out)
    };
    let mut kept = Map::new();
    kept.insert("inbound".into(), pick("inbound", &INBOUND));
    kept.insert(
        "remote_inbound".into(),
        pick("remote_inbound", &REMOTE_INBOUND),
    );
    kept.insert(
        "final".into(),
        Value::Bool(obj.get("final") == Some(&Value::Bool(true))),
    );
    Ok(Value::Object(kept))
}

/// Stores a posted summary on the session (the latest wins).
pub fn accept(entry: &Entry, body: &[u8]) -> Response {
    let kept = match sanitize(body) {
        Ok(v) => v,
        Err((status, kind)) => return error(status, kind),
    };
    let mut ev = entry
        .evidence
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if ev.receipt_written {
        return error(StatusCode::CONFLICT, "receipt_written");
    }
    ev.posted = Some(kept);
    StatusCode::NO_CONTENT.into_response()
}

fn error(status: StatusCode, kind: &str) -> Response {
    let body = serde_json::json!({ "error": kind }).to_string();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_finite_fields_are_kept() {
        let body = serde_json::json!({
            "final": true,
            "inbound": {"jitter": 0.004, "packetsLost": 2, "concealedSamples": 960,
                        "totalSamplesReceived": 480000, "transcript": "hello", "packetsReceived": -1,
                        "jitterBufferDelay": "NaN"},
            "remote_inbound": {"roundTripTime": 0.001, "ssrc": 5, "packetsLost": -1},
            "userAgent": "x",
        });
        let v = sanitize(body.to_string().as_bytes()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "final": true,
                "inbound": {"jitter": 0.004, "packetsLost": 2.0, "concealedSamples": 960.0,
                            "totalSamplesReceived": 480000.0},
                "remote_inbound": {"roundTripTime": 0.001, "packetsLost": -1.0},
            })
        );
    }

    #[test]
    fn oversized_and_malformed_bodies_are_refused_by_kind() {
        let big = vec![b' '; MAX_STATS_BYTES + 1];
        assert_eq!(sanitize(&big).unwrap_err().1, "too_large");
        assert_eq!(sanitize(b"{").unwrap_err().1, "bad_json");
        assert_eq!(sanitize(b"[1]").unwrap_err().1, "bad_json");
        assert_eq!(sanitize(b"{}").unwrap()["final"], false);
    }
}
