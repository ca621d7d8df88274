//! The call path every ingress shares, generic over the [`Leg`].
//!
//! A carrier's ingress (in `crate::carrier`: Twilio media stream, partner
//! WebSocket, SIP) authenticates
//! the upgrade, reads its start message and builds an [`Arrival`]; from then
//! on [`run`] does the same for every leg: ask the admission gate —
//! watching the leg the whole time, so a caller who hangs up while queued
//! frees their place, and playing hold audio — then open the call's
//! resources and hand over to the call actor. Every refusal and every setup
//! failure goes to the overflow path; nothing ends in silence.

use std::sync::Arc;
use std::time::{Duration, Instant};

use admission::{Permit, RejectReason, Rejection, Ticket};
use state_store::Stage;
use tracing::{info, warn};

use crate::app::CallServices;
use crate::call::receipt::{Cleanup, delta_json};
use crate::call::record::{CallClock, Recorder, millis};
use crate::call::setup::{self, Arrival, CallInfo, SetupFailure};
use crate::call::{CallActor, setup_gauge};
use crate::end::{End, EndReason};
use crate::hold::Hold;
use crate::leg::{Cause, Finish, Leg, LegEvent};
use crate::metrics as m;
use crate::overflow::{self, OverflowCall};

/// Why a call was refused before it had a ledger row (the
/// `admission_rejections.reason` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Admission(RejectReason),
    /// The caller left while queued.
    CallerAbandoned,
    /// The leg asked for an audio format callgate does not play.
    UnsupportedFormat,
    /// Setup failed before the ledger row existed.
    SetupFailed(setup::Resource),
    /// Admitted, but the leg's media could not be opened (SIP: no RTP
    /// port free, or the caller left as the call was answered).
    MediaUnavailable,
}

impl Refusal {
    pub const fn as_str(self) -> &'static str {
        match self {
            Refusal::Admission(r) => r.as_str(),
            Refusal::CallerAbandoned => "caller_abandoned",
            Refusal::UnsupportedFormat => "unsupported_media_format",
            Refusal::SetupFailed(r) => EndReason::SetupFailed(r).label(),
            Refusal::MediaUnavailable => "media_unavailable",
        }
    }
}

/// Admission, setup and the call, for any leg.
pub async fn run<L: Leg>(app: Arc<CallServices>, leg: L, arrival: Arrival) {
    run_reserved(app, leg, arrival, None).await;
}

/// [`run`] for a call admitted before its leg existed (the Twilio webhook
/// reserved `reserved` for it): no second decision, no queue.
pub async fn run_reserved<L: Leg>(
    app: Arc<CallServices>,
    mut leg: L,
    arrival: Arrival,
    reserved: Option<Permit>,
) {
    let asked = Instant::now();
    let admitted = match reserved {
        Some(p) => Admission::Admitted(p),
        None => wait_admission(&app, &mut leg, &arrival).await,
    };
    let permit = match admitted {
        Admission::Admitted(p) => p,
        Admission::Rejected(r) => return reject(&app, leg, &arrival, r).await,
        Admission::Abandoned(left) => {
            info!(why = ?left, waited_ms = millis(asked.elapsed()), "caller left while waiting for admission");
            record_refusal(&app, &arrival, Refusal::CallerAbandoned, asked.elapsed());
            // A peer that broke the protocol is told why; one that left is released.
            let how = match left {
                LegEvent::Violation(v) => Finish::Refuse(v),
                _ => Finish::Release,
            };
            let bound = crate::config::ms(app.cfg().call.teardown_timeout_ms);
            leg.finish(how, bound).await;
            return;
        }
    };
    // The one configuration this call runs on, from its admission on.
    let cfg = app.cfg();
    // Names this call to the reconciler for as long as it runs here.
    let _live = app.live.enter(arrival.call_id);
    if let Err(ev) = leg.open_media().await {
        warn!(event = ?ev, "call admitted but its media could not be opened");
        record_refusal(&app, &arrival, Refusal::MediaUnavailable, permit.waited());
        permit.release(Instant::now());
        let how = match ev {
            LegEvent::Violation(v) => Finish::Refuse(v),
            _ => Finish::Release,
        };
        let bound = crate::config::ms(cfg.call.teardown_timeout_ms);
        leg.finish(how, bound).await;
        return;
    }
    let call_id = arrival.call_id;
    info!(waited = ?permit.waited(), "call_admitted call_id={call_id} waited={:.3}s", permit.waited().as_secs_f64());
    metrics::counter!(m::ADMITTED, "ingress" => arrival.ingress.as_str()).increment(1);
    metrics::histogram!(m::ADMISSION_WAIT).record(permit.waited().as_secs_f64());
    let info = CallInfo {
        admitted_at: permit.admitted_at(),
        admission_wait: permit.waited(),
        arrival,
        cfg,
    };
    set_up_and_run(app, leg, permit, info).await;
}

