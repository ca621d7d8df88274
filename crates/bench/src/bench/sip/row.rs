//! One run of `callgate-bench sip` as a table row, its validity, and the
//! median and spread of repeated runs per path and size, side by side.
//! Pure: no I/O, so the arithmetic and the layout are tested on numbers.

use std::fmt::Write as _;

use serde::Serialize;

use super::ledger::Tally;

/// KiB in a MiB.
const KIB_PER_MIB: f64 = 1_024.0;

/// Which ingress a run's calls came in by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ingress {
    /// Twilio Media Streams over WebSocket, placed by the load tool.
    Twilio,
    /// SIP/RTP, placed by sipp (`load_uac.xml`).
    Sip,
    /// WebRTC (Opus over DTLS-SRTP), placed by the load tool's str0m peer.
    Webrtc,
}

impl Ingress {
    /// The path compared with Twilio in `rows`: the first other ingress
    /// measured (a bench compares Twilio with one path), SIP when none is.
    pub fn compared_in(rows: &[SipRow]) -> Ingress {
        rows.iter()
            .map(|r| r.ingress)
            .find(|i| *i != Ingress::Twilio)
            .unwrap_or(Ingress::Sip)
    }

    /// `call_ledger.ingress` / `admission_rejections.ingress`.
    pub fn label(self) -> &'static str {
        match self {
            Ingress::Twilio => "twilio",
            Ingress::Sip => "sip",
            Ingress::Webrtc => "webrtc",
        }
    }
}

/// What the processes used during a run (copied out of the rig's figures).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Usage {
    pub wall_s: f64,
    pub server_cpu_s: f64,
    /// The load generator: this process for Twilio, sipp for SIP.
    pub generator_cpu_s: f64,
    /// CPU of every process on the machine but the rig's.
    pub others_cpu_s: f64,
    /// The server's RSS once idle, just before the run.
    pub idle_rss_kib: u64,
    /// The server's highest RSS sampled during the run (every 100 ms).
    pub peak_rss_kib: u64,
    /// RSS samples taken (none: nothing was measured).
    pub rss_samples: u64,
}

/// What the load generator says of its own run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GeneratorView {
    /// Calls the generator saw to their end (Twilio: completed or ended by
    /// the bot; SIP: sipp's answered calls that ended successfully).
    pub served: usize,
    /// Calls it saw refused (Twilio: rejected; SIP: any 3xx–6xx answer).
    pub refused: usize,
    /// How the generator fell behind, if it did (Twilio: its media clock
    /// lagged or skipped frames; SIP: the server received sipp's RTP late
    /// or lost).
    pub lagged: Option<String>,
    /// Calls that went wrong as the generator saw them (Twilio: failed or
    /// silent; SIP: sipp failed calls, exited non-zero or timed out).
    pub faults: Option<String>,
}

/// One run, summarised.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SipRow {
    pub ingress: Ingress,
    pub calls: usize,
    pub repeat: usize,
    /// SIP only: sipp's silence after the speech.
    pub hold_ms: Option<u32>,
    pub generator: GeneratorView,
    pub server: Tally,
    pub usage: Usage,
}

impl SipRow {
    /// Server CPU per offered call, ms.
    pub fn cpu_ms_per_call(&self) -> f64 {
        self.usage.server_cpu_s * 1_000.0 / self.calls.max(1) as f64
    }

    /// Peak RSS above the idle baseline per offered call, KiB.
    pub fn rss_kib_per_call(&self) -> f64 {
        self.rss_above_idle_kib() / self.calls.max(1) as f64
    }

