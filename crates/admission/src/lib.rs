//! `admission` — the one place in callgate that says no, early and loudly.
//!
//! What it is: the admission gate in front of every call. Capacity comes from the
//! four per-call resource ceilings (Postgres, STT, TTS, dialog) minus headroom, or
//! is pinned by the operator. An admitted call holds an RAII [`Permit`]; a call
//! that finds the gate full may wait in a bounded FIFO queue (length and time),
//! and every refusal is a typed [`Rejection`] that leads to the overflow path.
//! A partner (a tenant sending calls over a partner WebSocket) may have a
//! `max_concurrent_calls` quota inside the gate ([`GateConfig::partner_quotas`],
//! [`Gate::enqueue_for`]). Each permit keeps a [`PermitTally`] of the gate's
//! counter moves it caused, so a call's receipt states measured deltas. The
//! crate also owns drain state, dependency health marks, the counters, and the
//! committed-pressure score the load reports use.
//!
//! What it never does: I/O, spawning tasks, sleeping, or reading the clock. Every
//! method that needs time takes `now: Instant`; a waiting [`Ticket`] is a plain
//! `std` future woken by `std` wakers, so it runs under any executor and the
//! server owns the timers.
//!
//! How to drive it:
//!
//! ```
//! use std::time::{Duration, Instant};
//! use admission::{CapacitySetting, Ceilings, Decider, Gate, GateConfig, RejectReason};
//!
//! let now = Instant::now();
//! let cfg = GateConfig {
//!     capacity: CapacitySetting::Auto { headroom: 1 },
//!     ceilings: Ceilings { db_calls: Some(30), stt_sessions: Some(2), ..Ceilings::default() },
//!     queue_max: 1,
//!     queue_timeout: Duration::from_secs(4),
//!     ..GateConfig::default()
//! };
//! let gate = Gate::new(cfg, now);
//! assert_eq!(gate.capacity().decided_by, Decider::Stt); // "capacity 1 decided by stt"
//!
//! let permit = gate.try_admit(now).unwrap(); // moved into the call actor
//! let ticket = gate.enqueue(now).unwrap(); // second call waits; server times it
//! let third = gate.enqueue(now).unwrap_err(); // queue full: overflow path at once
//! assert_eq!(third.reason, RejectReason::QueueFull);
//!
//! let tally = permit.tally(); // outlives the permit, for the call's receipt
//! drop(permit); // hang-up: the slot passes to the waiter, FIFO
//! assert_eq!((tally.delta().increment, tally.delta().decrement), (1, 1));
//! let second = ticket.expire(now + Duration::from_secs(4)).unwrap(); // granted in the race
//! assert_eq!(second.id().get(), 2);
//! ```
//!
//! Partner quotas, checked after drain and dependency health and before
//! capacity:
//!
//! ```
//! # use std::collections::BTreeMap;
//! # use std::time::{Duration, Instant};
//! # use admission::{CapacitySetting, Ceilings, Gate, GateConfig, PartnerId, RejectReason};
//! let (a, b) = (PartnerId::new("acme"), PartnerId::new("globex"));
//! let cfg = GateConfig {
//!     capacity: CapacitySetting::Pinned(10),
//!     ceilings: Ceilings::default(),
//!     queue_max: 4,
//!     queue_timeout: Duration::from_secs(4),
//!     partner_quotas: BTreeMap::from([(a.clone(), 1)]),
//!     ..GateConfig::default()
//! };
//! let now = Instant::now();
//! let gate = Gate::new(cfg, now);
//! let _a1 = gate.try_admit_for(Some(&a), now).unwrap();
//! let refused = gate.enqueue_for(Some(&a), now).unwrap_err(); // at once, not queued
//! assert_eq!(refused.reason, RejectReason::PartnerQuota);
//! let _b1 = gate.try_admit_for(Some(&b), now).unwrap(); // no quota entry: unlimited
//! ```
//!
//! In the server, an admission `select!`s between `&mut ticket` and a sleep until
//! `ticket.deadline()`; when the sleep wins it calls `ticket.expire(now)`, which
//! still returns the permit if the grant won the race. A permit is released by
//! dropping it (or `permit.release(now)` to stamp the next grant exactly).
//!
//! # Invariants (each one is tested)
//!
//! - `active <= capacity` at the moment of every admission (a lowered capacity may
//!   leave `active` above it; admission then waits until `active` falls below).
//! - `active` never goes negative; `admitted_total - released_total == active`.
//! - A permit releases its slot exactly once, on every exit path including a
//!   panic unwind; its [`PermitTally`] then reads `{1, 1}`, and a leaked
//!   (forgotten) permit reads `{1, 0}`.
//! - A partner's calls in the gate (admitted, granted or queued) never exceed its
//!   quota at the moment one is let in; the count goes down exactly once per
//!   call, when its permit is released or its ticket is dropped, expired or
//!   rejected. A lowered quota ends no call.
//! - Every admission checks in this order: draining, dependency down, partner
//!   quota, then capacity and the queue.
//! - Waiters are granted in FIFO order; `try_admit` never jumps the queue.
//! - Nothing is admitted after `start_drain`; a grant its ticket has not yet
//!   collected is taken back, so no permit appears after the drain starts.
//! - Capacity is never lost: a ticket cancelled or expired after its grant passes
//!   the slot on.
//! - Every wait has a deadline (`queue_timeout`, capped at [`MAX_QUEUE_TIMEOUT`]),
//!   and every queue is bounded (`queue_max`).

mod capacity;
mod error;
mod gate;
mod instance;
mod lag;
mod partner;
mod permit;
mod pressure;
mod snapshot;
mod state;
mod tally;
mod ticket;

pub use capacity::{Capacity, CapacitySetting, Ceilings, Decider};
pub use error::{Dependency, ErrorSource, RejectReason, Rejection};
pub use gate::{Gate, GateConfig};
pub use instance::{InstanceCeiling, InstanceConfig, InstanceState, InstanceView, MIN_SAMPLES};
pub use lag::{LAG_BUCKETS, LagHistogram};
pub use partner::{PartnerId, PartnerLoad};
pub use permit::{Permit, PermitId};
pub use pressure::{PressureWeights, pressure, utilization};
pub use snapshot::{GateSnapshot, RejectCounts};
pub use state::MAX_QUEUE_TIMEOUT;
pub use tally::{CounterDelta, PermitTally};
pub use ticket::Ticket;
