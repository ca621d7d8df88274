//! Barge-in and cough scenarios on a virtual clock: a scripted server
//! paces bot audio one 20 ms frame every 20 ms (off the caller's own frame
//! grid by 10 ms, so no arrival ties with a frame the caller sends), clears,
//! resumes; the caller measures onset → clear, audio after the onset and
//! after the clear, and whether a coughed-into turn resumed.

use super::*;
use crate::record::{BargeInRecord, CoughRecord};

impl Harness {
    fn barging_in_at(mut self, at_ms: u64) -> Harness {
        self.caller.plan.barge_in_at = Some(ms(at_ms));
        self.caller.interaction = Interaction::new(Some(ms(at_ms)), None);
        self
    }

    fn coughing(mut self, turn: usize, at_ms: u64, len_ms: u32) -> Harness {
        let plan = CoughPlan {
            turn,
            at: ms(at_ms),
            len_ms,
        };
        self.caller.plan.cough = Some(plan);
        self.caller.interaction = Interaction::new(None, Some(plan));
        self
    }

    /// One 20 ms frame of bot audio in the call's protocol.
    fn frame(&mut self, t: Duration) {
        match self.caller.plan.protocol {
            CallProtocol::Twilio => self.audio(t, 20),
            CallProtocol::Partner(_) | CallProtocol::Webrtc { .. } => self.binary_audio(t, 20),
        }
    }

    /// `play_ms` of bot audio in one message, in the call's protocol.
    fn bot_audio(&mut self, t: Duration, play_ms: usize) {
        match self.caller.plan.protocol {
            CallProtocol::Twilio => self.audio(t, play_ms),
            CallProtocol::Partner(_) | CallProtocol::Webrtc { .. } => self.binary_audio(t, play_ms),
        }
    }

    /// Paced bot audio: one frame at `from`, `from + 20`, … while `< until`.
    fn paced(&mut self, from: u64, until: u64) {
        for t in (from..until).step_by(20) {
            self.frame(ms(t));
        }
    }

    fn turn_mark(&mut self, t: Duration, name: &str) {
        match self.caller.plan.protocol {
            CallProtocol::Twilio => self.mark(t, name),
            CallProtocol::Partner(_) => self.partner_mark(t, name),
            CallProtocol::Webrtc { .. } => panic!("WebRTC carries no marks"),
        }
    }

    fn server_clear(&mut self, t: Duration) {
        match self.caller.plan.protocol {
            CallProtocol::Twilio => self.clear(t),
            CallProtocol::Partner(_) => self.server(t, json!({"event":"clear"})),
            CallProtocol::Webrtc { .. } => panic!("WebRTC carries no clear"),
        }
    }

    /// When each frame the caller sent carried sound (not silence).
    fn voiced_times(&self) -> Vec<Duration> {
        let silence = transport::silence_byte(self.caller.audio);
        let twilio = self.events("media").into_iter().filter_map(|(t, v)| {
            let payload = B64.decode(v["media"]["payload"].as_str().unwrap()).unwrap();
            payload.iter().any(|&b| b != silence).then_some(t)
        });
        let partner = self
            .binary
            .iter()
            .filter(|(_, b)| b.iter().any(|&x| x != silence))
            .map(|(t, _)| *t);
        twilio.chain(partner).collect()
    }
}

#[test]
fn a_barge_in_speaks_over_the_greeting_and_measures_the_clear_from_the_onset() {
    for protocol in [
        CallProtocol::Twilio,
        CallProtocol::Partner(PartnerFormat::L16),
    ] {
        let mut h = Harness::with_protocol(&[(0, 400)], protocol).barging_in_at(800);
        h.open(Duration::ZERO);
        // The greeting's first frame at 110: the caller speaks from the
        // first frame due at or after 910, i.e. 920 (its 20 ms grid).
        h.paced(110, 920);
        assert!(h.voiced_times().is_empty(), "{protocol:?}: spoke too early");
        // Two more frames over the caller, then the server stops: clear.
        h.paced(930, 970);
        h.server_clear(ms(975));
        let end = h.run_until_speech_ends(ms(3_000));
        let voiced = h.voiced_times();
        assert_eq!(voiced.first(), Some(&ms(920)), "{protocol:?}");
        assert_eq!(end, ms(920 + 380), "{protocol:?}: the whole utterance");
        h.paced(end.as_millis() as u64 + 310, end.as_millis() as u64 + 810);
        h.turn_mark(end + ms(810), "turn-1");
        h.run_until(end + ms(1_500));
        let r = h.record();
        assert_eq!(r.outcome, Outcome::Completed, "{protocol:?}: {r:#?}");
        assert_eq!(
            r.barge_in,
            Some(BargeInRecord {
                into_turn_ms: 810,
                onset_ms: 920,
                onset_to_clear_ms: Some(55),
                bot_audio_after_onset_ms: 40,
                audio_after_clear_ms: Some(0),
            }),
            "{protocol:?}"
        );
        assert_eq!(r.reply_latency_ms, [310], "{protocol:?}");
        assert_eq!(r.greeting_audio_ms, None, "the greeting never closed");
        assert_eq!(r.prompts_heard.unknown, 0, "{protocol:?}");
        assert_eq!(r.cough, None);
        assert_eq!(r.max_owed_silence_ms, 310, "{protocol:?}");
    }
}

