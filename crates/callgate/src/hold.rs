//! What a caller hears while waiting in the admission queue: a short
//! "please hold" and then soft hold music, from bundled audio (no provider
//! needed), on any leg. A wait callgate controls must be a wait the caller
//! can hear — silence on the line is what the 200-call incident sounded like.

use std::time::{Duration, Instant};

use media::pacer::{Paced, Pacer};

use crate::leg::{Leg, LegFormat};
use crate::prompts::{self, Prompt};

/// Music is topped up whenever less than this much is queued.
const REFILL_BELOW: Duration = Duration::from_millis(1_000);

/// Hold audio for one waiting call.
pub struct Hold {
    pacer: Pacer<String>,
    format: LegFormat,
    frames_sent: u64,
}

impl Hold {
    /// Starts with the spoken prompt; music follows.
    pub fn start(format: LegFormat) -> Self {
        let mut pacer = prompts::pacer(format);
        pacer.push_audio(Prompt::Hold.audio(format));
        pacer.push_audio(Prompt::HoldMusic.audio(format));
        Hold {
            pacer,
            format,
            frames_sent: 0,
        }
    }

    /// Sends what is due and tops the music up.
    pub fn pump(&mut self, leg: &mut impl Leg, now: Instant) {
        while let Some(item) = self.pacer.poll(now) {
            if let Paced::Frame(f) = item {
                leg.play(&f);
                self.frames_sent += 1;
            }
        }
        if self.pacer.queued() < REFILL_BELOW {
            self.pacer.push_audio(Prompt::HoldMusic.audio(self.format));
        }
    }

    /// When to pump next.
    pub fn next_deadline(&self, now: Instant) -> Instant {
        self.pacer
            .next_deadline()
            .unwrap_or(now + crate::call::FRAME_PERIOD)
    }

    /// Stops the hold audio; the leg is told to drop what it buffered, so
    /// what comes next (greeting or overflow prompt) starts at once.
    pub fn stop(self, leg: &mut impl Leg) {
        if self.frames_sent > 0 {
            leg.clear();
        }
    }
}
