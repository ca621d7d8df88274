//! The inbound jitter buffer: RTP packets in, in any order and at any
//! time; one 20 ms frame out per playout tick.
//!
//! Sans-IO: the leg calls [`JitterBuffer::push`] for each audio packet
//! (sequence number, RTP timestamp, payload, arrival time) and
//! [`JitterBuffer::tick`] once per 20 ms tick of its own playout clock.
//! One frame is one tick ([`crate::format::FRAME`]), so the RTP clock is
//! `frame_samples × 50` Hz (8 kHz for 160-sample frames), and one payload
//! byte is one sample (G.711).
//!
//! # Placement: timestamps decide
//!
//! The buffer keeps a playout point (the RTP timestamp of the next frame)
//! and writes each packet's samples at its timestamp's offset from it, so
//! packets of any size (10, 20, 30 ms…) reassemble into exact frames, and
//! reordering across the 65535 → 0 sequence wrap (or the timestamp wrap)
//! is the same as any other. Where two packets overlap, the first copy
//! wins. Sequence numbers only recognise duplicates (within the last 128)
//! and stream restarts.
//!
//! # Phases
//!
//! - **Idle** (before the first packet, after going idle, after
//!   [`JitterBuffer::reset`]): `tick` returns `None`. A packet anchors the
//!   playout point on its timestamp and starts prebuffering.
//! - **Prebuffering**: `tick` returns `None` until the buffer holds the
//!   target depth (or `max_depth_frames` ticks have passed with something
//!   buffered). A packet from just before the playout point moves it back
//!   (reordering at the very start loses nothing) if the ring has room.
//! - **Playing**: one frame per tick. A frame still incomplete at its turn
//!   while the buffer holds less than the target depth is waited for
//!   (rebuffering, below). Once the target depth is buffered it is given
//!   up: with no audio it is [`Playout::Concealed`] (the caller substitutes
//!   one frame of silence) and a packet for it arriving later is
//!   [`Push::Late`]; with some of its samples it is played with silence in
//!   the gaps.
//! - **Rebuffering**: `tick` returns `Concealed` *without* moving the
//!   playout point, until the target depth is buffered. This is how the
//!   buffer's delay grows towards the target: only when a frame is
//!   missing, never by inserting silence into audio that is there. An
//!   underrun (nothing buffered) is the same case.
//!
//! # Target depth (bounded)
//!
//! `T = clamp(⌈(2J + P + F − gcd(P, F)) / F⌉, min_depth, max_depth)` frames,
//! where `J` is the RFC 3550 A.8 interarrival jitter of the packets pushed
//! (whole samples), `F` the frame and `P` the last packet's size. With
//! one-frame packets that is `⌈2J / F⌉ + 1`; larger or unaligned packets
//! need the extra so a frame is never played before the packet completing
//! it is due. `J` decays with a 16-packet time constant, so `T` shrinks
//! back when the jitter does. The delay is thus bounded by
//! `max_depth_frames` (plus the frame playing).
//!
//! # Shrinking the delay
//!
//! When resuming, empty frames at the head are skipped (no tick spent) as
//! long as the target is still held without them. While playing more than
//! one frame above the target (`depth ≥ T + 2`), an empty head frame is
//! skipped instead of concealed, and if that excess lasts
//! [`TRIM_AFTER_TICKS`] ticks the head frame is dropped even though it
//! holds audio (one frame per `TRIM_AFTER_TICKS`, counted in
//! `dropped_frames`).
//!
//! # Overflow policy (bounded memory)
//!
//! The buffer never holds more than `max_depth_frames`: a packet reaching
//! beyond drops the oldest frames to make room (counted in
//! `dropped_frames` when they held audio, `skipped_frames` when not). It
//! allocates its `max_depth_frames` slots once.
//!
//! # Resynchronisation and idling
//!
//! A packet [`TOO_FAR_FRAMES`] frames of timestamp or [`TOO_FAR_PACKETS`]
//! sequence numbers or more from where the stream is (either way) is a
//! new stream — the peer restarted it. The buffer discards what it holds,
//! anchors on that packet and prebuffers ([`Push::TooFar`], counted in
//! `resyncs`; `tick` returns `None` until the new stream reaches the
//! target depth, one tick for a one-frame target); an SSRC change is the
//! caller's to report with [`JitterBuffer::reset`]. With nothing buffered and no packet queued for
//! `idle_after_frames` ticks (the peer is on hold, or silent) the buffer
//! goes idle rather than conceal forever, and prebuffers again on the next
//! packet.
//!
//! # Statistics
//!
//! [`JitterStats`] always satisfies
//! `received = queued + late + duplicates + resyncs`, and
//! `played + concealed` is the number of ticks that returned `Some`.

