//! Owner liveness against a real Postgres: a live instance closes the open
//! rows of an owner whose beat outlived the lease — only those, each once
//! even with two reclaimers racing, never while its own beat is stale —
//! and the old owner's writes are fenced and counted from then on; a new
//! boot closes the rows its name owned before.
//!
//! An owner is made "silent for 10 s" by moving its `beat_at` back with a
//! raw statement: the lease logic compares the database's own clock, so
//! this is exactly what ten silent seconds look like to it, without
//! sleeping through them.

#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use state_store::audit::{self, AuditParams};
use state_store::*;

const LEASE: Duration = Duration::from_secs(5);

/// A store for `instance` on the same cluster, with its boot claimed.
async fn instance(env: &common::Env, name: &str) -> (Store, BootId) {
    let store = Store::connect(env.pg.store_config(name)).await.unwrap();
    let boot = BootId::new_random();
    let report = store.begin_boot(boot).await.unwrap();
    assert!(report.closed.is_empty(), "{name} owned nothing before");
    (store, boot)
}

/// Moves `name`'s latest beat `secs` seconds into the past.
async fn silence(env: &common::Env, name: &str, secs: i32) {
    let n = common::raw(&env.pg)
        .await
        .execute(
            "UPDATE instance_heartbeats SET beat_at = now() - make_interval(secs => $2) \
             WHERE instance = $1",
            &[&name, &f64::from(secs)],
        )
        .await
        .unwrap();
    assert_eq!(n, 1, "{name} has a heartbeat row");
}

async fn open_n(store: &Store, n: usize) -> Vec<(CallId, OwnerEpoch)> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(common::open(store).await);
    }
    out
}

