//! What a reconnect re-requests, and which drops are worth a reconnect:
//! the sans-IO half of mid-call reconnecting, tested without sockets.
//!
//! The unheard text of a context is the text sent minus what the caller
//! already heard as audio, cut back to the start of the word in progress
//! (so at most one partial word is heard twice). "Heard" is measured by
//! the best evidence the provider gave: Cartesia word timestamps (words),
//! else ElevenLabs alignment (non-whitespace characters), else — both
//! alignments null — the audio's playing time at
//! [`ASSUMED_CHARS_PER_SECOND`].

use std::time::Duration;

use reconnect::Failure;

use crate::error::{CloseReason, TtsError};

/// Speaking rate assumed when the provider sent audio without any
/// alignment: about 15 characters (spaces included) per second, typical
/// conversational English and the simulator's rate. An estimate errs
/// both ways; the cut back to the word start keeps the error to words.
pub const ASSUMED_CHARS_PER_SECOND: f64 = 15.0;

/// How much of a context's text the caller has heard.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Heard {
    /// Whole words covered by word timestamps.
    Words(usize),
    /// Non-whitespace characters covered by a character alignment.
    Voiced(usize),
    /// No alignment at all: this much audio arrived.
    Audio(Duration),
}

/// The part of `text` not yet heard, starting at a word.
pub(crate) fn unheard(text: &str, heard: Heard) -> &str {
    let pos = match heard {
        Heard::Words(n) => after_words(text, n),
        Heard::Voiced(n) => after_voiced(text, n),
        Heard::Audio(d) => {
            let chars = (d.as_secs_f64() * ASSUMED_CHARS_PER_SECOND).floor() as usize;
            text.char_indices()
                .nth(chars)
                .map_or(text.len(), |(i, _)| i)
        }
    };
    text[word_start(text, pos)..].trim_start()
}

/// Byte offset just after the `n`-th word (whitespace-separated).
fn after_words(text: &str, n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let mut words = 0;
    let mut in_word = false;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            if in_word {
                words += 1;
                if words == n {
                    return i;
                }
            }
            in_word = false;
        } else {
            in_word = true;
        }
    }
    text.len()
}

/// Byte offset just after the `n`-th non-whitespace character.
fn after_voiced(text: &str, n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let mut voiced = 0;
    for (i, c) in text.char_indices() {
        if !c.is_whitespace() {
            voiced += 1;
            if voiced == n {
                return i + c.len_utf8();
            }
        }
    }
    text.len()
}

/// `pos`, moved back to the start of the word it falls inside.
fn word_start(text: &str, pos: usize) -> usize {
    let inside = |p: usize| {
        let before = text[..p].chars().next_back();
        let at = text[p..].chars().next();
        matches!((before, at), (Some(b), Some(a)) if !b.is_whitespace() && !a.is_whitespace())
    };
    if pos == 0 || pos >= text.len() || !inside(pos) {
        return pos.min(text.len());
    }
    text[..pos]
        .char_indices()
        .rev()
        .find(|(_, c)| c.is_whitespace())
        .map_or(0, |(i, c)| i + c.len_utf8())
}

/// Whether a socket that ended with `reason` is reconnected, and as what
/// kind of failure. `capacity_seen`: the provider sent a capacity error
/// frame on this socket before it ended. `None`: not worth retrying —
/// our own close, a policy close (1008 other than a concurrency refusal:
/// too many contexts, inactivity, quota), a protocol or message-size
/// close, or a stalled consumer.
pub(crate) fn drop_failure(reason: &CloseReason, capacity_seen: bool) -> Option<Failure> {
    let capacity_text = |r: &str| r.contains("too_many_concurrent") || r.contains("rate_limit");
    match reason {
        CloseReason::ProviderClosed { reason, .. } if capacity_seen || capacity_text(reason) => {
            Some(Failure::Capacity)
        }
        CloseReason::ProviderClosed {
            code: 1002 | 1003 | 1007 | 1008 | 1009 | 1010,
            ..
        } => None,
        CloseReason::ProviderClosed { .. } => Some(Failure::Down),
        CloseReason::ConnectionLost { .. } if capacity_seen => Some(Failure::Capacity),
        CloseReason::ConnectionLost { .. } => Some(Failure::Down),
        _ => None,
    }
}

