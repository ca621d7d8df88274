//! `callgate-rig` — the one place that wires a throwaway Postgres, the
//! provider simulators and the callgate server together on loopback.
//!
//! What it is: the set-up the end-to-end tests, `callgate demo`,
//! `callgate-bench` and the signal test share, written once.
//!
//! - [`Database`]: a throwaway `state_store::LocalPostgres` (started as the
//!   `postgres` user when run as root), or the database
//!   `CALLGATE_DATABASE_URL` names; [`Database::freeze`] stops a throwaway
//!   cluster whole with SIGSTOP until its [`Frozen`] guard is dropped.
//! - [`server_config`]: the server's [`Config`] pointed at the simulators and
//!   a database; [`write_config`] writes one as the TOML an operator edits.
//! - [`InProcess`]: the simulators and the server in this process, on
//!   OS-chosen ports (the e2e harness, `callgate demo`).
//! - [`Processes`]: the simulators and the server as child processes of the
//!   `callgate` binary (`callgate sim`, `callgate serve --config`), each with
//!   its own log, CPU time and memory (`callgate-bench`, the SIGHUP/SIGTERM
//!   test), and [`ChildProcess`], one such child.
//! - [`measured`]: [`Processes`] with a run's ceilings, measured — CPU
//!   ticks, memory and `/admin/status` sampled, the server's rows and
//!   receipts, and the squeeze that pins the server to one core under a CPU
//!   quota (`callgate-bench`, `callgate drill --find-knee`).
//! - [`stop_requested`]: how every command that starts children is
//!   stopped (SIGINT, SIGTERM or SIGHUP; a second one forces the exit).
//! - [`ports`]: loopback ports for child processes that no other test
//!   process is handed at the same time.
//! - [`haproxy`]: the production `deploy/haproxy/haproxy.cfg` run unchanged
//!   in front of two instances, with its runtime API read back; [`process`]:
//!   the process groups, scratch directories and bounded commands it (and
//!   the other peers) run on; `peers` (feature `peers`, off in the
//!   product): sipp, Kamailio and headless Chromium, the same way.
//!
//! What it never does: mock anything — the Postgres is a real cluster, every
//! peer listens on a real socket, the server is the real one reading an
//! ordinary configuration — or leave anything running: children are killed
//! when dropped, and `stop` stops the server (drained), the simulators and
//! then Postgres, in that order.
//!
//! How to drive it:
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use callgate_rig::{Database, InProcess, InProcessOptions};
//! use state_store::LocalOptions;
//!
//! let db = Database::local(LocalOptions::default()).await?;
//! let rig = InProcess::start(db, InProcessOptions::new("demo-1"), |cfg| {
//!     cfg.admission.queue_max = 10;
//! })
//! .await?;
//! println!("Twilio media streams: {}", rig.media_url());
//! let left = rig.stop(std::time::Duration::from_secs(10)).await?;
//! assert!(left.is_clean());
//! # Ok(()) }
//! ```

mod child;
mod database;
pub mod haproxy;
mod in_process;
pub mod measured;
#[cfg(feature = "peers")]
pub mod peers;
pub mod ports;
pub mod process;
mod processes;
mod stop;

use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context;
use callgate::config::Config;
use callgate_sim::SimAddrs;

pub use child::ChildProcess;
pub use database::Database;
pub use in_process::{InProcess, InProcessOptions, Leftovers};
pub use processes::{ProcessOptions, Processes};
pub use state_store::Frozen;
pub use stop::{StopSignal, force_on_second_signal, stop_requested};

/// The server's configuration on embedded defaults, pointed at simulators
/// listening on `sims`, at the database `conninfo`, with its ledger owner
/// named `instance`, listening on a loopback port the OS chooses.
pub fn server_config(sims: &SimAddrs, conninfo: &str, instance: &str) -> Config {
    let mut cfg = Config::default();
    cfg.server.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    cfg.server.instance = instance.to_string();
    cfg.database.url = conninfo.to_string();
    cfg.stt.url = format!("ws://{}/v1/listen", sims.stt);
    cfg.tts.base_url = format!("ws://{}", sims.tts);
    cfg.dialog.endpoint = format!("http://{}", sims.dialog_grpc);
    cfg.tools.base_url = format!("http://{}/tools", sims.dialog_http);
    cfg
}

/// After a tweak chose `tts.provider = "cartesia"` and left the TTS URL on
/// the ElevenLabs simulator, points it at the Cartesia simulator instead,
/// and swaps the default ElevenLabs voice for a voice of the simulated
/// Cartesia account: choosing the vendor is all a test or the demo has
/// to say.
pub fn aim_tts(cfg: &mut Config, sims: &SimAddrs) {
    let elevenlabs = format!("ws://{}", sims.tts);
    if cfg.tts.provider == tts_client::Provider::Cartesia && cfg.tts.base_url == elevenlabs {
        cfg.tts.base_url = format!("ws://{}", sims.cartesia);
        if cfg.tts.voice_id == callgate::config::TtsSection::default().voice_id {
            cfg.tts.voice_id = callgate_sim::cartesia::LIBRARY_VOICES[1].to_owned();
        }
    }
}

/// Writes `cfg` to `path` as TOML: every key, as an operator would edit it
/// and as `callgate serve --config` and `/admin/reload` read it.
///
/// # Errors
/// The configuration cannot be serialised or the file cannot be written.
pub fn write_config(path: &Path, cfg: &Config) -> anyhow::Result<()> {
    let text = toml::to_string(cfg).context("serialising the configuration")?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

    use super::*;

    #[test]
    fn a_written_configuration_reads_back_as_written() {
        let sims = SimAddrs {
            stt: "127.0.0.1:1001".parse().unwrap(),
            tts: "127.0.0.1:1002".parse().unwrap(),
            dialog_grpc: "127.0.0.1:1003".parse().unwrap(),
            dialog_http: "127.0.0.1:1004".parse().unwrap(),
            cartesia: "127.0.0.1:1005".parse().unwrap(),
        };
        // Quotes and backslashes survive: a socket directory may hold either.
        let url = r#"host=/tmp/a "b"\c port=5432 user=postgres"#;
        let mut cfg = server_config(&sims, url, "rig-1");
        cfg.server.listen = "127.0.0.1:1005".parse().unwrap();
        let dir = std::env::temp_dir().join(format!("callgate-rig-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("callgate.toml");
        write_config(&path, &cfg).unwrap();
        let back: Config = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        back.validate().unwrap();
        assert_eq!(back.database.url, url);
        assert_eq!(back.server.instance, "rig-1");
        assert_eq!(back.server.listen, cfg.server.listen);
        assert_eq!(back.stt.url, "ws://127.0.0.1:1001/v1/listen");
        assert_eq!(back.tts.base_url, "ws://127.0.0.1:1002");
        assert_eq!(back.dialog.endpoint, "http://127.0.0.1:1003");
        assert_eq!(back.tools.base_url, "http://127.0.0.1:1004/tools");
    }
}
