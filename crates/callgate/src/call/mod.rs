//! The call: a thin async shell ([`CallActor`]) around the sans-IO call
//! core ([`core::CallCore`]).
//!
//! The shell maps the leg, the three provider channels, tool results and
//! one timer to [`core::Input`]s, performs the core's [`core::Command`]s
//! as non-blocking sends, and records the core's [`core::Report`]s as
//! metrics (`meter.rs`). It never awaits the database or a provider: the
//! only awaits are the `select!` itself and the bounded teardown after the
//! core has ended. It knows no carrier wire type: it drives any [`Leg`].
//!
//! One step per input, and no step inside another: performing a command
//! never calls back into the core; what its outcome teaches the core (a
//! tool call refused at once) is queued as the next step's input.
//!
//! The clock: each step reads `Instant::now()` once, and the input is
//! handled at that time. A step whose sends the core stamps (a turn's
//! dialog request, TTS request or first frame, a barge-in's `clear`:
//! [`core::CallCore::awaits_performed`]) reads it a second time after
//! performing them, so the turn timing counts that work as callgate's own.
//! The timer is re-armed from the core's deadline without reading the clock.
//!
//! Ownership: the actor holds the admission [`Permit`] for its whole life
//! and releases it exactly once in teardown (or by unwinding on panic and
//! cancellation); the receipt is written after the release and states the
//! permit's own counts.

pub mod bot;
pub mod core;
pub mod labels;
pub mod meter;
pub mod receipt;
pub mod record;
pub mod setup;
pub mod tools;
pub mod watchdog;

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use admission::Permit;
use tokio::time::Sleep;
use tracing::{Instrument, Span, warn};

use crate::app::{CallServices, OwnedGauge};
use crate::config::ms;
use crate::end::{End, Provider};
use crate::leg::Leg;
use crate::reconcile::pressure::{PhaseGauge, Recovery};
use core::{CallCore, Command, CoreConfig, Input, Rec};
use record::Recorder;
use setup::Resources;
use tools::ToolRunner;
use watchdog::WatchdogConfig;

/// One telephony frame.
pub const FRAME_PERIOD: Duration = media::format::FRAME;

/// A far-away instant for a timer that is not armed.
fn far_future(now: Instant) -> Instant {
    now + Duration::from_secs(86_400 * 365)
}

/// Which provider channels are still worth polling.
#[derive(Debug, Clone, Copy)]
struct Open {
    stt: bool,
    tts: bool,
    dialog: bool,
}

/// One admitted, fully set-up call.
pub struct CallActor<L: Leg> {
    app: Arc<CallServices>,
    permit: Permit,
    leg: L,
    core: CallCore,
    res: Resources,
    open: Open,
    tools: ToolRunner,
    rec: Recorder,
    timer: Pin<Box<Sleep>>,
    /// Where the timer is set (`None`: it fired and must be set again).
    timer_at: Option<Instant>,
    /// The timer's setting when the core asks for no deadline.
    never: Instant,
    /// Inputs for the next steps, ahead of any new event. Bounded by
    /// construction: the drain order at start, then one refused tool call
    /// per `ToolStart` command of the step just performed (the core emits at
    /// most one per dialog event), and it is emptied before the next event
    /// is read, so it never holds more than one step's refusals.
    queued: VecDeque<Input>,
    speaking: Option<OwnedGauge>,
    /// The call's `recovering` share while a provider reconnects.
    recovery: Recovery,
    setup_ms: u64,
    transfer_target: Option<String>,
    /// The configuration this call runs on, taken at admission
    /// (`CallInfo::cfg`); the receipt reads it too.
    cfg: Arc<crate::config::Config>,
    /// Where the call came in (the latency metrics' `ingress` label).
    ingress: &'static str,
}

impl<L: Leg> CallActor<L> {
    pub fn new(
        app: Arc<CallServices>,
        permit: Permit,
        mut leg: L,
        res: Resources,
        rec: Recorder,
        setup_ms: u64,
        info: &setup::CallInfo,
    ) -> Self {
        leg.want_audio();
        let cfg = Arc::clone(&info.cfg);
        let transfer_target = info.arrival.transfer_target.clone();
        let now = Instant::now();
        let tools = ToolRunner::new(
            app.http.clone(),
            cfg.tools.base_url.clone(),
            ms(cfg.tools.timeout_ms),
            cfg.tools.max_in_flight_per_call,
        )
        .with_gauge(PhaseGauge::delegating(Some(Arc::clone(&app.counters))));
        let mut core = CallCore::new(core_config(&cfg, leg.format()), now);
        if leg.bounds_its_own_media() {
            core.leg_bounds_media();
        }
        CallActor {
            permit,
            leg,
            core,
            res,
            open: Open {
                stt: true,
                tts: true,
                dialog: true,
            },
            tools,
            rec,
            timer: Box::pin(tokio::time::sleep_until(far_future(now).into())),
            timer_at: Some(far_future(now)),
            never: far_future(now),
            queued: VecDeque::new(),
            speaking: None,
            recovery: Recovery::new(Some(Arc::clone(&app.counters))),
            setup_ms,
            transfer_target,
            cfg,
            ingress: info.arrival.ingress.as_str(),
            app,
        }
    }

