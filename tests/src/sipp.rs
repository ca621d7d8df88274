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
//! use callgate_tests::sipp::{Sipp, SippOpts};
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

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

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
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sip")
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

// ------------------------------------------------------------------ RTP

/// A dumpcap capture of UDP to and from one port on `lo`.
pub struct RtpCapture {
    child: Child,
    file: PathBuf,
    port: u16,
    started: SystemTime,
    _dir: TempDir,
}

impl RtpCapture {
    /// Starts capturing `udp port {port}` on `lo` and returns once dumpcap
    /// says it is capturing. Panics when it cannot (dumpcap missing, no
    /// `CAP_NET_RAW`).
    pub async fn start(port: u16) -> RtpCapture {
        let dir = TempDir::new("rtpcap");
        let file = dir.path().join("rtp.pcap");
        let mut child = Command::new("dumpcap")
            .args(["-i", "lo", "-f", &format!("udp port {port}"), "-P", "-w"])
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run dumpcap (wireshark-common): {e}"));
        let stderr = child.stderr.take().expect("dumpcap stderr");
        let mut lines = BufReader::new(stderr).lines();
        let mut said = String::new();
        let ready = tokio::time::timeout(START_BOUND, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("Capturing on") {
                    return true;
                }
                said.push_str(&line);
                said.push('\n');
            }
            false
        })
        .await;
        assert!(
            ready == Ok(true),
            "dumpcap did not start capturing on lo (needs root or CAP_NET_RAW): {said}"
        );
        // Keep draining its stderr so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        RtpCapture {
            child,
            file,
            port,
            started: SystemTime::now(),
            _dir: dir,
        }
    }

    /// Stops dumpcap (SIGTERM, so it flushes) and parses what it caught.
    pub async fn finish(mut self) -> RtpStats {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        if tokio::time::timeout(Duration::from_secs(3), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
        let bytes = std::fs::read(&self.file).unwrap_or_default();
        RtpStats {
            port: self.port,
            packets: parse_pcap(&bytes, self.started),
        }
    }
}

/// RTP seen on one port, both directions, in capture order.
#[derive(Debug, Clone, Default)]
pub struct RtpStats {
    /// The captured port (sipp's media port).
    pub port: u16,
    pub packets: Vec<RtpPacket>,
}

/// One RTP packet (version 2; anything else on the port is skipped).
#[derive(Debug, Clone)]
pub struct RtpPacket {
    /// Since the capture started.
    pub at: Duration,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub marker: bool,
    pub payload_type: u8,
    pub seq: u16,
    pub timestamp: u32,
    pub ssrc: u32,
    pub payload: Vec<u8>,
}

impl RtpStats {
    /// Packets sent to the port (by callgate, to sipp).
    pub fn received(&self) -> impl Iterator<Item = &RtpPacket> {
        self.packets
            .iter()
            .filter(move |p| p.dst.port() == self.port)
    }

    /// Packets sent from the port (by sipp).
    pub fn sent(&self) -> impl Iterator<Item = &RtpPacket> {
        self.packets
            .iter()
            .filter(move |p| p.src.port() == self.port)
    }

    /// Received packets by payload type.
    pub fn received_by_payload_type(&self) -> BTreeMap<u8, u64> {
        count_by(self.received(), |p| p.payload_type)
    }

    /// Sent packets by payload type.
    pub fn sent_by_payload_type(&self) -> BTreeMap<u8, u64> {
        count_by(self.sent(), |p| p.payload_type)
    }

    /// Received packets by SSRC (one per call and stream).
    pub fn received_by_ssrc(&self) -> BTreeMap<u32, u64> {
        count_by(self.received(), |p| p.ssrc)
    }
}

fn count_by<'a, K: Ord>(
    packets: impl Iterator<Item = &'a RtpPacket>,
    key: impl Fn(&RtpPacket) -> K,
) -> BTreeMap<K, u64> {
    let mut m = BTreeMap::new();
    for p in packets {
        *m.entry(key(p)).or_insert(0) += 1;
    }
    m
}

impl fmt::Display for RtpStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "port {}: received {} {:?}, sent {} {:?}",
            self.port,
            self.received().count(),
            self.received_by_payload_type(),
            self.sent().count(),
            self.sent_by_payload_type()
        )
    }
}

