//! The SIP ingress: one task owning the UDP socket, the TCP listener and
//! the sans-IO [`super::ua::Endpoint`]; one task per call (`call::run`).
//!
//! The server task reads every datagram and every message cut from a TCP
//! stream, feeds the endpoint, sends what it outputs, and routes its
//! events: a new INVITE spawns a call task, in-dialog events go to that
//! call's [`Signal`] channel, out-of-dialog OPTIONS are answered from the
//! admission gate (`200` serving, `503` + `Retry-After` draining or full,
//! so a proxy's probe stops sending calls). Malformed messages are
//! answered `400`/`513` or dropped, and counted; no input crashes it.
//!
//! Channels: a call's signals are bounded ([`SIGNALS`]); a full one drops
//! the signal (counted) — only a peer flooding INFO can fill it. TCP
//! writers are bounded ([`TCP_OUT`]); a connection that does not read is
//! closed.

use super::call;
use super::tcp::{self, FromTcp};
use super::ua::{self, CallKey, Endpoint, Event, Output, Peer, Transport};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::leg::ports::RtpPorts;
use super::leg::{Command, Signal, SipShared};
use crate::app::CallServices;
use crate::metrics as m;

/// Signals queued for one call before more are dropped.
pub const SIGNALS: usize = 32;
/// Messages queued for one TCP connection before it is closed.
pub const TCP_OUT: usize = 256;

