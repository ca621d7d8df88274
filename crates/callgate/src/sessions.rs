//! `GET /v1/sessions/{id}`: one session's receipt as JSON — its ledger row
//! (identity, owner, labels, lifecycle timestamps, end reason, cleanup
//! status, stats) with its raw lifecycle events beside it.
//!
//! Admin-authenticated: the route sits behind the same guard as `/admin/*`
//! (`http::admin_guard`). `400` for an id that is not a UUID or a bad
//! query, `404` for an unknown one, `503` when Postgres does not answer in
//! time.
//!
//! Events come in pages: `?events_limit=N` (default [`DEFAULT_EVENTS`], at
//! most [`MAX_EVENTS`]) and `?events_after=SEQ` (the `next_after` of the
//! previous page). `events_page.more` says whether another page follows,
//! so a call with a long stall history cannot make one answer unbounded.
//!
//! A refused call has no receipt (it held nothing and was promised
//! nothing) but it is findable: for an id with no ledger row the refusal
//! recorded under it in `admission_rejections` is answered instead,
//! `"outcome": "refused"` with the gate's reason as `end_reason`, the
//! refusing instance and the time queued. Refusals are written in batches
//! off the caller's path, so one is `404` for the moment before its batch
//! lands. Receipts say `"outcome": "admitted"`.
//!
//! What it never returns: transcript text, slot values or audio — it reads
//! only `call_ledger`, `call_events` and `admission_rejections`, and none
//! holds any. It never writes.
//!
//! `GET /v1/sessions?carrier_call_id=ID` finds sessions by the id the
//! carrier gave the call (a Twilio CallSid, a SIP Call-ID, a partner's call
//! id): `{"sessions": [...], "truncated": bool}`, oldest first, each entry
//! the session id, outcome, ingress, owner, admission (or refusal) time,
//! end reason and cleanup status — at most [`MAX_LOOKUP`] of them, admitted
//! and refused together. The id must be 1 to
//! [`MAX_CARRIER_ID`] bytes; any other query key is a `400`.
//!
//! Timestamps are given twice: as RFC 3339 UTC (`at`) and as the offset
//! from admission in milliseconds (`offset_ms`). Every timestamp of one
//! call is derived from one monotonic clock anchored at admission
//! (`call::record::CallClock`), so the offsets are monotonic differences
//! even if the wall clock stepped during the call.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use serde_json::{Value, json};
use state_store::{CallId, EventRow, LedgerRow, Rejection};
use tracing::warn;

use crate::app::App;
use crate::metrics as m;

/// Keys of `stats` written at admission (`call::labels::opening_stats`),
/// lifted to the top of the receipt.
const OPENING_KEYS: [&str; 4] = ["transport", "labels", "labels_truncated", "providers"];

/// Events per answer unless `events_limit` says otherwise.
pub const DEFAULT_EVENTS: u32 = 1_000;
/// The largest `events_limit` accepted.
pub const MAX_EVENTS: u32 = 10_000;

/// The most sessions one carrier-id lookup returns.
pub const MAX_LOOKUP: u32 = 20;
/// The longest carrier call id looked up (SIP Call-IDs are the longest
/// seen; the ingresses cap what they record well below this).
pub const MAX_CARRIER_ID: usize = 256;

/// Which events one answer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventsPage {
    pub after: Option<u32>,
    pub limit: u32,
}

impl EventsPage {
    /// Reads `events_after` and `events_limit` from a query string; any
    /// other key, a repeated key or a value out of range is an error.
    pub fn parse(query: Option<&str>) -> Result<EventsPage, String> {
        let mut page = EventsPage {
            after: None,
            limit: DEFAULT_EVENTS,
        };
        let (mut seen_after, mut seen_limit) = (false, false);
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let number = || {
                value
                    .parse::<u32>()
                    .map_err(|_| format!("{key} must be a whole number, not {value:?}"))
            };
            match key {
                "events_after" if !seen_after => {
                    seen_after = true;
                    page.after = Some(number()?);
                }
                "events_limit" if !seen_limit => {
                    seen_limit = true;
                    page.limit = number()?;
                    if !(1..=MAX_EVENTS).contains(&page.limit) {
                        return Err(format!("events_limit must be 1..={MAX_EVENTS}"));
                    }
                }
                "events_after" | "events_limit" => return Err(format!("{key} given twice")),
                _ => return Err(format!("unknown query parameter {key:?}")),
            }
        }
        Ok(page)
    }
}

