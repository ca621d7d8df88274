//! The call core on a virtual clock: no sockets, no sleeping. Time is an
//! `Instant` the test moves; a silent caller frame every 20 ms stands in
//! for the carrier's continuous stream.

use std::time::{Duration, Instant};

use dialog_grpc::{DialogEvent, ToolCallId, TurnId};
use stt_client::{SttEvent, Transcript};
use tts_client::{ContextId, TtsEvent};

use super::ToolOutcome;
use super::*;
use crate::call::watchdog::WatchdogConfig;
use crate::end::{Culprit, EndReason};
use crate::leg::{LegEvent, LegFormat};

mod barge_tests;
mod drain_tests;
mod report_tests;

pub(super) const FRAME: Duration = Duration::from_millis(20);

pub(super) fn config(format: LegFormat) -> CoreConfig {
    CoreConfig {
        format,
        lead: Duration::from_millis(60),
        final_mark_grace: Duration::from_secs(2),
        max_duration: Duration::from_secs(600),
        watchdog: WatchdogConfig {
            reply_stall: Duration::from_secs(2),
            stt_stall: Duration::from_secs(2),
            media_stall: Duration::from_secs(5),
            retry: Duration::from_secs(4),
        },
        vad_min_silence_ms: 300,
        barge_in: BargeInConfig {
            policy: BargeInPolicy::Words,
            ..BargeInConfig::default()
        },
    }
}

/// A call core, its virtual clock, and every command and report it has
/// emitted.
pub(super) struct Sim {
    pub(super) core: CallCore,
    pub(super) now: Instant,
    pub(super) format: LegFormat,
    pub(super) log: Vec<Command>,
    pub(super) reports: Vec<Report>,
}

impl Sim {
    pub(super) fn new(cfg: CoreConfig) -> Sim {
        let now = Instant::now();
        let mut s = Sim {
            core: CallCore::new(cfg, now),
            now,
            format: cfg.format,
            log: Vec::new(),
            reports: Vec::new(),
        };
        s.drain();
        s
    }

    pub(super) fn drain(&mut self) -> Vec<Command> {
        let mut out = Vec::new();
        while let Some(c) = self.core.next_command() {
            out.push(c);
        }
        self.log.extend(out.iter().cloned());
        out
    }

    /// One input, now; returns what that one step emitted (performed at
    /// once, as the shell would).
    pub(super) fn step(&mut self, input: Input) -> Vec<Command> {
        self.core.handle(self.now, input);
        let out = self.drain();
        self.core.performed(self.now);
        while let Some(r) = self.core.next_report() {
            self.reports.push(r);
        }
        out
    }

    /// Lets `d` pass with the caller silent, a frame every 20 ms, echoing
    /// every marker once 20 ms after it was sent, as a carrier would.
    pub(super) fn pass(&mut self, d: Duration) -> Vec<Command> {
        self.pass_with(d, |f| vec![f.silence(); f.frame_bytes()])
    }

    /// Like `pass`, with the caller's frames made by `frame`.
    pub(super) fn pass_with(
        &mut self,
        d: Duration,
        mut frame: impl FnMut(LegFormat) -> Vec<u8>,
    ) -> Vec<Command> {
        let end = self.now + d;
        let mut out = Vec::new();
        let mut echo: Vec<String> = Vec::new();
        while self.now < end && self.core.ended().is_none() {
            self.now += FRAME;
            let cmds = self.step(Input::Leg(LegEvent::Audio(frame(self.format))));
            for name in echo.drain(..) {
                out.extend(self.step(Input::Leg(LegEvent::Played(name))));
            }
            echo.extend(cmds.iter().filter_map(|c| match c {
                Command::Mark(m) => Some(m.clone()),
                _ => None,
            }));
            out.extend(cmds);
        }
        out
    }

