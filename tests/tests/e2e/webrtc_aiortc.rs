//! Conformance with an outside WebRTC stack: aiortc 1.16 (pinned in
//! `tests/python/requirements.txt`; Pipecat's SmallWebRTC transport is
//! built on it), driven by `tests/python/aiortc_conformance.py`, a client
//! written from `docs/webrtc.md` alone. At the default WebRTC
//! configuration unless a case says otherwise:
//!
//! - a call speaks three sentences, hears the bot, and hangs up with
//!   `DELETE`: the ledger holds the sentences and the replies, `caller_hangup`;
//! - a client that vanishes (SIGKILL: nothing more is sent) ends
//!   `consent_lost`, never `carrier_media_stalled`, within
//!   `webrtc.consent_timeout_ms` + one consent interval (aiortc checks every
//!   5 s) of the vanish;
//! - `pc.close()` without `DELETE` (DTLS close_notify, RTCP BYE) ends the
//!   call at once as `caller_hangup`;
//! - an offer over capacity gets `503`, `Retry-After` and the reason, and
//!   an offer whose answer is never applied ends `ice_failed` at
//!   `webrtc.ice_timeout_ms`.
//!
//! In every case the session status and the receipt name the same ending.

#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::process::Stdio;
use std::time::{Duration, Instant};

use callgate::config::{Config, MaxCalls};
use callgate_rig::process::Scratch;
use callgate_sim::SimConfig;
use callgate_tests::Harness;
use callgate_tests::chromium::caller_wav;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

const LINES: [&str; 3] = [
    "I would like to book a table for two",
    "Seven o'clock tonight please",
    "Thank you very much",
];

/// aiortc's consent check interval (aioice `CONSENT_INTERVAL`).
const CONSENT_INTERVAL: Duration = Duration::from_secs(5);

fn webrtc(cfg: &mut Config) {
    cfg.webrtc.enabled = true;
    cfg.webrtc.listen = "127.0.0.1:0".parse().unwrap();
    cfg.webrtc.open = true;
}

async fn harness(tweak: impl FnOnce(&mut Config)) -> Harness {
    let mut sim = SimConfig::default();
    sim.stt.script = LINES.iter().map(|s| s.to_string()).collect();
    Harness::start(sim, |c| {
        webrtc(c);
        tweak(c);
    })
    .await
}

/// The client, running one scenario, and its event lines.
struct Client {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    seen: Vec<Value>,
}

impl Client {
    async fn start(h: &Harness, scenario: &str, extra: &[&str]) -> Client {
        let python = callgate_tests::python_venv().await.join("bin/python");
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/aiortc_conformance.py");
        let mut child = Command::new(python)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .arg(script)
            .args(["--base", &format!("http://{}", h.server.addr)])
            .args(["--scenario", scenario])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("starting the venv's python");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Client {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The next event named `name` (earlier ones are kept in `seen`).
    /// Panics on the client's `error` event, its exit, or after `within`.
    async fn event(&mut self, name: &str, within: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("no {name:?} within {within:?}: {:#?}", self.seen))
                .unwrap();
            let Some(line) = line else {
                panic!("the client exited before {name:?}: {:#?}", self.seen);
            };
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::String(line));
            self.seen.push(v.clone());
            assert_ne!(v["event"], "error", "the client failed: {:#?}", self.seen);
            if v["event"] == name {
                return v;
            }
        }
    }

    /// Waits for the client to finish on its own, successfully.
    async fn finished(mut self) -> Vec<Value> {
        self.event("done", Duration::from_secs(30)).await;
        let status = self.child.wait().await.unwrap();
        assert!(status.success(), "{status}: {:#?}", self.seen);
        self.seen
    }
}

/// The session's status (`GET` on its URL): the HTTP status and body.
async fn status(url: &str) -> (u16, Value) {
    callgate::ensure_tls_provider();
    let r = reqwest::get(url).await.unwrap();
    let code = r.status().as_u16();
    (code, r.json().await.unwrap_or_default())
}

