//! The vendor seam: everything that differs between TTS providers — the
//! upgrade request (URL, version and auth headers), the encoding of our
//! commands and the parsing of the provider's frames into one [`Inbound`]
//! — lives behind [`Vendor`]. The actor, the tracker and the reconnect
//! logic never see a vendor's JSON.
//!
//! | command | ElevenLabs `multi-stream-input` | Cartesia `/tts/websocket` |
//! |---|---|---|
//! | open | `{"text":" ","context_id"}` | nothing (a context starts with its first request) |
//! | text | `{"text","context_id"}` | full request, `continue:true` |
//! | flush | `{"text":"","flush":true}` | full request, empty transcript, `continue:true, flush:true` |
//! | close (graceful) | `close_context`, held back until the audio is in | full request, empty transcript, `continue:false`, at once |
//! | cancel | `close_context` (the provider then sends `isFinal`) | `{"cancel":true}` (no `done` follows: finalised locally) |
//! | keep-alive | `{"text":"","context_id"}` | a WebSocket ping (Cartesia documents no keep-alive message) |
//! | close socket | `{"close_socket":true}`, then the handshake | the WebSocket closing handshake |

pub mod cartesia;
pub mod elevenlabs;

use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::http::{HeaderValue, Request};

use crate::config::{Provider, TtsConfig};
use crate::context::ContextId;
use crate::error::TtsError;

/// A provider message, as far as this client cares, whatever the vendor.
#[derive(Debug, PartialEq, Eq)]
pub enum Inbound {
    Audio {
        context: Option<ContextId>,
        bytes: Vec<u8>,
        /// Non-whitespace characters this chunk's alignment covers, if the
        /// provider sent an alignment with it (ElevenLabs).
        aligned_chars: Option<usize>,
    },
    /// Alignment sent apart from the audio (Cartesia `timestamps`): how
    /// many words it covers. Words, not characters: Cartesia's words may
    /// drop the punctuation of the transcript.
    Aligned {
        context: Option<ContextId>,
        words: usize,
    },
    /// The context is finished: no more audio for it.
    Final { context: Option<ContextId> },
    Error {
        /// The context the error is about, when the provider says so.
        context: Option<ContextId>,
        message: String,
        /// A concurrency / rate refusal (HTTP-429 class): the provider is
        /// up but full, which a reconnect schedule treats apart from an
        /// outage.
        capacity: bool,
        /// The error ends its context (Cartesia errors carry `done:true`);
        /// ElevenLabs errors are followed by a socket close instead.
        ends_context: bool,
    },
    /// Anything else (flush acknowledgements, future message kinds): ignored.
    Other,
}

/// How a vendor's protocol behaves where the actor must act differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Behaviour {
    /// A graceful close may cut audio still being generated, so it is held
    /// back until the alignment covers the text (ElevenLabs). When false
    /// the close is an end-of-input marker and goes out at once.
    pub close_waits_for_audio: bool,
    /// The provider confirms a cancel with a final message. When false the
    /// client finalises a cancelled context itself, at once.
    pub cancel_confirmed: bool,
}

/// One vendor's wire protocol, configured for one session.
#[derive(Debug, Clone)]
pub(crate) enum Vendor {
    ElevenLabs,
    Cartesia(cartesia::Request),
}

impl Vendor {
    pub fn new(cfg: &TtsConfig) -> Self {
        match cfg.provider {
            Provider::ElevenLabs => Vendor::ElevenLabs,
            Provider::Cartesia => Vendor::Cartesia(cartesia::Request::new(cfg)),
        }
    }

    pub fn behaviour(&self) -> Behaviour {
        match self {
            Vendor::ElevenLabs => Behaviour {
                close_waits_for_audio: true,
                cancel_confirmed: true,
            },
            Vendor::Cartesia(_) => Behaviour {
                close_waits_for_audio: false,
                cancel_confirmed: false,
            },
        }
    }

    /// The frame that creates a context, if the vendor has one.
    pub fn open(&self, id: ContextId) -> Option<Message> {
        match self {
            Vendor::ElevenLabs => Some(text_frame(elevenlabs::init(id))),
            Vendor::Cartesia(_) => None,
        }
    }

    pub fn text(&self, id: ContextId, text: &str) -> Message {
        text_frame(match self {
            Vendor::ElevenLabs => elevenlabs::text(id, text),
            Vendor::Cartesia(r) => r.text(id, text),
        })
    }

    pub fn flush(&self, id: ContextId) -> Message {
        text_frame(match self {
            Vendor::ElevenLabs => elevenlabs::flush(id),
            Vendor::Cartesia(r) => r.flush(id),
        })
    }

    /// The graceful end of a context (see [`Behaviour::close_waits_for_audio`]).
    pub fn close(&self, id: ContextId) -> Message {
        text_frame(match self {
            Vendor::ElevenLabs => elevenlabs::close_context(id),
            Vendor::Cartesia(r) => r.close(id),
        })
    }

    /// Barge-in: stop generating for the context now.
    pub fn cancel(&self, id: ContextId) -> Message {
        text_frame(match self {
            Vendor::ElevenLabs => elevenlabs::close_context(id),
            Vendor::Cartesia(_) => cartesia::cancel(id),
        })
    }

