//! The partner WebSocket leg (`docs/partner-protocol.md`): a JSON `start`,
//! then binary 20 ms frames both ways, JSON `dtmf`/`played`/`stop` from the
//! partner and `mark`/`clear`/`transfer`/`end`/`error` from callgate.
//!
//! Formats: `audio/l16;rate=16000` (16-bit little-endian PCM) and
//! `audio/pcmu;rate=8000`. The partner echoes marks (`played`) when its
//! playout reaches them. Transfer is a `transfer {target, reason}` message,
//! hang-up an `end {reason}`; a protocol error is always an `error {code,
//! message}` before the close.
//!
//! **Resume** (`docs/partner-protocol.md`, "Resuming a call"): a resumable
//! leg sends a single-use token in `started`. When its connection drops
//! abnormally (no `stop`, no close 1000) the leg *detaches*: it reports
//! [`LegEvent::Detached`], holds callgate's audio and marks
//! ([`super::gap::HeldOutput`], bounded) and waits up to
//! `partner.resume_window_ms` for a new connection presenting the token
//! (the ingress claims it from the [`Registry`] and hands the socket over
//! through the leg's attach queue). A new connection that arrives while
//! the old is still open *supersedes* it: the old gets `superseded` and
//! close 1000 and its reader is dropped in the same step, before anything
//! is read from the new one, so there is never a second live media
//! connection ([`super::gap::LiveLegs`] measures it). The call actor and
//! core keep running throughout; the leg swaps its socket.

use std::time::{Duration, Instant};

use admission::PartnerId;
use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures_util::{FutureExt, StreamExt};
use state_store::CallId;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::gap::{Held, HeldOutput, Outstanding, ResumeTally};
use super::resume::{self, ResumeRegistry, ResumeToken, TokenGuard};
use super::wire::{self as wire, Inbound, WireError, WireFormat};
use crate::carrier::ws::{self, Out, Oversize, ReadError, WsCodec, WsLink};
use crate::leg::{Finish, Finished, Leg, LegEvent, LegFormat, LegStats, Violation};
use crate::metrics as m;

/// The server's resume tokens for partner legs (`Carriers::partner_resumes`).
pub type Registry = ResumeRegistry<Attach>;

/// A new connection handed to the leg whose token it presented.
pub struct Attach {
    pub socket: WebSocket,
}

/// One partner call: its current connection, or the gap while it has none.
pub struct PartnerLeg {
    socket: Socket,
    format: WireFormat,
    audio: bool,
    /// The largest message accepted, in bytes (each connection's link).
    limit: usize,
    /// Counters of connections already replaced.
    retired: LegStats,
    outstanding: Outstanding,
    resume: Option<Resume>,
    /// An event owed before the next read: `Detached` again for a call
    /// core that starts while the leg is detached (it began after the
    /// first notice, during setup).
    notice: Option<LegEvent>,
}

enum Socket {
    Live(WsLink<Codec>, Option<super::gap::LiveLeg>),
    Detached(Gap),
    /// The gap ended without a resume: `Gone` was reported.
    Ended,
}

/// A dropped connection waiting for its successor.
struct Gap {
    since: Instant,
    until: Instant,
    why: String,
    last_frame: Option<Instant>,
}

/// What makes a leg resumable.
struct Resume {
    registry: std::sync::Arc<Registry>,
    session: CallId,
    partner: PartnerId,
    window: Duration,
    token: Option<(ResumeToken, TokenGuard<Attach>)>,
    attach_tx: mpsc::Sender<Attach>,
    attach_rx: mpsc::Receiver<Attach>,
    held: HeldOutput,
    tally: ResumeTally,
}

/// What woke the leg.
enum Step {
    Read(LegEvent),
    /// Boxed: a socket is large, and steps are mostly reads.
    Attach(Box<Attach>),
    WindowOver,
}

/// The partner side of the link: JSON text control, binary audio frames.
struct Codec {
    format: WireFormat,
    audio: bool,
    /// When the latest valid caller frame arrived.
    last_frame: Option<Instant>,
    /// The partner closed with 1000 (or with a close frame naming no
    /// code): a deliberate end, never resumed.
    closed_normally: bool,
}

impl Codec {
    fn new(format: WireFormat, audio: bool) -> Self {
        Codec {
            format,
            audio,
            last_frame: None,
            closed_normally: false,
        }
    }
}

/// Why a connection ended before it became a call (already told to the partner).
#[derive(Debug)]
pub struct NoStart(pub WireError);

