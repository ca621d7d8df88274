//! Retransmission schedules of RFC 3261 §17, on a clock passed in.
//!
//! One [`Retransmit`] covers every case callgate has: a 2xx to an INVITE
//! resent until its ACK (§13.3.1.4), a non-2xx final resent until its ACK
//! (Timers G/H, §17.2.1), and a request of ours resent until a final
//! response (Timers E/F, §17.1.2.2). Over a reliable transport nothing is
//! resent; only the give-up deadline stays.

use std::time::{Duration, Instant};

/// The timer values (RFC 3261 §17.1.1.1 defaults: T1 500 ms, T2 4 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timers {
    pub t1: Duration,
    pub t2: Duration,
}

impl Default for Timers {
    fn default() -> Self {
        Timers {
            t1: Duration::from_millis(500),
            t2: Duration::from_secs(4),
        }
    }
}

impl Timers {
    /// How long a transaction lives before it gives up (64·T1).
    pub fn give_up(self) -> Duration {
        self.t1 * 64
    }
}

/// One message resent on a doubling interval (capped at T2) until it is
/// answered or the give-up deadline passes.
#[derive(Debug, Clone)]
pub struct Retransmit {
    pub bytes: Vec<u8>,
    next: Option<Instant>,
    interval: Duration,
    cap: Duration,
    pub deadline: Instant,
}

/// What a retransmission timer asks for at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    Nothing,
    Resend,
    GiveUp,
}

impl Retransmit {
    /// A schedule for `bytes` sent at `now`; `reliable` transports are
    /// never resent to.
    pub fn new(bytes: Vec<u8>, timers: Timers, reliable: bool, now: Instant) -> Retransmit {
        Retransmit {
            bytes,
            next: (!reliable).then(|| now + timers.t1),
            interval: timers.t1,
            cap: timers.t2,
            deadline: now + timers.give_up(),
        }
    }

    /// After a provisional response to our request, resends go at T2
    /// (§17.1.2.2).
    pub fn slow_down(&mut self, now: Instant) {
        if self.next.is_some() {
            self.interval = self.cap;
            self.next = Some(now + self.cap);
        }
    }

    /// When this schedule next needs attention.
    pub fn next_deadline(&self) -> Instant {
        self.next.map_or(self.deadline, |n| n.min(self.deadline))
    }

    /// Advances the schedule to `now`.
    pub fn poll(&mut self, now: Instant) -> Due {
        if now >= self.deadline {
            return Due::GiveUp;
        }
        match self.next {
            Some(at) if now >= at => {
                self.interval = (self.interval * 2).min(self.cap);
                self.next = Some(now + self.interval);
                Due::Resend
            }
            _ => Due::Nothing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_t2_then_gives_up_at_64_t1() {
        let t0 = Instant::now();
        let mut r = Retransmit::new(vec![1], Timers::default(), false, t0);
        let mut resends = Vec::new();
        let gave_up = loop {
            let t = r.next_deadline();
            match r.poll(t) {
                Due::Resend => resends.push(t.duration_since(t0).as_millis()),
                Due::GiveUp => break t,
                Due::Nothing => unreachable!("polled at its own deadline"),
            }
        };
        assert_eq!(&resends[..5], &[500, 1500, 3500, 7500, 11500]);
        assert_eq!(gave_up.duration_since(t0), Duration::from_secs(32));
    }

    #[test]
    fn reliable_transports_are_not_resent_to() {
        let t0 = Instant::now();
        let mut r = Retransmit::new(vec![1], Timers::default(), true, t0);
        assert_eq!(r.next_deadline(), t0 + Duration::from_secs(32));
        assert_eq!(r.poll(t0 + Duration::from_secs(5)), Due::Nothing);
        assert_eq!(r.poll(t0 + Duration::from_secs(32)), Due::GiveUp);
    }
}
