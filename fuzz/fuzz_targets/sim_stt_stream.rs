//! The STT simulator's stream core on arbitrary client traffic. The input
//! is a parameter byte then segments split at `\n`; a segment's first byte
//! picks what it is: raw audio bytes, a text (control) frame, speech of
//! the segment's length, or silence.
//!
//! Invariants (stated and asserted in the one shared file,
//! `crates/sim/src/stt/stream/fuzz_tests.rs`, which the stable smoke twin
//! runs too): at most one close, and nothing after it; a text frame is
//! `Invalid` exactly when it is not JSON; finals never claim both
//! `speech_final` and `from_finalize`, interims only with interim results;
//! a result never covers audio not yet received; finals with words follow
//! the script in order (a noise segment's final is empty); VAD and utterance-end messages only when asked for; the
//! summary's duration is the whole samples received and it hashes exactly
//! the audio bytes received.
#![no_main]

use callgate_sim::stt::stream::*;
use callgate_sim::{script, stt};
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/sim/src/stt/stream/fuzz_tests.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| invariants::check(data));
