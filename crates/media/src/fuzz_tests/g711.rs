//! The invariants of G.711 on arbitrary bytes — the one copy, shared by the
//! cargo-fuzz target `fuzz/fuzz_targets/media_g711.rs` and by the stable
//! smoke twin (the `#[cfg(test)]` part at the bottom of this file).
//!
//! This file is included twice:
//! - by an ordinary `mod` (`#[cfg(test)]`), as `fuzz_tests::g711` in the
//!   `media` crate;
//! - by a `path` attribute in the fuzz target, as `mod invariants`, whose
//!   crate root has `use media::g711`.
//!
//! So the codec is reached as `crate::g711` (the same module in both
//! builds), and the smoke twin is compiled only under `cfg(test)`. Entry
//! point: [`check`].
//!
//! Invariants: decoding never changes the length; decode(encode(decode(x)))
//! == decode(x) for both laws; quantising keeps sample order and errs by at
//! most one segment step (1024).

use crate::g711;

/// Every invariant on one input: the bytes as code words, and as
/// little-endian samples.
pub fn check(data: &[u8]) {
    check_codes(data);
    let samples: Vec<i16> = data
        .chunks_exact(2)
        .map(|c| i16::from_le_bytes([c[0], c[1]]))
        .collect();
    check_quantising(&samples);
}

/// Decoding is a fixed point of encoding, for both laws.
pub fn check_codes(codes: &[u8]) {
    for (decode, encode) in [
        (
            g711::decode_ulaw as fn(&[u8]) -> Vec<i16>,
            g711::encode_ulaw as fn(&[i16]) -> Vec<u8>,
        ),
        (g711::decode_alaw, g711::encode_alaw),
    ] {
        let linear = decode(codes);
        assert_eq!(linear.len(), codes.len());
        assert_eq!(decode(&encode(&linear)), linear);
    }
}

/// Quantisation keeps order and stays within one segment step.
pub fn check_quantising(samples: &[i16]) {
    for pair in samples.windows(2) {
        let (lo, hi) = (pair[0].min(pair[1]), pair[0].max(pair[1]));
        for (to, from) in [
            (
                g711::linear_to_ulaw as fn(i16) -> u8,
                g711::ulaw_to_linear as fn(u8) -> i16,
            ),
            (g711::linear_to_alaw, g711::alaw_to_linear),
        ] {
            assert!(from(to(lo)) <= from(to(hi)), "{lo} {hi}");
            let err = (i32::from(from(to(lo))) - i32::from(lo)).abs();
            assert!(err <= 1_024, "error {err} at {lo}");
        }
    }
}

// ---- the stable smoke twin ----------------------------------------------

#[cfg(test)]
mod smoke {
    use super::*;
    use callgate_test_support::Rng;

    #[test]
    fn g711_decoding_is_a_fixed_point_of_encoding() {
        let mut rng = Rng::new(0x711);
        for _ in 0..300 {
            let n = rng.below(400);
            check(&rng.bytes(n));
            // Samples in the shapes that stress a quantiser (full scale,
            // `i16::MIN`, quiet noise), which random bytes rarely are.
            check_quantising(&rng.samples(400));
        }
    }
}
