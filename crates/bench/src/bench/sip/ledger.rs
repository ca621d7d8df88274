//! What the server's database says of one run: every ledger row admitted
//! and every refusal recorded in the run's window, tallied for the run's
//! ingress — served and closed (`cleanup_status = 'completed'`), refused,
//! left open, of another ingress — with the mean call length (admission to
//! close), bot turns per call and, for SIP, the receipts' RTP figures.
//!
//! How: one `SELECT json_build_object(…)` through `psql`, as the
//! interaction bench reads its receipts (`receipts.rs`): the bench only
//! reads, and the server's crates have no query returning these columns.
//! The tally is pure and tested on JSON.

use std::collections::BTreeMap;
use std::time::SystemTime;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::row::Ingress;

/// The receipts' RTP receive figures (`stats.media.transport`), over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct RtpTally {
    /// Calls whose receipt carries RTP figures.
    pub calls: usize,
    pub packets_in: u64,
    /// Packets that came after their playout time.
    pub late: u64,
    pub lost: u64,
    /// Frames played as concealment: nothing had arrived for them.
    pub concealed: u64,
    /// The highest per-call maximum of the RFC 3550 jitter estimate.
    pub max_jitter_ms: f64,
}

/// A run as the server recorded it, for one ingress.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Tally {
    /// Ledger rows of the ingress closed with cleanup completed, not a
    /// setup failure: the calls served.
    pub served: usize,
    /// Refusal rows, and ledger rows closed as `setup_failed:*`.
    pub refused: usize,
    /// Ledger rows of the ingress still pending, or whose cleanup failed.
    pub not_closed: usize,
    /// Ledger rows of another ingress (none expected: runs never overlap).
    pub other_ingress: usize,
    /// `end_reason` of the served calls.
    pub end_reasons: BTreeMap<String, usize>,
    /// Mean of admission → cleanup completed over the served calls, s.
    pub mean_call_s: f64,
    /// Mean bot turns timed per served call (`stats.turns`).
    pub mean_turns: f64,
    pub rtp: RtpTally,
}