mod ring;
#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

use super::stats::InterarrivalJitter;
use crate::format::FRAME_MS;
use crate::g711::ULAW_SILENCE;
use ring::Ring;

/// A packet this many frames of timestamp from the playout point, or
/// further, either way, starts a new stream.
pub const TOO_FAR_FRAMES: u32 = 100;
/// A packet this many sequence numbers from the highest, or further,
/// either way, starts a new stream.
pub const TOO_FAR_PACKETS: u16 = 100;
/// Ticks of sustained excess depth before a frame of audio is dropped.
pub const TRIM_AFTER_TICKS: u32 = 25;
/// The largest frame, in samples (200 ms at 48 kHz); larger is clamped.
pub const MAX_FRAME_SAMPLES: u32 = 9_600;

/// Tuning of a [`JitterBuffer`]. [`JitterBuffer::new`] clamps it:
/// `frame_samples` to 1..=[`MAX_FRAME_SAMPLES`], `max_depth_frames` to
/// 1..=[`TOO_FAR_FRAMES`], `min_depth_frames` to 1..=`max_depth_frames`,
/// `idle_after_frames` to at least 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JitterConfig {
    /// Samples per frame, and per tick: 160 for 20 ms at 8 kHz.
    pub frame_samples: u32,
    /// The least target depth, in frames (the delay on a perfect network).
    pub min_depth_frames: u32,
    /// The most the buffer holds, in frames (10 = 200 ms): the bound on
    /// both its delay and its memory.
    pub max_depth_frames: u32,
    /// Ticks with nothing buffered and nothing received before going idle.
    pub idle_after_frames: u32,
}

impl Default for JitterConfig {
    /// 20 ms frames at 8 kHz, 20..=200 ms of depth, idle after 300 ms.
    fn default() -> Self {
        JitterConfig {
            frame_samples: 160,
            min_depth_frames: 1,
            max_depth_frames: 10,
            idle_after_frames: 15,
        }
    }
}

impl JitterConfig {
    fn clamped(self) -> Self {
        let max_depth_frames = self.max_depth_frames.clamp(1, TOO_FAR_FRAMES);
        JitterConfig {
            frame_samples: self.frame_samples.clamp(1, MAX_FRAME_SAMPLES),
            min_depth_frames: self.min_depth_frames.clamp(1, max_depth_frames),
            max_depth_frames,
            idle_after_frames: self.idle_after_frames.max(1),
        }
    }
}

/// What [`JitterBuffer::push`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Push {
    /// Stored for playout (a packet straddling the playout point keeps its
    /// part still to play).
    Queued,
    /// Dropped: its frames were already played.
    Late,
    /// Dropped: this sequence number was already received.
    Duplicate,
    /// Too far from the stream: the buffer resynchronised on it (it is
    /// stored as the first packet of the new stream).
    TooFar,
}

/// What one tick plays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Playout {
    /// One frame, exactly `frame_samples` bytes (silence in any gap).
    Frame(Vec<u8>),
    /// A lost or not-yet-arrived frame: the caller substitutes one frame
    /// of silence (or its own concealment).
    Concealed,
}

/// Where the buffer is (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Nothing to play; `tick` returns `None`.
    Idle,
    /// Filling to the target depth; `tick` returns `None`.
    Prebuffering,
    /// One frame per tick.
    Playing,
    /// Ran dry: concealing with the playout point held.
    Rebuffering,
}

