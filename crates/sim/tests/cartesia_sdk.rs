//! Conformance with Cartesia's own client: the official `cartesia` Python
//! SDK (4.2.0, pinned in `tests/python/requirements.txt`) drives the
//! simulator over loopback with the SDK's defaults — its API version, its
//! Bearer authentication, its default model, output format and voice
//! forms — and validates every message against the SDK's response models
//! (`tests/python/cartesia_sdk_conformance.py`). Here the simulator's own
//! records are checked against what the SDK did.
//!
//! The venv is made by `.ci/python-venv` (a no-op when it is current);
//! `.ci/run` has made it before the tests run.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use callgate_sim::cartesia::{CartesiaSim, CartesiaSimConfig};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

const KEY: &str = "sk_car_sdk_conformance";

/// Making the venv downloads ~3 MB from PyPI the first time.
const VENV_TIMEOUT: Duration = Duration::from_secs(300);
/// The checks take about 5 s; the bound is for a stuck SDK call.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

async fn venv_python() -> PathBuf {
    let root = repo();
    let made = tokio::time::timeout(
        VENV_TIMEOUT,
        Command::new("bash")
            .arg(root.join(".ci/python-venv"))
            .kill_on_drop(true)
            .status(),
    )
    .await
    .expect("making the Python venv timed out")
    .expect("running .ci/python-venv (bash)");
    assert!(
        made.success(),
        ".ci/python-venv failed ({made}): it needs python3 with the venv module (Debian python3-venv) and PyPI"
    );
    let venv = std::env::var_os("CALLGATE_PYTHON_VENV")
        .map_or_else(|| root.join("target/python-venv"), PathBuf::from);
    venv.join("bin/python")
}

#[tokio::test]
async fn the_official_sdk_speaks_to_the_simulator_with_its_defaults() {
    let python = venv_python().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("bound address");
    let sim = CartesiaSim::new(CartesiaSimConfig {
        api_key: Some(KEY.into()),
        max_concurrent_contexts: Some(2),
        ..CartesiaSimConfig::default()
    });
    let cancel = CancellationToken::new();
    tokio::spawn(sim.clone().serve(listener, cancel.clone()));

    let script = repo().join("tests/python/cartesia_sdk_conformance.py");
    let run = Command::new(&python)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .arg(&script)
        .args(["--url", &format!("ws://{addr}"), "--key", KEY])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(RUN_TIMEOUT, run)
        .await
        .expect("the SDK checks timed out")
        .expect("running the venv's python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no summary ({e}):\n{stdout}\n{stderr}"));
    let passed: Vec<&str> = summary["passed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        passed,
        [
            "async",
            "bad_model",
            "cancel",
            "concurrency",
            "flush",
            "readme_stream",
            "timestamps",
            "unknown_voice",
            "wrong_key"
        ],
        "{stdout}"
    );

    // What the simulator saw: every socket on the SDK's version, every
    // context in the SDK's default format, the wrong key refused before
    // a socket, the third context refused at the cap.
    let sockets = sim.sessions();
    assert_eq!(sockets.len(), 8, "one socket per check but the wrong key");
    assert!(
        sockets.iter().all(|s| s.version == "2026-08-14"),
        "{sockets:#?}"
    );
    let stats = sim.stats();
    assert_eq!(stats.rejected_contexts, 1, "{stats:#?}");
    assert_eq!(stats.open_contexts, 0, "every context ended: {stats:#?}");
    assert!(
        stats.output_formats.keys().all(|f| f == "pcm_f32le_44100"),
        "{stats:#?}"
    );
    let heard = summary["results"]["readme_stream"]["audio_s"]
        .as_f64()
        .unwrap();
    assert!((heard - 29.0 / 15.0).abs() < 0.2, "{heard}");
    cancel.cancel();
}
