//! The admission gate's scenario tests, one binary with a module per area.

mod common;

mod capacity;
mod lifecycle;
mod partner_races;
mod partners;
mod queue;
mod races;
mod stress;
mod tally;
