//! A `transfer` drain on the virtual clock: the hand-over waits for the
//! turn boundary, never cuts a reply, and a cancelled drain leaves the call.

use std::time::Duration;

use super::*;

const HANDOVER: &str = "callgate-transfer:drain";

fn events(cmds: &[Command]) -> Vec<String> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Record(Rec::Event { kind, .. }) => Some(kind.clone()),
            _ => None,
        })
        .collect()
}

/// The hand-over marker is played; the call ends transferred.
fn played_handover(s: &mut Sim) {
    s.step(Input::Leg(LegEvent::Played(HANDOVER.into())));
    assert_eq!(s.end().reason, EndReason::DrainTransfer);
    let how = crate::leg::Finish::for_end(s.end(), Some("human".into()));
    assert!(
        matches!(how, crate::leg::Finish::Transfer { .. }),
        "{how:?}"
    );
}

#[test]
fn an_idle_call_is_handed_over_at_once_with_the_prompt() {
    let mut s = after_greeting();
    let step = s.step(Input::DrainTransfer);
    assert_eq!(
        events(&step),
        ["drain_transfer_requested", "drain_transfer"]
    );
    assert!(matches!(s.core.phase(), Phase::Ending(_)));
    let out = s.pass(Duration::from_secs(3));
    // "Let me transfer you to our team." is about 1.7 s: played whole,
    // then the marker.
    assert!(
        plays(&out) > 60,
        "the hand-over prompt plays: {}",
        plays(&out)
    );
    assert_eq!(marks(&out), [HANDOVER]);
    played_handover(&mut s);
}

#[test]
fn a_reply_being_spoken_is_finished_before_the_hand_over() {
    let mut s = after_greeting();
    s.utterance("do you have a table tonight");
    s.step(dialog_text(1, "We do. "));
    s.tts_audio(2, Duration::from_millis(400));
    let step = s.step(Input::DrainTransfer);
    assert_eq!(
        events(&step),
        ["drain_transfer_requested"],
        "mid-reply: it waits"
    );
    assert!(matches!(s.core.phase(), Phase::Live(_)));
    // The reply goes on and completes; then the prompt queues behind it.
    s.step(dialog_text(1, "At eight?"));
    s.step(Input::Dialog(DialogEvent::TurnComplete { turn: TurnId(1) }));
    s.tts_audio(2, Duration::from_millis(400));
    let step = s.step(Input::Tts(TtsEvent::ContextFinal {
        context: ContextId(2),
    }));
    assert_eq!(events(&step), ["drain_transfer"]);
    let out = s.pass(Duration::from_secs(4));
    assert_eq!(marks(&out), ["turn-1", HANDOVER], "reply first, whole");
    let bot: Vec<_> = turns(&out)
        .into_iter()
        .filter(|t| t.0 == state_store::Speaker::Bot)
        .collect();
    assert_eq!(
        bot,
        [(state_store::Speaker::Bot, "We do. At eight?".into(), false)],
        "the reply was heard uninterrupted"
    );
    played_handover(&mut s);
}

#[test]
fn a_caller_awaiting_a_reply_hears_it_before_the_hand_over() {
    let mut s = after_greeting();
    s.utterance("is the terrace open");
    // A reply is owed (a tool may be running for it): no boundary yet.
    let step = s.step(Input::DrainTransfer);
    assert!(!events(&step).contains(&"drain_transfer".to_string()));
    s.pass(Duration::from_millis(500));
    assert!(matches!(s.core.phase(), Phase::Live(_)));
    s.reply(1, 2, "It is.", Duration::from_millis(300));
    let out = s.pass(Duration::from_secs(4));
    assert_eq!(marks(&out), ["turn-1", HANDOVER]);
    played_handover(&mut s);
}

#[test]
fn the_greeting_is_a_turn_too() {
    let mut s = Sim::new(config(LegFormat::Mulaw8k));
    s.step(Input::DrainTransfer);
    s.pass(Duration::from_millis(200));
    assert!(
        matches!(s.core.phase(), Phase::Live(_)),
        "the greeting is owed"
    );
    s.reply(0, 1, "Hello!", Duration::from_millis(300));
    let out = s.pass(Duration::from_secs(4));
    assert_eq!(marks(&out), ["turn-0", HANDOVER]);
}

