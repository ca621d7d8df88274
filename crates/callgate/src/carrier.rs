//! The carrier leg of a call: a Twilio media-stream WebSocket seen as domain
//! events in and audio/marks out.
//!
//! Reading is done by whoever owns the [`CarrierLink`] (`next_event` is
//! cancel-safe, so it sits in a `select!`). Writing goes through a small
//! writer task behind a bounded queue, so a carrier that stops reading can
//! never stall the call actor: when the queue is full, audio frames are
//! dropped and counted (see [`OUT_QUEUE`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::metrics as m;
use crate::twilio::{self, Inbound, WireError};

/// Outbound frames queued for the carrier. 256 frames is 5 s of audio; the
/// pacer keeps only ~60 ms in flight, so this fills only when the carrier has
/// stopped reading. Overflow policy: audio frames are dropped (counted in
/// `callgate_media_frames_dropped_total`); marks, clears and the close are
/// control frames and wait for room (bounded by the writer's send timeout).
const OUT_QUEUE: usize = 256;

/// A write to the carrier that takes longer than this means the carrier is
/// gone; the writer gives up and the socket is dropped.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// What the carrier told us.
#[derive(Debug)]
pub enum CarrierEvent {
    /// Caller audio (μ-law 8 kHz as delivered).
    Audio(Vec<u8>),
    Dtmf(String),
    /// A mark we sent has been played out.
    MarkPlayed(String),
    /// The `start` event (only seen before the call is set up).
    Start(twilio::Start),
    /// `connected`, or an event type we do not use (counted).
    Ignored,
    /// The carrier said `stop`: the caller hung up or the stream was stopped.
    Stop,
    /// The socket closed or failed without a `stop`.
    Gone(String),
    /// A frame that breaks the protocol; the stream must be closed.
    Invalid(WireError),
}

/// Counters kept by the link, copied into the ledger at the end of a call.
#[derive(Debug, Default)]
pub struct LinkStats {
    pub frames_in: AtomicU64,
    pub frames_out: AtomicU64,
    pub frames_dropped: AtomicU64,
    pub ignored_events: AtomicU64,
}

enum Out {
    Text(String),
    Close(u16, String),
}

/// One carrier WebSocket.
pub struct CarrierLink {
    out: twilio::Outbound,
    rx: SplitStream<WebSocket>,
    tx: mpsc::Sender<Out>,
    writer: JoinHandle<()>,
    max_payload: usize,
    audio: twilio::Audio,
    closed: bool,
    pub stats: Arc<LinkStats>,
}

impl CarrierLink {
    /// Wraps an upgraded socket.
    pub fn new(ws: WebSocket, max_payload: usize) -> Self {
        let (sink, rx) = ws.split();
        let (tx, out_rx) = mpsc::channel(OUT_QUEUE);
        let stats = Arc::new(LinkStats::default());
        let writer = tokio::spawn(write_loop(sink, out_rx));
        CarrierLink {
            out: twilio::Outbound::new(""),
            rx,
            tx,
            writer,
            max_payload,
            audio: twilio::Audio::Discard,
            closed: false,
            stats,
        }
    }

    /// Sets the stream id used on every outbound frame (from `start`).
    pub fn set_stream_sid(&mut self, sid: &str) {
        self.out = twilio::Outbound::new(sid);
    }

    /// Starts decoding caller audio (until then — while waiting for
    /// admission or being refused — payloads are size-checked and dropped).
    pub fn want_audio(&mut self) {
        self.audio = twilio::Audio::Decode;
    }

    /// The next event from the carrier. Cancel-safe. After `Stop`, `Gone` or
    /// `Invalid`, further calls keep returning `Gone`.
    pub async fn next_event(&mut self) -> CarrierEvent {
        if self.closed {
            return std::future::pending().await;
        }
        let ev = match self.rx.next().await {
            None => CarrierEvent::Gone("socket closed".into()),
            // tungstenite reports an over-limit message as a capacity error
            // ("Message too long"); that is bad input, not a lost socket.
            Some(Err(e)) if e.to_string().contains("too long") => {
                CarrierEvent::Invalid(WireError::MessageTooLarge)
            }
            Some(Err(e)) => CarrierEvent::Gone(format!("socket error: {e}")),
            Some(Ok(msg)) => self.decode(msg),
        };
        if matches!(
            ev,
            CarrierEvent::Stop | CarrierEvent::Gone(_) | CarrierEvent::Invalid(_)
        ) {
            self.closed = true;
        }
        ev
    }

