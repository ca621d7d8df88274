//! How a call stops: an exit or fail-over moves a live call to `Ending`
//! (a final prompt and marker playing), and [`CallCore::finish`] is the one
//! terminal transition to `Ended`.

use std::time::Instant;

use state_store::Speaker;
use tracing::info;

use super::state::{Ended, Ending, Phase, Turn};
use super::{CallCore, Command, Rec};
use crate::call::bot::{BotTurn, Exit};
use crate::end::{End, EndReason};
use crate::prompts::Prompt;

impl CallCore {
    /// The peer ended the call. During a final prompt the first cause (the
    /// reason the call was ending) stays the recorded one.
    pub(super) fn peer_left(&mut self, end: End) {
        let at = end.at;
        if let Phase::Ending(e) = &self.phase {
            let mut first = e.end.clone();
            first.at = at;
            first.peer_left = true;
            let left = end.reason.label();
            self.event(
                "peer_left_during_final_prompt",
                serde_json::json!({ "why": left }),
                at,
            );
            self.finish(first);
        } else {
            self.finish(end);
        }
    }

    /// The leg reported the final marker played: the caller heard the
    /// final prompt to its end. False when `name` is not that marker.
    pub(super) fn final_mark_played(&mut self, name: &str, now: Instant) -> bool {
        let Phase::Ending(e) = &self.phase else {
            return false;
        };
        if e.mark != name {
            return false;
        }
        let mut end = e.end.clone();
        end.at = now;
        self.event(
            "final_prompt_played",
            serde_json::json!({ "mark": name }),
            now,
        );
        self.finish(end);
        true
    }

    /// The final marker was not reported played by its deadline.
    pub(super) fn final_mark_overdue(&mut self, now: Instant) {
        let Phase::Ending(e) = &self.phase else {
            return;
        };
        tracing::warn!(mark = %e.mark, "final marker not reported played in time; ending anyway");
        let mut end = e.end.clone();
        end.at = now;
        let mark = e.mark.clone();
        self.event(
            "final_prompt_unconfirmed",
            serde_json::json!({ "mark": mark }),
            now,
        );
        self.finish(end);
    }

    /// Something failed mid-call: stop what is playing, play a bundled
    /// prompt, and end with `end` once it has been heard.
    pub(super) fn fail_over(
        &mut self,
        end: End,
        prompt: Prompt,
        mark: String,
        event: &str,
        now: Instant,
    ) {
        if !self.is_live() {
            return;
        }
        if let Some(cut) = self.turn.take_reply() {
            if cut.bot.frames_sent > 0 {
                self.push(Command::Clear);
            }
            if self.links.tts {
                self.push(Command::TtsCancel(cut.bot.ctx));
            }
            self.record_cut_turn(&cut.bot, now);
            // The caller heard nothing of the reply: the turn stays owed,
            // and the prompt's first frame stops its reply clock.
            if let Some(since) = cut.owed_since {
                self.turn = Turn::Owed {
                    owed_since: Some(since),
                };
            }
        }
        self.pacer.clear();
        self.prompt_frames = 0;
        self.pacer.push_audio(prompt.audio(self.cfg.format));
        self.event(event, serde_json::json!({}), now);
        self.begin_ending(mark, end, now);
    }

    /// What the caller heard of `b` (call before the pacer is cleared).
    pub(super) fn heard(&self, b: &BotTurn, now: Instant) -> String {
        let unheard = u64::from(self.pacer.in_flight(now));
        b.heard_text(unheard, self.cfg.format).to_string()
    }

    fn record_cut_turn(&mut self, b: &BotTurn, now: Instant) {
        let heard = self.heard(b, now);
        self.record(Rec::Turn {
            speaker: Speaker::Bot,
            text: heard,
            span: (b.started_at, now),
            interrupted: true,
            latency: self.timings.latency_of(b.turn),
        });
    }

    pub(super) fn start_exit(&mut self, exit: Exit, now: Instant) {
        let (mark, end) = match exit {
            Exit::Transfer(r) => (
                format!("callgate-transfer:{r}"),
                End::new(EndReason::Transferred, now).with_detail(r),
            ),
            Exit::End(r) => (
                format!("callgate-end:{r}"),
                End::new(EndReason::BotEnded, now).with_detail(r),
            ),
        };
        self.begin_ending(mark, end, now);
    }

    /// Live → `Ending`: what only a live call holds (a pending drain
    /// hand-over, the STT nudge) goes with the `Live` state.
    pub(super) fn begin_ending(&mut self, mark: String, end: End, now: Instant) {
        if !self.is_live() {
            return;
        }
        self.watchdog.nothing_owed();
        self.pacer.push_mark(mark.clone());
        // Re-armed to the grace once the marker is actually sent (`pump`):
        // a prompt slowed by CPU pressure must not be cut short.
        let deadline = now + self.pacer.queued() * 2 + self.cfg.final_mark_grace;
        info!(reason = %end.ledger(), "call ending after its final prompt");
        self.phase = Phase::Ending(Ending {
            mark,
            end,
            deadline,
        });
    }

    /// The one terminal transition. Idempotent: a later cause is counted
    /// and dropped, so the first cause is the one recorded. Nothing outlives
    /// the call: every tool still running is cancelled here.
    pub(super) fn finish(&mut self, end: End) {
        if let Phase::Ended(first) = &mut self.phase {
            first.late_ends += 1;
            info!(first = %first.end.ledger(), late = %end.ledger(), "call already ended; later cause ignored");
            return;
        }
        if let Some(cut) = self.turn.take_reply() {
            self.record_cut_turn(&cut.bot, end.at);
        }
        let mut ids: Vec<_> = self.tools.drain().map(|(id, _)| id).collect();
        ids.sort_by(|a, b| a.0.cmp(&b.0));
        for id in ids {
            self.push(Command::ToolCancel(id));
        }
        self.watchdog.nothing_owed();
        self.pacer.clear();
        self.phase = Phase::Ended(Ended { end, late_ends: 0 });
    }
}
