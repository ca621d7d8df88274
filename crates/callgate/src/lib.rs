//! `callgate` — the voice AI call server.
//!
//! What it is: the server binary's library. A carrier (a Twilio media-stream
//! WebSocket) delivers a call to [`ingress`]; the admission gate admits it or
//! sends it to the [`overflow`] path; an admitted call opens its four
//! connections in parallel, each with a deadline ([`call::setup`]), and runs
//! as one [`call::CallActor`] that never awaits the database or a provider.
//! Every call — served, refused or failed — leaves a receipt in Postgres.
//!
//! What it never does: business logic that belongs in a library crate
//! (admission decisions live in `admission`, SQL in `state-store`, provider
//! protocols in `stt-client`/`tts-client`/`dialog-grpc`), and it never
//! depends on the simulators at run time — `callgate sim` and `callgate demo`
//! merely start them next to the server.
//!
//! How to drive it:
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let cfg = callgate::config::Config::load(Some("config/callgate.toml".as_ref()))?;
//! let running = callgate::server::start(cfg, None).await?;
//! println!("Twilio media streams: ws://{}/v1/media-stream", running.addr);
//! running.shutdown(std::time::Duration::from_secs(30)).await;
//! # Ok(()) }
//! ```

pub mod app;
pub mod bench;
pub mod call;
pub mod config;
pub mod demo;
pub mod drain;
pub mod end;
pub mod hold;
pub mod http;
pub mod ingress;
pub mod leg;
pub mod metrics;
pub mod overflow;
pub mod prompts;
pub mod refusals;
pub mod server;
pub mod twilio;

/// Installs the process's TLS crypto provider (ring) unless one is already
/// installed. Every client that may speak TLS — provider WebSockets over
/// `wss://`, tools and webhooks over `https://` — needs one.
pub fn ensure_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Installs the tracing subscriber (text or JSON) once.
pub fn init_logging(format: &str, filter: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
