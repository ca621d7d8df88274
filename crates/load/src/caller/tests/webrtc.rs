//! WebRTC on the virtual clock: nothing but decoded 20 ms frames and the
//! session's status arrive, so a turn ends on the turn gap of quiet after
//! the bot's own audio, and the status says how the call ended.

use super::*;

const GAP: u32 = 400;

fn webrtc(turns: &[(u64, u32)]) -> Harness {
    Harness::with_protocol(turns, CallProtocol::Webrtc { turn_gap_ms: GAP })
}

impl Harness {
    /// Frames of `samples` (16 kHz), one every 20 ms from `from`; returns
    /// when the next frame would be due.
    fn stream(&mut self, from: Duration, samples: &[i16]) -> Duration {
        let mut t = from;
        for chunk in samples.chunks(320) {
            let mut frame: Vec<u8> = chunk.iter().flat_map(|s| s.to_le_bytes()).collect();
            frame.resize(640, 0);
            self.run_until(t);
            self.caller.handle_binary(t, &frame);
            self.drain();
            t += FRAME;
        }
        t
    }

    fn quiet(&mut self, from: Duration, ms: u32) -> Duration {
        self.stream(from, &vec![0; ms as usize * 16])
    }

    fn bot_speech(&mut self, from: Duration, ms: u32) -> Duration {
        let samples = SpeechSynth::new(16_000, 5).utterance(ms);
        self.stream(from, &samples)
    }

    fn status(&mut self, t: Duration, state: &str, reason: Option<&str>) {
        let v = json!({"state": state, "end_reason": reason, "call_id": "c-9"});
        self.run_until(t);
        self.caller.handle_text(t, &v.to_string());
        self.drain();
    }

    fn first_speech_after(&self, t: Duration) -> Option<Duration> {
        self.binary
            .iter()
            .find(|(at, b)| *at >= t && b.iter().any(|&x| x != 0))
            .map(|(at, _)| *at)
    }
}

#[test]
fn a_turn_ends_on_the_gap_of_quiet_after_the_bots_audio_at_that_audios_end() {
    let mut h = webrtc(&[(100, 300)]);
    h.open(ms(0));
    let greeting_end = h.bot_speech(ms(100), 600);
    let t = h.quiet(greeting_end, GAP - 40);
    assert_eq!(
        h.first_speech_after(ms(0)),
        None,
        "the gap has not passed yet"
    );
    h.quiet(t, 60);
    let spoke_end = h.run_until_speech_ends(ms(3_000));
    let spoke = h.first_speech_after(ms(0)).expect("the caller speaks");
    assert!(
        spoke >= greeting_end + ms(u64::from(GAP)) - FRAME,
        "{spoke:?}"
    );
    assert!(
        spoke <= greeting_end + ms(u64::from(GAP) + 100),
        "{spoke:?}"
    );
    let reply = h.bot_speech(spoke_end + ms(200), 500);
    h.quiet(reply, GAP + 200);
    assert!(h.caller.is_done());
    let sent_text = h
        .sent
        .iter()
        .filter_map(|(_, v)| v.as_ref())
        .any(|v| v["event"] != "binary");
    assert!(!sent_text, "WebRTC sends nothing but audio");
    let last = h.sent.last().map(|(_, v)| v.is_none());
    assert_eq!(
        last,
        Some(true),
        "the hang-up is the close alone (the driver's DELETE)"
    );
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Completed, "{r:#?}");
    assert_eq!((r.utterances_sent, r.replies_heard), (1, 1));
    assert_eq!(r.time_to_greeting_ms, Some(100));
    assert!(
        r.max_owed_silence_ms < u64::from(GAP),
        "the gap is not dead air: {r:#?}"
    );
    assert_eq!(r.greeting_audio_ms, Some(600));
    assert_eq!(r.prompts_heard.unknown, 0);
}

#[test]
fn quiet_frames_are_dead_air() {
    let mut h = webrtc(&[(100, 300)]);
    h.open(ms(0));
    h.quiet(ms(20), 5_000);
    let r = h.record();
    assert_eq!(
        r.outcome,
        Outcome::Silent {
            phase: "greeting".into()
        }
    );
    assert_eq!(r.time_to_first_audio_ms, None, "silence is no audio");
}

#[test]
fn the_sessions_final_status_is_read_as_the_terminal_marks_are() {
    let rejected = |reason: &str| Outcome::Rejected {
        how: "session_refused".into(),
        reason: reason.into(),
        prompt_heard: false,
        time_to_rejection_ms: 900,
    };
    let cases = [
        ("refused", "queue_timeout", rejected("queue_timeout")),
        ("ended", "setup_failed:stt", rejected("setup_failed:stt")),
        (
            "ended",
            "transferred:caller_requested_human",
            Outcome::Transferred {
                reason: "caller_requested_human".into(),
            },
        ),
        (
            "ended",
            "stalled:tts",
            Outcome::WatchdogTransfer {
                reason: "stalled:tts".into(),
            },
        ),
        (
            "ended",
            "provider_failed:dialog",
            Outcome::FailoverTransfer {
                reason: "provider_failed:dialog".into(),
            },
        ),
        (
            "ended",
            "max_duration",
            Outcome::CutShort {
                reason: "max_duration".into(),
            },
        ),
        (
            "ended",
            "caller_requested_human",
            Outcome::Transferred {
                reason: "caller_requested_human".into(),
            },
        ),
        (
            "ended",
            "drain_transfer",
            Outcome::Transferred {
                reason: "drain".into(),
            },
        ),
        (
            "ended",
            "bot_ended:done",
            Outcome::EndedByBot {
                reason: "done".into(),
            },
        ),
    ];
    for (state, reason, outcome) in cases {
        let mut h = webrtc(&[(100, 300)]);
        h.open(ms(0));
        h.status(ms(500), "queued", None);
        let t = h.bot_speech(ms(100), 300);
        h.status(ms(900).max(t), state, Some(reason));
        assert!(h.caller.is_done(), "{reason}");
        let r = h.record();
        assert_eq!(r.outcome, outcome, "{state} {reason}");
        assert_eq!(r.end_message_reason.as_deref(), Some(reason));
        assert_eq!(r.session_id.as_deref(), Some("c-9"));
    }
    for lost in ["consent_lost", "protocol_error:bad_rtp", "shutdown"] {
        let mut h = webrtc(&[(100, 300)]);
        h.open(ms(0));
        h.status(ms(300), "ended", Some(lost));
        let r = h.record();
        assert!(
            matches!(&r.outcome, Outcome::Failed { reason } if reason.contains(lost)),
            "{lost}: {:?}",
            r.outcome
        );
    }
}
