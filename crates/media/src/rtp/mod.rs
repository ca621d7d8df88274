//! RTP media for a SIP leg, sans-IO: G.711 over RTP (RFC 3550/3551),
//! RTCP reports, an adaptive jitter buffer and RFC 4733 DTMF.
//!
//! What it is: the pure pieces a SIP/RTP leg drives — [`packet`] (RTP
//! parsing, writing, RTP/RTCP demultiplexing), [`rtcp`] (compound SR, RR,
//! SDES, BYE; NTP time), [`stats`] (RFC 3550 receiver statistics into
//! report blocks), [`jitter`] (inbound reordering, loss concealment and
//! adaptive playout delay), [`sender`] (outbound packetization) and
//! [`dtmf`] (telephone events in both directions). The wire bytes of RTP
//! and RTCP are read and written by the `rtp-types` and `rtcp-types`
//! crates; [`packet`] and [`rtcp`] say what stays ours and why. The jitter
//! buffer, statistics, sender and DTMF are ours: they are not parsers.
//!
//! What it never does: open a socket, spawn a task, sleep or read the
//! clock. Arrival and tick times come in as `Instant`s, wall-clock time for
//! RTCP as a `SystemTime`, so a whole call's media runs on a virtual clock
//! in a test. Every buffer is bounded (the jitter buffer's overflow policy
//! is in its docs) and every length read from the wire is checked: a
//! malformed datagram is an error value, never a panic.
//!
//! How to drive it, per leg: each datagram from the socket is demuxed with
//! [`packet::is_rtcp`]; RTP goes through [`packet::parse`] into
//! [`stats::ReceiverStats::on_packet`] and [`jitter::JitterBuffer::push`]
//! (or [`dtmf::DtmfReceiver`] for the telephone-event payload type). The
//! leg's 20 ms tick calls [`jitter::JitterBuffer::tick`] for the inbound
//! frame and [`sender::RtpSender::audio`] for the outbound one; every few
//! seconds it sends [`rtcp::write_report`].
//!
//! ```
//! use std::time::{Duration, Instant, SystemTime};
//! use media::rtp::{jitter::*, packet, rtcp, sender::RtpSender, stats::ReceiverStats};
//!
//! let t0 = Instant::now();
//! let mut peer = RtpSender::new(0xBEEF, 0, 40_000, 1_234);
//! let mut jb = JitterBuffer::new(JitterConfig::default());
//! let mut rx = ReceiverStats::new(8_000);
//!
//! // One 20 ms tick: a datagram arrives, then the playout tick runs.
//! let mut datagram = Vec::new();
//! peer.audio(&[0xFF; 160], false, &mut datagram);
//! assert!(!packet::is_rtcp(&datagram));
//! let p = packet::parse(&datagram).unwrap();
//! let h = p.header;
//! rx.on_packet(h.sequence, h.timestamp, t0);
//! assert_eq!(jb.push(h.sequence, h.timestamp, p.payload, t0), Push::Queued);
//! assert_eq!(jb.tick(t0 + Duration::from_millis(5)), Some(Playout::Frame(vec![0xFF; 160])));
//!
//! // An RTCP receiver report about the peer, with our CNAME.
//! let block = rx.report_block(h.ssrc, None, t0 + Duration::from_secs(5));
//! let mut report = Vec::new();
//! rtcp::write_report(&mut report, None, 0x1234, &[block], "leg-1@callgate");
//! assert!(packet::is_rtcp(&report));
//! assert_eq!(rtcp::parse_compound(&report).unwrap().len(), 2);
//! let _ntp = rtcp::ntp_from(SystemTime::now()); // for a sender report
//! ```

pub mod dtmf;
pub mod jitter;
pub mod packet;
pub mod rtcp;
pub mod sender;
pub mod stats;

pub use dtmf::{DtmfReceiver, DtmfSender, TelephoneEvent};
pub use jitter::{JitterBuffer, JitterConfig, JitterStats, Phase, Playout, Push};
pub use packet::{RtpError, RtpHeader, RtpPacket};
pub use rtcp::{ReportBlock, RtcpError, RtcpPacket, SenderInfo};
pub use sender::{RtpSender, SenderStats};
pub use stats::{ReceiveSummary, ReceiverStats};
