//! The admission gate's scenario tests, one binary with a module per area.

mod common;

mod capacity;
mod instance;
mod lifecycle;
mod partner_races;
mod partners;
mod queue;
mod races;
mod setups;
mod stress;
mod tally;
