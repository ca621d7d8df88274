//! A minimal WebSocket client over a raw TCP stream, for the simulators'
//! socket-level tests (the crate has no WebSocket client dependency, and
//! the protocol clients live in other crates). Unfragmented frames only,
//! which is all the simulators send.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Generous: the machine may be busy compiling.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// Sends one request and returns (status, body), reading by Content-Length.
pub async fn http(addr: std::net::SocketAddr, request: String) -> (u16, String) {
    let io = async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        loop {
            let mut chunk = [0u8; 4096];
            let n = s.read(&mut chunk).await.unwrap();
            assert!(
                n > 0,
                "connection closed early: {}",
                String::from_utf8_lossy(&buf)
            );
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).to_string();
            let Some((head, body)) = text.split_once("\r\n\r\n") else {
                continue;
            };
            let len = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_owned)
                })
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= len {
                let status = head.split(' ').nth(1).unwrap().parse().unwrap();
                return (status, body.to_owned());
            }
        }
    };
    tokio::time::timeout(DEADLINE, io).await.unwrap()
}

/// One frame from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Text(String),
    Binary(Vec<u8>),
    Close(u16, String),
}

/// The client end of one upgraded connection.
pub struct RawWs {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// What a refused upgrade answered: its status and response head.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub head: String,
}

impl RawWs {
    /// Upgrades `GET {path_and_query}`; the response head is returned too.
    pub async fn connect(
        addr: SocketAddr,
        path_and_query: &str,
        headers: &[(&str, &str)],
    ) -> Result<(RawWs, String), Refused> {
        let extra: String = headers
            .iter()
            .map(|(k, v)| format!("{k}: {v}\r\n"))
            .collect();
        let request = format!(
            "GET {path_and_query} HTTP/1.1\r\nHost: sim\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
        );
        let io = async {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut buf = Vec::new();
            loop {
                let mut chunk = [0u8; 4096];
                let n = stream.read(&mut chunk).await.unwrap();
                assert!(n > 0, "closed during the handshake");
                buf.extend_from_slice(&chunk[..n]);
                if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    let rest = buf[end + 4..].to_vec();
                    return (stream, head, rest);
                }
            }
        };
        let (stream, head, rest) = tokio::time::timeout(DEADLINE, io).await.unwrap();
        let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
        if status != 101 {
            return Err(Refused { status, head });
        }
        Ok((RawWs { stream, buf: rest }, head))
    }

    async fn send(&mut self, opcode: u8, payload: &[u8]) {
        let mask = [0x37, 0xfa, 0x21, 0x3d];
        let mut frame = vec![0x80 | opcode];
        match payload.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n if n <= usize::from(u16::MAX) => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        tokio::time::timeout(DEADLINE, self.stream.write_all(&frame))
            .await
            .unwrap()
            .unwrap();
    }

    pub async fn send_text(&mut self, text: &str) {
        self.send(0x1, text.as_bytes()).await;
    }

    pub async fn send_binary(&mut self, bytes: &[u8]) {
        self.send(0x2, bytes).await;
    }

    /// Sends a close frame with code 1000.
    pub async fn send_close(&mut self) {
        self.send(0x8, &1000u16.to_be_bytes()).await;
    }

    async fn fill(&mut self, n: usize) -> bool {
        while self.buf.len() < n {
            let mut chunk = [0u8; 8192];
            match self.stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(k) => self.buf.extend_from_slice(&chunk[..k]),
            }
        }
        true
    }

    /// The next data or close frame (pings and pongs are skipped); `None`
    /// once the connection has ended.
    pub async fn recv(&mut self) -> Option<Frame> {
        tokio::time::timeout(DEADLINE, self.recv_inner())
            .await
            .expect("a frame within the deadline")
    }

    async fn recv_inner(&mut self) -> Option<Frame> {
        loop {
            if !self.fill(2).await {
                return None;
            }
            let opcode = self.buf[0] & 0x0f;
            let (len, header) = match self.buf[1] & 0x7f {
                126 => {
                    if !self.fill(4).await {
                        return None;
                    }
                    (
                        usize::from(u16::from_be_bytes([self.buf[2], self.buf[3]])),
                        4,
                    )
                }
                127 => {
                    if !self.fill(10).await {
                        return None;
                    }
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&self.buf[2..10]);
                    (u64::from_be_bytes(b) as usize, 10)
                }
                n => (usize::from(n), 2),
            };
            if !self.fill(header + len).await {
                return None;
            }
            let payload: Vec<u8> = self.buf[header..header + len].to_vec();
            self.buf.drain(..header + len);
            match opcode {
                0x1 => return Some(Frame::Text(String::from_utf8(payload).unwrap())),
                0x2 => return Some(Frame::Binary(payload)),
                0x8 => {
                    let code = if payload.len() >= 2 {
                        u16::from_be_bytes([payload[0], payload[1]])
                    } else {
                        1005
                    };
                    let reason = String::from_utf8_lossy(payload.get(2..).unwrap_or_default());
                    return Some(Frame::Close(code, reason.into_owned()));
                }
                _ => {} // ping, pong
            }
        }
    }

    /// Reads frames until the server's close (answering it) and returns the
    /// text frames seen before it and the close code.
    pub async fn until_close(&mut self) -> (Vec<String>, Option<u16>) {
        let mut texts = Vec::new();
        while let Some(frame) = self.recv().await {
            match frame {
                Frame::Text(t) => texts.push(t),
                Frame::Binary(_) => {}
                Frame::Close(code, _) => {
                    self.send_close().await;
                    return (texts, Some(code));
                }
            }
        }
        (texts, None)
    }
}