impl PartnerLeg {
    /// Wraps an upgraded socket and waits (bounded) for `start`. On failure
    /// the partner gets an `error` message and the matching close.
    pub async fn accept(
        socket: WebSocket,
        limit: usize,
        timeout: Duration,
    ) -> Result<(PartnerLeg, wire::Start), NoStart> {
        let mut link = WsLink::new(socket, Codec::new(WireFormat::L16k16, false), limit);
        let read = tokio::time::timeout(timeout, read_start(&mut link)).await;
        let err = match read {
            Ok(Ok(start)) => {
                link.codec.format = start.format;
                let leg = PartnerLeg {
                    socket: Socket::Live(link, None),
                    format: start.format,
                    audio: false,
                    limit,
                    retired: LegStats::default(),
                    outstanding: Outstanding::default(),
                    resume: None,
                    notice: None,
                };
                return Ok((leg, start));
            }
            Ok(Err(e)) => e,
            Err(_) => WireError::StartTimeout {
                after_ms: timeout.as_millis() as u64,
            },
        };
        refuse_with(link, &err).await;
        Err(NoStart(err))
    }

    /// Makes the call resumable for `window` (0: not resumable). Call
    /// before [`PartnerLeg::started`], which then carries the token.
    pub fn resumable(
        &mut self,
        registry: std::sync::Arc<Registry>,
        session: CallId,
        partner: PartnerId,
        window: Duration,
    ) {
        if window.is_zero() {
            return;
        }
        let (attach_tx, attach_rx) = mpsc::channel(resume::ATTACH_QUEUE);
        let mut r = Resume {
            registry,
            session,
            partner,
            window,
            token: None,
            attach_tx,
            attach_rx,
            held: HeldOutput::default(),
            tally: ResumeTally::default(),
        };
        r.reissue();
        if let Socket::Live(_, live) = &mut self.socket {
            *live = Some(r.tally.live.enter());
        }
        self.resume = Some(r);
    }

    /// Tells the partner its call was accepted (`started`, with callgate's
    /// id and, when resumable, the resume token).
    pub fn started(&mut self, session_id: &str) {
        let token = self.resume.as_ref().and_then(|r| r.token.as_ref());
        let text = match token {
            Some((t, _)) => wire::started_resumable(session_id, t.expose()),
            None => wire::started(session_id),
        };
        if let Socket::Live(link, _) = &mut self.socket {
            link.send(Out::Text(text), false);
        }
    }

    fn on_step(&mut self, step: Step, now: Instant) -> Option<LegEvent> {
        match step {
            Step::Read(ev) => self.on_read(ev, now),
            Step::Attach(a) => self.attach(*a, now),
            Step::WindowOver => self.window_over(now),
        }
    }

    fn on_read(&mut self, ev: LegEvent, now: Instant) -> Option<LegEvent> {
        let Socket::Live(link, _) = &self.socket else {
            return Some(ev);
        };
        if let (Some(r), Some(at)) = (self.resume.as_mut(), link.codec.last_frame) {
            r.tally.audio_back(at);
        }
        match &ev {
            LegEvent::Played(name) => self.outstanding.played(name),
            LegEvent::Gone(why) if self.has_token() && !link.codec.closed_normally => {
                let why = why.clone();
                self.detach(why, now);
                return Some(LegEvent::Detached);
            }
            _ => {}
        }
        Some(ev)
    }

    /// Whether a token is out that a new connection could present (none
    /// when resume is off or the registry was full).
    fn has_token(&self) -> bool {
        self.resume.as_ref().is_some_and(|r| r.token.is_some())
    }

    /// The connection dropped: keep the call, open the window.
    fn detach(&mut self, why: String, now: Instant) {
        let Some(r) = self.resume.as_mut() else {
            return;
        };
        let Socket::Live(link, live) = std::mem::replace(&mut self.socket, Socket::Ended) else {
            return;
        };
        let last_frame = link.codec.last_frame;
        retire(&mut self.retired, link.stats);
        drop((link, live));
        let until = now + r.window;
        if let Some((_, guard)) = &r.token {
            guard.detached(until);
        }
        r.tally.gaps += 1;
        info!(why = %why, window_ms = r.window.as_millis() as u64, "partner connection lost: holding the call for a resume");
        self.socket = Socket::Detached(Gap {
            since: now,
            until,
            why,
            last_frame,
        });
    }

