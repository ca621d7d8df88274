//! The call core's states as types. What may coexist is what a variant
//! holds: a barge-in pause exists only inside the reply it paused, an exit
//! the dialog asked for only inside the reply still being generated
//! ([`crate::call::bot::Generation`]), a pending drain hand-over and the
//! STT nudge only while the call is [`Live`], the count of late terminal
//! causes only once it has [`Ended`].

use std::time::Instant;

use crate::call::bot::BotTurn;
use crate::end::End;

/// The call's phase. See the module documentation of `call::core`.
#[derive(Debug)]
pub enum Phase {
    Live(Live),
    Ending(Ending),
    Ended(Ended),
}

/// What exists only while the conversation is live.
#[derive(Debug, Default)]
pub struct Live {
    pub(super) drain: Drain,
    /// When to ask STT to `Finalize`: the caller stopped speaking (local
    /// VAD) and no final has come; half the STT stall, so the provider is
    /// nudged before the watchdog has to apologise.
    pub(super) finalize_at: Option<Instant>,
}

/// Whether a `transfer` drain waits for this call's next turn boundary.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum Drain {
    #[default]
    Serving,
    HandOverDue,
}

/// A final prompt and marker are playing.
#[derive(Debug)]
pub struct Ending {
    pub mark: String,
    pub end: End,
    pub deadline: Instant,
}

/// The call has ended; nothing is decided any more.
#[derive(Debug)]
pub struct Ended {
    /// The first cause, the one recorded.
    pub end: End,
    /// Terminal causes that came after it (counted, ignored).
    pub late_ends: u32,
}

/// Where the conversation's turn taking stands.
///
/// `owed_since` is the reply-latency clock: when the caller's turn ended
/// (`None` for the greeting, which has no such clock); the first frame of
/// bot audio stops it.
#[derive(Debug)]
pub(super) enum Turn {
    /// The expected caller turn (turn 0: the greeting) has no reply yet.
    Owed { owed_since: Option<Instant> },
    /// A reply to the expected turn is in progress; `pause` holds its
    /// output on the caller's voice (reversible barge-in).
    Replying {
        bot: BotTurn,
        pause: Option<Pause>,
        owed_since: Option<Instant>,
    },
    /// The expected turn was answered (its reply played out or was cut):
    /// the caller has the floor.
    Listening,
}

/// A pause waiting for words.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pause {
    pub since: Instant,
    /// Words before this commit the interruption.
    pub confirm_by: Instant,
    /// The window has passed and the VAD still hears sound: wait for its end.
    pub awaiting_silence: bool,
    /// Resume at the latest here.
    pub give_up_at: Instant,
}

impl Pause {
    pub fn deadline(&self) -> Instant {
        if self.awaiting_silence {
            self.give_up_at
        } else {
            self.confirm_by
        }
    }
}

/// A reply taken out of [`Turn::Replying`].
pub(super) struct Cut {
    pub bot: BotTurn,
    pub pause: Option<Pause>,
    pub owed_since: Option<Instant>,
}

impl Turn {
    /// The reply in progress.
    pub fn reply(&self) -> Option<&BotTurn> {
        match self {
            Turn::Replying { bot, .. } => Some(bot),
            _ => None,
        }
    }

    /// The reply in progress, for update.
    pub fn reply_mut(&mut self) -> Option<&mut BotTurn> {
        match self {
            Turn::Replying { bot, .. } => Some(bot),
            _ => None,
        }
    }

    /// The pause holding the reply, if any.
    pub fn pause(&self) -> Option<&Pause> {
        match self {
            Turn::Replying { pause, .. } => pause.as_ref(),
            _ => None,
        }
    }

    /// Ends the reply in progress (the turn is answered): the caller has
    /// the floor.
    pub fn take_reply(&mut self) -> Option<Cut> {
        if !matches!(self, Turn::Replying { .. }) {
            return None;
        }
        match std::mem::replace(self, Turn::Listening) {
            Turn::Replying {
                bot,
                pause,
                owed_since,
            } => Some(Cut {
                bot,
                pause,
                owed_since,
            }),
            _ => None,
        }
    }

    /// Stops the reply-latency clock, returning when it started.
    pub fn stop_reply_clock(&mut self) -> Option<Instant> {
        match self {
            Turn::Owed { owed_since } | Turn::Replying { owed_since, .. } => owed_since.take(),
            Turn::Listening => None,
        }
    }
}
