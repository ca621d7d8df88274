//! Twilio-shaped identifiers: a two-letter prefix and 32 lower-case hex digits.
//!
//! They are 16 random bytes underneath, so they are `Copy` and cheap to hash;
//! the prefix lives in the type, which keeps a call SID from being passed
//! where a stream SID is expected.

use std::fmt;
use std::str::FromStr;

macro_rules! sid_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name([u8; 16]);

        impl $name {
            /// The two-letter prefix Twilio uses for this kind of SID.
            pub const PREFIX: &'static str = $prefix;

            /// A SID with these 16 bytes.
            pub const fn from_bytes(bytes: [u8; 16]) -> Self {
                $name(bytes)
            }

            /// A fresh random SID (unique across runs, so a server that keeps
            /// per-call state never sees the same call twice).
            pub fn random() -> Self {
                $name(*uuid::Uuid::new_v4().as_bytes())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                // One write of 32 hex digits: this runs for every media frame
                // a generator sends, so no per-byte formatting machinery.
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let mut hex = [0u8; 32];
                for (pair, b) in hex.chunks_exact_mut(2).zip(self.0) {
                    pair[0] = HEX[usize::from(b >> 4)];
                    pair[1] = HEX[usize::from(b & 0x0f)];
                }
                f.write_str(Self::PREFIX)?;
                f.write_str(std::str::from_utf8(&hex).map_err(|_| fmt::Error)?)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }

        impl FromStr for $name {
            type Err = SidParseError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let hex = s.strip_prefix(Self::PREFIX).ok_or(SidParseError)?;
                parse_hex16(hex).map($name).ok_or(SidParseError)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

sid_type!(
    /// `AC…`: the account placing the calls (one per load run).
    AccountSid,
    "AC"
);
sid_type!(
    /// `CA…`: one call.
    CallSid,
    "CA"
);
sid_type!(
    /// `MZ…`: the media stream of one call; the routing key of every message.
    StreamSid,
    "MZ"
);

/// A string that is not a SID of the expected kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a SID: expected a two-letter prefix and 32 hex digits")]
pub struct SidParseError;

fn parse_hex16(hex: &str) -> Option<[u8; 16]> {
    // `from_str_radix` alone would also take a sign (`+f`).
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The identities of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallIds {
    pub account: AccountSid,
    pub call: CallSid,
    pub stream: StreamSid,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sids_look_like_twilio_and_round_trip() {
        let sid = StreamSid::random();
        let text = sid.to_string();
        assert_eq!(text.len(), 34);
        assert!(text.starts_with("MZ"));
        assert!(
            text[2..]
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_eq!(text.parse::<StreamSid>(), Ok(sid));
        assert_eq!(
            text.replacen("MZ", "CA", 1).parse::<StreamSid>(),
            Err(SidParseError)
        );
        assert_eq!(
            CallSid::from_bytes([0xab; 16]).to_string(),
            format!("CA{}", "ab".repeat(16))
        );
        let mixed: [u8; 16] = std::array::from_fn(|i| (i as u8) * 17);
        assert_eq!(
            AccountSid::from_bytes(mixed).to_string(),
            "AC00112233445566778899aabbccddeeff"
        );
        let json = serde_json::to_string(&sid).unwrap();
        assert_eq!(serde_json::from_str::<StreamSid>(&json).unwrap(), sid);
    }
}
