//! One interaction run's figures (a table row) from what the callers
//! measured and what the server's receipts say, the table, the verdicts
//! and the median and spread of repeated runs. Pure: no I/O, so it is
//! unit-tested on made-up records.

use std::collections::HashSet;

use callgate_load::{LoadReport, Percentiles};
use serde::Serialize;

use crate::bench::row::{Check, Resources};
use callgate_rig::measured::receipts::Receipt;

/// The target for callgate's own share of turn latency, p99, µs.
pub const OWN_P99_TARGET_US: u64 = 2_000;
/// Onset → `clear` may exceed `min_speech_ms` by this (one frame).
pub const CLEAR_SLACK_MS: u64 = 20;
/// Bot audio after the onset may exceed `min_speech_ms` by this (two frames).
pub const AUDIO_SLACK_MS: u64 = 40;

/// What the server was configured with that the verdict needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Targets {
    /// `call.barge_in.min_speech_ms`; `None` when the server's
    /// configuration has no such key (a server without VAD barge-in).
    pub min_speech_ms: Option<u64>,
}

impl Targets {
    /// Reads the targets from the server's configuration (as JSON).
    pub fn from_config(cfg: &serde_json::Value) -> Targets {
        Targets {
            min_speech_ms: cfg["call"]["barge_in"]["min_speech_ms"].as_u64(),
        }
    }
}

/// Inputs of [`InteractionRow::new`] that are not records.
#[derive(Debug, Clone, Copy)]
pub struct RunSetup {
    pub calls: usize,
    /// Which repetition of this size (1-based).
    pub repeat: usize,
    /// Worst media-clock lag that still counts as keeping up.
    pub max_lag_ms: u64,
}

/// One run, summarised.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InteractionRow {
    pub calls: usize,
    pub repeat: usize,
    /// Calls whose conversation ran to its end.
    pub served: usize,
    pub failed: usize,
    pub silent: usize,
    /// Calls that ended any other way (transferred, cut short, rejected).
    pub other: usize,
    /// Callers who spoke over the greeting / were answered by a clear.
    pub barge_ins: usize,
    pub cleared: usize,
    pub onset_to_clear_ms: Percentiles,
    pub bot_audio_after_onset_ms: Percentiles,
    /// The most audio of a stopped greeting received after its clear.
    pub audio_after_clear_max_ms: Option<u64>,
    /// callgate's own share of each timed turn (receipts), µs.
    pub own_us: Percentiles,
    /// Speech end → first frame out of each timed turn (receipts), µs.
    pub turn_total_us: Percentiles,
    /// Turns in the receipts without `own_us`.
    pub turns_untimed: usize,
    /// Receipts of this run's calls / of them without `stats.turns`.
    pub receipts: usize,
    pub receipts_without_turns: usize,
    /// Sums over the receipts: committed barge-ins, pauses taken back.
    pub server_interruptions: u64,
    pub server_false_barge_ins: u64,
    pub resources: Resources,
    pub max_send_lag_ms: u64,
    pub media_frames_skipped: u64,
    /// The load generator kept its 20 ms media clock: only then is the run
    /// reported.
    pub generator_kept_up: bool,
}

