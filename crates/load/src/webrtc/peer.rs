//! One WebRTC caller's peer connection: a str0m `Rtc` (sans-IO: datagrams
//! and time in, transmits and events out) and the call's own UDP socket.
//!
//! What it is: the browser's side of `docs/webrtc.md`'s media. Full ICE as
//! the *controlling* agent (the server is ICE-lite: it answers checks,
//! never sends them), one host candidate — the address of the interface
//! that reaches the server — one audio transceiver, `sendrecv`, Opus only.
//! str0m runs the checks, nominates the pair, keeps consent fresh (RFC
//! 7675) and does DTLS-SRTP.
//!
//! How to drive it: [`Peer::offer`], POST the offer, [`Peer::accept`] the
//! answer; then feed it every datagram of [`Peer::socket`]
//! ([`Peer::receive`]) and its [`Peer::deadline`] ([`Peer::timeout`]), and
//! [`Peer::write`] one Opus packet per 20 ms once [`PeerEvent::Connected`].
//! Every one of those mutations drains str0m to its next timeout before it
//! returns (str0m's single-mutation invariant), sending its transmits and
//! returning its events.
//!
//! What it never does: block on the socket (a datagram the kernel cannot
//! take now is dropped and counted, as UDP would), trickle, restart ICE or
//! renegotiate.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use str0m::change::{SdpAnswer, SdpPendingOffer};
use str0m::format::Codec as RtpCodec;
use str0m::media::{Direction, Frequency, MediaKind, MediaTime, Mid, Pt};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Event, IceConnectionState, Input, Output, Rtc, RtcConfig};
use tokio::net::UdpSocket;

/// What the peer connection reports to its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerEvent {
    /// ICE and DTLS are up: media flows.
    Connected,
    /// One Opus packet from the server at RTP time `ts` (48 kHz).
    Media { ts: u64, data: Arc<[u8]> },
    /// str0m's ICE agent lost the pair (it may come back).
    IceDisconnected,
    /// str0m failed; the connection is unusable.
    Failed(String),
}

/// Counts for the call's log line.
#[derive(Debug, Default, Clone, Copy)]
pub struct PeerStats {
    pub datagrams_in: u64,
    pub datagrams_out: u64,
    /// Transmits the socket could not take at once.
    pub send_dropped: u64,
    /// Datagrams str0m refused.
    pub malformed: u64,
    pub packets_out: u64,
    pub packets_in: u64,
}

