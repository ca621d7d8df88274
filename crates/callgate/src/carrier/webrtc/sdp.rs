//! The offer screen: what a `POST /v1/webrtc` body must be before str0m
//! parses it. Untrusted input, so it is bounded first (size, lines, line
//! length), then read for the few facts callgate needs: one audio section,
//! `sendrecv` (a conversation: the caller speaks and hears), offering Opus
//! 48 kHz (RFC 7587), whether in-band FEC is allowed, and the ICE
//! credentials and DTLS fingerprint without which no session can start.
//! Every refusal kind is in `docs/webrtc.md`'s error table. Fuzzed
//! (`fuzz/fuzz_targets/webrtc_offer.rs`). [`answer::finish`] makes the
//! answer what the same document shows.

pub mod answer;

/// Largest offer accepted, bytes (a browser's audio offer is ~3 KiB).
pub const MAX_OFFER_BYTES: usize = crate::config::WebrtcConfig::MAX_OFFER_BYTES;
/// Most lines accepted in an offer.
pub const MAX_LINES: usize = 400;
/// Longest line accepted, bytes.
pub const MAX_LINE_BYTES: usize = 1_024;

/// Why an offer was refused: a low-cardinality kind (metric label, JSON
/// `error`) and a detail for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferError {
    pub kind: &'static str,
    pub detail: String,
}

impl OfferError {
    fn new(kind: &'static str, detail: impl Into<String>) -> OfferError {
        OfferError {
            kind,
            detail: detail.into(),
        }
    }

    /// The HTTP status the refusal gets: `422` for a well-formed offer we
    /// cannot take (no Opus), `413` for size, `400` otherwise.
    pub fn status(&self) -> u16 {
        match self.kind {
            "no_opus" | "no_audio" | "several_audio" | "not_sendrecv" => 422,
            "too_large" => 413,
            _ => 400,
        }
    }
}

/// What the screen learned from an acceptable offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferFacts {
    /// The payload type the offer gives Opus 48000/2.
    pub opus_pt: u8,
    /// `useinbandfec=1` on Opus: the browser may send FEC, so a single
    /// lost frame is recovered from the next packet.
    pub fec: bool,
    /// The offer's `a=ice-ufrag` (the browser's half of a STUN USERNAME).
    pub remote_ufrag: String,
}

/// Screens `body`. Never panics; every refusal names its kind.
pub fn screen(body: &[u8]) -> Result<OfferFacts, OfferError> {
    if body.len() > MAX_OFFER_BYTES {
        return Err(OfferError::new(
            "too_large",
            format!("offer is {} bytes; at most {MAX_OFFER_BYTES}", body.len()),
        ));
    }
    let text = std::str::from_utf8(body)
        .map_err(|e| OfferError::new("not_utf8", format!("offer is not UTF-8: {e}")))?;
    let lines = lines(text)?;
    let mut audio = 0_usize;
    let mut in_audio = false;
    let mut seen_media = false;
    let (mut session_dir, mut audio_dir) = (None, None);
    let mut opus_pt = None;
    let mut fmtp = Vec::new();
    let (mut ufrag, mut pwd, mut fingerprint) = (None, false, false);
    for line in lines {
        if let Some(m) = line.strip_prefix("m=") {
            in_audio = m.starts_with("audio ");
            seen_media = true;
            audio += usize::from(in_audio);
            continue;
        }
        let Some(attr) = line.strip_prefix("a=") else {
            continue;
        };
        if let Some(dir) = direction(attr) {
            if !seen_media {
                session_dir = Some(dir);
            } else if in_audio {
                audio_dir = Some(dir);
            }
        }
        if let Some(v) = attr.strip_prefix("ice-ufrag:") {
            ufrag.get_or_insert_with(|| v.trim().to_string());
        }
        pwd |= attr.starts_with("ice-pwd:");
        fingerprint |= attr.starts_with("fingerprint:");
        if !in_audio {
            continue;
        }
        if let Some((pt, codec)) = attr.strip_prefix("rtpmap:").and_then(|r| r.split_once(' '))
            && is_opus(codec)
            && opus_pt.is_none()
        {
            opus_pt = pt.trim().parse::<u8>().ok().filter(|p| *p < 128);
        }
        if let Some(rest) = attr.strip_prefix("fmtp:") {
            fmtp.push(rest.to_string());
        }
    }
    if audio == 0 {
        return Err(OfferError::new(
            "no_audio",
            "the offer has no m=audio section",
        ));
    }
    if audio > 1 {
        return Err(OfferError::new(
            "several_audio",
            format!("the offer has {audio} m=audio sections; a call has one"),
        ));
    }
    // RFC 8866 §6.7: a media-level direction overrides the session's; none
    // at all means sendrecv.
    match audio_dir.or(session_dir).unwrap_or("sendrecv") {
        "sendrecv" => {}
        other => {
            return Err(OfferError::new(
                "not_sendrecv",
                format!(
                    "the audio section is {other}; a call needs sendrecv (the caller speaks and hears the bot)"
                ),
            ));
        }
    }
    let opus_pt = opus_pt.ok_or_else(|| {
        OfferError::new(
            "no_opus",
            "the audio section offers no opus/48000/2 (RFC 7587)",
        )
    })?;
    let ufrag = ufrag.filter(|u| valid_ufrag(u)).ok_or_else(|| {
        OfferError::new(
            "no_ice_credentials",
            "a=ice-ufrag missing or not 4..=256 ICE characters",
        )
    })?;
    if !pwd {
        return Err(OfferError::new("no_ice_credentials", "a=ice-pwd missing"));
    }
    if !fingerprint {
        return Err(OfferError::new(
            "no_fingerprint",
            "a=fingerprint missing (DTLS-SRTP is required)",
        ));
    }
    Ok(OfferFacts {
        opus_pt,
        fec: fec_allowed(&fmtp, opus_pt),
        remote_ufrag: ufrag,
    })
}

