//! The Twilio voice webhook (`POST /v1/twilio/voice`) on a gate of one
//! call: below capacity it answers `<Connect><Stream>` and the stream that
//! follows is admitted on the reserved slot (the same call id, no second
//! decision); at capacity it answers the overflow prompt and `<Dial>` — no
//! stream is opened — and the refusal is recorded with its reason; a
//! reservation whose stream never comes is released and counted. Signed
//! like the stream: unsigned or wrongly signed requests get 403.

#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use callgate::config::MaxCalls;
use callgate_sim::SimConfig;
use callgate_tests::raw::RawCall;
use callgate_tests::{Harness, eventually};

const TOKEN: &str = "tw-s3cret";
const HUMANS: &str = "+15550100";

async fn harness() -> Harness {
    Harness::start(SimConfig::default(), |c| {
        c.admission.max_concurrent_calls = MaxCalls::Pinned(1);
        c.admission.queue_max = 0;
        c.twilio.auth_token = Some(TOKEN.into());
        c.twilio.webhook.enabled = true;
        c.twilio.webhook.wait_ms = 0;
        c.twilio.webhook.reservation_ms = 1_500;
        c.twilio.webhook.transfer_to = Some(HUMANS.into());
        c.call.media_stall_ms = 30_000;
    })
    .await
}

fn call_sid(n: u8) -> String {
    format!("CA{:032x}", u128::from(n) * 0x1111)
}

/// Twilio's webhook request for `sid`: the form, signed over the URL and
/// the parameters sorted by name (`sign: false` sends no signature).
async fn webhook(h: &Harness, sid: &str, sign: bool) -> (u16, String) {
    let params = [
        ("AccountSid", "AC00000000000000000000000000000000"),
        ("CallSid", sid),
        ("CallStatus", "ringing"),
        ("Direction", "inbound"),
        ("From", "+15551234567"),
        ("To", "+15557654321"),
    ];
    post(h, "/v1/twilio/voice", &params, sign).await
}

