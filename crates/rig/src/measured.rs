//! The measured rig: [`Processes`] (Postgres, and the simulators and the
//! server as child processes of the `callgate` binary) with a run's
//! ceilings written into both, plus what a measurement asks of it: idle?,
//! CPU ticks ([`procfs`]), the server's Postgres rows ([`db`]) and receipts
//! ([`receipts`]), a [`sampler`] of its memory and `/admin/status`, and the
//! [`squeeze`] that pins it to one core under a CPU quota or beside
//! burners. [`Rig::start_with_sip`] also turns on the server's SIP/RTP
//! ingress. `callgate-bench` and `callgate drill --find-knee` run on it.
//!
//! What it never does: change the server's behaviour beyond its
//! configuration file, or leave a child, a cgroup or a burner behind.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use callgate::config::{Config, MaxCalls, SipOverflow};
use callgate_sim::SimConfig;
use state_store::{LocalOptions, Store, StoreConfig};

pub mod db;
pub mod priority;
pub mod procfs;
pub mod receipts;
mod resources;
pub mod sampler;
pub mod squeeze;

use crate::{ChildProcess, Database, ProcessOptions, Processes};
use db::ServerCall;
use receipts::Receipt;
pub use resources::Resources;
use sampler::Sampler;

/// Postgres connections for the throwaway cluster: the server's pool, the
/// bench's own connection and psql-style inspection, with room to spare.
const PG_MAX_CONNECTIONS: u32 = 400;
/// The server's drain deadline at shutdown (written into its config).
const SERVER_DRAIN_S: u64 = 10;
/// Pooled connections for the bench's own queries (one at a time).
const BENCH_POOL_SIZE: usize = 2;
/// Bound on connecting to Postgres and on each of the bench's queries.
const DB_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an idle server may take to drain and exit on a restart.
const SERVER_RESTART_GRACE: Duration = Duration::from_secs(30);
/// How long a restarted server may take to answer `/readyz`.
const SERVER_RESTART_READY: Duration = Duration::from_secs(60);

/// The ceilings and admission settings: the simulators enforce the provider
/// caps and the server is configured with the same numbers.
#[derive(Debug, Clone, clap::Args)]
pub struct Caps {
    /// STT concurrent streams (simulator cap = server `stt.max_sessions`).
    #[arg(long, default_value_t = 225)]
    pub stt_cap: u32,
    /// TTS concurrent sockets (simulator cap = server `tts.max_sessions`).
    #[arg(long, default_value_t = 240)]
    pub tts_cap: u32,
    /// Dialog concurrent streams (simulator cap = server `dialog.max_streams`).
    #[arg(long, default_value_t = 250)]
    pub dialog_cap: u32,
    /// The server's `database.max_calls` ceiling.
    #[arg(long, default_value_t = 260)]
    pub db_max_calls: u32,
    /// `admission.headroom`: capacity = smallest ceiling − headroom.
    #[arg(long, default_value_t = 5)]
    pub headroom: u32,
    /// `admission.queue_max`.
    #[arg(long, default_value_t = 100)]
    pub queue_max: usize,
    /// `admission.queue_timeout_ms`.
    #[arg(long, default_value_t = 4_000)]
    pub queue_timeout_ms: u64,
    /// Realism fault, off by default: the fraction (0–1) of utterances
    /// whose STT final comes back empty after interim words, as Deepgram's
    /// do on a bad day (the simulator's `stt.empty_finals`).
    #[arg(long, default_value_t = 0.0)]
    pub stt_empty_finals: f64,
    /// `admission.max_lag_ms`: the instance ceiling's lateness bound (0 off;
    /// the server's default is 60).
    #[arg(long, default_value_t = 60)]
    pub instance_max_lag_ms: u64,
}

impl Caps {
    /// The capacity the server should derive from these ceilings.
    pub fn expected_capacity(&self) -> u32 {
        [
            self.stt_cap,
            self.tts_cap,
            self.dialog_cap,
            self.db_max_calls,
        ]
        .into_iter()
        .min()
        .unwrap_or(0)
        .saturating_sub(self.headroom)
    }