    /// The dialog says `text` for `turn` and completes it; TTS answers with
    /// `audio` of sound in context `ctx`.
    pub(super) fn reply(
        &mut self,
        turn: u64,
        ctx: u64,
        text: &str,
        audio: Duration,
    ) -> Vec<Command> {
        let mut out = self.step(dialog_text(turn, text));
        out.extend(self.step(Input::Dialog(DialogEvent::TurnComplete {
            turn: TurnId(turn),
        })));
        out.extend(self.tts_audio(ctx, audio));
        out.extend(self.step(Input::Tts(TtsEvent::ContextFinal {
            context: ContextId(ctx),
        })));
        out
    }

    pub(super) fn tts_audio(&mut self, ctx: u64, audio: Duration) -> Vec<Command> {
        let bytes = self.format.frame_bytes() * (audio.as_millis() as usize / 20);
        let loud = vec![0x10u8; bytes];
        self.step(Input::Tts(TtsEvent::Audio {
            context: ContextId(ctx),
            bytes: loud,
        }))
    }

    pub(super) fn utterance(&mut self, text: &str) -> Vec<Command> {
        self.step(stt(text, true))
    }

    pub(super) fn end(&self) -> &End {
        self.core.ended().expect("the call has ended")
    }
}

pub(super) fn dialog_text(turn: u64, text: &str) -> Input {
    Input::Dialog(DialogEvent::TextDelta {
        turn: TurnId(turn),
        text: text.into(),
    })
}

pub(super) fn stt(text: &str, is_final: bool) -> Input {
    Input::Stt(SttEvent::Transcript(Transcript {
        text: text.into(),
        is_final,
        speech_final: is_final,
        from_finalize: false,
        start: 0.0,
        duration: 1.0,
        confidence: 0.9,
    }))
}

pub(super) fn plays(cmds: &[Command]) -> usize {
    cmds.iter()
        .filter(|c| matches!(c, Command::Play(_)))
        .count()
}

pub(super) fn position(cmds: &[Command], pred: impl Fn(&Command) -> bool) -> Option<usize> {
    cmds.iter().position(pred)
}

pub(super) fn marks(cmds: &[Command]) -> Vec<String> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Mark(m) => Some(m.clone()),
            _ => None,
        })
        .collect()
}

pub(super) fn turns(cmds: &[Command]) -> Vec<(state_store::Speaker, String, bool)> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Record(Rec::Turn {
                speaker,
                text,
                interrupted,
                ..
            }) => Some((*speaker, text.clone(), *interrupted)),
            _ => None,
        })
        .collect()
}

/// A call whose greeting has played in full and whose caller said `said`.
pub(super) fn after_greeting() -> Sim {
    let mut s = Sim::new(config(LegFormat::Mulaw8k));
    s.reply(0, 1, "Hello, how can I help?", Duration::from_millis(400));
    let out = s.pass(Duration::from_millis(600));
    assert_eq!(marks(&out), ["turn-0"]);
    s
}

#[test]
fn the_greeting_plays_in_frames_of_the_leg_format_and_its_marker_follows() {
    for format in LegFormat::ALL {
        let mut s = Sim::new(config(format));
        let out = s.reply(0, 1, "Hello!", Duration::from_millis(400));
        assert!(out.contains(&Command::TtsOpen(ContextId(1))));
        assert!(plays(&out) <= 4, "no more than the 60 ms lead at once");
        s.pass(Duration::from_millis(600));
        let out = s.log.clone();
        assert_eq!(plays(&out), 20, "{format:?}: 400 ms = 20 frames");
        assert!(out.iter().all(|c| match c {
            Command::Play(f) => f.len() == format.frame_bytes(),
            _ => true,
        }));
        let mark_at = position(&out, |c| matches!(c, Command::Mark(_))).unwrap();
        assert_eq!(plays(&out[mark_at..]), 0, "the marker follows the audio");
        let t = turns(&s.log);
        assert_eq!(t, [(state_store::Speaker::Bot, "Hello!".into(), false)]);
    }
}