/// The receipt's end reason once the call's receipt is closed.
async fn receipt_end(h: &Harness, session_url: &str) -> String {
    let session = session_url.rsplit('/').next().unwrap();
    let l = h.closed_ledger(session).await;
    assert_eq!(l.cleanup_status, "completed", "{:#}", l.stats);
    l.end_reason.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aiortc_calls_speaks_hears_the_bot_and_hangs_up() {
    let h = harness(|_| {}).await;
    let dir = Scratch::new("aiortc-call").unwrap();
    let wav = caller_wav(&dir.path, &LINES, 4.0, 5.0);
    let args = ["--wav", wav.to_str().unwrap(), "--talk-s", "28"];
    let mut client = Client::start(&h, "call", &args).await;
    let answered = client.event("answered", Duration::from_secs(20)).await;
    let url = answered["session"].as_str().unwrap().to_string();
    client.event("bot_heard", Duration::from_secs(30)).await;
    let before = client.event("before_hangup", Duration::from_secs(60)).await;
    assert_eq!(before["state"], "admitted", "{before}");
    // Seven seconds of bot audio at the least: the greeting and three replies.
    assert!(before["loud_frames"].as_u64().unwrap() > 350, "{before}");
    let seen = client.finished().await;
    let deleted = seen.iter().find(|e| e["event"] == "deleted").unwrap();
    assert_eq!(deleted["status"], 200);
    assert_eq!(receipt_end(&h, &url).await, "caller_hangup");
    let (code, s) = status(&url).await;
    assert_eq!(
        (code, s["end_reason"].as_str()),
        (200, Some("caller_hangup"))
    );
    let id: uuid::Uuid = s["call_id"].as_str().unwrap().parse().unwrap();
    let t = h.transcript(id).await;
    let caller: Vec<&str> = t
        .iter()
        .filter(|(who, _, _)| who == "caller")
        .map(|(_, text, _)| text.as_str())
        .collect();
    assert_eq!(caller, LINES, "{t:#?}");
    let bot = t.iter().filter(|(who, _, _)| who == "bot").count();
    assert!(bot >= 4, "the greeting and three replies: {t:#?}");
    h.assert_webrtc_clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aiortc_client_that_vanishes_ends_consent_lost_within_the_documented_bound() {
    let h = harness(|_| {}).await;
    let consent = Duration::from_millis(Config::default().webrtc.consent_timeout_ms);
    assert_eq!(consent, Duration::from_secs(10), "the documented default");
    let mut client = Client::start(&h, "vanish", &[]).await;
    let answered = client.event("answered", Duration::from_secs(20)).await;
    let url = answered["session"].as_str().unwrap().to_string();
    client.event("ready", Duration::from_secs(30)).await;
    client.child.start_kill().unwrap();
    let vanished = Instant::now();
    client.child.wait().await.unwrap();
    let (code, s) = callgate_tests::eventually(
        consent + CONSENT_INTERVAL + Duration::from_secs(5),
        "the vanished client's session ending",
        async || status(&url).await,
        |(_, s)| s["state"] == "ended",
    )
    .await;
    let took = vanished.elapsed();
    assert_eq!(
        (code, s["end_reason"].as_str()),
        (200, Some("consent_lost"))
    );
    // The last check came at most one interval before the vanish.
    assert!(
        took >= consent - CONSENT_INTERVAL && took <= consent + CONSENT_INTERVAL,
        "ended {took:?} after the vanish"
    );
    assert_eq!(receipt_end(&h, &url).await, "consent_lost");
    h.assert_webrtc_clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aiortc_close_without_delete_is_a_hang_up_at_once() {
    let h = harness(|_| {}).await;
    let mut client = Client::start(&h, "close", &[]).await;
    let answered = client.event("answered", Duration::from_secs(20)).await;
    let url = answered["session"].as_str().unwrap().to_string();
    let ended = client.event("ended", Duration::from_secs(30)).await;
    assert_eq!(ended["code"], 200, "{ended}");
    assert_eq!(ended["end_reason"], "caller_hangup", "{ended}");
    // "At once": well inside the 5 s any stall rule would take.
    let after = ended["after_ms"].as_u64().unwrap();
    assert!(after < 2_000, "ended {after} ms after close()");
    eprintln!("aiortc close() → status ended in {after} ms");
    client.finished().await;
    assert_eq!(receipt_end(&h, &url).await, "caller_hangup");
    h.assert_webrtc_clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aiortc_over_capacity_is_refused_and_an_answer_never_applied_ends_ice_failed() {
    let h = harness(|c| {
        c.admission.max_concurrent_calls = MaxCalls::Pinned(1);
        c.admission.queue_max = 0;
        c.webrtc.retry_after_s = 13;
        c.webrtc.ice_timeout_ms = 1_500;
    })
    .await;
    let mut client = Client::start(&h, "refusal", &[]).await;
    let refused = client.event("refused", Duration::from_secs(40)).await;
    assert_eq!(refused["status"], 503, "{refused}");
    assert_eq!(refused["retry_after"], "13", "{refused}");
    assert_eq!(refused["body"]["reason"], "queue_full", "{refused}");
    let id = refused["body"]["call_id"].as_str().unwrap().to_string();
    client.finished().await;
    let (code, found) = h.admin_json(&format!("/v1/sessions/{id}")).await;
    assert_eq!((code, found["outcome"].as_str()), (200, Some("refused")));

    let mut client = Client::start(&h, "no-ice", &[]).await;
    let ended = client.event("ended", Duration::from_secs(30)).await;
    assert_eq!(ended["end_reason"], "ice_failed", "{ended}");
    let after = ended["after_ms"].as_u64().unwrap();
    assert!(
        (1_500..6_000).contains(&after),
        "ended {after} ms after the POST"
    );
    let seen = client.finished().await;
    let posted = seen.iter().find(|e| e["event"] == "posted").unwrap();
    assert_eq!(posted["status"], 201);
    let id: uuid::Uuid = ended["call_id"].as_str().unwrap().parse().unwrap();
    let row =
        h.db.query_one(
            "SELECT end_reason FROM call_ledger WHERE call_id = $1",
            &[&id],
        )
        .await
        .unwrap();
    assert_eq!(
        row.get::<_, Option<String>>(0).as_deref(),
        Some("ice_failed")
    );
    h.assert_webrtc_clear().await;
}
