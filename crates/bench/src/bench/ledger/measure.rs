//! The measurements of `callgate-bench ledger` (see the parent module).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use callgate::app::App;
use callgate::config::{Config, MaxCalls};
use callgate::server::Running;
use callgate_rig::Database;
use state_store::{CallId, CleanupStatus, LocalOptions, NewCall, OwnerEpoch, Stage, Write};

use super::LedgerArgs;
use callgate_rig::measured::procfs::tree_cpu_ticks;

/// Ledger writes in flight while the sessions' rows are opened.
const OPEN_CONCURRENCY: usize = 16;
/// Room above the held sessions for the churning threads' admissions.
const CHURN_ROOM: u32 = 64;

/// A server holding `n` sessions: permits in its gate, open rows it owns.
pub struct Setup {
    running: Running,
    database: Database,
    permits: Vec<admission::Permit>,
    rows: Vec<(CallId, OwnerEpoch)>,
}

impl Setup {
    pub async fn start(n: usize) -> anyhow::Result<Setup> {
        let database = Database::from_env_or_local(LocalOptions::default()).await?;
        let mut cfg = Config::default();
        cfg.database.url = database.conninfo().to_string();
        cfg.server.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        cfg.server.instance = format!("bench-ledger-{}-{}", std::process::id(), unique());
        let cap = u32::try_from(n).context("--sessions")? + CHURN_ROOM;
        cfg.admission.max_concurrent_calls = MaxCalls::Pinned(cap);
        cfg.admission.queue_max = 0;
        cfg.agent.enabled = true;
        cfg.agent.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        let running = callgate::server::start(cfg, None).await?;
        let app = Arc::clone(&running.app);
        let mut permits = Vec::with_capacity(n);
        for _ in 0..n {
            let p = app.call.gate.try_admit(Instant::now());
            permits.push(p.map_err(|r| anyhow::anyhow!("holding a session: {r:?}"))?);
        }
        let rows = open_rows(&app, n).await?;
        Ok(Setup {
            running,
            database,
            permits,
            rows,
        })
    }

    /// Every measurement, in an order that leaves the sessions for last:
    /// the receipt writes close the rows.
    pub async fn measure(&self, args: &LedgerArgs) -> anyhow::Result<Figures> {
        let app = Arc::clone(&self.running.app);
        let pg = self.postgres_pid()?;
        let quiet = reads(&app, args.reads, false).await?;
        let contended = reads(&app, args.reads, true).await?;
        let reconciler = reconciler(&app, args.ticks, pg).await?;
        let agent_addr = self
            .running
            .agent_addr
            .context("the agent responder is not listening")?;
        let agent = agent(agent_addr, args.checks).await?;
        let receipts = receipts(&app, &self.rows, pg).await?;
        Ok(Figures {
            quiet,
            contended,
            reconciler_cpu_us_per_tick: reconciler.0,
            reconciler_pg_us_per_tick: reconciler.1,
            interval_ms: app.cfg().ledger.reconcile_interval_ms,
            agent_cpu_us_per_check: agent,
            agent_checks_per_s: f64::from(args.balancers) * 1000.0 / args.agent_inter_ms as f64,
            receipts,
        })
    }

    fn postgres_pid(&self) -> anyhow::Result<Option<u32>> {
        match self.database.local_postgres() {
            Some(pg) => Ok(Some(pg.pid()?)),
            None => Ok(None),
        }
    }

    pub async fn stop(self) {
        let Setup {
            running,
            database,
            permits,
            ..
        } = self;
        drop(permits);
        running.shutdown(Duration::from_secs(10)).await;
        database.stop().await;
    }
}

fn unique() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Opens `n` ledger rows owned by the server's instance, a few at a time.
async fn open_rows(app: &Arc<App>, n: usize) -> anyhow::Result<Vec<(CallId, OwnerEpoch)>> {
    let mut rows = Vec::with_capacity(n);
    let ids: Vec<CallId> = (0..n).map(|_| CallId::new_random()).collect();
    for chunk in ids.chunks(OPEN_CONCURRENCY) {
        let opens = chunk.iter().map(|id| {
            let store = app.call.store.clone();
            let call = NewCall {
                call_id: *id,
                ingress: "twilio".into(),
                carrier_call_id: Some(format!("CA{}", id.0.simple())),
                partner_id: None,
                admitted_at: SystemTime::now(),
                admission_wait: Duration::ZERO,
                stats: serde_json::json!({}),
            };
            async move { store.open_call(call).await }
        });
        for (id, epoch) in chunk
            .iter()
            .zip(futures_util::future::join_all(opens).await)
        {
            rows.push((*id, epoch.context("open a ledger row")?));
        }
    }
    Ok(rows)
}

