//! The invariants of the ElevenLabs message parser — the one copy,
//! shared by the cargo-fuzz target `fuzz/fuzz_targets/tts_client_wire.rs`
//! and by the stable smoke twin (the `#[cfg(test)]` part at the bottom of
//! this file).
//!
//! This file is included twice:
//! - by an ordinary `mod` (`#[cfg(test)]`), as
//!   `wire::elevenlabs::fuzz_tests`, whose parent module is the parser
//!   itself;
//! - by a `path` attribute in the fuzz target, as `mod invariants`, whose
//!   crate root has `use tts_client::wire::elevenlabs::*` and
//!   `use tts_client::ContextId`.
//!
//! So everything here reaches the parser through `super::`, and the part
//! that needs the mutator (the dev-dependency `callgate_test_support`) or
//! the TTS simulator is compiled only under `cfg(test)` (the fuzz build
//! never sees it). Entry point: [`check`].
//!
//! Invariants:
//! - an `Audio` event carries exactly the base64 decoding of the frame's
//!   non-empty `audio`;
//! - a context is recognised only in its exact wire form (`contextId`,
//!   else `context_id`, equal to `ctx-<n>` as we write it), both inside a
//!   frame and by `ContextId::from_wire` on any text: a provider that
//!   mangled our id gets no audio attributed to one of our contexts;
//! - only a frame with `error` or `message` is an `Error`, a `code` of
//!   429 makes it a capacity refusal, and it never ends a context by
//!   itself (a close follows);
//! - errors say which of the two things went wrong (not JSON, audio not
//!   base64).

use base64::Engine as _;

use super::{ContextId, Inbound, parse};

/// Every invariant on one input: `data` as text (lossily), parsed as a
/// frame and read as a context id.
pub fn check(data: &[u8]) {
    let frame = String::from_utf8_lossy(data);
    let _ = check_parse(&frame);
    check_context_id(&frame);
}

/// The fields the invariants are checked against, read independently of
/// the parser.
#[derive(serde::Deserialize)]
struct Probe {
    audio: Option<String>,
    #[serde(rename = "contextId")]
    camel: Option<String>,
    #[serde(rename = "context_id")]
    snake: Option<String>,
    error: Option<serde_json::Value>,
    message: Option<serde_json::Value>,
    code: Option<serde_json::Value>,
}

/// What every parse promises, whatever the frame.
pub fn check_parse(frame: &str) -> Result<Inbound, String> {
    let result = parse(frame);
    let probe = || serde_json::from_str::<Probe>(frame).expect("it parsed, so it has these");
    match &result {
        Ok(Inbound::Audio { context, bytes, .. }) => {
            let p = probe();
            let audio = p.audio.expect("audio was present");
            assert!(!bytes.is_empty(), "an audio event always carries audio");
            let decoded = base64::engine::general_purpose::STANDARD.decode(audio);
            assert_eq!(decoded.as_ref(), Ok(bytes));
            check_context(*context, p.camel.or(p.snake));
        }
        Ok(Inbound::Final { context }) => {
            let p = probe();
            check_context(*context, p.camel.or(p.snake));
        }
        Ok(Inbound::Error {
            capacity,
            ends_context,
            ..
        }) => {
            let p = probe();
            assert!(p.error.is_some() || p.message.is_some());
            if p.code.is_some_and(|c| c.as_u64() == Some(429)) {
                assert!(capacity, "code 429 is a capacity refusal");
            }
            assert!(
                !ends_context,
                "ElevenLabs errors end the socket, not a context"
            );
        }
        Ok(Inbound::Aligned { .. }) => panic!("ElevenLabs aligns inside its audio frames"),
        Ok(Inbound::Other) => {}
        Err(e) => assert!(
            e.starts_with("unparseable provider message") || e.starts_with("audio is not base64"),
            "{e}"
        ),
    }
    result
}

/// A context in a frame is only recognised in its exact wire form.
fn check_context(parsed: Option<ContextId>, sent: Option<String>) {
    if let Some(id) = parsed {
        assert_eq!(Some(id.to_string()), sent);
    }
}

/// `ContextId::from_wire` on any text: a context only in its exact wire
/// form; returns what it read.
pub fn check_context_id(text: &str) -> Option<ContextId> {
    let parsed = ContextId::from_wire(text);
    if let Some(id) = parsed {
        assert_eq!(id.to_string(), text);
    }
    parsed
}

// ---- the stable smoke twin ----------------------------------------------

#[cfg(test)]
mod smoke {
    //! Mutated ElevenLabs frames must parse into events that keep the
    //! parser's promises, and a simulated provider fed our requests must
    //! answer with frames that carry every voiced character of the text
    //! back to us.

    use std::collections::HashMap;
    use std::time::{Duration, Instant};

    use callgate_sim::tts::OutputFormat as SimFormat;
    use callgate_sim::tts::protocol::{CoreParams, Outbound, SocketCore};

    use super::super::{close_context, flush, init, text};
    use super::*;
    use crate::wire::voiced_chars;
    use callgate_test_support::{Mutator, Rng};

