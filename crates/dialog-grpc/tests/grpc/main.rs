//! The dialog client against the dialog simulator over loopback gRPC, one
//! binary with a module per area.

mod common;

mod conversation;
mod limits;
