//! `GET /v1/webrtc/sessions/{id}/conversation`: what the bot heard and
//! said in this session, as the ledger records it — each turn's words
//! (`call_turns`, written by the write-behind as the turn ends), a bot
//! turn's reply latency split, the state and the end reason — so the
//! person on the page sees the conversation the way the receipt keeps it.
//!
//! Personal data, so: served only when `webrtc.conversation` (default on),
//! and only to the session's own client — on an open server whoever holds
//! the unguessable session URL, else the partner key that created the
//! session (another partner's key is `401`, as no key is). Read-only; never
//! logs the words. Pages of [`MAX_TURNS`] (`?after=<next_after>`); the
//! answer says `complete` once the session is over and its receipt closed,
//! so a page that reads until then has every turn.

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use state_store::{CallId, CleanupStatus, TurnRow};
use tracing::warn;

use super::WebrtcShared;
use super::registry::{Entry, Status};
use crate::app::CallServices;
use crate::carrier::partner::ingress::authenticate;

/// Turns per answer.
pub const MAX_TURNS: u32 = 100;

/// The answer for session `e` (the signalling routes found it and add
/// CORS).
pub async fn read(
    app: &CallServices,
    w: &WebrtcShared,
    e: &Entry,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Response {
    match refused(app, w, e, headers) {
        Some((status, kind, detail)) => error(status, kind, detail),
        None => match after(query) {
            Err(detail) => error(StatusCode::BAD_REQUEST, "bad_query", &detail),
            Ok(after) => answer(app, e, after).await,
        },
    }
}

fn error(status: StatusCode, kind: &str, detail: &str) -> Response {
    let body = json!({ "error": kind, "detail": detail }).to_string();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Why this client may not read the session's words, if it may not:
/// `(status, error kind, detail)`.
fn refused(
    app: &CallServices,
    w: &WebrtcShared,
    e: &Entry,
    headers: &HeaderMap,
) -> Option<(StatusCode, &'static str, &'static str)> {
    if !w.cfg.conversation {
        let detail = "this server does not serve conversations (webrtc.conversation = false)";
        return Some((StatusCode::FORBIDDEN, "conversation_off", detail));
    }
    if w.cfg.open {
        return None;
    }
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match authenticate(&app.cfg(), auth) {
        Ok(p) if e.partner.as_deref() == Some(p.as_str()) => None,
        _ => Some((
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the partner key that created this session is required",
        )),
    }
}

/// `after=<seq>` (optional; the only key).
fn after(query: Option<&str>) -> Result<Option<u32>, String> {
    let mut found = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != "after" || found.is_some() {
            return Err(format!("only one after=<seq> is taken, not {key:?}"));
        }
        let n = value
            .parse::<u32>()
            .map_err(|_| format!("after must be a whole number, not {value:?}"))?;
        found = Some(n);
    }
    Ok(found)
}

async fn answer(app: &CallServices, e: &Entry, after: Option<u32>) -> Response {
    let status: Status = e
        .status
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let Ok(call) = status.call_id.parse::<CallId>() else {
        return error(
            StatusCode::NOT_FOUND,
            "not_found",
            "the session has no call",
        );
    };
    let over = matches!(status.state, "ended" | "refused");
    let read = async {
        let mut turns = app.store.turns_page(call, after, MAX_TURNS + 1).await?;
        let more = turns.len() > MAX_TURNS as usize;
        turns.truncate(MAX_TURNS as usize);
        // A refused call has no receipt; an ended one is complete once its
        // receipt is closed (the close is its last write, after every turn).
        let closed = match over {
            false => false,
            true => app
                .store
                .ledger(call)
                .await?
                .is_none_or(|l| l.cleanup_status != CleanupStatus::Pending),
        };
        Ok::<_, state_store::StoreError>((turns, more, closed))
    };
    match read.await {
        Ok((turns, more, closed)) => {
            let body = json!({
                "call_id": status.call_id,
                "state": status.state,
                "end_reason": status.end_reason,
                "next_after": turns.last().map_or(after, |t| Some(t.seq)),
                "more": more,
                "complete": closed && !more,
                "turns": turns.iter().map(turn_json).collect::<Vec<_>>(),
            });
            axum::Json(body).into_response()
        }
        Err(err) => {
            warn!(call_id = %call, error = %err, "conversation could not be read");
            let detail = "the ledger is unavailable; retry";
            error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", detail)
        }
    }
}

/// One turn: who, the words, when, how long, whether cut, and for a bot
/// turn how long the reply took (milliseconds, from the recorded split).
pub fn turn_json(t: &TurnRow) -> Value {
    let duration_ms = t
        .ended_at
        .duration_since(t.started_at)
        .map_or(0, |d| d.as_millis() as u64);
    json!({
        "seq": t.seq,
        "speaker": t.speaker.as_str(),
        "text": t.text,
        "interrupted": t.interrupted,
        "started_at": crate::sessions::rfc3339(t.started_at),
        "duration_ms": duration_ms,
        "latency_ms": t.latency.as_ref().map(latency_ms),
    })
}

/// The recorded split (µs) in milliseconds, named for a reader: `total`
/// (speech end → first frame of the reply), `stt`, `dialog`, `tts` and
/// `callgate` (callgate's own share); a part not measured is absent.
fn latency_ms(split: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for (from, to) in [
        ("total_us", "total"),
        ("stt_us", "stt"),
        ("dialog_us", "dialog"),
        ("tts_us", "tts"),
        ("own_us", "callgate"),
    ] {
        if let Some(us) = split.get(from).and_then(Value::as_u64) {
            out.insert(to.into(), json!((us as f64 / 100.0).round() / 10.0));
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use state_store::Speaker;

    use super::*;

    #[test]
    fn the_query_takes_one_after_and_names_what_is_wrong() {
        assert_eq!(after(None), Ok(None));
        assert_eq!(after(Some("after=3")), Ok(Some(3)));
        for (bad, says) in [
            ("after=x", "whole number"),
            ("after=-1", "whole number"),
            ("after=1&after=2", "only one"),
            ("seq=1", "only one"),
        ] {
            assert!(after(Some(bad)).unwrap_err().contains(says), "{bad}");
        }
    }

    #[test]
    fn a_bot_turn_shows_its_words_and_its_split_in_milliseconds() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let t = TurnRow {
            seq: 4,
            speaker: Speaker::Bot,
            text: "Sure.".into(),
            started_at: t0,
            ended_at: t0 + Duration::from_millis(1_240),
            interrupted: false,
            latency: Some(json!({"turn": 2, "total_us": 812_345, "stt_us": 200_000,
                "dialog_us": 250_049, "tts_us": 120_000, "own_us": 950})),
        };
        let v = turn_json(&t);
        assert_eq!(v["speaker"], "bot");
        assert_eq!(v["text"], "Sure.");
        assert_eq!(v["duration_ms"], 1_240);
        assert_eq!(
            v["latency_ms"],
            json!({"total": 812.3, "stt": 200.0, "dialog": 250.0, "tts": 120.0, "callgate": 1.0})
        );
        let caller = TurnRow {
            speaker: Speaker::Caller,
            latency: None,
            ..t
        };
        assert_eq!(turn_json(&caller)["latency_ms"], Value::Null);
    }
}
