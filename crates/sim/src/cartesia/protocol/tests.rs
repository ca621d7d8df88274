//! The socket core on a virtual clock: continuations, buffering, cancel,
//! the concurrency cap, expiry, flushes, timestamps and the faults.

use serde_json::{Value, json};

use super::*;

/// A core and a made-up clock.
struct Harness {
    core: SocketCore,
    now: Instant,
}

impl Harness {
    fn new(params: CoreParams) -> Self {
        let now = Instant::now();
        Harness {
            core: SocketCore::new(params, now),
            now,
        }
    }

    fn send(&mut self, msg: Value) {
        self.core.handle_text(self.now, &msg.to_string());
    }

    /// Runs every deadline up to `ms` from now; returns what was sent.
    fn advance(&mut self, ms: u64) -> Vec<Value> {
        let until = self.now + Duration::from_millis(ms);
        let mut out = self.drain();
        while let Some(t) = self.core.next_deadline().filter(|t| *t <= until) {
            self.now = self.now.max(t);
            self.core.handle_timeout(self.now);
            out.extend(self.drain());
        }
        self.now = until;
        out
    }

    fn drain(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(o) = self.core.poll_output() {
            out.push(match o {
                Outbound::Text(t) => serde_json::from_str(&t).unwrap(),
                Outbound::Close { code, reason } => json!({"close": code, "reason": reason}),
            });
        }
        out
    }
}

fn request(ctx: &str, transcript: &str, cont: bool) -> Value {
    json!({
        "model_id": "sonic-3",
        "transcript": transcript,
        "voice": {"mode": "id", "id": "voice-1"},
        "output_format": {"container": "raw", "encoding": "pcm_mulaw", "sample_rate": 8000},
        "language": "en",
        "context_id": ctx,
        "continue": cont,
    })
}

fn with(mut v: Value, extra: Value) -> Value {
    for (k, val) in extra.as_object().unwrap() {
        v[k] = val.clone();
    }
    v
}

fn of_type<'a>(msgs: &'a [Value], ty: &str) -> Vec<&'a Value> {
    msgs.iter().filter(|m| m["type"] == ty).collect()
}

/// Decoded audio bytes of the chunks in `msgs`.
fn audio_bytes(msgs: &[Value]) -> usize {
    of_type(msgs, "chunk")
        .iter()
        .map(|m| {
            base64::engine::general_purpose::STANDARD
                .decode(m["data"].as_str().unwrap())
                .unwrap()
                .len()
        })
        .sum()
}

fn ms_for(text: &str) -> usize {
    (text.chars().count() as f64 * 1000.0 / 15.0).round() as usize
}

#[test]
fn two_continuations_yield_their_audio_then_exactly_one_done() {
    let mut h = Harness::new(CoreParams::quiet());
    h.send(request("turn-1", "Hello there, ", true));
    h.send(request("turn-1", "your table is booked. ", true));
    h.send(request("turn-1", "", false));
    let out = h.advance(60_000);
    let dones = of_type(&out, "done");
    assert_eq!(dones.len(), 1, "{out:?}");
    assert_eq!(out.last().unwrap()["type"], "done", "done comes last");
    assert_eq!(dones[0]["status_code"], 206);
    assert_eq!(dones[0]["context_id"], "turn-1");
    for c in of_type(&out, "chunk") {
        assert_eq!(
            (c["status_code"].as_u64(), c["done"].as_bool()),
            (Some(206), Some(false))
        );
        assert_eq!(c["context_id"], "turn-1");
        assert!(c["step_time"].as_f64().unwrap() > 0.0);
        assert!(c.get("flush_id").is_none());
    }
    // The sentence end spoke the first two parts as one piece: μ-law 8 kHz
    // is 8 bytes a millisecond.
    let said = "Hello there, your table is booked. ";
    assert_eq!(audio_bytes(&out), ms_for(said) * 8);
    assert_eq!(
        h.core.audio().contexts["turn-1"].audio_ms as usize,
        ms_for(said)
    );
    assert_eq!(h.core.audio().formats["turn-1"], "pcm_mulaw_8000");
    assert_eq!(h.core.open_contexts(), 0);
    assert_eq!(h.core.params.account.active_contexts(), 0);
}

