//! One run's figures (a table row) computed from what the callers heard and
//! what the server recorded, plus the table and verdict formatting. Pure:
//! no I/O, so it is unit-tested on made-up records.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;

use callgate_load::{LoadReport, Outcome, Percentiles};
use serde::Serialize;

use super::db::{ServerCall, Source};
use super::procfs;
use super::rig::Ticks;
use super::sampler::Peaks;

/// The benchmark's target: admitted calls' p99 reply latency under overload
/// within this fraction of the baseline's.
pub const REPLY_P99_TOLERANCE: f64 = 0.10;

/// Other processes using more than this many cores during a run make its
/// latencies noisy; the verdict says so.
pub const SHARED_MACHINE_CORES: f64 = 0.25;

/// Most calls a run may hand over because the server gave up on them — a
/// watchdog transfer (a provider stalled past the apology) or a failover
/// transfer (a provider's connection failed mid-call) — as a share of the
/// calls the bot answered. Above it the run's verdict FAILs: the bench's
/// providers are simulators with headroom, so such a transfer is the server
/// failing to keep a conversation alive under load, and a server that
/// transfers its way out of overload must not pass as one that served.
pub const MAX_FAULT_TRANSFER_SHARE: f64 = 0.01;

/// What the processes used during a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Resources {
    pub wall_s: f64,
    pub server_cpu_s: f64,
    pub sims_cpu_s: f64,
    /// This process: the load generator (plus the bench's own bookkeeping).
    pub load_cpu_s: f64,
    /// The throwaway Postgres (0 when `CALLGATE_DATABASE_URL` is used).
    pub postgres_cpu_s: f64,
    /// All CPUs of the machine, every process: what the rig did not use is
    /// someone else's, and makes the measurement less clean.
    pub machine_cpu_s: f64,
    pub peaks: Peaks,
}

impl Resources {
    /// What the processes used between two CPU readings `wall_s` apart.
    pub fn between(
        before: Ticks,
        after: Ticks,
        clock_ticks: u64,
        wall_s: f64,
        peaks: Peaks,
    ) -> Self {
        let secs = |a: u64, b: u64| procfs::ticks_to_secs(b.saturating_sub(a), clock_ticks);
        Resources {
            wall_s,
            server_cpu_s: secs(before.server, after.server),
            sims_cpu_s: secs(before.sims, after.sims),
            load_cpu_s: secs(before.load, after.load),
            postgres_cpu_s: secs(before.postgres, after.postgres),
            machine_cpu_s: secs(before.machine, after.machine),
            peaks,
        }
    }

    /// CPU seconds the machine spent on anything but the rig.
    pub fn others_cpu_s(&self) -> f64 {
        let rig = self.server_cpu_s + self.sims_cpu_s + self.load_cpu_s + self.postgres_cpu_s;
        (self.machine_cpu_s - rig).max(0.0)
    }
}

