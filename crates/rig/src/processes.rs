//! The simulators and the server as child processes of the `callgate`
//! binary (`callgate sim …`, `callgate serve --config …`), so each one's
//! CPU time and memory are its own and the server runs exactly as an
//! operator runs it: configured by a file, signalled by `kill`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use callgate::config::Config;
use callgate_sim::{SimAddrs, SimConfig};
use tokio::time::{Instant, sleep};

use crate::child::{ChildProcess, free_ports};
use crate::database::Database;
use crate::{server_config, write_config};

/// Longest wait for the simulators to answer `/stats`.
const SIMS_READY: Duration = Duration::from_secs(30);
/// Longest wait for the server's `/readyz` (it migrates the database first).
const SERVER_READY: Duration = Duration::from_secs(60);
/// Bound on every HTTP request the rig makes to its children.
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);
/// How often `/admin/status` is polled while waiting for a condition:
/// rarely enough not to load a server being measured.
const STATUS_POLL: Duration = Duration::from_millis(250);
/// How long the server may take to drain and flush after SIGTERM on
/// [`Processes::stop`].
const SERVER_STOP_GRACE: Duration = Duration::from_secs(30);
/// How long the simulators may take to exit after SIGINT.
const SIMS_STOP_GRACE: Duration = Duration::from_secs(5);

/// How a child-process rig is set up.
#[derive(Debug, Clone)]
pub struct ProcessOptions {
    /// The `callgate` binary whose `sim` and `serve` subcommands are run.
    pub exe: PathBuf,
    /// The server's instance name; the rig's directory (children's logs,
    /// generated configuration) is `$TMPDIR/callgate-<instance>`.
    pub instance: String,
    /// What the simulators enforce (written to `sims.json`).
    pub sim: SimConfig,
}

/// A database and two running children: the simulators and the server.
pub struct Processes {
    dir: PathBuf,
    database: Database,
    /// The simulators' process (`callgate sim`).
    pub sims: ChildProcess,
    /// The server's process (`callgate serve --config <dir>/server.toml`).
    pub server: ChildProcess,
    /// The configuration the server was started with (or last rewritten).
    config: Config,
    config_path: PathBuf,
    http: reqwest::Client,
}

impl Processes {
    /// Starts the simulators on free loopback ports, writes the server's
    /// configuration (pointed at them and at `database`, then adjusted by
    /// `tweak`) to `server.toml`, starts the server on it and waits until
    /// `/readyz` answers. A failure part-way kills whatever was started.
    ///
    /// # Errors
    /// A child could not be started or did not become ready in time.
    pub async fn start(
        database: Database,
        opts: ProcessOptions,
        tweak: impl FnOnce(&mut Config),
    ) -> anyhow::Result<Processes> {
        callgate::ensure_tls_provider();
        let dir = std::env::temp_dir().join(format!("callgate-{}", opts.instance));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let http = reqwest::Client::builder().timeout(HTTP_TIMEOUT).build()?;
        let ports = free_ports(6)?;
        let at = |i: usize| SocketAddr::from(([127, 0, 0, 1], ports[i]));
        let sim_addrs = SimAddrs {
            stt: at(0),
            tts: at(1),
            dialog_grpc: at(2),
            dialog_http: at(3),
            cartesia: at(5),
        };
        let sims = start_sims(&opts.exe, &dir, &opts.sim, &sim_addrs, &http).await?;
        let mut config = server_config(&sim_addrs, database.conninfo(), &opts.instance);
        config.server.listen = at(4);
        tweak(&mut config);
        crate::aim_tts(&mut config, &sim_addrs);
        let config_path = dir.join("server.toml");
        write_config(&config_path, &config)?;
        let args = [
            "serve".to_string(),
            "--config".into(),
            config_path.display().to_string(),
        ];
        let mut server = ChildProcess::spawn("server", &opts.exe, &args, dir.join("server.log"))?;
        let ready = format!("http://{}/readyz", config.server.listen);
        server.wait_ready(&http, &ready, SERVER_READY).await?;
        Ok(Processes {
            dir,
            database,
            sims,
            server,
            config,
            config_path,
            http,
        })
    }

