//! The per-stream driver: feeds client messages to a [`Bot`] and turns its
//! actions into timed `ServerEvent`s (first delta after
//! `first_delta_latency_ms`, then one word per `delta_interval_ms`).
//!
//! The driver checkpoints its bot into the [`ResumeStore`] whenever no reply
//! is in flight (at the start, before each reply, after each reply ends or
//! is cut), and a `SessionStart{resume: true}` continues from the
//! checkpoint with no greeting. A stream with an empty `call_id` is not
//! kept: there would be no way to name it again.
//!
//! Every `UserTurn` and `Interrupt` received is counted in the simulator's
//! [`TurnStats`] as it arrives, before the bot acts on it.
//!
//! Generic over the inbound stream so tests can drive it without sockets.

use std::collections::VecDeque;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tracing::{Instrument, debug, info};

use super::bot::{Action, Bot, ToolOutcome};
use super::pb::{self, client_message::Kind as In, server_event::Kind as Out};
use super::resume::{Checkpoint, ResumeStore};
use super::{DialogSimConfig, TurnStats, read_config};
use crate::stats::{FaultScope, SessionGuard, SessionStats, is_faulty};

/// How long a new stream may take to send `SessionStart`.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// What the driver sends: events, or a terminal error status.
pub(crate) type OutTx = mpsc::Sender<Result<pb::ServerEvent, Status>>;

/// Everything one stream needs besides its messages.
pub(crate) struct SessionCtx {
    pub config: Arc<RwLock<DialogSimConfig>>,
    pub stats: Arc<SessionStats>,
    /// The outage a fault of this stream starts (`down_after_fault_ms`).
    pub scope: Arc<FaultScope>,
    /// Where the conversation is kept for a resume.
    pub store: Arc<ResumeStore>,
    /// This stream's number, from 1 (the `faulty_sessions` scope, and the
    /// owner of its entry in the store).
    pub stream_no: u64,
    /// The simulator-wide counts of user turns and interrupts.
    pub turns: Arc<TurnStats>,
    pub shutdown: CancellationToken,
    /// Held until the driver returns: the stream counts as open until then.
    pub guard: SessionGuard,
}

/// One step of a reply being generated.
#[derive(Debug)]
enum Step {
    /// A word (with its leading space) of the reply text.
    Delta(String),
    /// An event sent as soon as the steps before it are done.
    Emit(Out),
    /// A tool call; the turn waits for its result.
    Tool(pb::ToolCall),
}

/// The reply currently being generated.
#[derive(Debug)]
struct Turn {
    id: u64,
    steps: VecDeque<Step>,
    next_delta_at: Instant,
    /// The tool call id being waited for, and until when.
    awaiting: Option<(String, Instant)>,
    /// True once a delta was sent, so later words get a leading space.
    spoke: bool,
    timing: Timing,
}

/// Latency knobs, read once per turn.
#[derive(Copy, Clone, Debug)]
struct Timing {
    first_delta: Duration,
    interval: Duration,
    tool_timeout: Duration,
}

impl Timing {
    fn of(cfg: &DialogSimConfig) -> Self {
        Timing {
            first_delta: Duration::from_millis(cfg.first_delta_latency_ms),
            interval: Duration::from_millis(cfg.delta_interval_ms),
            tool_timeout: Duration::from_millis(cfg.tool_result_timeout_ms),
        }
    }
}

/// The driver's state besides the bot.
struct Driver {
    bot: Bot,
    out: OutTx,
    config: Arc<RwLock<DialogSimConfig>>,
    turn: Option<Turn>,
    /// The newest user turn id; replies to DTMF carry it.
    latest_turn: u64,
    /// Numbers tool call ids within the session.
    tool_seq: u64,
    /// Where checkpoints go; `None` for a stream without a call id.
    keep: Option<Keep>,
    /// Counts what this stream's client told the bot.
    turns: Arc<TurnStats>,
}

/// A driver's entry in the [`ResumeStore`].
struct Keep {
    store: Arc<ResumeStore>,
    call_id: String,
    stream_no: u64,
}

