//! The generator's CPU priority.
//!
//! The load generator stands in for thousands of phones and the carrier's
//! edge, which in production run on other machines. On a small shared box it
//! competes with the server and the simulated providers; under a 10× surge
//! its own work (a WebSocket per caller, a media frame every 20 ms per
//! caller) would otherwise take the CPU the system under test needs, and the
//! bench would measure the generator's cost, not the server's. So once the
//! rig is up, the bench lowers *its own* priority (a positive nice value:
//! no privilege needed) and leaves the server, the simulators and Postgres
//! at their normal priority. The generator's media-clock lag is still
//! checked per run, so a generator starved too hard marks its row invalid.
//!
//! Linux keeps a nice value per thread, so every thread of this process is
//! reniced (with `renice`, from util-linux/bsdutils: `unsafe` is denied
//! workspace-wide, so no `setpriority` call); threads created later inherit
//! the value from the thread that creates them. Children started *after*
//! this would inherit it too, which is why it runs after the rig started.

use std::process::{Command, Stdio};

use anyhow::{Context, bail};

/// Renices every thread of this process by `nice` (0 leaves it alone) and
/// returns the nice value the process now runs at.
///
/// # Errors
/// `renice` is missing or refused, or `/proc/self` is unreadable.
pub fn lower_own(nice: u8) -> anyhow::Result<i64> {
    if nice > 0 {
        let mut cmd = Command::new("renice");
        cmd.args(["-n", &nice.to_string(), "-p"]);
        for entry in std::fs::read_dir("/proc/self/task").context("listing /proc/self/task")? {
            cmd.arg(entry?.file_name());
        }
        let status = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("running renice")?;
        if !status.success() {
            bail!("renice failed ({status})");
        }
    }
    current()
}

/// The nice value of this process's main thread (field 19 of its `stat`).
///
/// # Errors
/// `/proc/self/stat` is unreadable or unexpected.
pub fn current() -> anyhow::Result<i64> {
    let stat = std::fs::read_to_string("/proc/self/stat").context("reading /proc/self/stat")?;
    parse_nice(&stat).context("unexpected /proc/self/stat")
}

/// Field 19 (`nice`) of a `/proc/<pid>/stat` line; fields are counted from
/// the last `)` because the command name may contain spaces.
pub fn parse_nice(stat: &str) -> Option<i64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(16)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_is_field_nineteen_even_with_odd_command_names() {
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 5 3 0 1000 \
                    1234 56 18446744073709551615";
        assert_eq!(parse_nice(stat), Some(5));
        assert_eq!(parse_nice("42 (x) S 1"), None);
        assert!(current().is_ok());
    }
}
