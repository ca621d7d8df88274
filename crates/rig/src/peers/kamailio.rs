//! Kamailio in front of SIP user agent servers, for tests.
//!
//! [`Kamailio::start`] runs the production configuration
//! (`deploy/kamailio/kamailio.cfg`) unchanged, in the foreground, from a
//! scratch directory that holds its dispatcher list, pid file, ctl socket
//! and log; only defines (`-A`) differ from a deployment. [`SippUas`] stands
//! in for a callgate instance (answering or refusing with 503) and
//! [`place_calls`] for a carrier placing calls through the proxy (sipp, with
//! the scenarios in `tests/kamailio/`).
//!
//! What it never does:
//! * touch system paths: no `/etc`, `/run` or `/var` (sipp's remote-control
//!   UDP port, which it binds on every interface, is the one thing bound
//!   beyond the addresses given);
//! * leave a process behind: each one leads its own process group, and the
//!   whole group is stopped (TERM, then KILL) when its handle drops;
//! * wait without a bound: start-up, RPCs, sipp runs and state changes all
//!   have limits, and failing ones report the tail of the process's log.
//!
//! Everything here blocks the calling thread (start-up up to 10 s,
//! [`place_calls`] up to its plan's limit). From async code, run it inside
//! `tokio::task::spawn_blocking`, or callgate instances served by the same
//! current-thread runtime stall while sipp waits for them.
//!
//! ```no_run
//! use std::time::Duration;
//! use callgate_rig::peers::kamailio::{CallPlan, DsState, KamOpts, Kamailio, SippUas, UasScenario, free_udp_addrs};
//!
//! # fn main() -> Result<(), callgate_rig::peers::kamailio::HarnessError> {
//! let [proxy, a, b] = free_udp_addrs::<3>()?;
//! let _a = SippUas::start(a, UasScenario::Answer)?;
//! let b_uas = SippUas::start(b, UasScenario::Answer)?;
//! let kam = Kamailio::start(proxy, &[a, b], &KamOpts::default())?;
//! let _b_uas = b_uas.restart(UasScenario::Refuse)?; // b starts draining
//! kam.wait_for_state(b, DsState::Inactive, Duration::from_secs(5))?;
//! let report = callgate_rig::peers::kamailio::place_calls(proxy, &CallPlan::default())?;
//! assert_eq!(report.failed, 0);
//! # Ok(())
//! # }
//! ```

use std::collections::HashSet;
use std::fs::{self, File};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub use crate::process::HarnessError;
use crate::process::{Group, Result, STOP_GRACE, Scratch, claim_port, io_err, run_bounded};

/// The production configuration, run as it is.
const CONFIG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/kamailio/kamailio.cfg"
);
/// The sipp scenarios of these tests.
const SCENARIOS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/kamailio");
/// Longest wait for Kamailio to answer OPTIONS after it is started.
const KAMAILIO_START_LIMIT: Duration = Duration::from_secs(10);
/// Longest wait for a sipp user agent server to bind its port.
const SIPP_START_LIMIT: Duration = Duration::from_secs(5);
/// Longest a `kamcmd` call may take.
const RPC_LIMIT: Duration = Duration::from_secs(3);
/// How long one keepalive OPTIONS waits for its reply.
const KEEPALIVE_WAIT: Duration = Duration::from_millis(250);
/// How often process states and destination states are polled.
const POLL: Duration = Duration::from_millis(50);
/// Kamailio's shared and private memory, in MB: ample for a test proxy and
/// small enough for several to run side by side.
const SHM_MB: &str = "32";
const PKG_MB: &str = "4";

// ---------------------------------------------------------------------------
// Kamailio

/// How Kamailio picks an instance for a new call (`DS_ALG` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Algorithm {
    /// 10: the instance with the fewest calls in progress (the default).
    #[default]
    CallLoad,
    /// 4: the next instance in turn (`-A WITH_ROUND_ROBIN`).
    RoundRobin,
}

