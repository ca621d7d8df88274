//! `callgate-bench interaction`: barge-in and turn latency at 1, 100 and
//! 1,000 concurrent calls, measured.
//!
//! What it is: the incident bench's rig (a throwaway Postgres or
//! `CALLGATE_DATABASE_URL`; the simulators and the server as child
//! processes; the in-process load generator at a lowered priority; the
//! sampler) with an admission capacity above the largest run
//! (`--capacity`, every ceiling = capacity + headroom), running runs of
//! concurrent calls one after another (`--runs 1,100,1000`, each
//! `--repeat N` times). Every caller speaks its first utterance
//! `--barge-in-at-ms` into the greeting (the load tool's barge-in scenario)
//! and then does normal turns. One row per run:
//!
//! - from the callers' own clocks: onset → `clear` p50/p99, bot audio
//!   received after the onset p50/p99, audio of the stopped greeting after
//!   its clear (max) — definitions on `callgate_load::BargeInRecord`;
//! - from the server's receipts (`call_ledger.stats.turns[]`, read after the
//!   run): callgate's own share of turn latency p50/p99 and the whole turn
//!   (speech end → first frame out) p50/p99, in ms with two decimals;
//! - served/failed/silent, peak active calls, server CPU and RSS, the
//!   generator's worst lag.
//!
//! Under the table: median and range of repeated runs, then one verdict per
//! run. A run FAILs when a call was not served, a barge-in was not answered
//! by a clear, onset → clear p99 exceeds `call.barge_in.min_speech_ms` + 20
//! or bot audio after onset p99 exceeds it + 40 (read from the server's
//! configuration; unknown targets fail), any audio of the greeting came
//! after its clear, or callgate's own share p99 exceeds 2 ms (or was not
//! measured).
//!
//! What it never does: report the callers' figures of a run whose load
//! generator lagged past `--max-lag-ms` or skipped frames (the row says
//! `NOT REPORTED`, shows only what the server's receipts say — its own
//! share, stamped by the server and independent of the generator — and the
//! run is left out of the medians and FAILs as not a valid measurement);
//! change the server's behaviour beyond the ceilings; leave a child running.
//!
//! How to drive it (release build; the machine should be otherwise idle):
//!
//! ```text
//! ./target/release/callgate-bench interaction
//! ./target/release/callgate-bench interaction --runs 1,100,1000 --repeat 3 --json interaction.json
//! ```

mod row;

use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use callgate_load::{Arrival, LoadConfig, LoadReport};
use serde::Serialize;

use callgate_rig::measured::priority;
use callgate_rig::measured::receipts::Receipt;
use callgate_rig::measured::{Caps, Rig};
use row::{InteractionRow, RunSetup, Targets};

/// `admission.headroom` of the generated configuration.
const HEADROOM: u32 = 5;

/// Knobs of `callgate-bench interaction`.
#[derive(Debug, Clone, clap::Args)]
pub struct InteractionArgs {
    /// Concurrent calls per run, in order.
    #[arg(long, value_delimiter = ',', default_value = "1,100,1000")]
    pub runs: Vec<usize>,
    /// Times each run is measured; with more than one, the median and range
    /// of each figure are printed.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Calls dialled per second until all of a run's calls are in: 1,000
    /// calls are in within 10 s, well inside one call (~25 s), so they
    /// overlap.
    #[arg(long, default_value_t = 100.0)]
    pub dial_rate: f64,
    /// How long after the greeting's first audio frame each caller starts
    /// speaking over it.
    #[arg(long, default_value_t = 800)]
    pub barge_in_at_ms: u32,
    /// Utterances per call: the first over the greeting, the rest normal
    /// turns.
    #[arg(long, default_value_t = 4)]
    pub utterances: usize,
    /// Seed of the call mix (the same for every run).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Dead air that makes a call silent.
    #[arg(long, default_value = "3s", value_parser = callgate_load::cli::parse_duration)]
    pub silence_threshold: Duration,
    /// Worst lag of the generator's 20 ms media clock for a run to be
    /// reported. One frame: a caller later than that could move the onset
    /// or the server's VAD decision by a frame, and the barge-in figures
    /// are frame-sized.
    #[arg(long, default_value_t = 20)]
    pub max_lag_ms: u64,
    /// The server's admission capacity: every provider ceiling (and the
    /// simulators' caps) and the database ceiling are this plus the
    /// headroom. Must be at least the largest run.
    #[arg(long, default_value_t = 1_100)]
    pub capacity: u32,
    /// Longest wait for the server to be idle between runs.
    #[arg(long, default_value = "120s", value_parser = callgate_load::cli::parse_duration)]
    pub settle_timeout: Duration,
    /// Nice value added to the load generator once the rig is up (see
    /// `bench incident`). 0 = equal footing.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u8).range(0..=19))]
    pub generator_nice: u8,
    /// Where to write every row, every call's record and the receipts read.
    #[arg(long, default_value = "callgate-bench-interaction.json")]
    pub json: PathBuf,
}

