//! The instance ceiling: the gate's fifth input, the instance's own health.
//!
//! The four ceilings are the operator's numbers; none of them sees a
//! throttled pod, a noisy neighbour or a setup burst. What a voice call
//! needs from the instance is that its 20 ms media clock keeps time, so the
//! controller is fed how late the runtime's 20 ms ticker and the calls'
//! frame deadlines fired ([`LagHistogram`] slices), and answers with a
//! ceiling on calls. Pure: samples and `now` in, a state and a ceiling out.
//!
//! # Control law
//!
//! AIMD-shaped, chosen over a gradient controller because a call is not a
//! request: it holds its slot for minutes, so there is nothing to shed
//! quickly and every admission is a long commitment. Over a sliding window
//! (`window`, ten slices) the controller takes the p99 lateness:
//!
//! - **Healthy → Overloaded** when the p99 exceeds `max_lag` (with at least
//!   [`MIN_SAMPLES`] samples in the window): the ceiling drops to the
//!   fewest calls active during the window — what the instance held while
//!   its lag was still healthy — and the gate admits nothing while the lag
//!   stays above the bound. Calls already admitted keep their slots.
//! - **Overloaded**: the ceiling follows the active count down (calls that
//!   end are not replaced) as long as the p99 stays above the reopen bound.
//! - **Overloaded → Recovering** once the window's p99 is at or below the
//!   reopen bound, `max_lag / 2` (hysteresis: the whole window must be good).
//!   Admission reopens up to the ceiling.
//! - **Recovering**: every further healthy window raises the ceiling by a
//!   tenth (at least one call); a p99 above `max_lag` trips it again at the
//!   active count. When the ceiling reaches the configured capacity the
//!   controller is Healthy and the ceiling is gone.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::lag::LagHistogram;

/// Fewest samples in the window before the p99 is trusted (the runtime's
/// ticker alone gives 100 in a 2 s window).
pub const MIN_SAMPLES: u64 = 20;

/// Slices per window: the p99 slides in steps of a tenth of the window.
const SLICES: u32 = 10;

/// The quantile of lateness compared with the bound.
const QUANTILE: f64 = 0.99;

/// The instance ceiling's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstanceConfig {
    /// p99 lateness above which the instance stops admitting. Zero turns the
    /// instance ceiling off.
    pub max_lag: Duration,
    /// The window the p99 is taken over; also the hold before each step up.
    pub window: Duration,
}

impl InstanceConfig {
    /// No instance ceiling: the gate decides from the four ceilings alone.
    pub const OFF: Self = Self {
        max_lag: Duration::ZERO,
        window: Duration::from_secs(2),
    };

    /// The bound a stall is judged against when the ceiling is off: the
    /// pacer's default lead (60 ms of audio sent ahead), past which the
    /// carrier's buffer runs dry and the caller hears a gap.
    pub const DIAGNOSIS_BOUND: Duration = Duration::from_millis(60);

    /// The lateness beyond which a stall is the instance's: `max_lag` when
    /// the ceiling is on, [`InstanceConfig::DIAGNOSIS_BOUND`] otherwise.
    #[must_use]
    pub fn blame_bound(&self) -> Duration {
        if self.is_on() {
            self.max_lag
        } else {
            Self::DIAGNOSIS_BOUND
        }
    }

    /// True when the ceiling is in force.
    #[must_use]
    pub fn is_on(&self) -> bool {
        !self.max_lag.is_zero() && !self.window.is_zero()
    }

    /// Lag at or below which an overloaded instance reopens.
    #[must_use]
    pub fn reopen_lag(&self) -> Duration {
        self.max_lag / 2
    }
}

/// Where the controller stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceState {
    /// Lag within the bound and no ceiling.
    Healthy,
    /// Lag above the bound: nothing is admitted.
    Overloaded,
    /// Lag back under the reopen bound: admitting up to a ceiling that grows.
    Recovering,
}

impl InstanceState {
    /// A low-cardinality label for logs and metrics.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Overloaded => "overloaded",
            Self::Recovering => "recovering",
        }
    }
}

/// What the controller says at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstanceView {
    /// Its state.
    pub state: InstanceState,
    /// Calls the instance may hold (`None`: no instance ceiling).
    pub ceiling: Option<u32>,
    /// p99 lateness over the window (`None` with too few samples).
    pub p99: Option<Duration>,
    /// Samples in the window.
    pub samples: u64,
    /// Times the controller went Overloaded since start.
    pub trips: u64,
}

#[derive(Debug)]
struct Slice {
    start: Instant,
    lag: LagHistogram,
    min_active: u32,
}

/// The controller. Owned by the gate's state; see the module docs for the
/// law it follows.
#[derive(Debug)]
pub struct InstanceCeiling {
    cfg: InstanceConfig,
    slices: VecDeque<Slice>,
    state: InstanceState,
    ceiling: Option<u32>,
    /// When the ceiling last changed (a trip, a reopen or a step up).
    changed_at: Instant,
    trips: u64,
    /// The window's p99 and sample count as of the last [`Self::observe`]
    /// (the only place the window changes), so [`Self::view`] — read on
    /// every admission decision — merges nothing.
    p99: Option<Duration>,
    samples: u64,
}

