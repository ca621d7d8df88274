//! Child processes for the end-to-end harnesses (Kamailio, sipp, HAProxy):
//! each leads its own process group with its output in a log file, and is
//! stopped whole (TERM, then KILL) when its handle drops; scratch
//! directories that outlive a failing test for inspection; commands run with
//! a time limit; and the error every harness step returns.
//!
//! What it never does: wait without a bound, or signal anything but the
//! process groups it started.

use std::fmt;
use std::fs::{self, File};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Time a process group gets to exit after TERM before it is KILLed.
pub const STOP_GRACE: Duration = Duration::from_secs(2);
/// How often a process's state is polled.
const POLL: Duration = Duration::from_millis(50);
/// Lines of a log shown in an error.
const LOG_TAIL_LINES: usize = 30;

/// Why a harness step failed. Every variant names what was attempted and
/// carries the evidence (a log tail, the last value seen).
#[derive(Debug)]
#[non_exhaustive]
pub enum HarnessError {
    /// A file or socket operation failed.
    Io { what: String, source: io::Error },
    /// A process exited while it should have been running.
    Exited {
        program: &'static str,
        status: ExitStatus,
        log_tail: String,
    },
    /// Something did not happen within its limit.
    Timeout {
        what: String,
        limit: Duration,
        detail: String,
    },
    /// A helper program (`kamcmd`, sipp, HAProxy's runtime API) produced
    /// output the harness cannot read.
    Output { command: String, output: String },
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { what, source } => write!(f, "{what}: {source}"),
            Self::Exited {
                program,
                status,
                log_tail,
            } => write!(f, "{program} exited ({status}); its log ends:\n{log_tail}"),
            Self::Timeout {
                what,
                limit,
                detail,
            } => write!(f, "no {what} within {limit:?}; {detail}"),
            Self::Output { command, output } => {
                write!(f, "unexpected output from {command}:\n{output}")
            }
        }
    }
}

impl std::error::Error for HarnessError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, HarnessError>;

pub fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> HarnessError {
    let what = what.into();
    move |source| HarnessError::Io { what, source }
}

/// A loopback port no other test process is handed
/// ([`callgate_rig::ports::claim`]), for `what`.
pub fn claim_port(what: &str) -> Result<u16> {
    crate::ports::claim().map_err(|e| HarnessError::Io {
        what: format!("claiming a loopback port for {what}"),
        source: io::Error::new(io::ErrorKind::AddrInUse, format!("{e:#}")),
    })
}

/// A child process leading its own process group, with its output in a log
/// file. Dropping it stops the whole group: TERM, then KILL after
/// [`STOP_GRACE`].
pub struct Group {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Group {
    pub fn spawn(name: &'static str, cmd: &mut Command, log: &Path) -> Result<Group> {
        let out = File::create(log).map_err(io_err(format!("creating {}", log.display())))?;
        let err = out.try_clone().map_err(io_err("cloning a file handle"))?;
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = cmd
            .spawn()
            .map_err(io_err(format!("starting {name} ({:?})", cmd.get_program())))?;
        Ok(Group {
            name,
            child,
            log: log.to_path_buf(),
        })
    }

    pub fn ensure_running(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(HarnessError::Exited {
                program: self.name,
                status,
                log_tail: self.log_tail(),
            }),
            Err(source) => Err(HarnessError::Io {
                what: format!("checking on {}", self.name),
                source,
            }),
        }
    }

    /// Waits up to `limit` for the leader to exit; stops the group if it
    /// does not.
    pub fn wait_exit(&mut self, limit: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
                Ok(None) => {
                    self.stop();
                    return Err(HarnessError::Timeout {
                        what: format!("exit of {}", self.name),
                        limit,
                        detail: format!("its log ends:\n{}", self.log_tail()),
                    });
                }
                Err(source) => {
                    return Err(HarnessError::Io {
                        what: format!("waiting for {}", self.name),
                        source,
                    });
                }
            }
        }
    }

    /// The file its output goes to.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }

    /// `kill -<signal> -- -<pgid>` (`kill(1)`: `unsafe` is denied, so no
    /// `kill(2)`). Returns whether some process of the group got it.
    pub fn signal_group(&self, signal: &str) -> bool {
        Command::new("kill")
            .arg(format!("-{signal}"))
            .arg("--")
            .arg(format!("-{}", self.child.id()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// TERM to the group; KILL to what is left after the grace period.
    /// The leader is reaped either way.
    pub fn stop(&mut self) {
        let deadline = Instant::now() + STOP_GRACE;
        if self.signal_group("TERM") {
            while Instant::now() < deadline {
                let leader_gone = matches!(self.child.try_wait(), Ok(Some(_)));
                if leader_gone && !self.signal_group("0") {
                    return;
                }
                std::thread::sleep(POLL);
            }
        }
        self.signal_group("KILL");
        let _ = self.child.wait();
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A fresh directory under the system's temp dir, removed on drop unless
/// the thread is panicking (then kept for the logs, and its path printed).
pub struct Scratch {
    pub path: PathBuf,
}

impl Scratch {
    pub fn new(what: &str) -> Result<Scratch> {
        let path =
            std::env::temp_dir().join(format!("callgate-{what}-{}", uuid::Uuid::new_v4().simple()));
        fs::create_dir_all(&path).map_err(io_err(format!("creating {}", path.display())))?;
        Ok(Scratch { path })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept {} for inspection", self.path.display());
        } else {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// Runs `cmd` (output already redirected) for at most `limit`.
pub fn run_bounded(cmd: &mut Command, what: &str, limit: Duration) -> Result<ExitStatus> {
    let mut child = cmd
        .stdin(Stdio::null())
        .spawn()
        .map_err(io_err(format!("starting {what}")))?;
    let deadline = Instant::now() + limit;
    loop {
        match child
            .try_wait()
            .map_err(io_err(format!("waiting for {what}")))?
        {
            Some(status) => return Ok(status),
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HarnessError::Timeout {
                    what: format!("exit of {what}"),
                    limit,
                    detail: "killed it".into(),
                });
            }
        }
    }
}
