//! The socket core on a virtual clock: no sockets, no sleeping.

use super::*;
use serde_json::Value;

fn params() -> CoreParams {
    CoreParams {
        format: OutputFormat::Ulaw8000,
        max_contexts: 5,
        first_chunk_latency: Duration::from_millis(150),
        chars_per_second: 15.0,
        realtime_factor: 4.0,
        inactivity_timeout: Duration::from_secs(20),
        stall_audio: false,
        close_after: None,
        finish_flushed_on_close: false,
        ignore_close_socket: false,
        seed: 7,
        max_concurrent_generations: None,
        generation_queue: Duration::from_millis(50),
        quota_chars: None,
        no_final_for_empty_context: false,
        null_alignment: NullAlignment::None,
        context_inactivity: false,
        account: Arc::new(Account::default()),
    }
}

/// One emitted item with the virtual time it came out at.
#[derive(Debug)]
enum Out {
    Json(Instant, Value),
    Close(Instant, u16, String),
}

struct Harness {
    core: SocketCore,
    t0: Instant,
    now: Instant,
}

impl Harness {
    fn new(p: CoreParams) -> Self {
        let t0 = Instant::now();
        Harness {
            core: SocketCore::new(p, t0),
            t0,
            now: t0,
        }
    }

    fn send(&mut self, json: &str) -> Vec<Out> {
        self.core.handle_text(self.now, json);
        self.drain()
    }

    /// Advances the clock to `t0 + ms`, waking the core at every deadline.
    fn run_to(&mut self, ms: u64) -> Vec<Out> {
        let until = self.t0 + Duration::from_millis(ms);
        let mut out = Vec::new();
        while let Some(d) = self.core.next_deadline().filter(|d| *d <= until) {
            self.now = d.max(self.now);
            self.core.handle_timeout(self.now);
            out.extend(self.drain());
        }
        self.now = until.max(self.now);
        out
    }

    fn drain(&mut self) -> Vec<Out> {
        let mut v = Vec::new();
        while let Some(o) = self.core.poll_output() {
            v.push(match o {
                Outbound::Text(t) => Out::Json(self.now, serde_json::from_str(&t).unwrap()),
                Outbound::Close { code, reason } => Out::Close(self.now, code, reason),
            });
        }
        v
    }

    fn ms(&self, t: Instant) -> u64 {
        (t - self.t0).as_millis() as u64
    }
}

fn audio_bytes(out: &[Out], ctx: &str) -> usize {
    out.iter()
        .filter_map(|o| match o {
            Out::Json(_, v) if v["contextId"] == ctx && v["audio"].is_string() => Some(
                base64::engine::general_purpose::STANDARD
                    .decode(v["audio"].as_str().unwrap())
                    .unwrap()
                    .len(),
            ),
            _ => None,
        })
        .sum()
}

fn is_final(o: &Out, ctx: &str) -> bool {
    matches!(o, Out::Json(_, v) if v["isFinal"] == true && v["contextId"] == ctx)
}

fn close_code_of(out: &[Out]) -> Option<u16> {
    out.iter().find_map(|o| match o {
        Out::Close(_, code, _) => Some(*code),
        _ => None,
    })
}

const TEXT: &str = "Thanks for calling, your table for four is booked for seven thirty tonight. ";

