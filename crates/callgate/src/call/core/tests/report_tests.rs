//! What the core counts and measures comes out as reports, for the shell
//! to record as metrics (the core records none itself).

use super::*;
use crate::call::watchdog::{Action, Clock};

fn count(s: &Sim, pred: impl Fn(&Report) -> bool) -> usize {
    s.reports.iter().filter(|r| pred(r)).count()
}

#[test]
fn a_turn_and_its_barge_in_are_reported() {
    let mut s = after_greeting();
    assert_eq!(count(&s, |r| matches!(r, Report::FirstAudio(_))), 1);
    assert!(
        count(&s, |r| *r == Report::MediaIn) >= 30,
        "a frame each 20 ms"
    );
    s.utterance("a table for two");
    s.reply(1, 2, "Sure, for which day?", Duration::from_secs(3));
    s.pass(Duration::from_millis(500));
    assert_eq!(count(&s, |r| matches!(r, Report::ReplyLatency(_))), 1);
    assert_eq!(count(&s, |r| matches!(r, Report::TurnOwn { .. })), 1);
    s.step(stt("wait", false));
    assert_eq!(count(&s, |r| *r == Report::BargeIn), 1);
    s.tts_audio(2, Duration::from_millis(100));
    assert_eq!(count(&s, |r| *r == Report::Stale(Stale::TtsAudio)), 1);
    s.utterance("on friday");
    s.step(dialog_text(1, "late words of the cut turn"));
    assert_eq!(count(&s, |r| *r == Report::Stale(Stale::Dialog)), 1);
    assert_eq!(count(&s, |r| matches!(r, Report::FirstAudio(_))), 1, "once");
}

#[test]
fn a_stall_is_reported_with_its_culprit_and_action() {
    let mut s = Sim::new(config(LegFormat::Mulaw8k));
    s.pass(Duration::from_secs(12));
    let stalls: Vec<_> = s
        .reports
        .iter()
        .filter(|r| matches!(r, Report::Stall { .. }))
        .collect();
    let culprit = Culprit::Dialog;
    assert_eq!(
        stalls,
        [
            &Report::Stall {
                culprit,
                action: Action::Apologize(Clock::Reply)
            },
            &Report::Stall {
                culprit,
                action: Action::Transfer(Clock::Reply)
            },
        ]
    );
}

#[test]
fn a_stall_while_the_instance_lags_is_the_instance_not_the_provider_awaited() {
    let mut s = Sim::new(config(LegFormat::Mulaw8k));
    s.core.note_instance_lag(true);
    s.pass(Duration::from_secs(12));
    let culprits: Vec<_> = s
        .reports
        .iter()
        .filter_map(|r| match r {
            Report::Stall { culprit, .. } => Some(*culprit),
            _ => None,
        })
        .collect();
    assert_eq!(culprits, [Culprit::Instance, Culprit::Instance]);
    assert_eq!(s.end().reason, EndReason::Stalled(Culprit::Instance));
    assert_eq!(s.end().reason.ledger(None), "stalled:instance");

    // The lag gone, the same stall is the dialog's again.
    let mut s = Sim::new(config(LegFormat::Mulaw8k));
    s.core.note_instance_lag(true);
    s.core.note_instance_lag(false);
    s.pass(Duration::from_secs(12));
    assert_eq!(s.end().reason, EndReason::Stalled(Culprit::Dialog));
}
