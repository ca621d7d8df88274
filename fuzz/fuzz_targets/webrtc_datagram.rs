//! The WebRTC datagram router: `callgate::carrier::webrtc::router` on
//! arbitrary datagrams from arbitrary addresses (anyone who can reach the
//! shared UDP socket). The input is one datagram, and also records of an
//! address byte, a `u16` length and the bytes, routed through a table
//! holding one session.
//!
//! Invariants (stated and asserted in the one shared file,
//! `crates/callgate/src/carrier/webrtc/router/fuzz_tests.rs`, which the
//! stable smoke twin runs too): no panic; `Kind::of` follows RFC 7983;
//! a ufrag only from a binding request with the magic cookie, read from
//! inside its attributes; a datagram reaches the session only from a
//! learned address or as a binding request naming it (at most `MAX_ADDRS`
//! addresses); nothing is left routed once the session's guard is dropped.
#![no_main]

use callgate::carrier::webrtc::router::*;
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/callgate/src/carrier/webrtc/router/fuzz_tests.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| invariants::check(data));
