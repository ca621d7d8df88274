//! The invariants of the Cartesia message parser — the one copy, shared
//! by the cargo-fuzz target `fuzz/fuzz_targets/tts_client_cartesia.rs` and
//! by the stable smoke twin (the `#[cfg(test)]` part at the bottom).
//!
//! This file is included twice:
//! - by an ordinary `mod` (`#[cfg(test)]`), as
//!   `wire::cartesia::fuzz_tests`, whose parent module is the parser
//!   itself;
//! - by a `path` attribute in the fuzz target, as `mod invariants`, whose
//!   crate root has `use tts_client::wire::cartesia::*` and
//!   `use tts_client::ContextId`.
//!
//! So everything here reaches the parser through `super::` only. Entry
//! point: [`check`].
//!
//! Invariants:
//! - the event kind follows `type`: `Audio` only for a `chunk` and then
//!   exactly the base64 decoding of its non-empty `data`; `Aligned` only
//!   for `timestamps`, counting exactly its non-blank words; `Final` only for `done`; `Error` only for `error` (or a
//!   frame of another type with an `error` field);
//! - a context is recognised only in its exact wire form `ctx-<n>`;
//! - an error with `status_code` 429 is a capacity refusal, and only an
//!   error naming a context ends one;
//! - parse errors say which step failed (not JSON, audio not base64).

use base64::Engine as _;

use super::{ContextId, Inbound, parse};

/// Every invariant on one input: `data` as text (lossily), parsed as a
/// Cartesia frame.
pub fn check(data: &[u8]) {
    let frame = String::from_utf8_lossy(data);
    let _ = check_parse(&frame);
}

/// The fields the invariants are checked against, read independently of
/// the parser.
#[derive(serde::Deserialize)]
struct Probe {
    #[serde(rename = "type")]
    kind: Option<String>,
    data: Option<String>,
    context_id: Option<String>,
    status_code: Option<u64>,
    error: Option<serde_json::Value>,
    word_timestamps: Option<Words>,
}

#[derive(serde::Deserialize)]
struct Words {
    #[serde(default)]
    words: Vec<String>,
}

/// What every parse promises, whatever the frame.
pub fn check_parse(frame: &str) -> Result<Inbound, String> {
    let result = parse(frame);
    let probe = || serde_json::from_str::<Probe>(frame).expect("it parsed, so it has these");
    match &result {
        Ok(Inbound::Audio { context, bytes, .. }) => {
            let p = probe();
            assert_eq!(p.kind.as_deref(), Some("chunk"));
            assert!(!bytes.is_empty(), "an audio event always carries audio");
            let decoded =
                base64::engine::general_purpose::STANDARD.decode(p.data.expect("data present"));
            assert_eq!(decoded.as_ref(), Ok(bytes));
            check_context(*context, p.context_id);
        }
        Ok(Inbound::Aligned { context, words }) => {
            let p = probe();
            assert_eq!(p.kind.as_deref(), Some("timestamps"));
            let sent = p.word_timestamps.expect("timestamps present").words;
            let blank = |w: &String| w.chars().all(char::is_whitespace);
            assert_eq!(*words, sent.iter().filter(|w| !blank(w)).count());
            check_context(*context, p.context_id);
        }
        Ok(Inbound::Final { context }) => {
            let p = probe();
            assert_eq!(p.kind.as_deref(), Some("done"));
            check_context(*context, p.context_id);
        }
        Ok(Inbound::Error {
            context,
            capacity,
            ends_context,
            ..
        }) => {
            let p = probe();
            assert!(p.kind.as_deref() == Some("error") || p.error.is_some());
            if p.status_code == Some(429) {
                assert!(capacity, "a 429 is a capacity refusal");
            }
            assert!(!ends_context || context.is_some());
            check_context(*context, p.context_id);
        }
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

// ---- the stable smoke twin ----------------------------------------------

#[cfg(test)]
mod smoke {
    //! Mutated Cartesia frames must parse into events that keep the
    //! parser's promises; the committed seeds go through `check` itself.

    use super::*;
    use callgate_test_support::Mutator;

    const ITERATIONS: usize = 4_000;
    const TOKENS: &[&str] = &[
        "\"type\"",
        "\"chunk\"",
        "\"timestamps\"",
        "\"done\"",
        "\"error\"",
        "\"flush_done\"",
        "\"data\"",
        "\"context_id\"",
        "\"status_code\"",
        "429",
        "\"word_timestamps\"",
        "\"words\"",
        "\"ctx-1\"",
        "\"ctx-01\"",
        "\"AAEC\"",
        "true",
        "null",
    ];

    const SEEDS: &[&[u8]] = &[
        include_bytes!("../../../../../fuzz/seeds/tts_client_cartesia/chunk"),
        include_bytes!("../../../../../fuzz/seeds/tts_client_cartesia/timestamps"),
        include_bytes!("../../../../../fuzz/seeds/tts_client_cartesia/done"),
        include_bytes!("../../../../../fuzz/seeds/tts_client_cartesia/error"),
        include_bytes!("../../../../../fuzz/seeds/tts_client_cartesia/capacity"),
    ];

    fn corpus() -> Vec<&'static str> {
        vec![
            r#"{"type":"chunk","data":"AAEC","done":false,"status_code":206,"context_id":"ctx-1"}"#,
            r#"{"type":"timestamps","done":false,"context_id":"ctx-1","word_timestamps":{"words":["Hi","there"],"start":[0,0.2],"end":[0.2,0.5]}}"#,
            r#"{"type":"flush_done","done":false,"flush_done":true,"flush_id":1,"context_id":"ctx-2"}"#,
            r#"{"type":"done","done":true,"status_code":206,"context_id":"ctx-2"}"#,
            r#"{"type":"error","done":true,"error":"too many","status_code":429,"context_id":"ctx-3"}"#,
            r#"{"type":"error","done":true,"title":"t","message":"m","error_code":"bad","status_code":400}"#,
        ]
    }

    #[test]
    fn mutated_frames_keep_the_parse_invariants() {
        let mut m = Mutator::new(0xca27_e51a, &corpus(), TOKENS);
        m.run_bytes(ITERATIONS, check);
    }

    #[test]
    fn the_seeds_are_read_as_what_they_mean() {
        let kinds: Vec<_> = SEEDS
            .iter()
            .map(|s| check_parse(std::str::from_utf8(s).expect("seeds are UTF-8")))
            .collect();
        assert!(matches!(kinds[0], Ok(Inbound::Audio { .. })));
        assert!(matches!(kinds[1], Ok(Inbound::Aligned { words: 2, .. })));
        assert!(matches!(kinds[2], Ok(Inbound::Final { .. })));
        assert!(matches!(
            kinds[3],
            Ok(Inbound::Error {
                capacity: false,
                ends_context: true,
                ..
            })
        ));
        assert!(matches!(
            kinds[4],
            Ok(Inbound::Error { capacity: true, .. })
        ));
        let mut m = Mutator::new(7, SEEDS, TOKENS);
        m.run_bytes(1_000, check);
    }
}
