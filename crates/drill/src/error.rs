//! What can stop a drill, each naming what it was about.

/// A drill could not be run, signed or verified.
#[derive(Debug, thiserror::Error)]
pub enum DrillError {
    /// The fixture does not parse or a value is unusable.
    #[error("fixture: {0}")]
    Fixture(String),
    /// An instance did not answer as the drill needs (`url`: its admin base).
    #[error("instance {url}: {what}")]
    Instance { url: String, what: String },
    /// The signing key could not be read or written.
    #[error("signing key {path}: {what}")]
    Key { path: String, what: String },
    /// The receipt (or the output folder) could not be written or read.
    #[error("receipt: {0}")]
    Receipt(String),
}

impl DrillError {
    pub(crate) fn instance(url: &str, what: impl std::fmt::Display) -> DrillError {
        DrillError::Instance {
            url: url.to_string(),
            what: what.to_string(),
        }
    }
}
