//! The TTS simulator's socket core on arbitrary client traffic: two knob
//! bytes, then one client frame per line, each line's first byte a gap (in
//! 20 ms steps) on a virtual clock; `0xFF` sends a binary frame instead.
//!
//! Invariants (stated and asserted in the one shared file,
//! `crates/sim/src/tts/protocol/fuzz_tests.rs`, which the stable smoke twin
//! runs too): never more open contexts than the cap; every text frame is
//! JSON (audio with a context, decodable non-empty audio of whole samples
//! and equal-length alignment arrays, or `null` where the `null_alignment`
//! fault says; a final with a context; or a policy error — or the 429 of
//! the concurrency cap — followed at once by its 1008 close); a stalled
//! socket sends no audio; at most one close and silence after it; a deadline exists
//! exactly while the socket is open, and inactivity always ends a session.
#![no_main]

use callgate_sim::tts::OutputFormat;
use callgate_sim::tts::protocol::*;
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/sim/src/tts/protocol/fuzz_tests.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| invariants::check(data));
