//! The per-socket protocol core of the TTS simulator, sans-IO.
//!
//! One [`SocketCore`] holds everything one `multi-stream-input` socket knows:
//! its contexts, their buffered text and queued generations, and its clocks.
//! It never touches a socket or reads the clock. The shell feeds it client
//! text frames ([`SocketCore::handle_text`]) and wake-ups
//! ([`SocketCore::handle_timeout`]), each with `now`, then drains
//! [`SocketCore::poll_output`] and sleeps until [`SocketCore::next_deadline`].
//! Tests drive it the same way on a made-up clock.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use base64::Engine as _;
use media::synth::SpeechSynth;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::audio::{Generation, OutputFormat};

/// Buffered text is generated without a flush once this many characters
/// end at a word boundary (the first step of ElevenLabs' default
/// `chunk_length_schedule`).
pub const AUTO_TRIGGER_CHARS: usize = 120;

/// Most unflushed text one context may hold (ElevenLabs' per-request
/// character limit). Text that never reaches a word boundary or a flush
/// would otherwise grow without bound; beyond this the socket closes with
/// 1008 `max_character_limit_exceeded`.
pub const MAX_BUFFERED_CHARS: usize = 5_000;

/// Audio per chunk. ElevenLabs sends chunks of roughly 100–250 ms.
const CHUNK_MS: u64 = 200;

/// Distinct context ids whose audio one socket tallies separately; audio of
/// later ids still counts in the socket's totals. A call opens one context a
/// bot turn, far fewer than this; the bound only stops a client that invents
/// ids forever from growing the tally.
pub const MAX_TALLIED_CONTEXTS: usize = 256;

/// The context a context-less text message addresses.
const DEFAULT_CONTEXT: &str = "default";

/// Close codes the simulator uses.
pub mod close_code {
    /// `close_socket` handled.
    pub const NORMAL: u16 = 1000;
    /// The simulator is shutting down.
    pub const GOING_AWAY: u16 = 1001;
    /// Protocol misuse: bad JSON, too many contexts, keep-alive for an
    /// unknown context, inactivity.
    pub const POLICY: u16 = 1008;
    /// An injected fault (`close_after_ms`).
    pub const INTERNAL: u16 = 1011;
}

/// What one socket's core needs to know, fixed when the socket is accepted.
#[derive(Debug, Clone)]
pub struct CoreParams {
    pub format: OutputFormat,
    pub max_contexts: usize,
    pub first_chunk_latency: Duration,
    pub chars_per_second: f64,
    pub realtime_factor: f64,
    pub inactivity_timeout: Duration,
    /// Accept text, never produce audio.
    pub stall_audio: bool,
    /// Close the socket (1011) this long after it opened.
    pub close_after: Option<Duration>,
    /// `close_context` lets already flushed text finish (ElevenLabs'
    /// documented behaviour) instead of stopping at once.
    pub finish_flushed_on_close: bool,
    /// Never answer `close_socket` (a provider whose close hangs).
    pub ignore_close_socket: bool,
    /// Seed for the speech synthesiser (distinct sockets sound different).
    pub seed: u64,
}

/// Audio generated for one context id (all its generations on one socket).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextAudio {
    /// Audio messages sent.
    pub chunks: u64,
    /// Encoded audio bytes (after base64 decoding).
    pub audio_bytes: u64,
    /// Playing time of those bytes, in ms.
    pub audio_ms: u64,
}

/// Audio one socket generated: totals, and per context id for the first
/// [`MAX_TALLIED_CONTEXTS`] ids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AudioTally {
    pub total: ContextAudio,
    pub contexts: BTreeMap<String, ContextAudio>,
}

impl AudioTally {
    fn add(&mut self, context: &str, bytes: u64, ms: u64) {
        let add = |c: &mut ContextAudio| {
            c.chunks += 1;
            c.audio_bytes += bytes;
            c.audio_ms += ms;
        };
        add(&mut self.total);
        if let Some(c) = self.contexts.get_mut(context) {
            add(c);
        } else if self.contexts.len() < MAX_TALLIED_CONTEXTS {
            let mut c = ContextAudio::default();
            add(&mut c);
            self.contexts.insert(context.to_owned(), c);
        }
    }
}

