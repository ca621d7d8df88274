//! Twilio request signatures (`X-Twilio-Signature`), as Twilio computes
//! them: HMAC-SHA1 with the auth token, or HMAC-SHA256 with a SharedKey
//! secret when `X-Twilio-Webhooks-Signature-Settings` announces it; the URL
//! accepted as signed with and without its port. Sans-IO.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::Sha256;

// ---------------------------------------------------------------------------
// Request signatures
// ---------------------------------------------------------------------------
//
// How Twilio signs a request (docs: twilio.com/docs/usage/webhooks/webhooks-security
// and …/webhook-shared-keys; reference validators: twilio-python
// `twilio/request_validator.py`, twilio-node `src/webhooks/webhooks.ts`):
//
// * The signed string is the full URL Twilio requested (scheme, host, port if
//   any, path, query) followed, for a form POST, by every parameter as
//   `name` + `value` with no separators, sorted by name (repeated names by
//   value, duplicates once). A WebSocket upgrade (a media stream) is a GET:
//   the URL alone is signed.
// * By default the key is the account auth token and the MAC HMAC-SHA1;
//   `X-Twilio-Signature` carries it base64-encoded.
// * When a Webhooks Rule matching the URL names a Setting with a SharedKey,
//   Twilio signs with that SharedKey's secret and the Setting's algorithm
//   instead, and says so in `X-Twilio-Webhooks-Signature-Settings:
//   key=<SharedKey id>,algorithm=HMAC_SHA256`. Only the key and the hash
//   change; the signed string and the header carrying the signature do not.
// * Twilio's validators accept the URL with and without a port ("signature
//   generation on the back end is inconsistent"): the URL with its port
//   removed, and the URL with its explicit port or, if it has none, the
//   scheme's default port added.
// * JSON bodies (not media streams) are signed differently: Twilio adds
//   `bodySHA256=<hex SHA-256 of the body>` to the URL's query and signs the
//   URL alone; callgate receives no such requests, so that is not checked.

/// The header carrying the signature (as `http` spells header names).
pub const SIGNATURE_HEADER: &str = "x-twilio-signature";
/// The header announcing a SharedKey signature and its algorithm.
pub const SIGNATURE_SETTINGS_HEADER: &str = "x-twilio-webhooks-signature-settings";

/// The MAC a signature was made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    HmacSha1,
    HmacSha256,
}

impl Algorithm {
    /// Parses the `algorithm` of `X-Twilio-Webhooks-Signature-Settings`
    /// (`HMAC_SHA1`, `HMAC_SHA256`; case and `-`/`_` are not significant).
    pub fn from_setting(name: &str) -> Option<Algorithm> {
        let name = name.trim();
        let is = |want: &str| {
            name.len() == want.len()
                && name
                    .bytes()
                    .zip(want.bytes())
                    .all(|(a, b)| a.eq_ignore_ascii_case(&b) || (a == b'-' && b == b'_'))
        };
        if is("HMAC_SHA256") {
            Some(Algorithm::HmacSha256)
        } else if is("HMAC_SHA1") {
            Some(Algorithm::HmacSha1)
        } else {
            None
        }
    }

    /// Twilio's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::HmacSha1 => "HMAC_SHA1",
            Algorithm::HmacSha256 => "HMAC_SHA256",
        }
    }
}

/// The secrets an upgrade may be signed with. Either may be absent; a
/// request signed in a way whose secret is absent is refused.
#[derive(Clone, Copy, Default)]
pub struct SigningKeys<'a> {
    /// The account auth token: HMAC-SHA1 when no settings header is sent.
    pub auth_token: Option<&'a str>,
    /// The SharedKey secret: used with the announced algorithm when
    /// `X-Twilio-Webhooks-Signature-Settings` is sent.
    pub shared_key_secret: Option<&'a str>,
}

impl<'a> SigningKeys<'a> {
    /// The secrets `[twilio]` configures (empty ones are unset).
    pub fn of(cfg: &'a crate::config::TwilioConfig) -> SigningKeys<'a> {
        let set = |s: &'a Option<String>| s.as_deref().filter(|s| !s.is_empty());
        SigningKeys {
            auth_token: set(&cfg.auth_token),
            shared_key_secret: set(&cfg.shared_key_secret),
        }
    }
}

impl SigningKeys<'_> {
    /// Whether any secret is configured (signatures are then required).
    pub fn any(&self) -> bool {
        self.auth_token.is_some() || self.shared_key_secret.is_some()
    }
}

// Secrets stay out of logs and panics.
impl std::fmt::Debug for SigningKeys<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKeys")
            .field("auth_token", &self.auth_token.map(|_| ".."))
            .field("shared_key_secret", &self.shared_key_secret.map(|_| ".."))
            .finish()
    }
}

/// Which secret made a valid signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signer {
    /// The account auth token, HMAC-SHA1 (no settings header).
    AuthToken,
    /// The SharedKey secret, with the announced algorithm.
    SharedKey(Algorithm),
}

