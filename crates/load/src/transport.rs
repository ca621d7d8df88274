//! What differs between the carrier protocols a caller speaks, behind one
//! small type, so that the caller core — script, playout clock, mark
//! echoes, `clear`, owed silence, outcomes, records — is one piece of code
//! for every protocol.
//!
//! A `Wire` turns the core's intentions (open the session, send a 20 ms
//! frame, echo a mark, hang up) into frames for the socket, and frames from
//! the server into `Heard` events. It knows each protocol's framing and
//! audio format, nothing about the script.
//!
//! The protocols:
//! - **Twilio** Media Streams: JSON text both ways, base64 μ-law 8 kHz,
//!   `connected` + `start`, sequence numbers; `clear` makes Twilio echo every
//!   pending mark at once.
//! - **Partner** (`docs/partner-protocol.md`, Vonage's convention): one
//!   JSON `start`, then raw binary audio both ways (16-bit linear 16 kHz or
//!   μ-law 8 kHz); marks are echoed as `played` only when playout reaches
//!   them — marks dropped by `clear` are never echoed.
//! - **WebRTC** (`docs/webrtc.md`): no messages on the media path at all.
//!   The driver ([`crate::webrtc`]) hands the core every decoded 20 ms frame
//!   (16-bit linear 16 kHz) as a binary frame and every session status it
//!   polled (`GET` on the session URL) as a text frame; the core's frames
//!   go out as Opus. There are no marks, no `clear` and no opening: a bot
//!   turn ends when [`CallProtocol::Webrtc`]'s `turn_gap_ms` of silence
//!   follows it, the call's end is the status's `ended` or `refused`.

use std::time::Duration;

use media::format::{AudioEncoding, AudioFormat};
use media::g711;

use crate::caller::Transmit;
use crate::error::LoadError;
use crate::ids::CallIds;
use crate::partner_wire::{self, PartnerFormat, ServerMessage};
use crate::wire::{self, ServerEvent};

/// Which carrier protocol a load run speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, clap::ValueEnum)]
pub enum Protocol {
    /// Twilio Media Streams (`/v1/media-stream`).
    #[default]
    Twilio,
    /// callgate's partner WebSocket (`/v1/partner/stream`).
    Partner,
    /// WebRTC, signalled the WHIP way (`POST /v1/webrtc`), Opus over
    /// DTLS-SRTP (`docs/webrtc.md`).
    Webrtc,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Twilio => "twilio",
            Protocol::Partner => "partner",
            Protocol::Webrtc => "webrtc",
        }
    }

    /// The endpoint a local server serves this protocol on.
    pub fn default_url(self) -> &'static str {
        match self {
            Protocol::Twilio => "ws://127.0.0.1:8080/v1/media-stream",
            Protocol::Partner => "ws://127.0.0.1:8080/v1/partner/stream",
            Protocol::Webrtc => "http://127.0.0.1:8080/v1/webrtc",
        }
    }

    /// The URL schemes this protocol dials.
    pub fn schemes(self) -> [&'static str; 2] {
        match self {
            Protocol::Twilio | Protocol::Partner => ["ws://", "wss://"],
            Protocol::Webrtc => ["http://", "https://"],
        }
    }
}

/// The protocol of one call, with the audio format it negotiates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CallProtocol {
    /// Twilio Media Streams: μ-law 8 kHz.
    #[default]
    Twilio,
    /// The partner WebSocket in this format.
    Partner(PartnerFormat),
    /// WebRTC (16-bit linear 16 kHz inside the caller, Opus on the wire):
    /// a bot turn has ended once `turn_gap_ms` of silence followed it.
    Webrtc { turn_gap_ms: u32 },
}

impl CallProtocol {
    /// The audio format of both directions.
    pub fn audio(self) -> AudioFormat {
        match self {
            CallProtocol::Twilio | CallProtocol::Partner(PartnerFormat::Pcmu) => {
                AudioFormat::MULAW_8K
            }
            CallProtocol::Partner(PartnerFormat::L16) | CallProtocol::Webrtc { .. } => {
                AudioFormat::PCM16_16K
            }
        }
    }

    /// The silence that ends a bot turn, on a protocol without marks.
    pub fn turn_gap(self) -> Option<Duration> {
        match self {
            CallProtocol::Webrtc { turn_gap_ms } => {
                Some(Duration::from_millis(u64::from(turn_gap_ms)))
            }
            _ => None,
        }
    }
}

/// The byte that fills silence in `format` (every byte of a zero sample).
pub(crate) fn silence_byte(format: AudioFormat) -> u8 {
    match format.encoding {
        AudioEncoding::Mulaw => g711::ULAW_SILENCE,
        AudioEncoding::Alaw => g711::ALAW_SILENCE,
        AudioEncoding::Pcm16Le => 0,
    }
}

/// Linear samples as `format`'s bytes.
pub(crate) fn encode(format: AudioFormat, samples: &[i16]) -> Vec<u8> {
    match format.encoding {
        AudioEncoding::Mulaw => g711::encode_ulaw(samples),
        AudioEncoding::Alaw => g711::encode_alaw(samples),
        AudioEncoding::Pcm16Le => media::format::samples_to_pcm16le(samples),
    }
}

