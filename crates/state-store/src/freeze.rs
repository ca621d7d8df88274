//! Freezing a throwaway cluster with SIGSTOP: the postmaster and every
//! process it forked (backends, checkpointer, writers, autovacuum), so that
//! nothing answers — not new connections, not the connections already open.
//! Stopping only the postmaster would leave existing backends serving
//! queries, which is a different failure.
//!
//! [`Frozen`] is a guard: dropping it sends SIGCONT to every process it
//! stopped, so a failing or panicking test never leaves Postgres stopped.
//!
//! Signals go through `kill(1)`: `unsafe` is denied workspace-wide, so no
//! `kill(2)` call, and one `kill` invocation takes every pid at once.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::StoreError;

/// How long [`Frozen::stop`] waits for every process to report itself
/// stopped (`T` in `/proc/<pid>/stat`); stopping takes microseconds, so
/// this only bounds a broken environment.
const STOP_LIMIT: Duration = Duration::from_secs(5);
/// How often the processes' states are read while waiting.
const STOP_POLL: Duration = Duration::from_millis(5);

/// A frozen cluster (see [`crate::LocalPostgres::freeze`]). Thawed
/// (SIGCONT) by [`Frozen::thaw`] or on drop.
#[derive(Debug)]
#[must_use = "dropping the guard thaws the cluster at once"]
pub struct Frozen {
    /// The postmaster first, then its descendants; all of them stopped.
    pids: Vec<u32>,
    thawed: bool,
}

impl Frozen {
    /// Stops the postmaster `postmaster` (so it forks nothing new), then
    /// every descendant, and waits until each is stopped. A failure part-way
    /// continues whatever was stopped.
    ///
    /// # Errors
    /// `LocalPostgres` when `kill` failed, `/proc` could not be read, or a
    /// process did not stop within [`STOP_LIMIT`].
    pub(crate) fn stop(postmaster: u32) -> Result<Frozen, StoreError> {
        signal("STOP", &[postmaster])?;
        // From here on the guard continues whatever was stopped.
        let mut frozen = Frozen {
            pids: vec![postmaster],
            thawed: false,
        };
        let children = descendants(postmaster)?;
        if !children.is_empty() {
            signal("STOP", &children)?;
            frozen.pids.extend(children);
        }
        frozen.wait_stopped()?;
        tracing::info!(processes = frozen.pids.len(), "postgres frozen (SIGSTOP)");
        Ok(frozen)
    }

    /// The processes stopped: the postmaster, then its descendants.
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// Continues every stopped process (SIGCONT).
    ///
    /// # Errors
    /// `LocalPostgres` when `kill` could not be run or refused.
    pub fn thaw(mut self) -> Result<(), StoreError> {
        self.thawed = true;
        let res = self.resume();
        if res.is_ok() {
            tracing::info!(processes = self.pids.len(), "postgres thawed (SIGCONT)");
        }
        res
    }

    fn resume(&self) -> Result<(), StoreError> {
        // A backend that exited while frozen (none should) makes `kill`
        // fail for its pid only; every other pid is still continued.
        let live: Vec<u32> = self.pids.iter().copied().filter(|&p| alive(p)).collect();
        if live.is_empty() {
            return Ok(());
        }
        signal("CONT", &live)
    }

    /// Waits until every process reports state `T` (stopped).
    fn wait_stopped(&self) -> Result<(), StoreError> {
        let until = Instant::now() + STOP_LIMIT;
        loop {
            let running: Vec<u32> = self
                .pids
                .iter()
                .copied()
                .filter(|&p| state(p).is_some_and(|s| s != 'T'))
                .collect();
            if running.is_empty() {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(failed(
                    "freeze",
                    format!("processes {running:?} not stopped after {STOP_LIMIT:?}"),
                ));
            }
            std::thread::sleep(STOP_POLL);
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if self.thawed {
            return;
        }
        if let Err(e) = self.resume() {
            tracing::error!(error = %e, "could not thaw postgres");
        }
    }
}

/// Sends `SIG<name>` to every pid in one `kill` invocation.
fn signal(name: &str, pids: &[u32]) -> Result<(), StoreError> {
    let step = "signal";
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .args(pids.iter().map(u32::to_string))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| failed(step, format!("running kill: {e}")))?;
    if !status.success() {
        return Err(failed(step, format!("kill -{name} {pids:?}: {status}")));
    }
    Ok(())
}

fn failed(step: &'static str, detail: String) -> StoreError {
    StoreError::LocalPostgres { step, detail }
}

/// Every live descendant of `root`, found by walking the `ppid` of each
/// `/proc/<pid>/stat`; parents before their children.
fn descendants(root: u32) -> Result<Vec<u32>, StoreError> {
    let parents = process_table()?;
    let mut found = Vec::new();
    let mut frontier = BTreeSet::from([root]);
    while !frontier.is_empty() {
        let next: BTreeSet<u32> = parents
            .iter()
            .filter(|(_, ppid)| frontier.contains(ppid))
            .map(|&(pid, _)| pid)
            .collect();
        found.extend(next.iter().copied());
        frontier = next;
    }
    Ok(found)
}

/// (pid, ppid) of every process that could be read.
fn process_table() -> Result<Vec<(u32, u32)>, StoreError> {
    let dir = std::fs::read_dir("/proc").map_err(|e| failed("read /proc", e.to_string()))?;
    let table = dir
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, stat(pid)?.1)))
        .collect();
    Ok(table)
}

/// (state, ppid) from `/proc/<pid>/stat`, or `None` when the process is
/// gone. The command name may hold spaces and parentheses, so the fields
/// are read after its last `)`.
fn stat(pid: u32) -> Option<(char, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

fn parse_stat(text: &str) -> Option<(char, u32)> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

fn state(pid: u32) -> Option<char> {
    stat(pid).map(|(s, _)| s)
}

/// Alive and not a zombie (a zombie cannot be continued or signalled usefully).
fn alive(pid: u32) -> bool {
    state(pid).is_some_and(|s| s != 'Z' && s != 'X')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_command_name() {
        let line = "4242 (postgres: walwriter (x) ) T 4100 4100 4100 0 -1 4194560";
        assert_eq!(parse_stat(line), Some(('T', 4100)));
        assert_eq!(parse_stat("12 (sh) S 1 12 12"), Some(('S', 1)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn a_process_tree_is_frozen_and_thawed_by_the_guard() {
        // `sh` forks a `sleep` child: the tree the guard must stop whole.
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .unwrap();
        let root = sh.id();
        let until = Instant::now() + Duration::from_secs(5);
        while descendants(root).unwrap().is_empty() {
            assert!(Instant::now() < until, "sh never forked its child");
            std::thread::sleep(STOP_POLL);
        }
        let child = descendants(root).unwrap()[0];
        {
            let frozen = Frozen::stop(root).unwrap();
            assert_eq!(frozen.pids(), &[root, child]);
            assert_eq!(state(root), Some('T'));
            assert_eq!(state(child), Some('T'));
        } // dropped without `thaw`: the guard continues both
        for pid in [root, child] {
            assert!(state(pid).is_some_and(|s| s != 'T'), "{pid} still stopped");
        }
        let frozen = Frozen::stop(root).unwrap();
        frozen.thaw().unwrap();
        assert!(state(child).is_some_and(|s| s != 'T'));
        signal("KILL", &[child]).unwrap();
        sh.wait().unwrap();
    }
}
