//! The WebRTC leg: one browser session, signalled over HTTP
//! ([`super::signalling`]) and carried by its media task ([`session`]).
//!
//! Format: 16 kHz L16 — Opus is decoded to it and encoded from it inside
//! the media task, so the call's STT and TTS are opened in it and nothing
//! else is converted. The answer is held back until the gate has spoken:
//! `queued` or `open_media` releases the `201` and starts media (a queued
//! caller hears hold audio), a refusal before either becomes the `503` (or,
//! under `webrtc.overflow = "prompt"`, media that plays the prompt). Marks
//! are reported by the leg's own playout clock. `DELETE` is the caller's
//! hang-up; a lost transport is [`LegEvent::TransportLost`]. Finishing
//! closes DTLS and waits, bounded, for the media task; the session's
//! routes and registry entry go with it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use super::WebrtcShared;
use super::registry::{Entry, EntryGuard};
use super::router::{Datagram, RouteGuard};
use super::session::{self, Ctl, Media, Settings};
use crate::config::WebrtcOverflow;
use crate::leg::{Cause, Finish, Finished, Leg, LegEvent, LegFormat, LegStats};

/// What the signalling request waiting for this leg is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Send the `201` with the answer: media starts now.
    Go,
    /// Refused before any media: `503` with this reason.
    Refused { reason: String },
    /// The call could not start (the caller left, no media task).
    Failed(String),
}

/// What an answered session needs to start its media.
pub struct Pending {
    pub rtc: str0m::Rtc,
    pub settings: Settings,
    pub inbox: mpsc::Receiver<Datagram>,
    pub routes: RouteGuard,
}

pub struct WebrtcLeg {
    shared: Arc<WebrtcShared>,
    guard: EntryGuard,
    answer: Option<oneshot::Sender<Answer>>,
    pending: Option<Pending>,
    media: Option<Media>,
    events: VecDeque<LegEvent>,
    /// The terminal event seen, for the session's `end_reason`.
    left: Option<String>,
    /// The refusal's reason, once the call goes to the overflow path
    /// (the `finish` that follows reports it).
    refusing: Option<String>,
    ended: bool,
    stats: LegStats,
}

impl WebrtcLeg {
    pub fn new(
        shared: Arc<WebrtcShared>,
        guard: EntryGuard,
        answer: oneshot::Sender<Answer>,
        pending: Pending,
    ) -> WebrtcLeg {
        WebrtcLeg {
            shared,
            guard,
            answer: Some(answer),
            pending: Some(pending),
            media: None,
            events: VecDeque::new(),
            left: None,
            refusing: None,
            ended: false,
            stats: LegStats::default(),
        }
    }

    fn entry(&self) -> &Entry {
        &self.guard.entry
    }

    /// Releases the `201` and starts media (once).
    fn go(&mut self, state: &'static str) -> Result<(), LegEvent> {
        self.entry().set_state(state, None);
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        let media = session::start(
            p.rtc,
            p.settings,
            Arc::clone(&self.shared.socket),
            p.inbox,
            p.routes,
        );
        let answer = self.answer.take();
        match media {
            Ok(m) => {
                self.media = Some(m);
                if let Some(a) = answer {
                    let _ = a.send(Answer::Go);
                }
                Ok(())
            }
            Err(e) => {
                let why = format!("Opus codec could not start: {e}");
                if let Some(a) = answer {
                    let _ = a.send(Answer::Failed(why.clone()));
                }
                Err(LegEvent::Gone(why))
            }
        }
    }

    fn observe(&mut self, ev: &LegEvent) {
        match ev {
            LegEvent::Audio(_) => self.stats.frames_in += 1,
            LegEvent::Hangup => self.left = Some("caller_hangup".into()),
            LegEvent::TransportLost(loss, _) => self.left = Some(loss.as_str().into()),
            LegEvent::Gone(_) => self.left = Some("carrier_gone".into()),
            _ => {}
        }
        if ev.is_terminal() {
            self.ended = true;
        }
    }

    async fn next_raw(&mut self) -> LegEvent {
        if let Some(ev) = self.events.pop_front() {
            return ev;
        }
        loop {
            if self.entry().is_deleted() {
                return LegEvent::Hangup;
            }
            let entry = Arc::clone(&self.guard.entry);
            match &mut self.media {
                Some(m) => tokio::select! {
                    () = entry.wake.notified() => {}
                    ev = m.events.recv() => {
                        return ev.unwrap_or_else(|| LegEvent::Gone("media task ended".into()));
                    }
                },
                None => entry.wake.notified().await,
            }
        }
    }
}

impl Leg for WebrtcLeg {
    fn format(&self) -> LegFormat {
        LegFormat::L16k16
    }

