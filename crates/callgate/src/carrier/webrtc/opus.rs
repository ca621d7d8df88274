//! Opus at the leg boundary, straight to and from the call's 16 kHz L16
//! (libopus resamples inside; the RTP clock stays 48 kHz, RFC 7587): no
//! resampler on the WebRTC path. A missing frame is concealed by libopus
//! (PLC), or recovered from the next packet's in-band FEC when the offer
//! allowed it and exactly that frame is missing.
//!
//! Outbound silence is nearly free: while nothing is queued, the encoder
//! runs for [`SILENCE_WARMUP`] frames (it settles into its silent state,
//! its own packets), then its last silent packet is sent again for every
//! further silent frame instead of encoding 320 zeros 50 times a second —
//! what dominated a quiet WebRTC call's CPU (libopus's noise-shaping
//! quantizer on silence). The browser decodes the same silent packet as
//! before; when audio comes back the encoder carries on from its silent
//! state, which is where the browser's decoder is too.

use opus::{Application, Channels, Decoder, Encoder};

/// Samples in one 20 ms frame at 16 kHz.
pub const FRAME_SAMPLES: usize = 320;
/// RTP timestamp units in one 20 ms frame (48 kHz clock).
pub const FRAME_TICKS: u64 = 960;
/// Most frames concealed for one gap; a longer gap is silence the call's
/// VAD sees as such, not minutes of invented audio.
pub const MAX_CONCEALED: u64 = 5;
/// Silent frames encoded before the last one is repeated instead.
pub const SILENCE_WARMUP: u32 = 3;

/// What decoding one packet produced, and how.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    /// 20 ms frames of 16 kHz L16 (little-endian bytes), oldest first.
    pub frames: Vec<Vec<u8>>,
    pub concealed: u64,
    pub fec_recovered: u64,
}

pub struct Codec {
    enc: Encoder,
    dec: Decoder,
    fec: bool,
    last_ts: Option<u64>,
    pcm: Vec<i16>,
    packet: Vec<u8>,
    /// Silent frames encoded in a row, up to [`SILENCE_WARMUP`].
    silent_run: u32,
    /// The encoder's own silent packet, repeated once it has settled.
    silence: Option<Vec<u8>>,
}

impl Codec {
    /// `complexity` is libopus's 0–10 (`webrtc.opus_complexity`).
    pub fn new(fec: bool, complexity: u8) -> Result<Codec, opus::Error> {
        let mut enc = Encoder::new(16_000, Channels::Mono, Application::Voip)?;
        enc.set_inband_fec(true)?;
        enc.set_packet_loss_perc(5)?;
        enc.set_complexity(i32::from(complexity.min(10)))?;
        Ok(Codec {
            enc,
            dec: Decoder::new(16_000, Channels::Mono)?,
            fec,
            last_ts: None,
            pcm: vec![0; FRAME_SAMPLES * 6],
            packet: vec![0; 1_275],
            silent_run: 0,
            silence: None,
        })
    }

    /// One 20 ms frame of silence (nothing queued): encoded until the
    /// encoder has settled, then its settled silent packet again.
    pub fn encode_silence(&mut self) -> Result<Vec<u8>, opus::Error> {
        if let Some(p) = &self.silence {
            return Ok(p.clone());
        }
        let packet = self.encode_samples(&[0; FRAME_SAMPLES])?;
        self.silent_run += 1;
        if self.silent_run >= SILENCE_WARMUP {
            self.silence = Some(packet.clone());
        }
        Ok(packet)
    }

    /// Whether silent frames are repeated rather than encoded now.
    pub fn silence_settled(&self) -> bool {
        self.silence.is_some()
    }

    /// Encodes one 20 ms frame of 16 kHz L16 (640 bytes; shorter is padded
    /// with silence).
    pub fn encode(&mut self, l16: &[u8]) -> Result<Vec<u8>, opus::Error> {
        let mut samples = [0i16; FRAME_SAMPLES];
        for (s, c) in samples.iter_mut().zip(l16.chunks_exact(2)) {
            *s = i16::from_le_bytes([c[0], c[1]]);
        }
        self.silent_run = 0;
        self.silence = None;
        self.encode_samples(&samples)
    }

    fn encode_samples(&mut self, samples: &[i16; FRAME_SAMPLES]) -> Result<Vec<u8>, opus::Error> {
        let n = self.enc.encode(samples, &mut self.packet)?;
        Ok(self.packet[..n].to_vec())
    }

    /// Decodes the packet at RTP time `ts`, concealing the frames missing
    /// since the last one (at most [`MAX_CONCEALED`]).
    pub fn decode(&mut self, ts: u64, packet: &[u8]) -> Decoded {
        let mut out = Decoded::default();
        let missing = match self.last_ts {
            Some(last) if ts > last => ((ts - last) / FRAME_TICKS).saturating_sub(1),
            // Old or repeated: already played past it.
            Some(_) => return out,
            None => 0,
        };
        self.last_ts = Some(ts);
        let missing = missing.min(MAX_CONCEALED);
        for i in 0..missing {
            let recover = self.fec && i + 1 == missing;
            let input: &[u8] = if recover { packet } else { &[] };
            if self.push(&mut out, input, recover) {
                if recover {
                    out.fec_recovered += 1;
                } else {
                    out.concealed += 1;
                }
            }
        }
        if !self.push(&mut out, packet, false) {
            // Undecodable: conceal it rather than leave a hole.
            out.concealed += u64::from(self.push(&mut out, &[], false));
        }
        out
    }

