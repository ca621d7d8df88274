//! The 2× resamplers on arbitrary samples: a chunking byte, then
//! little-endian i16 samples.
//!
//! Invariants (stated and asserted in the one shared file,
//! `crates/media/src/fuzz_tests/resample.rs`, which the stable smoke twin
//! runs too): the upsampler returns exactly twice each chunk; the
//! downsampler returns ceil(n/2) over a stream; neither output depends on
//! the chunking; 8 → 16 → 8 kHz keeps the length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use media::resample;

#[path = "../../crates/media/src/fuzz_tests/resample.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| invariants::check(data));
