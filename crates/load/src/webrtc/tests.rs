//! The WebRTC caller on loopback against a str0m ICE-lite answerer
//! ([`fake`]): ICE and DTLS connect, Opus flows both ways, and whole calls
//! are counted the way the other protocols' are. Every test is bounded.

use std::time::Duration;

use super::*;
use crate::config::LoadConfig;
use crate::record::Outcome;
use crate::transport::Protocol;

mod fake;

use fake::{KEY, Script};

const BOUND: Duration = Duration::from_secs(10);

fn tone(frame: usize) -> Vec<u8> {
    (0..320)
        .flat_map(|i| {
            let t = (frame * 320 + i) as f32 / 16_000.0;
            (((t * 440.0 * std::f32::consts::TAU).sin() * 8_000.0) as i16).to_le_bytes()
        })
        .collect()
}

/// The answerer's side of the echo test: answers, then writes back every
/// Opus packet it receives.
async fn echo_answerer(offer: &str) -> String {
    use str0m::change::SdpOffer;
    use str0m::media::MediaKind;
    use str0m::net::{Protocol as P, Receive};
    use str0m::{Candidate, Event, Input, Output, RtcConfig};
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let local = socket.local_addr().unwrap();
    let mut rtc = RtcConfig::new()
        .set_ice_lite(true)
        .clear_codecs()
        .enable_opus(true, false)
        .build(std::time::Instant::now());
    rtc.add_local_candidate(Candidate::host(local, "udp").unwrap());
    let offer = SdpOffer::from_sdp_string(offer).unwrap();
    let answer = rtc.sdp_api().accept_offer(offer).unwrap().to_sdp_string();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 2_048];
        let mut mid = None;
        let stop = std::time::Instant::now() + BOUND;
        while std::time::Instant::now() < stop {
            let timeout = loop {
                match rtc.poll_output().unwrap() {
                    Output::Timeout(t) => break t,
                    Output::Transmit(t) => {
                        let _ = socket.try_send_to(&t.contents, t.destination);
                    }
                    Output::Event(Event::MediaAdded(a)) if a.kind == MediaKind::Audio => {
                        mid = Some(a.mid)
                    }
                    Output::Event(Event::MediaData(d)) => {
                        if let Some(w) = mid.and_then(|m| rtc.writer(m)) {
                            let _ = w.write(d.pt, d.network_time, d.time, d.data.to_vec());
                        }
                    }
                    Output::Event(_) => {}
                }
            };
            tokio::select! {
                r = socket.recv_from(&mut buf) => {
                    let (n, from) = r.unwrap();
                    let receive = Receive { proto: P::Udp, source: from, destination: local, contents: buf[..n].try_into().unwrap() };
                    rtc.handle_input(Input::Receive(std::time::Instant::now(), receive)).unwrap();
                }
                () = tokio::time::sleep_until(timeout.into()) => {
                    rtc.handle_input(Input::Timeout(std::time::Instant::now())).unwrap();
                }
            }
        }
    });
    answer
}

#[tokio::test]
async fn ice_and_dtls_connect_on_loopback_and_opus_flows_both_ways() {
    let test = async {
        let (mut peer, offer) = Peer::offer("127.0.0.1".parse().unwrap()).await.unwrap();
        assert!(offer.contains("a=sendrecv"), "{offer}");
        assert!(offer.contains("opus/48000/2"), "{offer}");
        assert!(!offer.contains("a=ice-lite"), "the caller runs full ICE");
        let answer = echo_answerer(&offer).await;
        let early = peer.accept(&answer).unwrap();
        let signal = Signal::new("http://127.0.0.1:9/v1/webrtc", &crate::Auth::None).unwrap();
        let session = signal.endpoint().clone();
        let mut call = Call::new(signal, session, peer).unwrap();
        call.until_connected(early).await.unwrap();
        let mut heard = Vec::new();
        let mut buf = vec![0u8; DATAGRAM];
        let mut next = Instant::now();
        for f in 0..50 {
            call.send_frame(&tone(f), f as u64 * codec::FRAME_TICKS);
            next += Duration::from_millis(20);
            while Instant::now() < next {
                let wake = next.min(Instant::from_std(call.peer.deadline()));
                let events = tokio::select! {
                    r = call.socket.recv_from(&mut buf) => {
                        let (n, from) = r.unwrap();
                        call.peer.receive(std::time::Instant::now(), from, &buf[..n])
                    }
                    () = sleep_until(wake) => call.peer.timeout(std::time::Instant::now()),
                };
                for e in events.into_iter().chain(std::mem::take(&mut call.stashed)) {
                    if let PeerEvent::Media { ts, data } = e {
                        heard.extend(call.codec.decode(ts, &data));
                    }
                }
            }
        }
        heard
    };
    let heard = tokio::time::timeout(BOUND, test).await.expect("bounded");
    assert!(heard.len() >= 40, "{} echoed frames", heard.len());
    let loud = heard
        .iter()
        .filter(|f| {
            let s: Vec<i16> = f
                .chunks_exact(2)
                .map(|c| i16::from_le_bytes([c[0], c[1]]))
                .collect();
            media::vad::level_dbfs(&s) > -30.0
        })
        .count();
    assert!(
        loud >= 30,
        "{loud} of {} echoed frames carry the tone",
        heard.len()
    );
}