#[test]
fn without_a_clear_every_frame_sent_over_the_caller_counts_and_nothing_is_answered() {
    let mut h = Harness::new(&[(0, 200)]).barging_in_at(300);
    h.open(Duration::ZERO);
    // A server that does not react: the greeting goes on (1 s).
    h.paced(10, 1_010);
    h.mark(ms(1_010), "turn-1");
    h.run_until(ms(2_000));
    let r = h.record();
    let b = r.barge_in.expect("the caller spoke over the greeting");
    // Onset 320 (first frame at or after 310); utterance 320..=500; the
    // frames at 330, 350, …, 490 arrived over it.
    assert_eq!((b.into_turn_ms, b.onset_ms), (310, 320));
    assert_eq!(b.onset_to_clear_ms, None);
    assert_eq!(b.audio_after_clear_ms, None);
    assert_eq!(b.bot_audio_after_onset_ms, 9 * 20);
}

#[test]
fn audio_of_the_interrupted_turn_after_the_clear_is_counted() {
    let mut h = Harness::new(&[(0, 600)]).barging_in_at(200);
    h.open(Duration::ZERO);
    h.paced(10, 250);
    // Onset 220; one frame at 230 over the caller, clear at 245, then the
    // server keeps sending three frames of the stopped greeting.
    h.server_clear(ms(245));
    h.paced(250, 310);
    h.paced(1_000, 1_100); // after the utterance (220..=800): not counted
    let r = h.record();
    let b = r.barge_in.unwrap();
    assert_eq!(b.onset_to_clear_ms, Some(25));
    assert_eq!(b.bot_audio_after_onset_ms, 20);
    assert_eq!(b.audio_after_clear_ms, Some(60));
}

#[test]
fn a_greeting_that_ends_before_the_barge_in_moment_is_not_barged_into() {
    let mut h = Harness::new(&[(100, 200)]).barging_in_at(800);
    h.open(Duration::ZERO);
    h.paced(10, 210);
    h.mark(ms(210), "turn-1");
    let end = h.run_until_speech_ends(ms(3_000));
    // Spoken after the greeting's mark and the think pause, as usual.
    assert_eq!(h.voiced_times().first(), Some(&ms(320)));
    h.audio(end + ms(200), 300);
    h.mark(end + ms(200), "turn-2");
    h.run_until(end + ms(1_000));
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(r.barge_in, None, "the scenario did not run");
    assert_eq!(r.greeting_audio_ms, Some(200));
}

/// Greeting, first utterance; returns when it ended (on the caller's grid).
fn greeted(h: &mut Harness) -> u64 {
    h.open(Duration::ZERO);
    h.bot_audio(ms(20), 300);
    h.turn_mark(ms(20), "turn-1");
    h.run_until_speech_ends(ms(3_000)).as_millis() as u64
}

#[test]
fn a_cough_into_a_reply_that_resumes_records_the_pause_and_the_resumption() {
    for protocol in [
        CallProtocol::Twilio,
        CallProtocol::Partner(PartnerFormat::Pcmu),
    ] {
        let mut h = Harness::with_protocol(&[(0, 200), (0, 200)], protocol).coughing(1, 700, 150);
        let r0 = greeted(&mut h) + 210;
        // The reply's first frame at r0: the cough from the first frame due
        // at or after r0 + 700, i.e. r0 + 710 (150 ms = 8 frames).
        h.paced(r0, r0 + 770);
        // The reply's last frame went out; its mark follows it.
        h.turn_mark(ms(r0 + 770), "turn-2");
        // Cleared 5 ms before that mark would have played (r0 + 780).
        h.server_clear(ms(r0 + 775));
        let voiced: Vec<Duration> = h.voiced_times();
        let burst: Vec<&Duration> = voiced.iter().filter(|t| **t > ms(r0)).collect();
        assert_eq!(burst.first(), Some(&&ms(r0 + 710)), "{protocol:?}");
        // The mark the clear released (Twilio echoes it) does not end the
        // turn: the caller keeps listening, in silence.
        h.run_until(ms(r0 + 1_375));
        let voiced: Vec<Duration> = h.voiced_times();
        let after: Vec<&Duration> = voiced.iter().filter(|t| **t > ms(r0)).collect();
        assert_eq!(after.len(), 8, "{protocol:?}: only the cough: {after:?}");
        assert_eq!(**after.last().unwrap(), ms(r0 + 850));
        // The bot resumes 600 ms after the clear and plays to its mark.
        h.paced(r0 + 1_375, r0 + 1_675);
        h.turn_mark(ms(r0 + 1_675), "turn-2");
        let end = h.run_until_speech_ends(ms(r0 + 5_000));
        assert!(end > ms(r0 + 1_675), "{protocol:?}: spoke before the mark");
        h.bot_audio(end + ms(200), 300);
        h.turn_mark(end + ms(200), "turn-3");
        h.run_until(end + ms(1_000));
        let r = h.record();
        assert_eq!(r.outcome, Outcome::Completed, "{protocol:?}: {r:#?}");
        assert_eq!(
            r.cough,
            Some(CoughRecord {
                turn: 1,
                cough_ms: 150,
                into_turn_ms: 710,
                onset_ms: r0 + 710,
                onset_to_clear_ms: Some(65),
                bot_audio_after_onset_ms: 60,
                gap_ms: Some(600),
                resumed: true,
            }),
            "{protocol:?}"
        );
        assert_eq!(r.replies_heard, 2, "{protocol:?}");
        assert_eq!(r.max_owed_silence_ms, 600, "{protocol:?}: the pause");
        assert_eq!(r.barge_in, None);
    }
}

