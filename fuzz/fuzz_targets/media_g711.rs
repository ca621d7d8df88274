//! G.711 on arbitrary bytes: the bytes as code words, and as samples.
//!
//! Invariants (stated and asserted in the one shared file,
//! `crates/media/src/fuzz_tests/g711.rs`, which the stable smoke twin runs
//! too): decoding never changes length; decode(encode(decode(x))) ==
//! decode(x) for both laws; quantising keeps sample order and errs by at
//! most one segment step (1024).
#![no_main]

use libfuzzer_sys::fuzz_target;
use media::g711;

#[path = "../../crates/media/src/fuzz_tests/g711.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| invariants::check(data));
