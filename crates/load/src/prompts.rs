//! The server's bundled prompts as a caller knows them: by their sound.
//!
//! callgate plays a few prompts that need no provider — hold audio, the
//! "high call volume" overflow prompt, the watchdog's stall apology, the
//! transfer and goodbye prompts. A caller that took the first bot audio
//! after its utterance for the reply would count "one moment, please" as an
//! answer, and a slow server that apologises would look fast. This module
//! tells a prompt from a reply by what arrives.
//!
//! How: the prompts are known audio. The load tool reads the server's
//! *audio assets* (`crates/callgate/assets/*.ulaw`, μ-law 8 kHz, through
//! `include_bytes!` — audio files, not wire-handling code; the load tool
//! still has its own codecs for both protocols) and indexes every 20 ms
//! frame of every prompt in each audio format a call can speak, converted
//! the way the server converts them: μ-law as is, 16-bit linear 16 kHz by
//! μ-law decoding and `media`'s 2× upsampler run once over the whole prompt,
//! A-law by re-encoding. The server sends prompts in whole frames from the
//! prompt's start (20 ms frames in a call, 500 ms chunks of them while
//! queued or refused), padding the last one with silence, so every frame it
//! sends of a prompt is byte for byte one of the indexed frames. Matching is
//! exact (the frame's bytes are compared, not only a hash), so reply audio
//! is never taken for a prompt; a prompt cut short is still recognised by
//! the frames that did arrive.
//!
//! Hold music follows the spoken hold prompt without a break, so its
//! frames are off the music's own frame grid; the index holds the
//! sequence exactly as the server plays it (hold, then the music looped)
//! as well as the music alone.
//!
//! A frame of digital silence (the format's silence byte throughout: the
//! padding of a prompt's last chunk) says nothing about what is playing:
//! it belongs to whatever it follows. Every other frame that is in no index
//! is the bot's own audio (a greeting or a reply).
//!
//! What it never does: guess from loudness or length, or look at anything
//! but the bytes the caller received. (A WebRTC caller receives Opus: no
//! byte survives the codec, so its ear compares the *sound* of the frames
//! with the prompts decoded the same way instead — [`lossy`].)

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::LazyLock;
use std::time::Duration;

use media::format::{AudioEncoding, AudioFormat};
use media::g711;

use crate::record::Prompt;
use crate::transport;

/// The server's assets, in [`Prompt::ALL`] order.
static ULAW: [&[u8]; 6] = [
    include_bytes!("../../callgate/assets/overflow.ulaw"),
    include_bytes!("../../callgate/assets/hold.ulaw"),
    include_bytes!("../../callgate/assets/hold_music.ulaw"),
    include_bytes!("../../callgate/assets/apology.ulaw"),
    include_bytes!("../../callgate/assets/transfer.ulaw"),
    include_bytes!("../../callgate/assets/goodbye.ulaw"),
];

/// `prompt`'s audio in `format`, converted the way the server converts it.
/// `None` for a format the server has no conversion for.
pub fn audio(prompt: Prompt, format: AudioFormat) -> Option<Vec<u8>> {
    let ulaw = ULAW[index_of(prompt)];
    Some(match (format.encoding, format.sample_rate) {
        (AudioEncoding::Mulaw, 8_000) => ulaw.to_vec(),
        (AudioEncoding::Alaw, 8_000) => g711::encode_alaw(&g711::decode_ulaw(ulaw)),
        (AudioEncoding::Pcm16Le, 16_000) => {
            let pcm8 = g711::decode_ulaw(ulaw);
            let pcm16 = media::resample::Upsampler2x::default().process(&pcm8);
            media::format::samples_to_pcm16le(&pcm16)
        }
        _ => return None,
    })
}

/// `prompt`'s position in [`Prompt::ALL`] (declaration order).
fn index_of(prompt: Prompt) -> usize {
    prompt as usize
}

/// A set of prompts, one bit per [`Prompt::ALL`] entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Prompts(u8);

