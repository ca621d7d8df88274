//! A throwaway PostgreSQL cluster for tests, load runs and local
//! development: the system's server binaries, a fresh temp directory, a
//! unix socket only (no TCP port), `fsync=off`. Stopped and deleted on
//! `stop()` or drop.
//!
//! As root (`initdb` refuses to run as root) the directories are created
//! owned by `postgres` and every server command runs through
//! `runuser -u postgres --`. Starting blocks the calling thread for about a
//! second; from async code call it inside `spawn_blocking` if that matters.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::config::StoreConfig;
use crate::error::StoreError;
use crate::freeze::Frozen;
use crate::reaper::Reaper;

/// Unix socket paths are limited to ~107 bytes; leave room for
/// `/sock/.s.PGSQL.NNNNN`.
const MAX_BASE_LEN: usize = 80;

/// Knobs for [`LocalPostgres::start`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalOptions {
    /// Server `max_connections`.
    pub max_connections: u32,
    /// Port number in the socket file name (no TCP listener is opened).
    pub port: u16,
    /// How long `pg_ctl` may wait for the server to accept connections.
    pub start_timeout: Duration,
    /// Directory holding `initdb`/`pg_ctl`; found automatically when `None`.
    pub bin_dir: Option<PathBuf>,
}

impl Default for LocalOptions {
    fn default() -> Self {
        Self {
            max_connections: 400,
            port: 5432,
            start_timeout: Duration::from_secs(30),
            bin_dir: None,
        }
    }
}

/// A running throwaway cluster.
#[derive(Debug)]
pub struct LocalPostgres {
    base: PathBuf,
    data: PathBuf,
    sock: PathBuf,
    bin: PathBuf,
    port: u16,
    /// Running as root: commands go through `runuser -u postgres --`.
    as_postgres: bool,
    running: bool,
    /// Stops the cluster and removes `base` if this process dies without
    /// running `Drop` (see `reaper`). `None` once dismissed.
    reaper: Option<Reaper>,
}

impl LocalPostgres {
    /// Creates, initialises and starts a cluster.
    ///
    /// # Errors
    /// `PostgresNotInstalled` when no server binaries are found;
    /// `LocalPostgres` naming the failing step otherwise.
    pub fn start(opts: LocalOptions) -> Result<LocalPostgres, StoreError> {
        let bin = find_bin_dir(opts.bin_dir.as_deref())?;
        let base = fresh_base_dir()?;
        let mut pg = LocalPostgres {
            data: base.join("data"),
            sock: base.join("sock"),
            base,
            bin,
            port: opts.port,
            as_postgres: running_as_root(),
            running: false,
            reaper: None,
        };
        // From here on, Drop removes the directory if a step fails, and the
        // reaper does if this process dies without dropping.
        let reaper = Reaper::spawn(&pg.base, &pg.data, &pg.bin.join("pg_ctl"), pg.as_postgres)
            .map_err(|e| StoreError::LocalPostgres {
                step: "start the orphan guard",
                detail: format!("sh: {e}"),
            })?;
        pg.reaper = Some(reaper);
        pg.make_dirs()?;
        pg.initdb()?;
        pg.pg_ctl_start(&opts)?;
        pg.running = true;
        tracing::info!(socket = %pg.sock.display(), "local postgres started");
        Ok(pg)
    }

