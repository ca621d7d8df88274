//! The knobs of a load run, and how each call's plan is drawn from them.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::arrival::Arrival;
use crate::caller::{CallPlan, CoughPlan, TurnPlan};
use crate::error::LoadError;
use crate::ids::{AccountSid, CallIds, CallSid, StreamSid};
use crate::partner_wire::PartnerFormat;
use crate::transport::{CallProtocol, Protocol};

/// Longest utterance a caller may be configured to speak.
const MAX_UTTERANCE_MS: u32 = 60_000;
/// Most utterances one call may be planned with (a plan is drawn up front).
const MAX_UTTERANCES: usize = 1_000;
/// Longest cough a caller may be configured with: a cough is a short
/// burst, not an utterance.
const MAX_COUGH_MS: u32 = 1_000;
/// Salt of the random stream that draws each call's utterance count, kept
/// apart from the turn stream so a fixed count reproduces earlier plans.
const COUNT_STREAM: u64 = 0x6361_6c6c_2d6c_656e; // "call-len"
/// WebRTC's default turn gap: a pause a listener takes for the end of a
/// turn, well above the gaps inside one (the server's pacer keeps its
/// stream going), well below the silence threshold.
pub const DEFAULT_TURN_GAP_MS: u32 = 800;
/// Shortest turn gap: less would end turns inside the bot's own audio.
const MIN_TURN_GAP_MS: u32 = 100;

/// Everything a load run needs.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// `ws://host:port/v1/media-stream` (or `wss://`); for the partner
    /// protocol, `ws://host:port/v1/partner/stream`; for WebRTC, the
    /// offer endpoint `http://host:port/v1/webrtc` (or `https://`).
    pub url: String,
    /// The carrier protocol every call speaks (default: Twilio).
    pub protocol: Protocol,
    /// Partner protocol and WebRTC: the API key, sent as `Authorization:
    /// Bearer <key>` on the upgrade (WebRTC: on the offer's POST). `None`
    /// sends no `Authorization` header (a server must then refuse with
    /// HTTP 401, unless its WebRTC ingress is `open`).
    pub partner_key: Option<String>,
    /// Partner protocol: the audio format negotiated in `start`.
    pub partner_format: PartnerFormat,
    /// How many calls to place.
    pub calls: usize,
    /// Most calls in flight at once; `0` means no limit beyond `calls`.
    pub concurrency: usize,
    pub arrival: Arrival,
    /// Caller utterances per call (each answered by a bot turn); with
    /// `utterances_max`, the fewest a call is planned with.
    pub utterances: usize,
    /// When set (and above `utterances`), each call's utterance count is
    /// drawn uniformly from `utterances..=utterances_max` (seeded), so call
    /// durations vary across the run the way real calls do.
    pub utterances_max: Option<usize>,
    /// Inclusive range the length of each utterance is drawn from.
    pub utterance_ms: (u32, u32),
    /// Inclusive range of the pause between the bot's turn end and speech.
    pub think_ms: (u32, u32),
    /// Dead air longer than this while something is owed makes a call `Silent`.
    pub silence_threshold: Duration,
    /// Hard limit on one call, from dialling to its end.
    pub call_timeout: Duration,
    /// Twilio auth token: when set, upgrades carry `X-Twilio-Signature`.
    pub auth_token: Option<String>,
    /// Sent in `start.customParameters`.
    pub custom_parameters: Vec<(String, String)>,
    /// Seeds utterance lengths, pauses and voices (SIDs stay unique per run).
    pub seed: u64,
    /// Show a live progress line on stderr.
    pub progress: bool,
    /// Barge-in scenario: each caller speaks its first utterance this many
    /// ms after the greeting's first audio frame was received — over the
    /// greeting — instead of after the greeting's closing mark, and records
    /// what the server did about it (`CallRecord::barge_in`).
    pub barge_in_at_ms: Option<u32>,
    /// Cough scenario: a short voiced burst of `cough_ms` this many ms after
    /// the first audio frame of bot turn `cough_turn` was received; then
    /// silence, and the caller keeps listening (`CallRecord::cough`).
    pub cough_at_ms: Option<u32>,
    /// Length of the cough (`media::synth::SpeechSynth::utterance`).
    pub cough_ms: u32,
    /// The bot turn coughed into: 0 the greeting, `n` the reply to
    /// utterance `n` (default 1, the first reply).
    pub cough_turn: usize,
    /// WebRTC: silence after the bot's own audio that ends its turn (there
    /// are no marks); below `silence_threshold`.
    pub turn_gap_ms: u32,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            url: Protocol::Twilio.default_url().into(),
            protocol: Protocol::Twilio,
            partner_key: None,
            partner_format: PartnerFormat::default(),
            calls: 1,
            concurrency: 0,
            arrival: Arrival::AllAtOnce,
            utterances: 3,
            utterances_max: None,
            utterance_ms: (1_200, 2_500),
            think_ms: (300, 800),
            silence_threshold: Duration::from_secs(3),
            call_timeout: Duration::from_secs(120),
            auth_token: None,
            custom_parameters: Vec::new(),
            seed: 1,
            progress: false,
            barge_in_at_ms: None,
            cough_at_ms: None,
            cough_ms: 150,
            cough_turn: 1,
            turn_gap_ms: DEFAULT_TURN_GAP_MS,
        }
    }
}

