//! HAProxy in front of two callgate instances, for tests.
//!
//! [`Haproxy::start`] runs the production configuration
//! (`deploy/haproxy/haproxy.cfg`) unchanged, in the foreground (`-db`), from
//! a scratch directory that holds its runtime-API socket and its log; only
//! the environment differs from a deployment, and only in variables
//! `deploy/haproxy/README.md` documents (addresses, agent ports, check
//! intervals, the log target; `VOICE_UNPRIVILEGED`, so it neither chroots
//! nor changes user). The connection limit is left to the shipped default
//! unless [`HaproxyOpts::maxconn`] pins one; [`HaproxyOpts::nofile`] starts
//! HAProxy under a given file-descriptor limit (through `prlimit`).
//! [`Haproxy::servers`] reads HAProxy's own view of each instance over that
//! socket: `show stat` (status, effective weight, maxconn, connections) and
//! `show servers state` (user weight, administrative flags).
//!
//! What it never does:
//! * touch system paths: no `/etc`, `/run` or `/var`;
//! * leave a process behind: HAProxy leads its own process group, stopped
//!   whole (TERM, then KILL) when the handle drops;
//! * wait without a bound: start-up, runtime-API commands and state waits
//!   all have limits, and failing ones report the tail of HAProxy's log.
//!
//! ```no_run
//! # async fn demo(a: std::net::SocketAddr, a_agent: u16, b: std::net::SocketAddr, b_agent: u16)
//! # -> Result<(), callgate_rig::haproxy::HarnessError> {
//! use std::time::Duration;
//! use callgate_rig::haproxy::{Backend, Haproxy, HaproxyOpts};
//! let lb = Haproxy::start(
//!     [Backend { http: a, agent_port: a_agent }, Backend { http: b, agent_port: b_agent }],
//!     &HaproxyOpts::default(),
//! )
//! .await?;
//! let up = lb
//!     .wait_for("both up", Duration::from_secs(5), |s| s.iter().all(|s| s.status == "UP"))
//!     .await?;
//! println!("{up:?}, media streams at {}", lb.ws_url());
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

pub use crate::process::HarnessError;
use crate::process::{Group, Result, Scratch, claim_port, io_err};

/// The production configuration, run as it is.
const CONFIG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/haproxy/haproxy.cfg"
);
/// The backend and server names in that configuration.
pub const BACKEND: &str = "callgate";
pub const SERVERS: [&str; 2] = ["callgate-1", "callgate-2"];
/// Longest wait for the runtime API to answer after HAProxy is started.
const START_LIMIT: Duration = Duration::from_secs(10);
/// Longest one runtime-API command may take.
const COMMAND_LIMIT: Duration = Duration::from_secs(3);
/// How often states are polled.
const POLL: Duration = Duration::from_millis(25);

/// One callgate instance as HAProxy sees it.
#[derive(Debug, Clone, Copy)]
pub struct Backend {
    /// Its HTTP/WebSocket listener.
    pub http: SocketAddr,
    /// Its agent-check port, on the same address.
    pub agent_port: u16,
}

/// The intervals a test turns (environment of `haproxy.cfg`).
#[derive(Debug, Clone)]
pub struct HaproxyOpts {
    /// `agent-inter`: how often each agent is asked.
    pub agent_inter: Duration,
    /// `inter` of the `/readyz` check.
    pub check_inter: Duration,
    /// `VOICE_MAXCONN`; `None`: the shipped default (derived from the
    /// descriptor limit).
    pub maxconn: Option<u32>,
    /// Start HAProxy with this soft and hard `RLIMIT_NOFILE`; `None`: the
    /// test process's own.
    pub nofile: Option<u64>,
}

impl Default for HaproxyOpts {
    fn default() -> Self {
        HaproxyOpts {
            agent_inter: Duration::from_millis(200),
            check_inter: Duration::from_millis(200),
            maxconn: None,
            nofile: None,
        }
    }
}

