//! With an auth token (or a SharedKey secret) configured, only upgrades
//! signed as Twilio signs them are accepted: HMAC-SHA1 with the auth token,
//! or — when `X-Twilio-Webhooks-Signature-Settings` says so — HMAC-SHA256
//! with the SharedKey secret; for the URL with or without its port. Anything
//! else is refused with 403 before the upgrade.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use callgate_load::Outcome;
use callgate_sim::SimConfig;
use callgate_tests::{Harness, load};

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

const TOKEN: &str = "s3cret";
const SHARED: &str = "shared-s3cret";
const SHA256_SETTINGS: &str = "key=KS00000000000000000000000000000000,algorithm=HMAC_SHA256";
const PUBLIC: &str = "wss://voice.example.com/v1/media-stream";
const T: Duration = Duration::from_secs(15);

/// HMAC-SHA256 (RFC 2104) written out over `sha2`, base64: Twilio's
/// SharedKey signature of `url`, made without callgate's code.
fn sha256_signature(key: &str, url: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut block = [0u8; 64];
    if key.len() > block.len() {
        block[..32].copy_from_slice(&Sha256::digest(key.as_bytes()));
    } else {
        block[..key.len()].copy_from_slice(key.as_bytes());
    }
    let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(url.as_bytes())
        .finalize();
    let outer = Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize();
    B64.encode(outer)
}

/// Twilio's default signature of `url`: the load tool's HMAC-SHA1.
fn sha1_signature(token: &str, url: &str) -> String {
    callgate_load::connect::twilio_signature(token, url).unwrap()
}

