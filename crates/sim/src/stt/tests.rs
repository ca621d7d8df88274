//! HTTP-level tests of the simulator's routes over a real loopback socket
//! (plain HTTP/1.1 and WebSocket framing by hand: the crate has no client).
//! The WebSocket protocol itself is exercised by `stt-client`'s tests.

use std::time::Duration;

use tokio::net::TcpListener;

use super::*;
use crate::test_ws::{DEADLINE, http};

async fn start(cfg: SttSimConfig) -> (SttSim, std::net::SocketAddr, CancellationToken) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sim = SttSim::new(cfg);
    let cancel = CancellationToken::new();
    tokio::spawn(sim.clone().serve(listener, cancel.clone()));
    (sim, addr, cancel)
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

/// Polls `f` every 20 ms until it holds, at most [`DEADLINE`].
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let polled = tokio::time::timeout(DEADLINE, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(polled.is_ok(), "timed out waiting for {what}");
}

#[tokio::test]
async fn a_linear16_16khz_stream_is_transcribed_and_recorded_with_its_format() {
    use crate::test_ws::RawWs;
    use media::synth::SpeechSynth;

    let line = "A table for two at eight, please.";
    let (sim, addr, cancel) = start(SttSimConfig {
        script: vec![line.into()],
        ..SttSimConfig::default()
    })
    .await;

    let query = "/v1/listen?encoding=linear16&sample_rate=16000&channels=1&endpointing=300\
                 &vad_events=true&tag=call-42";
    let (mut ws, head) = RawWs::connect(addr, query, &[]).await.unwrap();
    let request_id = head
        .lines()
        .find_map(|l| l.strip_prefix("dg-request-id: "))
        .expect("the upgrade names the request")
        .to_owned();

    let mut synth = SpeechSynth::new(16_000, 3);
    let mut audio = synth.silence(300);
    audio.extend(synth.utterance(1_200));
    audio.extend(synth.silence(800));
    let bytes = media::format::samples_to_pcm16le(&audio);
    // 20 ms frames: 320 samples, 640 bytes.
    for frame in bytes.chunks(640) {
        ws.send_binary(frame).await;
    }
    ws.send_text(r#"{"type":"CloseStream"}"#).await;
    let (texts, code) = ws.until_close().await;
    assert_eq!(code, Some(1000));

    let messages: Vec<serde_json::Value> = texts
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect();
    let finals: Vec<&serde_json::Value> = messages
        .iter()
        .filter(|m| m["type"] == "Results" && m["is_final"] == true)
        .collect();
    assert_eq!(finals.len(), 1, "{messages:?}");
    assert_eq!(finals[0]["channel"]["alternatives"][0]["transcript"], line);
    assert_eq!(finals[0]["speech_final"], true);
    let start = finals[0]["start"].as_f64().unwrap();
    assert!((0.25..0.4).contains(&start), "speech found at {start} s");
    assert!(messages.iter().any(|m| m["type"] == "SpeechStarted"));
    let summary = messages.iter().find(|m| m["type"] == "Metadata").unwrap();
    assert_eq!(summary["duration"].as_f64().unwrap(), 2.3);

    // A second stream in the Twilio format.
    let (mut ws, _) = RawWs::connect(addr, "/v1/listen?encoding=mulaw&sample_rate=8000", &[])
        .await
        .unwrap();
    ws.send_text(r#"{"type":"CloseStream"}"#).await;
    assert_eq!(ws.until_close().await.1, Some(1000));

    eventually("both streams to close", || sim.stats().open_sessions == 0).await;
    let stats = sim.stats();
    assert_eq!(stats.total_sessions, 2);
    assert_eq!(
        stats.formats,
        [
            ("linear16/16000".to_owned(), 1),
            ("mulaw/8000".to_owned(), 1)
        ]
        .into()
    );
    eventually("the records to close", || {
        sim.sessions().iter().all(|r| !r.open)
    })
    .await;
    let records = sim.sessions();
    assert_eq!(records.len(), 2);
    let r = &records[0];
    assert_eq!(r.session, 1);
    assert_eq!(r.request_id, request_id);
    assert_eq!(r.tags, ["call-42"]);
    assert_eq!(r.request, query);
    assert_eq!(r.format, "linear16/16000");
    assert_eq!(r.audio_bytes, bytes.len() as u64);
    assert_eq!(r.audio_ms, 2_300);
    assert_eq!(r.utterances, 1);
    assert_eq!(
        (records[1].session, records[1].format.as_str()),
        (2, "mulaw/8000")
    );
    assert!(records[1].tags.is_empty());

    // The same over HTTP.
    let (status, body) = http(addr, "GET /stats HTTP/1.1\r\nHost: sim\r\n\r\n".into()).await;
    assert_eq!(status, 200);
    let served: SttStats = serde_json::from_str(&body).unwrap();
    assert_eq!(served, stats);
    let (status, body) = http(
        addr,
        "GET /stats/sessions HTTP/1.1\r\nHost: sim\r\n\r\n".into(),
    )
    .await;
    assert_eq!(status, 200);
    let served: Vec<SttSessionRecord> = serde_json::from_str(&body).unwrap();
    assert_eq!(served, records);
    cancel.cancel();
}

#[tokio::test]
async fn noise_segments_are_counted_per_stream_and_in_total() {
    use crate::test_ws::RawWs;
    use media::synth::SpeechSynth;

    let (sim, addr, cancel) = start(SttSimConfig {
        result_latency_ms: 0,
        ..SttSimConfig::default()
    })
    .await;
    // Stream 1: a cough, then an utterance; stream 2: two coughs.
    for (seed, bursts) in [(1, [150, 1_200]), (2, [150, 120])] {
        let (mut ws, _) = RawWs::connect(
            addr,
            "/v1/listen?encoding=mulaw&sample_rate=8000&endpointing=300",
            &[],
        )
        .await
        .unwrap();
        let mut synth = SpeechSynth::new(8_000, seed);
        let mut audio = synth.silence(300);
        for ms in bursts {
            audio.extend(synth.utterance(ms));
            audio.extend(synth.silence(700));
        }
        for frame in media::g711::encode_ulaw(&audio).chunks(160) {
            ws.send_binary(frame).await;
        }
        ws.send_text(r#"{"type":"CloseStream"}"#).await;
        let (texts, code) = ws.until_close().await;
        assert_eq!(code, Some(1000));
        let transcripts: Vec<String> = texts
            .iter()
            .map(|t| serde_json::from_str::<serde_json::Value>(t).unwrap())
            .filter(|m| m["type"] == "Results" && m["is_final"] == true)
            .map(|m| m["channel"]["alternatives"][0]["transcript"].to_string())
            .collect();
        let want: &[&str] = if seed == 1 {
            &["\"\"", "\"Hi, I'd like to book a table for four people.\""]
        } else {
            &["\"\"", "\"\""]
        };
        assert_eq!(transcripts, want);
    }
    eventually("the records to close", || {
        sim.sessions().iter().all(|r| !r.open)
    })
    .await;
    let counts: Vec<(u64, u64)> = sim
        .sessions()
        .iter()
        .map(|r| (r.utterances, r.noise_segments))
        .collect();
    assert_eq!(counts, [(1, 1), (0, 2)]);
    assert_eq!(sim.stats().noise_segments, 3);
    let (_, body) = http(addr, "GET /stats HTTP/1.1\r\nHost: sim\r\n\r\n".into()).await;
    let served: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(served["noise_segments"], 3);
    cancel.cancel();
}

#[test]
fn a_refusal_carries_its_error_in_the_dg_error_header() {
    let sim = SttSim::new(SttSimConfig {
        fail_upgrade_status: Some(503),
        fail_upgrade_message: Some("service unavailable".into()),
        ..SttSimConfig::default()
    });
    let refusal = sim
        .admit(&sim.config(), &HeaderMap::new(), &HashMap::new())
        .err()
        .unwrap();
    let id = Uuid::new_v4();
    let response = refusal.into_response(id);
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let h = response.headers();
    assert_eq!(h["dg-request-id"].to_str().unwrap(), id.to_string());
    let err: serde_json::Value = serde_json::from_str(h["dg-error"].to_str().unwrap()).unwrap();
    assert_eq!(err["err_code"], "INJECTED_FAULT");
    assert_eq!(err["err_msg"], "service unavailable");
    assert_eq!(err["request_id"], id.to_string());
}