    async fn next_event(&mut self) -> LegEvent {
        if self.ended {
            return std::future::pending().await;
        }
        let ev = self.next_raw().await;
        self.observe(&ev);
        ev
    }

    fn ready_events(&mut self) -> Vec<LegEvent> {
        let mut out: Vec<LegEvent> = self.events.drain(..).collect();
        if let Some(m) = &mut self.media {
            while let Ok(ev) = m.events.try_recv() {
                if !matches!(ev, LegEvent::Audio(_)) {
                    out.push(ev);
                }
            }
        }
        if self.entry().is_deleted() {
            out.push(LegEvent::Hangup);
        }
        for ev in &out {
            self.observe(ev);
        }
        out
    }

    fn want_audio(&mut self) {
        if let Some(m) = &self.media {
            let _ = m.ctl.send(Ctl::WantAudio);
        }
    }

    fn play(&mut self, audio: &[u8]) {
        if let Some(m) = &self.media {
            lock(&m.out).push(audio, LegFormat::L16k16.frame_bytes());
        }
    }

    fn mark(&mut self, name: &str) {
        match &self.media {
            Some(m) => lock(&m.out).mark(name),
            None => self.events.push_back(LegEvent::Played(name.to_string())),
        }
    }

    fn clear(&mut self) {
        if let Some(m) = &self.media {
            {
                let mut r = lock(&m.report);
                r.clears += 1;
                r.clear_at.get_or_insert_with(std::time::Instant::now);
            }
            let marks = lock(&m.out).clear();
            self.events.extend(marks.into_iter().map(LegEvent::Played));
        }
    }

    fn stats(&self) -> LegStats {
        let mut s = self.stats;
        if let Some(m) = &self.media {
            s.frames_out = lock(&m.report).packets_out;
            s.frames_dropped = lock(&m.out).dropped_frames;
        }
        s
    }

    fn transport_report(&self) -> Option<serde_json::Value> {
        let m = self.media.as_ref()?;
        let mut v = serde_json::to_value(&*lock(&m.report)).ok()?;
        let posted = lock(&self.entry().evidence).posted.clone();
        v["client"] = posted.unwrap_or(serde_json::Value::Null);
        Some(v)
    }

    async fn open_media(&mut self) -> Result<(), LegEvent> {
        let early: Vec<LegEvent> = self.ready_events();
        if let Some(ev) = early.iter().find(|e| e.is_terminal()) {
            return Err(ev.clone());
        }
        self.events.extend(early);
        self.ended = false;
        // A refused call's prompt is not the conversation: `refusing` until
        // the prompt is over and `finish` says `refused`.
        let state = if self.refusing.is_some() {
            "refusing"
        } else {
            "admitted"
        };
        self.go(state)
    }

    fn refusing(&mut self, reason: &str) {
        self.refusing = Some(reason.to_string());
    }

    fn queued(&mut self) {
        if let Err(ev) = self.go("queued") {
            self.events.push_back(ev);
        }
    }

    /// With `webrtc.overflow = "prompt"`; and always for a caller who
    /// was queued: its `201` is sent and its media runs, so a `503` is no
    /// longer possible and the prompt is what it hears.
    fn prompt_before_refusal(&self) -> bool {
        self.shared.cfg.overflow == WebrtcOverflow::Prompt || self.media.is_some()
    }

    fn has_media(&self) -> bool {
        self.media.is_some()
    }

    fn bounds_its_own_media(&self) -> bool {
        true
    }

    async fn finish(mut self, how: Finish, bound: Duration) -> Finished {
        let (state, reason) = match &how {
            Finish::Transfer { cause, .. } | Finish::Hangup(cause) => match cause {
                Cause::Refused(r) => ("refused", r.as_str().to_string()),
                // The ledger's form: `transferred:caller_requested_human`.
                Cause::Ended(r, d) => ("ended", r.ledger(d.as_deref())),
            },
            Finish::Refuse(v) => ("ended", format!("protocol_error:{}", v.kind)),
            Finish::Release => (
                "ended",
                self.left.clone().unwrap_or_else(|| "carrier_gone".into()),
            ),
        };
        if let Some(a) = self.answer.take() {
            let _ = a.send(match state {
                "refused" => Answer::Refused {
                    reason: reason.clone(),
                },
                _ => Answer::Failed(reason.clone()),
            });
        }
        self.entry().set_state(state, Some(reason));
        let Some(m) = self.media.take() else {
            return Finished::default();
        };
        let _ = m.ctl.send(Ctl::Close);
        let mut task = m.task;
        let forced = tokio::time::timeout(bound, &mut task).await.is_err();
        if forced {
            warn!("WebRTC media task did not stop within its bound: aborted");
            task.abort();
        }
        Finished { forced }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
