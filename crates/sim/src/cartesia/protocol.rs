//! The per-socket protocol core of the Cartesia simulator, sans-IO.
//!
//! One [`SocketCore`] holds everything one `/tts/websocket` connection
//! knows: its contexts, their buffered transcript and queued speech, and
//! its clocks. It never touches a socket or reads the clock. The shell
//! feeds it client text frames ([`SocketCore::handle_text`]) and wake-ups
//! ([`SocketCore::handle_timeout`]), each with `now`, then drains
//! [`SocketCore::poll_output`] and sleeps until [`SocketCore::next_deadline`].
//!
//! The rules it implements (Cartesia's, from docs.cartesia.ai):
//! - A context is created by its first generation request and holds one
//!   of the [`Account`]'s concurrency slots until it ends; over the cap
//!   the request gets an `error` with `status_code` 429 and the socket
//!   stays open.
//! - `continue: true` buffers the transcript (managed buffering: until a
//!   sentence ends or `max_buffer_delay_ms` passes; `0` speaks each
//!   request at once); `continue: false` or `flush: true` speaks all of it.
//! - After `continue: false` the remaining audio goes out, then exactly
//!   one `done`. Every context ends with exactly one `done` or one `error`
//!   — or, when cancelled, with nothing.
//! - A context that has nothing left to say expires `context_expiry`
//!   after its last audio or input (Cartesia: 1 s after the last audio);
//!   the simulator then sends its `done`, and a later request naming it
//!   gets a 400 `error`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use media::synth::SpeechSynth;

use super::audio::{AudioFormat, PhonemeTimes, Speech};
use super::wire::{self, ApiVersion, Failure, Generation, Rejected, Request, Settings};
use crate::stats::FormatCounts;
use crate::tts::ContextAudio;

/// Audio per chunk message.
const CHUNK_MS: u64 = 200;

/// Distinct context ids whose audio one socket tallies separately; later
/// ids still count in the socket's totals. Bounds a client that invents
/// ids forever.
pub const MAX_TALLIED_CONTEXTS: usize = 256;

/// Ended context ids a socket remembers, so a request naming one gets a
/// 400 instead of silently opening a new context. Older ids are forgotten
/// (oldest first); a call uses one context per bot turn, far fewer.
const REMEMBERED_ENDED: usize = 64;

/// Most transcript (UTF-8 bytes) one context may hold unspoken; beyond it
/// the context fails with a 400 (the unbounded buffer of a client that never lets a
/// sentence end would otherwise grow forever).
pub const MAX_BUFFERED_CHARS: usize = 10_000;

/// Close codes the simulator uses.
pub mod close_code {
    /// The socket was idle for the idle timeout (Cartesia: 5 minutes).
    pub const NORMAL: u16 = 1000;
    /// The simulator is shutting down.
    pub const GOING_AWAY: u16 = 1001;
    /// An injected fault (`close_after_ms`).
    pub const INTERNAL: u16 = 1011;
}

/// Usage shared by every socket of one simulator (one Cartesia account):
/// active contexts (the concurrency Cartesia limits), the formats asked
/// for, and context outcomes. Plain atomics: no I/O, no clock.
#[derive(Debug, Default)]
pub struct Account {
    active: AtomicU32,
    pub(super) formats: FormatCounts,
    pub(super) rejected: AtomicU64,
    pub(super) expired: AtomicU64,
    pub(super) errored: AtomicU64,
    pub(super) audio_bytes: AtomicU64,
    pub(super) audio_ms: AtomicU64,
}

impl Account {
    /// Contexts active right now, all sockets.
    pub fn active_contexts(&self) -> u32 {
        self.active.load(Ordering::Acquire)
    }

    fn try_acquire(&self, cap: Option<u32>) -> bool {
        let cap = cap.unwrap_or(u32::MAX);
        self.active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < cap).then_some(n + 1)
            })
            .is_ok()
    }

    fn release(&self) {
        let _ = self
            .active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}

/// What one socket's core needs to know, fixed when the socket is accepted.
#[derive(Debug, Clone)]
pub struct CoreParams {
    /// The `Cartesia-Version` in force (it picks the error shape).
    pub version: ApiVersion,
    /// This socket's id, the stem of every error's `request_id`.
    pub request_id: String,
    pub first_chunk_latency: Duration,
    pub chars_per_second: f64,
    pub realtime_factor: f64,
    /// A context with nothing left to say ends this long after its last
    /// audio or input; `None`: never.
    pub context_expiry: Option<Duration>,
    /// No input and no audio for this long closes the socket (1000).
    pub idle_timeout: Duration,
    /// Fault: close the socket (1011) this long after it opened.
    pub close_after: Option<Duration>,
    /// Fault: a context that has spoken this many characters fails with a
    /// 500 `error` instead of its next chunk.
    pub error_after_chars: Option<u64>,
    /// Concurrent contexts across the [`Account`]; `None`: unlimited.
    pub max_contexts: Option<u32>,
    /// The voice ids the account may use; another gets a 404
    /// `voice_not_found` error. `None`: any id.
    pub voices: Option<Arc<[String]>>,
    pub account: Arc<Account>,
    /// Seed for the speech synthesiser (distinct sockets sound different).
    pub seed: u64,
}

