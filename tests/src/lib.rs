//! Test harness for callgate's end-to-end tests: a throwaway Postgres, the
//! three provider simulators and the real server, all on loopback (wired by
//! `callgate_rig::InProcess`), plus a direct database connection for
//! assertions.
//!
//! Nothing here is mocked: the server talks to the simulators over real
//! WebSockets and gRPC and to a real Postgres cluster started from the
//! system's binaries. A test that cannot start Postgres fails loudly.

/// HAProxy in front of two instances (lives in the rig, which `callgate
/// drill --spawn` shares).
pub use callgate_rig::haproxy;
/// The real peers — headless Chromium (the WebRTC tests' caller), Kamailio
/// and sipp — live in the rig beside HAProxy, which `callgate-bench`
/// shares.
pub use callgate_rig::peers::{chromium, kamailio, sipp};
pub mod partner_raw;
pub mod raw;
pub mod sip;

use std::time::{Duration, Instant, SystemTime};

use callgate::config::Config;
use callgate::server::Running;
use callgate_rig::{Database, InProcess, InProcessOptions};
use callgate_sim::{SimConfig, Simulators};
use state_store::LocalOptions;
use tokio_postgres::NoTls;

/// Everything a test needs.
pub struct Harness {
    pub server: Running,
    pub sims: Simulators,
    pub db: tokio_postgres::Client,
    pub instance: String,
    /// Always a throwaway cluster.
    database: Database,
}

/// One `call_ledger` row, as the tests read it.
#[derive(Debug, Clone)]
pub struct Ledger {
    pub call_id: uuid::Uuid,
    pub end_reason: Option<String>,
    pub cleanup_status: String,
    /// admitted, media ready, first playable audio, last media, disconnect observed, cleanup completed.
    pub stamps: [Option<SystemTime>; 6],
    pub stats: serde_json::Value,
}

impl Harness {
    /// Starts Postgres, the simulators and the server (`tweak` adjusts the
    /// server configuration after it has been pointed at the simulators).
    pub async fn start(sim: SimConfig, tweak: impl FnOnce(&mut Config)) -> Harness {
        Self::start_inner(sim, tweak, None).await
    }

    /// Like [`Harness::start`], but the configuration is written to `file`
    /// and the server reads it from there (so `/admin/reload` can re-read it).
    pub async fn start_with_file(
        sim: SimConfig,
        tweak: impl FnOnce(&mut Config),
        file: &std::path::Path,
    ) -> Harness {
        Self::start_inner(sim, tweak, Some(file)).await
    }

    async fn start_inner(
        sim: SimConfig,
        tweak: impl FnOnce(&mut Config),
        file: Option<&std::path::Path>,
    ) -> Harness {
        init_logs();
        let database = Database::local(LocalOptions::default())
            .await
            .expect("start a throwaway Postgres");
        let opts = InProcessOptions {
            instance: format!("test-{}", uuid::Uuid::new_v4().simple()),
            sim,
            config_file: file.map(std::path::Path::to_path_buf),
        };
        let InProcess {
            server,
            sims,
            database,
            instance,
        } = InProcess::start(database, opts, |cfg| {
            // The instance ceiling is off in this harness: the suite runs
            // debug builds of many servers, Postgres clusters and Chromium
            // on two cores, where the media clock's lateness measures the
            // test machine, not what a test asserts. Tests of the ceiling
            // switch it back on in their tweak (e2e/instance_ceiling.rs).
            cfg.admission.max_lag_ms = 0;
            tweak(cfg);
        })
        .await
        .expect("start the simulators and the server");
        let (db, conn) = tokio_postgres::connect(database.conninfo(), NoTls)
            .await
            .expect("connect to Postgres");
        tokio::spawn(conn);
        Harness {
            server,
            sims,
            db,
            instance,
            database,
        }
    }

    /// The media-stream URL.
    pub fn ws_url(&self) -> String {
        format!("ws://{}/v1/media-stream", self.server.addr)
    }

    /// The partner-stream URL.
    pub fn partner_url(&self) -> String {
        format!("ws://{}/v1/partner/stream", self.server.addr)
    }

    /// The server's `/metrics` text.
    pub async fn metrics_text(&self) -> String {
        callgate::ensure_tls_provider();
        let url = format!("http://{}/metrics", self.server.addr);
        reqwest::get(url)
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("read /metrics")
    }

    /// `GET path` on the admin surface from loopback (no token: the
    /// harness sets none): the status and the body parsed as JSON (`Null`
    /// when it is not JSON, e.g. a 404's text).
    pub async fn admin_json(&self, path: &str) -> (u16, serde_json::Value) {
        callgate::ensure_tls_provider();
        let url = format!("http://{}{path}", self.server.addr);
        let resp = reqwest::get(url).await.expect("GET on the admin surface");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("read the body");
        (status, serde_json::from_str(&text).unwrap_or_default())
    }

