//! Output formats of the TTS simulator and the rendering of one audio chunk:
//! speech-like samples, encoded, plus ElevenLabs-style character alignment.

use std::fmt;

use media::format::samples_to_pcm16le;
use media::g711;
use media::synth::SpeechSynth;
use serde::Serialize;

/// The `output_format` values the simulator speaks. ElevenLabs offers more
/// (`mp3_*`, `opus_*`); those are compressed and callgate never asks for
/// them, so the simulator refuses them with HTTP 400 instead of faking them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputFormat {
    /// G.711 μ-law at 8 kHz (Twilio-ready).
    Ulaw8000,
    /// G.711 A-law at 8 kHz.
    Alaw8000,
    /// Signed 16-bit little-endian PCM at the given rate.
    Pcm(u32),
}

/// PCM rates ElevenLabs documents for `pcm_<rate>`.
const PCM_RATES: [u32; 6] = [8_000, 16_000, 22_050, 24_000, 44_100, 48_000];

impl OutputFormat {
    /// Parses an `output_format` query value (`ulaw_8000`, `pcm_16000`, …).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ulaw_8000" => Some(OutputFormat::Ulaw8000),
            "alaw_8000" => Some(OutputFormat::Alaw8000),
            _ => {
                let rate: u32 = s.strip_prefix("pcm_")?.parse().ok()?;
                PCM_RATES.contains(&rate).then_some(OutputFormat::Pcm(rate))
            }
        }
    }

    /// Samples per second.
    pub fn sample_rate(self) -> u32 {
        match self {
            OutputFormat::Ulaw8000 | OutputFormat::Alaw8000 => 8_000,
            OutputFormat::Pcm(rate) => rate,
        }
    }

    /// Encodes linear samples into this format's bytes.
    pub fn encode(self, samples: &[i16]) -> Vec<u8> {
        match self {
            OutputFormat::Ulaw8000 => g711::encode_ulaw(samples),
            OutputFormat::Alaw8000 => g711::encode_alaw(samples),
            OutputFormat::Pcm(_) => samples_to_pcm16le(samples),
        }
    }
}

impl Default for OutputFormat {
    /// ElevenLabs' default is MP3; for a telephony simulator μ-law is the
    /// only sensible default.
    fn default() -> Self {
        OutputFormat::Ulaw8000
    }
}

impl fmt::Display for OutputFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutputFormat::Ulaw8000 => f.write_str("ulaw_8000"),
            OutputFormat::Alaw8000 => f.write_str("alaw_8000"),
            OutputFormat::Pcm(rate) => write!(f, "pcm_{rate}"),
        }
    }
}

/// Per-character timing of one chunk, times relative to the chunk's start
/// (as ElevenLabs documents them).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Alignment {
    pub chars: Vec<String>,
    pub char_start_times_ms: Vec<u64>,
    pub char_durations_ms: Vec<u64>,
}

/// One piece of generated speech: a span of text and its audio length.
#[derive(Debug, Clone)]
pub struct Generation {
    chars: Vec<char>,
    total_ms: u64,
    sent_ms: u64,
    sent_chars: usize,
}

impl Generation {
    /// Speech for `text` at `chars_per_second`; `None` when there is nothing
    /// to say (empty or whitespace-only text makes no sound).
    pub fn new(text: &str, chars_per_second: f64) -> Option<Self> {
        if text.trim().is_empty() {
            return None;
        }
        let chars: Vec<char> = text.chars().collect();
        let cps = if chars_per_second.is_finite() && chars_per_second > 0.0 {
            chars_per_second
        } else {
            15.0
        };
        let total_ms = ((chars.len() as f64 * 1_000.0 / cps).round() as u64).max(1);
        Some(Generation {
            chars,
            total_ms,
            sent_ms: 0,
            sent_chars: 0,
        })
    }

    /// Audio length of the whole generation.
    #[cfg(test)]
    pub fn total_ms(&self) -> u64 {
        self.total_ms
    }

    /// True once every chunk was rendered.
    pub fn is_done(&self) -> bool {
        self.sent_ms >= self.total_ms
    }

    /// Renders the next chunk of at most `max_ms` of audio. Returns the
    /// encoded bytes, the alignment and the chunk's audio length in ms.
    pub fn next_chunk(
        &mut self,
        max_ms: u64,
        synth: &mut SpeechSynth,
        format: OutputFormat,
    ) -> (Vec<u8>, Alignment, u64) {
        let chunk_ms = max_ms.min(self.total_ms - self.sent_ms).max(1);
        let start_ms = self.sent_ms;
        let end_ms = (start_ms + chunk_ms).min(self.total_ms);
        let n = self.chars.len();
        let end_chars = if end_ms >= self.total_ms {
            n
        } else {
            (n as u64 * end_ms / self.total_ms) as usize
        };
        let per_char = self.total_ms as f64 / n as f64;
        let mut alignment = Alignment::default();
        for i in self.sent_chars..end_chars {
            let start = (i as f64 * per_char).round() as u64;
            alignment.chars.push(self.chars[i].to_string());
            alignment
                .char_start_times_ms
                .push(start.saturating_sub(start_ms));
            alignment.char_durations_ms.push(per_char.round() as u64);
        }
        self.sent_chars = end_chars;
        self.sent_ms = end_ms;
        let samples = synth.utterance((end_ms - start_ms) as u32);
        (format.encode(&samples), alignment, end_ms - start_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_telephony_formats_and_refuses_compressed_ones() {
        assert_eq!(
            OutputFormat::parse("ulaw_8000"),
            Some(OutputFormat::Ulaw8000)
        );
        assert_eq!(
            OutputFormat::parse("alaw_8000"),
            Some(OutputFormat::Alaw8000)
        );
        assert_eq!(
            OutputFormat::parse("pcm_16000"),
            Some(OutputFormat::Pcm(16_000))
        );
        assert_eq!(
            OutputFormat::parse("pcm_8000").map(|f| f.to_string()),
            Some("pcm_8000".into())
        );
        assert_eq!(OutputFormat::parse("pcm_12345"), None);
        assert_eq!(OutputFormat::parse("mp3_44100_128"), None);
    }

    #[test]
    fn chunks_cover_all_audio_and_all_characters_exactly_once() {
        let text = "Your table for four is booked at seven thirty. ";
        let mut g = Generation::new(text, 15.0).unwrap();
        let mut synth = SpeechSynth::new(16_000, 1);
        let (mut bytes, mut chars, mut ms) = (0, String::new(), 0);
        while !g.is_done() {
            let (b, a, m) = g.next_chunk(200, &mut synth, OutputFormat::Pcm(16_000));
            assert!(m <= 200);
            assert_eq!(a.chars.len(), a.char_start_times_ms.len());
            assert!(a.char_start_times_ms.iter().all(|t| *t <= m));
            bytes += b.len();
            ms += m;
            chars.extend(a.chars.iter().map(String::as_str));
        }
        assert_eq!(chars, text);
        assert_eq!(ms, g.total_ms());
        assert_eq!(bytes as u64, ms * 16 * 2);
        assert_eq!(
            g.total_ms(),
            (text.chars().count() as f64 * 1000.0 / 15.0).round() as u64
        );
    }

    #[test]
    fn whitespace_makes_no_sound() {
        assert!(Generation::new("  ", 15.0).is_none());
        assert!(Generation::new("", 15.0).is_none());
    }
}