/// Whether the stream goes on.
enum Flow {
    Continue,
    End,
}

/// Runs one `Converse` stream to completion. Returns (and drops the
/// session guard) on `SessionEnd`, client half-close or cancel, shutdown,
/// or an injected fault.
pub(crate) async fn run<S>(mut inbound: S, out: OutTx, ctx: SessionCtx)
where
    S: Stream<Item = Result<pb::ClientMessage, Status>> + Unpin,
{
    let first = tokio::time::timeout(START_TIMEOUT, inbound.next()).await;
    let Ok(Some(Ok(pb::ClientMessage {
        kind: Some(In::SessionStart(start)),
    }))) = first
    else {
        let status = Status::invalid_argument("the first message must be SessionStart");
        let _ = out.send(Err(status)).await;
        return;
    };
    let span = tracing::info_span!(
        "dialog_sim",
        call_id = start.call_id,
        stream = ctx.stream_no,
        resume = start.resume
    );
    converse(inbound, out, ctx, start).instrument(span).await;
}

/// The session loop after `SessionStart`.
async fn converse<S>(mut inbound: S, out: OutTx, ctx: SessionCtx, start: pb::SessionStart)
where
    S: Stream<Item = Result<pb::ClientMessage, Status>> + Unpin,
{
    let SessionCtx {
        config,
        stats,
        scope,
        store,
        stream_no,
        turns,
        shutdown,
        guard,
    } = ctx;
    let cfg = read_config(&config);
    let fault_at = cfg
        .close_after_ms
        .filter(|_| is_faulty(cfg.faulty_sessions, stream_no))
        .map(|ms| Instant::now() + Duration::from_millis(ms));
    let keep = (!start.call_id.is_empty()).then_some(Keep {
        store,
        call_id: start.call_id,
        stream_no,
    });
    let mut driver = Driver::new(out, config, keep, turns);
    if start.resume {
        let resumed = driver.resume();
        info!(resumed, "dialog session resumed (no greeting)");
    } else {
        info!("dialog session started");
        driver.save();
        driver.start_turn(0, driver.bot.greeting());
    }
    let reason = loop {
        let wake = driver.wake_at();
        tokio::select! {
            biased;
            () = shutdown.cancelled() => {
                let _ = driver.out.send(Err(Status::unavailable("simulator shutting down"))).await;
                break "shutdown";
            }
            () = driver.out.closed() => break "client_gone",
            () = sleep_until(fault_at) => {
                stats.count_fault();
                let down_for = cfg.down_after_fault_ms.map(Duration::from_millis);
                scope.fault_ended_session(std::time::Instant::now(), down_for);
                let status = Status::unavailable("injected fault: close_after_ms");
                let _ = driver.out.send(Err(status)).await;
                break "fault_close_after";
            }
            msg = inbound.next() => match msg {
                Some(Ok(msg)) => if let Flow::End = driver.handle(msg).await { break "session_end" },
                Some(Err(status)) => { debug!(%status, "inbound error"); break "client_error" }
                None => break "client_half_close",
            },
            () = sleep_until(wake) => if let Flow::End = driver.advance().await { break "client_gone" },
        }
    };
    info!(reason, "dialog session ended");
    if reason == "session_end" {
        driver.forget();
    }
    drop(guard);
}