/// One run, summarised.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRow {
    pub offered: usize,
    pub arrival_s: f64,
    /// Mean length of the served calls, dialling to hang-up.
    pub served_call_s: f64,
    /// Offered concurrency over capacity: `min(offered, rate × served call
    /// length) / capacity`. "10× overload" means 10 here, not just 10× the
    /// calls spread over a long window.
    pub overload: f64,
    /// Calls whose conversation ran to its end: the caller finished the
    /// script, or the bot ended the call (e.g. booking confirmed). Never a
    /// call the server transferred or cut short.
    pub served: usize,
    /// Calls the bot itself handed to a human (the caller asked for one).
    pub transferred: usize,
    /// Calls the server's watchdog handed over: a provider stalled, the
    /// caller heard the apology and then the transfer prompt.
    pub watchdog_transferred: usize,
    /// Calls handed over because a provider's connection failed mid-call.
    pub failover_transferred: usize,
    /// Calls cut short at the server's maximum duration or a drain deadline.
    pub cut_short: usize,
    /// Apologies (the stall prompt) heard across all calls: a server that is
    /// slow but apologises is never silent, and shows here.
    pub apologies_heard: usize,
    pub rejected: usize,
    /// As the callers heard it (the overflow mark's reason, or `http_<status>`).
    pub rejected_by_reason: BTreeMap<String, usize>,
    pub rejected_prompt_heard: usize,
    /// Refused callers who did not hear the overflow prompt to its end (an
    /// HTTP refusal, a close before the prompt's mark, or audio that was not
    /// the overflow prompt): each one FAILs the verdict.
    pub rejected_prompt_unheard: usize,
    pub failed: usize,
    pub silent: usize,
    /// As the server recorded it (`admission_rejections` + ledger rows
    /// closed `setup_failed:*`).
    pub server_rejected_by_reason: BTreeMap<String, usize>,
    /// Ledger rows of the run (admitted calls).
    pub server_admitted: usize,
    /// Server rows whose `CallSid` is not one of this run's calls.
    pub server_rows_unmatched: usize,
    /// Callers' and server's refusal counts agree, reason by reason.
    pub reasons_agree: bool,
    /// Server side, `call_ledger.admission_wait_ms`.
    pub admission_wait_admitted_ms: Percentiles,
    /// Server side, `admission_rejections.waited_ms`.
    pub admission_wait_rejected_ms: Percentiles,
    /// Caller side: every reply latency of every admitted call.
    pub reply_latency_ms: Percentiles,
    /// Caller side: dialling to the refusal (or the overflow mark).
    pub time_to_rejection_ms: Percentiles,
    /// `(p99 − baseline p99) / baseline p99`; `None` for the baseline itself.
    pub reply_p99_vs_baseline: Option<f64>,
    pub resources: Resources,
    pub max_send_lag_ms: u64,
    pub media_frames_skipped: u64,
    /// The load generator kept its 20 ms media clock (no skipped frames, lag
    /// within the limit): only then is the run a valid measurement.
    pub generator_kept_up: bool,
}

/// Inputs of [`RunRow::new`] that are not records.
#[derive(Debug, Clone, Copy)]
pub struct RunSetup {
    pub offered: usize,
    pub arrival_s: f64,
    /// Worst media-clock lag that still counts as keeping up.
    pub max_lag_ms: u64,
    /// The server's admission capacity.
    pub capacity: u64,
}

impl RunRow {
    /// Summarises one run.
    pub fn new(
        setup: RunSetup,
        load: &LoadReport,
        server: &[ServerCall],
        res: Resources,
    ) -> RunRow {
        let s = &load.summary;
        let rejections = load.calls.iter().filter_map(|c| match &c.outcome {
            Outcome::Rejected {
                how,
                reason,
                time_to_rejection_ms,
                ..
            } => Some((rejection_key(how, reason), *time_to_rejection_ms)),
            _ => None,
        });
        let (mut by_reason, mut to_rejection) = (BTreeMap::new(), Vec::new());
        for (key, ms) in rejections {
            *by_reason.entry(key).or_default() += 1;
            to_rejection.push(ms);
        }
        let server_by_reason = count(server.iter().filter_map(ServerCall::refusal));
        let unmatched = unmatched_rows(load, server);
        let waits = |source| {
            Percentiles::of(
                server
                    .iter()
                    .filter(|c| c.source == source)
                    .map(|c| c.wait_ms)
                    .collect(),
            )
        };
        let served_call_s = mean_served_secs(load);
        RunRow {
            offered: setup.offered,
            arrival_s: setup.arrival_s,
            served_call_s,
            overload: overload(setup, served_call_s),
            served: s.completed + s.ended_by_bot,
            transferred: s.transferred,
            watchdog_transferred: s.watchdog_transferred,
            failover_transferred: s.failover_transferred,
            cut_short: s.cut_short,
            apologies_heard: s.prompts_heard.apology as usize,
            rejected: s.rejected,
            reasons_agree: by_reason == server_by_reason && unmatched == 0,
            rejected_by_reason: by_reason,
            rejected_prompt_heard: s.rejected_prompt_heard,
            rejected_prompt_unheard: s.rejected.saturating_sub(s.rejected_prompt_heard),
            failed: s.failed,
            silent: s.silent,
            server_rejected_by_reason: server_by_reason,
            server_admitted: server.iter().filter(|c| c.source == Source::Ledger).count(),
            server_rows_unmatched: unmatched,
            admission_wait_admitted_ms: waits(Source::Ledger),
            admission_wait_rejected_ms: waits(Source::Rejection),
            reply_latency_ms: admitted_reply_latencies(load),
            time_to_rejection_ms: Percentiles::of(to_rejection),
            reply_p99_vs_baseline: None,
            resources: res,
            max_send_lag_ms: s.max_send_lag_ms,
            media_frames_skipped: s.media_frames_skipped,
            generator_kept_up: s.media_frames_skipped == 0 && s.max_send_lag_ms <= setup.max_lag_ms,
        }
    }