    /// The ingress and partner recorded in the ledger for `call_sid`.
    pub async fn ledger_origin(&self, call_sid: &str) -> (String, Option<String>) {
        let row = self
            .db
            .query_one(
                "SELECT ingress, partner_id FROM call_ledger WHERE carrier_call_id = $1",
                &[&call_sid],
            )
            .await
            .expect("query call_ledger");
        (row.get(0), row.get(1))
    }

    /// Refusals recorded for a partner: (carrier call id, reason).
    pub async fn partner_rejections(&self, partner: &str) -> Vec<(Option<String>, String)> {
        self.db
            .query(
                "SELECT carrier_call_id, reason FROM admission_rejections WHERE partner_id = $1",
                &[&partner],
            )
            .await
            .expect("query admission_rejections")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    }

    /// The conninfo of the throwaway cluster.
    pub fn conninfo(&self) -> String {
        self.database.conninfo().to_string()
    }

    /// The postmaster's pid (to pause the database in stall tests).
    pub fn postgres_pid(&self) -> u32 {
        self.database
            .local_postgres()
            .expect("a throwaway cluster")
            .pid()
            .expect("postmaster pid")
    }

    /// The ledger row of the call Twilio knows as `call_sid`, if any.
    pub async fn ledger(&self, call_sid: &str) -> Option<Ledger> {
        let row = self
            .db
            .query_opt(
                "SELECT call_id, end_reason, cleanup_status, admitted_at, media_ready_at, first_playable_audio_at, \
                 last_media_at, disconnect_observed_at, cleanup_completed_at, stats \
                 FROM call_ledger WHERE carrier_call_id = $1",
                &[&call_sid],
            )
            .await
            .expect("query call_ledger")?;
        Some(Ledger {
            call_id: row.get(0),
            end_reason: row.get(1),
            cleanup_status: row.get(2),
            stamps: [
                row.get(3),
                row.get(4),
                row.get(5),
                row.get(6),
                row.get(7),
                row.get(8),
            ],
            stats: row.get(9),
        })
    }