enum Admission {
    Admitted(Permit),
    Rejected(Rejection),
    /// The leg's terminal event: the caller left or broke the protocol.
    Abandoned(LegEvent),
}

/// Waits for a slot (FIFO, bounded by the queue timeout) while reading the
/// leg: a caller who has to wait hears "please hold" and hold music;
/// caller audio during the wait is discarded; a hang-up leaves the queue at
/// once (dropping the ticket frees its place).
async fn wait_admission(app: &CallServices, leg: &mut impl Leg, arrival: &Arrival) -> Admission {
    let mut ticket: Ticket = match app
        .gate
        .enqueue_for(arrival.partner.as_ref(), Instant::now())
    {
        Ok(t) => t,
        Err(r) => return Admission::Rejected(r),
    };
    let deadline = ticket.deadline();
    if !ticket.is_granted() {
        leg.queued();
    }
    // A leg without media yet (SIP before its answer) has nothing to play
    // hold audio on.
    let mut hold = (!ticket.is_granted() && leg.has_media()).then(|| Hold::start(leg.format()));
    let outcome = loop {
        // Checked before waiting: a caller who left is let go at once.
        if let Some(left) = left_queue(leg) {
            break left;
        }
        let now = Instant::now();
        if let Some(h) = hold.as_mut() {
            h.pump(leg, now);
        }
        let tick = hold
            .as_ref()
            .map_or(deadline, |h| h.next_deadline(now))
            .min(now + QUEUE_TICK);
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
        h.stop(leg);
    }
    outcome
}

/// How often a queued call looks at its leg (for a hang-up): leg events
/// are read in batches, one wake-up per hold-audio chunk rather than per
/// 20 ms frame. A caller who hangs up while queued is let go within it.
const QUEUE_TICK: Duration = crate::prompts::CHUNK;

/// Whether the caller left while queued (hang-up, lost transport, bad input).
fn left_queue(leg: &mut impl Leg) -> Option<Admission> {
    leg.ready_events()
        .into_iter()
        .find(LegEvent::is_terminal)
        .map(Admission::Abandoned)
}

async fn reject<L: Leg>(app: &CallServices, leg: L, arrival: &Arrival, r: Rejection) {
    let reason = r.reason.as_str();
    let call_id = arrival.call_id;
    warn!(
        reason,
        waited = ?r.waited,
        partner = arrival.partner.as_ref().map(ToString::to_string),
        "call_admission_rejected call_id={call_id} reason={reason} waited={:.3}s",
        r.waited.as_secs_f64()
    );
    metrics::counter!(m::REJECTED, "reason" => reason, "ingress" => arrival.ingress.as_str())
        .increment(1);
    record_refusal(app, arrival, Refusal::Admission(r.reason), r.waited);
    let partner = arrival.partner.as_ref().map(ToString::to_string);
    let call = OverflowCall {
        call_id: call_id.to_string(),
        carrier_call_id: &arrival.carrier_call_id,
        partner: partner.as_deref(),
        cause: Cause::Refused(r.reason),
        transfer_target: arrival.transfer_target.clone(),
        waited: r.waited,
    };
    overflow::run(app, leg, call).await;
}

/// A refused call is a promise refused: it is recorded and countable, in
/// batches and off the caller's path (see [`crate::refusals`]).
pub fn record_refusal(app: &CallServices, arrival: &Arrival, why: Refusal, waited: Duration) {
    app.refusals.record(state_store::Rejection {
        call_id: arrival.call_id,
        instance: app.instance(),
        ingress: arrival.ingress.as_str().to_string(),
        carrier_call_id: Some(arrival.carrier_call_id.clone()).filter(|s| !s.is_empty()),
        partner_id: arrival.partner.as_ref().map(ToString::to_string),
        reason: why.as_str().to_string(),
        waited,
        at: std::time::SystemTime::now(),
    });
}

