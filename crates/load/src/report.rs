//! The result of a run: every call's record plus a summary, as JSON or a table.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::caller::millis;
use crate::error::LoadError;
use crate::record::{BargeInRecord, CallRecord, CoughRecord, Outcome, Prompt, PromptsHeard};

/// At most this many failed or silent calls are listed by the table; the
/// JSON report has them all.
const MAX_LISTED_FAILURES: usize = 20;

/// Everything a run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    /// One record per call, in dialling order.
    pub calls: Vec<CallRecord>,
    pub summary: Summary,
}

/// Nearest-rank percentiles of a set of millisecond values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: usize,
    #[serde(default)]
    pub min: Option<u64>,
    pub p50: Option<u64>,
    pub p95: Option<u64>,
    pub p99: Option<u64>,
    pub max: Option<u64>,
}

impl Percentiles {
    /// Percentiles of `values` (any order).
    pub fn of(mut values: Vec<u64>) -> Percentiles {
        values.sort_unstable();
        let rank = |p: f64| -> Option<u64> {
            let n = values.len();
            let idx = ((p * n as f64).ceil() as usize).clamp(1, n.max(1)) - 1;
            values.get(idx).copied()
        };
        Percentiles {
            count: values.len(),
            min: values.first().copied(),
            p50: rank(0.50),
            p95: rank(0.95),
            p99: rank(0.99),
            max: values.last().copied(),
        }
    }
}

/// Counts per outcome and the latency distribution across calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub total: usize,
    pub completed: usize,
    pub rejected: usize,
    /// The bot handed the caller to a human.
    pub transferred: usize,
    /// The server's watchdog handed the caller over (a provider stalled).
    #[serde(default)]
    pub watchdog_transferred: usize,
    /// A provider's connection failed mid-call and the server handed the
    /// caller over.
    #[serde(default)]
    pub failover_transferred: usize,
    pub ended_by_bot: usize,
    /// Cut short at the server's maximum duration or a drain deadline.
    #[serde(default)]
    pub cut_short: usize,
    pub failed: usize,
    pub silent: usize,
    /// Upgrades refused with HTTP 401 (the run's credentials are wrong).
    #[serde(default)]
    pub unauthorized: usize,
    /// Rejections whose overflow prompt played to its end.
    pub rejected_prompt_heard: usize,
    /// First audio of any kind (hold audio included).
    pub time_to_first_audio_ms: Percentiles,
    /// All reply latencies of all calls pooled (to the real reply, never
    /// to an apology before it).
    pub reply_latency_ms: Percentiles,
    /// All apology latencies pooled: end of speech → the stall prompt.
    #[serde(default)]
    pub apology_latency_ms: Percentiles,
    /// Bundled prompts heard, by kind, across all calls.
    #[serde(default)]
    pub prompts_heard: PromptsHeard,
    pub max_owed_silence_ms: u64,
    /// Planned utterances per call across all calls (the call-length mix).
    #[serde(default)]
    pub utterances_planned: Percentiles,
    /// Dialling to hang-up of completed calls.
    #[serde(default)]
    pub completed_duration_ms: Percentiles,
    /// Worst lateness of any caller's media clock (generator health).
    pub max_send_lag_ms: u64,
    pub media_frames_skipped: u64,
    pub wall_time_ms: u64,
    /// The barge-in scenario across calls; absent when no caller spoke
    /// over a greeting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barge_in: Option<BargeInSummary>,
    /// The cough scenario across calls; absent when no caller coughed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cough: Option<CoughSummary>,
}

/// Every [`BargeInRecord`] of a run pooled (definitions there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BargeInSummary {
    /// Calls whose caller spoke over the greeting.
    pub spoken: usize,
    /// Of them, those the server answered with a `clear` before the
    /// caller's utterance ended.
    pub cleared: usize,
    /// Onset → `clear`, over the cleared calls.
    pub onset_to_clear_ms: Percentiles,
    /// Bot audio received after the onset, until the clear (or the end of
    /// the utterance), over every call that spoke.
    pub bot_audio_after_onset_ms: Percentiles,
    /// Bot audio received after the clear while the caller still spoke,
    /// over the cleared calls (every value must be 0).
    pub audio_after_clear_ms: Percentiles,
}

