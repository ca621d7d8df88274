//! When each call is dialled: all at once, at a steady rate, or on a ramp.

use std::time::Duration;

use crate::error::LoadError;

/// The arrival process of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    /// Dial every call at time zero (the concurrency limit still applies).
    AllAtOnce,
    /// A steady rate: call `i` is dialled at `i / per_second`.
    Rate { per_second: f64 },
    /// The rate rises (or falls) linearly from `from_per_s` to `to_per_s`
    /// over `over`, then stays at `to_per_s`.
    Ramp {
        from_per_s: f64,
        to_per_s: f64,
        over: Duration,
    },
}

impl Arrival {
    /// Checks the rates can place every call in finite time.
    ///
    /// # Errors
    /// [`LoadError::InvalidConfig`] naming the offending value.
    pub fn validate(&self) -> Result<(), LoadError> {
        let bad = |reason: String| {
            Err(LoadError::InvalidConfig {
                field: "arrival",
                reason,
            })
        };
        match *self {
            Arrival::AllAtOnce => Ok(()),
            Arrival::Rate { per_second } if !(per_second.is_finite() && per_second > 0.0) => bad(
                format!("rate must be a positive number of calls per second, got {per_second}"),
            ),
            Arrival::Ramp {
                from_per_s,
                to_per_s,
                ..
            } if !(from_per_s.is_finite()
                && from_per_s >= 0.0
                && to_per_s.is_finite()
                && to_per_s > 0.0) =>
            {
                bad(format!(
                    "ramp needs from >= 0 and to > 0 calls per second, got {from_per_s} -> {to_per_s}"
                ))
            }
            _ => Ok(()),
        }
    }

    /// When call `index` (0-based) is dialled, from the start of the run.
    /// Invalid rates (see [`Arrival::validate`]) dial at once.
    pub fn offset(&self, index: usize) -> Duration {
        let i = index as f64;
        let secs = match *self {
            Arrival::AllAtOnce => 0.0,
            Arrival::Rate { per_second } => i / per_second,
            Arrival::Ramp {
                from_per_s,
                to_per_s,
                over,
            } => ramp_offset(i, from_per_s, to_per_s, over.as_secs_f64()),
        };
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::ZERO)
    }
}

/// Solves N(t) = i for the cumulative arrivals of a linear ramp:
/// N(t) = a·t + k·t²/2 with k = (b − a)/T while t ≤ T, then b per second.
fn ramp_offset(i: f64, a: f64, b: f64, over: f64) -> f64 {
    let at_end = (a + b) / 2.0 * over;
    if over <= 0.0 || i > at_end {
        return over.max(0.0) + (i - at_end.max(0.0)) / b;
    }
    let k = (b - a) / over;
    if k.abs() < 1e-12 {
        return i / a;
    }
    // For k < 0 the discriminant stays ≥ b² ≥ 0 because i ≤ N(T).
    (-a + (a * a + 2.0 * k * i).max(0.0).sqrt()) / k
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(d: Duration, secs: f64) -> bool {
        (d.as_secs_f64() - secs).abs() < 1e-6
    }

    #[test]
    fn all_at_once_and_steady_rate() {
        assert_eq!(Arrival::AllAtOnce.offset(41), Duration::ZERO);
        let rate = Arrival::Rate { per_second: 4.0 };
        assert!(close(rate.offset(0), 0.0));
        assert!(close(rate.offset(10), 2.5));
    }

    #[test]
    fn ramp_speeds_up_then_holds_the_final_rate() {
        // 0 → 10 calls/s over 10 s: N(t) = t²/2, so call 8 at t = 4 s,
        // 50 calls by t = 10 s, then 10 per second.
        let ramp = Arrival::Ramp {
            from_per_s: 0.0,
            to_per_s: 10.0,
            over: Duration::from_secs(10),
        };
        assert!(close(ramp.offset(0), 0.0));
        assert!(close(ramp.offset(8), 4.0));
        assert!(close(ramp.offset(50), 10.0));
        assert!(close(ramp.offset(60), 11.0));
        let offsets: Vec<_> = (0..80).map(|i| ramp.offset(i)).collect();
        assert!(offsets.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn a_falling_ramp_and_a_flat_ramp_are_solved_too() {
        let down = Arrival::Ramp {
            from_per_s: 10.0,
            to_per_s: 2.0,
            over: Duration::from_secs(4),
        };
        // N(4) = (10 + 2)/2 · 4 = 24; then 2 per second.
        assert!(close(down.offset(24), 4.0));
        assert!(close(down.offset(26), 5.0));
        let flat = Arrival::Ramp {
            from_per_s: 5.0,
            to_per_s: 5.0,
            over: Duration::from_secs(2),
        };
        assert!(close(flat.offset(5), 1.0));
    }

    #[test]
    fn rates_that_never_place_every_call_are_refused() {
        assert!(Arrival::Rate { per_second: 0.0 }.validate().is_err());
        assert!(
            Arrival::Rate {
                per_second: f64::NAN
            }
            .validate()
            .is_err()
        );
        let stalls = Arrival::Ramp {
            from_per_s: 5.0,
            to_per_s: 0.0,
            over: Duration::from_secs(1),
        };
        assert!(stalls.validate().is_err());
        assert!(Arrival::Rate { per_second: 0.5 }.validate().is_ok());
    }
}
