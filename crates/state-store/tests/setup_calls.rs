//! Setup-time calls: open_call is retry-safe and ownership-aware, refused
//! calls are countable.

mod common;

use std::time::{Duration, SystemTime};

use state_store::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_call_is_idempotent_for_its_owner_only() {
    let env = common::env().await;
    let call = common::new_call(SystemTime::now());
    let id = call.call_id;
    let first = env.store.open_call(call.clone()).await.unwrap();
    let retry = env.store.open_call(call.clone()).await.unwrap();
    assert_eq!(first, retry);
    assert_eq!(env.store.open_ledger_sessions("test-a").await.unwrap(), 1);

    let other = Store::connect(env.pg.store_config("test-b")).await.unwrap();
    let err = other.open_call(call).await.unwrap_err();
    match err {
        StoreError::CallOwned { call, owner, epoch } => {
            assert_eq!(call, id);
            assert_eq!(owner, "test-a");
            assert_eq!(epoch, first);
        }
        other => panic!("expected CallOwned, got {other:?}"),
    }
    let state = env.store.call_state(id).await.unwrap().unwrap();
    assert!(!state.escalated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejections_are_recorded_once() {
    let env = common::env().await;
    let since = SystemTime::now() - Duration::from_secs(1);
    let rejection = Rejection {
        call_id: CallId::new_random(),
        instance: "test-a".into(),
        ingress: "twilio".into(),
        carrier_call_id: None,
        reason: "queue_timeout".into(),
        waited: Duration::from_millis(4_000),
        at: SystemTime::now(),
    };
    env.store.record_rejection(rejection.clone()).await.unwrap();
    env.store.record_rejection(rejection).await.unwrap(); // a retry
    assert_eq!(
        env.store.rejections_since("test-a", since).await.unwrap(),
        1
    );
    assert_eq!(env.store.open_ledger_sessions("test-a").await.unwrap(), 0);
}