/// What kind of failure a refused or failed reconnect upgrade is.
pub(crate) fn upgrade_failure(e: &TtsError) -> Failure {
    match e {
        TtsError::Rejected { status: 429, .. } => Failure::Capacity,
        TtsError::Rejected { status, .. } if *status == 408 || *status >= 500 => Failure::Down,
        TtsError::Rejected { .. } | TtsError::InvalidConfig { .. } => Failure::Fatal,
        _ => Failure::Down,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "Your table for four is booked at seven. ";

    #[test]
    fn heard_characters_are_skipped_back_to_the_word_in_progress() {
        assert_eq!(unheard(TEXT, Heard::Voiced(0)), TEXT);
        // "Yourtablef" heard: "for" was in progress, so it is said again.
        assert_eq!(
            unheard(TEXT, Heard::Voiced(10)),
            "for four is booked at seven. "
        );
        // "Yourtable" heard exactly: the next word starts fresh.
        assert_eq!(
            unheard(TEXT, Heard::Voiced(9)),
            "for four is booked at seven. "
        );
        assert_eq!(
            unheard(TEXT, Heard::Voiced(4)),
            "table for four is booked at seven. "
        );
        assert_eq!(unheard(TEXT, Heard::Voiced(3)), TEXT);
        assert_eq!(unheard(TEXT, Heard::Voiced(32)), "");
        assert_eq!(unheard(TEXT, Heard::Voiced(500)), "");
    }

    #[test]
    fn heard_words_skip_whole_words() {
        assert_eq!(unheard(TEXT, Heard::Words(0)), TEXT);
        assert_eq!(
            unheard(TEXT, Heard::Words(2)),
            "for four is booked at seven. "
        );
        assert_eq!(unheard(TEXT, Heard::Words(8)), "");
        assert_eq!(unheard("a  b", Heard::Words(1)), "b");
    }

    #[test]
    fn without_alignment_the_audio_length_is_read_at_the_assumed_rate() {
        // 1 s ≈ 15 chars: "Your table for " — "four" starts at char 15.
        assert_eq!(
            unheard(TEXT, Heard::Audio(Duration::from_secs(1))),
            "four is booked at seven. "
        );
        // 1.2 s ≈ 18 chars: inside "four", which is said again.
        assert_eq!(
            unheard(TEXT, Heard::Audio(Duration::from_millis(1_200))),
            "four is booked at seven. "
        );
        assert_eq!(unheard(TEXT, Heard::Audio(Duration::from_secs(60))), "");
    }

    #[test]
    fn multibyte_text_is_cut_on_character_boundaries() {
        let text = "Ça coûte dix € ";
        assert_eq!(unheard(text, Heard::Voiced(4)), "coûte dix € ");
        assert_eq!(unheard(text, Heard::Voiced(2)), "coûte dix € ");
        assert_eq!(
            unheard(text, Heard::Audio(Duration::from_millis(400))),
            "coûte dix € "
        );
    }

    #[test]
    fn only_outages_and_capacity_refusals_are_reconnected() {
        let closed = |code, reason: &str| CloseReason::ProviderClosed {
            code,
            reason: reason.into(),
        };
        assert_eq!(drop_failure(&closed(1011, ""), false), Some(Failure::Down));
        assert_eq!(drop_failure(&closed(1001, ""), false), Some(Failure::Down));
        assert_eq!(
            drop_failure(&closed(1008, "too_many_concurrent_requests"), false),
            Some(Failure::Capacity)
        );
        assert_eq!(drop_failure(&closed(1008, "quota_exceeded"), false), None);
        assert_eq!(
            drop_failure(&closed(1008, "max_active_conversations"), false),
            None
        );
        assert_eq!(
            drop_failure(&closed(1008, "whatever"), true),
            Some(Failure::Capacity)
        );
        let lost = CloseReason::ConnectionLost {
            message: "reset".into(),
        };
        assert_eq!(drop_failure(&lost, false), Some(Failure::Down));
        assert_eq!(drop_failure(&lost, true), Some(Failure::Capacity));
        assert_eq!(drop_failure(&CloseReason::Requested, false), None);
        assert_eq!(drop_failure(&CloseReason::ConsumerStalled, false), None);
    }

    #[test]
    fn refused_upgrades_are_capacity_outage_or_fatal() {
        let rejected = |status| TtsError::Rejected {
            status,
            body: String::new(),
        };
        assert_eq!(upgrade_failure(&rejected(429)), Failure::Capacity);
        assert_eq!(upgrade_failure(&rejected(503)), Failure::Down);
        assert_eq!(upgrade_failure(&rejected(401)), Failure::Fatal);
        assert_eq!(upgrade_failure(&rejected(403)), Failure::Fatal);
        let lost = TtsError::Connect {
            url: "ws://x".into(),
            message: "refused".into(),
        };
        assert_eq!(upgrade_failure(&lost), Failure::Down);
    }
}
