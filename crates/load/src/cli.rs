//! `callgate load <args>`: the command line over [`crate::run`].

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

use crate::arrival::Arrival;
use crate::config::LoadConfig;
use crate::partner_wire::PartnerFormat;
use crate::transport::Protocol;

/// Arguments of `callgate load`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// URL of the server under test [default:
    /// ws://127.0.0.1:8080/v1/media-stream, .../v1/partner/stream with
    /// `--protocol partner`, http://127.0.0.1:8080/v1/webrtc with
    /// `--protocol webrtc`].
    #[arg(long)]
    pub url: Option<String>,
    /// Ingress the callers use: Twilio Media Streams, callgate's partner
    /// WebSocket (docs/partner-protocol.md), or WebRTC (docs/webrtc.md:
    /// the offer POSTed to /v1/webrtc, Opus over DTLS-SRTP).
    #[arg(long, visible_alias = "ingress", value_enum, default_value_t = Protocol::Twilio)]
    pub protocol: Protocol,
    /// Partner API key, sent as `Authorization: Bearer <key>` (partner
    /// protocol and WebRTC; without it the call carries no credentials).
    #[arg(long, env = "CALLGATE_PARTNER_KEY", hide_env_values = true)]
    pub partner_key: Option<String>,
    /// Partner audio format: `l16` (16-bit linear PCM, 16 kHz) or `pcmu`
    /// (G.711 μ-law, 8 kHz).
    #[arg(long, value_enum, default_value_t = PartnerFormat::L16)]
    pub partner_format: PartnerFormat,
    /// Number of calls to place.
    #[arg(long, short = 'n', default_value_t = 1)]
    pub calls: usize,
    /// Most calls in flight at once (default: all of them).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Dial at a steady rate, in calls per second (default: all at once).
    #[arg(long, conflicts_with = "ramp")]
    pub rate: Option<f64>,
    /// Ramp the dial rate linearly: FROM:TO:OVER, e.g. `1:20:60s`.
    #[arg(long, value_parser = parse_ramp)]
    pub ramp: Option<Arrival>,
    /// Caller utterances per call: a fixed count (`3`) or `MIN-MAX`
    /// (`2-5`), drawn uniformly per call from the seed.
    #[arg(long, default_value = "3", value_parser = parse_count_range)]
    pub utterances: (usize, usize),
    /// Utterance length in ms, `MIN-MAX` or a single value.
    #[arg(long, default_value = "1200-2500", value_parser = parse_range)]
    pub utterance_ms: (u32, u32),
    /// Pause before speaking, in ms, `MIN-MAX` or a single value.
    #[arg(long, default_value = "300-800", value_parser = parse_range)]
    pub think_ms: (u32, u32),
    /// Dead air that makes a call silent, e.g. `3s`, `2500ms`.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub silence_threshold: Duration,
    /// Hard limit on one call, e.g. `120s`, `5m`.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub call_timeout: Duration,
    /// Twilio auth token used to sign upgrades (`X-Twilio-Signature`).
    #[arg(long, env = "TWILIO_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
    /// A `start.customParameters` entry, `KEY=VALUE` (repeatable).
    #[arg(long = "param", value_parser = parse_param)]
    pub params: Vec<(String, String)>,
    /// Seed for utterance lengths, pauses and voices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the full report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Never draw the progress line (it is only drawn on a terminal anyway).
    #[arg(long)]
    pub no_progress: bool,
    /// Barge-in: speak the first utterance this many ms after the
    /// greeting's first audio frame, over the greeting.
    #[arg(long)]
    pub barge_in_at_ms: Option<u32>,
    /// Cough: a short voiced burst this many ms into bot turn `--cough-turn`.
    #[arg(long)]
    pub cough_at_ms: Option<u32>,
    /// Length of the cough in ms.
    #[arg(long, default_value_t = 150)]
    pub cough_ms: u32,
    /// The bot turn coughed into: 0 the greeting, n the reply to utterance n.
    #[arg(long, default_value_t = 1)]
    pub cough_turn: usize,
    /// WebRTC: silence after the bot's audio that ends its turn (WebRTC
    /// carries no marks), in ms; below `--silence-threshold`.
    #[arg(long, default_value_t = crate::config::DEFAULT_TURN_GAP_MS)]
    pub turn_gap_ms: u32,
}

