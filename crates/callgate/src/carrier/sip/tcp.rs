//! One SIP TCP connection: a reader that cuts messages by
//! `Content-Length` ([`callgate::carrier::sip::ua::wire::StreamFramer`]) and a writer fed by
//! the server task. A stream that breaks framing (no or bad
//! `Content-Length`, a message over the limit) cannot be resynchronised,
//! so it is closed and counted; so is one idle for [`IDLE`].

use std::net::SocketAddr;
use std::time::Duration;

use crate::carrier::sip::ua::wire::StreamFramer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tracing::debug;

use crate::metrics as m;

/// A connection with no traffic for this long is closed.
pub const IDLE: Duration = Duration::from_secs(300);

/// What a TCP connection task reports.
pub(super) enum FromTcp {
    Message(u64, SocketAddr, Vec<u8>),
    Closed(u64),
}

pub(super) async fn serve(
    stream: TcpStream,
    from: SocketAddr,
    conn: u64,
    max: usize,
    mut out: mpsc::Receiver<Vec<u8>>,
    to_server: mpsc::Sender<FromTcp>,
) {
    let (mut rd, mut wr) = stream.into_split();
    let mut framer = StreamFramer::new(max);
    let mut buf = vec![0u8; 8 * 1024];
    loop {
        tokio::select! {
            r = tokio::time::timeout(IDLE, rd.read(&mut buf)) => {
                let n = match r {
                    Ok(Ok(n)) if n > 0 => n,
                    _ => break,
                };
                framer.push(&buf[..n]);
                if !forward(&mut framer, conn, from, &to_server).await {
                    break;
                }
            }
            msg = out.recv() => match msg {
                Some(bytes) => if wr.write_all(&bytes).await.is_err() { break },
                None => break,
            },
        }
    }
    let _ = to_server.send(FromTcp::Closed(conn)).await;
}

/// Hands every complete message to the server; false when the stream's
/// framing is broken.
async fn forward(
    framer: &mut StreamFramer,
    conn: u64,
    from: SocketAddr,
    to: &mpsc::Sender<FromTcp>,
) -> bool {
    loop {
        match framer.next_message() {
            Ok(Some(msg)) => {
                if to.send(FromTcp::Message(conn, from, msg)).await.is_err() {
                    return false;
                }
            }
            Ok(None) => return true,
            Err(e) => {
                debug!(%from, error = %e, "SIP TCP framing broken: closing the connection");
                metrics::counter!(m::SIP_MALFORMED, "answered" => "false").increment(1);
                return false;
            }
        }
    }
}
