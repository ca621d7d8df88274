//! The wait ticket: a runtime-agnostic future for a place in the FIFO queue.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use crate::error::Rejection;
use crate::gate::Shared;
use crate::permit::{Permit, PermitId};
use crate::state::{Lookup, Resolution};

enum Stage {
    /// Admitted at enqueue time; the permit is already held.
    Granted(Permit),
    /// In the queue, or resolved by the gate and not yet collected.
    Waiting,
    /// The outcome was handed out (by `poll` or `expire`).
    Finished,
}

/// A place in the admission queue. Await it for `Ok(Permit)` or a
/// [`Rejection`] (`Draining`, `DependencyDown`, `QueueTimeout`).
///
/// The ticket does not time itself out: the library reads no clock. Start a
/// timer for [`Ticket::deadline`] and call [`Ticket::expire`] when it fires (or
/// call [`crate::Gate::expire_due`] from one shared timer).
///
/// Dropping the ticket cancels the wait: it leaves the queue, and if a slot had
/// already been granted to it, the slot passes to the next waiter. Capacity is
/// never lost to a cancelled ticket.
#[must_use = "dropping a Ticket cancels the wait"]
pub struct Ticket {
    gate: Arc<Shared>,
    id: PermitId,
    deadline: Instant,
    stage: Stage,
}

impl Ticket {
    pub(crate) fn granted(gate: Arc<Shared>, permit: Permit, deadline: Instant) -> Self {
        Self {
            gate,
            id: permit.id(),
            deadline,
            stage: Stage::Granted(permit),
        }
    }

    pub(crate) fn queued(gate: Arc<Shared>, id: PermitId, deadline: Instant) -> Self {
        Self {
            gate,
            id,
            deadline,
            stage: Stage::Waiting,
        }
    }

    /// The id the permit will carry if granted.
    #[must_use]
    pub const fn id(&self) -> PermitId {
        self.id
    }

    /// Enqueue time plus the queue timeout: when the server should call
    /// [`Ticket::expire`].
    #[must_use]
    pub const fn deadline(&self) -> Instant {
        self.deadline
    }

    /// True when the ticket already holds its permit (admitted at enqueue, no
    /// wait).
    #[must_use]
    pub const fn is_granted(&self) -> bool {
        matches!(self.stage, Stage::Granted(_))
    }

    /// The server's timer fired: give up waiting.
    ///
    /// Returns the permit if it was granted before the timer won the race (or at
    /// enqueue). Calling it before the deadline gives up early, the same way.
    ///
    /// # Errors
    /// `QueueTimeout` with the time waited, or the rejection the gate had already
    /// decided (`Draining`, `DependencyDown`, an earlier `QueueTimeout`).
    pub fn expire(mut self, now: Instant) -> Result<Permit, Rejection> {
        match std::mem::replace(&mut self.stage, Stage::Finished) {
            Stage::Granted(permit) => Ok(permit),
            Stage::Waiting => {
                let resolution = self.gate.with(|s, _| {
                    s.expire_ticket(self.id, now)
                        .ok_or_else(|| s.internal_rejection())
                })?;
                self.outcome(resolution)
            }
            Stage::Finished => Err(self.gate.with(|s, _| s.internal_rejection())),
        }
    }

    fn outcome(&self, resolution: Resolution) -> Result<Permit, Rejection> {
        match resolution {
            Resolution::Granted(grant) => Ok(Permit::new(Arc::clone(&self.gate), grant)),
            Resolution::Rejected(rejection) => Err(rejection),
        }
    }
}

impl Future for Ticket {
    type Output = Result<Permit, Rejection>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match std::mem::replace(&mut this.stage, Stage::Finished) {
            Stage::Granted(permit) => Poll::Ready(Ok(permit)),
            Stage::Waiting => {
                let id = this.id;
                match this.gate.with(|s, _| s.poll_ticket(id, cx.waker())) {
                    Lookup::Waiting => {
                        this.stage = Stage::Waiting;
                        Poll::Pending
                    }
                    Lookup::Resolved(resolution) => Poll::Ready(this.outcome(resolution)),
                    Lookup::Missing => {
                        Poll::Ready(Err(this.gate.with(|s, _| s.internal_rejection())))
                    }
                }
            }
            // Polled after completion: fail loudly instead of hanging forever.
            Stage::Finished => Poll::Ready(Err(this.gate.with(|s, _| s.internal_rejection()))),
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // A `Granted` stage drops its permit right after this, which releases the
        // slot through the permit's own `Drop`.
        match self.stage {
            Stage::Waiting => {
                let id = self.id;
                self.gate.with(|s, wake| s.cancel_ticket(id, wake));
            }
            Stage::Granted(_) => self.gate.with(|s, _| s.count_unclaimed()),
            Stage::Finished => {}
        }
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stage = match self.stage {
            Stage::Granted(_) => "granted",
            Stage::Waiting => "waiting",
            Stage::Finished => "finished",
        };
        f.debug_struct("Ticket")
            .field("id", &self.id)
            .field("deadline", &self.deadline)
            .field("stage", &stage)
            .finish()
    }
}
