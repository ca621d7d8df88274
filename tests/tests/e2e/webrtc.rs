//! The WebRTC ingress against real headless Chromium: the bundled page
//! (`GET /call`) calls with a fake microphone playing espeak-ng speech,
//! hears the greeting, is answered three times, and hangs up; a closed tab
//! ends `consent_lost`; a third browser at capacity 2 is refused. Every
//! call's receipt holds the server's RTCP figures and the browser's own
//! `getStats()` summary.

#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use callgate::config::{Config, MaxCalls};
use callgate_rig::process::Scratch;
use callgate_sim::SimConfig;
use callgate_tests::Harness;
use callgate_tests::chromium::{Browser, Tab, caller_wav};

const LINES: [&str; 3] = [
    "I would like to book a table for two",
    "Seven o'clock tonight please",
    "Thank you very much",
];

fn webrtc(cfg: &mut Config) {
    cfg.webrtc.enabled = true;
    cfg.webrtc.listen = "127.0.0.1:0".parse().unwrap();
    cfg.webrtc.open = true;
    // Above `call.media_stall_ms` (5 s), which must not pre-empt it.
    cfg.webrtc.consent_timeout_ms = 6_000;
}

async fn harness(tweak: impl FnOnce(&mut Config)) -> Harness {
    let mut sim = SimConfig::default();
    sim.stt.script = LINES.iter().map(|s| s.to_string()).collect();
    Harness::start(sim, |c| {
        webrtc(c);
        tweak(c);
    })
    .await
}

fn page(h: &Harness) -> String {
    format!("http://{}/call", h.server.addr)
}

/// Calls from the page; returns the state `call()` resolved to (once the
/// POST was answered: `connecting` while ICE and DTLS come up, or `refused`).
async fn call(tab: &Tab) -> String {
    let state = tab.eval("callgate.call()").await.unwrap();
    state.as_str().unwrap_or_default().to_string()
}

/// Calls and waits for the page to show the call admitted and connected.
async fn call_admitted(tab: &Tab) {
    assert_eq!(call(tab).await, "connecting");
    tab.wait_for(
        "['admitted', 'talking'].includes(callgate.state) && callgate.state",
        Duration::from_secs(15),
        "the page showing the call admitted",
    )
    .await;
}

async fn call_id(tab: &Tab) -> uuid::Uuid {
    let id = tab
        .wait_for(
            "callgate.callId",
            Duration::from_secs(10),
            "the session's call id",
        )
        .await;
    id.as_str().unwrap().parse().unwrap()
}

