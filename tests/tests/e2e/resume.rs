//! Caller resume on the partner WebSocket (`docs/partner-protocol.md`,
//! "Resuming a call"): a dropped connection resumed within the window
//! continues the same call; a new connection supersedes one still sending,
//! leaving exactly one live leg and no duplicated turn; unknown, malformed,
//! foreign, used and expired tokens are refused with their reasons; a call
//! not resumed in time ends as a lost connection. Every wait is bounded and
//! waits for an outcome, never for a duration.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use callgate_sim::SimConfig;
use callgate_sim::script::DEFAULT_CALLER_SCRIPT;
use callgate_tests::partner_raw::{self, Caller, Command};
use callgate_tests::{Harness, add_partner, eventually};

async fn harness(window_ms: u64) -> Harness {
    Harness::start(SimConfig::default(), |c| {
        add_partner(c, "acme", "k1", None);
        add_partner(c, "globex", "k2", None);
        c.partner.resume_window_ms = window_ms;
    })
    .await
}

/// A new call as `acme`: its connection and `started`.
async fn call(h: &Harness, call_id: &str) -> (partner_raw::Ws, serde_json::Value) {
    let mut ws = partner_raw::connect(&h.partner_url(), "k1", None)
        .await
        .unwrap();
    partner_raw::start(&mut ws, call_id).await;
    let started = partner_raw::started(&mut ws).await;
    (ws, started)
}

/// The token of a `started`, checked for shape.
fn token(started: &serde_json::Value) -> String {
    let t = started["resume_token"].as_str().expect("a resume token");
    assert_eq!(t.len(), 43, "256 bits, URL-safe base64: {t}");
    t.to_string()
}

/// Waits until the call has at least `caller` caller turns and `bot` bot
/// turns in its transcript; returns the transcript.
async fn turns(
    h: &Harness,
    call_id: &str,
    caller: usize,
    bot: usize,
) -> Vec<(String, String, bool)> {
    let id = eventually(
        Duration::from_secs(15),
        "the ledger row",
        async || h.ledger(call_id).await,
        Option::is_some,
    )
    .await
    .unwrap()
    .call_id;
    eventually(
        Duration::from_secs(30),
        "the transcript's turns",
        async || h.transcript(id).await,
        |t| count(t, "caller") >= caller && count(t, "bot") >= bot,
    )
    .await
}

fn count(t: &[(String, String, bool)], speaker: &str) -> usize {
    t.iter().filter(|x| x.0 == speaker).count()
}

fn caller_turns(t: &[(String, String, bool)]) -> Vec<String> {
    t.iter()
        .filter(|x| x.0 == "caller")
        .map(|x| x.1.clone())
        .collect()
}

/// No turn recorded twice in a row (a leg read twice would repeat one).
fn assert_no_duplicated_turn(t: &[(String, String, bool)]) {
    for pair in t.windows(2) {
        assert_ne!(pair[0], pair[1], "a duplicated turn: {t:#?}");
    }
}

