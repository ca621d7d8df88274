//! The invariants of the 2× resamplers on arbitrary samples — the one copy,
//! shared by the cargo-fuzz target `fuzz/fuzz_targets/media_resample.rs`
//! and by the stable smoke twin (the `#[cfg(test)]` part at the bottom of
//! this file).
//!
//! This file is included twice:
//! - by an ordinary `mod` (`#[cfg(test)]`), as `fuzz_tests::resample` in
//!   the `media` crate;
//! - by a `path` attribute in the fuzz target, as `mod invariants`, whose
//!   crate root has `use media::resample`.
//!
//! So the resamplers are reached as `crate::resample` (the same module in
//! both builds), and the smoke twin is compiled only under `cfg(test)`.
//! Entry point: [`check`].
//!
//! Invariants: the upsampler returns exactly twice each chunk; the
//! downsampler returns ⌈n/2⌉ over a stream of any length; neither output
//! depends on the chunking; 8 → 16 → 8 kHz keeps the length.

use crate::resample::{Downsampler2x, Upsampler2x};

/// Every invariant on one input: a chunking byte, then little-endian i16
/// samples, upsampled in chunks of one size and the result downsampled in
/// chunks one larger.
pub fn check(data: &[u8]) {
    let [chunk, rest @ ..] = data else { return };
    let samples: Vec<i16> = rest
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    let size = usize::from(*chunk) + 1;
    let pieces: Vec<&[i16]> = samples.chunks(size).collect();
    check_stream(&pieces, |high| high.chunks(size + 1).collect());
}

/// 8 kHz audio upsampled as `pieces` come, and the 16 kHz result
/// downsampled in the chunks `cut_high` makes of it, each checked against
/// resampling the whole stream at once.
pub fn check_stream(pieces: &[&[i16]], cut_high: impl FnOnce(&[i16]) -> Vec<&[i16]>) {
    let input = pieces.concat();
    let mut up = Upsampler2x::default();
    let mut high = Vec::new();
    for chunk in pieces {
        let out = up.process(chunk);
        assert_eq!(out.len(), 2 * chunk.len());
        high.extend(out);
    }
    assert_eq!(high, Upsampler2x::default().process(&input));

    let mut down = Downsampler2x::default();
    let mut low = Vec::new();
    let high_pieces = cut_high(&high);
    assert_eq!(high_pieces.concat(), high, "the cut must keep the audio");
    for chunk in high_pieces {
        low.extend(down.process(chunk));
    }
    assert_eq!(
        low.len(),
        input.len(),
        "8 kHz → 16 kHz → 8 kHz keeps the length"
    );
    assert_eq!(low, Downsampler2x::default().process(&high));
    // Over a stream of either parity: the input, and the (odd) 16 kHz
    // stream less its last sample.
    let odd = &high[..high.len().saturating_sub(1)];
    for stream in [&input[..], odd] {
        assert_eq!(
            Downsampler2x::default().process(stream).len(),
            stream.len().div_ceil(2)
        );
    }
}

// ---- the stable smoke twin ----------------------------------------------

#[cfg(test)]
mod smoke {
    use super::super::{chunks, fuzz_input};
    use super::*;
    use callgate_test_support::Rng;

    #[test]
    fn resamplers_keep_length_and_ignore_chunking() {
        let mut rng = Rng::new(0x2e5);
        // Few and short: the filter runs unoptimised in a debug build.
        for _ in 0..25 {
            let input = rng.samples(1_000);
            check_stream(&chunks(&mut rng, &input), |high| chunks(&mut rng, high));
        }
    }

    /// What the fuzz target runs: a chunking byte, then samples as bytes.
    #[test]
    fn fuzz_inputs_keep_the_invariants() {
        let mut rng = Rng::new(0xfa2e5);
        for _ in 0..25 {
            check(&fuzz_input(&mut rng, 1, 1_000));
        }
        check(&[]);
    }
}
