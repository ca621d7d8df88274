//! The STT simulator's query validation: `StreamParams::from_query` on an
//! arbitrary `k=v&k=v` string.
//!
//! Invariants: an accepted query has `sample_rate` 8000 or 16000 exactly
//! as sent, the encoding it named, `utterance_end_ms` only with interim
//! results, endpointing off only for `endpointing=false`, and mono; a
//! refusal is `BadParam` naming a known parameter that was sent (or a
//! required one that was missing).
#![no_main]

use std::collections::HashMap;

use callgate_sim::stt::SttSimRefusal;
use callgate_sim::stt::params::{SimEncoding, StreamParams};
use libfuzzer_sys::fuzz_target;

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

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let q: HashMap<String, String> = text
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    match StreamParams::from_query(&q) {
        Ok(p) => {
            assert!(matches!(p.sample_rate, 8_000 | 16_000));
            assert_eq!(q.get("sample_rate"), Some(&p.sample_rate.to_string()));
            let named = match p.encoding {
                SimEncoding::Mulaw => "mulaw",
                SimEncoding::Alaw => "alaw",
                SimEncoding::Linear16 => "linear16",
            };
            assert_eq!(q.get("encoding").map(String::as_str), Some(named));
            assert!(p.utterance_end_ms.is_none() || p.interim_results);
            let off = q.get("endpointing").map(String::as_str) == Some("false");
            assert_eq!(p.endpointing_ms.is_none(), off);
            assert!(q.get("channels").is_none_or(|c| c == "1"));
        }
        Err(SttSimRefusal::BadParam { param, .. }) => {
            assert!(KNOWN_PARAMS.contains(&param));
            assert!(q.contains_key(param) || matches!(param, "encoding" | "sample_rate"));
        }
        Err(other) => panic!("validation refused with {other:?}"),
    }
});
