//! Turning a stream of results into whole caller utterances
//! (docs/protocols.md §2.3): final segments are concatenated until the
//! provider marks the end of speech, and the utterance is yielded exactly
//! once.

use crate::event::SttEvent;

/// What ended an utterance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UtteranceBoundary {
    /// A final result with `speech_final: true` (endpointing).
    SpeechFinal,
    /// An `UtteranceEnd` message (word-gap detector).
    UtteranceEnd,
    /// A final produced by our own `Finalize` request: we already decided
    /// the turn is over.
    Finalize,
    /// The stream closed with segments pending.
    StreamClosed,
}

/// One complete caller utterance.
#[derive(Debug, Clone, PartialEq)]
pub struct Utterance {
    /// The final segments joined by single spaces.
    pub text: String,
    /// Audio seconds where the first segment began.
    pub start: f64,
    /// Audio seconds where the last segment ended.
    pub end: f64,
    pub boundary: UtteranceBoundary,
}

/// Sans-IO assembler: feed every event with [`UtteranceAssembler::push`].
/// Finals supersede interims; a boundary with nothing pending yields
/// nothing, so a `speech_final` followed by an `UtteranceEnd` yields one
/// utterance.
///
/// The last interim with words is remembered (until a non-empty final or
/// an utterance replaces it) so that words the caller was heard saying are
/// never lost to a provider's bad day:
/// - a final that comes back **empty** after such an interim promotes the
///   interim's words to a segment (then `speech_final`, `from_finalize` or
///   a later boundary ends the utterance as usual);
/// - an `UtteranceEnd` with no finals pending but interim words seen since
///   the last utterance yields those words.
///
/// Interims alone with no boundary yield nothing.
#[derive(Debug, Clone, Default)]
pub struct UtteranceAssembler {
    segments: Vec<String>,
    start: f64,
    end: f64,
    /// The latest interim with words since the last final or utterance:
    /// (text, start, end).
    interim: Option<(String, f64, f64)>,
}

impl UtteranceAssembler {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one event; returns an utterance when this event completed one.
    pub fn push(&mut self, event: &SttEvent) -> Option<Utterance> {
        match event {
            SttEvent::Transcript(t) if !t.is_final => {
                let text = t.text.trim();
                if !text.is_empty() {
                    self.interim = Some((text.to_owned(), t.start, t.start + t.duration));
                }
                None
            }
            SttEvent::Transcript(t) => {
                let text = t.text.trim();
                if !text.is_empty() {
                    self.interim = None;
                    self.add(text.to_owned(), t.start, t.start + t.duration);
                } else if let Some((words, start, end)) = self.interim.take() {
                    // An empty final after speech: keep what was heard.
                    self.add(words, start, end);
                }
                if t.speech_final {
                    self.take(UtteranceBoundary::SpeechFinal)
                } else if t.from_finalize {
                    self.take(UtteranceBoundary::Finalize)
                } else {
                    None
                }
            }
            SttEvent::UtteranceEnd { .. } => {
                if self.segments.is_empty()
                    && let Some((words, start, end)) = self.interim.take()
                {
                    self.add(words, start, end);
                }
                self.take(UtteranceBoundary::UtteranceEnd)
            }
            SttEvent::Closed(_) => self.take(UtteranceBoundary::StreamClosed),
            // The replayed audio will produce these words again.
            SttEvent::Reconnected { .. } => {
                self.segments.clear();
                self.interim = None;
                None
            }
            _ => None,
        }
    }

    /// Whether final segments are waiting for a boundary.
    pub fn has_pending(&self) -> bool {
        !self.segments.is_empty()
    }

    fn add(&mut self, text: String, start: f64, end: f64) {
        if self.segments.is_empty() {
            self.start = start;
        }
        self.segments.push(text);
        self.end = end;
    }

