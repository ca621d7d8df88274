//! `callgate-bench sip`: per-call server CPU and RSS on the SIP/RTP path
//! (or, with `--compare webrtc`, the WebRTC path) beside the Twilio
//! media-stream path, N calls at once.
//!
//! What it is: the incident bench's rig (a throwaway Postgres or
//! `CALLGATE_DATABASE_URL`; the simulators and the server as child
//! processes, so the server's CPU and RSS are its own) with the server's
//! SIP ingress on as well (a loopback port, an RTP range of its own). For
//! each N of `--calls`, for each path — Twilio, then SIP — `--repeat`
//! times: restart the server (a fresh process: the allocator keeps what a
//! run freed, so a second run's RSS would mostly reuse the first's), wait
//! for it to be idle, read its RSS (the baseline) and CPU ticks, offer N
//! calls at once, wait for the server to finish them, read CPU again (RSS
//! is sampled every 100 ms for the peak), then check the server's rows:
//! exactly N ledger rows of the run's ingress, closed with
//! `cleanup_status = 'completed'`, and no refusal.
//!
//! - Twilio: the in-process load tool exactly as `bench incident` places
//!   its calls (utterances `2-4` per call drawn with seed 1, the load
//!   tool's utterance lengths and pauses), N calls dialled within one
//!   second.
//! - SIP: `sipp` on `tests/sip/load_uac.xml` with `-m N -l N -r N` (N
//!   INVITEs within one second), each call speaking 6 s of
//!   `book_table.ulaw` over RTP, then `hold_ms` of silence, then BYE.
//! - WebRTC (`--compare webrtc`, the server's WebRTC ingress on instead of
//!   SIP): the load tool's str0m caller with the Twilio runs' call mix and
//!   seed — the same utterances, encoded to Opus, over ICE-lite and
//!   DTLS-SRTP on the server's one UDP socket, signalled by `POST
//!   /v1/webrtc` and hung up by `DELETE`. The conversations are the same
//!   as the Twilio runs' (the load tool marks an end of turn with silence
//!   rather than a mark, so its calls run a little longer: the `call s`
//!   column). A run the server had to conceal frames in (a packet that
//!   never reached it) is not valid, as a SIP run with late or lost RTP.
//!
//! How call lengths are matched: both are measured the same way, by the
//! server's ledger (admission → cleanup completed, the `call s` column).
//! With `--hold-ms auto` (the default) the Twilio runs of a size go first,
//! and the SIP runs of that size hold for the median of their mean call
//! length minus the 6 s sipp speaks ([`matched_hold_ms`]), so a SIP call
//! lasts about as long as a Twilio call — what the RSS per call depends on
//! (every call of a run is up at once) and what the CPU per call is spent
//! over. The conversations still differ: a Twilio caller takes 2–4 turns,
//! a sipp caller one utterance (started at the answer, so over the
//! greeting) and then silence; the `turns` column shows the bot turns the
//! server timed per call, so a difference in CPU can be told apart from a
//! difference in work.
//!
//! Per run it prints: path, N, served (ledger), mean call length, bot
//! turns per call, server CPU s, CPU ms per call, peak RSS MiB, RSS KiB per
//! call above the idle baseline, idle RSS, wall time, the generator's and
//! other processes' CPU, valid; then per size the median and spread (min–max)
//! of the per-call figures of each path, side by side, over the valid runs,
//! and between consecutive sizes the marginal cost of a call (difference
//! of the median totals over ΔN), in which what a fresh server spends once
//! cancels out.
//!
//! A run is not a valid measurement (and is left out of the medians) when
//! any call was refused (capacity must be above N: the rig's caps give
//! 220), when not exactly N calls were served and closed by both the
//! server's rows and the generator's view, or when the generator lagged:
//! the Twilio load tool's media clock lagged past `--max-lag-ms` or skipped
//! frames (the incident bench's rule), or sipp failed a call or timed out,
//! or the server received sipp's RTP late or lost (its receipts'
//! `media.transport.late` / `lost`: the server cannot tell whose lag that was,
//! so it voids the run either way).
//!
//! What it never does: change the server's behaviour beyond the ceilings
//! and the SIP listener, leave a child running (sipp included: it is killed
//! when its run is dropped, Ctrl-C too), or trust one side alone.
//!
//! How to drive it (release build; the machine should be otherwise idle):
//!
//! ```text
//! cargo build --release -p callgate-cli -p callgate-bench
//! ./target/release/callgate-bench sip --calls 50,100 --repeat 3
//! ./target/release/callgate-bench sip --compare webrtc --calls 500 --repeat 3 \
//!     --stt-cap 600 --tts-cap 600 --dialog-cap 600 --db-max-calls 600
//! ```

