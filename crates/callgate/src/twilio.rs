//! Twilio Media Streams wire format (bidirectional `<Connect><Stream>`).
//!
//! Sans-IO: [`parse`] turns one text frame from the carrier into an
//! [`Inbound`] event or a [`WireError`] saying exactly what was wrong; the
//! `*_msg` functions build our outbound frames. Only this module and the
//! ingress adapter know Twilio JSON; the call actor sees domain events.
//!
//! [`verify_signature`] decides whether an upgrade is signed by Twilio
//! (HMAC-SHA1 with the auth token, or a SharedKey's HMAC-SHA256), from the
//! URL candidates and the two header values; the ingress only collects them.
//!
//! Leniency rules from PROTOCOLS.md: counters may be strings or numbers,
//! unknown events and unknown fields are ignored, `streamSid` is also
//! accepted as `stream_sid`.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Deserializer};

/// One event from the carrier.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    Connected,
    Start(Start),
    Media(Media),
    Dtmf {
        digit: String,
    },
    Mark {
        name: String,
    },
    Stop,
    /// An event type we do not handle; ignored by the caller (counted).
    Unknown {
        event: String,
    },
}

/// The `start` event.
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    pub stream_sid: String,
    pub account_sid: String,
    pub call_sid: String,
    pub custom_parameters: BTreeMap<String, String>,
    pub media_format: MediaFormat,
}

/// `start.mediaFormat`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MediaFormat {
    pub encoding: String,
    #[serde(deserialize_with = "lenient_u64")]
    pub sample_rate: u64,
    #[serde(default = "one", deserialize_with = "lenient_u64")]
    pub channels: u64,
}

fn one() -> u64 {
    1
}

impl MediaFormat {
    /// Whether this is the only format Twilio streams: μ-law, 8 kHz, mono.
    pub fn is_twilio_mulaw(&self) -> bool {
        self.encoding.eq_ignore_ascii_case("audio/x-mulaw")
            && self.sample_rate == 8_000
            && self.channels == 1
    }
}

/// A `media` event, payload decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Media {
    pub track: Option<String>,
    pub chunk: Option<u64>,
    pub timestamp_ms: Option<u64>,
    pub payload: Vec<u8>,
}

/// Why a carrier frame was refused. Each is a protocol violation by the
/// carrier (source: caller side) and closes that one stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    #[error("invalid JSON: {0}")]
    InvalidJson(String),
    #[error("`{event}` event without its `{field}` object")]
    MissingBody { event: String, field: &'static str },
    #[error("media payload is not valid base64")]
    InvalidBase64,
    #[error("media payload of {len} bytes exceeds the {max}-byte limit")]
    PayloadTooLarge { len: usize, max: usize },
    #[error("WebSocket message larger than the configured limit")]
    MessageTooLarge,
    #[error("binary frame (media streams send JSON text)")]
    BinaryFrame,
}

impl WireError {
    /// A low-cardinality label for metrics and the ledger.
    pub fn kind(&self) -> &'static str {
        match self {
            WireError::InvalidJson(_) => "invalid_json",
            WireError::MissingBody { .. } => "missing_body",
            WireError::InvalidBase64 => "invalid_base64",
            WireError::PayloadTooLarge { .. } => "payload_too_large",
            WireError::MessageTooLarge => "message_too_large",
            WireError::BinaryFrame => "binary_frame",
        }
    }
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    event: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    media: Option<MediaBody<'a>>,
    start: Option<StartBody>,
    mark: Option<NameBody>,
    dtmf: Option<DtmfBody>,
}

#[derive(Deserialize)]
struct MediaBody<'a> {
    track: Option<String>,
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    chunk: Option<u64>,
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    timestamp: Option<u64>,
    #[serde(borrow)]
    payload: std::borrow::Cow<'a, str>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StartBody {
    #[serde(alias = "stream_sid")]
    stream_sid: String,
    #[serde(default)]
    account_sid: String,
    #[serde(default)]
    call_sid: String,
    #[serde(default)]
    custom_parameters: BTreeMap<String, serde_json::Value>,
    media_format: MediaFormat,
}

#[derive(Deserialize)]
struct NameBody {
    name: String,
}

#[derive(Deserialize)]
struct DtmfBody {
    digit: String,
}