fn metric(text: &str, result: &str) -> u64 {
    let prefix = format!("callgate_partner_resumes_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_resumed_within_the_window_continues_the_same_call() {
    let h = harness(15_000).await;
    let (ws, first) = call(&h, "p-a").await;
    let t1 = token(&first);
    let a = Caller::spawn(ws, 1, 1);
    turns(&h, "p-a", 1, 2).await;
    a.end(Command::Drop).await;
    // Resume once the server has seen the loss (else this would be the
    // superseding case, tested below).
    let id = h.ledger("p-a").await.unwrap().call_id;
    eventually(
        Duration::from_secs(10),
        "the call held for a resume",
        async || h.event_kinds(id).await,
        |k| k.iter().any(|k| k == "carrier_detached"),
    )
    .await;

    let mut ws = partner_raw::connect(&h.partner_url(), "k1", Some(&t1))
        .await
        .unwrap();
    let again = partner_raw::started(&mut ws).await;
    assert_eq!(again["session_id"], first["session_id"], "the same call");
    let t2 = token(&again);
    assert_ne!(t2, t1, "a fresh token for the next resume");
    // The first token was spent by that resume.
    let reused = partner_raw::connect(&h.partner_url(), "k1", Some(&t1)).await;
    let (status, body) = reused.expect_err("a spent token is refused");
    assert_eq!(status, 409, "{body}");
    assert!(body.starts_with("used:"), "{body}");

    let b = Caller::spawn(ws, 2, 10);
    turns(&h, "p-a", 3, 4).await;
    let log = b.end(Command::Hangup).await;
    assert!(
        log.audio_bytes > 0,
        "the bot is heard on the new connection"
    );

    let ledger = h.closed_ledger("p-a").await;
    assert_eq!(ledger.end_reason.as_deref(), Some("caller_hangup"));
    let r = &ledger.stats["resume"];
    assert_eq!(
        (r["gaps"].as_u64(), r["resumed"].as_u64()),
        (Some(1), Some(1)),
        "{r:#}"
    );
    assert_eq!(r["superseded"], 0, "{r:#}");
    assert_eq!(r["duplicate_live_legs"], 0, "{r:#}");
    assert!(r["gap_ms"].as_u64().unwrap() > 0, "{r:#}");
    // Lost audio runs from the old connection's last frame to the new one's
    // first, less one frame: it covers the gap, give or take that frame.
    let lost = r["caller_audio_lost_ms"].as_u64().unwrap();
    assert!(lost + 20 >= r["gap_ms"].as_u64().unwrap(), "{r:#}");
    assert_eq!(
        (r["attempts"].as_u64(), r["refused"].as_u64()),
        (Some(2), Some(1)),
        "{r:#}"
    );

    let t = h.transcript(ledger.call_id).await;
    assert_eq!(
        caller_turns(&t),
        DEFAULT_CALLER_SCRIPT[..3].to_vec(),
        "{t:#?}"
    );
    assert_no_duplicated_turn(&t);
    let kinds = h.event_kinds(ledger.call_id).await;
    for kind in ["carrier_detached", "carrier_attached"] {
        assert!(kinds.iter().any(|k| k == kind), "{kind} missing: {kinds:?}");
    }
    let text = h.metrics_text().await;
    assert_eq!(
        (metric(&text, "resumed"), metric(&text, "used")),
        (1, 1),
        "{text}"
    );
    assert_eq!(
        h.server.carriers.partner_resumes.live(),
        0,
        "no token outlives its call"
    );
    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_connection_supersedes_one_still_sending_and_only_one_leg_stays_live() {
    let h = harness(15_000).await;
    let (ws, first) = call(&h, "p-b").await;
    let t1 = token(&first);
    let a = Caller::spawn(ws, 1, 1);
    turns(&h, "p-b", 1, 2).await;
    assert!(!a.task.is_finished(), "the old connection is still sending");

    let mut ws = partner_raw::connect(&h.partner_url(), "k1", Some(&t1))
        .await
        .unwrap();
    let again = partner_raw::started(&mut ws).await;
    assert_eq!(again["session_id"], first["session_id"]);
    // The old connection is closed by the server, with the reason, while
    // it was still streaming.
    let old = tokio::time::timeout(Duration::from_secs(10), a.task)
        .await
        .expect("the old connection is closed")
        .unwrap();
    assert_eq!(old.close, Some((1000, "superseded".to_string())), "{old:?}");
    let events = old.events();
    assert_eq!(
        events.last().map(String::as_str),
        Some("superseded"),
        "nothing after it: {events:?}"
    );

    let b = Caller::spawn(ws, 1, 10);
    turns(&h, "p-b", 2, 3).await;
    let new = b.end(Command::Hangup).await;
    assert!(
        new.events().iter().any(|e| e == "mark"),
        "the call goes on here: {:?}",
        new.events()
    );

    let ledger = h.closed_ledger("p-b").await;
    assert_eq!(ledger.end_reason.as_deref(), Some("caller_hangup"));
    let r = &ledger.stats["resume"];
    assert_eq!(
        (r["resumed"].as_u64(), r["superseded"].as_u64()),
        (Some(1), Some(1)),
        "{r:#}"
    );
    assert_eq!(
        (r["gaps"].as_u64(), r["gap_ms"].as_u64()),
        (Some(0), Some(0)),
        "{r:#}"
    );
    assert_eq!(r["duplicate_live_legs"], 0, "never two live legs: {r:#}");
    let t = h.transcript(ledger.call_id).await;
    assert_eq!(
        caller_turns(&t),
        DEFAULT_CALLER_SCRIPT[..2].to_vec(),
        "{t:#?}"
    );
    assert_no_duplicated_turn(&t);
    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_unknown_malformed_foreign_or_expired_are_refused_and_an_unresumed_call_ends() {
    let h = harness(1_000).await;
    let url = h.partner_url();
    let (ws, first) = call(&h, "p-c").await;
    let t1 = token(&first);
    let a = Caller::spawn(ws, 0, 1);
    eventually(
        Duration::from_secs(15),
        "the call set up",
        async || h.ledger("p-c").await,
        Option::is_some,
    )
    .await;

    let refused = async |key: &str, token: &str| {
        partner_raw::connect(&url, key, Some(token))
            .await
            .expect_err("refused")
    };
    let (status, body) = refused("k2", &t1).await;
    assert_eq!(
        (status, body.starts_with("wrong_partner:")),
        (403, true),
        "{body}"
    );
    let (status, body) = refused("k1", &"A".repeat(43)).await;
    assert_eq!(
        (status, body.starts_with("unknown:")),
        (404, true),
        "{body}"
    );
    let (status, body) = refused("k1", "not a token").await;
    assert_eq!(
        (status, body.starts_with("malformed:")),
        (400, true),
        "{body}"
    );
    let (status, _) = refused("nobody", &t1).await;
    assert_eq!(status, 401, "authentication comes first");

    // Lost, and not resumed within the window: the call ends as before.
    a.end(Command::Drop).await;
    let ledger = h.closed_ledger("p-c").await;
    assert_eq!(ledger.end_reason.as_deref(), Some("carrier_gone"));
    let r = &ledger.stats["resume"];
    assert_eq!(
        (r["gaps"].as_u64(), r["resumed"].as_u64()),
        (Some(1), Some(0)),
        "{r:#}"
    );
    assert!(
        r["gap_ms"].as_u64().unwrap() >= 1_000,
        "the whole window: {r:#}"
    );
    let lost = r["caller_audio_lost_ms"].as_u64().unwrap();
    assert!(lost + 20 >= 1_000, "no caller audio after the drop: {r:#}");
    assert_eq!(
        (r["attempts"].as_u64(), r["refused"].as_u64()),
        (Some(1), Some(1)),
        "the foreign attempt: {r:#}"
    );

    // The token did not survive its call (the wrong partner did not burn it,
    // the window did).
    let (status, body) = refused("k1", &t1).await;
    assert_eq!(
        (status, body.starts_with("expired:")),
        (410, true),
        "{body}"
    );
    let text = h.metrics_text().await;
    for (result, n) in [
        ("wrong_partner", 1),
        ("unknown", 1),
        ("malformed", 1),
        ("expired", 1),
        ("resumed", 0),
    ] {
        assert_eq!(metric(&text, result), n, "{result}: {text}");
    }
    h.assert_all_closed().await;
    h.stop().await;
}
