//! The bundled prompts recognised through a lossy codec: what a WebRTC
//! caller hears is Opus, decoded, so no frame is byte for byte the
//! server's and [`super::PromptIndex`]'s exact match cannot work.
//!
//! What it is: every 20 ms frame of 16 kHz audio is described by its
//! loudness in four bands (below 350 Hz, to 900 Hz, to 2 kHz, above) in
//! each quarter of the frame, plus its total loudness (dB, floored). The
//! reference is the server's prompts as a WebRTC caller receives them:
//! converted to 16 kHz L16 the way the server converts them, sent
//! through an Opus encoder set up as the server's (VoIP, in-band FEC, 5 %
//! loss) and decoded, so the codec's delay and colouring are in the
//! reference too. A stretch of received frames is a prompt when a window
//! of [`WINDOW`] frames matches a stretch of a reference within
//! [`MATCH_DB`] (mean per-feature difference, the two worst frames left
//! out: the first frame of a prompt carries the codec's look-ahead of
//! whatever played before it). Measured on the bundled prompts after other
//! audio: matches are within ~0.7 dB; synthetic speech
//! (`media::synth`, what the simulated TTS speaks) stays above ~2.2 dB
//! from every prompt window.
//!
//! How it runs, per frame: a quiet frame (below [`QUIET_DB`]: the server
//! sends digital silence when nothing plays) is released at once as
//! quiet. Audio that starts after quiet is *held* until [`WINDOW`] frames
//! have arrived, then released all at once, each frame with its own arrival
//! time, as a prompt (the window matched; the frames after it are tracked
//! against the same reference, frame by frame, until they stop matching or
//! the reference ends — hold music loops) or as the bot's own audio (which
//! is searched again every [`RESEARCH_EVERY`] frames, for a prompt that
//! follows it without a pause). When the window matches two different
//! prompts (the apology and the goodbye both begin "Sorry, …") the frames
//! stay held, each candidate followed, until one is left, at most
//! [`MAX_HOLD`] frames. Holding costs a caller nothing measured: every
//! released frame keeps its arrival time.
//!
//! How to drive it: one [`LossyEar`] per call (the [`super::Ear`] of a
//! WebRTC caller holds it), [`LossyEar::frame`] for every decoded 20 ms
//! frame in arrival order; act on the [`Release`]s it returns.
//!
//! What it never does: decide from loudness alone, hold more than
//! [`MAX_HOLD`] frames, or search more than once per [`RESEARCH_EVERY`]
//! frames of own audio (a search is a fraction of a millisecond; following
//! a matched prompt is one frame comparison).

use std::collections::VecDeque;
use std::sync::LazyLock;
use std::time::Duration;

use media::format::AudioFormat;
use opus::{Application, Channels, Decoder, Encoder};

use crate::record::Prompt;

/// Samples in one 20 ms frame at 16 kHz.
pub const FRAME_SAMPLES: usize = 320;
/// Frames compared to decide what audio after quiet is (160 ms).
pub const WINDOW: usize = 8;
/// A window matches a prompt when its trimmed mean difference is below this.
pub const MATCH_DB: f32 = 1.3;
/// A tracked prompt is lost when the last frames differ by more than this.
const LOST_DB: f32 = 3.0;
/// A frame this quiet (total, dBFS) is silence: nothing is playing.
pub const QUIET_DB: f32 = -60.0;
/// Frames both this quiet compare as equal (a prompt's pauses).
const ACTIVE_DB: f32 = -50.0;
/// Frames of own audio between two searches for a prompt following it.
pub const RESEARCH_EVERY: u32 = 10;
/// Fewest loud frames a window needs before it can match anything.
const MIN_ACTIVE: usize = WINDOW / 2;
/// The frames left out of a window's mean (its worst).
const TRIM: usize = 2;
/// Band edges of the analysis (one-pole splits).
const CUTS_HZ: [f32; 3] = [350.0, 900.0, 2_000.0];
const BANDS: usize = 4;
const QUARTERS: usize = 4;
const FEATURES: usize = 1 + BANDS * QUARTERS;
const FLOOR_DB: f32 = -70.0;
const FULL_SCALE: f32 = 32_768.0 * 32_768.0;
/// Frames remembered for tracking a prompt.
const TRACK: usize = 4;

/// How one frame sounds, as numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Features([f32; FEATURES]);

impl Features {
    /// Total loudness, dBFS (floored).
    pub fn total_db(&self) -> f32 {
        self.0[0]
    }

    fn is_active(&self) -> bool {
        self.total_db() > ACTIVE_DB
    }
}

