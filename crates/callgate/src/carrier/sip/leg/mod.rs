//! The SIP/RTP leg: one INVITE dialog (signalling through the SIP server
//! task, [`super::ingress`]) and its RTP media task ([`media`]).
//!
//! Format: the codec the INVITE's offer and `sip.codecs` agree on, PCMU
//! (μ-law) or PCMA (A-law) at 8 kHz — the call's STT and TTS are opened in
//! it, so nothing is transcoded; a codec a re-INVITE changes to later is
//! converted at the leg. The leg has no media until
//! [`Leg::open_media`]: only then is an RTP port leased and the `200 OK`
//! sent, so a refused call never holds one. Marks are reported
//! [`LegEvent::Played`] by the leg's own playout clock. Transfer is a
//! `REFER` (then `BYE`), hang-up a `BYE` with a `Reason`; a call not yet
//! answered is refused by `sip.overflow` (`503` + `Retry-After`, or `302`
//! to `sip.human_queue_uri`).

mod finish;
pub mod media;
#[cfg(test)]
mod media_tests;
pub mod ports;
pub mod q850;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::carrier::sip::ua::sdp::{self, Negotiated, SessionDescription};
use crate::carrier::sip::ua::{CallKey, TxnKey};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::config::{SipConfig, SipOverflow};
use crate::leg::{Finish, Finished, Leg, LegEvent, LegFormat, LegStats};
use ports::RtpPorts;

/// The codecs `sip.codecs` lists, as SDP codecs, in its order of
/// preference (names validated at load against
/// [`SipConfig::CODEC_NAMES`]).
pub fn codecs(cfg: &SipConfig) -> Vec<sdp::Codec> {
    cfg.codecs
        .iter()
        .filter_map(|c| sdp::Codec::from_name(c))
        .collect()
}

/// Headers of a response or request: static names, owned values.
pub type Headers = Vec<(&'static str, String)>;

/// From the SIP server task to one call.
#[derive(Debug, Clone, PartialEq)]
pub enum Signal {
    Cancelled,
    Confirmed,
    AckTimeout,
    Reinvite {
        txn: TxnKey,
        offer: Vec<u8>,
    },
    Bye,
    Dtmf(char),
    ByeDone(Option<u16>),
    ReferAnswered(Option<u16>),
    ReferNotify {
        status: Option<u16>,
        terminated: bool,
    },
}

/// From a call to the SIP server task.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `180 Ringing` while the call is queued.
    Ringing,
    Accept(Vec<u8>),
    Reject(u16, Headers),
    AnswerReinvite(TxnKey, Result<Vec<u8>, (u16, Headers)>),
    Bye(Option<String>),
    Refer(String),
    /// The call is done with its dialog.
    Release,
}

/// What every SIP call shares: settings, the port pool, our address.
pub struct SipShared {
    pub cfg: SipConfig,
    pub ports: RtpPorts,
    pub local_ip: IpAddr,
}

/// A call's line to the SIP server task. Commands are few per call (an
/// answer, a BYE or REFER, a release), so the channel is unbounded: its
/// length is bounded by the number of calls times a handful.
pub struct ServerLink {
    pub key: CallKey,
    pub tx: mpsc::UnboundedSender<(CallKey, Command)>,
}

impl ServerLink {
    fn send(&self, c: Command) {
        // The server task outlives every call; if it is gone the process is
        // shutting down and there is no one to tell.
        let _ = self.tx.send((self.key, c));
    }
}

/// One SIP call leg. See the module documentation.
pub struct SipLeg {
    link: ServerLink,
    signals: mpsc::Receiver<Signal>,
    shared: Arc<SipShared>,
    offer: SessionDescription,
    negotiated: Negotiated,
    format: LegFormat,
    session_version: u64,
    session_id: u64,
    media: Option<media::Media>,
    /// Our RTP port, once media is open.
    port: u16,
    /// Events found while reading signalling, not yet delivered.
    pending: std::collections::VecDeque<LegEvent>,
    ended: bool,
    stats: LegStats,
}

impl SipLeg {
    pub fn new(
        link: ServerLink,
        signals: mpsc::Receiver<Signal>,
        shared: Arc<SipShared>,
        offer: SessionDescription,
        negotiated: Negotiated,
    ) -> SipLeg {
        let format = match negotiated.codec {
            sdp::Codec::Pcmu => LegFormat::Mulaw8k,
            sdp::Codec::Pcma => LegFormat::Alaw8k,
        };
        SipLeg {
            session_id: link.key.0 ^ 0x5eed,
            link,
            signals,
            shared,
            offer,
            negotiated,
            format,
            session_version: 1,
            media: None,
            port: 0,
            pending: std::collections::VecDeque::new(),
            ended: false,
            stats: LegStats::default(),
        }
    }

