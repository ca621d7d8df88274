//! The invariants of the WebRTC offer screen on arbitrary bodies — the one
//! copy, shared by the cargo-fuzz target `fuzz/fuzz_targets/webrtc_offer.rs`
//! and by the stable smoke twin (the `#[cfg(test)]` part at the bottom).
//!
//! This file is included twice:
//! - by an ordinary `mod` (`#[cfg(test)]`), as
//!   `carrier::webrtc::sdp::fuzz_tests`, whose parent is the screen itself;
//! - by a `path` attribute in the fuzz target, as `mod invariants`, whose
//!   crate root has `use callgate::carrier::webrtc::sdp::*`.
//!
//! So the screen is reached through `super::`, str0m by its crate name (a
//! dependency of both builds), and the mutator (the dev-dependency
//! `callgate_test_support`) only under `cfg(test)`. Entry point: [`check`].
//!
//! Invariants:
//! - `screen` never panics;
//! - an `Ok` has `opus_pt < 128` and a `remote_ufrag` of 4..=256 ICE
//!   characters (RFC 8445 §5.3: ALPHA, DIGIT, `+`, `/`) found in the body,
//!   and str0m's own parser (`SdpOffer::from_sdp_string`, what the screen
//!   guards) does not panic on the body (it may refuse it);
//! - an `Err` has one of [`KINDS`], a detail, and the status its kind
//!   documents (`413` size, `422` well-formed but unusable, else `400`);
//! - `too_large` exactly for a body over `MAX_OFFER_BYTES`, and under it
//!   `not_utf8` exactly for a body that is not UTF-8.

use super::{MAX_OFFER_BYTES, OfferError, OfferFacts, screen};

/// Every refusal kind the screen may name (metric label, JSON `error`).
pub const KINDS: [&str; 11] = [
    "too_large",
    "not_utf8",
    "too_many_lines",
    "line_too_long",
    "bad_line",
    "no_audio",
    "no_opus",
    "several_audio",
    "not_sendrecv",
    "no_ice_credentials",
    "no_fingerprint",
];

/// Every invariant on one body.
pub fn check(body: &[u8]) {
    match screen(body) {
        Ok(facts) => check_facts(body, &facts),
        Err(e) => check_refusal(body, &e),
    }
}

fn check_facts(body: &[u8], f: &OfferFacts) {
    assert!(body.len() <= MAX_OFFER_BYTES);
    assert!(f.opus_pt < 128, "{f:?}");
    let ice = |b: u8| b.is_ascii_alphanumeric() || b == b'+' || b == b'/';
    let u = &f.remote_ufrag;
    assert!((4..=256).contains(&u.len()) && u.bytes().all(ice), "{f:?}");
    let text = std::str::from_utf8(body).expect("accepted, so UTF-8");
    assert!(text.contains(u.as_str()), "{f:?}");
    let _ = str0m::change::SdpOffer::from_sdp_string(text);
}

fn check_refusal(body: &[u8], e: &OfferError) {
    assert!(KINDS.contains(&e.kind), "{e:?}");
    assert!(!e.detail.is_empty(), "{e:?}");
    let status = match e.kind {
        "too_large" => 413,
        "no_audio" | "no_opus" | "several_audio" | "not_sendrecv" => 422,
        _ => 400,
    };
    assert_eq!(e.status(), status, "{e:?}");
    let too_large = body.len() > MAX_OFFER_BYTES;
    assert_eq!(e.kind == "too_large", too_large, "{e:?}");
    if !too_large {
        let utf8 = std::str::from_utf8(body).is_ok();
        assert_eq!(e.kind == "not_utf8", !utf8, "{e:?}");
    }
}

// ---- the stable smoke twin ----------------------------------------------

#[cfg(test)]
mod smoke {
    //! Mutants of the fuzz target's seeds through [`check`], and the bounds
    //! the mutator's 4 KiB inputs never reach.

    use super::super::{MAX_LINE_BYTES, MAX_LINES};
    use super::*;
    use callgate_test_support::Mutator;

    /// The fuzz target's seeds.
    const SEEDS: [&[u8]; 3] = [
        include_bytes!("../../../../../../fuzz/seeds/webrtc_offer/chrome"),
        include_bytes!("../../../../../../fuzz/seeds/webrtc_offer/no_opus"),
        include_bytes!("../../../../../../fuzz/seeds/webrtc_offer/video_only"),
    ];
    const TOKENS: &[&str] = &[
        "\r\n",
        "\n",
        " ",
        "v=0\r\n",
        "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\n",
        "m=video ",
        "a=rtpmap:",
        "a=rtpmap:96 opus/48000/2\r\n",
        "a=rtpmap:200 opus/48000\r\n",
        "OPUS/48000",
        "a=fmtp:111 useinbandfec=1\r\n",
        "a=ice-ufrag:",
        "a=ice-ufrag:ab\r\n",
        "a=ice-pwd:",
        "a=fingerprint:",
        "+/",
        "é",
    ];

    #[test]
    fn the_seeds_are_what_they_are_named() {
        assert!(screen(SEEDS[0]).is_ok_and(|f| f.opus_pt == 111 && f.fec));
        let kind = |s: &[u8]| screen(s).map_err(|e| e.kind).err();
        assert_eq!(kind(SEEDS[1]), Some("no_opus"));
        assert_eq!(kind(SEEDS[2]), Some("no_audio"));
    }

    #[test]
    fn mutated_seeds_keep_the_invariants() {
        let mut m = Mutator::new(0x0ff3_7e5c, &SEEDS, TOKENS);
        m.run_bytes(3_000, check);
        check(b"");
    }

    #[test]
    fn the_bounds_keep_the_invariants() {
        let chrome = String::from_utf8_lossy(SEEDS[0]).into_owned();
        for n in [MAX_OFFER_BYTES - 1, MAX_OFFER_BYTES, MAX_OFFER_BYTES + 1] {
            let mut body = chrome.clone().into_bytes();
            body.resize(n, b'\n');
            check(&body);
        }
        check(format!("{chrome}{}", "a=x\r\n".repeat(MAX_LINES)).as_bytes());
        check(format!("{chrome}a={}\r\n", "x".repeat(MAX_LINE_BYTES)).as_bytes());
        let ufrag = chrome.replace("Fq3X", &"u".repeat(256));
        assert!(screen(ufrag.as_bytes()).is_ok());
        check(ufrag.as_bytes());
        check(chrome.replace("Fq3X", &"u".repeat(257)).as_bytes());
    }
}
