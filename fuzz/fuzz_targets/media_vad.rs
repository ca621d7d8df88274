//! The energy VAD on arbitrary samples: a config byte, a chunking byte,
//! then little-endian i16 samples.
//!
//! Invariants (stated and asserted in the one shared file,
//! `crates/media/src/fuzz_tests/vad.rs`, which the stable smoke twin runs
//! too): events alternate Start/End beginning with Start, their times
//! never go back and never pass the audio pushed, `is_speaking` matches the
//! last event, and the events do not depend on how the audio was chunked.
#![no_main]

use libfuzzer_sys::fuzz_target;
use media::vad;

#[path = "../../crates/media/src/fuzz_tests/vad.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| invariants::check(data));
