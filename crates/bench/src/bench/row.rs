//! One run's figures (a table row) computed from what the callers heard and
//! what the server recorded, plus the table and verdict formatting. Pure:
//! no I/O, so it is unit-tested on made-up records.

use std::collections::{BTreeMap, HashSet};

use callgate_load::{LoadReport, Outcome, Percentiles};
use serde::Serialize;

pub use callgate_rig::measured::Resources;
use callgate_rig::measured::db::{ServerCall, Source};

mod table;
#[cfg(test)]
mod tests;
mod verdict;

pub use table::{format_reasons, format_row, table_header};
pub(crate) use verdict::Check;
use verdict::checks;
pub use verdict::verdicts;

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
            generator_kept_up: callgate_rig::measured::generator_lag(s, setup.max_lag_ms).is_none(),
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
