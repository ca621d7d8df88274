//! Driving the real `sipp` (SIPp 3.6.1, Debian `sip-tester`) against
//! callgate, bounded in time, plus raw SIP senders for the torture corpus.
//!
//! What it is: [`Sipp::uac`] and [`Sipp::uas`] start one sipp process on a
//! scenario under `tests/sip/` (see `tests/sip/README.md` for each file and
//! its variables), in a throwaway working directory, bound to 127.0.0.1
//! only, with every trace file it can write switched on. [`SippRun::wait`]
//! returns a [`SippOutcome`]: exit code, successful/failed calls, the
//! scenario's counters (`counter="..."` attributes) from the `-trace_stat`
//! CSV, per-message counts (`-trace_counts`), `<log>` lines, sipp's error
//! log and, when [`SippOpts::capture_rtp`] is set, every RTP packet that
//! crossed sipp's media port ([`RtpStats`]).
//!
//! What it never does: wait without a bound (sipp gets `-timeout` and the
//! harness kills it a few seconds later; a dropped [`SippRun`] kills it at
//! once), bind anything but loopback, or skip a test because sipp or
//! dumpcap is missing: it panics with the reason.
//!
//! Why RTP is counted by capture: sipp 3.6.1 counts received RTP only in
//! its `-rtp_echo` thread, which sends every packet back (callgate would
//! hear its own voice). So [`RtpCapture`] runs `dumpcap` on `lo` filtered
//! on sipp's media port, which needs root or `CAP_NET_RAW` (the same as
//! sipp's `play_pcap_audio`, used by `dtmf_rfc4733.xml`).
//!
//! ```no_run
//! # async fn demo(callgate_sip: std::net::SocketAddr) {
//! use std::time::Duration;
//! use callgate_rig::peers::sipp::{Sipp, SippOpts};
//!
//! let opts = SippOpts {
//!     capture_rtp: true,
//!     timeout: Duration::from_secs(60),
//!     ..SippOpts::default()
//! }
//! .var("hold_ms", "8000");
//! let out = Sipp::uac("call_pcmu.xml", callgate_sip, opts).await.wait().await;
//! out.assert_ok();
//! let rtp = out.rtp.as_ref().expect("captured");
//! assert!(rtp.received().count() > 100, "no RTP came back: {out}");
//! # }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::process::{Child, Command};

mod raw;
mod rtp;

pub use raw::{RawSip, TcpReply, send_raw_tcp, send_raw_udp, torture};
pub use rtp::{RtpCapture, RtpPacket, RtpStats};

/// How much longer than its own `-timeout` sipp may take before the
/// harness kills it: enough for it to write its final statistics.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// How long [`SippRun::stop`] waits after SIGUSR1 (sipp's soft exit:
/// finish the calls in progress, start no new ones) before killing.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How long a UAS gets to bind its SIP port, and dumpcap to start.
const START_BOUND: Duration = Duration::from_secs(5);

/// Lines of sipp's stderr kept in an outcome.
const STDERR_TAIL_LINES: usize = 40;

const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// SIP transport for sipp (`-t u1` / `-t t1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

/// How to run one sipp process.
#[derive(Debug, Clone)]
pub struct SippOpts {
    pub transport: Transport,
    /// Calls to complete before exiting (`-m`). A UAS exits after this many
    /// incoming calls; 0 means "load the scenario and exit".
    pub calls: u32,
    /// Calls started per second (`-r`); sipp's default is 10.
    pub rate: Option<u32>,
    /// Most calls at once (`-l`).
    pub limit: Option<u32>,
    /// SIP port (`-p`); a free one when `None`. sipp's own default is 5060,
    /// which parallel tests would fight over.
    pub local_port: Option<u16>,
    /// RTP port (`-mp`, the `[media_port]` in the SDP; `+2` is bound too);
    /// a free pair when `None`.
    pub media_port: Option<u16>,
    /// Scenario variables (`-set NAME VALUE`); the scenario must declare
    /// them in `<Global variables=...>` or sipp refuses to start.
    pub vars: Vec<(String, String)>,
    /// Any other arguments, passed as they are (`-aa`, `-rtp_echo`,
    /// `-d 1000`, `-key k v`, ...).
    pub extra: Vec<String>,
    /// sipp's global `-timeout` (with `-timeout_error`); the harness kills
    /// it [`KILL_GRACE`] later.
    pub timeout: Duration,
    /// Capture sipp's media port with dumpcap: [`SippOutcome::rtp`].
    pub capture_rtp: bool,
    /// Keep sipp's full message trace ([`SippOutcome::messages`]).
    pub trace_msg: bool,
}