impl LoadConfig {
    /// Checks every knob is usable.
    ///
    /// # Errors
    /// [`LoadError::InvalidConfig`] for the first bad value.
    pub fn validate(&self) -> Result<(), LoadError> {
        let bad = |field: &'static str, reason: &str| {
            Err(LoadError::InvalidConfig {
                field,
                reason: reason.to_string(),
            })
        };
        let [plain, tls] = self.protocol.schemes();
        let scheme_ok = self.url.starts_with(plain) || self.url.starts_with(tls);
        if !scheme_ok || self.url.parse::<http::Uri>().is_err() {
            return match self.protocol {
                Protocol::Webrtc => bad("url", "must be an http:// or https:// URL (WebRTC)"),
                _ => bad("url", "must be a ws:// or wss:// URL"),
            };
        }
        if self.calls == 0 {
            return bad("calls", "must be at least 1");
        }
        if let Some(key) = &self.partner_key
            && (key.is_empty() || http::HeaderValue::from_str(&format!("Bearer {key}")).is_err())
        {
            return bad(
                "partner_key",
                "must be non-empty and fit an HTTP header (visible ASCII)",
            );
        }
        if self.utterances > MAX_UTTERANCES {
            return bad("utterances", "must be at most 1000");
        }
        match self.utterances_max {
            Some(max) if max < self.utterances => {
                return bad("utterances_max", "must be at least `utterances`");
            }
            Some(max) if max > MAX_UTTERANCES => {
                return bad("utterances_max", "must be at most 1000");
            }
            _ => {}
        }
        let (lo, hi) = self.utterance_ms;
        if lo == 0 || lo > hi || hi > MAX_UTTERANCE_MS {
            return bad("utterance_ms", "needs 0 < min <= max <= 60000");
        }
        if self.think_ms.0 > self.think_ms.1 {
            return bad("think_ms", "needs min <= max");
        }
        if self.silence_threshold.is_zero() {
            return bad("silence_threshold", "must be positive");
        }
        if self.call_timeout.is_zero() {
            return bad("call_timeout", "must be positive");
        }
        self.validate_scenarios()?;
        self.validate_webrtc()?;
        self.arrival.validate()
    }

    /// WebRTC's turn gap fits under the silence threshold; the interaction
    /// scenarios need marks and `clear`, which WebRTC does not carry.
    fn validate_webrtc(&self) -> Result<(), LoadError> {
        if self.protocol != Protocol::Webrtc {
            return Ok(());
        }
        let bad = |field: &'static str, reason: &str| {
            Err(LoadError::InvalidConfig {
                field,
                reason: reason.to_string(),
            })
        };
        let gap = Duration::from_millis(u64::from(self.turn_gap_ms));
        if self.turn_gap_ms < MIN_TURN_GAP_MS || gap >= self.silence_threshold {
            return bad(
                "turn_gap_ms",
                "needs 100 <= turn_gap_ms < silence_threshold",
            );
        }
        if self.barge_in_at_ms.is_some() || self.cough_at_ms.is_some() {
            return bad(
                "protocol",
                "the barge-in and cough scenarios need marks and `clear` (Twilio, partner)",
            );
        }
        Ok(())
    }

    /// The barge-in and cough scenarios fit the script.
    fn validate_scenarios(&self) -> Result<(), LoadError> {
        let bad = |field: &'static str, reason: &str| {
            Err(LoadError::InvalidConfig {
                field,
                reason: reason.to_string(),
            })
        };
        if self.barge_in_at_ms.is_some() && self.utterances == 0 {
            return bad("barge_in_at_ms", "needs at least one utterance to speak");
        }
        if self.cough_at_ms.is_none() {
            return Ok(());
        }
        if self.cough_ms == 0 || self.cough_ms > MAX_COUGH_MS {
            return bad("cough_ms", "needs 0 < cough_ms <= 1000");
        }
        if self.cough_turn > self.utterances {
            return bad(
                "cough_turn",
                "must be a turn every call has: at most `utterances` (0 = the greeting)",
            );
        }
        if self.cough_turn == 0 && self.barge_in_at_ms.is_some() {
            return bad("cough_turn", "the greeting is already barged into");
        }
        Ok(())
    }

    /// The cough every call plans, if any.
    fn cough_plan(&self) -> Option<CoughPlan> {
        self.cough_at_ms.map(|at| CoughPlan {
            turn: self.cough_turn,
            at: Duration::from_millis(u64::from(at)),
            len_ms: self.cough_ms,
        })
    }

    /// The protocol of every call, with its audio format.
    pub fn call_protocol(&self) -> CallProtocol {
        match self.protocol {
            Protocol::Twilio => CallProtocol::Twilio,
            Protocol::Partner => CallProtocol::Partner(self.partner_format),
            Protocol::Webrtc => CallProtocol::Webrtc {
                turn_gap_ms: self.turn_gap_ms,
            },
        }
    }

    /// Calls allowed in flight at once.
    pub fn in_flight_limit(&self) -> usize {
        match self.concurrency {
            0 => self.calls,
            n => n.min(self.calls),
        }
        .clamp(1, tokio::sync::Semaphore::MAX_PERMITS)
    }

    /// The inclusive range each call's utterance count is drawn from.
    pub fn utterance_range(&self) -> (usize, usize) {
        let max = self.utterances_max.unwrap_or(self.utterances);
        (self.utterances, max.max(self.utterances))
    }

    /// How many utterances call `index` speaks: fixed, or drawn from its own
    /// seeded stream (so the turn lengths of a fixed-count run stay as before).
    fn utterance_count(&self, index: usize) -> usize {
        match self.utterance_range() {
            (lo, hi) if lo == hi => lo,
            (lo, hi) => {
                let mut rng = StdRng::seed_from_u64(mix(self.seed ^ COUNT_STREAM, index as u64));
                rng.random_range(lo..=hi)
            }
        }
    }

    /// The plan of call `index`: deterministic for a given seed, except for
    /// the SIDs, which are fresh so a stateful server never sees a repeat.
    pub fn plan(&self, index: usize, account: AccountSid) -> CallPlan {
        let mut rng = StdRng::seed_from_u64(mix(self.seed, index as u64));
        let turns = (0..self.utterance_count(index))
            .map(|_| TurnPlan {
                think: Duration::from_millis(u64::from(draw(&mut rng, self.think_ms))),
                speech_ms: draw(&mut rng, self.utterance_ms),
                cued: false,
            })
            .collect();
        CallPlan {
            index,
            ids: CallIds {
                account,
                call: CallSid::random(),
                stream: StreamSid::random(),
            },
            custom_parameters: self.custom_parameters.clone(),
            turns,
            silence_threshold: self.silence_threshold,
            call_timeout: self.call_timeout,
            voice_seed: rng.random(),
            protocol: self.call_protocol(),
            barge_in_at: self
                .barge_in_at_ms
                .map(|ms| Duration::from_millis(u64::from(ms))),
            cough: self.cough_plan(),
            hold: false,
            leave: None,
        }
    }
}

