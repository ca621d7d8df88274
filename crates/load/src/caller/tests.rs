//! The caller on a virtual clock: no sockets, no sleeping.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};

use super::ending::{TerminalKind, terminal_outcome};
use super::*;
use crate::ids::{AccountSid, CallSid, StreamSid};
use crate::partner_wire::PartnerFormat;
use crate::record::Prompt;
use crate::transport;

mod cues;
mod endings;
mod heard;
mod interaction;
mod partner;
mod script;
mod silence;
mod webrtc;

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
                    cued: false,
                })
                .collect(),
            silence_threshold: Duration::from_secs(3),
            call_timeout: Duration::from_secs(120),
            voice_seed: 7,
            protocol,
            barge_in_at: None,
            cough: None,
            hold: false,
            leave: None,
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
                Transmit::Binary(bytes) | Transmit::Media { frame: bytes, .. } => {
                    let silence = transport::silence_byte(self.caller.audio);
                    let speech = bytes.iter().any(|&b| b != silence);
                    let v = json!({"event":"binary","len":bytes.len(),"speech":speech});
                    self.binary.push((self.now, bytes));
                    Some(v)
                }
                Transmit::Reconnect { token, after } => {
                    Some(json!({"event":"(reconnect)","token":token,"after_ms":millis(after)}))
                }
                Transmit::Close | Transmit::Drop => None,
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
                CallProtocol::Partner(_) | CallProtocol::Webrtc { .. } => {
                    self.caller.handle_binary(t, &msg)
                }
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