pub(super) mod ledger;
pub(super) mod row;
mod sipp;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use callgate_load::{Arrival, LoadConfig, LoadReport, Protocol};
use serde::Serialize;

use crate::bench::{Caps, Rig};
use callgate_rig::measured::{generator_lag, with_rig};
use row::{GeneratorView, Ingress, SipRow, Usage};
use sipp::{SippOutcome, SippPlan};

/// Room in the RTP range beyond the capacity (ports another process holds
/// are skipped by the server's pool).
const RTP_SPARE_PAIRS: u16 = 20;
/// `hold_ms` when no Twilio call of the size was measured to match.
const FALLBACK_HOLD_MS: u32 = 12_000;

/// How long sipp's callers stay silent after speaking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Matched to the Twilio calls of the same size ([`matched_hold_ms`]).
    Auto,
    Fixed(u32),
}

fn parse_hold(s: &str) -> Result<Hold, String> {
    match s.trim() {
        "auto" => Ok(Hold::Auto),
        ms => ms
            .parse()
            .map(Hold::Fixed)
            .map_err(|_| format!("{s:?} is neither `auto` nor milliseconds")),
    }
}

/// The path measured beside Twilio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Compare {
    /// SIP/RTP placed by sipp.
    Sip,
    /// WebRTC placed by the load tool's str0m peer.
    Webrtc,
}

impl Compare {
    fn ingress(self) -> Ingress {
        match self {
            Compare::Sip => Ingress::Sip,
            Compare::Webrtc => Ingress::Webrtc,
        }
    }
}

/// Knobs of `callgate-bench sip`.
#[derive(Debug, Clone, clap::Args)]
pub struct SipArgs {
    /// Calls per run, all offered at once (within one second), in order.
    #[arg(long, value_delimiter = ',', default_value = "50,100")]
    pub calls: Vec<usize>,
    /// The path measured beside Twilio: `sip` (sipp) or `webrtc` (the load
    /// tool's WebRTC caller, the Twilio callers' call mix over Opus).
    #[arg(long, value_enum, default_value_t = Compare::Sip)]
    pub compare: Compare,
    /// Times each path is measured at each size.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// sipp's silence after its 6 s utterance, ms; `auto` matches the SIP
    /// call length to the Twilio calls of the same size (measured first).
    #[arg(long, default_value = "auto", value_parser = parse_hold)]
    pub hold_ms: Hold,
    /// Twilio caller utterances per call, `MIN-MAX` or a count (the
    /// incident bench's default).
    #[arg(long, default_value = "2-4", value_parser = callgate_load::cli::parse_count_range)]
    pub utterances: (usize, usize),
    /// Seed of the Twilio call mix (the same for every run).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Dead air that makes a Twilio call silent.
    #[arg(long, default_value = "3s", value_parser = callgate_load::cli::parse_duration)]
    pub silence_threshold: Duration,
    /// Worst lag of the Twilio generator's media clock for a valid run
    /// (as `bench incident`).
    #[arg(long, default_value_t = callgate_load::MAX_FRAME_LAG.as_millis() as u64)]
    pub max_lag_ms: u64,
    #[command(flatten)]
    pub caps: Caps,
    /// First port of the server's RTP range (capacity + 20 pairs).
    #[arg(long, default_value_t = 20_000)]
    pub rtp_port_min: u16,
    /// Longest wait for the server to be idle between runs.
    #[arg(long, default_value = "120s", value_parser = callgate_load::cli::parse_duration)]
    pub settle_timeout: Duration,
    /// Nice value added to the load generators once the rig is up: this
    /// process (the Twilio callers) and so sipp, started from it. 0 =
    /// equal footing with the server.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u8).range(0..=19))]
    pub generator_nice: u8,
    /// Where to write every row and every sipp outcome.
    #[arg(long, default_value = "callgate-bench-sip.json")]
    pub json: PathBuf,
}

