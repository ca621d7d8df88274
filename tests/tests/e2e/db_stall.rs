//! Postgres stops answering for 10 s in the middle of 20 live calls: the
//! calls keep talking (no silence), writes wait and retry, and afterwards
//! every turn is in the database.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use callgate_load::Outcome;
use callgate_sim::SimConfig;
use callgate_tests::{Harness, load};
use tokio_postgres::NoTls;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_second_database_stall_costs_no_audio_and_no_writes() {
    let h = Harness::start(SimConfig::default(), |_| {}).await;
    let calls = tokio::spawn(callgate_load::run(load(&h, 20, 3)));

    // Let the calls get going, then take every table the writers use.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (mut locker, conn) = tokio_postgres::connect(&h.conninfo(), NoTls).await.unwrap();
    tokio::spawn(conn);
    let tx = locker.transaction().await.unwrap();
    tx.batch_execute(
        "LOCK TABLE call_ledger, call_turns, call_events, call_slots, call_state, admission_rejections \
         IN ACCESS EXCLUSIVE MODE",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let backlog_during_stall = h.server.app.call.writes.backlog();
    tx.commit().await.unwrap();

    let report = calls.await.unwrap();
    assert_eq!(report.summary.silent, 0, "{:#?}", report.summary);
    assert!(
        report.calls.iter().all(|c| c.outcome == Outcome::Completed),
        "{:#?}",
        report.calls
    );
    assert!(
        backlog_during_stall > 0,
        "writes queued behind the stall instead of blocking calls"
    );

    for c in &report.calls {
        let ledger = h.closed_ledger(&c.call_sid.to_string()).await;
        assert_eq!(ledger.cleanup_status, "completed");
        assert_eq!(ledger.stats["writes_lost"], 0, "{:#}", ledger.stats);
        let turns = h.transcript(ledger.call_id).await;
        assert_eq!(turns.len(), 7, "greeting + 3 × (caller, bot): {turns:#?}");
    }
    h.assert_all_closed().await;
    h.stop().await;
}
