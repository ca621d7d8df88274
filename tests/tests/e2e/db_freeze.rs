//! Postgres frozen whole (SIGSTOP: the postmaster and every backend) for
//! 30 s while 20 calls are live and 10 more arrive. A frozen database does
//! not refuse, it hangs: open connections stop answering and new ones are
//! never accepted. The live calls keep talking (nobody hears dead air), the
//! arrivals are either set up once it thaws or refused through the overflow
//! path (they hear the "high call volume" prompt), and after SIGCONT every
//! turn of every call that was set up is in the database and every receipt
//! is closed.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use callgate_load::{Arrival, CallRecord, LoadConfig, LoadReport, Outcome};
use callgate_sim::SimConfig;
use callgate_tests::{Harness, eventually, load};

/// How long Postgres stays frozen.
const FREEZE: Duration = Duration::from_secs(30);
/// Calls live when the freeze begins.
const LIVE: usize = 20;
/// Calls dialled while Postgres is frozen.
const ARRIVALS: usize = 10;
/// The arrivals are spread over the freeze, the last ones close to the
/// thaw, so that some may be set up once it thaws.
const ARRIVAL_DELAY: Duration = Duration::from_secs(2);
const ARRIVALS_PER_S: f64 = 1.0 / 3.0;
/// Bound on the whole scenario (it takes about 75 s).
const SCENARIO_LIMIT: Duration = Duration::from_secs(240);

