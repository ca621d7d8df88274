//! The end-to-end suite, one test binary: each module is one area (a file
//! per area, as before), and they share a binary because each binary links
//! the whole server and the simulators, which on a small CI machine costs
//! more than the tests themselves. nextest still runs every test in its own
//! process, so no test sees another's globals. Run one area with
//! `cargo nextest run -p callgate-tests -E 'test(/^sip_calls::/)'`.

mod audit;
mod bad_input;
mod barge_in;
mod barge_in_measured;
mod chromium_smoke;
mod close_handshake;
mod conversation;
mod cough;
mod counters;
mod db_freeze;
mod db_stall;
mod drill;
mod haproxy;
mod instance_ceiling;
mod interleavings;
mod kubernetes;
mod one_call;
mod operations;
mod overload;
mod partner;
mod partner_bad_input;
mod prometheus;
mod receipts;
mod reconnect;
mod reload_mid_call;
mod resume;
mod retention;
mod sessions;
mod setup_failure;
mod signature;
mod sip_calls;
mod sip_kamailio;
mod sip_overload;
mod sip_scenarios;
mod sip_torture;
mod stt_bad_days;
mod tools;
mod tts_bad_days;
mod twilio_webhook;
mod watchdog;
mod webrtc;
mod webrtc_aiortc;
mod webrtc_bad_input;
mod webrtc_dtls;
