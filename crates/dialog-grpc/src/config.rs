//! Client configuration.

use std::time::Duration;

/// How to reach the dialog service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DialogConfig {
    /// `http://host:port` of the `callgate.dialog.v1.Dialog` service.
    pub endpoint: String,
    /// Bound on one TCP connect attempt.
    pub connect_timeout: Duration,
    /// Bound on opening one `Converse` stream: connecting (if needed), the
    /// HTTP/2 handshake, waiting for a free HTTP/2 stream slot and the
    /// service's response headers. Exceeding it is `DialogError::OpenTimeout`.
    pub open_timeout: Duration,
    /// HTTP/2 connections to spread streams over, round-robin. Servers cap
    /// concurrent streams per connection (often 100–200); streams beyond it
    /// queue invisibly inside the connection, so size this so that
    /// `channels × per-connection cap` exceeds the call capacity.
    pub channels: usize,
    /// How a stream that drops mid-call is reopened.
    pub reconnect: reconnect::ReconnectPolicy,
}

impl Default for DialogConfig {
    fn default() -> Self {
        DialogConfig {
            endpoint: "http://127.0.0.1:50051".to_owned(),
            connect_timeout: Duration::from_secs(2),
            open_timeout: Duration::from_secs(3),
            channels: 4,
            reconnect: reconnect::ReconnectPolicy::default(),
        }
    }
}
