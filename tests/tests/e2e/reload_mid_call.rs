//! One configuration per call: a call takes a snapshot of the
//! configuration at admission, and setup, the call and its receipt read
//! that. A reload mid-call changes the next call, never the current one.
//!
//! The observable: `[faults] leak_permits` is read at teardown. Switched on
//! by a reload while a call runs, the running call still releases its
//! permit (its receipt says so); the call after the reload, admitted on the
//! new configuration, leaks its permit as the fault asks.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use callgate_load::Outcome;
use callgate_sim::SimConfig;
use callgate_tests::{Harness, eventually, load, write_config};

const T: Duration = Duration::from_secs(30);

async fn reload(h: &Harness) {
    callgate::ensure_tls_provider();
    let resp = reqwest::Client::new()
        .post(format!("http://{}/admin/reload", h.server.addr))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{resp:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_mid_call_changes_the_next_call_never_the_current_one() {
    let dir = std::env::temp_dir().join(format!(
        "callgate-midcall-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("callgate.toml");
    let h = Harness::start_with_file(SimConfig::default(), |_| {}, &file).await;

    let live = tokio::spawn(callgate_load::run(load(&h, 1, 3)));
    eventually(
        T,
        "the call is admitted",
        async || h.server.app.call.gate.snapshot().active,
        |n| *n == 1,
    )
    .await;
    let mut cfg = h.server.app.cfg().as_ref().clone();
    cfg.faults.leak_permits = true;
    write_config(&file, &cfg);
    reload(&h).await;
    assert!(h.server.app.cfg().faults.leak_permits, "the reload applied");

    let live = live.await.unwrap();
    let first = &live.calls[0];
    assert_eq!(first.outcome, Outcome::Completed, "{first:#?}");
    let ledger = h.closed_ledger(&first.call_sid.to_string()).await;
    assert_eq!(
        ledger.stats["cleanup"]["permit_unreleased"], false,
        "the running call kept its admission's configuration: {:#}",
        ledger.stats
    );
    assert_eq!(ledger.stats["active_counter_delta"]["decrement"], 1);
    let snap = h.server.app.call.gate.snapshot();
    assert_eq!(
        (snap.active, snap.admitted_total - snap.released_total),
        (0, 0)
    );

    // The next call is admitted on the reloaded configuration: its permit
    // is leaked, as the fault asks.
    let next = callgate_load::run(load(&h, 1, 1)).await;
    let second = &next.calls[0];
    assert_eq!(second.outcome, Outcome::Completed, "{second:#?}");
    let ledger = h.closed_ledger(&second.call_sid.to_string()).await;
    assert_eq!(
        ledger.stats["cleanup"]["permit_unreleased"], true,
        "{:#}",
        ledger.stats
    );
    assert_eq!(
        h.server.app.call.gate.snapshot().active,
        1,
        "the leaked slot"
    );
    // Not `h.stop()`: its drain would wait out the leaked slot as a call in
    // progress. Dropping the harness stops Postgres; the runtime ends the rest.
    drop(h);
    let _ = std::fs::remove_dir_all(&dir);
}
