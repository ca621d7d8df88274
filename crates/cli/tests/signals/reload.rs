//! SIGHUP reloads the caps; SIGTERM drains one call and exits.

use std::time::Duration;

use callgate::config::MaxCalls;
use callgate_load::{LoadConfig, Outcome};
use callgate_rig::{Database, ProcessOptions, Processes};
use callgate_sim::SimConfig;
use state_store::{LocalOptions, Store, StoreConfig};

/// Longest wait for each state the test expects of the server.
const PATIENCE: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_caps_and_sigterm_drains_then_exits() {
    let database = Database::local(LocalOptions::default()).await.unwrap();
    let instance = format!("signals-{}", uuid::Uuid::new_v4().simple());
    let opts = ProcessOptions {
        exe: env!("CARGO_BIN_EXE_callgate").into(),
        instance: instance.clone(),
        sim: SimConfig::default(),
    };
    let mut rig = Processes::start(database, opts, |c| c.drain.deadline_s = 60)
        .await
        .unwrap();
    rig.wait_for_status(PATIENCE, "the server to start", |s| {
        s["admission"]["capacity"] == 48
    })
    .await
    .unwrap();

    rig.rewrite_config(|c| c.admission.max_concurrent_calls = MaxCalls::Pinned(7))
        .unwrap();
    rig.server.signal("HUP").await.unwrap();
    rig.wait_for_status(PATIENCE, "SIGHUP to apply capacity 7", |s| {
        s["admission"]["capacity"] == 7
    })
    .await
    .unwrap();

    let url = rig.media_url();
    let load = |n| LoadConfig {
        url: url.clone(),
        calls: n,
        utterances: 2,
        progress: false,
        ..LoadConfig::default()
    };
    let live = tokio::spawn(callgate_load::run(load(1)));
    rig.wait_for_status(PATIENCE, "the call to be admitted", |s| {
        s["admission"]["active"] == 1
    })
    .await
    .unwrap();
    rig.server.signal("TERM").await.unwrap();
    rig.wait_for_status(PATIENCE, "the drain to start", |s| {
        s["admission"]["draining"] == true
    })
    .await
    .unwrap();
    let ready = rig
        .http()
        .get(format!("{}/readyz", rig.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status().as_u16(), 503);
    let refused = callgate_load::run(load(1)).await;
    assert!(
        matches!(&refused.calls[0].outcome, Outcome::Rejected { reason, .. } if reason == "draining"),
        "{:#?}",
        refused.calls[0]
    );
    let live = live.await.unwrap();
    assert_eq!(
        live.calls[0].outcome,
        Outcome::Completed,
        "the live call finished: {:#?}",
        live.calls[0]
    );

    let code = rig.server.wait_exit(Duration::from_secs(30)).await.unwrap();
    assert!(code.success(), "exit status {code}");
    let store = Store::connect(StoreConfig::new(rig.database().conninfo(), &instance))
        .await
        .unwrap();
    assert_eq!(store.open_ledger_sessions(&instance).await.unwrap(), 0);
    drop(store);
    let dir = rig.dir().to_path_buf();
    assert!(rig.stop().await, "the server had exited by itself");
    let _ = std::fs::remove_dir_all(dir);
}
