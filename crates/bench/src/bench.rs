//! `callgate-bench incident`: the 200-call lunch spike at full size, measured;
//! `callgate-bench interaction` (see [`interaction`]): barge-in and turn
//! latency at 1, 100 and 1,000 concurrent calls, on the same rig.
//!
//! What it is: a benchmark that starts a throwaway Postgres (or uses
//! `CALLGATE_DATABASE_URL`), the provider simulators and the server — the
//! simulators and the server as **child processes**, so the server's CPU
//! seconds and peak RSS are its own — with ceilings that give the server an
//! admission capacity of 220, then offers runs of calls one after another
//! (default 200 = no overload, then 300, then 2,200 = 10×) with the
//! in-process load generator. Per run it prints one table row: served,
//! transferred by the bot, transferred by the watchdog, cut short at a
//! limit, rejected (by reason, cross-checked with the server's rows),
//! overflow prompt heard, failed, silent, apologies heard, server-side
//! admission waits, admitted calls' reply latency against the baseline,
//! time to rejection, server CPU and peak RSS, and the generator's own lag
//! (a run whose generator lagged is flagged as not a valid measurement).
//!
//! The callers tell a reply from the server's bundled prompts by their
//! sound (`callgate_load::prompts`), so an apology is never counted as a
//! reply and reply latency runs to the real reply; a call the watchdog or a
//! provider failure transferred, or a limit cut short, is never "served".
//!
//! What it never does: change the server's behaviour (it writes an ordinary
//! configuration file), leave a child running (every child is stopped on
//! every exit path, Ctrl-C included), or trust one side alone (callers'
//! outcomes are checked against the server's Postgres rows).
//!
//! How to drive it (release build; the machine should be otherwise idle):
//!
//! ```text
//! ./target/release/callgate-bench incident
//! ./target/release/callgate-bench incident --runs 200,300,2200 --arrival-s 20 --json bench.json
//! ```
//!
//! Reading a row: `load×` is the offered concurrency over capacity (arrival
//! rate × served call length, at most every call at once); `xfer` are the
//! bot's own hand-overs, `wdog` the watchdog's (a stalled provider), `cut`
//! calls ended by the maximum duration or a drain deadline, `heard` the
//! refused callers who heard the overflow prompt to its end, `apol` the
//! apologies heard; waits and latencies are `p50/p99` ms; `adm wait`/`rej
//! wait` come from the server's Postgres rows, `reply`/`rej p99` from the
//! callers; `srv cpu` and `srv MiB` are the server process alone; `lag ms`
//! is the generator's worst media-clock lag. The line under each row
//! cross-checks refusals by reason, counts provider failovers (if any) and
//! shows the CPU other processes took (a shared machine is noisy).
//!
//! Under the table, one verdict per run, `PASS` or `FAIL`. A run FAILs when
//! a call failed or went silent, when any refused caller did not hear the
//! overflow prompt, when watchdog and failover transfers exceed
//! `row::MAX_FAULT_TRANSFER_SHARE` (1 %) of the calls the bot answered, or
//! when the run is not a valid measurement (the generator lagged). Latency
//! against the baseline, cuts, apologies and a shared machine are reported,
//! not judged. The exit code is non-zero if any run FAILs.

mod churn;
mod committed;
pub mod interaction;
mod ledger;
mod overload;
mod row;
mod sip;

use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use callgate_load::{Arrival, LoadConfig, LoadReport};
use serde::Serialize;

pub use callgate_rig::measured::db::ServerCall;
use callgate_rig::measured::priority;
pub use callgate_rig::measured::{self as rig, Caps, Rig};
pub use row::{RunRow, RunSetup};

/// `callgate-bench <scenario>`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub scenario: Scenario,
}

/// The benchmarks.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Scenario {
    /// The 200-call lunch-hour incident at full size: capacity 220 by the
    /// provider ceilings; 200 (baseline), 300 and 2,200 calls offered.
    Incident(IncidentArgs),
    /// Barge-in and turn latency: 1, 100 and 1,000 concurrent callers each
    /// speak into the greeting, then do normal turns; onset → clear, bot
    /// audio after onset, callgate's own share of turn latency.
    Interaction(interaction::InteractionArgs),
    /// Per-call server CPU and RSS on the SIP path (sipp) beside the
    /// Twilio path (the load tool), N calls at once.
    Sip(sip::SipArgs),
    /// The session ledger's own cost at N concurrent sessions: counter
    /// reads under contention, the reconciler, the agent-check responder,
    /// a receipt's writes.
    Ledger(ledger::LedgerArgs),
    /// N committed calls held at once, quiet after one turn each, per
    /// ingress: the server's CPU, RSS and descriptors per call.
    Committed(committed::CommittedArgs),
    /// WebRTC sessions opened and hung up N times: the server's RSS and
    /// descriptors after them against its baseline (leaks).
    WebrtcChurn(churn::ChurnArgs),
    /// The instance itself short: the server pinned to one core under a
    /// CPU quota (or beside a burner), the rig on the other; admitted
    /// callers in dead air, refusals by reason, heartbeats, culprits, with
    /// the instance ceiling on and off.
    Overload(overload::OverloadArgs),
}