impl Default for SippOpts {
    fn default() -> Self {
        SippOpts {
            transport: Transport::Udp,
            calls: 1,
            rate: None,
            limit: None,
            local_port: None,
            media_port: None,
            vars: Vec::new(),
            extra: Vec::new(),
            timeout: Duration::from_secs(30),
            capture_rtp: false,
            trace_msg: true,
        }
    }
}

impl SippOpts {
    /// Adds `-set name value`.
    pub fn var(mut self, name: &str, value: &str) -> Self {
        self.vars.push((name.to_string(), value.to_string()));
        self
    }

    /// Adds raw arguments.
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.extra.extend(args.into_iter().map(Into::into));
        self
    }
}

/// Which side sipp plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Client(SocketAddr),
    Server,
}

/// Entry points.
pub struct Sipp;

impl Sipp {
    /// Starts sipp as a UAC of `scenario` (a path under `tests/sip/`, e.g.
    /// `"call_pcmu.xml"`) against `target`.
    pub async fn uac(scenario: &str, target: SocketAddr, opts: SippOpts) -> SippRun {
        SippRun::start(scenario, Role::Client(target), opts).await
    }

    /// Starts sipp as a UAS of `scenario` on 127.0.0.1 and returns once its
    /// SIP port is bound ([`SippRun::sip_addr`]).
    pub async fn uas(scenario: &str, opts: SippOpts) -> SippRun {
        SippRun::start(scenario, Role::Server, opts).await
    }

    /// Loads `scenario` without placing or taking a call (`-m 0`): sipp
    /// parses the XML, checks variables and caches the rtp_stream files,
    /// then exits. `Err` carries sipp's complaint.
    ///
    /// # Errors
    ///
    /// When sipp exits non-zero or prints an error.
    pub async fn check(scenario: &str) -> Result<(), String> {
        let opts = SippOpts {
            calls: 0,
            timeout: Duration::from_secs(5),
            trace_msg: false,
            ..SippOpts::default()
        };
        let dead = SocketAddr::V4(SocketAddrV4::new(LOOPBACK, 9));
        let out = SippRun::start(scenario, Role::Client(dead), opts)
            .await
            .wait()
            .await;
        if out.exit_code == Some(0) && !out.stderr_tail.contains("rror") {
            Ok(())
        } else {
            Err(format!(
                "{out}\n{}\n{}",
                out.stderr_tail,
                tail(&out.errors, 10)
            ))
        }
    }
}

/// The directory holding the scenarios (`tests/sip/`).
pub fn scenario_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/sip")
}

/// A running sipp. Dropping it kills sipp and removes its directory.
pub struct SippRun {
    // Field order matters for Drop: the process dies before its directory.
    child: Child,
    capture: Option<RtpCapture>,
    dir: TempDir,
    scenario: String,
    sip_addr: SocketAddr,
    media_port: u16,
    deadline: tokio::time::Instant,
}