impl Prompts {
    fn of(prompt: Prompt) -> Prompts {
        Prompts(1 << index_of(prompt))
    }

    fn and(self, other: Prompts) -> Prompts {
        Prompts(self.0 & other.0)
    }

    fn or(self, other: Prompts) -> Prompts {
        Prompts(self.0 | other.0)
    }

    fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The first prompt of the set (no frame is shared between today's
    /// prompts; if one were, a run is named after the first it could be).
    fn first(self) -> Option<Prompt> {
        Prompt::ALL
            .into_iter()
            .find(|p| !Prompts::of(*p).and(self).is_empty())
    }
}

/// What the index knows about one frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Entry {
    /// Prompts this frame occurs in.
    of: Prompts,
    /// Prompts this frame is the first frame of: it starts a new run even
    /// right after the same prompt.
    starts: Prompts,
}

/// A fast hasher for audio frames (FxHash's mixing, 8 bytes at a time).
/// Collisions cost a byte comparison, never a wrong answer.
#[derive(Default)]
struct FrameHasher(u64);

impl Hasher for FrameHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(K);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Every frame of every prompt in one audio format.
#[derive(Debug)]
pub struct PromptIndex {
    frame_bytes: usize,
    silence: u8,
    frames: HashMap<Box<[u8]>, Entry, BuildHasherDefault<FrameHasher>>,
}

static MULAW_8K: LazyLock<PromptIndex> =
    LazyLock::new(|| PromptIndex::build(AudioFormat::MULAW_8K));
static PCM16_16K: LazyLock<PromptIndex> =
    LazyLock::new(|| PromptIndex::build(AudioFormat::PCM16_16K));
static ALAW_8K: LazyLock<PromptIndex> = LazyLock::new(|| PromptIndex::build(ALAW));
/// No prompts: a format the server has no conversion for (and the lossy
/// ear, which has its own reference).
static EMPTY: LazyLock<PromptIndex> = LazyLock::new(|| PromptIndex {
    frame_bytes: 1,
    silence: 0,
    frames: HashMap::default(),
});

/// G.711 A-law 8 kHz (a server leg format; the load tool itself never
/// negotiates it, but the index is the same few lines).
pub const ALAW: AudioFormat = AudioFormat {
    encoding: AudioEncoding::Alaw,
    sample_rate: 8_000,
};

/// How one frame sounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FrameSound {
    /// A frame of these prompts, named after the first of them.
    Prompt(Entry, Prompt),
    /// The format's silence byte throughout.
    Silence,
    /// Neither: the bot's own audio.
    Own,
}