    /// Keeps the socket (and, for ElevenLabs, the named context) alive.
    /// Cartesia closes sockets idle for 5 minutes and documents no
    /// keep-alive message besides "do a generation"; a generation would
    /// cost a context and audio, so a WebSocket ping is sent instead.
    pub fn keepalive(&self, live: Option<ContextId>) -> Message {
        match self {
            Vendor::ElevenLabs => text_frame(elevenlabs::keepalive(live)),
            Vendor::Cartesia(_) => Message::Ping(Vec::new().into()),
        }
    }

    /// The message asking the provider to end the socket, if the vendor
    /// has one; otherwise the WebSocket closing handshake alone.
    pub fn close_socket(&self) -> Option<Message> {
        match self {
            Vendor::ElevenLabs => Some(text_frame(elevenlabs::close_socket())),
            Vendor::Cartesia(_) => None,
        }
    }

    /// Parses one text frame from the provider.
    pub fn parse(&self, frame: &str) -> Result<Inbound, String> {
        match self {
            Vendor::ElevenLabs => elevenlabs::parse(frame),
            Vendor::Cartesia(_) => cartesia::parse(frame),
        }
    }
}

fn text_frame(json: String) -> Message {
    Message::Text(json.into())
}

/// The upgrade request for `cfg`: the vendor's endpoint with its version
/// and auth headers (keys marked sensitive).
///
/// # Errors
/// [`TtsError::InvalidConfig`] for a bad URL, id or header value.
pub(crate) fn upgrade_request(cfg: &TtsConfig) -> Result<(String, Request<()>), TtsError> {
    let url = cfg.endpoint()?;
    let mut req = url
        .as_str()
        .into_client_request()
        .map_err(|e| TtsError::InvalidConfig {
            field: "base_url",
            reason: e.to_string(),
        })?;
    let headers = req.headers_mut();
    if cfg.provider == Provider::Cartesia {
        let version = header(&cfg.cartesia_version, "cartesia_version")?;
        headers.insert("Cartesia-Version", version);
    }
    if let Some(key) = &cfg.api_key {
        let mut value = header(key, "api_key")?;
        value.set_sensitive(true);
        match cfg.provider {
            Provider::ElevenLabs => headers.insert("xi-api-key", value),
            Provider::Cartesia => {
                // Cartesia's current convention for server-side clients.
                let mut bearer = header(&format!("Bearer {key}"), "api_key")?;
                bearer.set_sensitive(true);
                headers.insert("Authorization", bearer)
            }
        };
    }
    Ok((url, req))
}

fn header(value: &str, field: &'static str) -> Result<HeaderValue, TtsError> {
    HeaderValue::from_str(value).map_err(|_| TtsError::InvalidConfig {
        field,
        reason: "not a valid HTTP header value".into(),
    })
}

/// Characters that count towards "all audio arrived": whitespace is not
/// voiced, and providers differ in whether their alignment includes it.
pub(crate) fn voiced_chars(text: &str) -> usize {
    text.chars().filter(|c| !c.is_whitespace()).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upgrade_requests_carry_each_vendors_headers() {
        let mut cfg = TtsConfig::new("ws://127.0.0.1:1", "voice");
        cfg.api_key = Some("sk_1".into());
        let (url, req) = upgrade_request(&cfg).unwrap();
        assert!(url.contains("/multi-stream-input?"), "{url}");
        assert_eq!(req.headers()["xi-api-key"], "sk_1");
        assert!(req.headers()["xi-api-key"].is_sensitive());
        assert!(req.headers().get("Cartesia-Version").is_none());

        let mut cfg = TtsConfig::cartesia("wss://api.cartesia.ai", "voice");
        cfg.api_key = Some("sk_car_1".into());
        let (url, req) = upgrade_request(&cfg).unwrap();
        assert_eq!(url, "wss://api.cartesia.ai/tts/websocket");
        assert_eq!(req.headers()["Authorization"], "Bearer sk_car_1");
        assert!(req.headers()["Authorization"].is_sensitive());
        assert!(req.headers().get("X-API-Key").is_none());
        assert_eq!(req.headers()["Cartesia-Version"], cfg.cartesia_version);
        assert!(req.headers().get("xi-api-key").is_none());
    }

    #[test]
    fn vendors_differ_where_the_actor_must_act_differently() {
        let el = Vendor::new(&TtsConfig::new("ws://h", "v"));
        let ca = Vendor::new(&TtsConfig::cartesia("ws://h", "v"));
        assert!(el.behaviour().close_waits_for_audio && el.behaviour().cancel_confirmed);
        assert!(!ca.behaviour().close_waits_for_audio && !ca.behaviour().cancel_confirmed);
        assert!(el.open(ContextId(1)).is_some() && ca.open(ContextId(1)).is_none());
        assert!(el.close_socket().is_some() && ca.close_socket().is_none());
        assert!(matches!(ca.keepalive(None), Message::Ping(_)));
        assert!(matches!(el.keepalive(None), Message::Text(_)));
    }
}
