//! `state-store` — everything callgate keeps in Postgres: the connection
//! pool, the migration runner, the per-call ledger and state, owner fencing,
//! and the write-behind queue that keeps the call actor from ever awaiting
//! the database mid-call.
//!
//! What it never does: hold a pooled connection for a call's lifetime or
//! across unrelated awaits (the incident this crate exists to prevent),
//! block a submitter, or wait without a deadline. Setup-time calls
//! (`open_call`, `record_rejection`) check one connection out for one
//! statement, bounded by `checkout_timeout` + `connect_timeout` and the
//! statement deadline. Per-turn writes are fire-and-forget into bounded
//! per-shard queues served by writer tasks that check a connection out per
//! batch and return it at once. A connection whose user was cancelled
//! mid-statement is discarded (and its statement cancelled on the server),
//! never returned to the pool in an unknown state.
//!
//! Every write carries the call's owner epoch; Postgres applies it only
//! when the ledger still holds that epoch, so an instance that lost a call
//! to a take-over cannot write to it (`fenced`). Writes are idempotent
//! (turns/events keyed by sequence number, lifecycle stamps first-write-
//! wins), so retries are safe.
//!
//! Heartbeats, the reconciler's reads and refused-call records use a
//! separate control pool of [`CONTROL_POOL_SIZE`] connections, so a call
//! pool exhausted by setups or a write backlog cannot let the lease lapse.
//!
//! Owner liveness ([`ownership`]): each instance beats in
//! `instance_heartbeats`; a live instance closes the open rows of an owner
//! whose beat is older than the lease (`owner_lost`), and an instance
//! starting closes the rows its name owned before (`instance_restart`),
//! each with an epoch bump and a cleanup receipt.
//!
//! Migrations are a small ordered runner rather than refinery: one less
//! dependency tree, sha256 checksums that refuse an edited migration, and a
//! `pg_advisory_xact_lock` so instances starting together apply each
//! migration once.
//!
//! How to drive it:
//!
//! ```no_run
//! use std::time::{Duration, SystemTime};
//! use state_store::*;
//!
//! # async fn demo() -> Result<(), StoreError> {
//! let store = Store::connect(StoreConfig::new("host=/run/postgresql user=postgres", "cg-1")).await?;
//! store.migrate().await?;
//! let (writes, writers) = WriteBehind::start(&store, WriteBehindConfig::default());
//!
//! // At admission (bounded, awaited once):
//! let call = CallId::new_random();
//! let epoch = store
//!     .open_call(NewCall {
//!         call_id: call,
//!         ingress: "twilio".into(),
//!         carrier_call_id: None,
//!         partner_id: None,
//!         admitted_at: SystemTime::now(),
//!         admission_wait: Duration::ZERO,
//!         stats: serde_json::json!({}),
//!     })
//!     .await?;
//!
//! // Mid-call (never awaits; a full queue is a counted loss, not a stall):
//! let now = SystemTime::now();
//! let _ = writes.submit(Write::Lifecycle { call, epoch, stage: Stage::MediaReady, at: now });
//! let _ = writes.submit(Write::Turn {
//!     call, epoch, seq: 0, speaker: Speaker::Caller, text: "hello".into(),
//!     started_at: now, ended_at: now, interrupted: false, latency: None,
//! });
//!
//! // Shutdown:
//! let report = writers.drain(Duration::from_secs(10)).await;
//! assert!(report.completed);
//! # Ok(()) }
//! ```
//!
//! For tests and local runs, [`LocalPostgres`] starts a throwaway cluster on
//! a unix socket from the system's PostgreSQL binaries;
//! [`LocalPostgres::freeze`] stops it whole with SIGSTOP (postmaster and
//! backends) until the returned [`Frozen`] guard is dropped.

pub mod audit;
mod config;
mod conn;
mod error;
mod freeze;
mod ids;
pub mod local;
mod migrate;
pub mod ownership;
mod reaper;
pub mod reconcile;
mod refused;
mod rows;
mod store;
mod write;
mod writebehind;

pub use config::StoreConfig;
pub use conn::PoolStatus;
pub use error::{ErrorSource, StoreError, WriteRejected};
pub use freeze::Frozen;
pub use ids::{CallId, CleanupStatus, OwnerEpoch, Speaker, Stage};
pub use local::{LocalOptions, LocalPostgres};
pub use ownership::{Beat, BootId, BootReport, PreviousBoot, ReclaimReason, Reclaimed};
pub use reconcile::{NewReconciliation, ReconciliationRow};
pub use rows::{
    CallOutcome, CallStateRow, EventRow, LedgerRow, NewCall, OutcomeTable, Rejection, SlotRow,
    TurnRow,
};
pub use store::{CONTROL_POOL_SIZE, Store};
pub use write::{Write, WriteOutcome};
pub use writebehind::{DrainReport, WriteBehind, WriteBehindConfig, WriteStats, WriterTasks};
