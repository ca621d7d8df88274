//! One call's RTP: a task that owns the leased sockets and runs the leg's
//! own 20 ms playout clock.
//!
//! Every tick it sends one packet — the next 20 ms of queued audio, or
//! silence when nothing is queued, so a peer hears RTP from the moment the
//! call is answered and never tears it down for want of media — reports
//! the marks that playout reached as [`LegEvent::Played`], and takes one
//! frame out of the jitter buffer for the call (silence for a lost frame,
//! or while the peer holds the call). Inbound packets are demultiplexed
//! (RTP, RTCP on either port, RFC 4733 events by payload type); a payload
//! type that was not negotiated is dropped and counted, never decoded as
//! something else. Answers go to where the peer's packets come from
//! (symmetric RTP, for NAT). No RTP and no RTCP for `rtp_timeout` while
//! the peer is not holding the call ends it with [`LegEvent::MediaTimeout`].
//!
//! Outbound audio waits in [`Outbound`], shared with the leg under a mutex
//! (no wake-up per frame played): bounded to [`crate::leg::outbound::OUT_MAX_MS`] of audio; past
//! that, new audio is dropped and counted. Events to the call go through a
//! bounded channel: a full channel drops the newest audio frame (counted);
//! terminal events wait for room.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::carrier::sip::ua::sdp::Codec;
use media::g711;
use media::rtp::{dtmf, jitter, packet, rtcp, sender::RtpSender, stats::ReceiverStats};
use tokio::sync::mpsc;

use super::ports::PortLease;
use crate::leg::outbound::Outbound;
use crate::leg::{LegEvent, LegFormat};
use crate::metrics as m;

/// What the media path negotiated, updated by re-INVITEs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    pub codec: Codec,
    pub payload_type: u8,
    pub dtmf_payload_type: Option<u8>,
    pub remote_rtp: SocketAddr,
    pub remote_rtcp: SocketAddr,
    /// The peer holds the call (offer sendonly/inactive or c=0.0.0.0): we
    /// send nothing, feed the call silence, and do not time out.
    pub on_hold: bool,
    /// We may send (our direction after answering).
    pub we_send: bool,
}

/// Fixed for the call's life.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// The call's format (its STT/TTS were opened in it); a codec changed
    /// by re-INVITE is converted to and from it here.
    pub format: LegFormat,
    pub rtp_timeout: Duration,
    pub rtcp_interval: Duration,
    pub jitter_max_frames: u32,
}

/// What the media path counted (the receipt's `media.rtp`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RtpReport {
    pub codec: &'static str,
    pub packets_in: u64,
    pub packets_out: u64,
    /// From our receiver statistics — the figures our RTCP reports carry.
    pub lost: u64,
    pub expected: u64,
    pub jitter_ms: f64,
    pub max_jitter_ms: f64,
    /// The 95th percentile of each packet's transit difference `|D|`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jitter_p95_ms: Option<f64>,
    pub late: u64,
    pub duplicates: u64,
    pub concealed: u64,
    /// Frames the jitter buffer dropped: over its bound, or trimmed to
    /// bring its delay back down.
    pub overflowed: u64,
    pub wrong_payload_type: u64,
    pub malformed: u64,
    pub dtmf_events: u64,
    pub rtcp_sent: u64,
    pub rtcp_received: u64,
    /// The peer's own reports about our stream, when it sent any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<PeerReport>,
    /// Times the answer address followed the peer's packets elsewhere.
    pub relatched: u64,
}

/// The last receiver report the peer sent about our stream.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct PeerReport {
    pub reports: u64,
    pub fraction_lost: f64,
    pub cumulative_lost: i64,
    pub jitter_ms: f64,
}

/// Commands from the leg.
#[derive(Debug)]
pub enum Ctl {
    Update(Params),
    WantAudio,
}

