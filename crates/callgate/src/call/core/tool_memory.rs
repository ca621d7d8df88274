//! Tool calls this call already ran, so a dialog stream resumed after a
//! drop (which re-sends the unanswered turn) cannot make callgate run a
//! tool twice: the service keeps the call's ids on a retried turn
//! (`proto/dialog.proto`), and a repeated id gets the first result again.
//!
//! Bound: the last [`KEPT`] results per call; an older id repeated after
//! that many later tool calls runs again (a conversation that long has
//! moved on from it).

use std::collections::{HashMap, VecDeque};

use dialog_grpc::ToolCallId;

/// Tool results kept per call.
pub const KEPT: usize = 64;

/// Results of finished tool calls, oldest evicted first.
#[derive(Debug, Default)]
pub struct ToolMemory {
    results: HashMap<ToolCallId, (String, bool)>,
    order: VecDeque<ToolCallId>,
}

impl ToolMemory {
    /// Remembers the result of `id`.
    pub fn finished(&mut self, id: ToolCallId, result_json: String, is_error: bool) {
        if self
            .results
            .insert(id.clone(), (result_json, is_error))
            .is_none()
        {
            self.order.push_back(id);
        }
        while self.order.len() > KEPT {
            if let Some(old) = self.order.pop_front() {
                self.results.remove(&old);
            }
        }
    }

    /// The result `id` already had, if it ran.
    pub fn result(&self, id: &ToolCallId) -> Option<&(String, bool)> {
        self.results.get(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_kept_up_to_the_bound_oldest_first_out() {
        let mut m = ToolMemory::default();
        for n in 0..=KEPT {
            m.finished(ToolCallId(format!("t{n}")), format!("{{\"n\":{n}}}"), false);
        }
        assert!(m.result(&ToolCallId("t0".into())).is_none());
        assert_eq!(
            m.result(&ToolCallId("t1".into())),
            Some(&("{\"n\":1}".to_string(), false))
        );
        assert_eq!(m.results.len(), KEPT);
    }
}
