//! Server frames as the load tool (playing Twilio) reads them:
//! `callgate_load::wire::parse`, and SID parsing of the same text.
//!
//! Invariants: `media`/`mark`/`clear` are accepted only when `streamSid`
//! names our stream (up to hex case); media bytes are exactly the base64
//! decoding of the payload; other events come back as `Unknown` with their
//! name; every error is `Malformed` for our stream; a SID parses only when
//! it is its own display form up to hex case.
#![no_main]

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use callgate_load::wire::{ServerEvent, parse};
use callgate_load::{LoadError, StreamSid};
use libfuzzer_sys::fuzz_target;

#[derive(serde::Deserialize)]
struct Probe {
    event: String,
    #[serde(rename = "streamSid")]
    stream_sid: Option<String>,
    media: Option<Payload>,
    mark: Option<Name>,
}

#[derive(serde::Deserialize)]
struct Payload {
    payload: String,
}

#[derive(serde::Deserialize)]
struct Name {
    name: String,
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let stream = StreamSid::from_bytes([3; 16]);
    let probe = || serde_json::from_str::<Probe>(&text).expect("it parsed, so it has these");
    match parse(&text, stream) {
        Ok(ServerEvent::Unknown(event)) => {
            assert!(!matches!(event.as_str(), "media" | "mark" | "clear"));
            assert_eq!(event, probe().event);
        }
        Ok(routed) => {
            let p = probe();
            let sid = p.stream_sid.expect("a routed event names its stream");
            assert!(sid.starts_with("MZ") && sid.eq_ignore_ascii_case(&stream.to_string()));
            match routed {
                ServerEvent::Media(bytes) => {
                    let payload = p.media.expect("media").payload;
                    assert_eq!(B64.decode(payload).ok(), Some(bytes));
                }
                ServerEvent::Mark(name) => assert_eq!(name, p.mark.expect("mark").name),
                ServerEvent::Clear => assert_eq!(p.event, "clear"),
                ServerEvent::Unknown(_) => unreachable!(),
            }
        }
        Err(LoadError::Malformed { stream: s, .. }) => assert_eq!(s, stream),
        Err(other) => panic!("parse reported {other:?}"),
    }
    if let Ok(sid) = text.parse::<StreamSid>() {
        assert!(text.starts_with("MZ") && sid.to_string().eq_ignore_ascii_case(&text));
    }
});
