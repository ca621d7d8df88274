//! The caller on a virtual clock: no sockets, no sleeping.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};

use super::*;
use crate::ids::{AccountSid, CallSid, StreamSid};
use crate::partner_wire::PartnerFormat;

mod heard;
mod interaction;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn ids() -> CallIds {
    CallIds {
        account: AccountSid::from_bytes([1; 16]),
        call: CallSid::from_bytes([2; 16]),
        stream: StreamSid::from_bytes([3; 16]),
    }
}

/// A caller plus a virtual clock and everything it sent, with send times.
/// A binary frame is logged as `{"event":"binary","len":n,"speech":bool}`
/// (its bytes are kept in `binary`); a close as `None`.
struct Harness {
    caller: Caller,
    now: Duration,
    sent: Vec<(Duration, Option<Value>)>,
    binary: Vec<(Duration, Vec<u8>)>,
}

impl Harness {
    fn new(turns: &[(u64, u32)]) -> Harness {
        Harness::with_protocol(turns, CallProtocol::Twilio)
    }

    fn partner(turns: &[(u64, u32)], format: PartnerFormat) -> Harness {
        Harness::with_protocol(turns, CallProtocol::Partner(format))
    }

    fn with_protocol(turns: &[(u64, u32)], protocol: CallProtocol) -> Harness {
        let plan = CallPlan {
            index: 0,
            ids: ids(),
            custom_parameters: vec![("tenant".into(), "acme".into())],
            turns: turns
                .iter()
                .map(|&(think, speech_ms)| TurnPlan {
                    think: ms(think),
                    speech_ms,
                })
                .collect(),
            silence_threshold: Duration::from_secs(3),
            call_timeout: Duration::from_secs(120),
            voice_seed: 7,
            protocol,
            barge_in_at: None,
            cough: None,
        };
        Harness {
            caller: Caller::new(plan),
            now: Duration::ZERO,
            sent: Vec::new(),
            binary: Vec::new(),
        }
    }

    fn with_timeout(mut self, timeout: Duration) -> Harness {
        self.caller.plan.call_timeout = timeout;
        self
    }

    fn drain(&mut self) {
        while let Some(tx) = self.caller.poll_transmit() {
            let v = match tx {
                Transmit::Text(t) => Some(serde_json::from_str(&t).unwrap()),
                Transmit::Binary(bytes) => {
                    let silence = transport::silence_byte(self.caller.audio);
                    let speech = bytes.iter().any(|&b| b != silence);
                    let v = json!({"event":"binary","len":bytes.len(),"speech":speech});
                    self.binary.push((self.now, bytes));
                    Some(v)
                }
                Transmit::Close => None,
            };
            self.sent.push((self.now, v));
        }
    }

    fn open(&mut self, at: Duration) {
        self.now = at;
        self.caller.handle_open(at);
        self.drain();
    }

    /// Fires every timer up to `t`, one wake-up at a time, like the driver.
    fn run_until(&mut self, t: Duration) {
        while let Some(next) = self.caller.poll_timeout() {
            if next > t {
                break;
            }
            self.now = next;
            self.caller.handle_timeout(next);
            self.drain();
        }
        self.now = t;
        self.caller.handle_timeout(t);
        self.drain();
    }

    fn server(&mut self, t: Duration, msg: Value) {
        self.run_until(t);
        self.caller.handle_text(t, &msg.to_string());
        self.drain();
    }

    fn audio(&mut self, t: Duration, play_ms: usize) {
        let payload = B64.encode(vec![0x55u8; play_ms * 8]);
        let sid = ids().stream.to_string();
        self.server(
            t,
            json!({"event":"media","streamSid":sid,"media":{"payload":payload}}),
        );
    }

    fn mark(&mut self, t: Duration, name: &str) {
        let sid = ids().stream.to_string();
        self.server(
            t,
            json!({"event":"mark","streamSid":sid,"mark":{"name":name}}),
        );
    }

    fn clear(&mut self, t: Duration) {
        let sid = ids().stream.to_string();
        self.server(t, json!({"event":"clear","streamSid":sid}));
    }

    /// Partner audio: one binary message of `play_ms` in the call's format.
    fn binary_audio(&mut self, t: Duration, play_ms: usize) {
        self.run_until(t);
        let audio = self.caller.audio;
        let bytes = audio.frame_bytes() / 20 * play_ms;
        self.caller.handle_binary(t, &vec![0x55; bytes]);
        self.drain();
    }

