//! Driver tests over in-memory channels (no sockets): event order, word
//! streaming, interruption, tool timeouts and faults.

use super::bot::{GREETING, TRANSFER};
use super::pb::client_message::Kind as In;
use super::pb::server_event::Kind as Out;
use super::*;

/// Generous: only a broken driver waits this long.
const WAIT: Duration = Duration::from_secs(10);

struct Harness {
    tx: mpsc::Sender<Result<pb::ClientMessage, Status>>,
    rx: mpsc::Receiver<Result<pb::ServerEvent, Status>>,
    sim: DialogSim,
}

fn fast() -> DialogSimConfig {
    DialogSimConfig {
        first_delta_latency_ms: 0,
        delta_interval_ms: 0,
        ..DialogSimConfig::default()
    }
}

impl Harness {
    fn start(cfg: DialogSimConfig) -> Harness {
        Harness::start_on(DialogSim::new(cfg))
    }

    /// A stream on an existing simulator (admitted as `Converse` would be).
    fn start_on(sim: DialogSim) -> Harness {
        let guard = sim.admit(std::time::Instant::now()).unwrap();
        Harness::with_guard(&sim, guard)
    }

    /// A stream on `sim` holding an already-admitted `guard`.
    fn with_guard(sim: &DialogSim, guard: crate::stats::SessionGuard) -> Harness {
        let (tx, in_rx) = mpsc::channel(16);
        let (out, rx) = mpsc::channel(OUT_CAPACITY);
        let inbound =
            futures_util::stream::unfold(
                in_rx,
                |mut r| async move { r.recv().await.map(|m| (m, r)) },
            );
        let ctx = sim.session_ctx(guard, CancellationToken::new());
        tokio::spawn(session::run(Box::pin(inbound), out, ctx));
        Harness {
            tx,
            rx,
            sim: sim.clone(),
        }
    }

    async fn started(cfg: DialogSimConfig) -> Harness {
        let mut h = Harness::start(cfg);
        h.send(In::SessionStart(pb::SessionStart::default())).await;
        let greeting = h.until_complete(0).await;
        assert_eq!(text_of(&greeting, 0), GREETING);
        h
    }

    async fn send(&self, kind: In) {
        self.tx
            .send(Ok(pb::ClientMessage { kind: Some(kind) }))
            .await
            .unwrap();
    }

    async fn turn(&self, id: u64, transcript: &str) {
        self.send(In::UserTurn(pb::UserTurn {
            turn_id: id,
            transcript: transcript.into(),
        }))
        .await;
    }

    /// The next item: `Ok(event)` or the terminal status; `None` when the
    /// stream ended.
    async fn next(&mut self) -> Option<Result<Out, Status>> {
        let item = tokio::time::timeout(WAIT, self.rx.recv())
            .await
            .expect("driver stalled")?;
        Some(item.map(|ev| ev.kind.unwrap()))
    }

    async fn event(&mut self) -> Out {
        self.next()
            .await
            .expect("stream ended")
            .expect("stream failed")
    }

    async fn until_complete(&mut self, turn: u64) -> Vec<Out> {
        let mut events = Vec::new();
        loop {
            let ev = self.event().await;
            let done = matches!(&ev, Out::TurnComplete(c) if c.turn_id == turn);
            events.push(ev);
            if done {
                return events;
            }
        }
    }
}

fn text_of(events: &[Out], turn: u64) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Out::TextDelta(d) if d.turn_id == turn => Some(d.text.as_str()),
            _ => None,
        })
        .collect()
}

fn turn_of(ev: &Out) -> Option<u64> {
    match ev {
        Out::TextDelta(d) => Some(d.turn_id),
        Out::TurnComplete(c) => Some(c.turn_id),
        Out::ToolCall(t) => Some(t.turn_id),
        _ => None,
    }
}

#[tokio::test]
async fn greeting_streams_one_word_per_delta() {
    let mut h = Harness::start(fast());
    h.send(In::SessionStart(pb::SessionStart::default())).await;
    let events = h.until_complete(0).await;
    let words = GREETING.split_whitespace().count();
    assert_eq!(events.len(), words + 1, "{events:?}");
    for ev in &events[..words] {
        let Out::TextDelta(d) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(d.text.split_whitespace().count(), 1);
    }
    assert_eq!(text_of(&events, 0), GREETING);
}

