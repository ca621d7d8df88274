//! `run()` with `Protocol::Partner` against a tiny in-test partner-protocol
//! server on loopback (written here from `docs/partner-protocol.md`, sharing
//! nothing with callgate or with the load tool's own wire code).
//!
//! Deadlines are generous: these tests wait on real sockets and real time,
//! but assert outcomes, orderings and lower bounds that no machine speed
//! can break (an echo can never come before its audio has played).

// The whole file is test code: the helper server unwraps too.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use callgate_load::{
    LoadConfig, Outcome, PartnerFormat, Protocol, ServerError, TransferMessage, run,
};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// Longest any one scenario may take before the test fails loudly.
const TEST_DEADLINE: Duration = Duration::from_secs(60);
const KEY: &str = "pk_test_0123456789";
const TRANSFER_MARK: &str = "callgate-transfer:caller_requested_human";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Behaviour {
    /// Greets, answers each utterance with audio and a `turn-n` mark; the
    /// caller hangs up after its last utterance.
    Converse,
    /// Greets; answers utterance 1 with audio and marks it then clears;
    /// answers utterance 2 with a transfer prompt, then `transfer` + close.
    ClearThenTransfer,
    /// Answers `start` with an `error` and close 1008.
    Error,
}

#[derive(Debug, Default)]
struct ServerLog {
    authorizations: Vec<Option<String>>,
    starts: Vec<Value>,
    /// Length of every binary message from the caller.
    frame_lens: Vec<usize>,
    /// Every `played` name, with how long after the server began sending
    /// the audio before it the echo arrived.
    played: Vec<(String, Duration)>,
    /// Playing time of the audio queued before each mark sent.
    mark_audio: Vec<(String, Duration)>,
    stops: usize,
    /// Text messages from the caller that are not part of the protocol.
    unexpected: Vec<String>,
}

type Log = Arc<Mutex<ServerLog>>;
type Ws = WebSocketStream<TcpStream>;

async fn start_server(behaviour: Behaviour) -> (String, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/v1/partner/stream", listener.local_addr().unwrap());
    let log = Log::default();
    let server_log = Arc::clone(&log);
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok((tcp, _)) = listener.accept().await {
            n += 1;
            tokio::spawn(handle(tcp, behaviour, n, Arc::clone(&server_log)));
        }
    });
    (url, log)
}

// The callback's error type is tungstenite's, not ours to shrink.
#[allow(clippy::result_large_err)]
async fn handle(tcp: TcpStream, behaviour: Behaviour, n: usize, log: Log) {
    let header_log = Arc::clone(&log);
    let callback = move |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        let auth = req
            .headers()
            .get("Authorization")
            .map(|v| v.to_str().unwrap().to_string());
        let ok = auth.as_deref() == Some(&format!("Bearer {KEY}"));
        header_log.lock().unwrap().authorizations.push(auth);
        if !ok {
            let refusal = http::Response::builder()
                .status(401)
                .body(Some("unknown partner key".to_string()));
            return Err(refusal.unwrap());
        }
        Ok(resp)
    };
    let Ok(ws) = tokio_tungstenite::accept_hdr_async(tcp, callback).await else {
        return;
    };
    serve(ws, behaviour, n, log).await;
}

/// One session's state on the server side.
struct Session {
    ws: Ws,
    log: Log,
    format: PartnerFormat,
    /// When the server began sending the audio that the next mark follows.
    audio_since: Option<Instant>,
    queued: Duration,
    marks: Vec<(String, Instant)>,
}

impl Session {
    fn bytes_per_ms(&self) -> usize {
        self.format.frame_bytes() / 20
    }

    fn silence(&self) -> u8 {
        match self.format {
            PartnerFormat::L16 => 0,
            PartnerFormat::Pcmu => 0xFF,
        }
    }

