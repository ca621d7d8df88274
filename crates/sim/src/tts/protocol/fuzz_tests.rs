//! Smoke fuzz of the TTS simulator's socket core: the stable twin of the
//! cargo-fuzz target `fuzz/fuzz_targets/sim_tts_socket.rs`. Mutated client
//! sessions on a virtual clock, under random knobs, must keep the context
//! cap, send only well-formed frames, and end in at most one close after
//! which the core is silent.

use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;

use super::*;

use crate::smoke_mutator::{Mutator, Rng};

const SESSIONS: &[&str] = &[
    concat!(
        "{\"text\":\" \",\"context_id\":\"ctx-1\"}\n",
        "{\"text\":\"Hello there, your table is booked. \",\"context_id\":\"ctx-1\"}\n",
        "{\"text\":\"\",\"context_id\":\"ctx-1\",\"flush\":true}\n",
        "{\"context_id\":\"ctx-1\",\"close_context\":true}\n",
        "{\"close_socket\":true}",
    ),
    concat!(
        "{\"text\":\"\"}\n",
        "{\"text\":\"Hi. \",\"flush\":true}\n",
        "{\"text\":\" \",\"context_id\":\"a\"}\n{\"text\":\" \",\"context_id\":\"b\"}\n",
        "{\"text\":\"one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty \",\"context_id\":\"a\"}\n",
        "{\"context_id\":\"b\",\"close_context\":true}",
    ),
    "{\"text\":\"\",\"context_id\":\"never\"}",
];
const TOKENS: &[&str] = &[
    "\"text\"",
    "\"context_id\"",
    "\"flush\"",
    "\"close_context\"",
    "\"close_socket\"",
    "\"ctx-1\"",
    "\"ctx-2\"",
    "\"default\"",
    "\n",
];

fn random_params(rng: &mut Rng) -> CoreParams {
    CoreParams {
        format: *rng.pick(&[
            OutputFormat::Ulaw8000,
            OutputFormat::Alaw8000,
            OutputFormat::Pcm(16_000),
            OutputFormat::Pcm(22_050),
        ]),
        max_contexts: 1 + rng.below(5),
        first_chunk_latency: Duration::from_millis(rng.below(400) as u64),
        chars_per_second: *rng.pick(&[15.0, 40.0, 0.0, -1.0, f64::NAN, 1e9]),
        realtime_factor: *rng.pick(&[4.0, 1.0, 1e6, 0.0, f64::NAN, f64::INFINITY]),
        inactivity_timeout: Duration::from_secs(1 + rng.below(30) as u64),
        stall_audio: rng.one_in(8),
        close_after: rng
            .one_in(8)
            .then(|| Duration::from_millis(rng.below(5_000) as u64)),
        finish_flushed_on_close: rng.one_in(2),
        ignore_close_socket: rng.one_in(8),
        seed: rng.next_u64(),
    }
}

/// What the core has said so far.
#[derive(Default)]
struct Seen {
    /// The `error` of a policy message whose close must come next.
    pending_error: Option<String>,
    closed: bool,
    audio_frames: usize,
}

/// Checks everything the core has to send now.
fn drain(core: &mut SocketCore, p: &CoreParams, seen: &mut Seen) {
    assert!(core.open_contexts() <= p.max_contexts);
    while let Some(out) = core.poll_output() {
        assert!(!seen.closed, "output after the close: {out:?}");
        match out {
            Outbound::Close { code, reason } => {
                if let Some(error) = seen.pending_error.take() {
                    assert_eq!((code, reason), (close_code::POLICY, error));
                }
                seen.closed = true;
            }
            Outbound::Text(text) => {
                assert!(
                    seen.pending_error.is_none(),
                    "a policy error is followed by its close"
                );
                let v: Value = serde_json::from_str(&text).unwrap();
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
        assert!(v["contextId"].is_string(), "{v}");
    } else {
        assert!(!p.stall_audio, "a stalled socket sent audio");
        seen.audio_frames += 1;
        assert!(v["contextId"].is_string(), "{v}");
        let audio = B64.decode(v["audio"].as_str().unwrap()).unwrap();
        let width = if matches!(p.format, OutputFormat::Pcm(_)) {
            2
        } else {
            1
        };
        assert!(!audio.is_empty() && audio.len().is_multiple_of(width));
        let a = &v["alignment"];
        let n = a["chars"].as_array().unwrap().len();
        assert_eq!(a["charStartTimesMs"].as_array().unwrap().len(), n);
        assert_eq!(a["charDurationsMs"].as_array().unwrap().len(), n);
    }
}

/// Moves the virtual clock to `until`, waking the core at every deadline.
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

/// Plays one session: a frame per line, with random gaps on a virtual
/// clock, then waits out every deadline. Returns the audio frames sent.
fn run_session(rng: &mut Rng, session: &str) -> usize {
    let p = random_params(rng);
    let mut now = Instant::now();
    let mut core = SocketCore::new(p.clone(), now);
    let mut seen = Seen::default();
    for line in session.lines() {
        let until = now + Duration::from_millis(rng.below(3_000) as u64);
        advance(&mut core, &p, &mut seen, &mut now, until);
        if rng.one_in(20) {
            core.handle_binary(now);
        } else {
            core.handle_text(now, line);
        }
        drain(&mut core, &p, &mut seen);
    }
    let until = now + Duration::from_secs(60);
    advance(&mut core, &p, &mut seen, &mut now, until);
    assert!(seen.closed, "the inactivity timeout always ends a session");
    core.handle_text(now, "{\"text\":\"late\",\"flush\":true}");
    core.handle_timeout(now + Duration::from_secs(600));
    assert!(core.poll_output().is_none(), "a closed core is silent");
    seen.audio_frames
}

#[test]
fn mutated_sessions_keep_the_socket_core_well_formed() {
    let mut m = Mutator::new(0x7e5, SESSIONS, TOKENS);
    let mut audio_frames = 0;
    for _ in 0..150 {
        let session = m.next_text();
        audio_frames += run_session(m.rng(), &session);
    }
    assert!(
        audio_frames > 50,
        "only {audio_frames} audio frames: generation was never reached"
    );
}
