//! HTTP-level tests of the simulator's routes over a real loopback socket
//! (plain HTTP/1.1 by hand: the crate has no HTTP client). The WebSocket
//! protocol itself is exercised by `stt-client`'s tests.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// Generous: the machine may be busy compiling.
const DEADLINE: Duration = Duration::from_secs(10);

async fn start(cfg: SttSimConfig) -> (SttSim, std::net::SocketAddr, CancellationToken) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sim = SttSim::new(cfg);
    let cancel = CancellationToken::new();
    tokio::spawn(sim.clone().serve(listener, cancel.clone()));
    (sim, addr, cancel)
}

/// Sends one request and returns (status, body), reading by Content-Length.
async fn http(addr: std::net::SocketAddr, request: String) -> (u16, String) {
    let io = async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        loop {
            let mut chunk = [0u8; 4096];
            let n = s.read(&mut chunk).await.unwrap();
            assert!(
                n > 0,
                "connection closed early: {}",
                String::from_utf8_lossy(&buf)
            );
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).to_string();
            let Some((head, body)) = text.split_once("\r\n\r\n") else {
                continue;
            };
            let len = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_owned)
                })
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= len {
                let status = head.split(' ').nth(1).unwrap().parse().unwrap();
                return (status, body.to_owned());
            }
        }
    };
    tokio::time::timeout(DEADLINE, io).await.unwrap()
}

fn upgrade_request(query: &str, auth: Option<&str>) -> String {
    let auth = auth
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    format!(
        "GET /v1/listen?{query} HTTP/1.1\r\nHost: sim\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{auth}\r\n"
    )
}

#[tokio::test]
async fn admin_config_round_trips_and_applies() {
    let (sim, addr, cancel) = start(SttSimConfig::default()).await;
    let (status, body) = http(
        addr,
        "GET /admin/config HTTP/1.1\r\nHost: sim\r\n\r\n".into(),
    )
    .await;
    assert_eq!(status, 200);
    let cfg: SttSimConfig = serde_json::from_str(&body).unwrap();
    assert_eq!(cfg, SttSimConfig::default());

    // A partial document: everything else takes its default.
    let json = r#"{"max_sessions":0,"idle_timeout_ms":500}"#;
    let put = format!(
        "PUT /admin/config HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{json}",
        json.len()
    );
    assert_eq!(http(addr, put).await.0, 200);
    assert_eq!(sim.config().max_sessions, 0);
    assert_eq!(sim.config().idle_timeout_ms, 500);
    assert_eq!(sim.config().script, crate::script::default_script());

    let (status, body) = http(
        addr,
        upgrade_request("encoding=mulaw&sample_rate=8000", None),
    )
    .await;
    assert_eq!(status, 429);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["err_code"], "TOO_MANY_REQUESTS");
    assert!(v["err_msg"].is_string());

    let (status, body) = http(addr, "GET /stats HTTP/1.1\r\nHost: sim\r\n\r\n".into()).await;
    assert_eq!(status, 200);
    let snap: StatsSnapshot = serde_json::from_str(&body).unwrap();
    assert_eq!(snap.rejected_sessions, 1);
    assert_eq!(snap.open_sessions, 0);
    cancel.cancel();
}

#[tokio::test]
async fn refusals_check_fault_then_auth_then_params() {
    let cfg = SttSimConfig {
        api_key: Some("secret".into()),
        ..SttSimConfig::default()
    };
    let (sim, addr, cancel) = start(cfg.clone()).await;
    let good = "encoding=mulaw&sample_rate=8000";
    assert_eq!(http(addr, upgrade_request(good, None)).await.0, 401);
    assert_eq!(
        http(addr, upgrade_request(good, Some("Bearer secret")))
            .await
            .0,
        401
    );
    let (status, body) = http(
        addr,
        upgrade_request("encoding=opus&sample_rate=8000", Some("Token secret")),
    )
    .await;
    assert_eq!(status, 400);
    assert!(body.contains("encoding"), "{body}");

    sim.set_config(SttSimConfig {
        fail_upgrade_status: Some(503),
        ..cfg
    });
    assert_eq!(
        http(addr, upgrade_request(good, Some("Token secret")))
            .await
            .0,
        503
    );
    let snap = sim.stats();
    assert_eq!((snap.total_sessions, snap.faulted_sessions), (0, 1));
    cancel.cancel();
}
