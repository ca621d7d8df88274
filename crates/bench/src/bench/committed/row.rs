//! One committed-bench run as measured (`CommittedRow`), its validity, the
//! per-call figures, and the table and summary lines. Pure: tested on rows.

use std::fmt::Write as _;

use serde::Serialize;

use crate::bench::sip::ledger::Tally;
use crate::bench::sip::row::{Ingress, Spread};

/// The measured window, all calls holding.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Window {
    pub wall_s: f64,
    pub server_cpu_s: f64,
    /// This process: the callers (and the bench's bookkeeping).
    pub generator_cpu_s: f64,
    pub sims_cpu_s: f64,
    /// The server's RSS and descriptors at the window's end.
    pub rss_kib: u64,
    pub fds: usize,
    /// Calls still holding when the window closed.
    pub holding_at_end: usize,
}

/// What the callers recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Held {
    /// Call records returned (one per call unless a task died).
    pub records: usize,
    pub served: usize,
    pub refused: usize,
    pub silent: usize,
    pub failed: usize,
    /// Bot replies heard over all calls (one per call expected).
    pub replies_heard: usize,
    /// Why the generator did not keep up, when it did not.
    pub lagged: Option<String>,
}

/// One run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommittedRow {
    pub ingress: Ingress,
    pub calls: usize,
    pub repeat: usize,
    /// First dial → every call holding, s.
    pub commit_s: Option<f64>,
    /// Why the calls did not all come to hold, when they did not.
    pub not_committed: Option<String>,
    pub idle_rss_kib: u64,
    pub idle_fds: usize,
    pub window: Option<Window>,
    pub held: Held,
    pub server: Tally,
}

impl CommittedRow {
    /// Server CPU per call over the window, % of one core.
    pub fn cpu_pct_per_call(&self) -> Option<f64> {
        let w = self.window?;
        (w.wall_s > 0.0).then(|| w.server_cpu_s / w.wall_s / self.calls as f64 * 100.0)
    }

    /// RSS above the idle baseline per call at the window's end, KiB.
    pub fn rss_kib_per_call(&self) -> Option<f64> {
        let w = self.window?;
        Some((w.rss_kib as f64 - self.idle_rss_kib as f64) / self.calls as f64)
    }

    /// Descriptors above the idle baseline per call.
    pub fn fds_per_call(&self) -> Option<f64> {
        let w = self.window?;
        Some((w.fds as f64 - self.idle_fds as f64) / self.calls as f64)
    }

    /// The generator's CPU over the window, % of one core.
    pub fn generator_pct(&self) -> Option<f64> {
        let w = self.window?;
        (w.wall_s > 0.0).then(|| w.generator_cpu_s / w.wall_s * 100.0)
    }

    /// Why this run does not measure N committed calls; empty when it does.
    pub fn invalid_because(&self) -> Vec<String> {
        let n = self.calls;
        let mut why = Vec::new();
        if let Some(w) = &self.not_committed {
            why.push(w.clone());
        }
        if let Some(w) = &self.window
            && w.holding_at_end != n
        {
            why.push(format!(
                "{} of {n} calls still held at the window's end",
                w.holding_at_end
            ));
        }
        let (h, s) = (&self.held, &self.server);
        if h.refused + s.refused > 0 {
            why.push(format!(
                "refused: {} by the callers, {} by the server",
                h.refused, s.refused
            ));
        }
        if h.records != n || h.served != n || s.served != n {
            why.push(format!(
                "served {} by the callers ({} records), {} by the server's rows, of {n}",
                h.served, h.records, s.served
            ));
        }
        if h.silent + h.failed > 0 {
            why.push(format!("{} calls silent, {} failed", h.silent, h.failed));
        }
        if h.replies_heard != n {
            why.push(format!(
                "{} replies heard, one per call expected",
                h.replies_heard
            ));
        }
        if s.not_closed > 0 {
            why.push(format!("{} ledger rows not closed", s.not_closed));
        }
        if let Some(l) = &h.lagged {
            why.push(format!("the generator lagged: {l}"));
        }
        if s.rtp.concealed > 0 {
            why.push(format!(
                "the server concealed {} frames of the callers' audio",
                s.rtp.concealed
            ));
        }
        why
    }

    pub fn is_valid(&self) -> bool {
        self.invalid_because().is_empty()
    }
}

pub fn table_header() -> String {
    format!(
        "{:<7} {:>5} {:>3} {:>8} {:>8} {:>9} {:>10} {:>8} {:>8} {:>9} {:>8} {:>6}",
        "path",
        "N",
        "rep",
        "commit s",
        "srv cpu",
        "%core/cl",
        "KiB/call",
        "fds/call",
        "idle MiB",
        "gen %core",
        "sims cpu",
        "valid"
    )
}

pub fn format_row(r: &CommittedRow) -> String {
    let f = |v: Option<f64>, d: usize| v.map_or_else(|| "–".into(), |x| format!("{x:.d$}"));
    let w = r.window.as_ref();
    let mut line = format!(
        "{:<7} {:>5} {:>3} {:>8} {:>8} {:>9} {:>10} {:>8} {:>8.1} {:>9} {:>8} {:>6}",
        r.ingress.label(),
        r.calls,
        r.repeat,
        f(r.commit_s, 1),
        f(w.map(|w| w.server_cpu_s), 2),
        f(r.cpu_pct_per_call(), 4),
        f(r.rss_kib_per_call(), 1),
        f(r.fds_per_call(), 2),
        r.idle_rss_kib as f64 / 1024.0,
        f(r.generator_pct(), 1),
        f(w.map(|w| w.sims_cpu_s), 2),
        if r.is_valid() { "yes" } else { "NO" },
    );
    if !r.server.end_reasons.is_empty() {
        let reasons: Vec<String> = r
            .server
            .end_reasons
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = write!(line, "\n       end reasons: {}", reasons.join(", "));
    }
    line
}

