//! `callgate-sim` — local stand-ins for the paid providers callgate talks to.
//!
//! What it is: servers that speak the providers' real wire protocols,
//! so that pointing callgate at the real service later is a URL and key
//! change:
//!
//! - [`stt`]: a Deepgram-compatible live transcription WebSocket
//!   (`GET /v1/listen`), with its own voice-activity detection (the `earshot` neural
//!   detector, deliberately not the server's `media::vad`) on the decoded
//!   audio and words taken from a configurable [`script`]; a segment too
//!   short to be words (a cough) comes back as an empty final.
//! - [`tts`]: an ElevenLabs-compatible `multi-stream-input` WebSocket whose
//!   audio length is proportional to the text.
//! - [`cartesia`]: a Cartesia-compatible TTS WebSocket (`GET /tts/websocket`:
//!   contexts, continuations, cancel, `chunk`/`timestamps`/`done`/`error`),
//!   audio proportional to the text in each context's requested format.
//! - [`dialog`]: a gRPC server for `proto/dialog.proto` running a scripted
//!   slot-filling table-booking bot, plus the HTTP [`tools`] backend its tool
//!   calls are executed against.
//!
//! Each enforces a configurable concurrency cap the way the real provider
//! does (HTTP 429 on the upgrade, gRPC `RESOURCE_EXHAUSTED`), has latency and
//! fault knobs that can be changed at run time (`GET`/`PUT /admin/config`),
//! and counts its open sessions (`GET /stats`, see [`stats`]) so tests can
//! prove callgate closed everything it opened — and, in the STT and dialog
//! simulators, what the call did with them (noise segments heard,
//! interrupts received).
//!
//! What it never does: share code with callgate's server paths (it compiles
//! `dialog.proto` itself), or run inside the server — callgate never depends
//! on it at run time.
//!
//! How to drive it: bind listeners (port 0 in tests) and call
//! [`Simulators::start`], or each module's `serve` on its own.

pub mod cartesia;
pub mod dialog;
pub mod script;
pub mod stats;
pub mod stt;
pub mod tools;
pub mod tts;
mod ws_io;

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Configuration of all simulators.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SimConfig {
    pub stt: stt::SttSimConfig,
    pub tts: tts::TtsSimConfig,
    pub cartesia: cartesia::CartesiaSimConfig,
    pub dialog: dialog::DialogSimConfig,
}

/// Where the running simulators listen.
#[derive(Debug, Clone, Copy)]
pub struct SimAddrs {
    /// STT WebSocket and its `/stats`, `/admin/config`.
    pub stt: SocketAddr,
    /// TTS WebSocket and its `/stats`, `/admin/config`.
    pub tts: SocketAddr,
    /// Dialog gRPC (HTTP/2).
    pub dialog_grpc: SocketAddr,
    /// Dialog `/stats`, `/admin/config` and the `/tools/{name}` backend.
    pub dialog_http: SocketAddr,
    /// Cartesia TTS WebSocket (`/tts/websocket`) and its `/stats`,
    /// `/admin/config`.
    pub cartesia: SocketAddr,
}

/// Running simulators. Dropping this does not stop them; call [`Simulators::shutdown`].
pub struct Simulators {
    pub addrs: SimAddrs,
    pub stt: stt::SttSim,
    pub tts: tts::TtsSim,
    pub dialog: dialog::DialogSim,
    pub cartesia: cartesia::CartesiaSim,
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<anyhow::Result<()>>>,
}

impl Simulators {
    /// Starts all simulators on loopback ports chosen by the OS.
    pub async fn start_local(cfg: SimConfig) -> anyhow::Result<Self> {
        let bind = || TcpListener::bind("127.0.0.1:0");
        Self::start(
            cfg,
            [
                bind().await?,
                bind().await?,
                bind().await?,
                bind().await?,
                bind().await?,
            ],
        )
        .await
    }

    /// Starts all simulators on the given listeners: STT, TTS (ElevenLabs),
    /// dialog gRPC, dialog HTTP, TTS (Cartesia).
    pub async fn start(cfg: SimConfig, listeners: [TcpListener; 5]) -> anyhow::Result<Self> {
        let [stt_l, tts_l, dg_l, dh_l, cartesia_l] = listeners;
        let addrs = SimAddrs {
            stt: stt_l.local_addr()?,
            tts: tts_l.local_addr()?,
            dialog_grpc: dg_l.local_addr()?,
            dialog_http: dh_l.local_addr()?,
            cartesia: cartesia_l.local_addr()?,
        };
        let cancel = CancellationToken::new();
        let stt = stt::SttSim::new(cfg.stt);
        let tts = tts::TtsSim::new(cfg.tts);
        let dialog = dialog::DialogSim::new(cfg.dialog);
        let cartesia = cartesia::CartesiaSim::new(cfg.cartesia);
        let tasks = vec![
            tokio::spawn(stt.clone().serve(stt_l, cancel.child_token())),
            tokio::spawn(tts.clone().serve(tts_l, cancel.child_token())),
            tokio::spawn(dialog.clone().serve_grpc(dg_l, cancel.child_token())),
            tokio::spawn(dialog.clone().serve_http(dh_l, cancel.child_token())),
            tokio::spawn(cartesia.clone().serve(cartesia_l, cancel.child_token())),
        ];
        Ok(Simulators {
            addrs,
            stt,
            tts,
            dialog,
            cartesia,
            cancel,
            tasks,
        })
    }

    /// Stops every simulator and waits for their listeners to close.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.cancel.cancel();
        for t in self.tasks {
            t.await??;
        }
        Ok(())
    }
}

/// A raw WebSocket client for the simulators' socket-level tests.
#[cfg(test)]
mod test_ws;