/// Opens the four resources (watching the leg), then runs the call or
/// sends it to the overflow path.
async fn set_up_and_run<L: Leg>(
    app: Arc<CallServices>,
    mut leg: L,
    mut permit: Permit,
    info: CallInfo,
) {
    let clock = CallClock::anchor(info.admitted_at);
    let setup_started = Instant::now();
    let gauge = setup_gauge(&app);
    let mut hangup: Option<End> = None;
    // Setup is not abandoned when the caller hangs up: it is bounded anyway,
    // and finishing it lets whatever was opened be closed and recorded.
    let result = {
        let open = setup::open(&app, &info, &clock);
        tokio::pin!(open);
        loop {
            tokio::select! {
                r = &mut open => break r,
                ev = leg.next_event(), if hangup.is_none() => hangup = left_during_setup(ev),
            }
        }
    };
    drop(gauge);
    // Success or failure, the setup's connections are no longer being
    // opened: the next call queued at the gate may start its own.
    permit.setup_done(Instant::now());
    let setup_ms = millis(setup_started.elapsed());
    metrics::histogram!(m::SETUP_SECONDS).record(setup_started.elapsed().as_secs_f64());
    match result {
        Err(failure) => setup_failed(&app, leg, permit, &info, clock, failure, hangup).await,
        Ok(res) => {
            let rec = Recorder::new(app.writes.clone(), info.arrival.call_id, res.epoch, clock);
            let actor = CallActor::new(Arc::clone(&app), permit, leg, res, rec, setup_ms, &info);
            match hangup {
                None => actor.run().await,
                Some(end) => actor.end_before_start(end).await,
            }
        }
    }
}

/// A leg event during setup: only the caller leaving matters.
fn left_during_setup(ev: LegEvent) -> Option<End> {
    let now = Instant::now();
    match ev {
        LegEvent::Hangup => Some(End::new(EndReason::CallerHangupDuringSetup, now)),
        LegEvent::Gone(why) => {
            Some(End::new(EndReason::CarrierGoneDuringSetup, now).with_detail(why))
        }
        LegEvent::Violation(v) => {
            Some(End::new(EndReason::ProtocolViolation(v.kind), now).with_detail(v.detail))
        }
        LegEvent::TransportLost(loss, detail) => {
            Some(End::new(loss.end(), now).with_detail(detail))
        }
        LegEvent::MediaTimeout(after) => Some(
            End::new(EndReason::RtpTimeout, now)
                .with_detail(format!("no RTP or RTCP for {} ms", after.as_millis())),
        ),
        _ => None,
    }
}

/// A call whose connections could not all be opened: the overflow prompt
/// (unless the caller already left), then the receipt — written last, after
/// the prompt, the leg's finish and the permit's release, so it states what
/// they achieved.
async fn setup_failed<L: Leg>(
    app: &CallServices,
    leg: L,
    permit: Permit,
    info: &CallInfo,
    clock: CallClock,
    failure: SetupFailure,
    hangup: Option<End>,
) {
    let reason = failure.reason();
    let a = &info.arrival;
    for (resource, error) in &failure.failures {
        warn!(resource = resource.as_str(), error = %error, "call setup failed");
        metrics::counter!(m::SETUP_FAILURES, "resource" => resource.as_str()).increment(1);
    }
    let mut rec = failure
        .epoch
        .map(|epoch| Recorder::new(app.writes.clone(), a.call_id, epoch, clock));
    let detail: Vec<_> = failure
        .failures
        .iter()
        .map(|(r, e)| serde_json::json!({ "resource": r.as_str(), "error": e }))
        .collect();
    if let Some(rec) = rec.as_mut() {
        let detail = serde_json::json!({ "failures": detail });
        rec.event("setup_failed", detail, Instant::now());
    } else if let EndReason::SetupFailed(r) = reason {
        record_refusal(app, a, Refusal::SetupFailed(r), info.admission_wait);
    }
    let bound = crate::config::ms(info.cfg.call.teardown_timeout_ms);
    let (peer_left_at, forced) = match &hangup {
        Some(end) => (
            Some(end.at),
            leg.finish(Finish::for_end(end, None), bound).await.forced,
        ),
        None => {
            let partner = a.partner.as_ref().map(ToString::to_string);
            let call = OverflowCall {
                call_id: a.call_id.to_string(),
                carrier_call_id: &a.carrier_call_id,
                partner: partner.as_deref(),
                cause: Cause::Ended(reason, None),
                transfer_target: a.transfer_target.clone(),
                waited: info.admission_wait,
            };
            let o = overflow::run(app, leg, call).await;
            (o.peer_left_at, o.forced_close)
        }
    };
    let tally = permit.tally();
    permit.release(Instant::now());
    let delta = tally.delta();
    metrics::counter!(m::CALLS_ENDED, "reason" => reason.label()).increment(1);
    let Some(mut rec) = rec else { return };
    if let Some(at) = peer_left_at {
        rec.stage(Stage::DisconnectObserved, at);
    }
    let cleanup = Cleanup {
        forced: if forced { vec!["leg"] } else { Vec::new() },
        writes_lost: rec.lost,
        permit_unreleased: delta.decrement != 1,
    };
    let stats = serde_json::json!({
        "active_counter_delta": delta_json(delta),
        "admission_wait_ms": millis(info.admission_wait),
        "setup_failures": detail,
        "writes_lost": cleanup.writes_lost,
        "cleanup": cleanup,
    });
    rec.close(
        &reason.ledger(None),
        cleanup.status(),
        Instant::now(),
        stats,
    );
}
