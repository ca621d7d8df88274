//! The instance as the fifth ceiling, on a real server: lag injected into
//! the server's own runtime (tasks that hog its worker threads, as a noisy
//! neighbour or a CPU quota would) trips the gate; a caller who arrives
//! then is refused with `instance_overloaded`, hears the overflow prompt and
//! is recorded; the operator sees why in `/admin/status` and `/metrics`;
//! once the lag is gone the gate reopens and a call is served.
//!
//! The bound is set far above what a busy test machine shows (150 ms p99)
//! and the injected lag far above the bound (300 ms blocks), so the test
//! asserts behaviour, not the machine's speed.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use admission::{Decider, InstanceState};
use callgate_load::Outcome;
use callgate_sim::SimConfig;
use callgate_tests::{Harness, load};

/// Tasks that each block a worker thread for `block` at a time until
/// dropped: the runtime's timers (the server's 20 ms ticker among them)
/// fire that late.
struct Hogs(Arc<AtomicBool>);

impl Hogs {
    fn start(n: usize, block: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        for _ in 0..n {
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(block);
                    tokio::task::yield_now().await;
                }
            });
        }
        Hogs(stop)
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

async fn wait_for(h: &Harness, what: &str, ok: impl Fn(&admission::GateSnapshot) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let snap = h.server.app.call.gate.snapshot();
        if ok(&snap) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {snap:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn status(h: &Harness) -> serde_json::Value {
    callgate::ensure_tls_provider();
    let url = format!("http://{}/admin/status", h.server.addr);
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_instance_refuses_with_the_prompt_names_itself_and_reopens() {
    let h = Harness::start(SimConfig::default(), |c| {
        c.admission.max_lag_ms = 150;
        c.admission.lag_window_ms = 4_000;
    })
    .await;
    let configured = h.server.app.call.gate.snapshot().configured.calls;

    let hogs = Hogs::start(2, Duration::from_millis(300));
    wait_for(&h, "the lag trips the instance ceiling", |s| {
        s.instance.state == InstanceState::Overloaded
    })
    .await;
    drop(hogs);

    // The bad samples stay in the 4 s window: still overloaded while the
    // runtime is free again, so the caller below is refused by the gate.
    let snap = h.server.app.call.gate.snapshot();
    assert_eq!(snap.decided_by, Decider::Instance, "{snap:#?}");
    assert!(snap.capacity < configured, "{snap:#?}");
    assert_eq!(snap.configured.calls, configured);
    let st = status(&h).await;
    let instance = &st["admission"]["instance"];
    assert_eq!(instance["state"], "overloaded", "{st:#}");
    assert_eq!(st["admission"]["decided_by"], "instance", "{st:#}");
    assert!(instance["reason"].is_string(), "{st:#}");
    assert!(instance["lag_p99_ms"].as_f64().unwrap() > 150.0, "{st:#}");

    let refused = callgate_load::run(load(&h, 1, 1)).await;
    let call = &refused.calls[0];
    match &call.outcome {
        Outcome::Rejected {
            reason,
            how,
            prompt_heard,
            ..
        } => {
            assert_eq!(reason, "instance_overloaded", "{call:#?}");
            assert_eq!(how, "overflow_mark", "{call:#?}");
            assert!(
                prompt_heard,
                "the refused caller heard the prompt: {call:#?}"
            );
        }
        other => panic!("expected a refusal, got {other:?}: {call:#?}"),
    }
    // The refusal log writes in batches: poll, bounded.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut reasons = h.rejection_reasons().await;
    while reasons.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        reasons = h.rejection_reasons().await;
    }
    assert_eq!(reasons, ["instance_overloaded"], "recorded with its reason");
    let metrics = reqwest::get(format!("http://{}/metrics", h.server.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            "callgate_admission_rejections_total{reason=\"instance_overloaded\",ingress=\"twilio\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("callgate_instance_overload_trips_total 1"),
        "{metrics}"
    );

    // The lag gone: reopens (below half the bound over a whole window),
    // then steps up from the calls it held; a caller is served again.
    wait_for(&h, "the gate reopens and has room", |s| {
        s.instance.state != InstanceState::Overloaded && s.capacity > s.active
    })
    .await;
    let served = callgate_load::run(load(&h, 1, 1)).await;
    assert_eq!(served.summary.completed, 1, "{:#?}", served.calls);
    h.stop().await;
}
