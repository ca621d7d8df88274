//! `callgate-bench ledger`: the session ledger's own cost at N concurrent
//! sessions — reading the counters under contention, the reconciler's tick,
//! the HAProxy agent-check responder's answer, and a receipt's writes.
//!
//! What it is: a real server (in process, on a throwaway Postgres or
//! `CALLGATE_DATABASE_URL`) holding N sessions the way the counters see
//! them: N permits held in its admission gate (the runtime counter) and N
//! open ledger rows it owns (the ledger counter). No call audio flows: what
//! is measured is the bookkeeping, not the calls, so it is measured alone
//! (with N live calls on this 2-core machine their media would drown it).
//! CPU is read from `/proc/.../schedstat` (nanoseconds on CPU, per thread),
//! Postgres's from its process tree's ticks.
//!
//! Per repeat it measures:
//! - counter reads: `gate.snapshot()`, the routing report and the pressure
//!   view, each timed per call (p50 / p99 / max) while two threads churn
//!   admissions and releases through the same gate (the lock the runtime
//!   counter lives behind), and once with no churn;
//! - the reconciler: ticks run back to back (the ledger count query
//!   against N open rows, the comparison, the gauges), CPU per tick on the
//!   calling thread and Postgres's CPU per tick, scaled to the configured
//!   interval as CPU per second;
//! - the agent-check responder: checks over loopback TCP against the
//!   server's own listener, the server's CPU per check (process CPU minus
//!   the client thread's), scaled to one check per `agent_inter` per
//!   balancer as CPU per second;
//! - receipt writes: for each of the N sessions the writes one call's
//!   receipt makes (lifecycle stamps, events, the close with a full-size
//!   stats object) through the write-behind queue, until applied: wall time,
//!   callgate's CPU and Postgres's CPU, per call.
//!
//! Then the median and spread (min–max) over the repeats.
//!
//! What it never does: touch a provider (no call is set up), or report a
//! figure it did not measure.
//!
//! How to drive it (release build; the machine should be otherwise idle):
//!
//! ```text
//! cargo build --release -p callgate-cli -p callgate-bench
//! ./target/release/callgate-bench ledger --sessions 1000 --repeat 3
//! ```

mod measure;

use std::process::ExitCode;

use anyhow::Context;

use measure::{Figures, Setup};

/// Knobs of `callgate-bench ledger`.
#[derive(Debug, Clone, clap::Args)]
pub struct LedgerArgs {
    /// Concurrent sessions held while measuring.
    #[arg(long, default_value_t = 1000)]
    pub sessions: usize,
    /// Times the whole measurement is repeated (a fresh server each time).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Timed counter reads per kind and contention setting.
    #[arg(long, default_value_t = 200_000)]
    pub reads: usize,
    /// Reconciler ticks run back to back.
    #[arg(long, default_value_t = 500)]
    pub ticks: usize,
    /// Agent checks sent back to back.
    #[arg(long, default_value_t = 2_000)]
    pub checks: usize,
    /// A balancer's agent-check interval, ms (HAProxy `agent-inter`), for
    /// the responder's CPU per second.
    #[arg(long, default_value_t = 2_000)]
    pub agent_inter_ms: u64,
    /// Balancers checking each instance (HAProxy processes).
    #[arg(long, default_value_t = 2)]
    pub balancers: u32,
}

/// Runs the repeats and prints every figure and the summary.
pub async fn run(args: LedgerArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.sessions > 0, "--sessions must be at least 1");
    anyhow::ensure!(args.repeat > 0, "--repeat must be at least 1");
    let mut all = Vec::new();
    for i in 0..args.repeat {
        let setup = Setup::start(args.sessions)
            .await
            .with_context(|| format!("repeat {}: start", i + 1))?;
        let figures = setup.measure(&args).await;
        setup.stop().await;
        let figures = figures.with_context(|| format!("repeat {}", i + 1))?;
        println!("repeat {}: {}", i + 1, figures.line());
        all.push(figures);
    }
    println!();
    println!(
        "summary over {} repeats at {} sessions, median (min–max):",
        all.len(),
        args.sessions
    );
    for line in Figures::summary(&all) {
        println!("  {line}");
    }
    Ok(ExitCode::SUCCESS)
}
