//! Unit tests of the sans-IO stream core: audio in, messages out, no sockets.

use std::time::{Duration, UNIX_EPOCH};

use media::g711;
use media::synth::SpeechSynth;
use sha2::{Digest, Sha256};

use super::*;
use crate::stt::messages::ServerMessage;

pub(super) fn script() -> Vec<String> {
    vec![
        "Hi, I'd like to book a table for four people.".into(),
        "The name is Alex Morgan.".into(),
    ]
}

pub(super) fn params() -> StreamParams {
    StreamParams {
        interim_results: true,
        endpointing_ms: Some(300),
        utterance_end_ms: Some(1000),
        vad_events: true,
        ..StreamParams::default()
    }
}

pub(super) fn core(p: StreamParams) -> StreamCore {
    StreamCore::new(
        p,
        script(),
        "req-1".into(),
        UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    )
}

/// Two utterances separated by silence, as linear samples at 8 kHz.
fn two_utterances() -> Vec<i16> {
    let mut s = SpeechSynth::new(8_000, 42);
    let mut audio = s.silence(500);
    audio.extend(s.utterance(1_500));
    audio.extend(s.silence(1_500));
    audio.extend(s.utterance(1_000));
    audio.extend(s.silence(1_500));
    audio
}

pub(super) fn drain(c: &mut StreamCore) -> Vec<Outbound> {
    std::iter::from_fn(|| c.poll_output()).collect()
}

pub(super) fn push_frames(c: &mut StreamCore, bytes: &[u8], frame: usize) -> Vec<Outbound> {
    let mut out = Vec::new();
    for f in bytes.chunks(frame) {
        c.push_audio(f);
        out.extend(drain(c));
    }
    out
}

pub(super) fn results(out: &[Outbound]) -> Vec<&ResultsMessage> {
    out.iter()
        .filter_map(|o| match o {
            Outbound::Message(ServerMessage::Results(r)) => Some(r),
            _ => None,
        })
        .collect()
}

pub(super) fn finals(out: &[Outbound]) -> Vec<&ResultsMessage> {
    results(out).into_iter().filter(|r| r.is_final).collect()
}

pub(super) fn count(out: &[Outbound], pred: impl Fn(&ServerMessage) -> bool) -> usize {
    out.iter()
        .filter(|o| matches!(o, Outbound::Message(m) if pred(m)))
        .count()
}

#[test]
fn two_utterances_give_vad_events_interims_finals_and_utterance_ends() {
    let mut c = core(params());
    let out = push_frames(&mut c, &g711::encode_ulaw(&two_utterances()), 160);

    let kinds: Vec<&str> = out
        .iter()
        .map(|o| match o {
            Outbound::Message(ServerMessage::SpeechStarted { .. }) => "start",
            Outbound::Message(ServerMessage::Results(r)) if r.is_final => "final",
            Outbound::Message(ServerMessage::Results(_)) => "interim",
            Outbound::Message(ServerMessage::UtteranceEnd { .. }) => "end",
            other => panic!("unexpected {other:?}"),
        })
        .filter(|k| *k != "interim")
        .collect();
    assert_eq!(kinds, ["start", "final", "end", "start", "final", "end"]);

    let f = finals(&out);
    assert_eq!(f[0].transcript(), script()[0]);
    assert_eq!(f[1].transcript(), script()[1]);
    assert!(f.iter().all(|r| r.speech_final && !r.from_finalize));
    // Boundaries are in audio time, near where the synth put the speech.
    assert!((0.45..0.6).contains(&f[0].start), "start {}", f[0].start);
    assert!(
        (1.4..1.6).contains(&f[0].duration),
        "duration {}",
        f[0].duration
    );
    let words = &f[0].channel.alternatives[0].words;
    assert_eq!(words.len(), 10);
    assert_eq!(words[0].start, f[0].start);

    let ends: Vec<f64> = out
        .iter()
        .filter_map(|o| match o {
            Outbound::Message(ServerMessage::UtteranceEnd { last_word_end, .. }) => {
                Some(*last_word_end)
            }
            _ => None,
        })
        .collect();
    assert_eq!(ends[0], words[9].end);
    assert_eq!(c.utterances(), 2);
}

