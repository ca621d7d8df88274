//! The auditor's callgate side: `GET /admin/audit`, the config-driven run
//! `callgate audit` uses, and the instance's declarations about itself
//! (`started` before it listens, `draining` when a drain begins) that the
//! auditor's drain check reads. The checks themselves are SQL in
//! `state_store::audit`.
//!
//! What it never does: repair a row, or let a declaration's write hold up
//! a drain — the `draining` row is written by a spawned, bounded task and a
//! failure is only logged.
//!
//! How to drive it: `callgate audit --config callgate.toml` (exit 0 clean,
//! 1 violations, 2 could not audit), or `GET /admin/audit` with the admin
//! token: `{"violations": [...], "checked_at": "<RFC 3339>"}`, 200 whether
//! or not anything was found.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use state_store::audit::{self, AuditParams, InstanceEventKind, Violation};
use tracing::warn;

use crate::app::App;
use crate::config::{Config, ms};

/// Bound on writing one instance declaration off the drain path.
const DECLARATION_TIMEOUT: Duration = Duration::from_secs(5);

/// How many times the `draining` declaration is tried (about 36 s in all).
const DRAINING_ATTEMPTS: u32 = 6;

/// What a call may take beyond `call.max_duration_s` before it is "open
/// too long": setup (the providers' and the ledger's open deadlines) and
/// the goodbye prompt that ends a call at its maximum (the same allowance
/// `drain` gives it), on top of the configured final-mark grace and
/// teardown bound.
const SETUP_AND_GOODBYE: Duration = Duration::from_secs(20);

/// Beyond twice the teardown bound, before an open row whose disconnect
/// was observed counts as still holding its work.
const DISCONNECT_SLACK: Duration = Duration::from_secs(5);

/// The audit's bounds, from the configuration.
#[must_use]
pub fn params(cfg: &Config, now: SystemTime) -> AuditParams {
    let teardown = ms(cfg.call.teardown_timeout_ms);
    let max_call = Duration::from_secs(cfg.call.max_duration_s)
        + SETUP_AND_GOODBYE
        + ms(cfg.call.final_mark_grace_ms)
        + teardown;
    AuditParams::new(max_call, teardown * 2 + DISCONNECT_SLACK, now)
}

/// `callgate audit`'s work: connects with the configured database
/// settings (one connection, no migration) and audits the whole ledger.
///
/// # Errors
/// Connecting or any check failing.
pub async fn audit_with_config(cfg: &Config) -> anyhow::Result<Vec<Violation>> {
    let mut store_cfg = cfg.store_config();
    store_cfg.pool_size = 1;
    let store = state_store::Store::connect(store_cfg).await?;
    Ok(audit::run(&store, params(cfg, SystemTime::now())).await?)
}

/// The CLI's text: one line per violation, or `0 violations`.
#[must_use]
pub fn render_text(violations: &[Violation]) -> String {
    if violations.is_empty() {
        return "0 violations\n".to_owned();
    }
    let mut out = String::new();
    for v in violations {
        out.push_str(&v.to_string());
        out.push('\n');
    }
    let n = violations.len();
    out.push_str(&format!("{n} violation{}\n", if n == 1 { "" } else { "s" }));
    out
}

/// `{violations: [...], checked_at}`.
#[must_use]
pub fn render_json(violations: &[Violation], checked_at: SystemTime) -> serde_json::Value {
    serde_json::json!({
        "violations": violations.iter().map(Violation::to_json).collect::<Vec<_>>(),
        "checked_at": rfc3339(checked_at),
    })
}

/// `GET /admin/audit`: 200 with the report, found or not; 503 when the
/// audit could not run.
pub async fn get_audit(State(app): State<Arc<App>>) -> Response {
    let now = SystemTime::now();
    match audit::run(&app.call.store, params(&app.cfg(), now)).await {
        Ok(found) => Json(render_json(&found, now)).into_response(),
        Err(e) => {
            warn!(error = %e, "audit failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("audit failed: {e}\n"),
            )
                .into_response()
        }
    }
}

/// Records `started` before the server listens. Awaited: a server that
/// cannot write it would leave an earlier `draining` row in force and
/// every later admission would read as a violation.
///
/// # Errors
/// The write failing or taking longer than its bound.
pub async fn record_started(
    store: &state_store::Store,
    detail: serde_json::Value,
) -> anyhow::Result<()> {
    let write = store.record_instance_event(InstanceEventKind::Started, SystemTime::now(), detail);
    tokio::time::timeout(DECLARATION_TIMEOUT, write)
        .await
        .map_err(|_| anyhow::anyhow!("recording the instance's start timed out"))??;
    Ok(())
}