    /// Bot audio as the server sends it, all at `t`: `audio` in messages of
    /// `frames` 20 ms frames, the last one padded with silence. Returns its
    /// playing time.
    fn send_audio(&mut self, t: Duration, audio: &[u8], frames: usize) -> Duration {
        self.run_until(t);
        let format = self.caller.audio;
        let len = format.frame_bytes() * frames;
        let mut sent = 0;
        for chunk in audio.chunks(len) {
            let mut msg = chunk.to_vec();
            msg.resize(len, transport::silence_byte(format));
            sent += msg.len();
            match self.caller.plan.protocol {
                CallProtocol::Twilio => {
                    let sid = ids().stream.to_string();
                    let payload = B64.encode(&msg);
                    let v = json!({"event":"media","streamSid":sid,"media":{"payload":payload}});
                    self.caller.handle_text(t, &v.to_string());
                }
                CallProtocol::Partner(_) => self.caller.handle_binary(t, &msg),
            }
            self.drain();
        }
        transport::playing_time(format, sent)
    }

    /// One of the server's bundled prompts, in `frames`-frame messages.
    fn prompt(&mut self, t: Duration, prompt: Prompt, frames: usize) -> Duration {
        let audio = crate::prompts::audio(prompt, self.caller.audio).unwrap();
        self.send_audio(t, &audio, frames)
    }

    /// Speech-like bot audio (a TTS reply), in 20 ms messages.
    fn speech(&mut self, t: Duration, play_ms: u32) -> Duration {
        let format = self.caller.audio;
        let samples = SpeechSynth::new(format.sample_rate, 99).utterance(play_ms);
        self.send_audio(t, &transport::encode(format, &samples), 1)
    }

    fn partner_mark(&mut self, t: Duration, name: &str) {
        self.server(t, json!({"event":"mark","name":name}));
    }

    /// Runs until the caller's utterance has been sent; returns the time of
    /// its last speech frame.
    fn run_until_speech_ends(&mut self, limit: Duration) -> Duration {
        let mut last_speech = None;
        while self.now < limit {
            let from = self.sent.len();
            let next = self.caller.poll_timeout().unwrap();
            self.run_until(next);
            for (t, v) in &self.sent[from..] {
                let Some(v) = v else { continue };
                let speech = match v["event"].as_str() {
                    Some("media") => {
                        let payload = B64.decode(v["media"]["payload"].as_str().unwrap()).unwrap();
                        payload.iter().any(|&b| b != 0xFF)
                    }
                    Some("binary") => v["speech"].as_bool().unwrap(),
                    _ => continue,
                };
                if speech {
                    last_speech = Some(*t);
                } else if let Some(end) = last_speech {
                    return end;
                }
            }
        }
        panic!("no utterance before {limit:?}");
    }

    fn events(&self, name: &str) -> Vec<(Duration, Value)> {
        self.sent
            .iter()
            .filter_map(|(t, v)| {
                v.as_ref()
                    .filter(|v| v["event"] == name)
                    .map(|v| (*t, v.clone()))
            })
            .collect()
    }

    fn echo_times(&self) -> Vec<(String, Duration)> {
        self.events("mark")
            .into_iter()
            .map(|(t, v)| (v["mark"]["name"].as_str().unwrap().to_string(), t))
            .collect()
    }

    fn ended_with_stop_and_close(&self) -> bool {
        let n = self.sent.len();
        n >= 2
            && self.sent[n - 1].1.is_none()
            && self.sent[n - 2].1.as_ref().unwrap()["event"] == "stop"
    }

    fn record(self) -> CallRecord {
        let now = self.now;
        self.caller.into_record(now)
    }
}

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

// ---- the partner protocol: same caller, other framing -------------------

fn played_times(h: &Harness) -> Vec<(String, Duration)> {
    h.events("played")
        .into_iter()
        .map(|(t, v)| (v["name"].as_str().unwrap().to_string(), t))
        .collect()
}

#[test]
fn partner_calls_open_with_start_and_send_binary_frames_every_20_ms() {
    let mut h = Harness::partner(&[(0, 100)], PartnerFormat::L16);
    h.open(Duration::ZERO);
    let texts: Vec<&Value> = h.sent.iter().filter_map(|(_, v)| v.as_ref()).collect();
    assert_eq!(
        *texts[0],
        json!({"event":"start","call_id":ids().call.to_string(),
               "content-type":"audio/l16;rate=16000","metadata":{"tenant":"acme"}})
    );
    assert_eq!(texts.len(), 1, "no `connected` in the partner protocol");
    h.run_until(ms(200));
    let frames = h.events("binary");
    assert_eq!(frames.len(), 10);
    for (i, (t, v)) in frames.iter().enumerate() {
        assert_eq!(*t, ms(20 * (i as u64 + 1)));
        assert_eq!(v["len"], 640);
        assert_eq!(v["speech"], false, "silence before the greeting");
    }
    assert!(h.binary.iter().all(|(_, b)| b.iter().all(|&x| x == 0)));
    let pcmu = {
        let mut h = Harness::partner(&[], PartnerFormat::Pcmu);
        h.open(Duration::ZERO);
        h.run_until(ms(40));
        h.binary.clone()
    };
    assert_eq!(pcmu.len(), 2);
    assert!(
        pcmu.iter()
            .all(|(_, b)| b.len() == 160 && b.iter().all(|&x| x == 0xFF))
    );
}