#[test]
fn interims_grow_and_only_during_speech() {
    let mut c = core(params());
    let out = push_frames(&mut c, &g711::encode_ulaw(&two_utterances()), 160);
    let first_line: Vec<&ResultsMessage> = results(&out)
        .into_iter()
        .take_while(|r| !r.is_final)
        .collect();
    assert!(first_line.len() >= 3, "{} interims", first_line.len());
    let lens: Vec<usize> = first_line.iter().map(|r| r.transcript().len()).collect();
    assert!(lens.windows(2).all(|w| w[0] <= w[1]), "{lens:?}");
    assert!(script()[0].starts_with(first_line[0].transcript()));
    assert!(
        first_line
            .iter()
            .all(|r| !r.speech_final && r.start == first_line[0].start)
    );

    let mut quiet = core(StreamParams {
        interim_results: false,
        utterance_end_ms: None,
        ..params()
    });
    let out = push_frames(&mut quiet, &g711::encode_ulaw(&two_utterances()), 160);
    assert_eq!(results(&out).len(), 2, "finals only");
    assert_eq!(
        count(&out, |m| matches!(m, ServerMessage::UtteranceEnd { .. })),
        0
    );
}

#[test]
fn the_same_audio_in_other_chunks_gives_the_same_messages() {
    let bytes = g711::encode_alaw(&two_utterances());
    let p = StreamParams {
        encoding: SimEncoding::Alaw,
        ..params()
    };
    let a = push_frames(&mut core(p.clone()), &bytes, 160);
    let b = push_frames(&mut core(p), &bytes, 777);
    assert_eq!(a, b);
}

#[test]
fn linear16_keeps_an_odd_byte_for_the_next_frame() {
    let audio = two_utterances();
    let bytes = media::format::samples_to_pcm16le(&audio);
    let p = StreamParams {
        encoding: SimEncoding::Linear16,
        ..params()
    };
    let mut whole = core(p.clone());
    let a = push_frames(&mut whole, &bytes, 320);
    let mut odd = core(p);
    let b = push_frames(&mut odd, &bytes, 321);
    assert_eq!(a, b);
    assert_eq!(whole.audio_ms(), odd.audio_ms());
    assert_eq!(finals(&b).len(), 2);
}

#[test]
fn linear16_at_16khz_finds_the_same_utterances_as_mulaw_at_8khz() {
    let mut s = SpeechSynth::new(16_000, 42);
    let mut audio = s.silence(500);
    audio.extend(s.utterance(1_500));
    audio.extend(s.silence(1_500));
    audio.extend(s.utterance(1_000));
    audio.extend(s.silence(1_500));
    let bytes = media::format::samples_to_pcm16le(&audio);
    let p = StreamParams {
        encoding: SimEncoding::Linear16,
        sample_rate: 16_000,
        ..params()
    };
    let mut wide = core(p);
    // 20 ms frames at 16 kHz are 640 bytes.
    let out = push_frames(&mut wide, &bytes, 640);
    let mut narrow = core(params());
    let reference = push_frames(&mut narrow, &g711::encode_ulaw(&two_utterances()), 160);

    assert_eq!(wide.audio_ms(), 6_000);
    assert_eq!(wide.audio_ms(), narrow.audio_ms());
    let (f, r) = (finals(&out), finals(&reference));
    assert_eq!(f.len(), 2);
    for (i, (a, b)) in f.iter().zip(&r).enumerate() {
        assert_eq!(a.transcript(), script()[i]);
        assert!(a.speech_final);
        assert!(
            (a.start - b.start).abs() <= 0.03,
            "{} vs {}",
            a.start,
            b.start
        );
        assert!((a.duration - b.duration).abs() <= 0.05);
    }
    assert_eq!(
        count(&out, |m| matches!(m, ServerMessage::SpeechStarted { .. })),
        2
    );
    assert_eq!(
        count(&out, |m| matches!(m, ServerMessage::UtteranceEnd { .. })),
        2
    );
    wide.push_audio(&[]);
    let closing = drain(&mut wide);
    let Some(Outbound::Message(ServerMessage::Metadata(summary))) = closing.first() else {
        panic!("{closing:?}")
    };
    assert_eq!(summary.duration, 6.0);
}

