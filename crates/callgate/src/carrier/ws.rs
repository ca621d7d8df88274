//! The write half shared by WebSocket legs: a writer task behind a bounded
//! queue, so a peer that stops reading can never stall the call's task.
//!
//! Overflow policy ([`OUT_QUEUE`]): audio is dropped and counted when the
//! queue is full; control messages (marks, clears, transfer/end, the close)
//! are dropped too when even they do not fit — a peer that has not read 5 s
//! of audio is gone, and the read side notices.
//!
//! Closing is a handshake ([`WsLink::close`]): after the close frame is
//! flushed the link reads, and drops, what the peer still sends until its
//! close answers ours, for at most [`CLOSE_HANDSHAKE`]. Dropping a socket
//! with frames unread makes the kernel reset the connection, and a peer
//! still streaming audio would then lose the last messages and the close
//! frame in its receive buffer. Size limits ([`oversize`]) are checked
//! here, on whole messages, so a message over a carrier's limit is named
//! by its kind and size and the stream stays readable for the handshake;
//! the WebSocket layer itself only refuses what is over [`TRANSPORT_CAP`].

use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::leg::{LegEvent, LegStats, Violation};
use crate::metrics as m;

/// Outbound messages queued for the peer: 256 is 5 s of 20 ms frames; the
/// pacer keeps only ~60 ms in flight, so this fills only when the peer has
/// stopped reading.
pub const OUT_QUEUE: usize = 256;

/// A write that takes longer than this means the peer is gone: the writer
/// gives up and the socket is dropped.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// Messages written per flush at most.
const WRITE_BATCH: usize = 32;

/// How long a closing link waits, after its close frame is flushed, for the
/// peer's close in answer (an RTT for a conforming peer). Past it the
/// socket is dropped, which resets the connection, and counted.
pub const CLOSE_HANDSHAKE: Duration = Duration::from_secs(2);

/// The WebSocket layer's own bound on one message or frame, in bytes: above
/// every carrier's limit, so an oversized message still arrives whole and
/// is refused by [`oversize`] with its kind and size. A message over this
/// cannot be skipped without buffering it: it is refused by size alone and
/// the connection is dropped without the closing handshake.
pub const TRANSPORT_CAP: usize = 256 * 1024;

/// The bound to give the WebSocket layer for a carrier limit of `limit`.
pub fn transport_cap(limit: usize) -> usize {
    limit.max(TRANSPORT_CAP)
}

/// The kind of a message over its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    Text,
    Binary,
    /// Refused by the WebSocket layer before it was read whole.
    Unread,
}

impl MessageKind {
    /// How the message is named in an error text.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageKind::Text => "text",
            MessageKind::Binary => "binary",
            MessageKind::Unread => "WebSocket",
        }
    }
}

/// A message over its carrier's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Oversize {
    pub kind: MessageKind,
    /// Its size in bytes (for [`MessageKind::Unread`], as its header says).
    pub len: usize,
    /// The carrier's limit it exceeds.
    pub limit: usize,
}

/// The message's kind and size when it is over `limit` bytes.
pub fn oversize(msg: &Message, limit: usize) -> Option<Oversize> {
    let (kind, len) = match msg {
        Message::Text(t) => (MessageKind::Text, t.len()),
        Message::Binary(b) => (MessageKind::Binary, b.len()),
        _ => return None,
    };
    (len > limit).then_some(Oversize { kind, len, limit })
}

/// The size of a message the WebSocket layer refused as over its cap, if
/// that is what `e` is (tungstenite's capacity error, under axum's).
pub fn transport_oversize(e: &axum::Error, limit: usize) -> Option<Oversize> {
    use std::error::Error as _;
    use tungstenite::error::{CapacityError, Error};
    let inner = e.source()?.downcast_ref::<Error>()?;
    let Error::Capacity(CapacityError::MessageTooLong { size, .. }) = inner else {
        return None;
    };
    Some(Oversize {
        kind: MessageKind::Unread,
        len: *size,
        limit,
    })
}

/// How a closing handshake ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handshake {
    /// The peer's close frame arrived.
    Answered,
    /// The peer closed or reset the connection without one.
    PeerGone,
    /// Nothing answered within [`CLOSE_HANDSHAKE`] (or the close's bound).
    TimedOut,
    /// Not attempted: the stream was unreadable (a message over
    /// [`TRANSPORT_CAP`]) or the writer had to be aborted.
    Skipped,
}