/// Something the shell must send, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outbound {
    /// A text frame carrying this JSON.
    Text(String),
    /// A close frame; nothing follows it.
    Close { code: u16, reason: String },
}

/// A client message. Every field is optional and unknown fields are
/// ignored, as the real service does.
#[derive(Debug, Default, Deserialize)]
struct ClientMessage {
    text: Option<String>,
    context_id: Option<String>,
    flush: Option<bool>,
    close_context: Option<bool>,
    close_socket: Option<bool>,
}

/// One context's state.
#[derive(Debug)]
struct Context {
    id: String,
    /// Text received but not yet handed to generation.
    buffer: String,
    /// Generations waiting or in progress, in order.
    queue: VecDeque<Generation>,
    /// When the next chunk of the head generation is due (`None` when idle).
    next_chunk_at: Option<Instant>,
    /// Closed by the client; the final message goes out when `queue` drains.
    closing: bool,
}

/// The per-socket protocol state machine.
#[derive(Debug)]
pub struct SocketCore {
    params: CoreParams,
    /// In creation order; at most `max_contexts`.
    contexts: Vec<Context>,
    last_input: Instant,
    close_at: Option<Instant>,
    /// `close_socket` received while contexts were still finishing.
    closing_socket: bool,
    out: VecDeque<Outbound>,
    closed: bool,
    faulted: bool,
    synth: SpeechSynth,
    tally: AudioTally,
}

impl SocketCore {
    /// A core for a socket accepted at `now`.
    pub fn new(params: CoreParams, now: Instant) -> Self {
        let synth = SpeechSynth::new(params.format.sample_rate(), params.seed);
        SocketCore {
            close_at: params.close_after.map(|d| now + d),
            params,
            contexts: Vec::new(),
            last_input: now,
            closing_socket: false,
            out: VecDeque::new(),
            closed: false,
            faulted: false,
            synth,
            tally: AudioTally::default(),
        }
    }

    /// The audio this socket has generated so far.
    pub fn audio(&self) -> &AudioTally {
        &self.tally
    }

    /// Contexts currently open (created and not yet final).
    pub fn open_contexts(&self) -> usize {
        self.contexts.len()
    }

    /// True once a close was emitted; the core ignores further input.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// True if the socket was ended by an injected fault.
    pub fn faulted(&self) -> bool {
        self.faulted
    }

    /// The next thing to send, if any.
    pub fn poll_output(&mut self) -> Option<Outbound> {
        self.out.pop_front()
    }

