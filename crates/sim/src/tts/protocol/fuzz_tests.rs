//! The invariants of the TTS simulator's socket core on arbitrary client
//! traffic — the one copy, shared by the cargo-fuzz target
//! `fuzz/fuzz_targets/sim_tts_socket.rs` and by the stable smoke twin (the
//! `#[cfg(test)]` part at the bottom of this file).
//!
//! This file is included twice:
//! - by an ordinary `mod` (`#[cfg(test)]`), as `tts::protocol::fuzz_tests`,
//!   whose parent module is the socket core itself;
//! - by a `path` attribute in the fuzz target, as `mod invariants`, whose
//!   crate root has `use callgate_sim::tts::OutputFormat` and
//!   `use callgate_sim::tts::protocol::*`.
//!
//! So the core and its output format are reached through `super::` (the
//! same items in both builds), and the part that needs the mutator (the
//! dev-dependency `callgate_test_support`) is compiled only under
//! `cfg(test)` (the fuzz build never sees it). Entry point: [`check`].
//!
//! Invariants: never more open contexts than the cap; every text frame is
//! JSON: audio with a context, decodable non-empty audio of whole samples
//! and equal-length alignment arrays; a final with a context; or a policy
//! error followed at once by its 1008 close; a stalled socket sends no
//! audio; at most one close, and silence after it; a deadline exists
//! exactly while the socket is open, and inactivity always ends a session
//! (even one that ignores `close_socket`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;

use super::{
    Account, CODE_TOO_MANY_REQUESTS, CoreParams, NullAlignment, Outbound, OutputFormat, SocketCore,
    close_code,
};

/// Every invariant on one input: two knob bytes, then one client frame per
/// line, each line's first byte a gap (in 20 ms steps) on a virtual clock;
/// a gap of `0xFF` sends a binary frame instead.
pub fn check(data: &[u8]) {
    let [a, b, rest @ ..] = data else { return };
    let mut session = Session::new(params(*a, *b));
    for line in rest.split(|c| *c == b'\n') {
        let Some((&gap, frame)) = line.split_first() else {
            continue;
        };
        session.wait(Duration::from_millis(u64::from(gap) * 20));
        if gap == 0xFF {
            session.binary();
        } else {
            session.text(&String::from_utf8_lossy(frame));
        }
    }
    session.finish();
}

/// The knobs two bytes stand for.
pub fn params(a: u8, b: u8) -> CoreParams {
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
        // The fault knobs reuse bits: each combination still has to keep
        // every invariant.
        max_concurrent_generations: (a & 0x30 == 0x30).then_some(u32::from(b >> 6)),
        generation_queue: Duration::from_millis(u64::from(b & 0x3c)),
        quota_chars: (b & 0x0c == 0x0c).then_some(u64::from(a)),
        no_final_for_empty_context: a & 0x04 != 0,
        null_alignment: [
            NullAlignment::None,
            NullAlignment::Alignment,
            NullAlignment::Normalized,
            NullAlignment::Both,
        ][usize::from(b >> 4 & 3)],
        context_inactivity: a & 0x08 != 0,
        account: Arc::new(Account::default()),
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

/// One socket core on a virtual clock, checked after every step: each
/// frame it sends as it comes, the context cap, and that it has a deadline
/// exactly while it has not sent its close.
pub struct Session {
    core: SocketCore,
    p: CoreParams,
    seen: Seen,
    now: Instant,
}

impl Session {
    pub fn new(p: CoreParams) -> Self {
        let now = Instant::now();
        Session {
            core: SocketCore::new(p.clone(), now),
            p,
            seen: Seen::default(),
            now,
        }
    }

    /// Moves the clock on by `gap`, waking the core at every deadline.
    pub fn wait(&mut self, gap: Duration) {
        let until = self.now + gap;
        while let Some(d) = self.core.next_deadline().filter(|d| *d <= until) {
            self.now = self.now.max(d);
            self.core.handle_timeout(self.now);
            self.drain();
        }
        self.now = self.now.max(until);
    }

    /// A text frame from the client.
    pub fn text(&mut self, frame: &str) {
        self.core.handle_text(self.now, frame);
        self.drain();
    }

    /// A binary frame from the client.
    pub fn binary(&mut self) {
        self.core.handle_binary(self.now);
        self.drain();
    }

    /// Waits out every deadline: inactivity always ends the session, after
    /// which the core is silent whatever it is sent. Returns the audio
    /// frames the session sent.
    pub fn finish(mut self) -> usize {
        self.wait(Duration::from_secs(60));
        assert!(
            self.seen.closed,
            "the inactivity timeout always ends a session"
        );
        self.core
            .handle_text(self.now, "{\"text\":\"late\",\"flush\":true}");
        self.core.handle_binary(self.now);
        self.core
            .handle_timeout(self.now + Duration::from_secs(600));
        assert!(self.core.poll_output().is_none(), "a closed core is silent");
        self.seen.audio_frames
    }

    /// Checks everything the core has to send now.
    fn drain(&mut self) {
        let (p, seen) = (&self.p, &mut self.seen);
        assert!(self.core.open_contexts() <= p.max_contexts);
        while let Some(out) = self.core.poll_output() {
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
                    let v: Value = serde_json::from_str(&text).expect("the core sends JSON");
                    check_frame(&v, p, seen);
                }
            }
        }
        assert_eq!(self.core.is_closed(), seen.closed);
        assert_eq!(self.core.next_deadline().is_none(), seen.closed);
    }
}