#[test]
fn barge_in_clears_in_the_same_step_and_no_frame_of_the_turn_follows() {
    let mut s = after_greeting();
    s.utterance("a table for two");
    s.reply(
        1,
        2,
        "Sure, for which day would you like it?",
        Duration::from_secs(3),
    );
    let out = s.pass(Duration::from_millis(500));
    assert!(plays(&out) > 0, "the reply is playing");
    let step = s.step(stt("wait", false));
    let clear = position(&step, |c| *c == Command::Clear).expect("clear in this step");
    assert_eq!(plays(&step[clear..]), 0);
    assert!(step.contains(&Command::TtsCancel(ContextId(2))));
    assert!(
        step.iter()
            .any(|c| matches!(c, Command::DialogInterrupt(TurnId(1), _)))
    );
    // Late audio of the cancelled context is dropped, and nothing plays.
    let late = s.tts_audio(2, Duration::from_millis(500));
    let after = s.pass(Duration::from_secs(1));
    assert_eq!(plays(&late) + plays(&after), 0);
    assert_eq!(s.core.interaction().interruptions, 1);
    assert_eq!(s.core.interaction().stale_tts_audio_chunks, 1);
}

#[test]
fn voice_barge_in_stops_the_bot_within_a_frame_of_speech() {
    let mut cfg = config(LegFormat::L16k16);
    cfg.barge_in.policy = BargeInPolicy::Immediate;
    let mut s = Sim::new(cfg);
    s.reply(
        0,
        1,
        "Hello, how can I help you today?",
        Duration::from_secs(3),
    );
    let out = s.pass(Duration::from_millis(300));
    assert!(plays(&out) > 0);
    let mut synth = media::synth::SpeechSynth::new(16_000, 7);
    let speech = synth.utterance(1_000);
    let mut chunks = speech.chunks(320);
    let mut cleared_after = None;
    for i in 0..50 {
        let frame = media::format::samples_to_pcm16le(chunks.next().unwrap_or(&[0; 320]));
        s.now += FRAME;
        let step = s.step(Input::Leg(LegEvent::Audio(frame)));
        if let Some(at) = position(&step, |c| *c == Command::Clear) {
            assert_eq!(plays(&step[at..]), 0);
            cleared_after = Some(i + 1);
            break;
        }
    }
    let frames = cleared_after.expect("voice stops the bot");
    assert!(frames <= 10, "stopped after {frames} frames of speech");
    assert_eq!(s.core.interaction().interruptions, 1);
}

#[test]
fn the_greeting_interrupted_is_recorded_as_heard_and_the_caller_answered() {
    let mut s = Sim::new(config(LegFormat::Mulaw8k));
    s.reply(
        0,
        1,
        "Hello and welcome to the booking line, how can I help?",
        Duration::from_secs(4),
    );
    s.pass(Duration::from_millis(1_060));
    let step = s.utterance("a table for two");
    assert!(step.contains(&Command::Clear));
    assert!(step.contains(&Command::DialogTurn(TurnId(1), "a table for two".into())));
    let t = turns(&step);
    assert_eq!(t.len(), 2, "{t:?}");
    let (speaker, heard, interrupted) = &t[0];
    assert_eq!(*speaker, state_store::Speaker::Bot);
    assert!(*interrupted);
    assert!(
        !heard.is_empty() && heard.len() < 30,
        "about 1 s of 4 s heard: {heard:?}"
    );
    assert_eq!(
        t[1],
        (
            state_store::Speaker::Caller,
            "a table for two".into(),
            false
        )
    );
    // The old context's audio is stale; the new turn plays.
    assert_eq!(plays(&s.tts_audio(1, Duration::from_millis(200))), 0);
    s.reply(1, 2, "For when?", Duration::from_millis(600));
    assert!(plays(&s.pass(Duration::from_millis(300))) > 0);
}

