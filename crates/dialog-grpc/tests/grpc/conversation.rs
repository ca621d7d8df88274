//! Whole conversations through `DialogClient` against the dialog simulator:
//! the default booking script, escalation, interruption.

use crate::common;

use std::time::Duration;

use callgate_sim::dialog::DialogSimConfig;
use callgate_sim::dialog::bot::{GREETING, TRANSFER};
use callgate_sim::script::DEFAULT_CALLER_SCRIPT;
use common::*;
use dialog_grpc::{DialogEvent, DialogEvents, DialogSession, ToolCallId, TurnId};

async fn open(sim: &Sim) -> (DialogSession, DialogEvents) {
    let client = client_for(sim.grpc, Duration::from_secs(10));
    let meta = vec![("ingress".to_owned(), "test".to_owned())];
    let opened = client.open("call-1", meta).await;
    let (session, mut events) = opened.expect("the stream opens");
    let greeting = until_complete(&session, &mut events, None, 0).await;
    assert_eq!(text(&greeting, 0), GREETING);
    (session, events)
}

fn slot(events: &[DialogEvent]) -> Vec<(&str, &str)> {
    events
        .iter()
        .filter_map(|e| match e {
            DialogEvent::SlotUpdate { name, value } => Some((name.as_str(), value.as_str())),
            _ => None,
        })
        .collect()
}

fn tool_call(events: &[DialogEvent]) -> (&ToolCallId, TurnId, &str, &str, bool) {
    let call = events.iter().find_map(|e| match e {
        DialogEvent::ToolCall {
            id,
            turn,
            name,
            arguments_json,
            privileged,
        } => Some((
            id,
            *turn,
            name.as_str(),
            arguments_json.as_str(),
            *privileged,
        )),
        _ => None,
    });
    call.expect("a tool call")
}

#[tokio::test]
async fn default_script_books_a_table() {
    let sim = start_sim(fast()).await;
    let (session, mut events) = open(&sim).await;
    let turn = |n: u64| {
        session
            .user_turn(TurnId(n), DEFAULT_CALLER_SCRIPT[n as usize - 1])
            .unwrap();
        n
    };

    let t1 = turn(1);
    let ev = until_complete(&session, &mut events, Some(sim.http), t1).await;
    assert_eq!(slot(&ev), [("party_size", "4")]);
    assert_eq!(
        text(&ev, 1),
        "A table for four. What name is the booking under?"
    );

    let t2 = turn(2);
    let ev = until_complete(&session, &mut events, Some(sim.http), t2).await;
    assert_eq!(slot(&ev), [("name", "Alex Morgan")]);
    assert_eq!(text(&ev, 2), "Thanks, Alex. What time would you like?");

    let t3 = turn(3);
    let ev = until_complete(&session, &mut events, Some(sim.http), t3).await;
    assert_eq!(slot(&ev), [("time", "19:30")]);
    let (_, call_turn, name, args, privileged) = tool_call(&ev);
    assert_eq!(
        (call_turn, name, privileged),
        (TurnId(3), "check_availability", false)
    );
    assert_eq!(args, r#"{"party_size":4,"time":"19:30"}"#);
    assert_eq!(
        text(&ev, 3),
        "Let me check that for you. Good news, a table for four at 7:30 is free. Shall I book it?"
    );

    let t4 = turn(4);
    let ev = until_complete(&session, &mut events, Some(sim.http), t4).await;
    let (_, _, name, args, privileged) = tool_call(&ev);
    assert_eq!((name, privileged), ("book_table", true));
    assert_eq!(
        args,
        r#"{"name":"Alex Morgan","party_size":4,"time":"19:30"}"#
    );
    assert_eq!(text(&ev, 4), "You're booked, Alex. See you tonight!");
    assert!(
        matches!(next(&mut events).await, DialogEvent::EndCall { reason } if reason == "booking_confirmed")
    );

    assert_eq!(sim.sim.tool_stats().completed, 2);
    session.end("caller_hangup");
    assert!(matches!(
        next(&mut events).await,
        DialogEvent::Closed(Ok(()))
    ));
    assert!(events.recv().await.is_none(), "nothing after Closed");
    eventually("the stream to close", || sim.sim.stats().open_sessions == 0).await;
}

#[tokio::test]
async fn asking_for_a_person_escalates() {
    let sim = start_sim(fast()).await;
    let (session, mut events) = open(&sim).await;
    session
        .user_turn(TurnId(1), "I want to talk to a person")
        .unwrap();
    let ev = until_complete(&session, &mut events, None, 1).await;
    assert_eq!(text(&ev, 1), TRANSFER);
    let escalate = next(&mut events).await;
    assert!(
        matches!(escalate, DialogEvent::Escalate { reason } if reason == "caller_requested_human")
    );
}

#[tokio::test]
async fn dtmf_zero_escalates() {
    let sim = start_sim(fast()).await;
    let (session, mut events) = open(&sim).await;
    session.dtmf("0").unwrap();
    // DTMF is not a user turn: the reply carries the latest turn id (0 here).
    let ev = until_complete(&session, &mut events, None, 0).await;
    assert_eq!(text(&ev, 0), TRANSFER);
    let escalate = next(&mut events).await;
    assert!(
        matches!(escalate, DialogEvent::Escalate { reason } if reason == "caller_requested_human")
    );
}

#[tokio::test]
async fn interrupted_turn_gets_no_further_deltas_or_completion() {
    let sim = start_sim(fast()).await;
    let (session, mut events) = open(&sim).await;
    // Turn 1 speaks its first word at once, then one word a minute.
    sim.sim.set_config(DialogSimConfig {
        delta_interval_ms: 60_000,
        ..fast()
    });
    session
        .user_turn(TurnId(1), "A table for four please")
        .unwrap();
    assert!(matches!(
        next(&mut events).await,
        DialogEvent::SlotUpdate { .. }
    ));
    let first = next(&mut events).await;
    assert!(matches!(&first, DialogEvent::TextDelta { turn: TurnId(1), text } if text == "A"));

    session.interrupt(TurnId(1), "A").unwrap();
    sim.sim.set_config(fast());
    session.user_turn(TurnId(2), "The name is Alex").unwrap();
    let ev = until_complete(&session, &mut events, None, 2).await;
    let stray: Vec<_> = ev
        .iter()
        .filter(|e| {
            matches!(
                e,
                DialogEvent::TextDelta {
                    turn: TurnId(1),
                    ..
                } | DialogEvent::TurnComplete { turn: TurnId(1) }
            )
        })
        .collect();
    assert!(stray.is_empty(), "interrupted turn 1 went on: {stray:?}");
    assert_eq!(text(&ev, 2), "Thanks, Alex. What time would you like?");
}