impl PromptIndex {
    /// The index for `format`, built once per process on first use. A
    /// format the server cannot convert prompts to has an empty index.
    pub fn for_format(format: AudioFormat) -> &'static PromptIndex {
        match (format.encoding, format.sample_rate) {
            (AudioEncoding::Mulaw, 8_000) => &MULAW_8K,
            (AudioEncoding::Pcm16Le, 16_000) => &PCM16_16K,
            (AudioEncoding::Alaw, 8_000) => &ALAW_8K,
            _ => &EMPTY,
        }
    }

    fn build(format: AudioFormat) -> PromptIndex {
        let mut index = PromptIndex {
            frame_bytes: format.frame_bytes().max(1),
            silence: transport::silence_byte(format),
            frames: HashMap::default(),
        };
        let converted = Prompt::ALL.map(|p| audio(p, format).unwrap_or_default());
        for (p, bytes) in Prompt::ALL.into_iter().zip(&converted) {
            index.add_sequence(&[(p, bytes)]);
        }
        let (hold, music) = (&converted[1], &converted[2]);
        index.add_sequence(&[
            (Prompt::Hold, hold),
            (Prompt::HoldMusic, music),
            (Prompt::HoldMusic, music),
        ]);
        index
    }

    /// Indexes `parts` played back to back, cut into frames from the first
    /// part's start, the last frame padded with silence. A frame is labelled
    /// with the part it ends in.
    fn add_sequence(&mut self, parts: &[(Prompt, &Vec<u8>)]) {
        let mut all = Vec::new();
        let mut ends = Vec::new();
        for (p, bytes) in parts {
            all.extend_from_slice(bytes);
            ends.push((all.len(), *p));
        }
        for (i, chunk) in all.chunks(self.frame_bytes).enumerate() {
            let mut frame = chunk.to_vec();
            frame.resize(self.frame_bytes, self.silence);
            let end = i * self.frame_bytes + chunk.len();
            let Some(&(_, prompt)) = ends.iter().find(|(e, _)| end <= *e) else {
                continue;
            };
            if self.is_silence(&frame) {
                continue;
            }
            let entry = self.frames.entry(frame.into_boxed_slice()).or_default();
            entry.of = entry.of.or(Prompts::of(prompt));
            if i == 0 {
                entry.starts = entry.starts.or(Prompts::of(prompt));
            }
        }
    }

    fn is_silence(&self, frame: &[u8]) -> bool {
        frame.iter().all(|&b| b == self.silence)
    }

    fn sound(&self, frame: &[u8]) -> FrameSound {
        if self.is_silence(frame) {
            return FrameSound::Silence;
        }
        // Every entry names at least one prompt (`add_sequence`).
        match self
            .frames
            .get(frame)
            .and_then(|e| Some((*e, e.of.first()?)))
        {
            Some((entry, name)) => FrameSound::Prompt(entry, name),
            None => FrameSound::Own,
        }
    }

    /// The prompt `frame` (one whole frame) is part of, if any.
    pub fn prompt_of(&self, frame: &[u8]) -> Option<Prompt> {
        match self.sound(frame) {
            FrameSound::Prompt(_, name) => Some(name),
            FrameSound::Silence | FrameSound::Own => None,
        }
    }

    /// Frames indexed (for tests and diagnostics).
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether nothing is indexed (a format without prompts).
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
}

/// What a stretch of received audio was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sound {
    /// Part of a bundled prompt.
    Prompt(Prompt),
    /// The bot's own audio: a greeting or a reply.
    Own,
}

/// A stretch of one received message that sounded one way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub sound: Sound,
    /// This piece begins a new run: a prompt starting (or starting over),
    /// or the bot's own audio after a prompt or after [`Ear::new_turn`].
    pub starts_run: bool,
    pub bytes: usize,
}

/// The run the last frame belonged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    None,
    /// Frames of a prompt: the prompts they could all be part of (the set
    /// narrows as frames arrive), and the name the run was counted under.
    Prompt(Prompts, Prompt),
    Own,
}

/// One call's ear: classifies what arrives, frame by frame, into runs.
/// Sans-IO and clock-free; the caller decides what a run means.
#[derive(Debug)]
pub struct Ear {
    index: &'static PromptIndex,
    run: Run,
    /// Prompts heard since the call's last `clear`.
    since_clear: Prompts,
    /// For a continuous stream through a lossy codec (WebRTC): the matcher
    /// that stands in for the exact index.
    lossy: Option<Box<lossy::LossyEar>>,
}

/// One frame of a lossy stream as the ear releases it, at its arrival time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timed {
    /// Nothing was playing (digital silence).
    Quiet {
        at: Duration,
    },
    Heard {
        at: Duration,
        piece: Piece,
    },
}

impl Ear {
    /// An ear for audio in `format`.
    pub fn new(format: AudioFormat) -> Ear {
        Ear {
            index: PromptIndex::for_format(format),
            run: Run::None,
            since_clear: Prompts::default(),
            lossy: None,
        }
    }

    /// An ear for 16 kHz L16 decoded from Opus, one frame every 20 ms
    /// ([`lossy`]): frames go through [`Ear::hear_frame`].
    pub fn lossy() -> Ear {
        Ear {
            index: &EMPTY,
            run: Run::None,
            since_clear: Prompts::default(),
            lossy: Some(Box::default()),
        }
    }

