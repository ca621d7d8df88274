//! The `[webrtc]` section: the WebRTC ingress (`carrier::webrtc`,
//! `docs/webrtc.md`).

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

/// What a browser refused by admission (or a drain) gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WebrtcOverflow {
    /// `503` + `Retry-After` + a JSON reason, before any media.
    Reject,
    /// A `201` whose media plays only the high-volume prompt, then ends:
    /// the caller hears why instead of an error in a page.
    Prompt,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebrtcConfig {
    /// Serve `POST /v1/webrtc` and open the media socket at all.
    pub enabled: bool,
    /// The one UDP socket every session's ICE, DTLS and SRTP uses.
    pub listen: SocketAddr,
    /// The address in our ICE candidate; defaults to the listener's, and
    /// must be set when that is unspecified (0.0.0.0).
    pub advertise_ip: Option<IpAddr>,
    /// Accept offers without a partner key (demos on loopback). Warned
    /// about at start when the listener is reachable from other hosts.
    pub open: bool,
    /// Serve a session's conversation (`GET …/conversation`: the words of
    /// its turns, personal data) to the session's own client: on an open
    /// server to whoever holds the session URL, else only with the partner
    /// key that created it. `false`: `403` `conversation_off`.
    pub conversation: bool,
    /// `Access-Control-Allow-Origin` of the signalling answers.
    pub allow_origin: String,
    /// STUN/TURN URLs handed to clients (`Link: <url>; rel="ice-server"`);
    /// the server itself is ICE-lite and uses none.
    pub ice_servers: Vec<String>,
    /// What a refused browser gets.
    pub overflow: WebrtcOverflow,
    /// `Retry-After` of a `503`.
    pub retry_after_s: u32,
    /// From the answer to ICE connected; past it the call ends `ice_failed`.
    pub ice_timeout_ms: u64,
    /// From ICE connected to DTLS done; past it the call ends `dtls_failed`.
    pub dtls_timeout_ms: u64,
    /// No STUN consent check from the browser for this long ends the call
    /// `consent_lost` (RFC 7675: browsers check every ~5 s and give up
    /// after 30 s; this is our side of it).
    pub consent_timeout_ms: u64,
    /// Sessions in signalling and media at once; past it `POST` gets `503`
    /// (`webrtc_sessions`) before the gate is asked.
    pub max_sessions: usize,
    /// str0m's audio reorder hold (its defaults, 15 packets / 1 s, are a
    /// streaming bound, not a voice call's).
    pub reorder_packets: usize,
    pub reorder_ms: u64,
    /// libopus encoder complexity for the bot's audio, 0–10 (libopus's own
    /// default is 10; libwebrtc sends at 5 on Android and iOS, 9
    /// elsewhere). Lower costs less CPU per frame of speech, at some
    /// quality; silence costs nothing either way (`carrier::webrtc::opus`).
    pub opus_complexity: u8,
    /// SO_RCVBUF and SO_SNDBUF asked for the shared media socket, bytes.
    /// Every session's packets queue in these; the kernel's default
    /// (~208 KiB) holds ~25 ms of 200 calls' audio, so a reader delayed
    /// longer drops packets (`RcvbufErrors` in `/proc/net/snmp`). Capped by
    /// `net.core.rmem_max` / `wmem_max` (callgate warns when it is).
    pub socket_buffer_bytes: usize,
}

impl Default for WebrtcConfig {
    fn default() -> Self {
        WebrtcConfig {
            enabled: false,
            listen: SocketAddr::from(([0, 0, 0, 0], 3478)),
            advertise_ip: None,
            open: false,
            conversation: true,
            allow_origin: "*".into(),
            ice_servers: Vec::new(),
            overflow: WebrtcOverflow::Reject,
            retry_after_s: 30,
            ice_timeout_ms: 10_000,
            dtls_timeout_ms: 10_000,
            consent_timeout_ms: 10_000,
            max_sessions: 2_000,
            reorder_packets: 3,
            reorder_ms: 60,
            opus_complexity: 5,
            socket_buffer_bytes: 4 * 1024 * 1024,
        }
    }
}

