//! Shared helpers: a simulator on a loopback port and bounded waits.
#![allow(dead_code)] // each test binary uses a different subset

pub mod fake;

use std::net::SocketAddr;
use std::time::Duration;

use callgate_sim::tts::{TtsSim, TtsSimConfig};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tts_client::{ContextId, OutputFormat, TtsConfig, TtsEvent, TtsEvents};

/// Generous: these bound waits on real sockets, they do not measure speed.
pub const WAIT: Duration = Duration::from_secs(15);

pub struct Sim {
    pub sim: TtsSim,
    pub addr: SocketAddr,
    cancel: CancellationToken,
    task: JoinHandle<bool>,
}

pub async fn start(cfg: TtsSimConfig) -> Sim {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("bound address");
    let sim = TtsSim::new(cfg);
    let cancel = CancellationToken::new();
    let serve = sim.clone().serve(listener, cancel.clone());
    let task = tokio::spawn(async move { serve.await.is_ok() });
    Sim {
        sim,
        addr,
        cancel,
        task,
    }
}

impl Sim {
    pub fn client_config(&self, format: OutputFormat) -> TtsConfig {
        let mut cfg = TtsConfig::new(format!("ws://{}", self.addr), "voice-test");
        cfg.output_format = format;
        cfg
    }

    /// Waits until no socket and no context is open on the simulator.
    pub async fn wait_idle(&self) {
        let sim = self.sim.clone();
        let idle = async move {
            while sim.stats().open_sessions != 0 || sim.open_contexts() != 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let stats = self.sim.stats();
        tokio::time::timeout(WAIT, idle)
            .await
            .unwrap_or_else(|_| panic!("simulator never became idle: {stats:?}"));
    }

    pub async fn shutdown(self) {
        self.cancel.cancel();
        let served = tokio::time::timeout(WAIT, self.task)
            .await
            .expect("simulator stops in time")
            .expect("simulator task did not panic");
        assert!(served, "serve returned an error");
    }
}

/// The next event, failing the test if none comes within [`WAIT`].
pub async fn next(events: &mut TtsEvents) -> TtsEvent {
    tokio::time::timeout(WAIT, events.recv())
        .await
        .expect("no TTS event in time")
        .expect("event stream ended")
}

/// Audio bytes of `ctx` until its `ContextFinal`.
pub async fn audio_until_final(events: &mut TtsEvents, ctx: ContextId) -> Vec<u8> {
    let mut audio = Vec::new();
    loop {
        match next(events).await {
            TtsEvent::Audio { context, bytes } if context == ctx => audio.extend(bytes),
            TtsEvent::ContextFinal { context } if context == ctx => return audio,
            TtsEvent::Closed(reason) => panic!("closed before the final: {reason}"),
            _ => {}
        }
    }
}

/// Expected audio length of `text` at the simulator's default 15 chars/s.
pub fn expected_secs(text: &str) -> f64 {
    text.chars().count() as f64 / 15.0
}