/// Per (N, ingress): the median and spread of the per-call figures over
/// the valid runs; per N, each ingress against the first measured.
pub fn format_summary(rows: &[CommittedRow]) -> Vec<String> {
    let mut keys: Vec<(usize, Ingress)> = Vec::new();
    for r in rows {
        if !keys.contains(&(r.calls, r.ingress)) {
            keys.push((r.calls, r.ingress));
        }
    }
    let mut lines = vec![format!(
        "{:>5} {:<7} {:>6} {:>22} {:>22} {:>16}",
        "N", "path", "valid", "% of a core per call", "RSS KiB per call", "fds per call"
    )];
    let spread = |n: usize, i: Ingress, f: fn(&CommittedRow) -> Option<f64>| {
        Spread::of(
            rows.iter()
                .filter(|r| r.calls == n && r.ingress == i && r.is_valid())
                .filter_map(f),
        )
    };
    let show = |s: Option<Spread>, d: usize| s.map_or_else(|| "–".into(), |s| s.show(d));
    for &(n, i) in &keys {
        let of = rows.iter().filter(|r| r.calls == n && r.ingress == i);
        let valid = of.clone().filter(|r| r.is_valid()).count();
        lines.push(format!(
            "{:>5} {:<7} {:>6} {:>22} {:>22} {:>16}",
            n,
            i.label(),
            format!("{valid}/{}", of.count()),
            show(spread(n, i, CommittedRow::cpu_pct_per_call), 4),
            show(spread(n, i, CommittedRow::rss_kib_per_call), 1),
            show(spread(n, i, CommittedRow::fds_per_call), 2),
        ));
        let first = keys.iter().find(|(m, _)| *m == n).map(|k| k.1);
        if let Some(base) = first.filter(|b| *b != i) {
            let ratio =
                |f: fn(&CommittedRow) -> Option<f64>| match (spread(n, i, f), spread(n, base, f)) {
                    (Some(a), Some(b)) if b.median > 0.0 => format!("{:.2}×", a.median / b.median),
                    _ => "–".into(),
                };
            lines.push(format!(
                "      {}/{}: CPU per call {}, RSS per call {}",
                i.label(),
                base.label(),
                ratio(CommittedRow::cpu_pct_per_call),
                ratio(CommittedRow::rss_kib_per_call)
            ));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ingress: Ingress, server_cpu_s: f64, rss_kib: u64) -> CommittedRow {
        CommittedRow {
            ingress,
            calls: 100,
            repeat: 1,
            commit_s: Some(4.0),
            not_committed: None,
            idle_rss_kib: 20_000,
            idle_fds: 30,
            window: Some(Window {
                wall_s: 30.0,
                server_cpu_s,
                generator_cpu_s: 6.0,
                sims_cpu_s: 1.0,
                rss_kib,
                fds: 330,
                holding_at_end: 100,
            }),
            held: Held {
                records: 100,
                served: 100,
                refused: 0,
                silent: 0,
                failed: 0,
                replies_heard: 100,
                lagged: None,
            },
            server: Tally {
                served: 100,
                ..Tally::default()
            },
        }
    }

    #[test]
    fn per_call_figures_are_over_the_window_and_above_the_baseline() {
        let r = row(Ingress::Twilio, 2.4, 40_000);
        assert!((r.cpu_pct_per_call().unwrap() - 0.08).abs() < 1e-9);
        assert!((r.rss_kib_per_call().unwrap() - 200.0).abs() < 1e-9);
        assert!((r.fds_per_call().unwrap() - 3.0).abs() < 1e-9);
        assert!((r.generator_pct().unwrap() - 20.0).abs() < 1e-9);
        assert!(r.is_valid(), "{:?}", r.invalid_because());
    }

    #[test]
    fn a_run_that_did_not_hold_every_call_is_not_a_measurement() {
        let mut r = row(Ingress::Webrtc, 3.0, 50_000);
        r.window.as_mut().unwrap().holding_at_end = 99;
        r.server.rtp.concealed = 4;
        r.held.replies_heard = 98;
        let why = r.invalid_because().join("; ");
        assert!(why.contains("99 of 100 calls still held"), "{why}");
        assert!(why.contains("concealed 4 frames"), "{why}");
        assert!(why.contains("98 replies heard"), "{why}");
        let mut never = row(Ingress::Twilio, 0.0, 0);
        never.window = None;
        never.not_committed = Some("60 of 100 calls held after 180 s".into());
        assert!(!never.is_valid());
        assert_eq!(never.cpu_pct_per_call(), None);
    }

    #[test]
    fn the_summary_sets_each_ingress_against_the_first() {
        let rows = [
            row(Ingress::Twilio, 2.4, 40_000),
            row(Ingress::Twilio, 2.7, 41_000),
            row(Ingress::Webrtc, 4.8, 60_000),
        ];
        let lines = format_summary(&rows).join("\n");
        assert!(
            lines.contains("webrtc/twilio: CPU per call 2.00×"),
            "{lines}"
        );
        assert!(lines.contains("RSS per call 2.00×"), "{lines}");
        assert!(lines.contains("2/2"), "{lines}");
    }
}
