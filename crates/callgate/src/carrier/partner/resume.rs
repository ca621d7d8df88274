//! Resume tokens for partner legs (`docs/partner-protocol.md`, "Resuming a
//! call"): the in-process registry that maps a token to the live call it
//! may re-attach to.
//!
//! Sans-IO and clock-free: every method that decides takes `now`. A token
//! is 256 random bits, URL-safe base64; the registry keeps only its SHA-256,
//! so neither a log line nor a heap dump of the registry holds a usable
//! token. A token is **single-use**: a successful [`ResumeRegistry::claim`]
//! holds it for that one connection (a second presenter meanwhile is told
//! "used"), and [`Claim::attach`] spends it when the upgraded socket is
//! handed to the call (its `started` carries a fresh token), so two
//! connections racing with one token cannot both attach. A claim dropped
//! without attaching — the HTTP upgrade failed after the check, the client
//! went away — gives the token back for a retry within the window.
//!
//! Ownership: a live entry belongs to the call through its [`TokenGuard`]
//! (held by the leg); dropping the guard — the call ended, or the token was
//! replaced — turns the entry into a tombstone, so a late presenter is told
//! "expired" or "used" rather than "unknown". Tombstones live for
//! [`TOMBSTONE_TTL`] and at most [`MAX_TOMBSTONES`] are kept (oldest
//! forgotten first: such a token then reads as unknown, still refused).
//! Live entries are bounded by [`MAX_LIVE`]: beyond it no token is issued
//! and that call is simply not resumable.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use admission::PartnerId;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use rand::Rng;
use sha2::{Digest, Sha256};
use state_store::CallId;
use tokio::sync::mpsc;

/// Live tokens at most: one per call, far above any instance's capacity.
pub const MAX_LIVE: usize = 65_536;
/// How long a spent token is still recognised as used or expired.
pub const TOMBSTONE_TTL: Duration = Duration::from_secs(600);
/// Spent tokens remembered at most (oldest forgotten first).
pub const MAX_TOMBSTONES: usize = 65_536;
/// Random bytes in a token (256 bits).
const TOKEN_BYTES: usize = 32;
/// Pending attaches per call. One is enough: only the current token can be
/// claimed, and the next token exists only after that attach was taken, so
/// a second attach is never in flight; a full queue cannot occur.
pub const ATTACH_QUEUE: usize = 1;

/// A resume token as handed to the partner. Its `Debug` shows only a prefix:
/// tokens are secrets and never logged whole.
#[derive(Clone, PartialEq, Eq)]
pub struct ResumeToken(String);

impl ResumeToken {
    fn random() -> Self {
        let mut bytes = [0u8; TOKEN_BYTES];
        rand::rng().fill(&mut bytes);
        ResumeToken(B64.encode(bytes))
    }

    /// The token text, for the `started` message only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ResumeToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ResumeToken({}…)", redacted(&self.0))
    }
}

/// The first 4 characters of a presented token, for logs.
pub fn redacted(token: &str) -> String {
    token.chars().take(4).collect()
}

/// The registry's key: SHA-256 of the token text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct TokenHash([u8; 32]);

impl TokenHash {
    fn of(token: &str) -> Self {
        TokenHash(Sha256::digest(token.as_bytes()).into())
    }
}

/// Why a presented token was refused. Each is a distinct reason on the
/// wire and a `result` label of `callgate_partner_resumes_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    #[error("resume token is not well formed")]
    Malformed,
    #[error("unknown resume token")]
    Unknown,
    #[error("resume token expired: its call has ended or its resume window has passed")]
    Expired,
    #[error("resume token already used")]
    Used,
    #[error("resume token belongs to another partner")]
    WrongPartner,
}

impl Refusal {
    pub const fn as_str(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::Unknown => "unknown",
            Refusal::Expired => "expired",
            Refusal::Used => "used",
            Refusal::WrongPartner => "wrong_partner",
        }
    }
}

/// Resume attempts that named one call, shared by its entries and its leg
/// (the receipt's `resume.attempts` / `refused`).
#[derive(Debug, Default)]
pub struct Attempts {
    pub presented: AtomicU64,
    pub refused: AtomicU64,
}

