//! The partner WebSocket leg (`docs/partner-protocol.md`): a JSON `start`,
//! then binary 20 ms frames both ways, JSON `dtmf`/`played`/`stop` from the
//! partner and `mark`/`clear`/`transfer`/`end`/`error` from callgate.
//!
//! Formats: `audio/l16;rate=16000` (16-bit little-endian PCM) and
//! `audio/pcmu;rate=8000`. The partner echoes marks (`played`) when its
//! playout reaches them. Transfer is a `transfer {target, reason}` message,
//! hang-up an `end {reason}`; a protocol error is always an `error {code,
//! message}` before the close.

use std::time::{Duration, Instant};

use axum::extract::ws::{Message, WebSocket};
use futures_util::StreamExt;

use super::partner_wire::{self as wire, Inbound, WireError, WireFormat};
use super::ws::{self, Out, WsCodec, WsLink};
use super::{Finish, Finished, Leg, LegEvent, LegFormat, LegStats, Violation};

/// One partner connection.
pub struct PartnerLeg {
    link: WsLink<Codec>,
}

/// The partner side of the link: JSON text control, binary audio frames.
struct Codec {
    format: WireFormat,
    audio: bool,
}

/// Why a connection ended before it became a call (already told to the partner).
#[derive(Debug)]
pub struct NoStart(pub WireError);

impl PartnerLeg {
    /// Wraps an upgraded socket and waits (bounded) for `start`. On failure
    /// the partner gets an `error` message and the matching close.
    pub async fn accept(
        socket: WebSocket,
        timeout: Duration,
    ) -> Result<(PartnerLeg, wire::Start), NoStart> {
        let codec = Codec {
            format: WireFormat::L16k16,
            audio: false,
        };
        let mut leg = PartnerLeg {
            link: WsLink::new(socket, codec),
        };
        let read = tokio::time::timeout(timeout, leg.read_start()).await;
        let err = match read {
            Ok(Ok(start)) => {
                leg.link.codec.format = start.format;
                return Ok((leg, start));
            }
            Ok(Err(e)) => e,
            Err(_) => WireError::StartTimeout {
                after_ms: timeout.as_millis() as u64,
            },
        };
        leg.refuse_with(&err).await;
        Err(NoStart(err))
    }

    async fn read_start(&mut self) -> Result<wire::Start, WireError> {
        loop {
            let msg = match self.link.rx.next().await {
                None => return Err(WireError::unexpected("close", "socket closed before start")),
                Some(Err(e)) if ws::is_too_long(&e) => {
                    return Err(WireError::MessageTooLarge { len: 0 });
                }
                Some(Err(e)) => return Err(WireError::unexpected("close", e.to_string())),
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

    async fn refuse_with(mut self, e: &WireError) {
        self.link
            .send(Out::Text(wire::error(e.code(), &e.to_string())), false);
        self.link
            .close(e.close_code(), e.code(), ws::SEND_TIMEOUT)
            .await;
    }

    /// Tells the partner its call was accepted (`started`, with callgate's id).
    pub fn started(&mut self, session_id: &str) {
        self.link.send(Out::Text(wire::started(session_id)), false);
    }
}

impl WsCodec for Codec {
    fn decode(&mut self, msg: Message, stats: &mut LegStats, _now: Instant) -> Option<LegEvent> {
        match msg {
            Message::Binary(b) => {
                if let Err(e) = wire::check_frame(self.format, b.len()) {
                    return Some(LegEvent::Violation(violation(&e)));
                }
                stats.frames_in += 1;
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
                let why = f.map(|f| format!("closed by partner ({} {})", f.code, f.reason));
                Some(LegEvent::Gone(
                    why.unwrap_or_else(|| "closed by partner".into()),
                ))
            }
            Message::Ping(_) | Message::Pong(_) => None,
        }
    }

    fn too_long(&self) -> Violation {
        violation(&WireError::MessageTooLarge { len: 0 })
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

fn violation(e: &WireError) -> Violation {
    Violation {
        kind: e.code(),
        detail: e.to_string(),
    }
}

impl Leg for PartnerLeg {
    fn format(&self) -> LegFormat {
        match self.link.codec.format {
            WireFormat::L16k16 => LegFormat::L16k16,
            WireFormat::Pcmu8k => LegFormat::Mulaw8k,
        }
    }

    async fn next_event(&mut self) -> LegEvent {
        self.link.next_event().await
    }

    fn ready_events(&mut self) -> Vec<LegEvent> {
        self.link.ready_events()
    }

    fn want_audio(&mut self) {
        self.link.codec.audio = true;
    }

    fn play(&mut self, audio: &[u8]) {
        self.link.send(Out::Binary(audio.to_vec()), true);
    }

    fn mark(&mut self, name: &str) {
        self.link.send(Out::Text(wire::mark(name)), false);
    }

    fn clear(&mut self) {
        self.link.send(Out::Text(wire::clear()), false);
    }

    fn stats(&self) -> LegStats {
        self.link.stats
    }

    async fn finish(mut self, how: Finish, bound: Duration) -> Finished {
        let (code, reason) = match &how {
            Finish::Transfer { target, cause } => {
                let target = target.as_deref().unwrap_or("");
                let msg = Out::Text(wire::transfer(target, &cause.wire()));
                self.link.send(msg, false);
                (1000, "transferring")
            }
            Finish::Hangup(cause) => {
                self.link.send(Out::Text(wire::end(&cause.wire())), false);
                (1000, "")
            }
            Finish::Release => (1000, ""),
            Finish::Refuse(v) => {
                self.link
                    .send(Out::Text(wire::error(v.kind, &v.detail)), false);
                let code = if v.kind == "bad_audio_frame" {
                    wire::CLOSE_BAD_DATA
                } else {
                    wire::CLOSE_POLICY
                };
                (code, v.kind)
            }
        };
        Finished {
            forced: self.link.close(code, reason, bound).await,
        }
    }
}