/// The leg's handle on its media task. Dropping it stops the task (which
/// then drops the sockets and the port lease).
pub struct Media {
    pub out: Arc<Mutex<Outbound>>,
    pub events: mpsc::Receiver<LegEvent>,
    pub ctl: mpsc::UnboundedSender<Ctl>,
    pub report: Arc<Mutex<RtpReport>>,
    pub task: tokio::task::JoinHandle<()>,
}

/// Starts the media task on `lease`.
pub fn start(lease: PortLease, params: Params, settings: Settings) -> Media {
    let out = Arc::new(Mutex::new(Outbound::default()));
    let report = Arc::new(Mutex::new(RtpReport {
        codec: params.codec.name(),
        ..RtpReport::default()
    }));
    let (tx, events) = mpsc::channel(64);
    let (ctl, ctl_rx) = mpsc::unbounded_channel();
    let task = MediaTask::new(
        lease,
        params,
        settings,
        Arc::clone(&out),
        Arc::clone(&report),
        tx,
    );
    let task = tokio::spawn(task.run(ctl_rx));
    Media {
        out,
        events,
        ctl,
        report,
        task,
    }
}

struct MediaTask {
    lease: PortLease,
    params: Params,
    settings: Settings,
    out: Arc<Mutex<Outbound>>,
    report: Arc<Mutex<RtpReport>>,
    events: mpsc::Sender<LegEvent>,
    sender: RtpSender,
    jitter: jitter::JitterBuffer,
    stats: ReceiverStats,
    dtmf: dtmf::DtmfReceiver,
    ssrc: u32,
    peer_ssrc: Option<u32>,
    last_heard: Instant,
    next_rtcp: Instant,
    last_sr: Option<(u32, Instant)>,
    was_silent: bool,
    want_audio: bool,
    timed_out: bool,
    counts: RtpReport,
}

impl MediaTask {
    fn new(
        lease: PortLease,
        params: Params,
        settings: Settings,
        out: Arc<Mutex<Outbound>>,
        report: Arc<Mutex<RtpReport>>,
        events: mpsc::Sender<LegEvent>,
    ) -> MediaTask {
        let seed = seed();
        let ssrc = seed as u32;
        let now = Instant::now();
        MediaTask {
            sender: RtpSender::new(
                ssrc,
                params.payload_type,
                (seed >> 32) as u16,
                (seed >> 16) as u32,
            ),
            jitter: jitter_buffer(&settings, params.codec),
            stats: ReceiverStats::new(8_000),
            dtmf: dtmf::DtmfReceiver::default(),
            ssrc,
            peer_ssrc: None,
            last_heard: now,
            next_rtcp: now + settings.rtcp_interval,
            last_sr: None,
            was_silent: true,
            want_audio: false,
            timed_out: false,
            counts: RtpReport {
                codec: params.codec.name(),
                ..RtpReport::default()
            },
            lease,
            params,
            settings,
            out,
            report,
            events,
        }
    }

    async fn run(mut self, mut ctl: mpsc::UnboundedReceiver<Ctl>) {
        let mut tick = tokio::time::interval(media::format::FRAME);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let (mut rtp_buf, mut rtcp_buf) = (vec![0u8; 2048], vec![0u8; 2048]);
        loop {
            tokio::select! {
                _ = tick.tick() => self.on_tick(Instant::now()).await,
                r = self.lease.rtp.recv_from(&mut rtp_buf) => {
                    if let Ok((n, from)) = r {
                        let data = rtp_buf[..n].to_vec();
                        self.on_datagram(&data, from, Instant::now());
                    }
                }
                r = self.lease.rtcp.recv_from(&mut rtcp_buf) => {
                    if let Ok((n, from)) = r {
                        let data = rtcp_buf[..n].to_vec();
                        self.on_rtcp(&data, from, Instant::now());
                    }
                }
                c = ctl.recv() => match c {
                    Some(Ctl::Update(p)) => self.update(p),
                    Some(Ctl::WantAudio) => self.want_audio = true,
                    None => break,
                },
            }
        }
        self.publish();
    }

