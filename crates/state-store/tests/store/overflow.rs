//! A full shard queue rejects at once and counts the loss against the call;
//! the accepted writes still land and the close records the loss.

use crate::common;

use std::time::{Duration, SystemTime};

use serde_json::json;
use state_store::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excess_writes_are_rejected_and_counted() {
    let env = common::env_with(|c| c.statement_timeout = Duration::from_secs(30)).await;
    let store = &env.store;
    let (call, epoch) = common::open(store).await;
    let cfg = WriteBehindConfig {
        writers: 1,
        queue_per_writer: 4,
        batch_max: 1,
        ..WriteBehindConfig::default()
    };
    let (writes, writers) = WriteBehind::start(store, cfg);
    let locker = common::raw(&env.pg).await;
    common::lock_table(&locker, "call_turns").await;

    // The first write is taken by the writer and blocks on the lock ...
    writes.submit(common::turn(call, epoch, 0)).unwrap();
    common::eventually("writer blocked on the lock", || async {
        common::lock_waiters(&locker).await == 1
    })
    .await;
    // ... so exactly `queue_per_writer` more fit, and the rest bounce at once.
    let mut rejected = 0;
    for seq in 1..20 {
        match writes.submit(common::turn(call, epoch, seq)) {
            Ok(()) => {}
            Err(WriteRejected::QueueFull {
                call: c,
                shard,
                capacity,
            }) => {
                assert_eq!((c, shard, capacity), (call, 0, 4));
                rejected += 1;
            }
            Err(other) => panic!("unexpected rejection {other:?}"),
        }
    }
    assert_eq!(rejected, 15);
    assert_eq!(writes.lost_for(call), 15);
    assert_eq!(writes.backlog(), 5);
    locker.batch_execute("COMMIT").await.unwrap();

    common::eventually("accepted writes landed", || async { writes.backlog() == 0 }).await;
    let seqs: Vec<u32> = store
        .turns(call)
        .await
        .unwrap()
        .iter()
        .map(|t| t.seq)
        .collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 4]);
    assert_eq!(writes.stats().lost, 15);

    // The close carries the call's loss count into the ledger receipt.
    let close = Write::Close {
        call,
        epoch,
        end_reason: "caller_hangup".into(),
        cleanup_status: CleanupStatus::Completed,
        cleanup_completed_at: SystemTime::now(),
        stats: json!({}),
    };
    writes.submit(close.clone()).unwrap();
    assert!(writers.drain(common::PATIENCE).await.completed);
    let ledger = store.ledger(call).await.unwrap().unwrap();
    assert_eq!(ledger.stats["writes_lost"], json!(15));
    assert_eq!(writes.lost_for(call), 0, "count moved to the ledger");

    // A repeated close (here applied directly, knowing no losses) cannot
    // erase the recorded count.
    assert_eq!(store.apply(&close).await.unwrap(), WriteOutcome::Applied);
    let ledger = store.ledger(call).await.unwrap().unwrap();
    assert_eq!(ledger.stats["writes_lost"], json!(15));
}