impl SippRun {
    async fn start(scenario: &str, role: Role, opts: SippOpts) -> SippRun {
        let file = scenario_dir().join(scenario);
        assert!(file.is_file(), "no sipp scenario {}", file.display());
        let dir = TempDir::new("sipp");
        // rtp_stream opens its files relative to the working directory.
        std::os::unix::fs::symlink(scenario_dir().join("audio"), dir.path().join("audio"))
            .expect("link the audio directory");

        let sip_port = opts.local_port.unwrap_or_else(|| free_port(opts.transport));
        let media_port = opts.media_port.unwrap_or_else(free_media_pair);
        let sip_addr = SocketAddr::V4(SocketAddrV4::new(LOOPBACK, sip_port));
        let args = sipp_args(&file, role, &opts, sip_port, media_port);

        let capture = if opts.capture_rtp {
            Some(RtpCapture::start(media_port).await)
        } else {
            None
        };
        let child = Command::new("sipp")
            .args(&args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(file_in(&dir, "stdout.txt"))
            .stderr(file_in(&dir, "stderr.txt"))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run sipp (Debian package sip-tester): {e}"));
        let deadline = tokio::time::Instant::now() + opts.timeout + KILL_GRACE;
        let mut run = SippRun {
            child,
            capture,
            dir,
            scenario: scenario.to_string(),
            sip_addr,
            media_port,
            deadline,
        };
        if role == Role::Server {
            run.wait_listening(opts.transport).await;
        }
        run
    }

    /// Waits until sipp holds its SIP port (a bind of the same address
    /// fails), so a client started next is not refused.
    async fn wait_listening(&mut self, transport: Transport) {
        let until = Instant::now() + START_BOUND;
        loop {
            let taken = match transport {
                Transport::Udp => UdpSocket::bind(self.sip_addr).is_err(),
                Transport::Tcp => TcpListener::bind(self.sip_addr).is_err(),
            };
            if taken {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "sipp {} exited ({status}) before listening: {}",
                    self.scenario,
                    tail(&read_lossy(&self.dir.path().join("stderr.txt")), 10)
                );
            }
            assert!(
                Instant::now() < until,
                "sipp {} did not bind {} within {START_BOUND:?}",
                self.scenario,
                self.sip_addr
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Where sipp's SIP socket is (the address to send to, for a UAS).
    pub fn sip_addr(&self) -> SocketAddr {
        self.sip_addr
    }

    /// sipp's RTP port (`[media_port]`).
    pub fn media_port(&self) -> u16 {
        self.media_port
    }

    /// Waits for sipp to finish (bounded by the options' timeout plus a
    /// grace, then killed) and collects what it reported.
    pub async fn wait(mut self) -> SippOutcome {
        let status = tokio::time::timeout_at(self.deadline, self.child.wait()).await;
        let (exit_code, timed_out) = match status {
            Ok(status) => (status.expect("wait for sipp").code(), false),
            Err(_) => {
                self.kill().await;
                (None, true)
            }
        };
        self.collect(exit_code, timed_out).await
    }

    /// Asks sipp to stop (SIGUSR1: no new calls, finish the current ones),
    /// waits up to [`STOP_GRACE`], kills it otherwise. For a UAS that was
    /// started without a call count.
    pub async fn stop(mut self) -> SippOutcome {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-USR1", &pid.to_string()])
                .status();
        }
        let until = tokio::time::Instant::now() + STOP_GRACE;
        let status = tokio::time::timeout_at(until.min(self.deadline), self.child.wait()).await;
        let (exit_code, timed_out) = match status {
            Ok(status) => (status.expect("wait for sipp").code(), false),
            Err(_) => {
                self.kill().await;
                (None, true)
            }
        };
        self.collect(exit_code, timed_out).await
    }

    async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    async fn collect(&mut self, exit_code: Option<i32>, timed_out: bool) -> SippOutcome {
        let rtp = match self.capture.take() {
            Some(capture) => Some(capture.finish().await),
            None => None,
        };
        let dir = self.dir.path();
        let stats = last_csv_row(&read_lossy(&dir.join("stat.csv")));
        let message_counts = find_file(dir, "_counts.csv")
            .map(|p| last_csv_row(&read_lossy(&p)))
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v)| v.trim().parse().ok().map(|v| (k, v)))
            .collect();
        let stat = |name: &str| stats.get(name).and_then(|v| v.trim().parse().ok());
        SippOutcome {
            scenario: self.scenario.clone(),
            exit_code,
            timed_out,
            successful_calls: stat("SuccessfulCall(C)").unwrap_or(0),
            failed_calls: stat("FailedCall(C)").unwrap_or(0),
            message_counts,
            logs: read_lossy(&dir.join("logs.log"))
                .lines()
                .map(str::to_string)
                .collect(),
            errors: read_lossy(&dir.join("errors.log")),
            screen: read_lossy(&dir.join("screen.log")),
            stderr_tail: tail(&read_lossy(&dir.join("stderr.txt")), STDERR_TAIL_LINES),
            messages: read_lossy(&dir.join("messages.log")),
            stats,
            rtp,
        }
    }
}

