//! Cartesia TTS frames: `tts_client::wire::cartesia::parse` on arbitrary
//! text.
//!
//! Invariants (stated and asserted in the one shared file,
//! `crates/tts-client/src/wire/cartesia/fuzz_tests.rs`, which the stable
//! smoke twin runs too): the event kind follows `type` (`Audio` exactly
//! the decoding of a `chunk`'s non-empty `data`, `Aligned` exactly the
//! non-blank words of `timestamps`, `Final` only for `done`); a
//! context is recognised only as `ctx-<n>`; a 429 error is a capacity
//! refusal; parse errors say which step failed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tts_client::ContextId;
use tts_client::wire::cartesia::*;

#[path = "../../crates/tts-client/src/wire/cartesia/fuzz_tests.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| invariants::check(data));