fn ids(r: &[Reclaimed]) -> HashSet<CallId> {
    r.iter().map(|r| r.call).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_instance_closes_only_a_silent_owners_rows_with_a_receipt() {
    let env = common::env().await;
    let a_boot = BootId::new_random();
    env.store.begin_boot(a_boot).await.unwrap();
    let (b, _) = instance(&env, "test-b").await;
    let (r, r_boot) = instance(&env, "test-r").await;
    let a_calls = open_n(&env.store, 3).await;
    let (done, done_epoch) = common::open(&env.store).await;
    let close = Write::Close {
        call: done,
        epoch: done_epoch,
        end_reason: "caller_hangup".into(),
        cleanup_status: CleanupStatus::Completed,
        cleanup_completed_at: std::time::SystemTime::now(),
        stats: serde_json::json!({}),
    };
    assert_eq!(
        env.store.apply(&close).await.unwrap(),
        WriteOutcome::Applied
    );
    let (b_call, _) = common::open(&b).await;
    let (r_call, _) = common::open(&r).await;
    // An owner that never beat (a build before heartbeats): never reclaimed.
    let old = Store::connect(env.pg.store_config("test-old"))
        .await
        .unwrap();
    let (old_call, _) = common::open(&old).await;
    let beats: i64 = common::raw(&env.pg)
        .await
        .query_one(
            "SELECT count(*) FROM instance_heartbeats WHERE instance = 'test-old'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(beats, 0);

    silence(&env, "test-a", 10).await;
    let taken = r.reclaim_lost(r_boot, LEASE).await.unwrap();
    let want: HashSet<CallId> = a_calls.iter().map(|c| c.0).collect();
    assert_eq!(ids(&taken), want, "exactly A's open rows: {taken:#?}");
    for t in &taken {
        assert_eq!(t.reason, ReclaimReason::OwnerLost);
        assert_eq!(t.from_instance, "test-a");
        assert!(t.from_last_beat_at.is_some());
        assert_eq!(t.epoch_before, OwnerEpoch::FIRST);
        assert_eq!(t.epoch_after, OwnerEpoch(2));
    }
    let row = env.store.ledger(a_calls[0].0).await.unwrap().unwrap();
    assert_eq!(row.end_reason.as_deref(), Some("owner_lost"));
    assert_eq!(row.cleanup_status, CleanupStatus::Failed);
    assert!(row.cleanup_completed_at.is_some());
    assert_eq!(row.owner_instance, "test-r");
    assert_eq!(row.owner_epoch, OwnerEpoch(2));
    let receipt = &row.stats["reclaim"];
    assert_eq!(receipt["reason"], "owner_lost");
    assert_eq!(receipt["by_instance"], "test-r");
    assert_eq!(receipt["by_boot"], r_boot.to_string());
    assert_eq!(receipt["from_instance"], "test-a");
    assert_eq!(receipt["from_boot"], a_boot.to_string());
    assert!(receipt["from_last_beat_at"].is_string(), "{receipt}");
    assert_eq!(receipt["lease_ms"], 5_000);
    assert_eq!(receipt["epoch_before"], 1);
    assert_eq!(receipt["epoch_after"], 2);

    // Nothing else moved: the closed row, the live owners' and the
    // heartbeat-less owner's rows.
    let closed = env.store.ledger(done).await.unwrap().unwrap();
    assert_eq!(closed.end_reason.as_deref(), Some("caller_hangup"));
    assert_eq!(closed.owner_instance, "test-a");
    for (call, owner) in [
        (b_call, "test-b"),
        (r_call, "test-r"),
        (old_call, "test-old"),
    ] {
        let row = env.store.ledger(call).await.unwrap().unwrap();
        assert_eq!(row.cleanup_status, CleanupStatus::Pending, "{owner}");
        assert_eq!(row.owner_instance, owner);
        assert_eq!(row.owner_epoch, OwnerEpoch::FIRST);
    }
    assert!(r.reclaim_lost(r_boot, LEASE).await.unwrap().is_empty());
    assert_eq!(env.store.open_ledger_sessions("test-a").await.unwrap(), 0);
    assert_eq!(env.store.open_ledger_sessions("test-r").await.unwrap(), 1);

    let params = AuditParams::new(
        Duration::from_secs(3_600),
        Duration::from_secs(25),
        std::time::SystemTime::now(),
    );
    let found = audit::run(&env.store, params).await.unwrap();
    let about_reclaimed: Vec<_> = found
        .iter()
        .filter(|v| v.call_id.is_some_and(|c| want.contains(&c)))
        .collect();
    assert!(about_reclaimed.is_empty(), "{about_reclaimed:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_owners_writes_are_fenced_and_counted_after_a_reclaim() {
    let env = common::env().await;
    env.store.begin_boot(BootId::new_random()).await.unwrap();
    let (r, r_boot) = instance(&env, "test-r").await;
    let (call, old) = common::open(&env.store).await;
    silence(&env, "test-a", 10).await;
    let taken = r.reclaim_lost(r_boot, LEASE).await.unwrap();
    assert_eq!(ids(&taken), HashSet::from([call]));

    let direct = env.store.apply(&common::turn(call, old, 0)).await.unwrap();
    assert_eq!(
        direct,
        WriteOutcome::Fenced {
            current: OwnerEpoch(2)
        }
    );
    let (writes, writers) = WriteBehind::start(&env.store, WriteBehindConfig::default());
    writes.submit(common::turn(call, old, 1)).unwrap();
    writes
        .submit(Write::Close {
            call,
            epoch: old,
            end_reason: "caller_hangup".into(),
            cleanup_status: CleanupStatus::Completed,
            cleanup_completed_at: std::time::SystemTime::now(),
            stats: serde_json::json!({"active_counter_delta": {"increment": 1, "decrement": 1}}),
        })
        .unwrap();
    let report = writers.drain(common::PATIENCE).await;
    assert!(report.completed);
    assert_eq!(report.stats.fenced, 2, "{report:?}");
    assert_eq!(report.stats.applied, 0);
    assert_eq!(report.stats.lost, 0, "fenced writes are not losses");
    let row = env.store.ledger(call).await.unwrap().unwrap();
    assert_eq!(
        row.end_reason.as_deref(),
        Some("owner_lost"),
        "stale close refused"
    );
    assert!(env.store.turns(call).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_racing_reclaimers_close_each_row_exactly_once() {
    let env = common::env().await;
    env.store.begin_boot(BootId::new_random()).await.unwrap();
    let (r1, boot1) = instance(&env, "test-r1").await;
    let (r2, boot2) = instance(&env, "test-r2").await;
    let calls: HashSet<CallId> = open_n(&env.store, 40)
        .await
        .into_iter()
        .map(|c| c.0)
        .collect();
    silence(&env, "test-a", 10).await;
    let (mut by1, mut by2) = (Vec::new(), Vec::new());
    loop {
        let (a, b) = tokio::join!(r1.reclaim_lost(boot1, LEASE), r2.reclaim_lost(boot2, LEASE));
        let (a, b) = (a.unwrap(), b.unwrap());
        if a.is_empty() && b.is_empty() {
            break;
        }
        by1.extend(a);
        by2.extend(b);
    }
    eprintln!("r1 closed {}, r2 closed {}", by1.len(), by2.len());
    let (s1, s2) = (ids(&by1), ids(&by2));
    assert_eq!(s1.len(), by1.len(), "r1 closed no row twice");
    assert_eq!(s2.len(), by2.len(), "r2 closed no row twice");
    assert!(s1.is_disjoint(&s2), "no row closed by both");
    assert_eq!(&s1 | &s2, calls, "every row closed");
    for (set, owner) in [(&s1, "test-r1"), (&s2, "test-r2")] {
        for call in set {
            let row = env.store.ledger(*call).await.unwrap().unwrap();
            assert_eq!(row.owner_instance, owner);
            assert_eq!(row.owner_epoch, OwnerEpoch(2), "one bump only");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaimer_whose_own_beat_is_stale_takes_nothing() {
    let env = common::env().await;
    env.store.begin_boot(BootId::new_random()).await.unwrap();
    let (r, r_boot) = instance(&env, "test-r").await;
    let (call, _) = common::open(&env.store).await;
    silence(&env, "test-a", 10).await;
    silence(&env, "test-r", 10).await;
    assert!(r.reclaim_lost(r_boot, LEASE).await.unwrap().is_empty());
    // A beat from a boot that no longer holds the name does not count.
    let stale_boot = BootId::new_random();
    assert!(r.reclaim_lost(stale_boot, LEASE).await.unwrap().is_empty());
    assert_eq!(r.heartbeat(r_boot).await.unwrap(), Beat::Recorded);
    let taken = r.reclaim_lost(r_boot, LEASE).await.unwrap();
    assert_eq!(ids(&taken), HashSet::from([call]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_lapse_is_the_earliest_lease_of_another_owner_of_open_rows() {
    let env = common::env().await;
    env.store.begin_boot(BootId::new_random()).await.unwrap();
    let (r, r_boot) = instance(&env, "test-r").await;
    let (idle, _) = instance(&env, "test-idle").await;
    // test-a has no open row yet, test-idle never will, test-r is the asker.
    silence(&env, "test-idle", 4).await;
    assert_eq!(r.next_lapse(LEASE).await.unwrap(), None);
    let _ = common::open(&env.store).await;
    let _ = common::open(&r).await;
    silence(&env, "test-a", 3).await;
    let left = r
        .next_lapse(LEASE)
        .await
        .unwrap()
        .expect("test-a's lease runs");
    assert!(
        left <= Duration::from_secs(2) && left > Duration::from_secs(1),
        "{left:?} left of a 5 s lease beaten 3 s ago"
    );
    // Past its lease it is the next reclaim's, not a lapse to wait for.
    silence(&env, "test-a", 10).await;
    assert_eq!(r.next_lapse(LEASE).await.unwrap(), None);
    // The asker's own rows never count: test-a sees test-r's lease.
    assert_eq!(r.heartbeat(r_boot).await.unwrap(), Beat::Recorded);
    let from_a = env.store.next_lapse(LEASE).await.unwrap();
    let left = from_a.expect("test-r's lease runs");
    assert!(left <= LEASE && left > Duration::from_secs(3), "{left:?}");
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_boot_closes_the_rows_its_name_owned_before() {
    let env = common::env().await;
    // Rows from before heartbeats existed: the name never beat.
    let (pre, _) = common::open(&env.store).await;
    let first = BootId::new_random();
    let report = env.store.begin_boot(first).await.unwrap();
    assert_eq!(report.previous, None);
    assert_eq!(ids(&report.closed), HashSet::from([pre]));
    let receipt = env.store.ledger(pre).await.unwrap().unwrap().stats;
    assert_eq!(receipt["reclaim"]["reason"], "instance_restart");
    assert!(receipt["reclaim"].get("from_boot").is_none(), "{receipt}");
    assert!(receipt["reclaim"].get("lease_ms").is_none(), "{receipt}");

    let calls = open_n(&env.store, 2).await;
    let (b, _) = instance(&env, "test-b").await;
    let (b_call, _) = common::open(&b).await;
    // The same name starts again (the process was killed and restarted).
    let again = Store::connect(env.pg.store_config("test-a")).await.unwrap();
    let second = BootId::new_random();
    let report = again.begin_boot(second).await.unwrap();
    let previous = report.previous.expect("the first boot beat");
    assert_eq!(previous.boot, first);
    assert!(previous.beat_age < Duration::from_secs(60), "{previous:?}");
    let want: HashSet<CallId> = calls.iter().map(|c| c.0).collect();
    assert_eq!(ids(&report.closed), want);
    for c in &report.closed {
        assert_eq!(c.reason, ReclaimReason::InstanceRestart);
        assert_eq!(c.from_instance, "test-a");
        assert_eq!(c.epoch_after, OwnerEpoch(2));
    }
    let row = again.ledger(calls[0].0).await.unwrap().unwrap();
    assert_eq!(row.end_reason.as_deref(), Some("instance_restart"));
    assert_eq!(row.stats["reclaim"]["from_boot"], first.to_string());
    assert_eq!(row.stats["reclaim"]["by_boot"], second.to_string());
    assert_eq!(
        b.ledger(b_call).await.unwrap().unwrap().cleanup_status,
        CleanupStatus::Pending
    );

    // The first process, if it were still running, learns it lost the name
    // and its writes are fenced.
    assert_eq!(
        env.store.heartbeat(first).await.unwrap(),
        Beat::Superseded { by: second }
    );
    assert_eq!(again.heartbeat(second).await.unwrap(), Beat::Recorded);
    let stale = env
        .store
        .apply(&common::turn(calls[1].0, calls[1].1, 0))
        .await
        .unwrap();
    assert_eq!(
        stale,
        WriteOutcome::Fenced {
            current: OwnerEpoch(2)
        }
    );
}
