//! The Twilio Media Streams leg: one bidirectional `<Connect><Stream>`
//! WebSocket as [`LegEvent`]s in and media/mark/clear frames out.
//!
//! Format: μ-law 8 kHz only (Twilio's sole media-stream format). Twilio
//! echoes marks when its playout reaches them, so [`LegEvent::Played`] is
//! Twilio's own. Transfer and hang-up both close the stream with 1000: Twilio
//! then runs the TwiML's next verb (a `<Dial>` to the human queue); a Media
//! Stream cannot hang up the phone call itself.

use std::time::{Duration, Instant};

use axum::extract::ws::{Message, WebSocket};

use super::wire::{self as twilio, Inbound, WireError};
use crate::carrier::ws::{self, Out, Oversize, ReadError, WsCodec, WsLink};
use crate::leg::{Finish, Finished, Leg, LegEvent, LegFormat, LegStats, Violation};
use media::transit::TransitDelta;

/// One Twilio media stream.
pub struct TwilioLeg {
    link: WsLink<Codec>,
}

/// The Twilio side of the link: JSON text frames, base64 μ-law media.
struct Codec {
    out: twilio::Outbound,
    max_payload: usize,
    audio: twilio::Audio,
    /// Media `timestamp`s against when callgate read them, while the call
    /// wants audio (a queued call's messages are read in batches).
    transit: TransitDelta,
}

/// The sizes a Twilio stream accepts, in bytes.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// One WebSocket message (`twilio.max_message_bytes`).
    pub message: usize,
    /// One decoded `media` payload (`twilio.max_media_payload_bytes`).
    pub payload: usize,
}

/// What happened instead of a `start`.
#[derive(Debug)]
pub struct NoStart(pub String);

impl TwilioLeg {
    /// Wraps an upgraded socket and waits (bounded) for `start`. Media
    /// before `start` is a protocol violation. On failure the socket is
    /// closed with 1008 and the reason.
    pub async fn accept(
        socket: WebSocket,
        limits: Limits,
        timeout: Duration,
    ) -> Result<(TwilioLeg, twilio::Start), NoStart> {
        let codec = Codec {
            out: twilio::Outbound::new(""),
            max_payload: limits.payload,
            audio: twilio::Audio::Discard,
            transit: TransitDelta::default(),
        };
        let mut leg = TwilioLeg {
            link: WsLink::new(socket, codec, limits.message),
        };
        match tokio::time::timeout(timeout, leg.read_start()).await {
            Ok(Ok(start)) => {
                leg.link.codec.out = twilio::Outbound::new(&start.stream_sid);
                Ok((leg, start))
            }
            Ok(Err(why)) => Err(leg.refuse_start(why).await),
            Err(_) => {
                let why = format!("no start event within {} ms", timeout.as_millis());
                Err(leg.refuse_start(why).await)
            }
        }
    }

    async fn refuse_start(self, why: String) -> NoStart {
        self.link.close(1008, &why, ws::SEND_TIMEOUT).await;
        NoStart(why)
    }

    async fn read_start(&mut self) -> Result<twilio::Start, String> {
        loop {
            let Some(msg) = self.link.next_message().await else {
                return Err("socket closed".into());
            };
            let text = match msg {
                Err(ReadError::TooLarge(o)) => return Err(too_large(o).to_string()),
                Err(ReadError::Socket(e)) => return Err(format!("socket error: {e}")),
                Ok(Message::Text(t)) => t,
                Ok(Message::Ping(_) | Message::Pong(_)) => continue,
                Ok(Message::Close(_)) => return Err("closed by carrier before start".into()),
                Ok(Message::Binary(_)) => return Err("binary frame before start".into()),
            };
            let codec = &self.link.codec;
            match twilio::parse_with(text.as_str(), codec.max_payload, codec.audio) {
                Ok(Inbound::Start(s)) => return Ok(s),
                Ok(Inbound::Connected | Inbound::Unknown { .. }) => continue,
                Ok(Inbound::Media(_)) => return Err("media before start".into()),
                Ok(Inbound::Stop) => return Err("stop before start".into()),
                Ok(other) => return Err(format!("unexpected event before start: {other:?}")),
                Err(e) => return Err(format!("invalid frame before start: {e}")),
            }
        }
    }

    /// Closes a stream refused before admission (e.g. a wrong media format).
    pub async fn refuse(self, why: &str) {
        self.link.close(1008, why, ws::SEND_TIMEOUT).await;
    }
}

