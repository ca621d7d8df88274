//! Owner fencing across instances, as operators run them: two `callgate
//! serve` processes (each with its own simulators) sharing one throwaway
//! Postgres. One is killed with SIGKILL during ten live calls; the other
//! closes exactly those ten rows as `owner_lost`, each with its cleanup
//! receipt, the dead instance's ledger count reaches 0, the auditor finds
//! nothing, and a write still carrying the dead owner's epoch is refused
//! and counted. One is paused with SIGSTOP past the lease; the other closes
//! its calls; once resumed, its own later writes to them are fenced. One
//! is killed and started again under the same name: before it is ready it
//! has closed the rows its dead boot left, as `instance_restart`.
//!
//! Nothing waits for a fixed time: every expectation is polled under a
//! generous bound, and the measured time is printed.

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use callgate::config::Config;
use callgate_load::LoadConfig;
use callgate_rig::{Database, ProcessOptions, Processes};
use callgate_sim::SimConfig;
use state_store::audit;
use state_store::{
    CallId, LocalOptions, OwnerEpoch, Speaker, Store, StoreConfig, Write, WriteBehind,
    WriteBehindConfig, WriteOutcome,
};

/// The lease under test: short, so the test is quick.
const LEASE_MS: u64 = 1_500;
/// Beats three times per lease (the configuration requires more than two).
const INTERVAL_MS: u64 = 500;
/// Bound on each expectation: generous for a loaded 2-core machine.
const PATIENCE: Duration = Duration::from_secs(30);
/// Live calls on the instance that dies.
const CALLS: usize = 10;

fn tweak(cfg: &mut Config) {
    cfg.ownership.heartbeat_interval_ms = INTERVAL_MS;
    cfg.ownership.lease_ms = LEASE_MS;
    cfg.ownership.query_timeout_ms = 400;
}

