//! The `[twilio.webhook]` section: the Twilio voice webhook
//! (`POST /v1/twilio/voice`, `carrier::twilio::webhook`), which decides
//! admission before any media stream exists.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TwilioWebhookConfig {
    /// Serve `POST /v1/twilio/voice` at all. Off by default: a control
    /// surface is closed until asked for.
    pub enabled: bool,
    /// How long the webhook may wait for a queued slot before it refuses
    /// (the caller hears ringing meantime). Bounded by the gate's own
    /// `admission.queue_timeout_ms` and kept well below Twilio's 15 s
    /// webhook timeout. 0: decide at once.
    pub wait_ms: u64,
    /// How long an admitted call's slot is held for its media stream;
    /// unclaimed by then, it is released and counted.
    pub reservation_ms: u64,
    /// Where a refused (or transferred) caller goes: an E.164 number
    /// (`+15550100`) dialled with `<Dial><Number>`, or a `sip:` URI with
    /// `<Dial><Sip>`. Unset: the refused caller hears the overflow prompt
    /// and the call is hung up (`serve --check` warns).
    pub transfer_to: Option<String>,
}

impl Default for TwilioWebhookConfig {
    fn default() -> Self {
        TwilioWebhookConfig {
            enabled: false,
            wait_ms: 5_000,
            reservation_ms: 10_000,
            transfer_to: None,
        }
    }
}

impl TwilioWebhookConfig {
    /// The longest `wait_ms`: Twilio gives up on a webhook after 15 s.
    pub const MAX_WAIT_MS: u64 = 12_000;

    pub fn validate(&self) -> Result<(), String> {
        if self.wait_ms > Self::MAX_WAIT_MS {
            return Err(format!(
                "twilio.webhook.wait_ms must be at most {} (Twilio waits 15 s for a webhook)",
                Self::MAX_WAIT_MS
            ));
        }
        if !(1_000..=60_000).contains(&self.reservation_ms) {
            return Err("twilio.webhook.reservation_ms must be 1000..=60000".into());
        }
        if let Some(t) = &self.transfer_to {
            let number = t.strip_prefix('+').is_some_and(|d| {
                (6..=15).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_digit())
            });
            let sip = t.starts_with("sip:") && t.len() <= 256 && !t.contains(char::is_whitespace);
            if !number && !sip {
                return Err(format!(
                    "twilio.webhook.transfer_to must be an E.164 number (+15550100) or a sip: URI, not {t:?}"
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
    fn bounds_and_targets_are_checked() {
        let ok = TwilioWebhookConfig::default();
        assert!(ok.validate().is_ok());
        for (bad, says) in [
            (
                TwilioWebhookConfig {
                    wait_ms: 13_000,
                    ..ok.clone()
                },
                "wait_ms",
            ),
            (
                TwilioWebhookConfig {
                    reservation_ms: 500,
                    ..ok.clone()
                },
                "reservation_ms",
            ),
            (
                TwilioWebhookConfig {
                    transfer_to: Some("5550100".into()),
                    ..ok.clone()
                },
                "E.164",
            ),
            (
                TwilioWebhookConfig {
                    transfer_to: Some("sip:a b".into()),
                    ..ok.clone()
                },
                "E.164",
            ),
        ] {
            assert!(bad.validate().unwrap_err().contains(says), "{bad:?}");
        }
        for good in ["+15550100", "sip:queue@pbx.example.com"] {
            let c = TwilioWebhookConfig {
                transfer_to: Some(good.into()),
                ..ok.clone()
            };
            assert!(c.validate().is_ok(), "{good}");
        }
    }
}
