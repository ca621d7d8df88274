//! RTP by capture: a `dumpcap` run on `lo` for one port, and the classic
//! pcap file it writes parsed into RTP packets (why sipp's own counters
//! are not used: see the [`super`] module docs).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::{START_BOUND, TempDir};

/// A dumpcap capture of UDP to and from one port on `lo`.
pub struct RtpCapture {
    child: Child,
    file: PathBuf,
    port: u16,
    started: SystemTime,
    _dir: TempDir,
}

impl RtpCapture {
    /// Starts capturing `udp port {port}` on `lo` and returns once dumpcap
    /// says it is capturing. Panics when it cannot (dumpcap missing, no
    /// `CAP_NET_RAW`).
    pub async fn start(port: u16) -> RtpCapture {
        let dir = TempDir::new("rtpcap");
        let file = dir.path().join("rtp.pcap");
        let mut child = Command::new("dumpcap")
            .args(["-i", "lo", "-f", &format!("udp port {port}"), "-P", "-w"])
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run dumpcap (wireshark-common): {e}"));
        let stderr = child.stderr.take().expect("dumpcap stderr");
        let mut lines = BufReader::new(stderr).lines();
        let mut said = String::new();
        let ready = tokio::time::timeout(START_BOUND, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("Capturing on") {
                    return true;
                }
                said.push_str(&line);
                said.push('\n');
            }
            false
        })
        .await;
        assert!(
            ready == Ok(true),
            "dumpcap did not start capturing on lo (needs root or CAP_NET_RAW): {said}"
        );
        // Keep draining its stderr so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        RtpCapture {
            child,
            file,
            port,
            started: SystemTime::now(),
            _dir: dir,
        }
    }

    /// Stops dumpcap (SIGTERM, so it flushes) and parses what it caught.
    pub async fn finish(mut self) -> RtpStats {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        if tokio::time::timeout(Duration::from_secs(3), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
        let bytes = std::fs::read(&self.file).unwrap_or_default();
        RtpStats {
            port: self.port,
            packets: parse_pcap(&bytes, self.started),
        }
    }
}

/// RTP seen on one port, both directions, in capture order.
#[derive(Debug, Clone, Default)]
pub struct RtpStats {
    /// The captured port (sipp's media port).
    pub port: u16,
    pub packets: Vec<RtpPacket>,
}

/// One RTP packet (version 2; anything else on the port is skipped).
#[derive(Debug, Clone)]
pub struct RtpPacket {
    /// Since the capture started.
    pub at: Duration,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub marker: bool,
    pub payload_type: u8,
    pub seq: u16,
    pub timestamp: u32,
    pub ssrc: u32,
    pub payload: Vec<u8>,
}

impl RtpStats {
    /// Packets sent to the port (by callgate, to sipp).
    pub fn received(&self) -> impl Iterator<Item = &RtpPacket> {
        self.packets
            .iter()
            .filter(move |p| p.dst.port() == self.port)
    }

    /// Packets sent from the port (by sipp).
    pub fn sent(&self) -> impl Iterator<Item = &RtpPacket> {
        self.packets
            .iter()
            .filter(move |p| p.src.port() == self.port)
    }

    /// Received packets by payload type.
    pub fn received_by_payload_type(&self) -> BTreeMap<u8, u64> {
        count_by(self.received(), |p| p.payload_type)
    }

    /// Sent packets by payload type.
    pub fn sent_by_payload_type(&self) -> BTreeMap<u8, u64> {
        count_by(self.sent(), |p| p.payload_type)
    }

    /// Received packets by SSRC (one per call and stream).
    pub fn received_by_ssrc(&self) -> BTreeMap<u32, u64> {
        count_by(self.received(), |p| p.ssrc)
    }
}

fn count_by<'a, K: Ord>(
    packets: impl Iterator<Item = &'a RtpPacket>,
    key: impl Fn(&RtpPacket) -> K,
) -> BTreeMap<K, u64> {
    let mut m = BTreeMap::new();
    for p in packets {
        *m.entry(key(p)).or_insert(0) += 1;
    }
    m
}

impl fmt::Display for RtpStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "port {}: received {} {:?}, sent {} {:?}",
            self.port,
            self.received().count(),
            self.received_by_payload_type(),
            self.sent().count(),
            self.sent_by_payload_type()
        )
    }
}

/// Parses a classic pcap file (as `dumpcap -P` writes it) into RTP packets.
/// Link types: Ethernet (what `lo` gives), Linux cooked v1/v2, BSD null.
pub(super) fn parse_pcap(bytes: &[u8], started: SystemTime) -> Vec<RtpPacket> {
    let u32_at = |b: &[u8], i: usize, le: bool| {
        let a = [b[i], b[i + 1], b[i + 2], b[i + 3]];
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    if bytes.len() < 24 {
        return Vec::new();
    }
    let le = match &bytes[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] => false,
        _ => return Vec::new(),
    };
    let link_header = match u32_at(bytes, 20, le) {
        1 => 14,   // Ethernet
        113 => 16, // Linux cooked
        276 => 20, // Linux cooked v2
        0 => 4,    // BSD loopback
        _ => return Vec::new(),
    };
    let epoch = started.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let mut out = Vec::new();
    let mut i = 24;
    while i + 16 <= bytes.len() {
        let sec = u64::from(u32_at(bytes, i, le));
        let usec = u64::from(u32_at(bytes, i + 4, le));
        let len = u32_at(bytes, i + 8, le) as usize;
        let Some(frame) = bytes.get(i + 16..i + 16 + len) else {
            break;
        };
        i += 16 + len;
        let at = Duration::from_micros(sec * 1_000_000 + usec).saturating_sub(epoch);
        if let Some(p) = frame
            .get(link_header..)
            .and_then(|ip| parse_ipv4_rtp(ip, at))
        {
            out.push(p);
        }
    }
    out
}

fn parse_ipv4_rtp(ip: &[u8], at: Duration) -> Option<RtpPacket> {
    if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 17 {
        return None;
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let udp = ip.get(ihl..)?;
    if udp.len() < 8 {
        return None;
    }
    let port = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
    let addr = |b: &[u8], p: u16| SocketAddr::from(([b[0], b[1], b[2], b[3]], p));
    let src = addr(&ip[12..16], port(&udp[0..2]));
    let dst = addr(&ip[16..20], port(&udp[2..4]));
    let rtp = &udp[8..];
    if rtp.len() < 12 || rtp[0] >> 6 != 2 {
        return None;
    }
    let csrc = usize::from(rtp[0] & 0x0f) * 4;
    let mut start = 12 + csrc;
    if rtp[0] & 0x10 != 0 {
        let ext = rtp.get(start + 2..start + 4)?;
        start += 4 + usize::from(u16::from_be_bytes([ext[0], ext[1]])) * 4;
    }
    Some(RtpPacket {
        at,
        src,
        dst,
        marker: rtp[1] & 0x80 != 0,
        payload_type: rtp[1] & 0x7f,
        seq: u16::from_be_bytes([rtp[2], rtp[3]]),
        timestamp: u32::from_be_bytes([rtp[4], rtp[5], rtp[6], rtp[7]]),
        ssrc: u32::from_be_bytes([rtp[8], rtp[9], rtp[10], rtp[11]]),
        payload: rtp.get(start..)?.to_vec(),
    })
}
