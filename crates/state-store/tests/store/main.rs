//! The state store's integration tests against real throwaway Postgres
//! clusters, one binary (one link of tokio-postgres and the store): a module
//! per area. nextest runs each test in its own process.

mod common;

mod audit;
mod drain;
mod fencing;
mod freeze;
mod local_postgres;
mod lookup;
mod migrations;
mod overflow;
mod ownership;
mod pool;
mod reconcile;
mod retention;
mod setup_calls;
mod stall;
mod write_order;