/// Upgrades to the harness's media-stream endpoint with `headers`; the
/// socket, or the HTTP status that refused the upgrade.
async fn upgrade(h: &Harness, headers: &[(&'static str, &str)]) -> Result<Ws, u16> {
    let mut req = h.ws_url().into_client_request().unwrap();
    for (name, value) in headers {
        req.headers_mut().insert(*name, value.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, _)) => Ok(ws),
        Err(WsError::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("upgrade failed without an HTTP answer: {e}"),
    }
}

async fn accepted(h: &Harness, headers: &[(&'static str, &str)]) -> Ws {
    match upgrade(h, headers).await {
        Ok(ws) => ws,
        Err(status) => panic!("refused with {status}: {headers:?}"),
    }
}

async fn refused(h: &Harness, headers: &[(&'static str, &str)]) {
    match upgrade(h, headers).await {
        Err(status) => assert_eq!(status, 403, "{headers:?}"),
        Ok(_) => panic!("upgraded: {headers:?}"),
    }
}

/// Plays the carrier on an accepted socket: `start`, the greeting's first
/// audio, `stop`. The call must have been admitted and then cleaned up.
async fn call_through(h: &Harness, mut ws: Ws) {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let (call_sid, stream_sid) = (format!("CA{id}"), format!("MZ{id}"));
    let account = "AC00000000000000000000000000000000";
    let frames = [
        serde_json::json!({"event": "connected", "protocol": "Call", "version": "1.0.0"}),
        serde_json::json!({
            "event": "start", "sequenceNumber": "1", "streamSid": stream_sid,
            "start": {
                "streamSid": stream_sid, "accountSid": account, "callSid": call_sid,
                "tracks": ["inbound"], "customParameters": {},
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}
            }
        }),
    ];
    for f in frames {
        ws.send(Message::Text(f.to_string().into())).await.unwrap();
    }
    let greeting = async {
        while let Some(msg) = ws.next().await {
            if let Ok(Message::Text(t)) = msg {
                let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
                if v["event"] == "media" {
                    return true;
                }
            } else if !matches!(msg, Ok(Message::Ping(_) | Message::Pong(_))) {
                return false;
            }
        }
        false
    };
    assert!(
        tokio::time::timeout(T, greeting).await.unwrap(),
        "no greeting on a signed stream"
    );
    let stop = serde_json::json!({"event": "stop", "sequenceNumber": "2", "streamSid": stream_sid,
        "stop": {"accountSid": account, "callSid": call_sid}});
    ws.send(Message::Text(stop.to_string().into()))
        .await
        .unwrap();
    ws.close(None).await.ok();
    let ledger = h.closed_ledger(&call_sid).await;
    assert_eq!(ledger.cleanup_status, "completed", "{ledger:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_and_wrongly_signed_streams_are_refused() {
    let h = Harness::start(SimConfig::default(), |c| {
        c.twilio.auth_token = Some("s3cret".into())
    })
    .await;

    let unsigned = callgate_load::run(load(&h, 1, 1)).await;
    assert!(
        matches!(&unsigned.calls[0].outcome, Outcome::Rejected { how, .. } if how == "http_403"),
        "{:#?}",
        unsigned.calls[0]
    );
    let mut wrong = load(&h, 1, 1);
    wrong.auth_token = Some("guess".into());
    let wrong = callgate_load::run(wrong).await;
    assert!(matches!(&wrong.calls[0].outcome, Outcome::Rejected { how, .. } if how == "http_403"));

    let mut signed = load(&h, 1, 1);
    signed.auth_token = Some("s3cret".into());
    let signed = callgate_load::run(signed).await;
    assert_eq!(
        signed.calls[0].outcome,
        Outcome::Completed,
        "{:#?}",
        signed.calls[0]
    );
    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_key_sha256_streams_are_accepted_with_or_without_the_port() {
    let h = Harness::start(SimConfig::default(), |c| {
        c.twilio.auth_token = Some(TOKEN.into());
        c.twilio.shared_key_secret = Some(SHARED.into());
    })
    .await;
    let url = h.ws_url(); // ws://127.0.0.1:<port>/v1/media-stream, as the Host header says
    let settings = ("x-twilio-webhooks-signature-settings", SHA256_SETTINGS);

    // Signed with the SharedKey for the URL as requested: a whole call.
    let sig = sha256_signature(SHARED, &url);
    let ws = accepted(&h, &[("x-twilio-signature", &sig), settings]).await;
    call_through(&h, ws).await;

    // The same URL without its port.
    let portless = format!("ws://{}/v1/media-stream", h.server.addr.ip());
    let sig = sha256_signature(SHARED, &portless);
    drop(accepted(&h, &[("x-twilio-signature", &sig), settings]).await);

    // Twilio's wss:// URL (TLS ended by a proxy), with and without :443.
    let host = ("host", "voice.example.com");
    for signed in [PUBLIC, "wss://voice.example.com:443/v1/media-stream"] {
        let sig = sha256_signature(SHARED, signed);
        drop(accepted(&h, &[("x-twilio-signature", &sig), settings, host]).await);
    }

    // The account's SHA-1 signature still works without the settings header.
    let mut sha1 = load(&h, 1, 1);
    sha1.auth_token = Some(TOKEN.into());
    let sha1 = callgate_load::run(sha1).await;
    assert_eq!(
        sha1.calls[0].outcome,
        Outcome::Completed,
        "{:#?}",
        sha1.calls[0]
    );

    // Refused before the upgrade: a wrong key, the right MAC without its
    // header, the auth token's MAC under the SharedKey's header, a port that
    // is not the scheme's, an unknown algorithm, no signature at all.
    let wrong_key = sha256_signature("guess", &url);
    refused(&h, &[("x-twilio-signature", &wrong_key), settings]).await;
    let right = sha256_signature(SHARED, &url);
    refused(&h, &[("x-twilio-signature", &right)]).await;
    let token_sig = sha1_signature(TOKEN, &url);
    refused(&h, &[("x-twilio-signature", &token_sig), settings]).await;
    let port_80 = sha256_signature(SHARED, "wss://voice.example.com:80/v1/media-stream");
    refused(&h, &[("x-twilio-signature", &port_80), settings, host]).await;
    let unknown = (
        "x-twilio-webhooks-signature-settings",
        "key=KS1,algorithm=HMAC_MD5",
    );
    refused(&h, &[("x-twilio-signature", &right), unknown]).await;
    refused(&h, &[settings]).await;
    refused(&h, &[("x-twilio-signature", ""), settings]).await;

    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_public_url_is_accepted_with_or_without_its_default_port() {
    let h = Harness::start(SimConfig::default(), |c| {
        c.twilio.auth_token = Some(TOKEN.into());
        c.twilio.public_url = Some(PUBLIC.into());
    })
    .await;

    let with_port = sha1_signature(TOKEN, "wss://voice.example.com:443/v1/media-stream");
    let ws = accepted(&h, &[("x-twilio-signature", &with_port)]).await;
    call_through(&h, ws).await;
    let without = sha1_signature(TOKEN, PUBLIC);
    drop(accepted(&h, &[("x-twilio-signature", &without)]).await);

    // Not the scheme's port, or not the URL Twilio was told: refused.
    let port_80 = sha1_signature(TOKEN, "wss://voice.example.com:80/v1/media-stream");
    refused(&h, &[("x-twilio-signature", &port_80)]).await;
    let listener = sha1_signature(TOKEN, &h.ws_url());
    refused(&h, &[("x-twilio-signature", &listener)]).await;
    // A SharedKey signature, with no SharedKey secret configured.
    let sha256 = sha256_signature(SHARED, PUBLIC);
    let settings = ("x-twilio-webhooks-signature-settings", SHA256_SETTINGS);
    refused(&h, &[("x-twilio-signature", &sha256), settings]).await;

    h.assert_all_closed().await;
    h.stop().await;
}
