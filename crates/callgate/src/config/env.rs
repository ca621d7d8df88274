//! The environment layer of the configuration: `CALLGATE_<SECTION>__<KEY>`.
//!
//! figment reads an environment value as TOML-ish (`12345` a number, `true`
//! a boolean, `[a, b]` an array), which is right for ports and lists and
//! wrong for secrets and names: an admin token or a Twilio auth token that
//! happens to be all digits would fail to load ("expected a string"). The
//! keys in [`VERBATIM`] (and every `partners.<id>.key_sha256`) are taken
//! exactly as written instead.

use figment::Figment;
use figment::providers::Serialized;
use figment::value::Value;

const PREFIX: &str = "CALLGATE_";

/// Keys whose environment value is always the string as written.
const VERBATIM: &[&str] = &[
    "server.admin_token",
    "server.instance",
    "twilio.auth_token",
    "twilio.shared_key_secret",
    "twilio.public_url",
    "stt.api_key",
    "tts.api_key",
    "tts.voice_id",
];

/// `SERVER__ADMIN_TOKEN` → `server.admin_token`.
fn path_of(key: &str) -> String {
    key.to_ascii_lowercase().replace("__", ".")
}

fn verbatim(path: &str) -> bool {
    VERBATIM.contains(&path)
        || path
            .strip_prefix("partners.")
            .and_then(|rest| rest.strip_suffix(".key_sha256"))
            .is_some_and(|id| !id.contains('.'))
}

/// Merges the environment (`vars`: name, value) over `fig`, as figment's
/// `Env` provider would (values parsed as TOML-ish, `__` nesting, keys
/// lowercased) except that [`verbatim`] keys stay strings. The shortcut
/// `CALLGATE_DATABASE_URL` is `database.url`, verbatim too. Only `vars` is
/// read, never the process environment, so a caller can load the
/// configuration of a process it has not started.
pub(super) fn merge(mut fig: Figment, vars: impl IntoIterator<Item = (String, String)>) -> Figment {
    for (name, value) in vars {
        let Some(key) = name.strip_prefix(PREFIX).filter(|k| !k.is_empty()) else {
            continue;
        };
        let path = if key == "DATABASE_URL" {
            "database.url".to_string()
        } else {
            path_of(key)
        };
        let value = if path == "database.url" || verbatim(&path) {
            Value::from(value)
        } else {
            value
                .parse::<Value>()
                .unwrap_or_else(|never| match never {})
        };
        fig = fig.merge(Serialized::default(&path, value));
    }
    fig
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_and_partner_digests_are_verbatim_and_nothing_else_is() {
        assert!(verbatim("server.admin_token"));
        assert!(verbatim("partners.acme.key_sha256"));
        assert!(!verbatim("partners.acme.max_concurrent_calls"));
        assert!(!verbatim("partners.a.b.key_sha256"));
        assert!(!verbatim("admission.queue_max"));
        assert_eq!(
            path_of("PARTNERS__ACME__KEY_SHA256"),
            "partners.acme.key_sha256"
        );
    }

    #[test]
    fn an_all_digit_token_and_a_digest_load_as_the_strings_written() {
        let digest = "0".repeat(63) + "7";
        let vars = [
            ("CALLGATE_SERVER__ADMIN_TOKEN", "0123456789"),
            ("CALLGATE_TWILIO__AUTH_TOKEN", "true"),
            ("CALLGATE_PARTNERS__ACME__KEY_SHA256", digest.as_str()),
            ("CALLGATE_DATABASE_URL", "postgres://db/callgate"),
            ("OTHER", "ignored"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let fig = Figment::from(Serialized::defaults(super::super::Config::default()));
        let cfg: super::super::Config = merge(fig, vars).extract().expect("loads");
        assert_eq!(cfg.server.admin_token.as_deref(), Some("0123456789"));
        assert_eq!(cfg.twilio.auth_token.as_deref(), Some("true"));
        assert_eq!(cfg.partners["acme"].key_sha256, digest);
        assert_eq!(cfg.database.url, "postgres://db/callgate");
    }

    #[test]
    fn other_values_parse_as_figment_would_and_only_the_given_vars_count() {
        let vars = [
            ("CALLGATE_SIP__ENABLED", "true"),
            ("CALLGATE_SIP__TRUSTED_PEERS", "[192.0.2.10, 192.0.2.11]"),
            ("CALLGATE_ADMISSION__QUEUE_MAX", "7"),
            ("CALLGATE_", "ignored: no key"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let fig = Figment::from(Serialized::defaults(super::super::Config::default()));
        let cfg: super::super::Config = merge(fig, vars).extract().expect("loads");
        assert!(cfg.sip.enabled);
        assert_eq!(cfg.sip.trusted_peers.len(), 2);
        assert_eq!(cfg.admission.queue_max, 7);
        let fig = Figment::from(Serialized::defaults(super::super::Config::default()));
        let cfg: super::super::Config = merge(fig, []).extract().expect("loads");
        assert!(!cfg.sip.enabled, "nothing from the process environment");
    }
}