/// Counters and gauges of a [`JitterBuffer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JitterStats {
    /// Packets pushed.
    pub received: u64,
    /// Packets stored ([`Push::Queued`]).
    pub queued: u64,
    /// Packets dropped as late.
    pub late: u64,
    /// Packets dropped as duplicates.
    pub duplicates: u64,
    /// Resynchronisations on a packet too far from the stream.
    pub resyncs: u64,
    /// Ticks that played a frame.
    pub played: u64,
    /// Ticks that concealed a frame.
    pub concealed: u64,
    /// Frames holding audio discarded unplayed (overflow or trimming).
    pub dropped_frames: u64,
    /// Empty frames passed over without a tick (gaps skipped to keep the
    /// delay at the target).
    pub skipped_frames: u64,
    /// Frames buffered now, from the playout point to the newest audio.
    pub depth_frames: u32,
    /// The most frames ever buffered (never above `max_depth_frames`).
    pub max_depth_frames: u32,
    /// The target depth now.
    pub target_depth_frames: u32,
    /// Arrival-to-playout delay of the last frame played.
    pub last_delay: Duration,
    /// The largest arrival-to-playout delay of a frame played.
    pub max_delay: Duration,
}

/// The state machine of the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    Prebuffering { ticks: u32 },
    Playing { over_ticks: u32 },
    Rebuffering { ticks: u32 },
}

/// Sequence numbers received lately, to recognise duplicates.
#[derive(Debug, Clone, Copy)]
struct SeqWindow {
    highest: u16,
    /// Bit `i`: `highest - i` was received.
    seen: u128,
}

impl SeqWindow {
    fn new(seq: u16) -> Self {
        SeqWindow {
            highest: seq,
            seen: 1,
        }
    }

    /// How far `seq` is from the highest (positive: ahead).
    fn distance(&self, seq: u16) -> i16 {
        seq.wrapping_sub(self.highest) as i16
    }

    /// Records `seq`; whether it had been received already.
    fn mark(&mut self, seq: u16) -> bool {
        let d = self.distance(seq);
        if d > 0 {
            self.seen = self.seen.checked_shl(d as u32).unwrap_or(0) | 1;
            self.highest = seq;
            return false;
        }
        let Some(bit) = 1u128.checked_shl(u32::from(d.unsigned_abs())) else {
            return false;
        };
        let seen = self.seen & bit != 0;
        self.seen |= bit;
        seen
    }
}

/// The jitter buffer (see the module docs for its policies).
#[derive(Debug, Clone)]
pub struct JitterBuffer {
    /// Clamped at construction.
    cfg: JitterConfig,
    state: State,
    /// RTP timestamp of the first sample of the frame to play next.
    cursor: u32,
    ring: Ring,
    seqs: SeqWindow,
    jitter: InterarrivalJitter,
    /// Samples in the last non-empty packet: sets the depth its size needs.
    packet_samples: u32,
    /// Ticks since a packet was last stored.
    quiet_ticks: u32,
    stats: JitterStats,
}

impl JitterBuffer {
    /// A buffer for μ-law audio (gaps in a frame are μ-law silence).
    pub fn new(cfg: JitterConfig) -> Self {
        Self::with_silence(cfg, ULAW_SILENCE)
    }

    /// A buffer filling gaps within a frame with the code word `silence`
    /// ([`crate::g711::ALAW_SILENCE`] for PCMA).
    pub fn with_silence(cfg: JitterConfig, silence: u8) -> Self {
        let cfg = cfg.clamped();
        JitterBuffer {
            cfg,
            state: State::Idle,
            cursor: 0,
            ring: Ring::new(cfg.frame_samples, cfg.max_depth_frames, silence),
            seqs: SeqWindow::new(0),
            jitter: InterarrivalJitter::default(),
            packet_samples: cfg.frame_samples,
            quiet_ticks: 0,
            stats: JitterStats::default(),
        }
    }

    /// Offers one received audio packet.
    pub fn push(&mut self, seq: u16, ts: u32, payload: &[u8], arrival: Instant) -> Push {
        let verdict = self.classify(seq, ts, payload.len());
        self.stats.received += 1;
        match verdict {
            Push::Queued => self.stats.queued += 1,
            Push::Late => self.stats.late += 1,
            Push::Duplicate => self.stats.duplicates += 1,
            Push::TooFar => self.stats.resyncs += 1,
        }
        if verdict != Push::Duplicate {
            self.jitter.on_arrival(ts, arrival, self.clock_rate());
        }
        if matches!(verdict, Push::Queued | Push::TooFar) {
            self.store(ts, payload, arrival);
        }
        verdict
    }

