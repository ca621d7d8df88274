//! HAProxy agent-check: what this instance tells the balancer about its
//! committed load (`docs/protocols.md` §4a, HAProxy configuration
//! manual §5.2 `agent-check`).
//!
//! What it is: [`reply`], a pure function from the drain flag and the
//! committed-pressure view to the one line HAProxy reads, and
//! [`responder`], the TCP listener on `[agent].listen` that writes that line
//! to every connection, then closes it. Each answer records the runtime
//! active count it was computed from as `routing_reported_sessions`
//! (`App::routing`).
//!
//! The line is `up ready <weight>% maxconn:<n>\n`, or `up drain
//! maxconn:<n>\n` / `up maint maxconn:<n>\n` (no weight: DRAIN and MAINT
//! already take the server out of rotation, and HAProxy 2.6 logs "remains
//! in forced drain mode" for every weight it is handed while in one, a
//! line per agent check for the whole drain):
//! * state: `drain` while draining, `maint` when capacity is 0, else `ready`
//!   (`ready` also cancels a DRAIN or MAINT this agent set earlier: only the
//!   agent can revert its own actions);
//! * weight: `round(100 · (1 − utilization(score, capacity)))` percent of the
//!   server's configured weight. HAProxy removes a server at 0 % (shown as
//!   DRAIN), so while free committed capacity remains the weight is at least
//!   1 %; with none left it is 0 % (and 0 in [`Reply`] while draining or
//!   in maint, where the line carries none). A score that is
//!   not a number counts as full;
//! * `maxconn`: HAProxy's `maxconn` is the absolute number of concurrent
//!   connections it sends the server, and 0 means *unlimited*. So it is the
//!   sessions held plus the free committed capacity
//!   (`active + capacity − ceil(score)`), never below 1, never above
//!   `i32::MAX` (HAProxy's type). Sessions that reach this instance another
//!   way (SIP, a second balancer) make it overstate what this balancer may
//!   add; the weight and callgate's own gate still bound that;
//! * `up`: we never report `down`, but say `up` so a server an operator's
//!   bogus agent once marked down comes back.
//!
//! What it never does: change admission (it reports, the gate decides),
//! read what HAProxy sends (`agent-send` is ignored), or keep a connection
//! open longer than `[agent].timeout_ms`.
//!
//! How to drive it: `server::start` calls [`responder::start`] when
//! `[agent].enabled`; `Running::agent_addr` is where it listens. By hand:
//! `nc 127.0.0.1 9777` prints one line.

pub mod responder;

use std::fmt;

use crate::reconcile::pressure::PressureView;

/// The administrative state reported to the balancer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminState {
    /// Takes new connections in proportion to its weight.
    Ready,
    /// Keeps its connections, takes no new ones (a drain is under way).
    Drain,
    /// Admits nothing: capacity is 0.
    Maint,
}

impl AdminState {
    /// The agent-check word, also the `state` label of
    /// `callgate_agent_checks_total`.
    pub fn word(self) -> &'static str {
        match self {
            AdminState::Ready => "ready",
            AdminState::Drain => "drain",
            AdminState::Maint => "maint",
        }
    }
}

/// One agent-check answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub state: AdminState,
    /// Percent of the server's configured weight, 0..=100.
    pub weight_pct: u8,
    /// HAProxy `maxconn` for the server, at least 1.
    pub maxconn: u32,
    /// The runtime active count the answer was computed from.
    pub sessions: u32,
}

impl fmt::Display for Reply {
    /// The line HAProxy reads, newline included.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.state {
            // No weight while HAProxy holds the server in DRAIN or MAINT:
            // it would log "remains in forced drain mode" for each one.
            AdminState::Drain | AdminState::Maint => {
                writeln!(f, "up {} maxconn:{}", self.state.word(), self.maxconn)
            }
            AdminState::Ready => {
                writeln!(f, "up ready {}% maxconn:{}", self.weight_pct, self.maxconn)
            }
        }
    }
}

/// Largest `maxconn` reported: HAProxy keeps it in a C `int`.
const MAXCONN_CAP: u32 = i32::MAX as u32;

/// The answer for this load (see the module documentation for the rules).
pub fn reply(draining: bool, view: &PressureView) -> Reply {
    let capacity = view.capacity;
    let free = free_capacity(view.score, capacity);
    let state = if draining {
        AdminState::Drain
    } else if capacity == 0 {
        AdminState::Maint
    } else {
        AdminState::Ready
    };
    let weight_pct = match state {
        AdminState::Ready if free > 0 => weight(view.score, capacity).max(1),
        _ => 0,
    };
    let open = if state == AdminState::Ready { free } else { 0 };
    let maxconn = view.active.saturating_add(open).clamp(1, MAXCONN_CAP);
    Reply {
        state,
        weight_pct,
        maxconn,
        sessions: view.active,
    }
}

/// `capacity − ceil(score)`, at least 0; a score that is not a number
/// leaves nothing free, a negative one counts as 0.
fn free_capacity(score: f64, capacity: u32) -> u32 {
    if score.is_nan() {
        return 0;
    }
    let used = score.max(0.0).ceil();
    if used >= f64::from(capacity) {
        0
    } else {
        // `used` is an integer in 0..capacity here, so the cast is exact.
        capacity - used as u32
    }
}

