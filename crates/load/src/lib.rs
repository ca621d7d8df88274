//! `callgate-load` — `callgate load`: scripted callers that measure what a
//! caller would actually hear, over Twilio Media Streams, callgate's
//! partner WebSocket or WebRTC ([`Protocol`]).
//!
//! A WebRTC call ([`webrtc`]) is a browser's side of `docs/webrtc.md`: the
//! offer POSTed to `/v1/webrtc`, ICE (controlling) and DTLS-SRTP over str0m,
//! Opus both ways, the session URL polled for its status and `DELETE`d to
//! hang up. It drives the same [`Caller`]; with no marks on the line, a bot
//! turn ends on [`LoadConfig::turn_gap_ms`] of silence after it, the
//! prompts are told apart through the codec ([`prompts::lossy`]) and the
//! call's end is the session's final status.
//!
//! What it is: an independent implementation of *Twilio's* side of a
//! bidirectional Media Stream, and of a *partner's* side of
//! `docs/partner-protocol.md`. A Twilio call dials
//! `ws://host:port/v1/media-stream` (signed with `X-Twilio-Signature` when a
//! token is set), sends `connected`, `start` and a 20 ms `media` frame for
//! the whole call; a partner call dials `ws://host:port/v1/partner/stream`
//! with `Authorization: Bearer <key>`, sends `start` and a binary 20 ms
//! frame (16-bit linear 16 kHz or μ-law 8 kHz) for the whole call. Either
//! way it plays the server's
//! audio through a simulated phone buffer, echoes marks when playout reaches
//! them, and follows a script: greeting → (think, speak, await reply) × N →
//! `stop`, where N is fixed or drawn per call from a range (call-length
//! mix, [`LoadConfig::utterances_max`]). It records per call how it ended
//! ([`Outcome`]), time to first audio, reply latencies and the longest
//! *owed silence* — dead air while the caller was waiting for something —
//! and flags a call `Silent` when that exceeds the threshold.
//!
//! Two interaction scenarios measure barge-in from the caller's side
//! ([`LoadConfig::barge_in_at_ms`], [`LoadConfig::cough_at_ms`]): a caller
//! that speaks over the greeting records onset → `clear`, the bot audio
//! received after its onset and any audio of the stopped turn after the
//! clear ([`BargeInRecord`]); a caller that coughs (a short voiced burst, no
//! words) into a bot turn keeps listening and records whether the turn
//! paused and resumed to its mark ([`CoughRecord`]). Both are measured on
//! the caller's own clock, audio by what the socket delivered.
//!
//! It tells a reply from the server's bundled prompts by what it hears
//! ([`prompts`]): the prompts are known audio (the server's asset files,
//! indexed frame by frame in each audio format), so an apology, hold music
//! or a transfer prompt is counted as itself ([`PromptsHeard`],
//! `apologies_heard`, `apology_latency_ms`), never as a reply; reply latency
//! runs to the real reply. A refusal counts as heard only if the overflow
//! prompt itself played to its mark.
//!
//! What it never does: share code with the server (it does not depend on the
//! `callgate` crate, and has its own wire code for both protocols; it reads
//! only the server's prompt *audio files*, and uses the shared `media`
//! crate's codecs to convert them the way any leg would), trust
//! the server's view of a call, or wait without a deadline. The protocol
//! logic is a sans-IO state machine ([`Caller`]) with no socket and no
//! clock, the same for both protocols; their framing differs only in
//! [`transport`]. The async shell only moves bytes and sleeps.
//!
//! Mark names carry meaning (the server's convention): `turn-<n>` ends a bot
//! turn; `callgate-overflow:<reason>`, `callgate-transfer:<reason>` and
//! `callgate-end:<reason>` end the call's conversation, after which the server
//! must close the socket. The partner protocol carries the same marks,
//! followed by a `transfer` or `end` message; outcomes are classified from
//! the marks for both protocols (from the message when no mark came), and
//! the messages are recorded as well. The reason says who ended the
//! conversation: `<culprit>_stalled` is a [`Outcome::WatchdogTransfer`],
//! `<provider>_failed` a [`Outcome::FailoverTransfer`], `max_duration` and
//! `drain_deadline` a [`Outcome::CutShort`] — none of them served; any
//! other reason is the bot's own ([`Outcome::Transferred`],
//! [`Outcome::EndedByBot`]).
//!
//! A conductor (a drill) can steer a caller from outside its script
//! ([`driver::place_cued_call`], [`Cue`]): a cued utterance
//! ([`TurnPlan::cued`]) waits for `Speak` while the line is held in
//! silence, nothing owed; a holding caller ([`CallPlan::hold`]) stays on
//! after its script until `HangUp`; `Drop` vanishes with no `stop` and no
//! close frame; a [`Leave`] plan gives up on an owed reply. Those endings
//! are [`Outcome::LeftEarly`] and [`Outcome::Dropped`], never failures.
//!
//! How to drive it:
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use callgate_load::{Arrival, LoadConfig, run};
//!
//! let report = run(LoadConfig {
//!     url: "ws://127.0.0.1:8080/v1/media-stream".into(),
//!     calls: 50,
//!     arrival: Arrival::Rate { per_second: 5.0 },
//!     ..LoadConfig::default()
//! })
//! .await;
//! report.print_table(&mut std::io::stdout())?;
//! report.write_json(std::path::Path::new("load.json"))?;
//! assert!(!report.has_failures());
//! # Ok(()) }
//! ```