/// Why a signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    #[error("no X-Twilio-Signature")]
    Missing,
    #[error("X-Twilio-Signature is not {} of the URL with {key}", .algorithm.name())]
    Mismatch {
        algorithm: Algorithm,
        key: &'static str,
    },
    #[error(
        "signed with the account auth token (no X-Twilio-Webhooks-Signature-Settings) but twilio.auth_token is not set"
    )]
    NoAuthToken,
    #[error(
        "X-Twilio-Webhooks-Signature-Settings announces a SharedKey signature but twilio.shared_key_secret is not set"
    )]
    NoSharedKey,
    #[error("X-Twilio-Webhooks-Signature-Settings names no supported algorithm ({0:?})")]
    UnsupportedAlgorithm(String),
}

impl SignatureError {
    /// A low-cardinality label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            SignatureError::Missing => "missing",
            SignatureError::Mismatch { .. } => "mismatch",
            SignatureError::NoAuthToken => "no_auth_token",
            SignatureError::NoSharedKey => "no_shared_key",
            SignatureError::UnsupportedAlgorithm(_) => "unsupported_algorithm",
        }
    }
}

/// Decides whether a request is signed by Twilio.
///
/// `urls` are the URLs Twilio may have requested (each is also tried with a
/// trailing `/`, and without and with its port, see [`url_candidates`]);
/// `params` the form parameters (none for a WebSocket upgrade);
/// `signature` and `settings` the values of [`SIGNATURE_HEADER`] and
/// [`SIGNATURE_SETTINGS_HEADER`] (a blank settings header counts as absent,
/// as in Twilio's own validator).
///
/// Without a settings header the signature must be HMAC-SHA1 with the auth
/// token — exactly what callgate always checked. With one, it must be made
/// with the SharedKey secret and the announced algorithm; the auth token is
/// then not tried (nor is the SharedKey without the header). The MAC
/// comparison is constant-time.
///
/// Uncertain: Twilio documents the header as `key=…,algorithm=HMAC_SHA256`
/// and says only the hash changes; this reads that as HMAC keyed with the
/// secret's UTF-8 bytes and a base64 digest, like HMAC-SHA1. The header's
/// `key` (which SharedKey) is not used: one secret is configured.
pub fn verify_signature(
    keys: SigningKeys<'_>,
    urls: &[String],
    params: &[(&str, &str)],
    signature: Option<&str>,
    settings: Option<&str>,
) -> Result<Signer, SignatureError> {
    let signature = signature.map(str::trim).unwrap_or("");
    if signature.is_empty() {
        return Err(SignatureError::Missing);
    }
    let (algorithm, key, signer) = match settings.filter(|s| !s.trim().is_empty()) {
        None => (
            Algorithm::HmacSha1,
            keys.auth_token.ok_or(SignatureError::NoAuthToken)?,
            Signer::AuthToken,
        ),
        Some(settings) => {
            let named = setting(settings, "algorithm").unwrap_or("");
            let algorithm = Algorithm::from_setting(named).ok_or_else(|| {
                SignatureError::UnsupportedAlgorithm(named.chars().take(32).collect())
            })?;
            let key = keys.shared_key_secret.ok_or(SignatureError::NoSharedKey)?;
            (algorithm, key, Signer::SharedKey(algorithm))
        }
    };
    let mismatch = SignatureError::Mismatch {
        algorithm,
        key: match signer {
            Signer::AuthToken => "the auth token",
            Signer::SharedKey(_) => "the SharedKey secret",
        },
    };
    let Ok(sig) = B64.decode(signature) else {
        return Err(mismatch);
    };
    let valid = urls.iter().flat_map(|u| url_candidates(u)).any(|url| {
        let signed = signed_string(&url, params);
        mac_matches(algorithm, key, signed.as_bytes(), &sig)
    });
    if valid { Ok(signer) } else { Err(mismatch) }
}

/// [`verify_signature`] with the signature and its settings read from a
/// request's headers. A header that is not visible ASCII is kept (lossily)
/// so that a garbled settings header is refused rather than read as absent.
pub fn verify_request(
    keys: SigningKeys<'_>,
    urls: &[String],
    params: &[(&str, &str)],
    headers: &http::HeaderMap,
) -> Result<Signer, SignatureError> {
    let header = |name| {
        headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()))
    };
    let sig = header(SIGNATURE_HEADER);
    let settings = header(SIGNATURE_SETTINGS_HEADER);
    verify_signature(keys, urls, params, sig.as_deref(), settings.as_deref())
}

/// Checks `X-Twilio-Signature` made with the auth token (HMAC-SHA1) for a
/// WebSocket upgrade (no POST parameters): [`verify_signature`] without a
/// settings header.
pub fn signature_is_valid(auth_token: &str, url: &str, signature_b64: &str) -> bool {
    let keys = SigningKeys {
        auth_token: Some(auth_token),
        shared_key_secret: None,
    };
    verify_signature(keys, &[url.to_string()], &[], Some(signature_b64), None).is_ok()
}