#[test]
fn partner_speech_is_16_khz_linear_pcm_on_the_same_schedule_as_twilio() {
    let mut twilio = Harness::new(&[(200, 400)]);
    let mut partner = Harness::partner(&[(200, 400)], PartnerFormat::L16);
    twilio.open(ms(10));
    partner.open(ms(10));
    twilio.audio(ms(100), 1_000);
    twilio.mark(ms(100), "turn-1");
    partner.binary_audio(ms(100), 1_000);
    partner.partner_mark(ms(100), "turn-1");
    let t_end = twilio.run_until_speech_ends(ms(5_000));
    let p_end = partner.run_until_speech_ends(ms(5_000));
    assert_eq!((t_end, p_end), (ms(1_310 + 380), ms(1_310 + 380)));
    let speech: Vec<i16> = partner
        .binary
        .iter()
        .filter(|(t, _)| *t > ms(1_300) && *t <= p_end)
        .flat_map(|(_, b)| media::format::pcm16le_to_samples(b))
        .collect();
    // 400 ms at 16 kHz, and loud enough to be speech.
    assert_eq!(speech.len(), 6_400);
    assert!(media::vad::level_dbfs(&speech) > -30.0);
}

#[test]
fn partner_marks_are_played_only_when_playout_reaches_them() {
    let mut h = Harness::partner(&[(200, 400)], PartnerFormat::L16);
    h.open(ms(10));
    h.server(ms(20), json!({"event":"started","session_id":"s-1"}));
    h.binary_audio(ms(100), 600);
    h.binary_audio(ms(100), 400);
    h.partner_mark(ms(100), "turn-1");
    assert!(h.caller.is_admitted());
    h.run_until(ms(1_099));
    assert!(played_times(&h).is_empty(), "echoed before playout ended");
    let end = h.run_until_speech_ends(ms(5_000));
    assert_eq!(played_times(&h), [("turn-1".to_string(), ms(1_100))]);
    assert!(h.events("mark").is_empty(), "partner echoes are `played`");
    h.binary_audio(end + ms(250), 500);
    h.partner_mark(end + ms(250), "turn-2");
    h.run_until(end + ms(1_000));
    assert_eq!(played_times(&h)[1], ("turn-2".to_string(), end + ms(750)));
    assert!(h.caller.is_done());
    let stop = h.sent.iter().rev().find_map(|(_, v)| v.clone()).unwrap();
    assert_eq!(stop, json!({"event":"stop"}));
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(r.reply_latency_ms, [250]);
    assert_eq!(
        (r.greeting_audio_ms, r.reply_audio_ms.clone()),
        (Some(1_000), vec![500])
    );
    assert_eq!(r.bot_audio_ms, 1_500);
    assert_eq!(r.marks_echoed, 2);
    assert_eq!(r.session_id.as_deref(), Some("s-1"));
}

#[test]
fn partner_clear_drops_audio_and_its_marks_are_never_echoed() {
    let mut h = Harness::partner(&[(100, 200)], PartnerFormat::L16);
    h.open(Duration::ZERO);
    h.binary_audio(ms(100), 2_000);
    h.partner_mark(ms(100), "sentence-1");
    h.binary_audio(ms(100), 1_000);
    h.partner_mark(ms(100), "turn-1");
    h.server(ms(600), json!({"event":"clear"}));
    assert!(played_times(&h).is_empty());
    // The cleared turn still counts as finished, exactly as over Twilio.
    let end = h.run_until_speech_ends(ms(3_000));
    assert_eq!(end, ms(700 + 180));
    h.run_until(ms(4_000));
    assert!(played_times(&h).is_empty(), "a cleared mark was echoed");
    let r = h.record();
    assert_eq!(r.bot_audio_ms, 500);
    assert_eq!(r.marks_echoed, 0);
    assert_eq!(r.greeting_audio_ms, Some(3_000), "received, not played");
}