impl Attempts {
    fn note(&self, refused: bool) {
        self.presented.fetch_add(1, Ordering::Relaxed);
        if refused {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What a successful claim hands the resuming connection: the call, and
/// [`Claim::attach`] to send it the socket. Dropped without attaching, it
/// gives the token back.
#[must_use = "dropping the claim gives the token back"]
#[derive(Debug)]
pub struct Claim<A: Send + 'static> {
    pub session: CallId,
    attach: mpsc::Sender<A>,
    registry: Arc<ResumeRegistry<A>>,
    hash: TokenHash,
    /// Spent by `attach`; otherwise given back at drop.
    spent: bool,
}

impl<A: Send + 'static> Claim<A> {
    /// Spends the token and hands `socket` to the call; `Err` gives the
    /// socket back when the call ended meanwhile.
    ///
    /// # Errors
    /// The call is gone (its attach queue closed).
    pub fn attach(mut self, socket: A) -> Result<(), A> {
        self.spent = true;
        self.registry
            .lock()
            .spend(self.hash, Refusal::Used, Instant::now());
        self.attach.try_send(socket).map_err(|e| e.into_inner())
    }
}

impl<A: Send + 'static> Drop for Claim<A> {
    fn drop(&mut self) {
        if self.spent {
            return;
        }
        let mut inner = self.registry.lock();
        if let Some(Slot::Live { claimed, .. }) = inner.slots.get_mut(&self.hash) {
            *claimed = false;
        }
    }
}

#[derive(Debug)]
enum Slot<A> {
    Live {
        session: CallId,
        partner: PartnerId,
        attach: mpsc::Sender<A>,
        /// Set while the call's connection is detached: the window's end.
        expires: Option<Instant>,
        /// A connection holds a [`Claim`] on it and is being upgraded.
        claimed: bool,
        attempts: Arc<Attempts>,
    },
    Spent {
        why: Refusal,
        attempts: Arc<Attempts>,
    },
}

#[derive(Debug)]
struct Inner<A> {
    slots: HashMap<TokenHash, Slot<A>>,
    live: usize,
    /// Spent tokens in the order they were spent, with when to forget them.
    tombstones: VecDeque<(Instant, TokenHash)>,
}

/// The registry, one per server (`Carriers::partner_resumes`). `A` is what an attach
/// carries (the partner leg's new socket).
#[derive(Debug)]
pub struct ResumeRegistry<A> {
    inner: Mutex<Inner<A>>,
}

impl<A> Default for ResumeRegistry<A> {
    fn default() -> Self {
        ResumeRegistry {
            inner: Mutex::new(Inner {
                slots: HashMap::new(),
                live: 0,
                tombstones: VecDeque::new(),
            }),
        }
    }
}

/// A call's claim on its current token; dropping it retires the token.
#[must_use = "dropping the guard retires the token at once"]
#[derive(Debug)]
pub struct TokenGuard<A: Send + 'static> {
    registry: Arc<ResumeRegistry<A>>,
    hash: TokenHash,
}

impl<A: Send + 'static> ResumeRegistry<A> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<A>> {
        // The lock guards plain maps updated in single statements; a panic
        // elsewhere cannot leave them half-written.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh token for `session`, or `None` when [`MAX_LIVE`] tokens are
    /// live (the call is then not resumable).
    pub fn issue(
        self: &Arc<Self>,
        session: CallId,
        partner: PartnerId,
        attach: mpsc::Sender<A>,
        attempts: Arc<Attempts>,
    ) -> Option<(ResumeToken, TokenGuard<A>)> {
        let token = ResumeToken::random();
        let hash = TokenHash::of(token.expose());
        let mut inner = self.lock();
        if inner.live >= MAX_LIVE {
            return None;
        }
        let slot = Slot::Live {
            session,
            partner,
            attach,
            expires: None,
            claimed: false,
            attempts,
        };
        inner.slots.insert(hash, slot);
        inner.live += 1;
        let guard = TokenGuard {
            registry: Arc::clone(self),
            hash,
        };
        Some((token, guard))
    }

    /// Claims `token` for `partner` at `now`, for one connection: it is
    /// spent by [`Claim::attach`], given back if the claim is dropped. A
    /// token of another partner is refused without being touched (a
    /// stranger cannot burn it); one already claimed reads as used.
    pub fn claim(
        self: &Arc<Self>,
        token: &str,
        partner: &PartnerId,
        now: Instant,
    ) -> Result<Claim<A>, Refusal> {
        if !well_formed(token) {
            return Err(Refusal::Malformed);
        }
        let hash = TokenHash::of(token);
        let mut inner = self.lock();
        inner.forget_old(now);
        match inner.slots.get_mut(&hash) {
            None => Err(Refusal::Unknown),
            Some(Slot::Spent { why, attempts }) => {
                attempts.note(true);
                Err(*why)
            }
            Some(Slot::Live {
                partner: owner,
                attempts,
                ..
            }) if owner != partner => {
                attempts.note(true);
                Err(Refusal::WrongPartner)
            }
            Some(Slot::Live {
                claimed: true,
                attempts,
                ..
            }) => {
                attempts.note(true);
                Err(Refusal::Used)
            }
            Some(Slot::Live {
                expires, attempts, ..
            }) if expires.is_some_and(|e| now >= e) => {
                attempts.note(true);
                inner.spend(hash, Refusal::Expired, now);
                Err(Refusal::Expired)
            }
            Some(Slot::Live {
                session,
                attach,
                claimed,
                attempts,
                ..
            }) => {
                attempts.note(false);
                *claimed = true;
                Ok(Claim {
                    session: *session,
                    attach: attach.clone(),
                    registry: Arc::clone(self),
                    hash,
                    spent: false,
                })
            }
        }
    }

    /// Live tokens right now.
    pub fn live(&self) -> usize {
        self.lock().live
    }
}