/// HAProxy's view of one server (`show stat` joined with `show servers state`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerState {
    pub name: String,
    /// `show stat` status: `UP`, `DOWN`, `DRAIN`, `MAINT`, `UP 1/2`, ….
    pub status: String,
    /// Effective weight now, as `show stat` reports it (a drained server
    /// keeps its last weight: DRAIN, not the weight, keeps new sessions off).
    pub weight: u32,
    /// User weight: what the last agent percentage set, of the initial 100.
    pub user_weight: u32,
    /// The server's `maxconn` (`slim`; 0 = unlimited).
    pub maxconn: u32,
    /// Connections to the server now (`scur`).
    pub current: u32,
    /// Connections sent to the server since start (`stot`).
    pub total: u64,
    /// Administrative DRAIN (forced by the agent or the CLI).
    pub admin_drain: bool,
    /// Administrative MAINT.
    pub admin_maint: bool,
    /// The last agent check's result (`agent_status`, e.g. `L7OK`).
    pub agent_status: String,
}

/// A running HAProxy.
pub struct Haproxy {
    process: Group,
    frontend: SocketAddr,
    socket: PathBuf,
    scratch: Scratch,
}

/// `srv_admin_state` flags (HAProxy `include/haproxy/server-t.h`).
const ADMF_MAINT: u32 = 0x01 | 0x02 | 0x04 | 0x20;
const ADMF_DRAIN: u32 = 0x08 | 0x10;

