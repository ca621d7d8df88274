//! A stalled table: submitters never wait, the backlog absorbs the stall,
//! writers retry (server-side statement_timeout) and everything lands.

use crate::common;

use std::time::Duration;

use state_store::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_table_delays_writes_but_loses_none() {
    // Short statement timeout: blocked writes are cancelled by the server
    // and retried with backoff, exercising the retry path.
    let env = common::env_with(|c| c.statement_timeout = Duration::from_millis(300)).await;
    let store = &env.store;
    let mut calls = Vec::new();
    for _ in 0..8 {
        calls.push(common::open(store).await);
    }
    let (writes, writers) = WriteBehind::start(store, WriteBehindConfig::default());

    let locker = common::raw(&env.pg).await;
    common::lock_table(&locker, "call_turns").await;

    // If submit ever waited on Postgres this would hang until the timeout,
    // because the lock is only released after the loop.
    let submitting = async {
        for seq in 0..25 {
            for &(call, epoch) in &calls {
                writes.submit(common::turn(call, epoch, seq)).unwrap();
            }
        }
    };
    tokio::time::timeout(common::PATIENCE, submitting)
        .await
        .expect("submit blocked while the table was locked");
    assert_eq!(writes.backlog(), 200, "nothing can land while locked");

    // Hold the lock long enough for several statement timeouts + retries.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(writes.backlog(), 200);
    assert_eq!(writes.stats().applied, 0);
    locker.batch_execute("COMMIT").await.unwrap();

    common::eventually("backlog drained", || async { writes.backlog() == 0 }).await;
    let stats = writes.stats();
    assert_eq!(stats.lost, 0);
    assert_eq!(stats.applied, 200);
    assert!(
        stats.retries > 0,
        "statement timeouts should have forced retries"
    );
    for &(call, _) in &calls {
        let seqs: Vec<u32> = store
            .turns(call)
            .await
            .unwrap()
            .iter()
            .map(|t| t.seq)
            .collect();
        assert_eq!(seqs, (0..25).collect::<Vec<_>>());
        assert_eq!(writes.lost_for(call), 0);
    }
    assert!(writers.drain(common::PATIENCE).await.completed);
}
