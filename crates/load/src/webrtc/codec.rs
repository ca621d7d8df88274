//! Opus for the WebRTC caller, straight to and from the caller core's
//! 20 ms frames of 16 kHz L16 (libopus resamples inside; the RTP clock is
//! 48 kHz whatever the audio, RFC 7587).
//!
//! What it is: the browser's side of the codec. The encoder is set up for
//! a voice call (VoIP, in-band FEC, as the offer allows) at a low
//! complexity ([`COMPLEXITY`]): the bitstream is the same standard Opus a
//! browser sends and costs the server the same to decode, while the load
//! generator spends a quarter of the time a complexity-10 encoder would
//! (~30 µs a frame instead of ~120 µs), so it measures the server, not
//! itself. The decoder conceals a gap in the server's RTP timestamps the
//! way a browser's jitter buffer would (libopus PLC, at most
//! [`MAX_CONCEALED`] frames per gap, counted), and drops a packet older
//! than the last one.
//!
//! Digital silence (an all-zero frame: the caller holding the line) is
//! encoded until the encoder settles, then its settled silent packet is
//! sent again, as the server does with its own silence: the server decodes
//! the same standard packet, and a thousand quiet callers do not cost the
//! generator a thousand encoders.
//!
//! What it never does: resample, buffer (one packet in, its frames out), or
//! share anything with the server's codec.
//!
//! How to drive it: one [`Codec`] per call; [`Codec::encode`] each 20 ms
//! frame the caller sends, [`Codec::decode`] each packet received with its
//! RTP timestamp.

use opus::{Application, Channels, Decoder, Encoder};

/// Samples in one 20 ms frame at 16 kHz.
pub const FRAME_SAMPLES: usize = 320;
/// RTP timestamp units in one 20 ms frame (48 kHz clock).
pub const FRAME_TICKS: u64 = 960;
/// Most frames concealed for one gap: a longer gap is silence, not
/// invented audio (the caller then measures it as dead air).
pub const MAX_CONCEALED: u64 = 5;
/// Largest Opus packet (RFC 6716 §3.2.1).
const MAX_PACKET: usize = 1_275;
/// The encoder's complexity (0–10; libopus defaults to 10).
pub const COMPLEXITY: i32 = 1;
/// Silent frames encoded before the settled one is repeated instead.
pub const SILENCE_WARMUP: u32 = 3;

/// One call's Opus encoder and decoder.
pub struct Codec {
    enc: Encoder,
    dec: Decoder,
    last_ts: Option<u64>,
    pcm: Vec<i16>,
    packet: Vec<u8>,
    /// Silent frames encoded in a row, and the settled silent packet.
    silent_run: u32,
    silence: Option<Vec<u8>>,
    /// Frames invented by packet-loss concealment.
    pub concealed: u64,
    /// Packets that arrived after a later one (dropped).
    pub late: u64,
    /// Packets libopus could not decode (concealed instead).
    pub undecodable: u64,
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Codec")
            .field("last_ts", &self.last_ts)
            .field("concealed", &self.concealed)
            .finish_non_exhaustive()
    }
}

impl Codec {
    /// # Errors
    /// libopus refused the settings (never for these).
    pub fn new() -> Result<Codec, opus::Error> {
        let mut enc = Encoder::new(16_000, Channels::Mono, Application::Voip)?;
        enc.set_inband_fec(true)?;
        enc.set_complexity(COMPLEXITY)?;
        Ok(Codec {
            enc,
            dec: Decoder::new(16_000, Channels::Mono)?,
            last_ts: None,
            // A packet may hold up to 120 ms.
            pcm: vec![0; FRAME_SAMPLES * 6],
            packet: vec![0; MAX_PACKET],
            silent_run: 0,
            silence: None,
            concealed: 0,
            late: 0,
            undecodable: 0,
        })
    }

    /// Encodes one 20 ms frame of 16 kHz L16 (640 bytes; shorter is padded
    /// with silence, longer is cut).
    ///
    /// # Errors
    /// libopus failed to encode.
    pub fn encode(&mut self, l16: &[u8]) -> Result<Vec<u8>, opus::Error> {
        let silent = l16.iter().all(|b| *b == 0);
        if silent && let Some(p) = &self.silence {
            return Ok(p.clone());
        }
        let mut samples = [0i16; FRAME_SAMPLES];
        for (s, c) in samples.iter_mut().zip(l16.chunks_exact(2)) {
            *s = i16::from_le_bytes([c[0], c[1]]);
        }
        let n = self.enc.encode(&samples, &mut self.packet)?;
        let packet = self.packet[..n].to_vec();
        if silent {
            self.silent_run += 1;
            if self.silent_run >= SILENCE_WARMUP {
                self.silence = Some(packet.clone());
            }
        } else {
            (self.silent_run, self.silence) = (0, None);
        }
        Ok(packet)
    }

