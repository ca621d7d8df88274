//! `callgate demo` and `callgate sim`: the main job on embedded defaults.
//!
//! The demo starts a throwaway Postgres from the system's PostgreSQL binaries
//! (or uses `CALLGATE_DATABASE_URL`), the three provider simulators and the
//! server on loopback ports, places scripted Twilio-protocol calls through
//! `callgate load`, prints what every caller heard, checks the receipts, and
//! stops everything it started. It exits non-zero if any call failed or went
//! silent, or if anything was left open.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use callgate_load::{Arrival, LoadConfig};
use callgate_sim::{SimConfig, Simulators};
use state_store::local::{LocalOptions, LocalPostgres};

use crate::config::Config;

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
}

#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Address for the STT simulator (Deepgram-compatible).
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub stt: SocketAddr,
    /// Address for the TTS simulator (ElevenLabs-compatible).
    #[arg(long, default_value = "127.0.0.1:8082")]
    pub tts: SocketAddr,
    /// Address for the dialog gRPC simulator.
    #[arg(long, default_value = "127.0.0.1:8083")]
    pub dialog: SocketAddr,
    /// Address for the dialog HTTP side (/stats, /admin/config, /tools/{name}).
    #[arg(long, default_value = "127.0.0.1:8084")]
    pub dialog_http: SocketAddr,
    /// Simulator settings as JSON (`{"stt":{...},"tts":{...},"dialog":{...}}`).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// `callgate sim`: runs the simulators until Ctrl-C.
pub async fn run_sims(args: SimArgs) -> anyhow::Result<ExitCode> {
    crate::init_logging("text", "info");
    let cfg: SimConfig = match &args.config {
        Some(p) => serde_json::from_str(&std::fs::read_to_string(p)?)
            .with_context(|| format!("parsing {}", p.display()))?,
        None => SimConfig::default(),
    };
    let bind = |a| tokio::net::TcpListener::bind(a);
    let listeners = [
        bind(args.stt).await?,
        bind(args.tts).await?,
        bind(args.dialog).await?,
        bind(args.dialog_http).await?,
    ];
    let sims = Simulators::start(cfg, listeners).await?;
    let a = sims.addrs;
    println!(
        "STT     ws://{}/v1/listen          (stats: http://{}/stats)",
        a.stt, a.stt
    );
    println!(
        "TTS     ws://{}/v1/text-to-speech/<voice>/multi-stream-input   (stats: http://{}/stats)",
        a.tts, a.tts
    );
    println!(
        "dialog  http://{}  (gRPC)   tools+stats: http://{}",
        a.dialog_grpc, a.dialog_http
    );
    tokio::signal::ctrl_c().await?;
    sims.shutdown().await?;
    Ok(ExitCode::SUCCESS)
}

/// Points a configuration at running simulators and a database.
pub fn config_for(sims: &Simulators, db_url: &str, instance: &str) -> Config {
    let a = sims.addrs;
    let mut cfg = Config::default();
    cfg.server.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    cfg.server.instance = instance.to_string();
    cfg.database.url = db_url.to_string();
    cfg.stt.url = format!("ws://{}/v1/listen", a.stt);
    cfg.tts.base_url = format!("ws://{}", a.tts);
    cfg.dialog.endpoint = format!("http://{}", a.dialog_grpc);
    cfg.tools.base_url = format!("http://{}/tools", a.dialog_http);
    cfg
}

/// `callgate demo`.
pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    crate::init_logging("text", &args.log);
    let (db_url, pg) = match std::env::var("CALLGATE_DATABASE_URL") {
        Ok(url) if !url.is_empty() => (url, None),
        _ => {
            eprintln!("starting a throwaway Postgres …");
            let pg = LocalPostgres::start(LocalOptions::default())
                .context("starting a local Postgres")?;
            (pg.conninfo(), Some(pg))
        }
    };
    let sims = Simulators::start_local(SimConfig::default()).await?;
    let instance = format!("demo-{}", std::process::id());
    let running = crate::server::start(config_for(&sims, &db_url, &instance), None).await?;
    let store = running.app.store.clone();
    eprintln!(
        "callgate on ws://{}/v1/media-stream; placing {} calls …",
        running.addr, args.calls
    );

    let report = callgate_load::run(load_config(&args, running.addr)).await;
    let mut out = std::io::stdout().lock();
    report.print_calls(&mut out)?;
    writeln!(out)?;
    report.print_table(&mut out)?;
    drop(out);
    report
        .write_json(&args.json)
        .with_context(|| format!("writing {}", args.json.display()))?;
    println!("per-call records: {}", args.json.display());

    let left = running.shutdown(Duration::from_secs(30)).await;
    let receipts = check_receipts(&store, &sims, &instance).await;
    sims.shutdown().await?;
    // Close the pool before the database goes away.
    drop(store);
    drop(pg);
    let s = &report.summary;
    let ok = s.failed == 0 && s.silent == 0 && s.completed == args.calls && left == 0 && receipts;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn load_config(args: &DemoArgs, addr: SocketAddr) -> LoadConfig {
    let per_s = if args.ramp_s > 0.0 {
        args.calls as f64 / args.ramp_s
    } else {
        1_000.0
    };
    LoadConfig {
        url: format!("ws://{addr}/v1/media-stream"),
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
async fn check_receipts(store: &state_store::Store, sims: &Simulators, instance: &str) -> bool {
    let open = store.open_ledger_sessions(instance).await;
    let stt = sims.stt.stats().open_sessions;
    let tts = sims.tts.stats().open_sessions;
    let dialog = sims.dialog.stats().open_sessions;
    println!(
        "receipts: ledger rows still open: {}; provider sessions still open: stt {stt}, tts {tts}, dialog {dialog}",
        open.as_ref()
            .map_or_else(|e| format!("unknown ({e})"), |n| n.to_string())
    );
    matches!(open, Ok(0)) && stt + tts + dialog == 0
}