    fn update(&mut self, p: Params) {
        if p.payload_type != self.params.payload_type {
            self.sender.set_payload_type(p.payload_type);
            // Gaps are filled with the new codec's silence.
            self.jitter = jitter_buffer(&self.settings, p.codec);
        }
        self.counts.codec = p.codec.name();
        self.params = p;
        // A held call that resumes gets a fresh timeout window.
        self.last_heard = Instant::now();
    }

    async fn on_tick(&mut self, now: Instant) {
        self.play_one().await;
        self.hear_one().await;
        if now >= self.next_rtcp {
            self.next_rtcp = now + self.settings.rtcp_interval;
            self.send_report(now);
        }
        let quiet = now.duration_since(self.last_heard);
        if !self.params.on_hold && !self.timed_out && quiet >= self.settings.rtp_timeout {
            self.timed_out = true;
            metrics::counter!(m::RTP_TIMEOUTS).increment(1);
            let _ = self
                .events
                .send(LegEvent::MediaTimeout(self.settings.rtp_timeout))
                .await;
        }
        self.publish();
    }

    /// Sends the next 20 ms (queued audio, else silence) and reports the
    /// marks it reached.
    async fn play_one(&mut self) {
        let fb = self.settings.format.frame_bytes();
        let (frame, reached) = {
            let mut out = self
                .out
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            out.take(fb, call_silence(self.settings.format))
        };
        for name in reached {
            let _ = self.events.send(LegEvent::Played(name)).await;
        }
        if self.params.on_hold || !self.params.we_send {
            self.sender.skip(160);
            return;
        }
        let talkspurt = frame.is_some() && self.was_silent;
        self.was_silent = frame.is_none();
        let payload = match frame {
            Some(f) => to_wire(&f, self.settings.format, self.params.codec),
            None => vec![wire_silence(self.params.codec); 160],
        };
        let mut pkt = Vec::with_capacity(12 + payload.len());
        self.sender.audio(&payload, talkspurt, &mut pkt);
        // A full socket buffer drops the packet (not counted as sent).
        self.counts.packets_out += u64::from(send(&self.lease.rtp, &pkt, self.params.remote_rtp));
    }

    /// Gives the call one frame: the jitter buffer's, or silence.
    async fn hear_one(&mut self) {
        let playout = self.jitter.tick(Instant::now());
        if !self.want_audio {
            return;
        }
        if matches!(playout, Some(jitter::Playout::Concealed)) {
            metrics::counter!(m::RTP_CONCEALED).increment(1);
        }
        let frame = match playout {
            Some(jitter::Playout::Frame(p)) if !self.params.on_hold => {
                from_wire(&p, self.params.codec, self.settings.format)
            }
            _ => vec![call_silence(self.settings.format); self.settings.format.frame_bytes()],
        };
        if self.events.try_send(LegEvent::Audio(frame)).is_err() {
            metrics::counter!(m::RTP_DROPPED, "why" => "call_behind").increment(1);
        }
    }

    fn on_datagram(&mut self, data: &[u8], from: SocketAddr, now: Instant) {
        if packet::is_rtcp(data) {
            return self.on_rtcp(data, from, now);
        }
        let Ok(pkt) = packet::parse(data) else {
            self.counts.malformed += 1;
            metrics::counter!(m::RTP_DROPPED, "why" => "malformed").increment(1);
            return;
        };
        let h = pkt.header;
        if Some(h.payload_type) == self.params.dtmf_payload_type {
            self.heard(from, now);
            self.stats.on_event_packet(h.sequence);
            if let Some(digit) = self.dtmf.on_packet(h.timestamp, pkt.payload) {
                self.counts.dtmf_events += 1;
                let _ = self.events.try_send(LegEvent::Dtmf(digit));
            }
            return;
        }
        if h.payload_type != self.params.payload_type {
            self.counts.wrong_payload_type += 1;
            metrics::counter!(m::RTP_DROPPED, "why" => "payload_type").increment(1);
            return;
        }
        self.heard(from, now);
        if self.peer_ssrc.is_some_and(|s| s != h.ssrc) {
            self.jitter.reset();
        }
        self.peer_ssrc = Some(h.ssrc);
        self.counts.packets_in += 1;
        self.stats.on_packet(h.sequence, h.timestamp, now);
        match self.jitter.push(h.sequence, h.timestamp, pkt.payload, now) {
            jitter::Push::Late => {
                metrics::counter!(m::RTP_DROPPED, "why" => "late").increment(1);
            }
            jitter::Push::Duplicate => {
                metrics::counter!(m::RTP_DROPPED, "why" => "duplicate").increment(1);
            }
            _ => {}
        }
    }

