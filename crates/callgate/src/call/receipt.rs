//! The end of a call: bounded teardown and the closing receipt.
//!
//! Every field of the receipt is measured: the counter deltas are the
//! permit's own counts read *after* its release, "disconnect observed" is
//! stamped only when the peer's hang-up or loss was observed, and the
//! cleanup status says what cleanup achieved — a close that timed out or
//! had to be forced, or a write the queue refused, is not `completed`.

use std::time::Instant;

use admission::CounterDelta;
use media::pacer::Underruns;
use state_store::{CleanupStatus, Stage};
use tracing::info;

use super::CallActor;
use super::record::millis;
use crate::end::End;
use crate::leg::{Finish, Leg, LegFormat, LegStats};
use crate::metrics as m;

/// What could not be closed cleanly.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Cleanup {
    /// Connections whose close timed out, failed or had to be aborted.
    pub forced: Vec<&'static str>,
    pub writes_lost: u64,
    /// The permit's release was not observed (it must be exactly once).
    pub permit_unreleased: bool,
}

impl Cleanup {
    pub fn status(&self) -> CleanupStatus {
        if self.forced.is_empty() && self.writes_lost == 0 && !self.permit_unreleased {
            CleanupStatus::Completed
        } else {
            CleanupStatus::Failed
        }
    }
}

/// The receipt's `active_counter_delta`.
pub fn delta_json(d: CounterDelta) -> serde_json::Value {
    serde_json::json!({ "increment": d.increment, "decrement": d.decrement })
}

/// The receipt's `media` object.
pub fn media_json(
    format: LegFormat,
    leg: LegStats,
    stt_dropped: u64,
    underruns: Underruns,
    transport: Option<serde_json::Value>,
) -> serde_json::Value {
    let mut media = serde_json::json!({
        "format": format.as_str(),
        "frames_in": leg.frames_in,
        "frames_out": leg.frames_out,
        "frames_dropped": leg.frames_dropped,
        "ignored_carrier_events": leg.ignored_events,
        "stt_audio_dropped": stt_dropped,
        "outbound_underruns": underruns.count,
        "outbound_underrun_ms": underruns.total.as_millis() as u64,
        "outbound_longest_underrun_ms": underruns.longest.as_millis() as u64,
    });
    if let Some(t) = transport {
        media["transport"] = t;
    }
    media
}

