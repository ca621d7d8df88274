//! Output formats of the Cartesia simulator and the rendering of speech:
//! speech-like samples in the requested encoding and rate, with the word
//! timings Cartesia reports in `timestamps` messages.

use std::fmt;

use media::format::samples_to_pcm16le;
use media::g711;
use media::synth::SpeechSynth;

/// The `output_format.encoding` values Cartesia documents for raw output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// Signed 16-bit little-endian PCM.
    PcmS16le,
    /// 32-bit float little-endian PCM (Cartesia's default in its examples).
    PcmF32le,
    /// G.711 μ-law.
    PcmMulaw,
    /// G.711 A-law.
    PcmAlaw,
}

impl Encoding {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "pcm_s16le" => Some(Encoding::PcmS16le),
            "pcm_f32le" => Some(Encoding::PcmF32le),
            "pcm_mulaw" => Some(Encoding::PcmMulaw),
            "pcm_alaw" => Some(Encoding::PcmAlaw),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Encoding::PcmS16le => "pcm_s16le",
            Encoding::PcmF32le => "pcm_f32le",
            Encoding::PcmMulaw => "pcm_mulaw",
            Encoding::PcmAlaw => "pcm_alaw",
        }
    }

    /// Encoded bytes per sample.
    pub fn bytes_per_sample(self) -> u64 {
        match self {
            Encoding::PcmS16le => 2,
            Encoding::PcmF32le => 4,
            Encoding::PcmMulaw | Encoding::PcmAlaw => 1,
        }
    }
}

/// Sample rates Cartesia documents for `output_format.sample_rate`.
pub const SAMPLE_RATES: [u32; 6] = [8_000, 16_000, 22_050, 24_000, 44_100, 48_000];

/// One raw output format (`{"container":"raw","encoding":…,"sample_rate":…}`).
/// Cartesia picks the format per context, not per socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AudioFormat {
    pub encoding: Encoding,
    pub sample_rate: u32,
}

/// Why an `output_format` object was refused (the text of the 400 error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("output_format.container must be \"raw\" (got {0:?}); wav and mp3 are not simulated")]
    Container(String),
    #[error("output_format.encoding {0:?} is not one of pcm_s16le, pcm_f32le, pcm_mulaw, pcm_alaw")]
    Encoding(String),
    #[error("output_format.sample_rate {0} is not one of 8000, 16000, 22050, 24000, 44100, 48000")]
    SampleRate(u64),
}

impl AudioFormat {
    /// Parses the three fields of an `output_format` object.
    pub fn parse(container: &str, encoding: &str, sample_rate: u64) -> Result<Self, FormatError> {
        if container != "raw" {
            return Err(FormatError::Container(container.to_owned()));
        }
        let encoding =
            Encoding::parse(encoding).ok_or_else(|| FormatError::Encoding(encoding.to_owned()))?;
        let sample_rate = u32::try_from(sample_rate)
            .ok()
            .filter(|r| SAMPLE_RATES.contains(r))
            .ok_or(FormatError::SampleRate(sample_rate))?;
        Ok(AudioFormat {
            encoding,
            sample_rate,
        })
    }

    /// Encodes linear samples into this format's bytes.
    pub fn encode(self, samples: &[i16]) -> Vec<u8> {
        match self.encoding {
            Encoding::PcmS16le => samples_to_pcm16le(samples),
            Encoding::PcmF32le => samples
                .iter()
                .flat_map(|s| (f32::from(*s) / 32_768.0).to_le_bytes())
                .collect(),
            Encoding::PcmMulaw => g711::encode_ulaw(samples),
            Encoding::PcmAlaw => g711::encode_alaw(samples),
        }
    }
}

impl fmt::Display for AudioFormat {
    /// `pcm_mulaw_8000`, `pcm_s16le_16000`…: the key of `/stats` `output_formats`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.encoding.as_str(), self.sample_rate)
    }
}

/// Word timings of one chunk, in seconds from the start of the context's
/// audio (Cartesia's `word_timestamps` object).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WordTimes {
    pub words: Vec<String>,
    pub start: Vec<f64>,
    pub end: Vec<f64>,
}

/// Phoneme timings of one chunk (Cartesia's `phoneme_timestamps` object).
/// The simulator has no pronunciation model: each letter of a word stands
/// for one phoneme, lower-cased, the word's span shared evenly between
/// them. Enough for a client to check the shape and that the timings rise
/// and stay inside their word.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PhonemeTimes {
    pub phonemes: Vec<String>,
    pub start: Vec<f64>,
    pub end: Vec<f64>,
}