    /// A new connection takes the call over. The old one, if still open,
    /// is told and dropped first: its reader goes before the new one's
    /// guard is taken.
    fn attach(&mut self, a: Attach, now: Instant) -> Option<LegEvent> {
        let Some(r) = self.resume.as_mut() else {
            refuse_attach(a);
            return None;
        };
        let last_frame = match std::mem::replace(&mut self.socket, Socket::Ended) {
            Socket::Live(mut link, live) => {
                link.send(Out::Text(wire::superseded("resumed_elsewhere")), false);
                let last = link.codec.last_frame;
                retire(&mut self.retired, link.stats);
                drop(live);
                // Closed on its own task, with the closing handshake, so an
                // old connection still streaming gets `superseded` and the
                // close instead of a reset; the call does not wait for it.
                tokio::spawn(link.close(1000, "superseded", ws::SEND_TIMEOUT));
                r.tally.superseded += 1;
                last
            }
            Socket::Detached(gap) => {
                r.tally.gap += now.saturating_duration_since(gap.since);
                gap.last_frame
            }
            Socket::Ended => {
                refuse_attach(a);
                return None;
            }
        };
        r.tally.taken_over(last_frame, now);
        let live = r.tally.live.enter();
        let mut link = WsLink::new(a.socket, Codec::new(self.format, self.audio), self.limit);
        r.reissue();
        let session = r.session.to_string();
        let text = match &r.token {
            Some((t, _)) => wire::started_resumable(&session, t.expose()),
            None => wire::started(&session),
        };
        link.send(Out::Text(text), false);
        for name in self.outstanding.take() {
            link.send(Out::Text(wire::mark(&name)), false);
            self.outstanding.sent(&name);
        }
        for item in r.held.take() {
            match item {
                Held::Audio(audio) => link.send(Out::Binary(audio), true),
                Held::Mark(name) => {
                    link.send(Out::Text(wire::mark(&name)), false);
                    self.outstanding.sent(&name);
                }
            }
        }
        metrics::counter!(m::PARTNER_RESUMES, "result" => "resumed").increment(1);
        info!(partner = %r.partner, "partner call resumed on a new connection");
        self.socket = Socket::Live(link, Some(live));
        Some(LegEvent::Attached)
    }

    fn window_over(&mut self, now: Instant) -> Option<LegEvent> {
        // A socket handed over just as the window closed still counts.
        if let Some(a) = self
            .resume
            .as_mut()
            .and_then(|r| r.attach_rx.try_recv().ok())
        {
            return self.attach(a, now);
        }
        let Socket::Detached(gap) = std::mem::replace(&mut self.socket, Socket::Ended) else {
            return None;
        };
        if let Some(r) = self.resume.as_mut() {
            r.tally.gap += now.saturating_duration_since(gap.since);
            // The caller's audio since the last frame never came.
            r.tally.unresumed(gap.last_frame.unwrap_or(gap.since), now);
            // Retire the token now: a late presenter reads "expired".
            r.token = None;
        }
        let window = gap.until.saturating_duration_since(gap.since);
        Some(LegEvent::Gone(format!(
            "{}; not resumed within {} ms",
            gap.why,
            window.as_millis()
        )))
    }

    /// Refuses every connection still waiting to attach (the call ended).
    fn close_attaches(&mut self) {
        if let Some(r) = self.resume.as_mut() {
            r.token = None;
            r.attach_rx.close();
            while let Ok(a) = r.attach_rx.try_recv() {
                refuse_attach(a);
            }
        }
    }
}

impl Resume {
    /// A fresh token (the previous one, if any, was spent or is retired).
    fn reissue(&mut self) {
        self.token = None;
        let issued = self.registry.issue(
            self.session,
            self.partner.clone(),
            self.attach_tx.clone(),
            std::sync::Arc::clone(&self.tally.attempts),
        );
        if issued.is_none() {
            warn!("resume registry full: this call cannot be resumed");
        }
        self.token = issued;
    }
}

fn retire(into: &mut LegStats, s: LegStats) {
    into.frames_in += s.frames_in;
    into.frames_out += s.frames_out;
    into.frames_dropped += s.frames_dropped;
    into.ignored_events += s.ignored_events;
}

async fn read_start(link: &mut WsLink<Codec>) -> Result<wire::Start, WireError> {
    loop {
        let msg = match link.next_message().await {
            None => return Err(WireError::unexpected("close", "socket closed before start")),
            Some(Err(ReadError::TooLarge(o))) => return Err(too_large(o)),
            Some(Err(ReadError::Socket(e))) => {
                return Err(WireError::unexpected("close", e.to_string()));
            }
            Some(Ok(m)) => m,
        };
        match msg {
            Message::Text(t) => match wire::parse_text(t.as_str())? {
                Inbound::Start(s) => return Ok(s),
                Inbound::Unknown(_) => continue,
                other => return Err(WireError::unexpected(event_name(&other), "before start")),
            },
            Message::Binary(_) => return Err(WireError::unexpected("audio", "before start")),
            Message::Ping(_) | Message::Pong(_) => continue,
            Message::Close(_) => {
                return Err(WireError::unexpected("close", "closed before start"));
            }
        }
    }
}

