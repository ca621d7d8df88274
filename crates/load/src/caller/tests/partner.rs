//! The partner protocol: the same caller, other framing (binary audio,
//! marks answered only when playout reaches them and never on `clear`,
//! transfer/end/error control messages).

use super::*;

fn played_times(h: &Harness) -> Vec<(String, Duration)> {
    h.events("played")
        .into_iter()
        .map(|(t, v)| (v["name"].as_str().unwrap().to_string(), t))
        .collect()
}

#[test]
fn partner_calls_open_with_start_and_send_binary_frames_every_20_ms() {
    let mut h = Harness::partner(&[(0, 100)], PartnerFormat::L16);
    h.open(Duration::ZERO);
    let texts: Vec<&Value> = h.sent.iter().filter_map(|(_, v)| v.as_ref()).collect();
    assert_eq!(
        *texts[0],
        json!({"event":"start","call_id":ids().call.to_string(),
               "content-type":"audio/l16;rate=16000","metadata":{"tenant":"acme"}})
    );
    assert_eq!(texts.len(), 1, "no `connected` in the partner protocol");
    h.run_until(ms(200));
    let frames = h.events("binary");
    assert_eq!(frames.len(), 10);
    for (i, (t, v)) in frames.iter().enumerate() {
        assert_eq!(*t, ms(20 * (i as u64 + 1)));
        assert_eq!(v["len"], 640);
        assert_eq!(v["speech"], false, "silence before the greeting");
    }
    assert!(h.binary.iter().all(|(_, b)| b.iter().all(|&x| x == 0)));
    let pcmu = {
        let mut h = Harness::partner(&[], PartnerFormat::Pcmu);
        h.open(Duration::ZERO);
        h.run_until(ms(40));
        h.binary.clone()
    };
    assert_eq!(pcmu.len(), 2);
    assert!(
        pcmu.iter()
            .all(|(_, b)| b.len() == 160 && b.iter().all(|&x| x == 0xFF))
    );
}

#[test]
fn partner_speech_is_16_khz_linear_pcm_on_the_same_schedule_as_twilio() {
    let mut twilio = Harness::new(&[(200, 400)]);
    let mut partner = Harness::partner(&[(200, 400)], PartnerFormat::L16);
    twilio.open(ms(10));
    partner.open(ms(10));
    twilio.audio(ms(100), 1_000);
    twilio.mark(ms(100), "turn-1");
    partner.binary_audio(ms(100), 1_000);
    partner.partner_mark(ms(100), "turn-1");
    let t_end = twilio.run_until_speech_ends(ms(5_000));
    let p_end = partner.run_until_speech_ends(ms(5_000));
    assert_eq!((t_end, p_end), (ms(1_310 + 380), ms(1_310 + 380)));
    let speech: Vec<i16> = partner
        .binary
        .iter()
        .filter(|(t, _)| *t > ms(1_300) && *t <= p_end)
        .flat_map(|(_, b)| media::format::pcm16le_to_samples(b))
        .collect();
    // 400 ms at 16 kHz, and loud enough to be speech.
    assert_eq!(speech.len(), 6_400);
    assert!(media::vad::level_dbfs(&speech) > -30.0);
}

#[test]
fn partner_marks_are_played_only_when_playout_reaches_them() {
    let mut h = Harness::partner(&[(200, 400)], PartnerFormat::L16);
    h.open(ms(10));
    h.server(ms(20), json!({"event":"started","session_id":"s-1"}));
    h.binary_audio(ms(100), 600);
    h.binary_audio(ms(100), 400);
    h.partner_mark(ms(100), "turn-1");
    assert!(h.caller.is_admitted());
    h.run_until(ms(1_099));
    assert!(played_times(&h).is_empty(), "echoed before playout ended");
    let end = h.run_until_speech_ends(ms(5_000));
    assert_eq!(played_times(&h), [("turn-1".to_string(), ms(1_100))]);
    assert!(h.events("mark").is_empty(), "partner echoes are `played`");
    h.binary_audio(end + ms(250), 500);
    h.partner_mark(end + ms(250), "turn-2");
    h.run_until(end + ms(1_000));
    assert_eq!(played_times(&h)[1], ("turn-2".to_string(), end + ms(750)));
    assert!(h.caller.is_done());
    let stop = h.sent.iter().rev().find_map(|(_, v)| v.clone()).unwrap();
    assert_eq!(stop, json!({"event":"stop"}));
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(r.reply_latency_ms, [250]);
    assert_eq!(
        (r.greeting_audio_ms, r.reply_audio_ms.clone()),
        (Some(1_000), vec![500])
    );
    assert_eq!(r.bot_audio_ms, 1_500);
    assert_eq!(r.marks_echoed, 2);
    assert_eq!(r.session_id.as_deref(), Some("s-1"));
}

#[test]
fn partner_clear_drops_audio_and_its_marks_are_never_echoed() {
    let mut h = Harness::partner(&[(100, 200)], PartnerFormat::L16);
    h.open(Duration::ZERO);
    h.binary_audio(ms(100), 2_000);
    h.partner_mark(ms(100), "sentence-1");
    h.binary_audio(ms(100), 1_000);
    h.partner_mark(ms(100), "turn-1");
    h.server(ms(600), json!({"event":"clear"}));
    assert!(played_times(&h).is_empty());
    // The cleared turn still counts as finished, exactly as over Twilio.
    let end = h.run_until_speech_ends(ms(3_000));
    assert_eq!(end, ms(700 + 180));
    h.run_until(ms(4_000));
    assert!(played_times(&h).is_empty(), "a cleared mark was echoed");
    let r = h.record();
    assert_eq!(r.bot_audio_ms, 500);
    assert_eq!(r.marks_echoed, 0);
    assert_eq!(r.greeting_audio_ms, Some(3_000), "received, not played");
}