    /// Runs the call to its end, tears everything down and writes the receipt.
    pub async fn run(mut self) {
        let span = Span::current();
        let end = self.event_loop().instrument(span.clone()).await;
        receipt::teardown(self, end).instrument(span).await;
    }

    /// The caller left while the call was being set up: close everything
    /// that was opened and write the receipt, without playing anything.
    pub async fn end_before_start(self, end: End) {
        let span = Span::current();
        receipt::teardown(self, end).instrument(span).await;
    }

    async fn event_loop(&mut self) -> End {
        let mut orders = self.app.drain.orders();
        // Cancelled when another instance closed this call's record (this
        // process was paused or cut off past its lease): goodbye, then end.
        let lost = self.app.live.lost(self.rec.call).unwrap_or_default();
        let mut lost_told = false;
        // A call set up after the order was given still follows it.
        self.queued.extend(drain_input(*orders.borrow_and_update()));
        self.perform();
        loop {
            if let Some(end) = self.core.ended() {
                return end.clone();
            }
            self.rearm_timer();
            let input = if let Some(queued) = self.queued.pop_front() {
                queued
            } else {
                tokio::select! {
                    ev = self.leg.next_event() => Input::Leg(ev),
                    Some(ev) = self.res.stt.1.recv(), if self.open.stt => Input::Stt(ev),
                    Some(ev) = self.res.dialog.1.recv(), if self.open.dialog => Input::Dialog(ev),
                    Some(ev) = self.res.tts.1.recv(), if self.open.tts => Input::Tts(ev),
                    outcome = self.tools.next() => Input::Tool(outcome),
                    () = &mut self.timer => {
                        // How late the call's deadline (a pacer frame, a
                        // watchdog clock) fired: the instance ceiling's input.
                        if let Some(due) = self.timer_at.take() {
                            self.app.lag.record(Instant::now().saturating_duration_since(due));
                        }
                        Input::Tick
                    }
                    () = lost.cancelled(), if !lost_told => {
                        lost_told = true;
                        Input::OwnershipLost
                    }
                    Ok(()) = orders.changed() => {
                        match drain_input(*orders.borrow_and_update()) {
                            Some(order) => order,
                            None => Input::DrainCancelled,
                        }
                    }
                }
            };
            self.step(input);
        }
    }

    /// One step: the input is handled at one clock read, its commands are
    /// performed, and its reports recorded (module docs: the clock).
    fn step(&mut self, input: Input) {
        self.note_closed(&input);
        self.note_recovery(&input);
        self.core.note_instance_lag(self.app.lag.over_bound());
        self.core.handle(Instant::now(), input);
        self.perform();
        if self.core.awaits_performed() {
            self.core.performed(Instant::now());
        }
        while let Some(report) = self.core.next_report() {
            meter::record(report, self.ingress);
        }
    }

    /// Stops polling a provider channel after its terminal event.
    fn note_closed(&mut self, input: &Input) {
        match input {
            Input::Stt(stt_client::SttEvent::Closed(_)) => self.open.stt = false,
            Input::Tts(tts_client::TtsEvent::Closed(_)) => self.open.tts = false,
            Input::Dialog(dialog_grpc::DialogEvent::Closed(_)) => self.open.dialog = false,
            _ => {}
        }
    }

    /// Tracks which providers are reconnecting, for the `recovering` gauge.
    fn note_recovery(&mut self, input: &Input) {
        use dialog_grpc::DialogEvent as D;
        use stt_client::SttEvent as S;
        use tts_client::TtsEvent as T;
        let (provider, down) = match input {
            Input::Stt(S::Reconnecting { .. }) => (Provider::Stt, true),
            Input::Stt(S::Reconnected { .. } | S::Closed(_)) => (Provider::Stt, false),
            Input::Tts(T::Reconnecting { .. }) => (Provider::Tts, true),
            Input::Tts(T::Reconnected { .. } | T::Closed(_)) => (Provider::Tts, false),
            Input::Dialog(D::Reconnecting { .. }) => (Provider::Dialog, true),
            Input::Dialog(D::Reconnected { .. } | D::Closed(_)) => (Provider::Dialog, false),
            _ => return,
        };
        self.recovery.provider(provider, down);
    }

    fn rearm_timer(&mut self) {
        let at = self.core.next_deadline().unwrap_or(self.never);
        if self.timer_at != Some(at) {
            self.timer_at = Some(at);
            self.timer.as_mut().reset(at.into());
        }
    }

