//! The instance's lateness against the 20 ms media clock: the gate's fifth
//! input (`admission::InstanceCeiling`).
//!
//! Two sources record into one [`LagMeter`]: a 20 ms ticker on the runtime
//! the calls run on (scheduler lag: what every call's next wake-up suffers),
//! and each call actor's timer, which fires at the pacer's frame deadlines
//! and the watchdog's (what a speaking call feels). Recording is a relaxed
//! atomic add into fixed buckets; every [`FEED_EVERY`] the ticker hands the
//! counts to the gate, which keeps the sliding window and decides. It never
//! blocks a call and allocates nothing per sample.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use admission::{Gate, InstanceState, InstanceView, LAG_BUCKETS, LagHistogram};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::metrics as m;

/// The media clock's period: the ticker asks to wake this often.
pub const TICK: Duration = Duration::from_millis(20);

/// How often the counts go to the gate (ten ticks): the controller's window
/// slides in slices of a tenth of `admission.lag_window_ms` anyway.
pub const FEED_EVERY: Duration = Duration::from_millis(200);

/// Lateness samples since the last feed, in the gate's buckets.
#[derive(Debug)]
pub struct LagMeter {
    counts: [AtomicU32; LAG_BUCKETS],
    /// The window's p99 was above `admission.max_lag_ms` (or, with the
    /// ceiling off, the 60 ms diagnosis bound) at the last feed:
    /// a stall now is the instance's fault before it is a provider's.
    over_bound: AtomicBool,
}

impl Default for LagMeter {
    fn default() -> Self {
        Self {
            counts: std::array::from_fn(|_| AtomicU32::new(0)),
            over_bound: AtomicBool::new(false),
        }
    }
}

