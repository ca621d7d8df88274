//! Barge-in, measured by an independent caller: twenty Twilio-protocol
//! callers speak 0.8 s into the greeting over real sockets, and the load
//! tool's own clock says how soon the bot stopped (`clear` after the
//! caller's first voiced frame), how much bot audio the socket delivered
//! over the caller before that, and that none of the stopped turn came
//! after the clear. `barge_in.rs` checks that a clear arrives at all; this
//! checks when.
//!
//! What the bounds rest on (the design, not the machine): the server's VAD
//! calls it speech after `call.barge_in.min_speech_ms` of the caller's
//! audio, which the caller sends in real time (20 ms frames; the onset is
//! when its first voiced frame was due, the *end* of that frame's audio),
//! and the `clear` goes out in the same server step as that decision. So
//! onset → clear is `min_speech_ms` minus one frame plus two loopback hops,
//! within one frame of slack (`+ 20`); the bot's frames keep arriving one
//! per 20 ms until the clear, within two frames of slack (`+ 40`).
//! Everything else has a generous deadline.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use callgate::call::core::BargeInPolicy;
use callgate_load::{Arrival, LoadConfig, LoadReport};
use callgate_sim::SimConfig;
use callgate_tests::{Harness, load};

const CALLS: usize = 20;
/// How long after the greeting's first audio frame each caller speaks.
const INTO_GREETING_MS: u32 = 800;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_speaking_into_the_greeting_stop_it_within_the_vad_window() {
    let mut min_speech_ms = 0;
    let h = Harness::start(SimConfig::default(), |cfg| {
        cfg.call.barge_in.policy = BargeInPolicy::Reversible;
        min_speech_ms = u64::from(cfg.call.barge_in.min_speech_ms);
    })
    .await;
    let cfg = LoadConfig {
        barge_in_at_ms: Some(INTO_GREETING_MS),
        // Spread over 2 s so twenty VAD decisions do not share one frame.
        arrival: Arrival::Rate { per_second: 10.0 },
        call_timeout: Duration::from_secs(60),
        ..load(&h, CALLS, 2)
    };
    let report = callgate_load::run(cfg).await;
    let mut table = Vec::new();
    report.print_table(&mut table).unwrap();
    eprintln!("{}", String::from_utf8_lossy(&table));

    every_call_was_served_and_its_barge_in_answered(&report);
    let b = report.summary.barge_in.clone().unwrap();
    assert_eq!((b.spoken, b.cleared), (CALLS, CALLS), "{b:#?}");
    let p99 = b.onset_to_clear_ms.p99.unwrap();
    assert!(
        p99 <= min_speech_ms + 20,
        "onset → clear p99 {p99} ms > min_speech_ms {min_speech_ms} + 20: {b:#?}"
    );
    let p99 = b.bot_audio_after_onset_ms.p99.unwrap();
    assert!(
        p99 <= min_speech_ms + 40,
        "bot audio after onset p99 {p99} ms > min_speech_ms {min_speech_ms} + 40: {b:#?}"
    );
    assert_eq!(b.audio_after_clear_ms.max, Some(0), "{b:#?}");

    for call in &report.calls {
        let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
        let interaction = &ledger.stats["interaction"];
        assert_eq!(interaction["interruptions"], 1, "{:#}", ledger.stats);
        assert_eq!(interaction["false_barge_ins"], 0, "{:#}", ledger.stats);
    }
    h.assert_all_closed().await;
    h.stop().await;
}

/// Every caller finished its script (the words after the barge-in were
/// answered), spoke over the greeting, was answered by a clear, and heard
/// nothing of the greeting after it.
fn every_call_was_served_and_its_barge_in_answered(report: &LoadReport) {
    for call in &report.calls {
        assert!(call.outcome.is_served(), "{call:#?}");
        assert_eq!(call.replies_heard, 2, "{call:#?}");
        let b = call.barge_in.as_ref().expect("spoke over the greeting");
        assert!(b.into_turn_ms >= u64::from(INTO_GREETING_MS), "{b:#?}");
        assert!(b.onset_to_clear_ms.is_some(), "no clear: {call:#?}");
        assert_eq!(b.audio_after_clear_ms, Some(0), "{call:#?}");
    }
}
