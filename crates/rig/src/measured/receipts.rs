//! The server's per-call receipts (`call_ledger.stats`) of a run, as the
//! interaction bench reads them: each turn's latency split
//! (`stats.turns[]`: `stt_us`, `dialog_us`, `tts_us`, `own_us` —
//! callgate's own share — and `total_us`, each present only when the
//! server measured it) and the barge-in counters (`stats.interaction`).
//!
//! How: one `SELECT … json_agg(…)` through `psql` (the PostgreSQL client
//! the throwaway cluster's binaries come with), bounded by
//! [`QUERY_TIMEOUT`]. The bench's `state_store::Store` has no query that
//! returns `stats`, and the bench reads, never writes, so a client process
//! keeps SQL out of the server's crates.
//!
//! What it never does: write, or take a missing field for a zero — a turn
//! without `own_us` is counted as untimed, a receipt without `turns` as
//! unmeasured.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

/// Bound on the one query (1,000 receipts are a few hundred kB of JSON).
const QUERY_TIMEOUT: Duration = Duration::from_secs(60);

/// One turn's latency split, microseconds (receipt `stats.turns[]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnTiming {
    pub turn: u64,
    pub stt_us: Option<u64>,
    pub dialog_us: Option<u64>,
    pub tts_us: Option<u64>,
    /// callgate's own share of the turn.
    pub own_us: Option<u64>,
    /// Speech end → the first frame out.
    pub total_us: Option<u64>,
}

/// What the bench reads from one receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Receipt {
    /// The Twilio `CallSid`, which the load records carry too.
    pub carrier_call_id: Option<String>,
    /// `stats.turns`; `None` when the receipt has none (not measured).
    pub turns: Option<Vec<TurnTiming>>,
    /// `stats.interaction.interruptions`.
    pub interruptions: Option<u64>,
    /// `stats.interaction.false_barge_ins`.
    pub false_barge_ins: Option<u64>,
}

impl Receipt {
    /// Reads the fields the bench uses from a ledger row's `stats`.
    pub fn from_stats(carrier_call_id: Option<String>, stats: &serde_json::Value) -> Receipt {
        let turns = stats
            .get("turns")
            .and_then(|t| serde_json::from_value(t.clone()).ok());
        let counter = |name: &str| stats["interaction"][name].as_u64();
        Receipt {
            carrier_call_id,
            turns,
            interruptions: counter("interruptions"),
            false_barge_ins: counter("false_barge_ins"),
        }
    }
}

/// One row of the query's JSON array.
#[derive(Debug, Deserialize)]
struct Row {
    carrier_call_id: Option<String>,
    stats: serde_json::Value,
}

/// The receipts of ledger rows owned by `instance` and admitted within
/// `[from, to]`, read from the database at `conninfo`.
///
/// # Errors
/// `psql` could not be run, failed, timed out or printed something else
/// than the JSON array asked for.
pub async fn read(
    conninfo: &str,
    instance: &str,
    from: SystemTime,
    to: SystemTime,
) -> anyhow::Result<Vec<Receipt>> {
    let sql = query(instance, from, to)?;
    parse(&psql(conninfo, &sql, "the receipts").await?)
}

/// Runs `sql` with `psql` (bounded by [`QUERY_TIMEOUT`]) and returns its
/// unaligned output; `what` names what was read, for the error.
pub async fn psql(conninfo: &str, sql: &str, what: &str) -> anyhow::Result<Vec<u8>> {
    let run = tokio::process::Command::new("psql")
        .args(["--no-psqlrc", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-d"])
        .arg(conninfo)
        .arg("-c")
        .arg(sql)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(QUERY_TIMEOUT, run)
        .await
        .context("psql did not answer in time")?
        .with_context(|| format!("running psql (the PostgreSQL client) to read {what}"))?;
    if !out.status.success() {
        bail!(
            "psql failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

/// `instance` checked to be a plain name (queries inline it) and the window
/// `from..to` in seconds since 1970.
pub fn window(instance: &str, from: SystemTime, to: SystemTime) -> anyhow::Result<(f64, f64)> {
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if instance.is_empty() || !instance.chars().all(plain) {
        bail!("instance name {instance:?} is not a plain name");
    }
    let secs = |t: SystemTime| -> anyhow::Result<f64> {
        Ok(t.duration_since(UNIX_EPOCH)
            .context("a time before 1970")?
            .as_secs_f64())
    };
    Ok((secs(from)?, secs(to)?))
}

/// The query.
fn query(instance: &str, from: SystemTime, to: SystemTime) -> anyhow::Result<String> {
    let (from, to) = window(instance, from, to)?;
    Ok(format!(
        "SELECT coalesce(json_agg(json_build_object('carrier_call_id', carrier_call_id, \
         'stats', stats)), '[]'::json) FROM call_ledger WHERE owner_instance = '{instance}' \
         AND admitted_at BETWEEN to_timestamp({from:.6}) AND to_timestamp({to:.6})"
    ))
}

fn parse(stdout: &[u8]) -> anyhow::Result<Vec<Receipt>> {
    let rows: Vec<Row> =
        serde_json::from_slice(stdout).context("psql's output is not the receipts' JSON")?;
    Ok(rows
        .into_iter()
        .map(|r| Receipt::from_stats(r.carrier_call_id, &r.stats))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipts_keep_measured_fields_and_leave_the_rest_absent() {
        let out = br#"[
          {"carrier_call_id":"CA1","stats":{"interaction":{"interruptions":1,"false_barge_ins":0},
            "turns":[{"turn":1,"stt_us":310000,"dialog_us":150000,"tts_us":90000,"own_us":812,"total_us":551000},
                     {"turn":2,"stt_us":300000}]}},
          {"carrier_call_id":null,"stats":{"interaction":{}}}
        ]"#;
        let r = parse(out).unwrap();
        assert_eq!(r.len(), 2);
        let turns = r[0].turns.as_ref().unwrap();
        assert_eq!(
            (turns[0].own_us, turns[0].total_us),
            (Some(812), Some(551_000))
        );
        assert_eq!((turns[1].turn, turns[1].own_us), (2, None));
        assert_eq!(
            (r[0].interruptions, r[0].false_barge_ins),
            (Some(1), Some(0))
        );
        assert_eq!(r[1].turns, None, "no turns: not measured, not empty");
        assert_eq!(r[1].interruptions, None);
        assert!(parse(b"ERROR").is_err());
    }

    #[test]
    fn the_query_inlines_only_a_plain_instance_name() {
        let t = UNIX_EPOCH + Duration::from_millis(1_500);
        let q = query("bench-42", t, t).unwrap();
        assert!(q.contains("owner_instance = 'bench-42'"), "{q}");
        assert!(q.contains("to_timestamp(1.500000)"), "{q}");
        assert!(query("x'; DROP TABLE call_ledger; --", t, t).is_err());
    }
}
