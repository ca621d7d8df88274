//! The real peers callgate is tested and measured against, each started on
//! loopback and bounded in time (feature `peers`; the product binary
//! builds without it): [`sipp`] (SIPp 3.6.1, the SIP tests' callers and
//! `callgate-bench sip`'s load), [`kamailio`] (the production
//! `deploy/kamailio` configuration in front of callgate) and [`chromium`]
//! (headless Chromium over the DevTools protocol, the WebRTC tests'
//! caller). They run on [`crate::process`], as [`crate::haproxy`] does.

pub mod chromium;
pub mod kamailio;
pub mod sipp;