/// The handler.
pub async fn session(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let (status, body) = answer(&app, &id, query.as_deref()).await;
    metrics::counter!(m::SESSION_READS, "status" => status.as_str().to_string()).increment(1);
    (status, body).into_response()
}

async fn answer(app: &App, id: &str, query: Option<&str>) -> (StatusCode, Response) {
    let Ok(call) = id.parse::<CallId>() else {
        let msg = "session id must be a UUID\n";
        return (StatusCode::BAD_REQUEST, msg.into_response());
    };
    let page = match EventsPage::parse(query) {
        Ok(p) => p,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n").into_response()),
    };
    let unavailable = |e: state_store::StoreError| {
        warn!(call_id = %call, error = %e, "session receipt could not be read");
        let msg = "the session ledger is unavailable; retry\n";
        (StatusCode::SERVICE_UNAVAILABLE, msg.into_response())
    };
    let row = match app.call.store.ledger(call).await {
        Ok(Some(row)) => row,
        Ok(None) => {
            return match app.call.store.rejection(call).await {
                Ok(Some(r)) => (StatusCode::OK, Json(refusal_json(&r)).into_response()),
                Ok(None) => (StatusCode::NOT_FOUND, "no such session\n".into_response()),
                Err(e) => unavailable(e),
            };
        }
        Err(e) => return unavailable(e),
    };
    // One more than the page holds says whether another page follows.
    match app
        .call
        .store
        .events_page(call, page.after, page.limit + 1)
        .await
    {
        Ok(mut events) => {
            let more = events.len() > page.limit as usize;
            events.truncate(page.limit as usize);
            let mut body = receipt_json(&row, &events);
            body["events_page"] = json!({
                "after": page.after,
                "limit": page.limit,
                "more": more,
                "next_after": events.last().map(|e| e.seq),
            });
            (StatusCode::OK, Json(body).into_response())
        }
        Err(e) => unavailable(e),
    }
}

/// The lookup handler: `GET /v1/sessions?carrier_call_id=ID`.
pub async fn lookup(State(app): State<Arc<App>>, RawQuery(query): RawQuery) -> Response {
    let (status, body) = match carrier_call_id(query.as_deref()) {
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e}\n").into_response()),
        Ok(id) => find(&app, &id).await,
    };
    metrics::counter!(m::SESSION_READS, "status" => status.as_str().to_string()).increment(1);
    (status, body).into_response()
}

async fn find(app: &App, id: &str) -> (StatusCode, Response) {
    let store = &app.call.store;
    let found = async {
        let admitted = store.ledger_by_carrier_call(id, MAX_LOOKUP + 1).await?;
        let refused = store.rejections_by_carrier_call(id, MAX_LOOKUP + 1).await?;
        Ok::<_, state_store::StoreError>((admitted, refused))
    };
    match found.await {
        Ok((admitted, refused)) => {
            let (sessions, truncated) = merged(&admitted, &refused);
            let body = json!({ "sessions": sessions, "truncated": truncated });
            (StatusCode::OK, Json(body).into_response())
        }
        Err(e) => {
            warn!(carrier_call_id = %id, error = %e, "session lookup could not be read");
            let msg = "the session ledger is unavailable; retry\n";
            (StatusCode::SERVICE_UNAVAILABLE, msg.into_response())
        }
    }
}

/// The one key a lookup takes, percent-decoded and bounded.
fn carrier_call_id(query: Option<&str>) -> Result<String, String> {
    let mut found = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != "carrier_call_id" {
            return Err(format!("unknown query parameter {key:?}"));
        }
        if found.is_some() {
            return Err("carrier_call_id given twice".into());
        }
        let decoded = crate::text::form_decode(value)
            .ok_or("carrier_call_id is not valid percent-encoding")?;
        found = Some(decoded);
    }
    let id = found.ok_or("carrier_call_id is required (or ask /v1/sessions/{id})")?;
    if id.is_empty() || id.len() > MAX_CARRIER_ID {
        return Err(format!(
            "carrier_call_id must be 1..={MAX_CARRIER_ID} bytes"
        ));
    }
    Ok(id)
}