impl BargeInSummary {
    /// `None` when no record ran the scenario.
    pub fn of(records: &[&BargeInRecord]) -> Option<BargeInSummary> {
        if records.is_empty() {
            return None;
        }
        let pool = |f: fn(&BargeInRecord) -> Option<u64>| {
            Percentiles::of(records.iter().filter_map(|r| f(r)).collect())
        };
        Some(BargeInSummary {
            spoken: records.len(),
            cleared: records
                .iter()
                .filter(|r| r.onset_to_clear_ms.is_some())
                .count(),
            onset_to_clear_ms: pool(|r| r.onset_to_clear_ms),
            bot_audio_after_onset_ms: pool(|r| Some(r.bot_audio_after_onset_ms)),
            audio_after_clear_ms: pool(|r| r.audio_after_clear_ms),
        })
    }
}

/// Every [`CoughRecord`] of a run pooled (definitions there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoughSummary {
    /// Calls whose caller coughed into a bot turn.
    pub coughs: usize,
    /// Of them, those the server paused with a `clear`.
    pub cleared: usize,
    /// Of them, those whose turn resumed and played to its mark.
    pub resumed: usize,
    /// Onset → `clear`, over the cleared calls.
    pub onset_to_clear_ms: Percentiles,
    /// Bot audio received after the onset, until the clear.
    pub bot_audio_after_onset_ms: Percentiles,
    /// The clear → the first bot audio after it.
    pub gap_ms: Percentiles,
}

impl CoughSummary {
    /// `None` when no record ran the scenario.
    pub fn of(records: &[&CoughRecord]) -> Option<CoughSummary> {
        if records.is_empty() {
            return None;
        }
        let pool = |f: fn(&CoughRecord) -> Option<u64>| {
            Percentiles::of(records.iter().filter_map(|r| f(r)).collect())
        };
        Some(CoughSummary {
            coughs: records.len(),
            cleared: records
                .iter()
                .filter(|r| r.onset_to_clear_ms.is_some())
                .count(),
            resumed: records.iter().filter(|r| r.resumed).count(),
            onset_to_clear_ms: pool(|r| r.onset_to_clear_ms),
            bot_audio_after_onset_ms: pool(|r| Some(r.bot_audio_after_onset_ms)),
            gap_ms: pool(|r| r.gap_ms),
        })
    }
}

impl Summary {
    /// Summarises `calls`; `wall` is the run's elapsed time.
    pub fn from_calls(calls: &[CallRecord], wall: Duration) -> Summary {
        let count = |pred: fn(&Outcome) -> bool| calls.iter().filter(|c| pred(&c.outcome)).count();
        Summary {
            total: calls.len(),
            completed: count(|o| matches!(o, Outcome::Completed)),
            rejected: count(|o| matches!(o, Outcome::Rejected { .. })),
            transferred: count(|o| matches!(o, Outcome::Transferred { .. })),
            watchdog_transferred: count(|o| matches!(o, Outcome::WatchdogTransfer { .. })),
            failover_transferred: count(|o| matches!(o, Outcome::FailoverTransfer { .. })),
            ended_by_bot: count(|o| matches!(o, Outcome::EndedByBot { .. })),
            cut_short: count(|o| matches!(o, Outcome::CutShort { .. })),
            failed: count(|o| matches!(o, Outcome::Failed { .. })),
            silent: count(|o| matches!(o, Outcome::Silent { .. })),
            unauthorized: count(|o| matches!(o, Outcome::Unauthorized { .. })),
            rejected_prompt_heard: count(|o| {
                matches!(
                    o,
                    Outcome::Rejected {
                        prompt_heard: true,
                        ..
                    }
                )
            }),
            time_to_first_audio_ms: Percentiles::of(
                calls
                    .iter()
                    .filter_map(|c| c.time_to_first_audio_ms)
                    .collect(),
            ),
            reply_latency_ms: Percentiles::of(
                calls
                    .iter()
                    .flat_map(|c| c.reply_latency_ms.iter().copied())
                    .collect(),
            ),
            apology_latency_ms: Percentiles::of(
                calls
                    .iter()
                    .flat_map(|c| c.apology_latency_ms.iter().copied())
                    .collect(),
            ),
            prompts_heard: calls.iter().fold(PromptsHeard::default(), |mut all, c| {
                all.merge(&c.prompts_heard);
                all
            }),
            max_owed_silence_ms: calls
                .iter()
                .map(|c| c.max_owed_silence_ms)
                .max()
                .unwrap_or(0),
            utterances_planned: Percentiles::of(
                calls.iter().map(|c| c.utterances_planned as u64).collect(),
            ),
            completed_duration_ms: Percentiles::of(
                calls
                    .iter()
                    .filter(|c| c.outcome == Outcome::Completed)
                    .map(|c| c.duration_ms)
                    .collect(),
            ),
            max_send_lag_ms: calls.iter().map(|c| c.max_send_lag_ms).max().unwrap_or(0),
            media_frames_skipped: calls.iter().map(|c| c.media_frames_skipped).sum(),
            wall_time_ms: millis(wall),
            barge_in: BargeInSummary::of(
                &calls
                    .iter()
                    .filter_map(|c| c.barge_in.as_ref())
                    .collect::<Vec<_>>(),
            ),
            cough: CoughSummary::of(
                &calls
                    .iter()
                    .filter_map(|c| c.cough.as_ref())
                    .collect::<Vec<_>>(),
            ),
        }
    }
}