#[test]
fn a_hang_up_during_a_pending_tool_call_cancels_it_and_ends_once() {
    let mut s = after_greeting();
    s.utterance("is there a table at eight");
    let tool = Input::Dialog(DialogEvent::ToolCall {
        id: ToolCallId("t1".into()),
        turn: TurnId(1),
        name: "check_availability".into(),
        arguments_json: "{}".into(),
        privileged: true,
    });
    let step = s.step(tool);
    assert!(step.iter().any(|c| matches!(c, Command::ToolStart { .. })));
    assert_eq!(s.core.tools_in_flight(), 1);
    s.pass(Duration::from_millis(200));
    let step = s.step(Input::Leg(LegEvent::Hangup));
    assert_eq!(s.end().reason, EndReason::CallerHangup);
    assert!(s.end().peer_left);
    assert!(step.contains(&Command::ToolCancel(ToolCallId("t1".into()))));
    assert_eq!(s.core.tools_in_flight(), 0);
    // The result arriving afterwards goes nowhere.
    let late = s.step(Input::Tool(ToolOutcome {
        id: ToolCallId("t1".into()),
        turn: TurnId(1),
        result_json: "{}".into(),
        is_error: false,
    }));
    assert!(late.is_empty(), "{late:?}");
    assert_eq!(s.core.next_deadline(), None);
}

#[test]
fn an_interruption_cancels_only_the_turns_unprivileged_tools() {
    let mut s = after_greeting();
    s.utterance("book it");
    for (id, privileged) in [("look", false), ("book", true)] {
        s.step(Input::Dialog(DialogEvent::ToolCall {
            id: ToolCallId(id.into()),
            turn: TurnId(1),
            name: "t".into(),
            arguments_json: "{}".into(),
            privileged,
        }));
    }
    s.step(dialog_text(1, "Let me check that for you."));
    s.tts_audio(2, Duration::from_millis(800));
    s.pass(Duration::from_millis(200));
    let step = s.step(stt("no wait", false));
    assert!(step.contains(&Command::ToolCancel(ToolCallId("look".into()))));
    assert!(!step.contains(&Command::ToolCancel(ToolCallId("book".into()))));
    assert_eq!(s.core.tools_in_flight(), 1);
}

#[test]
fn a_hang_up_racing_a_watchdog_transfer_ends_once_with_the_first_cause() {
    // Watchdog first: the transfer begins, then the caller hangs up during
    // its prompt. The stall stays the recorded cause.
    let mut s = Sim::new(config(LegFormat::Mulaw8k));
    s.pass(Duration::from_millis(6_020));
    assert!(
        matches!(s.core.phase(), Phase::Ending(_)),
        "{:?}",
        s.core.phase()
    );
    s.step(Input::Leg(LegEvent::Hangup));
    assert_eq!(s.end().reason, EndReason::Stalled(Culprit::Dialog));
    assert!(s.end().peer_left, "the caller's hang-up is the disconnect");
    s.step(Input::Leg(LegEvent::Gone("socket closed".into())));
    s.step(Input::DrainDeadline);
    assert_eq!(s.end().reason, EndReason::Stalled(Culprit::Dialog));
    assert_eq!(s.core.late_ends(), 2);

    // Hang-up first, in the very step the watchdog would fire.
    let mut s = Sim::new(config(LegFormat::Mulaw8k));
    s.pass(Duration::from_millis(5_980));
    s.now += Duration::from_millis(40);
    let step = s.step(Input::Leg(LegEvent::Hangup));
    assert_eq!(s.end().reason, EndReason::CallerHangup);
    assert!(marks(&step).is_empty(), "no transfer began: {step:?}");
}