    /// Compares this run's admitted p99 reply latency with the baseline's.
    pub fn compare_with(&mut self, baseline: &Percentiles) {
        self.reply_p99_vs_baseline = match (self.reply_latency_ms.p99, baseline.p99) {
            (Some(p), Some(b)) if b > 0 => Some((p as f64 - b as f64) / b as f64),
            _ => None,
        };
    }

    /// Calls the bot answered: admitted conversations that ended in any of
    /// the ways a conversation ends (not refused, failed or silent).
    pub fn answered(&self) -> usize {
        self.served
            + self.transferred
            + self.watchdog_transferred
            + self.failover_transferred
            + self.cut_short
    }

    /// Watchdog and failover transfers over [`RunRow::answered`] (0 when
    /// nothing was answered and nothing transferred; 1 when only transfers).
    pub fn fault_transfer_share(&self) -> f64 {
        let faults = (self.watchdog_transferred + self.failover_transferred) as f64;
        match self.answered() {
            0 if faults == 0.0 => 0.0,
            0 => 1.0,
            n => faults / n as f64,
        }
    }

    /// Whether the run's verdict fails (the bench exits non-zero): a caller
    /// failed or heard dead air, a refused caller did not hear the overflow
    /// prompt, the server transferred more than
    /// [`MAX_FAULT_TRANSFER_SHARE`] of the answered calls, or the run is not
    /// a valid measurement (the load generator lagged).
    pub fn has_failures(&self) -> bool {
        checks(self).iter().any(|c| c.failed)
    }
}

/// Mean dialling-to-hang-up time of calls that were served, in seconds.
fn mean_served_secs(load: &LoadReport) -> f64 {
    let served: Vec<u64> = load
        .calls
        .iter()
        .filter(|c| c.outcome.is_served())
        .map(|c| c.duration_ms)
        .collect();
    if served.is_empty() {
        return 0.0;
    }
    served.iter().sum::<u64>() as f64 / served.len() as f64 / 1000.0
}

/// Peak offered concurrency (arrival rate × call length, at most every
/// call at once) over capacity.
fn overload(setup: RunSetup, call_s: f64) -> f64 {
    if setup.capacity == 0 || setup.arrival_s <= 0.0 {
        return 0.0;
    }
    let offered = setup.offered as f64;
    let concurrent = (offered / setup.arrival_s * call_s).min(offered);
    concurrent / setup.capacity as f64
}

/// `overflow_mark` rejections by their reason; HTTP refusals by status.
fn rejection_key(how: &str, reason: &str) -> String {
    if how == "overflow_mark" && !reason.is_empty() {
        reason.to_string()
    } else {
        how.to_string()
    }
}

fn count<'a>(keys: impl Iterator<Item = &'a str>) -> BTreeMap<String, usize> {
    let mut map = BTreeMap::new();
    for k in keys {
        *map.entry(k.to_string()).or_default() += 1;
    }
    map
}

/// Server rows that do not belong to one of this run's calls.
fn unmatched_rows(load: &LoadReport, server: &[ServerCall]) -> usize {
    let sids: HashSet<String> = load.calls.iter().map(|c| c.call_sid.to_string()).collect();
    server
        .iter()
        .filter(|c| {
            !c.carrier_call_id
                .as_ref()
                .is_some_and(|id| sids.contains(id))
        })
        .count()
}

/// Reply latencies of calls that were admitted (anything not refused).
fn admitted_reply_latencies(load: &LoadReport) -> Percentiles {
    Percentiles::of(
        load.calls
            .iter()
            .filter(|c| !matches!(c.outcome, Outcome::Rejected { .. }))
            .flat_map(|c| c.reply_latency_ms.iter().copied())
            .collect(),
    )
}

fn pair(p: &Percentiles) -> String {
    match (p.p50, p.p99) {
        (Some(a), Some(b)) => format!("{a}/{b}"),
        _ => "-".to_string(),
    }
}

