//! Mid-call reconnect over real loopback sockets, against the scripted
//! fake provider of `common::fake` (both vendors' frames; it records what
//! each connection was asked to speak): only the unheard rest of a reply
//! is re-requested, audio continues, cancelled contexts stay dead,
//! capacity refusals are told apart from outages, the budget ends the
//! session, close() is prompt, and the first connect is never retried.

use crate::common;

use std::time::{Duration, Instant};

use common::fake::{Fake, Kill, Plan};
use common::next;
use tts_client::{
    CloseReason, ContextId, DEFAULT_CARTESIA_VERSION, Provider, ReconnectPolicy, TtsConfig,
    TtsError, TtsEvent, TtsEvents, connect,
};

const C: ContextId = ContextId(1);
const REPLY: &str = "one two three four five six ";
const REST: &str = "three four five six ";

fn quick() -> ReconnectPolicy {
    ReconnectPolicy {
        initial_ms: 20,
        max_ms: 100,
        budget_ms: 5_000,
        max_attempts: 8,
        ..ReconnectPolicy::default()
    }
}

fn config(fake: &Fake, vendor: Provider) -> TtsConfig {
    let mut cfg = match vendor {
        Provider::ElevenLabs => TtsConfig::new(fake.base_url(), "voice"),
        _ => TtsConfig::cartesia(fake.base_url(), "voice"),
    };
    cfg.reconnect = quick();
    cfg
}

/// Events until `ctx`'s final (included); a `Closed` first fails the test.
async fn until_final(events: &mut TtsEvents, ctx: ContextId) -> Vec<TtsEvent> {
    let mut seen = Vec::new();
    loop {
        let event = next(events).await;
        let done = event == TtsEvent::ContextFinal { context: ctx };
        if let TtsEvent::Closed(reason) = &event {
            panic!("closed before the final: {reason}; saw {seen:?}");
        }
        seen.push(event);
        if done {
            return seen;
        }
    }
}

/// Events until the first one `stop` accepts (included).
async fn until(events: &mut TtsEvents, stop: impl Fn(&TtsEvent) -> bool) -> Vec<TtsEvent> {
    let mut seen = Vec::new();
    loop {
        let event = next(events).await;
        let done = stop(&event);
        seen.push(event);
        if done {
            return seen;
        }
    }
}

fn audio_chunks(events: &[TtsEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, TtsEvent::Audio { .. }))
        .count()
}

/// The one reply, killed after two words, resumed: returns the events.
async fn killed_mid_reply(fake: &Fake, cfg: &TtsConfig) -> Vec<TtsEvent> {
    let (mut tts, mut events) = connect(cfg, "mid-reply").await.expect("connect");
    tts.open_context(C).expect("session takes the command");
    tts.send_text(C, REPLY).expect("session takes the command");
    tts.flush(C).expect("session takes the command");
    tts.close_context(C).expect("session takes the command"); // the drop comes while it is closing
    let seen = until_final(&mut events, C).await;
    let tally = tts.reconnects();
    assert_eq!((tally.drops, tally.reconnected), (1, 1), "{tally:?}");
    assert!(tally.attempts >= 1);
    assert_eq!(tally.capacity_refusals, 0);
    tts.close().await.expect("clean close");
    assert_eq!(
        next(&mut events).await,
        TtsEvent::Closed(CloseReason::Requested)
    );
    let conns = fake.conns();
    assert_eq!(conns.len(), 2, "{conns:?}");
    assert_eq!(conns[0].spoken(), REPLY);
    assert_eq!(
        conns[1].spoken(),
        REST,
        "only the unheard rest, from a word"
    );
    seen
}