#[test]
fn a_partner_transfer_is_classified_by_its_mark_and_recorded() {
    let mut h = Harness::partner(&[(0, 200)], PartnerFormat::L16);
    h.open(Duration::ZERO);
    h.binary_audio(ms(20), 100);
    h.partner_mark(ms(20), "turn-1");
    let end = h.run_until_speech_ends(ms(2_000));
    h.binary_audio(end + ms(100), 300);
    h.partner_mark(end + ms(100), "callgate-transfer:caller_requested_human");
    h.run_until(end + ms(450));
    h.server(
        end + ms(450),
        json!({"event":"transfer","target":"+15550199","reason":"caller_requested_human"}),
    );
    h.caller.handle_closed(end + ms(460), Some(1000), "");
    let r = h.record();
    assert_eq!(
        r.outcome,
        Outcome::Transferred {
            reason: "caller_requested_human".into()
        }
    );
    assert_eq!(
        r.transfer,
        Some(TransferMessage {
            target: Some("+15550199".into()),
            reason: "caller_requested_human".into()
        })
    );
    assert_eq!(r.close_code, Some(1000));
    assert_eq!(r.end_message_reason, None);
}

#[test]
fn a_partner_overflow_is_the_same_rejection_as_over_twilio() {
    let mut h = Harness::partner(&[(0, 200)], PartnerFormat::L16);
    h.open(ms(5));
    h.prompt(ms(50), Prompt::Overflow, 25);
    h.partner_mark(ms(50), "callgate-overflow:queue_full");
    h.run_until(ms(3_560));
    assert_eq!(
        played_times(&h),
        [("callgate-overflow:queue_full".to_string(), ms(3_550))]
    );
    h.server(
        ms(3_560),
        json!({"event":"transfer","target":"","reason":"queue_full"}),
    );
    h.caller.handle_closed(ms(3_570), Some(1000), "");
    let r = h.record();
    let expected = Outcome::Rejected {
        how: "overflow_mark".into(),
        reason: "queue_full".into(),
        prompt_heard: true,
        time_to_rejection_ms: 50,
    };
    assert_eq!(r.outcome, expected);
    assert_eq!(r.transfer.map(|t| t.reason).as_deref(), Some("queue_full"));
}

#[test]
fn a_partner_transfer_or_end_without_a_mark_still_ends_the_conversation() {
    let mut h = Harness::partner(&[(0, 200)], PartnerFormat::Pcmu);
    h.open(Duration::ZERO);
    h.server(ms(100), json!({"event":"transfer","reason":"draining"}));
    h.caller.handle_closed(ms(110), Some(1000), "");
    let r = h.record();
    assert_eq!(
        r.outcome,
        Outcome::Transferred {
            reason: "draining".into()
        }
    );
    assert_eq!(r.transfer.and_then(|t| t.target), None);

    let mut h = Harness::partner(&[], PartnerFormat::L16);
    h.open(Duration::ZERO);
    h.binary_audio(ms(20), 200);
    h.partner_mark(ms(20), "callgate-end:bot_ended:booking_confirmed");
    h.run_until(ms(300));
    h.server(
        ms(300),
        json!({"event":"end","reason":"bot_ended:booking_confirmed"}),
    );
    h.caller.handle_closed(ms(310), Some(1000), "");
    let r = h.record();
    assert_eq!(
        r.outcome,
        Outcome::EndedByBot {
            reason: "bot_ended:booking_confirmed".into()
        }
    );
    assert_eq!(
        r.end_message_reason.as_deref(),
        Some("bot_ended:booking_confirmed")
    );
}

#[test]
fn a_partner_error_then_close_fails_the_call_with_its_code() {
    let mut h = Harness::partner(&[(0, 200)], PartnerFormat::L16);
    h.open(Duration::ZERO);
    h.server(
        ms(30),
        json!({"event":"error","code":"bad_audio_frame","message":"audio frame of 3 bytes"}),
    );
    h.caller
        .handle_closed(ms(31), Some(1007), "bad_audio_frame");
    let r = h.record();
    let Outcome::Failed { reason } = &r.outcome else {
        panic!("{r:?}")
    };
    assert!(
        reason.contains("1007") && reason.contains("bad_audio_frame"),
        "{reason}"
    );
    assert_eq!(
        r.server_error,
        Some(ServerError {
            code: "bad_audio_frame".into(),
            message: "audio frame of 3 bytes".into()
        })
    );
    assert_eq!(r.close_code, Some(1007));
}

#[test]
fn partner_audio_must_be_whole_samples_and_twilio_media_is_unknown_there() {
    let mut h = Harness::partner(&[], PartnerFormat::L16);
    h.open(Duration::ZERO);
    h.caller.handle_binary(ms(10), &[0x55; 641]);
    let sid = ids().stream.to_string();
    h.server(
        ms(15),
        json!({"event":"media","streamSid":sid,"media":{"payload":"VVVV"}}),
    );
    h.caller.handle_text(ms(16), "{not json");
    h.server(ms(17), json!({"event":"mark"}));
    h.binary_audio(ms(20), 100);
    h.partner_mark(ms(20), "turn-1");
    h.run_until(ms(200));
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!((r.unknown_events, r.malformed_events), (1, 3));
    assert_eq!(r.bot_audio_ms, 100);
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