/// One call's `Rtc` and socket.
pub struct Peer {
    rtc: Rtc,
    socket: Arc<UdpSocket>,
    local: SocketAddr,
    mid: Mid,
    pending: Option<SdpPendingOffer>,
    pt: Option<Pt>,
    deadline: Instant,
    pub stats: PeerStats,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("local", &self.local)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// The local address that routes to `server` (no packet is sent: a UDP
/// `connect` only picks the route), loopback when that cannot be told.
pub fn local_ip_towards(server: SocketAddr) -> IpAddr {
    let unspecified: SocketAddr = match server {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    std::net::UdpSocket::bind(unspecified)
        .and_then(|s| s.connect(server).and_then(|()| s.local_addr()))
        .map(|a| a.ip())
        .ok()
        .filter(|ip| !ip.is_unspecified())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

impl Peer {
    /// Binds a socket on `ip`, builds the `Rtc` and makes the offer.
    ///
    /// # Errors
    /// The socket could not be bound, or str0m refused the candidate or
    /// the change (a message for the call's record).
    pub async fn offer(ip: IpAddr) -> Result<(Peer, String), String> {
        let socket = UdpSocket::bind((ip, 0))
            .await
            .map_err(|e| format!("binding a UDP socket on {ip}: {e}"))?;
        let local = socket
            .local_addr()
            .map_err(|e| format!("the UDP socket's address: {e}"))?;
        let now = Instant::now();
        let mut rtc = RtcConfig::new()
            .clear_codecs()
            .enable_opus(true, false)
            .build(now);
        let cand = Candidate::host(local, "udp").map_err(|e| format!("our candidate: {e}"))?;
        rtc.add_local_candidate(cand);
        let mut change = rtc.sdp_api();
        let mid = change.add_media(MediaKind::Audio, Direction::SendRecv, None, None, None);
        let (offer, pending) = change
            .apply()
            .ok_or_else(|| "str0m made no offer".to_string())?;
        let mut peer = Peer {
            rtc,
            socket: Arc::new(socket),
            local,
            mid,
            pending: Some(pending),
            pt: None,
            deadline: now,
            stats: PeerStats::default(),
        };
        // Adding the candidate and the media were mutations: drain.
        let _ = peer.drain();
        Ok((peer, offer.to_sdp_string()))
    }

    /// The call's socket (for the driver's receive).
    pub fn socket(&self) -> Arc<UdpSocket> {
        Arc::clone(&self.socket)
    }

    /// The address of the call's socket (its host candidate).
    pub fn local(&self) -> SocketAddr {
        self.local
    }

    /// When str0m next wants [`Peer::timeout`].
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Applies the server's answer.
    ///
    /// # Errors
    /// The answer is not SDP str0m accepts for our offer, or negotiated no
    /// Opus.
    pub fn accept(&mut self, answer: &str) -> Result<Vec<PeerEvent>, String> {
        let answer =
            SdpAnswer::from_sdp_string(answer).map_err(|e| format!("unparsable answer: {e}"))?;
        let pending = self
            .pending
            .take()
            .ok_or("the offer was already answered")?;
        self.rtc
            .sdp_api()
            .accept_answer(pending, answer)
            .map_err(|e| format!("answer not acceptable: {e}"))?;
        let events = self.drain();
        self.pt = self.rtc.writer(self.mid).and_then(|w| {
            w.payload_params()
                .find(|p| p.spec().codec == RtpCodec::Opus)
                .map(|p| p.pt())
        });
        match self.pt {
            Some(_) => Ok(events),
            None => Err("the answer negotiated no Opus".into()),
        }
    }

    /// A datagram from `from` arrived at `at`.
    pub fn receive(&mut self, at: Instant, from: SocketAddr, bytes: &[u8]) -> Vec<PeerEvent> {
        self.stats.datagrams_in += 1;
        let Ok(contents) = bytes.try_into() else {
            self.stats.malformed += 1;
            return Vec::new();
        };
        let input = Input::Receive(
            at,
            Receive {
                proto: Protocol::Udp,
                source: from,
                destination: self.local,
                contents,
            },
        );
        if self.rtc.handle_input(input).is_err() {
            self.stats.malformed += 1;
        }
        self.drain()
    }

    /// Time has passed.
    pub fn timeout(&mut self, now: Instant) -> Vec<PeerEvent> {
        if let Err(e) = self.rtc.handle_input(Input::Timeout(now)) {
            return vec![PeerEvent::Failed(format!("WebRTC stack error: {e}"))];
        }
        self.drain()
    }

    /// Sends one Opus packet at RTP time `rtp` (48 kHz units).
    pub fn write(&mut self, now: Instant, rtp: u64, packet: Vec<u8>) -> Vec<PeerEvent> {
        let Some(pt) = self.pt else {
            return Vec::new();
        };
        let time = MediaTime::new(rtp, Frequency::FORTY_EIGHT_KHZ);
        let sent = self
            .rtc
            .writer(self.mid)
            .map(|w| w.write(pt, now, time, packet).is_ok());
        match sent {
            Some(true) => self.stats.packets_out += 1,
            _ => self.stats.send_dropped += 1,
        }
        self.drain()
    }

    /// Stops the connection (no more output).
    pub fn close(&mut self) {
        self.rtc.disconnect();
    }

    /// Sends str0m's transmits and collects its events until it asks for
    /// time.
    fn drain(&mut self) -> Vec<PeerEvent> {
        let mut events = Vec::new();
        loop {
            match self.rtc.poll_output() {
                Ok(Output::Timeout(t)) => {
                    self.deadline = t;
                    return events;
                }
                Ok(Output::Transmit(t)) => {
                    match self.socket.try_send_to(&t.contents, t.destination) {
                        Ok(_) => self.stats.datagrams_out += 1,
                        Err(_) => self.stats.send_dropped += 1,
                    }
                }
                Ok(Output::Event(e)) => events.extend(self.event(e)),
                Err(e) => {
                    events.push(PeerEvent::Failed(format!("WebRTC stack error: {e}")));
                    // Nothing more comes out of a failed Rtc; wake in a while.
                    self.deadline = Instant::now() + std::time::Duration::from_millis(100);
                    return events;
                }
            }
        }
    }

    fn event(&mut self, e: Event) -> Option<PeerEvent> {
        match e {
            Event::Connected => Some(PeerEvent::Connected),
            Event::IceConnectionStateChange(IceConnectionState::Disconnected) => {
                Some(PeerEvent::IceDisconnected)
            }
            Event::MediaData(d) => {
                self.stats.packets_in += 1;
                Some(PeerEvent::Media {
                    ts: d.time.numer(),
                    data: d.data,
                })
            }
            _ => None,
        }
    }
}
