//! Cues from outside the script (a drill's orchestrator): a cued utterance
//! waits for `Speak` while the line is held and nothing is owed; a holding
//! caller hangs up only when told; `Leave` gives up on an owed reply; `Drop`
//! vanishes with no `stop`.

use super::*;

fn cued(mut h: Harness) -> Harness {
    for t in &mut h.caller.plan.turns {
        t.cued = true;
    }
    h
}

#[test]
fn a_cued_caller_holds_silently_until_told_to_speak_and_is_never_silent() {
    let mut h = cued(Harness::new(&[(100, 400)]));
    h.caller.plan.hold = true;
    h.open(ms(0));
    h.audio(ms(50), 500);
    h.mark(ms(50), "turn-1");
    // Well past the 3 s silence threshold: nothing is owed while cued.
    h.run_until(ms(20_000));
    assert!(h.caller.is_live(), "{:?}", h.caller.outcome());
    assert!(h.caller.awaits_cue());
    assert_eq!(h.caller.phase_label(), "awaiting_cue_1");
    assert!(
        h.events("media").len() > 900,
        "the line stays open with silence"
    );
    h.caller.handle_cue(ms(20_000), Cue::Speak);
    let end = h.run_until_speech_ends(ms(25_000));
    assert_eq!(
        end,
        ms(20_100 + 380),
        "think 100 ms after the cue, then 400 ms"
    );
    h.audio(end + ms(300), 200);
    h.mark(end + ms(300), "turn-2");
    h.run_until(end + ms(30_000));
    assert!(h.caller.is_live(), "holding after the script");
    assert_eq!(h.caller.phase_label(), "holding");
    h.caller.handle_cue(end + ms(30_000), Cue::HangUp);
    h.drain();
    assert!(h.ended_with_stop_and_close());
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(r.reply_latency_ms, [300]);
    assert!(r.max_owed_silence_ms <= 300, "{}", r.max_owed_silence_ms);
}

#[test]
fn speak_is_ignored_unless_a_cue_is_awaited() {
    let mut h = Harness::new(&[(100, 400)]);
    h.open(ms(0));
    h.caller.handle_cue(ms(10), Cue::Speak);
    assert_eq!(h.caller.phase_label(), "greeting");
    h.audio(ms(50), 500);
    h.mark(ms(50), "turn-1");
    let end = h.run_until_speech_ends(ms(5_000));
    // The greeting ends at 550, the think pause at 650; speech starts with
    // the frame after it (660) and lasts 400 ms.
    assert_eq!(end, ms(660 + 380), "the think pause was not cut short");
}

#[test]
fn a_speak_that_comes_during_the_greeting_is_kept_for_the_cued_utterance() {
    let mut h = cued(Harness::new(&[(100, 400)]));
    h.caller.plan.hold = true;
    h.open(ms(0));
    h.audio(ms(50), 500);
    h.caller.handle_cue(ms(100), Cue::Speak);
    assert_eq!(
        h.caller.phase_label(),
        "greeting_playout",
        "the greeting plays on"
    );
    h.mark(ms(50), "turn-1");
    let end = h.run_until_speech_ends(ms(5_000));
    // The greeting ends at 550; the kept cue starts the think pause then.
    assert_eq!(end, ms(660 + 380), "spoke right after the greeting");
    h.audio(end + ms(300), 200);
    h.mark(end + ms(300), "turn-2");
    h.run_until(end + ms(5_000));
    assert_eq!(h.caller.phase_label(), "holding", "the cue was used once");
}

#[test]
fn hanging_up_before_the_script_is_done_is_leaving_early() {
    let mut h = Harness::new(&[(100, 400), (100, 400)]);
    h.open(ms(0));
    h.caller.handle_cue(ms(10), Cue::HangUp);
    h.drain();
    assert!(h.ended_with_stop_and_close());
    let r = h.record();
    assert_eq!(
        r.outcome,
        Outcome::LeftEarly {
            phase: "greeting".into()
        }
    );
    assert!(!r.outcome.is_failure());
}

