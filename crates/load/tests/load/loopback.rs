//! `run()` against tiny in-test Twilio-media-stream servers on loopback.
//!
//! Deadlines are generous: these tests wait on real sockets and real time,
//! but assert outcomes and orderings, never machine-speed-dependent values.

// The whole file is test code: the helper servers unwrap too.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use callgate_load::connect::twilio_signature;
use callgate_load::prompts;
use callgate_load::{LoadConfig, Outcome, Prompt, PromptsHeard, run};
use futures_util::{SinkExt, StreamExt};
use media::format::AudioFormat;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};

/// Longest any one scenario may take before the test fails loudly.
const TEST_DEADLINE: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Behaviour {
    /// Greets, then answers each utterance with audio and a `turn-n` mark.
    Converse,
    /// Accepts, reads, never says anything.
    Mute,
    /// Plays (the start of) the bundled overflow prompt, closes once its
    /// mark is echoed.
    Overflow,
    /// Like `Converse`, but each reply stalls: the bundled apology first,
    /// the reply 1.2 s later (queued behind the apology's playout).
    ApologizeThenReply,
    /// Refuses the upgrade with HTTP 503.
    Refuse,
}

#[derive(Debug, Default)]
struct ServerLog {
    signatures: Vec<Option<String>>,
    starts: Vec<Value>,
    echoes: Vec<String>,
    marks_sent: usize,
    stops: usize,
}

type Log = Arc<Mutex<ServerLog>>;
type Ws = WebSocketStream<TcpStream>;

async fn start_server(behaviour: Behaviour) -> (String, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/v1/media-stream", listener.local_addr().unwrap());
    let log = Log::default();
    let server_log = Arc::clone(&log);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(handle(tcp, behaviour, Arc::clone(&server_log)));
        }
    });
    (url, log)
}

// The callback's error type is tungstenite's, not ours to shrink.
#[allow(clippy::result_large_err)]
async fn handle(tcp: TcpStream, behaviour: Behaviour, log: Log) {
    let header_log = Arc::clone(&log);
    let callback = move |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        let sig = req
            .headers()
            .get("X-Twilio-Signature")
            .map(|v| v.to_str().unwrap().to_string());
        header_log.lock().unwrap().signatures.push(sig);
        if behaviour == Behaviour::Refuse {
            let refusal = http::Response::builder()
                .status(503)
                .body(Some("at capacity".to_string()));
            return Err(refusal.unwrap());
        }
        Ok(resp)
    };
    let Ok(ws) = tokio_tungstenite::accept_hdr_async(tcp, callback).await else {
        return;
    };
    serve(ws, behaviour, log).await;
}

/// Bot audio of `play_ms` (constant, not silence: a stand-in for TTS).
fn bot_audio(play_ms: usize) -> Vec<u8> {
    vec![0x55u8; play_ms * 8]
}

/// A bundled prompt's audio, as the server sends it on a Twilio leg.
fn prompt_audio(prompt: Prompt) -> Vec<u8> {
    prompts::audio(prompt, AudioFormat::MULAW_8K).unwrap()
}

/// `audio` in 20 ms media messages.
async fn send_audio(ws: &mut Ws, sid: &str, audio: &[u8]) {
    for frame in audio.chunks(160) {
        let payload = B64.encode(frame);
        let msg = json!({"event":"media","streamSid":sid,"media":{"payload":payload}});
        ws.send(Message::text(msg.to_string())).await.unwrap();
    }
}

async fn send_turn(ws: &mut Ws, sid: &str, audio: &[u8], mark: &str, log: &Log) {
    send_audio(ws, sid, audio).await;
    let msg = json!({"event":"mark","streamSid":sid,"mark":{"name":mark}});
    ws.send(Message::text(msg.to_string())).await.unwrap();
    log.lock().unwrap().marks_sent += 1;
}

/// A crude server-side endpointer: speech is any non-silent μ-law frame; five
/// silent frames after speech end the utterance.
#[derive(Default)]
struct Endpointer {
    in_speech: bool,
    quiet: u32,
}