impl PhonemeTimes {
    /// The phonemes of `words`, inside each word's span.
    pub fn of(words: &WordTimes) -> Self {
        let mut out = PhonemeTimes::default();
        for ((word, &start), &end) in words.words.iter().zip(&words.start).zip(&words.end) {
            let letters: Vec<char> = word.chars().filter(|c| c.is_alphanumeric()).collect();
            let step = (end - start) / letters.len().max(1) as f64;
            for (i, c) in letters.iter().enumerate() {
                out.phonemes.push(c.to_lowercase().collect());
                out.start.push(round_ms(start + step * i as f64));
                out.end.push(round_ms(start + step * (i + 1) as f64));
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.phonemes.is_empty()
    }
}

/// One rendered chunk.
#[derive(Debug, Clone)]
pub struct Chunk {
    /// Encoded audio.
    pub bytes: Vec<u8>,
    /// Its playing time.
    pub ms: u64,
    /// Transcript characters this chunk speaks (for `error_mid_stream_after_chars`).
    pub chars: u64,
    /// Words that finished within this chunk.
    pub words: WordTimes,
}

/// A word of a transcript and its span in characters.
#[derive(Debug, Clone)]
struct Word {
    text: String,
    first_char: usize,
    end_char: usize,
}

/// Speech for one piece of transcript: its length follows the text
/// (`chars / chars_per_second`) and it is rendered chunk by chunk.
#[derive(Debug, Clone)]
pub struct Speech {
    chars: usize,
    words: Vec<Word>,
    total_ms: u64,
    sent_ms: u64,
    sent_chars: usize,
    next_word: usize,
    /// Where this speech starts on the context's audio clock.
    offset_ms: u64,
}

impl Speech {
    /// Speech for `text` starting at `offset_ms` of its context's audio;
    /// `None` when there is nothing to say (empty or whitespace-only text).
    pub fn new(text: &str, chars_per_second: f64, offset_ms: u64) -> Option<Self> {
        if text.trim().is_empty() {
            return None;
        }
        let chars = text.chars().count();
        let cps = if chars_per_second.is_finite() && chars_per_second > 0.0 {
            chars_per_second
        } else {
            15.0
        };
        let total_ms = ((chars as f64 * 1_000.0 / cps).round() as u64).max(1);
        Some(Speech {
            chars,
            words: split_words(text),
            total_ms,
            sent_ms: 0,
            sent_chars: 0,
            next_word: 0,
            offset_ms,
        })
    }

    /// Audio length of the whole piece.
    pub fn total_ms(&self) -> u64 {
        self.total_ms
    }

    /// True once every chunk was rendered.
    pub fn is_done(&self) -> bool {
        self.sent_ms >= self.total_ms
    }

    /// Renders the next chunk of at most `max_ms` of audio.
    pub fn next_chunk(
        &mut self,
        max_ms: u64,
        synth: &mut SpeechSynth,
        format: AudioFormat,
    ) -> Chunk {
        let ms = max_ms.min(self.total_ms - self.sent_ms).max(1);
        let end_ms = (self.sent_ms + ms).min(self.total_ms);
        let ms = end_ms - self.sent_ms;
        let end_chars = if end_ms >= self.total_ms {
            self.chars
        } else {
            (self.chars as u64 * end_ms / self.total_ms) as usize
        };
        let chars = (end_chars - self.sent_chars) as u64;
        self.sent_chars = end_chars;
        self.sent_ms = end_ms;
        let words = self.finished_words(end_chars);
        let samples = synth.utterance(ms as u32);
        Chunk {
            bytes: format.encode(&samples),
            ms,
            chars,
            words,
        }
    }

    /// The words whose last character is now spoken, with their times.
    fn finished_words(&mut self, spoken_chars: usize) -> WordTimes {
        let per_char = self.total_ms as f64 / self.chars as f64;
        let at = |c: usize| (self.offset_ms as f64 + c as f64 * per_char) / 1_000.0;
        let mut times = WordTimes::default();
        while let Some(w) = self.words.get(self.next_word) {
            if w.end_char > spoken_chars {
                break;
            }
            times.words.push(w.text.clone());
            times.start.push(round_ms(at(w.first_char)));
            times.end.push(round_ms(at(w.end_char)));
            self.next_word += 1;
        }
        times
    }
}

/// Seconds rounded to the millisecond, as Cartesia reports them.
fn round_ms(secs: f64) -> f64 {
    (secs * 1_000.0).round() / 1_000.0
}

/// Whitespace-separated words with their character spans.
fn split_words(text: &str) -> Vec<Word> {
    let mut words = Vec::new();
    let mut current: Option<Word> = None;
    for (i, c) in text.chars().enumerate() {
        match (&mut current, c.is_whitespace()) {
            (Some(w), false) => {
                w.text.push(c);
                w.end_char = i + 1;
            }
            (None, false) => {
                current = Some(Word {
                    text: c.to_string(),
                    first_char: i,
                    end_char: i + 1,
                });
            }
            (Some(_), true) => words.extend(current.take()),
            (None, true) => {}
        }
    }
    words.extend(current);
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phonemes_rise_and_stay_inside_their_word() {
        let words = WordTimes {
            words: vec!["Hi,".into(), "you".into()],
            start: vec![0.0, 0.3],
            end: vec![0.2, 0.6],
        };
        let p = PhonemeTimes::of(&words);
        assert_eq!(p.phonemes, ["h", "i", "y", "o", "u"]);
        assert_eq!(p.start, [0.0, 0.1, 0.3, 0.4, 0.5]);
        assert_eq!(p.end, [0.1, 0.2, 0.4, 0.5, 0.6]);
        assert!(PhonemeTimes::of(&WordTimes::default()).is_empty());
    }

    #[test]
    fn formats_parse_as_documented_and_refuse_the_rest() {
        let f = AudioFormat::parse("raw", "pcm_mulaw", 8_000).unwrap();
        assert_eq!(f.to_string(), "pcm_mulaw_8000");
        let f = AudioFormat::parse("raw", "pcm_s16le", 16_000).unwrap();
        assert_eq!((f.encoding.bytes_per_sample(), f.sample_rate), (2, 16_000));
        assert_eq!(
            AudioFormat::parse("mp3", "pcm_s16le", 16_000),
            Err(FormatError::Container("mp3".into()))
        );
        assert_eq!(
            AudioFormat::parse("raw", "ulaw_8000", 8_000),
            Err(FormatError::Encoding("ulaw_8000".into()))
        );
        assert_eq!(
            AudioFormat::parse("raw", "pcm_alaw", 11_025),
            Err(FormatError::SampleRate(11_025))
        );
    }

    #[test]
    fn encodings_have_their_sample_sizes() {
        let samples = [0i16, 1_000, -1_000, 32_767];
        for (enc, size) in [
            (Encoding::PcmS16le, 2),
            (Encoding::PcmF32le, 4),
            (Encoding::PcmMulaw, 1),
            (Encoding::PcmAlaw, 1),
        ] {
            let f = AudioFormat {
                encoding: enc,
                sample_rate: 8_000,
            };
            assert_eq!(f.encode(&samples).len(), samples.len() * size, "{enc:?}");
        }
        let f32le = AudioFormat {
            encoding: Encoding::PcmF32le,
            sample_rate: 8_000,
        }
        .encode(&[-16_384]);
        assert_eq!(f32::from_le_bytes(f32le.try_into().unwrap()), -0.5);
    }

    #[test]
    fn chunks_cover_all_audio_characters_and_words_once() {
        let text = "Your table for four is booked. ";
        let format = AudioFormat {
            encoding: Encoding::PcmS16le,
            sample_rate: 16_000,
        };
        let mut s = Speech::new(text, 15.0, 500).unwrap();
        let mut synth = SpeechSynth::new(16_000, 1);
        let (mut bytes, mut ms, mut chars) = (0, 0, 0);
        let mut times = WordTimes::default();
        while !s.is_done() {
            let c = s.next_chunk(200, &mut synth, format);
            assert!(c.ms <= 200);
            bytes += c.bytes.len() as u64;
            ms += c.ms;
            chars += c.chars;
            times.words.extend(c.words.words);
            times.start.extend(c.words.start);
            times.end.extend(c.words.end);
        }
        assert_eq!(ms, s.total_ms());
        assert_eq!(
            ms,
            (text.chars().count() as f64 * 1000.0 / 15.0).round() as u64
        );
        assert_eq!(bytes, ms * 16 * 2);
        assert_eq!(chars, text.chars().count() as u64);
        assert_eq!(
            times.words,
            ["Your", "table", "for", "four", "is", "booked."]
        );
        // Times are on the context's clock: this speech starts at 0.5 s.
        assert_eq!(times.start[0], 0.5);
        assert!(times.start.windows(2).all(|w| w[0] < w[1]));
        assert!(times.start.iter().zip(&times.end).all(|(s, e)| s < e));
        assert!(*times.end.last().unwrap() <= 0.5 + ms as f64 / 1000.0);
    }

    #[test]
    fn whitespace_makes_no_sound() {
        assert!(Speech::new("  ", 15.0, 0).is_none());
        assert!(Speech::new("", 15.0, 0).is_none());
    }
}