    /// # Errors
    /// The ceilings leave no capacity.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.expected_capacity() == 0 {
            bail!("the ceilings minus headroom leave no capacity");
        }
        if !(0.0..=1.0).contains(&self.stt_empty_finals) {
            bail!("--stt-empty-finals is a fraction between 0 and 1");
        }
        Ok(())
    }

    /// The simulators' configuration: defaults plus the caps.
    pub fn sim_config(&self) -> SimConfig {
        let mut cfg = SimConfig::default();
        cfg.stt.max_sessions = u64::from(self.stt_cap);
        cfg.tts.max_sockets = u64::from(self.tts_cap);
        cfg.dialog.max_streams = u64::from(self.dialog_cap);
        cfg.stt.empty_finals = self.stt_empty_finals;
        cfg
    }

    /// Writes the ceilings and admission settings into the server's
    /// configuration (and the bench's drain deadline and log filter).
    pub fn apply(&self, cfg: &mut Config) {
        cfg.drain.deadline_s = SERVER_DRAIN_S;
        cfg.admission.max_concurrent_calls = MaxCalls::Auto(callgate::config::AutoTag::Auto);
        cfg.admission.headroom = self.headroom;
        cfg.admission.queue_max = self.queue_max;
        cfg.admission.queue_timeout_ms = self.queue_timeout_ms;
        cfg.database.max_calls = Some(self.db_max_calls);
        cfg.stt.max_sessions = self.stt_cap;
        cfg.tts.max_sessions = self.tts_cap;
        cfg.dialog.max_streams = self.dialog_cap;
        cfg.admission.max_lag_ms = self.instance_max_lag_ms;
        cfg.log.filter = "warn".to_string();
    }
}

/// The server's SIP/RTP ingress as a bench turns it on: UDP and TCP on a
/// loopback port found free before the server child starts (the child
/// binds it, so it must be fixed and known up front), RTP from a range of
/// its own, and `503` for a refused call (which sipp counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SipListener {
    addr: SocketAddr,
    rtp_port_min: u16,
    rtp_port_max: u16,
}

impl SipListener {
    /// A loopback port free for both UDP and TCP (bound as port 0, then
    /// released for the child to bind), and `pairs` RTP port pairs from
    /// `rtp_port_min` (the server skips a port another process holds).
    ///
    /// # Errors
    /// No such port was found, or the range does not fit below 65536.
    fn on_free_port(rtp_port_min: u16, pairs: u16) -> anyhow::Result<SipListener> {
        let rtp_port_max = u32::from(rtp_port_min) + 2 * u32::from(pairs.max(1)) - 1;
        let rtp_port_max = u16::try_from(rtp_port_max)
            .ok()
            .filter(|_| rtp_port_min >= 1024)
            .context("the SIP bench's RTP range must lie within 1024..=65535")?;
        Ok(SipListener {
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, free_udp_and_tcp_port()?)),
            rtp_port_min,
            rtp_port_max,
        })
    }

    /// Writes the ingress into the server's configuration.
    fn apply(&self, cfg: &mut Config) {
        cfg.sip.enabled = true;
        cfg.sip.listen = self.addr;
        cfg.sip.rtp_port_min = self.rtp_port_min;
        cfg.sip.rtp_port_max = self.rtp_port_max;
        cfg.sip.overflow = SipOverflow::Reject;
    }
}

/// A loopback port for both UDP and TCP ([`crate::ports`]).
fn free_udp_and_tcp_port() -> anyhow::Result<u16> {
    crate::ports::claim()
}

/// The `callgate` binary whose `serve` and `sim` the rig runs: this
/// process when it is `callgate`, else `CALLGATE_BIN`, else the `callgate`
/// beside this executable (`target/release/callgate-bench` runs
/// `target/release/callgate`).
///
/// # Errors
/// None of them is there.
pub fn callgate_exe() -> anyhow::Result<std::path::PathBuf> {
    let me = std::env::current_exe().context("locating this executable")?;
    if me.file_stem().is_some_and(|s| s == "callgate") {
        return Ok(me);
    }
    if let Some(p) = std::env::var_os("CALLGATE_BIN") {
        return Ok(p.into());
    }
    let beside = me.with_file_name("callgate");
    if beside.is_file() {
        return Ok(beside);
    }
    bail!(
        "no callgate binary beside {} (build it: cargo build --release -p callgate-cli, or set CALLGATE_BIN)",
        me.display()
    )
}