fn db(power: f32) -> f32 {
    (10.0 * (power / FULL_SCALE).max(1e-12).log10()).max(FLOOR_DB)
}

/// The analysis of one stream: its band filters keep their state from
/// frame to frame.
#[derive(Debug, Clone)]
pub struct Analyzer {
    coef: [f32; 3],
    state: [f32; 3],
}

impl Default for Analyzer {
    fn default() -> Self {
        let rate = AudioFormat::PCM16_16K.sample_rate as f32;
        Analyzer {
            coef: CUTS_HZ.map(|hz| 1.0 - (-std::f32::consts::TAU * hz / rate).exp()),
            state: [0.0; 3],
        }
    }
}

impl Analyzer {
    /// The features of one frame of samples (any length; 320 in practice).
    pub fn frame(&mut self, samples: &[i16]) -> Features {
        let mut power = [[0f32; BANDS]; QUARTERS];
        let n = samples.len().max(1);
        for (i, &x) in samples.iter().enumerate() {
            let x = f32::from(x);
            for (s, c) in self.state.iter_mut().zip(self.coef) {
                *s += c * (x - *s);
            }
            let [a, b, c] = self.state;
            let bands = [a, b - a, c - b, x - c];
            let q = &mut power[(i * QUARTERS / n).min(QUARTERS - 1)];
            for (p, v) in q.iter_mut().zip(bands) {
                *p += v * v;
            }
        }
        let mut f = [0f32; FEATURES];
        let total: f32 = power.iter().flatten().sum();
        f[0] = db(total / n as f32);
        let per_quarter = (n as f32 / QUARTERS as f32).max(1.0);
        for (slot, p) in f[1..].iter_mut().zip(power.iter().flatten()) {
            *slot = db(p / per_quarter);
        }
        Features(f)
    }

    /// The features of one frame of 16-bit little-endian bytes.
    pub fn frame_bytes(&mut self, frame: &[u8]) -> Features {
        let samples: Vec<i16> = frame
            .chunks_exact(2)
            .map(|c| i16::from_le_bytes([c[0], c[1]]))
            .collect();
        self.frame(&samples)
    }
}

/// Mean absolute feature difference of two frames; two quiet frames are
/// alike whatever their detail.
fn frame_distance(a: &Features, b: &Features) -> f32 {
    if !a.is_active() && !b.is_active() {
        return 0.0;
    }
    a.0.iter()
        .zip(&b.0)
        .map(|(x, y)| (x - y).abs())
        .sum::<f32>()
        / FEATURES as f32
}

/// The trimmed mean distance of `live` against `reference` (same length),
/// or infinity as soon as it must exceed `limit`.
fn window_distance(live: &[Features], reference: &[Features], limit: f32) -> f32 {
    let keep = live.len().saturating_sub(TRIM).max(1) as f32;
    let (mut sum, mut worst) = (0f32, [0f32; TRIM]);
    for (a, b) in live.iter().zip(reference) {
        let d = frame_distance(a, b);
        sum += d;
        if d > worst[1] {
            worst[1] = d;
            if worst[1] > worst[0] {
                worst.swap(0, 1);
            }
        }
        if sum - worst[0] - worst[1] > limit * keep {
            return f32::INFINITY;
        }
    }
    (sum - worst[0] - worst[1]) / keep
}

/// One prompt (or prompts played back to back) as a caller receives it.
#[derive(Debug)]
struct Sequence {
    frames: Vec<Features>,
    labels: Vec<Prompt>,
    /// The first frame that is not quiet: a run of the prompt starts there.
    first_heard: usize,
    /// Where the audio continues after the last frame (looped hold music).
    loop_to: Option<usize>,
}

/// Every prompt sequence, decoded as a caller would hear it.
#[derive(Debug, Default)]
pub struct Reference {
    seqs: Vec<Sequence>,
}

static REFERENCE: LazyLock<Reference> = LazyLock::new(|| {
    Reference::build().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "Opus reference of the prompts unavailable: WebRTC callers will not tell prompts apart");
        Reference::default()
    })
});

/// The server's Opus encoder, as `carrier/webrtc/opus.rs` sets it up.
pub(crate) fn server_encoder() -> Result<Encoder, opus::Error> {
    let mut enc = Encoder::new(16_000, Channels::Mono, Application::Voip)?;
    enc.set_inband_fec(true)?;
    enc.set_packet_loss_perc(5)?;
    Ok(enc)
}

