//! G.711 on arbitrary bytes: the bytes as code words, and as samples.
//!
//! Invariants: decoding never changes length; decode(encode(decode(x))) ==
//! decode(x) for both laws; quantising keeps sample order and errs by at
//! most one segment step (1024).
#![no_main]

use libfuzzer_sys::fuzz_target;
use media::g711;

fuzz_target!(|data: &[u8]| {
    let u = g711::decode_ulaw(data);
    assert_eq!(u.len(), data.len());
    assert_eq!(g711::decode_ulaw(&g711::encode_ulaw(&u)), u);
    let a = g711::decode_alaw(data);
    assert_eq!(a.len(), data.len());
    assert_eq!(g711::decode_alaw(&g711::encode_alaw(&a)), a);

    let samples: Vec<i16> = data
        .chunks_exact(2)
        .map(|c| i16::from_le_bytes([c[0], c[1]]))
        .collect();
    for pair in samples.windows(2) {
        let (lo, hi) = (pair[0].min(pair[1]), pair[0].max(pair[1]));
        for (to, from) in [
            (
                g711::linear_to_ulaw as fn(i16) -> u8,
                g711::ulaw_to_linear as fn(u8) -> i16,
            ),
            (g711::linear_to_alaw, g711::alaw_to_linear),
        ] {
            assert!(from(to(lo)) <= from(to(hi)));
            assert!((i32::from(from(to(lo))) - i32::from(lo)).abs() <= 1_024);
        }
    }
});