#[tokio::test]
async fn interrupted_turn_gets_no_more_events() {
    let mut h = Harness::started(fast()).await;
    h.sim.set_config(DialogSimConfig {
        delta_interval_ms: 60_000,
        ..fast()
    });
    h.turn(1, "A table for four please").await;
    assert!(matches!(h.event().await, Out::SlotUpdate(_)));
    assert!(matches!(h.event().await, Out::TextDelta(d) if d.turn_id == 1));
    // The next word of turn 1 is a minute away: the interrupt lands first.
    h.send(In::Interrupt(pb::Interrupt {
        turn_id: 1,
        played_text: "A".into(),
    }))
    .await;
    h.sim.set_config(fast());
    h.turn(2, "The name is Alex").await;
    let events = h.until_complete(2).await;
    assert!(events.iter().all(|e| turn_of(e) != Some(1)), "{events:?}");
    assert_eq!(
        text_of(&events, 2),
        "Thanks, Alex. What time would you like?"
    );
}

#[tokio::test]
async fn interrupts_and_user_turns_are_counted_across_streams() {
    let mut h = Harness::started(fast()).await;
    assert_eq!(h.sim.turn_stats(), TurnStatsSnapshot::default());
    h.sim.set_config(DialogSimConfig {
        delta_interval_ms: 60_000,
        ..fast()
    });
    h.turn(1, "A table for four please").await;
    assert!(matches!(h.event().await, Out::SlotUpdate(_)));
    assert!(matches!(h.event().await, Out::TextDelta(d) if d.turn_id == 1));
    // One interrupt cutting the reply, and a late one naming an old turn:
    // both reached the bot, both count.
    for (turn_id, played) in [(1, "A"), (0, "Hello")] {
        h.send(In::Interrupt(pb::Interrupt {
            turn_id,
            played_text: played.into(),
        }))
        .await;
    }
    h.sim.set_config(fast());
    // Handled in order: once turn 2 is answered, both interrupts were seen.
    h.turn(2, "The name is Alex").await;
    h.until_complete(2).await;
    assert_eq!(
        h.sim.turn_stats(),
        TurnStatsSnapshot {
            user_turns: 2,
            interrupts: 2
        }
    );

    // A second stream on the same simulator adds to the same totals.
    let mut other = Harness::start_on(h.sim.clone());
    other
        .send(In::SessionStart(pb::SessionStart::default()))
        .await;
    other.until_complete(0).await;
    other
        .send(In::Interrupt(pb::Interrupt {
            turn_id: 0,
            played_text: GREETING.into(),
        }))
        .await;
    other
        .send(In::SessionEnd(pb::SessionEnd {
            reason: "test".into(),
        }))
        .await;
    assert!(other.next().await.is_none());
    let want = TurnStatsSnapshot {
        user_turns: 2,
        interrupts: 3,
    };
    assert_eq!(h.sim.turn_stats(), want);
    assert_eq!(h.sim.interrupts(), 3);
    // And over HTTP, under `turns`.
    let served = serde_json::to_value(get_stats(State(h.sim.clone())).await.0).unwrap();
    assert_eq!(
        served["turns"],
        serde_json::json!({"user_turns": 2, "interrupts": 3})
    );
    let back: DialogStats = serde_json::from_value(served).unwrap();
    assert_eq!(back.turns, want);
}

#[tokio::test]
async fn newer_turn_cancels_the_one_still_generating() {
    let mut h = Harness::started(fast()).await;
    h.sim.set_config(DialogSimConfig {
        first_delta_latency_ms: 60_000,
        ..fast()
    });
    h.turn(1, "A table for four please").await;
    assert!(
        matches!(h.event().await, Out::SlotUpdate(_)),
        "turn 1 was taken up"
    );
    h.sim.set_config(fast());
    h.turn(2, "under Rossi").await;
    let events = h.until_complete(2).await;
    assert!(events.iter().all(|e| turn_of(e) != Some(1)), "{events:?}");
}