fn assert_reconnect_sequence(seen: &[TtsEvent]) {
    let reconnecting = seen
        .iter()
        .position(|e| {
            matches!(
                e,
                TtsEvent::Reconnecting {
                    attempt: 1,
                    capacity: false,
                    ..
                }
            )
        })
        .unwrap_or_else(|| panic!("no Reconnecting in {seen:?}"));
    let reconnected = seen
        .iter()
        .position(|e| {
            matches!(
                e,
                TtsEvent::Reconnected {
                    resumed_contexts: 1,
                    ..
                }
            )
        })
        .unwrap_or_else(|| panic!("no Reconnected in {seen:?}"));
    assert!(reconnecting < reconnected);
    assert_eq!(
        audio_chunks(&seen[..reconnecting]),
        2,
        "two words before the drop"
    );
    assert_eq!(
        audio_chunks(&seen[reconnected..]),
        4,
        "the four unheard words after it, none repeated"
    );
}

#[tokio::test]
async fn elevenlabs_drop_mid_reply_re_requests_only_the_unheard_rest() {
    let fake = Fake::start(
        Provider::ElevenLabs,
        &[Plan::kill_after(2, Kill::Close(1011)), Plan::SERVE],
    )
    .await;
    let seen = killed_mid_reply(&fake, &config(&fake, Provider::ElevenLabs)).await;
    assert_reconnect_sequence(&seen);
    let second = &fake.conns()[1];
    assert_eq!(
        second.frames[0]["text"], " ",
        "the context is re-opened first"
    );
    assert_eq!(second.frames[0]["context_id"], "ctx-1", "under the same id");
    assert!(
        second.frames.iter().any(|f| f["close_context"] == true),
        "and closed again: {:?}",
        second.frames
    );
}

#[tokio::test]
async fn cartesia_connection_loss_mid_reply_resumes_from_the_word_timestamps() {
    let fake = Fake::start(
        Provider::Cartesia,
        &[Plan::kill_after(2, Kill::Reset), Plan::SERVE],
    )
    .await;
    let mut cfg = config(&fake, Provider::Cartesia);
    cfg.api_key = Some("sk_car_test".into());
    let seen = killed_mid_reply(&fake, &cfg).await;
    assert_reconnect_sequence(&seen);
    let conns = fake.conns();
    for conn in &conns {
        assert_eq!(conn.path, "/tts/websocket");
        assert_eq!(
            conn.header("Cartesia-Version"),
            Some(DEFAULT_CARTESIA_VERSION)
        );
        assert_eq!(conn.header("Authorization"), Some("Bearer sk_car_test"));
    }
    let first = &conns[1].frames[0];
    assert_eq!(first["transcript"], REST);
    assert_eq!(first["context_id"], "ctx-1");
    assert_eq!(first["continue"], true);
    assert_eq!(first["voice"]["id"], "voice");
    assert_eq!(first["output_format"]["encoding"], "pcm_mulaw");
    let last = conns[1].frames.last().unwrap();
    assert_eq!(
        (&last["transcript"], &last["continue"]),
        (&"".into(), &false.into())
    );
}

#[tokio::test]
async fn without_alignment_the_heard_part_is_estimated_from_the_audio_length() {
    let fake = Fake::start(
        Provider::ElevenLabs,
        &[
            Plan::Serve {
                kill: Some((2, Kill::Close(1011))),
                aligned: false,
            },
            Plan::Serve {
                kill: None,
                aligned: false,
            },
        ],
    )
    .await;
    let mut cfg = config(&fake, Provider::ElevenLabs);
    // Without alignment the close waits for a quiet close_timeout.
    cfg.close_timeout = Duration::from_millis(300);
    let seen = killed_mid_reply(&fake, &cfg).await;
    assert_reconnect_sequence(&seen);
}

