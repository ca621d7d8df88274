//! SDP offer/answer: `callgate::carrier::sip::ua::sdp::{parse, negotiate, answer}` on
//! arbitrary bodies (the offer in an INVITE from a carrier, SBC or PBX).
//!
//! Invariants (stated and asserted in the one shared file,
//! `crates/callgate/src/carrier/sip/ua/sdp_fuzz_tests.rs`, which the stable smoke twin runs
//! too): parse never panics and refuses with the error the body deserves;
//! a description has at most 64 sections and 256 attributes per section,
//! one per `m=` line with its port as written, from a body of RFC 8866
//! line types only, one `v=`, no control characters; a negotiation picks a
//! plain-RTP audio stream whose formats carry the codec's payload type
//! (the current codec kept when offered, else the offer's first preferred
//! one), sends to the media-level `c=` else the session-level one, and
//! answers the offered direction; the answer re-parses with our own parser
//! to as many `m=` lines, the chosen one carrying exactly our codec (and
//! DTMF type), the others at port 0.
#![no_main]

use libfuzzer_sys::fuzz_target;
use callgate::carrier::sip::ua::sdp;

#[path = "../../crates/callgate/src/carrier/sip/ua/sdp_fuzz_tests.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| invariants::check(data));