#[tokio::test]
async fn unanswered_tool_call_times_out_with_an_apology() {
    let mut h = Harness::started(DialogSimConfig {
        tool_result_timeout_ms: 50,
        ..fast()
    })
    .await;
    h.turn(1, "Four people at eight under Alex").await;
    let events = h.until_complete(1).await;
    let Some(Out::ToolCall(call)) = events.iter().find(|e| matches!(e, Out::ToolCall(_))) else {
        panic!("no tool call in {events:?}");
    };
    assert_eq!(call.name, "check_availability");
    assert_eq!(call.arguments_json, r#"{"party_size":4,"time":"20:00"}"#);
    assert_eq!(
        text_of(&events, 1),
        "Let me check that for you. Sorry, I couldn't check just now. Shall I try again?"
    );
    // A result that arrives after the timeout is stale and ignored.
    h.send(In::ToolResult(pb::ToolResult {
        tool_call_id: call.id.clone(),
        ..Default::default()
    }))
    .await;
    h.turn(2, "goodbye").await;
    let events = h.until_complete(2).await;
    assert_eq!(text_of(&events, 2), "Goodbye!");
    assert!(matches!(h.event().await, Out::EndCall(e) if e.reason == "caller_goodbye"));
}

#[tokio::test]
async fn dtmf_zero_escalates() {
    let mut h = Harness::started(fast()).await;
    h.send(In::Dtmf(pb::Dtmf { digits: "0".into() })).await;
    let events = h.until_complete(0).await;
    assert_eq!(text_of(&events, 0), TRANSFER);
    assert!(matches!(h.event().await, Out::Escalate(e) if e.reason == "caller_requested_human"));
}

#[tokio::test]
async fn stalled_replies_never_answer() {
    let mut h = Harness::started(DialogSimConfig {
        stall_replies: true,
        ..fast()
    })
    .await;
    h.turn(1, "A table for four please").await;
    let quiet = tokio::time::timeout(Duration::from_millis(300), h.rx.recv()).await;
    assert!(quiet.is_err(), "a stalled bot answered: {quiet:?}");
    h.send(In::SessionEnd(pb::SessionEnd {
        reason: "test".into(),
    }))
    .await;
    assert!(h.next().await.is_none(), "SessionEnd ends the stream");
}

#[tokio::test]
async fn session_end_and_half_close_release_the_session() {
    let mut h = Harness::started(fast()).await;
    assert_eq!(h.sim.stats().open_sessions, 1);
    h.send(In::SessionEnd(pb::SessionEnd {
        reason: "caller_hangup".into(),
    }))
    .await;
    assert!(h.next().await.is_none());
    assert_eq!(
        h.sim.stats().open_sessions,
        0,
        "guard dropped before the stream ended"
    );

    let mut h = Harness::started(fast()).await;
    drop(h.tx);
    assert!(h.rx.recv().await.is_none(), "half-close ends the stream");
    assert_eq!(h.sim.stats().open_sessions, 0);
}

#[tokio::test]
async fn close_after_fault_ends_with_unavailable() {
    let mut h = Harness::started(DialogSimConfig {
        close_after_ms: Some(50),
        ..fast()
    })
    .await;
    let status = h
        .next()
        .await
        .expect("a status")
        .expect_err("a fault status");
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(h.next().await.is_none());
    assert_eq!(h.sim.stats().faulted_sessions, 1);
    assert_eq!(h.sim.stats().open_sessions, 0);
}

#[tokio::test]
async fn first_message_must_be_session_start() {
    let mut h = Harness::start(fast());
    h.turn(1, "hello").await;
    let status = h.next().await.expect("a status").expect_err("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(h.sim.stats().open_sessions, 0);
}

mod resume_tests;

#[test]
fn config_is_defaulted_from_partial_json() {
    let cfg: DialogSimConfig = serde_json::from_str(r#"{"max_streams": 3}"#).unwrap();
    assert_eq!(
        cfg,
        DialogSimConfig {
            max_streams: 3,
            ..DialogSimConfig::default()
        }
    );
}