/// A running SIP listener.
pub struct SipServer {
    pub addr: SocketAddr,
    pub ports: RtpPorts,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl SipServer {
    /// Binds UDP and TCP on `sip.listen` and starts serving.
    pub async fn start(app: Arc<CallServices>) -> anyhow::Result<SipServer> {
        let cfg = app.cfg().sip.clone();
        let (udp, tcp) = bind_pair(cfg.listen)
            .await
            .with_context(|| format!("binding sip.listen {} (UDP and TCP)", cfg.listen))?;
        let addr = udp.local_addr()?;
        let local_ip = cfg.advertise_ip.unwrap_or(addr.ip());
        let ports = RtpPorts::new(addr.ip(), cfg.rtp_port_min, cfg.rtp_port_max);
        let capacity = app.gate.snapshot().capacity;
        if (ports.total() as u64) < u64::from(capacity) {
            warn!(
                pairs = ports.total(),
                capacity,
                "sip.rtp_port_min..rtp_port_max holds fewer port pairs than admission's capacity: calls past it get 503"
            );
        }
        let mut ep_cfg = ua::Config::new(SocketAddr::new(local_ip, addr.port()));
        ep_cfg.max_message_bytes = cfg.max_message_bytes;
        let seed = std::process::id() as u64 ^ super::leg::media::seed();
        let shared = Arc::new(SipShared {
            cfg,
            ports: ports.clone(),
            local_ip,
        });
        let stop = CancellationToken::new();
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (tcp_tx, tcp_rx) = mpsc::channel(1024);
        let server = Server {
            app,
            shared,
            endpoint: Endpoint::new(ep_cfg, seed),
            udp,
            calls: HashMap::new(),
            conns: HashMap::new(),
            next_conn: 1,
            cmd_tx,
            tcp_tx,
        };
        let task = tokio::spawn(server.run(tcp, cmd_rx, tcp_rx, stop.clone()));
        info!(%addr, "SIP listening (UDP and TCP)");
        Ok(SipServer {
            addr,
            ports,
            stop,
            task,
        })
    }

    /// Stops the listener (calls already running keep their media until
    /// they end; their signalling stops).
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// Tries for an ephemeral UDP port whose TCP twin is also free.
const BIND_ATTEMPTS: usize = 32;

/// Binds UDP and TCP on the same address. With port 0 the kernel picks the
/// UDP port and the TCP twin may already be taken (by any process's
/// outgoing connection), so a taken twin means another pick, bounded.
async fn bind_pair(listen: SocketAddr) -> std::io::Result<(UdpSocket, TcpListener)> {
    let mut last = None;
    for _ in 0..if listen.port() == 0 { BIND_ATTEMPTS } else { 1 } {
        let udp = UdpSocket::bind(listen).await?;
        match TcpListener::bind(udp.local_addr()?).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no port")))
}

struct Server {
    app: Arc<CallServices>,
    shared: Arc<SipShared>,
    endpoint: Endpoint,
    udp: UdpSocket,
    calls: HashMap<CallKey, mpsc::Sender<Signal>>,
    conns: HashMap<u64, mpsc::Sender<Vec<u8>>>,
    next_conn: u64,
    cmd_tx: mpsc::UnboundedSender<(CallKey, Command)>,
    tcp_tx: mpsc::Sender<FromTcp>,
}

impl Server {
    async fn run(
        mut self,
        tcp: TcpListener,
        mut cmds: mpsc::UnboundedReceiver<(CallKey, Command)>,
        mut tcp_rx: mpsc::Receiver<FromTcp>,
        stop: CancellationToken,
    ) {
        let mut buf = vec![0u8; 65_536];
        loop {
            let wake = self.endpoint.next_deadline();
            tokio::select! {
                () = stop.cancelled() => break,
                r = self.udp.recv_from(&mut buf) => match r {
                    Ok((n, from)) => {
                        let peer = Peer { addr: from, transport: Transport::Udp, conn: 0 };
                        count_received(&buf[..n]);
                        self.endpoint.receive(&buf[..n], peer, Instant::now());
                    }
                    Err(e) => debug!(error = %e, "SIP UDP receive error"),
                },
                Some(msg) = tcp_rx.recv() => self.on_tcp(msg),
                r = tcp.accept() => if let Ok((stream, from)) = r {
                    self.accept_tcp(stream, from);
                },
                Some((call, cmd)) = cmds.recv() => self.on_command(call, cmd),
                () = sleep_until(wake) => self.endpoint.poll(Instant::now()),
            }
            self.flush();
        }
    }

    fn on_tcp(&mut self, msg: FromTcp) {
        match msg {
            FromTcp::Message(conn, from, bytes) => {
                let peer = Peer {
                    addr: from,
                    transport: Transport::Tcp,
                    conn,
                };
                count_received(&bytes);
                self.endpoint.receive(&bytes, peer, Instant::now());
            }
            FromTcp::Closed(conn) => {
                self.conns.remove(&conn);
            }
        }
    }

    fn accept_tcp(&mut self, stream: tokio::net::TcpStream, from: SocketAddr) {
        let conn = self.next_conn;
        self.next_conn += 1;
        let (tx, rx) = mpsc::channel(TCP_OUT);
        self.conns.insert(conn, tx);
        let max = self.shared.cfg.max_message_bytes;
        tokio::spawn(tcp::serve(stream, from, conn, max, rx, self.tcp_tx.clone()));
    }

    fn on_command(&mut self, call: CallKey, cmd: Command) {
        let now = Instant::now();
        let ep = &mut self.endpoint;
        let done = match cmd {
            Command::Ringing => ep.ringing(call),
            Command::Accept(sdp) => ep.accept(call, &sdp, now),
            Command::Reject(code, headers) => ep.reject(call, code, &headers, now),
            Command::AnswerReinvite(txn, answer) => {
                let answer = answer
                    .as_ref()
                    .map(Vec::as_slice)
                    .map_err(|(c, h)| (*c, h.clone()));
                ep.answer_reinvite(call, txn, answer, now)
            }
            Command::Bye(reason) => ep.bye(call, reason, now),
            Command::Refer(target) => ep.refer(call, &target, now),
            Command::Release => {
                ep.release(call, now);
                self.calls.remove(&call);
                Ok(())
            }
        };
        if let Err(e) = done {
            debug!(call = call.0, error = %e, "SIP command did not apply");
        }
    }

    /// Sends what the endpoint output and routes its events.
    fn flush(&mut self) {
        while let Some(out) = self.endpoint.pop() {
            match out {
                Output::Send { to, bytes } => self.send(to, bytes),
                Output::Event(e) => self.on_event(e),
            }
        }
    }

    fn send(&mut self, to: Peer, bytes: Vec<u8>) {
        count_sent(&bytes);
        match to.transport {
            Transport::Udp => {
                if let Err(e) = self.udp.try_send_to(&bytes, to.addr) {
                    debug!(error = %e, to = %to.addr, "SIP UDP send failed");
                }
            }
            Transport::Tcp => {
                let full = self
                    .conns
                    .get(&to.conn)
                    .is_some_and(|c| c.try_send(bytes).is_err());
                if full {
                    warn!(to = %to.addr, "SIP TCP connection not reading: closed");
                    self.conns.remove(&to.conn);
                }
            }
        }
    }

    fn on_event(&mut self, e: Event) {
        let signal = match e {
            Event::Invite { call, invite } => return self.on_invite(call, invite),
            Event::Options { txn } => return self.on_options(txn),
            Event::Malformed {
                from,
                error,
                answered,
            } => {
                debug!(from = %from.addr, error = %error, answered, "malformed SIP message");
                metrics::counter!(m::SIP_MALFORMED, "answered" => answered.to_string())
                    .increment(1);
                return;
            }
            Event::Stray => return metrics::counter!(m::SIP_STRAY).increment(1),
            Event::Cancelled { call } => (call, Signal::Cancelled),
            Event::Confirmed { call } => (call, Signal::Confirmed),
            Event::AckTimeout { call } => (call, Signal::AckTimeout),
            Event::Reinvite { call, txn, offer } => (call, Signal::Reinvite { txn, offer }),
            Event::Bye { call } => (call, Signal::Bye),
            Event::Dtmf { call, digit } => (call, Signal::Dtmf(digit)),
            Event::ByeDone { call, code } => (call, Signal::ByeDone(code)),
            Event::ReferAnswered { call, code } => (call, Signal::ReferAnswered(code)),
            Event::ReferNotify {
                call,
                status,
                terminated,
            } => (call, Signal::ReferNotify { status, terminated }),
        };
        let (call, signal) = signal;
        match self.calls.get(&call) {
            Some(tx) if tx.try_send(signal).is_err() => {
                warn!(
                    call = call.0,
                    "call not reading its SIP signals: one dropped"
                );
            }
            Some(_) => {}
            // The call's task is gone: nothing more for its dialog.
            None => self.endpoint.release(call, Instant::now()),
        }
    }

    fn on_invite(&mut self, call: CallKey, invite: ua::Invite) {
        let trusted = &self.shared.cfg.trusted_peers;
        if !trusted.is_empty() && !trusted.contains(&invite.source.addr.ip()) {
            warn!(from = %invite.source.addr, "INVITE from an untrusted address: 403");
            let _ = self.endpoint.reject(call, 403, &[], Instant::now());
            return;
        }
        let (tx, rx) = mpsc::channel(SIGNALS);
        self.calls.insert(call, tx);
        let link = super::leg::ServerLink {
            key: call,
            tx: self.cmd_tx.clone(),
        };
        let (app, shared) = (Arc::clone(&self.app), Arc::clone(&self.shared));
        self.app
            .tasks
            .spawn(call::run(app, shared, link, rx, invite));
    }

    fn on_options(&mut self, txn: ua::TxnKey) {
        let snap = self.app.gate.snapshot();
        let full = snap.active >= snap.capacity;
        let serving = !snap.draining && !full && snap.dependencies_down.is_empty();
        let now = Instant::now();
        let _ = if serving {
            self.endpoint.answer_options(txn, 200, &[], now)
        } else {
            let retry = ("Retry-After", self.shared.cfg.retry_after_s.to_string());
            self.endpoint.answer_options(txn, 503, &[retry], now)
        };
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// `callgate_sip_requests_total{method}` (responses are not counted here).
fn count_received(bytes: &[u8]) {
    const KNOWN: [&str; 14] = [
        "INVITE",
        "ACK",
        "BYE",
        "CANCEL",
        "OPTIONS",
        "INFO",
        "NOTIFY",
        "REFER",
        "PRACK",
        "UPDATE",
        "REGISTER",
        "SUBSCRIBE",
        "PUBLISH",
        "MESSAGE",
    ];
    if bytes.starts_with(b"SIP/") || bytes.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    let token = bytes.split(|b| *b == b' ').next().unwrap_or_default();
    let method = KNOWN
        .iter()
        .find(|k| k.as_bytes() == token)
        .copied()
        .unwrap_or("other");
    metrics::counter!(m::SIP_REQUESTS, "method" => method).increment(1);
}

/// `callgate_sip_responses_total{code}` / `_requests_sent_total{method}`.
fn count_sent(bytes: &[u8]) {
    if let Some(code) = bytes.strip_prefix(b"SIP/2.0 ").and_then(|r| r.get(..3)) {
        let code = String::from_utf8_lossy(code).into_owned();
        metrics::counter!(m::SIP_RESPONSES, "code" => code).increment(1);
    } else {
        let method = bytes.split(|b| *b == b' ').next().unwrap_or_default();
        let method = match method {
            b"BYE" => "BYE",
            b"REFER" => "REFER",
            _ => "other",
        };
        metrics::counter!(m::SIP_REQUESTS_SENT, "method" => method).increment(1);
    }
}
