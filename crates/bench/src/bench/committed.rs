//! `callgate-bench committed`: what a committed, quiet call costs the
//! server — CPU, resident memory and descriptors per call — on each
//! ingress, N calls held at once.
//!
//! What it is: the incident bench's rig (a throwaway Postgres or
//! `CALLGATE_DATABASE_URL`; the simulators and the server as child
//! processes, so the server's CPU and RSS are its own), with the WebRTC
//! ingress on when it is measured. For each N of `--calls`, for each
//! ingress of `--ingress`, `--repeat` times:
//!
//! 1. restart the server (a fresh process: the allocator keeps what a run
//!    freed), wait for it to be idle, read its RSS and descriptors;
//! 2. dial N calls at `--dial-rate` with the load tool ([`HeldRun`]): each
//!    hears the greeting, speaks one utterance, hears the reply, then holds
//!    the line — the carrier's media keeps flowing (silence, 50 frames a
//!    second each way the protocol has them), nothing is owed;
//! 3. once all N hold, wait `--quiet`, then measure a `--window`: the
//!    server's CPU ticks across it, its RSS and descriptors at its end;
//! 4. hang every call up, wait for the server to be idle, and check its
//!    rows: exactly N ledger rows of the run's ingress, closed.
//!
//! The figures per call: **% of a core** (server CPU seconds over the
//! window's seconds, over N, × 100), **RSS KiB** (at the window's end above
//! the idle baseline, over N), **fds** (likewise). Both carriers' callers
//! are the same load tool, the same seed and script: Twilio media streams
//! (a WebSocket of JSON-wrapped µ-law) and WebRTC (str0m, Opus over
//! DTLS-SRTP on the server's one UDP socket, status polled every 500 ms as
//! `docs/webrtc.md` asks — that polling is part of what a WebRTC call
//! costs).
//!
//! A run is not a valid measurement (and is left out of the medians) when
//! not every call held through the whole window, any call was refused, not
//! exactly N calls were served by both the server's rows and the callers'
//! records, or the generator fell behind: its media clock lagged past
//! `--max-lag-ms` or skipped frames, or (WebRTC) the server concealed
//! frames — a packet that never reached it.
//!
//! What it never does: change the server's behaviour beyond the ceilings
//! and the WebRTC listener, or leave a child running.
//!
//! How to drive it (release build; the machine otherwise idle):
//!
//! ```text
//! cargo build --release -p callgate-cli -p callgate-bench
//! ./target/release/callgate-bench committed --calls 100,500 --repeat 3 \
//!     --stt-cap 600 --tts-cap 600 --dialog-cap 600 --db-max-calls 600
//! ```

mod row;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use callgate_load::held::HeldRun;
use callgate_load::{Arrival, LoadConfig, LoadReport, Protocol};
use serde::Serialize;

use crate::bench::sip::{ledger, row::Ingress};
use crate::bench::{Caps, Rig};
use callgate_rig::measured::procfs;
use callgate_rig::measured::{generator_lag, with_rig};
use row::{CommittedRow, Held, Window};

/// How often the callers' counts are read while the calls commit.
const COMMIT_POLL: Duration = Duration::from_millis(200);
/// A holding call's `call_timeout` beyond the commit bound and the window:
/// it must outlive the measurement and the hang-up.
const CALL_TIMEOUT_SLACK: Duration = Duration::from_secs(120);

/// An ingress the committed bench can place calls on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HeldIngress {
    Twilio,
    Webrtc,
}

impl HeldIngress {
    fn ingress(self) -> Ingress {
        match self {
            HeldIngress::Twilio => Ingress::Twilio,
            HeldIngress::Webrtc => Ingress::Webrtc,
        }
    }

    fn protocol(self) -> Protocol {
        match self {
            HeldIngress::Twilio => Protocol::Twilio,
            HeldIngress::Webrtc => Protocol::Webrtc,
        }
    }
}