fn lines(text: &str) -> Result<Vec<&str>, OfferError> {
    let mut out = Vec::new();
    for line in text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)) {
        if line.is_empty() {
            continue;
        }
        if out.len() == MAX_LINES {
            return Err(OfferError::new(
                "too_many_lines",
                format!("more than {MAX_LINES} lines"),
            ));
        }
        if line.len() > MAX_LINE_BYTES {
            return Err(OfferError::new(
                "line_too_long",
                format!("a line of {} bytes; at most {MAX_LINE_BYTES}", line.len()),
            ));
        }
        let b = line.as_bytes();
        if b.len() < 2 || !b[0].is_ascii_lowercase() || b[1] != b'=' {
            return Err(OfferError::new(
                "bad_line",
                format!("not an SDP line: {:.40}", line),
            ));
        }
        out.push(line);
    }
    if out.first().is_none_or(|l| !l.starts_with("v=0")) {
        return Err(OfferError::new("bad_line", "an SDP offer starts with v=0"));
    }
    Ok(out)
}

/// The direction attribute `attr` is, if it is one.
fn direction(attr: &str) -> Option<&'static str> {
    ["sendrecv", "sendonly", "recvonly", "inactive"]
        .into_iter()
        .find(|d| attr.trim_end() == *d)
}

fn is_opus(codec: &str) -> bool {
    let c = codec.trim().to_ascii_lowercase();
    c == "opus/48000/2" || c == "opus/48000"
}