/// Closes everything (bounded), releases the permit, writes the receipt.
pub async fn teardown<L: Leg>(actor: CallActor<L>, end: End) {
    let CallActor {
        permit,
        leg,
        core,
        res,
        mut tools,
        mut rec,
        speaking,
        mut recovery,
        setup_ms,
        transfer_target,
        cfg,
        ..
    } = actor;
    drop(speaking);
    let started = Instant::now();
    if let Some(t) = core.last_media() {
        rec.stage(Stage::LastMedia, t);
    }
    if end.peer_left {
        rec.stage(Stage::DisconnectObserved, end.at);
    }
    tools.cancel_all();
    let bound = crate::config::ms(cfg.call.teardown_timeout_ms);
    let format = leg.format();
    let stt_dropped = res.stt.0.dropped_audio_frames();
    let media = media_json(
        format,
        leg.stats(),
        stt_dropped,
        core.underruns(),
        leg.transport_report(),
    );
    let resume = leg.resume_report();
    // Read before the closes: each client's own count of its reconnects.
    let reconnects = serde_json::json!({
        "stt": res.stt.0.reconnects(),
        "tts": res.tts.0.reconnects(),
        "dialog": res.dialog.0.reconnects(),
    });
    let (stt, tts, dialog) = (res.stt, res.tts, res.dialog);
    let (dialog_session, dialog_events) = dialog;
    dialog_session.end(end.reason.label());
    drop(dialog_events);
    let how = Finish::for_end(&end, transfer_target);
    // A transfer hands the caller off while the leg finishes: it counts as
    // recovering (committed pressure) until the leg is done.
    recovery.handing_off(matches!(how, Finish::Transfer { .. }));
    let closes = tokio::join!(
        tokio::time::timeout(bound, leg.finish(how, bound)),
        tokio::time::timeout(bound, stt.0.close()),
        tokio::time::timeout(bound, tts.0.close()),
    );
    drop(recovery);
    let mut cleanup = Cleanup::default();
    if !matches!(closes.0, Ok(f) if !f.forced) {
        cleanup.forced.push("leg");
    }
    if !matches!(closes.1, Ok(Ok(_))) {
        cleanup.forced.push("stt");
    }
    if !matches!(closes.2, Ok(Ok(()))) {
        cleanup.forced.push("tts");
    }
    let tally = permit.tally();
    let admitted_at = permit.admitted_at();
    let waited = permit.waited();
    // The call's own configuration: a reload during the call changes the
    // next call, never this one's teardown.
    if cfg.faults.leak_permits {
        // The deliberate defect of `[faults] leak_permits`: the slot is
        // never given back, and the delta below shows it.
        std::mem::forget(permit);
    } else {
        permit.release(Instant::now());
    }
    let delta = tally.delta();
    cleanup.permit_unreleased = delta.decrement != 1;
    cleanup.writes_lost = rec.lost;
    let mut stats = serde_json::json!({
        "active_counter_delta": delta_json(delta),
        "admission_wait_ms": millis(waited),
        "setup_ms": setup_ms,
        "media": media,
        "interaction": core.interaction(),
        "turns": core.turn_latencies(),
        "untimed_turns": core.untimed_turns(),
        "delegation": tools.stats,
        "stalls": core.stalls(),
        "late_end_causes": core.late_ends(),
        "reconnects": reconnects,
        "writes_lost": cleanup.writes_lost,
        "cleanup": cleanup,
    });
    if let Some(r) = resume {
        stats["resume"] = r;
    }
    let done = Instant::now();
    let ledger_reason = end.ledger();
    rec.close(&ledger_reason, cleanup.status(), done, stats);
    let duration = done.duration_since(admitted_at);
    metrics::histogram!(m::TEARDOWN_SECONDS).record((done - started).as_secs_f64());
    metrics::histogram!(m::CALL_SECONDS).record(duration.as_secs_f64());
    metrics::counter!(m::CALLS_ENDED, "reason" => end.reason.label()).increment(1);
    info!(
        reason = %ledger_reason,
        duration_s = duration.as_secs_f64(),
        forced_closes = ?cleanup.forced,
        cleanup = cleanup.status().as_str(),
        "call_ended"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use admission::{CapacitySetting, Ceilings, Gate, GateConfig};
    use std::time::Duration;

    fn gate() -> Gate {
        let cfg = GateConfig {
            capacity: CapacitySetting::Pinned(4),
            ceilings: Ceilings::default(),
            partner_quotas: Default::default(),
            queue_max: 0,
            queue_timeout: Duration::from_secs(1),
            ..GateConfig::default()
        };
        Gate::new(cfg, Instant::now())
    }

    #[test]
    fn the_counter_delta_is_the_permits_own_count() {
        let gate = gate();
        let permit = gate.try_admit(Instant::now()).unwrap();
        let tally = permit.tally();
        assert_eq!(
            delta_json(tally.delta()),
            serde_json::json!({"increment": 1, "decrement": 0})
        );
        permit.release(Instant::now());
        assert_eq!(
            delta_json(tally.delta()),
            serde_json::json!({"increment": 1, "decrement": 1})
        );
    }

    #[test]
    fn a_leaked_permit_shows_no_decrement() {
        let gate = gate();
        let permit = gate.try_admit(Instant::now()).unwrap();
        let tally = permit.tally();
        std::mem::forget(permit);
        let delta = tally.delta();
        assert_eq!(
            delta_json(delta),
            serde_json::json!({"increment": 1, "decrement": 0})
        );
        assert_eq!(
            gate.snapshot().active,
            1,
            "the leak is visible in the gate too"
        );
        let cleanup = Cleanup {
            permit_unreleased: delta.decrement != 1,
            ..Cleanup::default()
        };
        assert_eq!(cleanup.status(), CleanupStatus::Failed);
    }

    #[test]
    fn only_a_clean_cleanup_is_completed() {
        let mut c = Cleanup::default();
        assert_eq!(c.status(), CleanupStatus::Completed);
        c.forced.push("tts");
        assert_eq!(c.status(), CleanupStatus::Failed);
        let c = Cleanup {
            writes_lost: 1,
            ..Cleanup::default()
        };
        assert_eq!(c.status(), CleanupStatus::Failed);
        let c = Cleanup {
            permit_unreleased: true,
            ..Cleanup::default()
        };
        assert_eq!(c.status(), CleanupStatus::Failed);
    }
}
