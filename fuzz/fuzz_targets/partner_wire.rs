//! Both ends of the partner WebSocket protocol on arbitrary input:
//! callgate's codec `callgate::carrier::partner::wire` (the partner faces the
//! public internet) and the load tool's independent client,
//! `callgate_load::partner_wire` (which must not hide a server bug by
//! misreading what it is sent).
//!
//! Invariants — stated and asserted in one shared file per side, which the
//! stable smoke twins run too:
//! - `crates/callgate/src/carrier/partner/wire/fuzz_tests.rs`: `parse_text`
//!   never panics on any UTF-8 text and answers what the specification
//!   says for it — an `Ok(Start)` has a 1..=128-character `call_id`, an
//!   accepted content type and at most 32 string metadata entries within
//!   their byte limits, each exactly as sent; `Unknown` is a ≤ 64-byte
//!   prefix of an unknown event; every error has a documented code and
//!   closes with 1008; `check_frame` accepts exactly one 20 ms frame (else
//!   `bad_audio_frame`, 1007); every builder's output re-parses as JSON
//!   with exactly its documented fields.
//! - `crates/load/src/partner_wire/fuzz_tests.rs`: the client's `parse`
//!   accepts a known event exactly when its fields are there and strings,
//!   carrying them as sent; other events are `Unknown` by name; its
//!   builders' output is exactly the documented JSON.
#![no_main]

// The two sides' names do not overlap; each invariants file names what it
// uses through `super::`.
use callgate::carrier::partner::wire::*;
use callgate_load::partner_wire::*;
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/callgate/src/carrier/partner/wire/fuzz_tests.rs"]
mod server;

#[path = "../../crates/load/src/partner_wire/fuzz_tests.rs"]
mod client;

fuzz_target!(|data: &[u8]| {
    server::check(data);
    client::check(data);
});
