//! `callgate drill --find-knee`: the staircase against one squeezed
//! instance this command starts, ending in a signed knee receipt
//! (`callgate_drill::knee` judges; docs/drill.md, "Finding the knee").
//!
//! What it is: for each staircase a fresh rig (Postgres, the simulators and
//! the server as child processes, the bench's), the server pinned to CPU 0
//! and squeezed (a CFS quota, or burners beside it), everything else on
//! CPU 1; then each level in turn: `level` calls held in conversation at
//! once (closed loop: a caller who hangs up is replaced until each slot has
//! placed `--calls-per-slot` calls), each speaking `--utterances` times;
//! what the callers heard, what `/admin/status` and `/metrics` said, and
//! the server's CPU, judged against the limits. A staircase stops at its
//! first step that did not hold.
//!
//! What it never does: touch an instance it did not start, or leave a
//! cgroup, burner or child behind (the squeeze and the rig undo themselves
//! on every exit path, Ctrl-C included).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::bail;
use callgate_drill::knee::{
    self, Finding, KneeReceipt, Limits, Offer, ServerUnderTest, Staircase, Step,
};
use callgate_load::{Arrival, LoadConfig, Outcome};
use ed25519_dalek::SigningKey;

use callgate_rig::measured::squeeze::{self, How, Squeeze};
use callgate_rig::measured::{self as rig, Caps, Rig, metric};

/// How long a step's calls may take to end once the callers are done.
const SETTLE: Duration = Duration::from_secs(180);
/// The provider and database ceilings the squeezed server runs with: far
/// above any level the rig offers, so only the instance can be the knee.
const CEILING: u32 = 2_000;
/// The most calls one level may hold (the rig's own limit on this kind of
/// machine is about 600 Twilio callers).
pub const MAX_LEVEL: u32 = 600;

/// Knobs of `callgate drill --find-knee`.
#[derive(Debug, Clone, clap::Args)]
pub struct KneeArgs {
    /// Run the knee staircase against one squeezed instance this command
    /// starts (needs root, two cores and a release build).
    #[arg(long, conflicts_with_all = ["instances", "spawn"])]
    pub find_knee: bool,
    /// Calls held at once at each step, in increasing order.
    #[arg(
        long,
        requires = "find_knee",
        value_delimiter = ',',
        default_value = "10,20,30,40,50,60,80,100,120,150"
    )]
    pub levels: Vec<u32>,
    /// The server's CPU quota, as a share of one core.
    #[arg(
        long,
        requires = "find_knee",
        default_value_t = 0.15,
        conflicts_with = "burners"
    )]
    pub cpu_quota: f64,
    /// Squeeze with this many CPU burners beside the server instead.
    #[arg(long, requires = "find_knee")]
    pub burners: Option<u32>,
    /// The share taken off the knee for the recommended cap.
    #[arg(long, requires = "find_knee", default_value_t = 0.2)]
    pub margin: f64,
    /// Calls each held slot places in turn.
    #[arg(long, requires = "find_knee", default_value_t = 2)]
    pub calls_per_slot: u32,
    /// Utterances each caller speaks.
    #[arg(long, requires = "find_knee", default_value_t = 3)]
    pub utterances: u32,
    /// Calls dialled per second while a level fills.
    #[arg(long, requires = "find_knee", default_value_t = 20.0)]
    pub dial_rate: f64,
    /// A step breaks when its reply latency p95 is over this.
    #[arg(long, requires = "find_knee", default_value_t = 3_000)]
    pub reply_p95_ms: u64,
    /// `admission.max_lag_ms` of the server, and the lag a step may reach.
    #[arg(long, requires = "find_knee", default_value_t = 60)]
    pub max_lag_ms: u64,
}

impl KneeArgs {
    fn validate(&self) -> anyhow::Result<How> {
        if self.levels.is_empty() || self.levels.windows(2).any(|w| w[0] >= w[1]) {
            bail!("--levels must name at least one level, in increasing order");
        }
        if self.levels[0] == 0 || *self.levels.last().unwrap_or(&0) > MAX_LEVEL {
            bail!("--levels lie within 1..={MAX_LEVEL} (the rig cannot offer more honestly)");
        }
        if !(0.0..1.0).contains(&self.margin) {
            bail!("--margin is a share: at least 0, below 1");
        }
        if self.calls_per_slot == 0
            || self.utterances == 0
            || self.dial_rate.is_nan()
            || self.dial_rate <= 0.0
        {
            bail!("--calls-per-slot, --utterances and --dial-rate must be positive");
        }
        match self.burners {
            Some(0) => bail!("--burners must be at least 1"),
            Some(n) => Ok(How::Burners(n)),
            None if self.cpu_quota > 0.0 && self.cpu_quota <= 1.0 => Ok(How::Quota(self.cpu_quota)),
            None => bail!("--cpu-quota is a share of one core, above 0 and at most 1"),
        }
    }