/// Admitted and refused sessions under one carrier id, oldest first, at
/// most [`MAX_LOOKUP`]; `true` when more were recorded. Each list holds at
/// most `MAX_LOOKUP + 1` (its query's limit), so the oldest `MAX_LOOKUP` of
/// the union are among them.
fn merged(admitted: &[LedgerRow], refused: &[Rejection]) -> (Vec<Value>, bool) {
    let mut all: Vec<(SystemTime, Value)> = admitted
        .iter()
        .map(|r| (r.admitted_at, summary_json(r)))
        .chain(refused.iter().map(|r| (r.at, refusal_summary_json(r))))
        .collect();
    all.sort_by_key(|(at, _)| *at);
    let truncated = all.len() > MAX_LOOKUP as usize;
    all.truncate(MAX_LOOKUP as usize);
    (all.into_iter().map(|(_, v)| v).collect(), truncated)
}

/// One lookup entry: enough to find the receipt and its owner.
fn summary_json(row: &LedgerRow) -> Value {
    json!({
        "session_id": row.call_id.to_string(),
        "outcome": "admitted",
        "ingress": row.ingress,
        "carrier_call_id": row.carrier_call_id,
        "owner": { "instance": row.owner_instance, "epoch": row.owner_epoch.0 },
        "admitted_at": rfc3339(row.admitted_at),
        "end_reason": row.end_reason,
        "cleanup_status": row.cleanup_status.as_str(),
    })
}

/// A refused call's lookup entry: the receipt fields it has.
fn refusal_summary_json(r: &Rejection) -> Value {
    json!({
        "session_id": r.call_id.to_string(),
        "outcome": "refused",
        "ingress": r.ingress,
        "carrier_call_id": r.carrier_call_id,
        "owner": { "instance": r.instance, "epoch": Value::Null },
        "refused_at": rfc3339(r.at),
        "end_reason": r.reason,
        "cleanup_status": Value::Null,
    })
}

/// What is known of a refused call: who refused it, when, why, and how
/// long it had queued. No lifecycle, stats or events: it had none.
pub fn refusal_json(r: &Rejection) -> Value {
    json!({
        "session_id": r.call_id.to_string(),
        "outcome": "refused",
        "ingress": r.ingress,
        "carrier_call_id": r.carrier_call_id,
        "partner_id": r.partner_id,
        "refused_by": r.instance,
        "refused_at": rfc3339(r.at),
        "admission_wait_ms": r.waited.as_millis() as u64,
        "end_reason": r.reason,
    })
}

/// The receipt of `row` with its `events` (one page of them).
pub fn receipt_json(row: &LedgerRow, events: &[EventRow]) -> Value {
    let t0 = row.admitted_at;
    let stamp = |t: Option<SystemTime>| t.map_or(Value::Null, |t| stamp_json(t, t0));
    let mut stats = row.stats.clone();
    let mut opening = serde_json::Map::new();
    if let Some(obj) = stats.as_object_mut() {
        for k in OPENING_KEYS {
            opening.insert(k.to_string(), obj.remove(k).unwrap_or(Value::Null));
        }
    }
    let events: Vec<Value> = events
        .iter()
        .map(|e| {
            json!({
                "seq": e.seq,
                "kind": e.kind,
                "at": rfc3339(e.at),
                "offset_ms": offset_ms(e.at, t0),
                "detail": e.detail,
            })
        })
        .collect();
    json!({
        "session_id": row.call_id.to_string(),
        "outcome": "admitted",
        "ingress": row.ingress,
        "transport": opening["transport"],
        "carrier_call_id": row.carrier_call_id,
        "partner_id": row.partner_id,
        "owner": { "instance": row.owner_instance, "epoch": row.owner_epoch.0 },
        "labels": opening["labels"],
        "labels_truncated": opening["labels_truncated"],
        "providers": opening["providers"],
        "admission_wait_ms": row.admission_wait.as_millis() as u64,
        "lifecycle": {
            "admitted": stamp(Some(row.admitted_at)),
            "media_ready": stamp(row.media_ready_at),
            "first_playable_audio": stamp(row.first_playable_audio_at),
            "last_media": stamp(row.last_media_at),
            "disconnect_observed": stamp(row.disconnect_observed_at),
            "cleanup_completed": stamp(row.cleanup_completed_at),
        },
        "end_reason": row.end_reason,
        "carrier_end": row.carrier_end,
        "cleanup_status": row.cleanup_status.as_str(),
        "stats": stats,
        "events": events,
    })
}

fn stamp_json(t: SystemTime, t0: SystemTime) -> Value {
    json!({ "at": rfc3339(t), "offset_ms": offset_ms(t, t0) })
}