    fn push(&mut self, out: &mut Decoded, input: &[u8], fec: bool) -> bool {
        // PLC and FEC decode exactly one frame; a packet may hold up to 120 ms.
        let want = if input.is_empty() || fec {
            FRAME_SAMPLES
        } else {
            self.pcm.len()
        };
        let Ok(n) = self.dec.decode(input, &mut self.pcm[..want], fec) else {
            return false;
        };
        for frame in self.pcm[..n].chunks(FRAME_SAMPLES) {
            let mut bytes = Vec::with_capacity(FRAME_SAMPLES * 2);
            for s in frame {
                bytes.extend_from_slice(&s.to_le_bytes());
            }
            bytes.resize(FRAME_SAMPLES * 2, 0);
            out.frames.push(bytes);
        }
        n > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(frame: usize) -> Vec<u8> {
        (0..FRAME_SAMPLES)
            .flat_map(|i| {
                let t = (frame * FRAME_SAMPLES + i) as f32 / 16_000.0;
                (((t * 440.0 * std::f32::consts::TAU).sin() * 8_000.0) as i16).to_le_bytes()
            })
            .collect()
    }

    #[test]
    fn a_frame_round_trips_at_16_khz_and_a_gap_is_concealed() {
        let mut tx = Codec::new(true, 5).unwrap();
        let mut rx = Codec::new(false, 5).unwrap();
        let p0 = tx.encode(&tone(0)).unwrap();
        let p1 = tx.encode(&tone(1)).unwrap();
        let _lost = tx.encode(&tone(2)).unwrap();
        let p3 = tx.encode(&tone(3)).unwrap();
        assert_eq!(rx.decode(0, &p0).frames.len(), 1);
        assert_eq!(rx.decode(960, &p1).frames[0].len(), 640);
        let d = rx.decode(3 * 960, &p3);
        assert_eq!((d.frames.len(), d.concealed, d.fec_recovered), (2, 1, 0));
        assert_eq!(rx.decode(960, &p1), Decoded::default(), "late: dropped");
    }

    #[test]
    fn with_fec_a_single_lost_frame_comes_from_the_next_packet() {
        let mut tx = Codec::new(true, 5).unwrap();
        let mut rx = Codec::new(true, 5).unwrap();
        let packets: Vec<_> = (0..6).map(|f| tx.encode(&tone(f)).unwrap()).collect();
        for (f, p) in packets.iter().enumerate().take(4) {
            rx.decode(f as u64 * 960, p);
        }
        let d = rx.decode(5 * 960, &packets[5]);
        assert_eq!((d.frames.len(), d.fec_recovered, d.concealed), (2, 1, 0));
    }

    #[test]
    fn a_long_gap_conceals_at_most_the_bound_and_garbage_is_concealed() {
        let mut tx = Codec::new(false, 5).unwrap();
        let mut rx = Codec::new(false, 5).unwrap();
        rx.decode(0, &tx.encode(&tone(0)).unwrap());
        let d = rx.decode(100 * 960, &tx.encode(&tone(1)).unwrap());
        assert_eq!(d.concealed, MAX_CONCEALED);
        assert_eq!(d.frames.len() as u64, MAX_CONCEALED + 1);
        let g = rx.decode(101 * 960, &[0xff; 3]);
        assert_eq!(g.frames.len(), 1, "{g:?}");
    }

    fn energy(frames: &[Vec<u8>]) -> f64 {
        let samples = frames.iter().flat_map(|f| f.chunks_exact(2));
        samples
            .map(|c| f64::from(i16::from_le_bytes([c[0], c[1]])).powi(2))
            .sum()
    }

    #[test]
    fn silence_is_encoded_until_it_settles_then_repeated_and_speech_resumes_cleanly() {
        let mut tx = Codec::new(true, 5).unwrap();
        let mut rx = Codec::new(true, 5).unwrap();
        let mut ts = 0;
        let mut feed = |rx: &mut Codec, p: &[u8]| {
            let d = rx.decode(ts, p);
            ts += FRAME_TICKS;
            d.frames
        };
        for f in 0..10 {
            feed(&mut rx, &tx.encode(&tone(f)).unwrap());
        }
        let mut silent = Vec::new();
        for i in 0..SILENCE_WARMUP + 5 {
            assert_eq!(tx.silence_settled(), i >= SILENCE_WARMUP, "frame {i}");
            silent.push(tx.encode_silence().unwrap());
        }
        let settled = &silent[SILENCE_WARMUP as usize - 1];
        assert!(
            silent[SILENCE_WARMUP as usize..]
                .iter()
                .all(|p| p == settled)
        );
        let heard: Vec<Vec<u8>> = silent.iter().flat_map(|p| feed(&mut rx, p)).collect();
        let tail = &heard[heard.len() - 5..];
        assert!(energy(tail) < 1e3, "repeated silence decodes to silence");
        let back: Vec<Vec<u8>> = (10..20)
            .flat_map(|f| feed(&mut rx, &tx.encode(&tone(f)).unwrap()))
            .collect();
        assert!(!tx.silence_settled(), "audio ends the repeat");
        let reference = energy(&(10..20).map(tone).collect::<Vec<_>>());
        let got = energy(&back[2..]) / 8.0 * 10.0;
        assert!(
            got > reference * 0.5 && got < reference * 2.0,
            "the tone comes back at its level: {got} against {reference}"
        );
    }
}
