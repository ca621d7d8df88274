//! Per-message cost of reading a SIP request: time (median and spread over
//! repeated batches) and heap allocations per call.
//!
//! Run in release, on an otherwise quiet machine:
//!
//! ```text
//! cargo run --release -p callgate --example sip_parse_cost
//! ```
//!
//! The messages are what a carrier sends through a proxy: an INVITE with
//! two `Via`s, a `Record-Route`, the usual dialog headers and a PCMU/PCMA
//! SDP offer, and the BYE that ends the call. "parse" is the parsing the
//! endpoint does for every request: [`callgate::carrier::sip::ua::wire::frame`], which is
//! rsip's one parse of the message and the framing checks on it; "receive"
//! is the whole of
//! [`callgate::carrier::sip::ua::Endpoint::receive`] on a fresh endpoint — parse, the checks,
//! the transaction key, the answer it writes — for scale.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use callgate::carrier::sip::ua::{Config, Endpoint, Peer, Transport, wire};

/// Counts allocations so that a call's heap use can be reported next to
/// its time. Measuring is this example's only purpose; the library itself
/// stays free of `unsafe`.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter is a relaxed atomic with no bearing on memory safety.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `layout` is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as for `dealloc`, and the caller's contract on `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Batches per case; the figures are the median and range over them.
const REPEATS: usize = 31;

/// Times `op` over `REPEATS` batches of `n` calls and prints µs per call
/// (median, min–max) and allocations per call.
fn measure(name: &str, n: u32, mut op: impl FnMut()) {
    for _ in 0..n / 10 {
        op(); // warm caches and the branch predictor
    }
    let mut per_call: Vec<f64> = Vec::with_capacity(REPEATS);
    let allocs_before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..REPEATS {
        let t = Instant::now();
        for _ in 0..n {
            op();
        }
        per_call.push(t.elapsed().as_nanos() as f64 / 1_000.0 / f64::from(n));
    }
    let allocs = ALLOCATIONS.load(Ordering::Relaxed) - allocs_before;
    let calls = REPEATS as f64 * f64::from(n);
    per_call.sort_by(f64::total_cmp);
    println!(
        "{name:<22} {:>7.2} µs  ({:.2}–{:.2})  {:>6.1} allocs/call",
        per_call[REPEATS / 2],
        per_call[0],
        per_call[REPEATS - 1],
        allocs as f64 / calls,
    );
}

const SDP: &str = "v=0\r\no=- 3912 3912 IN IP4 203.0.113.10\r\ns=-\r\n\
    c=IN IP4 203.0.113.10\r\nt=0 0\r\nm=audio 40000 RTP/AVP 0 8 101\r\n\
    a=rtpmap:0 PCMU/8000\r\na=rtpmap:8 PCMA/8000\r\na=rtpmap:101 telephone-event/8000\r\n\
    a=fmtp:101 0-16\r\na=ptime:20\r\na=sendrecv\r\n";

fn invite() -> String {
    format!(
        "INVITE sip:+15550100@192.0.2.1:5060 SIP/2.0\r\n\
         Record-Route: <sip:198.51.100.7;lr;ftag=as5f3e1b2c;did=a1b.c2>\r\n\
         Via: SIP/2.0/UDP 198.51.100.7;branch=z9hG4bK7f3a.9c2e4b1d0;rport\r\n\
         Via: SIP/2.0/UDP 203.0.113.10:5060;received=203.0.113.10;branch=z9hG4bK4c1d9e0f;rport=5060\r\n\
         Max-Forwards: 69\r\n\
         From: \"+15550199\" <sip:+15550199@203.0.113.10>;tag=as5f3e1b2c\r\n\
         To: <sip:+15550100@192.0.2.1>\r\n\
         Contact: <sip:+15550199@203.0.113.10:5060>\r\n\
         Call-ID: 4b7c2a1e0f9d3c5b6a7e8f9d0c1b2a3e@203.0.113.10\r\n\
         CSeq: 102 INVITE\r\n\
         User-Agent: Carrier SBC 4.2\r\n\
         Allow: INVITE, ACK, CANCEL, OPTIONS, BYE, REFER, NOTIFY, INFO\r\n\
         Supported: replaces, timer\r\n\
         Content-Type: application/sdp\r\n\
         Content-Length: {}\r\n\r\n{SDP}",
        SDP.len()
    )
}

const BYE: &str = "BYE sip:callgate@192.0.2.1:5060 SIP/2.0\r\n\
    Via: SIP/2.0/UDP 198.51.100.7;branch=z9hG4bK7f3a.9c2e4b1d1;rport\r\n\
    Via: SIP/2.0/UDP 203.0.113.10:5060;received=203.0.113.10;branch=z9hG4bK5d2e0f1a;rport=5060\r\n\
    Max-Forwards: 69\r\n\
    From: \"+15550199\" <sip:+15550199@203.0.113.10>;tag=as5f3e1b2c\r\n\
    To: <sip:+15550100@192.0.2.1>;tag=0a1b2c3d4e\r\n\
    Call-ID: 4b7c2a1e0f9d3c5b6a7e8f9d0c1b2a3e@203.0.113.10\r\n\
    CSeq: 103 BYE\r\n\
    User-Agent: Carrier SBC 4.2\r\n\
    Content-Length: 0\r\n\r\n";

/// What the endpoint parses for a request.
fn parse(bytes: &[u8]) {
    let _ = black_box(wire::frame(bytes, 16 * 1024));
}

fn main() {
    let invite = invite();
    let local: SocketAddr = "192.0.2.1:5060".parse().unwrap_or_else(|_| unreachable!());
    let peer = Peer {
        addr: "198.51.100.7:5060"
            .parse()
            .unwrap_or_else(|_| unreachable!()),
        transport: Transport::Udp,
        conn: 0,
    };
    let now = Instant::now();
    println!(
        "per message, median (min–max) over {REPEATS} batches; INVITE {} B, BYE {} B",
        invite.len(),
        BYE.len()
    );
    measure("parse INVITE", 100_000, || {
        parse(black_box(invite.as_bytes()))
    });
    measure("parse BYE", 100_000, || parse(black_box(BYE.as_bytes())));
    measure("receive INVITE", 50_000, || {
        let mut ep = Endpoint::new(Config::new(local), 7);
        ep.receive(black_box(invite.as_bytes()), peer, now);
        black_box(ep.pop());
    });
    measure("receive BYE (481)", 50_000, || {
        let mut ep = Endpoint::new(Config::new(local), 7);
        ep.receive(black_box(BYE.as_bytes()), peer, now);
        black_box(ep.pop());
    });
}