    /// Where the children's logs and the generated configuration are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's Postgres.
    pub fn database(&self) -> &Database {
        &self.database
    }

    /// The server's Twilio media-stream URL.
    pub fn media_url(&self) -> String {
        format!("ws://{}/v1/media-stream", self.config.server.listen)
    }

    /// The server's HTTP base URL (`/readyz`, `/metrics`, `/admin/*`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.config.server.listen)
    }

    /// The server's `/admin/status` URL.
    pub fn status_url(&self) -> String {
        format!("{}/admin/status", self.base_url())
    }

    /// The rig's HTTP client (every request bounded by a timeout).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// `GET /admin/status`.
    ///
    /// # Errors
    /// The request failed or the answer was not 2xx JSON.
    pub async fn status(&self) -> anyhow::Result<serde_json::Value> {
        let resp = self.http.get(self.status_url()).send().await?;
        Ok(resp.error_for_status()?.json().await?)
    }

    /// Polls `/admin/status` until `done` accepts it and returns that
    /// status.
    ///
    /// # Errors
    /// A child died, or `limit` passed first (the error names `what` and
    /// the last status seen).
    pub async fn wait_for_status(
        &mut self,
        limit: Duration,
        what: &str,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> anyhow::Result<serde_json::Value> {
        let deadline = Instant::now() + limit;
        loop {
            self.server.ensure_running()?;
            self.sims.ensure_running()?;
            let status = self.status().await.ok();
            if let Some(s) = status.as_ref().filter(|s| done(s)) {
                return Ok(s.clone());
            }
            if Instant::now() >= deadline {
                bail!("timed out after {limit:?} waiting for {what}; last status: {status:?}");
            }
            sleep(STATUS_POLL).await;
        }
    }

    /// Changes the configuration and rewrites `server.toml` (the server
    /// reads it again on SIGHUP or `POST /admin/reload`).
    ///
    /// # Errors
    /// The file could not be written.
    pub fn rewrite_config(&mut self, change: impl FnOnce(&mut Config)) -> anyhow::Result<()> {
        change(&mut self.config);
        write_config(&self.config_path, &self.config)
    }

    /// Stops the server (SIGTERM: drain and flush; killed after a grace
    /// period), then the simulators, then Postgres. Returns whether the
    /// server exited by itself. The directory is kept (it holds the logs).
    pub async fn stop(self) -> bool {
        let exited = self.server.stop("TERM", SERVER_STOP_GRACE).await;
        self.sims.stop("INT", SIMS_STOP_GRACE).await;
        self.database.stop().await;
        exited
    }
}

/// Starts `callgate sim` on `addrs` with `sim` and waits until each
/// simulator's `/stats` answers.
async fn start_sims(
    exe: &Path,
    dir: &Path,
    sim: &SimConfig,
    addrs: &SimAddrs,
    http: &reqwest::Client,
) -> anyhow::Result<ChildProcess> {
    let cfg_path = dir.join("sims.json");
    std::fs::write(&cfg_path, serde_json::to_vec_pretty(sim)?)
        .with_context(|| format!("writing {}", cfg_path.display()))?;
    let args: Vec<String> = [
        "sim".to_string(),
        "--stt".into(),
        addrs.stt.to_string(),
        "--tts".into(),
        addrs.tts.to_string(),
        "--dialog".into(),
        addrs.dialog_grpc.to_string(),
        "--dialog-http".into(),
        addrs.dialog_http.to_string(),
        "--cartesia".into(),
        addrs.cartesia.to_string(),
        "--config".into(),
        cfg_path.display().to_string(),
    ]
    .into();
    let mut sims = ChildProcess::spawn("simulators", exe, &args, dir.join("sims.log"))?;
    for addr in [addrs.stt, addrs.tts, addrs.dialog_http, addrs.cartesia] {
        sims.wait_ready(http, &format!("http://{addr}/stats"), SIMS_READY)
            .await?;
    }
    Ok(sims)
}