impl InteractionRow {
    /// Summarises one run; receipts of other calls are ignored.
    pub fn new(
        setup: RunSetup,
        load: &LoadReport,
        receipts: &[Receipt],
        resources: Resources,
    ) -> InteractionRow {
        let s = &load.summary;
        let sids: HashSet<String> = load.calls.iter().map(|c| c.call_sid.to_string()).collect();
        let ours: Vec<&Receipt> = receipts
            .iter()
            .filter(|r| {
                r.carrier_call_id
                    .as_ref()
                    .is_some_and(|id| sids.contains(id))
            })
            .collect();
        let turns: Vec<_> = ours
            .iter()
            .filter_map(|r| r.turns.as_ref())
            .flatten()
            .collect();
        let barge = s.barge_in.as_ref();
        let served = s.completed + s.ended_by_bot;
        InteractionRow {
            calls: setup.calls,
            repeat: setup.repeat,
            served,
            failed: s.failed,
            silent: s.silent,
            other: s.total.saturating_sub(served + s.failed + s.silent),
            barge_ins: barge.map_or(0, |b| b.spoken),
            cleared: barge.map_or(0, |b| b.cleared),
            onset_to_clear_ms: barge.map(|b| b.onset_to_clear_ms).unwrap_or_default(),
            bot_audio_after_onset_ms: barge
                .map(|b| b.bot_audio_after_onset_ms)
                .unwrap_or_default(),
            audio_after_clear_max_ms: barge.and_then(|b| b.audio_after_clear_ms.max),
            own_us: Percentiles::of(turns.iter().filter_map(|t| t.own_us).collect()),
            turn_total_us: Percentiles::of(turns.iter().filter_map(|t| t.total_us).collect()),
            turns_untimed: turns.iter().filter(|t| t.own_us.is_none()).count(),
            receipts: ours.len(),
            receipts_without_turns: ours.iter().filter(|r| r.turns.is_none()).count(),
            server_interruptions: ours.iter().filter_map(|r| r.interruptions).sum(),
            server_false_barge_ins: ours.iter().filter_map(|r| r.false_barge_ins).sum(),
            resources,
            max_send_lag_ms: s.max_send_lag_ms,
            media_frames_skipped: s.media_frames_skipped,
            generator_kept_up: callgate_rig::measured::generator_lag(s, setup.max_lag_ms).is_none(),
        }
    }

    /// Whether the run's verdict fails (the bench exits non-zero).
    pub fn has_failures(&self, targets: Targets) -> bool {
        checks(self, targets).iter().any(|c| c.failed)
    }
}

/// `p50/p99` of millisecond values.
fn pair(p: &Percentiles) -> String {
    match (p.p50, p.p99) {
        (Some(a), Some(b)) => format!("{a}/{b}"),
        _ => "-".to_string(),
    }
}

/// Microseconds as milliseconds with two decimals.
fn ms2(us: u64) -> String {
    format!("{:.2}", us as f64 / 1000.0)
}

/// `p50/p99` of microsecond values, in ms with `digits` decimals.
fn pair_us(p: &Percentiles, digits: usize) -> String {
    let ms = |us: u64| format!("{:.digits$}", us as f64 / 1000.0);
    match (p.p50, p.p99) {
        (Some(a), Some(b)) => format!("{}/{}", ms(a), ms(b)),
        _ => "-".to_string(),
    }
}

/// The header of [`format_row`]'s columns.
pub fn table_header() -> String {
    format!(
        "{:>6} {:>3} {:>6} {:>4} {:>6} {:>11} {:>11} {:>11} {:>9} {:>11} {:>11} {:>6} {:>5} {:>7} {:>7} {:>6} {:>5}",
        "calls",
        "rep",
        "served",
        "fail",
        "silent",
        "clear/spoke",
        "onset-clear",
        "bot/onset",
        "after clr",
        "own ms",
        "turn ms",
        "turns",
        "peak",
        "srv cpu",
        "srv MiB",
        "lag ms",
        "valid"
    )
}

