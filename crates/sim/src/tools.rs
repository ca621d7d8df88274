//! The HTTP tools backend the dialog bot's tool calls are executed against
//! (`POST /tools/{name}`, JSON object body, answered after `tool_delay_ms`).
//!
//! - `check_availability` `{"party_size":4,"time":"19:30"}` →
//!   `{"available":true,"party_size":4,"time":"19:30"}` (unavailable above
//!   12 people);
//! - `book_table` `{"name":..,"party_size":..,"time":..}` →
//!   `{"confirmation":"LUI-1234"}`;
//! - an unknown tool → 404, a body that is not a JSON object or lacks an
//!   argument → 400, both with `{"error": ..}`.
//!
//! It counts requests started, completed and *cancelled*: a request whose
//! client went away before the answer drops its [`ToolRequest`] guard
//! unfinished. Tests use that to prove callgate cancels owned tool work when
//! a call ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tracing::debug;

use crate::dialog::{DialogSimConfig, read_config};

/// Parties above this size are never available.
pub const MAX_PARTY: u64 = 12;

/// Tool request counters.
#[derive(Debug, Default)]
pub struct ToolStats {
    started: AtomicU64,
    completed: AtomicU64,
    cancelled: AtomicU64,
    in_flight: AtomicU64,
    rejected: AtomicU64,
}

/// A snapshot, served inside the dialog simulator's `GET /stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolStatsSnapshot {
    /// Valid requests accepted (the delay started).
    pub started: u64,
    /// Requests answered.
    pub completed: u64,
    /// Requests whose client went away before the answer.
    pub cancelled: u64,
    /// Requests waiting for their answer right now.
    pub in_flight: u64,
    /// Requests refused at once (unknown tool, bad body: 404/400).
    pub rejected: u64,
}

impl ToolStats {
    /// Counts a started request; the guard counts how it ended.
    pub fn start(self: &Arc<Self>) -> ToolRequest {
        self.started.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        ToolRequest {
            stats: Arc::clone(self),
            completed: false,
        }
    }

    /// Current counts.
    pub fn snapshot(&self) -> ToolStatsSnapshot {
        ToolStatsSnapshot {
            started: self.started.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Acquire),
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }
}

/// One tool request in flight. Dropped without [`ToolRequest::complete`]
/// (the handler future was dropped because the client disconnected), it
/// counts as cancelled.
#[must_use = "dropping the guard counts the request as cancelled"]
#[derive(Debug)]
pub struct ToolRequest {
    stats: Arc<ToolStats>,
    completed: bool,
}