    /// Peak RSS, MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        self.usage.peak_rss_kib as f64 / KIB_PER_MIB
    }

    /// Peak RSS above the idle baseline, KiB.
    pub fn rss_above_idle_kib(&self) -> f64 {
        self.usage
            .peak_rss_kib
            .saturating_sub(self.usage.idle_rss_kib) as f64
    }

    /// Why this run is not a valid measurement; empty when it is.
    pub fn invalid_because(&self) -> Vec<String> {
        let (n, s, g) = (self.calls, &self.server, &self.generator);
        let mut why = Vec::new();
        if s.refused > 0 || g.refused > 0 {
            why.push(format!(
                "{} refused by the server's rows, {} by the generator's view: capacity must be above N",
                s.refused, g.refused
            ));
        }
        if s.served != n || g.served != n {
            why.push(format!(
                "{} of {n} calls served and closed in the ledger, {} by the generator's view",
                s.served, g.served
            ));
        }
        if s.not_closed > 0 || s.other_ingress > 0 {
            why.push(format!(
                "{} ledger rows not closed as completed, {} of another ingress",
                s.not_closed, s.other_ingress
            ));
        }
        if let Some(lag) = &g.lagged {
            why.push(format!("the load generator lagged: {lag}"));
        }
        if let Some(faults) = &g.faults {
            why.push(format!("calls went wrong: {faults}"));
        }
        if self.usage.rss_samples == 0 {
            why.push("no RSS sample was taken".to_string());
        }
        why
    }

    pub fn is_valid(&self) -> bool {
        self.invalid_because().is_empty()
    }
}

/// The column headings of [`format_row`].
pub fn table_header() -> String {
    format!(
        "{:<6} {:>5} {:>3} {:>7} {:>7} {:>7} {:>7} {:>9} {:>8} {:>9} {:>8} {:>6} {:>7} {:>6}  valid",
        "path",
        "N",
        "rep",
        "served",
        "call s",
        "turns",
        "srv cpu",
        "ms/call",
        "peak MiB",
        "KiB/call",
        "idle MiB",
        "wall s",
        "gen cpu",
        "others",
    )
}

/// One line per run: path, N, served (ledger), mean call length and bot
/// turns per call (receipts), server CPU s, CPU ms per call, peak RSS MiB,
/// RSS KiB per call above idle, idle RSS, wall time, generator and
/// other-process CPU s, and whether the run is a valid measurement.
pub fn format_row(r: &SipRow) -> String {
    let u = &r.usage;
    format!(
        "{:<6} {:>5} {:>3} {:>7} {:>7.1} {:>7.2} {:>7.2} {:>9.1} {:>8.1} {:>9.1} {:>8.1} {:>6.1} {:>7.2} {:>6.2}  {}",
        r.ingress.label(),
        r.calls,
        r.repeat,
        format!("{}/{}", r.server.served, r.calls),
        r.server.mean_call_s,
        r.server.mean_turns,
        u.server_cpu_s,
        r.cpu_ms_per_call(),
        r.peak_rss_mib(),
        r.rss_kib_per_call(),
        u.idle_rss_kib as f64 / KIB_PER_MIB,
        u.wall_s,
        u.generator_cpu_s,
        u.others_cpu_s,
        if r.is_valid() { "yes" } else { "NO" },
    )
}

/// The line under a row: why it is invalid, and the media figures the
/// server recorded for the run's calls.
pub fn format_detail(r: &SipRow) -> String {
    let mut line = String::from("       ");
    let m = &r.server.rtp;
    if let Some(hold) = r.hold_ms {
        let _ = write!(line, "hold_ms {hold}; ");
    }
    if r.ingress == Ingress::Sip {
        let _ = write!(
            line,
            "server RTP in: {} late, {} lost, {} concealed, max jitter {:.1} ms; ",
            m.late, m.lost, m.concealed, m.max_jitter_ms
        );
    }
    if r.ingress == Ingress::Webrtc {
        let _ = write!(
            line,
            "server Opus in: {} packets, {} frames concealed; ",
            m.packets_in, m.concealed
        );
    }
    let _ = write!(line, "end reasons: {}", list(&r.server.end_reasons));
    for why in r.invalid_because() {
        let _ = write!(line, "\n       NOT A VALID MEASUREMENT: {why}");
    }
    line
}

fn list(m: &std::collections::BTreeMap<String, usize>) -> String {
    if m.is_empty() {
        return "none".to_string();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Median and range of a figure over repeated runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Runs it was taken over.
    pub runs: usize,
}

impl Spread {
    /// Nearest-rank median (the lower middle of an even count, as the
    /// interaction bench's) and range; `None` for no values.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        let median = *v.get(v.len().checked_sub(1)? / 2)?;
        Some(Spread {
            median,
            min: *v.first()?,
            max: *v.last()?,
            runs: v.len(),
        })
    }

    /// `median (min–max)`, or just the median when every run agreed at
    /// this precision.
    pub fn show(&self, decimals: usize) -> String {
        let f = |x: f64| format!("{x:.decimals$}");
        if f(self.min) == f(self.max) {
            f(self.median)
        } else {
            format!("{} ({}–{})", f(self.median), f(self.min), f(self.max))
        }
    }
}

