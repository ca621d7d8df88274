//! sipp as the SIP path's load generator: one `sipp` process (SIPp 3.6.1,
//! Debian `sip-tester`) running `tests/sip/load_uac.xml` with
//! `-m N -l N -r N` — N calls, all of them at once, their INVITEs within
//! one second — each speaking `audio/book_table.ulaw` over RTP, then
//! `hold_ms` of silence, then BYE.
//!
//! As `tests/src/sipp.rs` runs it: in a working directory of its own with
//! `audio/` linked in (`rtp_stream` opens its files relative to it),
//! everything bound to 127.0.0.1 (the remote-control socket too), with the
//! `-trace_stat` CSV (counters, successful and failed calls) and the error
//! log written there, bounded by sipp's own `-timeout` and killed a few
//! seconds after it (or at once when the run is dropped: `kill_on_drop`).
//!
//! sipp's CPU time is read as this process's reaped children's time
//! (`cutime + cstime` of `/proc/self/stat`) across the run: sipp is the
//! only child reaped in that span.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
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
/// How much longer than its `-timeout` sipp may take to write its final
/// statistics before it is killed.
const KILL_GRACE: Duration = Duration::from_secs(5);
/// Lines of sipp's error log kept in an outcome.
const ERROR_TAIL_LINES: usize = 10;

/// One sipp run.
#[derive(Debug, Clone)]
pub struct SippPlan {
    /// `tests/sip/`: the scenario and its `audio/`.
    pub scenarios: PathBuf,
    /// The server's SIP listener.
    pub target: SocketAddr,
    pub calls: usize,
    pub hold_ms: u32,
}

impl SippPlan {
    /// sipp's `-timeout`: one call's length, the answer bound and a margin.
    pub fn timeout(&self) -> Duration {
        let call = Duration::from_millis(u64::from(SPEECH_MS) + u64::from(self.hold_ms));
        call + ANSWER_BOUND + RUN_MARGIN
    }

    /// Checks the scenario and its audio are where sipp will look.
    ///
    /// # Errors
    /// A file is missing.
    pub fn check_files(scenarios: &Path) -> anyhow::Result<()> {
        for f in [SCENARIO, "audio/book_table.ulaw", "audio/silence.ulaw"] {
            let p = scenarios.join(f);
            if !p.is_file() {
                bail!(
                    "{} is missing (--sip-scenarios names the tests/sip directory)",
                    p.display()
                );
            }
        }
        Ok(())
    }
}

/// Ports sipp binds, all on 127.0.0.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SippPorts {
    pub sip: u16,
    /// RTP (`-mp`; sipp binds `+2` as well).
    pub media: u16,
    /// The remote-control socket (`-cp`), otherwise 0.0.0.0:8888.
    pub control: u16,
}

impl SippPorts {
    /// Free ports for one run.
    ///
    /// # Errors
    /// None could be found.
    pub fn free() -> anyhow::Result<SippPorts> {
        Ok(SippPorts {
            sip: free_udp_port()?,
            media: free_media_pair()?,
            control: free_udp_port()?,
        })
    }
}

/// sipp's command line for `plan` (its working directory holds `audio/`
/// and receives every file it writes).
pub fn args(plan: &SippPlan, ports: SippPorts) -> Vec<String> {
    let n = plan.calls.to_string();
    let scenario = plan.scenarios.join(SCENARIO);
    let timeout = format!("{}s", plan.timeout().as_secs().max(1));
    let mut a: Vec<String> = vec![plan.target.to_string()];
    let mut push = |items: &[&str]| a.extend(items.iter().map(|s| s.to_string()));
    push(&["-sf", &scenario.to_string_lossy(), "-t", "u1"]);
    push(&[
        "-i",
        "127.0.0.1",
        "-bind_local",
        "-p",
        &ports.sip.to_string(),
    ]);
    push(&["-mi", "127.0.0.1", "-mp", &ports.media.to_string()]);
    push(&["-ci", "127.0.0.1", "-cp", &ports.control.to_string()]);
    push(&["-m", &n, "-l", &n, "-r", &n, "-nostdin"]);
    push(&["-set", "hold_ms", &plan.hold_ms.to_string()]);
    push(&["-timeout", &timeout, "-timeout_error"]);
    push(&["-trace_stat", "-stf", "stat.csv", "-fd", "1"]);
    push(&["-trace_err", "-error_file", "errors.log"]);
    push(&["-trace_screen", "-screen_file", "screen.log"]);
    a
}

/// What one sipp run reported.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SippOutcome {
    /// 0: every call succeeded (see `tests/src/sipp.rs` for the others);
    /// `None` when the bench killed it at its deadline.
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    /// `SuccessfulCall(C)`: calls that reached the end of the scenario.
    pub successful: u64,
    /// `FailedCall(C)`.
    pub failed: u64,
    /// The scenario's counters: every `200` to the INVITE …
    pub answered: u64,
    /// … of which callgate then referred …
    pub referred: u64,
    /// … or hung up itself.
    pub callgate_bye: u64,
    /// Final 3xx–6xx answers, every code (`rejected_<code>`).
    pub rejected: u64,
    /// sipp's own CPU time.
    pub cpu_s: f64,
    /// Where its files are.
    pub dir: PathBuf,
    /// The end of its error log.
    pub errors_tail: String,
}

impl SippOutcome {
    /// Calls served as far as sipp can tell: answered and run to their end.
    pub fn served(&self) -> usize {
        let ended = self.successful.saturating_sub(self.rejected);
        usize::try_from(self.answered.min(ended)).unwrap_or(usize::MAX)
    }

