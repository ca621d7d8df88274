//! `tts-client` — a streaming text-to-speech client for
//! ElevenLabs-compatible `multi-stream-input` WebSockets.
//!
//! What it is: one [`connect`] opens one socket, owned by one actor task.
//! The caller gets a [`TtsHandle`] to open contexts (one per bot turn),
//! stream text into them, flush, close them gracefully or cancel them on
//! barge-in, and a [`TtsEvents`] receiver yielding decoded audio, context
//! finals, provider errors and exactly one terminal [`TtsEvent::Closed`].
//!
//! Guarantees:
//! - Never more than [`MAX_CONTEXTS`] open contexts: the sixth is refused
//!   locally ([`TtsError::TooManyContexts`]) instead of provoking the
//!   provider's 1008 close.
//! - After [`TtsHandle::cancel_context`] returns, no audio of that context
//!   reaches the caller; late chunks are dropped and counted.
//! - [`TtsHandle::close_context`] loses no audio: `close_context` goes to
//!   the provider only once the received alignment covers the text sent
//!   (or the context has been quiet for `close_timeout`).
//! - Every wait has a deadline: connect, close, sending a frame, a closing
//!   context's final message, and a consumer that stops reading events.
//! - Command methods never block (bounded queue, `try_send`).
//!
//! What it never does: know about calls, carriers or SQL; retry or
//! reconnect on its own (errors say [`TtsError::is_retryable`]); log audio
//! or text above debug level.
//!
//! How to drive it:
//!
//! ```no_run
//! use tts_client::{connect, ContextId, TtsConfig, TtsEvent};
//!
//! # async fn turn() -> Result<(), tts_client::TtsError> {
//! let cfg = TtsConfig::new("ws://127.0.0.1:8082", "voice-1");
//! let (mut tts, mut events) = connect(&cfg, "call-42").await?;
//! let turn = ContextId(1);
//! tts.open_context(turn)?;
//! tts.send_text(turn, "Your table is booked. ")?;
//! tts.close_context(turn)?; // end of turn: the rest of the audio still comes
//! while let Some(event) = events.recv().await {
//!     match event {
//!         TtsEvent::Audio { bytes, .. } => { /* μ-law 8 kHz to the carrier */ let _ = bytes; }
//!         TtsEvent::ContextFinal { .. } => break,
//!         TtsEvent::Closed(reason) => { eprintln!("tts ended: {reason}"); break; }
//!         _ => {}
//!     }
//! }
//! tts.close().await
//! # }
//! ```

mod actor;
mod config;
mod context;
mod error;
mod session;
mod tracker;
// Public only so the fuzz targets in `fuzz/` can reach the parser.
#[doc(hidden)]
pub mod wire;

pub use config::{OutputFormat, TtsConfig};
pub use context::{ContextId, MAX_CONTEXTS};
pub use error::{CloseReason, ErrorSource, TtsError};
pub use session::{COMMAND_CAPACITY, EVENT_CAPACITY, TtsEvent, TtsEvents, TtsHandle, connect};
