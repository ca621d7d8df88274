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

const ASTERISK: &str = "v=0\r\n\
o=- 1707301563 1707301563 IN IP4 192.0.2.10\r\n\
s=Asterisk\r\n\
c=IN IP4 192.0.2.10\r\n\
t=0 0\r\n\
m=audio 10000 RTP/AVP 0 8 3 101\r\n\
a=rtpmap:0 PCMU/8000\r\n\
a=rtpmap:8 PCMA/8000\r\n\
a=rtpmap:3 GSM/8000\r\n\
a=rtpmap:101 telephone-event/8000\r\n\
a=fmtp:101 0-16\r\n\
a=ptime:20\r\n\
a=maxptime:150\r\n\
a=sendrecv\r\n";

const FREESWITCH: &str = "v=0\r\n\
o=FreeSWITCH 1707290000 1707290001 IN IP4 198.51.100.20\r\n\
s=FreeSWITCH\r\n\
c=IN IP4 198.51.100.20\r\n\
t=0 0\r\n\
m=audio 24680 RTP/AVP 102 9 0 8 103 101 13\r\n\
a=rtpmap:102 opus/48000/2\r\n\
a=fmtp:102 useinbandfec=1; maxaveragebitrate=30000; maxplaybackrate=48000; ptime=20; minptime=10; maxptime=40\r\n\
a=rtpmap:9 G722/8000\r\n\
a=rtpmap:0 PCMU/8000\r\n\
a=rtpmap:8 PCMA/8000\r\n\
a=rtpmap:103 telephone-event/48000\r\n\
a=fmtp:103 0-16\r\n\
a=rtpmap:101 telephone-event/8000\r\n\
a=fmtp:101 0-16\r\n\
a=rtpmap:13 CN/8000\r\n\
a=ptime:20\r\n\
a=rtcp:24690 IN IP4 198.51.100.21\r\n";

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