#[test]
fn a_caller_who_leaves_gives_up_on_the_owed_reply_at_its_delay() {
    let mut h = Harness::new(&[(100, 400)]);
    h.caller.plan.leave = Some(Leave {
        after_utterance: 1,
        delay: ms(1_500),
    });
    h.open(ms(0));
    h.audio(ms(50), 500);
    h.mark(ms(50), "turn-1");
    let end = h.run_until_speech_ends(ms(5_000));
    h.run_until(end + ms(1_000));
    assert!(h.caller.is_live());
    h.run_until(end + ms(2_000));
    assert!(h.ended_with_stop_and_close());
    let r = h.record();
    assert_eq!(
        r.outcome,
        Outcome::LeftEarly {
            phase: "reply_1".into()
        }
    );
    assert_eq!(r.duration_ms, millis(end + ms(1_500)), "{r:?}");
    assert_eq!(r.replies_heard, 0);
}

#[test]
fn a_dropped_caller_sends_no_stop_and_asks_for_no_close_handshake() {
    let mut h = Harness::new(&[(100, 400)]);
    h.open(ms(0));
    h.audio(ms(50), 500);
    h.caller.handle_cue(ms(60), Cue::Drop);
    let mut last = None;
    while let Some(tx) = h.caller.poll_transmit() {
        last = Some(tx);
    }
    assert_eq!(last, Some(Transmit::Drop));
    assert!(h.events("stop").is_empty());
    assert!(h.caller.is_done());
    assert_eq!(h.record().outcome, Outcome::Dropped);
}

#[test]
fn a_reconnect_resumes_the_same_partner_session_with_its_token() {
    let mut h = Harness::partner(&[(100, 400)], PartnerFormat::Pcmu);
    h.caller.plan.hold = true;
    h.open(ms(0));
    h.server(
        ms(10),
        json!({"event":"started","session_id":"s-1","resume_token":"t1"}),
    );
    h.binary_audio(ms(50), 300);
    h.partner_mark(ms(50), "turn-1");
    let end = h.run_until_speech_ends(ms(5_000));
    h.binary_audio(end + ms(300), 200);
    h.partner_mark(end + ms(300), "turn-2");
    h.run_until(end + ms(2_000));
    assert_eq!(h.caller.phase_label(), "holding");
    let at = end + ms(2_000);
    h.caller.handle_cue(at, Cue::Reconnect { after: ms(500) });
    h.drain();
    let asked = h.events("(reconnect)");
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].1["token"], "t1");
    assert_eq!(asked[0].1["after_ms"], 500);
    assert!(h.events("stop").is_empty(), "a reconnect is not a hang-up");
    assert!(h.caller.is_live());
    // The new connection: the same session, a new token.
    h.server(
        at + ms(600),
        json!({"event":"started","session_id":"s-1","resume_token":"t2"}),
    );
    h.run_until(at + ms(5_000));
    h.caller.handle_cue(at + ms(5_000), Cue::HangUp);
    h.drain();
    assert!(h.ended_with_stop_and_close());
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(r.resumes, 1);
    assert_eq!(
        r.malformed_events, 0,
        "the second started confirmed the resume"
    );
}

#[test]
fn a_reconnect_without_a_token_only_drops() {
    let mut h = Harness::new(&[(100, 400)]);
    h.open(ms(0));
    h.caller
        .handle_cue(ms(10), Cue::Reconnect { after: ms(500) });
    h.drain();
    assert!(h.events("(reconnect)").is_empty());
    assert!(h.events("stop").is_empty());
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Dropped);
    assert_eq!(r.resumes, 0);
}

#[test]
fn a_refused_resume_is_a_failure_of_the_call() {
    let mut h = Harness::partner(&[(100, 400)], PartnerFormat::Pcmu);
    h.open(ms(0));
    h.server(
        ms(10),
        json!({"event":"started","session_id":"s-1","resume_token":"t1"}),
    );
    h.caller.handle_cue(ms(20), Cue::Reconnect { after: ms(0) });
    h.drain();
    let err = crate::error::LoadError::Refused {
        url: "ws://x".into(),
        status: 410,
        body: "resume_expired".into(),
    };
    h.caller.handle_resume_failed(ms(30), &err);
    let r = h.record();
    assert!(
        matches!(&r.outcome, Outcome::Failed { reason } if reason.contains("resume failed")),
        "{:?}",
        r.outcome
    );
}