/// Nanoseconds this thread has been on a CPU (`/proc/thread-self/schedstat`).
fn thread_cpu_ns() -> anyhow::Result<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat")?;
    first_field(&s)
}

/// Nanoseconds every thread of this process has been on a CPU.
fn process_cpu_ns() -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir("/proc/self/task")? {
        let path = entry?.path().join("schedstat");
        // A thread may exit between listing and reading.
        if let Ok(s) = std::fs::read_to_string(path) {
            total += first_field(&s)?;
        }
    }
    Ok(total)
}

fn first_field(schedstat: &str) -> anyhow::Result<u64> {
    match schedstat.split_whitespace().next().map(str::parse) {
        Some(Ok(ns)) => Ok(ns),
        _ => bail!("unexpected schedstat: {schedstat:?}"),
    }
}

/// Postgres CPU, µs (ticks of its process tree; 0 when it is not ours).
fn postgres_cpu_us(pid: Option<u32>) -> anyhow::Result<u64> {
    let Some(pid) = pid else { return Ok(0) };
    let ticks = tree_cpu_ticks(pid)?;
    Ok(ticks * 1_000_000 / callgate_rig::measured::procfs::clock_ticks_per_second())
}

/// Latency of one read, ns: p50, p99, max.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spread {
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

impl Spread {
    fn of(mut ns: Vec<u64>) -> Spread {
        ns.sort_unstable();
        let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize];
        Spread {
            p50: at(0.5),
            p99: at(0.99),
            max: ns[ns.len() - 1],
        }
    }
}

/// The three counter reads, timed.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reads {
    pub runtime: Spread,
    pub routing: Spread,
    pub pressure: Spread,
}

/// Times `n` reads of each counter, on a thread of its own; with `churn`,
/// two more threads admit and release through the same gate meanwhile.
async fn reads(app: &Arc<App>, n: usize, churn: bool) -> anyhow::Result<Reads> {
    let app = Arc::clone(app);
    let out = tokio::task::spawn_blocking(move || {
        let stop = Arc::new(AtomicBool::new(false));
        let churners: Vec<_> = (0..if churn { 2 } else { 0 })
            .map(|_| {
                let (app, stop) = (Arc::clone(&app), Arc::clone(&stop));
                std::thread::spawn(move || churn_gate(&app, &stop))
            })
            .collect();
        let runtime = time_reads(n, || app.call.gate.snapshot().active as u64);
        let routing = time_reads(n, || app.routing.last().map_or(0, |(s, _)| s));
        let pressure = time_reads(n, || {
            callgate::reconcile::pressure::view(&app.call).active as u64
        });
        stop.store(true, Ordering::Relaxed);
        let churned: u64 = churners.into_iter().map(|t| t.join().unwrap_or(0)).sum();
        (
            Reads {
                runtime,
                routing,
                pressure,
            },
            churned,
        )
    })
    .await?;
    if churn && out.1 == 0 {
        bail!("the churning threads admitted nothing: no contention was measured");
    }
    Ok(out.0)
}

fn churn_gate(app: &App, stop: &AtomicBool) -> u64 {
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        if let Ok(p) = app.call.gate.try_admit(Instant::now()) {
            p.release(Instant::now());
            n += 1;
        }
    }
    n
}

fn time_reads(n: usize, mut read: impl FnMut() -> u64) -> Spread {
    let mut ns = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        std::hint::black_box(read());
        ns.push(t.elapsed().as_nanos() as u64);
    }
    Spread::of(ns)
}

/// The reconciler's tick run `ticks` times back to back: (callgate CPU µs
/// per tick on this thread, Postgres CPU µs per tick).
async fn reconciler(app: &Arc<App>, ticks: usize, pg: Option<u32>) -> anyhow::Result<(f64, f64)> {
    let mut rec = callgate::reconcile::task::Ticker::new(app);
    let pg0 = postgres_cpu_us(pg)?;
    // A current-thread runtime on this thread: the thread's CPU is the tick's.
    let app = Arc::clone(app);
    let (cpu_ns, n) = tokio::task::spawn_blocking(move || -> anyhow::Result<(u64, usize)> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let t0 = thread_cpu_ns()?;
        rt.block_on(async {
            for _ in 0..ticks {
                rec.tick(&app).await;
            }
        });
        Ok((thread_cpu_ns()? - t0, ticks))
    })
    .await??;
    let pg_us = postgres_cpu_us(pg)? - pg0;
    Ok((cpu_ns as f64 / 1000.0 / n as f64, pg_us as f64 / n as f64))
}

