//! The partner leg's detach and attach over real loopback WebSockets: a
//! lost connection detaches and what the call sends meanwhile reaches the
//! next connection; a normal close is never held; a connection still open
//! is superseded before the new one is read; a window that passes ends
//! the call and retires the token.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::sync::Arc;
use std::time::{Duration, Instant};

use admission::PartnerId;
use axum::extract::WebSocketUpgrade;
use axum::extract::ws::WebSocket;
use futures_util::{SinkExt, StreamExt};
use state_store::CallId;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message as C;

use super::*;
use crate::carrier::partner::resume::Refusal;

type Client =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

const BOUND: Duration = Duration::from_secs(5);

/// A loopback server handing each upgraded socket to the test.
struct Server {
    url: String,
    sockets: mpsc::Receiver<WebSocket>,
}

async fn server() -> Server {
    let (tx, sockets) = mpsc::channel(4);
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move |ws: WebSocketUpgrade| {
            let tx = tx.clone();
            async move {
                ws.on_upgrade(move |s| async move {
                    let _ = tx.send(s).await;
                })
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server { url, sockets }
}

impl Server {
    async fn pair(&mut self) -> (WebSocket, Client) {
        let (client, _) = tokio_tungstenite::connect_async(&self.url).await.unwrap();
        let socket = tokio::time::timeout(BOUND, self.sockets.recv())
            .await
            .unwrap()
            .unwrap();
        (socket, client)
    }
}

/// A resumable leg after `start`, and its client; returns the token.
async fn leg(
    s: &mut Server,
    reg: &Arc<Registry>,
    window: Duration,
) -> (PartnerLeg, Client, String) {
    let (socket, mut client) = s.pair().await;
    let start = r#"{"event":"start","call_id":"c-1","content-type":"audio/pcmu;rate=8000"}"#;
    client.send(C::Text(start.into())).await.unwrap();
    let (mut leg, _) = PartnerLeg::accept(socket, 16 * 1024, BOUND).await.unwrap();
    leg.resumable(Arc::clone(reg), CallId::new_random(), acme(), window);
    leg.started("sid-1");
    leg.want_audio();
    let started = text(&mut client).await;
    let token = started["resume_token"].as_str().unwrap().to_string();
    (leg, client, token)
}

fn acme() -> PartnerId {
    PartnerId::new("acme")
}

async fn event(leg: &mut PartnerLeg) -> LegEvent {
    tokio::time::timeout(BOUND, leg.next_event()).await.unwrap()
}

async fn next(client: &mut Client) -> C {
    tokio::time::timeout(BOUND, client.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
}

async fn text(client: &mut Client) -> serde_json::Value {
    match next(client).await {
        C::Text(t) => serde_json::from_str(t.as_str()).unwrap(),
        other => panic!("expected text, got {other:?}"),
    }
}

fn report(leg: &PartnerLeg) -> serde_json::Value {
    leg.resume_report().unwrap()
}

#[tokio::test]
async fn a_lost_connection_detaches_and_the_next_one_gets_what_was_held() {
    let mut s = server().await;
    let reg = Arc::new(Registry::default());
    let (mut leg, client, token) = leg(&mut s, &reg, BOUND).await;
    leg.mark("turn-1"); // sent, never echoed: re-sent on the next connection
    drop(client); // no close frame
    assert_eq!(event(&mut leg).await, LegEvent::Detached);
    leg.play(&[7u8; 160]);
    leg.mark("turn-2");

    let claim = reg.claim(&token, &acme(), Instant::now()).unwrap();
    let session = claim.session;
    let (socket, mut b) = s.pair().await;
    claim.attach(Attach { socket }).ok().unwrap();
    assert_eq!(event(&mut leg).await, LegEvent::Attached);
    let started = text(&mut b).await;
    assert_eq!(started["session_id"], session.to_string());
    assert_ne!(started["resume_token"].as_str(), Some(token.as_str()));
    assert_eq!(text(&mut b).await["name"], "turn-1");
    assert_eq!(next(&mut b).await, C::Binary(vec![7u8; 160].into()));
    assert_eq!(text(&mut b).await["name"], "turn-2");

    let r = report(&leg);
    assert_eq!(
        (r["gaps"].as_u64(), r["resumed"].as_u64()),
        (Some(1), Some(1)),
        "{r}"
    );
    assert_eq!(r["duplicate_live_legs"], 0, "{r}");
    assert_eq!(reg.live(), 1, "only the fresh token is live");
    drop(leg);
    assert_eq!(reg.live(), 0, "the call's end retires it");
}

#[tokio::test]
async fn a_normal_close_ends_the_call_at_once_and_any_other_is_held() {
    let mut s = server().await;
    let reg = Arc::new(Registry::default());
    let normal = tokio_tungstenite::tungstenite::protocol::CloseFrame {
        code: 1000.into(),
        reason: "".into(),
    };
    for frame in [Some(normal), None] {
        let (mut leg, mut client, _) = leg(&mut s, &reg, BOUND).await;
        client.close(frame.clone()).await.ok();
        let ev = event(&mut leg).await;
        assert!(matches!(ev, LegEvent::Gone(_)), "{frame:?}: {ev:?}");
    }
    // Any other code is a loss, and held.
    let away = tokio_tungstenite::tungstenite::protocol::CloseFrame {
        code: 1001.into(),
        reason: "restarting".into(),
    };
    let (mut leg, mut client, _) = leg(&mut s, &reg, BOUND).await;
    client.close(Some(away)).await.ok();
    assert_eq!(event(&mut leg).await, LegEvent::Detached);
}

#[tokio::test]
async fn an_open_connection_is_superseded_before_the_new_one_is_read() {
    let mut s = server().await;
    let reg = Arc::new(Registry::default());
    let (mut leg, mut a, token) = leg(&mut s, &reg, BOUND).await;
    a.send(C::Binary(vec![0xFF; 160].into())).await.unwrap();
    assert!(matches!(event(&mut leg).await, LegEvent::Audio(_)));

    let claim = reg.claim(&token, &acme(), Instant::now()).unwrap();
    let (socket, mut b) = s.pair().await;
    b.send(C::Binary(vec![0xFF; 160].into())).await.unwrap();
    claim.attach(Attach { socket }).ok().unwrap();
    assert_eq!(event(&mut leg).await, LegEvent::Attached);
    assert_eq!(text(&mut a).await["event"], "superseded");
    match next(&mut a).await {
        C::Close(Some(f)) => {
            assert_eq!((u16::from(f.code), f.reason.as_str()), (1000, "superseded"))
        }
        other => panic!("expected the close, got {other:?}"),
    }
    assert!(
        matches!(event(&mut leg).await, LegEvent::Audio(_)),
        "the new one is read"
    );
    assert_eq!(text(&mut b).await["event"], "started");
    let r = report(&leg);
    assert_eq!(
        (r["superseded"].as_u64(), r["gaps"].as_u64()),
        (Some(1), Some(0)),
        "{r}"
    );
    assert_eq!(r["duplicate_live_legs"], 0, "{r}");
}

#[tokio::test]
async fn a_window_that_passes_ends_the_call_and_retires_the_token() {
    let mut s = server().await;
    let reg = Arc::new(Registry::default());
    let window = Duration::from_millis(200);
    let (mut leg, client, token) = leg(&mut s, &reg, window).await;
    drop(client);
    assert_eq!(event(&mut leg).await, LegEvent::Detached);
    let ev = event(&mut leg).await;
    assert!(
        matches!(&ev, LegEvent::Gone(why) if why.contains("not resumed within 200 ms")),
        "{ev:?}"
    );
    let late = reg.claim(&token, &acme(), Instant::now());
    assert_eq!(late.err(), Some(Refusal::Expired));
    assert_eq!(report(&leg)["gaps"], 1);
}
