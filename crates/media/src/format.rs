//! Audio formats and frame arithmetic.

use std::fmt;
use std::time::Duration;

/// Length of one telephony frame: every carrier we speak to uses 20 ms.
pub const FRAME_MS: u64 = 20;

/// Duration of one frame.
pub const FRAME: Duration = Duration::from_millis(FRAME_MS);

/// Sample encodings callgate handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AudioEncoding {
    /// G.711 μ-law, one byte per sample.
    Mulaw,
    /// G.711 A-law, one byte per sample.
    Alaw,
    /// Signed 16-bit little-endian linear PCM.
    Pcm16Le,
}

impl AudioEncoding {
    /// Bytes per sample.
    pub fn bytes_per_sample(self) -> usize {
        match self {
            AudioEncoding::Mulaw | AudioEncoding::Alaw => 1,
            AudioEncoding::Pcm16Le => 2,
        }
    }
}

/// A mono audio format: encoding plus sample rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AudioFormat {
    pub encoding: AudioEncoding,
    pub sample_rate: u32,
}

impl AudioFormat {
    /// Twilio's only media-stream format: μ-law, 8 kHz, mono.
    pub const MULAW_8K: AudioFormat = AudioFormat {
        encoding: AudioEncoding::Mulaw,
        sample_rate: 8_000,
    };
    /// Linear 16-bit PCM at 16 kHz.
    pub const PCM16_16K: AudioFormat = AudioFormat {
        encoding: AudioEncoding::Pcm16Le,
        sample_rate: 16_000,
    };

    /// Bytes in one 20 ms frame of this format.
    pub fn frame_bytes(self) -> usize {
        self.samples_per_frame() * self.encoding.bytes_per_sample()
    }

    /// Samples in one 20 ms frame of this format.
    pub fn samples_per_frame(self) -> usize {
        (self.sample_rate as usize * FRAME_MS as usize) / 1000
    }

    /// Playing time of `bytes` bytes of this format.
    pub fn duration_of(self, bytes: usize) -> Duration {
        let samples = bytes / self.encoding.bytes_per_sample();
        Duration::from_micros(samples as u64 * 1_000_000 / u64::from(self.sample_rate.max(1)))
    }
}

impl fmt::Display for AudioFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let enc = match self.encoding {
            AudioEncoding::Mulaw => "mulaw",
            AudioEncoding::Alaw => "alaw",
            AudioEncoding::Pcm16Le => "pcm16le",
        };
        write!(f, "{enc}@{}Hz", self.sample_rate)
    }
}

/// Converts little-endian 16-bit PCM bytes to samples. A trailing odd byte is
/// ignored (a caller that can produce one has a framing bug of its own).
pub fn pcm16le_to_samples(bytes: &[u8]) -> Vec<i16> {
    bytes
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect()
}

/// Converts samples to little-endian 16-bit PCM bytes.
pub fn samples_to_pcm16le(samples: &[i16]) -> Vec<u8> {
    samples.iter().flat_map(|s| s.to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_sizes_match_the_carriers() {
        assert_eq!(AudioFormat::MULAW_8K.frame_bytes(), 160);
        assert_eq!(AudioFormat::PCM16_16K.frame_bytes(), 640);
        assert_eq!(
            AudioFormat::MULAW_8K.duration_of(8_000),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn pcm_round_trip() {
        let s = [0i16, 1, -1, i16::MAX, i16::MIN];
        assert_eq!(pcm16le_to_samples(&samples_to_pcm16le(&s)), s);
    }
}
