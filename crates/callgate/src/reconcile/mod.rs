//! The three session counters and their reconciliation.
//!
//! What it is: `ledger_open_sessions` (open `call_ledger` rows owned by this
//! instance), `runtime_active_sessions` (the admission gate's permits) and
//! `routing_reported_sessions` (what the load balancer was last told, see
//! [`RoutingReport`]) are read on an interval by [`task`], compared by the
//! sans-IO [`reconciler::Reconciler`], and exported as metrics; a divergence
//! that outlives `[ledger].divergence_window_s` writes one reconciliation
//! receipt. [`pressure`] computes committed pressure for status and load
//! reports.
//!
//! What it never does: overwrite a counter to make the numbers agree, or
//! report a missing or stale reading as zero (it is "unknown").
//!
//! How to drive it: `server::start` spawns [`task::run`]; the HAProxy agent
//! calls [`RoutingReport::record`] after each answer; `/admin/status` reads
//! [`latest::Latest`] through `App::reconcile`. Each call holds a
//! [`LiveEntry`] in `CallServices::live`, so a receipt can name the calls involved.

pub mod latest;
pub mod live;
pub mod pressure;
pub mod reconciler;
pub mod routing;
pub mod task;

pub use live::{LiveCalls, LiveEntry};
pub use reconciler::{Counter, Direction, Reading, Reconciler, ReconcilerConfig};
pub use routing::RoutingReport;
