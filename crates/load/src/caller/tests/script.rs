//! A Twilio call's script on a virtual clock: greeting, utterances and
//! replies, marks echoed when playout reaches them, the counters, and the
//! 20 ms media clock (lag, skipped frames, the call timeout).

use super::*;

#[test]
fn greeting_utterance_reply_completes_with_marks_echoed_at_playout_end() {
    let mut h = Harness::new(&[(200, 400)]);
    h.open(ms(10));
    h.audio(ms(100), 1_000);
    h.mark(ms(100), "turn-1");
    assert!(h.caller.is_admitted());
    h.run_until(ms(1_099));
    assert!(
        h.echo_times().is_empty(),
        "echoed before the greeting finished playing"
    );
    let speech_end = h.run_until_speech_ends(ms(5_000));
    assert_eq!(h.echo_times(), [("turn-1".to_string(), ms(1_100))]);
    // Think 200 ms after the echo, then 400 ms of speech in 20 frames.
    assert_eq!(speech_end, ms(1_310 + 380));
    h.audio(speech_end + ms(250), 500);
    h.mark(speech_end + ms(250), "turn-2");
    h.run_until(speech_end + ms(1_000));
    assert_eq!(
        h.echo_times()[1],
        ("turn-2".to_string(), speech_end + ms(750))
    );
    assert!(h.caller.is_done());
    assert!(h.ended_with_stop_and_close());
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(r.connect_ms, Some(10));
    assert_eq!(r.time_to_first_audio_ms, Some(90));
    assert_eq!(r.reply_latency_ms, [250]);
    assert_eq!(r.max_owed_silence_ms, 250);
    assert_eq!(
        (r.utterances_sent, r.replies_heard, r.marks_echoed),
        (1, 1, 2)
    );
    assert_eq!(r.bot_audio_ms, 1_500);
    assert_eq!(r.duration_ms, millis(speech_end + ms(750)));
}

#[test]
fn counters_and_timestamps_follow_twilio() {
    let mut h = Harness::new(&[(0, 100)]);
    h.open(Duration::ZERO);
    h.audio(ms(40), 100);
    h.mark(ms(40), "turn-1");
    let end = h.run_until_speech_ends(ms(2_000));
    h.audio(end + ms(20), 20);
    h.mark(end + ms(20), "turn-2");
    h.run_until(end + ms(100));
    let texts: Vec<&Value> = h.sent.iter().filter_map(|(_, v)| v.as_ref()).collect();
    assert_eq!(texts[0]["event"], "connected");
    assert_eq!(texts[1]["event"], "start");
    assert_eq!(texts[1]["start"]["customParameters"]["tenant"], "acme");
    let seqs: Vec<u64> = texts[1..]
        .iter()
        .map(|v| v["sequenceNumber"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    let media = h.events("media");
    for (i, (t, v)) in media.iter().enumerate() {
        assert_eq!(v["media"]["chunk"], (i + 1).to_string());
        assert_eq!(v["media"]["timestamp"], (i * 20).to_string());
        assert_eq!(
            *t,
            ms(20 * (i as u64 + 1)),
            "frame {i} sent off its 20 ms slot"
        );
        assert_eq!(v["media"]["payload"].as_str().unwrap().len(), 216);
    }
    assert!(h.caller.is_done());
}

#[test]
fn clear_echoes_every_pending_mark_at_once() {
    let mut h = Harness::new(&[(100, 200)]);
    h.open(Duration::ZERO);
    h.audio(ms(100), 2_000);
    h.mark(ms(100), "sentence-1");
    h.audio(ms(100), 1_000);
    h.mark(ms(100), "turn-1");
    h.clear(ms(600));
    assert_eq!(
        h.echo_times(),
        [
            ("sentence-1".to_string(), ms(600)),
            ("turn-1".to_string(), ms(600))
        ]
    );
    // The cleared turn counts as finished: the caller speaks after thinking.
    let end = h.run_until_speech_ends(ms(3_000));
    assert_eq!(end, ms(700 + 180));
    let r = h.record();
    assert_eq!(r.bot_audio_ms, 500);
    assert_eq!(r.utterances_sent, 1);
}

#[test]
fn unknown_and_misrouted_messages_are_counted_not_played() {
    let mut h = Harness::new(&[]);
    h.open(Duration::ZERO);
    h.server(ms(10), json!({"event":"dance"}));
    let other = StreamSid::from_bytes([8; 16]).to_string();
    h.server(
        ms(20),
        json!({"event":"media","streamSid":other,"media":{"payload":"VVVV"}}),
    );
    h.caller.handle_binary(ms(30), &[0x55; 160]);
    h.caller.handle_text(ms(40), "{not json");
    h.mark(ms(50), "turn-1"); // no audio yet: cannot end the greeting
    h.audio(ms(60), 100);
    h.mark(ms(60), "turn-1");
    h.run_until(ms(200));
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!((r.unknown_events, r.malformed_events), (1, 3));
    assert_eq!(r.marks_echoed, 2);
    assert_eq!(r.time_to_first_audio_ms, Some(60));
}

#[test]
fn endless_audio_without_a_mark_hits_the_call_timeout() {
    let mut h = Harness::new(&[(0, 200)]).with_timeout(Duration::from_secs(10));
    h.open(Duration::ZERO);
    h.audio(ms(10), 200_000);
    h.run_until(Duration::from_secs(11));
    assert!(h.ended_with_stop_and_close());
    let r = h.record();
    let Outcome::Failed { reason } = &r.outcome else {
        panic!("{r:?}")
    };
    assert!(reason.starts_with("call_timeout"), "{reason}");
    assert_eq!(r.duration_ms, 10_000);
}

#[test]
fn a_late_wake_up_skips_frames_and_reports_the_lag() {
    let mut h = Harness::new(&[]);
    h.open(Duration::ZERO);
    h.now = ms(1_000);
    h.caller.handle_timeout(ms(1_000));
    h.drain();
    let media = h.events("media");
    // Frames within MAX_FRAME_LAG of the wake-up are still sent.
    assert_eq!(media.len(), 10);
    assert_eq!(media[0].1["media"]["timestamp"], "800");
    let r = h.record();
    assert_eq!(r.media_frames_skipped, 40);
    assert_eq!(r.max_send_lag_ms, 980);
}

#[test]
fn twilio_reply_audio_is_measured_per_reply_too() {
    let mut h = Harness::new(&[(0, 200), (0, 200)]);
    h.open(Duration::ZERO);
    h.audio(ms(20), 300);
    h.mark(ms(20), "turn-1");
    let end = h.run_until_speech_ends(ms(2_000));
    h.audio(end + ms(100), 420);
    h.audio(end + ms(100), 200);
    h.mark(end + ms(100), "turn-2");
    let end = h.run_until_speech_ends(end + ms(3_000));
    h.audio(end + ms(100), 700);
    h.mark(end + ms(100), "turn-3");
    h.run_until(end + ms(1_000));
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(r.greeting_audio_ms, Some(300));
    assert_eq!(r.reply_audio_ms, [620, 700]);
    assert_eq!(r.close_code, None);
    assert_eq!(r.session_id, None);
}
