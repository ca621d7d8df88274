//! `error-source` — who caused an error, as one classification that every
//! callgate crate's error type reports through its `source_kind()`.
//!
//! What it is: [`ErrorSource`], seen from the crate that raised the error:
//! the side it talks to on someone's behalf ([`ErrorSource::Provider`],
//! upstream), the side that asked it ([`ErrorSource::Caller`], downstream)
//! or itself ([`ErrorSource::Internal`]). The server's call actor reads it
//! to choose between a retry, a failover and an apology without matching
//! on messages.
//!
//! What it never does: decide a classification, carry an error or depend on
//! anything. Each crate keeps its own error type and maps its own variants
//! (its `source_kind()` says how, with tests); only the names are shared,
//! so the load generator and the server it measures agree on what a source
//! means without running any of each other's code.
//!
//! How to drive it: match on it.
//!
//! ```
//! use error_source::ErrorSource;
//!
//! fn response(source: ErrorSource) -> &'static str {
//!     match source {
//!         ErrorSource::Provider => "retry, then fail over",
//!         ErrorSource::Caller => "refuse: the same request fails again",
//!         ErrorSource::Internal => "apologise and log",
//!     }
//! }
//! assert_eq!(response(ErrorSource::Provider), "retry, then fail over");
//! ```

/// Where the cause of an error lies, from the side of the crate that
/// raised it.
///
/// Deliberately exhaustive: a fourth source would have to be placed in
/// every match that decides a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorSource {
    /// The service the crate talks to on its caller's behalf, or the network
    /// to it: the STT, TTS or dialog provider, Postgres for the state store,
    /// a provider marked down for admission, and for the load generator the
    /// server under test. Often worth a retry or a failover.
    Provider,
    /// Whoever asked for the work, or what they sent: the crate's
    /// configuration or use of its API (a refused key, a closed session),
    /// the phone caller's or partner's input (invalid DTMF), and for the load
    /// generator its configuration or command line. The same request fails
    /// again.
    Caller,
    /// The crate or its process itself: its own decision or state
    /// (admission's capacity, queue or drain), a resource it ran short of (a
    /// consumer that did not keep up, the local file system) or a bug.
    Internal,
}