/// One table line: onset → clear and bot audio after onset are `p50/p99`
/// ms, own share `p50/p99` ms with two decimals, turn total `p50/p99` ms.
/// A run whose generator lagged shows none of the callers' figures (lag
/// inflates them); the server's own stamps in its receipts do not depend
/// on the generator, so its own share is still shown, marked as such.
pub fn format_row(r: &InteractionRow) -> String {
    if !r.generator_kept_up {
        return format!(
            "{:>6} {:>3}  NOT REPORTED: the load generator lagged {} ms and skipped {} frames \
             (server receipts only: own share {} ms over {} turns; {} served, {} silent, \
             {} otherwise; peak {} active; srv cpu {:.1} s)",
            r.calls,
            r.repeat,
            r.max_send_lag_ms,
            r.media_frames_skipped,
            pair_us(&r.own_us, 2),
            r.own_us.count,
            r.served,
            r.silent,
            r.other,
            r.resources.peaks.active,
            r.resources.server_cpu_s,
        );
    }
    let res = &r.resources;
    format!(
        "{:>6} {:>3} {:>6} {:>4} {:>6} {:>11} {:>11} {:>11} {:>9} {:>11} {:>11} {:>6} {:>5} {:>7.1} {:>7.1} {:>6} {:>5}",
        r.calls,
        r.repeat,
        r.served,
        r.failed,
        r.silent,
        format!("{}/{}", r.cleared, r.barge_ins),
        pair(&r.onset_to_clear_ms),
        pair(&r.bot_audio_after_onset_ms),
        r.audio_after_clear_max_ms
            .map_or_else(|| "-".to_string(), |v| v.to_string()),
        pair_us(&r.own_us, 2),
        pair_us(&r.turn_total_us, 0),
        r.own_us.count,
        res.peaks.active,
        res.server_cpu_s,
        res.peaks.rss_kib as f64 / 1024.0,
        r.max_send_lag_ms,
        "yes",
    )
}

/// The line under a row: what the server's receipts say.
pub fn format_server(r: &InteractionRow) -> String {
    format!(
        "  {} calls: {} receipts ({} without turn timings, {} untimed turns); server counted {} \
         interruptions and {} false barge-ins; {} ended otherwise; wall {:.1} s, sims {:.1} / \
         load {:.1} / Postgres {:.1} / other processes {:.1} CPU s",
        r.calls,
        r.receipts,
        r.receipts_without_turns,
        r.turns_untimed,
        r.server_interruptions,
        r.server_false_barge_ins,
        r.other,
        r.resources.wall_s,
        r.resources.sims_cpu_s,
        r.resources.load_cpu_s,
        r.resources.postgres_cpu_s,
        r.resources.others_cpu_s()
    )
}

/// Every part of `r`'s verdict, in reading order.
fn checks(r: &InteractionRow, t: Targets) -> Vec<Check> {
    if !r.generator_kept_up {
        return vec![Check::judged(
            format!(
                "NOT A VALID MEASUREMENT: the load generator lagged {} ms and skipped {} frames",
                r.max_send_lag_ms, r.media_frames_skipped
            ),
            true,
        )];
    }
    let mut out = vec![
        Check::judged(
            format!(
                "{} of {} served ({} failed, {} silent, {} otherwise)",
                r.served, r.calls, r.failed, r.silent, r.other
            ),
            r.served < r.calls,
        ),
        Check::judged(
            format!(
                "{} of {} callers spoke over the greeting, {} answered by a clear",
                r.barge_ins, r.calls, r.cleared
            ),
            r.cleared < r.calls,
        ),
    ];
    out.extend(barge_checks(r, t));
    out.push(Check::judged(
        format!(
            "audio of the stopped greeting after its clear: {} ms at most",
            r.audio_after_clear_max_ms
                .map_or_else(|| "-".to_string(), |v| v.to_string())
        ),
        r.audio_after_clear_max_ms != Some(0),
    ));
    out.push(own_check(r));
    out
}

/// Onset → clear and bot audio after onset against `min_speech_ms`.
fn barge_checks(r: &InteractionRow, t: Targets) -> Vec<Check> {
    let Some(min) = t.min_speech_ms else {
        return vec![Check::judged(
            "targets unknown: the server's configuration has no call.barge_in.min_speech_ms"
                .to_string(),
            true,
        )];
    };
    let within = |p: &Percentiles, limit: u64| p.p99.is_some_and(|v| v <= limit);
    let cell = |p: &Percentiles| p.p99.map_or_else(|| "-".to_string(), |v| v.to_string());
    vec![
        Check::judged(
            format!(
                "onset → clear p99 {} ms (at most min_speech_ms {min} + {CLEAR_SLACK_MS})",
                cell(&r.onset_to_clear_ms)
            ),
            !within(&r.onset_to_clear_ms, min + CLEAR_SLACK_MS),
        ),
        Check::judged(
            format!(
                "bot audio after onset p99 {} ms (at most {min} + {AUDIO_SLACK_MS})",
                cell(&r.bot_audio_after_onset_ms)
            ),
            !within(&r.bot_audio_after_onset_ms, min + AUDIO_SLACK_MS),
        ),
    ]
}