/// Milliseconds from `t0` to `t` (negative when `t` is earlier), to the
/// microsecond Postgres stores.
fn offset_ms(t: SystemTime, t0: SystemTime) -> f64 {
    match t.duration_since(t0) {
        Ok(d) => d.as_micros() as f64 / 1_000.0,
        Err(e) => -(e.duration().as_micros() as f64) / 1_000.0,
    }
}

/// RFC 3339 UTC with microseconds (`2026-01-31T12:00:00.123456Z`), the
/// sub-microsecond part truncated; instants before 1970 print as the epoch
/// (no call is that old).
pub fn rfc3339(t: SystemTime) -> String {
    // A clock past jiff's range (year 9999) is broken: clamp to its end.
    let ts =
        jiff::Timestamp::try_from(t.max(SystemTime::UNIX_EPOCH)).unwrap_or(jiff::Timestamp::MAX);
    format!("{ts:.6}")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use state_store::{CleanupStatus, OwnerEpoch};

    use super::*;

    fn at(secs: u64, micros: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros)
    }

    #[test]
    fn the_events_page_is_read_from_the_query_and_bad_ones_are_named() {
        let page = |q: &str| EventsPage::parse(Some(q));
        assert_eq!(
            EventsPage::parse(None),
            Ok(EventsPage {
                after: None,
                limit: DEFAULT_EVENTS
            })
        );
        assert_eq!(
            page("events_after=7&events_limit=2"),
            Ok(EventsPage {
                after: Some(7),
                limit: 2
            })
        );
        assert_eq!(page("").map(|p| p.limit), Ok(DEFAULT_EVENTS));
        for bad in [
            "events_limit=0",
            "events_limit=10001",
            "events_limit=-1",
            "events_after=x",
            "events_after",
            "events_after=1&events_after=2",
            "limit=5",
        ] {
            let e = page(bad).unwrap_err();
            assert!(e.contains("events_") || e.contains("limit"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_lookup_takes_one_bounded_decoded_carrier_id() {
        assert_eq!(
            carrier_call_id(Some("carrier_call_id=CA12")).unwrap(),
            "CA12"
        );
        assert_eq!(
            carrier_call_id(Some("carrier_call_id=a%40b%2Ec+d")).unwrap(),
            "a@b.c d"
        );
        let long = format!("carrier_call_id={}", "x".repeat(MAX_CARRIER_ID + 1));
        for (q, says) in [
            (None, "required"),
            (Some("carrier_call_id="), "1..="),
            (Some(long.as_str()), "1..="),
            (Some("carrier_call_id=a&carrier_call_id=b"), "twice"),
            (Some("call=a"), "unknown query parameter"),
            (Some("carrier_call_id=%zz"), "percent"),
            (Some("carrier_call_id=%ff"), "percent"),
        ] {
            let e = carrier_call_id(q).unwrap_err();
            assert!(e.contains(says), "{q:?}: {e}");
        }
    }

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(rfc3339(at(0, 0)), "1970-01-01T00:00:00.000000Z");
        assert_eq!(rfc3339(at(951_782_400, 5)), "2000-02-29T00:00:00.000005Z");
        assert_eq!(
            rfc3339(at(1_700_000_000, 250_000)),
            "2023-11-14T22:13:20.250000Z"
        );
        assert_eq!(rfc3339(at(4_107_542_399, 0)), "2100-02-28T23:59:59.000000Z");
        // Nanoseconds are truncated, not rounded; before 1970 is the epoch.
        let just_before = at(1, 0) - Duration::from_nanos(1);
        assert_eq!(rfc3339(just_before), "1970-01-01T00:00:00.999999Z");
        let early = SystemTime::UNIX_EPOCH - Duration::from_secs(86_400);
        assert_eq!(rfc3339(early), "1970-01-01T00:00:00.000000Z");
    }

    fn row(stats: Value) -> LedgerRow {
        let t0 = at(1_700_000_000, 0);
        LedgerRow {
            call_id: CallId::new_random(),
            owner_instance: "cg-1".into(),
            owner_epoch: OwnerEpoch(2),
            ingress: "sip".into(),
            carrier_call_id: Some("abc@host".into()),
            partner_id: None,
            admitted_at: t0,
            admission_wait: Duration::from_millis(7),
            media_ready_at: Some(t0 + Duration::from_micros(120_500)),
            first_playable_audio_at: None,
            last_media_at: None,
            disconnect_observed_at: None,
            cleanup_completed_at: None,
            end_reason: None,
            cleanup_status: CleanupStatus::Pending,
            stats,
            carrier_end: None,
        }
    }

    #[test]
    fn the_opening_fields_are_lifted_and_the_rest_of_stats_kept() {
        let stats = json!({
            "transport": "sip-udp",
            "labels": {"x-role": "agent"},
            "labels_truncated": 0,
            "providers": {"stt_model": "nova-3"},
            "setup_ms": 42,
        });
        let r = row(stats);
        let event = EventRow {
            seq: 1,
            at: r.admitted_at + Duration::from_millis(3),
            kind: "dtmf".into(),
            detail: json!({}),
        };
        let v = receipt_json(&r, &[event]);
        assert_eq!(v["transport"], "sip-udp");
        assert_eq!(v["labels"], json!({"x-role": "agent"}));
        assert_eq!(v["providers"]["stt_model"], "nova-3");
        assert_eq!(v["owner"], json!({"instance": "cg-1", "epoch": 2}));
        assert_eq!(v["stats"], json!({"setup_ms": 42}), "no field twice");
        assert_eq!(v["lifecycle"]["admitted"]["offset_ms"], 0.0);
        assert_eq!(v["lifecycle"]["media_ready"]["offset_ms"], 120.5);
        assert_eq!(
            v["lifecycle"]["media_ready"]["at"],
            "2023-11-14T22:13:20.120500Z"
        );
        assert_eq!(v["lifecycle"]["last_media"], Value::Null);
        assert_eq!(v["cleanup_status"], "pending");
        assert_eq!(v["events"][0]["offset_ms"], 3.0);
        assert_eq!(v["events"][0]["kind"], "dtmf");
    }

    fn refusal(secs: u64, reason: &str) -> Rejection {
        Rejection {
            call_id: CallId::new_random(),
            instance: "cg-2".into(),
            ingress: "webrtc".into(),
            carrier_call_id: Some("s1".into()),
            partner_id: None,
            reason: reason.into(),
            waited: Duration::from_millis(2_040),
            at: at(secs, 0),
        }
    }

    #[test]
    fn a_lookup_merges_admitted_and_refused_oldest_first_and_bounded() {
        let admitted = row(json!({})); // admitted at 1_700_000_000
        let early = refusal(1_699_999_990, "queue_full");
        let late = refusal(1_700_000_010, "queue_timeout");
        let (sessions, truncated) = merged(std::slice::from_ref(&admitted), &[early.clone(), late]);
        assert!(!truncated);
        let outcomes: Vec<_> = sessions.iter().map(|s| s["outcome"].clone()).collect();
        assert_eq!(
            outcomes,
            [json!("refused"), json!("admitted"), json!("refused")]
        );
        assert_eq!(sessions[0]["session_id"], early.call_id.to_string());
        assert_eq!(sessions[0]["end_reason"], "queue_full");
        assert_eq!(sessions[0]["owner"]["instance"], "cg-2");
        assert_eq!(sessions[1]["session_id"], admitted.call_id.to_string());

        let many: Vec<Rejection> = (0..MAX_LOOKUP as u64)
            .map(|i| refusal(1_600_000_000 + i, "queue_full"))
            .collect();
        let (sessions, truncated) = merged(&[admitted], &many);
        assert!(truncated, "21 recorded, 20 answered");
        assert_eq!(sessions.len(), MAX_LOOKUP as usize);
        assert!(
            sessions.iter().all(|s| s["outcome"] == "refused"),
            "the oldest 20"
        );
    }

    #[test]
    fn a_refusal_answers_what_was_recorded_and_nothing_it_never_had() {
        let r = refusal(1_700_000_000, "queue_timeout");
        let v = refusal_json(&r);
        assert_eq!(v["outcome"], "refused");
        assert_eq!(v["end_reason"], "queue_timeout");
        assert_eq!(v["admission_wait_ms"], 2_040);
        assert_eq!(v["refused_by"], "cg-2");
        assert_eq!(v["refused_at"], "2023-11-14T22:13:20.000000Z");
        assert_eq!(v.get("lifecycle"), None);
        assert_eq!(v.get("stats"), None);
    }

    #[test]
    fn a_row_from_before_the_opening_fields_shows_them_as_null() {
        let v = receipt_json(&row(json!({})), &[]);
        assert_eq!(v["transport"], Value::Null);
        assert_eq!(v["labels"], Value::Null);
        assert_eq!(v["events"], json!([]));
    }
}
