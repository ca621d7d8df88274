//! Whole SIP calls from the real sipp: G.711 speech in over RTP, the bot's
//! voice back over RTP, the caller's BYE — with the transcript and the
//! receipt (RTP and RTCP figures included) in Postgres. PCMU and PCMA.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use callgate_sim::SimConfig;
use callgate_tests::sip;
use callgate_tests::sipp::{Sipp, SippOpts};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pcmu_call_is_heard_answered_recorded_and_closed() {
    whole_call("call_pcmu.xml", 0, "mulaw_8000", "mulaw/8000").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pcma_call_is_never_decoded_as_pcmu() {
    whole_call("call_pcma.xml", 8, "alaw_8000", "alaw/8000").await;
}

async fn whole_call(scenario: &str, pt: u8, format: &str, stt_format: &str) {
    let h = sip::start(SimConfig::default(), |_| {}).await;
    let opts = SippOpts {
        capture_rtp: true,
        timeout: Duration::from_secs(60),
        ..SippOpts::default()
    }
    .var("hold_ms", "4000")
    .var("turns", "2");
    let out = Sipp::uac(scenario, sip::addr(&h), opts).await.wait().await;
    out.assert_ok();

    // The bot's audio came back over RTP, in the offered codec only, from
    // one SSRC, 20 ms apart on the timestamp clock.
    let rtp = out.rtp.as_ref().expect("captured");
    let back: Vec<_> = rtp.received().collect();
    assert!(back.len() > 500, "{} RTP packets came back", back.len());
    assert_eq!(
        rtp.received_by_payload_type()
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        vec![pt]
    );
    assert_eq!(rtp.received_by_ssrc().len(), 1, "one SSRC");
    assert!(
        back[0].marker,
        "the first packet of the stream carries the marker bit"
    );
    for w in back.windows(2) {
        assert_eq!(
            w[1].seq,
            w[0].seq.wrapping_add(1),
            "sequence numbers in order"
        );
        assert_eq!(
            w[1].timestamp,
            w[0].timestamp.wrapping_add(160),
            "20 ms per packet"
        );
        assert_eq!(w[1].payload.len(), 160);
    }
    let voiced = back
        .iter()
        .filter(|p| p.payload.iter().any(|b| *b != back[0].payload[0]))
        .count();
    assert!(
        voiced > 50,
        "the bot's voice, not only silence: {voiced} voiced packets"
    );

    let calls = sip::closed_calls(&h, 1).await;
    let l = &calls[0];
    assert_eq!(
        l.end_reason.as_deref(),
        Some("caller_hangup"),
        "{:#}",
        l.stats
    );
    assert_eq!(l.cleanup_status, "completed", "{:#}", l.stats);
    let media = &l.stats["media"];
    assert_eq!(media["format"], format);
    let t = &media["transport"];
    assert_eq!(t["codec"], if pt == 0 { "PCMU" } else { "PCMA" });
    assert!(t["packets_in"].as_u64().unwrap() > 500, "{t:#}");
    assert!(t["packets_out"].as_u64().unwrap() > 500, "{t:#}");
    assert_eq!(t["wrong_payload_type"], 0, "{t:#}");
    assert!(
        t["rtcp_sent"].as_u64().unwrap() >= 2,
        "an RTCP report every 5 s: {t:#}"
    );
    // Loss and jitter as our RTCP receiver reports carry them: measured, so
    // present, and sane on loopback.
    assert!(t["lost"].as_u64().unwrap() <= 2, "{t:#}");
    let jitter = t["jitter_ms"].as_f64().unwrap();
    assert!((0.0..40.0).contains(&jitter), "{t:#}");
    // The percentile of each packet's transit difference, to 0.5 ms.
    let p95 = t["jitter_p95_ms"].as_f64().unwrap();
    assert!(
        (0.5..=256.0).contains(&p95) && (p95 * 2.0).fract() == 0.0,
        "{t:#}"
    );
    assert!(media["outbound_underruns"].is_u64(), "{media:#}");

    let transcript = h.transcript(l.call_id).await;
    let caller: Vec<_> = transcript
        .iter()
        .filter(|(s, _, _)| s == "caller")
        .collect();
    let bot: Vec<_> = transcript.iter().filter(|(s, _, _)| s == "bot").collect();
    assert_eq!(
        caller.len(),
        2,
        "both utterances transcribed: {transcript:#?}"
    );
    assert!(bot.len() >= 3, "greeting and two replies: {transcript:#?}");
    let stt = h.sims.stt.stats();
    assert_eq!(
        stt.formats.get(stt_format),
        Some(&1),
        "STT opened in the leg's codec: {stt:#?}"
    );
    sip::assert_all_free(&h).await;
}
