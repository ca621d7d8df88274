//! A bare partner-protocol client for resume tests: it connects with or
//! without a `Callgate-Resume` token, streams μ-law frames in real time
//! (speech then silence, per utterance), echoes each mark as it arrives
//! and records what the server sent, until it is told to stop, to drop
//! the connection, or the server closes it. Independent of the server's
//! codec (plain JSON here).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

pub use crate::raw::Ws;
use crate::raw::speech;

/// μ-law 8 kHz: one 20 ms frame.
const FRAME_BYTES: usize = 160;
const SILENCE: u8 = 0xFF;

/// Opens `url` as partner `key`, presenting `resume` if given. A refused
/// upgrade returns its HTTP status and body.
pub async fn connect(url: &str, key: &str, resume: Option<&str>) -> Result<Ws, (u16, String)> {
    let mut req = url.into_client_request().expect("request");
    let h = req.headers_mut();
    h.insert(
        "authorization",
        format!("Bearer {key}").parse().expect("header"),
    );
    if let Some(t) = resume {
        h.insert("callgate-resume", t.parse().expect("header"));
    }
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            let body = resp.body().as_deref().unwrap_or_default();
            Err((
                resp.status().as_u16(),
                String::from_utf8_lossy(body).into_owned(),
            ))
        }
        Err(e) => panic!("connect: {e}"),
    }
}

/// Sends `start` (μ-law 8 kHz) with `call_id`.
pub async fn start(ws: &mut Ws, call_id: &str) {
    let v = serde_json::json!({"event":"start","call_id":call_id,"content-type":"audio/pcmu;rate=8000"});
    ws.send(Message::Text(v.to_string().into()))
        .await
        .expect("send start");
}

/// Reads (bounded) until `started`; returns it.
pub async fn started(ws: &mut Ws) -> serde_json::Value {
    let read = async {
        while let Some(Ok(msg)) = ws.next().await {
            if let Message::Text(t) = msg {
                let v: serde_json::Value = serde_json::from_str(t.as_str()).expect("JSON");
                if v["event"] == "started" {
                    return v;
                }
            }
        }
        panic!("closed before started");
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("started within 10 s")
}

/// Commands to a running caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Run,
    /// Send `stop`, then close 1000.
    Hangup,
    /// Drop the TCP connection without a close frame (a lost connection).
    Drop,
}

/// What the server sent a caller, and how its connection ended.
#[derive(Debug, Default)]
pub struct Log {
    pub texts: Vec<serde_json::Value>,
    pub audio_bytes: usize,
    pub frames_sent: u64,
    pub close: Option<(u16, String)>,
}

impl Log {
    pub fn events(&self) -> Vec<String> {
        self.texts
            .iter()
            .map(|v| v["event"].as_str().unwrap_or("").to_string())
            .collect()
    }
}

/// A caller running on its own task.
pub struct Caller {
    pub cmd: watch::Sender<Command>,
    pub task: JoinHandle<Log>,
}

impl Caller {
    /// Speaks `utterances` (1.2 s of speech, 3 s of silence each, seeded
    /// by `seed`), then streams silence until told otherwise or closed.
    pub fn spawn(ws: Ws, utterances: u32, seed: u64) -> Caller {
        let (cmd, rx) = watch::channel(Command::Run);
        let task = tokio::spawn(run(ws, utterances, seed, rx));
        Caller { cmd, task }
    }

    /// Tells it to end its connection `how` and returns its log (bounded).
    pub async fn end(self, how: Command) -> Log {
        let _ = self.cmd.send(how);
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("caller ends within 10 s")
            .expect("caller task")
    }
}

fn plan(utterances: u32, seed: u64) -> Vec<u8> {
    let mut audio = Vec::new();
    for i in 0..utterances {
        audio.extend(speech(1_200, seed + u64::from(i)));
        audio.extend(std::iter::repeat_n(SILENCE, 3_000 * 8));
    }
    audio
}

async fn run(mut ws: Ws, utterances: u32, seed: u64, mut cmd: watch::Receiver<Command>) -> Log {
    let audio = plan(utterances, seed);
    let silence = [SILENCE; FRAME_BYTES];
    let mut frames = audio.chunks(FRAME_BYTES);
    let mut log = Log::default();
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let frame = frames.next().filter(|f| f.len() == FRAME_BYTES);
                let frame = frame.unwrap_or(&silence).to_vec();
                if ws.send(Message::Binary(frame.into())).await.is_err() {
                    return finish(ws, log).await;
                }
                log.frames_sent += 1;
            }
            msg = ws.next() => match msg {
                Some(Ok(Message::Text(t))) => {
                    let v: serde_json::Value = serde_json::from_str(t.as_str()).expect("JSON");
                    if v["event"] == "mark" {
                        let echo = serde_json::json!({"event":"played","name":v["name"]});
                        let _ = ws.send(Message::Text(echo.to_string().into())).await;
                    }
                    log.texts.push(v);
                }
                Some(Ok(Message::Binary(b))) => log.audio_bytes += b.len(),
                Some(Ok(Message::Close(f))) => {
                    log.close = f.map(|f| (u16::from(f.code), f.reason.to_string()));
                    return finish(ws, log).await;
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return log,
            },
            Ok(()) = cmd.changed() => {
                let now = *cmd.borrow_and_update();
                match now {
                    Command::Run => {}
                    Command::Drop => return log,
                    Command::Hangup => {
                        let stop = serde_json::json!({"event":"stop"}).to_string();
                        let _ = ws.send(Message::Text(stop.into())).await;
                        let _ = ws.close(None).await;
                        return finish(ws, log).await;
                    }
                }
            }
        }
    }
}

/// Reads what is left (bounded) so the close handshake completes.
async fn finish(mut ws: Ws, mut log: Log) -> Log {
    let drain = async {
        while let Some(Ok(msg)) = ws.next().await {
            match msg {
                Message::Text(t) => {
                    if let Ok(v) = serde_json::from_str(t.as_str()) {
                        log.texts.push(v);
                    }
                }
                Message::Close(f) if log.close.is_none() => {
                    log.close = f.map(|f| (u16::from(f.code), f.reason.to_string()));
                }
                _ => {}
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
    log
}
