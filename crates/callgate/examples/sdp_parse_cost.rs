//! What parsing one SIP offer costs: `callgate::carrier::sip::ua::sdp::parse` next to the bare
//! `sdp_types::Session::parse`, as the median and range of the per-parse
//! time over repeated batches.
//!
//! Run in release, on an otherwise quiet machine:
//!
//! ```text
//! cargo run --release -p callgate --example sdp_parse_cost [FILTER [PER_BATCH]]
//! ```
//!
//! With a FILTER, only the cases whose name contains it run; with a
//! PER_BATCH, each batch has that many parses (default 20 000). A small run
//! of one case under `valgrind --tool=callgrind` gives a figure the load of
//! a shared machine does not move: instructions per parse.
//!
//! The offers are the shapes a trunk sends: Asterisk's (PCMU, PCMA, GSM,
//! telephone-event, 14 lines) and FreeSWITCH's default (opus first, seven
//! formats, two telephone-events, an explicit RTCP address, 18 lines).

use std::hint::black_box;
use std::time::{Duration, Instant};

/// Batches per case; the figures are the median and range over them.
const REPEATS: usize = 31;
/// Parses per batch, unless the command line says otherwise.
const PER_BATCH: u32 = 20_000;

const ASTERISK: &str = include_str!("../src/carrier/sip/ua/sdp/offers/asterisk.sdp");

const FREESWITCH: &str = include_str!("../src/carrier/sip/ua/sdp/offers/freeswitch.sdp");

/// Median, fastest and slowest time per call over `REPEATS` batches.
fn measure(per_batch: u32, mut call: impl FnMut()) -> (Duration, Duration, Duration) {
    for _ in 0..per_batch / 10 {
        call();
    }
    let mut per_call: Vec<Duration> = (0..REPEATS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..per_batch {
                call();
            }
            start.elapsed() / per_batch
        })
        .collect();
    per_call.sort();
    (per_call[REPEATS / 2], per_call[0], per_call[REPEATS - 1])
}

fn report(name: &str, bytes: usize, per_batch: u32, call: impl FnMut()) {
    let (median, min, max) = measure(per_batch, call);
    println!(
        "{name:<38} {bytes:>4} B  median {:>5.2} µs  range {:.2}-{:.2} µs",
        median.as_secs_f64() * 1e6,
        min.as_secs_f64() * 1e6,
        max.as_secs_f64() * 1e6,
    );
}

fn main() {
    let filter = std::env::args().nth(1).unwrap_or_default();
    let per_batch = std::env::args()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(PER_BATCH);
    let parses = u64::from(per_batch / 10) + u64::from(per_batch) * REPEATS as u64;
    println!("{REPEATS} batches of {per_batch} parses each; time per parse:");
    for (name, offer) in [("asterisk", ASTERISK), ("freeswitch", FREESWITCH)] {
        let body = offer.as_bytes();
        if let Err(e) = callgate::carrier::sip::ua::sdp::parse(body) {
            panic!("{name}: {e}");
        }
        if let Err(e) = sdp_types::Session::parse(body) {
            panic!("{name}: {e}");
        }
        let ours = format!("callgate::carrier::sip::ua::sdp::parse ({name})");
        if ours.contains(&filter) {
            report(&ours, body.len(), per_batch, || {
                let _ = black_box(callgate::carrier::sip::ua::sdp::parse(black_box(body)));
            });
        }
        let bare = format!("sdp_types::Session::parse ({name})");
        if bare.contains(&filter) {
            report(&bare, body.len(), per_batch, || {
                let _ = black_box(sdp_types::Session::parse(black_box(body)));
            });
        }
    }
    if !filter.is_empty() {
        println!("{parses} parses per case run");
    }
}