#[test]
fn managed_buffering_waits_for_a_sentence_end_or_the_buffer_delay() {
    let mut h = Harness::new(CoreParams::quiet());
    h.send(with(
        request("a", "Let me check ", true),
        json!({"max_buffer_delay_ms": 2_000}),
    ));
    let early = h.advance(1_900);
    assert!(
        of_type(&early, "chunk").is_empty(),
        "held for the delay: {early:?}"
    );
    let late = h.advance(300);
    assert!(
        !of_type(&late, "chunk").is_empty(),
        "spoken after the delay"
    );

    // A delay of 0 speaks each request as it comes.
    let mut h = Harness::new(CoreParams::quiet());
    h.send(with(
        request("b", "Let me check ", true),
        json!({"max_buffer_delay_ms": 0}),
    ));
    assert!(!of_type(&h.advance(150), "chunk").is_empty());
}

#[test]
fn cancel_stops_the_audio_and_frees_the_slot() {
    let mut h = Harness::new(CoreParams {
        max_contexts: Some(1),
        ..CoreParams::quiet()
    });
    let long = "This is a long answer that would take several seconds to say. ";
    h.send(request("a", long, false));
    let before = h.advance(300);
    assert!(!of_type(&before, "chunk").is_empty());
    h.send(json!({"context_id": "a", "cancel": true}));
    let after = h.advance(60_000);
    assert!(after.is_empty(), "nothing after a cancel: {after:?}");
    assert!(audio_bytes(&before) < ms_for(long) * 8);
    // The slot is free: a new context is admitted under the cap of one.
    h.send(request("b", "Okay. ", false));
    let next = h.advance(60_000);
    assert_eq!(of_type(&next, "done").len(), 1, "{next:?}");
    // The cancelled id cannot be reused.
    h.send(request("a", "Again. ", false));
    let reused = h.drain();
    assert_eq!(reused[0]["type"], "error");
    assert_eq!(reused[0]["status_code"], 400);
}

#[test]
fn over_the_account_cap_a_context_gets_a_429_and_the_socket_stays_open() {
    let account = Arc::new(Account::default());
    let params = CoreParams {
        max_contexts: Some(1),
        account: Arc::clone(&account),
        ..CoreParams::quiet()
    };
    let mut other = Harness::new(params.clone());
    other.send(request("x", "Holding the only slot. ", true));
    let mut h = Harness::new(params);
    h.send(request("y", "Hello. ", false));
    let out = h.drain();
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0]["type"], "error");
    assert_eq!(out[0]["status_code"], 429);
    assert_eq!(out[0]["done"], true);
    assert_eq!(out[0]["context_id"], "y");
    assert_eq!(account.rejected.load(Ordering::Relaxed), 1);
    // The other socket ends its context: the slot comes back.
    other.send(request("x", "", false));
    other.advance(60_000);
    assert_eq!(account.active_contexts(), 0);
    h.send(request("z", "Hello. ", false));
    assert_eq!(of_type(&h.advance(60_000), "done").len(), 1);
}

#[test]
fn an_idle_context_expires_after_its_last_audio_and_cannot_be_reused() {
    let mut h = Harness::new(CoreParams::quiet());
    h.send(request("a", "Hello. ", true));
    let audio = h.advance(400);
    assert!(of_type(&audio, "done").is_empty());
    assert!(!of_type(&audio, "chunk").is_empty());
    let expiry = h.advance(1_100);
    assert_eq!(of_type(&expiry, "done").len(), 1, "{expiry:?}");
    assert_eq!(h.core.params.account.expired.load(Ordering::Relaxed), 1);
    h.send(request("a", "", false));
    let late = h.drain();
    assert_eq!(
        (late[0]["type"].as_str(), late[0]["status_code"].as_u64()),
        (Some("error"), Some(400))
    );

    // Without expiry the context waits for its last input.
    let mut h = Harness::new(CoreParams {
        context_expiry: None,
        ..CoreParams::quiet()
    });
    h.send(request("a", "Hello. ", true));
    assert!(of_type(&h.advance(30_000), "done").is_empty());
    h.send(request("a", "", false));
    assert_eq!(of_type(&h.advance(100), "done").len(), 1);
}