/// One `callgate serve` (and its simulators) named `name` on `conninfo`.
async fn instance(conninfo: &str, name: &str) -> Processes {
    let opts = ProcessOptions {
        exe: env!("CARGO_BIN_EXE_callgate").into(),
        instance: name.to_owned(),
        sim: SimConfig::default(),
    };
    Processes::start(Database::existing(conninfo), opts, tweak)
        .await
        .unwrap()
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// `n` calls long enough to outlast the test.
fn long_calls(url: String, n: usize) -> LoadConfig {
    LoadConfig {
        url,
        calls: n,
        concurrency: n,
        utterances: 40,
        call_timeout: Duration::from_secs(300),
        progress: false,
        ..LoadConfig::default()
    }
}

/// Polls `probe` until `done` accepts its value; returns it and how long
/// that took. Panics after [`PATIENCE`] with the last value.
async fn poll<T: std::fmt::Debug, F: Future<Output = T>>(
    what: &str,
    mut probe: impl FnMut() -> F,
    done: impl Fn(&T) -> bool,
) -> (T, Duration) {
    let began = Instant::now();
    loop {
        let v = probe().await;
        if done(&v) {
            return (v, began.elapsed());
        }
        assert!(
            began.elapsed() < PATIENCE,
            "timed out waiting for {what}; last: {v:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The open rows `owner` holds, with their epochs.
async fn open_rows(pg: &tokio_postgres::Client, owner: &str) -> HashMap<CallId, OwnerEpoch> {
    pg.query(
        "SELECT call_id, owner_epoch FROM call_ledger \
         WHERE owner_instance = $1 AND cleanup_status = 'pending'",
        &[&owner],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (CallId(r.get(0)), OwnerEpoch(r.get(1))))
    .collect()
}

async fn raw(conninfo: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(conninfo, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// A counter's value in a server's `/metrics` (0 when absent).
async fn metric(rig: &Processes, series: &str) -> f64 {
    let url = format!("{}/metrics", rig.base_url());
    let Ok(resp) = rig.http().get(url).send().await else {
        return 0.0;
    };
    let text = resp.text().await.unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Every row in `rows` is closed as `owner_lost` by `by`, taken from
/// `from`, with its epoch bumped once and its receipt.
async fn assert_reclaimed(store: &Store, rows: &HashMap<CallId, OwnerEpoch>, from: &str, by: &str) {
    for (call, epoch) in rows {
        let row = store.ledger(*call).await.unwrap().unwrap();
        assert_eq!(row.end_reason.as_deref(), Some("owner_lost"), "{row:?}");
        assert_eq!(row.owner_instance, by);
        assert_eq!(row.owner_epoch, OwnerEpoch(epoch.0 + 1));
        let r = &row.stats["reclaim"];
        assert_eq!(r["from_instance"], from, "{r}");
        assert_eq!(r["by_instance"], by, "{r}");
        assert_eq!(r["lease_ms"], LEASE_MS, "{r}");
        assert_eq!(r["epoch_before"], epoch.0, "{r}");
    }
}

fn stale_turn(call: CallId, epoch: OwnerEpoch) -> Write {
    let at = SystemTime::now();
    Write::Turn {
        call,
        epoch,
        seq: 9_999,
        speaker: Speaker::Caller,
        text: "written by an owner that is gone".into(),
        started_at: at,
        ended_at: at,
        interrupted: false,
        latency: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instances_live_calls_are_closed_by_the_survivor_within_the_lease() {
    let db = Database::local(LocalOptions::default()).await.unwrap();
    let conninfo = db.conninfo().to_owned();
    let (a_name, b_name) = (unique("owner-a"), unique("owner-b"));
    let b = instance(&conninfo, &b_name).await;
    let mut a = instance(&conninfo, &a_name).await;
    let pg = raw(&conninfo).await;
    let store = Store::connect(StoreConfig::new(&conninfo, "owner-test"))
        .await
        .unwrap();

    let live = tokio::spawn(callgate_load::run(long_calls(a.media_url(), CALLS)));
    let (rows, _) = poll(
        "ten live calls on A",
        || open_rows(&pg, &a_name),
        |r| r.len() == CALLS,
    )
    .await;
    a.server.signal("KILL").await.unwrap();
    let killed = Instant::now();
    a.server.wait_exit(PATIENCE).await.unwrap();

    let _ = poll(
        "B to close A's rows",
        || store.open_ledger_sessions(&a_name),
        |n| matches!(n, Ok(0)),
    )
    .await;
    // Measured to the poll that saw it (polls are 50 ms apart).
    let reclaimed_after = killed.elapsed();
    eprintln!(
        "B closed A's {CALLS} rows {reclaimed_after:?} after SIGKILL (lease {LEASE_MS} ms, beats every {INTERVAL_MS} ms)"
    );
    assert_reclaimed(&store, &rows, &a_name, &b_name).await;
    let closed_by_b: i64 = pg
        .query_one(
            "SELECT count(*) FROM call_ledger WHERE end_reason = 'owner_lost' \
             AND owner_instance = $1",
            &[&b_name],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(closed_by_b, CALLS as i64, "exactly those rows");
    let (reclaimed, _) = poll(
        "B's counter of reclaimed sessions",
        || {
            metric(
                &b,
                "callgate_sessions_reclaimed_total{reason=\"owner_lost\"}",
            )
        },
        |&n| n >= 1.0,
    )
    .await;
    assert_eq!(reclaimed, CALLS as f64);
    // B's own counters agree: its ledger holds no open row, its gate no call.
    let mut b = b;
    b.wait_for_status(PATIENCE, "B's ledger and runtime counters at 0", |s| {
        s["counters"]["ledger"]["value"] == 0 && s["counters"]["runtime"]["value"] == 0
    })
    .await
    .unwrap();

    let params = callgate::audit_http::params(&Config::default(), SystemTime::now());
    let found = audit::run(&store, params).await.unwrap();
    assert!(found.is_empty(), "{found:#?}");

    // A write still carrying A's epoch, as A's write-behind would send it.
    let (call, epoch) = rows.iter().next().map(|(c, e)| (*c, *e)).unwrap();
    let as_a = Store::connect(StoreConfig::new(&conninfo, &a_name))
        .await
        .unwrap();
    let direct = as_a.apply(&stale_turn(call, epoch)).await.unwrap();
    assert_eq!(
        direct,
        WriteOutcome::Fenced {
            current: OwnerEpoch(epoch.0 + 1)
        }
    );
    let (writes, writers) = WriteBehind::start(&as_a, WriteBehindConfig::default());
    writes.submit(stale_turn(call, epoch)).unwrap();
    let report = writers.drain(PATIENCE).await;
    assert_eq!(report.stats.fenced, 1, "{report:?}");
    assert_eq!(report.stats.applied, 0, "{report:?}");
    assert!(
        store
            .turns(call)
            .await
            .unwrap()
            .iter()
            .all(|t| t.seq != 9_999)
    );
    eprintln!(
        "a stale-epoch write was refused and counted: {:?}",
        report.stats
    );

    let _ = tokio::time::timeout(PATIENCE, live).await;
    drop((as_a, store));
    stop_all([a, b], db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_instance_loses_its_calls_and_its_later_writes_are_fenced() {
    let db = Database::local(LocalOptions::default()).await.unwrap();
    let conninfo = db.conninfo().to_owned();
    let (c_name, b_name) = (unique("owner-c"), unique("owner-b"));
    let b = instance(&conninfo, &b_name).await;
    let c = instance(&conninfo, &c_name).await;
    let pg = raw(&conninfo).await;
    let store = Store::connect(StoreConfig::new(&conninfo, "owner-test"))
        .await
        .unwrap();
    let live = tokio::spawn(callgate_load::run(long_calls(c.media_url(), 3)));
    let (rows, _) = poll(
        "three live calls on C",
        || open_rows(&pg, &c_name),
        |r| r.len() == 3,
    )
    .await;
    let fenced = "callgate_store_writes_total{result=\"fenced\"}";
    let before = metric(&c, fenced).await;

    c.server.signal("STOP").await.unwrap();
    let (_, took) = poll(
        "B to close the paused C's rows",
        || store.open_ledger_sessions(&c_name),
        |n| matches!(n, Ok(0)),
    )
    .await;
    eprintln!("B closed the paused C's rows {took:?} after SIGSTOP");
    c.server.signal("CONT").await.unwrap();
    assert_reclaimed(&store, &rows, &c_name, &b_name).await;

    // C's calls run on, and their next writes carry the old epoch.
    let (after, took) = poll("C's writes fenced", || metric(&c, fenced), |&n| n > before).await;
    eprintln!("C's first fenced writes {took:?} after SIGCONT ({after} fenced)");
    assert_reclaimed(&store, &rows, &c_name, &b_name).await;
    for call in rows.keys() {
        let row = store.ledger(*call).await.unwrap().unwrap();
        assert_eq!(row.owner_instance, b_name, "C never took a row back");
    }

    // And C learns it: each of its calls says goodbye and ends there.
    let calls = tokio::time::timeout(PATIENCE, live).await.unwrap().unwrap();
    for call in &calls.calls {
        assert!(
            matches!(&call.outcome, callgate_load::Outcome::CutShort { reason } if reason == "owner_fenced"),
            "{call:#?}"
        );
        assert!(
            call.prompts_heard.goodbye >= 1,
            "the goodbye was heard: {call:#?}"
        );
    }
    let ended = metric(&c, "callgate_owner_fenced_calls_total").await;
    assert_eq!(ended, 3.0, "C ended the three calls it had lost");
    drop(store);
    stop_all([c, b], db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_instance_closes_the_rows_it_owned_before_it_admits() {
    let db = Database::local(LocalOptions::default()).await.unwrap();
    let conninfo = db.conninfo().to_owned();
    let name = unique("owner-d");
    let mut first = instance(&conninfo, &name).await;
    let pg = raw(&conninfo).await;
    let store = Store::connect(StoreConfig::new(&conninfo, "owner-test"))
        .await
        .unwrap();
    let live = tokio::spawn(callgate_load::run(long_calls(first.media_url(), 2)));
    let (rows, _) = poll("two live calls", || open_rows(&pg, &name), |r| r.len() == 2).await;
    first.server.signal("KILL").await.unwrap();
    first.server.wait_exit(PATIENCE).await.unwrap();
    let _ = tokio::time::timeout(PATIENCE, live).await;
    let dir = first.dir().to_path_buf();
    first.stop().await;
    assert_eq!(
        open_rows(&pg, &name).await.len(),
        2,
        "nobody else closes them"
    );

    // The same name again: its start closes the dead boot's rows before it
    // listens (it is ready only after that).
    let again = instance(&conninfo, &name).await;
    assert!(open_rows(&pg, &name).await.is_empty());
    for (call, epoch) in &rows {
        let row = store.ledger(*call).await.unwrap().unwrap();
        assert_eq!(row.end_reason.as_deref(), Some("instance_restart"));
        assert_eq!(row.owner_epoch, OwnerEpoch(epoch.0 + 1));
        let r = &row.stats["reclaim"];
        assert_eq!(r["from_instance"], name.as_str(), "{r}");
        assert_eq!(r["by_instance"], name.as_str(), "{r}");
        assert_ne!(r["from_boot"], r["by_boot"], "{r}");
        assert!(r.get("lease_ms").is_none(), "{r}");
    }
    let params = callgate::audit_http::params(&Config::default(), SystemTime::now());
    let found = audit::run(&store, params).await.unwrap();
    assert!(found.is_empty(), "{found:#?}");
    drop(store);
    let _ = std::fs::remove_dir_all(dir);
    let dir = again.dir().to_path_buf();
    again.stop().await;
    let _ = std::fs::remove_dir_all(dir);
    db.stop().await;
}

/// Stops the rigs, then the database, and removes the rigs' directories
/// (kept when a test fails before this: they hold the logs).
async fn stop_all(rigs: [Processes; 2], db: Database) {
    for rig in rigs {
        let dir = rig.dir().to_path_buf();
        rig.stop().await;
        let _ = std::fs::remove_dir_all(dir);
    }
    db.stop().await;
}