/// A value from an inclusive range given in either order (never panics).
fn draw(rng: &mut StdRng, (a, b): (u32, u32)) -> u32 {
    rng.random_range(a.min(b)..=a.max(b))
}

/// SplitMix64 of (seed, index): neighbouring calls get unrelated streams.
fn mix(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_deterministic_per_seed_and_within_ranges() {
        let cfg = LoadConfig {
            utterances: 4,
            utterance_ms: (500, 900),
            think_ms: (100, 200),
            ..LoadConfig::default()
        };
        let account = AccountSid::random();
        let a = cfg.plan(3, account);
        let b = cfg.plan(3, account);
        assert_eq!(a.turns, b.turns);
        assert_eq!(a.voice_seed, b.voice_seed);
        assert_ne!(a.ids.call, b.ids.call);
        assert_eq!(a.turns.len(), 4);
        for t in &a.turns {
            assert!((500..=900).contains(&t.speech_ms));
            assert!((100..=200).contains(&t.think.as_millis()));
        }
        assert_ne!(cfg.plan(4, account).turns, a.turns);
    }

    #[test]
    fn validation_names_the_bad_knob() {
        let field = |cfg: LoadConfig| match cfg.validate() {
            Err(LoadError::InvalidConfig { field, .. }) => field,
            other => panic!("expected invalid config, got {other:?}"),
        };
        assert!(LoadConfig::default().validate().is_ok());
        let url = "http://x/".to_string();
        assert_eq!(
            field(LoadConfig {
                url,
                ..LoadConfig::default()
            }),
            "url"
        );
        assert_eq!(
            field(LoadConfig {
                calls: 0,
                ..LoadConfig::default()
            }),
            "calls"
        );
        let utterance_ms = (900, 500);
        assert_eq!(
            field(LoadConfig {
                utterance_ms,
                ..LoadConfig::default()
            }),
            "utterance_ms"
        );
        let partner_key = Some("two\nlines".to_string());
        assert_eq!(
            field(LoadConfig {
                partner_key,
                ..LoadConfig::default()
            }),
            "partner_key"
        );
        let arrival = Arrival::Rate { per_second: -1.0 };
        assert_eq!(
            field(LoadConfig {
                arrival,
                ..LoadConfig::default()
            }),
            "arrival"
        );
    }

    #[test]
    fn utterance_counts_are_drawn_per_call_within_the_range() {
        let cfg = LoadConfig {
            calls: 400,
            utterances: 2,
            utterances_max: Some(5),
            seed: 9,
            ..LoadConfig::default()
        };
        assert!(cfg.validate().is_ok());
        assert_eq!(cfg.utterance_range(), (2, 5));
        let account = AccountSid::random();
        let counts: Vec<usize> = (0..400).map(|i| cfg.plan(i, account).turns.len()).collect();
        let mut seen = [0usize; 6];
        for &n in &counts {
            assert!((2..=5).contains(&n), "{n}");
            seen[n] += 1;
        }
        // Uniform: every count appears, none dominates (expected 100 each).
        for n in 2..=5 {
            assert!((50..=150).contains(&seen[n]), "count {n}: {seen:?}");
        }
        // Same seed, same lengths; another seed, another sequence.
        let again: Vec<usize> = (0..400).map(|i| cfg.plan(i, account).turns.len()).collect();
        assert_eq!(counts, again);
        let other = LoadConfig {
            seed: 10,
            ..cfg.clone()
        };
        let other: Vec<usize> = (0..400)
            .map(|i| other.plan(i, account).turns.len())
            .collect();
        assert_ne!(counts, other);
    }

    #[test]
    fn a_fixed_count_keeps_the_plans_it_always_had() {
        let fixed = LoadConfig::default();
        let same_range = LoadConfig {
            utterances_max: Some(3),
            ..LoadConfig::default()
        };
        let account = AccountSid::random();
        for i in 0..20 {
            let (a, b) = (fixed.plan(i, account), same_range.plan(i, account));
            assert_eq!(a.turns.len(), 3);
            assert_eq!((a.turns, a.voice_seed), (b.turns, b.voice_seed));
        }
        let inverted = LoadConfig {
            utterances: 4,
            utterances_max: Some(2),
            ..LoadConfig::default()
        };
        assert!(matches!(
            inverted.validate(),
            Err(LoadError::InvalidConfig {
                field: "utterances_max",
                ..
            })
        ));
    }

    #[test]
    fn the_protocol_reaches_every_plan() {
        let account = AccountSid::random();
        assert_eq!(
            LoadConfig::default().plan(0, account).protocol,
            CallProtocol::Twilio
        );
        let partner = LoadConfig {
            protocol: Protocol::Partner,
            partner_format: PartnerFormat::Pcmu,
            ..LoadConfig::default()
        };
        assert_eq!(
            partner.plan(0, account).protocol,
            CallProtocol::Partner(PartnerFormat::Pcmu)
        );
        // The audio format does not change what a call is planned to say.
        let (a, b) = (
            partner.plan(5, account),
            LoadConfig::default().plan(5, account),
        );
        assert_eq!((a.turns, a.voice_seed), (b.turns, b.voice_seed));
    }

    #[test]
    fn scenarios_reach_every_plan_and_must_fit_the_script() {
        let cfg = LoadConfig {
            barge_in_at_ms: Some(800),
            cough_at_ms: Some(700),
            ..LoadConfig::default()
        };
        assert!(cfg.validate().is_ok());
        let plan = cfg.plan(0, AccountSid::random());
        assert_eq!(plan.barge_in_at, Some(Duration::from_millis(800)));
        assert_eq!(
            plan.cough,
            Some(CoughPlan {
                turn: 1,
                at: Duration::from_millis(700),
                len_ms: 150
            })
        );
        assert_eq!(
            LoadConfig::default().plan(0, AccountSid::random()).cough,
            None
        );
        let field = |cfg: LoadConfig| match cfg.validate() {
            Err(LoadError::InvalidConfig { field, .. }) => field,
            other => panic!("expected invalid config, got {other:?}"),
        };
        let silent = LoadConfig {
            utterances: 0,
            barge_in_at_ms: Some(800),
            ..LoadConfig::default()
        };
        assert_eq!(field(silent), "barge_in_at_ms");
        let beyond = LoadConfig {
            cough_turn: 4,
            ..cfg.clone()
        };
        assert_eq!(field(beyond), "cough_turn");
        let both_on_greeting = LoadConfig {
            cough_turn: 0,
            ..cfg.clone()
        };
        assert_eq!(field(both_on_greeting), "cough_turn");
        let long = LoadConfig {
            cough_ms: 5_000,
            ..cfg
        };
        assert_eq!(field(long), "cough_ms");
    }

    #[test]
    fn webrtc_dials_http_with_a_turn_gap_and_no_mark_scenarios() {
        let webrtc = LoadConfig {
            url: Protocol::Webrtc.default_url().into(),
            protocol: Protocol::Webrtc,
            ..LoadConfig::default()
        };
        assert!(webrtc.validate().is_ok());
        assert_eq!(
            webrtc.plan(0, AccountSid::random()).protocol,
            CallProtocol::Webrtc { turn_gap_ms: 800 }
        );
        let field = |cfg: LoadConfig| match cfg.validate() {
            Err(LoadError::InvalidConfig { field, .. }) => field,
            other => panic!("expected invalid config, got {other:?}"),
        };
        let ws = LoadConfig {
            url: "ws://127.0.0.1:8080/v1/webrtc".into(),
            ..webrtc.clone()
        };
        assert_eq!(field(ws), "url");
        let barge = LoadConfig {
            barge_in_at_ms: Some(500),
            ..webrtc.clone()
        };
        assert_eq!(field(barge), "protocol");
        let gap = LoadConfig {
            turn_gap_ms: 50,
            ..webrtc
        };
        assert_eq!(field(gap), "turn_gap_ms");
    }

    #[test]
    fn concurrency_zero_means_all_calls() {
        let cfg = LoadConfig {
            calls: 7,
            ..LoadConfig::default()
        };
        assert_eq!(cfg.in_flight_limit(), 7);
        assert_eq!(
            LoadConfig {
                concurrency: 3,
                ..cfg.clone()
            }
            .in_flight_limit(),
            3
        );
        assert_eq!(
            LoadConfig {
                concurrency: 30,
                ..cfg
            }
            .in_flight_limit(),
            7
        );
    }
}
