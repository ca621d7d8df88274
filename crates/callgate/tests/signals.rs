//! `callgate serve` as an operator runs it: a real process, configured by a
//! file, reloaded by SIGHUP and drained by SIGTERM.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use callgate::config::MaxCalls;
use callgate_load::{LoadConfig, Outcome};
use callgate_sim::{SimConfig, Simulators};
use state_store::local::{LocalOptions, LocalPostgres};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills the server if the test fails before it has exited on its own.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success(), "kill {sig} failed");
}

async fn status(http: &reqwest::Client, base: &str) -> Option<serde_json::Value> {
    let r = http.get(format!("{base}/admin/status")).send().await.ok()?;
    r.json().await.ok()
}

async fn wait_for<F: Fn(&serde_json::Value) -> bool>(
    http: &reqwest::Client,
    base: &str,
    what: &str,
    f: F,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(s) = status(http, base).await
            && f(&s)
        {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_caps_and_sigterm_drains_then_exits() {
    let pg = LocalPostgres::start(LocalOptions::default()).unwrap();
    let sims = Simulators::start_local(SimConfig::default()).await.unwrap();
    let dir = std::env::temp_dir().join(format!(
        "callgate-signals-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("callgate.toml");
    let mut cfg = callgate::demo::config_for(&sims, &pg.conninfo(), "signals");
    cfg.server.listen = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    cfg.server.drain_timeout_s = 60;
    std::fs::write(&file, toml::to_string(&cfg).unwrap()).unwrap();
    let base = format!("http://{}", cfg.server.listen);

    let mut server = Server(
        Command::new(env!("CARGO_BIN_EXE_callgate"))
            .args(["serve", "--config"])
            .arg(&file)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    callgate::ensure_tls_provider();
    let http = reqwest::Client::new();
    wait_for(&http, &base, "the server to start", |s| {
        s["admission"]["capacity"] == 48
    })
    .await;

    cfg.admission.max_concurrent_calls = MaxCalls::Pinned(7);
    std::fs::write(&file, toml::to_string(&cfg).unwrap()).unwrap();
    signal(&server.0, "-HUP");
    wait_for(&http, &base, "SIGHUP to apply capacity 7", |s| {
        s["admission"]["capacity"] == 7
    })
    .await;

    let load = |n| LoadConfig {
        url: format!("ws://{}/v1/media-stream", cfg.server.listen),
        calls: n,
        utterances: 2,
        progress: false,
        ..LoadConfig::default()
    };
    let live = tokio::spawn(callgate_load::run(load(1)));
    wait_for(&http, &base, "the call to be admitted", |s| {
        s["admission"]["active"] == 1
    })
    .await;
    signal(&server.0, "-TERM");
    wait_for(&http, &base, "the drain to start", |s| {
        s["admission"]["draining"] == true
    })
    .await;
    let ready = http.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 503);
    let refused = callgate_load::run(load(1)).await;
    assert!(
        matches!(&refused.calls[0].outcome, Outcome::Rejected { reason, .. } if reason == "draining"),
        "{:#?}",
        refused.calls[0]
    );
    let live = live.await.unwrap();
    assert_eq!(
        live.calls[0].outcome,
        Outcome::Completed,
        "the live call finished: {:#?}",
        live.calls[0]
    );

    let deadline = Instant::now() + Duration::from_secs(30);
    let code = loop {
        if let Some(code) = server.0.try_wait().unwrap() {
            break code;
        }
        assert!(
            Instant::now() < deadline,
            "server did not exit after the drain"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(code.success(), "exit status {code}");
    let store = state_store::Store::connect(pg.store_config("signals"))
        .await
        .unwrap();
    assert_eq!(store.open_ledger_sessions("signals").await.unwrap(), 0);
    sims.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