impl<A> Inner<A> {
    /// Turns a live entry into a tombstone saying `why`.
    fn spend(&mut self, hash: TokenHash, why: Refusal, now: Instant) {
        let Some(slot) = self.slots.get_mut(&hash) else {
            return;
        };
        let Slot::Live { attempts, .. } = slot else {
            return;
        };
        let attempts = Arc::clone(attempts);
        *slot = Slot::Spent { why, attempts };
        self.live -= 1;
        self.tombstones.push_back((now + TOMBSTONE_TTL, hash));
        while self.tombstones.len() > MAX_TOMBSTONES {
            self.forget_front();
        }
    }

    fn forget_old(&mut self, now: Instant) {
        while self
            .tombstones
            .front()
            .is_some_and(|(until, _)| *until <= now)
        {
            self.forget_front();
        }
    }

    fn forget_front(&mut self) {
        if let Some((_, hash)) = self.tombstones.pop_front()
            && matches!(self.slots.get(&hash), Some(Slot::Spent { .. }))
        {
            self.slots.remove(&hash);
        }
    }
}

impl<A: Send + 'static> TokenGuard<A> {
    /// The call's connection dropped at some instant: the token may be
    /// claimed until `until` (the resume window's end), not after.
    pub fn detached(&self, until: Instant) {
        let mut inner = self.registry.lock();
        if let Some(Slot::Live { expires, .. }) = inner.slots.get_mut(&self.hash) {
            *expires = Some(until);
        }
    }

    /// A new connection was attached: no window runs any more.
    pub fn attached(&self) {
        let mut inner = self.registry.lock();
        if let Some(Slot::Live { expires, .. }) = inner.slots.get_mut(&self.hash) {
            *expires = None;
        }
    }
}

impl<A: Send + 'static> Drop for TokenGuard<A> {
    fn drop(&mut self) {
        // Retired at drop: an `Instant::now()` in a destructor is the one
        // clock read here, and only dates the tombstone's forgetting.
        self.registry
            .lock()
            .spend(self.hash, Refusal::Expired, Instant::now());
    }
}