    /// Connection string for [`StoreConfig::conninfo`].
    #[must_use]
    pub fn conninfo(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres",
            self.sock.display(),
            self.port
        )
    }

    /// A [`StoreConfig`] with defaults pointing at this cluster.
    #[must_use]
    pub fn store_config(&self, instance: &str) -> StoreConfig {
        StoreConfig::new(self.conninfo(), instance)
    }

    /// Directory holding the unix socket.
    #[must_use]
    pub fn socket_dir(&self) -> &Path {
        &self.sock
    }

    /// Process id of the postmaster (e.g. to SIGSTOP it to simulate a stall).
    ///
    /// # Errors
    /// `LocalPostgres` when `postmaster.pid` cannot be read.
    pub fn pid(&self) -> Result<u32, StoreError> {
        let text = fs::read_to_string(self.data.join("postmaster.pid")).map_err(|e| {
            StoreError::LocalPostgres {
                step: "read postmaster.pid",
                detail: e.to_string(),
            }
        })?;
        let first = text.lines().next().unwrap_or_default().trim();
        first.parse().map_err(|_| StoreError::LocalPostgres {
            step: "read postmaster.pid",
            detail: format!("not a pid: {first:?}"),
        })
    }

    /// Freezes the cluster with SIGSTOP — the postmaster first (so it forks
    /// nothing new), then every backend and auxiliary process — until the
    /// returned guard is thawed or dropped (SIGCONT). Open connections stop
    /// answering as well as new ones: Postgres hangs, it does not refuse.
    ///
    /// # Errors
    /// `LocalPostgres` when the pid cannot be read or the processes could
    /// not be stopped (whatever was stopped is continued).
    pub fn freeze(&self) -> Result<Frozen, StoreError> {
        Frozen::stop(self.pid()?)
    }

    /// Stops the server (`pg_ctl -m immediate`) and deletes its directory.
    ///
    /// # Errors
    /// `LocalPostgres` when the server would not stop or the directory
    /// could not be removed.
    pub fn stop(mut self) -> Result<(), StoreError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), StoreError> {
        let stopped = if self.running {
            self.running = false;
            self.stop_server()
        } else {
            Ok(())
        };
        let removed = match fs::remove_dir_all(&self.base) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StoreError::LocalPostgres {
                step: "remove directory",
                detail: format!("{}: {e}", self.base.display()),
            }),
            _ => Ok(()),
        };
        // Only when both worked is the reaper's job done; otherwise it stays
        // armed and tries again when this process exits.
        if stopped.is_ok()
            && removed.is_ok()
            && let Some(reaper) = self.reaper.take()
        {
            reaper.dismiss();
        }
        stopped.and(removed)
    }

    fn stop_server(&self) -> Result<(), StoreError> {
        let pid = self.pid().ok();
        if let Some(pid) = pid {
            // A test may have left it SIGSTOPped; a stopped postmaster
            // cannot act on the stop request.
            let _ = Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .output();
        }
        let data = self.data.display().to_string();
        let res = self.run_pg(
            "pg_ctl stop",
            "pg_ctl",
            &["-D", &data, "-m", "immediate", "-w", "-t", "10", "stop"],
        );
        if res.is_err()
            && let Some(pid) = pid
        {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .output();
        }
        res.map(|_| ())
    }

    fn make_dirs(&self) -> Result<(), StoreError> {
        let step = "create directories";
        if self.as_postgres {
            for (dir, mode) in [(&self.data, "700"), (&self.sock, "755")] {
                let dir = dir.display().to_string();
                let args = ["-d", "-o", "postgres", "-g", "postgres", "-m", mode, &dir];
                checked(step, Command::new("install").args(args).output())?;
            }
            return Ok(());
        }
        for (dir, mode) in [(&self.data, 0o700), (&self.sock, 0o755)] {
            fs::create_dir(dir)
                .and_then(|()| fs::set_permissions(dir, fs::Permissions::from_mode(mode)))
                .map_err(|e| StoreError::LocalPostgres {
                    step,
                    detail: format!("{}: {e}", dir.display()),
                })?;
        }
        Ok(())
    }

    fn initdb(&self) -> Result<(), StoreError> {
        let data = self.data.display().to_string();
        let args = [
            "-D",
            &data,
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
        ];
        self.run_pg("initdb", "initdb", &args).map(|_| ())
    }

    fn pg_ctl_start(&self, opts: &LocalOptions) -> Result<(), StoreError> {
        let data = self.data.display().to_string();
        let log = self.data.join("server.log").display().to_string();
        let timeout = opts.start_timeout.as_secs().max(1).to_string();
        let server_opts = format!(
            "-c listen_addresses='' -k {} -p {} -c max_connections={} \
             -c fsync=off -c synchronous_commit=off -c full_page_writes=off",
            self.sock.display(),
            self.port,
            opts.max_connections
        );
        let args = [
            "-D",
            &data,
            "-l",
            &log,
            "-w",
            "-t",
            &timeout,
            "-o",
            &server_opts,
            "start",
        ];
        self.run_pg("pg_ctl start", "pg_ctl", &args).map_err(|e| {
            let tail = fs::read_to_string(self.data.join("server.log")).unwrap_or_default();
            let tail: String = tail.lines().rev().take(10).collect::<Vec<_>>().join(" | ");
            StoreError::LocalPostgres {
                step: "pg_ctl start",
                detail: format!("{e}; server log (last lines, newest first): {tail}"),
            }
        })?;
        Ok(())
    }

    /// Runs a server binary, as `postgres` when we are root.
    fn run_pg(&self, step: &'static str, tool: &str, args: &[&str]) -> Result<Output, StoreError> {
        let exe = self.bin.join(tool);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        // `runuser` keeps our cwd, which `postgres` may not be able to read.
        cmd.args(args).current_dir(&self.base);
        checked(step, cmd.output())
    }
}

