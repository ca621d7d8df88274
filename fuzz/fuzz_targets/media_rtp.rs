//! The RTP media code on arbitrary bytes: the input as an RTP datagram,
//! as an RTCP compound, as report blocks to write, as a stream of packets
//! and playout ticks for the jitter buffer and receiver statistics, and as
//! telephone events.
//!
//! Invariants (stated and asserted in the one shared file,
//! `crates/media/src/fuzz_tests/rtp.rs`, which the stable smoke twin runs
//! too): parsed RTP payloads lie inside the datagram and round-trip
//! through `write`; parsed RTCP has one packet per header with counts
//! matching, and SR/RR round-trip; the jitter buffer never exceeds its max
//! depth, counts every push and tick exactly once, plays whole frames of
//! pushed bytes and stops concealing when nothing arrives; DTMF digits are
//! reported once per event.
#![no_main]

use libfuzzer_sys::fuzz_target;
use media::rtp;

#[path = "../../crates/media/src/fuzz_tests/rtp.rs"]
mod invariants;

fuzz_target!(|data: &[u8]| invariants::check(data));