    /// When the shell must call [`SocketCore::handle_timeout`] next.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.closed {
            return None;
        }
        let chunks = self.contexts.iter().filter_map(|c| c.next_chunk_at);
        chunks
            .chain(self.close_at)
            .chain(Some(self.last_input + self.params.inactivity_timeout))
            .min()
    }

    /// A text frame from the client.
    pub fn handle_text(&mut self, now: Instant, text: &str) {
        if self.closed {
            return;
        }
        self.last_input = now;
        match serde_json::from_str::<ClientMessage>(text) {
            Ok(msg) => self.dispatch(now, msg),
            Err(e) => self.fail(
                "invalid_message",
                &format!("message is not valid JSON for this API: {e}"),
            ),
        }
    }

    /// A binary frame from the client: the API only speaks JSON text.
    pub fn handle_binary(&mut self, now: Instant) {
        if self.closed {
            return;
        }
        self.last_input = now;
        self.fail(
            "invalid_message",
            "binary frames are not accepted; send JSON text frames",
        );
    }

    /// Time passed: send due audio, enforce inactivity and injected faults.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.closed {
            return;
        }
        if self.close_at.is_some_and(|t| t <= now) {
            self.faulted = true;
            self.close(close_code::INTERNAL, "injected fault: close_after_ms");
            return;
        }
        if self.last_input + self.params.inactivity_timeout <= now {
            let secs = self.params.inactivity_timeout.as_secs();
            let msg =
                format!("Have not received a new text input within the timeout of {secs} seconds.");
            self.fail("input_timeout_exceeded", &msg);
            return;
        }
        for idx in 0..self.contexts.len() {
            self.emit_due_chunks(idx, now);
        }
        self.reap_finished();
    }

    fn dispatch(&mut self, now: Instant, msg: ClientMessage) {
        if msg.close_socket == Some(true) {
            if self.params.ignore_close_socket {
                tracing::debug!("close_socket ignored (fault)");
                return;
            }
            return self.close_socket();
        }
        let text = msg.text.unwrap_or_default();
        let flush = msg.flush == Some(true);
        let id = match msg.context_id {
            Some(id) => id,
            // A context-less empty text is the socket keep-alive.
            None if text.is_empty() && !flush && msg.close_context != Some(true) => return,
            None => DEFAULT_CONTEXT.to_owned(),
        };
        if msg.close_context == Some(true) {
            return self.close_context(&id);
        }
        let (idx, text) = match self.find(&id) {
            Some(idx) => (idx, text),
            None if text.is_empty() && !flush => {
                return self.fail(
                    "context_not_initialized",
                    &format!("keep-alive for context {id:?}, which was never initialised"),
                );
            }
            None => {
                let Some(idx) = self.create(id) else { return };
                // A single space is the init marker, not speech.
                (idx, if text == " " { String::new() } else { text })
            }
        };
        let ctx = &mut self.contexts[idx];
        if ctx.closing {
            return; // text for a context that is finishing is ignored
        }
        ctx.buffer.push_str(&text);
        if ctx.buffer.len() > MAX_BUFFERED_CHARS && ctx.buffer.chars().count() > MAX_BUFFERED_CHARS
        {
            return self.fail(
                "max_character_limit_exceeded",
                &format!("more than {MAX_BUFFERED_CHARS} characters buffered without a flush"),
            );
        }
        if flush {
            let all = std::mem::take(&mut ctx.buffer);
            self.trigger(idx, now, &all);
        } else if let Some(prefix) = auto_trigger_prefix(&self.contexts[idx].buffer) {
            let rest = self.contexts[idx].buffer.split_off(prefix);
            let ready = std::mem::replace(&mut self.contexts[idx].buffer, rest);
            self.trigger(idx, now, &ready);
        }
    }

    /// Creates a context. Returns its index, or `None` (and closes the
    /// socket) at the cap.
    fn create(&mut self, id: String) -> Option<usize> {
        if self.contexts.len() >= self.params.max_contexts {
            let max = self.params.max_contexts;
            self.fail(
                "max_active_conversations",
                &format!(
                    "Maximum simultaneous contexts per WebSocket connection exceeded ({max}). \
                     Please close an existing context before opening a new one."
                ),
            );
            return None;
        }
        tracing::debug!(context = %id, "context created");
        self.contexts.push(Context {
            id,
            buffer: String::new(),
            queue: VecDeque::new(),
            next_chunk_at: None,
            closing: false,
        });
        Some(self.contexts.len() - 1)
    }

    /// Hands `text` to generation for context `idx`.
    fn trigger(&mut self, idx: usize, now: Instant, text: &str) {
        if self.params.stall_audio {
            return;
        }
        let Some(generation) = Generation::new(text, self.params.chars_per_second) else {
            return;
        };
        let ctx = &mut self.contexts[idx];
        ctx.queue.push_back(generation);
        if ctx.next_chunk_at.is_none() {
            ctx.next_chunk_at = Some(now + self.params.first_chunk_latency);
        }
    }

    fn emit_due_chunks(&mut self, idx: usize, now: Instant) {
        while let Some(due) = self.contexts[idx].next_chunk_at.filter(|t| *t <= now) {
            let ctx = &mut self.contexts[idx];
            let Some(generation) = ctx.queue.front_mut() else {
                ctx.next_chunk_at = None;
                break;
            };
            let (bytes, alignment, ms) =
                generation.next_chunk(CHUNK_MS, &mut self.synth, self.params.format);
            if generation.is_done() {
                ctx.queue.pop_front();
            }
            self.tally.add(&ctx.id, bytes.len() as u64, ms);
            // Pace by the schedule, not by `now`, so a late wake-up does not
            // slow the stream down.
            let wall = Duration::from_secs_f64(
                ms as f64 / 1_000.0 / self.params.realtime_factor.max(0.01),
            );
            ctx.next_chunk_at = (!ctx.queue.is_empty()).then_some(due + wall);
            let msg = json!({
                "audio": base64::engine::general_purpose::STANDARD.encode(&bytes),
                "contextId": ctx.id,
                "isFinal": null,
                "alignment": alignment,
                "normalizedAlignment": null,
            });
            self.out.push_back(Outbound::Text(msg.to_string()));
        }
    }

    /// Sends the final message for closing contexts whose audio is all out,
    /// and finishes a pending `close_socket`.
    fn reap_finished(&mut self) {
        let mut i = 0;
        while i < self.contexts.len() {
            if self.contexts[i].closing && self.contexts[i].queue.is_empty() {
                let ctx = self.contexts.remove(i);
                self.send_final(&ctx.id);
            } else {
                i += 1;
            }
        }
        if self.closing_socket && self.contexts.is_empty() {
            self.close(close_code::NORMAL, "");
        }
    }

    fn close_context(&mut self, id: &str) {
        let Some(idx) = self.find(id) else {
            tracing::debug!(context = %id, "close_context for an unknown context ignored");
            return;
        };
        let ctx = &mut self.contexts[idx];
        ctx.buffer.clear();
        if !self.params.finish_flushed_on_close {
            // Barge-in semantics: nothing more of this context is generated.
            ctx.queue.clear();
            ctx.next_chunk_at = None;
        }
        ctx.closing = true;
        self.reap_finished();
    }

    fn close_socket(&mut self) {
        let ids: Vec<String> = self.contexts.iter().map(|c| c.id.clone()).collect();
        for id in ids {
            self.close_context(&id);
        }
        self.closing_socket = true;
        self.reap_finished();
    }

    fn find(&self, id: &str) -> Option<usize> {
        self.contexts.iter().position(|c| c.id == id)
    }

    fn send_final(&mut self, id: &str) {
        tracing::debug!(context = %id, "context final");
        let msg = json!({ "isFinal": true, "contextId": id });
        self.out.push_back(Outbound::Text(msg.to_string()));
    }

    /// An error message followed by a 1008 close.
    fn fail(&mut self, error: &str, message: &str) {
        tracing::info!(error, message, "closing socket on a policy violation");
        let msg = json!({ "message": message, "error": error, "code": close_code::POLICY });
        self.out.push_back(Outbound::Text(msg.to_string()));
        self.close(close_code::POLICY, error);
    }

    fn close(&mut self, code: u16, reason: &str) {
        self.out.push_back(Outbound::Close {
            code,
            reason: reason.to_owned(),
        });
        self.contexts.clear();
        self.closed = true;
    }
}

/// The byte length of the longest buffered prefix that may be generated
/// without a flush: at least [`AUTO_TRIGGER_CHARS`] characters ending at a
/// word boundary (just after whitespace).
fn auto_trigger_prefix(buffer: &str) -> Option<usize> {
    if buffer.chars().count() < AUTO_TRIGGER_CHARS {
        return None;
    }
    let (pos, ws) = buffer
        .char_indices()
        .rev()
        .find(|(_, c)| c.is_whitespace())?;
    let end = pos + ws.len_utf8();
    (buffer[..end].chars().count() >= AUTO_TRIGGER_CHARS).then_some(end)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fuzz_tests;