fn signed_pct(v: Option<f64>) -> String {
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

/// One part of a run's verdict: what it says, and whether it fails the run
/// (shared by the benches' verdicts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Check {
    pub(crate) text: String,
    pub(crate) failed: bool,
}

impl Check {
    /// A pass/fail check, marked `(ok)` or `(FAIL)`.
    pub(crate) fn judged(text: String, failed: bool) -> Check {
        let mark = if failed { "(FAIL)" } else { "(ok)" };
        Check {
            text: format!("{text} {mark}"),
            failed,
        }
    }

    /// Information that never fails the run.
    pub(crate) fn note(text: String) -> Check {
        Check {
            text,
            failed: false,
        }
    }
}

/// Every part of `r`'s verdict, in reading order.
fn checks(r: &RunRow) -> Vec<Check> {
    let mut out = vec![Check::judged(
        format!("{} silent, {} failed", r.silent, r.failed),
        r.silent + r.failed > 0,
    )];
    if r.rejected > 0 {
        out.push(Check::judged(
            format!(
                "{} rejected, {} of them without hearing the overflow prompt",
                r.rejected, r.rejected_prompt_unheard
            ),
            r.rejected_prompt_unheard > 0,
        ));
    }
    out.push(fault_transfer_check(r));
    if r.cut_short > 0 {
        out.push(Check::note(format!(
            "{} cut short by a server limit (maximum duration or drain), not served",
            r.cut_short
        )));
    }
    if r.apologies_heard > 0 {
        out.push(Check::note(format!(
            "{} apologies for a stalled provider heard",
            r.apologies_heard
        )));
    }
    out.extend(latency_check(r));
    out.extend(machine_check(r));
    if !r.generator_kept_up {
        out.push(Check::judged(
            format!(
                "NOT A VALID MEASUREMENT: the load generator lagged {} ms and skipped {} frames",
                r.max_send_lag_ms, r.media_frames_skipped
            ),
            true,
        ));
    }
    out
}

fn fault_transfer_check(r: &RunRow) -> Check {
    let share = r.fault_transfer_share();
    let limit = MAX_FAULT_TRANSFER_SHARE;
    Check::judged(
        format!(
            "{} transferred by the watchdog and {} on a provider failure, of {} answered \
             ({:.1}%; at most {:.0}% allowed)",
            r.watchdog_transferred,
            r.failover_transferred,
            r.answered(),
            share * 100.0,
            limit * 100.0
        ),
        share > limit,
    )
}

fn latency_check(r: &RunRow) -> Option<Check> {
    let d = r.reply_p99_vs_baseline?;
    let target = if d <= REPLY_P99_TOLERANCE {
        "(within 10%)"
    } else {
        "(OVER the 10% target)"
    };
    Some(Check::note(format!(
        "admitted p99 reply {} ms vs baseline: {} {target}",
        r.reply_latency_ms.p99.unwrap_or(0),
        signed_pct(Some(d)),
    )))
}

fn machine_check(r: &RunRow) -> Option<Check> {
    let others = r.resources.others_cpu_s() / r.resources.wall_s.max(1.0);
    (others > SHARED_MACHINE_CORES).then(|| {
        Check::note(format!(
            "machine shared: other processes used {:.0}% of a core",
            others * 100.0
        ))
    })
}