impl InstanceCeiling {
    /// A healthy controller with an empty window.
    #[must_use]
    pub fn new(cfg: InstanceConfig, now: Instant) -> Self {
        Self {
            cfg,
            slices: VecDeque::new(),
            state: InstanceState::Healthy,
            ceiling: None,
            changed_at: now,
            trips: 0,
            p99: None,
            samples: 0,
        }
    }

    /// The configuration in force.
    #[must_use]
    pub fn config(&self) -> InstanceConfig {
        self.cfg
    }

    /// Hot reload. Switching it off clears the ceiling at once (the window
    /// of samples is kept); a new bound applies from the next sample.
    pub fn set_config(&mut self, cfg: InstanceConfig, now: Instant) {
        self.cfg = cfg;
        if !cfg.is_on() {
            self.state = InstanceState::Healthy;
            self.ceiling = None;
            self.changed_at = now;
        }
    }

    /// The current state, ceiling and p99.
    #[must_use]
    pub fn view(&self) -> InstanceView {
        InstanceView {
            state: self.state,
            ceiling: self.ceiling,
            p99: self.p99,
            samples: self.samples,
            trips: self.trips,
        }
    }

    /// Feeds lateness samples taken since the last call, with the calls
    /// active now and the capacity the four ceilings allow, and steps the
    /// control law. Returns the state before and after.
    pub fn observe(
        &mut self,
        now: Instant,
        lag: &LagHistogram,
        active: u32,
        configured: u32,
    ) -> (InstanceState, InstanceState) {
        let before = self.state;
        // The window is kept even when the ceiling is off: the p99 is still
        // reported, and still names the instance when a stall coincides.
        self.slide(now, active);
        if let Some(slice) = self.slices.back_mut() {
            slice.lag.merge(lag);
            slice.min_active = slice.min_active.min(active);
        }
        let merged = self.window_lag();
        self.samples = merged.count();
        self.p99 = (self.samples >= MIN_SAMPLES)
            .then(|| merged.quantile(QUANTILE))
            .flatten();
        if !self.cfg.is_on() {
            return (before, before);
        }
        if let Some(p99) = self.p99 {
            self.step(now, p99, active, configured);
        }
        (before, self.state)
    }

    /// Drops slices older than the window and opens a new one when the
    /// newest is a full slice old.
    fn slide(&mut self, now: Instant, active: u32) {
        let slice_len = self.cfg.window / SLICES;
        while self
            .slices
            .front()
            .is_some_and(|s| now.saturating_duration_since(s.start) >= self.cfg.window)
        {
            self.slices.pop_front();
        }
        let fresh = self
            .slices
            .back()
            .is_none_or(|s| now.saturating_duration_since(s.start) >= slice_len);
        if fresh {
            self.slices.push_back(Slice {
                start: now,
                lag: LagHistogram::default(),
                min_active: active,
            });
        }
    }

    fn window_lag(&self) -> LagHistogram {
        let mut merged = LagHistogram::default();
        for s in &self.slices {
            merged.merge(&s.lag);
        }
        merged
    }

    /// The fewest calls active at any point of the window.
    fn healthy_level(&self, active: u32) -> u32 {
        self.slices
            .iter()
            .map(|s| s.min_active)
            .min()
            .unwrap_or(active)
            .min(active)
    }

    fn step(&mut self, now: Instant, p99: Duration, active: u32, configured: u32) {
        let over = p99 > self.cfg.max_lag;
        match self.state {
            InstanceState::Healthy if over => {
                self.trip(now, self.healthy_level(active));
            }
            InstanceState::Healthy => {}
            InstanceState::Overloaded if p99 <= self.cfg.reopen_lag() => {
                self.state = InstanceState::Recovering;
                self.changed_at = now;
            }
            InstanceState::Overloaded => {
                self.ceiling = Some(self.ceiling.map_or(active, |c| c.min(active)));
            }
            InstanceState::Recovering if over => {
                self.trip(now, self.ceiling.map_or(active, |c| c.min(active)));
            }
            InstanceState::Recovering => self.step_up(now, configured),
        }
    }

    fn trip(&mut self, now: Instant, ceiling: u32) {
        self.state = InstanceState::Overloaded;
        self.ceiling = Some(ceiling);
        self.changed_at = now;
        self.trips = self.trips.saturating_add(1);
    }

    /// Additive increase: a tenth of the ceiling (at least one call) per
    /// healthy window; at the configured capacity the ceiling is gone.
    fn step_up(&mut self, now: Instant, configured: u32) {
        if now.saturating_duration_since(self.changed_at) < self.cfg.window {
            return;
        }
        let current = self.ceiling.unwrap_or(configured);
        let raised = current.saturating_add((current / 10).max(1));
        self.changed_at = now;
        if raised >= configured {
            self.state = InstanceState::Healthy;
            self.ceiling = None;
        } else {
            self.ceiling = Some(raised);
        }
    }
}
