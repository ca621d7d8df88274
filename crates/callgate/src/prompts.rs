//! Prompts compiled into the binary: raw μ-law 8 kHz, ready for the carrier.
//!
//! They need no provider, so the overflow path speaks even when STT, TTS and
//! the dialog service are all saturated or down. See `assets/README.md` for
//! the words and how they were made.

/// Prompts go out in 500 ms messages (4,000 μ-law bytes), not 20 ms ones:
/// under overload most connected calls are hearing the hold music or the
/// overflow prompt, and 25 times fewer messages and wake-ups is what keeps
/// the server — and the carrier's side — responsive for admitted calls.
/// Twilio plays media messages of any length in order, and a `clear` (sent
/// when a queued call is admitted) drops what it has buffered.
pub const CHUNK_BYTES: usize = 4_000;
/// Playing time of one prompt message.
pub const CHUNK: std::time::Duration = std::time::Duration::from_millis(500);
/// How far ahead of real time prompt audio is sent: two chunks, so a server
/// woken late under load never leaves the caller with a gap.
pub const LEAD: std::time::Duration = std::time::Duration::from_millis(1_000);

/// A pacer for bundled prompts.
pub fn pacer() -> media::pacer::Pacer<String> {
    media::pacer::Pacer::with_frame(CHUNK_BYTES, CHUNK, media::g711::ULAW_SILENCE, LEAD)
}

/// "We're experiencing high call volume. Transferring you now."
pub static OVERFLOW: &[u8] = include_bytes!("../assets/overflow.ulaw");
/// "Please hold. All our lines are busy." (played while queued for admission)
pub static HOLD: &[u8] = include_bytes!("../assets/hold.ulaw");
/// Four soft tones, 1.8 s, looped after [`HOLD`] while the call waits.
pub static HOLD_MUSIC: &[u8] = include_bytes!("../assets/hold_music.ulaw");
/// "Sorry, I'm having trouble on my end. One moment, please."
pub static APOLOGY: &[u8] = include_bytes!("../assets/apology.ulaw");
/// "Let me transfer you to our team."
pub static TRANSFER: &[u8] = include_bytes!("../assets/transfer.ulaw");
/// "Sorry, we have to end the call now. Goodbye."
pub static GOODBYE: &[u8] = include_bytes!("../assets/goodbye.ulaw");

#[cfg(test)]
mod tests {
    use super::*;
    use media::vad::level_dbfs;

    #[test]
    fn prompts_are_audible_speech_of_sensible_length() {
        for (name, p) in [
            ("overflow", OVERFLOW),
            ("apology", APOLOGY),
            ("transfer", TRANSFER),
            ("goodbye", GOODBYE),
        ] {
            let secs = p.len() as f64 / 8_000.0;
            assert!((1.0..8.0).contains(&secs), "{name}: {secs} s");
            let db = level_dbfs(&media::g711::decode_ulaw(p));
            assert!(db > -35.0, "{name} is too quiet: {db} dBFS");
        }
    }
}
