//! The foundation scenario: one complete call end to end over real sockets,
//! with the three simulators and a real Postgres.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use callgate_load::Outcome;
use callgate_sim::SimConfig;
use callgate_sim::script::DEFAULT_CALLER_SCRIPT;
use callgate_tests::{Harness, assert_bot_audio_delivered, assert_stamps_in_order, load};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_is_heard_answered_recorded_and_closed() {
    one_call(tts_client::Provider::ElevenLabs).await;
}

/// The same call with `tts.provider = "cartesia"` against the Cartesia
/// simulator: the call core does not know which vendor it talks to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_is_heard_answered_recorded_and_closed_with_cartesia() {
    one_call(tts_client::Provider::Cartesia).await;
}

/// The key both sides hold; the simulators check it only for Cartesia
/// (on the current API version, as `Authorization: Bearer`).
const CARTESIA_KEY: &str = "sk_car_e2e";

async fn one_call(provider: tts_client::Provider) {
    let mut sims = SimConfig::default();
    sims.cartesia.api_key = Some(CARTESIA_KEY.into());
    let h = Harness::start(sims, |c| {
        c.tts.provider = provider;
        if provider == tts_client::Provider::Cartesia {
            c.tts.api_key = Some(CARTESIA_KEY.into());
        }
    })
    .await;

    let report = callgate_load::run(load(&h, 1, 3)).await;
    let call = &report.calls[0];
    assert_eq!(call.outcome, Outcome::Completed, "{call:#?}");
    assert!(
        call.time_to_first_audio_ms.is_some(),
        "greeting not heard: {call:#?}"
    );
    assert_eq!(call.utterances_sent, 3);
    assert_eq!(
        call.replies_heard, 3,
        "a reply to each utterance: {call:#?}"
    );
    assert_eq!(call.reply_latency_ms.len(), 3);
    assert_bot_audio_delivered(&h, call);
    match provider {
        tts_client::Provider::Cartesia => {
            let cartesia = h.sims.cartesia.stats();
            assert_eq!(h.sims.tts.stats().total_sessions, 0, "ElevenLabs unused");
            assert_eq!(cartesia.total_sessions, 1, "{cartesia:#?}");
            let socket = &h.sims.cartesia.sessions()[0];
            assert_eq!(
                socket.version,
                tts_client::DEFAULT_CARTESIA_VERSION,
                "{socket:#?}"
            );
            assert_eq!(socket.version, "2026-08-14");
            // Counted per context: the greeting and three replies.
            assert_eq!(
                cartesia.output_formats.get("pcm_mulaw_8000"),
                Some(&4),
                "{cartesia:#?}"
            );
        }
        _ => {
            let tts = h.sims.tts.stats();
            assert_eq!(tts.output_formats.get("ulaw_8000"), Some(&1), "{tts:#?}");
            assert_eq!(h.sims.cartesia.stats().total_sessions, 0, "Cartesia unused");
        }
    }
    let stt = h.sims.stt.stats();
    assert_eq!(stt.formats.get("mulaw/8000"), Some(&1), "{stt:#?}");

    let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
    assert_eq!(ledger.cleanup_status, "completed");
    assert_eq!(ledger.end_reason.as_deref(), Some("caller_hangup"));
    assert_stamps_in_order(&ledger);
    assert_eq!(
        ledger.stats["active_counter_delta"],
        serde_json::json!({"increment": 1, "decrement": 1}),
        "the permit's own counts"
    );
    let media = &ledger.stats["media"];
    assert_eq!(media["format"], "mulaw_8000");
    // Twilio stamps every media chunk: the inbound timing is measured on
    // each interval between two chunks read while the call wanted audio.
    let t = &media["transport"];
    let intervals = t["timed_intervals"].as_u64().unwrap();
    let frames_in = media["frames_in"].as_u64().unwrap();
    assert!(intervals > 100 && intervals < frames_in, "{media:#}");
    let p95 = t["jitter_p95_ms"].as_f64().unwrap();
    assert!(
        (0.5..=256.0).contains(&p95) && (p95 * 2.0).fract() == 0.0,
        "{t:#}"
    );
    for key in [
        "outbound_underruns",
        "outbound_underrun_ms",
        "outbound_longest_underrun_ms",
    ] {
        assert!(media[key].is_u64(), "{key}: {media:#}");
    }
    assert_eq!(ledger.stats["writes_lost"], 0);

    let turns = h.transcript(ledger.call_id).await;
    let caller: Vec<&str> = turns
        .iter()
        .filter(|t| t.0 == "caller")
        .map(|t| t.1.as_str())
        .collect();
    assert_eq!(
        caller,
        DEFAULT_CALLER_SCRIPT[..3].to_vec(),
        "caller turns = the STT script"
    );
    let bot: Vec<&(String, String, bool)> = turns.iter().filter(|t| t.0 == "bot").collect();
    assert_eq!(bot.len(), 4, "greeting + three replies: {turns:#?}");
    assert!(bot.iter().all(|t| !t.1.is_empty() && !t.2), "{turns:#?}");
    assert_eq!(turns[0].0, "bot", "the bot greets first: {turns:#?}");

    h.assert_all_closed().await;
    assert_eq!(h.server.app.call.store.pool_status().waiting, 0);
    h.stop().await;
}
