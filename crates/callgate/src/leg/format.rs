//! The audio format a leg negotiated, and what follows from it: frame size,
//! silence, how the call's VAD decodes it, and the STT and TTS formats that
//! need no transcoding. Audio is converted once, at the leg boundary; the
//! only conversion the server itself does is of its bundled prompts
//! (μ-law 8 kHz), once per format, cached.

use media::format::{AudioEncoding, AudioFormat};
use stt_client::SttEncoding;
use tts_client::OutputFormat;

/// Formats a leg may negotiate. Opus 48 kHz comes with WebRTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LegFormat {
    /// G.711 μ-law, 8 kHz (Twilio, SIP PCMU, partner `audio/pcmu;rate=8000`).
    Mulaw8k,
    /// G.711 A-law, 8 kHz (SIP PCMA).
    Alaw8k,
    /// 16-bit little-endian linear PCM, 16 kHz (partner `audio/l16;rate=16000`).
    L16k16,
}

impl LegFormat {
    pub const ALL: [LegFormat; 3] = [LegFormat::Mulaw8k, LegFormat::Alaw8k, LegFormat::L16k16];

    /// The `media` crate's description.
    pub const fn audio(self) -> AudioFormat {
        match self {
            LegFormat::Mulaw8k => AudioFormat::MULAW_8K,
            LegFormat::Alaw8k => AudioFormat {
                encoding: AudioEncoding::Alaw,
                sample_rate: 8_000,
            },
            LegFormat::L16k16 => AudioFormat::PCM16_16K,
        }
    }

    pub const fn sample_rate(self) -> u32 {
        self.audio().sample_rate
    }

    /// A low-cardinality label (`mulaw_8000`, `alaw_8000`, `l16_16000`).
    pub const fn as_str(self) -> &'static str {
        match self {
            LegFormat::Mulaw8k => "mulaw_8000",
            LegFormat::Alaw8k => "alaw_8000",
            LegFormat::L16k16 => "l16_16000",
        }
    }

    /// Bytes in one 20 ms frame.
    pub fn frame_bytes(self) -> usize {
        self.audio().frame_bytes()
    }

    /// The byte that fills silence (for PCM, every byte of a zero sample).
    pub const fn silence(self) -> u8 {
        match self {
            LegFormat::Mulaw8k => media::g711::ULAW_SILENCE,
            LegFormat::Alaw8k => media::g711::ALAW_SILENCE,
            LegFormat::L16k16 => 0,
        }
    }

    /// Decodes leg audio to linear samples (for the call's own VAD).
    pub fn decode(self, bytes: &[u8]) -> Vec<i16> {
        match self {
            LegFormat::Mulaw8k => media::g711::decode_ulaw(bytes),
            LegFormat::Alaw8k => media::g711::decode_alaw(bytes),
            LegFormat::L16k16 => media::format::pcm16le_to_samples(bytes),
        }
    }

    /// The RMS level of a frame in this format, dBFS, without decoding it
    /// into a buffer (`media::vad::level_dbfs` of the decoded samples).
    pub fn level_dbfs(self, bytes: &[u8]) -> f32 {
        let energy: f64 = match self {
            LegFormat::Mulaw8k => bytes
                .iter()
                .map(|&b| f64::from(media::g711::ulaw_to_linear(b)).powi(2))
                .sum(),
            LegFormat::Alaw8k => bytes
                .iter()
                .map(|&b| f64::from(media::g711::alaw_to_linear(b)).powi(2))
                .sum(),
            LegFormat::L16k16 => bytes
                .chunks_exact(2)
                .map(|c| f64::from(i16::from_le_bytes([c[0], c[1]])).powi(2))
                .sum(),
        };
        let samples = match self {
            LegFormat::L16k16 => bytes.len() / 2,
            _ => bytes.len(),
        };
        media::vad::level_of_energy(energy, samples)
    }

    /// The STT stream format that takes this leg's audio as it is.
    pub const fn stt(self) -> (SttEncoding, u32) {
        match self {
            LegFormat::Mulaw8k => (SttEncoding::Mulaw, 8_000),
            LegFormat::Alaw8k => (SttEncoding::Alaw, 8_000),
            LegFormat::L16k16 => (SttEncoding::Linear16, 16_000),
        }
    }

    /// The TTS output format the leg can play as it is.
    pub const fn tts(self) -> OutputFormat {
        match self {
            LegFormat::Mulaw8k => OutputFormat::Ulaw8000,
            LegFormat::Alaw8k => OutputFormat::Alaw8000,
            LegFormat::L16k16 => OutputFormat::Pcm16000,
        }
    }

    /// Converts bundled μ-law 8 kHz audio to this format (prompts, hold
    /// music). Pure; [`crate::prompts`] caches the results.
    pub fn from_ulaw8k(self, ulaw: &[u8]) -> Vec<u8> {
        match self {
            LegFormat::Mulaw8k => ulaw.to_vec(),
            LegFormat::Alaw8k => media::g711::encode_alaw(&media::g711::decode_ulaw(ulaw)),
            LegFormat::L16k16 => {
                let pcm8 = media::g711::decode_ulaw(ulaw);
                let pcm16 = media::resample::Upsampler2x::default().process(&pcm8);
                media::format::samples_to_pcm16le(&pcm16)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_twenty_milliseconds_in_every_format() {
        assert_eq!(LegFormat::Mulaw8k.frame_bytes(), 160);
        assert_eq!(LegFormat::Alaw8k.frame_bytes(), 160);
        assert_eq!(LegFormat::L16k16.frame_bytes(), 640);
    }

    #[test]
    fn silence_decodes_to_near_zero() {
        for f in LegFormat::ALL {
            let frame = vec![f.silence(); f.frame_bytes()];
            assert!(f.decode(&frame).iter().all(|s| s.abs() <= 8), "{f:?}");
        }
    }

    #[test]
    fn a_frames_level_is_its_decoded_samples_level() {
        let mut synth = media::synth::SpeechSynth::new(8_000, 4);
        let voice = synth.utterance(20);
        let wide = media::synth::SpeechSynth::new(16_000, 4).utterance(20);
        for (format, bytes, samples) in [
            (LegFormat::Mulaw8k, media::g711::encode_ulaw(&voice), None),
            (LegFormat::Alaw8k, media::g711::encode_alaw(&voice), None),
            (
                LegFormat::L16k16,
                media::format::samples_to_pcm16le(&wide),
                Some(&wide),
            ),
        ] {
            let decoded = format.decode(&bytes);
            if let Some(s) = samples {
                assert_eq!(&decoded, s);
            }
            let want = media::vad::level_dbfs(&decoded);
            assert!(
                (format.level_dbfs(&bytes) - want).abs() < 1e-4,
                "{format:?}"
            );
        }
        assert_eq!(LegFormat::Mulaw8k.level_dbfs(&[]), -120.0);
    }
}