fn valid_ufrag(u: &str) -> bool {
    (4..=256).contains(&u.len())
        && u.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

fn fec_allowed(fmtp: &[String], pt: u8) -> bool {
    let prefix = format!("{pt} ");
    fmtp.iter()
        .filter_map(|f| f.strip_prefix(&prefix))
        .flat_map(|params| params.split(';'))
        .any(|p| p.trim().eq_ignore_ascii_case("useinbandfec=1"))
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;

    /// An offer the way Chromium writes one for one audio track (trimmed).
    pub const CHROME: &str = "v=0\r\no=- 46117 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n\
a=group:BUNDLE 0\r\na=msid-semantic: WMS\r\n\
m=audio 9 UDP/TLS/RTP/SAVPF 111 63 9 0 8 13 110 126\r\nc=IN IP4 0.0.0.0\r\n\
a=rtcp:9 IN IP4 0.0.0.0\r\na=ice-ufrag:Fq3X\r\na=ice-pwd:s4J3ZhRk0b1zCkQkGmA7lq2k\r\n\
a=ice-options:trickle\r\n\
a=fingerprint:sha-256 6B:8B:F0:65:5F:78:E2:51:3B:AC:6F:F3:3F:46:1B:35:DC:B8:5F:64:1A:24:C2:43:F0:A1:58:D0:A1:2C:19:08\r\n\
a=setup:actpass\r\na=mid:0\r\na=sendrecv\r\na=rtcp-mux\r\n\
a=rtpmap:111 opus/48000/2\r\na=rtcp-fb:111 transport-cc\r\na=fmtp:111 minptime=10;useinbandfec=1\r\n\
a=rtpmap:0 PCMU/8000\r\na=rtpmap:8 PCMA/8000\r\n";

    #[test]
    fn a_chromium_offer_passes_with_its_opus_payload_type_and_fec() {
        let f = screen(CHROME.as_bytes()).unwrap();
        assert_eq!(f.opus_pt, 111);
        assert!(f.fec);
        assert_eq!(f.remote_ufrag, "Fq3X");
    }

    #[test]
    fn an_offer_without_opus_is_a_422() {
        let no_opus = CHROME.replace("a=rtpmap:111 opus/48000/2\r\n", "");
        let e = screen(no_opus.as_bytes()).unwrap_err();
        assert_eq!((e.kind, e.status()), ("no_opus", 422));
    }

    #[test]
    fn opus_outside_the_audio_section_does_not_count() {
        let video = CHROME.replace("m=audio", "m=video");
        assert_eq!(screen(video.as_bytes()).unwrap_err().kind, "no_audio");
    }

    #[test]
    fn each_bound_and_missing_piece_has_its_kind() {
        let big = vec![b'a'; MAX_OFFER_BYTES + 1];
        assert_eq!(screen(&big).unwrap_err().kind, "too_large");
        assert_eq!(screen(&[0xff, 0xfe]).unwrap_err().kind, "not_utf8");
        assert_eq!(screen(b"hello").unwrap_err().kind, "bad_line");
        let many = format!("v=0\r\n{}", "a=x\r\n".repeat(MAX_LINES));
        assert_eq!(screen(many.as_bytes()).unwrap_err().kind, "too_many_lines");
        let long = format!("v=0\r\na={}\r\n", "x".repeat(MAX_LINE_BYTES));
        assert_eq!(screen(long.as_bytes()).unwrap_err().kind, "line_too_long");
        let no_pwd = CHROME.replace("a=ice-pwd:", "a=ice-pw:");
        assert_eq!(
            screen(no_pwd.as_bytes()).unwrap_err().kind,
            "no_ice_credentials"
        );
        let no_fp = CHROME.replace("a=fingerprint:", "a=fingerprin:");
        assert_eq!(screen(no_fp.as_bytes()).unwrap_err().kind, "no_fingerprint");
        let bad_ufrag = CHROME.replace("a=ice-ufrag:Fq3X", "a=ice-ufrag:a b");
        assert_eq!(
            screen(bad_ufrag.as_bytes()).unwrap_err().kind,
            "no_ice_credentials"
        );
    }

    #[test]
    fn an_audio_section_that_is_not_sendrecv_is_a_422() {
        for dir in ["sendonly", "recvonly", "inactive"] {
            let offer = CHROME.replace("a=sendrecv\r\n", &format!("a={dir}\r\n"));
            let e = screen(offer.as_bytes()).unwrap_err();
            assert_eq!((e.kind, e.status()), ("not_sendrecv", 422), "{dir}");
            assert!(e.detail.contains(dir), "{e:?}");
        }
        // The session-level direction counts when the section has none …
        let session = CHROME
            .replace("a=sendrecv\r\n", "")
            .replace("t=0 0\r\n", "t=0 0\r\na=sendonly\r\n");
        assert_eq!(screen(session.as_bytes()).unwrap_err().kind, "not_sendrecv");
        // … and the section's own overrides it (RFC 8866 §6.7).
        let overridden = CHROME.replace("t=0 0\r\n", "t=0 0\r\na=inactive\r\n");
        assert!(screen(overridden.as_bytes()).is_ok());
        // No direction anywhere means sendrecv.
        let none = CHROME.replace("a=sendrecv\r\n", "");
        assert!(screen(none.as_bytes()).is_ok());
    }

    #[test]
    fn a_second_audio_section_is_a_422() {
        let section = &CHROME[CHROME.find("m=audio").unwrap()..];
        let two = format!("{CHROME}{}", section.replace("a=mid:0", "a=mid:1"));
        let e = screen(two.as_bytes()).unwrap_err();
        assert_eq!((e.kind, e.status()), ("several_audio", 422));
    }

    #[test]
    fn every_refusal_kind_is_in_the_documented_error_table() {
        let doc = include_str!("../../../../../docs/webrtc.md");
        for kind in fuzz_tests::KINDS.iter().chain(&["bad_sdp"]) {
            assert!(
                doc.contains(&format!("`{kind}`")),
                "docs/webrtc.md does not name the refusal kind {kind}"
            );
        }
    }

    #[test]
    fn fec_needs_useinbandfec_on_the_opus_payload_type() {
        let off = CHROME.replace("useinbandfec=1", "useinbandfec=0");
        assert!(!screen(off.as_bytes()).unwrap().fec);
        let elsewhere = CHROME.replace("a=fmtp:111", "a=fmtp:63");
        assert!(!screen(elsewhere.as_bytes()).unwrap().fec);
    }
}