#[test]
fn a_stalled_dialog_gets_an_apology_then_a_transfer() {
    let mut s = Sim::new(config(LegFormat::Mulaw8k));
    let out = s.pass(Duration::from_millis(1_900));
    assert_eq!(plays(&out), 0, "nothing to say yet");
    let out = s.pass(Duration::from_millis(200));
    assert!(plays(&out) > 0, "the apology plays at 2 s");
    let stalls: Vec<_> = s
        .log
        .iter()
        .filter(|c| matches!(c, Command::Record(Rec::Event { kind, .. }) if kind == "stall"))
        .collect();
    assert_eq!(stalls.len(), 1);
    let out = s.pass(Duration::from_secs(10));
    assert_eq!(marks(&out), ["callgate-transfer:dialog_stalled"]);
    let end = s.end();
    assert_eq!(end.reason, EndReason::Stalled(Culprit::Dialog));
    assert!(!end.peer_left);
    assert_eq!(s.core.stalls(), 2);
    let how = crate::leg::Finish::for_end(end, Some("human".into()));
    assert!(
        matches!(how, crate::leg::Finish::Transfer { .. }),
        "{how:?}"
    );
}

#[test]
fn the_maximum_duration_ends_with_a_goodbye() {
    let mut cfg = config(LegFormat::Mulaw8k);
    cfg.max_duration = Duration::from_secs(3);
    let mut s = Sim::new(cfg);
    s.reply(0, 1, "Hello!", Duration::from_millis(400));
    let out = s.pass(Duration::from_secs(2));
    assert_eq!(marks(&out), ["turn-0"]);
    let out = s.pass(Duration::from_secs(10));
    assert!(plays(&out) > 100, "the goodbye prompt plays in full");
    assert_eq!(marks(&out), ["callgate-end:max_duration"]);
    assert_eq!(s.end().reason, EndReason::MaxDuration);
    let how = crate::leg::Finish::for_end(s.end(), None);
    assert!(matches!(how, crate::leg::Finish::Hangup(_)), "{how:?}");
}

#[test]
fn a_dialog_end_call_while_the_caller_speaks_ends_and_keeps_their_words() {
    let mut s = after_greeting();
    s.utterance("a table for two at eight");
    s.reply(1, 2, "Booked for eight.", Duration::from_millis(600));
    assert_eq!(marks(&s.pass(Duration::from_secs(1))), ["turn-1"]);
    // The caller starts talking (nothing to interrupt) ...
    assert!(!s.step(stt("thanks", false)).contains(&Command::Clear));
    // ... and the dialog ends the call meanwhile: its marker goes out at once.
    let step = s.step(Input::Dialog(DialogEvent::EndCall {
        reason: "booking_confirmed".into(),
    }));
    assert!(matches!(s.core.phase(), Phase::Ending(_)));
    assert_eq!(marks(&step), ["callgate-end:booking_confirmed"]);
    let step = s.utterance("thanks a lot");
    assert!(
        !step.iter().any(|c| matches!(c, Command::DialogTurn(..))),
        "no reply owed"
    );
    assert!(turns(&step).contains(&(state_store::Speaker::Caller, "thanks a lot".into(), false)));
    s.step(Input::Leg(LegEvent::Played(
        "callgate-end:booking_confirmed".into(),
    )));
    assert_eq!(s.end().reason, EndReason::BotEnded);
    assert_eq!(s.end().ledger(), "bot_ended:booking_confirmed");
    assert!(!s.end().peer_left);
}

#[test]
fn speaking_over_the_last_reply_interrupts_it_before_the_dialog_ends_the_call() {
    let mut s = after_greeting();
    s.utterance("a table for two at eight");
    s.reply(1, 2, "Booked. Goodbye!", Duration::from_millis(600));
    s.pass(Duration::from_millis(100));
    assert!(s.step(stt("thanks", false)).contains(&Command::Clear));
    let step = s.step(Input::Dialog(DialogEvent::EndCall {
        reason: "booking_confirmed".into(),
    }));
    assert_eq!(marks(&step), ["callgate-end:booking_confirmed"]);
    s.step(Input::Leg(LegEvent::Played(
        "callgate-end:booking_confirmed".into(),
    )));
    assert_eq!(s.end().ledger(), "bot_ended:booking_confirmed");
}

