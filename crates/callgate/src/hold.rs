//! What a caller hears while waiting in the admission queue: a short
//! "please hold" and then soft hold music, from bundled audio (no provider
//! needed). A wait callgate controls must be a wait the caller can hear —
//! silence on the line is what the 200-call incident sounded like.

use std::time::{Duration, Instant};

use media::pacer::{Paced, Pacer};

use crate::carrier::CarrierLink;
use crate::prompts;

/// Music is topped up whenever less than this much is queued.
const REFILL_BELOW: Duration = Duration::from_millis(1_000);

/// Hold audio for one waiting call.
pub struct Hold {
    pacer: Pacer<String>,
    frames_sent: u64,
}

impl Hold {
    /// Starts with the spoken prompt; music follows.
    pub fn start() -> Self {
        let mut pacer = prompts::pacer();
        pacer.push_audio(prompts::HOLD);
        pacer.push_audio(prompts::HOLD_MUSIC);
        Hold {
            pacer,
            frames_sent: 0,
        }
    }

    /// Sends what is due and tops the music up.
    pub fn pump(&mut self, carrier: &CarrierLink, now: Instant) {
        while let Some(item) = self.pacer.poll(now) {
            if let Paced::Frame(f) = item {
                carrier.send_audio(&f);
                self.frames_sent += 1;
            }
        }
        if self.pacer.queued() < REFILL_BELOW {
            self.pacer.push_audio(prompts::HOLD_MUSIC);
        }
    }

    /// When to pump next.
    pub fn next_deadline(&self) -> Instant {
        self.pacer
            .next_deadline()
            .unwrap_or_else(|| Instant::now() + crate::call::FRAME_PERIOD)
    }

    /// Stops the hold audio; the carrier is told to drop what it buffered,
    /// so what comes next (greeting or overflow prompt) starts at once.
    pub fn stop(self, carrier: &CarrierLink) {
        if self.frames_sent > 0 {
            carrier.send_clear();
        }
    }
}
