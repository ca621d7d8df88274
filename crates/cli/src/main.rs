//! The `callgate` command: `serve` runs the server (the `callgate`
//! library); `sim`, `load` and `demo` are the tools around it — the
//! provider simulators, the scripted callers, and the rig that wires
//! Postgres, the simulators and the server together (`callgate-rig`). The
//! benchmarks are a binary of their own (`callgate-bench`).
//! `audit` checks a running deployment's session ledger for broken
//! invariants (exit 1 when it finds any); `drill` runs the committed-load
//! staircase and signs its session-capacity receipt (`callgate-drill`).

mod audit;
mod demo;
mod drill;
mod logging;
mod sim;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "callgate",
    version,
    about = "A voice AI call server that never goes silent"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the server.
    Serve {
        /// Configuration file (see config/callgate.toml for every key).
        #[arg(long, short, env = "CALLGATE_CONFIG")]
        config: Option<PathBuf>,
        /// Load and validate the configuration (file + environment), print
        /// every surface it leaves open to other hosts, and exit without
        /// serving: 0 when valid, 1 when not.
        #[arg(long)]
        check: bool,
    },
    /// Run the provider simulators (STT, TTS, dialog + tools) on local ports.
    Sim(sim::SimArgs),
    /// Place scripted Twilio-protocol calls against a server and measure them.
    Load(callgate_load::cli::LoadArgs),
    /// The whole thing on embedded defaults: Postgres, simulators, server, 20 calls.
    Demo(demo::DemoArgs),
    /// Check the session ledger for invariant violations (exit 1 if any, 2 if it cannot).
    Audit(audit::AuditArgs),
    /// The committed-load drill: a staircase against two instances behind a
    /// balancer, ending in a signed session-capacity receipt (exit 0 for
    /// promote or limited, 1 for hold or rollback); `drill verify`.
    Drill(drill::DrillArgs),
    /// Moved: the benchmarks are `callgate-bench <scenario>` now.
    #[command(hide = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        rest: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("callgate: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async move {
        match cli.cmd {
            Cmd::Serve {
                config,
                check: false,
            } => serve(config).await,
            Cmd::Serve {
                config,
                check: true,
            } => check(config),
            Cmd::Sim(args) => sim::run(args).await,
            Cmd::Load(args) => {
                logging::init("text", "warn");
                callgate_load::cli::main(args).await
            }
            Cmd::Demo(args) => demo::run(args).await,
            Cmd::Audit(args) => audit::run(args).await,
            Cmd::Drill(args) => drill::run(args).await,
            Cmd::Bench { rest } => {
                eprintln!(
                    "callgate: the benchmarks moved to their own binary: callgate-bench {} \
                     (cargo build --release -p callgate-cli -p callgate-bench)",
                    rest.join(" ")
                );
                Ok(ExitCode::from(2))
            }
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("callgate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `serve --check`: what `serve` would start with, said on stdout.
fn check(config: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let cfg = callgate::config::Config::load(config.as_deref())?;
    let exposures = cfg.exposures();
    for e in &exposures {
        println!(
            "warning: {} ({}; close it with {})",
            e.message, e.addr, e.key
        );
    }
    let faults = cfg.faults.active();
    for (key, what) in &faults {
        println!("warning: deliberate fault {key} is on: {what}");
    }
    let warnings = exposures.len() + faults.len();
    println!(
        "configuration valid: {} ({} warning{})",
        config
            .as_deref()
            .map_or("embedded defaults".into(), |p| p.display().to_string()),
        warnings,
        if warnings == 1 { "" } else { "s" }
    );
    Ok(ExitCode::SUCCESS)
}

async fn serve(config: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let cfg = callgate::config::Config::load(config.as_deref())?;
    logging::init(&cfg.log.format, &cfg.log.filter);
    callgate::server::serve(cfg, config).await?;
    Ok(ExitCode::SUCCESS)
}
