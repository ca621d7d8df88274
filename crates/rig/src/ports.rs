//! Loopback ports for processes the rig starts (sipp, Kamailio, HAProxy,
//! the simulators and the server as children), handed out so that two
//! test processes never get the same one.
//!
//! Asking the kernel for port 0 and passing the number on is racy: the
//! port is free again the moment the probe socket closes, and the kernel
//! gives the ephemeral range out to every `connect` and `bind(0)` on the
//! machine — nextest runs a dozen test processes opening HTTP and Postgres
//! connections, and one took a sipp port between the probe and sipp's bind.
//! So ports come from [`RANGE`] instead, which sits below the kernel's
//! ephemeral range (32768–60999 on Linux) and below callgate's default RTP
//! range (20000–29999) that servers under test lease from. Within it, each
//! block of [`BLOCK`] ports is claimed by an exclusive `flock` on a file
//! under the temporary directory, held until the process exits (the kernel
//! drops it even when the process is killed, so a crash leaks nothing), and
//! checked bindable for UDP and TCP before it is handed out.
//!
//! Servers under test that lease RTP ports themselves get a whole span of
//! [`SPAN`] ports instead ([`claim_span`]), from [`SPAN_RANGE`], claimed the
//! same way: two concurrent SIP tests never share RTP ports, and none of
//! them is in the ephemeral range where any connection could hold one.
//!
//! Limits: a process holds every block it was given until it exits
//! ([`RANGE`] has 2,000 blocks; a test takes a few), and only processes
//! using this module honour the locks — anything else binding fixed ports
//! in [`RANGE`] on the machine is seen only by the bind check.

use std::fs::{File, OpenOptions};
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::bail;

/// The ports this module hands out.
pub const RANGE: RangeInclusive<u16> = 12_000..=19_999;
/// Ports per claimed block: a base port and the three above it, so sipp's
/// media port `p` with `p + 1`..`p + 3` (RTP, RTCP, video) fits one block.
pub const BLOCK: u16 = 4;

/// The ports [`claim_span`] hands out, in spans of [`SPAN`].
pub const SPAN_RANGE: RangeInclusive<u16> = 2_000..=11_999;
/// Ports in one span: room for 250 RTP/RTCP pairs.
pub const SPAN: u16 = 500;

/// The lock files of every block this process claimed, held until exit.
static HELD: Mutex<Vec<File>> = Mutex::new(Vec::new());
/// Where this process next looks, as a block index.
static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);

/// A loopback port claimed for this process, with the [`BLOCK`]` - 1`
/// ports above it (even, so usable as an RTP base).
///
/// # Errors
/// Every block in [`RANGE`] is claimed or busy.
pub fn claim() -> anyhow::Result<u16> {
    let blocks = u32::from(RANGE.end() - RANGE.start() + 1) / u32::from(BLOCK);
    let start = first_block(blocks);
    for i in 0..blocks {
        let block = (start + i) % blocks;
        let base = RANGE.start() + u16::try_from(block).unwrap_or(0) * BLOCK;
        if let Some(lock) = lock_file(&format!("{base}.lock"))
            && bindable(base)
        {
            NEXT.store(block + 1, Ordering::Relaxed);
            HELD.lock().unwrap_or_else(|p| p.into_inner()).push(lock);
            return Ok(base);
        }
    }
    bail!("no free block of {BLOCK} loopback ports left in {RANGE:?}")
}

/// The first port of a span of [`SPAN`] loopback ports claimed for this
/// process, for a server that binds ports of a range itself (callgate's
/// `sip.rtp_port_min..rtp_port_max`). Its ports are not checked: such a
/// server skips a port it cannot bind.
///
/// # Errors
/// Every span in [`SPAN_RANGE`] is claimed.
pub fn claim_span() -> anyhow::Result<u16> {
    let spans = (SPAN_RANGE.end() - SPAN_RANGE.start() + 1) / SPAN;
    let start = u16::try_from(std::process::id() % u32::from(spans)).unwrap_or(0);
    for i in 0..spans {
        let base = SPAN_RANGE.start() + ((start + i) % spans) * SPAN;
        if let Some(lock) = lock_file(&format!("span-{base}.lock")) {
            HELD.lock().unwrap_or_else(|p| p.into_inner()).push(lock);
            return Ok(base);
        }
    }
    bail!("every span of {SPAN} ports in {SPAN_RANGE:?} is claimed")
}

/// `n` distinct claimed ports (each the base of its own block).
///
/// # Errors
/// As [`claim`].
pub fn claim_n(n: usize) -> anyhow::Result<Vec<u16>> {
    (0..n).map(|_| claim()).collect()
}

/// Where a process starts looking: spread by process id, so concurrent
/// test processes rarely probe the same blocks.
fn first_block(blocks: u32) -> u32 {
    let next = NEXT.load(Ordering::Relaxed);
    if next != u32::MAX {
        return next % blocks;
    }
    std::process::id().wrapping_mul(2_654_435_761) % blocks
}

/// `name` under the lock directory, locked exclusively; `None` when
/// another open file description (another process) holds it.
fn lock_file(name: &str) -> Option<File> {
    let dir = lock_dir();
    std::fs::create_dir_all(&dir).ok()?;
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(name))
        .ok()?;
    file.try_lock().ok()?;
    Some(file)
}

fn lock_dir() -> PathBuf {
    std::env::temp_dir().join("callgate-rig-ports")
}

/// Every port of the block binds for UDP and for TCP right now.
fn bindable(base: u16) -> bool {
    (base..base + BLOCK).all(|p| {
        let at = (Ipv4Addr::LOCALHOST, p);
        UdpSocket::bind(at).is_ok() && TcpListener::bind(at).is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_distinct_even_and_in_range() {
        let ports = claim_n(8).expect("claim");
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 8, "{ports:?}");
        for p in ports {
            assert!(RANGE.contains(&p) && RANGE.contains(&(p + BLOCK - 1)));
            assert_eq!(p % 2, 0);
        }
    }

    #[test]
    fn a_block_locked_elsewhere_is_skipped() {
        let first = claim().expect("claim");
        // Another open file description of the same lock file, as another
        // process would have: the lock is refused while this one holds it.
        let again = lock_file(&format!("{first}.lock"));
        assert!(again.is_none(), "block {first} handed out twice");
    }

    #[test]
    fn spans_are_distinct_whole_and_below_the_blocks() {
        let (a, b) = (claim_span().expect("span"), claim_span().expect("span"));
        assert_ne!(a, b);
        for base in [a, b] {
            assert!(SPAN_RANGE.contains(&base) && SPAN_RANGE.contains(&(base + SPAN - 1)));
            assert_eq!((base - SPAN_RANGE.start()) % SPAN, 0);
            assert!(lock_file(&format!("span-{base}.lock")).is_none());
        }
        assert!(SPAN_RANGE.end() < RANGE.start());
    }

    #[test]
    fn a_port_bound_by_someone_else_is_skipped() {
        // Bind the block this process would look at next, without locking it.
        let blocks = u32::from(RANGE.end() - RANGE.start() + 1) / u32::from(BLOCK);
        let next = first_block(blocks);
        let base = RANGE.start() + u16::try_from(next).unwrap() * BLOCK;
        let held = UdpSocket::bind((Ipv4Addr::LOCALHOST, base + 2));
        let got = claim().expect("claim");
        if held.is_ok() {
            assert_ne!(got, base, "a block with a bound port was handed out");
        }
    }
}
