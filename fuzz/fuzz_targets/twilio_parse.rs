//! Carrier frames: `callgate::carrier::twilio::wire::parse` on arbitrary text.
//!
//! Invariants (stated and asserted in the one shared file,
//! `crates/callgate/src/carrier/twilio/wire/fuzz_tests.rs`, which the stable smoke twin
//! runs too): an `Ok(Media)` payload is at most `max_payload` bytes and is
//! exactly the base64 decoding of the frame's `media.payload`; an `Unknown`
//! event is a prefix (≤ 32 chars) of the frame's event and never a known
//! one; `PayloadTooLarge` reports more than the limit; the text parser never
//! reports frame-level errors; `parse_with(.., Audio::Discard)` differs
//! only by an empty payload (and no base64 check); and `media_msg(sid,
//! bytes)` parses back to exactly `bytes` with no track, chunk or timestamp
//! (or is refused as too large).
#![no_main]

use callgate::carrier::twilio::wire::*;
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/callgate/src/carrier/twilio/wire/fuzz_tests.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| invariants::check(data));
