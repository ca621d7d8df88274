//! Smoke fuzz of the audio code that sees carrier and provider bytes: the
//! stable twins of the cargo-fuzz targets `fuzz/fuzz_targets/media_g711.rs`,
//! `media_vad.rs`, `media_resample.rs` and `media_rtp.rs`. Arbitrary bytes
//! and samples, cut into arbitrary chunks, must keep each component's
//! structural promises.
//!
//! Each target's invariants are in one file below `fuzz_tests/`, shared
//! with its fuzz target (which includes it by a `path` attribute), with
//! the smoke twin at its bottom. This module only holds what the twins
//! share: [`chunks`] and [`fuzz_input`], drawn from the random source of
//! the dev-dependency `callgate_test_support`.

mod g711;
mod resample;
mod rtp;
mod vad;

use callgate_test_support::Rng;

/// Cuts `input` the way `rng` says (some chunks empty).
fn chunks<'a, T>(rng: &mut Rng, input: &'a [T]) -> Vec<&'a [T]> {
    let mut rest = input;
    rng.chunk_lengths(input.len())
        .into_iter()
        .map(|n| {
            let (head, tail) = rest.split_at(n);
            rest = tail;
            head
        })
        .collect()
}

/// An input as a fuzz target reads it: `header` random bytes, then up to
/// `max_samples` samples (in the shapes [`Rng::samples`] makes) as
/// little-endian bytes.
fn fuzz_input(rng: &mut Rng, header: usize, max_samples: usize) -> Vec<u8> {
    let mut data = rng.bytes(header);
    for s in rng.samples(max_samples) {
        data.extend(s.to_le_bytes());
    }
    data
}