#[test]
fn finalize_flushes_the_utterance_once_and_keeps_the_stream_open() {
    let mut s = SpeechSynth::new(8_000, 9);
    let mut c = core(params());
    let mut out = push_frames(&mut c, &g711::encode_ulaw(&s.utterance(800)), 160);
    assert_eq!(c.handle_text(r#"{"type":"Finalize"}"#), Control::Finalize);
    out.extend(drain(&mut c));
    let f = finals(&out);
    assert_eq!(f.len(), 1);
    assert!(f[0].from_finalize && !f[0].speech_final);
    assert_eq!(f[0].transcript(), script()[0]);

    // The rest of that speech segment is not transcribed again; the next
    // utterance gets the next line.
    let mut rest = s.utterance(300);
    rest.extend(s.silence(600));
    rest.extend(s.utterance(700));
    rest.extend(s.silence(600));
    let out = push_frames(&mut c, &g711::encode_ulaw(&rest), 160);
    let f = finals(&out);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].transcript(), script()[1]);
    assert!(!c.is_closed());

    // Finalize outside speech produces nothing.
    c.handle_text(r#"{"type":"Finalize"}"#);
    assert!(drain(&mut c).is_empty());
}

#[test]
fn close_stream_finalizes_then_sends_metadata_then_closes_normally() {
    let mut s = SpeechSynth::new(8_000, 5);
    let mut audio = s.silence(200);
    audio.extend(s.utterance(600));
    let bytes = g711::encode_ulaw(&audio);
    let mut c = core(params());
    push_frames(&mut c, &bytes, 160);
    assert_eq!(
        c.handle_text(r#"{"type":"CloseStream"}"#),
        Control::CloseStream
    );
    let out = drain(&mut c);
    let n = out.len();
    assert!(
        matches!(&out[n - 3], Outbound::Message(ServerMessage::Results(r)) if r.is_final && r.speech_final)
    );
    let Outbound::Message(ServerMessage::Metadata(m)) = &out[n - 2] else {
        panic!("{out:?}")
    };
    assert_eq!(
        out[n - 1],
        Outbound::Close {
            code: CLOSE_NORMAL,
            reason: ""
        }
    );
    assert_eq!(m.transaction_key, "deprecated");
    assert_eq!(m.request_id, "req-1");
    assert_eq!(m.duration, 0.8);
    assert_eq!(m.channels, 1);
    assert_eq!(m.created, "2023-11-14T22:13:20.000Z");
    let want: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(m.sha256, want);

    assert!(c.is_closed());
    c.push_audio(&bytes);
    c.handle_text(r#"{"type":"Finalize"}"#);
    assert!(drain(&mut c).is_empty(), "nothing after the close");
}

#[test]
fn a_zero_length_frame_is_a_close_request() {
    let mut c = core(params());
    c.push_audio(&[0xFF; 1600]);
    c.push_audio(&[]);
    let out = drain(&mut c);
    assert!(matches!(&out[0], Outbound::Message(ServerMessage::Metadata(m)) if m.duration == 0.2));
    assert_eq!(
        out[1],
        Outbound::Close {
            code: CLOSE_NORMAL,
            reason: ""
        }
    );
    assert_eq!(out.len(), 2);
}

#[test]
fn control_messages_keepalive_unknown_and_invalid() {
    let mut c = core(params());
    assert_eq!(c.handle_text(r#"{"type":"KeepAlive"}"#), Control::KeepAlive);
    assert!(drain(&mut c).is_empty(), "KeepAlive has no reply");

    assert_eq!(c.handle_text(r#"{"type":"Dance"}"#), Control::Unknown);
    assert_eq!(c.handle_text(r#"{"no":"type"}"#), Control::Unknown);
    let out = drain(&mut c);
    assert_eq!(out.len(), 2);
    assert!(
        out.iter()
            .all(|o| matches!(o, Outbound::Message(ServerMessage::Error { .. })))
    );
    assert!(!c.is_closed());

    assert_eq!(c.handle_text("KeepAlive please"), Control::Invalid);
    let out = drain(&mut c);
    assert!(matches!(
        out[0],
        Outbound::Message(ServerMessage::Error { .. })
    ));
    assert_eq!(
        out[1],
        Outbound::Close {
            code: CLOSE_POLICY,
            reason: "DATA-0000"
        }
    );
    assert!(c.is_closed());
}

#[test]
fn without_endpointing_finals_are_not_speech_final() {
    let mut c = core(StreamParams {
        endpointing_ms: None,
        ..params()
    });
    let out = push_frames(&mut c, &g711::encode_ulaw(&two_utterances()), 160);
    let f = finals(&out);
    assert_eq!(f.len(), 2);
    assert!(f.iter().all(|r| !r.speech_final));
    assert_eq!(
        count(&out, |m| matches!(m, ServerMessage::UtteranceEnd { .. })),
        2
    );
}

#[test]
fn results_serialize_with_deepgram_keys() {
    let mut c = core(params());
    let out = push_frames(&mut c, &g711::encode_ulaw(&two_utterances()), 160);
    let f = finals(&out)[0].clone();
    let v = serde_json::to_value(ServerMessage::Results(f)).unwrap();
    assert_eq!(v["type"], "Results");
    assert_eq!(v["channel_index"], serde_json::json!([0, 1]));
    assert_eq!(v["is_final"], true);
    assert_eq!(v["from_finalize"], false);
    let word = &v["channel"]["alternatives"][0]["words"][0];
    for key in ["word", "start", "end", "confidence", "punctuated_word"] {
        assert!(word.get(key).is_some(), "word.{key}");
    }
    for key in ["name", "version", "arch"] {
        assert!(
            v["metadata"]["model_info"].get(key).is_some(),
            "model_info.{key}"
        );
    }
    assert_eq!(v["metadata"]["request_id"], "req-1");
    assert!(v["metadata"]["model_uuid"].is_string());
}

fn faulted(faults: StreamFaults) -> StreamCore {
    core(params()).with_faults(faults)
}

#[test]
fn fault_empty_finals_sends_empty_finals_after_worded_interims() {
    let mut c = faulted(StreamFaults {
        empty_finals: 1.0,
        ..StreamFaults::default()
    });
    let out = push_frames(&mut c, &g711::encode_ulaw(&two_utterances()), 160);
    let f = finals(&out);
    assert_eq!(f.len(), 2);
    assert!(
        f.iter().all(|r| r.transcript().is_empty()
            && r.speech_final
            && r.channel.alternatives[0].words.is_empty()),
        "{f:?}"
    );
    assert!(
        results(&out)
            .iter()
            .any(|r| !r.is_final && !r.transcript().is_empty())
    );
    assert_eq!(c.utterances(), 2, "the script still advances");

    // A fraction is reproducible for a seed and picks some, not all.
    let pick = |seed| {
        let f = StreamFaults {
            empty_finals: 0.5,
            seed,
            ..StreamFaults::default()
        };
        (0..64).map(|i| f.empties(i)).collect::<Vec<_>>()
    };
    assert_eq!(pick(7), pick(7));
    let n = pick(7).iter().filter(|e| **e).count();
    assert!((10..54).contains(&n), "{n} of 64");
    assert!(!StreamFaults::default().empties(0));
}

#[test]
fn fault_no_speech_final_leaves_only_utterance_end() {
    let mut c = faulted(StreamFaults {
        no_speech_final: true,
        ..StreamFaults::default()
    });
    let out = push_frames(&mut c, &g711::encode_ulaw(&two_utterances()), 160);
    let f = finals(&out);
    assert_eq!(f.len(), 2);
    assert!(
        f.iter()
            .all(|r| !r.speech_final && !r.transcript().is_empty())
    );
    let ends = count(&out, |m| matches!(m, ServerMessage::UtteranceEnd { .. }));
    assert_eq!(ends, 2);
}

#[test]
fn fault_error_then_close_sends_an_error_then_1011() {
    let mut c = faulted(StreamFaults {
        error_after_ms: Some(1_000),
        ..StreamFaults::default()
    });
    let out = push_frames(&mut c, &g711::encode_ulaw(&two_utterances()), 160);
    let n = out.len();
    assert!(
        matches!(&out[n - 2], Outbound::Message(ServerMessage::Error { variant, .. }) if variant == "INTERNAL_SERVER_ERROR"),
        "{out:?}"
    );
    assert_eq!(
        out[n - 1],
        Outbound::Close {
            code: CLOSE_INTERNAL,
            reason: "NET-0000"
        }
    );
    assert!(c.is_closed());
    assert_eq!(c.audio_ms(), 1_000, "nothing is fed after the close");
    assert!(
        finals(&out).is_empty(),
        "the first utterance never finished"
    );
}

#[test]
fn fault_stall_holds_results_then_releases_them_in_order() {
    let audio = g711::encode_ulaw(&two_utterances());
    let mut plain = core(params());
    let want: Vec<Outbound> = push_frames(&mut plain, &audio, 160)
        .into_iter()
        .filter(|o| !matches!(o, Outbound::Message(ServerMessage::SpeechStarted { .. })))
        .collect();
    let mut c = faulted(StreamFaults {
        stall_ms: Some(2_500),
        ..StreamFaults::default()
    });
    let mut got = Vec::new();
    let mut released_at = None;
    for f in audio.chunks(160) {
        c.push_audio(f);
        for o in drain(&mut c) {
            if matches!(o, Outbound::Message(ServerMessage::Results(_))) && released_at.is_none() {
                released_at = Some(c.audio_ms());
            }
            if !matches!(o, Outbound::Message(ServerMessage::SpeechStarted { .. })) {
                got.push(o);
            }
        }
    }
    assert_eq!(released_at, Some(2_500), "nothing before the stall ends");
    assert_eq!(got, want, "same results, same order, only later");
}

#[test]
fn fault_drop_closes_1011_with_no_error_and_no_final() {
    let mut c = faulted(StreamFaults {
        drop_after_ms: Some(1_200),
        ..StreamFaults::default()
    });
    // The first utterance runs 500–2000 ms: the drop lands inside it.
    let out = push_frames(&mut c, &g711::encode_ulaw(&two_utterances()), 160);
    assert_eq!(
        out.last(),
        Some(&Outbound::Close {
            code: CLOSE_INTERNAL,
            reason: "NET-0000"
        })
    );
    assert_eq!(count(&out, |m| matches!(m, ServerMessage::Error { .. })), 0);
    assert!(finals(&out).is_empty(), "cut mid-utterance: {out:?}");
    assert!(!results(&out).is_empty(), "interims came before the drop");
    assert!(c.is_closed() && c.faulted());
    assert_eq!(c.audio_ms(), 1_200, "nothing is fed after the close");
    assert!(!core(params()).faulted());
}

#[test]
fn fault_drop_mid_utterance_lands_inside_the_first_utterance() {
    let mut c = faulted(StreamFaults {
        drop_in_speech_ms: Some(400),
        ..StreamFaults::default()
    });
    // Speech starts about 500 ms in: the drop comes about 400 ms later,
    // well before the utterance ends at 2000 ms.
    let out = push_frames(&mut c, &g711::encode_ulaw(&two_utterances()), 160);
    assert_eq!(
        out.last(),
        Some(&Outbound::Close {
            code: CLOSE_INTERNAL,
            reason: "NET-0000"
        })
    );
    assert!(finals(&out).is_empty(), "cut mid-utterance: {out:?}");
    assert!(
        (850..=1_000).contains(&c.audio_ms()),
        "onset + 400 ms: {}",
        c.audio_ms()
    );
    assert!(c.faulted());
}
