//! A media stream with nothing but audio on it (WebRTC): what the caller
//! core learns from marks and messages on the other protocols, learnt
//! here from what arrives and from the session's status.
//!
//! Every decoded 20 ms frame goes through the lossy ear
//! ([`crate::prompts::lossy`]), which releases frames — sometimes several
//! at once, each with its own arrival time — as *quiet* (digital silence,
//! which the server sends whenever nothing plays: it is not audio to the
//! playout buffer, so dead air is measured as on the other protocols) or
//! as *heard* audio, a prompt or the bot's own. A bot turn whose own audio
//! is followed by the protocol's turn gap of quiet has ended where that
//! audio ended: there is no mark, and a person on the line goes by the
//! same silence. The session's status, polled by the driver, says how the
//! call ended; its reasons are read as the terminal marks' reasons
//! ([`super::ending::session_terminal`]).
//!
//! What it never does: take quiet for audio, end a turn whose own audio
//! never began, or guess an ending the status did not report.
//!
//! How it is driven: by the caller core itself — `handle_binary` of a
//! WebRTC call lands in [`Caller::on_stream_frame`], `handle_text` of a
//! status in [`Caller::on_session`].

use std::time::Duration;

use super::ending::{TerminalKind, session_terminal};
use super::{Caller, Stage, TurnHeard};
use crate::prompts::{Sound, Timed};
use crate::record::Prompt;
use crate::transport::SessionStatus;

impl Caller {
    /// One decoded frame of the stream, received at `now`.
    pub(super) fn on_stream_frame(&mut self, now: Duration, frame: &[u8]) {
        for timed in self.ear.hear_frame(now, frame) {
            if !self.is_live() {
                break;
            }
            match timed {
                Timed::Quiet { at } => self.quiet(at),
                Timed::Heard { at, piece } => {
                    // No `clear` on this protocol: a prompt beginning is
                    // where what plays now began (the overflow prompt after
                    // hold music, say).
                    if piece.starts_run && matches!(piece.sound, Sound::Prompt(_)) {
                        self.prompt_started = None;
                    }
                    self.audio_arrived(at, piece.bytes, vec![piece]);
                }
            }
        }
    }

    /// A quiet frame at `at`: the turn gap after the bot's own audio ends
    /// its turn, at the end of that audio.
    fn quiet(&mut self, at: Duration) {
        let Some(gap) = self.plan.protocol.turn_gap() else {
            return;
        };
        let Stage::AwaitBot {
            turn,
            heard: TurnHeard::Own,
        } = self.stage
        else {
            return;
        };
        let ended = self.playout.tail_end();
        if at >= ended + gap {
            self.admitted = true;
            self.turn_completed(ended, turn);
        }
    }

    /// The session's status, as the driver polled it.
    pub(super) fn on_session(&mut self, now: Duration, status: SessionStatus) {
        if let Some(id) = status.call_id.filter(|id| !id.is_empty()) {
            self.said.session_id.get_or_insert(id);
        }
        match status.state.as_str() {
            "admitted" => self.admitted = true,
            "ended" | "refused" => {
                let reason = status.end_reason.unwrap_or_default();
                self.session_over(now, &status.state, reason);
            }
            _ => {}
        }
    }

    /// The status says the call is over: the terminal prompt (if its reason
    /// has one) has played — the server reports the end after it.
    fn session_over(&mut self, now: Duration, state: &str, reason: String) {
        if !self.is_live() {
            return;
        }
        self.said.end.get_or_insert_with(|| reason.clone());
        if let Some((kind, why)) = session_terminal(state, &reason) {
            self.enter_terminal(now, kind, why);
            let overflow_heard = self.ear.heard_since_clear(Prompt::Overflow);
            if let Stage::Terminal(term) = &mut self.stage {
                term.echoed = true;
                term.via_status = true;
                // Refused without the prompt (`webrtc.overflow = "reject"`):
                // the caller learns it from the status, now.
                if kind == TerminalKind::Overflow && !overflow_heard {
                    term.heard_from = now;
                }
            }
        }
        let reason = if reason.is_empty() {
            "no reason"
        } else {
            &reason
        };
        self.server_gone(now, format!("the session {state} ({reason})"));
    }
}
