//! The WebRTC offer screen: `callgate::carrier::webrtc::sdp::screen` on
//! arbitrary bodies (a `POST /v1/webrtc` from anyone who can reach it).
//!
//! Invariants (stated and asserted in the one shared file,
//! `crates/callgate/src/carrier/webrtc/sdp/fuzz_tests.rs`, which the stable
//! smoke twin runs too): no panic; an `Ok` has an Opus payload type below
//! 128 and a 4..=256-character ICE ufrag from the body, and str0m's
//! `SdpOffer::from_sdp_string` does not panic on it; an `Err` has a known
//! kind and its documented status (400/413/422); `too_large` exactly over
//! `MAX_OFFER_BYTES`, `not_utf8` exactly for non-UTF-8 under it.
#![no_main]

use callgate::carrier::webrtc::sdp::*;
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/callgate/src/carrier/webrtc/sdp/fuzz_tests.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| invariants::check(data));