/// `samples` through the server's encoder and a fresh decoder, whole
/// frames and the one its end spills into.
fn through_opus(samples: &[i16]) -> Result<Vec<i16>, opus::Error> {
    let mut enc = server_encoder()?;
    let mut dec = Decoder::new(16_000, Channels::Mono)?;
    let (mut packet, mut pcm) = (vec![0u8; 1_275], vec![0i16; FRAME_SAMPLES]);
    let mut out = Vec::with_capacity(samples.len() + 2 * FRAME_SAMPLES);
    // One frame of silence more: the codec's delay spills the end of the
    // audio into the frame after it.
    let silence = [0i16; FRAME_SAMPLES];
    for chunk in samples.chunks(FRAME_SAMPLES).chain([&silence[..]]) {
        let mut frame = chunk.to_vec();
        frame.resize(FRAME_SAMPLES, 0);
        let n = enc.encode(&frame, &mut packet)?;
        let m = dec.decode(&packet[..n], &mut pcm, false)?;
        out.extend_from_slice(&pcm[..m]);
    }
    Ok(out)
}

/// `p` as 16 kHz samples, converted the way the server converts it.
pub(crate) fn prompt_samples(p: Prompt) -> Vec<i16> {
    super::audio(p, AudioFormat::PCM16_16K)
        .unwrap_or_default()
        .chunks_exact(2)
        .map(|c| i16::from_le_bytes([c[0], c[1]]))
        .collect()
}

impl Reference {
    /// The process's reference, built on first use (~1,300 frames through
    /// Opus at the server's complexity: a quarter of a second, so an async
    /// caller builds it on a blocking thread first).
    pub fn get() -> &'static Reference {
        &REFERENCE
    }

    fn build() -> Result<Reference, opus::Error> {
        let mut seqs = Vec::new();
        for p in Prompt::ALL {
            let looped = p == Prompt::HoldMusic;
            seqs.push(Sequence::of(&[(p, prompt_samples(p))], looped)?);
        }
        // The server plays hold, then the music looped without a break
        // (`hold.rs`): its loops are off the music's own frame grid.
        let music = prompt_samples(Prompt::HoldMusic);
        let parts = [
            (Prompt::Hold, prompt_samples(Prompt::Hold)),
            (Prompt::HoldMusic, music.clone()),
            (Prompt::HoldMusic, music.clone()),
            (Prompt::HoldMusic, music),
        ];
        seqs.push(Sequence::of(&parts, true)?);
        Ok(Reference { seqs })
    }

    /// Frames in the reference (tests, diagnostics).
    pub fn len(&self) -> usize {
        self.seqs.iter().map(|s| s.frames.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Sequence {
    fn of(parts: &[(Prompt, Vec<i16>)], looped: bool) -> Result<Sequence, opus::Error> {
        let mut all = Vec::new();
        let mut ends = Vec::new();
        for (p, samples) in parts {
            all.extend_from_slice(samples);
            ends.push((all.len(), *p));
        }
        let decoded = through_opus(&all)?;
        let mut analyzer = Analyzer::default();
        // A prompt's last frame is padded with silence, as the server pads
        // it, and the codec's spill follows it; a looped sequence keeps
        // whole frames only, so that its loop continues on the same grid.
        let keep = if looped {
            all.len() / FRAME_SAMPLES
        } else {
            decoded.len() / FRAME_SAMPLES
        };
        let frames: Vec<Features> = decoded
            .chunks_exact(FRAME_SAMPLES)
            .take(keep)
            .map(|f| analyzer.frame(f))
            .collect();
        let labels = (0..frames.len())
            .map(|i| {
                let end = (i + 1) * FRAME_SAMPLES;
                ends.iter()
                    .find(|(e, _)| end <= *e)
                    .or(ends.last())
                    .map_or(Prompt::Hold, |(_, p)| *p)
            })
            .collect();
        // Loops of the last part repeat exactly when it is whole frames.
        let last = parts.last().map_or(0, |(_, s)| s.len());
        let period =
            (last > 0 && last.is_multiple_of(FRAME_SAMPLES)).then_some(last / FRAME_SAMPLES);
        let loop_to = period
            .filter(|_| looped)
            .and_then(|p| frames.len().checked_sub(p));
        Ok(Sequence {
            first_heard: frames.iter().position(Features::is_active).unwrap_or(0),
            frames,
            labels,
            loop_to,
        })
    }
}

/// What one received frame was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Silence: nothing was playing.
    Quiet,
    /// The bot's own audio.
    Own,
    /// Part of a bundled prompt; `starts`: its first audible frame.
    Prompt { prompt: Prompt, starts: bool },
}

/// A frame released, with its arrival time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    pub at: Duration,
    pub bytes: usize,
    pub class: Class,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    at: Duration,
    bytes: usize,
    f: Features,
}