#[test]
fn a_partner_transfer_is_classified_by_its_mark_and_recorded() {
    let mut h = Harness::partner(&[(0, 200)], PartnerFormat::L16);
    h.open(Duration::ZERO);
    h.binary_audio(ms(20), 100);
    h.partner_mark(ms(20), "turn-1");
    let end = h.run_until_speech_ends(ms(2_000));
    h.binary_audio(end + ms(100), 300);
    h.partner_mark(end + ms(100), "callgate-transfer:caller_requested_human");
    h.run_until(end + ms(450));
    h.server(
        end + ms(450),
        json!({"event":"transfer","target":"+15550199","reason":"caller_requested_human"}),
    );
    h.caller.handle_closed(end + ms(460), Some(1000), "");
    let r = h.record();
    assert_eq!(
        r.outcome,
        Outcome::Transferred {
            reason: "caller_requested_human".into()
        }
    );
    assert_eq!(
        r.transfer,
        Some(TransferMessage {
            target: Some("+15550199".into()),
            reason: "caller_requested_human".into()
        })
    );
    assert_eq!(r.close_code, Some(1000));
    assert_eq!(r.end_message_reason, None);
}

#[test]
fn a_partner_overflow_is_the_same_rejection_as_over_twilio() {
    let mut h = Harness::partner(&[(0, 200)], PartnerFormat::L16);
    h.open(ms(5));
    h.prompt(ms(50), Prompt::Overflow, 25);
    h.partner_mark(ms(50), "callgate-overflow:queue_full");
    h.run_until(ms(3_560));
    assert_eq!(
        played_times(&h),
        [("callgate-overflow:queue_full".to_string(), ms(3_550))]
    );
    h.server(
        ms(3_560),
        json!({"event":"transfer","target":"","reason":"queue_full"}),
    );
    h.caller.handle_closed(ms(3_570), Some(1000), "");
    let r = h.record();
    let expected = Outcome::Rejected {
        how: "overflow_mark".into(),
        reason: "queue_full".into(),
        prompt_heard: true,
        time_to_rejection_ms: 50,
    };
    assert_eq!(r.outcome, expected);
    assert_eq!(r.transfer.map(|t| t.reason).as_deref(), Some("queue_full"));
}

#[test]
fn a_partner_transfer_or_end_without_a_mark_still_ends_the_conversation() {
    let mut h = Harness::partner(&[(0, 200)], PartnerFormat::Pcmu);
    h.open(Duration::ZERO);
    h.server(ms(100), json!({"event":"transfer","reason":"draining"}));
    h.caller.handle_closed(ms(110), Some(1000), "");
    let r = h.record();
    assert_eq!(
        r.outcome,
        Outcome::Transferred {
            reason: "draining".into()
        }
    );
    assert_eq!(r.transfer.and_then(|t| t.target), None);

    let mut h = Harness::partner(&[], PartnerFormat::L16);
    h.open(Duration::ZERO);
    h.binary_audio(ms(20), 200);
    h.partner_mark(ms(20), "callgate-end:bot_ended:booking_confirmed");
    h.run_until(ms(300));
    h.server(
        ms(300),
        json!({"event":"end","reason":"bot_ended:booking_confirmed"}),
    );
    h.caller.handle_closed(ms(310), Some(1000), "");
    let r = h.record();
    assert_eq!(
        r.outcome,
        Outcome::EndedByBot {
            reason: "bot_ended:booking_confirmed".into()
        }
    );
    assert_eq!(
        r.end_message_reason.as_deref(),
        Some("bot_ended:booking_confirmed")
    );
}

#[test]
fn a_partner_error_then_close_fails_the_call_with_its_code() {
    let mut h = Harness::partner(&[(0, 200)], PartnerFormat::L16);
    h.open(Duration::ZERO);
    h.server(
        ms(30),
        json!({"event":"error","code":"bad_audio_frame","message":"audio frame of 3 bytes"}),
    );
    h.caller
        .handle_closed(ms(31), Some(1007), "bad_audio_frame");
    let r = h.record();
    let Outcome::Failed { reason } = &r.outcome else {
        panic!("{r:?}")
    };
    assert!(
        reason.contains("1007") && reason.contains("bad_audio_frame"),
        "{reason}"
    );
    assert_eq!(
        r.server_error,
        Some(ServerError {
            code: "bad_audio_frame".into(),
            message: "audio frame of 3 bytes".into()
        })
    );
    assert_eq!(r.close_code, Some(1007));
}

#[test]
fn partner_audio_must_be_whole_samples_and_twilio_media_is_unknown_there() {
    let mut h = Harness::partner(&[], PartnerFormat::L16);
    h.open(Duration::ZERO);
    h.caller.handle_binary(ms(10), &[0x55; 641]);
    let sid = ids().stream.to_string();
    h.server(
        ms(15),
        json!({"event":"media","streamSid":sid,"media":{"payload":"VVVV"}}),
    );
    h.caller.handle_text(ms(16), "{not json");
    h.server(ms(17), json!({"event":"mark"}));
    h.binary_audio(ms(20), 100);
    h.partner_mark(ms(20), "turn-1");
    h.run_until(ms(200));
    let r = h.record();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!((r.unknown_events, r.malformed_events), (1, 3));
    assert_eq!(r.bot_audio_ms, 100);
}