/// Parses a classic pcap file (as `dumpcap -P` writes it) into RTP packets.
/// Link types: Ethernet (what `lo` gives), Linux cooked v1/v2, BSD null.
fn parse_pcap(bytes: &[u8], started: SystemTime) -> Vec<RtpPacket> {
    let u32_at = |b: &[u8], i: usize, le: bool| {
        let a = [b[i], b[i + 1], b[i + 2], b[i + 3]];
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    if bytes.len() < 24 {
        return Vec::new();
    }
    let le = match &bytes[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] => false,
        _ => return Vec::new(),
    };
    let link_header = match u32_at(bytes, 20, le) {
        1 => 14,   // Ethernet
        113 => 16, // Linux cooked
        276 => 20, // Linux cooked v2
        0 => 4,    // BSD loopback
        _ => return Vec::new(),
    };
    let epoch = started.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let mut out = Vec::new();
    let mut i = 24;
    while i + 16 <= bytes.len() {
        let sec = u64::from(u32_at(bytes, i, le));
        let usec = u64::from(u32_at(bytes, i + 4, le));
        let len = u32_at(bytes, i + 8, le) as usize;
        let Some(frame) = bytes.get(i + 16..i + 16 + len) else {
            break;
        };
        i += 16 + len;
        let at = Duration::from_micros(sec * 1_000_000 + usec).saturating_sub(epoch);
        if let Some(p) = frame
            .get(link_header..)
            .and_then(|ip| parse_ipv4_rtp(ip, at))
        {
            out.push(p);
        }
    }
    out
}

fn parse_ipv4_rtp(ip: &[u8], at: Duration) -> Option<RtpPacket> {
    if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 17 {
        return None;
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let udp = ip.get(ihl..)?;
    if udp.len() < 8 {
        return None;
    }
    let port = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
    let addr = |b: &[u8], p: u16| SocketAddr::from(([b[0], b[1], b[2], b[3]], p));
    let src = addr(&ip[12..16], port(&udp[0..2]));
    let dst = addr(&ip[16..20], port(&udp[2..4]));
    let rtp = &udp[8..];
    if rtp.len() < 12 || rtp[0] >> 6 != 2 {
        return None;
    }
    let csrc = usize::from(rtp[0] & 0x0f) * 4;
    let mut start = 12 + csrc;
    if rtp[0] & 0x10 != 0 {
        let ext = rtp.get(start + 2..start + 4)?;
        start += 4 + usize::from(u16::from_be_bytes([ext[0], ext[1]])) * 4;
    }
    Some(RtpPacket {
        at,
        src,
        dst,
        marker: rtp[1] & 0x80 != 0,
        payload_type: rtp[1] & 0x7f,
        seq: u16::from_be_bytes([rtp[2], rtp[3]]),
        timestamp: u32::from_be_bytes([rtp[4], rtp[5], rtp[6], rtp[7]]),
        ssrc: u32::from_be_bytes([rtp[8], rtp[9], rtp[10], rtp[11]]),
        payload: rtp.get(start..)?.to_vec(),
    })
}

// ------------------------------------------------------------ raw senders

/// Sends `bytes` as one datagram from a fresh loopback socket and returns
/// the first datagram that comes back within `wait`.
///
/// A UAS answers to the top Via's sent-by port (5060 when it has none,
/// RFC 3261 18.2.2) unless the Via has `rport`; the RFC 4475 messages carry
/// foreign Vias, so a reply may go elsewhere. Use [`RawSip::bind`] on the
/// port the message names when that matters.
pub async fn send_raw_udp(target: SocketAddr, bytes: &[u8], wait: Duration) -> Option<Vec<u8>> {
    let sock = RawSip::bind(0).await;
    sock.send(target, bytes).await;
    sock.recv(wait).await
}

/// A loopback UDP socket for hand-made SIP.
pub struct RawSip {
    socket: tokio::net::UdpSocket,
}

impl RawSip {
    /// Binds 127.0.0.1:`port` (0: any free port).
    pub async fn bind(port: u16) -> RawSip {
        let socket = tokio::net::UdpSocket::bind((LOOPBACK, port))
            .await
            .unwrap_or_else(|e| panic!("bind 127.0.0.1:{port}: {e}"));
        RawSip { socket }
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.socket.local_addr().expect("local address")
    }

    /// Sends one datagram; panics when the kernel refuses it (more than
    /// 65507 octets, for instance).
    pub async fn send(&self, target: SocketAddr, bytes: &[u8]) {
        self.socket
            .send_to(bytes, target)
            .await
            .unwrap_or_else(|e| panic!("send {} octets to {target}: {e}", bytes.len()));
    }

    /// The next datagram within `wait` (ICMP errors count as nothing).
    pub async fn recv(&self, wait: Duration) -> Option<Vec<u8>> {
        let until = tokio::time::Instant::now() + wait;
        let mut buf = vec![0u8; 65536];
        loop {
            match tokio::time::timeout_at(until, self.socket.recv_from(&mut buf)).await {
                Ok(Ok((n, _))) => return Some(buf[..n].to_vec()),
                // ECONNREFUSED from an earlier send: keep listening.
                Ok(Err(_)) => continue,
                Err(_) => return None,
            }
        }
    }

    /// Every datagram until none has come for `quiet`, or `max` is over.
    pub async fn recv_all(&self, quiet: Duration, max: Duration) -> Vec<Vec<u8>> {
        let until = Instant::now() + max;
        let mut got = Vec::new();
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match self.recv(quiet.min(left)).await {
                Some(d) => got.push(d),
                None => break,
            }
        }
        got
    }
}

