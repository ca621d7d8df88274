//! The row, table and verdicts computed from made-up records.

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
