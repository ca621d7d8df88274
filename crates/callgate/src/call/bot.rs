//! Bookkeeping of the bot's side of the conversation: which dialog turn is
//! current, its TTS context, what text was spoken and how much was heard.

use std::time::Instant;

use dialog_grpc::TurnId;
use tts_client::ContextId;

use crate::leg::LegFormat;

/// Speaking rate assumed when the length of a reply's audio is not yet
/// known (ElevenLabs-class voices speak about 15 characters per second).
const ASSUMED_CHARS_PER_SECOND: f64 = 15.0;

/// How far the reply's generation has got.
#[derive(Debug)]
pub enum Generation {
    /// The dialog is still writing or TTS still speaking. The two finish
    /// in either order; `then` is how the call ends once both have
    /// (the dialog asked for an exit while this reply was being generated).
    Generating {
        dialog_done: bool,
        tts_done: bool,
        then: Option<Exit>,
    },
    /// Fully generated: the end-of-turn marker (named here) is queued
    /// after the audio, and only playback remains.
    Marked(String),
}

/// One bot reply in progress.
#[derive(Debug)]
pub struct BotTurn {
    pub turn: TurnId,
    pub ctx: ContextId,
    /// All text sent to TTS for this turn.
    pub text: String,
    /// Audio received from TTS for this turn, in bytes of the leg's format.
    pub audio_bytes: usize,
    /// Audio frames sent to the carrier for this turn.
    pub frames_sent: u64,
    pub started_at: Instant,
    pub generation: Generation,
}

impl BotTurn {
    pub fn new(turn: TurnId, ctx: ContextId, now: Instant) -> Self {
        BotTurn {
            turn,
            ctx,
            text: String::new(),
            audio_bytes: 0,
            frames_sent: 0,
            started_at: now,
            generation: Generation::Generating {
                dialog_done: false,
                tts_done: false,
                then: None,
            },
        }
    }

    /// The dialog service said the turn is complete.
    pub fn dialog_done(&self) -> bool {
        match &self.generation {
            Generation::Generating { dialog_done, .. } => *dialog_done,
            Generation::Marked(_) => true,
        }
    }

    /// TTS delivered the context's final audio.
    pub fn tts_done(&self) -> bool {
        match &self.generation {
            Generation::Generating { tts_done, .. } => *tts_done,
            Generation::Marked(_) => true,
        }
    }

    /// The end-of-turn marker, once queued.
    pub fn mark(&self) -> Option<&str> {
        match &self.generation {
            Generation::Marked(name) => Some(name),
            Generation::Generating { .. } => None,
        }
    }

    /// The dialog service completed the turn.
    pub fn dialog_finished(&mut self) {
        if let Generation::Generating { dialog_done, .. } = &mut self.generation {
            *dialog_done = true;
        }
    }

    /// TTS delivered the context's final audio.
    pub fn tts_finished(&mut self) {
        if let Generation::Generating { tts_done, .. } = &mut self.generation {
            *tts_done = true;
        }
    }

    /// Holds `exit` until the reply is generated; gives it back when the
    /// reply already is (marked), so the exit can start at once.
    pub fn exit_after(&mut self, exit: Exit) -> Result<(), Exit> {
        match &mut self.generation {
            Generation::Generating { then, .. } => {
                *then = Some(exit);
                Ok(())
            }
            Generation::Marked(_) => Err(exit),
        }
    }

    /// The exit waiting for this reply, taken (the reply was cut).
    pub fn take_exit(&mut self) -> Option<Exit> {
        match &mut self.generation {
            Generation::Generating { then, .. } => then.take(),
            Generation::Marked(_) => None,
        }
    }

    /// Once the dialog and TTS are both done: marks the reply `turn-N` and
    /// returns that marker's name with the exit that waited for it.
    pub fn seal(&mut self) -> Option<(String, Option<Exit>)> {
        let Generation::Generating {
            dialog_done: true,
            tts_done: true,
            then,
        } = &mut self.generation
        else {
            return None;
        };
        let exit = then.take();
        let name = format!("turn-{}", self.turn.0);
        self.generation = Generation::Marked(name.clone());
        Some((name, exit))
    }

    /// The text the caller has heard: the frames sent less `unheard`, the
    /// ones still in the carrier's buffer (which a `clear` discards).
    pub fn heard_text(&self, unheard: u64, format: LegFormat) -> &str {
        let played_ms = self.frames_sent.saturating_sub(unheard) * media::FRAME_MS;
        let total_ms = self
            .tts_done()
            .then(|| format.audio().duration_of(self.audio_bytes).as_millis() as u64);
        played_prefix(&self.text, played_ms, total_ms)
    }
}

/// The prefix of `text` spoken in `played_ms`, cut at a word boundary. When
/// the reply's total audio length is known the proportion is exact;
/// otherwise an average speaking rate is assumed.
pub fn played_prefix(text: &str, played_ms: u64, total_ms: Option<u64>) -> &str {
    if played_ms == 0 || text.is_empty() {
        return "";
    }
    let chars = text.chars().count();
    let heard = match total_ms {
        Some(total) if total > 0 => {
            (chars as u128 * u128::from(played_ms.min(total)) / u128::from(total)) as usize
        }
        _ => (played_ms as f64 / 1000.0 * ASSUMED_CHARS_PER_SECOND) as usize,
    };
    if heard >= chars {
        return text;
    }
    let cut = text
        .char_indices()
        .nth(heard)
        .map_or(text.len(), |(i, _)| i);
    if text[cut..].starts_with(char::is_whitespace) {
        return text[..cut].trim_end();
    }
    match text[..cut].rfind(char::is_whitespace) {
        Some(i) => text[..i].trim_end(),
        None => "",
    }
}

/// How the call will end once the current reply has played.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// The dialog service asked for a human.
    Transfer(String),
    /// The dialog service ended the call.
    End(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heard_text_is_cut_at_a_word_boundary() {
        let t = "Good news, a table for four is free.";
        assert_eq!(played_prefix(t, 0, Some(2_400)), "");
        assert_eq!(played_prefix(t, 1_200, Some(2_400)), "Good news, a table");
        assert_eq!(played_prefix(t, 5_000, Some(2_400)), t);
        // Unknown total: 15 chars/s → 1 s is about "Good news, a".
        assert_eq!(played_prefix(t, 1_000, None), "Good news, a");
    }

    #[test]
    fn heard_text_leaves_out_what_the_carrier_still_buffers() {
        let mut b = BotTurn::new(TurnId(1), ContextId(1), Instant::now());
        b.text = "one two three four".into();
        b.audio_bytes = 8_000; // 1 s
        b.generation = Generation::Generating {
            dialog_done: false,
            tts_done: true,
            then: None,
        };
        b.frames_sent = 3; // 60 ms sent, all of it still in the carrier's buffer
        assert_eq!(b.heard_text(3, LegFormat::Mulaw8k), "");
        b.frames_sent = 50;
        assert_eq!(b.heard_text(3, LegFormat::Mulaw8k), "one two three");
        // The same second of audio as 16 kHz linear PCM is twice the bytes.
        b.audio_bytes = 32_000;
        assert_eq!(b.heard_text(3, LegFormat::L16k16), "one two three");
    }
}
