//! What the reconciler's last tick saw, kept for `/admin/status`: the
//! counters with their ages and the open divergences, and the last few
//! receipts it wrote.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{Value, json};

use super::reconciler::Tick;

/// Receipts kept in memory for `/admin/status` (the table has them all).
const RECENT_RECEIPTS: usize = 8;

/// What the last tick saw, for `/admin/status`.
#[derive(Debug, Default)]
pub struct Latest {
    inner: Mutex<LatestInner>,
}

#[derive(Debug, Default)]
struct LatestInner {
    tick: Option<Tick>,
    receipts: VecDeque<Value>,
}

impl Latest {
    pub(super) fn set(&self, tick: Tick) {
        self.lock().tick = Some(tick);
    }

    pub(super) fn receipt(&self, summary: Value) {
        let mut g = self.lock();
        if g.receipts.len() == RECENT_RECEIPTS {
            g.receipts.pop_front();
        }
        g.receipts.push_back(summary);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LatestInner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The counters and divergences as JSON, ages measured at `now`:
    /// unknown counters are `null` with `"known": false`.
    pub fn to_json(&self, now: Instant) -> Value {
        let g = self.lock();
        let Some(tick) = &g.tick else {
            return json!({ "observed": false, "recent_receipts": [] });
        };
        let since_tick = now.saturating_duration_since(tick.at);
        let counters: serde_json::Map<String, Value> = tick
            .counters
            .iter()
            .map(|c| {
                let age = c.age.map(|a| (a + since_tick).as_secs_f64());
                let v = json!({ "value": c.value, "known": c.value.is_some(), "age_s": age });
                (c.counter.label().to_owned(), v)
            })
            .collect();
        let divergences: Vec<Value> = tick
            .divergences
            .iter()
            .map(|d| {
                let age = d
                    .since
                    .map(|s| now.saturating_duration_since(s).as_secs_f64());
                json!({
                    "direction": d.direction.label(),
                    "sessions": d.sessions,
                    "known": d.sessions.is_some(),
                    "age_s": age,
                })
            })
            .collect();
        json!({
            "observed": true,
            "observed_s_ago": since_tick.as_secs_f64(),
            "counters": counters,
            "divergences": divergences,
            "recent_receipts": g.receipts.iter().collect::<Vec<_>>(),
        })
    }
}
