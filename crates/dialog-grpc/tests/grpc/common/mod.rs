//! Shared helpers: a dialog simulator on loopback, a client for it, and
//! deadline-bounded event collection.
// Each test binary uses a different subset; helpers panic like tests do.
#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use callgate_sim::dialog::{DialogSim, DialogSimConfig};
use dialog_grpc::{DialogClient, DialogConfig, DialogEvent, DialogEvents, DialogSession, TurnId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Generous: only a broken client or simulator waits this long.
pub const WAIT: Duration = Duration::from_secs(15);

pub struct Sim {
    pub sim: DialogSim,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    cancel: CancellationToken,
    servers: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Sim {
    /// Cancels both servers and waits (bounded) for them to return.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        for server in std::mem::take(&mut self.servers) {
            let joined = tokio::time::timeout(WAIT, server).await;
            joined.expect("server returned in time").unwrap().unwrap();
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Latencies at zero so tests run at machine speed.
pub fn fast() -> DialogSimConfig {
    DialogSimConfig {
        first_delta_latency_ms: 0,
        delta_interval_ms: 0,
        tool_delay_ms: 5,
        ..DialogSimConfig::default()
    }
}

pub async fn start_sim(cfg: DialogSimConfig) -> Sim {
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (grpc_addr, http_addr) = (grpc.local_addr().unwrap(), http.local_addr().unwrap());
    let sim = DialogSim::new(cfg);
    let cancel = CancellationToken::new();
    let servers = vec![
        tokio::spawn(sim.clone().serve_grpc(grpc, cancel.child_token())),
        tokio::spawn(sim.clone().serve_http(http, cancel.child_token())),
    ];
    Sim {
        sim,
        grpc: grpc_addr,
        http: http_addr,
        cancel,
        servers,
    }
}

pub fn client_for(addr: SocketAddr, open_timeout: Duration) -> DialogClient {
    DialogClient::new(&DialogConfig {
        endpoint: format!("http://{addr}"),
        connect_timeout: Duration::from_secs(5),
        open_timeout,
        channels: 2,
        ..DialogConfig::default()
    })
    .unwrap()
}

pub async fn next(events: &mut DialogEvents) -> DialogEvent {
    tokio::time::timeout(WAIT, events.recv())
        .await
        .expect("no dialog event in time")
        .expect("event stream ended")
}

/// Events up to and including `TurnComplete { turn }`; tool calls are
/// answered through the simulator's HTTP tools backend on the way.
pub async fn until_complete(
    session: &DialogSession,
    events: &mut DialogEvents,
    tools: Option<SocketAddr>,
    turn: u64,
) -> Vec<DialogEvent> {
    let mut seen = Vec::new();
    loop {
        let ev = next(events).await;
        if let (
            DialogEvent::ToolCall {
                id,
                name,
                arguments_json,
                ..
            },
            Some(http),
        ) = (&ev, tools)
        {
            let result = call_tool(http, name, arguments_json).await;
            session.tool_result(id, &result, false).unwrap();
        }
        let done = matches!(ev, DialogEvent::TurnComplete { turn: t } if t == TurnId(turn));
        seen.push(ev);
        if done {
            return seen;
        }
    }
}

/// The reply text of `turn` in `events`.
pub fn text(events: &[DialogEvent], turn: u64) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            DialogEvent::TextDelta { turn: t, text } if *t == TurnId(turn) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// `POST /tools/{name}` over plain HTTP/1.1; returns the JSON body.
pub async fn call_tool(http: SocketAddr, name: &str, body: &str) -> String {
    let mut s = TcpStream::connect(http).await.unwrap();
    let req = format!(
        "POST /tools/{name} HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut resp = String::new();
    tokio::time::timeout(WAIT, s.read_to_string(&mut resp))
        .await
        .unwrap()
        .unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    resp.split_once("\r\n\r\n").unwrap().1.to_owned()
}

/// Polls `cond` until it holds, failing after [`WAIT`].
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