impl LagMeter {
    /// One sample: a deadline fired `late` after it was due.
    pub fn record(&self, late: Duration) {
        self.counts[LagHistogram::bucket_of(late)].fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the instance's own lag was beyond the bound at the last feed.
    pub fn over_bound(&self) -> bool {
        self.over_bound.load(Ordering::Relaxed)
    }

    /// Takes the counts recorded since the last take.
    fn take(&self) -> LagHistogram {
        LagHistogram::from_counts(std::array::from_fn(|i| {
            self.counts[i].swap(0, Ordering::Relaxed)
        }))
    }

    /// Hands the samples to the gate and notes whether the lag is over the
    /// bound. Returns the gate's view.
    pub fn feed(&self, gate: &Gate, now: Instant) -> InstanceView {
        let view = gate.observe_lag(&self.take(), now);
        let bound = gate.instance_config().blame_bound();
        let over = view.p99.is_some_and(|p| p > bound);
        self.over_bound.store(over, Ordering::Relaxed);
        view
    }
}

/// The 20 ms ticker: records its own lateness, feeds the gate every
/// [`FEED_EVERY`], logs each change of the instance's state, until
/// `shutdown`.
///
/// Time is tokio's, so a test on a paused clock drives it.
pub async fn run(gate: Gate, meter: Arc<LagMeter>, shutdown: CancellationToken) {
    use tokio::time::Instant as Tokio;
    let mut last_feed = Tokio::now();
    let mut last = gate.snapshot().instance;
    loop {
        let due = Tokio::now() + TICK;
        tokio::select! {
            () = tokio::time::sleep_until(due) => {}
            () = shutdown.cancelled() => return,
        }
        let now = Tokio::now();
        record_tick(&meter, now.saturating_duration_since(due));
        if now.saturating_duration_since(last_feed) < FEED_EVERY {
            continue;
        }
        last_feed = now;
        let view = meter.feed(&gate, now.into_std());
        if view.state != last.state {
            log_change(&gate, &view);
        }
        export(&view);
        last = view;
    }
}

/// Most missed ticks one late wake-up stands for (10 s of them): bounds the
/// work after a very long stall.
const MAX_MISSED_TICKS: u32 = 500;

/// One wake-up `late` after it was due. A wake-up that came several periods
/// late stands for every tick the media clock missed meanwhile, each as late
/// as it was (`late`, `late − 20 ms`, …): a starved runtime wakes rarely,
/// and counting one sample per wake-up would let starvation thin out its
/// own evidence below the samples the p99 needs.
fn record_tick(meter: &LagMeter, late: Duration) {
    meter.record(late);
    let mut missed = late;
    for _ in 0..MAX_MISSED_TICKS {
        missed = missed.saturating_sub(TICK);
        if missed.is_zero() {
            break;
        }
        meter.record(missed);
    }
}

/// One line per change of state, with the numbers behind it.
fn log_change(gate: &Gate, view: &InstanceView) {
    let snap = gate.snapshot();
    let p99_ms = view.p99.map(|p| p.as_millis());
    let bound_ms = gate.instance_config().max_lag.as_millis();
    match view.state {
        InstanceState::Overloaded => warn!(
            p99_ms,
            bound_ms,
            active = snap.active,
            ceiling = view.ceiling,
            configured = snap.configured.calls,
            "instance overloaded: its 20 ms media clock runs late (p99 {p99_ms:?} ms over {bound_ms} ms); refusing new calls with instance_overloaded, admitted calls keep their slots"
        ),
        InstanceState::Recovering => info!(
            p99_ms,
            ceiling = view.ceiling,
            "instance lag recovered: admitting again up to the instance ceiling, raised each healthy window"
        ),
        InstanceState::Healthy => info!(
            p99_ms,
            capacity = snap.capacity,
            "instance ceiling lifted: capacity is the configured one again"
        ),
    }
}

fn export(view: &InstanceView) {
    let p99 = view.p99.map_or(0.0, |p| p.as_secs_f64());
    metrics::gauge!(m::INSTANCE_LAG_P99).set(p99);
    for state in [
        InstanceState::Healthy,
        InstanceState::Overloaded,
        InstanceState::Recovering,
    ] {
        let on = if state == view.state { 1.0 } else { 0.0 };
        metrics::gauge!(m::INSTANCE_STATE, "state" => state.as_str()).set(on);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use admission::{CapacitySetting, GateConfig, InstanceConfig};

    fn gate() -> Gate {
        Gate::new(
            GateConfig {
                capacity: CapacitySetting::Pinned(10),
                instance: InstanceConfig {
                    max_lag: Duration::from_millis(25),
                    window: Duration::from_secs(2),
                },
                ..GateConfig::default()
            },
            Instant::now(),
        )
    }

    #[test]
    fn samples_are_taken_once_and_late_ones_mark_the_instance_over_its_bound() {
        let (meter, gate) = (LagMeter::default(), gate());
        let t0 = Instant::now();
        for _ in 0..30 {
            meter.record(Duration::from_millis(2));
        }
        assert_eq!(meter.feed(&gate, t0).samples, 30);
        assert!(!meter.over_bound());
        // Taken: a second feed adds nothing.
        assert_eq!(meter.feed(&gate, t0).samples, 30);
        for _ in 0..30 {
            meter.record(Duration::from_millis(70));
        }
        let view = meter.feed(&gate, t0 + Duration::from_millis(200));
        assert_eq!(view.state, InstanceState::Overloaded);
        assert!(meter.over_bound());
    }

    #[test]
    fn a_wake_up_several_ticks_late_stands_for_every_tick_it_missed() {
        let (meter, gate) = (LagMeter::default(), gate());
        record_tick(&meter, Duration::from_millis(70));
        // 70, 50, 30, 10 ms late: four ticks' worth.
        let view = meter.feed(&gate, Instant::now());
        assert_eq!(view.samples, 4);
        record_tick(&meter, Duration::from_millis(5));
        assert_eq!(meter.feed(&gate, Instant::now()).samples, 5);
        record_tick(&meter, Duration::from_secs(3_600));
        let bounded = meter.feed(&gate, Instant::now()).samples;
        assert_eq!(bounded, 5 + 1 + u64::from(MAX_MISSED_TICKS));
    }

    #[tokio::test]
    async fn the_ticker_feeds_the_gate_and_stops_on_shutdown() {
        let (meter, gate) = (Arc::new(LagMeter::default()), gate());
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(gate.clone(), Arc::clone(&meter), stop.clone()));
        // No timing claim: wait (bounded) until the ticker has fed enough
        // samples for a p99, however slow the machine.
        let deadline = Instant::now() + Duration::from_secs(60);
        while gate.snapshot().instance.p99.is_none() {
            assert!(Instant::now() < deadline, "the ticker never fed the gate");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(gate.snapshot().instance.samples >= admission::MIN_SAMPLES);
        stop.cancel();
        task.await.expect("the ticker ends cleanly");
    }
}