/// One text frame: a policy error, a final, or well-formed audio.
fn check_frame(v: &Value, p: &CoreParams, seen: &mut Seen) {
    if let Some(error) = v["error"].as_str() {
        // A policy error, or the 429 of the concurrency cap; both close 1008.
        let code = v["code"].as_u64();
        assert!(
            code == Some(close_code::POLICY.into())
                || (code == Some(CODE_TOO_MANY_REQUESTS.into())
                    && error == "too_many_concurrent_requests"),
            "{v}"
        );
        seen.pending_error = Some(error.to_owned());
    } else if v["isFinal"] == true {
        assert!(v["contextId"].is_string(), "{v}");
    } else {
        assert!(!p.stall_audio, "a stalled socket sent audio");
        seen.audio_frames += 1;
        assert!(v["contextId"].is_string(), "{v}");
        let audio = B64
            .decode(v["audio"].as_str().expect("audio"))
            .expect("base64");
        let width = if matches!(p.format, OutputFormat::Pcm(_)) {
            2
        } else {
            1
        };
        assert!(!audio.is_empty() && audio.len().is_multiple_of(width));
        let nulls = p.null_alignment;
        let expect_plain = matches!(nulls, NullAlignment::None | NullAlignment::Normalized);
        let expect_norm = matches!(nulls, NullAlignment::None | NullAlignment::Alignment);
        for (key, expected) in [
            ("alignment", expect_plain),
            ("normalizedAlignment", expect_norm),
        ] {
            let a = &v[key];
            if !expected {
                assert!(a.is_null(), "{key} must be null under {nulls:?}: {v}");
                continue;
            }
            let n = a["chars"].as_array().expect("chars").len();
            assert_eq!(a["charStartTimesMs"].as_array().map(Vec::len), Some(n));
            assert_eq!(a["charDurationsMs"].as_array().map(Vec::len), Some(n));
        }
    }
}

// ---- the stable smoke twin ----------------------------------------------

#[cfg(test)]
mod smoke {
    //! Mutated client sessions on a virtual clock, under random knobs, must
    //! keep the context cap, send only well-formed frames, and end in at
    //! most one close after which the core is silent.

    use super::*;
    use callgate_test_support::{Mutator, Rng};

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
    /// The fuzz target's seeds.
    const SEEDS: [&[u8]; 2] = [
        include_bytes!("../../../../../fuzz/seeds/sim_tts_socket/seed-0"),
        include_bytes!("../../../../../fuzz/seeds/sim_tts_socket/seed-1"),
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
            max_concurrent_generations: rng.one_in(4).then(|| rng.below(3) as u32),
            generation_queue: Duration::from_millis(rng.below(200) as u64),
            quota_chars: rng.one_in(6).then(|| rng.below(300) as u64),
            no_final_for_empty_context: rng.one_in(3),
            null_alignment: *rng.pick(&[
                NullAlignment::None,
                NullAlignment::Alignment,
                NullAlignment::Normalized,
                NullAlignment::Both,
            ]),
            context_inactivity: rng.one_in(3),
            account: Arc::new(Account::default()),
        }
    }

    /// Plays one session: a frame per line, with random gaps on a virtual
    /// clock, then waits out every deadline. Returns the audio frames sent.
    fn run_session(rng: &mut Rng, frames: &str) -> usize {
        let mut session = Session::new(random_params(rng));
        for line in frames.lines() {
            session.wait(Duration::from_millis(rng.below(3_000) as u64));
            if rng.one_in(20) {
                session.binary();
            } else {
                session.text(line);
            }
        }
        session.finish()
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

    /// What the fuzz target runs, on mutants of its own seeds: two knob
    /// bytes, then a gap byte and a frame per line.
    #[test]
    fn mutated_seeds_keep_the_invariants() {
        let mut m = Mutator::new(0x5eed_07e5, &SEEDS, TOKENS);
        m.run_bytes(300, check);
        check(&[0, 0]);
    }
}
