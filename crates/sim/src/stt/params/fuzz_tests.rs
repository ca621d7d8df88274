//! The invariants of the STT simulator's query validation — the one copy,
//! shared by the cargo-fuzz target `fuzz/fuzz_targets/sim_stt_params.rs`
//! and by the stable smoke twin (the `#[cfg(test)]` part at the bottom of
//! this file).
//!
//! This file is included twice:
//! - by an ordinary `mod` (`#[cfg(test)]`), as `stt::params::fuzz_tests`,
//!   whose parent module is the validation itself;
//! - by a `path` attribute in the fuzz target, as `mod invariants`, whose
//!   crate root has `use callgate_sim::stt` and
//!   `use callgate_sim::stt::params::*`.
//!
//! So the validation is reached through `super::`, the refusal through
//! `crate::stt` (the same module in both builds), and the part that needs
//! the mutator (the dev-dependency `callgate_test_support`) is compiled
//! only under `cfg(test)` (the fuzz build never sees it). Entry point:
//! [`check`].
//!
//! Invariants: an accepted query has `sample_rate` 8000 or 16000 exactly as
//! sent, the encoding it named, `utterance_end_ms` only with interim
//! results, endpointing off only for `endpointing=false`, and mono; a
//! refusal is `BadParam` naming a known parameter that was sent (or a
//! required one that was missing).

use std::collections::HashMap;

use super::{SimEncoding, StreamParams};
use crate::stt::SttSimRefusal;

const KNOWN_PARAMS: [&str; 8] = [
    "encoding",
    "sample_rate",
    "channels",
    "interim_results",
    "endpointing",
    "utterance_end_ms",
    "vad_events",
    "model",
];

/// Every invariant on one input: `data` as a query string (lossily).
pub fn check(data: &[u8]) {
    check_params(&query(&String::from_utf8_lossy(data)));
}

/// A query string as a map, the last value of a repeated key winning.
pub fn query(text: &str) -> HashMap<String, String> {
    text.split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// What validation promises, whatever the query; returns what it accepted.
pub fn check_params(q: &HashMap<String, String>) -> Option<StreamParams> {
    match StreamParams::from_query(q) {
        Ok(p) => {
            assert!(matches!(p.sample_rate, 8_000 | 16_000));
            assert_eq!(q.get("sample_rate"), Some(&p.sample_rate.to_string()));
            let encoding = q.get("encoding").map(String::as_str);
            let expected = match p.encoding {
                SimEncoding::Mulaw => "mulaw",
                SimEncoding::Alaw => "alaw",
                SimEncoding::Linear16 => "linear16",
            };
            assert_eq!(encoding, Some(expected));
            assert!(p.utterance_end_ms.is_none() || p.interim_results);
            let off = q.get("endpointing").map(String::as_str) == Some("false");
            assert_eq!(p.endpointing_ms.is_none(), off);
            assert!(q.get("channels").is_none_or(|c| c == "1"));
            Some(p)
        }
        Err(SttSimRefusal::BadParam { param, reason }) => {
            assert!(KNOWN_PARAMS.contains(&param), "{param}");
            let required = matches!(param, "encoding" | "sample_rate");
            assert!(q.contains_key(param) || required, "{param}: {reason}");
            None
        }
        Err(other) => panic!("validation refused with {other:?}"),
    }
}

// ---- the stable smoke twin ----------------------------------------------

#[cfg(test)]
mod smoke {
    use super::*;
    use callgate_test_support::Mutator;

    const TOKENS: &[&str] = &[
        "&",
        "=",
        "mulaw",
        "alaw",
        "linear16",
        "8000",
        "16000",
        "true",
        "false",
        "TRUE",
        "4294967296",
        "-1",
        "&encoding=",
        "&sample_rate=",
        "&utterance_end_ms=",
    ];
    /// The fuzz target's seeds.
    const SEEDS: [&[u8]; 3] = [
        include_bytes!("../../../../../fuzz/seeds/sim_stt_params/seed-0"),
        include_bytes!("../../../../../fuzz/seeds/sim_stt_params/seed-1"),
        include_bytes!("../../../../../fuzz/seeds/sim_stt_params/seed-2"),
    ];

    #[test]
    fn mutated_queries_are_accepted_consistently_or_refused_by_name() {
        let corpus = [
            "model=nova-3&encoding=mulaw&sample_rate=8000&channels=1&interim_results=true&endpointing=300&utterance_end_ms=1000&vad_events=true&smart_format=true",
            "encoding=linear16&sample_rate=16000",
            "encoding=alaw&sample_rate=8000&endpointing=false&interim_results=TRUE",
        ];
        let mut m = Mutator::new(0x5a_a1, &corpus, TOKENS);
        let mut accepted = 0;
        m.run_text(4_000, |text| {
            accepted += usize::from(check_params(&query(text)).is_some());
        });
        assert!(accepted > 100, "only {accepted} mutants were valid");
    }

    /// What the fuzz target runs, on mutants of its own seeds: raw bytes
    /// (not always UTF-8).
    #[test]
    fn mutated_seeds_keep_the_invariants() {
        let mut m = Mutator::new(0x5eed_5aa1, &SEEDS, TOKENS);
        m.run_bytes(1_000, check);
    }
}
