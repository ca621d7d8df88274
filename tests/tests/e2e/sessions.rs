//! `GET /v1/sessions/{id}`: a whole call's receipt read back over HTTP —
//! the labels its ingress carried (Twilio custom parameters, chosen SIP
//! headers), only the configured ones, its transport, owner, provider
//! labels, lifecycle and raw events — and never its transcript.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use callgate_load::{Outcome, PartnerFormat};
use callgate_sim::SimConfig;
use callgate_tests::sipp::{Sipp, SippOpts, Transport};
use callgate_tests::{Harness, add_partner, load, partner_load, sip};
use serde_json::{Value, json};

const TOKEN: &str = "receipt-reader-token";

fn providers(c: &mut callgate::config::Config) {
    c.receipt.providers = [("stt_model", "nova-3"), ("tts_voice", "sim-voice-1")]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
}

/// `GET /v1/sessions/{id}` with `token` (if any): status and body.
async fn get(h: &Harness, id: &str, token: Option<&str>) -> (u16, String) {
    get_path(h, &format!("/v1/sessions/{id}"), token).await
}

/// `GET path` with `token` (if any): status and body.
async fn get_path(h: &Harness, path: &str, token: Option<&str>) -> (u16, String) {
    callgate::ensure_tls_provider();
    let url = format!("http://{}{path}", h.server.addr);
    let mut req = reqwest::Client::new().get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.expect("GET /v1/sessions/{id}");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("read the body"))
}