/// Records `draining`, stamped now, from a spawned task; never waits for
/// it. Each attempt is bounded by [`DECLARATION_TIMEOUT`]; a failed one is
/// retried (the write is idempotent) up to [`DRAINING_ATTEMPTS`] times, so a
/// database busy at the moment of the drain does not lose the declaration.
/// Called after admission closed, so every call admitted before the stamp
/// was admitted legally.
pub fn record_draining(app: &App, detail: serde_json::Value) {
    let at = SystemTime::now();
    let store = app.call.store.clone();
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        warn!("no runtime: the drain's start is not recorded in instance_events");
        return;
    };
    rt.spawn(async move {
        for attempt in 1..=DRAINING_ATTEMPTS {
            let write = store.record_instance_event(InstanceEventKind::Draining, at, detail.clone());
            match tokio::time::timeout(DECLARATION_TIMEOUT, write).await {
                Ok(Ok(())) => return,
                Ok(Err(e)) => warn!(attempt, error = %e, "could not record the drain in instance_events"),
                Err(_) => warn!(attempt, "recording the drain in instance_events timed out"),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        warn!("the drain's start is not recorded in instance_events: the database refused every attempt");
    });
}

/// Records `undrained`, stamped now, and waits for it (bounded): admission
/// reopens only once the declaration is in, so the auditor never sees an
/// admission its instance had not declared legal.
///
/// # Errors
/// A short reason when the write failed or timed out (the detail is logged).
pub async fn record_undrained(app: &App, detail: serde_json::Value) -> Result<(), &'static str> {
    let write = app.call.store.record_instance_event(
        InstanceEventKind::Undrained,
        SystemTime::now(),
        detail,
    );
    match tokio::time::timeout(DECLARATION_TIMEOUT, write).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => {
            warn!(error = %e, "could not record the end of the drain in instance_events");
            Err("database error")
        }
        Err(_) => {
            warn!("recording the end of the drain in instance_events timed out");
            Err("timed out")
        }
    }
}

/// UTC, second precision (`2026-05-09T07:29:33Z`, the fraction
/// truncated); instants before 1970 print as the epoch.
fn rfc3339(t: SystemTime) -> String {
    // A clock past jiff's range (year 9999) is broken: clamp to its end.
    let ts =
        jiff::Timestamp::try_from(t.max(SystemTime::UNIX_EPOCH)).unwrap_or(jiff::Timestamp::MAX);
    format!("{ts:.0}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use state_store::CallId;
    use state_store::audit::ViolationKind;

    #[test]
    fn timestamps_render_as_rfc3339_utc() {
        let at = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(rfc3339(at(0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(at(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(at(1_778_311_773)), "2026-05-09T07:29:33Z");
        assert_eq!(rfc3339(at(4_107_542_399)), "2100-02-28T23:59:59Z");
        // The fraction is truncated, not rounded; before 1970 is the epoch.
        let just_before = at(1) - Duration::from_nanos(1);
        assert_eq!(rfc3339(just_before), "1970-01-01T00:00:00Z");
        let early = SystemTime::UNIX_EPOCH - Duration::from_secs(86_400);
        assert_eq!(rfc3339(early), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn the_bounds_follow_the_configuration() {
        let mut cfg = Config::default();
        cfg.call.max_duration_s = 600;
        cfg.call.teardown_timeout_ms = 3_000;
        cfg.call.final_mark_grace_ms = 2_000;
        let p = params(&cfg, SystemTime::UNIX_EPOCH);
        assert_eq!(p.max_call_duration, Duration::from_secs(600 + 20 + 2 + 3));
        assert_eq!(p.disconnect_grace, Duration::from_secs(11));
    }

    #[test]
    fn a_clean_ledger_says_zero_and_violations_are_listed_with_their_session() {
        assert_eq!(render_text(&[]), "0 violations\n");
        let id = CallId::new_random();
        let v = Violation {
            kind: ViolationKind::TwoLiveOwners,
            call_id: Some(id),
            instance: "cg-2".into(),
            detail: serde_json::json!({}),
        };
        let text = render_text(std::slice::from_ref(&v));
        assert_eq!(
            text,
            format!("two_live_owners call={id} instance=cg-2 {{}}\n1 violation\n")
        );
        let json = render_json(&[v], SystemTime::UNIX_EPOCH);
        assert_eq!(json["violations"][0]["call_id"], id.to_string());
        assert_eq!(json["checked_at"], "1970-01-01T00:00:00Z");
    }
}
