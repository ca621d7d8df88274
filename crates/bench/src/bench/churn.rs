//! `callgate-bench webrtc-churn`: what WebRTC sessions leave behind. Opens
//! and hangs up N sessions against a fresh server (each a real call:
//! admitted, set up, ended by `DELETE`), and compares the server's RSS and
//! open descriptors after them with its baseline — WebRTC stacks are
//! known for per-session leaks; this is the measurement that would show
//! one.
//!
//! What it is: the incident bench's rig (the server and simulators as
//! child processes, so the figures are the server's own) with the WebRTC
//! ingress open on a loopback port; a str0m client per session
//! ([`client`]), `--concurrency` sessions at a time. The baseline is read
//! after `--warmup` sessions (the allocator's arenas and str0m's first
//! use are one-time costs, not leaks) and the server idle again; the
//! after-figures once all N have ended and the server is idle — each read
//! 12 s after idle, past the 10 s an ended session stays readable. Also
//! printed: the fresh server's figures, connect time (POST → DTLS done)
//! median and p95, failures, and the server's rows (every session a
//! ledger row ended by the hang-up: `caller_hangup`, or
//! `caller_hangup_during_setup` when the `DELETE` came before the call's
//! connections were all open; none refused).
//!
//! `--rounds` rounds of N run back to back, the footprint read after each,
//! so a leak shows as a slope (a per-session leak grows every round by the
//! same amount) and a pool that opens one more connection under a new
//! concurrency peak shows as a step that does not repeat.
//!
//! Descriptors are read by kind. The server's pools open connections on
//! demand and keep them (the database pool over Unix sockets, the dialog's
//! HTTP/2 channels and the tools client over TCP), so a new concurrency
//! peak can add a few once; a session's own sockets (its STT and TTS
//! WebSockets, anything per session) would add one per session.
//!
//! Verdict: PASS when every session connected and was hung up, RSS after
//! every round is within ±5 % of the baseline, UDP and non-socket
//! descriptors equal the baseline after every round, and TCP + Unix
//! sockets after the last round exceed the baseline by no more than the
//! pools' size (`database.pool_size + dialog.channels`) — 3,000 sessions
//! leaking one socket per hundred would exceed it.
//!
//! What it never does: measure a conversation (no caller audio), or leave
//! a child running.
//!
//! ```text
//! cargo build --release -p callgate-cli -p callgate-bench
//! ./target/release/callgate-bench webrtc-churn --sessions 1000
//! ```

pub mod client;

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use futures_util::StreamExt;
use serde::Serialize;

use crate::bench::{Caps, Rig};
use callgate_rig::measured::procfs::FdKinds;

#[derive(Debug, Clone, clap::Args)]
pub struct ChurnArgs {
    /// Sessions to open and hang up after the warm-up.
    #[arg(long, default_value_t = 1_000)]
    pub sessions: usize,
    /// Sessions before the baseline is read (at four times `--concurrency`):
    /// enough for the server's pools
    /// (16 database connections, the dialog's HTTP/2 connections, all
    /// opened on demand) and the allocator to reach their working size.
    #[arg(long, default_value_t = 1_000)]
    pub warmup: usize,
    /// Rounds of `--sessions` after the baseline.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Sessions at a time.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Longest wait for one session to connect.
    #[arg(long, default_value = "10s", value_parser = callgate_load::cli::parse_duration)]
    pub connect_timeout: Duration,
    /// Longest wait for the server to be idle.
    #[arg(long, default_value = "120s", value_parser = callgate_load::cli::parse_duration)]
    pub settle_timeout: Duration,
    #[command(flatten)]
    pub caps: Caps,
    #[arg(long, default_value = "callgate-bench-webrtc-churn.json")]
    pub json: std::path::PathBuf,
}

/// The server's footprint at one moment.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Footprint {
    pub rss_kib: u64,
    pub fds: usize,
    pub fd_kinds: FdKinds,
}

#[derive(Debug, Serialize)]
struct Report {
    command: String,
    sessions: usize,
    warmup: usize,
    concurrency: usize,
    rounds: usize,
    fresh: Footprint,
    baseline: Footprint,
    after: Vec<Footprint>,
    /// RSS after each round against the baseline, %.
    rss_change_pct: Vec<f64>,
    /// Descriptors after each round against the baseline.
    fd_change: Vec<i64>,
    connect_ms_median: Option<f64>,
    connect_ms_p95: Option<f64>,
    failures: Vec<String>,
    rows: usize,
    rows_hung_up: usize,
    pass: bool,
}

