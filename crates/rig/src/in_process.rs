//! The simulators and the server in this process, on loopback ports the OS
//! chooses: what the end-to-end tests and `callgate demo` run against.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use callgate::config::Config;
use callgate::server::Running;
use callgate_sim::{SimConfig, Simulators};
use state_store::StoreError;

use crate::database::Database;
use crate::{server_config, write_config};

/// How an in-process rig is set up.
#[derive(Debug, Clone)]
pub struct InProcessOptions {
    /// The server's instance name (the owner of its ledger rows).
    pub instance: String,
    /// What the simulators do (caps, latencies, faults, script).
    pub sim: SimConfig,
    /// When set, the configuration is written there and the server reads it
    /// from there again on `/admin/reload`.
    pub config_file: Option<PathBuf>,
}

impl InProcessOptions {
    /// Default simulators, no configuration file.
    pub fn new(instance: impl Into<String>) -> Self {
        InProcessOptions {
            instance: instance.into(),
            sim: SimConfig::default(),
            config_file: None,
        }
    }
}

/// A database, the simulators and the server, all running. The fields are
/// public so a harness can hold them itself and assemble the rig again to
/// [`stop`](InProcess::stop) it.
pub struct InProcess {
    /// The server (its address, and its shared state for assertions).
    pub server: Running,
    /// The simulators (their stats, sessions and run-time knobs).
    pub sims: Simulators,
    /// The server's Postgres.
    pub database: Database,
    /// The server's instance name.
    pub instance: String,
}

/// What was still open when an in-process rig stopped.
#[derive(Debug)]
pub struct Leftovers {
    /// Calls the server had to end at its shutdown deadline.
    pub calls: u64,
    /// Ledger rows of the instance whose cleanup was never recorded.
    pub open_ledger_rows: Result<i64, StoreError>,
    /// Sessions each simulator still counted open after the server stopped:
    /// STT, TTS, dialog.
    pub open_sessions: [u64; 3],
}

impl Leftovers {
    /// Nothing left: every call ended by itself, every admitted call has a
    /// closed receipt, and the server closed every provider session.
    pub fn is_clean(&self) -> bool {
        self.calls == 0 && matches!(self.open_ledger_rows, Ok(0)) && self.open_sessions == [0; 3]
    }
}

impl InProcess {
    /// Starts the simulators, then the server pointed at them and at
    /// `database`; `tweak` adjusts the server's configuration last. A
    /// failure stops whatever had started.
    ///
    /// # Errors
    /// The simulators could not bind, the configuration file could not be
    /// written, or the server did not start (bad configuration, Postgres).
    pub async fn start(
        database: Database,
        opts: InProcessOptions,
        tweak: impl FnOnce(&mut Config),
    ) -> anyhow::Result<InProcess> {
        let sims = Simulators::start_local(opts.sim)
            .await
            .context("starting the simulators")?;
        let mut cfg = server_config(&sims.addrs, database.conninfo(), &opts.instance);
        tweak(&mut cfg);
        crate::aim_tts(&mut cfg, &sims.addrs);
        let started = async {
            if let Some(path) = &opts.config_file {
                write_config(path, &cfg)?;
            }
            callgate::server::start(cfg, opts.config_file)
                .await
                .context("starting the server")
        };
        match started.await {
            Ok(server) => Ok(InProcess {
                server,
                sims,
                database,
                instance: opts.instance,
            }),
            Err(e) => {
                let _ = sims.shutdown().await;
                database.stop().await;
                Err(e)
            }
        }
    }

    /// The Twilio media-stream URL.
    pub fn media_url(&self) -> String {
        format!("ws://{}/v1/media-stream", self.server.addr)
    }

    /// Stops the server (draining for at most `deadline`, then flushing its
    /// writes), reads what was left open, stops the simulators, and stops
    /// Postgres last (after the server's pool is closed).
    ///
    /// # Errors
    /// A simulator task failed; everything is stopped regardless.
    pub async fn stop(self, deadline: Duration) -> anyhow::Result<Leftovers> {
        let InProcess {
            server,
            sims,
            database,
            instance,
        } = self;
        let store = server.app.call.store.clone();
        let calls = server.shutdown(deadline).await.calls_left;
        let open_ledger_rows = store.open_ledger_sessions(&instance).await;
        let open_sessions = [
            sims.stt.stats().open_sessions,
            sims.tts.stats().open_sessions,
            sims.dialog.stats().open_sessions,
        ];
        let sims_stopped = sims.shutdown().await.context("stopping the simulators");
        // Close the pool before the database goes away.
        drop(store);
        database.stop().await;
        sims_stopped?;
        Ok(Leftovers {
            calls,
            open_ledger_rows,
            open_sessions,
        })
    }
}