impl Handshake {
    fn as_str(self) -> &'static str {
        match self {
            Handshake::Answered => "answered",
            Handshake::PeerGone => "peer_gone",
            Handshake::TimedOut => "timed_out",
            Handshake::Skipped => "skipped",
        }
    }
}

/// Reads, and drops, what the peer still sends until its close frame or
/// the end of the stream, for at most `within`.
async fn await_peer_close(rx: &mut SplitStream<WebSocket>, within: Duration) -> Handshake {
    let read = async {
        loop {
            match rx.next().await {
                Some(Ok(Message::Close(_))) => return Handshake::Answered,
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return Handshake::PeerGone,
            }
        }
    };
    tokio::time::timeout(within, read)
        .await
        .unwrap_or(Handshake::TimedOut)
}

/// What the writer sends.
pub enum Out {
    Text(String),
    Binary(Vec<u8>),
    Close(u16, String),
}

/// The write half of a WebSocket leg.
pub struct WsWriter {
    tx: mpsc::Sender<Out>,
    writer: JoinHandle<()>,
}

/// Splits an upgraded socket into its read half and a [`WsWriter`].
pub fn split(ws: WebSocket) -> (SplitStream<WebSocket>, WsWriter) {
    let (sink, rx) = ws.split();
    let (tx, out_rx) = mpsc::channel(OUT_QUEUE);
    let writer = tokio::spawn(write_loop(sink, out_rx));
    (rx, WsWriter { tx, writer })
}

impl WsWriter {
    /// Queues a message without waiting; false when the queue was full.
    pub fn try_send(&self, out: Out) -> bool {
        self.tx.try_send(out).is_ok()
    }

    /// Queues the close and waits, bounded, for the writer to flush and
    /// finish. Returns true when the writer had to be aborted.
    ///
    /// A writer dropped without `close` (panic, cancellation) still ends:
    /// its queue closes, it flushes what is queued and closes the socket.
    pub async fn close(self, code: u16, reason: &str, bound: Duration) -> bool {
        let WsWriter { tx, mut writer } = self;
        let _ = tx.try_send(Out::Close(code, reason.chars().take(120).collect()));
        drop(tx);
        if tokio::time::timeout(bound, &mut writer).await.is_err() {
            writer.abort();
            return true;
        }
        false
    }
}

async fn write_loop(mut sink: SplitSink<WebSocket, Message>, mut rx: mpsc::Receiver<Out>) {
    while let Some(first) = rx.recv().await {
        // Everything already queued goes out in one flush: fewer syscalls
        // when a pacer releases several frames at once.
        let mut batch = vec![first];
        while batch.len() < WRITE_BATCH {
            match rx.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        let closing = batch.iter().any(|o| matches!(o, Out::Close(..)));
        let write = async {
            for out in batch {
                sink.feed(message(out)).await?;
            }
            sink.flush().await
        };
        match tokio::time::timeout(SEND_TIMEOUT, write).await {
            Ok(Ok(())) if !closing => {}
            _ => break,
        }
    }
    let _ = tokio::time::timeout(SEND_TIMEOUT, sink.close()).await;
}

fn message(out: Out) -> Message {
    match out {
        Out::Text(t) => Message::Text(t.into()),
        Out::Binary(b) => Message::Binary(b.into()),
        Out::Close(code, reason) => Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })),
    }
}

/// A WebSocket leg's protocol: how one inbound message becomes an event.
pub trait WsCodec: Send + 'static {
    /// `None`: nothing for the call (a ping, an ignored event, audio while
    /// audio is not wanted). `now` is when callgate read the message.
    fn decode(&mut self, msg: Message, stats: &mut LegStats, now: Instant) -> Option<LegEvent>;
    /// The violation for a message over the size limit.
    fn too_large(&self, over: Oversize) -> Violation;
}