/// Knobs of `callgate-bench committed`.
#[derive(Debug, Clone, clap::Args)]
pub struct CommittedArgs {
    /// Calls held at once per run, in order.
    #[arg(long, value_delimiter = ',', default_value = "100,500")]
    pub calls: Vec<usize>,
    /// Ingresses measured at each size, in order.
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "twilio,webrtc"
    )]
    pub ingress: Vec<HeldIngress>,
    /// Times each ingress is measured at each size.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Calls dialled per second (a steady rate).
    #[arg(long, default_value_t = 50.0)]
    pub dial_rate: f64,
    /// The measured stretch of all calls holding.
    #[arg(long, default_value = "30s", value_parser = callgate_load::cli::parse_duration)]
    pub window: Duration,
    /// Pause after the last call holds, before the window opens.
    #[arg(long, default_value = "3s", value_parser = callgate_load::cli::parse_duration)]
    pub quiet: Duration,
    /// Longest wait, from the first dial, for every call to hold.
    #[arg(long, default_value = "180s", value_parser = callgate_load::cli::parse_duration)]
    pub commit_timeout: Duration,
    /// Seed of the callers' utterance lengths and voices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Worst lag of the callers' media clock for a valid run.
    #[arg(long, default_value_t = callgate_load::MAX_FRAME_LAG.as_millis() as u64)]
    pub max_lag_ms: u64,
    #[command(flatten)]
    pub caps: Caps,
    /// Longest wait for the server to be idle between runs.
    #[arg(long, default_value = "120s", value_parser = callgate_load::cli::parse_duration)]
    pub settle_timeout: Duration,
    /// Nice value added to the load generator (this process) once the rig
    /// is up; 0 = equal footing with the server.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u8).range(0..=19))]
    pub generator_nice: u8,
    /// Where to write every row.
    #[arg(long, default_value = "callgate-bench-committed.json")]
    pub json: PathBuf,
}

impl CommittedArgs {
    /// Checks the knobs before anything is started.
    ///
    /// # Errors
    /// A description of the first bad knob.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.calls.is_empty() || self.calls.contains(&0) {
            bail!("--calls needs at least one size, each of at least one call");
        }
        if self.ingress.is_empty() || self.repeat == 0 {
            bail!("--ingress needs at least one ingress and --repeat at least 1");
        }
        if !(self.dial_rate.is_finite() && self.dial_rate > 0.0) {
            bail!("--dial-rate must be a positive number of calls per second");
        }
        if self.window < Duration::from_secs(1) {
            bail!("--window must be at least 1 s (CPU is read in 10 ms ticks)");
        }
        self.caps.validate()?;
        let largest = self.calls.iter().copied().max().unwrap_or(0);
        if u64::from(self.caps.expected_capacity()) <= largest as u64 {
            bail!(
                "capacity {} (the ceilings minus headroom) must be above the largest run \
                 ({largest} calls): raise --stt-cap, --tts-cap, --dialog-cap and --db-max-calls",
                self.caps.expected_capacity()
            );
        }
        for ingress in &self.ingress {
            let url = ingress.protocol().default_url();
            self.load_config(*ingress, url, largest)
                .validate()
                .context("load settings")?;
        }
        Ok(())
    }

    /// The callers of a run: one utterance each, then holding.
    pub fn load_config(&self, ingress: HeldIngress, url: &str, calls: usize) -> LoadConfig {
        LoadConfig {
            url: url.to_string(),
            protocol: ingress.protocol(),
            calls,
            arrival: Arrival::Rate {
                per_second: self.dial_rate,
            },
            utterances: 1,
            seed: self.seed,
            call_timeout: self.commit_timeout + self.quiet + self.window + CALL_TIMEOUT_SLACK,
            ..LoadConfig::default()
        }
    }

    /// Every run in order: `(calls, ingress, repetition)`.
    fn plan(&self) -> Vec<(usize, HeldIngress, usize)> {
        let mut plan = Vec::new();
        for &n in &self.calls {
            for &ingress in &self.ingress {
                plan.extend((1..=self.repeat).map(|rep| (n, ingress, rep)));
            }
        }
        plan
    }
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    command: String,
    capacity: u64,
    generator_nice: i64,
    window_s: f64,
    rows: &'a [CommittedRow],
}

/// `callgate-bench committed`.
///
/// # Errors
/// Something could not be started, measured or written; an invalid run is
/// not an error but the exit code.
pub async fn run(args: CommittedArgs) -> anyhow::Result<ExitCode> {
    args.validate()?;
    let start = async {
        if args.ingress.contains(&HeldIngress::Webrtc) {
            Rig::start_with_webrtc(&args.caps).await
        } else {
            Rig::start(&args.caps).await
        }
    };
    let mut rows = Vec::new();
    with_rig(start, "child logs", async |rig: &mut Rig| {
        run_all(rig, &args, &mut rows).await
    })
    .await?;
    crate::bench::print_closing(
        (
            row::table_header(),
            rows.iter().map(row::format_row).collect(),
        ),
        "median (min–max) over the valid runs, per committed call",
        row::format_summary(&rows),
        (&args.json, rows.iter().all(CommittedRow::is_valid)),
    )
}

