//! `callgate-bench overload`: the instance that is itself short.
//!
//! What it is: the server pinned to core 0 and squeezed (a CFS quota, as a
//! Kubernetes CPU limit sets, or a CPU burner beside it), Postgres, the
//! simulators and this load generator pinned to core 1; N calls dialled at a
//! steady rate, each speaking a few times. Per run it counts, among the
//! admitted calls, the callers who were owed a reply and heard dead air
//! beyond `call.reply_stall_ms` + 500 ms; the refusals by reason (and
//! whether each refused caller heard the prompt); the watchdog's stalls by
//! culprit; ownership heartbeats that timed out or failed; the instance
//! ceiling's trips; and what the server and the simulators used. Variants
//! are run side by side: the squeeze with the instance ceiling on and off,
//! and the unsqueezed (pinned only) reference.
//!
//! What it never does: change the server beyond its configuration file
//! (`admission.max_lag_ms` per variant), or leave a cgroup or burner behind
//! (`squeeze::Squeeze` undoes them on every exit path).
//!
//! How to drive it (release build, root, two cores; run it through
//! `capped`):
//!
//! ```text
//! callgate-bench overload --cpu-quota 0.3 --repeat 3 \
//!     --stt-cap 2000 --tts-cap 2000 --dialog-cap 2000 --db-max-calls 2000
//! callgate-bench overload --variants burner-on,burner-off --burners 6
//! ```

use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use callgate_load::{Arrival, LoadConfig, Outcome};
use serde::Serialize;

use callgate_rig::measured::squeeze::{self, How, Squeeze};
use callgate_rig::measured::{self as rig, Caps, Rig, metric};

/// Knobs of `callgate-bench overload`.
#[derive(Debug, Clone, clap::Args)]
pub struct OverloadArgs {
    /// Calls offered per run.
    #[arg(long, default_value_t = 200)]
    pub calls: usize,
    /// Calls dialled per second.
    #[arg(long, default_value_t = 20.0)]
    pub rate: f64,
    /// Caller utterances per call.
    #[arg(long, default_value_t = 2)]
    pub utterances: usize,
    /// The server's CPU quota for `quota-*` variants, as a share of a core.
    #[arg(long, default_value_t = 0.3)]
    pub cpu_quota: f64,
    /// CPU burners beside the server in `burner-*` variants.
    #[arg(long, default_value_t = 6)]
    pub burners: u32,
    /// `admission.max_lag_ms` in `*-on` variants.
    #[arg(long, default_value_t = 60)]
    pub max_lag_ms: u64,
    /// Variants, in order: `quota-on`, `quota-off`, `burner-on`,
    /// `burner-off`, `pinned-on`, `pinned-off` (squeeze, then the instance
    /// ceiling on or off).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "quota-on,quota-off,pinned-on"
    )]
    pub variants: Vec<String>,
    /// Runs per variant (a fresh rig each).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    #[command(flatten)]
    pub caps: Caps,
    /// Where to write every row.
    #[arg(long, default_value = "callgate-bench-overload.json")]
    pub json: std::path::PathBuf,
}

/// One variant: how the server is squeezed, and the ceiling on or off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Variant {
    how: How,
    ceiling: bool,
}

impl OverloadArgs {
    fn variants(&self) -> anyhow::Result<Vec<Variant>> {
        self.variants
            .iter()
            .map(|v| {
                let (squeeze, ceiling) = v.split_once('-').unwrap_or((v, ""));
                let how = match squeeze {
                    "quota" => How::Quota(self.cpu_quota),
                    "burner" => How::Burners(self.burners),
                    "pinned" => How::Pinned,
                    other => bail!("unknown squeeze {other:?} in --variants"),
                };
                let ceiling = match ceiling {
                    "on" => true,
                    "off" => false,
                    other => bail!("--variants: {v:?} must end in -on or -off, not {other:?}"),
                };
                Ok(Variant { how, ceiling })
            })
            .collect()
    }

