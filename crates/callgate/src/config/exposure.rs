//! What a configuration leaves open to other hosts: the one home of the
//! "closed by default" warnings. `server::serve` logs each at `warn` when it
//! starts; `callgate serve --check` prints them without starting anything,
//! so an operator (or a manifest test) sees them before a rollout does.

use std::net::SocketAddr;

use super::Config;

/// One surface reachable from other hosts without the protection it can have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exposure {
    /// The configuration key that closes it (`twilio.auth_token`, …).
    pub key: &'static str,
    /// The listener it concerns.
    pub addr: SocketAddr,
    /// What is open, and to whom.
    pub message: &'static str,
}

fn exposed(addr: SocketAddr) -> bool {
    !addr.ip().to_canonical().is_loopback()
}

fn unset(s: &Option<String>) -> bool {
    s.as_deref().is_none_or(str::is_empty)
}

impl Config {
    /// Every surface this configuration opens to other hosts, in a fixed
    /// order. Empty for a configuration that is closed everywhere.
    pub fn exposures(&self) -> Vec<Exposure> {
        let mut out = Vec::new();
        let http = self.server.listen;
        let admin = self.server.admin_listen.unwrap_or(http);
        if exposed(admin) && unset(&self.server.admin_token) {
            out.push(Exposure {
                key: "server.admin_token",
                addr: admin,
                message: "server.admin_token is not set: /metrics is readable by anyone who can reach this listener, and /admin/* and /v1/sessions accept loopback only until it is",
            });
        }
        if exposed(http) && unset(&self.twilio.auth_token) && unset(&self.twilio.shared_key_secret)
        {
            out.push(Exposure {
                key: "twilio.auth_token",
                addr: http,
                message: if self.twilio.webhook.enabled {
                    "neither twilio.auth_token nor twilio.shared_key_secret is set: /v1/media-stream and the voice webhook /v1/twilio/voice accept unsigned requests from anyone who can reach this listener"
                } else {
                    "neither twilio.auth_token nor twilio.shared_key_secret is set: /v1/media-stream accepts unsigned streams from anyone who can reach this listener"
                },
            });
        }
        if self.agent.enabled && exposed(self.agent.listen) {
            out.push(Exposure {
                key: "agent.listen",
                addr: self.agent.listen,
                message: "agent.listen is reachable from other hosts: anyone who can connect learns this instance's load and drain state",
            });
        }
        if self.sip.enabled && exposed(self.sip.listen) && self.sip.trusted_peers.is_empty() {
            out.push(Exposure {
                key: "sip.trusted_peers",
                addr: self.sip.listen,
                message: "sip.trusted_peers is empty: any host that can reach this SIP listener can place calls (set it to your carriers' / proxies' addresses)",
            });
        }
        if self.webrtc.enabled && self.webrtc.open && exposed(self.server.listen) {
            out.push(Exposure {
                key: "webrtc.open",
                addr: self.server.listen,
                message: "webrtc.open is true: POST /v1/webrtc places calls without a partner key for anyone who can reach this listener",
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(cfg: &Config) -> Vec<&'static str> {
        cfg.exposures().iter().map(|e| e.key).collect()
    }

    #[test]
    fn the_defaults_name_the_admin_token_and_twilio_signatures() {
        let cfg = Config::default();
        assert_eq!(keys(&cfg), ["server.admin_token", "twilio.auth_token"]);
    }

    #[test]
    fn secrets_and_loopback_listeners_close_every_surface() {
        let mut cfg = Config::default();
        cfg.server.admin_token = Some("t".into());
        cfg.twilio.shared_key_secret = Some("s".into());
        cfg.agent.enabled = true;
        cfg.sip.enabled = true;
        cfg.sip.listen = "127.0.0.1:5060".parse().unwrap();
        assert_eq!(keys(&cfg), Vec::<&str>::new());
        cfg.agent.listen = "0.0.0.0:9777".parse().unwrap();
        cfg.sip.listen = "0.0.0.0:5060".parse().unwrap();
        assert_eq!(keys(&cfg), ["agent.listen", "sip.trusted_peers"]);
        cfg.sip.trusted_peers = vec!["192.0.2.10".parse().unwrap()];
        assert_eq!(keys(&cfg), ["agent.listen"]);
        cfg.server.admin_token = Some(String::new());
        assert_eq!(keys(&cfg), ["server.admin_token", "agent.listen"]);
    }

    #[test]
    fn a_loopback_admin_listener_needs_no_token_but_a_reachable_one_does() {
        let mut cfg = Config::default();
        cfg.twilio.auth_token = Some("t".into());
        cfg.server.admin_listen = Some("127.0.0.1:8081".parse().unwrap());
        assert_eq!(keys(&cfg), Vec::<&str>::new());
        cfg.server.admin_listen = Some("0.0.0.0:8081".parse().unwrap());
        let open = cfg.exposures();
        assert_eq!(open.len(), 1);
        assert_eq!(
            (open[0].key, open[0].addr.port()),
            ("server.admin_token", 8081)
        );
    }

    #[test]
    fn an_open_webrtc_ingress_is_named_unless_its_listener_is_loopback() {
        let mut cfg = Config::default();
        cfg.server.admin_token = Some("t".into());
        cfg.twilio.auth_token = Some("t".into());
        cfg.webrtc.enabled = true;
        cfg.webrtc.open = true;
        assert_eq!(keys(&cfg), ["webrtc.open"], "0.0.0.0 is reachable");
        cfg.server.listen = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(keys(&cfg), Vec::<&str>::new(), "a loopback demo");
        cfg.server.listen = "0.0.0.0:8080".parse().unwrap();
        cfg.webrtc.open = false;
        assert_eq!(keys(&cfg), Vec::<&str>::new(), "partner keys close it");
    }
}
