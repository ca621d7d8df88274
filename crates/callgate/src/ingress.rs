//! The Twilio media-stream ingress: `GET /v1/media-stream`.
//!
//! Per connection: check the signature, wait (bounded) for `start`, validate
//! the media format, ask the admission gate — watching the socket the whole
//! time, so a caller who hangs up while queued frees their place — then open
//! the call's resources, and hand over to the call actor. Every refusal and
//! every setup failure goes to the overflow path; nothing ends in silence.

use std::sync::Arc;
use std::time::{Duration, Instant};

use admission::{Permit, Rejection, Ticket};
use axum::extract::{State, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use state_store::{CallId, CleanupStatus};
use tracing::{Instrument, info, info_span, warn};

use crate::app::App;
use crate::call::record::{CallClock, Recorder, millis};
use crate::call::setup::{self, CallInfo, SetupFailure};
use crate::call::{self, CallActor};
use crate::carrier::{CarrierEvent, CarrierLink};
use crate::config::ms;
use crate::hold::Hold;
use crate::metrics as m;
use crate::overflow::{self, OverflowCall};
use crate::twilio;

/// The upgrade handler.
pub async fn media_stream(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    uri: Uri,
    ws: WebSocketUpgrade,
) -> Response {
    let cfg = app.cfg();
    if let Some(token) = cfg.twilio.auth_token.as_deref().filter(|t| !t.is_empty()) {
        let urls = signed_urls(cfg.twilio.public_url.as_deref(), &headers, &uri);
        let sig = headers
            .get("x-twilio-signature")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !urls
            .iter()
            .any(|url| twilio::signature_is_valid(token, url, sig))
        {
            warn!(url = %urls[0], has_signature = !sig.is_empty(), "media stream refused: invalid X-Twilio-Signature");
            metrics::counter!(m::PROTOCOL_ERRORS, "kind" => "bad_signature").increment(1);
            return (StatusCode::FORBIDDEN, "invalid X-Twilio-Signature").into_response();
        }
    }
    let max = cfg.twilio.max_message_bytes;
    let tracker = app.calls.clone();
    // Carrier frames are ~300 bytes: an 8 KiB read buffer (tungstenite's
    // default is 128 KiB, zero-filled on every read) keeps thousands of
    // streams cheap in memory and CPU. Writes are flushed per batch.
    ws.max_message_size(max)
        .max_frame_size(max)
        .read_buffer_size(8 * 1024)
        .on_upgrade(move |socket| async move {
            tracker.spawn(handle(app, socket)).await.ok();
        })
}

/// The URLs Twilio may have signed: the configured public URL, or the
/// request's Host and path under `wss://` (Twilio's scheme) and `ws://`
/// (the scheme this listener sees when TLS ends at a proxy). The HMAC, not
/// the scheme, is what authenticates.
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

async fn handle(app: Arc<App>, socket: axum::extract::ws::WebSocket) {
    let cfg = app.cfg();
    let mut carrier = CarrierLink::new(socket, cfg.twilio.max_media_payload_bytes);
    let start = match await_start(&mut carrier, ms(cfg.twilio.start_timeout_ms)).await {
        Ok(s) => s,
        Err(why) => {
            warn!(why = %why, "media stream closed before a call started");
            metrics::counter!(m::PROTOCOL_ERRORS, "kind" => "no_start").increment(1);
            carrier.close(1008, &why).await;
            return;
        }
    };
    let call_id = CallId::new_random();
    let span = info_span!("call", call_id = %call_id, call_sid = %start.call_sid);
    run_call(app, carrier, start, call_id)
        .instrument(span)
        .await;
}

/// Reads until `start`. Media before `start` is a protocol violation.
async fn await_start(
    carrier: &mut CarrierLink,
    timeout: Duration,
) -> Result<twilio::Start, String> {
    let wait = async {
        loop {
            match carrier.next_event().await {
                CarrierEvent::Start(s) => return Ok(s),
                CarrierEvent::Ignored => continue,
                CarrierEvent::Audio(_) => return Err("media before start".to_string()),
                CarrierEvent::Invalid(e) => return Err(format!("invalid frame before start: {e}")),
                CarrierEvent::Stop => return Err("stop before start".to_string()),
                CarrierEvent::Gone(why) => return Err(why),
                other => return Err(format!("unexpected event before start: {other:?}")),
            }
        }
    };
    tokio::time::timeout(timeout, wait)
        .await
        .unwrap_or_else(|_| Err(format!("no start event within {} ms", timeout.as_millis())))
}

async fn run_call(app: Arc<App>, mut carrier: CarrierLink, start: twilio::Start, call_id: CallId) {
    carrier.set_stream_sid(&start.stream_sid);
    if !start.media_format.is_twilio_mulaw() {
        let f = &start.media_format;
        let why = format!(
            "unsupported mediaFormat {}@{}x{}",
            f.encoding, f.sample_rate, f.channels
        );
        warn!(why = %why, "closing stream");
        metrics::counter!(m::PROTOCOL_ERRORS, "kind" => "unsupported_media_format").increment(1);
        record_refusal(
            &app,
            call_id,
            &start.call_sid,
            "unsupported_media_format",
            Duration::ZERO,
        );
        carrier.close(1008, &why).await;
        return;
    }
    let asked = Instant::now();
    let permit = match wait_admission(&app, &mut carrier).await {
        Admission::Admitted(p) => p,
        Admission::Rejected(r) => return reject(&app, carrier, call_id, &start.call_sid, r).await,
        Admission::Abandoned(why) => {
            info!(why = %why, waited_ms = millis(asked.elapsed()), "caller left while waiting for admission");
            record_refusal(
                &app,
                call_id,
                &start.call_sid,
                "caller_abandoned",
                asked.elapsed(),
            );
            carrier.close(1000, "").await;
            return;
        }
    };
    info!(waited = ?permit.waited(), "call_admitted call_id={call_id} waited={:.3}s", permit.waited().as_secs_f64());
    metrics::counter!(m::ADMITTED).increment(1);
    metrics::histogram!(m::ADMISSION_WAIT).record(permit.waited().as_secs_f64());
    let info = CallInfo {
        call_id,
        carrier_call_id: start.call_sid.clone(),
        metadata: metadata(&start),
        admitted_at: permit.admitted_at(),
        admission_wait: permit.waited(),
    };
    set_up_and_run(app, carrier, permit, info).await;
}

enum Admission {
    Admitted(Permit),
    Rejected(Rejection),
    Abandoned(String),
}

/// Waits for a slot (FIFO, bounded by the queue timeout) while reading the
/// carrier: a caller who has to wait hears "please hold" and hold music;
/// caller audio during the wait is discarded; a hang-up leaves the queue at
/// once (dropping the ticket frees its place).
async fn wait_admission(app: &App, carrier: &mut CarrierLink) -> Admission {
    let mut ticket: Ticket = match app.gate.enqueue(Instant::now()) {
        Ok(t) => t,
        Err(r) => return Admission::Rejected(r),
    };
    let deadline = ticket.deadline();
    let mut hold = (!ticket.is_granted()).then(Hold::start);
    let outcome = loop {
        // Checked before waiting: a caller who left is let go at once.
        if let Some(left) = left_queue(carrier) {
            break left;
        }
        if let Some(h) = hold.as_mut() {
            h.pump(carrier, Instant::now());
        }
        let tick = hold
            .as_ref()
            .map_or(deadline, Hold::next_deadline)
            .min(Instant::now() + QUEUE_TICK);
        tokio::select! {
            res = &mut ticket => break match res {
                Ok(p) => Admission::Admitted(p),
                Err(r) => Admission::Rejected(r),
            },
            () = tokio::time::sleep_until(deadline.into()) => {
                break match ticket.expire(Instant::now()) {
                    Ok(p) => Admission::Admitted(p),
                    Err(r) => Admission::Rejected(r),
                };
            }
            () = tokio::time::sleep_until(tick.into()) => {}
        }
    };
    if let Some(h) = hold {
        h.stop(carrier);
    }
    outcome
}

/// How often a queued call looks at its carrier (for a hang-up): carrier
/// frames are read in batches, one wake-up per hold-audio chunk rather than
/// per 20 ms frame. A caller who hangs up while queued is let go within it.
const QUEUE_TICK: Duration = crate::prompts::CHUNK;

/// Whether the caller left while queued (hang-up, lost socket, bad frame).
fn left_queue(carrier: &mut CarrierLink) -> Option<Admission> {
    carrier.ready_events().into_iter().find_map(|ev| match ev {
        CarrierEvent::Stop => Some(Admission::Abandoned("stop".into())),
        CarrierEvent::Gone(why) => Some(Admission::Abandoned(why)),
        CarrierEvent::Invalid(e) => Some(Admission::Abandoned(format!("protocol error: {e}"))),
        _ => None,
    })
}

async fn reject(app: &App, carrier: CarrierLink, call_id: CallId, call_sid: &str, r: Rejection) {
    let reason = r.reason.as_str();
    warn!(
        reason,
        waited = ?r.waited,
        "call_admission_rejected call_id={call_id} reason={reason} waited={:.3}s",
        r.waited.as_secs_f64()
    );
    metrics::counter!(m::REJECTED, "reason" => reason).increment(1);
    record_refusal(app, call_id, call_sid, reason, r.waited);
    let call = OverflowCall {
        call_id: call_id.to_string(),
        carrier_call_id: call_sid,
        reason,
        waited: r.waited,
    };
    overflow::run(app, carrier, call).await;
}

/// A refused call is a promise refused: it is recorded and countable, in
/// batches and off the caller's path (see [`crate::refusals`]).
fn record_refusal(app: &App, call_id: CallId, call_sid: &str, reason: &str, waited: Duration) {
    app.refusals.record(state_store::Rejection {
        call_id,
        instance: app.instance(),
        ingress: "twilio".to_string(),
        carrier_call_id: Some(call_sid.to_string()).filter(|s| !s.is_empty()),
        reason: reason.to_string(),
        waited,
        at: std::time::SystemTime::now(),
    });
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

/// Opens the four resources (watching the carrier), then runs the call or
/// sends it to the overflow path.
async fn set_up_and_run(app: Arc<App>, mut carrier: CarrierLink, permit: Permit, info: CallInfo) {
    let clock = CallClock::anchor(info.admitted_at);
    let setup_started = Instant::now();
    let gauge = call::setup_gauge(&app);
    let mut hangup: Option<(Instant, String)> = None;
    // Setup is not abandoned when the caller hangs up: it is bounded anyway,
    // and finishing it lets whatever was opened be closed and recorded.
    let result = {
        let open = setup::open(&app, &info, &clock);
        tokio::pin!(open);
        loop {
            tokio::select! {
                r = &mut open => break r,
                ev = carrier.next_event(), if hangup.is_none() => match ev {
                    CarrierEvent::Stop => hangup = Some((Instant::now(), "caller_hangup_during_setup".into())),
                    CarrierEvent::Gone(_) => hangup = Some((Instant::now(), "carrier_gone_during_setup".into())),
                    CarrierEvent::Invalid(e) => hangup = Some((Instant::now(), format!("protocol_error:{}", e.kind()))),
                    _ => {}
                },
            }
        }
    };
    drop(gauge);
    let setup_ms = millis(setup_started.elapsed());
    metrics::histogram!(m::SETUP_SECONDS).record(setup_started.elapsed().as_secs_f64());
    match result {
        Err(failure) => setup_failed(&app, carrier, permit, &info, clock, failure, hangup).await,
        Ok(res) => {
            let rec = Recorder::new(app.writes.clone(), info.call_id, res.epoch, clock);
            let actor = CallActor::new(Arc::clone(&app), permit, carrier, res, rec, setup_ms);
            match hangup {
                None => actor.run().await,
                Some((at, reason)) => actor.end_before_start(reason, at).await,
            }
        }
    }
}

async fn setup_failed(
    app: &App,
    carrier: CarrierLink,
    permit: Permit,
    info: &CallInfo,
    clock: CallClock,
    failure: SetupFailure,
    hangup: Option<(Instant, String)>,
) {
    let reason = failure.reason();
    for (resource, error) in &failure.failures {
        warn!(resource = resource.as_str(), error = %error, "call setup failed");
        metrics::counter!(m::SETUP_FAILURES, "resource" => resource.as_str()).increment(1);
    }
    if let Some(epoch) = failure.epoch {
        let mut rec = Recorder::new(app.writes.clone(), info.call_id, epoch, clock);
        let detail: Vec<_> = failure
            .failures
            .iter()
            .map(|(r, e)| serde_json::json!({ "resource": r.as_str(), "error": e }))
            .collect();
        let now = Instant::now();
        rec.event(
            "setup_failed",
            serde_json::json!({ "failures": detail }),
            now,
        );
        rec.stage(
            state_store::Stage::DisconnectObserved,
            hangup.as_ref().map_or(now, |h| h.0),
        );
        let stats = serde_json::json!({
            "active_counter_delta": { "increment": 1, "decrement": 1 },
            "admission_wait_ms": millis(info.admission_wait),
            "setup_failures": detail,
        });
        rec.close(&reason, CleanupStatus::Completed, Instant::now(), stats);
    } else {
        record_refusal(
            app,
            info.call_id,
            &info.carrier_call_id,
            &reason,
            info.admission_wait,
        );
    }
    if hangup.is_some() {
        carrier.close(1000, "").await;
    } else {
        let call = OverflowCall {
            call_id: info.call_id.to_string(),
            carrier_call_id: &info.carrier_call_id,
            reason: &reason,
            waited: info.admission_wait,
        };
        overflow::run(app, carrier, call).await;
    }
    metrics::counter!(m::CALLS_ENDED, "reason" => call::reason_label(&reason)).increment(1);
    drop(permit);
}