async fn run_all(
    rig: &mut Rig,
    args: &CommittedArgs,
    rows: &mut Vec<CommittedRow>,
) -> anyhow::Result<()> {
    rig.ensure_capacity_above(args.calls.iter().copied().max().unwrap_or(0))?;
    rig.lower_generator_priority(args.generator_nice)
        .context("lowering the generator's priority (--generator-nice 0 skips it)")?;
    println!("{}", std::env::args().collect::<Vec<_>>().join(" "));
    println!(
        "callgate-bench committed: capacity {} decided by {}; calls {:?} × {} per ingress; \
         window {} s; generator's nice {:+}",
        rig.capacity,
        rig.decided_by,
        args.calls,
        args.repeat,
        args.window.as_secs_f64(),
        rig.generator_nice
    );
    println!("{}", row::table_header());
    for (i, (calls, ingress, repeat)) in args.plan().into_iter().enumerate() {
        rig.restart_server(i + 1)
            .await
            .context("restarting the server for a fresh process")?;
        let row = measure(rig, args, ingress, calls, repeat).await?;
        println!("{}", row::format_row(&row));
        for why in row.invalid_because() {
            println!("       NOT A VALID MEASUREMENT: {why}");
        }
        rows.push(row);
        let report = Report {
            command: std::env::args().collect::<Vec<_>>().join(" "),
            capacity: rig.capacity,
            generator_nice: rig.generator_nice,
            window_s: args.window.as_secs_f64(),
            rows,
        };
        crate::bench::write_json(&args.json, &report)?;
    }
    Ok(())
}

/// The server's resident memory and descriptors now.
fn footprint(rig: &Rig) -> anyhow::Result<(u64, usize)> {
    let k = rig.server_fds()?;
    Ok((rig.server_rss_kib()?, k.tcp + k.udp + k.unix + k.other))
}

async fn measure(
    rig: &mut Rig,
    args: &CommittedArgs,
    ingress: HeldIngress,
    calls: usize,
    repeat: usize,
) -> anyhow::Result<CommittedRow> {
    rig.wait_idle(args.settle_timeout).await?;
    let idle = footprint(rig)?;
    let url = match ingress {
        HeldIngress::Twilio => rig.media_url(),
        HeldIngress::Webrtc => rig.webrtc_url().context("the rig has no WebRTC ingress")?,
    };
    let from = SystemTime::now();
    let held = HeldRun::start(&args.load_config(ingress, &url, calls))?;
    let commit = wait_committed(&held, calls, args.commit_timeout).await;
    let window = if commit.is_ok() {
        tokio::time::sleep(args.quiet).await;
        Some(measure_window(rig, &held, args.window).await?)
    } else {
        None
    };
    held.hang_up();
    let load = held.finish().await;
    rig.wait_idle(args.settle_timeout).await?;
    let to = SystemTime::now();
    let server = ledger::read(rig.conninfo(), rig.instance(), ingress.ingress(), from, to).await?;
    Ok(CommittedRow {
        ingress: ingress.ingress(),
        calls,
        repeat,
        commit_s: commit.as_ref().ok().copied(),
        not_committed: commit.err(),
        idle_rss_kib: idle.0,
        idle_fds: idle.1,
        window,
        held: held_view(&load, args.max_lag_ms),
        server,
    })
}

/// Waits until all `calls` hold; the seconds that took, or why not.
async fn wait_committed(held: &HeldRun, calls: usize, limit: Duration) -> Result<f64, String> {
    let started = Instant::now();
    loop {
        let c = held.counts();
        if c.holding == calls {
            return Ok(started.elapsed().as_secs_f64());
        }
        if c.finished > 0 {
            return Err(format!(
                "{} of {calls} calls ended before all held ({} refused, {} silent, {} failed)",
                c.finished, c.rejected, c.silent, c.failed
            ));
        }
        if started.elapsed() >= limit {
            return Err(format!(
                "{} of {calls} calls held after {} s",
                c.holding,
                limit.as_secs()
            ));
        }
        tokio::time::sleep(COMMIT_POLL).await;
    }
}

