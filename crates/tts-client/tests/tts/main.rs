//! The TTS clients against the simulators and a fake server, one binary
//! with a module per area.

mod common;

mod cartesia;
mod limits;
mod reconnect;
mod streaming;