    /// Sends `ms` of audio in messages of at most `chunk_ms`.
    async fn audio(&mut self, ms: usize, chunk_ms: usize) {
        self.audio_since.get_or_insert_with(Instant::now);
        let mut left = ms;
        while left > 0 {
            let n = left.min(chunk_ms);
            // Not silence: a tone-ish pattern of whole samples.
            let bytes = vec![0x55u8; n * self.bytes_per_ms()];
            self.ws.send(Message::binary(bytes)).await.unwrap();
            left -= n;
        }
        self.queued += Duration::from_millis(ms as u64);
    }

    async fn text(&mut self, v: Value) {
        self.ws.send(Message::text(v.to_string())).await.unwrap();
    }

    async fn mark(&mut self, name: &str) {
        let since = self.audio_since.take().unwrap_or_else(Instant::now);
        let queued = std::mem::take(&mut self.queued);
        self.log
            .lock()
            .unwrap()
            .mark_audio
            .push((name.to_string(), queued));
        self.marks.push((name.to_string(), since));
        self.text(json!({"event":"mark","name":name})).await;
    }

    async fn close(&mut self, code: CloseCode, reason: &str) {
        let frame = CloseFrame {
            code,
            reason: reason.to_string().into(),
        };
        let _ = self.ws.close(Some(frame)).await;
        // The closing handshake: read (and drop) what the client still
        // streams until its close answers ours. Dropping the socket with
        // its frames unread would reset the connection, and the client
        // could lose our last messages and the close frame with them.
        let handshake = async { while let Some(Ok(_)) = self.ws.next().await {} };
        let _ = tokio::time::timeout(Duration::from_secs(5), handshake).await;
    }
}

/// A crude endpointer: speech is any frame with a non-silent byte; five
/// silent frames after speech end the utterance.
#[derive(Default)]
struct Endpointer {
    in_speech: bool,
    quiet: u32,
}

impl Endpointer {
    fn utterance_ended(&mut self, frame: &[u8], silence: u8) -> bool {
        if frame.iter().any(|&b| b != silence) {
            self.in_speech = true;
            self.quiet = 0;
            return false;
        }
        self.quiet += 1;
        let ended = self.in_speech && self.quiet == 5;
        if ended {
            self.in_speech = false;
        }
        ended
    }
}

async fn serve(ws: Ws, behaviour: Behaviour, n: usize, log: Log) {
    let mut s = Session {
        ws,
        log: Arc::clone(&log),
        format: PartnerFormat::L16,
        audio_since: None,
        queued: Duration::ZERO,
        marks: Vec::new(),
    };
    let mut utterances = 0;
    let mut endpointer = Endpointer::default();
    while let Some(Ok(msg)) = s.ws.next().await {
        match msg {
            Message::Binary(frame) => {
                log.lock().unwrap().frame_lens.push(frame.len());
                if behaviour == Behaviour::Error || !endpointer.utterance_ended(&frame, s.silence())
                {
                    continue;
                }
                utterances += 1;
                if reply(&mut s, behaviour, utterances).await {
                    return;
                }
            }
            Message::Text(text) => {
                let v: Value = serde_json::from_str(text.as_str()).unwrap();
                match v["event"].as_str().unwrap_or_default() {
                    "start" => {
                        log.lock().unwrap().starts.push(v.clone());
                        if v["content-type"] == "audio/pcmu;rate=8000" {
                            s.format = PartnerFormat::Pcmu;
                        }
                        if behaviour == Behaviour::Error {
                            s.text(json!({"event":"error","code":"bad_start","message":"no metadata today"}))
                                .await;
                            s.close(CloseCode::Policy, "bad_start").await;
                            return;
                        }
                        s.text(json!({"event":"started","session_id":format!("sess-{n}")}))
                            .await;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        s.audio(600, 20).await;
                        s.mark("turn-1").await;
                    }
                    "played" => {
                        let name = v["name"].as_str().unwrap().to_string();
                        let since = s
                            .marks
                            .iter()
                            .find(|(m, _)| *m == name)
                            .map(|(_, t)| t.elapsed());
                        let Some(since) = since else {
                            log.lock()
                                .unwrap()
                                .unexpected
                                .push(format!("played {name}"));
                            continue;
                        };
                        log.lock().unwrap().played.push((name.clone(), since));
                        if name == TRANSFER_MARK {
                            s.text(json!({"event":"transfer","target":"+15550199","reason":"caller_requested_human"}))
                                .await;
                            s.close(CloseCode::Normal, "").await;
                            return;
                        }
                    }
                    "stop" => {
                        log.lock().unwrap().stops += 1;
                        return;
                    }
                    other => log.lock().unwrap().unexpected.push(other.to_string()),
                }
            }
            _ => {}
        }
    }
}

