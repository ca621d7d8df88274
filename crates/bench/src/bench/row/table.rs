//! The run table: its header, one line per run and the reasons line under
//! it, in fixed-width columns.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use callgate_load::Percentiles;

use super::RunRow;

fn pair(p: &Percentiles) -> String {
    match (p.p50, p.p99) {
        (Some(a), Some(b)) => format!("{a}/{b}"),
        _ => "-".to_string(),
    }
}

pub(super) fn signed_pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{:+.1}%", v * 100.0))
}

/// The header of [`format_row`]'s columns.
pub fn table_header() -> String {
    format!(
        "{:>7} {:>6} {:>5} {:>6} {:>4} {:>4} {:>4} {:>8} {:>5} {:>6} {:>6} {:>5} {:>11} {:>11} {:>11} {:>7} {:>7} {:>9} {:>7} {:>7} {:>6} {:>6} {:>6} {:>5}",
        "offered",
        "over s",
        "load×",
        "served",
        "xfer",
        "wdog",
        "cut",
        "rejected",
        "heard",
        "failed",
        "silent",
        "apol",
        "adm wait",
        "rej wait",
        "reply",
        "vs base",
        "rej p99",
        "peak a/q",
        "srv cpu",
        "srv MiB",
        "sims",
        "load",
        "lag ms",
        "valid"
    )
}

/// One table line; the waits and latencies are `p50/p99` in ms.
pub fn format_row(r: &RunRow) -> String {
    let res = &r.resources;
    let vs = if r.reply_p99_vs_baseline.is_none() && r.reply_latency_ms.p99.is_some() {
        "base".to_string()
    } else {
        signed_pct(r.reply_p99_vs_baseline)
    };
    format!(
        "{:>7} {:>6.1} {:>5} {:>6} {:>4} {:>4} {:>4} {:>8} {:>5} {:>6} {:>6} {:>5} {:>11} {:>11} {:>11} {:>7} {:>7} {:>9} {:>7.1} {:>7.1} {:>6.1} {:>6.1} {:>6} {:>5}",
        r.offered,
        r.arrival_s,
        format!("{:.1}×", r.overload),
        r.served,
        r.transferred,
        r.watchdog_transferred,
        r.cut_short,
        r.rejected,
        r.rejected_prompt_heard,
        r.failed,
        r.silent,
        r.apologies_heard,
        pair(&r.admission_wait_admitted_ms),
        pair(&r.admission_wait_rejected_ms),
        pair(&r.reply_latency_ms),
        vs,
        r.time_to_rejection_ms
            .p99
            .map_or_else(|| "-".to_string(), |v| v.to_string()),
        format!("{}/{}", res.peaks.active, res.peaks.queued),
        res.server_cpu_s,
        res.peaks.rss_kib as f64 / 1024.0,
        res.sims_cpu_s,
        res.load_cpu_s,
        r.max_send_lag_ms,
        if r.generator_kept_up { "yes" } else { "NO" },
    )
}

/// The reasons line under a row: callers' view, then the server's.
pub fn format_reasons(r: &RunRow) -> String {
    let list = |m: &BTreeMap<String, usize>| {
        if m.is_empty() {
            return "none".to_string();
        }
        m.iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut line = format!(
        "  {} offered: rejected {}; server recorded {} (ledger rows {})",
        r.offered,
        list(&r.rejected_by_reason),
        list(&r.server_rejected_by_reason),
        r.server_admitted
    );
    if r.reasons_agree {
        line.push_str(" — agree");
    } else {
        let _ = write!(
            line,
            " — MISMATCH ({} server rows not from this run)",
            r.server_rows_unmatched
        );
    }
    if r.failover_transferred > 0 {
        let _ = write!(line, "; provider failovers {}", r.failover_transferred);
    }
    let res = &r.resources;
    let _ = write!(
        line,
        "; wall {:.1} s; Postgres {:.1} CPU s; other processes {:.1} CPU s",
        res.wall_s,
        res.postgres_cpu_s,
        res.others_cpu_s()
    );
    line
}