#[tokio::test]
async fn a_429_on_reconnect_counts_as_capacity_and_text_sent_meanwhile_is_kept() {
    let fake = Fake::start(
        Provider::ElevenLabs,
        &[
            Plan::kill_after(1, Kill::Close(1011)),
            Plan::Refuse(429),
            Plan::SERVE,
        ],
    )
    .await;
    let (mut tts, mut events) = connect(&config(&fake, Provider::ElevenLabs), "busy")
        .await
        .unwrap();
    tts.open_context(C).unwrap();
    tts.send_text(C, "one two three ").unwrap();
    tts.flush(C).unwrap();
    let seen = until(&mut events, |e| matches!(e, TtsEvent::Reconnecting { .. })).await;
    assert!(
        matches!(
            seen.last(),
            Some(TtsEvent::Reconnecting {
                attempt: 1,
                capacity: false,
                ..
            })
        ),
        "{seen:?}"
    );
    tts.send_text(C, "four five ")
        .expect("held while reconnecting");
    let seen = until(&mut events, |e| matches!(e, TtsEvent::Reconnected { .. })).await;
    assert!(
        seen.iter().any(|e| matches!(
            e,
            TtsEvent::Reconnecting { attempt: 2, capacity: true, error } if error.contains("429")
        )),
        "{seen:?}"
    );
    tts.close_context(C).unwrap();
    until_final(&mut events, C).await;
    let tally = tts.reconnects();
    assert_eq!(
        (tally.drops, tally.attempts, tally.reconnected),
        (1, 2, 1),
        "{tally:?}"
    );
    assert_eq!((tally.capacity_refusals, tally.down_refusals), (1, 0));
    let conns = fake.conns();
    assert_eq!(conns[1].refused, Some(429));
    assert_eq!(conns[2].spoken(), "two three four five ");
    tts.close().await.unwrap();
}

#[tokio::test]
async fn a_provider_down_longer_than_the_budget_ends_the_session() {
    let fake = Fake::start(
        Provider::Cartesia,
        &[Plan::kill_after(1, Kill::Close(1011)), Plan::Refuse(503)],
    )
    .await;
    let mut cfg = config(&fake, Provider::Cartesia);
    cfg.reconnect.budget_ms = 500;
    let (mut tts, mut events) = connect(&cfg, "down").await.unwrap();
    tts.open_context(C).unwrap();
    tts.send_text(C, REPLY).unwrap();
    let seen = until(&mut events, |e| matches!(e, TtsEvent::Closed(_))).await;
    let Some(TtsEvent::Closed(reason)) = seen.last() else {
        unreachable!()
    };
    let CloseReason::ReconnectFailed {
        attempts,
        capacity,
        last,
    } = reason
    else {
        panic!("{reason}")
    };
    assert!(!capacity && last.contains("503"), "{reason}");
    assert!(!reason.is_retryable());
    let tally = tts.reconnects();
    assert_eq!(tally.attempts, *attempts);
    assert_eq!((tally.drops, tally.reconnected), (1, 0));
    assert!(tally.down_refusals >= 1 && tally.capacity_refusals == 0);
    let announced = seen
        .iter()
        .filter(|e| matches!(e, TtsEvent::Reconnecting { .. }))
        .count();
    assert_eq!(announced as u32, tally.attempts, "one notice per attempt");
    assert!(matches!(
        tts.send_text(C, "more "),
        Err(TtsError::Closed { .. })
    ));
}

#[tokio::test]
async fn a_context_cancelled_while_reconnecting_is_not_resumed() {
    let fake = Fake::start(
        Provider::ElevenLabs,
        &[Plan::kill_after(1, Kill::Close(1011)), Plan::SERVE],
    )
    .await;
    let mut cfg = config(&fake, Provider::ElevenLabs);
    cfg.reconnect.initial_ms = 300; // a window to cancel in
    cfg.reconnect.max_ms = 300;
    let (mut tts, mut events) = connect(&cfg, "barge").await.unwrap();
    tts.open_context(C).unwrap();
    tts.send_text(C, REPLY).unwrap();
    tts.flush(C).unwrap();
    until(&mut events, |e| matches!(e, TtsEvent::Reconnecting { .. })).await;
    tts.cancel_context(C).unwrap();
    let seen = until(&mut events, |e| matches!(e, TtsEvent::Reconnected { .. })).await;
    assert_eq!(seen[0], TtsEvent::ContextFinal { context: C });
    assert_eq!(audio_chunks(&seen), 0, "no audio after the cancel");
    assert!(matches!(
        seen.last(),
        Some(TtsEvent::Reconnected {
            resumed_contexts: 0,
            ..
        })
    ));
    assert_eq!(tts.open_contexts(), 0);
    tts.close().await.unwrap();
    let conns = fake.conns();
    assert!(
        conns[1].frames.iter().all(|f| f["context_id"].is_null()),
        "nothing for the cancelled context: {:?}",
        conns[1].frames
    );
}

