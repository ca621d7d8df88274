//! Owed silence: dead air while a greeting, a reply or a turn's closing
//! mark is owed, measured to its true length and blamed on its phase.

use super::*;

#[test]
fn an_underrun_inside_a_bot_turn_is_owed_silence() {
    let mut h = Harness::new(&[]);
    h.open(Duration::ZERO);
    h.audio(ms(100), 200); // plays until 300
    h.audio(ms(1_300), 200); // 1 s of dead air mid-greeting
    h.mark(ms(1_400), "turn-1");
    h.run_until(ms(2_000));
    assert_eq!(h.echo_times(), [("turn-1".to_string(), ms(1_500))]);
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(r.max_owed_silence_ms, 1_000);
}

#[test]
fn a_late_turn_mark_after_the_audio_is_owed_silence_too() {
    let mut h = Harness::new(&[]);
    h.open(Duration::ZERO);
    h.audio(ms(50), 100); // ends at 150
    h.mark(ms(2_150), "turn-1");
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(r.max_owed_silence_ms, 2_000);
}

#[test]
fn a_missing_reply_is_silent_after_threshold_plus_grace() {
    let mut h = Harness::new(&[(0, 200), (0, 200)]);
    h.open(Duration::ZERO);
    h.audio(ms(20), 100);
    h.mark(ms(20), "turn-1");
    let end = h.run_until_speech_ends(ms(2_000));
    h.run_until(end + ms(3_999));
    assert!(!h.caller.is_done());
    h.run_until(end + ms(4_000));
    assert!(h.caller.is_done());
    assert!(h.ended_with_stop_and_close());
    let r = h.record();
    assert_eq!(
        r.outcome,
        Outcome::Silent {
            phase: "reply_1".into()
        }
    );
    assert_eq!(r.max_owed_silence_ms, 4_000);
    assert_eq!((r.utterances_sent, r.replies_heard), (1, 0));
}

#[test]
fn a_reply_later_than_the_threshold_is_silent_with_its_true_length() {
    let mut h = Harness::new(&[(0, 200)]);
    h.open(Duration::ZERO);
    h.audio(ms(20), 100);
    h.mark(ms(20), "turn-1");
    let end = h.run_until_speech_ends(ms(2_000));
    h.audio(end + ms(3_500), 300);
    assert!(h.caller.is_done());
    let r = h.record();
    assert_eq!(
        r.outcome,
        Outcome::Silent {
            phase: "reply_1".into()
        }
    );
    assert_eq!(r.reply_latency_ms, [3_500]);
    assert_eq!(r.max_owed_silence_ms, 3_500);
}

#[test]
fn no_greeting_at_all_is_silent_in_the_greeting_phase() {
    let mut h = Harness::new(&[(0, 200)]);
    h.open(ms(30));
    h.run_until(ms(10_000));
    let r = h.record();
    assert_eq!(
        r.outcome,
        Outcome::Silent {
            phase: "greeting".into()
        }
    );
    assert_eq!(r.duration_ms, 4_030);
    assert_eq!(r.time_to_first_audio_ms, None);
}