/// A form POST as Twilio makes it; `params` sorted by name.
async fn post(h: &Harness, path: &str, params: &[(&str, &str)], sign: bool) -> (u16, String) {
    let url = format!("http://{}{path}", h.server.addr);
    // The signed string is the URL, then each name and value.
    let signed: String = params.iter().map(|(k, v)| format!("{k}{v}")).collect();
    let sig = callgate_load::connect::twilio_signature(TOKEN, &format!("{url}{signed}")).unwrap();
    let body: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{k}={}", v.replace('+', "%2B").replace(' ', "+")))
        .collect();
    callgate::ensure_tls_provider();
    let mut req = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.join("&"));
    if sign {
        req = req.header("x-twilio-signature", sig);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Twilio's call-status callback for `sid`.
async fn status_callback(h: &Harness, sid: &str, status: &str) -> u16 {
    let params = [
        ("AccountSid", "AC00000000000000000000000000000000"),
        ("CallDuration", "12"),
        ("CallSid", sid),
        ("CallStatus", status),
        ("Timestamp", "Tue, 08 Dec 2026 01:20:00 +0000"),
    ];
    post(h, "/v1/twilio/status", &params, true).await.0
}

/// The call id a `<Connect>` answer names.
fn reserved_id(twiml: &str) -> uuid::Uuid {
    let at = twiml.find("name=\"callgate_call_id\" value=\"").unwrap();
    twiml[at + 31..at + 67].parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_admits_onto_a_reservation_refuses_without_a_stream_and_releases_what_never_came()
 {
    let h = harness().await;
    assert_eq!(webhook(&h, &call_sid(9), false).await.0, 403, "unsigned");
    let (status, body) = webhook(&h, "CA-not-a-sid", true).await;
    assert_eq!(status, 400, "signed, but no CallSid: {body}");

    // Below capacity: the stream, with the call id, then the humans.
    let (status, twiml) = webhook(&h, &call_sid(1), true).await;
    assert_eq!(status, 200, "{twiml}");
    let stream = format!(
        "<Connect><Stream url=\"wss://{}/v1/media-stream\">",
        h.server.addr
    );
    assert!(twiml.contains(&stream), "{twiml}");
    assert!(twiml.ends_with(&format!(
        "<Dial><Number>{HUMANS}</Number></Dial></Response>"
    )));
    let id = reserved_id(&twiml);
    // Twilio retrying the webhook finds the same reservation.
    let (_, again) = webhook(&h, &call_sid(1), true).await;
    assert_eq!(reserved_id(&again), id);

    // At capacity (the slot is reserved): the prompt and <Dial>, no stream.
    let (status, refused) = webhook(&h, &call_sid(2), true).await;
    assert_eq!(status, 200);
    let prompt = format!("https://{}/v1/twilio/prompts/overflow.wav", h.server.addr);
    assert!(
        refused.contains(&format!("<Play>{prompt}</Play>")),
        "{refused}"
    );
    assert!(refused.contains(&format!("<Dial><Number>{HUMANS}</Number></Dial>")));
    assert!(!refused.contains("<Connect>"), "{refused}");
    let reasons = eventually(
        Duration::from_secs(5),
        "the webhook's refusal recorded",
        async || h.rejections(&call_sid(2)).await,
        |r| !r.is_empty(),
    )
    .await;
    assert_eq!(reasons, ["queue_full"]);
    let wav = reqwest::get(format!(
        "http://{}/v1/twilio/prompts/overflow.wav",
        h.server.addr
    ))
    .await
    .unwrap();
    assert_eq!(wav.headers()["content-type"], "audio/wav");
    let wav = wav.bytes().await.unwrap();
    assert!(
        wav.starts_with(b"RIFF") && wav.len() > 8_000,
        "{} bytes",
        wav.len()
    );

    // The stream comes: admitted on the reservation, under its call id.
    let mut call = RawCall::connect_signed(&h.ws_url(), Some(TOKEN)).await;
    call.call_sid = call_sid(1);
    call.start().await;
    let ledger = eventually(
        Duration::from_secs(10),
        "the reserved call's receipt opened",
        async || h.ledger(&call_sid(1)).await,
        Option::is_some,
    )
    .await
    .unwrap();
    assert_eq!(ledger.call_id, id, "the call id the webhook reserved");
    call.stop().await;
    call.until_closed(Duration::from_secs(10)).await;
    let closed = h.closed_ledger(&call_sid(1)).await;
    assert_eq!(closed.end_reason.as_deref(), Some("caller_hangup"));
    // Twilio's own account of the end lands beside callgate's.
    assert_eq!(status_callback(&h, &call_sid(1), "in-progress").await, 204);
    assert_eq!(status_callback(&h, &call_sid(1), "completed").await, 204);
    let (code, receipt) = h.admin_json(&format!("/v1/sessions/{id}")).await;
    assert_eq!(code, 200);
    assert_eq!(receipt["end_reason"], "caller_hangup", "{receipt}");
    let end = &receipt["carrier_end"];
    assert_eq!(end["status"], "completed", "{receipt}");
    assert_eq!(end["duration_s"], 12);
    assert_eq!(end["carrier_timestamp"], "Tue, 08 Dec 2026 01:20:00 +0000");
    assert_eq!(end["source"], "twilio_status_callback");
    // The refused call has no receipt: acknowledged all the same.
    assert_eq!(status_callback(&h, &call_sid(2), "completed").await, 204);

    // A reservation whose stream never comes is released and counted.
    let (_, twiml) = webhook(&h, &call_sid(3), true).await;
    assert!(
        twiml.contains("<Connect>"),
        "the slot is free again: {twiml}"
    );
    let metrics = eventually(
        Duration::from_secs(5),
        "the unclaimed reservation expiring",
        async || h.metrics_text().await,
        |m| m.contains("callgate_twilio_reservations_total{outcome=\"expired\"} 1"),
    )
    .await;
    assert!(
        metrics.contains("callgate_twilio_reservations_total{outcome=\"claimed\"} 1"),
        "{metrics}"
    );
    let (_, twiml) = webhook(&h, &call_sid(4), true).await;
    assert!(twiml.contains("<Connect>"), "released: {twiml}");
    let metrics = h.metrics_text().await;
    for (outcome, n) in [
        ("connect", 4),
        ("refused", 1),
        ("bad_signature", 1),
        ("bad_request", 1),
    ] {
        let line = format!("callgate_twilio_webhooks_total{{outcome=\"{outcome}\"}} {n}");
        assert!(metrics.contains(&line), "{line}\n{metrics}");
    }
    h.stop().await;
}
