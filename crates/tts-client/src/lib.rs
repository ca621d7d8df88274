//! `tts-client` — a streaming text-to-speech client for multi-context
//! WebSockets: ElevenLabs `multi-stream-input` and Cartesia
//! `/tts/websocket`, behind one interface.
//!
//! What it is: one [`connect`] opens one socket to the provider chosen by
//! [`TtsConfig::provider`], owned by one actor task. The caller gets a
//! [`TtsHandle`] to open contexts (one per bot turn), stream text into
//! them, flush, close them gracefully or cancel them on barge-in, and a
//! [`TtsEvents`] receiver yielding decoded audio, context finals, provider
//! errors, reconnect notices and exactly one terminal
//! [`TtsEvent::Closed`]. The caller never sees which vendor it talks to:
//! everything vendor-specific (URL, version and auth headers, request
//! encoding, frame parsing) lives in the `wire` module.
//!
//! Guarantees:
//! - Never more than [`MAX_CONTEXTS`] open contexts: the sixth is refused
//!   locally ([`TtsError::TooManyContexts`]) instead of provoking the
//!   provider's 1008 close.
//! - After [`TtsHandle::cancel_context`] returns, no audio of that context
//!   reaches the caller; late chunks are dropped and counted.
//! - [`TtsHandle::close_context`] loses no audio: ElevenLabs'
//!   `close_context` goes out only once the received alignment covers the
//!   text sent (or the context has been quiet for `close_timeout`);
//!   Cartesia's `continue:false` is an end-of-input marker and goes at once.
//! - A socket that drops mid-call (provider close 1011/1001, a 1008 for
//!   concurrency, a capacity error then a close, a lost connection) is
//!   dialled again on the shared schedule of the `reconnect` crate
//!   ([`TtsConfig::reconnect`]), announced by [`TtsEvent::Reconnecting`].
//!   Commands are still taken meanwhile (text held up to
//!   [`RECONNECT_TEXT_CAPACITY`]). On the new socket every live context is
//!   re-opened under the same [`ContextId`] with only its unheard text —
//!   the text sent minus what the alignment (or, without one, the audio
//!   length at 15 chars/s) says was heard, from the start of the word in
//!   progress — then re-closed if it was closing
//!   ([`TtsEvent::Reconnected`]). Cancelled contexts are not resumed.
//!   Capacity refusals and outages are counted apart
//!   ([`TtsHandle::reconnects`]). When the budget is spent the session
//!   ends with [`CloseReason::ReconnectFailed`]; a 401/403 on a reconnect
//!   with [`CloseReason::RefusedOnReconnect`].
//! - Every wait has a deadline: connect, close, sending a frame, a closing
//!   context's final message, a reconnect, and a consumer that stops
//!   reading events.
//! - Command methods never block (bounded queue, `try_send`).
//!
//! What it never does: know about calls, carriers or SQL; retry the
//! *first* connect (that error goes back to the caller, who decides);
//! reconnect after a policy close (too many contexts, inactivity, quota)
//! or after its own close; log audio or text above debug level.
//!
//! How to drive it:
//!
//! ```no_run
//! use tts_client::{connect, ContextId, TtsConfig, TtsEvent};
//!
//! # async fn turn() -> Result<(), tts_client::TtsError> {
//! let cfg = TtsConfig::new("ws://127.0.0.1:8082", "voice-1"); // or TtsConfig::cartesia(..)
//! let (mut tts, mut events) = connect(&cfg, "call-42").await?;
//! let turn = ContextId(1);
//! tts.open_context(turn)?;
//! tts.send_text(turn, "Your table is booked. ")?;
//! tts.close_context(turn)?; // end of turn: the rest of the audio still comes
//! while let Some(event) = events.recv().await {
//!     match event {
//!         TtsEvent::Audio { bytes, .. } => { /* μ-law 8 kHz to the carrier */ let _ = bytes; }
//!         TtsEvent::ContextFinal { .. } => break,
//!         TtsEvent::Reconnecting { attempt, .. } => eprintln!("tts reconnecting ({attempt})"),
//!         TtsEvent::Closed(reason) => { eprintln!("tts ended: {reason}"); break; }
//!         _ => {}
//!     }
//! }
//! let receipt = tts.reconnects(); // drops, attempts, capacity refusals…
//! let _ = receipt;
//! tts.close().await
//! # }
//! ```

mod actor;
mod config;
mod context;
mod error;
mod link;
mod outage;
mod resume;
mod session;
mod tracker;
// Public only so the fuzz targets in `fuzz/` can reach the parsers.
#[doc(hidden)]
pub mod wire;

pub use config::{DEFAULT_CARTESIA_VERSION, OutputFormat, Provider, TtsConfig};
pub use context::{ContextId, MAX_CONTEXTS, RECONNECT_TEXT_CAPACITY};
pub use error::{CloseReason, ErrorSource, TtsError};
pub use reconnect::{ReconnectPolicy, Tally};
pub use resume::ASSUMED_CHARS_PER_SECOND;
pub use session::{COMMAND_CAPACITY, EVENT_CAPACITY, TtsEvent, TtsEvents, TtsHandle, connect};
