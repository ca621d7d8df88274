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
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use media::synth::SpeechSynth;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

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

/// How often a generation waiting for a concurrency slot looks again.
const SLOT_POLL: Duration = Duration::from_millis(10);

/// Ended context ids a socket remembers, so that a keep-alive racing the
/// context's end is ignored instead of being taken for one addressing a
/// context that was never initialised.
const REMEMBERED_ENDED: usize = 16;

/// The JSON `code` of the 429-style concurrency error.
pub const CODE_TOO_MANY_REQUESTS: u16 = 429;

/// Which alignment objects audio messages carry as `null` (fault
/// `null_alignment`). Normally both `alignment` and `normalizedAlignment`
/// are sent (the simulator does not normalise, so they are equal).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NullAlignment {
    /// Both present.
    #[default]
    None,
    /// `alignment` is null, `normalizedAlignment` present.
    Alignment,
    /// `normalizedAlignment` is null, `alignment` present.
    Normalized,
    /// Both null.
    Both,
}

/// Usage shared by every socket of one simulator (one "account"): the
/// generations in progress (for `max_concurrent_generations`) and the
/// characters generated (for `quota_chars`). Plain atomics: no I/O, no clock.
#[derive(Debug, Default)]
pub struct Account {
    generations: AtomicU32,
    chars: AtomicU64,
}

impl Account {
    /// Generations in progress right now, all sockets.
    pub fn generations(&self) -> u32 {
        self.generations.load(Ordering::Acquire)
    }

    fn try_acquire(&self, cap: u32) -> bool {
        self.generations
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < cap).then_some(n + 1)
            })
            .is_ok()
    }

    fn release(&self) {
        let _ = self
            .generations
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Adds `n` generated characters; returns the new total.
    fn charge(&self, n: u64) -> u64 {
        self.chars.fetch_add(n, Ordering::AcqRel) + n
    }
}

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
    /// Fault: generations in progress across the [`Account`]; `None` is
    /// unlimited. A generation over the cap waits `generation_queue`, then
    /// the socket gets a 429 error message and closes (1008).
    pub max_concurrent_generations: Option<u32>,
    /// How long a generation waits for a concurrency slot.
    pub generation_queue: Duration,
    /// Fault: characters the [`Account`] may generate; the generation that
    /// crosses it gets `quota_exceeded` and the socket closes (1008).
    pub quota_chars: Option<u64>,
    /// Fault: a closed context that never received text gets no `isFinal`.
    pub no_final_for_empty_context: bool,
    /// Fault: which alignment objects are sent as `null`.
    pub null_alignment: NullAlignment,
    /// Each context times out on its own after `inactivity_timeout` without
    /// a message addressed to it: its generation stops and its `isFinal` is
    /// sent. The socket's own inactivity timeout applies as well.
    pub context_inactivity: bool,
    /// Shared usage for the concurrency cap and the quota.
    pub account: Arc<Account>,
}

impl CoreParams {
    /// Defaults for every fault knob (all off, a fresh [`Account`]) with
    /// ordinary speech settings; tests override what they need.
    pub fn quiet() -> Self {
        CoreParams {
            format: OutputFormat::default(),
            max_contexts: 5,
            first_chunk_latency: Duration::from_millis(150),
            chars_per_second: 15.0,
            realtime_factor: 4.0,
            inactivity_timeout: Duration::from_secs(20),
            stall_audio: false,
            close_after: None,
            finish_flushed_on_close: false,
            ignore_close_socket: false,
            seed: 0,
            max_concurrent_generations: None,
            generation_queue: Duration::from_millis(50),
            quota_chars: None,
            no_final_for_empty_context: false,
            null_alignment: NullAlignment::None,
            context_inactivity: false,
            account: Arc::new(Account::default()),
        }
    }
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
    /// Received text to speak (the init space does not count).
    got_text: bool,
    /// Last message addressed to this context (per-context inactivity).
    last_input: Instant,
    /// Holds one of the account's generation slots.
    holds_slot: bool,
    /// Waiting for a generation slot since.
    waiting_since: Option<Instant>,
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
    /// Recently ended context ids (see [`REMEMBERED_ENDED`]).
    ended: VecDeque<String>,
}