    pub(super) fn validate(&self) -> anyhow::Result<Vec<Variant>> {
        if self.calls == 0 || self.rate.is_nan() || self.rate <= 0.0 || self.repeat == 0 {
            bail!("--calls, --rate and --repeat must be positive");
        }
        if !(self.cpu_quota > 0.0 && self.cpu_quota <= 1.0) {
            bail!("--cpu-quota is a share of one core, above 0 and at most 1");
        }
        self.caps.validate()?;
        let v = self.variants()?;
        if v.is_empty() {
            bail!("--variants names no variant");
        }
        if self.burners == 0 && v.iter().any(|v| v.how == How::Burners(0)) {
            bail!("--burners must be at least 1 for a burner variant");
        }
        Ok(v)
    }
}

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct OverloadRow {
    pub variant: String,
    pub run: usize,
    pub offered: usize,
    pub admitted: usize,
    /// Admitted callers owed a reply who heard more than
    /// `reply_stall_ms` + 500 ms of dead air.
    pub silent_admitted: usize,
    pub refused_instance: usize,
    pub refused_other: usize,
    /// Every refusal by its reason (`queue_full`, `setup_failed:db`, …).
    pub refused_by_reason: std::collections::BTreeMap<String, usize>,
    /// Refused callers who did not hear the overflow prompt.
    pub refused_unheard: usize,
    /// The watchdog's stalls, by culprit (`instance`, `dialog`, `tts`, …).
    pub stalls: Vec<(String, u64)>,
    pub heartbeat_failures: u64,
    pub instance_trips: u64,
    pub server_cores: f64,
    pub sims_cores: f64,
    /// Highest p99 lateness of the server's media clock seen in
    /// `/admin/status` during the run, ms.
    pub peak_lag_p99_ms: f64,
    /// The instance ceiling's value when `/admin/status` first showed it
    /// binding: where this run's instance began to refuse.
    pub ceiling_at_trip: Option<u64>,
    /// `None` when the generator kept its media clock; why not otherwise.
    pub invalid: Option<String>,
}

impl OverloadRow {
    fn provider_stalls(&self) -> u64 {
        self.stalls
            .iter()
            .filter(|(c, _)| c != "instance" && c != "carrier_media")
            .map(|(_, n)| n)
            .sum()
    }

    /// With the ceiling on, the promise: no admitted caller in dead air,
    /// every refused caller hears the prompt, no heartbeat lost, no
    /// provider blamed for the instance's lag.
    fn failures(&self, ceiling: bool) -> Vec<String> {
        let mut f = Vec::new();
        if self.refused_unheard > 0 {
            f.push(format!(
                "{} refused callers heard no prompt",
                self.refused_unheard
            ));
        }
        if ceiling {
            if self.silent_admitted > 0 {
                f.push(format!(
                    "{} admitted callers in dead air",
                    self.silent_admitted
                ));
            }
            if self.heartbeat_failures > 0 {
                f.push(format!("{} heartbeats lost", self.heartbeat_failures));
            }
            if self.provider_stalls() > 0 {
                f.push(format!(
                    "{} stalls blamed on a provider",
                    self.provider_stalls()
                ));
            }
        }
        f
    }
}

