//! `callgate sim`: the provider simulators on fixed local ports, until
//! Ctrl-C (or SIGINT from `callgate-bench`, which runs them as a child).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use callgate_sim::{SimConfig, Simulators};

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
    /// Address for the Cartesia TTS simulator.
    #[arg(long, default_value = "127.0.0.1:8085")]
    pub cartesia: SocketAddr,
    /// Simulator settings as JSON
    /// (`{"stt":{...},"tts":{...},"cartesia":{...},"dialog":{...}}`).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// `callgate sim`: runs the simulators until Ctrl-C.
pub async fn run(args: SimArgs) -> anyhow::Result<ExitCode> {
    crate::logging::init("text", "info");
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
        bind(args.cartesia).await?,
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
    println!(
        "Cartesia ws://{}/tts/websocket  (stats: http://{}/stats)",
        a.cartesia, a.cartesia
    );
    // The simulators run in this process and start no children; they stop
    // the way every command that does is stopped.
    let sig = callgate_rig::stop_requested().await?;
    eprintln!("{}: stopping the simulators", sig.name());
    callgate_rig::force_on_second_signal();
    sims.shutdown().await?;
    Ok(ExitCode::SUCCESS)
}
