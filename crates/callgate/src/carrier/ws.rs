//! The write half shared by WebSocket legs: a writer task behind a bounded
//! queue, so a peer that stops reading can never stall the call's task.
//!
//! Overflow policy ([`OUT_QUEUE`]): audio is dropped and counted when the
//! queue is full; control messages (marks, clears, transfer/end, the close)
//! are dropped too when even they do not fit — a peer that has not read 5 s
//! of audio is gone, and the read side notices.

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
    fn too_long(&self) -> Violation;
}

/// Both halves of a WebSocket leg around its codec: the reading, batching,
/// counting and writing every WebSocket leg does the same way.
pub struct WsLink<C> {
    pub codec: C,
    pub(super) rx: SplitStream<WebSocket>,
    writer: WsWriter,
    closed: bool,
    pub stats: LegStats,
}

impl<C: WsCodec> WsLink<C> {
    pub fn new(socket: WebSocket, codec: C) -> Self {
        let (rx, writer) = split(socket);
        WsLink {
            codec,
            rx,
            writer,
            closed: false,
            stats: LegStats::default(),
        }
    }

    /// The next event. Cancel-safe. After a terminal event, pending forever.
    pub async fn next_event(&mut self) -> LegEvent {
        loop {
            if self.closed {
                return std::future::pending().await;
            }
            let ev = match self.rx.next().await {
                None => Some(LegEvent::Gone("socket closed".into())),
                Some(Err(e)) if is_too_long(&e) => Some(LegEvent::Violation(self.codec.too_long())),
                Some(Err(e)) => Some(LegEvent::Gone(format!("socket error: {e}"))),
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

    /// Closes (bounded); true when the writer had to be aborted.
    pub async fn close(self, code: u16, reason: &str, bound: Duration) -> bool {
        self.writer.close(code, reason, bound).await
    }
}

/// tungstenite reports an over-limit message as a capacity error ("Message
/// too long"): that is bad input from the peer, not a lost socket.
pub fn is_too_long(e: &axum::Error) -> bool {
    e.to_string().contains("too long")
}