/// Both halves of a WebSocket leg around its codec: the reading, batching,
/// counting and writing every WebSocket leg does the same way.
pub struct WsLink<C> {
    pub codec: C,
    pub(super) rx: SplitStream<WebSocket>,
    writer: WsWriter,
    closed: bool,
    /// The carrier's limit on one message, in bytes.
    limit: usize,
    /// A message over [`TRANSPORT_CAP`] was refused: the stream cannot be
    /// read on, so the close skips the handshake.
    unreadable: bool,
    pub stats: LegStats,
}

impl<C: WsCodec> WsLink<C> {
    /// A link whose messages may be at most `limit` bytes.
    pub fn new(socket: WebSocket, codec: C, limit: usize) -> Self {
        let (rx, writer) = split(socket);
        WsLink {
            codec,
            rx,
            writer,
            closed: false,
            limit,
            unreadable: false,
            stats: LegStats::default(),
        }
    }

    /// The next message, with the size limits applied: a message over the
    /// carrier's limit (or the transport's) is `Err` with its size.
    pub async fn next_message(&mut self) -> Option<Result<Message, ReadError>> {
        let msg = match self.rx.next().await? {
            Ok(msg) => msg,
            Err(e) => {
                let over = transport_oversize(&e, self.limit);
                self.unreadable |= over.is_some();
                return Some(Err(over.map_or(ReadError::Socket(e), ReadError::TooLarge)));
            }
        };
        Some(match oversize(&msg, self.limit) {
            Some(over) => Err(ReadError::TooLarge(over)),
            None => Ok(msg),
        })
    }

    /// The next event. Cancel-safe. After a terminal event, pending forever.
    pub async fn next_event(&mut self) -> LegEvent {
        loop {
            if self.closed {
                return std::future::pending().await;
            }
            let ev = match self.next_message().await {
                None => Some(LegEvent::Gone("socket closed".into())),
                Some(Err(ReadError::TooLarge(o))) => {
                    Some(LegEvent::Violation(self.codec.too_large(o)))
                }
                Some(Err(ReadError::Socket(e))) => {
                    Some(LegEvent::Gone(format!("socket error: {e}")))
                }
                Some(Ok(msg)) => self.codec.decode(msg, &mut self.stats, Instant::now()),
            };
            if let Some(ev) = ev {
                self.closed = ev.is_terminal();
                return ev;
            }
        }
    }

    /// Every event already received, without waiting; audio is left out.
    pub fn ready_events(&mut self) -> Vec<LegEvent> {
        use futures_util::FutureExt;
        let mut out = Vec::new();
        while !self.closed {
            match self.next_event().now_or_never() {
                None => break,
                Some(LegEvent::Audio(_)) => {}
                Some(ev) => out.push(ev),
            }
        }
        out
    }

    /// Queues a message; a full queue drops it and counts it.
    pub fn send(&mut self, out: Out, audio: bool) {
        if self.writer.try_send(out) {
            if audio {
                self.stats.frames_out += 1;
                metrics::counter!(m::MEDIA_OUT).increment(1);
            }
        } else {
            self.stats.frames_dropped += 1;
            if audio {
                metrics::counter!(m::MEDIA_OUT_DROPPED).increment(1);
            }
        }
    }

    /// Sends the close, then waits for the peer's close in answer (the
    /// closing handshake, reading and dropping what it still sends), all
    /// within `bound`. True when the close was forced: the writer had to be
    /// aborted (the peer stopped reading). A peer that does not answer the
    /// close in time is only counted: its close frame was sent, and
    /// nothing of the call is left behind.
    pub async fn close(self, code: u16, reason: &str, bound: Duration) -> bool {
        let WsLink {
            mut rx,
            writer,
            unreadable,
            ..
        } = self;
        let begun = Instant::now();
        let aborted = writer.close(code, reason, bound).await;
        let handshake = if aborted || unreadable {
            Handshake::Skipped
        } else {
            let left = bound.saturating_sub(begun.elapsed());
            await_peer_close(&mut rx, left.min(CLOSE_HANDSHAKE)).await
        };
        metrics::counter!(m::WS_CLOSE_HANDSHAKES, "outcome" => handshake.as_str()).increment(1);
        aborted
    }
}

/// Why reading the next message failed.
#[derive(Debug)]
pub enum ReadError {
    /// Over the carrier's limit or the transport's.
    TooLarge(Oversize),
    /// The socket failed.
    Socket(axum::Error),
}

#[cfg(test)]
mod tests;