impl LoadArgs {
    /// The run configuration these arguments describe.
    pub fn to_config(&self) -> LoadConfig {
        let arrival = match (self.rate, self.ramp) {
            (_, Some(ramp)) => ramp,
            (Some(per_second), None) => Arrival::Rate { per_second },
            (None, None) => Arrival::AllAtOnce,
        };
        let url = self
            .url
            .clone()
            .unwrap_or_else(|| self.protocol.default_url().to_string());
        LoadConfig {
            url,
            protocol: self.protocol,
            partner_key: self.partner_key.clone(),
            partner_format: self.partner_format,
            calls: self.calls,
            concurrency: self.concurrency.unwrap_or(0),
            arrival,
            utterances: self.utterances.0,
            utterances_max: (self.utterances.1 > self.utterances.0).then_some(self.utterances.1),
            utterance_ms: self.utterance_ms,
            think_ms: self.think_ms,
            silence_threshold: self.silence_threshold,
            call_timeout: self.call_timeout,
            auth_token: self.auth_token.clone(),
            custom_parameters: self.params.clone(),
            seed: self.seed,
            progress: !self.no_progress && std::io::stderr().is_terminal(),
            barge_in_at_ms: self.barge_in_at_ms,
            cough_at_ms: self.cough_at_ms,
            cough_ms: self.cough_ms,
            cough_turn: self.cough_turn,
            turn_gap_ms: self.turn_gap_ms,
        }
    }
}

/// Runs up to this many calls get a line each on stdout (beyond that, the
/// JSON report has them).
const PER_CALL_TABLE_MAX: usize = 50;