/// Computes the signature Twilio would send for `url` with the auth token
/// (HMAC-SHA1, no parameters: a WebSocket upgrade). Used by tests and tools.
pub fn sign(auth_token: &str, url: &str) -> String {
    sign_with(Algorithm::HmacSha1, auth_token, url, &[])
}

/// Computes the signature Twilio would send for `url` and `params` with
/// `key` and `algorithm` (base64 of the MAC of [`signed_string`]).
pub fn sign_with(algorithm: Algorithm, key: &str, url: &str, params: &[(&str, &str)]) -> String {
    B64.encode(mac(algorithm, key, signed_string(url, params).as_bytes()))
}

/// The string Twilio signs: `url`, then each parameter as name + value,
/// sorted by name then value, a repeated identical pair once.
pub fn signed_string(url: &str, params: &[(&str, &str)]) -> String {
    let mut sorted: Vec<(&str, &str)> = params.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let len = url.len() + sorted.iter().map(|(n, v)| n.len() + v.len()).sum::<usize>();
    let mut s = String::with_capacity(len);
    s.push_str(url);
    for (name, value) in sorted {
        s.push_str(name);
        s.push_str(value);
    }
    s
}

/// The forms of `url` a signature is checked against, without repeats:
/// as given and with a trailing `/` (Twilio sometimes signs that), each
/// without its port and with its port (the explicit one, or the scheme's
/// default — 443 for `https`/`wss`, 80 for `http`/`ws` — when it has none).
///
/// Twilio's helper libraries add 443 for `https` and 80 for every other
/// scheme; for `wss` (the only scheme of media streams) this uses the
/// scheme's own default port, 443, instead.
pub fn url_candidates(url: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(6);
    for form in [url.to_string(), format!("{url}/")] {
        let (without, with) = port_forms(&form);
        for candidate in [Some(form), without, with].into_iter().flatten() {
            if !out.contains(&candidate) {
                out.push(candidate);
            }
        }
    }
    out
}

/// `url` without its port, and with its explicit or default port; `None`
/// where the URL cannot be taken apart (or its scheme has no known port).
fn port_forms(url: &str) -> (Option<String>, Option<String>) {
    let Some((scheme, rest)) = url.split_once("://") else {
        return (None, None);
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hostport) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    let (host, port) = if hostport.starts_with('[') {
        // An IPv6 literal: the port, if any, follows the `]`.
        let Some(close) = hostport.find(']') else {
            return (None, None);
        };
        let (host, after) = hostport.split_at(close + 1);
        match after.strip_prefix(':') {
            Some(p) => (host, Some(p)),
            None if after.is_empty() => (host, None),
            None => return (None, None),
        }
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty() || port.is_some_and(|p| !p.bytes().all(|b| b.is_ascii_digit())) {
        return (None, None);
    }
    let without = format!("{scheme}://{userinfo}{host}{tail}");
    let with = match port.filter(|p| !p.is_empty()) {
        Some(_) => Some(url.to_string()),
        None => default_port(scheme).map(|p| format!("{scheme}://{userinfo}{host}:{p}{tail}")),
    };
    (Some(without), with)
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme.to_ascii_lowercase().as_str() {
        "https" | "wss" => Some(443),
        "http" | "ws" => Some(80),
        _ => None,
    }
}

/// The value of `name` in a `k=v,k=v` settings header (names case-insensitive).
fn setting<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(',').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn mac(algorithm: Algorithm, key: &str, msg: &[u8]) -> Vec<u8> {
    // HMAC takes keys of any length: `new_from_slice` cannot fail.
    match algorithm {
        Algorithm::HmacSha1 => Hmac::<Sha1>::new_from_slice(key.as_bytes())
            .map(|m| m.chain_update(msg).finalize().into_bytes().to_vec())
            .unwrap_or_default(),
        Algorithm::HmacSha256 => Hmac::<Sha256>::new_from_slice(key.as_bytes())
            .map(|m| m.chain_update(msg).finalize().into_bytes().to_vec())
            .unwrap_or_default(),
    }
}

/// Constant-time comparison of `sig` with the MAC of `msg`.
fn mac_matches(algorithm: Algorithm, key: &str, msg: &[u8], sig: &[u8]) -> bool {
    match algorithm {
        Algorithm::HmacSha1 => Hmac::<Sha1>::new_from_slice(key.as_bytes())
            .is_ok_and(|m| m.chain_update(msg).verify_slice(sig).is_ok()),
        Algorithm::HmacSha256 => Hmac::<Sha256>::new_from_slice(key.as_bytes())
            .is_ok_and(|m| m.chain_update(msg).verify_slice(sig).is_ok()),
    }
}

#[cfg(test)]
mod tests;