#[test]
fn a_cancelled_drain_leaves_a_waiting_call_live() {
    let mut s = after_greeting();
    s.utterance("and for lunch");
    s.step(Input::DrainTransfer);
    let step = s.step(Input::DrainCancelled);
    assert_eq!(events(&step), ["drain_transfer_cancelled"]);
    s.reply(1, 2, "Lunch too.", Duration::from_millis(300));
    let out = s.pass(Duration::from_secs(2));
    assert_eq!(marks(&out), ["turn-1"], "no hand-over after the cancel");
    assert!(matches!(s.core.phase(), Phase::Live(_)));
}

#[test]
fn the_bots_own_exit_wins_and_the_deadline_still_bounds() {
    // The bot ends the call after its reply: that exit stands.
    let mut s = after_greeting();
    s.utterance("that's all");
    s.step(dialog_text(1, "Goodbye!"));
    s.step(Input::Dialog(DialogEvent::EndCall {
        reason: "done".into(),
    }));
    s.step(Input::DrainTransfer);
    s.step(Input::Dialog(DialogEvent::TurnComplete { turn: TurnId(1) }));
    s.tts_audio(2, Duration::from_millis(300));
    s.step(Input::Tts(TtsEvent::ContextFinal {
        context: ContextId(2),
    }));
    let out = s.pass(Duration::from_secs(3));
    assert_eq!(marks(&out), ["turn-1", "callgate-end:done"]);
    assert_eq!(s.end().reason, EndReason::BotEnded);

    // A reply that never comes: the deadline's goodbye ends the call.
    let mut s = after_greeting();
    s.utterance("hello?");
    s.step(Input::DrainTransfer);
    s.step(Input::DrainDeadline);
    let out = s.pass(Duration::from_secs(5));
    assert_eq!(marks(&out), ["callgate-end:drain_deadline"]);
    assert_eq!(s.end().reason, EndReason::DrainDeadline);
}

#[test]
fn a_call_whose_record_was_taken_says_goodbye_and_ends_owner_fenced() {
    let mut s = after_greeting();
    s.step(Input::OwnershipLost);
    let out = s.pass(Duration::from_secs(5));
    assert!(plays(&out) > 60, "the goodbye plays");
    assert_eq!(marks(&out), ["callgate-end:owner_fenced"]);
    assert_eq!(s.end().reason, EndReason::OwnerFenced);
    // A drain deadline after it is a late cause, counted and dropped.
    s.step(Input::DrainDeadline);
    assert_eq!(s.end().reason, EndReason::OwnerFenced);
    assert_eq!(s.core.late_ends(), 1);
}

/// The drain deadline's goodbye went out once, the call ended with
/// `drain_deadline`, and `told` is the one final-prompt event recorded.
fn ended_after_the_goodbye(s: &Sim, out: &[Command], told: &str) {
    assert_eq!(marks(out), ["callgate-end:drain_deadline"]);
    let events: Vec<_> = events(out)
        .into_iter()
        .filter(|k| k.starts_with("final_prompt"))
        .collect();
    assert_eq!(events, [told]);
    assert_eq!(s.end().reason, EndReason::DrainDeadline);
}

#[test]
fn whether_the_final_prompt_was_heard_to_its_end_is_recorded() {
    // Reported played: the simulated leg echoes the marker after the goodbye.
    let mut s = after_greeting();
    s.step(Input::DrainDeadline);
    let out = s.pass(Duration::from_secs(10));
    ended_after_the_goodbye(&s, &out, "final_prompt_played");

    // Never reported (a leg that never echoes): the call still ends, after
    // the grace, and says so.
    let mut s = after_greeting();
    s.step(Input::DrainDeadline);
    let mut out = Vec::new();
    while s.core.ended().is_none() {
        s.now += FRAME;
        out.extend(s.step(Input::Tick));
        assert!(out.len() < 100_000, "the call never ended");
    }
    ended_after_the_goodbye(&s, &out, "final_prompt_unconfirmed");
}
