//! Signature vectors and the reference algorithm, checked against
//! [`super`].

use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::Sha256;

use super::*;

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
        let mut values: Vec<&str> = params.iter().filter(|p| p.0 == name).map(|p| p.1).collect();
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
    assert!(verify_signature(token, &[DOC_URL.to_string()], &changed, Some(doc), None).is_err());
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
        check(both, STREAM, SHA256_STREAM, Some("algorithm=HMAC_SHA256x")).map_err(|e| e.kind()),
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