    fn decode(&self, msg: Message) -> CarrierEvent {
        let text = match msg {
            Message::Text(t) => t,
            Message::Close(f) => {
                let why = f.map(|f| format!("closed by carrier ({} {})", f.code, f.reason));
                return CarrierEvent::Gone(why.unwrap_or_else(|| "closed by carrier".into()));
            }
            Message::Binary(_) => return CarrierEvent::Invalid(WireError::BinaryFrame),
            Message::Ping(_) | Message::Pong(_) => return CarrierEvent::Ignored,
        };
        match twilio::parse_with(text.as_str(), self.max_payload, self.audio) {
            Err(e) => CarrierEvent::Invalid(e),
            Ok(Inbound::Media(media)) => {
                self.stats.frames_in.fetch_add(1, Ordering::Relaxed);
                CarrierEvent::Audio(media.payload)
            }
            Ok(Inbound::Start(s)) => CarrierEvent::Start(s),
            Ok(Inbound::Dtmf { digit }) => CarrierEvent::Dtmf(digit),
            Ok(Inbound::Mark { name }) => CarrierEvent::MarkPlayed(name),
            Ok(Inbound::Stop) => CarrierEvent::Stop,
            Ok(Inbound::Connected) => CarrierEvent::Ignored,
            Ok(Inbound::Unknown { .. }) => {
                self.stats.ignored_events.fetch_add(1, Ordering::Relaxed);
                CarrierEvent::Ignored
            }
        }
    }

    /// Every event already received, without waiting; audio and ignored
    /// events are left out. Used by the hold and overflow paths, which wake
    /// once per prompt chunk instead of once per carrier frame: under overload
    /// most calls are on those paths, and per-frame wake-ups would take the
    /// CPU that admitted calls need.
    pub fn ready_events(&mut self) -> Vec<CarrierEvent> {
        use futures_util::FutureExt;
        let mut out = Vec::new();
        while !self.closed {
            match self.next_event().now_or_never() {
                None => break,
                Some(CarrierEvent::Audio(_) | CarrierEvent::Ignored) => {}
                Some(ev) => out.push(ev),
            }
        }
        out
    }

    /// Queues one audio frame. Never waits: a full queue drops the frame.
    pub fn send_audio(&self, frame: &[u8]) {
        let msg = Out::Text(self.out.media(frame));
        if self.tx.try_send(msg).is_ok() {
            self.stats.frames_out.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(m::MEDIA_OUT).increment(1);
        } else {
            self.stats.frames_dropped.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(m::MEDIA_OUT_DROPPED).increment(1);
        }
    }

    /// Queues a mark after the audio sent so far.
    pub fn send_mark(&self, name: &str) {
        self.send_control(Out::Text(self.out.mark(name)));
    }

    /// Asks the carrier to drop its buffered audio (barge-in).
    pub fn send_clear(&self) {
        self.send_control(Out::Text(self.out.clear()));
    }

    fn send_control(&self, out: Out) {
        // A control frame that does not fit means the carrier has not read
        // 5 s of audio: it is gone, and the call will notice on the read side.
        if self.tx.try_send(out).is_err() {
            self.stats.frames_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Closes the stream (code 1000 lets Twilio continue with the next TwiML
    /// verb) and waits, bounded, for the writer to flush and finish.
    ///
    /// A link dropped without `close` (panic, cancellation) still ends: its
    /// queue closes, the writer flushes what is queued and closes the socket.
    pub async fn close(self, code: u16, reason: &str) {
        let CarrierLink { tx, mut writer, .. } = self;
        let _ = tx.try_send(Out::Close(code, reason.chars().take(120).collect()));
        drop(tx);
        if tokio::time::timeout(SEND_TIMEOUT, &mut writer)
            .await
            .is_err()
        {
            writer.abort();
        }
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

/// Frames written per flush at most.
const WRITE_BATCH: usize = 32;

fn message(out: Out) -> Message {
    match out {
        Out::Text(t) => Message::Text(t.into()),
        Out::Close(code, reason) => Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })),
    }
}
