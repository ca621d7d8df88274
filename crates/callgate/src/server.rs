//! Starting, running and stopping the server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::app::App;
use crate::config::{Config, ms};
use crate::{drain, http, metrics};

/// A running server.
pub struct Running {
    /// Where the HTTP/WebSocket listener is bound.
    pub addr: SocketAddr,
    /// Where the operator listener is bound, when `server.admin_listen` is set.
    pub admin_addr: Option<SocketAddr>,
    pub app: Arc<App>,
    /// What the carriers keep (the partner resume registry).
    pub carriers: Arc<crate::carrier::Carriers>,
    stop_http: CancellationToken,
    http: Vec<JoinHandle<std::io::Result<()>>>,
    background: CancellationToken,
    writers: state_store::WriterTasks,
    refusal_writer: JoinHandle<()>,
    /// The SIP listener, when `sip.enabled`.
    pub sip: Option<crate::carrier::sip::ingress::SipServer>,
    /// Where the HAProxy agent-check responder listens, when `agent.enabled`.
    pub agent_addr: Option<SocketAddr>,
    agent: Option<crate::agent::responder::Responder>,
}

/// The ingresses this configuration serves (the metrics primed for them).
fn primed_ingresses(cfg: &Config) -> Vec<&'static str> {
    let mut on = vec!["twilio", "partner"];
    if cfg.sip.enabled {
        on.push("sip");
    }
    if cfg.webrtc.enabled {
        on.push("webrtc");
    }
    on
}

/// Connects to Postgres (migrating it), builds the shared state, binds the
/// listener and starts serving.
pub async fn start(cfg: Config, config_path: Option<PathBuf>) -> anyhow::Result<Running> {
    cfg.validate()?;
    crate::ensure_tls_provider();
    let metrics = metrics::install();
    if cfg.twilio.webhook.enabled && cfg.twilio.webhook.transfer_to.is_none() {
        warn!(
            key = "twilio.webhook.transfer_to",
            "the Twilio webhook has no transfer_to: refused callers hear the overflow prompt and are hung up, and a transfer ends the call"
        );
    }
    metrics::prime(&primed_ingresses(&cfg));
    let store = state_store::Store::connect(cfg.store_config()).await?;
    let applied = store.migrate().await?;
    if !applied.is_empty() {
        info!(migrations = ?applied, "database migrated");
    }
    // Before anything can admit a call: this name's rows from before are
    // closed (`instance_restart`) and this boot's first beat recorded.
    let boot = crate::ownership::begin(&store, &cfg.ownership).await?;
    let started = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"), "pid": std::process::id(), "boot": boot.to_string(),
    });
    crate::audit_http::record_started(&store, started).await?;
    let (writes, writers) = state_store::WriteBehind::start(&store, write_behind_config(&cfg));
    let dialog = dialog_grpc::DialogClient::new(&dialog_grpc::DialogConfig {
        endpoint: cfg.dialog.endpoint.clone(),
        connect_timeout: ms(cfg.dialog.connect_timeout_ms),
        open_timeout: ms(cfg.dialog.open_timeout_ms),
        channels: cfg.dialog.channels,
        reconnect: cfg.dialog.reconnect,
    })?;
    let listen = cfg.server.listen;
    let background = CancellationToken::new();
    let (refusals, refusal_writer) = crate::refusals::RefusalLog::start(
        store.clone(),
        background.clone(),
        Duration::from_secs(cfg.database.retry_window_s),
    );
    let app = Arc::new(App::new(
        cfg,
        config_path,
        store,
        writes,
        refusals,
        dialog,
        metrics,
    )?);
    let snap = app.call.gate.snapshot();
    info!(
        capacity = snap.capacity,
        decided_by = %snap.decided_by,
        "admission capacity {} decided by {}",
        snap.capacity,
        snap.decided_by
    );
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding server.listen {listen}"))?;
    let addr = listener.local_addr()?;
    let admin_listener = match app.cfg().server.admin_listen {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .with_context(|| format!("binding server.admin_listen {a}"))?,
        ),
        None => None,
    };
    let admin_addr = admin_listener
        .as_ref()
        .map(TcpListener::local_addr)
        .transpose()?;
    let stop_http = CancellationToken::new();
    warn_about_exposures(&app.cfg());
    let carriers = Arc::new(crate::carrier::Carriers::start(&app.cfg()).await?);
    let http = match admin_listener {
        None => vec![serve_http(
            listener,
            http::router(Arc::clone(&app), &carriers),
            &stop_http,
        )],
        Some(admin) => vec![
            serve_http(
                listener,
                http::public_router(Arc::clone(&app), &carriers),
                &stop_http,
            ),
            serve_http(admin, http::operator_router(Arc::clone(&app)), &stop_http),
        ],
    };
    tokio::spawn(crate::lag::run(
        app.call.gate.clone(),
        Arc::clone(&app.call.lag),
        background.clone(),
    ));
    tokio::spawn(crate::retention::run(Arc::clone(&app), background.clone()));
    tokio::spawn(crate::reconcile::task::run(
        Arc::clone(&app),
        background.clone(),
    ));
    tokio::spawn(crate::ownership::run(
        Arc::clone(&app),
        boot,
        background.clone(),
    ));
    let sip = if app.cfg().sip.enabled {
        Some(crate::carrier::sip::ingress::SipServer::start(Arc::clone(&app.call)).await?)
    } else {
        None
    };
    let agent = if app.cfg().agent.enabled {
        let cfg = app.cfg().agent.clone();
        Some(crate::agent::responder::start(Arc::clone(&app), &cfg, background.clone()).await?)
    } else {
        None
    };
    info!(%addr, admin = ?admin_addr, instance = %app.instance(), "callgate listening");
    Ok(Running {
        addr,
        admin_addr,
        app,
        carriers,
        stop_http,
        http,
        background,
        writers,
        refusal_writer,
        sip,
        agent_addr: agent.as_ref().map(|a| a.addr),
        agent,
    })
}