pub mod arrival;
pub mod caller;
pub mod cli;
pub mod config;
pub mod connect;
pub mod driver;
pub mod error;
pub mod held;
pub mod ids;
pub mod partner_wire;
pub mod playout;
pub mod progress;
pub mod prompts;
pub mod record;
pub mod report;
pub mod transport;
pub mod webrtc;
pub mod wire;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

pub use arrival::Arrival;
pub use caller::{CallPlan, Caller, CoughPlan, Cue, Leave, MAX_FRAME_LAG, Transmit, TurnPlan};
pub use config::LoadConfig;
pub use connect::Auth;
pub use error::{ErrorSource, LoadError};
pub use ids::{AccountSid, CallIds, CallSid, StreamSid};
pub use partner_wire::PartnerFormat;
pub use record::{
    BargeInRecord, CallRecord, CoughRecord, Outcome, Prompt, PromptsHeard, ServerError,
    TransferMessage,
};
pub use report::{BargeInSummary, CoughSummary, LoadReport, Percentiles, Summary};
pub use transport::{CallProtocol, Protocol};

use driver::Dial;
use progress::Progress;

/// Places every call of `cfg` and reports what each caller heard.
///
/// Never panics on a bad server: every failure becomes a call's outcome. An
/// invalid configuration fails every call with the reason (the CLI checks
/// [`LoadConfig::validate`] first).
pub async fn run(cfg: LoadConfig) -> LoadReport {
    let started = Instant::now();
    let account = AccountSid::random();
    if let Err(err) = cfg.validate() {
        let calls = (0..cfg.calls)
            .map(|i| {
                let mut caller = Caller::new(cfg.plan(i, account));
                caller.handle_connect_error(Duration::ZERO, &err);
                caller.into_record(Duration::ZERO)
            })
            .collect();
        return LoadReport::new(calls, started.elapsed());
    }
    connect::ensure_crypto_provider();
    let progress = Progress::new(cfg.calls);
    let display = cfg
        .progress
        .then(|| tokio::spawn(Arc::clone(&progress).display()));
    let calls = place_all(&cfg, account, started, &progress).await;
    if let Some(display) = display {
        display.abort();
        progress.draw(true);
    }
    LoadReport::new(calls, started.elapsed())
}

async fn place_all(
    cfg: &LoadConfig,
    account: AccountSid,
    t0: Instant,
    progress: &Arc<Progress>,
) -> Vec<CallRecord> {
    let limit = Arc::new(Semaphore::new(cfg.in_flight_limit()));
    let dial = Arc::new(Dial {
        url: cfg.url.clone(),
        auth: Auth::for_run(cfg),
    });
    let mut tasks = JoinSet::new();
    // Kept to record a call whose task died (it cannot report itself).
    let mut plans = HashMap::with_capacity(cfg.calls);
    for index in 0..cfg.calls {
        let plan = cfg.plan(index, account);
        let at = t0 + cfg.arrival.offset(index);
        let (limit, dial, progress) = (Arc::clone(&limit), Arc::clone(&dial), Arc::clone(progress));
        let task_plan = plan.clone();
        let handle = tasks.spawn(async move {
            tokio::time::sleep_until(at).await;
            // The semaphore is never closed; if it were, the call would run
            // unlimited rather than not at all.
            let _permit = limit.acquire_owned().await.ok();
            driver::place_call(task_plan, &dial, &progress).await
        });
        plans.insert(handle.id(), plan);
    }
    let mut calls = Vec::with_capacity(cfg.calls);
    while let Some(joined) = tasks.join_next_with_id().await {
        match joined {
            Ok((_, record)) => calls.push(record),
            Err(err) => {
                tracing::error!(%err, "call task died");
                if let Some(plan) = plans.remove(&err.id()) {
                    let mut record = Caller::new(plan).into_record(t0.elapsed());
                    record.outcome = Outcome::Failed {
                        reason: format!("call task died: {err}"),
                    };
                    progress.call_finished(&record.outcome);
                    calls.push(record);
                }
            }
        }
    }
    calls
}