/// How the calls of a run arrive within `--arrival-s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// A steady rate: offered / arrival seconds.
    Flat,
    /// A spike: the rate rises linearly from 0, all calls in by the end.
    Ramp,
}

/// Knobs of `callgate-bench incident`.
#[derive(Debug, Clone, clap::Args)]
pub struct IncidentArgs {
    /// Calls offered per run, in order. The first run is the no-overload
    /// baseline the others' reply latency is compared with.
    #[arg(long, value_delimiter = ',', default_value = "200,300,2200")]
    pub runs: Vec<usize>,
    /// Seconds over which each run's calls arrive: one value for every run,
    /// or one per run (`20,20,40`). 20 s is about one call length, so 2,200
    /// calls are 10× the capacity at once; on an otherwise idle 2-core
    /// machine one generator keeps its media clock (no frame skipped). On a
    /// busy machine it may not, and the row says so (`valid NO`).
    #[arg(long, value_delimiter = ',', default_value = "20")]
    pub arrival_s: Vec<f64>,
    /// Arrival shape within the window.
    #[arg(long, value_enum, default_value_t = Shape::Flat)]
    pub shape: Shape,
    /// Caller utterances per call, `MIN-MAX` (drawn per call) or a count.
    #[arg(long, default_value = "2-4", value_parser = callgate_load::cli::parse_count_range)]
    pub utterances: (usize, usize),
    /// Seed of the call mix (the same for every run, so runs are comparable).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Dead air that makes a call silent.
    #[arg(long, default_value = "3s", value_parser = callgate_load::cli::parse_duration)]
    pub silence_threshold: Duration,
    /// Worst lag of the generator's 20 ms media clock for a valid run.
    /// The default is the point where the generator starts skipping frames
    /// (`callgate_load::MAX_FRAME_LAG`): below it every frame is offered,
    /// and lag can only *add* to the measured reply latency (it is measured
    /// from when the caller's last frame was due), never flatter the server.
    #[arg(long, default_value_t = callgate_load::MAX_FRAME_LAG.as_millis() as u64)]
    pub max_lag_ms: u64,
    #[command(flatten)]
    pub caps: Caps,
    /// Longest wait for the server to be idle between runs.
    #[arg(long, default_value = "120s", value_parser = callgate_load::cli::parse_duration)]
    pub settle_timeout: Duration,
    /// Nice value added to the load generator (this process) once the rig
    /// is up; the server, the simulators and Postgres keep theirs. The
    /// generator stands in for the callers' phones and the carrier, which
    /// run elsewhere in production; on a shared small box it would otherwise
    /// take the CPU of the system under test. 0 = equal footing.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u8).range(0..=19))]
    pub generator_nice: u8,
    /// Where to write every row and every call's record.
    #[arg(long, default_value = "callgate-bench.json")]
    pub json: PathBuf,
}

impl IncidentArgs {
    /// The arrival window of run `i`.
    pub fn arrival_of(&self, i: usize) -> f64 {
        match self.arrival_s.as_slice() {
            [one] => *one,
            many => many.get(i).copied().unwrap_or(0.0),
        }
    }

    /// Checks the knobs before anything is started.
    ///
    /// # Errors
    /// A description of the first bad knob.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.runs.is_empty() || self.runs.contains(&0) {
            bail!("--runs needs at least one run, each offering at least one call");
        }
        let n = self.arrival_s.len();
        if n != 1 && n != self.runs.len() {
            bail!(
                "--arrival-s needs one value or one per run ({} runs, {n} values)",
                self.runs.len()
            );
        }
        if self.arrival_s.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            bail!("--arrival-s values must be positive seconds");
        }
        self.load_config("ws://127.0.0.1:1/v1/media-stream", 0)
            .validate()
            .context("load settings")?;
        self.caps.validate()
    }

    /// The load generator's configuration for run `i` against `url`.
    pub fn load_config(&self, url: &str, i: usize) -> LoadConfig {
        let offered = self.runs.get(i).copied().unwrap_or(1);
        let secs = self.arrival_of(i);
        let arrival = match self.shape {
            Shape::Flat => Arrival::Rate {
                per_second: offered as f64 / secs,
            },
            Shape::Ramp => Arrival::Ramp {
                from_per_s: 0.0,
                to_per_s: 2.0 * offered as f64 / secs,
                over: Duration::from_secs_f64(secs),
            },
        };
        let (lo, hi) = self.utterances;
        LoadConfig {
            url: url.to_string(),
            calls: offered,
            concurrency: 0,
            arrival,
            utterances: lo,
            utterances_max: (hi > lo).then_some(hi),
            silence_threshold: self.silence_threshold,
            seed: self.seed,
            progress: std::io::stderr().is_terminal(),
            ..LoadConfig::default()
        }
    }
}

