//! Setup-time calls: open_call is retry-safe and ownership-aware, refused
//! calls are countable.

use crate::common;

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
        partner_id: None,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_partner_is_recorded_on_the_ledger_and_on_rejections() {
    let env = common::env().await;
    let with = NewCall {
        partner_id: Some("partner-acme".into()),
        ..common::new_call(SystemTime::now())
    };
    let without = common::new_call(SystemTime::now());
    env.store.open_call(with.clone()).await.unwrap();
    env.store.open_call(without.clone()).await.unwrap();
    let row = env.store.ledger(with.call_id).await.unwrap().unwrap();
    assert_eq!(row.partner_id.as_deref(), Some("partner-acme"));
    assert_eq!(row.carrier_call_id.as_deref(), Some("CA123"));
    let row = env.store.ledger(without.call_id).await.unwrap().unwrap();
    assert_eq!(row.partner_id, None);

    let rejection = |partner: Option<&str>| Rejection {
        call_id: CallId::new_random(),
        instance: "test-a".into(),
        ingress: "partner".into(),
        carrier_call_id: None,
        partner_id: partner.map(str::to_owned),
        reason: "queue_full".into(),
        waited: Duration::ZERO,
        at: SystemTime::now(),
    };
    let single = rejection(Some("partner-acme"));
    let batch = [rejection(Some("partner-globex")), rejection(None)];
    env.store.record_rejection(single.clone()).await.unwrap();
    assert_eq!(env.store.record_rejections(&batch).await.unwrap(), 2);

    let raw = common::raw(&env.pg).await;
    for r in [&single, &batch[0], &batch[1]] {
        let got: Option<String> = raw
            .query_one(
                "SELECT partner_id FROM admission_rejections WHERE call_id = $1",
                &[&r.call_id.0],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(got, r.partner_id);
    }
    // Per-partner ledger queries have a partial index.
    let def: String = raw
        .query_one(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'call_ledger_partner_id_idx'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        def.contains("(partner_id)") && def.contains("WHERE (partner_id IS NOT NULL)"),
        "{def}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_are_read_by_instance_and_time_window() {
    let env = common::env().await;
    let now = SystemTime::now();
    let (from, to) = (now - Duration::from_secs(60), now + Duration::from_secs(60));
    let admitted = common::new_call(now);
    env.store.open_call(admitted.clone()).await.unwrap();
    let before = common::new_call(from - Duration::from_secs(1));
    env.store.open_call(before).await.unwrap();
    let refused = |instance: &str, at: SystemTime| Rejection {
        call_id: CallId::new_random(),
        instance: instance.into(),
        ingress: "twilio".into(),
        carrier_call_id: Some("CA-refused".into()),
        partner_id: None,
        reason: "queue_full".into(),
        waited: Duration::from_millis(250),
        at,
    };
    env.store
        .record_rejection(refused("test-a", now))
        .await
        .unwrap();
    env.store
        .record_rejection(refused("test-b", now))
        .await
        .unwrap();
    env.store
        .record_rejection(refused("test-a", to + Duration::from_secs(1)))
        .await
        .unwrap();

    let got = env
        .store
        .outcomes_between("test-a", from, to)
        .await
        .unwrap();
    assert_eq!(
        got,
        vec![
            CallOutcome {
                table: OutcomeTable::Ledger,
                carrier_call_id: admitted.carrier_call_id,
                reason: None,
                wait: admitted.admission_wait,
            },
            CallOutcome {
                table: OutcomeTable::Rejections,
                carrier_call_id: Some("CA-refused".into()),
                reason: Some("queue_full".into()),
                wait: Duration::from_millis(250),
            },
        ]
    );
}