/// Plain-language verdicts, one per run: `PASS` or `FAIL`, then silence,
/// unheard rejections, server-side transfers against
/// [`MAX_FAULT_TRANSFER_SHARE`], cuts, apologies, latency against the
/// baseline, a shared machine, validity.
pub fn verdicts(rows: &[RunRow]) -> Vec<String> {
    rows.iter()
        .map(|r| {
            let checks = checks(r);
            let verdict = if checks.iter().any(|c| c.failed) {
                "FAIL"
            } else {
                "PASS"
            };
            let parts: Vec<&str> = checks.iter().map(|c| c.text.as_str()).collect();
            format!(
                "{} offered ({:.1}× capacity): {verdict} — {}",
                r.offered,
                r.overload,
                parts.join("; ")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use callgate_load::{CallRecord, CallSid, StreamSid};
    use std::time::Duration;

    fn call(index: usize, outcome: Outcome, replies: Vec<u64>) -> CallRecord {
        CallRecord {
            index,
            call_sid: CallSid::from_bytes([index as u8; 16]),
            stream_sid: StreamSid::from_bytes([index as u8; 16]),
            outcome,
            connect_ms: Some(1),
            time_to_first_audio_ms: Some(300),
            reply_latency_ms: replies,
            max_owed_silence_ms: 0,
            utterances_planned: 2,
            utterances_sent: 2,
            replies_heard: 2,
            bot_audio_ms: 0,
            marks_echoed: 0,
            unknown_events: 0,
            malformed_events: 0,
            media_frames_sent: 0,
            media_frames_skipped: 0,
            max_send_lag_ms: 12,
            end_reason: String::new(),
            duration_ms: 1_000,
            ..CallRecord::default()
        }
    }

    fn overflow(reason: &str, ms: u64) -> Outcome {
        Outcome::Rejected {
            how: "overflow_mark".into(),
            reason: reason.into(),
            prompt_heard: true,
            time_to_rejection_ms: ms,
        }
    }

    fn row(source: Source, index: usize, reason: Option<&str>, wait_ms: u64) -> ServerCall {
        ServerCall {
            source,
            carrier_call_id: Some(CallSid::from_bytes([index as u8; 16]).to_string()),
            reason: reason.map(str::to_string),
            wait_ms,
        }
    }

    fn setup(offered: usize) -> RunSetup {
        RunSetup {
            offered,
            arrival_s: 10.0,
            max_lag_ms: 100,
            capacity: 2,
        }
    }

    fn sample_run() -> (LoadReport, Vec<ServerCall>) {
        let load = LoadReport::new(
            vec![
                call(0, Outcome::Completed, vec![400, 500]),
                call(1, Outcome::Completed, vec![600]),
                call(2, overflow("queue_timeout", 4_100), vec![]),
                call(3, overflow("queue_full", 20), vec![]),
                call(4, overflow("setup_failed:stt", 900), vec![]),
            ],
            Duration::from_secs(5),
        );
        let server = vec![
            row(Source::Ledger, 0, Some("caller_hangup"), 0),
            row(Source::Ledger, 1, Some("caller_hangup"), 1_500),
            row(Source::Ledger, 4, Some("setup_failed:stt"), 300),
            row(Source::Rejection, 2, Some("queue_timeout"), 4_000),
            row(Source::Rejection, 3, Some("queue_full"), 0),
        ];
        (load, server)
    }

    #[test]
    fn a_row_counts_outcomes_and_cross_checks_the_server() {
        let (load, server) = sample_run();
        let r = RunRow::new(setup(5), &load, &server, Resources::default());
        assert_eq!((r.served, r.rejected, r.failed, r.silent), (2, 3, 0, 0));
        assert_eq!(r.rejected_by_reason["queue_timeout"], 1);
        assert_eq!(r.rejected_by_reason["setup_failed:stt"], 1);
        assert_eq!(r.rejected_by_reason, r.server_rejected_by_reason);
        assert!(r.reasons_agree);
        assert_eq!(r.server_admitted, 3);
        // Admitted waits come from the ledger, rejected ones from the refusals.
        assert_eq!(r.admission_wait_admitted_ms.max, Some(1_500));
        assert_eq!(r.admission_wait_rejected_ms.p99, Some(4_000));
        // Only admitted calls' replies count.
        assert_eq!(
            (r.reply_latency_ms.count, r.reply_latency_ms.max),
            (3, Some(600))
        );
        assert_eq!(r.time_to_rejection_ms.p99, Some(4_100));
        assert!(r.generator_kept_up);
        assert!(!r.has_failures());
        // Two served calls of 1 s each; 5 calls over 10 s on capacity 2:
        // 0.5 calls/s × 1 s = 0.5 concurrent = 0.25× capacity.
        assert!((r.served_call_s - 1.0).abs() < 1e-9);
        assert!((r.overload - 0.25).abs() < 1e-9);
        let burst = RunSetup {
            arrival_s: 0.1,
            ..setup(5)
        };
        // 50 calls/s × 1 s, but only 5 calls exist: 5 / 2 = 2.5×.
        let r = RunRow::new(burst, &load, &server, Resources::default());
        assert!((r.overload - 2.5).abs() < 1e-9);
    }

    #[test]
    fn a_disagreement_or_a_foreign_row_is_a_mismatch() {
        let (load, mut server) = sample_run();
        server.pop();
        let r = RunRow::new(setup(5), &load, &server, Resources::default());
        assert!(!r.reasons_agree);
        assert!(
            format_reasons(&r).contains("MISMATCH"),
            "{}",
            format_reasons(&r)
        );

        let (load, mut server) = sample_run();
        server.push(row(Source::Ledger, 99, None, 0));
        let r = RunRow::new(setup(5), &load, &server, Resources::default());
        assert_eq!(r.server_rows_unmatched, 1);
        assert!(!r.reasons_agree);
    }

    #[test]
    fn the_baseline_comparison_and_verdicts_read_plainly() {
        let (load, server) = sample_run();
        let base = RunRow::new(setup(5), &load, &server, Resources::default());
        let mut slow = base.clone();
        slow.offered = 50;
        slow.reply_latency_ms = Percentiles::of(vec![700]);
        slow.compare_with(&base.reply_latency_ms);
        // 700 vs 600: +16.7%, over the 10% target.
        assert!((slow.reply_p99_vs_baseline.unwrap() - 1.0 / 6.0).abs() < 1e-9);
        slow.generator_kept_up = false;
        slow.silent = 1;
        slow.resources.wall_s = 10.0;
        slow.resources.server_cpu_s = 4.0;
        slow.resources.machine_cpu_s = 9.0;
        let v = verdicts(&[base.clone(), slow.clone()]);
        assert_eq!(
            v[0],
            "5 offered (0.2× capacity): PASS — 0 silent, 0 failed (ok); \
             3 rejected, 0 of them without hearing the overflow prompt (ok); \
             0 transferred by the watchdog and 0 on a provider failure, of 2 answered \
             (0.0%; at most 1% allowed) (ok)"
        );
        assert!(!base.has_failures());
        assert!(
            v[1].starts_with("50 offered (0.2× capacity): FAIL — "),
            "{}",
            v[1]
        );
        assert!(v[1].contains("1 silent, 0 failed (FAIL)"), "{}", v[1]);
        assert!(v[1].contains("+16.7% (OVER the 10% target)"), "{}", v[1]);
        assert!(v[1].contains("NOT A VALID MEASUREMENT"), "{}", v[1]);
        assert!(
            v[1].contains("other processes used 50% of a core"),
            "{}",
            v[1]
        );
        assert!(slow.has_failures());

        let line = format_row(&base);
        assert_eq!(line.len(), table_header().len(), "{line}");
        assert!(line.contains("500/600"), "{line}");
        assert!(line.contains("base"), "{line}");
        assert!(format_row(&slow).contains("+16.7%"));
        assert!(format_row(&slow).trim_end().ends_with("NO"));
    }

    #[test]
    fn a_lagging_generator_invalidates_the_run() {
        let (mut load, server) = sample_run();
        load.summary.max_send_lag_ms = 250;
        let r = RunRow::new(setup(5), &load, &server, Resources::default());
        assert!(!r.generator_kept_up);
        load.summary.max_send_lag_ms = 10;
        load.summary.media_frames_skipped = 3;
        assert!(!RunRow::new(setup(5), &load, &server, Resources::default()).generator_kept_up);
    }

    /// A load report over `outcomes`, one call each, with `apologies`
    /// apologies heard on the first call.
    fn report_of(outcomes: Vec<Outcome>, apologies: u32) -> LoadReport {
        let mut calls: Vec<CallRecord> = outcomes
            .into_iter()
            .enumerate()
            .map(|(i, o)| call(i, o, vec![]))
            .collect();
        if let Some(first) = calls.first_mut() {
            first.prompts_heard.apology = apologies;
        }
        LoadReport::new(calls, Duration::from_secs(5))
    }

    fn clean_row() -> RunRow {
        let (load, server) = sample_run();
        RunRow::new(setup(5), &load, &server, Resources::default())
    }

    #[test]
    fn server_side_transfers_and_cuts_are_not_served() {
        let reason = |r: &str| r.to_string();
        let load = report_of(
            vec![
                Outcome::Completed,
                Outcome::EndedByBot {
                    reason: reason("booking_confirmed"),
                },
                Outcome::Transferred {
                    reason: reason("caller_requested_human"),
                },
                Outcome::WatchdogTransfer {
                    reason: reason("tts_stalled"),
                },
                Outcome::FailoverTransfer {
                    reason: reason("stt_failed"),
                },
                Outcome::CutShort {
                    reason: reason("max_duration"),
                },
            ],
            3,
        );
        let r = RunRow::new(setup(6), &load, &[], Resources::default());
        assert_eq!((r.served, r.transferred, r.watchdog_transferred), (2, 1, 1));
        assert_eq!(
            (r.failover_transferred, r.cut_short, r.answered()),
            (1, 1, 6)
        );
        assert_eq!(r.apologies_heard, 3);
        assert!((r.fault_transfer_share() - 2.0 / 6.0).abs() < 1e-9);
        // Only the two served calls count towards the served call length.
        assert!((r.served_call_s - 1.0).abs() < 1e-9);
        let v = verdicts(std::slice::from_ref(&r));
        assert!(v[0].starts_with("6 offered"), "{}", v[0]);
        assert!(v[0].contains(": FAIL — "), "{}", v[0]);
        assert!(
            v[0].contains(
                "1 transferred by the watchdog and 1 on a provider failure, of 6 answered \
                 (33.3%; at most 1% allowed) (FAIL)"
            ),
            "{}",
            v[0]
        );
        assert!(v[0].contains("1 cut short by a server limit"), "{}", v[0]);
        assert!(
            v[0].contains("3 apologies for a stalled provider heard"),
            "{}",
            v[0]
        );
        let line = format_row(&r);
        assert_eq!(line.len(), table_header().len(), "{line}");
        assert!(r.has_failures());
    }

    #[test]
    fn fault_transfers_fail_the_run_only_beyond_the_stated_share() {
        let mut r = clean_row();
        r.served = 99;
        r.watchdog_transferred = 1;
        // 1 of 100 answered is exactly the allowed 1%.
        assert!((r.fault_transfer_share() - MAX_FAULT_TRANSFER_SHARE).abs() < 1e-12);
        assert!(!r.has_failures());
        r.failover_transferred = 1;
        assert!(r.has_failures());
        let v = verdicts(std::slice::from_ref(&r));
        assert!(
            v[0].contains("(2.0%; at most 1% allowed) (FAIL)"),
            "{}",
            v[0]
        );
        // Nothing answered but a transfer: all of it was the server's doing.
        let mut none = clean_row();
        none.served = 0;
        none.watchdog_transferred = 1;
        assert_eq!(none.fault_transfer_share(), 1.0);
        none.watchdog_transferred = 0;
        assert_eq!(none.fault_transfer_share(), 0.0);
    }

    #[test]
    fn an_unheard_rejection_fails_the_run() {
        let (mut load, server) = sample_run();
        load.calls[2].outcome = Outcome::Rejected {
            how: "overflow_mark".into(),
            reason: "queue_timeout".into(),
            prompt_heard: false,
            time_to_rejection_ms: 4_100,
        };
        let load = LoadReport::new(load.calls, Duration::from_secs(5));
        let r = RunRow::new(setup(5), &load, &server, Resources::default());
        assert_eq!((r.rejected, r.rejected_prompt_unheard), (3, 1));
        assert!(r.has_failures());
        let v = verdicts(std::slice::from_ref(&r));
        assert!(
            v[0].contains("3 rejected, 1 of them without hearing the overflow prompt (FAIL)"),
            "{}",
            v[0]
        );
        assert!(
            v[0].contains(": FAIL — 0 silent, 0 failed (ok)"),
            "{}",
            v[0]
        );
    }

    #[test]
    fn an_invalid_run_fails_the_verdict_however_good_it_looks() {
        let mut r = clean_row();
        assert!(!r.has_failures());
        r.generator_kept_up = false;
        r.max_send_lag_ms = 250;
        assert!(r.has_failures());
        let v = verdicts(std::slice::from_ref(&r));
        assert!(
            v[0].contains(": FAIL — 0 silent, 0 failed (ok)"),
            "{}",
            v[0]
        );
        assert!(
            v[0].ends_with(
                "NOT A VALID MEASUREMENT: the load generator lagged 250 ms and skipped 0 frames (FAIL)"
            ),
            "{}",
            v[0]
        );
    }
}
