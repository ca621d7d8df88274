//! Tool calls requested by the dialog service, run as tasks owned by the call.
//!
//! The runner executes; the policy lives in the call core (`call::core`):
//! which tools an interruption cancels (non-privileged ones of that turn),
//! and that everything is cancelled when the call ends — nothing outlives
//! its call. A result that arrives for a cancelled tool is dropped and
//! counted as stale.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use dialog_grpc::{ToolCallId, TurnId};
use tokio::task::{AbortHandle, JoinSet};

use crate::call::core::ToolOutcome;
use crate::metrics as m;
use crate::reconcile::pressure::PhaseGauge;

/// Delegation counters for the ledger.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct ToolStats {
    pub started: u64,
    pub completed: u64,
    pub failed: u64,
    /// Cancelled while running, for any reason (an interruption, the end).
    pub cancelled: u64,
    /// Of `cancelled`: still running when the call ended (its caller was
    /// gone), so cancelled by the ending rather than by the conversation.
    pub orphaned: u64,
    /// Results that came back for a tool already cancelled, dropped.
    #[serde(rename = "stale_results_dropped")]
    pub stale: u64,
    pub refused: u64,
}

struct Running {
    id: ToolCallId,
    abort: AbortHandle,
}

/// The call's tool tasks.
pub struct ToolRunner {
    http: reqwest::Client,
    base_url: String,
    timeout: Duration,
    max_in_flight: usize,
    tasks: JoinSet<ToolOutcome>,
    running: HashMap<ToolCallId, Running>,
    pub stats: ToolStats,
    /// The call's `delegating` share: on while `running` is not empty.
    delegating: PhaseGauge,
}

impl ToolRunner {
    pub fn new(
        http: reqwest::Client,
        base_url: String,
        timeout: Duration,
        max_in_flight: usize,
    ) -> Self {
        ToolRunner {
            http,
            base_url,
            timeout,
            max_in_flight,
            tasks: JoinSet::new(),
            running: HashMap::new(),
            stats: ToolStats::default(),
            delegating: PhaseGauge::delegating(None),
        }
    }

    /// Counts this call in the app's `delegating` gauge while tools run.
    pub fn with_gauge(mut self, gauge: PhaseGauge) -> Self {
        self.delegating = gauge;
        self.sync_gauge();
        self
    }

    /// Whether the call counts as delegating now.
    pub fn is_delegating(&self) -> bool {
        self.delegating.is_on()
    }

    /// Called after every change to `running`.
    fn sync_gauge(&mut self) {
        self.delegating.set(!self.running.is_empty());
    }

    /// Tools running now.
    pub fn in_flight(&self) -> usize {
        self.running.len()
    }

    /// Starts a tool call. Returns an immediate error outcome when the call
    /// already has `max_in_flight` tools running (the dialog service gets a
    /// clear error instead of an unbounded pile of work).
    pub fn start(
        &mut self,
        id: ToolCallId,
        turn: TurnId,
        name: &str,
        args_json: String,
    ) -> Option<ToolOutcome> {
        if self.running.len() >= self.max_in_flight || !valid_tool_name(name) {
            self.stats.refused += 1;
            metrics::counter!(m::TOOL_CALLS, "result" => "refused").increment(1);
            let why = if valid_tool_name(name) {
                "too many tool calls in flight"
            } else {
                "invalid tool name"
            };
            return Some(ToolOutcome {
                id,
                turn,
                result_json: serde_json::json!({ "error": why }).to_string(),
                is_error: true,
            });
        }
        self.stats.started += 1;
        let url = format!("{}/{}", self.base_url.trim_end_matches('/'), name);
        let fut = call_tool(
            self.http.clone(),
            url,
            args_json,
            self.timeout,
            id.clone(),
            turn,
        );
        let abort = self.tasks.spawn(fut);
        self.running.insert(
            id.clone(),
            Running {
                id: id.clone(),
                abort,
            },
        );
        self.sync_gauge();
        None
    }

    /// The next finished tool; pending forever when none is running, so it
    /// can sit in a `select!`.
    pub async fn next(&mut self) -> ToolOutcome {
        loop {
            match self.tasks.join_next().await {
                None => std::future::pending::<()>().await,
                Some(Err(_cancelled_or_panicked)) => continue,
                Some(Ok(outcome)) => {
                    let known = self.running.remove(&outcome.id).is_some();
                    self.sync_gauge();
                    if !known {
                        self.stats.stale += 1;
                        metrics::counter!(m::STALE_DROPPED, "kind" => "tool_result").increment(1);
                        continue;
                    }
                    let label = if outcome.is_error { "error" } else { "ok" };
                    if outcome.is_error {
                        self.stats.failed += 1;
                    } else {
                        self.stats.completed += 1;
                    }
                    metrics::counter!(m::TOOL_CALLS, "result" => label).increment(1);
                    return outcome;
                }
            }
        }
    }