    /// Whether this ear takes frames of a lossy stream.
    pub fn is_lossy(&self) -> bool {
        self.lossy.is_some()
    }

    /// One 20 ms frame of a lossy stream received at `at`: the frames it
    /// releases, each classified into runs as [`Ear::hear`] does, with its
    /// own arrival time (audio after silence is held briefly, see
    /// [`lossy`]). An exact ear releases nothing here.
    pub fn hear_frame(&mut self, at: Duration, frame: &[u8]) -> Vec<Timed> {
        let Some(ear) = self.lossy.as_mut() else {
            return Vec::new();
        };
        let released = ear.frame(at, frame);
        released
            .into_iter()
            .map(|r| {
                let sound = match r.class {
                    lossy::Class::Quiet => return Timed::Quiet { at: r.at },
                    lossy::Class::Own => FrameSound::Own,
                    lossy::Class::Prompt { prompt, starts } => {
                        let of = Prompts::of(prompt);
                        let starts = if starts { of } else { Prompts::default() };
                        FrameSound::Prompt(Entry { of, starts }, prompt)
                    }
                };
                let (sound, starts_run) = self.step(sound);
                Timed::Heard {
                    at: r.at,
                    piece: Piece {
                        sound,
                        starts_run,
                        bytes: r.bytes,
                    },
                }
            })
            .collect()
    }

    /// Classifies one message of audio. The message is cut into frames
    /// from its own start (the server sends whole frames); a short tail,
    /// like a silent frame, belongs to the run before it.
    pub fn hear(&mut self, audio: &[u8]) -> Vec<Piece> {
        let mut pieces: Vec<Piece> = Vec::new();
        for frame in audio.chunks(self.index.frame_bytes) {
            let sound = if frame.len() == self.index.frame_bytes {
                self.index.sound(frame)
            } else {
                FrameSound::Silence
            };
            let (heard, starts_run) = self.step(sound);
            match pieces.last_mut() {
                Some(last) if last.sound == heard && !starts_run => last.bytes += frame.len(),
                _ => pieces.push(Piece {
                    sound: heard,
                    starts_run,
                    bytes: frame.len(),
                }),
            }
        }
        pieces
    }

    /// Advances the run by one frame.
    fn step(&mut self, sound: FrameSound) -> (Sound, bool) {
        match (sound, self.run) {
            (FrameSound::Silence, Run::Prompt(_, name)) => (Sound::Prompt(name), false),
            (FrameSound::Silence | FrameSound::Own, Run::Own) => (Sound::Own, false),
            (FrameSound::Silence | FrameSound::Own, _) => {
                self.run = Run::Own;
                (Sound::Own, true)
            }
            (FrameSound::Prompt(entry, first), run) => {
                let (set, name, starts) = match run {
                    Run::Prompt(set, name)
                        if !set.and(entry.of).is_empty() && set.and(entry.starts).is_empty() =>
                    {
                        (set.and(entry.of), name, false)
                    }
                    _ => (entry.of, first, true),
                };
                self.run = Run::Prompt(set, name);
                self.since_clear = self.since_clear.or(set);
                (Sound::Prompt(name), starts)
            }
        }
    }

    /// A new bot turn is owed (or one ended): whatever comes next starts a
    /// new run, so a second apology counts as a second one.
    pub fn new_turn(&mut self) {
        self.run = Run::None;
    }

    /// The server cleared the caller's buffer.
    pub fn clear(&mut self) {
        self.run = Run::None;
        self.since_clear = Prompts::default();
    }

    /// Whether `prompt` was heard since the last `clear`.
    pub fn heard_since_clear(&self, prompt: Prompt) -> bool {
        !self.since_clear.and(Prompts::of(prompt)).is_empty()
    }
}

pub mod lossy;

#[cfg(test)]
mod tests;