impl SipArgs {
    /// Checks the knobs before anything is started.
    ///
    /// # Errors
    /// A description of the first bad knob.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.calls.is_empty() || self.calls.contains(&0) {
            bail!("--calls needs at least one size, each of at least one call");
        }
        if self.repeat == 0 {
            bail!("--repeat must be at least 1");
        }
        self.caps.validate()?;
        let largest = self.calls.iter().copied().max().unwrap_or(0);
        if u64::from(self.caps.expected_capacity()) <= largest as u64 {
            bail!(
                "capacity {} (the ceilings minus headroom) must be above the largest run \
                 ({largest} calls), or calls would queue or be refused",
                self.caps.expected_capacity()
            );
        }
        if !self.rtp_port_min.is_multiple_of(2) || self.rtp_port_min < 1_024 {
            bail!("--rtp-port-min must be an even port above 1023");
        }
        if u32::from(self.rtp_port_min) + 2 * u32::from(self.rtp_pairs()) > 65_536 {
            bail!("--rtp-port-min leaves no room for capacity + {RTP_SPARE_PAIRS} RTP port pairs");
        }
        self.load_config("ws://127.0.0.1:1/v1/media-stream", largest)
            .validate()
            .context("load settings")?;
        Ok(())
    }

    /// RTP port pairs for the server: one per call it can admit, and spare.
    fn rtp_pairs(&self) -> u16 {
        let capacity = u16::try_from(self.caps.expected_capacity()).unwrap_or(u16::MAX);
        capacity.saturating_add(RTP_SPARE_PAIRS)
    }

    /// The load tool's configuration for `calls` Twilio calls: the
    /// incident bench's callers, dialled within one second as sipp's are.
    pub fn load_config(&self, url: &str, calls: usize) -> LoadConfig {
        let (lo, hi) = self.utterances;
        LoadConfig {
            url: url.to_string(),
            calls,
            concurrency: 0,
            arrival: Arrival::Rate {
                per_second: calls as f64,
            },
            utterances: lo,
            utterances_max: (hi > lo).then_some(hi),
            silence_threshold: self.silence_threshold,
            seed: self.seed,
            progress: std::io::stderr().is_terminal(),
            ..LoadConfig::default()
        }
    }

    /// Every run in order: `(calls, ingress, repetition)`.
    fn plan(&self) -> Vec<(usize, Ingress, usize)> {
        let mut plan = Vec::new();
        for &n in &self.calls {
            for ingress in [Ingress::Twilio, self.compare.ingress()] {
                plan.extend((1..=self.repeat).map(|rep| (n, ingress, rep)));
            }
        }
        plan
    }
}

/// sipp's `hold_ms` for a SIP call as long as the Twilio calls of the same
/// size: the median of their runs' mean call length (server's ledger,
/// admission → close) minus the 6 s sipp speaks first; `None` when no
/// Twilio call was measured.
pub fn matched_hold_ms(twilio_call_s: &[f64]) -> Option<u32> {
    let median = row::Spread::of(twilio_call_s.iter().copied().filter(|s| *s > 0.0))?.median;
    let hold = (median * 1_000.0).round() - f64::from(sipp::SPEECH_MS);
    Some(hold.max(0.0) as u32)
}

/// One run in the JSON report.
#[derive(Debug, Serialize)]
pub struct RunResult {
    pub row: SipRow,
    /// The Twilio run's load report summary.
    pub load: Option<callgate_load::Summary>,
    pub sipp: Option<SippOutcome>,
}

/// The JSON report.
#[derive(Debug, Serialize)]
struct Report<'a> {
    command: String,
    capacity: u64,
    generator_nice: i64,
    utterances: (usize, usize),
    runs: &'a [RunResult],
    summary: Vec<(row::PathSummary, row::PathSummary)>,
}

