//! The `[sip]` section: the SIP/RTP ingress (`carrier::sip`).

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

/// What a call refused by admission (or a drain) gets on the SIP ingress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SipOverflow {
    /// `503 Service Unavailable` with `Retry-After`: the carrier or proxy
    /// tries elsewhere (Kamailio fails over to the next instance).
    Reject,
    /// `302 Moved Temporarily` to `human_queue_uri`.
    Redirect,
    /// Answer, play the high-volume prompt over RTP, then `REFER` to
    /// `human_queue_uri` (BYE once the NOTIFY reports success, or after
    /// `refer_timeout_ms`).
    Refer,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SipConfig {
    /// Serve SIP at all.
    pub enabled: bool,
    /// UDP and TCP listener for SIP.
    pub listen: SocketAddr,
    /// The address peers reach us at (SDP `c=`, `Contact`); defaults to the
    /// listener's address, and must be set when that is unspecified (0.0.0.0).
    pub advertise_ip: Option<IpAddr>,
    /// Even RTP ports are taken from [rtp_port_min, rtp_port_max], the odd
    /// port above each for RTCP; only after admission says yes.
    pub rtp_port_min: u16,
    pub rtp_port_max: u16,
    /// Codecs answered, in order of preference when the offer allows a choice.
    pub codecs: Vec<String>,
    /// No RTP and no RTCP from the peer for this long ends the call
    /// (`rtp_timeout`). Not applied while the peer holds the call.
    pub rtp_timeout_ms: u64,
    /// Upper bound of the adaptive jitter buffer.
    pub jitter_max_ms: u32,
    /// How often an RTCP report is sent.
    pub rtcp_interval_ms: u64,
    /// What a refused call gets.
    pub overflow: SipOverflow,
    /// `Retry-After` of a `503` (refusals, draining OPTIONS).
    pub retry_after_s: u32,
    /// Where `redirect` and `refer` send callers, and escalations go
    /// (`sip:queue@pbx.example.com`).
    pub human_queue_uri: Option<String>,
    /// How long a REFER waits for a NOTIFY with a final status before BYE.
    pub refer_timeout_ms: u64,
    /// Largest SIP message accepted, in bytes.
    pub max_message_bytes: usize,
    /// When not empty, INVITEs from any other address get `403`.
    pub trusted_peers: Vec<IpAddr>,
}

impl Default for SipConfig {
    fn default() -> Self {
        SipConfig {
            enabled: false,
            listen: SocketAddr::from(([0, 0, 0, 0], 5060)),
            advertise_ip: None,
            rtp_port_min: 20_000,
            rtp_port_max: 29_999,
            codecs: vec!["PCMU".into(), "PCMA".into()],
            rtp_timeout_ms: 10_000,
            jitter_max_ms: 200,
            rtcp_interval_ms: 5_000,
            overflow: SipOverflow::Reject,
            retry_after_s: 30,
            human_queue_uri: None,
            refer_timeout_ms: 8_000,
            max_message_bytes: 16 * 1024,
            trusted_peers: Vec::new(),
        }
    }
}

impl SipConfig {
    /// The codec names `sip.codecs` may list (case-insensitive, as SDP
    /// spells them). The SIP carrier maps them to its SDP codecs
    /// (`carrier::sip::leg::codecs`, whose test keeps the two lists equal).
    pub const CODEC_NAMES: [&str; 2] = ["PCMU", "PCMA"];

    /// The address in SDP and `Contact`.
    pub fn advertised(&self) -> IpAddr {
        self.advertise_ip.unwrap_or(self.listen.ip())
    }

    pub fn validate(&self) -> Result<(), String> {
        if !self.enabled {
            return Ok(());
        }
        if self.advertise_ip.is_none() && self.listen.ip().is_unspecified() {
            return Err("sip.advertise_ip must be set when sip.listen is 0.0.0.0 / [::]".into());
        }
        if self.rtp_port_min < 1024 || self.rtp_port_max <= self.rtp_port_min {
            return Err("sip.rtp_port_min..rtp_port_max must be a range above 1023".into());
        }
        let known = |c: &String| Self::CODEC_NAMES.iter().any(|n| n.eq_ignore_ascii_case(c));
        if self.codecs.is_empty() || !self.codecs.iter().all(known) {
            return Err("sip.codecs must list PCMU and/or PCMA".into());
        }
        let needs_uri = matches!(self.overflow, SipOverflow::Redirect | SipOverflow::Refer);
        let uri_ok = self.human_queue_uri.as_deref().is_some_and(|u| {
            u.starts_with("sip:") || u.starts_with("sips:") || u.starts_with("tel:")
        });
        if (needs_uri || self.human_queue_uri.is_some()) && !uri_ok {
            return Err("sip.human_queue_uri must be a sip:, sips: or tel: URI (required by overflow = redirect/refer)".into());
        }
        if self.rtp_timeout_ms < 1_000 || self.jitter_max_ms < 20 || self.max_message_bytes < 1_500
        {
            return Err("sip.rtp_timeout_ms ≥ 1000, sip.jitter_max_ms ≥ 20 and sip.max_message_bytes ≥ 1500".into());
        }
        Ok(())
    }
}