/// Runs the load, prints the table, writes the JSON report if asked.
///
/// # Errors
/// An invalid configuration or an unwritable report file. A bad server is
/// not an error: it is the exit code (1 if any call failed or went silent).
pub async fn main(args: LoadArgs) -> anyhow::Result<ExitCode> {
    let cfg = args.to_config();
    cfg.validate().context("invalid load configuration")?;
    let report = crate::run(cfg).await;
    let mut out = std::io::stdout().lock();
    if report.calls.len() <= PER_CALL_TABLE_MAX {
        report
            .print_calls(&mut out)
            .context("printing the report")?;
    }
    report
        .print_table(&mut out)
        .context("printing the report")?;
    drop(out);
    if let Some(path) = &args.json {
        report.save(path)?;
    }
    Ok(if report.has_failures() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `"300-800"` or `"500"` (a fixed value).
pub fn parse_range(s: &str) -> Result<(u32, u32), String> {
    parse_pair(s)
}

/// `"2-5"` or `"3"` (a fixed count).
pub fn parse_count_range(s: &str) -> Result<(usize, usize), String> {
    parse_pair(s)
}

/// `"MIN-MAX"` or a single value meaning both.
fn parse_pair<T>(s: &str) -> Result<(T, T), String>
where
    T: std::str::FromStr + PartialOrd + Copy,
    T::Err: std::fmt::Display,
{
    let num = |v: &str| v.trim().parse::<T>().map_err(|e| format!("{v:?}: {e}"));
    let (lo, hi) = match s.split_once('-') {
        Some((lo, hi)) => (num(lo)?, num(hi)?),
        None => (num(s)?, num(s)?),
    };
    if lo > hi {
        return Err(format!("range {s:?} has min > max"));
    }
    Ok((lo, hi))
}

/// `"250ms"`, `"3s"`, `"1.5s"`, `"2m"`; a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let value: f64 = num.trim().parse().map_err(|e| format!("{s:?}: {e}"))?;
    let secs = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        other => return Err(format!("unknown unit {other:?} (use ms, s or m)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

/// `"1:20:60s"` → a ramp from 1 to 20 calls per second over 60 s.
pub fn parse_ramp(s: &str) -> Result<Arrival, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let [from, to, over] = parts.as_slice() else {
        return Err(format!("{s:?}: expected FROM:TO:OVER, e.g. 1:20:60s"));
    };
    let rate = |v: &str| v.trim().parse::<f64>().map_err(|e| format!("{v:?}: {e}"));
    let ramp = Arrival::Ramp {
        from_per_s: rate(from)?,
        to_per_s: rate(to)?,
        over: parse_duration(over)?,
    };
    ramp.validate().map_err(|e| e.to_string())?;
    Ok(ramp)
}

/// `"tenant=acme"`.
pub fn parse_param(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?}: expected KEY=VALUE")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        load: LoadArgs,
    }

    #[test]
    fn value_parsers_accept_the_documented_forms() {
        assert_eq!(parse_range("300-800"), Ok((300, 800)));
        assert_eq!(parse_range("500"), Ok((500, 500)));
        assert_eq!(parse_count_range("2-5"), Ok((2, 5)));
        assert_eq!(parse_count_range(" 3 "), Ok((3, 3)));
        assert!(parse_count_range("5-2").is_err());
        assert!(parse_count_range("-1").is_err());
        assert!(parse_range("800-300").is_err());
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1_500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("4"), Ok(Duration::from_secs(4)));
        assert!(parse_duration("3h").is_err());
        assert_eq!(
            parse_param("tenant=acme=x"),
            Ok(("tenant".into(), "acme=x".into()))
        );
        assert!(parse_param("=x").is_err());
        assert!(parse_ramp("1:20").is_err());
        assert!(parse_ramp("5:0:10s").is_err());
    }

    #[test]
    fn arguments_build_the_config() {
        let cmd = Cmd::parse_from([
            "load",
            "--calls",
            "40",
            "--concurrency",
            "10",
            "--ramp",
            "1:20:30s",
            "--param",
            "tenant=acme",
            "--utterance-ms",
            "700-900",
            "--silence-threshold",
            "2500ms",
            "--no-progress",
        ]);
        let cfg = cmd.load.to_config();
        assert_eq!((cfg.calls, cfg.concurrency), (40, 10));
        assert_eq!(
            cfg.arrival,
            Arrival::Ramp {
                from_per_s: 1.0,
                to_per_s: 20.0,
                over: Duration::from_secs(30)
            }
        );
        assert_eq!(
            cfg.custom_parameters,
            vec![("tenant".to_string(), "acme".to_string())]
        );
        assert_eq!(cfg.utterance_ms, (700, 900));
        assert_eq!(cfg.silence_threshold, Duration::from_millis(2_500));
        assert_eq!((cfg.utterances, cfg.utterances_max), (3, None));
        assert!(!cfg.progress);
        assert!(cfg.validate().is_ok());
        let ranged = Cmd::parse_from(["load", "--utterances", "2-5"])
            .load
            .to_config();
        assert_eq!((ranged.utterances, ranged.utterances_max), (2, Some(5)));
        let fixed = Cmd::parse_from(["load", "--utterances", "4"])
            .load
            .to_config();
        assert_eq!((fixed.utterances, fixed.utterances_max), (4, None));
        assert!(Cmd::try_parse_from(["load", "--rate", "2", "--ramp", "1:2:3s"]).is_err());
        assert_eq!((cfg.barge_in_at_ms, cfg.cough_at_ms), (None, None));
        let scenarios = Cmd::parse_from([
            "load",
            "--barge-in-at-ms",
            "800",
            "--cough-at-ms",
            "700",
            "--cough-turn",
            "2",
        ])
        .load
        .to_config();
        assert_eq!(scenarios.barge_in_at_ms, Some(800));
        assert_eq!(
            (
                scenarios.cough_at_ms,
                scenarios.cough_ms,
                scenarios.cough_turn
            ),
            (Some(700), 150, 2)
        );
        assert!(scenarios.validate().is_ok());
        assert_eq!(
            (cfg.protocol, cfg.url.as_str()),
            (Protocol::Twilio, "ws://127.0.0.1:8080/v1/media-stream")
        );
    }

    #[test]
    fn partner_arguments_pick_the_partner_endpoint_key_and_format() {
        let cfg = Cmd::parse_from([
            "load",
            "--protocol",
            "partner",
            "--partner-key",
            "pk_live_123",
        ])
        .load
        .to_config();
        assert_eq!(cfg.protocol, Protocol::Partner);
        assert_eq!(cfg.url, "ws://127.0.0.1:8080/v1/partner/stream");
        assert_eq!(cfg.partner_key.as_deref(), Some("pk_live_123"));
        assert_eq!(cfg.partner_format, PartnerFormat::L16);
        let pcmu = Cmd::parse_from([
            "load",
            "--protocol",
            "partner",
            "--partner-format",
            "pcmu",
            "--url",
            "wss://gw.example/v1/partner/stream",
        ])
        .load
        .to_config();
        assert_eq!(pcmu.partner_format, PartnerFormat::Pcmu);
        assert_eq!(pcmu.url, "wss://gw.example/v1/partner/stream");
        assert!(Cmd::try_parse_from(["load", "--protocol", "sip"]).is_err());
        let webrtc = Cmd::parse_from(["load", "--ingress", "webrtc", "--partner-key", "pk_1"])
            .load
            .to_config();
        assert_eq!(webrtc.protocol, Protocol::Webrtc);
        assert_eq!(webrtc.url, "http://127.0.0.1:8080/v1/webrtc");
        assert_eq!(webrtc.partner_key.as_deref(), Some("pk_1"));
        assert_eq!(
            webrtc.call_protocol(),
            crate::CallProtocol::Webrtc { turn_gap_ms: 800 }
        );
        assert!(webrtc.validate().is_ok());
        let gap = Cmd::parse_from(["load", "--protocol", "webrtc", "--turn-gap-ms", "5000"])
            .load
            .to_config();
        assert!(
            gap.validate().is_err(),
            "a turn gap above the silence threshold"
        );
        let ws = Cmd::parse_from(["load", "--protocol", "webrtc", "--url", "ws://x/v1/webrtc"])
            .load
            .to_config();
        assert!(ws.validate().is_err(), "WebRTC posts its offer over HTTP");
        assert!(Cmd::try_parse_from(["load", "--partner-format", "opus"]).is_err());
    }
}