    /// Cancels one tool call (the call core decides which: see
    /// `call::core`'s tool policy). Its result, should it still arrive, is
    /// dropped and counted as stale.
    pub fn cancel(&mut self, id: &ToolCallId) {
        self.cancel_where(|r| &r.id == id, false);
    }

    /// Cancels one tool call the ended call left behind (counted orphaned).
    pub fn orphan(&mut self, id: &ToolCallId) {
        self.cancel_where(|r| &r.id == id, true);
    }

    /// The call is ending: cancel everything (each counted orphaned).
    pub fn cancel_all(&mut self) {
        self.cancel_where(|_| true, true);
        self.tasks.abort_all();
    }

    fn cancel_where(&mut self, pred: impl Fn(&Running) -> bool, orphaned: bool) {
        let ids: Vec<ToolCallId> = self
            .running
            .iter()
            .filter(|(_, r)| pred(r))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            if let Some(r) = self.running.remove(&id) {
                r.abort.abort();
                self.stats.cancelled += 1;
                self.stats.orphaned += u64::from(orphaned);
                metrics::counter!(m::TOOL_CALLS, "result" => "cancelled").increment(1);
            }
        }
        self.sync_gauge();
    }
}

/// Tool names become URL path segments: letters, digits, `_` and `-` only.
fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

async fn call_tool(
    http: reqwest::Client,
    url: String,
    args: String,
    timeout: Duration,
    id: ToolCallId,
    turn: TurnId,
) -> ToolOutcome {
    let started = Instant::now();
    let res = http
        .post(&url)
        .header("content-type", "application/json")
        .body(args)
        .timeout(timeout)
        .send()
        .await;
    let (result_json, is_error) = match res {
        Err(e) if e.is_timeout() => (
            error_json(&format!("tool timed out after {} ms", timeout.as_millis())),
            true,
        ),
        Err(e) => (error_json(&format!("tool unreachable: {e}")), true),
        Ok(resp) => {
            let status = resp.status();
            match resp.text().await {
                Ok(body) if status.is_success() => (body, false),
                Ok(body) => (
                    error_json(&format!(
                        "tool answered {status}: {}",
                        crate::text::prefix_within(&body, 200)
                    )),
                    true,
                ),
                Err(e) => (error_json(&format!("tool body unreadable: {e}")), true),
            }
        }
    };
    metrics::histogram!(m::TOOL_SECONDS).record(started.elapsed().as_secs_f64());
    ToolOutcome {
        id,
        turn,
        result_json,
        is_error,
    }
}

fn error_json(msg: &str) -> String {
    serde_json::json!({ "error": msg }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_are_path_safe() {
        assert!(valid_tool_name("check_availability"));
        assert!(!valid_tool_name("../admin"));
        assert!(!valid_tool_name(""));
    }

    #[tokio::test]
    async fn a_full_runner_refuses_and_cancel_all_counts() {
        crate::ensure_tls_provider();
        let mut r = ToolRunner::new(
            reqwest::Client::new(),
            "http://127.0.0.1:9/tools".into(),
            Duration::from_secs(5),
            1,
        );
        assert!(!r.is_delegating());
        assert!(
            r.start(ToolCallId("a".into()), TurnId(1), "slow", "{}".into())
                .is_none()
        );
        assert!(r.is_delegating(), "one tool running");
        let refused = r
            .start(ToolCallId("b".into()), TurnId(1), "slow", "{}".into())
            .unwrap();
        assert!(refused.is_error);
        r.cancel(&ToolCallId("b".into()));
        assert_eq!(r.in_flight(), 1, "a refused call was never running");
        assert!(r.is_delegating(), "a refusal leaves the running tool");
        r.cancel_all();
        assert!(!r.is_delegating(), "nothing runs after cancel_all");
        assert_eq!(
            (r.in_flight(), r.stats.cancelled, r.stats.refused),
            (0, 1, 1)
        );
        assert_eq!(r.stats.orphaned, 1, "cancelled by the ending");
        let json = serde_json::to_value(r.stats).unwrap();
        assert_eq!(json["stale_results_dropped"], 0);
        assert_eq!(json["orphaned"], 1);
        // An interruption's cancel is not an orphan.
        assert!(
            r.start(ToolCallId("c".into()), TurnId(2), "slow", "{}".into())
                .is_none()
        );
        r.cancel(&ToolCallId("c".into()));
        assert_eq!((r.stats.cancelled, r.stats.orphaned), (2, 1));
    }
}
