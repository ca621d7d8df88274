//! A call's writes through the write-behind land in order, idempotently,
//! with lifecycle stamps first-write-wins and the close recorded.

use crate::common;

use std::time::{Duration, SystemTime};

use serde_json::json;
use state_store::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_lands_in_order_and_closes() {
    let env = common::env().await;
    let store = &env.store;
    let (call, epoch) = common::open(store).await;
    assert_eq!(epoch, OwnerEpoch::FIRST);
    assert_eq!(store.open_ledger_sessions("test-a").await.unwrap(), 1);

    let (writes, writers) = WriteBehind::start(store, WriteBehindConfig::default());
    let t0 = SystemTime::now();
    let later = t0 + Duration::from_secs(5);
    let stage = |stage, at| Write::Lifecycle {
        call,
        epoch,
        stage,
        at,
    };
    writes.submit(stage(Stage::MediaReady, t0)).unwrap();
    writes.submit(stage(Stage::MediaReady, later)).unwrap(); // ignored: first wins
    for seq in 0..20 {
        writes.submit(common::turn(call, epoch, seq)).unwrap();
    }
    writes.submit(common::turn(call, epoch, 3)).unwrap(); // a retry: no duplicate
    writes
        .submit(Write::Event {
            call,
            epoch,
            seq: 0,
            kind: "barge_in".into(),
            detail: json!({"output_stop_ms": 120}),
            at: t0,
        })
        .unwrap();
    writes
        .submit(Write::Slot {
            call,
            epoch,
            name: "account".into(),
            value: "42".into(),
            at: t0,
        })
        .unwrap();
    writes
        .submit(Write::Escalation {
            call,
            epoch,
            reason: "asked for a human".into(),
            at: t0,
        })
        .unwrap();
    writes.submit(stage(Stage::FirstPlayableAudio, t0)).unwrap();
    writes.submit(stage(Stage::LastMedia, later)).unwrap();
    writes
        .submit(stage(Stage::DisconnectObserved, later))
        .unwrap();
    writes
        .submit(Write::Close {
            call,
            epoch,
            end_reason: "caller_hangup".into(),
            cleanup_status: CleanupStatus::Completed,
            cleanup_completed_at: later,
            stats: json!({"turns": 20}),
        })
        .unwrap();

    let report = writers.drain(common::PATIENCE).await;
    assert!(report.completed);
    assert_eq!(report.stats.lost, 0);
    assert_eq!(report.stats.fenced, 0);
    assert_eq!(report.stats.backlog, 0);
    assert_eq!(report.stats.applied, 30);

    let turns = store.turns(call).await.unwrap();
    let seqs: Vec<u32> = turns.iter().map(|t| t.seq).collect();
    assert_eq!(seqs, (0..20).collect::<Vec<_>>());
    assert_eq!(turns[1].speaker, Speaker::Bot);
    assert_eq!(turns[7].text, "turn 7");

    let ledger = store.ledger(call).await.unwrap().unwrap();
    assert_eq!(ledger.owner_instance, "test-a");
    assert_eq!(ledger.admission_wait, Duration::from_millis(12));
    assert_eq!(ledger.carrier_call_id.as_deref(), Some("CA123"));
    assert_eq!(
        secs(ledger.media_ready_at.unwrap()),
        secs(t0),
        "first write wins"
    );
    assert!(ledger.first_playable_audio_at.is_some());
    assert!(ledger.last_media_at.is_some());
    assert!(ledger.disconnect_observed_at.is_some());
    assert_eq!(secs(ledger.cleanup_completed_at.unwrap()), secs(later));
    assert_eq!(ledger.cleanup_status, CleanupStatus::Completed);
    assert_eq!(ledger.end_reason.as_deref(), Some("caller_hangup"));
    assert_eq!(ledger.stats, json!({"turns": 20, "writes_lost": 0}));

    let events = store.events(call).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].detail, json!({"output_stop_ms": 120}));
    let slots = store.slots(call).await.unwrap();
    assert_eq!(slots[0].value, "42");
    let state = store.call_state(call).await.unwrap().unwrap();
    assert!(state.escalated);
    assert_eq!(
        state.escalation_reason.as_deref(),
        Some("asked for a human")
    );

    assert_eq!(store.open_ledger_sessions("test-a").await.unwrap(), 0);
    // After the drain no new writes are accepted, and that is a counted loss.
    let err = writes.submit(common::turn(call, epoch, 99)).unwrap_err();
    assert_eq!(err, WriteRejected::Stopped { call });
    assert_eq!(writes.lost_for(call), 1);
}

/// Postgres keeps microseconds; compare at second precision.
fn secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}