#[test]
fn changing_locked_fields_mid_context_is_an_error_that_ends_it() {
    let mut h = Harness::new(CoreParams::quiet());
    h.send(request("a", "Hello, ", true));
    h.send(with(
        request("a", "world. ", false),
        json!({"voice": {"mode": "id", "id": "other"}}),
    ));
    let out = h.advance(60_000);
    assert_eq!(of_type(&out, "error").len(), 1, "{out:?}");
    assert!(of_type(&out, "done").is_empty());
    assert_eq!(h.core.open_contexts(), 0);
}

#[test]
fn a_flush_is_acknowledged_after_the_audio_before_it() {
    let mut h = Harness::new(CoreParams::quiet());
    h.send(request("a", "First part", true));
    h.send(with(request("a", "", true), json!({"flush": true})));
    h.send(request("a", " and the rest.", false));
    let out = h.advance(60_000);
    let types: Vec<&str> = out.iter().map(|m| m["type"].as_str().unwrap()).collect();
    let flush_at = types.iter().position(|t| *t == "flush_done").unwrap();
    assert_eq!(out[flush_at]["flush_id"], 1);
    assert_eq!(out[flush_at]["flush_done"], true);
    assert!(types[..flush_at].contains(&"chunk"));
    assert!(
        out[..flush_at]
            .iter()
            .filter(|m| m["type"] == "chunk")
            .all(|m| m["flush_id"] == 1)
    );
    assert!(
        out[flush_at + 1..]
            .iter()
            .filter(|m| m["type"] == "chunk")
            .all(|m| m["flush_id"] == 2)
    );
    assert_eq!(*types.last().unwrap(), "done");
}

#[test]
fn timestamps_cover_every_word_on_the_context_clock() {
    let mut h = Harness::new(CoreParams::quiet());
    let base = with(
        request("a", "Table for two, ", true),
        json!({"add_timestamps": true}),
    );
    h.send(base.clone());
    h.send(with(
        base,
        json!({"transcript": "at eight tonight.", "continue": false}),
    ));
    let out = h.advance(60_000);
    let stamps = of_type(&out, "timestamps");
    let words: Vec<&str> = stamps
        .iter()
        .flat_map(|m| m["word_timestamps"]["words"].as_array().unwrap())
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(words, ["Table", "for", "two,", "at", "eight", "tonight."]);
    let starts: Vec<f64> = stamps
        .iter()
        .flat_map(|m| m["word_timestamps"]["start"].as_array().unwrap())
        .map(|s| s.as_f64().unwrap())
        .collect();
    assert!(starts.windows(2).all(|w| w[0] < w[1]), "{starts:?}");
    let total_s = (ms_for("Table for two, ") + ms_for("at eight tonight.")) as f64 / 1000.0;
    assert!(*starts.last().unwrap() < total_s);
}

#[test]
fn phoneme_timestamps_come_when_asked_and_stay_inside_their_words() {
    let mut h = Harness::new(CoreParams::quiet());
    h.send(with(
        request("a", "Table for two.", false),
        json!({"add_timestamps": true, "add_phoneme_timestamps": true}),
    ));
    let out = h.advance(60_000);
    let phonemes: Vec<&Value> = of_type(&out, "phoneme_timestamps");
    let letters: String = phonemes
        .iter()
        .flat_map(|m| m["phoneme_timestamps"]["phonemes"].as_array().unwrap())
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(letters, "tablefortwo");
    let words = of_type(&out, "timestamps");
    let last_word_end = words.last().unwrap()["word_timestamps"]["end"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .as_f64()
        .unwrap();
    let ends: Vec<f64> = phonemes
        .iter()
        .flat_map(|m| m["phoneme_timestamps"]["end"].as_array().unwrap())
        .map(|e| e.as_f64().unwrap())
        .collect();
    assert!(ends.windows(2).all(|w| w[0] <= w[1]), "{ends:?}");
    assert_eq!(*ends.last().unwrap(), last_word_end);

    let mut h = Harness::new(CoreParams::quiet());
    h.send(request("b", "Table for two.", false));
    assert!(of_type(&h.advance(60_000), "phoneme_timestamps").is_empty());
}

#[test]
fn a_voice_outside_the_library_is_refused_on_its_context() {
    let mut h = Harness::new(CoreParams {
        version: ApiVersion::V2026_08_14,
        voices: Some(["voice-1".to_owned()].into()),
        ..CoreParams::quiet()
    });
    h.send(with(
        request("a", "Hi.", false),
        json!({"voice": "someone-else"}),
    ));
    let out = h.drain();
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0]["error_code"], "voice_not_found");
    assert_eq!(out[0]["status_code"], 404);
    assert_eq!(out[0]["context_id"], "a");
    assert_eq!(h.core.params.account.active_contexts(), 0);
    // The library's voice, in each of its three forms, is spoken.
    for (ctx, voice) in [
        ("b", json!("voice-1")),
        ("c", json!({"id": "voice-1"})),
        ("d", json!({"mode": "id", "id": "voice-1"})),
    ] {
        h.send(with(request(ctx, "Hi.", false), json!({"voice": voice})));
    }
    let out = h.advance(60_000);
    assert_eq!(of_type(&out, "done").len(), 3, "{out:?}");
    assert!(of_type(&out, "error").is_empty(), "{out:?}");
}

