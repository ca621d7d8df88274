//! Raw SIP senders for the torture corpus: one datagram or one TCP
//! write from loopback, and whatever comes back within a bound.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{LOOPBACK, scenario_dir};

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