    fn caps(&self) -> Caps {
        Caps {
            stt_cap: CEILING,
            tts_cap: CEILING,
            dialog_cap: CEILING,
            db_max_calls: CEILING,
            headroom: 5,
            queue_max: 100,
            queue_timeout_ms: 4_000,
            stt_empty_finals: 0.0,
            instance_max_lag_ms: self.max_lag_ms,
        }
    }
}

/// Runs `repeats` staircases, writes `out` and signs the receipt.
///
/// # Errors
/// The arguments are wrong, a rig could not be started or squeezed, or
/// `out` could not be written. A staircase cut short by a failure of the
/// rig is an error, never a knee.
pub async fn run(
    args: &KneeArgs,
    repeats: u32,
    client: String,
    out: &Path,
    key: &SigningKey,
) -> anyhow::Result<KneeReceipt> {
    let how = args.validate()?;
    let caps = args.caps();
    let mut staircases = Vec::new();
    let mut server = None;
    for number in 1..=repeats {
        let mut done = None;
        rig::with_rig(Rig::start(&caps), "child logs", async |rig: &mut Rig| {
            server = Some(server_under_test(rig, args).await?);
            done = Some(staircase(rig, args, how, number).await?);
            Ok(())
        })
        .await?;
        if let Some(s) = done {
            staircases.push(s);
        }
    }
    let Some(server) = server else {
        bail!("no staircase ran");
    };
    let receipt = KneeReceipt {
        limits: limits(args, server.reply_stall_ms),
        kind: knee::KIND.into(),
        created_at: String::new(),
        signed_by: String::new(),
        client,
        server,
        squeeze: knee::Squeeze {
            how: how.label(),
            server_cpus: "0".into(),
            rig_cpus: "1".into(),
            note: squeeze_note(how),
        },
        offer: Offer {
            levels: args.levels.clone(),
            calls_per_slot: args.calls_per_slot,
            utterances_per_call: args.utterances,
            dial_rate_per_s: args.dial_rate,
            carrier: "twilio".into(),
        },
        staircases: Vec::new(),
        finding: Finding::of(&[], args.margin),
        not_tested: not_tested(),
    };
    Ok(receipt.seal(out, &staircases, args.margin, key)?)
}

/// The limits a step is judged by, with the server's `reply_stall_ms`.
fn limits(args: &KneeArgs, reply_stall_ms: u64) -> Limits {
    Limits {
        reply_p95_ms: args.reply_p95_ms,
        max_lag_ms: args.max_lag_ms,
        silence_ms: reply_stall_ms + 500,
    }
}

async fn server_under_test(rig: &Rig, args: &KneeArgs) -> anyhow::Result<ServerUnderTest> {
    let c = &rig.server_config;
    let status = rig.status().await?;
    let config_sha256 = {
        use sha2::Digest as _;
        callgate_drill::sign::hex(&sha2::Sha256::digest(serde_json::to_vec(c)?))
    };
    Ok(ServerUnderTest {
        version: status["version"].as_str().unwrap_or("unreported").into(),
        config_sha256,
        max_lag_ms: c["admission"]["max_lag_ms"]
            .as_u64()
            .unwrap_or(args.max_lag_ms),
        lag_window_ms: c["admission"]["lag_window_ms"].as_u64().unwrap_or(0),
        reply_stall_ms: stall_ms(rig),
        configured_capacity: rig.capacity,
    })
}

fn stall_ms(rig: &Rig) -> u64 {
    rig.server_config["call"]["reply_stall_ms"]
        .as_u64()
        .unwrap_or(2_000)
}