async fn greeting_heard(tab: &Tab) {
    tab.wait_for(
        "callgate.maxBotLevel > -50 && callgate.state",
        Duration::from_secs(20),
        "the bot's greeting playing in the page's <audio>",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_is_greeted_answered_three_times_and_hangs_up_with_both_sides_evidence() {
    let h = harness(|_| {}).await;
    let dir = Scratch::new("webrtc-call").unwrap();
    let wav = caller_wav(&dir.path, &LINES, 4.0, 5.0);
    let browser = Browser::launch(Some(&wav)).await;
    let tab = browser.open(&page(&h)).await;
    call_admitted(&tab).await;
    let id = call_id(&tab).await;
    greeting_heard(&tab).await;
    let transcript = callgate_tests::eventually(
        Duration::from_secs(45),
        "three answered utterances",
        async || h.transcript(id).await,
        |t| {
            let caller = t.iter().filter(|(s, _, _)| s == "caller").count();
            let bot = t.iter().filter(|(s, _, _)| s == "bot").count();
            caller == 3 && bot >= 4
        },
    )
    .await;
    let caller: Vec<&str> = transcript
        .iter()
        .filter(|(s, _, _)| s == "caller")
        .map(|(_, text, _)| text.as_str())
        .collect();
    assert_eq!(caller, LINES, "{transcript:#?}");
    let samples = tab
        .eval("callgate.stats().then(s => s.inbound.totalSamplesReceived)")
        .await
        .unwrap();
    assert!(
        samples.as_f64().unwrap() > 16_000.0,
        "the browser decoded audio: {samples}"
    );
    tab.eval("callgate.hangup()").await.unwrap();
    let l = h.closed_ledger(&session_of(&tab).await).await;
    assert_eq!(
        l.end_reason.as_deref(),
        Some("caller_hangup"),
        "{:#}",
        l.stats
    );
    assert_eq!(l.cleanup_status, "completed", "{:#}", l.stats);
    let t = &l.stats["media"]["transport"];
    assert_eq!(l.stats["media"]["format"], "l16_16000", "{:#}", l.stats);
    assert_eq!(t["codec"], "opus", "{t:#}");
    assert!(t["packets_in"].as_u64().unwrap() > 500, "{t:#}");
    assert!(t["packets_out"].as_u64().unwrap() > 500, "{t:#}");
    // The server's own RTCP figures, both ways.
    assert!(t["rtcp_received"]["packets"].as_u64().unwrap() > 0, "{t:#}");
    assert!(
        t["rtcp_received"]["jitter_ms"].as_f64().unwrap() < 40.0,
        "{t:#}"
    );
    assert!(t["rtcp_remote"]["jitter_ms"].is_f64(), "{t:#}");
    // The browser's own, separate, from its final summary.
    let client = &t["client"];
    assert_eq!(client["final"], true, "{t:#}");
    assert!(
        client["inbound"]["totalSamplesReceived"].as_f64().unwrap() > 16_000.0,
        "{t:#}"
    );
    assert!(
        client["inbound"]["packetsReceived"].as_f64().unwrap() > 500.0,
        "{t:#}"
    );
    assert!(client["remote_inbound"]["roundTripTime"].is_f64(), "{t:#}");
    the_page_shows_the_conversation(&h, &tab, id).await;
    h.assert_webrtc_clear().await;
}

/// Where the test leaves the page's picture (an artifact CI can keep).
fn screenshot_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("artifacts/webrtc-conversation.png")
}

/// After the hang-up the page has read the whole conversation from the
/// ledger: the caller's three sentences and the bot's words, in the
/// ledger's order, each reply with its latency, and the end reason; the
/// text is on the page, and a screenshot of it is saved.
async fn the_page_shows_the_conversation(h: &Harness, tab: &Tab, id: uuid::Uuid) {
    tab.wait_for(
        "callgate.conversationComplete",
        Duration::from_secs(10),
        "the page reading the conversation to its end",
    )
    .await;
    let shown = tab.eval("callgate.conversation").await.unwrap();
    let shown = shown.as_array().unwrap();
    let ledger = h.transcript(id).await;
    let words: Vec<(String, String)> = shown
        .iter()
        .map(|t| {
            let who = t["speaker"].as_str().unwrap().to_string();
            (who, t["text"].as_str().unwrap().to_string())
        })
        .collect();
    let recorded: Vec<(String, String)> = ledger
        .iter()
        .map(|(s, t, _)| (s.clone(), t.clone()))
        .collect();
    assert_eq!(words, recorded, "the page shows what the ledger holds");
    let caller: Vec<&str> = shown
        .iter()
        .filter(|t| t["speaker"] == "caller")
        .map(|t| t["text"].as_str().unwrap())
        .collect();
    assert_eq!(caller, LINES);
    // Each caller turn was answered, and each answer carries its latency.
    let replies: Vec<f64> = shown
        .iter()
        .filter_map(|t| t["latency_ms"]["total"].as_f64())
        .collect();
    assert_eq!(replies.len(), 3, "{shown:#?}");
    assert!(
        replies.iter().all(|ms| *ms > 0.0 && *ms < 10_000.0),
        "{replies:?}"
    );
    let text = tab
        .eval("document.querySelector('main').innerText")
        .await
        .unwrap();
    let text = text.as_str().unwrap();
    for line in LINES {
        assert!(text.contains(&format!("You: {line}")), "{text}");
    }
    assert_eq!(text.matches("replied in ").count(), 3, "{text}");
    assert!(text.contains("The call ended: caller_hangup."), "{text}");
    let png = screenshot_path();
    tab.screenshot(&png).await;
    eprintln!("the page's conversation: {}", png.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speech_over_the_greeting_stops_outbound_audio_within_a_frame_and_tells_the_dialog() {
    let h = harness(|_| {}).await;
    let dir = Scratch::new("webrtc-barge").unwrap();
    // The utterance is cued once the page hears the greeting (~3 s long),
    // so it lands over it however long ICE, DTLS and setup took.
    let wav = caller_wav(&dir.path, &LINES[..1], 0.0, 1.0);
    let browser = Browser::launch(None).await;
    let tab = browser.open(&page(&h)).await;
    tab.cue_mic(&wav).await;
    call_admitted(&tab).await;
    let id = call_id(&tab).await;
    greeting_heard(&tab).await;
    tab.speak().await;
    callgate_tests::eventually(
        Duration::from_secs(30),
        "the interrupting utterance answered",
        async || h.transcript(id).await,
        |t| t.iter().filter(|(s, _, _)| s == "bot").count() >= 2,
    )
    .await;
    tab.eval("callgate.hangup()").await.unwrap();
    let l = h.closed_ledger(&session_of(&tab).await).await;
    let i = &l.stats["interaction"];
    assert_eq!(i["interruptions"], 1, "{:#}", l.stats);
    assert!(i["barge_in_stop_max_us"].is_u64(), "{:#}", l.stats);
    let t = &l.stats["media"]["transport"];
    assert!(t["clears"].as_u64().unwrap() >= 1, "{t:#}");
    // The first frame after the clear carried none of the cleared audio: one
    // 20 ms tick of the playout clock, plus its lag bound on a busy machine.
    let stop = t["clear_to_silence_max_us"].as_u64().unwrap();
    assert!(stop <= 120_000, "{t:#}");
    assert_eq!(h.sims.dialog.interrupts(), 1, "the dialog was told");
    h.assert_webrtc_clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_tab_ends_consent_lost_and_leaves_nothing_behind() {
    let h = harness(|_| {}).await;
    let (_browser, tab, session) = greeted(&h).await;
    let closed = std::time::Instant::now();
    tab.close().await;
    let l = h.closed_ledger(&session).await;
    let took = closed.elapsed();
    assert_eq!(
        l.end_reason.as_deref(),
        Some("consent_lost"),
        "{:#}",
        l.stats
    );
    // The configured bound (6 s) plus the ledger's write-behind; not the
    // 5 s media stall.
    assert!(took < Duration::from_secs(14), "ended after {took:?}");
    assert!(took >= Duration::from_millis(5_500), "ended after {took:?}");
    let status: serde_json::Value = reqwest::get(format!(
        "http://{}/v1/webrtc/sessions/{session}",
        h.server.addr
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(status["end_reason"], "consent_lost", "{status}");
    assert_eq!(
        l.stats["media"]["transport"]["lost"], "consent_lost",
        "{:#}",
        l.stats
    );
    h.assert_webrtc_clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_that_closes_its_peer_connection_hangs_up_at_once() {
    let h = harness(|_| {}).await;
    let (_browser, tab, session) = greeted(&h).await;
    let gate = &h.server.app.call.gate;
    assert_eq!(gate.snapshot().active, 1);
    let closed = std::time::Instant::now();
    tab.eval("callgate.closePeer()").await.unwrap();
    let freed = callgate_tests::eventually(
        Duration::from_secs(10),
        "the slot freed",
        async || (gate.snapshot().active, closed.elapsed()),
        |(active, _)| *active == 0,
    )
    .await
    .1;
    eprintln!("slot freed {freed:?} after close()");
    // Within a consent interval, far inside the 4 s consent bound: the
    // close, not the silence after it, ended the call.
    assert!(freed < Duration::from_secs(2), "freed after {freed:?}");
    let l = h.closed_ledger(&session).await;
    assert_eq!(
        l.end_reason.as_deref(),
        Some("caller_hangup"),
        "{:#}",
        l.stats
    );
    h.assert_webrtc_clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_that_keeps_consent_but_sends_no_audio_ends_media_stalled() {
    let h = harness(|_| {}).await;
    let (_browser, tab, session) = greeted(&h).await;
    let stopped = std::time::Instant::now();
    tab.eval("callgate.stopSending()").await.unwrap();
    let l = h.closed_ledger(&session).await;
    let took = stopped.elapsed();
    assert_eq!(
        l.end_reason.as_deref(),
        Some("carrier_media_stalled"),
        "{:#}",
        l.stats
    );
    // `call.media_stall_ms` (5 s), before the 6 s consent bound could be
    // reached: the browser kept answering for its consent.
    assert!(took >= Duration::from_millis(4_500), "ended after {took:?}");
    assert_eq!(
        l.stats["media"]["transport"]["lost"],
        "carrier_media_stalled"
    );
    tab.wait_for(
        "callgate.endReason",
        Duration::from_secs(5),
        "the page's status poll showing the ending",
    )
    .await;
    assert_eq!(
        tab.eval("callgate.endReason").await.unwrap(),
        "carrier_media_stalled",
        "the status names the receipt's ending"
    );
    h.assert_webrtc_clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_browser_that_is_then_refused_hears_the_overflow_prompt() {
    let h = harness(|c| {
        c.admission.max_concurrent_calls = MaxCalls::Pinned(1);
        c.admission.queue_max = 1;
        c.admission.queue_timeout_ms = 2_000;
    })
    .await;
    let browser = Browser::launch(None).await;
    let first = browser.open(&page(&h)).await;
    call_admitted(&first).await;
    let queued = browser.open(&page(&h)).await;
    assert_eq!(call(&queued).await, "connecting", "a 201: queued");
    queued
        .wait_for(
            "callgate.state === 'refusing' && callgate.state",
            Duration::from_secs(15),
            "the status saying the overflow prompt plays",
        )
        .await;
    queued
        .wait_for(
            "callgate.state === 'refused' && callgate.state",
            Duration::from_secs(20),
            "the status saying refused once the prompt is over",
        )
        .await;
    assert_eq!(
        queued.eval("callgate.endReason").await.unwrap(),
        "queue_timeout"
    );
    let metrics = h.metrics_text().await;
    assert!(
        metrics.contains(
            "callgate_overflow_calls_total{reason=\"queue_timeout\",prompt_heard=\"true\"} 1"
        ),
        "the prompt was played to its final mark: {metrics}"
    );
    assert_eq!(
        h.rejection_reasons().await,
        vec!["queue_timeout".to_string()]
    );
    // The status's call id finds the refusal on the admin surface, and so
    // does the session id (the carrier call id) beside the admitted call.
    let id = call_id(&queued).await;
    let refusal = refusal_found(&h, id).await;
    assert_eq!(refusal["ingress"], "webrtc");
    assert!(refusal["admission_wait_ms"].as_u64().unwrap() >= 2_000);
    let session = session_of(&queued).await;
    let (status, found) = h
        .admin_json(&format!("/v1/sessions?carrier_call_id={session}"))
        .await;
    assert_eq!(status, 200);
    assert_eq!(found["sessions"][0]["outcome"], "refused", "{found}");
    assert_eq!(found["sessions"][0]["session_id"], id.to_string());
    first.eval("callgate.hangup()").await.unwrap();
    h.assert_webrtc_clear().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_capacity_two_a_third_browser_is_refused_with_503_and_recorded() {
    let h = harness(|c| {
        c.admission.max_concurrent_calls = MaxCalls::Pinned(2);
        c.admission.queue_max = 0;
        c.webrtc.retry_after_s = 17;
    })
    .await;
    let browser = Browser::launch(None).await;
    let mut tabs = Vec::new();
    for _ in 0..2 {
        let tab = browser.open(&page(&h)).await;
        call_admitted(&tab).await;
        tabs.push(tab);
    }
    let third = browser.open(&page(&h)).await;
    assert_eq!(call(&third).await, "refused");
    let reason = third.eval("callgate.endReason").await.unwrap();
    assert_eq!(
        reason, "queue_full",
        "the gate's reason, from the 503's JSON"
    );
    assert_eq!(third.eval("callgate.retryAfter").await.unwrap(), 17);
    // The refusal as HTTP sees it, from the same browser: the status, the
    // header itself (exposed to scripts by CORS) and the JSON reason.
    let raw = third.eval(REFUSED_POST).await.unwrap();
    assert_eq!(raw, serde_json::json!([503, "17", "queue_full"]), "{raw}");
    let reasons = h.rejection_reasons().await;
    assert_eq!(
        reasons.len(),
        2,
        "the page's and the raw POST's: {reasons:?}"
    );
    // The 503 names the call id the refusal was recorded under.
    let id = third.eval("callgate.callId").await.unwrap();
    let refusal = refusal_found(&h, id.as_str().unwrap().parse().unwrap()).await;
    assert_eq!(refusal["end_reason"], "queue_full");
    for tab in &tabs {
        tab.eval("callgate.hangup()").await.unwrap();
    }
    h.assert_all_closed().await;
    h.assert_webrtc_clear().await;
}

/// `GET /v1/sessions/<id>` for a refused call, once its batch has landed:
/// the answer, checked to be the refusal it should be.
async fn refusal_found(h: &Harness, id: uuid::Uuid) -> serde_json::Value {
    let path = format!("/v1/sessions/{id}");
    let (status, body) = callgate_tests::eventually(
        Duration::from_secs(5),
        "the refusal readable by its call id",
        async || h.admin_json(&path).await,
        |(status, _)| *status != 404,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["outcome"], "refused", "{body}");
    assert_eq!(body["session_id"], id.to_string());
    assert_eq!(body["refused_by"], h.instance.as_str());
    assert!(body["refused_at"].as_str().unwrap().ends_with('Z'));
    body
}

/// A browser offer POSTed by hand: `[status, Retry-After, reason]`.
const REFUSED_POST: &str = "(async () => {
  const pc = new RTCPeerConnection();
  pc.addTransceiver('audio');
  const offer = await pc.createOffer();
  const r = await fetch('/v1/webrtc', {
    method: 'POST', headers: { 'content-type': 'application/sdp' }, body: offer.sdp });
  pc.close();
  return [r.status, r.headers.get('Retry-After'), (await r.json()).reason];
})()";

/// The page's session id (the ledger's carrier call id).
/// A browser whose page called and heard the greeting: the browser (kept
/// for the test's length), its tab and the session id.
async fn greeted(h: &Harness) -> (Browser, Tab, String) {
    let browser = Browser::launch(None).await;
    let tab = browser.open(&page(h)).await;
    call_admitted(&tab).await;
    greeting_heard(&tab).await;
    let session = session_of(&tab).await;
    (browser, tab, session)
}

async fn session_of(tab: &Tab) -> String {
    let url = tab.eval("callgate.sessionUrl").await.unwrap();
    url.as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string()
}