    /// Why sipp's own run cannot be trusted, if it cannot.
    pub fn trouble(&self) -> Option<String> {
        if self.timed_out {
            return Some(format!(
                "sipp was killed at its deadline ({})",
                self.dir.display()
            ));
        }
        if self.exit_code != Some(0) || self.failed > 0 {
            return Some(format!(
                "sipp exited {:?} with {} failed calls ({}): {}",
                self.exit_code,
                self.failed,
                self.dir.display(),
                self.errors_tail.trim()
            ));
        }
        None
    }

    fn from_files(dir: &Path, exit_code: Option<i32>, timed_out: bool, cpu_s: f64) -> Self {
        let stats = last_csv_row(&read_lossy(&dir.join("stat.csv")));
        let stat = |name: &str| {
            stats
                .get(name)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        let rejected = stats
            .iter()
            .filter(|(k, _)| k.starts_with("rejected_") && k.ends_with("(C)"))
            .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
            .sum();
        let errors = read_lossy(&dir.join("errors.log"));
        let lines: Vec<&str> = errors.lines().collect();
        let tail = lines[lines.len().saturating_sub(ERROR_TAIL_LINES)..].join("\n");
        SippOutcome {
            exit_code,
            timed_out,
            successful: stat("SuccessfulCall(C)"),
            failed: stat("FailedCall(C)"),
            answered: stat("answered(C)"),
            referred: stat("referred(C)"),
            callgate_bye: stat("callgate_bye(C)"),
            rejected,
            cpu_s,
            dir: dir.to_path_buf(),
            errors_tail: tail,
        }
    }
}

/// Runs sipp on `plan` in `dir` (created; `audio/` linked in) and waits,
/// bounded, for it to finish.
///
/// # Errors
/// sipp could not be started (the Debian package is `sip-tester`) or its
/// directory could not be made. A run that fails calls is not an error:
/// [`SippOutcome::trouble`] says so.
pub async fn run(plan: &SippPlan, dir: &Path, clock_ticks: u64) -> anyhow::Result<SippOutcome> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let audio = dir.join("audio");
    if !audio.exists() {
        std::os::unix::fs::symlink(plan.scenarios.join("audio"), &audio)
            .with_context(|| format!("linking {}", audio.display()))?;
    }
    let file = |name: &str| -> anyhow::Result<std::fs::File> {
        std::fs::File::create(dir.join(name)).with_context(|| format!("creating {name}"))
    };
    let before = children_ticks()?;
    let mut child = tokio::process::Command::new("sipp")
        .args(args(plan, SippPorts::free()?))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(file("stdout.txt")?)
        .stderr(file("stderr.txt")?)
        .kill_on_drop(true)
        .spawn()
        .context("running sipp (Debian package sip-tester)")?;
    let bound = plan.timeout() + KILL_GRACE;
    let (exit_code, timed_out) = match tokio::time::timeout(bound, child.wait()).await {
        Ok(status) => (status.context("waiting for sipp")?.code(), false),
        Err(_) => {
            let _ = child.start_kill();
            let _ = child.wait().await;
            (None, true)
        }
    };
    let ticks = children_ticks()?.saturating_sub(before);
    let cpu_s = ticks as f64 / clock_ticks.max(1) as f64;
    Ok(SippOutcome::from_files(dir, exit_code, timed_out, cpu_s))
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

/// Header row and last data row of one of sipp's `;`-separated CSV files.
fn last_csv_row(text: &str) -> BTreeMap<String, String> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let (Some(header), Some(last)) = (lines.next(), lines.next_back()) else {
        return BTreeMap::new();
    };
    header
        .split(';')
        .zip(last.split(';'))
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn read_lossy(path: &Path) -> String {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// A loopback port no test or other bench process is handed
/// ([`callgate_rig::ports`]).
fn free_udp_port() -> anyhow::Result<u16> {
    callgate_rig::ports::claim()
}

/// An even UDP port `p` with `p + 1`..`p + 3` claimed too (sipp binds the
/// media port and the one two above).
fn free_media_pair() -> anyhow::Result<u16> {
    callgate_rig::ports::claim()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> SippPlan {
        SippPlan {
            scenarios: PathBuf::from("/repo/tests/sip"),
            target: "127.0.0.1:5070".parse().unwrap(),
            calls: 100,
            hold_ms: 12_000,
        }
    }

    #[test]
    fn every_call_is_offered_at_once_and_bound_to_loopback() {
        let ports = SippPorts {
            sip: 5_100,
            media: 16_000,
            control: 5_101,
        };
        let a = args(&plan(), ports).join(" ");
        assert!(
            a.starts_with("127.0.0.1:5070 -sf /repo/tests/sip/load_uac.xml -t u1"),
            "{a}"
        );
        assert!(a.contains("-m 100 -l 100 -r 100"), "{a}");
        assert!(a.contains("-set hold_ms 12000"), "{a}");
        assert!(a.contains("-i 127.0.0.1 -bind_local -p 5100"), "{a}");
        assert!(
            a.contains("-mi 127.0.0.1 -mp 16000 -ci 127.0.0.1 -cp 5101"),
            "{a}"
        );
        // 6 s speech + 12 s hold + 10 s answer bound + 30 s margin.
        assert!(a.contains("-timeout 58s -timeout_error"), "{a}");
    }

    #[test]
    fn the_outcome_is_read_from_the_last_stat_row() {
        let dir = std::env::temp_dir().join(format!("callgate-sipp-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("stat.csv"),
            "SuccessfulCall(C);FailedCall(C);answered(C);referred(C);callgate_bye(C);rejected_503(C);rejected_486(C);\n\
             0;0;0;0;0;0;0;\n\
             50;0;48;0;1;2;0;\n",
        )
        .unwrap();
        let out = SippOutcome::from_files(&dir, Some(0), false, 0.5);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!((out.successful, out.answered, out.rejected), (50, 48, 2));
        assert_eq!(out.callgate_bye, 1);
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
