//! The load callers against a loopback server, one binary with a module per
//! transport.

mod loopback;
mod partner_loopback;