impl LoadReport {
    /// A report over `calls`, sorted into dialling order.
    pub fn new(mut calls: Vec<CallRecord>, wall: Duration) -> LoadReport {
        calls.sort_by_key(|c| c.index);
        let summary = Summary::from_calls(&calls, wall);
        LoadReport { calls, summary }
    }

    /// Whether any call failed or went silent (the CLI exits non-zero).
    pub fn has_failures(&self) -> bool {
        self.calls.iter().any(|c| c.outcome.is_failure())
    }

    /// Writes `{ "calls": [...], "summary": {...} }` to `path`.
    ///
    /// # Errors
    /// The file could not be created or written.
    pub fn write_json(&self, path: &Path) -> io::Result<()> {
        let mut out = io::BufWriter::new(std::fs::File::create(path)?);
        serde_json::to_writer_pretty(&mut out, self)?;
        out.write_all(b"\n")?;
        out.flush()
    }

    /// Like [`LoadReport::write_json`], with the path in the error.
    ///
    /// # Errors
    /// [`LoadError::WriteReport`].
    pub fn save(&self, path: &Path) -> Result<(), LoadError> {
        self.write_json(path)
            .map_err(|source| LoadError::WriteReport {
                path: path.to_path_buf(),
                source,
            })
    }

    /// One line per call: what each caller heard.
    ///
    /// # Errors
    /// Writing to `w` failed.
    pub fn print_calls(&self, w: &mut impl Write) -> io::Result<()> {
        writeln!(
            w,
            "  {:>3}  {:<36}  {:<17}  {:>8}  {:>18}  {:>4}  {:>9}  {:>8}  end",
            "#", "call sid", "outcome", "1st audio", "replies ms", "apol", "max gap", "secs"
        )?;
        for c in &self.calls {
            let first = c
                .time_to_first_audio_ms
                .map_or_else(|| "-".to_string(), |v| format!("{v} ms"));
            let replies = if c.reply_latency_ms.is_empty() {
                "-".to_string()
            } else {
                c.reply_latency_ms
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join("/")
            };
            writeln!(
                w,
                "  {:>3}  {:<36}  {:<17}  {:>8}  {:>18}  {:>4}  {:>6} ms  {:>8.1}  {}",
                c.index,
                c.call_sid.to_string(),
                c.outcome.label(),
                first,
                replies,
                c.apologies_heard,
                c.max_owed_silence_ms,
                c.duration_ms as f64 / 1000.0,
                c.end_reason
            )?;
        }
        Ok(())
    }