#[test]
fn a_provider_closing_mid_call_transfers_with_its_name() {
    let mut s = after_greeting();
    let closed = stt_client::CloseReason::from_frame(1011, "NET-0000 provider timeout");
    s.step(Input::Stt(SttEvent::Closed(closed)));
    let before = s.log.len();
    let out = s.pass(Duration::from_secs(5));
    assert_eq!(marks(&out), ["callgate-transfer:stt_failed"]);
    assert_eq!(
        s.end().reason,
        EndReason::ProviderFailed(crate::end::Provider::Stt)
    );
    let audio_after = s.log[before..]
        .iter()
        .any(|c| matches!(c, Command::SttAudio(_)));
    assert!(!audio_after, "no audio is sent to a closed STT stream");
}

#[test]
fn a_protocol_violation_refuses_the_leg_with_its_kind() {
    let mut s = after_greeting();
    s.step(Input::Leg(LegEvent::Violation(crate::leg::Violation {
        kind: "invalid_json",
        detail: "expected value".into(),
    })));
    let end = s.end();
    assert_eq!(end.ledger(), "protocol_error:invalid_json");
    let how = crate::leg::Finish::for_end(end, None);
    assert!(matches!(how, crate::leg::Finish::Refuse(v) if v.kind == "invalid_json"));
}

#[test]
fn media_that_stops_ends_the_call_without_a_prompt() {
    let mut s = after_greeting();
    s.now += Duration::from_secs(6);
    let step = s.step(Input::Tick);
    assert_eq!(plays(&step), 0);
    assert_eq!(s.end().reason, EndReason::MediaStalled);
}

#[test]
fn an_empty_final_after_interim_words_still_yields_a_dialog_turn_with_them() {
    let mut s = after_greeting();
    s.step(stt("a table for", false));
    s.step(stt("a table for two", false));
    let step = s.step(stt("", true));
    assert!(
        step.iter()
            .any(|c| matches!(c, Command::DialogTurn(_, t) if t == "a table for two")),
        "{step:?}"
    );
}

#[test]
fn a_text_delta_that_ends_a_sentence_is_flushed_at_once() {
    let mut s = after_greeting();
    s.utterance("a table for two");
    // The reply to turn 1 speaks in context 2.
    let step = s.step(dialog_text(1, "Sure, one moment"));
    assert!(
        step.iter()
            .any(|c| matches!(c, Command::TtsText(ContextId(2), _))),
        "{step:?}"
    );
    assert!(
        !step.contains(&Command::TtsFlush(ContextId(2))),
        "mid-sentence text waits for more: {step:?}"
    );
    for (delta, flushed) in [
        (". Let me look", true),
        (" that up!", true),
        (" Version 2.5 is", false),
        (" fine? ", true),
    ] {
        let step = s.step(dialog_text(1, delta));
        let text = position(
            &step,
            |c| matches!(c, Command::TtsText(ContextId(2), t) if t == delta),
        );
        let flush = position(&step, |c| *c == Command::TtsFlush(ContextId(2)));
        assert!(text.is_some(), "{delta:?}: {step:?}");
        if flushed {
            assert!(
                flush > text,
                "{delta:?}: a TtsFlush follows the TtsText: {step:?}"
            );
        } else {
            assert_eq!(flush, None, "{delta:?}: {step:?}");
        }
    }
}

