//! What the shell hands the core when a tool call finishes: the core owns
//! its inputs' types, so it depends on nothing in the shell around it.

use dialog_grpc::{ToolCallId, TurnId};

/// A finished tool call, ready to be sent back to the dialog service.
#[derive(Debug)]
pub struct ToolOutcome {
    pub id: ToolCallId,
    pub turn: TurnId,
    pub result_json: String,
    pub is_error: bool,
}