impl Drop for SocketCore {
    fn drop(&mut self) {
        self.release_all_slots();
    }
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
            ended: VecDeque::new(),
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
        let idle = self
            .contexts
            .iter()
            .filter(|_| self.params.context_inactivity)
            .map(|c| c.last_input + self.params.inactivity_timeout);
        chunks
            .chain(idle)
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
        if self.params.context_inactivity {
            self.expire_idle_contexts(now);
        }
        for idx in 0..self.contexts.len() {
            self.emit_due_chunks(idx, now);
            if self.closed {
                return;
            }
        }
        self.reap_finished();
    }

    /// Per-context inactivity: a context nobody addressed for the timeout
    /// stops and gets its final.
    fn expire_idle_contexts(&mut self, now: Instant) {
        let timeout = self.params.inactivity_timeout;
        let mut i = 0;
        while i < self.contexts.len() {
            if self.contexts[i].last_input + timeout <= now {
                let mut ctx = self.contexts.remove(i);
                tracing::debug!(context = %ctx.id, "context inactivity timeout");
                self.release_slot(&mut ctx);
                self.send_final(&ctx.id);
                self.remember_ended(ctx.id);
            } else {
                i += 1;
            }
        }
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
            None if text.is_empty() && !flush && self.ended.contains(&id) => {
                tracing::debug!(context = %id, "keep-alive for an ended context ignored");
                return;
            }
            None if text.is_empty() && !flush => {
                return self.fail(
                    "context_not_initialized",
                    &format!("keep-alive for context {id:?}, which was never initialised"),
                );
            }
            None => {
                let Some(idx) = self.create(id, now) else {
                    return;
                };
                // A single space is the init marker, not speech.
                (idx, if text == " " { String::new() } else { text })
            }
        };
        let ctx = &mut self.contexts[idx];
        ctx.last_input = now;
        if ctx.closing {
            return; // text for a context that is finishing is ignored
        }
        ctx.got_text |= !text.trim().is_empty();
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
    fn create(&mut self, id: String, now: Instant) -> Option<usize> {
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
            got_text: false,
            last_input: now,
            holds_slot: false,
            waiting_since: None,
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
        if let Some(quota) = self.params.quota_chars {
            let n = text.chars().count() as u64;
            let used = self.params.account.charge(n);
            if used > quota {
                let left = quota.saturating_sub(used - n);
                return self.fail(
                    "quota_exceeded",
                    &format!(
                        "This request exceeds your quota of {quota}. You have {left} credits \
                         remaining, while {n} credits are required for this request."
                    ),
                );
            }
        }
        let ctx = &mut self.contexts[idx];
        ctx.queue.push_back(generation);
        if ctx.next_chunk_at.is_none() {
            ctx.next_chunk_at = Some(now + self.params.first_chunk_latency);
        }
    }

    fn emit_due_chunks(&mut self, idx: usize, now: Instant) {
        while let Some(due) = self.contexts[idx].next_chunk_at.filter(|t| *t <= now) {
            if !self.acquire_slot(idx, now) {
                return;
            }
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
            let alignment = serde_json::to_value(alignment).unwrap_or(Value::Null);
            let (plain, normalized) = match self.params.null_alignment {
                NullAlignment::None => (alignment.clone(), alignment),
                NullAlignment::Alignment => (Value::Null, alignment),
                NullAlignment::Normalized => (alignment, Value::Null),
                NullAlignment::Both => (Value::Null, Value::Null),
            };
            let msg = json!({
                "audio": base64::engine::general_purpose::STANDARD.encode(&bytes),
                "contextId": ctx.id,
                "isFinal": null,
                "alignment": plain,
                "normalizedAlignment": normalized,
            });
            self.out.push_back(Outbound::Text(msg.to_string()));
            // The generation is over: its concurrency slot is free again.
            if self.contexts[idx].queue.is_empty()
                && std::mem::take(&mut self.contexts[idx].holds_slot)
            {
                self.params.account.release();
            }
        }
    }

    /// Makes sure context `idx` holds a generation slot before its next
    /// chunk. False when it must wait (its next chunk is rescheduled) or
    /// the wait ran out (the socket is failed with the 429 error).
    fn acquire_slot(&mut self, idx: usize, now: Instant) -> bool {
        let Some(cap) = self.params.max_concurrent_generations else {
            return true;
        };
        let queue = self.params.generation_queue;
        let ctx = &mut self.contexts[idx];
        if ctx.holds_slot || ctx.queue.is_empty() {
            return true;
        }
        if self.params.account.try_acquire(cap) {
            ctx.holds_slot = true;
            ctx.waiting_since = None;
            return true;
        }
        let since = *ctx.waiting_since.get_or_insert(now);
        if since + queue <= now {
            self.fail_with(
                "too_many_concurrent_requests",
                &format!(
                    "Too many concurrent requests: this generation would exceed the \
                     concurrency limit of {cap}. Please try again later."
                ),
                CODE_TOO_MANY_REQUESTS,
            );
            return false;
        }
        ctx.next_chunk_at = Some((now + SLOT_POLL).min(since + queue));
        false
    }

    fn release_slot(&self, ctx: &mut Context) {
        if std::mem::take(&mut ctx.holds_slot) {
            self.params.account.release();
        }
        ctx.waiting_since = None;
    }

    fn release_all_slots(&mut self) {
        for ctx in &mut self.contexts {
            if std::mem::take(&mut ctx.holds_slot) {
                self.params.account.release();
            }
        }
    }

    fn remember_ended(&mut self, id: String) {
        if self.ended.len() >= REMEMBERED_ENDED {
            self.ended.pop_front();
        }
        self.ended.push_back(id);
    }

    /// Sends the final message for closing contexts whose audio is all out,
    /// and finishes a pending `close_socket`.
    fn reap_finished(&mut self) {
        let mut i = 0;
        while i < self.contexts.len() {
            if self.contexts[i].closing && self.contexts[i].queue.is_empty() {
                let mut ctx = self.contexts.remove(i);
                self.release_slot(&mut ctx);
                if self.params.no_final_for_empty_context && !ctx.got_text {
                    tracing::debug!(context = %ctx.id, "final withheld (fault)");
                } else {
                    self.send_final(&ctx.id);
                }
                self.remember_ended(ctx.id);
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
            if std::mem::take(&mut ctx.holds_slot) {
                self.params.account.release();
            }
            ctx.waiting_since = None;
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
        self.fail_with(error, message, close_code::POLICY);
    }

    /// An error message whose JSON `code` is `code`, followed by a 1008
    /// close whose reason is `error`.
    fn fail_with(&mut self, error: &str, message: &str, code: u16) {
        tracing::info!(error, message, "closing socket on a policy violation");
        let msg = json!({ "message": message, "error": error, "code": code });
        self.out.push_back(Outbound::Text(msg.to_string()));
        self.close(close_code::POLICY, error);
    }

    fn close(&mut self, code: u16, reason: &str) {
        self.out.push_back(Outbound::Close {
            code,
            reason: reason.to_owned(),
        });
        self.release_all_slots();
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
