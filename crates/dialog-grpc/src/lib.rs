//! `dialog-grpc` — callgate's client for the dialog service
//! (`proto/dialog.proto`, package `callgate.dialog.v1`, rpc `Converse`).
//!
//! What it is: one bidirectional `Converse` stream per call, split into a
//! request half ([`DialogSession`]: user turns, interruptions, tool results,
//! DTMF, end) and an event half ([`DialogEvents`]: reply text, turn
//! completion, tool calls, slot updates, escalation, end of call). Streams
//! are spread round-robin over a few lazily connected HTTP/2 connections so
//! thousands of calls never queue invisibly behind one connection's
//! concurrent-stream limit.
//!
//! What it never does: leak protobuf types (only domain types such as
//! [`TurnId`], [`ToolCallId`] and [`DialogEvent`] cross its API), block a
//! caller on a full queue (sends fail fast with
//! [`DialogError::Backpressure`]), wait without a deadline while opening a
//! stream ([`DialogConfig::open_timeout`]), or keep a stream alive after
//! both halves are dropped.
//!
//! Mid-call drops: when an open stream fails with a drop
//! ([`DialogError::is_dropped`]: UNAVAILABLE, a reset connection …), a new
//! stream is opened on the [`DialogConfig::reconnect`] schedule with
//! `SessionStart { resume: true }` (or a fresh greeting if the greeting had
//! not finished), the user turn whose reply had not completed is sent
//! again, and reply text already delivered is not delivered twice. The call
//! sees [`DialogEvent::Reconnecting`] / [`DialogEvent::Reconnected`] and
//! [`DialogSession::reconnects`] counts attempts; `Closed` comes only when
//! the budget is spent or the failure is not a drop.
//!
//! How to drive it:
//!
//! ```no_run
//! use dialog_grpc::{DialogClient, DialogConfig, DialogEvent, TurnId};
//!
//! # async fn demo() -> Result<(), dialog_grpc::DialogError> {
//! let client = DialogClient::new(&DialogConfig {
//!     endpoint: "http://127.0.0.1:50051".into(),
//!     ..DialogConfig::default()
//! })?;
//! let (session, mut events) = client.open("3f0c…-call-id", vec![]).await?;
//! session.user_turn(TurnId(1), "A table for four, please.")?;
//! while let Some(event) = events.recv().await {
//!     match event {
//!         DialogEvent::TextDelta { turn, text } => { /* feed TTS */ }
//!         DialogEvent::ToolCall { id, .. } => session.tool_result(&id, "{}", false)?,
//!         DialogEvent::Closed(outcome) => { outcome?; break; }
//!         _ => {}
//!     }
//! }
//! session.end("caller_hangup");
//! # Ok(()) }
//! ```

mod client;
mod config;
mod error;
mod ids;
mod session;
mod stream;

/// Generated wire types and client; private so protobuf never leaves the crate.
mod pb {
    #![allow(clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]
    tonic::include_proto!("callgate.dialog.v1");
}

pub use client::DialogClient;
pub use config::DialogConfig;
pub use error::{DialogError, ErrorSource, GrpcCode};
pub use ids::{ToolCallId, TurnId};
pub use session::{DialogEvent, DialogEvents, DialogSession};