#[test]
fn flushed_text_becomes_paced_audio_of_the_right_length_after_the_first_chunk_latency() {
    let mut h = Harness::new(params());
    assert!(
        h.send(r#"{"text":" ","context_id":"a","voice_settings":{"speed":1.0}}"#)
            .is_empty()
    );
    let msg = json!({ "text": TEXT, "context_id": "a", "flush": true }).to_string();
    assert!(
        h.send(&msg).is_empty(),
        "nothing before the first-chunk latency"
    );
    assert!(h.run_to(149).is_empty());
    let out = h.run_to(10_000);
    let Out::Json(first_at, first) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!(h.ms(*first_at), 150);
    assert_eq!(first["isFinal"], Value::Null);
    assert!(first["alignment"]["chars"].is_array());
    // 76 chars at 15 chars/s = 5067 ms of μ-law at 8 kHz, one byte a sample.
    let expected_ms = (TEXT.chars().count() as f64 * 1000.0 / 15.0).round() as usize;
    assert_eq!(audio_bytes(&out, "a"), expected_ms * 8);
    // Generated 4x faster than real time: the last chunk is due ~1.27 s in.
    let Out::Json(last_at, _) = out.last().unwrap() else {
        panic!()
    };
    let wall = h.ms(*last_at);
    assert!((1_300..=1_450).contains(&wall), "last chunk at {wall} ms");
    // Alignment covers the text exactly once, in order.
    let spoken: String = out
        .iter()
        .filter_map(|o| match o {
            Out::Json(_, v) => Some(v["alignment"]["chars"].as_array().unwrap().clone()),
            _ => None,
        })
        .flatten()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(spoken, TEXT);
}

#[test]
fn close_context_mid_generation_stops_at_once_and_sends_final() {
    let mut h = Harness::new(params());
    h.send(&json!({ "text": TEXT, "context_id": "a", "flush": true }).to_string());
    let early = h.run_to(300);
    let before = audio_bytes(&early, "a");
    assert!(before > 0);
    let out = h.send(r#"{"context_id":"a","close_context":true}"#);
    assert_eq!(out.len(), 1);
    assert!(is_final(&out[0], "a"));
    assert_eq!(h.core.open_contexts(), 0);
    assert!(h.run_to(10_000).is_empty(), "no audio after the close");
    assert!(before < TEXT.len() * 8 * 1000 / 15 / 3);
}

#[test]
fn finish_flushed_mode_lets_flushed_audio_finish_before_the_final() {
    let mut h = Harness::new(CoreParams {
        finish_flushed_on_close: true,
        ..params()
    });
    h.send(&json!({ "text": TEXT, "context_id": "a", "flush": true }).to_string());
    h.send(&json!({ "text": "never flushed ", "context_id": "a" }).to_string());
    assert!(
        h.send(r#"{"context_id":"a","close_context":true}"#)
            .is_empty()
    );
    let out = h.run_to(10_000);
    assert!(is_final(out.last().unwrap(), "a"));
    let expected_ms = (TEXT.chars().count() as f64 * 1000.0 / 15.0).round() as usize;
    assert_eq!(
        audio_bytes(&out, "a"),
        expected_ms * 8,
        "the unflushed text is dropped"
    );
}

#[test]
fn final_follows_the_last_chunk_when_closed_after_all_audio() {
    let mut h = Harness::new(params());
    h.send(&json!({ "text": "Hello there. ", "context_id": "a", "flush": true }).to_string());
    let audio = h.run_to(5_000);
    assert!(audio_bytes(&audio, "a") > 0);
    let out = h.send(r#"{"context_id":"a","close_context":true}"#);
    assert!(is_final(&out[0], "a"));
}

#[test]
fn text_is_generated_without_flush_at_a_word_boundary_past_120_chars() {
    let mut h = Harness::new(params());
    let part = "word ".repeat(23); // 115 chars
    h.send(&json!({ "text": part, "context_id": "a" }).to_string());
    assert!(h.run_to(2_000).is_empty(), "115 chars wait for more");
    h.send(&json!({ "text": "longer", "context_id": "a" }).to_string());
    assert!(
        h.run_to(4_000).is_empty(),
        "121 chars without a boundary after 120 wait"
    );
    h.send(&json!({ "text": " tail", "context_id": "a" }).to_string());
    let out = h.run_to(20_000);
    // "word "*23 + "longer " = 122 chars are spoken; "tail" stays buffered.
    assert_eq!(
        audio_bytes(&out, "a"),
        (122.0f64 * 1000.0 / 15.0).round() as usize * 8
    );
}

#[test]
fn sixth_context_is_refused_with_max_active_conversations_and_1008() {
    let mut h = Harness::new(params());
    for i in 0..5 {
        assert!(
            h.send(&json!({ "text": " ", "context_id": format!("c{i}") }).to_string())
                .is_empty()
        );
    }
    let out = h.send(r#"{"text":" ","context_id":"c5"}"#);
    let Out::Json(_, err) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!(err["error"], "max_active_conversations");
    assert!(err["message"].as_str().unwrap().contains("(5)"));
    assert_eq!(close_code_of(&out), Some(1008));
    assert!(h.core.is_closed());
    assert_eq!(h.core.next_deadline(), None);
}

#[test]
fn a_closed_context_frees_its_slot_and_its_id_can_be_reused() {
    let mut h = Harness::new(params());
    for i in 0..5 {
        h.send(&json!({ "text": " ", "context_id": format!("c{i}") }).to_string());
    }
    h.send(r#"{"context_id":"c0","close_context":true}"#);
    assert!(h.send(r#"{"text":" ","context_id":"c5"}"#).is_empty());
    h.send(r#"{"context_id":"c1","close_context":true}"#);
    assert!(h.send(r#"{"text":" ","context_id":"c0"}"#).is_empty());
    assert_eq!(h.core.open_contexts(), 5);
}

#[test]
fn keep_alive_for_an_uninitialised_context_closes_with_1008() {
    let mut h = Harness::new(params());
    assert!(
        h.send(r#"{"text":""}"#).is_empty(),
        "socket keep-alive is fine"
    );
    let out = h.send(r#"{"text":"","context_id":"ghost"}"#);
    let Out::Json(_, err) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!(err["error"], "context_not_initialized");
    assert_eq!(close_code_of(&out), Some(1008));
}

#[test]
fn unbroken_text_is_bounded_and_closes_with_1008() {
    let mut h = Harness::new(params());
    let chunk = "x".repeat(1_000);
    for _ in 0..5 {
        let msg = serde_json::json!({"text": chunk, "context_id": "a"}).to_string();
        assert!(h.send(&msg).is_empty(), "5,000 characters may wait");
    }
    let out = h.send(r#"{"text":"y","context_id":"a"}"#);
    let Out::Json(_, err) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!(err["error"], "max_character_limit_exceeded");
    assert_eq!(close_code_of(&out), Some(1008));
    assert_eq!(h.core.open_contexts(), 0);
}

#[test]
fn invalid_json_closes_with_1008_but_unknown_fields_are_ignored() {
    let mut h = Harness::new(params());
    assert!(
        h.send(r#"{"text":" ","context_id":"a","future_field":{"x":1}}"#)
            .is_empty()
    );
    let out = h.send("{not json");
    assert_eq!(close_code_of(&out), Some(1008));
    let mut h = Harness::new(params());
    h.core.handle_binary(h.now);
    assert_eq!(close_code_of(&h.drain()), Some(1008));
}

#[test]
fn inactivity_closes_exactly_at_the_timeout_and_any_message_resets_it() {
    let mut h = Harness::new(params());
    assert!(h.run_to(15_000).is_empty());
    h.send(r#"{"text":""}"#); // at 15 s
    assert!(h.run_to(34_999).is_empty());
    let out = h.run_to(35_000);
    assert_eq!(close_code_of(&out), Some(1008));
    let Out::Close(at, _, reason) = out.last().unwrap() else {
        panic!()
    };
    assert_eq!(h.ms(*at), 35_000);
    assert_eq!(reason, "input_timeout_exceeded");
}

#[test]
fn close_socket_finalises_every_open_context_then_closes_1000() {
    let mut h = Harness::new(params());
    h.send(r#"{"text":" ","context_id":"a"}"#);
    h.send(&json!({ "text": TEXT, "context_id": "b", "flush": true }).to_string());
    h.run_to(400);
    let out = h.send(r#"{"close_socket":true}"#);
    assert_eq!(out.len(), 3, "{out:?}");
    assert!(is_final(&out[0], "a"));
    assert!(is_final(&out[1], "b"));
    assert_eq!(close_code_of(&out), Some(1000));
}

#[test]
fn stalled_audio_accepts_text_but_never_speaks() {
    let mut h = Harness::new(CoreParams {
        stall_audio: true,
        ..params()
    });
    h.send(&json!({ "text": TEXT, "context_id": "a", "flush": true }).to_string());
    assert!(h.run_to(10_000).is_empty());
    let out = h.send(r#"{"context_id":"a","close_context":true}"#);
    assert!(is_final(&out[0], "a"));
}

#[test]
fn close_after_fault_closes_with_1011() {
    let mut h = Harness::new(CoreParams {
        close_after: Some(Duration::from_millis(500)),
        ..params()
    });
    h.send(&json!({ "text": TEXT, "context_id": "a", "flush": true }).to_string());
    let out = h.run_to(1_000);
    assert_eq!(close_code_of(&out), Some(1011));
    assert!(h.core.faulted());
    assert_eq!(h.core.open_contexts(), 0);
}

#[test]
fn contexts_stream_independently_and_queued_generations_follow_without_new_latency() {
    let mut h = Harness::new(params());
    h.send(
        &json!({ "text": "First sentence here. ", "context_id": "a", "flush": true }).to_string(),
    );
    h.send(&json!({ "text": "Second one. ", "context_id": "a", "flush": true }).to_string());
    h.send(&json!({ "text": "Other context. ", "context_id": "b", "flush": true }).to_string());
    let out = h.run_to(10_000);
    let expect = |n: usize| (n as f64 * 1000.0 / 15.0).round() as usize * 8;
    assert_eq!(audio_bytes(&out, "a"), expect(21) + expect(12));
    assert_eq!(audio_bytes(&out, "b"), expect(15));
    let times: Vec<u64> = out
        .iter()
        .filter_map(|o| match o {
            Out::Json(t, v) if v["contextId"] == "a" => Some(h.ms(*t)),
            _ => None,
        })
        .collect();
    // 2.2 s of audio at 4x is ~550 ms of wall time after the 150 ms latency.
    assert!(*times.last().unwrap() <= 150 + 560, "{times:?}");
}

/// The audio samples of one context, decoded from pcm_16000 messages.
fn pcm_samples(out: &[Out], ctx: &str) -> Vec<i16> {
    out.iter()
        .filter_map(|o| match o {
            Out::Json(_, v) if v["contextId"] == ctx && v["audio"].is_string() => Some(
                base64::engine::general_purpose::STANDARD
                    .decode(v["audio"].as_str().unwrap())
                    .unwrap(),
            ),
            _ => None,
        })
        .flat_map(|bytes| {
            assert_eq!(bytes.len() % 2, 0, "whole 16-bit samples in every chunk");
            media::format::pcm16le_to_samples(&bytes)
        })
        .collect()
}

#[test]
fn pcm_16000_is_two_bytes_a_sample_at_16_khz_and_as_long_as_ulaw_for_the_same_text() {
    let speak = |format: OutputFormat| {
        let mut h = Harness::new(CoreParams { format, ..params() });
        h.send(&json!({ "text": TEXT, "context_id": "ctx-1", "flush": true }).to_string());
        let out = h.run_to(10_000);
        (out, h.core.audio().clone())
    };
    let (pcm, pcm_tally) = speak(OutputFormat::Pcm(16_000));
    let (ulaw, ulaw_tally) = speak(OutputFormat::Ulaw8000);

    let expected_ms = (TEXT.chars().count() as f64 * 1000.0 / 15.0).round() as usize;
    assert_eq!(audio_bytes(&ulaw, "ctx-1"), expected_ms * 8);
    assert_eq!(audio_bytes(&pcm, "ctx-1"), expected_ms * 16 * 2);
    let samples = pcm_samples(&pcm, "ctx-1");
    assert_eq!(samples.len(), expected_ms * 16);
    // Speech, not silence: a voiced signal well above the noise floor.
    let level = media::vad::level_dbfs(&samples);
    assert!(level > -40.0, "pcm_16000 audio at {level} dBFS");

    // The tally says the same, in both formats.
    for (tally, bytes_per_ms) in [(&pcm_tally, 32), (&ulaw_tally, 8)] {
        assert_eq!(tally.total.audio_ms, expected_ms as u64);
        assert_eq!(tally.total.audio_bytes, (expected_ms * bytes_per_ms) as u64);
        assert_eq!(tally.contexts.len(), 1);
        assert_eq!(tally.contexts["ctx-1"], tally.total);
    }
    assert_eq!(pcm_tally.total.chunks, ulaw_tally.total.chunks);
}

#[test]
fn the_audio_tally_counts_what_was_sent_per_context() {
    let mut h = Harness::new(params());
    h.send(
        &json!({ "text": "First sentence here. ", "context_id": "ctx-1", "flush": true })
            .to_string(),
    );
    h.send(&json!({ "text": TEXT, "context_id": "ctx-2", "flush": true }).to_string());
    let mut out = h.run_to(300);
    // Barge-in on ctx-2: nothing more of it is generated, and the tally
    // holds what was actually sent.
    out.extend(h.send(r#"{"context_id":"ctx-2","close_context":true}"#));
    out.extend(h.run_to(10_000));
    let tally = h.core.audio();
    let chunks = |ctx: &str| {
        out.iter()
            .filter(
                |o| matches!(o, Out::Json(_, v) if v["contextId"] == ctx && v["audio"].is_string()),
            )
            .count() as u64
    };
    for ctx in ["ctx-1", "ctx-2"] {
        let c = tally.contexts[ctx];
        assert_eq!(c.audio_bytes, audio_bytes(&out, ctx) as u64, "{ctx}");
        assert_eq!(c.audio_bytes, c.audio_ms * 8, "{ctx}");
        assert_eq!(c.chunks, chunks(ctx), "{ctx}");
    }
    assert_eq!(
        tally.contexts["ctx-1"].audio_ms,
        (21.0f64 * 1000.0 / 15.0).round() as u64
    );
    assert!(tally.contexts["ctx-2"].audio_ms < TEXT.len() as u64 * 1000 / 15 / 3);
    assert_eq!(
        tally.total.audio_ms,
        tally.contexts["ctx-1"].audio_ms + tally.contexts["ctx-2"].audio_ms
    );
}

#[test]
fn the_audio_tally_is_bounded_in_context_ids() {
    let mut h = Harness::new(CoreParams {
        first_chunk_latency: Duration::ZERO,
        ..params()
    });
    let n = MAX_TALLIED_CONTEXTS + 10;
    for i in 0..n {
        let id = format!("c{i}");
        h.send(&json!({ "text": "Hi. ", "context_id": id, "flush": true }).to_string());
        h.run_to(i as u64 * 1_000 + 900);
        h.send(&json!({ "context_id": id, "close_context": true }).to_string());
    }
    let tally = h.core.audio();
    assert_eq!(tally.contexts.len(), MAX_TALLIED_CONTEXTS);
    let per = tally.contexts["c0"].audio_ms;
    assert_eq!(tally.total.audio_ms, per * n as u64);
}

// ---- the provider's bad days (named faults) ------------------------------

fn errors(out: &[Out]) -> Vec<Value> {
    out.iter()
        .filter_map(|o| match o {
            Out::Json(_, v) if v["error"].is_string() => Some(v.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn over_the_generation_cap_a_generation_waits_the_queue_then_gets_a_429_and_1008() {
    let account = Arc::new(Account::default());
    let p = CoreParams {
        max_concurrent_generations: Some(1),
        generation_queue: Duration::from_millis(50),
        account: Arc::clone(&account),
        ..params()
    };
    let mut a = Harness::new(p.clone());
    let mut b = Harness::new(p);
    a.send(&json!({ "text": TEXT, "context_id": "a", "flush": true }).to_string());
    let first = a.run_to(200);
    assert!(
        audio_bytes(&first, "a") > 0,
        "the first generation has the slot"
    );
    assert_eq!(account.generations(), 1);
    // The second socket's generation is due at 150 ms, waits 50 ms, fails.
    b.send(&json!({ "text": "Hello there. ", "context_id": "b", "flush": true }).to_string());
    assert!(b.run_to(199).is_empty(), "queued: no audio, no error yet");
    let out = b.run_to(400);
    let errs = errors(&out);
    assert_eq!(errs.len(), 1, "{out:?}");
    assert_eq!(errs[0]["error"], "too_many_concurrent_requests");
    assert_eq!(errs[0]["code"], 429);
    assert!(matches!(out.last(), Some(Out::Close(t, 1008, r))
        if r == "too_many_concurrent_requests" && b.ms(*t) == 200));
    // The slot frees when the first generation ends: a new one gets it.
    let rest = a.run_to(10_000);
    assert!(audio_bytes(&rest, "a") > 0);
    assert_eq!(
        account.generations(),
        0,
        "the finished generation gave its slot back"
    );
    let mut c = Harness::new(CoreParams {
        max_concurrent_generations: Some(1),
        account: Arc::clone(&account),
        ..params()
    });
    c.send(&json!({ "text": "Hi. ", "context_id": "c", "flush": true }).to_string());
    assert!(audio_bytes(&c.run_to(2_000), "c") > 0);
}

#[test]
fn a_generation_that_gets_a_slot_within_the_queue_time_is_only_delayed() {
    let account = Arc::new(Account::default());
    let p = CoreParams {
        max_concurrent_generations: Some(1),
        generation_queue: Duration::from_millis(5_000),
        account: Arc::clone(&account),
        ..params()
    };
    let mut a = Harness::new(p.clone());
    let mut b = Harness::new(p);
    a.send(&json!({ "text": "Short. ", "context_id": "a", "flush": true }).to_string());
    b.send(&json!({ "text": "Short too. ", "context_id": "b", "flush": true }).to_string());
    a.run_to(150);
    assert!(b.run_to(150).is_empty(), "b waits for a's slot");
    assert!(audio_bytes(&a.run_to(3_000), "a") > 0);
    let out = b.run_to(3_000);
    assert!(errors(&out).is_empty(), "{out:?}");
    assert!(audio_bytes(&out, "b") > 0);
    drop(b);
    assert_eq!(account.generations(), 0);
}

#[test]
fn a_dropped_core_gives_its_generation_slots_back() {
    let account = Arc::new(Account::default());
    let mut a = Harness::new(CoreParams {
        max_concurrent_generations: Some(1),
        account: Arc::clone(&account),
        ..params()
    });
    a.send(&json!({ "text": TEXT, "context_id": "a", "flush": true }).to_string());
    a.run_to(300);
    assert_eq!(account.generations(), 1);
    drop(a);
    assert_eq!(account.generations(), 0);
}

#[test]
fn over_the_quota_the_socket_gets_quota_exceeded_then_1008() {
    let mut h = Harness::new(CoreParams {
        quota_chars: Some(10),
        ..params()
    });
    let ok = h.send(&json!({ "text": "Hi there. ", "context_id": "a", "flush": true }).to_string());
    assert!(ok.is_empty(), "10 chars fit the quota");
    let out =
        h.send(&json!({ "text": "And more. ", "context_id": "a", "flush": true }).to_string());
    let errs = errors(&out);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0]["error"], "quota_exceeded");
    assert_eq!(errs[0]["code"], 1008);
    assert!(
        errs[0]["message"]
            .as_str()
            .unwrap()
            .contains("exceeds your quota")
    );
    assert!(matches!(out.last(), Some(Out::Close(_, 1008, r)) if r == "quota_exceeded"));
    assert!(h.core.is_closed());
}

#[test]
fn no_final_for_an_empty_context_withholds_only_that_final() {
    let mut h = Harness::new(CoreParams {
        no_final_for_empty_context: true,
        ..params()
    });
    h.send(r#"{"text":" ","context_id":"empty"}"#);
    let out = h.send(r#"{"context_id":"empty","close_context":true}"#);
    assert!(
        out.is_empty(),
        "no isFinal for a context that got no text: {out:?}"
    );
    assert_eq!(
        h.core.open_contexts(),
        0,
        "it no longer counts against the cap"
    );
    // A keep-alive naming it afterwards is not a protocol error.
    assert!(h.send(r#"{"text":"","context_id":"empty"}"#).is_empty());
    h.send(&json!({ "text": "Hi. ", "context_id": "spoken", "flush": true }).to_string());
    h.run_to(2_000);
    let out = h.send(r#"{"context_id":"spoken","close_context":true}"#);
    assert!(out.iter().any(|o| is_final(o, "spoken")), "{out:?}");
    assert!(!h.core.is_closed());
}

#[test]
fn null_alignment_nulls_the_chosen_objects_and_only_those() {
    for (mode, plain, norm) in [
        (NullAlignment::None, true, true),
        (NullAlignment::Alignment, false, true),
        (NullAlignment::Normalized, true, false),
        (NullAlignment::Both, false, false),
    ] {
        let mut h = Harness::new(CoreParams {
            null_alignment: mode,
            ..params()
        });
        h.send(&json!({ "text": "Hello. ", "context_id": "a", "flush": true }).to_string());
        let out = h.run_to(3_000);
        assert!(audio_bytes(&out, "a") > 0);
        for o in &out {
            let Out::Json(_, v) = o else { continue };
            assert_eq!(v["alignment"]["chars"].is_array(), plain, "{mode:?}: {v}");
            assert_eq!(
                v["normalizedAlignment"]["chars"].is_array(),
                norm,
                "{mode:?}: {v}"
            );
        }
    }
}

#[test]
fn per_context_inactivity_ends_the_idle_context_and_keepalives_name_the_live_one() {
    let mut h = Harness::new(CoreParams {
        context_inactivity: true,
        ..params()
    });
    h.send(r#"{"text":" ","context_id":"idle"}"#);
    h.send(r#"{"text":" ","context_id":"live"}"#);
    // Only "live" is kept alive (a context keep-alive), every 10 s.
    let mut out = Vec::new();
    for t in [10_000, 20_000, 30_000] {
        out.extend(h.run_to(t - 1));
        h.now = h.t0 + Duration::from_millis(t - 1);
        out.extend(h.send(r#"{"text":"","context_id":"live"}"#));
    }
    let finals: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Out::Json(t, v) if v["isFinal"] == true => {
                Some((h.ms(*t), v["contextId"].as_str().unwrap().to_owned()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(finals, vec![(20_000, "idle".to_owned())]);
    assert_eq!(h.core.open_contexts(), 1);
    assert!(
        !h.core.is_closed(),
        "context keep-alives keep the socket too"
    );
    // Without the fault only the socket times out.
    let mut h = Harness::new(params());
    h.send(r#"{"text":" ","context_id":"idle"}"#);
    h.run_to(19_000);
    h.send(r#"{"text":""}"#);
    assert!(h.run_to(30_000).is_empty());
    assert_eq!(h.core.open_contexts(), 1);
}