/// The receipt of a closed call, with the raw text it was parsed from.
async fn receipt(h: &Harness, call_id: uuid::Uuid) -> (Value, String) {
    let (status, body) = get(h, &call_id.to_string(), Some(TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    (serde_json::from_str(&body).unwrap(), body)
}

/// What every closed receipt must show, whatever its ingress.
async fn assert_common(h: &Harness, r: &Value, raw: &str, call_id: uuid::Uuid) {
    assert_eq!(r["session_id"], call_id.to_string());
    assert_eq!(
        r["owner"],
        json!({"instance": h.instance, "epoch": 1}),
        "{r:#}"
    );
    assert_eq!(
        r["providers"],
        json!({"stt_model": "nova-3", "tts_voice": "sim-voice-1"})
    );
    assert_eq!(r["end_reason"], "caller_hangup", "{r:#}");
    assert_eq!(r["cleanup_status"], "completed", "{r:#}");
    // Every lifecycle stamp, as RFC 3339 and as an offset from admission,
    // in order.
    let mut last = -1.0;
    for stage in [
        "admitted",
        "media_ready",
        "first_playable_audio",
        "last_media",
        "disconnect_observed",
        "cleanup_completed",
    ] {
        let s = &r["lifecycle"][stage];
        let at = s["at"].as_str().unwrap_or_else(|| panic!("{stage}: {r:#}"));
        assert!(at.ends_with('Z') && at.len() == 27, "{stage}: {at}");
        let off = s["offset_ms"].as_f64().unwrap();
        assert!(off >= last, "{stage} at {off} ms, before {last} ms: {r:#}");
        last = off;
    }
    assert_eq!(r["lifecycle"]["admitted"]["offset_ms"], 0.0);
    // The closing stats are there, beside the opening fields, not mixed in.
    assert_eq!(
        r["stats"]["active_counter_delta"],
        json!({"increment": 1, "decrement": 1})
    );
    assert!(r["stats"].get("labels").is_none(), "{r:#}");
    // The raw events are the call's own, in order.
    let kinds: Vec<String> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, h.event_kinds(call_id).await);
    assert_eq!(r["events_page"]["more"], false, "{r:#}");
    // No transcript text: there is a transcript, and none of it is here.
    let transcript = h.transcript(call_id).await;
    assert!(
        transcript.iter().any(|(s, _, _)| s == "caller"),
        "{transcript:#?}"
    );
    for (_, text, _) in &transcript {
        assert!(
            !raw.contains(text.as_str()),
            "transcript text {text:?} in the receipt: {raw}"
        );
    }
}

/// Reading a receipt's events two at a time gives the same events as one
/// answer; a bad page request is a 400 that names the parameter. `token`:
/// the admin token, if the harness has one. (Run on the booking call in
/// `conversation`, which has several events.)
pub(crate) async fn assert_events_page(h: &Harness, call_id: uuid::Uuid, token: Option<&str>) {
    let (status, body) = get(h, &call_id.to_string(), token).await;
    assert_eq!(status, 200, "{body}");
    let r: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(r["events_page"]["more"], false, "{r:#}");
    let all = r["events"].as_array().unwrap();
    assert!(all.len() >= 3, "a call has several events: {all:#?}");
    let mut paged = Vec::new();
    let mut after = String::new();
    loop {
        let id = format!("{call_id}?events_limit=2{after}");
        let (status, body) = get(h, &id, token).await;
        assert_eq!(status, 200, "{body}");
        let r: Value = serde_json::from_str(&body).unwrap();
        let page = r["events"].as_array().unwrap();
        assert!(page.len() <= 2, "{body}");
        paged.extend(page.iter().cloned());
        if r["events_page"]["more"] == false {
            break;
        }
        assert_eq!(page.len(), 2, "a full page before the last: {body}");
        after = format!("&events_after={}", r["events_page"]["next_after"]);
    }
    assert_eq!(&paged, all);
    for bad in [
        "events_limit=0",
        "events_limit=100000",
        "events_after=x",
        "limit=2",
    ] {
        let (status, body) = get(h, &format!("{call_id}?{bad}"), token).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(
            body.contains("limit") || body.contains("events_after"),
            "{bad}: {body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_twilio_receipt_shows_only_the_configured_custom_parameters() {
    let h = Harness::start(SimConfig::default(), |c| {
        c.server.admin_token = Some(TOKEN.to_string());
        c.receipt.labels = vec!["role".into(), "tenant".into()];
        providers(c);
    })
    .await;
    let long = "x".repeat(300);
    let cfg = callgate_load::LoadConfig {
        custom_parameters: vec![
            ("role".into(), "agent-assist".into()),
            ("tenant".into(), long.clone()),
            ("ssn".into(), "078-05-1120".into()),
        ],
        ..load(&h, 1, 1)
    };
    let report = callgate_load::run(cfg).await;
    let call = &report.calls[0];
    assert_eq!(call.outcome, Outcome::Completed, "{call:#?}");
    let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
    let (r, raw) = receipt(&h, ledger.call_id).await;
    assert_common(&h, &r, &raw, ledger.call_id).await;

    assert_eq!(r["ingress"], "twilio");
    assert_eq!(r["transport"], "websocket");
    assert_eq!(r["carrier_call_id"], call.call_sid.to_string());
    assert_eq!(r["partner_id"], Value::Null);
    assert_eq!(
        r["labels"],
        json!({"role": "agent-assist", "tenant": &long[..256]}),
        "{r:#}"
    );
    assert_eq!(r["labels_truncated"], 1, "the one over-long value was cut");
    assert!(!raw.contains("078-05-1120"), "an unlisted parameter: {raw}");

    // The guard: with a token configured, no token (from loopback too) and
    // a wrong one are refused; a malformed id is 400, an unknown one 404.
    let id = ledger.call_id.to_string();
    assert_eq!(get(&h, &id, None).await.0, 401);
    assert_eq!(get(&h, &id, Some("wrong")).await.0, 401);
    assert_eq!(get(&h, "not-a-uuid", Some(TOKEN)).await.0, 400);
    let unknown = uuid::Uuid::new_v4().to_string();
    assert_eq!(get(&h, &unknown, Some(TOKEN)).await.0, 404);

    // Found by the CallSid the caller knows, behind the same guard.
    let by_sid = format!("/v1/sessions?carrier_call_id={}", call.call_sid);
    let (status, body) = get_path(&h, &by_sid, Some(TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    let found: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(found["truncated"], false);
    let sessions = found["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{found:#}");
    assert_eq!(sessions[0]["session_id"], id);
    assert_eq!(sessions[0]["ingress"], "twilio");
    assert_eq!(sessions[0]["owner"]["instance"], h.instance);
    assert_eq!(sessions[0]["end_reason"], "caller_hangup");
    assert_eq!(get_path(&h, &by_sid, None).await.0, 401);
    let (status, body) = get_path(&h, "/v1/sessions?carrier_call_id=CAnone", Some(TOKEN)).await;
    assert_eq!(
        (status, body.contains("\"sessions\":[]")),
        (200, true),
        "{body}"
    );
    assert_eq!(get_path(&h, "/v1/sessions?sid=x", Some(TOKEN)).await.0, 400);
    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sip_receipt_shows_the_configured_invite_headers_and_its_transport() {
    let h = sip::start(SimConfig::default(), |c| {
        c.server.admin_token = Some(TOKEN.to_string());
        c.receipt.sip_headers = vec!["X-Role".into(), "X-Tenant".into(), "X-Absent".into()];
        providers(c);
    })
    .await;
    let opts = SippOpts {
        transport: Transport::Tcp,
        timeout: Duration::from_secs(60),
        ..SippOpts::default()
    }
    .var("hold_ms", "4000")
    .var("turns", "1");
    let out = Sipp::uac("call_labels.xml", sip::addr(&h), opts)
        .await
        .wait()
        .await;
    out.assert_ok();
    let calls = sip::closed_calls(&h, 1).await;
    let call_id = calls[0].call_id;
    let (r, raw) = receipt(&h, call_id).await;
    assert_common(&h, &r, &raw, call_id).await;

    assert_eq!(r["ingress"], "sip");
    assert_eq!(r["transport"], "sip-tcp");
    assert_eq!(
        r["labels"],
        json!({"x-role": "supervisor", "x-tenant": "acme-sip"}),
        "configured headers in any case; an absent one is absent, not empty: {r:#}"
    );
    assert_eq!(r["labels_truncated"], 0);
    assert!(!raw.contains("do-not-keep"), "an unlisted header: {raw}");
    sip::assert_all_free(&h).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partner_receipt_shows_its_partner_and_the_configured_metadata() {
    let h = Harness::start(SimConfig::default(), |c| {
        c.server.admin_token = Some(TOKEN.to_string());
        c.receipt.labels = vec!["role".into()];
        add_partner(c, "acme", "acme-key-1", None);
        providers(c);
    })
    .await;
    let cfg = callgate_load::LoadConfig {
        custom_parameters: vec![
            ("role".into(), "triage".into()),
            ("caller_name".into(), "Ada Lovelace".into()),
        ],
        ..partner_load(&h, "acme-key-1", PartnerFormat::L16, 1, 1)
    };
    let report = callgate_load::run(cfg).await;
    let call = &report.calls[0];
    assert_eq!(call.outcome, Outcome::Completed, "{call:#?}");
    // The id callgate gave the partner in `started` is the receipt's id.
    let session: uuid::Uuid = call.session_id.as_deref().unwrap().parse().unwrap();
    h.closed_ledger(&call.call_sid.to_string()).await;
    let (r, raw) = receipt(&h, session).await;
    assert_common(&h, &r, &raw, session).await;

    assert_eq!(r["ingress"], "partner");
    assert_eq!(r["transport"], "websocket");
    assert_eq!(r["partner_id"], "acme");
    assert_eq!(r["carrier_call_id"], call.call_sid.to_string());
    assert_eq!(r["labels"], json!({"role": "triage"}), "{r:#}");
    assert_eq!(r["labels_truncated"], 0);
    assert!(!raw.contains("Lovelace"), "unlisted metadata: {raw}");
    h.assert_all_closed().await;
    h.stop().await;
}