fn config(url: String) -> LoadConfig {
    LoadConfig {
        url,
        protocol: Protocol::Webrtc,
        partner_key: Some(KEY.into()),
        utterances: 1,
        utterance_ms: (400, 400),
        think_ms: (100, 100),
        turn_gap_ms: 300,
        call_timeout: BOUND,
        ..LoadConfig::default()
    }
}

async fn one_call(
    script: Script,
    tweak: impl FnOnce(&mut LoadConfig),
) -> (crate::CallRecord, fake::Seen) {
    let (url, seen) = fake::serve(script).await;
    let mut cfg = config(url);
    tweak(&mut cfg);
    let report = tokio::time::timeout(BOUND + Duration::from_secs(2), crate::run(cfg))
        .await
        .expect("bounded");
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    (report.calls.into_iter().next().unwrap(), seen)
}

#[tokio::test]
async fn a_call_hears_hold_then_the_greeting_speaks_is_answered_and_hangs_up() {
    let script = Script {
        hold: true,
        ..Script::default()
    };
    let (r, seen) = one_call(script, |_| {}).await;
    assert_eq!(r.outcome, Outcome::Completed, "{r:#?}");
    assert_eq!((r.utterances_sent, r.replies_heard), (1, 1));
    assert_eq!(r.prompts_heard.hold, 1, "{:?}", r.prompts_heard);
    assert_eq!(r.prompts_heard.unknown, 0, "{:?}", r.prompts_heard);
    // The greeting follows 2.6 s of hold prompt: it is not the first audio.
    let (first, greeting) = (
        r.time_to_first_audio_ms.unwrap(),
        r.time_to_greeting_ms.unwrap(),
    );
    assert!(
        greeting >= first + 2_400,
        "first audio {first} ms, greeting {greeting} ms"
    );
    let latency = r.reply_latency_ms[0];
    assert!(
        (250..1_200).contains(&latency),
        "reply latency {latency} ms"
    );
    assert!(
        r.max_owed_silence_ms < 1_500,
        "{} ms owed",
        r.max_owed_silence_ms
    );
    assert!(
        r.greeting_audio_ms.unwrap() >= 500,
        "{:?}",
        r.greeting_audio_ms
    );
    assert_eq!(r.session_id.as_deref(), Some("c-1"));
    assert_eq!((seen.offers, seen.utterances_heard), (1, 1));
    assert!(
        seen.speech_frames >= 15,
        "the server heard {} loud frames",
        seen.speech_frames
    );
    assert!(seen.deleted, "the caller hangs up with DELETE");
    assert!(seen.polls >= 2, "the session is polled ({})", seen.polls);
    assert!(
        seen.offer_sdp.contains("a=candidate:"),
        "{}",
        seen.offer_sdp
    );
}

#[tokio::test]
async fn an_apology_before_the_reply_is_counted_as_itself_not_as_the_reply() {
    let script = Script {
        apology: true,
        ..Script::default()
    };
    let (r, _) = one_call(script, |_| {}).await;
    assert_eq!(r.outcome, Outcome::Completed, "{r:#?}");
    assert_eq!(
        (r.replies_heard, r.apologies_heard),
        (1, 1),
        "{:?}",
        r.prompts_heard
    );
    let (apology, reply) = (r.apology_latency_ms[0], r.reply_latency_ms[0]);
    assert!(apology < 1_200, "apology after {apology} ms");
    // The 4 s apology, then 200 ms, then the reply.
    assert!(reply >= apology + 4_000, "reply after {reply} ms");
}

#[tokio::test]
async fn the_status_ending_the_call_is_the_bots_end() {
    let script = Script {
        end_after_greeting: Some(("bot_ended:goodbye", Duration::from_millis(400))),
        ..Script::default()
    };
    let (r, seen) = one_call(script, |c| c.utterances = 2).await;
    assert_eq!(
        r.outcome,
        Outcome::EndedByBot {
            reason: "goodbye".into()
        },
        "{r:#?}"
    );
    assert_eq!(r.end_message_reason.as_deref(), Some("bot_ended:goodbye"));
    assert!(!seen.deleted, "a call the server ended is not deleted");
}

#[tokio::test]
async fn a_refused_offer_is_a_rejection_and_a_wrong_key_unauthorized() {
    let script = Script {
        refuse: Some("queue_full"),
        ..Script::default()
    };
    let (r, seen) = one_call(script, |_| {}).await;
    match &r.outcome {
        Outcome::Rejected {
            how,
            reason,
            prompt_heard,
            ..
        } => {
            assert_eq!(
                (how.as_str(), reason.as_str(), *prompt_heard),
                ("http_503", "queue_full", false)
            );
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(seen.offers, 1);
    let (r, _) = one_call(Script::default(), |c| c.partner_key = Some("wrong".into())).await;
    assert!(
        matches!(&r.outcome, Outcome::Unauthorized { status: 401, reason } if reason == "unknown key"),
        "{:?}",
        r.outcome
    );
}