async fn refuse_with(mut link: WsLink<Codec>, e: &WireError) {
    link.send(Out::Text(wire::error(e.code(), &e.to_string())), false);
    link.close(e.close_code(), e.code(), ws::SEND_TIMEOUT).await;
}

/// The error code of a resume whose call ended between the token's claim
/// and the connection's hand-over.
pub const RESUME_EXPIRED: &str = "resume_expired";

/// Tells a connection that came to attach that its call is over (`error`
/// `resume_expired`, close 1008), on its own bounded task.
pub fn refuse_attach(a: Attach) {
    metrics::counter!(m::PARTNER_RESUMES, "result" => "expired").increment(1);
    let mut socket = a.socket;
    tokio::spawn(async move {
        let msg = wire::error(
            RESUME_EXPIRED,
            "the call ended before this connection could resume it",
        );
        let close = Message::Close(Some(CloseFrame {
            code: wire::CLOSE_POLICY,
            reason: RESUME_EXPIRED.into(),
        }));
        let send = async {
            socket.send(Message::Text(msg.into())).await?;
            socket.send(close).await
        };
        if tokio::time::timeout(ws::SEND_TIMEOUT, send).await.is_ok() {
            // The closing handshake, as every link closes (see `ws`).
            let answer = async {
                while let Some(Ok(m)) = socket.next().await {
                    if matches!(m, Message::Close(_)) {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(ws::CLOSE_HANDSHAKE, answer).await;
        }
    });
}

impl WsCodec for Codec {
    fn decode(&mut self, msg: Message, stats: &mut LegStats, now: Instant) -> Option<LegEvent> {
        match msg {
            Message::Binary(b) => {
                if let Err(e) = wire::check_frame(self.format, b.len()) {
                    return Some(LegEvent::Violation(violation(&e)));
                }
                stats.frames_in += 1;
                self.last_frame = Some(now);
                self.audio.then(|| LegEvent::Audio(b.to_vec()))
            }
            Message::Text(t) => match wire::parse_text(t.as_str()) {
                Err(e) => Some(LegEvent::Violation(violation(&e))),
                Ok(Inbound::Start(_)) => Some(LegEvent::Violation(violation(
                    &WireError::unexpected("start", "a second start on one connection"),
                ))),
                Ok(Inbound::Dtmf(d)) => Some(LegEvent::Dtmf(d)),
                Ok(Inbound::Played(name)) => Some(LegEvent::Played(name)),
                Ok(Inbound::Stop) => Some(LegEvent::Hangup),
                Ok(Inbound::Unknown(_)) => {
                    stats.ignored_events += 1;
                    None
                }
            },
            Message::Close(f) => {
                // A close frame without a code (1005) is deliberate too.
                self.closed_normally = f.as_ref().is_none_or(|f| f.code == 1000);
                let why = f.map(|f| format!("closed by partner ({} {})", f.code, f.reason));
                Some(LegEvent::Gone(
                    why.unwrap_or_else(|| "closed by partner".into()),
                ))
            }
            Message::Ping(_) | Message::Pong(_) => None,
        }
    }

    fn too_large(&self, over: Oversize) -> Violation {
        violation(&too_large(over))
    }
}

fn event_name(i: &Inbound) -> &'static str {
    match i {
        Inbound::Start(_) => "start",
        Inbound::Dtmf(_) => "dtmf",
        Inbound::Played(_) => "played",
        Inbound::Stop => "stop",
        Inbound::Unknown(_) => "unknown",
    }
}

fn too_large(o: Oversize) -> WireError {
    WireError::MessageTooLarge {
        kind: o.kind.as_str(),
        len: o.len,
        max: o.limit,
    }
}

fn violation(e: &WireError) -> Violation {
    Violation {
        kind: e.code(),
        detail: e.to_string(),
    }
}

impl Leg for PartnerLeg {
    fn format(&self) -> LegFormat {
        match self.format {
            WireFormat::L16k16 => LegFormat::L16k16,
            WireFormat::Pcmu8k => LegFormat::Mulaw8k,
        }
    }

    async fn next_event(&mut self) -> LegEvent {
        if let Some(ev) = self.notice.take() {
            return ev;
        }
        loop {
            let step = next_step(&mut self.socket, &mut self.resume).await;
            if let Some(ev) = self.on_step(step, Instant::now()) {
                return ev;
            }
        }
    }

    fn ready_events(&mut self) -> Vec<LegEvent> {
        let mut out = Vec::new();
        loop {
            match self.next_event().now_or_never() {
                None => break,
                Some(LegEvent::Audio(_)) => {}
                Some(ev) => {
                    let terminal = ev.is_terminal();
                    out.push(ev);
                    if terminal {
                        break;
                    }
                }
            }
        }
        out
    }

    /// Called as the call starts (`CallActor::new`).
    fn want_audio(&mut self) {
        self.audio = true;
        match &mut self.socket {
            Socket::Live(link, _) => link.codec.audio = true,
            Socket::Detached(_) => self.notice = Some(LegEvent::Detached),
            Socket::Ended => {}
        }
    }

    fn play(&mut self, audio: &[u8]) {
        match (&mut self.socket, self.resume.as_mut()) {
            (Socket::Live(link, _), _) => link.send(Out::Binary(audio.to_vec()), true),
            (Socket::Detached(_), Some(r)) => r.held.audio(audio),
            _ => self.retired.frames_dropped += 1,
        }
    }

    fn mark(&mut self, name: &str) {
        match (&mut self.socket, self.resume.as_mut()) {
            (Socket::Live(link, _), _) => {
                link.send(Out::Text(wire::mark(name)), false);
                self.outstanding.sent(name);
            }
            (Socket::Detached(_), Some(r)) => r.held.mark(name),
            _ => self.retired.frames_dropped += 1,
        }
    }

    fn clear(&mut self) {
        self.outstanding.cleared();
        match (&mut self.socket, self.resume.as_mut()) {
            (Socket::Live(link, _), _) => link.send(Out::Text(wire::clear()), false),
            (Socket::Detached(_), Some(r)) => r.held.clear(),
            _ => {}
        }
    }

    fn stats(&self) -> LegStats {
        let mut s = self.retired;
        if let Socket::Live(link, _) = &self.socket {
            retire(&mut s, link.stats);
        }
        s
    }

    fn resume_report(&self) -> Option<serde_json::Value> {
        // A gap still open when the call ended counts up to now.
        let open = match &self.socket {
            Socket::Detached(gap) => Instant::now().saturating_duration_since(gap.since),
            _ => Duration::ZERO,
        };
        self.resume.as_ref().map(|r| r.tally.report(&r.held, open))
    }

    async fn finish(mut self, how: Finish, bound: Duration) -> Finished {
        self.close_attaches();
        let Socket::Live(mut link, live) = std::mem::replace(&mut self.socket, Socket::Ended)
        else {
            return Finished::default();
        };
        let (code, reason) = finish_message(&how);
        if let Some(text) = finish_text(&how) {
            link.send(Out::Text(text), false);
        }
        drop(live);
        Finished {
            forced: link.close(code, reason, bound).await,
        }
    }
}

/// Waits for whatever comes first: the live connection's next event or a
/// new connection (cancel-safe), or the gap's end or a new connection.
async fn next_step(socket: &mut Socket, resume: &mut Option<Resume>) -> Step {
    let attach = async {
        match resume.as_mut() {
            Some(r) => r.attach_rx.recv().await,
            None => std::future::pending().await,
        }
    };
    match socket {
        Socket::Live(link, _) => tokio::select! {
            ev = link.next_event() => Step::Read(ev),
            Some(a) = attach => Step::Attach(Box::new(a)),
        },
        Socket::Detached(gap) if Instant::now() >= gap.until => Step::WindowOver,
        Socket::Detached(gap) => tokio::select! {
            () = tokio::time::sleep_until(gap.until.into()) => Step::WindowOver,
            Some(a) = attach => Step::Attach(Box::new(a)),
        },
        Socket::Ended => std::future::pending().await,
    }
}

/// The close code and reason that finish a live connection `how`.
fn finish_message(how: &Finish) -> (u16, &'static str) {
    match how {
        Finish::Transfer { .. } => (1000, "transferring"),
        Finish::Hangup(_) | Finish::Release => (1000, ""),
        Finish::Refuse(v) if v.kind == "bad_audio_frame" => (wire::CLOSE_BAD_DATA, v.kind),
        Finish::Refuse(v) => (wire::CLOSE_POLICY, v.kind),
    }
}

/// The message that tells the partner `how` the call finished, if any.
fn finish_text(how: &Finish) -> Option<String> {
    match how {
        Finish::Transfer { target, cause } => Some(wire::transfer(
            target.as_deref().unwrap_or(""),
            &cause.wire(),
        )),
        Finish::Hangup(cause) => Some(wire::end(&cause.wire())),
        Finish::Release => None,
        Finish::Refuse(v) => Some(wire::error(v.kind, &v.detail)),
    }
}

#[cfg(test)]
mod tests;