#[tokio::test]
async fn close_during_a_reconnect_wait_ends_at_once() {
    let fake = Fake::start(
        Provider::ElevenLabs,
        &[Plan::kill_after(1, Kill::Reset), Plan::Refuse(503)],
    )
    .await;
    let mut cfg = config(&fake, Provider::ElevenLabs);
    cfg.reconnect = ReconnectPolicy {
        initial_ms: 4_000,
        max_ms: 4_000,
        budget_ms: 20_000,
        max_attempts: 3,
        ..ReconnectPolicy::default()
    };
    let (mut tts, mut events) = connect(&cfg, "leaving").await.unwrap();
    tts.open_context(C).unwrap();
    tts.send_text(C, REPLY).unwrap();
    until(&mut events, |e| matches!(e, TtsEvent::Reconnecting { .. })).await;
    let started = Instant::now();
    tts.close().await.expect("a requested close");
    // The first wait is at least 2 s (half its 4 s step is fixed).
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let seen = until(&mut events, |e| matches!(e, TtsEvent::Closed(_))).await;
    assert_eq!(seen.last(), Some(&TtsEvent::Closed(CloseReason::Requested)));
    assert_eq!(fake.conns().len(), 1, "no attempt was made");
}

#[tokio::test]
async fn a_drop_after_a_closing_context_was_fully_heard_delivers_its_final() {
    let fake = Fake::start(
        Provider::ElevenLabs,
        &[Plan::kill_after(3, Kill::Reset), Plan::SERVE],
    )
    .await;
    let (mut tts, mut events) = connect(&config(&fake, Provider::ElevenLabs), "heard")
        .await
        .unwrap();
    tts.open_context(C).unwrap();
    tts.send_text(C, "one two three ").unwrap();
    tts.close_context(C).unwrap();
    let seen = until_final(&mut events, C).await;
    assert_eq!(audio_chunks(&seen), 3);
    let seen = until(&mut events, |e| matches!(e, TtsEvent::Reconnected { .. })).await;
    assert!(matches!(
        seen.last(),
        Some(TtsEvent::Reconnected {
            resumed_contexts: 0,
            ..
        })
    ));
    tts.close().await.unwrap();
    assert!(fake.conns()[1].spoken().is_empty(), "nothing to re-request");
}

#[tokio::test]
async fn the_first_connect_and_policy_closes_are_never_retried() {
    let fake = Fake::start(Provider::ElevenLabs, &[Plan::Refuse(503)]).await;
    let err = connect(&config(&fake, Provider::ElevenLabs), "setup")
        .await
        .unwrap_err();
    assert!(
        matches!(err, TtsError::Rejected { status: 503, .. }),
        "{err}"
    );
    assert_eq!(fake.conns().len(), 1);

    fake.set_plan(Plan::kill_after(1, Kill::Close(1008)));
    let (mut tts, mut events) = connect(&config(&fake, Provider::ElevenLabs), "policy")
        .await
        .unwrap();
    tts.open_context(C).unwrap();
    tts.send_text(C, REPLY).unwrap();
    let seen = until(&mut events, |e| matches!(e, TtsEvent::Closed(_))).await;
    assert!(
        matches!(
            seen.last(),
            Some(TtsEvent::Closed(CloseReason::ProviderClosed {
                code: 1008,
                ..
            }))
        ),
        "{seen:?}"
    );
    assert!(
        !seen
            .iter()
            .any(|e| matches!(e, TtsEvent::Reconnecting { .. }))
    );
    assert_eq!(tts.reconnects(), tts_client::Tally::default());
    // Closed is the actor's last act: no attempt can follow it.
    assert_eq!(fake.conns().len(), 2, "no reconnect attempt");
}
