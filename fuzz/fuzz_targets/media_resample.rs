//! The 2× resamplers on arbitrary samples: a chunking byte, then
//! little-endian i16 samples.
//!
//! Invariants: the upsampler returns exactly twice each chunk; the
//! downsampler returns ceil(n/2) over a stream; neither output depends on
//! the chunking; 8 → 16 → 8 kHz keeps the length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use media::resample::{Downsampler2x, Upsampler2x};

fuzz_target!(|data: &[u8]| {
    let [chunk, rest @ ..] = data else { return };
    let samples: Vec<i16> = rest
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    let size = usize::from(*chunk) + 1;
    let mut up = Upsampler2x::default();
    let mut high = Vec::new();
    for piece in samples.chunks(size) {
        let out = up.process(piece);
        assert_eq!(out.len(), 2 * piece.len());
        high.extend(out);
    }
    assert_eq!(high, Upsampler2x::default().process(&samples));

    let mut down = Downsampler2x::default();
    let mut low = Vec::new();
    for piece in high.chunks(size + 1) {
        low.extend(down.process(piece));
    }
    assert_eq!(low.len(), samples.len());
    assert_eq!(low, Downsampler2x::default().process(&high));
    let whole = Downsampler2x::default().process(&samples);
    assert_eq!(whole.len(), samples.len().div_ceil(2));
});