impl Drop for LocalPostgres {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::warn!(error = %e, "local postgres cleanup failed");
        }
    }
}

/// Maps a spawn failure or a non-zero exit to a `LocalPostgres` error.
fn checked(step: &'static str, out: std::io::Result<Output>) -> Result<Output, StoreError> {
    let out = out.map_err(|e| StoreError::LocalPostgres {
        step,
        detail: format!("cannot run: {e}"),
    })?;
    if out.status.success() {
        return Ok(out);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    Err(StoreError::LocalPostgres {
        step,
        detail: format!("{}: {} {}", out.status, stderr.trim(), stdout.trim()),
    })
}

/// A new, empty, world-readable directory (the `postgres` user must be
/// able to traverse it to reach its own subdirectories).
fn fresh_base_dir() -> Result<PathBuf, StoreError> {
    let mut root = std::env::temp_dir();
    if root.as_os_str().len() > MAX_BASE_LEN - 20 {
        root = PathBuf::from("/tmp");
    }
    let simple = uuid::Uuid::new_v4().simple().to_string();
    let base = root.join(format!("callgate-pg-{}", &simple[..12]));
    fs::create_dir(&base)
        .and_then(|()| fs::set_permissions(&base, fs::Permissions::from_mode(0o755)))
        .map_err(|e| StoreError::LocalPostgres {
            step: "create directories",
            detail: format!("{}: {e}", base.display()),
        })?;
    Ok(base)
}

/// Effective uid 0, read from `/proc/self/status` (no libc: `unsafe` is
/// denied in this workspace).
fn running_as_root() -> bool {
    let Ok(status) = fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1).map(|euid| euid == "0"))
        .unwrap_or(false)
}

/// `explicit`, else the highest `/usr/lib/postgresql/<v>/bin`, else
/// `pg_config --bindir`, else the first `initdb` on `PATH`.
fn find_bin_dir(explicit: Option<&Path>) -> Result<PathBuf, StoreError> {
    let has_initdb = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    let mut searched = Vec::new();
    if let Some(dir) = explicit {
        if has_initdb(dir) {
            return Ok(dir.to_path_buf());
        }
        searched.push(dir.display().to_string());
    }
    searched.push("/usr/lib/postgresql/*/bin".to_owned());
    if let Some(dir) = highest_debian_bin_dir().filter(|d| has_initdb(d)) {
        return Ok(dir);
    }
    searched.push("pg_config --bindir".to_owned());
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if let Some(dir) = from_pg_config.filter(|d| has_initdb(d)) {
        return Ok(dir);
    }
    searched.push("$PATH".to_owned());
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    if let Some(dir) = on_path.into_iter().find(|d| has_initdb(d)) {
        return Ok(dir);
    }
    Err(StoreError::PostgresNotInstalled {
        searched: searched.join(", "),
    })
}

fn highest_debian_bin_dir() -> Option<PathBuf> {
    let entries = fs::read_dir("/usr/lib/postgresql").ok()?;
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            Some((version, e.path().join("bin")))
        })
        .max_by_key(|(v, _)| *v)
        .map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_binaries_are_found_and_a_missing_install_names_the_package() {
        let dir = find_bin_dir(Some(Path::new("/nowhere"))).unwrap();
        assert!(dir.join("initdb").is_file() && dir.join("pg_ctl").is_file());
        let err = StoreError::PostgresNotInstalled {
            searched: "/nowhere".into(),
        };
        assert!(err.to_string().contains("`postgresql` package"));
    }

    #[test]
    fn base_dirs_are_unique_and_short() {
        let a = fresh_base_dir().unwrap();
        let b = fresh_base_dir().unwrap();
        assert_ne!(a, b);
        assert!(a.as_os_str().len() <= MAX_BASE_LEN);
        fs::remove_dir(&a).unwrap();
        fs::remove_dir(&b).unwrap();
    }
}
