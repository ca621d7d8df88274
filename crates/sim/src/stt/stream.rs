//! The sans-IO core of one simulated Deepgram stream.
//!
//! Feed it audio bytes ([`StreamCore::push_audio`]) and control messages
//! ([`StreamCore::handle_text`]); take what it wants to send from
//! [`StreamCore::poll_output`]. It has no socket, no task and no clock: all
//! timing is *audio time* (samples received), so the same audio gives the
//! same messages however fast or chunked it arrived. Wall-clock concerns
//! (result latency, idle timeout, faults) live in the socket task.
//!
//! Speech is found by the simulator's own [`SpeechDetector`] (earshot's
//! neural model), deliberately not callgate's `media::vad::EnergyVad`, so
//! the simulated provider and the server's watchdog can disagree the way a
//! real provider and the server would. Interims, utterance-end checks and
//! audio-time faults run on 10 ms windows of input.
//!
//! Not every speech segment is words. A segment whose voiced part (the
//! detector's start to its end) is shorter than [`MIN_WORDS_MS`] — a
//! cough, a door, a click on the line — is *noise*, as Deepgram hears it:
//! `SpeechStarted` still comes (Deepgram's VAD fires on noise too), but no
//! interim, and at its end one final with an empty transcript
//! (`is_final: true`, `speech_final` as for words, no words). A noise
//! segment consumes no script line, so the next real utterance still gets
//! the next line, and it leaves a pending `UtteranceEnd` of the words
//! before it alone. A `Finalize` during noise answers with an empty
//! `from_finalize` final; what follows in the same segment is heard afresh
//! (from the `Finalize` on), so speech right after a cough still gets its
//! line. [`StreamCore::noise_segments`] counts them.

use std::collections::VecDeque;
use std::time::SystemTime;

use media::g711;
use sha2::{Digest, Sha256};

use super::detector::{SpeechDetector, SpeechEvent};

use super::messages::{
    self, Alternative, Channel, MODEL_UUID, MetadataMessage, ResultMetadata, ResultsMessage,
    ServerMessage, secs,
};
use super::params::{SimEncoding, StreamParams};

/// Audio between two interim results of one utterance.
pub const INTERIM_EVERY_MS: u64 = 400;
/// Shortest voiced segment transcribed as words; a shorter one is noise
/// (an empty final, no script line). 250 ms is below the shortest word the
/// scripts' callers say (a "yes" is about 300 ms of voice) and above a
/// cough, a click or a door (50–200 ms of sound).
///
/// It is compared with the *detected* segment, which runs past the sound:
/// earshot stamps `SpeechSynth` bursts about 15–95 ms longer than they are
/// (`stream/noise_tests.rs` prints the table). So a burst of up to 200 ms is
/// noise at 8 kHz and up to 150 ms at 16 kHz; from 250 ms it is words at
/// both rates; under about 80 ms the detector may not fire at all.
pub const MIN_WORDS_MS: u64 = 250;
/// How fast interim transcripts grow: about a conversational speaking rate.
const INTERIM_WORDS_PER_SECOND: u64 = 3;
/// Shortest endpointing the detector honours: shorter silences occur
/// inside words.
const MIN_ENDPOINTING_MS: u32 = 100;
/// Segmentation silence when the client disabled endpointing: finals are
/// still cut at pauses, just never marked `speech_final`.
const SEGMENT_SILENCE_MS: u32 = 300;
/// The window on which interims, utterance ends and audio-time faults are
/// checked, and in whose whole units [`StreamCore::audio_ms`] counts.
const WINDOW_MS: u64 = 10;

/// Close code sent after `CloseStream` or a zero-length frame.
pub const CLOSE_NORMAL: u16 = 1000;
/// Close code for a protocol violation (non-JSON text).
pub const CLOSE_POLICY: u16 = 1008;
/// Close code for a server-side failure (`NET-0000`, injected errors).
pub const CLOSE_INTERNAL: u16 = 1011;