    /// Plays the frame due at this tick; call once per 20 ms. `None` while
    /// idle or prebuffering; `now` measures the frame's delay.
    pub fn tick(&mut self, now: Instant) -> Option<Playout> {
        self.quiet_ticks = self.quiet_ticks.saturating_add(1);
        if self.state != State::Idle
            && self.quiet_ticks >= self.cfg.idle_after_frames
            && self.ring.span() == 0
        {
            self.go_idle();
        }
        let out = match self.state {
            State::Idle => None,
            State::Prebuffering { ticks } if !self.ready(ticks + 1) => {
                self.state = State::Prebuffering { ticks: ticks + 1 };
                None
            }
            State::Rebuffering { ticks } if !self.ready(ticks + 1) => {
                self.state = State::Rebuffering { ticks: ticks + 1 };
                Some(Playout::Concealed)
            }
            State::Prebuffering { .. } | State::Rebuffering { .. } => Some(self.resume(now)),
            State::Playing { over_ticks } => Some(self.play_on(now, over_ticks)),
        };
        match out {
            Some(Playout::Frame(_)) => self.stats.played += 1,
            Some(Playout::Concealed) => self.stats.concealed += 1,
            None => {}
        }
        out
    }

    /// Forgets the stream (the caller saw the SSRC change): idle until the
    /// next packet. Counters are kept; the jitter estimate too (same path).
    pub fn reset(&mut self) {
        self.go_idle();
        self.jitter.restart();
    }

    /// Counters and gauges.
    pub fn stats(&self) -> JitterStats {
        JitterStats {
            depth_frames: self.depth_frames(),
            target_depth_frames: self.target_depth_frames(),
            ..self.stats
        }
    }

    /// Where the buffer is.
    pub fn phase(&self) -> Phase {
        match self.state {
            State::Idle => Phase::Idle,
            State::Prebuffering { .. } => Phase::Prebuffering,
            State::Playing { .. } => Phase::Playing,
            State::Rebuffering { .. } => Phase::Rebuffering,
        }
    }

    /// The configuration, as clamped.
    pub fn config(&self) -> JitterConfig {
        self.cfg
    }

    /// Frames buffered, from the playout point to the newest audio.
    pub fn depth_frames(&self) -> u32 {
        self.ring.span().div_ceil(self.cfg.frame_samples)
    }

    /// The target depth now (see the module docs for the formula).
    pub fn target_depth_frames(&self) -> u32 {
        let f = u64::from(self.cfg.frame_samples);
        let p = u64::from(self.packet_samples);
        // J in whole samples, as a report block has it: the integer
        // estimator's ×16 residue (≤ 7) must not hold the target up.
        let j = self.jitter.q4() >> 4;
        let need = 2 * j + p + f - gcd(p, f);
        let frames = need.div_ceil(f).min(u64::from(u32::MAX)) as u32;
        frames.clamp(self.cfg.min_depth_frames, self.cfg.max_depth_frames)
    }

    /// The RTP clock: one frame per [`crate::format::FRAME`].
    fn clock_rate(&self) -> u32 {
        self.cfg.frame_samples * (1_000 / FRAME_MS as u32)
    }

    /// Signed samples from the playout point to `ts`.
    fn offset(&self, ts: u32) -> i64 {
        i64::from(ts.wrapping_sub(self.cursor) as i32)
    }

    fn frame(&self) -> u32 {
        self.cfg.frame_samples
    }

    /// Decides a packet's fate, resynchronising or moving the playout
    /// point back where that is the decision.
    fn classify(&mut self, seq: u16, ts: u32, len: usize) -> Push {
        if self.state == State::Idle {
            self.anchor(seq, ts);
            return Push::Queued;
        }
        let offset = self.offset(ts);
        let far = i64::from(TOO_FAR_FRAMES) * i64::from(self.frame());
        if offset.abs() >= far || self.seqs.distance(seq).unsigned_abs() >= TOO_FAR_PACKETS {
            self.anchor(seq, ts);
            return Push::TooFar;
        }
        if self.seqs.mark(seq) {
            return Push::Duplicate;
        }
        let end = offset.saturating_add(i64::try_from(len).unwrap_or(i64::MAX));
        if offset < 0 && !self.move_back(offset) && end <= 0 {
            return Push::Late;
        }
        Push::Queued
    }

