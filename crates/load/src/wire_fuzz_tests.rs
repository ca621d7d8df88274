//! Smoke fuzz of the load tool's parser of server frames: the stable twin
//! of the cargo-fuzz target `fuzz/fuzz_targets/load_wire.rs`. Mutated
//! server → Twilio frames must be routed only to the stream they name and
//! decoded exactly, and SIDs must parse only in their exact shape.

use super::*;
use crate::ids::AccountSid;

#[path = "../../../fuzz/smoke/mutator.rs"]
mod mutator;

use mutator::{Mutator, Rng};

const ITERATIONS: usize = 4_000;
const TOKENS: &[&str] = &[
    "\"event\"",
    "\"media\"",
    "\"mark\"",
    "\"clear\"",
    "\"streamSid\"",
    "\"payload\"",
    "\"name\"",
    "\"MZ+3+3+3+3+3+3+3+3+3+3+3+3+3+3+3+3\"",
    "\"MZ03030303030303030303030303030303\"",
    "\"//8=\"",
];

fn stream() -> StreamSid {
    StreamSid::from_bytes([3; 16])
}

/// The fields the invariants are checked against, read independently of
/// the parser.
#[derive(Deserialize)]
struct Probe {
    event: String,
    #[serde(rename = "streamSid")]
    stream_sid: Option<String>,
    media: Option<IncomingMedia>,
    mark: Option<IncomingMark>,
}

fn corpus() -> Vec<String> {
    let s = stream();
    let ids = CallIds {
        account: AccountSid::from_bytes([1; 16]),
        call: CallSid::from_bytes([2; 16]),
        stream: s,
    };
    vec![
        format!(r#"{{"event":"media","streamSid":"{s}","media":{{"payload":"//8="}},"extra":1}}"#),
        format!(r#"{{"event":"mark","streamSid":"{s}","mark":{{"name":"turn-2"}}}}"#),
        format!(r#"{{"event":"clear","streamSid":"{s}"}}"#),
        format!(
            r#"{{"event":"clear","streamSid":"{}"}}"#,
            StreamSid::from_bytes([9; 16])
        ),
        r#"{"event":"dance"}"#.to_owned(),
        media(7, s, 6, 100, &[0xFF; 16]),
        mark(9, s, "turn-1"),
        start(&ids, &[("tenant".into(), "acme".into())]),
    ]
}

/// What every parse promises, whatever the frame.
fn check_parse(text: &str, stream: StreamSid) {
    let result = parse(text, stream);
    let probe = || serde_json::from_str::<Probe>(text).expect("it parsed, so it has these");
    match &result {
        Ok(ServerEvent::Unknown(event)) => {
            assert!(!matches!(event.as_str(), "media" | "mark" | "clear"));
            assert_eq!(*event, probe().event);
        }
        Ok(routed) => {
            let p = probe();
            let sid = p.stream_sid.expect("a routed event names its stream");
            assert!(sid.eq_ignore_ascii_case(&stream.to_string()) && sid.starts_with("MZ"));
            match routed {
                ServerEvent::Media(bytes) => {
                    let payload = p.media.expect("media").payload;
                    assert_eq!(B64.decode(payload).as_ref(), Ok(bytes));
                }
                ServerEvent::Mark(name) => assert_eq!(*name, p.mark.expect("mark").name),
                ServerEvent::Clear => assert_eq!(p.event, "clear"),
                ServerEvent::Unknown(_) => unreachable!("matched above"),
            }
        }
        Err(LoadError::Malformed { stream: s, .. }) => assert_eq!(*s, stream),
        Err(other) => panic!("parse reported {other:?}"),
    }
}

#[test]
fn mutated_server_frames_are_routed_and_decoded_exactly() {
    let mut m = Mutator::new(0x10ad, &corpus(), TOKENS);
    m.run_text(ITERATIONS, |text| check_parse(text, stream()));
}

#[test]
fn sids_parse_only_in_their_exact_shape() {
    let mut rng = Rng::new(9);
    let mut bytes = [0u8; 16];
    for _ in 0..2_000 {
        bytes.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
        let sid = StreamSid::from_bytes(bytes);
        let text = sid.to_string();
        assert_eq!(text.parse(), Ok(sid));
        // Mutate one character of the text form: it either still reads as
        // the same characters (hex case) or is refused.
        let mut mutated = text.into_bytes();
        let i = rng.below(mutated.len());
        mutated[i] = *rng.pick(b"+-0aAfFgG \xC3");
        let mutated = String::from_utf8_lossy(&mutated).into_owned();
        if let Ok(parsed) = mutated.parse::<StreamSid>() {
            assert!(
                parsed.to_string().eq_ignore_ascii_case(&mutated),
                "{mutated}"
            );
            assert!(mutated.starts_with("MZ"));
        }
    }
    assert!(
        "MZ+3+3+3+3+3+3+3+3+3+3+3+3+3+3+3+3"
            .parse::<StreamSid>()
            .is_err()
    );
}