fn own_check(r: &InteractionRow) -> Check {
    match r.own_us.p99 {
        Some(p99) => Check::judged(
            format!(
                "callgate's own share of turn latency p99 {} ms over {} turns (target {})",
                ms2(p99),
                r.own_us.count,
                ms2(OWN_P99_TARGET_US)
            ),
            p99 > OWN_P99_TARGET_US,
        ),
        None => Check::judged(
            "callgate's own share of turn latency not measured: no receipt has stats.turns[].own_us"
                .to_string(),
            true,
        ),
    }
}

/// Plain-language verdicts, one per run: `PASS` or `FAIL` and why.
pub fn verdicts(rows: &[InteractionRow], t: Targets) -> Vec<String> {
    rows.iter()
        .map(|r| {
            let checks = checks(r, t);
            let verdict = if checks.iter().any(|c| c.failed) {
                "FAIL"
            } else {
                "PASS"
            };
            let parts: Vec<&str> = checks.iter().map(|c| c.text.as_str()).collect();
            format!(
                "{} calls (run {}): {verdict} — {}",
                r.calls,
                r.repeat,
                parts.join("; ")
            )
        })
        .collect()
}

/// Median and range of `values` (nearest-rank median: the lower middle).
fn spread(mut values: Vec<u64>) -> Option<(u64, u64, u64)> {
    values.sort_unstable();
    let median = *values.get(values.len().checked_sub(1)? / 2)?;
    Some((median, *values.first()?, *values.last()?))
}

/// `median (min–max)` of one figure over the valid runs, via `show`.
fn spread_cell(
    rows: &[&InteractionRow],
    figure: impl Fn(&InteractionRow) -> Option<u64>,
    show: impl Fn(u64) -> String,
) -> String {
    match spread(rows.iter().filter_map(|r| figure(r)).collect()) {
        Some((m, lo, hi)) if lo == hi => show(m),
        Some((m, lo, hi)) => format!("{} ({}–{})", show(m), show(lo), show(hi)),
        None => "-".to_string(),
    }
}

/// One line per run size that ran more than once: the median and spread of
/// each figure over its valid runs (runs that were not reported are left out).
pub fn repeat_summaries(rows: &[InteractionRow]) -> Vec<String> {
    let mut sizes: Vec<usize> = Vec::new();
    for r in rows {
        if !sizes.contains(&r.calls) {
            sizes.push(r.calls);
        }
    }
    sizes
        .into_iter()
        .filter_map(|calls| {
            let all: Vec<&InteractionRow> = rows.iter().filter(|r| r.calls == calls).collect();
            (all.len() > 1).then(|| repeat_line(calls, &all))
        })
        .collect()
}

