//! Resumed streams (`SessionStart.resume`) and the fault scope of the
//! dialog simulator, over in-memory channels.

use super::*;

const CALL: &str = "call-7";

fn start_msg(resume: bool) -> In {
    In::SessionStart(pb::SessionStart {
        call_id: CALL.into(),
        resume,
        ..Default::default()
    })
}

/// A first stream of `CALL` on `sim`: greeting, then turn 1 (party size).
async fn first_stream(sim: &DialogSim) -> Harness {
    let mut h = Harness::start_on(sim.clone());
    h.send(start_msg(false)).await;
    assert_eq!(text_of(&h.until_complete(0).await, 0), GREETING);
    h.turn(1, "A table for four please").await;
    h.until_complete(1).await;
    h
}

/// What turn 2 is answered with after turn 1, on an undisturbed stream.
async fn reference_reply() -> String {
    let sim = DialogSim::new(fast());
    let mut h = first_stream(&sim).await;
    h.turn(2, "The name is Alex").await;
    text_of(&h.until_complete(2).await, 2)
}

#[tokio::test]
async fn a_resumed_stream_keeps_the_slots_sends_no_greeting_and_repeats_the_cut_reply() {
    let want = reference_reply().await;
    let sim = DialogSim::new(fast());
    let mut h = first_stream(&sim).await;

    // Turn 2's reply is cut after its first word: the client vanishes.
    sim.set_config(DialogSimConfig {
        delta_interval_ms: 60_000,
        ..fast()
    });
    h.turn(2, "The name is Alex").await;
    let heard = loop {
        if let Out::TextDelta(d) = h.event().await {
            break d.text;
        }
    };
    drop(h);
    sim.set_config(fast());

    let mut h = Harness::start_on(sim.clone());
    h.send(start_msg(true)).await;
    h.turn(2, "The name is Alex").await;
    let events = h.until_complete(2).await;
    assert!(
        events.iter().all(|e| turn_of(e) != Some(0)),
        "no greeting: {events:?}"
    );
    let got = text_of(&events, 2);
    assert_eq!(got, want, "party size kept, same reply as undisturbed");
    assert!(got.starts_with(&heard), "{heard:?} is a prefix of {got:?}");

    // Turn 3 goes on from turn 2's state: only the time is missing.
    h.turn(3, "at eight").await;
    let call = loop {
        if let Out::ToolCall(call) = h.event().await {
            break call;
        }
    };
    assert_eq!(call.name, "check_availability");
    assert_eq!(call.arguments_json, r#"{"party_size":4,"time":"20:00"}"#);
}

#[tokio::test]
async fn a_resume_without_kept_state_starts_fresh_and_silent() {
    let mut h = Harness::start(fast());
    h.send(start_msg(true)).await;
    h.turn(1, "The name is Alex").await;
    let events = h.until_complete(1).await;
    assert!(
        events.iter().all(|e| turn_of(e).is_none_or(|t| t == 1)),
        "no greeting: {events:?}"
    );
    // Fresh state: the party size is asked for first.
    let fresh = DialogSim::new(fast());
    let mut control = Harness::start_on(fresh);
    control.send(start_msg(false)).await;
    control.until_complete(0).await;
    control.turn(1, "The name is Alex").await;
    assert_eq!(
        text_of(&events, 1),
        text_of(&control.until_complete(1).await, 1)
    );
}

#[tokio::test]
async fn session_end_forgets_the_call_and_a_drop_keeps_it() {
    let sim = DialogSim::new(fast());
    let h = first_stream(&sim).await;
    assert_eq!(sim.kept_conversations(), 1, "checkpointed while live");
    h.send(In::SessionEnd(pb::SessionEnd {
        reason: "caller_hangup".into(),
    }))
    .await;
    drop(h.tx);
    let mut rx = h.rx;
    assert!(rx.recv().await.is_none());
    assert_eq!(sim.kept_conversations(), 0);

    let h = first_stream(&sim).await;
    drop(h);
    // The stream noticed the drop (its guard is gone) and kept the call.
    let open = tokio::time::timeout(WAIT, async {
        while sim.stats().open_sessions > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    open.await.expect("the dropped stream ended");
    assert_eq!(sim.kept_conversations(), 1);
}

#[tokio::test]
async fn only_the_first_streams_are_faulted_and_the_outage_refuses_in_between() {
    let sim = DialogSim::new(DialogSimConfig {
        close_after_ms: Some(50),
        faulty_sessions: Some(1),
        down_after_fault_ms: Some(60_000),
        ..fast()
    });
    let mut h = first_stream(&sim).await;
    let status = loop {
        match h.next().await.expect("a status") {
            Ok(_) => {}
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(h.next().await.is_none());

    // Down: refused with UNAVAILABLE, and counted.
    let refused = sim.admit(std::time::Instant::now()).unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable);
    assert_eq!(sim.stats().refused_while_down, 1);
    // After the outage (an hour later) a stream is admitted.
    let later = std::time::Instant::now() + Duration::from_secs(3_600);
    let guard = sim.admit(later).expect("up after the outage");

    // Stream 2 is beyond `faulty_sessions`: it outlives `close_after_ms`.
    let mut h = Harness::with_guard(&sim, guard);
    h.send(start_msg(true)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    h.turn(2, "The name is Alex").await;
    let events = h.until_complete(2).await;
    assert_eq!(text_of(&events, 2), reference_reply().await);
    let stats = sim.stats();
    assert_eq!(stats.faulted_sessions, 1);
}
