//! Per-packet cost of the RTP/RTCP parsers and writers: time (median and
//! spread over repeated batches) and heap allocations per call.
//!
//! Run in release, on an otherwise quiet machine:
//!
//! ```text
//! cargo run --release -p media --example rtp_cost
//! ```
//!
//! The packets are the shapes a SIP leg sees: a 20 ms PCMU packet (12-byte
//! header, 160 bytes), one with two CSRCs, an extension and padding, and
//! the compound reports callgate writes and reads (SR or RR with one
//! report block, then an SDES with a CNAME). For scale, the last line is
//! what a leg does with each inbound audio packet besides reading the
//! socket: parse, receiver statistics, jitter-buffer push and a playout
//! tick.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use media::rtp::jitter::{JitterBuffer, JitterConfig};
use media::rtp::packet::{self, RtpHeader};
use media::rtp::rtcp::{self, ReportBlock, SenderInfo};
use media::rtp::stats::ReceiverStats;

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

/// Times `op` over `REPEATS` batches of `n` calls and prints ns per call
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
        per_call.push(t.elapsed().as_nanos() as f64 / f64::from(n));
    }
    let allocs = ALLOCATIONS.load(Ordering::Relaxed) - allocs_before;
    let calls = REPEATS as f64 * f64::from(n);
    per_call.sort_by(f64::total_cmp);
    println!(
        "{name:<28} {:>8.1} ns  ({:.1}–{:.1})  {:>5.2} allocs/call",
        per_call[REPEATS / 2],
        per_call[0],
        per_call[REPEATS - 1],
        allocs as f64 / calls,
    );
}

fn header() -> RtpHeader {
    RtpHeader {
        marker: false,
        payload_type: 0,
        sequence: 4_711,
        timestamp: 160_000,
        ssrc: 0xBEEF,
    }
}

/// Two CSRCs, a one-word extension, 160 bytes of payload, 4 of padding.
fn full_packet() -> Vec<u8> {
    let mut p = vec![0xB2, 0x00, 0x12, 0x67, 0, 2, 0x71, 0, 0, 0, 0xBE, 0xEF];
    p.extend([0xAA; 8]);
    p.extend([0xBE, 0xDE, 0x00, 0x01, 1, 2, 3, 4]);
    p.extend([0xFF; 160]);
    p.extend([0, 0, 0, 4]);
    p
}

fn block() -> ReportBlock {
    ReportBlock {
        ssrc: 0xBEEF,
        fraction_lost: 3,
        cumulative_lost: 12,
        highest_seq: 70_000,
        jitter: 40,
        last_sr: 0xB705_2000,
        delay_since_last_sr: 0x0005_4000,
    }
}

const INFO: SenderInfo = SenderInfo {
    ntp: 0xE8D4_A510_8000_0000,
    rtp_ts: 160_000,
    packets: 1_000,
    octets: 160_000,
};

fn main() {
    let mut plain = Vec::new();
    packet::write(&header(), &[0xFF; 160], &mut plain);
    let full = full_packet();
    let mut sr = Vec::new();
    rtcp::write_report(&mut sr, Some(INFO), 0xCAFE, &[block()], "leg-1@callgate");
    let mut rr = Vec::new();
    rtcp::write_report(&mut rr, None, 0xCAFE, &[block()], "leg-1@callgate");
    let payload = [0xFFu8; 160];
    let mut out = Vec::with_capacity(1_500);

    println!("per call, median (min–max) over {REPEATS} batches");
    measure("rtp parse (plain 172 B)", 2_000_000, || {
        let _ = black_box(packet::parse(black_box(&plain)));
    });
    measure("rtp parse (csrc+ext+pad)", 2_000_000, || {
        let _ = black_box(packet::parse(black_box(&full)));
    });
    measure("rtp write (172 B)", 2_000_000, || {
        out.clear();
        packet::write(black_box(&header()), black_box(&payload), &mut out);
        black_box(&out);
    });
    measure("rtp is_rtcp", 2_000_000, || {
        black_box(packet::is_rtcp(black_box(&plain)));
    });
    measure("rtcp parse (SR+SDES)", 500_000, || {
        let _ = black_box(rtcp::parse_compound(black_box(&sr)));
    });
    measure("rtcp parse (RR+SDES)", 500_000, || {
        let _ = black_box(rtcp::parse_compound(black_box(&rr)));
    });
    measure("rtcp write (SR+SDES)", 500_000, || {
        out.clear();
        rtcp::write_report(&mut out, Some(INFO), 0xCAFE, &[block()], "leg-1@callgate");
        black_box(&out);
    });
    measure("rtcp write (RR+SDES)", 500_000, || {
        out.clear();
        rtcp::write_report(&mut out, None, 0xCAFE, &[block()], "leg-1@callgate");
        black_box(&out);
    });

    // One 20 ms packet per call, in order, on a virtual clock.
    let (t0, mut k) = (Instant::now(), 0u32);
    let mut jb = JitterBuffer::new(JitterConfig::default());
    let mut rx = ReceiverStats::new(8_000);
    let mut datagram = plain.clone();
    measure("leg receive path (for scale)", 500_000, || {
        k = k.wrapping_add(1);
        datagram[2..4].copy_from_slice(&(k as u16).to_be_bytes());
        datagram[4..8].copy_from_slice(&k.wrapping_mul(160).to_be_bytes());
        let at = t0 + Duration::from_millis(20 * u64::from(k));
        if let Ok(p) = packet::parse(black_box(&datagram)) {
            let h = p.header;
            rx.on_packet(h.sequence, h.timestamp, at);
            black_box(jb.push(h.sequence, h.timestamp, p.payload, at));
        }
        black_box(jb.tick(at + Duration::from_millis(5)));
    });
}