/// CPU across the window; RSS and descriptors at its end.
async fn measure_window(rig: &Rig, held: &HeldRun, window: Duration) -> anyhow::Result<Window> {
    let before = rig.cpu_ticks()?;
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let after = rig.cpu_ticks()?;
    let wall_s = started.elapsed().as_secs_f64();
    let (rss_kib, fds) = footprint(rig)?;
    let secs = |a: u64, b: u64| procfs::ticks_to_secs(b.saturating_sub(a), rig.clock_ticks);
    Ok(Window {
        wall_s,
        server_cpu_s: secs(before.server, after.server),
        generator_cpu_s: secs(before.load, after.load),
        sims_cpu_s: secs(before.sims, after.sims),
        rss_kib,
        fds,
        holding_at_end: held.counts().holding,
    })
}

/// What the callers recorded, with the incident bench's rule for a
/// generator that kept up.
fn held_view(load: &LoadReport, max_lag_ms: u64) -> Held {
    let s = &load.summary;
    Held {
        records: load.calls.len(),
        served: s.completed + s.ended_by_bot,
        refused: s.rejected,
        silent: s.silent,
        failed: s.failed,
        replies_heard: load.calls.iter().map(|c| c.replies_heard).sum(),
        lagged: generator_lag(s, max_lag_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: CommittedArgs,
    }

    fn args(argv: &[&str]) -> Result<CommittedArgs, clap::Error> {
        let mut full = vec!["committed"];
        full.extend_from_slice(argv);
        Cmd::try_parse_from(full).map(|c| c.args)
    }

    const BIG_CAPS: [&str; 8] = [
        "--stt-cap",
        "600",
        "--tts-cap",
        "600",
        "--dialog-cap",
        "600",
        "--db-max-calls",
        "600",
    ];

    #[test]
    fn every_size_measures_each_ingress_in_turn() {
        let mut argv = vec!["--calls", "10,500", "--repeat", "2"];
        argv.extend(BIG_CAPS);
        let a = args(&argv).unwrap();
        assert_eq!(a.ingress, [HeldIngress::Twilio, HeldIngress::Webrtc]);
        assert!(a.validate().is_ok(), "{:?}", a.validate());
        let plan = a.plan();
        assert_eq!(plan.len(), 8);
        assert_eq!(plan[0], (10, HeldIngress::Twilio, 1));
        assert_eq!(plan[2], (10, HeldIngress::Webrtc, 1));
        assert_eq!(plan[7], (500, HeldIngress::Webrtc, 2));
    }

    #[test]
    fn the_callers_speak_once_and_outlive_the_window() {
        let a = args(&["--window", "60s"]).unwrap();
        let twilio = a.load_config(HeldIngress::Twilio, "ws://127.0.0.1:9/v1/media-stream", 5);
        assert_eq!(twilio.url, "ws://127.0.0.1:9/v1/media-stream");
        assert_eq!((twilio.protocol, twilio.utterances), (Protocol::Twilio, 1));
        assert_eq!(twilio.arrival, Arrival::Rate { per_second: 50.0 });
        assert!(twilio.call_timeout > a.commit_timeout + a.window);
        let webrtc = a.load_config(HeldIngress::Webrtc, "http://127.0.0.1:9/v1/webrtc", 5);
        assert_eq!(webrtc.url, "http://127.0.0.1:9/v1/webrtc");
        assert_eq!(webrtc.protocol, Protocol::Webrtc);
        assert!(webrtc.validate().is_ok());
    }

    #[test]
    fn bad_knobs_are_refused_before_anything_starts() {
        let bad = |argv: &[&str]| args(argv).map(|a| a.validate().is_err()).unwrap_or(true);
        assert!(bad(&["--calls", "0"]));
        assert!(bad(&["--repeat", "0"]));
        assert!(bad(&["--calls", "500"]), "above the default capacity 220");
        assert!(bad(&["--dial-rate", "0"]));
        assert!(bad(&["--window", "500ms"]));
        assert!(bad(&["--ingress", "sip"]), "no SIP caller holds yet");
        assert!(!bad(&["--calls", "100", "--ingress", "webrtc"]));
    }
}