/// One ledger row, as the query returns it.
#[derive(Debug, Deserialize)]
struct LedgerRow {
    ingress: String,
    cleanup_status: String,
    end_reason: Option<String>,
    /// Admission → cleanup completed, s; `None` while open.
    secs: Option<f64>,
    turns: Option<u64>,
    rtp: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct Rows {
    ledger: Vec<LedgerRow>,
    /// Refusal rows of any ingress (none is expected of either).
    refused: usize,
}

impl Tally {
    /// Tallies the query's rows for calls of `ingress`.
    fn of(rows: Rows, ingress: Ingress) -> Tally {
        let mut t = Tally {
            refused: rows.refused,
            ..Tally::default()
        };
        let (mut secs, mut turns) = (0.0, 0);
        for row in rows.ledger {
            let setup_failed = row
                .end_reason
                .as_deref()
                .is_some_and(|r| r.starts_with("setup_failed"));
            if row.ingress != ingress.label() {
                t.other_ingress += 1;
            } else if setup_failed {
                t.refused += 1;
            } else if row.cleanup_status != "completed" {
                t.not_closed += 1;
            } else {
                t.served += 1;
                secs += row.secs.unwrap_or(0.0);
                turns += row.turns.unwrap_or(0);
                let reason = row.end_reason.unwrap_or_else(|| "none".into());
                *t.end_reasons.entry(reason).or_default() += 1;
                if let Some(rtp) = &row.rtp {
                    t.rtp.add(rtp);
                }
            }
        }
        if t.served > 0 {
            t.mean_call_s = secs / t.served as f64;
            t.mean_turns = turns as f64 / t.served as f64;
        }
        t
    }
}

impl RtpTally {
    fn add(&mut self, rtp: &serde_json::Value) {
        let n = |k: &str| rtp[k].as_u64().unwrap_or(0);
        self.calls += 1;
        self.packets_in += n("packets_in");
        self.late += n("late");
        self.lost += n("lost");
        self.concealed += n("concealed");
        let jitter = rtp["max_jitter_ms"].as_f64().unwrap_or(0.0);
        self.max_jitter_ms = self.max_jitter_ms.max(jitter);
    }
}

/// The server's rows of `instance` within `[from, to]`, tallied for
/// `ingress`, read from the database at `conninfo`.
///
/// # Errors
/// `psql` could not be run, failed, timed out or printed something else
/// than the JSON asked for.
pub async fn read(
    conninfo: &str,
    instance: &str,
    ingress: Ingress,
    from: SystemTime,
    to: SystemTime,
) -> anyhow::Result<Tally> {
    let sql = query(instance, from, to)?;
    let out = callgate_rig::measured::receipts::psql(conninfo, &sql, "the server's rows").await?;
    parse(&out, ingress)
}

/// The query (`instance` checked by `receipts::window`).
fn query(instance: &str, from: SystemTime, to: SystemTime) -> anyhow::Result<String> {
    let (from, to) = callgate_rig::measured::receipts::window(instance, from, to)?;
    Ok(format!(
        "SELECT json_build_object(\
           'ledger', (SELECT coalesce(json_agg(json_build_object(\
             'ingress', ingress, 'cleanup_status', cleanup_status, 'end_reason', end_reason, \
             'secs', extract(epoch FROM cleanup_completed_at - admitted_at), \
             'turns', CASE WHEN jsonb_typeof(stats->'turns') = 'array' \
                      THEN jsonb_array_length(stats->'turns') END, \
             'rtp', stats->'media'->'transport')), '[]'::json) \
             FROM call_ledger WHERE owner_instance = '{instance}' \
             AND admitted_at BETWEEN to_timestamp({from:.6}) AND to_timestamp({to:.6})), \
           'refused', (SELECT count(*) FROM admission_rejections WHERE instance = '{instance}' \
             AND at BETWEEN to_timestamp({from:.6}) AND to_timestamp({to:.6})))"
    ))
}

fn parse(stdout: &[u8], ingress: Ingress) -> anyhow::Result<Tally> {
    let rows: Rows =
        serde_json::from_slice(stdout).context("psql's output is not the rows' JSON")?;
    Ok(Tally::of(rows, ingress))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn only_completed_calls_of_the_run_s_ingress_are_served() {
        let out = br#"{"ledger":[
          {"ingress":"sip","cleanup_status":"completed","end_reason":"caller_hangup","secs":18.0,
           "turns":2,"rtp":{"packets_in":900,"late":1,"lost":0,"concealed":3,"max_jitter_ms":2.5}},
          {"ingress":"sip","cleanup_status":"completed","end_reason":"caller_hangup","secs":20.0,
           "turns":1,"rtp":{"packets_in":1000,"late":0,"lost":2,"concealed":0,"max_jitter_ms":4.0}},
          {"ingress":"sip","cleanup_status":"pending","end_reason":null,"secs":null,"turns":null,"rtp":null},
          {"ingress":"sip","cleanup_status":"completed","end_reason":"setup_failed:stt","secs":0.1,
           "turns":null,"rtp":null},
          {"ingress":"twilio","cleanup_status":"completed","end_reason":"caller_hangup","secs":9.0,
           "turns":3,"rtp":null}
        ],"refused":1}"#;
        let t = parse(out, Ingress::Sip).unwrap();
        assert_eq!(
            (t.served, t.refused, t.not_closed, t.other_ingress),
            (2, 2, 1, 1)
        );
        assert_eq!(t.end_reasons.get("caller_hangup"), Some(&2));
        assert!((t.mean_call_s - 19.0).abs() < 1e-9);
        assert!((t.mean_turns - 1.5).abs() < 1e-9);
        assert_eq!(
            (t.rtp.calls, t.rtp.packets_in, t.rtp.late, t.rtp.lost),
            (2, 1_900, 1, 2)
        );
        assert_eq!((t.rtp.concealed, t.rtp.max_jitter_ms), (3, 4.0));
        let empty = parse(br#"{"ledger":[],"refused":0}"#, Ingress::Twilio).unwrap();
        assert_eq!(empty, Tally::default());
        assert!(parse(b"ERROR", Ingress::Sip).is_err());
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
