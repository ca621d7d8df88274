//! One child process of the `callgate` binary with its log file. Every
//! child is killed when its handle is dropped (error paths, Ctrl-C,
//! panics); the normal path stops it with a signal first so the server
//! drains and flushes its writes.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};
use tokio::time::{Instant, sleep};

/// How often readiness endpoints are polled while a child starts.
const READY_POLL: Duration = Duration::from_millis(100);
/// Lines of a child's log shown when it dies or never becomes ready.
const LOG_TAIL_LINES: usize = 20;

/// One running child process with its log file.
#[derive(Debug)]
pub struct ChildProcess {
    name: &'static str,
    child: Child,
    pid: u32,
    log: PathBuf,
}

impl ChildProcess {
    /// Starts `exe args…` with stdout and stderr appended to `log`.
    /// `CALLGATE_*` and `RUST_LOG` are removed from its environment so the
    /// generated configuration is the whole configuration.
    ///
    /// # Errors
    /// The log cannot be created or the process cannot be started.
    pub fn spawn(
        name: &'static str,
        exe: &Path,
        args: &[String],
        log: PathBuf,
    ) -> anyhow::Result<Self> {
        let out =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(exe);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true);
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            if k.starts_with("CALLGATE_") || k == "RUST_LOG" {
                cmd.env_remove(&key);
            }
        }
        cmd.env("RUST_LOG", "warn");
        let child = cmd
            .spawn()
            .with_context(|| format!("starting the {name} process"))?;
        let pid = child.id().context("the child has no pid")?;
        Ok(ChildProcess {
            name,
            child,
            pid,
            log,
        })
    }

    /// The process id (for `/proc` readings).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Fails (with the log's tail) if the process has exited.
    ///
    /// # Errors
    /// The process is no longer running.
    pub fn ensure_running(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => bail!(
                "the {} process exited ({status}); last lines of {}:\n{}",
                self.name,
                self.log.display(),
                log_tail(&self.log)
            ),
        }
    }

    /// Polls `url` until it answers 2xx, the process dies, or `limit` passes.
    ///
    /// # Errors
    /// The process died or was not ready in time.
    pub async fn wait_ready(
        &mut self,
        http: &reqwest::Client,
        url: &str,
        limit: Duration,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            self.ensure_running()?;
            if let Ok(resp) = http.get(url).send().await
                && resp.status().is_success()
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "the {} process was not ready at {url} within {limit:?}; last lines of {}:\n{}",
                    self.name,
                    self.log.display(),
                    log_tail(&self.log)
                );
            }
            sleep(READY_POLL).await;
        }
    }

    /// Sends `signal` (`TERM`, `HUP`, `INT`…) with `kill(1)`: `unsafe` is
    /// denied workspace-wide, so no `kill(2)` call.
    ///
    /// # Errors
    /// `kill` could not be run or refused (the process is gone).
    pub async fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .context("running kill")?;
        if !status.success() {
            bail!(
                "kill -{signal} {} ({}) failed: {status}",
                self.pid,
                self.name
            );
        }
        Ok(())
    }

    /// Waits up to `limit` for the process to exit by itself.
    ///
    /// # Errors
    /// It was still running after `limit`.
    pub async fn wait_exit(&mut self, limit: Duration) -> anyhow::Result<ExitStatus> {
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(_) => bail!(
                "the {} process did not exit within {limit:?}; last lines of {}:\n{}",
                self.name,
                self.log.display(),
                log_tail(&self.log)
            ),
        }
    }

    /// Sends `signal` (e.g. `TERM`, `INT`) and waits up to `grace` for the
    /// process to exit, then kills it. Returns whether it exited by itself.
    pub async fn stop(mut self, signal: &str, grace: Duration) -> bool {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return true;
        }
        if self.signal(signal).await.is_ok() && self.wait_exit(grace).await.is_ok() {
            return true;
        }
        tracing::warn!(process = self.name, "did not stop in time; killing it");
        // Already gone is fine; `wait` reaps it either way.
        let _ = self.child.kill().await;
        false
    }
}

/// The last lines of a log file (for error messages).
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

/// `n` distinct loopback ports claimed for this process ([`crate::ports`]).
///
/// # Errors
/// No port could be claimed.
pub(crate) fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    crate::ports::claim_n(n)
}
