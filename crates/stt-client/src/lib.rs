//! `stt-client` — a streaming speech-to-text session client for
//! Deepgram-compatible live WebSocket APIs (`/v1/listen`).
//!
//! What it is: [`connect`] opens one session (query-string configuration,
//! `Authorization: Token <key>`, bounded connect) and spawns one actor task
//! that owns the socket. The caller keeps an [`SttHandle`] to send audio and
//! control messages and an [`SttEvents`] to receive [`SttEvent`]s, which
//! always end with one [`SttEvent::Closed`]. [`UtteranceAssembler`] turns
//! the events into whole caller utterances.
//!
//! What it never does: know about calls, carriers or SQL; block the media
//! path (audio is queued with [`SttHandle::send_audio`], which never waits
//! and drops the newest frame when [`AUDIO_CAPACITY`] is reached); send a
//! zero-length frame (the provider would treat it as a close); retry the
//! *first* connect (the caller decides with [`SttError::is_retryable`]);
//! leak a socket (dropping the handle still sends `CloseStream` and closes,
//! bounded by `close_timeout`).
//!
//! Mid-call drops: when an open session's socket drops with a retryable
//! reason ([`CloseReason::is_drop`]), the actor reconnects on the
//! [`SttConfig::reconnect`] schedule (capped, jittered, a down-time
//! budget), keeps taking audio meanwhile, and sends again the audio since
//! the last utterance boundary the provider confirmed (bounded by
//! [`REPLAY_CAPACITY_BYTES`]), so the utterance in progress is transcribed
//! whole. It reports [`SttEvent::Reconnecting`] / [`SttEvent::Reconnected`]
//! and counts attempts ([`SttHandle::reconnects`]); `Closed` comes only
//! when the budget is spent, a refusal is final, or the caller closes.
//!
//! How to drive it:
//!
//! ```no_run
//! use stt_client::{SttConfig, SttEvent, UtteranceAssembler};
//!
//! # async fn run(frames: Vec<Vec<u8>>) -> Result<(), stt_client::SttError> {
//! let cfg = SttConfig {
//!     url: "ws://127.0.0.1:8081/v1/listen".into(),
//!     ..SttConfig::default()
//! };
//! let (stt, mut events) = stt_client::connect(&cfg, "call-42").await?;
//! tokio::spawn(async move {
//!     let mut assembler = UtteranceAssembler::new();
//!     while let Some(event) = events.recv().await {
//!         if let Some(utterance) = assembler.push(&event) {
//!             println!("caller said: {}", utterance.text);
//!         }
//!         if let SttEvent::Closed(reason) = event {
//!             println!("stt ended: {reason:?}");
//!         }
//!     }
//! });
//! for frame in frames {
//!     stt.send_audio(frame)?; // 20 ms of μ-law; never blocks
//! }
//! let summary = stt.close().await?;
//! println!("provider heard {:?}", summary.metadata);
//! # Ok(())
//! # }
//! ```

mod actor;
pub mod assembler;
pub mod config;
pub mod error;
pub mod event;
mod replay;
mod resume;
mod session;
// Public only so the fuzz targets in `fuzz/` can reach the parser.
#[doc(hidden)]
pub mod wire;

pub use assembler::{Utterance, UtteranceAssembler, UtteranceBoundary};
pub use config::{SttConfig, SttEncoding};
pub use error::{ErrorSource, SttError};
pub use event::{CloseKind, CloseReason, CloseSummary, StreamMetadata, SttEvent, Transcript};
pub use reconnect::{ReconnectPolicy, Tally as ReconnectTally};
pub use replay::{IDLE_TAIL_SECONDS, REPLAY_CAPACITY_BYTES};
pub use session::{AUDIO_CAPACITY, EVENT_CAPACITY, SttEvents, SttHandle, connect};