    fn take(&mut self, boundary: UtteranceBoundary) -> Option<Utterance> {
        if self.segments.is_empty() {
            return None;
        }
        self.interim = None;
        let text = std::mem::take(&mut self.segments).join(" ");
        Some(Utterance {
            text,
            start: self.start,
            end: self.end,
            boundary,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{CloseReason, Transcript};

    fn result(text: &str, start: f64, is_final: bool, speech_final: bool) -> SttEvent {
        SttEvent::Transcript(Transcript {
            text: text.into(),
            is_final,
            speech_final,
            from_finalize: false,
            start,
            duration: 1.0,
            confidence: 0.9,
        })
    }

    fn run(events: &[SttEvent]) -> Vec<Utterance> {
        let mut a = UtteranceAssembler::new();
        events.iter().filter_map(|e| a.push(e)).collect()
    }

    #[test]
    fn finals_concatenate_until_speech_final_and_interims_are_ignored() {
        let out = run(&[
            result("i want", 1.0, false, false),
            result("I want to", 1.0, true, false),
            result("book a", 2.0, false, false),
            result("book a table.", 2.0, true, true),
        ]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].text, "I want to book a table.");
        assert_eq!((out[0].start, out[0].end), (1.0, 3.0));
        assert_eq!(out[0].boundary, UtteranceBoundary::SpeechFinal);
    }

    #[test]
    fn speech_final_then_utterance_end_yields_once() {
        let out = run(&[
            result("Hello.", 0.5, true, true),
            SttEvent::UtteranceEnd { last_word_end: 1.5 },
            SttEvent::UtteranceEnd { last_word_end: 1.5 },
        ]);
        assert_eq!(out.len(), 1);
        assert!(run(&[SttEvent::UtteranceEnd { last_word_end: 1.0 }]).is_empty());
    }

    #[test]
    fn utterance_end_closes_finals_without_speech_final() {
        let out = run(&[
            result("Yes", 0.5, true, false),
            result("", 1.5, true, true),
            result("please.", 2.0, true, false),
            SttEvent::UtteranceEnd { last_word_end: 3.0 },
        ]);
        let texts: Vec<&str> = out.iter().map(|u| u.text.as_str()).collect();
        assert_eq!(texts, ["Yes", "please."]);
        assert_eq!(out[1].boundary, UtteranceBoundary::UtteranceEnd);
    }

    #[test]
    fn an_empty_final_after_interim_words_promotes_the_interim() {
        let out = run(&[
            result("i want", 1.0, false, false),
            result("i want a table", 1.0, false, false),
            result("", 1.0, true, true),
        ]);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].text, "i want a table");
        assert_eq!(out[0].boundary, UtteranceBoundary::SpeechFinal);
        assert_eq!((out[0].start, out[0].end), (1.0, 2.0));
        // Without speech_final the promoted words wait for a boundary.
        let out = run(&[
            result("yes please", 0.0, false, false),
            result("", 0.0, true, false),
        ]);
        assert!(out.is_empty(), "{out:?}");
        let out = run(&[
            result("yes please", 0.0, false, false),
            result("", 0.0, true, false),
            SttEvent::UtteranceEnd { last_word_end: 1.0 },
        ]);
        assert_eq!(out[0].text, "yes please");
        // An empty final with no interim words before it is still nothing.
        assert!(run(&[result("", 0.0, true, true)]).is_empty());
    }

    #[test]
    fn utterance_end_with_only_interim_words_yields_them_once() {
        let out = run(&[
            result("the name", 0.5, false, false),
            result("the name is Alex", 0.5, false, false),
            SttEvent::UtteranceEnd { last_word_end: 1.5 },
            SttEvent::UtteranceEnd { last_word_end: 1.5 },
        ]);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].text, "the name is Alex");
        assert_eq!(out[0].boundary, UtteranceBoundary::UtteranceEnd);
        // Interims from an utterance already delivered are not replayed.
        let out = run(&[
            result("hello", 0.0, false, false),
            result("Hello.", 0.0, true, true),
            SttEvent::UtteranceEnd { last_word_end: 1.0 },
        ]);
        assert_eq!(out.len(), 1, "{out:?}");
    }

    #[test]
    fn an_interim_with_words_then_a_non_empty_final_uses_the_final() {
        let out = run(&[
            result("i wanna", 1.0, false, false),
            result("I want to book.", 1.0, true, true),
            SttEvent::UtteranceEnd { last_word_end: 2.0 },
        ]);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].text, "I want to book.");
        // A later empty final does not resurrect the superseded interim.
        let out = run(&[
            result("i wanna", 1.0, false, false),
            result("I want", 1.0, true, false),
            result("", 2.0, true, true),
        ]);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].text, "I want");
    }

    #[test]
    fn interims_then_silence_without_a_boundary_yield_nothing_until_one() {
        let mut a = UtteranceAssembler::new();
        for e in [
            result("so", 0.0, false, false),
            result("so maybe", 0.0, false, false),
            SttEvent::SpeechStarted { at: 0.0 },
        ] {
            assert_eq!(a.push(&e), None);
        }
        assert!(!a.has_pending());
        let u = a.push(&SttEvent::UtteranceEnd { last_word_end: 1.0 });
        assert_eq!(u.map(|u| u.text), Some("so maybe".to_owned()));
    }

    #[test]
    fn finalize_and_close_flush_pending_segments() {
        let mut flushed = result("Stop", 0.0, true, false);
        if let SttEvent::Transcript(t) = &mut flushed {
            t.from_finalize = true;
        }
        let out = run(&[flushed]);
        assert_eq!(out[0].boundary, UtteranceBoundary::Finalize);

        let out = run(&[
            result("Bye", 0.0, true, false),
            SttEvent::Closed(CloseReason::from_frame(1000, "")),
        ]);
        assert_eq!(out[0].text, "Bye");
        assert_eq!(out[0].boundary, UtteranceBoundary::StreamClosed);
    }
}