/// What a TCP peer did with bytes sent by [`send_raw_tcp`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpReply {
    /// Everything it sent back within the wait.
    pub bytes: Vec<u8>,
    /// It closed (or reset) the connection within the wait.
    pub closed: bool,
}

/// Connects to `target`, writes `bytes`, then reads for up to `wait`.
pub async fn send_raw_tcp(target: SocketAddr, bytes: &[u8], wait: Duration) -> TcpReply {
    let mut stream = tokio::net::TcpStream::connect(target)
        .await
        .unwrap_or_else(|e| panic!("connect {target}: {e}"));
    let until = tokio::time::Instant::now() + wait;
    let mut reply = TcpReply {
        bytes: Vec::new(),
        closed: false,
    };
    if stream.write_all(bytes).await.is_err() {
        reply.closed = true;
        return reply;
    }
    let mut buf = vec![0u8; 65536];
    loop {
        match tokio::time::timeout_at(until, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                reply.closed = true;
                return reply;
            }
            Ok(Ok(n)) => reply.bytes.extend_from_slice(&buf[..n]),
            Err(_) => return reply,
        }
    }
}

/// A torture message from `tests/sip/torture/` (e.g. `"rfc4475/wsinv"`,
/// `"extra/cl_larger"`), as bytes.
pub fn torture(name: &str) -> Vec<u8> {
    let path = scenario_dir().join("torture").join(format!("{name}.dat"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
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

/// A port the kernel just called free (another process may take it before
/// sipp binds it; the window is a few milliseconds).
fn free_port(transport: Transport) -> u16 {
    let addr = (LOOPBACK, 0);
    match transport {
        Transport::Udp => UdpSocket::bind(addr).and_then(|s| s.local_addr()),
        Transport::Tcp => TcpListener::bind(addr).and_then(|s| s.local_addr()),
    }
    .expect("find a free port")
    .port()
}

/// An even UDP port `p` with `p + 2` free as well (sipp binds both).
fn free_media_pair() -> u16 {
    for _ in 0..100 {
        let Ok(first) = UdpSocket::bind((LOOPBACK, 0)) else {
            continue;
        };
        let p = first.local_addr().expect("local address").port();
        if p % 2 != 0 || p > 65531 {
            continue;
        }
        if UdpSocket::bind((LOOPBACK, p + 2)).is_ok() {
            return p;
        }
    }
    panic!("no free even UDP port pair on 127.0.0.1");
}

#[cfg(test)]
mod tests {
    //! The harness against sipp itself: each UAC scenario runs against its
    //! stand-in peer under `tests/sip/peers/`, which proves the files are
    //! valid, the flows complete, and the harness counts what happened.

    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn opts() -> SippOpts {
        SippOpts {
            timeout: secs(20),
            ..SippOpts::default()
        }
    }

    fn captured() -> SippOpts {
        SippOpts {
            capture_rtp: true,
            ..opts()
        }
    }

    /// Runs `uac` against the peer `uas` (same transport); both outcomes.
    async fn pair(uac: &str, u: SippOpts, uas: &str, p: SippOpts) -> (SippOutcome, SippOutcome) {
        let peer = Sipp::uas(
            uas,
            SippOpts {
                transport: u.transport,
                ..p
            },
        )
        .await;
        let caller = Sipp::uac(uac, peer.sip_addr(), u).await.wait().await;
        (caller, peer.wait().await)
    }

    /// [`pair`], both sides required to succeed.
    async fn ok_pair(uac: &str, u: SippOpts, uas: &str, p: SippOpts) -> (SippOutcome, SippOutcome) {
        let (out, peer) = pair(uac, u, uas, p).await;
        out.assert_ok();
        peer.assert_ok();
        (out, peer)
    }

    fn logged(out: &SippOutcome, needle: &str) -> bool {
        out.logs.iter().any(|l| l.contains(needle))
    }

    fn rtp(out: &SippOutcome) -> &RtpStats {
        out.rtp.as_ref().expect("captured")
    }

    #[tokio::test]
    async fn sipp_loads_every_scenario() {
        let mut names = Vec::new();
        for sub in ["", "peers/"] {
            for entry in std::fs::read_dir(scenario_dir().join(sub)).expect("list tests/sip") {
                let name = entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned();
                if name.ends_with(".xml") {
                    names.push(format!("{sub}{name}"));
                }
            }
        }
        assert!(names.len() >= 20, "scenarios: {names:?}");
        let checks = futures_util::future::join_all(names.iter().map(|n| Sipp::check(n))).await;
        let failures: Vec<String> = checks.into_iter().filter_map(Result::err).collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[tokio::test]
    async fn sipp_check_reports_a_broken_scenario() {
        // A variable that is set but never used: sipp refuses the file.
        let dir = TempDir::new("broken");
        let file = dir.path().join("broken.xml");
        let xml = r#"<?xml version="1.0" encoding="ISO-8859-1" ?>
<scenario name="broken">
  <send><![CDATA[
      OPTIONS sip:x@[remote_ip] SIP/2.0
      Content-Length: 0
  ]]></send>
  <recv response="200">
    <action><ereg regexp=".*" search_in="msg" assign_to="unused" /></action>
  </recv>
</scenario>
"#;
        std::fs::write(&file, xml).expect("write");
        // An absolute path replaces tests/sip/ in the join.
        let err = Sipp::check(&file.to_string_lossy())
            .await
            .expect_err("refused");
        assert!(err.contains("referenced 1 times"), "{err}");
    }

    #[tokio::test]
    async fn sipp_call_pcmu_gets_its_rtp_back_from_an_echoing_peer() {
        let uac = captured().var("hold_ms", "300").var("turns", "1");
        let echo = opts().args(["-rtp_echo"]);
        let (out, _) = ok_pair("call_pcmu.xml", uac, "peers/uas_answer.xml", echo).await;
        assert_eq!((out.successful_calls, out.failed_calls), (1, 0), "{out}");
        assert!(logged(&out, "answered: m=audio"), "{:?}", out.logs);
        // 6.3 s of 20 ms packets out, all echoed back.
        let rtp = rtp(&out);
        assert!(rtp.sent_by_payload_type().get(&0) > Some(&250), "{rtp}");
        assert!(rtp.received_by_payload_type().get(&0) > Some(&250), "{rtp}");
        assert!(rtp.received().all(|p| p.payload.len() == 160), "{rtp}");
        assert_eq!(rtp.received_by_ssrc().len(), 1, "{rtp}");
    }

    #[tokio::test]
    async fn sipp_call_pcma_over_tcp_sends_payload_8() {
        let uac = SippOpts {
            transport: Transport::Tcp,
            ..captured()
        }
        .var("hold_ms", "0")
        .var("turns", "1");
        let echo = opts().args(["-rtp_echo"]);
        let (out, _) = ok_pair("call_pcma.xml", uac, "peers/uas_answer.xml", echo).await;
        assert!(out.messages.contains("Via: SIP/2.0/TCP"), "not over TCP");
        let rtp = rtp(&out);
        assert_eq!(
            rtp.sent_by_payload_type().keys().collect::<Vec<_>>(),
            [&8],
            "{rtp}"
        );
        assert!(rtp.received().count() > 250, "{rtp}");
    }

    #[tokio::test]
    async fn sipp_no_rtp_back_is_visible() {
        // uas_options.xml answers the INVITE but neither sends nor echoes.
        let uac = captured().var("hold_ms", "0").var("turns", "1");
        let (out, _) = ok_pair("call_pcmu.xml", uac, "uas_options.xml", opts()).await;
        assert_eq!(rtp(&out).received().count(), 0, "{out}");
        assert!(rtp(&out).sent().count() > 250, "{out}");
    }

    #[tokio::test]
    async fn sipp_cancel_gets_487() {
        let (out, _) = ok_pair("cancel.xml", opts(), "peers/uas_cancel.xml", opts()).await;
        assert_eq!(out.counter("cancel_lost_race"), 0);
        assert!(out.messages.contains("SIP/2.0 487"), "{}", out.messages);
    }

    #[tokio::test]
    async fn sipp_bye_from_server_is_answered() {
        let peer = opts().args(["-d", "1000", "-rtp_echo"]);
        let (out, _) = ok_pair("bye_from_server.xml", opts(), "peers/uas_hangup.xml", peer).await;
        assert_eq!(out.successful_calls, 1);
    }

    #[tokio::test]
    async fn sipp_rtp_stop_sends_nothing_after_two_seconds() {
        let peer = opts().args(["-d", "3500"]);
        let (out, _) = ok_pair("rtp_stop.xml", captured(), "peers/uas_hangup.xml", peer).await;
        let sent: Vec<Duration> = rtp(&out).sent().map(|p| p.at).collect();
        let talk = sent[sent.len() - 1] - sent[0];
        assert!(
            talk > Duration::from_millis(1800) && talk < Duration::from_millis(2300),
            "{talk:?}"
        );
        assert!(
            logged(&out, "rtp stopped at") && logged(&out, "BYE at"),
            "{:?}",
            out.logs
        );
    }

    #[tokio::test]
    async fn sipp_reinvite_hold_and_resume() {
        let uac = opts().var("hold_ms", "300");
        let (out, peer) = ok_pair("reinvite_hold.xml", uac, "peers/uas_reinvite.xml", opts()).await;
        assert!(
            logged(&out, "a=recvonly") && logged(&out, "resume at"),
            "{:?}",
            out.logs
        );
        assert!(logged(&peer, "a=sendonly"), "{:?}", peer.logs);
    }

    #[tokio::test]
    async fn sipp_reinvite_488_keeps_the_call() {
        let echo = opts().args(["-rtp_echo"]);
        let (out, _) = ok_pair(
            "reinvite_488.xml",
            captured(),
            "peers/uas_reinvite.xml",
            echo,
        )
        .await;
        // The ACK for the 488 reuses the re-INVITE's branch.
        let branch = out
            .logs
            .iter()
            .find_map(|l| l.split("(branch=").nth(1))
            .expect("488 logged");
        let branch = format!("branch={}", branch.trim_end_matches(')'));
        assert_eq!(
            out.messages.matches(&branch).count(),
            3,
            "re-INVITE, 488, ACK"
        );
        let late = rtp(&out).received().filter(|p| p.at > secs(4)).count();
        assert!(late > 100, "RTP stopped after the 488: {out}");
    }

    #[tokio::test]
    async fn sipp_dtmf_info_is_answered() {
        let uac = opts().var("hold_ms", "200");
        let aa = opts().args(["-aa"]);
        let (out, _) = ok_pair("dtmf_info.xml", uac, "peers/uas_answer.xml", aa).await;
        assert!(
            out.messages.contains("Signal=5\r\nDuration=160\r\n"),
            "{}",
            out.messages
        );
        assert!(
            out.messages
                .contains("Content-Type: application/dtmf-relay")
        );
    }

    #[tokio::test]
    async fn sipp_dtmf_rfc4733_sends_four_events() {
        let uac = captured().var("hold_ms", "200");
        let (out, _) = ok_pair("dtmf_rfc4733.xml", uac, "peers/uas_answer.xml", opts()).await;
        let events: Vec<&RtpPacket> = rtp(&out).sent().filter(|p| p.payload_type == 101).collect();
        assert_eq!(events.len(), 44, "4 digits x (8 + 3 end packets): {out}");
        let digits: Vec<u8> = events
            .iter()
            .filter(|p| p.marker)
            .map(|p| p.payload[0])
            .collect();
        assert_eq!(digits, [1, 2, 3, 11]);
        assert!(events.iter().all(|p| p.ssrc == 0x4d54_4631));
    }

    #[tokio::test]
    async fn sipp_options_200_and_503() {
        let (ok, _) = ok_pair("options_200.xml", opts(), "uas_options.xml", opts()).await;
        assert!(logged(&ok, "Allow:  INVITE"), "{:?}", ok.logs);
        ok_pair(
            "options_503.xml",
            opts(),
            "peers/uas_options_503.xml",
            opts(),
        )
        .await;
    }

    #[tokio::test]
    async fn sipp_an_unexpected_code_fails_the_call() {
        let (out, _) = pair(
            "options_200.xml",
            opts(),
            "peers/uas_options_503.xml",
            opts(),
        )
        .await;
        assert_eq!(out.exit_code, Some(1), "{out}");
        assert_eq!((out.successful_calls, out.failed_calls), (0, 1), "{out}");
        assert_eq!(
            out.stats
                .get("FailedUnexpectedMessage(C)")
                .map(String::as_str),
            Some("1")
        );
    }

    #[tokio::test]
    async fn sipp_refer_is_accepted_and_notified() {
        let peer = opts().args(["-d", "1000"]);
        let (out, peer) = ok_pair("refer_uas.xml", opts(), "peers/uas_refer.xml", peer).await;
        assert!(
            logged(&out, "REFER to  <sip:agent@127.0.0.1:5099>"),
            "{:?}",
            out.logs
        );
        assert!(logged(&peer, "NOTIFY SIP/2.0 200"), "{:?}", peer.logs);
    }

    #[tokio::test]
    async fn sipp_load_counts_answered_referred_and_rejected_by_code() {
        let uac = SippOpts {
            calls: 7,
            rate: Some(7),
            limit: Some(7),
            ..opts()
        }
        .var("hold_ms", "200");
        let peer = SippOpts { calls: 7, ..opts() }.args(["-d", "1000"]);
        let (out, _) = ok_pair("load_uac.xml", uac, "peers/uas_mixed.xml", peer).await;
        assert_eq!(out.successful_calls, 7, "{out}");
        let counters = ["answered", "referred", "callgate_bye"].map(|c| out.counter(c));
        assert_eq!(counters, [4, 1, 1]);
        assert_eq!(out.rejected_by_code(), BTreeMap::from([(486, 1), (503, 2)]));
        // The same from the per-step counts.
        let steps = out
            .message_counts
            .iter()
            .filter(|(k, _)| k.ends_with("_503_Recv"));
        assert_eq!(
            steps.map(|(_, v)| v).sum::<u64>(),
            2,
            "{:?}",
            out.message_counts
        );
    }

    #[tokio::test]
    async fn sipp_timeout_ends_the_run() {
        // A UAS that never gets a call: its own 1 s -timeout ends it (255).
        let started = Instant::now();
        let uas = SippOpts {
            timeout: secs(1),
            ..opts()
        };
        let out = Sipp::uas("uas_options.xml", uas).await.wait().await;
        assert!(
            started.elapsed() < secs(1) + KILL_GRACE,
            "{:?}",
            started.elapsed()
        );
        assert_eq!(out.exit_code, Some(255), "{out}");
    }

    #[tokio::test]
    async fn sipp_stop_and_drop_end_the_process() {
        let long = || SippOpts {
            calls: 100,
            timeout: secs(60),
            ..opts()
        };
        let run = Sipp::uas("uas_options.xml", long()).await;
        let addr = run.sip_addr();
        assert!(!run.stop().await.timed_out);
        assert!(UdpSocket::bind(addr).is_ok(), "port still held after stop");

        let run = Sipp::uas("uas_options.xml", long()).await;
        let (addr, pid) = (run.sip_addr(), run.child.id().expect("running"));
        drop(run);
        let status = format!("/proc/{pid}/status");
        let alive = || {
            let s = read_lossy(Path::new(&status));
            !s.is_empty() && !s.contains("State:\tZ")
        };
        let until = Instant::now() + secs(5);
        while alive() || UdpSocket::bind(addr).is_err() {
            assert!(Instant::now() < until, "sipp {pid} survived its SippRun");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn raw_udp_gets_a_reply_or_none() {
        let run = Sipp::uas("uas_options.xml", opts()).await;
        let (sock, to) = (RawSip::bind(0).await, run.sip_addr());
        let me = sock.local_addr();
        let options = format!(
            "OPTIONS sip:bot@{to} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK-raw-1\r\n\
             Max-Forwards: 70\r\nFrom: <sip:t@{me}>;tag=1\r\nTo: <sip:bot@{to}>\r\n\
             Call-ID: raw-1@127.0.0.1\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
        );
        sock.send(to, options.as_bytes()).await;
        let reply = sock.recv(secs(3)).await.expect("a reply");
        assert!(
            reply.starts_with(b"SIP/2.0 200 OK\r\n"),
            "{}",
            String::from_utf8_lossy(&reply)
        );
        run.wait().await.assert_ok();

        let closed = SocketAddr::from((LOOPBACK, free_port(Transport::Udp)));
        let wsinv = torture("rfc4475/wsinv");
        assert_eq!(
            send_raw_udp(closed, &wsinv, Duration::from_millis(300)).await,
            None
        );
    }

    #[tokio::test]
    async fn raw_tcp_reports_the_close() {
        let listener = tokio::net::TcpListener::bind((LOOPBACK, 0))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut buf = [0u8; 16];
            let n = s.read(&mut buf).await.expect("read");
            s.write_all(&buf[..n]).await.expect("write");
        });
        let reply = send_raw_tcp(addr, b"hello", secs(3)).await;
        server.await.expect("server");
        assert_eq!(
            reply,
            TcpReply {
                bytes: b"hello".to_vec(),
                closed: true
            }
        );
    }

    #[test]
    fn torture_corpus_is_complete() {
        let n = std::fs::read_dir(scenario_dir().join("torture/rfc4475"))
            .expect("dir")
            .count();
        assert_eq!(n, 49);
        let wsinv = torture("rfc4475/wsinv");
        assert_eq!(wsinv.len(), 1001);
        assert!(wsinv.ends_with(b"a=rtpmap:31 LPC\r\n"));
        assert_eq!(torture("extra/empty").len(), 0);
        assert!(torture("extra/oversized_header").len() > 70 * 1024);
        assert!(torture("extra/oversized_udp").len() <= 65507);
    }

    #[test]
    fn pcap_parser_reads_rtp_from_an_ethernet_frame() {
        let rtp = [
            0x80,
            0x80 | 101,
            0,
            7,
            0,
            0,
            0,
            9,
            0xca,
            0x11,
            0,
            0,
            5,
            0x8a,
            0,
            160,
        ];
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1,
        ];
        for field in [40000u16, 40002, 8 + rtp.len() as u16, 0] {
            ip.extend(field.to_be_bytes());
        }
        let frame = [&[0u8; 14][..], &ip, &rtp].concat();
        // Global header (LE, v2.4, snaplen, Ethernet), one record at t = 1 s.
        let mut file = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let len = frame.len() as u32;
        for word in [65535, 1, 1, 0, len, len] {
            file.extend(u32::to_le_bytes(word));
        }
        file.extend(&frame);
        let packets = parse_pcap(&file, UNIX_EPOCH);
        assert_eq!(packets.len(), 1);
        let p = &packets[0];
        assert_eq!(
            (p.payload_type, p.marker, p.seq, p.timestamp),
            (101, true, 7, 9)
        );
        assert_eq!(
            (p.ssrc, p.payload.as_slice()),
            (0xca11_0000, &[5, 0x8a, 0, 160][..])
        );
        assert_eq!((p.src.port(), p.dst.port(), p.at), (40000, 40002, secs(1)));
    }

    #[test]
    fn csv_last_row_by_header() {
        let row = last_csv_row("a;b;c(C);\n1;2;3;\n4;5;6;\n");
        assert_eq!(row.get("c(C)").map(String::as_str), Some("6"));
        assert_eq!(row.len(), 3);
    }
}
