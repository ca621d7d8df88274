//! Pool discipline: a busy pool answers with a typed timeout, and a
//! connection abandoned mid-statement never goes back into the pool.

use crate::common;

use std::time::Duration;

use state_store::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkout_times_out_with_a_typed_error() {
    let env = common::env_with(|c| {
        c.pool_size = 1;
        c.checkout_timeout = Duration::from_millis(200);
        c.statement_timeout = Duration::from_secs(30);
    })
    .await;
    let (call, epoch) = common::open(&env.store).await;
    let locker = common::raw(&env.pg).await;
    common::lock_table(&locker, "call_turns").await;

    // The only connection is now stuck behind the lock.
    let store = env.store.clone();
    let stuck = tokio::spawn(async move { store.apply(&common::turn(call, epoch, 0)).await });
    common::eventually("the pooled connection is blocked", || async {
        common::lock_waiters(&locker).await == 1
    })
    .await;
    assert_eq!(env.store.pool_status().available, 0);

    let err = env.store.ledger(call).await.unwrap_err();
    match &err {
        StoreError::CheckoutTimeout { waited, pool_size } => {
            assert_eq!(*waited, Duration::from_millis(200));
            assert_eq!(*pool_size, 1);
        }
        other => panic!("expected CheckoutTimeout, got {other:?}"),
    }
    assert!(err.is_retryable());
    assert_eq!(err.source_kind(), ErrorSource::Provider);

    locker.batch_execute("COMMIT").await.unwrap();
    assert_eq!(stuck.await.unwrap().unwrap(), WriteOutcome::Applied);
    assert!(env.store.ledger(call).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_statement_discards_its_connection() {
    let env = common::env_with(|c| {
        c.pool_size = 1;
        c.statement_timeout = Duration::from_secs(30);
    })
    .await;
    let (call, epoch) = common::open(&env.store).await;
    assert_eq!(env.store.pool_status().size, 1);
    let locker = common::raw(&env.pg).await;
    common::lock_table(&locker, "call_turns").await;

    // Drop the write future while its statement waits on the lock.
    let write = common::turn(call, epoch, 0);
    tokio::select! {
        res = env.store.apply(&write) => panic!("the write should be blocked, got {res:?}"),
        () = common::eventually("the write is blocked on the lock", || async {
            common::lock_waiters(&locker).await == 1
        }) => {}
    }

    // Not returned to the pool: the pool no longer counts it at all ...
    let status = env.store.pool_status();
    assert_eq!((status.size, status.available), (0, 0));
    // ... and its orphaned statement was cancelled on the server.
    common::eventually("orphaned statement cancelled", || async {
        common::lock_waiters(&locker).await == 0
    })
    .await;

    locker.batch_execute("COMMIT").await.unwrap();
    // A fresh connection serves the retry.
    assert_eq!(
        env.store.apply(&write).await.unwrap(),
        WriteOutcome::Applied
    );
    assert_eq!(env.store.pool_status().size, 1);
    assert_eq!(env.store.turns(call).await.unwrap().len(), 1);
}

/// Ownership heartbeats and the refusal recorder have their own
/// connections: a call pool held busy (setups, a write backlog stuck on a
/// lock) cannot make the lease lapse or lose a refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_call_pool_leaves_the_heartbeat_and_refusals_on_time() {
    let env = common::env_with(|c| {
        c.pool_size = 1;
        c.checkout_timeout = Duration::from_millis(200);
        c.statement_timeout = Duration::from_secs(30);
    })
    .await;
    let boot = BootId::new_random();
    env.store.begin_boot(boot).await.unwrap();
    let (call, epoch) = common::open(&env.store).await;
    let locker = common::raw(&env.pg).await;
    common::lock_table(&locker, "call_turns").await;
    let store = env.store.clone();
    let stuck = tokio::spawn(async move { store.apply(&common::turn(call, epoch, 0)).await });
    common::eventually("the only pooled connection is blocked", || async {
        common::lock_waiters(&locker).await == 1
    })
    .await;
    // The call pool is exhausted: a setup-time read times out ...
    assert!(matches!(
        env.store.ledger(call).await,
        Err(StoreError::CheckoutTimeout { .. })
    ));
    // ... while the beat lands (through the call pool it would have met
    // the same CheckoutTimeout), and a refusal is recorded.
    assert_eq!(env.store.heartbeat(boot).await.unwrap(), Beat::Recorded);
    let refused = Rejection {
        call_id: CallId::new_random(),
        instance: "test-a".into(),
        ingress: "twilio".into(),
        carrier_call_id: None,
        partner_id: None,
        reason: "instance_overloaded".into(),
        waited: Duration::ZERO,
        at: std::time::SystemTime::now(),
    };
    assert_eq!(env.store.record_rejections(&[refused]).await.unwrap(), 1);
    assert_eq!(env.store.control_pool_status().max_size, CONTROL_POOL_SIZE);

    locker.batch_execute("COMMIT").await.unwrap();
    assert_eq!(stuck.await.unwrap().unwrap(), WriteOutcome::Applied);
}
