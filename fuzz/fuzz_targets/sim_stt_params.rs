//! The STT simulator's query validation: `StreamParams::from_query` on an
//! arbitrary `k=v&k=v` string.
//!
//! Invariants (stated and asserted in the one shared file,
//! `crates/sim/src/stt/params/fuzz_tests.rs`, which the stable smoke twin
//! runs too): an accepted query has `sample_rate` 8000 or 16000 exactly as
//! sent, the encoding it named, `utterance_end_ms` only with interim
//! results, endpointing off only for `endpointing=false`, and mono; a
//! refusal is `BadParam` naming a known parameter that was sent (or a
//! required one that was missing).
#![no_main]

use callgate_sim::stt;
use callgate_sim::stt::params::*;
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/sim/src/stt/params/fuzz_tests.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| invariants::check(data));
