//! A cough is not an interruption: a caller coughs (a 150 ms voiced burst,
//! no words) 0.7 s into the bot's first reply, then listens. Under the
//! reversible barge-in policy the bot pauses on its own VAD, the STT yields
//! no words (a segment that short is an empty final and consumes no script
//! line), and the bot resumes where it stopped: the caller hears the reply
//! go on to its mark, the receipt counts one false barge-in and no
//! interruption, and the dialog was never told of one. Over Twilio Media
//! Streams (whose `clear` echoes the marks it drops) and over the partner
//! leg at 16 kHz (whose `clear` drops them silently).
//!
//! Nothing here is timed beyond what the call itself guarantees: a reply
//! that did not resume would leave the caller in dead air, which the load
//! tool reports as a silent call.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use callgate::call::core::BargeInPolicy;
use callgate_load::{LoadConfig, Outcome, PartnerFormat};
use callgate_sim::SimConfig;
use callgate_sim::script::DEFAULT_CALLER_SCRIPT;
use callgate_tests::{Harness, add_partner, load, partner_load};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cough_into_a_reply_pauses_it_and_the_reply_resumes_to_its_mark() {
    let h = start().await;
    let cfg = load(&h, 1, 2);
    cough_is_taken_back(&h, cfg).await;
    h.stop().await;
}

/// The partner leg's `clear` discards its marks without echoing them
/// (docs/partner-protocol.md): the resumed turn's mark must be sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cough_over_a_16_khz_partner_leg_is_taken_back_too() {
    let h = start().await;
    let cfg = partner_load(&h, PARTNER_KEY, PartnerFormat::L16, 1, 2);
    cough_is_taken_back(&h, cfg).await;
    h.stop().await;
}

const PARTNER_KEY: &str = "acme-key-1";

async fn start() -> Harness {
    Harness::start(SimConfig::default(), |cfg| {
        cfg.call.barge_in.policy = BargeInPolicy::Reversible;
        add_partner(cfg, "acme", PARTNER_KEY, None);
    })
    .await
}

/// One call of `base` coughs 0.7 s into its first reply; everything the
/// module documentation promises is checked.
async fn cough_is_taken_back(h: &Harness, base: LoadConfig) {
    let cfg = LoadConfig {
        cough_at_ms: Some(700),
        cough_ms: 150,
        cough_turn: 1,
        call_timeout: Duration::from_secs(60),
        ..base
    };
    let report = callgate_load::run(cfg).await;
    let call = &report.calls[0];
    assert_eq!(call.outcome, Outcome::Completed, "{call:#?}");
    assert_eq!(call.replies_heard, 2, "{call:#?}");
    let cough = call.cough.as_ref().expect("the caller coughed");
    assert_eq!(cough.turn, 1);
    assert!(
        cough.onset_to_clear_ms.is_some(),
        "the bot paused: {cough:#?}"
    );
    assert!(cough.gap_ms.is_some(), "audio after the pause: {cough:#?}");
    assert!(cough.resumed, "the reply resumed to its mark: {cough:#?}");

    let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
    let interaction = &ledger.stats["interaction"];
    assert_eq!(interaction["false_barge_ins"], 1, "{:#}", ledger.stats);
    assert_eq!(interaction["interruptions"], 0, "{:#}", ledger.stats);
    assert_eq!(h.sims.dialog.interrupts(), 0, "the dialog was told of none");
    // Operators see it too: one pause, taken back, timed.
    let metrics = h.metrics_text().await;
    for (name, want) in [
        ("callgate_barge_in_pauses_total", 1.0),
        ("callgate_false_barge_ins_total", 1.0),
        ("callgate_barge_in_stop_seconds_count", 1.0),
    ] {
        assert_eq!(metric(&metrics, name), Some(want), "{name}:\n{metrics}");
    }
    // The cough took no script line: the caller's turns are the first two.
    let turns = h.transcript(ledger.call_id).await;
    let caller: Vec<&str> = turns
        .iter()
        .filter(|(speaker, ..)| speaker == "caller")
        .map(|(_, text, _)| text.as_str())
        .collect();
    assert_eq!(caller, DEFAULT_CALLER_SCRIPT[..2], "{turns:#?}");
    assert!(
        turns.iter().all(|(_, _, interrupted)| !interrupted),
        "{turns:#?}"
    );
    h.assert_all_closed().await;
}

/// The value of an unlabelled series in Prometheus text.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}