    /// A human-readable summary table.
    ///
    /// # Errors
    /// Writing to `w` failed.
    pub fn print_table(&self, w: &mut impl Write) -> io::Result<()> {
        let s = &self.summary;
        let secs = s.wall_time_ms as f64 / 1000.0;
        writeln!(w, "callgate load: {} calls in {secs:.1} s", s.total)?;
        writeln!(w, "  {:<18}{:>7}", "outcome", "calls")?;
        let rows = [
            ("completed", s.completed),
            ("rejected", s.rejected),
            ("transferred", s.transferred),
            ("watchdog_transfer", s.watchdog_transferred),
            ("failover_transfer", s.failover_transferred),
            ("ended_by_bot", s.ended_by_bot),
            ("cut_short", s.cut_short),
            ("failed", s.failed),
            ("silent", s.silent),
            ("unauthorized", s.unauthorized),
        ];
        for (name, n) in rows {
            // Only a misconfigured run has unauthorized calls: no row otherwise.
            if name == "unauthorized" && n == 0 {
                continue;
            }
            writeln!(w, "  {name:<18}{n:>7}{}", self.detail(name))?;
        }
        writeln!(
            w,
            "  {:<18}{:>7}{:>8}{:>8}{:>8}{:>8}",
            "latency ms", "n", "p50", "p95", "p99", "max"
        )?;
        latency_row(w, "first audio", &s.time_to_first_audio_ms)?;
        latency_row(w, "reply", &s.reply_latency_ms)?;
        latency_row(w, "apology", &s.apology_latency_ms)?;
        latency_row(w, "call (done)", &s.completed_duration_ms)?;
        let u = &s.utterances_planned;
        let cell = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
        writeln!(
            w,
            "  utterances per call: min {} p50 {} max {}",
            cell(u.min),
            cell(u.p50),
            cell(u.max)
        )?;
        self.print_interaction(w)?;
        writeln!(w, "  prompts heard: {}", prompts_line(&s.prompts_heard))?;
        writeln!(
            w,
            "  max owed silence {} ms; generator max lag {} ms, {} frames skipped",
            s.max_owed_silence_ms, s.max_send_lag_ms, s.media_frames_skipped
        )?;
        self.list_failures(w)
    }

    /// The barge-in and cough rows, when those scenarios ran.
    fn print_interaction(&self, w: &mut impl Write) -> io::Result<()> {
        if let Some(b) = &self.summary.barge_in {
            latency_row(w, "barge→clear", &b.onset_to_clear_ms)?;
            latency_row(w, "bot after onset", &b.bot_audio_after_onset_ms)?;
            latency_row(w, "after clear", &b.audio_after_clear_ms)?;
        }
        if let Some(c) = &self.summary.cough {
            latency_row(w, "cough→clear", &c.onset_to_clear_ms)?;
            latency_row(w, "cough gap", &c.gap_ms)?;
        }
        if let Some(b) = &self.summary.barge_in {
            writeln!(
                w,
                "  barge-in: {} spoke over the greeting, {} cleared",
                b.spoken, b.cleared
            )?;
        }
        if let Some(c) = &self.summary.cough {
            writeln!(
                w,
                "  cough: {} coughed into a bot turn, {} paused (clear), {} resumed to the turn's mark",
                c.coughs, c.cleared, c.resumed
            )?;
        }
        Ok(())
    }

    fn detail(&self, row: &str) -> String {
        if row != "rejected" || self.summary.rejected == 0 {
            return String::new();
        }
        let mut by_how: BTreeMap<&str, usize> = BTreeMap::new();
        for c in &self.calls {
            if let Outcome::Rejected { how, .. } = &c.outcome {
                *by_how.entry(how.as_str()).or_default() += 1;
            }
        }
        let hows: Vec<String> = by_how.iter().map(|(h, n)| format!("{h}: {n}")).collect();
        let s = &self.summary;
        format!(
            "  ({}; prompt heard {}, not heard {})",
            hows.join(", "),
            s.rejected_prompt_heard,
            s.rejected - s.rejected_prompt_heard
        )
    }

