//! The `[drain]` section: what a drain does to the calls still running.

use serde::{Deserialize, Serialize};

/// What happens to live calls once a drain has closed admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DrainPolicy {
    /// Calls run on and end by themselves, until `deadline_s`.
    #[default]
    Finish,
    /// Each call is handed to the human path at its next turn boundary
    /// (after the bot's current reply, or at once when nobody is speaking),
    /// with the short "Let me transfer you" prompt.
    Transfer,
}

impl DrainPolicy {
    pub const fn as_str(self) -> &'static str {
        match self {
            DrainPolicy::Finish => "finish",
            DrainPolicy::Transfer => "transfer",
        }
    }
}

/// How a drain (`SIGTERM`, `SIGINT`, `POST /admin/drain`) ends.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DrainConfig {
    pub policy: DrainPolicy,
    /// From the start of the drain: calls still running then hear the
    /// goodbye prompt and end with `drain_deadline`.
    pub deadline_s: u64,
    /// A second `SIGTERM`/`SIGINT` during a drain moves the deadline to
    /// this long from then (never later than it was). Cleanup still runs.
    pub grace_s: u64,
}

impl Default for DrainConfig {
    fn default() -> Self {
        DrainConfig {
            policy: DrainPolicy::Finish,
            deadline_s: 300,
            grace_s: 10,
        }
    }
}

impl DrainConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.grace_s == 0 {
            return Err("drain.grace_s must be at least 1 (the goodbye needs time)".into());
        }
        if self.grace_s > self.deadline_s {
            return Err("drain.grace_s must not exceed drain.deadline_s".into());
        }
        Ok(())
    }
}
