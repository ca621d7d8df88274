//! Bad input on the partner ingress gets a clear `error` and the documented
//! close, and loses nothing: the ledger names the violation, other calls go on.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use callgate_sim::SimConfig;
use callgate_tests::{Harness, add_partner};

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(h: &Harness) -> Ws {
    let mut req = h.partner_url().into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", "Bearer k1".parse().unwrap());
    tokio_tungstenite::connect_async(req).await.unwrap().0
}

/// Reads until the server closes; returns the JSON messages and the close.
async fn until_close(ws: &mut Ws) -> (Vec<serde_json::Value>, Option<(u16, String)>) {
    let mut texts = Vec::new();
    let read = async {
        while let Some(msg) = ws.next().await {
            match msg {
                Ok(Message::Text(t)) => texts.push(serde_json::from_str(t.as_str()).unwrap()),
                Ok(Message::Close(f)) => {
                    return f.map(|f| (u16::from(f.code), f.reason.to_string()));
                }
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    };
    let close = tokio::time::timeout(Duration::from_secs(15), read)
        .await
        .unwrap();
    (texts, close)
}

fn start(call_id: &str, content_type: &str) -> Message {
    let v = serde_json::json!({"event": "start", "call_id": call_id, "content-type": content_type});
    Message::Text(v.to_string().into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_starts_and_bad_frames_get_an_error_and_the_documented_close() {
    let h = Harness::start(SimConfig::default(), |c| add_partner(c, "acme", "k1", None)).await;

    // An audio format callgate does not play: refused before admission.
    let mut ws = connect(&h).await;
    ws.send(start("p-1", "audio/opus;rate=48000"))
        .await
        .unwrap();
    let (texts, close) = until_close(&mut ws).await;
    assert_eq!(texts[0]["event"], "error", "{texts:?}");
    assert_eq!(texts[0]["code"], "unsupported_format");
    assert_eq!(close.map(|c| c.0), Some(1008));

    // Audio before start.
    let mut ws = connect(&h).await;
    ws.send(Message::Binary(vec![0u8; 640].into()))
        .await
        .unwrap();
    let (texts, close) = until_close(&mut ws).await;
    assert_eq!(texts[0]["code"], "unexpected_event", "{texts:?}");
    assert_eq!(close.map(|c| c.0), Some(1008));

    // A call in progress sends a frame of the wrong size: `bad_audio_frame`,
    // close 1007, and the ledger says so.
    let mut ws = connect(&h).await;
    ws.send(start("p-3", "audio/l16;rate=16000")).await.unwrap();
    let first = ws.next().await.unwrap().unwrap();
    let started: serde_json::Value = serde_json::from_str(first.to_text().unwrap()).unwrap();
    assert_eq!(started["event"], "started", "{started}");
    for _ in 0..50 {
        ws.send(Message::Binary(vec![0u8; 640].into()))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ws.send(Message::Binary(vec![0u8; 641].into()))
        .await
        .unwrap();
    let (texts, close) = until_close(&mut ws).await;
    let err = texts
        .iter()
        .find(|t| t["event"] == "error")
        .expect("an error message");
    assert_eq!(err["code"], "bad_audio_frame", "{texts:?}");
    assert!(err["message"].as_str().unwrap().contains("641"), "{err}");
    assert_eq!(close.map(|c| c.0), Some(1007));
    let ledger = h.closed_ledger("p-3").await;
    assert_eq!(
        ledger.end_reason.as_deref(),
        Some("protocol_error:bad_audio_frame")
    );
    assert!(
        h.event_kinds(ledger.call_id)
            .await
            .contains(&"protocol_error".to_string())
    );

    h.assert_all_closed().await;
    h.stop().await;
}
