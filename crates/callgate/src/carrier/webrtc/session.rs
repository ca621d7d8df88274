//! One WebRTC session's media: a task that owns the session's str0m `Rtc`
//! (sans-IO: datagrams and time in, transmits and events out), fed by the
//! shared socket's router, and runs the leg's own 20 ms playout clock.
//!
//! Every tick after DTLS is up it encodes one frame — the next 20 ms of
//! queued audio, or silence (after a few frames, the encoder's settled
//! silent packet again: `opus`) — to Opus and writes it, and reports the marks
//! playout reached as [`LegEvent::Played`]. Inbound Opus is decoded to the
//! call's 16 kHz L16 (concealing gaps, `opus`), only once the call wants
//! audio. Deadlines, each ending the session with a typed loss: no ICE
//! within `ice_timeout` of the answer (`ice_failed`), no DTLS within
//! `dtls_timeout` of ICE (`dtls_failed`), no STUN consent check from the
//! browser for `consent_timeout` or str0m's ICE agent reporting the pair
//! gone (`consent_lost`, RFC 7675).
//!
//! Queues: outbound audio waits in the shared [`Outbound`] (bounded, drops
//! counted); events to the call go through a bounded channel (a full
//! channel drops the newest audio frame, counted; terminal events wait);
//! the router's inbox is bounded (full: datagram dropped, counted there).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use str0m::media::{MediaKind, MediaTime, Mid, Pt};
use str0m::net::{Protocol, Receive};
use str0m::{Event, IceConnectionState, Input, Output, Rtc};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use super::opus::{Codec, FRAME_TICKS};
use super::report::{Loss, WebrtcReport};
use super::router::{Datagram, Kind, RouteGuard};
use crate::leg::LegEvent;
use crate::leg::outbound::Outbound;
use crate::metrics as m;

const FRAME: Duration = Duration::from_millis(20);
/// Bytes in one 20 ms frame of 16 kHz L16.
const FRAME_BYTES: usize = 640;
/// Bound on events waiting for the call (as on the SIP leg).
const EVENTS: usize = 64;
/// Playout more than this far behind its clock restarts from now (a
/// stalled task does not burst seconds of audio at the browser).
const MAX_LAG: Duration = Duration::from_millis(100);
/// Longest wait for room for the terminal event.
const TERMINAL_SEND: Duration = Duration::from_secs(2);
/// A consent check this long after the peer's last audio proves the peer
/// is still there (a vanished browser's last check left with its last
/// packet): only then may `call.media_stall_ms` end the call as stalled
/// media; otherwise consent decides.
const CONSENT_AFTER_AUDIO: Duration = Duration::from_millis(500);

/// Fixed for the session's life.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub ice_timeout: Duration,
    pub dtls_timeout: Duration,
    pub consent_timeout: Duration,
    /// `call.media_stall_ms`: no audio this long, while the peer keeps
    /// consent, ends the call `carrier_media_stalled`.
    pub media_stall: Duration,
    /// The offer allowed Opus in-band FEC.
    pub fec: bool,
    /// libopus encoder complexity (`webrtc.opus_complexity`).
    pub opus_complexity: u8,
    /// The payload type the offer gave Opus (str0m answers with the offer's).
    pub opus_pt: u8,
    /// Our address on the shared socket (str0m's `Receive::destination`).
    pub local: SocketAddr,
}

/// From the leg to its media task.
#[derive(Debug)]
pub enum Ctl {
    WantAudio,
    /// Finish: close DTLS and stop (the leg is being finished).
    Close,
}

/// The leg's handles on its running media task.
pub struct Media {
    pub events: mpsc::Receiver<LegEvent>,
    pub ctl: mpsc::UnboundedSender<Ctl>,
    pub out: Arc<Mutex<Outbound>>,
    pub report: Arc<Mutex<WebrtcReport>>,
    pub task: tokio::task::JoinHandle<()>,
}