/// The summary of one ingress at one size, over its valid runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathSummary {
    pub ingress: Ingress,
    pub calls: usize,
    pub runs: usize,
    pub valid: usize,
    pub cpu_ms_per_call: Option<Spread>,
    pub rss_kib_per_call: Option<Spread>,
    pub peak_rss_mib: Option<Spread>,
    pub call_s: Option<Spread>,
    pub turns: Option<Spread>,
    /// The run's totals, for [`Marginal`].
    pub server_cpu_s: Option<Spread>,
    pub rss_above_idle_kib: Option<Spread>,
}

impl PathSummary {
    pub fn of(rows: &[SipRow], ingress: Ingress, calls: usize) -> PathSummary {
        let all: Vec<&SipRow> = rows
            .iter()
            .filter(|r| r.ingress == ingress && r.calls == calls)
            .collect();
        let valid: Vec<&SipRow> = all.iter().copied().filter(|r| r.is_valid()).collect();
        let over = |f: fn(&SipRow) -> f64| Spread::of(valid.iter().map(|r| f(r)));
        PathSummary {
            ingress,
            calls,
            runs: all.len(),
            valid: valid.len(),
            cpu_ms_per_call: over(SipRow::cpu_ms_per_call),
            rss_kib_per_call: over(SipRow::rss_kib_per_call),
            peak_rss_mib: over(SipRow::peak_rss_mib),
            call_s: over(|r| r.server.mean_call_s),
            turns: over(|r| r.server.mean_turns),
            server_cpu_s: over(|r| r.usage.server_cpu_s),
            rss_above_idle_kib: over(SipRow::rss_above_idle_kib),
        }
    }
}

/// The cost of one more call between two sizes of one path: the
/// difference of the median totals over the difference of N. What a fresh
/// server spends once (its first calls fill pools, caches and the
/// allocator's arenas) is in both totals and cancels.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Marginal {
    pub from: usize,
    pub to: usize,
    pub cpu_ms_per_call: f64,
    pub rss_kib_per_call: f64,
}

impl Marginal {
    pub fn between(a: &PathSummary, b: &PathSummary) -> Option<Marginal> {
        let dn = b.calls.checked_sub(a.calls).filter(|d| *d > 0)? as f64;
        let diff =
            |x: &Option<Spread>, y: &Option<Spread>| Some(y.as_ref()?.median - x.as_ref()?.median);
        Some(Marginal {
            from: a.calls,
            to: b.calls,
            cpu_ms_per_call: diff(&a.server_cpu_s, &b.server_cpu_s)? * 1_000.0 / dn,
            rss_kib_per_call: diff(&a.rss_above_idle_kib, &b.rss_above_idle_kib)? / dn,
        })
    }
}

/// Every size in the order first run, with both paths' summaries.
pub fn summaries(rows: &[SipRow]) -> Vec<(PathSummary, PathSummary)> {
    let mut sizes: Vec<usize> = Vec::new();
    for r in rows {
        if !sizes.contains(&r.calls) {
            sizes.push(r.calls);
        }
    }
    let other = Ingress::compared_in(rows);
    sizes
        .into_iter()
        .map(|n| {
            (
                PathSummary::of(rows, Ingress::Twilio, n),
                PathSummary::of(rows, other, n),
            )
        })
        .collect()
}

/// The summary table: per size, Twilio and SIP side by side, median
/// (min–max) over the valid runs, and SIP over Twilio of the medians.
pub fn format_summary(rows: &[SipRow]) -> Vec<String> {
    let mut out = vec![format!(
        "{:>5} {:<7} {:>5} {:>20} {:>20} {:>18} {:>16} {:>14}",
        "N", "path", "valid", "CPU ms/call", "RSS KiB/call", "peak RSS MiB", "call s", "turns/call"
    )];
    for (twilio, sip) in summaries(rows) {
        for s in [&twilio, &sip] {
            let cell =
                |v: &Option<Spread>, d| v.as_ref().map_or_else(|| "–".to_string(), |s| s.show(d));
            out.push(format!(
                "{:>5} {:<7} {:>5} {:>20} {:>20} {:>18} {:>16} {:>14}",
                s.calls,
                s.ingress.label(),
                format!("{}/{}", s.valid, s.runs),
                cell(&s.cpu_ms_per_call, 1),
                cell(&s.rss_kib_per_call, 1),
                cell(&s.peak_rss_mib, 1),
                cell(&s.call_s, 1),
                cell(&s.turns, 2),
            ));
        }
        out.push(format!("{:>5} {}", "", ratio_line(&twilio, &sip)));
    }
    out.extend(marginal_lines(rows));
    out
}