/// sipp's command line for one run. Everything it binds is on 127.0.0.1,
/// including the remote-control socket (`-ci`/`-cp`), which otherwise
/// listens on 0.0.0.0:8888.
fn sipp_args(
    file: &Path,
    role: Role,
    opts: &SippOpts,
    sip_port: u16,
    media_port: u16,
) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let mut push = |items: &[&str]| a.extend(items.iter().map(|s| s.to_string()));
    if let Role::Client(target) = role {
        push(&[&target.to_string()]);
    }
    let secs = opts.timeout.as_secs().max(1).to_string();
    push(&["-sf", &file.to_string_lossy()]);
    push(&[
        "-t",
        if opts.transport == Transport::Tcp {
            "t1"
        } else {
            "u1"
        },
    ]);
    push(&[
        "-i",
        "127.0.0.1",
        "-bind_local",
        "-p",
        &sip_port.to_string(),
    ]);
    push(&["-mi", "127.0.0.1", "-mp", &media_port.to_string()]);
    push(&[
        "-ci",
        "127.0.0.1",
        "-cp",
        &free_port(Transport::Udp).to_string(),
    ]);
    push(&["-m", &opts.calls.to_string(), "-nostdin"]);
    push(&["-timeout", &format!("{secs}s"), "-timeout_error"]);
    push(&[
        "-trace_stat",
        "-stf",
        "stat.csv",
        "-fd",
        "1",
        "-trace_counts",
    ]);
    push(&["-trace_logs", "-log_file", "logs.log"]);
    push(&["-trace_err", "-error_file", "errors.log"]);
    push(&["-trace_screen", "-screen_file", "screen.log"]);
    if opts.trace_msg {
        push(&["-trace_msg", "-message_file", "messages.log"]);
    }
    if let Some(rate) = opts.rate {
        push(&["-r", &rate.to_string()]);
    }
    if let Some(limit) = opts.limit {
        push(&["-l", &limit.to_string()]);
    }
    for (name, value) in &opts.vars {
        push(&["-set", name, value]);
    }
    a.extend(opts.extra.iter().cloned());
    a
}

