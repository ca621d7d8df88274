//! Prompts compiled into the binary as μ-law 8 kHz, playable on every leg.
//!
//! They need no provider, so the overflow path speaks even when STT, TTS and
//! the dialog service are all saturated or down. See `assets/README.md` for
//! the words and how they were made. A leg in another format gets them
//! converted once, on first use, and cached for the process
//! ([`Prompt::audio`]).

use std::sync::LazyLock;
use std::time::Duration;

use crate::leg::LegFormat;

/// Prompts go out in 500 ms messages, not 20 ms ones: under overload most
/// connected calls are hearing the hold music or the overflow prompt, and 25
/// times fewer messages and wake-ups is what keeps the server — and the
/// carrier's side — responsive for admitted calls. Twilio and partner
/// clients play audio messages of any length in order, and a `clear` (sent
/// when a queued call is admitted) drops what they buffered.
pub const CHUNK: Duration = Duration::from_millis(500);
/// How far ahead of real time prompt audio is sent: two chunks, so a server
/// woken late under load never leaves the caller with a gap.
pub const LEAD: Duration = Duration::from_millis(1_000);

/// A pacer for bundled prompts on a leg of `format`.
pub fn pacer(format: LegFormat) -> media::pacer::Pacer<String> {
    let chunk_bytes =
        format.frame_bytes() * (CHUNK.as_millis() as usize / media::FRAME_MS as usize);
    media::pacer::Pacer::with_frame(chunk_bytes, CHUNK, format.silence(), LEAD)
}

/// The bundled prompts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Prompt {
    /// "We're experiencing high call volume. Transferring you now."
    Overflow,
    /// "Please hold. All our lines are busy." (played while queued)
    Hold,
    /// Four soft tones, 1.8 s, looped after [`Prompt::Hold`] while the call waits.
    HoldMusic,
    /// "Sorry, I'm having trouble on my end. One moment, please."
    Apology,
    /// "Let me transfer you to our team."
    Transfer,
    /// "Sorry, we have to end the call now. Goodbye."
    Goodbye,
}

static ULAW: [&[u8]; 6] = [
    include_bytes!("../assets/overflow.ulaw"),
    include_bytes!("../assets/hold.ulaw"),
    include_bytes!("../assets/hold_music.ulaw"),
    include_bytes!("../assets/apology.ulaw"),
    include_bytes!("../assets/transfer.ulaw"),
    include_bytes!("../assets/goodbye.ulaw"),
];

fn convert_all(format: LegFormat) -> [Vec<u8>; 6] {
    ULAW.map(|p| format.from_ulaw8k(p))
}

static ALAW: LazyLock<[Vec<u8>; 6]> = LazyLock::new(|| convert_all(LegFormat::Alaw8k));
static L16: LazyLock<[Vec<u8>; 6]> = LazyLock::new(|| convert_all(LegFormat::L16k16));

impl Prompt {
    pub const ALL: [Prompt; 6] = [
        Prompt::Overflow,
        Prompt::Hold,
        Prompt::HoldMusic,
        Prompt::Apology,
        Prompt::Transfer,
        Prompt::Goodbye,
    ];

    const fn index(self) -> usize {
        self as usize
    }

    /// The prompt's audio in `format`.
    pub fn audio(self, format: LegFormat) -> &'static [u8] {
        match format {
            LegFormat::Mulaw8k => ULAW[self.index()],
            LegFormat::Alaw8k => &ALAW[self.index()],
            LegFormat::L16k16 => &L16[self.index()],
        }
    }

    /// Its playing time.
    pub fn duration(self) -> Duration {
        LegFormat::Mulaw8k
            .audio()
            .duration_of(ULAW[self.index()].len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use media::vad::level_dbfs;

    #[test]
    fn prompts_are_audible_speech_of_sensible_length() {
        for p in [
            Prompt::Overflow,
            Prompt::Apology,
            Prompt::Transfer,
            Prompt::Goodbye,
        ] {
            let secs = p.duration().as_secs_f64();
            assert!((1.0..8.0).contains(&secs), "{p:?}: {secs} s");
            let db = level_dbfs(&media::g711::decode_ulaw(p.audio(LegFormat::Mulaw8k)));
            assert!(db > -35.0, "{p:?} is too quiet: {db} dBFS");
        }
    }

    #[test]
    fn every_prompt_plays_on_every_leg_with_its_length_and_loudness() {
        for p in Prompt::ALL {
            let ulaw = p.audio(LegFormat::Mulaw8k);
            let db0 = level_dbfs(&media::g711::decode_ulaw(ulaw));
            for f in LegFormat::ALL {
                let bytes = p.audio(f);
                let secs = f.audio().duration_of(bytes.len());
                assert_eq!(secs, p.duration(), "{p:?} on {f:?}");
                let db = level_dbfs(&f.decode(bytes));
                assert!((db - db0).abs() < 1.5, "{p:?} on {f:?}: {db} vs {db0} dBFS");
            }
        }
    }

    #[test]
    fn prompt_chunks_are_half_a_second_in_every_format() {
        for f in LegFormat::ALL {
            let mut pacer = pacer(f);
            pacer.push_audio(&vec![f.silence(); f.frame_bytes() * 25]);
            assert_eq!(pacer.queued(), CHUNK, "{f:?}");
        }
    }
}
