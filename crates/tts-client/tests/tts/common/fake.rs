//! A scripted fake provider on a loopback port that speaks the documented
//! frames of both vendors, one word at a time, and records everything it
//! receives per connection — so a test can assert exactly what a
//! reconnect re-requested, which the simulators do not record.
//!
//! Each accepted TCP connection takes the next [`Plan`] (the last one
//! repeats): refuse the upgrade with a status, or serve, optionally
//! killing the socket after so many audio chunks.
//!
//! Audio: per word of the text (with its trailing space), one chunk of
//! `(chars × 8000 / 15)` rounded-up μ-law bytes — so 15 chars/s, the
//! client's assumed rate — carrying an ElevenLabs alignment of those
//! characters (or `null`), or followed by a Cartesia `timestamps` frame
//! naming the word.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tts_client::Provider;

/// How the socket ends after `after` audio chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kill {
    /// A close frame with this code.
    Close(u16),
    /// The TCP connection just goes away.
    Reset,
}

#[derive(Debug, Clone, Copy)]
pub enum Plan {
    /// Refuse the upgrade with this HTTP status.
    Refuse(u16),
    /// Serve the protocol; end the socket after `after` chunks if given.
    Serve {
        kill: Option<(usize, Kill)>,
        aligned: bool,
    },
}

impl Plan {
    pub const SERVE: Plan = Plan::Serve {
        kill: None,
        aligned: true,
    };

    pub fn kill_after(chunks: usize, kill: Kill) -> Plan {
        Plan::Serve {
            kill: Some((chunks, kill)),
            aligned: true,
        }
    }
}

/// What one connection attempt saw.
#[derive(Debug, Clone, Default)]
pub struct Conn {
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// Text frames received, parsed as JSON.
    pub frames: Vec<Value>,
    pub refused: Option<u16>,
}

impl Conn {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every text this connection was asked to speak, concatenated
    /// (ElevenLabs `text` minus the init space, Cartesia `transcript`).
    pub fn spoken(&self) -> String {
        self.frames
            .iter()
            .filter_map(|f| f.get("transcript").or_else(|| f.get("text")))
            .filter_map(Value::as_str)
            .filter(|t| *t != " ")
            .collect()
    }
}

pub struct Fake {
    pub addr: SocketAddr,
    conns: Arc<Mutex<Vec<Conn>>>,
    plans: Arc<Mutex<VecDeque<Plan>>>,
}

impl Fake {
    pub async fn start(vendor: Provider, plans: &[Plan]) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("bound address");
        let conns = Arc::new(Mutex::new(Vec::new()));
        let plans = Arc::new(Mutex::new(plans.iter().copied().collect::<VecDeque<_>>()));
        let (c, p) = (Arc::clone(&conns), Arc::clone(&plans));
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let plan = next_plan(&p);
                tokio::spawn(serve(tcp, plan, vendor, Arc::clone(&c)));
            }
        });
        Fake { addr, conns, plans }
    }

    /// From now on every new connection follows `plan`.
    pub fn set_plan(&self, plan: Plan) {
        let mut plans = self.plans.lock().expect("plans");
        plans.clear();
        plans.push_back(plan);
    }

    pub fn conns(&self) -> Vec<Conn> {
        self.conns.lock().expect("conns").clone()
    }

    pub fn base_url(&self) -> String {
        format!("ws://{}", self.addr)
    }
}

fn next_plan(plans: &Mutex<VecDeque<Plan>>) -> Plan {
    let mut plans = plans.lock().expect("plans");
    if plans.len() > 1 {
        plans.pop_front().expect("non-empty")
    } else {
        *plans.front().unwrap_or(&Plan::SERVE)
    }
}

// The handshake callback's error type is tungstenite's, large or not.
#[allow(clippy::result_large_err)]
async fn serve(tcp: TcpStream, plan: Plan, vendor: Provider, conns: Arc<Mutex<Vec<Conn>>>) {
    let index = {
        let mut c = conns.lock().expect("conns");
        c.push(Conn::default());
        c.len() - 1
    };
    let record = Arc::clone(&conns);
    let refuse = match plan {
        Plan::Refuse(status) => Some(status),
        Plan::Serve { .. } => None,
    };
    let callback = move |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        let mut c = record.lock().expect("conns");
        let conn = &mut c[index];
        conn.path = req.uri().to_string();
        conn.headers = req
            .headers()
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        conn.refused = refuse;
        match refuse {
            Some(status) => {
                let mut r = ErrorResponse::new(Some("refused by the fake".into()));
                *r.status_mut() = status.try_into().expect("a status");
                Err(r)
            }
            None => Ok(resp),
        }
    };
    let Ok(ws) = tokio_tungstenite::accept_hdr_async(tcp, callback).await else {
        return;
    };
    let Plan::Serve { kill, aligned } = plan else {
        return;
    };
    let mut session = Session {
        ws,
        vendor,
        aligned,
        kill,
        chunks: 0,
        index,
        conns,
    };
    session.run().await;
}

