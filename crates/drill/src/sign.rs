//! The receipt's signature: Ed25519 over the exact bytes of the YAML body,
//! appended as a last top-level block the body cannot contain:
//!
//! ```yaml
//! signature:
//!   algorithm: ed25519
//!   public_key: <64 hex digits>
//!   value: <128 hex digits>
//! ```
//!
//! Verification splits the file at that block, checks it is exactly those
//! three lines, that the key is the one the body names (`signed_by`), and
//! the signature over every byte before it: one changed byte anywhere
//! fails. A key file holds the 32-byte secret as 64 hex digits (mode 0600).

use std::path::Path;

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};

use crate::error::DrillError;

const BLOCK: &str = "signature:\n";

/// Why a receipt does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("no signature block at the end of the receipt")]
    Unsigned,
    #[error("the signature block is malformed: {0}")]
    Malformed(String),
    #[error("the body names signer {body}, the signature key is {block}")]
    OtherSigner { body: String, block: String },
    #[error("the signature does not match the receipt's bytes: it was changed after signing")]
    Mismatch,
}

/// Writes a fresh key to `path` (refusing to overwrite one), readable by
/// its owner only; returns its public key in hex.
///
/// # Errors
/// The file exists or cannot be written.
pub fn keygen(path: &Path) -> Result<String, DrillError> {
    let err = |what: String| DrillError::Key {
        path: path.display().to_string(),
        what,
    };
    let mut secret = [0u8; 32];
    rand::Rng::fill(&mut rand::rng(), &mut secret[..]);
    let key = SigningKey::from_bytes(&secret);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(path).map_err(|e| err(e.to_string()))?;
    std::io::Write::write_all(&mut f, format!("{}\n", hex(&secret)).as_bytes())
        .map_err(|e| err(e.to_string()))?;
    Ok(hex(key.verifying_key().as_bytes()))
}

/// Reads a key file written by [`keygen`].
///
/// # Errors
/// Unreadable, or not 64 hex digits.
pub fn load_key(path: &Path) -> Result<SigningKey, DrillError> {
    let err = |what: &str| DrillError::Key {
        path: path.display().to_string(),
        what: what.to_string(),
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(&e.to_string()))?;
    let bytes = unhex(text.trim()).ok_or_else(|| err("not 64 hex digits"))?;
    let secret: [u8; 32] = bytes.try_into().map_err(|_| err("not 64 hex digits"))?;
    Ok(SigningKey::from_bytes(&secret))
}

/// The public key of `key` in hex, as the body's `signed_by` names it.
pub fn public_hex(key: &SigningKey) -> String {
    hex(key.verifying_key().as_bytes())
}

/// `body` (which must end in a newline) with its signature block.
pub fn sign(body: &str, key: &SigningKey) -> String {
    let sig = key.sign(body.as_bytes());
    format!(
        "{body}{BLOCK}  algorithm: ed25519\n  public_key: {}\n  value: {}\n",
        public_hex(key),
        hex(&sig.to_bytes())
    )
}

/// Checks a signed receipt; returns its body (the signed bytes).
///
/// # Errors
/// [`VerifyError`] naming what is wrong.
pub fn verify(text: &str) -> Result<&str, VerifyError> {
    let at = text
        .rfind(&format!("\n{BLOCK}"))
        .map(|i| i + 1)
        .ok_or(VerifyError::Unsigned)?;
    let (body, block) = text.split_at(at);
    let lines: Vec<&str> = block
        .strip_prefix(BLOCK)
        .unwrap_or("")
        .split('\n')
        .collect();
    let field = |i: usize, key: &str| -> Result<&str, VerifyError> {
        lines
            .get(i)
            .and_then(|l| l.strip_prefix(&format!("  {key}: ")))
            .ok_or_else(|| VerifyError::Malformed(format!("line {} must be `{key}: …`", i + 2)))
    };
    if field(0, "algorithm")? != "ed25519" {
        return Err(VerifyError::Malformed("algorithm must be ed25519".into()));
    }
    let key_hex = field(1, "public_key")?;
    let value_hex = field(2, "value")?;
    if lines.len() != 4 || !lines[3].is_empty() {
        return Err(VerifyError::Malformed(
            "nothing may follow the signature's three lines".into(),
        ));
    }
    let key_bytes: [u8; 32] = unhex(key_hex)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| VerifyError::Malformed("public_key must be 64 hex digits".into()))?;
    let sig_bytes: [u8; 64] = unhex(value_hex)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| VerifyError::Malformed("value must be 128 hex digits".into()))?;
    let named = body
        .lines()
        .find_map(|l| l.strip_prefix("signed_by: "))
        .map(|s| s.trim().trim_matches('\'').trim_matches('"'))
        .unwrap_or("");
    if named != key_hex {
        return Err(VerifyError::OtherSigner {
            body: named.to_string(),
            block: key_hex.to_string(),
        });
    }
    let key = VerifyingKey::from_bytes(&key_bytes)
        .map_err(|_| VerifyError::Malformed("public_key is not a curve point".into()))?;
    key.verify_strict(body.as_bytes(), &Signature::from_bytes(&sig_bytes))
        .map_err(|_| VerifyError::Mismatch)?;
    Ok(body)
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

    use super::*;

    fn key() -> SigningKey {
        SigningKey::from_bytes(&[7u8; 32])
    }

    fn body() -> String {
        format!(
            "kind: test\nsigned_by: {}\ndecision: hold\n",
            public_hex(&key())
        )
    }

    #[test]
    fn a_signed_receipt_verifies_and_any_changed_byte_does_not() {
        let signed = sign(&body(), &key());
        assert_eq!(verify(&signed).unwrap(), body());
        for i in 0..signed.len() {
            let mut bytes = signed.clone().into_bytes();
            bytes[i] ^= 0x01;
            let Ok(t) = String::from_utf8(bytes) else {
                continue;
            };
            assert!(verify(&t).is_err(), "byte {i} changed and still verified");
        }
    }

    #[test]
    fn another_key_or_trailing_text_is_refused() {
        let other = SigningKey::from_bytes(&[9u8; 32]);
        let e = verify(&sign(&body(), &other)).unwrap_err();
        assert!(matches!(e, VerifyError::OtherSigner { .. }), "{e}");
        let extra = format!("{}more: 1\n", sign(&body(), &key()));
        assert!(matches!(verify(&extra), Err(VerifyError::Malformed(_))));
        assert_eq!(verify(&body()), Err(VerifyError::Unsigned));
    }

    #[test]
    fn a_generated_key_reads_back_and_is_never_overwritten() {
        let dir = std::env::temp_dir().join(format!("drill-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("drill.key");
        let _ = std::fs::remove_file(&path);
        let public = keygen(&path).unwrap();
        assert_eq!(public_hex(&load_key(&path).unwrap()), public);
        assert!(keygen(&path).is_err(), "an existing key is kept");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
