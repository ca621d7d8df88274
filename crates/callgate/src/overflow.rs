//! The overflow path: where every refused or failed call goes instead of
//! silence (docs/design.md principle 1).
//!
//! It plays the bundled "high call volume" prompt — no provider needed — on
//! any leg, then finishes the leg with a transfer (Twilio: close 1000 so the
//! TwiML's next verb `<Dial>`s the human queue; partner: a `transfer`
//! message), and optionally tells a webhook. The prompt ends with a
//! `callgate-overflow:<reason>` marker, so both callgate and a faithful
//! client know whether it was heard in full.

use std::time::{Duration, Instant};

use media::pacer::{Paced, Pacer};
use tracing::{info, warn};

use crate::app::{CallServices, Gauge};
use crate::config::ms;
use crate::leg::{Cause, Finish, Leg, LegEvent};
use crate::metrics as m;
use crate::prompts::{self, Prompt};

/// Default bound on the overflow webhook.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(2);

/// What happened on the overflow path.
#[derive(Debug, Clone, Copy)]
pub struct OverflowOutcome {
    /// The leg reported the prompt's final marker played: the caller heard it all.
    pub prompt_heard: bool,
    /// When the caller hung up or the leg was lost, if that happened.
    pub peer_left_at: Option<Instant>,
    /// The leg's close had to be forced.
    pub forced_close: bool,
    pub elapsed: Duration,
}

/// Identifies the call for logs, the leg and the webhook.
pub struct OverflowCall<'a> {
    pub call_id: String,
    pub carrier_call_id: &'a str,
    pub partner: Option<&'a str>,
    /// Why: an admission refusal or a setup failure.
    pub cause: Cause,
    pub transfer_target: Option<String>,
    pub waited: Duration,
}

impl OverflowCall<'_> {
    /// Low-cardinality reason: `queue_full`, `queue_timeout`, `draining`,
    /// `partner_quota`, `dependency_down`, `setup_failed:stt`, …
    pub fn label(&self) -> &'static str {
        match &self.cause {
            Cause::Refused(r) => r.as_str(),
            Cause::Ended(r, _) => r.label(),
        }
    }
}

/// Plays the prompt, finishes the leg with a transfer, notifies the webhook.
pub async fn run<L: Leg>(
    app: &CallServices,
    mut leg: L,
    call: OverflowCall<'_>,
) -> OverflowOutcome {
    let _gauge = Gauge::hold(&app.counters.overflowing);
    let started = Instant::now();
    let cfg = app.cfg();
    let reason = call.label();
    let mark = format!("callgate-overflow:{reason}");
    let format = leg.format();
    let mut pacer = prompts::pacer(format);
    pacer.push_audio(Prompt::Overflow.audio(format));
    pacer.push_mark(mark.clone());
    let grace = ms(cfg.call.final_mark_grace_ms);
    leg.refusing(reason);
    // A leg that answers refusals at once (SIP `503`/`302`), or whose
    // media cannot be opened, is finished without the prompt.
    let plays = leg.prompt_before_refusal() && leg.open_media().await.is_ok();
    let (prompt_heard, peer_left_at) = if plays {
        play(&mut leg, &mut pacer, &mark, grace).await
    } else {
        (false, None)
    };
    let how = match peer_left_at {
        Some(_) => Finish::Release,
        None => Finish::Transfer {
            target: call.transfer_target.clone(),
            cause: call.cause.clone(),
        },
    };
    let bound = ms(cfg.call.teardown_timeout_ms);
    let forced_close = leg.finish(how, bound).await.forced;
    let outcome = OverflowOutcome {
        prompt_heard,
        peer_left_at,
        forced_close,
        elapsed: started.elapsed(),
    };
    metrics::counter!(m::OVERFLOWED, "reason" => reason, "prompt_heard" => prompt_heard.to_string())
        .increment(1);
    if !plays {
        info!(
            reason,
            "call_overflowed: no prompt (the leg answered the refusal itself), leg finished"
        );
    } else if prompt_heard {
        info!(
            reason,
            "call_overflowed: prompt played to its end, leg finished for transfer"
        );
    } else {
        info!(
            reason,
            caller_left = peer_left_at.is_some(),
            "call_overflowed: prompt not heard to its end, leg finished"
        );
    }
    notify_webhook(app, &call);
    outcome
}

/// Pumps the prompt in real time until its marker is played, the caller
/// leaves, or the deadline passes. Returns whether the marker was played,
/// and when the caller left if they did.
///
/// The deadline is `grace` after the mark was actually sent: under CPU
/// pressure the pacer re-anchors and the prompt takes longer than its length,
/// and it must not be cut short for that. Until the mark is sent the bound is
/// twice the prompt's length plus `grace`.
async fn play(
    leg: &mut impl Leg,
    pacer: &mut Pacer<String>,
    mark: &str,
    grace: Duration,
) -> (bool, Option<Instant>) {
    let mut deadline = Instant::now() + pacer.queued() * 2 + grace;
    loop {
        let now = Instant::now();
        while let Some(item) = pacer.poll(now) {
            match item {
                Paced::Frame(f) => leg.play(&f),
                Paced::Mark(name) => {
                    leg.mark(&name);
                    deadline = now + grace;
                }
            }
        }
        // Leg events are read in batches at each wake-up (the pacer wakes
        // every `prompts::CHUNK`), not one wake-up per 20 ms frame.
        for ev in leg.ready_events() {
            match ev {
                LegEvent::Played(name) if name == mark => return (true, None),
                ev if ev.is_terminal() => return (false, Some(now)),
                _ => {}
            }
        }
        if now >= deadline {
            warn!("overflow prompt marker not reported played before the deadline");
            return (false, None);
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
fn notify_webhook(app: &CallServices, call: &OverflowCall<'_>) {
    let cfg = app.cfg();
    let Some(url) = cfg.overflow.webhook_url.clone().filter(|u| !u.is_empty()) else {
        return;
    };
    let timeout = cfg.overflow.webhook_timeout_ms.map_or(WEBHOOK_TIMEOUT, ms);
    let body = serde_json::json!({
        "call_id": call.call_id,
        "carrier_call_id": call.carrier_call_id,
        "partner_id": call.partner,
        "reason": call.label(),
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