#[test]
fn the_mid_stream_fault_fails_the_context_after_its_characters() {
    let mut h = Harness::new(CoreParams {
        error_after_chars: Some(10),
        ..CoreParams::quiet()
    });
    h.send(request(
        "a",
        "This answer is cut off by an injected failure. ",
        false,
    ));
    let out = h.advance(60_000);
    let chunks = of_type(&out, "chunk").len();
    assert!(chunks >= 1, "some audio first");
    let last = out.last().unwrap();
    assert_eq!(
        (last["type"].as_str(), last["status_code"].as_u64()),
        (Some("error"), Some(500))
    );
    assert!(of_type(&out, "done").is_empty());
    assert_eq!(h.core.params.account.errored.load(Ordering::Relaxed), 1);
    assert_eq!(h.core.params.account.active_contexts(), 0);
    // The socket is still usable.
    h.send(request("b", "Hi. ", false));
    assert!(!of_type(&h.advance(60_000), "chunk").is_empty());
}

#[test]
fn close_after_and_the_idle_timeout_close_the_socket() {
    let mut h = Harness::new(CoreParams {
        close_after: Some(Duration::from_millis(500)),
        ..CoreParams::quiet()
    });
    h.send(request(
        "a",
        "This is a long answer that keeps going for a while. ",
        false,
    ));
    let out = h.advance(10_000);
    assert_eq!(out.last().unwrap()["close"], 1011, "{out:?}");
    assert!(h.core.faulted());
    assert_eq!(h.core.params.account.active_contexts(), 0);

    let mut h = Harness::new(CoreParams {
        idle_timeout: Duration::from_secs(300),
        ..CoreParams::quiet()
    });
    assert!(h.advance(299_000).is_empty());
    let out = h.advance(2_000);
    assert_eq!(out, [json!({"close": 1000, "reason": "idle timeout"})]);
    assert!(!h.core.faulted());
}

#[test]
fn errors_follow_the_socket_version() {
    let mut h = Harness::new(CoreParams {
        version: ApiVersion::V2026_03_01,
        request_id: "sock-1".into(),
        ..CoreParams::quiet()
    });
    h.send(with(
        request("a", "Hi. ", false),
        json!({"model_id": "nope"}),
    ));
    h.core.handle_text(h.now, "not json");
    h.core.handle_binary(h.now);
    let out = h.drain();
    assert_eq!(out.len(), 3);
    assert_eq!(out[0]["error_code"], "model_not_found");
    assert_eq!(out[0]["title"], "Invalid model");
    assert_eq!(out[2]["error_code"], "invalid_request");
    assert_eq!(out[0]["request_id"], "sock-1:a");
    assert_eq!(out[0]["context_id"], "a");
    assert!(out[1].get("context_id").is_none());
    assert!(
        out.iter()
            .all(|m| m["done"] == true && m["status_code"] == 400)
    );
    assert!(out.iter().all(|m| m.get("error").is_none()));
}
