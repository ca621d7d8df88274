//! 150 SIP calls offered at once to a callgate with room for 50: exactly
//! the admitted calls are answered and served, the rest get the configured
//! refusal — `503` + `Retry-After`, a `302` to the human queue, or the
//! high-volume prompt over RTP then a `REFER` — no call hangs, and
//! afterwards every RTP port is free and nothing is active.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use callgate::config::{MaxCalls, SipOverflow};
use callgate_sim::SimConfig;
use callgate_tests::sip;
use callgate_tests::sipp::{Sipp, SippOpts, SippOutcome};

const CAPACITY: u32 = 50;
const OFFERED: u32 = 150;
const QUEUE: &str = "sip:queue@127.0.0.1:5999";

async fn spike(policy: SipOverflow) -> (callgate_tests::Harness, SippOutcome) {
    let h = sip::start(SimConfig::default(), |c| {
        c.admission.max_concurrent_calls = MaxCalls::Pinned(CAPACITY);
        c.admission.queue_max = 0;
        c.sip.overflow = policy;
        c.sip.human_queue_uri = Some(QUEUE.to_string());
        c.sip.refer_timeout_ms = 3_000;
        // Room for every call's media: the refused ones are answered to
        // hear the prompt under the refer policy.
        c.sip.rtp_port_max = c.sip.rtp_port_min + 2 * OFFERED as u16 + 19;
        assert!(2 * OFFERED as u16 + 19 < callgate_rig::ports::SPAN);
    })
    .await;
    let opts = SippOpts {
        calls: OFFERED,
        rate: Some(OFFERED),
        limit: Some(OFFERED),
        timeout: Duration::from_secs(120),
        ..SippOpts::default()
    }
    .var("hold_ms", "1500");
    let out = Sipp::uac("load_uac.xml", sip::addr(&h), opts)
        .await
        .wait()
        .await;
    out.assert_ok();
    assert_eq!(
        out.successful_calls,
        u64::from(OFFERED),
        "no call hung or failed: {out}"
    );
    (h, out)
}

/// Every refusal carries Q.850 34 (no circuit available: the queue was
/// full) with callgate's reason, in its 503/302 or in the BYE after REFER.
fn assert_refusals_say_congestion(out: &SippOutcome) {
    let reason = "Reason: Q.850;cause=34;text=\"queue_full\"";
    let n = out.messages.matches(reason).count();
    assert_eq!(n, (OFFERED - CAPACITY) as usize, "{reason}");
    assert!(!out.messages.contains("cause=16;text=\"queue_full\""));
}

/// The admitted calls' ledger rows: served, closed by the caller's BYE.
async fn assert_served(h: &callgate_tests::Harness) {
    let calls = sip::closed_calls(h, CAPACITY as usize).await;
    assert_eq!(
        calls.len(),
        CAPACITY as usize,
        "exactly the admitted calls have a ledger row"
    );
    for l in &calls {
        assert_eq!(
            l.end_reason.as_deref(),
            Some("caller_hangup"),
            "{:#}",
            l.stats
        );
        assert_eq!(l.cleanup_status, "completed", "{:#}", l.stats);
    }
    let refusals = sip::refusals(h, (OFFERED - CAPACITY) as usize).await;
    assert_eq!(
        refusals.len(),
        (OFFERED - CAPACITY) as usize,
        "{refusals:?}"
    );
    assert!(refusals.iter().all(|r| r == "queue_full"), "{refusals:?}");
    sip::assert_all_free(h).await;
    assert_eq!(
        h.server.app.call.gate.snapshot().max_active,
        CAPACITY,
        "never above capacity"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_calls_get_503_with_retry_after() {
    let (h, out) = spike(SipOverflow::Reject).await;
    assert_eq!(out.counter("answered"), u64::from(CAPACITY), "{out}");
    let rejected = out.rejected_by_code();
    assert_eq!(
        rejected.get(&503),
        Some(&u64::from(OFFERED - CAPACITY)),
        "{rejected:?}"
    );
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_refusals_say_congestion(&out);
    assert_served(&h).await;
    let metrics = h.metrics_text().await;
    assert!(
        metrics.contains("callgate_sip_responses_total{code=\"503\"} 100"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_calls_are_redirected_to_the_human_queue() {
    let (h, out) = spike(SipOverflow::Redirect).await;
    assert_eq!(out.counter("answered"), u64::from(CAPACITY), "{out}");
    let rejected = out.rejected_by_code();
    assert_eq!(
        rejected.get(&302),
        Some(&u64::from(OFFERED - CAPACITY)),
        "{rejected:?}"
    );
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_refusals_say_congestion(&out);
    assert_served(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_calls_hear_the_prompt_then_are_referred() {
    let (h, out) = spike(SipOverflow::Refer).await;
    // Every call is answered: the refused ones to hear the prompt.
    assert_eq!(out.counter("answered"), u64::from(OFFERED), "{out}");
    assert_eq!(
        out.counter("referred"),
        u64::from(OFFERED - CAPACITY),
        "{out}"
    );
    assert!(out.rejected_by_code().is_empty(), "{out}");
    assert_refusals_say_congestion(&out);
    assert_served(&h).await;
    let metrics = h.metrics_text().await;
    // Every reason's series is there from the start (primed at 0): the
    // refused callers are the sum.
    let heard: f64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("callgate_overflow_calls_total") && l.contains("prompt_heard=\"true\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(
        heard, 100.0,
        "every refused caller heard the prompt: {metrics}"
    );
}