/// Playing time of `bytes` of `format`, exact to the nanosecond (a 16 kHz
/// sample is 62.5 µs, which whole microseconds would round away).
pub(crate) fn playing_time(format: AudioFormat, bytes: usize) -> Duration {
    let samples = (bytes / format.encoding.bytes_per_sample()) as u64;
    let rate = u64::from(format.sample_rate.max(1));
    Duration::from_nanos(samples.saturating_mul(1_000_000_000) / rate)
}

/// A server message, as the caller core acts on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Heard {
    /// Audio to queue for playout, in the call's format.
    Audio(Vec<u8>),
    Mark(String),
    Clear,
    /// Partner `started`: the session id and the resume token, if any.
    Started(String, Option<String>),
    /// Partner `transfer`.
    Transfer {
        target: Option<String>,
        reason: String,
    },
    /// Partner `end`.
    End(String),
    /// Partner `error`.
    Error {
        code: String,
        message: String,
    },
    /// WebRTC: the session's status, as polled.
    Session(SessionStatus),
    Unknown(String),
}

/// What `GET` on a WebRTC session URL answered (`docs/webrtc.md`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub(crate) struct SessionStatus {
    /// `queued`, `admitted`, `refused`, `ended` (unknown states are kept).
    pub(crate) state: String,
    #[serde(default)]
    pub(crate) end_reason: Option<String>,
    #[serde(default)]
    pub(crate) call_id: Option<String>,
}

/// Why a mark left the playout buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// Playout reached it.
    Played,
    /// `clear` dropped the audio before it.
    Cleared,
}

/// One call's framing. See the module docs.
#[derive(Debug)]
pub(crate) struct Wire {
    protocol: CallProtocol,
    ids: CallIds,
    /// Twilio: the last `sequenceNumber` used (`start` is 1).
    seq: u64,
}

impl Wire {
    pub(crate) fn new(protocol: CallProtocol, ids: CallIds) -> Wire {
        Wire {
            protocol,
            ids,
            seq: 0,
        }
    }

    /// The frames that open the session once the upgrade succeeded.
    pub(crate) fn opening(&mut self, params: &[(String, String)]) -> Vec<Transmit> {
        match self.protocol {
            CallProtocol::Twilio => {
                self.seq = 1;
                vec![
                    Transmit::Text(wire::connected()),
                    Transmit::Text(wire::start(&self.ids, params)),
                ]
            }
            CallProtocol::Partner(format) => {
                let call_id = self.ids.call.to_string();
                vec![Transmit::Text(partner_wire::start(
                    &call_id, format, params,
                ))]
            }
            CallProtocol::Webrtc { .. } => Vec::new(),
        }
    }

    /// One 20 ms frame of the caller's audio: the `chunk`-th, starting
    /// `timestamp_ms` into the stream.
    pub(crate) fn media(&mut self, chunk: u64, timestamp_ms: u64, frame: Vec<u8>) -> Transmit {
        match self.protocol {
            CallProtocol::Twilio => {
                self.seq += 1;
                let stream = self.ids.stream;
                Transmit::Text(wire::media(self.seq, stream, chunk, timestamp_ms, &frame))
            }
            CallProtocol::Partner(_) => Transmit::Binary(frame),
            CallProtocol::Webrtc { .. } => Transmit::Media {
                frame,
                timestamp_ms,
            },
        }
    }

    /// The echo of a mark that left the playout buffer, if the protocol
    /// sends one.
    pub(crate) fn echo(&mut self, name: &str, why: Release) -> Option<Transmit> {
        match (self.protocol, why) {
            (CallProtocol::Twilio, _) => {
                self.seq += 1;
                Some(Transmit::Text(wire::mark(self.seq, self.ids.stream, name)))
            }
            (CallProtocol::Partner(_), Release::Played) => {
                Some(Transmit::Text(partner_wire::played(name)))
            }
            (CallProtocol::Partner(_), Release::Cleared) | (CallProtocol::Webrtc { .. }, _) => None,
        }
    }

    /// The caller hangs up: the message before the close, if the protocol
    /// has one (WebRTC's hang-up is the driver's `DELETE` on the close).
    pub(crate) fn hang_up(&mut self) -> Option<Transmit> {
        match self.protocol {
            CallProtocol::Twilio => {
                self.seq += 1;
                Some(Transmit::Text(wire::stop(self.seq, &self.ids)))
            }
            CallProtocol::Partner(_) => Some(Transmit::Text(partner_wire::stop())),
            CallProtocol::Webrtc { .. } => None,
        }
    }