    /// Decodes the packet at RTP time `ts` (48 kHz) into 20 ms frames of
    /// 16 kHz L16, oldest first, concealing the frames missing since the
    /// last packet (at most [`MAX_CONCEALED`]).
    pub fn decode(&mut self, ts: u64, packet: &[u8]) -> Vec<Vec<u8>> {
        let missing = match self.last_ts {
            Some(last) if ts > last => ((ts - last) / FRAME_TICKS).saturating_sub(1),
            Some(_) => {
                self.late += 1;
                return Vec::new();
            }
            None => 0,
        };
        self.last_ts = Some(ts);
        let mut frames = Vec::new();
        for _ in 0..missing.min(MAX_CONCEALED) {
            if self.push(&mut frames, &[]) {
                self.concealed += 1;
            }
        }
        if !self.push(&mut frames, packet) {
            self.undecodable += 1;
            if self.push(&mut frames, &[]) {
                self.concealed += 1;
            }
        }
        frames
    }

    /// Decodes `input` (empty: conceal one frame) onto `frames`.
    fn push(&mut self, frames: &mut Vec<Vec<u8>>, input: &[u8]) -> bool {
        let want = if input.is_empty() {
            FRAME_SAMPLES
        } else {
            self.pcm.len()
        };
        let Ok(n) = self.dec.decode(input, &mut self.pcm[..want], false) else {
            return false;
        };
        for chunk in self.pcm[..n].chunks(FRAME_SAMPLES) {
            let mut bytes: Vec<u8> = chunk.iter().flat_map(|s| s.to_le_bytes()).collect();
            bytes.resize(FRAME_SAMPLES * 2, 0);
            frames.push(bytes);
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
    fn frames_round_trip_and_gaps_are_concealed_within_the_bound() {
        let mut tx = Codec::new().unwrap();
        let mut rx = Codec::new().unwrap();
        let p: Vec<Vec<u8>> = (0..4).map(|f| tx.encode(&tone(f)).unwrap()).collect();
        assert_eq!(rx.decode(0, &p[0]).len(), 1);
        assert_eq!(rx.decode(FRAME_TICKS, &p[1])[0].len(), 640);
        assert_eq!(
            rx.decode(3 * FRAME_TICKS, &p[3]).len(),
            2,
            "one frame concealed"
        );
        assert_eq!(rx.concealed, 1);
        assert!(rx.decode(FRAME_TICKS, &p[1]).is_empty(), "late: dropped");
        assert_eq!(rx.late, 1);
        let after_gap = rx.decode(100 * FRAME_TICKS, &p[2]);
        assert_eq!(after_gap.len() as u64, MAX_CONCEALED + 1);
        assert_eq!(
            rx.decode(101 * FRAME_TICKS, &[0xff; 3]).len(),
            1,
            "garbage is concealed"
        );
        assert_eq!(rx.undecodable, 1);
    }

    #[test]
    fn a_quiet_caller_repeats_its_settled_silent_packet_until_it_speaks() {
        let mut tx = Codec::new().unwrap();
        tx.encode(&tone(0)).unwrap();
        let quiet: Vec<Vec<u8>> = (0..SILENCE_WARMUP + 3)
            .map(|_| tx.encode(&[0; 640]).unwrap())
            .collect();
        let settled = &quiet[SILENCE_WARMUP as usize - 1];
        assert!(
            quiet[SILENCE_WARMUP as usize..]
                .iter()
                .all(|p| p == settled)
        );
        let speech = tx.encode(&tone(1)).unwrap();
        assert_ne!(&speech, settled);
        assert!(tx.silence.is_none(), "speech ends the repeat");
        let mut rx = Codec::new().unwrap();
        assert_eq!(rx.decode(0, settled).len(), 1);
        assert_eq!(rx.undecodable, 0, "the repeated packet is standard Opus");
    }
}
