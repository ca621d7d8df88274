//! sipp as the SIP path's load generator, on the one sipp driver the SIP
//! tests use (`callgate_rig::peers::sipp`): `tests/sip/load_uac.xml` with
//! `-m N -l N -r N` — N calls, all of them at once, their INVITEs within
//! one second — each speaking `audio/book_table.ulaw` over RTP, then
//! `hold_ms` of silence, then BYE. The driver binds everything to
//! 127.0.0.1, reads the `-trace_stat` CSV and bounds sipp by its own
//! `-timeout` (killed a few seconds after it).
//!
//! What this adds: the run's plan, the outcome the bench reports, and
//! sipp's CPU time, read as this process's reaped children's time
//! (`cutime + cstime` of `/proc/self/stat`) across the run: sipp is the
//! only child reaped in that span.

use std::time::Duration;

use anyhow::{Context, bail};
use callgate_rig::peers::sipp::{Sipp, SippOpts, scenario_dir};
use serde::Serialize;

/// The scenario every SIP call runs.
pub const SCENARIO: &str = "load_uac.xml";
/// How long `load_uac.xml` speaks before its `hold_ms` of silence: its
/// `<pause milliseconds="6000"/>` over the 6 s of `book_table.ulaw`.
pub const SPEECH_MS: u32 = 6_000;
/// Longest a call of the scenario waits for an answer (its `recv` timeouts).
const ANSWER_BOUND: Duration = Duration::from_secs(10);
/// Added to a call's own length for sipp's `-timeout`: INVITEs spread over
/// one second, answers, BYE transactions and the final `timewait`.
const RUN_MARGIN: Duration = Duration::from_secs(30);
/// Lines of sipp's error log kept in an outcome.
const ERROR_TAIL_LINES: usize = 10;

/// One sipp run.
#[derive(Debug, Clone)]
pub struct SippPlan {
    pub target: std::net::SocketAddr,
    pub calls: usize,
    pub hold_ms: u32,
}

impl SippPlan {
    /// sipp's `-timeout`: one call's length plus the answer bound and margin.
    pub fn timeout(&self) -> Duration {
        let call = Duration::from_millis(u64::from(SPEECH_MS) + u64::from(self.hold_ms));
        call + ANSWER_BOUND + RUN_MARGIN
    }

    /// The driver's options for this plan: every call at once, no message
    /// trace (hundreds of calls' worth would be written for nothing).
    pub fn opts(&self) -> anyhow::Result<SippOpts> {
        let n = u32::try_from(self.calls).context("too many calls for sipp")?;
        Ok(SippOpts {
            calls: n,
            rate: Some(n),
            limit: Some(n),
            timeout: self.timeout(),
            trace_msg: false,
            ..SippOpts::default()
        }
        .var("hold_ms", &self.hold_ms.to_string()))
    }

    /// The scenario and its audio are where the driver reads them.
    ///
    /// # Errors
    /// A file is missing.
    pub fn check_files() -> anyhow::Result<()> {
        for f in [SCENARIO, "audio/book_table.ulaw", "audio/silence.ulaw"] {
            let p = scenario_dir().join(f);
            if !p.is_file() {
                bail!("{} is missing (run from a callgate checkout)", p.display());
            }
        }
        Ok(())
    }
}

/// What sipp reported, as the bench keeps it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SippOutcome {
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub successful: u64,
    pub failed: u64,
    /// `load_uac.xml`'s counters: answered with 200, handed over by REFER,
    /// hung up by callgate's BYE, refused (any `rejected_<code>`).
    pub answered: u64,
    pub referred: u64,
    pub callgate_bye: u64,
    pub rejected: u64,
    /// sipp's CPU seconds.
    pub cpu_s: f64,
    pub errors_tail: String,
}

impl SippOutcome {
    /// Calls the server answered and that ended normally.
    pub fn served(&self) -> usize {
        let ended = self.successful.saturating_sub(self.rejected);
        usize::try_from(self.answered.min(ended)).unwrap_or(usize::MAX)
    }