/// One run in the JSON report: its row, every call's record, the server's rows.
#[derive(Debug, Serialize)]
pub struct RunResult {
    pub row: RunRow,
    pub load: LoadReport,
    pub server_calls: Vec<ServerCall>,
}

/// The JSON report.
#[derive(Debug, Serialize)]
struct Report<'a> {
    command: String,
    capacity: u64,
    decided_by: &'a str,
    arrival_shape: Shape,
    utterances: (usize, usize),
    generator_nice: i64,
    runs: &'a [RunResult],
}

/// `callgate-bench …`.
///
/// # Errors
/// Something could not be started, measured or written; a bad server is not
/// an error but the exit code.
pub async fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    crate::logging_init("warn");
    match args.scenario {
        Scenario::Incident(a) => incident(a).await,
        Scenario::Interaction(a) => interaction::run(a).await,
        Scenario::Sip(a) => sip::run(a).await,
        Scenario::Ledger(a) => ledger::run(a).await,
        Scenario::WebrtcChurn(a) => churn::run(a).await,
        Scenario::Committed(a) => committed::run(a).await,
        Scenario::Overload(a) => overload::run(a).await,
    }
}

async fn incident(args: IncidentArgs) -> anyhow::Result<ExitCode> {
    args.validate()?;
    let mut results = Vec::new();
    rig::with_rig(
        Rig::start(&args.caps),
        "child logs",
        async |rig: &mut Rig| {
            rig.generator_nice = priority::lower_own(args.generator_nice)
                .context("lowering the generator's priority (--generator-nice 0 skips it)")?;
            run_all(rig, &args, &mut results).await
        },
    )
    .await?;
    let rows: Vec<RunRow> = results.iter().map(|r| r.row.clone()).collect();
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n{}", row::table_header())?;
    for r in &rows {
        writeln!(out, "{}", row::format_row(r))?;
    }
    writeln!(out)?;
    for v in row::verdicts(&rows) {
        writeln!(out, "{v}")?;
    }
    writeln!(out, "per-call records: {}", args.json.display())?;
    Ok(if rows.iter().any(RunRow::has_failures) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Runs every scenario in order, printing each row as it completes and
/// rewriting the JSON report after each (so an interrupted bench keeps what
/// it measured).
async fn run_all(
    rig: &mut Rig,
    args: &IncidentArgs,
    results: &mut Vec<RunResult>,
) -> anyhow::Result<()> {
    println!(
        "callgate-bench incident: capacity {} decided by {}; runs {:?}; generator nice {:+} \
         (server, simulators, Postgres unchanged); waits and latencies are p50/p99 ms",
        rig.capacity, rig.decided_by, args.runs, rig.generator_nice
    );
    println!("{}", row::table_header());
    for i in 0..args.runs.len() {
        let mut result = measure(rig, args, i).await?;
        if let Some(base) = results.first() {
            result.row.compare_with(&base.row.reply_latency_ms);
        }
        println!("{}", row::format_row(&result.row));
        println!("{}", row::format_reasons(&result.row));
        results.push(result);
        write_report(rig, args, results)?;
    }
    Ok(())
}

/// One run: wait for an idle server, offer the calls, wait for the server
/// to finish them, then read its CPU, memory and Postgres rows.
async fn measure(rig: &mut Rig, args: &IncidentArgs, i: usize) -> anyhow::Result<RunResult> {
    let cfg = args.load_config(&rig.media_url(), i);
    let (load, resources, (from, to)) = rig.offer(cfg, args.settle_timeout).await?;
    let server_calls = rig.server_rows(from, to).await?;
    let setup = RunSetup {
        offered: args.runs[i],
        arrival_s: args.arrival_of(i),
        max_lag_ms: args.max_lag_ms,
        capacity: rig.capacity,
    };
    let row = RunRow::new(setup, &load, &server_calls, resources);
    Ok(RunResult {
        row,
        load,
        server_calls,
    })
}

fn write_report(rig: &Rig, args: &IncidentArgs, runs: &[RunResult]) -> anyhow::Result<()> {
    let report = Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        capacity: rig.capacity,
        decided_by: &rig.decided_by,
        arrival_shape: args.shape,
        utterances: args.utterances,
        generator_nice: rig.generator_nice,
        runs,
    };
    write_json(&args.json, &report)
}

/// Writes `value` as JSON to `path` (a bench's per-call records).
/// The closing table of a bench with repeated runs: the header and every
/// row again, `note`, the summary lines, and where the records are; the
/// exit code says whether every run was a valid measurement.
pub(crate) fn print_closing(
    table: (String, Vec<String>),
    note: &str,
    summary: Vec<String>,
    (json, all_valid): (&std::path::Path, bool),
) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n{}", table.0)?;
    for r in &table.1 {
        writeln!(out, "{r}")?;
    }
    writeln!(out, "\n{note}")?;
    for line in summary {
        writeln!(out, "{line}")?;
    }
    writeln!(out, "per-run records: {}", json.display())?;
    Ok(if all_valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub(crate) fn write_json(
    path: &std::path::Path,
    value: &impl serde::Serialize,
) -> anyhow::Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = std::io::BufWriter::new(file);
    serde_json::to_writer(&mut w, value)?;
    w.flush()
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(subcommand)]
        scenario: Scenario,
    }

    fn incident(argv: &[&str]) -> IncidentArgs {
        let mut full = vec!["bench", "incident"];
        full.extend_from_slice(argv);
        match Cmd::try_parse_from(full).unwrap().scenario {
            Scenario::Incident(a) => a,
            Scenario::Interaction(_)
            | Scenario::Sip(_)
            | Scenario::Ledger(_)
            | Scenario::WebrtcChurn(_)
            | Scenario::Committed(_)
            | Scenario::Overload(_) => {
                unreachable!("parsed `incident`")
            }
        }
    }

    #[test]
    fn overload_parses_its_variants_and_refuses_unknown_ones() {
        let parse = |argv: &[&str]| {
            let mut full = vec!["bench", "overload"];
            full.extend_from_slice(argv);
            match Cmd::try_parse_from(full).unwrap().scenario {
                Scenario::Overload(a) => a,
                _ => unreachable!("parsed `overload`"),
            }
        };
        let a = parse(&[]);
        assert_eq!(a.variants, ["quota-on", "quota-off", "pinned-on"]);
        assert!(a.validate().is_ok());
        assert!(parse(&["--variants", "quota-maybe"]).validate().is_err());
        assert!(parse(&["--variants", "warp-on"]).validate().is_err());
        assert!(parse(&["--cpu-quota", "1.5"]).validate().is_err());
    }

    #[test]
    fn defaults_are_the_full_size_incident() {
        let a = incident(&[]);
        assert_eq!(a.runs, vec![200, 300, 2_200]);
        assert_eq!(a.utterances, (2, 4));
        assert_eq!(a.caps.expected_capacity(), 220);
        assert!(a.validate().is_ok());
        let cfg = a.load_config("ws://127.0.0.1:9/v1/media-stream", 2);
        assert_eq!(cfg.calls, 2_200);
        assert_eq!((cfg.utterances, cfg.utterances_max), (2, Some(4)));
        assert_eq!(cfg.arrival, Arrival::Rate { per_second: 110.0 });
    }

    #[test]
    fn arrival_windows_are_one_for_all_or_one_per_run() {
        let a = incident(&["--runs", "10,20", "--arrival-s", "5,8", "--shape", "ramp"]);
        assert!(a.validate().is_ok());
        assert_eq!((a.arrival_of(0), a.arrival_of(1)), (5.0, 8.0));
        // A ramp from 0 that places every call by the end of the window.
        let cfg = a.load_config("ws://127.0.0.1:9/v1/media-stream", 1);
        assert_eq!(
            cfg.arrival,
            Arrival::Ramp {
                from_per_s: 0.0,
                to_per_s: 5.0,
                over: Duration::from_secs(8)
            }
        );
        assert!(cfg.arrival.offset(19) <= Duration::from_secs(8));
        assert!(
            incident(&["--runs", "10,20,30", "--arrival-s", "5,8"])
                .validate()
                .is_err()
        );
        assert!(incident(&["--arrival-s", "0"]).validate().is_err());
        assert!(incident(&["--runs", "10,0"]).validate().is_err());
        assert!(
            incident(&["--utterances", "3"])
                .load_config("ws://x:1/", 0)
                .utterances_max
                .is_none()
        );
        assert!(Cmd::try_parse_from(["bench", "incident", "--utterances", "4-2"]).is_err());
    }
}
