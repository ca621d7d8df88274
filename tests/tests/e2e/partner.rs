//! The partner WebSocket ingress end to end: a 16 kHz linear call through
//! the same call core as Twilio's, authentication before the upgrade, and
//! per-partner quotas inside the admission gate.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use callgate::config::MaxCalls;
use callgate_load::{Outcome, PartnerFormat};
use callgate_sim::SimConfig;
use callgate_sim::script::DEFAULT_CALLER_SCRIPT;
use callgate_tests::{Harness, add_partner, assert_bot_audio_delivered, eventually, partner_load};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_16_khz_partner_call_is_heard_answered_and_recorded() {
    let h = Harness::start(SimConfig::default(), |c| {
        add_partner(c, "acme", "acme-key-1", None);
    })
    .await;

    let report = callgate_load::run(partner_load(&h, "acme-key-1", PartnerFormat::L16, 1, 3)).await;
    let call = &report.calls[0];
    assert_eq!(call.outcome, Outcome::Completed, "{call:#?}");
    assert!(
        call.time_to_first_audio_ms.is_some(),
        "greeting not heard: {call:#?}"
    );
    assert_eq!(
        call.replies_heard, 3,
        "a reply to each utterance: {call:#?}"
    );
    assert!(
        call.session_id.is_some(),
        "`started` carries callgate's id: {call:#?}"
    );
    assert_bot_audio_delivered(&h, call);

    // Neither provider transcoded: STT took the leg's 16 kHz linear audio,
    // TTS produced 16 kHz PCM for it.
    let stt = h.sims.stt.stats();
    assert_eq!(stt.formats.get("linear16/16000"), Some(&1), "{stt:#?}");
    let tts = h.sims.tts.stats();
    assert_eq!(tts.output_formats.get("pcm_16000"), Some(&1), "{tts:#?}");

    let sid = call.call_sid.to_string();
    let ledger = h.closed_ledger(&sid).await;
    assert_eq!(ledger.end_reason.as_deref(), Some("caller_hangup"));
    assert_eq!(ledger.cleanup_status, "completed", "{:#}", ledger.stats);
    assert_eq!(ledger.stats["media"]["format"], "l16_16000");
    assert_eq!(ledger.stats["active_counter_delta"]["decrement"], 1);
    let (ingress, partner) = h.ledger_origin(&sid).await;
    assert_eq!(
        (ingress.as_str(), partner.as_deref()),
        ("partner", Some("acme"))
    );
    let caller: Vec<String> = h
        .transcript(ledger.call_id)
        .await
        .into_iter()
        .filter(|t| t.0 == "caller")
        .map(|t| t.1)
        .collect();
    assert_eq!(
        caller,
        DEFAULT_CALLER_SCRIPT[..3].to_vec(),
        "caller turns = the STT script"
    );

    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_or_missing_partner_keys_are_refused_before_the_upgrade() {
    let h = Harness::start(SimConfig::default(), |c| {
        add_partner(c, "acme", "acme-key-1", None);
    })
    .await;
    for key in [Some("not-a-key"), None] {
        let mut cfg = partner_load(&h, "x", PartnerFormat::L16, 1, 1);
        cfg.partner_key = key.map(str::to_string);
        let report = callgate_load::run(cfg).await;
        let call = &report.calls[0];
        assert!(
            matches!(&call.outcome, Outcome::Unauthorized { status: 401, .. }),
            "{key:?}: {call:#?}"
        );
    }
    // Nothing reached the gate or a provider.
    let snap = h.server.app.call.gate.snapshot();
    assert_eq!(snap.rejected_total.total(), 0);
    assert_eq!(h.sims.stt.stats().total_sessions, 0);
    let text = h.metrics_text().await;
    assert!(
        text.lines()
            .any(|l| l.starts_with("callgate_partner_auth_refused_total{why=\"unknown_key\"} 1")),
        "{text}"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partner_over_its_quota_is_transferred_while_another_is_admitted() {
    let h = Harness::start(SimConfig::default(), |c| {
        c.admission.max_concurrent_calls = MaxCalls::Pinned(10);
        add_partner(c, "acme", "acme-key", Some(2));
        add_partner(c, "globex", "globex-key", None);
    })
    .await;

    // Two of acme's calls hold its whole quota ...
    let long = partner_load(&h, "acme-key", PartnerFormat::L16, 2, 4);
    let held = tokio::spawn(callgate_load::run(long));
    let app = h.server.app.clone();
    eventually(
        Duration::from_secs(15),
        "acme's two calls admitted",
        async || app.call.gate.snapshot().active,
        |active| *active == 2,
    )
    .await;

    // ... so its third is refused through the overflow path ...
    let third = callgate_load::run(partner_load(&h, "acme-key", PartnerFormat::Pcmu, 1, 1)).await;
    let call = &third.calls[0];
    assert!(
        matches!(&call.outcome, Outcome::Rejected { reason, prompt_heard: true, .. } if reason == "partner_quota"),
        "{call:#?}"
    );
    let transfer = call.transfer.as_ref().expect("a transfer message");
    assert_eq!(transfer.reason, "partner_quota");
    assert_eq!(transfer.target.as_deref(), Some("human"));
    assert_eq!(call.close_code, Some(1000));

    // ... while another partner is admitted meanwhile.
    let other = callgate_load::run(partner_load(&h, "globex-key", PartnerFormat::L16, 1, 1)).await;
    assert_eq!(
        other.calls[0].outcome,
        Outcome::Completed,
        "{:#?}",
        other.calls[0]
    );

    let held = held.await.unwrap();
    for c in &held.calls {
        // Served to the end: the booking bot may confirm and hang up first.
        assert!(
            matches!(c.outcome, Outcome::Completed | Outcome::EndedByBot { .. }),
            "{c:#?}"
        );
        assert_eq!(
            c.end_message_reason.is_some(),
            matches!(c.outcome, Outcome::EndedByBot { .. })
        );
    }
    let refused = h.partner_rejections("acme").await;
    assert_eq!(
        refused,
        [(Some(call.call_sid.to_string()), "partner_quota".to_string())],
        "recorded with the partner"
    );
    assert!(h.partner_rejections("globex").await.is_empty());
    assert_eq!(
        h.server
            .app
            .call
            .gate
            .snapshot()
            .rejected_total
            .partner_quota,
        1
    );
    let text = h.metrics_text().await;
    for line in [
        "callgate_partner_quota_calls{partner=\"acme\"} 2",
        "callgate_partner_calls{partner=\"globex\",state=\"active\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with("callgate_admission_rejections_total{")
                && l.contains("reason=\"partner_quota\"")
                && l.ends_with(" 1")),
        "{text}"
    );

    h.assert_all_closed().await;
    h.stop().await;
}
