//! The drain's state, sans-IO: the [`Order`] every call watches, the
//! [`Plan`] of one drain (its origin, policy and deadline, `now` passed
//! in), and [`Drain`], the process-wide holder of both. The procedures
//! that act on them — close the gate, record the drain, wait for the
//! calls — are the parent module's.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::config::DrainPolicy;

/// What every call is told to do about the drain. Calls watch it
/// (`Drain::orders`); a call set up after an order still sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// No drain, or a `finish` drain: run on.
    Serve,
    /// A `transfer` drain: hand over at the next turn boundary.
    Transfer,
    /// The deadline passed: goodbye, then `drain_deadline`.
    Deadline,
}

/// Who started the drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `POST /admin/drain`: [`undrain`] may cancel it.
    Admin,
    /// `SIGTERM`/`SIGINT`: the process is shutting down; it cannot be
    /// cancelled.
    Signal,
}

impl Origin {
    pub const fn as_str(self) -> &'static str {
        match self {
            Origin::Admin => "admin",
            Origin::Signal => "signal",
        }
    }
}

/// The timing of one drain (sans-IO).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub origin: Origin,
    pub policy: DrainPolicy,
    pub started: Instant,
    pub deadline: Instant,
    /// The deadline has passed and the remaining calls were told so.
    pub expired: bool,
}

impl Plan {
    pub fn new(origin: Origin, policy: DrainPolicy, now: Instant, deadline: Duration) -> Self {
        Plan {
            origin,
            policy,
            started: now,
            deadline: now + deadline,
            expired: false,
        }
    }

    /// A second signal: the deadline moves to `grace` from `now`, never
    /// later than it was. Returns whether it moved.
    pub fn shorten(&mut self, now: Instant, grace: Duration) -> bool {
        let sooner = now + grace;
        let moved = sooner < self.deadline;
        self.deadline = self.deadline.min(sooner);
        moved
    }

    /// Whether the deadline is due and not yet acted on; marks it acted on.
    pub fn expire(&mut self, now: Instant) -> bool {
        let due = !self.expired && now >= self.deadline;
        self.expired |= due;
        due
    }

    /// Why this drain cannot be cancelled, if it cannot.
    pub fn undrain_refusal(&self) -> Option<UndrainRefused> {
        match (self.origin, self.expired) {
            (Origin::Signal, _) => Some(UndrainRefused::ShuttingDown),
            (_, true) => Some(UndrainRefused::DeadlinePassed),
            (Origin::Admin, false) => None,
        }
    }
}

/// Why `POST /admin/undrain` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UndrainRefused {
    #[error("not draining")]
    NotDraining,
    #[error("the drain was started by a signal: the process is shutting down")]
    ShuttingDown,
    #[error("the drain deadline has passed: the remaining calls are already ending")]
    DeadlinePassed,
    #[error("the end of the drain could not be recorded in instance_events: {0}")]
    NotRecorded(&'static str),
}

/// The drain's process-wide state, on the app.
pub struct Drain {
    orders: watch::Sender<Order>,
    plan: Mutex<Option<Plan>>,
}

impl Default for Drain {
    fn default() -> Self {
        Drain {
            orders: watch::Sender::new(Order::Serve),
            plan: Mutex::new(None),
        }
    }
}

impl Drain {
    /// What calls are told; a new receiver sees the current order first.
    pub fn orders(&self) -> watch::Receiver<Order> {
        self.orders.subscribe()
    }

    /// The current drain, if any.
    pub fn plan(&self) -> Option<Plan> {
        *self.lock()
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Option<Plan>> {
        self.plan
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tells every call, once per change: a repeated order wakes nobody
    /// (a second `Deadline` would restart a goodbye).
    pub(super) fn order(&self, order: Order) {
        self.orders.send_if_modified(|current| {
            let changed = *current != order;
            *current = order;
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(origin: Origin) -> (Plan, Instant) {
        let t0 = Instant::now();
        (
            Plan::new(origin, DrainPolicy::Finish, t0, Duration::from_secs(300)),
            t0,
        )
    }

    #[test]
    fn a_second_signal_moves_the_deadline_to_the_grace_and_never_later() {
        let (mut p, t0) = plan(Origin::Signal);
        assert!(p.shorten(t0 + Duration::from_secs(5), Duration::from_secs(10)));
        assert_eq!(p.deadline, t0 + Duration::from_secs(15));
        // A third signal later would push it out again: it does not.
        assert!(!p.shorten(t0 + Duration::from_secs(12), Duration::from_secs(10)));
        assert_eq!(p.deadline, t0 + Duration::from_secs(15));
    }

    #[test]
    fn the_deadline_expires_once() {
        let (mut p, t0) = plan(Origin::Admin);
        assert!(!p.expire(t0 + Duration::from_secs(299)));
        assert!(p.expire(t0 + Duration::from_secs(300)));
        assert!(!p.expire(t0 + Duration::from_secs(301)), "acted on once");
    }

    #[test]
    fn only_an_admin_drain_before_its_deadline_can_be_cancelled() {
        let (mut admin, t0) = plan(Origin::Admin);
        assert_eq!(admin.undrain_refusal(), None);
        admin.expire(t0 + Duration::from_secs(300));
        assert_eq!(
            admin.undrain_refusal(),
            Some(UndrainRefused::DeadlinePassed)
        );
        let (signal, _) = plan(Origin::Signal);
        assert_eq!(signal.undrain_refusal(), Some(UndrainRefused::ShuttingDown));
    }
}