impl InteractionArgs {
    /// Checks the knobs before anything is started.
    ///
    /// # Errors
    /// A description of the first bad knob.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.runs.is_empty() || self.runs.contains(&0) {
            bail!("--runs needs at least one run, each of at least one call");
        }
        if self.repeat == 0 {
            bail!("--repeat must be at least 1");
        }
        if !(self.dial_rate.is_finite() && self.dial_rate > 0.0) {
            bail!("--dial-rate must be a positive number of calls per second");
        }
        let largest = self.runs.iter().copied().max().unwrap_or(0);
        if u64::from(self.capacity) < largest as u64 {
            bail!(
                "--capacity {} is below the largest run ({largest} calls): calls would queue",
                self.capacity
            );
        }
        self.load_config("ws://127.0.0.1:1/v1/media-stream", 1)
            .validate()
            .context("load settings")?;
        self.caps().validate()
    }

    /// Ceilings giving the server an admission capacity of `--capacity`.
    pub fn caps(&self) -> Caps {
        let ceiling = self.capacity.saturating_add(HEADROOM);
        Caps {
            stt_cap: ceiling,
            tts_cap: ceiling,
            dialog_cap: ceiling,
            db_max_calls: ceiling,
            headroom: HEADROOM,
            queue_max: 100,
            queue_timeout_ms: 4_000,
            stt_empty_finals: 0.0,
            instance_max_lag_ms: 60,
        }
    }

    /// The load generator's configuration for a run of `calls` against `url`.
    pub fn load_config(&self, url: &str, calls: usize) -> LoadConfig {
        let arrival = if calls == 1 {
            Arrival::AllAtOnce
        } else {
            Arrival::Rate {
                per_second: self.dial_rate,
            }
        };
        LoadConfig {
            url: url.to_string(),
            calls,
            concurrency: 0,
            arrival,
            utterances: self.utterances,
            barge_in_at_ms: Some(self.barge_in_at_ms),
            silence_threshold: self.silence_threshold,
            seed: self.seed,
            progress: std::io::stderr().is_terminal(),
            ..LoadConfig::default()
        }
    }

    /// Every run in order: `(calls, repetition)`.
    fn plan(&self) -> Vec<(usize, usize)> {
        self.runs
            .iter()
            .flat_map(|&calls| (1..=self.repeat).map(move |rep| (calls, rep)))
            .collect()
    }
}

/// One run in the JSON report: its row, every call's record, the receipts.
#[derive(Debug, Serialize)]
pub struct RunResult {
    pub row: InteractionRow,
    pub load: LoadReport,
    pub receipts: Vec<Receipt>,
}

/// The JSON report.
#[derive(Debug, Serialize)]
struct Report<'a> {
    command: String,
    capacity: u64,
    targets: Targets,
    barge_in_at_ms: u32,
    utterances: usize,
    dial_rate: f64,
    generator_nice: i64,
    runs: &'a [RunResult],
}