/// A stretch of a reference the received audio may be.
#[derive(Debug, Clone, Copy)]
struct Cand {
    seq: usize,
    /// The reference frame the first held frame matched.
    start: usize,
    /// The reference frame the latest received frame matched.
    pos: usize,
    /// The latest frames' distances.
    recent: [f32; TRACK],
    /// All distances so far (to pick between candidates).
    sum: f32,
}

impl Cand {
    fn new(seq: usize, start: usize, n: usize, d: f32) -> Cand {
        Cand {
            seq,
            start,
            pos: start + n - 1,
            recent: [0.0; TRACK],
            sum: d * n as f32,
        }
    }

    /// Follows one more received frame; `None` once it no longer matches.
    fn step(mut self, reference: &Reference, f: &Features) -> Option<Cand> {
        let s = reference.seqs.get(self.seq)?;
        let next = s.next(self.pos)?;
        let d = frame_distance(f, s.frames.get(next)?);
        self.recent.rotate_left(1);
        self.recent[TRACK - 1] = d;
        self.sum += d;
        let worst = self.recent.iter().copied().fold(0f32, f32::max);
        if (self.recent.iter().sum::<f32>() - worst) / (TRACK - 1) as f32 > LOST_DB {
            return None;
        }
        self.pos = next;
        Some(self)
    }

    fn label(&self, reference: &Reference) -> Option<Prompt> {
        reference.seqs.get(self.seq)?.labels.get(self.pos).copied()
    }

    /// What the received frame `f` matching reference frame `i` is;
    /// `starts`: it is the first audible frame of a match that began at
    /// the prompt's beginning.
    fn class(&self, reference: &Reference, i: usize, starts: bool, f: &Features) -> Class {
        if f.total_db() <= QUIET_DB {
            return Class::Quiet;
        }
        let s = reference.seqs.get(self.seq);
        Class::Prompt {
            prompt: s
                .and_then(|s| s.labels.get(i))
                .copied()
                .unwrap_or(Prompt::Hold),
            starts,
        }
    }

    /// Whether this match began at its prompt's beginning.
    fn began_at_the_start(&self, reference: &Reference) -> bool {
        reference
            .seqs
            .get(self.seq)
            .is_some_and(|s| self.start <= s.first_heard)
    }
}

impl Sequence {
    /// The frame after `pos`: the next, or the loop's start.
    fn next(&self, pos: usize) -> Option<usize> {
        if pos + 1 < self.frames.len() {
            Some(pos + 1)
        } else {
            self.loop_to
        }
    }
}

impl Reference {
    /// Every sequence's best match for `window` (whose frames all
    /// arrived), within [`MATCH_DB`].
    fn candidates(&self, window: &[Features]) -> Vec<Cand> {
        let n = window.len();
        let Some(first) = window.iter().position(Features::is_active) else {
            return Vec::new();
        };
        if window.iter().filter(|f| f.is_active()).count() < MIN_ACTIVE.min(n) {
            return Vec::new();
        }
        let mut found = Vec::new();
        for (s, seq) in self.seqs.iter().enumerate() {
            let mut best = (MATCH_DB, None);
            for (start, r) in seq.frames.windows(n).enumerate() {
                // Cheap first: the first loud frame's loudness.
                if (r[first].total_db() - window[first].total_db()).abs() > 10.0 {
                    continue;
                }
                let d = window_distance(window, r, best.0);
                if d < best.0 {
                    best = (d, Some(start));
                }
            }
            if let (d, Some(start)) = best {
                found.push(Cand::new(s, start, n, d));
            }
        }
        found
    }
}

/// Longest hold while candidates of different prompts still match (two
/// prompts may begin alike: "Sorry, …"). Shorter than the caller's
/// silence grace, so a held prompt still ends a stretch of dead air.
pub const MAX_HOLD: usize = 40;

#[derive(Debug, Clone)]
enum Track {
    /// Nothing audible since the last quiet frame.
    Idle,
    /// The bot's own audio; frames since the last search.
    Own { since_search: u32 },
    /// Held frames match more than one prompt: still deciding.
    Deciding(Vec<Cand>),
    /// Following a prompt.
    Locked(Cand),
}

/// One call's lossy ear: see the module docs. Sans-IO and clock-free.
#[derive(Debug)]
pub struct LossyEar {
    reference: &'static Reference,
    analyzer: Analyzer,
    track: Track,
    /// Frames held since an onset (at most [`MAX_HOLD`]).
    held: Vec<Held>,
    /// The last [`WINDOW`] frames, for a search while own audio plays.
    recent: VecDeque<Features>,
}

impl Default for LossyEar {
    fn default() -> Self {
        LossyEar::with_reference(Reference::get())
    }
}

