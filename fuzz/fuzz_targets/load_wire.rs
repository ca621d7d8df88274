//! Server frames as the load tool (playing Twilio) reads them:
//! `callgate_load::wire::parse`, and SID parsing of the same text.
//!
//! Invariants (stated and asserted in the one shared file,
//! `crates/load/src/wire/fuzz_tests.rs`, which the stable smoke twin runs
//! too): `media`/`mark`/`clear` are accepted only when `streamSid` names
//! our stream (up to hex case); media bytes are exactly the base64 decoding
//! of the payload; other events come back as `Unknown` with their name;
//! every error is `Malformed` for our stream; a SID parses only when it is
//! its own display form up to hex case.
#![no_main]

use callgate_load::wire::*;
use callgate_load::{LoadError, StreamSid};
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/load/src/wire/fuzz_tests.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| invariants::check(data));