/// `callgate-bench interaction`.
///
/// # Errors
/// Something could not be started, measured or written; a bad server is not
/// an error but the exit code.
pub async fn run(args: InteractionArgs) -> anyhow::Result<ExitCode> {
    args.validate()?;
    let stop = callgate_rig::stop_requested();
    tokio::pin!(stop);
    let caps = args.caps();
    let mut rig = tokio::select! {
        rig = Rig::start(&caps) => rig?,
        _ = &mut stop => {
            callgate_rig::force_on_second_signal();
            bail!("interrupted while starting")
        }
    };
    rig.generator_nice = priority::lower_own(args.generator_nice)
        .context("lowering the generator's priority (--generator-nice 0 skips it)")?;
    let targets = Targets::from_config(&rig.server_config);
    let mut results = Vec::new();
    let outcome = tokio::select! {
        r = run_all(&mut rig, &args, targets, &mut results) => r,
        _ = &mut stop => {
            callgate_rig::force_on_second_signal();
            Err(anyhow::anyhow!("interrupted"))
        }
    };
    let logs = rig.log_dir().to_path_buf();
    rig.stop().await;
    eprintln!("child logs: {}", logs.display());
    outcome?;
    let rows: Vec<InteractionRow> = results.iter().map(|r| r.row.clone()).collect();
    print_summary(&rows, targets, &args)?;
    Ok(if rows.iter().any(|r| r.has_failures(targets)) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn print_summary(
    rows: &[InteractionRow],
    targets: Targets,
    args: &InteractionArgs,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n{}", row::table_header())?;
    for r in rows {
        writeln!(out, "{}", row::format_row(r))?;
    }
    writeln!(out)?;
    for line in row::repeat_summaries(rows) {
        writeln!(out, "{line}")?;
    }
    for v in row::verdicts(rows, targets) {
        writeln!(out, "{v}")?;
    }
    writeln!(
        out,
        "per-call records and receipts: {}",
        args.json.display()
    )?;
    Ok(())
}

/// Runs every run in order, printing each row as it completes and
/// rewriting the JSON report after each (an interrupted bench keeps what it
/// measured).
async fn run_all(
    rig: &mut Rig,
    args: &InteractionArgs,
    targets: Targets,
    results: &mut Vec<RunResult>,
) -> anyhow::Result<()> {
    if u64::from(args.capacity) != rig.capacity {
        bail!(
            "the server derived capacity {} (decided by {}), not the {} asked for",
            rig.capacity,
            rig.decided_by,
            args.capacity
        );
    }
    let min_speech = targets
        .min_speech_ms
        .map_or_else(|| "unknown".to_string(), |v| format!("{v} ms"));
    println!("{}", std::env::args().collect::<Vec<_>>().join(" "));
    println!(
        "callgate-bench interaction: capacity {}; runs {:?} × {}; callers speak {} ms into the \
         greeting, {} utterances; min_speech_ms {min_speech}; generator nice {:+}",
        rig.capacity,
        args.runs,
        args.repeat,
        args.barge_in_at_ms,
        args.utterances,
        rig.generator_nice
    );
    println!("{}", row::table_header());
    for (calls, repeat) in args.plan() {
        let result = measure(rig, args, calls, repeat).await?;
        println!("{}", row::format_row(&result.row));
        println!("{}", row::format_server(&result.row));
        results.push(result);
        write_report(rig, args, targets, results)?;
    }
    Ok(())
}

/// One run: wait for an idle server, place the calls, wait for the server
/// to finish them (receipts written), then read its CPU, memory and receipts.
async fn measure(
    rig: &mut Rig,
    args: &InteractionArgs,
    calls: usize,
    repeat: usize,
) -> anyhow::Result<RunResult> {
    let cfg = args.load_config(&rig.media_url(), calls);
    let (load, resources, (from, to)) = rig.offer(cfg, args.settle_timeout).await?;
    let receipts = rig.receipts(from, to).await?;
    let setup = RunSetup {
        calls,
        repeat,
        max_lag_ms: args.max_lag_ms,
    };
    let row = InteractionRow::new(setup, &load, &receipts, resources);
    Ok(RunResult {
        row,
        load,
        receipts,
    })
}

fn write_report(
    rig: &Rig,
    args: &InteractionArgs,
    targets: Targets,
    runs: &[RunResult],
) -> anyhow::Result<()> {
    let report = Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        capacity: rig.capacity,
        targets,
        barge_in_at_ms: args.barge_in_at_ms,
        utterances: args.utterances,
        dial_rate: args.dial_rate,
        generator_nice: rig.generator_nice,
        runs,
    };
    super::write_json(&args.json, &report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: InteractionArgs,
    }

    fn args(argv: &[&str]) -> InteractionArgs {
        let mut full = vec!["interaction"];
        full.extend_from_slice(argv);
        Cmd::try_parse_from(full).unwrap().args
    }

    #[test]
    fn defaults_are_one_hundred_and_a_thousand_calls_barging_into_the_greeting() {
        let a = args(&[]);
        assert_eq!(a.runs, vec![1, 100, 1_000]);
        assert!(a.validate().is_ok());
        assert_eq!(a.caps().expected_capacity(), 1_100);
        let cfg = a.load_config("ws://127.0.0.1:9/v1/media-stream", 1_000);
        assert_eq!(cfg.barge_in_at_ms, Some(800));
        assert_eq!(cfg.arrival, Arrival::Rate { per_second: 100.0 });
        assert_eq!(cfg.utterances, 4);
        assert_eq!(a.load_config("ws://x:1/", 1).arrival, Arrival::AllAtOnce);
        assert_eq!(a.plan(), vec![(1, 1), (100, 1), (1_000, 1)]);
    }

    #[test]
    fn repeats_and_capacity_are_checked() {
        let a = args(&["--runs", "10,20", "--repeat", "2"]);
        assert_eq!(a.plan(), vec![(10, 1), (10, 2), (20, 1), (20, 2)]);
        assert!(
            args(&["--runs", "2000"]).validate().is_err(),
            "above capacity"
        );
        assert!(
            args(&["--runs", "2000", "--capacity", "2000"])
                .validate()
                .is_ok()
        );
        assert!(args(&["--repeat", "0"]).validate().is_err());
        assert!(args(&["--runs", "0"]).validate().is_err());
        assert!(args(&["--dial-rate", "0"]).validate().is_err());
        assert!(
            args(&["--utterances", "0"]).validate().is_err(),
            "nothing to say"
        );
    }
}
