//! Operating callgate: hot reload of the caps, the overflow webhook, drain,
//! and who may use the admin endpoints.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::sync::{Arc, Mutex};
use std::time::Duration;

use callgate::config::MaxCalls;
use callgate_load::Outcome;
use callgate_sim::SimConfig;
use callgate_tests::{Harness, eventually, load, write_config};

/// Bound on waiting for a condition the server reaches on its own.
const T: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowering_capacity_by_reload_ends_no_call_and_only_stops_admission() {
    let dir =
        std::env::temp_dir().join(format!("callgate-reload-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("callgate.toml");
    let h = Harness::start_with_file(
        SimConfig::default(),
        |c| c.admission.queue_timeout_ms = 500,
        &file,
    )
    .await;
    let live = tokio::spawn(callgate_load::run(load(&h, 3, 3)));
    let active = eventually(
        T,
        "three live calls",
        async || h.server.app.call.gate.snapshot().active,
        |n| *n == 3,
    )
    .await;
    assert_eq!(active, 3);

    let mut cfg = h.server.app.cfg().as_ref().clone();
    cfg.admission.max_concurrent_calls = MaxCalls::Pinned(1);
    write_config(&file, &cfg);
    let http = reqwest::Client::new();
    let resp = http
        .post(format!("http://{}/admin/reload", h.server.addr))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{resp:?}");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(
        (body["capacity"].as_u64(), body["active"].as_u64()),
        (Some(1), Some(3))
    );

    let refused = callgate_load::run(load(&h, 1, 1)).await;
    assert!(
        matches!(&refused.calls[0].outcome, Outcome::Rejected { reason, .. } if reason == "queue_timeout"),
        "{:#?}",
        refused.calls[0]
    );
    let live = live.await.unwrap();
    assert!(
        live.calls.iter().all(|c| c.outcome == Outcome::Completed),
        "no live call was ended: {:#?}",
        live.calls
    );
    let after = callgate_load::run(load(&h, 1, 1)).await;
    assert_eq!(
        after.calls[0].outcome,
        Outcome::Completed,
        "admission resumes once the count falls"
    );

    std::fs::write(&file, "[admission]\nmax_concurrent_calls = \"lots\"\n").unwrap();
    let resp = http
        .post(format!("http://{}/admin/reload", h.server.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status().as_u16(),
        400,
        "a bad file is refused and the running config kept"
    );
    assert_eq!(h.server.app.call.gate.snapshot().capacity, 1);
    h.assert_all_closed().await;
    h.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_overflowed_call_is_reported_to_the_webhook() {
    let seen: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let app = axum::Router::new().route(
        "/overflow",
        axum::routing::post(move |axum::Json(v): axum::Json<serde_json::Value>| {
            let sink = Arc::clone(&sink);
            async move {
                sink.lock().unwrap().push(v);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/overflow", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let mut sim = SimConfig::default();
    sim.stt.fail_upgrade_status = Some(429);
    let h = Harness::start(sim, |c| c.overflow.webhook_url = Some(hook)).await;
    let report = callgate_load::run(load(&h, 2, 1)).await;
    assert_eq!(report.summary.rejected, 2);
    let seen = eventually(
        T,
        "two overflow webhook deliveries",
        async || seen.lock().unwrap().clone(),
        |v| v.len() >= 2,
    )
    .await;
    assert_eq!(seen.len(), 2, "{seen:#?}");
    for v in &seen {
        assert_eq!(v["reason"], "setup_failed:stt");
        assert!(v["call_id"].as_str().is_some_and(|s| s.len() == 36));
        assert!(
            v["carrier_call_id"]
                .as_str()
                .is_some_and(|s| s.starts_with("CA"))
        );
    }
    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_refuses_new_calls_loudly_and_lets_live_ones_finish() {
    let h = Harness::start(SimConfig::default(), |_| {}).await;
    let live = tokio::spawn(callgate_load::run(load(&h, 2, 2)));
    // Both live calls are admitted and set up (a session open on each
    // simulator) before the drain begins.
    let (admitted, sessions) = eventually(
        T,
        "both live calls admitted and set up",
        async || {
            let s = &h.sims;
            (
                h.server.app.call.gate.snapshot().admitted_total,
                [
                    s.stt.stats().open_sessions,
                    s.tts.stats().open_sessions,
                    s.dialog.stats().open_sessions,
                ],
            )
        },
        |(admitted, sessions)| *admitted >= 2 && sessions.iter().all(|n| *n >= 2),
    )
    .await;
    assert_eq!((admitted, sessions), (2, [2, 2, 2]));
    let http = reqwest::Client::new();
    let resp = http
        .post(format!("http://{}/admin/drain", h.server.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    let ready = http
        .get(format!("http://{}/readyz", h.server.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(
        ready.status().as_u16(),
        503,
        "readiness fails while draining"
    );

    let refused = callgate_load::run(load(&h, 1, 1)).await;
    assert!(
        matches!(&refused.calls[0].outcome, Outcome::Rejected { reason, prompt_heard: true, .. } if reason == "draining"),
        "{:#?}",
        refused.calls[0]
    );
    let live = live.await.unwrap();
    assert!(
        live.calls.iter().all(|c| c.outcome == Outcome::Completed),
        "{:#?}",
        live.calls
    );
    assert_eq!(
        h.server.app.call.gate.snapshot().admitted_total,
        2,
        "no admission after the drain began"
    );
    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undrain_before_the_deadline_reopens_admission_and_is_declared() {
    let h = Harness::start(SimConfig::default(), |c| c.drain.deadline_s = 120).await;
    let http = reqwest::Client::new();
    let url = |path: &str| format!("http://{}{path}", h.server.addr);
    let post = async |path: &str| {
        let r = http.post(url(path)).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    assert_eq!(post("/admin/undrain").await, (409, "not draining\n".into()));
    assert_eq!(post("/admin/drain").await.0, 202);
    let refused = callgate_load::run(load(&h, 1, 1)).await;
    assert!(
        matches!(&refused.calls[0].outcome, Outcome::Rejected { reason, .. } if reason == "draining"),
        "{:#?}",
        refused.calls[0]
    );
    assert_eq!(post("/admin/undrain").await, (200, "serving\n".into()));
    let ready = http.get(url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 200, "ready again");
    let served = callgate_load::run(load(&h, 1, 1)).await;
    assert_eq!(
        served.calls[0].outcome,
        Outcome::Completed,
        "{:#?}",
        served.calls[0]
    );
    // Declared in order, so the call admitted after the undrain is legal.
    let kinds: Vec<String> =
        h.db.query("SELECT kind FROM instance_events ORDER BY at, id", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
    assert_eq!(kinds, ["started", "draining", "undrained"]);
    h.assert_all_closed().await;
    h.assert_ledger_closed().await;
    let cfg = h.server.app.cfg();
    let found = callgate::audit_http::audit_with_config(&cfg).await.unwrap();
    assert!(found.is_empty(), "{found:#?}");
    h.stop().await;
}

/// One request through the server's real router, as if it came from `peer`
/// (the listener attaches the peer address the same way).
async fn admin(
    h: &Harness,
    peer: [u8; 4],
    method: &str,
    path: &str,
    auth: Option<&str>,
) -> (u16, String) {
    use tower::ServiceExt;
    let mut req = axum::http::Request::builder().method(method).uri(path);
    if let Some(auth) = auth {
        req = req.header("authorization", auth);
    }
    let mut req = req.body(axum::body::Body::empty()).unwrap();
    let addr = std::net::SocketAddr::from((peer, 40_000));
    req.extensions_mut()
        .insert(axum::extract::ConnectInfo(addr));
    let resp = callgate::http::router(h.server.app.clone(), &h.server.carriers)
        .oneshot(req)
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body = axum::body::to_bytes(resp.into_body(), 64 * 1024)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints_are_closed_to_remote_peers_without_the_token() {
    let h = Harness::start(SimConfig::default(), |c| c.server.admin_token = None).await;
    const REMOTE: [u8; 4] = [203, 0, 113, 7];
    const LOOPBACK: [u8; 4] = [127, 0, 0, 1];

    // No token configured: a remote drain is refused and changes nothing.
    let (status, body) = admin(&h, REMOTE, "POST", "/admin/drain", None).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("loopback only"), "{body}");
    assert_eq!(body.lines().count(), 1, "a one-line reason: {body:?}");
    let (status, _) = admin(&h, REMOTE, "POST", "/admin/drain", Some("Bearer guess")).await;
    assert_eq!(status, 401, "no token configured: nothing is accepted");
    let (status, _) = admin(&h, REMOTE, "POST", "/admin/reload", None).await;
    assert_eq!(status, 401);
    assert!(
        !h.server.app.call.gate.is_draining(),
        "a refused drain does not drain"
    );
    // Loopback may look without a token; /metrics is readable by any peer
    // until a token is set (serve --check names it).
    let (status, body) = admin(&h, LOOPBACK, "GET", "/admin/status", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(admin(&h, REMOTE, "GET", "/metrics", None).await.0, 200);

    // A token configured: everyone needs it, loopback included.
    let mut cfg = h.server.app.cfg().as_ref().clone();
    cfg.server.admin_token = Some("op-token-1".into());
    h.server.app.apply(cfg);
    let (status, body) = admin(
        &h,
        REMOTE,
        "GET",
        "/admin/status",
        Some("Bearer op-token-2"),
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("admin token required"), "{body}");
    let (status, _) = admin(&h, LOOPBACK, "GET", "/admin/status", None).await;
    assert_eq!(status, 401, "loopback needs the token once one is set");
    let (status, body) = admin(
        &h,
        REMOTE,
        "GET",
        "/admin/status",
        Some("Bearer op-token-1"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(!h.server.app.call.gate.is_draining());
    // /metrics too, once a token is set: without it 401, with it 200.
    let (status, _) = admin(&h, LOOPBACK, "GET", "/metrics", None).await;
    assert_eq!(status, 401, "metrics need the token once one is set");
    let (status, body) = admin(&h, REMOTE, "GET", "/metrics", Some("Bearer op-token-1")).await;
    assert_eq!(status, 200);
    assert!(body.contains("callgate_calls_active"), "{body}");

    h.assert_all_closed().await;
    h.stop().await;
}

/// `GET http://{addr}{path}`: status and body.
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let resp = reqwest::get(format!("http://{addr}{path}")).await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_listener_takes_the_operator_surface_off_the_public_one() {
    let h = Harness::start(SimConfig::default(), |c| {
        c.server.admin_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let public = h.server.addr;
    let operator = h.server.admin_addr.expect("admin_listen was set");
    assert_ne!(public, operator);

    // The public listener: calls and probes, nothing an operator reads.
    let served = callgate_load::run(load(&h, 1, 1)).await;
    assert!(
        served.calls[0].outcome.is_served(),
        "{:#?}",
        served.calls[0]
    );
    for path in [
        "/admin/status",
        "/metrics",
        "/admin/audit",
        "/v1/sessions/x",
    ] {
        assert_eq!(
            get(public, path).await.0,
            404,
            "{path} on the public listener"
        );
    }
    assert_eq!(get(public, "/readyz").await.0, 200);

    // The operator listener: metrics, admin (same guard), probes; no upgrades.
    let (status, metrics) = get(operator, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("callgate_calls_admitted_total"),
        "{metrics}"
    );
    let (status, body) = get(operator, "/admin/status").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(get(operator, "/healthz").await.0, 200);
    assert_eq!(get(operator, "/v1/media-stream").await.0, 404);
}
