//! Drain finishes the backlog within its deadline, or says what it cut off.

use crate::common;

use std::time::Duration;

use state_store::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_past_its_deadline_reports_abandoned_writes() {
    let env = common::env_with(|c| c.statement_timeout = Duration::from_secs(30)).await;
    let (call, epoch) = common::open(&env.store).await;
    let cfg = WriteBehindConfig {
        writers: 1,
        ..WriteBehindConfig::default()
    };
    let (writes, writers) = WriteBehind::start(&env.store, cfg);
    let locker = common::raw(&env.pg).await;
    common::lock_table(&locker, "call_turns").await;
    for seq in 0..10 {
        writes.submit(common::turn(call, epoch, seq)).unwrap();
    }
    let report = writers.drain(Duration::from_millis(300)).await;
    assert!(!report.completed);
    assert_eq!(report.abandoned, 10);
    assert_eq!(report.stats.lost, 10);
    assert_eq!(report.stats.backlog, 0);
    assert!(matches!(
        writes.submit(common::turn(call, epoch, 10)),
        Err(WriteRejected::Stopped { .. })
    ));
    locker.batch_execute("ROLLBACK").await.unwrap();
}
