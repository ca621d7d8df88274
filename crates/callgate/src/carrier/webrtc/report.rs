//! What a WebRTC session measured, for the receipt's `media.transport`:
//! the server's own counts, the RTCP figures both ways (our receiver
//! reports about the browser's stream; the browser's receiver and sender
//! reports about ours), and — kept apart — the client evidence the page
//! posted (`evidence`). Only measured fields: a figure str0m has not
//! reported yet is absent, not zero.

use serde::Serialize;
use str0m::stats::{MediaEgressStats, MediaIngressStats};

pub use crate::leg::TransportLoss as Loss;

/// RTP timestamp units per millisecond on Opus's 48 kHz clock.
const TICKS_PER_MS: f64 = 48.0;

#[derive(Debug, Clone, Default, Serialize)]
pub struct WebrtcReport {
    pub codec: &'static str,
    pub packets_in: u64,
    pub packets_out: u64,
    /// Frames libopus concealed (PLC) for packets that never came.
    pub concealed: u64,
    /// Frames recovered from the next packet's in-band FEC.
    pub fec_recovered: u64,
    /// Datagrams str0m could not take (not DTLS/SRTP/STUN it expected).
    pub malformed: u64,
    /// Datagrams the socket would not take at once (dropped, never waited).
    pub send_dropped: u64,
    /// Decoded frames dropped because the call was not reading.
    pub events_dropped: u64,
    /// From the answer to ICE connected, and to DTLS done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ice_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dtls_ms: Option<u64>,
    /// Longest time from a `clear` (barge-in) to the first outbound frame
    /// without the cleared audio, µs: the leg's own "stopped within a
    /// frame", measured at its playout clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clear_to_silence_max_us: Option<u64>,
    /// Clears performed.
    pub clears: u64,
    /// A clear not yet followed by a frame (not part of the receipt).
    #[serde(skip)]
    pub clear_at: Option<std::time::Instant>,
    /// How the transport was lost, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost: Option<Loss>,
    /// Our receiver reports about the browser's stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtcp_received: Option<Received>,
    /// The browser's receiver reports about our stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtcp_remote: Option<Remote>,
}

/// The inbound stream as our RTCP receiver reports describe it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Received {
    pub packets: u64,
    pub jitter_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_fraction: Option<f32>,
    /// What the browser's sender reports say it sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_packets: Option<u64>,
}

/// Our stream as the browser's receiver reports describe it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Remote {
    pub jitter_ms: f64,
    pub packets_lost: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_fraction: Option<f32>,
    /// What we sent, as str0m counted it at that report.
    pub packets_sent: u64,
}

impl WebrtcReport {
    pub fn new() -> WebrtcReport {
        WebrtcReport {
            codec: "opus",
            ..WebrtcReport::default()
        }
    }

    pub fn ingress(&mut self, s: &MediaIngressStats) {
        self.rtcp_received = Some(Received {
            packets: s.packets,
            jitter_ms: f64::from(s.jitter) / TICKS_PER_MS,
            loss_fraction: s.loss,
            sender_packets: s.remote.as_ref().map(|r| r.packets),
        });
    }

    pub fn egress(&mut self, s: &MediaEgressStats) {
        let Some(r) = &s.remote else {
            return;
        };
        self.rtcp_remote = Some(Remote {
            jitter_ms: f64::from(r.jitter) / TICKS_PER_MS,
            packets_lost: r.packets_lost,
            rtt_ms: s.rtt.map(|d| d.as_secs_f64() * 1_000.0),
            loss_fraction: s.loss,
            packets_sent: s.packets,
        });
    }
}