/// Deepgram's bad days, in audio time, fixed when the stream opens (see the
/// matching `SttSimConfig` fields). All off by default.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StreamFaults {
    /// Fraction (0.0–1.0) of utterances whose final comes back with an
    /// empty transcript after interims with words. Which utterances is
    /// decided by `seed` and the utterance index, so a run is reproducible.
    pub empty_finals: f64,
    /// Seed of the `empty_finals` choice (the socket mixes in the session).
    pub seed: u64,
    /// Never set `speech_final`; only `UtteranceEnd` ends an utterance.
    pub no_speech_final: bool,
    /// After this much audio, send an `Error` message and close 1011.
    pub error_after_ms: Option<u64>,
    /// After this much audio, close 1011 `NET-0000` with no `Error` first.
    pub drop_after_ms: Option<u64>,
    /// Once an utterance has been heard for this long, close 1011
    /// `NET-0000` with no `Error` first: a drop mid-utterance.
    pub drop_in_speech_ms: Option<u64>,
    /// Hold every result (and `UtteranceEnd`) from `stall_from_ms` for this
    /// much audio, then release them in order.
    pub stall_ms: Option<u64>,
    /// Audio time at which the `stall_ms` hold begins.
    pub stall_from_ms: u64,
}

impl StreamFaults {
    /// Whether utterance `index`'s final is sent empty.
    pub fn empties(&self, index: usize) -> bool {
        if self.empty_finals <= 0.0 {
            return false;
        }
        if self.empty_finals >= 1.0 {
            return true;
        }
        let mut h = Sha256::new();
        h.update(self.seed.to_le_bytes());
        h.update((index as u64).to_le_bytes());
        let d = h.finalize();
        let mut b = [0u8; 8];
        b.copy_from_slice(&d[..8]);
        // 53 bits: an exact f64 in [0, 1).
        let x = (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64;
        x < self.empty_finals
    }
}

/// Something the core wants sent, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Outbound {
    /// A JSON text message.
    Message(ServerMessage),
    /// Close the socket with this code and reason; nothing follows.
    Close { code: u16, reason: &'static str },
}

/// What a text frame turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    KeepAlive,
    Finalize,
    CloseStream,
    /// Valid JSON with a missing or unknown `type`: answered with an error
    /// message, stream continues.
    Unknown,
    /// Not JSON: answered with an error message and a 1008 close.
    Invalid,
}

/// The utterance the VAD is currently inside.
#[derive(Debug, Clone, Copy)]
struct Speech {
    /// Where the segment's audio not yet answered for begins: the
    /// detector's start, or the `Finalize` that answered for noise before.
    start_ms: u64,
    next_interim_ms: u64,
    /// A `Finalize` already emitted this utterance's final; the rest of the
    /// VAD segment is not transcribed again (that would skip a script line).
    finalized: bool,
}

/// One stream's state.
#[derive(Debug)]
pub struct StreamCore {
    params: StreamParams,
    script: Vec<String>,
    request_id: String,
    created: SystemTime,
    detector: SpeechDetector,
    /// Samples per 10 ms window; checks run at window boundaries.
    window: usize,
    /// Whole windows received.
    windows: u64,
    /// Samples pushed into the current, incomplete window.
    partial: usize,
    /// Odd trailing byte of a linear16 frame, kept for the next frame.
    carry: Option<u8>,
    hasher: Sha256,
    bytes: u64,
    line_index: usize,
    /// Segments heard as noise (shorter than [`MIN_WORDS_MS`]) so far.
    noise_segments: usize,
    speech: Option<Speech>,
    /// Audio time of the last word, while an `UtteranceEnd` may be due.
    last_word_end_ms: Option<u64>,
    closed: bool,
    out: VecDeque<Outbound>,
    faults: StreamFaults,
    /// Messages held by the `stall_ms` fault, released when it ends.
    held: VecDeque<Outbound>,
    /// The `error_after_ms` fault has fired.
    errored: bool,
    /// An injected fault ended the stream (`fail`, `drop_after_ms`).
    faulted: bool,
}