/// `callgate-bench webrtc-churn`.
///
/// # Errors
/// The rig could not be started or measured; a leak is the exit code.
pub async fn run(args: ChurnArgs) -> anyhow::Result<ExitCode> {
    if args.sessions == 0 || args.concurrency == 0 {
        bail!("--sessions and --concurrency must be at least 1");
    }
    args.caps.validate()?;
    let mut rig = Rig::start_with_webrtc(&args.caps).await?;
    let outcome = measure(&mut rig, &args).await;
    rig.stop().await;
    let report = outcome?;
    print(&report);
    crate::bench::write_json(&args.json, &report)?;
    Ok(if report.pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Longer than an ended session stays readable (`registry::LINGER`,
/// 10 s): what is read is what stays, not what is still due to go.
const QUIET: Duration = Duration::from_secs(12);

async fn footprint(rig: &mut Rig, settle: Duration) -> anyhow::Result<Footprint> {
    rig.wait_idle(settle).await?;
    tokio::time::sleep(QUIET).await;
    let k = rig.server_fds()?;
    Ok(Footprint {
        rss_kib: rig.server_rss_kib()?,
        fds: k.tcp + k.udp + k.unix + k.other,
        fd_kinds: k,
    })
}

async fn measure(rig: &mut Rig, args: &ChurnArgs) -> anyhow::Result<Report> {
    let url = rig.webrtc_url().context("the rig has no WebRTC ingress")?;
    let http = reqwest::Client::new();
    let fresh = footprint(rig, args.settle_timeout).await?;
    // The warm-up runs at four times the concurrency, so the pools open
    // what the measured rounds could ask of them before the baseline.
    let warm = ChurnArgs {
        concurrency: args.concurrency * 4,
        ..args.clone()
    };
    let (_, warm_failures) = sessions(&http, &url, args.warmup, &warm).await;
    let baseline = footprint(rig, args.settle_timeout).await?;
    let from = SystemTime::now();
    let (mut connects, mut failures, mut after) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        let (c, f) = sessions(&http, &url, args.sessions, args).await;
        connects.extend(c);
        failures.extend(f);
        after.push(footprint(rig, args.settle_timeout).await?);
    }
    let rows = rig.server_rows(from, SystemTime::now()).await?;
    let closed = rows
        .iter()
        .filter(|r| {
            matches!(
                r.reason.as_deref(),
                Some("caller_hangup" | "caller_hangup_during_setup")
            )
        })
        .count();
    let rss_change_pct: Vec<f64> = after
        .iter()
        .map(|a| (a.rss_kib as f64 / baseline.rss_kib.max(1) as f64 - 1.0) * 100.0)
        .collect();
    let fd_change: Vec<i64> = after
        .iter()
        .map(|a| a.fds as i64 - baseline.fds as i64)
        .collect();
    failures.extend(warm_failures.into_iter().map(|f| format!("warm-up: {f}")));
    let pools = pool_slack(&rig.server_config);
    let b = baseline.fd_kinds;
    let fixed_kinds = after
        .iter()
        .all(|a| a.fd_kinds.udp == b.udp && a.fd_kinds.other == b.other);
    let sockets = |k: &FdKinds| k.tcp + k.unix;
    let no_fd_growth = fixed_kinds
        && after
            .last()
            .is_some_and(|a| sockets(&a.fd_kinds) <= sockets(&b) + pools);
    let pass = failures.is_empty()
        && closed == args.sessions * args.rounds
        && rss_change_pct.iter().all(|p| p.abs() <= 5.0)
        && no_fd_growth;
    Ok(Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        sessions: args.sessions,
        warmup: args.warmup,
        concurrency: args.concurrency,
        rounds: args.rounds,
        fresh,
        baseline,
        after,
        rss_change_pct,
        fd_change,
        connect_ms_median: percentile(&connects, 0.5),
        connect_ms_p95: percentile(&connects, 0.95),
        failures,
        rows: rows.len(),
        rows_hung_up: closed,
        pass,
    })
}

/// `n` sessions, `concurrency` at a time: connect times (ms) and failures.
async fn sessions(
    http: &reqwest::Client,
    url: &str,
    n: usize,
    args: &ChurnArgs,
) -> (Vec<f64>, Vec<String>) {
    let started = Instant::now();
    let results: Vec<Result<Duration, String>> = futures_util::stream::iter(0..n)
        .map(|_| client::connect_and_hang_up(http, url, args.connect_timeout))
        .buffer_unordered(args.concurrency)
        .collect()
        .await;
    eprintln!("{n} sessions in {:.1} s", started.elapsed().as_secs_f64());
    let mut ok = Vec::new();
    let mut failed = Vec::new();
    for r in results {
        match r {
            Ok(d) => ok.push(d.as_secs_f64() * 1_000.0),
            Err(e) => failed.push(e),
        }
    }
    (ok, failed)
}

/// Connections the server's pools may still open after the baseline.
fn pool_slack(cfg: &serde_json::Value) -> usize {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0) as usize;
    n(&cfg["database"]["pool_size"]) + n(&cfg["dialog"]["channels"])
}

fn percentile(v: &[f64], q: f64) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied()
}

fn print(r: &Report) {
    println!("{}", r.command);
    let line = |what: &str, f: &Footprint| {
        let k = &f.fd_kinds;
        println!(
            "  {what:<9} RSS {:>8} KiB  fds {:>4} (tcp {}, udp {}, unix {}, other {})",
            f.rss_kib, f.fds, k.tcp, k.udp, k.unix, k.other
        );
    };
    line("fresh", &r.fresh);
    line("baseline", &r.baseline);
    for (i, a) in r.after.iter().enumerate() {
        line(&format!("round {}", i + 1), a);
        println!(
            "            RSS {:+.2} %, fds {:+} against the baseline",
            r.rss_change_pct[i], r.fd_change[i]
        );
    }
    println!(
        "  {} × {} sessions after {} warm-up, {} at a time; connect ms median {:.1} p95 {:.1}",
        r.rounds,
        r.sessions,
        r.warmup,
        r.concurrency,
        r.connect_ms_median.unwrap_or(f64::NAN),
        r.connect_ms_p95.unwrap_or(f64::NAN)
    );
    println!(
        "  rows {} ({} ended by the hang-up); failures {}",
        r.rows,
        r.rows_hung_up,
        r.failures.len()
    );
    for f in r.failures.iter().take(5) {
        println!("    {f}");
    }
    println!("  {}", if r.pass { "PASS" } else { "FAIL" });
}