/// `callgate-bench sip`.
///
/// # Errors
/// Something could not be started, measured or written; an invalid run is
/// not an error but the exit code.
pub async fn run(args: SipArgs) -> anyhow::Result<ExitCode> {
    args.validate()?;
    let start = async {
        match args.compare {
            Compare::Sip => {
                sipp::SippPlan::check_files()?;
                Rig::start_with_sip(&args.caps, args.rtp_port_min, args.rtp_pairs()).await
            }
            Compare::Webrtc => Rig::start_with_webrtc(&args.caps).await,
        }
    };
    let mut results = Vec::new();
    with_rig(
        start,
        "child logs and sipp's files",
        async |rig: &mut Rig| run_all(rig, &args, &mut results).await,
    )
    .await?;
    let rows: Vec<SipRow> = results.iter().map(|r| r.row.clone()).collect();
    crate::bench::print_closing(
        (
            row::table_header(),
            rows.iter().map(row::format_row).collect(),
        ),
        "median (min–max) over the valid runs; per-call figures are over N offered calls",
        row::format_summary(&rows),
        (&args.json, rows.iter().all(SipRow::is_valid)),
    )
}

/// Runs every run in order, printing each row as it completes and
/// rewriting the JSON report after each (an interrupted bench keeps what it
/// measured).
async fn run_all(
    rig: &mut Rig,
    args: &SipArgs,
    results: &mut Vec<RunResult>,
) -> anyhow::Result<()> {
    rig.ensure_capacity_above(args.calls.iter().copied().max().unwrap_or(0))?;
    rig.lower_generator_priority(args.generator_nice)
        .context("lowering the generators' priority (--generator-nice 0 skips it)")?;
    println!("{}", std::env::args().collect::<Vec<_>>().join(" "));
    println!(
        "callgate-bench sip: capacity {} decided by {}; calls {:?} × {} per path; Twilio \
         utterances {:?}; sipp {}; generators' nice {:+}",
        rig.capacity,
        rig.decided_by,
        args.calls,
        args.repeat,
        args.utterances,
        sipp::SCENARIO,
        rig.generator_nice
    );
    println!("{}", row::table_header());
    for (i, (calls, ingress, repeat)) in args.plan().into_iter().enumerate() {
        rig.restart_server(i + 1)
            .await
            .context("restarting the server for a fresh process")?;
        let result = match ingress {
            Ingress::Twilio | Ingress::Webrtc => {
                measure_load(rig, args, ingress, calls, repeat).await?
            }
            Ingress::Sip => {
                let hold_ms = hold_for(args, results, calls);
                measure_sip(rig, args, calls, repeat, hold_ms).await?
            }
        };
        println!("{}", row::format_row(&result.row));
        println!("{}", row::format_detail(&result.row));
        results.push(result);
        write_report(rig, args, results)?;
    }
    Ok(())
}

/// `--hold-ms`, or the hold matched to this size's Twilio runs so far.
fn hold_for(args: &SipArgs, results: &[RunResult], calls: usize) -> u32 {
    match args.hold_ms {
        Hold::Fixed(ms) => ms,
        Hold::Auto => {
            let twilio: Vec<f64> = results
                .iter()
                .map(|r| &r.row)
                .filter(|r| r.ingress == Ingress::Twilio && r.calls == calls)
                .map(|r| r.server.mean_call_s)
                .collect();
            matched_hold_ms(&twilio).unwrap_or(FALLBACK_HOLD_MS)
        }
    }
}

/// The server's idle RSS, read once it is idle.
async fn idle_rss(rig: &mut Rig, args: &SipArgs) -> anyhow::Result<u64> {
    rig.wait_idle(args.settle_timeout).await?;
    rig.server_rss_kib()
}