impl StreamCore {
    /// A stream with validated `params`, transcribing `script` lines in order.
    pub fn new(
        params: StreamParams,
        script: Vec<String>,
        request_id: String,
        created: SystemTime,
    ) -> Self {
        let silence = params
            .endpointing_ms
            .map_or(SEGMENT_SILENCE_MS, |ms| ms.max(MIN_ENDPOINTING_MS));
        let window = (params.sample_rate / 100).max(1) as usize;
        StreamCore {
            detector: SpeechDetector::new(params.sample_rate, silence),
            window,
            windows: 0,
            params,
            script,
            request_id,
            created,
            partial: 0,
            carry: None,
            hasher: Sha256::new(),
            bytes: 0,
            line_index: 0,
            noise_segments: 0,
            speech: None,
            last_word_end_ms: None,
            closed: false,
            out: VecDeque::new(),
            faults: StreamFaults::default(),
            held: VecDeque::new(),
            errored: false,
            faulted: false,
        }
    }

    /// The same stream with `faults` injected.
    #[must_use]
    pub fn with_faults(mut self, faults: StreamFaults) -> Self {
        self.faults = faults;
        self
    }

    /// Injected failure: an `Error` message, then close 1011 `NET-0000`
    /// (what the `error_after_ms` fault does; the socket also calls it).
    pub fn fail(&mut self, description: &str) {
        if self.closed {
            return;
        }
        self.errored = true;
        self.faulted = true;
        self.release_held();
        self.error("INTERNAL_SERVER_ERROR", description);
        self.close(CLOSE_INTERNAL, "NET-0000");
    }

    /// Injected drop (the `drop_after_ms` fault): close 1011 `NET-0000`
    /// with no `Error` message, as Deepgram's routine close; the utterance
    /// in progress gets no final.
    pub fn drop_stream(&mut self) {
        if self.closed {
            return;
        }
        self.faulted = true;
        self.close(CLOSE_INTERNAL, "NET-0000");
    }

    /// Whether an injected fault ended the stream (its close is the fault's).
    pub fn faulted(&self) -> bool {
        self.faulted
    }

    /// Whether the `stall_ms` fault is holding results at audio time `now`.
    fn stalled(&self, now: u64) -> bool {
        self.faults.stall_ms.is_some_and(|len| {
            now >= self.faults.stall_from_ms && now < self.faults.stall_from_ms + len
        })
    }

    fn release_held(&mut self) {
        while let Some(o) = self.held.pop_front() {
            self.out.push_back(o);
        }
    }

    /// The validated parameters of this stream.
    pub fn params(&self) -> &StreamParams {
        &self.params
    }

    /// The id reported in every result and the summary.
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// Whether the stream has emitted its close; later input is ignored.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Milliseconds of audio received (whole 10 ms windows).
    pub fn audio_ms(&self) -> u64 {
        self.windows * WINDOW_MS
    }

    /// Utterances finalized so far (with words, or emptied by the
    /// `empty_finals` fault): the script lines consumed. Noise is not
    /// counted here but in [`StreamCore::noise_segments`].
    pub fn utterances(&self) -> usize {
        self.line_index
    }

    /// Speech segments heard as noise so far (voiced for less than
    /// [`MIN_WORDS_MS`]): each was answered with an empty final and
    /// consumed no script line.
    pub fn noise_segments(&self) -> usize {
        self.noise_segments
    }

    /// The next message to send, in order.
    pub fn poll_output(&mut self) -> Option<Outbound> {
        self.out.pop_front()
    }

    /// Feeds one binary frame. A zero-length frame is a close request, as on
    /// Deepgram: pending speech is finalized, the summary sent, then 1000.
    pub fn push_audio(&mut self, bytes: &[u8]) {
        if self.closed {
            return;
        }
        if bytes.is_empty() {
            self.finish();
            return;
        }
        self.hasher.update(bytes);
        self.bytes += bytes.len() as u64;
        let samples = self.decode(bytes);
        self.feed(&samples);
    }