    /// A valid packet from `from`: it proves the peer alive and, for NAT,
    /// is where our RTP goes (symmetric RTP).
    fn heard(&mut self, from: SocketAddr, now: Instant) {
        self.last_heard = now;
        if from != self.params.remote_rtp {
            self.counts.relatched += 1;
            self.params.remote_rtp = from;
        }
    }

    fn on_rtcp(&mut self, data: &[u8], from: SocketAddr, now: Instant) {
        let Ok(packets) = rtcp::parse_compound(data) else {
            self.counts.malformed += 1;
            return;
        };
        self.last_heard = now;
        self.counts.rtcp_received += 1;
        if from.port() != self.params.remote_rtp.port() {
            self.params.remote_rtcp = from;
        }
        for p in packets {
            let (ntp, blocks) = match p {
                rtcp::RtcpPacket::SenderReport { ntp, reports, .. } => (Some(ntp), reports),
                rtcp::RtcpPacket::ReceiverReport { reports, .. } => (None, reports),
                _ => continue,
            };
            if let Some(ntp) = ntp {
                self.last_sr = Some((rtcp::ntp_middle(ntp), now));
            }
            for b in blocks.iter().filter(|b| b.ssrc == self.ssrc) {
                let peer = self.counts.peer.get_or_insert_with(PeerReport::default);
                peer.reports += 1;
                peer.fraction_lost = f64::from(b.fraction_lost) / 256.0;
                peer.cumulative_lost = i64::from(b.cumulative_lost);
                peer.jitter_ms = f64::from(b.jitter) / 8.0;
            }
        }
    }

    fn send_report(&mut self, now: Instant) {
        let blocks: Vec<rtcp::ReportBlock> = self
            .peer_ssrc
            .map(|s| self.stats.report_block(s, self.last_sr, now))
            .into_iter()
            .collect();
        let s = self.sender.stats();
        let info = s.last_timestamp.map(|_| {
            s.sender_info(
                rtcp::ntp_from(SystemTime::now()),
                self.sender.next_timestamp(),
            )
        });
        let mut buf = Vec::with_capacity(128);
        rtcp::write_report(&mut buf, info, self.ssrc, &blocks, "callgate");
        self.counts.rtcp_sent += u64::from(send(&self.lease.rtcp, &buf, self.params.remote_rtcp));
    }

    /// Copies the counts where the leg reads them.
    fn publish(&mut self) {
        let sum = self.stats.summary();
        let jb = self.jitter.stats();
        self.counts.lost = sum.lost;
        self.counts.expected = sum.expected;
        self.counts.jitter_ms = sum.jitter_ms;
        self.counts.max_jitter_ms = sum.max_jitter_ms;
        self.counts.jitter_p95_ms = sum.jitter_p95_ms;
        self.counts.duplicates = sum.duplicates;
        self.counts.late = jb.late;
        self.counts.concealed = jb.concealed;
        let overflowed = jb.dropped_frames.saturating_sub(self.counts.overflowed);
        if overflowed > 0 {
            metrics::counter!(m::RTP_DROPPED, "why" => "overflow").increment(overflowed);
        }
        self.counts.overflowed = jb.dropped_frames;
        if let Ok(mut r) = self.report.lock() {
            *r = self.counts.clone();
        }
    }
}

