//! The ledger auditor against a real Postgres: a clean ledger has no
//! violations; each deliberately corrupted row is caught as its own kind,
//! with its call id, while a clean row next to it stays clean.

#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use crate::common;

use std::time::{Duration, SystemTime};

use state_store::audit::{self, AuditParams, InstanceEventKind, Violation, ViolationKind};
use state_store::*;

const HOUR: Duration = Duration::from_secs(3_600);
const GRACE: Duration = Duration::from_secs(25);

fn params() -> AuditParams {
    AuditParams::new(HOUR, GRACE, SystemTime::now())
}

fn ago(d: Duration) -> SystemTime {
    SystemTime::now() - d
}

/// The closing stats a call's teardown writes when all went well.
fn clean_stats() -> serde_json::Value {
    serde_json::json!({
        "active_counter_delta": {"increment": 1, "decrement": 1},
        "delegation": {"started": 2, "completed": 1, "failed": 0, "cancelled": 1,
                       "stale": 1, "refused": 3},
        "interaction": {"interruptions": 0},
    })
}

/// Opens a call admitted at `admitted_at` with its own carrier call id.
async fn open_at(store: &Store, admitted_at: SystemTime) -> (CallId, OwnerEpoch) {
    let mut call = common::new_call(admitted_at);
    call.carrier_call_id = Some(format!("CA{}", call.call_id.0.simple()));
    let id = call.call_id;
    let epoch = store.open_call(call).await.unwrap();
    (id, epoch)
}

async fn apply(store: &Store, w: &Write) {
    assert_eq!(
        store.apply(w).await.unwrap(),
        WriteOutcome::Applied,
        "{w:?}"
    );
}

async fn event(store: &Store, call: CallId, epoch: OwnerEpoch, seq: u32, kind: &str) {
    let w = Write::Event {
        call,
        epoch,
        seq,
        kind: kind.into(),
        detail: serde_json::json!({}),
        at: SystemTime::now(),
    };
    apply(store, &w).await;
}

async fn close(store: &Store, call: CallId, epoch: OwnerEpoch, stats: serde_json::Value) {
    let w = Write::Close {
        call,
        epoch,
        end_reason: "caller_hangup".into(),
        cleanup_status: CleanupStatus::Completed,
        cleanup_completed_at: SystemTime::now(),
        stats,
    };
    apply(store, &w).await;
}

/// A call the way callgate leaves it: events (one terminal), a disconnect,
/// a clean close.
async fn clean_call(store: &Store) -> CallId {
    let (id, epoch) = open_at(store, ago(Duration::from_secs(30))).await;
    event(store, id, epoch, 1, "tool_call").await;
    event(store, id, epoch, 2, "stall").await;
    event(store, id, epoch, 3, "tts_stalled").await;
    let w = Write::Lifecycle {
        call: id,
        epoch,
        stage: Stage::DisconnectObserved,
        at: ago(Duration::from_secs(5)),
    };
    apply(store, &w).await;
    close(store, id, epoch, clean_stats()).await;
    id
}

/// Runs the audit and checks the clean call is not named.
async fn audit_around(store: &Store, clean: CallId) -> Vec<Violation> {
    let found = audit::run(store, params()).await.unwrap();
    assert!(
        found.iter().all(|v| v.call_id != Some(clean)),
        "the clean call was flagged: {found:#?}"
    );
    found
}