    /// A text frame from the server.
    ///
    /// # Errors
    /// [`LoadError::Malformed`] when the caller could not act on it.
    pub(crate) fn text(&self, text: &str) -> Result<Heard, LoadError> {
        let stream = self.ids.stream;
        match self.protocol {
            CallProtocol::Twilio => Ok(match wire::parse(text, stream)? {
                ServerEvent::Media(ulaw) => Heard::Audio(ulaw),
                ServerEvent::Mark(name) => Heard::Mark(name),
                ServerEvent::Clear => Heard::Clear,
                ServerEvent::Unknown(event) => Heard::Unknown(event),
            }),
            CallProtocol::Partner(_) => {
                let msg = partner_wire::parse(text)
                    .map_err(|detail| LoadError::Malformed { stream, detail })?;
                Ok(match msg {
                    ServerMessage::Started {
                        session_id,
                        resume_token,
                    } => Heard::Started(session_id, resume_token),
                    ServerMessage::Mark(name) => Heard::Mark(name),
                    ServerMessage::Clear => Heard::Clear,
                    ServerMessage::Transfer { target, reason } => {
                        Heard::Transfer { target, reason }
                    }
                    ServerMessage::End { reason } => Heard::End(reason),
                    ServerMessage::Error { code, message } => Heard::Error { code, message },
                    ServerMessage::Unknown(event) => Heard::Unknown(event),
                })
            }
            CallProtocol::Webrtc { .. } => {
                serde_json::from_str(text)
                    .map(Heard::Session)
                    .map_err(|e| LoadError::Malformed {
                        stream,
                        detail: format!("not a WebRTC session status: {e}"),
                    })
            }
        }
    }

    /// A binary frame from the server.
    ///
    /// # Errors
    /// [`LoadError::Malformed`]: Twilio only speaks text; partner audio must
    /// be whole samples.
    pub(crate) fn binary(&self, bytes: &[u8]) -> Result<Heard, LoadError> {
        let malformed = |detail: String| LoadError::Malformed {
            stream: self.ids.stream,
            detail,
        };
        match self.protocol {
            CallProtocol::Twilio => Err(malformed(format!(
                "binary frame of {} bytes (Twilio only sends text)",
                bytes.len()
            ))),
            CallProtocol::Partner(format) => {
                if !bytes.len().is_multiple_of(format.bytes_per_sample()) {
                    return Err(malformed(format!(
                        "audio of {} bytes is not whole {}-byte samples",
                        bytes.len(),
                        format.bytes_per_sample()
                    )));
                }
                Ok(Heard::Audio(bytes.to_vec()))
            }
            CallProtocol::Webrtc { .. } => {
                let frame = AudioFormat::PCM16_16K.frame_bytes();
                if bytes.len() != frame {
                    return Err(malformed(format!(
                        "decoded frame of {} bytes (20 ms of 16 kHz L16 is {frame})",
                        bytes.len()
                    )));
                }
                Ok(Heard::Audio(bytes.to_vec()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{AccountSid, CallSid, StreamSid};

    fn ids() -> CallIds {
        CallIds {
            account: AccountSid::from_bytes([1; 16]),
            call: CallSid::from_bytes([2; 16]),
            stream: StreamSid::from_bytes([3; 16]),
        }
    }

    #[test]
    fn playing_time_is_exact_for_both_sample_sizes() {
        let l16 = CallProtocol::Partner(PartnerFormat::L16).audio();
        let ulaw = CallProtocol::Twilio.audio();
        assert_eq!(playing_time(l16, 640), Duration::from_millis(20));
        assert_eq!(playing_time(ulaw, 160), Duration::from_millis(20));
        assert_eq!(playing_time(l16, 2), Duration::from_nanos(62_500));
        assert_eq!(playing_time(l16, 16_000), Duration::from_millis(500));
        assert_eq!(playing_time(ulaw, 1), Duration::from_micros(125));
        assert_eq!(l16.frame_bytes(), PartnerFormat::L16.frame_bytes());
        assert_eq!(
            CallProtocol::Partner(PartnerFormat::Pcmu)
                .audio()
                .frame_bytes(),
            PartnerFormat::Pcmu.frame_bytes()
        );
    }

    #[test]
    fn partner_echoes_only_played_marks_and_sends_binary_audio() {
        let mut w = Wire::new(CallProtocol::Partner(PartnerFormat::L16), ids());
        let opening = w.opening(&[]);
        assert_eq!(opening.len(), 1);
        assert_eq!(w.media(1, 0, vec![0; 640]), Transmit::Binary(vec![0; 640]));
        assert!(w.echo("turn-1", Release::Cleared).is_none());
        assert_eq!(
            w.echo("turn-1", Release::Played),
            Some(Transmit::Text(partner_wire::played("turn-1")))
        );
        assert_eq!(w.binary(&[0; 3]).ok(), None);
        assert_eq!(w.binary(&[0; 4]).ok(), Some(Heard::Audio(vec![0; 4])));
    }

    #[test]
    fn twilio_numbers_every_frame_and_echoes_cleared_marks() {
        let mut w = Wire::new(CallProtocol::Twilio, ids());
        assert_eq!(w.opening(&[]).len(), 2);
        let _ = w.media(1, 0, vec![0xFF; 160]);
        let Some(Transmit::Text(echo)) = w.echo("m", Release::Cleared) else {
            panic!("Twilio echoes cleared marks");
        };
        assert!(echo.contains(r#""sequenceNumber":"3""#), "{echo}");
        assert!(w.binary(&[0; 160]).is_err());
    }
}