    /// Waits (bounded) until the call's ledger row is closed.
    pub async fn closed_ledger(&self, call_sid: &str) -> Ledger {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(l) = self.ledger(call_sid).await
                && l.cleanup_status != "pending"
            {
                return l;
            }
            assert!(
                Instant::now() < deadline,
                "ledger row of {call_sid} not closed within 15 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The transcript of a call: (speaker, text, interrupted) in order.
    pub async fn transcript(&self, call_id: uuid::Uuid) -> Vec<(String, String, bool)> {
        self.db
            .query(
                "SELECT speaker, text, interrupted FROM call_turns WHERE call_id = $1 ORDER BY seq",
                &[&call_id],
            )
            .await
            .expect("query call_turns")
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }

    /// Raw event kinds of a call, in order.
    /// The details of the call's `kind` events, in order.
    pub async fn event_details(&self, call_id: uuid::Uuid, kind: &str) -> Vec<serde_json::Value> {
        self.db
            .query(
                "SELECT detail FROM call_events WHERE call_id = $1 AND kind = $2 ORDER BY seq",
                &[&call_id, &kind],
            )
            .await
            .expect("query call_events")
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    pub async fn event_kinds(&self, call_id: uuid::Uuid) -> Vec<String> {
        self.db
            .query(
                "SELECT kind FROM call_events WHERE call_id = $1 ORDER BY seq",
                &[&call_id],
            )
            .await
            .expect("query call_events")
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    /// Every refusal recorded for this instance, by reason (the refusal log
    /// writes in batches: poll when a count must be complete).
    pub async fn rejection_reasons(&self) -> Vec<String> {
        self.db
            .query(
                "SELECT reason FROM admission_rejections WHERE instance = $1",
                &[&self.instance],
            )
            .await
            .expect("query admission_rejections")
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    /// Refused calls recorded for a Twilio call sid: reasons.
    pub async fn rejections(&self, call_sid: &str) -> Vec<String> {
        self.db
            .query(
                "SELECT reason FROM admission_rejections WHERE carrier_call_id = $1",
                &[&call_sid],
            )
            .await
            .expect("query admission_rejections")
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    /// Waits (bounded) until every simulator reports zero open sessions and
    /// the server reports zero active calls; panics with the counts if not.
    /// No WebRTC session live and no route left on the shared socket
    /// (the WebRTC ingress must be enabled).
    pub async fn assert_webrtc_clear(&self) {
        let w = self
            .server
            .carriers
            .webrtc
            .as_ref()
            .expect("WebRTC enabled");
        eventually(
            Duration::from_secs(10),
            "no WebRTC session or route left",
            async || (w.registry.live(), w.routes.sizes()),
            |s| *s == (0, (0, 0)),
        )
        .await;
    }

    pub async fn assert_all_closed(&self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let counts = self.open_counts();
            if counts == [0, 0, 0, 0] {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "still open after 15 s: stt {}, tts {}, dialog {}, active calls {}",
                counts[0],
                counts[1],
                counts[2],
                counts[3]
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits (bounded) until no ledger row is still `pending` — every
    /// call's receipt is written — so an audit sees a settled ledger (its
    /// disconnect check compares wall clocks, which a stepped host clock
    /// would otherwise turn against a row that is closing right now).
    pub async fn assert_ledger_closed(&self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let open: i64 = self
                .db
                .query_one(
                    "SELECT count(*) FROM call_ledger WHERE cleanup_status = 'pending'",
                    &[],
                )
                .await
                .expect("count open rows")
                .get(0);
            if open == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{open} ledger rows still open after 15 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn open_counts(&self) -> [u64; 4] {
        [
            self.sims.stt.stats().open_sessions,
            self.sims.tts.stats().open_sessions + self.sims.cartesia.stats().open_sessions,
            self.sims.dialog.stats().open_sessions,
            self.server.app.call.gate.snapshot().active as u64,
        ]
    }

    /// Stops the server (draining), the simulators and Postgres.
    pub async fn stop(self) {
        let Harness {
            server,
            sims,
            database,
            instance,
            ..
        } = self;
        let rig = InProcess {
            server,
            sims,
            database,
            instance,
        };
        let left = rig
            .stop(Duration::from_secs(10))
            .await
            .expect("stop the simulators");
        assert_eq!(left.calls, 0, "calls left running at shutdown");
    }
}

/// `POST /admin/drain` (allowed from loopback without a token).
pub async fn drain(r: &Running) {
    callgate::ensure_tls_provider();
    let resp = reqwest::Client::new()
        .post(format!("http://{}/admin/drain", r.addr))
        .send()
        .await
        .expect("POST /admin/drain");
    assert_eq!(resp.status().as_u16(), 202, "drain refused");
}

/// A second server against the harness's Postgres and simulators: the
/// same configuration (then `tweak`) but its own instance name, loopback
/// listeners (HTTP, SIP, agent: ports the OS chooses) and a disjoint RTP
/// range. Returns it and its instance name; stop it with `shutdown`.
pub async fn second_instance(h: &Harness, tweak: impl FnOnce(&mut Config)) -> (Running, String) {
    let mut cfg = (*h.server.app.cfg()).clone();
    let name = format!("{}-b", h.instance);
    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    cfg.server.instance = name.clone();
    cfg.server.listen = loopback;
    cfg.sip.listen = loopback;
    cfg.agent.listen = loopback;
    if cfg.sip.enabled {
        // A span of its own, as wide as the first instance's range.
        let width = cfg.sip.rtp_port_max - cfg.sip.rtp_port_min;
        assert!(
            width < callgate_rig::ports::SPAN,
            "an RTP range wider than a span"
        );
        let base = callgate_rig::ports::claim_span().expect("claim an RTP port span");
        (cfg.sip.rtp_port_min, cfg.sip.rtp_port_max) = (base, base + width);
    }
    tweak(&mut cfg);
    let running = callgate::server::start(cfg, None)
        .await
        .expect("start the second instance");
    (running, name)
}

/// A load configuration for `calls` calls against the harness.
pub fn load(h: &Harness, calls: usize, utterances: usize) -> callgate_load::LoadConfig {
    callgate_load::LoadConfig {
        url: h.ws_url(),
        calls,
        concurrency: calls,
        utterances,
        progress: false,
        ..callgate_load::LoadConfig::default()
    }
}

/// A partner-protocol load configuration against the harness.
pub fn partner_load(
    h: &Harness,
    key: &str,
    format: callgate_load::PartnerFormat,
    calls: usize,
    utterances: usize,
) -> callgate_load::LoadConfig {
    callgate_load::LoadConfig {
        url: h.partner_url(),
        protocol: callgate_load::Protocol::Partner,
        partner_key: Some(key.to_string()),
        partner_format: format,
        ..load(h, calls, utterances)
    }
}

/// Adds partner `id` with API key `key` (only its SHA-256 goes into the
/// configuration, as an operator would write it) and an optional quota.
pub fn add_partner(cfg: &mut Config, id: &str, key: &str, quota: Option<u32>) {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    cfg.partners.insert(
        id.to_string(),
        callgate::config::PartnerConfig {
            key_sha256: hex,
            max_concurrent_calls: quota,
            transfer_target: None,
        },
    );
}

/// Asserts that every turn delivered the bot audio the TTS simulator
/// generated for it, within ±10 %: the greeting is the socket's context 1,
/// reply `i` context `i + 2`. A reply cut short cannot pass as served.
/// Needs the call to be the only (or the last) TTS session of the run.
pub fn assert_bot_audio_delivered(h: &Harness, call: &callgate_load::CallRecord) {
    // Whichever TTS vendor's simulator the call used.
    let contexts = match h.sims.tts.sessions().last() {
        Some(s) => s.contexts.clone(),
        None => h
            .sims
            .cartesia
            .sessions()
            .last()
            .expect("a TTS session (ElevenLabs or Cartesia)")
            .contexts
            .clone(),
    };
    let generated = |ctx: usize| {
        contexts
            .get(&format!("ctx-{ctx}"))
            .map(|c| c.audio_ms)
            .unwrap_or_else(|| panic!("no audio generated for ctx-{ctx}: {contexts:#?}"))
    };
    let mut heard = vec![call.greeting_audio_ms.expect("greeting audio measured")];
    heard.extend(call.reply_audio_ms.iter().copied());
    assert_eq!(heard.len(), call.replies_heard + 1, "{call:#?}");
    for (i, got) in heard.iter().enumerate() {
        let want = generated(i + 1);
        let diff = got.abs_diff(want);
        assert!(
            want > 0 && diff * 10 <= want,
            "turn {i}: caller heard {got} ms of bot audio, TTS generated {want} ms: {call:#?}"
        );
    }
}

/// How often [`eventually`] looks again.
const POLL: Duration = Duration::from_millis(25);

/// Polls `probe` every [`POLL`] until `done` accepts what it returned, and
/// returns that value (so the caller's assertions run on it). Panics once
/// `deadline` has passed, naming `what` and the last value observed; a
/// probe that itself hangs past the deadline panics the same way.
pub async fn eventually<T: std::fmt::Debug>(
    deadline: Duration,
    what: &str,
    mut probe: impl AsyncFnMut() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let until = tokio::time::Instant::now() + deadline;
    let mut last = None;
    loop {
        match tokio::time::timeout_at(until, probe()).await {
            Ok(value) if done(&value) => return value,
            Ok(value) => last = Some(value),
            Err(_) => {}
        }
        assert!(
            tokio::time::Instant::now() + POLL < until,
            "timed out after {deadline:?} waiting for {what}; last observed: {last:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The pinned Python venv the suite drives outside tools from (the vendor
/// SDKs, aiortc, the manifest validators), made by `.ci/python-venv` (a
/// no-op when current; the first time it downloads from PyPI): its
/// directory. Panics, naming what is missing, when it cannot be made.
pub async fn python_venv() -> std::path::PathBuf {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let made = tokio::process::Command::new("bash")
        .arg(repo.join(".ci/python-venv"))
        .kill_on_drop(true)
        .status();
    let made = tokio::time::timeout(Duration::from_secs(300), made)
        .await
        .expect("making the Python venv timed out")
        .expect("running .ci/python-venv (bash)");
    assert!(
        made.success(),
        ".ci/python-venv failed ({made}): it needs python3 with the venv module (Debian python3-venv) and PyPI"
    );
    std::env::var_os("CALLGATE_PYTHON_VENV")
        .map_or_else(|| repo.join("target/python-venv"), std::path::PathBuf::from)
}

/// Writes a configuration as TOML (what an operator would edit).
pub fn write_config(path: &std::path::Path, cfg: &Config) {
    callgate_rig::write_config(path, cfg).expect("write the configuration file");
}

fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
}

/// Asserts that the lifecycle timestamps are all present and in order.
pub fn assert_stamps_in_order(l: &Ledger) {
    let names = [
        "admitted",
        "media_ready",
        "first_playable_audio",
        "last_media",
        "disconnect_observed",
        "cleanup_completed",
    ];
    for (i, s) in l.stamps.iter().enumerate() {
        assert!(s.is_some(), "{} is missing in {l:?}", names[i]);
    }
    for i in 1..6 {
        assert!(
            l.stamps[i - 1] <= l.stamps[i],
            "{} is after {} in {l:?}",
            names[i - 1],
            names[i]
        );
    }
}

impl Harness {
    /// Freezes the test's Postgres whole (SIGSTOP to the postmaster and
    /// every backend) until the guard is thawed or dropped (SIGCONT), so a
    /// failing test never leaves it stopped. Do not query `db` meanwhile.
    pub fn freeze_database(&self) -> callgate_rig::Frozen {
        self.database
            .freeze()
            .expect("freeze the throwaway Postgres")
    }
}