    const ITERATIONS: usize = 4_000;
    const TOKENS: &[&str] = &[
        "\"audio\"",
        "\"contextId\"",
        "\"context_id\"",
        "\"isFinal\"",
        "\"is_final\"",
        "\"alignment\"",
        "\"chars\"",
        "\"error\"",
        "\"message\"",
        "\"ctx-1\"",
        "\"ctx-+1\"",
        "\"ctx-01\"",
        "\"ctx-18446744073709551616\"",
        "\"AAEC\"",
        "\"//8=\"",
    ];

    fn corpus() -> Vec<&'static str> {
        vec![
            r#"{"audio":"AAEC","contextId":"ctx-1","isFinal":null,"alignment":{"chars":["H","i"," "],"charStartTimesMs":[0,60,120],"charDurationsMs":[60,60,60]},"normalizedAlignment":null}"#,
            r#"{"audio":"//8=","context_id":"ctx-7"}"#,
            r#"{"isFinal":true,"contextId":"ctx-2"}"#,
            r#"{"is_final":true,"context_id":"ctx-3","audio":null}"#,
            r#"{"message":"too many","error":"max_active_conversations","code":1008}"#,
            r#"{"error":{"detail":1}}"#,
            r#"{"flush_done":true}"#,
        ]
    }

    /// Every mutant goes through the fuzz target's checks: as a frame and
    /// as a context id.
    #[test]
    fn mutated_frames_keep_the_parse_invariants() {
        let mut m = Mutator::new(0x775_c11e7, &corpus(), TOKENS);
        m.run_bytes(ITERATIONS, check);
    }

    #[test]
    fn context_ids_parse_only_in_their_exact_wire_form() {
        let mut rng = Rng::new(5);
        for _ in 0..2_000 {
            let id = ContextId(rng.next_u64() >> rng.below(64));
            assert_eq!(check_context_id(&id.to_string()), Some(id));
            let mangled = format!("ctx-{}{}", rng.text(3), rng.next_u64() % 1_000);
            check_context_id(&mangled);
        }
        for bad in [
            "ctx-+1",
            "ctx-01",
            "ctx- 1",
            "ctx-",
            "ctx-1x",
            "CTX-1",
            "ctx-18446744073709551616",
        ] {
            assert_eq!(ContextId::from_wire(bad), None, "{bad}");
        }
    }

    fn sim_params(seed: u64) -> CoreParams {
        CoreParams {
            format: SimFormat::Ulaw8000,
            max_contexts: 5,
            first_chunk_latency: Duration::from_millis(150),
            chars_per_second: 15.0,
            realtime_factor: 4.0,
            inactivity_timeout: Duration::from_secs(3_600),
            stall_audio: false,
            close_after: None,
            finish_flushed_on_close: true,
            ignore_close_socket: false,
            seed,
            ..CoreParams::quiet()
        }
    }

    /// Runs the simulated provider until it has nothing left to do, parsing
    /// every frame it sends; returns voiced characters heard per context and
    /// the contexts that were finalised.
    fn drain(
        core: &mut SocketCore,
        mut now: Instant,
    ) -> (HashMap<ContextId, usize>, Vec<ContextId>) {
        let (mut heard, mut finals) = (HashMap::new(), Vec::new());
        loop {
            while let Some(out) = core.poll_output() {
                let Outbound::Text(frame) = out else {
                    panic!("the simulator closed the socket: {out:?}")
                };
                match check_parse(&frame) {
                    Ok(Inbound::Audio {
                        context: Some(id),
                        aligned_chars: Some(n),
                        ..
                    }) => *heard.entry(id).or_default() += n,
                    Ok(Inbound::Final { context: Some(id) }) => finals.push(id),
                    other => panic!("the simulator's frame was read as {other:?}"),
                }
            }
            match core.next_deadline() {
                Some(d) if d < now + Duration::from_secs(3_000) => {
                    now = now.max(d);
                    core.handle_timeout(now);
                }
                _ => return (heard, finals),
            }
        }
    }

    #[test]
    fn every_voiced_character_we_send_comes_back_in_the_alignment() {
        let mut rng = Rng::new(11);
        for run in 0..6 {
            let now = Instant::now();
            let mut core = SocketCore::new(sim_params(run), now);
            let mut sent: HashMap<ContextId, usize> = HashMap::new();
            let mut created = Vec::new();
            for n in 1..=1 + rng.below(4) as u64 {
                let id = ContextId(run * 10 + n);
                created.push(id);
                core.handle_text(now, &init(id));
                for _ in 0..=rng.below(2) {
                    let piece = rng.text(30);
                    *sent.entry(id).or_default() += voiced_chars(&piece);
                    core.handle_text(now, &text(id, &piece));
                }
                core.handle_text(now, &flush(id));
                core.handle_text(now, &close_context(id));
            }
            let (heard, finals) = drain(&mut core, now);
            sent.retain(|_, n| *n > 0);
            assert_eq!(heard, sent, "run {run}");
            let mut finals = finals;
            finals.sort();
            assert_eq!(finals, created, "each context is finalised once");
        }
    }
}
