//! Retention on a real Postgres: transcripts, raw events and receipts each
//! follow their own `[retention]` window; an open receipt is never purged,
//! however old; a second pass finds nothing left to delete.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::{Duration, SystemTime};

use callgate::config::RetentionConfig;
use callgate::retention::{Purged, purge_once};
use callgate_rig::Database;
use state_store::{
    CallId, CleanupStatus, LocalOptions, NewCall, OwnerEpoch, Rejection, Speaker, Store,
    StoreConfig, Write,
};

const DAY: Duration = Duration::from_secs(86_400);

/// One call admitted `age` ago with two turns, one slot and three events;
/// closed unless `open`.
async fn call(store: &Store, now: SystemTime, age: Duration, open: bool) -> CallId {
    let admitted = now - age;
    let call = CallId::new_random();
    let epoch = store
        .open_call(NewCall {
            call_id: call,
            ingress: "twilio".into(),
            carrier_call_id: None,
            partner_id: None,
            admitted_at: admitted,
            admission_wait: Duration::ZERO,
            stats: serde_json::json!({"transport": "websocket"}),
        })
        .await
        .unwrap();
    for w in writes(call, epoch, admitted, open) {
        store.apply(&w).await.unwrap();
    }
    call
}

fn writes(call: CallId, epoch: OwnerEpoch, at: SystemTime, open: bool) -> Vec<Write> {
    let mut w = Vec::new();
    for seq in 1..=2 {
        w.push(Write::Turn {
            call,
            epoch,
            seq,
            speaker: Speaker::Caller,
            text: format!("turn {seq}"),
            started_at: at,
            ended_at: at,
            interrupted: false,
            latency: None,
        });
    }
    w.push(Write::Slot {
        call,
        epoch,
        name: "party_size".into(),
        value: "2".into(),
        at,
    });
    for seq in 1..=3 {
        w.push(Write::Event {
            call,
            epoch,
            seq,
            kind: "dtmf".into(),
            detail: serde_json::json!({}),
            at,
        });
    }
    if !open {
        w.push(Write::Close {
            call,
            epoch,
            end_reason: "caller_hangup".into(),
            cleanup_status: CleanupStatus::Completed,
            cleanup_completed_at: at + Duration::from_secs(60),
            stats: serde_json::json!({}),
        });
    }
    w
}

async fn refusal(store: &Store, now: SystemTime, age: Duration) -> CallId {
    let call = CallId::new_random();
    store
        .record_rejection(Rejection {
            call_id: call,
            instance: "test".into(),
            ingress: "sip".into(),
            carrier_call_id: None,
            partner_id: None,
            reason: "capacity".into(),
            waited: Duration::ZERO,
            at: now - age,
        })
        .await
        .unwrap();
    call
}

/// (receipt exists, events, turns + slots) of `call`.
async fn left(store: &Store, call: CallId) -> (bool, usize, usize) {
    let receipt = store.ledger(call).await.unwrap().is_some();
    let events = store.events(call).await.unwrap().len();
    let personal = store.turns(call).await.unwrap().len() + store.slots(call).await.unwrap().len();
    (receipt, events, personal)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_of_data_follows_its_own_window_and_open_rows_stay() {
    let db = Database::local(LocalOptions::default()).await.unwrap();
    let store = Store::connect(StoreConfig::new(db.conninfo(), "test"))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let now = SystemTime::now();
    let cfg = RetentionConfig {
        transcript_days: 30,
        events_days: 90,
        receipts_days: 365,
        purge_interval_s: 3_600,
    };

    let ancient_closed = call(&store, now, 400 * DAY, false).await;
    let ancient_open = call(&store, now, 400 * DAY, true).await;
    let old_closed = call(&store, now, 100 * DAY, false).await;
    let old_open = call(&store, now, 100 * DAY, true).await;
    let month_closed = call(&store, now, 40 * DAY, false).await;
    let fresh_closed = call(&store, now, 10 * DAY, false).await;
    let ancient_refusal = refusal(&store, now, 400 * DAY).await;
    let old_refusal = refusal(&store, now, 100 * DAY).await;

    let purged = purge_once(&store, &cfg, now).await.unwrap();
    assert_eq!(
        purged,
        Purged {
            // turns and slots of every call older than 30 days, open or not
            personal_data: 5 * 3,
            // events of the closed calls older than 90 days
            events: 2 * 3,
            receipts: 1,
            rejections: 1,
        }
    );
    assert_eq!(left(&store, ancient_closed).await, (false, 0, 0));
    assert_eq!(
        left(&store, ancient_open).await,
        (true, 3, 0),
        "an open row keeps its receipt and events; its transcript still goes"
    );
    assert_eq!(left(&store, old_closed).await, (true, 0, 0));
    assert_eq!(left(&store, old_open).await, (true, 3, 0));
    assert_eq!(left(&store, month_closed).await, (true, 3, 0));
    assert_eq!(left(&store, fresh_closed).await, (true, 3, 3));

    let (client, conn) = tokio_postgres::connect(db.conninfo(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let refusals: Vec<uuid::Uuid> = client
        .query("SELECT call_id FROM admission_rejections", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(refusals, vec![old_refusal.0]);
    assert_ne!(ancient_refusal, old_refusal);

    assert_eq!(
        purge_once(&store, &cfg, now).await.unwrap(),
        Purged::default(),
        "nothing left to purge"
    );

    // A window of 0 keeps its kind: with receipts kept, the ancient closed
    // rows of a second batch survive while their events go.
    let keep = RetentionConfig {
        receipts_days: 0,
        ..cfg
    };
    let kept = call(&store, now, 400 * DAY, false).await;
    let p = purge_once(&store, &keep, now).await.unwrap();
    assert_eq!((p.receipts, p.events, p.personal_data), (0, 3, 3));
    assert_eq!(left(&store, kept).await, (true, 0, 0));
    drop(store);
    db.stop().await;
}