impl Haproxy {
    /// Starts HAProxy on a free loopback port with `servers` as
    /// `callgate-1` and `callgate-2`; returns once its runtime API answers.
    pub async fn start(servers: [Backend; 2], opts: &HaproxyOpts) -> Result<Haproxy> {
        let scratch = Scratch::new("haproxy")?;
        let socket = scratch.path.join("admin.sock");
        let frontend = free_tcp_addr()?;
        let mut cmd = match opts.nofile {
            Some(n) => {
                let mut c = Command::new("prlimit");
                c.arg(format!("--nofile={n}:{n}"))
                    .arg(system_binary("haproxy"));
                c
            }
            None => Command::new(system_binary("haproxy")),
        };
        cmd.arg("-db").arg("-f").arg(CONFIG);
        if let Some(n) = opts.maxconn {
            cmd.env("VOICE_MAXCONN", n.to_string());
        }
        cmd.current_dir(&scratch.path)
            .env("VOICE_UNPRIVILEGED", "1")
            .env("VOICE_LOG", "stdout")
            .env("VOICE_BIND", frontend.to_string())
            .env("VOICE_STATS_SOCKET", &socket)
            .env("VOICE_AGENT_INTER", millis(opts.agent_inter))
            .env("VOICE_CHECK_INTER", millis(opts.check_inter));
        for (i, s) in servers.iter().enumerate() {
            cmd.env(format!("VOICE_{}_ADDR", i + 1), s.http.to_string())
                .env(
                    format!("VOICE_{}_AGENT_PORT", i + 1),
                    s.agent_port.to_string(),
                );
        }
        let process = Group::spawn("haproxy", &mut cmd, &scratch.path.join("haproxy.log"))?;
        let mut lb = Haproxy {
            process,
            frontend,
            socket,
            scratch,
        };
        lb.wait_ready().await?;
        Ok(lb)
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + START_LIMIT;
        loop {
            self.process.ensure_running()?;
            if self.socket.exists() && self.command("show info").await.is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout {
                    what: "answer from HAProxy's runtime API".into(),
                    limit: START_LIMIT,
                    detail: format!("its log ends:\n{}", self.process.log_tail()),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// One field of `show info` (`Maxconn`, `Ulimit-n`, …).
    pub async fn info(&self, field: &str) -> Result<String> {
        let info = self.command("show info").await?;
        let prefix = format!("{field}: ");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map(str::to_owned)
            .ok_or_else(|| HarnessError::Output {
                command: "show info".into(),
                output: info,
            })
    }

    /// Where the frontend listens.
    pub fn frontend(&self) -> SocketAddr {
        self.frontend
    }

    /// The media-stream URL through the balancer.
    pub fn ws_url(&self) -> String {
        format!("ws://{}/v1/media-stream", self.frontend)
    }

    /// HAProxy's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.scratch.path.join("haproxy.log")).unwrap_or_default()
    }

    /// The scratch directory (config socket and log).
    pub fn dir(&self) -> &Path {
        &self.scratch.path
    }

    /// One runtime-API command; returns HAProxy's whole answer.
    pub async fn command(&self, command: &str) -> Result<String> {
        let exchange = async {
            let mut s = UnixStream::connect(&self.socket).await?;
            s.write_all(format!("{command}\n").as_bytes()).await?;
            let mut out = String::new();
            s.read_to_string(&mut out).await?;
            Ok::<_, std::io::Error>(out)
        };
        match tokio::time::timeout(COMMAND_LIMIT, exchange).await {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(e)) => Err(io_err(format!("runtime API `{command}`"))(e)),
            Err(_) => Err(HarnessError::Timeout {
                what: format!("answer to `{command}`"),
                limit: COMMAND_LIMIT,
                detail: format!("HAProxy's log ends:\n{}", self.process.log_tail()),
            }),
        }
    }

    /// Both servers as HAProxy sees them now, in configuration order.
    pub async fn servers(&self) -> Result<Vec<ServerState>> {
        let stat = self.command("show stat").await?;
        let state = self
            .command(&format!("show servers state {BACKEND}"))
            .await?;
        parse_servers(&stat, &state).ok_or_else(|| HarnessError::Output {
            command: "show stat / show servers state".into(),
            output: format!("{stat}\n---\n{state}"),
        })
    }

    /// Polls [`Haproxy::servers`] until `done` accepts them (at most
    /// `limit`); returns them then.
    pub async fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        done: impl Fn(&[ServerState]) -> bool,
    ) -> Result<Vec<ServerState>> {
        let deadline = Instant::now() + limit;
        let mut last = Vec::new();
        loop {
            if let Ok(servers) = self.servers().await {
                if done(&servers) {
                    return Ok(servers);
                }
                last = servers;
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout {
                    what: what.into(),
                    limit,
                    detail: format!("HAProxy last showed {last:#?}"),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Joins `show stat` (CSV) and `show servers state` (space-separated) for
/// the servers of [`BACKEND`]; `None` if either lacks a column used.
fn parse_servers(stat: &str, state: &str) -> Option<Vec<ServerState>> {
    let stat_rows = table(stat, ',', "# pxname")?;
    let state_rows = table(state, ' ', "# be_id")?;
    let mut out = Vec::new();
    for name in SERVERS {
        let st = stat_rows
            .iter()
            .find(|r| is(r, "pxname", BACKEND) && is(r, "svname", name))?;
        let ss = state_rows
            .iter()
            .find(|r| is(r, "be_name", BACKEND) && is(r, "srv_name", name))?;
        let num = |row: &HashMap<String, String>, k: &str| row.get(k)?.parse::<u64>().ok();
        let admin = u32::try_from(num(ss, "srv_admin_state")?).ok()?;
        out.push(ServerState {
            name: name.to_string(),
            status: st.get("status")?.clone(),
            weight: u32::try_from(num(st, "weight")?).ok()?,
            user_weight: u32::try_from(num(ss, "srv_uweight")?).ok()?,
            maxconn: num(st, "slim").map_or(Some(0), |n| u32::try_from(n).ok())?,
            current: u32::try_from(num(st, "scur")?).ok()?,
            total: num(st, "stot")?,
            admin_drain: admin & ADMF_DRAIN != 0,
            admin_maint: admin & ADMF_MAINT != 0,
            agent_status: st.get("agent_status")?.clone(),
        });
    }
    Some(out)
}

fn is(row: &HashMap<String, String>, column: &str, value: &str) -> bool {
    row.get(column).is_some_and(|v| v == value)
}

/// Rows of a table whose header line starts with `header` (`# name,…`),
/// as column → value.
fn table(text: &str, sep: char, header: &str) -> Option<Vec<HashMap<String, String>>> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with(header));
    let names: Vec<String> = lines
        .next()?
        .trim_start_matches('#')
        .trim()
        .split(sep)
        .map(str::to_string)
        .collect();
    let rows = lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            names
                .iter()
                .cloned()
                .zip(l.split(sep).map(str::to_string))
                .collect()
        })
        .collect();
    Some(rows)
}

/// HAProxy's time format: an integer with its unit.
fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis().max(1))
}