/// Starts the media task for an answered session.
pub fn start(
    rtc: Rtc,
    settings: Settings,
    socket: Arc<UdpSocket>,
    inbox: mpsc::Receiver<Datagram>,
    routes: RouteGuard,
) -> Result<Media, opus::Error> {
    let (events_tx, events) = mpsc::channel(EVENTS);
    let (ctl, ctl_rx) = mpsc::unbounded_channel();
    let out = Arc::new(Mutex::new(Outbound::default()));
    let report = Arc::new(Mutex::new(WebrtcReport::new()));
    let now = Instant::now();
    let task = Task {
        rtc,
        codec: Codec::new(settings.fec, settings.opus_complexity)?,
        settings,
        socket,
        inbox,
        ctl: ctl_rx,
        events: events_tx,
        out: Arc::clone(&out),
        report: Arc::clone(&report),
        _routes: routes,
        answered: now,
        ice_up: None,
        dtls_up: false,
        last_audio: None,
        last_check: now,
        audio: None,
        want_audio: false,
        next_tick: None,
        media_time: 0,
    };
    let task = tokio::spawn(task.run());
    Ok(Media {
        events,
        ctl,
        out,
        report,
        task,
    })
}

struct Task {
    rtc: Rtc,
    codec: Codec,
    settings: Settings,
    socket: Arc<UdpSocket>,
    inbox: mpsc::Receiver<Datagram>,
    ctl: mpsc::UnboundedReceiver<Ctl>,
    events: mpsc::Sender<LegEvent>,
    out: Arc<Mutex<Outbound>>,
    report: Arc<Mutex<WebrtcReport>>,
    /// Held for the task's life: its end removes the session's routes.
    _routes: RouteGuard,
    answered: Instant,
    ice_up: Option<Instant>,
    dtls_up: bool,
    /// The peer's last audio packet (from DTLS up on, its moment).
    last_audio: Option<Instant>,
    /// The browser's last STUN binding request (its consent check).
    last_check: Instant,
    /// The audio m-line and the Opus payload type, once str0m has them.
    audio: Option<(Mid, Pt)>,
    want_audio: bool,
    next_tick: Option<Instant>,
    /// RTP time of the next outbound frame (48 kHz).
    media_time: u64,
}

/// Why the loop stopped.
enum Stop {
    Lost(Loss, String),
    /// The peer closed DTLS (close_notify: what `RTCPeerConnection.close()`
    /// sends): a hang-up, at once.
    PeerClosed,
    /// The leg asked.
    Closed,
}

impl Task {
    async fn run(mut self) {
        let terminal = match self.drive().await {
            Stop::Lost(loss, detail) => {
                metrics::counter!(m::WEBRTC_LOST, "why" => loss.as_str()).increment(1);
                lock(&self.report).lost = Some(loss);
                Some(LegEvent::TransportLost(loss, detail))
            }
            Stop::PeerClosed => Some(LegEvent::Hangup),
            Stop::Closed => None,
        };
        if let Some(ev) = terminal {
            // Terminal: waits for room (the call reads it), bounded so a
            // leg that has stopped reading cannot hold the task.
            let _ = tokio::time::timeout(TERMINAL_SEND, self.events.send(ev)).await;
        }
        self.rtc.disconnect();
        let _ = self.flush();
    }

    async fn drive(&mut self) -> Stop {
        loop {
            let next = match self.flush() {
                Ok(t) => t,
                Err(stop) => return stop,
            };
            let now = Instant::now();
            if let Some(stop) = self.check_deadlines(now) {
                return stop;
            }
            let wake = [Some(next), self.next_tick, Some(self.deadline())]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(now + FRAME);
            tokio::select! {
                d = self.inbox.recv() => match d {
                    Some(d) => self.receive(d),
                    None => return Stop::Lost(Loss::Consent, "the media socket closed".into()),
                },
                c = self.ctl.recv() => match c {
                    Some(Ctl::WantAudio) => self.want_audio = true,
                    Some(Ctl::Close) | None => return Stop::Closed,
                },
                () = tokio::time::sleep_until(wake.into()) => self.on_timer(Instant::now()),
            }
        }
    }

