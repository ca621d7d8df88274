//! A bare Twilio-protocol client for tests that must send what a real
//! carrier never would (bad frames) or act at precise moments (barge-in).

use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A raw media-stream connection.
pub struct RawCall {
    pub ws: Ws,
    pub call_sid: String,
    pub stream_sid: String,
    seq: u64,
    chunk: u64,
    started: Instant,
}

/// What the server sent, decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerMsg {
    Media(usize),
    Mark(String),
    Clear,
    Closed(Option<(u16, String)>),
    Other(String),
}

impl RawCall {
    /// Connects and sends `connected` (not `start`).
    pub async fn connect(url: &str) -> RawCall {
        RawCall::connect_signed(url, None).await
    }

    /// [`RawCall::connect`] with the upgrade signed as Twilio signs it
    /// (`X-Twilio-Signature`, HMAC-SHA1 of the URL) when `auth_token` is given.
    pub async fn connect_signed(url: &str, auth_token: Option<&str>) -> RawCall {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut req = url.into_client_request().expect("a WebSocket URL");
        if let Some(token) = auth_token {
            let sig = callgate_load::connect::twilio_signature(token, url).expect("sign");
            req.headers_mut()
                .insert("x-twilio-signature", sig.parse().expect("a header value"));
        }
        let (ws, _) = tokio_tungstenite::connect_async(req)
            .await
            .expect("upgrade");
        let id = uuid::Uuid::new_v4().simple().to_string();
        let mut c = RawCall {
            ws,
            call_sid: format!("CA{id}"),
            stream_sid: format!("MZ{id}"),
            seq: 0,
            chunk: 0,
            started: Instant::now(),
        };
        c.send_text(r#"{"event":"connected","protocol":"Call","version":"1.0.0"}"#.to_string())
            .await;
        c
    }

    pub async fn send_text(&mut self, text: String) {
        self.ws
            .send(Message::Text(text.into()))
            .await
            .expect("send");
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Sends `start` with the given media encoding and rate.
    pub async fn start_with(&mut self, encoding: &str, rate: u32) {
        let seq = self.next_seq();
        let msg = serde_json::json!({
            "event": "start", "sequenceNumber": seq.to_string(), "streamSid": self.stream_sid,
            "start": {
                "streamSid": self.stream_sid, "accountSid": "AC00000000000000000000000000000000",
                "callSid": self.call_sid, "tracks": ["inbound"], "customParameters": {"tenant": "test"},
                "mediaFormat": {"encoding": encoding, "sampleRate": rate, "channels": 1}
            }
        });
        self.send_text(msg.to_string()).await;
    }

    pub async fn start(&mut self) {
        self.start_with("audio/x-mulaw", 8_000).await;
    }

    /// Sends one 20 ms μ-law frame.
    pub async fn media(&mut self, ulaw: &[u8]) {
        self.chunk += 1;
        let seq = self.next_seq();
        let msg = serde_json::json!({
            "event": "media", "sequenceNumber": seq.to_string(), "streamSid": self.stream_sid,
            "media": { "track": "inbound", "chunk": self.chunk.to_string(),
                       "timestamp": self.started.elapsed().as_millis().to_string(),
                       "payload": B64.encode(ulaw) }
        });
        self.send_text(msg.to_string()).await;
    }

    pub async fn echo_mark(&mut self, name: &str) {
        let seq = self.next_seq();
        let msg = serde_json::json!({"event":"mark","sequenceNumber":seq.to_string(),"streamSid":self.stream_sid,"mark":{"name":name}});
        self.send_text(msg.to_string()).await;
    }

    pub async fn stop(&mut self) {
        let seq = self.next_seq();
        let msg = serde_json::json!({"event":"stop","sequenceNumber":seq.to_string(),"streamSid":self.stream_sid,
            "stop":{"accountSid":"AC00000000000000000000000000000000","callSid":self.call_sid}});
        self.send_text(msg.to_string()).await;
    }

    /// The next server message, or `None` after `timeout`.
    pub async fn recv(&mut self, timeout: Duration) -> Option<ServerMsg> {
        let next = tokio::time::timeout(timeout, self.ws.next()).await.ok()?;
        Some(match next {
            None | Some(Err(_)) => ServerMsg::Closed(None),
            Some(Ok(Message::Close(f))) => {
                ServerMsg::Closed(f.map(|f| (u16::from(f.code), f.reason.to_string())))
            }
            Some(Ok(Message::Text(t))) => decode(t.as_str()),
            Some(Ok(other)) => ServerMsg::Other(format!("{other:?}")),
        })
    }

    /// Reads until the server closes the socket (bounded); returns the close.
    pub async fn until_closed(&mut self, timeout: Duration) -> Option<(u16, String)> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(ServerMsg::Closed(c)) = self.recv(deadline - Instant::now()).await {
                // One more read, as a client's read loop makes: it sends
                // the answer to the server's close (the closing handshake).
                let _ = tokio::time::timeout(Duration::from_secs(1), self.ws.next()).await;
                return c;
            }
        }
        panic!("server did not close the stream within {timeout:?}");
    }
}

impl RawCall {
    /// Streams `ulaw` audio then silence in real-time 20 ms frames for
    /// `duration`, collecting what the server sends meanwhile. Marks are
    /// echoed as they arrive (as if playout kept up), like Twilio would
    /// eventually do.
    pub async fn stream_for(&mut self, ulaw: &[u8], duration: Duration) -> Vec<ServerMsg> {
        let mut got = Vec::new();
        let start = Instant::now();
        let mut frames = ulaw.chunks(160);
        let mut next = start;
        while start.elapsed() < duration {
            let frame = frames.next().map_or_else(
                || vec![0xFF; 160],
                |f| {
                    let mut f = f.to_vec();
                    f.resize(160, 0xFF);
                    f
                },
            );
            self.media(&frame).await;
            next += Duration::from_millis(20);
            while Instant::now() < next {
                let Some(msg) = self
                    .recv(next.saturating_duration_since(Instant::now()))
                    .await
                else {
                    break;
                };
                if let ServerMsg::Mark(name) = &msg {
                    self.echo_mark(name).await;
                }
                let closed = matches!(msg, ServerMsg::Closed(_));
                got.push(msg);
                if closed {
                    return got;
                }
            }
        }
        got
    }
}

/// `ms` of speech-like audio as μ-law.
pub fn speech(ms: u32, seed: u64) -> Vec<u8> {
    let mut synth = media::synth::SpeechSynth::new(8_000, seed);
    media::g711::encode_ulaw(&synth.utterance(ms))
}

fn decode(text: &str) -> ServerMsg {
    let v: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(_) => return ServerMsg::Other(text.to_string()),
    };
    match v["event"].as_str() {
        Some("media") => ServerMsg::Media(
            B64.decode(v["media"]["payload"].as_str().unwrap_or(""))
                .map_or(0, |b| b.len()),
        ),
        Some("mark") => ServerMsg::Mark(v["mark"]["name"].as_str().unwrap_or("").to_string()),
        Some("clear") => ServerMsg::Clear,
        _ => ServerMsg::Other(text.to_string()),
    }
}