/// A loopback TCP address no other test process is handed
/// ([`callgate_rig::ports`]).
fn free_tcp_addr() -> Result<SocketAddr> {
    let port = claim_port("HAProxy")?;
    Ok(SocketAddr::from(([127, 0, 0, 1], port)))
}

/// Debian installs haproxy in /usr/sbin, which a non-root PATH often lacks.
fn system_binary(name: &str) -> PathBuf {
    let sbin = Path::new("/usr/sbin").join(name);
    if sbin.exists() { sbin } else { name.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `show stat`'s header as HAProxy 2.6 prints it (up to agent_status).
    const STAT_HEADER: &str = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,type,rate,rate_lim,rate_max,check_status,check_code,check_duration,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,hrsp_other,hanafail,req_rate,req_rate_max,req_tot,cli_abrt,srv_abrt,comp_in,comp_out,comp_byp,comp_rsp,lastsess,last_chk,last_agt,qtime,ctime,rtime,ttime,agent_status,";

    /// One CSV row with `values` in their columns, the rest empty.
    fn stat_row(values: &[(&str, &str)]) -> String {
        let names: Vec<&str> = STAT_HEADER[2..].split(',').collect();
        let cells: Vec<&str> = names
            .iter()
            .map(|n| values.iter().find(|(k, _)| k == n).map_or("", |(_, v)| *v))
            .collect();
        cells.join(",")
    }

    fn stat() -> String {
        let server = |name, status, weight, slim, scur| {
            stat_row(&[
                ("pxname", "callgate"),
                ("svname", name),
                ("scur", scur),
                ("slim", slim),
                ("stot", "5"),
                ("status", status),
                ("weight", weight),
                ("agent_status", "L7OK"),
            ])
        };
        let frontend = stat_row(&[
            ("pxname", "voice"),
            ("svname", "FRONTEND"),
            ("status", "OPEN"),
        ]);
        [
            STAT_HEADER.to_string(),
            frontend,
            server("callgate-1", "UP", "70", "10", "3"),
            server("callgate-2", "DRAIN (agent)", "0", "", "0"),
            String::new(),
        ]
        .join("\n")
    }

    const STATE: &str = "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change\n\
3 callgate 1 callgate-1 127.0.0.1 2 0 70 100 4\n\
3 callgate 2 callgate-2 127.0.0.1 2 8 100 100 4\n";

    #[test]
    fn stat_and_state_are_joined_per_server() {
        let s = parse_servers(&stat(), STATE).expect("parsed");
        assert_eq!(s.len(), 2);
        assert_eq!(
            (
                s[0].status.as_str(),
                s[0].weight,
                s[0].user_weight,
                s[0].maxconn,
                s[0].current
            ),
            ("UP", 70, 70, 10, 3)
        );
        assert!(!s[0].admin_drain && !s[0].admin_maint);
        assert_eq!(
            (s[1].status.as_str(), s[1].weight, s[1].maxconn),
            ("DRAIN (agent)", 0, 0)
        );
        assert!(s[1].admin_drain && !s[1].admin_maint);
        assert_eq!(s[1].agent_status, "L7OK");
    }

    #[test]
    fn a_missing_server_or_column_is_none() {
        assert!(parse_servers(&stat(), "1\n# be_id be_name\n").is_none());
        assert!(parse_servers("# pxname,svname\n", STATE).is_none());
    }
}
