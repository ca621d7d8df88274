//! What a call writes about itself: lifecycle stages, transcript turns,
//! slots, raw events and the closing receipt — all through the write-behind
//! queue, never awaited by the call.

use std::time::{Duration, Instant, SystemTime};

use crate::call::core::TurnLatency;
use state_store::{CallId, CleanupStatus, OwnerEpoch, Speaker, Stage, Write, WriteBehind};

use crate::metrics as m;

/// Wall-clock timestamps derived from one monotonic clock, so a call's
/// lifecycle timestamps are ordered even if the system clock steps.
#[derive(Debug, Clone, Copy)]
pub struct CallClock {
    wall: SystemTime,
    mono: Instant,
}

impl CallClock {
    /// Anchors the clock: `mono` happened at `wall`.
    pub fn anchor(mono: Instant) -> Self {
        let wall = SystemTime::now()
            .checked_sub(mono.elapsed())
            .unwrap_or_else(SystemTime::now);
        CallClock { wall, mono }
    }

    /// The wall-clock time of a monotonic instant.
    pub fn at(&self, t: Instant) -> SystemTime {
        match t.checked_duration_since(self.mono) {
            Some(d) => self.wall + d,
            None => self.wall - self.mono.duration_since(t),
        }
    }
}

/// One call's writer. Submissions never wait; refused writes are counted.
pub struct Recorder {
    writes: WriteBehind,
    pub call: CallId,
    epoch: OwnerEpoch,
    pub clock: CallClock,
    turn_seq: u32,
    event_seq: u32,
    stages: u8,
    /// Writes the queue refused for this call (also counted by the store).
    pub lost: u64,
}

impl Recorder {
    pub fn new(writes: WriteBehind, call: CallId, epoch: OwnerEpoch, clock: CallClock) -> Self {
        Recorder {
            writes,
            call,
            epoch,
            clock,
            turn_seq: 0,
            event_seq: 0,
            stages: 0,
            lost: 0,
        }
    }

    fn submit(&mut self, w: Write) {
        if self.writes.submit(w).is_err() {
            self.lost += 1;
            metrics::counter!(m::WRITES_LOST).increment(1);
        }
    }

    /// Records a lifecycle stage; only its first occurrence counts.
    pub fn stage(&mut self, stage: Stage, at: Instant) {
        let bit = 1u8 << (stage as u8);
        if self.stages & bit != 0 {
            return;
        }
        self.stages |= bit;
        let w = Write::Lifecycle {
            call: self.call,
            epoch: self.epoch,
            stage,
            at: self.clock.at(at),
        };
        self.submit(w);
    }

    /// Records a transcript turn.
    pub fn turn(
        &mut self,
        speaker: Speaker,
        text: &str,
        span: (Instant, Instant),
        interrupted: bool,
        latency: Option<TurnLatency>,
    ) {
        self.turn_seq += 1;
        let w = Write::Turn {
            call: self.call,
            epoch: self.epoch,
            seq: self.turn_seq,
            speaker,
            text: text.to_string(),
            started_at: self.clock.at(span.0),
            ended_at: self.clock.at(span.1),
            interrupted,
            latency: latency.and_then(|l| serde_json::to_value(l).ok()),
        };
        self.submit(w);
    }

    /// Records a raw lifecycle event.
    pub fn event(&mut self, kind: &str, detail: serde_json::Value, at: Instant) {
        self.event_seq += 1;
        let w = Write::Event {
            call: self.call,
            epoch: self.epoch,
            seq: self.event_seq,
            kind: kind.to_string(),
            detail,
            at: self.clock.at(at),
        };
        self.submit(w);
    }

    pub fn slot(&mut self, name: &str, value: &str, at: Instant) {
        let w = Write::Slot {
            call: self.call,
            epoch: self.epoch,
            name: name.to_string(),
            value: value.to_string(),
            at: self.clock.at(at),
        };
        self.submit(w);
    }

    pub fn escalation(&mut self, reason: &str, at: Instant) {
        let w = Write::Escalation {
            call: self.call,
            epoch: self.epoch,
            reason: reason.to_string(),
            at: self.clock.at(at),
        };
        self.submit(w);
    }

    /// The closing receipt: end reason, cleanup status and the call's counters.
    pub fn close(
        &mut self,
        end_reason: &str,
        status: CleanupStatus,
        at: Instant,
        stats: serde_json::Value,
    ) {
        metrics::counter!(m::CLEANUPS, "status" => status.as_str()).increment(1);
        let w = Write::Close {
            call: self.call,
            epoch: self.epoch,
            end_reason: end_reason.to_string(),
            cleanup_status: status,
            cleanup_completed_at: self.clock.at(at),
            stats,
        };
        self.submit(w);
    }
}

/// Milliseconds of a duration, for JSON details.
pub fn millis(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_is_monotonic_and_anchored() {
        let t0 = Instant::now();
        let c = CallClock::anchor(t0);
        let a = c.at(t0);
        let b = c.at(t0 + Duration::from_millis(250));
        assert_eq!(b.duration_since(a).unwrap(), Duration::from_millis(250));
        let drift = SystemTime::now().duration_since(a).unwrap_or_default();
        assert!(drift < Duration::from_secs(1));
    }
}
