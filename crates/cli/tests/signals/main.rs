//! `callgate serve` as an operator runs it: a real process, configured by a
//! file (or the container image's command line), reloaded by SIGHUP and
//! drained by SIGTERM — one test binary (each
//! links the server, the simulators and the load tool).
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

mod check;
mod demo_serve;
mod drain;
mod drill;
mod image;
mod knee;
mod owner;
mod reload;
mod stop;