impl LossyEar {
    pub fn with_reference(reference: &'static Reference) -> LossyEar {
        LossyEar {
            reference,
            analyzer: Analyzer::default(),
            track: Track::Idle,
            held: Vec::with_capacity(MAX_HOLD),
            recent: VecDeque::with_capacity(WINDOW + 1),
        }
    }

    /// One received frame (16 kHz L16 bytes) at `at`; returns the frames
    /// now released, oldest first.
    pub fn frame(&mut self, at: Duration, frame: &[u8]) -> Vec<Release> {
        let f = self.analyzer.frame_bytes(frame);
        self.recent.push_back(f);
        if self.recent.len() > WINDOW {
            self.recent.pop_front();
        }
        let h = Held {
            at,
            bytes: frame.len(),
            f,
        };
        match std::mem::replace(&mut self.track, Track::Idle) {
            Track::Locked(c) => match c.step(self.reference, &f) {
                Some(c) => {
                    self.track = Track::Locked(c);
                    return vec![release(h, c.class(self.reference, c.pos, false, &f))];
                }
                None => self.track = Track::Idle,
            },
            Track::Deciding(cands) => {
                self.held.push(h);
                let cands = cands.into_iter().filter_map(|c| c.step(self.reference, &f));
                return self.resolve(cands.collect());
            }
            other => self.track = other,
        }
        let quiet = f.total_db() <= QUIET_DB;
        match self.track {
            Track::Own { since_search } if !quiet => vec![self.own(h, since_search + 1)],
            Track::Own { .. } | Track::Idle if quiet && self.held.is_empty() => {
                self.track = Track::Idle;
                vec![release(h, Class::Quiet)]
            }
            _ => {
                self.held.push(h);
                if self.held.len() < WINDOW {
                    return Vec::new();
                }
                let window: Vec<Features> = self.held.iter().map(|h| h.f).collect();
                let cands = self.reference.candidates(&window);
                self.resolve(cands)
            }
        }
    }

    /// A frame of own audio; searched again now and then.
    fn own(&mut self, h: Held, since_search: u32) -> Release {
        if since_search < RESEARCH_EVERY || self.recent.len() < WINDOW {
            self.track = Track::Own { since_search };
            return release(h, Class::Own);
        }
        let window: Vec<Features> = self.recent.iter().copied().collect();
        let best = self
            .reference
            .candidates(&window)
            .into_iter()
            .min_by(|a, b| a.sum.total_cmp(&b.sum));
        match best {
            Some(c) => {
                self.track = Track::Locked(c);
                release(h, c.class(self.reference, c.pos, false, &h.f))
            }
            None => {
                self.track = Track::Own { since_search: 0 };
                release(h, Class::Own)
            }
        }
    }

    /// The held frames are a prompt once the candidates agree on one (or
    /// the hold is as long as it may be), own audio when none is left.
    fn resolve(&mut self, cands: Vec<Cand>) -> Vec<Release> {
        let first = cands.first().and_then(|c| c.label(self.reference));
        let agree = cands.iter().all(|c| c.label(self.reference) == first);
        if !agree && self.held.len() < MAX_HOLD {
            self.track = Track::Deciding(cands);
            return Vec::new();
        }
        let held = std::mem::take(&mut self.held);
        let Some(best) = cands.into_iter().min_by(|a, b| a.sum.total_cmp(&b.sum)) else {
            return self.release_own(&held);
        };
        self.track = Track::Locked(best);
        let mut i = best.start;
        let mut starts = best.began_at_the_start(self.reference);
        let seq = self.reference.seqs.get(best.seq);
        let mut out = Vec::with_capacity(held.len());
        for h in &held {
            let class = best.class(self.reference, i, starts, &h.f);
            starts &= class == Class::Quiet;
            out.push(release(*h, class));
            i = seq.and_then(|s| s.next(i)).unwrap_or(i);
        }
        out
    }

    /// Held frames that are no prompt: the bot's own audio (or quiet).
    fn release_own(&mut self, held: &[Held]) -> Vec<Release> {
        let last_quiet = held.last().is_some_and(|h| h.f.total_db() <= QUIET_DB);
        self.track = if last_quiet {
            Track::Idle
        } else {
            Track::Own { since_search: 0 }
        };
        held.iter()
            .map(|h| {
                let quiet = h.f.total_db() <= QUIET_DB;
                release(*h, if quiet { Class::Quiet } else { Class::Own })
            })
            .collect()
    }
}

fn release(h: Held, class: Class) -> Release {
    Release {
        at: h.at,
        bytes: h.bytes,
        class,
    }
}

#[cfg(test)]
mod tests;