    /// Performs every command the core has queued. Never waits.
    fn perform(&mut self) {
        while let Some(cmd) = self.core.next_command() {
            self.perform_one(cmd);
        }
        match (self.core.is_speaking(), self.speaking.is_some()) {
            (true, false) => {
                self.speaking = Some(OwnedGauge::speaking(Arc::clone(&self.app.counters)));
            }
            (false, true) => self.speaking = None,
            _ => {}
        }
    }

    fn perform_one(&mut self, cmd: Command) {
        let Resources {
            stt, tts, dialog, ..
        } = &mut self.res;
        // Every send is a bounded `try_send`; a full queue drops and the
        // client counts it. Results are deliberately not awaited.
        match cmd {
            Command::Play(frame) => self.leg.play(&frame),
            Command::Mark(name) => self.leg.mark(&name),
            Command::Clear => self.leg.clear(),
            Command::SttAudio(bytes) => drop(stt.0.send_audio(bytes)),
            Command::SttFinalize => drop(stt.0.finalize()),
            Command::TtsOpen(ctx) => {
                if let Err(e) = tts.0.open_context(ctx) {
                    warn!(error = %e, "could not open a TTS context");
                }
            }
            Command::TtsText(ctx, text) => drop(tts.0.send_text(ctx, &text)),
            Command::TtsFlush(ctx) => drop(tts.0.flush(ctx)),
            Command::TtsClose(ctx) => drop(tts.0.close_context(ctx)),
            Command::TtsCancel(ctx) => drop(tts.0.cancel_context(ctx)),
            Command::DialogTurn(turn, text) => {
                if dialog.0.user_turn(turn, &text).is_err() {
                    warn!("dialog request queue full; turn not delivered");
                }
            }
            Command::DialogInterrupt(turn, heard) => drop(dialog.0.interrupt(turn, &heard)),
            Command::DialogDtmf(d) => drop(dialog.0.dtmf(&d.to_string())),
            Command::DialogToolResult {
                id,
                result_json,
                is_error,
            } => drop(dialog.0.tool_result(&id, &result_json, is_error)),
            Command::ToolStart {
                id,
                turn,
                name,
                arguments_json,
                ..
            } => {
                if let Some(refused) = self.tools.start(id, turn, &name, arguments_json) {
                    // Answered at once: the core learns it as the next
                    // step's input, never from inside this one.
                    self.queued.push_back(Input::Tool(refused));
                }
            }
            // The core cancels everything still running at its terminal
            // transition: those tools were orphaned by the call's end.
            Command::ToolCancel(id) if self.core.ended().is_some() => self.tools.orphan(&id),
            Command::ToolCancel(id) => self.tools.cancel(&id),
            Command::Record(r) => self.write(r),
        }
    }

    fn write(&mut self, r: Rec) {
        let rec = &mut self.rec;
        match r {
            Rec::Stage(stage, at) => rec.stage(stage, at),
            Rec::Turn {
                speaker,
                text,
                span,
                interrupted,
                latency,
            } => rec.turn(speaker, &text, span, interrupted, latency),
            Rec::Event { kind, detail, at } => rec.event(&kind, detail, at),
            Rec::Slot { name, value, at } => rec.slot(&name, &value, at),
            Rec::Escalation { reason, at } => rec.escalation(&reason, at),
        }
    }
}

/// Holds the `setting_up` gauge during setup.
pub fn setup_gauge(app: &CallServices) -> crate::app::Gauge<'_> {
    crate::app::Gauge::hold(&app.counters.setting_up)
}

/// The core's configuration from ours.
pub fn core_config(cfg: &crate::config::Config, format: crate::leg::LegFormat) -> CoreConfig {
    CoreConfig {
        format,
        lead: ms(cfg.call.pacer_lead_ms),
        final_mark_grace: ms(cfg.call.final_mark_grace_ms),
        max_duration: Duration::from_secs(cfg.call.max_duration_s),
        watchdog: WatchdogConfig {
            reply_stall: ms(cfg.call.reply_stall_ms),
            stt_stall: ms(cfg.call.stt_stall_ms),
            media_stall: ms(cfg.call.media_stall_ms),
            retry: ms(cfg.call.stall_retry_ms),
        },
        vad_min_silence_ms: cfg.stt.endpointing_ms,
        barge_in: cfg.call.barge_in,
    }
}

/// The core's input for a drain order (`None`: serve on).
fn drain_input(order: crate::drain::plan::Order) -> Option<Input> {
    match order {
        crate::drain::plan::Order::Serve => None,
        crate::drain::plan::Order::Transfer => Some(Input::DrainTransfer),
        crate::drain::plan::Order::Deadline => Some(Input::DrainDeadline),
    }
}