/// What one sipp run reported.
#[derive(Debug, Clone)]
pub struct SippOutcome {
    pub scenario: String,
    /// 0: every call succeeded; 1: at least one failed, or a fatal error
    /// while loading (bad scenario, unknown `-set` variable, missing audio
    /// file: see `stderr_tail`); 255: sipp's `-timeout` fired (it runs with
    /// `-timeout_error`) or a fatal error while running; 97: stopped by an
    /// internal command; 99: no call processed; 134: sipp aborted on an
    /// assertion (some scenario errors). `None` when the harness killed it.
    pub exit_code: Option<i32>,
    /// The harness killed sipp at its deadline.
    pub timed_out: bool,
    /// `SuccessfulCall(C)`: calls that reached the end of the scenario.
    pub successful_calls: u64,
    /// `FailedCall(C)`: the sum of all the `Failed*(C)` reasons in `stats`.
    pub failed_calls: u64,
    /// The last row of the `-trace_stat` CSV, by column (`CallRate(C)`,
    /// `FailedTimeoutOnRecv(C)`, `answered(C)`, ...).
    pub stats: BTreeMap<String, String>,
    /// The last row of the `-trace_counts` CSV: per scenario step, e.g.
    /// `"9_503_Recv"`, `"15_BYE_Sent"`, `"5_200_Timeout"`.
    pub message_counts: BTreeMap<String, u64>,
    /// `<log message=...>` lines, in order.
    pub logs: Vec<String>,
    /// sipp's error log: warnings, unexpected messages, aborted calls.
    pub errors: String,
    /// The final statistics screen.
    pub screen: String,
    pub stderr_tail: String,
    /// Every SIP message sent and received (when `trace_msg`).
    pub messages: String,
    /// RTP at sipp's media port (when `capture_rtp`).
    pub rtp: Option<RtpStats>,
}

impl SippOutcome {
    /// Exited 0 by itself.
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }

    /// Panics with everything sipp said unless it [`succeeded`](Self::succeeded).
    pub fn assert_ok(&self) {
        assert!(
            self.succeeded(),
            "sipp run failed: {self}\n{}",
            self.details()
        );
    }

    /// A scenario counter (`counter="name"`), cumulated over the run.
    pub fn counter(&self, name: &str) -> u64 {
        self.stats
            .get(&format!("{name}(C)"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// `load_uac.xml`'s `rejected_<code>` counters that are not zero.
    pub fn rejected_by_code(&self) -> BTreeMap<u16, u64> {
        self.stats
            .iter()
            .filter_map(|(k, v)| {
                let code = k.strip_prefix("rejected_")?.strip_suffix("(C)")?;
                let n: u64 = v.trim().parse().ok()?;
                Some((code.parse().ok()?, n)).filter(|&(_, n)| n > 0)
            })
            .collect()
    }

    /// The error log, stderr and the last screen, for a failure message.
    pub fn details(&self) -> String {
        format!(
            "--- errors.log\n{}\n--- stderr\n{}\n--- screen\n{}\n--- logs\n{}",
            tail(&self.errors, 30),
            self.stderr_tail,
            self.screen,
            self.logs.join("\n")
        )
    }
}

impl fmt::Display for SippOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: exit {:?}{}, {} successful, {} failed",
            self.scenario,
            self.exit_code,
            if self.timed_out {
                " (killed at deadline)"
            } else {
                ""
            },
            self.successful_calls,
            self.failed_calls
        )?;
        if let Some(rtp) = &self.rtp {
            write!(f, ", RTP {}", rtp)?;
        }
        Ok(())
    }
}

/// Header row and last data row of one of sipp's `;`-separated CSV files.
fn last_csv_row(text: &str) -> BTreeMap<String, String> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let Some(header) = lines.next() else {
        return BTreeMap::new();
    };
    let Some(last) = lines.next_back() else {
        return BTreeMap::new();
    };
    header
        .split(';')
        .zip(last.split(';'))
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

// ------------------------------------------------------------------ bits

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "callgate-{what}-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        TempDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn file_in(dir: &TempDir, name: &str) -> std::fs::File {
    std::fs::File::create(dir.path().join(name)).expect("create a sipp output file")
}

fn read_lossy(path: &Path) -> String {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn find_file(dir: &Path, suffix: &str) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(suffix))
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A loopback port no other test process is handed ([`crate::ports`]);
/// the transport does not matter, every claimed port binds for both.
fn free_port(_transport: Transport) -> u16 {
    crate::ports::claim().expect("claim a loopback port")
}

/// An even UDP port `p` with `p + 1`..`p + 3` claimed too (sipp binds the
/// media port and the one two above).
fn free_media_pair() -> u16 {
    crate::ports::claim().expect("claim a block of loopback ports")
}

#[cfg(test)]
mod tests;