    fn list_failures(&self, w: &mut impl Write) -> io::Result<()> {
        let failures: Vec<&CallRecord> = self
            .calls
            .iter()
            .filter(|c| c.outcome.is_failure())
            .collect();
        if failures.is_empty() {
            return Ok(());
        }
        writeln!(w, "  failed or silent calls:")?;
        for c in failures.iter().take(MAX_LISTED_FAILURES) {
            let what = match &c.outcome {
                Outcome::Silent { phase } => format!("silent ({phase})"),
                Outcome::Unauthorized { status, .. } => format!("unauthorized (HTTP {status})"),
                other => other.label().to_string(),
            };
            writeln!(
                w,
                "    #{} {} {what}: {}",
                c.index, c.call_sid, c.end_reason
            )?;
        }
        if failures.len() > MAX_LISTED_FAILURES {
            writeln!(
                w,
                "    … and {} more (see --json)",
                failures.len() - MAX_LISTED_FAILURES
            )?;
        }
        Ok(())
    }
}

/// `apology 3, hold 2, …` for the prompts heard at least once; `none`.
fn prompts_line(p: &PromptsHeard) -> String {
    let mut parts: Vec<String> = Prompt::ALL
        .into_iter()
        .filter(|k| p.count(*k) > 0)
        .map(|k| format!("{} {}", k.label(), p.count(k)))
        .collect();
    if p.unknown > 0 {
        parts.push(format!("unknown audio {}", p.unknown));
    }
    if parts.is_empty() {
        return "none".to_string();
    }
    parts.join(", ")
}