/// CPU ticks of the three processes at one instant.
#[derive(Debug, Clone, Copy)]
pub struct Ticks {
    pub server: u64,
    pub sims: u64,
    pub load: u64,
    /// The throwaway Postgres (postmaster and backends); 0 for an external one.
    pub postgres: u64,
    /// Every process on the machine (other engineers' builds included).
    pub machine: u64,
}

/// Everything the bench started.
pub struct Rig {
    procs: Processes,
    /// The bench's own read-only use of the server's database.
    store: Store,
    instance: String,
    pub capacity: u64,
    pub decided_by: String,
    pub clock_ticks: u64,
    /// The generator's nice value (see `priority`), once lowered.
    pub generator_nice: i64,
    /// The configuration the server was started with, as JSON (what a
    /// bench's verdict needs to know of it, e.g. barge-in settings).
    pub server_config: serde_json::Value,
    /// The SIP ingress, when the rig was started with one.
    sip: Option<SipListener>,
    /// The WebRTC media socket's address, when started with WebRTC.
    webrtc: Option<SocketAddr>,
}

/// Runs a bench on the rig `start` brings up: `body` with the rig, then
/// the rig stopped (children drained and killed) whatever `body` did, and
/// where the children's logs are printed under `logs`. Ctrl-C during
/// either stops the bench the same way.
///
/// # Errors
/// The rig could not be started, `body` failed, or Ctrl-C.
pub async fn with_rig(
    start: impl Future<Output = anyhow::Result<Rig>>,
    logs: &str,
    body: impl AsyncFnOnce(&mut Rig) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let stop = crate::stop_requested();
    tokio::pin!(stop);
    let mut rig = tokio::select! {
        rig = start => rig?,
        _ = &mut stop => {
            crate::force_on_second_signal();
            bail!("interrupted while starting")
        }
    };
    let outcome = tokio::select! {
        r = body(&mut rig) => r,
        _ = &mut stop => {
            crate::force_on_second_signal();
            Err(anyhow::anyhow!("interrupted"))
        }
    };
    let dir = rig.log_dir().to_path_buf();
    rig.stop().await;
    eprintln!("{logs}: {}", dir.display());
    outcome
}

/// Why the load tool's callers did not keep up — their media clock lagged
/// past `max_lag_ms` or skipped frames — or `None` when they did (the
/// rule every bench applies to its generator).
pub fn generator_lag(s: &callgate_load::Summary, max_lag_ms: u64) -> Option<String> {
    (s.media_frames_skipped > 0 || s.max_send_lag_ms > max_lag_ms).then(|| {
        format!(
            "media clock {} ms late, {} frames skipped",
            s.max_send_lag_ms, s.media_frames_skipped
        )
    })
}

impl Rig {
    /// Starts Postgres (unless `CALLGATE_DATABASE_URL` is set), the
    /// simulators and the server, and waits until they are ready. A failure
    /// part-way kills whatever was started (the handles kill on drop).
    ///
    /// # Errors
    /// Any piece could not be started or did not become ready.
    pub async fn start(caps: &Caps) -> anyhow::Result<Rig> {
        Self::launch(caps, None, None).await
    }

    /// [`Rig::start`], with the server's SIP ingress on as well: a free
    /// loopback port ([`Rig::sip_addr`]) and `rtp_pairs` RTP port pairs
    /// from `rtp_port_min` ([`SipListener::on_free_port`]).
    ///
    /// # Errors
    /// As [`Rig::start`], or no SIP port or RTP range could be had.
    pub async fn start_with_sip(
        caps: &Caps,
        rtp_port_min: u16,
        rtp_pairs: u16,
    ) -> anyhow::Result<Rig> {
        let sip = SipListener::on_free_port(rtp_port_min, rtp_pairs)?;
        Self::launch(caps, Some(sip), None).await
    }