/// A run of the in-process load tool: Twilio media streams, or the same
/// callers over WebRTC.
async fn measure_load(
    rig: &mut Rig,
    args: &SipArgs,
    ingress: Ingress,
    calls: usize,
    repeat: usize,
) -> anyhow::Result<RunResult> {
    let idle_rss_kib = idle_rss(rig, args).await?;
    let cfg = match ingress {
        Ingress::Webrtc => {
            let url = rig.webrtc_url().context("the rig has no WebRTC ingress")?;
            LoadConfig {
                protocol: Protocol::Webrtc,
                ..args.load_config(&url, calls)
            }
        }
        _ => args.load_config(&rig.media_url(), calls),
    };
    let (load, res, (from, to)) = rig
        .measure(args.settle_timeout, callgate_load::run(cfg))
        .await?;
    let server = ledger::read(rig.conninfo(), rig.instance(), ingress, from, to).await?;
    let generator = load_view(&load, &server, args.max_lag_ms);
    let usage = Usage {
        wall_s: res.wall_s,
        server_cpu_s: res.server_cpu_s,
        generator_cpu_s: res.load_cpu_s,
        others_cpu_s: res.others_cpu_s(),
        idle_rss_kib,
        peak_rss_kib: res.peaks.rss_kib,
        rss_samples: res.peaks.samples,
    };
    let row = SipRow {
        ingress,
        calls,
        repeat,
        hold_ms: None,
        generator,
        server,
        usage,
    };
    Ok(RunResult {
        row,
        load: Some(load.summary),
        sipp: None,
    })
}

/// The load tool's view of a run, with the incident bench's rule for a
/// generator that kept up; over WebRTC also the server's: a frame it had
/// to conceal is a packet that never reached it (on loopback, a caller
/// that fell behind or a socket buffer that overflowed).
fn load_view(load: &LoadReport, server: &ledger::Tally, max_lag_ms: u64) -> GeneratorView {
    let s = &load.summary;
    let concealed = server.rtp.concealed;
    GeneratorView {
        served: s.completed + s.ended_by_bot,
        refused: s.rejected,
        lagged: generator_lag(s, max_lag_ms).or_else(|| {
            (concealed > 0)
                .then(|| format!("the server concealed {concealed} frames of the callers' Opus"))
        }),
        faults: (s.failed > 0 || s.silent > 0)
            .then(|| format!("{} calls failed, {} silent", s.failed, s.silent)),
    }
}

async fn measure_sip(
    rig: &mut Rig,
    args: &SipArgs,
    calls: usize,
    repeat: usize,
    hold_ms: u32,
) -> anyhow::Result<RunResult> {
    let target = rig.sip_addr().context("the rig has no SIP listener")?;
    let plan = SippPlan {
        target,
        calls,
        hold_ms,
    };
    let clock_ticks = rig.clock_ticks;
    let idle_rss_kib = idle_rss(rig, args).await?;
    let (outcome, res, (from, to)) = rig
        .measure(args.settle_timeout, sipp::run(&plan, clock_ticks))
        .await?;
    let outcome = outcome?;
    let server = ledger::read(rig.conninfo(), rig.instance(), Ingress::Sip, from, to).await?;
    let generator = sip_view(&outcome, &server);
    let usage = Usage {
        wall_s: res.wall_s,
        server_cpu_s: res.server_cpu_s,
        generator_cpu_s: outcome.cpu_s,
        // sipp's time is in no rig process's ticks but the machine's.
        others_cpu_s: (res.others_cpu_s() - outcome.cpu_s).max(0.0),
        idle_rss_kib,
        peak_rss_kib: res.peaks.rss_kib,
        rss_samples: res.peaks.samples,
    };
    let row = SipRow {
        ingress: Ingress::Sip,
        calls,
        repeat,
        hold_ms: Some(hold_ms),
        generator,
        server,
        usage,
    };
    Ok(RunResult {
        row,
        load: None,
        sipp: Some(outcome),
    })
}

/// sipp's view of a SIP run; its lag is what the server saw of its RTP.
fn sip_view(out: &SippOutcome, server: &ledger::Tally) -> GeneratorView {
    let rtp = &server.rtp;
    GeneratorView {
        served: out.served(),
        refused: usize::try_from(out.rejected).unwrap_or(usize::MAX),
        lagged: (rtp.late > 0 || rtp.lost > 0).then(|| {
            format!(
                "the server received {} of its RTP packets late and {} lost",
                rtp.late, rtp.lost
            )
        }),
        faults: out.trouble(),
    }
}

