//! `callgate demo`: the main job on embedded defaults.
//!
//! The demo starts a throwaway Postgres from the system's PostgreSQL binaries
//! (or uses `CALLGATE_DATABASE_URL`), the three provider simulators and the
//! server on loopback ports (an in-process `callgate_rig::InProcess`),
//! places scripted Twilio-protocol calls through `callgate load`, prints
//! what every caller heard, checks the receipts, and stops everything it
//! started. It exits non-zero if any call failed or went silent, or if
//! anything was left open.
//!
//! `callgate demo --serve` instead keeps the stack up with the WebRTC
//! ingress open on loopback and prints the page's URL: a person calls the
//! booking bot from a browser on this machine until Ctrl-C. (The STT
//! simulator is scripted: each thing said is transcribed as the script's
//! next line, not as the words spoken.)

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use callgate_load::{Arrival, LoadConfig};
use callgate_rig::{Database, InProcess, InProcessOptions, Leftovers};
use state_store::LocalOptions;

/// How long the server may drain at the end before it ends calls itself.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Calls to place.
    #[arg(long, default_value_t = 20)]
    pub calls: usize,
    /// Caller utterances per call (the bot answers each).
    #[arg(long, default_value_t = 3)]
    pub utterances: usize,
    /// Seconds over which the calls arrive.
    #[arg(long, default_value_t = 2.0)]
    pub ramp_s: f64,
    /// Where to write the per-call JSON records and the summary.
    #[arg(long, default_value = "callgate-demo.json")]
    pub json: PathBuf,
    /// Server log filter (server logs go to stderr).
    #[arg(long, default_value = "warn")]
    pub log: String,
    /// Place no scripted calls: keep the stack up, serve the browser page
    /// (`/call`, WebRTC open on loopback) and wait for Ctrl-C.
    #[arg(long)]
    pub serve: bool,
}

/// `callgate demo`.
pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    crate::logging::init("text", &args.log);
    let database = Database::from_env_or_local(LocalOptions::default()).await?;
    let instance = format!("demo-{}", std::process::id());
    let serve = args.serve;
    let rig = InProcess::start(database, InProcessOptions::new(instance), |cfg| {
        if serve {
            cfg.webrtc.enabled = true;
            cfg.webrtc.listen = ([127, 0, 0, 1], 0).into();
            cfg.webrtc.open = true;
        }
    })
    .await?;
    if serve {
        return serve_page(rig).await;
    }
    eprintln!(
        "callgate on {}; placing {} calls …",
        rig.media_url(),
        args.calls
    );

    let run = callgate_load::run(load_config(&args, rig.media_url()));
    let report = tokio::select! {
        report = run => report,
        sig = callgate_rig::stop_requested() => return cut_short(rig, sig?).await,
    };
    let mut out = std::io::stdout().lock();
    report.print_calls(&mut out)?;
    writeln!(out)?;
    report.print_table(&mut out)?;
    drop(out);
    report
        .write_json(&args.json)
        .with_context(|| format!("writing {}", args.json.display()))?;
    println!("per-call records: {}", args.json.display());

    let left = rig.stop(SHUTDOWN_DEADLINE).await?;
    print_receipts(&left);
    let s = &report.summary;
    let ok = s.failed == 0 && s.silent == 0 && s.completed == args.calls && left.is_clean();
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The calls were cut short by a stop signal: the stack is stopped in
/// order all the same (a second signal forces the exit), and the exit
/// status says which signal it was.
async fn cut_short(rig: InProcess, sig: callgate_rig::StopSignal) -> anyhow::Result<ExitCode> {
    eprintln!(
        "{}: stopping the demo's server, simulators and Postgres …",
        sig.name()
    );
    callgate_rig::force_on_second_signal();
    let left = rig.stop(SHUTDOWN_DEADLINE).await?;
    print_receipts(&left);
    Ok(ExitCode::from(sig.exit_status()))
}

/// `--serve`: the page's URL, then the stack until a stop signal (Ctrl-C,
/// SIGTERM, SIGHUP) — serving is the job, so a clean stop exits 0.
async fn serve_page(rig: InProcess) -> anyhow::Result<ExitCode> {
    println!("callgate is up. Call the bot from a browser on this machine:");
    println!("  http://{}/call", rig.server.addr);
    println!("(WebRTC open on loopback; Ctrl-C or SIGTERM stops everything.)");
    let sig = callgate_rig::stop_requested().await?;
    eprintln!("{}: stopping …", sig.name());
    callgate_rig::force_on_second_signal();
    let left = rig.stop(SHUTDOWN_DEADLINE).await?;
    print_receipts(&left);
    Ok(if left.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn load_config(args: &DemoArgs, url: String) -> LoadConfig {
    let per_s = if args.ramp_s > 0.0 {
        args.calls as f64 / args.ramp_s
    } else {
        1_000.0
    };
    LoadConfig {
        url,
        calls: args.calls,
        concurrency: args.calls,
        arrival: Arrival::Rate { per_second: per_s },
        utterances: args.utterances,
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        ..LoadConfig::default()
    }
}

/// Every admitted call must have a closed ledger row, and every provider
/// session must be closed.
fn print_receipts(left: &Leftovers) {
    let [stt, tts, dialog] = left.open_sessions;
    println!(
        "receipts: ledger rows still open: {}; provider sessions still open: stt {stt}, tts {tts}, dialog {dialog}",
        left.open_ledger_rows
            .as_ref()
            .map_or_else(|e| format!("unknown ({e})"), |n| n.to_string())
    );
}
