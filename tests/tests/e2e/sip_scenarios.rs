//! Each SIP scenario against the real sipp (one XML per scenario under
//! `tests/sip/`): CANCEL before the answer, BYE from callgate when the bot
//! ends the call, a peer whose RTP stops without BYE, re-INVITEs for hold
//! and for a codec callgate does not take, DTMF by RFC 4733 and by INFO,
//! OPTIONS before and after a drain, and REFER when the bot escalates.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use callgate_sim::SimConfig;
use callgate_tests::sip;
use callgate_tests::sipp::{Sipp, SippOpts, SippOutcome};

fn opts(timeout_s: u64) -> SippOpts {
    SippOpts {
        timeout: Duration::from_secs(timeout_s),
        ..SippOpts::default()
    }
}

/// A simulator whose caller says `line` first.
fn saying(line: &str) -> SimConfig {
    let mut sim = SimConfig::default();
    sim.stt.script = vec![line.to_string()];
    sim
}

/// One call of `scenario` against a fresh server: what sipp saw and the
/// call's closed ledger row (after which no port or permit is held).
async fn one_call(
    sim: SimConfig,
    tweak: impl FnOnce(&mut callgate::config::Config),
    scenario: &str,
    o: SippOpts,
) -> (callgate_tests::Harness, SippOutcome, callgate_tests::Ledger) {
    let h = sip::start(sim, tweak).await;
    let out = run(&h, scenario, o).await;
    let l = sip::closed_calls(&h, 1).await.remove(0);
    sip::assert_all_free(&h).await;
    (h, out, l)
}

async fn run(h: &callgate_tests::Harness, scenario: &str, o: SippOpts) -> SippOutcome {
    let out = Sipp::uac(scenario, sip::addr(h), o).await.wait().await;
    out.assert_ok();
    out
}