    fn answer_sdp(&self) -> Vec<u8> {
        let port = self.port;
        let params = sdp::AnswerParams {
            origin_username: "callgate",
            session_id: self.session_id,
            version: self.session_version,
            local_ip: self.shared.local_ip,
            local_rtp_port: port,
            session_name: "callgate",
        };
        sdp::answer(&self.offer, &self.negotiated, &params).into_bytes()
    }

    fn media_params(&self) -> media::Params {
        let n = &self.negotiated;
        media::Params {
            codec: n.codec,
            payload_type: n.payload_type,
            dtmf_payload_type: n.dtmf_payload_type,
            remote_rtp: n.remote_rtp,
            remote_rtcp: n.remote_rtcp,
            on_hold: n.on_hold,
            we_send: n.should_send(),
        }
    }

    /// A signalling event as the call sees it (`None`: handled here).
    fn on_signal(&mut self, s: Signal) -> Option<LegEvent> {
        match s {
            Signal::Cancelled | Signal::Bye => Some(LegEvent::Hangup),
            // RFC 3261 §13.3.1.4: a UAS whose 2xx is never ACKed ends the
            // dialog with BYE (a violation is finished by BYE here).
            Signal::AckTimeout => Some(LegEvent::Violation(crate::leg::Violation {
                kind: "no_ack",
                detail: "no ACK for our 200 OK within 64·T1".into(),
            })),
            Signal::Dtmf(d) => Some(LegEvent::Dtmf(d)),
            Signal::Reinvite { txn, offer } => {
                self.reinvite(txn, &offer);
                None
            }
            Signal::Confirmed
            | Signal::ByeDone(_)
            | Signal::ReferAnswered(_)
            | Signal::ReferNotify { .. } => None,
        }
    }

    /// Answers a re-INVITE with the *current* session: the codec kept when
    /// still offered, the hold state as offered; an offer we cannot take
    /// gets `488` and the call goes on as it was.
    fn reinvite(&mut self, txn: TxnKey, body: &[u8]) {
        let codecs = codecs(&self.shared.cfg);
        let result = sdp::parse(body)
            .map_err(|e| (399, e.to_string()))
            .and_then(|offer| {
                sdp::negotiate(&offer, &codecs, Some(self.negotiated.codec))
                    .map(|n| (offer, n))
                    .map_err(|e| (e.warning_code(), e.to_string()))
            });
        match result {
            Ok((offer, n)) => {
                let changed = n != self.negotiated;
                info!(
                    codec = n.codec.name(),
                    on_hold = n.on_hold,
                    changed,
                    "re-INVITE answered"
                );
                self.offer = offer;
                self.negotiated = n;
                if changed {
                    self.session_version += 1;
                }
                if let Some(m) = &self.media {
                    let _ = m.ctl.send(media::Ctl::Update(self.media_params()));
                }
                let sdp = self.answer_sdp();
                self.link.send(Command::AnswerReinvite(txn, Ok(sdp)));
            }
            Err((code, why)) => {
                warn!(why = %why, "re-INVITE refused with 488; the call continues as it was");
                let warning = format!("{code} callgate \"{}\"", why.replace('"', "'"));
                self.link.send(Command::AnswerReinvite(
                    txn,
                    Err((488, vec![("Warning", warning)])),
                ));
            }
        }
    }

    async fn next_signal(&mut self) -> LegEvent {
        loop {
            let s = match &mut self.media {
                Some(m) => tokio::select! {
                    s = self.signals.recv() => s,
                    ev = m.events.recv() => match ev {
                        Some(ev) => return ev,
                        None => return LegEvent::Gone("media task ended".into()),
                    },
                },
                None => self.signals.recv().await,
            };
            let Some(s) = s else {
                return LegEvent::Gone("SIP server stopped".into());
            };
            if let Some(ev) = self.on_signal(s) {
                return ev;
            }
        }
    }
}

impl Leg for SipLeg {
    fn format(&self) -> LegFormat {
        self.format
    }

    async fn next_event(&mut self) -> LegEvent {
        if self.ended {
            return std::future::pending().await;
        }
        let ev = match self.pending.pop_front() {
            Some(ev) => ev,
            None => self.next_signal().await,
        };
        self.count(&ev);
        ev
    }