/// Serves `router` on `listener` until `stop`. The peer address reaches the
/// handlers: while no admin token is set, `/admin/*` serves loopback peers
/// only (see `http::admin_allowed`).
fn serve_http(
    listener: TcpListener,
    router: axum::Router,
    stop: &CancellationToken,
) -> JoinHandle<std::io::Result<()>> {
    let stop = stop.clone();
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move {
        axum::serve(listener, service)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
    })
}

/// Every surface the configuration opens to other hosts, said loudly once
/// at startup (docs/design.md, "Closed by default"; `config::exposure`).
fn warn_about_exposures(cfg: &Config) {
    for e in cfg.exposures() {
        warn!(addr = %e.addr, key = e.key, "{}", e.message);
    }
    for (key, what) in cfg.faults.active() {
        tracing::error!(key, "deliberate fault switched on: {what}");
    }
    if cfg.partners.is_empty() {
        tracing::info!(
            "no [partners.<id>] configured: /v1/partner/stream refuses every upgrade (401)"
        );
    }
}

fn write_behind_config(cfg: &Config) -> state_store::WriteBehindConfig {
    let d = &cfg.database;
    state_store::WriteBehindConfig {
        writers: d.writers,
        queue_per_writer: d.write_queue_per_writer,
        retry_window: Duration::from_secs(d.retry_window_s),
        ..state_store::WriteBehindConfig::default()
    }
}

/// What a shutdown achieved, for the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// Calls still in progress when the drain gave up on them.
    pub calls_left: u64,
    /// Call tasks that had not returned (their receipts may be missing).
    pub tasks_left: bool,
    /// Every queued write was settled (applied, fenced or lost) in time.
    pub writes_flushed: bool,
}

impl Stopped {
    /// Every receipt was closed and every write settled: exit 0.
    pub fn clean(&self) -> bool {
        self.calls_left == 0 && !self.tasks_left && self.writes_flushed
    }
}

impl Running {
    /// Drains (see `drain`: `[drain].policy`, calls still running after
    /// `deadline` — or an earlier drain's deadline, or a second signal's
    /// grace — hear the goodbye), stops the listener, flushes the
    /// write-behind queue.
    pub async fn shutdown(self, deadline: Duration) -> Stopped {
        drain::begin_within(&self.app, drain::plan::Origin::Signal, deadline);
        let calls_left = loop {
            match drain::run_until_done(Arc::clone(&self.app)).await {
                drain::Outcome::Done => break 0,
                drain::Outcome::Left(n) => break n,
                // An undrain that raced the signal: the shutdown drains again.
                drain::Outcome::Cancelled => {
                    drain::begin_within(&self.app, drain::plan::Origin::Signal, deadline);
                }
            }
        };
        if let Some(sip) = self.sip {
            sip.stop().await;
        }
        self.stop_http.cancel();
        self.background.cancel();
        if let Some(agent) = self.agent {
            agent.stopped(Duration::from_secs(2)).await;
        }
        self.app.call.tasks.close();
        let tasks_left = tokio::time::timeout(Duration::from_secs(10), self.app.call.tasks.wait())
            .await
            .is_err();
        if tasks_left {
            warn!("call tasks still running after the drain");
        }
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            futures_util::future::join_all(self.http),
        )
        .await;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.refusal_writer).await;
        let report = self.writers.drain(Duration::from_secs(10)).await;
        info!(report = ?report, "write-behind queue flushed");
        Stopped {
            calls_left,
            tasks_left,
            writes_flushed: report.completed,
        }
    }
}

/// `callgate serve`: runs until SIGTERM/SIGINT, then drains and returns
/// (a second signal shortens the drain to `[drain].grace_s`); SIGHUP
/// reloads the configuration, also while draining.
///
/// # Errors
/// Startup failed, or the shutdown left a call or a write unsettled (the
/// binary then exits 1).
pub async fn serve(cfg: Config, config_path: Option<PathBuf>) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let running = start(cfg, config_path).await?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let app = Arc::clone(&running.app);
    let mut running = Some(running);
    let mut shutdown = None;
    let stopped = loop {
        let signal = tokio::select! {
            stopped = async { shutdown.as_mut().expect("guarded").await }, if shutdown.is_some() => {
                break stopped;
            }
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
            _ = hup.recv() => {
                if let Err(e) = http::reload_config(&app) {
                    warn!(error = %e, "SIGHUP reload refused; keeping the current configuration");
                }
                continue;
            }
        };
        match running.take() {
            Some(r) => {
                info!(signal, "{signal}: draining");
                let deadline = Duration::from_secs(app.cfg().drain.deadline_s);
                shutdown = Some(Box::pin(r.shutdown(deadline)));
            }
            None => drain::shorten(&app),
        }
    };
    if stopped.clean() {
        info!("every call ended with its receipt; exiting");
        Ok(())
    } else {
        anyhow::bail!("shutdown incomplete: {stopped:?}")
    }
}
