//! Newtype IDs that cross this crate's API: turn numbers and tool-call ids.

use std::fmt;

/// A dialog turn: 0 is the service's greeting, callgate numbers the caller's
/// turns 1, 2, 3 … Every reply event carries the turn it answers, so late
/// events of an interrupted turn can be recognised and dropped.
#[derive(Copy, Clone, Eq, PartialEq, Hash, Debug, Ord, PartialOrd)]
pub struct TurnId(pub u64);

impl TurnId {
    /// The greeting turn the service produces after the session starts.
    pub const GREETING: TurnId = TurnId(0);

    /// The turn after this one.
    pub fn next(self) -> TurnId {
        TurnId(self.0.saturating_add(1))
    }
}

impl fmt::Display for TurnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The id of a tool call, unique within one dialog session; echoed back in
/// the result so the service can match it.
#[derive(Clone, Eq, PartialEq, Hash, Debug)]
pub struct ToolCallId(pub String);

impl fmt::Display for ToolCallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for ToolCallId {
    fn from(s: &str) -> Self {
        ToolCallId(s.to_owned())
    }
}
