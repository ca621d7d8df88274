//! STT provider frames: `stt_client::wire::parse_server_text` on arbitrary
//! text, one frame per line, feeding an `UtteranceAssembler`.
//!
//! Invariants (stated and asserted in the one shared file,
//! `crates/stt-client/src/wire/fuzz_tests.rs`, which the stable smoke twin
//! runs too): the event kind follows the frame's `type` (anything else is
//! a `ProviderError`, never `Closed`); every time, duration and confidence
//! is finite; a non-JSON frame is quoted to at most 200 characters and an
//! unknown type's message is bounded; the assembler yields only non-empty,
//! trimmed utterances and holds nothing after one or after a close.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stt_client::wire::*;
use stt_client::{CloseReason, SttEvent, UtteranceAssembler};

#[path = "../../crates/stt-client/src/wire/fuzz_tests.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| invariants::check(data));
