//! The TTS simulator's socket core on arbitrary client traffic: two knob
//! bytes, then one client frame per line, each line's first byte a gap (in
//! 20 ms steps) on a virtual clock; `0xFF` sends a binary frame instead.
//!
//! Invariants: never more open contexts than the cap; every text frame is
//! JSON (audio with a context, decodable non-empty audio of whole samples
//! and equal-length alignment arrays; a final with a context; or a policy
//! error followed at once by its 1008 close); a stalled socket sends no
//! audio; at most one close and silence after it; a deadline exists
//! exactly while the socket is open, and inactivity always ends a session.
#![no_main]

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use callgate_sim::tts::OutputFormat;
use callgate_sim::tts::protocol::{CoreParams, Outbound, SocketCore, close_code};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

#[derive(Default)]
struct Seen {
    pending_error: Option<String>,
    closed: bool,
}

fn params(a: u8, b: u8) -> CoreParams {
    let formats = [
        OutputFormat::Ulaw8000,
        OutputFormat::Alaw8000,
        OutputFormat::Pcm(16_000),
        OutputFormat::Pcm(22_050),
    ];
    CoreParams {
        format: formats[usize::from(a % 4)],
        max_contexts: 1 + usize::from(a >> 2 & 3),
        first_chunk_latency: Duration::from_millis(u64::from(b) * 3),
        chars_per_second: [15.0, 0.0, f64::NAN, 1e9][usize::from(a >> 4 & 3)],
        realtime_factor: [4.0, 0.0, f64::INFINITY, 1e6][usize::from(b & 3)],
        inactivity_timeout: Duration::from_secs(1 + u64::from(b >> 2 & 15)),
        stall_audio: a & 0x40 != 0,
        close_after: (b & 0x40 != 0).then(|| Duration::from_millis(u64::from(a) * 20)),
        finish_flushed_on_close: a & 0x80 != 0,
        ignore_close_socket: b & 0x80 != 0,
        seed: u64::from(a) << 8 | u64::from(b),
    }
}

fn drain(core: &mut SocketCore, p: &CoreParams, seen: &mut Seen) {
    assert!(core.open_contexts() <= p.max_contexts);
    while let Some(out) = core.poll_output() {
        assert!(!seen.closed, "output after the close");
        match out {
            Outbound::Close { code, reason } => {
                if let Some(error) = seen.pending_error.take() {
                    assert_eq!((code, reason), (close_code::POLICY, error));
                }
                seen.closed = true;
            }
            Outbound::Text(text) => {
                assert!(seen.pending_error.is_none());
                let v: Value = serde_json::from_str(&text).expect("the core sends JSON");
                check_frame(&v, p, seen);
            }
        }
    }
    assert_eq!(core.is_closed(), seen.closed);
    assert_eq!(core.next_deadline().is_none(), seen.closed);
}

fn check_frame(v: &Value, p: &CoreParams, seen: &mut Seen) {
    if let Some(error) = v["error"].as_str() {
        assert_eq!(v["code"], close_code::POLICY);
        seen.pending_error = Some(error.to_owned());
    } else if v["isFinal"] == true {
        assert!(v["contextId"].is_string());
    } else {
        assert!(!p.stall_audio && v["contextId"].is_string());
        let audio = B64
            .decode(v["audio"].as_str().expect("audio"))
            .expect("base64");
        let width = if matches!(p.format, OutputFormat::Pcm(_)) {
            2
        } else {
            1
        };
        assert!(!audio.is_empty() && audio.len().is_multiple_of(width));
        let a = &v["alignment"];
        let n = a["chars"].as_array().expect("chars").len();
        assert_eq!(a["charStartTimesMs"].as_array().map(Vec::len), Some(n));
        assert_eq!(a["charDurationsMs"].as_array().map(Vec::len), Some(n));
    }
}

fn advance(
    core: &mut SocketCore,
    p: &CoreParams,
    seen: &mut Seen,
    now: &mut Instant,
    until: Instant,
) {
    while let Some(d) = core.next_deadline().filter(|d| *d <= until) {
        *now = (*now).max(d);
        core.handle_timeout(*now);
        drain(core, p, seen);
    }
    *now = (*now).max(until);
}

fuzz_target!(|data: &[u8]| {
    let [a, b, rest @ ..] = data else { return };
    let p = params(*a, *b);
    let mut now = Instant::now();
    let mut core = SocketCore::new(p.clone(), now);
    let mut seen = Seen::default();
    for line in rest.split(|c| *c == b'\n') {
        let Some((&gap, frame)) = line.split_first() else {
            continue;
        };
        let until = now + Duration::from_millis(u64::from(gap) * 20);
        advance(&mut core, &p, &mut seen, &mut now, until);
        if gap == 0xFF {
            core.handle_binary(now);
        } else {
            core.handle_text(now, &String::from_utf8_lossy(frame));
        }
        drain(&mut core, &p, &mut seen);
    }
    let until = now + Duration::from_secs(60);
    advance(&mut core, &p, &mut seen, &mut now, until);
    assert!(seen.closed, "the inactivity timeout always ends a session");
    core.handle_text(now, r#"{"text":"late","flush":true}"#);
    assert!(core.poll_output().is_none());
});
