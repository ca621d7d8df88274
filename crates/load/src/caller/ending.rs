//! How a call's conversation ended, read from the server's terminal mark
//! (or partner message): who ended it, and whether the refusal was heard.
//!
//! The reason names who ended the conversation (the server's convention):
//! `<culprit>_stalled` is the watchdog giving up on a stalled provider,
//! `<provider>_failed` a provider connection lost mid-call, `max_duration`
//! and `drain_deadline` the server's limits; any other reason is the bot's
//! own. The partner protocol's `transfer`/`end` messages carry the same
//! causes as `stalled:<culprit>`, `provider_failed:<provider>` and the bare
//! limit names.

use std::time::Duration;

use super::millis;
use crate::record::Outcome;

/// Mark name prefixes that carry meaning (the server's convention).
const OVERFLOW_PREFIX: &str = "callgate-overflow:";
const TRANSFER_PREFIX: &str = "callgate-transfer:";
const END_PREFIX: &str = "callgate-end:";

/// Who the server blames in a watchdog transfer's reason
/// (`<culprit>_stalled`, partner `stalled:<culprit>`).
const STALL_CULPRITS: [&str; 5] = ["dialog", "tool", "tts", "stt", "carrier_media"];
/// Providers whose mid-call failure the server hands over
/// (`<provider>_failed`, partner `provider_failed:<provider>`).
const FAILOVER_PROVIDERS: [&str; 3] = ["stt", "tts", "dialog"];
/// `callgate-end:` reasons that are the server's limits, not the bot's choice.
/// (`owner_fenced`: the instance learnt another one had closed the call's
/// record while it was paused or cut off.)
const LIMIT_REASONS: [&str; 3] = ["max_duration", "drain_deadline", "owner_fenced"];

/// Which terminal mark (or partner message) ended the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TerminalKind {
    Overflow,
    Transfer,
    End,
}

impl TerminalKind {
    pub(super) fn name(self) -> &'static str {
        match self {
            TerminalKind::Overflow => "overflow",
            TerminalKind::Transfer => "transfer",
            TerminalKind::End => "end",
        }
    }
}

/// A terminal mark arrived: its prompt plays, then the server must close.
#[derive(Debug)]
pub(super) struct Terminal {
    pub(super) kind: TerminalKind,
    pub(super) reason: String,
    /// When the audio that carried this terminal prompt began (the moment
    /// the caller could first hear the refusal); the mark's arrival if none.
    pub(super) heard_from: Duration,
    pub(super) audio_seen: bool,
    pub(super) echoed: bool,
    /// Learnt from a WebRTC session's status, not from a mark or message.
    pub(super) via_status: bool,
}

/// The kind and reason of a terminal mark's name, if it is one.
pub(super) fn terminal_kind(name: &str) -> Option<(TerminalKind, &str)> {
    [
        (OVERFLOW_PREFIX, TerminalKind::Overflow),
        (TRANSFER_PREFIX, TerminalKind::Transfer),
        (END_PREFIX, TerminalKind::End),
    ]
    .into_iter()
    .find_map(|(prefix, kind)| name.strip_prefix(prefix).map(|reason| (kind, reason)))
}

/// How a call whose conversation ended with `term` ended. An overflow
/// prompt was heard when its mark was echoed after its audio, and that audio
/// was the bundled overflow prompt (`overflow_heard`, since the last clear).
pub(super) fn terminal_outcome(term: &Terminal, overflow_heard: bool) -> Outcome {
    let reason = term.reason.clone();
    match term.kind {
        TerminalKind::Overflow => Outcome::Rejected {
            how: if term.via_status {
                "session_refused"
            } else {
                "overflow_mark"
            }
            .into(),
            reason,
            prompt_heard: term.echoed && term.audio_seen && overflow_heard,
            time_to_rejection_ms: millis(term.heard_from),
        },
        TerminalKind::Transfer if is_reason(&reason, "stalled", &STALL_CULPRITS) => {
            Outcome::WatchdogTransfer { reason }
        }
        TerminalKind::Transfer if is_reason(&reason, "failed", &FAILOVER_PROVIDERS) => {
            Outcome::FailoverTransfer { reason }
        }
        TerminalKind::Transfer => Outcome::Transferred { reason },
        TerminalKind::End if LIMIT_REASONS.contains(&reason.as_str()) => {
            Outcome::CutShort { reason }
        }
        TerminalKind::End => Outcome::EndedByBot { reason },
    }
}

/// Whether `reason` is `<who>_<what>` (a mark) or `<what>:<who>` /
/// `provider_<what>:<who>` (a partner message) for one of `who`.
fn is_reason(reason: &str, what: &str, who: &[&str]) -> bool {
    let mark = reason.strip_suffix(what).and_then(|r| r.strip_suffix('_'));
    let message = reason
        .strip_prefix("provider_")
        .unwrap_or(reason)
        .strip_prefix(what)
        .and_then(|r| r.strip_prefix(':'));
    mark.or(message).is_some_and(|w| who.contains(&w))
}

/// A WebRTC session's end reasons that no terminal prompt announces: the
/// caller or its media went away, or the server stopped
/// (`docs/webrtc.md`, "How a call ends").
const LOST_REASONS: [&str; 11] = [
    "caller_hangup",
    "caller_hangup_during_setup",
    "carrier_gone",
    "carrier_gone_during_setup",
    "carrier_media_stalled",
    "rtp_timeout",
    "ice_failed",
    "dtls_failed",
    "consent_lost",
    "shutdown",
    "protocol_error",
];

/// The terminal kind and reason a WebRTC session's final status stands
/// for (`docs/webrtc.md`, "How a call ends"), in the reasons the marks
/// carry; `None` for an ending no terminal prompt announces ([`LOST_REASONS`],
/// or no reason at all).
///
/// `refused` (and a setup failure, which plays the overflow prompt) is an
/// overflow; `bot_ended[:<reason>]` and the server's limits are ends;
/// `transferred:<reason>`, `drain_transfer`, `stalled:<culprit>` and
/// `provider_failed:<provider>` (read as the partner messages' reasons)
/// are transfers, and so is any other reason: the contract names a bot's
/// hand-over by its bare reason (`caller_requested_human`).
pub(super) fn session_terminal(state: &str, reason: &str) -> Option<(TerminalKind, String)> {
    if state == "refused" || reason.starts_with("setup_failed:") {
        return Some((TerminalKind::Overflow, reason.to_string()));
    }
    let lost = reason
        .split(':')
        .next()
        .is_some_and(|r| LOST_REASONS.contains(&r));
    if state != "ended" || reason.is_empty() || lost {
        return None;
    }
    // `<prefix>` alone or `<prefix>:<detail>`.
    let detail = |prefix: &str| match reason.strip_prefix(prefix)? {
        "" => Some(prefix.to_string()),
        rest => rest.strip_prefix(':').map(str::to_string),
    };
    if let Some(r) = detail("bot_ended") {
        return Some((TerminalKind::End, r));
    }
    if LIMIT_REASONS.contains(&reason) {
        return Some((TerminalKind::End, reason.to_string()));
    }
    let why = match (detail("transferred"), reason) {
        (Some(r), _) => r,
        (None, "drain_transfer") => "drain".to_string(),
        (None, other) => other.to_string(),
    };
    Some((TerminalKind::Transfer, why))
}