fn latency_row(w: &mut impl Write, name: &str, p: &Percentiles) -> io::Result<()> {
    let cell = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    writeln!(
        w,
        "  {name:<18}{:>7}{:>8}{:>8}{:>8}{:>8}",
        p.count,
        cell(p.p50),
        cell(p.p95),
        cell(p.p99),
        cell(p.max)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{CallSid, StreamSid};

    fn record(index: usize, outcome: Outcome, first: Option<u64>, replies: Vec<u64>) -> CallRecord {
        CallRecord {
            index,
            call_sid: CallSid::from_bytes([index as u8; 16]),
            stream_sid: StreamSid::from_bytes([index as u8; 16]),
            outcome,
            connect_ms: Some(1),
            time_to_first_audio_ms: first,
            reply_latency_ms: replies,
            max_owed_silence_ms: 100 * index as u64,
            utterances_planned: 2 + index,
            utterances_sent: 0,
            replies_heard: 0,
            bot_audio_ms: 0,
            marks_echoed: 0,
            unknown_events: 0,
            malformed_events: 0,
            media_frames_sent: 0,
            media_frames_skipped: 0,
            max_send_lag_ms: 3,
            end_reason: "why".into(),
            duration_ms: 10 + index as u64,
            ..CallRecord::default()
        }
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let p = Percentiles::of((1..=100).rev().collect());
        assert_eq!(
            (p.count, p.min, p.p50, p.p95, p.p99, p.max),
            (100, Some(1), Some(50), Some(95), Some(99), Some(100))
        );
        let one = Percentiles::of(vec![7]);
        assert_eq!((one.p50, one.p99), (Some(7), Some(7)));
        assert_eq!(Percentiles::of(vec![]), Percentiles::default());
    }

    #[test]
    fn summary_counts_outcomes_and_pools_latencies() {
        let rejected = Outcome::Rejected {
            how: "http_503".into(),
            reason: String::new(),
            prompt_heard: false,
            time_to_rejection_ms: 2,
        };
        let calls = vec![
            record(
                2,
                Outcome::Silent {
                    phase: "reply_1".into(),
                },
                Some(300),
                vec![],
            ),
            record(0, Outcome::Completed, Some(100), vec![400, 500]),
            record(1, rejected, None, vec![]),
            record(
                3,
                Outcome::Unauthorized {
                    status: 401,
                    reason: "unknown key".into(),
                },
                None,
                vec![],
            ),
        ];
        let report = LoadReport::new(calls, Duration::from_secs(2));
        let s = &report.summary;
        assert_eq!(
            (s.total, s.completed, s.rejected, s.silent, s.unauthorized),
            (4, 1, 1, 1, 1)
        );
        assert_eq!(s.time_to_first_audio_ms.count, 2);
        assert_eq!(s.reply_latency_ms.max, Some(500));
        assert_eq!(s.max_owed_silence_ms, 300);
        let u = &s.utterances_planned;
        assert_eq!((u.count, u.min, u.max), (4, Some(2), Some(5)));
        // Only the completed call counts towards the served duration.
        let d = &s.completed_duration_ms;
        assert_eq!((d.count, d.max), (1, Some(10)));
        assert_eq!(report.calls[0].index, 0);
        assert!(report.has_failures());

        let mut table = Vec::new();
        report.print_table(&mut table).unwrap();
        let table = String::from_utf8(table).unwrap();
        assert!(table.contains("http_503: 1"), "{table}");
        assert!(table.contains("silent (reply_1)"), "{table}");
        assert!(table.contains("unauthorized (HTTP 401)"), "{table}");
        let row = format!("  {:<18}{:>7}", "unauthorized", 1);
        assert!(table.contains(&row), "{table}");
        assert!(
            table.contains("utterances per call: min 2 p50 3 max 5"),
            "{table}"
        );

        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["summary"]["silent"], 1);
        assert_eq!(json["calls"].as_array().unwrap().len(), 4);
        assert_eq!(json["summary"]["unauthorized"], 1);
    }

    #[test]
    fn server_endings_apologies_and_prompts_are_counted_and_printed() {
        let reason = |r: &str| r.to_string();
        let mut apologised = record(
            0,
            Outcome::WatchdogTransfer {
                reason: reason("dialog_stalled"),
            },
            Some(100),
            vec![],
        );
        apologised.apologies_heard = 1;
        apologised.apology_latency_ms = vec![1_500];
        apologised.prompts_heard.apology = 1;
        apologised.prompts_heard.transfer = 1;
        let mut refused = record(
            2,
            Outcome::Rejected {
                how: "overflow_mark".into(),
                reason: reason("queue_full"),
                prompt_heard: false,
                time_to_rejection_ms: 30,
            },
            Some(30),
            vec![],
        );
        refused.prompts_heard.hold = 1;
        let calls = vec![
            apologised,
            record(
                1,
                Outcome::CutShort {
                    reason: reason("max_duration"),
                },
                Some(100),
                vec![700],
            ),
            refused,
            record(
                3,
                Outcome::FailoverTransfer {
                    reason: reason("tts_failed"),
                },
                Some(100),
                vec![],
            ),
        ];
        let report = LoadReport::new(calls, Duration::from_secs(2));
        let s = &report.summary;
        assert_eq!(
            (s.watchdog_transferred, s.failover_transferred, s.cut_short),
            (1, 1, 1)
        );
        assert_eq!((s.completed, s.transferred, s.ended_by_bot), (0, 0, 0));
        assert_eq!(s.apology_latency_ms.max, Some(1_500));
        assert_eq!(
            (
                s.prompts_heard.apology,
                s.prompts_heard.transfer,
                s.prompts_heard.hold
            ),
            (1, 1, 1)
        );
        assert!(
            !report.has_failures(),
            "server endings are answers, not defects"
        );

        let mut table = Vec::new();
        report.print_table(&mut table).unwrap();
        let table = String::from_utf8(table).unwrap();
        for row in [
            ("watchdog_transfer", 1),
            ("failover_transfer", 1),
            ("cut_short", 1),
        ] {
            let line = format!("  {:<18}{:>7}", row.0, row.1);
            assert!(table.contains(&line), "{line:?} in {table}");
        }
        assert!(table.contains("prompt heard 0, not heard 1"), "{table}");
        assert!(
            table.contains("prompts heard: hold 1, apology 1, transfer 1"),
            "{table}"
        );
        assert!(
            table.contains("  apology                 1    1500"),
            "{table}"
        );

        let mut lines = Vec::new();
        report.print_calls(&mut lines).unwrap();
        let lines = String::from_utf8(lines).unwrap();
        assert!(lines.contains("watchdog_transfer"), "{lines}");

        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["summary"]["watchdog_transferred"], 1);
        assert_eq!(json["calls"][0]["outcome"]["kind"], "watchdog_transfer");
        assert_eq!(json["calls"][0]["prompts_heard"]["apology"], 1);
        assert_eq!(json["calls"][0]["apology_latency_ms"][0], 1_500);
    }
}
