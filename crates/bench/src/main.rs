//! `callgate-bench` — callgate's benchmarks at full size, a binary of
//! their own so the product (`callgate`) carries none of them.
//!
//! What it is: each scenario of [`bench::Scenario`] starts the measured rig
//! (`callgate_rig::measured`: a throwaway Postgres or
//! `CALLGATE_DATABASE_URL`, then `callgate sim` and `callgate serve` as
//! child processes of the `callgate` binary beside this one, or the one
//! `CALLGATE_BIN` names), offers its calls with the load tool, and prints
//! what the server did and what its callers heard.
//!
//! What it never does: run in the test suite (benchmarks print figures;
//! tests assert behaviour), or leave a child, a cgroup or a burner behind.
//!
//! How to drive it (release build, run through `capped`;
//! docs/benchmarks.md has every command and its last figures):
//!
//! ```text
//! cargo build --release -p callgate-cli -p callgate-bench
//! ./target/release/callgate-bench incident
//! ./target/release/callgate-bench overload --cpu-quota 0.3 --repeat 3
//! ```

mod bench;

use std::process::ExitCode;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "callgate-bench",
    version,
    about = "callgate's benchmarks: the server and simulators as child processes, measured"
)]
struct Cli {
    #[command(subcommand)]
    scenario: bench::Scenario,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("callgate-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(bench::run(bench::BenchArgs {
        scenario: cli.scenario,
    })) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("callgate-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Installs the tracing subscriber (text, to stderr) once; `RUST_LOG`
/// overrides `filter`.
fn logging_init(filter: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(filter));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