/// One staircase on `rig`: the rig pinned, the server squeezed, then each
/// level until one does not hold.
async fn staircase(
    rig: &mut Rig,
    args: &KneeArgs,
    how: How,
    number: u32,
) -> anyhow::Result<Staircase> {
    let (server, sims, pg) = rig.pids();
    squeeze::pin(std::process::id(), "1")?;
    squeeze::pin(sims, "1")?;
    if let Some(pg) = pg {
        squeeze::pin_tree(pg, "1")?;
    }
    let _squeeze = Squeeze::apply(server, how)?;
    let limits = limits(args, stall_ms(rig));
    let mut steps = Vec::new();
    for &level in &args.levels {
        let s = step(rig, args, level).await?;
        let verdict = knee::judge(&s, &limits);
        eprintln!(
            "staircase {number}: {level} calls: {} (lag p99 peak {:.0} ms, reply p95 {:?} ms, server {:.2} cores)",
            match &verdict {
                knee::Verdict::Held => "held".to_string(),
                knee::Verdict::Broke(why) => format!("broke: {}", why.join("; ")),
                knee::Verdict::RigLimit(why) => format!("rig limit: {why}"),
            },
            s.peak_lag_p99_ms,
            s.reply_p95_ms,
            s.server_cores
        );
        let stop = verdict != knee::Verdict::Held;
        steps.push((s, verdict));
        if stop {
            break;
        }
    }
    Ok(Staircase { number, steps })
}

/// One step: `level` calls held in conversation at once.
async fn step(rig: &mut Rig, args: &KneeArgs, level: u32) -> anyhow::Result<Step> {
    let cfg = LoadConfig {
        url: rig.media_url(),
        calls: (level * args.calls_per_slot) as usize,
        concurrency: level as usize,
        arrival: Arrival::Rate {
            per_second: args.dial_rate,
        },
        utterances: args.utterances as usize,
        progress: false,
        ..LoadConfig::default()
    };
    let before = rig.metrics_text().await?;
    let (report, res, _) = rig.offer(cfg, SETTLE).await?;
    let after = rig.metrics_text().await?;
    let delta = |name: &str, label: &str| {
        (metric(&after, name, label) - metric(&before, name, label)).max(0.0) as u64
    };
    let silence = stall_ms(rig) + 500;
    let mut s = Step {
        level,
        offered: report.calls.len() as u32,
        admitted: 0,
        refused: BTreeMap::new(),
        silent: 0,
        replies: report.summary.reply_latency_ms.count as u32,
        reply_p95_ms: report.summary.reply_latency_ms.p95,
        peak_lag_p99_ms: res.peaks.lag_p99_us as f64 / 1e3,
        peak_active: res.peaks.active,
        ceiling_at_trip: res.peaks.ceiling_at_trip,
        stalls: ["instance", "dialog", "tts", "stt", "tool", "carrier_media"]
            .iter()
            .map(|c| {
                let n = delta("callgate_call_stalls_total", &format!("culprit=\"{c}\""));
                ((*c).to_string(), n)
            })
            .filter(|(_, n)| *n > 0)
            .collect(),
        heartbeat_failures: delta("callgate_owner_heartbeats_total", "result=\"timeout\"")
            + delta("callgate_owner_heartbeats_total", "result=\"error\""),
        server_cores: res.server_cpu_s / res.wall_s.max(1e-9),
        rig_behind: rig::generator_lag(
            &report.summary,
            callgate_load::MAX_FRAME_LAG.as_millis() as u64,
        ),
        duration_s: res.wall_s,
    };
    for c in &report.calls {
        match &c.outcome {
            Outcome::Rejected { reason, .. } => *s.refused.entry(reason.clone()).or_default() += 1,
            Outcome::Unauthorized { .. } => {
                bail!("the rig's own server refused its credentials")
            }
            _ => {
                s.admitted += 1;
                s.silent += u32::from(c.max_owed_silence_ms > silence);
            }
        }
    }
    Ok(s)
}

fn squeeze_note(how: How) -> String {
    let what = match how {
        How::Quota(q) => format!(
            "under a CFS quota of {q:.2} of a core (what a Kubernetes CPU limit of {}m sets)",
            (q * 1000.0).round()
        ),
        How::Burners(n) => format!("sharing its core with {n} CPU burners (a noisy neighbour)"),
        How::Pinned => "alone on its core".into(),
    };
    format!(
        "The server ran pinned to CPU 0 {what}; Postgres, the simulators and this client ran on CPU 1. \
         This machine's rig cannot offer enough calls to saturate a whole core, so the instance was \
         squeezed until its knee fell within what the rig can offer. The knee is this squeezed \
         instance's: an instance with more CPU has a higher one, and not in proportion to the CPU \
         (the per-call cost grows at the knee). Run the drill at your instance's real CPU limit."
    )
}

fn not_tested() -> Vec<String> {
    vec![
        "SIP, partner and WebRTC legs: every caller is a Twilio media stream".into(),
        "barge-in, tools, reconnects and drains: the session-capacity drill (callgate drill) covers them".into(),
        "a fleet: one instance, no balancer".into(),
        "provider latency under load: the simulators answered from the other core".into(),
    ]
}