/// What the callers say: two lines that fill slots (writes of their own),
/// then lines the bot cannot use, so no call books a table and ends early;
/// the script cycles for as many utterances as a call is planned with.
const SCRIPT: &[&str] = &[
    "Hi, I'd like to book a table for four people.",
    "The name is Alex Morgan.",
    "Hmm, I am still deciding.",
    "Sorry, the line is bad here.",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thirty_second_database_freeze_costs_no_audio_and_no_turns() {
    tokio::time::timeout(SCENARIO_LIMIT, scenario())
        .await
        .expect("the freeze scenario finished within its bound");
}

async fn scenario() {
    let mut sim = SimConfig::default();
    sim.stt.script = SCRIPT.iter().map(|s| (*s).to_string()).collect();
    let h = Harness::start(sim, |_| {}).await;

    // 20 calls of 6..=10 utterances (about 40–70 s): some end while the
    // database is frozen (their receipts wait in the queue), most span it.
    let live_cfg = LoadConfig {
        utterances_max: Some(10),
        think_ms: (800, 1_500),
        seed: 11,
        ..load(&h, LIVE, 6)
    };
    let silence = live_cfg.silence_threshold;
    let live = tokio::spawn(callgate_load::run(live_cfg));
    wait_until_live(&h).await;

    let frozen = h.freeze_database();
    let frozen_at = tokio::time::Instant::now();
    let arrivals_cfg = LoadConfig {
        arrival: Arrival::Rate {
            per_second: ARRIVALS_PER_S,
        },
        seed: 12,
        ..load(&h, ARRIVALS, 2)
    };
    let arrivals = tokio::spawn(async move {
        tokio::time::sleep(ARRIVAL_DELAY).await;
        callgate_load::run(arrivals_cfg).await
    });
    tokio::time::sleep_until(frozen_at + FREEZE).await;
    // Calls kept talking, so turns were submitted while nothing could land.
    let backlog_frozen = h.server.app.call.writes.backlog();
    let active_frozen = h.server.app.call.gate.snapshot().active;
    frozen.thaw().expect("thaw Postgres");

    let live = live.await.unwrap();
    let arrivals = arrivals.await.unwrap();
    assert!(
        backlog_frozen > 0,
        "turns were queued behind the freeze, not lost or blocking"
    );
    assert!(
        active_frozen as usize >= LIVE / 2,
        "calls were live during the freeze: {active_frozen}"
    );
    assert_no_silence(&live, silence);
    assert_no_silence(&arrivals, silence);
    assert_live_calls_completed(&live);
    let set_up = assert_arrivals_served_or_refused(&arrivals);
    for call in live.calls.iter().chain(set_up) {
        assert_every_turn_recorded(&h, call).await;
    }
    let refused: Vec<&CallRecord> = arrivals.calls.iter().filter(|c| !is_served(c)).collect();
    let unrecorded = refusals_without_receipt(&h, &refused).await;
    assert_no_open_receipts(&h).await;
    h.assert_all_closed().await;
    // Last, so that a failure here means everything above held.
    assert_refusals_recorded(&h, &unrecorded).await;
    h.stop().await;
}

/// Waits (bounded) until all 20 calls are admitted and their greeting has
/// been played (the ledger says so): the freeze then hits live calls.
async fn wait_until_live(h: &Harness) {
    let sql = "SELECT count(*) FROM call_ledger \
               WHERE owner_instance = $1 AND first_playable_audio_at IS NOT NULL";
    eventually(
        Duration::from_secs(30),
        "every call admitted and greeted",
        async || {
            let row = h.db.query_one(sql, &[&h.instance]).await.unwrap();
            let greeted: i64 = row.get(0);
            (greeted, h.server.app.call.gate.snapshot().active)
        },
        |&(greeted, active)| greeted == LIVE as i64 && active as usize == LIVE,
    )
    .await;
}

fn assert_no_silence(report: &LoadReport, threshold: Duration) {
    assert_eq!(report.summary.silent, 0, "{:#?}", report.summary);
    for c in &report.calls {
        assert!(
            !matches!(c.outcome, Outcome::Silent { .. }),
            "silent call: {c:#?}"
        );
        assert!(
            u128::from(c.max_owed_silence_ms) < threshold.as_millis(),
            "{} ms of owed silence: {c:#?}",
            c.max_owed_silence_ms
        );
    }
}

fn assert_live_calls_completed(report: &LoadReport) {
    for c in &report.calls {
        assert_eq!(c.outcome, Outcome::Completed, "{c:#?}");
        assert_eq!(c.utterances_sent, c.utterances_planned, "{c:#?}");
        assert_eq!(c.replies_heard, c.utterances_planned, "{c:#?}");
    }
}

fn is_served(c: &CallRecord) -> bool {
    c.outcome == Outcome::Completed
}

/// Each arrival either completed its conversation or was refused because
/// its state could not be opened, and heard the whole overflow prompt.
/// Returns the arrivals that were set up.
fn assert_arrivals_served_or_refused(report: &LoadReport) -> Vec<&CallRecord> {
    assert_eq!(report.calls.len(), ARRIVALS);
    for c in &report.calls {
        match &c.outcome {
            Outcome::Completed => assert_eq!(c.replies_heard, c.utterances_planned, "{c:#?}"),
            Outcome::Rejected {
                reason,
                prompt_heard,
                ..
            } => {
                assert_eq!(reason, "setup_failed:state", "{c:#?}");
                assert!(prompt_heard, "the overflow prompt must be heard: {c:#?}");
            }
            other => panic!("an arrival neither served nor refused: {other:?}: {c:#?}"),
        }
    }
    report.calls.iter().filter(|c| is_served(c)).collect()
}

/// The call's receipt is closed with nothing lost, and its transcript holds
/// every turn the caller took part in: the greeting, each utterance the
/// caller spoke and each reply the caller heard.
async fn assert_every_turn_recorded(h: &Harness, c: &CallRecord) {
    let ledger = h.closed_ledger(&c.call_sid.to_string()).await;
    assert_eq!(ledger.cleanup_status, "completed", "{ledger:#?}");
    assert_eq!(ledger.stats["writes_lost"], 0, "{:#}", ledger.stats);
    let turns = h.transcript(ledger.call_id).await;
    let spoken = |who: &str| turns.iter().filter(|t| t.0 == who).count();
    let greeting = usize::from(c.greeting_audio_ms.is_some());
    assert_eq!(greeting, 1, "the greeting was heard: {c:#?}");
    assert_eq!(spoken("caller"), c.utterances_sent, "{turns:#?}\n{c:#?}");
    assert_eq!(
        spoken("bot"),
        c.replies_heard + greeting,
        "{turns:#?}\n{c:#?}"
    );
    assert_eq!(turns.len(), c.utterances_sent + c.replies_heard + greeting);
}

/// The refused arrivals that have no ledger row (the usual case: setup
/// gave up before the row existed). One that has a row must have it closed
/// with the refusal as its end reason.
async fn refusals_without_receipt<'a>(
    h: &Harness,
    refused: &[&'a CallRecord],
) -> Vec<&'a CallRecord> {
    let mut unrecorded = Vec::new();
    for &c in refused {
        let sid = c.call_sid.to_string();
        if h.ledger(&sid).await.is_none() {
            unrecorded.push(c);
            continue;
        }
        let closed = h.closed_ledger(&sid).await;
        assert_eq!(
            closed.end_reason.as_deref(),
            Some("setup_failed:state"),
            "a refused call's receipt names the refusal: {closed:#?}"
        );
    }
    unrecorded
}

/// Every refusal without a receipt is countable: a row in
/// `admission_rejections` naming why.
async fn assert_refusals_recorded(h: &Harness, refused: &[&CallRecord]) {
    let reasons = eventually(
        Duration::from_secs(15),
        "every refusal recorded",
        async || {
            let mut reasons = Vec::new();
            for c in refused {
                reasons.push((
                    c.call_sid.to_string(),
                    h.rejections(&c.call_sid.to_string()).await,
                ));
            }
            reasons
        },
        |r| r.iter().all(|(_, reasons)| !reasons.is_empty()),
    )
    .await;
    for (sid, reasons) in reasons {
        assert_eq!(reasons, ["setup_failed:state"], "{sid}");
    }
}

/// No receipt of this instance is left pending — including rows for calls
/// whose setup gave up while their INSERT sat in a frozen backend.
async fn assert_no_open_receipts(h: &Harness) {
    let open = eventually(
        Duration::from_secs(15),
        "no pending receipts",
        async || {
            h.server
                .app
                .call
                .store
                .open_ledger_sessions(&h.instance)
                .await
        },
        |n| matches!(n, Ok(0)),
    )
    .await;
    assert!(matches!(open, Ok(0)));
}