    fn receive(&mut self, d: Datagram) {
        if Kind::of(&d.bytes) == Kind::Stun {
            self.last_check = d.at;
        }
        let Ok(contents) = d.bytes.as_slice().try_into() else {
            lock(&self.report).malformed += 1;
            return;
        };
        let input = Input::Receive(
            d.at,
            Receive {
                proto: Protocol::Udp,
                source: d.from,
                destination: self.settings.local,
                contents,
            },
        );
        if self.rtc.handle_input(input).is_err() {
            lock(&self.report).malformed += 1;
        }
    }

    fn on_timer(&mut self, now: Instant) {
        if self.next_tick.is_some_and(|t| t <= now) {
            self.tick(now);
            // str0m's rule: drain its output after every change (the write).
            if self.flush().is_err() {
                lock(&self.report).malformed += 1;
            }
        }
        let _ = self.rtc.handle_input(Input::Timeout(now));
    }

    /// The next moment a deadline of the current phase falls due.
    fn deadline(&self) -> Instant {
        let s = &self.settings;
        match (self.ice_up, self.dtls_up) {
            (None, _) => self.answered + s.ice_timeout,
            (Some(at), false) => (at + s.dtls_timeout).min(self.last_check + s.consent_timeout),
            (Some(_), true) => {
                let consent = self.last_check + s.consent_timeout;
                self.media_deadline().map_or(consent, |m| m.min(consent))
            }
        }
    }

    /// When `call.media_stall_ms` may end the call: only once a consent
    /// check came after the peer's last audio (the peer is there but
    /// silent). Until then no deadline: consent decides, and each new
    /// check is a datagram that wakes the loop.
    fn media_deadline(&self) -> Option<Instant> {
        let a = self.last_audio?;
        (self.last_check >= a + CONSENT_AFTER_AUDIO).then_some(a + self.settings.media_stall)
    }

    fn check_deadlines(&self, now: Instant) -> Option<Stop> {
        let s = &self.settings;
        let ms = |d: Duration| d.as_millis();
        match self.ice_up {
            None if now >= self.answered + s.ice_timeout => Some(Stop::Lost(
                Loss::Ice,
                format!(
                    "no ICE connectivity within {} ms of the answer",
                    ms(s.ice_timeout)
                ),
            )),
            Some(at) if !self.dtls_up && now >= at + s.dtls_timeout => Some(Stop::Lost(
                Loss::Dtls,
                format!("DTLS not done within {} ms of ICE", ms(s.dtls_timeout)),
            )),
            Some(_) if now >= self.last_check + s.consent_timeout => Some(Stop::Lost(
                Loss::Consent,
                format!("no STUN consent check for {} ms", ms(s.consent_timeout)),
            )),
            Some(_) if self.media_deadline().is_some_and(|d| now >= d) => Some(Stop::Lost(
                Loss::MediaStalled,
                format!(
                    "no audio for {} ms while the peer kept its consent",
                    ms(s.media_stall)
                ),
            )),
            _ => None,
        }
    }

    /// Sends str0m's transmits and handles its events until it asks for
    /// time; returns when it next wants it.
    fn flush(&mut self) -> Result<Instant, Stop> {
        loop {
            match self.rtc.poll_output() {
                Ok(Output::Timeout(t)) => return Ok(t),
                Ok(Output::Transmit(t)) => {
                    if self.socket.try_send_to(&t.contents, t.destination).is_err() {
                        lock(&self.report).send_dropped += 1;
                    }
                }
                Ok(Output::Event(e)) => self.on_event(e)?,
                Err(e) => return Err(Stop::Lost(Loss::Dtls, format!("WebRTC stack error: {e}"))),
            }
        }
    }