/// The bot's answer to utterance `n`. `true` when the session is over.
async fn reply(s: &mut Session, behaviour: Behaviour, n: usize) -> bool {
    match (behaviour, n) {
        (Behaviour::ClearThenTransfer, 1) => {
            // Prompt-sized chunks; two marks that `clear` will drop.
            s.audio(2_000, 500).await;
            s.mark("doomed").await;
            s.audio(1_000, 500).await;
            s.mark("turn-2").await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            s.text(json!({"event":"clear"})).await;
            s.audio(200, 20).await;
            s.mark("after-clear").await;
        }
        (Behaviour::ClearThenTransfer, _) => {
            s.audio(300, 20).await;
            s.mark(TRANSFER_MARK).await;
        }
        _ => {
            s.audio(400, 20).await;
            s.mark(&format!("turn-{}", n + 1)).await;
        }
    }
    false
}

fn config(url: String) -> LoadConfig {
    LoadConfig {
        url,
        protocol: Protocol::Partner,
        partner_key: Some(KEY.into()),
        calls: 1,
        utterances: 2,
        utterance_ms: (300, 500),
        think_ms: (50, 100),
        custom_parameters: vec![("tenant".into(), "acme".into())],
        ..LoadConfig::default()
    }
}

async fn run_partner(cfg: LoadConfig) -> callgate_load::LoadReport {
    tokio::time::timeout(TEST_DEADLINE, run(cfg)).await.unwrap()
}

#[tokio::test]
async fn partner_calls_authenticate_start_stream_frames_and_echo_after_playout() {
    for (format, frame) in [(PartnerFormat::L16, 640), (PartnerFormat::Pcmu, 160)] {
        let (url, log) = start_server(Behaviour::Converse).await;
        let cfg = LoadConfig {
            calls: 2,
            partner_format: format,
            ..config(url)
        };
        let report = run_partner(cfg).await;
        for call in &report.calls {
            assert_eq!(call.outcome, Outcome::Completed, "{call:#?}");
            assert_eq!((call.utterances_sent, call.replies_heard), (2, 2));
            assert!(call.reply_latency_ms.iter().all(|&l| l >= 100), "{call:?}");
            assert_eq!(call.marks_echoed, 3);
            assert_eq!(call.greeting_audio_ms, Some(600), "{call:?}");
            assert_eq!(call.reply_audio_ms, [400, 400], "{call:?}");
            assert!(call.session_id.as_deref().unwrap().starts_with("sess-"));
            assert_eq!(call.malformed_events + call.unknown_events, 0);
        }
        assert!(!report.has_failures());

        let log = log.lock().unwrap();
        assert_eq!(log.authorizations.len(), 2);
        let bearer = format!("Bearer {KEY}");
        assert!(
            log.authorizations
                .iter()
                .all(|a| a.as_deref() == Some(bearer.as_str()))
        );
        for start in &log.starts {
            let obj = start.as_object().unwrap();
            assert_eq!(obj.len(), 4, "{start}");
            assert_eq!(start["event"], "start");
            assert_eq!(start["content-type"], format.content_type());
            assert_eq!(start["metadata"], json!({"tenant":"acme"}));
            let id = start["call_id"].as_str().unwrap();
            assert!(
                id.starts_with("CA") && (1..=128).contains(&id.len()),
                "{id}"
            );
        }
        assert!(log.frame_lens.len() > 50, "{}", log.frame_lens.len());
        assert!(log.frame_lens.iter().all(|&l| l == frame), "{format:?}");
        assert_eq!(log.stops, 2);
        assert!(log.unexpected.is_empty(), "{:?}", log.unexpected);
        // Every mark is played back, and never before the audio queued
        // ahead of it could have played (it started when the server sent
        // it, and the caller can only have received it later).
        assert_eq!(log.played.len(), 6);
        for (name, since) in &log.played {
            let (_, audio) = log.mark_audio.iter().find(|(m, _)| m == name).unwrap();
            assert!(
                since >= audio,
                "{name} echoed {since:?} after {audio:?} of audio"
            );
        }
    }
}