    fn ready_events(&mut self) -> Vec<LegEvent> {
        let mut out: Vec<LegEvent> = self.pending.drain(..).collect();
        while let Ok(s) = self.signals.try_recv() {
            out.extend(self.on_signal(s));
        }
        if let Some(m) = &mut self.media {
            while let Ok(ev) = m.events.try_recv() {
                if !matches!(ev, LegEvent::Audio(_)) {
                    out.push(ev);
                }
            }
        }
        if out.iter().any(LegEvent::is_terminal) {
            self.ended = true;
        }
        out
    }

    fn want_audio(&mut self) {
        if let Some(m) = &self.media {
            let _ = m.ctl.send(media::Ctl::WantAudio);
        }
    }

    fn play(&mut self, audio: &[u8]) {
        if let Some(m) = &self.media {
            let fb = self.format.frame_bytes();
            lock(&m.out).push(audio, fb);
        }
    }

    fn mark(&mut self, name: &str) {
        match &self.media {
            Some(m) => lock(&m.out).mark(name),
            // Nothing plays before the answer: the mark is reached at once.
            None => self.pending.push_back(LegEvent::Played(name.to_string())),
        }
    }

    fn clear(&mut self) {
        if let Some(m) = &self.media {
            let marks = lock(&m.out).clear();
            self.pending.extend(marks.into_iter().map(LegEvent::Played));
        }
    }

    fn stats(&self) -> LegStats {
        let mut s = self.stats;
        if let Some(m) = &self.media {
            let r = lock(&m.report);
            s.frames_out = r.packets_out;
            s.frames_dropped = lock(&m.out).dropped_frames;
        }
        s
    }

    fn transport_report(&self) -> Option<serde_json::Value> {
        let m = self.media.as_ref()?;
        serde_json::to_value(&*lock(&m.report)).ok()
    }

    async fn open_media(&mut self) -> Result<(), LegEvent> {
        if self.media.is_some() {
            return Ok(());
        }
        // A CANCEL that came while the call waited wins.
        let early: Vec<LegEvent> = self.ready_events();
        if let Some(ev) = early.iter().find(|e| e.is_terminal()) {
            return Err(ev.clone());
        }
        self.pending.extend(early);
        self.ended = false;
        let Some(lease) = self.shared.ports.lease() else {
            warn!(
                in_use = self.shared.ports.in_use(),
                "no RTP port free: answering 503"
            );
            let retry = self.shared.cfg.retry_after_s.to_string();
            self.link
                .send(Command::Reject(503, vec![("Retry-After", retry)]));
            self.ended = true;
            return Err(LegEvent::Gone("no RTP port free".into()));
        };
        self.port = lease.port;
        let cfg = &self.shared.cfg;
        let settings = media::Settings {
            format: self.format,
            rtp_timeout: Duration::from_millis(cfg.rtp_timeout_ms),
            rtcp_interval: Duration::from_millis(cfg.rtcp_interval_ms.max(500)),
            jitter_max_frames: (cfg.jitter_max_ms / 20).max(1),
        };
        self.media = Some(media::start(lease, self.media_params(), settings));
        let sdp = self.answer_sdp();
        self.link.send(Command::Accept(sdp));
        Ok(())
    }

    fn prompt_before_refusal(&self) -> bool {
        self.shared.cfg.overflow == SipOverflow::Refer
    }

    fn has_media(&self) -> bool {
        self.media.is_some()
    }

    fn queued(&mut self) {
        self.link.send(Command::Ringing);
    }

    async fn finish(self, how: Finish, bound: Duration) -> Finished {
        finish::finish(self, how, bound).await
    }
}

impl SipLeg {
    fn count(&mut self, ev: &LegEvent) {
        match ev {
            LegEvent::Audio(_) => self.stats.frames_in += 1,
            e if e.is_terminal() => self.ended = true,
            _ => {}
        }
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod codec_names {
    use super::*;

    #[test]
    fn the_config_names_are_exactly_the_sdp_codecs() {
        for name in SipConfig::CODEC_NAMES {
            let codec = sdp::Codec::from_name(name).expect(name);
            assert_eq!(codec.name(), name);
        }
        for codec in [sdp::Codec::Pcmu, sdp::Codec::Pcma] {
            assert!(SipConfig::CODEC_NAMES.contains(&codec.name()));
        }
        let cfg = SipConfig {
            codecs: vec!["pcma".into(), "PCMU".into()],
            ..SipConfig::default()
        };
        assert_eq!(codecs(&cfg), [sdp::Codec::Pcma, sdp::Codec::Pcmu]);
    }
}