    /// [`Rig::start`], with the server's WebRTC ingress on as well, open
    /// (no partner key) on a free loopback UDP port ([`Rig::webrtc_url`]).
    ///
    /// # Errors
    /// As [`Rig::start`], or no port could be had.
    pub async fn start_with_webrtc(caps: &Caps) -> anyhow::Result<Rig> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_udp_and_tcp_port()?));
        Self::launch(caps, None, Some(addr)).await
    }

    async fn launch(
        caps: &Caps,
        sip: Option<SipListener>,
        webrtc: Option<SocketAddr>,
    ) -> anyhow::Result<Rig> {
        let instance = format!("bench-{}", std::process::id());
        let database = Database::from_env_or_local(LocalOptions {
            max_connections: PG_MAX_CONNECTIONS,
            ..LocalOptions::default()
        })
        .await?;
        let opts = ProcessOptions {
            exe: callgate_exe()?,
            instance: instance.clone(),
            sim: caps.sim_config(),
        };
        let mut server_config = serde_json::Value::Null;
        let procs = Processes::start(database, opts, |cfg| {
            caps.apply(cfg);
            if let Some(sip) = &sip {
                sip.apply(cfg);
            }
            if let Some(addr) = webrtc {
                cfg.webrtc.enabled = true;
                cfg.webrtc.listen = addr;
                cfg.webrtc.open = true;
            }
            server_config = serde_json::to_value(&*cfg).unwrap_or_default();
        })
        .await?;
        let store_cfg = StoreConfig {
            pool_size: BENCH_POOL_SIZE,
            connect_timeout: DB_TIMEOUT,
            statement_timeout: DB_TIMEOUT,
            ..StoreConfig::new(procs.database().conninfo(), &instance)
        };
        let store = Store::connect(store_cfg)
            .await
            .context("connecting to Postgres")?;
        let mut rig = Rig {
            procs,
            store,
            instance,
            capacity: 0,
            decided_by: String::new(),
            clock_ticks: procfs::clock_ticks_per_second(),
            generator_nice: 0,
            server_config,
            sip,
            webrtc,
        };
        rig.read_capacity(caps).await?;
        Ok(rig)
    }

    async fn read_capacity(&mut self, caps: &Caps) -> anyhow::Result<()> {
        let status = self.procs.status().await?;
        self.capacity = status["admission"]["capacity"].as_u64().unwrap_or(0);
        self.decided_by = status["admission"]["decided_by"]
            .as_str()
            .unwrap_or("?")
            .to_string();
        if self.capacity != u64::from(caps.expected_capacity()) {
            tracing::warn!(
                capacity = self.capacity,
                expected = caps.expected_capacity(),
                "the server derived a different capacity than the ceilings imply"
            );
        }
        Ok(())
    }

    /// Refuses a bench whose largest run would not fit under the capacity
    /// the server derived (calls would queue or be refused).
    ///
    /// # Errors
    /// The capacity is not above `largest`.
    pub fn ensure_capacity_above(&self, largest: usize) -> anyhow::Result<()> {
        if self.capacity <= largest as u64 {
            bail!(
                "the server derived capacity {} (decided by {}): not above the largest run",
                self.capacity,
                self.decided_by
            );
        }
        Ok(())
    }

    /// Where the children's logs and generated configuration are.
    pub fn log_dir(&self) -> &Path {
        self.procs.dir()
    }

    /// The server's Twilio media-stream URL.
    pub fn media_url(&self) -> String {
        self.procs.media_url()
    }

    /// `POST` here to place a WebRTC call, when started with WebRTC.
    pub fn webrtc_url(&self) -> Option<String> {
        self.webrtc
            .map(|_| format!("{}/v1/webrtc", self.procs.base_url()))
    }

    /// Descriptors the server holds open now.
    ///
    /// # Errors
    /// The server process is gone.
    pub fn server_fds(&self) -> anyhow::Result<procfs::FdKinds> {
        procfs::fd_kinds(self.procs.server.pid()).context("server descriptors")
    }

    /// The server's SIP listener, when started with one.
    pub fn sip_addr(&self) -> Option<SocketAddr> {
        self.sip.map(|s| s.addr)
    }

    /// The server's database, for the bench's own read-only queries.
    pub fn conninfo(&self) -> &str {
        self.procs.database().conninfo()
    }

    /// The server's instance name (`call_ledger.owner_instance`).
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Lowers the load generator's (this process's) CPU priority by `nice`
    /// (see `priority`); children started later inherit it.
    ///
    /// # Errors
    /// `renice` is missing or refused.
    pub fn lower_generator_priority(&mut self, nice: u8) -> anyhow::Result<()> {
        self.generator_nice = priority::lower_own(nice)?;
        Ok(())
    }

    /// Stops the server (SIGTERM: it drains and flushes) and starts a fresh
    /// one on the same configuration file and ports, logging to
    /// `server-<n>.log`, so a run's memory is measured from a fresh
    /// process: an allocator keeps freed memory, so after one run the next
    /// one's RSS would mostly reuse it.
    ///
    /// # Errors
    /// The server did not exit, or the new one did not become ready.
    pub async fn restart_server(&mut self, n: usize) -> anyhow::Result<()> {
        let server = &mut self.procs.server;
        server.signal("TERM").await?;
        server.wait_exit(SERVER_RESTART_GRACE).await?;
        let dir = self.procs.dir();
        let args = [
            "serve".to_string(),
            "--config".into(),
            dir.join("server.toml").display().to_string(),
        ];
        let exe = callgate_exe()?;
        let log = dir.join(format!("server-{n}.log"));
        self.procs.server = ChildProcess::spawn("server", &exe, &args, log)?;
        let ready = format!("{}/readyz", self.procs.base_url());
        let http = self.procs.http().clone();
        self.procs
            .server
            .wait_ready(&http, &ready, SERVER_RESTART_READY)
            .await
    }

    /// The server's resident memory now, in KiB.
    ///
    /// # Errors
    /// The server process is gone.
    pub fn server_rss_kib(&self) -> anyhow::Result<u64> {
        procfs::rss_kib(self.procs.server.pid()).context("server RSS")
    }

    /// Waits until the server is idle (see [`is_idle`]).
    ///
    /// # Errors
    /// A child died, or the server was still busy after `limit`.
    pub async fn wait_idle(&mut self, limit: Duration) -> anyhow::Result<()> {
        self.procs
            .wait_for_status(limit, "the server to be idle", is_idle)
            .await
            .map(drop)
    }

    /// CPU ticks of the server, the simulators and this process, now.
    ///
    /// # Errors
    /// A process is gone.
    pub fn cpu_ticks(&self) -> anyhow::Result<Ticks> {
        Ok(Ticks {
            server: procfs::cpu_ticks(self.procs.server.pid()).context("server CPU time")?,
            sims: procfs::cpu_ticks(self.procs.sims.pid()).context("simulators' CPU time")?,
            load: procfs::cpu_ticks(std::process::id()).context("own CPU time")?,
            postgres: self.postgres_ticks(),
            machine: procfs::machine_busy_ticks().context("machine CPU time")?,
        })
    }

    fn postgres_ticks(&self) -> u64 {
        let pg = self.procs.database().local_postgres();
        pg.and_then(|pg| pg.pid().ok())
            .and_then(|p| procfs::tree_cpu_ticks(p).ok())
            .unwrap_or(0)
    }

    /// One run: waits for an idle server, offers `cfg`'s calls, waits for
    /// the server to finish them, and says what the processes used. The
    /// window is the wall-clock span to read the server's rows in.
    ///
    /// # Errors
    /// A child died, a process is gone, or the server did not settle.
    pub async fn offer(
        &mut self,
        cfg: callgate_load::LoadConfig,
        settle: Duration,
    ) -> anyhow::Result<(
        callgate_load::LoadReport,
        Resources,
        (SystemTime, SystemTime),
    )> {
        self.measure(settle, callgate_load::run(cfg)).await
    }

    /// [`Rig::offer`] for any load generator: waits for an idle server,
    /// runs `load` to its end, waits for the server to finish the calls,
    /// and says what the processes used while sampling the server's RSS.
    ///
    /// # Errors
    /// A child died, a process is gone, or the server did not settle.
    pub async fn measure<T>(
        &mut self,
        settle: Duration,
        load: impl Future<Output = T>,
    ) -> anyhow::Result<(T, Resources, (SystemTime, SystemTime))> {
        self.wait_idle(settle).await?;
        let from = SystemTime::now();
        let before = self.cpu_ticks()?;
        let started = std::time::Instant::now();
        let sampler = self.sampler();
        let load = load.await;
        let settled = self.wait_idle(settle).await;
        let peaks = sampler.finish().await;
        settled?;
        let after = self.cpu_ticks()?;
        let wall_s = started.elapsed().as_secs_f64();
        let resources = Resources::between(before, after, self.clock_ticks, wall_s, peaks);
        Ok((load, resources, (from, SystemTime::now())))
    }

    /// Starts sampling the server's RSS and gate counts.
    pub fn sampler(&self) -> Sampler {
        Sampler::start(
            self.procs.server.pid(),
            self.procs.http().clone(),
            self.procs.status_url(),
        )
    }

    /// The server's Postgres rows stamped within `[from, to]`.
    ///
    /// # Errors
    /// A query failed.
    pub async fn server_rows(
        &self,
        from: SystemTime,
        to: SystemTime,
    ) -> anyhow::Result<Vec<ServerCall>> {
        let rows = self
            .store
            .outcomes_between(&self.instance, from, to)
            .await
            .context("reading the server's rows")?;
        Ok(rows.into_iter().map(ServerCall::from).collect())
    }

    /// The receipts (`call_ledger.stats`) of calls admitted within
    /// `[from, to]`.
    ///
    /// # Errors
    /// The query could not be run.
    pub async fn receipts(&self, from: SystemTime, to: SystemTime) -> anyhow::Result<Vec<Receipt>> {
        let conninfo = self.procs.database().conninfo();
        receipts::read(conninfo, &self.instance, from, to)
            .await
            .context("reading the server's receipts")
    }

    /// The server's, the simulators' and the throwaway Postgres's
    /// (postmaster; `None` for `CALLGATE_DATABASE_URL`) process ids.
    pub fn pids(&self) -> (u32, u32, Option<u32>) {
        let pg = self.procs.database().local_postgres();
        (
            self.procs.server.pid(),
            self.procs.sims.pid(),
            pg.and_then(|p| p.pid().ok()),
        )
    }

    /// The server's `/admin/status`.
    ///
    /// # Errors
    /// The server did not answer.
    pub async fn status(&self) -> anyhow::Result<serde_json::Value> {
        let res = self
            .procs
            .http()
            .get(self.procs.status_url())
            .send()
            .await?;
        Ok(res.error_for_status()?.json().await?)
    }

    /// The server's `/metrics` text.
    ///
    /// # Errors
    /// The server did not answer.
    pub async fn metrics_text(&self) -> anyhow::Result<String> {
        let url = format!("{}/metrics", self.procs.base_url());
        let res = self.procs.http().get(url).send().await?;
        Ok(res.error_for_status()?.text().await?)
    }

    /// Stops the server (drain + flush), the simulators, then Postgres.
    pub async fn stop(self) {
        let Rig { procs, store, .. } = self;
        // Close the bench's pool before the database goes away.
        drop(store);
        if !procs.stop().await {
            eprintln!("the server had to be killed");
        }
    }
}

/// The sum of the samples of `name` whose labels contain `label` (every
/// sample when `label` is empty), from Prometheus text.
pub fn metric(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| label.is_empty() || l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Whether `/admin/status` shows nothing in flight: no active, queued,
/// setting-up or overflowing call, and no pending Postgres write.
pub fn is_idle(status: &serde_json::Value) -> bool {
    let zero = |v: &serde_json::Value| v.as_u64() == Some(0);
    zero(&status["admission"]["active"])
        && zero(&status["admission"]["queued"])
        && zero(&status["calls"]["setting_up"])
        && zero(&status["calls"]["overflowing"])
        && zero(&status["write_backlog"])
}

#[cfg(test)]
mod tests;