/// One line per pair of consecutive sizes (ascending): each path's
/// marginal CPU and RSS per call, and SIP over Twilio.
fn marginal_lines(rows: &[SipRow]) -> Vec<String> {
    let mut sums = summaries(rows);
    sums.sort_by_key(|(t, _)| t.calls);
    sums.windows(2)
        .filter_map(|w| {
            let (t0, s0) = &w[0];
            let (t1, s1) = &w[1];
            let (t, s) = (Marginal::between(t0, t1)?, Marginal::between(s0, s1)?);
            let path = s1.ingress.label();
            let ratio = |a: f64, b: f64| {
                if b > 0.0 {
                    format!("{:.2}×", a / b)
                } else {
                    "–".to_string()
                }
            };
            Some(format!(
                "marginal {}→{} calls (difference of medians over ΔN): CPU ms/call twilio {:.1}, \
                 {path} {:.1} ({}); RSS KiB/call twilio {:.1}, {path} {:.1} ({})",
                t.from,
                t.to,
                t.cpu_ms_per_call,
                s.cpu_ms_per_call,
                ratio(s.cpu_ms_per_call, t.cpu_ms_per_call),
                t.rss_kib_per_call,
                s.rss_kib_per_call,
                ratio(s.rss_kib_per_call, t.rss_kib_per_call),
            ))
        })
        .collect()
}