/// Parses one text frame from the carrier.
pub fn parse(text: &str, max_payload: usize) -> Result<Inbound, WireError> {
    parse_with(text, max_payload, Audio::Decode)
}

/// Whether `media` payloads are decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audio {
    Decode,
    /// The audio is not used (the call is queued or being refused): only
    /// its size is checked, and `Media.payload` is left empty.
    Discard,
}

/// Parses one text frame, decoding or discarding audio.
pub fn parse_with(text: &str, max_payload: usize, audio: Audio) -> Result<Inbound, WireError> {
    let env: Envelope<'_> =
        serde_json::from_str(text).map_err(|e| WireError::InvalidJson(e.to_string()))?;
    let missing = |field| WireError::MissingBody {
        event: env.event.to_string(),
        field,
    };
    Ok(match env.event.as_ref() {
        "connected" => Inbound::Connected,
        "start" => Inbound::Start(start_from(env.start.ok_or_else(|| missing("start"))?)),
        "media" => Inbound::Media(media_from(
            env.media.ok_or_else(|| missing("media"))?,
            max_payload,
            audio,
        )?),
        "dtmf" => Inbound::Dtmf {
            digit: env.dtmf.ok_or_else(|| missing("dtmf"))?.digit,
        },
        "mark" => Inbound::Mark {
            name: env.mark.ok_or_else(|| missing("mark"))?.name,
        },
        "stop" => Inbound::Stop,
        other => Inbound::Unknown {
            event: other.chars().take(32).collect(),
        },
    })
}

fn start_from(b: StartBody) -> Start {
    let custom_parameters = b
        .custom_parameters
        .into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => (k, s),
            other => (k, other.to_string()),
        })
        .collect();
    Start {
        stream_sid: b.stream_sid,
        account_sid: b.account_sid,
        call_sid: b.call_sid,
        custom_parameters,
        media_format: b.media_format,
    }
}

fn media_from(b: MediaBody<'_>, max_payload: usize, audio: Audio) -> Result<Media, WireError> {
    // base64 expands 3 bytes to 4 characters: refuse before decoding.
    let max_chars = max_payload.div_ceil(3) * 4;
    if b.payload.len() > max_chars {
        // Rounded up so a malformed length never reports `len <= max`.
        return Err(WireError::PayloadTooLarge {
            len: b.payload.len().div_ceil(4) * 3,
            max: max_payload,
        });
    }
    let payload = match audio {
        Audio::Decode => B64
            .decode(b.payload.as_bytes())
            .map_err(|_| WireError::InvalidBase64)?,
        Audio::Discard => Vec::new(),
    };
    if payload.len() > max_payload {
        return Err(WireError::PayloadTooLarge {
            len: payload.len(),
            max: max_payload,
        });
    }
    Ok(Media {
        track: b.track,
        chunk: b.chunk,
        timestamp_ms: b.timestamp,
        payload,
    })
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Num {
    N(u64),
    S(String),
}

fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match Num::deserialize(d)? {
        Num::N(n) => Ok(n),
        Num::S(s) => s.trim().parse().map_err(serde::de::Error::custom),
    }
}

fn lenient_opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(match Option::<Num>::deserialize(d)? {
        None => None,
        Some(Num::N(n)) => Some(n),
        Some(Num::S(s)) => s.trim().parse().ok(),
    })
}

/// Builds the outbound frames of one stream. The stream id comes from the
/// carrier, so it is JSON-escaped once here; media frames — fifty a second
/// per call — are then assembled without building a JSON tree.
#[derive(Debug, Clone)]
pub struct Outbound {
    /// The stream id as a JSON string literal, quotes included.
    sid: String,
}

impl Outbound {
    pub fn new(stream_sid: &str) -> Self {
        let sid = serde_json::to_string(stream_sid).unwrap_or_else(|_| "\"\"".to_string());
        Outbound { sid }
    }