    /// While prebuffering, moves the playout point back to a packet from
    /// before it, if the ring has room.
    fn move_back(&mut self, offset: i64) -> bool {
        if !matches!(self.state, State::Prebuffering { .. }) {
            return false;
        }
        let frames = offset.unsigned_abs().div_ceil(u64::from(self.frame()));
        if !self.ring.retreat(frames) {
            return false;
        }
        self.cursor = self
            .cursor
            .wrapping_sub((frames * u64::from(self.frame())) as u32);
        true
    }

    /// Starts a new stream on this packet: prebuffering from its timestamp.
    fn anchor(&mut self, seq: u16, ts: u32) {
        self.ring.clear();
        self.cursor = ts;
        self.seqs = SeqWindow::new(seq);
        self.jitter.restart();
        self.state = State::Prebuffering { ticks: 0 };
    }

    fn go_idle(&mut self) {
        self.ring.clear();
        self.state = State::Idle;
    }

    /// Writes a packet's samples, dropping the oldest frames if it reaches
    /// beyond the ring.
    fn store(&mut self, ts: u32, payload: &[u8], arrival: Instant) {
        self.quiet_ticks = 0;
        let len = i64::try_from(payload.len()).unwrap_or(i64::MAX);
        if len > 0 {
            self.packet_samples = len.min(self.ring.capacity()) as u32;
        }
        let mut offset = self.offset(ts);
        let excess = offset.saturating_add(len) - self.ring.capacity();
        if excess > 0 {
            let frames = excess.unsigned_abs().div_ceil(u64::from(self.frame()));
            self.pass(frames);
            offset -= (frames * u64::from(self.frame())) as i64;
        }
        self.ring.place(offset, payload, arrival);
        self.stats.max_depth_frames = self.stats.max_depth_frames.max(self.depth_frames());
    }

    /// Moves the playout point `frames` on without playing them.
    fn pass(&mut self, frames: u64) {
        let passed = self.ring.advance(frames);
        self.stats.dropped_frames += passed.with_audio;
        self.stats.skipped_frames += passed.empty;
        let samples = frames.wrapping_mul(u64::from(self.frame()));
        self.cursor = self.cursor.wrapping_add(samples as u32);
    }

    /// Whether prebuffering or rebuffering may end at its `ticks`-th tick.
    fn ready(&self, ticks: u32) -> bool {
        let span = self.ring.span();
        span >= self.target_depth_frames() * self.frame()
            || (span > 0 && ticks >= self.cfg.max_depth_frames)
    }

    /// Starts playing: skips empty head frames the target does not need.
    fn resume(&mut self, now: Instant) -> Playout {
        self.skip_empty_head(self.target_depth_frames() * self.frame());
        self.state = State::Playing { over_ticks: 0 };
        self.play(now)
    }

    /// One tick of playing: waiting for an incomplete head frame, delay
    /// trimming, then the frame.
    fn play_on(&mut self, now: Instant, over_ticks: u32) -> Playout {
        let span = self.ring.span();
        let target = self.target_depth_frames();
        if !self.ring.head_is_complete() && span < target * self.frame() {
            self.state = State::Rebuffering { ticks: 1 };
            return Playout::Concealed;
        }
        let high = (target + 1) * self.frame();
        let mut over_ticks = if span > high { over_ticks + 1 } else { 0 };
        if over_ticks > 0 {
            self.skip_empty_head(high - self.frame() + 1);
            if over_ticks >= TRIM_AFTER_TICKS && self.ring.span() > high {
                self.pass(1);
                over_ticks = 0;
            }
        }
        self.state = State::Playing { over_ticks };
        self.play(now)
    }

    /// Skips empty head frames while the rest still spans `keep` samples.
    fn skip_empty_head(&mut self, keep: u32) {
        while self.ring.head_is_empty() && self.ring.span() >= keep + self.frame() {
            self.pass(1);
        }
    }

    /// Plays the head frame and moves the playout point on.
    fn play(&mut self, now: Instant) -> Playout {
        let out = match self.ring.take_head() {
            Some((frame, arrival)) => {
                let delay = now.saturating_duration_since(arrival);
                self.stats.last_delay = delay;
                self.stats.max_delay = self.stats.max_delay.max(delay);
                Playout::Frame(frame)
            }
            None => Playout::Concealed,
        };
        self.cursor = self.cursor.wrapping_add(self.frame());
        out
    }
}

/// Greatest common divisor (Euclid); `gcd(0, n) = n`.
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}