/// `callgate-bench overload`.
///
/// # Errors
/// The rig could not be started or squeezed, or the report not written.
pub async fn run(args: OverloadArgs) -> anyhow::Result<ExitCode> {
    let variants = args.validate()?;
    let mut rows: Vec<(Variant, OverloadRow)> = Vec::new();
    println!("{}", header());
    for v in &variants {
        for i in 0..args.repeat {
            let mut caps = args.caps.clone();
            caps.instance_max_lag_ms = if v.ceiling { args.max_lag_ms } else { 0 };
            let mut out = None;
            rig::with_rig(Rig::start(&caps), "child logs", async |rig: &mut Rig| {
                out = Some(one_run(rig, &args, *v, i).await?);
                Ok(())
            })
            .await?;
            if let Some(row) = out {
                println!("{}", format_row(&row));
                rows.push((*v, row));
            }
            let all: Vec<&OverloadRow> = rows.iter().map(|(_, r)| r).collect();
            std::fs::write(&args.json, serde_json::to_string_pretty(&all)?)?;
        }
    }
    print_summary(&rows);
    let mut failed = false;
    for (v, r) in &rows {
        let f = r.failures(v.ceiling);
        if !f.is_empty() || r.invalid.is_some() {
            failed |= !f.is_empty();
            println!("{} run {}: {:?} {:?}", r.variant, r.run, f, r.invalid);
        }
    }
    println!("rows: {}", args.json.display());
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn variant_label(v: Variant) -> String {
    format!(
        "{} ceiling {}",
        v.how.label(),
        if v.ceiling { "on" } else { "off" }
    )
}

async fn one_run(
    rig: &mut Rig,
    args: &OverloadArgs,
    v: Variant,
    i: usize,
) -> anyhow::Result<OverloadRow> {
    let (server, sims, pg) = rig.pids();
    squeeze::pin(std::process::id(), "1")?;
    squeeze::pin(sims, "1")?;
    if let Some(pg) = pg {
        squeeze::pin_tree(pg, "1")?;
    }
    let stall_ms = rig.server_config["call"]["reply_stall_ms"]
        .as_u64()
        .unwrap_or(2_000);
    let squeeze = Squeeze::apply(server, v.how)?;
    let before = rig.metrics_text().await?;
    let cfg = LoadConfig {
        url: rig.media_url(),
        calls: args.calls,
        concurrency: 0,
        arrival: Arrival::Rate {
            per_second: args.rate,
        },
        utterances: args.utterances,
        progress: false,
        ..LoadConfig::default()
    };
    let (report, res, _) = rig.offer(cfg, Duration::from_secs(180)).await?;
    let after = rig.metrics_text().await?;
    drop(squeeze);
    let delta =
        |name: &str, label: &str| metric(&after, name, label) - metric(&before, name, label);
    let mut row = OverloadRow {
        variant: variant_label(v),
        run: i + 1,
        offered: args.calls,
        admitted: 0,
        silent_admitted: 0,
        refused_instance: 0,
        refused_other: 0,
        refused_by_reason: std::collections::BTreeMap::new(),
        refused_unheard: 0,
        stalls: ["instance", "dialog", "tts", "stt", "tool", "carrier_media"]
            .iter()
            .map(|c| {
                let n = delta("callgate_call_stalls_total", &format!("culprit=\"{c}\""));
                ((*c).to_string(), n.max(0.0) as u64)
            })
            .filter(|(_, n)| *n > 0)
            .collect(),
        heartbeat_failures: ["timeout", "error"]
            .iter()
            .map(|r| {
                delta(
                    "callgate_owner_heartbeats_total",
                    &format!("result=\"{r}\""),
                )
            })
            .sum::<f64>()
            .max(0.0) as u64,
        instance_trips: delta("callgate_instance_overload_trips_total", "").max(0.0) as u64,
        server_cores: res.server_cpu_s / res.wall_s.max(1e-9),
        sims_cores: res.sims_cpu_s / res.wall_s.max(1e-9),
        peak_lag_p99_ms: res.peaks.lag_p99_us as f64 / 1e3,
        ceiling_at_trip: res.peaks.ceiling_at_trip,
        invalid: rig::generator_lag(
            &report.summary,
            callgate_load::MAX_FRAME_LAG.as_millis() as u64,
        ),
    };
    for c in &report.calls {
        match &c.outcome {
            Outcome::Rejected {
                reason,
                prompt_heard,
                ..
            } => {
                *row.refused_by_reason.entry(reason.clone()).or_default() += 1;
                if reason == "instance_overloaded" {
                    row.refused_instance += 1;
                } else {
                    row.refused_other += 1;
                }
                row.refused_unheard += usize::from(!prompt_heard);
            }
            Outcome::Unauthorized { .. } => {}
            _ => {
                row.admitted += 1;
                row.silent_admitted += usize::from(c.max_owed_silence_ms > stall_ms + 500);
            }
        }
    }
    Ok(row)
}

fn header() -> String {
    format!(
        "{:<26} {:>3} {:>7} {:>8} {:>7} {:>9} {:>7} {:>8} {:>5} {:>6} {:>6} {:>5} {:>8}  stalls by culprit",
        "variant",
        "run",
        "offered",
        "admitted",
        "silent",
        "ref inst",
        "ref oth",
        "unheard",
        "hb",
        "trips",
        "srv c",
        "sim c",
        "lag p99"
    )
}

fn format_row(r: &OverloadRow) -> String {
    let mut stalls: Vec<String> = r.stalls.iter().map(|(c, n)| format!("{c}×{n}")).collect();
    let refused: Vec<String> = r
        .refused_by_reason
        .iter()
        .map(|(why, n)| format!("{why}×{n}"))
        .collect();
    if !refused.is_empty() {
        stalls.push(format!("| refused: {}", refused.join(" ")));
    }
    if let Some(c) = r.ceiling_at_trip {
        stalls.push(format!("| ceiling at trip {c}"));
    }
    format!(
        "{:<26} {:>3} {:>7} {:>8} {:>7} {:>9} {:>7} {:>8} {:>5} {:>6} {:>6.2} {:>5.2} {:>8.0}  {}{}",
        r.variant,
        r.run,
        r.offered,
        r.admitted,
        r.silent_admitted,
        r.refused_instance,
        r.refused_other,
        r.refused_unheard,
        r.heartbeat_failures,
        r.instance_trips,
        r.server_cores,
        r.sims_cores,
        r.peak_lag_p99_ms,
        stalls.join(" "),
        r.invalid
            .as_ref()
            .map_or(String::new(), |w| format!("  NOT VALID: {w}")),
    )
}

/// Median (min–max) per variant of the figures the acceptance names.
fn print_summary(rows: &[(Variant, OverloadRow)]) {
    println!("\nmedian (min–max) per variant:");
    let mut seen: Vec<String> = Vec::new();
    for (_, r) in rows {
        if seen.contains(&r.variant) {
            continue;
        }
        seen.push(r.variant.clone());
        let mine: Vec<&OverloadRow> = rows
            .iter()
            .map(|(_, x)| x)
            .filter(|x| x.variant == r.variant)
            .collect();
        let stat = |f: &dyn Fn(&OverloadRow) -> f64| {
            let mut v: Vec<f64> = mine.iter().map(|r| f(r)).collect();
            v.sort_by(f64::total_cmp);
            let med = v[v.len() / 2];
            format!("{med} ({}–{})", v[0], v[v.len() - 1])
        };
        println!(
            "{:<26} admitted {}  silent {}  refused instance_overloaded {}  heartbeats lost {}  server cores {}",
            r.variant,
            stat(&|r| r.admitted as f64),
            stat(&|r| r.silent_admitted as f64),
            stat(&|r| r.refused_instance as f64),
            stat(&|r| r.heartbeat_failures as f64),
            stat(&|r| (r.server_cores * 100.0).round() / 100.0),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_promise_is_judged_only_with_the_ceiling_on() {
        let row = OverloadRow {
            variant: "x".into(),
            run: 1,
            offered: 10,
            admitted: 10,
            silent_admitted: 2,
            refused_instance: 0,
            refused_other: 0,
            refused_by_reason: std::collections::BTreeMap::new(),
            refused_unheard: 0,
            stalls: vec![("tts".into(), 3)],
            heartbeat_failures: 1,
            instance_trips: 0,
            server_cores: 0.3,
            sims_cores: 0.0,
            peak_lag_p99_ms: 0.0,
            ceiling_at_trip: None,
            invalid: None,
        };
        assert_eq!(row.failures(true).len(), 3);
        assert!(row.failures(false).is_empty());
    }
}