fn write_report(rig: &Rig, args: &SipArgs, runs: &[RunResult]) -> anyhow::Result<()> {
    let rows: Vec<SipRow> = runs.iter().map(|r| r.row.clone()).collect();
    let report = Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        capacity: rig.capacity,
        generator_nice: rig.generator_nice,
        utterances: args.utterances,
        runs,
        summary: row::summaries(&rows),
    };
    crate::bench::write_json(&args.json, &report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: SipArgs,
    }

    fn args(argv: &[&str]) -> SipArgs {
        let mut full = vec!["sip"];
        full.extend_from_slice(argv);
        Cmd::try_parse_from(full).unwrap().args
    }

    #[test]
    fn defaults_are_fifty_and_a_hundred_calls_three_times_per_path() {
        let a = args(&[]);
        assert_eq!(a.calls, vec![50, 100]);
        assert_eq!((a.repeat, a.hold_ms), (3, Hold::Auto));
        assert_eq!(a.utterances, (2, 4));
        assert!(a.validate().is_ok(), "{:?}", a.validate());
        assert_eq!(a.rtp_pairs(), 240, "capacity 220 + 20 spare");
        let plan = a.plan();
        assert_eq!(plan.len(), 12);
        assert_eq!(plan[0], (50, Ingress::Twilio, 1));
        assert_eq!(plan[3], (50, Ingress::Sip, 1));
        assert_eq!(plan[11], (100, Ingress::Sip, 3));
        let cfg = a.load_config("ws://127.0.0.1:9/v1/media-stream", 100);
        assert_eq!(cfg.arrival, Arrival::Rate { per_second: 100.0 });
        assert_eq!((cfg.utterances, cfg.utterances_max), (2, Some(4)));
    }

    #[test]
    fn compare_webrtc_measures_webrtc_beside_twilio_instead_of_sip() {
        let a = args(&["--compare", "webrtc", "--calls", "10", "--repeat", "2"]);
        assert_eq!(a.compare, Compare::Webrtc);
        let ingresses: Vec<Ingress> = a.plan().into_iter().map(|(_, i, _)| i).collect();
        assert_eq!(
            ingresses,
            [
                Ingress::Twilio,
                Ingress::Twilio,
                Ingress::Webrtc,
                Ingress::Webrtc
            ]
        );
        assert!(Cmd::try_parse_from(["sip", "--compare", "partner"]).is_err());
    }

    #[test]
    fn bad_knobs_are_refused_before_anything_starts() {
        assert!(args(&["--calls", "0"]).validate().is_err());
        assert!(args(&["--repeat", "0"]).validate().is_err());
        assert!(
            args(&["--calls", "220"]).validate().is_err(),
            "not above capacity"
        );
        assert!(
            args(&[
                "--calls",
                "300",
                "--stt-cap",
                "400",
                "--tts-cap",
                "400",
                "--dialog-cap",
                "400",
                "--db-max-calls",
                "400"
            ])
            .validate()
            .is_ok()
        );
        assert!(
            args(&["--rtp-port-min", "20001"]).validate().is_err(),
            "odd"
        );
        assert!(
            args(&["--rtp-port-min", "65200"]).validate().is_err(),
            "no room"
        );
        assert_eq!(args(&["--hold-ms", "9000"]).hold_ms, Hold::Fixed(9_000));
        let cmd = Cmd::try_parse_from(["sip", "--hold-ms", "soon"]);
        assert!(cmd.is_err());
    }

    #[test]
    fn the_hold_makes_a_sip_call_as_long_as_the_twilio_calls() {
        // Median of 17.9, 18.4 and 21.0 s, less sipp's 6 s of speech.
        assert_eq!(matched_hold_ms(&[18.4, 21.0, 17.9]), Some(12_400));
        assert_eq!(matched_hold_ms(&[4.0]), Some(0), "never negative");
        assert_eq!(matched_hold_ms(&[]), None);
        assert_eq!(
            matched_hold_ms(&[0.0]),
            None,
            "nothing served, nothing measured"
        );
    }
}