#[test]
fn a_cough_taken_for_an_interruption_leaves_the_caller_in_silence() {
    let mut h = Harness::new(&[(0, 200), (0, 200)]).coughing(1, 300, 150);
    let r0 = greeted(&mut h) + 210;
    h.paced(r0, r0 + 400);
    h.server_clear(ms(r0 + 400));
    // The server never resumes and waits for words that never come.
    h.run_until(ms(r0 + 10_000));
    let r = h.record();
    assert_eq!(
        r.outcome,
        Outcome::Silent {
            phase: "reply_1_playout".into()
        }
    );
    let c = r.cough.unwrap();
    assert_eq!(c.onset_to_clear_ms, Some(400 - 310));
    assert_eq!((c.gap_ms, c.resumed), (None, false));
}

#[test]
fn a_reply_that_never_pauses_for_the_cough_is_not_resumed() {
    let mut h = Harness::new(&[(0, 200), (0, 200)]).coughing(1, 100, 150);
    let r0 = greeted(&mut h) + 210;
    h.paced(r0, r0 + 500);
    h.turn_mark(ms(r0 + 500), "turn-2");
    let end = h.run_until_speech_ends(ms(r0 + 3_000));
    h.audio(end + ms(100), 200);
    h.turn_mark(end + ms(100), "turn-3");
    h.run_until(end + ms(600));
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Completed);
    let c = r.cough.unwrap();
    assert_eq!(
        (c.onset_to_clear_ms, c.gap_ms, c.resumed),
        (None, None, false)
    );
    // Frames at r0 + 120 … r0 + 480 arrived after the onset at r0 + 110.
    assert_eq!(c.bot_audio_after_onset_ms, 19 * 20);
}

#[test]
fn a_turn_shorter_than_the_cough_moment_is_not_coughed_into() {
    let mut h = Harness::new(&[(0, 200), (0, 200)]).coughing(1, 900, 150);
    let r0 = greeted(&mut h) + 210;
    h.paced(r0, r0 + 300);
    h.turn_mark(ms(r0 + 300), "turn-2");
    let end = h.run_until_speech_ends(ms(r0 + 3_000));
    h.audio(end + ms(100), 200);
    h.turn_mark(end + ms(100), "turn-3");
    h.run_until(end + ms(600));
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(r.cough, None);
}

#[test]
fn summaries_pool_the_scenarios_and_the_table_names_them() {
    let mut h = Harness::new(&[(0, 200)]).barging_in_at(100);
    h.open(Duration::ZERO);
    h.paced(10, 150);
    h.server_clear(ms(150));
    let end = h.run_until_speech_ends(ms(2_000));
    h.audio(end + ms(100), 200);
    h.mark(end + ms(100), "turn-1");
    h.run_until(end + ms(500));
    let report = crate::report::LoadReport::new(vec![h.record()], Duration::from_secs(1));
    let b = report.summary.barge_in.clone().unwrap();
    assert_eq!((b.spoken, b.cleared), (1, 1));
    assert_eq!(b.onset_to_clear_ms.p99, Some(30));
    assert_eq!(b.audio_after_clear_ms.max, Some(0));
    assert_eq!(report.summary.cough, None);
    let mut table = Vec::new();
    report.print_table(&mut table).unwrap();
    let table = String::from_utf8(table).unwrap();
    assert!(
        table.contains("barge-in: 1 spoke over the greeting, 1 cleared"),
        "{table}"
    );
    assert!(table.contains("barge→clear"), "{table}");
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["calls"][0]["barge_in"]["onset_to_clear_ms"], 30);
    assert!(json["calls"][0].get("cough").is_none(), "absent, not null");
}