/// Sends one datagram without waiting; whether it went.
fn send(sock: &tokio::net::UdpSocket, bytes: &[u8], to: SocketAddr) -> bool {
    sock.try_send_to(bytes, to).is_ok()
}

/// A jitter buffer whose gaps are the wire codec's silence (0xFF is
/// silence in μ-law but a loud sample in A-law).
fn jitter_buffer(settings: &Settings, codec: Codec) -> jitter::JitterBuffer {
    let cfg = jitter::JitterConfig {
        max_depth_frames: settings.jitter_max_frames,
        ..jitter::JitterConfig::default()
    };
    jitter::JitterBuffer::with_silence(cfg, wire_silence(codec))
}

fn call_silence(format: LegFormat) -> u8 {
    match format {
        LegFormat::Alaw8k => g711::ALAW_SILENCE,
        LegFormat::Mulaw8k => g711::ULAW_SILENCE,
        _ => 0,
    }
}

fn wire_silence(codec: Codec) -> u8 {
    match codec {
        Codec::Pcma => g711::ALAW_SILENCE,
        Codec::Pcmu => g711::ULAW_SILENCE,
    }
}

/// The call's format on the wire's codec (they differ only after a
/// re-INVITE changed the codec).
fn to_wire(frame: &[u8], format: LegFormat, codec: Codec) -> Vec<u8> {
    match (format, codec) {
        (LegFormat::Mulaw8k, Codec::Pcma) => g711::encode_alaw(&g711::decode_ulaw(frame)),
        (LegFormat::Alaw8k, Codec::Pcmu) => g711::encode_ulaw(&g711::decode_alaw(frame)),
        _ => frame.to_vec(),
    }
}

fn from_wire(payload: &[u8], codec: Codec, format: LegFormat) -> Vec<u8> {
    match (codec, format) {
        (Codec::Pcma, LegFormat::Mulaw8k) => g711::encode_ulaw(&g711::decode_alaw(payload)),
        (Codec::Pcmu, LegFormat::Alaw8k) => g711::encode_alaw(&g711::decode_ulaw(payload)),
        _ => payload.to_vec(),
    }
}

/// Initial SSRC, sequence number and timestamp (RFC 3550 §5.1: random).
pub fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_reached_after_the_audio_before_them_and_clear_returns_them() {
        let mut o = Outbound::default();
        o.push(&[1; 240], 160);
        o.mark("a");
        o.push(&[2; 160], 160);
        o.mark("b");
        let (f, reached) = o.take(160, 0xFF);
        assert_eq!((f.unwrap()[0], reached.len()), (1, 0));
        let (f, reached) = o.take(160, 0xFF);
        let f = f.unwrap();
        assert_eq!((f[0], f[80], reached), (1, 2, vec!["a".to_string()]));
        assert_eq!(o.clear(), vec!["b".to_string()]);
        assert_eq!(o.take(160, 0xFF), (None, vec![]));
    }

    #[test]
    fn outbound_audio_is_bounded() {
        let mut o = Outbound::default();
        for _ in 0..300 {
            o.push(&[0; 160], 160);
        }
        assert_eq!(o.dropped_frames, 50);
    }

    #[test]
    fn a_codec_change_converts_between_the_call_and_the_wire() {
        let ulaw = g711::encode_ulaw(&[1000, -1000, 0, 12000]);
        let alaw = to_wire(&ulaw, LegFormat::Mulaw8k, Codec::Pcma);
        assert_eq!(g711::decode_alaw(&alaw).len(), 4);
        let back = from_wire(&alaw, Codec::Pcma, LegFormat::Mulaw8k);
        for (a, b) in g711::decode_ulaw(&back)
            .iter()
            .zip(g711::decode_ulaw(&ulaw))
        {
            assert!((i32::from(*a) - i32::from(b)).abs() < 600);
        }
    }
}
