//! Drain orders inside the call: a `transfer` drain hands the call to the
//! human path at its next turn boundary, never in the middle of a sentence.
//!
//! The boundary is the first moment one of these holds:
//! - the bot's reply is fully generated (its end marker is queued): the
//!   hand-over prompt queues behind it, so the caller hears the whole reply;
//! - nobody is speaking and no reply is owed (the greeting and every caller
//!   turn have been answered, the caller is not mid-utterance, no barge-in
//!   pause is open).
//!
//! A call whose bot already decided to end or transfer keeps that exit. The
//! drain deadline (`Input::DrainDeadline`) still bounds a call that never
//! reaches a boundary.

use std::time::Instant;

use tracing::info;

use super::CallCore;
use super::state::{Drain, Phase, Turn};
use crate::end::{End, EndReason};
use crate::prompts::Prompt;

/// The marker after the hand-over prompt: when the leg reports it played,
/// the call is transferred.
const MARK: &str = "callgate-transfer:drain";

impl CallCore {
    /// A `transfer` drain started: hand over at the next turn boundary.
    pub(super) fn drain_transfer_requested(&mut self, now: Instant) {
        let Some(live) = self.live_mut() else {
            return;
        };
        if live.drain == Drain::HandOverDue {
            return;
        }
        live.drain = Drain::HandOverDue;
        self.event("drain_transfer_requested", serde_json::json!({}), now);
        self.hand_over_if_at_boundary(now);
    }

    /// The drain was cancelled before this call reached a boundary: it
    /// stays. A hand-over already under way goes on.
    pub(super) fn drain_cancelled(&mut self, now: Instant) {
        if let Some(live) = self.live_mut()
            && live.drain == Drain::HandOverDue
        {
            live.drain = Drain::Serving;
            self.event("drain_transfer_cancelled", serde_json::json!({}), now);
        }
    }

    /// Whether the call is at a turn boundary (see the module docs).
    fn at_turn_boundary(&self) -> bool {
        match &self.turn {
            Turn::Replying {
                bot, pause: None, ..
            } => bot.mark().is_some(),
            Turn::Replying { .. } | Turn::Owed { .. } => false,
            Turn::Listening => !self.vad.is_speaking(),
        }
    }

    /// Called after every input: starts the hand-over once it is due.
    pub(super) fn hand_over_if_at_boundary(&mut self, now: Instant) {
        let due = matches!(&self.phase, Phase::Live(live) if live.drain == Drain::HandOverDue);
        if !due || !self.at_turn_boundary() {
            return;
        }
        let behind_reply = matches!(self.turn, Turn::Replying { .. });
        info!(
            behind_reply,
            "drain: handing the call over at its turn boundary"
        );
        self.event(
            "drain_transfer",
            serde_json::json!({ "behind_reply": behind_reply }),
            now,
        );
        self.pacer
            .push_audio(Prompt::Transfer.audio(self.cfg.format));
        // Leaving `Live` drops the hand-over order with it.
        self.begin_ending(MARK.into(), End::new(EndReason::DrainTransfer, now), now);
        self.pump(now);
    }
}
