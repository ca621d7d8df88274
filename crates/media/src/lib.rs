//! `media` — callgate's audio toolbox, with no sockets and no clock of its own.
//!
//! What it is: G.711 μ-law/A-law codecs, 2× resampling between 8 kHz and
//! 16 kHz, an energy-based voice activity detector, a real-time outbound pacer
//! with in-band marks, a synthetic speech-like signal for callers in tests
//! and load runs, and RTP media for a SIP leg ([`rtp`]: packets, RTCP,
//! receiver statistics, an adaptive jitter buffer, RFC 4733 DTMF).
//!
//! What it never does: open a socket, spawn a task, sleep, or read the clock.
//! Time always comes in as an argument (`Instant` for the pacer and the RTP
//! pieces, audio sample counts for the VAD), so every piece can be driven
//! on a virtual clock.
//!
//! How to drive it:
//!
//! ```
//! use media::{g711, vad::{EnergyVad, VadConfig, VadEvent}};
//!
//! // Decode a 20 ms μ-law frame from a carrier and feed it to the VAD.
//! let frame = [0xFFu8; 160];
//! let pcm = g711::decode_ulaw(&frame);
//! let mut vad = EnergyVad::new(VadConfig::default(), 8_000);
//! let events: Vec<VadEvent> = vad.push(&pcm);
//! assert!(events.is_empty()); // silence
//! ```
//!
//! The pacer is polled the same way a sans-IO protocol core is: push audio
//! and marks in, then ask `poll(now)` for what is due and `next_deadline()`
//! for when to wake up next.

pub mod format;
pub mod g711;
pub mod pacer;
pub mod resample;
pub mod rtp;
pub mod synth;
pub mod transit;
pub mod vad;

pub use format::{AudioEncoding, AudioFormat, FRAME_MS};

#[cfg(test)]
mod fuzz_tests;
