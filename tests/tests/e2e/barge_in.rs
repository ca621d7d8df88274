//! Barge-in: when the caller speaks over the bot, outbound audio stops at
//! once (Twilio `clear`), the interrupted reply is recorded as heard so far,
//! and the caller's words are answered.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use callgate_sim::SimConfig;
use callgate_sim::script::DEFAULT_CALLER_SCRIPT;
use callgate_tests::Harness;
use callgate_tests::raw::{RawCall, ServerMsg, speech};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speaking_over_the_greeting_clears_it_and_gets_an_answer() {
    let h = Harness::start(SimConfig::default(), |_| {}).await;
    let mut c = RawCall::connect(&h.ws_url()).await;
    c.start().await;
    // Wait for the greeting to start playing.
    loop {
        match c.recv(Duration::from_secs(10)).await {
            Some(ServerMsg::Media(_)) => break,
            Some(ServerMsg::Closed(why)) => panic!("closed: {why:?}"),
            None => panic!("no greeting"),
            _ => {}
        }
    }
    // Talk over it, then listen.
    let msgs = c
        .stream_for(&speech(1_400, 9), Duration::from_secs(7))
        .await;
    let clear_at = msgs
        .iter()
        .position(|m| *m == ServerMsg::Clear)
        .expect("a clear after barge-in");
    let reply_audio = msgs[clear_at..]
        .iter()
        .filter(|m| matches!(m, ServerMsg::Media(_)))
        .count();
    assert!(
        reply_audio > 10,
        "the caller's words are answered after the clear: {msgs:?}"
    );
    assert!(
        msgs[clear_at..]
            .iter()
            .any(|m| *m == ServerMsg::Mark("turn-1".into())),
        "reply turn 1 completes: {msgs:?}"
    );
    c.stop().await;
    c.until_closed(Duration::from_secs(10)).await;

    let ledger = h.closed_ledger(&c.call_sid).await;
    assert_eq!(
        ledger.stats["interaction"]["interruptions"], 1,
        "{:#}",
        ledger.stats
    );
    let turns = h.transcript(ledger.call_id).await;
    let (speaker, heard, interrupted) = &turns[0];
    assert_eq!(
        (speaker.as_str(), *interrupted),
        ("bot", true),
        "{turns:#?}"
    );
    assert!(
        heard.len() < "Hi, this is Luigi's. How can I help you today?".len(),
        "{turns:#?}"
    );
    assert_eq!(
        turns[1],
        (
            "caller".to_string(),
            DEFAULT_CALLER_SCRIPT[0].to_string(),
            false
        )
    );
    assert_eq!(turns[2].0, "bot");
    h.assert_all_closed().await;
    h.stop().await;
}