/// The knobs a test turns; each is a define of `kamailio.cfg`.
#[derive(Debug, Clone)]
pub struct KamOpts {
    /// Seconds between OPTIONS probes of every destination
    /// (`DS_PING_INTERVAL`, at least 1).
    pub ping_interval_s: u32,
    /// Failed probes before an active destination goes inactive
    /// (`DS_PROBING_THRESHOLD`).
    pub probing_threshold: u32,
    /// Good probes before an inactive destination is used again
    /// (`DS_INACTIVE_THRESHOLD`).
    pub inactive_threshold: u32,
    /// Milliseconds without any reply before a branch times out and the
    /// call fails over (`FR_TIMER`).
    pub fr_timer_ms: u32,
    /// SIP worker processes (`CHILDREN`).
    pub children: u32,
    /// How new calls pick an instance.
    pub algorithm: Algorithm,
}

impl Default for KamOpts {
    fn default() -> Self {
        KamOpts {
            ping_interval_s: 1,
            probing_threshold: 1,
            inactive_threshold: 1,
            fr_timer_ms: 1_000,
            children: 2,
            algorithm: Algorithm::CallLoad,
        }
    }
}

/// A destination's state as the dispatcher reports it (first letter of
/// `FLAGS` in `dispatcher.list`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DsState {
    /// Gets new calls.
    Active,
    /// Failed (a probe or a call); still gets calls until the probing
    /// threshold is reached.
    Trying,
    /// Gets no new calls until a probe succeeds.
    Inactive,
    /// Switched off by an operator; not probed.
    Disabled,
}

impl DsState {
    /// The letter `dispatcher.set_state` and `FLAGS` use.
    fn letter(self) -> char {
        match self {
            Self::Active => 'a',
            Self::Trying => 't',
            Self::Inactive => 'i',
            Self::Disabled => 'd',
        }
    }

    fn from_flags(flags: &str) -> Option<DsState> {
        match flags.chars().next()?.to_ascii_lowercase() {
            'a' => Some(Self::Active),
            't' => Some(Self::Trying),
            'i' => Some(Self::Inactive),
            'd' => Some(Self::Disabled),
            _ => None,
        }
    }
}

/// One entry of dispatcher set 1, as `kamcmd dispatcher.list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub uri: String,
    pub state: DsState,
    /// Whether OPTIONS probes are being sent to it (the `P` of `FLAGS`).
    pub probing: bool,
    /// Calls in progress through the proxy (call-load algorithm only).
    pub load: u32,
}

impl Destination {
    /// Whether this entry is `sip:<addr>`.
    pub fn is(&self, addr: SocketAddr) -> bool {
        self.uri == sip_uri(addr)
    }
}

/// A running Kamailio. Dropping it stops the whole process tree and removes
/// the scratch directory (kept, with its path printed, if the thread is
/// panicking).
pub struct Kamailio {
    // Dropped first: the processes stop before their directory goes.
    process: Group,
    listen: SocketAddr,
    ctl: String,
    scratch: Scratch,
}

impl Kamailio {
    /// Writes the dispatcher list (set 1 = `destinations`, in this order: on
    /// equal load the earlier one is chosen) and starts Kamailio listening
    /// on UDP `listen`, then waits until it answers an OPTIONS.
    ///
    /// # Errors
    /// The scratch directory cannot be written, Kamailio cannot be started,
    /// exits (a bad config, a port in use) or does not answer within 10 s;
    /// the error carries the tail of its log.
    pub fn start(
        listen: SocketAddr,
        destinations: &[SocketAddr],
        opts: &KamOpts,
    ) -> Result<Kamailio> {
        let scratch = Scratch::new("kamailio")?;
        let list = scratch.path.join("dispatcher.list");
        fs::write(&list, dispatcher_list(destinations))
            .map_err(io_err(format!("writing {}", list.display())))?;
        let ctl = format!("unix:{}", scratch.path.join("kamailio_ctl").display());
        let mut cmd = Command::new(system_binary("kamailio"));
        cmd.args(kamailio_args(&scratch.path, listen, &list, &ctl, opts));
        let process = Group::spawn("kamailio", &mut cmd, &scratch.path.join("kamailio.log"))?;
        let mut kam = Kamailio {
            process,
            listen,
            ctl,
            scratch,
        };
        kam.wait_ready()?;
        Ok(kam)
    }

    fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + KAMAILIO_START_LIMIT;
        loop {
            self.process.ensure_running()?;
            let last = match self.keepalive() {
                Ok(_) => return Ok(()),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout {
                    what: format!("answer from kamailio at {}", self.listen),
                    limit: KAMAILIO_START_LIMIT,
                    detail: format!("last: {last}; its log ends:\n{}", self.process.log_tail()),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// The proxy's SIP address (where carriers send INVITEs).
    pub fn listen(&self) -> SocketAddr {
        self.listen
    }

    /// Kamailio's log so far (stderr: dispatch and failover decisions,
    /// state changes).
    pub fn log(&self) -> String {
        fs::read_to_string(self.process.log_path()).unwrap_or_default()
    }

    /// The instances calls were dispatched to, in order, failovers included
    /// (one `callgate-dispatch` log line each).
    pub fn dispatched(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter_map(|l| l.split("callgate-dispatch ").nth(1))
            .filter_map(|rest| rest.split_whitespace().next())
            .map(str::to_string)
            .collect()
    }

    /// Sends one OPTIONS to the proxy itself and returns the reply's status:
    /// 200 while some instance is active, 503 when none is.
    ///
    /// # Errors
    /// No reply within 250 ms, or an unreadable one.
    pub fn keepalive(&self) -> Result<u16> {
        options_status(self.listen, KEEPALIVE_WAIT)
    }

    /// Every destination of set 1 with its state, probing flag and load.
    ///
    /// # Errors
    /// `kamcmd` failed, took over 3 s or printed something unreadable.
    pub fn destinations(&self) -> Result<Vec<Destination>> {
        let out = self.rpc(&["dispatcher.list"])?;
        parse_dispatcher_list(&out).ok_or_else(|| HarnessError::Output {
            command: "kamcmd dispatcher.list".into(),
            output: out,
        })
    }

    /// The destination `sip:<addr>`.
    ///
    /// # Errors
    /// As [`Kamailio::destinations`], or no such destination.
    pub fn destination(&self, addr: SocketAddr) -> Result<Destination> {
        let all = self.destinations()?;
        all.iter()
            .find(|d| d.is(addr))
            .cloned()
            .ok_or_else(|| HarnessError::Output {
                command: format!("kamcmd dispatcher.list (looking for {})", sip_uri(addr)),
                output: format!("{all:#?}"),
            })
    }

    /// Polls until `addr` is in `want` and returns how long that took.
    ///
    /// # Errors
    /// Not in that state within `limit` (the error shows the last state
    /// seen and the log tail), or `kamcmd` failed.
    pub fn wait_for_state(
        &self,
        addr: SocketAddr,
        want: DsState,
        limit: Duration,
    ) -> Result<Duration> {
        let started = Instant::now();
        loop {
            let seen = self.destination(addr)?;
            if seen.state == want {
                return Ok(started.elapsed());
            }
            if started.elapsed() >= limit {
                return Err(HarnessError::Timeout {
                    what: format!("{want:?} state for {}", sip_uri(addr)),
                    limit,
                    detail: format!("last seen {seen:?}; log ends:\n{}", self.process.log_tail()),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// Sets a destination's state as an operator would
    /// (`dispatcher.set_state`); with `probing` the probes keep deciding.
    ///
    /// # Errors
    /// `kamcmd` failed or Kamailio refused.
    pub fn set_state(&self, addr: SocketAddr, state: DsState, probing: Probing) -> Result<()> {
        let mut flag = state.letter().to_string();
        if probing == Probing::On {
            flag.push('p');
        }
        self.rpc(&["dispatcher.set_state", &flag, "1", &sip_uri(addr)])
            .map(drop)
    }

    /// Runs `kamcmd -s <ctl socket> args…` with a 3 s bound.
    fn rpc(&self, args: &[&str]) -> Result<String> {
        let out_path = self
            .scratch
            .path
            .join(format!("kamcmd-{}.out", uuid::Uuid::new_v4().simple()));
        let out = File::create(&out_path).map_err(io_err("creating kamcmd's output file"))?;
        let err = out.try_clone().map_err(io_err("cloning a file handle"))?;
        let mut cmd = Command::new(system_binary("kamcmd"));
        cmd.arg("-s")
            .arg(&self.ctl)
            .args(args)
            .stdout(out)
            .stderr(err);
        let command = format!("kamcmd {}", args.join(" "));
        let status = run_bounded(&mut cmd, &command, RPC_LIMIT)?;
        let text = fs::read_to_string(&out_path).unwrap_or_default();
        let _ = fs::remove_file(&out_path);
        if !status.success() || text.contains("error:") {
            return Err(HarnessError::Output {
                command: format!("{command} ({status})"),
                output: text,
            });
        }
        Ok(text)
    }
}

/// Whether probes keep deciding a destination's state after an operator set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probing {
    On,
    Off,
}

/// The dispatcher list: set 1, one line per destination, priorities
/// descending so the in-memory order is the given order (Kamailio sorts by
/// priority, highest first, and reverses lines of equal priority).
fn dispatcher_list(destinations: &[SocketAddr]) -> String {
    let n = destinations.len();
    destinations
        .iter()
        .enumerate()
        .map(|(i, addr)| format!("1 {} 0 {} duid=callgate-{i}\n", sip_uri(*addr), n - i))
        .collect()
}

fn kamailio_args(
    dir: &Path,
    listen: SocketAddr,
    list: &Path,
    ctl: &str,
    opts: &KamOpts,
) -> Vec<String> {
    let dir_s = dir.display().to_string();
    // -DD: stay in the foreground as the parent of the workers (-D alone
    // would run a single in-process worker and ignore CHILDREN).
    let mut args: Vec<String> = ["-DD", "-E", "-f", CONFIG, "-m", SHM_MB, "-M", PKG_MB]
        .map(String::from)
        .into();
    args.extend(["-w".into(), dir_s.clone(), "-Y".into(), dir_s]);
    args.extend(["-P".into(), dir.join("kamailio.pid").display().to_string()]);
    let defines = [
        format!("LISTEN=udp:{listen}"),
        format!("DS_LIST=\"{}\"", list.display()),
        format!("CTL_SOCKET=\"{ctl}\""),
        format!("CHILDREN={}", opts.children),
        format!("DS_PING_INTERVAL={}", opts.ping_interval_s.max(1)),
        format!("DS_PROBING_THRESHOLD={}", opts.probing_threshold),
        format!("DS_INACTIVE_THRESHOLD={}", opts.inactive_threshold),
        format!("FR_TIMER={}", opts.fr_timer_ms),
    ];
    for d in defines {
        args.extend(["-A".into(), d]);
    }
    if opts.algorithm == Algorithm::RoundRobin {
        args.extend(["-A".into(), "WITH_ROUND_ROBIN".into()]);
    }
    args
}

/// Reads `kamcmd dispatcher.list`: a `URI:` line opens each destination,
/// `FLAGS:` (e.g. `AP`, `IP`, `AX`) and `DLGLOAD:` follow it.
fn parse_dispatcher_list(text: &str) -> Option<Vec<Destination>> {
    let mut out: Vec<Destination> = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(uri) = line.strip_prefix("URI: ") {
            out.push(Destination {
                uri: uri.to_string(),
                state: DsState::Active,
                probing: false,
                load: 0,
            });
        } else if let Some(flags) = line.strip_prefix("FLAGS: ") {
            let last = out.last_mut()?;
            last.state = DsState::from_flags(flags)?;
            last.probing = flags.get(1..2) == Some("P");
        } else if let Some(load) = line.strip_prefix("DLGLOAD: ") {
            out.last_mut()?.load = load.parse().ok()?;
        }
    }
    Some(out)
}

/// Sends an OPTIONS to `to` from a fresh loopback socket and returns the
/// status of the reply.
fn options_status(to: SocketAddr, wait: Duration) -> Result<u16> {
    let local: SocketAddr = (to.ip(), 0).into();
    let sock = UdpSocket::bind(local).map_err(io_err("binding a socket for OPTIONS"))?;
    sock.set_read_timeout(Some(wait))
        .map_err(io_err("setting a read timeout"))?;
    let me = sock
        .local_addr()
        .map_err(io_err("reading a local address"))?;
    let id = uuid::Uuid::new_v4().simple();
    let request = format!(
        "OPTIONS {uri} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK{id};rport\r\n\
         Max-Forwards: 70\r\nFrom: <sip:harness@{me}>;tag={id}\r\nTo: <{uri}>\r\n\
         Call-ID: {id}@harness\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n",
        uri = sip_uri(to)
    );
    sock.send_to(request.as_bytes(), to)
        .map_err(io_err(format!("sending OPTIONS to {to}")))?;
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).map_err(io_err(format!(
        "waiting {wait:?} for an OPTIONS reply from {to}"
    )))?;
    let reply = String::from_utf8_lossy(&buf[..n]);
    reply
        .strip_prefix("SIP/2.0 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| HarnessError::Output {
            command: format!("OPTIONS to {to}"),
            output: reply.into_owned(),
        })
}

// ---------------------------------------------------------------------------
// sipp

/// What a [`SippUas`] does with what it receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UasScenario {
    /// `uas_200.xml`: OPTIONS 200; INVITE 180/200, then ACK, BYE → 200.
    Answer,
    /// `uas_503.xml`: OPTIONS and INVITE 503 with Retry-After (draining or full).
    Refuse,
}

impl UasScenario {
    fn file(self) -> String {
        let name = match self {
            Self::Answer => "uas_200.xml",
            Self::Refuse => "uas_503.xml",
        };
        format!("{SCENARIOS}/{name}")
    }
}

/// A sipp user agent server standing in for one callgate instance, bound to
/// one UDP address; stopped when dropped.
pub struct SippUas {
    // Dropped first: the process stops before its directory goes.
    process: Group,
    addr: SocketAddr,
    messages: PathBuf,
    _scratch: Scratch,
}

impl SippUas {
    /// Starts sipp with `scenario` on `addr` and waits until it holds the port.
    ///
    /// # Errors
    /// sipp cannot be started, exits, or has not bound `addr` within 5 s.
    pub fn start(addr: SocketAddr, scenario: UasScenario) -> Result<SippUas> {
        let scratch = Scratch::new("sipp-uas")?;
        let messages = scratch.path.join("messages.log");
        let mut cmd = Command::new("sipp");
        cmd.arg("-sf").arg(scenario.file());
        cmd.args(sipp_socket_args(addr)?);
        cmd.arg("-trace_msg").arg("-message_file").arg(&messages);
        cmd.arg("-trace_err").arg("-error_file");
        cmd.arg(scratch.path.join("errors.log"));
        let process = Group::spawn("sipp uas", &mut cmd, &scratch.path.join("sipp.log"))?;
        let mut uas = SippUas {
            process,
            addr,
            messages,
            _scratch: scratch,
        };
        uas.wait_bound()?;
        Ok(uas)
    }

    /// Stops this sipp and starts another with `scenario` on the same
    /// address (an instance that starts draining, or comes back). The
    /// counters start again from zero.
    ///
    /// # Errors
    /// As [`SippUas::start`].
    pub fn restart(self, scenario: UasScenario) -> Result<SippUas> {
        let addr = self.addr;
        drop(self);
        SippUas::start(addr, scenario)
    }

    fn wait_bound(&mut self) -> Result<()> {
        let deadline = Instant::now() + SIPP_START_LIMIT;
        loop {
            self.process.ensure_running()?;
            // Our bind fails once sipp holds the port.
            if UdpSocket::bind(self.addr).is_err() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout {
                    what: format!("sipp bound to {}", self.addr),
                    limit: SIPP_START_LIMIT,
                    detail: format!("its log ends:\n{}", self.process.log_tail()),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Distinct calls (Call-IDs) whose INVITE reached this instance.
    pub fn invites(&self) -> usize {
        self.received("INVITE")
    }

    /// Distinct OPTIONS probes that reached this instance.
    pub fn probes(&self) -> usize {
        self.received("OPTIONS")
    }

    /// Distinct Call-IDs of the received requests of `method`, from sipp's
    /// message trace (written as each message is handled).
    fn received(&self, method: &str) -> usize {
        let text = fs::read_to_string(&self.messages).unwrap_or_default();
        received_call_ids(&text, method).len()
    }
}

/// Call-IDs of the `method` requests in a sipp `-trace_msg` log, whose
/// entries are a dashed separator line, `UDP message received [n] bytes :`
/// (or `… sent …`), a blank line and the message.
fn received_call_ids(log: &str, method: &str) -> HashSet<String> {
    let start = format!("{method} ");
    log.split("-----------------------------------------------")
        .filter(|entry| entry.contains("message received"))
        .filter_map(|entry| {
            let mut lines = entry
                .lines()
                .skip_while(|l| !l.contains("message received"));
            let request = lines.by_ref().skip(1).find(|l| !l.trim().is_empty())?;
            if !request.starts_with(&start) {
                return None;
            }
            lines.find_map(|l| {
                let (name, value) = l.split_once(':')?;
                let name = name.trim();
                (name.eq_ignore_ascii_case("call-id") || name == "i")
                    .then(|| value.trim().to_string())
            })
        })
        .collect()
}

/// How many calls [`place_calls`] places, how fast, and for how long.
#[derive(Debug, Clone)]
pub struct CallPlan {
    pub calls: u32,
    /// New calls per second.
    pub rate_per_s: u32,
    /// Time from the caller's ACK to its BYE.
    pub hold: Duration,
    /// Bound on the whole run; calls still up then count as failed.
    pub limit: Duration,
}

impl Default for CallPlan {
    fn default() -> Self {
        CallPlan {
            calls: 10,
            rate_per_s: 20,
            hold: Duration::from_millis(500),
            limit: Duration::from_secs(15),
        }
    }
}

/// How the calls of a [`place_calls`] run ended, from sipp's statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallReport {
    /// Calls answered 200 and hung up with a BYE answered 200.
    pub successful: u64,
    /// Calls refused (e.g. a 503 from the proxy), timed out or broken.
    pub failed: u64,
    /// Mean time from INVITE to its 200 over the successful calls
    /// (millisecond resolution): failovers show up here.
    pub answer_avg: Duration,
}

impl CallReport {
    /// (successful, failed), for assertions.
    pub fn outcome(&self) -> (u64, u64) {
        (self.successful, self.failed)
    }
}

/// Places `plan.calls` calls through the proxy at `proxy` with sipp
/// (`tests/kamailio/uac.xml`, which routes ACK and BYE by the route set)
/// and reports how they ended.
///
/// # Errors
/// sipp cannot be started, crashes, outlives the plan's limit, or leaves no
/// readable statistics; the error carries its log tail.
pub fn place_calls(proxy: SocketAddr, plan: &CallPlan) -> Result<CallReport> {
    let scratch = Scratch::new("sipp-uac")?;
    let [local] = free_udp_addrs_on::<1>(proxy.ip())?;
    let stats = scratch.path.join("stats.csv");
    let mut cmd = Command::new("sipp");
    cmd.arg(proxy.to_string())
        .arg("-sf")
        .arg(format!("{SCENARIOS}/uac.xml"));
    cmd.args(sipp_socket_args(local)?);
    cmd.args([
        "-m",
        &plan.calls.to_string(),
        "-r",
        &plan.rate_per_s.to_string(),
    ]);
    cmd.args(["-d", &plan.hold.as_millis().to_string()]);
    cmd.args(["-timeout", &format!("{}s", plan.limit.as_secs().max(1))]);
    cmd.arg("-trace_stat").arg("-stf").arg(&stats);
    cmd.arg("-trace_err").arg("-error_file");
    cmd.arg(scratch.path.join("errors.log"));
    let mut process = Group::spawn("sipp uac", &mut cmd, &scratch.path.join("sipp.log"))?;
    let status = process.wait_exit(plan.limit + STOP_GRACE)?;
    // 0: every call succeeded; 1: some failed. Anything else is sipp's own
    // failure (a bad scenario, a socket it could not bind).
    if !matches!(status.code(), Some(0 | 1)) {
        return Err(HarnessError::Exited {
            program: "sipp uac",
            status,
            log_tail: process.log_tail(),
        });
    }
    let csv = fs::read_to_string(&stats).unwrap_or_default();
    parse_sipp_stats(&csv).ok_or_else(|| HarnessError::Output {
        command: format!("sipp uac statistics {}", stats.display()),
        output: csv,
    })
}

/// Reads the cumulative counters of the last row of a `-trace_stat` file.
fn parse_sipp_stats(csv: &str) -> Option<CallReport> {
    let mut lines = csv.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next()?.split(';').collect();
    let last: Vec<&str> = lines.next_back()?.split(';').collect();
    let column = |name: &str| -> Option<u64> {
        let i = header.iter().position(|h| *h == name)?;
        last.get(i)?.trim().parse().ok()
    };
    let time = |name: &str| -> Option<Duration> {
        let i = header.iter().position(|h| *h == name)?;
        parse_sipp_time(last.get(i)?)
    };
    Some(CallReport {
        successful: column("SuccessfulCall(C)")?,
        failed: column("FailedCall(C)")?,
        answer_avg: time("ResponseTime1(C)")?,
    })
}

/// sipp's `HH:MM:SS:micros` durations.
fn parse_sipp_time(text: &str) -> Option<Duration> {
    let parts: Vec<u64> = text
        .trim()
        .split(':')
        .map(str::parse)
        .collect::<std::result::Result<_, _>>()
        .ok()?;
    let [h, m, s, us] = parts[..] else {
        return None;
    };
    Some(Duration::from_secs(h * 3_600 + m * 60 + s) + Duration::from_micros(us))
}

/// sipp's socket options for SIP on `addr`, with media on a free pair of
/// ports beside it (sipp binds the media port and the one two above).
fn sipp_socket_args(addr: SocketAddr) -> Result<Vec<String>> {
    let media = free_media_port(addr.ip())?;
    let ip = addr.ip().to_string();
    Ok(vec![
        "-i".into(),
        ip.clone(),
        "-mi".into(),
        ip,
        "-p".into(),
        addr.port().to_string(),
        "-mp".into(),
        media.to_string(),
        "-bind_local".into(),
        "-nostdin".into(),
    ])
}

// ---------------------------------------------------------------------------
// Ports, processes, scratch directories

/// `N` distinct loopback UDP addresses no other test process is handed
/// ([`crate::ports`]), each the base of a claimed block of ports.
///
/// # Errors
/// No port could be claimed.
pub fn free_udp_addrs<const N: usize>() -> Result<[SocketAddr; N]> {
    free_udp_addrs_on(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// As [`free_udp_addrs`] on `ip`: a claimed port that does not bind on
/// `ip` right now (another loopback address) is passed over.
fn free_udp_addrs_on<const N: usize>(ip: IpAddr) -> Result<[SocketAddr; N]> {
    let mut addrs = Vec::with_capacity(N);
    while addrs.len() < N {
        let port = claim_port("Kamailio or sipp")?;
        if UdpSocket::bind((ip, port)).is_ok() {
            addrs.push(SocketAddr::new(ip, port));
        }
    }
    Ok(addrs
        .try_into()
        .unwrap_or_else(|v: Vec<_>| unreachable!("{} addresses for {N}", v.len())))
}

/// A port `p` with `p + 1`..`p + 3` claimed too, for sipp's media sockets
/// (sipp binds the media port and the one two above).
fn free_media_port(ip: IpAddr) -> Result<u16> {
    let [addr] = free_udp_addrs_on::<1>(ip)?;
    Ok(addr.port())
}

fn sip_uri(addr: SocketAddr) -> String {
    format!("sip:{addr}")
}

/// Debian installs kamailio and kamcmd in /usr/sbin, which a non-root PATH
/// often lacks.
fn system_binary(name: &str) -> PathBuf {
    let sbin = Path::new("/usr/sbin").join(name);
    if sbin.exists() { sbin } else { name.into() }
}

#[cfg(test)]
mod tests;