impl CoreParams {
    /// Ordinary settings with every fault off and a fresh [`Account`];
    /// tests override what they need.
    pub fn quiet() -> Self {
        CoreParams {
            version: ApiVersion::V2025_04_16,
            request_id: "req".into(),
            first_chunk_latency: Duration::from_millis(100),
            chars_per_second: 15.0,
            realtime_factor: 4.0,
            context_expiry: Some(Duration::from_secs(1)),
            idle_timeout: Duration::from_secs(300),
            close_after: None,
            error_after_chars: None,
            max_contexts: None,
            voices: None,
            account: Arc::new(Account::default()),
            seed: 0,
        }
    }
}

/// Audio one socket sent: totals, and per context id (with the format the
/// context asked for) for the first [`MAX_TALLIED_CONTEXTS`] ids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AudioTally {
    pub total: ContextAudio,
    pub contexts: BTreeMap<String, ContextAudio>,
    pub formats: BTreeMap<String, String>,
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
        }
    }

    fn open(&mut self, context: &str, format: AudioFormat) {
        if self.contexts.len() < MAX_TALLIED_CONTEXTS && !self.contexts.contains_key(context) {
            self.contexts
                .insert(context.to_owned(), ContextAudio::default());
            self.formats.insert(context.to_owned(), format.to_string());
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

/// An item of a context's speech queue.
#[derive(Debug)]
enum Queued {
    /// Speech, and the flush segment it belongs to.
    Speech(Speech, u32),
    /// Acknowledge flush number `n` once the audio before it is out.
    FlushDone(u32),
}

/// How a context ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// All audio out after `continue: false`: `done`.
    Done,
    /// Nothing said for the expiry time: `done`, counted as expired.
    Expired,
    /// Cancelled by the client: nothing more is sent.
    Cancelled,
}

/// One context's state.
#[derive(Debug)]
struct Context {
    id: String,
    settings: Settings,
    /// Transcript received but not yet handed to speech.
    buffer: String,
    /// When buffered text is spoken even without a sentence end.
    buffer_deadline: Option<Instant>,
    queue: VecDeque<Queued>,
    /// When the head of `queue` is due (`None` when idle).
    next_chunk_at: Option<Instant>,
    /// `continue: false` received: `done` follows the last audio.
    finishing: bool,
    /// Last input or audio, for expiry.
    last_activity: Instant,
    /// Speech queued so far, in ms: where the next speech starts on the
    /// context's clock (word timestamps are on it).
    clock_ms: u64,
    chars_sent: u64,
    /// The current flush segment (1-based). Chunks carry the segment of
    /// their speech once the client has flushed this context (chunks sent
    /// before the first flush arrived carry none).
    flush_id: u32,
    flushed: bool,
    synth: SpeechSynth,
}

impl Context {
    /// Nothing buffered, queued or pending: only expiry can end it now.
    fn is_idle(&self) -> bool {
        !self.finishing && self.buffer.is_empty() && self.queue.is_empty()
    }
}

/// The per-socket protocol state machine.
#[derive(Debug)]
pub struct SocketCore {
    params: CoreParams,
    contexts: Vec<Context>,
    ended: VecDeque<String>,
    out: VecDeque<Outbound>,
    /// Last input or audio on the socket (idle timeout).
    last_busy: Instant,
    close_at: Option<Instant>,
    closed: bool,
    faulted: bool,
    tally: AudioTally,
    /// Numbers contexts for synthesiser seeds and server-chosen ids.
    next_context: u64,
}

impl Drop for SocketCore {
    fn drop(&mut self) {
        self.release_all();
    }
}

impl SocketCore {
    /// A core for a socket accepted at `now`.
    pub fn new(params: CoreParams, now: Instant) -> Self {
        SocketCore {
            close_at: params.close_after.map(|d| now + d),
            params,
            contexts: Vec::new(),
            ended: VecDeque::new(),
            out: VecDeque::new(),
            last_busy: now,
            closed: false,
            faulted: false,
            tally: AudioTally::default(),
            next_context: 1,
        }
    }

    /// The audio this socket has sent so far.
    pub fn audio(&self) -> &AudioTally {
        &self.tally
    }

    /// Contexts open on this socket.
    pub fn open_contexts(&self) -> usize {
        self.contexts.len()
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
        let expiry = self.params.context_expiry;
        let per_context = self.contexts.iter().flat_map(|c| {
            let expires = expiry.filter(|_| c.is_idle()).map(|e| c.last_activity + e);
            [c.next_chunk_at, c.buffer_deadline, expires]
        });
        per_context
            .flatten()
            .chain(self.close_at)
            .chain(Some(self.last_busy + self.params.idle_timeout))
            .min()
    }

    /// A text frame from the client.
    pub fn handle_text(&mut self, now: Instant, text: &str) {
        if self.closed {
            return;
        }
        self.last_busy = now;
        match wire::parse(text) {
            Ok(Request::Generate(g)) => self.generate(now, g),
            Ok(Request::Cancel { context_id }) => self.cancel(&context_id),
            Err(Rejected {
                context_id,
                failure,
            }) => self.reject(context_id.as_deref(), &failure),
        }
    }

    /// A binary frame: the API only speaks JSON text.
    pub fn handle_binary(&mut self, now: Instant) {
        if self.closed {
            return;
        }
        self.last_busy = now;
        let failure = Failure::BadRequest("binary frames are not accepted; send JSON text".into());
        self.send_error(None, &failure);
    }

    /// Time passed: release buffered text, send due audio, expire idle
    /// contexts, enforce the idle timeout and injected faults.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.closed {
            return;
        }
        if self.close_at.is_some_and(|t| t <= now) {
            self.faulted = true;
            return self.close(close_code::INTERNAL, "injected fault: close_after_ms");
        }
        if self.last_busy + self.params.idle_timeout <= now {
            return self.close(close_code::NORMAL, "idle timeout");
        }
        let mut i = 0;
        while i < self.contexts.len() {
            if self.step(i, now) {
                i += 1;
            }
        }
    }

    /// Advances context `idx` to `now`. False if it ended (and was removed).
    fn step(&mut self, idx: usize, now: Instant) -> bool {
        let ctx = &mut self.contexts[idx];
        if ctx.buffer_deadline.is_some_and(|t| t <= now) {
            self.speak_buffer(idx, now);
        }
        if !self.emit_due(idx, now) {
            return false;
        }
        let ctx = &self.contexts[idx];
        let expired = self
            .params
            .context_expiry
            .is_some_and(|e| ctx.is_idle() && ctx.last_activity + e <= now);
        if expired {
            self.end(idx, Ending::Expired);
            return false;
        }
        !self.finish_if_done(idx)
    }

    fn generate(&mut self, now: Instant, g: Generation) {
        let voice = &g.settings.voice_id;
        if self
            .params
            .voices
            .as_ref()
            .is_some_and(|v| !v.contains(voice))
        {
            let failure = Failure::VoiceNotFound(voice.clone());
            return self.reject(g.context_id.as_deref(), &failure);
        }
        let id = match g.context_id.clone() {
            Some(id) => id,
            None => {
                // The server names contexts a client did not.
                format!("{}-{}", self.params.request_id, self.next_context)
            }
        };
        let idx = match self.find(&id) {
            Some(idx) if self.contexts[idx].finishing => {
                let msg = format!("context {id:?} already received its last input");
                return self.fail_context(idx, &Failure::BadRequest(msg));
            }
            Some(idx) if self.contexts[idx].settings != g.settings => {
                let msg = "all fields except transcript, continue and duration must stay the \
                           same within a context";
                return self.fail_context(idx, &Failure::BadRequest(msg.into()));
            }
            Some(idx) => idx,
            None if self.ended.contains(&id) => {
                let msg = format!("context {id:?} has already ended and cannot be reused");
                return self.send_error(Some(&id), &Failure::BadRequest(msg));
            }
            None => match self.create(id, &g, now) {
                Some(idx) => idx,
                None => return,
            },
        };
        self.accept_input(idx, now, g);
    }

    /// Adds a request's transcript to context `idx` and applies its flags.
    fn accept_input(&mut self, idx: usize, now: Instant, g: Generation) {
        let ctx = &mut self.contexts[idx];
        ctx.last_activity = now;
        ctx.buffer.push_str(&g.transcript);
        if ctx.buffer.len() > MAX_BUFFERED_CHARS {
            let msg = format!("more than {MAX_BUFFERED_CHARS} bytes of transcript buffered");
            return self.fail_context(idx, &Failure::BadRequest(msg));
        }
        let speak_now =
            g.flush || !g.continues || g.max_buffer_delay.is_zero() || ends_sentence(&ctx.buffer);
        if speak_now {
            self.speak_buffer(idx, now);
        } else if ctx.buffer_deadline.is_none() && !ctx.buffer.is_empty() {
            ctx.buffer_deadline = Some(now + g.max_buffer_delay);
        }
        let ctx = &mut self.contexts[idx];
        if g.flush {
            ctx.queue.push_back(Queued::FlushDone(ctx.flush_id));
            ctx.flush_id += 1;
            ctx.flushed = true;
            ctx.next_chunk_at.get_or_insert(now);
        }
        ctx.finishing |= !g.continues;
        self.finish_if_done(idx);
    }

    /// Opens a context under the account's cap; `None` (and a 429) over it.
    fn create(&mut self, id: String, g: &Generation, now: Instant) -> Option<usize> {
        let account = &self.params.account;
        if !account.try_acquire(self.params.max_contexts) {
            account.rejected.fetch_add(1, Ordering::Relaxed);
            tracing::info!(context = %id, "context refused: concurrency limit");
            self.send_error(Some(&id), &Failure::ConcurrencyLimited);
            return None;
        }
        let format = g.settings.format;
        account.formats.count(&format.to_string());
        self.tally.open(&id, format);
        let seed = self.params.seed.wrapping_mul(1_000_003) + self.next_context;
        self.next_context += 1;
        tracing::debug!(context = %id, %format, "context created");
        self.contexts.push(Context {
            id,
            settings: g.settings.clone(),
            buffer: String::new(),
            buffer_deadline: None,
            queue: VecDeque::new(),
            next_chunk_at: None,
            finishing: false,
            last_activity: now,
            clock_ms: 0,
            chars_sent: 0,
            flush_id: 1,
            flushed: false,
            synth: SpeechSynth::new(format.sample_rate, seed),
        });
        Some(self.contexts.len() - 1)
    }

    /// Hands everything buffered on context `idx` to speech.
    fn speak_buffer(&mut self, idx: usize, now: Instant) {
        let cps = self.params.chars_per_second;
        let latency = self.params.first_chunk_latency;
        let ctx = &mut self.contexts[idx];
        ctx.buffer_deadline = None;
        let text = std::mem::take(&mut ctx.buffer);
        let Some(speech) = Speech::new(&text, cps, ctx.clock_ms) else {
            return;
        };
        ctx.clock_ms += speech.total_ms();
        ctx.queue.push_back(Queued::Speech(speech, ctx.flush_id));
        ctx.next_chunk_at.get_or_insert(now + latency);
    }

    /// Sends what is due on context `idx`. False if the context failed.
    fn emit_due(&mut self, idx: usize, now: Instant) -> bool {
        while let Some(due) = self.contexts[idx].next_chunk_at.filter(|t| *t <= now) {
            let ctx = &mut self.contexts[idx];
            match ctx.queue.front_mut() {
                None => ctx.next_chunk_at = None,
                Some(Queued::FlushDone(n)) => {
                    let msg = wire::flush_done(&ctx.id, *n);
                    ctx.queue.pop_front();
                    ctx.next_chunk_at = (!ctx.queue.is_empty()).then_some(due);
                    self.out.push_back(Outbound::Text(msg));
                }
                Some(Queued::Speech(..)) => {
                    let limit = self.params.error_after_chars;
                    if limit.is_some_and(|n| ctx.chars_sent >= n) {
                        self.params.account.errored.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(context = %ctx.id, "injected mid-stream error");
                        self.fail_context(idx, &Failure::Internal);
                        return false;
                    }
                    self.emit_chunk(idx, due, now);
                }
            }
        }
        true
    }

    /// Renders and sends the next chunk of context `idx`'s head speech.
    fn emit_chunk(&mut self, idx: usize, due: Instant, now: Instant) {
        let rf = self.params.realtime_factor.max(0.01);
        let ctx = &mut self.contexts[idx];
        let Some(Queued::Speech(speech, segment)) = ctx.queue.front_mut() else {
            return;
        };
        let flush_id = ctx.flushed.then_some(*segment);
        let chunk = speech.next_chunk(CHUNK_MS, &mut ctx.synth, ctx.settings.format);
        if speech.is_done() {
            ctx.queue.pop_front();
        }
        ctx.chars_sent += chunk.chars;
        ctx.last_activity = now;
        // Pace by the schedule, not by `now`, so a late wake-up does not
        // slow the stream down.
        let wall = Duration::from_secs_f64(chunk.ms as f64 / 1_000.0 / rf);
        ctx.next_chunk_at = (!ctx.queue.is_empty()).then_some(due + wall);
        let data = base64::engine::general_purpose::STANDARD.encode(&chunk.bytes);
        let step_ms = (wall.as_secs_f64() * 1_000_000.0).round() / 1_000.0;
        self.out.push_back(Outbound::Text(wire::chunk(
            &ctx.id, &data, step_ms, flush_id,
        )));
        if ctx.settings.add_timestamps && !chunk.words.words.is_empty() {
            self.out
                .push_back(Outbound::Text(wire::timestamps(&ctx.id, &chunk.words)));
        }
        if ctx.settings.add_phoneme_timestamps {
            let phonemes = PhonemeTimes::of(&chunk.words);
            if !phonemes.is_empty() {
                let msg = wire::phoneme_timestamps(&ctx.id, &phonemes);
                self.out.push_back(Outbound::Text(msg));
            }
        }
        let (bytes, ms) = (chunk.bytes.len() as u64, chunk.ms);
        let id = ctx.id.clone();
        self.tally.add(&id, bytes, ms);
        let account = &self.params.account;
        account.audio_bytes.fetch_add(bytes, Ordering::Relaxed);
        account.audio_ms.fetch_add(ms, Ordering::Relaxed);
        self.last_busy = now;
    }

    /// Ends context `idx` with `done` if its last input came and all its
    /// audio is out. True if it ended.
    fn finish_if_done(&mut self, idx: usize) -> bool {
        let ctx = &self.contexts[idx];
        let done = ctx.finishing && ctx.buffer.is_empty() && ctx.queue.is_empty();
        if done {
            self.end(idx, Ending::Done);
        }
        done
    }

    fn cancel(&mut self, id: &str) {
        match self.find(id) {
            Some(idx) => self.end(idx, Ending::Cancelled),
            None => tracing::debug!(context = %id, "cancel for an unknown context ignored"),
        }
    }

    /// Removes context `idx`, frees its slot and sends its last message.
    fn end(&mut self, idx: usize, how: Ending) {
        let ctx = self.contexts.remove(idx);
        self.params.account.release();
        tracing::debug!(context = %ctx.id, ending = ?how, "context ended");
        match how {
            Ending::Done => self.out.push_back(Outbound::Text(wire::done(&ctx.id))),
            Ending::Expired => {
                self.params.account.expired.fetch_add(1, Ordering::Relaxed);
                self.out.push_back(Outbound::Text(wire::done(&ctx.id)));
            }
            Ending::Cancelled => {}
        }
        self.remember_ended(ctx.id);
    }

    /// Ends context `idx` with an `error` instead of `done`.
    fn fail_context(&mut self, idx: usize, failure: &Failure) {
        let ctx = self.contexts.remove(idx);
        self.params.account.release();
        self.send_error(Some(&ctx.id), failure);
        self.remember_ended(ctx.id);
    }

    /// An `error` for a request that named `context_id`: ends that context
    /// if it is open (errors are final: `done: true`).
    fn reject(&mut self, context_id: Option<&str>, failure: &Failure) {
        match context_id.and_then(|id| self.find(id)) {
            Some(idx) => self.fail_context(idx, failure),
            None => self.send_error(context_id, failure),
        }
    }

    fn send_error(&mut self, context_id: Option<&str>, failure: &Failure) {
        tracing::debug!(context = ?context_id, %failure, "error sent");
        let msg = wire::error(
            self.params.version,
            &self.params.request_id,
            context_id,
            failure,
        );
        self.out.push_back(Outbound::Text(msg));
    }

    fn remember_ended(&mut self, id: String) {
        if self.ended.len() >= REMEMBERED_ENDED {
            self.ended.pop_front();
        }
        self.ended.push_back(id);
    }

    fn find(&self, id: &str) -> Option<usize> {
        self.contexts.iter().position(|c| c.id == id)
    }

    fn release_all(&mut self) {
        for _ in self.contexts.drain(..) {
            self.params.account.release();
        }
    }

    fn close(&mut self, code: u16, reason: &str) {
        self.out.push_back(Outbound::Close {
            code,
            reason: reason.to_owned(),
        });
        self.release_all();
        self.closed = true;
    }
}

/// True when buffered text ends a sentence (`.`, `!`, `?`, possibly
/// followed by closing quotes or spaces): enough context to speak well.
fn ends_sentence(buffer: &str) -> bool {
    buffer
        .trim_end_matches(|c: char| c.is_whitespace() || c == '"' || c == '\'' || c == ')')
        .ends_with(['.', '!', '?'])
}

#[cfg(test)]
mod tests;