fn repeat_line(calls: usize, all: &[&InteractionRow]) -> String {
    let valid: Vec<&InteractionRow> = all
        .iter()
        .copied()
        .filter(|r| r.generator_kept_up)
        .collect();
    let ms = |v: u64| v.to_string();
    let ms_us = |v: u64| ms2(v);
    format!(
        "{calls} calls × {} runs ({} reported), median (range): onset → clear p50 {} p99 {} ms; \
         bot audio after onset p50 {} p99 {} ms; audio after clear max {} ms; \
         own share p50 {} p99 {} ms",
        all.len(),
        valid.len(),
        spread_cell(&valid, |r| r.onset_to_clear_ms.p50, ms),
        spread_cell(&valid, |r| r.onset_to_clear_ms.p99, ms),
        spread_cell(&valid, |r| r.bot_audio_after_onset_ms.p50, ms),
        spread_cell(&valid, |r| r.bot_audio_after_onset_ms.p99, ms),
        spread_cell(&valid, |r| r.audio_after_clear_max_ms, ms),
        spread_cell(&valid, |r| r.own_us.p50, ms_us),
        spread_cell(&valid, |r| r.own_us.p99, ms_us),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use callgate_load::{BargeInRecord, CallRecord, CallSid, Outcome};
    use callgate_rig::measured::receipts::TurnTiming;
    use std::time::Duration;

    fn call(index: usize, clear_ms: Option<u64>, over_ms: u64) -> CallRecord {
        CallRecord {
            index,
            call_sid: CallSid::from_bytes([index as u8; 16]),
            outcome: Outcome::Completed,
            max_send_lag_ms: 4,
            barge_in: Some(BargeInRecord {
                into_turn_ms: 800,
                onset_ms: 1_200,
                onset_to_clear_ms: clear_ms,
                bot_audio_after_onset_ms: over_ms,
                audio_after_clear_ms: clear_ms.map(|_| 0),
            }),
            ..CallRecord::default()
        }
    }

    fn receipt(index: usize, own: &[u64]) -> Receipt {
        let turns = own
            .iter()
            .enumerate()
            .map(|(i, us)| TurnTiming {
                turn: i as u64 + 1,
                own_us: Some(*us),
                total_us: Some(500_000 + us),
                ..TurnTiming::default()
            })
            .collect();
        Receipt {
            carrier_call_id: Some(CallSid::from_bytes([index as u8; 16]).to_string()),
            turns: Some(turns),
            interruptions: Some(1),
            false_barge_ins: Some(0),
        }
    }

    fn setup(calls: usize, repeat: usize) -> RunSetup {
        RunSetup {
            calls,
            repeat,
            max_lag_ms: 20,
        }
    }

    fn run(calls: Vec<CallRecord>, receipts: &[Receipt], repeat: usize) -> InteractionRow {
        let n = calls.len();
        let load = LoadReport::new(calls, Duration::from_secs(20));
        InteractionRow::new(setup(n, repeat), &load, receipts, Resources::default())
    }

    const TARGETS: Targets = Targets {
        min_speech_ms: Some(60),
    };

    #[test]
    fn a_row_pools_callers_and_receipts_and_passes_within_the_targets() {
        let calls = vec![call(0, Some(45), 40), call(1, Some(62), 60)];
        let mut foreign = receipt(9, &[9_999_999]);
        foreign.carrier_call_id = Some("CAother".into());
        let receipts = [receipt(0, &[800, 900]), receipt(1, &[1_200]), foreign];
        let r = run(calls, &receipts, 1);
        assert_eq!((r.served, r.barge_ins, r.cleared), (2, 2, 2));
        assert_eq!(r.onset_to_clear_ms.p99, Some(62));
        assert_eq!(r.audio_after_clear_max_ms, Some(0));
        assert_eq!(
            (r.receipts, r.own_us.count, r.own_us.p99),
            (2, 3, Some(1_200))
        );
        assert_eq!(r.server_interruptions, 2);
        assert!(
            !r.has_failures(TARGETS),
            "{:?}",
            verdicts(std::slice::from_ref(&r), TARGETS)
        );
        let line = format_row(&r);
        assert_eq!(
            line.chars().count(),
            table_header().chars().count(),
            "{line}"
        );
        assert!(line.contains("0.90/1.20"), "{line}");
        assert!(line.contains("45/62"), "{line}");
        let v = verdicts(std::slice::from_ref(&r), TARGETS);
        assert!(
            v[0].starts_with("2 calls (run 1): PASS — 2 of 2 served"),
            "{}",
            v[0]
        );
        assert!(
            v[0].contains("own share of turn latency p99 1.20 ms over 3 turns (target 2.00) (ok)"),
            "{}",
            v[0]
        );
    }

    #[test]
    fn a_slow_stop_an_unanswered_barge_in_or_a_slow_server_fail_the_run() {
        let r = run(
            vec![call(0, Some(81), 40), call(1, None, 400)],
            &[receipt(0, &[2_500])],
            1,
        );
        let v = verdicts(std::slice::from_ref(&r), TARGETS);
        assert!(v[0].contains(": FAIL — "), "{}", v[0]);
        assert!(
            v[0].contains("2 callers spoke over the greeting, 1 answered by a clear (FAIL)"),
            "{}",
            v[0]
        );
        assert!(
            v[0].contains("onset → clear p99 81 ms (at most min_speech_ms 60 + 20) (FAIL)"),
            "{}",
            v[0]
        );
        assert!(
            v[0].contains("bot audio after onset p99 400 ms (at most 60 + 40) (FAIL)"),
            "{}",
            v[0]
        );
        assert!(
            v[0].contains("p99 2.50 ms over 1 turns (target 2.00) (FAIL)"),
            "{}",
            v[0]
        );
        // Without the server's figures nothing can pass.
        let unknown = Targets {
            min_speech_ms: None,
        };
        let ok = run(vec![call(0, Some(40), 40)], &[receipt(0, &[500])], 1);
        assert!(ok.has_failures(unknown));
        let untimed = run(vec![call(0, Some(40), 40)], &[], 1);
        assert!(untimed.has_failures(TARGETS));
        assert!(verdicts(&[untimed], TARGETS)[0].contains("not measured"));
    }

    #[test]
    fn a_lagging_generator_is_not_reported() {
        let mut slow = call(0, Some(40), 40);
        slow.max_send_lag_ms = 35;
        let r = run(vec![slow], &[receipt(0, &[500])], 2);
        assert!(!r.generator_kept_up);
        assert!(r.has_failures(TARGETS));
        let line = format_row(&r);
        assert!(
            line.contains("NOT REPORTED: the load generator lagged 35 ms"),
            "{line}"
        );
        assert!(!line.contains("40/40"), "{line}");
        assert!(
            line.contains("server receipts only: own share 0.50/0.50 ms over 1 turns"),
            "{line}"
        );
        let v = verdicts(std::slice::from_ref(&r), TARGETS);
        assert_eq!(v.len(), 1);
        assert!(v[0].contains("NOT A VALID MEASUREMENT"), "{}", v[0]);
    }

    #[test]
    fn repeats_report_the_median_and_range_of_the_valid_runs() {
        let a = run(vec![call(0, Some(40), 40)], &[receipt(0, &[500])], 1);
        let b = run(vec![call(0, Some(60), 60)], &[receipt(0, &[900])], 2);
        let c = run(vec![call(0, Some(50), 40)], &[receipt(0, &[700])], 3);
        let mut lagged = run(vec![call(0, Some(999), 999)], &[], 4);
        lagged.generator_kept_up = false;
        let single = run(vec![call(0, Some(45), 40), call(1, Some(45), 40)], &[], 1);
        let lines = repeat_summaries(&[a, b, c, lagged, single]);
        assert_eq!(
            lines.len(),
            1,
            "a size that ran once has no spread: {lines:?}"
        );
        let line = &lines[0];
        assert!(line.starts_with("1 calls × 4 runs (3 reported)"), "{line}");
        assert!(
            line.contains("onset → clear p50 50 (40–60) p99 50 (40–60) ms"),
            "{line}"
        );
        assert!(line.contains("own share p50 0.70 (0.50–0.90)"), "{line}");
        assert!(line.contains("audio after clear max 0 ms"), "{line}");
        assert_eq!(spread(vec![]), None);
        assert_eq!(spread(vec![3, 1, 2, 4]), Some((2, 1, 4)));
    }

    #[test]
    fn targets_come_from_the_server_configuration() {
        let cfg = serde_json::json!({"call": {"barge_in": {"policy": "reversible", "min_speech_ms": 60}}});
        assert_eq!(Targets::from_config(&cfg).min_speech_ms, Some(60));
        let old = serde_json::json!({"call": {"barge_in": "transcript"}});
        assert_eq!(Targets::from_config(&old).min_speech_ms, None);
    }
}
