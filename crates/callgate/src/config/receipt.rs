//! The `[receipt]` and `[retention]` sections: what a call's receipt
//! records about where it came from, and how long receipts, raw events and
//! transcripts are kept.
//!
//! Labels are operator-chosen, never caller-chosen: only the keys listed
//! here are copied from the ingress into the receipt (personal-data
//! minimisation — a Twilio `customParameters` map or a partner's metadata
//! may carry anything, and the receipt outlives the transcript). Provider
//! labels are declared by the operator and written verbatim: callgate
//! does not learn a provider's model or version from the provider.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Longest label key (and configured SIP header name), in bytes.
pub const MAX_LABEL_KEY_BYTES: usize = 64;
/// Longest label value kept, in bytes; longer values are cut (at a UTF-8
/// character boundary) and counted in the receipt's `labels_truncated`.
pub const MAX_LABEL_VALUE_BYTES: usize = 256;

/// What a receipt records about the call's origin.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReceiptConfig {
    /// Keys copied from Twilio `start.customParameters` and from the
    /// partner `start.metadata` into the receipt's labels. Keys not listed
    /// are not recorded. Empty (the default): no labels.
    pub labels: Vec<String>,
    /// INVITE headers copied into the receipt's labels, keyed by the
    /// header name in lower case (`X-Role` → `x-role`). Empty: none.
    pub sip_headers: Vec<String>,
    /// Most labels one receipt may carry: `labels` and `sip_headers` may
    /// each list at most this many keys (checked when the configuration
    /// loads, so no call can exceed it).
    pub max_labels: usize,
    /// Operator-declared provider labels (`stt_model = "nova-3"`), written
    /// verbatim into every receipt as `providers`.
    pub providers: BTreeMap<String, String>,
}

impl Default for ReceiptConfig {
    fn default() -> Self {
        ReceiptConfig {
            labels: Vec::new(),
            sip_headers: Vec::new(),
            max_labels: 16,
            providers: BTreeMap::new(),
        }
    }
}

impl ReceiptConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.max_labels == 0 {
            return Err("receipt.max_labels must be at least 1".into());
        }
        check_keys("receipt.labels", &self.labels, self.max_labels, false)?;
        check_keys(
            "receipt.sip_headers",
            &self.sip_headers,
            self.max_labels,
            true,
        )?;
        if let Some(bad) = self.sip_headers.iter().find(|h| !is_token(h)) {
            return Err(format!(
                "receipt.sip_headers: {bad:?} is not a SIP header name"
            ));
        }
        if self.providers.len() > self.max_labels {
            return Err(format!(
                "receipt.providers: at most receipt.max_labels ({}) entries",
                self.max_labels
            ));
        }
        for (k, v) in &self.providers {
            if k.is_empty() || k.len() > MAX_LABEL_KEY_BYTES || v.len() > MAX_LABEL_VALUE_BYTES {
                return Err(format!(
                    "receipt.providers.{k}: keys are 1-{MAX_LABEL_KEY_BYTES} bytes, values at most {MAX_LABEL_VALUE_BYTES}"
                ));
            }
        }
        Ok(())
    }
}

/// Keys: not empty, within the key limit, no duplicates, at most `max`.
fn check_keys(what: &str, keys: &[String], max: usize, any_case: bool) -> Result<(), String> {
    if keys.len() > max {
        return Err(format!("{what}: at most receipt.max_labels ({max}) keys"));
    }
    for (i, k) in keys.iter().enumerate() {
        if k.is_empty() || k.len() > MAX_LABEL_KEY_BYTES {
            return Err(format!(
                "{what}: {k:?} must be 1-{MAX_LABEL_KEY_BYTES} bytes"
            ));
        }
        let same = |o: &String| {
            if any_case {
                o.eq_ignore_ascii_case(k)
            } else {
                o == k
            }
        };
        if keys[..i].iter().any(same) {
            return Err(format!("{what}: {k:?} is listed twice"));
        }
    }
    Ok(())
}

/// An RFC 3261 header name: a `token`.
fn is_token(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-.!%*_+`'~".contains(&b))
}

/// How long stored call data is kept (0 = forever). Each window is
/// counted from the call's admission.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// Transcripts and slots (personal data) older than this are deleted,
    /// open calls' included.
    pub transcript_days: u32,
    /// Raw lifecycle events (`call_events`) of closed calls older than this
    /// are deleted. An open call keeps its events.
    pub events_days: u32,
    /// Closed receipts (`call_ledger` rows, with everything that hangs off
    /// them) and admission refusals older than this are deleted. An open
    /// row is never deleted. Must be at least `events_days` and
    /// `transcript_days` (deleting a receipt deletes its events and
    /// transcript too), unless 0.
    pub receipts_days: u32,
    /// How often the purge runs (at least every 60 s).
    pub purge_interval_s: u64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            transcript_days: 30,
            events_days: 90,
            receipts_days: 365,
            purge_interval_s: 3_600,
        }
    }
}

impl RetentionConfig {
    pub fn validate(&self) -> Result<(), String> {
        let r = self.receipts_days;
        if r == 0 {
            return Ok(());
        }
        for (name, days) in [
            ("events_days", self.events_days),
            ("transcript_days", self.transcript_days),
        ] {
            if days == 0 || days > r {
                return Err(format!(
                    "retention.{name} ({days}) must be between 1 and retention.receipts_days ({r}): \
                     a purged receipt takes its events and transcript with it"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_keep_receipts_longest() {
        ReceiptConfig::default().validate().unwrap();
        let r = RetentionConfig::default();
        r.validate().unwrap();
        assert!(r.receipts_days >= r.events_days && r.events_days >= r.transcript_days);
    }

    #[test]
    fn a_receipt_window_shorter_than_what_hangs_off_it_is_refused() {
        let mut r = RetentionConfig {
            events_days: 400,
            ..RetentionConfig::default()
        };
        assert!(r.validate().unwrap_err().contains("events_days"));
        r.events_days = 0;
        assert!(r.validate().is_err(), "events kept forever, receipts not");
        r.events_days = 90;
        r.transcript_days = 366;
        assert!(r.validate().unwrap_err().contains("transcript_days"));
        r.receipts_days = 0;
        r.validate().unwrap();
    }

    #[test]
    fn label_keys_are_bounded_and_unique() {
        let mut c = ReceiptConfig {
            labels: vec!["role".into(), "tenant".into()],
            sip_headers: vec!["X-Role".into()],
            ..ReceiptConfig::default()
        };
        c.validate().unwrap();
        c.labels.push("role".into());
        assert!(c.validate().unwrap_err().contains("twice"));
        c.labels.pop();
        c.sip_headers.push("x-role".into());
        assert!(c.validate().is_err(), "header names compare in any case");
        c.sip_headers = vec!["X Role".into()];
        assert!(c.validate().is_err(), "not a token");
        c.sip_headers = vec!["x".repeat(MAX_LABEL_KEY_BYTES + 1)];
        assert!(c.validate().is_err());
        c.sip_headers.clear();
        c.max_labels = 1;
        assert!(c.validate().unwrap_err().contains("max_labels"));
        c.max_labels = 2;
        c.providers = [("stt_model", "nova-3"), ("tts_model", "x"), ("llm", "y")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
        assert!(c.validate().is_err(), "three providers over a limit of 2");
    }
}
