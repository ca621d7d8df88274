//! The SIP entry point on arbitrary messages: up to four messages (split at
//! `\0\0`) fed to one sans-IO endpoint, then every call answered, hung up,
//! released and its timers run out.
//!
//! Invariants (stated and asserted in the one shared file,
//! `crates/callgate/src/carrier/sip/ua/endpoint_fuzz_tests.rs`, which the stable smoke twin
//! runs too): no panic; framed messages honour Content-Length and carry the
//! transaction headers once; every answer is a well-formed response with
//! the request's Call-ID and CSeq, at most two per message; a call only for
//! an INVITE without a To tag; nothing left behind after release.
#![no_main]

use libfuzzer_sys::fuzz_target;
use callgate::carrier::sip::ua::*;

#[path = "../../crates/callgate/src/carrier/sip/ua/endpoint_fuzz_tests.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| invariants::check(data));