    /// Handles one text frame.
    pub fn handle_text(&mut self, text: &str) -> Control {
        if self.closed {
            return Control::Unknown;
        }
        let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
            self.error("INVALID_JSON", "control messages must be JSON text");
            // Deepgram closes on undecodable data; clients key on the reason.
            self.close(CLOSE_POLICY, "DATA-0000");
            return Control::Invalid;
        };
        match value.get("type").and_then(serde_json::Value::as_str) {
            Some("KeepAlive") => Control::KeepAlive,
            Some("Finalize") => {
                self.finalize_now();
                Control::Finalize
            }
            Some("CloseStream") => {
                self.finish();
                Control::CloseStream
            }
            other => {
                let what = other.map_or_else(
                    || "a message without `type`".to_owned(),
                    |t| format!("type {t:?}"),
                );
                self.error(
                    "UNKNOWN_MESSAGE",
                    &format!("unsupported control message: {what}"),
                );
                Control::Unknown
            }
        }
    }

    fn decode(&mut self, bytes: &[u8]) -> Vec<i16> {
        match self.params.encoding {
            SimEncoding::Mulaw => g711::decode_ulaw(bytes),
            SimEncoding::Alaw => g711::decode_alaw(bytes),
            SimEncoding::Linear16 => {
                let mut buf = Vec::with_capacity(bytes.len() + 1);
                buf.extend(self.carry.take());
                buf.extend_from_slice(bytes);
                if buf.len() % 2 == 1 {
                    self.carry = buf.pop();
                }
                media::format::pcm16le_to_samples(&buf)
            }
        }
    }

    /// Pushes samples window by window so interim and utterance-end checks
    /// happen at exact audio times whatever the frame size.
    fn feed(&mut self, mut samples: &[i16]) {
        while !samples.is_empty() && !self.closed {
            let take = (self.window - self.partial).min(samples.len());
            let (now, rest) = samples.split_at(take);
            samples = rest;
            for event in self.detector.push(now) {
                self.on_speech(event);
            }
            self.partial = (self.partial + take) % self.window;
            if self.partial == 0 {
                self.windows += 1;
                self.on_window();
            }
        }
    }

    fn on_speech(&mut self, event: SpeechEvent) {
        if self.closed {
            return;
        }
        match event {
            SpeechEvent::Start { at_ms } => {
                // A pending `UtteranceEnd` is kept: it is checked only
                // outside speech, and a segment with words moves it on
                // (the utterance goes on), while noise leaves it due.
                self.speech = Some(Speech {
                    start_ms: at_ms,
                    next_interim_ms: at_ms + INTERIM_EVERY_MS,
                    finalized: false,
                });
                if self.params.vad_events {
                    self.send(ServerMessage::SpeechStarted {
                        channel: [0],
                        timestamp: secs(at_ms),
                    });
                }
            }
            SpeechEvent::End { at_ms } => {
                if let Some(s) = self.speech.take().filter(|s| !s.finalized) {
                    let speech_final = self.params.endpointing_ms.is_some();
                    let voiced = at_ms.saturating_sub(s.start_ms);
                    self.end_segment(s.start_ms, at_ms, voiced, speech_final);
                }
            }
        }
    }

    fn on_window(&mut self) {
        let now = self.audio_ms();
        if !self.errored
            && let Some(at) = self.faults.error_after_ms
            && now >= at
        {
            self.fail("injected fault: internal error mid-stream");
            return;
        }
        let in_speech = self.speech.as_ref().map(|s| s.start_ms);
        let mid_utterance = self
            .faults
            .drop_in_speech_ms
            .zip(in_speech)
            .is_some_and(|(after, start)| now >= start + after);
        if mid_utterance || self.faults.drop_after_ms.is_some_and(|at| now >= at) {
            self.drop_stream();
            return;
        }
        if !self.held.is_empty() && !self.stalled(now) {
            self.release_held();
        }
        // Words only once the segment has been voiced long enough not to
        // be noise: without this a 150 ms cough still awaiting its
        // endpoint would get an interim at 400 ms.
        let voiced = self.speech.map_or(0, |s| self.voiced_ms(&s));
        if let Some(s) = self.speech.as_mut().filter(|s| !s.finalized)
            && self.params.interim_results
            && now >= s.next_interim_ms
            && voiced >= MIN_WORDS_MS
        {
            s.next_interim_ms = now + INTERIM_EVERY_MS;
            let start = s.start_ms;
            self.emit_interim(start, now);
        }
        if let (Some(gap), Some(last)) = (self.params.utterance_end_ms, self.last_word_end_ms)
            && self.speech.is_none()
            && now >= last + u64::from(gap)
        {
            self.last_word_end_ms = None;
            self.send(ServerMessage::UtteranceEnd {
                channel: [0, 1],
                last_word_end: secs(last),
            });
        }
    }

    /// `Finalize`: flush the utterance in progress, if any. Noise is
    /// answered with an empty final and the segment heard afresh from
    /// here; words end the segment's transcription.
    fn finalize_now(&mut self) {
        let now = self.audio_ms();
        let Some(s) = self.speech.filter(|s| !s.finalized) else {
            return;
        };
        let voiced = self.voiced_ms(&s);
        if voiced == 0 {
            // Nothing voiced since the last `Finalize` answered for noise.
            return;
        }
        if voiced < MIN_WORDS_MS {
            self.emit_noise_final(s.start_ms, now, false, true);
            self.speech = Some(Speech {
                start_ms: now,
                next_interim_ms: now + INTERIM_EVERY_MS,
                finalized: false,
            });
        } else {
            self.speech = Some(Speech {
                finalized: true,
                ..s
            });
            self.emit_final(s.start_ms, now, false, true);
        }
    }

    /// `CloseStream` or a zero-length frame.
    fn finish(&mut self) {
        let now = self.audio_ms();
        if let Some(s) = self.speech.filter(|s| !s.finalized) {
            // The audio has ended, so this utterance has too.
            let voiced = self.voiced_ms(&s);
            self.speech = None;
            self.end_segment(s.start_ms, now, voiced, true);
        }
        // The audio is over, so is any stall: held results precede the summary.
        self.release_held();
        let summary = self.summary();
        self.send(ServerMessage::Metadata(summary));
        self.close(CLOSE_NORMAL, "");
    }

    /// How long the open segment `s` has been voiced since its
    /// `start_ms`, as the detector would stamp it if it ended now.
    fn voiced_ms(&self, s: &Speech) -> u64 {
        self.detector
            .speech_end_ms()
            .map_or(0, |end| end.saturating_sub(s.start_ms))
    }

    /// Ends a segment with its final over `start_ms..end_ms`: words (the
    /// next script line) when it was voiced for at least [`MIN_WORDS_MS`],
    /// else an empty noise final; nothing when no voiced audio is left
    /// unanswered (a `Finalize` already answered for it).
    fn end_segment(&mut self, start_ms: u64, end_ms: u64, voiced_ms: u64, speech_final: bool) {
        if voiced_ms == 0 {
            return;
        }
        if voiced_ms < MIN_WORDS_MS {
            self.emit_noise_final(start_ms, end_ms, speech_final, false);
        } else {
            self.emit_final(start_ms, end_ms, speech_final, false);
        }
    }

    /// A final with no words for a noise segment; no script line is used,
    /// no `UtteranceEnd` is scheduled (there is no last word), and the
    /// `empty_finals` fault does not apply (it is about utterances).
    fn emit_noise_final(
        &mut self,
        start_ms: u64,
        end_ms: u64,
        speech_final: bool,
        from_finalize: bool,
    ) {
        let speech_final = speech_final && !self.faults.no_speech_final;
        let results = self.results(&[], start_ms, end_ms, true, speech_final, from_finalize);
        self.send(ServerMessage::Results(results));
        self.noise_segments += 1;
    }

    fn emit_interim(&mut self, start_ms: u64, now_ms: u64) {
        let line = crate::script::line(&self.script, self.line_index);
        let tokens: Vec<&str> = line.split_whitespace().collect();
        // A growing prefix: at least one word, never more than the line.
        let heard = ((now_ms - start_ms) * INTERIM_WORDS_PER_SECOND).div_ceil(1000) as usize;
        let prefix = &tokens[..heard.max(1).min(tokens.len())];
        let results = self.results(prefix, start_ms, now_ms, false, false, false);
        self.send(ServerMessage::Results(results));
    }

    fn emit_final(&mut self, start_ms: u64, end_ms: u64, speech_final: bool, from_finalize: bool) {
        let line = crate::script::line(&self.script, self.line_index).to_owned();
        let mut tokens: Vec<&str> = line.split_whitespace().collect();
        if self.faults.empties(self.line_index) {
            // The words were heard (the last interim has them all), then
            // the final came back empty.
            if self.params.interim_results {
                let heard = self.results(&tokens, start_ms, end_ms, false, false, false);
                self.send(ServerMessage::Results(heard));
            }
            tokens.clear();
        }
        let speech_final = speech_final && !self.faults.no_speech_final;
        let results = self.results(&tokens, start_ms, end_ms, true, speech_final, from_finalize);
        self.send(ServerMessage::Results(results));
        self.line_index += 1;
        if self.params.utterance_end_ms.is_some() {
            self.last_word_end_ms = Some(end_ms);
        }
    }

    fn results(
        &self,
        tokens: &[&str],
        start_ms: u64,
        end_ms: u64,
        is_final: bool,
        speech_final: bool,
        from_finalize: bool,
    ) -> ResultsMessage {
        let words = messages::spread_words(tokens, start_ms, end_ms);
        ResultsMessage {
            channel_index: [0, 1],
            duration: secs(end_ms.saturating_sub(start_ms)),
            start: secs(start_ms),
            is_final,
            speech_final,
            from_finalize,
            channel: Channel {
                alternatives: vec![Alternative {
                    transcript: tokens.join(" "),
                    confidence: messages::mean_confidence(&words),
                    words,
                }],
            },
            metadata: ResultMetadata {
                request_id: self.request_id.clone(),
                model_info: messages::model_info(&self.params.model),
                model_uuid: MODEL_UUID.to_owned(),
            },
        }
    }

    fn summary(&self) -> MetadataMessage {
        let samples = self.bytes / self.params.encoding.bytes_per_sample();
        let digest = self.hasher.clone().finalize();
        MetadataMessage {
            transaction_key: "deprecated".to_owned(),
            request_id: self.request_id.clone(),
            sha256: digest.iter().map(|b| format!("{b:02x}")).collect(),
            created: messages::rfc3339_utc(self.created),
            duration: samples as f64 / f64::from(self.params.sample_rate),
            channels: 1,
            models: vec![MODEL_UUID.to_owned()],
            model_info: [(
                MODEL_UUID.to_owned(),
                messages::model_info(&self.params.model),
            )]
            .into(),
        }
    }

    fn error(&mut self, variant: &str, description: &str) {
        self.send(ServerMessage::Error {
            description: description.to_owned(),
            message: description.to_owned(),
            variant: variant.to_owned(),
        });
    }

    fn send(&mut self, message: ServerMessage) {
        let held = matches!(
            message,
            ServerMessage::Results(_) | ServerMessage::UtteranceEnd { .. }
        ) && self.stalled(self.audio_ms());
        if held {
            self.held.push_back(Outbound::Message(message));
        } else {
            self.out.push_back(Outbound::Message(message));
        }
    }

    fn close(&mut self, code: u16, reason: &'static str) {
        // Whatever a stall held goes out before the close.
        self.release_held();
        self.closed = true;
        self.speech = None;
        self.out.push_back(Outbound::Close { code, reason });
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod noise_tests;
