//! The sessions `POST /v1/webrtc` created, by their unguessable id (the
//! `Location` URL's last segment, 128 random bits): what `GET`, `DELETE`
//! and the client-evidence `POST` reach.
//!
//! A session's [`Entry`] is held by its leg through an [`EntryGuard`]:
//! while held it counts against `webrtc.max_sessions`; dropping it (the
//! leg finished, however) marks the session ended and keeps it readable
//! for [`LINGER`] so a polling page learns how its call ended, then
//! removes it. Nothing is balanced by hand.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use serde::Serialize;
use tokio::sync::Notify;

/// How long an ended session stays readable.
pub const LINGER: Duration = Duration::from_secs(10);

/// A session id: 16 random bytes, base64url without padding.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionId(String);

impl SessionId {
    pub fn random() -> SessionId {
        let bytes: [u8; 16] = rand::random();
        SessionId(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
    }

    /// Parses a path segment; anything that is not an id we could have made
    /// is `None` (and looked up as nothing).
    pub fn parse(s: &str) -> Option<SessionId> {
        (s.len() == 22
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
        .then(|| SessionId(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What `GET` on a session answers.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Status {
    /// `connecting` (answer not sent yet), `queued`, `admitted`, `refused`, `ended`.
    pub state: &'static str,
    pub end_reason: Option<String>,
    pub call_id: String,
}

/// The client evidence the page posted, and whether the receipt has
/// already been written (then later posts are refused, not lost silently).
#[derive(Debug, Default)]
pub struct Evidence {
    pub posted: Option<serde_json::Value>,
    pub receipt_written: bool,
}

pub struct Entry {
    pub status: Mutex<Status>,
    /// The partner whose key created the session (`None` on an open
    /// server): only that key reads the conversation.
    pub partner: Option<String>,
    pub evidence: Mutex<Evidence>,
    /// Set by `DELETE`; the leg reads it as the caller's hang-up.
    deleted: AtomicBool,
    pub wake: Notify,
}

impl Entry {
    pub fn delete(&self) {
        self.deleted.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::SeqCst)
    }

    pub fn set_state(&self, state: &'static str, end_reason: Option<String>) {
        let mut s = lock(&self.status);
        // A terminal state is final: a later finish does not rewrite it.
        if matches!(s.state, "ended" | "refused") {
            return;
        }
        s.state = state;
        s.end_reason = end_reason.or(s.end_reason.take());
    }
}

pub struct Registry {
    map: Mutex<HashMap<SessionId, Arc<Entry>>>,
    live: AtomicUsize,
    linger: Duration,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::with_linger(LINGER)
    }
}

impl Registry {
    pub fn with_linger(linger: Duration) -> Registry {
        Registry {
            map: Mutex::default(),
            live: AtomicUsize::new(0),
            linger,
        }
    }

    /// Sessions held now (not the lingering ended ones).
    pub fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    pub fn get(&self, id: &SessionId) -> Option<Arc<Entry>> {
        lock(&self.map).get(id).cloned()
    }

    /// Adds a session; the guard holds it live.
    pub fn add(
        self: &Arc<Self>,
        id: SessionId,
        call_id: String,
        partner: Option<String>,
    ) -> EntryGuard {
        let entry = Arc::new(Entry {
            status: Mutex::new(Status {
                state: "connecting",
                end_reason: None,
                call_id,
            }),
            partner,
            evidence: Mutex::default(),
            deleted: AtomicBool::new(false),
            wake: Notify::new(),
        });
        lock(&self.map).insert(id.clone(), Arc::clone(&entry));
        self.live.fetch_add(1, Ordering::SeqCst);
        metrics::gauge!(crate::metrics::WEBRTC_SESSIONS).set(self.live() as f64);
        EntryGuard {
            registry: Arc::clone(self),
            id,
            entry,
        }
    }

    /// Entries in the map, live and lingering (tests).
    pub fn len(&self) -> usize {
        lock(&self.map).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A live session; see the module documentation.
pub struct EntryGuard {
    registry: Arc<Registry>,
    id: SessionId,
    pub entry: Arc<Entry>,
}

impl Drop for EntryGuard {
    fn drop(&mut self) {
        self.entry.set_state("ended", None);
        lock(&self.entry.evidence).receipt_written = true;
        self.registry.live.fetch_sub(1, Ordering::SeqCst);
        metrics::gauge!(crate::metrics::WEBRTC_SESSIONS).set(self.registry.live() as f64);
        let linger = self.registry.linger;
        let (registry, id) = (Arc::clone(&self.registry), self.id.clone());
        let forget = move || {
            lock(&registry.map).remove(&id);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    tokio::time::sleep(linger).await;
                    forget();
                });
            }
            Err(_) => forget(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unguessable_shaped_and_parse_strictly() {
        let a = SessionId::random();
        assert_eq!(a.as_str().len(), 22);
        assert_ne!(a, SessionId::random());
        assert_eq!(SessionId::parse(a.as_str()), Some(a));
        assert_eq!(SessionId::parse("../../etc/passwd"), None);
        assert_eq!(SessionId::parse(""), None);
    }

    #[tokio::test]
    async fn a_guard_counts_live_and_its_drop_lingers_then_forgets() {
        let r = Arc::new(Registry::with_linger(Duration::from_millis(50)));
        let id = SessionId::random();
        let g = r.add(id.clone(), "c".into(), None);
        assert_eq!(r.live(), 1);
        g.entry.set_state("admitted", None);
        drop(g);
        assert_eq!(r.live(), 0);
        let e = r.get(&id).expect("lingers");
        assert_eq!(lock(&e.status).state, "ended");
        assert!(lock(&e.evidence).receipt_written);
        for _ in 0..100 {
            if r.get(&id).is_none() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("an ended session is forgotten after its linger");
    }

    #[test]
    fn a_terminal_state_is_not_rewritten() {
        let r = Arc::new(Registry::default());
        let g = r.add(SessionId::random(), "c".into(), None);
        g.entry.set_state("refused", Some("queue_full".into()));
        g.entry.set_state("ended", Some("other".into()));
        let s = lock(&g.entry.status).clone();
        assert_eq!(
            (s.state, s.end_reason.as_deref()),
            ("refused", Some("queue_full"))
        );
    }
}
