//! How a call ends: an overflow prompt heard or cut off, transfer and end
//! marks, an unexpected close, and an upgrade the server refused.

use super::*;

#[test]
fn an_overflow_prompt_played_to_its_mark_is_a_heard_rejection() {
    let mut h = Harness::new(&[(0, 200)]);
    h.open(ms(5));
    let played = h.prompt(ms(50), Prompt::Overflow, 25);
    assert_eq!(played, ms(3_500), "seven 500 ms chunks");
    h.mark(ms(50), "callgate-overflow:capacity");
    h.run_until(ms(3_560));
    assert_eq!(
        h.echo_times(),
        [("callgate-overflow:capacity".to_string(), ms(3_550))]
    );
    h.caller.handle_closed(ms(3_600), Some(1000), "");
    assert!(h.caller.is_done());
    assert!(!h.caller.is_admitted());
    let r = h.record();
    let expected = Outcome::Rejected {
        how: "overflow_mark".into(),
        reason: "capacity".into(),
        prompt_heard: true,
        time_to_rejection_ms: 50,
    };
    assert_eq!(r.outcome, expected);
    assert_eq!(r.max_owed_silence_ms, 50);
    assert_eq!(r.prompts_heard.overflow, 1);
    assert_eq!(r.time_to_greeting_ms, None, "a refusal is no greeting");
}

#[test]
fn a_close_before_the_prompt_ends_is_an_unheard_rejection() {
    let mut h = Harness::new(&[(0, 200)]);
    h.open(Duration::ZERO);
    h.audio(ms(50), 1_500);
    h.mark(ms(50), "callgate-overflow:queue_timeout");
    h.caller.handle_closed(ms(500), Some(1000), "");
    let r = h.record();
    assert!(
        matches!(
            r.outcome,
            Outcome::Rejected {
                prompt_heard: false,
                ..
            }
        ),
        "{r:?}"
    );
    assert_eq!(r.bot_audio_ms, 450);
}

#[test]
fn a_server_that_never_closes_after_the_prompt_leaves_the_caller_in_dead_air() {
    let mut h = Harness::new(&[]);
    h.open(Duration::ZERO);
    h.audio(ms(50), 500);
    h.mark(ms(50), "callgate-overflow:capacity");
    h.run_until(ms(10_000));
    let r = h.record();
    assert_eq!(
        r.outcome,
        Outcome::Silent {
            phase: "overflow_close".into()
        }
    );
    assert_eq!(r.duration_ms, 550 + 4_000);
}

#[test]
fn transfer_and_end_marks_become_their_outcomes() {
    for (mark, expected) in [
        (
            "callgate-transfer:asked_for_human",
            Outcome::Transferred {
                reason: "asked_for_human".into(),
            },
        ),
        (
            "callgate-end:goodbye",
            Outcome::EndedByBot {
                reason: "goodbye".into(),
            },
        ),
    ] {
        let mut h = Harness::new(&[(0, 200), (0, 200)]);
        h.open(Duration::ZERO);
        h.audio(ms(20), 100);
        h.mark(ms(20), "turn-1");
        let end = h.run_until_speech_ends(ms(2_000));
        h.audio(end + ms(100), 300);
        h.mark(end + ms(100), mark);
        h.run_until(end + ms(450));
        h.caller.handle_closed(end + ms(450), Some(1000), "bye");
        let r = h.record();
        assert_eq!(r.outcome, expected);
        assert_eq!(r.replies_heard, 1);
    }
}

#[test]
fn an_unexpected_close_fails_the_call_with_its_phase() {
    let mut h = Harness::new(&[(0, 200)]);
    h.open(Duration::ZERO);
    h.caller
        .handle_closed(ms(700), Some(1011), "internal error");
    let r = h.record();
    let Outcome::Failed { reason } = &r.outcome else {
        panic!("{r:?}")
    };
    assert!(
        reason.contains("1011") && reason.contains("greeting"),
        "{reason}"
    );
    assert_eq!(r.max_owed_silence_ms, 700);
}

#[test]
fn a_refused_upgrade_is_a_rejection_with_its_status() {
    let mut h = Harness::new(&[(0, 200)]);
    let err = LoadError::Refused {
        url: "ws://x".into(),
        status: 503,
        body: "at capacity".into(),
    };
    h.caller.handle_connect_error(ms(12), &err);
    assert!(h.caller.is_done());
    h.drain();
    assert!(h.sent.is_empty());
    let r = h.record();
    let expected = Outcome::Rejected {
        how: "http_503".into(),
        reason: "at capacity".into(),
        prompt_heard: false,
        time_to_rejection_ms: 12,
    };
    assert_eq!(r.outcome, expected);
}

#[test]
fn a_401_upgrade_is_unauthorized_not_a_rejection() {
    for protocol in [
        CallProtocol::Twilio,
        CallProtocol::Partner(PartnerFormat::L16),
    ] {
        let mut h = Harness::with_protocol(&[(0, 200)], protocol);
        let err = LoadError::Refused {
            url: "ws://x".into(),
            status: 401,
            body: "unknown partner key".into(),
        };
        h.caller.handle_connect_error(ms(3), &err);
        let r = h.record();
        assert_eq!(
            r.outcome,
            Outcome::Unauthorized {
                status: 401,
                reason: "unknown partner key".into()
            }
        );
        assert!(r.outcome.is_failure());
    }
}