/// `round(100 · (1 − utilization))`, 0..=100.
fn weight(score: f64, capacity: u32) -> u8 {
    let free = 1.0 - admission::utilization(score, capacity);
    // utilization is clamped to 0..=1, so this is in 0..=100.
    (100.0 * free).round().clamp(0.0, 100.0) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(active: u32, score: f64, capacity: u32) -> PressureView {
        PressureView {
            active,
            speaking: 0,
            delegating: 0,
            recovering: 0,
            score,
            capacity,
            weights_version: 1,
        }
    }

    fn line(draining: bool, v: &PressureView) -> String {
        reply(draining, v).to_string()
    }

    #[test]
    fn an_idle_instance_is_ready_at_full_weight() {
        assert_eq!(line(false, &view(0, 0.0, 50)), "up ready 100% maxconn:50\n");
    }

    #[test]
    fn the_weight_is_the_free_share_and_maxconn_what_it_can_hold() {
        // 10 calls, 3 of them speaking at 0.5: score 11.5 of 50 → 77 %,
        // 50 − 12 = 38 free on top of the 10 held.
        let r = reply(false, &view(10, 11.5, 50));
        assert_eq!(r.to_string(), "up ready 77% maxconn:48\n");
        assert_eq!(r.sessions, 10);
        // 27 % used exactly.
        assert_eq!(
            line(false, &view(27, 27.0, 100)),
            "up ready 73% maxconn:100\n"
        );
    }

    #[test]
    fn a_nearly_full_instance_keeps_one_percent_while_a_slot_is_free() {
        // 996 of 1000: rounds to 0 %, but 4 slots are free.
        assert_eq!(
            line(false, &view(996, 996.0, 1000)),
            "up ready 1% maxconn:1000\n"
        );
    }

    #[test]
    fn a_full_instance_reports_zero_percent_and_no_room() {
        assert_eq!(line(false, &view(50, 50.0, 50)), "up ready 0% maxconn:50\n");
        // Committed above capacity (speaking calls): nothing free, and
        // maxconn stays at what it holds.
        assert_eq!(line(false, &view(48, 60.0, 50)), "up ready 0% maxconn:48\n");
        // A fractional score takes a whole slot.
        assert_eq!(line(false, &view(49, 49.5, 50)), "up ready 0% maxconn:49\n");
    }

    #[test]
    fn draining_is_drain_with_no_room_for_new_calls() {
        assert_eq!(line(true, &view(7, 7.0, 50)), "up drain maxconn:7\n");
        // Draining wins over capacity 0.
        assert_eq!(line(true, &view(2, 2.0, 0)), "up drain maxconn:2\n");
    }

    #[test]
    fn capacity_zero_is_maint() {
        assert_eq!(line(false, &view(3, 3.0, 0)), "up maint maxconn:3\n");
    }

    #[test]
    fn maxconn_is_never_zero_because_haproxy_reads_zero_as_unlimited() {
        assert_eq!(reply(true, &view(0, 0.0, 50)).maxconn, 1);
        assert_eq!(reply(false, &view(0, 0.0, 0)).maxconn, 1);
        assert_eq!(reply(false, &view(0, 5.0, 5)).maxconn, 1);
    }

    #[test]
    fn a_score_that_is_not_a_number_counts_as_full() {
        assert_eq!(
            line(false, &view(3, f64::NAN, 50)),
            "up ready 0% maxconn:3\n"
        );
        assert_eq!(
            line(false, &view(3, f64::INFINITY, 50)),
            "up ready 0% maxconn:3\n"
        );
    }

    #[test]
    fn a_negative_score_counts_as_idle() {
        assert_eq!(
            line(false, &view(0, -4.0, 50)),
            "up ready 100% maxconn:50\n"
        );
        assert_eq!(
            line(false, &view(0, f64::NEG_INFINITY, 50)),
            "up ready 100% maxconn:50\n"
        );
    }

    #[test]
    fn unlimited_capacity_caps_maxconn_at_haproxys_int() {
        let r = reply(false, &view(5, 5.0, u32::MAX));
        assert_eq!(r.weight_pct, 100);
        assert_eq!(r.maxconn, i32::MAX as u32);
    }

    #[test]
    fn the_line_is_one_line_of_known_tokens() {
        // HAProxy reads up to the first \r or \n; every token must be one
        // it knows (a word, `N%`, or `maxconn:N`).
        let text = line(false, &view(10, 11.5, 50));
        let body = text.strip_suffix('\n').expect("ends with a newline");
        assert!(!body.contains(['\r', '\n']));
        for tok in body.split(' ') {
            let known = matches!(tok, "up" | "ready" | "drain" | "maint")
                || tok
                    .strip_suffix('%')
                    .is_some_and(|n| n.parse::<u8>().is_ok_and(|n| n <= 100))
                || tok
                    .strip_prefix("maxconn:")
                    .is_some_and(|n| n.parse::<u32>().is_ok_and(|n| n >= 1));
            assert!(known, "unknown token {tok:?} in {text:?}");
        }
    }
}
