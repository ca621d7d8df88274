//! Where a call came from, as its receipt states it: the transport it
//! arrived on and the labels the ingress carried (Twilio
//! `start.customParameters`, partner `start.metadata`, chosen INVITE
//! headers), bounded and filtered by `[receipt]`.
//!
//! What it never does: keep a key the operator did not list (labels are
//! personal-data minimised: a caller-supplied map is copied only where the
//! configuration names the key), keep a value over
//! [`MAX_LABEL_VALUE_BYTES`] (it is cut and counted), or invent a value —
//! an absent key is absent, not empty.
//!
//! How to drive it: the ingress builds [`Labels`] from its start message
//! ([`Labels::from_params`], [`Labels::from_sip_headers`]); setup writes
//! [`opening_stats`] into the ledger row when the call is admitted.

use std::collections::BTreeMap;

use crate::config::{MAX_LABEL_VALUE_BYTES, ReceiptConfig};

/// The transport a call's signalling and media arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Twilio media streams and the partner protocol.
    WebSocket,
    /// SIP over UDP (media over RTP).
    SipUdp,
    /// SIP over TCP (media over RTP).
    SipTcp,
    /// WebRTC: HTTP signalling, media over ICE/DTLS-SRTP on UDP.
    WebrtcUdp,
}

impl Transport {
    pub const fn as_str(self) -> &'static str {
        match self {
            Transport::WebSocket => "websocket",
            Transport::SipUdp => "sip-udp",
            Transport::SipTcp => "sip-tcp",
            Transport::WebrtcUdp => "webrtc-udp",
        }
    }
}

/// The labels a receipt keeps, and how many values were cut.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels {
    /// Allowed keys with their (possibly cut) values.
    pub kept: BTreeMap<String, String>,
    /// Values cut to [`MAX_LABEL_VALUE_BYTES`].
    pub truncated: u32,
}

impl Labels {
    /// Labels from a key/value map (Twilio custom parameters, partner
    /// metadata): only keys in `[receipt].labels`.
    pub fn from_params<'a>(
        cfg: &ReceiptConfig,
        params: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Labels {
        let mut labels = Labels::default();
        for (k, v) in params {
            if cfg.labels.iter().any(|allowed| allowed == k) {
                labels.insert(k.clone(), v);
            }
        }
        labels
    }

    /// Labels from INVITE headers: the first value of each header named in
    /// `[receipt].sip_headers` (any case), keyed by its name in lower case.
    pub fn from_sip_headers(cfg: &ReceiptConfig, headers: &[(String, String)]) -> Labels {
        let mut labels = Labels::default();
        for wanted in &cfg.sip_headers {
            let found = headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(wanted));
            if let Some((_, v)) = found {
                labels.insert(wanted.to_ascii_lowercase(), v);
            }
        }
        labels
    }

    fn insert(&mut self, key: String, value: &str) {
        let cut = crate::text::prefix_within(value, MAX_LABEL_VALUE_BYTES);
        if cut.len() < value.len() {
            self.truncated += 1;
        }
        self.kept.insert(key, cut.to_string());
    }
}

/// The receipt fields known at admission, written as the ledger row's
/// first `stats` (the closing stats are merged over them, never over
/// these keys): `transport`, `labels`, `labels_truncated`, `providers`.
pub fn opening_stats(
    transport: Transport,
    labels: &Labels,
    providers: &BTreeMap<String, String>,
) -> serde_json::Value {
    serde_json::json!({
        "transport": transport.as_str(),
        "labels": labels.kept,
        "labels_truncated": labels.truncated,
        "providers": providers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ReceiptConfig {
        ReceiptConfig {
            labels: vec!["role".into(), "tenant".into()],
            sip_headers: vec!["X-Role".into(), "X-Tenant".into()],
            ..ReceiptConfig::default()
        }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_listed_parameters_are_kept() {
        let params = map(&[("role", "agent"), ("ssn", "078-05-1120"), ("Tenant", "x")]);
        let l = Labels::from_params(&cfg(), &params);
        assert_eq!(l.kept, map(&[("role", "agent")]), "keys compare exactly");
        assert_eq!(l.truncated, 0);
        let none = Labels::from_params(&ReceiptConfig::default(), &params);
        assert!(none.kept.is_empty(), "nothing listed, nothing kept");
    }

    #[test]
    fn long_values_are_cut_on_a_character_boundary_and_counted() {
        let long = "é".repeat(MAX_LABEL_VALUE_BYTES); // 2 bytes each
        let params = map(&[("role", &long), ("tenant", "acme")]);
        let l = Labels::from_params(&cfg(), &params);
        let role = &l.kept["role"];
        assert_eq!(role.len(), MAX_LABEL_VALUE_BYTES);
        assert!(long.starts_with(role.as_str()));
        assert_eq!(l.truncated, 1);
        let odd = format!("a{}", "é".repeat(MAX_LABEL_VALUE_BYTES));
        let l = Labels::from_params(&cfg(), &map(&[("role", &odd)]));
        assert_eq!(l.kept["role"].len(), MAX_LABEL_VALUE_BYTES - 1);
    }

    #[test]
    fn sip_headers_match_in_any_case_first_value_wins() {
        let headers = vec![
            ("x-role".to_string(), "supervisor".to_string()),
            ("X-Role".to_string(), "second".to_string()),
            ("X-Other".to_string(), "secret".to_string()),
        ];
        let l = Labels::from_sip_headers(&cfg(), &headers);
        assert_eq!(l.kept, map(&[("x-role", "supervisor")]));
    }

    #[test]
    fn the_opening_stats_carry_transport_labels_and_providers() {
        let l = Labels::from_params(&cfg(), &map(&[("role", "agent")]));
        let providers = map(&[("stt_model", "nova-3")]);
        let v = opening_stats(Transport::SipTcp, &l, &providers);
        assert_eq!(
            v,
            serde_json::json!({
                "transport": "sip-tcp",
                "labels": {"role": "agent"},
                "labels_truncated": 0,
                "providers": {"stt_model": "nova-3"},
            })
        );
    }
}
