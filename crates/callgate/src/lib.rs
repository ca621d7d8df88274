//! `callgate` — the voice AI call server.
//!
//! What it is: the server as a library (the `callgate` binary, package
//! `callgate-cli`, runs it as `callgate serve`). A carrier (a Twilio
//! media-stream WebSocket) delivers a call to [`ingress`]; the admission
//! gate admits it or sends it to the [`overflow`] path; an admitted call opens its four
//! connections in parallel, each with a deadline ([`call::setup`]), and runs
//! as one [`call::CallActor`] that never awaits the database or a provider.
//! Every call — served, refused or failed — leaves a receipt in Postgres.
//!
//! What it never does: business logic that belongs in a library crate
//! (admission decisions live in `admission`, SQL in `state-store`, provider
//! protocols in `stt-client`/`tts-client`/`dialog-grpc`), install a global
//! logger (the binary does), or depend on the simulators or the load
//! generator — `callgate sim`, `callgate demo` and `callgate-bench` live in
//! the binary and start them next to the server through `callgate-rig`.
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

pub mod agent;
pub mod app;
pub mod audit_http;
pub mod call;
pub mod carrier;
pub mod config;
pub mod drain;
pub mod end;
pub mod hold;
pub mod http;
pub mod ingress;
pub mod lag;
pub mod leg;
pub mod metrics;
pub mod overflow;
pub mod ownership;
pub mod prompts;
pub mod reconcile;
pub mod refusals;
pub mod retention;
pub mod server;
pub mod sessions;
pub mod text;

/// Installs the process's TLS crypto provider (ring) unless one is already
/// installed. Every client that may speak TLS — provider WebSockets over
/// `wss://`, tools and webhooks over `https://` — needs one.
pub fn ensure_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
