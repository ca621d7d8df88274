//! What the caller heard, told apart: bundled prompts (the server's real
//! asset audio) are never replies, and the ending says who ended the call.

use super::*;

/// A turn mark in the harness's protocol.
fn turn_mark(h: &mut Harness, t: Duration, name: &str) {
    match h.caller.plan.protocol {
        CallProtocol::Twilio => h.mark(t, name),
        CallProtocol::Partner(_) => h.partner_mark(t, name),
        CallProtocol::Webrtc { .. } => panic!("WebRTC carries no marks"),
    }
}

/// Greeting (300 ms of speech-like audio) and its mark at 20 ms; returns
/// when the caller's first utterance ended.
fn greeted(h: &mut Harness) -> Duration {
    h.open(Duration::ZERO);
    h.speech(ms(20), 300);
    turn_mark(h, ms(20), "turn-1");
    h.run_until_speech_ends(ms(3_000))
}

#[test]
fn a_stalled_reply_covered_by_the_apology_counts_one_apology_then_one_reply() {
    for protocol in [
        CallProtocol::Twilio,
        CallProtocol::Partner(PartnerFormat::L16),
        CallProtocol::Partner(PartnerFormat::Pcmu),
    ] {
        let mut h = Harness::with_protocol(&[(0, 400)], protocol);
        let end = greeted(&mut h);
        // The dialog stalls; the watchdog plays the apology after 1.5 s
        // (201 frames, 4.02 s), and the real reply comes at 6 s.
        let apology = h.prompt(end + ms(1_500), Prompt::Apology, 1);
        assert_eq!(apology, ms(4_020));
        assert!(!h.caller.is_done());
        h.speech(end + ms(6_000), 800);
        turn_mark(&mut h, end + ms(6_000), "turn-2");
        h.run_until(end + ms(7_000));
        let r = h.record();
        assert_eq!(r.outcome, Outcome::Completed, "{protocol:?}: {r:#?}");
        assert_eq!((r.replies_heard, r.apologies_heard), (1, 1), "{protocol:?}");
        assert_eq!(
            r.reply_latency_ms,
            [6_000],
            "to the real reply: {protocol:?}"
        );
        assert_eq!(r.apology_latency_ms, [1_500], "{protocol:?}");
        assert_eq!(
            r.prompts_heard,
            PromptsHeard {
                apology: 1,
                ..PromptsHeard::default()
            },
            "{protocol:?}"
        );
        assert_eq!(r.reply_audio_ms, [800], "the apology is not reply audio");
        assert_eq!(r.greeting_audio_ms, Some(300));
        assert_eq!(r.time_to_greeting_ms, Some(20));
        // The apology filled the gap: 1.5 s before it, 480 ms after it.
        assert_eq!(r.max_owed_silence_ms, 1_500, "{protocol:?}");
    }
}

#[test]
fn a_turn_mark_after_only_an_apology_answers_nothing() {
    let mut h = Harness::new(&[(0, 400)]);
    let end = greeted(&mut h);
    let apology = h.prompt(end + ms(1_000), Prompt::Apology, 1);
    h.mark(end + ms(1_000), "turn-2");
    h.run_until(end + ms(20_000));
    let r = h.record();
    assert_eq!(
        r.outcome,
        Outcome::Silent {
            phase: "reply_1".into()
        },
        "{r:#?}"
    );
    assert_eq!((r.replies_heard, r.apologies_heard), (0, 1));
    assert!(r.reply_latency_ms.is_empty());
    // Dead air from the apology's end until the caller gave up.
    assert_eq!(
        r.duration_ms,
        millis(end + ms(1_000) + apology + Duration::from_secs(3) + SILENCE_GRACE)
    );
}

