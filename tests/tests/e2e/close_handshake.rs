//! A peer that keeps streaming audio, as every real client does, still
//! gets the documented `error` and close frame when it sends a message over
//! the limit: the server answers, then reads (and drops) what the peer
//! still sends until the peer's close answers its own, instead of dropping
//! a socket with frames unread (which resets the connection, and the peer
//! loses the error and the close in its receive buffer).
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;

use callgate_sim::SimConfig;
use callgate_tests::raw::{RawCall, ServerMsg, Ws};
use callgate_tests::{Harness, add_partner, partner_raw};

const T: Duration = Duration::from_secs(15);
const TRIES: usize = 20;

/// Sends `big`, then at once a burst of five `frame()`s (in flight before
/// the server can have answered), then one every 20 ms until the socket
/// refuses a send (after the server's close). Returns the frames sent.
fn stream(
    mut sink: SplitSink<Ws, Message>,
    big: Message,
    frame: fn() -> Message,
) -> JoinHandle<usize> {
    tokio::spawn(async move {
        sink.send(big).await.unwrap();
        let mut sent = 0;
        while sink.send(frame()).await.is_ok() {
            sent += 1;
            if sent >= 5 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        sent
    })
}

/// Reads to the end of the stream, as a client's read loop does (the read
/// after the close frame is what sends the client's answer to it): the
/// texts, and the close frame. `None` when the connection ended without one
/// (reset, or closed unframed).
async fn until_close(rx: &mut SplitStream<Ws>) -> (Vec<String>, Option<(u16, String)>) {
    let mut texts = Vec::new();
    let read = async {
        let mut close = None;
        while let Some(Ok(msg)) = rx.next().await {
            match msg {
                Message::Text(t) => texts.push(t.to_string()),
                Message::Close(f) => close = f.map(|f| (u16::from(f.code), f.reason.to_string())),
                _ => {}
            }
        }
        close
    };
    let close = tokio::time::timeout(T, read).await.expect("closed in time");
    (texts, close)
}

fn partner_audio() -> Message {
    Message::Binary(vec![0xFF; 160].into())
}

fn twilio_audio() -> Message {
    // 160 bytes of μ-law silence, base64.
    let payload = "/".repeat(212) + "w==";
    let v = serde_json::json!({"event":"media","media":{"track":"inbound","payload":payload}});
    Message::Text(v.to_string().into())
}

/// The three oversized messages a partner client sends, in turn: a `start`
/// padded past 16 KiB (before any call), then during a call a 17 KB text
/// message and a 64 KiB binary one.
fn oversized(try_no: usize) -> (bool, Message, &'static str) {
    match try_no % 3 {
        0 => {
            let pad = "x".repeat(17_000);
            let v = serde_json::json!({"event":"start","call_id":format!("big-{try_no}"),
                "content-type":"audio/pcmu;rate=8000","metadata":{"pad":pad}});
            (
                false,
                Message::Text(v.to_string().into()),
                "text message of ",
            )
        }
        1 => {
            let v = serde_json::json!({"event":"dtmf","digit":"1","pad":"y".repeat(17_000)});
            (
                true,
                Message::Text(v.to_string().into()),
                "text message of ",
            )
        }
        _ => (
            true,
            Message::Binary(vec![0x55; 65_536].into()),
            "binary message of 65536 bytes",
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_partner_gets_the_error_and_the_close_for_every_oversized_message() {
    let h = Harness::start(SimConfig::default(), |c| add_partner(c, "acme", "k1", None)).await;
    // Frames the peer sent after its oversized messages, before each close.
    let mut streamed = 0;
    for i in 0..TRIES {
        let mut ws = partner_raw::connect(&h.partner_url(), "k1", None)
            .await
            .unwrap();
        let (in_call, big, named) = oversized(i);
        if in_call {
            partner_raw::start(&mut ws, &format!("stream-{i}")).await;
            partner_raw::started(&mut ws).await;
            // Live: admitted and set up once the greeting's audio comes.
            let greeting = async {
                while let Some(Ok(m)) = ws.next().await {
                    if m.is_binary() {
                        return;
                    }
                }
                panic!("try {i}: closed before the greeting");
            };
            tokio::time::timeout(T, greeting).await.expect("a greeting");
        }
        let (sink, mut rx) = ws.split();
        let streamer = stream(sink, big, partner_audio);
        let (texts, close) = until_close(&mut rx).await;
        let errors: Vec<serde_json::Value> = texts
            .iter()
            .map(|t| serde_json::from_str(t).unwrap())
            .filter(|v: &serde_json::Value| v["event"] == "error")
            .collect();
        assert_eq!(errors.len(), 1, "try {i}: {texts:?}");
        assert_eq!(errors[0]["code"], "message_too_large", "try {i}");
        let message = errors[0]["message"].as_str().unwrap();
        assert!(message.contains(named), "try {i}: {message}");
        assert!(message.contains("16384-byte limit"), "try {i}: {message}");
        assert_eq!(close, Some((1008, "message_too_large".into())), "try {i}");
        streamed += tokio::time::timeout(T, streamer).await.unwrap().unwrap();
        if in_call {
            let ledger = h.closed_ledger(&format!("stream-{i}")).await;
            assert_eq!(
                ledger.end_reason.as_deref(),
                Some("protocol_error:message_too_large")
            );
            assert_eq!(ledger.cleanup_status, "completed", "try {i}");
        }
    }
    let metrics = h.metrics_text().await;
    let answered = metric(
        &metrics,
        r#"callgate_ws_close_handshakes_total{outcome="answered"}"#,
    );
    assert!(answered >= TRIES as f64, "{answered} handshakes answered");
    assert!(
        streamed >= TRIES,
        "the peer streamed after its oversized messages: {streamed}"
    );
    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_twilio_peer_gets_the_close_for_every_oversized_message() {
    let h = Harness::start(SimConfig::default(), |c| {
        c.twilio.max_message_bytes = 16 * 1024
    })
    .await;
    // Frames the peer sent after its oversized messages, before each close.
    let mut streamed = 0;
    for i in 0..TRIES {
        let mut c = RawCall::connect(&h.ws_url()).await;
        c.start().await;
        loop {
            match c.recv(T).await {
                Some(ServerMsg::Media(_)) => break,
                Some(ServerMsg::Closed(why)) => panic!("try {i}: closed early: {why:?}"),
                None => panic!("try {i}: no greeting within {T:?}"),
                _ => {}
            }
        }
        let call_sid = c.call_sid.clone();
        let RawCall { ws, .. } = c;
        let (sink, mut rx) = ws.split();
        let huge = format!(
            r#"{{"event":"media","media":{{"payload":"{}"}}}}"#,
            "A".repeat(40_000)
        );
        let streamer = stream(sink, Message::Text(huge.into()), twilio_audio);
        let (_, close) = until_close(&mut rx).await;
        let (code, reason) = close.unwrap_or_else(|| panic!("try {i}: no close frame"));
        assert_eq!(code, 1008, "try {i}: {reason}");
        assert!(
            reason.contains("text message of 40040 bytes exceeds the 16384-byte limit"),
            "try {i}: {reason}"
        );
        streamed += tokio::time::timeout(T, streamer).await.unwrap().unwrap();
        let ledger = h.closed_ledger(&call_sid).await;
        assert_eq!(
            ledger.end_reason.as_deref(),
            Some("protocol_error:message_too_large")
        );
        assert_eq!(ledger.cleanup_status, "completed", "try {i}");
    }
    assert!(
        streamed >= TRIES,
        "the peer streamed after its oversized messages: {streamed}"
    );
    h.assert_all_closed().await;
    h.stop().await;
}

/// One sample's value in a Prometheus text exposition (0 when absent).
fn metric(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(sample))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}