#[tokio::test]
async fn clear_drops_buffered_audio_and_its_marks_and_a_transfer_is_recorded() {
    let (url, log) = start_server(Behaviour::ClearThenTransfer).await;
    let report = run_partner(config(url)).await;
    let call = &report.calls[0];
    assert_eq!(
        call.outcome,
        Outcome::Transferred {
            reason: "caller_requested_human".into()
        },
        "{call:#?}"
    );
    assert_eq!(
        call.transfer,
        Some(TransferMessage {
            target: Some("+15550199".into()),
            reason: "caller_requested_human".into()
        })
    );
    assert_eq!(call.close_code, Some(1000));
    assert_eq!(call.utterances_sent, 2);
    // The 3 s reply was cut after about 300 ms: far less than was sent
    // was heard (greeting 600 + ~300 + 200 + transfer prompt 300).
    assert!(
        (1_300..2_400).contains(&call.bot_audio_ms),
        "{} ms heard",
        call.bot_audio_ms
    );
    assert_eq!(call.reply_audio_ms, [3_000], "received before the clear");
    assert!(!report.has_failures());

    let log = log.lock().unwrap();
    let played: Vec<&str> = log.played.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(played, ["turn-1", "after-clear", TRANSFER_MARK]);
    assert!(log.unexpected.is_empty(), "{:?}", log.unexpected);
    // The caller had hung up on nothing: the server ended the session.
    assert_eq!(log.stops, 0);
}

#[tokio::test]
async fn a_wrong_or_missing_key_is_an_unauthorized_failure() {
    let (url, log) = start_server(Behaviour::Converse).await;
    for key in [Some("pk_wrong".to_string()), None] {
        let cfg = LoadConfig {
            partner_key: key,
            ..config(url.clone())
        };
        let report = run_partner(cfg).await;
        assert_eq!(
            report.calls[0].outcome,
            Outcome::Unauthorized {
                status: 401,
                reason: "unknown partner key".into()
            }
        );
        assert!(report.has_failures());
        assert_eq!(report.summary.unauthorized, 1);
    }
    let log = log.lock().unwrap();
    assert_eq!(
        log.authorizations,
        [Some("Bearer pk_wrong".to_string()), None]
    );
}

#[tokio::test]
async fn an_error_message_is_recorded_with_its_code() {
    let (url, _log) = start_server(Behaviour::Error).await;
    let report = run_partner(config(url)).await;
    let call = &report.calls[0];
    assert_eq!(
        call.server_error,
        Some(ServerError {
            code: "bad_start".into(),
            message: "no metadata today".into()
        })
    );
    assert_eq!(call.close_code, Some(1008));
    let Outcome::Failed { reason } = &call.outcome else {
        panic!("{call:#?}");
    };
    assert!(
        reason.contains("bad_start") && reason.contains("1008"),
        "{reason}"
    );
}