impl WsCodec for Codec {
    fn decode(&mut self, msg: Message, stats: &mut LegStats, now: Instant) -> Option<LegEvent> {
        let text = match msg {
            Message::Text(t) => t,
            Message::Close(f) => {
                let why = f.map(|f| format!("closed by carrier ({} {})", f.code, f.reason));
                return Some(LegEvent::Gone(
                    why.unwrap_or_else(|| "closed by carrier".into()),
                ));
            }
            Message::Binary(_) => {
                return Some(LegEvent::Violation(violation(&WireError::BinaryFrame)));
            }
            Message::Ping(_) | Message::Pong(_) => return None,
        };
        match twilio::parse_with(text.as_str(), self.max_payload, self.audio) {
            Err(e) => Some(LegEvent::Violation(violation(&e))),
            Ok(Inbound::Media(media)) => {
                stats.frames_in += 1;
                if let (twilio::Audio::Decode, Some(ms)) = (self.audio, media.timestamp_ms) {
                    self.transit.on_arrival(Duration::from_millis(ms), now);
                }
                Some(LegEvent::Audio(media.payload))
            }
            Ok(Inbound::Dtmf { digit }) => match dtmf_digit(&digit) {
                Some(d) => Some(LegEvent::Dtmf(d)),
                None => ignored(stats),
            },
            Ok(Inbound::Mark { name }) => Some(LegEvent::Played(name)),
            Ok(Inbound::Stop) => Some(LegEvent::Hangup),
            Ok(Inbound::Connected) => None,
            // A second `start` carries nothing the call can use.
            Ok(Inbound::Start(_) | Inbound::Unknown { .. }) => ignored(stats),
        }
    }

    fn too_large(&self, over: Oversize) -> Violation {
        violation(&too_large(over))
    }
}

fn ignored(stats: &mut LegStats) -> Option<LegEvent> {
    stats.ignored_events += 1;
    None
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
        kind: e.kind(),
        detail: e.to_string(),
    }
}

/// A single DTMF digit as Twilio sends it (`"5"`, `"#"`).
fn dtmf_digit(s: &str) -> Option<char> {
    let mut chars = s.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if c.is_ascii_digit() || matches!(c, '*' | '#' | 'A'..='D') => Some(c),
        _ => None,
    }
}

impl Leg for TwilioLeg {
    fn format(&self) -> LegFormat {
        LegFormat::Mulaw8k
    }

    async fn next_event(&mut self) -> LegEvent {
        self.link.next_event().await
    }

    fn ready_events(&mut self) -> Vec<LegEvent> {
        self.link.ready_events()
    }

    fn want_audio(&mut self) {
        self.link.codec.audio = twilio::Audio::Decode;
    }

    fn play(&mut self, audio: &[u8]) {
        let msg = Out::Text(self.link.codec.out.media(audio));
        self.link.send(msg, true);
    }

    fn mark(&mut self, name: &str) {
        let msg = Out::Text(self.link.codec.out.mark(name));
        self.link.send(msg, false);
    }

    fn clear(&mut self) {
        let msg = Out::Text(self.link.codec.out.clear());
        self.link.send(msg, false);
    }

    fn stats(&self) -> LegStats {
        self.link.stats
    }

    /// Inbound timing from the media `timestamp`s (Twilio stamps each
    /// 20 ms chunk with its time since the stream began), as read by
    /// callgate, so callgate's own scheduling delay is included.
    fn transport_report(&self) -> Option<serde_json::Value> {
        let h = self.link.codec.transit.histogram();
        let p95 = h.p95()?;
        Some(serde_json::json!({
            "timed_intervals": h.count(),
            "jitter_p95_ms": p95.as_secs_f64() * 1_000.0,
        }))
    }

    async fn finish(self, how: Finish, bound: Duration) -> Finished {
        let (code, reason) = match &how {
            Finish::Refuse(v) => (1008, v.detail.as_str()),
            Finish::Transfer { .. } => (1000, "transferring"),
            Finish::Hangup(_) | Finish::Release => (1000, ""),
        };
        Finished {
            forced: self.link.close(code, reason, bound).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtmf_digits_are_single_keypad_characters() {
        for ok in ["0", "9", "*", "#", "A", "D"] {
            assert!(dtmf_digit(ok).is_some(), "{ok}");
        }
        for bad in ["", "12", "x", "E", " "] {
            assert_eq!(dtmf_digit(bad), None, "{bad:?}");
        }
    }
}