/// `<path>/twilio` of the medians, when both paths have valid runs.
fn ratio_line(twilio: &PathSummary, sip: &PathSummary) -> String {
    let ratio = |a: &Option<Spread>, b: &Option<Spread>| match (a, b) {
        (Some(s), Some(t)) if t.median > 0.0 => format!("{:.2}×", s.median / t.median),
        _ => "–".to_string(),
    };
    format!(
        "{}/twilio: CPU per call {}, RSS per call {}, call length {}",
        sip.ingress.label(),
        ratio(&sip.cpu_ms_per_call, &twilio.cpu_ms_per_call),
        ratio(&sip.rss_kib_per_call, &twilio.rss_kib_per_call),
        ratio(&sip.call_s, &twilio.call_s),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::sip::ledger::RtpTally;

    fn row(ingress: Ingress, calls: usize, cpu_s: f64, peak_mib: u64) -> SipRow {
        SipRow {
            ingress,
            calls,
            repeat: 1,
            hold_ms: None,
            generator: GeneratorView {
                served: calls,
                refused: 0,
                lagged: None,
                faults: None,
            },
            server: Tally {
                served: calls,
                mean_call_s: 18.0,
                mean_turns: 2.0,
                rtp: RtpTally::default(),
                ..Tally::default()
            },
            usage: Usage {
                wall_s: 20.0,
                server_cpu_s: cpu_s,
                idle_rss_kib: 40 * 1_024,
                peak_rss_kib: peak_mib * 1_024,
                rss_samples: 200,
                ..Usage::default()
            },
        }
    }

    #[test]
    fn per_call_figures_are_over_n_and_above_the_idle_baseline() {
        let r = row(Ingress::Sip, 50, 2.5, 50);
        assert!((r.cpu_ms_per_call() - 50.0).abs() < 1e-9);
        // (50 − 40) MiB over 50 calls.
        assert!((r.rss_kib_per_call() - 204.8).abs() < 1e-9);
        assert!(r.is_valid(), "{:?}", r.invalid_because());
        let shrank = SipRow {
            usage: Usage {
                peak_rss_kib: 1,
                ..r.usage
            },
            ..r.clone()
        };
        assert_eq!(shrank.rss_kib_per_call(), 0.0, "never negative");
    }

    #[test]
    fn a_refusal_a_lag_or_a_missing_call_makes_a_run_invalid() {
        let mut r = row(Ingress::Twilio, 10, 1.0, 45);
        r.server.refused = 1;
        r.server.served = 9;
        let why = r.invalid_because();
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(why[0].contains("1 refused"), "{why:?}");
        assert!(why[1].contains("9 of 10"), "{why:?}");
        let mut lag = row(Ingress::Sip, 10, 1.0, 45);
        lag.generator.lagged = Some("2 RTP packets late".into());
        assert!(!lag.is_valid());
        let mut faults = row(Ingress::Sip, 10, 1.0, 45);
        faults.generator.faults = Some("sipp exited 1".into());
        assert_eq!(
            faults.invalid_because(),
            vec!["calls went wrong: sipp exited 1"]
        );
        assert!(format_detail(&lag).contains("NOT A VALID MEASUREMENT"));
        assert!(format_row(&lag).ends_with("NO"));
    }

    #[test]
    fn spread_is_the_lower_median_and_the_range() {
        let s = Spread::of([3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.runs), (2.0, 1.0, 3.0, 3));
        let even = Spread::of([4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(even.median, 2.0);
        assert_eq!(Spread::of([]), None);
        assert_eq!(Spread::of([f64::NAN]), None);
        assert_eq!(Spread::of([5.0]).unwrap().show(1), "5.0");
        assert_eq!(s.show(1), "2.0 (1.0–3.0)");
    }

    #[test]
    fn the_summary_sets_the_paths_side_by_side_over_valid_runs_only() {
        let mut rows = vec![
            row(Ingress::Twilio, 50, 2.0, 50),
            row(Ingress::Twilio, 50, 3.0, 50),
            row(Ingress::Twilio, 50, 4.0, 50),
            row(Ingress::Sip, 50, 1.0, 45),
            row(Ingress::Sip, 50, 1.5, 45),
            row(Ingress::Sip, 50, 99.0, 45),
        ];
        rows[5].server.refused = 1; // invalid: left out of the median
        let sums = summaries(&rows);
        assert_eq!(sums.len(), 1);
        let (t, s) = &sums[0];
        assert_eq!((t.valid, t.runs, s.valid, s.runs), (3, 3, 2, 3));
        let t_cpu = t.cpu_ms_per_call.unwrap();
        assert_eq!((t_cpu.median, t_cpu.min, t_cpu.max), (60.0, 40.0, 80.0));
        let s_cpu = s.cpu_ms_per_call.unwrap();
        assert_eq!((s_cpu.median, s_cpu.max), (20.0, 30.0));
        let lines = format_summary(&rows);
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(lines[1].contains("twilio") && lines[1].contains("60.0 (40.0–80.0)"));
        assert!(lines[2].contains("sip") && lines[2].contains("2/3"));
        assert!(lines[3].contains("CPU per call 0.33×"), "{}", lines[3]);
    }

    #[test]
    fn the_marginal_cost_cancels_what_a_fresh_server_spends_once() {
        // 2 s and 10 MiB once, then 30 ms and 300 KiB per call (idle 40 MiB).
        let at = |ingress, n: usize| {
            let cpu = 2.0 + 0.03 * n as f64;
            let mut r = row(ingress, n, cpu, 0);
            r.usage.peak_rss_kib = 50 * 1_024 + 300 * n as u64;
            r
        };
        let rows = vec![
            at(Ingress::Twilio, 100),
            at(Ingress::Sip, 100),
            at(Ingress::Twilio, 50),
            at(Ingress::Sip, 50),
        ];
        let sums = summaries(&rows);
        let m = Marginal::between(&sums[1].0, &sums[0].0).unwrap();
        assert_eq!((m.from, m.to), (50, 100));
        assert!((m.cpu_ms_per_call - 30.0).abs() < 1e-6, "{m:?}");
        assert!((m.rss_kib_per_call - 300.0).abs() < 1e-6, "{m:?}");
        assert_eq!(
            Marginal::between(&sums[0].0, &sums[1].0),
            None,
            "sizes must grow"
        );
        let lines = format_summary(&rows);
        let last = lines.last().unwrap();
        assert!(last.starts_with("marginal 50→100"), "{last}");
        assert!(last.contains("twilio 30.0, sip 30.0 (1.00×)"), "{last}");
    }
}
