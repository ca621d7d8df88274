//! The overflow path: where every refused or failed call goes instead of
//! silence (DESIGN.md principle 1).
//!
//! It plays the bundled "high call volume" prompt — no provider needed — then
//! closes the media stream with 1000 so Twilio continues with the next TwiML
//! verb (a `<Dial>` to the human queue), and optionally tells a webhook. The
//! prompt ends with a `callgate-overflow:<reason>` mark, so both callgate and
//! a Twilio-faithful caller know whether it was heard in full.

use std::time::{Duration, Instant};

use media::pacer::{Paced, Pacer};
use tracing::{info, warn};

use crate::app::{App, Gauge};
use crate::carrier::{CarrierEvent, CarrierLink};
use crate::config::ms;
use crate::metrics as m;
use crate::prompts;

/// Default bound on the overflow webhook.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(2);

/// What happened on the overflow path.
#[derive(Debug, Clone, Copy)]
pub struct OverflowOutcome {
    /// The carrier echoed the prompt's final mark: the caller heard it all.
    pub prompt_heard: bool,
    pub elapsed: Duration,
}

/// Identifies the call for logs and the webhook.
pub struct OverflowCall<'a> {
    pub call_id: String,
    pub carrier_call_id: &'a str,
    /// Low-cardinality reason: `queue_full`, `queue_timeout`, `draining`,
    /// `dependency_down`, `setup_failed:stt`, …
    pub reason: &'a str,
    pub waited: Duration,
}

/// Plays the prompt, closes the stream, notifies the webhook.
pub async fn run(app: &App, mut carrier: CarrierLink, call: OverflowCall<'_>) -> OverflowOutcome {
    let _gauge = Gauge::hold(&app.counters.overflowing);
    let started = Instant::now();
    let cfg = app.cfg();
    let mark = format!("callgate-overflow:{}", call.reason);
    let mut pacer = prompts::pacer();
    pacer.push_audio(prompts::OVERFLOW);
    pacer.push_mark(mark.clone());
    let grace = ms(cfg.call.final_mark_grace_ms);
    let prompt_heard = play(&mut carrier, &mut pacer, &mark, grace).await;
    carrier.close(1000, "transferring").await;
    let outcome = OverflowOutcome {
        prompt_heard,
        elapsed: started.elapsed(),
    };
    metrics::counter!(m::OVERFLOWED, "reason" => crate::call::reason_label(call.reason), "prompt_heard" => prompt_heard.to_string())
        .increment(1);
    info!(
        reason = call.reason,
        prompt_heard, "call_overflowed: prompt played, stream closed for transfer"
    );
    notify_webhook(app, &call);
    outcome
}

/// Pumps the prompt in real time until its mark is echoed, the caller
/// leaves, or the deadline passes. Returns whether the mark was echoed.
///
/// The deadline is `grace` after the mark was actually sent: under CPU
/// pressure the pacer re-anchors and the prompt takes longer than its length,
/// and it must not be cut short for that. Until the mark is sent the bound is
/// twice the prompt's length plus `grace`.
async fn play(
    carrier: &mut CarrierLink,
    pacer: &mut Pacer<String>,
    mark: &str,
    grace: Duration,
) -> bool {
    let mut deadline = Instant::now() + pacer.queued() * 2 + grace;
    loop {
        let now = Instant::now();
        while let Some(item) = pacer.poll(now) {
            match item {
                Paced::Frame(f) => carrier.send_audio(&f),
                Paced::Mark(name) => {
                    carrier.send_mark(&name);
                    deadline = now + grace;
                }
            }
        }
        // Carrier frames are read in batches at each wake-up (the pacer
        // wakes every `prompts::CHUNK`), not one wake-up per 20 ms frame.
        for ev in carrier.ready_events() {
            match ev {
                CarrierEvent::MarkPlayed(name) if name == mark => return true,
                CarrierEvent::Stop | CarrierEvent::Gone(_) | CarrierEvent::Invalid(_) => {
                    return false;
                }
                _ => {}
            }
        }
        if now >= deadline {
            warn!("overflow prompt mark not echoed before the deadline");
            return false;
        }
        let wake = pacer
            .next_deadline()
            .unwrap_or(deadline)
            .min(deadline)
            .min(now + prompts::CHUNK);
        tokio::time::sleep_until(wake.into()).await;
    }
}

/// Fire-and-forget POST to the configured webhook, bounded by its timeout.
fn notify_webhook(app: &App, call: &OverflowCall<'_>) {
    let cfg = app.cfg();
    let Some(url) = cfg.overflow.webhook_url.clone().filter(|u| !u.is_empty()) else {
        return;
    };
    let timeout = cfg.overflow.webhook_timeout_ms.map_or(WEBHOOK_TIMEOUT, ms);
    let body = serde_json::json!({
        "call_id": call.call_id,
        "carrier_call_id": call.carrier_call_id,
        "reason": call.reason,
        "waited_ms": call.waited.as_millis() as u64,
        "instance": cfg.server.instance,
    });
    let req = app.http.post(url).json(&body).timeout(timeout);
    tokio::spawn(async move {
        match req.send().await {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => warn!(status = %r.status(), "overflow webhook refused the notification"),
            Err(e) => warn!(error = %e, "overflow webhook unreachable"),
        }
    });
}