/// Whether `token` looks like one of ours (43 URL-safe base64 characters);
/// anything else is refused before hashing.
fn well_formed(token: &str) -> bool {
    token.len() == 43
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    type Reg = Arc<ResumeRegistry<u32>>;

    fn issue(reg: &Reg, partner: &str) -> (ResumeToken, TokenGuard<u32>, mpsc::Receiver<u32>) {
        let (tx, rx) = mpsc::channel(ATTACH_QUEUE);
        let (token, guard) = reg
            .issue(
                CallId::new_random(),
                PartnerId::new(partner),
                tx,
                Arc::default(),
            )
            .unwrap();
        (token, guard, rx)
    }

    fn acme() -> PartnerId {
        PartnerId::new("acme")
    }

    #[test]
    fn a_token_is_claimed_once_then_reads_as_used() {
        let reg = Reg::default();
        let (token, _guard, mut rx) = issue(&reg, "acme");
        let t0 = Instant::now();
        let claim = reg.claim(token.expose(), &acme(), t0).unwrap();
        // While one connection is being upgraded, a second is refused.
        let racing = reg.claim(token.expose(), &acme(), t0);
        assert_eq!(racing.unwrap_err(), Refusal::Used);
        claim.attach(7).unwrap();
        assert_eq!(rx.try_recv().unwrap(), 7, "the claim reaches the call");
        let again = reg.claim(token.expose(), &acme(), t0);
        assert_eq!(again.unwrap_err(), Refusal::Used);
        assert_eq!(reg.live(), 0);
    }

    #[test]
    fn a_claim_dropped_before_its_attach_gives_the_token_back() {
        let reg = Reg::default();
        let (token, guard, mut rx) = issue(&reg, "acme");
        let t0 = Instant::now();
        guard.detached(t0 + Duration::from_secs(15));
        // The upgrade failed after the check: the claim is dropped.
        drop(reg.claim(token.expose(), &acme(), t0).unwrap());
        assert_eq!(reg.live(), 1, "still live");
        let retry = reg.claim(token.expose(), &acme(), t0 + Duration::from_secs(1));
        retry.unwrap().attach(9).unwrap();
        assert_eq!(rx.try_recv().unwrap(), 9);
        // Given back is not a longer window: it still ends on time.
        let (token, guard, _rx) = issue(&reg, "acme");
        guard.detached(t0 + Duration::from_secs(15));
        drop(reg.claim(token.expose(), &acme(), t0).unwrap());
        let late = reg.claim(token.expose(), &acme(), t0 + Duration::from_secs(15));
        assert_eq!(late.unwrap_err(), Refusal::Expired);
    }

    #[test]
    fn a_call_that_ends_while_claimed_refuses_the_attach_and_stays_expired() {
        let reg = Reg::default();
        let (token, guard, rx) = issue(&reg, "acme");
        let t0 = Instant::now();
        let claim = reg.claim(token.expose(), &acme(), t0).unwrap();
        drop((guard, rx)); // the call ended during the upgrade
        assert_eq!(claim.attach(3), Err(3), "the socket comes back");
        assert_eq!(
            reg.claim(token.expose(), &acme(), t0).unwrap_err(),
            Refusal::Expired
        );
        assert_eq!(reg.live(), 0);
    }

    #[test]
    fn another_partner_is_refused_and_does_not_burn_the_token() {
        let reg = Reg::default();
        let (token, _guard, _rx) = issue(&reg, "acme");
        let t0 = Instant::now();
        let other = PartnerId::new("globex");
        assert_eq!(
            reg.claim(token.expose(), &other, t0).unwrap_err(),
            Refusal::WrongPartner
        );
        assert!(reg.claim(token.expose(), &acme(), t0).is_ok());
    }

    #[test]
    fn a_detached_token_expires_at_the_end_of_its_window() {
        let reg = Reg::default();
        let (token, guard, _rx) = issue(&reg, "acme");
        let t0 = Instant::now();
        guard.detached(t0 + Duration::from_secs(15));
        let late = reg.claim(token.expose(), &acme(), t0 + Duration::from_secs(15));
        assert_eq!(late.unwrap_err(), Refusal::Expired);
        let (token, guard, _rx) = issue(&reg, "acme");
        guard.detached(t0 + Duration::from_secs(15));
        let in_time = reg.claim(token.expose(), &acme(), t0 + Duration::from_millis(14_999));
        assert!(in_time.is_ok());
    }

    #[test]
    fn a_call_that_ends_retires_its_token_as_expired_and_leaks_nothing() {
        let reg = Reg::default();
        let (token, guard, _rx) = issue(&reg, "acme");
        assert_eq!(reg.live(), 1);
        drop(guard);
        assert_eq!(reg.live(), 0);
        let t0 = Instant::now();
        assert_eq!(
            reg.claim(token.expose(), &acme(), t0).unwrap_err(),
            Refusal::Expired
        );
        // Tombstones are forgotten after their time: then it is unknown.
        let later = t0 + TOMBSTONE_TTL + Duration::from_secs(1);
        assert_eq!(
            reg.claim(token.expose(), &acme(), later).unwrap_err(),
            Refusal::Unknown
        );
        assert!(reg.lock().slots.is_empty(), "nothing left behind");
    }

    #[test]
    fn unknown_and_malformed_tokens_are_told_apart() {
        let reg = Reg::default();
        let t0 = Instant::now();
        let stranger = ResumeToken::random();
        assert_eq!(
            reg.claim(stranger.expose(), &acme(), t0).unwrap_err(),
            Refusal::Unknown
        );
        for bad in [
            "",
            "short",
            &"a".repeat(44),
            &format!("{}=", &"a".repeat(42)),
        ] {
            assert_eq!(
                reg.claim(bad, &acme(), t0).unwrap_err(),
                Refusal::Malformed,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn attempts_on_a_calls_tokens_are_counted_for_its_receipt() {
        let reg = Reg::default();
        let (tx, _rx) = mpsc::channel(ATTACH_QUEUE);
        let attempts = Arc::new(Attempts::default());
        let (token, _guard) = reg
            .issue(CallId::new_random(), acme(), tx, Arc::clone(&attempts))
            .unwrap();
        let t0 = Instant::now();
        let _ = reg.claim(token.expose(), &PartnerId::new("globex"), t0);
        let held = reg.claim(token.expose(), &acme(), t0);
        let _ = reg.claim(token.expose(), &acme(), t0);
        drop(held);
        assert_eq!(attempts.presented.load(Ordering::Relaxed), 3);
        assert_eq!(attempts.refused.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn tokens_are_url_safe_random_and_never_shown_whole() {
        let a = ResumeToken::random();
        let b = ResumeToken::random();
        assert_ne!(a, b);
        assert!(well_formed(a.expose()), "{}", a.expose());
        let shown = format!("{a:?}");
        assert!(!shown.contains(a.expose()), "{shown}");
    }
}