#[test]
fn a_tool_call_repeated_by_a_resumed_dialog_stream_never_runs_twice() {
    let mut s = after_greeting();
    s.utterance("book a table for four at eight");
    let call = || {
        Input::Dialog(DialogEvent::ToolCall {
            id: ToolCallId("book-1".into()),
            turn: TurnId(1),
            name: "book_table".into(),
            arguments_json: "{}".into(),
            privileged: true,
        })
    };
    let starts = |cmds: &[Command]| {
        cmds.iter()
            .filter(|c| matches!(c, Command::ToolStart { .. }))
            .count()
    };
    assert_eq!(starts(&s.step(call())), 1);
    // Repeated while it runs: not started again.
    assert_eq!(starts(&s.step(call())), 0);
    assert_eq!(s.core.tools_in_flight(), 1);
    let done = s.step(Input::Tool(ToolOutcome {
        id: ToolCallId("book-1".into()),
        turn: TurnId(1),
        result_json: "{\"booked\":true}".into(),
        is_error: false,
    }));
    assert_eq!(
        done.iter()
            .filter(|c| matches!(c, Command::DialogToolResult { .. }))
            .count(),
        1
    );
    // Repeated after it finished: the same result again, no second run.
    let again = s.step(call());
    assert_eq!(starts(&again), 0, "{again:?}");
    assert!(again.contains(&Command::DialogToolResult {
        id: ToolCallId("book-1".into()),
        result_json: "{\"booked\":true}".into(),
        is_error: false,
    }));
}

#[test]
fn speech_that_ends_without_a_final_gets_one_finalize_before_the_apology() {
    let mut s = after_greeting();
    let loud = |f: LegFormat| vec![0x10u8; f.frame_bytes()];
    s.pass_with(Duration::from_millis(600), loud);
    // The local VAD ends the speech after its minimum silence; half the
    // 2 s STT stall later, STT is asked to finalize — once.
    let quiet = s.pass(Duration::from_millis(1_500));
    let finalizes = |cmds: &[Command]| cmds.iter().filter(|c| **c == Command::SttFinalize).count();
    assert_eq!(finalizes(&quiet), 1, "{quiet:?}");
    // A final with words then settles it: no further nudge.
    s.step(stt("a table for two", true));
    assert_eq!(finalizes(&s.pass(Duration::from_millis(500))), 0);
}

#[test]
fn speech_answered_by_a_final_is_not_nudged() {
    let mut s = after_greeting();
    let loud = |f: LegFormat| vec![0x10u8; f.frame_bytes()];
    s.pass_with(Duration::from_millis(600), loud);
    s.step(stt("a table for two", true));
    let quiet = s.pass(Duration::from_millis(1_500));
    assert!(!quiet.contains(&Command::SttFinalize), "{quiet:?}");
}

#[test]
fn a_detached_carrier_is_held_not_stalled_and_attached_again_owes_media() {
    let mut s = after_greeting();
    s.step(Input::Leg(LegEvent::Detached));
    // Longer than the 5 s media stall with no frame: the call holds.
    s.now += Duration::from_secs(12);
    s.step(Input::Tick);
    assert!(s.core.ended().is_none(), "held while detached");
    s.step(Input::Leg(LegEvent::Attached));
    s.pass(Duration::from_secs(2));
    assert!(
        s.core.ended().is_none(),
        "frames flow on the new connection"
    );
    // The new connection must stream: its silence is a stall as before.
    s.now += Duration::from_secs(6);
    s.step(Input::Tick);
    assert_eq!(s.end().reason, EndReason::MediaStalled);
}

#[test]
fn each_dtmf_digit_is_named_in_the_timeline_and_counted() {
    let mut s = Sim::new(config(LegFormat::Mulaw8k));
    let mut cmds = s.step(Input::Leg(LegEvent::Dtmf('5')));
    cmds.extend(s.step(Input::Leg(LegEvent::Dtmf('#'))));
    let digits: Vec<&serde_json::Value> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::Record(Rec::Event { kind, detail, .. }) if kind == "dtmf" => Some(detail),
            _ => None,
        })
        .collect();
    assert_eq!(
        digits,
        [
            &serde_json::json!({"digit": "5"}),
            &serde_json::json!({"digit": "#"})
        ]
    );
    assert_eq!(s.core.interaction().dtmf_digits, 2);
}
