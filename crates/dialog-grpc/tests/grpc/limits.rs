//! The bounds: the service's stream cap, dropping a session ends its RPC,
//! and the open deadline holds against a peer that never speaks HTTP/2.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use dialog_grpc::{DialogError, ErrorSource, TurnId};
use tokio::net::TcpListener;

#[tokio::test]
async fn cap_rejects_fast_and_dropping_frees_the_stream() {
    let sim = start_sim(callgate_sim::dialog::DialogSimConfig {
        max_streams: 1,
        ..fast()
    })
    .await;
    // A long open deadline: a refusal must not wait for it.
    let client = client_for(sim.grpc, Duration::from_secs(30));
    let first = client.open("call-a", vec![]).await.unwrap();

    let started = Instant::now();
    let err = client.open("call-b", vec![]).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refusal took {:?}",
        started.elapsed()
    );
    assert!(
        matches!(&err, DialogError::Rejected { call_id, code: dialog_grpc::GrpcCode::ResourceExhausted, .. } if call_id == "call-b"),
        "{err:?}"
    );
    assert!(err.is_retryable() && err.is_capacity());
    assert_eq!(err.source_kind(), ErrorSource::Provider);

    drop(first);
    eventually("the sim to see the stream end", || {
        sim.sim.stats().open_sessions == 0
    })
    .await;
    let again = client.open("call-c", vec![]).await;
    assert!(again.is_ok(), "the freed slot is usable: {:?}", again.err());
}

#[tokio::test]
async fn dropping_only_the_events_half_cancels_the_rpc() {
    let sim = start_sim(fast()).await;
    let client = client_for(sim.grpc, Duration::from_secs(10));
    let (session, events) = client.open("call-d", vec![]).await.unwrap();
    assert_eq!(sim.sim.stats().open_sessions, 1);
    drop(events);
    eventually("the sim to see the stream end", || {
        sim.sim.stats().open_sessions == 0
    })
    .await;
    eventually("the session to notice", || session.is_closed()).await;
    let err = session.user_turn(TurnId(1), "hello").unwrap_err();
    assert!(matches!(err, DialogError::Closed { .. }), "{err:?}");
}

#[tokio::test]
async fn open_deadline_holds_when_the_peer_never_speaks_http2() {
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    // Accept connections and hold them without reading or writing.
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let client = client_for(addr, Duration::from_millis(300));
    let started = Instant::now();
    let err = client.open("call-e", vec![]).await.unwrap_err();
    assert!(
        matches!(&err, DialogError::OpenTimeout { call_id, .. } if call_id == "call-e"),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    holder.abort();
}

#[tokio::test]
async fn nothing_listening_is_unavailable() {
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let client = client_for(addr, Duration::from_secs(10));
    let err = client.open("call-f", vec![]).await.unwrap_err();
    assert!(matches!(err, DialogError::Unavailable { .. }), "{err:?}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn simulator_shutdown_ends_open_streams_after_the_reconnect_budget() {
    let sim = start_sim(fast()).await;
    let client = client_for(sim.grpc, Duration::from_secs(10));
    let (session, mut events) = client.open("call-g", vec![]).await.unwrap();
    let stats = sim.sim.clone();
    sim.shutdown().await;
    let mut attempts_seen = 0;
    let closed = loop {
        match next(&mut events).await {
            dialog_grpc::DialogEvent::Closed(outcome) => break outcome,
            dialog_grpc::DialogEvent::Reconnecting { capacity, .. } => {
                assert!(!capacity, "a stopped service is down, not full");
                attempts_seen += 1;
            }
            _ => {}
        }
    };
    // The service is gone: every reconnect attempt finds it down.
    let err = closed.unwrap_err();
    assert!(matches!(&err, DialogError::Unavailable { .. }), "{err:?}");
    assert!(err.is_retryable());
    let tally = session.reconnects();
    assert_eq!((tally.drops, tally.reconnected), (1, 0), "{tally:?}");
    assert!(
        tally.attempts >= 1 && tally.down_refusals == tally.attempts,
        "{tally:?}"
    );
    assert_eq!(attempts_seen, tally.attempts);
    assert_eq!(stats.stats().open_sessions, 0);
}

#[test]
fn bad_configuration_is_refused() {
    let cfg = dialog_grpc::DialogConfig {
        channels: 0,
        ..Default::default()
    };
    assert!(matches!(
        dialog_grpc::DialogClient::new(&cfg),
        Err(DialogError::InvalidConfig { .. })
    ));
    let cfg = dialog_grpc::DialogConfig {
        endpoint: "not a uri".into(),
        ..Default::default()
    };
    assert!(matches!(
        dialog_grpc::DialogClient::new(&cfg),
        Err(DialogError::InvalidConfig { .. })
    ));
}