struct Session {
    ws: tokio_tungstenite::WebSocketStream<TcpStream>,
    vendor: Provider,
    aligned: bool,
    kill: Option<(usize, Kill)>,
    chunks: usize,
    index: usize,
    conns: Arc<Mutex<Vec<Conn>>>,
}

/// The session ended (killed, closed, or the peer left).
struct Ended;

impl Session {
    async fn run(&mut self) {
        while let Some(Ok(msg)) = self.ws.next().await {
            // A close is answered by tungstenite itself on the next read,
            // which then ends the stream.
            let Message::Text(text) = msg else {
                continue;
            };
            let frame: Value = serde_json::from_str(text.as_str()).expect("client sends JSON");
            self.conns.lock().expect("conns")[self.index]
                .frames
                .push(frame.clone());
            let handled = match self.vendor {
                Provider::ElevenLabs => self.elevenlabs(&frame).await,
                _ => self.cartesia(&frame).await,
            };
            if handled.is_err() {
                return;
            }
        }
    }

    async fn elevenlabs(&mut self, f: &Value) -> Result<(), Ended> {
        let ctx = f["context_id"].as_str().unwrap_or_default().to_owned();
        if f["close_socket"] == true {
            let _ = self.ws.close(None).await;
            return Err(Ended);
        }
        if f["close_context"] == true {
            return self.send(json!({"isFinal": true, "contextId": ctx})).await;
        }
        let text = f["text"].as_str().unwrap_or_default();
        for word in words(text) {
            let chars: Vec<String> = word.chars().map(String::from).collect();
            let alignment = if self.aligned {
                json!({"chars": chars, "charStartTimesMs": vec![0; chars.len()], "charDurationsMs": vec![1; chars.len()]})
            } else {
                Value::Null
            };
            let audio = audio_for(&word);
            let msg = json!({"audio": audio, "contextId": ctx, "isFinal": null,
                             "alignment": alignment, "normalizedAlignment": null});
            self.chunk(msg, None).await?;
        }
        Ok(())
    }

    async fn cartesia(&mut self, f: &Value) -> Result<(), Ended> {
        let ctx = f["context_id"].as_str().unwrap_or_default().to_owned();
        if f["cancel"] == true {
            return Ok(());
        }
        for word in words(f["transcript"].as_str().unwrap_or_default()) {
            let chunk = json!({"type": "chunk", "data": audio_for(&word), "done": false,
                               "status_code": 206, "context_id": ctx});
            let stamps = json!({"type": "timestamps", "done": false, "context_id": ctx,
                                "word_timestamps": {"words": [word.trim()], "start": [0], "end": [0.1]}});
            self.chunk(chunk, self.aligned.then_some(stamps)).await?;
        }
        if f["continue"] == false {
            return self
                .send(json!({"type": "done", "done": true, "status_code": 206, "context_id": ctx}))
                .await;
        }
        Ok(())
    }

    /// One audio chunk (and its separate alignment), then the kill if due.
    async fn chunk(&mut self, audio: Value, alignment: Option<Value>) -> Result<(), Ended> {
        self.send(audio).await?;
        if let Some(a) = alignment {
            self.send(a).await?;
        }
        self.chunks += 1;
        match self.kill {
            Some((after, kill)) if self.chunks >= after => {
                if let Kill::Close(code) = kill {
                    let frame = CloseFrame {
                        code: CloseCode::from(code),
                        reason: "fault injected".into(),
                    };
                    let _ = self.ws.close(Some(frame)).await;
                }
                Err(Ended)
            }
            _ => Ok(()),
        }
    }

    async fn send(&mut self, v: Value) -> Result<(), Ended> {
        self.ws
            .send(Message::Text(v.to_string().into()))
            .await
            .map_err(|_| Ended)
    }
}

/// Each word of `text` with the whitespace after it.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        let ended = cur.ends_with(char::is_whitespace) && cur.chars().any(|c| !c.is_whitespace());
        if !c.is_whitespace() && ended {
            out.push(std::mem::take(&mut cur));
        }
        cur.push(c);
    }
    if cur.chars().any(|c| !c.is_whitespace()) {
        out.push(cur);
    }
    out
}

/// μ-law silence lasting `chars / 15` seconds, base64.
fn audio_for(word: &str) -> String {
    let bytes = (word.chars().count() * 8_000).div_ceil(15);
    base64::engine::general_purpose::STANDARD.encode(vec![0xFFu8; bytes])
}