impl Endpointer {
    fn utterance_ended(&mut self, frame: &[u8]) -> bool {
        if frame.iter().any(|&b| b != 0xFF) {
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

async fn serve(mut ws: Ws, behaviour: Behaviour, log: Log) {
    let mut sid = String::new();
    let mut turn = 1;
    let mut endpointer = Endpointer::default();
    while let Some(Ok(msg)) = ws.next().await {
        let Message::Text(text) = msg else { continue };
        let v: Value = serde_json::from_str(text.as_str()).unwrap();
        match v["event"].as_str().unwrap() {
            "start" => {
                sid = v["streamSid"].as_str().unwrap().to_string();
                log.lock().unwrap().starts.push(v.clone());
                match behaviour {
                    Behaviour::Converse | Behaviour::ApologizeThenReply => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        send_turn(&mut ws, &sid, &bot_audio(600), "turn-1", &log).await;
                        turn = 2;
                    }
                    Behaviour::Overflow => {
                        // 300 ms of it: a prompt cut short is still itself.
                        let audio = prompt_audio(Prompt::Overflow);
                        let mark = "callgate-overflow:capacity";
                        send_turn(&mut ws, &sid, &audio[..2_400], mark, &log).await
                    }
                    Behaviour::Mute | Behaviour::Refuse => {}
                }
            }
            "media"
                if matches!(
                    behaviour,
                    Behaviour::Converse | Behaviour::ApologizeThenReply
                ) =>
            {
                let frame = B64.decode(v["media"]["payload"].as_str().unwrap()).unwrap();
                if endpointer.utterance_ended(&frame) {
                    if behaviour == Behaviour::ApologizeThenReply {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        send_audio(&mut ws, &sid, &prompt_audio(Prompt::Apology)).await;
                        tokio::time::sleep(Duration::from_millis(1_200)).await;
                    }
                    send_turn(
                        &mut ws,
                        &sid,
                        &bot_audio(400),
                        &format!("turn-{turn}"),
                        &log,
                    )
                    .await;
                    turn += 1;
                }
            }
            "mark" => {
                let name = v["mark"]["name"].as_str().unwrap().to_string();
                let overflow = name.starts_with("callgate-overflow:");
                log.lock().unwrap().echoes.push(name);
                if overflow {
                    let _ = ws.close(None).await;
                }
            }
            "stop" => {
                log.lock().unwrap().stops += 1;
                break;
            }
            _ => {}
        }
    }
}

fn config(url: String) -> LoadConfig {
    LoadConfig {
        url,
        calls: 1,
        utterances: 2,
        utterance_ms: (300, 500),
        think_ms: (50, 100),
        ..LoadConfig::default()
    }
}

#[tokio::test]
async fn a_conversing_server_completes_every_call_with_latencies() {
    let (url, log) = start_server(Behaviour::Converse).await;
    let cfg = LoadConfig {
        calls: 3,
        auth_token: Some("secret-token".into()),
        custom_parameters: vec![("tenant".into(), "acme".into())],
        ..config(url.clone())
    };
    let report = tokio::time::timeout(TEST_DEADLINE, run(cfg)).await.unwrap();
    for call in &report.calls {
        assert_eq!(call.outcome, Outcome::Completed, "{call:?}");
        assert_eq!((call.utterances_sent, call.replies_heard), (2, 2));
        assert_eq!(call.reply_latency_ms.len(), 2);
        // The server only answers after 100 ms of trailing silence.
        assert!(call.reply_latency_ms.iter().all(|&l| l >= 100), "{call:?}");
        assert!(call.time_to_first_audio_ms.unwrap() >= 200, "{call:?}");
        assert_eq!(call.marks_echoed, 3);
        assert!(call.bot_audio_ms >= 1_400, "{call:?}");
        assert_eq!(call.malformed_events + call.unknown_events, 0);
    }
    assert_eq!(report.summary.completed, 3);
    assert!(!report.has_failures());

    let log = log.lock().unwrap();
    assert_eq!(log.stops, 3);
    assert_eq!(log.echoes.len(), log.marks_sent);
    let expected = twilio_signature("secret-token", &url).unwrap();
    assert!(
        log.signatures
            .iter()
            .all(|s| s.as_deref() == Some(expected.as_str()))
    );
    for start in &log.starts {
        assert_eq!(start["start"]["customParameters"]["tenant"], "acme");
        assert_eq!(start["start"]["mediaFormat"]["encoding"], "audio/x-mulaw");
        assert!(
            start["start"]["callSid"]
                .as_str()
                .unwrap()
                .starts_with("CA")
        );
    }
}

#[tokio::test]
async fn a_mute_server_makes_the_call_silent() {
    let (url, log) = start_server(Behaviour::Mute).await;
    let cfg = LoadConfig {
        silence_threshold: Duration::from_millis(500),
        ..config(url)
    };
    let report = tokio::time::timeout(TEST_DEADLINE, run(cfg)).await.unwrap();
    let call = &report.calls[0];
    assert_eq!(
        call.outcome,
        Outcome::Silent {
            phase: "greeting".into()
        }
    );
    assert!(call.max_owed_silence_ms > 500, "{call:?}");
    assert!(report.has_failures());
    assert_eq!(report.summary.silent, 1);
    // The caller hung up properly: `stop` reached the server (which counts
    // it before dropping the socket that `run` waits on).
    assert_eq!(log.lock().unwrap().stops, 1);
}

#[tokio::test]
async fn an_http_503_upgrade_is_a_rejection() {
    let (url, _log) = start_server(Behaviour::Refuse).await;
    let report = tokio::time::timeout(TEST_DEADLINE, run(config(url)))
        .await
        .unwrap();
    let Outcome::Rejected {
        how,
        reason,
        prompt_heard,
        ..
    } = &report.calls[0].outcome
    else {
        panic!("{:?}", report.calls[0]);
    };
    assert_eq!(
        (how.as_str(), reason.as_str(), *prompt_heard),
        ("http_503", "at capacity", false)
    );
    assert!(!report.has_failures());
}

#[tokio::test]
async fn an_overflow_prompt_then_close_is_a_heard_rejection() {
    let (url, log) = start_server(Behaviour::Overflow).await;
    let report = tokio::time::timeout(TEST_DEADLINE, run(config(url)))
        .await
        .unwrap();
    let call = &report.calls[0];
    let Outcome::Rejected {
        how,
        reason,
        prompt_heard,
        ..
    } = &call.outcome
    else {
        panic!("{call:?}");
    };
    assert_eq!(
        (how.as_str(), reason.as_str(), *prompt_heard),
        ("overflow_mark", "capacity", true)
    );
    assert_eq!(log.lock().unwrap().echoes, ["callgate-overflow:capacity"]);
    assert_eq!(report.summary.rejected_prompt_heard, 1);
    assert_eq!(call.prompts_heard.overflow, 1);
}

#[tokio::test]
async fn an_apology_before_a_late_reply_is_an_apology_not_the_reply() {
    let (url, log) = start_server(Behaviour::ApologizeThenReply).await;
    let cfg = LoadConfig {
        utterances: 1,
        ..config(url)
    };
    let report = tokio::time::timeout(TEST_DEADLINE, run(cfg)).await.unwrap();
    let call = &report.calls[0];
    assert_eq!(call.outcome, Outcome::Completed, "{call:#?}");
    assert_eq!(
        (call.replies_heard, call.apologies_heard),
        (1, 1),
        "{call:#?}"
    );
    assert_eq!(
        call.prompts_heard,
        PromptsHeard {
            apology: 1,
            ..PromptsHeard::default()
        }
    );
    // The server waited 300 ms before the apology and 1.5 s before the reply
    // (after 100 ms of trailing silence): the latency runs to the reply.
    let (apology, reply) = (call.apology_latency_ms[0], call.reply_latency_ms[0]);
    assert!(apology >= 400, "{call:#?}");
    assert!(reply >= 1_600 && reply > apology, "{call:#?}");
    assert_eq!(call.reply_audio_ms, [400], "the apology is not reply audio");
    assert_eq!(report.summary.prompts_heard.apology, 1);
    assert_eq!(report.summary.apology_latency_ms.count, 1);
    assert_eq!(log.lock().unwrap().stops, 1);
}