    fn on_event(&mut self, e: Event) -> Result<(), Stop> {
        let now = Instant::now();
        match e {
            Event::IceConnectionStateChange(s) => match s {
                IceConnectionState::Connected | IceConnectionState::Completed
                    if self.ice_up.is_none() =>
                {
                    self.ice_up = Some(now);
                    lock(&self.report).ice_ms = Some(ms_since(self.answered, now));
                }
                IceConnectionState::Disconnected if self.ice_up.is_some() => {
                    return Err(Stop::Lost(
                        Loss::Consent,
                        "ICE pair lost (disconnected)".into(),
                    ));
                }
                _ => {}
            },
            Event::Connected => {
                self.dtls_up = true;
                self.last_audio = Some(now);
                self.next_tick = Some(now);
                lock(&self.report).dtls_ms = Some(ms_since(self.answered, now));
            }
            Event::MediaAdded(a) if a.kind == MediaKind::Audio => {
                self.audio = Some((a.mid, Pt::new_with_value(self.settings.opus_pt)));
            }
            Event::MediaData(d) => {
                self.last_audio = Some(now);
                self.on_audio(d.time.numer(), &d.data);
            }
            Event::MediaIngressStats(s) => lock(&self.report).ingress(&s),
            Event::MediaEgressStats(s) => lock(&self.report).egress(&s),
            Event::Closed => return Err(Stop::PeerClosed),
            _ => {}
        }
        Ok(())
    }

    fn on_audio(&mut self, ts: u64, packet: &[u8]) {
        lock(&self.report).packets_in += 1;
        if !self.want_audio {
            return;
        }
        let d = self.codec.decode(ts, packet);
        {
            let mut r = lock(&self.report);
            r.concealed += d.concealed;
            r.fec_recovered += d.fec_recovered;
        }
        if d.concealed > 0 {
            metrics::counter!(m::WEBRTC_PLC_FRAMES).increment(d.concealed);
        }
        for f in d.frames {
            if self.events.try_send(LegEvent::Audio(f)).is_err() {
                lock(&self.report).events_dropped += 1;
            }
        }
    }

    /// One 20 ms playout tick: the next queued frame (or silence) out, and
    /// the marks it reached reported.
    fn tick(&mut self, now: Instant) {
        let due = self.next_tick.unwrap_or(now);
        self.next_tick = Some(if now - due > MAX_LAG {
            now + FRAME
        } else {
            due + FRAME
        });
        // Taken together with the frame: a clear before this take has
        // emptied the queue, so this frame is the first without that audio.
        let (frame, reached) = lock(&self.out).take(FRAME_BYTES, 0);
        let cleared = lock(&self.report).clear_at.take();
        for mark in reached {
            let _ = self.events.try_send(LegEvent::Played(mark));
        }
        let Some((mid, pt)) = self.audio else {
            return;
        };
        let encoded = match frame {
            Some(pcm) => self.codec.encode(&pcm),
            None => self.codec.encode_silence(),
        };
        let Ok(packet) = encoded else {
            return;
        };
        let time = MediaTime::new(self.media_time, str0m::media::Frequency::FORTY_EIGHT_KHZ);
        self.media_time += FRAME_TICKS;
        let sent = self
            .rtc
            .writer(mid)
            .map(|w| w.write(pt, now, time, packet).is_ok());
        let mut r = lock(&self.report);
        match sent {
            Some(true) => r.packets_out += 1,
            _ => r.send_dropped += 1,
        }
        if let Some(at) = cleared {
            let us = now.saturating_duration_since(at).as_micros() as u64;
            r.clear_to_silence_max_us = Some(r.clear_to_silence_max_us.unwrap_or(0).max(us));
        }
    }
}

fn ms_since(from: Instant, to: Instant) -> u64 {
    to.saturating_duration_since(from).as_millis() as u64
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