    /// Why the run is not a clean measurement, if it is not.
    pub fn trouble(&self) -> Option<String> {
        if self.timed_out {
            return Some("sipp was killed at its deadline".into());
        }
        if self.exit_code != Some(0) || self.failed > 0 {
            return Some(format!(
                "sipp exited {:?} with {} failed calls: {}",
                self.exit_code,
                self.failed,
                self.errors_tail.trim()
            ));
        }
        None
    }

    fn of(out: &callgate_rig::peers::sipp::SippOutcome, cpu_s: f64) -> SippOutcome {
        let lines: Vec<&str> = out.errors.lines().collect();
        SippOutcome {
            exit_code: out.exit_code,
            timed_out: out.timed_out,
            successful: out.successful_calls,
            failed: out.failed_calls,
            answered: out.counter("answered"),
            referred: out.counter("referred"),
            callgate_bye: out.counter("callgate_bye"),
            rejected: out.rejected_by_code().values().sum(),
            cpu_s,
            errors_tail: lines[lines.len().saturating_sub(ERROR_TAIL_LINES)..].join("\n"),
        }
    }
}

/// Runs sipp on `plan` and waits, bounded, for it to finish.
///
/// # Errors
/// The plan does not fit sipp, or `/proc/self/stat` cannot be read. A run
/// that fails calls is not an error: [`SippOutcome::trouble`] says so.
pub async fn run(plan: &SippPlan, clock_ticks: u64) -> anyhow::Result<SippOutcome> {
    let opts = plan.opts()?;
    let before = children_ticks()?;
    let out = Sipp::uac(SCENARIO, plan.target, opts).await.wait().await;
    let ticks = children_ticks()?.saturating_sub(before);
    let cpu_s = ticks as f64 / clock_ticks.max(1) as f64;
    Ok(SippOutcome::of(&out, cpu_s))
}

/// CPU ticks of this process's reaped children (`cutime + cstime`).
fn children_ticks() -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").context("reading /proc/self/stat")?;
    parse_children_ticks(&stat).context("unexpected /proc/self/stat")
}

/// Fields 16 and 17 (`cutime`, `cstime`) of a `/proc/<pid>/stat` line,
/// counted from the last `)` (the command name may contain spaces).
fn parse_children_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(13);
    let cutime: u64 = fields.next()?.parse().ok()?;
    let cstime: u64 = fields.next()?.parse().ok()?;
    Some(cutime + cstime)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> SippPlan {
        SippPlan {
            target: "127.0.0.1:5070".parse().unwrap(),
            calls: 100,
            hold_ms: 12_000,
        }
    }

    #[test]
    fn every_call_is_offered_at_once_with_its_hold() {
        let o = plan().opts().unwrap();
        assert_eq!((o.calls, o.rate, o.limit), (100, Some(100), Some(100)));
        assert_eq!(o.vars, vec![("hold_ms".to_string(), "12000".to_string())]);
        assert!(!o.trace_msg);
        // 6 s speech + 12 s hold + 10 s answer bound + 30 s margin.
        assert_eq!(o.timeout, Duration::from_secs(58));
    }

    #[test]
    fn the_scenario_is_where_the_driver_reads_it() {
        SippPlan::check_files().unwrap();
    }

    #[test]
    fn served_calls_and_trouble_come_from_the_counters() {
        let out = SippOutcome {
            exit_code: Some(0),
            successful: 50,
            answered: 48,
            rejected: 2,
            callgate_bye: 1,
            ..SippOutcome::default()
        };
        assert_eq!(out.served(), 48);
        assert_eq!(out.trouble(), None);
        let failed = SippOutcome {
            exit_code: Some(1),
            failed: 3,
            ..out.clone()
        };
        assert!(failed.trouble().unwrap().contains("3 failed"));
    }

    #[test]
    fn children_time_is_fields_sixteen_and_seventeen() {
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 11 13 20 0 3 0";
        assert_eq!(parse_children_ticks(stat), Some(24));
        assert_eq!(parse_children_ticks("42 (x) S 1"), None);
        assert!(children_ticks().is_ok());
    }
}