#[test]
fn hold_audio_before_the_greeting_is_hold_not_the_greeting() {
    let mut h = Harness::new(&[]);
    h.open(Duration::ZERO);
    let mut hold = crate::prompts::audio(Prompt::Hold, h.caller.audio).unwrap();
    hold.extend(crate::prompts::audio(Prompt::HoldMusic, h.caller.audio).unwrap());
    h.send_audio(ms(10), &hold, 25);
    h.clear(ms(2_000));
    h.speech(ms(2_100), 500);
    h.mark(ms(2_100), "turn-1");
    h.run_until(ms(3_000));
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(r.time_to_first_audio_ms, Some(10));
    assert_eq!(r.time_to_greeting_ms, Some(2_100));
    assert_eq!(r.greeting_audio_ms, Some(500), "hold audio is not greeting");
    assert_eq!((r.prompts_heard.hold, r.prompts_heard.hold_music), (1, 1));
    assert_eq!(r.max_owed_silence_ms, 100);
}

#[test]
fn an_apology_while_the_greeting_is_owed_is_counted_without_a_reply_latency() {
    let mut h = Harness::new(&[]);
    h.open(Duration::ZERO);
    h.prompt(ms(1_500), Prompt::Apology, 1);
    h.speech(ms(6_000), 400);
    h.mark(ms(6_000), "turn-1");
    h.run_until(ms(7_000));
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(r.apologies_heard, 1);
    assert!(r.apology_latency_ms.is_empty() && r.reply_latency_ms.is_empty());
    assert_eq!(r.time_to_greeting_ms, Some(6_000));
    assert_eq!(r.time_to_first_audio_ms, Some(1_500));
}

#[test]
fn two_apologies_before_the_reply_are_two() {
    let mut h = Harness::new(&[(0, 400)]);
    let end = greeted(&mut h);
    let first = h.prompt(end + ms(1_000), Prompt::Apology, 1);
    h.prompt(end + ms(1_000) + first + ms(500), Prompt::Apology, 1);
    h.speech(end + ms(11_000), 200);
    h.mark(end + ms(11_000), "turn-2");
    h.run_until(end + ms(12_000));
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Completed, "{r:#?}");
    assert_eq!((r.replies_heard, r.apologies_heard), (1, 2));
    assert_eq!(r.apology_latency_ms, [1_000, millis(ms(1_500) + first)]);
    assert_eq!(r.reply_latency_ms, [11_000]);
}

#[test]
fn a_watchdog_transfer_after_the_apology_is_no_reply_and_not_served() {
    let mut h = Harness::new(&[(0, 400)]);
    let end = greeted(&mut h);
    let apology = h.prompt(end + ms(1_500), Prompt::Apology, 1);
    // The watchdog gives up: the transfer prompt queues behind the apology.
    let transfer = h.prompt(end + ms(4_000), Prompt::Transfer, 1);
    h.mark(end + ms(4_000), "callgate-transfer:dialog_stalled");
    let played = end + ms(1_500) + apology + transfer;
    h.run_until(played);
    assert_eq!(
        h.echo_times().last().cloned(),
        Some(("callgate-transfer:dialog_stalled".to_string(), played))
    );
    h.caller.handle_closed(played + ms(50), Some(1000), "");
    let r = h.record();
    let expected = Outcome::WatchdogTransfer {
        reason: "dialog_stalled".into(),
    };
    assert_eq!(r.outcome, expected);
    assert!(!r.outcome.is_served() && !r.outcome.is_failure());
    assert_eq!((r.replies_heard, r.apologies_heard), (0, 1));
    assert_eq!((r.prompts_heard.apology, r.prompts_heard.transfer), (1, 1));
    assert!(r.reply_latency_ms.is_empty());
}

#[test]
fn the_maximum_duration_goodbye_is_a_cut_not_the_bots_ending() {
    let mut h = Harness::new(&[(0, 400), (0, 400)]);
    let end = greeted(&mut h);
    let goodbye = h.prompt(end + ms(300), Prompt::Goodbye, 1);
    h.mark(end + ms(300), "callgate-end:max_duration");
    h.run_until(end + ms(300) + goodbye);
    h.caller
        .handle_closed(end + ms(400) + goodbye, Some(1000), "");
    let r = h.record();
    assert_eq!(
        r.outcome,
        Outcome::CutShort {
            reason: "max_duration".into()
        }
    );
    assert_eq!((r.replies_heard, r.prompts_heard.goodbye), (0, 1));
}