/// The largest gap between two packets callgate sent to sipp.
fn longest_gap(out: &SippOutcome) -> Duration {
    let rtp = out.rtp.as_ref().expect("captured");
    let at: Vec<Duration> = rtp.received().map(|p| p.at).collect();
    at.windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .max()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_call_hears_ringing_at_once() {
    // No slot and a queue: the INVITE waits, and the carrier hears 180
    // Ringing within 100 ms (the scenario fails the call otherwise).
    let h = sip::start(SimConfig::default(), |c| {
        c.admission.max_concurrent_calls = callgate::config::MaxCalls::Pinned(0);
        c.admission.queue_max = 10;
        c.admission.queue_timeout_ms = 20_000;
    })
    .await;
    run(&h, "queued_ringing.xml", opts(20)).await;
    let metrics = h.metrics_text().await;
    assert!(
        metrics.contains("callgate_sip_responses_total{code=\"180\"} 1"),
        "{metrics}"
    );
    assert_eq!(
        sip::refusals(&h, 1).await,
        vec!["caller_abandoned".to_string()]
    );
    sip::assert_all_free(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_before_the_answer_is_487_and_leaves_nothing() {
    // Room for no one, and a queue: the INVITE waits, so the CANCEL
    // always comes before any answer.
    let h = sip::start(SimConfig::default(), |c| {
        c.admission.max_concurrent_calls = callgate::config::MaxCalls::Pinned(0);
        c.admission.queue_max = 10;
        c.admission.queue_timeout_ms = 20_000;
    })
    .await;
    let out = run(&h, "cancel.xml", opts(20)).await;
    assert_eq!(out.counter("cancel_lost_race"), 0, "{out}");
    assert_eq!(
        sip::refusals(&h, 1).await,
        vec!["caller_abandoned".to_string()]
    );
    assert_eq!(
        sip::ports_in_use(&h),
        0,
        "no RTP port for a call never answered"
    );
    assert!(
        h.metrics_text()
            .await
            .contains("callgate_sip_responses_total{code=\"487\"} 1")
    );
    sip::assert_all_free(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callgate_sends_bye_when_the_bot_ends_the_call() {
    let (h, _, l) = one_call(
        saying("Thank you, goodbye."),
        |_| {},
        "bye_from_server.xml",
        opts(60),
    )
    .await;
    let l = &l;
    assert_eq!(
        l.end_reason.as_deref(),
        Some("bot_ended:caller_goodbye"),
        "{:#}",
        l.stats
    );
    assert_eq!(l.cleanup_status, "completed", "{:#}", l.stats);
    let bot: Vec<_> = h
        .transcript(l.call_id)
        .await
        .into_iter()
        .filter(|t| t.0 == "bot")
        .collect();
    assert!(bot.iter().any(|t| t.1.contains("Goodbye")), "{bot:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_whose_rtp_stops_without_bye_is_hung_up_by_rtp_timeout() {
    let (h, out, l) = one_call(
        SimConfig::default(),
        |c| c.sip.rtp_timeout_ms = 2_000,
        "rtp_stop.xml",
        opts(60),
    )
    .await;
    let l = &l;
    assert_eq!(
        l.end_reason.as_deref(),
        Some("rtp_timeout"),
        "{:#}",
        l.stats
    );
    // The call lasted the 2 s of speech plus about the timeout, not the
    // media watchdog's or the scenario's 60 s.
    let (admitted, closed) = (l.stamps[0].unwrap(), l.stamps[5].unwrap());
    let lasted = closed.duration_since(admitted).unwrap();
    assert!(lasted < Duration::from_secs(12), "ended after {lasted:?}");
    assert!(
        h.metrics_text()
            .await
            .contains("callgate_rtp_timeouts_total 1")
    );
    // A timer ended it: Q.850 102, not normal clearing.
    let reason = "Reason: Q.850;cause=102;text=\"rtp_timeout\"";
    assert!(out.messages.contains(reason), "{}", out.messages);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_maximum_duration_ends_the_call_with_a_timer_cause() {
    let (_, out, l) = one_call(
        SimConfig::default(),
        |c| c.call.max_duration_s = 4,
        "bye_from_server.xml",
        opts(60),
    )
    .await;
    assert_eq!(
        l.end_reason.as_deref(),
        Some("max_duration"),
        "{:#}",
        l.stats
    );
    let reason = "Reason: Q.850;cause=102;text=\"max_duration\"";
    assert!(out.messages.contains(reason), "{}", out.messages);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_and_resume_are_answered_with_the_current_session() {
    let o = SippOpts {
        capture_rtp: true,
        ..opts(60)
    }
    .var("hold_ms", "3000");
    let (_, out, l) = one_call(SimConfig::default(), |_| {}, "reinvite_hold.xml", o).await;
    // The answers' directions are checked by the scenario (recvonly on
    // hold, sendrecv after); callgate sent nothing while held.
    let gap = longest_gap(&out);
    assert!(
        gap >= Duration::from_millis(2_500),
        "longest RTP gap {gap:?}"
    );
    let l = &l;
    assert_eq!(
        l.end_reason.as_deref(),
        Some("caller_hangup"),
        "{:#}",
        l.stats
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reinvite_without_a_common_codec_gets_488_and_audio_goes_on() {
    let h = sip::start(SimConfig::default(), |_| {}).await;
    let out = run(
        &h,
        "reinvite_488.xml",
        SippOpts {
            capture_rtp: true,
            ..opts(60)
        },
    )
    .await;
    let rtp = out.rtp.as_ref().unwrap();
    assert_eq!(
        rtp.received_by_payload_type()
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        vec![0]
    );
    let gap = longest_gap(&out);
    assert!(
        gap < Duration::from_millis(500),
        "audio went on: longest gap {gap:?}"
    );
    let l = &sip::closed_calls(&h, 1).await[0];
    assert_eq!(
        l.end_reason.as_deref(),
        Some("caller_hangup"),
        "{:#}",
        l.stats
    );
    assert_eq!(l.stats["media"]["transport"]["codec"], "PCMU");
    assert!(
        h.metrics_text()
            .await
            .contains("callgate_sip_responses_total{code=\"488\"} 1")
    );
    sip::assert_all_free(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc4733_digits_reach_the_call_once_each() {
    let (h, _, l) = one_call(SimConfig::default(), |_| {}, "dtmf_rfc4733.xml", opts(60)).await;
    let l = &l;
    let kinds = h.event_kinds(l.call_id).await;
    let digits = kinds.iter().filter(|k| *k == "dtmf").count();
    assert_eq!(
        digits, 4,
        "1 2 3 # once each, however many packets: {kinds:?}"
    );
    assert_eq!(
        l.stats["media"]["transport"]["dtmf_events"], 4,
        "{:#}",
        l.stats
    );
    // The timeline names each digit; the receipt counts them.
    let named: Vec<serde_json::Value> = h.event_details(l.call_id, "dtmf").await;
    let named: Vec<&str> = named.iter().filter_map(|d| d["digit"].as_str()).collect();
    assert_eq!(named, ["1", "2", "3", "#"]);
    assert_eq!(l.stats["interaction"]["dtmf_digits"], 4, "{:#}", l.stats);
    assert_eq!(l.end_reason.as_deref(), Some("caller_hangup"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_info_digit_reaches_the_call() {
    let (h, _, l) = one_call(SimConfig::default(), |_| {}, "dtmf_info.xml", opts(60)).await;
    let l = &l;
    let kinds = h.event_kinds(l.call_id).await;
    assert_eq!(
        kinds.iter().filter(|k| *k == "dtmf").count(),
        1,
        "{kinds:?}"
    );
    let named = h.event_details(l.call_id, "dtmf").await;
    assert_eq!(named, [serde_json::json!({"digit": "5"})]);
    assert_eq!(l.stats["interaction"]["dtmf_digits"], 1, "{:#}", l.stats);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_is_200_while_serving_and_503_after_a_drain() {
    let h = sip::start(SimConfig::default(), |_| {}).await;
    let out = run(&h, "options_200.xml", opts(10)).await;
    // RFC 3261 §11.2: what an INVITE may carry, and the extensions taken
    // (none: an empty Supported).
    for header in [
        "Allow: INVITE",
        "Accept: application/sdp",
        "Accept-Encoding: identity",
        "Accept-Language: en",
    ] {
        assert!(
            out.messages.contains(header),
            "{header:?}: {}",
            out.messages
        );
    }
    let empty_supported = out.messages.lines().any(|l| l.trim_end() == "Supported:");
    assert!(empty_supported, "{}", out.messages);
    callgate_tests::drain(&h.server).await;
    run(&h, "options_503.xml", opts(10)).await;
    // A new INVITE follows the rejection policy (503 by default).
    let o = SippOpts {
        trace_msg: false,
        ..opts(30)
    }
    .var("hold_ms", "500");
    let out = run(&h, "load_uac.xml", o).await;
    assert_eq!(out.rejected_by_code().get(&503), Some(&1), "{out}");
    assert_eq!(sip::refusals(&h, 1).await, vec!["draining".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalation_is_a_refer_to_the_human_queue_then_bye() {
    let queue = "sip:queue@127.0.0.1:5999";
    let h = sip::start(saying("Can I talk to a human, please?"), |c| {
        c.sip.human_queue_uri = Some(queue.to_string());
    })
    .await;
    let out = run(&h, "refer_uas.xml", opts(90)).await;
    assert!(
        out.logs
            .iter()
            .any(|l| l.contains("REFER to") && l.contains(queue)),
        "{:?}",
        out.logs
    );
    let l = &sip::closed_calls(&h, 1).await[0];
    assert_eq!(
        l.end_reason.as_deref(),
        Some("transferred:caller_requested_human"),
        "{:#}",
        l.stats
    );
    sip::assert_all_free(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_is_503_when_no_capacity_is_free() {
    let h = sip::start(SimConfig::default(), |c| {
        c.admission.max_concurrent_calls = callgate::config::MaxCalls::Pinned(0);
    })
    .await;
    run(&h, "options_503.xml", opts(10)).await;
}
