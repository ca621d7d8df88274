//! The orphan guard of a throwaway cluster: a small shell that outlives
//! nothing it should.
//!
//! `pg_ctl` daemonizes the postmaster, so a process that starts a cluster
//! and then dies without running its destructors (SIGKILL, a panic with
//! `abort`, a supervisor's hard kill) would leave Postgres running and its
//! folder behind. The reaper is spawned before the cluster exists with its
//! stdin on a pipe whose only writer is this process. It reads until end of
//! file, which comes when this process exits in any way — the kernel closes
//! the pipe — and then stops the cluster (waking a frozen one first) and
//! removes the folder. On a clean shutdown the cluster is already gone and
//! the reaper is killed unused.
//!
//! Why a pipe and not `PR_SET_PDEATHSIG`: the death signal is cleared by
//! `fork`, and `pg_ctl` forks the postmaster; it also needs `unsafe`, which
//! this workspace denies. The reaper runs in its own process group, so a
//! terminal's Ctrl-C (sent to the foreground group) does not take it down
//! with its parent, and it ignores SIGINT, SIGTERM and SIGHUP.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

/// Waits for end of file, then: wake the postmaster and its backends (a
/// test may have frozen them), stop it immediately, kill it if that fails,
/// and remove the base folder. `$1` base, `$2` data, `$3` pg_ctl, `$4`
/// "runuser" when the tools must run as `postgres`.
const SCRIPT: &str = r#"trap '' INT TERM HUP
cat >/dev/null
pid=$(head -n 1 "$2/postmaster.pid" 2>/dev/null)
if [ -n "$pid" ]; then
  kill -CONT "$pid" 2>/dev/null
  pkill -CONT -P "$pid" 2>/dev/null
  if [ "$4" = runuser ]; then
    runuser -u postgres -- "$3" -D "$2" -m immediate -w -t 10 stop >/dev/null 2>&1
  else
    "$3" -D "$2" -m immediate -w -t 10 stop >/dev/null 2>&1
  fi
  kill -KILL "$pid" 2>/dev/null
fi
rm -rf -- "$1"
"#;

/// A running reaper; see the module docs.
#[derive(Debug)]
pub(crate) struct Reaper {
    child: Child,
    /// Held for the cluster's life: closing it (or this process ending)
    /// sets the reaper to work.
    _pipe: ChildStdin,
}

impl Reaper {
    /// Starts the reaper for the cluster in `base` (data in `data`).
    pub(crate) fn spawn(
        base: &Path,
        data: &Path,
        pg_ctl: &Path,
        as_postgres: bool,
    ) -> std::io::Result<Self> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(SCRIPT)
            .arg("callgate-pg-reaper")
            .arg(base)
            .arg(data)
            .arg(pg_ctl)
            .arg(if as_postgres { "runuser" } else { "direct" })
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let pipe = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("the reaper's stdin was not piped"))?;
        Ok(Self { child, _pipe: pipe })
    }

    /// The cluster was stopped and its folder removed: the reaper has
    /// nothing to do. Killed and reaped, so no zombie is left.
    pub(crate) fn dismiss(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