#[test]
fn server_endings_are_told_from_the_bots_by_their_reason() {
    let term = |kind, reason: &str| Terminal {
        kind,
        reason: reason.into(),
        heard_from: Duration::ZERO,
        audio_seen: true,
        echoed: true,
        via_status: false,
    };
    let transfer = |reason: &str| terminal_outcome(&term(TerminalKind::Transfer, reason), false);
    let end = |reason: &str| terminal_outcome(&term(TerminalKind::End, reason), false);
    let watchdog = |r: &str| Outcome::WatchdogTransfer { reason: r.into() };
    let failover = |r: &str| Outcome::FailoverTransfer { reason: r.into() };
    let bot = |r: &str| Outcome::Transferred { reason: r.into() };
    let cut = |r: &str| Outcome::CutShort { reason: r.into() };
    // Marks, then the partner messages' form of the same reasons.
    assert_eq!(transfer("tts_stalled"), watchdog("tts_stalled"));
    assert_eq!(
        transfer("carrier_media_stalled"),
        watchdog("carrier_media_stalled")
    );
    assert_eq!(transfer("stalled:stt"), watchdog("stalled:stt"));
    assert_eq!(transfer("stt_failed"), failover("stt_failed"));
    assert_eq!(
        transfer("provider_failed:dialog"),
        failover("provider_failed:dialog")
    );
    // A bot's own reasons stay the bot's, even when they look similar.
    assert_eq!(
        transfer("caller_requested_human"),
        bot("caller_requested_human")
    );
    assert_eq!(transfer("payment_failed"), bot("payment_failed"));
    assert_eq!(transfer("stalled"), bot("stalled"));
    assert_eq!(end("max_duration"), cut("max_duration"));
    assert_eq!(end("drain_deadline"), cut("drain_deadline"));
    assert_eq!(
        end("booking_confirmed"),
        Outcome::EndedByBot {
            reason: "booking_confirmed".into()
        }
    );
}

#[test]
fn an_overflow_mark_after_audio_that_is_not_the_overflow_prompt_is_unheard() {
    // Hold audio, never cleared, then the overflow mark: the caller heard
    // hold music, not the refusal.
    let mut h = Harness::new(&[(0, 200)]);
    h.open(Duration::ZERO);
    let played = h.prompt(ms(50), Prompt::Hold, 25);
    h.mark(ms(50), "callgate-overflow:queue_timeout");
    h.run_until(ms(50) + played);
    h.caller.handle_closed(ms(100) + played, Some(1000), "");
    let r = h.record();
    assert!(
        matches!(
            r.outcome,
            Outcome::Rejected {
                prompt_heard: false,
                ..
            }
        ),
        "{r:#?}"
    );

    // Hold, cleared, then the overflow prompt played out: heard.
    let mut h = Harness::partner(&[(0, 200)], PartnerFormat::L16);
    h.open(Duration::ZERO);
    h.prompt(ms(50), Prompt::Hold, 25);
    h.clear(ms(900));
    let played = h.prompt(ms(900), Prompt::Overflow, 25);
    h.partner_mark(ms(900), "callgate-overflow:queue_timeout");
    h.run_until(ms(900) + played);
    h.caller.handle_closed(ms(950) + played, Some(1000), "");
    let r = h.record();
    assert!(
        matches!(
            r.outcome,
            Outcome::Rejected {
                prompt_heard: true,
                time_to_rejection_ms: 900,
                ..
            }
        ),
        "{r:#?}"
    );
    assert_eq!((r.prompts_heard.hold, r.prompts_heard.overflow), (1, 1));
}

#[test]
fn bot_audio_when_nothing_is_owed_is_unknown_audio() {
    let mut h = Harness::new(&[(3_000, 200)]);
    h.open(Duration::ZERO);
    h.speech(ms(20), 200);
    h.mark(ms(20), "turn-1");
    // The greeting ended at 220; the caller thinks for 3 s. Speech now is
    // no reply to anything.
    h.speech(ms(1_000), 200);
    h.prompt(ms(1_500), Prompt::Apology, 1);
    let r = h.record();
    assert_eq!(r.prompts_heard.unknown, 1);
    assert_eq!(r.prompts_heard.apology, 1);
    assert!(r.reply_latency_ms.is_empty() && r.apology_latency_ms.is_empty());
}
