//! A run's verdict: the checks it passes or fails, in reading order, and
//! the plain-language line that sums them up.

use super::table::signed_pct;
use super::{MAX_FAULT_TRANSFER_SHARE, REPLY_P99_TOLERANCE, RunRow, SHARED_MACHINE_CORES};

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
pub(super) fn checks(r: &RunRow) -> Vec<Check> {
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
