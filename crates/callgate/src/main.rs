//! The `callgate` command: `serve`, `sim`, `load`, `demo`.

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
    },
    /// Run the provider simulators (STT, TTS, dialog + tools) on local ports.
    Sim(callgate::demo::SimArgs),
    /// Place scripted Twilio-protocol calls against a server and measure them.
    Load(callgate_load::cli::LoadArgs),
    /// The whole thing on embedded defaults: Postgres, simulators, server, 20 calls.
    Demo(callgate::demo::DemoArgs),
    /// Benchmarks at full size, with the server and simulators as child processes.
    Bench(callgate::bench::BenchArgs),
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
            Cmd::Serve { config } => serve(config).await,
            Cmd::Sim(args) => callgate::demo::run_sims(args).await,
            Cmd::Load(args) => {
                callgate::init_logging("text", "warn");
                callgate_load::cli::main(args).await
            }
            Cmd::Demo(args) => callgate::demo::run(args).await,
            Cmd::Bench(args) => callgate::bench::run(args).await,
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

async fn serve(config: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let cfg = callgate::config::Config::load(config.as_deref())?;
    callgate::init_logging(&cfg.log.format, &cfg.log.filter);
    callgate::server::serve(cfg, config).await?;
    Ok(ExitCode::SUCCESS)
}