impl WebrtcConfig {
    /// Largest offer body accepted (bytes); a browser's audio offer is ~3 KiB.
    pub const MAX_OFFER_BYTES: usize = 16 * 1024;
    /// Largest client-evidence body accepted (bytes).
    pub const MAX_STATS_BYTES: usize = 4 * 1024;

    /// The address in our ICE candidate.
    pub fn advertised(&self) -> IpAddr {
        self.advertise_ip.unwrap_or(self.listen.ip())
    }

    pub fn validate(&self) -> Result<(), String> {
        if !self.enabled {
            return Ok(());
        }
        if self.advertise_ip.is_none() && self.listen.ip().is_unspecified() {
            return Err(
                "webrtc.advertise_ip must be set when webrtc.listen is 0.0.0.0 / [::]".into(),
            );
        }
        let bounded = |v: u64| (500..=120_000).contains(&v);
        if !bounded(self.ice_timeout_ms)
            || !bounded(self.dtls_timeout_ms)
            || !bounded(self.consent_timeout_ms)
        {
            return Err(
                "webrtc.ice_timeout_ms, dtls_timeout_ms and consent_timeout_ms must be 500..=120000"
                    .into(),
            );
        }
        if self.opus_complexity > 10 {
            return Err("webrtc.opus_complexity must be 0..=10".into());
        }
        if !(64 * 1024..=256 * 1024 * 1024).contains(&self.socket_buffer_bytes) {
            return Err("webrtc.socket_buffer_bytes must be 65536..=268435456".into());
        }
        if self.max_sessions == 0 || self.reorder_packets > 50 || self.reorder_ms > 1_000 {
            return Err("webrtc.max_sessions ≥ 1, reorder_packets ≤ 50, reorder_ms ≤ 1000".into());
        }
        let url_ok = |u: &String| {
            ["stun:", "stuns:", "turn:", "turns:"]
                .iter()
                .any(|p| u.starts_with(p))
                && !u.contains(['<', '>', '"', '\r', '\n'])
        };
        if !self.ice_servers.iter().all(url_ok) {
            return Err("webrtc.ice_servers must be stun:/stuns:/turn:/turns: URLs".into());
        }
        if self.allow_origin.contains(['\r', '\n']) || self.allow_origin.is_empty() {
            return Err("webrtc.allow_origin must be one header value (`*` or an origin)".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enabled() -> WebrtcConfig {
        WebrtcConfig {
            enabled: true,
            listen: "127.0.0.1:3478"
                .parse()
                .unwrap_or(WebrtcConfig::default().listen),
            ..WebrtcConfig::default()
        }
    }

    #[test]
    fn each_bad_value_is_refused_with_its_key() {
        assert!(enabled().validate().is_ok());
        let unspecified = WebrtcConfig {
            enabled: true,
            ..WebrtcConfig::default()
        };
        assert!(unspecified.validate().unwrap_err().contains("advertise_ip"));
        type Break = fn(&mut WebrtcConfig);
        let cases: [(Break, &str); 7] = [
            (|c| c.opus_complexity = 11, "opus_complexity"),
            (|c| c.socket_buffer_bytes = 1_000, "socket_buffer_bytes"),
            (|c| c.consent_timeout_ms = 100, "consent_timeout_ms"),
            (|c| c.max_sessions = 0, "max_sessions"),
            (|c| c.reorder_ms = 5_000, "reorder_ms"),
            (|c| c.ice_servers = vec!["http://x".into()], "ice_servers"),
            (|c| c.allow_origin = "a\r\nb".into(), "allow_origin"),
        ];
        for (break_it, key) in cases {
            let mut c = enabled();
            break_it(&mut c);
            let e = c.validate().unwrap_err();
            assert!(e.contains(key), "{key}: {e}");
        }
        let off = WebrtcConfig {
            max_sessions: 0,
            ..WebrtcConfig::default()
        };
        assert!(off.validate().is_ok(), "a disabled section is not checked");
    }
}