fn only(found: &[Violation], kind: ViolationKind) -> Vec<CallId> {
    assert!(
        found.iter().all(|v| v.kind == kind),
        "expected only {kind}: {found:#?}"
    );
    found.iter().filter_map(|v| v.call_id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_ledger_has_no_violations() {
    let env = common::env().await;
    let s = &env.store;
    assert!(
        audit::run(s, params()).await.unwrap().is_empty(),
        "empty ledger"
    );
    s.record_instance_event(InstanceEventKind::Started, ago(HOUR), serde_json::json!({}))
        .await
        .unwrap();
    for _ in 0..3 {
        clean_call(s).await;
    }
    // Open and recent, no disconnect yet: a call in progress.
    open_at(s, ago(Duration::from_secs(10))).await;
    // Admitted before the drain began: legal, and so is closing after it.
    let (early, epoch) = open_at(s, ago(Duration::from_secs(4))).await;
    s.record_instance_event(
        InstanceEventKind::Draining,
        ago(Duration::from_secs(3)),
        serde_json::json!({}),
    )
    .await
    .unwrap();
    close(s, early, epoch, clean_stats()).await;
    // Another instance's drain says nothing about this one's admissions.
    let other = Store::connect(env.pg.store_config("test-b")).await.unwrap();
    other
        .record_instance_event(
            InstanceEventKind::Draining,
            ago(Duration::from_secs(60)),
            serde_json::json!({}),
        )
        .await
        .unwrap();
    let found = audit::run(s, params()).await.unwrap();
    assert!(found.is_empty(), "{found:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_live_owners_of_one_carrier_call_are_caught() {
    let env = common::env().await;
    let clean = clean_call(&env.store).await;
    let (mine, _) = open_at(&env.store, ago(Duration::from_secs(20))).await;
    // The same carrier call, also open, on another instance.
    let other = Store::connect(env.pg.store_config("test-b")).await.unwrap();
    let theirs = CallId::new_random();
    let sid: String = common::raw(&env.pg)
        .await
        .query_one(
            "SELECT carrier_call_id FROM call_ledger WHERE call_id = $1",
            &[&mine.0],
        )
        .await
        .unwrap()
        .get(0);
    other
        .open_call(NewCall {
            call_id: theirs,
            carrier_call_id: Some(sid.clone()),
            ..common::new_call(ago(Duration::from_secs(10)))
        })
        .await
        .unwrap();
    let found = audit_around(&env.store, clean).await;
    let mut ids = only(&found, ViolationKind::TwoLiveOwners);
    ids.sort();
    let mut want = vec![mine, theirs];
    want.sort();
    assert_eq!(ids, want, "{found:#?}");
    let owners: Vec<&str> = found.iter().map(|v| v.instance.as_str()).collect();
    assert!(
        owners.contains(&"test-a") && owners.contains(&"test-b"),
        "{owners:?}"
    );
    assert_eq!(found[0].detail["carrier_call_id"], sid);

    // Once one side closes, the call has one live owner again.
    let raw = common::raw(&env.pg).await;
    raw.execute(
        "UPDATE call_ledger SET cleanup_status = 'completed', end_reason = 'caller_hangup', \
         stats = $2 WHERE call_id = $1",
        &[&theirs.0, &clean_stats()],
    )
    .await
    .unwrap();
    let found = audit::run(&env.store, params()).await.unwrap();
    assert!(found.is_empty(), "{found:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_row_without_an_end_reason_and_an_open_row_with_one_are_caught() {
    let env = common::env().await;
    let clean = clean_call(&env.store).await;
    let closed = clean_call(&env.store).await;
    let (open, _) = open_at(&env.store, ago(Duration::from_secs(10))).await;
    let raw = common::raw(&env.pg).await;
    raw.execute(
        "UPDATE call_ledger SET end_reason = NULL WHERE call_id = $1",
        &[&closed.0],
    )
    .await
    .unwrap();
    let found = audit_around(&env.store, clean).await;
    assert_eq!(
        only(&found, ViolationKind::ClosedWithoutEndReason),
        [closed]
    );
    assert_eq!(found[0].detail["cleanup_status"], "completed");

    raw.execute(
        "UPDATE call_ledger SET end_reason = 'caller_hangup' WHERE call_id = $1",
        &[&closed.0],
    )
    .await
    .unwrap();
    raw.execute(
        "UPDATE call_ledger SET end_reason = 'caller_hangup' WHERE call_id = $1",
        &[&open.0],
    )
    .await
    .unwrap();
    let found = audit_around(&env.store, clean).await;
    assert_eq!(only(&found, ViolationKind::EndReasonWhileOpen), [open]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_and_unbalanced_counter_deltas_are_caught() {
    let env = common::env().await;
    let clean = clean_call(&env.store).await;
    let raw = common::raw(&env.pg).await;
    let mut want = Vec::new();
    for (delta, kind) in [
        (
            serde_json::json!({"increment": 1, "decrement": 2}),
            ViolationKind::NegativeCounter,
        ),
        (
            serde_json::json!({"increment": 0, "decrement": 1}),
            ViolationKind::NegativeCounter,
        ),
        (
            serde_json::json!({"increment": 2, "decrement": 2}),
            ViolationKind::NegativeCounter,
        ),
        (
            serde_json::json!({"increment": "1", "decrement": 1}),
            ViolationKind::NegativeCounter,
        ),
        (
            serde_json::json!({"increment": 1, "decrement": 0}),
            ViolationKind::LeakedCounter,
        ),
        (
            serde_json::json!({"increment": 0, "decrement": 0}),
            ViolationKind::LeakedCounter,
        ),
        (serde_json::Value::Null, ViolationKind::LeakedCounter),
    ] {
        let id = clean_call(&env.store).await;
        let sql = if delta.is_null() {
            "UPDATE call_ledger SET stats = stats - 'active_counter_delta' WHERE call_id = $1"
        } else {
            "UPDATE call_ledger SET stats = jsonb_set(stats, '{active_counter_delta}', $2) \
             WHERE call_id = $1"
        };
        if delta.is_null() {
            raw.execute(sql, &[&id.0]).await.unwrap();
        } else {
            raw.execute(sql, &[&id.0, &delta]).await.unwrap();
        }
        want.push((kind, id));
    }
    // An open row has not released its permit yet: not judged.
    open_at(&env.store, ago(Duration::from_secs(5))).await;
    let found = audit_around(&env.store, clean).await;
    let mut got: Vec<(ViolationKind, CallId)> =
        found.iter().map(|v| (v.kind, v.call_id.unwrap())).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "{found:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admission_after_the_instance_declared_draining_is_caught() {
    let env = common::env().await;
    let s = &env.store;
    let t0 = ago(Duration::from_secs(100));
    s.record_instance_event(InstanceEventKind::Started, t0, serde_json::json!({}))
        .await
        .unwrap();
    let clean = clean_call(s).await; // admitted 30 s ago, before the drain below
    let drain_at = ago(Duration::from_secs(20));
    s.record_instance_event(
        InstanceEventKind::Draining,
        drain_at,
        serde_json::json!({"in_progress": 1}),
    )
    .await
    .unwrap();
    let (late, epoch) = open_at(s, ago(Duration::from_secs(15))).await;
    close(s, late, epoch, clean_stats()).await;
    // The instance restarted (or undrained): admitting is legal again.
    s.record_instance_event(
        InstanceEventKind::Undrained,
        ago(Duration::from_secs(10)),
        serde_json::json!({}),
    )
    .await
    .unwrap();
    open_at(s, ago(Duration::from_secs(9))).await;
    s.record_instance_event(
        InstanceEventKind::Draining,
        ago(Duration::from_secs(8)),
        serde_json::json!({}),
    )
    .await
    .unwrap();
    s.record_instance_event(
        InstanceEventKind::Started,
        ago(Duration::from_secs(7)),
        serde_json::json!({}),
    )
    .await
    .unwrap();
    open_at(s, ago(Duration::from_secs(6))).await;

    let found = audit_around(s, clean).await;
    assert_eq!(only(&found, ViolationKind::AdmittedWhileDraining), [late]);
    assert_eq!(found[0].instance, "test-a");
    assert_eq!(found[0].detail["draining_detail"]["in_progress"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_terminal_events_for_one_call_are_caught() {
    let env = common::env().await;
    let clean = clean_call(&env.store).await; // one terminal event among others
    let (id, epoch) = open_at(&env.store, ago(Duration::from_secs(20))).await;
    event(&env.store, id, epoch, 1, "setup_failed").await;
    event(&env.store, id, epoch, 2, "barge_in_paused").await;
    event(&env.store, id, epoch, 3, "max_duration").await;
    close(&env.store, id, epoch, clean_stats()).await;
    let found = audit_around(&env.store, clean).await;
    assert_eq!(only(&found, ViolationKind::DoubleTerminal), [id]);
    let kinds: Vec<&str> = found[0].detail["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["setup_failed", "max_duration"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_open_longer_than_the_maximum_call_duration_is_caught() {
    let env = common::env().await;
    let clean = clean_call(&env.store).await;
    let (stuck, _) = open_at(&env.store, ago(HOUR + Duration::from_secs(60))).await;
    // Just inside the bound: still a call in progress.
    open_at(&env.store, ago(HOUR - Duration::from_secs(60))).await;
    // Closed long ago and long: a finished call is not "open too long".
    let (old, epoch) = open_at(&env.store, ago(3 * HOUR)).await;
    close(&env.store, old, epoch, clean_stats()).await;
    let found = audit_around(&env.store, clean).await;
    assert_eq!(only(&found, ViolationKind::OpenTooLong), [stuck]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnected_session_with_work_still_running_is_caught() {
    let env = common::env().await;
    let s = &env.store;
    let clean = clean_call(s).await;
    // Disconnected a minute ago and still open: its teardown never finished.
    let (hung, epoch) = open_at(s, ago(Duration::from_secs(90))).await;
    let stamp = |call, at| Write::Lifecycle {
        call,
        epoch,
        stage: Stage::DisconnectObserved,
        at,
    };
    apply(s, &stamp(hung, ago(Duration::from_secs(60)))).await;
    // Disconnected just now: teardown still within its bound.
    let (tearing, epoch2) = open_at(s, ago(Duration::from_secs(30))).await;
    let w = Write::Lifecycle {
        call: tearing,
        epoch: epoch2,
        stage: Stage::DisconnectObserved,
        at: ago(Duration::from_secs(2)),
    };
    apply(s, &w).await;
    let found = audit_around(s, clean).await;
    assert_eq!(only(&found, ViolationKind::DisconnectedStillOpen), [hung]);

    // Closed, but a tool it started was never completed, failed or cancelled.
    let raw = common::raw(&env.pg).await;
    raw.execute(
        "UPDATE call_ledger SET cleanup_status = 'completed', end_reason = 'caller_hangup', \
         stats = $2 WHERE call_id = $1",
        &[&hung.0, &clean_stats()],
    )
    .await
    .unwrap();
    let leaked = clean_call(s).await;
    raw.execute(
        "UPDATE call_ledger SET stats = jsonb_set(stats, '{delegation,started}', '3') \
         WHERE call_id = $1",
        &[&leaked.0],
    )
    .await
    .unwrap();
    let found = audit_around(s, clean).await;
    assert_eq!(only(&found, ViolationKind::DelegationUnfinished), [leaked]);
    assert_eq!(found[0].detail["started"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaimed_row_is_judged_by_its_receipt_not_by_counter_deltas() {
    let env = common::env().await;
    let s = &env.store;
    let clean = clean_call(s).await;
    s.begin_boot(BootId::new_random()).await.unwrap();
    let dead: Vec<CallId> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(open_at(s, ago(Duration::from_secs(20))).await.0);
        }
        v
    };
    let reclaimer = Store::connect(env.pg.store_config("test-b")).await.unwrap();
    let boot = BootId::new_random();
    reclaimer.begin_boot(boot).await.unwrap();
    let raw = common::raw(&env.pg).await;
    raw.execute(
        "UPDATE instance_heartbeats SET beat_at = now() - interval '1 minute' \
         WHERE instance = 'test-a'",
        &[],
    )
    .await
    .unwrap();
    let taken = reclaimer
        .reclaim_lost(boot, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(taken.len(), 3);
    // No deltas (the permit died with its process), a receipt: clean.
    let found = audit_around(s, clean).await;
    assert!(found.is_empty(), "{found:#?}");

    // Corrupted three ways: no receipt, another reason's receipt, a
    // receipt naming a closer that does not own the row.
    raw.execute(
        "UPDATE call_ledger SET stats = stats - 'reclaim' WHERE call_id = $1",
        &[&dead[0].0],
    )
    .await
    .unwrap();
    raw.execute(
        "UPDATE call_ledger SET stats = jsonb_set(stats, '{reclaim,reason}', '\"instance_restart\"') \
         WHERE call_id = $1",
        &[&dead[1].0],
    )
    .await
    .unwrap();
    raw.execute(
        "UPDATE call_ledger SET owner_instance = 'test-c' WHERE call_id = $1",
        &[&dead[2].0],
    )
    .await
    .unwrap();
    // A close that claims the reason without any receipt at all.
    let (fake, epoch) = open_at(s, ago(Duration::from_secs(10))).await;
    let w = Write::Close {
        call: fake,
        epoch,
        end_reason: "owner_lost".into(),
        cleanup_status: CleanupStatus::Failed,
        cleanup_completed_at: SystemTime::now(),
        stats: serde_json::json!({}),
    };
    apply(s, &w).await;
    let found = audit_around(s, clean).await;
    let mut got = only(&found, ViolationKind::ReclaimedWithoutReceipt);
    got.sort();
    let mut want = dead.clone();
    want.push(fake);
    want.sort();
    assert_eq!(got, want, "{found:#?}");
    let missing = found.iter().find(|v| v.call_id == Some(dead[0])).unwrap();
    assert_eq!(missing.detail["end_reason"], "owner_lost");
    assert!(missing.detail["reclaim"].is_null());
}
