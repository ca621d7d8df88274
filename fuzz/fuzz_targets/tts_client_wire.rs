//! ElevenLabs TTS frames: `tts_client::wire::elevenlabs::parse` on
//! arbitrary text, and `ContextId::from_wire` on the same text.
//!
//! Invariants (stated and asserted in the one shared file,
//! `crates/tts-client/src/wire/elevenlabs/fuzz_tests.rs`, which the stable smoke twin
//! runs too): an `Audio` event carries exactly the base64 decoding of the
//! frame's non-empty `audio`; a context is recognised only in its exact
//! wire form (`contextId`, else `context_id`, equal to `ctx-<n>` as we
//! write it); errors say which of the two things went wrong.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tts_client::ContextId;
use tts_client::wire::elevenlabs::*;

#[path = "../../crates/tts-client/src/wire/elevenlabs/fuzz_tests.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| invariants::check(data));