    /// `media` frame carrying μ-law audio to play.
    pub fn media(&self, payload: &[u8]) -> String {
        let mut s = String::with_capacity(60 + self.sid.len() + payload.len().div_ceil(3) * 4);
        s.push_str(r#"{"event":"media","streamSid":"#);
        s.push_str(&self.sid);
        s.push_str(r#","media":{"payload":""#);
        B64.encode_string(payload, &mut s);
        s.push_str("\"}}");
        s
    }

    /// `mark` frame: echoed by the carrier once the audio before it has played.
    pub fn mark(&self, name: &str) -> String {
        let name = serde_json::to_string(name).unwrap_or_else(|_| "\"\"".to_string());
        format!(
            r#"{{"event":"mark","streamSid":{},"mark":{{"name":{name}}}}}"#,
            self.sid
        )
    }

    /// `clear` frame: drop all audio buffered at the carrier (barge-in).
    pub fn clear(&self) -> String {
        format!(r#"{{"event":"clear","streamSid":{}}}"#, self.sid)
    }
}

/// `media` frame carrying μ-law audio to play.
pub fn media_msg(stream_sid: &str, payload: &[u8]) -> String {
    Outbound::new(stream_sid).media(payload)
}

/// `mark` frame: echoed by the carrier once the audio before it has played.
pub fn mark_msg(stream_sid: &str, name: &str) -> String {
    Outbound::new(stream_sid).mark(name)
}

/// `clear` frame: drop all audio buffered at the carrier (barge-in).
pub fn clear_msg(stream_sid: &str) -> String {
    Outbound::new(stream_sid).clear()
}

#[path = "twilio_signature.rs"]
mod signature;
pub use signature::*;

#[cfg(test)]
#[path = "twilio_fuzz_tests.rs"]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use hmac::{Hmac, Mac};
    use sha1::Sha1;
    use sha2::Sha256;

    const START: &str = r#"{"event":"start","sequenceNumber":"1","streamSid":"MZ1","start":{"streamSid":"MZ1","accountSid":"AC1","callSid":"CA1","tracks":["inbound"],"customParameters":{"tenant":"acme","n":3},"mediaFormat":{"encoding":"audio/x-mulaw","sampleRate":8000,"channels":1}}}"#;

    #[test]
    fn parses_the_documented_sequence() {
        assert_eq!(
            parse(
                r#"{"event":"connected","protocol":"Call","version":"1.0.0"}"#,
                160
            ),
            Ok(Inbound::Connected)
        );
        let Ok(Inbound::Start(s)) = parse(START, 160) else {
            panic!()
        };
        assert_eq!((s.stream_sid.as_str(), s.call_sid.as_str()), ("MZ1", "CA1"));
        assert_eq!(s.custom_parameters["tenant"], "acme");
        assert_eq!(s.custom_parameters["n"], "3");
        assert!(s.media_format.is_twilio_mulaw());
        let media = format!(
            r#"{{"event":"media","sequenceNumber":"2","streamSid":"MZ1","media":{{"track":"inbound","chunk":"1","timestamp":"5","payload":"{}"}}}}"#,
            B64.encode([0xFFu8; 160])
        );
        let Ok(Inbound::Media(m)) = parse(&media, 160) else {
            panic!()
        };
        assert_eq!(
            (m.chunk, m.timestamp_ms, m.payload.len()),
            (Some(1), Some(5), 160)
        );
        assert_eq!(
            parse(
                r#"{"event":"mark","sequenceNumber":"9","streamSid":"MZ1","mark":{"name":"turn-1"}}"#,
                160
            ),
            Ok(Inbound::Mark {
                name: "turn-1".into()
            })
        );
        assert_eq!(
            parse(
                r#"{"event":"dtmf","streamSid":"MZ1","dtmf":{"track":"inbound_track","digit":"5"}}"#,
                160
            ),
            Ok(Inbound::Dtmf { digit: "5".into() })
        );
        assert_eq!(
            parse(
                r#"{"event":"stop","stop":{"accountSid":"AC1","callSid":"CA1"}}"#,
                160
            ),
            Ok(Inbound::Stop)
        );
    }

    #[test]
    fn numbers_may_be_numbers_and_unknown_events_are_kept_apart() {
        let m = r#"{"event":"media","media":{"chunk":7,"timestamp":140,"payload":""}}"#;
        let Ok(Inbound::Media(m)) = parse(m, 160) else {
            panic!()
        };
        assert_eq!((m.chunk, m.timestamp_ms), (Some(7), Some(140)));
        assert_eq!(
            parse(r#"{"event":"hologram","x":1}"#, 160),
            Ok(Inbound::Unknown {
                event: "hologram".into()
            })
        );
    }

    #[test]
    fn bad_frames_say_what_is_wrong() {
        assert!(matches!(
            parse("{nope", 160),
            Err(WireError::InvalidJson(_))
        ));
        assert!(matches!(
            parse(r#"{"media":{}}"#, 160),
            Err(WireError::InvalidJson(_))
        ));
        assert!(matches!(
            parse(r#"{"event":"media"}"#, 160),
            Err(WireError::MissingBody { field: "media", .. })
        ));
        assert_eq!(
            parse(r#"{"event":"media","media":{"payload":"!!!!"}}"#, 160),
            Err(WireError::InvalidBase64)
        );
        let big = format!(
            r#"{{"event":"media","media":{{"payload":"{}"}}}}"#,
            B64.encode([0u8; 2_000])
        );
        assert!(matches!(
            parse(&big, 1_600),
            Err(WireError::PayloadTooLarge { .. })
        ));
    }

    #[test]
    fn outbound_frames_have_twilios_shape() {
        let v: serde_json::Value = serde_json::from_str(&media_msg("MZ1", &[0xFF; 160])).unwrap();
        assert_eq!(v["event"], "media");
        assert_eq!(v["streamSid"], "MZ1");
        assert_eq!(v["media"]["payload"].as_str().unwrap().len(), 216);
        let v: serde_json::Value = serde_json::from_str(&mark_msg("MZ1", "turn-3")).unwrap();
        assert_eq!(v["mark"]["name"], "turn-3");
        let v: serde_json::Value = serde_json::from_str(&clear_msg("MZ1")).unwrap();
        assert_eq!(v["event"], "clear");
        let odd = "MZ\"quoted\\";
        let v: serde_json::Value = serde_json::from_str(&media_msg(odd, &[1, 2, 3])).unwrap();
        assert_eq!(v["streamSid"], odd, "carrier-supplied ids are escaped");
        let v: serde_json::Value = serde_json::from_str(&mark_msg(odd, "a\"b")).unwrap();
        assert_eq!(v["mark"]["name"], "a\"b");
    }

    // Signature vectors. `openssl` lines are how the literals were made,
    // independently of this crate:
    //   printf '%s' "$URL" | openssl dgst -sha1 -hmac "$KEY" -binary | base64

    const STREAM: &str = "wss://voice.example.com/v1/media-stream";
    const STREAM_443: &str = "wss://voice.example.com:443/v1/media-stream";
    const TOKEN: &str = "s3cret";
    const SHARED: &str = "shared-s3cret";
    const SHA256_SETTINGS: &str = "key=KS00000000000000000000000000000000,algorithm=HMAC_SHA256";
    /// openssl: HMAC-SHA1("s3cret", STREAM).
    const SHA1_STREAM: &str = "D6N7M1/tEUyi72Xwb3SHkjiEpFk=";
    /// openssl: HMAC-SHA1("s3cret", STREAM_443).
    const SHA1_STREAM_443: &str = "+8/fS8Oh3NQfeErv/4nLNhaKda0=";
    /// openssl: HMAC-SHA256("shared-s3cret", STREAM).
    const SHA256_STREAM: &str = "egEOAzB6NqVL5lQZCw1cHw852KrtmYTieTzOKFAsfSQ=";
    /// openssl: HMAC-SHA256("shared-s3cret", STREAM_443).
    const SHA256_STREAM_443: &str = "JICO0xd5g1GWHWj3B8FBWF/Z13CDN1/dwbD9mXMVk8c=";

    /// Twilio's worked example (auth token 12345), as in its security docs
    /// and the test suite of its Python helper library.
    const DOC_URL: &str = "https://mycompany.com/myapp.php?foo=1&bar=2";
    const DOC_PARAMS: [(&str, &str); 5] = [
        ("CallSid", "CA1234567890ABCDE"),
        ("Digits", "1234"),
        ("From", "+14158675309"),
        ("To", "+18005551212"),
        ("Caller", "+14158675309"),
    ];

    /// Twilio's documented algorithm written out again with the `hmac`
    /// crate directly: URL, then the parameters sorted by name (values of
    /// a repeated name sorted, duplicates once), keyed HMAC, base64.
    fn reference(algorithm: Algorithm, key: &str, url: &str, params: &[(&str, &str)]) -> String {
        let mut names: Vec<&str> = params.iter().map(|p| p.0).collect();
        names.sort();
        names.dedup();
        let mut data = url.to_string();
        for name in names {
            let mut values: Vec<&str> =
                params.iter().filter(|p| p.0 == name).map(|p| p.1).collect();
            values.sort();
            values.dedup();
            for v in values {
                data.push_str(name);
                data.push_str(v);
            }
        }
        let digest = match algorithm {
            Algorithm::HmacSha1 => {
                let mut m = Hmac::<Sha1>::new_from_slice(key.as_bytes()).unwrap();
                m.update(data.as_bytes());
                m.finalize().into_bytes().to_vec()
            }
            Algorithm::HmacSha256 => {
                let mut m = Hmac::<Sha256>::new_from_slice(key.as_bytes()).unwrap();
                m.update(data.as_bytes());
                m.finalize().into_bytes().to_vec()
            }
        };
        B64.encode(digest)
    }

    fn keys<'a>(token: Option<&'a str>, shared: Option<&'a str>) -> SigningKeys<'a> {
        SigningKeys {
            auth_token: token,
            shared_key_secret: shared,
        }
    }

    fn check(
        keys: SigningKeys<'_>,
        url: &str,
        sig: &str,
        settings: Option<&str>,
    ) -> Result<Signer, SignatureError> {
        verify_signature(keys, &[url.to_string()], &[], Some(sig), settings)
    }

    #[test]
    fn the_vectors_are_what_the_reference_and_signer_compute() {
        use Algorithm::{HmacSha1, HmacSha256};
        for (alg, key, url, want) in [
            (HmacSha1, TOKEN, STREAM, SHA1_STREAM),
            (HmacSha1, TOKEN, STREAM_443, SHA1_STREAM_443),
            (HmacSha256, SHARED, STREAM, SHA256_STREAM),
            (HmacSha256, SHARED, STREAM_443, SHA256_STREAM_443),
        ] {
            assert_eq!(reference(alg, key, url, &[]), want, "{alg:?} {url}");
            assert_eq!(sign_with(alg, key, url, &[]), want, "{alg:?} {url}");
        }
        assert_eq!(sign(TOKEN, STREAM), SHA1_STREAM);
    }

    #[test]
    fn twilios_published_vectors_validate() {
        // The documented example, and the with/without-port vectors of the
        // twilio-python test suite (port 443 added, :1234 removed, http).
        let doc = "RSOYDt4T1cUTdK1PDd93/VVr8B8=";
        assert_eq!(
            reference(Algorithm::HmacSha1, "12345", DOC_URL, &DOC_PARAMS),
            doc
        );
        assert_eq!(
            sign_with(Algorithm::HmacSha1, "12345", DOC_URL, &DOC_PARAMS),
            doc
        );
        let token = keys(Some("12345"), None);
        let ok = |url: &str, sig: &str| {
            verify_signature(token, &[url.to_string()], &DOC_PARAMS, Some(sig), None)
        };
        assert_eq!(ok(DOC_URL, doc), Ok(Signer::AuthToken));
        assert_eq!(
            ok("https://mycompany.com:1234/myapp.php?foo=1&bar=2", doc),
            Ok(Signer::AuthToken)
        );
        assert_eq!(
            ok(DOC_URL, "kvajT1Ptam85bY51eRf/AJRuM3w="),
            Ok(Signer::AuthToken)
        );
        let http = "http://mycompany.com/myapp.php?foo=1&bar=2";
        assert_eq!(
            ok(http, "0ZXoZLH/DfblKGATFgpif+LLRf4="),
            Ok(Signer::AuthToken)
        );
        let http_1234 = "http://mycompany.com:1234/myapp.php?foo=1&bar=2";
        assert_eq!(
            ok(http_1234, "Zmvh+3yNM1Phv2jhDCwEM3q5ebU="),
            Ok(Signer::AuthToken)
        );
        // Parameters are signed: one changed value and the signature fails.
        let mut changed = DOC_PARAMS;
        changed[1].1 = "1235";
        assert!(
            verify_signature(token, &[DOC_URL.to_string()], &changed, Some(doc), None).is_err()
        );
        // Repeated names sort by value and duplicates count once.
        let dup = [
            ("Digits", "5678"),
            ("Sid", "CA123"),
            ("Digits", "1234"),
            ("Digits", "1234"),
        ];
        assert_eq!(signed_string("u", &dup), "uDigits1234Digits5678SidCA123");
    }

    #[test]
    fn sha1_streams_validate_with_and_without_the_port() {
        let token = keys(Some(TOKEN), None);
        for url in [STREAM, STREAM_443] {
            for sig in [SHA1_STREAM, SHA1_STREAM_443] {
                assert_eq!(
                    check(token, url, sig, None),
                    Ok(Signer::AuthToken),
                    "{url} {sig}"
                );
            }
        }
        // ws:// defaults to 80, and an explicit other port is removed.
        let ws = "ws://voice.example.com/v1/media-stream";
        let ws80 = reference(
            Algorithm::HmacSha1,
            TOKEN,
            "ws://voice.example.com:80/v1/media-stream",
            &[],
        );
        assert!(check(token, ws, &ws80, None).is_ok());
        assert!(
            check(
                token,
                "wss://voice.example.com:8443/v1/media-stream",
                SHA1_STREAM,
                None
            )
            .is_ok()
        );
        // …but 443 is not ws://'s port nor 80 wss://'s.
        let ws443 = reference(
            Algorithm::HmacSha1,
            TOKEN,
            "ws://voice.example.com:443/v1/media-stream",
            &[],
        );
        assert!(check(token, ws, &ws443, None).is_err());
        let wss80 = reference(
            Algorithm::HmacSha1,
            TOKEN,
            "wss://voice.example.com:80/v1/media-stream",
            &[],
        );
        assert!(check(token, STREAM, &wss80, None).is_err());
        // A signature for another host or path is refused.
        let other = reference(
            Algorithm::HmacSha1,
            TOKEN,
            "wss://voice.example.org/v1/media-stream",
            &[],
        );
        assert!(check(token, STREAM, &other, None).is_err());
    }

    #[test]
    fn sha256_shared_key_streams_validate_with_and_without_the_port() {
        let both = keys(Some(TOKEN), Some(SHARED));
        let sha256 = Ok(Signer::SharedKey(Algorithm::HmacSha256));
        for url in [STREAM, STREAM_443] {
            for sig in [SHA256_STREAM, SHA256_STREAM_443] {
                assert_eq!(
                    check(both, url, sig, Some(SHA256_SETTINGS)),
                    sha256,
                    "{url} {sig}"
                );
            }
        }
        // Only the shared key configured: still fine.
        assert_eq!(
            check(
                keys(None, Some(SHARED)),
                STREAM,
                SHA256_STREAM,
                Some(SHA256_SETTINGS)
            ),
            sha256
        );
        // The settings header's spelling is lenient; a SharedKey may use SHA-1.
        let loose = " Algorithm = hmac-sha256 , key=KS1";
        assert_eq!(check(both, STREAM, SHA256_STREAM, Some(loose)), sha256);
        let sha1_shared = reference(Algorithm::HmacSha1, SHARED, STREAM, &[]);
        assert_eq!(
            check(
                both,
                STREAM,
                &sha1_shared,
                Some("key=KS1,algorithm=HMAC_SHA1")
            ),
            Ok(Signer::SharedKey(Algorithm::HmacSha1))
        );
    }

    #[test]
    fn wrong_signatures_and_wrong_keys_are_refused() {
        let both = keys(Some(TOKEN), Some(SHARED));
        let mismatch = |algorithm, key| Err(SignatureError::Mismatch { algorithm, key });
        let sha1_token = mismatch(Algorithm::HmacSha1, "the auth token");
        let sha256_shared = mismatch(Algorithm::HmacSha256, "the SharedKey secret");
        // Wrong signature.
        assert_eq!(check(both, STREAM, "garbage", None), sha1_token);
        assert_eq!(
            check(both, STREAM, "AAAAAAAAAAAAAAAAAAAAAAAAAAA=", None),
            sha1_token
        );
        assert_eq!(
            check(both, STREAM, SHA256_STREAM, Some("algorithm=HMAC_SHA256x"))
                .map_err(|e| e.kind()),
            Err("unsupported_algorithm")
        );
        // Wrong key: the other secret, or the right one under another name.
        let other = reference(Algorithm::HmacSha256, "guess", STREAM, &[]);
        assert_eq!(
            check(both, STREAM, &other, Some(SHA256_SETTINGS)),
            sha256_shared
        );
        assert_eq!(
            check(both, STREAM, SHA1_STREAM, Some(SHA256_SETTINGS)),
            sha256_shared
        );
        assert_eq!(check(both, STREAM, SHA256_STREAM, None), sha1_token);
        let token_as_256 = reference(Algorithm::HmacSha256, TOKEN, STREAM, &[]);
        assert_eq!(
            check(both, STREAM, &token_as_256, Some(SHA256_SETTINGS)),
            sha256_shared
        );
        assert_eq!(
            check(keys(Some("other"), None), STREAM, SHA1_STREAM, None),
            sha1_token
        );
        // Empty or absent signature.
        assert_eq!(check(both, STREAM, "", None), Err(SignatureError::Missing));
        assert_eq!(
            check(both, STREAM, "  ", Some(SHA256_SETTINGS)),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            verify_signature(both, &[STREAM.into()], &[], None, None),
            Err(SignatureError::Missing)
        );
        // A secret that is not configured is never assumed.
        assert_eq!(
            check(
                keys(Some(TOKEN), None),
                STREAM,
                SHA256_STREAM,
                Some(SHA256_SETTINGS)
            ),
            Err(SignatureError::NoSharedKey)
        );
        assert_eq!(
            check(keys(None, Some(SHARED)), STREAM, SHA1_STREAM, None),
            Err(SignatureError::NoAuthToken)
        );
        assert_eq!(
            check(both, STREAM, SHA256_STREAM, Some("key=KS1")),
            Err(SignatureError::UnsupportedAlgorithm(String::new()))
        );
        // A blank settings header is no header (as in Twilio's validator).
        assert_eq!(
            check(both, STREAM, SHA1_STREAM, Some(" ")),
            Ok(Signer::AuthToken)
        );
    }

    #[test]
    fn url_candidates_follow_twilios_port_rule() {
        assert_eq!(
            url_candidates(STREAM),
            [
                STREAM,
                STREAM_443,
                "wss://voice.example.com/v1/media-stream/",
                "wss://voice.example.com:443/v1/media-stream/"
            ]
        );
        assert_eq!(
            url_candidates("https://u:p@h:1234/x?q=1")[..2],
            ["https://u:p@h:1234/x?q=1", "https://u:p@h/x?q=1"]
        );
        assert_eq!(
            url_candidates("ws://[::1]:8080")[..2],
            ["ws://[::1]:8080", "ws://[::1]"]
        );
        assert_eq!(url_candidates("http://h")[..2], ["http://h", "http://h:80"]);
        // Unparseable forms are still tried as given.
        assert_eq!(url_candidates("nonsense"), ["nonsense", "nonsense/"]);
        assert_eq!(url_candidates("wss://h:x/p")[0], "wss://h:x/p");
        assert_eq!(
            url_candidates("ftp://h/p")[..2],
            ["ftp://h/p", "ftp://h/p/"]
        );
    }

    #[test]
    fn a_blank_or_padded_shared_key_secret_is_refused_at_load() {
        let mut cfg = crate::config::Config::default();
        cfg.twilio.shared_key_secret = Some(SHARED.into());
        cfg.validate().unwrap();
        for bad in ["", " x", "x\n"] {
            cfg.twilio.shared_key_secret = Some(bad.into());
            let e = cfg.validate().unwrap_err().to_string();
            assert!(e.contains("twilio.shared_key_secret"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn signatures_validate_with_and_without_a_trailing_slash() {
        let url = "wss://voice.example.com/v1/media-stream";
        let sig = sign("secret", url);
        assert!(signature_is_valid("secret", url, &sig));
        assert!(!signature_is_valid("other", url, &sig));
        assert!(!signature_is_valid("secret", url, "garbage"));
        let slashed = sign("secret", &format!("{url}/"));
        assert!(signature_is_valid("secret", url, &slashed));
        let slashed_443 = sign("secret", "wss://voice.example.com:443/v1/media-stream/");
        assert!(signature_is_valid("secret", url, &slashed_443));
    }
}