/// `checks` agent checks over loopback, one after another: the server's CPU
/// per check, µs (process CPU less the client thread's own).
async fn agent(addr: SocketAddr, checks: usize) -> anyhow::Result<f64> {
    let p0 = process_cpu_ns()?;
    let client = tokio::task::spawn_blocking(move || -> anyhow::Result<u64> {
        use std::io::Read as _;
        let t0 = thread_cpu_ns()?;
        for _ in 0..checks {
            let mut s = std::net::TcpStream::connect(addr)?;
            s.set_read_timeout(Some(Duration::from_secs(2)))?;
            let mut line = String::new();
            s.read_to_string(&mut line)?;
            if !line.ends_with('\n') {
                bail!("the agent answered {line:?}");
            }
        }
        Ok(thread_cpu_ns()? - t0)
    })
    .await??;
    let server_ns = (process_cpu_ns()? - p0).saturating_sub(client);
    Ok(server_ns as f64 / 1000.0 / checks as f64)
}

/// One receipt's writes for every session, until applied, per call.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReceiptCost {
    pub wall_us: f64,
    pub cpu_us: f64,
    pub pg_us: f64,
    pub writes_per_call: usize,
    pub stats_bytes: usize,
}

async fn receipts(
    app: &Arc<App>,
    rows: &[(CallId, OwnerEpoch)],
    pg: Option<u32>,
) -> anyhow::Result<ReceiptCost> {
    let stats = receipt_stats();
    let stats_bytes = stats.to_string().len();
    let applied0 = app.call.writes.stats().applied;
    let (p0, pg0, t0) = (process_cpu_ns()?, postgres_cpu_us(pg)?, Instant::now());
    let mut per_call = 0;
    for (call, epoch) in rows {
        let writes = receipt_writes(*call, *epoch, &stats);
        per_call = writes.len();
        for w in writes {
            while app.call.writes.submit(w.clone()).is_err() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    let want = applied0 + (per_call * rows.len()) as u64;
    let until = Instant::now() + Duration::from_secs(120);
    while app.call.writes.stats().applied < want {
        if Instant::now() > until {
            bail!(
                "receipt writes not applied within 120 s: {:?}",
                app.call.writes.stats()
            );
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let n = rows.len() as f64;
    Ok(ReceiptCost {
        wall_us: t0.elapsed().as_secs_f64() * 1e6 / n,
        cpu_us: (process_cpu_ns()? - p0) as f64 / 1000.0 / n,
        pg_us: (postgres_cpu_us(pg)? - pg0) as f64 / n,
        writes_per_call: per_call,
        stats_bytes,
    })
}

/// The ledger writes one call makes for its receipt: four lifecycle stamps,
/// its events, the close.
fn receipt_writes(call: CallId, epoch: OwnerEpoch, stats: &serde_json::Value) -> Vec<Write> {
    let at = SystemTime::now();
    let mut w: Vec<Write> = [
        Stage::MediaReady,
        Stage::FirstPlayableAudio,
        Stage::LastMedia,
        Stage::DisconnectObserved,
    ]
    .into_iter()
    .map(|stage| Write::Lifecycle {
        call,
        epoch,
        stage,
        at,
    })
    .collect();
    for (seq, kind) in ["admitted", "setup_done", "barge_in_paused"]
        .iter()
        .enumerate()
    {
        w.push(Write::Event {
            call,
            epoch,
            seq: seq as u32,
            kind: (*kind).to_string(),
            detail: serde_json::json!({"at_ms": 1234}),
            at,
        });
    }
    w.push(Write::Close {
        call,
        epoch,
        end_reason: "caller_hangup".into(),
        cleanup_status: CleanupStatus::Completed,
        cleanup_completed_at: at,
        stats: stats.clone(),
    });
    w
}

/// A closing `stats` object of a real receipt's shape and size (a call of
/// four timed turns), so the close writes what a call's close writes.
fn receipt_stats() -> serde_json::Value {
    let turn = serde_json::json!({"stt_us": 180_000, "dialog_us": 240_000, "tts_us": 150_000,
        "own_us": 310, "prompt_wait_us": 0, "total_us": 570_310});
    serde_json::json!({
        "active_counter_delta": {"increment": 1, "decrement": 1},
        "admission_wait_ms": 0, "setup_ms": 41,
        "media": {"format": "mulaw_8k", "frames_in": 2400, "frames_out": 1900, "frames_dropped": 0,
                  "ignored_carrier_events": 0, "stt_audio_dropped": 0},
        "interaction": {"interruptions": 1, "barge_in_pauses": 1, "false_barge_ins": 0,
                        "barge_in_stop_max_us": 41_000},
        "turns": [turn, turn, turn, turn], "untimed_turns": 0,
        "delegation": {"started": 1, "completed": 1, "cancelled": 0, "orphaned": 0, "refused": 0},
        "stalls": [], "late_end_causes": [],
        "reconnects": {"stt": {"attempts": 0}, "tts": {"attempts": 0}, "dialog": {"attempts": 0}},
        "writes_lost": 0, "cleanup": {"forced": [], "writes_lost": 0, "permit_unreleased": false},
    })
}

/// Everything one repeat measured.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    pub quiet: Reads,
    pub contended: Reads,
    pub reconciler_cpu_us_per_tick: f64,
    pub reconciler_pg_us_per_tick: f64,
    pub interval_ms: u64,
    pub agent_cpu_us_per_check: f64,
    pub agent_checks_per_s: f64,
    pub receipts: ReceiptCost,
}

impl Figures {
    /// Reconciler CPU per second at its interval, ms (callgate + Postgres).
    fn reconciler_ms_per_s(&self) -> (f64, f64) {
        let per_s = 1000.0 / self.interval_ms.max(1) as f64;
        (
            self.reconciler_cpu_us_per_tick * per_s / 1000.0,
            self.reconciler_pg_us_per_tick * per_s / 1000.0,
        )
    }

    fn agent_ms_per_s(&self) -> f64 {
        self.agent_cpu_us_per_check * self.agent_checks_per_s / 1000.0
    }

    pub fn line(&self) -> String {
        let (rc, rp) = self.reconciler_ms_per_s();
        format!(
            "runtime read p50/p99 {}/{} ns quiet, {}/{} ns contended (max {}); routing read {}/{} ns contended; pressure view {}/{} ns contended; reconciler {:.0} µs + Postgres {:.0} µs per tick = {:.3} + {:.3} ms CPU/s at {} ms; agent {:.1} µs per check = {:.4} ms CPU/s at {:.1} checks/s; receipt {} writes ({} B stats) {:.0} µs wall, {:.0} µs callgate CPU, {:.0} µs Postgres CPU per call",
            self.quiet.runtime.p50,
            self.quiet.runtime.p99,
            self.contended.runtime.p50,
            self.contended.runtime.p99,
            self.contended.runtime.max,
            self.contended.routing.p50,
            self.contended.routing.p99,
            self.contended.pressure.p50,
            self.contended.pressure.p99,
            self.reconciler_cpu_us_per_tick,
            self.reconciler_pg_us_per_tick,
            rc,
            rp,
            self.interval_ms,
            self.agent_cpu_us_per_check,
            self.agent_ms_per_s(),
            self.agent_checks_per_s,
            self.receipts.writes_per_call,
            self.receipts.stats_bytes,
            self.receipts.wall_us,
            self.receipts.cpu_us,
            self.receipts.pg_us,
        )
    }

    /// One line per figure: median (min–max) over the repeats.
    pub fn summary(all: &[Figures]) -> Vec<String> {
        let pick = |name: &str, unit: &str, f: &dyn Fn(&Figures) -> f64| {
            let mut v: Vec<f64> = all.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            let med = v[v.len() / 2];
            format!(
                "{name}: {med:.3} ({:.3}–{:.3}) {unit}",
                v[0],
                v[v.len() - 1]
            )
        };
        vec![
            pick("runtime read p50, quiet", "ns", &|f| {
                f.quiet.runtime.p50 as f64
            }),
            pick("runtime read p99, quiet", "ns", &|f| {
                f.quiet.runtime.p99 as f64
            }),
            pick("runtime read p50, contended", "ns", &|f| {
                f.contended.runtime.p50 as f64
            }),
            pick("runtime read p99, contended", "ns", &|f| {
                f.contended.runtime.p99 as f64
            }),
            pick("routing read p99, contended", "ns", &|f| {
                f.contended.routing.p99 as f64
            }),
            pick("pressure view p99, contended", "ns", &|f| {
                f.contended.pressure.p99 as f64
            }),
            pick("reconciler, callgate", "ms CPU/s", &|f| {
                f.reconciler_ms_per_s().0
            }),
            pick("reconciler, Postgres", "ms CPU/s", &|f| {
                f.reconciler_ms_per_s().1
            }),
            pick("agent responder", "µs CPU/check", &|f| {
                f.agent_cpu_us_per_check
            }),
            pick("agent responder", "ms CPU/s", &|f| f.agent_ms_per_s()),
            pick("receipt writes, wall", "µs/call", &|f| f.receipts.wall_us),
            pick("receipt writes, callgate", "µs CPU/call", &|f| {
                f.receipts.cpu_us
            }),
            pick("receipt writes, Postgres", "µs CPU/call", &|f| {
                f.receipts.pg_us
            }),
        ]
    }
}
