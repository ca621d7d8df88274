//! Every command that starts children stops them on any stop signal: the
//! demo (mid-run and serving) on SIGTERM leaves no Postgres process and no
//! temporary folder, exiting 143 when its calls were cut short; and when the
//! demo itself is SIGKILLed, the throwaway Postgres's orphan guard stops the
//! cluster and removes its folder anyway.
//!
//! Each run gets a private `TMPDIR`, so "nothing left" is checked against
//! this run's folders and processes only, whatever else runs beside it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A short private temporary directory (the cluster's socket path must
/// stay short, or the cluster falls back to `/tmp`).
fn private_tmp(tag: &str) -> PathBuf {
    let dir = PathBuf::from(format!("/tmp/cgs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    dir
}

fn spawn_demo(tmp: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_callgate"))
        .arg("demo")
        .args(args)
        .env("TMPDIR", tmp)
        .env_remove("CALLGATE_DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run callgate demo")
}

/// Waits (bounded) until `out` (a child's stdout or stderr) prints a line
/// containing `needle`; the rest is drained in the background.
fn wait_line(out: impl std::io::Read + Send + 'static, needle: &'static str) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.contains(needle) {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(120))
        .unwrap_or_else(|_| panic!("never printed {needle:?}"));
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the demo did not exit");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Processes (other than the dead demo) whose command line names `tmp`:
/// the cluster's postmaster and backends run with `-D <tmp>/…`.
fn processes_under(tmp: &Path) -> Vec<String> {
    let needle = tmp.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(&needle) {
            found.push(format!("{}: {cmd}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

/// Nothing of this run is left: no process names its folder, and the
/// folder holds nothing. Polled with a bound (the orphan guard works after
/// its parent is gone).
fn assert_nothing_left(tmp: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let procs = processes_under(tmp);
        let files: Vec<_> = std::fs::read_dir(tmp).unwrap().flatten().collect();
        if procs.is_empty() && files.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left behind: processes {procs:#?}, files {files:#?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::fs::remove_dir(tmp).unwrap();
}

#[test]
fn demo_serve_on_sigterm_stops_its_postgres_and_removes_its_folder() {
    let tmp = private_tmp("serve-term");
    let mut child = spawn_demo(&tmp, &["--serve"]);
    wait_line(child.stdout.take().unwrap(), "/call");
    assert!(!processes_under(&tmp).is_empty(), "its Postgres runs");
    signal(&child, "-TERM");
    let status = wait_exit(&mut child);
    assert!(
        status.success(),
        "serving is the job: a clean stop is 0, got {status:?}"
    );
    assert_nothing_left(&tmp);
}

#[test]
fn demo_cut_short_by_sigterm_exits_143_and_leaves_nothing() {
    let tmp = private_tmp("run-term");
    let mut child = spawn_demo(&tmp, &["--calls", "20", "--ramp-s", "20"]);
    wait_line(child.stderr.take().unwrap(), "placing");
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, "-TERM");
    let status = wait_exit(&mut child);
    assert_eq!(status.code(), Some(143), "cut short by SIGTERM: {status:?}");
    assert_nothing_left(&tmp);
}

#[test]
fn a_killed_demo_leaves_no_postgres_running_and_no_folder() {
    let tmp = private_tmp("serve-kill");
    let mut child = spawn_demo(&tmp, &["--serve"]);
    wait_line(child.stdout.take().unwrap(), "/call");
    assert!(!processes_under(&tmp).is_empty(), "its Postgres runs");
    signal(&child, "-KILL");
    let _ = wait_exit(&mut child);
    assert_nothing_left(&tmp);
}