impl ToolRequest {
    /// The answer is being sent.
    pub fn complete(mut self) {
        self.completed = true;
        self.stats.completed.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for ToolRequest {
    fn drop(&mut self) {
        self.stats.in_flight.fetch_sub(1, Ordering::AcqRel);
        if !self.completed {
            self.stats.cancelled.fetch_add(1, Ordering::Relaxed);
            debug!("tool request cancelled by the client");
        }
    }
}

/// Router state: counters and the simulator config (for `tool_delay_ms`).
#[derive(Debug, Clone)]
pub struct ToolsBackend {
    stats: Arc<ToolStats>,
    config: Arc<RwLock<DialogSimConfig>>,
}

impl ToolsBackend {
    /// A backend counting into `stats`, delayed by `config.tool_delay_ms`.
    pub fn new(stats: Arc<ToolStats>, config: Arc<RwLock<DialogSimConfig>>) -> Self {
        ToolsBackend { stats, config }
    }
}

/// `POST /tools/{name}`.
pub fn router(backend: ToolsBackend) -> axum::Router {
    axum::Router::new()
        .route("/tools/{name}", post(call_tool))
        .with_state(backend)
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// 404.
    UnknownTool(String),
    /// 400.
    BadRequest(String),
}

impl IntoResponse for ToolError {
    fn into_response(self) -> Response {
        let (status, error) = match self {
            ToolError::UnknownTool(name) => {
                (StatusCode::NOT_FOUND, format!("unknown tool {name:?}"))
            }
            ToolError::BadRequest(why) => (StatusCode::BAD_REQUEST, why),
        };
        (status, Json(json!({ "error": error }))).into_response()
    }
}

async fn call_tool(
    State(backend): State<ToolsBackend>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let answer = match prepare(&name, &body) {
        Ok(answer) => answer,
        Err(e) => {
            backend.stats.rejected.fetch_add(1, Ordering::Relaxed);
            return e.into_response();
        }
    };
    let request = backend.stats.start();
    let delay = Duration::from_millis(read_config(&backend.config).tool_delay_ms);
    // If the client disconnects during this sleep, hyper drops this future
    // and `request` counts as cancelled.
    tokio::time::sleep(delay).await;
    request.complete();
    Json(answer).into_response()
}

/// Validates a call and computes its answer (sent after the delay).
pub fn prepare(name: &str, body: &[u8]) -> Result<Value, ToolError> {
    let args: Map<String, Value> = serde_json::from_slice(body)
        .map_err(|e| ToolError::BadRequest(format!("body must be a JSON object: {e}")))?;
    match name {
        "check_availability" => check_availability(&args),
        "book_table" => book_table(&args),
        other => Err(ToolError::UnknownTool(other.to_owned())),
    }
}

fn check_availability(args: &Map<String, Value>) -> Result<Value, ToolError> {
    let party_size = party_size(args)?;
    let time = string_arg(args, "time")?;
    Ok(json!({ "available": party_size <= MAX_PARTY, "party_size": party_size, "time": time }))
}

fn book_table(args: &Map<String, Value>) -> Result<Value, ToolError> {
    party_size(args)?;
    string_arg(args, "name")?;
    string_arg(args, "time")?;
    let code: u32 = rand::rng().random_range(0..10_000);
    Ok(json!({ "confirmation": format!("LUI-{code:04}") }))
}

fn party_size(args: &Map<String, Value>) -> Result<u64, ToolError> {
    args.get("party_size")
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
        .ok_or_else(|| ToolError::BadRequest("party_size must be a positive integer".to_owned()))
}

fn string_arg<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, ToolError> {
    args.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ToolError::BadRequest(format!("{key} must be a non-empty string")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    #[test]
    fn answers_and_refusals() {
        let v = prepare("check_availability", br#"{"party_size":4,"time":"19:30"}"#).unwrap();
        assert_eq!(
            v,
            json!({"available": true, "party_size": 4, "time": "19:30"})
        );
        let v = prepare("check_availability", br#"{"party_size":13,"time":"19:30"}"#).unwrap();
        assert_eq!(v["available"], json!(false));
        let v = prepare(
            "book_table",
            br#"{"name":"Alex","party_size":4,"time":"19:30"}"#,
        )
        .unwrap();
        let code = v["confirmation"].as_str().unwrap();
        assert!(code.starts_with("LUI-") && code.len() == 8, "{code}");
        assert!(code[4..].bytes().all(|b| b.is_ascii_digit()));
        assert!(matches!(
            prepare("launch", b"{}"),
            Err(ToolError::UnknownTool(_))
        ));
        assert!(matches!(
            prepare("book_table", b"{not json"),
            Err(ToolError::BadRequest(_))
        ));
        assert!(matches!(
            prepare("book_table", b"[1]"),
            Err(ToolError::BadRequest(_))
        ));
        assert!(matches!(
            prepare("book_table", br#"{"name":"A"}"#),
            Err(ToolError::BadRequest(_))
        ));
    }

    async fn serve(delay_ms: u64) -> (std::net::SocketAddr, Arc<ToolStats>) {
        let stats = Arc::new(ToolStats::default());
        let cfg = DialogSimConfig {
            tool_delay_ms: delay_ms,
            ..DialogSimConfig::default()
        };
        let app = router(ToolsBackend::new(
            Arc::clone(&stats),
            Arc::new(RwLock::new(cfg)),
        ));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (addr, stats)
    }

    async fn post(addr: std::net::SocketAddr, path: &str, body: &str) -> TcpStream {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        s
    }

    async fn response(mut s: TcpStream) -> String {
        let mut out = String::new();
        let read = s.read_to_string(&mut out);
        tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .unwrap()
            .unwrap();
        out
    }

    async fn poll(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn http_statuses_and_counts() {
        let (addr, stats) = serve(10).await;
        let ok = response(
            post(
                addr,
                "/tools/check_availability",
                r#"{"party_size":4,"time":"19:30"}"#,
            )
            .await,
        )
        .await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(
            ok.ends_with(r#"{"available":true,"party_size":4,"time":"19:30"}"#),
            "{ok}"
        );
        let missing = response(post(addr, "/tools/launch", "{}").await).await;
        assert!(
            missing.starts_with("HTTP/1.1 404") && missing.contains("error"),
            "{missing}"
        );
        let bad = response(post(addr, "/tools/book_table", "{oops").await).await;
        assert!(
            bad.starts_with("HTTP/1.1 400") && bad.contains("error"),
            "{bad}"
        );
        let snap = stats.snapshot();
        assert_eq!(
            (snap.started, snap.completed, snap.cancelled, snap.rejected),
            (1, 1, 0, 2)
        );
    }

    #[tokio::test]
    async fn client_going_away_counts_as_cancelled() {
        let (addr, stats) = serve(60_000).await;
        let body = r#"{"name":"Alex","party_size":4,"time":"19:30"}"#;
        let socket = post(addr, "/tools/book_table", body).await;
        poll("the request to start", || stats.snapshot().started == 1).await;
        drop(socket);
        poll("the request to be cancelled", || {
            stats.snapshot().cancelled == 1
        })
        .await;
        let snap = stats.snapshot();
        assert_eq!((snap.completed, snap.in_flight), (0, 0));
    }
}