/// Sleeps until `at`, or forever.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Driver {
    fn new(
        out: OutTx,
        config: Arc<RwLock<DialogSimConfig>>,
        keep: Option<Keep>,
        turns: Arc<TurnStats>,
    ) -> Self {
        Driver {
            bot: Bot::new(),
            out,
            config,
            turn: None,
            latest_turn: 0,
            tool_seq: 0,
            keep,
            turns,
        }
    }

    /// Takes over the call's kept conversation, if any (else the state stays
    /// fresh), and checkpoints it as this stream's. True when one was kept.
    fn resume(&mut self) -> bool {
        let kept = self
            .keep
            .as_ref()
            .and_then(|k| k.store.claim(&k.call_id, k.stream_no));
        let found = kept.is_some();
        if let Some(cp) = kept {
            self.bot = cp.bot;
            self.tool_seq = cp.tool_seq;
            self.latest_turn = cp.latest_turn;
        }
        self.save();
        found
    }

    /// Checkpoints the conversation as it stands (called only while no
    /// reply is in flight, or just before one starts).
    fn save(&self) {
        if let Some(k) = &self.keep {
            let cp = Checkpoint {
                bot: self.bot.clone(),
                tool_seq: self.tool_seq,
                latest_turn: self.latest_turn,
            };
            k.store.save(&k.call_id, k.stream_no, cp);
        }
    }

    /// The call ended normally: its conversation is not kept.
    fn forget(&self) {
        if let Some(k) = &self.keep {
            k.store.remove(&k.call_id, k.stream_no);
        }
    }

    async fn handle(&mut self, msg: pb::ClientMessage) -> Flow {
        match msg.kind {
            Some(In::UserTurn(t)) => self.user_turn(t.turn_id, &t.transcript),
            Some(In::Interrupt(i)) => self.interrupt(i.turn_id, &i.played_text),
            Some(In::ToolResult(r)) => return self.tool_result(r).await,
            Some(In::Dtmf(d)) => self.dtmf(&d.digits),
            Some(In::SessionEnd(e)) => {
                debug!(reason = e.reason, "SessionEnd");
                return Flow::End;
            }
            Some(In::SessionStart(_)) | None => debug!("ignoring unexpected client message"),
        }
        Flow::Continue
    }

    fn user_turn(&mut self, id: u64, transcript: &str) {
        debug!(turn = id, transcript, "user turn");
        self.turns.count_user_turn();
        self.cancel_turn(None);
        // The state before this reply: what a re-sent turn is answered from.
        self.save();
        self.latest_turn = id;
        if read_config(&self.config).stall_replies {
            debug!(turn = id, "stall_replies: not answering");
            return;
        }
        let actions = self.bot.on_user_turn(transcript);
        self.start_turn(id, actions);
    }

    fn interrupt(&mut self, id: u64, played: &str) {
        self.turns.count_interrupt();
        if self.turn.as_ref().is_some_and(|t| t.id == id) {
            debug!(turn = id, "interrupted");
            self.cancel_turn(Some(played));
        } else {
            self.bot.remember_played(played);
        }
        if self.turn.is_none() {
            self.save();
        }
    }

    fn dtmf(&mut self, digits: &str) {
        let before = self.bot.clone();
        let actions = self.bot.on_dtmf(digits);
        if !actions.is_empty() {
            self.cancel_turn(None);
            // Checkpoint the state before this reply (see `user_turn`).
            let after = std::mem::replace(&mut self.bot, before);
            self.save();
            self.bot = after;
            self.start_turn(self.latest_turn, actions);
        }
    }

    async fn tool_result(&mut self, r: pb::ToolResult) -> Flow {
        let waiting = self.turn.as_ref().and_then(|t| t.awaiting.as_ref());
        if waiting.is_none_or(|(id, _)| *id != r.tool_call_id) {
            debug!(tool_call_id = r.tool_call_id, "stale tool result ignored");
            return Flow::Continue;
        }
        let outcome = match (r.is_error, serde_json::from_str(&r.result_json)) {
            (false, Ok(value)) => ToolOutcome::Ok(value),
            _ => ToolOutcome::Err(r.result_json),
        };
        let actions = self.bot.on_tool_outcome(outcome);
        self.resume_turn(actions);
        self.advance().await
    }

    /// Drops the reply being generated: no more deltas, no TurnComplete.
    fn cancel_turn(&mut self, played: Option<&str>) {
        if self.turn.take().is_some() {
            self.bot.on_turn_cancelled(played);
        } else if let Some(p) = played {
            self.bot.remember_played(p);
        }
    }

    fn start_turn(&mut self, id: u64, actions: Vec<Action>) {
        let timing = Timing::of(&read_config(&self.config));
        let mut turn = Turn {
            id,
            steps: VecDeque::new(),
            next_delta_at: Instant::now() + timing.first_delta,
            awaiting: None,
            spoke: false,
            timing,
        };
        self.push_actions(&mut turn, actions);
        self.turn = Some(turn);
    }

    /// Continues the current turn after a tool outcome.
    fn resume_turn(&mut self, actions: Vec<Action>) {
        if let Some(mut turn) = self.turn.take() {
            turn.awaiting = None;
            turn.next_delta_at = Instant::now() + turn.timing.first_delta;
            self.push_actions(&mut turn, actions);
            self.turn = Some(turn);
        }
    }

    fn push_actions(&mut self, turn: &mut Turn, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Say(text) => {
                    let words = text.split_whitespace().map(|w| Step::Delta(w.to_owned()));
                    turn.steps.extend(words);
                }
                Action::Slot { name, value } => {
                    turn.steps
                        .push_back(Step::Emit(Out::SlotUpdate(pb::SlotUpdate {
                            name: name.to_owned(),
                            value,
                        })))
                }
                Action::CallTool {
                    name,
                    arguments_json,
                    privileged,
                } => {
                    self.tool_seq += 1;
                    turn.steps.push_back(Step::Tool(pb::ToolCall {
                        id: format!("tool-{}-{}", turn.id, self.tool_seq),
                        turn_id: turn.id,
                        name: name.to_owned(),
                        arguments_json,
                        privileged,
                    }));
                }
                Action::Complete => {
                    turn.steps
                        .push_back(Step::Emit(Out::TurnComplete(pb::TurnComplete {
                            turn_id: turn.id,
                        })))
                }
                Action::Escalate(reason) => {
                    turn.steps.push_back(Step::Emit(Out::Escalate(pb::Escalate {
                        reason: reason.to_owned(),
                    })))
                }
                Action::EndCall(reason) => {
                    turn.steps.push_back(Step::Emit(Out::EndCall(pb::EndCall {
                        reason: reason.to_owned(),
                    })))
                }
            }
        }
    }

    /// When the current turn next needs attention.
    fn wake_at(&self) -> Option<Instant> {
        let turn = self.turn.as_ref()?;
        if let Some((_, deadline)) = &turn.awaiting {
            return Some(*deadline);
        }
        match turn.steps.front()? {
            Step::Delta(_) => Some(turn.next_delta_at),
            Step::Emit(_) | Step::Tool(_) => Some(Instant::now()),
        }
    }

    /// Sends every step that is due. `End` means the client is gone.
    async fn advance(&mut self) -> Flow {
        let now = Instant::now();
        let timed_out = self.turn.as_ref().is_some_and(|t| {
            t.awaiting
                .as_ref()
                .is_some_and(|(_, deadline)| now >= *deadline)
        });
        if timed_out {
            debug!("tool result timed out");
            let actions = self.bot.on_tool_outcome(ToolOutcome::TimedOut);
            self.resume_turn(actions);
        }
        while let Some(kind) = self.next_due(now) {
            if self
                .out
                .send(Ok(pb::ServerEvent { kind: Some(kind) }))
                .await
                .is_err()
            {
                return Flow::End;
            }
        }
        Flow::Continue
    }

    /// Pops the next step if it is due, as the event to send.
    fn next_due(&mut self, now: Instant) -> Option<Out> {
        let turn = self.turn.as_mut()?;
        if turn.awaiting.is_some() {
            return None;
        }
        let Some(step) = turn.steps.front() else {
            self.turn = None;
            self.save();
            return None;
        };
        if matches!(step, Step::Delta(_)) && now < turn.next_delta_at {
            return None;
        }
        let kind = match turn.steps.pop_front()? {
            Step::Delta(word) => {
                let text = if turn.spoke { format!(" {word}") } else { word };
                turn.spoke = true;
                turn.next_delta_at = now + turn.timing.interval;
                Out::TextDelta(pb::TextDelta {
                    turn_id: turn.id,
                    text,
                })
            }
            Step::Emit(kind) => kind,
            Step::Tool(call) => {
                turn.awaiting = Some((call.id.clone(), now + turn.timing.tool_timeout));
                Out::ToolCall(call)
            }
        };
        Some(kind)
    }
}
